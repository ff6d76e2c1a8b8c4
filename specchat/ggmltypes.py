"""The ggml tensor types a GGUF's tensors may have: their block sizes, for gguf.py's check that every tensor
lies inside the file, and which of them this llama.cpp reads, asked of its own ggml by engine.ggml_types
(llama-cpp-python's enum of them leaves out some it reads, BF16 among them).
"""

from __future__ import annotations

import zlib

from .errors import EngineError, ModelFileError

# ggml type -> (elements per block, bytes per block), from ggml.c's type traits: where llama.cpp's own ggml
# cannot be asked
BLOCKS = {
    0: (1, 4),
    1: (1, 2),
    2: (32, 18),
    3: (32, 20),
    6: (32, 22),
    7: (32, 24),
    8: (32, 34),
    9: (32, 36),
    10: (256, 84),
    11: (256, 110),
    12: (256, 144),
    13: (256, 176),
    14: (256, 210),
    15: (256, 292),
    16: (256, 66),
    17: (256, 74),
    18: (256, 98),
    19: (256, 50),
    20: (32, 18),
    21: (256, 110),
    22: (256, 82),
    23: (256, 136),
    24: (1, 1),
    25: (1, 2),
    26: (1, 4),
    27: (1, 8),
    28: (1, 8),
    29: (256, 56),
    30: (1, 2),
    34: (256, 54),
    35: (256, 66),
    39: (32, 17),
}


def block(name: str, tensor: str, kind: int) -> tuple[int, int]:
    """(elements, bytes) per block of a tensor's type in file `name`, or a ModelFileError naming the tensor
    whose type this llama.cpp does not read (an unknown type counts as no bytes where it cannot be asked)."""
    try:
        from .engine import ggml_types  # the only module that calls llama.cpp
    except EngineError:  # llama-cpp-python is not usable: the table above
        return BLOCKS.get(kind, (1, 0))
    types = ggml_types()
    if types is None:
        return BLOCKS.get(kind, (1, 0))
    count, readable, removed = types
    if kind in readable:
        return readable[kind]
    if kind in removed:
        raise ModelFileError(
            f"{name}: tensor {tensor!r} has ggml type {kind} ({removed[kind]}), which this llama.cpp no longer reads",
            hint="download another quantization of the model (or requantize it with a current llama.cpp)",
        )
    raise ModelFileError(
        f"{name}: tensor {tensor!r} has ggml type {kind}, unknown to this llama.cpp (it knows 0-{count - 1})",
        hint="a newer llama-cpp-python may read it (pip install -U llama-cpp-python)",
    )


def reader_tag() -> str:
    """Which llama.cpp the check's verdict on tensor types holds for: its llama-cpp-python version and a
    checksum of its type table (a build from source may differ under one version). gguf.py keys its cache of
    checked files on it, so that an upgrade or downgrade that stops reading a type checks every file again."""
    try:
        import llama_cpp

        from .engine import ggml_types
    except (EngineError, ImportError):  # the table above decides
        return "table"
    types = ggml_types()
    return f"{getattr(llama_cpp, '__version__', '?')}-{zlib.crc32(repr(types).encode()):08x}"
