"""The chat's loop: read a message or a command, answer it, again until /bye or Ctrl-D; and Ctrl-C in it.

Ctrl-C stops a reply, a command or plain line reading, never the chat: between the steps it is ignored, at the
line editor's prompt it is a key (CtrlC). Input that is not valid UTF-8 is replaced, a message too long for the
context is an error line, and the chat goes on. Apart from repl.py (a session's turns) and chatcommands.py
(its slash commands), as the signal handling and the terminal's states concern the loop alone.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

from rich.text import Text

from .errors import SpecchatError
from .lineinput import TerminalInput, UnfinishedMessage, read_message
from .paths import replace_bad_bytes, replaced_any
from .terminal import keys_unechoed, restore_terminal
from .view import say

if TYPE_CHECKING:
    from .repl import ChatSession


def run(session: ChatSession, reader, ctrl_c: CtrlC) -> int:
    """Read messages and commands until /bye or Ctrl-D; returns the exit code. With the line editor, keys typed
    between two prompts (a live reply, a command, the note after Ctrl-C) wait unechoed for the next prompt: an
    echoed Enter spoilt the live view, and a Ctrl-D pressed as the line editor ended or started (cooked mode, its
    end-of-file) became a NUL byte that the prompt swallowed, so the chat stayed. Plain reading needs cooked mode.
    If the chat fails, what was typed is dropped: the shell would read it next (a Ctrl-D closed an interactive bash).
    A command that reads a line of its own would need echo put back for it (none does)."""
    with keys_unechoed(dropped_on_error=True) if isinstance(reader, TerminalInput) else nullcontext():
        return _turns(session, reader, ctrl_c)


def _turns(session: ChatSession, reader, ctrl_c: CtrlC) -> int:
    console = session.console
    # The line editor reads Ctrl-C as a key (raw mode); plain line reading knows it only as a signal
    reading = nullcontext if isinstance(reader, TerminalInput) else ctrl_c.stops
    # The line editor ends its line as Ctrl-C or Ctrl-D ends it; plain reading leaves the cursor after ^C or the prompt
    fresh = "" if isinstance(reader, TerminalInput) else "\n"
    console.print(Text("specchat chat: /help for commands, Ctrl-C stops a reply, Ctrl-D or /bye leaves", style="dim"))
    if session.log.cid is not None:
        count = len(session.conversation.messages)
        console.print(Text(f"continuing conversation {session.log.cid} ({count} messages)", style="dim"))
    while True:
        try:
            with reading():
                text = read_message(reader)
        except UnfinishedMessage as unfinished:  # typed text is sent, not dropped; a second Ctrl-D leaves
            console.print(Text(f"{fresh}(Ctrl-D ended the unfinished message: it is sent)", style="dim"))
            text = unfinished.text
        except EOFError:
            if fresh:
                console.print()
            return 0
        except KeyboardInterrupt:
            console.print(Text(f"{fresh}(Ctrl-C at the prompt does not leave: use /bye or Ctrl-D)", style="dim"))
            continue
        except UnicodeDecodeError:
            console.print(Text("that input was not valid UTF-8; please type it again", style="yellow"))
            continue
        if text is None:
            return 0
        fixed = replace_bad_bytes(text)
        if replaced_any(text, fixed):  # a paste is pasted again the same: replaced, as in piped stdin, not refused
            console.print(Text("warning: that input was not valid UTF-8; bad bytes were replaced", style="yellow"))
        text = fixed
        stripped = text.strip()
        if not stripped:
            continue
        if stripped.startswith("//") and ("\n" not in stripped or session.names_a_command(stripped[1:])):
            # a message that begins with a slash (a path), or a block that begins with a command's name (pasted
            # notes that start "/help me with this:"); a block that begins "// comment" is code, sent as it is
            text = text.replace("/", "", 1)
        elif stripped.startswith("/") and ("\n" not in stripped or session.names_a_command(stripped)):
            try:
                with ctrl_c.stops():
                    if not session.command(stripped):
                        return 0
            except KeyboardInterrupt:  # a /load or /save waiting on a slow disk or a locked log: stop it, not the chat
                console.print(Text(f"\n{stripped.split()[0]} stopped", style="dim"))
            continue
        try:
            with ctrl_c.stops():
                session.ask(text)
        except KeyboardInterrupt:  # before the loop's own stop (a slow template, the view opening): it stops this
            restore_terminal()  # reply, as one inside it does, not the chat (after it, Ctrl-C waits: Interrupt.settle)
            session.drop_unanswered()
            console.print(Text("\n(stopped)", style="dim"))
        except SpecchatError as exc:  # e.g. one message longer than the context: say so, keep chatting
            session.drop_unanswered()
            hint = f"  hint: {exc.hint}" if exc.hint else ""
            say(console, Text(f"error: {exc.message}{hint}", style="red"))  # Rich's wrap can raise: say falls back


class CtrlC:
    """Ctrl-C is ignored between the chat's steps (the notes it prints, the line editor starting and ending,
    with the terminal in cooked mode): one pressed again while the last one's note was printed left the chat
    (exit 130), and one that caught asyncio starting prompt_toolkit's loop ended it with a traceback
    (CancelledError). It stops a reply, a command and plain line reading (stops()); at the line editor's
    prompt it is a key. A Ctrl-C already ignored (a job started with `&`) or handled by someone else stays so."""

    def __init__(self) -> None:
        main = threading.current_thread() is threading.main_thread()
        self.ours = main and signal.getsignal(signal.SIGINT) is signal.default_int_handler

    @contextmanager
    def between_turns(self) -> Iterator[None]:
        with self._handler(signal.SIG_IGN, signal.default_int_handler):
            yield

    @contextmanager
    def stops(self) -> Iterator[None]:
        with self._handler(signal.default_int_handler, signal.SIG_IGN):
            yield

    @contextmanager
    def _handler(self, inside, after) -> Iterator[None]:
        if self.ours:
            signal.signal(signal.SIGINT, inside)
        try:
            yield
        finally:
            if self.ours:
                signal.signal(signal.SIGINT, after)
