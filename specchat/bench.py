"""`specchat bench`: target alone vs speculative decoding, side by side, in one run.

Methodology: a warm-up per variant; then for each repetition and each prompt, every variant runs back to
back, in an order rotated from block to block, so that drift of a shared machine hits all variants alike
and none always runs first. Greedy outputs are checked against the target-alone output of the block.
tok/s = generated tokens / decode time (prefill excluded: it is the same for all variants and reported
separately as time to first token). The speedup is the median of paired ratios
(variant tok/s / target tok/s, same prompt, same repetition), never a ratio of medians.
"""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field

import numpy as np

from .benchsuite import Prompt
from .costmodel import Costs, iid_expected
from .modes import AUTO, DRAFTING, NGRAM, SUFFIX
from .sampling import SamplingParams
from .speculative import Stats

Pipeline = object  # runtime.Pipeline, not imported: tuning (which runtime uses) imports this module

NEAR_TIE = 0.5  # logits; see tests/test_real_lossless.py for the measurement behind it


@dataclass(frozen=True)
class Variant:
    name: str
    k: int
    mode: str = "spec"


BENCH_MODES = DRAFTING  # compared with the target alone: the draft model per k, prompt lookup, suffix, auto


def variants_for(ks: Sequence[int], modes: Sequence[str] = ("spec",)) -> list[Variant]:
    """Target alone first (the reference), then the draft model per k, prompt lookup, suffix, auto."""
    out = [Variant("target", 0, "target")]
    if "spec" in modes:
        out += [Variant(f"k={k}", k, "spec") for k in ks]
    for mode in (NGRAM, SUFFIX):
        if mode.name in modes:
            out.append(Variant(f"{mode.name} k={mode.default_k}", mode.default_k, mode.name))
    if "auto" in modes:
        out.append(Variant("auto", AUTO.default_k, "auto"))
    return out


@dataclass
class Sample:
    prompt_id: str
    category: str
    variant: str
    k: int
    rep: int
    tokens_per_s: float
    generated: int
    decode_s: float
    ttft_s: float
    rounds: int
    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    drafted_at: list[int]
    accepted_at: list[int]
    lossless: str = ""  # "reference" | "equal" | "near-tie" | "MISMATCH"
    divergence_margin: float | None = None
    mode: str = "spec"
    rounds_by_source: dict = field(default_factory=dict)
    turn: int = 1  # which turn of the record (1-based); pair samples by (prompt_id, turn, rep)

    @classmethod
    def of(cls, prompt: Prompt, variant: Variant, rep: int, stats: Stats, turn: int = 1) -> Sample:
        return cls(
            prompt.id,
            prompt.category,
            variant.name,
            variant.k,
            rep,
            stats.tokens_per_s,
            stats.generated,
            stats.decode_s,
            stats.first_token_s,
            stats.rounds,
            stats.drafted,
            stats.accepted,
            stats.draft_s,
            stats.verify_s,
            list(stats.drafted_at),
            list(stats.accepted_at),
            mode=variant.mode,
            rounds_by_source=dict(stats.rounds_by_source),
            turn=turn,
        )


@dataclass
class Row:
    """One line of the report: a category (or "all") and a variant."""

    category: str
    variant: str
    k: int
    n: int
    tokens_per_s: float
    speedup: float | None
    acceptance_rate: float | None
    mean_accepted_length: float | None
    position_acceptance: list[float]
    draft_share: float | None
    ttft_s: float
    predicted_speedup: float | None  # S(k) from the acceptance rate (independent acceptances assumed)
    cost_model_speedup: float | None  # the same cost model with the MEASURED tokens per round
    turn: int | None = None  # set where a category's records have several turns: one row per turn

    @property
    def label(self) -> str:
        return self.category if self.turn is None else f"{self.category} turn {self.turn}"


@dataclass
class BenchResult:
    samples: list[Sample] = field(default_factory=list)
    cost: Costs | None = None
    interrupted: bool = False
    meta: dict = field(default_factory=dict)

    def rows(self) -> list[Row]:
        from .benchturns import groups

        names = list(dict.fromkeys(s.variant for s in self.samples))
        return [
            row for c, turn, mine in groups(self.samples) for name in names if (row := self._row(c, turn, name, mine))
        ]

    def _row(self, category: str, turn: int | None, name: str, samples: list[Sample]) -> Row | None:
        mine = [s for s in samples if s.variant == name]
        if not mine:
            return None
        base = {(s.prompt_id, s.turn, s.rep): s.tokens_per_s for s in samples if s.variant == "target"}
        paired = [(s, base.get((s.prompt_id, s.turn, s.rep))) for s in mine]
        ratios = [s.tokens_per_s / reference for s, reference in paired if reference]
        drafted, accepted, rounds = (sum(getattr(s, f) for s in mine) for f in ("drafted", "accepted", "rounds"))
        k = mine[0].k
        rate = accepted / drafted if drafted else None
        busy = sum(s.draft_s + s.verify_s for s in mine)
        positions = _pooled_positions(mine)
        predicted = modelled = None
        mode = mine[0].mode
        if mode == "spec" and k and rate is not None and self.cost is not None and self.cost.c is not None:
            round_cost = k * self.cost.c + self.cost.v(k + 1)
            predicted = iid_expected(rate, k) / round_cost
            per_round = sum(s.generated for s in mine) / rounds if rounds else 1.0
            modelled = per_round / round_cost
        return Row(
            category,
            name,
            k,
            len(mine),
            statistics.median(s.tokens_per_s for s in mine),
            statistics.median(ratios) if ratios else None,
            rate,
            accepted / rounds if k and rounds else None,
            positions,
            sum(s.draft_s for s in mine) / busy if k and busy else None,
            statistics.median(s.ttft_s for s in mine),
            predicted,
            modelled,
            turn,
        )

    def speedup_series(self) -> dict[str, list[tuple[int, float]]]:
        """(k, speedup) per category, for the plots."""
        series: dict[str, list[tuple[int, float]]] = {}
        for row in self.rows():
            if row.k and row.speedup is not None:
                series.setdefault(row.label, []).append((row.k, row.speedup))
        return series

    def lossless_summary(self) -> dict:
        checked = [s for s in self.samples if s.lossless not in ("", "reference")]
        counts = {kind: sum(s.lossless == kind for s in checked) for kind in ("equal", "near-tie", "MISMATCH")}
        details = [
            {
                "prompt": s.prompt_id,
                "turn": s.turn,
                "variant": s.variant,
                "rep": s.rep,
                "result": s.lossless,
                "margin": s.divergence_margin,
            }
            for s in checked
            if s.lossless != "equal"
        ]
        return {"checked": len(checked), **counts, "details": details}

    def as_dict(self) -> dict:
        return {
            "meta": self.meta,
            "definitions": DEFINITIONS,
            "cost_model": self.cost.as_dict() if self.cost else None,
            "summary": [asdict(row) for row in self.rows()],
            "lossless": self.lossless_summary(),
            "peak_rss_mb": peak_rss_mb(),
            "interrupted": self.interrupted,
            "samples": [asdict(s) for s in self.samples],
        }


DEFINITIONS = {
    "tokens_per_s": "generated tokens / decode time (prefill excluded), median over samples",
    "speedup": "median over (prompt, repetition) of variant tok/s / target-alone tok/s in the same repetition",
    "acceptance_rate": "accepted draft tokens / drafted tokens, pooled",
    "mean_accepted_length": "accepted draft tokens per round, pooled; does NOT count the target's own token",
    "position_acceptance": "acceptance rate at draft position 1..k among rounds that drafted it",
    "draft_share": "draft time / (draft + verify time)",
    "ttft_s": "time to first token (prefill of both models + first round), median",
    "predicted_speedup": "S(k) = E(a,k) / (k c + v(k+1)), E(a,k) = (1 - a^(k+1)) / (1 - a), a = acceptance_rate",
    "cost_model_speedup": "tokens per round (measured) / (k c + v(k+1)): the cost model without the iid assumption",
}


def _pooled_positions(samples: list[Sample]) -> list[float]:
    width = max((len(s.drafted_at) for s in samples), default=0)
    drafted = [sum(s.drafted_at[i] for s in samples if i < len(s.drafted_at)) for i in range(width)]
    accepted = [sum(s.accepted_at[i] for s in samples if i < len(s.accepted_at)) for i in range(width)]
    return [round(a / d, 4) if d else 0.0 for a, d in zip(accepted, drafted, strict=True)]


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    import os

    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def collect_meta(resolved, settings: dict) -> dict:
    """Everything needed to reproduce or compare a run: machine, versions, files (sha256), settings."""
    import datetime

    import llama_cpp

    from . import __version__
    from .download import cached_sha256
    from .engine import default_threads, gpu_offload_supported

    files = {}
    for role, path in (("target", resolved.target), ("draft", resolved.draft)):
        if path is not None:
            files[role] = {"path": str(path), "size": path.stat().st_size, "sha256": cached_sha256(path)}
    machine = {
        **machine_info(),
        "threads": settings.get("threads") or default_threads(),
        "gpu_offload": gpu_offload_supported(),
        "gpu_layers": settings.get("gpu_layers"),
        "draft_gpu_layers": settings.get("draft_gpu_layers"),
    }
    return {
        "title": f"specchat bench, {resolved.pair_name or resolved.target.name}",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "specchat": __version__,
        "llama_cpp_python": llama_cpp.__version__,
        "machine": machine,
        "pair": resolved.pair_name,
        "files": files,
        "settings": settings,
    }


def peak_rss_mb() -> float | None:
    """Peak resident memory of this process (ru_maxrss is KiB on Linux); None where unknown (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    scale = 1 / 1024 if platform.system() == "Linux" else 1 / (1024 * 1024)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale, 1)


Progress = Callable[[str, int], None]  # (description, completed runs)


def run(
    pipeline: Pipeline,
    prompts: list[Prompt],
    variants: list[Variant],
    *,
    reps: int,
    max_tokens: int,
    earlier_tokens: int = 0,
    params: SamplingParams,
    settings: dict,
    notify: Callable[[str], None],
    progress: Callable[[int], AbstractContextManager[Progress]],
) -> BenchResult:
    """The whole measurement: what was run where, the cost model, then the interleaved runs.
    Ctrl-C ends it early and keeps what was measured (result.interrupted)."""
    from . import benchturns
    from .chat import Message
    from .costmodel import measure

    result = BenchResult(meta=collect_meta(pipeline.resolved, settings))
    try:
        notify(
            "measuring the cost model for the report (single steps, verify batches of 1..16); "
            "auto uses its own calibration, up to 64"
        )
        context = pipeline.prompt([Message("user", prompts[0].text)])
        result.cost = measure(pipeline.target, pipeline.draft, context, sizes=range(1, 17))
        with progress(reps * benchturns.count(prompts) * len(variants)) as advance:
            run_bench(
                pipeline,
                prompts,
                variants,
                reps=reps,
                max_tokens=max_tokens,
                earlier_tokens=earlier_tokens,
                params=params,
                result=result,
                progress=advance,
            )
    except KeyboardInterrupt:
        result.interrupted = True
    return result


def run_bench(
    pipeline: Pipeline,
    prompts: list[Prompt],
    variants: list[Variant],
    *,
    reps: int,
    max_tokens: int,
    earlier_tokens: int = 0,
    params: SamplingParams,
    result: BenchResult,
    progress: Progress | None = None,
) -> BenchResult:
    """Fill `result` (passed in so that Ctrl-C keeps what was measured so far). Every turn of every
    record is a block; earlier turns' replies come from the target alone, written once (benchturns), up
    to earlier_tokens each (0: max_tokens)."""
    from . import benchturns

    turns = benchturns.replay(
        pipeline,
        prompts,
        params,
        earlier_tokens or max_tokens,
        progress=(lambda text: progress(text, 0)) if progress else None,
    )
    for variant in variants:
        _generate(pipeline, turns[0].ids, params, variant, min(16, max_tokens))
    done = 0
    for rep in range(reps):
        for index, turn in enumerate(turns):
            # Rotate the order per block, so that no variant always runs first or last (drift, warmth).
            shift = (rep + index) % len(variants)
            outputs: dict[str, list[int]] = {}
            block: list[Sample] = []
            for variant in variants[shift:] + variants[:shift]:
                if progress:
                    progress(f"rep {rep + 1}/{reps} · {turn.label} · {variant.name}", done)
                tokens, stats = _generate(pipeline, turn.ids, params, variant, max_tokens)
                outputs[variant.name] = tokens
                block.append(Sample.of(turn.prompt, variant, rep, stats, turn.number))
                done += 1
            _check_block(pipeline, turn.ids, block, outputs, params)
            result.samples.extend(block)
    if progress:
        progress("done", done)
    return result


def _check_block(pipeline, prompt, block: list[Sample], outputs: dict[str, list[int]], params) -> None:
    """Greedy: every speculative output against the target-alone output of the same block."""
    reference = outputs.get("target")
    for sample in block:
        if sample.k == 0:
            sample.lossless = "reference"
        elif params.greedy and reference is not None:
            sample.lossless, sample.divergence_margin = _lossless(pipeline, prompt, reference, outputs[sample.variant])


def _generate(pipeline: Pipeline, prompt: list[int], params: SamplingParams, variant: Variant, max_tokens: int):
    pipeline.reset()  # every run starts cold: no variant inherits another's prompt in the KV cache
    generation = pipeline.generate(prompt, params, mode=variant.mode, k=variant.k, max_tokens=max_tokens)
    if generation.stats.stop_reason == "interrupted":  # generate keeps a cut-short text; a bench must stop
        raise KeyboardInterrupt
    return generation.tokens, generation.stats


def _lossless(pipeline: Pipeline, prompt: list[int], reference: list[int], tokens: list[int]):
    if tokens == reference:
        return "equal", None
    first = next((i for i, (a, b) in enumerate(zip(reference, tokens, strict=False)) if a != b), None)
    if first is None:  # one run stopped at an end-of-generation token where the other went on
        first = min(len(reference), len(tokens))
    row = pipeline.target_cache.feed(prompt + reference[:first], 1)[0]
    top = np.sort(row)[-2:]
    margin = float(top[1] - top[0])
    return ("near-tie" if margin < NEAR_TIE else "MISMATCH"), round(margin, 4)
