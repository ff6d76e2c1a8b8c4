"""Other benchmarks' prompt files given to `bench --prompts`: each is named, with the jq line that converts it."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from specchat.benchsuite import load_prompts_file
from specchat.cli import app

runner = CliRunner()

# One record of each, as the benchmark's own file has it, and the turns its conversion must give.
RECORDS = {
    "humaneval": (
        {
            "task_id": "HumanEval/0",
            "prompt": "def add(a, b):\n    '''Add two numbers.'''\n",
            "canonical_solution": "    return a + b\n",
            "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
            "entry_point": "add",
        },
        'a {"prompt"} record',
        ("prompts", "HumanEval/0", ("def add(a, b):\n    '''Add two numbers.'''\n",)),
    ),
    "alpaca": (
        {"instruction": "Translate into French.", "input": "Where is the library?", "output": "Où est..."},
        "an Alpaca record",
        ("prompts", "1", ("Translate into French.\n\nWhere is the library?",)),
    ),
    "dolly": (  # databricks-dolly-15k: Alpaca's "input" is its "context", which the conversion dropped
        {
            "instruction": "When did Virgin Australia start operating?",
            "context": "Virgin Australia commenced services on 31 August 2000 as Virgin Blue.",
            "response": "31 August 2000",
            "category": "closed_qa",
        },
        "an Alpaca record",
        (
            "closed_qa",
            "1",
            (
                "When did Virgin Australia start operating?\n\nVirgin Australia commenced services on 31 August 2000 "
                "as Virgin Blue.",
            ),
        ),
    ),
    "lmsys": (  # LMSYS-Chat-1M and WildChat: its "turn" (a count) was taken for a misspelt "turns"
        {
            "conversation_id": "33f01939a744455c869cb234afca47f1",
            "model": "vicuna-13b",
            "conversation": [
                {"content": "How do I bake bread?", "role": "user"},
                {"content": "Mix flour...", "role": "assistant"},
                {"content": "Without yeast?", "role": "user"},
                {"content": "Soda bread.", "role": "assistant"},
            ],
            "turn": 2,
            "language": "English",
        },
        "an LMSYS-Chat-1M or WildChat record",
        ("prompts", "33f01939a744455c869cb234afca47f1", ("How do I bake bread?", "Without yeast?")),
    ),
    "sharegpt": (
        {
            "id": "QWJhYvA_0",
            "conversations": [
                {"from": "human", "value": "Summarize the plot of Hamlet."},
                {"from": "gpt", "value": "A prince..."},
                {"from": "human", "value": "Shorter."},
                {"from": "gpt", "value": "Revenge."},
            ],
        },
        "a ShareGPT record",
        ("prompts", "1", ("Summarize the plot of Hamlet.", "Shorter.")),
    ),
    "openai": (
        {
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Capital of France?"},
                {"role": "assistant", "content": "Paris."},
            ]
        },
        "an OpenAI chat record",
        ("prompts", "1", ("Capital of France?",)),
    ),
    "openai-parts": (  # OpenAI's newer form: a content of parts
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Fix this:"}, {"type": "text", "text": "x=1"}]},
                {"role": "assistant", "content": "x = 1"},
            ]
        },
        "an OpenAI chat record",
        ("prompts", "1", ("Fix this:\nx=1",)),
    ),
    "mt_bench_prompts": (  # HuggingFaceH4/mt_bench_prompts: MT-Bench with "turns" renamed "prompt"
        {"prompt": ["Write a poem.", "Make it rhyme."], "prompt_id": 3153, "category": "writing", "reference": []},
        'a {"prompt"} record',
        ("writing", "3153", ("Write a poem.", "Make it rhyme.")),
    ),
    "gsm8k": (
        {"question": "Natalia sold 48 clips in April and half as many in May. How many in all?", "answer": "72"},
        'a {"question"} record',
        ("prompts", "1", ("Natalia sold 48 clips in April and half as many in May. How many in all?",)),
    ),
}


def _file(tmp_path, name):
    path = tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps(RECORDS[name][0]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_another_benchmarks_record_is_named_with_its_conversion(tmp_path, name):
    """Such a record was '"turns" must be a list starting with a non-empty string', hint '"turns": ["..."]'
    (first 'missing "category"', hint 'add "category": "chat"'), which said neither what the file was nor how
    to make it one the bench reads."""
    path = _file(tmp_path, name)
    result = runner.invoke(app, ["bench", "--prompts", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    line = " ".join(result.stderr.split())
    assert f"line 1: {RECORDS[name][1]}" in line and "not Spec-Bench's" in line
    assert "convert the file: jq -c '" in line or "convert the file (its system messages left out): jq" in line
    assert f" {path} > {path.with_name(name + '-lines.jsonl')}" in line


def test_the_conversion_line_can_be_pasted_for_a_path_with_a_blank(tmp_path):
    """It wrote the file unquoted (`jq ... my prompts.jsonl`: two files) and into the current folder, not beside it."""
    folder = tmp_path / "my prompts"
    folder.mkdir()
    path = folder / "alpaca data.jsonl"
    path.write_text(json.dumps(RECORDS["alpaca"][0]) + "\n", encoding="utf-8")
    line = " ".join(runner.invoke(app, ["bench", "--prompts", str(path)]).stderr.split())
    words = shlex.split(line[line.index("jq -c") :])
    assert words[-3:] == [str(path), ">", str(folder / "alpaca data-lines.jsonl")], words


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
@pytest.mark.parametrize("name", sorted(RECORDS))
def test_the_conversion_gives_a_file_the_bench_reads(tmp_path, name):
    path = _file(tmp_path, name)
    line = " ".join(runner.invoke(app, ["bench", "--prompts", str(path)]).stderr.split())
    command, out = re.search(r"(jq -c '.*' \S+) > (\S+)$", line).groups()
    converted = subprocess.run(shlex.split(command), capture_output=True, text=True, check=True).stdout
    (tmp_path / out).write_text(converted, encoding="utf-8")
    (prompt,) = load_prompts_file(tmp_path / out)
    assert (prompt.category, prompt.id, prompt.turns) == RECORDS[name][2]


def test_from_stdin_the_conversion_is_a_pipe(tmp_path):
    record = json.dumps(RECORDS["gsm8k"][0]) + "\n"
    result = runner.invoke(app, ["bench", "--prompts", "-"], input=record)
    assert result.exit_code == 2, result.output
    assert "... | jq -c '{turns: [.question]}' | specchat bench --prompts -" in " ".join(result.stderr.split())


def test_a_spec_bench_record_with_a_prompt_too_is_read(tmp_path):
    """ "turns" decides: a Spec-Bench record that also keeps the prompt it came from is not another format."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"category": "c", "turns": ["a"], "prompt": "a", "messages": []}\n')
    assert [p.turns for p in load_prompts_file(path)] == [("a",)]


def test_arena_hard_turns_written_as_objects_are_read_as_their_content(tmp_path):
    """Arena-Hard's question.jsonl writes each turn as {"content": "..."}: that was '"turns" must be a list
    starting with a non-empty string', with a hint of the shape it already nearly had."""
    path = tmp_path / "question.jsonl"
    record = {"question_id": "a1", "category": "arena-hard-v0.1", "cluster": "c", "turns": [{"content": "Hi"}]}
    path.write_text(json.dumps(record) + "\n")
    [prompt] = load_prompts_file(path)
    assert (prompt.category, prompt.turns) == ("arena-hard-v0.1", ("Hi",))


def test_messages_as_turns_are_not_read_as_user_turns(tmp_path):
    """A turn written as a user message is its text; a system or an assistant message among the turns is refused,
    not benchmarked as if the user had written it."""
    path = tmp_path / "q.jsonl"
    user = {"role": "user", "content": "Hi"}
    path.write_text(json.dumps({"turns": [user, {"content": "And?"}]}) + "\n")
    assert [p.turns for p in load_prompts_file(path)] == [("Hi", "And?")]
    path.write_text(json.dumps({"turns": [user, {"content": "Hi", "extra": 1}]}) + "\n")
    result = runner.invoke(app, ["bench", "--prompts", str(path)])
    assert result.exit_code == 2 and '"turns" item 2 is not a non-empty string' in result.stderr, result.output


@pytest.mark.parametrize("where", [0, 1])
@pytest.mark.parametrize(
    ("role", "why"),
    [
        ("system", "sends no system prompt"),
        ("developer", "sends no system prompt"),
        ("assistant", "writes the replies"),
        ("tool", "calls no tools"),
    ],
)
def test_a_system_or_assistant_message_among_the_turns_is_named_as_such(tmp_path, where, role, why):
    """A system message first among the turns was '"turns" must be a list starting with a non-empty string', though
    a user message there is read: the refusal said nothing of what was wrong (later: 'not a non-empty string')."""
    path = tmp_path / "q.jsonl"
    turns = ["Hi", "And?"]
    turns[where] = {"role": role, "content": "Be terse."}
    path.write_text(json.dumps({"turns": turns}) + "\n")
    result = runner.invoke(app, ["bench", "--prompts", str(path)])
    line = " ".join(result.stderr.split())
    assert (
        result.exit_code == 2
        and f'"turns" item {where + 1} is {"an" if role[0] == "a" else "a"} {role} message' in line
    )
    assert why in line, line


def test_a_turn_of_text_parts_is_their_text_and_one_with_an_image_is_refused(tmp_path):
    """A user message whose content is a list of parts (OpenAI's newer form) was refused as a turn that is no
    text, and the conversion line for a file of "messages" made such turns: no way in for such a file."""
    path = tmp_path / "q.jsonl"
    parts = [{"type": "text", "text": "Fix this:"}, {"type": "text", "text": "x=1"}]
    path.write_text(json.dumps({"turns": [{"role": "user", "content": parts}, {"content": parts[:1]}]}) + "\n")
    assert [p.turns for p in load_prompts_file(path)] == [("Fix this:\nx=1", "Fix this:")]
    image = [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}, *parts]
    path.write_text(json.dumps({"turns": ["Hi", {"role": "user", "content": image}]}) + "\n")
    result = runner.invoke(app, ["bench", "--prompts", str(path)])
    line = " ".join(result.stderr.split())
    assert result.exit_code == 2 and '"turns" item 2 has a "image_url" content part; the bench sends text' in line


@pytest.mark.parametrize(
    ("key", "meant"), [("Category", "category"), ("turn", "turns"), ("questionId", "question_id"), ("TURNS", "turns")]
)
def test_a_key_spelled_otherwise_is_named_with_its_spelling(tmp_path, key, meant):
    """Read as absent, a "Category" put every prompt into one row called "prompts" without a word."""
    record = {"category": "code", "turns": ["Hi"], "question_id": 1}
    record[key] = record.pop(meant)
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(record) + "\n")
    result = runner.invoke(app, ["bench", "--prompts", str(path)])
    assert result.exit_code == 2, result.output
    assert f'"{key}" is not a key' in result.stderr and f'spell it "{meant}"' in result.stderr


def test_a_key_of_its_own_beside_spec_bench_s_is_left_alone(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"category": "c", "turns": ["a"], "question": "a", "Turns": 2}) + "\n")
    assert [p.turns for p in load_prompts_file(path)] == [("a",)]


@pytest.mark.parametrize("given", ["-", "prompts.txt"])
def test_plain_text_is_converted_from_where_it_was_read(tmp_path, monkeypatch, given):
    """The messages name stdin as "stdin"; the conversion reads it as `-` (a pipe) and a file by its path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts.txt").write_text("Name three colours.\n")
    result = runner.invoke(app, ["bench", "--prompts", given], input="Name three colours.\n")
    assert result.exit_code == 2, result.output
    line = " ".join(result.stderr.split())
    jq = """jq -R -c 'select(length > 0) | {category: "chat", turns: [.]}'"""
    wanted = f"... | {jq} | specchat bench --prompts -" if given == "-" else f"{jq} prompts.txt > prompts.jsonl"
    assert f"becomes that with {wanted}" in line, line


def test_a_file_called_stdin_is_named_as_a_file_not_as_the_pipe(tmp_path, monkeypatch):
    """It was shown as "stdin", and its conversion line was a pipe into `--prompts -` rather than jq on it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stdin").write_text(json.dumps(RECORDS["gsm8k"][0]) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["bench", "--prompts", "stdin"])
    line = " ".join(result.stderr.split())
    assert result.exit_code == 2 and "./stdin, line 1" in line, result.output
    assert "jq -c '{turns: [.question]}' stdin > stdin.jsonl" in line


def test_a_file_of_one_object_holding_the_records_says_where_they_are(tmp_path):
    """`{"questions": [{"category": ..., "turns": [...]}, ...]}` (records wrapped in one object, as JSON exports
    write them) was '"turns" must be a list starting with a non-empty string': of a file with good turns."""
    path = tmp_path / "wrapped.json"
    records = [{"category": "chat", "turns": ["Hi"]}, {"category": "code", "turns": ["def f"]}]
    path.write_text(json.dumps({"version": 2, "questions": records}) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["bench", "--prompts", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    line = " ".join(result.stderr.split())
    assert f'{path}, line 1: one object holding the records in "questions", not one record a line' in line
    assert f"jq -c '.questions[]' {path} > {tmp_path / 'wrapped.jsonl'}" in line
    if shutil.which("jq") is not None:
        command, out = re.search(r"(jq -c '.*' \S+) > (\S+)$", line).groups()
        converted = subprocess.run(shlex.split(command), capture_output=True, text=True, check=True).stdout
        (tmp_path / out).write_text(converted, encoding="utf-8")
        assert [p.turns for p in load_prompts_file(tmp_path / out)] == [("Hi",), ("def f",)]


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
@pytest.mark.parametrize(
    "text",
    [
        '["Write a haiku.", "Name colours."]',
        '"Write a haiku."\n"Name colours."',
        '["Write a haiku.", {"category": "chat", "turns": ["Name colours."]}]',  # a record among them: kept
    ],
)
def test_a_list_of_prompt_strings_is_led_to_a_file_the_bench_reads(tmp_path, text):
    """A JSON array of prompts was told `jq -c '.[]'`, which makes a line of each string, refused in turn as
    "expected a JSON object" with no way on: each way out now makes {"turns": [...]} records."""
    path = tmp_path / "mine.json"
    path.write_text(text, encoding="utf-8")
    line = " ".join(runner.invoke(app, ["bench", "--prompts", str(path)]).stderr.split())
    command, out = re.search(r"(jq -c '.*' \S+) > (\S+)$", line).groups()
    converted = subprocess.run(shlex.split(command), capture_output=True, text=True, check=True).stdout
    (tmp_path / out).write_text(converted, encoding="utf-8")
    assert [p.turns for p in load_prompts_file(tmp_path / out)] == [("Write a haiku.",), ("Name colours.",)]


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_a_history_array_of_strings_is_led_to_a_file_the_bench_reads(tmp_path):
    """--history with a JSON array of strings was told `jq -c '.[]'`, whose lines of strings were refused in turn
    (expected an object with "messages"): the way out makes {"turns": [...]} lines, which a history reads."""
    from specchat import benchhistory

    path = tmp_path / "past.json"
    path.write_text('["Write a haiku.", "Name colours."]', encoding="utf-8")
    result = runner.invoke(app, ["bench", "--modes", "auto", "--history", str(path)])
    line = " ".join(result.stderr.split())
    command, out = re.search(r"(jq -c '.*' \S+) > (\S+)$", line).groups()
    converted = subprocess.run(shlex.split(command), capture_output=True, text=True, check=True).stdout
    (tmp_path / out).write_text(converted, encoding="utf-8")
    assert benchhistory.load(str(tmp_path / out), ["auto"]).texts == ["Write a haiku.", "Name colours."]


def test_the_tables_ttft_legend_says_what_the_json_and_the_docs_say_it_counts():
    """The legend under bench's table said TTFT was 'the same prefill with or without drafting', where auto
    has a draft model read a short prompt before the first token on a GPU and counts it there (the JSON's
    definition, docs/how-it-works.md's table)."""
    from specchat.benchreport import COLUMNS_LEGEND
    from specchat.benchresult import DEFINITIONS

    assert "the target's prefill, which gives it" in DEFINITIONS["ttft_s"]
    ttft = COLUMNS_LEGEND[COLUMNS_LEGEND.index("TTFT = ") :]
    assert "the target's prefill, which gives it" in ttft and "auto" in ttft, ttft
    assert "same prefill with or without" not in ttft


def test_a_record_of_no_known_format_says_what_it_lacks_and_what_is_read(tmp_path):
    """An MBPP record ({"text", "code", "test_list"}) or an OpenAI batch request was '"turns" must be a list
    starting with a non-empty string', hint '"turns": ["..."]': of a record with no "turns" at all, and with no
    word of the formats the bench reads or names."""
    path = tmp_path / "mbpp.jsonl"
    record = {"task_id": 11, "text": "Write a function to remove a character.", "code": "...", "test_list": []}
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["bench", "--prompts", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert 'line 1: no "turns" (its keys: task_id, text, code, test_list)' in line
    assert 'Spec-Bench\'s {"category", "turns"}' in line and "ShareGPT" in line and "Alpaca" in line
