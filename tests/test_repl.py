"""Slash commands and /save of the interactive chat (pure logic: no generation needed)."""

from __future__ import annotations

import errno
import io
import json
import os
import stat
from types import SimpleNamespace

import pytest
from rich.console import Console

from specchat.chat import Conversation, Message
from specchat.repl import ChatSession, ChatSettings
from specchat.transcript import save_conversation


def session(drafter=True) -> tuple[ChatSession, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=False)
    available = {"target", "ngram", "auto"} | ({"spec"} if drafter else set())
    # interrupt: the chat sets its settle (a Pipeline has one, as every pipeline the CLI opens)
    # prompt: /system renders its text once (a template that takes it); no template refuses one here
    pipeline = SimpleNamespace(
        available=available.__contains__, interrupt=SimpleNamespace(settle=False), prompt=lambda _messages, **_kw: []
    )
    return ChatSession(pipeline, ChatSettings(mode="spec"), console, system=None), out


def test_k_temp_spec_rejected_commands():
    chat, out = session()
    assert chat.command("/k 6") and chat.settings.k == 6
    assert chat.command("/k 99") and chat.settings.k == 6 and "usage: /k N" in out.getvalue()
    assert chat.command("/temp 0.7") and chat.settings.params.temperature == 0.7
    assert chat.command("/temp hot") and "usage: /temp" in out.getvalue()
    assert chat.command("/spec off") and chat.settings.effective_k == 0
    assert chat.command("/spec on") and chat.settings.effective_k == 6
    assert chat.command("/rejected off") and not chat.settings.show_rejected


def test_mode_in_capitals_is_taken_as_the_command_line_takes_it():
    """`/mode NGRAM` was refused as "(lower case)", where `--mode NGRAM` is taken; `/mode Spec` in a session
    without the draft model says it is not available."""
    chat, out = session(drafter=False)
    assert chat.command("/mode Spec") and "mode spec is not available in this session" in out.getvalue()
    assert chat.settings.mode == "spec"  # not switched
    assert chat.command("/mode NGRAM") and "mode: ngram" in out.getvalue() and chat.settings.mode == "ngram"
    assert "lower case" not in out.getvalue()


def test_mode_alone_shows_the_mode_as_system_alone_shows_the_prompt():
    """`/mode` alone printed only its usage line, where `/system` alone shows the system prompt."""
    chat, out = session()
    assert chat.command("/mode") and "mode: spec k=4 (/mode auto|spec|ngram|target switches)" in out.getvalue()
    assert chat.command("/spec off") and chat.command("/mode") and "mode: target alone (" in out.getvalue()
    # not as after /mode target, where /spec on refuses: it says what /spec on returns to
    assert "(speculation off: /spec on returns to spec k=4; /mode auto|spec|ngram|target switches)" in out.getvalue()
    assert "usage" not in out.getvalue() and chat.settings.mode == "spec"
    # after /mode target, /spec on refuses: nothing to return to
    chat, out = session()
    assert chat.command("/mode target") and chat.command("/spec off") and chat.command("/mode")
    assert "mode: target alone (/mode auto|spec|ngram|target switches)" in out.getvalue()


def test_a_k_beyond_what_the_mode_drafts_is_capped_and_said():
    """spec drafts at most 16 tokens a round (bench --ks, the mode table); /k 32 or -k 32 drafted 32 with
    the draft model, each a step that could not pay. It is kept for a later /mode auto or ngram."""
    chat, out = session()
    assert chat.command("/k 32") and chat.settings.k == 32 and chat.settings.effective_k == 16
    assert "spec k=16; spec drafts at most 16" in out.getvalue()
    assert chat.command("/mode ngram") and chat.settings.effective_k == 32


def test_digits_that_int_refuses_are_a_usage_line_not_a_crash():
    """'²'.isdigit() is True but int('²') raises: /k ², /max ² and /load ² ended the chat with an internal error."""
    chat, out = session()
    assert chat.command("/k ²") and chat.command("/max ²") and chat.command("/load ²")
    many = "1" * 5000  # more digits than int() reads
    assert chat.command(f"/k {many}") and chat.command(f"/max {many}") and chat.command(f"/load {many}")
    assert chat.command("/k ٣")  # an Arabic-Indic 3: not taken as the 3 the user does not see
    assert chat.settings.k is None and chat.settings.max_tokens == 0
    said = out.getvalue()
    assert said.count("usage: /k N") == 3 and said.count("usage: /max N") == 2 and "cannot read ²" in said


def test_temp_reads_what_the_user_sees():
    """float() read /temp ٣ (an Arabic-Indic 3) as 3 and /temp 0_5 as 5, and /temp -0 said "temperature = -0"."""
    chat, out = session()
    assert chat.command("/temp ٣") and chat.command("/temp 0_5")
    assert chat.settings.params.temperature == 0 and out.getvalue().count("usage: /temp T") == 2
    assert chat.command("/temp -0") and "temperature = 0 (greedy)" in out.getvalue()
    assert chat.command("/temp 0.5") and chat.settings.params.temperature == 0.5


def test_load_of_a_fifo_or_a_device_is_refused_without_reading_it(tmp_path):
    """/load of a FIFO blocked the chat for good (Ctrl-C then ended it), /load /dev/zero filled the memory."""
    import threading

    chat, out = session()
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer that never writes: a read would wait forever
    try:
        for what in (fifo, "/dev/zero", tmp_path):
            worker = threading.Thread(target=chat.command, args=(f"/load {what}",), daemon=True)
            worker.start()
            worker.join(timeout=10)
            assert not worker.is_alive(), what
    finally:
        os.close(writer)
    assert out.getvalue().count("is not a regular file") == 3 and chat.conversation.messages == []


def test_spec_on_without_draft_is_refused():
    chat, out = session(drafter=False)
    chat.settings.spec = False
    chat.command("/spec on")
    assert not chat.settings.spec and "no drafter here" in out.getvalue()
    chat.command("/mode spec")
    assert chat.settings.mode == "spec" and "not available" in out.getvalue()


def test_mode_command():
    chat, out = session()
    chat.command("/mode ngram")
    assert chat.settings.effective_mode == "ngram" and chat.settings.effective_k == 8
    chat.command("/mode auto")
    assert chat.settings.label == "auto (k<=64)"
    chat.command("/mode fast")
    assert "usage: /mode auto|spec|ngram|target" in out.getvalue()  # the modes of this session


def test_unknown_command_hint_and_bye():
    chat, out = session()
    assert chat.command("/frobnicate")
    assert "unknown command /frobnicate: /help" in out.getvalue()
    assert chat.command("/bye") is False


def test_a_slash_alone_and_max_one_read_right():
    """`/` alone said "// sends it as a message" (which sends "/"), and `/max 1` "replies stop after 1 tokens"."""
    chat, out = session()
    assert chat.command("/")
    assert "a / alone is no command: /help lists the commands" in out.getvalue() and "//" not in out.getvalue()
    chat.command("/max 1")
    assert "replies stop after 1 token\n" in out.getvalue()


def test_a_command_without_an_argument_given_one_is_a_usage_line_and_does_not_act():
    """`/bye now` left the chat and `/reset x` cleared the conversation: the extra words were ignored."""
    chat, out = session()
    chat.conversation.messages.append(Message("user", "hi"))
    for line in ("/bye now", "/exit x", "/reset x", "/stats all", "/help k"):
        assert chat.command(line) is True
    text = out.getvalue()
    assert "usage: /bye (it takes no argument)" in text and "usage: /reset (it takes no argument)" in text
    assert "usage: /stats" in text and "usage: /help" in text and "session:" not in text
    assert chat.conversation.messages == [Message("user", "hi")]
    assert chat.command("/stats") and "session:" in out.getvalue()


def test_system_and_reset():
    chat, _ = session()
    chat.conversation.messages.append(Message("user", "hi"))
    chat.command("/system Be terse.")
    chat.command("/reset")
    assert chat.conversation.messages == [] and chat.conversation.system == "Be terse."
    assert chat.conversation.as_messages()[0] == Message("system", "Be terse.")


def test_system_alone_shows_the_system_prompt_and_off_clears_it():
    """`/system` alone cleared the system prompt, unseen: nothing in the chat showed what it was."""
    chat, out = session()
    chat.command("/system")
    assert "no system prompt (the template's default): /system TEXT sets one" in out.getvalue()
    chat.command("/system Be terse.\x1b[2J")
    chat.command("/system")
    assert chat.conversation.system == "Be terse.\x1b[2J"  # shown, not cleared
    shown = out.getvalue()
    assert "/system TEXT replaces it, /system off clears it" in shown and "Be terse.\u241b[2J" in shown
    assert "\x1b" not in shown  # a control character is shown, not acted on
    chat.command("/system off")
    assert chat.conversation.system is None and "system prompt cleared" in out.getvalue()


def test_save_json_and_markdown(tmp_path):
    chat, out = session()
    chat.conversation.messages += [Message("user", "hi"), Message("assistant", "hel", interrupted=True)]
    chat.command(f"/save {tmp_path / 'c.json'}")
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["messages"][1] == {"role": "assistant", "content": "hel", "interrupted": True}
    chat.command(f"/save {tmp_path / 'c.md'}")
    text = (tmp_path / "c.md").read_text()
    assert "## assistant (interrupted)" in text and "## user\n\nhi" in text
    assert "saved 2 messages" in out.getvalue()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_save_and_load_take_a_quoted_path(tmp_path):
    """A path quoted whole, as a terminal pastes a dropped file's or a shell user types one with a space: the
    quotes were part of the name, so /save "c.json" wrote Markdown to a file named `"c.json"`."""
    chat, out = session()
    chat.conversation.messages += [Message("user", "hi"), Message("assistant", "hello")]
    talk, notes = tmp_path / "my talk.json", tmp_path / "notes.md"
    chat.command(f'/save "{talk}"')
    chat.command(f"/save '{notes}'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my talk.json", "notes.md"]
    assert json.loads(talk.read_text())["messages"][1]["content"] == "hello"
    chat.command("/reset")
    chat.command(f"/load '{talk}'")
    assert [m.content for m in chat.conversation.messages] == ["hi", "hello"]
    assert "loaded " in out.getvalue()
    chat.command("/save ''")  # quotes around nothing: no file named '' (nor the folder ".")
    chat.command('/load ""')
    assert "usage: /save FILE" in out.getvalue() and "usage: /load ID" in out.getvalue()


def test_load_of_a_missing_file_says_what_load_takes(tmp_path):
    """A mistyped name said only "cannot read x.json: No such file or directory", no hint."""
    chat, out = session()
    assert chat.command(f"/load {tmp_path / 'missing.json'}")
    said = " ".join(out.getvalue().split())
    assert "(/load ID: a conversation from `specchat logs`; /load FILE: one saved with /save FILE.json)" in said


LOGGED = {"pair": None, "target": "t.gguf", "draft": None, "mode": "target", "label": "x", "settings": {}, "stats": {}}


def test_load_of_a_negative_number_says_ids_are_what_logs_lists_and_names_the_latest(tmp_path):
    """/load -1 (the last one, as a list index) was read as a file name: "cannot read -1: No such file or
    directory", as if the user had meant a file. It is no id; the hint names the latest conversation."""
    from specchat.logstore import Recorder

    chat, out = session()
    chat.log = Recorder(True, tmp_path / "logs.db")
    assert chat.command("/load -1")
    said = " ".join(out.getvalue().split())
    assert "no conversation -1: the ids are the numbers `specchat logs` lists (no conversation is logged yet)" in said
    for _turn in range(2):
        Recorder(True, tmp_path / "logs.db").record(
            Conversation(None, [Message("user", "Hi."), Message("assistant", "Hello.")]), LOGGED
        )
    assert chat.command("/load -1")
    said = " ".join(out.getvalue().split())
    assert "no conversation -1: the ids are the numbers `specchat logs` lists (the latest is 2: /load 2)" in said
    assert "No such file" not in said


def test_load_of_a_file_it_may_not_read_says_so_not_what_load_takes(tmp_path, monkeypatch):
    from specchat import logstore

    def denied(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(logstore, "load_conversation", denied)
    chat, out = session()
    chat.command(f"/load {tmp_path / 'theirs.json'}")
    said = " ".join(out.getvalue().split())
    assert "Permission denied (check the file's permissions)" in said and "/load ID" not in said


def test_save_error_is_one_line_and_keeps_old_file(tmp_path):
    chat, out = session()
    chat.command(f"/save {tmp_path / 'missing-dir' / 'c.md'}")  # "No such file or directory" of the file to make
    said = " ".join(out.getvalue().split())
    missing = tmp_path / "missing-dir"
    assert f"could not save to {missing / 'c.md'}: the folder {missing} does not exist" in said
    target = tmp_path / "keep.json"
    target.write_text("old")
    save_conversation(chat.conversation, target)
    assert json.loads(target.read_text()) == {"messages": []}


def test_save_over_a_read_only_file_is_refused_and_keeps_it(tmp_path, read_only):
    """/save renames a temporary file into place, which replaced a file its owner had made read-only (the
    shell's `>` and cp refuse); it is refused with one line, and the file keeps its text."""
    chat, out = session()
    chat.conversation.messages.append(Message("user", "hi"))
    kept = tmp_path / "kept.md"
    kept.write_text("old")
    read_only(kept)
    chat.command(f"/save {kept}")
    assert f"could not save to {kept}: Permission denied" in " ".join(out.getvalue().split())
    assert kept.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["kept.md"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_save_on_a_full_disk_says_so_and_keeps_the_old_file(tmp_path, monkeypatch, code):
    """/save on a full disk said "No space left on device" (or "Disk quota exceeded") with no word of what to
    do; it says the disk is full in one line, and the file it would replace stays whole, no temporary beside it."""
    real_fdopen = os.fdopen

    def full(handle, *args, **kwargs):
        out = real_fdopen(handle, *args, **kwargs)
        out.write = lambda text: (_ for _ in ()).throw(OSError(code, os.strerror(code)))
        return out

    chat, out = session()
    chat.conversation.messages.append(Message("user", "hi"))
    kept = tmp_path / "kept.md"
    kept.write_text("old")
    monkeypatch.setattr(os, "fdopen", full)
    assert chat.command(f"/save {kept}")  # the chat goes on
    said = " ".join(out.getvalue().split())
    assert f"could not save to {kept}: the disk is full (free some space, or /save to another disk)" in said, said
    assert len(out.getvalue().strip().splitlines()) == 1
    assert kept.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["kept.md"]


def test_chat_survives_a_full_context(monkeypatch):
    """An error in one turn (here: the conversation outgrew the context) is reported; the chat goes on."""
    from specchat import chatloop, repl
    from specchat.errors import ContextFullError

    chat, out = session()
    lines = iter(["hello", "/bye"])
    monkeypatch.setattr(chatloop, "read_message", lambda _console: next(lines))

    def full(_text):
        chat.conversation.messages.append(Message("user", "hello"))
        raise ContextFullError("the prompt has 300 tokens but the context holds 256", hint="raise --ctx")

    monkeypatch.setattr(chat, "ask", full)
    assert repl.chat_loop(chat) == 0
    text = out.getvalue()
    assert "error: the prompt has 300 tokens" in text and "hint: raise --ctx" in text
    assert chat.conversation.messages == []  # the unanswered message was dropped


def test_ctrl_c_during_a_command_stops_the_command_not_the_chat(monkeypatch):
    """Ctrl-C while /load waited (a locked log, a slow disk) ended the whole chat with exit 130."""
    from specchat import chatloop, repl

    chat, out = session()
    lines = iter(["/load 1", "/k 5", "/bye"])
    monkeypatch.setattr(chatloop, "read_message", lambda _console: next(lines))

    def waiting(_what):
        raise KeyboardInterrupt

    monkeypatch.setattr(chat.log, "load", waiting)
    assert repl.chat_loop(chat) == 0
    assert "/load stopped" in out.getvalue() and chat.settings.k == 5


# -- a whole chat on the fake backend -------------------------------------------------------------------


@pytest.fixture
def live_chat(fake_models):
    """A ChatSession on a loaded fake pair (every mode available), writing to a recording console."""
    from specchat.repl import ChatSettings
    from specchat.runtime import Options, open_pipeline

    target, draft = fake_models
    options = Options(target_path=target, draft_path=draft, mode="spec", n_ctx=1024)
    with open_pipeline(options, lambda _m: None) as pipeline:
        out = io.StringIO()
        console = Console(file=out, width=100, force_terminal=False)
        yield ChatSession(pipeline, ChatSettings(mode="spec"), console, system=None), out


def test_turns_are_answered_and_totals_merge_the_loops_stats(live_chat):
    from fake_backend import REPLY

    chat, out = live_chat
    first = chat.ask("Name three colours.")
    assert first.text == REPLY.format(prompt="Name three colours.")
    assert chat.totals.rounds == first.stats.rounds and chat.totals.generated == first.stats.generated
    second = chat.ask("And two more.")
    assert chat.totals.rounds == first.stats.rounds + second.stats.rounds  # merged once, never re-counted
    assert chat.totals.drafted == first.stats.drafted + second.stats.drafted
    assert [m.role for m in chat.conversation.messages] == ["user", "assistant", "user", "assistant"]
    text = out.getvalue()
    assert text.count("── ") == 2 and "spec k=4" in text
    assert "legend:" not in text  # not a terminal: the text has no styles for a legend to name
    chat.command("/stats")
    assert f"session: {chat.totals.generated} tokens in {chat.totals.rounds} rounds" in out.getvalue()
    assert "pos  1" in out.getvalue()


def test_the_legend_is_shown_on_a_terminal_above_the_first_reply_only(live_chat):
    chat, _out = live_chat
    chat.console = Console(file=io.StringIO(), width=100, force_terminal=True)
    chat.ask("Name three colours.")
    chat.ask("And two more.")
    assert chat.console.file.getvalue().count("legend:") == 1


def test_the_legend_names_rejected_guesses_only_where_they_are_shown(live_chat):
    """With --no-rejected (or /rejected off) the legend still named "rejected draft guess", a style the reply
    does not show; /rejected on after such a legend shows it again, naming them, above the next reply."""
    chat, _out = live_chat
    chat.console = Console(file=io.StringIO(), width=200, force_terminal=True)
    chat.command("/rejected off")
    chat.ask("Name three colours.")
    legends = [line for line in chat.console.file.getvalue().splitlines() if "legend:" in line]
    assert len(legends) == 1 and "target's own token" in legends[0] and "rejected" not in legends[0]
    chat.command("/rejected on")
    chat.ask("And two more.")
    legends = [line for line in chat.console.file.getvalue().splitlines() if "legend:" in line]
    assert len(legends) == 2 and "rejected draft guess" in legends[1]


def test_modes_switch_between_turns(live_chat):
    chat, out = live_chat
    chat.command("/mode ngram")
    assert chat.ask("one two three one two three").stats.rounds_by_source.keys() <= {"ngram", "target"}
    chat.command("/spec off")
    alone = chat.ask("Hi.")
    assert alone.stats.drafted == 0 and alone.stats.rounds_by_source == {"target": alone.stats.rounds}
    chat.command("/mode target")
    chat.command("/spec on")
    assert "the mode is 'target'" in out.getvalue()


def test_verbose_shows_position_bars(live_chat):
    chat, out = live_chat
    chat.settings.verbose = True
    chat.ask("Hello there.")
    assert "pos  1" in out.getvalue() and "pos  4" in out.getvalue()


def test_an_interrupted_reply_is_kept_and_marked(fake_models, tmp_path):
    import fake_backend

    from specchat.repl import ChatSettings
    from specchat.runtime import Options, open_pipeline

    target, _draft = fake_backend.write_pair(tmp_path / "stop", interrupt_at=5)
    with open_pipeline(Options(target_path=target, mode="target"), lambda _m: None) as pipeline:
        console = Console(file=io.StringIO(), width=100, force_terminal=False)
        chat = ChatSession(pipeline, ChatSettings(mode="target"), console, system=None)
        generation = chat.ask("Tell me a story.")
    assert generation.stats.stop_reason == "interrupted"
    last = chat.conversation.messages[-1]
    assert last.role == "assistant" and last.interrupted and last.content == generation.text
    assert "[interrupted]" in console.file.getvalue()


def test_a_message_stopped_before_its_reply_began_leaves_the_conversation(fake_models, tmp_path):
    """Ctrl-C while a long paste is still being read (no token yet): the message stayed in the conversation
    with an empty reply, so every later turn sent it, and read it, again."""
    import fake_backend

    from specchat.repl import ChatSettings
    from specchat.runtime import Options, open_pipeline

    target, _draft = fake_backend.write_pair(tmp_path / "stop", interrupt_at=1)  # the prompt's own eval
    with open_pipeline(Options(target_path=target, mode="target"), lambda _m: None) as pipeline:
        console = Console(file=io.StringIO(), width=100, force_terminal=False)
        chat = ChatSession(pipeline, ChatSettings(mode="target"), console, system=None)
        generation = chat.ask("A wrong paste.")
        assert generation.stats.stop_reason == "interrupted" and generation.text == ""
        assert chat.conversation.messages == []
        assert "left out of the conversation" in console.file.getvalue()
        chat.ask("The right one.")
    assert [m.content for m in chat.conversation.messages if m.role == "user"] == ["The right one."]


def test_stats_say_nothing_of_a_reply_stopped_before_its_first_token(fake_models, tmp_path, capsys):
    """`run --stats` in the chat: Ctrl-C before the first token printed '0 tokens in 0.44s, 0.0 tok/s, no token'
    on stderr, over the line that says the message was left out: there was no reply to give stats of."""
    import fake_backend

    from specchat.repl import ChatSettings
    from specchat.runtime import Options, open_pipeline

    target, _draft = fake_backend.write_pair(tmp_path / "stop", interrupt_at=1)  # the prompt's own eval
    with open_pipeline(Options(target_path=target, mode="target"), lambda _m: None) as pipeline:
        console = Console(file=io.StringIO(), width=100, force_terminal=False)
        chat = ChatSession(pipeline, ChatSettings(mode="target", stats=True), console, system=None)
        chat.ask("A wrong paste.")
    assert "left out of the conversation" in console.file.getvalue()
    assert capsys.readouterr().err == ""


def test_stats_give_autos_note_once_a_session_not_after_every_reply(fake_models, capsys):
    """`run --stats --mode auto` in the chat repeated auto's one-line note on its choice of drafters after every
    reply, though it says the same for the whole session."""
    from specchat.repl import ChatSettings
    from specchat.runtime import Options, open_pipeline

    target, draft = fake_models
    options = Options(target_path=target, draft_path=draft, mode="auto", use_tuning=False, n_ctx=1024)
    with open_pipeline(options, lambda _m: None) as pipeline:
        console = Console(file=io.StringIO(), width=100, force_terminal=False)
        chat = ChatSession(pipeline, ChatSettings(mode="auto", stats=True), console, system=None)
        chat.ask("Name three colours.")
        chat.ask("And two more.")
        chat.command("/spec off")
        chat.ask("And one more.")
        chat.command("/spec on")
        chat.ask("The last one.")
    err = capsys.readouterr().err
    assert err.count("stop: eog") == 4 and err.count(pipeline.mode_note) == 1


def test_a_system_prompt_too_long_for_the_context_is_named_in_the_hint(fake_models, tmp_path):
    """ "Hi" with a system prompt that fills the context: the hint said "shorten it" (the message), not the
    system prompt that takes the room."""
    import fake_backend

    from specchat.errors import ContextFullError
    from specchat.repl import ChatSettings
    from specchat.runtime import Options, open_pipeline

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    with open_pipeline(Options(target_path=target, mode="target", n_ctx=256), lambda _m: None) as pipeline:
        chat = ChatSession(pipeline, ChatSettings(mode="target"), Console(file=io.StringIO()), system=None)
        chat.command("/system " + "Be brief. " * 30)  # 300 tokens on the fake's byte tokenizer
        with pytest.raises(ContextFullError) as raised:
            chat.ask("Hi")
    assert "the system prompt (/system" in raised.value.hint and chat.conversation.messages == []


def test_rejected_guesses_inside_a_character_show_no_replacement_character(fake_models, tmp_path):
    """A draft guess that continued a character cut across tokens (an emoji, a rarer CJK character) was
    decoded on its own: its ghost showed U+FFFD. The fake's tokenizer takes a byte a token."""
    import fake_backend

    from specchat.repl import ChatSettings
    from specchat.runtime import Options, open_pipeline

    target, draft = fake_backend.write_pair(tmp_path / "files", agree=0.6)
    with open_pipeline(Options(target_path=target, draft_path=draft, mode="spec"), lambda _m: None) as pipeline:
        out = io.StringIO()
        chat = ChatSession(pipeline, ChatSettings(mode="spec"), Console(file=out, width=100, force_terminal=True), None)
        generation = chat.ask("月亮 🦩 éé 龘龘 " * 4)
    assert generation.stats.drafted > generation.stats.accepted  # some guesses were rejected
    assert "\ufffd" not in generation.text and "\ufffd" not in out.getvalue()


def test_a_reply_that_fills_the_context_says_what_comes_next(fake_models, tmp_path):
    """A reply cut by a full context said only "[context full]": the chat says what the next message does
    and the ways out, as a one-shot run says to raise --ctx."""
    import fake_backend

    from specchat.repl import ChatSettings
    from specchat.runtime import Options, open_pipeline

    target, _draft = fake_backend.write_pair(tmp_path / "files")  # the reply quotes the message
    with open_pipeline(Options(target_path=target, mode="target", n_ctx=256), lambda _m: None) as pipeline:
        out = io.StringIO()
        chat = ChatSession(pipeline, ChatSettings(mode="target"), Console(file=out, width=200), system=None)
        assert chat.ask("x" * 150).stats.stop_reason == "context"
    text = out.getvalue()
    assert "[context full]" in text and "the context of 256 tokens is full" in text
    assert "oldest turns give way" in text and "/reset" in text and "--ctx" in text


def test_chat_loop_reads_runs_and_leaves(live_chat, monkeypatch):
    from specchat import chatloop, repl

    chat, out = live_chat
    script = iter(["", "Hi.", KeyboardInterrupt, UnicodeDecodeError("utf-8", b"", 0, 1, "bad"), "/help", "/bye"])

    def read(_console):
        item = next(script)
        if isinstance(item, str):
            return item
        raise item if isinstance(item, BaseException) else item()

    monkeypatch.setattr(chatloop, "read_message", read)
    assert repl.chat_loop(chat) == 0
    text = out.getvalue()
    assert "Ctrl-C at the prompt does not leave" in text and "not valid UTF-8" in text and "/save FILE" in text
    assert len(chat.conversation.messages) == 2
    monkeypatch.setattr(chatloop, "read_message", lambda _console: (_ for _ in ()).throw(EOFError))
    assert repl.chat_loop(chat) == 0


def test_a_message_that_begins_with_a_slash_is_sent_with_two(live_chat, monkeypatch):
    """ "/usr/bin/python is slow, why?" could only be sent as a multi-line message: it was an unknown command."""
    from specchat import chatloop, repl

    chat, out = live_chat
    pasted = "// a JavaScript comment\nlet x = 1;"  # a block whose first word is no command: sent as it is
    lines = iter(["/usr/bin/python is slow", "//usr/bin/python is slow, why?", pasted, "/bye"])
    monkeypatch.setattr(chatloop, "read_message", lambda _reader: next(lines))
    assert repl.chat_loop(chat) == 0
    assert "unknown command /usr/bin/python: /help lists the commands; //usr/bin/python sends it" in out.getvalue()
    assert [m.content for m in chat.conversation.messages if m.role == "user"] == [
        "/usr/bin/python is slow, why?",
        pasted,
    ]


def test_a_block_whose_first_word_is_a_command_is_that_command(live_chat, monkeypatch, tmp_path):
    """`/system` then Esc-Enter and a system prompt of several lines (or one pasted) went to the model as a
    user message, "/system ..." and all, and the system prompt stayed unset. A block whose first word names
    a command is that command: /system takes the lines as its text, another command refuses an argument of
    several lines rather than act on it (/save with a newline in the file's name)."""
    from specchat import chatloop, repl

    chat, out = live_chat
    blocks = ["/system\nYou are a pirate.\nSay arr.", "/SAVE a.md\nb.md", "/k 2\n/stats", "/bye"]
    lines = iter(blocks)
    monkeypatch.setattr(chatloop, "read_message", lambda _reader: next(lines))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    assert repl.chat_loop(chat) == 0
    assert chat.conversation.system == "You are a pirate.\nSay arr." and chat.conversation.messages == []
    text = out.getvalue()
    assert "usage: /save takes its argument on one line (/system TEXT may take several); //SAVE sends" in text
    assert "usage: /k takes its argument on one line" in text and chat.settings.k is None
    assert not os.listdir(".")


def test_a_block_with_text_on_the_command_line_and_a_block_escaped_with_two_slashes(live_chat, monkeypatch):
    """`/system One\nTwo` set the prompt "One \nTwo" (a blank before the line break); a pasted block that
    begins with a command's name ("/help me with this:") could not be sent at all: `//` before it sends it."""
    from specchat import chatloop, repl

    chat, out = live_chat
    notes = "/help me with this:\nprint(1)"
    lines = iter(["/system Be a pirate.\tSay arr.\nAlways.", notes, "/" + notes, "/bye"])
    monkeypatch.setattr(chatloop, "read_message", lambda _reader: next(lines))
    assert repl.chat_loop(chat) == 0
    assert chat.conversation.system == "Be a pirate.\tSay arr.\nAlways."
    assert "usage: /help (it takes no argument); //help sends the block as a message" in out.getvalue()
    assert [m.content for m in chat.conversation.messages if m.role == "user"] == [notes]


def test_ctrl_c_before_the_reply_starts_stops_the_turn_not_the_chat(live_chat, monkeypatch):
    """Ctrl-C while the prompt was prepared (a slow chat template, a long conversation) or while the view
    opened, outside the loop's own handling, ended the whole chat with exit 130 (and could leave the view's
    Live started); it stops that turn only, as Ctrl-C during the reply does."""
    from specchat import chatloop, chatview, repl

    chat, out = live_chat
    lines = iter(["Hi.", "Again.", "Once more.", "/bye"])
    monkeypatch.setattr(chatloop, "read_message", lambda _reader: next(lines))
    fit, remember, views = repl.fit_conversation, chatview.ReplyView._remember, []

    def slow_template(*args, **kwargs):
        monkeypatch.setattr(repl, "fit_conversation", fit)
        raise KeyboardInterrupt

    def first_frame(view):
        views.append(view)
        monkeypatch.setattr(chatview.ReplyView, "_remember", remember)
        raise KeyboardInterrupt

    monkeypatch.setattr(repl, "fit_conversation", slow_template)
    monkeypatch.setattr(chatview.ReplyView, "_remember", first_frame)
    assert repl.chat_loop(chat) == 0
    assert out.getvalue().count("(stopped)") == 2
    assert chat.conversation.messages[0].content == "Once more."  # the two unanswered ones left
    assert [m.role for m in chat.conversation.messages] == ["user", "assistant"]
    assert views and not views[0].live.is_started


def test_bytes_that_are_not_utf8_are_replaced_not_a_crash(live_chat, monkeypatch):
    """prompt_toolkit passes a stray byte (a Latin-1 paste) on as a lone surrogate, which the tokenizer
    refused: an internal error that ended the chat. Now it is replaced, with a warning, as in piped stdin."""
    from specchat import chatloop, repl

    chat, out = live_chat
    lines = iter(["caf\udce9 au lait", "/bye"])
    monkeypatch.setattr(chatloop, "read_message", lambda _reader: next(lines))
    assert repl.chat_loop(chat) == 0
    assert "not valid UTF-8; bad bytes were replaced" in out.getvalue()
    assert chat.conversation.messages[0].content == "caf\ufffd au lait"


class ScriptedConsole:
    is_terminal = False

    def __init__(self, lines):
        self.lines = iter(lines)

    def input(self, _prompt):
        return next(self.lines)


class EndingConsole(ScriptedConsole):
    """Its lines, then end of input (Ctrl-D) for good."""

    def input(self, _prompt):
        try:
            return next(self.lines)
        except StopIteration:
            raise EOFError from None


def test_read_message_joins_continued_and_quoted_lines():
    from specchat.lineinput import read_message

    assert read_message(ScriptedConsole(["one \\", "two"])) == "one \ntwo"
    assert read_message(ScriptedConsole(['"""', "a", "", "b", '"""'])) == "a\n\nb"
    assert read_message(ScriptedConsole(["plain"])) == "plain"


def test_terminal_input_keeps_history_in_a_file(tmp_path):
    from prompt_toolkit.history import FileHistory

    from specchat.lineinput import TerminalInput

    path = tmp_path / "state" / "history"
    reader = TerminalInput(["/help"], path)
    assert isinstance(reader.session.history, FileHistory) and path.is_file()
    assert os.name != "posix" or stat.S_IMODE(path.stat().st_mode) == 0o600  # what the user typed: theirs only
    reader.session.history.append_string("first line\nsecond line")
    assert list(FileHistory(str(path)).load_history_strings()) == ["first line\nsecond line"]


def test_a_history_file_that_cannot_be_written_costs_no_traceback(tmp_path):
    """A history file that became unwritable (read-only, a full disk; here a folder took its place, as
    root writes read-only files) raised from prompt_toolkit's event loop after every message."""
    from specchat.lineinput import TerminalInput

    path = tmp_path / "state" / "history"
    path.parent.mkdir()
    path.write_text("\n# 2026-01-01\n+earlier line\n", encoding="utf-8")
    reader = TerminalInput(["/help"], path)
    path.unlink()
    path.mkdir()
    reader.session.history.append_string("new line")
    assert reader.session.history.get_strings()[-1] == "new line"


def test_a_long_line_that_only_wraps_gets_no_continuation_marker(tmp_path):
    from specchat.lineinput import MORE, TerminalInput

    continuation = TerminalInput(["/help"], None).session.prompt_continuation
    assert continuation(6, 1, True) == ""  # a soft wrap of one long line
    assert continuation(6, 1, False) == "  " + MORE  # a line of its own, under the 6-wide prompt


def test_slash_commands_complete():
    from prompt_toolkit.document import Document

    from specchat.lineinput import SlashCompleter

    completer = SlashCompleter(ChatSession.commands())

    def complete(text):
        return [c.text for c in completer.get_completions(Document(text), None)]

    assert complete("/re") == ["/rejected", "/reset"]
    assert complete("/ma") == ["/max"]
    assert complete("hello /re") == [] and complete("/reset now") == []


def test_max_command_limits_replies(live_chat):
    from fake_backend import REPLY

    chat, out = live_chat
    assert chat.settings.max_tokens == 0  # the default: no limit
    chat.command("/max 5")
    assert chat.ask("Hello there.").stats.generated == 5
    chat.command("/max 0")
    assert chat.ask("Hello there.").text == REPLY.format(prompt="Hello there.")
    chat.command("/max many")
    assert "usage: /max N" in out.getvalue() and "no limit" in out.getvalue()


# -- a conversation longer than the context -------------------------------------------------------------


def words(n: int, seed: int) -> str:
    return " ".join(f"w{seed}{i % 10}" for i in range(n))


@pytest.fixture
def small_context_chat(tmp_path):
    """A chat on a fake target with --ctx 1024 whose replies are short (its byte tokenizer makes a
    150-word message about 600 tokens)."""
    import fake_backend

    from specchat.runtime import Options, open_pipeline

    target, _draft = fake_backend.write_pair(tmp_path / "files", reply="Noted.")
    with open_pipeline(Options(target_path=target, mode="target", n_ctx=1024), lambda _m: None) as pipeline:
        out = io.StringIO()
        console = Console(file=out, width=200, force_terminal=False)
        yield ChatSession(pipeline, ChatSettings(mode="target"), console, system="Be brief."), out


def test_oldest_turns_give_way_and_every_turn_is_answered(small_context_chat):
    chat, out = small_context_chat
    for turn in range(6):
        generation = chat.ask(words(150, turn))
        assert generation.text == "Noted." and generation.stats.stop_reason == "eog"
    notices = [line for line in out.getvalue().splitlines() if line.startswith("context:")]
    assert len(notices) == 5 and "gave way to fit the context of 1024 tokens" in notices[0]
    assert chat.conversation.system == "Be brief."  # the system prompt stays
    assert chat.conversation.messages[0].content == words(150, 5)  # the newest turn is kept


def test_turns_give_way_down_to_half_the_context(small_context_chat):
    chat, out = small_context_chat
    for turn in range(12):
        chat.ask(words(20, turn))  # about 100 tokens a turn: several fit
    kept = len(chat.conversation.messages) // 2
    assert 2 <= kept < 12 and out.getvalue().count("context:") >= 1
    prompt = chat.pipeline.prompt(chat.conversation.as_messages())
    assert len(prompt) <= 1024 * 3 // 4


def test_a_message_longer_than_the_context_is_one_error_and_the_chat_goes_on(small_context_chat, monkeypatch):
    from specchat import chatloop, repl

    chat, out = small_context_chat
    chat.ask("Hello.")
    lines = iter([words(300, 1), "Still there?", "/bye"])  # 300 words: about 1,200 tokens
    monkeypatch.setattr(chatloop, "read_message", lambda _reader: next(lines))
    assert repl.chat_loop(chat) == 0
    errors = [line for line in out.getvalue().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the context holds 1024" in errors[0] and "hint:" in errors[0]
    assert [m.content for m in chat.conversation.messages] == ["Hello.", "Noted.", "Still there?", "Noted."]


def test_help_names_every_mode_a_session_can_switch_to():
    """/mode accepts every mode in modes.MODES; /help listed all but suffix. A session started without a
    draft model or a history listed modes that /mode then refused: /help lists only those it can use."""
    from specchat import modes

    full, out = session()
    full.pipeline = SimpleNamespace(available=lambda _name: True)
    full.command("/help")
    line = next(line for line in out.getvalue().splitlines() if line.startswith("/mode"))
    assert all(name in line for name in modes.MODES) and "in this session" not in line, line

    chat, out = session(drafter=False)
    chat.command("/help")
    line = next(line for line in out.getvalue().splitlines() if line.startswith("/mode"))
    assert "in this session: auto, ngram (prompt lookup), target" in line, line
    assert "spec" not in line and "suffix" not in line
    chat.command("/mode SPEC")
    assert "mode spec is not available in this session" in out.getvalue()
    chat.settings.mode = "target"
    chat.command("/spec on")
    assert "choose one with /mode auto|ngram" in out.getvalue()


def test_turns_that_gave_way_do_not_cost_the_log_later_turns(tmp_path):
    """The log counted the messages it had logged in the conversation; once turns gave way that count was
    beyond the conversation's end, and no later turn was logged (6 turns asked, 1 logged)."""
    import fake_backend

    from specchat import logread, logstore
    from specchat.runtime import Options, open_pipeline

    target, _draft = fake_backend.write_pair(tmp_path / "files", reply="Noted.")
    log = logstore.Recorder(enabled=True, path=tmp_path / "logs.db")
    with open_pipeline(Options(target_path=target, mode="target", n_ctx=1024), lambda _m: None) as pipeline:
        chat = ChatSession(pipeline, ChatSettings(mode="target"), Console(file=io.StringIO()), None, log)
        for turn in range(4):
            chat.ask(words(150, turn))
    logged = logread.load(tmp_path / "logs.db", log.cid).messages
    assert [m.content for m in logged if m.role == "user"] == [words(150, turn) for turn in range(4)]
    assert [m.content for m in logged if m.role == "assistant"] == ["Noted."] * 4


def test_save_and_load_under_an_unknown_users_home_are_chat_lines_not_a_crash(tmp_path, monkeypatch):
    """/save ~nosuchuser/c.md raised Path.expanduser's RuntimeError, which ended the chat as an internal
    error; as in a shell, an unknown ~user is left as it is (here: a folder that does not exist)."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    chat, out = session()
    assert chat.command("/save ~nosuchuser-specchat/c.md") and chat.command("/load ~nosuchuser-specchat/c.json")
    said = out.getvalue()
    assert "could not save to ~nosuchuser-specchat/c.md: the folder ~nosuchuser-specchat does not exist" in said
    assert "cannot read ~nosuchuser-specchat/c.json" in out.getvalue()


def test_ctrl_d_inside_a_block_sends_what_was_typed(live_chat, monkeypatch):
    """Ctrl-D inside a \"\"\" block (or after a `\\` line) left the chat and silently dropped the typed lines.
    Now the lines are sent, with a note; the next Ctrl-D leaves. Ctrl-D on a blank block just leaves."""
    from specchat import lineinput, repl

    chat, out = live_chat
    monkeypatch.setattr(repl, "make_reader", lambda *_args: EndingConsole(['"""', "Hi.", "there"]))
    assert repl.chat_loop(chat) == 0
    assert "Ctrl-D ended the unfinished message: it is sent" in out.getvalue()
    assert [m.content for m in chat.conversation.messages][:1] == ["Hi.\nthere"]
    assert len(chat.conversation.messages) == 2

    with pytest.raises(lineinput.UnfinishedMessage) as unfinished:
        lineinput.read_message(EndingConsole(["one \\"]))
    assert unfinished.value.text == "one "
    with pytest.raises(EOFError) as ended:
        lineinput.read_message(EndingConsole(['"""', " "]))
    assert not isinstance(ended.value, lineinput.UnfinishedMessage)


def test_help_on_a_dumb_terminal_tells_the_ways_of_typing_several_lines_that_work_there():
    """With TERM=dumb the chat reads plain lines (no prompt_toolkit): /help still offered Esc-Enter, a paste
    as one message and Tab completion, none of which plain reading has; its `\\` and \"\"\" forms work."""
    editor, out = session()
    editor.command("/help")
    assert "Esc-Enter" in out.getvalue() and "Tab completes" in out.getvalue()

    plain, out = session()
    plain.plain = True
    plain.command("/help")
    last = out.getvalue().splitlines()[-1]
    assert last == 'Multi-line input: end a line with \\ to go on, or put the message between two """ lines.'
    assert "Esc-Enter" not in out.getvalue() and "Tab" not in out.getvalue()


def test_the_legend_comes_again_above_the_first_reply_after_one_stopped_before_it_began(fake_models, tmp_path):
    """Ctrl-C before the first token of the chat's first reply: the legend had been shown above nothing, and the
    first real reply came without it (it is shown once)."""
    import fake_backend

    from specchat.repl import ChatSettings
    from specchat.runtime import Options, open_pipeline

    target, draft = fake_backend.write_pair(tmp_path / "stop", interrupt_at=1)  # the prompt's own eval
    with open_pipeline(Options(target_path=target, draft_path=draft, mode="spec"), lambda _m: None) as pipeline:
        console = Console(file=io.StringIO(), width=100, force_terminal=True)
        chat = ChatSession(pipeline, ChatSettings(mode="spec"), console, system=None)
        chat.ask("A wrong paste.")
        chat.ask("The right one.")
        chat.ask("And another.")
    after_the_stop = console.file.getvalue().split("left out of the conversation")[1]
    assert after_the_stop.count("legend:") == 1


def test_keys_typed_before_the_chat_fails_are_dropped_not_left_to_the_shell(monkeypatch):
    """A chat that failed (an internal error) with a Ctrl-D typed during a command left that key to the shell,
    which read it as end-of-file: an interactive bash closed. The loop's unechoed keys are dropped on failure."""
    from contextlib import contextmanager

    from specchat import chatloop
    from specchat.lineinput import TerminalInput

    dropped = []

    @contextmanager
    def unechoed(*, dropped_on_error=False):
        try:
            yield
        except Exception:
            dropped.append(dropped_on_error)
            raise

    def fail(*_args):
        raise RuntimeError("a command's bug")

    monkeypatch.setattr(chatloop, "keys_unechoed", unechoed)
    monkeypatch.setattr(chatloop, "_turns", fail)
    with pytest.raises(RuntimeError):
        chatloop.run(None, TerminalInput.__new__(TerminalInput), None)
    assert dropped == [True]


def test_many_short_turns_keep_the_newest_that_fit(tmp_path):
    """A conversation of many short turns (`run -c` on one of 2,000) lost every earlier turn: the cut counted the
    texts' tokens only, not the template's around each message, so it never reached the excess before the newest
    turn. The oldest turns give way down to half the context, and the newer ones stay."""
    import fake_backend

    from specchat.chat import Conversation, Message, fit_conversation
    from specchat.runtime import Options, open_pipeline

    target, _draft = fake_backend.write_pair(tmp_path / "files", reply="Noted.")
    messages = [Message(role, f"{role} {turn}") for turn in range(300) for role in ("user", "assistant")]
    conversation = Conversation(None, [*messages, Message("user", "next question")])
    with open_pipeline(Options(target_path=target, mode="target", n_ctx=1024), lambda _m: None) as pipeline:
        prompt, dropped = fit_conversation(pipeline.target, conversation)
    assert 0 < dropped < 300 and len(prompt) <= 1024
    assert len(prompt) > 1024 // 4, "turns that fit in half the context are kept"
    assert conversation.messages[-3].content == "user 299" and conversation.messages[-1].content == "next question"


def test_a_message_that_fits_but_leaves_too_little_for_a_reply_says_so(tmp_path):
    """A message of 200 tokens in a context of 256 (`run -c --ctx 256`) was refused as "this message takes 200
    tokens with the system prompt; the context holds 256", which read as a contradiction: what it lacked was the
    room kept for the reply, which the error did not name."""
    import fake_backend

    from specchat.chat import MIN_REPLY, Conversation, Message, fit_conversation
    from specchat.errors import ContextFullError
    from specchat.runtime import Options, open_pipeline

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    conversation = Conversation(None, [Message("user", "x" * 200)])  # a byte a token on the fake
    options = Options(target_path=target, mode="target", n_ctx=256)
    with open_pipeline(options, lambda _m: None) as pipeline, pytest.raises(ContextFullError) as raised:
        fit_conversation(pipeline.target, conversation)
    tokens = int(raised.value.message.split("takes ")[1].split()[0])
    assert 256 - MIN_REPLY < tokens < 256  # the case: it fits, the reply's share does not
    assert raised.value.message.endswith(f"the context holds 256, {MIN_REPLY} of them kept for the reply")


def test_good_utf8_that_comes_as_surrogates_is_no_bad_bytes(live_chat, monkeypatch):
    """Where stdin's encoding is ASCII (PYTHONIOENCODING=ascii; LC_ALL=C with PYTHONUTF8=0) prompt_toolkit
    passes each byte of a typed 'ö' as a surrogate: mended right, but warned of as 'not valid UTF-8'."""
    from specchat import chatloop, repl

    chat, out = live_chat
    lines = iter(["caf\udcc3\udca9 au lait", "/bye"])
    monkeypatch.setattr(chatloop, "read_message", lambda _reader: next(lines))
    assert repl.chat_loop(chat) == 0
    assert "not valid UTF-8" not in out.getvalue()
    assert chat.conversation.messages[0].content == "café au lait"


def test_a_loaded_file_s_turns_that_gave_way_are_logged_too(tmp_path):
    """A conversation loaded from a file is logged whole with its first new reply (logstore.Recorder), but when
    that reply's prompt outgrew the context, the turns that gave way were never logged: the log (and `-c`
    from it) began with the turns that were kept, while /load ID and -c keep every turn in the log."""
    import fake_backend

    from specchat import logread, logstore
    from specchat.runtime import Options, open_pipeline

    saved = Conversation("Be brief.", [])
    for turn in range(4):
        saved.messages += [Message("user", words(150, turn)), Message("assistant", "Noted.")]
    save_conversation(saved, tmp_path / "long.json")
    target, _draft = fake_backend.write_pair(tmp_path / "files", reply="Noted.")
    log = logstore.Recorder(enabled=True, path=tmp_path / "logs.db")
    with open_pipeline(Options(target_path=target, mode="target", n_ctx=1024), lambda _m: None) as pipeline:
        out = io.StringIO()
        chat = ChatSession(pipeline, ChatSettings(mode="target"), Console(file=out), None, log)
        chat.command(f"/load {tmp_path / 'long.json'}")
        chat.ask(words(150, 9))
    assert "gave way" in out.getvalue()
    logged = logread.load(tmp_path / "logs.db", log.cid)
    assert [m.content for m in logged.messages if m.role == "user"] == [words(150, t) for t in (0, 1, 2, 3, 9)]
    assert logged.system == "Be brief."


@pytest.mark.parametrize(
    "reply",
    [
        "Here:\n\n```python\nprint(1)",  # cut off by -n inside the block
        "````markdown\n```\nnot the end",  # a longer fence: ``` inside it closes nothing
        "~~~\nx = 1\n```",  # a tilde fence is not closed by backticks
        "   ```\nindented up to three spaces is a fence",
        "```\nshown\n```\n\nthen ```` ~~~\n```js\nlet a",  # the second block is the open one
    ],
)
def test_save_markdown_closes_a_code_block_the_reply_left_open(tmp_path, reply):
    """A reply cut off (-n, Ctrl-C) inside a code block left its fence open in /save FILE.md: every later
    heading (## user, ## assistant) was read as code."""
    from markdown_it import MarkdownIt

    chat, _out = session()
    chat.conversation.messages += [Message("user", "code?"), Message("assistant", reply, interrupted=True)]
    chat.conversation.messages += [Message("user", "thanks"), Message("assistant", "You're welcome.")]
    chat.command(f"/save {tmp_path / 'c.md'}")
    text = (tmp_path / "c.md").read_text()
    headings = [t.map[0] for t in MarkdownIt("commonmark").parse(text) if t.type == "heading_open"]
    assert len(headings) == 4, text
    assert reply in text  # the reply itself is kept as it was


@pytest.mark.parametrize(
    "reply",
    [
        "```\nclosed\n```",
        "    ```\nfour spaces: indented code, not a fence",
        "1. step\n\n   ```\n   code in a list item",  # the list item ends at the heading, and its code with it
        # only an open code fence is closed: a fence appended for an HTML block left open would open a code block
        "```\nclosed\n```\n\n<pre>\nnot closed",
    ],
)
def test_save_markdown_adds_no_fence_where_none_is_open(tmp_path, reply):
    chat, _out = session()
    chat.conversation.messages += [Message("assistant", reply), Message("user", "thanks")]
    chat.command(f"/save {tmp_path / 'c.md'}")
    assert (tmp_path / "c.md").read_text() == f"## assistant\n\n{reply}\n\n## user\n\nthanks\n"


def test_help_wraps_each_description_under_its_own_column_in_80_columns():
    """In an 80-column terminal /help's longer descriptions (/max, /mode, /save, /load) went on at column 0,
    under the commands, so the wrapped words read as a line of their own."""
    chat, _ = session()
    out = io.StringIO()
    chat.console = Console(file=out, width=80, force_terminal=False)
    chat.pipeline = SimpleNamespace(available=lambda _name: True)
    chat.command("/help")
    table = out.getvalue().splitlines()[:-2]  # the last lines: how to type several lines, a paragraph
    assert len(table) > 13, table  # some descriptions wrap at 80 columns
    assert all(line.startswith("/") or line.startswith(" " * 17) for line in table), table


def test_the_chats_template_variables_reach_every_turn_and_keep_its_kv_cache(fake_models, tmp_path):
    """--chat-template-kwargs in the chat: each turn renders with them, the same each turn, so the next turn's
    prompt begins with what the KV cache holds of the turn before (it is not read again)."""
    import fake_backend

    from specchat.models_api import common_prefix
    from specchat.runtime import Options, open_pipeline

    shows = "{% if enable_thinking is defined %}thinking={{ enable_thinking }}\n{% endif %}"
    target, _ = fake_backend.write_pair(tmp_path / "shows", template=shows + fake_backend.TEMPLATE, reply="{history}")
    settings = ChatSettings(mode="target", template_kwargs={"enable_thinking": False})
    with open_pipeline(Options(target_path=target, mode="target"), lambda _m: None) as pipeline:
        chat = ChatSession(pipeline, settings, Console(file=io.StringIO(), width=100), system=None)
        first = chat.ask("Name three colours.")
        assert first.text.startswith("thinking=False\nuser\nName three colours.\n"), first.text
        held = list(pipeline.target_cache.tokens)
        prompts = []
        generate = pipeline.generate
        pipeline.generate = lambda prompt, *args, **kw: prompts.append(prompt) or generate(prompt, *args, **kw)
        second = chat.ask("And two more.")
    assert second.text.startswith("thinking=False\nuser\nName three colours.\n") and "And two more." in second.text
    assert common_prefix(held, prompts[0]) == len(held)  # the whole cache: the first turn is not read again
