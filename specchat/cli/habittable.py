"""The table of other tools' flags and commands (llama.cpp, Ollama, LM Studio, vLLM, simonw/llm) and what
specchat says to each: the data that habits.py checks a command line against, kept apart from how it checks."""

from __future__ import annotations

import re

HINT = "other tools' flags in specchat: docs/usage.md, 'Coming from other tools'"
CHAT = "`specchat run` with no prompt is the chat"
PER_REQUEST = ("serve", "has no equivalent in serve: each request sets its sampling (temperature, top_p, seed, ...)")
OWN_OPTIONS = (
    "each setting is an option of its own here (--temperature T, --top-k K, --top-p P, --min-p P, --seed N, -n N)"
)


def file_on_stdin(name: str) -> str:
    """llama-cli's -f FILE "instruction": the hint gave `run < FILE` alone, which dropped the instruction."""
    return f'a prompt from a file is stdin: specchat run < {name} (with an instruction: specchat run "..." < {name})'


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
# Samplers beyond these four: the speculative check keeps the target's distribution for the ones it knows
SAMPLERS = "has no equivalent: sampling is temperature, top-k, top-p and min-p here"
SERVED_NAME = "has no equivalent: the model is served under its pair's name (GET /v1/models)"
FILE_TYPE = "has no equivalent: weights keep the GGUF file's own type (a pair's quantization: models.toml)"
# simonw/llm's `llm logs -c/--current` (the current conversation) and `-t/--truncate`
LOGS_CURRENT = (
    "is not an option of logs: a conversation's replies are --cid ID (the latest one's ID: `specchat logs -n 1`)"
)
LOGS_TRUNCATE = "has no equivalent: logs shows the first lines already (--full: whole)"
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
    "-c": [_is("--ctx"), ("logs", LOGS_CURRENT)],
    "--current": [("logs", LOGS_CURRENT)],
    "--ctx-size": [_is("--ctx")],
    "--context-length": [_is("--ctx")],
    "--max-model-len": [_is("--ctx")],
    "-cd": [_is("--ctx", "one size for both models")],
    "--ctx-size-draft": [_is("--ctx", "one size for both models")],
    "--n-predict": [_is("-n/--max-tokens")],
    "--predict": [_is("-n/--max-tokens")],
    "-t": [_is("--threads"), ("logs", LOGS_TRUNCATE)],
    "--truncate": [("logs", LOGS_TRUNCATE)],
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
    "--file": [("run", f"has no equivalent: {file_on_stdin('FILE')}"), _is("--prompts")],
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
    "--conversation": [("run", f"has no equivalent: {CHAT}"), _is("--cid")],
    "-i": [("run", f"has no equivalent: {CHAT}")],
    "--interactive": [("run", f"has no equivalent: {CHAT}")],
    "-if": [("run", f"has no equivalent: {CHAT}")],
    "--interactive-first": [("run", f"has no equivalent: {CHAT}")],
    **_each(("-no-cnv", "--no-conversation", "-st", "--single-turn"), ("run", ONCE)),
    **_each(("--jinja", "--chat-template", "--chat-template-file"), *TEMPLATES, ("--target", TEMPLATE)),
    # run's, serve's, bench's and export's own (the chat template's variables); tune measures without them
    "--chat-template-kwargs": [
        ("--target", "has no equivalent here: `specchat run`, `serve`, `bench` and `export` take it")
    ],
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
    "--prompt-file": [
        ("run", f"has no equivalent: {file_on_stdin('FILE')}"),
        _is("--prompts"),
    ],
    "--ignore-eos": [("--max-tokens", f"has no equivalent: {REPLY_END}")],
    **_each(
        ("--mirostat", "--mirostat-lr", "--mirostat-ent", "--typical", "--typical-p", "--dry-multiplier"),
        ("--target", SAMPLERS),
    ),
    **_each(("--xtc-probability", "--xtc-threshold", "--top-nsigma", "--dynatemp-range"), ("--target", SAMPLERS)),
    **_each(
        ("--log-disable", "--log-file", "--log-verbose", "--verbose-prompt"),
        ("--target", "has no equivalent: llama.cpp's log is shown with SPECCHAT_DEBUG=1 (environment)"),
    ),
    "--no-warmup": [("--target", "has no equivalent: specchat has no warm-up option")],
    "--keep": [("--ctx", "has no equivalent: with the context full, the chat's oldest turns give way")],
    **_each(
        ("--lora", "--lora-scaled", "--control-vector"),
        ("--target", "has no equivalent: no LoRA adapters or control vectors (merge an adapter into the GGUF)"),
    ),
    "--numa": [("--threads", "has no equivalent: llama.cpp places the threads as it does by default")],
    **_each(("--served-model-name", "-a", "--alias"), ("serve", SERVED_NAME)),
    **_each(("-tp", "--tensor-parallel-size"), ("--gpu-layers", SPLIT)),
    **_each(("--dtype", "--quantization"), ("--target", FILE_TYPE)),
    "--gpu-memory-utilization": [("--gpu-layers", "has no equivalent: GPU memory is what --gpu-layers and --ctx take")],
    "--max-num-seqs": [("--queue", ONE_AT_A_TIME)],
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
