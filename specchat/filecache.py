"""specchat's small per-file caches (sha256s, GGUF checks): a JSON object read back, or rebuilt when it is of the
wrong shape, and its entries for files that are still there as they were."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_json_object(path: Path, valid: Callable[[Any], bool]) -> dict[str, Any]:
    """A cache file's JSON object, or {} when the file is missing, unreadable, or not an object whose
    every value passes `valid`: a cache of the wrong shape is rebuilt, never a reason to stop."""
    try:
        if not path.is_file():  # a FIFO or a directory in its place would block or fail the read
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: thousands of nested brackets
        return {}
    if not isinstance(data, dict) or not all(valid(value) for value in data.values()):
        return {}
    return data


def current_file_keys(known: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The entries of a per-file cache (keys PREFIX PATH:SIZE:MTIME_NS) still worth keeping: those of files
    that are there as they were. A file changed or deleted since, or an entry of another PREFIX (older rules),
    is of no use, and without this the cache would grow with every download or touch. A file that cannot be
    looked at now (a drive not mounted, a folder not readable) keeps its entry: hashing it again is slow."""
    kept = {}
    for key, value in known.items():
        where, _, stamp = key.removeprefix(prefix).rpartition(":")
        where, _, size = where.rpartition(":")
        if not key.startswith(prefix) or not where:
            continue
        try:
            stat = os.stat(where)
        except FileNotFoundError:
            if os.path.isdir(os.path.dirname(where)):  # gone from a folder that is there: deleted or moved
                continue
        except (OSError, ValueError):
            pass
        else:
            if f"{stat.st_size}:{stat.st_mtime_ns}" != f"{size}:{stamp}":
                continue
        kept[key] = value
    return kept
