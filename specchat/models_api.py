"""The small contract between the pure speculative loop and any language model (llama.cpp or a fake)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class LanguageModel(Protocol):
    """A causal LM with a KV cache that holds `n_past` tokens of one sequence."""

    n_ctx: int
    n_vocab: int

    @property
    def n_past(self) -> int: ...

    def eval(self, tokens: Sequence[int], n_logits: int) -> np.ndarray:
        """Append tokens to the cache; return logits (n_logits x n_vocab) of the last n_logits of them."""
        ...

    def truncate(self, n: int) -> None:
        """Keep only the first n tokens in the cache (KV rollback)."""
        ...

    def is_eog(self, token: int) -> bool: ...


STAND_IN = 0  # what a model reads for a token beyond its vocabulary (readable_by)


def readable_by(model: LanguageModel, tokens: Sequence[int]) -> Sequence[int]:
    """The tokens as `model` can read them. The pair check lets a draft know up to 128 fewer tokens than the
    target (compat.py); a target token beyond the draft's vocabulary (an added special token) made the
    draft's decode fail, and the reply with it. The draft reads a stand-in there: only its guesses can
    suffer, and the target checks those."""
    limit = getattr(model, "n_vocab", None)
    if limit is None or not tokens or max(tokens) < limit:
        return tokens
    return [token if token < limit else STAND_IN for token in tokens]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case, compared in C
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class CachedModel:
    """A model plus the exact tokens in its cache, so any new context costs rollback + the difference."""

    def __init__(self, model: LanguageModel) -> None:
        self.model = model
        self.tokens: list[int] = []
        # The logits after the cache's last token, where the feed that put it there asked for them (one row:
        # the prefill's). The first round needs exactly that row: kept, it costs no decode of its own.
        self._row: np.ndarray | None = None

    def feed(self, context: Sequence[int], n_logits: int) -> np.ndarray:
        """Make the cache hold `context`; return logits for its last n_logits positions."""
        first = len(context) - n_logits + 1  # the text whose last token's row comes first
        if n_logits > 0 and self.holds_row(context[:first]):
            row = self._row[None].copy()  # a copy: the caller may change it, and a retry may read it again
            if n_logits == 1:
                return row
            self._row = None  # an eval that raises leaves the cache past that row
            self.model.truncate(first)  # as below: clears cells an interrupted decode may have left
            rows = self.model.eval(context[first:], n_logits - 1)
            self.tokens = list(context)
            self._row = rows[-1] if n_logits == 2 else None
            return np.concatenate([row, rows])
        keep = self.reusable(context, n_logits)
        # Cache = context[:keep] from the rollback on, said before it: a Ctrl-C that lands as it returns, or
        # an eval that raises, must leave no claim on removed cells for the next feed to build on.
        self.tokens, self._row = list(context[:keep]), None
        self.model.truncate(keep)  # cheap, and also clears cells an interrupted decode may have left
        rows = self.model.eval(context[keep:], n_logits)
        self.tokens = list(context)
        self._row = rows[-1] if n_logits == 1 else None  # a single row: keeping it keeps no batch's rows alive
        return rows

    def holds_row(self, context: Sequence[int]) -> bool:
        """The cache holds exactly `context` and the logits after it: the next token needs no decode."""
        n = len(context)
        return self._row is not None and n == len(self.tokens) == self.model.n_past and self.tokens == list(context)

    def reusable(self, context: Sequence[int], n_logits: int = 0) -> int:
        """How many leading tokens of `context` the cache holds already: a feed evaluates only the rest."""
        # n_past bounds it too: someone else (the cost-model probe) may have rolled the cache back.
        return min(common_prefix(self.tokens, context), len(context) - n_logits, self.model.n_past)

    def forget(self) -> None:
        """Empty the cache (a new conversation, or a run that must start cold)."""
        self.model.truncate(0)
        self.tokens = []
