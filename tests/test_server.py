"""`specchat serve` as users run it: a child process listening on a free localhost port, the fake backend
as its plugin, and the official `openai` client (plus raw httpx where the client hides the status).

The fake target's greedy reply to P is REPLY with P quoted, so the text through the server is compared
with `specchat run --temperature 0` exactly. Each target eval sleeps a little, so that a long reply can
be caught mid-way (cancelled, queued behind)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import fake_backend
import httpx
import openai
import pytest
from sighelp import default_signals
from typer.testing import CliRunner

from specchat import logread
from specchat.cli import app

TESTS = Path(__file__).resolve().parent
PROMPT = "Name three colours."
KEY = "sk-test-123"


def child_env(folder: Path) -> dict:
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "SPECCHAT_DEBUG")}
    env |= {f"SPECCHAT_{n}_DIR": str(folder / n.lower()) for n in ("CONFIG", "MODELS", "CACHE", "STATE", "DATA")}
    return env | {"SPECCHAT_PLUGINS": "fake_backend", "PYTHONPATH": path}


class Server:
    """A `specchat serve` child process; its console (stderr) goes to a file the tests can read."""

    def __init__(
        self, folder: Path, *args: str, eval_sleep: float = 0.002, env=None, files=None, **target_extra
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.env = folder, child_env(folder) | (env or {})
        self.target, self.draft = fake_backend.write_pair(folder / "files", eval_sleep=eval_sleep, **target_extra)
        self.files = ["--target", str(self.target), "--draft", str(self.draft)] if files is None else files
        self.log = folder / "console.txt"
        command = [sys.executable, "-m", "specchat", "serve", *self.files, "--mode", "spec", "--port", "0", *args]
        with open(self.log, "w") as sink:
            # default_signals: a runner started in the background (`.ci/run &`) passes SIGINT on as ignored,
            # which specchat rightly leaves alone; the tests that send Ctrl-C need it as a terminal sends it.
            self.process = subprocess.Popen(
                command, stdout=sink, stderr=subprocess.STDOUT, env=self.env, cwd=folder, preexec_fn=default_signals
            )
        found = self.wait_for(r"on (http://127\.0\.0\.1:\d+)/v1")
        self.url = found.group(1)

    def wait_for(self, pattern: str, timeout: float = 30) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.console())
            if found:
                return found
            assert self.process.poll() is None, self.console()
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} not in the console:\n{self.console()}")

    def console(self) -> str:
        return self.log.read_text()

    def client(self, key: str = "none") -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=60)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("serve"))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A server that needs a key and queues nothing behind the running request (slower: a long reply
    is surely still running when the next request comes)."""
    running = Server(
        tmp_path_factory.mktemp("guarded"), "--api-key", KEY, "--queue", "0", "--no-log",
        "--allow-origin", "https://chat.example.com", eval_sleep=0.03,
    )  # fmt: skip
    yield running
    running.stop()


def run_greedy(server: Server, prompt: str) -> str:
    """What `specchat run` prints for the prompt, greedy, with the same files and mode."""
    command = [sys.executable, "-m", "specchat", "run", *server.files, "--mode", "spec", "--temperature", "0", prompt]
    result = subprocess.run(command, capture_output=True, text=True, env=server.env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.removesuffix("\n")  # run ends plain text with a newline


def ask(client: openai.OpenAI, prompt: str = PROMPT, **extra):
    return client.chat.completions.create(
        model="target.fake.gguf", messages=[{"role": "user", "content": prompt}], temperature=0, **extra
    )


def test_chat_completion_equals_run(server):
    reply = ask(server.client())
    assert reply.choices[0].message.content == run_greedy(server, PROMPT) == fake_backend.REPLY.format(prompt=PROMPT)
    assert reply.choices[0].finish_reason == "stop"
    extra = reply.model_extra
    timings, spec = extra["timings"], extra["speculative"]
    assert timings["predicted_n"] == reply.usage.completion_tokens > 0
    assert timings["prompt_n"] + timings["cache_n"] == reply.usage.prompt_tokens > timings["cache_n"]
    assert 0 < timings["draft_n_accepted"] <= timings["draft_n"] and timings["predicted_per_second"] > 0
    # The first token is the target's own (the draft model reads the prompt after it); then spec drafts.
    assert spec["mode"] == "spec" and spec["rounds_by_source"] == {"target": 1, "spec": spec["rounds"] - 1}
    assert spec["acceptance_rate"] == pytest.approx(timings["draft_n_accepted"] / timings["draft_n"], abs=1e-4)
    assert len(spec["position_acceptance"]) == 4
    # the acceptance in the words of every other line (--stats, the live view, /stats), not "(rejected 1)"
    server.wait_for(r"POST /v1/chat/completions 200 .*accepted \d+/\d+ \(\d+%\), spec k=4")


def test_streamed_chat_equals_run_and_ends_with_stats(server):
    chunks = list(ask(server.client(), stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == fake_backend.REPLY.format(prompt=PROMPT)
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop"
    assert last.model_extra["timings"]["predicted_n"] > 0 and last.model_extra["speculative"]["rounds"] > 0
    assert all("timings" not in c.model_extra for c in chunks[:-1])


def test_stream_options_include_usage_adds_a_last_chunk_with_no_choices(server):
    """As the API has it (and clients that sum usage from the last chunk read it): a chunk with choices = []
    and the usage, after the one that finishes the text; without the option, the stream is as before."""
    chunks = list(ask(server.client(), stream=True, stream_options={"include_usage": True}))
    *text_chunks, last = chunks
    assert last.choices == [] and last.usage.completion_tokens > 0
    assert text_chunks[-1].choices[0].finish_reason == "stop"
    # The usage comes once: clients that add up every chunk's usage (LangChain) counted it twice
    assert [c for c in chunks if c.usage is not None] == [last]
    assert text_chunks[-1].model_extra["timings"] == last.model_extra["timings"]
    assert "".join(c.choices[0].delta.content or "" for c in text_chunks) == fake_backend.REPLY.format(prompt=PROMPT)
    assert all(c.choices for c in ask(server.client(), stream=True))
    body = {"messages": [{"role": "user", "content": "Hi"}], "stream_options": {"include_usage": True}}
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)  # not streamed: refused
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_stream_options"


def test_raw_stream_ends_with_done(server):
    body = {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=60) as response:
        lines = [line for line in response.iter_lines() if line]
    assert response.headers["content-type"].startswith("text/event-stream")
    # nginx, in front for TLS, would hold the stream back without these
    assert response.headers["cache-control"] == "no-cache" and response.headers["x-accel-buffering"] == "no"
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    assert "usage" in json.loads(lines[-2].removeprefix("data: "))


def test_unicode_line_separators_in_a_reply_do_not_cut_its_events(server):
    """httpx's iter_lines (and httpx-sse before 0.4.2) split lines as str.splitlines() does: a raw U+2028 in an
    event's JSON cut it in two, and the reader failed on half an object. The fake reply quotes the prompt."""
    prompt = "one\u2028two\u2029three\x85four"
    body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=60) as response:
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == fake_backend.REPLY.format(
        prompt=prompt
    )


def test_stop_string_and_max_tokens(server):
    client = server.client()
    assert ask(client, stop=["text"]).choices[0].message.content == "Here is your "
    cut = ask(client, max_tokens=7)
    assert cut.choices[0].message.content == "Here is" and cut.choices[0].finish_reason == "length"
    streamed = "".join(c.choices[0].delta.content or "" for c in ask(client, stream=True, stop="again"))
    assert streamed == "Here is your text "


def test_the_stop_that_ends_first_cuts_the_reply_however_the_rounds_fell(server):
    """Of two stops, the one found first in the text cut it: a round that brought "again:\nh" and "ain:" together
    cut before "again", where rounds of one token each stop at "ain:" as soon as it ends (before "again:\nh" is
    there), so the reply depended on how many tokens a round accepted. The first to end wins, streamed or not."""
    client, stops = server.client(), ["again:\nh", "ain:"]
    assert ask(client, stop=stops).choices[0].message.content == "Here is your text ag"
    streamed = "".join(c.choices[0].delta.content or "" for c in ask(client, stream=True, stop=stops))
    assert streamed == "Here is your text ag"
    from specchat.stopscan import StopScanner

    one_by_one, shown = StopScanner(stops), ""
    for character in "Here is your text again:\nhi":
        shown += one_by_one.push(character)
        if one_by_one.stopped:
            break
    assert shown == StopScanner(stops).push("Here is your text again:\nhi") == "Here is your text ag"


def test_an_empty_stop_string_is_ignored(server):
    """A request's "stop": "" (or "" in a list) was a 400 invalid_stop: an empty stop string would be found at
    once, before any text, so it is ignored; a list of empty strings alone means no stop."""
    client, whole = server.client(), fake_backend.REPLY.format(prompt=PROMPT)
    assert ask(client, stop="").choices[0].message.content == whole
    assert ask(client, stop=["", ""]).choices[0].message.content == whole
    assert ask(client, stop=["", "text"]).choices[0].message.content == "Here is your "
    streamed = "".join(c.choices[0].delta.content or "" for c in ask(client, stream=True, stop=["", "again"]))
    assert streamed == "Here is your text "


def test_empty_stop_strings_are_dropped_and_a_stop_that_is_not_strings_is_refused():
    from specchat.openai_api import ApiError, parse_chat

    messages = [{"role": "user", "content": "a"}]
    assert parse_chat({"messages": messages, "stop": ["", "x", ""]}, 2048).stop == ["x"]
    many = [f"</s{i}>" for i in range(64)]  # editor clients send more than OpenAI's 4
    assert parse_chat({"messages": messages, "stop": many}, 2048).stop == many
    assert parse_chat({"messages": messages, "stop": None}, 2048).stop == []
    for bad in (5, ["a", 5], ["a", None], [*many, "one more"], {"a": 1}, False, 0, {}):  # falsy ones read as none
        with pytest.raises(ApiError) as refused:
            parse_chat({"messages": messages, "stop": bad}, 2048)
        assert refused.value.code == "invalid_stop" and refused.value.param == "stop"


def test_a_long_stop_string_costs_no_more_than_a_short_one():
    """The scanner tried every prefix of every stop on each piece of text: a stop of 250,000 characters (four
    fit in a request's 1 MB body) took seconds a round, holding the one worker and every queued request.
    Counted, not timed: the prefixes the scanner cuts from the stops."""
    from specchat.stopscan import StopScanner

    cuts = []

    class Stop(str):
        def __getitem__(self, key):
            cuts.append(key)
            return str.__getitem__(self, key)

    long_stops = [Stop("x" * 250_000 + "end"), Stop("v" * 250_000), Stop("w" * 250_000)]
    scanner = StopScanner([*long_stops, "yz"])
    pieces = [scanner.push(text) for text in ("Here is ", "text x", "xx and y", "z more")]
    assert pieces == ["Here is ", "text ", "xxx and ", ""] and scanner.stopped  # "x" held back, then released
    assert len(cuts) < 100  # prefixes no longer than the text held back: 3 x 249,999 a round without the bound


def test_completions(server):
    reply = server.client().completions.create(model="target.fake.gguf", prompt="Hello", max_tokens=5, temperature=0)
    assert len(reply.choices[0].text) == 5 and reply.choices[0].finish_reason == "length"
    assert reply.model_extra["timings"]["predicted_n"] == 5


def test_a_completion_prompt_reads_control_tokens_as_llama_server_does(server):
    """A raw prompt's "<|im_start|>" was tokenized as text: a client that applies the chat template itself (or a
    fill-in-the-middle format, <|fim_prefix|>..., as editors' autocomplete sends it) got noise from the model.
    The fake target answers its reply after the assistant header and ends it with <|im_end|>."""
    prompt = "<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n"
    reply = server.client().completions.create(model="", prompt=prompt, temperature=0, max_tokens=100)
    assert reply.choices[0].text == fake_backend.REPLY.format(prompt=PROMPT)
    one_token_each = prompt.replace("<|im_start|>", "S").replace("<|im_end|>", "E")
    assert reply.choices[0].finish_reason == "stop" and reply.usage.prompt_tokens == len(one_token_each)


def test_models_and_health(server):
    assert [m.id for m in server.client().models.list()] == ["target.fake.gguf"]
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok" and health["mode"] == "spec"


def test_aborted_stream_stops_and_the_server_goes_on(server):
    body = {"prompt": "Go on forever", "max_tokens": 2000, "stream": True}  # no template: babble to the limit
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if '"text": "' in line:
                break  # leave after the first piece of text
    server.wait_for(r"POST /v1/completions 499 .*cancelled")
    line = re.search(r"POST /v1/completions 499\s+(\d+) tokens?, .*cancelled", server.console())  # "1 token" too
    assert int(line.group(1)) < 2000
    assert not re.search(r" 200 .*cancelled", server.console())  # 499: nginx's "client closed request"
    assert ask(server.client()).choices[0].message.content == fake_backend.REPLY.format(prompt=PROMPT)


def test_a_client_that_leaves_while_sending_its_body_is_logged_as_499(server):
    """It was logged as the client's 400, as if it had sent a bad request."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as leaving:
        leaving.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"pro')
        time.sleep(0.2)
    server.wait_for(r"POST /v1/completions 499  the client went away while sending")


def test_a_non_streamed_client_that_leaves_stops_its_generation(server):
    """A client that times out (and the official client then retries) must not leave its generation
    running to max_tokens in front of the queue."""
    before = len(server.console())
    host, port = server.url.removeprefix("http://").split(":")
    body = json.dumps({"prompt": "Go on and on", "max_tokens": 2000}).encode()  # babbles to the limit
    with socket.create_connection((host, int(port))) as leaving:
        head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
        leaving.sendall(head.encode() + body)
        time.sleep(0.3)  # generating by now
    deadline = time.monotonic() + 30
    while not (line := re.search(r"POST /v1/completions 499\s+(\d+) tokens?.*, (\w+)\n", server.console()[before:])):
        assert time.monotonic() < deadline, server.console()
        time.sleep(0.05)
    assert line.group(2) == "cancelled" and int(line.group(1)) < 2000
    assert ask(server.client()).choices[0].message.content == fake_backend.REPLY.format(prompt=PROMPT)


def test_two_concurrent_requests_both_complete(server):
    prompts, results = ["First question?", "Second question?"], {}

    def one(prompt: str) -> None:
        results[prompt] = ask(server.client(), prompt).choices[0].message.content

    threads = [threading.Thread(target=one, args=(p,)) for p in prompts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == {p: fake_backend.REPLY.format(prompt=p) for p in prompts}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b'{"model": "target.fake.gguf"}', 400, "missing_messages"),
        (b'{"messages": [{"role": "user", "content": "a"}], "temperature": 9}', 400, "invalid_temperature"),
        (b'{"model": "gpt-4", "messages": [{"role": "user", "content": "a"}]}', 404, "model_not_found"),
        (b'{"messages": [{"role": "user", "content": "a \\ud800"}]}', 400, "invalid_json"),  # was a 500
        (b'{"messages": [{"role": "user", "content": "a"}], "n": 2}', 400, "invalid_n"),  # was one choice
        (b'{"messages": [{"role": "user", "content": "a"}], "stream": "false"}', 400, "invalid_stream"),  # streamed
        (b'{"messages": [{"role": ["user"], "content": "a"}]}', 400, "invalid_message"),  # was a 500
        (b"[" * 100_000 + b"]" * 100_000, 400, "invalid_json"),  # nested too deeply: was a 500
        (b'{"messages": [{"role": "user", "content": [{"type": "text", "text": null}]}]}', 400, "invalid_message"),
        (b'{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}', 400, "invalid_message"),
        # not JSON (RFC 8259), though Python reads it: kept, it went to the log as NaN, which strict readers refuse
        (b'{"messages": [{"role": "user", "content": "a"}], "chat_template_kwargs": {"a": NaN}}', 400, "invalid_json"),
        (b'{"messages": [{"role": "user", "content": "a"}], "temperature": -Infinity}', 400, "invalid_json"),
    ],
)
def test_bad_requests_get_error_objects(server, body, status, code):
    response = httpx.post(f"{server.url}/v1/chat/completions", content=body, timeout=30)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code and error["message"] and error["type"] == "invalid_request_error"
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"


def test_an_integer_too_long_to_convert_is_named_not_answered_with_pythons_advice():
    """An integer of over 4,300 digits was a 400 that told an API client to use sys.set_int_max_str_digits()."""
    from specchat.openai_api import ApiError, parse_json

    with pytest.raises(ApiError) as refused:
        parse_json(b'{"max_tokens": ' + b"9" * 5000 + b"}")
    assert refused.value.status == 400 and refused.value.message == "the body has an integer of 5,000 digits"
    assert parse_json(b'{"seed": -' + b"9" * 4300 + b"}")["seed"] == -int("9" * 4300)  # as many as Python takes
    with pytest.raises(ApiError) as refused:
        parse_json(b'{"seed": ' + b"9" * 4301 + b"}")
    assert refused.value.message == "the body has an integer of 4,301 digits"


def test_an_integer_is_read_when_python_has_no_digit_limit(monkeypatch):
    from specchat.openai_api import parse_json

    monkeypatch.setattr(sys, "get_int_max_str_digits", lambda: 0)  # as PYTHONINTMAXSTRDIGITS=0 sets it
    assert parse_json(b'{"max_tokens": 16}')["max_tokens"] == 16


def test_content_of_another_type_is_told_that_text_parts_are_read_too(server):
    """A content that was neither a string nor a list (a lone part object, a number) was told it "must be a
    string", though a list of text parts is read too: a client that sent one part unlisted was sent the wrong way."""
    part = {"type": "text", "text": "Hi"}
    body = {"model": "target.fake.gguf", "messages": [{"role": "user", "content": part}]}
    error = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30).json()["error"]
    assert error["message"] == "messages[0].content must be a string or a list of text parts"
    assert error["param"] == "messages[0].content"


def test_text_content_parts_reach_the_model_one_per_line(server):
    """Content as a list of text parts (as chat UIs send a message with an attachment) was joined with
    nothing between the parts: "Name three" and "colours." reached the model as "Name threecolours."."""
    parts = [{"type": "text", "text": "Name three"}, {"type": "text", "text": "colours."}]
    reply = server.client().chat.completions.create(
        model="target.fake.gguf", messages=[{"role": "user", "content": parts}], temperature=0
    )
    assert reply.choices[0].message.content == fake_backend.REPLY.format(prompt="Name three\ncolours.")


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", b"{not json", None),
        ("/v1/chat/completions", b'{"model": "target.fake.gguf"}', "messages"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a"}], "temperature": 9}', "temperature"),
        ("/v1/chat/completions", b'{"model": "gpt-4", "messages": [{"role": "user", "content": "a"}]}', "model"),
        ("/v1/chat/completions", b'{"messages": [{"role": "tool", "content": "a"}]}', "messages[0].role"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a"}], "n": 2}', "n"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a"}], "tools": [{}]}', "tools"),
        (
            "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 0}',
            "max_completion_tokens",
        ),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "' + b"a" * 9000 + b'"}]}', "messages"),
        ("/v1/completions", b'{"prompt": ["a", "b"], "stream": true}', "prompt"),
        ("/v1/completions", b'{"prompt": ["a", ""]}', "prompt[1]"),
        ("/v1/completions", b'{"prompt": "' + b"a" * 9000 + b'"}', "prompt"),
    ],
)
def test_error_objects_name_the_field_at_fault(server, path, body, param):
    """The error object had no `param`, which the OpenAI API always sends (null where no field is at fault) and
    clients show beside the message: a client could not tell which field to fix."""
    response = httpx.post(f"{server.url}{path}", content=body, timeout=30)
    assert response.status_code in (400, 404)
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == param


def test_a_last_assistant_message_is_continued_as_llama_server_prefills_it(server):
    """A last assistant message was rendered as a finished turn, and the model began a new one, ignoring the
    start it was given (the fake target wrote its whole reply again). It is continued now, streamed or not;
    the log holds the whole turn."""
    prompt, start = "Prefill this one.", "Here is your"
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": start}]
    rest = fake_backend.REPLY.format(prompt=prompt).removeprefix(start)
    client = server.client()
    reply = client.chat.completions.create(model="", messages=messages, temperature=0)
    assert reply.choices[0].message.content == rest and reply.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(model="", messages=messages, temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == rest
    path, deadline, found = server.folder / "data" / "logs.db", time.monotonic() + 30, []
    while not found and time.monotonic() < deadline:  # written after the response, on the log's thread
        found = [r for r in logread.replies(path, limit=50) if r["prompt"] == prompt] if path.exists() else []
        time.sleep(0.05)
    assert found and found[0]["reply"] == start + rest


def test_only_an_assistant_message_after_a_user_one_is_continued():
    """[system, assistant] was continued too: the template was asked for a reply after no user turn, which some
    raise on (Qwen3's "No user query found"); it is read as a finished turn, as a lone assistant message is."""
    from specchat.chat import Message
    from specchat.servequeue import prefilled

    user, assistant, system = Message("user", "u"), Message("assistant", "a"), Message("system", "s")
    assert prefilled([user, assistant]) and prefilled([system, user, assistant, user, assistant])
    assert not prefilled([system, assistant]) and not prefilled([assistant]) and not prefilled([assistant, user])


def test_a_raw_prompt_that_writes_the_bos_itself_does_not_start_with_two():
    """/v1/completions reads control-token text as tokens: a Llama 3 prompt that begins with <|begin_of_text|>, to
    a model that adds a BOS, began with two of them."""
    from specchat.servequeue import raw_prompt_ids

    class Model:
        bos, add_bos = 1, True

        def tokenize(self, text, *, add_special=False, parse_special=False):
            assert add_special and parse_special
            written = [1] if text.startswith("<s>") else []  # "<s>": the BOS, as the client wrote it
            return [1] * (add_special and self.add_bos) + written + [8]

    assert raw_prompt_ids(Model(), "<s>hi") == [1, 8] and raw_prompt_ids(Model(), "hi") == [1, 8]
    Model.add_bos = False  # a model that adds none keeps what the client wrote
    assert raw_prompt_ids(Model(), "<s>hi") == [1, 8] and raw_prompt_ids(Model(), "hi") == [8]


def test_what_a_client_sends_cannot_break_or_colour_the_console_line(server):
    """A model name with a newline (or a path with %1b) went to the console as it was: the line broke in two, the
    second reading as a line of its own, and an escape sequence acted on the terminal (cleared it)."""
    body = {"model": "evil\nPOST /v1/chat/completions 200  fake\x1b[2J", "messages": [{"role": "user", "content": "a"}]}
    assert httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30).status_code == 404
    assert httpx.get(f"{server.url}/v1/x%1b%5B31mred%E2%80%A8", timeout=30).status_code == 404
    line = server.wait_for(r"404  model 'evil.*")[0]
    assert line.endswith("\\x1b[2J' is not served here; this server has 'target.fake.gguf'") and "\\n" in line
    assert server.wait_for(r"GET /v1/x.* 404")[0] == "GET /v1/x\\x1b[31mred\\u2028 404"
    assert "\x1b" not in server.console() and "\nPOST /v1/chat/completions 200  fake" not in server.console()


def test_unknown_routes_and_methods_get_error_objects(server):
    for response, status in (
        (httpx.get(f"{server.url}/v1/nothing"), 404),
        (httpx.get(f"{server.url}/v1/completions"), 405),
    ):
        assert response.status_code == status
        assert response.json()["error"]["code"] in ("not_found", "method_not_allowed")
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"


@pytest.mark.parametrize("path", ["/api/generate", "/api/chat", "/completion"])
def test_another_servers_route_names_the_routes_served_here(server, path):
    """Ollama's POST /api/generate and /api/chat, llama-server's /completion were "POST /api/generate: Not Found",
    which did not say what this server answers."""
    message = httpx.post(f"{server.url}{path}", json={"prompt": "hi"}).json()["error"]["message"]
    assert message.startswith(f"POST {path}: Not Found; this server answers OpenAI's API: ")
    assert "POST /v1/chat/completions, POST /v1/completions, GET /v1/models" in message


def test_the_api_answers_without_the_v1_prefix_too(server, guarded):
    """A client given the base URL http://host:port (no /v1), which llama-server answers, got 404s here."""
    client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=60)
    assert [model.id for model in client.models.list().data] == [m.id for m in server.client().models.list().data]
    reply = client.chat.completions.create(
        model="target.fake.gguf", messages=[{"role": "user", "content": "Hi"}], temperature=0, max_tokens=4
    )
    assert reply.choices[0].message.content
    assert client.completions.create(model="target.fake.gguf", prompt="Hi", max_tokens=4).choices[0].text
    assert httpx.get(f"{guarded.url}/models").status_code == 401  # the key is asked for there too


def test_a_trailing_slash_is_the_same_endpoint_not_a_redirect(server, guarded):
    """POST /v1/chat/completions/ was a 307 redirect (with no console line), which many clients do not follow
    for a POST; GET /v1/models/ was a 404 for a model named ''. Every route now answers with the slash too."""
    for prefix in ("/v1", ""):
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        chat = httpx.post(f"{server.url}{prefix}/chat/completions/", json=body, timeout=60)
        assert chat.status_code == 200 and chat.json()["object"] == "chat.completion", chat.text
        text = httpx.post(f"{server.url}{prefix}/completions/", json={"prompt": "Hi", "max_tokens": 4}, timeout=60)
        assert text.status_code == 200 and text.json()["object"] == "text_completion", text.text
        assert httpx.get(f"{server.url}{prefix}/models/").json()["data"][0]["id"] == "target.fake.gguf"
        assert httpx.get(f"{server.url}{prefix}/models/target.fake/").json()["id"] == "target.fake.gguf"
        assert httpx.get(f"{server.url}{prefix}/completions/").status_code == 405  # a wrong method, not a redirect
    assert httpx.get(f"{server.url}/health/").json()["status"] == "ok"
    assert httpx.get(f"{server.url}/v1/nothing/").json()["error"]["code"] == "not_found"
    server.wait_for(r"POST /v1/chat/completions/ 200 ")  # its line shows the path as it came
    assert httpx.get(f"{guarded.url}/v1/models/").status_code == 401  # the key is asked for there too


def test_a_null_max_completion_tokens_leaves_max_tokens_in_force():
    """Clients that send every field send "max_completion_tokens": null beside max_tokens: the null is not
    given, so max_tokens holds (it was read as absent, and the request got the server's whole --max-tokens)."""
    from specchat.openai_api import parse_chat

    messages = [{"role": "user", "content": "a"}]
    assert parse_chat({"messages": messages, "max_completion_tokens": None, "max_tokens": 5}, 2048).max_tokens == 5
    assert parse_chat({"messages": messages, "max_completion_tokens": 3, "max_tokens": 5}, 2048).max_tokens == 3
    assert parse_chat({"messages": messages, "max_tokens": None}, 2048).max_tokens == 2048


def test_a_reply_that_drafted_nothing_lists_no_draft_positions():
    """Auto is allowed 64 draft positions: a reply where it drafted none carried 64 nulls in
    speculative.position_acceptance, and one that drafted up to 3 a list of 64 too. The list ends at the last
    position drafted, as the bench's rows do."""
    from specchat.apireply import speculative
    from specchat.speculative import Stats

    idle = Stats(generated=5, rounds=6, drafted_at=[0] * 64, accepted_at=[0] * 64, rounds_by_source={"target": 6})
    assert speculative(idle, "auto", "auto")["position_acceptance"] == []
    some = Stats(drafted=6, accepted=3, drafted_at=[3, 2, 1] + [0] * 61, accepted_at=[2, 1, 0] + [0] * 61)
    assert speculative(some, "auto", "auto")["position_acceptance"] == [0.6667, 0.5, 0.0]


def test_a_reply_that_drafted_nothing_has_no_acceptance_rate():
    """speculative.acceptance_rate and mean_accepted_length were 0.0 for a reply that drafted nothing (target
    alone, auto that drafted no round), where the bench's JSON says null: not measured, not a drafter that was
    always wrong. Null as there; with drafts, the same rates as before."""
    from specchat.apireply import speculative
    from specchat.speculative import Stats

    idle = speculative(Stats(generated=5, rounds=5, rounds_by_source={"target": 5}), "target", "target alone")
    assert idle["acceptance_rate"] is None and idle["mean_accepted_length"] is None
    some = speculative(Stats(generated=9, rounds=3, drafted=6, accepted=3), "spec", "spec k=2")
    assert some["acceptance_rate"] == 0.5 and some["mean_accepted_length"] == 1.0


def test_an_empty_list_as_stream_options_is_not_given_as_for_every_object_field():
    """PHP writes an empty map as [], which docs/serve.md reads as not given wherever an object is asked for:
    "stream_options": [] was a 400 ("'stream_options' is an object"), with "stream": true too."""
    from specchat.openai_api import ApiError, parse_chat

    messages = [{"role": "user", "content": "a"}]
    for stream in (True, False):
        parsed = parse_chat({"messages": messages, "stream": stream, "stream_options": []}, 2048)
        assert parsed.stream is stream and parsed.include_usage is False
    with pytest.raises(ApiError) as refused:  # any other type is still named
        parse_chat({"messages": messages, "stream": True, "stream_options": "usage"}, 2048)
    assert (refused.value.code, refused.value.param) == ("invalid_stream_options", "stream_options")


def test_nulls_inside_stream_options_and_response_format_are_not_given():
    """Clients that serialise every field send {"include_usage": null} and {"type": "text", "json_schema": null}:
    both were refused (400 "must be true or false", 400 unsupported_parameter) though a null elsewhere is not
    given; a real ask for JSON is still refused."""
    from specchat.openai_api import ApiError, parse_chat

    messages = [{"role": "user", "content": "a"}]
    streamed = parse_chat({"messages": messages, "stream": True, "stream_options": {"include_usage": None}}, 2048)
    assert streamed.stream and streamed.include_usage is False
    for plain in ({"type": "text", "json_schema": None}, {}, None):
        assert parse_chat({"messages": messages, "response_format": plain}, 2048).max_tokens == 2048
    for refused in ({"type": "text", "json_schema": {"name": "x"}}, {"type": "json_object"}, {"json_schema": None}):
        with pytest.raises(ApiError) as error:
            parse_chat({"messages": messages, "response_format": refused}, 2048)
        assert error.value.code == "unsupported_parameter" and error.value.param == "response_format"


def test_llama_servers_n_predict_limits_the_reply_as_max_tokens_does(server):
    """n_predict, llama-server's name for max_tokens (its own clients and scripts send it), was ignored in silence:
    a request for 3 tokens ran on to the server's whole --max-tokens. It limits the reply where neither OpenAI name
    is given; -1 is llama-server's no limit (the server's cap); anything else but a positive count is a 400."""
    from specchat.openai_api import ApiError, parse_chat

    reply = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Hello", "n_predict": 3}, timeout=30)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3
    messages = [{"role": "user", "content": "a"}]
    assert parse_chat({"messages": messages, "n_predict": 7}, 2048).max_tokens == 7
    assert parse_chat({"messages": messages, "n_predict": 7.0, "max_tokens": None}, 2048).max_tokens == 7
    assert parse_chat({"messages": messages, "n_predict": 7, "max_tokens": 5}, 2048).max_tokens == 5
    assert parse_chat({"messages": messages, "n_predict": -1}, 2048).max_tokens == 2048
    assert parse_chat({"messages": messages, "n_predict": 9999}, 2048).max_tokens == 2048
    # -1 (no limit) yields to a limit under another name, as llama-server reads them (it was 2048 here)
    assert parse_chat({"messages": messages, "max_tokens": -1, "n_predict": 5}, 2048).max_tokens == 5
    assert parse_chat({"messages": messages, "max_completion_tokens": -1, "max_tokens": 6}, 2048).max_tokens == 6
    for bad in (0, -2, 1.5, "3", True):
        with pytest.raises(ApiError) as refused:
            parse_chat({"messages": messages, "n_predict": bad}, 2048)
        assert (refused.value.param, refused.value.code) == ("n_predict", "invalid_max_tokens"), bad
        assert refused.value.message == "'n_predict' must be a positive integer, or -1 for no limit"


def test_a_max_tokens_of_minus_one_is_no_limit_as_llama_server_and_lm_studio_read_it(server):
    """LM Studio's documented request and llama.cpp's web UI send "max_tokens": -1 for no limit, which llama-server
    and LM Studio answer; here it was a 400. It is the server's cap now, under either OpenAI name; another
    negative count or 0 is still a 400."""
    from specchat.openai_api import ApiError, parse_chat

    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": -1, "temperature": 0}
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == fake_backend.REPLY.format(prompt=PROMPT)
    messages = [{"role": "user", "content": "a"}]
    for name in ("max_tokens", "max_completion_tokens"):
        assert parse_chat({"messages": messages, name: -1}, 2048).max_tokens == 2048
        assert parse_chat({"messages": messages, name: -1.0}, 2048).max_tokens == 2048
        for bad in (0, -2):
            with pytest.raises(ApiError) as refused:
                parse_chat({"messages": messages, name: bad}, 2048)
            assert refused.value.message == f"'{name}' must be a positive integer, or -1 for no limit"


def test_a_bad_max_completion_tokens_is_named_as_sent():
    """A max_completion_tokens of 0 was refused as "'max_tokens' must be...", a field the client never sent."""
    from specchat.openai_api import ApiError, parse_chat

    messages = [{"role": "user", "content": "a"}]
    for name in ("max_completion_tokens", "max_tokens"):
        with pytest.raises(ApiError) as refused:
            parse_chat({"messages": messages, name: 0}, 2048)
        assert refused.value.message.startswith(f"'{name}'") and refused.value.code == "invalid_max_tokens"


def test_a_whole_count_sent_as_a_float_is_that_count(server):
    """`"n": 1.0` was taken but `"max_tokens": 5.0` (Python's json writes a computed count so) was a 400; llama-server
    reads both. A fraction is still refused, naming the field."""
    body = {"prompt": "Hello", "max_tokens": 5.0, "top_k": 40.0, "n": 1.0}
    reply = httpx.post(f"{server.url}/v1/completions", json=body, timeout=30)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 5
    for name, value in (("max_tokens", 5.5), ("max_completion_tokens", 2.5), ("top_k", 1.5), ("max_tokens", -3.0)):
        refused = httpx.post(f"{server.url}/v1/completions", json=body | {name: value}, timeout=30)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == name


def test_a_request_without_a_seed_gets_one_drawn_that_the_log_can_record():
    """A request without a seed (or with a negative one) was logged with seed null (or -1): a sampled reply
    could not be repeated from the log. One is drawn for it; a seed given is kept."""
    from specchat.openai_api import parse_chat

    messages = [{"role": "user", "content": "a"}]
    drawn = [parse_chat({"messages": messages, **seed}, 2048).params.seed for seed in ({}, {"seed": -1}, {})]
    assert all(isinstance(seed, int) and seed >= 0 for seed in drawn) and len(set(drawn)) == 3
    assert parse_chat({"messages": messages, "seed": 5}, 2048).params.seed == 5


def test_top_k_and_min_p_are_honoured_as_llama_server_reads_them():
    """top_k and min_p, which llama-server and vLLM read from the body (the client's extra_body), were
    ignored in silence: a client asking top_k 1 still sampled from 40 tokens."""
    from specchat.openai_api import ApiError, parse_chat

    messages = [{"role": "user", "content": "a"}]
    params = parse_chat({"messages": messages, "top_k": 1, "min_p": 0.2}, 2048).params
    assert (params.top_k, params.min_p) == (1, 0.2)
    assert parse_chat({"messages": messages, "top_k": -1, "min_p": 0}, 2048).params.top_k == 0  # vLLM's off
    params = parse_chat({"messages": messages}, 2048).params
    assert (params.top_k, params.min_p) == (40, 0.05)  # run's defaults
    for bad in ({"top_k": 1.5}, {"top_k": -2}, {"top_k": True}, {"min_p": 2}, {"min_p": "0.1"}):
        with pytest.raises(ApiError) as refused:
            parse_chat({"messages": messages, **bad}, 2048)
        assert refused.value.status == 400 and refused.value.code == f"invalid_{next(iter(bad))}"


def test_a_negative_zero_temperature_is_read_as_zero():
    """A "temperature" of -0.0 was kept as -0.0, which the log recorded; run's --temperature -0 reads 0."""
    from specchat.openai_api import parse_chat

    params = parse_chat({"messages": [{"role": "user", "content": "a"}], "temperature": -0.0}, 2048).params
    assert str(params.temperature) == "0.0"


def test_a_batch_or_token_ids_as_a_completion_prompt_is_named_as_such(server):
    """The API's other prompt shapes were refused as "'prompt' must be a non-empty string", which reads as a
    malformed request: token ids, and a batch asked for as a stream, are now unsupported_parameter, saying which."""
    client = server.client()
    for prompt, said in (([1, 2, 3], "token ids"), ([[1, 2]], "token ids")):
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model="target.fake.gguf", prompt=prompt, max_tokens=4)
        assert refused.value.code == "unsupported_parameter" and said in refused.value.message
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="target.fake.gguf", prompt=["a", "b"], max_tokens=4, stream=True)
    assert refused.value.code == "unsupported_parameter" and refused.value.body["param"] == "prompt"
    assert 'a batch of 2 prompts is not streamed; send it with "stream": false' in refused.value.message
    assert client.completions.create(model="target.fake.gguf", prompt=["a"], max_tokens=4).choices[0].text


def test_a_batch_of_prompts_gets_one_choice_each_in_order_and_each_is_logged(server):
    """A list of prompts (LangChain's OpenAI batch() and generate() send 20 a request, litellm's text_completion a
    list) was a 400: now each is answered in turn, as the API, llama-server and vLLM answer it, the usage summed."""
    client, prompts = server.client(), ["Batch one", "Batch number two", "Batch three, last"]
    alone = [client.completions.create(model="", prompt=p, max_tokens=6, temperature=0) for p in prompts]
    before = len(server.console())
    batch = client.completions.create(model="", prompt=prompts, max_tokens=6, temperature=0)
    assert [c.index for c in batch.choices] == [0, 1, 2]
    assert [c.text for c in batch.choices] == [reply.choices[0].text for reply in alone]
    assert [c.finish_reason for c in batch.choices] == ["length"] * 3
    assert batch.usage.prompt_tokens == sum(reply.usage.prompt_tokens for reply in alone)
    assert batch.usage.completion_tokens == 18 == batch.model_extra["timings"]["predicted_n"]
    assert batch.usage.total_tokens == batch.usage.prompt_tokens + 18
    assert batch.model_extra["speculative"]["rounds"] == sum(r.model_extra["speculative"]["rounds"] for r in alone)
    line = server.wait_for(r"POST /v1/completions 200  18 tokens, .*, 3 prompts: max_tokens x3\n")
    assert server.console()[before:].count("POST /v1/completions") == 1, line
    path = server.folder / "data" / "logs.db"
    deadline, found = time.monotonic() + 30, []
    while len(found) < 6 and time.monotonic() < deadline:  # each prompt alone and in the batch
        found = [r for r in logread.replies(path, limit=50) if r["prompt"] in prompts]
        time.sleep(0.05)
    assert sorted(r["prompt"] for r in found) == sorted(prompts * 2)
    assert httpx.get(f"{server.url}/health").json()["busy"] == 0


def test_every_prompt_of_a_batch_is_checked_before_any_runs(server):
    """An empty prompt, or one longer than the context, is a 400 that names its place, before the others run."""
    before = len(server.console())
    for prompts, code, param in (
        (["a", "b", "c", ""], "missing_prompt", "prompt[3]"),
        (["a", "b", "x" * 200_000], "context_length_exceeded", "prompt[2]"),
        (["a"] * 65, "invalid_prompt", "prompt"),
    ):
        response = httpx.post(f"{server.url}/v1/completions", json={"prompt": prompts, "max_tokens": 4}, timeout=60)
        error = response.json()["error"]
        assert response.status_code == 400 and (error["code"], error["param"]) == (code, param), error
        assert error["message"].startswith(f"'{param}'" if param == "prompt" else param), error
    assert "at most 64 prompts" in error["message"]
    assert " 200 " not in server.console()[before:]  # nothing generated
    assert httpx.get(f"{server.url}/health").json()["busy"] == 0


def test_a_batch_whose_client_leaves_stops_the_prompts_left(tmp_path):
    """A client that times out mid-batch must not leave the rest of its prompts running for nobody."""
    running = Server(tmp_path, "--no-log", eval_sleep=0.03)
    try:
        body = {"prompt": ["Go on and on", "And on", "And on again"], "max_tokens": 2000}
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{running.url}/v1/completions", json=body, timeout=1)
        line = running.wait_for(r"POST /v1/completions 499\s+(\d+) tokens?.*, 3 prompts: cancelled x3\n")
        assert int(line.group(1)) < 2000
        assert httpx.get(f"{running.url}/health").json()["busy"] == 0
        assert ask(running.client()).choices[0].message.content == fake_backend.REPLY.format(prompt=PROMPT)
        assert running.console().count(" 499 ") == 1
    finally:
        running.stop()


def test_a_prompt_of_one_token_id_or_a_list_in_a_list_is_named_for_what_it_is(server):
    """A list of one was unwrapped whatever it held: [5] was refused as "'prompt' must be a non-empty string"
    (it is token ids, which are unsupported), and [["a"]] as "not a batch of 1" (it is no prompt shape at all)."""
    for prompt, code, said in (
        ([5], "unsupported_parameter", "token ids are not supported"),
        ([["a"]], "invalid_prompt", "must be a string or a list of strings, not a list holding a list"),
        (5, "invalid_prompt", "not a number"),
    ):
        response = httpx.post(f"{server.url}/v1/completions", json={"prompt": prompt, "max_tokens": 4}, timeout=30)
        error = response.json()["error"]
        assert response.status_code == 400 and error["code"] == code and error["param"] == "prompt", error
        assert said in error["message"] and "batch" not in error["message"], error


def test_the_console_line_shows_a_request_as_it_came(server):
    """A request's path and an unknown model's name are the client's text: Rich turned ':thumbs_up:' in them
    into an emoji on the console (markup=False leaves emoji codes on); '[/]' and '[i]' stay as they are."""
    assert httpx.get(f"{server.url}/v1/:thumbs_up:[/]").status_code == 404
    body = {"model": ":smile: [i]x", "messages": [{"role": "user", "content": "a"}]}
    assert httpx.post(f"{server.url}/v1/chat/completions", json=body).status_code == 404
    server.wait_for(re.escape("model ':smile: [i]x' is not served here"))
    assert "GET /v1/:thumbs_up:[/] 404" in server.console()


def _read_to_close(sock: socket.socket) -> bytes:
    """All the server sends until it closes the connection: one recv() may hold the headers alone (the body comes
    in a packet of its own, often on a loaded machine)."""
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def test_what_serve_md_says_of_content_types_duplicate_keys_and_requests_that_are_not_http(server):
    """Read as llama-server reads them, and now said in docs/serve.md: any Content-Type, the last of a key given
    twice; a malformed HTTP request is uvicorn's, with its own console line."""
    body = b'{"prompt": "Hello", "max_tokens": 50, "max_tokens": 2}'
    for headers in ({"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-urlencoded"}):
        reply = httpx.post(f"{server.url}/v1/completions", content=body, headers=headers, timeout=30)
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 2
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
        answer = _read_to_close(raw)
    head, _, text = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"text/plain" in head and text == b"Invalid HTTP request received."
    server.wait_for("WARNING:  Invalid HTTP request received.")
    assert "WARNING:  Invalid HTTP request received." in (TESTS.parent / "docs" / "serve.md").read_text()


def test_body_size_is_bounded(server):
    response = httpx.post(f"{server.url}/v1/chat/completions", content=b" " * 1_000_001, timeout=30)
    assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"


def test_a_declared_length_over_the_limit_is_a_413_at_once_and_the_connection_closes(server):
    """A Content-Length over the limit with a short body held the connection open, waiting for a body that never
    came, until the client gave up: the 413 came only once 1 MB had arrived. It is answered from the header now,
    and the connection is closed (the body left unread cannot be followed by another request)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sending:  # the timeout: a hang fails, not waits
        sending.sendall(b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n{"me')
        answer = _read_to_close(sending)  # the server closes the connection
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower(), answer
    assert json.loads(body)["error"]["code"] == "body_too_large"
    server.wait_for(r"POST /v1/chat/completions 413  the body is larger than 1000000 bytes \(Content-Length 9+\)")


def test_unknown_model_through_the_client(server):
    with pytest.raises(openai.NotFoundError):
        server.client().chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "a"}])


def test_an_empty_model_name_is_the_served_model(server):
    """A request's "model": "" (as a client with no model set may send) was a 404 model_not_found: it is not
    given, and the served model answers, as llama-server's does. A name that is not empty and not served is
    still a 404."""
    client = server.client()
    reply = client.chat.completions.create(model="", messages=[{"role": "user", "content": PROMPT}], temperature=0)
    assert reply.choices[0].message.content == fake_backend.REPLY.format(prompt=PROMPT)
    assert reply.model == "target.fake.gguf"
    assert client.completions.create(model="", prompt="Hi", max_tokens=4).choices[0].text
    for name in (" ", "gpt-4"):
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=name, messages=[{"role": "user", "content": "a"}])


def test_a_prediction_is_drafted_from_and_changes_no_token(tmp_path):
    """Predicted Outputs: the text the reply is expected to hold is copied by prompt lookup (here the fake's
    "Here is your text again:" and "That is all.", which the prompt does not hold), so more drafts are
    accepted; the reply is the same. A prediction that is not {"type": "content", ...} is a 400."""
    running = Server(tmp_path / "ngram", "--mode", "ngram")
    try:
        client, expected = running.client(), fake_backend.REPLY.format(prompt=PROMPT)
        plain = ask(client)
        predicted = ask(client, prediction={"type": "content", "content": [{"type": "text", "text": expected}]})
        assert predicted.choices[0].message.content == plain.choices[0].message.content == expected
        accepted = [reply.model_extra["timings"]["draft_n_accepted"] for reply in (plain, predicted)]
        assert accepted[1] > accepted[0]
        for bad, param in (
            ({"type": "text", "content": "x"}, "prediction"),
            ({"type": "content"}, "prediction.content"),
        ):
            with pytest.raises(openai.BadRequestError) as refused:
                ask(client, prediction=bad)
            assert refused.value.body["code"] == "invalid_prediction" and refused.value.body["param"] == param
    finally:
        running.stop()


def test_what_the_server_cannot_do_is_refused_not_ignored(server):
    """Tools, a JSON response format or log-probabilities are a 400 unsupported_parameter through the official
    client, not plain text that looks like a success; the values clients send by default still answer."""
    client = server.client()
    tool = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
    for extra in (
        {"tools": [tool]},
        {"tool_choice": "required"},
        {"response_format": {"type": "json_object"}},
        {"logprobs": True, "top_logprobs": 2},
        {"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}},  # was text alone
        {"audio": {"voice": "alloy", "format": "wav"}},
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            ask(client, **extra)
        assert refused.value.code == "unsupported_parameter", extra
    for extra in ({"echo": True}, {"logprobs": 0}):  # a completion's logprobs is a count: 0 still asks
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model="target.fake.gguf", prompt="a", **extra)
    answered = ask(
        client, tools=[], tool_choice="none", response_format={"type": "text"}, logprobs=False, modalities=["text"]
    )
    assert answered.choices[0].message.content == fake_backend.REPLY.format(prompt=PROMPT)
    listed = ask(client, tools=[tool], tool_choice="none")  # agents list their tools on every request
    assert listed.choices[0].message.content == fake_backend.REPLY.format(prompt=PROMPT)


def test_a_history_with_tool_calls_or_results_is_refused_as_tools_are(server):
    """An assistant turn with tool_calls was refused as "messages[1].content must be a string" (its content was
    null), or had its calls dropped without a word beside "content": ""; a tool's result was an unknown role.
    Each is now a 400 unsupported_parameter naming the field, as `tools` is; no calls ([] or null) still answer."""
    call = {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
    question = {"role": "user", "content": PROMPT}
    for turn, field in (
        ({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"),
        ({"role": "assistant", "content": "", "tool_calls": [call]}, "tool_calls"),
        ({"role": "assistant", "content": None, "function_call": call["function"]}, "function_call"),
        ({"role": "tool", "content": "12:00", "tool_call_id": "c1"}, "role"),
        ({"role": "function", "content": "12:00", "name": "now"}, "role"),
    ):
        body = {"messages": [question, turn, question], "tools": [{"type": "function", "function": call["function"]}],
                "tool_choice": "none"}  # fmt: skip
        response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30)
        error = response.json()["error"]
        assert response.status_code == 400 and error["code"] == "unsupported_parameter", (turn, error)
        assert error["param"] == f"messages[1].{field}" and "does not run tools" in error["message"], error
    answered = [question, {"role": "assistant", "content": "Red.", "tool_calls": []}, question]
    reply = server.client().chat.completions.create(model="target.fake.gguf", messages=answered, temperature=0)
    assert reply.choices[0].message.content


@pytest.mark.parametrize(
    ("path", "extra", "said"),
    [
        ("/v1/completions", {"echo": "false"}, "'echo' must be true or false"),  # was "'echo' is not supported"
        ("/v1/chat/completions", {"user": 123}, "'user' must be a string"),  # was answered
        ("/v1/chat/completions", {"metadata": "x"}, "'metadata' must be an object"),  # was answered
        ("/v1/chat/completions", {"store": "no"}, "'store' must be true or false"),
        ("/v1/chat/completions", {"logprobs": "true"}, "'logprobs' must be true or false"),  # was "not supported"
        ("/v1/completions", {"suffix": 5}, "'suffix' must be a string"),  # was "not supported"
        ("/v1/chat/completions", {"n": "1"}, "'n' must be an integer"),  # was "'n' must be 1"
        ("/v1/completions", {"frequency_penalty": False}, "'frequency_penalty' must be a number"),  # was answered
    ],
)
def test_a_field_of_the_wrong_type_is_a_400_naming_it(server, path, extra, said):
    """Fields read only for their truth or accepted and ignored were read loosely: a string "false" as echo asked
    for echo, a number as user or a string as metadata passed, where the API refuses a wrong type."""
    body = {"prompt": "a"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "a"}]}
    response = httpx.post(f"{server.url}{path}", json=body | extra, timeout=30)
    name = next(iter(extra))
    assert response.status_code == 400 and response.json()["error"] == {
        "message": said, "type": "invalid_request_error", "param": name, "code": f"invalid_{name}"
    }  # fmt: skip
    right = {"echo": False, "user": "u1", "metadata": {"k": "v"}, "store": False, "logprobs": False, "suffix": "",
             "n": 1, "frequency_penalty": 0}[name]  # fmt: skip
    answered = httpx.post(f"{server.url}{path}", json=body | {name: right, "max_tokens": 4}, timeout=60)
    assert answered.status_code == 200, answered.text


def test_every_field_of_the_wrong_type_is_named_with_its_type_before_any_other_judgement():
    """A field judged as unsupported was judged on its truth whatever its type: "logprobs": "true", "suffix": 5 or
    "top_logprobs": "2" were "not supported", "n": "1" "must be 1", and "frequency_penalty": false (JSON's false is
    not 0) was answered. Each is now a type error naming the field and its type, also beside a field refused as
    unsupported; JSON's true is no integer, and a chat's logprobs is true/false where a completion's is a count."""
    from specchat.openai_api import ApiError, parse_chat, parse_completion

    chat, text = {"messages": [{"role": "user", "content": "a"}]}, {"prompt": "a"}
    wrong = {"an integer": [True, "1", 1.5], "a number": [False, "0"], "true or false": [1, "yes"], "a string": [5],
             "a list": ["x", {"a": 1}], "an object": ["x", [1]], "a string or an object": [5, True]}  # fmt: skip
    for body, parse, name, words in (
        (chat, parse_chat, "logprobs", "true or false"),
        (text, parse_completion, "logprobs", "an integer"),
        (chat, parse_chat, "top_logprobs", "an integer"),
        (text, parse_completion, "best_of", "an integer"),
        (text, parse_completion, "suffix", "a string"),
        (chat, parse_chat, "n", "an integer"),
        (chat, parse_chat, "seed", "an integer"),
        (chat, parse_chat, "presence_penalty", "a number"),
        (chat, parse_chat, "tools", "a list"),
        (chat, parse_chat, "tool_choice", "a string or an object"),
        (chat, parse_chat, "response_format", "an object"),
        (chat, parse_chat, "logit_bias", "an object"),
        (chat, parse_chat, "modalities", "a list"),
        (chat, parse_chat, "stream", "true or false"),
        (chat, parse_chat, "model", "a string"),
    ):
        for value in wrong[words]:
            for unsupported in ({}, {"tools": [{"type": "function"}]}):  # the type is named first
                with pytest.raises(ApiError) as refused:
                    parse(body | unsupported | {name: value}, 2048)
                error = refused.value.body()["error"]
                assert (error["code"], error["param"]) == (f"invalid_{name}", name), (name, value, error)
                assert error["message"] == f"'{name}' must be {words}", (name, value, error)
    with pytest.raises(ApiError) as refused:  # the limit's own check, before the tools' judgement too
        parse_chat(chat | {"tools": [{"type": "function"}], "max_tokens": True}, 2048)
    assert refused.value.param == "max_tokens"
    right = {"logprobs": False, "top_logprobs": 0, "n": 1, "seed": 3, "presence_penalty": 0.0, "tools": [],
             "tool_choice": "auto", "response_format": {"type": "text"}, "logit_bias": {}}  # fmt: skip
    assert parse_chat(chat | right, 2048).params.seed == 3
    assert parse_completion(text | {"logprobs": None, "best_of": 1, "suffix": "", "echo": False}, 2048).prompt == "a"
    # not given, as they were answered before types were checked: PHP's empty map, a chat's false for a count
    empty = {"response_format": [], "logit_bias": [], "metadata": [], "audio": [], "tools": {}, "functions": {}}
    assert parse_chat(chat | empty, 2048).max_tokens == 2048  # "audio": [] was refused as asking for audio
    assert parse_completion(text | empty | {"logprobs": False}, 2048).prompt == "a"
    # JSON has one number type: a whole count sent as 1.0 is 1 (a seed is used as an integer, and stays one)
    assert parse_chat(chat | {"n": 1.0, "top_logprobs": 0.0}, 2048).max_tokens == 2048
    assert parse_completion(text | {"best_of": 1.0}, 2048).prompt == "a"
    with pytest.raises(ApiError) as refused:
        parse_chat(chat | {"seed": 3.0}, 2048)
    assert refused.value.param == "seed"


def test_a_message_name_of_the_wrong_type_is_a_400_naming_it():
    """A message's name is accepted and ignored, but checked for its type as docs/serve.md says of such fields:
    "name": 5 was answered."""
    from specchat.openai_api import ApiError, parse_chat

    with pytest.raises(ApiError) as refused:
        parse_chat({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b", "name": 5}]}, 2048)
    assert (refused.value.code, refused.value.param) == ("invalid_message", "messages[1].name")
    assert refused.value.message == "messages[1].name must be a string"
    for name in ("bob", None):
        assert parse_chat({"messages": [{"role": "user", "content": "a", "name": name}]}, 2048).messages


@pytest.mark.parametrize(
    "extra", [{"logit_bias": {"16": -100}}, {"frequency_penalty": 1.5}, {"presence_penalty": -0.5}]
)
def test_a_logit_bias_or_a_penalty_is_refused_not_ignored(server, extra):
    """A client banning a token or penalising repeats got the unchanged distribution, as if it had worked;
    the values clients send by default (an empty bias, zero penalties) still answer."""
    with pytest.raises(openai.BadRequestError) as refused:
        ask(server.client(), **extra)
    assert refused.value.code == "unsupported_parameter" and next(iter(extra)) in refused.value.message
    answered = ask(server.client(), logit_bias={}, frequency_penalty=0, presence_penalty=0.0)
    assert answered.choices[0].message.content == fake_backend.REPLY.format(prompt=PROMPT)


def test_llama_servers_and_vllms_own_fields_that_shape_the_reply_are_refused_not_ignored(server):
    """A llama-server or vLLM client's extra_body asking for a grammar, a JSON schema, a repeat penalty, token
    probabilities or generation past the end got plain text that looked as asked (and the CLI refuses their
    flags); each is a 400 naming it, its type checked first. At the values that change nothing, which llama.cpp's
    web UI sends on every request, they still answer."""
    from specchat.openai_api import ApiError, parse_chat, parse_completion

    chat = {"messages": [{"role": "user", "content": "a"}]}
    for extra in (
        {"grammar": 'root ::= "yes"'},
        {"json_schema": {"type": "object"}},
        {"json_schema": {}},  # llama-server: any JSON object (SillyTavern's json_schema_allow_empty sends it)
        {"structured_outputs": {"json": {"type": "object"}}},  # vLLM 0.12's name for guided_*
        {"guided_regex": ""},  # vLLM: an empty reply
        {"guided_json": {"type": "object"}},
        {"guided_json": '{"type": "object"}'},
        {"guided_regex": "[0-9]+"},
        {"guided_choice": ["yes", "no"]},
        {"guided_grammar": 'root ::= "yes"'},
        {"repeat_penalty": 1.1},
        {"repetition_penalty": 1.2},
        {"n_probs": 3},
        {"ignore_eos": True},
        {"min_tokens": 10},
        {"mirostat": 2},
        {"typical_p": 0.5},
        {"dry_multiplier": 0.8},
        {"xtc_probability": 0.5},
        {"dynatemp_range": 0.5},
        {"top_n_sigma": 1.5},
    ):
        name = next(iter(extra))
        for parse, body in ((parse_chat, chat), (parse_completion, {"prompt": "a"})):
            with pytest.raises(ApiError) as refused:
                parse(body | extra, 2048)
            assert (refused.value.status, refused.value.code, refused.value.param) == (
                400, "unsupported_parameter", name
            ), extra  # fmt: skip
            assert refused.value.message.startswith(f"'{name}'"), refused.value.message
    for name, wrong, words in (("repeat_penalty", "1.1", "a number"), ("ignore_eos", 1, "true or false"),
                               ("n_probs", True, "an integer"), ("grammar", 5, "a string")):  # fmt: skip
        with pytest.raises(ApiError) as refused:
            parse_chat(chat | {name: wrong}, 2048)
        assert refused.value.message == f"'{name}' must be {words}"
    neutral = {"grammar": "", "json_schema": None, "guided_json": None, "guided_choice": None, "repeat_penalty": 1.0,
               "repetition_penalty": 1, "n_probs": 0, "ignore_eos": False, "min_tokens": 0, "mirostat": 0,
               "typical_p": 1.0, "dry_multiplier": 0.0, "xtc_probability": 0, "repeat_last_n": 64, "samplers": "kpt",
               "cache_prompt": True, "dynatemp_range": 0, "top_n_sigma": -1}  # fmt: skip
    assert parse_chat(chat | neutral, 2048).max_tokens == 2048
    answered = httpx.post(f"{server.url}/v1/completions", json={"prompt": "a", "max_tokens": 3} | neutral, timeout=60)
    assert answered.status_code == 200, answered.text
    response = httpx.post(f"{server.url}/v1/chat/completions", json=chat | {"grammar": "root ::= [a]"}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == "grammar"


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_longer_than_the_context_is_a_400_streamed_or_not(server, stream):
    """The official client gets BadRequestError context_length_exceeded, also when it asked for a stream
    (before, that was a 200 whose only event was the error), and the server answers the next request."""
    with pytest.raises(openai.BadRequestError) as refused:
        ask(server.client(), "x" * 200_000, stream=stream)
    error = refused.value.body
    assert (error["code"], error["type"], error["param"]) == (
        "context_length_exceeded",
        "invalid_request_error",
        "messages",
    )
    # the way out, which the message lacked: the client cannot know the server's flags
    assert refused.value.message.endswith(
        "no room is left for a reply; shorten the messages, or start `specchat serve` with a larger --ctx"
    )
    assert ask(server.client()).choices[0].message.content == fake_backend.REPLY.format(prompt=PROMPT)


def test_a_stream_whose_generation_fails_unexpectedly_ends_with_its_error_event(tmp_path):
    """A failure that is not specchat's own (a bug, the binding's ValueError) cut a stream without a word: no
    error event, a traceback on the console and the line '499 the client went away', whose client was there.
    It is a 500 internal_error now, as a non-streamed request's, and the last event of a stream. (The fake
    target fails on a token beyond its vocabulary: "é" is byte 0xC3, token 200.)"""
    running = Server(tmp_path, "--mode", "target", "--no-log", n_vocab=200)
    try:
        client = running.client()
        with pytest.raises(openai.APIError) as failed:
            list(ask(client, "é", stream=True))
        assert failed.value.body["code"] == "internal_error" and "ValueError" in failed.value.message
        with pytest.raises(openai.InternalServerError) as failed:
            ask(client, "é")
        assert failed.value.body["code"] == "internal_error"
        running.wait_for(r"(POST /v1/chat/completions 500  internal error: ValueError.*\n){2}")
        assert "Traceback" not in running.console() and " 499 " not in running.console()
        assert ask(client, "Hi", max_tokens=3).choices[0].message.content  # the server goes on
    finally:
        running.stop()


def too_long_for_the_context(client: openai.OpenAI, prompt: str) -> str:
    """The message of the 400 a completion of this prompt gets for not fitting the context."""
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="target.fake.gguf", prompt=prompt, max_tokens=1)
    assert refused.value.code == "context_length_exceeded" and refused.value.param == "prompt"
    return refused.value.message


def test_a_prompt_that_fills_the_context_exactly_is_refused_in_words_that_say_why(tmp_path):
    """A prompt of exactly --ctx tokens leaves no place for a reply, and was refused as "the prompt has 256
    tokens but the context holds 256", which reads as a contradiction; one token shorter is answered."""
    running = Server(tmp_path / "ctx", "--ctx", "256")  # the fake reads a byte as a token, with no BOS
    try:
        client = running.client()
        message = too_long_for_the_context(client, "x" * 256)
        assert "has 256 tokens and the context holds 256: no room is left for a reply; shorten the prompt," in message
        assert "but" not in message
        assert client.completions.create(model="target.fake.gguf", prompt="x" * 255, max_tokens=1).choices[0].text
    finally:
        running.stop()


def test_a_prompt_longer_than_the_model_was_trained_for_is_not_told_to_raise_ctx(tmp_path):
    """A 60k-token prompt to a model trained for 32k was told to "start `specchat serve` with a larger --ctx",
    which cannot hold it (as `run` said before it was told otherwise); one that a larger --ctx holds still is."""
    running = Server(tmp_path, "--ctx", "256", "--no-log", context_length=512)  # a byte a token
    try:
        client = running.client()
        message = too_long_for_the_context(client, "x" * 600)
        assert "shorten the prompt: the model was trained for 512 tokens, so no --ctx holds" in message, message
        assert "larger --ctx" not in message
        message = too_long_for_the_context(client, "x" * 300)
        assert message.endswith("shorten the prompt, or start `specchat serve` with a larger --ctx")
    finally:
        running.stop()


def test_messages_the_chat_template_refuses_are_a_400_not_a_500(tmp_path):
    """A template's own raise_exception (Gemma's "roles must alternate", "System role not supported") refuses
    the client's messages: that was a 500 generation_failed, which the official client retried twice."""
    refusing = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    running = Server(tmp_path, "--no-log", template=refusing + fake_backend.TEMPLATE)
    try:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as refused:
                running.client().chat.completions.create(
                    model="target.fake.gguf", stream=stream,
                    messages=[{"role": "system", "content": "Be brief"}, {"role": "user", "content": PROMPT}],
                )  # fmt: skip
            assert refused.value.code == "invalid_message" and "System role not supported" in refused.value.message
        assert ask(running.client()).choices[0].message.content == fake_backend.REPLY.format(prompt=PROMPT)
    finally:
        running.stop()


def test_chat_template_kwargs_reach_the_template(tmp_path):
    """llama-server's and vLLM's chat_template_kwargs (Qwen3's {"enable_thinking": false}) were accepted and
    ignored: a 200 whose prompt the template rendered without them. They are the template's variables now, and a
    KV cache that holds the prompt of other values is reused only as far as the tokens agree."""
    shows = "{% if enable_thinking is defined %}thinking={{ enable_thinking }} {{ deep.list[1] }}\n{% endif %}"
    running = Server(tmp_path, "--no-log", template=shows + fake_backend.TEMPLATE, reply="{history}")
    try:
        for thinking in (False, True, None):
            kwargs = {"enable_thinking": thinking, "deep": {"list": ["a", "b"]}} if thinking is not None else {}
            reply = ask(running.client(), extra_body={"chat_template_kwargs": kwargs}).choices[0].message.content
            assert reply.startswith(f"thinking={thinking} b\nuser\n" if thinking is not None else "user\n"), reply
        for empty in (None, []):  # none, as {} (PHP writes an empty map as []), on a completion too
            assert ask(running.client(), extra_body={"chat_template_kwargs": empty}).choices[0].message.content
            body = {"prompt": PROMPT, "max_tokens": 4, "chat_template_kwargs": empty}
            assert httpx.post(f"{running.url}/v1/completions", json=body, timeout=30).status_code == 200
    finally:
        running.stop()


def test_serves_chat_template_kwargs_are_every_chats_and_a_requests_own_go_over_them(tmp_path):
    """llama-server's --chat-template-kwargs: the variables of every chat request, a request's chat_template_kwargs
    merged over them key by key (tools/server: the request's keys set into a copy of the server's); a plain
    completion, which no template renders, still serves."""
    shows = "{% if enable_thinking is defined %}thinking={{ enable_thinking }} {{ deep.list[1] }}\n{% endif %}"
    kwargs = '{"enable_thinking": false, "deep": {"list": ["a", "b"]}}'
    running = Server(
        tmp_path, "--chat-template-kwargs", kwargs, template=shows + fake_backend.TEMPLATE, reply="{history}"
    )
    try:
        assert ask(running.client()).choices[0].message.content.startswith("thinking=False b\nuser\n")
        override = {"chat_template_kwargs": {"enable_thinking": True}}
        assert ask(running.client(), extra_body=override).choices[0].message.content.startswith("thinking=True b\n")
        assert ask(running.client()).choices[0].message.content.startswith("thinking=False b\n")  # for one request
        body = {"prompt": PROMPT, "max_tokens": 4}
        assert httpx.post(f"{running.url}/v1/completions", json=body, timeout=30).status_code == 200
    finally:
        running.stop()
    rows = logread.replies(running.folder / "data" / "logs.db", limit=10)
    merged = {"enable_thinking": True, "deep": {"list": ["a", "b"]}}
    server_wide = merged | {"enable_thinking": False}
    assert [row["settings"]["chat_template_kwargs"] for row in rows] == [server_wide, merged, server_wide, {}]


@pytest.mark.parametrize(
    ("path", "kwargs", "code", "param"),
    [
        ("chat/completions", "no thinking", "invalid_chat_template_kwargs", "chat_template_kwargs"),
        ("chat/completions", [{"enable_thinking": False}], "invalid_chat_template_kwargs", "chat_template_kwargs"),
        *(
            (
                "chat/completions",
                {"enable_thinking": False, key: "x"},
                "invalid_chat_template_kwargs",
                f"chat_template_kwargs.{key}",
            )
            for key in ("messages", "add_generation_prompt", "bos_token", "eos_token", "tools", "range", "self")
        ),
        ("completions", {"enable_thinking": False}, "unsupported_parameter", "chat_template_kwargs"),
    ],
)
def test_chat_template_kwargs_of_a_wrong_shape_or_that_replace_the_servers_are_a_400(server, path, kwargs, code, param):
    """Each was a 200 that ignored the field: the template's own variables (the messages, the generation prompt)
    are the server's to set, and a completion's prompt has no template to give them to."""
    body = {"chat_template_kwargs": kwargs, "max_tokens": 4}
    body |= {"messages": [{"role": "user", "content": PROMPT}]} if path.startswith("chat") else {"prompt": PROMPT}
    response = httpx.post(f"{server.url}/v1/{path}", json=body, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == (code, param)
    assert param.rsplit(".", 1)[-1] in error["message"] and "chat_template_kwargs" in error["message"]


def test_one_model_through_the_client(server):
    """models.retrieve(id) is GET /v1/models/{id}: the served model under any name it answers to, else a 404."""
    client = server.client()
    for name in ("target.fake.gguf", "target.fake"):
        assert client.models.retrieve(name).id == "target.fake.gguf"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4")


def test_models_say_when_the_target_file_was_made(server):
    """`created` was 0, which clients show as 1970: it is the target file's modification time."""
    listed = server.client().models.list().data
    assert [entry.created for entry in listed] == [int(server.target.stat().st_mtime)]
    assert server.client().models.retrieve(listed[0].id).created == listed[0].created


def test_api_key_is_required(guarded):
    with pytest.raises(openai.AuthenticationError):
        ask(guarded.client("wrong"))
    response = httpx.get(f"{guarded.url}/v1/models")
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    for scheme in ("bearer", "BEARER"):  # the scheme is case-insensitive, as HTTP has it; the key is not
        assert httpx.get(f"{guarded.url}/v1/models", headers={"Authorization": f"{scheme} {KEY}"}).status_code == 200
    assert httpx.get(f"{guarded.url}/v1/models", headers={"Authorization": f"Bearer {KEY.upper()}"}).status_code == 401
    assert ask(guarded.client(KEY)).choices[0].message.content == fake_backend.REPLY.format(prompt=PROMPT)


def test_every_chunk_of_a_stream_says_when_the_stream_was_created(guarded):
    """`created` was read again for every chunk, so a stream that crossed a second had chunks that
    disagreed; the API gives them all the same. This reply takes a few seconds (eval_sleep)."""
    body = {"prompt": "Go on", "max_tokens": 240, "stream": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {KEY}"}
    started = time.time()
    with httpx.stream("POST", f"{guarded.url}/v1/completions", json=body, headers=headers, timeout=60) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    assert time.time() - started > 1.5, "too short a stream to cross a second"
    assert len({event["created"] for event in events}) == 1 and len(events) > 20


def test_full_queue_is_503(guarded):
    """The 503 says when to come back (Retry-After): without it the official client retried after about 0.5 s
    and 1 s, into the same full queue."""
    body = {"prompt": "Go on forever", "max_tokens": 2000, "stream": True}
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.stream("POST", f"{guarded.url}/v1/completions", json=body, headers=headers, timeout=60) as response:
        lines = response.iter_lines()  # kept: closing it would close the connection, and cancel the job
        next(line for line in lines if '"text": "' in line)  # it runs now
        with pytest.raises(openai.InternalServerError) as caught:
            ask(guarded.client(KEY))
        assert caught.value.status_code == 503 and caught.value.body["code"] == "queue_full"
        assert 0 < int(caught.value.response.headers["retry-after"]) <= 60  # seconds, a short wait
        # A web page may read it too: a header beyond CORS's few simple ones is hidden from it unless exposed
        page = {**headers, "Origin": "http://localhost:3000"}
        refused = httpx.post(f"{guarded.url}/v1/completions", json={"prompt": "Hi"}, headers=page, timeout=60)
        assert refused.status_code == 503 and "retry-after" in refused.headers
        assert "Retry-After" in refused.headers["access-control-expose-headers"].split(", ")
    guarded.wait_for(r"POST /v1/completions 499 .*cancelled")
    assert ask(guarded.client(KEY)).choices[0].finish_reason == "stop"


def test_a_refused_long_prompt_gives_its_queue_place_back(guarded):
    """With no queue behind the running request, a prompt longer than the context is refused (400, streamed
    or not) and the next request is answered: the place it took while its prompt was measured is free."""
    client = guarded.client(KEY)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError):
            ask(client, "x" * 200_000, stream=stream)
    assert ask(client).choices[0].finish_reason == "stop"


def test_requests_are_logged(server):
    prompt = "Log this one, please."
    reply = ask(server.client(), prompt, stop=["That"])
    path = server.folder / "data" / "logs.db"
    deadline, found = time.monotonic() + 30, []
    while not found and time.monotonic() < deadline:  # written after the response, on the log's thread
        found = [r for r in logread.replies(path, limit=50) if r["prompt"] == prompt] if path.exists() else []
        time.sleep(0.05)
    assert len(found) == 1, "the request was not logged"
    logged = found[0]
    assert logged["reply"] == reply.choices[0].message.content == f"Here is your text again:\n{prompt}\n"
    assert logged["label"] == "spec k=4" and logged["settings"]["temperature"] == 0.0
    assert logged["stats"]["stop_reason"] == "stop" and logged["stats"]["generated_tokens"] > 0
    assert logged["target"].endswith("target.fake.gguf") and logged["draft"].endswith("draft.fake.gguf")


def test_no_log_writes_nothing(guarded):
    assert ask(guarded.client(KEY)).choices[0].finish_reason == "stop"
    assert not (guarded.folder / "data" / "logs.db").exists()


def _server_log_lines(fake_models, requests: int) -> list[str]:
    """The console lines of serve's log after `requests` requests have been recorded (in-process, no server)."""
    from rich.console import Console

    from specchat.chat import Message
    from specchat.outputs import Request as Ask
    from specchat.runtime import Options, open_pipeline
    from specchat.sampling import SamplingParams
    from specchat.servelog import ServerLog
    from specchat.servequeue import Job, Outcome
    from specchat.speculative import Stats

    console = Console(record=True, width=300)
    with open_pipeline(Options(target_path=fake_models[0], draft_path=fake_models[1], mode="spec"), print) as pipe:
        log = ServerLog(pipe, console)
        job = Job([Message("user", "hi")], "", Ask("spec", 4, SamplingParams(), 16), [])
        for _ in range(requests):
            log.record(job, Outcome("hello", Stats(prompt_tokens=3, generated=1), "eog"))
        log.close()
    return [line for line in console.export_text().splitlines() if line.strip()]


def test_a_log_that_fails_is_one_warning_and_never_fails_a_request(fake_models, monkeypatch):
    blocker = fake_models[0].parent / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(blocker))  # the log cannot be created below a file
    lines = _server_log_lines(fake_models, 3)
    assert len(lines) == 1 and lines[0].startswith("warning: requests are not logged:") and "--no-log" in lines[0]


def test_a_damaged_log_is_set_aside_and_the_requests_logged(fake_models, monkeypatch):
    """A log SQLite found damaged: every request warned 'not logged' (once) for as long as the server ran."""
    from specchat.paths import log_file

    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(fake_models[0].parent / "data"))
    log_file().parent.mkdir(parents=True)
    log_file().write_bytes(b"not a log at all" * 512)
    lines = _server_log_lines(fake_models, 2)
    assert len(lines) == 1 and "is damaged (file is not a database): moved to logs-damaged-" in lines[0], lines
    assert len(logread.replies(log_file(), limit=10)) == 2


def test_next_turn_reuses_the_kv_cache(server):
    """The second turn of a conversation evaluates only what the first did not leave in the KV cache."""
    first = [{"role": "user", "content": "Summarise this paragraph for me. " * 12}]
    client = server.client()
    one = client.chat.completions.create(model="target.fake.gguf", messages=first, temperature=0)
    answer = {"role": "assistant", "content": one.choices[0].message.content}
    two = client.chat.completions.create(
        model="target.fake.gguf", messages=[*first, answer, {"role": "user", "content": "Shorter?"}], temperature=0
    )
    timings, usage = two.model_extra["timings"], two.usage
    assert timings["cache_n"] + timings["prompt_n"] == usage.prompt_tokens
    assert usage.prompt_tokens_details.cached_tokens == timings["cache_n"] >= one.usage.prompt_tokens
    assert timings["prompt_n"] < usage.prompt_tokens / 4  # only the new turn's tokens were evaluated


def test_non_local_host_needs_a_key():
    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--host 0.0.0.0" in lines[0] and "--api-key" in lines[0]


def test_an_empty_host_is_refused():
    """`--host ""` listened on every interface (with a key) and printed the address http://:PORT/v1."""
    result = CliRunner().invoke(app, ["serve", "--host", " ", "--api-key", KEY, "--port", "0"])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "--host is empty" in lines[0] and "0.0.0.0" in lines[0]


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--api-key", ""], {}, "is empty"),
        ([], {"SPECCHAT_API_KEY": " "}, "is empty"),
        (["--api-key", " key", "--host", "0.0.0.0"], {}, "starts or ends with a space"),
        (["--api-key", "clé"], {}, "outside ASCII"),  # headers are Latin-1 bytes; httpx sends no other
    ],
)
def test_an_empty_api_key_is_refused(args, env, said):
    """`--api-key "$KEY"` with KEY unset served with no key at all (on 127.0.0.1: not a word said), and a key
    with a space around it was one no client could send (HTTP trims header values)."""
    missing = ["--target", "/nonexistent/target.gguf"]  # were the key taken, this would fail at once (no download)
    result = CliRunner().invoke(app, ["serve", *args, *missing, "--port", "0"], env=env)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and said in lines[0] and "--api-key" in lines[0], result.stderr


def test_a_target_file_name_cannot_break_or_colour_the_serving_line(tmp_path):
    """The 'serving X' line printed the target's file name as it was: an escape sequence in it acted on the
    terminal, a newline broke the line in two."""
    evil = tmp_path / "evil\x1b[2J\nx.fake.gguf"
    evil.write_text(json.dumps({"role": "target"}), encoding="utf-8")
    running = Server(tmp_path / "serve", "--target", str(evil))  # the last --target is the one used
    try:
        assert "serving evil\\x1b[2J\\nx.fake.gguf (spec k=4) on http" in running.console()
        assert "\x1b" not in running.console()
    finally:
        running.stop()


def test_a_target_without_a_chat_template_is_said_at_the_start(tmp_path, server):
    """Such a server answered every chat request with a 500 and said nothing when it started; completions
    (no template) still serve, so it starts, with a warning."""
    running = Server(tmp_path / "bare", template=None)
    try:
        running.wait_for(r"warning: /v1/chat/completions will fail: .*has no chat template.*/v1/completions serves")
        with pytest.raises(openai.InternalServerError):
            running.client().chat.completions.create(model="", messages=[{"role": "user", "content": "Hi"}])
        assert running.client().completions.create(model="", prompt="Hi", max_tokens=3).choices[0].text
    finally:
        running.stop()
    assert "warning:" not in server.console()


def test_taken_port_is_one_line(server):
    port = server.url.rsplit(":", 1)[1]
    result = CliRunner().invoke(app, ["serve", "--port", port])
    assert result.exit_code == 2 and "cannot listen on 127.0.0.1:" in result.stderr and "--port" in result.stderr


def test_a_bracketed_ipv6_host_is_named_as_such_not_as_one_of_other_machines():
    """`--host [::1]`, as a URL writes this machine's IPv6 address, was refused as an address that "would accept
    requests from other machines without a key", which sent the user to --api-key, and then to another error."""
    for args in (["--host", "[::1]"], ["--host", "[::1]", "--api-key", KEY]):
        result = CliRunner().invoke(app, ["serve", *args, "--port", "0"])
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1, result.stderr
        assert "--host [::1]" in lines[0] and "brackets" in lines[0] and "--host ::1" in lines[0], lines[0]
        assert "other machines" not in lines[0]


def test_an_address_not_of_this_machine_names_the_host_not_the_port():
    """'choose another --port' was the hint for any address that could not be bound, a typo'd host too."""
    result = CliRunner().invoke(app, ["serve", "--host", "192.0.2.1", "--api-key", KEY, "--port", "0"])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "cannot listen on 192.0.2.1:0" in lines[0]
    assert "--host" in lines[0].partition("hint:")[2] and "--port" not in lines[0], lines[0]


def test_the_socket_listens_before_the_address_is_printed():
    """A client that connects as soon as `serve` prints its address is queued, not refused, while uvicorn
    is still starting (the official client gave "Connection error" on the first request once)."""
    from specchat.server import listen

    sock = listen("127.0.0.1", 0)
    try:
        client = socket.create_connection(sock.getsockname(), timeout=5)  # nobody has accepted yet
        client.close()
    finally:
        sock.close()


def test_shutdown_mid_reply_ends_every_request_with_an_error_and_no_traceback(tmp_path):
    """SIGTERM (a service manager) or Ctrl-C while a long reply streams and others wait: each gets the
    503 error object before the process exits, instead of a cut connection and a traceback per request."""
    running = Server(tmp_path, "--no-log", eval_sleep=0.03)  # 2000 tokens take far longer than the grace
    body = {"prompt": "Go on forever", "max_tokens": 2000, "stream": True}
    with httpx.stream("POST", f"{running.url}/v1/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        next(line for line in lines if '"text": "' in line)  # generating
        results: list[httpx.Response] = []
        plain = {**body, "stream": False}
        waiting = threading.Thread(
            target=lambda: results.append(httpx.post(f"{running.url}/v1/completions", json=plain, timeout=60))
        )
        waiting.start()
        deadline = time.monotonic() + 30  # queued behind the stream (a fixed sleep was too short on a busy CI box)
        while httpx.get(f"{running.url}/health").json()["busy"] < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        running.process.terminate()
        last = [line for line in lines if line][-1]
        waiting.join(30)
    running.process.wait(timeout=30)
    assert json.loads(last.removeprefix("data: "))["error"]["code"] == "shutting_down"
    assert results[0].status_code == 503 and results[0].json()["error"]["code"] == "shutting_down"
    assert int(results[0].headers["retry-after"]) > 0  # every 503 says when to come back
    assert "Traceback" not in running.console() and "Exception" not in running.console(), running.console()
    assert running.process.returncode == -signal.SIGTERM and running.console().endswith("stopped (SIGTERM)\n")


def test_a_long_prefill_stops_at_once_for_a_client_that_left_and_for_a_shutdown(tmp_path):
    """A prefill is one call into llama.cpp, and a job was stopped only between rounds: a long prompt whose
    client had left held the engine (and the requests behind it) for minutes, and SIGTERM during one took as
    long, then gave a plain-text 500 and a traceback. A cancel now aborts the call, as Ctrl-C does in `run`."""
    running = Server(tmp_path, "--no-log", prefill_sleep=0.05)  # a 2000-token prompt: 100 s of prefill
    try:
        long = json.dumps({"prompt": "x" * 2000, "max_tokens": 5}).encode()
        head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(long)}\r\n\r\n".encode()
        host, port = running.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as leaving:
            leaving.sendall(head + long)
            time.sleep(0.5)  # in its prefill by now
        started = time.monotonic()
        assert ask(running.client()).choices[0].message.content == fake_backend.REPLY.format(prompt=PROMPT)
        assert time.monotonic() - started < 20  # its own prompt's prefill takes 2 s
        running.wait_for(r"POST /v1/completions 499\s+0 tokens.*cancelled")
        results: list[httpx.Response] = []
        body = {"prompt": "y" * 2000, "max_tokens": 5}
        waiting = threading.Thread(
            target=lambda: results.append(httpx.post(f"{running.url}/v1/completions", json=body, timeout=60))
        )
        waiting.start()
        time.sleep(0.5)
        started = time.monotonic()
        running.process.terminate()
        waiting.join(30)
        running.process.wait(timeout=30)
        assert time.monotonic() - started < 15  # the 4 s grace, then the prefill stops
        assert results[0].status_code == 503 and results[0].json()["error"]["code"] == "shutting_down"
        assert "Traceback" not in running.console(), running.console()
    finally:  # never left running (without the abort it would prefill on for minutes)
        running.process.kill()
        running.process.wait(timeout=30)


def test_a_second_ctrl_c_stops_the_running_reply_now_with_its_503_and_no_traceback(tmp_path):
    """The first Ctrl-C gives the running reply 4 s; a second one was uvicorn's force quit, which cancelled
    the request mid-response: two tracebacks on the console and a plain-text 500 for a non-streamed client."""
    running = Server(tmp_path, "--no-log", eval_sleep=0.03)
    try:
        results: list[httpx.Response] = []
        body = {"prompt": "Go on forever", "max_tokens": 2000}
        waiting = threading.Thread(
            target=lambda: results.append(httpx.post(f"{running.url}/v1/completions", json=body, timeout=60))
        )
        waiting.start()
        deadline = time.monotonic() + 30  # generating (a fixed sleep can be too short on a busy CI box)
        while httpx.get(f"{running.url}/health").json()["busy"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        started = time.monotonic()
        running.process.send_signal(signal.SIGINT)
        time.sleep(0.3)  # two signals sent at once can reach Python as one
        running.process.send_signal(signal.SIGINT)
        waiting.join(30)
        assert running.process.wait(timeout=30) == 130 and time.monotonic() - started < 3  # not the 4 s grace
        assert results[0].status_code == 503 and results[0].json()["error"]["code"] == "shutting_down"
        assert "Traceback" not in running.console(), running.console()
    finally:
        running.process.kill()
        running.process.wait(timeout=30)


def test_a_shutdown_while_a_client_still_sends_its_body_answers_it_with_a_503_and_no_traceback(tmp_path):
    """A request whose body had not all come when SIGTERM came waited for it past the 4 s grace: uvicorn cancelled
    it at 5 s, with an ERROR line and a traceback on the console and a plain-text 500 for the client."""
    running = Server(tmp_path, "--no-log")
    try:
        host, port = running.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as slow:
            slow.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"prompt": ')
            time.sleep(0.5)  # its handler reads the body
            running.process.terminate()
            answer = _read_to_close(slow).decode()  # the server exits: the connection closes
        assert running.process.wait(timeout=30) == -signal.SIGTERM
        assert answer.startswith("HTTP/1.1 503") and '"shutting_down"' in answer, answer
        assert "Traceback" not in running.console() and "ERROR" not in running.console(), running.console()
    finally:
        running.process.kill()
        running.process.wait(timeout=30)


def test_a_ctrl_c_that_the_server_was_started_to_ignore_is_ignored(tmp_path, monkeypatch):
    """A job started with `&` in a script gets SIGINT ignored, so that Ctrl-C for the script's foreground command
    (sent to the whole process group) leaves it running; `run` leaves it so. uvicorn took it all the same: the
    server shut down mid-reply, and exited 0 as if it had ended by itself. It is ignored now; SIGTERM still stops it."""

    def sigint_ignored(reset=default_signals) -> None:
        reset()
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    monkeypatch.setattr(sys.modules[__name__], "default_signals", sigint_ignored)
    running = Server(tmp_path, "--no-log", eval_sleep=0.01)
    try:
        body = {"prompt": "Go on", "max_tokens": 60, "stream": True}
        with httpx.stream("POST", f"{running.url}/v1/completions", json=body, timeout=60) as response:
            lines = response.iter_lines()
            next(line for line in lines if '"text": "' in line)  # generating
            running.process.send_signal(signal.SIGINT)
            last = [line for line in lines if line][-1]
        assert last == "data: [DONE]", last
        assert httpx.get(f"{running.url}/health", timeout=10).json()["status"] == "ok"
        assert running.process.poll() is None and "interrupted" not in running.console(), running.console()
    finally:
        running.stop()
    assert running.process.returncode == -signal.SIGTERM, running.console()


def _asgi_stream_whose_client_leaves_at(app, body: dict, leave_at: bytes) -> list[bytes]:
    """POST body to the app as uvicorn does (ASGI 2.3: Starlette listens for the disconnect beside the
    stream), with a client that leaves as soon as a sent chunk holds leave_at: what it was sent by then."""

    async def talk() -> list[bytes]:
        gone, sent, asked = asyncio.Event(), [], False

        async def receive() -> dict:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message.get("body", b""))
            if leave_at in message.get("body", b""):
                gone.set()
                await asyncio.Event().wait()  # the socket is closed: this send never completes

        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/completions", "raw_path": b"/v1/completions",
                 "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json")],
                 "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8080)}  # fmt: skip
        await app(scope, receive, send)
        await asyncio.sleep(0.2)  # the job's done-callbacks
        return sent

    return asyncio.run(talk())


def test_a_stream_whose_client_leaves_after_the_generation_before_done_gets_its_499_line(fake_models):
    """A client that left after its generation had ended, before `data: [DONE]`, got no console line at all:
    the stream never reached the line after [DONE], and the job had not been cancelled. Exactly one 499 now."""
    from rich.console import Console

    from specchat.runtime import Options, open_pipeline
    from specchat.serveapi import Api, ServeConfig

    console = Console(record=True, width=300)
    with open_pipeline(Options(target_path=fake_models[0], draft_path=fake_models[1], mode="spec"), print) as pipe:
        api = Api(pipe, ServeConfig(mode="spec", no_log=True), console)
        try:
            body = {"prompt": "Hello", "max_tokens": 5, "stream": True}
            sent = _asgi_stream_whose_client_leaves_at(api.app(), body, b'"finish_reason": "length"')
        finally:
            api.engine.close()
    assert b"[DONE]" not in b"".join(sent) and b'"finish_reason": "length"' in sent[-1]  # left just before it
    lines = [line for line in console.export_text().splitlines() if line.strip()]
    assert len(lines) == 1 and re.match(r"POST /v1/completions 499  5 tokens, .*, max_tokens$", lines[0]), lines


def preflight(server: Server, origin: str, path: str = "/v1/chat/completions") -> httpx.Response:
    """What a browser asks before a page from origin may POST JSON with a key (no key on the preflight)."""
    headers = {"Origin": origin, "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type"}  # fmt: skip
    return httpx.options(f"{server.url}{path}", headers=headers)


def test_pages_on_this_machine_may_call_the_server_and_others_may_not(server):
    """A chat web UI from another origin could not call the server at all: no CORS headers, and the preflight
    was a 405. Pages on this machine (localhost, 127.0.0.1, [::1], any port, http or https) may now."""
    for origin in ("http://localhost:3000", "http://127.0.0.1:5173", "https://localhost", "http://[::1]:8000"):
        allowed = preflight(server, origin)
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == origin, origin
        assert "POST" in allowed.headers["access-control-allow-methods"]
        assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    for origin in ("https://evil.example", "http://localhost.evil.example:3000", "http://127.0.0.1.evil.example"):
        refused = preflight(server, origin)
        assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers, origin
        # was Starlette's plain text "Disallowed CORS origin": an error object, as every other refusal
        error = refused.json()["error"]
        assert error["code"] == "cors_preflight_refused" and "Disallowed CORS origin" in error["message"], origin
    server.wait_for(r"OPTIONS /v1/chat/completions 400 .*https://evil\.example.*--allow-origin")
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    answered = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers={"Origin": "http://localhost:3000"})
    assert answered.status_code == 200 and answered.headers["access-control-allow-origin"] == "http://localhost:3000"
    foreign = httpx.get(f"{server.url}/v1/models", headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403 and "access-control-allow-origin" not in foreign.headers
    assert foreign.json()["error"]["code"] == "origin_not_allowed"


def test_a_page_from_another_origin_cannot_start_a_generation_without_a_preflight(server):
    """A "simple" POST (text/plain: no preflight) from any web page reached the route, which reads JSON
    whatever the content type, and generated: the page could not read the answer, but it could keep the
    machine busy. Requests a browser sends from an origin that is not allowed are refused before that;
    curl and the SDKs send no Origin and are not affected."""
    body = json.dumps({"prompt": "Hi", "max_tokens": 4})
    simple = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
    generated = server.console().count(" tokens, ")
    refused = httpx.post(f"{server.url}/v1/completions", content=body, headers=simple)
    assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
    server.wait_for(r"POST /v1/completions 403  requests from web pages at https://evil\.example .*--allow-origin")
    assert server.console().count(" tokens, ") == generated  # no generation was started
    plain = httpx.post(f"{server.url}/v1/completions", content=body, headers={"Content-Type": "text/plain"})
    assert plain.status_code == 200  # no Origin: not a browser's page


def test_the_javascript_clients_stream_helper_may_call_the_server(server):
    """openai-node's `chat.completions.stream()` adds X-Stainless-Helper-Method, and its User-Agent is in the
    preflight where the browser lets a page set it (Firefox): both were refused, so the page could not call."""
    headers = {"Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization,content-type,user-agent,x-stainless-arch,"
               "x-stainless-helper-method,x-stainless-lang,x-stainless-retry-count,x-stainless-timeout"}  # fmt: skip
    allowed = httpx.options(f"{server.url}/v1/chat/completions", headers=headers)
    assert allowed.status_code == 200, allowed.text
    assert allowed.headers["access-control-allow-origin"] == "http://localhost:5173"


def test_a_refused_preflight_names_the_headers_that_are_not_allowed(server):
    """Starlette's reason reads "Disallowed CORS headers": which of the page's headers, the console did not say."""
    headers = {"Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, X-Custom-Trace, content-type, x-api-key"}  # fmt: skip
    refused = httpx.options(f"{server.url}/v1/chat/completions", headers=headers)
    assert refused.status_code == 400
    line = server.wait_for(r"OPTIONS /v1/chat/completions 400 .*localhost:5173.*").group(0)
    assert "Disallowed CORS headers (X-Custom-Trace, x-api-key)" in line, line


def test_a_refused_origin_is_told_an_allow_origin_only_where_one_would_allow_it(server):
    """A page opened from a file (or a sandboxed frame) sends Origin: null; the 403's line said
    `--allow-origin null` allows it, which serve refuses as a usage error. An origin --allow-origin would
    write otherwise (case, a default port) was suggested too, and would never have matched."""
    for origin in ("null", "https://Upper.example", "https://chat.example.com:443"):  # the last two: not a browser
        refused = httpx.get(f"{server.url}/v1/models", headers={"Origin": origin})
        assert refused.status_code == 403
        line = server.wait_for(rf"GET /v1/models 403 .*{re.escape(origin)}.*").group(0)
        assert "--allow-origin" not in line, line  # it would not: null is a usage error, the others never match
    assert "from a file" in server.wait_for(r"GET /v1/models 403 .* null .*").group(0)


def test_allow_origin_lets_that_page_call_the_server_and_the_key_is_still_needed(guarded):
    """The preflight needs no key (browsers send none with it); the request itself still does."""
    origin = "https://chat.example.com"
    allowed = preflight(guarded, origin)
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == origin
    assert preflight(guarded, "https://other.example.com").status_code == 400
    assert preflight(guarded, "http://localhost:3000").status_code == 200  # this machine's pages still may
    refused = httpx.get(f"{guarded.url}/v1/models", headers={"Origin": origin})
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == origin  # readable
    headers = {"Origin": origin, "Authorization": f"Bearer {KEY}"}
    answered = httpx.get(f"{guarded.url}/v1/models", headers=headers)
    assert answered.status_code == 200 and answered.headers["access-control-allow-origin"] == origin


def test_any_origin_from_the_environment(tmp_path):
    running = Server(tmp_path, "--no-log", env={"SPECCHAT_ALLOW_ORIGINS": "https://one.example, *"})
    try:
        for origin in ("https://evil.example", "http://localhost:3000"):
            allowed = preflight(running, origin)
            assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] in (origin, "*")
        body = {"prompt": "Hi", "max_tokens": 4, "stream": True}
        with httpx.stream(
            "POST", f"{running.url}/v1/completions", json=body, headers={"Origin": "https://x.example"}
        ) as streamed:
            assert streamed.headers["access-control-allow-origin"] == "*"
            assert [line for line in streamed.iter_lines() if line][-1] == "data: [DONE]"
    finally:
        running.stop()


def test_allow_origin_is_read_as_a_browser_sends_origins():
    """Several in one value (comma-separated, as SPECCHAT_ALLOW_ORIGINS has them), in the case and without the
    default port that a browser's Origin header has; else never matched."""
    from specchat.cors import parse_origins

    given = ["https://Chat.Example.com:443, http://10.0.0.5:3000", "*", "http://[::1]:80", "chrome-extension://abc"]
    assert parse_origins(given) == (
        "https://chat.example.com", "http://10.0.0.5:3000", "*", "http://[::1]", "chrome-extension://abc"
    )  # fmt: skip


@pytest.mark.parametrize(
    "origin", ["localhost:3000", "chat.example.com", "https://chat.example.com/", "https://chat.example.com/ui", "null",
               "https://chat.example.com?x=1", "https://user@chat.example.com", "https://chat.example.com:99999",
               "http://[::1"]
)  # fmt: skip
def test_an_origin_that_is_not_one_is_a_usage_error(origin):
    """A page's address, or a host without its scheme, was never going to match a browser's Origin header."""
    result = CliRunner().invoke(app, ["serve", "--allow-origin", origin, "--port", "0"])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and f"--allow-origin {origin}" in lines[0], result.output
    assert "hint:" in lines[0] and "https://chat.example.com" in lines[0].partition("hint:")[2]
    result = CliRunner().invoke(app, ["serve", "--port", "0"], env={"SPECCHAT_ALLOW_ORIGINS": origin})
    assert result.exit_code == 2 and "SPECCHAT_ALLOW_ORIGINS" in result.stderr


@pytest.mark.parametrize("value", ["", " ", ",", " , "])
def test_an_allow_origin_that_names_none_is_a_usage_error(value, tmp_path):
    """`--allow-origin "$ORIGIN"` with the variable unset added nothing, in silence: the page that was meant
    to be allowed is then refused with a 403 that points at a flag the user believes they gave."""
    missing = str(tmp_path / "missing.gguf")  # checked before any model: were it not, this would not serve
    result = CliRunner().invoke(app, ["serve", "--allow-origin", value, "--port", "0", "--target", missing])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "names no origin" in lines[0], result.output


@pytest.mark.parametrize(
    ("value", "where", "meant"),
    [
        ("https://a.example,,https://b.example", "between two commas", "https://a.example,https://b.example"),
        ("https://a.example, ,https://b.example", "between two commas", "https://a.example,https://b.example"),
        ("https://a.example,", "at the end", "https://a.example"),
        (",https://a.example", "at the start", "https://a.example"),
    ],
)
def test_an_empty_item_among_origins_is_a_usage_error(value, where, meant, tmp_path):
    """`--allow-origin "a,,b"` (or SPECCHAT_ALLOW_ORIGINS=a,,b, a trailing comma) dropped the empty item without
    a word, as if the list had been typed without it: a slip that left out an origin. As bench's --ks 1,,2."""
    missing = ["--port", "0", "--target", str(tmp_path / "missing.gguf")]  # checked after the origins
    variable = {"SPECCHAT_ALLOW_ORIGINS": value}
    for args, env, given in (
        (["--allow-origin", value], {}, "--allow-origin"),
        ([], variable, "SPECCHAT_ALLOW_ORIGINS:"),
    ):
        result = CliRunner().invoke(app, ["serve", *args, *missing], env=env)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert f"{given} {value!r} has an empty item ({where})" in lines[0], lines[0]
        assert lines[0].endswith(f"{given.rstrip(':')}{'=' if env else ' '}{meant}"), lines[0]


def test_origins_in_the_variable_may_be_apart_by_spaces_too():
    """Click splits SPECCHAT_ALLOW_ORIGINS at whitespace, so "a, b" reaches serve as "a," and "b": no empty item."""
    from specchat.cors import parse_origins

    assert parse_origins(["https://a.example,", "*"], from_env=True) == ("https://a.example", "*")
    assert parse_origins(["https://a.example", "https://b.example"], from_env=True) == (
        "https://a.example", "https://b.example"
    )  # fmt: skip


def test_the_app_starts_and_stops_with_its_lifespan(fake_models):
    """The lifespan (which waits for the log's writes and closes the engine at shutdown) goes through the
    middleware too; uvicorn takes a lifespan that fails for one it does not support, in silence."""
    from rich.console import Console
    from starlette.testclient import TestClient

    from specchat.runtime import Options, open_pipeline
    from specchat.serveapi import Api, ServeConfig

    with open_pipeline(Options(target_path=fake_models[0], draft_path=fake_models[1], mode="spec"), print) as pipe:
        api = Api(pipe, ServeConfig(mode="spec", no_log=True), Console(record=True))
        closed = []
        api.engine.close = lambda close=api.engine.close: closed.append(close())
        with TestClient(api.app()) as client:
            assert client.get("/health").json()["status"] == "ok"
        assert closed


def test_serve_caps_k_at_what_the_mode_drafts(fake_models):
    """`serve --mode spec -k 32` drafted 32 tokens with the draft model every round; spec drafts 16 at most."""
    from rich.console import Console

    from specchat.runtime import Options, open_pipeline
    from specchat.serveapi import Api, ServeConfig

    with open_pipeline(Options(target_path=fake_models[0], draft_path=fake_models[1], mode="spec"), print) as pipe:
        for mode, k in (("spec", 16), ("ngram", 32)):
            api = Api(pipe, ServeConfig(mode=mode, k=32, no_log=True), Console(record=True))
            assert api.k == k and api.label == f"{mode} k={k}"
            api.engine.close()


def test_a_request_that_gets_its_place_after_the_shutdown_began_is_stopped_too(fake_models):
    """stop_all() stopped the jobs it knew of; one still being tokenized then (a long prompt) joined afterwards
    and ran to its max_tokens, past uvicorn's grace period, instead of ending with its 503."""
    from rich.console import Console

    from specchat.chat import Message
    from specchat.runtime import Options, open_pipeline
    from specchat.serveapi import Api, ServeConfig
    from specchat.servequeue import Job

    with open_pipeline(Options(target_path=fake_models[0], draft_path=fake_models[1], mode="spec"), print) as pipe:
        api = Api(pipe, ServeConfig(mode="spec", no_log=True), Console(record=True))
        api.engine.admit()
        api.stop_all()
        job = Job([Message("user", "Hi")], "", None, [])
        job.ids = pipe.target.tokenize("Hi there")

        async def admitted_late():
            return await api.start(job)

        try:
            assert asyncio.run(admitted_late()).stop_reason == "cancelled"
        finally:
            api.engine.close()


def fake_pair_in_registry(folder: Path) -> Path:
    """The fake pair 'fake' as the default pair of the user's models.toml, its files where the registry finds
    them (child_env's models dir); the target's path there."""
    target, draft = fake_backend.write_pair(folder / "pair")
    models = folder / "models"
    models.mkdir()
    for path in (target, draft):
        (models / path.name).write_bytes(path.read_bytes())
    (folder / "config").mkdir()
    (folder / "config" / "models.toml").write_text(
        'default_pair = "fake"\n[models.faket]\nrepo = "nobody/t-GGUF"\nfile = "target.fake.gguf"\n'
        '[models.faked]\nrepo = "nobody/d-GGUF"\nfile = "draft.fake.gguf"\n'
        '[pairs.fake]\ntarget = "faket"\ndraft = "faked"\n'
    )
    return models / target.name


def test_the_pairs_own_target_given_as_target_is_served_as_the_pair(tmp_path):
    """--target naming the pair's own target file (through a link too) is the pair's model: it was served under
    its file name, and a client that asked for the pair by name got a 404."""
    link = tmp_path / "link.fake.gguf"
    link.symlink_to(fake_pair_in_registry(tmp_path))
    running = Server(tmp_path, files=["--target", str(link)])
    try:
        assert "serving fake (spec k=4)" in running.console()
        reply = running.client().chat.completions.create(model="fake", messages=[{"role": "user", "content": "Hi."}])
        assert reply.model == "fake"
    finally:
        running.stop()


def test_a_target_of_ones_own_beside_the_pairs_draft_is_served_by_its_file_name(tmp_path):
    """`serve --target MINE --mode spec` drafts with the default pair's draft model, and /v1/models named the
    model after the pair ('fake' here, 'qwen2.5-coder-1.5b' for the default pair's 0.5B draft beside a 7B
    target): a client's model picker showed a model that was not the one answering. It is the target's file."""
    target = fake_pair_in_registry(tmp_path)
    mine = tmp_path / "mine" / "coder-7b.fake.gguf"
    mine.parent.mkdir()
    mine.write_bytes(target.read_bytes())
    running = Server(tmp_path, files=["--target", str(mine)])
    try:
        assert "serving coder-7b.fake.gguf (spec k=4)" in running.console()
        client = running.client()
        assert [model.id for model in client.models.list().data] == ["coder-7b.fake.gguf"]
        reply = client.chat.completions.create(model="coder-7b.fake", messages=[{"role": "user", "content": "Hi."}])
        assert reply.model == "coder-7b.fake.gguf" and reply.model_extra["timings"]["draft_n"] > 0
        wrong = httpx.get(f"{running.url}/v1/models/fake")  # the pair's name is not this model's
        assert wrong.status_code == 404 and wrong.json()["error"]["code"] == "model_not_found"
    finally:
        running.stop()


def test_a_client_that_leaves_while_queued_gives_its_place_back_at_once(tmp_path):
    """A queued request whose client left never runs, yet held its place until the running reply ended: with
    --queue 1 the next request got a 503 'one request running, 1 waiting' with none waiting, and /health counted
    the one that left. Its place is free as soon as it leaves (streamed or not), and its 499 line is written then
    (it came once the running reply ended); the next one waits and is answered."""
    running = Server(tmp_path, "--queue", "1", "--no-log", eval_sleep=0.03)
    body = {"prompt": "Go on forever", "max_tokens": 2000, "stream": True}
    try:
        with httpx.stream("POST", f"{running.url}/v1/completions", json=body, timeout=60) as response:
            lines = response.iter_lines()  # kept open: it runs while the others queue behind it
            next(line for line in lines if '"text": "' in line)
            for stream in (False, True):
                leaving = {"prompt": "Hi", "max_tokens": 4, "stream": stream}
                with pytest.raises(httpx.ReadTimeout):  # waits behind the stream, then leaves
                    httpx.post(f"{running.url}/v1/completions", json=leaving, timeout=httpx.Timeout(30, read=0.5))
                deadline = time.monotonic() + 30
                while httpx.get(f"{running.url}/health").json()["busy"] > 1 and time.monotonic() < deadline:
                    time.sleep(0.02)
                assert httpx.get(f"{running.url}/health").json()["busy"] == 1  # the stream alone
                # its line at once too, not when the stream ends (the stream's job is still running)
                running.wait_for(
                    rf"(?s)(POST /v1/completions 499\s+the client went away while queued.*){{{1 + stream}}}"
                )
                assert httpx.get(f"{running.url}/health").json()["busy"] == 1
            answered: list[httpx.Response] = []
            waiting = threading.Thread(target=lambda: answered.append(
                httpx.post(f"{running.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 4}, timeout=60)
            ))  # fmt: skip
            waiting.start()
            deadline = time.monotonic() + 30
            while httpx.get(f"{running.url}/health").json()["busy"] < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
        waiting.join(60)  # the stream closed: its job stops, and the queued one runs
        assert answered[0].status_code == 200, answered[0].text
        assert answered[0].json()["choices"][0]["text"]
        assert running.console().count(" 499 ") == 3, running.console()  # the two that left, once each; the stream
    finally:
        running.stop()


def test_each_prompt_of_a_sampled_batch_draws_its_own_seed_and_a_given_one_is_each_prompts():
    """One seed drawn for the request was every prompt's: LangChain's generate([p, p, p]), asking for three samples,
    got one text three times. A given seed stays every prompt's (each then repeats as if sent alone with it)."""
    from specchat.openai_api import parse_chat, parse_completion

    drawn = [p.seed for p in parse_completion({"prompt": ["p"] * 3, "temperature": 1}, 64).prompt_params()]
    assert len(set(drawn)) == 3 and all(isinstance(seed, int) and seed >= 0 for seed in drawn)
    assert len({p.seed for p in parse_completion({"prompt": ["p"] * 3, "seed": -1}, 64).prompt_params()}) == 3
    given = parse_completion({"prompt": ["p"] * 3, "temperature": 1, "seed": 7}, 64).prompt_params()
    assert [p.seed for p in given] == [7, 7, 7]
    greedy = parse_completion({"prompt": ["p"] * 2, "temperature": 0}, 64).prompt_params()
    assert [p.seed for p in greedy] == [None, None]  # greedy draws nothing
    assert len(parse_chat({"messages": [{"role": "user", "content": "a"}]}, 64).prompt_params()) == 1


def test_a_sampled_batch_of_one_prompt_three_times_gives_three_samples(server):
    body = {"prompt": ["Sample me"] * 3, "temperature": 1.5, "min_p": 0, "top_k": 0, "max_tokens": 24}
    texts = [
        choice["text"] for choice in httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()["choices"]
    ]
    assert len(texts) == 3 and len(set(texts)) > 1, texts
    body["seed"] = 7
    texts = [
        choice["text"] for choice in httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()["choices"]
    ]
    assert len(set(texts)) == 1, texts


def test_a_batch_left_mid_way_holds_its_place_until_its_running_prompt_stops(tmp_path):
    """The batch's place is its last job's; a client that left while the first prompt ran gave it back at once (the
    last job was still queued), so with --queue 0 the next request was let in beside the prompt still running."""
    running = Server(tmp_path, "--queue", "0", "--no-log", eval_sleep=3.0)  # the first prompt stops at its next eval
    try:
        body = {"prompt": ["Go on a", "Go on b"], "max_tokens": 2000}
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{running.url}/v1/completions", json=body, timeout=1.0)  # mid-way through the first eval
        time.sleep(0.1)
        assert httpx.get(f"{running.url}/health").json()["busy"] == 1
        assert httpx.post(f"{running.url}/v1/completions", json={"prompt": "x"}).status_code == 503
        line = running.wait_for(r"POST /v1/completions 499\s+.*2 prompts: cancelled x2\n")
        assert line
        assert httpx.get(f"{running.url}/health").json()["busy"] == 0
    finally:
        running.stop()


def test_a_batch_whose_prompt_fails_names_it(tmp_path):
    """An engine error mid-batch was a 500 with no word of which prompt failed."""
    running = Server(tmp_path, "--no-log", fail_on="BOOM")
    try:
        body = {"prompt": ["Fine first", "BOOM here", "Never run"], "max_tokens": 4}
        response = httpx.post(f"{running.url}/v1/completions", json=body, timeout=60)
        error = response.json()["error"]
        assert response.status_code == 500 and error["param"] == "prompt[1]", error
        assert error["message"].startswith("prompt[1]: "), error
        assert httpx.get(f"{running.url}/health").json()["busy"] == 0
    finally:
        running.stop()


def test_sigterm_while_the_models_load_says_so(tmp_path):
    """A SIGTERM (a service manager) before the models had loaded ended the server without a line: its log
    said "loading" last, as if it had hung. It says "stopped while loading (SIGTERM)" and exits 143."""
    target, draft = fake_backend.write_pair(tmp_path / "files", load_sleep=20)
    log = tmp_path / "console.txt"
    command = [sys.executable, "-m", "specchat", "serve", "--target", str(target), "--draft", str(draft)]
    with open(log, "w") as sink:
        process = subprocess.Popen(
            [*command, "--mode", "spec", "--port", "0"], stdout=sink, stderr=subprocess.STDOUT,
            env=child_env(tmp_path), cwd=tmp_path, preexec_fn=default_signals,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while "fake: loading" not in log.read_text() and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            time.sleep(0.05)
        process.terminate()
        assert process.wait(timeout=10) == -signal.SIGTERM, log.read_text()
    finally:
        process.kill()
    assert log.read_text().endswith("stopped while loading (SIGTERM)\n"), log.read_text()


def test_the_prompt_rate_counts_only_the_tokens_the_prefill_read(server):
    """The same request again reads only the prompt's last token (for the first token's logits): prompt_n 1, and
    the rate is that token over the prefill's time (it was 0 while that token opened the first verify batch)."""
    client = server.client()
    ask(client, "The same question twice, please.")
    again = ask(client, "The same question twice, please.").model_extra["timings"]
    assert again["prompt_n"] == 1 and again["prompt_per_second"] == pytest.approx(1000 / again["prompt_ms"], 0.01)
    streamed = list(ask(client, "The same question twice, please.", stream=True))[-1].model_extra["timings"]
    assert streamed["prompt_n"] == 1, streamed  # the streamed path too
    assert streamed["prompt_per_second"] == pytest.approx(1000 / streamed["prompt_ms"], 0.01), streamed


def test_a_batchs_prompt_rate_counts_every_prompt_token_it_read():
    """A batch's prefill read each prompt whole but what the cache held: its rate divides all of prompt_n. A prompt
    that never ran (its client left) read none."""
    from specchat.apireply import timings
    from specchat.servequeue import Outcome, Stats, batch_outcome

    read = [Outcome("a", Stats(prompt_tokens=11, prefill_s=0.5), "eog", cached=0)]
    read.append(Outcome("b", Stats(prompt_tokens=9, prefill_s=0.5), "eog", cached=4))
    read.append(Outcome("", Stats(), "cancelled"))
    summed = batch_outcome(read)
    rates = timings(summed.stats, summed.cached)
    assert rates["prompt_n"] == 16 and rates["prompt_per_second"] == 16 / 1.0, rates


def test_the_console_line_of_a_reply_without_drafts_names_no_acceptance():
    """`serve --mode target` logged 'accepted 0/0 (0%)' on every request, where the line under a reply leaves the
    acceptance out when nothing was drafted."""
    from types import SimpleNamespace

    from rich.console import Console

    from specchat.serveapi import Api
    from specchat.speculative import Stats

    console = Console(file=io.StringIO(), width=200)
    api = SimpleNamespace(console=console, label="target")
    request = SimpleNamespace(method="POST", url=SimpleNamespace(path="/v1/chat/completions"))
    for drafted, accepted in ((0, 0), (8, 6)):
        stats = Stats(generated=9, drafted=drafted, accepted=accepted, total_s=1.0)
        Api.log(api, request, 200, outcome=SimpleNamespace(stats=stats, stop_reason="eog"))
    first, second = console.file.getvalue().splitlines()
    assert "accepted" not in first and first.endswith("tok/s, target, eog")
    assert "accepted 6/8 (75%), target, eog" in second
