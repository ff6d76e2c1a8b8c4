"""Conversation files: the chat's /save writes them, /load reads the JSON ones back."""

from __future__ import annotations

import json
from pathlib import Path

from .chat import Conversation, Message
from .errors import SpecchatError
from .paths import write_atomic

ROLES = ("system", "user", "assistant")


class TranscriptError(SpecchatError):
    """A file given to /load is not a conversation saved as JSON."""


def save_conversation(conversation: Conversation, path: Path) -> None:
    """JSON for a .json path (loadable), else Markdown (for reading). Written atomically (temporary file
    + rename): an existing file is never left half-written."""
    messages = conversation.as_messages()
    if path.suffix.lower() == ".json":
        data = [{"role": m.role, "content": m.content, "interrupted": m.interrupted} for m in messages]
        body = json.dumps({"messages": data}, ensure_ascii=False, indent=2) + "\n"
    else:
        blocks = []
        for m in messages:
            mark = " (interrupted)" if m.interrupted else ""
            blocks.append(f"## {m.role}{mark}\n\n{_closed(m.content)}\n")
        body = "\n".join(blocks)
    write_atomic(path, body, keep_read_only=True)


def _closed(text: str) -> str:
    """The text with a fenced code block it leaves open closed: a reply cut off (-n, Ctrl-C) inside one
    made every later heading of the file code. A heading put after it shows whether one is open, as
    CommonMark reads it (fences of ~~~ or of more backticks, indented ones, ones that a list item ends)."""
    from markdown_it import MarkdownIt

    last = MarkdownIt("commonmark").parse(f"{text}\n\n## next\n")[-1]
    if last.type != "fence" or last.level != 0:  # the heading came out (or a list item's code block ended)
        return text
    return text + ("" if text.endswith("\n") else "\n") + last.markup


def load_conversation(path: Path) -> Conversation:
    """A conversation saved with /save FILE.json. Raises TranscriptError (or OSError)."""
    if path.exists() and not path.is_file():  # a FIFO would block the chat for good, /dev/zero fill the memory
        raise TranscriptError(f"{path} is not a regular file", hint="/load reads files that /save wrote as .json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError):
        raise TranscriptError(f"{path} is not JSON", hint="/load reads files that /save wrote as .json") from None
    items = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(_valid(item) for item in items):
        raise TranscriptError(f"{path} holds no conversation", hint='expected {"messages": [{"role", "content"}]}')
    conversation = Conversation()
    for item in items:
        if item["role"] == "system":
            conversation.system = item["content"]
        else:
            conversation.messages.append(Message(item["role"], item["content"], bool(item.get("interrupted"))))
    return conversation


def _valid(item) -> bool:
    return isinstance(item, dict) and item.get("role") in ROLES and isinstance(item.get("content"), str)
