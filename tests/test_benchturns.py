"""`specchat bench` on multi-turn records (fake backend): a sample per turn, one history written by the
target alone and shared by every variant, --turns first as before, and malformed turns refused."""

from __future__ import annotations

import json
import re

import fake_backend
import pytest
from typer.testing import CliRunner

from specchat.benchsuite import load_suite, single_turn
from specchat.cli import app

runner = CliRunner()
FIRST, SECOND = "Write a function that adds two numbers.", "Now add type hints and return it whole."
RECORDS = [
    {"question_id": "rev", "category": "revision", "turns": [FIRST, SECOND]},
    {"question_id": "one", "category": "chat", "turns": ["Name three colours."]},
]


@pytest.fixture
def bench(fake_models, seed_tuning, tmp_path):
    """bench(*args, records=RECORDS): `specchat bench` on a prompts file; the JSON report or the result."""
    target, draft = fake_models
    seed_tuning(target, draft)

    def run(*args, records=RECORDS):
        prompts, out = tmp_path / "prompts.jsonl", tmp_path / "bench.json"
        prompts.write_text("".join(json.dumps(r) + "\n" for r in records))
        files = ["--target", str(target), "--draft", str(draft)]
        result = runner.invoke(
            app, ["bench", *files, "--prompts", str(prompts), "-n", "8", "-f", "json", "-o", str(out), *args]
        )
        return json.loads(out.read_text()) if result.exit_code == 0 and out.exists() else result  # else: -o FILE

    return run


def test_every_turn_is_a_sample_with_its_turn(bench):
    data = bench("-r", "2", "--ks", "2", "--modes", "spec,auto")
    samples = data["samples"]
    turns = sorted((s["prompt_id"], s["turn"]) for s in samples if s["variant"] == "target")
    assert turns == [("one", 1), ("one", 1), ("rev", 1), ("rev", 1), ("rev", 2), ("rev", 2)]
    assert len(samples) == 3 * 2 * 3  # (turns) x reps x (target, k=2, auto)
    rows = {(r["category"], r["turn"], r["variant"]): r for r in data["summary"]}
    assert set(rows) == {
        (c, t, v)
        for c, t in (("chat", None), ("revision", 1), ("revision", 2), ("all", None))
        for v in ("target", "k=2", "auto")
    }
    assert rows[("revision", 2, "k=2")]["n"] == 2 and rows[("all", None, "k=2")]["n"] == 6
    assert data["lossless"]["MISMATCH"] == 0 and data["lossless"]["checked"] == 3 * 2 * 2
    assert {d["turn"] for d in data["lossless"]["details"]} <= {1, 2}
    assert data["meta"]["settings"]["turns"] == "all"


def test_later_turns_see_the_targets_reply_the_same_for_every_variant(bench, monkeypatch):
    from specchat import bench as bench_module
    from specchat import benchturns

    prompts, histories = {}, []
    real_generate, real_reply = bench_module._generate, benchturns._reply

    def generate(pipeline, prompt, params, variant, max_tokens):
        prompts.setdefault(variant.name, []).append(tuple(prompt))
        return real_generate(pipeline, prompt, params, variant, max_tokens)

    def reply(*args):
        histories.append(real_reply(*args))
        return histories[-1]

    monkeypatch.setattr(bench_module, "_generate", generate)
    monkeypatch.setattr(benchturns, "_reply", reply)
    bench("-r", "2", "--ks", "2", "--modes", "spec,ngram,auto", "-n", "400")
    assert histories == [fake_backend.REPLY.format(prompt=FIRST)]  # written once, for all variants and reps
    seen = {name: set(ids) for name, ids in prompts.items()}
    assert len({frozenset(ids) for ids in seen.values()}) == 1  # every variant got the same prompts
    texts = [bytes(t - fake_backend.OFFSET for t in ids if t >= fake_backend.OFFSET).decode() for ids in seen["auto"]]
    second = [text for text in texts if SECOND in text]
    assert len(second) == 1 and f"assistant\n{histories[0]}" in second[0] and FIRST in second[0]


def test_earlier_replies_are_whole_however_short_the_measured_ones(bench, monkeypatch):
    """A revision revises the whole earlier reply (as in a chat with `run`'s defaults), not one cut at -n;
    --earlier-tokens bounds it, and 0 means -n as before."""
    from specchat import benchturns

    budgets = []
    real_reply = benchturns._reply

    def reply(pipeline, ids, params, max_tokens):
        budgets.append(max_tokens)
        return real_reply(pipeline, ids, params, max_tokens)

    monkeypatch.setattr(benchturns, "_reply", reply)
    data = bench("--ks", "2", "--modes", "spec", "-r", "1")  # -n 8
    assert budgets == [512] and data["meta"]["settings"]["earlier_tokens"] == 512
    assert max(s["generated"] for s in data["samples"]) <= 8
    bench("--ks", "2", "--modes", "spec", "-r", "1", "--earlier-tokens", "3")
    bench("--ks", "2", "--modes", "spec", "-r", "1", "--earlier-tokens", "0")
    assert budgets == [512, 3, 8]


def test_turns_first_measures_first_turns_only(bench):
    data = bench("--ks", "2", "--modes", "spec", "--turns", "first")
    assert {(s["prompt_id"], s["turn"]) for s in data["samples"]} == {("rev", 1), ("one", 1)}
    assert {r["turn"] for r in data["summary"]} == {None}
    assert {r["category"] for r in data["summary"]} == {"revision", "chat", "all"}


def test_turn_rows_in_the_text_reports(bench, tmp_path):
    result = runner.invoke(app, ["bench", "--help"])
    assert "--turns" in result.stdout
    data = bench("--ks", "1", "--modes", "spec")
    assert data["summary"][0]["turn"] is None  # "chat" sorts first and has one turn
    from specchat.benchreport import render
    from specchat.benchresult import BenchResult, Sample

    result = BenchResult(samples=[Sample(**sample) for sample in data["samples"]])
    md = re.sub(" {2,}", " ", render(result, "md"))  # the columns' padding squeezed
    assert "| revision turn 1 | k=1 |" in md and "| revision turn 2 | k=1 |" in md and "| chat | k=1 |" in md
    assert "turn" in render(result, "csv").splitlines()[0].split(",")


@pytest.mark.parametrize(
    ("turns", "needle"),
    [
        (["hi", 3], 'line 1: "turns" item 2 is not a non-empty string'),
        (["hi", "  "], 'line 1: "turns" item 2 is not a non-empty string'),
        (["hi", "again", ""], 'line 1: "turns" item 3 is not a non-empty string'),
        ([None, "hi"], 'line 1: "turns" must be a list starting with a non-empty string'),
    ],
)
def test_malformed_turns_are_one_line_errors(bench, turns, needle):
    result = bench(records=[{"category": "chat", "turns": turns}])
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and "Traceback" not in result.output


def test_unknown_turns_option(bench):
    result = bench("--turns", "last")
    assert result.exit_code == 2 and "unknown --turns 'last'" in result.stderr


LONG = "x" * 150  # with the fake's reply (which quotes it) a second turn of two takes over 400 tokens


def test_a_later_turn_longer_than_the_context_is_skipped_and_said_once(bench, tmp_path):
    """A turn whose conversation outgrows --ctx stopped the whole bench before anything was measured: the
    turns that fit are measured, the rest of that record is skipped, said once per record in the report
    (and on stderr where the report is not the table)."""
    records = [{"question_id": "q", "category": "c", "turns": [LONG, LONG, "and again"]}, RECORDS[1]]
    data = bench("--ctx", "400", "-n", "300", "--modes", "ngram", "-r", "1", records=records)
    assert isinstance(data, dict), data.output
    assert {(s["prompt_id"], s["turn"]) for s in data["samples"]} == {("q", 1), ("one", 1)}
    [skipped] = data["skipped"]
    assert skipped["prompt_id"] == "q" and skipped["category"] == "c" and skipped["turns"] == [2, 3]
    assert skipped["tokens"] >= 400 and skipped["ctx"] == 400


def test_skipped_turns_in_every_report(bench, tmp_path, fake_models):
    files = ["--target", str(fake_models[0]), "--draft", str(fake_models[1])]
    records = [{"question_id": "q", "category": "c", "turns": [LONG, LONG]}, RECORDS[1]]
    args = ("--ctx", "400", "-n", "300", "--modes", "ngram", "-r", "1")
    result = bench(*args, "-f", "table", "-o", str(tmp_path / "bench.md"), records=records)
    assert result.exit_code == 0, result.output
    line = "skipped prompt #q, turn 2: the conversation so far takes"
    assert result.stdout.count(line) == 1 and line not in result.stderr  # the table says it; once
    assert "--earlier-tokens" in result.stdout
    assert (tmp_path / "bench.md").read_text().count(line) == 1
    result = bench(*args, "-f", "jsonl", "-o", str(tmp_path / "bench.jsonl"), records=records)
    assert result.exit_code == 0 and result.stderr.count(line) == 1  # the file says it, and so does stderr
    summary = json.loads((tmp_path / "bench.jsonl").read_text().splitlines()[-1])
    assert summary["type"] == "summary" and [s["turns"] for s in summary["skipped"]] == [[2]]
    result = runner.invoke(app, ["bench", *files, "--prompts", str(tmp_path / "prompts.jsonl"), *args, "-f", "md"])
    assert result.exit_code == 0 and (result.stdout + result.stderr).count(line) == 1  # Markdown on stdout says it


def test_a_first_turn_longer_than_the_context_is_skipped(bench):
    records = [{"question_id": "q", "category": "c", "turns": ["x " * 600, "more"]}, RECORDS[1]]
    data = bench("--ctx", "400", "--modes", "ngram", "-r", "1", records=records)
    assert isinstance(data, dict), data.output
    assert {(s["prompt_id"], s["turn"]) for s in data["samples"]} == {("one", 1)}
    assert [(s["prompt_id"], s["turns"]) for s in data["skipped"]] == [("q", [1, 2])]
    from specchat.benchturns import Skipped

    assert Skipped(**data["skipped"][0]).text().startswith("skipped prompt #q, turns 1-2: the prompt takes 1")
    assert data["cost_model"] is not None  # measured after a prompt that fits


def test_a_bench_of_nothing_that_fits_stops_before_the_cost_model(bench):
    records = [{"question_id": "q", "category": "c", "turns": ["x " * 600]}, {"category": "d", "turns": ["y " * 400]}]
    result = bench("--ctx", "400", records=records)
    assert result.exit_code == 1 and "no bench prompt fits the context" in result.stderr
    assert "measuring the cost model" not in result.stderr and "Traceback" not in result.output
    # A first turn has no earlier replies: neither --earlier-tokens nor --turns first would help it.
    assert "shorten the prompt" in result.stderr and "--earlier-tokens" not in result.stderr


def test_the_built_in_revision_records():
    revision = load_suite("revision")
    assert len(revision) == 3 and all(len(p.turns) == 2 and p.text == p.turns[0] for p in revision)
    assert len(load_suite("default")) == 20
    quick = load_suite("quick")
    assert [p.category for p in quick].count("revision") == 1
    assert all(len(p.turns) == 1 for p in single_turn(quick)) and len(single_turn(quick)) == 5  # what tune runs


def test_a_sampled_history_follows_the_seed(bench, monkeypatch):
    """With --temperature the history is sampled once with the run's seed: the same seed, the same
    conversation; every variant still gets it."""
    from specchat import benchturns

    histories = []
    real_reply = benchturns._reply
    monkeypatch.setattr(benchturns, "_reply", lambda *args: histories.append(real_reply(*args)) or histories[-1])
    for seed in (3, 3):
        data = bench("--ks", "2", "--modes", "spec", "--temperature", "0.7", "--seed", str(seed), "-n", "24")
        assert {(s["prompt_id"], s["turn"]) for s in data["samples"]} == {("rev", 1), ("rev", 2), ("one", 1)}
    assert len(histories) == 2 and histories[0] == histories[1] and histories[0]


def test_a_random_bench_seed_is_recorded_and_repeats_the_history(bench, monkeypatch):
    """--seed -1 was recorded as -1 in the report, so a sampled bench could not be repeated: one seed is
    drawn for the run and recorded; the same history comes back with --seed set to it."""
    from specchat import benchturns

    histories = []
    real_reply = benchturns._reply
    monkeypatch.setattr(benchturns, "_reply", lambda *args: histories.append(real_reply(*args)) or histories[-1])
    common = ("--ks", "2", "--modes", "spec", "--temperature", "1.5", "-n", "24")
    drawn = bench(*common, "--seed", "-1")["meta"]["settings"]["seed"]
    assert isinstance(drawn, int) and drawn >= 0
    assert bench(*common, "--seed", str(drawn))["meta"]["settings"]["seed"] == drawn
    assert len(histories) == 2 and histories[0] == histories[1] and histories[0]


def test_a_bench_stopped_before_its_first_sample_still_names_what_it_skipped(capsys):
    """Ctrl-C before the first sample: 'nothing was measured' alone, the skipped records unsaid."""
    from specchat import benchreport
    from specchat.benchresult import BenchResult
    from specchat.benchturns import Skipped

    result = BenchResult(skipped=[Skipped("q7", "code", [2], 300, 256)])
    benchreport.write(result, "table", None, None, [1])
    err = capsys.readouterr().err
    assert "skipped prompt #q7, turn 2" in err and "nothing was measured" in err


def test_replies_the_context_cut_short_are_said(bench, tmp_path):
    """A reply that filled the context was measured with fewer tokens than -n asked, and nothing said so."""
    records = [{"question_id": "q", "category": "c", "turns": ["x " * 180]}, RECORDS[1]]
    data = bench("--ctx", "400", "-n", "300", "--modes", "ngram", "-r", "1", records=records)
    cut = {(s["prompt_id"], s["variant"]) for s in data["samples"] if s["stop_reason"] == "context"}
    assert cut == {("q", "target"), ("q", "ngram k=8")}  # both stop where the context does: still a pair
    assert {s["stop_reason"] for s in data["samples"] if s["prompt_id"] == "one"} == {"eog"}
    from rich.console import Console

    from specchat.benchreport import print_bench, render
    from specchat.benchresult import BenchResult, Sample

    result = BenchResult(samples=[Sample(**sample) for sample in data["samples"]])
    note = "2 of 4 replies ended when the context was full, before --max-tokens"
    assert note in render(result, "md")
    console = Console(record=True, width=200)
    print_bench(console, result, [8])
    assert note in console.export_text()


def test_the_plan_says_which_later_turns_the_context_may_skip(fake_models, seed_tuning, tmp_path):
    """The plan line counted a later turn that --ctx then skipped as one it would run ("4 turns", two run),
    unsaid until the end: it says how many may be skipped; a bench where every turn fits says nothing."""
    target, draft = fake_models
    seed_tuning(target, draft)
    prompts = tmp_path / "prompts.jsonl"
    args = ["bench", "--target", str(target), "--prompts", str(prompts), "--modes", "ngram", "-r", "1", "-n", "8"]
    records = [{"question_id": "q", "category": "c", "turns": ["short", "x " * 600, "and again"]}, RECORDS[1]]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in records))
    note = "; 2 of the 4 turns may be skipped, where the conversation outgrows the 400-token context;"
    for ctx in ("400", "4096"):
        result = runner.invoke(app, [*args, "--ctx", ctx, "-f", "json", "-o", str(tmp_path / "out.json")])
        assert result.exit_code == 0, result.output
        assert (note in result.stderr) == (ctx == "400") and "4 turns x" in result.stderr, result.stderr


def test_chat_template_kwargs_reach_every_prompt_the_bench_renders(bench, monkeypatch):
    """A thinking model (Qwen3) could not be benched with its thinking off: bench had no --chat-template-kwargs.
    Every chat it renders takes them (the first-turn fit, the plan's at-risk turns, the cost model's context, each
    turn of the replay), and the JSON report records them."""
    from specchat.runtime import Pipeline

    seen, render = [], Pipeline.prompt

    def spy(self, messages, **kwargs):
        seen.append((len(messages), kwargs.get("template_kwargs")))
        return render(self, messages, **kwargs)

    monkeypatch.setattr(Pipeline, "prompt", spy)
    data = bench("-r", "1", "--modes", "ngram", "--chat-template-kwargs", '{"enable_thinking": false}')
    assert isinstance(data, dict), data.output
    assert data["meta"]["settings"]["chat_template_kwargs"] == {"enable_thinking": False}
    # first turns (2), the revision's two turns for the plan (2), the cost model (1), the replay (3)
    assert len(seen) == 8 and [kwargs for _, kwargs in seen if kwargs != {"enable_thinking": False}] == [], seen
    seen.clear()
    assert bench("-r", "1", "--modes", "ngram")["meta"]["settings"]["chat_template_kwargs"] == {}
