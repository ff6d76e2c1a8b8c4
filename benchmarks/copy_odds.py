"""Where auto's prompt-lookup priors come from: how often a copy holds, by how long it has matched.

    python benchmarks/copy_odds.py                                  # benchmarks/copy_prompts.jsonl
    python benchmarks/copy_odds.py --prompts my.jsonl -n 600

1. The target alone answers every prompt (greedy, up to -n tokens): that text is what every mode
   produces, since all of them are lossless.
2. At every token of each answer, prompt lookup (the same NgramDrafter auto uses) proposes its copy;
   the table counts, per match-length bucket, how often the copy's next token is the answer's, apart
   for copies of the prompt and copies of the answer's own earlier tokens. This does not depend on
   any drafting policy: it is the per-token hold rate auto's `COPY_PRIORS` and `REPLY_COPY_PRIORS`
   encode.
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
from specchat.drafters.ngram import COPY_PRIORS, REPLY_COPY_PRIORS, NgramDrafter, _bucket
from specchat.runtime import Options, Pipeline, open_pipeline
from specchat.sampling import SamplingParams

console = Console(stderr=True)
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


def hold_rates(runs) -> dict[tuple[str, int], list[int]]:
    """(source, bucket) -> [held, offered]: does the copy on offer predict the answer's next token?
    source: "input" (copied from the prompt) or "reply" (from the answer's own earlier tokens)."""
    table: dict[tuple[str, int], list[int]] = collections.defaultdict(lambda: [0, 0])
    for _category, prompt, answer in runs:
        lookup, context = NgramDrafter(), list(prompt)
        lookup.prefill(context[:-1])
        for token in answer:
            length, start = lookup.match(context)
            if start is not None:
                cell = table["input" if start < len(prompt) else "reply", _bucket(length)]
                cell[0] += lookup.index.tokens[start] == token
                cell[1] += 1
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
    table = Table(title="copy hold rate by match length (per token), copies of the prompt | of the answer itself")
    for column in ("matched", "input: held / offered", "rate", "prior", "reply: held / offered", "rate", "prior"):
        table.add_column(column, justify="right")
    rates = hold_rates(runs)
    for bucket in sorted(COPY_PRIORS):
        row = [f"{bucket}+"]
        for source, priors in (("input", COPY_PRIORS), ("reply", REPLY_COPY_PRIORS)):
            held, offered = rates.get((source, bucket), (0, 0))
            row += [f"{held}/{offered}", f"{held / offered:.3f}" if offered else "-", f"{priors[bucket]:.2f}"]
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()
