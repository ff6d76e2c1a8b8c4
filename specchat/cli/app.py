"""The app and the one error boundary (SpecchatGroup.invoke: one line and a hint, never a traceback). The options
several commands share are in options.py; the commands are in run.py, measure.py and manage.py."""

from __future__ import annotations

import os
import sys
import traceback
from contextlib import suppress
from dataclasses import dataclass
from typing import Annotated

import typer
from typer.core import TyperGroup

from .. import __version__
from ..errors import SpecchatError
from ..paths import disk_full, env_flag
from ..terminal import restore_terminal
from ..view import (
    StdoutError,
    guard_stdout,
    print_error,
    silence_stdout,
    stderr_console,
    stdout_hint,
    write_stdout,
)
from .helpfold import folded_help, with_folded_help
from .helptext import untyped_flags
from .options import Opt, given
from .streamencoding import replace_what_cannot_be_written

DEBUG_USAGE = "`specchat --debug COMMAND ...`"  # a root option: `specchat run ... --debug` is no option of run's


@dataclass(frozen=True)
class Settings:
    """What the root options set for every command (kept in ctx.obj)."""

    debug: bool = False


def _debug(ctx: typer.Context) -> bool:
    return isinstance(ctx.obj, Settings) and ctx.obj.debug


class SpecchatGroup(TyperGroup):
    """The single error boundary: library errors become one line + hint, never a traceback."""

    def get_params(self, ctx):
        return untyped_flags(super().get_params(ctx))

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            untyped_flags(command.get_params(ctx))
            if "format_help" not in vars(command):
                command.format_help = with_folded_help(command.format_help)
        return command

    def format_help(self, ctx, formatter):
        folded_help()
        return guard_stdout(lambda: super(SpecchatGroup, self).format_help(ctx, formatter), "the help")

    def resolve_command(self, ctx, args):
        """Another tool's command or flags (llama.cpp's `-c 4096`) are refused with specchat's own name for
        them, before Click reads them as something else (habits.py)."""
        from . import habits

        if args and not ctx.resilient_parsing:
            habits.check_command(args[0], self.list_commands(ctx))
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not ctx.resilient_parsing:
            habits.check(name, command.params, rest)
        return name, command, rest

    def make_context(self, info_name, args, parent=None, **extra):
        """Ctrl-C while the root options are parsed, before invoke's boundary: Typer turns it into a
        silent exit 130, so it is said here."""
        typed = list(args)  # the parse consumes `args`
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except KeyboardInterrupt:
            say_interrupted()
            raise typer.Exit(130) from None
        except StdoutError as exc:  # `specchat --help > /dev/full`: the root's help or --version
            silence_stdout()
            print_error(stderr_console(), exc.message, exc.hint)
            raise typer.Exit(1) from None
        except BrokenPipeError:  # `specchat --version | true`: the reader left, as with a reply (exit 0)
            silence_stdout()
            raise typer.Exit(0) from None
        except OSError as exc:  # Typer's own --show-completion > /dev/full; --install-completion's shell files
            silence_stdout()
            reason = (exc.strerror or str(exc)).lower()
            if exc.filename is None and any(arg.startswith("--show-completion") for arg in typed):
                message, hint = f"cannot write the completion script to stdout: {reason}", stdout_hint(exc)
            else:
                message = f"cannot write {exc.filename or 'the completion script'}: {reason}"
                elsewhere = "check that path, or print the script with --show-completion"
                hint = "free some space, or write elsewhere" if disk_full(exc) else elsewhere
            print_error(stderr_console(), message, hint)
            raise typer.Exit(1) from None
        except typer.TyperException as exc:  # `specchat -v`, `specchat --debug=1`: Typer drew a boxed panel
            if type(exc).__name__ == "NoArgsIsHelpError":  # `specchat` alone: the help, shown already
                raise
            _say_usage(exc, "specchat")
            raise typer.Exit(getattr(exc, "exit_code", 2)) from None

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
            say_interrupted()
            ctx.exit(130)
        except BrokenPipeError:
            silence_stdout()
            ctx.exit(0)
        except typer.Exit:
            raise
        except typer.TyperException as exc:  # a bad option value: one line too, exit 2
            _say_usage(exc, f"specchat {ctx.invoked_subcommand}" if ctx.invoked_subcommand else "specchat")
            ctx.exit(getattr(exc, "exit_code", 2))
        except Exception as exc:  # a bug: still one line, with the way to get the details
            if _debug(ctx):
                traceback.print_exc()
            hint = f"this is a bug in specchat: rerun as {DEBUG_USAGE} for the traceback and report it"
            print_error(stderr_console(), f"internal error: {type(exc).__name__}: {exc}", hint)
            ctx.exit(1)


def _say_usage(exc: Exception, command: str) -> None:
    """Click's usage error as one line, its hint the command's --help."""
    _say_value(exc)
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    hint = f"see `{command} --help`"
    root_option = getattr(exc, "option_name", None) if command != "specchat" else None
    if root_option == "--debug":
        message, hint = "--debug goes before the command", f"{DEBUG_USAGE} (or SPECCHAT_DEBUG=1)"
    elif root_option == "--version":  # Click offered the command's --json or --verbose, which print no version
        message, hint = "--version goes before the command", "`specchat --version`"
    elif command == "specchat export" and "'--to'" in message:  # missing, or without its value
        from ..export import TARGETS  # the hint was --help, for one of two words

        hint = " or ".join(f"--to {name}" for name in TARGETS) + f" (see `{command} --help`)"
    elif command == "specchat bench" and root_option in ("--json", "--jsonl"):  # the other commands' habit
        fmt = root_option.removeprefix("--")  # Click offered --ks, a draft length, for a report format
        message = f"bench has no {root_option}: its report is -f {fmt}"
        hint = f"`specchat bench -f {fmt}`, or -o FILE.{fmt} for a file"
    print_error(stderr_console(), message, hint)


def _say_value(exc: Exception) -> None:
    """Typer's checks of a number word their errors as pydantic does ("Input should be greater than or
    equal to 1"), without the value given or the other end of the range; said as `finite` says it."""
    errors = exc.__cause__.errors() if hasattr(exc.__cause__, "errors") else []
    if not errors or not hasattr(exc, "message"):
        return
    kind, given = errors[0].get("type"), errors[0].get("input")
    low, high = getattr(getattr(exc, "param", None), "min", None), getattr(getattr(exc, "param", None), "max", None)
    if kind in ("greater_than_equal", "less_than_equal") and low is not None and high is not None:
        exc.message = f"{given} is not in the range {low} to {high}"
    elif kind == "greater_than_equal" and low is not None:
        exc.message = f"{given} is less than {low}: give {low} or more"
    elif kind == "less_than_equal" and high is not None:
        exc.message = f"{given} is more than {high}: give {high} or less"
    elif kind == "int_parsing":
        exc.message = f"{given!r} is not a whole number"


app = typer.Typer(
    name="specchat",
    cls=SpecchatGroup,
    help="Local LLM chat with speculative decoding that shows its work.\n\n"
    "A small draft model guesses the next tokens, the target model checks them in one batch; "
    "greedy output is exactly the target's own.",
    epilog=(
        "Start here:\n\n"
        "# one reply (the first run downloads the models, 1.6 GB)\n"
        'specchat run "Explain what a mutex is"\n\n'
        "# a chat on the terminal (/help lists its commands)\nspecchat run\n\n"
        "# the model pairs, and which are on this machine\nspecchat models\n\n"
        "# does drafting pay on this machine? (5-10 minutes on a 2-core CPU)\n"
        "specchat bench --suite quick -r 1 -n 64\n\n"
        "specchat COMMAND --help: its options, with examples.\n\n"
        "Coming from llama.cpp, Ollama, LM Studio, vLLM or simonw/llm: their flags and commands are answered with "
        "specchat's own; the table is in docs/usage.md, 'Coming from other tools'."
    ),
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},  # -h as in llama.cpp, vLLM and most tools
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        write_stdout(f"specchat {__version__}\n", "the version")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[bool, Opt("--version", callback=_version, is_eager=True, help="Show the version.")] = False,
    debug: Annotated[bool, Opt("--debug", help="Tracebacks and llama.cpp's log (or SPECCHAT_DEBUG=1).")] = False,
) -> None:
    from ..terminal import restore_terminal_when_killed

    ctx.obj = Settings(debug=debug or env_flag("SPECCHAT_DEBUG"))
    # Every command: the chat's raw mode, and the hidden cursor of a live reply or of a progress bar (pull, bench,
    # tune, models --verify), put back on SIGTERM, SIGHUP, SIGQUIT and Ctrl-Z
    restore_terminal_when_killed()


def make_options(ctx: typer.Context, target=None, draft=None, gpu_layers=-1, **options):
    """runtime.Options from the shared options; --debug from the root."""
    from ..runtime import Options

    ctx_default = "n_ctx" in ctx.params and not given(ctx, "n_ctx")  # a note names "the default context" then
    return Options(
        target_path=target, draft_path=draft, target_gpu_layers=gpu_layers, debug=_debug(ctx),
        ctx_default=ctx_default, **options,
    )  # fmt: skip


def load_pipeline(options, loaded=None, before_load=None):
    """The loaded pipeline (pulling what is missing, with progress bars on stderr); before_load(resolved, options) runs
    before the models are loaded, loaded(pipeline) before auto measures the machine (runtime.open_pipeline)."""
    from ..downloadbar import download_progress
    from ..runtime import open_pipeline
    from ..view import note

    err = stderr_console()
    with download_progress(err) as start:
        return open_pipeline(options, lambda message: note(err, message), start, loaded, before_load)


def main() -> None:
    """Console-script entry point; the error boundary lives in SpecchatGroup.invoke."""
    replace_what_cannot_be_written()
    try:
        app(prog_name="specchat")
    except KeyboardInterrupt:  # while Typer builds the command from the app, before any boundary
        say_interrupted()
        _leave_now(130)
    except SystemExit as exc:
        if exc.code == 130:
            _leave_now(130)
        if exc.code == 1 and _raised_in(exc, "on_broken_pipe"):
            # `specchat --help | head -1`: Typer prints help through a Rich Console of its own, whose
            # on_broken_pipe exits 1 (specchat's consoles raise BrokenPipeError there instead). A reader
            # that went away is exit 0 everywhere else (docs/usage.md).
            raise SystemExit(0) from None
        raise


def say_interrupted() -> None:
    restore_terminal()
    stderr_console().print("interrupted", style="dim")


def _raised_in(exc: BaseException, function: str) -> bool:
    """Whether the innermost frame of the exception's traceback is a function of that name."""
    frame = exc.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and frame.tb_frame.f_code.co_name == function


def _leave_now(code: int) -> None:
    """After Ctrl-C, leave without the interpreter's teardown (~0.15 s on 2 cores, more under load):
    everything that must last is already written and committed; only the buffered output is left."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)
