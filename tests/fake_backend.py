"""A fake model the CLI can be given, through the real plugin hook (as simonw/llm's tests register
MockModel): importing this module registers a backend that claims files named `*.fake.gguf`.

In-process tests use the `fake_models` fixture (conftest.py); subprocesses get it with
SPECCHAT_PLUGINS=fake_backend and PYTHONPATH=tests. A fake file holds a small JSON spec:

    {"role": "target"}                      the target: replies with REPLY (below), then ends
    {"role": "draft", "agree": 0.8}         a draft that agrees with the target at 80% of positions
    optional: "reply" (a format string with {prompt}, or {history}: the whole text before the reply, so
    that a test sees which earlier turns reached the model), "n_vocab", "template" (null: none),
    "memory" ([weights, kv] bytes), "context_length" (the trained context), "interrupt_at" (the eval
    call that raises KeyboardInterrupt), "eval_sleep" (seconds per eval, only for tests that must catch
    a reply mid-way), "prefill_sleep" (seconds per prompt token of a prefill, which the interrupt stops),
    "announce_template" (a line on stderr as the chat template is fetched for rendering), "load_sleep" (seconds
    the file takes to load, after a line on stderr that says it is loading), "token_text"
    ({id: text}: vocabulary entries that differ, for the pair check), "bos"/"eos"/"add_eos"/"vocab_type",
    "fail_on" (a text: an eval of tokens that hold it raises RuntimeError, an engine's failure), "fim" (true: the
    vocabulary has fill-in-the-middle tokens, FIM ids after the bytes; after FIM_MID the target writes
    FIM_REPLY, then <|endoftext|>).

The tokenizer is byte-level: id = byte + 5 after five special ids. Logits are a pure function of the
whole context, like tests/fakes.py: after the chat template's assistant header the target's greedy
continuation is the reply (which quotes the prompt, so prompt lookup has something to copy), then
<|im_end|>; anywhere else (no template, or after a sampled detour) a hashed babble that never ends.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specchat import backends
from specchat.errors import ContextFullError

UNK, ENDOFTEXT, IM_START, IM_END, PAD = range(5)
SPECIALS = {UNK: b"<unk>", ENDOFTEXT: b"<|endoftext|>", IM_START: b"<|im_start|>", IM_END: b"<|im_end|>", PAD: b"<pad>"}
OFFSET = len(SPECIALS)
BYTE_VOCAB = OFFSET + 256
REPLY = "Here is your text again:\n{prompt}\nThat is all."
TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
BABBLE = b"abcdefghijklmnopqrstuvwxyz ,."
# Qwen2.5-Coder's, after the bytes (a "fim" spec only): a model without them cannot serve /infill
FIM = {name: BYTE_VOCAB + i for i, name in enumerate(("pre", "suf", "mid", "rep", "sep", "pad"))}
FIM_TEXT = {FIM[name]: f"<|fim_{name}|>".encode() for name in ("pre", "suf", "mid", "pad")}
FIM_TEXT |= {FIM["rep"]: b"<|repo_name|>", FIM["sep"]: b"<|file_sep|>"}
FIM_REPLY = "[{prefix}|{suffix}]"  # what the target fills in: the prefix and suffix it saw, so a test sees the layout


def encode(text: str | bytes) -> list[int]:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return [byte + OFFSET for byte in data]


ASSISTANT = [IM_START, *encode("assistant\n")]
USER = [IM_START, *encode("user\n")]


def _last(context: Sequence[int], marker: list[int], end: int | None = None) -> int | None:
    """Index just past the last occurrence of marker in context[:end]."""
    end = len(context) if end is None else end
    first = marker[0]
    for i in range(end - len(marker), -1, -1):
        if context[i] == first and list(context[i : i + len(marker)]) == marker:
            return i + len(marker)
    return None


def _unit(context: Sequence[int], salt: int) -> float:
    """A reproducible number in [0, 1) from the context."""
    data = np.asarray(context[-16:], dtype=np.int64).tobytes() + len(context).to_bytes(8, "little") + bytes([salt])
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") / 2**64


class FakeEngine:
    """The Engine interface (see specchat/engine.py) on a byte vocabulary with rule-made logits."""

    vocab_type = 2  # BPE, like Qwen
    add_bos = False
    n_params = 1_000_000

    def __init__(self, path: Path, spec: dict, n_ctx: int, interrupt=None) -> None:
        self.path = Path(path)
        self.interrupt = interrupt
        self.spec = spec
        self.role = spec.get("role", "target")
        self.n_ctx = n_ctx
        self.fim = dict(FIM) if spec.get("fim") else {}
        self.n_vocab = int(spec.get("n_vocab", BYTE_VOCAB + len(self.fim)))
        self.bos = int(spec.get("bos", ENDOFTEXT))
        self.eos = int(spec.get("eos", IM_END))
        self.vocab_type = int(spec.get("vocab_type", FakeEngine.vocab_type))
        self.add_eos = bool(spec.get("add_eos", False))
        self.agree = float(spec.get("agree", 1.0))
        self.reply_format = spec.get("reply", REPLY)
        self.texts = {int(k): v.encode() for k, v in spec.get("token_text", {}).items()}
        self.kv: list[int] = []
        self.evals = 0
        self.closed = False
        self._replies: dict[tuple[int, ...], list[int]] = {}

    # -- the LanguageModel protocol ------------------------------------------------------------------

    @property
    def n_past(self) -> int:
        return len(self.kv)

    def eval(self, tokens: Sequence[int], n_logits: int) -> np.ndarray:
        tokens = [int(t) for t in tokens]
        if not 0 <= n_logits <= len(tokens):
            raise ValueError(f"n_logits={n_logits} for {len(tokens)} tokens")
        if len(self.kv) + len(tokens) > self.n_ctx:
            raise ContextFullError(
                f"{len(self.kv) + len(tokens)} tokens do not fit in the context of {self.n_ctx}", hint="raise --ctx"
            )
        if any(not 0 <= t < self.n_vocab for t in tokens):
            raise ValueError(f"token outside the vocabulary: {tokens}")
        if self.interrupt is not None and self.interrupt.requested:
            self.interrupt.check()  # a stop asked for between calls, as Engine._decode checks before each one
        self.evals += 1
        if self.spec.get("eval_sleep"):
            time.sleep(float(self.spec["eval_sleep"]))
        if self.evals == self.spec.get("interrupt_at"):
            raise KeyboardInterrupt
        if self.spec.get("fail_on") and self.spec["fail_on"].encode() in bytes(t - 5 for t in tokens if 5 <= t < 261):
            raise RuntimeError("the fake engine failed, as asked (fail_on)")
        if len(tokens) > n_logits and self.spec.get("prefill_sleep"):  # a prefill: all but its last row unscored
            self._slow_prefill((len(tokens) - n_logits) * float(self.spec["prefill_sleep"]))
        start = len(self.kv)
        self.kv.extend(tokens)
        rows = [self.logits(self.kv[: start + i + 1]) for i in range(len(tokens) - n_logits, len(tokens))]
        return np.array(rows, dtype=np.float32).reshape(n_logits, self.n_vocab)

    def _slow_prefill(self, seconds: float) -> None:
        """A prefill that takes long, stopped early as llama.cpp's abort callback stops one (engine.py)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.interrupt is not None and self.interrupt.requested:
                self.interrupt.check()  # clears the flag and raises KeyboardInterrupt, as Engine._decode
            time.sleep(0.01)

    def truncate(self, n: int) -> None:
        del self.kv[n:]

    def is_eog(self, token: int) -> bool:
        return token in (IM_END, ENDOFTEXT, self.fim.get("pad"))  # FIM_PAD ends a generation, as in llama.cpp

    def is_control(self, token: int) -> bool:
        return token < OFFSET or token >= BYTE_VOCAB

    # -- the rule behind the logits ------------------------------------------------------------------

    def reply_after(self, context: Sequence[int], header: int) -> list[int]:
        """The target's reply to the last user message before the assistant header, then <|im_end|>."""
        key = tuple(context[:header])
        if key not in self._replies:
            start = _last(context, USER, header)
            prompt = b""
            if start is not None:
                end = next((i for i in range(start, header) if context[i] == IM_END), header)
                prompt = bytes(t - OFFSET for t in context[start:end] if t >= OFFSET)
            history = bytes(t - OFFSET for t in context[:header] if t >= OFFSET).decode("utf-8", errors="replace")
            text = self.reply_format.format(prompt=prompt.decode("utf-8", errors="replace"), history=history)
            self._replies[key] = [*encode(text), IM_END]
        return self._replies[key]

    def fim_reply(self, context: Sequence[int]) -> tuple[list[int], int] | None:
        """After the last FIM_MID: FIM_REPLY of the prefix (prompt included) and suffix it closes, then the end."""
        mid = _last(context, [self.fim["mid"]]) if self.fim else None
        pre, suf = (_last(context, [self.fim[name]], mid) for name in ("pre", "suf")) if mid else (None, None)
        if mid is None or pre is None or suf is None:
            return None
        prefix, suffix = (self.detokenize(context[a : b - 1]) for a, b in ((pre, suf), (suf, mid)))
        return [*encode(FIM_REPLY.format(prefix=prefix, suffix=suffix)), ENDOFTEXT], mid

    def target_next(self, context: Sequence[int]) -> int:
        if (filled := self.fim_reply(context)) is not None:
            reply, mid = filled
            written = list(context[mid:])
            if len(written) < len(reply) and reply[: len(written)] == written:
                return reply[len(written)]
        header = _last(context, ASSISTANT)
        if header is not None:
            reply, written = self.reply_after(context, header), list(context[header:])
            if len(written) < len(reply) and reply[: len(written)] == written:
                return reply[len(written)]
        return BABBLE[int(_unit(context, 1) * len(BABBLE))] + OFFSET

    def logits(self, context: Sequence[int]) -> np.ndarray:
        token = self.target_next(context)
        if self.role == "draft" and _unit(context, 2) >= self.agree:
            token = OFFSET + (token - OFFSET + 1) % 256 if token >= OFFSET else OFFSET + ord("?")
        row = np.full(self.n_vocab, -5.0, dtype=np.float32)
        row[token] = 5.0
        row[OFFSET + (token + 7) % 256] = 2.0  # a runner-up, so that sampling has a choice
        return row

    # -- text ------------------------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        out = [self.bos] if add_special and self.add_bos else []
        while data:
            special = next((t for t, s in SPECIALS.items() if parse_special and data.startswith(s)), None)
            if special is not None:
                out.append(special)
                data = data[len(SPECIALS[special]) :]
            else:
                out.append(data[0] + OFFSET)
                data = data[1:]
        return out

    def piece(self, token: int, *, special: bool = False) -> bytes:
        if token in FIM_TEXT and self.fim:
            return FIM_TEXT[token] if special else b""
        if token < OFFSET:
            return SPECIALS[token] if special else b""
        return bytes([token - OFFSET]) if token < BYTE_VOCAB else b""

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def token_text(self, token: int) -> bytes:
        if token in self.texts:
            return self.texts[token]
        if token in FIM_TEXT and self.fim:
            return FIM_TEXT[token]
        if token < OFFSET:
            return SPECIALS[token]
        return bytes([token - OFFSET]) if token < BYTE_VOCAB else f"<extra_{token}>".encode()

    # -- metadata ----------------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        return {"general.name": self.name, "general.architecture": "fake"}.get(key)

    def chat_template(self) -> str | None:
        if self.spec.get("announce_template"):  # so that a test knows when rendering starts
            print("fake: rendering the chat template", file=sys.stderr, flush=True)
        return self.spec.get("template", TEMPLATE)

    @property
    def name(self) -> str:
        return self.spec.get("name", self.path.name)

    def close(self) -> None:
        self.closed = True


class FakeBackend:
    name = "fake"

    def claims(self, path: Path) -> bool:
        return str(path).endswith(".fake.gguf")

    def load(self, path: Path, config, interrupt) -> FakeEngine:
        spec = json.loads(Path(path).read_text(encoding="utf-8"))
        if spec.get("load_sleep"):  # a test's keys typed while the models load
            print(f"fake: loading {Path(path).name}", file=sys.stderr, flush=True)
            time.sleep(float(spec["load_sleep"]))
        return FakeEngine(path, spec, config.n_ctx, interrupt)

    def memory_needed(self, path: Path, n_ctx: int) -> tuple[int, int] | None:
        memory = json.loads(Path(path).read_text(encoding="utf-8")).get("memory")
        return tuple(memory) if memory else None

    def trained_context(self, path: Path) -> int | None:
        return json.loads(Path(path).read_text(encoding="utf-8")).get("context_length")

    def vocabulary(self, path: Path) -> FakeEngine:
        return FakeEngine(path, json.loads(Path(path).read_text(encoding="utf-8")), 0)


def write_pair(folder: Path, *, agree: float = 0.8, **target_extra) -> tuple[Path, Path]:
    """A target and a draft file in folder; extra keys go into the target's spec."""
    folder.mkdir(parents=True, exist_ok=True)
    target, draft = folder / "target.fake.gguf", folder / "draft.fake.gguf"
    target.write_text(json.dumps({"role": "target", **target_extra}), encoding="utf-8")
    draft.write_text(json.dumps({"role": "draft", "agree": agree}), encoding="utf-8")
    return target, draft


backends.register(FakeBackend())
