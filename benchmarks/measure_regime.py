"""Measure this machine's cost regime (c, v(n), seconds per target step) for benchmarks/simulate.py.

Uses specchat's own interleaved calibration (costmeasure.measure) with more sizes and repeats than a
first run takes, and adds what a round costs beside the model: copying n rows of logits out of
llama.cpp and picking the greedy token from them. Writes a JSON regime that
`simulate.py --regime-file` replays the recorded traces under.

    python benchmarks/measure_regime.py --target T.gguf --draft D.gguf --name my-gpu -o regime.json

Time it on a quiet machine only (nothing else running). Works with weight-free models
(benchmarks/skeleton_gguf.py) where the kernels' time does not depend on the values: GPUs.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from specchat.costmeasure import measure  # noqa: E402
from specchat.engine import Engine, gpu_offload_supported  # noqa: E402
from specchat.engineconfig import EngineConfig  # noqa: E402
from specchat.tunemeasure import CALIBRATION_TEXT, FULL_BATCHES  # noqa: E402

SIZES = (*FULL_BATCHES, 96, 128)


def round_overhead(target: Engine, context: list[int], n: int, repeats: int) -> dict[str, float]:
    """Seconds of a verify of n tokens asking for n rows of logits vs one row, and of n greedy picks."""
    probe = (context * (n // len(context) + 1))[:n]
    base = len(context)
    all_rows, one_row, picks = [], [], []
    for _ in range(repeats):
        for rows, out in ((n, all_rows), (1, one_row)):
            target.truncate(base)
            start = time.perf_counter()
            logits = target.eval(probe, rows)
            out.append(time.perf_counter() - start)
            if rows == n:
                every_row = logits
        start = time.perf_counter()
        np.argmax(every_row, axis=1)
        picks.append(time.perf_counter() - start)
    target.truncate(base)
    return {
        "n": n,
        "verify_all_rows_s": statistics.median(all_rows),
        "verify_one_row_s": statistics.median(one_row),
        "argmax_rows_s": statistics.median(picks),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--name", default=platform.node() or "measured")
    parser.add_argument("--about", default="")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args(argv)

    config = EngineConfig(n_ctx=4096)
    with Engine(args.target, config) as target, Engine(args.draft, config) as draft:
        context = target.tokenize(CALIBRATION_TEXT)
        measure(target, draft, context, (1, 8), repeats=1)  # warm-up: first batches allocate and build graphs
        costs = measure(target, draft, context, SIZES, repeats=args.repeats)
        overhead = [round_overhead(target, context, n, args.repeats) for n in (1, 8, 16, 64)]
    regime = {
        "name": args.name,
        "about": args.about or f"measured on {platform.node()} with benchmarks/measure_regime.py",
        "c": round(costs.draft_step or 0.0, 4),
        "points": {str(n): round(v, 4) for n, v in sorted(costs.verify.items())},
        "step_s": costs.step_s,
        "busy": costs.busy,
        "gpu_offload": gpu_offload_supported(),
        "overhead": overhead,
    }
    text = json.dumps(regime, indent=1)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
