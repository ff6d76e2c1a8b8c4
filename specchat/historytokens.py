"""What the history index is keyed by and holds, from the target's tokenizer: its vocabulary's fingerprint (one
index per tokenizer) and the tokens of logged messages. `bench --history` builds its index with these too."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

from .tokenchains import SEP

FINGERPRINT_SAMPLE = 2048  # vocabulary entries hashed: enough to tell tokenizers apart, cheap to read


def fingerprint(model) -> str | None:
    """A short hash of the vocabulary (size and a spread sample of entries): models of one family share
    it, another tokenizer gets another index. None: the engine cannot show its vocabulary."""
    token_text = getattr(model, "token_text", None)
    if token_text is None:
        return None
    n = int(model.n_vocab)
    ids = sorted(set(range(min(n, 256))) | set(np.linspace(0, n - 1, FINGERPRINT_SAMPLE, dtype=int).tolist()))
    digest = hashlib.sha256(f"{n}:{getattr(model, 'vocab_type', '')}".encode())
    for token in ids:
        digest.update(token_text(token) + b"\0")
    return digest.hexdigest()[:16]


def message_tokens(tokenize: Callable[[str], list[int]], texts: list[str]) -> np.ndarray:
    """What the index holds for these messages: each text tokenized on its own (no chat template), then
    SEP, where a copied continuation stops. `bench --history FILE` builds its temporary index with this
    too, so the bench drafts from exactly what `run` would have indexed from the same messages."""
    pieces = []
    for text in texts:
        pieces += [np.asarray(tokenize(text), dtype=np.int64), np.array([SEP])]
    return np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int64)
