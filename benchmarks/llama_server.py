"""specchat vs llama.cpp's own `llama-server`: same GGUF, threads, token ids, greedy, side by side.

    python benchmarks/llama_server.py                          # auto vs ngram-mod and ngram-map-k, code-edit suite
    python benchmarks/llama_server.py --prompts edits.jsonl -n 128 -r 3
    python benchmarks/llama_server.py --peer draft --specchat-mode spec --k 4 --suite quick
    python benchmarks/llama_server.py --peer none --specchat-mode target    # the engines alone, no drafting
    nice -n 19 python benchmarks/llama_server.py --build-only  # just build (and check) llama-server

What it does:
1. Builds `llama-server` from the llama.cpp sources vendored in the llama-cpp-python sdist of the
   installed version (the same llama.cpp that specchat runs), in the user cache directory, once
   (10+ minutes on 2 cores; later runs reuse the binary). Nothing is written into the repository.
   Where that llama.cpp has AMX, which specchat keeps out (its AMX matrix product crashes on Q4_K:
   specchat/weightlayout.py), llama-server is built without AMX (build-noamx/), so both sides run the
   same weight layout, llama.cpp's CPU repack, as each runs by default elsewhere.
2. Opens specchat as a user gets it (`runtime.open_pipeline(Options(mode=...))`, default mode auto,
   its saved calibration if there is one) and, per --peer, runs llama-server with the same target:
     ngram-mod    -m TARGET --spec-type ngram-mod      (draftless; llama.cpp's defaults: n_match 24,
                                                        n_min 48, n_max 64)
     ngram-map-k  -m TARGET --spec-type ngram-map-k    (draftless; size_n 12, size_m 48, min_hits 1)
     draft        -m TARGET -md DRAFT --spec-type draft-simple --spec-draft-n-max K
     none         -m TARGET                            (no speculation: with --specchat-mode target, the
                                                        two engines' plain decode speed, side by side)
   with the same threads (-t/-tb), context and one slot, on a free loopback port (the server picks it:
   --port 0). docs/ngram-mod-notes.md describes the draftless modes. --server-arg passes more flags.
3. For every prompt and repetition, in an order rotated from block to block: the same chat-templated
   token ids to llama-server's /completion (temperature 0, top_k 1, no prompt cache) and to specchat's
   loop in this process (after `pipeline.reset()`). Decode speed on both sides is the tokens after the
   first / the time after it: both take the first token off the prompt's prefill (specchat since
   2026-12-06), so that is (`predicted_n` - 1) / `predicted_ms` for llama-server (its own
   `predicted_per_second` counts the first token too) and `Stats.tokens_per_s` for specchat.
4. Prints a table per category with the median of the paired ratios specchat / peer (same prompt,
   same repetition), and specchat / the best draftless peer.

Peer state (--peer-state): ngram-mod keeps ONE hash pool per server, shared by every request and never
cleared between them (only when 25 % full or after 5 drafts in a row with < 25 % accepted); ngram-map-k
keeps a per-slot map across requests, which leaves it blind to most of a new, different prompt. With
`kept`, one server serves the whole run, so from the second repetition on ngram-mod has already pooled
its own greedy answer to the same prompt and drafts nearly all of it (measured: 102 -> 125 of 128 tokens
drafted on a code-edit prompt), while ngram-map-k loses its prompt: neither is what a user editing a new
file gets. `fresh` (default) starts a new server for every measured reply (not timed: only decode is),
so each reply starts with an empty pool, as specchat's drafters do after reset().

A started llama-server is always stopped: on return, on errors, on Ctrl-C (what was measured is still
reported) and on SIGTERM; and if this process is killed outright, the kernel sends the server SIGTERM
(Linux: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from rich.console import Console
from rich.table import Table

from specchat.benchresult import median_interval
from specchat.benchsuite import Prompt, load_prompts_file, load_suite, single_turn
from specchat.engine import extra_buffers_allowed
from specchat.engineconfig import default_threads
from specchat.paths import cache_dir

console = Console(stderr=True)
PIP_DOWNLOAD = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d"]
PEERS = ("ngram-mod", "ngram-map-k", "draft", "none")
DRAFTLESS = ("ngram-mod", "ngram-map-k")
SPECCHAT = "specchat"


# -- llama-server: build --------------------------------------------------------------------------------


def build_server() -> Path:
    """llama-server from the sdist of the installed llama-cpp-python, built once in the cache. Where that
    llama.cpp has AMX (specchat keeps its AMX layout out: specchat/weightlayout.py), llama-server is built
    without AMX, in a build folder of its own: it then lays the weights out as specchat does (llama.cpp's
    CPU repack), where the AMX build would crash on Q4_K or, with --no-repack, run the slower plain layout."""
    version = metadata.version("llama-cpp-python")
    root = cache_dir() / f"llama.cpp-{version}"
    keeps_amx_out = not extra_buffers_allowed()  # this llama.cpp has AMX, and specchat keeps it out
    build = root / ("build-noamx" if keeps_amx_out else "build")
    binary = build / "bin" / "llama-server"
    if binary.exists():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    source = root / "src"
    if not (source / "CMakeLists.txt").exists():
        console.print(f"fetching the llama-cpp-python {version} sdist (pip, from PyPI or its cache)")
        subprocess.run(
            [*PIP_DOWNLOAD, str(root), f"llama-cpp-python=={version}"],
            check=True,
        )
        archive = next(root.glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(archive) as tar:
            prefix = f"{archive.name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
            for member in members:
                member.name = member.name[len(prefix) :]
            tar.extractall(source, members=[m for m in members if m.name], filter="data")
    console.print(f"building llama-server in {build} (10+ minutes on 2 cores)")
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TESTS=OFF"]
    flags += ["-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_OPENSSL=OFF", "-DGGML_NATIVE=ON"]
    if keeps_amx_out:
        # An explicit -mno-* wins over -march=native in either order (GCC; checked with -dM -E): ggml builds AMX
        # code only under __AMX_INT8__, so this build has no AMX buffer type and repacks as specchat does.
        no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
        flags += [f"-DCMAKE_C_FLAGS={no_amx}", f"-DCMAKE_CXX_FLAGS={no_amx}"]
    configure = subprocess.run(["cmake", "-S", str(source), "-B", str(build), *flags], capture_output=True, text=True)
    if configure.returncode:
        raise SystemExit(f"cmake configure failed:\n{configure.stdout[-3000:]}\n{configure.stderr[-3000:]}")
    jobs = str(os.cpu_count() or 2)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs], check=True)
    return binary


def check_server(binary: Path, peers: list[str]) -> None:
    """The built server knows the --spec-type values the peers need (they change between versions)."""
    shown = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    help_text = shown.stdout + shown.stderr
    line = next((row for row in help_text.splitlines() if "--spec-type" in row), "")
    wanted = {"ngram-mod": "ngram-mod", "ngram-map-k": "ngram-map-k", "draft": "draft-simple"}
    missing = [wanted[p] for p in peers if p in wanted and wanted[p] not in line]
    if missing:
        raise SystemExit(f"{binary} --help does not list --spec-type {', '.join(missing)}: {line.strip()!r}")


# -- llama-server: one process ----------------------------------------------------------------------------

_LIVE: set[Server] = set()  # servers started and not yet stopped, for atexit and signal handlers


def _stop_all() -> None:
    for server in list(_LIVE):
        server.close()


def _die_with_parent() -> None:
    """In the child, before exec: the kernel sends SIGTERM if this Python process dies (even by SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: atexit and the handlers still stop it
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Server:
    """One llama-server on a loopback port it picked itself (--port 0: no race for a "free" port)."""

    LISTENING = re.compile(rb"listening on http://127\.0\.0\.1:(\d+)")
    NAME = "llama-server"

    def __init__(self, binary: Path, target: Path, args: list[str], log: Path) -> None:
        self.binary, self.target, self.args, self.log = binary, target, args, log
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.keep_log = False  # kept after a failure, for a look; deleted when the server stopped normally
        self.env: dict[str, str] | None = None  # the environment it runs in (None: ours)

    def command(self) -> list[str]:
        return [str(self.binary), "-m", str(self.target), *self.args, "--host", "127.0.0.1", "--port", "0"]

    def start(self, timeout: float = 300.0) -> Server:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as log:  # a file, not a pipe: llama.cpp logs a lot and must never block
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # a terminal's Ctrl-C reaches us, and we stop it in order
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        _LIVE.add(self)
        try:
            self._wait_ready(timeout)
        except BaseException as exc:
            self.keep_log = not isinstance(exc, KeyboardInterrupt)
            self.close()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log.read_bytes()[-3000:].decode(errors="replace")
                raise RuntimeError(f"{self.NAME} exited with {self.process.returncode} (log: {self.log}):\n{tail}")
            found = self.LISTENING.search(self.log.read_bytes())  # logged once the model is loaded
            if found:
                self.port = int(found.group(1))
                self._check_ours()
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.NAME} was not ready after {timeout:.0f} s (log: {self.log})")

    def _check_ours(self) -> None:
        props = self._get("/props")
        if Path(props.get("model_path", "")).resolve() != self.target.resolve():
            raise RuntimeError(f"port {self.port} answers for {props.get('model_path')!r}, not our server")

    def _get(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as reply:
            return json.loads(reply.read())

    def complete(self, tokens: list[int], n: int) -> dict:
        body = {
            "prompt": tokens,
            "n_predict": n,
            "temperature": 0.0,
            "top_k": 1,
            "cache_prompt": False,
            "return_tokens": True,
            "stream": False,
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=1800) as reply:
            answer = json.loads(reply.read())
        timings = answer["timings"]
        drafted = timings.get("draft_n", 0)
        accepted = timings.get("draft_n_accepted", 0)
        after_first, seconds = timings["predicted_n"] - 1, timings["predicted_ms"] / 1000  # from the first token on
        return {
            "tok_s": after_first / seconds if after_first > 0 and seconds > 0 else 0.0,
            "n": timings["predicted_n"],
            "drafted": drafted,
            "accepted": accepted,
            "accept": accepted / drafted if drafted else 0.0,
            "tokens": answer.get("tokens", []),
        }

    def close(self) -> None:
        process, self.process = self.process, None
        _LIVE.discard(self)
        if process is not None and process.poll() is None:
            process.terminate()  # llama-server shuts down on SIGTERM (after the decode in flight)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)
        if not self.keep_log:
            self.log.unlink(missing_ok=True)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Peer:
    """A llama-server configuration; `fresh`: a new process (empty pool) for every measured reply."""

    def __init__(self, name: str, binary: Path, target: Path, args: list[str], *, fresh: bool) -> None:
        self.name, self.fresh = name, fresh
        log = binary.parent.parent / "logs" / f"llama-server-{name}-{os.getpid()}.log"  # one per run and peer
        self.server = Server(binary, target, args, log)
        self.command = [str(binary), "-m", str(target), *args, "--host", "127.0.0.1", "--port", "0"]

    def complete(self, tokens: list[int], n: int, warm: list[int]) -> dict:
        if self.fresh or self.server.process is None:
            self.server.close()
            self.server.start()
            # One token after a few raw tokens: warms the process; shorter than any n-gram key (12, 24),
            # so it adds nothing to ngram-mod's pool or ngram-map-k's map.
            self.server.complete(warm, 1)
        return self.server.complete(tokens, n)

    def close(self) -> None:
        self.server.close()


def peer_args(name: str, args, draft: Path | None) -> list[str]:
    threads = ["-t", str(args.threads), "-tb", str(args.threads)]
    common = [*threads, "-c", str(args.ctx), "-np", "1", "--no-webui", "-ngl", "0"]
    if name == "ngram-mod":
        spec = ["--spec-type", "ngram-mod"]
    elif name == "ngram-map-k":
        spec = ["--spec-type", "ngram-map-k"]
    elif name == "none":
        spec = []
    else:
        if draft is None:
            raise SystemExit("--peer draft needs a draft model: give --draft FILE or a --pair with one")
        spec = ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(args.k or 4)]
        spec += ["-td", str(args.threads), "-tbd", str(args.threads), "-ngld", "0"]
    return [*common, *spec, *args.server_arg]


# -- specchat's side ---------------------------------------------------------------------------------------


class Specchat:
    """specchat as a user runs it, behind the four calls this comparison needs. The runtime API moves
    (it was just refactored): adapt it here and nowhere else."""

    def __init__(self, args) -> None:
        from specchat.downloadbar import download_progress
        from specchat.modes import MODES
        from specchat.runtime import Options, open_pipeline, resolve
        from specchat.sampling import SamplingParams
        from specchat.view import note

        self.options = Options(
            pair=args.pair,
            target_path=args.target,
            draft_path=args.draft,
            mode=args.specchat_mode,
            n_ctx=args.ctx,
            threads=args.threads,
            use_tuning=not args.fresh_calibration,
        )
        self.k = args.k if args.k and args.specchat_mode != "auto" else MODES[args.specchat_mode].default_k
        self.greedy = SamplingParams(temperature=0.0)
        with download_progress(console) as start:
            self.pipeline = open_pipeline(self.options, lambda message: note(console, message), start)
            self.target = self.pipeline.resolved.target
            self.draft = self.pipeline.resolved.draft
            if self.draft is None and "draft" in args.peer:  # e.g. --specchat-mode ngram: find the pair's draft
                self.draft = resolve(replace(self.options, mode="spec"), console.print, start).draft
        if self.pipeline.mode_note:
            note(console, self.pipeline.mode_note)

    def encode(self, text: str, *, template: bool = True) -> list[int]:
        from specchat.chat import Message

        return self.pipeline.prompt([Message("user", text)], use_template=template)

    def generate(self, tokens: list[int], n: int) -> dict:
        self.pipeline.reset()  # starts cold, like a fresh llama-server: no KV cache, nothing learned
        generation = self.pipeline.generate(tokens, self.greedy, mode=self.options.mode, k=self.k, max_tokens=n)
        stats = generation.stats
        if stats.stop_reason == "interrupted":
            raise KeyboardInterrupt
        return {
            "tok_s": stats.tokens_per_s,
            "n": stats.generated,
            "drafted": stats.drafted,
            "accepted": stats.accepted,
            "accept": stats.acceptance_rate,
            "tokens": list(generation.tokens),
            "rounds_by_source": dict(stats.rounds_by_source),
        }

    def close(self) -> None:
        self.pipeline.close()


# -- the comparison ----------------------------------------------------------------------------------------


def _on_sigterm(signum, _frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through every finally: servers are stopped


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--peer",
        action="append",
        choices=PEERS,
        default=None,
        help="llama-server configuration(s) to compare with; several allowed (default: ngram-mod and ngram-map-k)",
    )
    parser.add_argument("--specchat-mode", choices=("auto", "spec", "ngram", "target"), default="auto")
    parser.add_argument(
        "--k",
        type=int,
        default=None,
        help="draft length of specchat spec/ngram (auto: its own, <= 64) and of --peer draft",
    )
    parser.add_argument("--pair", default=None, help="pair from `specchat models` (default: the default pair)")
    parser.add_argument("--target", type=Path, default=None, help="a target GGUF instead of the pair's")
    parser.add_argument("--draft", type=Path, default=None, help="a draft GGUF instead of the pair's")
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    parser.add_argument("-r", "--reps", type=int, default=3)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--suite", default="code-edit", help="built-in bench suite (default: code-edit)")
    where.add_argument("--prompts", type=Path, default=None, help="Spec-Bench JSONL: {category, turns}")
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    parser.add_argument("--threads", type=int, default=default_threads(), help="both sides (default: usable cores)")
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument(
        "--peer-state",
        choices=("fresh", "kept"),
        default="fresh",
        help="fresh: a new llama-server per measured reply (empty n-gram pool); kept: one per peer for the run",
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help='extra llama-server flags, split on spaces (repeatable), e.g. --server-arg="--spec-ngram-mod-n-min 16"',
    )
    parser.add_argument("--fresh-calibration", action="store_true", help="specchat: ignore saved tuning")
    parser.add_argument("--json", type=Path, default=None, help="also write all samples here")
    parser.add_argument("--build-only", action="store_true", help="build and check llama-server, then exit")
    args = parser.parse_args()
    args.peer = list(dict.fromkeys(args.peer or list(DRAFTLESS)))
    args.server_arg = [part for arg in args.server_arg for part in arg.split()]

    binary = build_server()
    check_server(binary, args.peer)
    if args.build_only:
        print(binary)
        return

    prompts: list[Prompt] = load_prompts_file(args.prompts) if args.prompts else load_suite(args.suite)
    prompts = single_turn(prompts)  # one reply per prompt here: multi-turn records are `specchat bench`'s
    if not prompts:
        raise SystemExit("no single-turn prompts: this script measures one reply per prompt")
    prompts = prompts[: args.limit] if args.limit else prompts
    signal.signal(signal.SIGTERM, _on_sigterm)
    atexit.register(_stop_all)

    samples: list[dict] = []
    peers: dict[str, Peer] = {}
    interrupted = False
    side = Specchat(args)
    try:
        encoded = {p.id: side.encode(p.text) for p in prompts}
        warm = side.encode("Hello", template=False)[:4]
        for name in args.peer:
            peers[name] = Peer(
                name, binary, side.target, peer_args(name, args, side.draft), fresh=args.peer_state == "fresh"
            )
            console.print(f"{name}: {' '.join(peers[name].command)}", highlight=False, soft_wrap=True)
        console.print(
            f"specchat: --mode {args.specchat_mode} (k <= {side.k}), {args.threads} threads, target {side.target}",
            highlight=False,
        )
        # Warm-up, not measured: specchat on the first prompt; kept servers start here (a short raw
        # prompt, so that their pools do not see a measured prompt before it is measured).
        side.generate(encoded[prompts[0].id], min(16, args.max_tokens))
        if args.peer_state == "kept":
            for peer in peers.values():
                peer.complete(warm, 1, warm)
        names = [SPECCHAT, *peers]
        for rep in range(args.reps):
            for index, prompt in enumerate(prompts):
                shift = (rep + index) % len(names)
                block: dict[str, dict] = {}
                for name in names[shift:] + names[:shift]:
                    tokens = encoded[prompt.id]
                    if name == SPECCHAT:
                        sample = side.generate(tokens, args.max_tokens)
                    else:
                        sample = peers[name].complete(tokens, args.max_tokens, warm)
                    block[name] = sample
                    console.print(
                        f"rep {rep + 1} {prompt.category:10} #{prompt.id:<4} {name:12} {sample['tok_s']:6.1f} tok/s"
                        f"  n {sample['n']:4}  accept {sample['accepted']:4}/{sample['drafted']:<4}",
                        highlight=False,
                    )
                ours = block.get(SPECCHAT, {}).get("tokens")
                for name, sample in block.items():
                    theirs = sample.pop("tokens")
                    same = theirs == ours if ours is not None else None
                    where = {"rep": rep, "prompt": prompt.id, "category": prompt.category}
                    samples.append({**where, "who": name, "same": same, **sample})
    except KeyboardInterrupt:
        interrupted = True
        console.print("interrupted: stopping llama-server; the table shows what was measured")
    finally:
        for peer in peers.values():
            peer.close()
        _stop_all()
        side.close()
    report(samples, args, interrupted, {name: peer.command for name, peer in peers.items()}, binary)
    if interrupted:
        sys.exit(130)


def report(samples: list[dict], args, interrupted: bool, commands: dict[str, list[str]], binary: Path) -> None:
    if not samples:
        return
    blocks = {(s["rep"], s["prompt"]) for s in samples if s["who"] == SPECCHAT}
    complete = [s for s in samples if (s["rep"], s["prompt"]) in blocks]

    def of(who: str, category: str | None = None) -> list[dict]:
        return [s for s in complete if s["who"] == who and (category is None or s["category"] == category)]

    def paired(who: str, category: str | None) -> list[float]:
        ours = {(s["rep"], s["prompt"]): s["tok_s"] for s in of(SPECCHAT, category)}
        return [ours[(s["rep"], s["prompt"])] / s["tok_s"] for s in of(who, category) if s["tok_s"] > 0]

    who_all = [SPECCHAT, *[p for p in args.peer if of(p)]]
    label = {SPECCHAT: f"specchat {args.specchat_mode}", **{p: f"server {p}" for p in args.peer}}
    out = Console(width=max(Console().width, 120))  # piped output would wrap the table at 80 columns
    title = (
        f"specchat --mode {args.specchat_mode} vs llama-server, greedy, {args.threads} threads, -n {args.max_tokens}, "
        f"peer state {args.peer_state}" + (" (INTERRUPTED)" if interrupted else "")
    )
    table = Table(title=title)
    columns = ("category", "who", "samples", "tok/s (median)", "accepted / drafted", "same tokens", "specchat / this")
    for column in columns:
        table.add_column(column, justify="left" if column in ("category", "who") else "right")
    categories = sorted({s["category"] for s in complete})
    for category in [*categories, None] if len(categories) > 1 else categories:
        for who in who_all:
            rows = of(who, category)
            if not rows:
                continue
            ratios = paired(who, category)
            drafted = sum(r["drafted"] for r in rows)
            same = [r["same"] for r in rows if r["same"] is not None]
            table.add_row(
                category or "all",
                label[who],
                str(len(rows)),
                f"{statistics.median(r['tok_s'] for r in rows):.1f}",
                f"{sum(r['accepted'] for r in rows)}/{drafted}" if drafted else "-",
                "-" if who == SPECCHAT else f"{sum(same)}/{len(same)}",
                "-" if who == SPECCHAT or not ratios else f"{statistics.median(ratios):.2f}x",
            )
    out.print(table)
    draftless = [p for p in DRAFTLESS if of(p)]
    if draftless:
        best = max(draftless, key=lambda p: statistics.median(r["tok_s"] for r in of(p)))
        ratios = paired(best, None)
        interval = median_interval(ratios)
        spread = f", 95% CI {interval[0]:.2f}-{interval[1]:.2f}" if interval else ""
        out.print(
            f"specchat {args.specchat_mode} / best draftless llama-server ({best}, by median tok/s): "
            f"{statistics.median(ratios):.2f}x (median of {len(ratios)} paired ratios{spread})",
            highlight=False,
        )
    if args.json:
        meta = {
            "argv": sys.argv,
            "llama_cpp_python": metadata.version("llama-cpp-python"),
            "binary": str(binary),
            "commands": commands,
            "interrupted": interrupted,
        }
        args.json.write_text(json.dumps({"meta": meta, "samples": samples}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
