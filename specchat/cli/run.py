"""`specchat run` (chat, one-shot prompts, piped stdin) and `specchat serve` (the OpenAI-compatible API)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Annotated

import typer

from ..modes import unused_draft
from .app import (
    FORMAT_HELP,
    K_HELP,
    MODE_HELP,
    MODES_ANY_CASE,
    NO_HISTORY_HELP,
    Ctx,
    Draft,
    DraftGpuLayers,
    GpuLayers,
    Opt,
    Pair,
    ReplyTokens,
    RunCtx,
    Target,
    Threads,
    any_case,
    app,
    finite,
    from_env,
    given,
    load_pipeline,
    make_options,
    stderr_console,
    utf8_text,
)

SYSTEM_HELP = (
    "System prompt (default: the template's; with -c or --cid the conversation's. - : read from stdin; the prompt "
    "is then the argument alone)."
)


@app.command(
    epilog="Examples:\n\n"
    '  specchat run "Write a Python function that reverses a string"\n\n'
    "  echo 'Explain list comprehensions' | specchat run --stats\n\n"
    '  git diff | specchat run "Write a commit message for this diff" --json\n\n'
    '  specchat run --no-spec "Same prompt, target alone" --stats\n\n'
    '  specchat run --target big.gguf --draft small.gguf -k 6 "Hello"'
)
def run(
    ctx: typer.Context,
    prompt: Annotated[
        str | None,
        typer.Argument(help="The prompt, after any piped stdin (- : the prompt is stdin alone).", callback=utf8_text),
    ] = None,
    pair: Pair = None,
    target: Target = None,
    draft: Draft = None,
    mode: Annotated[str, Opt("--mode", "-m", help=MODE_HELP, callback=MODES_ANY_CASE)] = "auto",
    draft_tokens: Annotated[int | None, Opt("--draft-tokens", "-k", min=1, max=64, help=K_HELP)] = None,
    no_spec: Annotated[bool, Opt("--no-spec", help="Same as --mode target.")] = False,
    no_tuning: Annotated[bool, Opt("--no-tuning", help="Ignore saved tuning; measure afresh (not saved).")] = False,
    p_min: Annotated[
        float, Opt("--p-min", parser=finite(0.0, 1.0), help="Draft model stops below this probability (0-1).")
    ] = 0.0,
    temperature: Annotated[
        float, Opt(parser=finite(0.0, 5.0), help="0-5; 0 = greedy (exactly the target's output).")
    ] = 0.0,
    top_k: Annotated[int, Opt(min=0, help="Keep the k most likely tokens (0 = off).")] = 40,
    top_p: Annotated[float, Opt(parser=finite(0.0, 1.0), help="Nucleus sampling mass (0-1; 1 = off).")] = 0.95,
    min_p: Annotated[
        float, Opt(parser=finite(0.0, 1.0), help="Drop tokens below min_p x the top probability (0-1).")
    ] = 0.05,
    seed: Annotated[
        int | None, Opt(help="Sampling seed (none or negative: one drawn per sampled reply, in --json).")
    ] = None,
    max_tokens: ReplyTokens = 0,
    system: Annotated[str | None, Opt(help=SYSTEM_HELP, callback=utf8_text)] = None,
    no_template: Annotated[bool, Opt("--no-template", help="Send the prompt as plain text, no chat template.")] = False,
    n_ctx: RunCtx = 0,
    threads: Threads = 0,
    gpu_layers: GpuLayers = -1,
    draft_gpu_layers: DraftGpuLayers = -1,
    force_pair: Annotated[bool, Opt("--force-pair", help="Use a pair that fails the vocabulary check.")] = False,
    rejected: Annotated[
        bool, Opt("--rejected/--no-rejected", help="Show rejected guesses as ghost text (live view).")
    ] = True,
    verbose: Annotated[
        bool, Opt("--verbose", "-v", help="Per-position acceptance bars after each reply (live view).")
    ] = False,
    no_color: Annotated[bool, Opt("--no-color", help="No colours (NO_COLOR is honoured too).")] = False,
    stats: Annotated[bool, Opt("--stats", help="Print a speed and acceptance summary to stderr.")] = False,
    fmt: Annotated[str, Opt("--format", "-f", help=FORMAT_HELP, callback=any_case("outputs", "FORMATS"))] = "auto",
    as_json: Annotated[bool, Opt("--json", help="Same as --format json: one object (text + stats).")] = False,
    jsonl: Annotated[bool, Opt("--jsonl", help="Same as --format jsonl: events per round, a summary.")] = False,
    latest: Annotated[bool, Opt("--continue", "-c", help="Continue the latest logged conversation.")] = False,
    cid: Annotated[int | None, Opt("--cid", help="Continue logged conversation ID (`specchat logs`).")] = None,
    no_log: Annotated[bool, Opt("--no-log", help="Do not log this run (or SPECCHAT_NO_LOG=1).")] = False,
    no_history: Annotated[bool, Opt("--no-history", help=NO_HISTORY_HELP)] = False,
) -> None:
    """Chat, or answer one prompt, with speculative decoding.

    With no prompt on a terminal it starts an interactive chat (/help lists its commands). On a
    terminal the reply shows which draft tokens the target accepted and which guesses it rejected;
    piped or redirected, stdout carries only the reply text. Models are pulled on first use. Every
    prompt and reply is logged (`specchat logs`); -c or --cid continues a logged conversation.
    """
    from .. import outputs
    from ..chat import Message
    from ..errors import UsageError
    from ..logstore import Recorder
    from ..repl import ChatSession, ChatSettings, chat_loop, check_system, read_prompt, read_system
    from ..sampling import SamplingParams
    from ..view import keys_unechoed, note, stdout_console

    if no_spec and mode != "target" and given(ctx, "mode"):
        raise UsageError(f"--no-spec and --mode {mode} disagree", hint="--no-spec is --mode target: give one of them")
    if latest and cid is not None:  # --cid won in silence: -c read as if it had continued the latest
        raise UsageError("-c and --cid both choose the conversation to continue", hint="give one of them")
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
    # The conversation to continue before the prompt: -c on an empty log with nothing piped said "the prompt is
    # empty", as if a prompt were all it lacked, and `-c -` on a terminal read one first. An unknown --cid fails
    # before loading too.
    check_system(system, prompt)  # a usage error before the log's state errors
    log = Recorder.start(no_log=no_log, latest_one=latest, cid=cid)
    from_stdin, system = system == "-", read_system(system)  # stdin, before the prompt reads what is left
    text = read_prompt(
        prompt, chat=chat, why_no_chat=why_no_chat if terminal or dumb or typing else None, raw=no_template
    )
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    given_mode = "--no-spec" if no_spec else f"--mode {mode}"
    system = system if system and system.strip() else None  # blank, as /system: the template's own
    if from_stdin and system is None:  # a pipe forgotten (cron, a script): not in silence
        kept = "the conversation's" if latest or cid is not None else "the template's"
        note(stderr_console(), f"--system - read nothing but blanks from stdin: {kept} system prompt is used")
    mode = "target" if no_spec else mode
    lone_target = target is not None and draft is None
    unused = _unused(draft_tokens, p_min, mode, given_mode, lone_target) + _unused_when_greedy(ctx, temperature)
    if text is not None and (draft_note := unused_draft(draft, [mode], given_mode)):
        unused.append(draft_note)
        draft = None  # not loaded for a reply that cannot use it (nor held to the pair check, nor to memory)
    if text is not None and unused:  # the chat keeps them for a later /mode
        err = stderr_console()
        for line in unused:
            note(err, line)
    settings = ChatSettings(mode, draft_tokens, True, params, max_tokens, rejected, verbose, not no_template, stats)
    options = make_options(
        ctx, target, draft, gpu_layers, pair=pair, mode=settings.mode, n_ctx=n_ctx, threads=threads,
        draft_gpu_layers=draft_gpu_layers, force_pair=force_pair, use_tuning=not no_tuning, p_min=p_min,
        history=not no_history, log=log.enabled,
    )  # fmt: skip
    conversation, ids = None, []
    if text is not None:
        conversation = log.conversation(system)
        conversation.messages.append(Message("user", text))

    def tokenized(pipeline) -> None:
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

    # Keys typed while the chat's models load wait unechoed for its first prompt, as during a reply: a Ctrl-D
    # there was the terminal's end-of-file, which became a NUL byte that the prompt swallowed (see keys_unechoed);
    # if the load fails they are dropped, or the shell would read them
    with keys_unechoed(dropped_on_error=True) if conversation is None and not plain_chat else nullcontext():
        pipeline = load_pipeline(options, tokenized if conversation is not None else None)
    with pipeline:
        console = stdout_console(no_color)
        if conversation is None:
            session = ChatSession(pipeline, settings, console, system, log, plain=plain_chat)
            raise typer.Exit(chat_loop(session, history=True))
        request = settings.request()
        sink = outputs.make(fmt, pipeline, request, console, show_rejected=rejected, verbose=verbose)
        generation = outputs.reply(pipeline, ids, request, sink)
        if not generation.unanswered:  # as in the chat: logged, -c sent it again with every later turn
            log.record_reply(conversation, generation, pipeline, request)  # after the reply is out
        # inside the `with`: a Ctrl-C that cut the reply short leaves without freeing the models first
        outputs.after_reply(pipeline, request, generation, show_stats=stats, reader_gone=sink.reader_gone)


def _prompt(pipeline, conversation, settings, log) -> list[int]:
    """The prompt ids. Continuing a conversation (-c, --cid), its oldest turns give way when it has outgrown
    the context, as in the chat (a one-line note says so); a new one is sent whole."""
    from ..repl import fit_turns
    from ..view import note

    if len(conversation.messages) == 1:
        return pipeline.prompt(conversation.as_messages(), use_template=settings.use_template)
    ids, gave_way = fit_turns(pipeline, conversation, settings, log)
    if gave_way:
        note(stderr_console(), gave_way)
    return ids


def _unused(draft_tokens: int | None, p_min: float, mode: str, given_mode: str, lone_target: bool = False) -> list[str]:
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


ALLOW_ORIGIN_HELP = (
    "Let web pages from this origin call the API (repeatable; * for any; or SPECCHAT_ALLOW_ORIGINS=a,b). "
    "Pages on this machine (localhost, 127.0.0.1, [::1]) always may."
)


@app.command(
    epilog="Examples:\n\n  specchat serve\n\n  specchat serve --pair qwen2.5-coder-7b --mode spec --port 8081\n\n"
    "  specchat serve --host 0.0.0.0 --api-key $(openssl rand -hex 16)"
)
def serve(
    ctx: typer.Context,
    pair: Pair = None,
    target: Target = None,
    draft: Draft = None,
    host: Annotated[str, Opt(help="Address to listen on (beyond this machine only with --api-key).")] = "127.0.0.1",
    port: Annotated[int, Opt(min=0, max=65535, help="Port to listen on (0 = any free one).")] = 8080,
    mode: Annotated[str, Opt("--mode", "-m", help=MODE_HELP, callback=MODES_ANY_CASE)] = "auto",
    draft_tokens: Annotated[int | None, Opt("--draft-tokens", "-k", min=1, max=64, help=K_HELP)] = None,
    api_key: Annotated[str | None, Opt(envvar="SPECCHAT_API_KEY", help="Require Authorization: Bearer KEY.")] = None,
    max_tokens: Annotated[int, Opt("--max-tokens", "-n", min=1, help="The most tokens a request may get.")] = 2048,
    queue: Annotated[int, Opt("--queue", min=0, help="Requests that may wait behind the running one.")] = 8,
    n_ctx: Ctx = 4096,
    threads: Threads = 0,
    gpu_layers: GpuLayers = -1,
    draft_gpu_layers: DraftGpuLayers = -1,
    no_log: Annotated[bool, Opt("--no-log", help="Do not log requests (or SPECCHAT_NO_LOG=1).")] = False,
    no_history: Annotated[bool, Opt("--no-history", help=NO_HISTORY_HELP)] = False,
    allow_origin: Annotated[
        list[str] | None, Opt(metavar="ORIGIN", envvar="SPECCHAT_ALLOW_ORIGINS", help=ALLOW_ORIGIN_HELP)
    ] = None,
) -> None:
    """Serve the models over an OpenAI-compatible HTTP API (chat completions, completions, models).

    The models load once; requests run one at a time, queued. Responses carry llama-server's
    `timings` and a `speculative` object (acceptance, rounds by source). See docs/serve.md.
    """
    from ..cors import parse_origins
    from ..logstore import enabled as logging_on
    from ..server import ServeConfig, check_host, listen
    from ..server import serve as run_server
    from ..view import note

    check_host(host, api_key)  # all three before minutes of loading
    origins = parse_origins(allow_origin or [], from_env(ctx, "allow_origin"))
    for line in _unused(draft_tokens, 0.0, mode, f"--mode {mode}"):  # serve's mode is the same for every request
        note(stderr_console(), line)
    if draft_note := unused_draft(draft, [mode], f"--mode {mode}"):
        note(stderr_console(), draft_note)
        draft = None
    sock = listen(host, port)
    options = make_options(
        ctx, target, draft, gpu_layers, pair=pair, mode=mode, n_ctx=n_ctx, threads=threads,
        draft_gpu_layers=draft_gpu_layers, history=not no_history, log=logging_on(no_log),
    )  # fmt: skip
    config = ServeConfig(
        host, port, mode, draft_tokens, api_key, queue, max_tokens, no_log=no_log, allow_origins=origins
    )
    with sock, load_pipeline(options) as pipeline:
        run_server(pipeline, config, stderr_console(), sock)
