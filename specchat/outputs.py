"""Where a reply goes: plain text, one JSON object, one JSON event per round, or the live view.

Every sink has the same shape (`Output`): a context manager around one generation that sees each
`generation.Update` as it happens, then the finished `generation.Generation`. Sinks only show what the loop
reports; none counts rounds or tokens itself. A new format is one class here plus one entry in FORMATS.
replying.py generates a reply into a sink and says on stderr what follows it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import modes
from .errors import UsageError
from .paths import path_text
from .sampling import SamplingParams
from .statsview import position_bars, summary_line
from .textstream import TextStream
from .view import dumb_term, redrawn, stdout_json, write_stdout

if TYPE_CHECKING:
    from rich.console import Console

    from .generation import Generation, Update
    from .runtime import Pipeline

FORMATS = ("auto", "text", "json", "jsonl", "live")  # auto: live on a terminal, else text


@dataclass(frozen=True)
class Request:
    """What one reply is asked for: the mode by name, its draft length, sampling and length limits."""

    mode: str
    k: int
    params: SamplingParams
    max_tokens: int  # 0: no limit, the reply runs to its end or the context's
    template_kwargs: dict = field(default_factory=dict)  # the chat template's variables (--chat-template-kwargs)

    @property
    def label(self) -> str:
        return modes.get(self.mode).describe(self.k)


def fancy_terminal() -> bool:
    """The live view needs a real terminal on stdout (and stdin for chat); TERM=dumb gets plain text."""
    return sys.stdout is not None and sys.stdout.isatty() and not dumb_term()


def stdin_terminal() -> bool:
    """Someone types at a terminal (whatever stdout is)."""
    return sys.stdin is not None and sys.stdin.isatty()


def dumb_terminal() -> bool:
    """A terminal on both ends that says it takes no escape codes (TERM=dumb: Emacs shell, some IDEs)."""
    streams = (sys.stdin, sys.stdout)
    return all(s is not None and s.isatty() for s in streams) and dumb_term()


def choose(fmt: str, *, as_json: bool = False, jsonl: bool = False, terminal: bool = False) -> str:
    """The one output format from --format and its aliases --json/--jsonl; two different ones: usage error."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown --format '{fmt}'", hint=f"choose one of: {', '.join(FORMATS)}")
    given = {flag: value for flag, value, on in (("--json", "json", as_json), ("--jsonl", "jsonl", jsonl)) if on}
    if fmt != "auto":
        given[f"--format {fmt}"] = fmt
    if len(set(given.values())) > 1:
        raise UsageError(f"{' and '.join(given)} both take stdout", hint="choose one output format")
    chosen = next(iter(given.values()), "auto")
    return ("live" if terminal else "text") if chosen == "auto" else chosen


class Output:
    """The protocol every sink follows (the base does nothing)."""

    reader_gone = False  # stdout's reader went away (`| head`): set by replying.reply(), which then writes no more

    def __enter__(self) -> Output:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def update(self, update: Update) -> None:
        """One round's text (or the final flush, round None) with the stats so far."""

    def finish(self, generation: Generation) -> None:
        """The whole reply, after the live part has ended."""


class TextOutput(Output):
    """Plain stdout (pipes, files, TERM=dumb): the reply text only, no ghost text, no escape codes."""

    def update(self, update: Update) -> None:
        text = "".join(segment.text for segment in update.segments if segment.kind != "rejected")
        if text:
            write_stdout(text)

    def finish(self, generation: Generation) -> None:
        if generation.text and not generation.text.endswith("\n"):
            write_stdout("\n")


class JsonOutput(Output):
    """One object at the end: the text, what produced it, and every statistic."""

    kind: str | None = None  # JSONL's summary carries "type": "summary"

    def __init__(self, pipeline: Pipeline, request: Request) -> None:
        self.pipeline = pipeline
        self.request = request

    def finish(self, generation: Generation) -> None:
        payload = summary(self.pipeline, self.request, generation)
        if self.kind:
            payload = {"type": self.kind, **payload}
        write_stdout(stdout_json(payload) + "\n")


class JsonlOutput(JsonOutput):
    """One event per round as it happens, then the summary object."""

    kind = "summary"

    def __init__(self, pipeline: Pipeline, request: Request) -> None:
        super().__init__(pipeline, request)
        self._stream = TextStream(pipeline.target)

    def update(self, update: Update) -> None:
        event = update.round
        if event is None:
            return
        kept = [self._kept(t, i < len(event.emitted)) for i, t in enumerate(event.accepted_tokens)]
        # the guess the accepted tokens left, decoded on from them as the live view shows it (one by one, a guess at
        # the rest of a character they began was a U+FFFD)
        guessed = self._stream.guessed(event.rejected_tokens)
        kept.append(self._kept(event.token, len(event.accepted_tokens) < len(event.emitted)))
        # An accepted end of turn ended the reply inside the draft: the target's token after it is no part of the
        # reply (named, its text joined the reply's and a stray character)
        ended_in_draft = len(event.emitted) < len(event.accepted_tokens)
        record = {
            "type": "round",
            "round": event.index,
            "source": event.source,
            "accepted": kept[:-1],
            "rejected": [{"id": t, "text": text} for t, text in zip(event.rejected_tokens, guessed, strict=True)],
            "target": None if ended_in_draft else kept[-1],
            "emitted": len(event.emitted),
            "draft_s": round(event.draft_s, 6),
            "verify_s": round(event.verify_s, 6),
        }
        write_stdout(stdout_json(record) + "\n")

    def _token(self, token: int) -> dict:
        return {"id": token, "text": self.pipeline.target.piece(token).decode("utf-8", errors="replace")}

    def _kept(self, token: int, in_text: bool) -> dict:
        """A token the target kept. Those in the reply go through one decoder, in order: a character split
        over tokens (an emoji, a rarer CJK one) is whole in the token that ends it and "" in the others, so
        the texts join to the reply; decoded one by one, each part was a U+FFFD."""
        if not in_text:  # after the end of generation
            return self._token(token)
        return {"id": token, "text": self._stream.push(token)}


class LiveOutput(Output):
    """The live view on a terminal: styled tokens, ghost text, a footer; a summary line at the end."""

    def __init__(
        self,
        console: Console,
        request: Request,
        *,
        show_rejected: bool = True,
        verbose: bool = False,
        legend: bool = True,
    ) -> None:
        from .chatview import ReplyView

        self.console = console
        self.request = request
        self.verbose = verbose
        # Ghost text is for a terminal that takes styles (docs/usage.md): elsewhere (--format live into a pipe, or
        # on TERM=dumb, where Rich writes no escape codes) it has no strike-through to set it apart and reads as
        # part of the reply; with FORCE_COLOR into a file it has one, but no legend says what it is.
        show_rejected = show_rejected and redrawn(console)
        self.view = ReplyView(console, k=request.k, label=request.label, show_rejected=show_rejected)
        # The legend names the styles of the tokens: where the view is not drawn (a pipe, a file, TERM=dumb) the
        # text has none, and the line was one more that a script had to cut from the reply
        self.legend = legend and request.k > 0 and self.view.drawn

    def __enter__(self) -> LiveOutput:
        if self.legend:
            from .chatview import legend

            self.console.print(legend(self.view.show_rejected), soft_wrap=self._one_line)
        self.view.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.view.__exit__(*exc)

    def update(self, update: Update) -> None:
        self.view.on_update(update)

    def finish(self, generation: Generation) -> None:
        stats = generation.stats
        self.console.print(summary_line(stats, self.request.label), soft_wrap=self._one_line)
        if self.verbose and stats.drafted:
            for line in position_bars(stats.drafted_at, stats.accepted_at, columns=self.console.width):
                self.console.print(line)

    @property
    def _one_line(self) -> bool:
        """Into a file each line stays one; on a terminal Rich wraps it at words (the terminal broke words)."""
        return not self.view.drawn  # view.redrawn: not with FORCE_COLOR into a pipe either


def _drafts_with_model(pipeline: Pipeline, request: Request) -> bool:
    """The reply's mode may draft with the draft model, and it is loaded (a chat that switched `/mode ngram`
    keeps it loaded, for nothing that reply does)."""
    return pipeline.draft is not None and request.k > 0 and modes.MODES[request.mode].needs_draft_model


def summary(pipeline: Pipeline, request: Request, generation: Generation) -> dict:
    """The JSON description of a reply: "mode" is the mode's name, "label" how views show it."""
    resolved, params = pipeline.resolved, request.params
    return {
        "text": generation.text,
        "pair": resolved.pair,
        "target": path_text(resolved.target),
        "draft": path_text(resolved.draft) if _drafts_with_model(pipeline, request) else None,
        "mode": request.mode,
        "label": request.label,
        "mode_note": pipeline.mode_note if request.mode == "auto" else "",
        "set_aside": dict(generation.set_aside),  # auto: drafter -> times its rounds ran slower than the target
        "threads": dict(zip(("fewest", "most"), generation.threads, strict=True)) if generation.threads else None,
        "settings": {
            "k": request.k,
            "temperature": params.temperature,
            "top_k": params.top_k,
            "top_p": params.top_p,
            "min_p": params.min_p,
            "seed": params.seed,
            "max_tokens": request.max_tokens,
            "ctx": pipeline.target.n_ctx,
            "chat_template_kwargs": dict(request.template_kwargs),
        },
        "stats": generation.stats.as_dict(),
    }


def make(fmt: str, pipeline: Pipeline, request: Request, console: Console | None = None, **live) -> Output:
    """The sink for a chosen format (see choose()); `live` options go to the live view."""
    if fmt == "json":
        return JsonOutput(pipeline, request)
    if fmt == "jsonl":
        return JsonlOutput(pipeline, request)
    if fmt == "live":
        assert console is not None
        return LiveOutput(console, request, **live)
    return TextOutput()
