"""A model's file on disk: where it goes, and whether it is the file models.toml describes (size, sha256).

Shared by the pull (download.py, hubpull.py and mirror.py check what they fetch), by `models --verify` and by
bench (which records a model's sha256). Apart from the download code, as none of it needs the network.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from .errors import ModelFileError
from .paths import cache_dir, current_file_keys, make_dirs, models_dir, read_json_object, write_atomic
from .registry import ModelSpec

CHUNK = 1 << 20
Advance = Callable[[int], None]


def local_path(model: ModelSpec) -> Path:
    return models_dir() / model.local_name


def sha256_of(path: Path, advance: Advance | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK * 8):
            digest.update(block)
            if advance:
                advance(len(block))
    return digest.hexdigest()


def _size_error(model: ModelSpec, path: Path) -> ModelFileError | None:
    size = path.stat().st_size
    if model.size is None or size == model.size:
        return None
    return ModelFileError(
        f"{path} has {size:,} bytes, expected {model.size:,}{model.declared_in}",
        hint=bad_file_hint(model, "size", f"delete it and run `specchat pull` again (model {model.name})"),
    )


def bad_file_hint(model: ModelSpec, key: str, usual: str) -> str:
    """The user's entry may be what is wrong: a good file deleted and pulled again would fail it again."""
    return (
        f"if the file is right, correct {key} in [models.{model.name}] of {model.overlay}; else {usual}"
        if model.overlay
        else usual
    )


def misfit(model: ModelSpec) -> ModelFileError | None:
    """A file of the wrong size under the model's name in the models directory (a truncated copy, an
    interrupted download): locate() passes it over, so it must not be reported as no file at all."""
    path = local_path(model)
    return _size_error(model, path) if path.is_file() else None


def verify(model: ModelSpec, path: Path, advance: Advance | None = None) -> None:
    """Raise ModelFileError naming the file when its size or sha256 differs from the registry."""
    if (wrong := _size_error(model, path)) is not None:
        raise wrong
    if model.sha256 is not None:
        try:
            actual = sha256_of(path, advance)
        except OSError as exc:  # another user's file, a failing disk: its error, not an internal one
            raise ModelFileError(
                f"cannot read {path}: {exc.strerror or exc}",
                hint=f"check the file's permissions, or delete it and run `specchat pull` again ({model.name})",
            ) from None
        if actual != model.sha256:
            raise ModelFileError(
                f"{path} has sha256 {actual[:16]}..., expected {model.sha256[:16]}...{model.declared_in}",
                hint=bad_file_hint(
                    model,
                    "sha256",
                    f"the file is corrupt or a different build: delete it and run `specchat pull` ({model.name})",
                ),
            )


def cached_sha256(path: Path) -> str:
    """sha256 of a file, remembered per (path, size, mtime) so that repeated benchmarks do not rehash."""
    import json

    stat = path.stat()
    key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    store = cache_dir() / "sha256.json"
    known = read_json_object(store, _is_sha256)  # anything odd in it: hash again and rewrite it
    if key not in known:
        digest = sha256_of(path)
        # What the cache knew of this path before it changed, and of files since deleted (test runs, a
        # model moved away), is of no use any more: without this the file grows with every download.
        known = current_file_keys(known)
        known[key] = digest
        try:
            make_dirs(store.parent)
            write_atomic(store, json.dumps(known))
        except OSError:
            pass  # only a cache: the next run hashes again
    return known[key]


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(ch in "0123456789abcdef" for ch in value)
