"""Replies that run to their end, and a context sized from the model: its trained length, as memory allows."""

from __future__ import annotations

import json
import struct

import pytest
from fake_backend import REPLY
from test_gguf import s, tiny_gguf
from typer.testing import CliRunner

from specchat import ctxsize, gguf, memorycheck, runtime
from specchat.cli import app

runner = CliRunner()


def fake_target(tmp_path, name="target", **spec):
    path = tmp_path / f"{name}.fake.gguf"
    path.write_text(json.dumps({"role": "target", **spec}), encoding="utf-8")
    return path


def test_a_reply_longer_than_512_tokens_runs_to_its_end(fake_models, tmp_path):
    """The fake quotes the prompt a byte a token: a 700-character prompt gets a reply of about 740 tokens."""
    target = fake_target(tmp_path, context_length=4096)
    prompt = " ".join(f"word{i:03d}" for i in range(88))  # 703 characters
    result = runner.invoke(app, ["run", "--target", str(target), "--mode", "target", "--json", prompt])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["text"] == REPLY.format(prompt=prompt) and len(payload["text"]) > 512
    assert payload["stats"]["stop_reason"] == "eog" and payload["settings"]["max_tokens"] == 0
    limited = runner.invoke(app, ["run", "--target", str(target), "--mode", "target", "--json", "-n", "20", prompt])
    assert json.loads(limited.stdout)["stats"]["generated_tokens"] == 20


def test_the_default_context_is_the_trained_one(fake_models, tmp_path, monkeypatch):
    monkeypatch.setattr(memorycheck, "available_memory", lambda: None)
    target = fake_target(tmp_path, context_length=6144)
    args = ["run", "--target", str(target), "--mode", "target", "--json", "Hi."]
    assert json.loads(runner.invoke(app, args).stdout)["settings"]["ctx"] == 6144
    explicit = runner.invoke(app, [*args, "--ctx", "3000"])
    assert json.loads(explicit.stdout)["settings"]["ctx"] == 3000


def test_a_context_longer_than_the_model_was_trained_for_is_said(fake_models, tmp_path):
    """llama.cpp warns 'n_ctx_seq > n_ctx_train -- possible training context overflow' in its log, hidden without
    --debug: `--ctx 8192` on a model trained for 2,048 ran without a word."""
    target = fake_target(tmp_path, context_length=2048)
    args = ["run", "--target", str(target), "--mode", "target", "-n", "4", "Hi."]
    longer = runner.invoke(app, [*args, "--ctx", "8192"])
    assert longer.exit_code == 0, longer.output
    assert "--ctx 8192 is more than the 2048 tokens target.fake.gguf was trained for" in longer.stderr
    for within in (["--ctx", "2048"], []):  # as trained, or chosen from the model
        assert "trained for" not in runner.invoke(app, [*args, *within]).stderr


def test_choose_takes_the_smaller_model_and_caps_what_memory_cannot_check(fake_models, tmp_path):
    target = fake_target(tmp_path, context_length=131072)
    draft = fake_target(tmp_path, "draft", context_length=32768)
    assert ctxsize.choose([target, draft], None, 0) == ctxsize.MAX_AUTO
    assert ctxsize.choose([target], None, 0) == ctxsize.MAX_AUTO  # 128K only on request
    assert ctxsize.choose([fake_target(tmp_path, "plain")], None, 0) == ctxsize.FALLBACK
    assert ctxsize.choose([fake_target(tmp_path, "old", context_length=1024)], None, 0) == 1024
    # llama.cpp rounds a context up to a multiple of 256: 1,000 would be 1,024, past the model's training.
    assert ctxsize.choose([fake_target(tmp_path, "odd", context_length=1000)], None, 0) == 768
    assert ctxsize.choose([fake_target(tmp_path, "odd", context_length=1000)], 10**9, 10**12) == 768  # no room


def test_choose_fits_the_kv_cache_in_memory(fake_models, tmp_path):
    # 1 GB of weights and a KV cache of 1 KiB per token (the fake reports 1 MiB per 1024 tokens).
    target = fake_target(tmp_path, context_length=32768, memory=[10**9, 2**20])
    overhead = 10**8

    def available(free_bytes: int) -> int:
        """The memory at which `free_bytes` remain for the KV cache."""
        return int((10**9 + overhead + free_bytes) / ctxsize.MEMORY_SHARE) + 1

    assert ctxsize.choose([target], available(64 * 2**20), overhead) == ctxsize.MAX_AUTO  # room for 64K
    assert ctxsize.choose([target], available(5 * 2**20 + 100 * 1024), overhead) == 5 * 1024  # 5,220: down to 256s
    assert ctxsize.choose([target], 10**9, overhead) == ctxsize.MIN_CTX  # no room: the floor; check_memory
    # then says what does not fit


def test_trained_context_from_gguf_metadata(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    extra = s(b"general.architecture") + struct.pack("<I", 8) + s(b"qwen2")
    extra += s(b"qwen2.context_length") + struct.pack("<I", 4) + struct.pack("<I", 32768)
    path = tmp_path / "m.gguf"
    path.write_bytes(tiny_gguf(extra_kv=extra, n_kv=5))
    assert gguf.trained_context(path) == 32768
    path.write_bytes(tiny_gguf())
    assert gguf.trained_context(path) is None


BOUNDS = [(["-n", "0"], 0), (["-n", "-1"], 2), (["--ctx", "-5"], 2), (["--ctx", "10"], 2), (["--ctx", "0"], 0)]


@pytest.mark.parametrize(("option", "code"), BOUNDS)
def test_zero_means_from_the_model_or_no_limit_and_too_small_is_a_usage_error(fake_models, option, code):
    target, _draft = fake_models
    result = runner.invoke(app, ["run", "--target", str(target), "--mode", "target", *option, "Hi."])
    assert result.exit_code == code, result.output


def test_a_draft_model_beyond_its_trained_context_costs_acceptance_not_replies(fake_models, tmp_path):
    """The note named the model trained for less, the draft where it was, and said "poor replies": the replies
    are the target's; a draft past its length only has its guesses accepted less. It named a way out nowhere; for
    the draft's sake none is offered (a shorter --ctx would shrink the target's context too)."""
    target = fake_target(tmp_path, context_length=32768)
    draft = fake_target(tmp_path, "draft", context_length=2048)
    note = ctxsize.beyond_training(target, draft, 8192)
    assert note == (
        "--ctx 8192 is more than the 2048 tokens the draft model draft.fake.gguf was trained for: past that length "
        "its guesses are accepted less often"
    )
    short_target = fake_target(tmp_path, "short", context_length=1024)
    assert "short.fake.gguf was trained for: a conversation longer than that may get poor replies (--ctx 1024" in (
        ctxsize.beyond_training(short_target, draft, 8192)
    )  # the target's, where both are beyond


def test_a_commands_default_context_is_named_as_the_default(fake_models, tmp_path, monkeypatch):
    """bench, serve and tune default to 4096: the note said "--ctx 4096 is more than ..." to a user who gave none."""
    from specchat.errors import SpecchatError

    target = fake_target(tmp_path, context_length=2048)
    assert ctxsize.beyond_training(target, None, 4096, default=True).startswith(
        "the default context (4096) is more than the 2048 tokens target.fake.gguf was trained for"
    )
    seen = []

    def stop(options, *_):
        seen.append(options.ctx_default)
        raise SpecchatError("stopped before loading")

    monkeypatch.setattr(runtime, "open_pipeline", stop)
    for given in ([], ["--ctx", "4096"]):
        runner.invoke(app, ["bench", "--target", str(target), "--suite", "quick", *given])
    assert seen == [True, False]


def test_a_prompt_longer_than_the_model_was_trained_for_is_not_told_to_raise_ctx(fake_models, tmp_path):
    """A 150k-token stdin on a model trained for 32k was told 'raise --ctx', an option that cannot hold it."""
    target = fake_target(tmp_path, context_length=2048)
    args = ["run", "--target", str(target), "--mode", "target", "-n", "4"]
    result = runner.invoke(app, args, input="word " * 600)  # a byte a token: 3,000 tokens
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())
    assert "the model was trained for 2048 tokens, so no --ctx holds" in said and "raise --ctx" not in said, said
    within = runner.invoke(app, [*args, "--ctx", "1024"], input="word " * 300)  # 1,500 tokens: --ctx can help
    assert within.exit_code == 1 and "raise --ctx" in " ".join(within.stderr.split()), within.output


def test_a_bench_prompt_longer_than_the_model_was_trained_for_is_not_told_to_raise_ctx(fake_models, tmp_path):
    """`bench --prompts` of one 200k-token record on a 32k model stopped with 'raise --ctx, or shorten the prompt':
    no --ctx holds it, as `run` already says of such a prompt."""
    target = fake_target(tmp_path, context_length=2048)
    prompts = tmp_path / "prompts.jsonl"
    args = ["bench", "--target", str(target), "--modes", "ngram", "-n", "4", "--prompts", str(prompts)]
    prompts.write_text(json.dumps({"turns": ["word " * 1000]}) + "\n", encoding="utf-8")  # 5,000 > --ctx 4096
    result = runner.invoke(app, args)
    said = " ".join(result.stderr.split())
    assert result.exit_code == 1 and "no bench prompt fits the context" in said, result.output
    assert "the model was trained for 2048 tokens, so no --ctx holds" in said and "raise --ctx" not in said, said
    prompts.write_text(json.dumps({"turns": ["word " * 300]}) + "\n", encoding="utf-8")  # 1,500: --ctx can help
    within = runner.invoke(app, [*args, "--ctx", "1024"])
    assert within.exit_code == 1 and "raise --ctx" in " ".join(within.stderr.split()), within.output
