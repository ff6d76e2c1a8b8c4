"""Slash commands and /save of the interactive chat (pure logic: no generation needed)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from rich.console import Console

from specchat.chat import Message
from specchat.repl import ChatSession, ChatSettings, save_conversation


def session(drafter=True) -> tuple[ChatSession, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=False)
    model = object() if drafter else None
    drafters = {"spec": model, "ngram": object(), "auto": object()}
    pipeline = SimpleNamespace(drafter=model, drafter_for=drafters.get)
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
