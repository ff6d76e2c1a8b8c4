"""The check of a history index at open (historyindex.py): does a sample of its committed window add up?

It reads a few runs of neighbours (a few pages of each file, not thousands of random ones: an index on a
cold disk opens as fast as a small one) and follows the links and hash heads of a few hundred of them.
"""

from __future__ import annotations

import numpy as np

from .tokenchains import ORDER, SEP, Chains, buckets

# Positions checked at open: RUNS runs of RUN neighbours each, of which LINKS have their links and hash heads
# followed (random by nature). A window this short is checked whole.
RUNS, RUN, LINKS = 16, 256, 256
NEWEST = 256  # the latest positions are always checked: a torn write is most likely there


def damage_in(chains: Chains, n_vocab: int | None) -> str | None:
    """What does not add up in a sample of the committed window (None: nothing), as the writers leave it:
    ids are SEP or in the vocabulary; a position whose n-gram holds no SEP has its bucket's head at or
    after it, and its link (if any) goes back less than the ring to a position of the same bucket; any
    other position has no link. Damage in a few unsampled slots goes unnoticed, and costs no more than a
    bad guess (the target checks every drafted token; ids beyond the vocabulary end a copy). A writer that
    died half-way can leave a link the next append trusts; one found reads as damage, and the index is
    rebuilt from the log, which is always safe."""
    start, total, cap = chains.start, chains.total, chains.cap
    ids = chains._at(_sample(start, total))
    if ((ids < SEP) | ((ids >= n_vocab) if n_vocab else False)).any():
        return "token ids outside the vocabulary"
    followers = _sample(start + ORDER, total)  # positions whose n-gram is in the window
    grams = chains._at(followers[:, None] + np.arange(-ORDER, 1))
    kept = (grams != SEP).all(axis=1)
    dist = chains.prev[followers % cap].astype(np.int64)
    if (dist[~kept] != 0).any() or (dist >= cap).any():
        return "links where none can be"
    where, dist, bucket = followers[kept], dist[kept], buckets(grams[kept, :ORDER], chains.bits)
    if len(where) > LINKS:  # heads and links lie anywhere in their files: a few hundred reads, not thousands
        some = np.random.default_rng().choice(len(where), LINKS, replace=False)
        where, dist, bucket = where[some], dist[some], bucket[some]
    head = chains.head[bucket]
    if ((head <= where) | (head > total + cap)).any():  # a dead writer's heads are at most a ring ahead
        return "hash heads that do not add up"
    back = where - dist
    linked = (dist > 0) & (back >= start)  # a link out of the window ends the chain: nothing to compare
    back_grams = chains._at(back[linked][:, None] + np.arange(-ORDER, 1))
    seen = (back[linked] >= start + ORDER)[:, None] | (np.arange(-ORDER, 1) == 0)  # evicted: not compared
    ok = (back_grams != SEP) | ~seen
    whole = back[linked] >= start + ORDER
    same = buckets(np.where(ok, back_grams, 0)[whole, :ORDER], chains.bits) == bucket[linked][whole]
    if not ok.all() or not same.all():
        return "links between different n-grams"
    return None


def _sample(first: int, end: int) -> np.ndarray:
    """Positions [first, end): all of them, or RUNS runs of RUN at random places (another set each open, so
    damage that one open misses is not missed for good) and the NEWEST."""
    if end - first <= RUNS * RUN + NEWEST:
        return np.arange(first, max(first, end), dtype=np.int64)
    starts = np.sort(np.random.default_rng().integers(first, end - NEWEST - RUN, RUNS))
    return np.concatenate([(starts[:, None] + np.arange(RUN)).ravel(), np.arange(end - NEWEST, end)])
