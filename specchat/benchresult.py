"""What `specchat bench` measured: one Sample per reply, the report's Rows (paired ratios per category,
turn and variant) and the whole BenchResult as the JSON report holds it. The measuring is bench.py's."""

from __future__ import annotations

import math
import platform
import statistics
from dataclasses import asdict, dataclass, field

from .benchsuite import Prompt
from .costmodel import Costs, iid_expected
from .speculative import Stats, position_acceptance


@dataclass(frozen=True)
class Variant:
    name: str
    k: int
    mode: str = "spec"


@dataclass
class Sample:
    prompt_id: str
    category: str
    variant: str
    k: int
    rep: int
    tokens_per_s: float
    generated: int
    decode_s: float
    ttft_s: float
    rounds: int
    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    drafted_at: list[int]
    accepted_at: list[int]
    lossless: str = ""  # "reference" | "equal" | "near-tie" | "MISMATCH"
    divergence_margin: float | None = None
    mode: str = "spec"
    rounds_by_source: dict = field(default_factory=dict)
    turn: int = 1  # which turn of the record (1-based); pair samples by (prompt_id, turn, rep)
    stop_reason: str = ""  # as in run --json: "context" is a reply the context cut short of --max-tokens

    @classmethod
    def of(cls, prompt: Prompt, variant: Variant, rep: int, stats: Stats, turn: int = 1) -> Sample:
        return cls(
            prompt.id,
            prompt.category,
            variant.name,
            variant.k,
            rep,
            stats.tokens_per_s,
            stats.generated,
            stats.decode_s,
            stats.first_token_s,
            stats.rounds,
            stats.drafted,
            stats.accepted,
            stats.draft_s,
            stats.verify_s,
            list(stats.drafted_at),
            list(stats.accepted_at),
            mode=variant.mode,
            rounds_by_source=dict(stats.rounds_by_source),
            turn=turn,
            stop_reason=stats.stop_reason,
        )


@dataclass
class Row:
    """One line of the report: a category (or "all") and a variant."""

    category: str
    variant: str
    k: int
    n: int
    tokens_per_s: float | None  # None: no reply of the row generated a token
    speedup: float | None
    acceptance_rate: float | None
    mean_accepted_length: float | None
    position_acceptance: list[float | None]
    draft_share: float | None
    ttft_s: float
    predicted_speedup: float | None  # S(k) from the acceptance rate (independent acceptances assumed)
    cost_model_speedup: float | None  # the same cost model with the MEASURED tokens per round
    turn: int | None = None  # set where a category's records have several turns: one row per turn
    speedup_low: float | None = None  # the speedup's 95% interval (median_interval); None below 6 pairs
    speedup_high: float | None = None

    @property
    def label(self) -> str:
        return self.category if self.turn is None else f"{self.category} turn {self.turn}"


@dataclass
class BenchResult:
    samples: list[Sample] = field(default_factory=list)
    cost: Costs | None = None
    interrupted: bool = False
    meta: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)  # benchturns.Skipped: turns that did not fit the context

    def rows(self) -> list[Row]:
        from .benchturns import groups

        names = list(dict.fromkeys(s.variant for s in self.samples))
        return [
            row for c, turn, mine in groups(self.samples) for name in names if (row := self._row(c, turn, name, mine))
        ]

    def _row(self, category: str, turn: int | None, name: str, samples: list[Sample]) -> Row | None:
        mine = [s for s in samples if s.variant == name]
        if not mine:
            return None
        base = {(s.prompt_id, s.turn, s.rep): s.tokens_per_s for s in samples if s.variant == "target"}
        paired = [(s, base.get((s.prompt_id, s.turn, s.rep))) for s in mine]
        # A reply of no tokens (an end of generation first) has no speed: its pair is left out, whichever side
        # it is on (a variant's entered as 0.00x, a loss that was never measured).
        ratios = [s.tokens_per_s / reference for s, reference in paired if reference and s.tokens_per_s]
        drafted, accepted, rounds = (sum(getattr(s, f) for s in mine) for f in ("drafted", "accepted", "rounds"))
        k = mine[0].k
        rate = accepted / drafted if drafted else None
        busy = sum(s.draft_s + s.verify_s for s in mine)
        positions = _pooled_positions(mine)
        predicted = modelled = None
        mode = mine[0].mode
        if mode == "spec" and k and rate is not None and self.cost is not None and self.cost.c is not None:
            round_cost = k * self.cost.c + self.cost.calibrated_v(k + 1)
            predicted = iid_expected(rate, k) / round_cost
            alone = sum(s.rounds_by_source.get("target", 0) for s in mine)  # spec's first round, its last maybe
            # In target steps: a round of the target alone is one, but a reply's first reads its token off the
            # prefill, with no time of its own; and tok/s leaves each reply's first token out.
            first = sum(1 for s in mine if s.generated)
            seconds = (rounds - alone) * round_cost + alone - min(alone, first)
            after_first = sum(s.generated for s in mine) - first
            modelled = after_first / seconds if seconds > 0 else 1.0 / round_cost
        low, high = (median_interval(ratios) if name != "target" else None) or (None, None)  # 1-1 says nothing
        return Row(
            category,
            name,
            k,
            len(mine),
            _median([s.tokens_per_s for s in mine if s.tokens_per_s]),  # no tokens, no speed: as in the ratios
            statistics.median(ratios) if ratios else None,
            rate,
            accepted / rounds if drafted and rounds else None,  # no drafts: not 0.00 beside an accept of "-"
            positions,
            sum(s.draft_s for s in mine) / busy if k and busy else None,
            statistics.median(s.ttft_s for s in mine),
            predicted,
            modelled,
            turn,
            low,
            high,
        )

    def speedup_series(self) -> dict[str, list[tuple[int, float]]]:
        """(k, speedup) of the draft model per category, for the plots (prompt lookup's k=8 or auto's 64 on
        the same line would read as the draft model at that k)."""
        spec = {s.variant for s in self.samples if s.mode == "spec"}
        series: dict[str, list[tuple[int, float]]] = {}
        for row in self.rows():
            if row.k and row.variant in spec and row.speedup is not None:
                series.setdefault(row.label, []).append((row.k, row.speedup))
        return series

    def lossless_summary(self) -> dict:
        checked = [s for s in self.samples if s.lossless not in ("", "reference")]
        counts = {kind: sum(s.lossless == kind for s in checked) for kind in ("equal", "near-tie", "MISMATCH")}
        details = [
            {
                "prompt": s.prompt_id,
                "turn": s.turn,
                "variant": s.variant,
                "rep": s.rep,
                "result": s.lossless,
                "margin": s.divergence_margin,
            }
            for s in checked
            if s.lossless != "equal"
        ]
        return {"checked": len(checked), **counts, "details": details}

    def as_dict(self) -> dict:
        return {
            "meta": self.meta,
            "definitions": DEFINITIONS,
            "cost_model": self.cost.as_dict() if self.cost else None,
            "summary": [asdict(row) for row in self.rows()],
            "lossless": self.lossless_summary(),
            "peak_rss_mb": peak_rss_mb(),
            "interrupted": self.interrupted,
            "skipped": [asdict(s) for s in self.skipped],
            "samples": [asdict(s) for s in self.samples],
        }


DEFINITIONS = {
    "k": "the draft length the variant ran at; auto's is the most it may draft in a round (64), not a length it chose",
    "n": "replies measured for the row: its prompts' turns x repetitions (not prompts)",
    "tokens_per_s": "tokens after the first / decode time (the time after the prefill, which gives the first "
    "token), median over the samples that generated tokens (null where none did)",
    "speedup": "median over (prompt, turn, repetition) of variant tok/s / target-alone tok/s in the same block "
    "(a pair where either reply generated no tokens is left out: it has no speed)",
    "speedup_low": "with speedup_high: a 95% confidence interval of that median from the order statistics of the "
    "paired ratios (distribution-free; null below 6 pairs, where none exists), over the replies to these prompts: "
    "whether this run can tell the variant from the target alone on them, not what other prompts would give",
    "acceptance_rate": "accepted draft tokens / drafted tokens, pooled (null where nothing was drafted)",
    "mean_accepted_length": "accepted draft tokens per round, pooled; does NOT count the target's own token "
    "(null where nothing was drafted)",
    "position_acceptance": "acceptance rate at draft position 1..k among rounds that drafted it (null: none did), "
    "up to the last position any round drafted",
    "draft_share": "draft time / (draft + verify time)",
    "ttft_s": "time to first token (the target's prefill, which gives it off its last row; a draft model reads the "
    "prompt after it, but where auto has it draft the first round), median",
    "predicted_speedup": "S(k) = E(a,k) / (k c + v(k+1)), E(a,k) = (1 - a^(k+1)) / (1 - a), a = acceptance_rate",
    "cost_model_speedup": "tokens per round (measured) / (k c + v(k+1)): the cost model without the iid assumption "
    "(a round of the target alone costs one step; spec's first, read off the prefill, none, and its token is not "
    "counted, as in tokens_per_s)",
}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free confidence interval of the median: the j-th smallest and j-th largest value, with
    the largest j for which fewer than j of n values fall below the median with probability at most
    (1 - confidence) / 2 (a Binomial(n, 1/2) tail). No assumption about the noise, which on a shared VM is
    anything but normal; None where even the whole range is not confident enough (n < 6 at 95%)."""
    ordered, n = sorted(values), len(values)
    j, below = 0, 0.0
    while j < n and (below := below + math.comb(n, j) / 2**n) <= (1 - confidence) / 2:
        j += 1
    return (ordered[j - 1], ordered[n - j]) if j else None


def _pooled_positions(samples: list[Sample]) -> list[float | None]:
    """Per draft position, accepted / drafted over the samples, as a reply's are given (speculative's rule)."""
    width = max((len(s.drafted_at) for s in samples), default=0)
    drafted = [sum(s.drafted_at[i] for s in samples if i < len(s.drafted_at)) for i in range(width)]
    accepted = [sum(s.accepted_at[i] for s in samples if i < len(s.accepted_at)) for i in range(width)]
    return position_acceptance(drafted, accepted)


def peak_rss_mb() -> float | None:
    """Peak resident memory of this process (ru_maxrss is KiB on Linux); None where unknown (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    scale = 1 / 1024 if platform.system() == "Linux" else 1 / (1024 * 1024)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale, 1)
