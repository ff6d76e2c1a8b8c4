"""Flags and commands typed from habit in llama.cpp, Ollama, LM Studio, vLLM or simonw/llm: one line that names
specchat's own, exit 2.

Click alone said "No such option: --ctx-size (Possible options: --continue, --ctx)", or worse took the habit
for something else: `run -c 4096` (llama.cpp's context size; here -c is --continue) answered the prompt
"4096" in the latest conversation, `-ngl 99` read as `-n gl`. The tables below are checked before Click
parses a command's arguments; each entry only replaces what would be an error or a misreading, so no
command line that means something here changes meaning. The tables are in habittable.py; docs/usage.md has
the same table for people.
"""

from __future__ import annotations

import shlex
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from .habittable import COMMANDS, FLAG_HINTS, FOREIGN, GLUED_NUMBER, HINT, LLAMA_SHORT, SUBCOMMANDS
from .habitvalues import (
    FOLLOWED_BY,
    FOREIGN_BY_VALUE,
    MODEL_FILE,
    _hub_repo,
    _model_like,
    _ollama_model,
    _ollama_name,
    _pair_named,
    shell_word,
)
from .reading import Reading


def check_command(name: str, known: list[str]) -> None:
    """`specchat list`, `specchat chat`: another tool's command; simonw/llm's `llm "PROMPT"`: a prompt."""
    if name in known:
        return
    if name in COMMANDS:
        raise UsageError(f"no command '{name}': {COMMANDS[name]}", hint="see `specchat --help`")
    if len(name.split()) > 1:  # a command has no space: these are the words of a prompt
        words = name if len(name) <= 60 else f"{name[:59]}…"
        raise UsageError(f"no command '{words}': a prompt goes to run", hint=f"specchat run {_quoted(words)}")


def check(command_name: str, params: list, args: list[str]) -> None:
    """Refuse a habit from another tool in a command's arguments with a line naming specchat's own."""
    end = args.index("--") if "--" in args else len(args)
    if {"--help", "-h"} & set(args[:end]):
        return
    reading = Reading(params)
    scan = _scan(command_name, reading, args[:end])
    # `run --bogus x.gguf`: x.gguf may be --bogus's value, no model given as a prompt; `export --json out/x.json`:
    # "--json takes no value" (_no_argument) says it better than a guess at what the word is
    flag_first = command_name in ("bench", "export") and scan.after_flag
    if not scan.value_of_unknown and not flag_first:
        # after `--` a word is taken as it is: the way to send any prompt
        _positional(command_name, scan.positionals, scan.model_given)
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
    model_given: bool = False  # --pair, --target or --draft: a word where the prompt goes is the prompt


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
        scan.model_given = scan.model_given or _names_a_model(reading, token)
        if token.split("=", 1)[0] in reading.flags:
            flag_at = index
        consumed = reading.consumes(token)  # `-vk 4`: -v, -k 4 (4 is no positional)
        if consumed is None:  # an unknown option: the next word may be its value, unless `=` carries one
            scan.unknown, unknown_at = True, index if "=" not in token else -2
        index += 1 + (consumed or 0)
    return scan


MODEL_OPTIONS = ("--pair", "--target", "--draft")


def _names_a_model(reading: Reading, token: str) -> bool:
    """The token is the command's --pair, --target or --draft (`-p NAME`, `-pNAME`, `--target=FILE` too)."""
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        return name in reading.names and name in MODEL_OPTIONS
    read = reading.letters(token)
    return read is not None and read[0] is not None and any(opt in MODEL_OPTIONS for opt in read[0].opts)


def _foreign_name(reading: Reading, token: str) -> bool:
    """A short token another tool names a flag (llama-bench's -ot) that the command reads as its own letters."""
    return token not in reading.names and (token in FOREIGN or token in LLAMA_SHORT) and reading.means_here(token)


def _option(command_name: str, reading: Reading, token: str, following: str | None) -> None:
    """An option token: another tool's flag, or one of the command's whose value means something else there."""
    name = token.split("=", 1)[0]
    value = token.split("=", 1)[1] if "=" in token else following  # `--draft=8` as `--draft 8`
    # a space in an option's name: a prompt (none has one), unless Click reads the token as options with a value
    # (`run "-n 100" hi`: -n " 100", as a script's "$OPTS" gives it); after one dash `=` splits nothing
    spaced = any(char.isspace() for char in (name if token.startswith("--") else token))
    if command_name == "run" and spaced and not reading.means_here(token):
        _dashed_prompt(token)
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


def _dashed_prompt(token: str) -> None:
    """`run "$(cat notes.md)"` of a list ("- item"), `run "-5 degrees?"`: Click said "No such option: - ", a letter of
    the words; no option has a space in its name, so they are a prompt, which `--` lets through."""
    first = token.splitlines()[0] if token.strip() else token
    shown = first if len(first) <= 40 and first == token else f"{first[:39].rstrip()}…"
    raise UsageError(
        f"the prompt '{shown}' starts with '-', so it reads as an option",
        hint="put it after --: specchat run -- PROMPT (in a script, before any prompt it passes)",
    )


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


NO_WORD = ("serve", "bench", "export")  # commands that take the pair as --pair alone, where tune and pull take a word


def _positional(command_name: str, positionals: list[str], model_given: bool = False) -> None:
    """`specchat run MODEL` (ollama run), `specchat serve MODEL` (vllm serve): a model where a prompt, or
    nothing, goes; `specchat pull qwen2.5-coder:7b` (ollama pull): Ollama's name for a pair. With a model given
    (--pair, --target, --draft), run's word is the prompt, unless it is a model file."""
    if not positionals or command_name not in ("pull", "tune", "run", *NO_WORD):
        return
    first = positionals[0]
    if command_name in ("pull", "tune"):  # their PAIR argument: Ollama's name, or a Hub repository
        message = _ollama_name(command_name, first) or _hub_repo(command_name, first)
        if message:
            raise UsageError(message, hint=HINT)
        return
    model = f"{first} reads as a model: here a model file is --target FILE, a pair --pair NAME"
    if MODEL_FILE.fullmatch(first):  # `./models/x.gguf` too, which is no Hub repository
        raise UsageError(model, hint=HINT)
    if model_given and command_name == "run":
        return
    message = _hub_repo(command_name, first)
    if message:
        raise UsageError(message, hint=HINT)
    # a one-word prompt may well have a slash (`specchat run src/a.py < diff`); serve takes no word at all, and a
    # path given to bench or export is a file that goes with an option (`--prompts`, `-o`), not a model
    if command_name == "serve" and _model_like(first):
        raise UsageError(model, hint=HINT)
    pair = _pair_named(first)
    if pair is not None:
        place = "the prompt goes after it" if command_name == "run" else f"{command_name} takes no argument"
        raise UsageError(f"{first} is a pair: give it as --pair {pair} ({place})", hint=HINT)
    if command_name != "run" and command_name != "serve":  # Ollama's names: its `run` and `serve`
        return
    message = _ollama_model(first)  # `ollama run llama3.2:latest`: no pair of that name
    if message:
        raise UsageError(message, hint=HINT)


SEVERAL_WORDS_TOO = 'an option\'s value of several words too: --system "be brief"'


def _several_words(command_name: str, positionals: list[str]) -> None:
    if command_name == "run" and len(positionals) > 1:  # Ollama's `run MODEL why is the sky blue` joins them
        files = [word for word in positionals if names_a_file(word)]
        words = " ".join(word for word in positionals if word not in files)
        words = words if len(words) <= 60 else f"{words[:59]}…"
        hint = f"quote it: specchat run {_quoted(words)} ({SEVERAL_WORDS_TOO})"
        if files:  # `run "add type hints" a.py`: quoted into the prompt, the model got the file's name, not its text
            prompt = f" {_quoted(words)}" if words else ""
            names = " ".join(shlex.quote(name) for name in files)
            if len(files) == 1:
                hint = f"a file goes in on stdin: specchat run{prompt} < {names}"
            else:
                hint = f"files go in on stdin: cat {names} | specchat run{prompt}"
        raise UsageError(f"the prompt is one argument: {len(positionals)} were given", hint=hint)


def names_a_file(word: str) -> bool:
    """A word of the prompt that names a file (runsteps notes a one-word prompt that does)."""
    with suppress(OSError, ValueError):  # a name too long for the system, a NUL in it: a word of the prompt
        return Path(word).is_file()
    return False


def _quoted(words: str) -> str:
    """The prompt as a shell word, after `--` where it starts with '-' (no option then)."""
    return f"{'-- ' if words.startswith('-') else ''}{shell_word(words)}"
