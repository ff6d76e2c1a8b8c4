"""Where auto's prompt-lookup priors come from: how often a copy holds, by how long it has matched.

    python benchmarks/copy_odds.py                                  # benchmarks/copy_prompts.jsonl
    python benchmarks/copy_odds.py --prompts my.jsonl -n 600 --replay

1. The target alone answers every prompt (greedy, up to -n tokens): that text is what every mode
   produces, since all of them are lossless.
2. At every token of each answer, prompt lookup (the same NgramDrafter auto uses) proposes its copy;
   the table counts, per match-length bucket, how often the copy's next token is the answer's. This
   does not depend on any drafting policy: it is the per-token hold rate auto's `COPY_PRIORS` encode.
3. With --replay, the answers are also replayed through auto's AdaptiveDrafter with this machine's
   measured verify costs (the saved tuning), and the predicted speedup over the target alone is
   printed per prompt: the same drafter, the real costs, no timing noise. Use `specchat bench` for
   measured speed; this is for understanding and for changing the drafter without an hour of benches.

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
from specchat.drafters.adaptive import COPY_PRIORS, AdaptiveDrafter, Costs, _bucket
from specchat.drafters.ngram import NgramDrafter
from specchat.runtime import LoadOptions, ModelChoice, Pipeline, Resolved, resolve
from specchat.sampling import SamplingParams
from specchat.tuning import key_for, load

console = Console(stderr=True)
HERE = Path(__file__).parent


def answers(pipeline: Pipeline, prompts, max_tokens: int) -> list[tuple[str, list[int], list[int]]]:
    out = []
    for prompt in prompts:
        ids = pipeline.prompt([Message("user", prompt.text)])
        pipeline.reset()
        _, tokens, _ = pipeline.generate(ids, SamplingParams(), k=0, max_tokens=max_tokens, mode="target")
        console.print(f"{prompt.category} #{prompt.id}: {len(tokens)} tokens")
        out.append((prompt.category, ids, tokens))
    return out


def hold_rates(runs) -> dict[int, list[int]]:
    """bucket -> [held, offered]: does the copy on offer predict the answer's next token?"""
    table: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0])
    for _category, prompt, answer in runs:
        lookup, context = NgramDrafter(), list(prompt)
        lookup.prefill(context[:-1])
        for token in answer:
            length, start = lookup.match(context)
            if start is not None:
                cell = table[_bucket(length)]
                cell[0] += lookup.index.tokens[start] == token
                cell[1] += 1
            context.append(token)
    return table


def replay(prompt: list[int], answer: list[int], verify: dict[int, float], is_control) -> float:
    """Predicted speedup of auto (prompt lookup only) over the target alone, from measured costs."""
    truth = Costs(dict(verify))
    drafter = AdaptiveDrafter(Costs(dict(verify)), ngram=NgramDrafter(), ends_copy=is_control)
    context, done, seconds = list(prompt), 0, 0.0
    drafter.prefill(context[:-1])
    while done < len(answer):
        k = min(64, len(answer) - done - 1)
        draft = drafter.propose(context, k, None).tokens if k else []
        accepted = next((i for i, t in enumerate(draft) if t != answer[done + i]), len(draft))
        cost = truth.verify_time(len(draft) + 1)
        drafter.feedback(len(draft), accepted, cost)
        emitted = answer[done : done + accepted + 1]
        context += emitted
        done += len(emitted)
        seconds += cost
    return len(answer) * truth.verify_time(1) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=Path, default=HERE / "copy_prompts.jsonl")
    parser.add_argument("-n", "--max-tokens", type=int, default=600)
    parser.add_argument("--pair", default=None)
    parser.add_argument("--replay", action="store_true", help="also replay auto with the saved verify costs")
    args = parser.parse_args()
    pair = resolve(ModelChoice(pair=args.pair), console.print, None)  # the draft's file is part of the key
    pipeline = Pipeline(Resolved(pair.pair_name, pair.target, None, pair.specs), LoadOptions())
    try:
        runs = answers(pipeline, load_prompts_file(args.prompts), args.max_tokens)
        table = Table(title="copy hold rate by match length (per token)")
        for column in ("matched", "held / offered", "rate", "auto's prior"):
            table.add_column(column, justify="right")
        rates = hold_rates(runs)
        for bucket in sorted(rates):
            held, offered = rates[bucket]
            table.add_row(f"{bucket}+", f"{held}/{offered}", f"{held / offered:.3f}", f"{COPY_PRIORS[bucket]:.2f}")
        Console().print(table)
        if args.replay:
            tuning = load(key_for(pair, pipeline.options))
            if tuning is None:
                raise SystemExit("no saved tuning for this pair: run `specchat run --mode auto ...` once first")
            for category, prompt, answer in runs:
                if not answer:  # the target stopped at once: nothing to replay
                    continue
                speedup = replay(prompt, answer, tuning.costs.verify, pipeline.target.is_control)
                Console().print(f"{category:10} {len(answer):4} tokens  predicted auto speedup {speedup:.2f}x")
    finally:
        pipeline.close()


if __name__ == "__main__":
    main()
