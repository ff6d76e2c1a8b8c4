"""The steps of `specchat tune` (measure.py): the checks that its result can be saved, made before minutes of
measuring; the measuring on the loaded models; the save."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..errors import SpecchatError


def check_saveable() -> None:
    """The tuning folder can be written to (else an error: nothing was measured)."""
    from ..tuningsave import check_writable

    try:
        check_writable()
    except OSError as exc:
        raise _unsaved(exc, "nothing was measured") from None


def refuse_unreplaceable(resolved, usable) -> None:
    """The pair's tuning file can be replaced (else an error naming what stands there). Run before the models load
    (load_pipeline's before_load): a file that cannot be saved is not worth it."""
    from ..errors import SpecchatError
    from ..tuning import key_for, tuning_path
    from ..tuningsave import check_replaceable

    try:
        check_replaceable(key_for(resolved, usable))
    except IsADirectoryError as exc:  # the file's own path: the folder was checked by check_saveable
        raise SpecchatError(
            f"cannot save the tuning as {exc.filename}: it is a directory",
            hint="remove or rename that directory (tune saves its file there); nothing was measured",
        ) from None
    except OSError as exc:
        found = unreplaceable_error(tuning_path(key_for(resolved, usable)), exc)
        raise found or _unsaved(exc, "nothing was measured") from None


def measure_tuning(pipeline, prompts, max_tokens: int, err):
    """The tuning measured on the loaded models and its estimates."""
    from ..progressview import bench_progress
    from ..tunemeasure import tune as run_tune
    from ..tuning import examine, key_for, written_by_newer
    from ..view import note

    # pipeline.options: threads as capped to the usable CPUs, the count the new tuning is saved under
    key = key_for(pipeline.resolved, pipeline.options)
    problem = examine(key)[1]
    if problem is not None:  # replaced without a word, a hand-edited file seemed lost to a bug
        newer = " (upgrade specchat to keep using it)" if written_by_newer(key) else ""
        note(err, f"the saved tuning {problem}; this measurement replaces it{newer}")
    with bench_progress(err, len(prompts) * (2 if pipeline.draft is not None else 1)) as progress:
        return run_tune(
            pipeline, prompts, max_tokens=max_tokens, notify=lambda message: note(err, message), progress=progress
        )


def save_if_worth_it(tuning):
    """The saved file's path (None: nothing saved), whether the saved costs were kept (tuningsave.worth_saving), and
    the saved tuning that was decided on (None if none)."""
    from ..tuningsave import save_measured

    try:
        return save_measured(tuning)
    except OSError as exc:
        raise _unsaved(exc, "nothing was saved") from None


def _unsaved(exc: OSError, what: str) -> SpecchatError:
    from ..errors import SpecchatError
    from ..paths import config_dir, disk_full, folder_hint

    hint = folder_hint(exc, "give specchat a writable config directory (SPECCHAT_CONFIG_DIR moves it)")
    if disk_full(exc):  # the folder is writable: the disk is full
        hint = f"free some space on the disk that holds {config_dir()}, or move it (SPECCHAT_CONFIG_DIR)"
    return SpecchatError(
        f"cannot save the tuning in {config_dir() / 'tuning'}: {exc.strerror or exc}", hint=f"{hint}; {what}"
    )


def unreplaceable_error(path: Path, exc: OSError) -> SpecchatError | None:
    """What stands at the tuning's path and cannot be replaced (its folder was checked before): a link into a
    missing, read-only or unsearchable folder or a loop, a FIFO nobody reads, a read-only file. Each is named:
    "give specchat a writable config directory" sent the user to a folder that was fine."""
    from ..errors import SpecchatError
    from ..paths import is_special

    if path.is_symlink():  # first: a probe refused in the link's folder is a PermissionError too
        what, kind = f"a link to {os.readlink(path)}", "link"
    elif isinstance(exc, PermissionError) and path.is_file():
        return SpecchatError(
            f"cannot save the tuning as {path}: the file is read-only",
            hint="make it writable (chmod u+w) or remove it, for tune to replace it; nothing was measured",
        )
    elif is_special(path):
        what, kind = "a FIFO or device nobody reads", "FIFO or device"
    else:  # nothing of the above (an unsearchable folder): the save's own reason, in its words
        return None
    return SpecchatError(
        f"cannot save the tuning as {path}: it is {what} ({exc.strerror or exc})",
        hint=f"remove that {kind} (tune saves its file there); nothing was measured",
    )
