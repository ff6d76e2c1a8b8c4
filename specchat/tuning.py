"""Measured costs and acceptance priors, saved per pair and machine (`specchat tune`, or a quick
calibration the first time `--mode auto` runs), so that the adaptive drafter starts from this
machine's numbers instead of guesses, and learns the rest online.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .costmodel import measure
from .drafters.adaptive import MAX_K, Costs, best_length
from .paths import config_dir

QUICK_BATCHES = (1, 2, 3, 5, 9, 17)
VERSION = 1


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
        k, _ = best_length([1.0] * MAX_K, self.costs.draft_step, self.costs, MAX_K)
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
    path = tuning_path(tuning.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(tuning.as_dict(), indent=2), encoding="utf-8")
    os.replace(tmp, path)
    return path


def calibrate(target, draft, context: list[int], key: str, *, full: bool = False) -> Tuning:
    """Time single steps and verify batches: a few sizes (about a second on a CPU), or 1..16 when full."""
    model = measure(
        target,
        draft,
        context,
        max_batch=16 if full else max(QUICK_BATCHES),
        repeats=3 if full else 1,
        sizes=None if full else QUICK_BATCHES,
    )
    costs = Costs(dict(model.verify_s), model.draft_step_s)
    return Tuning(key, costs, source="tune" if full else "calibration")


CALIBRATION_TEXT = (
    "def merge(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
    "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n"
    "            out.append(b[j])\n            j += 1\n    return out + a[i:] + b[j:]\n"
)


def setup_auto(pipeline, *, use_saved: bool, notify, keep_draft: bool = False) -> Tuning:
    """Give the pipeline its adaptive drafter: saved tuning, else a quick calibration (saved)."""
    from .drafters.adaptive import AdaptiveDrafter

    options, resolved = pipeline.options, pipeline.resolved
    key = machine_key(
        resolved.target, resolved.draft, options.threads, options.target_gpu_layers, options.draft_gpu_layers
    )
    tuning = load(key) if use_saved else None
    if tuning is None:
        notify("measuring llama.cpp's costs on this machine for --mode auto (once; `specchat tune` refines)")
        context = pipeline.target.tokenize(CALIBRATION_TEXT)
        tuning = calibrate(pipeline.target, pipeline.draft, context, key)
        if use_saved:
            save(tuning)
    costs = Costs(dict(tuning.costs.verify), tuning.costs.draft_step)
    target = pipeline.target
    pipeline.auto = AdaptiveDrafter(
        costs,
        ngram=pipeline.ngram,
        model=pipeline.drafter,
        priors=tuning.priors,
        breaks_line=lambda token: b"\n" in target.piece(token),
    )
    if pipeline.draft is not None and not tuning.draft_model_can_pay():
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
