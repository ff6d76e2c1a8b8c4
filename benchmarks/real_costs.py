"""Verify batches in real replies against the cost model auto decides with: per batch size n, what a round
of n tokens took, in target steps, next to the calibrated v(n). Run it on a quiet machine.

    python benchmarks/real_costs.py                                  # benchmarks/later_edits.jsonl, 128 tokens
    python benchmarks/real_costs.py --prompts benchmarks/new_edits.jsonl -n 96

For each prompt: the target alone first (its seconds per token are the step of this prompt's context), then
auto, greedy, from a fresh calibration (nothing saved is used or written: point SPECCHAT_CONFIG_DIR at an
empty folder). Prints the calibration, then per prompt `n: real/model x rounds` (medians) and the speedup.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from specchat.chat import Message
from specchat.drafters.auto import AutoDrafter
from specchat.runtime import Options, open_pipeline
from specchat.sampling import SamplingParams

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=Path, default=HERE / "later_edits.jsonl")
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    args = parser.parse_args()
    rounds: list[tuple[int, float]] = []  # (batch size, verify seconds) of auto's rounds
    learn = AutoDrafter.learn

    def recording(self, outcome):
        rounds.append((len(outcome.draft) + 1, outcome.verify_s))
        return learn(self, outcome)

    AutoDrafter.learn = recording
    rows = [json.loads(line) for line in args.prompts.read_text(encoding="utf-8").splitlines() if line.strip()]
    greedy = SamplingParams(temperature=0.0)
    with open_pipeline(Options(mode="auto", use_tuning=False), lambda message: print("note:", message)) as pipe:
        costs = pipe.drafters["auto"].costs
        print("calibration:", json.dumps(costs.as_dict()))
        for row in rows:
            prompt = pipe.prompt([Message("user", row["turns"][0])])
            pipe.reset()
            alone = pipe.generate(prompt, greedy, mode="target", k=0, max_tokens=args.max_tokens).stats
            step = alone.decode_s / alone.rounds
            pipe.reset()
            rounds.clear()
            auto = pipe.generate(prompt, greedy, mode="auto", k=64, max_tokens=args.max_tokens).stats
            by_size = defaultdict(list)
            for n, seconds in rounds:
                by_size[n].append(seconds / step)
            cells = " ".join(
                f"{n}: {statistics.median(s):.2f}/{costs.v(n):.2f} x{len(s)}" for n, s in sorted(by_size.items())
            )
            speedup = alone.decode_s / auto.decode_s
            print(f"{row.get('question_id', '?')}: prompt {len(prompt)}, step {step * 1000:.1f} ms, "
                  f"speedup {speedup:.3f}; real/model {cells}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
