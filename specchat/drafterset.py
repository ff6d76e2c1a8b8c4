"""The drafters a loaded pipeline gets: one per mode the models allow, and auto's arms and measured costs.
Separate from runtime.py, which loads the engines: which drafters exist and how auto is set up over them is
the part a new drafter touches (docs/how-it-works.md), and it needs nothing of the loading.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .drafters import Drafter, DraftModelDrafter, NgramDrafter
from .drafters.auto import AutoDrafter
from .drafters.model import PRIOR
from .errors import UsageError

if TYPE_CHECKING:
    from .runtime import Notify, Pipeline


def add_drafters(pipeline: Pipeline, saved, notify: Notify) -> None:
    """One drafter per mode the loaded models allow; auto gets measured costs and the others as arms."""
    from . import tunemeasure, tuning

    options = pipeline.options
    priors = saved.priors if saved is not None else {}
    drafters: dict[str, Drafter] = {}
    if pipeline.draft is not None:
        drafters["spec"] = DraftModelDrafter(pipeline.draft, options.p_min, prior=priors.get("spec", PRIOR))
    target = pipeline.target
    drafters["ngram"] = NgramDrafter(
        ends_copy=getattr(target, "is_control", None),
        line_role=getattr(target, "line_role", None),
        codec=target if hasattr(target, "piece") and hasattr(target, "tokenize") else None,  # rewrite.py
    )
    past = _user_history(pipeline, notify) if options.mode in ("suffix", "auto") else None
    if options.mode == "suffix" or past is not None:  # for auto, only with a history: else it is prompt lookup
        drafters["suffix"] = suffix_drafter(pipeline.target, past)
    if options.mode == "spec" and "spec" not in drafters:
        raise UsageError("--mode spec needs a draft model", hint="give --draft FILE or a --pair, or use --mode ngram")
    if options.mode == "auto":
        # `bench --target T --modes spec,auto` loads the pair's draft model for spec; auto ran with it and
        # under its tuning, where `run --target T` runs without one: it now measures what run does.
        own = replace(pipeline.resolved, draft=None) if options.lone_target else pipeline.resolved
        own_draft = pipeline.draft if own.draft is not None else None
        key = tuning.key_for(own, options)
        chosen = tunemeasure.prepare(
            pipeline.target, own_draft, key, use_saved=options.use_tuning, notify=notify, threads=options.threads
        )
        pipeline.tuning = chosen
        arms = [d for d in drafters.values() if own_draft is not None or d.name != "spec"]
        if own.draft is not None and not chosen.draft_model_can_pay():
            arms = [d for d in arms if d.name != "spec"]
            costs = chosen.costs
            pipeline.mode_note = (
                f"auto: draft model off: even with {tuning.BEST_ACCEPTANCE:.0%} of its guesses accepted it could not "
                "beat the target here "
                f"(a draft step costs {costs.draft_step:.2f} target steps, a batch of 5 costs {costs.v(5):.1f})"
            )
            if not options.keep_draft and pipeline.draft is not None:  # the bench still compares it
                drafters.pop("spec")
                pipeline.draft.close()
                pipeline.draft = None
        else:
            pipeline.mode_note = "auto: drafts only when the measured costs and acceptance say it pays"
        drafters["auto"] = AutoDrafter(_fresh_costs(chosen.costs), arms)
    pipeline.drafters = drafters


def suffix_drafter(target, history) -> Drafter:
    from .drafters.suffix import SuffixDrafter

    # A copy ends before a control token: the chat template's markup is never proposed.
    return SuffixDrafter(history, ends_copy=getattr(target, "is_control", None))


def _user_history(pipeline: Pipeline, notify: Notify):
    """The user's past conversations from the log (history.History), or None where turned off (or where the
    engine cannot say which tokenizer it has)."""
    from . import history

    if not history.enabled(not pipeline.options.history):
        return None
    return history.History.open(pipeline.target, notify, logging=pipeline.options.log)


def _fresh_costs(costs):
    """auto's own copy: its online updates must not change what tune or the bench report."""
    return replace(costs, verify=dict(costs.verify))
