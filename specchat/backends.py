"""Where loaded models come from: llama.cpp by default, or a plugin that claims a file.

The hook is the one simonw/llm's tests use to register MockModel: a plugin registers a backend, here
through the entry-point group `specchat.backends`, the environment variable SPECCHAT_PLUGINS (module
names, comma-separated, imported for their `register()` calls: handy for subprocess tests), or
`register()` in-process. The first registered backend that claims a path loads it; llama.cpp claims
every other file. A backend returns an object with the Engine's interface (see engine.Engine).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Protocol


class Backend(Protocol):
    name: str

    def claims(self, path: Path) -> bool:
        """Whether this backend loads this file."""
        ...

    def load(self, path: Path, config: Any, interrupt: Any) -> Any:
        """An engine for the file (config: engine.EngineConfig, interrupt: interrupt.Interrupt)."""
        ...

    def memory_needed(self, path: Path, n_ctx: int) -> tuple[int, int] | None:
        """(weights bytes, KV-cache bytes at n_ctx) in RAM, or None when not known."""
        ...

    def trained_context(self, path: Path) -> int | None:
        """The context length the model was trained for, or None when not known (optional method)."""
        ...

    def vocabulary(self, path: Path) -> Any:
        """The file's tokenizer alone, without its weights, for the pair check (compat.Vocabulary, with a
        close()); optional method: without it, a command that loads no model does not check the pair."""
        ...


class LlamaCppBackend:
    name = "llama.cpp"

    def claims(self, path: Path) -> bool:
        return True

    def load(self, path: Path, config: Any, interrupt: Any) -> Any:
        from .engine import Engine

        return Engine(path, config, interrupt)

    def memory_needed(self, path: Path, n_ctx: int) -> tuple[int, int] | None:
        from .engine import gpu_offload_supported
        from .gguf import memory_needed

        return None if gpu_offload_supported() else memory_needed(path, n_ctx)

    def trained_context(self, path: Path) -> int | None:
        from .gguf import trained_context

        return trained_context(path)

    def vocabulary(self, path: Path) -> Any:
        from .engine import Vocab

        return Vocab(path)


class _Plugins:
    """The registered backends; entry points and SPECCHAT_PLUGINS are read once, on first use."""

    def __init__(self) -> None:
        self.backends: list[Backend] = []
        self.discovered = False

    def discover(self) -> None:
        if self.discovered:
            return
        self.discovered = True
        from importlib.metadata import entry_points

        for entry in entry_points(group="specchat.backends"):
            register(entry.load()())
        for module in filter(None, (m.strip() for m in os.environ.get("SPECCHAT_PLUGINS", "").split(","))):
            try:
                importlib.import_module(module)
            except ImportError as exc:  # a misspelt name was "internal error: ... a bug in specchat"
                from .errors import SpecchatError

                raise SpecchatError(
                    f"SPECCHAT_PLUGINS: cannot import {module!r}: {exc}",
                    hint="SPECCHAT_PLUGINS names Python modules (comma-separated) on the import path; "
                    "unset it to use llama.cpp alone",
                ) from exc


_PLUGINS = _Plugins()
_DEFAULT = LlamaCppBackend()


def register(backend: Backend) -> None:
    """Add a backend in front of the others (a later registration of the same name replaces it)."""
    unregister(backend.name)
    _PLUGINS.backends.insert(0, backend)


def unregister(name: str) -> None:
    _PLUGINS.backends[:] = [b for b in _PLUGINS.backends if b.name != name]


def for_path(path: Path) -> Backend:
    _PLUGINS.discover()
    return next((b for b in _PLUGINS.backends if b.claims(path)), _DEFAULT)
