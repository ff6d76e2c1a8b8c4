"""The command line through Typer's CliRunner: stdin, output formats, exit codes, one-line errors.

Generation goes through the fake backend (tests/fake_backend.py): the target's greedy reply to a prompt
P is REPLY with P quoted, so every assertion about the text is exact."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

import pytest
from fake_backend import REPLY, FakeEngine
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


def test_control_characters_in_a_quoted_name_are_shown_not_obeyed(tmp_path):
    """An error quoting a file name with ESC in it sent the escape sequence to the terminal (a colour that
    stayed on, or a cleared screen); it is shown as a control picture, as replies and logs show it."""
    missing = tmp_path / "bad\x1b[31m\x07.gguf"
    result = invoke("run", "--target", str(missing), "hi")
    assert_one_line_error(result, 1, "bad\u241b[31m\u2407.gguf")
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr


def test_a_line_break_in_a_quoted_name_keeps_the_error_on_one_line(tmp_path):
    """A file named "a\nb.gguf" split the error over two lines: the second read as another message."""
    result = invoke("run", "--target", str(tmp_path / "a\nb.gguf"), "hi")
    assert_one_line_error(result, 1, "a\u240ab.gguf")


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


@pytest.mark.parametrize("command", [[], ["run"], ["serve"], ["bench"], ["tune"], ["models"], ["logs"], ["export"]])
def test_help_shows_no_type_for_flags(command):
    """Typer shows every option's type, `<bool>` for flags too, which reads as if `--stats` took a value."""
    result = invoke(*command, "--help")
    assert result.exit_code == 0
    assert "<bool>" not in result.stdout
    if command == ["run"]:
        assert "<int range>" in result.stdout  # the types of options that take a value stay


@pytest.mark.parametrize("command", ["run", "bench", "tune", "logs", "models", "pull"])
def test_help_text_is_wrapped_to_the_terminal(command):
    """A docstring's line breaks are not kept: on an 80-column terminal a 100-column source line used
    to leave a short ragged line after every wrapped one."""
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0
    description = result.stdout.split("\u256d")[0]  # the text above the first panel
    lines = [line.strip() for line in description.splitlines()][3:]  # past "Usage:" and the summary
    paragraphs = [p for p in "\n".join(lines).split("\n\n") if p.strip()]
    for paragraph in paragraphs:
        *wrapped, _last = paragraph.splitlines()
        assert all(len(line) > 60 for line in wrapped), paragraph


@pytest.mark.parametrize("width", [60, 80])
@pytest.mark.parametrize("command", ["run", "serve", "bench", "tune", "export", "logs", "models", "pull"])
def test_help_cuts_nothing_on_a_narrow_terminal(command, width):
    """Typer's help tables cut what did not fit with an ellipsis: at 80 columns `run --help` showed
    `--draft-gpu-laye…` and `SPECCHAT_NO_HIST…`. Option names stay whole and long words are folded."""
    import typer.main

    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": str(width)}, terminal_width=width)
    assert result.exit_code == 0 and "\u2026" not in result.stdout, result.stdout
    click_command = typer.main.get_command(app).commands[command]
    names = [opt for param in click_command.params for opt in param.opts + param.secondary_opts if opt[:2] == "--"]
    assert names and all(name in result.stdout for name in names), names


@pytest.mark.parametrize("command", ["run", "serve", "bench", "tune", "export", "logs"])
def test_help_keeps_the_words_of_an_option_s_help_whole_at_60_columns(command):
    """`run --help` gave `--no-rejected` a column of its own, 15 of a 60-column terminal's columns taken from
    every option's help: 7 were left, and words were folded (`specch` `at`, `measure` `d`, `draftin` `g`)."""
    import re

    import typer.main

    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "60"}, terminal_width=60)
    assert result.exit_code == 0
    shown = set(re.sub("[\u2500-\u257f]", " ", result.stdout).split())
    click_command = typer.main.get_command(app).commands[command]
    words = {word for param in click_command.params for word in (getattr(param, "help", None) or "").split()}
    assert words and {word for word in words if len(word) <= 12} <= shown


def test_the_top_level_help_shows_where_to_start():
    """`specchat --help` (and `specchat` alone) listed eight commands and no example: a new user had to guess
    that `run` is the one to try first. Each line it gives starts a command that exists."""
    import typer.main

    for args in (["--help"], []):
        result = runner.invoke(app, args, env={"COLUMNS": "80"}, terminal_width=80)
        start = result.stdout.split("Start here:")[1]
        lines = [line.strip() for line in start.splitlines() if line.strip().startswith("specchat ")]
        assert 'specchat run "Explain what a mutex is"' in lines and "specchat run" in lines, start
        commands = typer.main.get_command(app).commands
        assert all(line.split()[1] in commands or line.split()[1] == "COMMAND" for line in lines), lines


def test_the_top_level_help_points_users_of_other_tools_to_the_table():
    """Someone coming from llama.cpp, Ollama, vLLM or simonw/llm found nothing in `specchat --help` about their
    flags; only an error (after a wrong guess) named docs/usage.md's table."""
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert "Coming from llama.cpp, Ollama, LM Studio, vLLM or simonw/llm" in result.stdout
    assert "docs/usage.md" in result.stdout.split("Coming from")[1]


def test_help_as_a_command_shows_the_help():
    """`specchat help run` (git's and cargo's way) said 'No such command' and sent the user to `specchat --help`."""
    wide = {"env": {"COLUMNS": "100"}, "terminal_width": 100}
    assert runner.invoke(app, ["help"], **wide).stdout == runner.invoke(app, ["--help"], **wide).stdout
    shown = runner.invoke(app, ["help", "tune"], **wide)
    assert shown.exit_code == 0 and shown.stdout == runner.invoke(app, ["tune", "--help"], **wide).stdout
    assert "Usage: specchat tune" in shown.stdout
    assert_one_line_error(runner.invoke(app, ["help", "tnue"]), 2, "no command 'tnue'; did you mean 'tune'?")
    # difflib minds the case: `help RUN` named no command close to it
    assert_one_line_error(runner.invoke(app, ["help", "RUN"]), 2, "no command 'RUN'; did you mean 'run'?")
    assert "help" not in runner.invoke(app, ["--help"], **wide).stdout.split("Commands")[1].split("Start here")[0]


def test_every_command_has_a_one_line_summary():
    """`specchat --help` lists each command by its docstring's first paragraph: pull's and export's ran
    over two or three lines of the list, the whole description where a summary belongs."""
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "120"}, terminal_width=120)
    assert result.exit_code == 0
    panel = result.stdout.split("Commands")[1]
    rows = [line[2:].rstrip("│ ") for line in panel.splitlines()[1:] if line.startswith("│ ")]
    names = [row.split()[0] for row in rows if row.strip() and not row.startswith(" ")]
    assert {"run", "serve", "bench", "tune", "models", "pull", "logs", "export"} <= set(names)
    assert len(rows) == len(names), rows  # no continuation lines


def test_run_help_names_the_default_context_cap():
    """`--ctx 0` is the trained context only up to ctxsize.MAX_AUTO (32,768 for Qwen2.5-Coder, 8192 taken):
    the help said "the model's trained one, as memory allows", as if it were the whole 32K."""
    from specchat.ctxsize import MAX_AUTO

    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert result.exit_code == 0
    assert f"at most {MAX_AUTO}" in result.stdout


def _option_helps(name: str) -> dict[str, str]:
    """Each command's help for the option `name` (by its long name), as --help prints it."""
    import click
    import typer

    group = typer.main.get_command(app)
    ctx = click.Context(group)
    helps = {}
    for command in group.list_commands(ctx):
        for param in group.get_command(ctx, command).params:
            if name in param.opts:
                helps[command] = param.help
    return helps


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("--ctx", "in tokens"),  # run's said "Context size", the others' "in tokens"
        ("--max-tokens", "tokens"),  # run's said "Longest reply"
        ("--gpu-layers", "0 = none"),  # only -1 was explained; 0 (the CPU alone) is the other value people need
        ("--draft-gpu-layers", "0 = none"),
        ("--seed", "negative"),  # bench's said a negative seed draws one; run's, which does the same, did not
    ],
)
def test_every_commands_help_says_the_unit_and_special_values_of_an_option(option, says):
    helps = _option_helps(option)
    assert helps
    assert all(says in text.lower() for text in helps.values()), helps


def test_bench_help_names_the_categories_a_suite_may_be():
    """--suite takes a category too; the help said "or one category" without naming one."""
    from specchat.benchsuite import CATEGORIES

    result = runner.invoke(app, ["bench", "--help"], env={"COLUMNS": "250"}, terminal_width=250)
    assert result.exit_code == 0
    assert ", ".join(CATEGORIES) in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--pair", "no-such-pair", "hi"),
        ("pull", "no-such-pair"),
        ("bench", "-p", "no-such-pair"),
        ("serve", "--port", "0", "--pair", "no-such-pair"),  # port 0: a taken 8080 was refused first
        ("tune", "no-such-pair"),
        ("export", "--to", "vllm", "-p", "no-such-pair"),
    ],
)
def test_unknown_pair_is_a_usage_error_in_every_command(isolated, args):
    """A pair's name that names none was exit 1, where every other bad option value (--mode, --format, --to,
    --suite) is a usage error, exit 2, and `run -p hello` was 2 already."""
    assert_one_line_error(invoke(*args), 2, "unknown pair 'no-such-pair'")


def test_an_empty_pair_name_is_an_error_not_the_default_pair():
    export = ("export", "--to", "llama-server", "--pair", "")
    for args in (("run", "--pair", "", "hi"), ("pull", ""), ("pull", " "), export):
        assert_one_line_error(invoke(*args), 2, "the pair name is empty")


def test_missing_target_file(tmp_path):
    missing = tmp_path / "absent.gguf"
    assert_one_line_error(invoke("run", "--target", str(missing), "hi"), 1, "absent.gguf does not exist")
    assert_one_line_error(invoke("run", "--target", str(tmp_path), "hi"), 1, "is a directory")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["run", "--target", "", "hi"], "--target"),
        (["run", "--target=", "hi"], "--target"),
        (["run", "--draft", "", "hi"], "--draft"),
        (["export", "--to", "vllm", "--target", ""], "--target"),
        (["bench", "--prompts", ""], "--prompts"),
        (["bench", "-o", ""], "--output"),
        (["bench", "--plot", ""], "--plot"),
    ],
)
def test_an_empty_path_is_named_as_empty(isolated, args, option):
    """`--target "$MODEL"` with MODEL unset was '--target . is a directory': Click made "" the path "."."""
    assert_one_line_error(invoke(*args), 2, f"{option} is empty")


@pytest.mark.parametrize(
    ("args", "option"),
    [(["bench", "--target", "no.gguf", "-o=r.md"], "--output"), (["run", "--target", "=m.gguf", "hi"], "--target")],
)
def test_a_path_starting_with_equals_is_a_short_flag_typed_with_equals(isolated, args, option):
    """`bench -o=report.md` wrote the report to a file named '=report.md' (and `-o=` to one named '=')."""
    result = invoke(*args)
    assert_one_line_error(result, 2, f"{option} got '=")
    assert "a short flag takes no '='" in result.stderr


def test_empty_stdin_is_usage_error():
    assert_one_line_error(invoke("run", input="   \n"), 2, "the prompt is empty")


def test_bad_k_is_usage_error():
    result = invoke("run", "-k", "0", "hi")
    assert result.exit_code == 2


@pytest.mark.parametrize(
    "command",
    [["run", "hi"], ["serve", "--port", "0"], ["bench"], ["tune"], ["export", "--to", "llama-server"]],
    ids=lambda command: command[0],
)
@pytest.mark.parametrize("flag", ["--gpu-layers", "--draft-gpu-layers"])
def test_a_negative_layer_count_other_than_all_is_usage_error(isolated, monkeypatch, command, flag):
    """-5 was taken as all (-1) when loading, yet saved and looked up as another tuning, and left out by export."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # accepted, it would fail on the pull, not wait for one
    assert_one_line_error(invoke(*command, flag, "-5"), 2, f"{flag} -5 is not a layer count")
    assert "-1 puts every layer on the GPU" in invoke(*command, flag, "-2").stderr


@pytest.mark.parametrize(
    ("command", "flag"),
    [("run", "--temperature"), ("run", "--top-p"), ("run", "--min-p"), ("run", "--p-min"), ("bench", "--temperature")],
)
def test_nan_for_a_number_is_named_as_no_number(command, flag):
    """click's range check read `nan` as above the maximum: "Input should be less than or equal to 5"."""
    result = invoke(command, flag, "nan", *(["hi"] if command == "run" else []))
    assert_one_line_error(result, 2, "'nan' is not a number: give one from 0 to")
    assert_one_line_error(
        invoke(command, flag, "7", *(["hi"] if command == "run" else [])), 2, "7 is not in the range 0 to"
    )


@pytest.mark.parametrize("layers", ["-1", "0"])
def test_all_layers_or_none_are_layer_counts(files, layers):
    result = invoke("run", *files, "--mode", "spec", "--gpu-layers", layers, "--draft-gpu-layers", layers, "Hi")
    assert result.exit_code == 0 and result.stdout == reply_to("Hi") + "\n", result.output


def test_huge_stdin_is_refused():
    result = invoke("run", input="x" * 1_000_001)
    assert_one_line_error(result, 2, "larger than")


def test_models_json_lists_default_pair():
    result = invoke("models", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    roles = {(row["pair"], row["role"]) for row in data["pairs"] if row["default"]}
    assert roles == {("qwen2.5-coder-1.5b", "target"), ("qwen2.5-coder-1.5b", "draft")}


def test_no_spec_with_another_mode_is_usage_error():
    """--no-spec is --mode target: with --mode spec it silently ran the target alone."""
    assert_one_line_error(invoke("run", "--no-spec", "--mode", "spec", "hi"), 2, "--no-spec and --mode spec disagree")


def test_json_and_jsonl_together_is_usage_error():
    assert_one_line_error(invoke("run", "--json", "--jsonl", "hi"), 2, "--json and --jsonl")


def test_unknown_mode_is_usage_error():
    assert_one_line_error(invoke("run", "--mode", "turbo", "hi"), 2, "unknown --mode 'turbo'")


@pytest.mark.parametrize("prompt", ["", "   \n"])
def test_empty_prompt_is_usage_error(prompt):
    assert_one_line_error(invoke("run", prompt), 2, "the prompt is empty")


def reply_to(prompt: str) -> str:
    return REPLY.format(prompt=prompt)


@pytest.fixture
def files(fake_models):
    target, draft = fake_models
    return ["--target", str(target), "--draft", str(draft)]


@pytest.fixture
def gpu_like(fake_models, seed_tuning):
    """auto starts from GPU-like costs, where drafting pays."""
    seed_tuning(*fake_models)


def run_json(*args: str, input: str | None = None) -> dict:
    result = invoke("run", *args, input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("mode", ["spec", "ngram", "target", "auto"])
def test_plain_text_is_the_reply(files, gpu_like, mode):
    result = invoke("run", *files, "--mode", mode, "Name three colours.")
    assert result.exit_code == 0, result.output
    assert result.stdout == reply_to("Name three colours.") + "\n"  # plain text, a final newline added
    assert "\x1b[" not in result.stdout


def test_stdin_then_argument(files):
    result = invoke("run", *files, "--mode", "spec", "-n", "500", "--stats", "Reply.", input="Context: the sky.")
    assert result.exit_code == 0, result.output
    assert result.stdout == reply_to("Context: the sky.\n\nReply.") + "\n"
    assert "tok/s" in result.stderr and "tok/s" not in result.stdout
    assert "[spec k=4]" in result.stderr and "accepted" in result.stderr


def test_stdin_that_ends_with_a_newline_is_one_blank_line_from_the_argument(files):
    """`echo Context | specchat run Reply` sent "Context\n\n\nReply": echo's newline and then the blank
    line, where the docs promise one blank line between them."""
    result = invoke("run", *files, "--mode", "target", "Reply.", input="Context: the sky.\n")
    assert result.stdout == reply_to("Context: the sky.\n\nReply.") + "\n"


def test_a_dash_prompt_is_stdin_alone(files):
    """`cat notes | specchat run -` sent the notes plus a literal "-" (and `specchat run - </dev/null`
    answered the prompt "-"): a dash names stdin, as for cat."""
    result = invoke("run", *files, "--mode", "target", "-", input="Context: the sky.")
    assert result.exit_code == 0, result.output
    assert result.stdout == reply_to("Context: the sky.") + "\n"
    assert_one_line_error(invoke("run", *files, "-", input=""), 2, "the prompt is empty")


def test_a_byte_order_mark_on_stdin_is_not_part_of_the_prompt(files):
    """A file saved with a UTF-8 byte order mark (Notepad) sent U+FEFF to the model as text, and one that
    held only the mark (and a newline) was answered as a prompt instead of being empty."""
    result = invoke("run", *files, "--mode", "target", "Reply.", input="\ufeffContext: the sky.\r\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == reply_to("Context: the sky.\n\nReply.") + "\n"
    assert_one_line_error(invoke("run", *files, "-", input="\ufeff\n"), 2, "the prompt is empty")


@pytest.mark.parametrize("end", ["\r\n", "\r"])
def test_a_windows_file_on_stdin_reaches_the_model_as_the_unix_one(files, end, monkeypatch):
    """A Windows file's CRLF (read as bytes) reached the model as "\r\n", other tokens than the Unix file's
    "\n"; a lone "\r" (an old Mac file) is a line end too, as in Python's text mode and a chat's paste."""
    import io
    import sys

    from specchat import repl

    data = f"Write hello{end}in Python{end}".encode()
    payload = run_json(*files, "--mode", "target", "-f", "json", "-", input=data)
    assert payload["text"] == reply_to("Write hello\nin Python\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert repl.read_system("-") == "Write hello\nin Python"


def test_a_plain_text_prompt_on_stdin_keeps_its_line_ends(files):
    """--no-template continues the text as it is, as serve's /v1/completions does: its CRs too (and the same text
    as an argument keeps them)."""
    counts = [
        run_json(*files, "--mode", "target", "--no-template", "-f", "json", "-", input=text.encode())["stats"][
            "prompt_tokens"
        ]
        for text in ("a\r\nb\r\n", "a\nb\n")
    ]
    assert counts[0] == counts[1] + 2


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_file_with_its_byte_order_mark_on_stdin_is_read_as_text(files, encoding):
    """A file saved as UTF-16 with its byte order mark (Notepad's "Unicode", Windows PowerShell's `>`) was
    decoded as UTF-8: a warning of bad bytes, and a prompt of U+FFFD and NULs sent to the model."""
    data = ("\ufeff" if encoding == "utf-16-be" else "") + "Context: the sky ✓.\r\n"
    result = invoke("run", *files, "--mode", "target", "Reply.", input=data.encode(encoding))
    assert result.exit_code == 0 and "not valid UTF-8" not in result.stderr, result.output
    assert result.stdout == reply_to("Context: the sky ✓.\n\nReply.") + "\n"


def test_a_format_and_a_mode_in_capitals_are_taken(files):
    """`-f JSON` and `--mode Target` were "unknown --format 'JSON'": users of other tools type them in any case."""
    payload = run_json(*files, "--mode", "Target", "-f", "JSON", "-n", "4", input="Hi.")
    assert payload["mode"] == "target" and payload["label"] == "target alone"


def test_every_option_that_takes_one_of_a_few_words_takes_them_in_any_case():
    """Each command's word-valued options (--format, --mode, --modes, --to, --turns, --suite) take capitals, as
    `-f JSON` above; --history is none or a FILE, whose name keeps its case."""
    from typer.main import get_command

    words = {"--format", "--mode", "--modes", "--to", "--turns", "--suite"}
    seen = set()
    for name, command in get_command(app).commands.items():
        for param in command.params:
            if words & set(param.opts):
                seen.add((name, param.opts[0]))
                word = param.default or "vllm"  # each option's own default (export's --to has none)
                assert param.callback(None, param, word.upper()) == word, f"{name} {param.opts[0]}"
    assert {("run", "--mode"), ("serve", "--mode"), ("bench", "--modes"), ("export", "--to")} <= seen


def test_a_list_of_words_takes_each_in_any_case():
    from specchat.cli.options import any_case

    assert any_case("modes", "MODES", many=True)("spec, NGRAM,Auto,Turbo") == "spec,ngram,auto,Turbo"


def test_a_padded_word_is_taken_and_a_single_word_option_is_not_split_at_commas():
    """`--to "VLLM "` was refused as "unknown --to 'vllm '" (neither what was typed nor a choice), and
    `--to Vllm,x` was named 'vllm,x': a single-word option read as a list."""
    from specchat.cli.options import any_case

    to = any_case("export", "TARGETS")
    assert to("VLLM ") == "vllm" and to(" Llama-Server") == "llama-server"
    assert to("Vllm,x") == "Vllm,x"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "--mode", "Turbo", "hi"], "unknown --mode 'Turbo'"),
        (["run", "-f", "Yaml", "hi"], "unknown --format 'Yaml'"),
        (["export", "--to", "Ollama"], "unknown --to 'Ollama'"),
        (["export", "--to", "Vllm,x"], "unknown --to 'Vllm,x'"),
    ],
)
def test_a_word_that_is_no_choice_is_named_as_typed(files, args, said):
    """Lowered before it was checked, `--mode Turbo` was refused as "unknown --mode 'turbo'": not what was typed."""
    command, *rest = args
    assert_one_line_error(invoke(command, *files, *rest), 2, said)


def test_json_has_text_settings_and_stats(files):
    payload = run_json(*files, "--mode", "spec", "--json", "-n", "12", input="Name three prime numbers.")
    assert payload["text"] == reply_to("Name three prime numbers.")[:12]
    assert payload["mode"] == "spec" and payload["label"] == "spec k=4" and payload["mode_note"] == ""
    stats = payload["stats"]
    for key in ("generated_tokens", "acceptance_rate", "mean_accepted_length", "draft_s", "verify_s", "rounds"):
        assert key in stats
    assert stats["generated_tokens"] == 12 and stats["stop_reason"] == "max_tokens"
    assert set(stats["rounds_by_source"]) <= {"spec", "target"} and stats["rounds_by_source"]["spec"] >= 1
    assert sum(stats["rounds_by_source"].values()) == stats["rounds"]
    assert payload["settings"]["k"] == 4 and payload["settings"]["max_tokens"] == 12
    assert payload["pair"] is None and payload["draft"].endswith("draft.fake.gguf")


def test_no_spec_uses_target_alone(files):
    payload = run_json(*files, "--no-spec", "--json", "-n", "8", "Say hello.")
    assert payload["mode"] == "target" and payload["label"] == "target alone"
    assert payload["stats"]["drafted"] == 0 and payload["draft"] is None
    assert payload["stats"]["rounds_by_source"] == {"target": 8}


def test_a_reply_that_drafted_nothing_has_no_acceptance_in_json(files):
    """Nothing drafted is nothing measured: run --json (and so the log) wrote "acceptance_rate": 0.0 and
    "mean_accepted_length": 0.0, where the bench's JSON and its definitions say null, read as a drafter that
    guessed wrong every time."""
    stats = run_json(*files, "--no-spec", "--json", "-n", "8", "Say hello.")["stats"]
    assert stats["drafted"] == 0 and stats["acceptance_rate"] is None and stats["mean_accepted_length"] is None
    assert stats["position_acceptance"] == [] and stats["tokens_per_round"] == 1.0


@pytest.mark.parametrize(
    ("args", "note"),
    [
        (["--mode", "target", "-k", "5"], "-k 5 is not used: --mode target drafts nothing"),
        (["--no-spec", "-k", "5"], "-k 5 is not used: --no-spec drafts nothing"),
        (["--mode", "ngram", "--p-min", "0.5"], "--p-min 0.5 is not used: --mode ngram does not draft with the"),
        (["--mode", "spec", "-k", "5", "--p-min", "0.5"], None),
        (["--mode", "spec", "-k", "32"], "-k 32 is more than --mode spec drafts: it uses 16"),
        (["--mode", "ngram", "-k", "32"], None),
        (["--seed", "3", "--top-p", "0.5"], "--seed, --top-p are not used: temperature 0 is greedy"),
        (["--seed", "3", "--temperature", "0"], "--seed is not used: temperature 0 is greedy"),
        (["--seed", "3", "--temperature", "0.5"], None),
    ],
)
def test_an_option_the_reply_cannot_use_is_noted(files, args, note):
    """-k with --mode target, --p-min without the draft model and --seed or a sampling filter at temperature 0
    were dropped in silence, as if they had taken effect; export notes its unused -k, run now does too."""
    result = invoke("run", *files, *args, "-n", "8", "Say hello.")
    assert result.exit_code == 0, result.output
    if args[-2:] != ["--temperature", "0.5"]:  # greedy: the fake's reply, exactly
        assert result.stdout == reply_to("Say hello.")[:8] + "\n"
    others = [line for line in result.stderr.splitlines() if "not used" in line and "--draft " not in line]
    assert (note in result.stderr) if note else not others, result.stderr


def test_p_min_with_a_lone_target_in_auto_is_noted(fake_models):
    """`run --target T --p-min 0.3` (auto, no --draft) loads no draft model, so --p-min changed nothing, in
    silence, where --mode ngram noted it."""
    target, draft = fake_models
    result = invoke("run", "--target", str(target), "--p-min", "0.3", "-n", "8", "Say hello.")
    assert result.exit_code == 0, result.output
    assert "--p-min 0.3 is not used: --target without --draft loads no draft model" in result.stderr, result.stderr
    result = invoke("run", "--target", str(target), "--draft", str(draft), "--p-min", "0.3", "-n", "8", "Say hello.")
    assert result.exit_code == 0 and "--p-min" not in result.stderr, result.stderr


@pytest.mark.parametrize("mode", [["--no-spec"], ["--mode", "target"], ["--mode", "ngram"], ["--mode", "suffix"]])
def test_a_draft_model_the_reply_cannot_use_is_not_loaded(fake_models, tmp_path, mode):
    """`run --no-spec --target T --draft D` loaded D for nothing: a D of another vocabulary was 'incompatible
    pair', one too big 'not enough memory ... hint: ... or --no-spec (the target without its draft)'."""
    target, draft = tmp_path / "target.fake.gguf", tmp_path / "other.fake.gguf"
    target.write_text(json.dumps({"role": "target", "memory": [1000, 1000]}), encoding="utf-8")
    for spec in ({"token_text": {"70": "zz"}}, {"memory": [10**15, 0]}):
        draft.write_text(json.dumps({"role": "draft", "agree": 0.8, **spec}), encoding="utf-8")
        result = invoke("run", "--target", str(target), "--draft", str(draft), *mode, "--json", "-n", "8", "Hi.")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["draft"] is None
        # said, as an unused -k is: the --draft given was dropped without a word
        how = "drafts nothing" if mode[-1] in ("--no-spec", "target") else "does not draft with the draft model"
        assert f"--draft other.fake.gguf is not used: {' '.join(mode)} {how} (it is not loaded)" in result.stderr


@pytest.mark.parametrize(("mode", "loaded"), [("ngram", False), ("target", False), ("spec", True)])
def test_serve_loads_no_draft_model_its_mode_cannot_use(fake_models, monkeypatch, mode, loaded):
    """`serve --mode ngram --draft D` loaded D, which no request could use (serve's mode is every request's),
    without a word; it is now noted and not loaded."""
    from specchat import server

    seen = []
    monkeypatch.setattr(server, "serve", lambda pipeline, *_: seen.append(pipeline.draft))
    target, draft = fake_models
    result = invoke("serve", "--target", str(target), "--draft", str(draft), "--mode", mode, "--port", "0")
    assert result.exit_code == 0, result.output
    assert (seen[0] is not None) == loaded
    assert ("--draft draft.fake.gguf is not used" in result.stderr) != loaded, result.stderr


@pytest.mark.parametrize(
    ("args", "note"),
    [
        (["--mode", "target", "-k", "5"], "-k 5 is not used: --mode target drafts nothing"),
        (["--mode", "spec", "-k", "32"], "-k 32 is more than --mode spec drafts: it uses 16"),
        (["--mode", "spec", "-k", "5"], None),
        (["--mode", "ngram", "-k", "32"], None),
    ],
)
def test_serve_notes_a_k_its_mode_cannot_use(fake_models, monkeypatch, args, note):
    """`serve --mode target -k 5` and `serve --mode spec -k 32` took -k in silence (run notes both), as if every
    request drafted 5, or 32, tokens."""
    from specchat import server

    monkeypatch.setattr(server, "serve", lambda *_: None)
    target, draft = fake_models
    result = invoke("serve", "--target", str(target), "--draft", str(draft), *args, "--port", "0")
    assert result.exit_code == 0, result.output
    others = [line for line in result.stderr.splitlines() if line.startswith("-k ")]
    assert (note in result.stderr) if note else not others, result.stderr


def test_jsonl_streams_rounds_then_summary(files):
    result = invoke("run", *files, "--mode", "ngram", "--jsonl", "Name two rivers.")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    rounds = [r for r in records if r["type"] == "round"]
    summary = records[-1]
    assert rounds and summary["type"] == "summary" and summary["mode"] == "ngram"
    assert sum(r["emitted"] for r in rounds) == summary["stats"]["generated_tokens"]
    assert {"accepted", "rejected", "target", "draft_s", "verify_s", "source"} <= set(rounds[0])
    assert {r["source"] for r in rounds} <= {"ngram", "target"}
    assert any(r["accepted"] for r in rounds)  # prompt lookup copied the quoted prompt
    text = "".join(t["text"] for r in rounds for t in [*r["accepted"], r["target"]])
    assert text == summary["text"] == reply_to("Name two rivers.")


@pytest.mark.parametrize("mode", ["spec", "target"])
def test_jsonl_token_texts_join_to_the_reply_where_a_character_spans_tokens(files, mode):
    """A character split over several tokens (é, an emoji: byte tokens in the fake, as in Qwen's BPE for
    rarer characters) was a U+FFFD per part in the round events, so the streamed texts did not join to
    the reply; the token that ends the character carries it whole."""
    result = invoke("run", *files, "--mode", mode, "--jsonl", "h\u00e9llo \U0001f600")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    text = "".join(t["text"] for r in records[:-1] for t in [*r["accepted"], r["target"]])
    assert text == records[-1]["text"] == reply_to("h\u00e9llo \U0001f600")


def test_jsonl_rejected_guesses_inside_a_character_are_no_replacement_characters(files):
    """A rejected guess at the rest of a character the accepted tokens began (日 guessed as 旦) was decoded token
    by token: a U+FFFD in the round's event, where the live view showed the whole character guessed. Its tokens
    now continue the reply's decoder as the live view's guess does: whole characters, "" for a part."""
    result = invoke("run", *files, "--mode", "spec", "--jsonl", "\u00e9\U0001f44d\U0001f3fdx\u65e5\u672c")
    assert result.exit_code == 0, result.output
    rounds = [json.loads(line) for line in result.stdout.splitlines()][:-1]
    rejected = [t["text"] for r in rounds for t in r["rejected"]]
    assert rejected and "\ufffd" not in "".join(rejected), rejected
    assert "\u65e6" in "".join(rejected), rejected  # the whole guessed character (旦), not a part dropped


def test_jsonl_after_an_accepted_end_of_turn_has_no_target_token(isolated):
    """A draft whose end-of-turn token the target accepted ended the reply inside the round, yet the event named the
    target's token after it (never part of the reply) as its `target`: the texts joined to the reply and a stray
    character ("That is all.n")."""
    import fake_backend

    target, draft = fake_backend.write_pair(isolated / "files", agree=1.0)
    result = invoke("run", "--target", str(target), "--draft", str(draft), "--mode", "spec", "-k", "2", "--jsonl", "hi")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    last = records[-2]  # with -k 2 the end of turn is drafted, not the target's token after a full acceptance
    assert last["accepted"][-1]["id"] == fake_backend.IM_END and last["target"] is None, last
    text = "".join(t["text"] for r in records[:-1] for t in [*r["accepted"], r["target"]] if t)
    assert text == records[-1]["text"] == reply_to("hi")


@pytest.mark.parametrize(
    ("args", "kind"),
    [
        (["--format", "json"], "json"),
        (["--format", "json", "--json"], "json"),
        (["-f", "jsonl"], "jsonl"),
        (["--format", "text"], "text"),
        (["--format", "live", "--no-rejected"], "live"),
        (["--format", "auto"], "text"),  # not a terminal
    ],
)
def test_format_option(files, args, kind):
    result = invoke("run", *files, "--mode", "spec", *args, "Hi there.")
    assert result.exit_code == 0, result.output
    out = result.stdout
    if kind == "json":
        assert json.loads(out)["text"] == reply_to("Hi there.")
    elif kind == "jsonl":
        assert json.loads(out.splitlines()[-1])["type"] == "summary"
    elif kind == "text":
        assert out == reply_to("Hi there.") + "\n"
    else:  # the live view on a console that is not a terminal: the text and a summary line
        assert out.startswith(reply_to("Hi there.")) and "── " in out and "tok/s" in out


def test_live_format_into_a_pipe_shows_no_ghost_text(files):
    """--format live on stdout that is not a terminal printed the rejected guesses too, unstyled (no
    strike-through there), so they read as part of the reply; ghost text is for a terminal only. So is the
    legend, which names styles a pipe does not carry."""
    result = invoke("run", *files, "--mode", "spec", "--format", "live", "Hi there.")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(reply_to("Hi there.")) and "legend" not in result.stdout
    rounds = [
        json.loads(line) for line in invoke("run", *files, "--mode", "spec", "--jsonl", "Hi there.").stdout.splitlines()
    ]
    assert any(event.get("rejected") for event in rounds if event["type"] == "round")  # there was ghost text to hide


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--format", "text", "--json"], "--json and --format text"),
        (["--jsonl", "--format", "json"], "--jsonl and --format json"),
        (["--format", "xml"], "unknown --format 'xml'"),
    ],
)
def test_conflicting_formats_are_one_usage_error(args, needle):
    assert_one_line_error(invoke("run", *args, "hi"), 2, needle)


def test_auto_drafts_where_the_costs_say_it_pays(files, gpu_like):
    first = invoke("run", *files, "--json", "-n", "40", "--stats", "Copy this sentence please.")
    assert first.exit_code == 0, first.output
    payload = json.loads(first.stdout)
    assert payload["mode"] == "auto" and payload["label"] == "auto (k<=64)"
    assert payload["mode_note"] == "auto: drafts only when the measured costs and acceptance say it pays"
    assert set(payload["stats"]["rounds_by_source"]) - {"target"}, "auto never drafted on GPU-like costs"
    assert payload["stats"]["accepted"] > 0
    assert "measuring" not in first.stderr  # the saved tuning was used
    assert "auto: drafts only when" in first.stderr  # --stats says why


def test_stats_say_which_drafter_auto_set_aside_in_the_reply(files, gpu_like, monkeypatch):
    """The README promised that --stats says why a drafter was set aside; nothing did. The guard here sets
    every drafting round's drafter aside (as where its rounds really ran slower than the target alone)."""
    from specchat.drafters import auto

    def record(guard, source, *_round):
        guard.round += 1
        if source != "target":
            guard.aside_until[source] = guard.round + 2
            guard.times_aside[source] = guard.times_aside.get(source, 0) + 1

    monkeypatch.setattr(auto.Guard, "record", record)
    result = invoke("run", *files, "--json", "-n", "40", "--stats", "Copy this sentence please.")
    assert result.exit_code == 0, result.output
    aside = json.loads(result.stdout)["set_aside"]
    assert aside and all(count >= 1 for count in aside.values())
    assert "auto: set aside " in result.stderr and "ran slower than the target alone" in result.stderr
    quiet = invoke("run", *files, "--json", "-n", "40", "Copy this sentence please.")
    assert "set aside" not in quiet.stderr  # said with --stats only; the JSON has it either way


def test_stats_say_when_llama_cpp_gave_threads_way_to_other_programs(files, monkeypatch):
    """An engine that ran on fewer threads for part of the reply (cpuload.py): --stats says so, --json has
    the counts; the fake engine stands in for llama.cpp's, whose count drops on its third call."""
    engine = FakeEngine
    monkeypatch.setattr(engine, "threads", 2, raising=False)
    monkeypatch.setattr(engine, "max_threads", 2, raising=False)
    monkeypatch.setattr(engine, "fewest_threads", 2, raising=False)
    real_eval = engine.eval

    def eval_giving_way(self, tokens, n_logits):
        if self.evals == 2:
            self.fewest_threads = 1
        return real_eval(self, tokens, n_logits)

    monkeypatch.setattr(engine, "eval", eval_giving_way)
    result = invoke("run", *files, "--json", "--stats", "-n", "12", "--mode", "target", "Say hi.")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["threads"] == {"fewest": 1, "most": 2}
    assert "llama.cpp ran on 1 of 2 threads for some of this reply" in result.stderr


def test_auto_leaves_the_draft_model_off_where_it_cannot_pay(files, fake_models, seed_tuning):
    from specchat.costmodel import Costs

    cpu = Costs({n: float(n) for n in (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)}, 0.7, 1e-3, 1e-3)
    seed_tuning(*fake_models, costs=cpu)
    payload = run_json(*files, "--json", "-n", "12", "Say hi.")
    assert payload["mode_note"].startswith("auto: draft model off") and payload["draft"] is None
    assert "spec" not in payload["stats"]["rounds_by_source"]


def test_a_draft_model_that_pays_only_if_every_guess_holds_is_left_off(files, fake_models, seed_tuning):
    """Judged at 100% acceptance, this Zen 4 calibration (c 0.54, a batch of 16 at 7.75 steps) kept the draft
    model for a 1% gain that needed 15 guesses in a row all right: auto never drafted with it, but every reply
    prefilled its prompt in it too (the first token 20-70% later). A GPU-like one keeps it."""
    from specchat.costmodel import Costs

    zen4 = {1: 1.0, 2: 1.73, 3: 2.26, 4: 2.86, 5: 3.47, 6: 4.05, 8: 5.95, 12: 7.79, 16: 7.75, 24: 11.6}
    seed_tuning(*fake_models, costs=Costs({**zen4, 32: 12.45, 48: 17.72, 64: 25.12}, 0.54, 1e-3, 1e-3))
    payload = run_json(*files, "--json", "-n", "12", "Say hi.")
    assert payload["mode_note"].startswith("auto: draft model off: even with 95% of its guesses accepted")
    assert payload["draft"] is None
    seed_tuning(*fake_models)  # GPU-like costs
    assert run_json(*files, "--json", "-n", "12", "Say hi.")["draft"] is not None


def test_a_draft_model_tune_measured_above_95_percent_is_judged_at_that():
    """tune's verdict (the measured acceptance) named spec for a draft model that auto, judging at 95%, left off."""
    from specchat.costmodel import Costs
    from specchat.tuning import Tuning

    costs = Costs({1: 1.0, 2: 1.40, 3: 1.75, 4: 2.1, 5: 2.36, 6: 2.9, 8: 3.9, 12: 6.0, 16: 7.7}, 0.58, 1e-3, 1e-3)
    assert not Tuning("k", costs).draft_model_can_pay()
    assert Tuning("k", costs, priors={"spec": 0.99}).draft_model_can_pay()


def test_auto_measures_once_when_nothing_is_saved(files, isolated):
    result = invoke("run", *files, "-n", "8", "Say hi.")
    assert result.exit_code == 0, result.output
    assert "measuring llama.cpp's costs" in result.stderr
    saved = list((isolated / "config" / "tuning").glob("*.json"))
    # Timing the fake takes microseconds: often "busy" (not saved), sometimes quiet (saved).
    assert saved or "used for this run only" in result.stderr
    again = invoke("run", *files, "--no-tuning", "-n", "8", "Say hi.")
    assert again.exit_code == 0 and "measuring" in again.stderr  # --no-tuning measures afresh


def test_target_alone_file_with_auto_copies_by_prompt_lookup(fake_models, seed_tuning):
    target, _draft = fake_models
    seed_tuning(target, None)
    payload = run_json("--target", str(target), "--json", "Repeat: one two three four five six.")
    assert payload["draft"] is None and "spec" not in payload["stats"]["rounds_by_source"]
    assert payload["text"] == reply_to("Repeat: one two three four five six.")


def test_sampling_is_seeded(files):
    args = (*files, "--mode", "spec", "--json", "--temperature", "0.9", "--seed", "7", "-n", "30", "Hello.")
    first, second = run_json(*args), run_json(*args)
    assert first["text"] == second["text"] and first["settings"]["seed"] == 7


@pytest.mark.parametrize("seed", [[], ["--seed", "-1"]], ids=["no seed", "seed -1"])
def test_a_random_seed_is_recorded_and_repeats_the_reply(files, seed):
    """Without --seed (or with -1) --json recorded null (or -1), so a sampled reply could not be repeated: a
    seed is drawn for the reply, used, and recorded, in --json and in the log; --seed with it repeats the text."""
    args = (*files, "--mode", "spec", "--json", "--temperature", "1.5", "-n", "40", "Hello.")
    first, other = run_json(*args, *seed), run_json(*args, *seed)
    drawn = first["settings"]["seed"]
    assert isinstance(drawn, int) and drawn >= 0 and other["settings"]["seed"] != drawn  # fresh for each run
    assert other["text"] != first["text"]  # the seed matters here, so repeating the text below means something
    again = run_json(*args, "--seed", str(drawn))
    assert again["text"] == first["text"] and again["settings"]["seed"] == drawn
    logged = json.loads(invoke("logs", "--json", "-n", "3").stdout)
    assert [row["settings"]["seed"] for row in logged] == [drawn, other["settings"]["seed"], drawn]
    greedy = run_json(*files, "--mode", "spec", "--json", "-n", "8", *seed, "Hello.")
    assert greedy["settings"]["seed"] in (None, -1)  # nothing drawn where no seed changes anything


def test_no_template_sends_plain_text(files):
    result = invoke("run", *files, "--mode", "target", "--no-template", "-n", "5", "abc")
    assert result.exit_code == 0 and len(result.stdout.strip()) == 5


@pytest.mark.parametrize("prompt", [" ", "\n", "    "])
def test_a_whitespace_raw_prompt_is_completed_as_serve_completes_it(files, monkeypatch, prompt):
    """--no-template sends the text as it is, as serve's /v1/completions does, and there whitespace is a prompt
    (the indentation a line of code starts with): serve answered `"prompt": " "` and run refused it as 'the
    prompt is empty'. A chat message of whitespace says nothing, so with the template it is still refused;
    an empty raw prompt is refused by both."""
    from specchat import chat
    from specchat.openai_api import ApiError, parse_completion

    sent = []
    real = chat.prompt_tokens
    monkeypatch.setattr("specchat.runtime.prompt_tokens", lambda e, m, **kw: sent.append(m) or real(e, m, **kw))
    result = invoke("run", *files, "--mode", "target", "--no-template", "-n", "3", prompt)
    assert result.exit_code == 0, result.output
    assert [m.content for m in sent[0]] == [prompt] == [parse_completion({"prompt": prompt}, 16).prompt]
    assert_one_line_error(invoke("run", *files, "--mode", "target", prompt), 2, "the prompt is empty")
    assert_one_line_error(invoke("run", *files, "--mode", "target", "--no-template", ""), 2, "the prompt is empty")
    with pytest.raises(ApiError, match="non-empty"):
        parse_completion({"prompt": ""}, 16)


def test_system_prompt_goes_into_the_template(files, monkeypatch):
    from specchat import chat

    seen = []
    real = chat.prompt_tokens
    monkeypatch.setattr(chat, "prompt_tokens", lambda e, m, **kw: seen.append(m) or real(e, m, **kw))
    monkeypatch.setattr("specchat.runtime.prompt_tokens", chat.prompt_tokens)
    assert invoke("run", *files, "--mode", "target", "--system", "Be terse.", "-n", "4", "Hi").exit_code == 0
    assert [(m.role, m.content) for m in seen[0]] == [("system", "Be terse."), ("user", "Hi")]
    # A blank one (an unset variable between quotes) replaced the template's default with spaces.
    assert invoke("run", *files, "--mode", "target", "--system", "  \n ", "-n", "4", "Hi").exit_code == 0
    assert [(m.role, m.content) for m in seen[1]] == [("user", "Hi")]


def fake_overlay(fake_models, isolated, *, default: bool = False):
    """An overlay with the fake files as pair "fake" (the default pair with `default`), present in the
    models directory, which is returned."""
    models = isolated / "models"
    models.mkdir()
    lines = ['default_pair = "fake"', ""] if default else []
    for name, path in (("faket", fake_models[0]), ("faked", fake_models[1])):
        (models / path.name).write_bytes(path.read_bytes())
        lines += [f'[models."{name}"]', 'repo = "nobody/fake-GGUF"', f'file = "{path.name}"', ""]
    lines += ['[pairs."fake"]', 'target = "faket"', 'draft = "faked"']
    (isolated / "config").mkdir()
    (isolated / "config" / "models.toml").write_text("\n".join(lines) + "\n")
    return models


def test_a_lone_target_beside_the_pairs_incompatible_draft_is_told_in_the_commands_own_options(
    fake_models, isolated, tmp_path
):
    """`--target T` with the pair's draft of another family: bench's spec rows were refused with run's hint, 'or use
    --mode ngram', an option the bench does not have (its own is --modes)."""
    fake_overlay(fake_models, isolated, default=True)
    other = tmp_path / "other.fake.gguf"
    other.write_text(json.dumps({"role": "target", "token_text": {"70": "zz"}}), encoding="utf-8")
    needle = "the draft draft.fake.gguf is pair fake's (--target replaces only the target)"
    ran = invoke("run", "--target", str(other), "--mode", "spec", "-n", "8", "Hi.")
    assert_one_line_error(ran, 1, needle)
    assert "or use --mode ngram" in ran.stderr, ran.stderr
    benched = invoke("bench", "--target", str(other), "--modes", "spec", "--suite", "quick", "-r", "1", "-n", "8")
    assert_one_line_error(benched, 1, needle)
    assert "--mode ngram" not in benched.stderr and "leave spec out of --modes" in benched.stderr, benched.stderr


def test_pair_from_the_registry_overlay(fake_models, isolated):
    """A pair declared in the overlay whose files are present: `models`, `pull`, `run -p`."""
    fake_overlay(fake_models, isolated)
    listed = invoke("models", "--json")
    rows = {(r["pair"], r["role"]): r for r in json.loads(listed.stdout)["pairs"]}
    assert rows[("fake", "target")]["present"] and rows[("fake", "draft")]["present"]
    table = invoke("models")
    assert table.exit_code == 0 and "fake" in table.stdout and "models directory:" in table.stdout
    pulled = invoke("pull", "fake")
    assert pulled.exit_code == 0 and pulled.stderr.count("already present") == 2, pulled.output
    payload = run_json("-p", "fake", "--mode", "spec", "--json", "Hi.")
    assert payload["pair"] == "fake" and payload["text"] == reply_to("Hi.")


def test_a_target_of_ones_own_beside_the_pairs_draft_is_not_logged_as_the_pair(fake_models, isolated, tmp_path):
    """`--target 7B.gguf` with the pair's draft: run --json and the log named the reply's model after the pair
    (`logs` showed the 1.5B pair). The pair's own target file given as --target is still the pair."""
    models = fake_overlay(fake_models, isolated)
    mine = tmp_path / "mine.fake.gguf"
    mine.write_bytes(fake_models[0].read_bytes())
    own = run_json("-p", "fake", "--target", str(mine), "--mode", "spec", "--json", "Hi.")
    assert own["pair"] is None and own["draft"].endswith("draft.fake.gguf")
    theirs = str(models / fake_models[0].name)
    for mode in ("spec", "target", "auto"):  # beside the pair's draft, and alone (another branch of resolve())
        assert run_json("-p", "fake", "--target", theirs, "--mode", mode, "--json", "Hi.")["pair"] == "fake", mode
    both = run_json("--target", theirs, "--draft", str(models / fake_models[1].name), "--json", "-p", "fake", "Hi.")
    assert both["pair"] == "fake"
    assert run_json("-p", "fake", "--target", str(mine), "--mode", "target", "--json", "Hi.")["pair"] is None
    logged = invoke("logs", "-n", "6")
    assert logged.exit_code == 0 and "\nmine.fake.gguf  ·  spec" in logged.stdout and "\nfake  ·  spec" in logged.stdout


def test_pull_and_tune_take_the_pair_as_pair_too(fake_models, isolated):
    """run, serve, bench and export take --pair/-p; pull and tune took the pair only as an argument, and
    `pull -p NAME` was "No such option". Both spellings work; two that disagree are a usage error."""
    fake_overlay(fake_models, isolated)
    for args in (["--pair", "fake"], ["-p", "fake"], ["fake", "-p", "fake"]):
        pulled = invoke("pull", *args)
        assert pulled.exit_code == 0 and pulled.stderr.count("already present") == 2, (args, pulled.output)
    for command in ("pull", "tune"):
        both = invoke(command, "fake", "--pair", "other")
        assert both.exit_code == 2 and "PAIR 'fake' and --pair 'other' disagree" in both.stderr, both.output


JOINED = (
    "m \u200d\u200d👍axxxxxxxxxxxx中"  # a word that starts with zero-width joiners: Rich 15's wrap raised IndexError
)
NARROW = {"TTY_COMPATIBLE": "1", "COLUMNS": "14"}  # a terminal (where stderr is not soft-wrapped), 14 columns wide


def test_pull_names_a_models_directory_with_joiners_on_a_narrow_terminal(fake_models, isolated, monkeypatch):
    """`specchat pull` said where each file is on a line Rich wrapped at the terminal's width: a models directory
    (SPECCHAT_MODELS_DIR) with zero-width joiners at a word's start was IndexError there, 'internal error'."""
    joined = fake_overlay(fake_models, isolated).rename(isolated / JOINED)
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(joined))
    pulled = runner.invoke(app, ["pull", "fake"], env=NARROW)
    assert pulled.exit_code == 0 and pulled.stderr.count("already present") == 2, pulled.output
    assert f"{joined / fake_models[0].name}\n" in pulled.stderr  # one line, the terminal wraps it


@pytest.mark.parametrize("verify", [[], ["--verify"]])
def test_models_warns_of_a_file_in_a_models_directory_with_joiners_on_a_narrow_terminal(
    fake_models, isolated, monkeypatch, verify
):
    """`specchat models` warned of a directory in a file's place (--verify: 'bad file:' for all but the first)
    on lines Rich wrapped: a models directory with zero-width joiners at a word's start was IndexError."""
    joined = fake_overlay(fake_models, isolated).rename(isolated / JOINED)
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(joined))
    for path in fake_models:
        (joined / path.name).unlink()
        (joined / path.name).mkdir()
    listed = runner.invoke(app, ["models", *verify], env=NARROW)
    assert listed.exit_code == (1 if verify else 0) and "internal error" not in listed.stderr, listed.output
    assert ("bad file: " if verify else "warning: ") + str(joined / fake_models[1].name) in listed.stderr


def test_warnings_and_where_lines_wrap_at_words_on_a_narrow_terminal(fake_models, isolated):
    """`pull`'s line saying where a file is, `models`' warning of a directory in a file's place and run's
    warning of a reply not logged were one line for the terminal to wrap, cut inside words at 30 columns
    ('already pres' / 'ent'); Rich wraps them at words there (a file or a pipe still gets one line)."""
    import re

    from specchat.paths import log_file

    models = fake_overlay(fake_models, isolated)
    narrow = {"TTY_COMPATIBLE": "1", "COLUMNS": "30"}
    pulled = runner.invoke(app, ["pull", "fake"], env=narrow)
    log_file().mkdir(parents=True)  # a directory where the log goes: the reply is not logged
    ran = runner.invoke(app, ["run", "-p", "fake", "--mode", "target", "hi"], env=narrow)
    (models / fake_models[1].name).unlink()
    (models / fake_models[1].name).mkdir()
    listed = runner.invoke(app, ["models"], env=narrow)
    for result, words in ((pulled, "already present at"), (ran, "this reply was not logged"), (listed, "warning:")):
        lines = re.sub(r"\x1b\[[0-9;]*m", "", result.stderr).splitlines()
        assert result.exit_code == 0 and words in " ".join(" ".join(lines).split()), result.output
        assert all(len(line) <= 30 for line in lines), lines


def test_context_fills_and_the_text_is_kept(files):
    result = invoke("run", *files, "--mode", "spec", "--ctx", "64", "Write a long story about a dragon.")
    assert result.exit_code == 0, result.output
    assert "context of 64 tokens is full" in result.stderr
    assert result.stdout.strip() and reply_to("Write a long story about a dragon.").startswith(result.stdout.strip())


def test_prompt_longer_than_the_context(files):
    result = invoke("run", *files[:2], "--ctx", "64", "--mode", "target", input="word " * 100)
    assert_one_line_error(result, 1, "and the context holds 64: no room is left for a reply")


def test_prompt_too_long_is_refused_before_auto_measures_the_machine(files):
    # The first auto run measures the machine (~15 s on a 2-core CPU, more under load): a prompt that
    # cannot fit is refused before that, not after the wait.
    result = invoke("run", *files, "--ctx", "512", input="word " * 1000)
    assert_one_line_error(result, 1, "and the context holds 512: no room is left for a reply")
    assert "measuring" not in result.stderr
    fits = invoke("run", *files, "--ctx", "512", "-n", "4", "Hi")
    assert fits.exit_code == 0 and "measuring llama.cpp's costs" in fits.stderr, fits.output


def test_a_first_auto_run_in_a_small_context_measures_what_fits_for_that_run_only(files, fake_models, seed_tuning):
    # The calibration text and a batch of 64 after it did not fit in --ctx 128: the first auto run failed
    # with "247 tokens do not fit in the context of 128" for a prompt of a few tokens.
    small = invoke("run", *files, "--ctx", "128", "-n", "4", "Hi")
    assert small.exit_code == 0 and small.stdout.strip(), small.output
    assert "in a context of 128 tokens, too small for the whole measurement: used for this run only" in small.stderr
    full = invoke("run", *files, "-n", "4", "Hi")  # nothing was saved: measured again
    assert "measuring llama.cpp's costs" in full.stderr and "(none saved yet;" in full.stderr, full.output
    seed_tuning(*fake_models)  # a whole measurement saved (the fake's own timings mean nothing)
    again = invoke("run", *files, "--ctx", "128", "-n", "4", "Hi")
    assert again.exit_code == 0 and "measuring" not in again.stderr, again.output


def test_interrupted_generation_keeps_the_text_and_exits_130(fake_models, tmp_path):
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "stop", interrupt_at=6)
    result = invoke("run", "--target", str(target), "--mode", "target", "Tell me a story.")
    assert result.exit_code == 130
    text = result.stdout.removesuffix("\n")  # plain text ends with a newline, even when cut short
    assert text and reply_to("Tell me a story.").startswith(text)
    assert "interrupted" in result.stderr and "Traceback" not in result.output


def test_stats_say_nothing_of_a_one_shot_reply_stopped_before_its_first_token(fake_models, tmp_path):
    """`run --stats "PROMPT"` stopped by Ctrl-C in the prefill printed '0 tokens in 0.00s, 0.0 tok/s (decode), no
    token, stop: interrupted' over `interrupted`: there was no reply to give stats of (the chat prints none)."""
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "stop", interrupt_at=1)  # the prompt's own eval
    result = invoke("run", "--target", str(target), "--mode", "target", "--stats", "Tell me a story.")
    assert result.exit_code == 130 and result.stdout.strip() == ""
    assert result.stderr.strip() == "interrupted"


def test_debug_shows_the_traceback_of_an_error(files):
    plain = invoke("run", *files, "--ctx", "64", "--mode", "target", input="word " * 100)
    debug = invoke("--debug", "run", *files, "--ctx", "64", "--mode", "target", input="word " * 100)
    assert "Traceback" not in plain.stderr and "Traceback" in debug.stderr
    assert debug.exit_code == plain.exit_code == 1


def test_debug_after_the_command_says_where_it_goes(files):
    """Hints say "rerun with --debug", and people add it at the end: it is the root's option, so that was
    "No such option: --debug". Now the hints, and that error, say where it goes."""
    result = invoke("run", *files, "--mode", "target", "Hi", "--debug")
    assert_one_line_error(result, 2, "--debug goes before the command")
    assert "specchat --debug COMMAND" in result.stderr


@pytest.mark.parametrize("command", ["run", "models", "bench"])
def test_version_after_the_command_says_where_it_goes(isolated, command):
    """`specchat run --version` was "No such option: --version (Possible options: --json, --jsonl, --verbose)",
    offering options that print no version; --version is the root's, as --debug is."""
    result = invoke(command, "--version")
    assert_one_line_error(result, 2, "--version goes before the command")
    assert "specchat --version" in result.stderr and "Possible options" not in result.stderr


@pytest.mark.parametrize(("flag", "fmt"), [("--json", "json"), ("--jsonl", "jsonl")])
def test_bench_json_names_the_format_option(isolated, flag, fmt):
    """run, tune, export, logs and models take --json; `bench --json` was "No such option: --json (Possible
    options: --ks)", offering draft lengths for a report format."""
    result = invoke("bench", flag)
    assert_one_line_error(result, 2, f"bench has no {flag}: its report is -f {fmt}")
    assert "Possible options" not in result.stderr and "-o FILE" in result.stderr


@pytest.mark.parametrize(("args", "needle"), [(["-v"], "No such option: -v"), (["--debug=1", "run"], "'--debug'")])
def test_a_bad_root_option_is_one_line_too(isolated, args, needle):
    """`specchat -v` (llama.cpp's verbose) or `--debug=1` was Typer's boxed panel with a usage line, where
    every other usage error is `error: ... hint: ...`."""
    result = invoke(*args)
    assert_one_line_error(result, 2, needle)
    assert "see `specchat --help`" in result.stderr and "╭" not in result.output


def test_specchat_alone_is_still_its_help(isolated):
    result = invoke()
    assert "Usage" in result.output and "error:" not in result.output


def test_a_bug_is_one_line_and_debug_has_the_traceback(files, monkeypatch):
    from specchat import replying

    def broken(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(replying, "reply", broken)
    result = invoke("run", *files[:2], "--mode", "target", "Hi")  # --target alone: no note for an unused --draft
    assert_one_line_error(result, 1, "internal error: RuntimeError: boom")
    assert "rerun as `specchat --debug COMMAND ...`" in result.stderr
    monkeypatch.setenv("SPECCHAT_DEBUG", "false")  # read as on, as any value but "" and "0" was
    assert "Traceback" not in invoke("run", *files, "--mode", "target", "Hi").stderr
    monkeypatch.setenv("SPECCHAT_DEBUG", "1")
    assert "Traceback" in invoke("run", *files, "--mode", "target", "Hi").stderr


def test_no_prompt_and_no_terminal(monkeypatch):
    from specchat import repl

    monkeypatch.setattr(repl, "_read_stdin", lambda: None)  # stdin is a terminal, stdout is not
    assert_one_line_error(invoke("run"), 2, "no prompt given")


def test_no_prompt_on_a_terminal_with_a_format_that_has_no_chat(monkeypatch):
    """On a terminal the chat needs the live view: with --json the hint says that, not 'use a terminal'."""
    from specchat import outputs, repl

    monkeypatch.setattr(repl, "_read_stdin", lambda: None)
    monkeypatch.setattr(outputs, "fancy_terminal", lambda: True)
    result = invoke("run", "--json")
    assert_one_line_error(result, 2, "no prompt given")
    assert "the chat needs the live view, not --format json" in result.stderr and "use a terminal" not in result.stderr


def test_no_prompt_on_a_dumb_terminal_with_a_format_says_why_there_is_no_chat(monkeypatch):
    """TERM=dumb on a terminal (Emacs shell) chats in plain text (test_terminal.py), but not in JSON; the
    hint must not say "or use a terminal", which the user is on."""
    from specchat import outputs, repl

    monkeypatch.setattr(repl, "_read_stdin", lambda: None)
    monkeypatch.setattr(outputs, "fancy_terminal", lambda: False)
    monkeypatch.setattr(outputs, "dumb_terminal", lambda: True, raising=False)
    result = invoke("run", "--json")
    assert_one_line_error(result, 2, "no prompt given")
    assert "TERM=dumb" in result.stderr and "--format json" in result.stderr and "use a terminal" not in result.stderr


def test_no_prompt_typed_at_a_terminal_with_stdout_redirected_says_stdout_is_why(monkeypatch):
    """`specchat run > file` or `specchat run | less` at a terminal: the hint said "or use a terminal",
    which the user is at; what keeps the chat away is stdout."""
    from specchat import outputs, repl

    monkeypatch.setattr(repl, "_read_stdin", lambda: None)
    monkeypatch.setattr(outputs, "fancy_terminal", lambda: False)
    monkeypatch.setattr(outputs, "stdin_terminal", lambda: True, raising=False)
    result = invoke("run")
    assert_one_line_error(result, 2, "no prompt given")
    assert "stdout is not a terminal" in result.stderr and "use a terminal" not in result.stderr


def test_debug_is_a_setting_not_an_environment_variable(files, monkeypatch):
    import os

    from specchat import runtime

    seen = []
    real = runtime.open_pipeline
    monkeypatch.setattr(runtime, "open_pipeline", lambda options, *a: seen.append(options.debug) or real(options, *a))
    assert invoke("--debug", "run", *files, "--mode", "target", "-n", "2", "Hi").exit_code == 0
    assert invoke("run", *files, "--mode", "target", "-n", "2", "Hi").exit_code == 0
    assert seen == [True, False] and "SPECCHAT_DEBUG" not in os.environ


@pytest.mark.real
def test_auto_mode_says_what_it_does(default_pair_paths, tmp_path, monkeypatch):
    """auto (the default) measures this machine once, saves it, and explains its choice."""
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path))
    first = invoke("run", "--json", "-n", "8", "--stats", "Say hi.")
    assert first.exit_code == 0, first.output
    payload = json.loads(first.stdout)
    assert payload["mode"].startswith("auto") and payload["mode_note"].startswith("auto:")
    assert "measuring llama.cpp's costs" in first.stderr
    saved = list((tmp_path / "tuning").glob("*.json"))
    second = invoke("run", "--json", "-n", "8", "Say hi.")
    assert second.exit_code == 0, second.output
    if "other programs were using the CPUs" in first.stderr:  # a busy machine: used once, measured again
        assert not saved and "measuring" in second.stderr
    else:
        assert saved and "measuring" not in second.stderr  # saved tuning reused


def test_a_target_that_is_not_a_regular_file_says_what_it_is(tmp_path):
    fifo = tmp_path / "model.fifo"
    os.mkfifo(fifo)
    assert_one_line_error(invoke("run", "--target", str(fifo), "hi"), 1, "is not a regular file")
    assert_one_line_error(invoke("run", "--target", "/dev/zero", "hi"), 1, "is not a regular file")


@pytest.mark.parametrize("command", [["run", "hi"], ["export", "--to", "llama-server"]])
def test_a_model_path_the_system_refuses_to_look_up_is_named(tmp_path, command):
    """A file name longer than the file system allows (255 bytes): `is_file()` raised, an internal error."""
    path = tmp_path / ("m" * 300 + ".gguf")
    result = invoke(command[0], "--target", str(path), *command[1:])
    assert_one_line_error(result, 1, "File name too long")
    assert "internal error" not in result.stderr and "give the path of a .gguf file" in result.stderr


@pytest.mark.parametrize("content", ["[]", '"abc"', '{"version": 4, "v": {}}', '{"version": 4, "v": {"1": "x"}}'])
def test_an_odd_saved_tuning_never_stops_a_run(files, fake_models, content):
    """A tuning file of the wrong shape is ignored (auto measures again), never an internal error."""
    from specchat import tuning
    from specchat.runtime import Options, Resolved

    key = tuning.key_for(Resolved(None, *fake_models), Options())
    path = tuning.tuning_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    result = invoke("run", *files, "Name three colours.")
    assert result.exit_code == 0, result.output
    assert result.stdout == reply_to("Name three colours.") + "\n"
    assert "internal error" not in result.output


def a_file_here_and_a_missing_draft(isolated, *, pair: str, draft: str, size: bool, data=b"hello") -> Path:
    """An overlay pair whose target "here" is a file of `data` (5 bytes, no GGUF) in the models folder (its size
    declared, or not) and whose draft is missing; the models folder."""
    models = isolated / "models"
    models.mkdir()
    (models / "here.gguf").write_bytes(data)
    (isolated / "config").mkdir()
    (isolated / "config" / "models.toml").write_text(
        '[models.here]\nrepo = "nobody/here"\nfile = "here.gguf"\n'
        + (f"size = {len(data)}\n" if size else "")
        + f'[models.{draft}]\nrepo = "nobody/{draft}"\nfile = "{draft}.gguf"\n'
        f'[pairs.{pair}]\ntarget = "here"\ndraft = "{draft}"\n'
    )
    return models


def test_models_json_rows_have_the_same_keys_with_and_without_verify(isolated):
    """checksum_ok was in a row only when --verify checked a file: a script reading it got a KeyError on
    every other row (and on every row without --verify). It is null where nothing was checked."""
    from test_gguf import tiny_gguf

    a_file_here_and_a_missing_draft(isolated, pair="mixed", draft="gone", size=True, data=tiny_gguf())
    for args in (["models", "--json"], ["models", "--json", "--verify"]):
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        rows = json.loads(result.stdout)["pairs"]
        assert len({tuple(row) for row in rows}) == 1, args
        assert "gated" in rows[0], rows[0]  # models.toml's `gated`, as pull reads it
        mixed = {row["role"]: row["checksum_ok"] for row in rows if row["pair"] == "mixed"}
        assert mixed == ({"target": True, "draft": None} if "--verify" in args else {"target": None, "draft": None})


def test_models_verify_shows_its_verdict_in_the_table(isolated):
    """`models --verify` printed the same table as `models` ("yes" for a file it had just hashed): the
    table said nothing of what was checked. A checked file now reads "checked", a bad one "BAD"."""
    from test_gguf import tiny_gguf

    models = isolated / "models"
    models.mkdir()
    (models / "good.gguf").write_bytes(tiny_gguf())
    (models / "bad.gguf").write_bytes(b"hello")
    (isolated / "config").mkdir()
    (isolated / "config" / "models.toml").write_text(
        f'[models.good]\nrepo = "nobody/good"\nfile = "good.gguf"\nsize = {len(tiny_gguf())}\n'
        f'[models.bad]\nrepo = "nobody/bad"\nfile = "bad.gguf"\nsha256 = "{"0" * 64}"\n'
        '[pairs.mine]\ntarget = "good"\ndraft = "bad"\n'
    )
    listed = invoke("models")
    assert listed.exit_code == 0 and "checked" not in listed.stdout and "BAD" not in listed.stdout
    verified = invoke("models", "--verify")
    assert verified.exit_code == 1 and "bad.gguf has sha256" in verified.stderr
    mine = [line for line in verified.stdout.splitlines() if "good *" in line or "bad *" in line]
    assert [line.split("│")[-2].strip() for line in mine] == ["checked", "BAD"], verified.stdout
    assert "checked = as models.toml lists it" in verified.stdout


def test_models_shows_which_files_are_gated(isolated):
    (isolated / "config").mkdir()
    (isolated / "config" / "models.toml").write_text(
        '[models.open]\nrepo = "nobody/open"\nfile = "open.gguf"\n'
        '[models.shut]\nrepo = "nobody/shut"\nfile = "shut.gguf"\ngated = true\n'
        '[pairs.mine]\ntarget = "shut"\ndraft = "open"\n'
    )
    listed = invoke("models")
    assert listed.exit_code == 0 and "shut * (gated)" in listed.stdout and "open * (gated)" not in listed.stdout
    assert "set HF_TOKEN" in listed.stdout
    rows = json.loads(invoke("models", "--json").stdout)["pairs"]
    assert {row["role"]: row["gated"] for row in rows if row["pair"] == "mine"} == {"target": True, "draft": False}


def test_models_says_what_a_size_of_question_mark_means(isolated):
    """The bigger pairs' size column read "?" with no word on it (the caption explained only "*"): their sizes
    are not pinned in models.toml."""
    listed = invoke("models")
    assert listed.exit_code == 0 and "│ ?" in listed.stdout
    assert "? = size not listed in models.toml" in listed.stdout


def test_models_names_a_directory_in_a_files_place(isolated):
    """A directory under a model's file name showed as simply not present, and --verify said nothing (exit 0)."""
    models = isolated / "models"
    (models / "small.gguf").mkdir(parents=True)
    (isolated / "config").mkdir()
    (isolated / "config" / "models.toml").write_text(
        '[models.a]\nrepo = "nobody/a"\nfile = "a.gguf"\n[models.b]\nrepo = "nobody/b"\nfile = "b.gguf"\n'
        '[models.small]\nrepo = "nobody/small"\nfile = "small.gguf"\n'
        '[pairs.pa]\ntarget = "a"\ndraft = "small"\n[pairs.pb]\ntarget = "b"\ndraft = "small"\n'
    )
    needle = "small.gguf is a directory where the model's file should be"
    listed = invoke("models")
    warnings = [line for line in listed.stderr.splitlines() if line.strip()]
    assert listed.exit_code == 0 and len(warnings) == 1 and needle in warnings[0] and "remove it" in warnings[0]
    assert_one_line_error(invoke("models", "--verify"), 1, needle)
    rows = json.loads(invoke("models", "--json").stdout)["pairs"]
    problems = {(row["pair"], row["role"]): row["problem"] for row in rows}
    assert problems[("pa", "target")] is None
    assert needle in problems[("pa", "draft")] and needle in problems[("pb", "draft")]


def test_models_dir_set_below_a_file_names_the_file_and_not_its_removal(isolated, monkeypatch):
    """SPECCHAT_MODELS_DIR=~/m.gguf/sub (a model's file above the folder named) was told "remove or rename that
    file": the user's model. The variable is what to change."""
    blocker = isolated / "m.gguf"
    blocker.write_text("kept")
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(blocker / "sub"))
    warnings = [line for line in invoke("models").stderr.splitlines() if line.strip()]
    assert (
        len(warnings) == 1
        and f"SPECCHAT_MODELS_DIR passes through the file {blocker}: set it to a folder" in warnings[0]
    )
    assert "remove" not in warnings[0] and blocker.read_text() == "kept"


def test_models_names_a_file_where_the_models_directory_should_be(isolated, monkeypatch):
    """SPECCHAT_MODELS_DIR naming a file (a model file, say): every model showed as simply not present, and
    --verify passed (exit 0), as if the folder were only empty."""
    blocker = isolated / "model.gguf"
    blocker.write_text("kept")
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(blocker))
    needle = f"cannot look for the models in {blocker}: {blocker} is not a directory"
    listed = invoke("models")
    warnings = [line for line in listed.stderr.splitlines() if line.strip()]
    assert listed.exit_code == 0 and len(warnings) == 1 and needle in warnings[0], listed.stderr
    assert "SPECCHAT_MODELS_DIR names this file: set it to a folder" in warnings[0] and "remove" not in warnings[0]
    assert_one_line_error(invoke("models", "--verify"), 1, needle)
    rows = json.loads(invoke("models", "--json").stdout)["pairs"]
    assert all(row["problem"] == needle for row in rows) and blocker.read_text() == "kept"


def test_no_log_leaves_no_empty_history_index(files, private_log, monkeypatch):
    """History on, logging off, nothing logged yet: each run made an empty history index (sparse files of
    96 MB) that nothing would ever be put in. The index is made once the log has a message."""
    assert invoke("run", *files, "--no-log", "hi").exit_code == 0
    monkeypatch.setenv("SPECCHAT_NO_LOG", "1")
    assert invoke("run", *files, "hi").exit_code == 0
    assert not (private_log / "history").exists()
    monkeypatch.delenv("SPECCHAT_NO_LOG")
    for _ in range(2):  # the first logs a reply, the second indexes it before its own
        assert invoke("run", *files, "hi").exit_code == 0
    assert list((private_log / "history").glob("*/meta.json"))


def test_a_read_only_data_folder_is_one_history_notice_where_the_run_logs(files, private_log, monkeypatch):
    """run tells the history whether it logs: a data folder it cannot write freezes the history, said once."""
    for _ in range(2):  # a log, then a history index built from it
        assert invoke("run", *files, "--mode", "suffix", "hi").exit_code == 0
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == str(private_log) else real(path, mode))
    quiet = invoke("run", *files, "--mode", "suffix", "--no-log", "hi")
    assert quiet.exit_code == 0 and "history" not in quiet.stderr, quiet.stderr
    told = invoke("run", *files, "--mode", "suffix", "hi")
    lines = [line for line in told.stderr.splitlines() if "history" in line]
    assert told.exit_code == 0 and len(lines) == 1 and "frozen" in lines[0] and "SPECCHAT_DATA_DIR" in lines[0]


def test_a_truncated_model_file_is_named_not_called_missing(isolated, monkeypatch):
    """A file cut short under a model's name: pull and run's auto-pull said it "is not on this machine", and
    `models` showed "no" with no reason. Each now names the file and its size, and says what to do."""
    models = isolated / "models"
    models.mkdir()
    (models / "cut.gguf").write_bytes(b"GGUF" * 10)
    (models / "whole.gguf").write_bytes(b"GGUF" * 25)
    (isolated / "config").mkdir()
    (isolated / "config" / "models.toml").write_text(
        '[models.cut]\nrepo = "nobody/cut"\nfile = "cut.gguf"\nsize = 100\n'
        '[models.whole]\nrepo = "nobody/whole"\nfile = "whole.gguf"\nsize = 100\n'
        f'sha256 = "{hashlib.sha256(b"GGUF" * 25).hexdigest()}"\n'  # no GGUF, but the file models.toml names
        '[pairs.mine]\ntarget = "cut"\ndraft = "whole"\n'
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    needle = "cut.gguf has 40 bytes, expected 100"
    for args in (["pull", "mine"], ["run", "--pair", "mine", "hi"]):
        result = invoke(*args)
        assert_one_line_error(result, 1, needle)
        assert "not on this machine" not in result.output and "download it again" in result.stderr
    listed = invoke("models")
    assert listed.exit_code == 0 and needle in listed.stderr and "specchat pull" in listed.stderr
    rows = json.loads(invoke("models", "--json").stdout)["pairs"]
    problems = {row["role"]: row["problem"] for row in rows if row["pair"] == "mine"}
    assert needle in problems["target"] and problems["draft"] is None
    assert_one_line_error(invoke("models", "--verify"), 1, needle)


def test_a_damaged_file_of_a_pair_that_is_not_the_default_is_sent_to_pull_that_pair(isolated):
    """The hint said `specchat pull` (model NAME): run as said, it pulled the default pair and left the damaged
    file of the pair asked for as it was. It names the pair that holds the file."""
    import hashlib

    models = isolated / "models"
    models.mkdir()
    target, draft = hashlib.sha256(b"GGUF" * 25).hexdigest(), hashlib.sha256(b"GGUF" * 5).hexdigest()
    (models / "t.gguf").write_bytes(b"FUGG" * 25)  # the right size, other bytes
    (models / "d.gguf").write_bytes(b"GGUF" * 5)
    (isolated / "config").mkdir()
    (isolated / "config" / "models.toml").write_text(
        f'[models.t]\nrepo = "nobody/t"\nfile = "t.gguf"\nsize = 100\nsha256 = "{target}"\n'
        f'[models.d]\nrepo = "nobody/d"\nfile = "d.gguf"\nsize = 20\nsha256 = "{draft}"\n'
        '[pairs.mine]\ntarget = "t"\ndraft = "d"\n'
    )
    for args in (["pull", "mine"], ["models", "--verify"]):
        result = invoke(*args)
        assert_one_line_error(result, 1, "t.gguf has sha256")
        assert "run `specchat pull mine`" in result.stderr, result.stderr


def test_models_verify_shows_its_progress_while_it_reads_a_file(isolated):
    """`models --verify` read every file (a 32B pair's 20 GB) without a sign of life until the table came."""
    import hashlib

    from specchat.modelsview import model_rows

    models = isolated / "models"
    models.mkdir()
    (models / "t.gguf").write_bytes(b"GGUF" * 25)
    (models / "d.gguf").write_bytes(b"GGUF" * 5)
    (isolated / "config").mkdir()
    target, draft = hashlib.sha256(b"GGUF" * 25).hexdigest(), hashlib.sha256(b"GGUF" * 5).hexdigest()
    (isolated / "config" / "models.toml").write_text(
        f'[models.t]\nrepo = "nobody/t"\nfile = "t.gguf"\nsize = 100\nsha256 = "{target}"\n'
        f'[models.d]\nrepo = "nobody/d"\nfile = "d.gguf"\nsize = 21\nsha256 = "{draft}"\n'
        '[pairs.mine]\ntarget = "t"\ndraft = "d"\n'
    )
    read = {}

    def start(label, total):
        read[label] = 0
        return lambda n: read.update({label: read[label] + n})

    _, bad = model_rows(True, start)
    assert read == {"sha256 of t.gguf": 100}  # d.gguf, of the wrong size, is not read: no empty bar for it
    assert len(bad) == 1 and "d.gguf has 20 bytes" in bad[0].message


def pair_with_draft(isolated, name: str, data: bytes, extra: str = "") -> None:
    """An overlay pair `mine` of a good tiny GGUF target and a draft `name` of these bytes (`extra`: its entry's
    further keys), both in the models folder."""
    from test_gguf import tiny_gguf

    models = isolated / "models"
    models.mkdir()
    (models / "good.gguf").write_bytes(tiny_gguf())
    (models / f"{name}.gguf").write_bytes(data)
    (isolated / "config").mkdir()
    (isolated / "config" / "models.toml").write_text(
        '[models.good]\nrepo = "nobody/good"\nfile = "good.gguf"\n'
        f'[models.{name}]\nrepo = "nobody/{name}"\nfile = "{name}.gguf"\n{extra}'
        f'[pairs.mine]\ntarget = "good"\ndraft = "{name}"\n'
    )


def test_models_verify_checks_a_file_with_no_size_or_sha256_is_a_gguf(isolated):
    """An overlay model may leave out size and sha256: `models --verify` then checked nothing and called a
    truncated copy or any bytes checksum_ok true (exit 0), though troubleshooting.md sends a user with a
    damaged GGUF there. Such a file's GGUF structure is checked, as `run` checks it before loading."""
    from test_gguf import tiny_gguf

    pair_with_draft(isolated, "cut", tiny_gguf()[:-64])  # a download cut short: its tensors run past the end
    result = invoke("models", "--verify", "--json")
    assert result.exit_code == 1 and "cut.gguf is not a valid GGUF file" in result.stderr, result.output
    assert "Traceback" not in result.output and "good.gguf" not in result.stderr
    rows = {row["role"]: row["checksum_ok"] for row in json.loads(result.stdout)["pairs"] if row["pair"] == "mine"}
    assert rows == {"target": True, "draft": False}
    problems = {row["role"]: row["problem"] for row in json.loads(result.stdout)["pairs"] if row["pair"] == "mine"}
    assert problems["target"] is None and "cut.gguf is not a valid GGUF file" in problems["draft"]  # was only on stderr


def test_models_verify_checks_a_file_with_a_size_but_no_sha256_is_a_gguf(isolated):
    """An overlay model with `size` alone: `models` warned that a file of that size is no GGUF and `pull` refused
    it, yet `models --verify`, the thorough check, called it `checked` (exit 0): it compared the size only."""
    pair_with_draft(isolated, "other", b"\0" * 300, "size = 300\n")  # another file under the name, of that size
    result = invoke("models", "--verify", "--json")
    assert result.exit_code == 1 and "other.gguf is not a valid GGUF file" in result.stderr, result.output
    rows = {row["role"]: row["checksum_ok"] for row in json.loads(result.stdout)["pairs"] if row["pair"] == "mine"}
    assert rows == {"target": True, "draft": False}


def test_models_verify_checks_a_draft_shared_by_pairs_once(isolated, monkeypatch):
    """The packaged Coder 0.5B drafts for four pairs: --verify hashed its file once per pair and printed a
    bad one four times. It is read once, and a bad one is one error line."""
    from test_gguf import tiny_gguf

    from specchat import modelfiles

    models = isolated / "models"
    models.mkdir()
    for name in ("a.gguf", "b.gguf"):
        (models / name).write_bytes(tiny_gguf())
    (models / "small.gguf").write_bytes(b"hello")
    size = len(tiny_gguf())
    (isolated / "config").mkdir()
    (isolated / "config" / "models.toml").write_text(
        f'[models.a]\nrepo = "nobody/a"\nfile = "a.gguf"\nsize = {size}\n'
        f'[models.b]\nrepo = "nobody/b"\nfile = "b.gguf"\nsize = {size}\n'
        f'[models.small]\nrepo = "nobody/small"\nfile = "small.gguf"\nsha256 = "{"0" * 64}"\n'
        '[pairs.pa]\ntarget = "a"\ndraft = "small"\n[pairs.pb]\ntarget = "b"\ndraft = "small"\n'
    )
    hashed = []
    real = modelfiles.sha256_of
    monkeypatch.setattr(modelfiles, "sha256_of", lambda path, advance=None: hashed.append(path) or real(path))
    result = invoke("models", "--verify", "--json")
    assert_one_line_error(result, 1, "small.gguf has sha256")
    assert [path.name for path in hashed] == ["small.gguf"]
    rows = {row["pair"]: row["checksum_ok"] for row in json.loads(result.stdout)["pairs"] if row["role"] == "draft"}
    assert rows["pa"] is False and rows["pb"] is False


def test_models_verify_of_an_unreadable_file_is_one_line(isolated, monkeypatch):
    """A present file that cannot be read (another user's, mode 600; an I/O error) made `models --verify`
    an internal error: it is that file's own error."""
    import errno

    from specchat import modelfiles

    def unreadable(path, advance=None):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(modelfiles, "sha256_of", unreadable)
    models = isolated / "models"
    models.mkdir()
    (isolated / "config").mkdir()
    overlay = ""
    for name, digit in (("locked", "a"), ("locked2", "b")):
        (models / f"{name}.gguf").write_bytes(b"hello")
        overlay += f'[models.{name}]\nrepo = "nobody/locked"\nfile = "{name}.gguf"\nsha256 = "{digit * 64}"\n'
    (isolated / "config" / "models.toml").write_text(overlay + '[pairs.locked]\ntarget = "locked"\ndraft = "locked2"\n')
    result = invoke("models", "--verify", "--json")
    assert "internal error" not in result.output
    assert result.exit_code == 1 and "cannot read " in result.stderr and "Permission denied" in result.stderr
    rows = [row for row in json.loads(result.stdout)["pairs"] if row["pair"] == "locked"]
    assert [row["checksum_ok"] for row in rows] == [False, False]


def test_paths_and_file_names_are_printed_as_they_are_not_as_markup(isolated, monkeypatch):
    """Rich read the models directory, a model's file name and its path as markup: '[/]' in a folder name
    made `models` an internal error, '[i]x.gguf' was printed as 'x.gguf', a path that does not exist."""
    folder = isolated / "a[/]b [i]models"  # a folder "a[" holding "]b [i]models"
    folder.mkdir(parents=True)
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(folder))
    from test_gguf import tiny_gguf

    for name in ("[i]x.gguf", "[i]y.gguf"):  # well-formed: pull checks the header of a file without sha256
        (folder / name).write_bytes(tiny_gguf())
    (isolated / "config").mkdir()
    (isolated / "config" / "models.toml").write_text(
        '[models.x]\nrepo = "nobody/x"\nfile = "[i]x.gguf"\n[models.y]\nrepo = "nobody/x"\nfile = "[i]y.gguf"\n'
        '[pairs.x]\ntarget = "x"\ndraft = "y"\n'
    )
    listed = invoke("models")
    assert listed.exit_code == 0, listed.output
    assert f"models directory: {folder}" in listed.stdout
    pulled = invoke("pull", "x")
    assert pulled.exit_code == 0, pulled.output
    for name in ("[i]x.gguf", "[i]y.gguf"):
        assert pulled.stderr.count(f"{name}: already present at {folder / name}") == 1, pulled.stderr


def test_emoji_codes_in_paths_are_printed_as_they_are(isolated, monkeypatch):
    """markup=False still let Rich replace ':smile:' in the models directory's path with an emoji."""
    folder = isolated / ":smile: models"
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(folder))
    listed = invoke("models")
    assert listed.exit_code == 0, listed.output
    assert f"models directory: {folder}" in listed.stdout


@pytest.mark.parametrize("mode", ["spec", "auto"])
def test_the_target_as_its_own_draft_is_a_usage_error(fake_models, tmp_path, mode):
    """`--draft` naming the target's file (by any path) loaded it twice to draft with it: never faster."""
    target, _ = fake_models
    link = tmp_path / "link.gguf"
    link.symlink_to(target)
    result = invoke("run", "--target", str(target), "--draft", str(link), "--mode", mode, "-n", "8", "Hi.")
    assert_one_line_error(result, 2, "is the target model itself")
    unused = invoke("run", "--target", str(target), "--draft", str(target), "--mode", "ngram", "-n", "8", "Hi.")
    assert unused.exit_code == 0, unused.output  # a reply that does not load the draft model


@pytest.mark.parametrize("command", [["tune"], ["bench", "--suite", "quick", "-r", "1", "-n", "8"]])
def test_the_target_as_its_own_draft_is_told_in_the_commands_own_options(fake_models, command):
    """tune and bench refused the target as its own draft with run's hint, 'or use --mode ngram': neither has a
    --mode (tune none at all, bench --modes), so the way the hint offered was another usage error."""
    target, _ = fake_models
    result = invoke(*command, "--target", str(target), "--draft", str(target))
    assert_one_line_error(result, 2, "is the target model itself")
    assert "--mode ngram" not in result.stderr and "or leave out --draft" in result.stderr, result.stderr


def test_a_lone_target_that_is_the_pairs_draft_is_a_usage_error(fake_models, isolated):
    """`--target D --mode spec` takes the pair's draft: D itself. The error named a draft model the user never
    gave without saying where it came from."""
    target, draft = fake_models
    models = fake_overlay(fake_models, isolated, default=True)
    result = invoke("run", "--target", str(models / draft.name), "--mode", "spec", "-n", "8", "Hi.")
    assert_one_line_error(result, 2, "is the target model itself (--target alone drafts with pair fake's draft model)")
    result = invoke("run", "--draft", str(models / target.name), "--mode", "spec", "-n", "8", "Hi.")
    assert_one_line_error(result, 2, "is the target model itself (--draft alone drafts for pair fake's target)")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "-k", "0", "x"], "'--draft-tokens' / '-k': 0 is not in the range 1 to 64"),
        (["serve", "--port", "70000"], "'--port': 70000 is not in the range 0 to 65535"),
        (["logs", "-n", "-1"], "'--count' / '-n': -1 is less than 0: give 0 or more"),
        (["tune", "-n", "2"], "'--max-tokens' / '-n': 2 is less than 8: give 8 or more"),
        (["logs", "--cid", "abc"], "'--cid': 'abc' is not a whole number"),
    ],
)
def test_a_number_out_of_range_is_named_with_its_range(args, said):
    """Typer words its number checks as pydantic does: `-k 0` said "Input should be greater than or equal
    to 1", naming neither the value given nor the other end of the range (64), unlike --temperature's."""
    result = invoke(*args)
    assert_one_line_error(result, 2, said)
    assert "Input should" not in result.stderr


def test_one_token_is_said_in_the_singular(files):
    result = invoke("run", *files, "--mode", "target", "-n", "1", "--stats", "Hi")
    assert result.exit_code == 0 and "1 token in " in result.stderr, result.output


def test_a_draft_larger_than_its_target_is_said_to_be_swapped_perhaps(tmp_path):
    """`--target small.gguf --draft big.gguf` ran without a word: a draft that costs more than its target cannot
    save time, and flags given the wrong way round are the usual reason."""
    from specchat.runtime import Options, resolve

    small, big = tmp_path / "small.gguf", tmp_path / "big.gguf"
    header = b"GGUF" + (3).to_bytes(4, "little") + bytes(16)  # version 3, no tensors, no metadata
    small.write_bytes(header + bytes(100))
    big.write_bytes(header + bytes(3000))
    notes = []
    resolve(Options(target_path=small, draft_path=big, mode="spec"), notes.append, None)
    assert len(notes) == 1 and "big.gguf" in notes[0] and "larger than the target" in notes[0], notes
    for options in (
        Options(target_path=big, draft_path=small, mode="spec"),
        Options(target_path=small, draft_path=big, mode="ngram"),
    ):
        notes.clear()
        resolve(options, notes.append, None)
        assert not notes  # the right way round, or a draft model that is not loaded


def test_a_draft_as_large_as_its_target_is_said_to_cost_as_much(tmp_path):
    """A second copy of the target given as --draft (another download of it) loaded it twice without a word:
    only a draft larger than the target was said, and one as large costs as much per token."""
    from specchat.runtime import Options, resolve

    header = b"GGUF" + (3).to_bytes(4, "little") + bytes(16)  # version 3, no tensors, no metadata
    target, copy = tmp_path / "model.gguf", tmp_path / "copy" / "model.gguf"
    copy.parent.mkdir()
    for path in (target, copy):
        path.write_bytes(header + bytes(100))
    notes = []
    resolve(Options(target_path=target, draft_path=copy, mode="spec"), notes.append, None)
    assert notes == ["the draft model model.gguf is as large as the target model.gguf: it cannot save time"]


def test_json_says_null_threads_where_the_backend_does_not_report_them(files):
    """The fake backend's engines (a plugin's) have no llama.cpp threads: the key stays, null (a key that comes
    and goes breaks reply["threads"]), as usage.md says."""
    result = invoke("run", *files, "--json", "-n", "8", "--mode", "target", "Say hi.")
    assert result.exit_code == 0, result.output
    reply = json.loads(result.stdout)
    assert reply["threads"] is None and reply["text"] and reply["stats"]["generated_tokens"] > 0
    lines = invoke("run", *files, "--jsonl", "-n", "8", "--mode", "target", "Say hi.").stdout.splitlines()
    assert json.loads(lines[-1])["threads"] is None


def test_models_warns_of_a_present_file_it_cannot_read(isolated, monkeypatch):
    """A model file without read permission (another user's copy, mode 000) was listed as present, "yes", with no
    word, and `run` then failed on it: `models` warns of it now, as of a file of the wrong size."""
    models = a_file_here_and_a_missing_draft(isolated, pair="mine", draft="there", size=True)
    opened = Path.open

    def open_(path, *args, **kwargs):  # the tests run as root, whom chmod 000 does not stop
        if path.name == "here.gguf":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_)
    result = invoke("models", "--json")
    assert result.exit_code == 0, result.output
    row = next(row for row in json.loads(result.stdout)["pairs"] if row["model"] == "here")
    assert row["problem"] == f"cannot read {models / 'here.gguf'}: Permission denied", row
    assert f"warning: cannot read {models / 'here.gguf'}: Permission denied" in " ".join(result.stderr.split())


def test_models_warns_of_a_present_file_that_is_no_gguf(isolated):
    """A file that models.toml gives no sha256 for and that is no GGUF was listed as present with no word, where
    pull and run refuse it."""
    a_file_here_and_a_missing_draft(isolated, pair="mine", draft="there", size=False)
    result = invoke("models", "--json")
    assert result.exit_code == 0, result.output
    row = next(row for row in json.loads(result.stdout)["pairs"] if row["model"] == "here")
    assert row["present"] and "is not a valid GGUF file" in row["problem"], row
    assert "is not a valid GGUF file" in " ".join(result.stderr.split())


def test_pull_does_not_call_a_file_it_cannot_read_present(fake_models, isolated, monkeypatch):
    """`pull` said "already present" of a model file without read permission where it did not read it (no
    sha256 in models.toml, or one remembered from before the chmod), and `run` then failed on it."""
    models = fake_overlay(fake_models, isolated)
    opened = Path.open

    def open_(path, *args, **kwargs):  # the tests run as root, whom chmod 000 does not stop
        if path.name == fake_models[1].name:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_)
    pulled = invoke("pull", "fake")
    assert pulled.exit_code == 1 and pulled.stderr.count("already present") == 1, pulled.output
    assert f"error: cannot read {models / fake_models[1].name}: Permission denied" in " ".join(pulled.stderr.split())


def test_pull_names_a_present_file_that_is_no_gguf_where_models_toml_gives_no_sha256(fake_models, isolated):
    """An overlay entry without sha256 whose file in the models directory is not a GGUF (another file renamed):
    `run` failed on it with 'download it again (`specchat pull`)', and `pull` said "already present", in a loop."""
    models = fake_overlay(fake_models, isolated)
    (models / "other.gguf").write_text("#!/bin/sh\necho not a model\n")
    config = isolated / "config" / "models.toml"
    config.write_text(
        config.read_text() + '\n[models.other]\nrepo = "nobody/other-GGUF"\nfile = "other.gguf"\n'
        '[pairs.odd]\ntarget = "faket"\ndraft = "other"\n'
    )
    pulled = invoke("pull", "odd")
    said = " ".join(pulled.stderr.split())
    assert pulled.exit_code == 1 and pulled.stderr.count("already present") == 1, pulled.output
    assert "error: other.gguf is not a valid GGUF file" in said and "delete it and run `specchat pull odd`" in said
    assert invoke("pull", "fake").exit_code == 0  # the fake backend's files are no GGUF either: its own to check


def test_pull_refuses_an_overlay_pair_whose_draft_is_of_another_family(fake_models, isolated):
    """A user's pair of two families (another tokenizer) pulled gigabytes and said "already present" or
    "downloaded", exit 0; only the first `run` said the pair cannot work. pull checks it as run does, once
    both files are there (the tokenizers alone), and names the overlay's pair to fix."""
    models = fake_overlay(fake_models, isolated)
    other = json.loads(fake_models[1].read_text()) | {"vocab_type": 3}
    (models / fake_models[1].name).write_text(json.dumps(other))
    pulled = invoke("pull", "fake")
    lines = [line for line in pulled.stderr.splitlines() if line.strip()]
    assert pulled.exit_code == 1 and "Traceback" not in pulled.output, pulled.output
    assert [line for line in lines if "already present" not in line] == [lines[-1]], pulled.stderr  # both in place
    assert lines[-1].startswith("error: pair 'fake' is incompatible: vocabulary types differ"), lines[-1]
    assert "hint:" in lines[-1] and "[pairs.fake]" in lines[-1] and "--force-pair" in lines[-1], lines[-1]


@pytest.mark.parametrize("mode", ["spec", "target"])
def test_a_reply_cut_inside_a_character_ends_before_it(files, mode):
    """A reply cut by -n (max_tokens) in the middle of a character split over tokens ended in U+FFFD;
    the unfinished character is left out, as llama-cpp-python's own completions do. One byte a token in
    the fake: -n stops two bytes into the emoji."""
    cut = len(reply_to("").split("\n")[0].encode()) + 1 + 2
    result = invoke("run", *files, "--mode", mode, "-n", str(cut), "--json", "\U0001f600")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["stats"]["generated_tokens"] == cut
    assert summary["text"] == reply_to("\U0001f600").split("\U0001f600")[0]  # "...again:\n", no U+FFFD


def test_force_color_into_a_file_keeps_each_stats_and_note_line_one_line(fake_models, isolated):
    """Rich takes FORCE_COLOR (CI runners set it for colours) for a terminal: `--stats 2>stats.txt` was wrapped at
    the width there, splitting lines that scripts read whole. Colours yes, wrapping no: the stream is a file."""
    import re

    fake_overlay(fake_models, isolated)
    ran = runner.invoke(
        app,
        ["run", "-p", "fake", "--mode", "spec", "--stats", "-k", "9", "hi"],
        env={"FORCE_COLOR": "1", "COLUMNS": "30"},
    )
    lines = re.sub(r"\x1b\[[0-9;]*m", "", ran.stderr).splitlines()
    assert ran.exit_code == 0, ran.output
    assert any(len(line) > 30 and "tok/s" in line for line in lines), lines
    assert any(len(line) > 30 and line.startswith("k=9: accepted") for line in lines), lines


def test_force_color_into_a_pipe_keeps_the_live_formats_summary_one_line(fake_models, isolated):
    """`--format live` into a pipe with FORCE_COLOR: the summary line was wrapped at the width (4 lines at 30)."""
    import re

    fake_overlay(fake_models, isolated)
    ran = runner.invoke(
        app, ["run", "-p", "fake", "--mode", "spec", "-f", "live", "hi"], env={"FORCE_COLOR": "1", "COLUMNS": "30"}
    )
    lines = re.sub(r"\x1b\[[0-9;]*m", "", ran.stdout).splitlines()
    assert ran.exit_code == 0, ran.output
    assert any(len(line) > 30 and "tok/s" in line for line in lines), lines


def test_a_chat_note_naming_a_path_rich_cannot_wrap_is_left_to_the_terminal():
    """The chat's notes and errors (a /save to a path of the user's) went straight to Rich: a word starting with
    zero-width joiners made Rich 15's wrap raise IndexError on a narrow terminal, ending the chat."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from specchat.chatcommands import SlashCommands

    console = Console(file=io.StringIO(), width=14, force_terminal=True, color_system=None)
    SlashCommands._say(SimpleNamespace(console=console), f"saved to {JOINED}.json")
    assert "saved to" in console.file.getvalue()


def test_the_chats_system_prompt_shown_is_left_to_the_terminal_where_rich_cannot_wrap_it():
    """/system with no argument printed the user's system prompt straight to Rich: one with a word starting with
    zero-width joiners made Rich 15's wrap raise IndexError on a narrow terminal, ending the chat."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from specchat.chatcommands import SlashCommands

    commands = object.__new__(SlashCommands)
    commands.console = Console(file=io.StringIO(), width=14, force_terminal=True, color_system=None)
    commands.conversation = SimpleNamespace(system=JOINED)
    commands._cmd_system("")
    assert "axxxxxxxxxxxx" in commands.console.file.getvalue()


def test_pull_names_the_users_models_tables_when_they_replaced_a_packaged_pairs_files(tmp_path):
    """A user's [models.NAME] entries replacing a packaged pair's files with two families were told to fix
    '[pairs.qwen...]' in their file, a table they never wrote: the hint names their [models.*] tables."""
    from dataclasses import replace

    from specchat.cli.manage import _entry_to_fix
    from specchat.registry import load_registry

    pair = load_registry().pair(None)
    mine = tmp_path / "models.toml"
    replaced = replace(pair, draft=replace(pair.draft, overlay=mine))
    assert _entry_to_fix(replaced) == (
        f"[models.{pair.draft.name}] in {mine} replaced pair {pair.name}'s files: give it files of one family"
    )
    assert _entry_to_fix(replace(pair, overlay=mine)).startswith(f"give [pairs.{pair.name}] in {mine} a draft")


def test_a_negative_zero_is_recorded_as_zero(files):
    """`--temperature -0` (or --top-p, --min-p) was recorded as -0.0 in --json and the log, where the chat's /temp -0
    reads 0: the same greedy setting, written two ways."""
    payload = run_json(*files, "--json", "--temperature", "-0", "--min-p", "-0", "-n", "4", "Hello.")
    assert json.dumps(payload["settings"]["temperature"]) == "0.0" and json.dumps(payload["settings"]["min_p"]) == "0.0"


def test_serve_s_no_history_says_what_serve_drafts_from():
    """`serve --help` gave `--no-history` run's words ("from this conversation only"): a server has no conversation
    of its own; with the option it drafts from the request itself (docs/serve.md)."""
    import typer.main

    def help_of(command: str) -> str:
        params = typer.main.get_command(app).commands[command].params
        return next(param.help for param in params if "--no-history" in param.opts)

    assert "the request itself" in help_of("serve") and "conversation only" not in help_of("serve")
    assert "this conversation only" in help_of("run")


# -- --chat-template-kwargs --------------------------------------------------------------------------------

# A template that prints its variables above the conversation; the fake's reply {history} shows what it rendered.
SHOWS_KWARGS = "{% if enable_thinking is defined %}thinking={{ enable_thinking }} {{ deep.list[1] }}\n{% endif %}"
KWARGS = '{"enable_thinking": false, "deep": {"list": ["a", "b"]}}'


@pytest.fixture
def shows_kwargs(isolated):
    import fake_backend

    target, _draft = fake_backend.write_pair(
        isolated / "shows", template=SHOWS_KWARGS + fake_backend.TEMPLATE, reply="Seen: {history}"
    )
    return ["--target", str(target), "--mode", "target"]


def test_chat_template_kwargs_reach_the_template_every_turn_and_the_reply_settings(shows_kwargs):
    """llama-server's --chat-template-kwargs (Qwen3's '{"enable_thinking": false}') was named a flag specchat
    lacked; run's templates render with it now, one reply and each turn continued with -c, and --json and the
    log record it with the reply's other settings."""
    first = invoke("run", *shows_kwargs, "--chat-template-kwargs", KWARGS, "--json", "Name three colours.")
    assert first.exit_code == 0, first.output
    payload = json.loads(first.stdout)
    assert payload["text"].startswith("Seen: thinking=False b\nuser\nName three colours."), payload
    assert payload["settings"]["chat_template_kwargs"] == {"enable_thinking": False, "deep": {"list": ["a", "b"]}}
    second = invoke("run", *shows_kwargs, "--chat-template-kwargs", KWARGS, "-c", "And two more.")
    assert second.exit_code == 0, second.output
    assert second.stdout.startswith("Seen: thinking=False b\nuser\nName three colours.")
    assert second.stdout.count("thinking=") == 2  # the first reply's text quotes it once: rendered once, at the top
    plain = invoke("run", *shows_kwargs, "--json", "Hi")
    assert json.loads(plain.stdout)["text"].startswith("Seen: user\nHi")
    assert json.loads(plain.stdout)["settings"]["chat_template_kwargs"] == {}
    logged = json.loads(invoke("logs", "--json", "-n", "3").stdout)
    assert [row["settings"]["chat_template_kwargs"] for row in logged] == [
        {"enable_thinking": False, "deep": {"list": ["a", "b"]}}
    ] * 2 + [{}]


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("{enable_thinking: false}", "--chat-template-kwargs '{enable_thinking: false}' is not JSON"),
        ("", "is not JSON"),
        ('[{"enable_thinking": false}]', "--chat-template-kwargs is a JSON array, not an object"),
        ("false", "is a JSON boolean, not an object"),
        ('{"messages": []}', "--chat-template-kwargs may not set 'messages'"),
        ('{"a": NaN}', "is not JSON"),  # Python reads it; --json and the log wrote it out, which is no JSON
        ('{"a": -Infinity}', "is not JSON"),
    ],
)
@pytest.mark.parametrize("command", ["run", "serve"])
def test_chat_template_kwargs_that_are_no_json_object_are_a_usage_error(shows_kwargs, command, value, needle):
    result = invoke(command, *shows_kwargs, "--chat-template-kwargs", value, *(["hi"] if command == "run" else []))
    assert_one_line_error(result, 2, needle)
    assert '{"enable_thinking": false}' in result.stderr or "leave it out" in result.stderr  # the hint's example


def test_the_environment_variable_gives_chat_template_kwargs_and_the_flag_wins(shows_kwargs, monkeypatch):
    """llama-server reads its flag from the environment too; specchat had no variable, so a Qwen3 user typed the
    JSON on every run. SPECCHAT_CHAT_TEMPLATE_KWARGS is it for run, serve, bench and export; the flag wins; a bad
    value is a usage error naming the variable (no flag was typed); --no-template leaves a standing default out."""
    monkeypatch.setenv("SPECCHAT_CHAT_TEMPLATE_KWARGS", KWARGS)
    from_env = invoke("run", *shows_kwargs, "--json", "Hi")
    assert from_env.exit_code == 0, from_env.output
    assert json.loads(from_env.stdout)["text"].startswith("Seen: thinking=False b\nuser\nHi")
    flag = invoke("run", *shows_kwargs, "--chat-template-kwargs", "{}", "--json", "Hi")
    assert json.loads(flag.stdout)["settings"]["chat_template_kwargs"] == {}
    raw = invoke("run", *shows_kwargs, "--no-template", "--json", "Hi")
    assert raw.exit_code == 0 and json.loads(raw.stdout)["settings"]["chat_template_kwargs"] == {}, raw.output
    for command in ("run", "serve", "bench", "export"):
        monkeypatch.setenv("SPECCHAT_CHAT_TEMPLATE_KWARGS", "[1]")
        extra = {"run": ["hi"], "serve": [], "bench": [], "export": ["--to", "llama-server"]}[command]
        result = invoke(command, *shows_kwargs[:2], *extra)
        assert_one_line_error(result, 2, "SPECCHAT_CHAT_TEMPLATE_KWARGS is a JSON array, not an object")


def test_chat_template_kwargs_with_no_template_are_a_usage_error(shows_kwargs):
    """Nothing renders them: taken in silence, they looked used."""
    result = invoke("run", *shows_kwargs, "--no-template", "--chat-template-kwargs", "{}", "hi")
    assert_one_line_error(result, 2, "--chat-template-kwargs and --no-template disagree")
