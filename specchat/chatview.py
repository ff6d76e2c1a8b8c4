"""The live view of a reply (Rich): what the draft guessed, what the target kept, what it cost.

Reply text is append-only: every completed line (and row of a line that wraps) is printed once, above a
small Rich Live region that holds only the row being written and a one-line footer. Rich Live is known
to truncate or duplicate long streamed text when it owns it, so it never does here. The view counts
nothing itself: the footer shows the stats that come with each update.
"""

from __future__ import annotations

import re
import unicodedata
from contextlib import ExitStack

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.segment import Segment as RichSegment
from rich.text import Text

from .generation import ACCEPTED, REJECTED, TARGET, Segment, Update
from .speculative import Stats
from .statsview import footer
from .terminal import cursor_kept_hidden
from .view import redrawn, visible

STYLES = {ACCEPTED: "green", TARGET: "bold", REJECTED: "dim strike red"}


def legend(rejected: bool = True) -> Text:
    """The styles a reply shows; rejected guesses only where they are shown (not with --no-rejected). One line of
    an 80-column terminal: "draft token the target accepted" made it 83, and "guess" wrapped to a line of its own."""
    text = Text("legend: ", style="dim")
    text.append("accepted draft token", style=STYLES[ACCEPTED])
    text.append(" · ", style="dim")
    text.append("target's own token", style=STYLES[TARGET])
    if rejected:
        text.append(" · ", style="dim")
        text.append("rejected draft guess", style=STYLES[REJECTED])
    return text


class ReplyView:
    """Streams one reply to a terminal console; use as a context manager around generation."""

    def __init__(self, console: Console, *, k: int, label: str, show_rejected: bool = True) -> None:
        self.console = console
        self.k = k
        self.label = label
        self.show_rejected = show_rejected
        self.partial = Text()
        self.stats = Stats()  # the latest the loop reported
        # A live region is drawn on a terminal that takes escape codes; elsewhere (`--format live > file`,
        # TERM=dumb) the lines go out as they are: wrapped at Rich's width (80 for a file), the text changed
        self.drawn = redrawn(console)
        self.live = Live(
            console=console, auto_refresh=False, transient=True, redirect_stdout=False, redirect_stderr=False
        )
        self._started = ExitStack()  # the live region's stop, last
        self._frame: RenderableType = Text()  # what the live region shows
        self._drawn: tuple[int, list[int]] = (0, [])  # the width it was drawn at, and its lines' lengths

    def __enter__(self) -> ReplyView:
        # Only where drawn: a Live that drew nothing still wrote a line break as it stopped on TERM=dumb (Rich < 14.3),
        # and a cursor kept hidden in a file (FORCE_COLOR, TERM=dumb) had a code written there on `fg` after Ctrl-Z
        if self.drawn:
            self.live.start()
            self._started.callback(self.live.stop)
            self._started.enter_context(cursor_kept_hidden(self.console))  # again on `fg` after Ctrl-Z
        try:
            self._refresh()
        except BaseException:  # Ctrl-C while the first frame is drawn: a Live left started nests the next one
            self._started.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._after_resize()
        finally:  # even on a Ctrl-C here: a Live left started nests the next one
            self._started.close()  # transient: the footer goes, then the last partial line is printed for good
        if self.partial.plain:
            with self.console:
                self._print_line()
        self.partial = Text()

    def on_update(self, update: Update) -> None:
        self.stats = update.stats
        with self.console:  # one write: a line printed and the region redrawn apart showed the line twice
            for segment in update.segments:
                if segment.kind == REJECTED and not self.show_rejected:
                    continue
                self._append(segment)
            self._refresh()

    def _append(self, segment: Segment) -> None:
        # Without a draft every token is the target's own: no emphasis needed.
        style = STYLES[segment.kind] if self.k else ""
        text = visible(segment.text)
        if segment.kind == REJECTED:
            text = text.replace("\n", "⏎")  # a ghost newline must not break the real text's lines
        lines = text.split("\n")
        for index, piece in enumerate(lines):
            if self.drawn:  # Rich wraps what is drawn; a file gets the text as it came
                piece = _unjoined(piece, self.partial.plain)
            self.partial.append(piece, style=style)
            if index < len(lines) - 1:
                self._after_resize()
                self._print_line()  # above the live region
                self._remember()
                self.partial = Text()

    def _refresh(self) -> None:
        self._after_resize()
        self._print_wrapped_rows()
        # a copy: printing a line redraws the region under it, which showed the line being written as it grew
        self._frame = Group(_fit(self.partial, self.console.width), footer(self.stats, self.label, self.console.width))
        self.live.update(self._frame, refresh=True)
        self._remember()

    def _print_line(self) -> None:
        """The line being written, printed for good: wrapped as its rows were while it streamed (an update that
        brought a row and more with its newline was wrapped by Rich, and broke where such a terminal did)."""
        self._print_wrapped_rows()
        last = _fit(self.partial, self.console.width) if self.drawn else self.partial
        self.live.console.print(last, soft_wrap=not self.drawn)

    def _print_wrapped_rows(self) -> None:
        """The line being written keeps its last row in the live region; the rows it wrapped past are printed
        for good, as completed lines are (words wrap greedily, so appended text moves the last row's words
        only). Drawn whole, a long line showed its first row alone (the stdout console's soft wrap crops
        the region at the terminal's width), and one taller than the screen was cut with '...'."""
        if not self.drawn:
            return
        self.partial.expand_tabs()  # as printing it would; the tab stops of a row to come are the screen's
        width = self.console.width
        # Where the terminal counts columns per character (xterm, tmux: 👍🏽 takes 4, a ZWJ family 8; Rich counts 2),
        # a row Rich has room for may wrap there: the live region then takes a row more than Rich erases at the
        # next redraw, and a stale copy stays above it; a row printed for good breaks inside a word.
        rows = self._cut(self._narrower(width))
        if rows:
            self.live.console.print(Text("\n").join(_fit(row, width) for row in rows), soft_wrap=False)

    def _narrower(self, width: int) -> int:
        """The width to wrap the line being written at: the terminal's, or where it holds characters that such a
        terminal may draw wider than Rich, the widest at which each row has room there with its last column free
        (a joiner or an accent written in it wrapped on some: pyte). The spaces at a row's end wrap no word: _fit
        leaves out those past the edge."""
        plain = self.partial.plain
        if _columns(plain) == cell_len(plain) and not any(map(_zero_width, plain)):
            return width
        for narrower in range(width, 2, -1):
            rows = self.partial.wrap(self.console, narrower, justify="default", overflow="fold")
            if all(_columns(row.plain.rstrip()) < width for row in rows):
                return narrower
        return 2

    def _cut(self, width: int) -> list[Text]:
        """The rows the line being written wraps past at this width, cut from it; it keeps its last row."""
        # at 2 columns or more: a 1-column wrap has Rich truncate a wide character to a space
        rows = self.partial.wrap(self.console, max(2, width), justify="default", overflow="fold")
        if len(rows) > 1:
            self.partial = self.partial[_last_row_start(self.partial.plain, rows[-1].plain) :]
        return list(rows)[:-1]

    def _remember(self) -> None:
        """The width the live region was just drawn at, and the length of each of its lines."""
        width = self.console.width
        lines = self.console.render_lines(self._frame, self.console.options.update_width(width), pad=False)
        self._drawn = (width, [RichSegment.get_line_length(line) for line in lines])

    def _after_resize(self) -> None:
        """Before Rich erases the live region: if the terminal got narrower since it was drawn, most
        terminals (VTE, iTerm2, Windows Terminal, kitty, tmux) have reflowed each of its lines over
        ceil(length / width) rows, so Rich must erase that many rows, not the lines it drew; otherwise
        the old footer or partial line stays on the screen above the new one."""
        width, lengths = self._drawn
        now = self.console.width
        # Rich's record of the region it drew: private, with no public way to set it. If a Rich release renames it,
        # getattr finds none and nothing is changed: a resize then leaves a stale copy of the region on the screen.
        shape = getattr(self.live._live_render, "_shape", None)
        if now < width and lengths and shape is not None:
            self.live._live_render._shape = (now, sum(max(1, -(-n // now)) for n in lengths))


def _last_row_start(line: str, last_row: str) -> int:
    """Where the last of the rows Text.wrap made of a line begins in it. Text.wrap drops whitespace past the
    width at a row's end, counting characters (a row of combining accents lost a space it had room for): the
    row being written keeps its text as it came, cut from the line itself. A row after a break holds a word
    (the line's last), unless a word longer than the width was folded with its spaces (then none was dropped)."""
    kept = last_row.rstrip()
    return len(line.rstrip()) - len(kept) if kept else len(line) - len(last_row)


_JOINERS_AFTER_SPACE = re.compile(r"(?<=\s)\u200d+")


def _unjoined(piece: str, before: str) -> str:
    """A piece of the line being written without the zero-width joiners at a word's start, where they join
    nothing and draw nothing: Rich 15 measures a word starting with one two ways (cell_len skips the character
    after it, its wrapping does not), and "\u200d\u200d👍x..." made Text.wrap raise IndexError, a model's reply
    the chat's traceback. The terminal shows the same; the log keeps the reply as the model wrote it."""
    piece = _JOINERS_AFTER_SPACE.sub("", piece)
    return piece.lstrip("\u200d") if not before or before[-1].isspace() else piece


def _columns(text: str) -> int:
    """The columns text may take on a terminal that counts each character on its own, at the most: a skin tone
    and each person of a ZWJ sequence as wide, an emoji's variation selector as the one column that makes it
    wide (a terminal that draws fewer is no harm: the row is then shorter than Rich thinks)."""

    def columns(char: str) -> int:
        if unicodedata.east_asian_width(char) in "WF" or "\U0001f1e6" <= char <= "\U0001f1ff":  # a flag's letters
            return 2
        if char == "\ufe0f":
            return 1
        return 0 if _zero_width(char) else max(1, cell_len(char))

    return sum(map(columns, text))


def _fit(row: Text, width: int) -> Text:
    """A copy of a row without the spaces at its end that would pass the edge of a terminal that counts each
    character (see _columns): Rich keeps those it has room for, and such a terminal wrapped them onto a row
    of their own (a blank row in the reply; in the live region, a row Rich did not erase)."""
    row = row.copy()
    spaces = len(row.plain) - len(row.plain.rstrip())
    past = _columns(row.plain) - width if spaces else 0
    if past > 0:
        row.right_crop(min(spaces, past))
    return row


def _zero_width(char: str) -> bool:
    """An accent, a joiner or a variation selector: drawn on the character before it."""
    return unicodedata.category(char) in ("Mn", "Me", "Cf")
