"""The steps of `specchat run` (run.py): which view the reply gets, reading the prompt, the notes for options a
reply cannot use, loading the models and answering one prompt."""

from __future__ import annotations

import shlex
from functools import partial
from typing import NamedTuple

import typer

from ..modes import unused_draft
from .app import load_pipeline, stderr_console
from .options import from_env, given


class View(NamedTuple):
    """How the reply is shown, and whether a missing prompt starts the chat."""

    fmt: str
    chat: bool  # no prompt: the interactive chat
    plain_chat: bool  # the chat in plain text (TERM=dumb)
    # the hint when no prompt is given and the chat is not allowed; None: neither stdout nor stdin is a terminal
    # (nor TERM=dumb), so read_prompt gives its own "use a terminal" hint
    why_no_chat: str | None


def check_conflicts(
    ctx: typer.Context, no_spec: bool, mode: str, latest: bool, cid: int | None, no_template: bool = False
) -> None:
    """Usage errors for options that contradict each other."""
    from ..errors import UsageError

    # no template to give them to: ignored, they looked used (SPECCHAT_CHAT_TEMPLATE_KWARGS, for every run, is left out)
    if no_template and given(ctx, "template_kwargs") and not from_env(ctx, "template_kwargs"):
        raise UsageError(
            "--chat-template-kwargs and --no-template disagree",
            hint="--no-template sends the prompt as plain text, with no chat template to take the variables",
        )
    if no_spec and mode != "target" and given(ctx, "mode"):
        raise UsageError(f"--no-spec and --mode {mode} disagree", hint="--no-spec is --mode target: give one of them")
    if latest and cid is not None:  # --cid won in silence: -c read as if it had continued the latest
        raise UsageError("-c and --cid both choose the conversation to continue", hint="give one of them")


def choose_view(fmt: str, *, as_json: bool, jsonl: bool) -> View:
    """The output format, and whether (and why not) a missing prompt starts the chat."""
    from .. import outputs

    terminal = outputs.fancy_terminal()
    fmt = outputs.choose(fmt, as_json=as_json, jsonl=jsonl, terminal=terminal)
    why_no_chat = f"the chat needs the live view, not --format {fmt}: give a prompt, or drop the format"
    dumb = outputs.dumb_terminal()  # a terminal all the same: "use a terminal" would send the user in circles
    plain_chat = dumb and fmt == "text"  # TERM=dumb (Emacs shell, some IDEs): the chat in plain text
    if dumb:
        why_no_chat = f"on TERM=dumb the chat is plain text, not --format {fmt}: give a prompt, or drop the format"
    typing = not terminal and not dumb and outputs.stdin_terminal()
    if typing:  # `specchat run > file`, `specchat run | less`: "use a terminal" would say what the user does
        why_no_chat = 'stdout is not a terminal, so no chat: give a prompt (specchat run "your prompt" > file)'
    chat = (fmt == "live" and terminal) or plain_chat
    return View(fmt, chat, plain_chat, why_no_chat if terminal or dumb or typing else None)


def open_log_and_read_input(prompt, system, view: View, *, raw: bool, no_log: bool, latest: bool, cid: int | None):
    """Start the log (which may create its database, or fail on an unknown --cid); read the system prompt (None:
    the template's or the conversation's) and the prompt (None: the chat). Returns all three.

    The conversation to continue is found before the prompt is read: -c on an empty log with nothing piped said
    "the prompt is empty", as if a prompt were all it lacked, and `-c -` on a terminal read one first. An unknown
    --cid fails before loading too."""
    from ..logstore import Recorder
    from ..repl import check_system, read_prompt, read_system
    from ..view import note
    from .habittable import file_on_stdin

    check_system(system, prompt)  # a usage error before the log's state errors
    log = Recorder.start(no_log=no_log, latest_one=latest, cid=cid)
    from_stdin, system = system == "-", read_system(system)  # stdin, before the prompt reads what is left
    text = read_prompt(prompt, chat=view.chat, why_no_chat=view.why_no_chat, raw=raw)
    system = system if system and system.strip() else None  # blank, as /system: the template's own
    if _names_a_file(prompt):  # `specchat run notes.md`: the model got the name, the user meant the text
        note(
            stderr_console(),
            f"{prompt} is a file here, but its name is the prompt; {file_on_stdin(shlex.quote(prompt))}",
        )
    if from_stdin and system is None:  # a pipe forgotten (cron, a script): not in silence
        kept = "the conversation's" if latest or cid is not None else "the template's"
        note(stderr_console(), f"--system - read nothing but blanks from stdin: {kept} system prompt is used")
    return log, system, text


def _names_a_file(prompt: str | None) -> bool:
    """A prompt of one word that names a file (not `-`, stdin's name)."""
    from .habits import names_a_file

    if prompt is None or prompt == "-" or not prompt.strip() or any(c.isspace() for c in prompt):
        return False
    return names_a_file(prompt)


def draft_after_unused_notes(
    ctx: typer.Context,
    text: str | None,
    draft,
    target,
    *,
    mode: str,
    given_mode: str,
    draft_tokens: int | None,
    p_min: float,
    temperature: float,
):
    """Notes for the options this one reply cannot use; the draft model to load (None where the reply cannot use
    the one given)."""
    lone_target = target is not None and draft is None
    unused = unused_notes(draft_tokens, p_min, mode, given_mode, lone_target) + _unused_when_greedy(ctx, temperature)
    if text is not None and (draft_note := unused_draft(draft, [mode], given_mode)):
        unused.append(draft_note)
        draft = None  # not loaded for a reply that cannot use it (nor held to the pair check, nor to memory)
    if text is not None and unused:  # the chat keeps them for a later /mode
        from ..view import note

        err = stderr_console()
        for line in unused:
            note(err, line)
    return draft


def load_models(options, conversation, settings, log, plain_chat: bool, ids: list[int], system: str | None):
    """The loaded pipeline; with a prompt, its ids appended to `ids` before auto measures the machine; for a
    chat, its template checked then (a base model is refused at once, not after the measuring)."""
    from ..repl import require_chat
    from ..terminal import caret_c_ended, keys_unechoed

    if conversation is not None:
        loaded = partial(_tokenize, conversation, settings, log, ids)
    else:
        loaded = partial(require_chat, system=system, template_kwargs=settings.template_kwargs)
        loaded = loaded if settings.use_template else None
    # Keys typed while the chat's models load wait unechoed for its first prompt, as during a reply: a Ctrl-D
    # there was the terminal's end-of-file, which became a NUL byte that the prompt swallowed (see keys_unechoed);
    # if the load fails they are dropped, or the shell would read them. A one-shot reply's keys echo, ^C too
    chat = conversation is None and not plain_chat
    with keys_unechoed(dropped_on_error=True) if chat else caret_c_ended():
        return load_pipeline(options, loaded)


def reply_once(pipeline, conversation, ids: list[int], settings, log, console, fmt: str) -> None:
    """Answer the one prompt, log the reply, and show its summary."""
    from .. import outputs, replying

    request = settings.request()
    sink = outputs.make(fmt, pipeline, request, console, show_rejected=settings.show_rejected, verbose=settings.verbose)
    generation = replying.reply(pipeline, ids, request, sink)
    if not generation.unanswered:  # as in the chat: logged, -c sent it again with every later turn
        # After the reply is out. Ctrl-C while the write waits for another specchat's (up to 5 s) lost the shown
        # reply from the log: it is held until the write is done, then stops the run once its stats are out.
        with pipeline.interrupt.native():
            log.record_reply(conversation, generation, pipeline, request)
    replying.after_reply(pipeline, request, generation, show_stats=settings.stats, reader_gone=sink.reader_gone)
    pipeline.interrupt.check()  # a Ctrl-C held while the reply was logged: after its --stats and notes


def _tokenize(conversation, settings, log, ids: list[int], pipeline) -> None:
    # Before auto measures the machine (~15 s the first time on 2 cores): a prompt too long for the context is
    # refused at once, not after the wait.
    from ..ctxsize import past_training
    from ..errors import ContextFullError
    from ..speculative import check_fits

    ids.extend(_prompt(pipeline, conversation, settings, log))
    try:
        check_fits(len(ids), pipeline.target.n_ctx)
    except ContextFullError as exc:
        raise past_training(exc, len(ids), pipeline.resolved.target) from None


def _prompt(pipeline, conversation, settings, log) -> list[int]:
    """The prompt ids. Continuing a conversation (-c, --cid), its oldest turns give way when it has outgrown
    the context, as in the chat (a one-line note says so); a new one is sent whole."""
    from ..chat import MessagesRefused, system_refusal
    from ..repl import fit_turns
    from ..view import note

    if len(conversation.messages) == 1:
        kwargs = settings.template_kwargs
        return pipeline.prompt(conversation.as_messages(), use_template=settings.use_template, template_kwargs=kwargs)
    try:
        ids, gave_way = fit_turns(pipeline, conversation, settings, log, chat=False)
    except MessagesRefused as exc:  # "leave out the system prompt (--system...)" named one not given here
        if log.history is None or conversation.system != log.history.system or not conversation.system:
            raise
        if system_refusal(pipeline, conversation.system, settings.template_kwargs) is None:
            raise
        hint = (
            "the conversation's system prompt (from the log) is what it refuses: continue it with the model it began "
        )
        raise MessagesRefused(exc.message, hint=hint + "with, or start a new one (no -c, --cid)") from None
    if gave_way:
        note(stderr_console(), gave_way)
    return ids


def unused_notes(
    draft_tokens: int | None, p_min: float, mode: str, given_mode: str, lone_target: bool = False
) -> list[str]:
    """Notes for options that this one reply (serve: any request) cannot use, as export notes an unused -k: ignored
    in silence, they read as if they had taken effect. The chat keeps them for a later /mode, so it gets none.
    `lone_target`: --target without --draft, where auto loads no draft model (Options.wants_draft)."""
    from ..modes import MODES

    if mode not in MODES:  # an unknown mode is a usage error a moment later
        return []
    notes = []
    if draft_tokens is not None and mode == "target":
        notes.append(f"-k {draft_tokens} is not used: {given_mode} drafts nothing")
    elif draft_tokens is not None and draft_tokens > MODES[mode].max_k:
        notes.append(f"-k {draft_tokens} is more than {given_mode} drafts: it uses {MODES[mode].max_k}")
    if p_min > 0 and not MODES[mode].needs_draft_model:
        notes.append(f"--p-min {p_min:g} is not used: {given_mode} does not draft with the draft model")
    elif p_min > 0 and mode == "auto" and lone_target:
        notes.append(f"--p-min {p_min:g} is not used: --target without --draft loads no draft model")
    return notes


def _unused_when_greedy(ctx: typer.Context, temperature: float) -> list[str]:
    """At temperature 0 the seed and the sampling filters change nothing: a note, as for an unused -k."""
    if temperature > 0:
        return []
    names = ("seed", "top_k", "top_p", "min_p")
    set_here = [name for name in names if given(ctx, name)]
    if not set_here:
        return []
    options = ", ".join("--" + name.replace("_", "-") for name in set_here)
    verb = "is" if len(set_here) == 1 else "are"
    return [f"{options} {verb} not used: temperature 0 is greedy (the target's likeliest token); --temperature samples"]
