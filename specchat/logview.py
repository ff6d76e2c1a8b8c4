"""`specchat logs`: the logged replies, as JSON or as Rich text that reads at 80 columns."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from datetime import datetime
from itertools import chain

from rich.console import Console
from rich.segment import Segments
from rich.text import Span, Text

from . import logread
from .paths import log_file
from .statsview import STOPS
from .view import n_tokens, note, one_line, stderr_console, stdout_console, visible, write_json_list

PREVIEW_LINES = 6  # per prompt and reply, unless --full
PREVIEW_CHARS = 1000  # the same: one pasted line of a megabyte (minified JSON, a log) is one line


def show(*, limit: int, query: str | None, cid: int | None, as_json: bool, full: bool) -> None:
    path = log_file()
    # read as written, row by row: a log of 50M characters, all in memory at once, took 835 MB
    rows = logread.each_reply(path, limit=limit, query=query, cid=cid)  # an unknown cid: an error, as for run --cid
    with closing(rows):
        if as_json:
            write_json_list(rows, what="the log")
            return
        first = next(rows, None)
        if first is None:
            what = "no logged reply matches" if query or cid is not None else "no replies logged yet"
            note(stderr_console(), f"{what} (log: {path})")
        else:
            _print_replies(stdout_console(what="the log"), first, rows, full=full)
    _say_set_aside(path)


# Printed together: Rich's work per print, not per character, was most of the view's time. A divisor of the rows
# logread reads at a time, so that a read's replies are all printed before the next read (with -q, a long search)
REPLIES_A_WRITE = logread.ROWS_A_FETCH // 4
CHARS_A_WRITE = 1_000_000  # and fewer where they are long (--full): memory stays flat


def _print_replies(console: Console, first: dict, rows: Iterator[dict], *, full: bool) -> None:
    """The replies, a blank line between two, printed a few at a time as they are read. Printed one text at a time
    (five console.print calls a reply), a log of 20,000 replies took 10-28 s (its JSON: 1.5 s)."""
    texts: list[Text] = []
    chars = 0  # in texts: counted as they come, not summed over the whole batch again for every reply
    for count, row in enumerate(chain([first], rows), 1):
        reply = reply_lines(row, full=full)
        texts += [Text(), *reply] if count > 1 else reply  # a blank line between two
        chars += sum(map(len, reply))
        if count % REPLIES_A_WRITE == 0 or chars > CHARS_A_WRITE:
            print_lines(console, texts)
            texts, chars = [], 0
    print_lines(console, texts)


def _say_set_aside(path) -> None:
    """Damaged logs moved aside (logaside.set_aside) were named once, in the warning of the reply that moved them;
    afterwards nothing said they were there, holding what the damage left of older conversations."""
    from .logaside import set_aside_logs

    aside = set_aside_logs(path)
    if not aside:
        return
    recover = "sqlite3 may recover what {} hold{}; or delete {}, with any -wal beside {}"
    if len(aside) == 1:
        line = f"a damaged log was set aside: {aside[0]} ({recover.format('it', 's', 'it', 'it')})"
    else:
        names = f"{aside[0].name} ... {aside[-1].name}"
        line = f"{len(aside)} damaged logs were set aside in {aside[0].parent} ({names}): "
        line += recover.format("they", "", "them", "them")
    note(stderr_console(), line)


def print_lines(console: Console, texts: list[Text]) -> None:
    """console.print(text) for each text, in one print: at soft wrap (stdout_console's) Rich prints a text's lines,
    each styled on its own, and a newline after it. (Rich 13.8-14.2 also dropped the blanks that end a line wider
    than the terminal; they are kept here, as Rich 14.3 and later keep them.) Replies formatted but not yet
    printed when Ctrl-C comes (at most a batch) are not printed."""
    if not texts:
        return
    plain, spans, offset = [], [], 0
    for text in texts:
        for line, styles in _lines(text, console.tab_size or 8):
            plain.append(line)
            spans += [Span(offset + span.start, offset + span.end, span.style) for span in styles]
            offset += len(line) + 1
    plain.append("")
    console.print(Segments(Text("\n".join(plain), spans=spans).render(console)))


def _lines(text: Text, tab_size: int) -> Iterator[tuple[str, list[Span]]]:
    """The text's lines and their styles, as Rich's Text.split and expand_tabs make them: the text's own style a
    span over each line (never its newline), tabs expanded line by line where there are any: Rich's expand_tabs of a
    whole batch makes a Text of each of its lines, which cost what printing it at once saved."""
    start = 0
    for line in text.plain.split("\n"):
        end = start + len(line)
        styles = [Span(0, len(line), text.style)] if text.style else []
        styles += [Span(max(span.start, start) - start, min(span.end, end) - start, span.style) for span in text.spans]
        styles = [span for span in styles if span]  # Span's bool: not empty
        if "\t" in line:
            expanded = Text(line, spans=styles)
            expanded.expand_tabs(tab_size)
            line, styles = expanded.plain, expanded.spans
        yield line, styles
        start = end + 1


def reply_lines(row: dict, *, full: bool) -> list[Text]:
    """A reply as the texts printed for it, one after another."""
    # a pair or file name is no markup, and a file name's escape sequence or newline is shown, not acted on
    texts = [_header(row), Text(one_line(_details(row)), style="dim")]
    said = _said_before(row)
    if said is not None:
        prompt = Text(said[0], style="bold cyan")
        prompt.append(_clip(said[1], full))
        texts.append(prompt)
    reply = Text(_clip(row["reply"], full))
    stop = "interrupted" if row["interrupted"] else (row["stats"] or {}).get("stop_reason")
    if isinstance(stop, str) and stop in STOPS:  # marked as the live view marks it (a full window, -n)
        reply.append(f" [{STOPS[stop]}]", style="yellow")
    return [*texts, reply]


def _said_before(row: dict) -> tuple[str, str] | None:
    """What the reply answered: its prompt, or (a request to `serve` with only a system message) the
    system prompt; an empty "you › " line read as an empty prompt that was never sent. None: neither."""
    if row["prompt"] is not None:
        return "you › ", row["prompt"]
    if row["system"]:
        return "system › ", row["system"]
    return None


def _header(row: dict) -> Text:
    header = Text(f"conversation {row['conversation_id']}", style="bold")
    # The reply's number in its conversation (1, 2, ...), not the message's row id (2, 4, ... and beyond).
    header.append(f"  reply {row['turn']}  {_local(row['created'])}", style="bold dim")
    return header


def _details(row: dict) -> str:
    parts = [_model(row), row["label"] or ""]
    # numbers only: a stats object edited by hand ("tokens_per_s": "x") failed the whole view at the format
    stats = {k: v for k, v in (row["stats"] or {}).items() if isinstance(v, int | float) and not isinstance(v, bool)}
    if stats:
        parts.append(f"{n_tokens(stats.get('generated_tokens', 0))}, {stats.get('tokens_per_s', 0):.1f} tok/s")
        if stats.get("drafted"):
            parts.append(_acceptance(stats))
    return "  ·  ".join(part for part in parts if part)


def _acceptance(stats: dict) -> str:
    """In the words of every other line (statsview.acceptance): "accepted 40/73 (55%)"; a row without its count
    (edited by hand) by its rate alone."""
    drafted, accepted = stats["drafted"], stats.get("accepted")
    if accepted is None:
        return f"accepted {stats.get('acceptance_rate', 0):.0%} of {drafted:.0f}"
    return f"accepted {accepted:.0f}/{drafted:.0f} ({accepted / drafted:.0%})"


def _model(row: dict) -> str:
    """What answered the reply: its pair, or its target's file name. Where that is the conversation's name but
    not its files (`-c --draft OTHER`, a target of that name elsewhere), the files that differ are named too."""
    answered, began = row["answered_by"], {key: row[key] for key in logread.MODEL_FILES}
    name = _name(answered)
    if answered == began or name != _name(began):
        return name
    if answered["target"] != began["target"] and not answered["pair"]:
        name = answered["target"]
    if answered["draft"] and answered["draft"] != began["draft"]:
        name += f" (draft {_file_name(answered['draft'])})"
    return name


def _name(files: dict) -> str:
    return files["pair"] or _file_name(files["target"] or "")


def _file_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _local(stamp: str) -> str:
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return stamp


def _clip(text: str, full: bool) -> str:
    lines = visible(text).rstrip("\n").splitlines() or [""]
    whole = "\n".join(lines)
    if full:
        return whole
    head = "\n".join(lines[:PREVIEW_LINES])
    if len(head) > PREVIEW_CHARS:
        return head[:PREVIEW_CHARS] + f"… {len(whole) - PREVIEW_CHARS:,} more characters (--full)"
    if len(lines) <= PREVIEW_LINES:
        return whole
    return f"{head}\n… {len(lines) - PREVIEW_LINES} more lines (--full)"
