"""Slash commands and /save of the interactive chat (pure logic: no generation needed)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from rich.console import Console

from specchat.chat import Message
from specchat.repl import ChatSession, ChatSettings, save_conversation


def session(drafter=True) -> tuple[ChatSession, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=False)
    available = {"target", "ngram", "auto"} | ({"spec"} if drafter else set())
    pipeline = SimpleNamespace(available=available.__contains__)
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
    assert "usage: /mode auto|spec|ngram|target" in out.getvalue()


def test_unknown_command_hint_and_bye():
    chat, out = session()
    assert chat.command("/frobnicate")
    assert "unknown command /frobnicate: /help" in out.getvalue()
    assert chat.command("/bye") is False


def test_system_and_reset():
    chat, _ = session()
    chat.conversation.messages.append(Message("user", "hi"))
    chat.command("/system Be terse.")
    chat.command("/reset")
    assert chat.conversation.messages == [] and chat.conversation.system == "Be terse."
    assert chat.conversation.as_messages()[0] == Message("system", "Be terse.")


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


def test_save_error_is_one_line_and_keeps_old_file(tmp_path):
    chat, out = session()
    chat.command(f"/save {tmp_path / 'missing-dir' / 'c.md'}")
    assert "could not save" in out.getvalue()
    target = tmp_path / "keep.json"
    target.write_text("old")
    save_conversation(chat.conversation, target)
    assert json.loads(target.read_text()) == {"messages": []}


def test_chat_survives_a_full_context(monkeypatch):
    """An error in one turn (here: the conversation outgrew the context) is reported; the chat goes on."""
    from specchat import repl
    from specchat.errors import ContextFullError

    chat, out = session()
    lines = iter(["hello", "/bye"])
    monkeypatch.setattr(repl, "read_message", lambda _console: next(lines))

    def full(_text):
        chat.conversation.messages.append(Message("user", "hello"))
        raise ContextFullError("the prompt has 300 tokens but the context holds 256", hint="raise --ctx")

    monkeypatch.setattr(chat, "ask", full)
    assert repl.chat_loop(chat) == 0
    text = out.getvalue()
    assert "error: the prompt has 300 tokens" in text and "/reset" in text
    assert chat.conversation.messages == []  # the unanswered message was dropped


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
    assert text.count("legend:") == 1 and text.count("── ") == 2 and "spec k=4" in text
    chat.command("/stats")
    assert f"session: {chat.totals.generated} tokens in {chat.totals.rounds} rounds" in out.getvalue()
    assert "pos  1" in out.getvalue()


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


def test_chat_loop_reads_runs_and_leaves(live_chat, monkeypatch):
    from specchat import repl

    chat, out = live_chat
    script = iter(["", "Hi.", KeyboardInterrupt, UnicodeDecodeError("utf-8", b"", 0, 1, "bad"), "/help", "/bye"])

    def read(_console):
        item = next(script)
        if isinstance(item, str):
            return item
        raise item if isinstance(item, BaseException) else item()

    monkeypatch.setattr(repl, "read_message", read)
    assert repl.chat_loop(chat) == 0
    text = out.getvalue()
    assert "Ctrl-C at the prompt does not leave" in text and "not valid UTF-8" in text and "/save FILE" in text
    assert len(chat.conversation.messages) == 2
    monkeypatch.setattr(repl, "read_message", lambda _console: (_ for _ in ()).throw(EOFError))
    assert repl.chat_loop(chat) == 0


class ScriptedConsole:
    is_terminal = False

    def __init__(self, lines):
        self.lines = iter(lines)

    def input(self, _prompt):
        return next(self.lines)


def test_read_message_joins_continued_and_quoted_lines():
    from specchat.repl import read_message

    assert read_message(ScriptedConsole(["one \\", "two"])) == "one \ntwo"
    assert read_message(ScriptedConsole(['"""', "a", "", "b", '"""'])) == "a\n\nb"
    assert read_message(ScriptedConsole(["plain"])) == "plain"


def test_the_prompt_is_readlines_own_with_its_colours_marked(monkeypatch):
    """readline redraws its line (after a resize, say): it must know the prompt, and not count its
    colour codes as columns."""
    import builtins
    import io

    from rich.console import Console

    from specchat.repl import read_message

    pytest.importorskip("readline")
    prompts = []
    monkeypatch.setattr(builtins, "input", lambda prompt="": prompts.append(prompt) or "hi")
    console = Console(file=io.StringIO(), force_terminal=True, color_system="standard")
    assert read_message(console) == "hi"
    assert prompts == ["\x01\x1b[1;36m\x02you › \x01\x1b[0m\x02"]
    assert console.file.getvalue() == ""  # printed by readline, not before it


def test_history_is_read_and_written(tmp_path, monkeypatch):
    import atexit

    from specchat import repl

    registered = []
    monkeypatch.setattr(atexit, "register", registered.append)
    path = tmp_path / "state" / "history"
    repl.setup_history(path)
    assert path.parent.is_dir() and len(registered) == 1
    registered[0]()
    assert path.exists()
