"""Where specchat keeps models, settings and caches (platformdirs, overridable by environment)."""

from __future__ import annotations

import errno
import os
from contextlib import suppress
from pathlib import Path

from platformdirs import user_cache_dir, user_config_dir, user_data_dir, user_state_dir

APP = "specchat"


def expand_home(text: str) -> Path:
    """A path with ~ or ~user expanded. An unknown user, or no home directory, leaves it as it is, as a
    shell does: Path.expanduser raised RuntimeError there, an internal error (SPECCHAT_DATA_DIR, /save).
    A name typed in the chat that the file system's encoding cannot hold names the file by its UTF-8 bytes
    (LC_ALL=C with PYTHONUTF8=0: `/save tälk.md` was an internal error); a name it can hold (argv, environ, a
    Latin-1 locale's 'täst') is left as it is: re-encoding every name as UTF-8 named another file there."""
    try:
        os.fsencode(text)
    except UnicodeError:
        with suppress(UnicodeError):  # a surrogate that stands for no byte: open() says what is wrong
            text = os.fsdecode(text.encode("utf-8", "surrogateescape"))
    try:
        return Path(text).expanduser()
    except RuntimeError:
        return Path(text)


def _from_env(name: str, default: str) -> Path:
    """A relative value is taken from the current directory, and named whole in messages (`logs --path`): "data"
    says nothing of where it is."""
    value = os.environ.get(name)
    if not value:
        return Path(default)
    path = expand_home(value)
    try:
        return path.absolute()
    except OSError:  # the current directory was deleted: the path as given, which its own use then names
        return path


def data_dir() -> Path:
    """User data: the conversation log."""
    return _from_env("SPECCHAT_DATA_DIR", user_data_dir(APP))


def log_file() -> Path:
    """The SQLite conversation log (`specchat logs`)."""
    return data_dir() / "logs.db"


def models_dir() -> Path:
    """GGUF files assembled from the mirror (and any the user drops in by hand)."""
    return _from_env("SPECCHAT_MODELS_DIR", os.path.join(user_data_dir(APP), "models"))


def config_dir() -> Path:
    """User overlay `models.toml` and tuning results."""
    return _from_env("SPECCHAT_CONFIG_DIR", user_config_dir(APP))


def cache_dir() -> Path:
    """Mirror wheels while a pull runs (each deleted once appended), and small caches such as sha256s."""
    return _from_env("SPECCHAT_CACHE_DIR", user_cache_dir(APP))


def overlay_file() -> Path:
    return config_dir() / "models.toml"


def state_dir() -> Path:
    return _from_env("SPECCHAT_STATE_DIR", user_state_dir(APP))


def history_file() -> Path:
    """History of the interactive chat (prompt_toolkit's FileHistory format)."""
    return state_dir() / "history"


LEADS_BACK = "leads back to itself (a loop of links)"


def dead_link(link: Path) -> str | None:
    """What a symbolic link that cannot be followed is ("a link to T, which does not exist", or which LEADS_BACK):
    a folder on a disk not mounted, most often. None: no link, or one that leads somewhere."""
    if not os.path.islink(link):  # in a folder that cannot be searched: none to tell (Path.is_symlink would raise)
        return None
    try:
        link.stat()
    except OSError as exc:
        return f"a link to {os.readlink(link)}, which {LEADS_BACK if exc.errno == errno.ELOOP else 'does not exist'}"
    return None


class NotAFolder(NotADirectoryError):
    """A file (or a device, a link) has the name of a folder specchat makes, or of a folder above it."""

    def __init__(self, blocker: Path, folder: Path) -> None:
        variable = moved_by(folder)
        where = f"set {variable} to another folder" if variable else "choose another folder"
        if (dead := dead_link(blocker)) is not None:  # a folder on a disk not mounted: no file to remove
            super().__init__(errno.ENOENT, f"{blocker} is {dead}")
            self.hint = f"mount the disk it leads to, or fix or remove the link, or {where}"
            return
        super().__init__(errno.ENOTDIR, f"{blocker} is not a directory")
        self.hint = _set_to(blocker, folder) or f"remove or rename that file, or {where}"

    def __str__(self) -> str:
        return self.strerror


def make_dirs(folder: Path, mode: int = 0o777) -> None:
    """mkdir -p; NotAFolder names the file in the way, where mkdir said only 'File exists' or 'Not a
    directory' (which reads as if the folder were there). Raises OSError."""
    try:
        folder.mkdir(mode=mode, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = blocking_file(folder)
        if blocker is None:
            raise
        raise NotAFolder(blocker, folder) from None


def blocking_file(folder: Path) -> Path | None:
    """The file (or device, link) that stands where `folder` or a folder above it should be; None if none does.
    Reading below one finds nothing (exists() is False), which would read as if the folder were only empty."""
    blocker = next((p for p in (folder, *folder.parents) if p.exists() or p.is_symlink()), None)
    return None if blocker is None or blocker.is_dir() else blocker


def disk_full(exc: BaseException) -> bool:
    """An OSError that says the disk (or the user's quota on it) is full: the folder is writable, space is not."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def folder_hint(exc: BaseException, default: str) -> str:
    """The hint for an OSError from make_dirs: NotAFolder's own, else the caller's `default`."""
    return exc.hint if isinstance(exc, NotAFolder) else default


def _set_to(blocker: Path, folder: Path) -> str | None:
    """The hint where a SPECCHAT_*_DIR variable that holds `folder` names the file `blocker` (a model's file as
    SPECCHAT_MODELS_DIR), or a folder inside it (~/m.gguf/sub): "remove or rename that file" told the user to
    delete what they named. None where no variable does."""
    for name in (f"SPECCHAT_{name}_DIR" for name in ("DATA", "MODELS", "CONFIG", "CACHE", "STATE")):
        value = _from_env(name, "") if os.environ.get(name) else None
        if value is None or (value != folder and value not in folder.parents):
            continue
        if value == blocker:
            return f"{name} names this file: set it to a folder"
        if blocker in value.parents:
            return f"{name} passes through the file {blocker}: set it to a folder"
    return None


def moved_by(folder: Path) -> str | None:
    """The environment variable that moves the specchat folder holding `folder` (the innermost one)."""
    roots = {"DATA": data_dir(), "MODELS": models_dir(), "CONFIG": config_dir(), "CACHE": cache_dir()}
    roots["STATE"] = state_dir()
    held = [(len(root.parts), name) for name, root in roots.items() if folder == root or root in folder.parents]
    return f"SPECCHAT_{max(held)[1]}_DIR" if held else None


def nearest_existing(path: Path) -> Path:
    """`path`, or the folder above it nearest to it that exists: what decides whether it can be made. One inside a
    folder that cannot be searched (mode 000) is not seen, so that folder is the answer (Path.exists would raise)."""
    return next((p for p in (path, *path.parents) if os.path.exists(p)), path)


def writable(path: Path) -> bool:
    """Whether this user can write `path`, or create it where it does not exist yet (its nearest existing
    folder is writable). os.access: a read-only mount is refused even to root."""
    return os.access(nearest_existing(path), os.W_OK)


def env_flag(name: str) -> bool:
    """An on/off environment variable (SPECCHAT_NO_LOG, SPECCHAT_NO_HISTORY, SPECCHAT_DEBUG): on when set to anything
    but empty, 0, false, no or off, in any case; `SPECCHAT_NO_LOG=false` must not turn logging off."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def is_special(path: Path) -> bool:
    """The path exists and is neither a regular file nor a directory: /dev/null, /dev/stdout, a FIFO (reading
    one may block for good; a rename would put a regular file in its place)."""
    return path.exists() and not path.is_file() and not path.is_dir()


def write_atomic(path: Path, text: str | bytes, *, keep_read_only: bool = False) -> None:
    """Write text through a private temporary file and a rename: readers see the old file or the new
    one, never half of it, and concurrent writers cannot collide. Raises OSError; nothing stays behind.

    Where the user chose the path (a report, /save): a symbolic link is written through, not replaced
    by a file; /dev/null, a FIFO or /dev/stdout is written into (a rename would put a regular file in
    its place, and as root that replaced /dev/null); a file replaced keeps its permissions. keep_read_only
    (a file the user names or keeps: a report, /save, the tuning): a read-only one is refused
    (PermissionError), as by the shell's `>`, where the rename alone would have replaced it; specchat's own
    caches are replaced, as before, rather than left stale for good by a mode restored from a backup. Bytes (a
    plot) are written as they are."""
    import tempfile

    binary = isinstance(text, bytes)

    if is_special(path):  # the kernel follows /dev/stdout's link
        # Non-blocking to open: a FIFO that nobody reads fails at once (ENXIO) instead of hanging the chat.
        handle = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.set_blocking(handle, True)
        with os.fdopen(handle, "wb") if binary else os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        return
    if path.is_symlink():
        path = resolve_link(path)
    if keep_read_only:
        refuse_read_only(path)
    mode = path.stat().st_mode & 0o7777 if path.is_file() else 0o644  # new: an ordinary user file (not mkstemp's 0600)
    folder = path.parent if str(path.parent) else Path(".")
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") if binary else os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def refuse_read_only(path: Path) -> None:
    """PermissionError for a regular file its user may not write: a rename would replace it, the shell's `>` would
    not. write_atomic(keep_read_only) asks it, and tune before it measures (a link already resolved)."""
    if path.is_file() and not os.access(path, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def resolve_link(path: Path) -> Path:
    """Where a symbolic link leads; a loop of links is an OSError (ELOOP), as opening it would be, not
    pathlib's RuntimeError, which no caller's OSError handling catches."""
    try:
        return path.resolve()
    except RuntimeError:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from None


def replace_bad_bytes(text: str) -> str:
    """The text with U+FFFD for bytes that are not UTF-8. prompt_toolkit passes them on as lone surrogates
    (as Python does argv), which the tokenizer and SQLite refuse."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate that no byte stands for
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def replaced_any(text: str, fixed: str) -> bool:
    """Whether replace_bad_bytes(text), fixed, replaced a byte. Where the locale is not UTF-8 (LC_ALL=C with
    PYTHONUTF8=0; PYTHONIOENCODING=ascii for the chat's input) good UTF-8 comes as surrogates too: mended."""
    return fixed.count("\ufffd") > text.count("\ufffd")


def path_text(path: Path) -> str:
    """A path as text that encodes as UTF-8 (JSON, the log, HTTP): str() keeps the bytes of a file name that
    is not UTF-8 (a Latin-1 archive) as surrogates, which no encoder takes; here they are U+FFFD."""
    return replace_bad_bytes(str(path))
