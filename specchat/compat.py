"""Can this draft speculate for this target? llama.cpp's rules for speculative pairs, in Python.

The rules (common/speculative.cpp): same vocabulary type, same BOS/EOS ids and add-BOS flag, vocab sizes
within 128 tokens, and the same token text for every id from 5 up to the smaller vocabulary. llama.cpp
also compares the add-EOS flags. Here neither flag changes what the draft sees (it is fed the target's
token ids, never a tokenization of its own); a different BOS use is kept as llama.cpp's sign of another
family, add-EOS (which chat models leave off) is not compared. `export` checks a llama-server command by
llama-server's own rule instead (check_server_pair), which is looser: there a BOS or EOS id counts only where
the model adds it.
Losslessness never depends on them (the target checks every token), but a draft that speaks another
vocabulary is pure cost, and a draft id beyond the target's vocabulary would be invalid input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .errors import PairError

MAX_VOCAB_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5


class Vocabulary(Protocol):
    n_vocab: int
    vocab_type: int
    bos: int
    eos: int
    add_bos: bool
    # add_eos: bool, where the backend knows it (llama.cpp's engines do): check_server_pair reads it with
    # getattr, since a plugin's vocabulary need not have it

    def token_text(self, token: int) -> bytes: ...


@dataclass(frozen=True)
class PairReport:
    compatible: bool
    reason: str = ""
    forceable: bool = True  # whether --force-pair may override (never when draft ids could be invalid)


def check_pair(target: Vocabulary, draft: Vocabulary) -> PairReport:
    if draft.n_vocab > target.n_vocab + MAX_VOCAB_DIFFERENCE:
        return PairReport(False, f"draft vocabulary has {draft.n_vocab} tokens, target {target.n_vocab}", False)
    if reason := _types_differ(target, draft):
        return PairReport(False, reason)
    if target.bos != draft.bos:
        return PairReport(False, f"BOS differs (target {target.bos}, draft {draft.bos})")
    if target.add_bos != draft.add_bos:
        return PairReport(False, _use_differs("BOS", target.add_bos))
    if target.eos != draft.eos:
        return PairReport(False, f"EOS differs (target {target.eos}, draft {draft.eos})")
    reason = _sizes_differ(target, draft) or _texts_differ(target, draft)
    return PairReport(not reason, reason)


def check_server_pair(target: Vocabulary, draft: Vocabulary) -> PairReport:
    """llama-server's own rule (common_speculative_are_compatible in the llama.cpp of llama-cpp-python 0.3.36),
    which refuses a pair as it starts: the BOS and EOS ids count only where the model adds them, the add flags
    always (an instruct target with a base draft, whose EOS ids differ, runs there; run refuses it unless forced).
    Nothing here is forceable: llama-server has no such option."""
    add_eos = (getattr(target, "add_eos", None), getattr(draft, "add_eos", None))
    if None in add_eos:  # a plugin's vocabulary that does not say: the EOS rule cannot be judged, not failed
        add_eos = (False, False)
    reason = (
        _types_differ(target, draft)
        or (_use_differs("BOS", target.add_bos) if target.add_bos != draft.add_bos else "")
        or (
            f"BOS differs (target {target.bos}, draft {draft.bos})"
            if target.add_bos and target.bos != draft.bos
            else ""
        )
        or (_use_differs("EOS", add_eos[0]) if add_eos[0] != add_eos[1] else "")
        or (f"EOS differs (target {target.eos}, draft {draft.eos})" if add_eos[0] and target.eos != draft.eos else "")
        or _sizes_differ(target, draft)
        or _texts_differ(target, draft)
    )
    return PairReport(not reason, reason, forceable=False)


def check_files(target: Path, draft: Path, rule=check_pair) -> PairReport | None:
    """`rule` on the two files' tokenizers alone (no weights are loaded); None where a file's backend cannot read
    a tokenizer alone, or llama.cpp cannot read it (loading the model then says why)."""
    from .backends import for_path
    from .errors import EngineError

    readers = [getattr(for_path(path), "vocabulary", None) if path.is_file() else None for path in (target, draft)]
    if None in readers:
        return None
    vocabularies = []
    try:
        for reader, path in zip(readers, (target, draft), strict=True):
            vocabularies.append(reader(path))
        return rule(*vocabularies)
    except EngineError:  # reading a tokenizer
        return None
    finally:
        for vocabulary in vocabularies:
            vocabulary.close()


def _types_differ(target: Vocabulary, draft: Vocabulary) -> str:
    if target.vocab_type == draft.vocab_type:
        return ""
    return f"vocabulary types differ (target {_kind(target.vocab_type)}, draft {_kind(draft.vocab_type)})"


def _use_differs(token: str, target_adds: bool) -> str:
    adds, not_adds = ("target", "draft") if target_adds else ("draft", "target")
    return f"{token} use differs ({adds} adds it, {not_adds} does not)"


def _sizes_differ(target: Vocabulary, draft: Vocabulary) -> str:
    if abs(target.n_vocab - draft.n_vocab) <= MAX_VOCAB_DIFFERENCE:
        return ""
    return f"vocab sizes differ by more than {MAX_VOCAB_DIFFERENCE} (target {target.n_vocab}, draft {draft.n_vocab})"


def _texts_differ(target: Vocabulary, draft: Vocabulary) -> str:
    for token in range(FIRST_CHECKED_TOKEN, min(target.n_vocab, draft.n_vocab)):
        if target.token_text(token) != draft.token_text(token):
            texts = f"target {_text(target.token_text(token))}, draft {_text(draft.token_text(token))}"
            return f"draft vocabulary differs at token {token} ({texts})"
    return ""


VOCAB_TYPES = {1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo-2"}  # llama.cpp's llama_vocab_type


def _kind(vocab_type: int) -> str:
    return VOCAB_TYPES.get(vocab_type, f"type {vocab_type}")


def _text(piece: bytes, limit: int = 24) -> str:
    """A token's text, quoted on one line (escapes shown as escapes): another family's token at that id."""
    text = repr(piece.decode("utf-8", errors="replace"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def require_compatible(target: Vocabulary, draft: Vocabulary, *, force: bool | None = False) -> PairReport:
    """force None: the command has no --force-pair (only `run` has), so the hint names `run`'s."""
    report = check_pair(target, draft)
    if report.compatible:
        return report
    if force and report.forceable:
        return report
    hint = "use a draft of the same model family"
    if report.forceable and force is not None:
        hint += ", or --force-pair to try anyway (output stays lossless, acceptance will be low)"
    elif report.forceable:
        hint += " (`specchat run --force-pair` tries this one anyway; this command has no such option)"
    raise PairError(f"incompatible pair: {report.reason}", hint=hint)
