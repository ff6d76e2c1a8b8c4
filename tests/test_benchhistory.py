"""`specchat bench --history none|FILE` (fake backend): the suffix variant drafts from the history the run
chose, the same for every repetition; the temporary index is gone afterwards; the user's log and history
are neither read nor written; bad files are one-line usage errors."""

from __future__ import annotations

import json
import tempfile

import pytest
from fake_backend import REPLY
from typer.testing import CliRunner

from specchat import benchhistory
from specchat.cli import app
from specchat.errors import UsageError

runner = CliRunner()
PROMPT = "List the planets of the solar system, in order from the sun."
ANSWER = REPLY.format(prompt=PROMPT)  # what the fake target answers to PROMPT


@pytest.fixture
def bench(fake_models, seed_tuning, tmp_path, monkeypatch):
    """bench(*args): `specchat bench` on PROMPT; the JSON report, or the result when it failed. Temporary
    folders go to tmp_path/tmp, so a test can see that none is left."""
    target, draft = fake_models
    seed_tuning(target, draft)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"question_id": "p", "category": "chat", "turns": [PROMPT]}) + "\n")

    def run(*args):
        out = tmp_path / "bench.json"
        out.unlink(missing_ok=True)
        files = ["--target", str(target), "--draft", str(draft), "--prompts", str(prompts)]
        result = runner.invoke(app, ["bench", *files, "-n", "128", "--ks", "2", "-f", "json", "-o", str(out), *args])
        return json.loads(out.read_text()) if result.exit_code == 0 else result

    run.scratch = scratch
    return run


def past_file(tmp_path, *records) -> str:
    path = tmp_path / "past.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


def suffix_rounds(data) -> list[int]:
    return [s["rounds"] for s in data["samples"] if s["variant"] == "suffix k=8"]


def snapshot(folder) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")} if folder.exists() else {}


def test_a_history_with_the_answer_saves_rounds_and_every_repetition_sees_the_same(bench, tmp_path):
    asked_before = {"messages": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": ANSWER}]}
    alone = bench("--modes", "ngram,suffix", "-r", "3")
    helped = bench("--modes", "ngram,suffix", "-r", "3", "--history", past_file(tmp_path, asked_before))
    for data in (alone, helped):
        assert data["lossless"]["MISMATCH"] == 0 and data["lossless"]["near-tie"] == 0
        # No leakage: a repetition does not draft from an earlier repetition's reply.
        assert len(set(suffix_rounds(data))) == 1 and len(suffix_rounds(data)) == 3
    assert suffix_rounds(helped)[0] < suffix_rounds(alone)[0] / 2
    ngram = [[s["rounds"] for s in data["samples"] if s["mode"] == "ngram"] for data in (alone, helped)]
    assert ngram[0] == ngram[1]  # prompt lookup never sees the history
    assert alone["meta"]["settings"]["history"] == "none"
    recorded = helped["meta"]["settings"]["history"]
    assert recorded["path"].endswith("past.jsonl") and recorded["messages"] == 2
    assert recorded["tokens"] == len((PROMPT + ANSWER).encode())  # the fake tokenizer: one token a byte
    assert list(bench.scratch.iterdir()) == []  # the temporary index is gone


def test_the_users_log_and_history_are_neither_read_nor_written(bench, fake_models, private_log):
    target, _draft = fake_models
    for _ in range(2):  # the user asked this before, with --mode suffix: the log and history index hold it
        logged = runner.invoke(app, ["run", "--target", str(target), "--mode", "suffix", PROMPT])
        assert logged.exit_code == 0, logged.output
    assert (private_log / "history").is_dir()
    before = snapshot(private_log)
    data = bench("--modes", "suffix", "-r", "2")
    assert snapshot(private_log) == before
    first = runner.invoke(app, ["run", "--target", str(target), "--mode", "suffix", "--no-history", "--json", PROMPT])
    assert suffix_rounds(data) == [json.loads(first.stdout)["stats"]["rounds"]] * 2  # as with no history at all


def test_no_data_dir_is_created(bench, private_log):
    data = bench("--modes", "suffix", "-r", "1")
    assert suffix_rounds(data) and not private_log.exists()


def test_default_modes_leave_suffix_out(bench):
    data = bench("-r", "1", "-n", "8")
    assert {s["variant"] for s in data["samples"]} == {"target", "k=2", "ngram k=8", "auto"}
    assert data["meta"]["settings"]["history"] == "none"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("", "has no user or assistant messages"),
        ('{"messages": [{"role": "system", "content": "be brief"}]}\n', "has no user or assistant messages"),
        ("{not json}\n", "line 1: not valid JSON"),
        ('{"messages": []}\n\n[1]\n', 'line 3: expected an object with "messages"'),
        ('{"messages": [{"role": "user"}]}\n', '"messages" item 1 is not'),
        ('{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}\n', '"messages" item 1 is not'),
        ('{"turns": ["a", 2]}\n', '"turns" must be a list of strings'),
        # a role misspelt was skipped as a system message is: the history lost it without a word
        (
            '{"messages": [{"role": "user", "content": "a"}]}\n{"messages": [{"role": "usr", "content": "b"}]}\n',
            "line 2: \"messages\" item 1 has the role 'usr'",
        ),
    ],
)
def test_bad_history_file(tmp_path, content, needle):
    path = tmp_path / "past.jsonl"
    path.write_text(content)
    result = runner.invoke(app, ["bench", "--modes", "suffix", "--history", str(path)])
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and "Traceback" not in result.output


def test_missing_history_file_and_history_without_suffix(tmp_path):
    result = runner.invoke(app, ["bench", "--modes", "suffix", "--history", str(tmp_path / "absent.jsonl")])
    assert result.exit_code == 2 and "history file not found" in result.stderr
    path = tmp_path / "past.jsonl"
    path.write_text('{"turns": ["hello"]}\n')
    result = runner.invoke(app, ["bench", "--modes", "spec,ngram", "--history", str(path)])
    assert result.exit_code == 2 and "--modes has neither" in result.stderr


def test_none_is_no_file_and_a_file_needs_the_suffix_or_auto_variant(tmp_path):
    assert benchhistory.load("none", ["suffix"]) is None
    with pytest.raises(UsageError):
        benchhistory.load("none.jsonl", ["ngram"])
    assert benchhistory.load(past_file(tmp_path, {"turns": ["hello"]}), ["auto"]).texts == ["hello"]


def test_none_in_capitals_is_none_and_a_file_of_that_name_is_dot_slash(tmp_path, monkeypatch):
    """`--history NONE` was "history file not found: NONE", where --suite TINY and -f CSV are taken in any case;
    whether a file of that name is there does not change what the word means (./None reads it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "None").write_text('{"turns": ["hello"]}\n', encoding="utf-8")
    assert benchhistory.load("NONE", ["auto"]) is None and benchhistory.load(" None", ["suffix"]) is None
    assert benchhistory.load("./None", ["auto"]).texts == ["hello"]


def test_auto_drafts_from_the_history_only_when_given_one(bench, tmp_path):
    """auto gets the suffix arm over --history FILE (as run over the log), none with --history none."""
    asked_before = {"messages": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": ANSWER}]}
    alone = bench("--modes", "auto", "-r", "2")
    helped = bench("--modes", "auto", "-r", "2", "--history", past_file(tmp_path, asked_before))
    by_source = [[s["rounds_by_source"] for s in data["samples"] if s["mode"] == "auto"] for data in (alone, helped)]
    assert all("suffix" not in rounds for rounds in by_source[0])
    assert all(rounds.get("suffix", 0) > 0 for rounds in by_source[1])
    assert helped["lossless"]["MISMATCH"] == 0 and helped["meta"]["settings"]["history"]["messages"] == 2


def test_spec_bench_turns_are_user_messages(tmp_path):
    path = past_file(
        tmp_path,
        {"category": "chat", "turns": ["first", "second"]},
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]},
    )
    assert benchhistory.load(path, ["suffix"]).texts == ["first", "second", "u"]


def test_openai_chat_format_messages(tmp_path):
    """Exported OpenAI-format chats: an assistant turn that only calls tools has "content": null, and a
    message's content may be a list of parts; the text parts are its text, one per line as the server reads
    them, the rest is skipped."""
    parts = [
        {"type": "text", "text": "look at"},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "this"},
    ]
    path = past_file(
        tmp_path,
        {
            "messages": [
                {"role": "user", "content": parts},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function"}]},
                {"role": "tool", "content": "42", "tool_call_id": "1"},
                {"role": "assistant", "content": "It is 42."},
            ]
        },
    )
    assert benchhistory.load(path, ["suffix"]).texts == ["look at\nthis", "It is 42."]


def test_the_history_notice_counts_one_message_as_one(fake_models, seed_tuning, tmp_path):
    target, draft = fake_models
    seed_tuning(target, draft)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"category": "chat", "turns": [PROMPT]}) + "\n")
    past = past_file(tmp_path, {"messages": [{"role": "user", "content": PROMPT}]})
    files = ["--target", str(target), "--draft", str(draft), "--prompts", str(prompts), "--history", past]
    result = runner.invoke(app, ["bench", *files, "-n", "8", "--modes", "suffix", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert f"suffix drafts from {past} too: 1 message, " in result.stderr
    past = past_file(tmp_path, {"messages": [{"role": "user", "content": "a"}]})  # one byte: one token here
    result = runner.invoke(app, ["bench", *files[:-1], past, "-n", "8", "--modes", "suffix", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert f"suffix drafts from {past} too: 1 message, 1 token\n" in result.stderr  # was "1 tokens"


@pytest.mark.parametrize("option", ["--history", "--prompts"])
def test_the_conversation_log_given_as_a_file_says_how_to_make_one_of_it(private_log, option):
    """`--history ~/.local/share/specchat/logs.db`, the obvious history, said 'is not UTF-8 (line 1, byte 109)
    hint: save it as UTF-8'. It names the SQLite file and the pipe that makes a JSONL file of the log."""
    import sqlite3
    from contextlib import closing

    log = private_log / "logs.db"
    log.parent.mkdir(parents=True)
    with closing(sqlite3.connect(log)) as conn:
        conn.execute("CREATE TABLE t (x)")
    result = runner.invoke(app, ["bench", "--modes", "suffix", option, str(log)])
    assert result.exit_code == 2, result.output
    assert f"{log} is a SQLite database (the conversation log?), not JSONL" in result.stderr
    assert "specchat logs --json -n 1000 | jq -c" in result.stderr and "UTF-8" not in result.stderr


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_history_is_named_not_the_current_directory(value):
    """`--history "$FILE"` with FILE unset: 'history file . is a directory'; blanks were 'history file not found:'
    and a run of spaces no one could see."""
    result = runner.invoke(app, ["bench", "--modes", "suffix", "--history", value])
    assert result.exit_code == 2 and "--history is empty" in result.stderr and "directory" not in result.stderr
