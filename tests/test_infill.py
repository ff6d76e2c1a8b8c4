"""`POST /infill`, llama-server's fill-in-the-middle endpoint for editor plugins (llama.vim, llama.vscode), on the
fake backend through a real server: the prompt's layout, the response's shape, streaming, the refusals."""

from __future__ import annotations

import json

import fake_backend
import httpx
import pytest
from test_server import Server

from specchat import infill

VIM = {  # what llama.vim sends beside the text (its fim request), all read and ignored but n_predict and top_k/p
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
    assert text.startswith("P") and "Pend" in text and "startS" in text and "return 1" not in text


def test_infill_answers_in_llama_servers_json(fim_server):
    reply = post(fim_server, fill(input_extra=EXTRA, prompt="return", **VIM, n_predict=64))
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["content"] == "[def f(x):\n    return|\n\nprint(f(2))\n]"  # the fake fills in what it saw
    assert body["stop"] is True and body["stop_type"] == "eos" and body["truncated"] is False
    assert body["tokens_predicted"] == len(body["content"]) and body["tokens_evaluated"] > 0
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
