"""The only module that talks to llama.cpp (through llama-cpp-python's low-level ctypes API).

One `Engine` is one model with one context and one sequence. Logits are copied out only for the positions
that ask for them, never for the whole context (no `logits_all`), and the KV cache is rolled back with
`llama_memory_seq_rm`.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

import numpy as np

from . import weightlayout
from .cpuload import ThreadGovernor
from .engineconfig import EngineConfig, default_threads
from .errors import ContextFullError, EngineError
from .ggmltypes import BLOCKS
from .interrupt import Interrupt
from .llamalog import Log, keep, load_error

try:
    import llama_cpp.llama_cpp as lib
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise EngineError(
        f"llama-cpp-python is not usable: {exc}", hint="pip install 'llama-cpp-python>=0.3.36,<0.4'"
    ) from None

DEBUG_HINT = "`specchat --debug COMMAND ...` shows llama.cpp's log"


class _Backend:
    """llama.cpp's process-wide state, started by the first Engine (importing this module starts
    nothing): the backend, and a log callback that shows llama.cpp's log only when debugging."""

    started = False

    @staticmethod
    @lib.llama_log_callback
    def _log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        keep(level, text)

    @classmethod
    def start(cls) -> None:
        if not cls.started:
            lib.llama_log_set(cls._log, ctypes.c_void_p(0))
            lib.llama_backend_init()
            cls.started = True


def set_debug(enabled: bool) -> None:
    """Show llama.cpp's own log on stderr (the --debug setting)."""
    Log.debug = enabled


def gpu_offload_supported() -> bool:
    return bool(lib.llama_supports_gpu_offload())


@functools.cache
def extra_buffers_allowed() -> bool:
    """Whether llama.cpp may choose its own weight layouts, AMX included (weightlayout.py: not with AMX)."""
    return weightlayout.extra_buffers_allowed(lib)


@functools.cache
def ggml_types() -> tuple[int, dict[int, tuple[int, int]], dict[int, str]] | None:
    """This llama.cpp's tensor types, asked of its own ggml: (GGML_TYPE_COUNT, type -> (elements, bytes) per
    block for those it reads, type -> ggml's name for those it no longer reads); None where llama-cpp-python
    cannot be asked. A type it does not read ended as llama.cpp's bare "failed to load model"."""
    try:
        count = int(lib.GGML_TYPE_COUNT)
    except AttributeError:  # a llama-cpp-python without it
        return None
    try:  # ggml's functions, found through libllama, which links them
        blck, size, name = (lib._lib[f"ggml_{what}"] for what in ("blck_size", "type_size", "type_name"))
    except (AttributeError, OSError):  # only the count: the types below it are taken as read
        return count, {kind: BLOCKS.get(kind, (1, 0)) for kind in range(count)}, {}
    blck.restype, size.restype, name.restype = ctypes.c_int64, ctypes.c_size_t, ctypes.c_char_p
    for function in (blck, size, name):
        function.argtypes = [ctypes.c_int]
    readable = {kind: (int(blck(kind)), int(size(kind))) for kind in range(count)}
    removed = {kind: (name(kind) or b"").decode(errors="replace") for kind, (n, _) in readable.items() if n <= 0}
    return count, {kind: sizes for kind, sizes in readable.items() if kind not in removed}, removed


class Engine:
    """One GGUF model, one context, one sequence (seq_id 0)."""

    def __init__(self, path: Path, config: EngineConfig, interrupt: Interrupt | None = None) -> None:
        self.path = Path(path)
        self.config = config
        self.interrupt = interrupt or Interrupt()
        self._n_past = 0
        _Backend.start()
        from .gguf import check

        check(self.path)  # malformed files end here with a clear error, not inside llama.cpp's parser
        model_params = lib.llama_model_default_params()
        layers = config.gpu_layers if config.gpu_layers >= 0 else 999
        model_params.n_gpu_layers = layers if gpu_offload_supported() else 0
        cpu_only = model_params.n_gpu_layers == 0
        amx_crashes = not extra_buffers_allowed()  # weightlayout.py; what it returns lives while the model loads
        self._layout = weightlayout.keep_amx_out(lib, model_params, self.path, cpu_only) if amx_crashes else None
        # Loading a cold multi-GB file can take seconds inside C: the progress callback lets Ctrl-C abort it.
        self._on_progress = lib.llama_progress_callback(lambda _progress, _data: not self.interrupt.requested)
        model_params.progress_callback = self._on_progress
        Log.errors.clear()
        with self.interrupt.native():
            # fsencode: a file name that is not UTF-8 (a Latin-1 archive) is kept as its own bytes
            self.model = lib.llama_model_load_from_file(os.fsencode(self.path), model_params)
        if self.interrupt.requested:
            if self.model:
                with self.interrupt.native():
                    lib.llama_model_free(self.model)
            self.model = None
            self.interrupt.check()
        if not self.model:
            raise load_error(self.path)
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        threads = config.n_threads or default_threads()
        ctx_params = lib.llama_context_default_params()
        ctx_params.n_ctx = config.n_ctx
        ctx_params.n_batch = config.n_batch
        ctx_params.n_ubatch = config.n_batch
        ctx_params.n_seq_max = 1
        ctx_params.n_threads = threads
        ctx_params.n_threads_batch = threads
        ctx_params.no_perf = True
        with self.interrupt.native():  # allocates the KV cache and logs through a Python callback
            self.ctx = lib.llama_init_from_model(self.model, ctx_params)
        if not self.ctx or self.interrupt.requested:
            with self.interrupt.native():
                if self.ctx:
                    lib.llama_free(self.ctx)
                lib.llama_model_free(self.model)
            self.model = None
            self.interrupt.check()
            raise EngineError(
                f"llama.cpp could not create a context of {config.n_ctx} tokens for {self.path.name}",
                hint="try a smaller --ctx",
            )
        # ggml asks between graph nodes whether to stop: Ctrl-C's flag (kept referenced: ctypes would free it)
        self._on_abort = lib.ggml_abort_callback(lambda _data: self.interrupt.requested)
        lib.llama_set_abort_callback(self.ctx, self._on_abort, ctypes.c_void_p(0))
        # The default (all usable CPUs) gives way to other programs (cpuload.py); --threads N is kept to.
        self.threads = self.max_threads = self.fewest_threads = threads  # fewest: since the caller last reset it
        self._governor = ThreadGovernor(threads) if not config.n_threads else None
        self.n_ctx = int(lib.llama_n_ctx(self.ctx))
        # llama.cpp caps a batch at the context asked for (--ctx 64: 64 tokens) and rounds the context up
        # to 256: a longer batch aborts the process (GGML_ASSERT), so chunks follow its numbers, not ours.
        self.n_batch = min(config.n_batch, int(lib.llama_n_batch(self.ctx)), int(lib.llama_n_ubatch(self.ctx)))
        self.memory = lib.llama_get_memory(self.ctx)
        self._batch = lib.llama_batch_init(config.n_batch, 0, 1)
        self._control: dict[int, bool] = {}
        self._line_role: dict[int, str] = {}
        self._closed = False

    # -- the LanguageModel protocol ------------------------------------------------------------------

    @property
    def n_past(self) -> int:
        return self._n_past

    def eval(self, tokens: Sequence[int], n_logits: int) -> np.ndarray:
        """Append tokens to the cache; logits for the last n_logits tokens, as one float32 array."""
        if not tokens:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        if not 0 <= n_logits <= len(tokens):
            raise ValueError(f"n_logits={n_logits} for {len(tokens)} tokens")
        if self._n_past + len(tokens) > self.n_ctx:
            raise ContextFullError(
                f"{self._n_past + len(tokens)} tokens do not fit in the context of {self.n_ctx}",
                hint="raise --ctx or shorten the prompt",
            )
        head = len(tokens) - n_logits
        for start in range(0, head, self.n_batch):
            self._decode(tokens[start : min(start + self.n_batch, head)], 0)
        if n_logits == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        # A scored tail longer than llama.cpp's batch goes in chunks as well, each chunk's logits copied out in
        # turn (no drafter sends one now: a copy is at most 63 tokens, a batch of 64, and --ctx is at least 64).
        rows = []
        for start in range(head, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            self._decode(chunk, len(chunk))
            pointer = lib.llama_get_logits(self.ctx)
            rows.append(np.ctypeslib.as_array(pointer, shape=(len(chunk), self.n_vocab)).copy())
        return rows[0] if len(rows) == 1 else np.concatenate(rows)

    def use_threads(self, n: int) -> None:
        """The threads of llama.cpp's next calls (the governor's choice; see cpuload.py)."""
        self.threads = n
        self.fewest_threads = min(self.fewest_threads, n)
        lib.llama_set_n_threads(self.ctx, n, n)

    def truncate(self, n: int) -> None:
        # Always ask llama.cpp, even when n >= n_past: a Ctrl-C that lands between a finished decode and
        # the n_past update leaves cells beyond n_past, and this removes them (a no-op otherwise).
        self._n_past = min(self._n_past, n)  # first: a Ctrl-C as llama.cpp returns must not leave it too high
        if not lib.llama_memory_seq_rm(self.memory, 0, n, -1):
            raise EngineError(f"llama.cpp could not roll the KV cache back to {n} tokens", hint=DEBUG_HINT)

    def is_eog(self, token: int) -> bool:
        return bool(lib.llama_vocab_is_eog(self.vocab, token))

    def is_control(self, token: int) -> bool:
        """Chat-template markup such as <|im_start|> (end-of-generation tokens included)."""
        known = self._control.get(token)
        if known is None:  # asked for every token a copy offers: remembered, not a ctypes call each time
            # An id outside the vocabulary (a damaged history index offers them) ends a copy as markup does:
            # llama.cpp looks it up unchecked, and `--mode suffix` died of a segfault.
            foreign = not self.in_vocab(token)
            known = foreign or bool(lib.llama_vocab_is_control(self.vocab, token)) or self.is_eog(token)
            self._control[token] = known
        return known

    def in_vocab(self, token: int) -> bool:
        """llama.cpp's vocabulary calls abort the process (std::out_of_range) or crash for any other id."""
        return 0 <= token < self.n_vocab

    def line_role(self, token: int) -> str:
        """Whether the token's text holds a line break ("break"), only spaces or tabs ("space") or else
        "text": prompt lookup judges a copy by whether its match goes on past a line break (drafters/ngram.py)."""
        known = self._line_role.get(token)
        if known is None:  # asked for the tokens of every copy on offer: remembered
            text = self.piece(token)
            role = "break" if b"\n" in text else "space" if text and not text.strip(b" \t") else "text"
            known = self._line_role[token] = role
        return known

    def _decode(self, tokens: Sequence[int], n_logits: int) -> None:
        batch = self._batch
        n = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = self._n_past + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if i >= n - n_logits else 0
        batch.n_tokens = n
        self.interrupt.check()
        if self._governor is not None and self._governor.advise() != self.threads:
            self.use_threads(self._governor.threads)
        with self.interrupt.native():
            status = lib.llama_decode(self.ctx, batch)
        if status == 2 or self.interrupt.requested:
            # Aborted: drop whatever part of the batch reached the cache, so the state stays exact.
            lib.llama_memory_seq_rm(self.memory, 0, self._n_past, -1)
            self.interrupt.check()
            raise KeyboardInterrupt
        if status == 1:
            raise ContextFullError(f"no room in the KV cache for {n} more tokens", hint="raise --ctx")
        if status != 0:
            lib.llama_memory_seq_rm(self.memory, 0, self._n_past, -1)
            raise EngineError(f"llama_decode failed with status {status}", hint=DEBUG_HINT)
        self._n_past += n

    # -- text ------------------------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = False) -> list[int]:
        """parse_special=False keeps user text from turning into control tokens such as <|im_end|>."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buffer = (lib.llama_token * capacity)()
        n = lib.llama_tokenize(self.vocab, data, len(data), buffer, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buffer = (lib.llama_token * capacity)()
            n = lib.llama_tokenize(self.vocab, data, len(data), buffer, capacity, add_special, parse_special)
        if n < 0:
            raise EngineError("llama.cpp could not tokenize the text", hint=DEBUG_HINT)
        return list(buffer[:n])

    def piece(self, token: int, *, special: bool = False) -> bytes:
        if not self.in_vocab(token):  # no text (see in_vocab)
            return b""
        buffer = ctypes.create_string_buffer(64)
        n = lib.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        if n < 0:
            buffer = ctypes.create_string_buffer(-n)
            n = lib.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        return buffer.raw[: max(n, 0)]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def token_text(self, token: int) -> bytes:
        """The vocabulary entry itself (used by the pair check)."""
        return (lib.llama_vocab_get_text(self.vocab, token) or b"") if self.in_vocab(token) else b""

    # -- metadata --------------------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(256)
        n = lib.llama_model_meta_val_str(self.model, key.encode(), buffer, len(buffer))
        if n < 0:
            return None
        if n >= len(buffer):
            buffer = ctypes.create_string_buffer(n + 1)
            lib.llama_model_meta_val_str(self.model, key.encode(), buffer, len(buffer))
        return buffer.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        raw = lib.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    @property
    def vocab_type(self) -> int:
        return int(lib.llama_vocab_type(self.vocab))

    @property
    def bos(self) -> int:
        return int(lib.llama_vocab_bos(self.vocab))

    @property
    def eos(self) -> int:
        return int(lib.llama_vocab_eos(self.vocab))

    @property
    def add_bos(self) -> bool:
        return bool(lib.llama_vocab_get_add_bos(self.vocab))

    @property
    def add_eos(self) -> bool:
        return bool(lib.llama_vocab_get_add_eos(self.vocab))

    @property
    def fim(self) -> dict[str, int]:
        """The fill-in-the-middle tokens the vocabulary has (pre, suf, mid, rep, sep, pad), as llama.cpp
        reads them from the GGUF (LLAMA_TOKEN_NULL, -1, where it has none): /infill builds its prompt of them."""
        calls = {
            "pre": lib.llama_vocab_fim_pre, "suf": lib.llama_vocab_fim_suf, "mid": lib.llama_vocab_fim_mid,
            "rep": lib.llama_vocab_fim_rep, "sep": lib.llama_vocab_fim_sep, "pad": lib.llama_vocab_fim_pad,
        }  # fmt: skip
        found = {name: int(call(self.vocab)) for name, call in calls.items()}
        return {name: token for name, token in found.items() if token >= 0}

    @property
    def name(self) -> str:
        return self.meta("general.name") or self.path.name

    @property
    def n_params(self) -> int:
        return int(lib.llama_model_n_params(self.model))

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        with self.interrupt.native():  # llama.cpp logs while freeing, through a Python callback
            lib.llama_batch_free(self._batch)
            lib.llama_free(self.ctx)
            lib.llama_model_free(self.model)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        with suppress(Exception):
            self.close()


class Vocab:
    """A model's tokenizer alone (llama.cpp reads no weights), for tools that replay recorded token ids
    through drafters that need text (benchmarks/simulate.py), and for the pair check of a command that runs
    no model (export)."""

    def __init__(self, path: Path) -> None:
        _Backend.start()
        params = lib.llama_model_default_params()
        params.vocab_only = True
        self.model = lib.llama_model_load_from_file(os.fsencode(path), params)
        if not self.model:
            raise EngineError(f"llama.cpp could not read the vocabulary of {path}", hint=DEBUG_HINT)
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))

    # The same calls as the Engine's: they read only the vocabulary.
    tokenize = Engine.tokenize
    piece = Engine.piece
    in_vocab = Engine.in_vocab
    token_text = Engine.token_text
    vocab_type, bos, eos, add_bos, add_eos = Engine.vocab_type, Engine.bos, Engine.eos, Engine.add_bos, Engine.add_eos

    def close(self) -> None:
        if self.model:
            lib.llama_model_free(self.model)
            self.model = None
