"""Measured costs and acceptance priors, saved per pair and machine (`specchat tune`, or a quick
calibration the first time `--mode auto` runs), so that the adaptive drafter starts from this
machine's numbers instead of guesses, and learns the rest online.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from .costmodel import measure
from .drafters.adaptive import MAX_K, MODEL_MAX_K, Costs, best_length, expected_tokens
from .paths import config_dir, write_atomic

# Batch sizes timed on a first run (once per pair and machine); auto drafts only to measured sizes.
# Costs are not smooth in n: on this 2-core AVX-512 CPU a batch of 16 costs 8.6 target steps and one of
# 15 costs 10.1 (multiples of 16 suit llama.cpp's kernels), so the powers of two and multiples of 16 are
# measured, up to the longest copy (a batch of 64: 63 copied tokens and the target's own). `specchat tune`
# times FULL_BATCHES.
QUICK_BATCHES = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)
FULL_BATCHES = (*range(1, 17), 20, 24, 28, 32, 40, 48, 56, 64)
VERSION = 3  # 3: batch sizes that include the multiples of 16


@dataclass
class Tuning:
    key: str
    costs: Costs
    priors: dict[str, float] = field(default_factory=dict)
    source: str = "calibration"  # or "tune"
    details: dict = field(default_factory=dict)

    def draft_model_can_pay(self) -> bool:
        """Could the draft model beat the target alone even if every guess were accepted?"""
        if self.costs.draft_step is None:
            return True  # unknown: let the adaptive drafter find out
        k, _ = best_length([1.0] * MODEL_MAX_K, self.costs.draft_step, self.costs, MODEL_MAX_K)
        return k > 0

    def as_dict(self) -> dict:
        return {
            "version": VERSION,
            "key": self.key,
            "source": self.source,
            "verify_s": {str(n): s for n, s in sorted(self.costs.verify.items())},
            "draft_step_s": self.costs.draft_step,
            "priors": self.priors,
            "details": self.details,
        }


def machine_key(target: Path, draft: Path | None, threads: int, gpu_layers: int, draft_gpu_layers: int) -> str:
    """Tuning is valid for these files on this CPU/GPU setup and llama.cpp build."""
    import platform

    import llama_cpp

    from .bench import machine_info

    parts = [
        machine_info()["cpu"],
        platform.machine(),
        llama_cpp.__version__,
        str(threads),
        str(gpu_layers),
        str(draft_gpu_layers),
    ]
    for path in (target, draft):
        if path is not None:
            stat = path.stat()
            parts += [path.name, str(stat.st_size)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def tuning_path(key: str) -> Path:
    return config_dir() / "tuning" / f"{key}.json"


def load(key: str) -> Tuning | None:
    try:
        data = json.loads(tuning_path(key).read_text(encoding="utf-8"))
        if data.get("version") != VERSION:
            return None
        costs = Costs({int(n): float(s) for n, s in data["verify_s"].items()}, data.get("draft_step_s"))
        return Tuning(
            key, costs, dict(data.get("priors", {})), data.get("source", "calibration"), dict(data.get("details", {}))
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing or unreadable: calibrate again rather than fail


def save(tuning: Tuning) -> Path:
    """Atomic, so concurrent first runs cannot collide."""
    path = tuning_path(tuning.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(tuning.as_dict(), indent=2))
    return path


def calibrate(target, draft, context: list[int], key: str, *, full: bool = False) -> Tuning:
    """Time single steps and verify batches: a few sizes (a few seconds on a CPU), or more when full."""
    sizes = FULL_BATCHES if full else QUICK_BATCHES
    model = measure(target, draft, context, max_batch=max(sizes), repeats=3 if full else 2, sizes=sizes)
    costs = Costs(dict(model.verify_s), model.draft_step_s)
    return Tuning(key, costs, source="tune" if full else "calibration")


CALIBRATION_TEXT = (
    "def merge(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
    "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n"
    "            out.append(b[j])\n            j += 1\n    return out + a[i:] + b[j:]\n"
)


def key_for(resolved, options) -> str:
    return machine_key(
        resolved.target, resolved.draft, options.threads, options.target_gpu_layers, options.draft_gpu_layers
    )


def setup_auto(pipeline, *, use_saved: bool, notify, keep_draft: bool = False, tuning: Tuning | None = None) -> Tuning:
    """Give the pipeline its adaptive drafter: the given or saved tuning, else a quick calibration (saved)."""
    from .drafters.adaptive import AdaptiveDrafter

    key = key_for(pipeline.resolved, pipeline.options)
    if tuning is None and use_saved:
        tuning = load(key)
    if tuning is None:
        notify("measuring llama.cpp's costs on this machine for --mode auto (once; `specchat tune` refines)")
        context = pipeline.target.tokenize(CALIBRATION_TEXT)
        tuning = calibrate(pipeline.target, pipeline.draft, context, key)
        if use_saved:
            try:
                save(tuning)
            except OSError as exc:  # not worth failing a run for: next time it measures again
                notify(f"could not save the measurement ({exc.strerror or exc}); it will be repeated next time")
    costs = Costs(dict(tuning.costs.verify), tuning.costs.draft_step)
    target = pipeline.target
    pipeline.auto = AdaptiveDrafter(
        costs,
        ngram=pipeline.ngram,
        model=pipeline.drafter,
        priors=tuning.priors,
        ends_copy=target.is_control,
    )
    if not tuning.draft_model_can_pay():
        step = costs.verify_time(1)
        c, v5 = costs.draft_step / step, costs.verify_time(5) / step
        pipeline.mode_note = (
            "auto: draft model off: even if every guess were accepted it could not beat the target here "
            f"(a draft step costs {c:.2f} target steps, a batch of 5 costs {v5:.1f})"
        )
        if keep_draft:  # the bench still compares the draft model, outside auto
            pipeline.auto.model = None
        else:
            pipeline.drop_draft()
    else:
        pipeline.mode_note = "auto: drafts only when the measured costs and acceptance say it pays"
    return tuning


@dataclass(frozen=True)
class ModeEstimate:
    mode: str
    k: int
    acceptance: float | None
    predicted_speedup: float
    best_drafting_k: int = 0  # the best k >= 1, and its predicted speedup (below 1: drafting loses here)
    drafting_speedup: float | None = None


def conditional_rates(drafted_at: list[int], accepted_at: list[int]) -> list[float]:
    """P(position i accepted | position i-1 accepted), from per-position counts of a fixed-k run."""
    rates = []
    for i, (drafted, accepted) in enumerate(zip(drafted_at, accepted_at, strict=True)):
        reached = accepted_at[i - 1] if i else drafted
        rates.append(accepted / reached if reached else 0.0)
        del drafted
    return rates


def tune(pipeline, prompts: list, *, max_tokens: int, notify, progress=None) -> tuple[Tuning, list[ModeEstimate]]:
    """Full calibration plus measured acceptance of each strategy; predicted speedup per mode."""
    from .chat import Message
    from .sampling import SamplingParams
    from .speculative import Stats

    options, resolved = pipeline.options, pipeline.resolved
    key = machine_key(
        resolved.target, resolved.draft, options.threads, options.target_gpu_layers, options.draft_gpu_layers
    )
    notify("timing single steps and verify batches of 1..16, 20, 24, 28, 32, 40, 48, 56 and 64 tokens")
    context = pipeline.target.tokenize(CALIBRATION_TEXT)
    tuning = calibrate(pipeline.target, pipeline.draft, context, key, full=True)
    greedy = SamplingParams()
    totals: dict[str, Stats] = {}
    plan = [("spec", 8), ("ngram", MAX_K)] if pipeline.draft is not None else [("ngram", MAX_K)]
    for index, (mode, k) in enumerate((m, k) for m, k in plan for _ in prompts):
        prompt = prompts[index % len(prompts)]
        if progress:
            progress(f"{mode} k={k} · {prompt.category} #{prompt.id}", index)
        pipeline.reset()
        ids = pipeline.prompt([Message("user", prompt.text)])
        _, _, stats = pipeline.generate(ids, greedy, k=k, max_tokens=max_tokens, mode=mode)
        if stats.stop_reason == "interrupted":  # generate keeps the text; tune must stop, not save
            raise KeyboardInterrupt
        totals.setdefault(mode, Stats(drafted_at=[0] * k, accepted_at=[0] * k)).merge(stats)
    estimates = [ModeEstimate("target", 0, None, 1.0)]
    costs = tuning.costs
    for mode, stats in totals.items():
        rates = conditional_rates(stats.drafted_at, stats.accepted_at)
        step = costs.draft_step if mode == "spec" else Costs({}).ngram_step
        k, speed = best_length(rates, step or 0.0, costs, len(rates))
        expected = expected_tokens(rates)
        # The best k >= 1 among the measured batch sizes, as auto would pick it (shows why a mode loses).
        speeds = {j: expected[j] / (j * (step or 0.0) + costs.verify_time(j + 1)) for j in range(1, len(expected))}
        speeds = {j: speed for j, speed in speeds.items() if j + 1 in costs.verify}
        forced = max(speeds, key=speeds.__getitem__) if speeds else None
        estimates.append(
            ModeEstimate(
                mode,
                k,
                stats.acceptance_rate,
                speed * costs.verify_time(1),
                forced or 0,
                speeds[forced] * costs.verify_time(1) if forced is not None else None,
            )
        )
        if mode == "spec":
            tuning.priors["draft-model"] = round(stats.acceptance_rate, 4)
    tuning.details = {
        "acceptance": {mode: round(s.acceptance_rate, 4) for mode, s in totals.items()},
        "estimates": [e.__dict__ for e in estimates],
        "prompts": len(prompts),
        "max_tokens": max_tokens,
    }
    return tuning, estimates
