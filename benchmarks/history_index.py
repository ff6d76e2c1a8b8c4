"""Size and speed of the suffix drafter's history index (specchat/historyindex.py) on synthetic histories.

    python benchmarks/history_index.py                       # 1M and 10M tokens
    python benchmarks/history_index.py --tokens 1000000 --json

A history is made by a repeatable generator: messages of Zipf-distributed token ids (a vocabulary of
152k, like Qwen's) of log-normal length, a third of which repeat a passage from a pool of earlier ones
with a few tokens changed (what users asking for the same kind of thing again look like). For each size:

- build: the whole history appended in chunks of 1M tokens (a first update from a long log);
- append: one reply of ~300 tokens after the build (what every later reply costs), median;
- open: mapping the committed index in a new HistoryIndex and checking its sample (historycheck.damage_in),
  page cache warm; with `--cold N`, also N opens in fresh processes with the page cache dropped before
  each (`/proc/sys/vm/drop_caches`: root only; without it, said and skipped), what a run's start pays
  after a reboot;
- lookup: the drafter's whole lookup (drafters.suffix.lookup over a 2,000-token conversation and the
  history, 64 tokens of continuation), for contexts that end in a repeated passage and for fresh ones;
- size: bytes on disk (the files are sparse: what is allocated, next to their apparent size).

Run it on a quiet machine: every number is wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from specchat.drafters.suffix import lookup
from specchat.historyindex import HistoryIndex
from specchat.tokenchains import SEP, GrowingChains

VOCAB = 152_000
CHUNK = 1_000_000
QUERIES = 500


def messages(total: int, pool: list[np.ndarray], seed: int = 0):
    """Messages (int64 arrays) of about `total` tokens in all; `pool` gathers the passages they repeat."""
    rng = np.random.default_rng(seed)
    made = 0
    while made < total:
        length = int(np.clip(rng.lognormal(5.5, 0.8), 8, 4000))
        text = np.minimum(rng.zipf(1.3, length), VOCAB - 1).astype(np.int64)
        if pool and rng.random() < 1 / 3:
            passage = pool[rng.integers(len(pool))].copy()
            passage[rng.integers(0, len(passage), max(1, len(passage) // 50))] = rng.integers(0, VOCAB)
            text = np.concatenate([text[: length // 4], passage, text[length // 4 :]])
        elif rng.random() < 0.2:
            pool.append(text[: rng.integers(8, len(text) + 1)])
        made += len(text) + 1
        yield text


def build(folder: Path, total: int) -> tuple[HistoryIndex, list[np.ndarray], float]:
    index = HistoryIndex(folder, "bench", capacity=total + CHUNK)
    with index.lock:
        index.create()
    pending: list[np.ndarray] = []
    pool: list[np.ndarray] = []
    size, seconds = 0, 0.0
    for text in messages(total, pool):
        pending += [text, np.array([SEP])]
        size += len(text) + 1
        if size >= CHUNK:
            seconds += timed(lambda chunk=np.concatenate(pending): index.append(chunk, 0))
            pending, size = [], 0
    if pending:
        seconds += timed(lambda chunk=np.concatenate(pending): index.append(chunk, 0))
    return index, pool, seconds


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def cold_opens(folder: Path, capacity: int, times: int) -> list[float] | None:
    """Seconds of `times` opens, each in a new process after the page cache was dropped (None: it
    cannot be dropped here). numpy is loaded before the clock starts: a run has loaded it long before."""
    child = (
        "import sys, time, numpy as np; from pathlib import Path; from specchat.historyindex import HistoryIndex\n"
        "np.random.default_rng().choice(9, 2, replace=False)\n"
        "index = HistoryIndex(Path(sys.argv[1]), 'bench', capacity=int(sys.argv[2]))\n"
        "start = time.perf_counter(); index.open(); print(time.perf_counter() - start)"
    )
    out = []
    for _ in range(times):
        if hasattr(os, "sync"):
            os.sync()
        try:
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
        except OSError:  # not Linux, or not root
            return None
        run = subprocess.run([sys.executable, "-c", child, str(folder), str(capacity)], capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"a cold open failed:\n{run.stderr}")
        out.append(float(run.stdout))
    return out


def measure(total: int, seed: int = 1, cold: int = 0) -> dict:
    with tempfile.TemporaryDirectory(dir=Path.cwd() if cold else None) as tmp:  # cold: on disk, not tmpfs
        folder = Path(tmp) / "bench"
        index, pool, build_s = build(folder, total)
        colds = cold_opens(folder, index.meta.capacity, cold) if cold else None
        rng = np.random.default_rng(seed)
        appends = [timed(lambda: index.append(rng.integers(0, VOCAB, 300), 0)) for _ in range(50)]
        opens = []
        for _ in range(5):
            reopened = HistoryIndex(folder, "bench", capacity=index.meta.capacity)
            opens.append(timed(reopened.open))
        conversation = GrowingChains()
        conversation.append(np.minimum(rng.zipf(1.3, 2000), VOCAB - 1))
        hits, misses = [], []
        for i in range(QUERIES):
            if i % 2 == 0:
                passage = pool[rng.integers(len(pool))]
                context = passage[: rng.integers(min(8, len(passage)), len(passage) + 1)]
                times = hits
            else:
                context = np.minimum(rng.zipf(1.3, 40), VOCAB - 1)
                times = misses
            times.append(timed(lambda c=context: lookup([conversation, reopened.chains], c.tolist(), 64)))
        files = [p for p in folder.iterdir() if p.suffix in (".tokens", ".prev", ".head")]
        return {
            "tokens": index.meta.total,
            "disk_bytes": sum(p.stat().st_blocks * 512 for p in files),
            "apparent_bytes": sum(p.stat().st_size for p in files),
            "build_s": build_s,
            "append_reply_s_median": statistics.median(appends),
            "open_s_median": statistics.median(opens),
            "open_s_max": max(opens),
            "cold_open_s": colds,
            "lookup_hit_ms_median": 1000 * statistics.median(hits),
            "lookup_hit_ms_p99": 1000 * percentile(hits, 99),
            "lookup_miss_ms_median": 1000 * statistics.median(misses),
            "lookup_miss_ms_p99": 1000 * percentile(misses, 99),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="1000000,10000000", help="comma-separated history sizes")
    parser.add_argument("--json", action="store_true", help="one JSON object per size instead of a table")
    parser.add_argument("--cold", type=int, default=0, metavar="N", help="N opens with the page cache dropped (root)")
    args = parser.parse_args()
    for total in (int(t) for t in args.tokens.split(",")):
        row = measure(total, cold=args.cold)
        if args.json:
            print(json.dumps(row))
            continue
        print(
            f"{row['tokens']:>11,} tokens  disk {row['disk_bytes'] / 1e6:7.1f} MB "
            f"(apparent {row['apparent_bytes'] / 1e6:.1f})  build {row['build_s']:6.2f} s  "
            f"append/reply {1000 * row['append_reply_s_median']:5.2f} ms  open {1000 * row['open_s_median']:5.2f} ms  "
            f"lookup hit {row['lookup_hit_ms_median']:.3f}/{row['lookup_hit_ms_p99']:.3f} ms  "
            f"miss {row['lookup_miss_ms_median']:.3f}/{row['lookup_miss_ms_p99']:.3f} ms (median/p99)"
        )
        if args.cold:
            colds = row["cold_open_s"]
            said = " ".join(f"{1000 * s:.0f}" for s in colds) + " ms" if colds else "skipped (needs Linux and root)"
            print("  cold open: " + said)


if __name__ == "__main__":
    main()
