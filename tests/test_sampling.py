"""Logit processing, the greedy verifier, and the statistics of speculative sampling."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from fakes import chisquare_pvalue
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from specchat import sampling as sampling_module
from specchat.errors import EngineError
from specchat.sampling import (
    Sampler,
    SamplingParams,
    best_token,
    draw,
    probabilities,
    top_k_indices,
    verify_greedy,
    verify_sampled,
)

PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)  # every filter off


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x))
    return e / e.sum()


def params(**changes) -> SamplingParams:
    values = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0} | changes
    return SamplingParams(**values)


HAND = np.log(np.array([0.5, 0.3, 0.15, 0.05]))  # softmax(HAND) = [0.5, 0.3, 0.15, 0.05]


# -- probabilities() --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=0.8),  # the defaults: top-k 40, top-p 0.95, min-p 0.05
        params(),
        params(temperature=0.3, top_k=5),
        params(temperature=1.7, top_p=0.5),
        params(temperature=1.0, min_p=0.3),
        params(temperature=0.6, top_k=7, top_p=0.8, min_p=0.1),
    ],
)
def test_probabilities_is_a_distribution(sampling):
    """probabilities() returns a non-negative vector over the whole vocabulary that sums to 1."""
    rng = np.random.default_rng(0)
    for vocab in (1, 2, 10, 50, 100):
        probs = probabilities(rng.normal(0, 3, vocab), sampling)
        assert probs.shape == (vocab,)
        assert np.all(probs >= 0) and probs.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("k", [1, 2, 5, 17, 49])
def test_top_k_keeps_exactly_the_k_largest(k):
    """top_k = k leaves exactly the k highest logits with nonzero probability (distinct logits)."""
    logits = np.random.default_rng(k).permutation(np.linspace(-3, 3, 50))
    probs = probabilities(logits, params(top_k=k))
    assert np.count_nonzero(probs) == k
    assert set(np.flatnonzero(probs)) == set(np.argsort(logits)[-k:])
    kept = np.flatnonzero(probs)
    assert probs[kept] == pytest.approx(softmax(logits[kept]))


@pytest.mark.parametrize("k", [0, 50, 51, 1000])
def test_top_k_off_or_at_least_the_vocabulary_keeps_everything(k):
    """top_k = 0 or >= n_vocab is plain softmax."""
    logits = np.random.default_rng(1).normal(size=50)
    assert probabilities(logits, params(top_k=k)) == pytest.approx(softmax(logits))


@pytest.mark.parametrize(
    ("top_p", "expected"),
    [
        (1.0, [0.5, 0.3, 0.15, 0.05]),
        (0.99, [0.5, 0.3, 0.15, 0.05]),
        (0.9, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0]),
        (0.75, [0.625, 0.375, 0.0, 0.0]),
        (0.5001, [0.625, 0.375, 0.0, 0.0]),
        (0.4, [1.0, 0.0, 0.0, 0.0]),
        (0.0, [1.0, 0.0, 0.0, 0.0]),
    ],
)
def test_top_p_keeps_the_smallest_prefix_reaching_p(top_p, expected):
    """top_p keeps the fewest most-likely tokens whose mass reaches top_p, renormalised."""
    order = np.array([2, 0, 3, 1])  # not sorted: position must not matter
    logits = np.empty(4)
    logits[order] = HAND
    probs = probabilities(logits, params(top_p=top_p))
    assert probs[order] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("min_p", "expected"),
    [
        (0.05, [0.5, 0.3, 0.15, 0.05]),  # threshold 0.025
        (0.2, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0]),  # threshold 0.1
        (0.5, [0.625, 0.375, 0.0, 0.0]),  # threshold 0.25
        (0.99, [1.0, 0.0, 0.0, 0.0]),
    ],
)
def test_min_p_drops_tokens_below_a_fraction_of_the_best(min_p, expected):
    """min_p keeps tokens with probability >= min_p * max probability, renormalised."""
    assert probabilities(HAND, params(min_p=min_p)) == pytest.approx(expected)


@pytest.mark.parametrize("min_p", [1.0, 1.5])
def test_a_min_p_of_one_or_more_keeps_the_best_token_only(min_p):
    """The cut is at most the best token's probability: the best itself is kept, never an empty set."""
    assert probabilities(HAND, params(min_p=min_p)) == pytest.approx([1.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("temperature", [0.1, 0.5, 1.0, 2.0, 10.0])
def test_temperature_divides_the_logits(temperature):
    """With every filter off, probabilities = softmax(logits / temperature)."""
    logits = np.random.default_rng(2).normal(0, 2, 20)
    assert probabilities(logits, params(temperature=temperature)) == pytest.approx(softmax(logits / temperature))


@pytest.mark.parametrize("temperature", [1e-300, 1e-310, 5e-324])
def test_a_tiny_temperature_is_one_hot_on_the_best_not_an_error(temperature):
    """A request may send any temperature above 0: logits / 1e-320 overflowed to inf, and the row was refused
    as having "no finite probabilities" (a 500 in serve) where the best token has all the mass."""
    logits = np.array([1.0, 3.0, 2.0, -np.inf])
    with np.errstate(over="raise", invalid="raise"):  # no overflow warning on the console either
        assert probabilities(logits, params(temperature=temperature)).tolist() == [0.0, 1.0, 0.0, 0.0]


def test_temperature_flattens_or_sharpens():
    """Higher temperature raises entropy; a tiny temperature is nearly one-hot on the arg-max."""
    logits = np.random.default_rng(3).normal(0, 2, 20)

    def entropy(t):
        probs = probabilities(logits, params(temperature=t))
        nz = probs[probs > 0]
        return float(-(nz * np.log(nz)).sum())

    entropies = [entropy(t) for t in (0.25, 0.5, 1.0, 2.0, 4.0)]
    assert entropies == sorted(entropies) and entropies[0] < entropies[-1]
    assert probabilities(logits, params(temperature=1e-4))[np.argmax(logits)] == pytest.approx(1.0)


def test_temperature_is_applied_before_top_p():
    """The documented order top-k, temperature, top-p: a cooler temperature lets top-p keep fewer tokens."""
    assert np.count_nonzero(probabilities(HAND, params(top_p=0.6))) == 2  # 0.5 < 0.6 <= 0.8
    cool = probabilities(HAND, params(temperature=0.5, top_p=0.6))  # p^2 normalised: top token 0.685
    assert cool == pytest.approx([1.0, 0.0, 0.0, 0.0])


def test_greedy_flag_and_greedy_pick():
    """Temperature <= 0 is greedy: pick returns the arg-max and no distribution."""
    assert SamplingParams().greedy and SamplingParams(temperature=-1).greedy
    assert not SamplingParams(temperature=0.1).greedy
    logits = np.array([0.1, 2.0, -1.0, 1.9])
    assert Sampler(SamplingParams()).pick(logits) == (1, None)


def test_sampled_pick_returns_its_distribution():
    """A sampled pick returns the processed distribution it drew from and a token inside its support."""
    sampling = SamplingParams(temperature=0.7, top_k=3, seed=11)
    sampler = Sampler(sampling)
    logits = np.random.default_rng(4).normal(size=30)
    for _ in range(200):
        token, probs = sampler.pick(logits)
        assert probs == pytest.approx(probabilities(logits, sampling))
        assert probs[token] > 0


@pytest.mark.parametrize("scale", [0.01, 1.0, 5.0, 40.0])  # all near the maximum ... most far below it
@pytest.mark.parametrize("k", [1, 40, 999])
def test_top_k_indices_are_the_k_largest(scale, k):
    """top_k_indices looks near the maximum first, and still returns exactly the k largest logits,
    however many of them lie that near (including none but the maximum, and a row one longer than k)."""
    rng = np.random.default_rng(int(scale * 100) + k)
    for vocab in (k + 1, 5000):
        logits = (rng.normal(size=vocab) * scale).astype(np.float32)
        logits[rng.integers(vocab)] += 100.0 * scale  # one far ahead of the rest
        expected = set(np.argsort(-logits, kind="stable")[:k].tolist())
        assert set(top_k_indices(logits, k).tolist()) == expected


@pytest.mark.parametrize("k", [1, 2, 3])
def test_top_k_breaks_ties_at_its_edge_as_greedy_does_toward_the_lower_id(k):
    """Tied logits at the k-th place: the lower ids are kept, as np.argmax (greedy) and a stable sort pick them,
    so that --top-k 1 at any temperature is the greedy reply token for token. argpartition kept an arbitrary one
    of the tied: a row of 255 logits tied at the best three ways sampled id 252 where greedy took 8."""
    rng = np.random.default_rng(k)
    for vocab in (k + 1, 40, 255, 5000):
        logits = rng.integers(0, 4, size=vocab).astype(np.float32)  # many exact ties, at the top too
        expected = np.sort(np.argsort(-logits, kind="stable")[:k])
        assert np.sort(top_k_indices(logits, k)).tolist() == expected.tolist()
        if k == 1:
            at_one = Sampler(SamplingParams(temperature=0.8, top_k=1, top_p=1.0, min_p=0.0, seed=k))
            assert at_one.pick(logits)[0] == best_token(logits)


def sorted_reference(logits: np.ndarray, sampling: SamplingParams) -> np.ndarray:
    """probabilities() as written first: the whole vocabulary sorted, then the top-p and min-p cuts."""
    logits = np.asarray(logits, dtype=np.float64)
    keep = top_k_indices(logits, sampling.top_k) if 0 < sampling.top_k < len(logits) else np.arange(len(logits))
    probs = softmax(logits[keep] / sampling.temperature)
    order = np.argsort(-probs, kind="stable")
    n = len(order)
    if sampling.top_p < 1.0:
        n = min(n, int(np.searchsorted(np.cumsum(probs[order]), sampling.top_p)) + 1)
    if sampling.min_p > 0.0:
        n = min(n, max(1, int(np.count_nonzero(probs[order] >= sampling.min_p * probs[order][0]))))
    out = np.zeros(len(logits))
    out[keep[order[:n]]] = probs[order[:n]]
    return out / out.sum()


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_top_p_and_min_p_sort_only_what_they_can_keep_and_keep_the_same(data):
    """Sorting only a prefix of the order (tokens within min-p, or above a widening share of the best)
    keeps exactly the tokens a sort of the whole vocabulary keeps, ties and -inf included (--top-k 0)."""
    vocab = data.draw(st.integers(4, 400))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    logits = rng.normal(0, data.draw(st.sampled_from([0.01, 0.5, 3.0, 20.0])), vocab)
    logits[rng.integers(1, vocab, size=2)] = -np.inf  # masked tokens (never the first)
    logits[rng.integers(vocab, size=3)] = logits.max()  # ties at the top
    sampling = params(
        temperature=data.draw(st.sampled_from([0.3, 0.7, 1.0, 1.5])),
        top_k=data.draw(st.sampled_from([0, 0, 5, 40])),
        top_p=data.draw(st.sampled_from([1.0, 0.99, 0.9, 0.5, 0.05])),
        min_p=data.draw(st.sampled_from([0.0, 0.0, 0.05, 0.3])),
    )
    expected = sorted_reference(logits, sampling)
    got = probabilities(logits, sampling)
    assert np.array_equal(got > 0, expected > 0) and got == pytest.approx(expected, abs=1e-12)


def test_top_p_whose_mass_lies_below_every_share_cut_widens_to_the_whole_vocabulary():
    """top-p near 1 where the tokens it must keep are under a 1e-8 share of the best: the last resort
    (every token) still keeps exactly what a sort of the whole vocabulary keeps."""
    logits = np.array([0.0, -19.0, -19.0, -19.0, -19.5])  # e^-19 < 1e-8
    sampling = params(top_p=1 - 1e-9)
    got = probabilities(logits, sampling)
    assert np.count_nonzero(got) == 5
    assert np.array_equal(got > 0, sorted_reference(logits, sampling) > 0)


@pytest.mark.parametrize("seed", [0, 7])
def test_a_seed_of_zero_or_more_repeats_the_draws_and_a_negative_one_is_random(seed):
    """As llama.cpp's --seed: any seed >= 0 (0 included) gives the same draws each time; -1 is random."""
    logits = np.zeros(1000)
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed)

    def draws(sampler: Sampler) -> list[int]:
        return [sampler.pick(logits)[0] for _ in range(8)]

    assert draws(Sampler(sampling)) == draws(Sampler(sampling))
    at_random = replace(sampling, seed=-1)
    assert len({tuple(draws(Sampler(at_random))) for _ in range(3)}) > 1


def test_a_seed_of_zero_is_kept_as_given_not_replaced_by_a_random_one():
    assert SamplingParams(temperature=1.0, seed=0).seeded().seed == 0
    assert SamplingParams(temperature=1.0, seed=-1).seeded().seed >= 0


def test_top_k_indices_outside_one_to_the_vocabulary_keeps_every_index():
    logits = np.array([0.5, 2.0, -1.0])
    for k in (0, 3, 7):
        assert sorted(top_k_indices(logits, k).tolist()) == [0, 1, 2]


def test_a_row_with_no_finite_probability_is_an_engine_error_not_an_index_error():
    """An infinite logit makes every probability NaN: a named error (one line in run, a 500 in serve)."""
    for row in ([0.0, np.inf, 1.0], [0.0, np.nan, 1.0]):
        with pytest.raises(EngineError, match="no finite probabilities"):
            Sampler(SamplingParams(temperature=0.7, seed=1)).pick(np.array(row))
    masked = np.array([0.0, -np.inf, 1.0])  # a masked token is simply never drawn
    assert probabilities(masked, params())[1] == 0.0


@pytest.mark.parametrize("nans", [1, 40, 1000])
def test_nan_logits_in_a_vocabulary_larger_than_top_k_are_the_engine_error(nans):
    """top-k's tie-keeping partition dropped NaN ids (NaN is neither above nor equal to the k-th value): one NaN
    sampled on from the broken row, k of them raised a bare ValueError (a 500 in serve) past the draft's
    EngineError handler. The tests above use rows smaller than k, which never reach the partition."""
    row = np.linspace(-3.0, 3.0, 1000).astype(np.float32)
    row[np.random.default_rng(0).choice(1000, nans, replace=False)] = np.nan
    with pytest.raises(EngineError, match="no finite probabilities"):
        Sampler(SamplingParams(temperature=0.8, top_k=40, seed=1)).pick(row)


@pytest.mark.parametrize(
    "row", [[0.0, np.nan, 5.0], [0.0, np.inf, 1.0], [-np.inf] * 3], ids=["nan", "inf", "all-masked"]
)
def test_greedy_on_a_row_with_no_finite_best_is_the_same_engine_error_as_sampling(row):
    """Greedy took np.argmax of a broken row (a NaN, which arg-max returns first; an infinite logit; every
    token masked) and emitted that token in silence, where sampling names the broken output."""
    greedy = Sampler(SamplingParams(temperature=0.0))
    with pytest.raises(EngineError, match="no finite probabilities"):
        greedy.pick(np.array(row))
    rows = np.array([[0.0, 1.0, 0.0], row])  # the draft's token accepted, then the broken row
    for verify in (greedy.verify, lambda draft, q, rows: verify_greedy(draft, rows)):
        with pytest.raises(EngineError, match="no finite probabilities"):
            verify([1], None, rows)
        with pytest.raises(EngineError, match="no finite probabilities"):
            verify([], None, rows[1:])


def test_a_rejection_with_no_residual_mass_draws_from_the_target():
    """q at least p everywhere (here: q not normalised) leaves max(0, p - q) all zero: p itself is drawn from."""
    p, q = np.array([0.5, 0.5]), np.array([1.0, 1.0])
    rng = np.random.default_rng(0)
    results = {verify_sampled([0], [q], [p, p], rng) for _ in range(200)}
    assert {n for n, _ in results} == {0, 1}  # rejected half the time, accepted otherwise
    assert {token for n, token in results if n == 0} == {0, 1}


def test_a_shorter_draft_vocabulary_leaves_the_targets_extra_ids_in_the_residual():
    """The draft's q is 0 beyond its vocabulary, so the target may draw those ids after a rejection."""
    p, q = np.array([0.0, 0.5, 0.5]), np.array([1.0, 0.0])
    rng = np.random.default_rng(0)
    assert {verify_sampled([0], [q], [p, p], rng) for _ in range(200)} == {(0, 1), (0, 2)}


def test_draw_follows_an_unnormalised_vector_and_skips_zero_mass():
    """draw() samples proportionally to a non-negative vector and never returns a zero-mass index."""
    weights = np.array([0.0, 2.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    rng = np.random.default_rng(5)
    counts = np.bincount([draw(weights, rng) for _ in range(8000)], minlength=len(weights))
    assert chisquare_pvalue(counts, weights) > 0.001


# -- verify_greedy ----------------------------------------------------------------------------------


ROWS = np.array(
    [
        [0.0, 3.0, 1.0, 0.5],  # arg-max 1
        [2.0, 0.0, 1.0, 0.5],  # arg-max 0
        [0.0, 0.0, 0.1, 4.0],  # arg-max 3
        [1.0, 0.0, 5.0, 0.5],  # arg-max 2
    ]
)


@pytest.mark.parametrize(
    ("draft", "expected"),
    [
        ([], (0, 1)),  # no draft: the target's own token
        ([1, 0, 3], (3, 2)),  # all accepted: the bonus from the last row
        ([2, 0, 3], (0, 1)),  # wrong at 0: correction at 0
        ([1, 0, 0], (2, 3)),  # wrong at 2
        ([1, 3, 3], (1, 0)),  # wrong at 1, later tokens ignored
        ([1], (1, 0)),
    ],
)
def test_verify_greedy_on_hand_made_logits(draft, expected):
    """verify_greedy: length of the matching arg-max prefix and the arg-max right after it."""
    assert verify_greedy(draft, ROWS[: len(draft) + 1]) == expected


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_verify_greedy_property(data):
    """For any logits and draft, verify_greedy = (length of the arg-max-matching prefix, arg-max right after it)."""
    vocab = data.draw(st.integers(2, 12), label="vocab")
    n = data.draw(st.integers(0, 8), label="draft length")
    logits = data.draw(
        arrays(np.float64, (n + 1, vocab), elements=st.floats(-4, 4, allow_nan=False, allow_infinity=False)),
        label="logits",
    )
    best = logits.argmax(axis=1)
    match = data.draw(st.integers(0, n), label="matching prefix")
    tail = data.draw(st.lists(st.integers(0, vocab - 1), min_size=n - match, max_size=n - match), label="tail")
    draft = [int(t) for t in best[:match]] + tail
    expected_n = next((i for i, t in enumerate(draft) if t != best[i]), len(draft))
    assert verify_greedy(draft, logits) == (expected_n, int(best[expected_n]))


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_verify_sampled_returns_a_token_the_target_allows(data):
    """verify_sampled's token has target probability > 0; a rejected one-hot draft token is never re-drawn."""
    vocab = data.draw(st.integers(2, 8))
    n = data.draw(st.integers(0, 4))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    p = [probabilities(rng.normal(0, 2, vocab), params(top_k=data.draw(st.integers(0, vocab)))) for _ in range(n + 1)]
    draft = [int(rng.integers(vocab)) for _ in range(n)]
    one_hot = data.draw(st.booleans())
    q = None if one_hot else [probabilities(rng.normal(0, 2, vocab), PLAIN) for _ in range(n)]
    accepted, token = verify_sampled(draft, q, p, rng)
    assert 0 <= accepted <= n
    assert p[accepted][token] > 0
    if one_hot and accepted < n:
        assert token != draft[accepted]


def test_sampled_verify_processes_only_the_rows_it_reaches(monkeypatch):
    """A sampled verify batch computes the target's distribution row by row, up to the first rejection:
    rows after it cost a sort of the vocabulary each and are never looked at."""
    rows = np.random.default_rng(7).normal(size=(9, 10))
    impossible = int(np.argmin(rows[0]))  # outside the top 3 of row 0: rejected for certain
    seen = []
    real = sampling_module.probabilities
    monkeypatch.setattr(sampling_module, "probabilities", lambda row, p: seen.append(1) or real(row, p))
    accepted, token = Sampler(SamplingParams(temperature=0.8, top_k=3, seed=1)).verify([impossible] * 8, None, rows)
    assert (accepted, len(seen)) == (0, 1)
    assert token in top_k_indices(rows[0], 3)


def test_sampler_verify_dispatches_on_temperature():
    """Sampler.verify is verify_greedy at temperature 0 and verify_sampled on processed rows otherwise."""
    rows = np.random.default_rng(6).normal(size=(3, 10))
    draft = [int(np.argmax(rows[0])), 4]
    assert Sampler(SamplingParams()).verify(draft, None, rows) == verify_greedy(draft, rows)
    sampling = SamplingParams(temperature=0.9, top_k=5, seed=21)
    q = [probabilities(rows[i] * 0.5, sampling) for i in range(2)]
    expected = verify_sampled(
        draft, q, [probabilities(r, sampling) for r in rows], np.random.default_rng(sampling.seed)
    )
    assert Sampler(sampling).verify(draft, q, rows) == expected


# -- speculative sampling reproduces the target distribution ----------------------------------------

Verifier = Callable[..., tuple[int, int]]
N = 20_000

P_A = np.array([0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02])
Q_A = np.array([0.05, 0.05, 0.10, 0.30, 0.20, 0.10, 0.10, 0.10])
Q_ZERO = np.array([0.0, 0.0, 0.4, 0.3, 0.3, 0.0, 0.0, 0.0])  # zero where p has mass
P_SPARSE = np.array([0.5, 0.3, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0])  # zero where q has mass
Q_UNIFORM = np.full(8, 1 / 8)
Q_PEAKED = np.array([0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.93])
P_NEXT = np.array([0.1, 0.1, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1])  # the bonus row; never the first token


def first_token_counts(verifier: Verifier, p: np.ndarray, q: np.ndarray | None, x: int | None, seed: int):
    """Counts of the first emitted token over N single-token rounds: x ~ q (or x fixed for q=None)."""
    rng = np.random.default_rng(seed)
    xs = rng.choice(len(p), size=N, p=q) if q is not None else np.full(N, x)
    q_rows = None if q is None else [q]
    counts = np.zeros(len(p))
    for draft_token in xs:
        draft = [int(draft_token)]
        accepted, token = verifier(draft, q_rows, [p, P_NEXT], rng)
        counts[draft[0] if accepted else token] += 1
    return counts


def accept_when_q_positive(draft, q, p, rng):
    """WRONG: accepts any token the draft could produce, so the output follows q."""
    for i, token in enumerate(draft):
        if (1.0 if q is None else q[i][token]) > 0:
            continue
        return i, draw(p[i], rng)
    return len(draft), draw(p[len(draft)], rng)


def correct_from_p(draft, q, p, rng):
    """WRONG: right acceptance test, but the correction is drawn from p instead of the residual."""
    for i, token in enumerate(draft):
        q_x = 1.0 if q is None else float(q[i][token])
        if q_x > 0 and rng.random() < min(1.0, p[i][token] / q_x):
            continue
        return i, draw(p[i], rng)
    return len(draft), draw(p[len(draft)], rng)


SAMPLED_CASES = {
    "different": (P_A, Q_A, None),
    "q-zero-where-p-has-mass": (P_A, Q_ZERO, None),
    "p-zero-where-q-has-mass": (P_SPARSE, Q_UNIFORM, None),
    "q-equals-p": (P_A, P_A, None),
    "q-peaked-on-unlikely": (P_A, Q_PEAKED, None),
    "one-hot-likely": (P_A, None, 0),
    "one-hot-unlikely": (P_A, None, 7),
    "one-hot-impossible": (P_SPARSE, None, 5),
}


@pytest.mark.parametrize("case", sorted(SAMPLED_CASES))
def test_speculative_sampling_reproduces_the_target_distribution(case):
    """verify_sampled's first token is distributed as p whatever q is (chi-square, 20k draws)."""
    p, q, x = SAMPLED_CASES[case]
    counts = first_token_counts(verify_sampled, p, q, x, seed=sorted(SAMPLED_CASES).index(case))
    assert chisquare_pvalue(counts, p) > 0.001


@pytest.mark.parametrize("wrong", [accept_when_q_positive, correct_from_p], ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", ["different", "one-hot-likely"])
def test_wrong_verifiers_fail_the_same_test(wrong, case):
    """The chi-square test has teeth: deliberately wrong verifiers are rejected with p-value < 1e-6."""
    p, q, x = SAMPLED_CASES[case]
    counts = first_token_counts(wrong, p, q, x, seed=100)
    assert chisquare_pvalue(counts, p) < 1e-6


JOINT_VOCAB = 6
_rows = np.random.default_rng(7)
P0 = _rows.dirichlet(np.ones(JOINT_VOCAB) * 2)
P1 = _rows.dirichlet(np.ones(JOINT_VOCAB) * 2, size=JOINT_VOCAB)  # P1[a] = p(. | a)
Q0 = _rows.dirichlet(np.ones(JOINT_VOCAB))
Q1 = _rows.dirichlet(np.ones(JOINT_VOCAB), size=JOINT_VOCAB)
P_LATER = np.full(JOINT_VOCAB, 1 / JOINT_VOCAB)  # rows after two tokens: they never reach the pair


def p_row(context: tuple[int, ...]) -> np.ndarray:
    """Target rows that depend on the context: p(a), then p(b | a)."""
    return P0 if not context else P1[context[0]] if len(context) == 1 else P_LATER


def q_row(context: tuple[int, ...]) -> np.ndarray:
    """Draft rows, unrelated to the target's."""
    return Q0 if not context else Q1[context[0]] if len(context) == 1 else P_LATER


@pytest.mark.parametrize("one_hot", [False, True], ids=["q-rows", "one-hot"])
def test_two_token_rounds_reproduce_the_joint_distribution(one_hot):
    """Rounds of k=2 drafts: the first two emitted tokens follow p(a) * p(b | a) (chi-square over 36 pairs)."""
    rng = np.random.default_rng(8 + one_hot)
    counts = np.zeros((JOINT_VOCAB, JOINT_VOCAB))
    for _ in range(N):
        emitted: list[int] = []
        while len(emitted) < 2:
            context = tuple(emitted)
            draft, qs = [], []
            for _ in range(2):
                q = q_row((*context, *draft))
                # one-hot: a deterministic guess (n-gram style), the most likely token under q
                draft.append(int(np.argmax(q)) if one_hot else draw(q, rng))
                qs.append(q)
            p_rows = [p_row((*context, *draft[:i])) for i in range(3)]
            accepted, token = verify_sampled(draft, None if one_hot else qs, p_rows, rng)
            emitted += [*draft[:accepted], token]
        counts[emitted[0], emitted[1]] += 1
    joint = P0[:, None] * P1
    assert chisquare_pvalue(counts, joint) > 0.001


TARGET_LOGITS = np.log(np.array([0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02]))
DRAFT_LOGITS = np.log(np.array([0.05, 0.05, 0.10, 0.30, 0.20, 0.10, 0.10, 0.10]))
FILTERED = {  # each filter at work, and at its edges (one token left: top-k 1, top-p 0, min-p 1, a tiny temperature)
    "top-k 3": params(temperature=0.7, top_k=3),
    "top-p 0.5": params(temperature=1.5, top_p=0.5),
    "min-p 0.3": params(temperature=0.9, min_p=0.3),
    "all three": params(temperature=1.3, top_k=6, top_p=0.8, min_p=0.1),
    "top-k 1": params(temperature=2.0, top_k=1),
    "top-p 0": params(temperature=2.0, top_p=0.0),
    "min-p 1": params(temperature=2.0, min_p=1.0),
    "temperature 1e-300": params(temperature=1e-300),
}


@pytest.mark.parametrize("case", sorted(FILTERED))
def test_sampler_verify_follows_the_filtered_target_distribution(case):
    """Through Sampler.verify from raw logits, the draft's q processed with the same settings as the target's p (as
    the engine does): the first token follows probabilities(target) under each filter and at its edges, where p and
    q are cut to a few tokens, or one, and q's may be one the target never allows (chi-square, 20k rounds)."""
    sampling = replace(FILTERED[case], seed=sorted(FILTERED).index(case))
    sampler = Sampler(sampling)
    p, q = probabilities(TARGET_LOGITS, sampling), probabilities(DRAFT_LOGITS, sampling)
    rows = np.stack([TARGET_LOGITS, TARGET_LOGITS])
    counts = np.zeros(len(p))
    for _ in range(N):
        guess = draw(q, sampler.rng)
        accepted, token = sampler.verify([guess], [q], rows)
        counts[guess if accepted else token] += 1
    if np.count_nonzero(p) == 1:  # one token allowed: every round emits it, the draft's guess or not
        assert counts[np.argmax(p)] == N
    else:
        assert chisquare_pvalue(counts, p) > 0.001
