"""The steps of `specchat bench` (measure.py) before the models load: the options checked, the prompts and the
history read, and the models the measured modes need."""

from __future__ import annotations

from pathlib import Path

import typer

from ..modes import unused_draft
from .app import make_options, stderr_console
from .options import given


def check_bench_options(
    ctx: typer.Context,
    *,
    suite: str,
    prompts: Path | None,
    history: str,
    ks: str,
    modes: str,
    fmt: str,
    output: Path | None,
    plot: Path | None,
) -> tuple[list[int], list[str]]:
    """The draft model's lengths and the modes to measure; usage errors and notes before anything is read."""
    from .. import benchoptions
    from ..benchjsonl import is_stdin
    from ..benchsuite import check_suite
    from ..errors import UsageError
    from ..view import note, require_stdout

    check_suite(suite)  # misspelt, an error even beside --prompts, which makes it unused: it was said "not used"
    if prompts is not None and given(ctx, "suite"):  # said, as an unused -k is: it was ignored without a word
        note(stderr_console(), f"--suite {suite} is not used: --prompts replaces the suite")
    k_list, mode_list = benchoptions.check_options(fmt, plot, output, ks, modes)
    if output is None or fmt == "table":  # the table goes to stdout even with --output: said before measuring
        require_stdout("the report")
    if prompts is not None and is_stdin(prompts) and is_stdin(history):  # one stdin: the first would read it all
        raise UsageError("--prompts - and --history - both read stdin", hint="give one of them as a file")
    if "spec" not in mode_list:  # the report recorded lengths nothing was measured at
        if given(ctx, "ks"):
            note(stderr_console(), f"--ks {ks} is not used: it sets the draft model's lengths; spec is not in --modes")
        k_list = []
    return k_list, mode_list


def read_inputs(prompts: Path | None, suite: str, turns: str, history: str, mode_list: list[str], output, plot, models):
    """The prompts to measure and the history to attach (benchhistory.load); the report may overwrite neither, nor
    the model files given (models: --target and --draft)."""
    from .. import benchhistory, benchoptions
    from ..benchsuite import load_prompts_file, load_suite, select_turns

    prompt_list = select_turns(load_prompts_file(prompts) if prompts is not None else load_suite(suite), turns)
    past = benchhistory.load(history, mode_list)
    benchoptions.check_inputs_kept(output, plot, {"--prompts": prompts, "--history": past and past.path, **models})
    return prompt_list, past


def model_options(ctx: typer.Context, mode_list: list[str], target, draft, gpu_layers: int, **options):
    """runtime.Options for the models the measured modes use (options: pair, n_ctx, threads, draft_gpu_layers)."""
    from ..view import note

    # A draft model is loaded where a mode measured can draft with it: spec, and auto unless --target is given
    # alone (compared as `run` uses it: auto drafts without one). --modes ngram loaded a --draft, or the pair's
    # draft, for nothing (and a lone --target's auto took the pair's, failing for a target of another family).
    if draft_note := unused_draft(draft, mode_list, f"--modes {','.join(mode_list)}"):
        note(stderr_console(), draft_note)
        draft = None
    keep_draft = "spec" in mode_list or ("auto" in mode_list and (target is None or draft is not None))
    mode = "auto" if "auto" in mode_list else "spec" if keep_draft else "ngram"
    return make_options(ctx, target, draft, gpu_layers, mode=mode, keep_draft=keep_draft, **options)
