"""Token ids to text as they stream, never splitting a multi-byte UTF-8 character across tokens."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from typing import Protocol


class Pieces(Protocol):
    def piece(self, token: int) -> bytes: ...


class TextStream:
    """Token ids to text without splitting multi-byte UTF-8 characters across tokens. A character still
    unfinished at the end (max_tokens cut it) is left out, as llama-cpp-python's completions do: decoded
    as final, it ended the reply in U+FFFD."""

    def __init__(self, engine: Pieces) -> None:
        self.engine = engine
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self.decoder.decode(self.engine.piece(token))

    def guess(self, tokens: Sequence[int]) -> str:
        """The text these tokens would add after those pushed, without pushing them (a rejected draft guess):
        a character begun by the pushed tokens is completed, one the guess leaves unfinished left out.
        Decoded on their own, the tokens of a guess inside a character (an emoji, a rarer CJK character)
        showed U+FFFD."""
        return "".join(self.guessed(tokens))

    def guessed(self, tokens: Sequence[int]) -> list[str]:
        """guess() token by token (`--jsonl`'s rejected tokens): a character is whole in the token that ends it,
        "" in the others, so the texts join to guess()'s."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="ignore")
        decoder.setstate(self.decoder.getstate())
        return [decoder.decode(self.engine.piece(t)) for t in tokens]
