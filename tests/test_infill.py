"""`POST /infill`, llama-server's fill-in-the-middle endpoint for editor plugins (llama.vim, llama.vscode), on the
fake backend through a real server: the prompt's layout, the response's shape, streaming, the refusals."""

from __future__ import annotations

import json

import fake_backend
import httpx
import pytest
from test_server import Server

from specchat import infill
from specchat.generation import ACCEPTED, REJECTED, TARGET, Segment, Update
from specchat.servequeue import Job, round_text
from specchat.speculative import Stats

VIM = {  # llama.vim's fim request beside the text; samplers, id_slot, cache_prompt and t_max_prompt_ms ignored
    "id_slot": 0, "n_indent": 4, "top_k": 40, "top_p": 0.90, "samplers": ["top_k", "top_p", "infill"],
    "stream": False, "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1000,
}  # fmt: skip
EXTRA = [{"text": "def helper():\n    return 1\n", "filename": "util.py", "time": [1, 2]}]


@pytest.fixture(scope="module")
def fim_server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("infill"), "--no-log", fim=True)
    yield running
    running.stop()


def post(server: Server, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}/infill", json=body, timeout=60)


def fill(prefix: str = "def f(x):\n    ", suffix: str = "\n\nprint(f(2))\n", **extra) -> dict:
    return {"input_prefix": prefix, "input_suffix": suffix, "temperature": 0, "n_predict": 64, **extra}


def test_the_prompt_is_llama_servers_fim_layout():
    """[FIM_REP]myproject\\n [FIM_SEP]file\\n text, [FIM_SEP]filename\\n, then FIM_PRE prefix prompt FIM_SUF suffix
    FIM_MID, each text as text (a FIM token's spelling in the code stays bytes)."""
    model = fake_backend.FakeEngine("t.fake.gguf", {"fim": True}, 4096)
    fim, enc = fake_backend.FIM, fake_backend.encode
    asked = infill.parse(fill("a<|fim_pre|>", "z", input_extra=EXTRA, prompt="b"), 2048)
    ids = infill.prompt_ids(asked, model)
    expected = [fim["rep"], *enc("myproject\n"), fim["sep"], *enc("util.py\n"), *enc(EXTRA[0]["text"])]
    expected += [fim["sep"], *enc("filename\n"), fim["pre"], *enc("a<|fim_pre|>b"), fim["suf"], *enc("z"), fim["mid"]]
    assert ids == expected and not asked.truncated


def test_a_prompt_too_long_keeps_the_prefixs_end_and_the_suffixs_start():
    model = fake_backend.FakeEngine("t.fake.gguf", {"fim": True}, 256)
    asked = infill.parse(fill("P" * 300 + "end", "start" + "S" * 300, input_extra=EXTRA, n_predict=16), 2048)
    ids = infill.prompt_ids(asked, model)
    text = model.detokenize(ids)
    assert asked.truncated and len(ids) + 16 <= 256
    assert "Pend" in text and "startS" in text and EXTRA[0]["text"] in text  # the other files: under half of it


def test_the_other_files_are_cut_the_same_whatever_the_text_around_the_cursor():
    """Cut to make room for this request's prefix, the other files began elsewhere at every keystroke (and at a
    warm-up of n_predict 0), and the KV cache never held them: they keep their end, at most half the context."""
    model = fake_backend.FakeEngine("t.fake.gguf", {"fim": True}, 512)
    extra = [{"filename": "big.py", "text": "x = 1\n" * 120}]
    heads = []
    for prefix, n_predict in (("def f(x):\n  ", 32), ("def f(x):\n  r" + "#" * 200, 32), ("", 0)):
        asked = infill.parse(fill(prefix, "", input_extra=extra, n_predict=n_predict), 2048)
        ids = infill.prompt_ids(asked, model)
        heads.append(ids[: ids.index(fake_backend.FIM["pre"])])
        assert asked.truncated and len(ids) + max(n_predict, 1) <= 512
    assert heads[0] == heads[1] == heads[2] and len(heads[0]) == 256


def test_the_suffix_is_cut_only_where_the_prefix_leaves_no_room():
    """A long suffix was cut to a quarter of the room even beside a two-character prefix."""
    model = fake_backend.FakeEngine("t.fake.gguf", {"fim": True}, 512)
    asked = infill.parse(fill("ab", "S" * 800, n_predict=16), 2048)
    ids = infill.prompt_ids(asked, model)
    assert asked.truncated and len(ids) == 512 - 16


def test_infill_answers_in_llama_servers_json(fim_server):
    reply = post(fim_server, fill(input_extra=EXTRA, prompt="return", **VIM, n_predict=64))
    assert reply.status_code == 200, reply.text
    body = reply.json()
    # the fake fills in what it saw, "[def f(x):\n    return|\n\nprint(f(2))\n]", cut by n_indent 4 at the blank line
    assert body["content"] == "[def f(x):\n    return|\n"
    assert body["stop"] is True and body["stop_type"] == "limit" and body["truncated"] is False
    # the blank line's token was generated, and cut: it counts, as llama-server counts it
    assert body["tokens_predicted"] == len(body["content"]) + 1 and body["tokens_evaluated"] > 0
    wanted = {"prompt_n", "prompt_ms", "prompt_per_token_ms", "predicted_n", "draft_n", "draft_n_accepted"}
    assert wanted <= set(body["timings"])


def test_the_other_files_are_read_once(fim_server):
    """llama.vim's warm-up (n_predict 0, response_fields [""]) reads the other files into the cache and answers {}:
    the request after it, with the same files, evaluates only what follows them."""
    extra = [{"text": "class Cached:\n    pass\n" * 20, "filename": "cached.py"}]
    warm = post(fim_server, {**VIM, "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "",
                             "n_predict": 0, "response_fields": [""]})  # fmt: skip
    assert warm.status_code == 200 and warm.json() == {}, warm.text
    fields = ["content", "timings/prompt_n", "tokens_cached", "truncated"]
    body = post(fim_server, fill(input_extra=extra, response_fields=fields)).json()
    assert set(body) == set(fields)  # llama-server's flat paths, as llama.vim reads them
    assert body["timings/prompt_n"] < 40 < body["tokens_cached"]


def test_infill_streams_llama_servers_events(fim_server):
    with httpx.stream("POST", f"{fim_server.url}/infill", json=fill(stream=True), timeout=60) as reply:
        assert reply.status_code == 200
        events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]
    *pieces, last = events
    assert all(event["stop"] is False for event in pieces) and last["stop"] is True
    assert "".join(event["content"] for event in pieces) == "[def f(x):\n    |\n\nprint(f(2))\n]"
    assert last["content"] == "" and last["stop_type"] == "eos" and "timings" in last


@pytest.mark.parametrize("stream", [False, True])
def test_n_indent_cuts_at_a_line_indented_less_keeping_its_indentation(fim_server, stream):
    """llama-server's n_indent (llama.vim sends the cursor line's): after a newline, a line whose text starts at
    fewer spaces or tabs than n_indent ends the completion there (stop_type "limit"), its indentation kept. The fake
    writes one character a token and drafts all of them, so the cut falls inside a round of several tokens."""
    full = "[def f(x):\n    |\n  y = 2\n]"
    asked = fill(suffix="\n  y = 2\n", n_indent=4, stream=stream)
    if stream:
        with httpx.stream("POST", f"{fim_server.url}/infill", json=asked, timeout=60) as reply:
            events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]
        *pieces, last = events
        content = "".join(event["content"] for event in pieces)
    else:
        last = post(fim_server, asked).json()
        content = last["content"]
    assert content == full[: full.index("y")] and last["stop_type"] == "limit", last
    assert last["tokens_predicted"] < len(full) + 1  # it stopped there, not at the end
    # a stop string that the cut's indentation began is not met: the indentation held back for it is still sent
    body = post(fim_server, fill(suffix="\n  y = 2\n", n_indent=4, stop=["  y!"])).json()
    assert body["content"] == content and body["stop_type"] == "limit", body


@pytest.mark.parametrize("extra", [{}, {"n_indent": 0}, {"n_indent": -1}, {"n_indent": 2}])
def test_n_indent_0_or_not_given_or_met_cuts_nothing(fim_server, extra):
    body = post(fim_server, fill(suffix="\n  y = 2", **extra)).json()
    assert body["content"] == "[def f(x):\n    |\n  y = 2]" and body["stop_type"] == "eos", body


def test_the_first_line_is_not_held_to_n_indent(fim_server):
    """The cursor's line goes on from where the cursor is: only the lines after a newline are checked."""
    body = post(fim_server, fill(prefix="x", suffix="", n_indent=8)).json()
    assert body["content"] == "[x|]" and body["stop_type"] == "eos", body


def test_t_max_predict_ms_stops_at_a_newline_once_the_time_is_past(fim_server):
    """llama-server's t_max_predict_ms: past that time generating, the completion ends with the next token that holds a
    newline (whole lines for the editor), never before one. The fake's tokens take milliseconds each."""
    body = post(fim_server, fill(prefix="x" * 40 + "\n    ", suffix="\ny\n", t_max_predict_ms=1)).json()
    assert body["content"] == "[" + "x" * 40 + "\n" and body["stop_type"] == "limit", body
    body = post(fim_server, fill(prefix="x" * 40 + "\n    ", suffix="\ny\n", t_max_predict_ms=60_000)).json()
    assert body["content"] == "[" + "x" * 40 + "\n    |\ny\n]" and body["stop_type"] == "eos", body


def test_the_limits_rules_token_by_token():
    """n_indent character by character in each token; t_max_predict_ms on a token with a newline, past the time."""
    limits = infill.Limits(n_indent=4, t_max_predict_ms=0)
    pieces = ["a:", "\n", "  ", "  b\n", " \t"]  # the line "    b" is indented enough, one of spaces and a tab too
    assert [limits.push(piece, 0.0) for piece in pieces] == pieces
    assert not limits.stopped and limits.push("c = 1", 0.0) == "" and limits.stopped and limits.reason == "n_indent"
    limits = infill.Limits(n_indent=4, t_max_predict_ms=0)
    assert limits.push("x\n    y\n\n    z", 0.0) == "x\n    y\n" and limits.stopped  # a blank line too, as llama-server
    timed = infill.Limits(n_indent=0, t_max_predict_ms=500)
    assert timed.push("long line", 0.9) == "long line" and not timed.stopped  # no newline yet
    assert timed.push("\n", 0.4) == "\n" and not timed.stopped  # in time
    assert timed.push(")\n  ", 0.6) == ")\n  " and timed.stopped and timed.reason == "t_max_predict_ms"


def test_a_cut_inside_a_round_drops_the_rest_of_the_round():
    """A speculative round brings several tokens at once: the reply keeps those up to the cut, as the target alone,
    token by token, would have stopped there; the draft's rejected guesses are never read; the time is the round's
    since the prompt was read."""
    segments = [Segment(text, ACCEPTED) for text in ("x", "\n", "  y")] + [Segment("\nw", REJECTED)]
    segments += [Segment(text, TARGET) for text in ("\n", "z", "\n")]
    job = Job(None, "", None, [])
    job.limits = infill.Limits(n_indent=2, t_max_predict_ms=0)
    assert round_text(job, Update(None, segments, Stats())) == "x\n  y\n" and job.limits.stopped
    job.limits = infill.Limits(n_indent=0, t_max_predict_ms=500)
    late = Stats(prefill_s=2.0, total_s=2.6)
    assert round_text(job, Update(None, segments, late)) == "x\n" and job.limits.reason == "t_max_predict_ms"
    job.limits = infill.Limits(n_indent=0, t_max_predict_ms=500)
    assert round_text(job, Update(None, segments, Stats(prefill_s=2.0, total_s=2.4))) == "x\n  y\nz\n"
    assert not job.limits.stopped


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"input_suffix": ""}, '"input_prefix" is required'),
        (fill(input_extra={"text": "x"}), '"input_extra" must be an array'),
        (fill(input_extra=[{"filename": "a.py"}]), 'must contain a "text" field'),
        (fill(input_extra=[{"text": "x", "filename": 5}]), '"filename" field must be a string'),
        (fill(prompt=5), '"prompt" must be a string'),
        (fill(input_prefix=["a"]), '"input_prefix" must be a string'),
        (fill(n_predict=-2), "'n_predict' must be a positive integer"),
        (fill(grammar="root ::= x"), "'grammar'"),
        (fill(n_indent="4"), "'n_indent' must be an integer"),
        (fill(n_indent=True), "'n_indent' must be an integer"),
        (fill(t_max_predict_ms=0.5), "'t_max_predict_ms' must be an integer"),
    ],
)
def test_bad_fields_are_400s(fim_server, body, message):
    reply = post(fim_server, body)
    assert reply.status_code == 400 and message in reply.json()["error"]["message"], reply.text


def test_a_model_without_fim_tokens_is_a_400(server):
    reply = post(server, fill())
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["message"].startswith(
        "Infill is not supported by this model: prefix token is missing. suffix token is missing."
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("nofim"), "--no-log")
    yield running
    running.stop()
