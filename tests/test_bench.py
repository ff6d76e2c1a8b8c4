"""`specchat bench` on the real default pair (tiny suite, few tokens) and its input errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specchat.bench import BenchResult, Sample, render
from specchat.cli import app
from specchat.costmodel import CostModel, expected_tokens

runner = CliRunner()


@pytest.fixture(scope="module")
def bench_run(default_pair_paths, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    out, plot = folder / "bench.json", folder / "bench.svg"
    result = runner.invoke(
        app,
        [
            "bench",
            "--suite",
            "tiny",
            "-r",
            "2",
            "-n",
            "12",
            "--ks",
            "1,3",
            "-f",
            "json",
            "-o",
            str(out),
            "--plot",
            str(plot),
        ],
    )
    return result, out, plot


@pytest.mark.real
def test_bench_json_has_every_field(bench_run):
    result, out, plot = bench_run
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data) >= {"meta", "definitions", "cost_model", "summary", "lossless", "peak_rss_mb", "samples"}
    meta = data["meta"]
    assert meta["llama_cpp_python"] and meta["machine"]["cpu"] and meta["machine"]["threads"] >= 1
    assert len(meta["files"]["target"]["sha256"]) == 64 and len(meta["files"]["draft"]["sha256"]) == 64
    assert meta["settings"]["ks"] == [1, 3] and meta["settings"]["reps"] == 2
    cost = data["cost_model"]
    assert cost["c"] > 0 and set(cost["v"]) == {str(n) for n in range(1, 17)}
    assert data["peak_rss_mb"] > 100
    variants = {(row["category"], row["variant"]) for row in data["summary"]}
    names = ("target", "k=1", "k=3", "ngram k=8", "auto")  # default --modes spec,ngram,auto
    assert variants == {(c, v) for c in ("code", "chat", "all") for v in names}
    for row in data["summary"]:
        if row["variant"] in ("k=1", "k=3"):
            assert 0 <= row["acceptance_rate"] <= 1 and len(row["position_acceptance"]) == row["k"]
            assert row["predicted_speedup"] > 0 and row["cost_model_speedup"] > 0
    assert plot.read_text().lstrip().startswith(("<?xml", "<svg"))


@pytest.mark.real
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


@pytest.mark.real
def test_lossless_check_ran(bench_run):
    _, out, _ = bench_run
    lossless = json.loads(out.read_text())["lossless"]
    assert lossless["checked"] == 2 * 2 * 4  # prompts x reps x (k=1, k=3, ngram, auto)
    assert lossless["MISMATCH"] == 0
    assert lossless["equal"] + lossless["near-tie"] == lossless["checked"]


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
        ('{"category": "chat", "turns": ["hi"]}\n\n{"turns": ["x"]}\n', 'line 3: missing "category"'),
        ('{"category": "chat", "turns": []}\n', 'line 1: "turns" must be a list'),
        ("[1, 2]\n", "line 1: expected a JSON object"),
    ],
)
def test_bad_prompts_file(tmp_path, content, needle):
    path = tmp_path / "prompts.jsonl"
    path.write_text(content)
    result = runner.invoke(app, ["bench", "--prompts", str(path)])
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and str(path) in result.stderr


def test_missing_prompts_file(tmp_path):
    result = runner.invoke(app, ["bench", "--prompts", str(tmp_path / "absent.jsonl")])
    assert result.exit_code == 2 and "prompts file not found" in result.stderr


def test_expected_tokens_and_prediction():
    assert expected_tokens(0.0, 4) == 1.0 and expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    cost = CostModel(0.04, 0.01, {n: 0.04 * (1 + 0.05 * (n - 1)) for n in range(1, 17)})
    assert cost.c == pytest.approx(0.25)
    assert cost.predicted_speedup(0.8, 4) == pytest.approx(expected_tokens(0.8, 4) / (4 * 0.25 + 1.2))


def test_text_formats_from_samples():
    result = BenchResult()
    for variant, k, tps in (("target", 0, 20.0), ("k=2", 2, 30.0)):
        result.samples.append(
            Sample("p1", "code", variant, k, 0, tps, 10, 0.5, 0.1, 4, 2 * k, k, 0.1, 0.2, [k and 2] * k, [k and 1] * k)
        )
    md = render(result, "md")
    assert "| code | k=2 | 1 | 30.0 | 1.50x |" in md
    csv_text = render(result, "csv")
    assert csv_text.splitlines()[0].startswith("category,variant,k,n,tokens_per_s,speedup")
    lines = render(result, "jsonl").splitlines()
    assert json.loads(lines[0])["type"] == "sample" and json.loads(lines[-1])["type"] == "summary"
