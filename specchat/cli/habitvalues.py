"""Checks of the words typed from another tool's habit, for habits.py: the value given to an option whose
llama.cpp (or Ollama) meaning differs (`run -c 4096`: llama.cpp's context size, here --continue with the prompt
"4096"), the value of an option specchat lacks that says which tool's was meant (`-s "be brief"`), and a model's
name where a prompt or a pair goes (a Hub repository, Ollama's NAME:TAG)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from ..errors import SpecchatError, UsageError
from .habittable import file_on_stdin

MODEL_FILE = re.compile(r"\S+\.gguf", re.IGNORECASE)  # one word: "how do I make a .gguf" is a prompt
NAME_WORD = re.compile(r"[\w.:-]+")  # one word that could name a model or pair (no space, no slash)


def _model_like(value: str) -> bool:
    """A value that names a model file (or a Hugging Face repository), not a mode, format or pair."""
    return bool(MODEL_FILE.fullmatch(value)) or "/" in value or "\\" in value


def shell_word(text: str) -> str:
    """Text as one shell word that a hint can show and the user paste back: in double quotes where nothing in it
    means something there, else in single quotes (a `$HOME`, backticks or a quote in a prompt stay text)."""
    return f'"{text}"' if not set(text) & set('"$`\\!') else shlex.quote(text)


def _continue_number(command: str, value: str) -> str | None:
    if command == "run" and value.isdigit():  # -c 4096: llama.cpp's context size, not a prompt to continue with
        said = f"the context size is --ctx {value} (to continue with the prompt: --continue {value})"
        return f"-c is --continue here; {said}"
    return None


def _mode_model(command: str, value: str) -> str | None:
    if _model_like(value):
        return f"-m is --mode here; a model file is --target {value}"
    return None


def _pair_prompt(command: str, value: str) -> str | None:
    if command == "run" and any(character.isspace() for character in value):  # pair names have no spaces
        return f"-p is --pair here; the prompt is the argument: specchat run {shell_word(value)}"
    if command == "bench" and value.isdigit():  # llama-bench's -p N: the prompt's length
        return (
            "-p is --pair here; llama-bench's prompt length has no equivalent: the prompts are --suite's or --prompts'"
        )
    message = _ollama_name(command, value)
    if message is None and command == "run":
        _pair_word(value)
    return message


def _pair_word(value: str) -> None:
    """run's `-p hello`: llama.cpp's -p PROMPT; "unknown pair 'hello'" alone did not say that -p is --pair. A
    model's name or a pair's with a typo keeps the registry's own message (which pair, did you mean)."""
    registry = _registry()
    if registry is None or not value.strip() or value in registry.pairs:  # an empty name: the registry's message
        return
    if registry.holding(value) or registry.near(value):
        return  # a model's name, or a near miss: the registry's message says which pair is meant
    raise UsageError(
        f"unknown pair '{value}': -p is --pair here; a prompt is the argument: specchat run {shell_word(value)}",
        hint=registry.unknown(value).hint,
    )


def _ollama_name(command: str, value: str) -> str | None:
    """Ollama's NAME:TAG for a pair (qwen2.5-coder:7b) where a pair's name goes."""
    pair = _pair_named(value) if ":" in value else None
    if pair is None or pair == value:  # a pair of the user's own may be named with a colon: it is that pair
        return None
    return f"{value} is Ollama's name; the pair is {pair}"


# A Hugging Face repository: vLLM's model, llama.cpp's `-hf user/repo[:quant]`, Ollama's `hf.co/user/repo[:quant]`
# (an owner starts with a letter or digit: `./model.gguf` and `../gguf` are paths)
HUB_ID = re.compile(
    r"(?P<host>(?:https?://)?(?:hf\.co|huggingface\.co)/)?(?P<repo>[a-z0-9][\w.-]*/[\w.-]+)(?::[\w.-]+)?", re.I
)
AS_PROMPT = "a prompt of that word: specchat run -- WORD"  # after `--` a word is never read as a model


def _hub_repo(command: str, word: str) -> str | None:
    """A word that names a Hugging Face repository (a Hub host before it, GGUF in its name, or a pair's target's
    repository) where a prompt or a pair goes; a one-word prompt like `src/a.py` or `tools/gguf-split` is none."""
    match = HUB_ID.fullmatch(word)  # a repository has a slash, which no pair's name has
    if match is None:
        return None
    pair = _pair_of_repo(match["repo"])
    if pair is not None:
        give = f"--pair {pair} ({command} takes no argument)"  # serve, bench, export
        give = {"run": f"--pair {pair} (the prompt goes after it)", "pull": pair, "tune": pair}.get(command, give)
        return f"{word} is pair {pair}'s Hugging Face repository: give it as {give}"
    # the Hub's GGUF repositories are NAME-GGUF (a folder of a prompt, `src/gguf`, `my-notes/GGUF`, is none)
    if match["host"] or re.search(r"\w[-_]gguf$", match["repo"], re.IGNORECASE):
        also = f"; {AS_PROMPT}" if command == "run" else ""
        pairs = "models come as pairs (--pair NAME, `specchat models`)"
        return f"{word} reads as a Hugging Face repository: {pairs}{also}"
    return None


def _pair_of_repo(repo: str) -> str | None:
    """The pair whose target is in that repository (GGUF or original weights); a draft's names no pair to chat with."""
    registry = _registry()
    for pair in sorted(registry.pairs.values(), key=lambda pair: pair.name) if registry else ():
        if repo.lower() in (pair.target.repo.lower(), (pair.target.source_repo or "").lower()):
            return pair.name
    return None


# Ollama's NAME:TAG for a model: a lower-case name, a tag `latest` or a size in billions (`7b`, `3.8b`,
# `7b-instruct-q4_K_M`); `TODO:1b`, `wait:5m` or `ETA:10m` are words of a prompt
OLLAMA_MODEL = re.compile(r"[a-z][a-z0-9._-]*:(latest|\d+(\.\d+)?b([-_.][\w.-]*)?)")


def _ollama_model(word: str) -> str | None:
    """Ollama's `run MODEL` for a model that is no pair: a NAME:TAG, or a pair's name cut short (qwen2.5-coder,
    Ollama's 7b). One word only: `qwen2.5-coder: what context do you have?` is a prompt, as `TODO:fix` or `12:30`."""
    if not NAME_WORD.fullmatch(word):
        return None
    registry = _registry()
    near = registry.near(word.split(":")[0]) if registry is not None else None
    if near is None and not OLLAMA_MODEL.fullmatch(word):
        return None
    guess = f" (did you mean --pair {near}?)" if near else ""
    said = f"{word} reads as Ollama's name for a model: here a pair is --pair NAME (`specchat models`)"
    return f"{said}{guess}; {AS_PROMPT}"


def _format_file(command: str, value: str) -> str | None:
    if "." not in value and "/" not in value:  # no format has either (a file named `json` is no reason)
        return None
    if command == "bench":
        return f"-f is --format here; prompts from a file: --prompts {value}"
    return f"-f is --format here; {file_on_stdin(value)}"


def _no_limit(flag: str) -> Callable[[str, str], str | None]:
    """run's -n -1: llama.cpp's 'until the end'; run's is 0 (serve's and bench's -n is a count, -1 none)."""
    return lambda command, value: (
        f"{flag} -1 is llama.cpp's no limit; here that is -n 0" if command == "run" and value == "-1" else None
    )


def _output_format(command: str, value: str) -> str | None:
    if command == "bench" and value in ("csv", "json", "jsonl", "md"):  # llama-bench's -o: its format
        return f"-o is --output FILE here; the report's format is -f {value} (a file named {value}: -o ./{value})"
    return None


def _draft_count(command: str, value: str) -> str | None:
    if not value.isdigit() or Path(value).exists():  # llama-speculative's --draft N: the draft length
        return None
    if command == "tune":
        return "--draft is the draft model's file here; tune measures every draft length itself"
    return (
        f"--draft is the draft model's file here; the draft length is {'--ks' if command == 'bench' else '-k'} {value}"
    )


def _layer_word(flag: str) -> Callable[[str, str], str | None]:
    """llama.cpp's `-ngl all` or `auto`: "'all' is not a whole number" did not say what all is here."""
    return lambda command, value: (
        f"{flag} {value} is llama.cpp's word; here every layer is {flag} -1 (the default)"
        if value.lower() in ("all", "auto")
        else None
    )


# Options specchat has whose llama.cpp meaning differs -> a check of the token that follows them.
FOLLOWED_BY = {
    "-c": _continue_number,
    "-m": _mode_model,
    "-p": _pair_prompt,
    "--pair": _ollama_name,
    "-f": _format_file,
    "-o": _output_format,
    "-n": _no_limit("-n"),
    "--max-tokens": _no_limit("--max-tokens"),
    "--draft": _draft_count,
    "--gpu-layers": _layer_word("--gpu-layers"),
    "--draft-gpu-layers": _layer_word("--draft-gpu-layers"),
}


def _seed_or_system(command: str, value: str) -> str | None:
    """-s: llama.cpp's seed, a number; simonw/llm's system prompt, words (`-s "be brief"`)."""
    if re.fullmatch(r"-?\d+", value) or value.startswith("-"):  # a seed, or the next option (`-s --temperature`)
        return None
    if command == "run":
        return f"-s is not an option here: a system prompt is --system {shell_word(value)} (a seed: --seed N)"
    if command == "serve":
        return "-s has no equivalent in serve: each request's messages carry its system prompt"
    return None


def _hub_flag(flag: str) -> Callable[[str, str], str | None]:
    """llama.cpp's `-hf user/repo[:quant]`: the pair whose target that repository holds, where one does."""

    def check(command: str, value: str) -> str | None:
        match = HUB_ID.fullmatch(value)
        pair = _pair_of_repo(match["repo"]) if match else None
        if pair is None:
            return None
        way = "`specchat models` lists it" if command in NO_PAIR_OPTION else f"--pair {pair}"
        return f"{flag} has no equivalent: that repository holds pair {pair}'s target ({way})"

    return check


NO_PAIR_OPTION = ("models", "logs")  # the commands without --pair

# Options specchat lacks whose value says which other tool's was meant -> a check of that value.
FOREIGN_BY_VALUE = {"-s": _seed_or_system, **{flag: _hub_flag(flag) for flag in ("-hf", "-hfr", "--hf-repo")}}


def _pair_named(text: str) -> str | None:
    """The pair that a one-word text names: its name, or Ollama's NAME:TAG for it (qwen2.5-coder:1.5b)."""
    registry = _registry() if NAME_WORD.fullmatch(text) else None
    for name in (text, text.replace(":", "-")) if registry else ():
        if name in registry.pairs:
            return name
    return None


def _registry():
    """models.toml's pairs, or None where an overlay is broken: that is said where the pair is looked up."""
    from ..registry import load_registry

    with suppress(SpecchatError):
        return load_registry()
    return None
