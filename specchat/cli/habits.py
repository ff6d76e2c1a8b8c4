"""Flags typed from habit in llama.cpp, Ollama, LM Studio or vLLM: one line that names specchat's own, exit 2.

Click alone said "No such option: --ctx-size (Possible options: --continue, --ctx)", or worse took the habit
for something else: `run -c 4096` (llama.cpp's context size; here -c is --continue) answered the prompt
"4096" in the latest conversation, `-ngl 99` read as `-n gl`. The tables below are checked before Click
parses a command's arguments; each entry only replaces what would be an error or a misreading, so no
command line that means something here changes meaning. docs/usage.md has the same table for people.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import UsageError
from .habitvalues import (
    FOLLOWED_BY,
    FOREIGN_BY_VALUE,
    MODEL_FILE,
    _hub_repo,
    _model_like,
    _ollama_model,
    _ollama_name,
    _pair_named,
)
from .reading import Reading

HINT = "other tools' flags in specchat: docs/usage.md, 'Coming from other tools'"
CHAT = "`specchat run` with no prompt is the chat"
PER_REQUEST = ("serve", "has no equivalent in serve: each request sets its sampling (temperature, top_p, seed, ...)")
OWN_OPTIONS = (
    "each setting is an option of its own here (--temperature T, --top-k K, --top-p P, --min-p P, --seed N, -n N)"
)
TEMPLATE = "has no equivalent: the GGUF's own chat template is always used here"
# Where the template can be left out: run's flag, serve's plain-text route (elsewhere there is none to name)
TEMPLATES = (("run", f"{TEMPLATE} (--no-template: none)"), ("serve", f"{TEMPLATE} (POST /v1/completions: none)"))
DEVICE = "llama.cpp offloads to the GPUs it finds (--gpu-layers 0, --draft-gpu-layers 0: CPU only)"
ONE_AT_A_TIME = "has no equivalent: requests run one at a time here (--queue: how many may wait)"
# Elsewhere Click read `-np 4` as `-n p` ("'p' is not a whole number"): named here as serve names it.
ONE_GENERATION = "has no equivalent: one generation runs at a time (`specchat serve --queue N`: requests that may wait)"
BATCHES = "has no equivalent: the batch sizes are specchat's own"
COLOURS = "has no equivalent: colours are on where stdout is a terminal (--no-color: off)"
KV_TYPE = "has no equivalent: the KV cache keeps llama.cpp's default type"
KV_PLACE = "has no equivalent: the KV cache goes where its layers go (--gpu-layers 0: all on the CPU)"
SPLIT = "has no equivalent: llama.cpp splits the layers over the GPUs it sees (CUDA_VISIBLE_DEVICES=0: the first)"
PLACEMENT = "has no equivalent: only how many layers go to the GPU is set (--gpu-layers N, --draft-gpu-layers N)"
MAPPED = "has no equivalent: model files are memory-mapped (llama.cpp's default)"
ONCE = "has no equivalent: a prompt given is answered once, without the chat"
REPLY_END = "a reply ends at the model's end of turn or at -n/--max-tokens"
STOP_IN_REQUEST = "has no equivalent in serve: each request's 'stop' strings end its reply"
AS_TYPED = "the prompt is sent as typed (a newline in it: $'a\\nb' in bash, or stdin)"
SYSTEM_IN_REQUEST = ("serve", "has no equivalent in serve: each request's messages carry its system prompt")
GRAMMAR = "has no equivalent: replies follow no grammar or JSON schema (ask for JSON in the prompt)"
HUB = "has no equivalent: models come as pairs here (--pair NAME, see `specchat models`)"
GLUED_NUMBER = re.compile(r"-?\d+(\.\d+)?")  # `-t4`, `-c4096`: a short flag with its number glued on


def _is(option: str, more: str = "") -> tuple[str, str]:
    """An option specchat has under another name (the entry applies where the command has it)."""
    return option, f"is {option} here" + (f" ({more})" if more else "")


def _each(flags: tuple[str, ...], *entries: tuple[str, str]) -> dict[str, list[tuple[str, str]]]:
    """The same entries for each of several flags (a flag's short and long names, its draft model's)."""
    return {flag: list(entries) for flag in flags}


# A flag specchat does not have -> [(what the command must have: an option, or a command's name; the message
# after the flag)]; the first entry whose need the command meets is said, else Click's own error stands.
FOREIGN: dict[str, list[tuple[str, str]]] = {
    "-m": [("--target", "is not an option here: a model file is --target FILE")],
    "--model": [("--target", "is --target FILE here (a pair from `specchat models`: --pair NAME)")],
    "-md": [_is("--draft", "a draft model file")],
    "--model-draft": [_is("--draft", "a draft model file")],
    "--speculative-model": [_is("--draft", "a draft model file")],
    "--speculative-config": [
        ("-k", "is --draft FILE with -k N here (--mode spec: the draft model alone)"),
        ("--ks", "is --draft FILE with --ks N here (--modes spec: the draft model alone)"),
        ("tune", "is --draft FILE here (tune measures every draft length itself)"),
    ],
    **_each(("-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-hfd", "-hfrd", "--hf-repo-draft"), ("--pair", HUB)),
    **_each(
        ("-hft", "--hf-token"), ("--pair", "has no equivalent: a gated model's token is HF_TOKEN=... (environment)")
    ),
    "-c": [_is("--ctx")],
    "--ctx-size": [_is("--ctx")],
    "--context-length": [_is("--ctx")],
    "--max-model-len": [_is("--ctx")],
    "-cd": [_is("--ctx", "one size for both models")],
    "--ctx-size-draft": [_is("--ctx", "one size for both models")],
    "--n-predict": [_is("-n/--max-tokens")],
    "--predict": [_is("-n/--max-tokens")],
    "-t": [_is("--threads")],
    "-tb": [_is("--threads")],
    "--threads-batch": [_is("--threads")],
    **_each(("-td", "--threads-draft", "-tbd", "--threads-batch-draft"), _is("--threads", "one count for both models")),
    "-ngl": [_is("--gpu-layers")],
    "--n-gpu-layers": [_is("--gpu-layers")],
    "--gpu": [_is("--gpu-layers", "-1: all, 0: none")],
    "-ngld": [_is("--draft-gpu-layers")],
    "--n-gpu-layers-draft": [_is("--draft-gpu-layers")],
    "--gpu-layers-draft": [_is("--draft-gpu-layers")],
    "--draft-max": [_is("-k/--draft-tokens")],
    "--draft-n": [_is("-k/--draft-tokens")],
    "--num-speculative-tokens": [_is("-k/--draft-tokens")],
    "--draft-min": [("--draft-tokens", "has no equivalent: -k/--draft-tokens sets the most a round drafts")],
    "--draft-p-min": [_is("--p-min")],
    "--spec-type": [_is("--mode", "spec: the draft model, ngram: prompt lookup"), _is("--modes")],
    "--prompt": [("run", 'has no equivalent: the prompt is the argument: specchat run "PROMPT"'), _is("--prompts")],
    "--file": [("run", "has no equivalent: a prompt from a file is stdin: specchat run < FILE"), _is("--prompts")],
    "-s": [_is("--seed"), PER_REQUEST],
    "--temp": [_is("--temperature"), PER_REQUEST],
    "--temperature": [PER_REQUEST],
    "--top-k": [PER_REQUEST],
    "--top-p": [PER_REQUEST],
    "--min-p": [PER_REQUEST],
    "--seed": [PER_REQUEST],
    **_each(("-o", "--option"), ("run", f"has no equivalent: {OWN_OPTIONS}"), PER_REQUEST),  # simonw/llm's
    **_each(("-sys", "--system-prompt"), _is("--system"), SYSTEM_IN_REQUEST),
    **_each(("-sysf", "--system-prompt-file"), ("--system", 'is --system "$(cat FILE)" here'), SYSTEM_IN_REQUEST),
    **_each(("-r", "--reverse-prompt"), ("run", f"has no equivalent: {REPLY_END}"), ("serve", STOP_IN_REQUEST)),
    **_each(("-e", "--escape"), ("run", f"has no equivalent: {AS_TYPED}")),
    "-cnv": [("run", f"has no equivalent: {CHAT}")],
    "--conversation": [("run", f"has no equivalent: {CHAT}")],
    "-i": [("run", f"has no equivalent: {CHAT}")],
    "--interactive": [("run", f"has no equivalent: {CHAT}")],
    "-if": [("run", f"has no equivalent: {CHAT}")],
    "--interactive-first": [("run", f"has no equivalent: {CHAT}")],
    **_each(("-no-cnv", "--no-conversation", "-st", "--single-turn"), ("run", ONCE)),
    **_each(("--jinja", "--chat-template", "--chat-template-file"), *TEMPLATES, ("--target", TEMPLATE)),
    "-fa": [("--target", "has no equivalent: specchat has no flash-attention option")],
    "--flash-attn": [("--target", "has no equivalent: specchat has no flash-attention option")],
    "--repeat-penalty": [("--target", "has no equivalent: specchat has no repetition penalty")],
    "--presence-penalty": [("--target", "has no equivalent: specchat has no repetition penalty")],
    "--frequency-penalty": [("--target", "has no equivalent: specchat has no repetition penalty")],
    **_each(("-j", "--json-schema", "-jf", "--json-schema-file", "--grammar", "--grammar-file"), ("--target", GRAMMAR)),
    **_each(("-mm", "--mmproj"), ("--target", "has no equivalent: specchat runs text models only")),
    # Click splits an unknown short flag into letters ("No such option: -t" for -ctk): each is named whole
    **_each(("-ctk", "-ctv", "-ctkd", "-ctvd", "--cache-type-k", "--cache-type-v"), ("--threads", KV_TYPE)),
    **_each(("--cache-type-k-draft", "--cache-type-v-draft"), ("--threads", KV_TYPE)),
    **_each(("-nkvo", "--no-kv-offload"), ("--gpu-layers", KV_PLACE)),
    "-b": [("--threads", BATCHES)],
    "--batch-size": [("--threads", BATCHES)],
    "-ub": [("--threads", BATCHES)],
    "--ubatch-size": [("--threads", BATCHES)],
    "-co": [("--no-color", COLOURS)],
    "--color": [("--no-color", COLOURS)],
    "-dev": [("--gpu-layers", f"has no equivalent: {DEVICE}")],
    "--device": [("--gpu-layers", f"has no equivalent: {DEVICE}")],
    "-devd": [("--draft-gpu-layers", f"has no equivalent: {DEVICE}")],
    "--device-draft": [("--draft-gpu-layers", f"has no equivalent: {DEVICE}")],
    **_each(("-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu"), ("--gpu-layers", SPLIT)),
    **_each(("-ot", "--override-tensor", "-otd", "--override-tensor-draft"), ("--gpu-layers", PLACEMENT)),
    **_each(("-cmoe", "--cpu-moe", "-ncmoe", "--n-cpu-moe", "-cmoed", "-ncmoed"), ("--gpu-layers", PLACEMENT)),
    **_each(("--mlock", "--no-mmap", "-lm", "--load-mode"), ("--gpu-layers", MAPPED)),
    **_each(
        ("-np", "--parallel", "-cb", "--cont-batching", "-nocb", "--no-cont-batching"),
        ("--queue", ONE_AT_A_TIME),
        *((name, ONE_GENERATION) for name in ("run", "bench", "tune")),
    ),
    "-pg": [("bench", "has no equivalent: the prompts are --suite's or --prompts' (-n N: the tokens generated)")],
}
# The rest of llama.cpp's short flags of more than one letter (its common/arg.cpp, llama-bench's): Click split
# them into letters (`-kvu`: "-k: 'vu' is not a whole number", `-to`: "No such option: -t"); named whole.
LLAMA_SHORT = frozenset(
    (
        *("-cl", "-Cr", "-Cb", "-Crb", "-lcs", "-lcd", "-ctxcp", "-cms", "-cram", "-kvu", "-no-kvu", "-bf", "-ptc"),
        *("-sp", "-mli", "-bs", "-gan", "-gaw", "-kvo", "-nr", "-dt", "-ns", "-mmu", "-lzm", "-ncffn", "-fit"),
        *("-fitp", "-fitt", "-fitc", "-mu", "-dr", "-ofreq", "-pps", "-tgs", "-npp", "-ntg", "-npl", "-ag", "-no-ag"),
        *("-to", "-rea", "-sps", "-lv", "-Cd", "-Crd", "-Cbd", "-Crbd", "-ins", "-cml", "-mmp", "-embd", "-oe"),
    )
)

# simonw/llm's subcommands of its `logs` and `models`, which here take no argument -> what does it here
SUBCOMMANDS = {
    ("logs", "list"): "it lists the logged replies (-n N: the latest N, -q TEXT: those that match)",
    ("logs", "path"): "the log's path is --path",
    ("logs", "status"): "the log's path is --path",
    ("logs", "off"): "not logging is --no-log (run, serve) or SPECCHAT_NO_LOG=1",
    ("logs", "on"): "every run is logged unless --no-log or SPECCHAT_NO_LOG=1",
    ("models", "list"): "it lists the pairs (--json: as JSON)",
}

FLAG_HINTS = {("logs", "--path"): "--path prints where the log is; another log: SPECCHAT_DATA_DIR=DIR specchat logs"}

# Commands of the other tools -> the message after "no command 'X'".
COMMANDS = {
    "chat": CHAT,
    "list": "`specchat models` lists the pairs",
    "ls": "`specchat models` lists the pairs",
    "get": "`specchat pull PAIR` downloads a pair",
    "download": "`specchat pull PAIR` downloads a pair",
    "server": "`specchat serve` is the server",
    "version": "`specchat --version` prints it",
    "show": "`specchat models` shows each pair's models and whether their files are here",
    "rm": "the models are files: `specchat models` prints their directory, to delete them from (docs/install.md)",
    "ps": "`specchat serve` holds one pair while it runs (GET /v1/models names it)",
    "load": "`specchat serve --pair NAME` loads a pair and serves it",
    "prompt": '`specchat run "PROMPT"` answers one',
}


def check_command(name: str, known: list[str]) -> None:
    """`specchat list`, `specchat chat`: another tool's command; simonw/llm's `llm "PROMPT"`: a prompt."""
    if name in known:
        return
    if name in COMMANDS:
        raise UsageError(f"no command '{name}': {COMMANDS[name]}", hint="see `specchat --help`")
    if len(name.split()) > 1:  # a command has no space: these are the words of a prompt
        words = name if len(name) <= 60 else f"{name[:59]}…"
        dashes = "-- " if words.startswith("-") else ""  # a prompt that starts with '-' is no option after --
        raise UsageError(f"no command '{words}': a prompt goes to run", hint=f'specchat run {dashes}"{words}"')


def check(command_name: str, params: list, args: list[str]) -> None:
    """Refuse a habit from another tool in a command's arguments with a line naming specchat's own."""
    end = args.index("--") if "--" in args else len(args)
    if {"--help", "-h"} & set(args[:end]):
        return
    reading = Reading(params)
    scan = _scan(command_name, reading, args[:end])
    if not scan.value_of_unknown:  # `run --bogus x.gguf`: x.gguf may be --bogus's value, no model given as a prompt
        _positional(command_name, scan.positionals)  # after `--` a word is taken as it is: the way to send any prompt
    if scan.unknown:  # `run --bogus 3 hello`: 3 may be --bogus's value; Click's "No such option" is the error
        return
    _several_words(command_name, [*scan.positionals, *args[end + 1 :]])  # `run -- why is the sky blue` too
    if scan.positionals and not reading.has_argument:
        if scan.foreign_before:  # `bench -ot exps=CPU`: -o t here, but the value says llama-bench's -ot was meant
            _foreign(command_name, scan.foreign_before, reading.names)
        _no_argument(command_name, scan.after_flag, scan.positionals[0])


@dataclass
class _Scan:
    positionals: list[str] = field(default_factory=list)
    after_flag: str = ""  # the flag option right before the first positional (`logs --path FILE`)
    unknown: bool = False  # an option the command does not have (Click's "No such option")
    foreign_before: str = ""  # another tool's flag, read as the command's letters, right before the first positional
    value_of_unknown: bool = False  # the first positional is right after an unknown option: its value, maybe


def _scan(command_name: str, reading: Reading, args: list[str]) -> _Scan:
    """The positionals among the arguments (those before `--`); each option is judged on the way."""
    scan, index, flag_at, unknown_at = _Scan(), 0, -2, -2  # flag_at, unknown_at: the latest flag, unknown option
    while index < len(args):
        token = args[index]
        if not token.startswith("-") or token == "-":
            if not scan.positionals and flag_at == index - 1:
                scan.after_flag = args[flag_at]
            if not scan.positionals and index and _foreign_name(reading, args[index - 1]):
                scan.foreign_before = args[index - 1]
            if not scan.positionals and unknown_at == index - 1:
                scan.value_of_unknown = True
            scan.positionals.append(token)
            index += 1
            continue
        _option(command_name, reading, token, args[index + 1] if index + 1 < len(args) else None)
        if token.split("=", 1)[0] in reading.flags:
            flag_at = index
        consumed = reading.consumes(token)  # `-vk 4`: -v, -k 4 (4 is no positional)
        if consumed is None:  # an unknown option: the next word may be its value, unless `=` carries one
            scan.unknown, unknown_at = True, index if "=" not in token else -2
        index += 1 + (consumed or 0)
    return scan


def _foreign_name(reading: Reading, token: str) -> bool:
    """A short token another tool names a flag (llama-bench's -ot) that the command reads as its own letters."""
    return token not in reading.names and (token in FOREIGN or token in LLAMA_SHORT) and reading.means_here(token)


def _option(command_name: str, reading: Reading, token: str, following: str | None) -> None:
    """An option token: another tool's flag, or one of the command's whose value means something else there."""
    name = token.split("=", 1)[0]
    value = token.split("=", 1)[1] if "=" in token else following  # `--draft=8` as `--draft 8`
    if name not in reading.names:
        here = reading.means_here(token)  # bench's `-ot`: --output t, not llama.cpp's --override-tensor
        if not here and name in FOREIGN_BY_VALUE and value is not None:
            _say(FOREIGN_BY_VALUE[name](command_name, value))
        if not here:
            _foreign(command_name, name, reading.names)
        if not token.startswith("--") and "=" not in token:
            _glued(command_name, token, reading.names, here)
        return
    if name in FOLLOWED_BY and value is not None:
        _say(FOLLOWED_BY[name](command_name, value))


def _say(message: str | None) -> None:
    if message:
        raise UsageError(message, hint=HINT)


def _no_argument(command_name: str, flag: str, word: str) -> None:
    """`logs --path FILE`, `models --json x`: a word after a flag of a command that takes no argument was
    "Got unexpected extra argument(s) (FILE)", `()` for an empty one, without saying that the flag takes none."""
    hint = FLAG_HINTS.get((command_name, flag), f"see `specchat {command_name} --help`")
    if flag:
        raise UsageError(f"{flag} takes no value ('{word}' after it)", hint=hint)
    if (command_name, word) in SUBCOMMANDS:  # llm's `logs list`: "Got unexpected extra argument(s) (list)"
        raise UsageError(f"`specchat {command_name}` takes no subcommand: {SUBCOMMANDS[command_name, word]}", hint=hint)
    if not word:
        raise UsageError(f"`specchat {command_name}` takes no argument (an empty one, '', was given)", hint=hint)


def _foreign(command_name: str, name: str, names: set[str]) -> None:
    for need, text in FOREIGN.get(name, []):
        if need == command_name or need.split("/")[-1] in names:
            raise UsageError(f"{name} {text}", hint=HINT)
    if (name in FOREIGN or name in LLAMA_SHORT) and not name.startswith("--") and len(name) > 2:
        # no entry for this command: Click would name one letter of it ("No such option: -s" for -sm)
        raise UsageError(f"{name} is llama.cpp's; `specchat {command_name}` has no such option", hint=HINT)


def _glued(command_name: str, token: str, names: set[str], here: bool) -> None:
    """`-t4`, `-ngl99`, run's `-c4096`: Click splits them into letters ("No such option: -t") or reads the
    rest as a value (`-ngl99`: -n gl99); the longest flag they start with is judged as if typed apart."""
    for flag in sorted(FOREIGN.keys() | FOLLOWED_BY.keys(), key=len, reverse=True):
        value = token[len(flag) :]
        if flag.startswith("--") or not token.startswith(flag) or not value or (here and flag not in names):
            continue  # here: the token means the command's own letters (`-ot5`: -o t5), no other tool's flag
        if flag not in names and GLUED_NUMBER.fullmatch(value):  # another tool's flag: only its number is glued
            _foreign(command_name, flag, names)
        elif flag in names and flag in FOLLOWED_BY:
            _say(FOLLOWED_BY[flag](command_name, value))
        return


def _positional(command_name: str, positionals: list[str]) -> None:
    """`specchat run MODEL` (ollama run), `specchat serve MODEL` (vllm serve): a model where a prompt, or
    nothing, goes; `specchat pull qwen2.5-coder:7b` (ollama pull): Ollama's name for a pair."""
    if not positionals:
        return
    first = positionals[0]
    if command_name not in ("pull", "tune", "run", "serve"):
        return
    # their PAIR argument (`ollama pull qwen2.5-coder:7b`), or a model where the prompt goes: a Hub repository
    message = _ollama_name(command_name, first) if command_name in ("pull", "tune") else None
    message = message or _hub_repo(command_name, first)
    if message:
        raise UsageError(message, hint=HINT)
    if command_name in ("pull", "tune"):
        return
    # a one-word prompt may well have a slash (`specchat run src/a.py < diff`); a .gguf one is a model
    if MODEL_FILE.fullmatch(first) if command_name == "run" else _model_like(first):
        raise UsageError(f"{first} reads as a model: here a model file is --target FILE, a pair --pair NAME", hint=HINT)
    pair = _pair_named(first)
    if pair is not None:
        place = "the prompt goes after it" if command_name == "run" else "serve takes no argument"
        raise UsageError(f"{first} is a pair: give it as --pair {pair} ({place})", hint=HINT)
    message = _ollama_model(first)  # `ollama run llama3.2:latest`: no pair of that name
    if message:
        raise UsageError(message, hint=HINT)


SEVERAL_WORDS_TOO = 'an option\'s value of several words too: --system "be brief"'


def _several_words(command_name: str, positionals: list[str]) -> None:
    if command_name == "run" and len(positionals) > 1:  # Ollama's `run MODEL why is the sky blue` joins them
        words = " ".join(positionals)
        words = words if len(words) <= 60 else f"{words[:59]}…"
        dashes = "-- " if words.startswith("-") else ""  # a prompt that starts with '-' is no option after --
        raise UsageError(
            f"the prompt is one argument: {len(positionals)} were given",
            hint=f'quote it: specchat run {dashes}"{words}" ({SEVERAL_WORDS_TOO})',
        )
