"""`specchat bench --history none|FILE`: the history the suffix and auto variants draft from, chosen by
the run.

A bench must not depend on what its user happened to log, so by default (`none`) the suffix drafter
sees only the conversation being measured, and auto has no suffix arm (as `run --no-history`). With a
FILE of past conversations (JSONL), a temporary history index is built from it, the way `run` builds
one from the log (historytokens.message_tokens, the target's tokenizer, the same index code and capacity), in
a temporary folder deleted afterwards. The user's log and history index are never opened, and the
temporary index is frozen: nothing the bench generates is appended, so every repetition drafts from the
same history and no repetition can copy an earlier repetition's reply.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .benchjsonl import check_text, json_line, jsonl_lines, read_jsonl, shown
from .errors import UsageError
from .paths import expand_home

NONE = "none"
ROLES = ("user", "assistant")  # what the log's history indexes too (historylog.new_messages)
SKIPPED = ("system", "developer", "tool", "function")  # OpenAI's other roles; another word is a mistake
SHAPE = '{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}'


@dataclass(frozen=True)
class Past:
    """The conversations of a --history FILE: their user and assistant messages, oldest first."""

    path: Path
    texts: list[str]


def load(value: str, modes: list[str]) -> Past | None:
    """--history, checked before any model is loaded (None: `none`). A bad file is a usage error."""
    if value.strip().lower() == NONE:  # in any case, as the other word options; a file of that name: ./none
        return None
    if not value.strip():  # `--history "$FILE"` with FILE unset: Path("") is ".", "a directory"; blanks, unseen
        raise UsageError("--history is empty", hint="give none or a JSONL FILE (- : stdin), or leave --history out")
    path = expand_home(value)  # as --prompts: a ~ the shell left alone is the home directory
    if "suffix" not in modes and "auto" not in modes:
        raise UsageError(
            f"--history {value}: only the suffix and auto variants draft from a history, and --modes has neither",
            hint="add them, e.g. --modes ngram,suffix,auto",
        )
    text = read_jsonl(path, "history", SHAPE)
    texts = []
    lines = jsonl_lines(text)
    for number, line in enumerate(lines, start=1):
        if line.strip():
            texts += _messages(lines, number - 1, f"{shown(path)}, line {number}")
    if not texts:
        raise UsageError(f"{shown(path)} has no user or assistant messages", hint=f"one conversation per line: {SHAPE}")
    return Past(path, texts)


def _messages(lines: list[str], index: int, where: str) -> list[str]:
    texts = _texts(json_line(lines, index, where, "one conversation per line"), where)
    for text in texts:
        check_text(text, where, "a message")
    return texts


def _texts(record: object, where: str) -> list[str]:
    if isinstance(record, dict) and isinstance(record.get("messages"), list):
        messages = record["messages"]
        bad = next((i for i, m in enumerate(messages, 1) if not _is_message(m)), None)
        if bad is not None:
            raise UsageError(
                f'{where}: "messages" item {bad} is not {{"role": ..., "content": "..."}}',
                hint='every message has a "role" (user, assistant, system) and a string "content"',
            )
        strange = next((i for i, m in enumerate(messages, 1) if m["role"] not in ROLES + SKIPPED), None)
        if strange is not None:  # skipped as a system message is, a misspelt role lost its message unsaid
            raise UsageError(
                f'{where}: "messages" item {strange} has the role {messages[strange - 1]["role"]!r}',
                hint=f"a role is one of {', '.join(ROLES + SKIPPED)} (only user and assistant messages are indexed)",
            )
        return [text for m in messages if m["role"] in ROLES and (text := _text(m["content"]))]
    if isinstance(record, dict) and isinstance(record.get("turns"), list):  # Spec-Bench: the user's turns
        if not all(isinstance(turn, str) for turn in record["turns"]):
            raise UsageError(f'{where}: "turns" must be a list of strings', hint='"turns": ["...", "..."]')
        return [turn for turn in record["turns"] if turn]
    raise UsageError(f'{where}: expected an object with "messages" (or "turns")', hint=SHAPE)


def _is_message(message: object) -> bool:
    """OpenAI's chat format: "content" is a string, null (an assistant turn that only calls tools), or a
    list of parts (the text ones are the message's text)."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str) or "content" not in message:
        return False
    content = message.get("content")
    return content is None or isinstance(content, str) or (isinstance(content, list) and all(map(_is_part, content)))


def _is_part(part: object) -> bool:
    return isinstance(part, dict) and (part.get("type") != "text" or isinstance(part.get("text"), str))


def _text(content: str | list | None) -> str:
    if isinstance(content, list):
        # one line each, as the server reads them (apicheck.message) and llama-server and vLLM join them
        return "\n".join(part["text"] for part in content if part.get("type") == "text")
    return content or ""


class Frozen:
    """The temporary index as drafters/suffix.py sees a history: lookups only. update() is what the
    drafter calls before every reply to take in what the log gained; here nothing may be added."""

    def __init__(self, chains) -> None:
        self.chains = chains

    def update(self) -> None:
        pass


@contextmanager
def attach(pipeline, past: Past | None, notify: Callable[[str], None]) -> Iterator[object]:
    """Give the pipeline a suffix drafter over `past` (None: the measured conversation only) for the
    `with` block; yields what the report's settings record as `history`. The temporary index is gone
    after the block, whatever ends it."""
    if past is None:
        pipeline.add_suffix(None, arm=False)  # auto as `run --no-history`: prompt lookup already copies
        yield NONE
        return
    from .historyindex import DEFAULT_CAPACITY, HistoryIndex
    from .historytokens import fingerprint, message_tokens

    with tempfile.TemporaryDirectory(prefix="specchat-bench-history-", ignore_cleanup_errors=True) as folder:
        tokens = message_tokens(lambda text: pipeline.target.tokenize(text), past.texts)
        index = HistoryIndex(Path(folder) / "index", fingerprint(pipeline.target) or "bench", DEFAULT_CAPACITY)
        index.make_folder()
        with index.lock:
            index.create()
            index.append(tokens, 0)
        n_tokens = len(tokens) - len(past.texts)  # the separators between messages are not text
        kept = f", the newest {DEFAULT_CAPACITY} kept, as run's index would" if len(tokens) > DEFAULT_CAPACITY else ""
        messages = f"{len(past.texts)} message" + ("" if len(past.texts) == 1 else "s")
        counted = f"{n_tokens} token" + ("" if n_tokens == 1 else "s")
        notify(f"suffix drafts from {shown(past.path)} too: {messages}, {counted}{kept}")
        pipeline.add_suffix(Frozen(index.chains))
        try:
            yield {"path": str(past.path), "messages": len(past.texts), "tokens": n_tokens}
        finally:
            # Unmapped before the folder goes (on Windows a mapped file cannot be deleted).
            pipeline.drop_suffix()
            index.chains = None
