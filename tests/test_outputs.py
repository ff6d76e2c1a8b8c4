"""Output sinks and the one --format choice; stdout that cannot be written is one clear error."""

from __future__ import annotations

import errno
import io
import sys

import pytest

from specchat import outputs, view
from specchat.errors import UsageError
from specchat.generation import Generation, Segment, Update
from specchat.sampling import SamplingParams
from specchat.speculative import Stats


@pytest.mark.parametrize(
    ("fmt", "flags", "terminal", "chosen"),
    [
        ("auto", {}, True, "live"),
        ("auto", {}, False, "text"),
        ("auto", {"as_json": True}, True, "json"),
        ("auto", {"jsonl": True}, False, "jsonl"),
        ("json", {"as_json": True}, False, "json"),
        ("live", {}, False, "live"),
        ("text", {}, True, "text"),
    ],
)
def test_one_format_from_the_option_and_its_aliases(fmt, flags, terminal, chosen):
    assert outputs.choose(fmt, terminal=terminal, **flags) == chosen


@pytest.mark.parametrize(
    ("fmt", "flags", "needle"),
    [
        ("auto", {"as_json": True, "jsonl": True}, "--json and --jsonl both take stdout"),
        ("text", {"as_json": True}, "--json and --format text both take stdout"),
        ("yaml", {}, "unknown --format 'yaml'"),
    ],
)
def test_conflicts_and_unknown_formats(fmt, flags, needle):
    with pytest.raises(UsageError, match=needle):
        outputs.choose(fmt, **flags)


def test_request_labels_come_from_the_modes_table():
    params = SamplingParams()
    labels = [outputs.Request(mode, k, params, 8).label for mode, k in (("auto", 64), ("spec", 4), ("target", 0))]
    assert labels == ["auto (k<=64)", "spec k=4", "target alone"]


def test_text_output_writes_the_text_and_ends_the_line(capsys):
    sink = outputs.TextOutput()
    segments = [Segment("ab", "accepted"), Segment("zz", "rejected"), Segment("c", "target")]
    with sink:
        sink.update(Update(None, segments, Stats()))
    sink.finish(Generation("abc", [1, 2, 3], Stats()))
    assert capsys.readouterr().out == "abc\n"
    sink.finish(Generation("done\n", [], Stats()))
    assert capsys.readouterr().out == ""


class Failing(io.StringIO):
    def __init__(self, exc: OSError) -> None:
        super().__init__()
        self.exc = exc

    def write(self, _text):
        raise self.exc


def test_a_full_disk_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(sys, "stdout", Failing(OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(view.StdoutError) as err:
        view.write_stdout("x")
    assert err.value.message == "cannot write the reply to stdout: no space left on device"
    assert err.value.exit_code == 1 and "free some space" in err.value.hint


def test_a_closed_terminal_is_not_told_to_free_space(monkeypatch):
    """EIO: the terminal closed under a run that ignores SIGHUP (`trap '' HUP`); space is not what is wrong there."""
    monkeypatch.setattr(sys, "stdout", Failing(OSError(errno.EIO, "Input/output error")))
    with pytest.raises(view.StdoutError) as err:
        view.write_stdout("x")
    assert err.value.message == "cannot write the reply to stdout: input/output error"
    assert "space" not in err.value.hint and "terminal" in err.value.hint, err.value.hint


def test_a_broken_pipe_stays_a_broken_pipe(monkeypatch):
    monkeypatch.setattr(sys, "stdout", Failing(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    with pytest.raises(BrokenPipeError):
        view.write_stdout("x")


def test_a_closed_stdout(monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)
    with pytest.raises(view.StdoutError, match="cannot write the list to stdout: it is closed"):
        view.write_stdout("x", "the list")
    console = view.stdout_console()
    assert not console.is_terminal
    assert outputs.fancy_terminal() is False


def test_format_live_on_a_dumb_terminal_leaves_the_rejected_guesses_out(monkeypatch):
    """`specchat run -f live` on TERM=dumb (Emacs' shell) wrote the rejected guesses into the reply: Rich writes
    no styles there, so without their strike-through they read as part of it ("Hesb!r your text")."""
    from rich.console import Console

    monkeypatch.setenv("TERM", "dumb")
    console = Console(width=80, file=io.StringIO(), force_terminal=True, soft_wrap=True)
    request = outputs.Request("spec", 4, SamplingParams(), 64)
    stats = Stats(generated=2, rounds=1, drafted=4, accepted=1, total_s=1.0, stop_reason="eog")
    with outputs.LiveOutput(console, request) as sink:
        segments = [Segment("He", "accepted"), Segment("sb!", "rejected"), Segment("re", "target")]
        sink.update(Update(None, segments, stats))
    sink.finish(Generation("Here", [], stats))
    written = console.file.getvalue()
    assert written.splitlines()[0] == "Here" and "sb!" not in written and "\x1b" not in written


def test_format_live_under_force_color_into_a_file_leaves_the_rejected_guesses_out_and_no_cursor_code(monkeypatch):
    """FORCE_COLOR into a file: the view is not drawn there (no legend), yet the rejected guesses were written, struck
    through, into the reply; and the cursor was registered as hidden, so `fg` after Ctrl-Z wrote a code there."""
    from rich.console import Console

    from specchat import terminal

    monkeypatch.setenv("FORCE_COLOR", "1")
    console = Console(width=80, file=io.StringIO(), soft_wrap=True)
    monkeypatch.setattr(console.file, "fileno", lambda: 99, raising=False)
    request = outputs.Request("spec", 4, SamplingParams(), 64)
    stats = Stats(generated=2, rounds=1, drafted=4, accepted=1, total_s=1.0, stop_reason="eog")
    with outputs.LiveOutput(console, request) as sink:
        segments = [Segment("He", "accepted"), Segment("sb!", "rejected"), Segment("re", "target")]
        sink.update(Update(None, segments, stats))
        assert 99 not in terminal._HIDDEN_CURSORS
    sink.finish(Generation("Here", [], stats))
    assert "sb!" not in console.file.getvalue()


def test_the_live_views_legend_and_summary_wrap_at_words_on_a_narrow_terminal():
    """At 40 columns the legend and the line under the reply broke inside words ("accep" / "ted"): the
    stdout console's soft wrap left them to the terminal. On a terminal they wrap at words; into a file
    they stay one line each."""
    import pyte
    from rich.console import Console

    request = outputs.Request("spec", 4, SamplingParams(), 64)
    stats = Stats(generated=40, rounds=13, drafted=36, accepted=31, total_s=5.0, stop_reason="max_tokens")
    for terminal in (True, False):
        console = Console(width=40, file=io.StringIO(), force_terminal=terminal, soft_wrap=True)
        with outputs.LiveOutput(console, request) as sink:
            sink.update(Update(None, [Segment("Hi.", "target")], stats))
        sink.finish(Generation("Hi.", [], stats))
        written = console.file.getvalue()
        if not terminal:
            assert written.splitlines()[0] == "Hi."  # no legend: the styles it names are not in a file
            assert len(written.splitlines()) == 2  # the reply, the summary
            continue
        screen = pyte.Screen(40, 20)
        pyte.Stream(screen).feed(written.replace("\n", "\r\n"))
        rows = [row.rstrip() for row in screen.display if row.strip()]
        text = " ".join(rows)
        for words in ("rejected draft guess", "accepted 31/36 (86%)", "(+1 target token) [max tokens reached]"):
            assert words in text, rows


def test_the_legend_is_one_line_of_an_80_column_terminal():
    """The legend was 83 characters: on the commonest terminal width its last word, "guess", wrapped alone."""
    from rich.console import Console

    from specchat.chatview import legend

    console = Console(width=80, file=io.StringIO(), force_terminal=True)
    console.print(legend(rejected=True))
    assert console.file.getvalue().count("\n") == 1 and "rejected draft guess" in console.file.getvalue()


@pytest.mark.parametrize("term", ["dumb", "unknown", "DUMB", "Unknown"])
def test_a_terminal_rich_calls_dumb_is_dumb_to_specchat_too(monkeypatch, term):
    """Rich reads TERM=unknown (any case) as dumb and draws no live view there; specchat matched "dumb" alone, so
    under TERM=unknown the chat ran its full line editor and chose the live view that was never drawn."""
    from types import SimpleNamespace

    tty = SimpleNamespace(isatty=lambda: True)
    monkeypatch.setattr(sys, "stdout", tty)
    monkeypatch.setattr(sys, "stdin", tty)
    monkeypatch.setenv("TERM", term)
    assert outputs.dumb_terminal() and not outputs.fancy_terminal()
    monkeypatch.setenv("TERM", "xterm-256color")
    assert outputs.fancy_terminal() and not outputs.dumb_terminal()


@pytest.mark.parametrize(
    "mode, k, named", [("spec", 4, True), ("auto", 64, True), ("ngram", 8, False), ("suffix", 8, False)]
)
def test_the_draft_model_is_named_only_for_a_reply_of_a_mode_that_uses_it(mode, k, named):
    """A chat that switched `/mode ngram` keeps the draft model loaded; its replies were not the draft model's,
    yet `--json` (and the log's answered_by) named its file."""
    from pathlib import Path
    from types import SimpleNamespace

    from specchat.pairfiles import Resolved

    pipeline = SimpleNamespace(
        resolved=Resolved("p", Path("t.gguf"), Path("d.gguf")),
        draft=object(),
        mode_note="",
        target=SimpleNamespace(n_ctx=256),
    )
    request = SimpleNamespace(params=SamplingParams(), k=k, mode=mode, label=mode, max_tokens=0, template_kwargs={})
    generation = SimpleNamespace(text="", set_aside={}, threads=None, stats=Stats())
    assert (outputs.summary(pipeline, request, generation)["draft"] == "d.gguf") is named
