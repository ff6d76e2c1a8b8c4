"""benchmarks/skeleton_gguf.py (weight-free GGUF copies) and the measured regimes simulate.py replays."""

from __future__ import annotations

import ast
import gzip
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from test_gguf import tiny_gguf

from specchat import gguf

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))


def test_every_name_the_scripts_import_from_specchat_exists():
    # the scripts import inside their functions too (llama_server.py's download_progress did, after it had moved
    # to downloadbar.py): loading a script does not run those lines, so each one is read and looked up
    missing = []
    for script in sorted(BENCHMARKS.glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specchat"):
                module = importlib.import_module(node.module)
                missing += [f"{script.name}: {node.module}.{a.name}" for a in node.names if not _has(module, a.name)]
    assert missing == []


def _has(module, name: str) -> bool:
    """`from module import name` works: an attribute, or a submodule (`from specchat import download`), which is
    an attribute only once something has imported it."""
    return hasattr(module, name) or importlib.util.find_spec(f"{module.__name__}.{name}") is not None


def test_skeleton_keeps_the_header_and_zeroes_the_weights(tmp_path):
    skeleton = load("skeleton_gguf")
    source = tmp_path / "m.gguf"
    source.write_bytes(tiny_gguf(offset2=64))
    skeleton.main(["make", str(source), str(tmp_path / "m.skel")])
    skeleton.main(["inflate", str(tmp_path / "m.skel"), str(tmp_path / "out.gguf")])
    data, original = (tmp_path / "out.gguf").read_bytes(), source.read_bytes()
    start = skeleton.data_start(source)
    assert len(data) == len(original) and start < len(original)
    assert data[:start] == original[:start]  # metadata, tokenizer and tensor table unchanged
    assert data[start:] == b"\0" * (len(original) - start) and original[start:] != data[start:]
    gguf.check(tmp_path / "out.gguf")  # every tensor still inside the file
    assert gguf.metadata(tmp_path / "out.gguf") == gguf.metadata(source)


def test_inflate_refuses_what_it_did_not_make(tmp_path):
    skeleton = load("skeleton_gguf")
    (tmp_path / "x.skel").write_bytes(b"GGUF not a skeleton")
    with pytest.raises(SystemExit, match="not a skeleton"):
        skeleton.main(["inflate", str(tmp_path / "x.skel"), str(tmp_path / "out.gguf")])
    assert not (tmp_path / "out.gguf").exists()


def test_every_measured_regime_loads_and_is_plausible():
    sim = load("simulate")
    files = sorted((BENCHMARKS / "regimes").glob("*.json"))
    assert files, "benchmarks/regimes/ holds the measured machines"
    for path in files:
        regime = sim.load_regime(path)
        assert regime.v(1) == pytest.approx(1.0) and 0 < regime.c < 1.5 and regime.step_s > 0
        assert regime.v(64) > regime.v(8) > 1.0  # a batch costs more than one step, and more with more tokens
        assert json.loads(path.read_text())["busy"] is False  # only quiet measurements are kept


@pytest.mark.real
def test_a_skeleton_of_the_real_target_loads_in_llama_cpp(default_pair_paths, tmp_path):
    """What a GPU machine runs in place of the model: same tensors, same graph, weights zero, so every
    logit is 0 and greedy picks token 0."""
    from specchat.engine import Engine
    from specchat.engineconfig import EngineConfig

    skeleton = load("skeleton_gguf")
    target, _draft = default_pair_paths
    skeleton.main(["make", str(target), str(tmp_path / "t.skel")])
    assert (tmp_path / "t.skel").stat().st_size < target.stat().st_size // 50
    skeleton.main(["inflate", str(tmp_path / "t.skel"), str(tmp_path / "t.gguf")])
    with Engine(tmp_path / "t.gguf", EngineConfig(n_ctx=256)) as engine:
        tokens = engine.tokenize("def add(a, b):")
        logits = engine.eval(tokens, 2)
        assert logits.shape == (2, engine.n_vocab) and not logits.any()
        assert int(logits[-1].argmax()) == 0


@pytest.mark.real
def test_a_requantized_draft_is_measured_beside_the_pulled_one(default_pair_paths, tmp_path, capsys):
    """benchmarks/draft_quant.py: a Q4_0 copy of the real draft is made, loads, is timed and is compared
    with the target on a trace; the table has a row for each draft."""
    draft_quant = load("draft_quant")
    target, draft = default_pair_paths
    with pytest.raises(SystemExit) as refused:
        draft_quant.main(["--types", "q3_k"])  # a type the script does not know
    assert refused.value.code == 2  # argparse's usage error, before any model is looked for
    traces = tmp_path / "traces"
    traces.mkdir()
    from specchat.engine import Engine
    from specchat.engineconfig import EngineConfig

    with Engine(target, EngineConfig(n_ctx=256)) as engine:
        prompt = engine.tokenize("def add(a, b):\n")
        reply = [int(engine.eval(prompt, 1)[0].argmax())]  # the target's own first token, then 7 more
        for _ in range(7):
            reply.append(int(engine.eval(reply[-1:], 1)[0].argmax()))
    with gzip.open(traces / "t.jsonl.gz", "wt") as out:
        out.write(json.dumps({"prompt": prompt, "target": reply}) + "\n")
    kept = tmp_path / "kept"
    draft_quant.main(["--types", "q4_0", "--traces", str(traces), "--repeats", "1", "--keep", str(kept)])
    copy = kept / f"{draft.stem}.q4_0.gguf"
    assert copy.stat().st_size < draft.stat().st_size
    assert gguf.metadata(copy)["general.file_type"] == 2  # LLAMA_FTYPE_MOSTLY_Q4_0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith(("| as pulled |", "| q4_0 |"))]
    assert len(rows) == 2 and all("of 8 |" in row for row in rows)


@pytest.mark.real
def test_traces_record_the_drafts_confidence_and_old_traces_get_the_same(default_pair_paths):
    """benchmarks/record_traces.py on the real pair: each guess comes with the draft's probability of it,
    and a record made before `conf` existed gets the same numbers by following its paths again."""
    record_traces = load("record_traces")
    from specchat.engine import Engine
    from specchat.engineconfig import EngineConfig

    target_path, draft_path = default_pair_paths
    with Engine(target_path, EngineConfig(n_ctx=512)) as target, Engine(draft_path, EngineConfig(n_ctx=512)) as draft:
        prompt = target.tokenize("def fibonacci(n):\n    ")
        tokens, end = record_traces.greedy_continuation(target, prompt, 12)
        guesses, conf = record_traces.draft_guesses(draft, prompt, tokens, end)
        assert [len(row) for row in conf] == [len(row) for row in guesses]
        assert all(0.0 < p <= 1.0 for row in conf for p in row)
        assert any(p < 0.99 for row in conf for p in row)  # not a constant: the draft is unsure somewhere
        again, flipped = record_traces.draft_confidences(
            draft, {"prompt": prompt, "target": tokens, "guesses": guesses}
        )
    assert flipped == 0
    assert again == conf


def test_history_index_bench_measures_a_small_history_and_skips_cold_opens_it_cannot_make(monkeypatch, tmp_path):
    """benchmarks/history_index.py: one small history end to end; where the page cache cannot be dropped
    (not root), the cold opens are skipped (None), never timed warm and reported as cold."""
    bench = load("history_index")
    row = bench.measure(30_000)
    assert row["tokens"] >= 30_000 and row["open_s_median"] > 0 and row["cold_open_s"] is None
    assert row["disk_bytes"] > 0 and row["lookup_hit_ms_median"] > 0
    real = Path.write_text

    def refuse(path, *args, **kwargs):
        if str(path) == "/proc/sys/vm/drop_caches":
            raise PermissionError(13, "Permission denied")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", refuse)
    index, _, _ = bench.build(tmp_path / "h", 30_000)
    assert bench.cold_opens(tmp_path / "h", index.meta.capacity, 2) is None


def test_infill_session_splits_a_buffer_as_llama_vim_does():
    # llama.vim's s:fim_ctx_local: prefix the lines before the cursor line, `prompt` that line up to the cursor,
    # suffix the rest of it and the lines after, n_indent the line's leading whitespace
    infill = load("infill_session")
    text = "def f(x):\n    y = x + 1\n    return y\n\n\nprint(f(2))\n"
    buffer, y, x, middle = infill.cut(text, "    y = ", 1)
    assert (y, x, middle) == (1, 8, "x + 1\n    return y")
    assert buffer == ["def f(x):", "    y = ", "", "", "print(f(2))"]  # no empty line after the last: getline()
    context = infill.llama_vim_context(buffer, y, x)
    assert context == {"prefix": "def f(x):\n", "prompt": "    y = ", "suffix": "\n\n\nprint(f(2))\n", "indent": 4}
    assert infill.llama_vim_context(buffer, y, x, n_prefix=0, n_suffix=1)["prefix"] == "\n"
    assert infill.llama_vim_context(buffer, y, x, n_prefix=0, n_suffix=1)["suffix"] == "\n\n"
    # a line of whitespace: llama.vim sends it as an empty prompt, at indent 0
    blank = infill.llama_vim_context(["if a:", "\t  ", "b"], 1, 3)
    assert blank == {"prefix": "if a:\n", "prompt": "", "suffix": "\nb\n", "indent": 0}
    with pytest.raises(SystemExit, match="occurs 2 times"):
        infill.cut(text, "y", 0)


def test_infill_session_builds_every_position_and_llama_vims_body():
    infill = load("infill_session")
    plan = infill.sessions([], None, 128, 0)
    assert len(plan) >= 3
    for name, (ring, completions) in plan.items():
        assert ring["n_predict"] == 0 and ring["input_extra"] == completions[0].body["input_extra"]
        assert 2 <= len(ring["input_extra"]) <= 3 and name not in {c["filename"] for c in ring["input_extra"]}
        assert 6 <= len(completions) <= 10
        for completion in completions:
            body = completion.body
            assert (body["n_predict"], body["temperature"], body["top_k"], body["t_max_predict_ms"]) == (128, 0, 1, 0)
            assert "response_fields" not in body  # the reply keeps its timings and speculative objects whole
            whole = body["input_prefix"] + body["prompt"] + completion.expected + body["input_suffix"]
            assert whole in (infill.FILES / name).read_text() + "\n"  # nothing lost or doubled at the cut
