"""llama.cpp's draftless `ngram-mod` as a drafter, so that benchmarks/simulate.py can compare auto with
llama-server's best draftless mode under cost regimes of machines we do not have.

It reproduces `common_speculative_impl_ngram_mod` of the llama.cpp vendored in llama-cpp-python 0.3.36
(common/speculative.cpp, common/ngram-mod.cpp; docs/ngram-mod-notes.md) for one slot whose pool starts
empty, as benchmarks/llama_server.py runs it by default (`--peer-state fresh`), with the server's
defaults n_match 24, n_min 48, n_max 64:
- begin: every n-gram of the prompt goes into the pool (key: n tokens, value: the token that followed);
- each round, once 32 tokens arrived since the last update, the n-grams of the new tokens are added;
- a draft follows the pool from the last n tokens, one token at a time, up to n_max; a chain shorter
  than n_min is no draft at all; the server cuts a draft to the tokens left in the reply minus one
  (specchat's loop cuts k the same way);
- five rounds in a row that kept fewer than 25 % of their draft empty the pool.

One difference: the real pool is a table of 4 Mi entries indexed by a hash of the key, with no check
of the key, so two n-grams can collide (about 0.1 % per lookup with one prompt in the pool); here the
key is the n-gram itself. The occupancy reset (> 25 % of 4 Mi entries used) never happens within one
reply of a few thousand tokens and is left out. Checked against the real server on the same prompts:
the same drafted and accepted counts (docs/bench.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.drafters.base import NO_OFFER, Draft, Offer, Outcome
from specchat.sampling import Sampler

N_MATCH = 24  # --spec-ngram-mod-n-match
N_MIN = 48  # --spec-ngram-mod-n-min
N_MAX = 64  # --spec-ngram-mod-n-max
UPDATE_EVERY = 32  # new tokens before the pool is updated (`i_last + 32 < cur_len`)
LOW_SHARE = 0.25  # a round that kept less than this share of its draft is a low round
LOW_ROUNDS = 5  # ... and this many in a row empty the pool


class NgramModPeer:
    """The peer behind the drafter contract; `offer` offers nothing (it is never combined by auto)."""

    name = "ngram"  # counted as prompt-lookup rounds in the simulator's statistics
    uses_model = False

    def __init__(self, n_match: int = N_MATCH, n_min: int = N_MIN, n_max: int = N_MAX) -> None:
        self.n, self.n_min, self.n_max = n_match, n_min, n_max
        self.reset()

    def reset(self) -> None:
        self.pool: dict[tuple[int, ...], int] = {}
        self.added_to = 0  # `i_last`: n-grams starting before this index are in the pool
        self.low_rounds = 0
        self.last_draft = 0
        self.begun = False

    def _add(self, tokens: Sequence[int], start: int, stop: int) -> None:
        for i in range(start, stop):
            self.pool[tuple(tokens[i : i + self.n])] = tokens[i + self.n]  # the last writer wins

    def prefill(self, context: Sequence[int]) -> None:
        self.begun = False  # a new reply: its first round pools the prompt

    def _begin(self, prompt: Sequence[int]) -> None:
        """The server's `begin`, with every prompt token (it is called once the prompt is evaluated)."""
        self.added_to = 0
        if len(prompt) >= self.n:
            self._add(prompt, 0, len(prompt) - self.n)
            self.added_to = len(prompt) - self.n
        self.begun = True

    def offer(self, context: Sequence[int], k_max: int) -> Offer:
        return NO_OFFER

    def propose(self, context: Sequence[int], k: int, sampler: Sampler | None = None) -> Draft:
        self.last_draft = 0
        if not self.begun:
            # specchat's first round verifies the prompt's last token; the server evaluates the whole
            # prompt, samples the first token, and only then drafts: this round drafts nothing.
            self._begin(context)
            return Draft(source=self.name)
        # The server's "prompt" is every token but the last sampled one, which opens the lookup window.
        seen, window = context[:-1], list(context[-self.n :])
        if len(seen) < self.n:
            return Draft(source=self.name)
        if self.added_to + UPDATE_EVERY < len(seen):
            self._add(seen, self.added_to, len(seen) - self.n)
            self.added_to = len(seen) - self.n
        chain: list[int] = []
        while len(chain) < self.n_max:
            token = self.pool.get(tuple(window[-self.n :]))
            if token is None:
                break
            chain.append(token)
            window.append(token)
        if len(chain) < self.n_min:
            return Draft(source=self.name)
        self.last_draft = len(chain)  # the server judges acceptance against the chain before its cut
        tokens = chain[:k]
        return Draft(tokens, [None] * len(tokens), source=self.name)

    def learn(self, outcome: Outcome) -> None:
        if not outcome.draft.tokens or not self.last_draft:
            return
        if outcome.accepted / self.last_draft < LOW_SHARE:
            self.low_rounds += 1
            if self.low_rounds >= LOW_ROUNDS:
                self.pool, self.low_rounds, self.added_to = {}, 0, 0
        else:
            self.low_rounds = 0
