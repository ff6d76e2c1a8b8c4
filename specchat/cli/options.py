"""The options several commands share, declared once: their types, help texts and the parsers and callbacks
that read their values (a path, a number in a range, a word in any case, a layer count, UTF-8 text), and
whether an option was given. app.py holds the app and the error boundary these options' errors meet."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from ..ctxsize import MAX_AUTO
from ..errors import UsageError
from ..paths import expand_home, replace_bad_bytes, replaced_any
from ..view import stderr_console
from . import complete


def utf8_text(param: typer.CallbackParam, value: str | None) -> str | None:
    """A text argument as UTF-8: bytes that are not (Python passes them on as lone surrogates, which the
    tokenizer and SQLite refuse) are replaced, with a warning, as for piped stdin."""
    if value is None:
        return None
    fixed = replace_bad_bytes(value)
    if replaced_any(value, fixed):
        name = param.opts[0] if param.param_type_name == "option" else "the prompt"
        stderr_console().print(f"warning: {name} is not valid UTF-8; bad bytes were replaced", style="yellow")
    return fixed


def search_text(param: typer.CallbackParam, value: str | None) -> str | None:
    """`logs -q`'s text as UTF-8 (utf8_text). An empty one matched every reply: `logs -q "$WORD"` with WORD
    unset listed the latest replies as if they had matched, so it is refused as an empty path is; so is one of
    spaces alone (`-q "$A $B"`, both unset), which matched nearly every reply."""
    if value is not None and not value.strip():
        raise UsageError("--query is empty", hint="give the text to search for, or leave -q out")
    return utf8_text(param, value)


def any_case(module: str, *names: str, many: bool = False) -> Callable[[str], str]:
    """The callback of an option that takes one of a few lower-case words (--format, --mode, --to), or with `many`
    a comma-separated list of them (bench's --modes), the words being `names` in specchat's `module` (imported
    when the option is read: an import of export or benchreport for every `run` cost 40 ms). `-f JSON`, as users
    of other tools type them, was "unknown --format 'JSON'"; no two of the words differ in case alone. A word that
    is none of them stays as typed, so that the error names what the user wrote ('Turbo', 'Vllm,x'); one padded
    with spaces is taken (`--to "VLLM "` was refused as 'vllm ', neither typed nor a choice)."""

    def known_as(word: str, known: set[str]) -> str:
        return word.strip().lower() if word.strip().lower() in known else word

    def lower(value: str) -> str:
        found = importlib.import_module(f"specchat.{module}")
        known = {word for name in names for word in getattr(found, name)}
        if many:
            return ",".join(known_as(word, known) for word in value.split(","))
        return known_as(value, known)

    return lower


def words(module: str, *names: str, many: bool = False) -> dict:
    """A word option's callback (any_case) and Tab completion (complete.words), from one list of words:
    `Opt("--to", **words("export", "TARGETS"))`."""
    return {
        "callback": any_case(module, *names, many=many),
        "autocompletion": complete.words(module, *names, many=many),
    }


MODE_WORDS = words("modes", "MODES")  # --mode of run, serve and export
# bench's --modes: read as any mode (the error for target says it is always measured), completed as those it compares
MODE_LIST_WORDS = {
    **words("modes", "MODES", many=True),
    "autocompletion": complete.words("modes", "DRAFTING", many=True),
}


Opt = typer.Option
PAIR_HELP = "Pair from `specchat models`, which marks the default one."
Pair = Annotated[str | None, typer.Option("--pair", "-p", help=PAIR_HELP, autocompletion=complete.pairs)]
PairArgument = Annotated[str | None, typer.Argument(help=PAIR_HELP, autocompletion=complete.pairs)]
# tune and pull take the pair as an argument; run, serve, bench and export as --pair/-p, which people type here too
PAIR_ALSO_HELP = "The same as the PAIR argument."
PairAlso = Annotated[str | None, typer.Option("--pair", "-p", help=PAIR_ALSO_HELP, autocompletion=complete.pairs)]


def one_pair(argument: str | None, option: str | None) -> str | None:
    """The pair given as PAIR or as --pair (one of them, or both alike)."""
    if argument is not None and option is not None and argument != option:
        raise UsageError(f"PAIR '{argument}' and --pair '{option}' disagree", hint="give the pair once")
    return argument if argument is not None else option


def a_path(option: str, what: str) -> Callable[[str], Path]:
    """A path option's text as a Path. Click made "" (`--target "$MODEL"` with MODEL unset) the path ".", and
    the error said ". is a directory"; an empty path is named as such. A ~ the shell left alone (quoted, or
    `--output=~/r.json`: no shell expands it after `=`) is the home directory: bench's -o said "~: the directory
    does not exist"."""

    def parse(text: str) -> Path:
        if not text:
            raise UsageError(f"{option} is empty", hint=f"give {what}, or leave {option} out")
        if text.startswith("="):  # `-o=report.md`: Click gives a short option's value as typed, "=" and all
            raise UsageError(
                f"{option} got '{text}', a name starting with '='",
                hint=f"write {option} {text[1:] or 'NAME'} (`-o=x` keeps the '=': a short flag takes no '=')",
            )
        return expand_home(text)

    return parse


def model_file_option(role: str):
    """--target/--draft: a local GGUF of that role, "~" expanded, an empty path refused."""
    option = f"--{role}"
    parser = a_path(option, "a .gguf file's path")
    help_text = f"Local {role} GGUF (overrides the pair's)."
    return typer.Option(option, parser=parser, metavar="<path>", help=help_text)


Target = Annotated[Path | None, model_file_option("target")]
Draft = Annotated[Path | None, model_file_option("draft")]
Ctx = Annotated[int, typer.Option("--ctx", min=64, help="Context size in tokens (both models).")]
THREADS_HELP = (
    "CPU threads (0 = all usable cores, fewer while other programs keep them busy; a number, at most the usable "
    "cores, is kept to)."
)
Threads = Annotated[int, typer.Option("--threads", min=0, help=THREADS_HELP)]


def layer_count(param: typer.CallbackParam, value: int) -> int:
    """--gpu-layers, --draft-gpu-layers: -1 (all) or a count. Another negative was taken as all by the
    engine, keyed apart from -1 by the tuning and left out by export: a typo that changed three things."""
    if value < -1:
        raise UsageError(
            f"{param.opts[0]} {value} is not a layer count",
            hint="-1 puts every layer on the GPU (the default), 0 none (CPU only), N that many",
        )
    return value


def finite(low: float, high: float) -> Callable[[str], float]:
    """A number from low to high. NaN is named as what it is: click's range check read `nan` as above the
    maximum ("Input should be less than or equal to 5")."""

    def parse(text) -> float:
        try:
            value = float(text)
        except ValueError:
            raise typer.BadParameter(f"{text!r} is not a number") from None
        if math.isnan(value):
            raise typer.BadParameter(f"{text!r} is not a number: give one from {low:g} to {high:g}")
        if not low <= value <= high:
            raise typer.BadParameter(f"{text} is not in the range {low:g} to {high:g}")
        return value + 0.0  # -0.0 becomes 0.0: `--temperature -0` was recorded as -0.0 (the chat's /temp -0 as 0)

    return parse


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}
TEMPLATE_KWARGS_EXAMPLE = """--chat-template-kwargs '{"enable_thinking": false}'"""


def template_variables(text: str, name: str = "--chat-template-kwargs") -> dict:
    """--chat-template-kwargs: llama-server's JSON object of more variables for the chat template, read once; each
    value as JSON gives it. A key the renderer sets itself (messages, bos_token...) would be overridden in silence.
    name: what an error names (the environment variable where the value came from it)."""
    import json

    from ..template import RESERVED  # here: jinja2 is not imported for every command

    def not_json(name: str) -> float:  # NaN, Infinity: Python reads them, --json and the log wrote them out
        raise ValueError(name)

    try:
        value = json.loads(text, parse_constant=not_json)
    except ValueError:
        raise UsageError(
            f"{name} {text!r} is not JSON", hint=f"give a JSON object: {TEMPLATE_KWARGS_EXAMPLE}"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(
            f"{name} is a JSON {_JSON_TYPES.get(type(value), 'value')}, not an object",
            hint=f"give the variables as an object: {TEMPLATE_KWARGS_EXAMPLE}",
        )
    if reserved := [key for key in value if key in RESERVED]:
        raise UsageError(
            f"{name} may not set '{reserved[0]}': specchat gives the template that variable itself",
            hint="leave it out; the other keys are the template's own variables",
        )
    return value


def _read_template_kwargs(ctx: typer.Context, param: typer.CallbackParam, text: str | None) -> dict | None:
    """The option's JSON, or its environment variable's (named in an error: the user typed no flag)."""
    if text is None:
        return None
    return template_variables(text, param.envvar if from_env(ctx, param.name) else "--chat-template-kwargs")


def _template_kwargs(help_text: str):
    # read as text, parsed by the callback: only there is it known whether the value came from the variable
    # llama-server reads LLAMA_ARG_CHAT_TEMPLATE_KWARGS; the flag wins over the variable, as there
    return Opt("--chat-template-kwargs", metavar="JSON", parser=str, envvar="SPECCHAT_CHAT_TEMPLATE_KWARGS",
               callback=_read_template_kwargs, help=help_text)  # fmt: skip


TEMPLATE_KWARGS_HELP = (
    "More variables for the chat template, every turn, as a JSON object (llama-server's flag): "
    f"""{TEMPLATE_KWARGS_EXAMPLE} turns Qwen3's thinking off."""
)
TemplateKwargs = Annotated[dict | None, _template_kwargs(TEMPLATE_KWARGS_HELP)]
SERVE_TEMPLATE_KWARGS_HELP = (
    "Chat template variables for every chat request, as a JSON object (llama-server's flag); a request's own "
    f"""chat_template_kwargs are set over them, key by key: {TEMPLATE_KWARGS_EXAMPLE}."""
)
ServeTemplateKwargs = Annotated[dict | None, _template_kwargs(SERVE_TEMPLATE_KWARGS_HELP)]
BENCH_TEMPLATE_KWARGS_HELP = (
    "More variables for the chat template of every measured prompt, as a JSON object (llama-server's flag): "
    f"""{TEMPLATE_KWARGS_EXAMPLE} benches Qwen3 with its thinking off."""
)
BenchTemplateKwargs = Annotated[dict | None, _template_kwargs(BENCH_TEMPLATE_KWARGS_HELP)]
EXPORT_TEMPLATE_KWARGS_HELP = (
    "Chat template variables for every chat request, as a JSON object: llama-server's --chat-template-kwargs, "
    f"""vLLM's --default-chat-template-kwargs: {TEMPLATE_KWARGS_EXAMPLE}."""
)
ExportTemplateKwargs = Annotated[dict | None, _template_kwargs(EXPORT_TEMPLATE_KWARGS_HELP)]
GPU_LAYERS_HELP = "Target layers on the GPU (-1 = all, when it can; 0 = none: CPU only)."
GpuLayers = Annotated[int, Opt("--gpu-layers", callback=layer_count, help=GPU_LAYERS_HELP)]
DRAFT_GPU_LAYERS_HELP = "Draft layers on the GPU (-1 = all; 0 = none: CPU only)."
DraftGpuLayers = Annotated[int, Opt("--draft-gpu-layers", callback=layer_count, help=DRAFT_GPU_LAYERS_HELP)]
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Tokens per generation.")]
REPLY_TOKENS_HELP = "Longest reply in tokens (0 = to its end or the context's)."
ReplyTokens = Annotated[int, Opt("--max-tokens", "-n", min=0, help=REPLY_TOKENS_HELP)]
RUN_CTX_HELP = (
    f"Context size in tokens, both models (0 = the model's trained one, at most {MAX_AUTO}, as memory allows)."
)
RunCtx = Annotated[int, Opt("--ctx", min=0, help=RUN_CTX_HELP)]
MODE_HELP = (
    "auto: choose per round from measured costs (target alone when drafting cannot pay); "
    "spec: draft model; ngram: prompt lookup; suffix: what followed the same text in this or past "
    "conversations; target: no drafting."
)
K_HELP = "Draft length (auto: the most it may use; spec: at most 16). Default: spec 4, ngram 8, suffix 8, auto 64."
NO_HISTORY_HELP = "Draft (auto, suffix) from this conversation only, not past ones (or SPECCHAT_NO_HISTORY=1)."
SERVE_NO_HISTORY_HELP = (
    "Draft (auto, suffix) from the request itself, not logged conversations (or SPECCHAT_NO_HISTORY=1)."
)
BENCH_HISTORY_HELP = (
    "What the suffix and auto variants draft from besides the measured conversation: none (the default, so results "
    'never depend on your own log), or a JSONL FILE (- : stdin) of past conversations, one {"messages": [...]} per '
    "line, indexed for this run only (a temporary index, deleted afterwards; your log and history are not read or "
    "written)."
)
EARLIER_HELP = (
    "Longest earlier reply of a multi-turn record, written once by the target alone before the runs (0 = as -n). "
    "A revision revises the whole reply, as in a chat with `run`'s defaults, not one cut at -n."
)
FORMAT_HELP = "auto (live view on a terminal, else text), text, json (one object), jsonl (one event per round), live."


def given(ctx: typer.Context, name: str) -> bool:
    """The option was given (command line or environment), not left at its default. By the source's
    name: Typer carries its own copy of click, whose ParameterSource is not click's."""
    return getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"


def from_env(ctx: typer.Context, name: str) -> bool:
    """The option's value came from its environment variable (an error then names the variable)."""
    return getattr(ctx.get_parameter_source(name), "name", "") == "ENVIRONMENT"
