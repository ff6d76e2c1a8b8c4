"""Reading the chat's messages: prompt_toolkit on a terminal, plain line reading otherwise.

prompt_toolkit instead of the standard readline module because readline turns bracketed paste off, so
a pasted block arrived as one message per line. Here a paste is inserted as it is and sent with Enter;
Esc-Enter (Alt-Enter) inserts a newline; Tab completes slash commands; the history lives in the state
directory. prompt_toolkit serves Windows consoles too (not tested here). The `\\` continuation and
`\"\"\"` blocks of plain reading stay.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.output import ColorDepth
from rich.console import Console
from rich.text import Text

from .paths import make_dirs
from .view import dumb_term

PROMPT = "you › "
MORE = "... "


class UnfinishedMessage(EOFError):
    """Ctrl-D (end of input) inside a \"\"\" block or after a `\\` line: what was typed, to be sent, not
    dropped. An EOFError, so a caller that only knows EOFError still leaves."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def read_message(reader) -> str | None:
    """One user message from anything with input(prompt) (a Rich Console or a TerminalInput); EOFError
    at end of input (UnfinishedMessage inside a message), KeyboardInterrupt for Ctrl-C: the caller
    handles them."""
    first = reader.input(Text(PROMPT, style="bold cyan"))
    if first.strip() == '"""':
        lines = []
        while (line := _more(reader, lines)).strip() != '"""':
            lines.append(line)
        return "\n".join(lines)
    lines = [first]
    while lines[-1].endswith("\\"):
        lines[-1] = lines[-1][:-1]
        lines.append(_more(reader, lines))
    return "\n".join(lines)


def _more(reader, lines: list[str]) -> str:
    """The next line of a message; at end of input the lines so far, unless they are blank (then a plain
    EOFError: nothing typed is lost by leaving)."""
    try:
        return reader.input(MORE)
    except EOFError:
        text = "\n".join(lines)
        if text.strip():
            raise UnfinishedMessage(text) from None
        raise


class TerminalInput:
    """prompt_toolkit's line editor with the chat's keys, completion and a history file."""

    def __init__(self, commands: Iterable[str], history: Path | None, no_color: bool = False) -> None:
        self.session = PromptSession(
            # --no-color as NO_COLOR (which prompt_toolkit reads itself): bold and the like, no colours
            color_depth=ColorDepth.MONOCHROME if no_color else None,
            history=_file_history(history) or InMemoryHistory(),
            completer=SlashCompleter(commands),
            complete_while_typing=False,  # Tab completes: a menu popping up while typing gets in the way
            key_bindings=_bindings(),
            prompt_continuation=_continuation,
            enable_suspend=True,  # Ctrl-Z stops the chat, as in a shell; else a literal ^Z went into the message
        )

    def input(self, prompt: str | Text) -> str:
        # Ctrl-C at the prompt is a key (raw mode). prompt_toolkit's SIGINT handler, for one pressed while it
        # starts or ends (cooked mode), raised "Application is not running" for a second such press, with a
        # traceback: the chat ignores Ctrl-C there instead (chatloop.CtrlC).
        if isinstance(prompt, Text):
            prompt = FormattedText([("bold ansicyan", prompt.plain)])
        try:
            return self.session.prompt(prompt, handle_sigint=False)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            # The terminal is gone (closed where SIGHUP is ignored: `trap '' HUP`, a disowned job): end of input, as a
            # shell takes it; it was an internal error
            raise EOFError from None


def _continuation(width: int, _line: int, soft_wrap: bool) -> str:
    """The margin of a message's next line: `... ` under the prompt for a line of its own (Alt-Enter, a
    paste), nothing where a long line only wraps, so a pasted long line does not read as several."""
    return "" if soft_wrap else " " * max(width - len(MORE), 0) + MORE


def _file_history(path: Path | None) -> FileHistory | None:
    """The history file, or None where it cannot be made (a read-only home must not stop the chat)."""
    if path is None:
        return None
    try:
        make_dirs(path.parent)
        path.touch(mode=0o600, exist_ok=True)  # it holds what the user typed: the owner's only
    except OSError:
        return None
    return _KeptHistory(str(path))


class _KeptHistory(FileHistory):
    """A history file that cannot take a line (read-only: another user's, a read-only mount; a full disk)
    keeps the line in memory: prompt_toolkit's own raised from its event loop, a traceback and "Press ENTER
    to continue" after every message."""

    def store_string(self, string: str) -> None:
        with suppress(OSError):  # the earlier lines still come back with the up arrow; this one for this chat only
            super().store_string(string)


def _bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("escape", "enter")  # what Alt-Enter sends, and Esc then Enter
    def _newline(event) -> None:
        event.current_buffer.insert_text("\n")

    return bindings


class SlashCompleter(Completer):
    """Completes the command name of a line that starts with '/'."""

    def __init__(self, commands: Iterable[str]) -> None:
        self.commands = sorted(commands)

    def get_completions(self, document, complete_event):
        text = document.text_before_cursor
        if not text.startswith("/") or " " in text or "\n" in text:
            return
        for name in self.commands:
            if name.startswith(text):
                yield Completion(name, start_position=-len(text))


def make_reader(console: Console, commands: Iterable[str], history: Path | None):
    """prompt_toolkit when both ends are a terminal that takes escape codes; otherwise (pipes, TERM=dumb:
    Emacs shell, where Emacs edits the line) the console's plain line reading."""
    streams = (sys.stdin, sys.stdout)
    if all(stream is not None and stream.isatty() for stream in streams) and not dumb_term():
        return TerminalInput(commands, history, no_color=console.no_color)
    return console
