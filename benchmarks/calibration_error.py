"""What a calibration that is off costs auto: recorded traces replayed (benchmarks/simulate.py) with auto
deciding on wrong batch costs while the machine runs the regime's true ones.

    python benchmarks/calibration_error.py --regime-file benchmarks/regimes/zen4b-2core.json
    python benchmarks/calibration_error.py --traces benchmarks/new-traces --cv 0.2 --seeds 10

A single timed batch on a 2-core VM spreads by about 15% from one timing to the next, and a calibration
takes the median of a few, so each v(n) it saves may be off by several percent: `--cv` sets the spread of
that error (log-normal, each size on its own, `--seeds` draws), and the rows "sizes of 8 and more x F" bias
every large batch alike, and "draft step x F" a draft model's step (c) measured too cheap or too dear: too
cheap, it makes the draft model look worth loading where it is not; "every ratio x F" both, as a single
target step timed slow (the one every ratio is divided by) makes them. Prints the geometric mean of
auto's speedup over the target alone (true costs), and its worst prompt.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import simulate  # noqa: E402


def speedups(traces, regime: simulate.Regime, believed: dict[int, float], c: float = 1.0) -> tuple[float, float]:
    values = []
    for trace in traces:
        alone = simulate.replay(trace, regime, "target").decode_s
        costs = replace(regime.costs(), verify=dict(believed), draft_step=regime.c * c)
        values.append(alone / simulate.replay(trace, regime, "auto", costs=costs).decode_s)
    return math.exp(sum(map(math.log, values)) / len(values)), min(values)


def report(label: str, result: tuple[float, float]) -> None:
    print(f"{label}: geomean {result[0]:.3f}x, worst {result[1]:.3f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regime-file", type=Path, default=HERE / "regimes" / "zen4b-2core.json")
    parser.add_argument("--traces", type=Path, action="append", help="trace folders (default: all four)")
    parser.add_argument("--cv", type=float, default=0.12)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    regime = simulate.load_regime(args.regime_file)
    folders = args.traces or [HERE / name for name in ("traces", "heldout-traces", "new-traces", "later-traces")]
    traces = [trace for folder in folders for trace in simulate.load_traces(folder)]
    truth = regime.costs().verify
    print(f"{len(traces)} traces, regime {regime.name}")
    report("exact calibration", speedups(traces, regime, truth))
    for seed in range(args.seeds):
        rng = random.Random(seed)
        noisy = {n: v * math.exp(rng.gauss(0, args.cv)) if n > 1 else v for n, v in truth.items()}
        report(f"each size off (cv {args.cv}, seed {seed})", speedups(traces, regime, noisy))
    for factor in (0.8, 0.9, 1.1, 1.2):
        biased = {n: v * factor if n >= 8 else v for n, v in truth.items()}
        report(f"sizes of 8 and more x {factor}", speedups(traces, regime, biased))
    for factor in (0.7, 0.8, 1.25):
        report(f"draft step x {factor}", speedups(traces, regime, truth, c=factor))
    for factor in (0.7, 0.8, 0.9):
        cheap = {n: v * factor if n > 1 else v for n, v in truth.items()}
        report(f"every ratio x {factor}", speedups(traces, regime, cheap, c=factor))


if __name__ == "__main__":
    main()
