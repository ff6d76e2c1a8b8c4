"""A ceiling for prompt lookup under a cost regime: an oracle that knows, at every position, how many
tokens of the copy on offer will hold, and drafts the measured batch size among them that costs least
per token. No drafter can know that; auto's share of it says how much of the copying gain it takes.

    python benchmarks/copy_oracle.py --regime-file benchmarks/regimes/zen1-2core.json --category code-edit
    python benchmarks/copy_oracle.py --regime xeon-2core
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import simulate  # noqa: E402

from specchat.drafters.ngram import MAX_COPY, NgramDrafter  # noqa: E402
from specchat.tunemeasure import QUICK_BATCHES  # noqa: E402


def oracle_speedup(trace: simulate.Trace, regime: simulate.Regime) -> float:
    drafter, context = NgramDrafter(), list(trace.prompt)
    drafter.prefill(context)
    target, pos, cost = trace.target, 0, 0.0
    while pos < len(target):
        copy, holds = drafter.propose(context, MAX_COPY, None), 0
        for guess, actual in zip(copy.tokens, target[pos:], strict=False):
            if guess != actual:
                break
            holds += 1
        n = max((n for n in QUICK_BATCHES if n - 1 <= holds), key=lambda n: n / regime.v(n))
        n = min(n, len(target) - pos)
        cost += regime.v(n)
        context += target[pos : pos + n]
        pos += n
    return len(target) / cost


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regime", choices=sorted(simulate.REGIMES))
    parser.add_argument("--regime-file", type=Path)
    parser.add_argument("--category", default="code-edit")
    parser.add_argument("--traces", type=Path, default=HERE / "traces")
    args = parser.parse_args(argv)
    regime = (
        simulate.load_regime(args.regime_file) if args.regime_file else simulate.REGIMES[args.regime or "epyc-2core"]
    )
    traces = [t for t in simulate.load_traces(args.traces) if args.category in ("all", t.category)]
    speeds = [oracle_speedup(t, regime) for t in traces]
    mean = math.exp(sum(map(math.log, speeds)) / len(speeds))
    print(
        f"{regime.name} {args.category}: copy oracle {mean:.2f}x (geometric mean of {len(speeds)} prompts; "
        f"{min(speeds):.2f}-{max(speeds):.2f}x)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
