"""Whether a path named as a file (a model given by path, the log, an overlay) is a regular file, and whether two
paths name one file (a draft model that is the target itself)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .paths import resolve_link


def require_model_files(**given: Path | None) -> None:
    """Each path given as a model file (by its flag: target=..., draft=...) is a regular file, or
    ModelFileError says what it is instead."""
    from .errors import ModelFileError

    for flag, path in given.items():
        problem = None if path is None else file_problem(Path(path))
        if problem:
            raise ModelFileError(f"--{flag} {path} {problem}", hint="give the path of a .gguf file")


def same_file(a: Path, b: Path) -> bool:
    """One file under two names (a link, a relative path); a name not created yet, by its resolved path.
    False where either cannot be looked at."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return resolve_link(Path(a)) == resolve_link(Path(b))
    except OSError:
        return False


def require_other_draft(
    target: Path, draft: Path, why: str = "", instead: str = "use --mode ngram (no draft model)"
) -> None:
    """A draft model that is the target's own file (by any path) runs every token twice: never faster. why: where
    the file the user did not name comes from (a pair's draft beside --target alone); instead: the hint's other way,
    in the command's own options (tune and bench have no --mode)."""
    from .errors import UsageError

    if same_file(Path(target), Path(draft)):
        raise UsageError(
            f"the draft model {draft} is the target model itself{why}: drafting with it cannot be faster",
            hint=f"give --draft a smaller model of the same family, or {instead}",
        )


LINK_LOOP = "is a loop of symbolic links"


def file_problem(path: Path) -> str | None:
    """Why a path that should be a regular file (a model given by path, the log) is not one (None: it is one)."""
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        pass  # said below (a link to nowhere too)
    except OSError as exc:  # a name too long or a folder without permission: is_file() raised (an internal error)
        loop = exc.errno == errno.ELOOP  # is_file() is False: it "did not exist"
        return LINK_LOOP if loop else f"cannot be looked at: {exc.strerror or exc}"
    if path.is_file():
        return None
    if path.is_dir():
        return "is a directory"
    if path.exists():
        return "is not a regular file (a device, a FIFO or a socket)"
    return "does not exist"
