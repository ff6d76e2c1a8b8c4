"""`specchat bench` through the fake backend (tiny suite, few tokens): every report format, the lossless
check, the cost model; and its input errors."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import fake_backend
import pytest
from typer.testing import CliRunner

from specchat.benchreport import render, speedup_chart
from specchat.benchresult import BenchResult, Sample, median_interval
from specchat.cli import app
from specchat.costmodel import Costs, expected_tokens, iid_expected
from specchat.tableview import speedup_style

runner = CliRunner()


def squeezed(markdown: str) -> str:
    """Markdown with its columns' padding squeezed to one blank: a row as a test writes it."""
    return re.sub(" {2,}", " ", markdown)


@pytest.fixture(scope="module")
def fake_pair(tmp_path_factory):
    """Fake files and private directories for the whole module (auto starts from a saved tuning)."""
    from specchat import tunemeasure, tuning, tuningsave
    from specchat.runtime import Options, Resolved

    folder = tmp_path_factory.mktemp("bench")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("CONFIG", "MODELS", "CACHE"):
            patch.setenv(f"SPECCHAT_{name}_DIR", str(folder / name.lower()))
        target, draft = fake_backend.write_pair(folder / "files")
        costs = Costs({n: 1.0 + 0.02 * (n - 1) for n in tunemeasure.QUICK_BATCHES}, 0.05, 1e-3, 1e-3)
        tuningsave.save(tuning.Tuning(tuning.key_for(Resolved(None, target, draft), Options()), costs))
        yield folder, ["--target", str(target), "--draft", str(draft)]


def bench(fake_pair, *args):
    _folder, files = fake_pair
    return runner.invoke(app, ["bench", *files, "--suite", "tiny", "-r", "1", "-n", "8", *args])


@pytest.fixture(scope="module")
def bench_run(fake_pair):
    folder, _files = fake_pair
    out, plot = folder / "bench.json", folder / "bench.svg"
    result = bench(fake_pair, "-r", "2", "-n", "12", "--ks", "1,3", "-f", "json", "-o", str(out), "--plot", str(plot))
    return result, out, plot


def test_bench_takes_its_words_in_capitals(fake_pair):
    """`bench -f CSV --modes NGRAM --turns FIRST --suite TINY` was refused word by word ("unknown --format 'CSV'")."""
    _folder, files = fake_pair
    result = runner.invoke(app, ["bench", *files, "--suite", "TINY", "-r", "1", "-n", "4", "--modes", "NGRAM",
                                 "--turns", "First", "-f", "CSV"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("category,") and ",ngram k=" in result.stdout


def test_bench_json_has_every_field(bench_run):
    result, out, plot = bench_run
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # the report went to the file
    data = json.loads(out.read_text())
    assert set(data) >= {"meta", "definitions", "cost_model", "summary", "lossless", "peak_rss_mb", "samples"}
    meta = data["meta"]
    assert meta["llama_cpp_python"] and meta["machine"]["cpu"] and meta["machine"]["threads"] >= 1
    assert len(meta["files"]["target"]["sha256"]) == 64 and len(meta["files"]["draft"]["sha256"]) == 64
    assert meta["settings"]["ks"] == [1, 3] and meta["settings"]["reps"] == 2
    cost = data["cost_model"]
    assert cost["c"] > 0 and set(cost["v"]) == {str(n) for n in range(1, 17)}
    assert set(cost["ceiling"]) == {"lookup", "draft_model"} and cost["ceiling"]["lookup"] >= 1.0
    assert data["peak_rss_mb"] > 0
    variants = {(row["category"], row["variant"]) for row in data["summary"]}
    names = ("target", "k=1", "k=3", "ngram k=8", "auto")  # default --modes spec,ngram,auto
    assert variants == {(c, v) for c in ("code", "chat", "all") for v in names}
    for row in data["summary"]:
        if row["variant"] in ("k=1", "k=3"):
            assert 0 <= row["acceptance_rate"] <= 1 and len(row["position_acceptance"]) == row["k"]
            assert row["predicted_speedup"] > 0 and row["cost_model_speedup"] > 0
        positions = row["position_acceptance"]  # up to the last position drafted: auto's held 64, mostly null
        assert not positions or positions[-1] is not None, (row["variant"], positions)
    sources = {source for sample in data["samples"] for source in sample["rounds_by_source"]}
    assert sources <= {"target", "spec", "ngram"} and "spec" in sources  # mode names, never labels
    assert plot.read_text().lstrip().startswith(("<?xml", "<svg"))


def test_ratios_are_quotients_of_paired_tok_s(bench_run):
    """Each speedup is the median of variant tok/s / target tok/s over the same (prompt, repetition)."""
    _, out, _ = bench_run
    data = json.loads(out.read_text())
    samples = data["samples"]
    base = {(s["prompt_id"], s["rep"]): s["tokens_per_s"] for s in samples if s["variant"] == "target"}
    for row in data["summary"]:
        mine = [s for s in samples if s["variant"] == row["variant"] and row["category"] in ("all", s["category"])]
        ratios = sorted(s["tokens_per_s"] / base[(s["prompt_id"], s["rep"])] for s in mine)
        middle = len(ratios) // 2
        median = ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2
        assert row["speedup"] == pytest.approx(median)
        assert row["n"] == len(mine)


def test_lossless_check_ran(bench_run):
    _, out, _ = bench_run
    lossless = json.loads(out.read_text())["lossless"]
    assert lossless["checked"] == 2 * 2 * 4  # prompts x reps x (k=1, k=3, ngram, auto)
    assert lossless["MISMATCH"] == 0
    assert lossless["equal"] + lossless["near-tie"] == lossless["checked"]


def test_bench_md_names_every_key_of_the_json_report(bench_run):
    """`-f json` is what a script reads, and docs/bench.md named a few of its keys here and there (`turn`,
    `skipped`, `cost_model.ceiling`); `samples`, `lossless`, `meta.files` and most others nowhere."""
    from dataclasses import fields

    from specchat.benchturns import Skipped

    _, out, _ = bench_run
    data = json.loads(out.read_text())
    meta, near = data["meta"], Sample("1", "code", "k=1", 1, 0, 1.0, 1, 1.0, 0.1, 1, 1, 0, 0.1, 0.1, [1], [0])
    near.lossless = "near-tie"
    objects = [data, meta, meta["machine"], meta["files"]["target"], meta["settings"], data["cost_model"]]
    objects += [data["cost_model"]["ceiling"], data["summary"][0], data["lossless"], data["samples"][0]]
    objects += [BenchResult(samples=[near]).lossless_summary()["details"][0], {f.name: 0 for f in fields(Skipped)}]
    text = (Path(__file__).parent.parent / "docs" / "bench.md").read_text(encoding="utf-8")
    start = text.index("\n### The JSON report\n")
    named = set(re.findall(r"`\"?([\w-]+)\"?`", text[start : text.index("\n## ", start)]))
    assert {key for data in objects for key in data} - named == set()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--suite", "nope"], "unknown suite 'nope'"),
        (["--ks", "0,2"], "every k must be 1..16"),
        (["--ks", "a"], "not a list of integers"),
        (["--format", "xml"], "unknown --format"),
        (["--plot", "x.gif"], "use a .png or .svg"),
    ],
)
def test_bad_options(args, needle):
    result = runner.invoke(app, ["bench", *args])
    assert result.exit_code == 2 and needle in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("", "has no prompts"),
        ('{"category": "chat", "turns": ["hi"]}\n{not json}\n', "line 2: not valid JSON"),
        ('{"category": 3, "turns": ["hi"]}\n', 'line 1: "category" must be a non-empty string, not 3'),
        ('{"category": " ", "turns": ["hi"]}\n', 'line 1: "category" must be a non-empty string'),
        ("Name three colours.\n", 'line 1: not valid JSON (Expecting value)  hint: one JSON object per line, e.g. {"'),
        ("# my prompts\n", "line 1: not valid JSON"),
        ("Name three colours.\n", "plain text, one prompt per line, becomes that with jq -R -c"),  # no way out
        ("category,prompt\nchat,hi\n", "line 1: not valid JSON (Expecting value)  hint: one JSON object per line"),
        ('{"category": "chat", "turns": []}\n', 'line 1: "turns" must be a list'),
        ("[1, 2]\n", "is a JSON array, not JSONL"),
        ('{"category": "chat", "turns": ["Hi"]}\n42\n', "line 2: expected a JSON object"),
        ('{"category": "c", "turns": ["hi"], "question_id": ""}\n', 'line 1: "question_id" must be a number or'),
        ('{"category": "c", "turns": ["hi"], "question_id": [1]}\n', 'line 1: "question_id" must be a number or'),
        ('{"category": "c", "turns": ["hi"], "question_id": true}\n', 'line 1: "question_id" must be a number or'),
    ],
)
def test_bad_prompts_file(tmp_path, content, needle):
    path = tmp_path / "prompts.jsonl"
    path.write_text(content)
    result = runner.invoke(app, ["bench", "--prompts", str(path)])
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and str(path) in result.stderr


def test_a_null_question_id_is_the_line_number(tmp_path):
    """It became the id "None" (str(None)); absent or null, a record is named by its line."""
    from specchat.benchsuite import load_prompts_file

    path = tmp_path / "prompts.jsonl"
    path.write_text('{"category": "c", "turns": ["a"], "question_id": null}\n{"category": "c", "turns": ["b"]}\n')
    assert [p.id for p in load_prompts_file(path)] == ["1", "2"]


def test_a_record_without_a_category_is_in_prompts(fake_pair, tmp_path):
    """Spec-Bench-like records with "turns" and no "category" (or a null one) were refused line by line
    ('missing "category"'); the category only names the report's rows, so they are in "prompts"."""
    path = tmp_path / "turns.jsonl"
    path.write_text('{"turns": ["Name three colours.", "And two more."]}\n{"category": null, "turns": ["Hi"]}\n')
    result = bench(fake_pair, "--modes", "ngram", "--prompts", str(path), "-f", "json")
    assert result.exit_code == 0, result.output
    samples = json.loads(result.stdout)["samples"]
    assert {(s["category"], s["prompt_id"], s["turn"]) for s in samples} == {
        ("prompts", "1", 1),
        ("prompts", "1", 2),
        ("prompts", "2", 1),
    }


def test_job_line_names_autos_calibration_only_when_auto_runs(fake_pair):
    """The line before the runs said "auto uses its own calibration, up to 64" with auto not in --modes."""
    without = bench(fake_pair, "--modes", "spec", "--ks", "2", "-f", "json")
    assert without.exit_code == 0 and "calibration" not in without.stderr, without.output
    with_auto = bench(fake_pair, "--modes", "auto", "-f", "json")
    assert with_auto.exit_code == 0 and "auto uses its own calibration" in with_auto.stderr, with_auto.output


def test_ks_without_spec_is_named_as_not_used_and_not_recorded(fake_pair):
    """--ks sets the draft model's lengths: with spec not in --modes it was validated, ignored without a word,
    and recorded in the report's settings as if measured."""
    result = bench(fake_pair, "--modes", "ngram", "--ks", "2,4", "-f", "json")
    assert result.exit_code == 0 and "--ks 2,4 is not used" in result.stderr, result.output
    assert json.loads(result.stdout)["meta"]["settings"]["ks"] == []
    quiet = bench(fake_pair, "--modes", "ngram", "-f", "json")  # the default --ks is no one's choice: no note
    assert quiet.exit_code == 0 and "--ks" not in quiet.stderr


def test_the_machine_records_the_threads_used_not_those_asked(fake_pair, tmp_path):
    """`--threads 999` on a machine of fewer CPUs runs on the usable ones (with a note): the report's
    machine said 999 threads."""
    from specchat.engineconfig import default_threads

    out = tmp_path / "bench.json"
    result = bench(fake_pair, "--modes", "spec", "--ks", "1", "--threads", "999", "-f", "json", "-o", str(out))
    assert result.exit_code == 0, result.output
    meta = json.loads(out.read_text())["meta"]
    assert meta["machine"]["threads"] == default_threads() < 999
    assert meta["settings"]["threads"] == 999  # what was asked stays in the settings


def test_missing_prompts_file(tmp_path):
    result = runner.invoke(app, ["bench", "--prompts", str(tmp_path / "absent.jsonl")])
    assert result.exit_code == 2 and "prompts file not found" in result.stderr


def test_suite_beside_prompts_is_named_as_not_used(fake_pair, tmp_path):
    """--prompts replaces the suite; `--suite tiny --prompts F` measured F and said nothing of --suite."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"category": "c", "turns": ["a"]}\n')
    result = bench(fake_pair, "--modes", "ngram", "--prompts", str(path), "-f", "json")
    assert result.exit_code == 0 and "--suite tiny is not used: --prompts replaces" in result.stderr, result.output
    assert {s["prompt_id"] for s in json.loads(result.stdout)["samples"]} == {"1"}


def test_an_unknown_suite_beside_prompts_is_refused_as_alone(fake_pair, tmp_path):
    """`--suite nope --prompts F` measured F with a note that "--suite nope is not used": a misspelt suite is
    the error it is without --prompts, whatever else is given."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"category": "c", "turns": ["a"]}\n')
    result = bench(fake_pair, "--modes", "ngram", "--prompts", str(path), "--suite", "nope", "-f", "json")
    assert result.exit_code == 2 and "unknown suite 'nope'" in result.stderr, result.output
    assert "is not used" not in result.stderr and result.stdout == ""


def test_prompts_from_stdin(fake_pair):
    """`--prompts -` read a file called `-` ("prompts file not found: -"): `-` is stdin, as for most tools."""
    _folder, files = fake_pair
    record = {"question_id": "piped", "category": "from-stdin", "turns": ["Name three colours."]}
    args = ["bench", *files, "--prompts", "-", "--modes", "ngram", "-r", "1", "-n", "8", "-f", "json"]
    result = runner.invoke(app, args, input=json.dumps(record) + "\n")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {(s["prompt_id"], s["category"]) for s in data["samples"]} == {("piped", "from-stdin")}
    assert data["meta"]["settings"]["prompts"] == "-"


def test_a_tilde_the_shell_left_alone_is_the_home_directory(fake_pair, tmp_path, monkeypatch):
    """`-o ~/r.json` quoted, or `--output=~/r.json` (no shell expands a ~ after `=`), was "~: the directory does
    not exist" for a home that exists; --prompts and --history "not found". --target and --draft expand it."""
    _folder, files = fake_pair
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "p.jsonl").write_text('{"category": "c", "turns": ["a"]}\n')
    past = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    (tmp_path / "h.jsonl").write_text(json.dumps(past) + "\n")
    args = ["--prompts", "~/p.jsonl", "--history", "~/h.jsonl", "--modes", "spec,suffix", "--ks", "1", "-r", "1"]
    result = runner.invoke(app, ["bench", *files, *args, "-n", "8", "--output=~/r.json", "--plot", "~/r.svg"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["samples"] and (tmp_path / "r.svg").is_file()


def test_history_from_stdin(fake_pair, tmp_path):
    _folder, files = fake_pair
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"category": "c", "turns": ["a"]}\n')
    past = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
    args = ["bench", *files, "--prompts", str(prompts), "--modes", "suffix", "--history", "-", "-r", "1", "-n", "8"]
    result = runner.invoke(app, [*args, "-f", "json"], input=past + "\n")
    assert result.exit_code == 0, result.output
    assert "suffix drafts from stdin too: 2 messages" in result.stderr
    assert json.loads(result.stdout)["meta"]["settings"]["history"]["messages"] == 2


def test_prompts_and_history_cannot_both_be_stdin(fake_pair):
    _folder, files = fake_pair
    result = runner.invoke(app, ["bench", *files, "--prompts", "-", "--modes", "suffix", "--history", "-"], input="")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert (
        "--prompts - and --history - both read stdin" in result.stderr and "give one of them as a file" in result.stderr
    )


@pytest.mark.parametrize(
    ("option", "content", "needle"),
    [
        ("--prompts", "", "stdin has no prompts"),
        ("--prompts", '{"category": "chat", "turns": ["hi"]}\n{not json}\n', "stdin, line 2: not valid JSON"),
        ("--prompts", '[{"category": "chat", "turns": ["hi"]}]', "stdin (--prompts -) is a JSON array, not JSONL"),
        ("--history", "{not json}\n", "stdin, line 1: not valid JSON"),
        ("--history", "\n", "stdin has no user or assistant messages"),
    ],
)
def test_bad_jsonl_on_stdin_is_named_as_stdin(option, content, needle):
    result = runner.invoke(app, ["bench", "--modes", "suffix", option, "-"], input=content)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert needle in result.stderr, result.stderr


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_endless_prompts_or_history_file_is_refused(monkeypatch):
    """`--prompts /dev/zero` (or `--history`) read until memory ran out: a MemoryError, or no end."""
    from specchat import benchjsonl

    monkeypatch.setattr(benchjsonl, "MAX_JSONL_BYTES", 1 << 20)
    for option in ("--prompts", "--history"):
        result = runner.invoke(app, ["bench", "--modes", "suffix", option, "/dev/zero"])
        assert result.exit_code == 2 and "/dev/zero is over 1 MiB" in result.stderr, result.output


def test_prompts_file_that_is_a_directory_or_not_utf8(tmp_path):
    """Said as "cannot read DIR: [Errno 21] Is a directory: 'DIR'" with the hint "must be UTF-8 JSONL"."""
    result = runner.invoke(app, ["bench", "--prompts", str(tmp_path)])
    assert result.exit_code == 2 and f"prompts file {tmp_path} is a directory" in result.stderr
    assert "Errno" not in result.stderr and "give a JSONL file" in result.stderr
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(b'{"category": "chat", "turns": ["caf\xe9"]}\n')
    result = runner.invoke(app, ["bench", "--prompts", str(latin)])
    assert result.exit_code == 2 and "is not UTF-8 (line 1, byte 35)" in result.stderr
    assert "save it as UTF-8" in result.stderr


DEEP = '{"category": "chat", "turns": ["hi"], "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
HALF = '{"category": "chat", "turns": ["ok", "a \\ud800 b"]}\n'  # an escaped lone surrogate: valid JSON, no text


@pytest.mark.parametrize(
    ("option", "content", "needle"),
    [
        ("--prompts", '{"category": "chat", "turns": ["hi"]}\n' + DEEP, "line 2: nested too deeply"),
        ("--history", DEEP, "line 1: nested too deeply"),
        ("--prompts", HALF, 'line 1: "turns" item 2 holds half of a UTF-16 surrogate pair (\\ud800)'),
        ("--prompts", '{"category": "\\udc00", "turns": ["hi"]}', 'line 1: "category" holds half of a UTF-16'),
        ("--prompts", '{"category": "c", "turns": ["hi"], "question_id": "\\ud83d"}', '"question_id" holds half'),
        ("--history", '{"messages": [{"role": "user", "content": "x \\udfff"}]}', "line 1: a message holds half"),
        ("--history", HALF, "line 1: a message holds half of a UTF-16 surrogate pair"),
    ],
)
def test_json_lines_that_parse_but_cannot_be_used(tmp_path, option, content, needle):
    """A line nested thousands deep ended in an internal error (RecursionError), and a lone surrogate escape
    (valid JSON, but no character) in an internal error once tokenized (UnicodeEncodeError): each is now
    refused with its line."""
    path = tmp_path / "file.jsonl"
    path.write_text(content, encoding="utf-8")
    missing = ["--target", str(tmp_path / "none.gguf")]  # a file let through fails here: no models are loaded
    result = runner.invoke(app, ["bench", "--modes", "suffix", option, str(path), *missing])
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and str(path) in result.stderr and "internal error" not in result.stderr


@pytest.mark.parametrize("option", ["--prompts", "--history"])
def test_an_object_spread_over_lines_is_named_as_such(tmp_path, option):
    """`jq '.[]'` without -c, or a file written by hand, spreads an object over lines: each line alone is
    "not valid JSON (Expecting property name ...)", which does not say what is wrong with the file."""
    path = tmp_path / "pretty.jsonl"
    path.write_text('{"category": "chat", "turns": ["hi"]}\n\n{\n  "category": "chat",\n  "turns": ["ho"]\n}\n')
    result = runner.invoke(app, ["bench", "--modes", "suffix", option, str(path), "--target", str(tmp_path / "x.gguf")])
    assert result.exit_code == 2, result.output
    assert f"{path}, line 3: a JSON object spread over lines 3-6" in result.stderr
    assert "jq -c" in result.stderr
    path.write_text('{"category": "chat", "turns": ["hi"]}\n{"category": "chat",\n')  # cut short: not spread
    result = runner.invoke(app, ["bench", "--modes", "suffix", option, str(path)])
    assert result.exit_code == 2 and "line 2: not valid JSON" in result.stderr


def test_a_pair_of_surrogate_escapes_is_one_character(tmp_path):
    from specchat.benchsuite import load_prompts_file

    path = tmp_path / "emoji.jsonl"
    path.write_text('{"category": "chat", "turns": ["say \\ud83d\\ude00"]}\n')
    assert load_prompts_file(path)[0].text == "say \U0001f600"


def test_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"category": "chat", "turns": ["hi"]}\n{"category": "chat", "turns": ["caf\xe9"]}\n')
    result = runner.invoke(app, ["bench", "--prompts", str(path)])
    assert result.exit_code == 2 and f"{path} is not UTF-8 (line 2, byte 73)" in result.stderr


def test_prompts_file_that_is_gzip_or_a_json_array(tmp_path):
    """Files as they are passed around: compressed, or a JSON array (a file of lines would be refused at
    line 1 for the wrong reason: "not UTF-8 (byte 1)" / "expected a JSON object")."""
    import gzip

    record = {"category": "chat", "turns": ["Hi"]}
    packed = tmp_path / "question.jsonl.gz"
    packed.write_bytes(gzip.compress((json.dumps(record) + "\n").encode()))
    result = runner.invoke(app, ["bench", "--prompts", str(packed)])
    assert result.exit_code == 2 and "is gzip-compressed" in result.stderr and "gunzip" in result.stderr
    for name in ("question.json", "question.jsonl"):
        array = tmp_path / name
        array.write_text(json.dumps([record, record], indent=2))
        result = runner.invoke(app, ["bench", "--prompts", str(array)])
        assert result.exit_code == 2 and "is a JSON array, not JSONL" in result.stderr, result.output
        assert not result.stderr.rstrip().endswith(f"> {name}")  # the suggested jq never overwrites its input


def test_prediction_from_costs():
    """S(k) = E(a, k) / (k c + v(k + 1)) from measured ratios, as the report's S(k) column uses it."""
    assert iid_expected(0.0, 4) == 1.0 and iid_expected(1.0, 4) == 5.0
    assert iid_expected(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert expected_tokens([0.5, 0.5]) == [1.0, 1.5, 1.75]
    cost = Costs.from_seconds({n: 0.04 * (1 + 0.05 * (n - 1)) for n in range(1, 17)}, 0.01)
    assert cost.c == pytest.approx(0.25) and cost.v(5) == pytest.approx(1.2)
    result = BenchResult(cost=cost)
    for variant, k, tps in (("target", 0, 20.0), ("k=4", 4, 30.0)):
        # 10 rounds, 30 tokens; k=4 drafted 40 tokens and 32 were accepted (8 of 10 at every position)
        drafted, accepted = (40, 32) if k else (0, 0)
        sample = Sample("p1", "code", variant, k, 0, tps, 30, 1.0, 0.1, 10, drafted, accepted, 0.1, 0.2, [], [])
        sample.drafted_at, sample.accepted_at = [10] * k, [8] * k
        result.samples.append(sample)
    row = next(r for r in result.rows() if r.variant == "k=4")
    assert row.predicted_speedup == pytest.approx(iid_expected(0.8, 4) / (4 * 0.25 + 1.2))
    assert row.cost_model_speedup == pytest.approx(29 / (10 * (4 * 0.25 + 1.2)))  # tok/s leaves the first token out
    assert row.speedup == pytest.approx(1.5)
    # spec's first round is the target's alone, read off the prefill: no step of its own, not k c + v(k + 1)
    result.samples[1].rounds_by_source = {"target": 1, "spec": 9}
    row = next(r for r in result.rows() if r.variant == "k=4")
    assert row.cost_model_speedup == pytest.approx(29 / (9 * (4 * 0.25 + 1.2)))
    result.samples[1].rounds_by_source = {"target": 2, "spec": 8}  # and another that costs one step
    row = next(r for r in result.rows() if r.variant == "k=4")
    assert row.cost_model_speedup == pytest.approx(29 / (8 * (4 * 0.25 + 1.2) + 1))


def test_the_speedup_interval_is_the_medians_order_statistics():
    """The 95% interval of a median of n paired ratios: from the j-th smallest to the j-th largest, j from the
    Binomial(n, 1/2) tail (n = 16: the 4th and 13th; n = 100: 40th and 61st, as the published tables say);
    none below 6 pairs, where even the whole range holds the median with less than 95% confidence."""
    assert median_interval([float(i) for i in range(16, 0, -1)]) == (4.0, 13.0)
    assert median_interval([float(i) for i in range(1, 101)]) == (40.0, 61.0)
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == (1.0, 6.0)
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None


def _paired(ratios: list[float]) -> BenchResult:
    result = BenchResult()
    for rep, ratio in enumerate(ratios):
        for variant, k, tps in (("target", 0, 20.0), ("auto", 64, 20.0 * ratio)):
            result.samples.append(Sample("p", "code", variant, k, rep, tps, 30, 1.0, 0.1, 10, 0, 0, 0.1, 0.2, [], []))
    return result


def test_a_speedup_the_run_cannot_tell_from_one_is_not_coloured_as_a_win_or_a_loss():
    """On a shared VM the target alone's own speed moves 10-20% from one reply to the next: a median of 1.03x
    over 16 pairs spread 0.8-1.5x is not a win, and it was painted green as one."""
    noisy = _paired([0.8, 0.85, 0.9, 0.95, 0.98, 1.0, 1.02, 1.03, 1.03, 1.05, 1.1, 1.2, 1.3, 1.4, 1.45, 1.5])
    row = next(r for r in noisy.rows() if r.variant == "auto")
    assert row.speedup == pytest.approx(1.03) and (row.speedup_low, row.speedup_high) == pytest.approx((0.95, 1.3))
    assert speedup_style(row) is None
    assert "0.95-1.30" in render(noisy, "md")
    reference = next(r for r in noisy.rows() if r.variant == "target")  # its own ratios are all 1: no interval
    assert reference.speedup_low is None and reference.speedup_high is None
    clear = next(r for r in _paired([1.1 + 0.01 * i for i in range(16)]).rows() if r.variant == "auto")
    assert speedup_style(clear) == "green"
    worse = next(r for r in _paired([0.8 + 0.01 * i for i in range(16)]).rows() if r.variant == "auto")
    assert speedup_style(worse) == "red"
    few = next(r for r in _paired([0.9, 1.2]).rows() if r.variant == "auto")
    assert few.speedup_low is None and speedup_style(few) == "green"  # too few pairs: by the median, as before


def test_position_acceptance_ends_at_the_last_position_drafted():
    """auto may draft up to 64 tokens a round: its row's position_acceptance had 64 entries, most of them null.
    Trailing nulls go; one between drafted positions stays, so that entry i is still position i + 1."""
    result = BenchResult()
    sixty_four = [0] * 64
    for variant, k, drafted_at, accepted_at in (
        ("target", 0, [], []),
        ("auto", 64, [4, 0, 2, 1, *sixty_four[4:]], [2, 0, 1, 0, *sixty_four[4:]]),
    ):
        result.samples.append(Sample("p1", "code", variant, k, 0, 20.0, 10, 0.5, 0.1, 4, 7, 3, 0.1, 0.2, drafted_at,
                                     accepted_at, mode="auto" if k else "target"))  # fmt: skip
    rows = {row.variant: row for row in result.rows() if row.category == "code"}
    assert rows["auto"].position_acceptance == [0.5, None, 0.5, 0.0]
    assert rows["target"].position_acceptance == []
    never = BenchResult(samples=[Sample("p1", "code", "auto", 64, 0, 20.0, 10, 0.5, 0.1, 4, 0, 0, 0, 0.2,
                                        list(sixty_four), list(sixty_four), mode="auto")])  # fmt: skip
    assert never.rows()[0].position_acceptance == []  # nothing drafted: nothing measured
    csv_rows = render(result, "csv").splitlines()
    assert csv_rows[0].split(",").count("position_acceptance") == 1
    assert '"[0.5, null, 0.5, 0.0]"' in render(result, "csv")
    assert "| code | auto |" in squeezed(render(result, "md"))
    summary = json.loads(render(result, "json"))["summary"]
    assert [0.5, None, 0.5, 0.0] in [row["position_acceptance"] for row in summary]


def test_text_formats_from_samples():
    result = BenchResult()
    for variant, k, tps in (("target", 0, 20.0), ("k=2", 2, 30.0)):
        result.samples.append(
            Sample("p1", "code", variant, k, 0, tps, 10, 0.5, 0.1, 4, 2 * k, k, 0.1, 0.2, [k and 2] * k, [k and 1] * k)
        )
    md = squeezed(render(result, "md"))
    assert "| code | k=2 | 1 | 30.0 | 1.50x |" in md
    csv_text = render(result, "csv")
    assert csv_text.splitlines()[0].startswith("category,variant,k,n,tokens_per_s,speedup")
    lines = render(result, "jsonl").splitlines()
    assert json.loads(lines[0])["type"] == "sample" and json.loads(lines[-1])["type"] == "summary"


def test_csv_text_that_starts_like_a_formula_is_quoted_numbers_are_not():
    """A --prompts category such as `=HYPERLINK(...)` went into the CSV as it was: a spreadsheet runs it."""
    import csv

    result = BenchResult()
    for category in ("=1+2", "+3", "-2+3", "@SUM(A1)", "\tx", "\rx", "plain"):
        for variant, k, tps in (("target", 0, -20.0), ("k=2", 2, 30.0)):  # a negative number stays a number
            result.samples.append(
                Sample("p", category, variant, k, 0, tps, 10, 0.5, 0.1, 4, 2 * k, k, 0.1, 0.2, [k] * k, [k] * k)
            )
    rows = list(csv.DictReader(io.StringIO(render(result, "csv"))))
    categories = {row["category"] for row in rows}
    assert categories == {"'=1+2", "'+3", "'-2+3", "'@SUM(A1)", "'\tx", "'\rx", "plain", "all"}
    assert {row["tokens_per_s"] for row in rows if row["variant"] == "target"} == {"-20.0"}


@pytest.mark.parametrize("fmt", ["md", "csv", "jsonl"])
def test_text_reports_to_files(fake_pair, tmp_path, fmt):
    out = tmp_path / f"bench.{fmt}"
    result = bench(fake_pair, "--ks", "2", "--modes", "spec,ngram", "-f", fmt, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.stderr and not list(tmp_path.glob(".*"))
    text = out.read_text()
    first = text.splitlines()[0]
    if fmt == "md":
        text, first = squeezed(text), squeezed(first)
        assert first.startswith("| category | variant |") and "| k=2 |" in text and "ngram k=8" in text
    elif fmt == "csv":
        assert first.startswith("category,variant,k,n,tokens_per_s,speedup")
    else:
        lines = [json.loads(line) for line in text.splitlines()]
        assert lines[0]["type"] == "sample" and lines[-1]["type"] == "summary"
        assert lines[-1]["lossless"]["MISMATCH"] == 0


def test_table_on_stdout_with_cost_model(fake_pair):
    result = bench(fake_pair, "--ks", "2", "--modes", "spec")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "specchat bench" in out and "cost model measured on this machine" in out
    assert "c = draft step / target step" in out and "v(3) = batch of 3" in out
    assert "lookup, every guess right" in out and "draft model, every guess right" in out and "at most" in out
    assert "lossless check: 2 greedy outputs vs target alone: 2 equal" in out
    assert "measuring the cost model" in result.stderr


def test_the_size_of_the_job_is_said_before_it_starts(fake_pair):
    """In a pipe no progress bar shows: `bench --suite quick` (147 replies) ran over 20 minutes on 2 cores with
    no word of how much was left."""
    result = bench(fake_pair, "--ks", "2,4", "--modes", "spec", "-r", "2", "-n", "8")
    assert result.exit_code == 0, result.output
    first = result.stderr.split("measuring the cost model")[0]
    assert "12 replies to generate (2 turns x 3 variants x 2 repetitions, up to 8 tokens each)" in first, first
    _folder, files = fake_pair
    args = ["bench", *files, "--prompts", "-", "--modes", "auto", "-r", "1", "-n", "8"]
    once = runner.invoke(app, args, input='{"category": "chat", "turns": ["Hi"]}\n')
    assert "2 replies to generate (1 turn x 2 variants x 1 repetition, up to 8 tokens each)" in once.stderr
    assert "each), plus 2 warm-ups of up to 8 tokens;" in once.stderr  # one record of one turn: nothing earlier


def test_progress_in_a_log_is_a_line_now_and_then_and_stdout_stays_the_report(fake_pair, monkeypatch):
    """`specchat bench -f json 2> bench.log`: the progress bar is drawn on a terminal only, so after the "N replies
    to generate" line a long bench said nothing for minutes. Where stderr is no terminal (as here), a plain line
    says how far it is, at most every progressview.LOGGED_EVERY_S (0 here: one per run); the JSON on stdout is as
    it was."""
    from specchat import progressview

    quiet = bench(fake_pair, "--ks", "2", "--modes", "spec", "-f", "json")  # fast runs: no line at all
    assert quiet.exit_code == 0 and "replies done" not in quiet.stderr, quiet.output
    monkeypatch.setattr(progressview, "LOGGED_EVERY_S", 0.0)
    result = bench(fake_pair, "--ks", "2", "--modes", "spec", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["samples"] and "replies done" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if "replies done" in line]
    assert [line.split(" replies done")[0] for line in lines] == ["0/4", "1/4", "2/4", "3/4"], result.stderr
    assert lines[0].startswith("0/4 replies done, 0:00:00 elapsed; now rep 1/1 · code #tiny-1 · ")
    assert ", about 0:00:00 left; now rep 1/1 · chat #tiny-2 · " in lines[3], lines
    assert "\x1b" not in result.stderr and "\r" not in result.stderr


def test_the_size_of_the_job_counts_earlier_turns_and_warm_ups(fake_pair):
    """`--suite revision` said "replies ... up to 64 tokens each" and no more, but the target alone also wrote
    the 3 earlier turns, up to --earlier-tokens (512) each, and every variant warmed up first."""
    _folder, files = fake_pair
    args = ["bench", *files, "--suite", "revision", "--modes", "ngram", "-r", "1", "-n", "32", "-f", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    first = result.stderr.split("measuring the cost model")[0]
    assert (
        "12 replies to generate (6 turns x 2 variants x 1 repetition, up to 32 tokens each), plus 3 earlier turns "
        "of up to 512 tokens answered by the target alone, and 2 warm-ups of up to 16 tokens;"
    ) in first, first


def test_sampled_bench_says_the_lossless_check_was_not_made(fake_pair):
    """At temperature > 0 nothing is compared: a green "0 greedy outputs ... 0 mismatches" read as passed."""
    result = bench(fake_pair, "--ks", "2", "--modes", "spec", "--temperature", "0.7")
    assert result.exit_code == 0, result.output
    assert "lossless check: not made (only greedy outputs can be compared)" in result.stdout
    assert "0 greedy outputs" not in result.stdout


def test_text_format_to_stdout(fake_pair):
    result = bench(fake_pair, "--ks", "1", "--modes", "ngram", "-f", "md")
    assert result.exit_code == 0, result.output
    assert squeezed(result.stdout).startswith("| category | variant |") and "ngram k=8" in result.stdout


def ctrl_c_at_the_seventh_reply(monkeypatch) -> list:
    """Ctrl-C as the bench asks for its 7th reply: after the warm-up (3 variants) and one block of 3. Returns the
    list of calls so far (clear it to count again)."""
    from specchat import bench as bench_module

    real = bench_module._generate
    calls = []

    def generate(*args, **kwargs):
        calls.append(1)
        if len(calls) == 7:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(bench_module, "_generate", generate)
    return calls


def test_interrupted_bench_keeps_what_was_measured(fake_pair, tmp_path, monkeypatch):
    """Ctrl-C during the runs: the report of what was measured is written, marked interrupted; exit 130."""
    calls = ctrl_c_at_the_seventh_reply(monkeypatch)
    out = tmp_path / "partial.json"
    result = bench(fake_pair, "--ks", "1", "--modes", "spec,ngram", "-f", "json", "-o", str(out))
    assert result.exit_code == 130
    data = json.loads(out.read_text())
    assert data["interrupted"] is True and len(data["samples"]) == 3
    calls.clear()  # the table and a Markdown file say so too: a partial report never passes for a whole one
    result = bench(fake_pair, "--ks", "1", "--modes", "spec,ngram", "-o", str(tmp_path / "partial.md"))
    assert result.exit_code == 130
    assert "interrupted (Ctrl-C)" in result.stdout and "interrupted (Ctrl-C)" in (tmp_path / "partial.md").read_text()


def test_interrupted_before_any_sample(fake_pair, monkeypatch):
    from specchat import bench as bench_module

    def stop(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_module, "run_bench", stop)
    result = bench(fake_pair, "--ks", "1", "--modes", "spec")
    assert result.exit_code == 130 and "nothing was measured" in result.stderr


def test_missing_output_directory_is_refused_before_running(fake_pair, tmp_path):
    result = bench(fake_pair, "-o", str(tmp_path / "no" / "bench.md"))
    assert result.exit_code == 2 and "the directory does not exist" in result.stderr


@pytest.mark.skipif(not Path("/proc/version").is_file(), reason="needs Linux's /proc")
def test_output_in_a_folder_that_takes_no_files_says_so(fake_pair):
    """-o /proc/version said "No such file or directory" of a file that exists: /proc refuses new files."""
    result = bench(fake_pair, "-o", "/proc/version")
    assert result.exit_code == 2 and "cannot write /proc/version: /proc takes no new files" in result.stderr
    assert "No such file" not in result.stderr and "nothing was run" in result.stderr


def test_unwritable_output_is_refused_before_running(fake_pair, tmp_path, monkeypatch):
    from specchat import bench as bench_module

    def never(*_args, **_kwargs):
        raise AssertionError("the bench ran: its report would have been lost at the end")

    monkeypatch.setattr(bench_module, "run_bench", never)
    result = bench(fake_pair, "-o", str(tmp_path))  # a directory: write_atomic failed only after the run
    assert result.exit_code == 2 and "is a directory" in result.stderr and "nothing was run" in result.stderr


def test_read_only_output_is_refused_before_running(fake_pair, tmp_path, monkeypatch, read_only):
    """-o naming a read-only file: the report's rename replaced it; refused now (write_atomic), and so before
    the run, not after it with the report lost."""
    from specchat import bench as bench_module

    monkeypatch.setattr(bench_module, "run_bench", lambda *_a, **_k: pytest.fail("the bench ran"))
    kept = tmp_path / "kept.md"
    kept.write_text("old")
    read_only(kept)
    result = bench(fake_pair, "-o", str(kept))
    assert result.exit_code == 2 and "permission denied" in result.stderr and "nothing was run" in result.stderr
    assert kept.read_text() == "old"


def test_output_through_a_loop_of_links_is_refused_before_running(fake_pair, tmp_path, monkeypatch):
    """-o naming a loop of symbolic links ran the whole bench, then ended in an internal error (pathlib's
    RuntimeError from resolve), and the report was lost."""
    from specchat import bench as bench_module

    monkeypatch.setattr(bench_module, "run_bench", lambda *_a, **_k: pytest.fail("the bench ran"))
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    result = bench(fake_pair, "-o", str(tmp_path / "a"))
    assert result.exit_code == 2 and "nothing was run" in result.stderr and "internal error" not in result.stderr


def test_output_into_a_fifo_or_device_is_written_into_not_replaced(fake_pair, tmp_path):
    """-o /dev/null (or a FIFO, or /dev/stdout on a pipe) went through a temporary file and a rename: as
    root that replaced /dev/null with a regular file; as anyone else it was refused."""
    import os
    import stat

    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so that the writer's open does not wait
    try:
        result = bench(fake_pair, "--ks", "1", "--modes", "spec", "-f", "md", "-o", str(fifo))
        assert result.exit_code == 0, result.output
        assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced by a regular file"
        assert os.read(reader, 1 << 16).decode().startswith("| category | variant |")
    finally:
        os.close(reader)


def test_bad_modes(fake_pair):
    result = bench(fake_pair, "--modes", "spec,turbo")
    assert result.exit_code == 2 and "--modes 'spec,turbo': unknown mode 'turbo'" in result.stderr
    result = bench(fake_pair, "--modes", " , ")
    assert result.exit_code == 2 and "--modes ' , ' names no mode" in result.stderr
    result = bench(fake_pair, "--modes", "target,ngram")  # the baseline is no mode to ask for
    assert result.exit_code == 2 and "the target alone is always measured" in result.stderr


def test_a_dash_for_the_report_is_refused_not_a_file_named_dash(fake_pair, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = bench(fake_pair, "-o", "-")
    assert result.exit_code == 2 and "-o/--output - would write a file named -" in result.stderr
    assert "-f md, csv, json or jsonl and no -o" in result.stderr  # jsonl goes to stdout too: its hint left it out
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize(
    ("args", "needle", "hint"),
    [
        (["--ks", ""], "--ks '' names no draft length", "e.g. --ks 1,2,4,8"),
        (["--ks", " , "], "--ks ' , ' names no draft length", "leave spec out of --modes"),
        (["--modes", ""], "--modes '' names no mode", "e.g. --modes spec,ngram,auto"),
    ],
)
def test_an_empty_list_is_named_as_empty(args, needle, hint):
    """`--ks ''` (an unset variable) said "every k must be 1..16", and `--modes ''` "no mode": neither said
    that the list was empty nor what the flag takes."""
    result = runner.invoke(app, ["bench", *args])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and hint in lines[0], result.stderr


@pytest.mark.parametrize(
    ("args", "needle", "hint"),
    [
        (["--ks", "1,,2"], "--ks '1,,2' has an empty item (between two commas)", "--ks 1,2"),
        (["--ks", "1,2,"], "--ks '1,2,' has an empty item (at the end)", "--ks 1,2"),
        (["--modes", "spec, ,ngram"], "--modes 'spec, ,ngram' has an empty item", "--modes spec,ngram"),
    ],
)
def test_an_empty_item_in_a_list_is_a_usage_error(fake_pair, args, needle, hint):
    """`--ks 1,,2` was read as 1,2 without a word: a value left out by a slip was measured without."""
    result = bench(fake_pair, *args)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and hint in lines[0], result.stderr


@pytest.mark.parametrize(
    ("fmt", "name", "named"), [("json", "x.csv", "csv"), ("jsonl", "x.JSON", "json"), ("md", "x.json", "json")]
)
def test_a_format_the_file_name_contradicts_is_a_usage_error(fake_pair, tmp_path, fmt, name, named):
    """`-f json -o x.csv` measured for minutes, then wrote JSON into a file named .csv without a word."""
    out = tmp_path / name
    result = bench(fake_pair, "--format", fmt, "--output", str(out))  # typed long: `-f json` named what was not typed
    assert result.exit_code == 2 and not out.exists(), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"-f/--format {fmt} and -o/--output {out} disagree" in lines[0], result.stderr
    assert f"-f {named} -o {out}, or -f {fmt} -o {out.with_suffix('.' + fmt)}" in lines[0]


def test_a_file_name_no_format_claims_takes_the_format_given(fake_pair, tmp_path):
    out = tmp_path / "report.txt"
    result = bench(fake_pair, "--modes", "ngram", "-f", "json", "-o", str(out))
    assert result.exit_code == 0 and json.loads(out.read_text())["samples"], result.output


@pytest.mark.parametrize("modes", ["ngram", "auto", "ngram,suffix"])
def test_a_lone_target_needs_no_draft_model_where_spec_is_not_measured(fake_pair, monkeypatch, modes):
    """`bench --target T --modes ngram` (or auto) loaded the pair's draft model, which nothing used: a pull,
    or 'incompatible pair' for a target of another family. As `run --target T`, it now drafts without one."""
    _folder, files = fake_pair
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the pair's draft is not there: wanting it fails at once
    lone = ["bench", *files[:2], "--suite", "tiny", "-r", "1", "-n", "8", "-f", "json"]  # --target T alone
    result = runner.invoke(app, [*lone, "--modes", modes])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["meta"]["files"].get("draft") is None and len(data["samples"]) == 2 * (2 + modes.count(","))
    refused = runner.invoke(app, [*lone, "--modes", "spec", "--ks", "1"])  # spec still takes the pair's draft
    assert refused.exit_code == 1 and "HF_HUB_OFFLINE" in refused.stderr


def test_auto_beside_spec_for_a_lone_target_runs_without_the_draft_model_as_run_does(fake_pair, monkeypatch):
    """`bench --target T --modes spec,auto` loads the pair's draft model for the spec rows; auto drafted with
    it too (and under the pair's tuning), where `run --target T` runs auto without one."""
    from specchat import runtime

    _folder, files = fake_pair
    target, draft = Path(files[1]), Path(files[3])
    monkeypatch.setattr(runtime, "resolve", lambda options, *_: runtime.Resolved("fake", target, draft))
    args = ["bench", *files[:2], "--suite", "tiny", "-r", "1", "-n", "16", "-f", "json", "--ks", "2"]
    result = runner.invoke(app, [*args, "--modes", "spec,auto"])
    assert result.exit_code == 0, result.output
    auto = [s for s in json.loads(result.stdout)["samples"] if s["variant"] == "auto"]
    assert auto and not any("spec" in s["rounds_by_source"] for s in auto)
    both = runner.invoke(app, ["bench", *files, "--suite", "tiny", "-r", "1", "-n", "16", "-f", "json"])
    samples = json.loads(both.stdout)["samples"]  # with --draft given, auto may use it (the saved tuning: it pays)
    assert any("spec" in s["rounds_by_source"] for s in samples if s["variant"] == "auto"), both.output


def test_a_category_with_a_pipe_stays_in_its_markdown_column(fake_pair, tmp_path):
    """A --prompts category "a|b" split its Markdown row into one cell more than the header."""
    prompts = tmp_path / "pipe.jsonl"
    prompts.write_text('{"category": "a|b", "turns": ["hi"]}\n{"category": "x\\ny", "turns": ["yo"]}\n')
    result = bench(fake_pair, "--prompts", str(prompts), "--ks", "1", "--modes", "spec", "-f", "md")
    assert result.exit_code == 0, result.output
    rows = [line for line in squeezed(result.stdout).splitlines() if line.startswith("|")]  # the table, not the legend
    assert all(len(re.split(r"(?<!\\)\|", row)) == len(re.split(r"(?<!\\)\|", rows[0])) for row in rows), rows
    assert any(row.startswith("| a\\|b | k=1 |") for row in rows) and any(row.startswith("| x y |") for row in rows)


ESCAPE = "\x1b[2J\x07x\ny"  # clear the screen, ring the bell, and a second line


def test_control_characters_in_a_category_are_shown_not_obeyed(fake_pair, tmp_path):
    """A --prompts category with ESC in it cleared the terminal when the table was printed (Rich drops the BEL,
    keeps the ESC), and a newline split its rows; it is shown as Python writes it, as serve shows a client's."""
    prompts = tmp_path / "escape.jsonl"
    prompts.write_text(json.dumps({"category": ESCAPE, "turns": ["hi"]}) + "\n")
    result = bench(fake_pair, "--prompts", str(prompts), "--modes", "ngram")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    rows = [line for line in result.stdout.splitlines() if "\\x1b[2J\\x07x\\ny" in line]
    assert len(rows) == 2 and "target" in rows[0] and "ngram k=8" in rows[1], result.stdout


def test_control_characters_in_a_category_stay_out_of_the_chart_and_the_progress_line():
    from rich.console import Console

    from specchat.progressview import bench_progress

    result = two_variant_result()
    for sample in result.samples:
        sample.category = ESCAPE
    chart = speedup_chart(result).plain.splitlines()
    assert len(chart) == 2 and chart[1].startswith("  \\x1b[2J\\x07x\\ny k=2 "), chart
    out = io.StringIO()
    with bench_progress(Console(file=out, force_terminal=True, width=100), 1) as advance:
        advance(f"rep 1/1 · {ESCAPE} · target", 0)
    assert "\x1b[2J" not in out.getvalue() and "\x07" not in out.getvalue()
    assert "\\x1b[2J\\x07x\\ny" in out.getvalue()


def test_a_mode_given_twice_is_benched_once():
    from specchat.benchoptions import check_options

    assert check_options("table", None, None, "2", "spec,ngram,spec")[1] == ["spec", "ngram"]


def two_variant_result() -> BenchResult:
    result = BenchResult()
    for variant, k, tps in (("target", 0, 20.0), ("k=2", 2, 30.0)):
        result.samples.append(
            Sample("p1", "code", variant, k, 0, tps, 10, 0.5, 0.1, 4, 2 * k, k, 0.1, 0.2, [k and 2] * k, [k and 1] * k)
        )
    return result


def terminal_report(result) -> str:
    from rich.console import Console

    from specchat.benchreport import print_bench

    out = io.StringIO()
    print_bench(Console(file=out, force_terminal=True, width=100), result, [2])
    return re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())


def test_the_terminal_chart_needs_no_plotting_library(monkeypatch):
    for name in ("plotext", "matplotlib"):
        monkeypatch.setitem(sys.modules, name, None)  # the default install has neither
    report = terminal_report(two_variant_result())
    chart = report[report.index("speedup vs the target alone") :].splitlines()
    assert chart[1].startswith("  code k=2 ") and chart[1].endswith(" 1.50x")
    assert chart[1].count("█") == 40  # the largest speedup fills the width
    assert "│" not in chart[1]


def test_plot_without_matplotlib_names_an_install_that_works(monkeypatch):
    """The hint was `pip install 'specchat[plot]'`: specchat is installed from its clone (install.md), and
    that line asked the package index for a specchat it does not have."""
    from specchat.benchreport import require_matplotlib
    from specchat.errors import UsageError

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UsageError) as caught:
        require_matplotlib()
    assert caught.value.message == "--plot needs matplotlib"
    assert "pip install matplotlib" in caught.value.hint and "specchat[" not in caught.value.hint


def test_the_chart_marks_where_the_target_alone_is():
    result = two_variant_result()
    result.samples[1].tokens_per_s = 10.0  # k=2 at 0.5x
    line = speedup_chart(result).plain.splitlines()[1]
    assert line == "  code k=2 " + "█" * 20 + " " * 19 + "│ 0.50x"


def test_files_that_start_with_a_bom_are_read(tmp_path):
    """Windows editors save UTF-8 with a byte-order mark; json.loads called it 'not valid JSON'."""
    from specchat.benchhistory import load
    from specchat.benchsuite import load_prompts_file

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('\ufeff{"category": "chat", "turns": ["hi"]}\n', encoding="utf-8")
    assert [p.turns for p in load_prompts_file(prompts)] == [("hi",)]
    history = tmp_path / "past.jsonl"
    history.write_text('\ufeff{"turns": ["hello"]}\n', encoding="utf-8")
    assert load(str(history), ["suffix"]).texts == ["hello"]
    # Files concatenated (`cat a.jsonl b.jsonl`): the second one's BOM starts a line, which was "not valid JSON".
    prompts.write_text('{"category": "chat", "turns": ["hi"]}\n\ufeff{"category": "code", "turns": ["ho"]}\n')
    assert [p.turns for p in load_prompts_file(prompts)] == [("hi",), ("ho",)]
    history.write_text('{"turns": ["hello"]}\r\n\ufeff{"turns": ["again"]}', encoding="utf-8")
    assert load(str(history), ["suffix"]).texts == ["hello", "again"]


def test_line_separators_inside_json_strings_do_not_split_a_line(tmp_path):
    """JSON strings may hold U+2028, U+2029 and U+0085 raw (json.dumps(ensure_ascii=False) writes them so);
    str.splitlines() cut the line there, and a valid file was 'not valid JSON'."""
    from specchat.benchhistory import load
    from specchat.benchsuite import load_prompts_file

    text = "one\u2028two\u2029three\x85four"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"category": "chat", "turns": [text]}, ensure_ascii=False) + "\r\n", "utf-8")
    assert [p.turns for p in load_prompts_file(prompts)] == [(text,)]
    history = tmp_path / "past.jsonl"
    history.write_text(json.dumps({"turns": [text]}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert load(str(history), ["suffix"]).texts == [text]


@pytest.mark.parametrize(
    ("ids", "needle"),
    [(["a", "a"], "line 2: question_id 'a' is line 1's too"), ([None, 1], "line 2: question_id '1' is line 1's too")],
)
def test_a_question_id_used_twice_is_refused(tmp_path, ids, needle):
    """Samples are paired with the target alone by (prompt_id, turn, rep): two records with one id paired
    one record's replies with the other's target, and the target's own speedup read 0.75x."""
    from specchat.benchsuite import load_prompts_file
    from specchat.errors import UsageError

    prompts = tmp_path / "prompts.jsonl"
    records = [
        {"category": "chat", "turns": [f"hi {i}"]} | ({"question_id": q} if q else {}) for i, q in enumerate(ids)
    ]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(UsageError, match=re.escape(needle)):
        load_prompts_file(prompts)


@pytest.mark.parametrize("option", ["-o", "--plot"])
def test_a_report_over_its_own_prompts_or_history_file_is_refused(fake_pair, tmp_path, option):
    """-o naming the --prompts file replaced the prompts with the report after the run."""
    prompts = tmp_path / "prompts.svg"  # --plot wants .svg or .png
    prompts.write_text('{"category": "chat", "turns": ["hi"]}\n', encoding="utf-8")
    before = prompts.read_text()
    result = bench(fake_pair, "--modes", "spec", "--ks", "1", "--prompts", str(prompts), option, str(prompts))
    assert result.exit_code == 2 and "is the --prompts file" in result.stderr, result.output
    history = tmp_path / "past.svg"
    history.write_text('{"turns": ["hello"]}\n', encoding="utf-8")
    result = bench(fake_pair, "--modes", "spec,suffix", "--history", str(history), option, str(history))
    assert result.exit_code == 2 and "is the --history file" in result.stderr, result.output
    assert prompts.read_text() == before and history.read_text() == '{"turns": ["hello"]}\n'


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_report_that_cannot_be_written_after_the_run_goes_to_stdout(fake_pair):
    """A disk that fills up during the run: exit 2 (a usage code) and the measured report was lost."""
    result = bench(fake_pair, "--modes", "ngram", "-f", "json", "-o", "/dev/full")
    assert result.exit_code == 1 and "cannot write /dev/full" in result.stderr, result.output
    assert "went to stdout" in result.stderr and json.loads(result.stdout)["samples"]


def test_output_and_plot_on_one_file_is_refused(fake_pair, tmp_path):
    same = tmp_path / "bench.svg"
    same.write_text("", encoding="utf-8")
    result = bench(fake_pair, "--modes", "spec", "--ks", "1", "-o", str(same), "--plot", str(same))
    assert result.exit_code == 2 and "is the --plot file" in result.stderr, result.output


def test_output_and_plot_on_one_new_file_is_refused(fake_pair, tmp_path):
    """Not there yet, the file got the report and then the plot over it, and both were said written."""
    result = bench(
        fake_pair, "--modes", "spec", "--ks", "1", "-o", str(tmp_path / "b.svg"), "--plot", str(tmp_path / "b.svg")
    )
    assert result.exit_code == 2 and "is the --plot file" in result.stderr, result.output
    assert not (tmp_path / "b.svg").exists()


def test_the_plot_has_the_draft_model_alone(fake_pair):
    """speedup_series put prompt lookup (k=8) and auto (k=64) on the draft model's line of each category."""
    result = two_variant_result()
    for variant, k, mode in (("ngram k=8", 8, "ngram"), ("auto", 64, "auto")):
        sample = Sample("p1", "code", variant, k, 0, 25.0, 10, 0.5, 0.1, 4, 8, 4, 0.0, 0.2, [1] * k, [1] * k, mode=mode)
        result.samples.append(sample)
    assert result.speedup_series() == {"code": [(2, 1.5)]}
    refused = bench(fake_pair, "--modes", "ngram,auto", "--plot", "bench.svg")
    assert refused.exit_code == 2 and "add spec to --modes" in refused.stderr


def test_the_table_cuts_no_cell_in_80_columns():
    """Piped (80 columns) or on a narrow terminal, Rich cut the labels: "revision tur…" for both turns,
    "ngram k…" and "suffix …"; now lines may be wider than that, but every cell is whole."""
    from rich.console import Console

    from specchat.tableview import bench_table

    result = BenchResult()
    for turn in (1, 2):
        for variant, k, mode in (("target", 0, "target"), ("ngram k=8", 8, "ngram"), ("suffix k=8", 8, "suffix")):
            sample = Sample("r", "revision", variant, k, 0, 123.4, 10, 0.5, 0.1, 4, 8, 4, 0.0, 0.2, [1], [1], mode=mode)
            sample.turn = turn
            result.samples.append(sample)
    out = io.StringIO()
    Console(file=out, width=80, soft_wrap=True).print(bench_table(result))
    text = out.getvalue()
    assert "…" not in text
    assert "revision turn 2" in text and "suffix k=8" in text and "123.4" in text
    # Not a column squeezed to nothing instead: `n` (a cell of one character) was gone in a pipe.
    assert "┃ n ┃" in text and all("│ 1 │" in line for line in text.splitlines() if "123.4" in line)


def test_a_category_called_all_is_refused(tmp_path):
    """The report's pooled row is "all": a category of that name gave two "all" rows, one of them pooled."""
    from specchat.benchsuite import load_prompts_file
    from specchat.errors import UsageError

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"category": "chat", "turns": ["hi"]}\n{"category": "all", "turns": ["ho"]}\n')
    with pytest.raises(UsageError, match='line 2: "category" all is'):
        load_prompts_file(prompts)


@pytest.mark.parametrize(
    ("name", "starts"), [("bench.csv", "category,variant,k,"), ("bench.json", "{"), ("b.txt", "| category")]
)
def test_output_with_the_table_is_written_in_the_format_its_name_says(fake_pair, tmp_path, name, starts):
    """-o bench.csv without -f wrote Markdown into it: the table goes to stdout, the file as its name ends."""
    result = bench(fake_pair, "--ks", "1", "--modes", "spec", "-o", str(tmp_path / name))
    assert result.exit_code == 0, result.output
    assert (tmp_path / name).read_text().startswith(starts)
    assert "specchat bench: target alone vs speculative" in result.stdout


def test_a_pair_beside_target_and_draft_is_said_to_be_unused(fake_pair):
    """--pair with --target and --draft was dropped without a word (export says so)."""
    result = bench(fake_pair, "--modes", "spec", "--ks", "1", "--pair", "qwen2.5-coder-7b", "-f", "json")
    assert result.exit_code == 0, result.output
    assert "pair qwen2.5-coder-7b is not used: --target and --draft name the files" in result.stderr


def test_a_first_prompt_that_nearly_fills_the_context_is_benched(fake_pair):
    """The report's cost model timed batches of up to 16 after the whole first prompt: one that fits with
    room for a short reply (59 tokens of 64) failed the bench before it began ("65 tokens do not fit in the
    context of 64"; on llama.cpp, 255 tokens at --ctx 64, whose context is 256)."""
    _folder, files = fake_pair
    record = {"category": "chat", "turns": ["x" * 40]}
    args = ["bench", *files, "--prompts", "-", "--modes", "ngram", "-r", "1", "-n", "2", "--ctx", "64", "-f", "json"]
    result = runner.invoke(app, args, input=json.dumps(record) + "\n")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cost_model"]["v"]


def test_every_report_says_that_n_counts_replies_and_the_interval_is_over_these_prompts(bench_run, fake_pair):
    """The table's footer named the 95% interval without saying over what, the Markdown file had no word on
    n or the interval, and the JSON's definitions none on n: n read as prompts, the interval as one that holds
    for other prompts too (docs/bench.md, "Reading each figure")."""
    _result, out, _plot = bench_run
    definitions = json.loads(out.read_text())["definitions"]
    assert "replies measured" in definitions["n"] and "not prompts" in definitions["n"]
    assert "not a length it chose" in definitions["k"]  # auto's k of 64 read as the length it drafted
    assert "not what other prompts would give" in definitions["speedup_low"]
    for args in ((), ("-f", "md")):
        shown = bench(fake_pair, "--modes", "spec", "--ks", "1", *args)
        assert shown.exit_code == 0, shown.output
        text = " ".join(shown.stdout.split())  # the table's footer wraps at the console's width
        assert "n = replies measured (the prompts' turns x repetitions)" in text, text
        assert "95% interval (CI) over these prompts' replies, not what other prompts would give" in text


def test_every_report_says_what_its_model_columns_are(fake_pair):
    """The footer defined n, tok/s and the speedup, but not S(k), S(t/r), acc/rnd or draft%: a first reader saw
    "speedup 0.63x" beside "S(k) 0.76x" with nothing on the screen to say which was measured."""
    for args in ((), ("-f", "md")):
        shown = bench(fake_pair, "--modes", "spec", "--ks", "1", *args)
        assert shown.exit_code == 0, shown.output
        text = " ".join(shown.stdout.split())
        assert "S(k), S(t/r) = the speedup the cost model predicts" in text, text
        assert "acc/rnd = accepted draft tokens per round" in text and "draft% = " in text
        assert "docs/bench.md, 'Reading each figure'" in text


@pytest.mark.parametrize("modes", ["ngram", "ngram,suffix"])
def test_a_draft_no_mode_measured_drafts_with_is_noted_and_not_loaded(fake_pair, modes):
    """`bench --target T --draft D --modes ngram` loaded D, which nothing measured drafted with, without a word
    (its step timed for the cost model's c): as `run --mode ngram --draft D`, it is noted and not loaded."""
    result = bench(fake_pair, "--modes", modes, "-f", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert "draft" not in data["meta"]["files"] and data["cost_model"]["c"] is None
    how = "does not draft with the draft model (it is not loaded)"
    assert f"--draft draft.fake.gguf is not used: --modes {modes} {how}" in result.stderr


@pytest.mark.parametrize(("modes", "loaded"), [("ngram,suffix", False), ("auto", True), ("spec", True)])
def test_a_pairs_draft_is_loaded_only_where_a_mode_measured_drafts_with_it(fake_pair, monkeypatch, modes, loaded):
    """`bench PAIR --modes ngram` loaded (or pulled) the pair's draft model, which nothing measured used."""
    from specchat import runtime

    _folder, files = fake_pair
    target, draft = Path(files[1]), Path(files[3])
    wanted = lambda options, *_: runtime.Resolved("fake", target, draft if options.wants_draft else None)  # noqa: E731
    monkeypatch.setattr(runtime, "resolve", wanted)
    args = ["bench", "--suite", "tiny", "-r", "1", "-n", "8", "-f", "json", "--modes", modes]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert ("draft" in json.loads(result.stdout)["meta"]["files"]) == loaded and "--draft" not in result.stderr


@pytest.mark.parametrize("option", ["--prompts", "--history"])
def test_a_comma_after_each_object_is_named_as_such(tmp_path, option):
    """A JSON array's lines without its brackets (each object followed by a comma) were "not valid JSON (Extra
    data)", and so was a comment after an object: neither said what was in the way, nor where."""
    path = tmp_path / "commas.jsonl"
    path.write_text('{"category": "chat", "turns": ["hi"]},\r\n{"category": "chat", "turns": ["ho"]}\n')
    result = runner.invoke(app, ["bench", "--modes", "suffix", option, str(path), "--target", str(tmp_path / "x.gguf")])
    assert result.exit_code == 2, result.output
    assert f"{path}, line 1: a comma after the JSON value" in result.stderr
    assert "delete the comma at the end of each line" in result.stderr and "Extra data" not in result.stderr
    path.write_text('{"category": "chat", "turns": ["hi"]}  // the first one\n')
    result = runner.invoke(app, ["bench", "--modes", "suffix", option, str(path)])
    assert result.exit_code == 2, result.output
    assert "line 1: not valid JSON (more after the JSON value, at column 40: '// the first one')" in result.stderr


def test_markdown_columns_are_aligned_and_numbers_right_aligned():
    """-f md wrote `|---|` under every column and no padding: rendered, the numbers were left-aligned (the table on
    the terminal right-aligns them, as llama-bench's Markdown does), and read as text the columns zigzagged."""
    result = BenchResult()
    for category, variant, k, tps in (("code", "target", 0, 20.0), ("code", "k=2", 2, 30.0), ("café", "k=2", 2, 7.5)):
        result.samples.append(
            Sample(
                "p1", category, variant, k, 0, tps, 10, 0.5, 0.1, 4, 2 * k, k, 0.1, 0.2, [k and 2] * k, [k and 1] * k
            )
        )
    table = [line for line in render(result, "md").splitlines() if line.startswith("|")]
    assert len({len(line) for line in table}) == 1, table  # every row as wide: the column bars line up
    assert [len(line.split("|")) for line in table] == [len(table[0].split("|"))] * len(table)
    rule = table[1].strip("|").split("|")
    assert set(rule[0]) == set(rule[1]) == {"-"}  # category, variant: left
    assert all(cell.endswith("-:") for cell in rule[2:]), rule  # n, tok/s, speedup, ...: right
    assert "| café     | k=2     | 1 |   7.5 |       - |" in "\n".join(table)  # "café" is 4 cells wide, as "code"


def test_an_interrupted_report_to_a_file_is_said_to_be_partial(fake_pair, tmp_path, monkeypatch):
    """Ctrl-C with -f csv -o FILE said "wrote FILE", then "interrupted": CSV has no place for the mark JSON and
    Markdown carry, so the file passed for a whole report, and nothing said it was not."""
    ctrl_c_at_the_seventh_reply(monkeypatch)
    out = tmp_path / "partial.csv"
    result = bench(fake_pair, "--ks", "1", "--modes", "spec,ngram", "-f", "csv", "-o", str(out))
    assert result.exit_code == 130
    assert f"wrote {out}, interrupted (Ctrl-C): it holds only what was measured before it" in result.stderr
    assert out.read_text().startswith("category,")


@pytest.mark.parametrize("option", ["--target", "--draft"])
def test_a_report_over_a_model_file_is_refused(fake_pair, tmp_path, option):
    """-o naming the --target (or --draft) file replaced the model with the report after the run, without a word,
    as the guard above already kept the --prompts and --history files from it."""
    _folder, files = fake_pair
    at = files.index(option) + 1
    model = tmp_path / "model.fake.gguf"
    model.write_bytes(Path(files[at]).read_bytes())
    given = [*files[:at], str(model), *files[at + 1 :]]
    result = runner.invoke(app, ["bench", *given, "--suite", "tiny", "-r", "1", "-n", "4", "-o", str(model)])
    assert result.exit_code == 2 and f"is the {option} file" in result.stderr, result.output
    assert model.read_bytes() == Path(files[at]).read_bytes()


def test_a_markdown_report_says_the_lossless_check():
    """-f md (a report pasted into an issue) held the table and its notes, but not the lossless check: a MISMATCH
    showed on the terminal and in JSON, and the Markdown file passed for a clean run."""
    result = BenchResult()
    for variant, k, lossless in (("target", 0, "reference"), ("k=2", 2, "MISMATCH"), ("ngram", 4, "equal")):
        sample = Sample("p1", "code", variant, k, 0, 20.0, 10, 0.5, 0.1, 4, 2 * k, k, 0.1, 0.2, [k] * k, [1] * k)
        sample.lossless = lossless
        result.samples.append(sample)
    text = render(result, "md")
    assert "*lossless check: 2 greedy outputs vs target alone: 1 equal, 0 diverged at a near-tie, 1 mismatches*" in text
    result.samples = [s for s in result.samples if s.lossless == "reference"]  # sampled: nothing compared, no line
    assert "lossless check" not in render(result, "md")


@pytest.mark.parametrize(
    ("code", "words", "hint"),
    [("ENOSPC", "No space left on device", "free some space or choose"), ("EROFS", "Read-only file system", "choose")],
)
def test_a_plot_that_cannot_be_written_is_one_line_and_keeps_the_old_file(
    fake_pair, tmp_path, monkeypatch, code, words, hint
):
    """A disk that filled up during the run: `--plot` was an internal error with a traceback's hint, the table on
    stdout was lost, and the plot file there before was left empty (matplotlib writes it in place). The hint
    speaks of space only where the disk is full."""
    import errno
    import os

    plot = tmp_path / "bench.svg"
    plot.write_text("<svg>the last run's</svg>", encoding="utf-8")

    from matplotlib.figure import Figure

    def no_space(*_args, **_kwargs):
        raise OSError(getattr(errno, code), words)

    def savefig(figure, target, **kwargs):  # a file on the full disk: opened (truncated), then the write fails
        if isinstance(target, str | os.PathLike):
            open(target, "wb").close()
            no_space()
        return original(figure, target, **kwargs)

    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", savefig)
    monkeypatch.setattr(os, "replace", no_space)
    result = bench(fake_pair, "--modes", "spec", "--ks", "1", "--plot", str(plot))
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot write {plot}: {words}"), lines
    assert f"hint: {hint} another --plot path" in lines[0] and "internal error" not in result.stderr, result.stderr
    assert "speedup" in result.stdout  # the table measured is still shown
    assert plot.read_text(encoding="utf-8") == "<svg>the last run's</svg>"
    assert [p.name for p in tmp_path.iterdir()] == ["bench.svg"]


def test_the_machine_records_the_cpus_the_run_could_use(fake_pair, tmp_path, monkeypatch):
    """Under `taskset -c 0` on 2 CPUs the report said `cpus: 2, threads: 1`: read later, nothing told the CPUs
    were restricted, not the threads chosen low."""
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    out = tmp_path / "bench.json"
    result = bench(fake_pair, "--modes", "spec", "--ks", "1", "-f", "json", "-o", str(out))
    assert result.exit_code == 0, result.output
    machine = json.loads(out.read_text())["meta"]["machine"]
    assert machine["usable_cpus"] == 1 and machine["cpus"] == os.cpu_count()
