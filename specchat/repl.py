"""Interactive chat: a multi-turn conversation with slash commands, on top of the live view.

Messages are read by lineinput (prompt_toolkit on a terminal). When the conversation outgrows the
context, its oldest turns give way (chat.fit_conversation); the system prompt stays.
"""

from __future__ import annotations

import inspect
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace

from rich.console import Console
from rich.text import Text

from . import modes
from .chat import Message, decimal_number, fit_conversation, whole_number
from .errors import SpecchatError, UsageError
from .lineinput import TerminalInput, UnfinishedMessage, make_reader, read_message
from .logstore import Recorder
from .outputs import LiveOutput, Output, Request, TextOutput, reply
from .paths import expand_home, replace_bad_bytes
from .runtime import Generation, Pipeline
from .sampling import SamplingParams
from .speculative import Stats
from .transcript import save_conversation
from .view import keys_unechoed, n_tokens, position_bars, restore_terminal, session_lines, stderr_console, summary_line

MAX_K = max(mode.max_k for mode in modes.MODES.values())
MODE_WORDS = {"spec": "draft model", "ngram": "prompt lookup", "suffix": "past text"}
MAX_STDIN_BYTES = 1_000_000  # documented in docs/usage.md: larger input is refused, not truncated

HELP = """\
/help            this list
/stats           session totals (tokens, speed, acceptance)
/max N           longest reply in tokens (0 = no limit: to its end or the context's)
/k N             draft length (1-64; in auto mode the largest it may choose)
/temp T          temperature (0 = greedy, exactly the target's output)
/mode M          {modes}
/spec on|off     speculation on (the chosen mode), or the target alone
/rejected on|off show or hide the rejected draft guesses
/system TEXT     set the system prompt (empty: the template's default)
/reset           start a new conversation (keeps the system prompt)
/save FILE       save the conversation (.json: /load reads it back; else Markdown)
/load ID|FILE    continue a logged conversation (`specchat logs`) or a saved .json
/bye             leave (Ctrl-D works too)
{input}"""
# How to type a message of several lines: the terminal's line editor (prompt_toolkit) takes pastes, Esc-Enter and
# Tab; plain line reading (TERM=dumb: Emacs' shell, where the terminal edits the line) reads a pasted block as one
# message per line and knows no keys of its own, so there only a line ending in a backslash or a """ block work.
EDITOR_INPUT = "Multi-line input: paste it, or Esc-Enter (Alt-Enter) for a new line; Tab completes commands."
PLAIN_INPUT = 'Multi-line input: end a line with \\ to go on, or put the message between two """ lines.'


@dataclass
class ChatSettings:
    mode: str = "auto"
    k: int | None = None  # None: the mode's default (modes.Mode.default_k)
    spec: bool = True  # False: the target alone, whatever the mode
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 0  # 0: no limit, the reply runs to its end (or the context's)
    show_rejected: bool = True
    verbose: bool = False
    use_template: bool = True

    @property
    def effective_mode(self) -> str:
        return self.mode if self.spec else "target"

    @property
    def effective_k(self) -> int:
        return modes.get(self.effective_mode).length(self.k)

    @property
    def label(self) -> str:
        return modes.get(self.effective_mode).describe(self.effective_k)

    def request(self) -> Request:
        """One reply's request; its own seed, drawn for it, when none was given (recorded in --json and the log)."""
        return Request(self.effective_mode, self.effective_k, self.params.seeded(), self.max_tokens)


def fit_turns(pipeline, conversation, settings, log) -> tuple[list[int], str | None]:
    """The prompt ids of a conversation whose last message is the new one; when it has outgrown the
    context its oldest turns give way (the log is told, so that later turns are still logged), and the
    note that says so is returned (None when nothing gave way)."""
    before = len(conversation.messages)
    ids, dropped = fit_conversation(pipeline.target, conversation, settings.max_tokens, settings.use_template)
    log.gave_way(before - len(conversation.messages))
    if not dropped:
        return ids, None
    turns = f"{dropped} oldest turn{'s' if dropped > 1 else ''}"
    return ids, f"context: the {turns} gave way to fit the context of {pipeline.target.n_ctx} tokens"


class ChatSession:
    def __init__(
        self,
        pipeline: Pipeline,
        settings: ChatSettings,
        console: Console,
        system: str | None,
        log: Recorder | None = None,
        plain: bool = False,
    ) -> None:
        self.pipeline = pipeline
        self.plain = plain  # replies as plain text (TERM=dumb), not in the live view
        self.settings = settings
        self.console = console
        self.log = log or Recorder()  # the default logs nothing (tests, embedding)
        self.conversation = self.log.conversation(system)
        self.totals = Stats()
        self.shown_legend = False

    # -- one turn ----------------------------------------------------------------------------------------

    def ask(self, text: str) -> Generation:
        """Answer a message; the oldest turns give way first when the conversation outgrows the context.
        A message too long for the context alone raises ContextFullError and changes nothing."""
        self.conversation.messages.append(Message("user", text))
        try:
            prompt, gave_way = fit_turns(self.pipeline, self.conversation, self.settings, self.log)
        except SpecchatError:
            self.conversation.messages.pop()
            raise
        if gave_way:
            self._say(gave_way, "dim yellow")
        return self.answer(prompt)

    def answer(self, prompt: list[int]) -> Generation:
        """Generate the assistant's turn for prompt ids built from the conversation, in the live view (or
        as plain text and a summary line)."""
        request = self.settings.request()
        if self.plain:
            output: Output = TextOutput()
        else:
            output = LiveOutput(
                self.console,
                request,
                show_rejected=self.settings.show_rejected,
                verbose=self.settings.verbose,
                legend=not self.shown_legend,
            )
            self.shown_legend = self.shown_legend or output.legend
        generation = reply(self.pipeline, prompt, request, output)
        if self.plain:  # the live view's summary line, as text
            self.console.print(summary_line(generation.stats, request.label))
        self.totals.merge(generation.stats)
        if generation.stats.stop_reason == "interrupted" and not generation.tokens:
            # Stopped before the first token (a long paste still being read): nothing was answered, and
            # kept, the message would be sent and read again with every later turn
            _drop_unanswered(self)
            self._say("(stopped before the reply began: the message is left out of the conversation)", "dim")
            return generation
        self.log.record_reply(self.conversation, generation, self.pipeline, request)
        if generation.stats.stop_reason == "context":  # "[context full]" alone left the user guessing
            self._say(
                f"the context of {self.pipeline.target.n_ctx} tokens is full: with the next message the oldest turns "
                "give way (/reset starts afresh; a chat started with a larger --ctx holds more)",
                "dim yellow",
            )
        return generation

    # -- slash commands ----------------------------------------------------------------------------------

    @classmethod
    def commands(cls) -> list[str]:
        """Every slash command, for completion."""
        return [f"/{name[5:]}" for name in dir(cls) if name.startswith("_cmd_")]

    def command(self, line: str) -> bool:
        """Run a slash command; False means leave."""
        name, _, arg = line[1:].partition(" ")
        arg = arg.strip()
        handler = getattr(self, f"_cmd_{name.lower()}", None)
        if not name:  # "/" or "/ help": no name to send with "//" either
            self._say("a / alone is no command: /help lists the commands", "yellow")
            return True
        if handler is None:
            self._say(f"unknown command /{name}: /help lists the commands; //{name} sends it as a message", "yellow")
            return True
        if inspect.signature(handler).parameters:
            return handler(arg) is not False
        if arg:  # a command that takes none: `/bye now` or `/reset x` may be a slip, so it does not act
            self._say(f"usage: /{name.lower()} (it takes no argument)", "yellow")
            return True
        return handler() is not False

    def _say(self, message: str, style: str = "cyan") -> None:
        self.console.print(Text(message, style=style))

    def _modes_here(self) -> list[str]:
        """The modes this session can switch to: a draft-model mode needs the draft loaded at the start."""
        return [name for name in modes.MODES if self.pipeline.available(name)]

    def _cmd_help(self) -> None:
        here = self._modes_here()
        names = [f"{name} ({MODE_WORDS[name]})" if name in MODE_WORDS else name for name in here]
        # The others need a model or a history this session did not load: /mode would refuse them.
        prefix = "" if len(here) == len(modes.MODES) else "in this session: "
        typing = PLAIN_INPUT if self.plain else EDITOR_INPUT
        self.console.print(Text(HELP.format(modes=prefix + ", ".join(names), input=typing)))

    def _cmd_bye(self) -> bool:
        return False

    _cmd_exit = _cmd_quit = _cmd_bye

    def _cmd_stats(self) -> None:
        for line in session_lines(self.totals):
            self._say(line)
        if self.totals.drafted:
            for line in position_bars(self.totals.drafted_at, self.totals.accepted_at):
                self.console.print(line)

    def _cmd_k(self, arg: str) -> None:
        k = whole_number(arg)
        if k is None or not 1 <= k <= MAX_K:
            self._say(f"usage: /k N with N from 1 to {MAX_K}", "yellow")
            return
        self.settings.k = k
        used = self.settings.effective_k
        cap = f"; {self.settings.effective_mode} drafts at most {used}" if 0 < used < k else ""
        self._say(f"draft length k = {k} ({self.settings.label}{cap})")

    def _cmd_max(self, arg: str) -> None:
        tokens = whole_number(arg)
        if tokens is None:
            self._say("usage: /max N (tokens per reply; 0 = no limit)", "yellow")
            return
        self.settings.max_tokens = tokens
        self._say(f"replies stop after {n_tokens(tokens)}" if tokens else "replies run to their end (no limit)")

    def _cmd_temp(self, arg: str) -> None:
        value = decimal_number(arg)
        if value is None or not 0.0 <= value <= 5.0:
            self._say("usage: /temp T with T from 0 (greedy) to 5", "yellow")
            return
        self.settings.params = replace(self.settings.params, temperature=value)
        self._say(f"temperature = {value:g}" + (" (greedy)" if value == 0 else ""))

    def _on_off(self, arg: str, usage: str) -> bool | None:
        if arg.lower() in ("on", "off"):
            return arg.lower() == "on"
        self._say(f"usage: {usage} on|off", "yellow")
        return None

    def _cmd_spec(self, arg: str) -> None:
        value = self._on_off(arg, "/spec")
        if value is None:
            return
        if value and self.settings.mode == "target":
            drafting = "|".join(name for name in self._modes_here() if name != "target")
            self._say(f"the mode is 'target': choose one with /mode {drafting}", "yellow")
            return
        if value and not self.pipeline.available(self.settings.mode):
            self._say(f"mode {self.settings.mode} has no drafter here (no draft model loaded)", "yellow")
            return
        self.settings.spec = value
        self._say("speculation " + (f"on: {self.settings.label}" if value else "off: target alone"))

    def _cmd_mode(self, arg: str) -> None:
        name = arg if arg in modes.MODES else arg.lower()
        usage = f"usage: /mode {'|'.join(self._modes_here())}"
        if name not in modes.MODES:
            self._say(usage, "yellow")
            return
        if not self.pipeline.available(name):  # said before "lower case": spec would be refused too
            self._say(f"mode {name} is not available in this session (start with --mode {name})", "yellow")
            return
        if name != arg:
            self._say(f"{usage} (lower case)", "yellow")
            return
        self.settings.mode, self.settings.spec = arg, True
        self._say(f"mode: {self.settings.label}")

    def _cmd_rejected(self, arg: str) -> None:
        value = self._on_off(arg, "/rejected")
        if value is not None:
            self.settings.show_rejected = value
            self._say("rejected guesses " + ("shown" if value else "hidden"))

    def _cmd_system(self, arg: str) -> None:
        self.conversation.system = arg or None
        self._say("system prompt " + ("set" if arg else "cleared (template default)"))

    def _cmd_reset(self) -> None:
        self.conversation.messages.clear()
        self.log.restart()
        self._say("conversation cleared")

    def _cmd_load(self, arg: str) -> None:
        if not arg:
            self._say("usage: /load ID (from `specchat logs`) or /load FILE (saved with /save FILE.json)", "yellow")
            return
        try:
            self.conversation, where = self.log.load(arg)
        except SpecchatError as exc:
            self._say(f"{exc.message} ({exc.hint})" if exc.hint else exc.message, "red")
            return
        self._say(f"loaded {where}: {len(self.conversation.messages)} messages; the next reply continues it")

    def _cmd_save(self, arg: str) -> None:
        if not arg:
            self._say("usage: /save FILE (.json for JSON, anything else for Markdown)", "yellow")
            return
        path = expand_home(arg)
        try:
            save_conversation(self.conversation, path)
        except OSError as exc:
            self._say(f"could not save to {path}: {exc.strerror or exc}", "red")
            return
        self._say(f"saved {len(self.conversation.messages)} messages to {path}")


def read_prompt(argument: str | None, *, chat: bool, why_no_chat: str | None = None, raw: bool = False) -> str | None:
    """A one-shot prompt: piped stdin, then the argument (a blank line between them). None: neither was
    given and `chat` (a terminal on both ends) allows the interactive chat; otherwise a usage error.
    An argument `-` names stdin, as for cat: the prompt is stdin alone (read from a terminal too).
    why_no_chat: the hint when the chat is not allowed on a terminal (an output format that is not the live view).
    raw (--no-template): the text is continued as it is, so whitespace alone is a prompt (the indentation a
    line of code starts with), as serve's /v1/completions takes it; a chat message of whitespace says nothing."""
    dash = argument == "-"
    if dash:
        argument, chat = None, False
    piped = _read_stream() if dash else _read_stdin()
    text = _joined([part for part in (piped, argument) if part is not None and part.strip()])
    if text.strip():
        return text
    if raw and (blank := _joined([part for part in (piped, argument) if part])):
        return blank
    if piped is None and argument is None:
        if chat:
            return None
        hint = why_no_chat or 'specchat run "your prompt", pipe text into it, or use a terminal'
        raise UsageError("no prompt given", hint=hint)
    raise UsageError("the prompt is empty", hint="give some text to answer")


def _joined(parts: list[str]) -> str:
    if len(parts) == 2:  # piped text ends with a newline (echo, git diff): one blank line between, not two
        parts[0] = parts[0].rstrip("\r\n")
    return "\n\n".join(parts)


def _read_stdin() -> str | None:
    """Piped or redirected stdin (None: a terminal, or none)."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    return _read_stream()


def _read_stream() -> str | None:
    if sys.stdin is None:
        return None
    data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        raise UsageError(
            f"stdin is larger than {MAX_STDIN_BYTES:,} bytes",
            hint="pass a shorter text; specchat refuses rather than silently truncating",
        )
    # utf-8-sig: a leading byte order mark (Notepad, PowerShell) is no text: sent on, an "empty" file was a prompt
    text = data.decode("utf-8-sig", errors="replace")
    if "\ufffd" in text and "\ufffd".encode() not in data:
        stderr_console().print("warning: stdin is not valid UTF-8; bad bytes were replaced", style="yellow")
    return text


def chat_loop(session: ChatSession, *, history: bool = False) -> int:
    """The REPL (with history: a file in the state directory). Returns the exit code (0 for /bye and
    Ctrl-D)."""
    from .paths import history_file

    console = session.console
    reader = make_reader(console, session.commands(), history_file() if history else None)
    ctrl_c = _CtrlC()
    session.pipeline.interrupt.settle = ctrl_c.ours  # a Ctrl-C must not cut a generated reply's wind-down
    with ctrl_c.between_turns():
        return _loop(session, reader, ctrl_c)


def _loop(session: ChatSession, reader, ctrl_c: _CtrlC) -> int:
    console = session.console
    # The line editor reads Ctrl-C as a key (raw mode); plain line reading knows it only as a signal
    reading = nullcontext if isinstance(reader, TerminalInput) else ctrl_c.stops
    # Keys typed during a live reply wait unechoed for the next prompt; a plain reply has no live region to spoil
    typing_ahead = keys_unechoed if isinstance(reader, TerminalInput) else nullcontext
    console.print(Text("specchat chat: /help for commands, Ctrl-C stops a reply, Ctrl-D or /bye leaves", style="dim"))
    if session.log.cid is not None:
        count = len(session.conversation.messages)
        console.print(Text(f"continuing conversation {session.log.cid} ({count} messages)", style="dim"))
    while True:
        try:
            with reading():
                text = read_message(reader)
        except UnfinishedMessage as unfinished:  # typed text is sent, not dropped; a second Ctrl-D leaves
            console.print(Text("\n(Ctrl-D ended the unfinished message: it is sent)", style="dim"))
            text = unfinished.text
        except EOFError:
            console.print()
            return 0
        except KeyboardInterrupt:
            console.print(Text("\n(Ctrl-C at the prompt does not leave: use /bye or Ctrl-D)", style="dim"))
            continue
        except UnicodeDecodeError:
            console.print(Text("that input was not valid UTF-8; please type it again", style="yellow"))
            continue
        if text is None:
            return 0
        fixed = replace_bad_bytes(text)
        if fixed != text:  # a paste is pasted again the same: replaced, as in piped stdin, not refused
            console.print(Text("warning: that input was not valid UTF-8; bad bytes were replaced", style="yellow"))
            text = fixed
        stripped = text.strip()
        if not stripped:
            continue
        if "\n" not in stripped and stripped.startswith("//"):  # a message that begins with a slash (a path)
            text = text.replace("/", "", 1)
        elif stripped.startswith("/") and "\n" not in stripped:
            try:
                with ctrl_c.stops():
                    if not session.command(stripped):
                        return 0
            except KeyboardInterrupt:  # a /load or /save waiting on a slow disk or a locked log: stop it, not the chat
                console.print(Text(f"\n{stripped.split()[0]} stopped", style="dim"))
            continue
        try:
            with typing_ahead(), ctrl_c.stops():
                session.ask(text)
        except KeyboardInterrupt:  # before the loop's own stop (a slow template, the view opening): it stops this
            restore_terminal()  # reply, as one inside it does, not the chat (after it, Ctrl-C waits: Interrupt.settle)
            _drop_unanswered(session)
            console.print(Text("\n(stopped)", style="dim"))
        except SpecchatError as exc:  # e.g. one message longer than the context: say so, keep chatting
            _drop_unanswered(session)
            hint = f"  hint: {exc.hint}" if exc.hint else ""
            console.print(Text(f"error: {exc.message}{hint}", style="red"))


def _drop_unanswered(session: ChatSession) -> None:
    """The message of a turn that got no reply leaves the conversation (it was never answered)."""
    if session.conversation.messages and session.conversation.messages[-1].role == "user":
        session.conversation.messages.pop()


class _CtrlC:
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
