"""`specchat run` (chat, one-shot prompts, piped stdin) and `specchat serve` (the OpenAI-compatible API)."""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer

from ..modes import unused_draft
from .app import app, load_pipeline, make_options, stderr_console
from .options import (
    FORMAT_HELP,
    K_HELP,
    MODE_HELP,
    MODE_WORDS,
    NO_HISTORY_HELP,
    SERVE_NO_HISTORY_HELP,
    Ctx,
    Draft,
    DraftGpuLayers,
    GpuLayers,
    Opt,
    Pair,
    ReplyTokens,
    RunCtx,
    ServeTemplateKwargs,
    Target,
    TemplateKwargs,
    Threads,
    finite,
    from_env,
    utf8_text,
    words,
)
from .runsteps import (
    check_conflicts,
    choose_view,
    draft_after_unused_notes,
    load_models,
    open_log_and_read_input,
    reply_once,
    unused_notes,
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
    '  specchat run --target big.gguf --draft small.gguf -k 6 "Hello"\n\n'
    """  specchat run --target Qwen3-8B-Q4_K_M.gguf --chat-template-kwargs '{"enable_thinking": false}'"""
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
    mode: Annotated[str, Opt("--mode", "-m", help=MODE_HELP, **MODE_WORDS)] = "auto",
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
    template_kwargs: TemplateKwargs = None,
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
    fmt: Annotated[str, Opt("--format", "-f", help=FORMAT_HELP, **words("outputs", "FORMATS"))] = "auto",
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
    from ..chat import Message
    from ..repl import ChatSession, ChatSettings, chat_loop
    from ..sampling import SamplingParams
    from ..view import stdout_console, wraps_at_words

    check_conflicts(ctx, no_spec, mode, latest, cid, no_template)
    view = choose_view(fmt, as_json=as_json, jsonl=jsonl)
    log, system, text = open_log_and_read_input(
        prompt, system, view, raw=no_template, no_log=no_log, latest=latest, cid=cid
    )
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    given_mode = "--no-spec" if no_spec else f"--mode {mode}"
    mode = "target" if no_spec else mode
    draft = draft_after_unused_notes(
        ctx, text, draft, target, mode=mode, given_mode=given_mode, draft_tokens=draft_tokens, p_min=p_min,
        temperature=temperature,
    )  # fmt: skip
    settings = ChatSettings(
        mode,
        draft_tokens,
        True,
        params,
        max_tokens,
        rejected,
        verbose,
        not no_template,
        stats,
        {} if no_template else template_kwargs or {},  # the variable's, with no template to take them: none
    )
    options = make_options(
        ctx, target, draft, gpu_layers, pair=pair, mode=settings.mode, n_ctx=n_ctx, threads=threads,
        draft_gpu_layers=draft_gpu_layers, force_pair=force_pair, use_tuning=not no_tuning, p_min=p_min,
        history=not no_history, log=log.enabled,
    )  # fmt: skip
    conversation, ids = None, []
    if text is not None:
        conversation = log.conversation(system)
        conversation.messages.append(Message("user", text))
    with load_models(options, conversation, settings, log, view.plain_chat, ids, system) as pipeline:
        console = stdout_console(no_color)
        # On a terminal Rich wraps specchat's own lines (the chat's notes, /help, /stats, -v's bars) at words: the
        # terminal's own wrap broke them inside words on a narrow one. The reply's lines set their own wrap.
        console.soft_wrap = not wraps_at_words(console)
        if conversation is None:
            session = ChatSession(pipeline, settings, console, system, log, plain=view.plain_chat)
            if system is None:  # -c, --cid: the conversation's own (a given one was checked in the load)
                session.check_kept_system()
            raise typer.Exit(chat_loop(session, history=True))
        # inside the `with`: a Ctrl-C that cut the reply short leaves without freeing the models first
        reply_once(pipeline, conversation, ids, settings, log, console, view.fmt)


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
    mode: Annotated[str, Opt("--mode", "-m", help=MODE_HELP, **MODE_WORDS)] = "auto",
    draft_tokens: Annotated[int | None, Opt("--draft-tokens", "-k", min=1, max=64, help=K_HELP)] = None,
    api_key: Annotated[str | None, Opt(envvar="SPECCHAT_API_KEY", help="Require Authorization: Bearer KEY.")] = None,
    max_tokens: Annotated[int, Opt("--max-tokens", "-n", min=1, help="The most tokens a request may get.")] = 2048,
    queue: Annotated[int, Opt("--queue", min=0, help="Requests that may wait behind the running one.")] = 8,
    n_ctx: Ctx = 4096,
    threads: Threads = 0,
    gpu_layers: GpuLayers = -1,
    draft_gpu_layers: DraftGpuLayers = -1,
    template_kwargs: ServeTemplateKwargs = None,
    no_log: Annotated[bool, Opt("--no-log", help="Do not log requests (or SPECCHAT_NO_LOG=1).")] = False,
    no_history: Annotated[bool, Opt("--no-history", help=SERVE_NO_HISTORY_HELP)] = False,
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
    from ..server import ServeConfig, check_host, listen, said_if_stopped_while_loading
    from ..server import serve as run_server
    from ..view import note

    check_host(host, api_key)  # all three before minutes of loading
    origins = parse_origins(allow_origin or [], from_env(ctx, "allow_origin"))
    for line in unused_notes(draft_tokens, 0.0, mode, f"--mode {mode}"):  # serve's mode is the same for every request
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
        host, port, mode, draft_tokens, api_key, queue, max_tokens, no_log=no_log, allow_origins=origins,
        template_kwargs=template_kwargs or {},
    )  # fmt: skip
    with sock, contextlib.ExitStack() as stack:
        with said_if_stopped_while_loading(stderr_console()):
            pipeline = stack.enter_context(load_pipeline(options))
        run_server(pipeline, config, stderr_console(), sock)
