"""Copies of real GGUF files with one metadata string changed in place (same length, so no offset moves).

Used to make a model whose chat template fails to render and a draft whose vocabulary differs from its
target at one token, without committing model files: the copies live in pytest's tmp directory.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def string_offsets(path: Path, key: str) -> list[tuple[int, int]]:
    """(offset, length) of the string value of `key`, or of each string in it when it is an array."""
    with path.open("rb") as handle:
        data = handle.read(64 << 20)  # Qwen's 151k-token vocabulary fits in the first few MB
    pos = 4 + 4  # magic, version
    _n_tensors, n_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16

    def read_string(at: int) -> tuple[int, int, int]:
        (length,) = struct.unpack_from("<Q", data, at)
        return at + 8, length, at + 8 + length

    def skip(kind: int, at: int, found: list | None) -> int:
        if kind == _STRING:
            start, length, end = read_string(at)
            if found is not None:
                found.append((start, length))
            return end
        if kind == _ARRAY:
            item_kind, count = struct.unpack_from("<IQ", data, at)
            at += 12
            for _ in range(count):
                at = skip(item_kind, at, found)
            return at
        return at + _SCALAR[kind]

    for _ in range(n_kv):
        start, length, pos = read_string(pos)
        name = data[start : start + length].decode()
        (kind,) = struct.unpack_from("<I", data, pos)
        pos += 4
        found: list[tuple[int, int]] = []
        pos = skip(kind, pos, found if name == key else None)
        if name == key:
            return found
    raise KeyError(key)


def patched_copy(source: Path, destination: Path, key: str, index: int, make_value) -> Path:
    """Copy `source`, replacing string number `index` of `key` by make_value(old) (same byte length)."""
    offset, length = string_offsets(source, key)[index]
    with source.open("rb") as handle:
        handle.seek(offset)
        old = handle.read(length)
    new = make_value(old)
    if len(new) != length:
        raise ValueError(f"replacement must keep the length ({length} bytes), got {len(new)}")
    shutil.copyfile(source, destination)
    with destination.open("r+b") as handle:
        handle.seek(offset)
        handle.write(new)
    return destination
