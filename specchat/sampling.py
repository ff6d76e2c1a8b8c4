"""Turning logits into tokens, and the verifier of speculative decoding.

Greedy (temperature 0) compares arg-maxes. Sampling uses speculative sampling (Leviathan et al. 2023,
Chen et al. 2023): draft token x drawn from q is accepted with probability min(1, p(x) / q(x)); on
rejection the target's token is drawn from the residual norm(max(0, p - q)). The result is distributed
exactly as p, the target's processed distribution, whatever q is. A model-free draft (n-gram) is the
special case where q puts all its mass on x.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from .errors import EngineError

# Logit distances below the maximum within which top-k looks first (a softmax weight of e^-8 ... e^-32
# relative to the best at temperature 1): k = 40 nearly always lies within the first.
NEAR_MAX = (8.0, 16.0, 32.0)
# Shares of the best token's probability that top-p (without min-p) cuts at first, widening until the
# tokens above the cut hold top_p of the mass.
TOP_P_CUTS = (1e-2, 1e-4, 1e-8)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1 = off
    min_p: float = 0.05  # 0 = off
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def seeded(self) -> SamplingParams:
        """These settings with a seed that can be recorded: the one given, or (none, or a negative one:
        llama.cpp's -1, "random") one drawn now, so that a sampled reply is repeated by --seed with it.
        Greedy decoding draws nothing: no seed changes it, and a recorded one would suggest otherwise."""
        if self.greedy or (self.seed is not None and self.seed >= 0):
            return self
        return replace(self, seed=secrets.randbits(32))


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The processed distribution over the whole vocabulary: top-k, temperature, top-p, min-p."""
    logits = np.asarray(logits)
    vocab = logits.shape[-1]
    keep = top_k_indices(logits, params.top_k)  # every index when top-k is off or covers the vocabulary
    kept = logits[keep].astype(np.float64)
    top = kept.max()  # NaN if any is NaN; -inf logits are fine (probability 0), +inf or NaN are not
    if not np.isfinite(top):
        raise _no_finite_probabilities()
    # The best logit subtracted before the temperature divides: a tiny temperature (a request's 1e-320) made
    # logit / T overflow to inf, a failed request; now the best is 0 and the others at worst -inf (probability 0).
    with np.errstate(over="ignore"):
        scaled = (kept - top) / params.temperature
    probs = np.exp(scaled)
    probs /= probs.sum()
    chosen = _top_p_min_p(probs, params)
    out = np.zeros(vocab, dtype=np.float64)
    out[keep[chosen]] = probs[chosen] / probs[chosen].sum()  # normalised before it is spread over the vocabulary
    return out


def _top_p_min_p(probs: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Indices into `probs` that top-p (the smallest most-probable set whose mass reaches top_p) and min-p
    (no token below min_p times the best) keep, the most probable first, as if the whole vector were
    sorted. Only a prefix of that order is sorted: the tokens within min-p of the best, or, for top-p
    alone, those above ever smaller shares of the best until their mass reaches top_p. Every token at
    least as probable as a cut comes before every other one in the sorted order, so the prefix is exact;
    sorting a whole 150k vocabulary (--top-k 0) took 20 ms a row."""
    best = probs.max()
    if params.min_p > 0.0:
        cuts = [min(params.min_p, 1.0) * best]  # min-p keeps nothing below it: nothing further down matters
    elif params.top_p < 1.0:
        cuts = [best * share for share in TOP_P_CUTS] + [0.0]  # 0: every token, as a last resort
    else:
        return np.arange(len(probs))
    for i, cut in enumerate(cuts):
        prefix = np.flatnonzero(probs >= cut)
        order = prefix[np.argsort(-probs[prefix], kind="stable")]
        n_keep = len(order)
        if params.top_p < 1.0:
            reached = int(np.searchsorted(np.cumsum(probs[order]), params.top_p))
            if reached == len(order) and i + 1 < len(cuts):
                continue  # the top-p mass lies further down: look at more tokens
            n_keep = min(n_keep, reached + 1)
        return order[: max(1, n_keep)]
    raise AssertionError("unreachable: the last cut keeps every token")


def top_k_indices(logits: np.ndarray, k: int) -> np.ndarray:
    """The indices of the k largest logits. A partition of a whole 150k vocabulary costs over a
    millisecond a row, which a sampled verify batch pays per position: so the logits near the maximum
    are looked at first, and when k of them are that near, the k largest are among them."""
    if not 0 < k < len(logits):
        return np.arange(len(logits))
    top = logits.max()
    if np.isnan(top):  # a broken row: kept whole, so that probabilities() refuses it as it refuses any NaN
        return np.arange(len(logits))
    for margin in NEAR_MAX:
        near = np.flatnonzero(logits >= top - margin)
        if len(near) >= k:
            return _k_largest(near, logits[near], k)
    return _k_largest(np.arange(len(logits)), logits, k)


def _k_largest(ids: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """The k of `ids` (ascending) with the largest `values`, ties at the k-th place going to the lower ids as
    np.argmax's do: argpartition kept an arbitrary one of them, and --top-k 1 then left the greedy reply."""
    kth = np.partition(values, -k)[-k]
    above, tied = ids[values > kth], ids[values == kth]
    return np.concatenate([above, tied[: k - len(above)]])


def best_token(logits: np.ndarray) -> int:
    """The greedy token: the arg-max, checked as probabilities() checks a row. np.argmax returns a NaN's
    index (or an infinite logit's, or 0 where every token is masked): a broken row that greedy emitted
    in silence, where sampling names it."""
    best = int(np.argmax(logits))
    if not np.isfinite(logits[best]):
        raise _no_finite_probabilities()
    return best


def _no_finite_probabilities() -> EngineError:
    return EngineError("the model's output has no finite probabilities", hint="check the model file")


def draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from a (not necessarily normalised) non-negative vector. Only its non-zero entries are
    summed (a zero never changes a running sum, so the draw is the same as over the whole vector)."""
    support = np.flatnonzero(probs > 0)  # a boolean mask first: ten times faster than on the floats
    if not len(support):  # nothing to draw from (the callers never pass such a vector)
        raise ValueError("draw() from a vector with no positive entry")
    cumulative = np.cumsum(probs[support])
    index = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return int(support[min(index, len(support) - 1)])


class Sampler:
    """Sampling parameters plus the one random stream that draft, verifier and target share."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        # A negative seed means "random", as in llama.cpp (-1); numpy refuses negative seeds.
        seed = params.seed if params.seed is None or params.seed >= 0 else None
        self.rng = np.random.default_rng(seed)

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def pick(self, logits: np.ndarray) -> tuple[int, np.ndarray | None]:
        """A token from one row of logits, and the distribution it was drawn from (None when greedy)."""
        if self.greedy:
            return best_token(logits), None
        probs = probabilities(logits, self.params)
        return draw(probs, self.rng), probs

    def verify(
        self,
        draft: Sequence[int],
        q: Sequence[np.ndarray | None] | None,
        target_logits: np.ndarray,
        rejected_q: np.ndarray | None = None,
    ) -> tuple[int, int]:
        """How many draft tokens the target accepts, and the target's own next token.

        target_logits has len(draft) + 1 rows: row i scores position i of the draft, the last row is
        the position after the whole draft (the bonus token when everything is accepted).
        rejected_q: the draft's q at that last position when its token was cut as unacceptable.
        """
        if self.greedy:
            return verify_greedy(draft, target_logits)
        # Rows past the first rejection are never looked at: each is computed when verification reaches it.
        p = _Lazy(lambda i: probabilities(target_logits[i], self.params), len(target_logits))
        return verify_sampled(draft, q, p, self.rng, rejected_q)


def verify_greedy(draft: Sequence[int], target_logits: np.ndarray) -> tuple[int, int]:
    for i, token in enumerate(draft):
        best = best_token(target_logits[i])
        if best != token:
            return i, best
    return len(draft), best_token(target_logits[len(draft)])


def verify_sampled(
    draft: Sequence[int],
    q: Sequence[np.ndarray | None] | None,
    p: Sequence[np.ndarray],
    rng: np.random.Generator,
    rejected_q: np.ndarray | None = None,
) -> tuple[int, int]:
    for i, token in enumerate(draft):
        q_i = _aligned(q[i], len(p[i])) if q is not None and q[i] is not None else None
        q_x = 1.0 if q_i is None else float(q_i[token])
        p_x = float(p[i][token])
        if q_x > 0.0 and rng.random() < min(1.0, p_x / q_x):
            continue
        if q_i is None:
            residual = p[i].copy()
            residual[token] = 0.0
        else:
            residual = np.maximum(p[i] - q_i, 0.0)
        # An all-zero residual means p == q at this position, where rejection has probability zero.
        return i, draw(residual if residual.sum() > 0 else p[i], rng)
    last = p[len(draft)]
    if rejected_q is not None:
        residual = np.maximum(last - _aligned(rejected_q, len(last)), 0.0)
        return len(draft), draw(residual if residual.sum() > 0 else last, rng)
    return len(draft), draw(last, rng)


class _Lazy(Sequence):
    """A sequence whose items are computed on first use."""

    def __init__(self, make: Callable[[int], np.ndarray], length: int) -> None:
        self._make, self._length, self._made = make, length, {}

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i):
        if isinstance(i, slice) or not -self._length <= i < self._length:
            raise IndexError(i)
        i %= self._length
        if i not in self._made:
            self._made[i] = self._make(i)
        return self._made[i]


def _aligned(q: np.ndarray, size: int) -> np.ndarray:
    """Draft and target vocabularies may differ by a few padding ids; compare over the target's."""
    if len(q) == size:
        return q
    if len(q) > size:
        return q[:size]
    return np.concatenate([q, np.zeros(size - len(q), dtype=q.dtype)])
