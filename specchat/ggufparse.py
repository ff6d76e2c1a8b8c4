"""The bytes of a GGUF header read with explicit bounds: magic, version 2 or 3, sane counts, every string and
array inside the file, n_dims <= 4, every tensor's data inside the file, every tensor's type one this llama.cpp
reads. Any violation is a one-line ModelFileError, and a file that is no GGUF is named for what it is instead (a
web page, a Git LFS pointer, safetensors, ...). Which files to read, and remembering the verdicts, is gguf.py's.
"""

from __future__ import annotations

import json
import struct

from .errors import ModelFileError
from .ggmltypes import block

MAX_TENSORS = 1 << 20
MAX_KV = 1 << 16
MAX_ARRAY = 1 << 26
MAX_STRING = 1 << 26
MAX_DIMS = 4
# value type -> (struct format, size); 8 = string, 9 = array
SCALARS = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}


# The file may be a pair's (pulled) or the user's own (--target/--draft): a hint for both.
GGUF_HINT = "download it again (a pair's model: `specchat pull`), or check that it is a GGUF model"


class _Reader:
    def __init__(self, data, name: str) -> None:
        self.data, self.pos, self.name, self.size = data, 0, name, len(data)

    def fail(self, why: str) -> ModelFileError:
        return ModelFileError(
            f"{self.name} is not a valid GGUF file: {why}",
            hint=GGUF_HINT,
        )

    def take(self, fmt: str, size: int):
        if self.pos + size > self.size:
            raise self.fail(f"truncated at byte {self.pos} (file has {self.size})")
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += size
        return value

    def u32(self) -> int:
        return self.take("<I", 4)

    def u64(self) -> int:
        return self.take("<Q", 8)

    def string(self) -> bytes:
        length = self.u64()
        if length > MAX_STRING or self.pos + length > self.size:
            raise self.fail(f"a string of {length} bytes at byte {self.pos} runs past the end of the file")
        value = self.data[self.pos : self.pos + length]
        self.pos += length
        return bytes(value)

    def skip_strings(self, count: int) -> None:
        """`count` strings, skipped with the same bounds as string() but without copying them: a
        tokenizer's vocabulary and merges are 300,000 of them, read on every start."""
        data, pos, size, unpack = self.data, self.pos, self.size, struct.Struct("<Q").unpack_from
        for _ in range(count):
            if pos + 8 > size:
                self.pos = pos
                raise self.fail(f"truncated at byte {pos} (file has {size})")
            (length,) = unpack(data, pos)
            pos += 8
            if length > MAX_STRING or pos + length > size:
                self.pos = pos
                raise self.fail(f"a string of {length} bytes at byte {pos} runs past the end of the file")
            pos += length
        self.pos = pos

    def skip_value(self, kind: int, depth: int = 0):
        if kind in SCALARS:
            fmt, size = SCALARS[kind]
            return self.take(fmt, size)
        if kind == 8:
            return self.string()
        if kind == 9:
            if depth > 1:
                raise self.fail("arrays nested too deeply")
            inner, count = self.u32(), self.u64()
            if count > MAX_ARRAY or count > self.size - self.pos:
                raise self.fail(f"an array claims {count} elements at byte {self.pos}")
            if inner in SCALARS:  # fixed size: skip in one step
                size = SCALARS[inner][1] * count
                if self.pos + size > self.size:
                    raise self.fail(f"an array of {count} values runs past the end of the file")
                self.pos += size
                return None
            if inner == 8:
                self.skip_strings(count)
                return None
            for _ in range(count):
                self.skip_value(inner, depth + 1)
            return None
        raise self.fail(f"unknown value type {kind} at byte {self.pos}")


def check_bytes(data, name: str, *, keep: bool = False, tensors: bool = True) -> dict:
    reader, values, n_tensors, alignment = _header(data, name, keep)
    if not tensors:
        return values
    infos = _tensor_infos(reader, n_tensors)
    data_start = -(-reader.pos // alignment) * alignment
    for tensor, dims, kind, offset in infos:
        elements = 1
        for dim in dims:
            elements *= dim
        per_block, block_bytes = block(name, tensor, kind)
        size = -(-elements // per_block) * block_bytes
        if data_start + offset + size > reader.size:
            raise reader.fail(
                f"tensor {tensor!r} lies outside the file (data at {data_start + offset}, {size} bytes, "
                f"file has {reader.size}): truncated download?"
            )
    return values


def tensor_table(data, name: str) -> list[tuple[str, list[int], int, int]]:
    """(name, dims, ggml type, offset) of every tensor the header lists, read as check_bytes reads them."""
    reader, _values, n_tensors, _alignment = _header(data, name, keep=False)
    return _tensor_infos(reader, n_tensors)


def _header(data, name: str, keep: bool) -> tuple[_Reader, dict, int, int]:
    """The header up to the tensor table: (the reader there, the metadata kept, tensors, alignment)."""
    reader = _Reader(data, name)
    values: dict = {}
    if bytes(data[:4]) != b"GGUF":
        raise _what_else(name, bytes(data[:512])) or reader.fail("bad magic (the file does not start with 'GGUF')")
    reader.pos = 4
    version = reader.u32()
    if version not in (2, 3) and int.from_bytes(struct.pack("<I", version), "big") in (2, 3):
        raise reader.fail("it is a big-endian GGUF (made for IBM Z), which this machine does not read")
    if version not in (2, 3):
        raise reader.fail(f"unsupported GGUF version {version} (2 or 3 expected)")
    n_tensors, n_kv = reader.u64(), reader.u64()
    if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
        raise reader.fail(f"implausible counts ({n_tensors} tensors, {n_kv} metadata keys)")
    alignment = 32
    for _ in range(n_kv):
        key = reader.string()
        kind = reader.u32()
        value = reader.skip_value(kind)
        if keep and value is not None:
            values[key.decode("utf-8", errors="replace")] = (
                value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value
            )
        if key == b"general.alignment":
            if not isinstance(value, int) or value <= 0 or value & (value - 1):
                raise reader.fail(f"general.alignment {value!r} is not a power of two")
            alignment = value
    return reader, values, n_tensors, alignment


def _tensor_infos(reader: _Reader, n_tensors: int) -> list[tuple[str, list[int], int, int]]:
    """(name, dims, ggml type, offset) of every tensor, as the header lists them."""
    infos = []
    for _ in range(n_tensors):
        tensor = reader.string().decode("utf-8", errors="replace")
        n_dims = reader.u32()
        if n_dims > MAX_DIMS:
            raise reader.fail(f"tensor {tensor!r} has {n_dims} dimensions (at most {MAX_DIMS})")
        dims = [reader.u64() for _ in range(n_dims)]
        infos.append((tensor, dims, reader.u32(), reader.u64()))
    return infos


# What a .gguf that is no GGUF is instead, by its first bytes: what a failed download (a web page, a server's
# error), a clone without its LFS files or the wrong file of a model's Hub repo leaves under the name.
GGUF_VERSION = "use the model's GGUF version (a Hub repo named ...-GGUF)"
CONVERT = f"{GGUF_VERSION}, or convert it with llama.cpp's convert_hf_to_gguf.py"
PACKED = {b"\x1f\x8b": "gzip", b"\xfd7zXZ": "xz", b"(\xb5/\xfd": "zstd", b"BZh": "bzip2", b"7z\xbc\xaf": "7-Zip"}
OLD_GGML = {b"lmgg": "GGML", b"fmgg": "GGMF", b"tjgg": "GGJT"}  # llama.cpp's formats before GGUF (2023)


def _what_else(name: str, head: bytes) -> ModelFileError | None:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    said = _json_error(head) if text.startswith(b"{") else None
    packed = next((kind for magic, kind in PACKED.items() if head.startswith(magic)), None)
    safetensors = head[8:10] == b'{"' and int.from_bytes(head[:8], "little") < 1 << 27  # its header's length, JSON
    kinds = [
        (text.startswith((b"<!doctype html", b"<html", b"<head", b"<!--")), "an HTML page (a web page saved under "
         "the model's name)", "download the file itself: on the Hugging Face Hub, the address with /resolve/ (not "
         "/blob/, its page)"),
        (text.startswith(b"version https://git-lfs"), "a Git LFS pointer (a clone that did not fetch the large files)",
         "run `git lfs pull` in that clone"),
        (said is not None, f"a server's error message ({said}), saved as the download", GGUF_HINT),
        (safetensors, "a safetensors file (weights for transformers or vLLM)", CONVERT),
        (head.startswith(b"PK\x03\x04"), "a ZIP archive (a PyTorch checkpoint, or a packed download)",
         f"unpack it if a .gguf is inside; else {GGUF_VERSION}"),
        (packed is not None, f"{packed}-compressed", "decompress it first"),
        (head[:4] in OLD_GGML, f"a {OLD_GGML.get(head[:4])} file, llama.cpp's format before GGUF", GGUF_VERSION),
    ]  # fmt: skip
    found = next(((what, hint) for hit, what, hint in kinds if hit), None)
    return None if found is None else ModelFileError(f"{name} is not a GGUF file: it is {found[0]}", hint=found[1])


def _json_error(head: bytes) -> str | None:
    """The message of a JSON error body such as the Hub's {"error": "Entry not found"}, quoted."""
    try:
        said = json.loads(head.decode("utf-8").strip()).get("error")
    except (ValueError, AttributeError):
        return None
    return repr(said[:80]) if isinstance(said, str) else None
