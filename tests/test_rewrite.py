"""Prompt lookup's rewriter (drafters/rewrite.py): changes a reply makes to lines of its input are
learned as rules on words and applied to the rest of the input, so a copy goes on through them."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_drafters import follow  # the reply one token per round, every copy on offer booked

from specchat.drafters import Outcome, rewrite
from specchat.drafters.ngram import MAX_COPY, NgramDrafter
from specchat.drafters.rewrite import Rewriter
from specchat.sampling import Sampler, SamplingParams

GREEDY = Sampler(SamplingParams(temperature=0.0))
CONTROL = 0  # a control token (as <|im_end|>): the codec gives it no text


class WordCodec:
    """A tokenizer of whole words with the blanks before them, single marks and line breaks. Like a
    real one, it spells `_id` apart from `account`, so `account_id` is several tokens."""

    def __init__(self) -> None:
        self.texts = ["<control>"]
        self.ids: dict[str, int] = {}

    def tokenize(self, text: str) -> list[int]:
        return [self.id(part) for part in re.findall(r"\n|[ \t]*[A-Za-z0-9]+|[ \t]*[^A-Za-z0-9\s]|[ \t]+", text)]

    def id(self, part: str) -> int:
        if part not in self.ids:
            self.ids[part] = len(self.texts)
            self.texts.append(part)
        return self.ids[part]

    def piece(self, token: int) -> bytes:
        return b"" if token == CONTROL else self.texts[token].encode()


INPUT = """CREATE TABLE accounts (
    accountId INTEGER PRIMARY KEY,
    ownerName TEXT
);
SELECT accountId, ownerName FROM accounts;
SELECT accountIdx FROM accounts WHERE accountId > 3;
"""


def rewriter_on(text: str = INPUT) -> tuple[Rewriter, WordCodec]:
    codec = WordCodec()
    rewriter = Rewriter(codec, lambda token: token == CONTROL, max_n=4)
    rewriter.start([CONTROL, *codec.tokenize(text), CONTROL])
    return rewriter, codec


def rewritten_text(rewriter: Rewriter) -> str:
    return rewriter.text(rewriter.tokens)


def test_a_renamed_word_is_learned_from_a_changed_line_and_applied_to_the_rest_of_the_input():
    rewriter, codec = rewriter_on()
    rewriter.observe(codec.tokenize("CREATE TABLE accounts (\n    account_id INTEGER PRIMARY KEY,\n"))
    assert [(rule.old, rule.new) for rule in rewriter.rules] == [("accountId", "account_id")]
    # Whole words only: accountIdx is another name.
    assert rewritten_text(rewriter) == INPUT.replace("accountId ", "account_id ").replace("accountId,", "account_id,")
    assert "accountIdx" in rewritten_text(rewriter)
    assert rewriter.tokens[0] == CONTROL and rewriter.tokens[-1] == CONTROL  # control tokens stay


def test_lines_the_input_holds_or_that_are_unlike_every_input_line_teach_nothing():
    rewriter, codec = rewriter_on()
    rewriter.observe(codec.tokenize("CREATE TABLE accounts (\n"))  # a line of the input
    rewriter.observe(codec.tokenize("Here is the script with every name changed as asked:\n"))
    rewriter.observe(codec.tokenize("    ownerName TEXT"))  # not a whole line yet
    assert rewriter.rules == [] and not rewriter.active


def test_a_line_longer_than_max_line_is_not_compared(monkeypatch):
    monkeypatch.setattr(rewrite, "MAX_LINE", 30)
    rewriter, codec = rewriter_on()
    line = "    account_id INTEGER PRIMARY KEY,"  # 35 characters, in pieces as a reply writes it
    for token in codec.tokenize(line):
        rewriter.observe([token])
    rewriter.observe(codec.tokenize("\n"))
    assert rewriter.rules == []


def rename_learned() -> tuple[Rewriter, WordCodec]:
    rewriter, codec = rewriter_on()
    rewriter.observe(codec.tokenize("    account_id INTEGER PRIMARY KEY,\n"))
    return rewriter, codec


def span_of(rewriter: Rewriter, nth: int) -> tuple[int, int]:
    start, end, _ = rewriter.spans[nth]
    return start, end


def test_a_rule_is_dropped_where_the_reply_kept_what_it_replaced():
    rewriter, codec = rename_learned()
    start, _ = span_of(rewriter, 1)  # the SELECT line's account_id
    kept_old = codec.tokenize(" accountId")
    assert rewriter.judge(start - 1, 1, [rewriter.tokens[start - 1], *kept_old]) is True
    assert rewriter.rules == [] and not rewriter.active


def test_a_copy_that_broke_for_another_reason_inside_a_rule_says_nothing_of_the_rule():
    """A copy taken from the wrong place (another table's line) breaks inside a rule's text too."""
    rewriter, codec = rename_learned()
    start, _ = span_of(rewriter, 1)
    assert rewriter.judge(start - 1, 1, [rewriter.tokens[start - 1], *codec.tokenize(" balance")]) is False
    assert [rule.misses for rule in rewriter.rules] == [0]


def test_a_rule_that_carried_a_copy_survives_one_miss():
    rewriter, codec = rename_learned()
    start, end = span_of(rewriter, 0)
    rewriter.judge(start, end - start + 1, rewriter.tokens[start : end + 1])  # carried through
    later, _ = span_of(rewriter, 2)
    assert rewriter.judge(later, 0, codec.tokenize(" accountId")) is False
    assert [(rule.hits, rule.misses) for rule in rewriter.rules] == [(1, 1)]


@pytest.mark.parametrize("rewriting", [True, False])
def test_prompt_lookup_copies_through_a_rename_it_has_seen_once(rewriting):
    """The reply renamed accountId on the second line; at the SELECT line the copy it offers has the new
    name where the input has the old one. Without a tokenizer, the copy is the input's."""
    codec = WordCodec()
    prompt = [CONTROL, *codec.tokenize(INPUT), CONTROL, *codec.tokenize("assistant\n")]
    ngram = NgramDrafter(ends_copy=lambda token: token == CONTROL, codec=codec if rewriting else None)
    reply = codec.tokenize(
        "CREATE TABLE accounts (\n    account_id INTEGER PRIMARY KEY,\n    ownerName TEXT\n);\nSELECT"
    )
    context = follow(ngram, prompt, reply)
    draft = ngram.propose(context, 6, GREEDY)
    expected = " account_id, ownerName FROM" if rewriting else " accountId, ownerName FROM accounts;"
    assert codec.tokenize(expected) == draft.tokens


def test_without_any_change_prompt_lookup_copies_the_input_as_before():
    codec = WordCodec()
    prompt = [CONTROL, *codec.tokenize(INPUT), CONTROL, *codec.tokenize("assistant\n")]
    reply = codec.tokenize("CREATE TABLE accounts (\n    accountId INTEGER PRIMARY KEY,\n    ownerName")
    expected = codec.tokenize(" TEXT\n);\nSELECT accountId")
    drafts = []
    for with_codec in (codec, None):
        ngram = NgramDrafter(ends_copy=lambda token: token == CONTROL, codec=with_codec)
        drafts.append(ngram.propose(follow(ngram, prompt, reply), len(expected), GREEDY).tokens)
    assert drafts[0] == drafts[1] == expected


class ByteCodec:
    """One token per byte: pieces split multi-byte characters, as a byte-level tokenizer's can."""

    def tokenize(self, text: str) -> list[int]:
        return [b + 1 for b in text.encode()]

    def piece(self, token: int) -> bytes:
        return b"" if token == CONTROL else bytes([token - 1])


WORD = st.text(alphabet="abcXYZé中_", min_size=1, max_size=6)
MARK = st.sampled_from([" ", "(", ", ", " = ", "\t", ")"])


@st.composite
def edits(draw) -> tuple[str, str]:
    """(input, reply): lines of a few words, the same lines with some words renamed, then new lines."""
    pool = draw(st.lists(WORD, min_size=2, max_size=5, unique=True))
    line = st.lists(st.tuples(st.sampled_from(pool), MARK), min_size=1, max_size=6)
    lines = draw(st.lists(line, min_size=1, max_size=10))
    renames = draw(st.dictionaries(st.sampled_from(pool), WORD, max_size=2))
    source = ["".join(word + mark for word, mark in parts) for parts in lines]
    changed = ["".join(renames.get(word, word) + mark for word, mark in parts) for parts in lines]
    return "\n".join(source), "\n".join(changed + draw(st.lists(WORD, max_size=3)))


@settings(max_examples=200, deadline=None)
@given(
    edit=edits(),
    chunks=st.lists(st.integers(1, 7), min_size=1, max_size=8),
    byte_level=st.booleans(),
    judged=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 30)), max_size=6),
)
def test_any_text_in_any_pieces_rewrites_without_error(edit, chunks, byte_level, judged):
    """Whatever the text (blanks, marks, non-ASCII letters split across byte tokens) and however the
    reply arrives, the rewriter learns without error, keeps the control tokens where they were, and
    knows which of its tokens each rule wrote."""
    source, reply = edit
    codec = ByteCodec() if byte_level else WordCodec()
    rewriter = Rewriter(codec, lambda token: token == CONTROL, max_n=4)
    rewriter.start([CONTROL, *codec.tokenize(source), CONTROL])
    tokens = codec.tokenize(reply + "\n")
    at = 0
    for size in itertools.cycle(chunks):
        if at >= len(tokens):
            break
        rewriter.observe(tokens[at : at + size])
        at += size
        for begin, held in judged:
            if rewriter.active and begin < len(rewriter.tokens):
                rewriter.judge(begin, held, tokens[: held + 1])
    event(f"rules learned: {min(len(rewriter.rules), 2)}+")
    if rewriter.active:
        assert rewriter.tokens[0] == CONTROL and rewriter.tokens[-1] == CONTROL
        assert all(0 <= start < end <= len(rewriter.tokens) for start, end, _ in rewriter.spans)
        text = rewriter.text(rewriter.tokens)
        assert all(rule.new in text for rule in rewriter.rules if rule.old in source)
        found = rewriter.match(tokens, 128, 16)
        assert found is None or (found[0] >= 4 and found[1] <= len(rewriter.tokens))


def rules_of(rewriter: Rewriter) -> list[tuple[str, str]]:
    return [(rule.old, rule.new) for rule in rewriter.rules]


def test_only_the_line_longer_than_max_line_goes_uncompared(monkeypatch):
    """Its end (what follows the first MAX_LINE characters) is no line of its own, and the next line
    is compared again."""
    monkeypatch.setattr(rewrite, "MAX_LINE", 40)
    rewriter, codec = rewriter_on()
    rewriter.observe(codec.tokenize("x" * 41))  # a long line's start ...
    rewriter.observe(codec.tokenize("    account_id INTEGER PRIMARY KEY,\n"))  # ... its end looks like an edit
    assert rewriter.rules == []
    rewriter.observe(codec.tokenize("SELECT accountId, owner_name FROM accounts;\n"))
    assert rules_of(rewriter) == [("ownerName", "owner_name")]


def test_a_line_of_exactly_max_line_characters_is_compared(monkeypatch):
    line = "    account_id INTEGER PRIMARY KEY,"
    monkeypatch.setattr(rewrite, "MAX_LINE", len(line))
    rewriter, codec = rewriter_on()
    for token in codec.tokenize(line + "\n"):
        rewriter.observe([token])
    assert rules_of(rewriter) == [("accountId", "account_id")]


def test_a_change_of_max_words_words_is_a_rule():
    assert rewrite.MAX_WORDS == 4
    rewriter, codec = rewriter_on("    total = price(item) + shipping + handling + tax + duty;\n")
    # price ( item ): 4 words
    rewriter.observe(codec.tokenize("    total = costs[sku] + shipping + handling + tax + duty;\n"))
    assert rules_of(rewriter) == [("price(item)", "costs[sku]")]


def test_among_equally_alike_input_lines_the_one_after_the_line_matched_last_is_the_edited_one():
    """An edit goes through its input in order: the reply's second line is as like the input's first
    line as its second, and it is the second that it changed."""
    rewriter, codec = rewriter_on("x = compute(alpha, beta)\ny = compute(alpha, gamma)\n")
    rewriter.observe(codec.tokenize("x = compute(ALPHA, beta)\nw = compute(alpha, delta)\n"))
    assert rules_of(rewriter) == [("alpha", "ALPHA"), ("y", "w"), ("gamma", "delta")]


def test_a_change_seen_again_keeps_the_rule_and_what_it_has_shown():
    rewriter, codec = rename_learned()
    start, end = span_of(rewriter, 0)
    rewriter.judge(start, end - start + 1, rewriter.tokens[start : end + 1])  # carried through
    rewriter.observe(codec.tokenize("SELECT account_id, ownerName FROM accounts;\n"))  # the same change
    assert [(rule.old, rule.new, rule.hits) for rule in rewriter.rules] == [("accountId", "account_id", 1)]
    later, _ = span_of(rewriter, 2)
    assert rewriter.judge(later, 0, codec.tokenize(" accountId")) is False  # one miss: it has carried one


def test_where_the_reply_changes_a_word_again_the_latest_change_is_applied():
    rewriter, codec = rename_learned()
    rewriter.observe(codec.tokenize("SELECT acct_id, ownerName FROM accounts;\n"))
    assert rules_of(rewriter) == [("accountId", "acct_id")]
    assert "WHERE acct_id > 3" in rewritten_text(rewriter)


def test_a_copy_that_held_just_through_a_rules_text_counts_for_it():
    rewriter, _ = rename_learned()
    start, end = span_of(rewriter, 0)
    rewriter.judge(start, end - start, rewriter.tokens[start:end])
    assert [(rule.hits, rule.misses) for rule in rewriter.rules] == [(1, 0)]


def test_a_break_just_after_a_rules_text_says_nothing_of_the_rule():
    """The reply wrote the rule's new text and then went on otherwise (here a token that the old text
    holds): the rule was right as far as it went."""
    rewriter, codec = rename_learned()
    start, end = span_of(rewriter, 0)
    produced = [*rewriter.tokens[start + 1 : end], *codec.tokenize(" Id")]
    assert rewriter.judge(start + 1, end - start - 1, produced) is False
    assert [(rule.hits, rule.misses) for rule in rewriter.rules] == [(0, 0)]


def test_where_two_rules_match_at_one_place_the_longer_old_text_wins():
    rewriter, codec = rewriter_on("call(fooBar, 1, 2, 3, 4);\nsend(fooBar baz, 5, 6, 7, 8);\nx = fooBar baz;\n")
    rewriter.observe(codec.tokenize("call(qux, 1, 2, 3, 4);\nsend(zap, 5, 6, 7, 8);\n"))
    assert rules_of(rewriter) == [("fooBar", "qux"), ("fooBar baz", "zap")]
    assert "x = zap;" in rewritten_text(rewriter)


def test_changes_in_neighbouring_tokens_are_both_applied():
    rewriter, codec = rewriter_on(INPUT + "ORDER BY accountId ownerName;\n")
    rewriter.observe(codec.tokenize("    account_id INTEGER PRIMARY KEY,\n"))
    rewriter.observe(codec.tokenize("SELECT accountId, owner_name FROM accounts;\n"))
    assert rules_of(rewriter) == [("accountId", "account_id"), ("ownerName", "owner_name")]
    assert "ORDER BY account_id owner_name;" in rewritten_text(rewriter)


def test_a_change_in_the_inputs_first_token_keeps_the_text_before_it():
    """An input that does not begin with a control token (a raw prompt): the first token, blanks and
    all, holds the change."""
    text = "    accountId INTEGER PRIMARY KEY,\n    ownerName TEXT\n"
    codec = WordCodec()
    rewriter = Rewriter(codec, lambda token: token == CONTROL, max_n=4)
    rewriter.start(codec.tokenize(text))
    rewriter.observe(codec.tokenize("    account_id INTEGER PRIMARY KEY,\n"))
    assert rewritten_text(rewriter) == text.replace("accountId", "account_id")


def test_an_underscore_is_part_of_a_word():
    rewriter, codec = rewriter_on("x = _count + 1 + 2 + 3\nitem_count = 0\ny = _count\n")
    rewriter.observe(codec.tokenize("x = _total + 1 + 2 + 3\n"))
    assert rules_of(rewriter) == [("_count", "_total")]
    assert rewritten_text(rewriter).endswith("item_count = 0\ny = _total\n")


def test_whole_words_only_at_their_start_too():
    rewriter, codec = rewriter_on("    accountId INTEGER PRIMARY KEY,\nSELECT subaccountId, accountId FROM accounts;\n")
    rewriter.observe(codec.tokenize("    account_id INTEGER PRIMARY KEY,\n"))
    assert "SELECT subaccountId, account_id FROM" in rewritten_text(rewriter)


@pytest.mark.parametrize("limit", ["old", "new"])
def test_a_rule_may_replace_max_old_and_write_max_new_characters(limit):
    assert (rewrite.MAX_OLD, rewrite.MAX_NEW) == (48, 96)
    old, new = ("n" * 48, "short") if limit == "old" else ("name", "n" * 96)
    rewriter, codec = rewriter_on(f"value = {old} + 1 + 2 + 3;\n")
    rewriter.observe(codec.tokenize(f"value = {new} + 1 + 2 + 3;\n"))
    assert rules_of(rewriter) == [(old, new)]


def test_at_most_max_rules_rules_even_within_one_line(monkeypatch):
    monkeypatch.setattr(rewrite, "MAX_RULES", 2)
    rewriter, codec = rename_learned()
    rewriter.observe(codec.tokenize("SELECT acct_x FROM users WHERE accountId > 3;\n"))  # two more changes
    assert rules_of(rewriter) == [("accountId", "account_id"), ("accountIdx", "acct_x")]


def test_lines_the_reply_kept_move_on_the_place_it_is_editing():
    """The reply kept the first table and changes the second's header, as like the first's: it is the
    second table that it renamed (not `a` -> `b2` wherever `a` occurs)."""
    rewriter, codec = rewriter_on("CREATE TABLE a (\n    id INTEGER\n);\nCREATE TABLE b (\n    id INTEGER\n);\n")
    rewriter.observe(codec.tokenize("CREATE TABLE a (\n    id INTEGER\n);\nCREATE TABLE b2 (\n"))
    assert rules_of(rewriter) == [("b", "b2")]


def test_between_equally_alike_lines_as_near_before_and_after_it_is_the_one_after():
    """The reply changed the first line and wrote a line like none of the input's: its third line is
    as like the first line as the third, as near, and it is the third that comes next."""
    rewriter, codec = rewriter_on("x = compute(alpha, beta)\nu = 1\ny = compute(alpha, gamma)\n")
    rewriter.observe(codec.tokenize("x = compute(ALPHA, beta)\nu = 2\nw = compute(alpha, delta)\n"))
    assert rules_of(rewriter) == [("alpha", "ALPHA"), ("y", "w"), ("gamma", "delta")]


def table(name: str, *columns: str) -> str:
    return "".join([f"CREATE TABLE {name} (\n", *(f"  {column}\n" for column in columns), ");\n"])


FIVE = ("id INTEGER,", "name TEXT,", "age INTEGER,", "city TEXT,", "zip TEXT")


@pytest.mark.parametrize("after", ["", table("d", "id INTEGER")])
def test_a_common_line_kept_after_dropped_lines_does_not_go_back_to_an_earlier_block(after):
    """The reply keeps table b's header, drops four of its columns (so `id INTEGER` loses its comma,
    as table a's and c's has none) and closes it: `id INTEGER` and `);` are not table a's again (they
    were, as the nearest, and `b` -> `c2` was learned) nor table c's or d's (the first after them; with
    a table d, `d` -> `c2`)."""
    rewriter, codec = rewriter_on(table("a", "id INTEGER") + table("b", *FIVE) + table("c", "id INTEGER") + after)
    rewriter.observe(codec.tokenize(table("a", "id INTEGER") + table("b", "id INTEGER") + "CREATE TABLE c2 (\n"))
    assert rules_of(rewriter) == [("c", "c2")]


def test_a_common_line_the_reply_swapped_back_goes_back_to_the_line_it_skipped():
    """The reply writes table a's second column before its first: the first column's line, in every
    table, is the one it skipped in a (not b's, the first after), and it is b that it renames next."""
    columns = ("id INTEGER,", "name TEXT,", "age INTEGER")
    rewriter, codec = rewriter_on(table("a", *columns) + table("b", *columns) + table("c", *columns))
    rewriter.observe(codec.tokenize(table("a", *columns[1::-1], columns[2]) + "CREATE TABLE b2 (\n"))
    assert rules_of(rewriter) == [("b", "b2")]


def test_lines_kept_after_a_dropped_block_are_the_next_blocks_not_the_dropped_ones():
    """The reply drops function g, whose lines are f's and h's too: h's header is the only one of its
    kind, so the lines after it are h's, and it is k that it renames next."""
    functions = "".join(f"def {name}(x):\n    y = x + 1\n    return y\n\n" for name in "fghk")
    rewriter, codec = rewriter_on(functions)
    kept = functions.replace("def g(x):\n    y = x + 1\n    return y\n\n", "")
    rewriter.observe(codec.tokenize(kept.replace("def k(x):\n    y = x + 1\n    return y\n\n", "def k2(x):\n")))
    assert rules_of(rewriter) == [("k", "k2")]


def test_a_rewritten_copy_drafts_at_most_max_copy_tokens_and_its_last_checks_the_rounds_own():
    """`--mode ngram -k 64` drafted a whole copy (MAX_COPY + 1 tokens, a batch of 65, where the copy's last token is
    there to check the round's own): at most MAX_COPY are drafted. A copy that held to its end, the round's own
    token included, charges its rule no miss."""
    codec = WordCodec()
    filler = "".join(f"    col{i} TEXT,\n" for i in range(30))
    text = "    accountId INTEGER PRIMARY KEY,\n" + filler + "SELECT accountId FROM t;\n"
    prompt = [CONTROL, *codec.tokenize(text), CONTROL, *codec.tokenize("assistant\n")]
    reply = codec.tokenize("    account_id INTEGER PRIMARY KEY,\n" + filler + "SELECT")
    ngram = NgramDrafter(ends_copy=lambda token: token == CONTROL, codec=codec)
    whole = MAX_COPY + 1
    context = follow(ngram, prompt, reply[: len(reply) - whole])
    draft = ngram.propose(context, whole, GREEDY)
    assert ngram._copy.rewritten and len(ngram._copy.tokens) == whole
    assert draft.tokens == reply[len(reply) - whole : -1]  # MAX_COPY of them
    ngram.learn(Outcome(len(context), draft, MAX_COPY, [*draft.tokens, reply[-1]], 0.0))
    assert [(rule.old, rule.misses) for rule in ngram.rewriter.rules] == [("accountId", 0)]


def test_a_run_of_like_lines_kept_moves_the_place_on_line_by_line():
    """Kept lines that occur several times stayed on the first of a run of them (the first from the place on was
    the place itself), so the changed line after the run was matched from there: 'z' -> 'q', not 'a' -> 'q'."""
    text = "set z to 1\n" + "nop\n" * 4 + "set a to 1\nset b to 1\n"
    rewriter, codec = rewriter_on(text)
    rewriter.observe(codec.tokenize("set z to 1\n" + "nop\n" * 4 + "set q to 1\n"))
    assert rules_of(rewriter) == [("a", "q")]
