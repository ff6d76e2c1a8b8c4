"""`specchat logs`' Rich view: the replies printed a batch at a time (five console.print calls a reply took 10-28 s
for a log of 20,000 replies), byte for byte as Rich prints each text on its own, and as they are read."""

from __future__ import annotations

import io
import re
import sys

import pytest
from rich.console import Console

from specchat import logread, logstore, logview
from specchat.chat import Conversation, Message
from specchat.paths import log_file
from specchat.view import stdout_console

REPLY = {"pair": None, "target": "/m/t.gguf", "draft": None, "mode": "spec", "label": "spec k=4", "settings": {}}
STATS = {"generated_tokens": 12, "tokens_per_s": 3.5, "drafted": 8, "acceptance_rate": 0.5}
# what Rich treats apart: tabs after wide characters (expanded by cells), at a line's start and end, a CR (dropped),
# control characters (shown), styled text across lines, an empty prompt and reply, an interrupted reply
TEXTS = ["日本\tx\n\ty\tz", "a\r\nb\x1b[31m\x07", "", "é" * 30 + "\t", "\n".join(f"line {n}\t." for n in range(9))]
TEXTS += ["ok"]


def write_log(replies: int) -> None:
    recorder = logstore.Recorder(True, log_file())
    for n in range(replies):
        if n % 7 == 3:  # a reply to a system prompt alone (serve's): "system › "
            conversation, recorder.cid, recorder.logged = Conversation("be\tbrief"), None, 0
        else:
            conversation = recorder.conversation(None)
            conversation.messages.append(Message("user", TEXTS[n % len(TEXTS)]))
        conversation.messages.append(Message("assistant", TEXTS[(n + 1) % len(TEXTS)], interrupted=n % 5 == 1))
        recorder.record(conversation, REPLY | {"stats": STATS if n % 2 else {}})
        recorder.history = conversation


def printed(monkeypatch, show) -> str:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    show()
    return out.getvalue()


def text_by_text(full: bool) -> None:
    """The view as it printed before: each text of each reply on its own (the reference)."""
    console = stdout_console()
    for n, row in enumerate(logread.replies(log_file(), limit=0)):
        if n:
            console.print()
        for text in logview.reply_lines(row, full=full):
            console.print(text)


@pytest.mark.parametrize("env", [{}, {"FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "1", "COLUMNS": "20"}])
@pytest.mark.parametrize("full", [False, True])
def test_the_view_prints_what_rich_printed_text_by_text(isolated, monkeypatch, env, full):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    write_log(2 * logview.REPLIES_A_WRITE + 5)  # batches, and a last one part full
    view = printed(monkeypatch, lambda: logview.show(limit=0, query=None, cid=None, as_json=False, full=full))
    reference = printed(monkeypatch, lambda: text_by_text(full))
    if _trims_soft_wrapped_lines():  # Rich 13.8-14.2 dropped the blanks ending a line wider than the terminal
        view, reference = (re.sub(r"[ \t\u3000]+(\x1b\[[0-9;]*m)*\n", r"\1\n", out) for out in (view, reference))
    assert view == reference
    plain = re.sub("\x1b\\[[0-9;]*m", "", view)
    assert "you › 日本      x" in plain and "system › be     brief" in plain and "b␛[31m␇ [interrupted]" in plain
    assert ("\x1b[" in view) == bool(env)  # styled: the colours were compared too


def _trims_soft_wrapped_lines() -> bool:
    from importlib.metadata import version

    major, minor = (int(part) for part in version("rich").split(".")[:2])
    return (major, minor) < (14, 3)


def test_replies_are_printed_a_batch_at_a_time_as_they_are_read(isolated, monkeypatch):
    """Printed together (a print a batch, not five a reply), but streamed: the first replies are out before the
    last rows are read, and a batch never waits for the next read of rows (a long search, with -q)."""
    write_log(3 * logread.ROWS_A_FETCH)
    out, seen, prints = io.StringIO(), [], []
    monkeypatch.setattr(sys, "stdout", out)
    each_reply, console_print = logread.each_reply, Console.print

    def counted(self, *args, **kwargs):
        prints.append(args)
        return console_print(self, *args, **kwargs)

    def watched(*args, **kwargs):
        for row in each_reply(*args, **kwargs):
            seen.append(out.getvalue().count("conversation "))  # replies printed when this row was read
            yield row

    monkeypatch.setattr(logread, "each_reply", watched)
    monkeypatch.setattr(Console, "print", counted)
    logview.show(limit=0, query=None, cid=None, as_json=False, full=False)
    batch = logview.REPLIES_A_WRITE
    assert seen == [n - n % batch for n in range(3 * logread.ROWS_A_FETCH)]
    assert out.getvalue().count("conversation ") == 3 * logread.ROWS_A_FETCH
    assert len(prints) == 3 * logread.ROWS_A_FETCH // batch


def test_a_reply_cut_short_is_marked_as_the_live_view_marks_it(isolated, monkeypatch):
    """`logs --json` kept stop_reason "context" and "max_tokens", but the text view marked only Ctrl-C's replies:
    a reply cut off by a full window or by -n read as a whole one. Old rows (no stop reason) read as before."""
    recorder = logstore.Recorder(True, log_file())
    stops = ["context", "max_tokens", "eog", None, ["context"], "interrupted"]
    for stop in stops:
        conversation = recorder.conversation(None)
        conversation.messages += [
            Message("user", "hi"),
            Message("assistant", "done", interrupted=stop == "interrupted"),
        ]
        stats = STATS if stop is None else STATS | {"stop_reason": stop}  # a list: garbled by hand, ignored
        recorder.record(conversation, REPLY | {"stats": stats})
        recorder.history = conversation
    view = printed(monkeypatch, lambda: logview.show(limit=0, query=None, cid=None, as_json=False, full=False))
    replies = [line for line in view.splitlines() if line.startswith("done")]
    assert replies == ["done [context full]", "done [max tokens reached]", "done", "done", "done", "done [interrupted]"]


def test_a_replys_acceptance_is_worded_as_every_other_line_words_it(isolated, monkeypatch):
    """`logs` said "50% of 8 drafts accepted" where --stats, the line under a reply, /stats and serve's console
    say "accepted 4/8 (50%)"; a row without its count (edited by hand) still shows its rate."""
    recorder = logstore.Recorder(True, log_file())
    for stats in (STATS | {"accepted": 4}, STATS):
        conversation = recorder.conversation(None)
        conversation.messages += [Message("user", "hi"), Message("assistant", "done")]
        recorder.record(conversation, REPLY | {"stats": stats})
        recorder.history = conversation
    view = printed(monkeypatch, lambda: logview.show(limit=0, query=None, cid=None, as_json=False, full=False))
    assert "accepted 4/8 (50%)" in view and "accepted 50% of 8" in view and "drafts accepted" not in view
