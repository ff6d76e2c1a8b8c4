"""A bounded GGUF header check in Python, run before a file reaches llama.cpp.

llama.cpp's GGUF parser has had memory-safety bugs and aborts the whole process on some malformed files.
This has every file of a model read with explicit bounds (ggufparse.py), turns any violation into a one-line
ModelFileError, and names a file that is no language model. Results are remembered per (path, size, mtime)
and per llama.cpp (the tensor types it reads), so a good file costs once.
"""

from __future__ import annotations

import contextlib
import functools
import json
import mmap
from pathlib import Path

from .errors import ModelFileError
from .filecache import current_file_keys, read_json_object
from .ggmltypes import reader_tag
from .ggufparse import GGUF_HINT, check_bytes, tensor_table
from .paths import cache_dir, make_dirs, write_atomic

# The version of the rules (here and in ggufparse.py): a file remembered as checked under older ones is checked
# again (raise it when a rule is added).
RULES = 3


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
    if _load_cache().get(key):
        return
    _require_header_size(path, stat.st_size)
    with _mapped(path) as data:
        _require_language_model(path.name, check_bytes(data, path.name, keep=True))
    known = _kept(_load_cache(), prefix)  # read again: another process's verdicts written meanwhile are kept
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
        return check_bytes(data, path.name, keep=True, tensors=False)


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


def tensors(path: Path) -> list[tuple[str, list[int], int]]:
    """(name, dims, ggml type) of every tensor of a model, over all parts of a split one."""
    found = []
    for part in split_parts(Path(path)):
        with _mapped(part) as data:
            found += [info[:3] for info in tensor_table(data, part.name)]
    return found


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
