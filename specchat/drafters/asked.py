"""A question asked before, word for word: draft the new reply from the replies it got then.

The history index (history.py) holds each logged message on its own, ended by SEP, and no match crosses
a SEP: suffix matching found nothing for a new reply until it had ORDER tokens of its own, and then
judged the match by the reply's few tokens alone, as a short past copy (suffix.PAST_MATCH). So a task
asked again in the same words (a script or an agent sending its prompt again, a user asking anew) had
its reply's first tokens by the target alone and the rest in short drafts. Where the prompt's last user
message equals a logged one token for token, the logged reply that followed it is where the new one
goes, as far as the new one has followed it: matched as deep as the question and the reply so far.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..tokenchains import LONGEST, ORDER, SEP, Chains

GAP = 2  # at most this many tokens between (and after) the control tokens that close a turn, open a reply
SCAN = 4096  # a question longer than this is judged by its last SCAN tokens


def question_end(prompt: Sequence[int], is_control: Callable[[int], bool]) -> int | None:
    """Where the last user message's text ends in a chat prompt: where the markup that closes the user's
    turn and opens the assistant's begins (control tokens at most GAP apart, the last at most GAP from the
    end: ChatML's `<|im_end|>\\n<|im_start|>assistant\\n`, Llama 3's, Gemma's). None where the prompt ends
    otherwise (no template, an assistant message to continue)."""
    first, gap = None, 0
    for i in range(len(prompt) - 1, -1, -1):
        if is_control(prompt[i]):
            first, gap = i, 0
        elif (gap := gap + 1) > GAP:
            break
    return first


def _opens_turn(prompt: Sequence[int], start: int, is_control: Callable[[int], bool]) -> bool:
    """The text at `start` follows a turn's markup (a control token at most GAP tokens before it): it is
    the whole message, not the end of a longer one."""
    return any(is_control(prompt[i]) for i in range(max(0, start - GAP - 1), start))


def replies_to(
    chains: Chains, prompt: Sequence[int], end: int, is_control: Callable[[int], bool]
) -> tuple[list[int], int]:
    """Where the logged replies to earlier askings of the question prompt[:end] start (positions in
    `chains`), each asking a whole logged message equal to the prompt's last user message, and that
    message's length in tokens (the shortest, where some are only its last SCAN)."""
    if end <= ORDER:
        return [], 0
    tail = np.asarray(prompt[max(0, end - 1 - LONGEST) : end - 1], dtype=np.int64)
    found = chains.candidates(tail)  # the message's last token is the follower; a SEP ends the message
    found = found[(chains.tokens_at(found) == prompt[end - 1]) & (chains.tokens_at(found + 1) == SEP)]
    starts, length = [], SCAN
    for last in found.tolist():
        text = chains.tokens_at(np.arange(last + 1 - SCAN, last + 1))
        seps = np.flatnonzero(text == SEP)
        message = text[seps[-1] + 1 :] if len(seps) else text
        n = len(message)
        if n > end or list(prompt[end - n : end]) != message.tolist():
            continue
        if len(seps) and not _opens_turn(prompt, end - n, is_control):
            continue
        starts.append(last + 2)
        length = min(length, n)
    return starts, (length if starts else 0)


def answers(chains: Chains, starts: list[int], reply: Sequence[int], k: int) -> np.ndarray:
    """Rows of the next k tokens of each logged reply whose beginning is the reply so far (SEP from its
    end on); none where no logged reply went this way."""
    if not starts:
        return np.empty((0, k), dtype=np.int64)
    rows = chains.continuations(np.asarray(starts, dtype=np.int64), len(reply) + k)
    same = (rows[:, : len(reply)] == np.asarray(reply, dtype=np.int64)).all(axis=1) & (rows[:, len(reply)] != SEP)
    return rows[same, len(reply) :]
