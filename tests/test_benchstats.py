"""The bench's statistics on synthetic samples and fake logits: how a divergence is judged, how replies
are paired. No model is loaded."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from specchat import bench

EOG = 9


class _Logits:
    """A target whose logits after any context are `row` (the bench feeds it the shared prefix)."""

    def __init__(self, row: list[float]) -> None:
        self.row = np.array(row, dtype=np.float32)

    def feed(self, context, n_logits):
        return self.row[None, :]


def _pipeline(row: list[float]):
    return SimpleNamespace(target_cache=_Logits(row), target=SimpleNamespace(is_eog=lambda token: token == EOG))


#               token: 0    1    2    3    4    5    6    7    8    9 (EOG)
CLOSE_TOP_TWO = [0.0, 10.0, 9.8, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("reference", "tokens", "verdict", "margin"),
    [
        ([5, 1, 4], [5, 2, 4], "near-tie", 0.2),  # the target's top two, 0.2 apart: llama.cpp's batch noise
        ([5, 1, 4], [5, 3, 4], "MISMATCH", 8.0),  # a third token, 8 below the best: no near-tie, however close 1 and 2
        ([5, 1, 4], [5], "MISMATCH", 9.0),  # stopped where the end of generation is far below the top two
    ],
)
def test_a_divergence_is_a_near_tie_only_between_tokens_close_to_the_best(reference, tokens, verdict, margin):
    """A near-tie was any divergence where the target's best two logits were close, whichever token the
    speculative run took: a token ranked third, far below both, passed as a near-tie. Both runs' tokens
    must be within NEAR_TIE of the target's best; the margin is the farther one's distance."""
    result, got = bench._lossless(_pipeline(CLOSE_TOP_TWO), [7], reference, tokens)
    assert result == verdict
    assert got == pytest.approx(margin, abs=1e-4)


def test_a_three_way_near_tie_is_a_near_tie_whichever_of_the_three_a_run_took():
    """The check recomputes the logits in one more batch shape than either run used, so where three tokens
    are within a few hundredths, a run's token can rank third there: it was read as a MISMATCH (seen in a
    real bench, margin 0.14)."""
    row = [0.0, 10.0, 9.95, 9.9, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    result, margin = bench._lossless(_pipeline(row), [7], [2], [3])
    assert result == "near-tie"
    assert margin == pytest.approx(0.1, abs=1e-4)


def test_an_end_of_generation_far_down_the_vocabulary_gives_a_finite_margin():
    row = [0.0, 10.0, 9.8, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, -30.0]
    result, margin = bench._lossless(_pipeline(row), [7], [1], [])
    assert (result, margin) == ("MISMATCH", 40.0)


def test_a_run_that_stops_at_a_near_tied_end_of_generation_is_a_near_tie():
    row = [0.0, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.9]  # the end of generation 0.1 below token 1
    assert bench._lossless(_pipeline(row), [7], [5, 1, 4], [5])[0] == "near-tie"
    assert bench._lossless(_pipeline(row), [7], [5], [5, 1, 4])[0] == "near-tie"  # the reference stopped


def test_a_token_tied_with_the_second_best_counts_as_the_top_two():
    row = [0.0, 10.0, 9.8, 9.8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # 2 and 3 tie for second place
    assert bench._lossless(_pipeline(row), [7], [1], [3])[0] == "near-tie"
    assert bench._lossless(_pipeline(row), [7], [1], [2])[0] == "near-tie"


def _sample(variant: str, k: int, rep: int, tokens_per_s: float, generated: int = 10):
    from specchat.benchresult import Sample

    decode = generated / tokens_per_s if tokens_per_s else 0.05
    return Sample("p", "code", variant, k, rep, tokens_per_s, generated, decode, 0.1, 1, 0, 0, 0.0, 0.05, [], [])


@pytest.mark.parametrize("empty", ["target", "ngram k=8"])
def test_a_reply_of_no_tokens_has_no_speed_on_either_side_of_a_pair(empty):
    """A reply that ended at once (an end of generation first) has tok/s 0: no speed at all. Such a target
    reply left its pair out, but such a variant reply entered it as a ratio of 0.00x, painted red as a loss."""
    from specchat.benchresult import BenchResult
    from specchat.tableview import speedup_style

    samples = [_sample("target", 0, 0, 20.0), _sample("ngram k=8", 8, 0, 30.0)]  # one pair of 1.5x
    samples += [
        _sample(name, k, 1, 0.0 if name == empty else 20.0, 0 if name == empty else 10)
        for name, k in (("target", 0), ("ngram k=8", 8))
    ]
    row = next(r for r in BenchResult(samples=samples).rows() if r.variant == "ngram k=8")
    assert row.speedup == pytest.approx(1.5) and speedup_style(row) == "green"


class _Recorder:
    """A pipeline that records which mode generated, in order, and replies 4 tokens in 1 s."""

    target = SimpleNamespace(n_ctx=4096, is_eog=lambda token: False)

    def __init__(self) -> None:
        self.modes: list[str] = []

    def prompt(self, messages, template_kwargs=None):
        return [1, 2, 3] * len(messages)

    def reset(self) -> None:
        pass

    def generate(self, ids, params, mode, k, max_tokens):
        from specchat.speculative import Stats

        self.modes.append(mode)
        return SimpleNamespace(tokens=[5] * 4, stats=Stats(generated=4, total_s=1.0, prefill_s=0.1), text="x")


@pytest.mark.parametrize(("prompts", "reps"), [(1, 2), (1, 4), (2, 2), (3, 4)])
def test_every_variant_runs_before_the_target_as_often_as_after_it(prompts, reps):
    """The order rotated from block to block, always in the same direction: with the target, k=2, ngram and
    auto, k=2 ran right after the target in 3 blocks of 4 and auto right before it in 3 of 4, so a drift within
    a block (a CPU that heats or throttles) went into their paired ratios one way. Every other block now runs
    the order backwards: each variant comes before the target in half of the blocks, pair by pair."""
    from collections import Counter

    from specchat.benchresult import BenchResult
    from specchat.benchsuite import Prompt
    from specchat.sampling import SamplingParams

    variants = bench.variants_for([2], ("spec", "ngram", "auto"))
    pipeline = _Recorder()
    records = [Prompt(str(i), "code", f"p{i}", (f"p{i}",)) for i in range(prompts)]
    bench.run_bench(pipeline, records, variants, reps=reps, max_tokens=8, params=SamplingParams(), result=BenchResult())
    runs = pipeline.modes[len(variants) :]  # after the warm-up
    blocks = [runs[i : i + len(variants)] for i in range(0, len(runs), len(variants))]
    before = Counter(mode for block in blocks for mode in block[: block.index("target")])
    assert before == {mode: len(blocks) // 2 for mode in ("spec", "ngram", "auto")}
    assert len({block[0] for block in blocks}) > 1  # none always runs first


def test_a_reply_of_no_tokens_is_no_speed_in_the_rows_tok_s_either():
    """The row's tok/s took a reply of no tokens as 0 tok/s: one reply at 20 tok/s beside one that ended at
    once had a median of 10.0, a speed nothing ran at. Where no reply of the row generated anything, its
    tok/s is '-' (null in JSON), as its speedup is."""
    from specchat.benchreport import render
    from specchat.benchresult import BenchResult
    from specchat.tableview import row_cells

    samples = [_sample("target", 0, 0, 20.0), _sample("target", 0, 1, 0.0, 0)]
    samples += [_sample("ngram k=8", 8, 0, 0.0, 0), _sample("ngram k=8", 8, 1, 0.0, 0)]
    target, ngram = BenchResult(samples=samples).rows()
    assert target.tokens_per_s == pytest.approx(20.0)
    assert ngram.tokens_per_s is None and row_cells(ngram)[3] == "-" and ngram.speedup is None
    for fmt in ("md", "csv", "json", "jsonl"):
        render(BenchResult(samples=samples), fmt)  # no format fails on the missing figure


def test_a_row_that_drafted_nothing_has_neither_acceptance_nor_accepted_per_round():
    """Auto's row where nothing was drafted showed `accept` "-" beside `acc/rnd` "0.00": accepted draft tokens
    per round of no drafts is as unmeasured as their rate. Both are "-" (null in JSON), as the target's are."""
    from specchat.benchresult import BenchResult
    from specchat.tableview import COLUMNS, row_cells

    samples = [_sample("target", 0, 0, 20.0), _sample("auto", 64, 0, 20.0)]
    _, auto = BenchResult(samples=samples).rows()
    assert auto.acceptance_rate is None and auto.mean_accepted_length is None
    cells = dict(zip(COLUMNS, row_cells(auto), strict=True))
    assert cells["accept"] == cells["acc/rnd"] == "-"
