"""Benchmark prompts: the built-in suites shipped in the package, or a user's JSONL file.

The file format is Spec-Bench's: one JSON object per line with "category" and "turns" (a list of user
messages: the bench replays every turn, see benchturns.py), and optionally "question_id". A record without
"category" is in DEFAULT_CATEGORY. Reading the file (its size, stdin, each line's JSON) is benchjsonl.py's.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from .benchjsonl import (
    STRINGS_TO_JSONL,
    TEXT_TO_JSONL,
    check_text,
    conversion,
    json_line,
    jsonl_lines,
    read_jsonl,
    shown,
    unshown,
)
from .errors import UsageError

CATEGORIES = ("code", "code-edit", "structured", "chat", "summarize", "revision")
SUITES = {
    "default": "all 20 prompts: code (5), code-edit (3), structured, chat, summarize (3 each), revision (3, two turns)",
    "quick": "the first prompt of each category (6 prompts)",
    "tiny": "one short code prompt and one short chat prompt (for smoke tests)",
    **{name: f"the {name} prompts" for name in CATEGORIES},
}
TINY = [
    {"question_id": "tiny-1", "category": "code", "turns": ["Write a Python function that returns the square of x."]},
    {"question_id": "tiny-2", "category": "chat", "turns": ["Name three colours."]},
]


EXAMPLE = '{"category": "chat", "turns": ["Name three colours."]}'  # one line of a --prompts file
KEYS = ("question_id", "category", "turns")  # what a record's keys are read as
DEFAULT_CATEGORY = "prompts"  # a record's without one: the category only names the report's rows
TURNS = ("all", "first")  # --turns: replay every turn, or only the first (the bench before multi-turn)


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    text: str  # the first turn: what single-turn users (tune, the benchmark scripts) send
    turns: tuple[str, ...] = ()  # every user message, the first included; () means (text,)

    def __post_init__(self) -> None:
        if not self.turns:
            object.__setattr__(self, "turns", (self.text,))


def select_turns(prompts: list[Prompt], which: str) -> list[Prompt]:
    """--turns: "all" keeps every turn; "first" keeps only the first, as the bench did before."""
    if which not in TURNS:
        raise UsageError(f"unknown --turns '{which}'", hint="all (every turn of a record) or first")
    return prompts if which == "all" else [replace(p, turns=p.turns[:1]) for p in prompts]


def single_turn(prompts: list[Prompt]) -> list[Prompt]:
    """The prompts that have one turn (tune measures single replies and stays comparable with before)."""
    return [p for p in prompts if len(p.turns) == 1]


def check_suite(name: str) -> None:
    if name not in SUITES:
        raise UsageError(f"unknown suite '{name}'", hint=f"choose one of: {', '.join(SUITES)}, or --prompts FILE")


def load_suite(name: str) -> list[Prompt]:
    check_suite(name)
    if name == "tiny":
        return [_prompt(record, "tiny", i) for i, record in enumerate(TINY, start=1)]
    source = resources.files("specchat").joinpath("suites/default.jsonl")
    prompts = _parse(source.read_text(encoding="utf-8"), "built-in suite")
    if name == "quick":
        seen: set[str] = set()
        return [p for p in prompts if not (p.category in seen or seen.add(p.category))]
    return prompts if name == "default" else [p for p in prompts if p.category == name]


def _converted(source: str) -> str:
    """How to turn a text file of prompts (one a line) into a --prompts file (`source`: the file as shown)."""
    return conversion(unshown(source), TEXT_TO_JSONL, "prompts")


def load_prompts_file(path: Path) -> list[Prompt]:
    text = read_jsonl(path, "prompts", "prompt")
    prompts = _parse(text, shown(path))
    if not prompts:
        raise UsageError(
            f"{shown(path)} has no prompts", hint='one JSON object per line: {"category": ..., "turns": [...]}'
        )
    return prompts


def _parse(text: str, source: str) -> list[Prompt]:
    prompts = []
    lines: dict[str, int] = {}  # question_id -> its line: samples are paired by it, so it must be unique
    every = jsonl_lines(text)
    for number, line in enumerate(every, start=1):
        if not line.strip():
            continue
        hint = f"one JSON object per line, e.g. {EXAMPLE}"
        if not line.lstrip().startswith(("{", "[")):  # a text file of prompts, a CSV: say how to convert it
            hint += f"; plain text, one prompt per line, becomes that with {_converted(source)}"
        record = json_line(every, number - 1, f"{source}, line {number}", hint)
        prompt = _prompt(record, source, number)
        if prompt.id in lines:
            raise UsageError(
                f"{source}, line {number}: question_id '{prompt.id}' is line {lines[prompt.id]}'s too",
                hint="give every record its own question_id (or none: its line number is used)",
            )
        lines[prompt.id] = number
        prompts.append(prompt)
    return prompts


# Other benchmarks' records, by the key that holds their prompt: what they are, and jq's "turns" of one.
OTHER_FORMATS = {
    # The user messages themselves: a content of text parts is read as their text ("turns" as messages)
    "messages": ("an OpenAI chat record", '[.messages[] | select(.role == "user") | {role, content}]'),
    "conversations": ("a ShareGPT record", '[.conversations[] | select(.from == "human" or .from == "user") | .value]'),
    # Its "turn" (a count) read as a misspelt "turns", and a hint to rename it led to another error
    "conversation": ("an LMSYS-Chat-1M or WildChat record", '[.conversation[] | select(.role == "user") | .content]'),
    "instruction": (
        "an Alpaca record",
        # Dolly's "context" is Alpaca's "input": the passage a closed_qa or summarization record asks about
        '[[.instruction, .input, .context] | map(select(. != null and . != "")) | join("\\n\\n")]',
    ),
    "prompt": ("a {\"prompt\"} record (HumanEval's and others')", "[.prompt]"),
    "question": ("a {\"question\"} record (GSM8K's and others')", "[.question]"),
}


def _other_format(record: dict, where: str, source: str) -> UsageError | None:
    """A record of another benchmark's format (no "turns"): what it is, and the jq line that converts the file,
    keeping its category and its id where it has them (samples are paired by question_id)."""
    key = next((key for key in OTHER_FORMATS if key in record), None)
    if key is None or "turns" in record:
        return None
    name, turns = OTHER_FORMATS[key]
    if key == "prompt" and isinstance(record[key], list):  # HuggingFaceH4/mt_bench_prompts: the turns
        turns = ".prompt"
    given = next((k for k in ("question_id", "task_id", "prompt_id", "conversation_id") if k in record), None)
    ident = "question_id" + ("" if given == "question_id" else f": .{given}")
    keys = ["category"] * ("category" in record) + [ident] * (given is not None)
    jq = f"jq -c '{{{', '.join([*keys, f'turns: {turns}'])}}}'"
    messages = record[key] if key == "messages" and isinstance(record[key], list) else []
    system = any(isinstance(m, dict) and m.get("role") == "system" for m in messages)  # the bench sends none
    dropped = " (its system messages left out)" if system else ""
    command = conversion(unshown(source), jq, "prompts")
    return UsageError(
        f'{where}: {name}, not Spec-Bench\'s {{"category", "turns"}}', hint=f"convert the file{dropped}: {command}"
    )


def _wrapped(record: dict, where: str, source: str) -> UsageError | None:
    """One object holding the records in a list (`{"questions": [...]}`, as JSON exports write them): its missing
    "turns" were refused as '"turns" must be a list ...', of a file whose records have good turns."""
    if "turns" in record:
        return None
    key = next((k for k, v in record.items() if isinstance(v, list) and v and isinstance(v[0], dict)), None)
    if key is None or "turns" not in record[key][0]:
        return None
    path = f".{key}" if key.isascii() and key.isidentifier() else f".{json.dumps(key)}"  # jq's own spellings
    command = conversion(unshown(source), f"jq -c {shlex.quote(path + '[]')}", "prompts")
    return UsageError(
        f"{where}: one object holding the records in {json.dumps(key)}, not one record a line",
        hint=f"JSONL has one record a line: {command}",
    )


def _key_form(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "").replace(" ", "").removesuffix("s")


def _check_spelling(record: dict, where: str) -> None:
    """A key spelled otherwise than Spec-Bench's ("Category", "turn", "questionId"): read as absent, it
    put every prompt into one row called "prompts", or refused the turns with no word of why."""
    for key in record:
        near = next((k for k in KEYS if k not in record and _key_form(str(key)) == _key_form(k)), None)
        if near is not None:
            raise UsageError(f'{where}: "{key}" is not a key Spec-Bench\'s records have', hint=f'spell it "{near}"')


READ = (
    'the bench reads Spec-Bench\'s {"category", "turns"} (MT-Bench\'s and Arena-Hard\'s too), and names OpenAI chat, '
    'ShareGPT, LMSYS-Chat-1M, Alpaca, {"prompt"} (HumanEval) and {"question"} (GSM8K) records with a jq line '
    "that converts them"
)


def _check_turns_given(record: dict, where: str) -> None:
    """A record of no format the bench knows (MBPP's {"text"}, an OpenAI batch request) was '"turns" must be a
    list starting with a non-empty string': of a record with no "turns", and no word of what is read."""
    if "turns" not in record:
        keys = ", ".join(str(key)[:30] for key in list(record)[:8]) + (", ..." if len(record) > 8 else "")
        raise UsageError(f'{where}: no "turns" (its keys: {keys or "none"})', hint=READ)


def _content(turn: object) -> object:
    """A turn written as {"content": "..."} (Arena-Hard), or a user message, is its text; anything else is left to
    be refused: an OpenAI message list as turns would make system and assistant messages user turns. A content
    of text parts (OpenAI's newer form, which the jq line for a file of "messages" keeps) is its parts' text,
    one per line, as `serve` reads it; an image or audio part is refused with the turn: no text model reads it."""
    if not isinstance(turn, dict) or not set(turn) <= {"content", "role"}:
        return turn
    content = turn.get("content")
    if isinstance(content, list) and content and all(_is_text_part(part) for part in content):
        content = "\n".join(part["text"] for part in content)
    if isinstance(content, str):
        return content if turn.get("role", "user") == "user" else turn
    return turn


# Why a message of another role than the user's is no turn (a first one was "must be a list starting with a
# non-empty string", though a user message is read there).
NOT_A_TURN = {
    "system": "the bench sends no system prompt",
    "developer": "the bench sends no system prompt (a developer message is one)",
    "assistant": "the bench writes the replies itself (the target's own)",
    "tool": "the bench calls no tools",
}


def _check_parts(turns: list, where: str) -> None:
    """A turn with an image or audio part, or a system or assistant message, was refused as "not a non-empty
    string", with a hint of the shape it nearly had: it is named for what it holds."""
    for index, turn in enumerate(turns, start=1):
        role = turn.get("role") if isinstance(turn, dict) else None
        if role in NOT_A_TURN:
            article = "an" if role == "assistant" else "a"
            raise UsageError(
                f'{where}: "turns" item {index} is {article} {role} message; the turns are the user\'s messages',
                hint=f"leave it out: {NOT_A_TURN[role]}",
            )
        content = turn.get("content") if isinstance(turn, dict) else None
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") != "text" for p in content):
            kind = next(p.get("type") for p in content if isinstance(p, dict) and p.get("type") != "text")
            raise UsageError(
                f'{where}: "turns" item {index} has a {json.dumps(kind)} content part; the bench sends text only',
                hint="leave that record out, or keep only its text parts",
            )


def _is_text_part(part: object) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


def _prompt(record: object, source: str, number: int) -> Prompt:
    where = f"{source}, line {number}"
    if isinstance(record, str):  # a prompt a line, as JSON strings: say how to make records of them
        command = conversion(unshown(source), STRINGS_TO_JSONL, "prompts")
        raise UsageError(f"{where}: a JSON string, not a record", hint=f"make a record of each prompt: {command}")
    if not isinstance(record, dict):
        raise UsageError(f"{where}: expected a JSON object", hint='{"category": "chat", "turns": ["..."]}')
    other = _other_format(record, where, source) or _wrapped(record, where, source)
    if other is not None:  # "turns" must be a list... led nowhere: a user has the file another benchmark wrote
        raise other
    _check_spelling(record, where)
    _check_turns_given(record, where)
    category, turns = record.get("category"), record.get("turns")
    if isinstance(turns, list):  # Arena-Hard writes each turn as {"content": "..."}: its text is the turn
        _check_parts(turns, where)
        turns = [_content(turn) for turn in turns]
    if category is None:  # absent or null, as question_id: a file of turns alone was refused line by line
        category = DEFAULT_CATEGORY
    if not isinstance(category, str) or not category.strip():  # "missing" of one that is there misled
        shown_value = json.dumps(category, ensure_ascii=False)[:40]
        raise UsageError(f'{where}: "category" must be a non-empty string, not {shown_value}', hint='e.g. "chat"')
    if category.strip() == "all":  # the report's row of every category: two "all" rows, one of them pooled
        raise UsageError(f'{where}: "category" all is the report\'s row of every category', hint="name it otherwise")
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0].strip():
        raise UsageError(f'{where}: "turns" must be a list starting with a non-empty string', hint='"turns": ["..."]')
    bad = next((i for i, turn in enumerate(turns, start=1) if not isinstance(turn, str) or not turn.strip()), None)
    if bad is not None:
        raise UsageError(
            f'{where}: "turns" item {bad} is not a non-empty string',
            hint='every turn is a user message: "turns": ["first message", "a follow-up"]',
        )
    given = record.get("question_id")
    if isinstance(given, dict | list | bool) or (isinstance(given, str) and not given.strip()):
        hint = 'e.g. "question_id": 81'
        raise UsageError(f'{where}: "question_id" must be a number or a non-empty string', hint=hint)
    check_text(category, where, '"category"')
    for index, turn in enumerate(turns, start=1):
        check_text(turn, where, f'"turns" item {index}')
    if isinstance(given, str):
        check_text(given, where, '"question_id"')
    qid = number if given is None else given  # null as absent: the line number, not "None"
    return Prompt(str(qid), category.strip(), turns[0], tuple(turns))
