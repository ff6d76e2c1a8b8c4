"""Editor completions through `specchat serve`'s /infill: auto (the default mode) vs --mode target, side by side.

    python benchmarks/infill_session.py                        # every file, 3 repetitions
    python benchmarks/infill_session.py --files shapes.rs --limit 2 -n 32 --reps 1   # a quick look
    python benchmarks/infill_session.py --json infill.json --ctx 8192 --threads 2

What it does: replays what llama.vim (ggml-org's Vim plugin) sends while a developer edits the files in
benchmarks/infill_files/, against a `specchat serve --port 0` that this script starts, once with --mode auto
and once with --mode target, the same requests in the same order to each.

- A session per file. positions.json names the cursor positions in it (a function body after its first line,
  a method like its neighbour, a test after the others, a repeated pattern, a docstring): `at`, a text that
  occurs once in the file, ends where the cursor is; the rest of its line and the `lines` lines after it are
  the middle the developer has not written yet, removed from the buffer (and kept in --json as `expected`).
- Each request is split as llama.vim's s:fim_ctx_local splits the buffer: `input_prefix` the n_prefix (256)
  lines before the cursor line, `prompt` that line up to the cursor, `input_suffix` the line from the cursor
  (here empty) and the n_suffix (64) lines after it; `n_indent` the cursor line's leading whitespace (0, with
  an empty `prompt`, where the line is only whitespace). `input_extra` is llama.vim's ring buffer: a chunk of
  ring_chunk_size (64) lines from each other file (the first 64: llama.vim picks them at random, up to 33
  lines at a time, as the cursor moves; fixed here, so that both modes read the same). Before a file's first
  completion the ring is sent with `"n_predict": 0`, as llama.vim's ring update does, to read it into the cache.
- The body is llama.vim's (n_predict 128, n_indent, its samplers, top_p 0.9, cache_prompt), but greedy
  (temperature 0, top_k 1), so auto's content must equal target's ("same content" in the table), and with
  `t_max_predict_ms` 0 (none) where llama.vim sends 250 or 1000: a time cut makes the faster mode write more
  tokens, so the speed ratio would not compare like with like. `response_fields` is left out, so that the
  reply carries its `timings` and `speculative` objects whole.
- Two fresh servers per repetition, one per mode, both loaded at once (each its own empty SPECCHAT_DATA_DIR,
  so auto drafts from this session's logged completions and no earlier run's); every request goes to both, one
  after the other, which first alternating, so that the VM's speed drifting (20% within minutes on a 2-core VM)
  falls on both alike (a block of one mode's 24 requests, then the other's, measured the drift as much as the
  modes); a warm-up request (a short, unrelated FIM) before the first file, not measured.

Reported per file and overall: completions, tokens predicted, decode tok/s (the median of the replies'
timings.predicted_per_second, and all tokens over all decode time), accepted/drafted (timings.draft_n_accepted
/ draft_n), the median of the paired ratios auto/target (same request, same repetition), same content N/M.
A started server is always stopped (return, error, Ctrl-C, SIGTERM; PR_SET_PDEATHSIG if this is killed).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from specchat.engineconfig import default_threads

sys.path.insert(0, str(Path(__file__).parent))
from llama_server import Server, _on_sigterm, _stop_all

console = Console(stderr=True)
FILES = Path(__file__).parent / "infill_files"
MODES = ("auto", "target")
N_PREFIX, N_SUFFIX, RING_CHUNK = 256, 64, 64  # llama.vim's defaults
SOURCES = (".py", ".ts", ".rs", ".go")
WARM_UP = {"input_prefix": "def add(a, b):\n", "input_suffix": "\n", "prompt": "    ", "n_predict": 8}


# -- requests, as llama.vim builds them ------------------------------------------------------------------------


def llama_vim_context(lines: list[str], y: int, x: int, n_prefix: int = N_PREFIX, n_suffix: int = N_SUFFIX) -> dict:
    """llama.vim's s:fim_ctx_local for a buffer `lines` and a cursor at line y (0-based), column x."""
    line = lines[y]
    before, after = lines[max(0, y - n_prefix) : y], lines[y + 1 : y + 1 + n_suffix]
    if line.strip(" \t") == "":  # a line of whitespace: llama.vim starts from the beginning of the line
        indent, prompt, rest = 0, "", ""
    else:
        indent, prompt, rest = len(line) - len(line.lstrip(" \t")), line[:x], line[x:]
    return {
        "prefix": "\n".join(before) + "\n",
        "prompt": prompt,
        "suffix": rest + "\n" + "\n".join(after) + "\n",
        "indent": indent,
    }


def cut(text: str, at: str, lines: int) -> tuple[list[str], int, int, str]:
    """The buffer before the developer wrote the middle: the cursor right after `at` (which occurs once), the
    rest of its line and the `lines` lines after it removed. Returns (buffer lines, y, x, the middle)."""
    if text.count(at) != 1:
        raise SystemExit(f"positions.json: {at!r} occurs {text.count(at)} times, not once")
    rows = text.removesuffix("\n").split("\n")  # as Vim's getline() has them: no empty line after the last
    y = text[: text.index(at)].count("\n")
    x = text.index(at) - (text.rfind("\n", 0, text.index(at)) + 1) + len(at)
    middle = "\n".join([rows[y][x:], *rows[y + 1 : y + 1 + lines]])
    return [*rows[:y], rows[y][:x], *rows[y + 1 + lines :]], y, x, middle


def ring(files: dict[str, str], current: str, count: int = 3) -> list[dict]:
    """llama.vim's input_extra: a chunk of RING_CHUNK lines from each of up to `count` other files."""
    others = [name for name in files if name != current][:count]
    chunks = ["\n".join(files[name].split("\n")[:RING_CHUNK]) + "\n" for name in others]
    return [{"text": text, "time": [0, 0], "filename": name} for name, text in zip(others, chunks, strict=True)]


def infill_body(context: dict, extra: list[dict], n_predict: int, t_max_predict_ms: int) -> dict:
    """llama.vim's completion request, greedy."""
    return {
        "input_prefix": context["prefix"],
        "input_suffix": context["suffix"],
        "input_extra": extra,
        "prompt": context["prompt"],
        "n_predict": n_predict,
        "stop": [],
        "n_indent": context["indent"],
        "temperature": 0.0,
        "top_k": 1,
        "top_p": 0.90,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": t_max_predict_ms,
    }


def ring_body(extra: list[dict]) -> dict:
    """llama.vim's ring update: reads the other files into the cache, generates nothing."""
    body = {"input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "", "n_predict": 0}
    return {**body, "temperature": 0.0, "samplers": [], "cache_prompt": True, "t_max_predict_ms": 1}


@dataclass
class Completion:
    file: str
    index: int
    kind: str
    body: dict
    expected: str


def sessions(names: list[str], limit: int | None, n_predict: int, t_max_predict_ms: int) -> dict[str, list]:
    """Per file: its ring request, then its completions."""
    files = {path.name: path.read_text(encoding="utf-8") for path in sorted(FILES.iterdir()) if path.suffix in SOURCES}
    positions = json.loads((FILES / "positions.json").read_text(encoding="utf-8"))
    unknown = [name for name in names if name not in positions]
    if unknown:
        raise SystemExit(f"--files: no positions for {', '.join(unknown)} (have: {', '.join(positions)})")
    out = {}
    for name in names or list(positions):
        extra = ring(files, name)
        completions = []
        for index, spot in enumerate(positions[name][:limit]):
            buffer, y, x, middle = cut(files[name], spot["at"], spot["lines"])
            body = infill_body(llama_vim_context(buffer, y, x), extra, n_predict, t_max_predict_ms)
            completions.append(Completion(name, index, spot["kind"], body, middle))
        out[name] = [ring_body(extra), completions]
    return out


# -- the server ------------------------------------------------------------------------------------------------


class SpecchatServer(Server):
    """`specchat serve --port 0` with its own empty data folder; stopped as llama_server.py stops llama-server."""

    LISTENING = re.compile(rb"serving .* on http://127\.0\.0\.1:(\d+)/v1")
    NAME = "specchat serve"

    def __init__(self, mode: str, args) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=f"infill-{mode}-"))
        extra = ["--ctx", str(args.ctx), "--threads", str(args.threads)] + (["--pair", args.pair] if args.pair else [])
        command = ["-m", "specchat", "serve", "--port", "0", "--mode", mode, *extra]
        super().__init__(Path(sys.executable), self.folder, command, self.folder / "serve.log")

    def command(self) -> list[str]:
        return [str(self.binary), *self.args]

    def start(self, timeout: float = 600.0) -> SpecchatServer:
        self.env = {**os.environ, "SPECCHAT_DATA_DIR": str(self.folder / "data")}
        super().start(timeout)
        return self

    def _check_ours(self) -> None:
        pass  # its own folder and a port it picked: no other server can answer there

    def infill(self, body: dict) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/infill",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=1800) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"/infill answered {exc.code}: {exc.read()[:500]!r}") from None

    def close(self) -> None:
        super().close()
        if not self.keep_log:
            shutil.rmtree(self.folder, ignore_errors=True)
        else:
            console.print(f"server log kept: {self.log}")


def run_session(servers: dict[str, SpecchatServer], plan: dict[str, list], rep: int, samples: list[dict]) -> None:
    """Every request to both servers, one after the other, the first alternating: a VM's speed moves by 20% within
    minutes, and a block of one mode's requests then another's measured that drift as much as the modes."""
    order = list(servers)
    for server in servers.values():
        server.infill(WARM_UP)
    turn = 0
    for name, (ring_request, completions) in plan.items():
        for server in servers.values():
            server.infill(ring_request)
        for completion in completions:
            turn += 1
            for mode in order if (turn + rep) % 2 == 0 else order[::-1]:
                _measure(servers[mode], completion, name, rep, mode, samples)


def _measure(server: SpecchatServer, completion: Completion, name: str, rep: int, mode: str, samples: list) -> None:
    reply = server.infill(completion.body)
    timings = reply["timings"]
    sample = {
        "rep": rep,
        "mode": mode,
        "file": name,
        "position": completion.index,
        "kind": completion.kind,
        "n": reply["tokens_predicted"],
        "tok_s": timings["predicted_per_second"],
        "predicted_ms": timings["predicted_ms"],
        "prompt_n": timings["prompt_n"],
        "prompt_ms": timings["prompt_ms"],
        "drafted": timings.get("draft_n", 0),
        "accepted": timings.get("draft_n_accepted", 0),
        "stop_type": reply["stop_type"],
        "content": reply["content"],
        "expected": completion.expected,
        "speculative": reply.get("speculative"),
    }
    samples.append(sample)
    console.print(
        f"rep {rep + 1} {mode:6} {name:14} #{completion.index} {completion.kind:9} {sample['tok_s']:6.1f} tok/s"
        f"  n {sample['n']:3} ({sample['stop_type']})  accept {sample['accepted']:3}/{sample['drafted']:<3}",
        highlight=False,
        soft_wrap=True,
    )


# -- the report ------------------------------------------------------------------------------------------------


def report(samples: list[dict], args, interrupted: bool) -> None:
    def key(sample: dict) -> tuple:
        return sample["rep"], sample["file"], sample["position"]

    auto = {key(s): s for s in samples if s["mode"] == "auto"}
    target = {key(s): s for s in samples if s["mode"] == "target"}
    paired = [k for k in auto if k in target]
    title = (
        f"/infill, llama.vim's requests, greedy, -n {args.max_tokens}, t_max_predict_ms {args.t_max_predict_ms}, "
        f"--ctx {args.ctx}, --threads {args.threads}" + (" (INTERRUPTED)" if interrupted else "")
    )
    print(f"\n### {title}\n")
    print("| file | mode | completions | tokens | tok/s (median) | tok/s (all tokens) | accepted / drafted "
          "| auto / target (median of pairs) | same content |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    files = sorted({s["file"] for s in samples})
    for name in [*files, None] if len(files) > 1 else files:
        keys = [k for k in paired if name is None or k[1] == name]
        ratios = [auto[k]["tok_s"] / target[k]["tok_s"] for k in keys if target[k]["tok_s"] > 0 and auto[k]["n"]]
        same = sum(auto[k]["content"] == target[k]["content"] for k in keys)
        for mode, rows in (("auto", auto), ("target", target)):
            chosen = [s for k, s in rows.items() if name is None or k[1] == name]
            if not chosen:
                continue
            tokens = sum(s["n"] for s in chosen)
            decode_ms = sum(s["predicted_ms"] for s in chosen)
            drafted = sum(s["drafted"] for s in chosen)
            cells = [
                name or "all",
                mode,
                str(len(chosen)),
                str(tokens),
                f"{statistics.median(s['tok_s'] for s in chosen):.1f}",
                f"{tokens / decode_ms * 1000:.1f}" if decode_ms else "-",
                f"{sum(s['accepted'] for s in chosen)}/{drafted}" if drafted else "-",
                f"{statistics.median(ratios):.2f}x ({len(ratios)})" if mode == "auto" and ratios else "",
                f"{same}/{len(keys)}" if mode == "auto" and keys else "",
            ]
            print("| " + " | ".join(cells) + " |")
    if args.json:
        meta = {"argv": sys.argv, "interrupted": interrupted}
        args.json.write_text(json.dumps({"meta": meta, "samples": samples}, indent=1), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", nargs="+", default=[], help="file names in benchmarks/infill_files (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N positions of each file")
    parser.add_argument("-r", "--reps", type=int, default=3, help="repetitions, fresh servers for each")
    parser.add_argument("-n", "--max-tokens", type=int, default=128, help="n_predict (llama.vim: 128)")
    parser.add_argument(
        "--t-max-predict-ms",
        type=int,
        default=0,
        help="llama.vim sends 250 or 1000; 0 (none, the default) keeps the ratio like with like",
    )
    parser.add_argument("--ctx", type=int, default=4096, help="serve --ctx (the ring chunks need room)")
    parser.add_argument(
        "--threads",
        type=int,
        default=default_threads(),
        help="serve --threads, the same for both (default: usable cores; serve's 0 takes fewer under load)",
    )
    parser.add_argument("--pair", default=None, help="serve --pair (default: the default pair, a FIM-trained coder)")
    parser.add_argument("--json", type=Path, default=None, help="also write all samples (with their texts) here")
    args = parser.parse_args()
    plan = sessions(args.files, args.limit, args.max_tokens, args.t_max_predict_ms)
    signal.signal(signal.SIGTERM, _on_sigterm)
    atexit.register(_stop_all)
    samples: list[dict] = []
    interrupted = False
    try:
        for rep in range(args.reps):
            console.print(f"rep {rep + 1}: starting specchat serve --mode {' and '.join(MODES)}", highlight=False)
            with contextlib.ExitStack() as stack:  # both loaded at once: each waits while the other answers
                servers = {mode: stack.enter_context(SpecchatServer(mode, args).start()) for mode in MODES}
                run_session(servers, plan, rep, samples)
    except KeyboardInterrupt:
        interrupted = True
        console.print("interrupted: the server is stopped; the table shows what was measured")
    finally:
        _stop_all()
    report(samples, args, interrupted)
    if interrupted:
        sys.exit(130)


if __name__ == "__main__":
    main()
