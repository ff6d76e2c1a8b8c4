"""Benchmark prompts: the built-in suites shipped in the package, or a user's JSONL file.

The file format is Spec-Bench's: one JSON object per line with "category" and "turns" (a list of user
messages: the bench replays every turn, see benchturns.py), and optionally "question_id". A record without
"category" is in DEFAULT_CATEGORY.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from .errors import UsageError
from .view import note, stderr_console

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
# The bench never reads the log itself (docs/bench.md): how to make a file of its latest replies, per option.
LOG_TO_JSONL = {
    "history": """{messages: [{role: "user", content: .prompt}, {role: "assistant", content: .reply}]}""",
    "prompts": """{category: "chat", turns: [.prompt]}""",
}
TEXT_TO_JSONL = """jq -R -c 'select(length > 0) | {category: "chat", turns: [.]}'"""
STRINGS_TO_JSONL = """jq -c '{category: "chat", turns: [.]}'"""  # JSON strings, one a line: each is a prompt
# A JSON array of such strings (records among them kept as they are); a history takes a string as a user's turn
ARRAY_TO_JSONL = """jq -c '.[] | if type == "string" then {category: "chat", turns: [.]} else . end'"""
HISTORY_ARRAY_TO_JSONL = """jq -c '.[] | if type == "string" then {turns: [.]} else . end'"""
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


def load_suite(name: str) -> list[Prompt]:
    if name not in SUITES:
        raise UsageError(f"unknown suite '{name}'", hint=f"choose one of: {', '.join(SUITES)}, or --prompts FILE")
    if name == "tiny":
        return [_prompt(record, "tiny", i) for i, record in enumerate(TINY, start=1)]
    source = resources.files("specchat").joinpath("suites/default.jsonl")
    prompts = _parse(source.read_text(encoding="utf-8"), "built-in suite")
    if name == "quick":
        seen: set[str] = set()
        return [p for p in prompts if not (p.category in seen or seen.add(p.category))]
    return prompts if name == "default" else [p for p in prompts if p.category == name]


MAX_JSONL_BYTES = 256 << 20  # a --prompts or --history file; 10M tokens of history are about 40 MiB of text
# `--prompts -`, `--history -`: the file is read from stdin, as `-` means for cat and most tools. A file named
# `-` is given by its full path (Typer makes `./-` a Path equal to this one).
STDIN = Path("-")


def is_stdin(path: Path | str) -> bool:
    return Path(path) == STDIN


def shown(path: Path) -> str:
    """The file's name in messages: stdin for `-` ("-, line 3" reads as a typo); a file that is called stdin
    is ./stdin, so that neither a reader nor _unshown() takes it for the pipe."""
    if is_stdin(path):
        return "stdin"
    return "./stdin" if str(path) == "stdin" else str(path)


def _unshown(source: str) -> Path:
    """The file a message's source (shown()) names, for a command line that reads it: `-` for stdin."""
    return STDIN if source == "stdin" else Path(source)


def read_jsonl(path: Path, kind: str, shape: str) -> str:
    """The text of a --prompts or --history file (or stdin), or one usage error saying why it cannot be read."""
    again = f"give a JSONL file, one {shape} per line"
    what = f"stdin (--{kind} -)" if is_stdin(path) else f"{kind} file {path}"
    try:
        data = _read_bounded(path, kind)
        if len(data) > MAX_JSONL_BYTES:
            raise UsageError(f"{what} is over {MAX_JSONL_BYTES >> 20} MiB", hint=f"{again}, in a smaller file")
        if data.startswith(b"\x1f\x8b"):  # Spec-Bench and MT-Bench files are passed around compressed
            raise UsageError(f"{what} is gzip-compressed", hint=f"decompress it first (gunzip); {again}")
        if data.startswith(b"SQLite format 3\x00"):  # the conversation log, taken for "the history": "not UTF-8"
            raise UsageError(
                f"{what} is a SQLite database (the conversation log?), not JSONL",
                hint=f"the bench does not read the log; a --{kind} file of its latest 1000 replies: specchat logs "
                f"--json -n 1000 | jq -c '.[] | {LOG_TO_JSONL[kind]}' > {kind}.jsonl",
            )
        text = data.decode("utf-8-sig")  # a BOM: Windows editors write one
        if text.lstrip().startswith("["):  # no line of either file is an array: the whole file is one
            raise UsageError(f"{what} is a JSON array, not JSONL", hint=f"{again}, e.g. {_jq(path, kind, text)}")
        return text
    except FileNotFoundError:
        raise UsageError(f"{kind} file not found: {path}", hint=again) from None
    except IsADirectoryError:
        raise UsageError(f"{what} is a directory", hint=again) from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise UsageError(f"{what} is not UTF-8 (line {line}, byte {exc.start})", hint="save it as UTF-8") from None
    except OSError as exc:
        raise UsageError(
            f"cannot read {shown(path)}: {exc.strerror or exc}", hint="check the path and its permissions"
        ) from None


def _read_bounded(path: Path, kind: str) -> bytes:
    """At most one byte more than MAX_JSONL_BYTES: /dev/zero or an endless pipe was read until memory ran out."""
    if not is_stdin(path):
        with path.open("rb") as handle:
            return handle.read(MAX_JSONL_BYTES + 1)
    if sys.stdin is None:  # closed (`<&-`): Python has no stdin at all
        raise UsageError(f"--{kind} - reads stdin, which is closed", hint=f"e.g. specchat bench --{kind} - < FILE")
    if sys.stdin.isatty():  # typed on a terminal, it waited as cat does, without a word: it looked hung
        note(stderr_console(), f"reading --{kind} from standard input, one JSON object a line; end it with Ctrl-D")
    return sys.stdin.buffer.read(MAX_JSONL_BYTES + 1)


def _converted(source: str) -> str:
    """How to turn a text file of prompts (one a line) into a --prompts file (`source`: the file as shown)."""
    return _conversion(_unshown(source), TEXT_TO_JSONL, "prompts")


def _jq(path: Path, kind: str, text: str) -> str:
    """How to turn a JSON array into JSONL: an array of prompts (strings) into records, as `jq -c '.[]'` alone
    made a line of each string, refused in turn as "expected a JSON object"."""
    if not text.lstrip()[1:].lstrip().startswith('"'):
        return _conversion(path, "jq -c '.[]'", kind)
    return _conversion(path, ARRAY_TO_JSONL if kind == "prompts" else HISTORY_ARRAY_TO_JSONL, kind)


def _conversion(path: Path, command: str, kind: str) -> str:
    """`command` reading the file into a JSONL file beside it, never written onto the file it reads; or stdin."""
    if is_stdin(path):
        return f"... | {command} | specchat bench --{kind} -"
    out = path.with_name(path.stem + (".jsonl" if path.suffix != ".jsonl" else "-lines.jsonl"))
    return f"{command} {shlex.quote(str(path))} > {shlex.quote(str(out))}"  # a folder with a blank: pasted as is


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL file: split at "\n" alone. str.splitlines() also splits at U+2028, U+2029 and
    U+0085, which JSON strings may hold raw (json.dumps(ensure_ascii=False) writes them so): a prompt that
    quoted such text was "not valid JSON". A "\r" left by CRLF is JSON whitespace; a BOM that starts a line is
    a second file's, concatenated (`cat a.jsonl b.jsonl`), and no part of the line."""
    return [line.removeprefix("\ufeff") for line in text.split("\n")]


def json_line(lines: list[str], index: int, where: str, hint: str) -> object:
    """lines[index] of a JSONL file, parsed, or a usage error naming it (where: "FILE, line N")."""
    try:
        return json.loads(lines[index])
    except json.JSONDecodeError as exc:
        last = _spread(lines, index)
        if last is not None:  # `jq '.[]'` without -c, or written by hand: "not valid JSON" did not say why
            raise UsageError(
                f"{where}: a JSON object spread over lines {index + 1}-{last + 1}",
                hint="JSONL holds each object on one line: jq -c . FILE writes them so",
            ) from None
        if exc.msg == "Extra data":  # json's words for "more after the value": they named neither what nor where
            _more_after(lines[index], exc, where, hint)
        raise UsageError(f"{where}: not valid JSON ({exc.msg})", hint=hint) from None
    except RecursionError:  # [[[...]]] thousands deep: json's own limit, which was an "internal error"
        raise UsageError(f"{where}: nested too deeply to read", hint=hint) from None


def _more_after(line: str, exc: json.JSONDecodeError, where: str, hint: str) -> None:
    """The usage error for a line with more after its JSON value: a comma (a JSON array's lines without its
    brackets), a comment, a second object."""
    rest = line[exc.pos :].strip()
    if rest == ",":
        raise UsageError(
            f"{where}: a comma after the JSON value",
            hint="JSONL separates its objects by line breaks alone: delete the comma at the end of each line",
        )
    more = f"more after the JSON value, at column {exc.colno}: {rest[:30]!r}"
    raise UsageError(f"{where}: not valid JSON ({more})", hint=hint)


def _spread(lines: list[str], index: int) -> int | None:
    """The index of the line where a JSON value that starts at lines[index] ends, where it is a later one."""
    rest = "\n".join(lines[index:])
    start = len(rest) - len(rest.lstrip())
    try:
        _, end = json.JSONDecoder().raw_decode(rest, start)
    except (json.JSONDecodeError, RecursionError):
        return None
    last = index + rest.count("\n", 0, end)
    return last if last > index else None


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(text: str, where: str, what: str) -> None:
    """A usage error if text holds an escaped lone surrogate ("\\ud800"): valid JSON, but no character, and
    it failed as an internal error once tokenized (UTF-8 cannot encode it). An escaped pair is one character."""
    found = _SURROGATE.search(text)  # a regular expression: a history file of megabytes is read in C
    if found is not None:
        half = ord(found.group())
        raise UsageError(
            f"{where}: {what} holds half of a UTF-16 surrogate pair (\\u{half:04x}), which is no character",
            hint="write the character itself, or the escapes of both halves (e.g. \\ud83d\\ude00)",
        )


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
    "instruction": (
        "an Alpaca record",
        '[[.instruction, .input] | map(select(. != null and . != "")) | join("\\n\\n")]',
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
    given = next((k for k in ("question_id", "task_id", "prompt_id") if k in record), None)
    ident = "question_id" + ("" if given == "question_id" else f": .{given}")
    keys = ["category"] * ("category" in record) + [ident] * (given is not None)
    jq = f"jq -c '{{{', '.join([*keys, f'turns: {turns}'])}}}'"
    messages = record[key] if key == "messages" and isinstance(record[key], list) else []
    system = any(isinstance(m, dict) and m.get("role") == "system" for m in messages)  # the bench sends none
    dropped = " (its system messages left out)" if system else ""
    command = _conversion(_unshown(source), jq, "prompts")
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
    command = _conversion(_unshown(source), f"jq -c {shlex.quote(path + '[]')}", "prompts")
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
        command = _conversion(_unshown(source), STRINGS_TO_JSONL, "prompts")
        raise UsageError(f"{where}: a JSON string, not a record", hint=f"make a record of each prompt: {command}")
    if not isinstance(record, dict):
        raise UsageError(f"{where}: expected a JSON object", hint='{"category": "chat", "turns": ["..."]}')
    other = _other_format(record, where, source) or _wrapped(record, where, source)
    if other is not None:  # "turns" must be a list... led nowhere: a user has the file another benchmark wrote
        raise other
    _check_spelling(record, where)
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
