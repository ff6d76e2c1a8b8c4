"""Prompt lookup: model-free drafts copied from the prompt and the text so far.

If the last n tokens (n = max_n down to min_n) occurred earlier, the tokens that followed an earlier
occurrence are proposed: for n = max_n the one whose past matches furthest back (among the latest
CANDIDATES), else the most recent. It costs a dictionary lookup, and it wins where the reply
repeats its input: editing code, quoting, JSON with repeated keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..sampling import Sampler
from .base import NO_OFFER, Draft, Offer, Outcome
from .copyodds import (
    ALIGNED_COPY_PRIORS,
    ALIGNED_REJOIN_PRIORS,
    INLINE_COPY_PRIORS,
    REJOIN_COPY_PRIORS,
    REPLY_COPY_PRIORS,
    CopyOdds,
    book,
)
from .haystack import Haystack, furthest, matched_back
from .ngramindex import NgramIndex
from .rewrite import Codec, Rewriter

CANDIDATES = 16  # earlier occurrences of the longest n-gram compared by how far back they match
MAX_COPY = 63  # longest copy (a batch of 64): long batches cost far less per token than short ones
FIRST_COPY_CAP = 7  # longest copy (a batch of 8) before this reply has shown that it copies long runs
COPY_CAP_GROWTH = 2  # later copies may be this many times the longest run copied so far
REJOIN_WINDOW = 8  # after a copy of the input breaks, the reply rejoins it within this many tokens of the break
REJOIN_FOR = 24  # ... looked for during this many tokens of the reply after the break
REJOIN_RUN = 12  # only a copy that had held this long (matched + copied tokens) leaves a break to rejoin
REJOIN_BELOW = 9  # a suffix match at least this long elsewhere wins over rejoining


@dataclass
class CopyRuns:
    """Tokens copied in a row (over whole-copy rounds) and the longest such run of this reply: how long
    a copy a lookup drafter vouches for (`cap`). A long draft is only risked where the reply has shown
    it is copying its input (a prose reply quoting a few words would otherwise be offered a 60-token
    guess whose every position looks likely); auto goes further only where a longer batch costs little
    more (a GPU)."""

    run: int = 0
    longest: int = 0

    @property
    def cap(self) -> int:
        return min(MAX_COPY, max(FIRST_COPY_CAP, COPY_CAP_GROWTH * self.longest))

    def learn(self, name: str, outcome: Outcome) -> None:
        drafted = outcome.draft.source == name and len(outcome.draft) > 0
        self.run = self.run + outcome.accepted if drafted else 0
        self.longest = max(self.longest, self.run)
        if not (drafted and outcome.accepted == len(outcome.draft)):  # any round not a whole copy ends the run
            self.run = 0


@dataclass(frozen=True)
class _Copy:
    """The copy on offer: its tokens, the match length it starts from, and where in the text."""

    tokens: list[int]
    matched: int
    at: int
    from_reply: bool = False  # copied from this reply's own earlier tokens, not from its input
    begin: int = -1  # index of its first token in the text
    rejoined: bool = False  # where the reply rejoins a copy of its input that broke (_rejoin)
    aligned: tuple[bool, ...] | None = None  # per token: does its match go on past a line break (None: unknown)
    rewritten: bool = False  # copied from the input as rewritten by the changes learned (rewrite.py)
    predicted: bool = False  # copied from the text the reply is expected to hold (expect)

    @property
    def kind(self) -> str:
        """Which odds judge it: "rejoin", "reply" (of the reply's own tokens) or "input"."""
        return "rejoin" if self.rejoined else "reply" if self.from_reply else "input"


class NgramDrafter:
    """Prompt lookup as a drafter: copies with odds that depend on how long the match is."""

    name = "ngram"
    uses_model = False

    def __init__(
        self,
        max_n: int = 4,
        min_n: int = 1,
        ends_copy: Callable[[int], bool] | None = None,
        line_role: Callable[[int], str] | None = None,
        codec: Codec | None = None,
    ) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.min_n = min_n
        self.index = NgramIndex(max_n)
        # A copy ends before a control token: a reply quoting the end of the user's message must not be
        # offered the chat template's markup that follows it in the prompt.
        self.ends_copy = ends_copy or (lambda _token: False)
        self.line_role = line_role  # "break" (its text holds a line break), "space" or "text"; None: not known
        # With the model's tokenizer, changes that repeat are learned and copied through (rewrite.py).
        self.rewriter = Rewriter(codec, self.ends_copy, max_n) if codec is not None else None
        self.expected: Haystack | None = None  # what an API client said the reply will hold (expect)
        self.reset()

    def reset(self) -> None:
        self.index = NgramIndex(self.index.max_n)
        self._reply_start: int | None = None  # where this reply's own tokens begin (None: not known)
        self._start_reply()

    def _start_reply(self) -> None:
        # Each reply learns its own copy odds from the measured priors: how much the last reply copied
        # says little about this one (kept across replies, a summary's broken quotes made the next
        # reply's code edits timid, and an edit's long copies made the next prose reply reckless).
        # Copies of the input (the user's file, an earlier reply) and of this reply's own earlier tokens
        # are judged apart: an edit's copies of its input go on far more often than a reply repeating
        # itself does at the same match length (benchmarks/copy_odds.py), and a reply's broken
        # self-repetitions must not make its copies of the input timid.
        self.odds = CopyOdds()
        self.reply_odds = CopyOdds(priors=REPLY_COPY_PRIORS)
        self.rejoin_odds = CopyOdds(priors=REJOIN_COPY_PRIORS)
        self.line_odds = {  # (kind, match goes on past a line break): where line_role tells
            ("input", False): CopyOdds(priors=INLINE_COPY_PRIORS),
            ("input", True): CopyOdds(priors=ALIGNED_COPY_PRIORS),
            ("rejoin", False): self.rejoin_odds,  # the same priors: a drafter uses one or the other, never both
            ("rejoin", True): CopyOdds(priors=ALIGNED_REJOIN_PRIORS),
        }
        self._copy: _Copy | None = None
        self.runs = CopyRuns()
        self._break: tuple[int, int] | None = None  # (index in the input where a copy broke, text length then)
        if self.rewriter is not None:
            self.rewriter.start([])

    def expect(self, tokens: Sequence[int]) -> None:
        """Text the next replies are expected to hold (the OpenAI API's `prediction`: the file an edit
        returns), copied from as from the input wherever it matches the reply as far back; an empty one
        forgets it. Only a guess: the target checks every token."""
        self.expected = Haystack(tokens, self.index.max_n) if tokens else None

    def prefill(self, context: Sequence[int]) -> None:
        self.index.sync(context)
        self._start_reply()
        self._reply_start = len(context) + 1  # the prompt's last token is evaluated by the first round
        if self.rewriter is not None:
            self.rewriter.start(context)  # the input a reply may change

    def warm(self, context: Sequence[int]) -> None:
        pass  # the prompt was indexed in prefill: a lookup may draft the first round

    def _odds(self, copy: _Copy, i: int) -> CopyOdds:
        """The odds that judge the copy's token i."""
        if copy.aligned is not None and copy.kind != "reply":  # a reply repeating itself: no better past a break
            return self.line_odds[(copy.kind, copy.aligned[i])]
        return {"rejoin": self.rejoin_odds, "reply": self.reply_odds, "input": self.odds}[copy.kind]

    def _aligned(self, context: Sequence[int], matched: int, tokens: Sequence[int]) -> tuple[bool, ...] | None:
        """Per token of a copy: whether its match by then (the `matched` last tokens of the text and the
        copy's tokens before it) spans a line break and goes on past it with text, not only blanks;
        None where the text's lines are not known. Right after a break the match says nothing of the
        next line, which is what an edit changes: "```python" + newline matches every fenced reply, and
        a kept signature line (and its indent) does not tell whether the body is kept."""
        if self.line_role is None:
            return None
        spans = past = False
        out = []
        for i, token in enumerate([*context[len(context) - matched :], *tokens]):
            if i >= matched:
                out.append(spans and past)
            role = self.line_role(token)
            if role == "break":
                spans, past = True, False
            elif role == "text":
                past = True
        return tuple(out)

    @property
    def copy_cap(self) -> int:
        """How long a copy this drafter vouches for (CopyRuns.cap)."""
        return self.runs.cap

    def match(self, context: Sequence[int], longest: int = 128) -> tuple[int, int | None]:
        """(match length, start of the continuation) for the longest suffix match, or (0, None).

        The index finds matches of up to max_n tokens; the length is then extended backwards (up to
        `longest`), because a long match means the reply is copying its input, and copies continue.
        Among the recent occurrences of a max_n-gram the one that matches furthest back wins (ties: the
        most recent).
        """
        self.index.sync(context)
        tokens = self.index.tokens
        best = furthest(tokens, self.index.lookup_all()[-CANDIDATES:], tokens, self.index.max_n, longest)
        if best is not None:
            return best
        for n in range(min(self.index.max_n - 1, len(tokens)), self.min_n - 1, -1):
            start = self.index.lookup(n)
            if start is not None:
                return n, start
        return 0, None

    def _rejoin(self, longest: int = 128) -> tuple[int, int] | None:
        """(match length, start of the continuation) where the reply rejoins the copy of its input that
        broke last, or None: an edit replaces, inserts or deletes a few tokens, then goes on copying
        from just after the change, so the reply's last token is looked for a few tokens after the
        break (the place whose past matches furthest back), not wherever it occurred last."""
        if self._break is None:
            return None
        tokens, (broke, at) = self.index.tokens, self._break
        since = len(tokens) - at
        if not 0 < since <= REJOIN_FOR:
            return None
        end = min(broke + REJOIN_WINDOW + since, self._reply_start or len(tokens), len(tokens) - 1)
        best = None
        for start in range(broke, end):
            if tokens[start] != tokens[-1]:
                continue
            length = matched_back(tokens, start + 1, 1, longest)
            if best is None or length > best[0]:
                best = (length, start + 1)
        return best

    def _copy_at(self, context: Sequence[int]) -> _Copy | None:
        """The copy at this text (remembered: learn() books it against what was produced)."""
        if self._copy is not None and self._copy.at == len(context):
            return self._copy
        n, begin = self.match(context)
        rejoin = self._rejoin() if n < REJOIN_BELOW else None
        if rejoin is not None:
            n, begin = rejoin
        origin, source = "rejoin" if rejoin is not None else "text", self.index.tokens
        # Other token lists where they match as far back or further: the input rewritten by the changes
        # learned (they know the changes ahead), then the client's word for what follows.
        for name, other in (("rewritten", self.rewriter), ("predicted", self.expected)):
            found = other.match(context, 128, CANDIDATES) if other is not None else None
            if found is not None and found[0] >= n:
                (n, begin), origin, source = found, name, other.tokens
        if begin is None:
            return None
        # One token more than can be drafted: the round's own token is checked against it too.
        tokens = self._cut(source[begin : begin + MAX_COPY + 1])
        from_reply = origin in ("text", "rejoin") and self._reply_start is not None and begin >= self._reply_start
        aligned = self._aligned(context, n, tokens)
        rejoined, rewritten, predicted = (origin == name for name in ("rejoin", "rewritten", "predicted"))
        self._copy = _Copy(tokens, n, len(context), from_reply, begin, rejoined, aligned, rewritten, predicted)
        return self._copy

    def _cut(self, tokens: list[int]) -> list[int]:
        return tokens[: next((i for i, token in enumerate(tokens) if self.ends_copy(token)), len(tokens))]

    def offer(self, context: Sequence[int], k_max: int) -> Offer:
        copy = self._copy_at(context) if k_max > 0 else None
        if copy is None:
            return NO_OFFER
        judged = [(self._odds(copy, i), copy.matched + i) for i in range(min(len(copy.tokens), k_max, MAX_COPY))]
        rates = [odds.rate(length) for odds, length in judged]
        mean = [odds.rate(length, cautious=False) for odds, length in judged]
        return Offer(rates, rates, mean=mean, proven=self.copy_cap)

    def propose(self, context: Sequence[int], k: int, sampler: Sampler) -> Draft:
        copy = self._copy_at(context) if k > 0 else None
        if copy is None:
            return Draft()
        tokens = copy.tokens[: min(k, MAX_COPY)]  # its last token checks the round's own: `-k 64` is a batch of 64
        return Draft(tokens=list(tokens), q=[None] * len(tokens), source=self.name)

    def learn(self, outcome: Outcome) -> None:
        """Book the copy on offer against the tokens produced (see book), and follow copied runs."""
        copy, self._copy = self._copy, None
        if copy is not None and copy.at == outcome.at:
            held = book(lambda i: self._odds(copy, i), copy.tokens, copy.matched, outcome.produced)
            # A break is rejoined in the input only (in the rewritten input too was no better, replayed).
            if copy.rewritten:
                self.rewriter.judge(copy.begin, held, outcome.produced if held < len(copy.tokens) else [])
            elif not copy.predicted:
                self._note_break(copy, held, len(outcome.produced))
        if self.rewriter is not None:
            self.rewriter.observe(outcome.produced)
        self.runs.learn(self.name, outcome)

    def _note_break(self, copy: _Copy, held: int, produced: int) -> None:
        """Remember where a copy of the input that had been holding broke (see _rejoin): `held` of its
        tokens matched the `produced` ones."""
        broke = held < min(len(copy.tokens), produced)
        if broke and not copy.from_reply and copy.matched + held >= REJOIN_RUN:
            self._break = (copy.begin + held, copy.at + held)
