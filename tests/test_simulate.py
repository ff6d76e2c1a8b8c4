"""benchmarks/simulate.py on a tiny hand-made trace: exact replay, lossless drafting, the virtual clock
charging what the regime says, and the regimes themselves. No model files."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from specchat.drafters import Draft, Outcome

PATH = Path(__file__).parent.parent / "benchmarks" / "simulate.py"


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("simulate", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["simulate"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules["simulate"]


EOG, START = 1, 2  # ids of the tiny vocabulary: end-of-generation and a control token
PROMPT = [START, 3, 4, 5]
TARGET = [6, 7, 8, 9, 6, 7, 8, 9]
WRONG_AT = {3}  # the draft guesses wrong after target[:3]
OFF = 11  # what the draft guesses once off the target's text: the replay's filler (the last id)


def draft_next(context: list[int]) -> int:
    """A draft that follows the target except at WRONG_AT, and ends where the target ends."""
    line = PROMPT + TARGET
    if context != line[: len(context)]:
        return OFF
    i = len(context) - len(PROMPT)
    if i == len(TARGET):
        return EOG
    return 10 if i in WRONG_AT else TARGET[i]


def tiny_trace(sim, tails: bool = False):
    """As record_traces.py records it: each path up to its first wrong guess (tails: all 16 guesses)."""
    truth = [*TARGET, EOG]
    guesses = []
    for i in range(len(TARGET) + 1):
        path: list[int] = []
        while len(path) < 16 and not (path and path[-1] == EOG):
            if path and not tails and path[-1] != truth[i + len(path) - 1]:
                break
            path.append(draft_next(PROMPT + TARGET[:i] + path))
        guesses.append(path)
    return sim.Trace("t1", "code", PROMPT, TARGET, guesses, EOG, frozenset({EOG, START}), frozenset({EOG}), 12, 128)


def unit_regime(sim):
    """v(n) = n target steps of 1 s, a draft step half a target step: costs easy to add up by hand."""
    return sim.Regime("unit", 0.5, {n: float(n) for n in (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)}, 1.0, "test")


def test_target_alone_replays_the_trace(sim):
    stats = sim.replay(tiny_trace(sim), unit_regime(sim), "target")
    assert stats.generated == len(TARGET)
    assert stats.stop_reason == "eog"
    # One step per token after the first (read off the prefill), plus the round that ends.
    assert stats.decode_s == pytest.approx(len(TARGET))


@pytest.mark.parametrize("tails", [False, True])
def test_draft_model_is_lossless_and_costs_what_the_regime_says(sim, tails):
    stats = sim.replay(tiny_trace(sim, tails), unit_regime(sim), "spec:2")  # replay() raises unless lossless
    # Prefill: target 4 tokens (4), whose last row gives 6; after that first token the draft model's 4 (0.5 v(4)
    # = 2), which the user waits for: decode. Rounds, as draft steps + verify batch: 6 off the prefill, no step;
    # [7, 8] + bonus 9: 2 x 0.5 + v(3); [6, 7] + bonus 8: catch-up of 2 (0.5 v(2)) + 0.5 + v(3); [9, EOG]: the
    # same, the EOG ends the reply.
    assert stats.prefill_s == pytest.approx(4.0)
    assert stats.first_token_s == pytest.approx(4.0)
    assert stats.decode_s == pytest.approx(2.0 + 4.0 + 4.5 + 4.5)
    assert stats.rounds == 4
    assert stats.accepted == 0 + 2 + 2 + 2


def test_every_strategy_and_auto_replay_exactly_in_every_regime(sim):
    trace = tiny_trace(sim)
    for regime in sim.REGIMES.values():
        for strategy in (*sim.FIXED, "auto", *sim.PEERS):
            assert sim.replay(trace, regime, strategy).generated == len(TARGET)
        assert sim.replay(trace, regime, "auto", regime.costs(busy=True)).generated == len(TARGET)


def test_the_draft_refuses_a_context_the_trace_does_not_cover(sim):
    trace = tiny_trace(sim)
    draft = sim.TraceDraft(trace, sim.Clock(), lambda n: 0.0)
    draft.eval([*PROMPT, 6, 7, 8, 10], 0)
    assert draft.eval([OFF], 1)[0].argmax() == OFF  # past a wrong guess: filler
    draft.truncate(len(PROMPT))
    draft.eval([10], 0)  # a guess the draft did not make after the prompt
    with pytest.raises(sim.OffTrace):
        draft.eval([OFF], 1)


def test_regimes_load_and_interpolate(sim):
    for regime in sim.REGIMES.values():
        assert regime.v(1) == 1.0
        assert 0.0 < regime.c < 1.0
        costs = regime.costs()
        assert sorted(costs.verify) == sorted(sim.QUICK_BATCHES)
        assert all(regime.v(n) < regime.v(n + 8) for n in range(1, 200, 8))  # dearer with size, overall
        busy = regime.costs(busy=True)
        # busy: every time 4x slow, each ratio off by up to 30% (what the interleaved measurement gives)
        assert busy.busy and busy.step_s == pytest.approx(4 * costs.step_s)
        assert busy.verify[1] == 1.0 and 0.7 <= busy.verify[16] / costs.verify[16] <= 1.3
    epyc = sim.REGIMES["epyc-2core"]
    assert epyc.v(7) == pytest.approx((epyc.v(6) + epyc.v(8)) / 2)


def test_the_table_reports_every_category(sim, tmp_path):
    trace = tiny_trace(sim)
    cells = sim.simulate([trace], [sim.REGIMES["gpu-consumer"]], ["spec:4"])
    assert [(c.regime, c.category) for c in cells] == [
        ("gpu-consumer", "code"),
        ("gpu-consumer", "all"),
        ("gpu-consumer busy", "code"),
        ("gpu-consumer busy", "all"),
    ]
    assert cells[0].best in ("target", "spec:4")
    assert "| gpu-consumer | code |" in sim.markdown(cells)


# -- the peers: llama-server's ngram-mod and ngram-map-k ------------------------------------------------------

SPAN = list(range(100, 200))  # 100 distinct tokens in the prompt that a reply may copy


def peer_after(sim, reply: list[int], prompt: list[int] | None = None):
    peer = sim.draftless_peers.NgramModPeer()
    prompt = prompt if prompt is not None else [START, *SPAN, 7]
    peer.prefill(prompt[:-1])  # as the loop calls it: everything but the prompt token its first round verifies
    assert peer.propose(prompt, 64).tokens == []  # the server pools the prompt, then samples the first token
    return peer, [*prompt, *reply]


def test_ngram_mod_drafts_only_after_24_tokens_match_and_then_a_chain_of_48_or_more(sim):
    for copied in (1, 12, 23):  # fewer than n_match = 24 reply tokens follow the span: no draft
        peer, context = peer_after(sim, SPAN[:copied])
        assert peer.propose(context, 64).tokens == []
    peer, context = peer_after(sim, SPAN[:24])
    assert peer.propose(context, 64).tokens == SPAN[24:88]  # n_max = 64 tokens of the chain
    assert peer.propose(context, 10).tokens == SPAN[24:34]  # the server's cut to the reply's end
    # A chain shorter than n_min is no draft at all (small settings, so that the pool holds only the prompt).
    for span, drafted in ((10, []), (12, [*SPAN[4:12], 7]), (30, SPAN[4:20])):
        peer = sim.draftless_peers.NgramModPeer(n_match=4, n_min=8, n_max=16)
        peer.propose([START, *SPAN[:span], 7], 64)
        assert peer.propose([START, *SPAN[:span], 7, *SPAN[:4]], 64).tokens == drafted


def test_ngram_mod_pools_the_reply_in_chunks_and_forgets_after_five_low_rounds(sim):
    own = list(range(300, 330))  # 30 tokens of the reply's own
    # The prompt's n-grams are pooled up to 24 tokens before its end; the rest once 32 more tokens arrived.
    peer, context = peer_after(sim, own[:9])
    pooled = len(peer.pool)
    peer.propose(context, 64)
    assert len(peer.pool) == pooled
    peer, context = peer_after(sim, own[:10])
    peer.propose(context, 64)
    assert len(peer.pool) == pooled + 9
    peer, context = peer_after(sim, [*own, *own[:24]])  # the reply repeats its own 24 tokens
    peer.propose(context, 64)  # (the chain of the repeat is 29 tokens long: no draft)
    assert peer.pool[tuple(own[:24])] == own[24]
    peer, context = peer_after(sim, SPAN[:24])
    for _ in range(5):
        draft = peer.propose(context, 64)
        assert draft.tokens
        peer.learn(Outcome(len(context), draft, 0, [7], 1.0))  # none kept: a low round
    assert peer.pool == {}
    assert peer.propose(context, 64).tokens == SPAN[24:88]  # pooled again from the whole text


def test_ngram_map_k_drafts_the_48_tokens_after_a_12_token_key_as_often_as_they_held(sim):
    prompt = [START, *SPAN, 7]
    peer = sim.draftless_peers.NgramMapKPeer()
    peer.prefill(prompt[:-1])
    assert peer.propose(prompt, 64).tokens == []  # the server's begin, before its first sampled token
    assert peer.propose([*prompt, *SPAN[:11]], 64).tokens == []  # 11 tokens are no key
    context = [*prompt, *SPAN[:12]]  # the key: 11 tokens of the text and the token just sampled
    draft = peer.propose(context, 64)
    assert draft.tokens == SPAN[12:60]  # m = 48, a static copy
    assert peer.propose(context, 10).tokens == SPAN[12:22]  # the server's cut to the reply's end
    peer.learn(Outcome(len(context), draft, 3, [*SPAN[12:15], 5], 1.0))
    assert peer.propose(context, 64).tokens == SPAN[12:15]  # that key now drafts what it kept last time
    peer.learn(Outcome(len(context), Draft(SPAN[12:15]), 0, [5], 1.0))
    assert peer.propose(context, 64).tokens == []  # ... and nothing once it kept nothing
    short = [START, *SPAN[:40], 7]
    peer = sim.draftless_peers.NgramMapKPeer()
    peer.propose(short, 64)
    assert peer.propose([*short, *SPAN[:12]], 64).tokens == []  # under 2 n + m = 72 tokens of text


def test_the_table_compares_auto_with_llama_servers_draftless_modes(sim):
    prompt = [START, *SPAN]
    trace = sim.Trace(
        "t2",
        "code-edit",
        prompt,
        SPAN[:90],
        [[] for _ in range(91)],
        None,
        frozenset({START}),
        frozenset({EOG}),
        201,
        90,
    )
    cells = sim.simulate([trace], [sim.REGIMES["gpu-consumer"]], ["ngram:8"], busy=True)
    assert all(set(cell.peers) == set(sim.PEERS) and min(cell.peers.values()) > 1.0 for cell in cells)
    assert cells[0].peer == max(cells[0].peers.values())  # the best draftless mode of the cell
    assert cells[0].vs_peer == pytest.approx(cells[0].auto / cells[0].peer)
    assert cells[2].peers == cells[0].peers  # the busy variant compares with the same peer runs
    assert "auto/best of them" in sim.markdown(cells)


def test_line_roles_replay_where_the_trace_recorded_them(sim):
    """Traces recorded before line roles replay as before (no roles: prompt lookup's pooled odds);
    newer ones give prompt lookup each token's role, in the trace's own remapped ids."""
    record = {"id": "r", "category": "code", "prompt": [7, 500, 8], "target": [9, 700], "guesses": [[9], [], []]}
    record |= {"end": None, "control": [], "eog": [], "max_tokens": 2}
    old = sim.compact(record)
    assert old.breaks is None and sim.TraceTarget(old, sim.Clock(), lambda n: 1.0).line_role is None
    new = sim.compact(record | {"breaks": [500], "blanks": [700]})
    role = sim.TraceTarget(new, sim.Clock(), lambda n: 1.0).line_role
    prompt, target = new.prompt, new.target
    assert [role(t) for t in prompt] == ["text", "break", "text"] and [role(t) for t in target] == ["text", "space"]


class RealVocab:
    """A tokenizer on real ids: one id per character (its code point)."""

    def piece(self, token: int) -> bytes:
        return chr(token).encode()

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) for c in text]


def test_the_target_tokenizer_works_on_a_traces_own_ids(sim):
    """Prompt lookup's rewriter gets text for a trace's remapped ids and ids for text, through the
    target's tokenizer on the real ids; a token the trace never holds becomes the filler, which the
    replayed target never produces."""
    record = {"id": "r", "category": "code", "prompt": [ord("a"), ord("b")], "target": [ord("c")], "guesses": [[], []]}
    record |= {"end": None, "control": [], "eog": [], "max_tokens": 1, "meta": {"target": {"file": "t.gguf"}}}
    trace = sim.compact(record)
    assert trace.target_file == "t.gguf"
    codec = sim.TraceCodec(trace, RealVocab())
    assert b"".join(codec.piece(t) for t in trace.prompt + trace.target) == b"abc"
    assert codec.tokenize("cab") == [*trace.target, *trace.prompt]
    assert codec.tokenize("z") == [trace.filler]


def test_without_the_pulled_target_a_trace_replays_without_the_tokenizer(sim, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path))
    assert sim.codec_for(tiny_trace(sim)) is None
    assert sim.replay(tiny_trace(sim), unit_regime(sim), "auto").generated == len(TARGET)


def test_the_draft_replays_its_recorded_confidence_where_the_trace_has_it(sim):
    """With `conf` the draft's row gives its guess the recorded probability (and keeps it the arg-max,
    even below one half); past a wrong guess, where nothing was recorded, full confidence, so that a
    drafter stopping where it is unsure gains nothing there; without `conf` a one-hot row as before."""
    trace = tiny_trace(sim)
    # As recorded: a path's later guesses are the next positions' first ones (record_traces reuses them).
    firsts = [0.2 + 0.08 * i for i in range(len(trace.guesses))]
    conf = [firsts[i : i + len(row)] for i, row in enumerate(trace.guesses)]
    dated = sim.Trace(**{**trace.__dict__, "conf": conf})
    draft = sim.TraceDraft(dated, sim.Clock(), lambda n: 0.0)

    def confidence(row):
        assert np.argmax(row) == np.argmax(np.exp(row - row.max()))
        return float(np.exp(row - row.max()).sum() ** -1)

    assert confidence(draft.eval(PROMPT, 1)[0]) == pytest.approx(0.2, abs=1e-4)  # below one half: still the arg-max
    assert confidence(draft.eval([6, 7], 1)[0]) == pytest.approx(0.36, abs=1e-4)  # after target[:2]
    row = draft.eval([8, 10], 1)[0]  # past the wrong guess 10 (after target[:3]): filler, sure of itself
    assert row.argmax() == OFF and confidence(row) == pytest.approx(1.0)
    assert sim.TraceDraft(trace, sim.Clock(), lambda n: 0.0).eval([*PROMPT], 1)[0].max() == 1.0  # one-hot
