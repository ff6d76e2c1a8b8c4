"""llama.cpp's draftless modes as drafters, so that benchmarks/simulate.py can compare auto with
llama-server's own best draftless mode under cost regimes of machines we do not have.

Both reproduce the llama.cpp vendored in llama-cpp-python 0.3.36 (common/speculative.cpp,
common/ngram-mod.cpp, common/ngram-map.cpp; docs/ngram-mod-notes.md) for one slot that starts empty, as
benchmarks/llama_server.py runs them by default (`--peer-state fresh`), with the server's defaults.
specchat's first round verifies the prompt's last token; the server evaluates the whole prompt, samples
the first token, and only then drafts: so each peer's first round drafts nothing and calls the server's
`begin` with the whole prompt. The server cuts a draft to the tokens left in the reply minus one;
specchat's loop cuts k the same way.

`NgramModPeer` (`--spec-type ngram-mod`: n_match 24, n_min 48, n_max 64):
- begin: every n-gram of the prompt goes into the pool (key: n tokens, value: the token that followed);
- each round, once 32 tokens arrived since the last update, the n-grams of the new tokens are added;
- a draft follows the pool from the last n tokens, one token at a time, up to n_max; a chain shorter
  than n_min is no draft at all;
- five rounds in a row that kept fewer than 25 % of their draft empty the pool.
One difference: the real pool is a table of 4 Mi entries indexed by a hash of the key, with no check
of the key, so two n-grams can collide (about 0.1 % per lookup with one prompt in the pool); here the
key is the n-gram itself. The occupancy reset (> 25 % of 4 Mi entries used) never happens within one
reply of a few thousand tokens and is left out.

`NgramMapKPeer` (`--spec-type ngram-map-k`, key-only: key 12 tokens, draft 48), exactly, hash included:
- a key is the last 11 tokens and the sampled one; it is looked up in a table of 2^18 buckets (32-bit
  LCG hash, first writer wins), verified token by token, else searched backwards among positions not
  yet hashed (the prompt's first, then the reply's); a match must end 49+ tokens before the text does;
- every round hashes the positions up to 61 tokens before the end (newest first);
- the draft is the 48 tokens after the match, cut to what the same key had accepted the last time it
  drafted (a key that once had 0 accepted never drafts again).

Checked against the real server on the same prompts (docs/bench.md).
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
    """ngram-mod behind the drafter contract; `offer` offers nothing (a peer is never one of auto's arms)."""

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

    def warm(self, context: Sequence[int]) -> None:
        pass

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


KEY = 12  # --spec-ngram-map-k-size-n
VALUE = 48  # --spec-ngram-map-k-size-m
BUCKETS = 1 << 18  # COMMON_NGRAM_HASH_MAP_SIZE
LCG = 2654435761


def _lcg(tokens: Sequence[int]) -> int:
    """common_ngram_map_hash: uint32 arithmetic, then the bucket."""
    value = 0
    for token in tokens:
        value = (value * LCG + token) & 0xFFFFFFFF
    return value % BUCKETS


class NgramMapKPeer:
    """ngram-map-k (common_ngram_map, key-only mode) behind the drafter contract."""

    name = "ngram"
    uses_model = False

    def __init__(self, key: int = KEY, value: int = VALUE) -> None:
        self.n, self.m = key, value
        self.reset()

    def reset(self) -> None:
        self.key_map: dict[int, int] = {}  # bucket -> position of a key (absent: 0, empty)
        self.hashed_to = 0  # key_map_last_idx
        self.prompt_len = 0  # size_last_begin
        self.keys: list[list[int]] = []  # [position of the key's first occurrence, its n_accepted]
        self.last: int | None = None  # index in keys of the key that drafted last
        self.begun = False

    def warm(self, context: Sequence[int]) -> None:
        pass

    def prefill(self, context: Sequence[int]) -> None:
        self.begun = False

    def offer(self, context: Sequence[int], k_max: int) -> Offer:
        return NO_OFFER

    def _scan(self, text: Sequence[int], key: list[int], first: int, above: int) -> int:
        """The latest position j in (above, first] where the key occurs (0: none), as the server scans."""
        for j in range(first, above, -1):
            if list(text[j : j + self.n]) == key:
                return j
        return 0

    def _hash(self, text: Sequence[int], first: int, above: int) -> None:
        for j in range(first, above, -1):
            self.key_map.setdefault(_lcg(text[j : j + self.n]), j)  # the first writer keeps the bucket

    def propose(self, context: Sequence[int], k: int, sampler: Sampler | None = None) -> Draft:
        self.last = None
        if not self.begun:
            self.begun, self.prompt_len = True, len(context)  # begin: nothing to clean in an empty slot
            return Draft(source=self.name)
        text, n, m = context[:-1], self.n, self.m
        end = len(text)
        if end < 2 * n + m:
            return Draft(source=self.name)
        key = [*text[end - n + 1 :], context[-1]]
        at = self.key_map.get(_lcg(key), 0)
        match = at if at != 0 and at < end - n - m - 1 and list(text[at : at + n]) == key else 0
        in_prompt = self.prompt_len > n + m + 1
        if not match and in_prompt:
            match = self._scan(text, key, self.prompt_len - n - m - 1, self.hashed_to)
        if not match:
            match = self._scan(text, key, end - n - m - 1, max(self.prompt_len, self.hashed_to))
        if in_prompt:
            self._hash(text, self.prompt_len - n - m - 1, self.hashed_to)
        self._hash(text, end - n - m - 1, max(self.prompt_len, self.hashed_to))
        self.hashed_to = max(end - n - m - 1, self.hashed_to)
        if not match:
            return Draft(source=self.name)
        index = next((i for i, (at, _) in enumerate(self.keys) if list(text[at : at + n]) == key), None)
        if index is None:
            index = len(self.keys)
            self.keys.append([match, m])
        self.last = index
        tokens = list(text[match + n : match + n + min(m, self.keys[index][1])])[:k]
        return Draft(tokens, [None] * len(tokens), source=self.name)

    def learn(self, outcome: Outcome) -> None:
        if self.last is not None and outcome.draft.tokens:
            self.keys[self.last][1] = outcome.accepted  # only ever what the last draft of this key kept
