"""Measuring the cost model: the ratios c and v(n) timed interleaved after a real context (costmodel.Costs),
and whether other processes used the CPUs meanwhile (the result is then marked busy)."""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .costmodel import Costs
from .cpuload import Counters, affinity_cpus, cpu_counters, others_cpus
from .models_api import LanguageModel, readable_by

BUSY_SHARE = 0.25  # other processes used more than this share of the CPUs while we measured: "busy"
AGREE = 0.1  # two timings of a batch size within this share of each other: settled (see measure)
EXTRA_REPEATS = 2  # ... else it is timed again, at most this many more times


def _timed(model: LanguageModel, tokens: Sequence[int], n_logits: int, base: int, clock: Callable[[], float]) -> float:
    model.truncate(base)
    start = clock()
    model.eval(tokens, n_logits)
    return clock() - start


def measure(
    target: LanguageModel,
    draft: LanguageModel | None,
    context: Sequence[int],
    sizes: Sequence[int],
    *,
    repeats: int = 2,
    clock: Callable[[], float] = time.perf_counter,
    load: CpuLoad | None = None,
) -> Costs:
    """Time verify batches of `sizes` and a draft step after a real context, INTERLEAVED: every batch
    is timed next to a single target step, and v(n) is the median of those paired ratios, so a load that
    comes and goes during the measurement shifts both sides of each ratio alike. Marks the result busy
    when other processes used the CPUs meanwhile, or the single steps disagree among themselves."""
    sizes = sorted(set(sizes) | {1})
    probe = (list(context[-max(sizes) :]) * (max(sizes) // max(1, len(context)) + 1))[: max(sizes)]
    base = len(context)
    load = load or CpuLoad()
    target.truncate(0)
    target.eval(context, 0)
    if draft is not None:  # it reads only its own tokens (a draft may know fewer: readable_by)
        draft.truncate(0)
        draft.eval(readable_by(draft, context), 0)
        draft_probe = readable_by(draft, probe[:1])
    steps: list[float] = []
    ratios: dict[int, list[float]] = {n: [] for n in sizes}
    draft_ratios: list[float] = []

    def time_pair(n: int) -> float:
        single = max(_timed(target, probe[:1], 1, base, clock), 1e-9)
        steps.append(single)
        ratios[n].append(_timed(target, probe[:n], n, base, clock) / single if n > 1 else 1.0)
        return single

    for _ in range(repeats):
        for n in sizes:
            single = time_pair(n)
            if draft is not None and n in (1, 8, 32):
                draft_ratios.append(_timed(draft, draft_probe, 1, base, clock) / single)
    # A hiccup of a shared machine in one timing moves a median of two by half of it (on a 2-core VM a
    # batch of 64 read as 17.6 target steps instead of about 24.5): sizes whose timings disagree are
    # timed again until two agree, and the median of all is kept. Not on a busy machine: there timings
    # rarely agree, so nearly every size was timed twice more (beside other work a first run measured for
    # 87 s; 42 s without the retiming), for a result that is used for one run only and never saved.
    if not _busy(steps, load):
        for n in sizes[1:]:
            while len(ratios[n]) < repeats + EXTRA_REPEATS and not _settled(ratios[n]):
                time_pair(n)
    target.truncate(0)
    if draft is not None:
        draft.truncate(0)
    step = statistics.median(steps)
    return Costs(
        {n: statistics.median(r) for n, r in ratios.items()},
        statistics.median(draft_ratios) if draft_ratios else None,
        step,
        step,
        busy=_busy(steps, load),
    )


def _busy(steps: Sequence[float], load: CpuLoad) -> bool:
    """Other processes used the CPUs, or the single steps disagree (a quiet machine repeats a single step
    within a few percent; this catches load that /proc cannot show)."""
    return max(steps) > 2.0 * min(steps) or load.busy()


def _settled(values: Sequence[float]) -> bool:
    """Two of the timings agree within AGREE, so their median is not one hiccup."""
    ordered = sorted(values)
    return len(ordered) < 2 or any(b <= a * (1 + AGREE) for a, b in itertools.pairwise(ordered))


@dataclass
class CpuLoad:
    """How much CPU OTHER processes used since this was made (Linux /proc; elsewhere unknown = quiet)."""

    start: Counters | None = field(default=None)
    started_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.start = cpu_counters()

    def other_share(self) -> float | None:
        end = cpu_counters()
        elapsed = time.monotonic() - self.started_at
        if self.start is None or end is None or elapsed <= 0:
            return None
        return others_cpus(self.start, end, elapsed) / affinity_cpus()  # the CPUs whose load was read

    def busy(self) -> bool:
        share = self.other_share()
        return share is not None and share > BUSY_SHARE
