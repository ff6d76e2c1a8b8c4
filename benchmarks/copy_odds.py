"""Where auto's prompt-lookup priors come from: how often a copy holds, by how long it has matched.

    python benchmarks/copy_odds.py                                  # benchmarks/copy_prompts.jsonl
    python benchmarks/copy_odds.py --prompts my.jsonl -n 600

1. The target alone answers every prompt (greedy, up to -n tokens): that text is what every mode
   produces, since all of them are lossless.
2. At every token of each answer, prompt lookup (the same NgramDrafter auto uses) proposes its copy;
   the table counts, per match-length bucket, how often the copy's next token is the answer's, apart
   for copies of the prompt, copies where the answer rejoins the prompt after a copy of it broke,
   and copies of the answer's own earlier tokens; the first two also apart by whether the match goes
   on past a line break ("lines") or not ("in line"). This does not depend on any drafting policy: it
   is the per-token hold rate auto's priors encode (`INLINE_COPY_PRIORS`, `ALIGNED_COPY_PRIORS`,
   `REJOIN_COPY_PRIORS`, `ALIGNED_REJOIN_PRIORS`, `REPLY_COPY_PRIORS`).
To replay whole answers through auto under this or other machines' costs, use benchmarks/simulate.py
(traces from benchmarks/record_traces.py); for measured speed, `specchat bench`.

The prompts in copy_prompts.jsonl are not the built-in suite's, so priors fitted here are not fitted
to the bench that judges them.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from rich.console import Console
from rich.table import Table

from specchat.benchsuite import load_prompts_file
from specchat.chat import Message
from specchat.drafters.base import Draft, Outcome
from specchat.drafters.copyodds import (
    ALIGNED_COPY_PRIORS,
    ALIGNED_REJOIN_PRIORS,
    COPY_PRIORS,
    INLINE_COPY_PRIORS,
    REJOIN_COPY_PRIORS,
    REPLY_COPY_PRIORS,
    _bucket,
)
from specchat.drafters.ngram import MAX_COPY, NgramDrafter
from specchat.runtime import Options, Pipeline, open_pipeline
from specchat.sampling import SamplingParams

console = Console(stderr=True)
KINDS = {  # column: (kind, match past a line break, auto's prior)
    "of the prompt, in line": ("input", False, INLINE_COPY_PRIORS),
    "of the prompt, lines": ("input", True, ALIGNED_COPY_PRIORS),
    "rejoining it, in line": ("rejoin", False, REJOIN_COPY_PRIORS),
    "rejoining it, lines": ("rejoin", True, ALIGNED_REJOIN_PRIORS),
    "of the answer": ("reply", None, REPLY_COPY_PRIORS),
}
HERE = Path(__file__).parent


def answers(pipeline: Pipeline, prompts, max_tokens: int) -> list[tuple[str, list[int], list[int]]]:
    out = []
    for prompt in prompts:
        ids = pipeline.prompt([Message("user", prompt.text)])
        pipeline.reset()
        tokens = pipeline.generate(ids, SamplingParams(), mode="target", k=0, max_tokens=max_tokens).tokens
        console.print(f"{prompt.category} #{prompt.id}: {len(tokens)} tokens")
        out.append((prompt.category, ids, tokens))
    return out


def hold_rates(runs, line_role) -> dict[tuple[str, bool | None, int], list[int]]:
    """(kind, past a line break, bucket) -> [held, offered]: does the copy on offer predict the answer's next token?
    kind: "input" (copied from the prompt), "rejoin" (the answer rejoining its input after a copy of
    it broke) or "reply" (from the answer's own earlier tokens). The answer is fed one token a round,
    as the target alone produces it, so that breaks are noticed as auto notices them."""
    table: dict[tuple[str, bool | None, int], list[int]] = collections.defaultdict(lambda: [0, 0])
    for _category, prompt, answer in runs:
        lookup, context = NgramDrafter(line_role=line_role), list(prompt)
        lookup.prefill(context[:-1])
        for token in answer:
            lookup.offer(context, MAX_COPY)
            copy = lookup._copy
            if copy is not None:
                lines = None if copy.kind == "reply" else copy.aligned[0]
                cell = table[copy.kind, lines, _bucket(copy.matched)]
                cell[0] += copy.tokens[0] == token
                cell[1] += 1
            lookup.learn(Outcome(len(context), Draft(), 0, [token], 0.0))
            context.append(token)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=Path, default=HERE / "copy_prompts.jsonl")
    parser.add_argument("-n", "--max-tokens", type=int, default=600)
    parser.add_argument("--pair", default=None)
    args = parser.parse_args()
    with open_pipeline(Options(pair=args.pair, mode="target"), console.print) as pipeline:
        runs = answers(pipeline, load_prompts_file(args.prompts), args.max_tokens)
        rates = hold_rates(runs, pipeline.target.line_role)
    table = Table(title="copy hold rate by match length (per token): held/offered, rate (auto's prior)")
    table.add_column("matched", justify="right")
    for column in KINDS:
        table.add_column(column, justify="right")
    for bucket in sorted(COPY_PRIORS):
        row = [f"{bucket}+"]
        for kind, lines, priors in KINDS.values():
            held, offered = rates.get((kind, lines, bucket), (0, 0))
            rate = f"{held / offered:.2f}" if offered else "-"
            row.append(f"{held}/{offered}, {rate} ({priors[bucket]:.2f})")
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()
