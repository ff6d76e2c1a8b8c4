"""llama.cpp's log as specchat keeps it: shown on stderr only when debugging, its error lines kept to say why
a load failed. No llama.cpp here: engine.py (the only module that imports it) hands each line of its log
callback to keep()."""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from typing import ClassVar

from .errors import EngineError

GGML_LOG_LEVEL_ERROR = 4  # ggml.h's enum ggml_log_level (llama-cpp-python does not export it)


class Log:
    """The log's process-wide state: whether to show it (engine.set_debug), and its error lines."""

    debug = False
    # llama.cpp's error lines since the last load began: why a load failed (bounded: a server runs for weeks)
    errors: ClassVar[deque[str]] = deque(maxlen=64)


def keep(level: int, text: bytes) -> None:
    """One line of llama.cpp's log (its log callback's)."""
    # llama.cpp logs every tensor on load; keep stderr for specchat's own messages unless debugging.
    if Log.debug and text:
        os.write(2, text)
    if level == GGML_LOG_LEVEL_ERROR and text:
        Log.errors.append(text.decode("utf-8", errors="replace").strip())


# llama.cpp's words for what a newer build may know -> what the hint calls it
UNKNOWN_TO_LLAMA_CPP = {
    "unknown model architecture": "architecture",
    "unknown pre-tokenizer type": "pre-tokenizer",
    "unknown tokenizer": "tokenizer",
}


def load_error(path: Path) -> EngineError:
    """Why llama.cpp refused a file whose header passed gguf.check: its own words (an architecture that this
    build does not know is the usual reason for a model newer than llama-cpp-python)."""
    reason = _load_reason(list(Log.errors))
    unknown = next((name for words, name in UNKNOWN_TO_LLAMA_CPP.items() if words in reason), None)
    if reason.endswith("architecture: ''"):  # none named (no general.architecture): no newer llama.cpp reads it
        reason, hint = "it names no model architecture (general.architecture)", "give a language model's GGUF file"
    elif unknown is not None:  # a model newer than this llama.cpp: often a new pre-tokenizer before a new architecture
        hint = f"this llama-cpp-python cannot run that {unknown}: a newer one may (pip install -U llama-cpp-python)"
    else:  # `models --verify` hashes a pair's files, not a --target/--draft of the user's own
        hint = "check that it is a complete GGUF file (a pair's: `specchat models --verify`); `specchat --debug ...` "
        hint += "shows why"
    return EngineError(f"llama.cpp could not load {path}" + (f": {reason}" if reason else ""), hint=hint)


def _load_reason(lines: list[str]) -> str:
    """llama.cpp's reason; where its GGUF reader refused the file (a key given twice, a tensor out of place: rules
    gguf.check leaves to it), the loader says "failed to load model from PATH" and the reader's line says why."""
    reason = next((line.split("error loading model: ")[-1] for line in lines if "error loading model" in line), "")
    said = (line.split(": ", 1)[1] for line in lines if line.startswith("gguf_") and ": " in line)
    return next(said, reason) if reason.startswith("llama_model_loader: failed to load model") else reason
