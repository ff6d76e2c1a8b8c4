"""The model registry: `models.toml` shipped in the package, plus the user's overlay file.

Models are declared once and pairs refer to them by name, because one small draft serves many targets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import RegistryError, UnknownPairError
from .filechecks import LINK_LOOP, file_problem
from .paths import NotAFolder, blocking_file, dead_link, overlay_file
from .registrychecks import check_keys, plain, read_toml, table, table_value
from .registryentries import ModelSpec, PairSpec, check_local_names, nearest, read_model, read_pair

TOP_KEYS = {"default_pair", "models", "pairs"}


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
        return nearest(name, self.pairs)

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
        name: replace(read_model(name, body, path), overlay=None if path == paths[0] else path)
        for name, (path, body) in raw_models.items()
    }
    origin = {name: path for name, (path, _) in raw_models.items()}
    check_local_names(registry.models, origin, paths[0])
    registry.pairs = {
        name: read_pair(name, body, path, registry.models, origin, paths[0], raw_pairs)
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
