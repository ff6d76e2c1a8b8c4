"""A bounded GGUF header check in Python, run before a file reaches llama.cpp.

llama.cpp's GGUF parser has had memory-safety bugs and aborts the whole process on some malformed files.
This reads the header with explicit bounds (magic, version 2 or 3, sane counts, every string and array
inside the file, n_dims <= 4, every tensor's data inside the file, every tensor's type one this llama.cpp
reads) and turns any violation into a one-line ModelFileError. Results are remembered per (path, size,
mtime) and per llama.cpp (the tensor types it reads), so a good file costs once.
"""

from __future__ import annotations

import contextlib
import functools
import json
import mmap
import struct
from pathlib import Path

from .errors import ModelFileError
from .ggmltypes import block, reader_tag
from .paths import cache_dir, current_file_keys, make_dirs, read_json_object, write_atomic

# The version of the rules below: a file remembered as checked under older ones is checked again (raise it
# when a rule is added).
RULES = 3
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


def check(path: Path) -> None:
    """Raise ModelFileError unless `path` has a well-formed GGUF header whose tensors lie inside the file;
    for a split model, every part (llama.cpp opens the others itself, unchecked)."""
    path = Path(path)
    _check_file(path)
    parts = split_parts(path)
    for number, part in enumerate(parts[1:], start=2):
        if not part.is_file():
            raise ModelFileError(
                f"{part.name}, part {number} of {len(parts)} of {path.name}, is missing",
                hint="put every part of the split model into one folder (as downloaded)",
            )
        _check_file(part)


def split_parts(path: Path) -> list[Path]:
    """The files of a model split by llama.cpp's gguf-split (PREFIX-00001-of-00003.gguf, ...), first `path`
    itself; [path] for a whole model. Given another part than the first, ModelFileError: llama.cpp loads a
    split model from its first part and finds the others by their names."""
    meta = metadata(path)
    count, number = meta.get("split.count"), meta.get("split.no", 0)
    if not isinstance(count, int) or isinstance(count, bool) or count <= 1:
        return [path]
    if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number < count:
        raise ModelFileError(
            f"{path.name} is not a valid GGUF file: split.no is {number!r}, not a part of {count}",
            hint="re-download it, or split the model again with llama.cpp's gguf-split",
        )
    first = f"-{1:05d}-of-{count:05d}.gguf"
    if number != 0:
        raise ModelFileError(
            f"{path.name} is part {number + 1} of {count} of a split model",
            hint=f"give its first part, {path.name.replace(f'-{number + 1:05d}-of-', '-00001-of-')}: "
            "llama.cpp loads the others beside it",
        )
    if not path.name.endswith(first):
        raise ModelFileError(
            f"{path.name} is part 1 of {count} of a split model, but not named PREFIX{first}",
            hint="llama.cpp finds the other parts by their names: keep the names gguf-split gave them",
        )
    prefix = path.name[: -len(first)]
    return [path.with_name(f"{prefix}-{n:05d}-of-{count:05d}.gguf") for n in range(1, count + 1)]


def _check_file(path: Path) -> None:
    try:
        stat = path.stat()
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror}", hint="check the path") from None
    # Another llama.cpp may read other tensor types: a file passed under one is checked again under another.
    prefix = f"{RULES}:{reader_tag()}:"
    key = f"{prefix}{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    known = _load_cache()
    if known.get(key):
        return
    _require_header_size(path, stat.st_size)
    with _mapped(path) as data:
        _require_language_model(path.name, _check_bytes(data, path.name, keep=True))
    known = _kept(known, prefix)
    known[key] = True
    _save_cache(known)


KEPT_READERS = 3  # the llama.cpps whose verdicts are kept: two environments that share the cache both keep theirs


def _kept(known: dict, current: str) -> dict:
    """The cache's entries worth keeping: this rules' version, files there as they were, of the current llama.cpp
    and of the few seen before it (an older RULES, or the llama.cpp of many upgrades ago, is dropped). Keeping
    only the current llama.cpp's made two virtual environments on one cache check every file again each time
    they took turns."""
    readers = [current]
    for key in reversed(known):  # the latest written last
        reader = key.removeprefix(f"{RULES}:").partition(":")[0] if key.startswith(f"{RULES}:") else None
        if reader is not None and f"{RULES}:{reader}:" not in readers and len(readers) < KEPT_READERS:
            readers.append(f"{RULES}:{reader}:")
    kept: dict = {}
    for prefix in reversed(readers):
        kept.update(current_file_keys(known, prefix=prefix))  # files changed or gone since are dropped
    return kept


# GGUF files that sit beside a model in its Hub repo, by general.type or general.architecture: llama.cpp said
# "unknown model architecture: 'clip'", whose hint (a newer llama-cpp-python) cannot help.
NOT_MODELS = {
    ("general.type", "adapter"): "is a LoRA adapter",
    ("general.type", "imatrix"): "is an importance matrix (for quantizing)",
    ("general.architecture", "clip"): "is a multimodal projector (mmproj)",
}


# Models llama.cpp loads but that cannot generate text as specchat drives it (decode, then read logits): an
# embedding model (a BERT: non-causal attention, no logits to read; one without [CLS] aborted llama.cpp's
# tokenizer) and T5, whose decoder needs an encoder pass first.
NOT_GENERATIVE = {"t5": "an encoder-decoder model", "t5encoder": "an encoder model"}


def _require_language_model(name: str, values: dict) -> None:
    for (key, value), what in NOT_MODELS.items():
        if values.get(key) == value:
            raise ModelFileError(f"{name} {what}, not a language model", hint="give the language model's own GGUF file")
    arch = values.get("general.architecture", "")
    what = NOT_GENERATIVE.get(arch)
    if what is None and values.get(f"{arch}.attention.causal") is False:
        what = "an embedding model"
    if what is not None:
        raise ModelFileError(
            f"{name} is {what} ({_shown(arch)}): specchat cannot generate text with it",
            hint="give a chat model's GGUF (a decoder-only language model)",
        )


def _shown(text: str) -> str:
    return text if text.isprintable() else repr(text)


def metadata(path: Path) -> dict:
    """Scalar and string metadata of a GGUF file (arrays skipped), read with the same bounds; read once
    per file version in a process (a start asks for it several times: memory, context size)."""
    path = Path(path)
    stat = path.stat()
    # Read before check() (the context size is chosen before loading): mmap refuses an empty file.
    _require_header_size(path, stat.st_size)
    return dict(_metadata(path.resolve(), stat.st_size, stat.st_mtime_ns))


def _require_header_size(path: Path, size: int) -> None:
    if size < 24:  # magic, version and the two counts
        raise ModelFileError(
            f"{path.name} is not a valid GGUF file: only {size} bytes",
            hint=GGUF_HINT,
        )


@functools.lru_cache(maxsize=8)
def _metadata(path: Path, _size: int, _mtime_ns: int) -> dict:
    with _mapped(path) as data:
        return _check_bytes(data, path.name, keep=True, tensors=False)


@contextlib.contextmanager
def _mapped(path: Path):
    """The file's bytes, mapped. A file this user may not read (a pair's file pulled by another user) is
    named, not an internal error."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ModelFileError(
            f"cannot read {path}: {exc.strerror or exc}", hint="check the file's permissions (and its owner)"
        ) from None
    with handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        yield data


def memory_needed(path: Path, n_ctx: int) -> tuple[int, int]:
    """(weights bytes, f16 KV-cache bytes at n_ctx) of a model, from its file size and metadata."""
    meta = metadata(path)
    arch = meta.get("general.architecture", "")

    def number(key: str, default: int = 0) -> int:
        value = meta.get(f"{arch}.{key}", default)
        return int(value) if isinstance(value, int | float) else default

    layers, embd, heads = number("block_count"), number("embedding_length"), number("attention.head_count", 1)
    kv_heads = number("attention.head_count_kv", heads) or heads
    key_len = number("attention.key_length", embd // max(heads, 1))
    value_len = number("attention.value_length", key_len)
    kv_bytes = n_ctx * layers * kv_heads * (key_len + value_len) * 2
    # A split model's weights are in all its parts (a missing one is check()'s to name).
    weights = sum(part.stat().st_size for part in split_parts(Path(path)) if part.is_file())
    return weights, kv_bytes


def trained_context(path: Path) -> int | None:
    """`<arch>.context_length` from the metadata: the context the model was trained for."""
    meta = metadata(path)
    value = meta.get(f"{meta.get('general.architecture', '')}.context_length")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _check_bytes(data, name: str, *, keep: bool = False, tensors: bool = True) -> dict:
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
    if not tensors:
        return values
    infos = []
    for _ in range(n_tensors):
        tensor = reader.string().decode("utf-8", errors="replace")
        n_dims = reader.u32()
        if n_dims > MAX_DIMS:
            raise reader.fail(f"tensor {tensor!r} has {n_dims} dimensions (at most {MAX_DIMS})")
        dims = [reader.u64() for _ in range(n_dims)]
        infos.append((tensor, dims, reader.u32(), reader.u64()))
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


def _cache_file() -> Path:
    return cache_dir() / "gguf-checked.json"


def _load_cache() -> dict:
    # Only `true` marks a checked file; any other shape is ignored and the files are checked again.
    return read_json_object(_cache_file(), lambda value: value is True)


def _save_cache(known: dict) -> None:
    try:
        path = _cache_file()
        make_dirs(path.parent)
        write_atomic(path, json.dumps(known))
    except OSError:
        pass  # only a cache
