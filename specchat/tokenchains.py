"""Hash chains over token ids: where did the last few tokens occur before, and what followed them?

The structure is LZ77's (zlib's sliding window): `head[bucket]` holds the latest position whose preceding
ORDER tokens hash to that bucket, and `prev[slot]` the distance back to the one before it with the same
bucket. Appending is O(new tokens) and vectorized; a lookup walks at most WALK links, then measures the
real match lengths and gathers the continuations with numpy. Positions are absolute and only grow; the
tokens live in a ring of `cap` slots, so the oldest fall out of the window (`start`) as new ones come in,
and a chain simply ends at the first position that is gone. The arrays may be plain numpy arrays (the
current conversation) or memory-mapped files (historyindex.py): this module only reads them.

A position is the index of a FOLLOWER: chains link the token after each ORDER-gram, so a lookup of the
text's last ORDER tokens finds only earlier occurrences (the current one has no follower yet).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEP = -1  # between documents (messages): never a token id, so no match or continuation crosses it
ORDER = 4  # tokens hashed per n-gram: shorter matches are too weak to draft from
WALK = 64  # most recent occurrences compared: a chain of a common n-gram can be very long
LONGEST = 32  # match lengths are measured up to here: beyond it, every match is "the same place"
_PRIME = np.uint64(1_000_003)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


_MASK = (1 << 64) - 1


def bucket(window: list[int], bits: int) -> int:
    """buckets() of one window, in plain integers: a lookup hashes one n-gram, and numpy's per-call cost
    would be most of the lookup."""
    h = 0
    for token in window:
        h = (h * int(_PRIME) + (token & _MASK)) & _MASK
    return ((h * int(_GOLDEN)) & _MASK) >> (64 - bits)


def buckets(windows: np.ndarray, bits: int) -> np.ndarray:
    """Bucket of each row of ORDER token ids (Fibonacci hashing of a polynomial hash; wraps mod 2**64)."""
    h = np.zeros(len(windows), dtype=np.uint64)
    for j in range(windows.shape[1]):
        h = h * _PRIME + windows[:, j].astype(np.uint64)
    return (h * _GOLDEN >> np.uint64(64 - bits)).astype(np.int64)


@dataclass(frozen=True)
class Links:
    """What appending tokens at positions [base, base + len(tokens)) writes: per new slot the distance
    to the previous position of its bucket (0: none), and the new heads (position + 1; 0 is empty)."""

    base: int
    tokens: np.ndarray
    dist: np.ndarray
    head_buckets: np.ndarray
    head_values: np.ndarray


@dataclass
class Chains:
    tokens: np.ndarray  # int32 ring of `cap` slots
    prev: np.ndarray  # uint32 distances, parallel to tokens
    head: np.ndarray  # int64 per bucket: latest position + 1 (0: empty)
    bits: int
    cap: int
    start: int = 0  # oldest position still in the window
    total: int = 0  # positions written so far (the next one to write)

    def _at(self, positions: np.ndarray) -> np.ndarray:
        """Tokens at positions (SEP where outside the window)."""
        inside = (positions >= self.start) & (positions < self.total)
        return np.where(inside, self.tokens[np.where(inside, positions, 0) % self.cap], SEP)

    def candidates(self, tail: np.ndarray) -> np.ndarray:
        """Followers of the latest (at most WALK) earlier occurrences of the last ORDER tokens of `tail`,
        most recent first. Hash collisions are included: lengths() tells them apart."""
        if len(tail) < ORDER or (tail[-ORDER:] == SEP).any() or self.total == 0:
            return np.empty(0, dtype=np.int64)
        found: list[int] = []
        pos, steps = int(self.head[bucket(tail[-ORDER:].tolist(), self.bits)]) - 1, 0
        # Links are only trusted while they go strictly back inside the window: a link left by a writer
        # that crashed, or a slot another process is rewriting, ends or skips a chain, never loops it.
        while pos >= self.start + ORDER and len(found) < WALK and steps < 4 * WALK:
            if pos < self.total:
                found.append(pos)
            dist = int(self.prev[pos % self.cap])
            if dist == 0:
                break
            pos, steps = pos - dist, steps + 1
        return np.asarray(found, dtype=np.int64)

    def lengths(self, positions: np.ndarray, tail: np.ndarray) -> np.ndarray:
        """How many tokens before each follower equal the end of `tail` (up to LONGEST)."""
        span = min(LONGEST, len(tail))
        back = positions[:, None] - 1 - np.arange(span)
        equal = self._at(back) == tail[::-1][None, :span]
        return np.where(equal.all(axis=1), span, np.argmin(equal, axis=1))

    def continuations(self, positions: np.ndarray, k: int) -> np.ndarray:
        """k tokens from each follower on, SEP from the end of its document or the window on."""
        rows = self._at(positions[:, None] + np.arange(k))
        rows[np.logical_or.accumulate(rows == SEP, axis=1)] = SEP
        return rows

    def links(self, new: np.ndarray) -> Links:
        """The links that appending `new` adds (nothing is written here: the caller stores them)."""
        base, m = self.total, len(new)
        lead = self._at(np.arange(base - ORDER, base))  # the n-grams that end in the new tokens start here
        text = np.concatenate([lead, new.astype(np.int64)])
        follow = np.arange(ORDER, len(text))  # index in `text` of each new token, as a follower
        windows = np.lib.stride_tricks.sliding_window_view(text, ORDER)[follow - ORDER]
        keep = (windows != SEP).all(axis=1) & (text[follow] != SEP)
        where = base + follow[keep] - ORDER
        bucket = buckets(windows[keep], self.bits)
        order = np.argsort(bucket, kind="stable")  # positions stay increasing within a bucket
        bucket, where = bucket[order], where[order]
        first = np.r_[True, bucket[1:] != bucket[:-1]] if len(bucket) else np.empty(0, dtype=bool)
        before = np.empty_like(where)
        before[~first] = where[:-1][~first[1:]]
        old = self.head[bucket[first]] - 1
        # A head at or after `base` was left by a writer that died before committing: it is not a link.
        before[first] = np.where(old < base, old, -1)
        gap = where - before
        dist = np.zeros(m, dtype=np.uint32)
        dist[where - base] = np.where((before >= 0) & (gap < self.cap), gap, 0)
        last = np.r_[bucket[1:] != bucket[:-1], True] if len(bucket) else np.empty(0, dtype=bool)
        return Links(base, new.astype(np.int32), dist, bucket[last], where[last] + 1)


def slot_ranges(base: int, m: int, cap: int) -> list[tuple[int, int, int]]:
    """(first slot, offset in the new tokens, count) of the at most two runs that positions
    [base, base + m) occupy in a ring of cap slots."""
    runs, offset = [], 0
    while offset < m:
        slot = (base + offset) % cap
        count = min(m - offset, cap - slot)
        runs.append((slot, offset, count))
        offset += count
    return runs


class GrowingChains(Chains):
    """Chains in memory that never evict: the current conversation (a context window at most)."""

    def __init__(self, bits: int = 16) -> None:
        super().__init__(
            np.zeros(1024, np.int32), np.zeros(1024, np.uint32), np.zeros(1 << bits, np.int64), bits, 1 << 62
        )

    def append(self, new: np.ndarray) -> None:
        need = self.total + len(new)
        if need > len(self.tokens):
            size = max(need, 2 * len(self.tokens))
            self.tokens = np.resize(self.tokens, size)
            self.prev = np.resize(self.prev, size)
        if len(new) == 1:
            self._append_one(int(new[0]))
            return
        links = self.links(new)
        self.tokens[self.total : need] = links.tokens
        self.prev[self.total : need] = links.dist
        self.head[links.head_buckets] = links.head_values
        self.total = need

    def _append_one(self, token: int) -> None:
        """links() for one token, in plain integers: a reply adds one token most rounds, and numpy's
        per-call cost made that 80 us a round. Same links (tests/test_suffix.py checks it)."""
        pos, dist = self.total, 0
        window = self.tokens[pos - ORDER : pos].tolist() if pos >= ORDER else [SEP]
        if SEP not in window and token != SEP:
            slot = bucket(window, self.bits)
            before = int(self.head[slot]) - 1  # -1: empty; never at or after pos (nothing is pending here)
            if 0 <= before < pos and pos - before < self.cap:
                dist = pos - before
            self.head[slot] = pos + 1
        self.tokens[pos], self.prev[pos] = token, dist
        self.total = pos + 1
