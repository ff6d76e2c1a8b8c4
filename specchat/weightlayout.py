"""How llama.cpp lays out a model's weights on a CPU whose llama.cpp has AMX.

llama.cpp moves weights into "extra" buffer types as it loads them: tiles repacked for its CPU matrix
kernels (CPU_REPACK) and, in a build with AMX, an AMX layout tried first. Its AMX matrix product crashes
the process on Q4_K models (SIGSEGV in ggml_backend_amx_mul_mat, ggml-org/llama.cpp#20824: every real run
of the default pair on a Sapphire-Rapids-class Xeon on 2026-12-05, plain llama-cpp-python included), and
llama.cpp turns the extra types off only all together (`use_extra_bufts`, llama-server's --no-repack),
which cost that Xeon 20% on a single step and 28% on a verify batch of 8. So there the extra types are
off, and the tensors the repack would take are named to CPU_REPACK (llama.cpp's tensor buffer-type
overrides): the repack's speed without AMX. The engine passes llama_cpp's module in (`lib`): engine.py
stays the only module that imports it.
"""

from __future__ import annotations

import ctypes
import re
from collections import defaultdict
from pathlib import Path

from . import gguf
from .paths import env_flag

# ggml types the x86 repack takes (ggml-cpu/repack.cpp: with AVX2, which every AMX CPU has; rows % 8 == 0)
REPACKED = {2: "Q4_0", 12: "Q4_K", 20: "IQ4_NL"}  # Q2_K (AVX-512) and MXFP4 too there: left plain, untested
# Matrix weights of a layer, read by a matrix product only (token_embd is also read by row: never repacked)
MATRIX = re.compile(r"^blk\.(\d+)\.(attn_(?:q|k|v|qkv|output)|ffn_(?:gate|up|down))\.weight$")
CPU_DEVICE = 0  # GGML_BACKEND_DEVICE_TYPE_CPU


class Override(ctypes.Structure):
    """llama_model_tensor_buft_override: tensors whose name matches `pattern` go to buffer type `buft`."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def extra_buffers_allowed(lib) -> bool:
    """llama.cpp's own choice of layouts, AMX included: not where its build has AMX (SPECCHAT_AMX=1: yes)."""
    return env_flag("SPECCHAT_AMX") or b"AMX_INT8 = 1" not in lib.llama_print_system_info()


def repack_patterns(tensors: list[tuple[str, list[int], int]]) -> list[str]:
    """One pattern per kind of matrix weight, naming the layers whose weight of that kind the repack takes
    (a few short patterns: llama.cpp compiles each one again for every tensor it loads)."""
    layers: dict[str, list[str]] = defaultdict(list)
    for name, dims, kind in tensors:
        found = MATRIX.match(name)
        if found and kind in REPACKED and len(dims) == 2 and dims[1] % 8 == 0:
            layers[found[2]].append(found[1])
    return [rf"^blk\.({'|'.join(numbers)})\.{role}\.weight$" for role, numbers in sorted(layers.items())]


def repack_buffer_type(lib) -> int | None:
    """ggml's CPU_REPACK buffer type, asked of its CPU backend; None where this llama.cpp has none."""
    try:
        names = ("dev_by_type", "dev_backend_reg", "reg_get_proc_address", "buft_name")
        by_type, reg_of, proc, name_of = (lib._lib[f"ggml_backend_{name}"] for name in names)
    except (AttributeError, OSError):
        return None
    for function, args in ((by_type, [ctypes.c_int]), (reg_of, [ctypes.c_void_p]), (name_of, [ctypes.c_void_p])):
        function.restype, function.argtypes = ctypes.c_void_p, args
    name_of.restype = ctypes.c_char_p
    proc.restype, proc.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
    cpu = by_type(CPU_DEVICE)
    address = proc(reg_of(cpu), b"ggml_backend_dev_get_extra_bufts") if cpu else None
    if not address:
        return None
    listed = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)(cpu)
    for index in range(16):  # a NULL-terminated list of a few
        if not listed or not listed[index]:
            return None
        if name_of(listed[index]) == b"CPU_REPACK":
            return listed[index]
    return None


def keep_amx_out(lib, params, path: Path, cpu_only: bool) -> object:
    """Set `params` so that the AMX layout is never used (where extra_buffers_allowed says it crashes); with every
    layer on the CPU, the repack is kept for the tensors it takes. Returns what must live while the model loads."""
    params.use_extra_bufts = False
    # With a GPU the overrides would pull offloaded layers back to the CPU: the plain layout there.
    buft = repack_buffer_type(lib) if cpu_only else None
    patterns = [pattern.encode() for pattern in repack_patterns(gguf.tensors(path))] if buft else []
    if not patterns:
        return None
    overrides = (Override * (len(patterns) + 1))()  # the last one NULL: the end of the list
    for slot, pattern in zip(overrides, patterns, strict=False):
        slot.pattern, slot.buft = pattern, buft
    params.tensor_buft_overrides = ctypes.cast(overrides, ctypes.c_void_p)
    return overrides, patterns
