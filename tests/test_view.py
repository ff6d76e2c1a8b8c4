"""Rendering of the live view with Rich's recording console: styles, ghost text, literal markup."""

from __future__ import annotations

import io

import pyte
import pytest
from rich.console import Console

from specchat.chatview import STYLES, ReplyView, legend
from specchat.generation import ACCEPTED, REJECTED, TARGET, Segment, Update
from specchat.progressview import bench_progress
from specchat.speculative import Round, Stats
from specchat.statsview import footer, position_bars, session_lines, stats_lines, summary_line


def recording_console(width: int = 80) -> Console:
    return Console(record=True, width=width, force_terminal=True, color_system="truecolor", file=io.StringIO())


def screen(console: Console, height: int = 60) -> str:
    """What a terminal shows after all the output, cursor moves and live redraws (pyte emulates a VT100)."""
    terminal = pyte.Screen(console.width, height)
    pyte.Stream(terminal).feed(console.file.getvalue().replace("\n", "\r\n"))
    return "\n".join(line.rstrip() for line in terminal.display).strip()


def event(index: int, drafted: list[int], accepted: int, token: int) -> Round:
    emitted = [*drafted[:accepted], token]
    return Round(index, drafted, accepted, token, emitted, 0.01, 0.02)


def styled_spans(console: Console) -> list[tuple[str, str]]:
    """(text, style) for every styled span the console recorded."""
    spans = []
    for segment in console._record_buffer:  # Rich's own record of what was printed
        if segment.text.strip() and segment.style is not None:
            spans.append((segment.text, str(segment.style)))
    return spans


def play(console: Console, script, *, show_rejected: bool = True, k: int = 4) -> None:
    stats = Stats()
    with ReplyView(console, k=k, label="spec k=4", show_rejected=show_rejected) as view:
        for round_event, segments in script:
            if round_event is not None:  # the loop's own count; the view only shows it
                drafted = len(round_event.drafted)
                stats.record(drafted, round_event.accepted, len(round_event.emitted), 0.01, 0.02, "spec")
            view.on_update(Update(round_event, segments, stats))


SCRIPT = [
    # accepted "def" + " f", draft guessed "(x" but the target chose "():" (correction)
    (
        event(1, [1, 2, 3], 2, 9),
        [Segment("def", ACCEPTED), Segment(" f", ACCEPTED), Segment("(x", REJECTED), Segment("():", TARGET)],
    ),
    # everything accepted, plus the bonus token
    (event(2, [4, 5], 2, 6), [Segment("\n    ", ACCEPTED), Segment("return", ACCEPTED), Segment(" 1", TARGET)]),
]


def test_segments_get_their_styles():
    """Accepted drafts, the target's own tokens and rejected guesses each carry their own style."""
    console = recording_console()
    play(console, SCRIPT)
    spans = styled_spans(console)
    by_text = {text: style for text, style in spans}
    assert by_text["def"] == STYLES[ACCEPTED] and by_text[" f"] == STYLES[ACCEPTED]
    assert by_text["(x"] == STYLES[REJECTED]
    assert by_text["():"] == STYLES[TARGET]
    assert by_text[" 1"] == STYLES[TARGET]
    text = screen(console)
    assert "def f(x():" in text  # the ghost sits right where the draft was rejected
    assert "    return 1" in text
    assert "tok/s" not in text  # the footer is transient: gone once the reply is complete


def test_rejected_can_be_hidden():
    console = recording_console()
    play(console, SCRIPT, show_rejected=False)
    text = screen(console)
    assert "def f():" in text and "(x" not in text


def test_model_text_is_never_markup():
    """A reply that contains [red] or [/] stays literal text."""
    console = recording_console()
    script = [(event(1, [1], 1, 2), [Segment("[bold red]x[/bold red]", ACCEPTED), Segment(" [/]", TARGET)])]
    play(console, script)
    assert "[bold red]x[/bold red] [/]" in screen(console)


def test_ghost_newline_does_not_break_lines():
    """A rejected guess containing a newline is shown as ⏎, so the real text keeps its lines."""
    console = recording_console()
    script = [(event(1, [1, 2], 0, 3), [Segment("\n\n", REJECTED), Segment("x = 1", TARGET)])]
    play(console, script)
    assert "⏎⏎x = 1" in screen(console)


def test_without_draft_text_is_unstyled():
    console = recording_console()
    play(console, [(event(1, [], 0, 2), [Segment("plain", TARGET)])], k=0)
    assert ("plain", STYLES[TARGET]) not in styled_spans(console)


def test_narrow_terminal_renders_whole_text():
    """At 40 columns long lines wrap; no text is lost or duplicated."""
    console = recording_console(width=40)
    words = [f"word{i}" for i in range(30)]
    script = [(event(i + 1, [i], 1, 100 + i), [Segment(" " + w, ACCEPTED)]) for i, w in enumerate(words)]
    play(console, script)
    flat = " ".join(screen(console).split())
    assert flat.count("word29") == 1 and " ".join(words) in flat


def play_mid_reply(console: Console, words: list[str], height: int) -> str:
    """The screen while the reply is still streaming (the view not yet closed), as one long line of words."""
    stats = Stats()
    with ReplyView(console, k=4, label="spec k=4") as view:
        for i, word in enumerate(words):
            stats.record(1, 1, 2, 0.01, 0.02, "spec")
            view.on_update(Update(event(i + 1, [i], 1, 100 + i), [Segment(" " + word, ACCEPTED)], stats))
        return screen(console, height)


def test_a_line_longer_than_the_terminal_is_wide_shows_as_it_is_written():
    """The line being written wraps while it streams: with the run's stdout console (soft wrap on, as
    stdout_console makes it), the live region showed only its first row, cut at the terminal's width,
    until the line's newline came."""
    console = stdout_like_console(width=30, height=24)
    words = [f"word{i}" for i in range(20)]
    shown = play_mid_reply(console, words, 24)
    flat = " ".join(shown.split())
    assert "word19" in shown and " ".join(words) in flat and "tok/s" in shown


def test_a_line_taller_than_the_screen_shows_its_end_and_the_footer():
    """A line that wraps over more rows than the screen has: its completed rows scroll up as text does,
    the row being written and the footer stay in view (Rich cut the region with '...', hiding both)."""
    for soft_wrap in (True, False):
        console = stdout_like_console(width=30, height=6, soft_wrap=soft_wrap)
        words = [f"word{i}" for i in range(60)]
        shown = play_mid_reply(console, words, 6)
        assert "word59" in shown and "tok/s" in shown and "..." not in shown
        flat = " ".join(screen(console, 100).split())  # the reply, done: every word once, in order
        assert " ".join(words) in flat and flat.count("word59") == 1


def play_pieces(console: Console, pieces: list[str]) -> ReplyView:
    """Each piece one round's accepted text; the view is returned still open (mid-reply)."""
    stats = Stats()
    view = ReplyView(console, k=4, label="spec k=4").__enter__()
    for i, piece in enumerate(pieces):
        stats.record(1, 1, 2, 0.01, 0.02, "spec")
        view.on_update(Update(event(i + 1, [i], 1, 100 + i), [Segment(piece, ACCEPTED)], stats))
    return view


def test_the_row_being_written_keeps_its_spaces_where_it_wraps():
    """The rows a line wraps past are cut with Text.wrap, which drops whitespace past the width counting
    characters: a row of combining accents (5 cells, 11 characters) lost the space before the next word."""
    console = stdout_like_console(width=10, height=6)
    accents = "e\u0301" * 5
    view = play_pieces(console, ["xxxxxxx", f" {accents} ", "b"])
    assert view.partial.plain == f"{accents} b"
    view.__exit__(None, None, None)
    assert screen(console).splitlines()[:2] == ["xxxxxxx", "\u00e9" * 5 + " b"]  # pyte composes them


@pytest.mark.parametrize(
    ("width", "pieces"),
    [
        (30, [" ok👍🏽"] * 12 + [" fam👨\u200d👩\u200d👧\u200d👦"] * 6),  # a word at a time
        (80, list(" ".join(f"ok{i}👍🏽" for i in range(40)))),  # a character at a time: rows that fill the width
        (50, list(" ".join(f"ok{i}🇫🇷" for i in range(40)))),  # a flag: two letters, each wide on such a terminal
    ],
)
def test_emoji_a_terminal_counts_wider_than_rich_leave_no_stale_rows(width, pieces):
    """pyte counts columns per character, as xterm and tmux do: 👍🏽 takes 4 columns there, a ZWJ family 8, a
    flag 4 (Rich counts 2). The row being written wrapped there where Rich had room (or its space at the end
    did, past the edge), and each redraw left a copy of it above."""
    console = stdout_like_console(width=width, height=24)
    view = play_pieces(console, pieces)
    words = "".join(pieces).split()
    shown = screen(console, 24)
    assert shown.count("ok") - shown.count("tok/s") + shown.count("fam") == len(words) and shown.count("tok/s") == 1
    view.__exit__(None, None, None)
    shown = screen(console, 24)
    assert shown.count("ok") + shown.count("fam") == len(words) and "tok/s" not in shown


@pytest.mark.parametrize("after", ["\nnext", "\n"])
def test_a_line_completed_in_one_update_wraps_as_one_streamed(after):
    """A round that brings more than a row and the line's newline (auto and prompt lookup accept up to 64
    tokens): the line was printed for good as Rich wraps it, and the terminal broke its rows ( ok4👍🏽 alone)."""
    line = " ".join(f"ok{i}👍🏽" for i in range(8))
    console = stdout_like_console(width=30, height=24)
    view = play_pieces(console, [line + after])
    view.__exit__(None, None, None)
    rows = screen(console, 24).splitlines()[:3]
    assert " ".join(rows) == line and all(row == row.strip() for row in rows)


@pytest.mark.parametrize("width", [14, 16])
@pytest.mark.parametrize(
    "pieces", [["\u200d\u200d👍axxxxxxxxxxxx中"], ["ok ", "\u200d", "\u200d👍axxxxxxxxxxxx中\nnext"]]
)
def test_joiners_at_a_words_start_do_not_break_the_view(width, pieces):
    """Rich 15 measures a word starting with a zero-width joiner two ways, and Text.wrap raised IndexError on
    this one at 14 and 16 columns: a model's reply was the chat's traceback. It is shown whole."""
    console = stdout_like_console(width=width, height=24)
    view = play_pieces(console, pieces)
    view.__exit__(None, None, None)
    shown = "".join(screen(console, 24).split())
    assert shown == "".join("".join(pieces).split()).replace("\u200d", "")


def test_specchat_imports_no_private_rich_module():
    """chatview wrapped lines with rich._wrap.divide_line, a private module any Rich release may change. (One
    private attribute stays, Live's _live_render._shape, which has no public replacement: see _after_resize.)"""
    import re
    from pathlib import Path

    import specchat

    for path in Path(specchat.__file__).parent.rglob("*.py"):
        assert not re.search(r"\brich\._", path.read_text(encoding="utf-8")), path


def test_each_update_reaches_the_terminal_in_one_write():
    """A round's lines printed for good and the live region redrawn go out together: written apart, the
    terminal could show the region's old frame under a line just printed (the line twice) for a moment."""

    class Writes(io.StringIO):
        count = 0

        def write(self, text: str) -> int:
            self.count += 1
            return super().write(text)

    console = Console(width=30, height=10, force_terminal=True, file=Writes(), soft_wrap=True)
    with ReplyView(console, k=4, label="spec k=4") as view:
        stats = Stats()
        stats.record(2, 2, 3, 0.01, 0.02, "spec")
        before = console.file.count
        lines = [Segment("one\ntwo\n", ACCEPTED), Segment("three " * 12, ACCEPTED), Segment("four", TARGET)]
        view.on_update(Update(event(1, [1, 2], 2, 3), lines, stats))
        assert console.file.count - before == 1


def test_the_live_format_into_a_file_keeps_the_reply_as_it_is():
    """`--format live > file`: no live region is drawn there, and the reply's lines are written as they
    are; they were wrapped at 80 columns (Rich's width for a file), with trailing spaces, into the text."""
    console = Console(width=30, file=io.StringIO(), soft_wrap=True)  # a file: not a terminal
    assert not console.is_terminal
    words = [f"word{i}" for i in range(20)]
    stats = Stats()
    with ReplyView(console, k=4, label="spec k=4") as view:
        for i, word in enumerate(words):
            stats.record(1, 1, 2, 0.01, 0.02, "spec")
            text = word if i == 0 else ("\n" if i == 10 else " ") + word
            view.on_update(Update(event(i + 1, [i], 1, 100 + i), [Segment(text, ACCEPTED)], stats))
    assert console.file.getvalue() == " ".join(words[:10]) + "\n" + " ".join(words[10:]) + "\n"


def stdout_like_console(width: int, height: int, soft_wrap: bool = True) -> Console:
    """A console as specchat's stdout_console makes it (soft wrap on), recording, on a terminal."""
    return Console(
        record=True, width=width, height=height, force_terminal=True, color_system="truecolor",
        file=io.StringIO(), soft_wrap=soft_wrap,
    )  # fmt: skip


def test_legend_summary_and_bars():
    assert "rejected draft guess" in legend().plain
    stats = Stats(generated=10, rounds=4, drafted=12, accepted=6, total_s=1.0, stop_reason="interrupted")
    line = summary_line(stats, "spec k=3").plain
    assert "accepted 6/12 (50%)" in line and "[interrupted]" in line
    bars = [b.plain for b in position_bars([4, 4], [4, 1], width=4)]
    assert bars[0].endswith("100% of 4") and "████" in bars[0] and "█░░░" in bars[1]
    # auto may be allowed 64 positions and draft 2: the rest were not measured, not 0%.
    assert len(position_bars([4, 4, *[0] * 62], [4, 1, *[0] * 62], width=4)) == 2


@pytest.mark.parametrize("columns", [30, 36, 80])
def test_acceptance_bars_shrink_to_fit_a_narrow_console(columns):
    """-v's bars took 39 columns: narrower, each line's ' 84% of 19' went to a row of its own. The bars shrink
    to the console's width (20 cells at most, as before; all of one width, so they read as a column)."""
    bars = [b.plain for b in position_bars([19, 19, 7], [16, 3, 7], columns=columns)]
    assert all(len(bar) <= columns for bar in bars) and len({bar.count("█") + bar.count("░") for bar in bars}) == 1, (
        bars
    )
    assert bars[0].endswith(" 84% of 19") and bars[0].count("░") + bars[0].count("█") == min(20, columns - 20)


def test_positions_no_round_drafted_are_not_measured_not_zero():
    stats = Stats(drafted=3, accepted=2, drafted_at=[2, 1, 0, 0], accepted_at=[2, 0, 0, 0])
    assert stats.position_rates() == [1.0, 0.0, None, None]
    assert stats.as_dict()["position_acceptance"] == [1.0, 0.0]  # up to the last position drafted
    assert " ".join(stats_lines(stats, 64, "auto")).endswith("by position: 100% 0%")


def test_screenshot_svg_export(tmp_path):
    """The docs screenshot comes from this same recording path (see docs/view.md)."""
    console = recording_console()
    console.print(legend())
    play(console, SCRIPT)
    svg = console.export_svg(title="specchat")
    assert svg.startswith("<svg") and "def" in svg


def test_view_shows_the_stats_it_is_given_and_counts_nothing():
    """The footer reads update.stats: the view never records rounds itself."""
    console = recording_console()
    given = Stats(generated=7, rounds=3, drafted=6, accepted=3, draft_s=0.1, verify_s=0.3)
    with ReplyView(console, k=4, label="spec k=4") as view:
        view.on_update(Update(event(1, [1, 2], 1, 3), [Segment("ab", ACCEPTED)], given))
        assert view.stats is given
        assert "accepted 50%" in footer(view.stats, "spec k=4").plain
    assert given.rounds == 3 and given.generated == 7  # untouched


def test_the_footer_leaves_out_whole_parts_that_do_not_fit_rather_than_cutting_a_number():
    """At 80 columns a footer of 81 characters ended "draft 33% / verify 6…": a cut number, read as 6%."""
    console = recording_console(80)
    given = Stats(generated=1000, rounds=90, drafted=900, accepted=900, draft_s=1.0, verify_s=2.0)
    with ReplyView(console, k=64, label="auto (k<=64)") as view:
        view.on_update(Update(event(1, [1, 2], 1, 3), [Segment("ab", ACCEPTED)], given))
        shown = screen(console)
        assert "10.00/round" in shown and "verify" not in shown and "…" not in shown, shown
    assert "verify 67%" in footer(given, "auto (k<=64)", 120).plain


def test_stats_lines_name_sources_by_mode():
    stats = Stats(generated=12, rounds=5, drafted=8, accepted=6, total_s=1.0, prefill_s=0.2, stop_reason="eog")
    stats.record(2, 1, 2, 0.01, 0.02, "ngram")
    stats.record(0, 0, 1, 0.0, 0.02, "target")
    lines = stats_lines(stats, 4, "auto (k<=64)")
    assert lines[0].startswith("[auto (k<=64)] ") and "stop: eog" in lines[0]
    assert lines[1] == "rounds: 1 prompt lookup, 1 target alone"
    assert lines[2].startswith("k=4: accepted 7/10 drafts (70%)")
    only_target = Stats(generated=3, rounds=3)
    only_target.rounds_by_source = {"target": 3}
    assert len(stats_lines(only_target, 0, "target alone")) == 1


def test_every_line_words_and_rounds_tokens_per_round_alike():
    """--stats said '3.33 accepted per round (+1 target token)', the line under a reply and /stats '3.33 per round
    + 1 target token', the live footer '3.3/round': one statistic, one name and one rounding."""
    stats = Stats(generated=14, rounds=3, drafted=12, accepted=10, draft_s=0.5, verify_s=1.5, total_s=2.0)
    full = "3.33 accepted per round (+1 target token)"
    assert full in stats_lines(stats, 4, "spec k=4")[1]
    assert full in summary_line(stats, "spec k=4").plain and full in session_lines(stats)[1]
    assert "3.33/round" in footer(stats, "spec k=4").plain


def test_stats_lines_of_a_reply_stopped_before_its_first_token_show_no_ttft():
    """`TTFT 0.00s` read as an instant first token where there was none (Ctrl-C while reading the prompt)."""
    stopped = Stats(total_s=2.5, prefill_s=2.5, stop_reason="interrupted")
    line = stats_lines(stopped, 4, "auto")[0]
    assert "TTFT" not in line and "no token" in line and "stop: interrupted" in line
    answered = Stats(generated=1, rounds=1, first_token_s=0.25, total_s=0.3)
    assert "TTFT 0.25s" in stats_lines(answered, 4, "auto")[0]


def test_session_lines():
    totals = Stats(generated=20, rounds=8, drafted=12, accepted=9, draft_s=0.5, verify_s=1.5)
    totals.total_s, totals.prefill_s = 3.0, 0.5
    lines = session_lines(totals)
    assert lines[0] == "session: 20 tokens in 8 rounds, 8.0 tok/s (decode)"
    assert "accepted 9/12 drafts (75%)" in lines[1] and "25% draft / 75% verify" in lines[1]
    assert session_lines(Stats()) == ["session: 0 tokens, 0.0 tok/s (decode)"]


def test_a_session_that_drafted_nothing_does_not_count_more_rounds_than_tokens():
    """Auto with nothing drafted printed 'session: 14 tokens in 15 rounds': the round that made only the
    end-of-reply token is a round but not a token. Rounds tell something only next to drafts."""
    totals = Stats(generated=14, rounds=15, verify_s=2.0, rounds_by_source={"target": 15})
    totals.total_s, totals.prefill_s = 3.0, 0.2
    assert session_lines(totals) == ["session: 14 tokens, 5.0 tok/s (decode)"]


def test_the_sessions_speed_is_the_speed_its_replies_were_said_to_run():
    """/stats divided by draft + verify time only (no sampling, no view), so with the replies' summary lines
    saying 10 tok/s it said 20."""
    totals = Stats()
    for _ in range(2):
        reply = Stats(generated=10, rounds=10, draft_s=0.0, verify_s=0.5)
        reply.total_s, reply.prefill_s = 1.5, 0.5
        assert summary_line(reply, "target alone").plain.startswith("── 10 tokens, 10.0 tok/s")
        totals.merge(reply)
    assert session_lines(totals)[0] == "session: 20 tokens, 10.0 tok/s (decode)"


def test_a_long_note_on_stderr_that_is_not_a_terminal_stays_one_line(monkeypatch):
    """A log file or journald gets one line per note: Rich wrapped them at 80 columns, splitting a
    model's path (`pull`) or the server's note on auto in pieces."""
    from specchat.view import stderr_console

    captured = io.StringIO()
    monkeypatch.setattr("sys.stderr", captured)
    monkeypatch.delenv("COLUMNS", raising=False)
    path = "/home/someone/.local/share/specchat/models/" + "qwen2.5-coder-1.5b-instruct-q4_k_m" * 3 + ".gguf"
    stderr_console().print(f"qwen2.5-coder-1.5b-instruct-q4_k_m: already present at {path}", highlight=False)
    assert captured.getvalue().count("\n") == 1 and path in captured.getvalue()


@pytest.mark.parametrize("terminal", [True, False])
def test_errors_and_notes_wrap_at_words_on_a_terminal_only(terminal):
    """An error or a note was one line for the terminal to wrap, cut inside words on a narrow one; Rich wraps
    it at words there. To a file or a pipe it stays one line: scripts read stderr a line an error."""
    from specchat.view import note, print_error

    console = Console(file=io.StringIO(), width=20, force_terminal=terminal, color_system=None)
    print_error(console, "--target missing.gguf does not exist", "give the path of a .gguf file")
    note(console, "stopped: the context of 64 tokens is full")
    lines = [line.rstrip() for line in console.file.getvalue().splitlines()]
    if not terminal:
        assert lines == [
            "error: --target missing.gguf does not exist  hint: give the path of a .gguf file",
            "stopped: the context of 64 tokens is full",
        ]
    else:
        assert lines[:2] == ["error: --target", "missing.gguf does"] and "stopped: the context" in lines
        assert all(len(line) <= 20 for line in lines)


def test_an_error_rich_cannot_wrap_is_left_to_the_terminal():
    """Rich 15's wrap raises IndexError on a word that starts with zero-width joiners (a models directory of
    the user's): the error is then printed once, whole, for the terminal to wrap."""
    from specchat.view import print_error

    console = Console(file=io.StringIO(), width=14, force_terminal=True, color_system=None)
    print_error(console, "m \u200d\u200d👍axxxxxxxxxxxx中 is not a directory", "give one")
    assert console.file.getvalue() == "error: m \u200d\u200d👍axxxxxxxxxxxx中 is not a directory  hint: give one\n"


def test_bench_progress_shows_a_prompt_category_as_it_is_not_as_markup():
    """The bench's progress line names a --prompts file's category and question id: read as Rich markup,
    '[/]' raised MarkupError in the refresh thread (a traceback over the bar, which froze) and, on Ctrl-C,
    as the bar stopped; '[i]' vanished into italics."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, no_color=True, width=100)
    with bench_progress(console, 2) as progress:
        progress("rep 1/1 · a[/]b #q[i]1 · spec", 1)  # drawn as the bar stops, if not before
    assert "rep 1/1 · a[/]b #q[i]1 · spec" in out.getvalue()


def test_control_characters_in_model_text_are_shown_not_obeyed():
    """A reply holding ESC sequences (clear the screen, retitle the window) reached the terminal raw: shown
    as control pictures, they are seen and do nothing. Rich drops the BEL, which left the OSC unterminated."""
    console = recording_console()
    script = [(event(1, [1], 1, 2), [Segment("a\x1b[2J\x1b]0;x\x07b", ACCEPTED), Segment("\x00c\td\x7f\x9b", TARGET)])]
    play(console, script)
    out = console.file.getvalue()
    assert "\x1b[2J" not in out and "\x1b]0" not in out and "\x00" not in out and "\x9b" not in out
    assert "a␛[2J␛]0;x␇b␀c" in screen(console)


def test_restoring_the_terminal_on_sigterm_is_armed_from_the_main_thread_only():
    """signal.signal() raises ValueError off the main thread: `run` called from a thread was an internal error."""
    import signal
    import threading

    from specchat.terminal import restore_terminal_when_killed

    before = signal.getsignal(signal.SIGTERM)
    failed = []
    worker = threading.Thread(target=lambda: _record_failure(restore_terminal_when_killed, failed))
    worker.start()
    worker.join()
    assert failed == [] and signal.getsignal(signal.SIGTERM) is before


def _record_failure(call, failed: list) -> None:
    try:
        call()
    except Exception as exc:  # the thread's exception would only be printed
        failed.append(exc)


@pytest.mark.parametrize("term", ["file", "dumb"])
def test_progress_bars_draw_nothing_where_stderr_is_not_a_terminal(monkeypatch, term):
    """`specchat pull 2> log`: Rich printed each download's bar once, as it stopped, after the lines that said
    the download was done (and wrapped at 80 columns: `491.… MB`), and tune's and bench's transient bar left a
    blank line before an error or 'interrupted'. The notes on stderr say what happens there already. The same
    on TERM=dumb (Emacs' M-x shell): a terminal without cursor moves."""
    from specchat.downloadbar import download_progress

    out = io.StringIO()
    if term == "dumb":
        monkeypatch.setenv("TERM", "dumb")
    console = Console(file=out, width=80, force_terminal=term == "dumb")
    with download_progress(console) as start:
        start("model.gguf (PyPI mirror)", 1000)(1000)
        console.print("model.gguf: downloaded")
    with bench_progress(console, 2) as progress:
        progress("spec k=8 · code #1", 1)
    assert out.getvalue() == "model.gguf: downloaded\n"


@pytest.mark.parametrize("term", ["file", "dumb"])
def test_bench_progress_in_a_log_is_a_plain_line_now_and_then(monkeypatch, term):
    """`specchat bench 2> bench.log` (nohup, CI): the bar is drawn on a terminal only, so a bench of 2,000
    prompts said nothing for minutes after its "N replies to generate" line. There a line says how far it
    is, what runs and how long is left, at most every 30 s: one physical line each, no ANSI codes, no
    carriage returns, nothing as the runs end (the report follows)."""
    from types import SimpleNamespace

    from specchat import progressview

    now = [100.0]
    monkeypatch.setattr(progressview, "time", SimpleNamespace(monotonic=lambda: now[0]))
    if term == "dumb":
        monkeypatch.setenv("TERM", "dumb")
    out = io.StringIO()
    console = Console(file=out, width=40, force_terminal=term == "dumb")
    with bench_progress(console, 10) as progress:
        for step, description in ((5, "warming up"), (40, "history · chat #1 turn 1 · target alone")):
            now[0] += step
            progress(description, 0)  # warm-up, earlier turns: nothing measured yet
        for done in range(10):
            progress(f"rep 1/1 · chat\x1b[2J #{done} · spec k=4", done)
            now[0] += 12.0  # a run takes 12 s: a line every third run
        progress("done", 10)
    lines = out.getvalue().splitlines()
    assert lines == [
        "0/10 replies done, 0:00:45 elapsed; now history · chat #1 turn 1 · target alone",
        "3/10 replies done, 0:01:21 elapsed, about 0:01:24 left; now rep 1/1 · chat\\x1b[2J #3 · spec k=4",
        "6/10 replies done, 0:01:57 elapsed, about 0:00:48 left; now rep 1/1 · chat\\x1b[2J #6 · spec k=4",
        "9/10 replies done, 0:02:33 elapsed, about 0:00:12 left; now rep 1/1 · chat\\x1b[2J #9 · spec k=4",
    ], lines
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


@pytest.mark.parametrize("width", [40, 60, 80])
def test_a_download_bar_keeps_its_numbers_whole_on_a_narrow_terminal(width):
    """The default pair's first pull on an 80-column terminal drew `0.1/1.1` with `GB` wrapped onto a line of its
    own, at 60 columns no numbers at all: the file's name gives way (…), the numbers do not."""
    from specchat.downloadbar import download_progress

    console = Console(file=io.StringIO(), width=width, force_terminal=True, no_color=True)
    with download_progress(console) as start:
        start("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf (PyPI mirror)", 1_117_320_768)(100_000_000)
        start("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (PyPI mirror)", 491_400_064)(491_400_064)
    lines = screen(console).splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("qwen2.5-") and "0.1/1.1 GB" in lines[0], lines
    assert "491.4/491.4 MB" in lines[1], lines


@pytest.mark.parametrize("width", [60, 80])
def test_a_narrow_bar_keeps_which_file_and_what_is_done_to_it(width):
    """`pull` at 80 columns showed `sha256 of qwen2.5-coder-1.…` beside a bar 28 columns wide: which model was
    read, and `(PyPI mirror)`, were cut. The bar gives way first, then the middle of the name."""
    from specchat.downloadbar import download_progress

    console = Console(file=io.StringIO(), width=width, force_terminal=True, no_color=True)
    with download_progress(console) as start:
        start("sha256 of qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1_117_320_768)(400_000_000)
        start("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (PyPI mirror)", 491_400_064)(100_000_000)
    lines = screen(console).splitlines()
    assert len(lines) == 2 and lines[0].startswith("sha256 of qwen2.5-coder-1.5b"), lines
    assert "0.4/1.1 GB" in lines[0] and "(PyPI mirror)" in lines[1] and "100.0/491.4 MB" in lines[1], lines
    if width == 80:  # room for the whole first name, and all of the second but its .gguf
        assert "q4_k_m.gguf" in lines[0] and "qwen2.5-coder-0.5b-instruct-q4_k_m… (PyPI mirror)" in lines[1], lines


@pytest.mark.parametrize(
    ("width", "shown"),
    [
        (60, "sha256 of qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
        (48, "sha256 of qwen2.5-coder-1.5b-instruct-q4_k_m…"),
        (40, "sha256 of qwen2.5-coder-1.5b-in…t-q4_k_m"),
    ],
)
def test_a_label_gives_up_the_middle_of_its_file_name(width, shown):
    from specchat.downloadbar import shortened

    assert shortened("sha256 of qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", width) == shown


def test_a_download_bar_keeps_the_cursor_hidden_after_ctrl_z_and_fg(tmp_path):
    """After Ctrl-Z (which shows the cursor for the shell) and `fg`, pull's bars drew on with the cursor shown: a
    started bar registers its terminal, as the reply view and bench's bar do, so that `fg` hides it again."""
    from specchat import terminal
    from specchat.downloadbar import download_progress

    with open(tmp_path / "tty", "w") as file:
        console = Console(file=file, width=80, force_terminal=True)
        with download_progress(console) as start:
            assert terminal._HIDDEN_CURSORS == []  # nothing drawn before a download starts
            start("a.gguf (PyPI mirror)", 10)(5)
            start("b.gguf (PyPI mirror)", 10)(5)
            held = list(terminal._HIDDEN_CURSORS)
            assert held == [file.fileno()]
        assert terminal._HIDDEN_CURSORS == []


def test_bench_progress_under_force_color_into_a_file_is_lines_not_a_bar(monkeypatch):
    """FORCE_COLOR (CI runners set it) makes Rich take a file for a terminal: bench's bar wrote cursor codes and
    carriage returns into the log ten times a second. There it writes its plain lines, as into any file."""
    from specchat.progressview import bench_progress

    monkeypatch.setenv("FORCE_COLOR", "1")
    out = io.StringIO()
    console = Console(file=out, width=60)
    assert console.is_terminal
    with bench_progress(console, 3) as progress:
        progress("warming up", 0)
        progress("chat #1", 1)
    assert "\r" not in out.getvalue() and "\x1b[?25l" not in out.getvalue(), repr(out.getvalue())
