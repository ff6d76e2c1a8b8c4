"""Multi-turn replay for `specchat bench`: every turn of a record is measured.

Turn n's prompt is the conversation so far, and the earlier assistant replies in it are the target's
own, generated here once with the target alone (the run's sampling settings and seed) before anything
is measured. Every variant, mode and repetition then gets the same token ids for the same turn, so
they are compared on exactly the same conversation, and only each turn's reply is measured.

A turn whose conversation does not fit the context is skipped with the rest of its record (a later turn
only adds to it), for every variant alike, and reported (Skipped); only a bench where no first turn fits
stops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .benchsuite import Prompt
from .chat import Message, TemplateError
from .ctxsize import past_training
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


@dataclass(frozen=True)
class Skipped:
    """The turns of a record that were not measured: from the first whose conversation outgrew the context."""

    prompt_id: str
    category: str
    turns: list[int]
    tokens: int  # the conversation up to the first skipped turn, prompt of its reply included
    ctx: int

    def text(self) -> str:
        first, last = self.turns[0], self.turns[-1]
        which = f"turn {first}" if first == last else f"turns {first}-{last}"
        # A first turn has no earlier replies: neither --earlier-tokens nor --turns first would help it.
        hint = (
            "raise --ctx, lower --earlier-tokens, or --turns first"
            if first > 1
            else "raise --ctx, or shorten the prompt"
        )
        what = "the conversation so far" if first > 1 else "the prompt"
        return (
            f"skipped prompt #{self.prompt_id}, {which}: {what} takes {self.tokens} tokens; "
            f"the context holds {self.ctx} ({hint})"
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
    template_kwargs: dict | None = None,
) -> tuple[list[Turn], list[Skipped]]:
    """Every turn of every record with its prompt ids, and the turns skipped because they do not fit the
    context; writes the history replies on the way. template_kwargs: --chat-template-kwargs, every turn."""
    turns, skipped = [], []
    for prompt in prompts:
        messages: list[Message] = []
        for number, text in enumerate(prompt.turns, start=1):
            messages.append(Message("user", text))
            ids = pipeline.prompt(messages, template_kwargs=template_kwargs)
            if not fits(pipeline, ids):
                skipped.append(_skipped(pipeline, prompt, number, ids))
                break
            turn = Turn(prompt, number, ids)
            turns.append(turn)
            if number < len(prompt.turns):
                if progress:
                    progress(f"history · {turn.label} · target alone")
                messages.append(Message("assistant", _reply(pipeline, turn.ids, params, max_tokens)))
    return turns, skipped


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


def first_turns(
    pipeline, prompts: list[Prompt], template_kwargs: dict | None = None
) -> tuple[list[Prompt], list[Skipped]]:
    """The records whose first turn fits the context, and the others, skipped whole: checked before the
    cost model is measured (a minute on a small CPU), not after it. Later turns hold the target's replies,
    known only once written (replay). None fitting at all stops the bench: there is nothing to measure."""
    fitting, skipped = [], []
    for prompt in prompts:
        ids = pipeline.prompt([Message("user", prompt.turns[0])], template_kwargs=template_kwargs)
        if fits(pipeline, ids):
            fitting.append(prompt)
        else:
            skipped.append(_skipped(pipeline, prompt, 1, ids))
    if not fitting:
        shortest = min(s.tokens for s in skipped)
        which = "the first turn" if len(skipped) == 1 else "the shortest first turn"
        full = ContextFullError(
            f"no bench prompt fits the context: {which} takes {shortest} tokens; "
            f"the context holds {pipeline.target.n_ctx}",
            hint="raise --ctx, or shorten the prompt",
        )
        raise past_training(full, shortest, pipeline.resolved.target)
    return fitting, skipped


def at_risk(pipeline, prompts: list[Prompt], reply_tokens: int, template_kwargs: dict | None = None) -> int:
    """The later turns that may not fit the context once the replies before them are written (up to
    reply_tokens each): known only then (replay skips them), so the plan says they may be skipped rather than
    counting them as sure."""
    risky = 0
    for prompt in (p for p in prompts if len(p.turns) > 1):  # a first turn that fits was checked (first_turns)
        messages: list[Message] = []
        for number, text in enumerate(prompt.turns, start=1):
            messages.append(Message("user", text))
            try:  # earlier replies empty: what the written ones add comes on top
                ids = pipeline.prompt(messages, template_kwargs=template_kwargs)
            except TemplateError:  # a template that wants a reply's text: replay says what it makes of the turn
                break
            if len(ids) + (number - 1) * reply_tokens >= pipeline.target.n_ctx:  # no room left, as fits() says
                risky += len(prompt.turns) - number + 1
                break
            messages.append(Message("assistant", ""))
    return risky


def fits(pipeline, ids: list[int]) -> bool:
    """Room for at least one token of reply, as speculative.check_fits asks."""
    return len(ids) < pipeline.target.n_ctx


def _skipped(pipeline, prompt: Prompt, number: int, ids: list[int]) -> Skipped:
    turns = list(range(number, len(prompt.turns) + 1))  # a later turn only adds to the conversation
    return Skipped(prompt.id, prompt.category, turns, len(ids), pipeline.target.n_ctx)


def _reply(pipeline, ids: list[int], params: SamplingParams, max_tokens: int) -> str:
    """The target's own reply, as the chat would keep it in the conversation (its text)."""
    pipeline.reset()
    generation = pipeline.generate(ids, params, mode="target", k=0, max_tokens=max_tokens)
    if generation.stats.stop_reason == "interrupted":  # a cut-short history would skew every later turn
        raise KeyboardInterrupt
    return generation.text
