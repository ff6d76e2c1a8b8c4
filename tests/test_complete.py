"""Tab completion of option values, driven as bash's completion script drives it (`specchat --install-completion`):
_SPECCHAT_COMPLETE=complete_bash with the words typed so far in COMP_WORDS, the one being completed at COMP_CWORD."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import MINE
from typer.testing import CliRunner

from specchat.cli import app


def complete(line: str, shell: str = "bash") -> tuple[list[str], str]:
    """The candidates for the last word of `line` (a trailing space: a new word), and what went to stderr."""
    words = line.split()
    env = {"_SPECCHAT_COMPLETE": f"complete_{shell}", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
    env["_TYPER_COMPLETE_FISH_ACTION"] = "get-args"
    if line.endswith(" "):
        env["COMP_CWORD"] = str(len(words))
    env["_TYPER_COMPLETE_ARGS"] = line  # zsh's and fish's way
    result = CliRunner().invoke(app, [], prog_name="specchat", env=env)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines(), result.stderr


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("specchat run --mode a", ["auto"]),
        ("specchat serve -m s", ["spec", "suffix"]),
        ("specchat run --mode ", ["auto", "spec", "ngram", "suffix", "target"]),
        ("specchat export --mode ", ["auto", "spec", "ngram"]),  # the modes it has an equivalent of
        ("specchat bench --modes spec,", ["spec,auto", "spec,ngram", "spec,suffix"]),  # target: always measured
        ("specchat bench --modes Spec,", ["Spec,auto", "Spec,ngram", "Spec,suffix"]),  # any case, as the option
        ("specchat bench --suite q", ["quick"]),
        ("specchat bench --suite code", ["code", "code-edit"]),
        ("specchat bench --turns ", ["all", "first"]),
        ("specchat export --to ", ["llama-server", "vllm"]),
        ("specchat run -f json", ["json", "jsonl"]),
        ("specchat bench --format ", ["table", "md", "csv", "json", "jsonl"]),
    ],
)
def test_word_options_complete_their_words(line, expected):
    assert complete(line) == (expected, "")


def test_pairs_complete_from_the_registry_and_the_overlay(overlay):
    overlay(MINE.format(draft="draft.fake.gguf"))
    for line in ("specchat run --pair ", "specchat pull ", "specchat tune --pair ", "specchat export -p "):
        candidates, err = complete(line)
        assert {"qwen2.5-coder-1.5b", "llama3.1-8b", "mine"} <= set(candidates) and not err, line
    assert complete("specchat bench --pair qwen2.5-coder-1")[0] == ["qwen2.5-coder-1.5b", "qwen2.5-coder-14b"]
    assert complete("specchat tune m") == (["mine"], "")


def test_a_description_of_several_lines_is_one_line_of_help():
    """An overlay's description may hold line breaks: zsh's list took each line for a candidate of its own."""
    from specchat.cli.complete import _short

    assert _short("A pair\nof my own") == "A pair of my own"


def test_fish_gets_one_line_for_each_candidate_with_its_description():
    """fish reads a line a candidate, a tab before its help: Typer wraps the help at 80 columns, and the rest of
    a long description (the default pair's) was a candidate of its own."""
    lines, err = complete("specchat run --pair ", shell="fish")
    assert lines and all(line.startswith(("qwen", "llama", "gemma")) and "\t" in line for line in lines), lines
    assert "qwen2.5-coder-1.5b\tQwen2.5-Coder 1.5B Instruct target, Coder 0.5B draft" in lines and not err
    lines, _ = complete("specchat bench --suite c", shell="fish")
    assert lines == ["code\tthe code prompts", "code-edit\tthe code-edit prompts", "chat\tthe chat prompts"]


@pytest.mark.parametrize(
    "text",
    [
        "[pairs.mine\ntarget =",  # not TOML
        '[pairs.mine]\ntarget = "nowhere"\ndraft = "nothing"\n',  # models it does not declare
        'default_pair = "gone"\n',
    ],
)
def test_a_broken_overlay_completes_the_packaged_pairs_without_a_word(overlay, text):
    """The overlay's error is for `specchat models` to say: in a completion it would be printed over the command
    line (a traceback), and no pair completed."""
    overlay(text)
    candidates, err = complete("specchat run --pair qwen2.5-7")
    assert candidates == ["qwen2.5-7b"] and err == ""
    candidates, err = complete("specchat pull qwen2.5-7", shell="zsh")  # zsh shows each pair's description
    assert "qwen2.5-7b" in candidates[0] and "Qwen2.5 7B Instruct target" in candidates[0] and err == ""


def test_completion_imports_no_model_backend(tmp_path):
    """A Tab starts a Python process: llama_cpp's import (most of a second) would make every one of them wait."""
    env = {**os.environ, "SPECCHAT_CONFIG_DIR": str(tmp_path), "_SPECCHAT_COMPLETE": "complete_bash"}
    for line in ("specchat run --pair q", "specchat run -f ", "specchat export --to ", "specchat bench -f "):
        env |= {"COMP_WORDS": line, "COMP_CWORD": "3"}
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "specchat"], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0 and done.stdout.strip(), (line, done.stderr[-2000:])
        assert "llama_cpp" not in done.stderr and "Traceback" not in done.stderr, line
