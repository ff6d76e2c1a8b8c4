"""The chat's slash commands (/help, /k, /mode, /save, ...), as a base class of repl.ChatSession.

Each command is a `_cmd_NAME` method, found by name (so that completion and the docs' list see every one); it
changes the session's settings or conversation and says what it did. Apart from repl.py, which holds the turns
themselves, so that a command can be read or added without the reply's machinery around it.
"""

from __future__ import annotations

import inspect
import os
import re
from dataclasses import replace
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import modes
from .chat import decimal_number, system_refusal, whole_number
from .errors import SpecchatError
from .logstore import Recorder
from .paths import disk_full, expand_home
from .runtime import Pipeline
from .speculative import Stats
from .statsview import position_bars, session_lines
from .transcript import save_conversation
from .view import n_tokens, say, visible

if TYPE_CHECKING:
    from .chat import Conversation
    from .repl import ChatSettings

MAX_K = max(mode.max_k for mode in modes.MODES.values())
MODE_WORDS = {"spec": "draft model", "ngram": "prompt lookup", "suffix": "past text"}

# Two columns, so that a description the terminal's width wraps goes on under its own column, not under the commands.
HELP = (
    ("/help", "this list"),
    ("/stats", "session totals (tokens, speed, acceptance)"),
    ("/max N", "longest reply in tokens (0 = no limit: to its end or the context's)"),
    ("/k N", "draft length (1-64; in auto mode the largest it may choose)"),
    ("/temp T", "temperature (0 = greedy, exactly the target's output)"),
    ("/mode [M]", "{modes} (alone: the mode now)"),
    ("/spec on|off", "speculation on (the chosen mode), or the target alone"),
    ("/rejected on|off", "show or hide the rejected draft guesses"),
    ("/system [TEXT]", "show the system prompt; TEXT sets it, /system off clears it"),
    ("/reset", "start a new conversation (keeps the system prompt)"),
    ("/save FILE", "save the conversation (.json: /load reads it back; else Markdown)"),
    ("/load ID|FILE", "continue a logged conversation (`specchat logs`) or a saved .json"),
    ("/bye", "leave (Ctrl-D works too)"),
)
# How to type a message of several lines: the terminal's line editor (prompt_toolkit) takes pastes, Esc-Enter and
# Tab; plain line reading (TERM=dumb: Emacs' shell, where the terminal edits the line) reads a pasted block as one
# message per line and knows no keys of its own, so there only a line ending in a backslash or a """ block work.
EDITOR_INPUT = "Multi-line input: paste it, or Esc-Enter (Alt-Enter) for a new line; Tab completes commands."
PLAIN_INPUT = 'Multi-line input: end a line with \\ to go on, or put the message between two """ lines.'


def unquoted(arg: str) -> str:
    """A path argument as a shell takes one quoted whole: terminals quote the path of a file dropped on them
    ('/home/me/my notes.json'), and shell users type "c.json" from habit. The quotes were part of the name:
    /save "c.json" wrote Markdown (its suffix was `.json"`) to a file named with them, and /load found none."""
    if len(arg) >= 2 and arg[0] == arg[-1] and arg[0] in "'\"":
        return arg[1:-1]
    return arg


def _split(line: str) -> tuple[str, str]:
    """A command line's name (after its slash) and its argument, split at the first run of blanks or newlines
    (`/system One\nTwo`'s text is "One\nTwo", not "One \nTwo")."""
    name, arg = re.fullmatch(r"/(\S*)\s*(.*)", line, re.DOTALL).groups()
    return name, arg.strip()


class SlashCommands:
    """The commands of a chat session; ChatSession holds the state they act on."""

    pipeline: Pipeline
    settings: ChatSettings
    console: Console
    log: Recorder
    conversation: Conversation
    totals: Stats
    plain: bool
    shown_legend: bool

    @classmethod
    def commands(cls) -> list[str]:
        """Every slash command, for completion."""
        return [f"/{name[5:]}" for name in dir(cls) if name.startswith("_cmd_")]

    def names_a_command(self, text: str) -> bool:
        """Whether a block of several lines is a command: its first word names one (`/system`, then Esc-Enter
        and a prompt of several lines). Any other block that begins with a slash (a pasted log, a path) is a
        message."""
        return hasattr(self, f"_cmd_{_split(text)[0].lower()}")

    def command(self, line: str) -> bool:
        """Run a slash command; False means leave."""
        name, arg = _split(line)
        handler = getattr(self, f"_cmd_{name.lower()}", None)
        if not name:  # "/" or "/ help": no name to send with "//" either
            self._say("a / alone is no command: /help lists the commands", "yellow")
            return True
        if handler is None:
            name = visible(name)  # an Esc-Enter read by plain line reading is in the name: shown, not sent
            self._say(f"unknown command /{name}: /help lists the commands; //{name} sends it as a message", "yellow")
            return True
        if inspect.signature(handler).parameters:
            if "\n" in arg and name.lower() != "system":  # a file name or a number with a newline in it: a slip
                usage = (
                    f"usage: /{name.lower()} takes its argument on one line (/system TEXT may take several); "
                    f"//{name} sends the block as a message"
                )
                self._say(usage, "yellow")
                return True
            return handler(arg) is not False
        if arg:  # a command that takes none: `/bye now` or `/reset x` may be a slip, so it does not act
            block = f"; //{name} sends the block as a message" if "\n" in arg else ""  # pasted notes: "/help me..."
            self._say(f"usage: /{name.lower()} (it takes no argument){block}", "yellow")
            return True
        return handler() is not False

    def _say(self, message: str, style: str = "cyan") -> None:
        say(self.console, Text(message, style=style))  # a path of the user's can make Rich's wrap raise: say falls back

    def _modes_here(self) -> list[str]:
        """The modes this session can switch to: a draft-model mode needs the draft loaded at the start."""
        return [name for name in modes.MODES if self.pipeline.available(name)]

    def _cmd_help(self) -> None:
        here = self._modes_here()
        names = [f"{name} ({MODE_WORDS[name]})" if name in MODE_WORDS else name for name in here]
        # The others need a model or a history this session did not load: /mode would refuse them.
        prefix = "" if len(here) == len(modes.MODES) else "in this session: "
        typing = PLAIN_INPUT if self.plain else EDITOR_INPUT
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column()
        for command, words in HELP:
            grid.add_row(Text(command), Text(words.format(modes=prefix + ", ".join(names))))
        self.console.print(grid)
        self.console.print(Text(typing))

    def _cmd_bye(self) -> bool:
        return False

    _cmd_exit = _cmd_quit = _cmd_bye

    def _cmd_stats(self) -> None:
        for line in session_lines(self.totals):
            self._say(line)
        if self.totals.drafted:
            for line in position_bars(self.totals.drafted_at, self.totals.accepted_at, columns=self.console.width):
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
        name = arg.lower()  # as --mode takes it: `/mode NGRAM` was refused as "(lower case)"
        choices = f"/mode {'|'.join(self._modes_here())}"
        if not name:  # as /system alone shows the prompt: it printed only the usage, never which mode was on
            # the mode the next reply uses; after /spec off it read as after /mode target, where /spec on refuses
            chosen = replace(self.settings, spec=True).label
            # ... but not where the mode chosen is the target alone, where /spec on refuses
            off = (
                ""
                if self.settings.spec or self.settings.mode == "target"
                else f"speculation off: /spec on returns to {chosen}; "
            )
            self._say(f"mode: {self.settings.label} ({off}{choices} switches)")
            return
        if name not in modes.MODES:
            self._say(f"usage: {choices}", "yellow")
            return
        if not self.pipeline.available(name):
            self._say(f"mode {name} is not available in this session (start with --mode {name})", "yellow")
            return
        self.settings.mode, self.settings.spec = name, True
        self._say(f"mode: {self.settings.label}")

    def _cmd_rejected(self, arg: str) -> None:
        value = self._on_off(arg, "/rejected")
        if value is not None:
            if value and not self.settings.show_rejected:  # a legend shown so far did not name them
                self.shown_legend = False
            self.settings.show_rejected = value
            self._say("rejected guesses " + ("shown" if value else "hidden"))

    def _cmd_system(self, arg: str) -> None:
        if not arg:  # it cleared the prompt, unseen, and nothing showed what the prompt was
            current = self.conversation.system
            if current is None:
                self._say("no system prompt (the template's default): /system TEXT sets one")
                return
            self._say("system prompt (/system TEXT replaces it, /system off clears it):")
            say(self.console, Text(visible(current)))  # the user's text: Rich's wrap of it can raise
            return
        clear = arg.lower() == "off"
        if not clear and self.settings.use_template:
            # A template that refuses a system message (Gemma 2's) refused it only with the next message
            refused = system_refusal(self.pipeline, arg, self.settings.template_kwargs)
            if refused is not None:
                self._say(f"{refused.message} (the system prompt is left as it was)", "red")
                return
        self.conversation.system = None if clear else arg
        self._say("system prompt cleared (the template's default)" if clear else "system prompt set")

    def _cmd_reset(self) -> None:
        self.conversation.messages.clear()
        self.log.restart()
        self._say("conversation cleared")

    def _cmd_load(self, arg: str) -> None:
        arg = unquoted(arg)
        if not arg:
            self._say("usage: /load ID (from `specchat logs`) or /load FILE (saved with /save FILE.json)", "yellow")
            return
        try:
            self.conversation, where = self.log.load(arg)
        except SpecchatError as exc:
            self._say(f"{exc.message} ({exc.hint})" if exc.hint else exc.message, "red")
            return
        self._say(f"loaded {where}: {len(self.conversation.messages)} messages; the next reply continues it")
        self.check_kept_system()

    def check_kept_system(self) -> None:
        """A conversation taken up (/load, `run -c`) whose system prompt this model's template refuses (another
        model's, under Gemma 2's): said at once, as /system says it, not by the next message's failure."""
        system = self.conversation.system
        kwargs = self.settings.template_kwargs
        if system and self.settings.use_template and (refused := system_refusal(self.pipeline, system, kwargs)):
            self._say(f"{refused.message}: its system prompt cannot be sent (/system off clears it)", "yellow")

    def _cmd_save(self, arg: str) -> None:
        arg = unquoted(arg)
        if not arg:
            self._say("usage: /save FILE (.json for JSON, anything else for Markdown)", "yellow")
            return
        path = expand_home(arg)
        try:
            save_conversation(self.conversation, path)
        except OSError as exc:
            # "No such file or directory" of a file that /save is to make: the folder is what is missing
            missing = isinstance(exc, FileNotFoundError) and not os.path.isdir(path.parent)  # never raises
            why = f"the folder {path.parent} does not exist" if missing else exc.strerror or exc
            if disk_full(exc):  # the old file is whole (written atomically): what to do is the news
                why = "the disk is full (free some space, or /save to another disk)"
            self._say(f"could not save to {path}: {why}", "red")
            return
        self._say(f"saved {len(self.conversation.messages)} messages to {path}")
