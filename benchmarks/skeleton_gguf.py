"""A weight-free copy of a GGUF file, for timing on a machine the weights cannot reach.

`make` keeps a GGUF's header (metadata, tokenizer, tensor table: a few MB) and its total size;
`inflate` writes that header back and zero-fills the rest as a sparse file. The result loads in
llama.cpp like the real model and costs the same time per batch on a GPU, whose kernels do not look at
the values; what it says is meaningless (every logit 0, so greedy picks token 0, and every drafter is
always right). Used to measure a cost regime (c, v(n)) on a lent GPU machine that cannot download the
models; the acceptance side comes from traces of the real models (benchmarks/record_traces.py).

    python benchmarks/skeleton_gguf.py make model.gguf model.skel
    python benchmarks/skeleton_gguf.py inflate model.skel model.gguf
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

MAGIC = b"SPECCHAT-SKELETON\n"
# GGUF value type -> size in bytes; 8 = string, 9 = array
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class Header:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> bytes:
        n = self.take("<Q")
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def value(self, kind: int):
        if kind == 8:
            return self.string()
        if kind == 9:
            inner, count = self.take("<I"), self.take("<Q")
            for _ in range(count):
                self.value(inner)
            return None
        fmt = {4: "<I", 5: "<i", 10: "<Q", 11: "<q"}.get(kind)
        if fmt:
            return self.take(fmt)
        self.pos += SIZES[kind]
        return None


def data_start(path: Path) -> int:
    """Where the tensor data begins: after the metadata and tensor table, aligned."""
    with path.open("rb") as f:
        data = f.read(64 << 20)  # tokenizers are large, but not this large
    header = Header(data)
    if data[:4] != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    header.pos = 8
    n_tensors, n_kv = header.take("<Q"), header.take("<Q")
    alignment = 32
    for _ in range(n_kv):
        key = header.string()
        value = header.value(header.take("<I"))
        if key == b"general.alignment":
            alignment = value
    for _ in range(n_tensors):
        header.string()
        n_dims = header.take("<I")
        header.pos += 8 * n_dims + 4 + 8  # dims, type, offset
    return -(-header.pos // alignment) * alignment


def make(source: Path, skeleton: Path) -> None:
    start = data_start(source)
    with source.open("rb") as f:
        head = f.read(start)
    skeleton.write_bytes(MAGIC + struct.pack("<QQ", source.stat().st_size, len(head)) + head)
    print(f"{skeleton}: {len(head):,} header bytes of {source.stat().st_size:,}")


def inflate(skeleton: Path, out: Path) -> None:
    data = skeleton.read_bytes()
    if not data.startswith(MAGIC):
        raise SystemExit(f"{skeleton}: not a skeleton made by this script")
    total, n = struct.unpack_from("<QQ", data, len(MAGIC))
    head = data[len(MAGIC) + 16 :]
    if len(head) != n:
        raise SystemExit(f"{skeleton}: truncated")
    with out.open("wb") as f:
        f.write(head)
        f.truncate(total)  # the weights: zeros, sparse on disk
    print(f"{out}: {total:,} bytes, weights zero")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("make", "inflate"))
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    (make if args.action == "make" else inflate)(args.source, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
