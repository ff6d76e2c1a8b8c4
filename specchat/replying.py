"""One reply generated into a sink (outputs.py), and what goes to stderr after it: why it stopped early, --stats,
and a Ctrl-C or a reader gone that cut it short, which then ends the run."""

from __future__ import annotations

import errno
import os
import sys
from typing import TYPE_CHECKING

from .statsview import print_stats
from .view import note, stderr_console

if TYPE_CHECKING:
    from .generation import Generation, Update
    from .outputs import Output, Request
    from .runtime import Pipeline


def reply(pipeline: Pipeline, prompt: list[int], request: Request, output: Output) -> Generation:
    """Generate one reply into a sink. A reader that goes away (`| head`) stops the reply as Ctrl-C does, so that
    it is still returned (and logged, cut short); after_reply() then ends the run as the broken pipe would have."""

    def update(update: Update) -> None:
        if output.reader_gone:
            return
        try:
            output.update(update)
        except BrokenPipeError:
            output.reader_gone = pipeline.interrupt.requested = True  # the loop stops at its next step

    generation = None
    try:
        with output:
            generation = pipeline.generate(
                prompt,
                request.params,
                mode=request.mode,
                k=request.k,
                max_tokens=request.max_tokens or sys.maxsize,
                on_update=update,
            )
        if not output.reader_gone:
            output.finish(generation)
    except BrokenPipeError:  # the live view's last lines, or --json's one write
        if generation is None:
            raise
        output.reader_gone = True
    return generation


def print_reply_stats(pipeline: Pipeline, request: Request, generation: Generation, *, mode_note: bool = True) -> None:
    """--stats on stderr: speed, stop, rounds and acceptance; auto's note (unless mode_note is False: the chat says
    it once), what it set aside, threads given up."""
    err = stderr_console()
    print_stats(err, generation.stats, request.k, request.label)
    if mode_note and request.mode == "auto" and pipeline.mode_note:
        note(err, pipeline.mode_note)
    if generation.set_aside:
        note(err, set_aside_note(generation.set_aside))
    if generation.threads and generation.threads[0] < generation.threads[1]:
        fewest, most = generation.threads
        note(err, f"llama.cpp ran on {fewest} of {most} threads for some of this reply: other programs kept CPUs "
             "busy (--threads N keeps a count)")  # fmt: skip


def after_reply(
    pipeline: Pipeline, request: Request, generation: Generation, *, show_stats: bool, reader_gone: bool = False
) -> None:
    """On stderr: why the reply stopped early, and --stats; then a Ctrl-C or a reader gone that cut it short goes
    on (a quiet exit 0 for the reader)."""
    err, stats = stderr_console(), generation.stats
    if stats.stop_reason == "context":
        note(err, f"stopped: the context of {pipeline.target.n_ctx} tokens is full (raise --ctx for longer replies)")
    if show_stats and not generation.unanswered:  # as in the chat: '0 tokens, no token' said nothing
        print_reply_stats(pipeline, request, generation)
    if reader_gone:
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
    if stats.stop_reason == "interrupted":
        raise KeyboardInterrupt


def set_aside_note(counts: dict[str, int]) -> str:
    """What auto's guard did in a reply, in words (`--stats`)."""
    from .modes import label_of

    times = {1: "once", 2: "twice"}
    names = ", ".join(f"{label_of(name)} {times.get(n, f'{n} times')}" for name, n in sorted(counts.items()))
    return f"auto: set aside {names} (rounds that really ran slower than the target alone; tried again later)"
