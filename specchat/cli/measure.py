"""`specchat bench` (target alone vs speculative, side by side) and `specchat tune` (this machine's costs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from ..benchsuite import CATEGORIES
from .app import app, load_pipeline, make_options, stderr_console
from .benchsteps import check_bench_options, model_options, read_inputs
from .options import (
    BENCH_HISTORY_HELP,
    EARLIER_HELP,
    MODE_LIST_WORDS,
    BenchTemplateKwargs,
    Ctx,
    Draft,
    DraftGpuLayers,
    GpuLayers,
    MaxTokens,
    Opt,
    Pair,
    PairAlso,
    PairArgument,
    Target,
    Threads,
    a_path,
    finite,
    one_pair,
    words,
)
from .tunesteps import check_saveable, measure_tuning, refuse_unreplaceable, save_if_worth_it

TUNE_TOKENS_HELP = "Longest reply in tokens of each acceptance run (one per quick-suite prompt and drafter)."
TUNE_JSON_HELP = (
    "One JSON object on stdout instead of the table: pair, target, draft, machine, estimates, now, saved, ceilings, "
    "best, kept_saved_costs, path."
)
# Word options in any case, completed by Tab (options.words): each reads its words from the module that checks them
SUITE_WORDS, TURN_WORDS = words("benchsuite", "SUITES", "CATEGORIES"), words("benchsuite", "TURNS")
REPORT_WORDS = words("benchreport", "FORMATS")
SUITE_HELP = f"Built-in suite: default, quick, tiny, or one category ({', '.join(CATEGORIES)})."


@contextmanager
def _templated(command: str) -> Iterator[None]:
    """bench and tune measure chat prompts and have no --no-template: the template error's own hint named
    that option, which they answered with 'No such option'."""
    from ..chat import TemplateError

    try:
        yield
    except TemplateError as exc:
        exc.hint = (
            f"`specchat {command}` measures chat-templated prompts and has no --no-template: give a target "
            "whose chat template works (`specchat run --no-template` runs this one)"
        )
        raise


@app.command(
    epilog="Examples:\n\n"
    "  specchat bench\n\n"
    "  specchat bench --suite quick -r 1 -n 64\n\n"
    "  specchat bench --ks 2,4 --format md --output bench.md --plot bench.svg\n\n"
    "  specchat bench --prompts my_prompts.jsonl --format json --output bench.json\n\n"
    "  specchat bench --suite revision --turns first\n\n"
    "  specchat bench --modes ngram,suffix --history past.jsonl"
)
def bench(
    ctx: typer.Context,
    pair: Pair = None,
    target: Target = None,
    draft: Draft = None,
    suite: Annotated[str, typer.Option(help=SUITE_HELP, **SUITE_WORDS)] = "default",
    prompts: Annotated[
        Path | None,
        Opt(
            "--prompts",
            parser=a_path("--prompts", "a JSONL file (- : stdin)"),
            metavar="<path>",
            help="JSONL prompts (Spec-Bench format; - reads stdin).",
        ),
    ] = None,
    turns: Annotated[
        str,
        Opt(
            "--turns",
            help="Measure every turn of a record (all) or only the first.",
            **TURN_WORDS,
        ),
    ] = "all",
    ks: Annotated[str, Opt("--ks", help="Draft-model lengths (1-16) to compare with the target alone.")] = "1,2,4,8",
    modes: Annotated[
        str, Opt("--modes", help="Compare: spec (per k), ngram, suffix, auto.", **MODE_LIST_WORDS)
    ] = "spec,ngram,auto",
    history: Annotated[str, Opt("--history", help=BENCH_HISTORY_HELP, metavar="none|FILE")] = "none",
    reps: Annotated[int, typer.Option("--reps", "-r", min=1, help="Repetitions of every prompt and variant.")] = 3,
    max_tokens: MaxTokens = 128,
    earlier_tokens: Annotated[int, Opt("--earlier-tokens", min=0, help=EARLIER_HELP)] = 512,
    temperature: Annotated[
        float,
        typer.Option(
            parser=finite(0.0, 5.0),
            help="0-5; 0 = greedy (lossless check on); above 0 with run's default filters (top-k 40, top-p 0.95, "
            "min-p 0.05).",
        ),
    ] = 0.0,
    seed: Annotated[
        int, typer.Option(help="Sampling seed (with --temperature > 0; negative: one drawn, recorded).")
    ] = 0,
    n_ctx: Ctx = 4096,
    threads: Threads = 0,
    gpu_layers: GpuLayers = -1,
    draft_gpu_layers: DraftGpuLayers = -1,
    fmt: Annotated[
        str,
        typer.Option("--format", "-f", help="Output: table, md, csv, json, jsonl.", **REPORT_WORDS),
    ] = "table",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            parser=a_path("--output", "a file name"),
            metavar="<path>",
            help="Write the report to this file (-f table: as its name ends, .csv/.json/.jsonl, else md).",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            parser=a_path("--plot", "a .png or .svg file name"),
            metavar="<path>",
            help="Save the draft model's speedup vs k as PNG or SVG (matplotlib).",
        ),
    ] = None,
    template_kwargs: BenchTemplateKwargs = None,
) -> None:
    """Measure target alone vs speculative decoding side by side, and explain the result.

    Variants run interleaved per prompt (drift hits all alike), after a warm-up. Speedups are medians of
    paired ratios. Greedy outputs are checked against the target alone. The measured cost model
    (c, v(n)) predicts the speedup from the acceptance rate, next to the measured one.
    Every turn of a multi-turn record is measured, after earlier replies written once by the target
    alone, so every variant sees the same conversation. See docs/bench.md for every figure.
    """
    from .. import bench as measure
    from .. import benchhistory, benchreport
    from ..progressview import bench_progress
    from ..sampling import SamplingParams
    from ..view import note

    k_list, mode_list = check_bench_options(
        ctx, suite=suite, prompts=prompts, history=history, ks=ks, modes=modes, fmt=fmt, output=output, plot=plot
    )
    prompt_list, past = read_inputs(
        prompts, suite, turns, history, mode_list, output, plot, {"--target": target, "--draft": draft}
    )
    options = model_options(
        ctx, mode_list, target, draft, gpu_layers, pair=pair, n_ctx=n_ctx, threads=threads,
        draft_gpu_layers=draft_gpu_layers,
    )  # fmt: skip
    settings = {"prompts": str(prompts or suite), "turns": turns, "ks": k_list, "reps": reps, "max_tokens": max_tokens}
    settings |= {"earlier_tokens": earlier_tokens, "chat_template_kwargs": template_kwargs or {}}
    params = SamplingParams(temperature=temperature, seed=seed).seeded()  # --seed -1: one drawn, and recorded
    settings |= {"temperature": temperature, "seed": params.seed, "threads": threads, "gpu_layers": gpu_layers}
    err = stderr_console()
    with (
        _templated("bench"),
        load_pipeline(options) as pipeline,
        benchhistory.attach(pipeline, past, lambda message: note(err, message)) as used,
    ):
        settings |= {"ctx": pipeline.target.n_ctx, "draft_gpu_layers": draft_gpu_layers, "modes": mode_list}
        settings["history"] = used
        result = measure.run(
            pipeline, prompt_list, measure.variants_for(k_list, mode_list), reps=reps, max_tokens=max_tokens,
            earlier_tokens=earlier_tokens,
            params=params, settings=settings,
            notify=lambda message: note(err, message), progress=lambda total: bench_progress(err, total),
            template_kwargs=template_kwargs,
        )  # fmt: skip
        benchreport.write(result, fmt, output, plot, k_list)
        if result.interrupted:  # inside the `with`: leave without freeing the models first
            raise KeyboardInterrupt


@app.command(
    epilog="Examples:\n\n  specchat tune\n\n  specchat tune qwen2.5-coder-7b --gpu-layers -1\n\n"
    "  specchat tune --threads 8 -n 48\n\n  specchat tune --json"
)
def tune(
    ctx: typer.Context,
    pair: PairArgument = None,
    pair_option: PairAlso = None,
    target: Target = None,
    draft: Draft = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=8, help=TUNE_TOKENS_HELP)] = 64,
    n_ctx: Ctx = 4096,
    threads: Threads = 0,
    gpu_layers: GpuLayers = -1,
    draft_gpu_layers: DraftGpuLayers = -1,
    as_json: Annotated[bool, Opt("--json", help=TUNE_JSON_HELP)] = False,
) -> None:
    """Measure this machine (c, v(n), acceptance) and save what --mode auto should start from.

    Times single steps and verify batches, runs the quick suite with the draft model (k = 8) and with
    prompt lookup (a lone --target: prompt lookup only, as auto runs it), prints the predicted speedup of
    each mode, and saves the numbers per pair and machine in the config directory's tuning/ folder
    (SPECCHAT_CONFIG_DIR moves it; the last line names the file, which may be deleted to forget it).
    `run`, `serve`, `bench` and `export` use them; `run --no-tuning` ignores them. Threads and GPU layers
    are tuned per value. Costs measured while other programs use the CPUs are not trusted: run tune again
    when the machine is idle.
    """
    from ..benchsuite import load_suite, single_turn
    from ..tableview import print_tune, tune_json
    from ..view import require_stdout, stdout_console, write_stdout

    pair = one_pair(pair, pair_option)
    check_saveable()  # before the measuring: a result that cannot be kept is not worth minutes
    require_stdout("the report")
    err = stderr_console()
    # A lone --target is tuned as `run --target` uses it in auto: without a draft model. With the pair's draft
    # the tuning was saved for (target, draft), which that run never looks up.
    lone = target is not None and draft is None
    options = make_options(
        ctx, target, draft, gpu_layers, pair=pair, mode="ngram" if lone else "spec", keep_draft=not lone,
        n_ctx=n_ctx, threads=threads, draft_gpu_layers=draft_gpu_layers,
    )  # fmt: skip
    prompts = single_turn(load_suite("quick"))  # one reply per prompt, comparable with earlier tunings
    with _templated("tune"), load_pipeline(options, before_load=refuse_unreplaceable) as pipeline:
        title = pipeline.resolved.name
        tuning, estimates = measure_tuning(pipeline, prompts, max_tokens, err)
    path, kept, previous = save_if_worth_it(tuning)
    if as_json:
        write_stdout(tune_json(pipeline.resolved, tuning, estimates, path, previous, kept=kept), what="the report")
    else:
        print_tune(stdout_console(what="the report"), title, tuning, estimates, path, previous, kept=kept)
