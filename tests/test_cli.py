"""The command line through Typer's CliRunner: stdin, --json, exit codes, one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specchat import __version__
from specchat.cli import app

runner = CliRunner()


def invoke(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input)


def assert_one_line_error(result, code: int, needle: str) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr
    assert "hint:" in lines[0]


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"specchat {__version__}"


@pytest.mark.parametrize("command", [[], ["run"], ["models"], ["pull"]])
def test_help_has_examples(command):
    result = invoke(*command, "--help")
    assert result.exit_code == 0
    assert "Usage" in result.stdout
    if command:
        assert "Examples" in result.stdout


def test_unknown_pair_is_one_line_error():
    assert_one_line_error(invoke("run", "--pair", "no-such-pair", "hi"), 1, "unknown pair 'no-such-pair'")


def test_missing_target_file(tmp_path):
    missing = tmp_path / "absent.gguf"
    assert_one_line_error(invoke("run", "--target", str(missing), "hi"), 1, "file not found")


def test_empty_stdin_is_usage_error():
    assert_one_line_error(invoke("run", input="   \n"), 2, "the prompt is empty")


def test_bad_k_is_usage_error():
    result = invoke("run", "-k", "0", "hi")
    assert result.exit_code == 2


def test_huge_stdin_is_refused():
    result = invoke("run", input="x" * 1_000_001)
    assert_one_line_error(result, 2, "larger than")


def test_models_json_lists_default_pair():
    result = invoke("models", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    roles = {(row["pair"], row["role"]) for row in data["pairs"] if row["default"]}
    assert roles == {("qwen2.5-coder-1.5b", "target"), ("qwen2.5-coder-1.5b", "draft")}


@pytest.mark.real
def test_stdin_json_has_text_and_stats(default_pair_paths):
    result = invoke("run", "--mode", "spec", "--json", "-n", "12", input="Name three prime numbers.")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)  # nothing but one JSON object on stdout
    assert payload["text"]
    stats = payload["stats"]
    for key in ("generated_tokens", "acceptance_rate", "mean_accepted_length", "draft_s", "verify_s", "rounds"):
        assert key in stats
    assert 0 < stats["generated_tokens"] <= 12
    assert payload["settings"]["k"] == 4


@pytest.mark.real
def test_stdin_then_argument_plain_stdout(default_pair_paths):
    result = invoke("run", "-n", "8", "--stats", "Reply with one word.", input="Context: the sky is blue.")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()
    assert "\x1b[" not in result.stdout  # plain text when not a terminal
    assert "tok/s" in result.stderr and "tok/s" not in result.stdout


@pytest.mark.real
def test_no_spec_uses_target_alone(default_pair_paths):
    result = invoke("run", "--no-spec", "--json", "-n", "8", "Say hello.")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["mode"] == "target alone" and payload["stats"]["drafted"] == 0 and payload["draft"] is None


@pytest.mark.real
def test_explicit_paths(default_pair_paths):
    target, draft = default_pair_paths
    result = invoke("run", "--target", str(target), "--draft", str(draft), "--json", "-n", "6", "Hi")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pair"] is None


@pytest.mark.real
def test_jsonl_streams_rounds_then_summary(default_pair_paths):
    result = invoke("run", "--jsonl", "-n", "10", "Name two rivers.")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    rounds = [r for r in records if r["type"] == "round"]
    assert rounds and records[-1]["type"] == "summary"
    assert sum(r["emitted"] for r in rounds) == records[-1]["stats"]["generated_tokens"]
    first = rounds[0]
    assert {"accepted", "rejected", "target", "draft_s", "verify_s"} <= set(first)


def test_json_and_jsonl_together_is_usage_error():
    assert_one_line_error(invoke("run", "--json", "--jsonl", "hi"), 2, "--json and --jsonl")


@pytest.mark.real
def test_auto_mode_says_what_it_does(default_pair_paths, tmp_path, monkeypatch):
    """auto (the default) measures this machine once, saves it, and explains its choice."""
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path))
    first = invoke("run", "--json", "-n", "8", "--stats", "Say hi.")
    assert first.exit_code == 0, first.output
    payload = json.loads(first.stdout)
    assert payload["mode"].startswith("auto") and payload["mode_note"].startswith("auto:")
    assert "measuring llama.cpp's costs" in first.stderr
    assert list((tmp_path / "tuning").glob("*.json")), "the calibration was not saved"
    second = invoke("run", "--json", "-n", "8", "Say hi.")
    assert second.exit_code == 0 and "measuring" not in second.stderr  # saved tuning reused


def test_unknown_mode_is_usage_error():
    assert_one_line_error(invoke("run", "--mode", "turbo", "hi"), 2, "unknown --mode 'turbo'")


@pytest.mark.parametrize("prompt", ["", "   \n"])
def test_empty_prompt_is_usage_error(prompt):
    assert_one_line_error(invoke("run", prompt), 2, "the prompt is empty")
