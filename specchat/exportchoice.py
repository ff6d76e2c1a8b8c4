"""What `specchat export`'s command speculates with: the draft model with k tokens or draftless n-gram lookup,
chosen from the tuning `run --mode auto` would start from on this machine, and the reason said beside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import modes
from .errors import UsageError
from .tuning import BEST_ACCEPTANCE

if TYPE_CHECKING:
    from .export import Files

EXPORTED_MODES = ("auto", "spec", "ngram")  # those llama-server and vLLM have an equivalent of
ASSUMED_ACCEPTANCE = 0.6  # the draft model's prior in runtime before anything is measured
TUNE_HINT = "run `specchat tune` first (on the machine that will serve) so that export knows what pays there"
RETUNE_HINT = "run `specchat tune` again to replace it"
NO_TUNING = f"no saved tuning for these files here: a default; {TUNE_HINT}"


@dataclass(frozen=True)
class Choice:
    """What speculates: the draft model with k tokens, or draftless n-gram lookup; and why."""

    method: str  # "draft" | "ngram"
    k: int | None  # None: the server picks its own draft lengths (llama-server's ngram-mod)
    why: str


def saved_tuning(files: Files, *, threads: int, gpu_layers: int, draft_gpu_layers: int):
    """The tuning `run --mode auto` would start from for these files and settings, and why there is
    none when it is None (none saved, or one that cannot be read: run would measure again)."""
    from .tuning import examine, machine_key, tuning_path

    if not all(path.is_file() for path in (files.target, files.draft) if path is not None):
        return None, NO_TUNING  # not on this machine: nothing was measured with them here
    key = machine_key(files.target, files.draft, threads, gpu_layers, draft_gpu_layers)
    tuning, problem = examine(key)
    if problem is None:
        return tuning, NO_TUNING
    # tune replaces a file, not a folder or a FIFO standing at its path: it refuses those, so it is no way out
    path = tuning_path(key)
    again = RETUNE_HINT if path.is_file() or not path.exists() else "remove what stands there, then run `specchat tune`"
    return tuning, f"the saved tuning {problem}: a default; {again}"


def _unexported(mode: str) -> str:
    """run's target and suffix modes were "unknown --mode 'target'", as if specchat had no such mode."""
    if mode == "target":
        return "--mode target is llama-server or vLLM without speculation: there is nothing to export for it"
    if mode in modes.MODES:
        return f"--mode {mode} has no equivalent in llama-server or vLLM"
    return f"unknown --mode '{mode}' for export"


def choose(tuning, has_draft: bool, mode: str = "auto", k: int | None = None, none_why: str = NO_TUNING) -> Choice:
    """What auto's saved calibration says pays on this machine; `mode` spec/ngram overrides it. none_why:
    why there is no tuning, when there is none."""
    from .tuning import trusted

    if mode not in EXPORTED_MODES:
        raise UsageError(_unexported(mode), hint="choose auto, spec or ngram")
    if mode == "spec" and not has_draft:
        raise UsageError("--mode spec needs a draft model", hint="give --draft FILE beside --target")
    if mode == "ngram" or not has_draft:
        why = "asked for (--mode ngram)" if mode == "ngram" else "no draft model: draftless n-gram lookup"
        return Choice("ngram", k or modes.NGRAM.default_k, why)
    if mode == "spec":
        return Choice("draft", k or modes.SPEC.default_k, "asked for (--mode spec)")
    if tuning is None:
        return Choice("draft", k or modes.SPEC.default_k, none_why)
    if not trusted(tuning):
        state = "is stale" if tuning.stale else "was taken while other programs used the CPUs"
        again = "run `specchat tune` again" + ("" if tuning.stale else " when the machine is idle")
        return Choice("draft", k or modes.SPEC.default_k, f"the saved tuning {state}: a default; {again}")
    costs = tuning.costs
    if not tuning.draft_model_can_pay():
        why = (
            f"the draft model cannot pay here even with {BEST_ACCEPTANCE:.0%} of its guesses accepted (a draft step "
            f"costs {costs.draft_step:.2f} target steps, a batch of 5 costs {costs.v(5):.1f}): draftless n-gram lookup"
        )
        return Choice("ngram", k or modes.NGRAM.default_k, why)
    acceptance = tuning.priors.get("spec")
    measured = acceptance is not None
    acceptance = acceptance if measured else ASSUMED_ACCEPTANCE
    best, speedup = costs.best_length([acceptance] * modes.SPEC.max_k, costs.draft_step or 0.0)
    seen = f"{acceptance:.0%} acceptance ({'measured by tune' if measured else 'assumed; `specchat tune` measures it'})"
    if best == 0:  # -k sets the length of what auto chose; --mode spec forces the draft model
        why = f"at {seen} the draft model would lose to the target alone here: draftless n-gram lookup"
        return Choice("ngram", k or modes.NGRAM.default_k, why)
    return Choice("draft", k or best, f"the saved tuning predicts {speedup:.2f}x with k={best} at {seen}")
