"""The bench's JSONL files (`--prompts`, `--history`) read as text: bounded in size, from stdin for `-`, each
line parsed with an error that names the line and says why, and the jq line that makes such a file of another
shape (a JSON array, a text file, the conversation log). What a line holds is benchsuite.py's and
benchhistory.py's to read.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

from .errors import UsageError
from .view import note, stderr_console

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

MAX_JSONL_BYTES = 256 << 20  # a --prompts or --history file; 10M tokens of history are about 40 MiB of text
# `--prompts -`, `--history -`: the file is read from stdin, as `-` means for cat and most tools. A file named
# `-` is given by its full path (Typer makes `./-` a Path equal to this one).
STDIN = Path("-")


def is_stdin(path: Path | str) -> bool:
    return Path(path) == STDIN


def shown(path: Path) -> str:
    """The file's name in messages: stdin for `-` ("-, line 3" reads as a typo); a file that is called stdin
    is ./stdin, so that neither a reader nor unshown() takes it for the pipe."""
    if is_stdin(path):
        return "stdin"
    return "./stdin" if str(path) == "stdin" else str(path)


def unshown(source: str) -> Path:
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


def _jq(path: Path, kind: str, text: str) -> str:
    """How to turn a JSON array into JSONL: an array of prompts (strings) into records, as `jq -c '.[]'` alone
    made a line of each string, refused in turn as "expected a JSON object"."""
    if not text.lstrip()[1:].lstrip().startswith('"'):
        return conversion(path, "jq -c '.[]'", kind)
    return conversion(path, ARRAY_TO_JSONL if kind == "prompts" else HISTORY_ARRAY_TO_JSONL, kind)


def conversion(path: Path, command: str, kind: str) -> str:
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
