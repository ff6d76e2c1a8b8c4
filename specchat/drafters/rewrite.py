"""Changes that repeat: learned from the lines a reply changed, applied to the rest of its input.

An edit copies its input and changes it in places, and a rename or a change of style makes the same
change again and again (`accountId` -> `account_id`, `print` -> `logging.info`, `var` -> `val`).
Prompt lookup breaks at every one of them. Each line the reply completes that its input does not hold
is compared word by word with the input line most like it; a word or a few that it replaced become a
rule. The input is rewritten with the rules learned so far, and prompt lookup may copy from the
rewritten input where that matches the reply at least as far back as the input itself does. A rule
that breaks a copy where the reply kept the old text, more often than it carried one through, is
dropped.

On text, not tokens: the tokenizer spells a name differently after a space, a dot or a quote, so a
rule learned on tokens rarely met the same tokens again (tried on 2026-12-01, docs/bench.md).
"""

from __future__ import annotations

import bisect
import difflib
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .haystack import Haystack

MAX_OLD = 48  # longest text a rule replaces (characters): a rename, a call, a keyword and its neighbour
MAX_NEW = 96
MAX_RULES = 32  # per reply: each new rule re-tokenizes the input once
MIN_LIKENESS = 0.7  # a reply line is the edit of the input line it shares this share of words with
MAX_WORDS = 4  # a change of more words than this is a rewrite of the line, not a rule to apply elsewhere
MAX_LINE = 2000  # longer reply lines (characters) are not compared: prose paragraphs, minified data
WORDS = re.compile(r"\w+|[^\w\s]")  # words and single marks; blanks between them are kept from the text


class Codec(Protocol):
    """What the rewriter needs of a tokenizer (Engine has both)."""

    def piece(self, token: int) -> bytes: ...

    def tokenize(self, text: str) -> list[int]: ...


@dataclass
class Rule:
    old: str
    new: str
    hits: int = 0  # rewritten places a copy carried the reply through
    misses: int = 0  # rewritten places where a copy broke

    @property
    def pattern(self) -> bytes:
        # Whole words only: `accountId` -> `account_id` must not touch `accountIdx`. On bytes, where
        # any byte of a non-ASCII letter counts as part of a word.
        old = self.old.encode("utf-8")
        head = rb"(?<![\w\x80-\xff])" if _is_word(self.old[:1]) else b""
        tail = rb"(?![\w\x80-\xff])" if _is_word(self.old[-1:]) else b""
        return head + re.escape(old) + tail


def _is_word(char: str) -> bool:
    return bool(char) and (char.isalnum() or char == "_")


class Rewriter:
    """The input as the rules learned in this reply would have it, with an index to copy from."""

    def __init__(self, codec: Codec, ends_copy: Callable[[int], bool], max_n: int) -> None:
        self.codec = codec
        self.ends_copy = ends_copy
        self.max_n = max_n
        self.start([])

    def start(self, source: Sequence[int]) -> None:
        """A new reply to `source` (its input): no rules yet."""
        self.source = list(source)
        self.rules: list[Rule] = []
        self.spans: list[tuple[int, int, Rule]] = []  # rewritten tokens [start, end) that a rule wrote
        self.haystack = Haystack([], self.max_n)  # the rewritten input and its n-grams; empty without a rule
        self._pending = b""  # the reply's text since its last line break
        self._overflow = False  # the line being written is longer than MAX_LINE: not compared
        self._bytes: bytes | None = None  # the input's text (control tokens: none) ...
        self._ends: list[int] = []  # ... and where each of its tokens ends in it
        self._lines: list[tuple[str, list[str]]] | None = None  # the input's lines and their words
        self._known: dict[str, list[int]] = {}  # each input line's text -> where it occurs
        self._line_at = -1  # the input line the reply's last line kept or was matched to
        self._skipped = range(0)  # the input lines a common line the reply kept last moved _line_at past
        self._kept = False  # _line_at is a line the reply kept (not one a changed line was matched to)

    @property
    def tokens(self) -> list[int]:
        """The rewritten input (empty while there is no rule)."""
        return self.haystack.tokens

    @property
    def active(self) -> bool:
        return bool(self.tokens)

    def text(self, tokens: Sequence[int]) -> str:
        return b"".join(self.codec.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def observe(self, produced: Sequence[int]) -> None:
        """The reply's next tokens: each line it completes is compared with the input's lines."""
        self._pending += b"".join(self.codec.piece(t) for t in produced)
        *done, self._pending = self._pending.split(b"\n")
        for line in done:
            if not self._overflow:
                self._learn_line(line.decode("utf-8", errors="replace"))
            self._overflow = False
        if len(self._pending) > MAX_LINE:  # a line too long to compare (a paragraph, minified data)
            self._pending, self._overflow = b"", True

    def _learn_line(self, line: str) -> None:
        if self._lines is None:  # the input's lines, read once the reply has a line to compare
            lines = self._input_text().decode("utf-8", errors="replace").split("\n")
            self._lines = [(text, [word for word, _, _ in _words(text)]) for text in lines]
            for at, text in enumerate(lines):
                self._known.setdefault(text, []).append(at)
        if not line.strip() or len(self.rules) >= MAX_RULES:
            return
        if line in self._known:  # kept as it was: the edit has got this far through its input
            self._keep(self._known[line])
            return
        spans = _words(line)
        found = self._most_alike([word for word, _, _ in spans])
        if found is None:
            return
        at, matcher = found
        self._line_at, self._skipped, self._kept = at, range(0), False
        text = self._lines[at][0]
        other = _words(text)
        changed = False
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "replace" and i2 - i1 <= MAX_WORDS:
                changed |= self._add(text[other[i1][1] : other[i2 - 1][2]], line[spans[j1][1] : spans[j2 - 1][2]])
        if changed:
            self._rebuild()

    def _most_alike(self, words: list[str]) -> tuple[int, difflib.SequenceMatcher] | None:
        """(index, matcher) of the input line most like these words, if any is MIN_LIKENESS alike; among
        equals the nearest after the last one kept or matched, since an edit goes through its input in
        order (each `CREATE TABLE x (` is as like the others)."""
        matcher = difflib.SequenceMatcher(None, [], words, autojunk=False)  # indexes the reply's line once
        best, best_key = None, (MIN_LIKENESS, (-math.inf, 0))
        for at, (_, other) in enumerate(self._lines or []):
            matcher.set_seq1(other)
            if matcher.real_quick_ratio() >= best_key[0] and matcher.quick_ratio() >= best_key[0]:
                key = (matcher.ratio(), self._nearness(at))
                if key > best_key:
                    best, best_key = at, key
        if best is None:
            return None
        matcher.set_seq1(self._lines[best][1])
        return best, matcher

    def _keep(self, places: list[int]) -> None:
        """Move the place the edit had reached to where a line the reply kept occurs in its input
        (`places`, in order): among the lines a common line last jumped over, if it is one of them (that
        jump went too far, or the reply swapped lines); else the first from that place on (an edit goes
        on forward, past the lines it dropped); else the last before it. Not simply the nearest: a
        common line (`);`, `}`) would go back to an earlier block's. "From that place on" is past a line
        kept there (a run of like lines moves on), but may be the line a changed one was matched to (a new
        line like the next, then that one kept)."""
        i = bisect.bisect_left(places, self._skipped.start)
        if i == len(places) or places[i] >= self._skipped.stop:
            i = min(bisect.bisect_left(places, self._line_at + self._kept), len(places) - 1)
        self._skipped = range(self._line_at + 1, places[i]) if len(places) > 1 else range(0)
        self._line_at, self._kept = places[i], True

    def _nearness(self, at: int) -> tuple[int, int]:
        """How near input line `at` is to the line after the one the reply's last line kept or changed;
        of two as near, the later (the edit goes on forward)."""
        return -abs(at - self._line_at - 1), at

    def _add(self, old: str, new: str) -> bool:
        """A rule old -> new, unless one is known or it is not worth applying; True if added."""
        old, new = old.strip(), new.strip()
        if not _is_rule(old, new) or len(self.rules) >= MAX_RULES:
            return False
        for rule in self.rules:
            if rule.old == old:
                if rule.new == new:
                    return False
                self.rules.remove(rule)  # the reply changed its mind: the latest change wins
                break
        self.rules.append(Rule(old, new))
        return True

    def judge(self, begin: int, held: int, produced: Sequence[int]) -> bool:
        """A copy of the rewritten input from `begin` held `held` of the `produced` tokens. True where a
        rule was dropped for it (the rewritten input changed)."""
        broke = produced[held:] and self.text(produced[held : held + 1]).strip()
        dropped = False
        for start, end, rule in self.spans:
            if begin <= start and end <= begin + held:
                rule.hits += 1
            elif broke and start <= begin + held < end and broke in rule.old and broke not in rule.new:
                # Only where the reply wrote what the rule replaced: a copy taken from the wrong place
                # (another table's `fullName`) breaks inside a rule's text too, and says nothing of it.
                rule.misses += 1
                if rule.misses > rule.hits and rule in self.rules:
                    self.rules.remove(rule)
                    dropped = True
        if dropped:
            self._rebuild()
        return dropped

    def _input_text(self) -> bytes:
        """The input's text, control tokens left out, and (in _ends) where each token ends in it."""
        if self._bytes is None:
            pieces = [b"" if self.ends_copy(t) else self.codec.piece(t) for t in self.source]
            self._ends = list(itertools.accumulate(map(len, pieces)))
            self._bytes = b"".join(pieces)
        return self._bytes

    def _rebuild(self) -> None:
        """Apply every rule to the input. Only the tokens around each change are tokenized again (the
        few that hold its bytes), so a rule costs little even with a long input."""
        tokens: list[int] = []
        self.spans = []
        if not self.rules:
            self.haystack = Haystack(tokens, self.max_n)
            return
        text = self._input_text()
        rules = sorted(self.rules, key=lambda rule: -len(rule.old))  # the longest old text wins a tie
        pattern = re.compile(b"|".join(b"(" + rule.pattern + b")" for rule in rules))
        done = 0  # source tokens before this one are in `tokens`
        for m in pattern.finditer(text):
            first = bisect.bisect_right(self._ends, m.start())  # the token holding the change's first byte
            last = bisect.bisect_left(self._ends, m.end())  # ... and its last
            if first < done or last >= len(self.source) or any(map(self.ends_copy, self.source[first : last + 1])):
                continue  # overlaps the change before, or a control token: left as it is
            begin = self._ends[first - 1] if first else 0
            rule = rules[m.lastindex - 1]
            changed = text[begin : m.start()] + rule.new.encode("utf-8") + text[m.end() : self._ends[last]]
            tokens += self.source[done:first]
            start = len(tokens)
            tokens += self.codec.tokenize(changed.decode("utf-8", errors="replace"))
            self.spans.append((start, len(tokens), rule))
            done = last + 1
        self.haystack = Haystack(tokens + self.source[done:], self.max_n)

    def match(self, context: Sequence[int], longest: int, candidates: int) -> tuple[int, int] | None:
        """(match length, start of the continuation) of the reply's end in the rewritten input (Haystack)."""
        return self.haystack.match(context, longest, candidates) if self.tokens else None


def _words(line: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in WORDS.finditer(line)]


def _is_rule(old: str, new: str) -> bool:
    """Worth applying elsewhere: a change of some word (not only blanks or punctuation), not too long."""
    return any(_is_word(c) for c in old) and len(old) <= MAX_OLD and len(new) <= MAX_NEW and "\n" not in old
