"""The bounded GGUF header check: a corpus of broken files made here, each a clear error, none a crash."""

from __future__ import annotations

import contextlib
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from specchat import engine, gguf, weightlayout
from specchat.cli import app
from specchat.engineconfig import EngineConfig
from specchat.errors import ModelFileError


def s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def tiny_gguf(
    *, version=3, magic=b"GGUF", n_dims=2, offset2=64, alignment=32, extra_kv=b"", n_kv=None, kind=0
) -> bytes:
    """A small but complete GGUF: 3 metadata keys, two tensors of 4x4 (F32, or ggml type `kind`) with their data."""
    kv = [
        s(b"general.name") + struct.pack("<I", 8) + s(b"tiny"),
        s(b"general.alignment") + struct.pack("<I", 4) + struct.pack("<I", alignment),
        s(b"tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<IQ", 8, 3) + s(b"a") + s(b"b") + s(b"c"),
    ]
    if extra_kv:
        kv.append(extra_kv)
    tensors = b""
    for name, offset in ((b"w1", 0), (b"w2", offset2)):
        tensors += (
            s(name) + struct.pack("<I", n_dims) + struct.pack("<Q", 4) * n_dims + struct.pack("<IQ", kind, offset)
        )
    head = magic + struct.pack("<IQQ", version, 2, len(kv) if n_kv is None else n_kv) + b"".join(kv) + tensors
    padding = (-len(head)) % 32
    return head + b"\0" * padding + b"\1" * 128  # 2 tensors x 16 floats x 4 bytes


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))


def write(tmp_path, data: bytes, name="m.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_valid_tiny_file_passes(tmp_path):
    gguf.check(write(tmp_path, tiny_gguf()))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"magic": b"GGML"}, "bad magic"),
        ({"version": 1}, "unsupported GGUF version 1"),
        ({"version": 4}, "unsupported GGUF version 4"),
        ({"n_kv": 1 << 40}, "implausible counts"),
        ({"n_dims": 5}, "5 dimensions"),
        ({"offset2": 1 << 30}, "lies outside the file"),
        ({"alignment": 24}, "not a power of two"),
        ({"extra_kv": s(b"x") + struct.pack("<I", 99)}, "unknown value type 99"),
        ({"extra_kv": s(b"x") + struct.pack("<I", 8) + struct.pack("<Q", 1 << 40)}, "runs past the end"),
        ({"extra_kv": s(b"x") + struct.pack("<I", 9) + struct.pack("<IQ", 4, 1 << 40)}, "claims"),
    ],
)
def test_broken_files_give_clear_errors(tmp_path, kwargs, needle):
    with pytest.raises(ModelFileError, match=needle) as err:
        gguf.check(write(tmp_path, tiny_gguf(**kwargs)))
    assert "m.gguf is not a valid GGUF file" in err.value.message and err.value.hint


def test_a_string_of_an_array_that_runs_past_the_end_is_caught(tmp_path):
    strings = s(b"x") + struct.pack("<I", 9) + struct.pack("<IQ", 8, 2) + s(b"a") + struct.pack("<Q", 1 << 40)
    with pytest.raises(ModelFileError, match=r"a string of 1099511627776 bytes .* runs past the end"):
        gguf.check(write(tmp_path, tiny_gguf(extra_kv=strings)))


def test_metadata_is_read_once_per_version_of_a_file(tmp_path):
    path = write(tmp_path, tiny_gguf())
    mine = gguf.metadata(path)
    assert mine["general.name"] == "tiny"
    mine["general.name"] = "changed"  # the caller's copy, not the remembered one
    assert gguf.metadata(path)["general.name"] == "tiny"
    path.write_bytes(tiny_gguf(extra_kv=s(b"general.description") + struct.pack("<I", 8) + s(b"new")))
    assert gguf.metadata(path)["general.description"] == "new"


@pytest.mark.parametrize("cut", [0, 3, 10, 23, 40, 80, 150, 250, -1])
def test_every_truncation_is_caught(tmp_path, cut):
    data = tiny_gguf()
    with pytest.raises(ModelFileError):
        gguf.check(write(tmp_path, data[: cut if cut >= 0 else len(data) - 1]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1, max_size=6))
def test_mutated_headers_never_crash(tmp_path, flips):
    """Random byte changes: the check either accepts the file or raises ModelFileError, nothing else."""
    data = bytearray(tiny_gguf())
    for position, value in flips:
        data[position % len(data)] = value
    path = write(tmp_path, bytes(data), name="mutant.gguf")
    with contextlib.suppress(ModelFileError):
        gguf.check(path)


@pytest.mark.real
def test_truncated_real_model(default_pair_paths, tmp_path):
    """The first 8 MB of the real draft model (a download cut short): refused before llama.cpp sees it."""
    _, draft = default_pair_paths
    with draft.open("rb") as source:
        head = source.read(8 << 20)
    path = write(tmp_path, head, name="cut.gguf")
    with pytest.raises(ModelFileError, match="lies outside the file"):
        gguf.check(path)
    gguf.check(draft)  # and the complete file passes


def test_cli_refuses_a_broken_target(tmp_path):
    path = write(tmp_path, tiny_gguf(magic=b"XXXX"), name="broken.gguf")
    result = CliRunner().invoke(app, ["run", "--target", str(path), "--no-spec", "hi"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "broken.gguf is not a valid GGUF file: bad magic" in result.stderr


def test_cli_refuses_an_empty_target(tmp_path):
    """The context size is chosen from the metadata before the header check: an empty file (a download that
    never started) reached mmap there, which refuses empty files, and ended as an internal error."""
    path = write(tmp_path, b"", name="empty.gguf")
    with pytest.raises(ModelFileError, match="only 0 bytes"):
        gguf.metadata(path)
    result = CliRunner().invoke(app, ["run", "--target", str(path), "--no-spec", "hi"])
    assert result.exit_code == 1 and "internal error" not in result.stderr
    assert "empty.gguf is not a valid GGUF file: only 0 bytes" in result.stderr


@pytest.mark.real
def test_memory_estimate_refuses_with_numbers(default_pair_paths, monkeypatch):
    """A pair that cannot fit is refused before loading, with the numbers and a hint."""
    from specchat import memorycheck, runtime
    from specchat.errors import EngineError

    target, draft = default_pair_paths
    weights, kv = gguf.memory_needed(target, 4096)
    assert weights == target.stat().st_size
    assert kv == 4096 * 28 * 2 * (128 + 128) * 2  # Qwen2.5 1.5B: 28 layers, 2 KV heads of 128, f16
    monkeypatch.setattr(memorycheck, "available_memory", lambda: 1_000_000_000)
    options = runtime.Options(target_path=target, draft_path=draft, mode="spec", n_ctx=4096)
    with pytest.raises(EngineError) as err:
        runtime.open_pipeline(options, lambda _message: None)
    assert "not enough memory" in err.value.message and "1.0 GB are available" in err.value.message
    assert "--ctx" in err.value.hint


def test_a_model_file_that_cannot_be_opened_is_named_not_an_internal_error(tmp_path, monkeypatch):
    """A pair's file in the models directory that this user may not read (another user's pull, mode 600):
    run, bench, tune, export and `models --verify` ended with "internal error: PermissionError"."""

    path = write(tmp_path, tiny_gguf(), name="private.gguf")
    opened = Path.open

    def refuse(self, *args, **kwargs):
        if self.name == "private.gguf":
            raise PermissionError(13, "Permission denied", str(self))
        return opened(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    for read in (gguf.check, gguf.metadata):
        with pytest.raises(ModelFileError, match=r"cannot read .*private\.gguf: Permission denied") as err:
            read(path)
        assert "permissions" in err.value.hint


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        (b"general.type", b"adapter", "is a LoRA adapter"),
        (b"general.type", b"imatrix", "is an importance matrix"),
        (b"general.architecture", b"clip", "is a multimodal projector"),
    ],
)
def test_a_gguf_that_is_not_a_language_model_is_named_for_what_it_is(tmp_path, key, value, needle):
    """Files that sit beside a model in its Hub repo (mmproj-*.gguf, a LoRA, an imatrix) passed the header check;
    llama.cpp then said "unknown model architecture: 'clip'" with the hint to upgrade llama-cpp-python."""
    path = write(tmp_path, tiny_gguf(extra_kv=s(key) + struct.pack("<I", 8) + s(value)), name="side.gguf")
    with pytest.raises(ModelFileError, match=f"side.gguf {needle}") as err:
        gguf.check(path)
    assert "language model" in err.value.hint


def split_part(tmp_path, no: int, count: int = 2, name: str = "big") -> Path:
    """Part `no` (0-based) of a model split by llama.cpp's gguf-split: each part has its own tensors."""
    keys = (
        s(b"split.no") + struct.pack("<IH", 2, no),
        s(b"split.count") + struct.pack("<IH", 2, count),
        s(b"split.tensors.count") + struct.pack("<Ii", 5, 2 * count),
    )
    data = tiny_gguf(extra_kv=b"".join(keys), n_kv=6)
    return write(tmp_path, data, name=f"{name}-{no + 1:05d}-of-{count:05d}.gguf")


def test_every_part_of_a_split_model_is_checked_before_llama_cpp_reads_it(tmp_path):
    """llama.cpp loads the other parts of a split model itself: they reached its parser unchecked, and a part
    that was missing or cut short was 'could not load' with the hint to check the first file."""
    first = split_part(tmp_path, 0)
    with pytest.raises(
        ModelFileError, match=r"big-00002-of-00002\.gguf, part 2 of 2 of big-00001-of-00002\.gguf, is missing"
    ):
        gguf.check(first)
    second = split_part(tmp_path, 1)
    gguf.check(first)
    assert gguf.memory_needed(first, 0)[0] == first.stat().st_size + second.stat().st_size
    with pytest.raises(ModelFileError, match=r"big-00002-of-00002\.gguf is part 2 of 2 of a split model") as err:
        gguf.check(second)
    assert "big-00001-of-00002.gguf" in err.value.hint
    second.write_bytes(second.read_bytes()[:-64])  # cut short
    with pytest.raises(
        ModelFileError, match=r"big-00002-of-00002\.gguf is not a valid GGUF file: tensor 'w2' lies outside"
    ):
        gguf.check(first)


@pytest.mark.parametrize(
    "split_no",
    [s(b"split.no") + struct.pack("<I", 8) + s(b"one"), s(b"split.no") + struct.pack("<IH", 2, 7)],
    ids=["a string", "beyond the count"],
)
def test_a_split_model_whose_part_number_is_garbled_is_named(tmp_path, split_no):
    """split.no was not checked as split.count is: a string, or a part beyond the count, reached `number + 1`
    and a :05d format, an internal error."""
    keys = (
        split_no,
        s(b"split.count") + struct.pack("<IH", 2, 2),
        s(b"split.tensors.count") + struct.pack("<Ii", 5, 4),
    )
    path = write(tmp_path, tiny_gguf(extra_kv=b"".join(keys), n_kv=6), name="big-00001-of-00002.gguf")
    with pytest.raises(ModelFileError, match=r"big-00001-of-00002\.gguf is not a valid GGUF file: split\.no is"):
        gguf.check(path)


@pytest.mark.parametrize(
    ("arch", "extra", "needle"),
    [
        (b"bert", s(b"bert.attention.causal") + struct.pack("<I?", 7, False), "is an embedding model (bert)"),
        (b"nomic-bert", s(b"nomic-bert.attention.causal") + struct.pack("<I?", 7, False), "is an embedding model"),
        (b"t5", b"", "is an encoder-decoder model (t5)"),
        (b"t5encoder", b"", "is an encoder model (t5encoder)"),
    ],
)
def test_a_model_that_cannot_generate_text_is_refused_before_llama_cpp_runs_it(tmp_path, arch, extra, needle):
    """An embedding model (nomic-embed-text, bge: non-causal BERTs) loaded and 'replied' with nothing, its
    logits read from a context that has none; one whose vocabulary lacks [CLS] aborted the process in llama.cpp's
    WPM tokenizer (exit 134). T5 needs an encoder pass that specchat never makes."""
    kv = s(b"general.architecture") + struct.pack("<I", 8) + s(arch) + extra
    path = write(tmp_path, tiny_gguf(extra_kv=kv, n_kv=4 + bool(extra)), name="enc.gguf")
    with pytest.raises(ModelFileError, match=rf"enc\.gguf {re.escape(needle)}") as err:
        gguf.check(path)
    assert "generate" in err.value.message and "chat model" in err.value.hint


def test_a_causal_model_that_says_so_is_not_refused(tmp_path):
    kv = s(b"general.architecture") + struct.pack("<I", 8) + s(b"qwen2")
    kv += s(b"qwen2.attention.causal") + struct.pack("<I?", 7, True)
    gguf.check(write(tmp_path, tiny_gguf(extra_kv=kv, n_kv=5)))


def test_a_file_checked_by_an_older_specchat_is_checked_again_by_this_ones_rules(tmp_path):
    """The cache remembered 'checked' per file: a file passed by an earlier version (before embedding models,
    mmproj files or split parts were looked for) skipped every newer rule."""
    import json

    kv = s(b"general.architecture") + struct.pack("<I", 8) + s(b"clip")
    path = write(tmp_path, tiny_gguf(extra_kv=kv), name="mmproj.gguf")
    stat = path.stat()
    cache = tmp_path / "cache" / "gguf-checked.json"
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}": True}))  # the old key
    with pytest.raises(ModelFileError, match="multimodal projector"):
        gguf.check(path)


def test_the_hint_for_a_bad_file_fits_a_file_of_ones_own(tmp_path):
    """`--target my.gguf` that is no GGUF was told to `specchat pull` it, which fetches a pair's files only."""
    for data in (b"GGU", b"\x80\x02" + bytes(64)):  # too short; not GGUF (a pickled PyTorch checkpoint)
        path = write(tmp_path, data, name="mine.gguf")
        with pytest.raises(ModelFileError) as err:
            gguf.check(path)
        assert "a pair's model: `specchat pull`" in err.value.hint and "GGUF model" in err.value.hint


@pytest.mark.parametrize(
    ("data", "what", "hint"),
    [
        (b"\n<!DOCTYPE html>\n<html><title>Log in</title>", "an HTML page", "/resolve/"),
        (b'{"error":"Entry not found"}', "a server's error message ('Entry not found')", "download it again"),
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n", "a Git LFS pointer", "git lfs pull"),
        (struct.pack("<Q", 40) + b'{"w": {"dtype": "F16", "shape": [4]}} ', "a safetensors file", "convert_hf_to_gguf"),
        (b"PK\x03\x04" + bytes(64), "a ZIP archive", "unpack it"),
        (b"\x1f\x8b\x08" + bytes(64), "gzip-compressed", "decompress it first"),
        (b"tjgg\x01\x00\x00\x00" + bytes(64), "a GGJT file, llama.cpp's format before GGUF", "-GGUF"),
        (b"GGUF\x00\x00\x00\x03" + bytes(64), "big-endian GGUF", "download it again"),
    ],
)
def test_a_file_that_is_something_else_under_a_gguf_name_is_named_for_what_it_is(tmp_path, data, what, hint):
    """A web page or a server's error saved by a failed download, a clone without its LFS files, the original
    weights: each was only 'bad magic (the file does not start with 'GGUF')', with a hint to download it again."""
    with pytest.raises(ModelFileError) as err:
        gguf.check(write(tmp_path, data, name="model.gguf"))
    assert err.value.message.startswith("model.gguf is not ") and what in err.value.message
    assert hint in err.value.hint


def test_a_tensor_type_newer_than_this_llama_cpp_is_named_before_it_loads(tmp_path):
    """A model quantized with a ggml type this llama.cpp does not know passed the check, and llama.cpp said
    only "failed to load model"."""
    import llama_cpp.llama_cpp as lib

    count = lib.GGML_TYPE_COUNT
    for kind in (count, 99):
        with pytest.raises(ModelFileError) as err:
            gguf.check(write(tmp_path, tiny_gguf(kind=kind), name=f"t{kind}.gguf"))
        needle = f"t{kind}.gguf: tensor 'w1' has ggml type {kind}, unknown to this llama.cpp (it knows 0-{count - 1})"
        assert err.value.message == needle and "pip install -U llama-cpp-python" in err.value.hint
    path = write(tmp_path, tiny_gguf(kind=count), name="new.gguf")
    result = CliRunner().invoke(app, ["run", "--target", str(path), "--no-spec", "hi"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.count("\n") == 1 and f"type {count}, unknown to this llama.cpp" in result.stderr


def test_every_tensor_type_this_llama_cpp_reads_passes_and_a_removed_one_is_named(tmp_path):
    """The types are asked of llama.cpp's own ggml: llama-cpp-python's enum leaves out some it reads (BF16)."""
    count, readable, removed = engine.ggml_types()
    assert 31 in removed  # Q4_0_4_4, removed in favour of repacking Q4_0 at load
    assert 30 in readable and 12 in readable  # BF16, Q4_K
    for kind in range(count):
        data = tiny_gguf(kind=kind, offset2=512) + bytes(1024)  # room for a block of any type
        path = write(tmp_path, data, name=f"t{kind}.gguf")
        if kind in readable:
            gguf.check(path)
        else:
            with pytest.raises(ModelFileError, match=f"tensor 'w1' has ggml type {kind} .*no longer reads"):
                gguf.check(path)


def test_a_file_checked_under_another_llama_cpp_is_checked_again(tmp_path, monkeypatch):
    """The cache of checked files did not say under which llama.cpp: after an upgrade that stopped reading a
    tensor type, a file of that type remembered as checked went on to llama.cpp's bare 'failed to load'."""
    path = write(tmp_path, tiny_gguf(kind=2, offset2=512) + bytes(1024), name="q4_0.gguf")
    gguf.check(path)  # remembered as checked under this llama.cpp
    count, readable, removed = engine.ggml_types()
    newer = (count, {k: v for k, v in readable.items() if k != 2}, {**removed, 2: "q4_0"})
    monkeypatch.setattr(engine, "ggml_types", lambda: newer)
    with pytest.raises(ModelFileError, match=r"ggml type 2 \(q4_0\), which this llama.cpp no longer reads"):
        gguf.check(path)


@pytest.mark.parametrize(
    ("features", "env", "allowed"),
    [
        (b"CPU : AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 | ", None, False),
        (b"CPU : AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 | ", "1", True),
        (b"CPU : AVX2 = 1 | AVX512 = 1 | REPACK = 1 | ", None, True),
    ],
)
def test_extra_buffer_types_are_kept_out_where_llama_cpp_has_amx(monkeypatch, features, env, allowed):
    """llama.cpp's AMX matrix product crashed every real run on a Sapphire Rapids class Xeon (SIGSEGV in
    ggml_backend_amx_mul_mat at the first decode of the default pair); its extra buffer types only turn off
    together. SPECCHAT_AMX=1 gives them back."""
    monkeypatch.setattr(engine.lib, "llama_print_system_info", lambda: features)
    if env is None:
        monkeypatch.delenv("SPECCHAT_AMX", raising=False)
    else:
        monkeypatch.setenv("SPECCHAT_AMX", env)
    engine.extra_buffers_allowed.cache_clear()
    try:
        assert engine.extra_buffers_allowed() is allowed
    finally:
        engine.extra_buffers_allowed.cache_clear()


def test_the_repack_is_named_only_for_the_matrix_weights_it_takes():
    """Q4_K/Q4_0/IQ4_NL matrix weights whose rows come in eights; never token_embd (read by row), a Q6_K
    tensor, a norm or a 3-D expert tensor, which the forced buffer type could not compute."""
    tensors = [
        ("token_embd.weight", [1536, 151936], 12),
        ("blk.0.attn_q.weight", [1536, 1536], 12),
        ("blk.0.attn_v.weight", [1536, 256], 14),  # Q6_K
        ("blk.1.attn_v.weight", [1536, 256], 12),
        ("blk.0.ffn_down.weight", [8960, 1536], 2),
        ("blk.0.attn_norm.weight", [1536], 0),
        ("blk.2.ffn_up.weight", [1536, 8964], 12),  # rows not in eights
        ("blk.3.ffn_gate_exps.weight", [1536, 8960, 8], 12),
        ("blk.12.attn_q.weight", [1536, 1536], 20),
    ]
    patterns = weightlayout.repack_patterns(tensors)
    taken = {name for name, _, _ in tensors if any(re.search(pattern, name) for pattern in patterns)}
    assert taken == {"blk.0.attn_q.weight", "blk.12.attn_q.weight", "blk.1.attn_v.weight", "blk.0.ffn_down.weight"}
    assert len(patterns) == 3  # one per kind of weight


@pytest.mark.real
def test_where_amx_is_kept_out_the_repack_stays_and_reads_as_the_plain_layout(default_pair_paths, monkeypatch):
    """Forced as where llama.cpp has AMX: the extra types off, the repack named per tensor; the model loads
    and predicts as in the plain layout (the repack's speed without the AMX crash: weightlayout.py)."""
    if b"AVX2 = 1" not in engine.lib.llama_print_system_info():
        pytest.skip("llama.cpp repacks these types on x86 with AVX2 only")
    monkeypatch.setattr(engine, "extra_buffers_allowed", lambda: False)
    seen, load = [], engine.lib.llama_model_load_from_file

    def loading(path, params):
        seen.append((params.use_extra_bufts, bool(params.tensor_buft_overrides)))
        return load(path, params)

    monkeypatch.setattr(engine.lib, "llama_model_load_from_file", loading)
    tokens = None
    predicted = []
    for plain in (False, True):
        if plain:
            monkeypatch.setattr(weightlayout, "repack_buffer_type", lambda _lib: None)
        model = engine.Engine(default_pair_paths[0], EngineConfig(n_ctx=256, n_batch=64))
        try:
            tokens = tokens or model.tokenize("def fibonacci(n):\n    if n < 2:\n        return n\n    return")
            predicted.append(np.argmax(model.eval(tokens, 8), axis=-1).tolist())
        finally:
            model.close()
    assert seen == [(False, True), (False, False)]
    assert predicted[0] == predicted[1]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (tiny_gguf(offset2=96) + bytes(64), "tensor 'w2' has offset 96, expected 64"),
        (
            tiny_gguf(extra_kv=s(b"general.name") + struct.pack("<I", 8) + s(b"again")),
            "duplicate key 'general.name' for KV pair 3",
        ),
    ],
)
def test_a_file_llama_cpps_gguf_reader_refuses_is_named_with_its_reason(tmp_path, data, reason):
    """Rules of GGUF that gguf.check leaves to llama.cpp (tensors in order, each key once) ended as 'llama.cpp
    could not load X: llama_model_loader: failed to load model from X', the reason only under --debug."""
    path = write(tmp_path, data, name="odd.gguf")
    gguf.check(path)  # well-formed as far as this check goes: llama.cpp's own reader refuses it
    with pytest.raises(engine.EngineError) as err:
        engine.Engine(path, EngineConfig(n_ctx=256))
    assert err.value.message == f"llama.cpp could not load {path}: {reason}"


def test_a_gguf_that_names_no_architecture_is_not_sent_to_a_newer_llama_cpp(tmp_path):
    """llama.cpp says "unknown model architecture: ''" of a file without general.architecture, and the hint was
    that a newer llama-cpp-python may run it: none can."""
    path = write(tmp_path, tiny_gguf(), name="bare.gguf")
    with pytest.raises(engine.EngineError) as err:
        engine.Engine(path, EngineConfig(n_ctx=256))
    assert err.value.message.endswith("bare.gguf: it names no model architecture (general.architecture)")
    assert "newer" not in err.value.hint and "language model's GGUF" in err.value.hint
