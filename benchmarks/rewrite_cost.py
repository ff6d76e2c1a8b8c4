"""What prompt lookup's rewriter (specchat/drafters/rewrite.py) costs per reply token, with the real
tokenizer, on a long input: an edit whose every line renames two names (a new rule on many lines, so
the input is rewritten again and again), followed by as many new lines the input does not hold (each
compared with every input line).

    python benchmarks/rewrite_cost.py                      # inputs of 100, 300 and 600 lines
    python benchmarks/rewrite_cost.py --lines 1000 --repeats 5

Reports the median over repeats of milliseconds per reply token, and the rules learned. Compare with
a target step (`specchat tune` prints it): on a 2-core CPU 30-50 ms, on a GPU a few ms.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import time
from pathlib import Path

from specchat.drafters.rewrite import Rewriter
from specchat.engine import Vocab
from specchat.paths import models_dir
from specchat.registry import load_registry


def edit(lines: int, seed: int) -> tuple[str, str]:
    """(input, reply): camelCase names renamed to snake_case on the reply's first half, new code after."""
    rng = random.Random(seed)
    names = [f"value{i}Count" for i in range(max(lines // 2, 10))]
    source = []
    for i in range(lines):
        a, b = rng.sample(names, 2)
        source.append(f"    {a} = compute_{i % 17}({b}, limit={i}) + {a}")
    renamed = [re.sub(r"value(\d+)Count", r"value_\1_count", line) for line in source[: lines // 2]]
    fresh = [f"    print('line {i} of the reply that the input does not hold', x{i})" for i in range(lines // 2)]
    return "\n".join(source), "\n".join(renamed + fresh) + "\n"


def cost(vocab: Vocab, lines: int, seed: int) -> tuple[float, int]:
    """(ms per reply token, rules learned) for one reply fed 3 tokens a round."""
    source, reply = edit(lines, seed)
    rewriter = Rewriter(vocab, lambda _token: False, max_n=4)
    rewriter.start(vocab.tokenize(source))
    tokens = vocab.tokenize(reply)
    start = time.perf_counter()
    for i in range(0, len(tokens), 3):
        rewriter.observe(tokens[i : i + 3])
    return (time.perf_counter() - start) * 1000 / len(tokens), len(rewriter.rules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", default="100,300,600", help="input sizes in lines (comma-separated)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target", type=Path, help="GGUF whose tokenizer to use (default: the default pair's)")
    args = parser.parse_args()
    path = args.target or models_dir() / load_registry().pair(None).target.local_name
    vocab = Vocab(path)
    print(f"tokenizer of {path.name}")
    print("| input lines | input tokens | reply tokens | ms per reply token (median) | rules |")
    print("|---|---|---|---|---|")
    for lines in (int(n) for n in args.lines.split(",")):
        source, reply = edit(lines, 0)
        runs = [cost(vocab, lines, seed) for seed in range(args.repeats)]
        ms = statistics.median(r[0] for r in runs)
        n_in, n_out = len(vocab.tokenize(source)), len(vocab.tokenize(reply))
        print(f"| {lines} | {n_in} | {n_out} | {ms:.3f} | {runs[0][1]} |")
    vocab.close()


if __name__ == "__main__":
    main()
