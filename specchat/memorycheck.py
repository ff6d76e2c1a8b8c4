"""Whether the models fit in RAM: refused before loading, with the numbers, rather than an OOM kill mid-load.

open_pipeline (runtime.py) checks here and, for the default context, hands ctxsize.choose the memory known here.
"""

from __future__ import annotations

from pathlib import Path

from .backends import for_path
from .errors import EngineError

OVERHEAD_BYTES = 300_000_000  # per model: compute buffers, context, output logits (measured ~200 MB here)


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (Linux); None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def check_memory(paths: list[Path], n_ctx: int, without_draft: str | None = None) -> None:
    """Refuse, with the numbers, models that cannot fit in RAM: better than an OOM kill mid-load. without_draft: the
    command's own option that loads the target alone, where a draft model is among the paths (None: none is, or the
    command measures the draft model and has none: bench, tune)."""
    available = available_memory()
    needs = [for_path(path).memory_needed(path, n_ctx) for path in paths]
    if available is None or any(need is None for need in needs):
        return  # unknown, or weights go to a GPU whose free memory is not known here
    weights = sum(w for w, _ in needs)
    kv = sum(k + OVERHEAD_BYTES for _, k in needs)
    if weights + kv > available:
        raise EngineError(
            f"not enough memory: the models need about {(weights + kv) / 1e9:.1f} GB (weights "
            f"{weights / 1e9:.1f} GB + KV cache and buffers {kv / 1e9:.1f} GB at --ctx {n_ctx}), "
            f"{available / 1e9:.1f} GB are available",
            hint="use a smaller --ctx, a smaller pair"
            + (f", or {without_draft} (the target without its draft)" if without_draft else ""),
        )
