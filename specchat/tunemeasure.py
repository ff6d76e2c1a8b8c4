"""Measuring what auto starts from (a quick calibration the first time `--mode auto` runs, or `specchat tune`):
the costs of single steps, verify batches and a draft step, and each strategy's measured acceptance, with the
speedup each mode is predicted. What is saved is tuningsave.py's, when it is trusted tuning.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .costmeasure import measure
from .costmodel import Costs
from .tuning import Tuning, examine, key_for, measured_on, trusted, written_by_newer
from .tuningsave import save_calibration

# Batch sizes timed on a first run (once per pair and machine); auto drafts only to measured sizes.
# Costs are not smooth in n (multiples of 16 suit llama.cpp's CPU kernels), so the powers of two and
# multiples of 16 are measured, up to the longest copy. `specchat tune` times FULL_BATCHES.
QUICK_BATCHES = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)
FULL_BATCHES = (*range(1, 17), 20, 24, 28, 32, 40, 48, 56, 64)

CALIBRATION_TEXT = (
    "def merge(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
    "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n"
    "            out.append(b[j])\n            j += 1\n    return out + a[i:] + b[j:]\n"
)


def calibrate(target, draft, key: str, *, full: bool = False, threads: int = 0) -> Tuning:
    """Time single steps, verify batches and a draft step, interleaved, after a real context, on `threads` (0:
    the default), which the tuning records (measured_on). In a context
    too small for the text and a batch of 64 after it (another backend's exact `--ctx 128`), batches of up
    to half the context after the text's end: such a result is marked partial, for that run only."""
    context = target.tokenize(CALIBRATION_TEXT)
    sizes = FULL_BATCHES if full else QUICK_BATCHES
    details = {}
    if len(context) + max(sizes) > target.n_ctx:
        largest = max(n for n in sizes if n <= target.n_ctx // 2)
        context, sizes = context[-(target.n_ctx - largest) :], [n for n in sizes if n <= largest]
        details["partial"] = f"measured in a context of {target.n_ctx} tokens, too small for the whole measurement"
    costs = measure(target, draft, context, sizes, repeats=3 if full else 2)
    return Tuning(key, costs, source="tune" if full else "calibration", details=details, machine=measured_on(threads))


def prepare(target, draft, key: str, *, use_saved: bool, notify, threads: int = 0) -> Tuning:
    """The tuning auto starts from: the saved one when it can be trusted, else a fresh calibration,
    saved only when it was taken on a quiet machine (priors measured by `tune` are kept)."""
    saved, problem = examine(key) if use_saved else (None, None)
    if trusted(saved):
        return saved
    # not "once": a calibration taken while the CPUs are busy is not saved, and every such run measures again
    why = "none saved yet; `specchat tune` refines"
    if not use_saved:  # --no-tuning: "yet" read as if this one would be kept, and every such run measures again
        why = "--no-tuning: for this run only, not saved"
    elif saved is not None:  # `tune` ran: "none saved" read as if it had not
        why = "the saved one is stale" if saved.stale else "the saved one was measured under load"
        why += "; `specchat tune` refines"
    elif problem is not None:  # "none saved" hid the broken file, which went unnamed
        why = f"the saved tuning {problem}; `specchat tune` refines"
    notify(f"measuring llama.cpp's costs on this machine for --mode auto ({why})")
    tuning = calibrate(target, draft, key, threads=threads)
    if saved is not None:
        tuning.priors = saved.priors
    partial = tuning.details.pop("partial", None)
    if partial is not None:  # kept for no other run: a later one with a larger --ctx measures every size
        notify(f"{partial}: used for this run only, measured again next time")
    elif tuning.costs.busy:
        notify("other programs were using the CPUs while measuring: used for this run only, measured again next time")
    elif use_saved and saved is None and problem is not None and written_by_newer(key):
        notify("used for this run only: the newer specchat's tuning is kept (upgrade specchat to start from it)")
    elif use_saved:
        try:
            save_calibration(tuning)
        except OSError as exc:  # not worth failing a run for: next time it measures again
            notify(f"could not save the measurement ({exc.strerror or exc}); it will be repeated next time")
    return tuning


def conditional_rates(drafted_at: list[int], accepted_at: list[int]) -> list[float]:
    """P(position i accepted | position i-1 accepted), from per-position counts of a fixed-k run.

    Rounds that reached position i accepted i - 1 and drafted i: at most the fewer of the two counts
    (a round cut short by max_tokens accepted i - 1 but never drafted i, and must not count as a miss)."""
    rates = []
    for i, drafted in enumerate(drafted_at):
        reached = min(accepted_at[i - 1], drafted) if i else drafted
        rates.append(accepted_at[i] / reached if reached else 0.0)
    return rates


@dataclass(frozen=True)
class ModeEstimate:
    mode: str
    k: int
    acceptance: float | None
    predicted_speedup: float
    best_drafting_k: int = 0  # the best k >= 1, and its predicted speedup (below 1: drafting loses here)
    drafting_speedup: float | None = None


def estimate(mode: str, stats, costs: Costs) -> ModeEstimate:
    """Predicted speedup of a mode from its measured per-position acceptance, as auto would judge it."""
    from .costmodel import LOOKUP_STEP

    rates = conditional_rates(stats.drafted_at, stats.accepted_at)
    step = (costs.draft_step or 0.0) if mode == "spec" else LOOKUP_STEP
    k, speedup = costs.best_length(rates, step)
    drafting = [(j, s) for j, s in enumerate(costs.speedup(rates, step)) if j and costs.measured(j + 1)]
    forced = max(drafting, key=lambda item: item[1], default=(0, None))
    return ModeEstimate(mode, k, stats.acceptance_rate, speedup, forced[0], forced[1])


def batch_sizes(sizes: tuple[int, ...]) -> str:
    """(1, 2, ..., 16, 20, 24) as "1..16, 20 and 24": a run of consecutive sizes from 1 written as a range."""
    run = next((i for i, n in enumerate(sizes, start=1) if n != i), len(sizes) + 1) - 1
    words = ([f"1..{sizes[run - 1]}"] if run > 2 else [str(n) for n in sizes[:run]]) + [str(n) for n in sizes[run:]]
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else words[0]


def tune(pipeline, prompts: list, *, max_tokens: int, notify, progress=None) -> tuple[Tuning, list[ModeEstimate]]:
    """Full calibration plus measured acceptance of each strategy; predicted speedup per mode."""
    from .chat import Message
    from .errors import UsageError
    from .modes import NGRAM
    from .sampling import SamplingParams
    from .speculative import Stats

    prompt_ids = [pipeline.prompt([Message("user", prompt.text)]) for prompt in prompts]
    needed = max(max(map(len, prompt_ids)) + 1, len(pipeline.target.tokenize(CALIBRATION_TEXT)) + max(FULL_BATCHES))
    if needed > pipeline.target.n_ctx:  # found before minutes of measuring, not after
        # 1024 holds it for the usual tokenizers; a finer one (bytes, characters) needs more: a round 256
        enough = max(1024, -(-needed // 256) * 256)
        asked, made = pipeline.options.n_ctx, pipeline.target.n_ctx  # --ctx 64: llama.cpp makes 256
        size = f"a context of {made} tokens" if asked in (made, 0) else f"--ctx {asked} (llama.cpp makes {made} tokens)"
        raise UsageError(
            f"{size} cannot hold what tune measures ({needed} tokens)",
            hint=f"use --ctx {enough} or more (the default is 4096)",
        )
    notify(f"timing single steps and verify batches of {batch_sizes(FULL_BATCHES)} tokens")
    options = pipeline.options  # threads as capped to the usable CPUs
    result = calibrate(
        pipeline.target, pipeline.draft, key_for(pipeline.resolved, options), full=True, threads=options.threads
    )
    if result.costs.busy:
        notify("other programs were using the CPUs while measuring: the numbers may be off; run tune again when idle")
    plan = [(m, k) for m, k in (("spec", 8), ("ngram", NGRAM.max_k - 1)) if pipeline.available(m)]
    totals: dict[str, Stats] = {}
    for index, (mode, k) in enumerate((m, k) for m, k in plan for _ in prompts):
        prompt = prompts[index % len(prompts)]
        if progress:
            progress(f"{mode} k={k} · {prompt.category} #{prompt.id}", index)
        pipeline.reset()
        ids = prompt_ids[index % len(prompts)]
        stats = pipeline.generate(ids, SamplingParams(), mode=mode, k=k, max_tokens=max_tokens).stats
        if stats.stop_reason == "interrupted":  # generate keeps the text; tune must stop, not save
            raise KeyboardInterrupt
        totals.setdefault(mode, Stats()).merge(stats)
    estimates = [ModeEstimate("target", 0, None, 1.0)]
    estimates += [estimate(mode, stats, result.costs) for mode, stats in totals.items()]
    if "spec" in totals:
        result.priors["spec"] = round(totals["spec"].acceptance_rate, 4)
    result.details = {
        "acceptance": {mode: round(s.acceptance_rate, 4) for mode, s in totals.items()},
        "estimates": [e.__dict__ for e in estimates],
        "prompts": len(prompts),
        "max_tokens": max_tokens,
    }
    return result, estimates
