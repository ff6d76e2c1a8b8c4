"""The pair check (llama.cpp's rules for speculative pairs) on fake vocabularies: pure logic."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from specchat.compat import check_pair, check_server_pair, require_compatible
from specchat.errors import PairError


@dataclass
class Vocab:
    n_vocab: int = 1000
    vocab_type: int = 2
    bos: int = 1
    eos: int = 2
    add_bos: bool = False
    changed: dict[int, bytes] = field(default_factory=dict)

    def token_text(self, token: int) -> bytes:
        return self.changed.get(token, f"tok{token}".encode())


def test_same_vocabulary_is_compatible():
    assert check_pair(Vocab(), Vocab()).compatible


def test_a_few_extra_tokens_are_fine():
    assert check_pair(Vocab(n_vocab=1000), Vocab(n_vocab=1100)).compatible  # within 128, same texts
    assert check_pair(Vocab(n_vocab=1000), Vocab(n_vocab=872)).compatible  # 128 fewer: still within
    assert check_pair(Vocab(n_vocab=1000), Vocab(n_vocab=1128)).compatible  # 128 more


@pytest.mark.parametrize(
    ("draft", "reason"),
    [
        (Vocab(vocab_type=1), "vocabulary types differ"),
        (Vocab(bos=7), "BOS differs"),
        (Vocab(add_bos=True), "BOS use differs"),
        (Vocab(eos=9), "EOS differs"),
        (Vocab(n_vocab=800), "vocab sizes differ by more than 128"),
        (Vocab(n_vocab=871), "vocab sizes differ by more than 128"),  # 129 fewer
        (Vocab(changed={640: b"other"}), "draft vocabulary differs at token 640"),
        (Vocab(changed={999: b"other"}), "draft vocabulary differs at token 999"),  # the last id both have
    ],
)
def test_incompatible_pairs_say_why_and_may_be_forced(draft, reason):
    report = check_pair(Vocab(), draft)
    assert not report.compatible and reason in report.reason and report.forceable
    with pytest.raises(PairError) as err:
        require_compatible(Vocab(), draft)
    assert reason in err.value.message and "--force-pair" in err.value.hint
    assert require_compatible(Vocab(), draft, force=True) is not None  # forced: goes ahead


def test_differences_below_token_5_are_ignored():
    assert check_pair(Vocab(), Vocab(changed={3: b"<unk2>"})).compatible  # llama.cpp skips ids 0-4


def test_a_draft_with_ids_beyond_the_target_cannot_be_forced():
    """Its ids could be invalid input to the target: --force-pair is refused, with no hint to use it."""
    with pytest.raises(PairError) as err:
        require_compatible(Vocab(n_vocab=1000), Vocab(n_vocab=1200), force=True)
    assert "1200 tokens" in err.value.message and "--force-pair" not in err.value.hint


def test_a_mismatch_is_said_in_words_a_user_can_check():
    """'vocabulary types differ (target 2, draft 1)' and 'differs at token 640' named llama.cpp's enum values
    and an id: the tokenizer names and the two texts show at once that the draft is of another family."""
    assert "(target BPE, draft SPM)" in check_pair(Vocab(), Vocab(vocab_type=1)).reason
    assert "(target BPE, draft type 9)" in check_pair(Vocab(), Vocab(vocab_type=9)).reason
    reason = check_pair(Vocab(), Vocab(changed={640: b"\xe2\x96\x81the\n"})).reason
    assert reason == "draft vocabulary differs at token 640 (target 'tok640', draft '▁the\\n')"


def test_a_pair_that_differs_only_in_adding_bos_says_so():
    """'BOS differs (target 1, draft 1)': the ids were the same, only one model adds BOS to a prompt."""
    reason = check_pair(Vocab(), Vocab(add_bos=True)).reason
    assert "BOS" in reason and "(target 1, draft 1)" not in reason and "draft adds it, target does not" in reason


@dataclass
class EosVocab(Vocab):
    add_eos: bool = False


def test_llama_servers_rule_compares_the_eos_flag_only_where_both_vocabularies_say_it():
    """A plugin's vocabulary need not have add_eos: read as "adds no EOS", it made export refuse a pair with
    a draft that adds one, for a reason nobody had checked."""
    assert not check_server_pair(EosVocab(add_eos=False), EosVocab(add_eos=True)).compatible
    assert check_server_pair(EosVocab(add_eos=True), EosVocab(add_eos=True, eos=3)).reason.startswith("EOS differs")
    assert check_server_pair(Vocab(), EosVocab(add_eos=True)).compatible
    assert check_server_pair(EosVocab(add_eos=True), Vocab(eos=3)).compatible
