"""Interactive chat: a multi-turn conversation with slash commands, on top of the live view.

Line editing and history come from the standard readline module. A line ending in a backslash
continues on the next line; a line of three double quotes starts and ends a multi-line block.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console
from rich.text import Text

from . import modes
from .chat import Conversation, Message
from .errors import SpecchatError, UsageError
from .outputs import LiveOutput, Request, reply
from .paths import write_atomic
from .runtime import Generation, Pipeline
from .sampling import SamplingParams
from .speculative import Stats
from .view import position_bars, session_lines, stderr_console

MAX_K = max(mode.max_k for mode in modes.MODES.values())
MAX_STDIN_BYTES = 1_000_000  # documented in docs/usage.md: larger input is refused, not truncated

HELP = """\
/help            this list
/stats           session totals (tokens, speed, acceptance)
/k N             draft length (1-64; in auto mode the largest it may choose)
/temp T          temperature (0 = greedy, exactly the target's output)
/mode M          auto, spec (draft model), ngram (prompt lookup) or target
/spec on|off     speculation on (the chosen mode), or the target alone
/rejected on|off show or hide the rejected draft guesses
/system TEXT     set the system prompt (empty: the template's default)
/reset           forget the conversation (keeps the system prompt)
/save FILE       save the conversation (.json, else Markdown)
/bye             leave (Ctrl-D works too)
Multi-line input: end a line with \\ to continue, or wrap the text in lines of \"\"\"."""


@dataclass
class ChatSettings:
    mode: str = "auto"
    k: int | None = None  # None: the mode's default (modes.Mode.default_k)
    spec: bool = True  # False: the target alone, whatever the mode
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 512
    show_rejected: bool = True
    verbose: bool = False
    use_template: bool = True

    @property
    def effective_mode(self) -> str:
        return self.mode if self.spec else "target"

    @property
    def effective_k(self) -> int:
        mode = self.effective_mode
        return 0 if mode == "target" else (self.k or modes.get(mode).default_k)

    @property
    def label(self) -> str:
        return modes.get(self.effective_mode).describe(self.effective_k)

    def request(self) -> Request:
        return Request(self.effective_mode, self.effective_k, self.params, self.max_tokens)


class ChatSession:
    def __init__(self, pipeline: Pipeline, settings: ChatSettings, console: Console, system: str | None) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.console = console
        self.conversation = Conversation(system=system)
        self.totals = Stats()
        self.shown_legend = False

    # -- one turn ----------------------------------------------------------------------------------------

    def ask(self, text: str) -> Generation:
        self.conversation.messages.append(Message("user", text))
        prompt = self.pipeline.prompt(self.conversation.as_messages(), use_template=self.settings.use_template)
        return self.answer(prompt)

    def answer(self, prompt: list[int]) -> Generation:
        """Generate the assistant's turn for prompt ids built from the conversation, in the live view."""
        request = self.settings.request()
        output = LiveOutput(
            self.console,
            request,
            show_rejected=self.settings.show_rejected,
            verbose=self.settings.verbose,
            legend=not self.shown_legend,
        )
        self.shown_legend = self.shown_legend or output.legend
        generation = reply(self.pipeline, prompt, request, output)
        self.totals.merge(generation.stats)
        interrupted = generation.stats.stop_reason == "interrupted"
        self.conversation.messages.append(Message("assistant", generation.text, interrupted=interrupted))
        return generation

    # -- slash commands ----------------------------------------------------------------------------------

    def command(self, line: str) -> bool:
        """Run a slash command; False means leave."""
        name, _, arg = line[1:].partition(" ")
        arg = arg.strip()
        handler = getattr(self, f"_cmd_{name.lower()}", None)
        if handler is None:
            self._say(f"unknown command /{name}: /help lists the commands", "yellow")
            return True
        return handler(arg) is not False

    def _say(self, message: str, style: str = "cyan") -> None:
        self.console.print(Text(message, style=style))

    def _cmd_help(self, _arg: str) -> None:
        self.console.print(Text(HELP))

    def _cmd_bye(self, _arg: str) -> bool:
        return False

    _cmd_exit = _cmd_quit = _cmd_bye

    def _cmd_stats(self, _arg: str) -> None:
        for line in session_lines(self.totals):
            self._say(line)
        if self.totals.drafted:
            for line in position_bars(self.totals.drafted_at, self.totals.accepted_at):
                self.console.print(line)

    def _cmd_k(self, arg: str) -> None:
        if not arg.isdigit() or not 1 <= int(arg) <= MAX_K:
            self._say(f"usage: /k N with N from 1 to {MAX_K}", "yellow")
            return
        self.settings.k = int(arg)
        self._say(f"draft length k = {self.settings.k} ({self.settings.label})")

    def _cmd_temp(self, arg: str) -> None:
        try:
            value = float(arg)
        except ValueError:
            value = -1.0
        if not 0.0 <= value <= 5.0:
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
            self._say("the mode is 'target': choose one with /mode auto|spec|ngram", "yellow")
            return
        if value and not self.pipeline.available(self.settings.mode):
            self._say(f"mode {self.settings.mode} has no drafter here (no draft model loaded)", "yellow")
            return
        self.settings.spec = value
        self._say("speculation " + (f"on: {self.settings.label}" if value else "off: target alone"))

    def _cmd_mode(self, arg: str) -> None:
        if arg not in modes.MODES:
            self._say(f"usage: /mode {'|'.join(modes.MODES)}", "yellow")
            return
        if not self.pipeline.available(arg):
            self._say(f"mode {arg} is not available in this session (start with --mode {arg})", "yellow")
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

    def _cmd_reset(self, _arg: str) -> None:
        self.conversation.messages.clear()
        self._say("conversation cleared")

    def _cmd_save(self, arg: str) -> None:
        if not arg:
            self._say("usage: /save FILE (.json for JSON, anything else for Markdown)", "yellow")
            return
        path = Path(arg).expanduser()
        try:
            save_conversation(self.conversation, path)
        except OSError as exc:
            self._say(f"could not save to {path}: {exc.strerror or exc}", "red")
            return
        self._say(f"saved {len(self.conversation.messages)} messages to {path}")


def save_conversation(conversation: Conversation, path: Path) -> None:
    """Write atomically (temporary file + rename): an existing file is never left half-written."""
    messages = conversation.as_messages()
    if path.suffix.lower() == ".json":
        data = [{"role": m.role, "content": m.content, "interrupted": m.interrupted} for m in messages]
        body = json.dumps({"messages": data}, ensure_ascii=False, indent=2) + "\n"
    else:
        blocks = []
        for m in messages:
            mark = " (interrupted)" if m.interrupted else ""
            blocks.append(f"## {m.role}{mark}\n\n{m.content}\n")
        body = "\n".join(blocks)
    write_atomic(path, body)


def read_message(console: Console) -> str | None:
    """One user message (None at end of input). Ctrl-C at the prompt is handled by the caller."""
    first = ask(console, Text("you › ", style="bold cyan"))
    if first.strip() == '"""':
        lines = []
        while (line := ask(console, Text("... "))).strip() != '"""':
            lines.append(line)
        return "\n".join(lines)
    lines = [first]
    while lines[-1].endswith("\\"):
        lines[-1] = lines[-1][:-1]
        lines.append(ask(console, Text("... ")))
    return "\n".join(lines)


def ask(console: Console, prompt: Text) -> str:
    """input() with the prompt handed to readline, its colour codes wrapped in \\001..\\002 so that readline
    does not count them. Rich's console.input prints the prompt itself, so readline, redrawing its line
    (after a terminal resize, say), erased a prompt it did not know of."""
    if "readline" not in sys.modules or not console.is_terminal:
        return console.input(prompt)
    with console.capture() as capture:
        console.print(prompt, end="")
    return input(re.sub(r"(\x1b\[[0-9;]*m)", "\x01\\1\x02", capture.get()))


def setup_history(path: Path) -> None:
    try:
        import readline
    except ImportError:  # pragma: no cover - Windows without pyreadline
        return
    import atexit

    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        readline.read_history_file(path)
    readline.set_history_length(1000)
    atexit.register(lambda: _write_history(readline, path))


def _write_history(readline, path: Path) -> None:
    with contextlib.suppress(OSError):
        readline.write_history_file(path)


def read_prompt(argument: str | None, *, chat: bool) -> str | None:
    """A one-shot prompt: piped stdin, then the argument (a blank line between them). None: neither was
    given and `chat` (a terminal on both ends) allows the interactive chat; otherwise a usage error."""
    piped = _read_stdin()
    text = "\n\n".join(part for part in (piped, argument) if part is not None and part.strip())
    if text.strip():
        return text
    if piped is None and argument is None:
        if chat:
            return None
        raise UsageError("no prompt given", hint='specchat run "your prompt", pipe text into it, or use a terminal')
    raise UsageError("the prompt is empty", hint="give some text to answer")


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


def chat_loop(session: ChatSession, *, history: bool = False) -> int:
    """The REPL (with history: readline's, kept in the state directory). Returns the exit code (0 for
    /bye and Ctrl-D)."""
    if history:
        from .paths import history_file

        setup_history(history_file())
    console = session.console
    console.print(Text("specchat chat: /help for commands, Ctrl-C stops a reply, Ctrl-D or /bye leaves", style="dim"))
    while True:
        try:
            text = read_message(console)
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
        stripped = text.strip()
        if not stripped:
            continue
        if stripped.startswith("/") and "\n" not in stripped:
            if not session.command(stripped):
                return 0
            continue
        try:
            session.ask(text)
        except SpecchatError as exc:  # e.g. the conversation outgrew the context: say so, keep chatting
            if session.conversation.messages and session.conversation.messages[-1].role == "user":
                session.conversation.messages.pop()
            hint = f"  hint: {exc.hint}" if exc.hint else ""
            console.print(Text(f"error: {exc.message}{hint} (or /reset to start over)", style="red"))
