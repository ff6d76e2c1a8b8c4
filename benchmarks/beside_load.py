"""Target steps beside another llama.cpp process: a fixed thread count against the default, which gives
way to other programs (specchat/cpuload.py).

Starts a competitor (the target, --competitor-threads threads, one token at a time in a loop, in a process
of its own), then times single target steps here, in alternation: with every thread count from 1 to the
usable CPUs, and with the default (the governor choosing). Medians of --rounds rounds of 8 steps each.
Nothing else may run meanwhile (a build, tests): it is one of the two loads it means to measure.

    python benchmarks/beside_load.py                       # beside a 2-thread competitor
    python benchmarks/beside_load.py --competitor-threads 0  # no competitor: the quiet machine
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from specchat.cpuload import usable_cpus
from specchat.engine import Engine
from specchat.engineconfig import EngineConfig
from specchat.registry import load_registry

CONTEXT = "def merge(a, b):\n    out = []\n    i = j = 0\n" * 8
COMPETITOR = """
import sys, time
from pathlib import Path
from specchat.engine import Engine
from specchat.engineconfig import EngineConfig
engine = Engine(Path(sys.argv[1]), EngineConfig(n_ctx=1024, n_threads=int(sys.argv[2])))
tokens = engine.tokenize("hello world " * 10)
engine.eval(tokens, 0)
while True:
    engine.truncate(len(tokens))
    engine.eval(tokens[:1], 1)
"""


def target_path() -> Path:
    from specchat import download

    found = download.locate(load_registry().pair(None).target)
    if found is None:
        sys.exit("the default pair's target is not pulled: run `specchat pull` first")
    return found


def step_ms(engine: Engine, base: int, first: int, steps: int = 8) -> float:
    started = time.perf_counter()
    for _ in range(steps):
        engine.truncate(base)
        engine.eval([first], 1)
    return (time.perf_counter() - started) / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--competitor-threads", type=int, default=2, help="0: no competitor")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    path = target_path()
    competitor = None
    if args.competitor_threads:
        competitor = subprocess.Popen([sys.executable, "-c", COMPETITOR, str(path), str(args.competitor_threads)])
        time.sleep(8)  # loaded and running
    try:
        fixed = {n: Engine(path, EngineConfig(n_ctx=2048, n_threads=n)) for n in range(1, usable_cpus() + 1)}
        governed = Engine(path, EngineConfig(n_ctx=2048))  # n_threads 0: the default, which gives way
        engines = {f"{n} thread{'s' * (n > 1)}": engine for n, engine in fixed.items()} | {"default": governed}
        context = governed.tokenize(CONTEXT)
        for engine in engines.values():
            engine.eval(context, 0)
        timings: dict[str, list[float]] = {name: [] for name in engines}
        chosen: list[int] = []
        for round_ in range(args.rounds):
            order = list(engines) if round_ % 2 == 0 else list(reversed(engines))
            for name in order:
                timings[name].append(step_ms(engines[name], len(context), context[0]))
                if name == "default":
                    chosen.append(governed.threads)
    finally:
        if competitor is not None:
            competitor.kill()
    beside = f"beside a {args.competitor_threads}-thread competitor" if competitor else "no competitor"
    print(f"target steps, {beside}, {usable_cpus()} usable CPUs (medians of {args.rounds} rounds of 8 steps):")
    for name, values in timings.items():
        spread = f"{min(values):.0f}-{max(values):.0f}"
        extra = f"; threads chosen: {chosen}" if name == "default" else ""
        print(f"  {name:10} {statistics.median(values):7.0f} ms  ({spread}){extra}")


if __name__ == "__main__":
    main()
