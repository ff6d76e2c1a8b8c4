"""Terminal output (Rich): the consoles, stdout's writes and their failures, and errors and notes as one line each.
The stats lines are in statsview.py, bench's progress in progressview.py, the tables of bench and tune in
tableview.py, that of models in modelsview.py, and the terminal's state (cursor, stdin's modes) in terminal.py."""

from __future__ import annotations

import codecs
import errno
import json
import os
import re
import sys
from collections.abc import Iterable

from rich.console import Console
from rich.text import Text

from .errors import SpecchatError
from .interrupt import Interrupt
from .paths import disk_full


class StdoutError(SpecchatError):
    """stdout cannot take the output (disk full, closed): the user's environment, not a bug."""


def n_tokens(n: float) -> str:
    """ "1 token", "5 tokens" (a reply cut at -n 1 said "1 tokens")."""
    return f"{n:.0f} token" + ("" if round(n) == 1 else "s")


def require_stdout(what: str) -> None:
    """StdoutError now where stdout is closed (`>&-`): before minutes of measuring, not after them."""
    _Stdout(what)._stream()


class _Stdout:
    """sys.stdout as looked up at each write (test runners swap it), with write failures made one
    clear error. A reader that went away (EPIPE) stays a BrokenPipeError: that one is quiet."""

    def __init__(self, what: str = "the reply") -> None:
        self.what = what

    def _stream(self):
        if sys.stdout is None:
            raise StdoutError(f"cannot write {self.what} to stdout: it is closed", hint="give the command a stdout")
        return sys.stdout

    def _guard(self, call):
        try:
            return call()
        except BrokenPipeError:
            raise
        except OSError as exc:
            reason = (exc.strerror or os.strerror(exc.errno or errno.EIO)).lower()
            raise StdoutError(f"cannot write {self.what} to stdout: {reason}", hint=stdout_hint(exc)) from None

    def write(self, text: str) -> int:
        stream = self._stream()
        return self._guard(lambda: stream.write(text))

    def flush(self) -> None:
        if sys.stdout is not None:
            self._guard(sys.stdout.flush)

    def isatty(self) -> bool:
        return sys.stdout is not None and sys.stdout.isatty()

    def fileno(self) -> int:
        return self._stream().fileno()

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"


def stdout_hint(exc: OSError) -> str:
    """What to do where a write to stdout failed (Typer's own writes too: cli/app.py). A full disk wants space;
    EIO is a terminal closed under the run (SIGHUP ignored: `trap '' HUP`), where space is not the matter."""
    if disk_full(exc):
        return "free some space or redirect stdout elsewhere"
    if exc.errno == errno.EIO:
        return "the terminal or device stdout went to is gone: redirect stdout to a file (`> reply.txt`)"
    return "redirect stdout elsewhere (a file: `> reply.txt`)"


def _no_color(flag: bool) -> bool:
    """--no-color, or NO_COLOR set and not empty (no-color.org: an empty NO_COLOR does not count)."""
    return flag or os.environ.get("NO_COLOR", "") != ""


def stderr_console(no_color: bool = False) -> Console:
    """Notes and errors. Not on a terminal (a log file, journald, `2>&1 | tee`), a line stays one line:
    Rich would wrap it at 80 columns, splitting a path or a server's note into pieces."""
    # emoji=False: ':smile:' in a path or a served request's path is text (markup=False leaves Rich's emoji on)
    console = Console(stderr=True, no_color=_no_color(no_color), highlight=False, emoji=False)
    console.soft_wrap = not wraps_at_words(console)
    return console


class _StdoutConsole(Console):
    """Rich's Console, but a reader that went away (`specchat logs | head`) stays the quiet BrokenPipeError
    that the CLI ends with exit 0 (docs/usage.md): Rich's own on_broken_pipe exits with 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def stdout_console(no_color: bool = False, what: str = "the reply") -> Console:
    return _StdoutConsole(
        file=_Stdout(what), no_color=_no_color(no_color), highlight=False, soft_wrap=True, emoji=False
    )


def stdout_json(value, indent: int | None = None) -> str:
    """JSON for stdout: characters as they are where stdout writes UTF-8; escaped (\u00e9) where its encoding
    may not hold them (LANG=C with PYTHONIOENCODING=ascii, cp1252 on Windows), which a JSON reader reads back
    the same, where stdout's '?' for them (cli/streamencoding.py) would change the data."""
    try:
        utf8 = codecs.lookup(getattr(sys.stdout, "encoding", None) or "ascii").name == "utf-8"  # utf8, UTF-8, U8
    except LookupError:
        utf8 = False
    return json.dumps(value, ensure_ascii=not utf8, indent=indent)


def guard_stdout(call, what: str):
    """call() (which prints to stdout another way: Typer's help) with a write's failure made StdoutError."""
    return _Stdout(what)._guard(call)


def write_stdout(text: str, what: str = "the reply") -> None:
    out = _Stdout(what)
    out.write(text)
    out.flush()


def write_json_list(items: Iterable, what: str, indent: int = 2) -> None:
    """stdout_json(list(items), indent) and a newline, written item by item (`logs -n 0 --json`: the whole log in
    one string). Ctrl-C closes the list after the items written, so that what is on stdout stays JSON (as `run
    --json` ends its object), then goes on as Ctrl-C: a press while an item is written waits for its end. So does
    a failure of the items (a log damaged past its first pages: its error on stderr, exit 1), not of stdout."""
    out, interrupt, pad = _Stdout(what), Interrupt(), "\n" + " " * indent
    out.write("[")
    written = 0
    try:
        for item in items:
            with interrupt.native():
                out.write(("," if written else "") + pad + stdout_json(item, indent).replace("\n", pad))
            written += 1
            interrupt.check()
    except (BrokenPipeError, StdoutError):  # stdout itself: nothing more goes there
        raise
    except BaseException:
        write_stdout("\n]\n" if written else "]\n", what)
        raise
    write_stdout("\n]\n" if written else "]\n", what)


def silence_stdout() -> None:
    """After EPIPE or a failed write, point stdout at /dev/null so that the final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


# Control characters in model or logged text, but tab, newline and CR (which Rich drops): a terminal acts
# on them instead of showing them (ESC starts a sequence that clears the screen, retitles the window, or
# with its BEL stripped by Rich swallows the output after it). Shown as Unicode's control pictures.
_CONTROLS = {code: chr(0x2400 + code) for code in range(32) if code not in (9, 10, 13)}
_CONTROLS |= {0x7F: "\u2421"} | {code: "\ufffd" for code in range(0x80, 0xA0)}  # DEL and the C1 controls
# whether there is one to show: str.translate looks each character up (0.5 s of `logs -n 0` for 20,000 replies)
_ANY_CONTROL = re.compile("[" + re.escape("".join(map(chr, _CONTROLS))) + "]")


def visible(text: str) -> str:
    """Text for a terminal, its control characters shown rather than acted on (see _CONTROLS)."""
    return text.translate(_CONTROLS) if _ANY_CONTROL.search(text) else text


def one_line(text: str) -> str:
    """Text someone else wrote (a client's model name, a --prompts category) as one harmless line for the
    terminal: a newline would start a line that reads as another's, an escape sequence would act on the
    terminal (clear it, recolour it). Such characters are shown escaped, as Python writes them ("\\n",
    "\\x1b"); other text is kept."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


_LINE_BREAKS = {10: "\u240a", 13: "\u240d"}  # control pictures: an error stays one line


def print_error(console: Console, message: str, hint: str | None) -> None:
    # visible(): errors and notes quote what the user gave (file names, prompts), control characters too;
    # and one line, whatever they quote: a file named "a\nb.gguf" split the error over two lines
    line = Text("error: ", style="bold red")
    line.append(visible(message).translate(_LINE_BREAKS))
    if hint:
        line.append("  hint: ", style="yellow")
        line.append(visible(hint).translate(_LINE_BREAKS))
    say(console, line)


def note(console: Console, message: str) -> None:
    say(console, Text(visible(message), style="dim"))


def say(console: Console, line: Text | str, **options) -> None:
    """One logical line (an error, a note, a warning). To a file or a pipe it stays one physical line, for
    scripts that read it; on a terminal Rich wraps it at words, where the terminal cut it inside one ('tok' /
    'ens')."""
    try:
        console.print(line, soft_wrap=not wraps_at_words(console), **options)
    except IndexError:  # Rich 15's wrap of a word that starts with zero-width joiners (a user's path): the
        console.print(line, soft_wrap=True, **options)  # terminal wraps it; nothing was printed before the raise


def dumb_term() -> bool:
    """TERM says the terminal takes no escape codes, as Rich reads it: `dumb` (Emacs' shell, some IDEs) or `unknown`
    (a terminal no terminfo names), any case. specchat matched "dumb" alone: under TERM=unknown the chat ran its
    full line editor while Rich drew no reply view."""
    return os.environ.get("TERM", "").lower() in ("dumb", "unknown")


def wraps_at_words(console: Console) -> bool:
    """Whether Rich should wrap a line at words: on a terminal only. Rich takes FORCE_COLOR (which CI runners set
    for colours) for a terminal even when the stream is a file, and wrapped `--stats 2>stats.txt` at 80 columns
    there: the file's lines must stay one each, for the scripts that read them. TTY_COMPATIBLE=1 says the stream
    is a terminal: it is taken as one."""
    if not console.is_terminal or console.is_dumb_terminal:  # TERM=dumb (Emacs' shell): its window wraps lines
        return False
    if not os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE") == "1":
        return True  # a tty, or a stream said to be one (TTY_COMPATIBLE, or a Console made with force_terminal)
    try:
        return console.file.isatty()
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def redrawn(console: Console) -> bool:
    """Whether a region can be drawn over in place (a progress bar, the live view): on a terminal only. Elsewhere
    (`2> log`, a pipe) Rich prints a bar once, as it stops: after the lines that said the download was done,
    wrapped at 80 columns, and a transient one as a blank line. Not under TERM=dumb (Emacs' shell: no cursor
    moves), nor where FORCE_COLOR alone makes Rich take a file for a terminal (a CI log: cursor codes and carriage
    returns ten times a second): where lines wrap at words."""
    return wraps_at_words(console)
