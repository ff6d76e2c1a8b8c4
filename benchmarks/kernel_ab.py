"""What llama.cpp's tiled K-quant matmul costs a speculative round here: target timings with it on and off.

    python benchmarks/kernel_ab.py                        # the default pair's target, 3 rounds
    python benchmarks/kernel_ab.py --target T.gguf --rounds 5 --sizes 1,4,8,12,16,32

llama.cpp (since the version llama-cpp-python 0.3.36 vendors) multiplies K-quant weights that its CPU
backend does not repack (on x86: Q6_K, Q5_K, Q3_K, Q2_K; Q4_K is repacked) with a tiled kernel once a
batch has 8 rows or more (`ggml/src/ggml-cpu/tiled/`). A verify batch of 8-16 tokens is exactly such a
batch. The switch is an environment variable, `GGML_CPU_TILED_MM` (0 = off), that llama.cpp reads once
per process, so each setting is timed in a process of its own, alternating, and the medians are
compared: a single step (what the target alone pays per token), verify batches of n tokens with
logits for every row (what a round pays), and a prefill of 1,024 tokens in chunks of 256 (time to
first token). Nothing in specchat sets the variable; this measures whether a machine gains from it.

Time it on a quiet machine only (nothing else running): each child loads the model (seconds) and
times for about half a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SETTINGS = {"tiled (llama.cpp's default)": {}, "GGML_CPU_TILED_MM=0": {"GGML_CPU_TILED_MM": "0"}}
CONTEXT = 300  # tokens in the cache before every timed batch, as in a short chat
PREFILL = 1024
CHUNK = 256  # specchat's prompt chunk (EngineConfig.n_batch)


def child(target: Path, sizes: list[int], repeats: int) -> dict:
    """Medians in ms, in this process's kernel setting."""
    from specchat.engine import Engine
    from specchat.engineconfig import EngineConfig

    with Engine(target, EngineConfig(n_ctx=2048, n_threads=0)) as engine:
        engine.eval(list(range(1000, 1000 + CONTEXT)), 1)
        probe = list(range(2000, 2000 + max(sizes)))
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for _ in range(repeats):
            for n in sizes:  # interleaved, so drift hits every size alike
                start = time.perf_counter()
                engine.eval(probe[:n], n)
                times[n].append(time.perf_counter() - start)
                engine.truncate(CONTEXT)
        engine.truncate(0)
        prefill = []
        for _ in range(2):
            start = time.perf_counter()
            for at in range(0, PREFILL, CHUNK):
                engine.eval(list(range(1000 + at, 1000 + at + CHUNK)), 1)
            prefill.append(time.perf_counter() - start)
            engine.truncate(0)
    out = {f"v{n}": statistics.median(t) * 1000 for n, t in times.items()}
    out["prefill"] = min(prefill) * 1000
    return out


def default_target() -> Path:
    from specchat.download import locate
    from specchat.registry import load_registry

    found = locate(load_registry().pair(None).target)
    if found is None:
        raise SystemExit("the default pair's target is not on this machine: run `specchat pull` first, or --target")
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path)
    parser.add_argument("--sizes", default="1,2,4,6,8,10,12,14,15,16,24,32")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="processes per setting, alternating")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    target = args.target or default_target()
    if args.child:
        print(json.dumps(child(target, sizes, args.repeats)))
        return
    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):
        for name, env in SETTINGS.items():
            command = [sys.executable, __file__, "--child", "--target", str(target), "--sizes", args.sizes]
            command += ["--repeats", str(args.repeats)]
            done = subprocess.run(command, env=os.environ | env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    on, off = (runs[name] for name in SETTINGS)
    print(f"{target.name}: medians over {args.rounds} processes per setting, ms")
    print("| | tiled | off | off / tiled |\n|---|---|---|---|")
    for key in [f"v{n}" for n in sizes] + ["prefill"]:
        a, b = (statistics.median(run[key] for run in runs) for runs in (on, off))
        label = f"prefill {PREFILL} tokens" if key == "prefill" else f"batch of {key[1:]}"
        print(f"| {label} | {a:.1f} | {b:.1f} | {b / a:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
