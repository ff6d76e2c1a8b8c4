"""Multi-turn replay for `specchat bench`: every turn of a record is measured.

Turn n's prompt is the conversation so far, and the earlier assistant replies in it are the target's
own, generated here once with the target alone (the run's sampling settings and seed) before anything
is measured. Every variant, mode and repetition then gets the same token ids for the same turn, so
they are compared on exactly the same conversation, and only each turn's reply is measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .benchsuite import Prompt
from .chat import Message
from .errors import ContextFullError
from .sampling import SamplingParams


@dataclass
class Turn:
    """One measured reply: a record, which of its turns (1-based), and the prompt ids up to it."""

    prompt: Prompt
    number: int
    ids: list[int]

    @property
    def label(self) -> str:
        return f"{self.prompt.category} #{self.prompt.id}" + (
            f" turn {self.number}" if len(self.prompt.turns) > 1 else ""
        )


def count(prompts: list[Prompt]) -> int:
    """Measured replies per variant and repetition: one per turn."""
    return sum(len(p.turns) for p in prompts)


def replay(
    pipeline,
    prompts: list[Prompt],
    params: SamplingParams,
    max_tokens: int,
    progress: Callable[[str], None] | None = None,
) -> list[Turn]:
    """Every turn of every record with its prompt ids; writes the history replies on the way."""
    turns = []
    for prompt in prompts:
        messages: list[Message] = []
        for number, text in enumerate(prompt.turns, start=1):
            messages.append(Message("user", text))
            turn = Turn(prompt, number, _fit(pipeline, prompt, number, messages))
            turns.append(turn)
            if number < len(prompt.turns):
                if progress:
                    progress(f"history · {turn.label} · target alone")
                messages.append(Message("assistant", _reply(pipeline, turn.ids, params, max_tokens)))
    return turns


def groups(samples: list) -> list[tuple[str, int | None, list]]:
    """The report's rows of benchresult.Sample: (category, turn, samples) per category, then "all" where there
    are several. A category whose records have several turns gets one group per turn instead: a turn
    that revises a reply copies far more than a first turn, and a pooled row would hide it."""
    categories = sorted({s.category for s in samples})
    out: list[tuple[str, int | None, list]] = []
    for category in categories:
        mine = [s for s in samples if s.category == category]
        turns = sorted({s.turn for s in mine})
        out += (
            [(category, None, mine)]
            if len(turns) == 1
            else [(category, t, [s for s in mine if s.turn == t]) for t in turns]
        )
    if len(categories) > 1:
        out.append(("all", None, samples))
    return out


def check_first_turns(pipeline, prompts: list[Prompt]) -> None:
    """Every record's first turn fits the context: checked before the cost model is measured (a minute
    on a small CPU), not after it. Later turns hold the target's replies, known only once written."""
    for prompt in prompts:
        _fit(pipeline, prompt, 1, [Message("user", prompt.turns[0])])


def _fit(pipeline, prompt: Prompt, number: int, messages: list[Message]) -> list[int]:
    ids = pipeline.prompt(messages)
    n_ctx = pipeline.target.n_ctx
    if len(ids) >= n_ctx:  # said here with the record and turn; the loop would only say "the prompt"
        raise ContextFullError(
            f"bench prompt #{prompt.id}, turn {number}: the conversation so far takes {len(ids)} tokens; "
            f"the context holds {n_ctx}",
            hint="raise --ctx, lower --earlier-tokens (shorter earlier replies), or --turns first"
            if number > 1
            else "raise --ctx, or shorten the prompt",  # a first turn has no earlier replies to shorten
        )
    return ids


def _reply(pipeline, ids: list[int], params: SamplingParams, max_tokens: int) -> str:
    """The target's own reply, as the chat would keep it in the conversation (its text)."""
    pipeline.reset()
    generation = pipeline.generate(ids, params, mode="target", k=0, max_tokens=max_tokens)
    if generation.stats.stop_reason == "interrupted":  # a cut-short history would skew every later turn
        raise KeyboardInterrupt
    return generation.text
