"""What timing noise costs auto: its clock sees noisy eval times, its choices are costed at the true ones.

    python benchmarks/noisy_clock.py                                      # zen4-2core, code-edit + revision
    python benchmarks/noisy_clock.py --regime xeon-2core --categories all --cv 0.1,0.3 --spells

auto learns from measured seconds (the online step time, the guard that sets a losing drafter aside),
and a shared VM's clock is noisy: the same batch takes 10-30% more or less from one round to the next,
and whole spells run slow while a neighbour works. benchmarks/simulate.py replays exact costs; this
replays the same traces with every eval's time multiplied by a random factor (log-normal, mean 1,
coefficient of variation --cv; with --spells also a factor of 0.8-1.6 that changes every 20 evals on
average), so auto decides on noisy numbers, and then prices what it chose at the regime's true costs.
The target alone is priced the same way. Decode only (prefills excluded, as in `specchat bench`);
the geometric mean over the prompts and over --seeds replays each.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import simulate  # noqa: E402

from specchat.sampling import Sampler, SamplingParams  # noqa: E402
from specchat.speculative import speculative_decode  # noqa: E402

SPELL_CHANCE = 0.05  # per eval: a new spell starts
SPELLS = (0.8, 1.0, 1.0, 1.3, 1.6)


class NoisyCost:
    """Seconds of an eval as the clock sees them (noisy) and as they are (true), summed apart."""

    def __init__(self, true_seconds, cv: float, spells: bool, rng: random.Random) -> None:
        self.true_seconds, self.rng, self.spells = true_seconds, rng, spells
        self.sigma = math.sqrt(math.log(1 + cv * cv))
        self.spell = 1.0
        self.true_spent = 0.0

    def __call__(self, n: int) -> float:
        true = self.true_seconds(n)
        self.true_spent += true
        if self.spells and self.rng.random() < SPELL_CHANCE:
            self.spell = self.rng.choice(SPELLS)
        return true * self.spell * self.rng.lognormvariate(-(self.sigma**2) / 2, self.sigma)


def true_decode_s(
    trace: simulate.Trace, regime: simulate.Regime, strategy: str, cv: float, spells: bool, seed: int
) -> float:
    """Seconds of decode at the regime's true costs, the strategy deciding on noisy ones."""
    clock, rng = simulate.Clock(), random.Random(seed)
    target_cost = NoisyCost(lambda n: regime.v(n) * regime.step_s, cv, spells, rng)
    draft_cost = NoisyCost(lambda n: regime.c * regime.v(n) * regime.step_s, cv, spells, rng)
    target, draft = simulate.trace_models(trace, clock, target_cost, draft_cost)
    drafter, k = simulate.make_drafter(strategy, target, draft, regime.costs(), clock)
    prefill: list[float] = []  # true seconds of the target's prefill, taken before round 1
    read: list[float] = []  # true seconds of a draft model reading the prompt before the first token
    first_out: list[bool] = []

    def mark() -> None:
        if not prefill:
            prefill.append(target_cost.true_spent + draft_cost.true_spent)

    feed, propose = target.eval, getattr(drafter, "propose", None)

    def eval_(tokens, n_logits):
        if not target.n_past:
            return feed(tokens, n_logits)
        mark()  # past the prompt's prefill: the first round starts
        logits = feed(tokens, n_logits)
        first_out.append(True)  # the first token is out
        return logits

    def propose_(*args, **kwargs):  # a drafter's first proposal comes before the round's target eval
        mark()
        return propose(*args, **kwargs)

    def reading(arm, catch_up):
        def catch_up_(context) -> None:  # called by auto for the first round (prefill), or later (drafting)
            before, cold = draft_cost.true_spent, arm.cold and not first_out
            catch_up(context)
            if cold:
                read.append(draft_cost.true_spent - before)

        return catch_up_

    target.eval = eval_
    if propose is not None:
        drafter.propose = propose_
    for arm in getattr(drafter, "drafters", [drafter]):
        if hasattr(arm, "cold"):
            arm.catch_up = reading(arm, arm.catch_up)
    max_tokens = trace.max_tokens if trace.end is not None else len(trace.target)
    tokens, _ = speculative_decode(
        target, drafter, trace.prompt, Sampler(SamplingParams()), k=k, max_tokens=max_tokens, clock=clock
    )
    if tokens != trace.target:
        raise AssertionError(f"{strategy} on {trace.id}: not the recorded text")
    # As Stats.decode_s: without the prefills, the draft model's where auto had it read the prompt for the
    # first round (Draft.prefill_s); its reading after the first token is decode, as the user waits for it.
    return target_cost.true_spent + draft_cost.true_spent - prefill[0] - sum(read)


def speedup(traces, regime, cv: float, spells: bool, seeds: int) -> float:
    logs = []
    for trace in traces:
        alone = true_decode_s(trace, regime, "target", 0.0, False, 0)
        for seed in range(seeds):
            auto = true_decode_s(trace, regime, "auto", cv, spells, seed)
            logs.append(math.log(alone / auto))
    return math.exp(sum(logs) / len(logs))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regime", default="zen4-2core", help="a built-in regime or one in benchmarks/regimes/")
    parser.add_argument("--categories", default="code-edit,revision", help="comma-separated, or all")
    parser.add_argument("--cv", default="0,0.1,0.2,0.3", help="noise levels to compare")
    parser.add_argument("--spells", action="store_true", help="slow and fast spells on top of the noise")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--traces", type=Path, default=HERE / "traces")
    args = parser.parse_args(argv)
    measured = {r.name: r for r in map(simulate.load_regime, sorted((HERE / "regimes").glob("*.json")))}
    regime = (simulate.REGIMES | measured)[args.regime]
    wanted = args.categories.split(",")
    traces = [t for t in simulate.load_traces(args.traces) if "all" in wanted or t.category in wanted]
    print(f"{regime.name}, {args.categories} ({len(traces)} prompts), auto vs the target alone at true costs:")
    for cv in (float(value) for value in args.cv.split(",")):
        label = f"cv {cv:.2f}" + (" + spells" if args.spells else "")
        print(f"  {label}: {speedup(traces, regime, cv, args.spells, args.seeds):.3f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
