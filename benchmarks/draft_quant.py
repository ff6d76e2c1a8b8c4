"""What the draft model's file format costs: its step time and how often it agrees with the target,
for the draft as pulled and for copies of it requantized by llama.cpp's own quantizer.

    nice -n 19 python benchmarks/draft_quant.py                       # the default pair, Q4_0
    python benchmarks/draft_quant.py --types q4_0,iq4_nl --traces benchmarks/traces --repeats 7

Why: a draft step is pure overhead, and on a CPU its cost depends on the file format more than on the
parameter count. The default pair's 0.5B "Q4_K_M" draft is mostly Q5_0 and Q8_0 (its 896-wide rows do
not fit k-quant blocks), which llama.cpp's CPU backend does not repack; Q4_0 it does. Only the draft
changes, never the target, so the output stays the target's (a worse draft only means fewer accepted
guesses); this script measures both sides of that trade.

Step time: single-token evals after a short code prompt, all models interleaved in every repeat, the
median per model (never run it beside anything else: timings taken under load are 2-4x off).
Agreement: teacher-forced, on recorded traces (benchmarks/record_traces.py): at every position of the
target's greedy reply, whether the draft's arg-max is the target's token. Nothing in the repository is
written; the copies go to a temporary folder (or --keep DIR).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from specchat.download import locate
from specchat.engine import Engine
from specchat.engineconfig import EngineConfig
from specchat.registry import load_registry

HERE = Path(__file__).resolve().parent
TYPES = {"q4_0": 2, "q8_0": 7, "iq4_nl": 25}  # llama_ftype values (llama.h)
CODE = 'def fibonacci(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n' * 8
STEPS = 16  # single-token evals per model per repeat


def requantize(source: Path, out: Path, kind: str) -> float:
    """A copy of `source` with every tensor in `kind` (pure: the output layer too); seconds taken."""
    import llama_cpp  # the quantizer is not part of specchat's engine: only this measurement uses it

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = TYPES[kind]
    params.allow_requantize = True  # from an already quantized file: a draft may lose a little
    params.pure = True
    started = time.perf_counter()
    if llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params) != 0:
        raise SystemExit(f"llama.cpp could not requantize {source.name} to {kind}")
    return time.perf_counter() - started


def step_times(engines: dict[str, Engine], repeats: int) -> dict[str, float]:
    """Median seconds of one single-token eval per model, interleaved across models in every repeat."""
    samples: dict[str, list[float]] = {name: [] for name in engines}
    prompts = {name: engine.tokenize(CODE) for name, engine in engines.items()}
    for _ in range(repeats + 1):  # the first repeat warms up (graph building, page cache) and is dropped
        for name, engine in engines.items():
            tokens = prompts[name]
            engine.truncate(0)
            engine.eval(tokens[:-STEPS], 1)
            times = []
            for token in tokens[-STEPS:]:
                started = time.perf_counter()
                engine.eval([token], 1)
                times.append(time.perf_counter() - started)
            samples[name].append(statistics.median(times))
    return {name: statistics.median(values[1:]) for name, values in samples.items()}


def agreement(engine: Engine, traces: list[dict]) -> tuple[int, int]:
    """(positions where the draft's arg-max is the target's token, positions)."""
    hits = total = 0
    for trace in traces:
        prompt, reply = trace["prompt"], trace["target"]
        engine.truncate(0)
        guesses = [engine.eval(prompt, 1)[0].argmax()]
        step = engine.config.n_batch  # logits for at most one batch at a time
        for start in range(0, len(reply) - 1, step):
            chunk = reply[start : min(start + step, len(reply) - 1)]
            guesses += list(engine.eval(chunk, len(chunk)).argmax(axis=-1))
        hits += int((np.asarray(guesses) == np.asarray(reply)).sum())
        total += len(reply)
    return hits, total


def load_traces(folder: Path, n_ctx: int, limit: int) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*.jsonl.gz")):
        with gzip.open(path, "rt") as lines:
            out += [json.loads(line) for line in lines]
    fitting = [t for t in out if t["target"] and len(t["prompt"]) + len(t["target"]) < n_ctx]
    return fitting[:limit] if limit else fitting


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, help="default: the default pair's target")
    parser.add_argument("--draft", type=Path, help="default: the default pair's draft")
    parser.add_argument("--types", default="q4_0", help="comma-separated: " + ", ".join(TYPES))
    parser.add_argument("--traces", type=Path, default=HERE / "traces")
    parser.add_argument("--max-traces", type=int, default=0, help="0: all that fit the context")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="write the requantized copies here (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.max_traces < 0:
        parser.error("--repeats must be at least 1 and --max-traces at least 0")
    kinds = [kind for kind in args.types.split(",") if kind]
    unknown = [kind for kind in kinds if kind not in TYPES]
    if unknown:
        parser.error(f"unknown type {unknown[0]!r}: choose from {', '.join(TYPES)}")
    pair = load_registry().pair(None)
    target_path = args.target or locate(pair.target)
    draft_path = args.draft or locate(pair.draft)
    if target_path is None or draft_path is None:
        raise SystemExit("the default pair is not downloaded: run `specchat pull` first, or give --target and --draft")

    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        config = EngineConfig(n_ctx=4096)
        traces = load_traces(args.traces, config.n_ctx, args.max_traces)
        engines = {"target": Engine(target_path, config)}  # first: it also quiets llama.cpp's log
        try:
            files = {"as pulled": draft_path}
            made: dict[str, float] = {}
            for kind in kinds:
                files[kind] = folder / f"{draft_path.stem}.{kind}.gguf"
                made[kind] = requantize(draft_path, files[kind], kind)
            engines |= {name: Engine(path, config) for name, path in files.items()}
            steps = step_times(engines, args.repeats)
            agreed = {name: agreement(engines[name], traces) for name in files}
        finally:
            for engine in engines.values():
                engine.close()
        print(f"target {target_path.name}: {steps['target'] * 1000:.1f} ms a step; {len(traces)} traces")
        print_table(files, made, steps, agreed)


def print_table(files: dict[str, Path], made: dict[str, float], steps: dict[str, float], agreed) -> None:
    """One markdown row per draft (printed while the copies still exist: their sizes are read)."""
    print("| draft | size | made in | step | c (target steps) | agrees with the target |")
    print("|---|---|---|---|---|---|")
    for name, path in files.items():
        hits, total = agreed[name]
        made_in = f"{made[name]:.1f} s" if name in made else "-"
        print(
            f"| {name} | {path.stat().st_size / 2**20:.0f} MiB | {made_in} | {steps[name] * 1000:.1f} ms "
            f"| {steps[name] / steps['target']:.2f} | {hits / max(total, 1):.1%} of {total} |"
        )


if __name__ == "__main__":
    sys.exit(main())
