"""Reading a registry's TOML file (BOM, UTF-8, syntax and nesting errors placed by line and column) and
checking its values one by one: known keys, types, printable names, safe file names, Hub repo ids and
revisions, each refusal a RegistryError naming the file and the table. Separate from registryentries.py, which
builds the models and pairs from these checked values: how a file can be wrong is one concern, what a
registry holds another.
"""

from __future__ import annotations

import codecs
import tomllib
import unicodedata
from pathlib import Path
from typing import Any

from .errors import RegistryError

# Control, format (U+202E reverses the text after it), private-use, surrogate and line/paragraph
# separator characters: a name holding one prints as something else, or breaks the one-line output. Each is
# named as what it is: a zero-width joiner (U+200D, an emoji sequence's glue) is a format character, not a
# control (as it was called), and is refused all the same, as "m\u200dx" would print as the other name "mx".
UNPRINTABLE = {
    "Cc": "the control character",
    "Cf": "the invisible format character",
    "Co": "the private-use character",
    "Cs": "the lone surrogate",
    "Zl": "the line separator",
    "Zp": "the paragraph separator",
}


def read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RegistryError(f"cannot read {path}: {exc.strerror}", hint="check the file's permissions") from None
    # A byte order mark (Notepad's "UTF-8 with BOM") was "Invalid statement (at line 1, column 1)", a
    # character no editor shows; dropped, line 1's columns are the ones the user sees.
    raw = raw.removeprefix(codecs.BOM_UTF8)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _line_column(raw, exc.start)
        raise RegistryError(
            f"{path}: not valid UTF-8 (at line {line}, column {column})", hint="save the file as UTF-8"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message already carries "(at line L, column C)".
        raise RegistryError(f"{path}: {exc}", hint="fix the TOML syntax at that position") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays or inline tables
        where = _deep_nesting(text)
        at = f" (at line {where[0]}, column {where[1]})" if where else ""
        raise RegistryError(
            f"{path}: arrays or inline tables nested too deeply{at}", hint="a registry needs two levels at most"
        ) from None


def _line_column(data: bytes | str, offset: int) -> tuple[int, int]:
    """1-based line and column of an offset, as tomllib reports them."""
    newline = b"\n" if isinstance(data, bytes) else "\n"
    line_start = data.rfind(newline, 0, offset) + 1
    return data.count(newline, 0, offset) + 1, offset - line_start + 1


def _deep_nesting(text: str, limit: int = 100) -> tuple[int, int] | None:
    """Where brackets outside strings and comments first nest `limit` deep (only to place the error)."""
    depth, pos = 0, 0
    while pos < len(text):
        char = text[pos]
        if char in "\"'":
            quote = text[pos : pos + 3] if text[pos : pos + 3] in ('"""', "'''") else char
            end = text.find(quote, pos + len(quote))
            while quote == '"' and end > 0 and text[end - 1] == "\\":  # an escaped quote
                end = text.find(quote, end + 1)
            pos = len(text) if end < 0 else end + len(quote)
            continue
        if char == "#":
            pos = len(text) if text.find("\n", pos) < 0 else text.find("\n", pos)
            continue
        depth += (char in "[{") - (char in "]}")
        if depth >= limit:
            return _line_column(text, pos)
        pos += 1
    return None


def check_keys(data: dict[str, Any], allowed: set[str], path: Path, where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        hint = f"allowed keys: {', '.join(sorted(allowed))}"
        if "default_pair" in unknown:  # TOML reads a key after [pairs.x] as that table's: it was meant at the top
            hint = "default_pair goes at the top of the file, before any [table]"
        raise RegistryError(f"{path}: unknown key(s) {', '.join(map(_shown, unknown))} in {where}", hint=hint)


def table(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    return table_value(data.get(key, {}), path, key)


def table_value(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RegistryError(f"{path}: [{where}] must be a table", hint="see models.toml in the package")
    return value


KINDS = {str: "a string", int: "an integer", bool: "true or false"}  # as TOML says it, not Python's "a str"


def require(body: dict[str, Any], key: str, kind: type, path: Path, where: str) -> Any:
    if key not in body:
        raise RegistryError(f"{path}: [{where}] lacks '{key}'", hint=f"add {key} = ... to [{where}]")
    return optional(body, key, kind, None, path, where)


def optional(body: dict[str, Any], key: str, kind: type, default: Any, path: Path, where: str) -> Any:
    """body[key] (default when absent) if it is of kind: bool("false") is True, so `verified = "false"`
    was read as true."""
    value = body.get(key, default)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise RegistryError(f"{path}: [{where}] {key} must be {KINDS[kind]}", hint="see models.toml")
    return value


def _shown(text: str) -> str:
    """The text itself when every character prints, else its escaped repr (one line, no tricks)."""
    return text if text.isprintable() else repr(text)


def plain(value: Any, path: Path, where: str, what: str) -> str:
    """A string without control, format or other unprintable characters: names reach file paths and the terminal."""
    if not isinstance(value, str):
        raise RegistryError(f"{path}: {what} in {where} must be a string", hint="see models.toml")
    bad = next((ch for ch in value if unicodedata.category(ch) in UNPRINTABLE), None)
    if bad is not None:
        kind = UNPRINTABLE[unicodedata.category(bad)]
        raise RegistryError(
            f"{path}: {what} {value!r} in {where} contains {kind} U+{ord(bad):04X}",
            hint="use printable characters only",
        )
    return value


def valid_revision(value: Any, path: Path, where: str) -> str:
    """A branch, tag or commit: an empty one would be sent to the Hub as is."""
    revision = plain(value, path, f"[{where}]", "revision")
    if not revision.strip():
        raise RegistryError(f"{path}: [{where}] revision is empty", hint="remove it, or give a branch, tag or commit")
    return revision


def safe_file_name(file: str, path: Path, where: str) -> str:
    """Refuse names that could escape the models directory once reduced to their last component."""
    plain(file, path, f"[{where}]", "file")
    base = file.rsplit("/", 1)[-1]
    parts = file.split("/")
    if (
        not base
        or "\\" in file
        or file.startswith("/")
        or (len(parts) > 1 and _home_or_drive(parts[0]))
        or any(part in ("", ".", "..") for part in parts)
        or not base.endswith(".gguf")
        or base == ".gguf"
    ):
        raise RegistryError(
            f"{path}: [{where}] file '{file}' is not a safe GGUF file name",
            hint="give the file's name in the Hub repo, ending in .gguf, without '..', '\\', a leading '/', '~' or "
            "drive ('C:') "
            "(a file you already have: put it into the models directory under that name, or run it with "
            "--target/--draft PATH)",
        )
    return file


def _home_or_drive(folder: str) -> bool:
    """A path on this machine's disk ('~/models', '~me', 'C:'), not a Hub repo's folder: pull asked the Hub for it."""
    return folder.startswith("~") or (
        len(folder) == 2 and folder[0].isascii() and folder[0].isalpha() and folder[1] == ":"
    )


def repo_id(value: Any, path: Path, where: str, what: str) -> str:
    """A Hub repo id ('owner/name'), checked as huggingface-hub checks it: '' or 'a b/c' failed only at pull."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    repo = plain(value, path, f"[{where}]", what)
    try:
        validate_repo_id(repo)
    except HFValidationError:
        raise RegistryError(
            f"{path}: [{where}] {what} {_shown(repo)!r} is not a Hugging Face repo id",
            hint="e.g. 'Qwen/Qwen2.5-7B-GGUF'",
        ) from None
    return repo
