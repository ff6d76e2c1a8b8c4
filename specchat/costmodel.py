"""The cost model of speculative decoding, measured on this machine.

    c     = draft step time / target step time
    v(n)  = time for the target to verify a batch of n tokens / one target step
    E(a,k) = (1 - a^(k+1)) / (1 - a)          expected tokens per round at acceptance rate a
    S(k)  = E(a, k) / (k c + v(k + 1))         predicted speedup over the target alone

On a GPU v(n) stays near 1 for small n (memory-bound) and c is small, so S > 1. On a small CPU the
batch is compute-bound, v(n) grows almost like n, and drafting can lose even at high acceptance.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .models_api import LanguageModel


def expected_tokens(a: float, k: int) -> float:
    """E(a, k): tokens per round (accepted drafts + the target's own), acceptance a, draft length k."""
    if k <= 0:
        return 1.0
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


@dataclass
class CostModel:
    target_step_s: float
    draft_step_s: float | None
    verify_s: dict[int, float] = field(default_factory=dict)  # batch size n -> seconds

    @property
    def c(self) -> float | None:
        return self.draft_step_s / self.target_step_s if self.draft_step_s is not None else None

    def v(self, n: int) -> float:
        if n in self.verify_s:
            return self.verify_s[n] / self.target_step_s
        # Beyond the measured range: extrapolate linearly from the last two points.
        largest = max(self.verify_s)
        slope = (self.verify_s[largest] - self.verify_s[largest - 1]) / self.target_step_s
        return self.verify_s[largest] / self.target_step_s + slope * (n - largest)

    def predicted_speedup(self, a: float, k: int, c: float | None = None) -> float:
        """S(k) for a model drafter (c from the measurement) or any drafter whose step costs c."""
        if k <= 0:
            return 1.0
        cost = k * (self.c if c is None else c) + self.v(k + 1)
        return expected_tokens(a, k) / cost

    def as_dict(self) -> dict:
        return {
            "target_step_s": round(self.target_step_s, 6),
            "draft_step_s": round(self.draft_step_s, 6) if self.draft_step_s is not None else None,
            "c": round(self.c, 4) if self.c is not None else None,
            "v": {str(n): round(self.v(n), 4) for n in sorted(self.verify_s)},
        }


def _timed_eval(model: LanguageModel, tokens: Sequence[int], n_logits: int, base: int, repeats: int) -> float:
    """Median seconds of evaluating `tokens` after a cache of `base` tokens (rolled back every time)."""
    times = []
    for _ in range(repeats):
        model.truncate(base)
        start = time.perf_counter()
        model.eval(tokens, n_logits)
        times.append(time.perf_counter() - start)
    model.truncate(base)
    return statistics.median(times)


def measure(
    target: LanguageModel,
    draft: LanguageModel | None,
    context: Sequence[int],
    *,
    max_batch: int = 16,
    repeats: int = 3,
    sizes: Sequence[int] | None = None,
) -> CostModel:
    """Time single steps and verify batches of 1..max_batch tokens (or only `sizes`) after a real context."""
    probe = list(context[-max_batch:]) * (max_batch // max(1, len(context[-max_batch:])) + 1)
    base = len(context)
    target.truncate(0)
    target.eval(context, 0)
    target_step = _timed_eval(target, probe[:1], 1, base, repeats)
    verify = {n: _timed_eval(target, probe[:n], n, base, repeats) for n in (sizes or range(1, max_batch + 1))}
    target.truncate(0)
    draft_step = None
    if draft is not None:
        draft.truncate(0)
        draft.eval(context, 0)
        draft_step = _timed_eval(draft, probe[:1], 1, base, repeats)
        draft.truncate(0)
    return CostModel(target_step, draft_step, verify)
