"""The one table of decoding modes: what each is called, shows as, drafts with, and may draft.

The CLI, the bench, tune, the chat and the views all read this table; a new drafter is one file in
drafters/, one row here and one line in drafterset.add_drafters. A mode's name is also the `source` of the
rounds its drafter drafts, so stats, the view and JSON output use one name for one thing ("target" rounds
drafted nothing).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mode:
    name: str  # the --mode value, the JSON field, the source of the rounds it drafts
    label: str  # how views name its rounds
    default_k: int  # draft length when the user gives none (auto: the longest it may choose)
    max_k: int
    needs_draft_model: bool
    help: str

    def length(self, k: int | None) -> int:
        """The draft length it uses when k is asked for (None: its default): at most max_k (the target's: 0)."""
        return min(k or self.default_k, self.max_k)

    def describe(self, k: int) -> str:
        """The short header of a reply: "auto (k<=64)", "spec k=4", "target alone"."""
        if k <= 0 or self.name == "target":
            return "target alone"
        return f"auto (k<={k})" if self.name == "auto" else f"{self.name} k={k}"


TARGET = Mode("target", "target alone", 0, 0, False, "no drafting: the target model alone")
SPEC = Mode("spec", "draft model", 4, 16, True, "the draft model guesses k tokens every round")
NGRAM = Mode("ngram", "prompt lookup", 8, 64, False, "copy what followed the last few tokens earlier in the text")
SUFFIX = Mode(
    "suffix",
    "suffix match",
    8,
    64,
    False,
    "continue the way this conversation or an earlier one went on after the same text",
)
AUTO = Mode(
    "auto",
    "auto",
    64,
    64,
    True,
    "choose per round from measured costs and acceptance: target alone, prompt lookup, suffix match or the draft model",
)

MODES: dict[str, Mode] = {mode.name: mode for mode in (AUTO, SPEC, NGRAM, SUFFIX, TARGET)}
# The modes `bench --modes` may compare with the target alone. suffix drafts from the history that
# `bench --history` gives it (none by default), never from the user's log; its default --modes leaves
# suffix out, so default bench runs compare what they always did.
DRAFTING = tuple(name for name in MODES if name != "target")


def get(name: str) -> Mode:
    """The mode called `name`; KeyError for an unknown one (the CLI turns it into a usage error)."""
    return MODES[name]


def label_of(source: str) -> str:
    """A round's source as people read it ("spec" -> "draft model")."""
    mode = MODES.get(source)
    return mode.label if mode is not None else source


def unused_draft(draft, modes: list[str], given_as: str, aside: str = "it is not loaded") -> str | None:
    """The note for a --draft that none of the modes drafts with, which is then not loaded (run's chat keeps it for
    a later /mode): dropped unsaid, it read as if the draft model had been used. aside: what becomes of it
    (export's command does not name it)."""
    if draft is None or any(mode not in MODES or MODES[mode].needs_draft_model for mode in modes):
        return None
    how = "drafts nothing" if modes == ["target"] else "does not draft with the draft model"
    return f"--draft {draft.name} is not used: {given_as} {how} ({aside})"
