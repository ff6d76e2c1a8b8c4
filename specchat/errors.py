"""The one error type the CLI boundary knows how to show: a message, a hint, an exit code."""

from __future__ import annotations


class SpecchatError(Exception):
    """A user-facing failure: shown as one line plus a hint, never as a traceback."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(SpecchatError):
    """Bad flags or arguments (exit code 2, like click's own usage errors)."""

    exit_code = 2


class RegistryError(SpecchatError):
    """models.toml or the user overlay is invalid."""


class UnknownPairError(UsageError, RegistryError):
    """A pair's name (--pair, PAIR) that names no pair, or an empty one: a bad value, exit 2 as --mode's."""


class ModelFileError(SpecchatError):
    """A model file is missing, unreadable, the wrong size or has the wrong checksum."""


class DownloadError(SpecchatError):
    """No source could deliver a model file."""


class EngineError(SpecchatError):
    """llama.cpp refused to load a model or to evaluate a batch."""


class PairError(SpecchatError):
    """Target and draft cannot be used together for speculative decoding."""


class ContextFullError(SpecchatError):
    """The prompt does not fit in the context window."""
