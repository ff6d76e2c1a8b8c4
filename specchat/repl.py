"""Interactive chat: a multi-turn conversation with slash commands, on top of the live view.

This module holds a chat session (its settings, its turns) and the chat's entry point, and reads a one-shot
prompt (stdin, the argument). When the conversation outgrows the context, its oldest turns give way
(chat.fit_conversation); the system prompt stays. The slash commands are in chatcommands.py, the loop that
reads messages (lineinput: prompt_toolkit on a terminal) and its Ctrl-C handling in chatloop.py.
"""

from __future__ import annotations

import codecs
import contextlib
import sys
from dataclasses import dataclass, field

from rich.console import Console

from . import chatloop, modes
from .chat import Message, MessagesRefused, TemplateError, fit_conversation, system_refusal
from .chatcommands import SlashCommands
from .errors import SpecchatError, UsageError
from .generation import Generation
from .lineinput import make_reader
from .logstore import Recorder
from .outputs import LiveOutput, Output, Request, TextOutput
from .replying import print_reply_stats, reply
from .runtime import Pipeline
from .sampling import SamplingParams
from .speculative import Stats
from .statsview import summary_line
from .view import note, stderr_console

MAX_STDIN_BYTES = 1_000_000  # documented in docs/usage.md: larger input is refused, not truncated


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
    stats: bool = False  # --stats: each reply's summary on stderr too, as after a one-shot reply
    template_kwargs: dict = field(default_factory=dict)  # --chat-template-kwargs: the template's variables, every turn

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
        return Request(
            self.effective_mode, self.effective_k, self.params.seeded(), self.max_tokens, self.template_kwargs
        )


def fit_turns(pipeline, conversation, settings, log, chat: bool = True) -> tuple[list[int], str | None]:
    """The prompt ids of a conversation whose last message is the new one; when it has outgrown the
    context its oldest turns give way (the log is told, so that later turns are still logged), and the
    note that says so is returned (None when nothing gave way). `chat`: False for `run -c`, whose errors
    name no chat command."""
    before = list(conversation.messages)
    ids, dropped = fit_conversation(
        pipeline.target, conversation, settings.max_tokens, settings.use_template, chat, settings.template_kwargs
    )
    log.gave_way(before[: len(before) - len(conversation.messages)])
    if not dropped:
        return ids, None
    turns = f"{dropped} oldest turns" if dropped > 1 else "oldest turn"  # not "the 1 oldest turn"
    return ids, f"context: the {turns} gave way to fit the context of {pipeline.target.n_ctx} tokens"


class ChatSession(SlashCommands):
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
        self.said_mode_note = False  # --stats: auto's note holds for the session, said with its first reply

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
        generation = reply(self.pipeline, prompt, request, output)
        # shown above a reply stopped before its first token, it named nothing: the next reply shows it again
        legend_shown = isinstance(output, LiveOutput) and output.legend
        self.shown_legend = self.shown_legend or (legend_shown and bool(generation.tokens))
        if self.plain:  # the live view's summary line, as text
            self.console.print(summary_line(generation.stats, request.label))
        unanswered = generation.unanswered
        if self.settings.stats and not unanswered:  # '0 tokens, no token' said nothing the next line does not
            first_auto = request.mode == "auto" and not self.said_mode_note
            print_reply_stats(self.pipeline, request, generation, mode_note=first_auto)
            self.said_mode_note = self.said_mode_note or first_auto
        self.totals.merge(generation.stats)
        if unanswered:
            # Stopped before the first token (a long paste still being read): nothing was answered, and
            # kept, the message would be sent and read again with every later turn
            self.drop_unanswered()
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

    def drop_unanswered(self) -> None:
        """The message of a turn that got no reply leaves the conversation (it was never answered)."""
        if self.conversation.messages and self.conversation.messages[-1].role == "user":
            self.conversation.messages.pop()


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
    if piped is not None and not raw:  # raw (--no-template): the text goes on as it is, its line ends too
        piped = _unix_lines(piped)
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


def check_system(system: str | None, prompt: str | None) -> None:
    """`--system -` is stdin, as a prompt of `-` is (it was sent as the text "-"); the prompt is then the argument
    alone. Where the prompt would come from stdin too (none given, or `-`), one stdin cannot be both: a usage
    error, checked before anything else is looked at."""
    if system == "-" and (prompt is None or prompt == "-"):
        raise UsageError(
            "--system - reads the system prompt from stdin, and the prompt would come from stdin too",
            hint='give the prompt as the argument: specchat run --system - "PROMPT" < FILE (or --system "$(cat FILE)")',
        )


def read_system(system: str | None) -> str | None:
    """The system prompt: `--system -` read from stdin (once check_system() has let it through)."""
    if system != "-":
        return system
    # the file's trailing newlines are no part of it, as with --system "$(cat FILE)"
    text = _read_stream("the system prompt")
    return None if text is None else _unix_lines(text).rstrip("\n")


def _joined(parts: list[str]) -> str:
    if len(parts) == 2:  # piped text ends with a newline (echo, git diff): one blank line between, not two
        parts[0] = parts[0].rstrip("\r\n")
    return "\n\n".join(parts)


def _read_stdin() -> str | None:
    """Piped or redirected stdin (None: a terminal, or none)."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    return _read_stream()


def _read_stream(what: str = "the prompt") -> str | None:
    """The text on stdin, its line ends as they are (see _unix_lines)."""
    if sys.stdin is None:
        return None
    if sys.stdin.isatty():  # `run -` typed on a terminal waited as cat does, without a word: it looked hung
        note(stderr_console(), f"reading {what} from standard input; end it with Ctrl-D")
    try:
        data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    except OSError as exc:  # opened for writing only (`0>FILE`), a terminal that has gone (EIO)
        raise SpecchatError(
            f"cannot read stdin: {exc.strerror or exc}",
            hint="redirect it from a file or a pipe (< FILE); with the prompt as an argument, from /dev/null",
        ) from None
    if len(data) > MAX_STDIN_BYTES:
        raise UsageError(
            f"stdin is larger than {MAX_STDIN_BYTES:,} bytes",
            hint="pass a shorter text; specchat refuses rather than silently truncating",
        )
    # UTF-16 with its byte order mark (Notepad's "Unicode", Windows PowerShell's `>`): read as UTF-8, it was a
    # warning of bad bytes and a prompt of U+FFFD and NULs. Bytes that are no UTF-16 are read as UTF-8 below
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        with contextlib.suppress(UnicodeDecodeError):
            return data.decode("utf-16")
    # utf-8-sig: a leading byte order mark (Notepad, PowerShell) is no text: sent on, an "empty" file was a prompt
    text = data.decode("utf-8-sig", errors="replace")
    if "\ufffd" in text and "\ufffd".encode() not in data:
        stderr_console().print("warning: stdin is not valid UTF-8; bad bytes were replaced", style="yellow")
    return text


def _unix_lines(text: str) -> str:
    """Read as bytes, a Windows file's CRLF reached the model as "\r\n", which tokenizes apart from the Unix
    file's "\n": line ends are made "\n" as Python's text mode makes them, a lone "\r" (an old Mac file, a
    progress bar's redraw) too, as text mode and a chat's paste both take it (not for --no-template, whose
    plain-text prompt is continued as it is)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def require_chat(pipeline: Pipeline, system: str | None = None, template_kwargs: dict | None = None) -> None:
    """A target whose chat template is missing (a base model) or cannot render refused every message of the
    chat with 'use --no-template', an option a running chat cannot take: said before the first prompt (with the
    chat's system message, which some templates want first; one that the template refuses, as Gemma 2's does, is
    refused here too, not with the first message), with the chat's template variables (--chat-template-kwargs)."""
    if system:
        with contextlib.suppress(TemplateError):
            pipeline.prompt([Message("system", system), Message("user", "Hi")], template_kwargs=template_kwargs)
            return  # the chat's opening renders, its system prompt with it: nothing to render again
        if (refused := system_refusal(pipeline, system, template_kwargs)) is not None:
            raise refused
    with contextlib.suppress(MessagesRefused):  # refused these messages, not every chat: said when sent
        pipeline.prompt([Message("user", "Hi")], template_kwargs=template_kwargs)


def chat_loop(session: ChatSession, *, history: bool = False) -> int:
    """The REPL (with history: a file in the state directory). Returns the exit code (0 for /bye and
    Ctrl-D)."""
    from .paths import history_file

    console = session.console
    reader = make_reader(console, session.commands(), history_file() if history else None)
    ctrl_c = chatloop.CtrlC()
    session.pipeline.interrupt.settle = ctrl_c.ours  # a Ctrl-C must not cut a generated reply's wind-down
    with ctrl_c.between_turns():
        return chatloop.run(session, reader, ctrl_c)
