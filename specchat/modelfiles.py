"""A model's file on disk: where it goes, and whether it is the file models.toml describes (size, sha256).

Shared by the pull (download.py, hubpull.py and mirror.py check what they fetch), by `models --verify` and by
bench (which records a model's sha256). Apart from the download code, as none of it needs the network.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from .errors import ModelFileError, SpecchatError
from .filecache import current_file_keys, read_json_object
from .paths import cache_dir, make_dirs, models_dir, write_atomic
from .registryentries import ModelSpec

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
        hint=bad_file_hint(model, "size", f"delete it and run {pull_command(model)} again"),
    )


def pull_command(model: ModelSpec) -> str:
    """The pull that fetches this model's file again: `specchat pull` alone pulls the default pair, which a
    hint for a file of another pair sent people to (the damaged file stayed). A draft that several pairs
    share: the default pair if it is one of them, else the first by name."""
    from .registry import load_registry

    try:
        registry = load_registry()
    except SpecchatError:  # a broken overlay is said by the command that reads it
        return "`specchat pull`"
    pairs = registry.holding(model.name)
    if not pairs or registry.default_pair in pairs:
        return "`specchat pull`"
    return f"`specchat pull {pairs[0]}`"


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


def verify(model: ModelSpec, path: Path, hashing: Callable[[], Advance | None] = lambda: None) -> None:
    """Raise ModelFileError naming the file when its size or sha256 differs from the registry; hashing() gives
    the progress of the read, called only once the size is right (no bar for a file that is not read). It
    always reads the file (a Hub download, `models --verify`), and remembers what it read: the next `pull`
    finds the sha256 known (verify_remembered) instead of reading gigabytes again."""
    if (wrong := _size_error(model, path)) is not None:
        raise wrong
    if model.sha256 is not None:
        try:
            actual = sha256_of(path, hashing())
        except OSError as exc:  # another user's file, a failing disk: its error, not an internal one
            raise _unreadable(model, path, exc) from None
        remember_sha256(path, actual)
        _check_sha256(model, path, actual)


def hashing_bar(start, model: ModelSpec, path: Path) -> Callable[[], Advance | None]:
    """The progress bar of a read of the model's file (`pull`, `models --verify`), opened only when the read
    starts: start(label, total) -> advance; none without start."""
    return (lambda: start(f"sha256 of {model.local_name}", path.stat().st_size)) if start else (lambda: None)


def verify_remembered(model: ModelSpec, path: Path, hashing: Callable[[], Advance | None]) -> None:
    """verify() for a file `pull` finds present (locate() checked its size): its sha256 read once and then
    remembered per size and modification time (cached_sha256); hashing() gives the progress while it is read."""
    if model.sha256 is None:
        return
    try:
        actual = cached_sha256(path, hashing)
    except OSError as exc:
        raise _unreadable(model, path, exc) from None
    _check_sha256(model, path, actual)


def present_but_unusable(model: ModelSpec, path: Path) -> ModelFileError | None:
    """What `run` would refuse in a file found present, without reading all of it: one that cannot be read, or
    (no sha256 to check it by) one that is no GGUF. `pull` raises it, `models` warns of it."""
    return unreadable(model, path) or not_gguf(model, path)


def unreadable(model: ModelSpec, path: Path) -> ModelFileError | None:
    """A present file that cannot be read (another user's copy, mode 000): `models` listed it as present without a
    word, and `run` failed on it. Opening it is the test: permissions alone miss ACLs and read-only mounts."""
    try:
        with path.open("rb"):
            return None
    except OSError as exc:
        return _unreadable(model, path, exc)


def not_gguf(model: ModelSpec, path: Path) -> ModelFileError | None:
    """A present file that models.toml gives no sha256 for and that is no GGUF (another file renamed): `pull`
    called it present, while `run` refused it and sent the user back to `pull`. The header is read (cached
    per size and mtime), as `run` reads it; a plugin backend's file is the plugin's to check."""
    from .backends import for_path
    from .gguf import check
    from .ggufparse import GGUF_HINT

    if model.sha256 is not None or for_path(path).name != "llama.cpp":
        return None
    try:
        check(path)
    except ModelFileError as exc:
        # A damaged or foreign file is pulled again; another fault (a GGUF that is no chat model, a split model
        # missing a part) keeps check's own hint: pulling the same file again would fail the same way.
        again = f"delete it and run {pull_command(model)} again"
        return ModelFileError(exc.message, hint=again if exc.hint == GGUF_HINT else exc.hint)
    return None


def _unreadable(model: ModelSpec, path: Path, exc: OSError) -> ModelFileError:
    return ModelFileError(
        f"cannot read {path}: {exc.strerror or exc}",
        hint=f"check the file's permissions, or delete it and run {pull_command(model)} again",
    )


def _check_sha256(model: ModelSpec, path: Path, actual: str) -> None:
    if actual != model.sha256:
        raise ModelFileError(
            f"{path} has sha256 {actual[:16]}..., expected {model.sha256[:16]}...{model.declared_in}",
            hint=bad_file_hint(
                model,
                "sha256",
                f"the file is corrupt or a different build: delete it and run {pull_command(model)} again",
            ),
        )


def _sha256_store() -> Path:
    return cache_dir() / "sha256.json"


def _file_key(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def cached_sha256(path: Path, hashing: Callable[[], Advance | None] = lambda: None) -> str:
    """sha256 of a file, remembered per (path, size, mtime) so that repeated benchmarks and pulls do not
    rehash; hashing() is called only when the file is read (a progress bar for gigabytes)."""
    known = read_json_object(_sha256_store(), _is_sha256)  # anything odd in it: hash again and rewrite it
    if (digest := known.get(_file_key(path))) is None:
        digest = sha256_of(path, hashing())
        remember_sha256(path, digest)
    return digest


def remember_sha256(path: Path, digest: str) -> None:
    """Keep a file's sha256 (a pull that just computed it while writing the file: the next pull reads nothing)."""
    import json

    # Read now, not before the hash: what another process wrote during minutes of hashing is kept.
    known = read_json_object(_sha256_store(), _is_sha256)
    try:
        key = _file_key(path)
        # What the cache knew of this path before it changed, and of files since deleted (test runs, a
        # model moved away), is of no use any more: without this the file grows with every download.
        known = current_file_keys(known)
        known[key] = digest
        make_dirs(_sha256_store().parent)
        write_atomic(_sha256_store(), json.dumps(known))
    except OSError:
        pass  # only a cache: the next run hashes again


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(ch in "0123456789abcdef" for ch in value)
