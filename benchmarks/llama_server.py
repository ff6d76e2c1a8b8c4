"""specchat's draft-model speculation vs llama.cpp's own `llama-server`, same pair, k, threads, greedy.

    python benchmarks/llama_server.py                    # default pair, k = 4, code + chat prompts
    python benchmarks/llama_server.py --k 4 -n 128 -r 3 --suite quick

What it does:
1. Builds `llama-server` from the llama.cpp sources vendored in the llama-cpp-python sdist of the
   installed version (the same llama.cpp that specchat runs), in the user cache directory, once
   (about 10 minutes on 2 cores; later runs reuse the binary). Nothing is written into the repository.
2. Starts it with the pair (`-m TARGET -md DRAFT --spec-type draft-simple --spec-draft-n-max K`) and the
   same threads and context.
   Its other speculative settings stay at llama.cpp's defaults (p_min = 0 in this version: fixed k,
   like specchat's `--mode spec`).
3. For every prompt and repetition, in rotated order: the same chat-templated token ids to
   llama-server's /completion (temperature 0, no prompt cache) and to specchat's loop in this process
   (`--mode spec -k K`). Decode speed on both sides is generated tokens / time after the prompt
   (llama-server's `predicted_per_second`; specchat's `Stats.tokens_per_s`).
4. Prints a table and the median of the paired ratios specchat / llama-server.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.request
from importlib import metadata
from pathlib import Path

from rich.console import Console
from rich.table import Table

from specchat.benchsuite import load_suite
from specchat.chat import Message
from specchat.engine import default_threads
from specchat.paths import cache_dir
from specchat.runtime import LoadOptions, ModelChoice, Pipeline, resolve
from specchat.sampling import SamplingParams
from specchat.view import download_progress

console = Console(stderr=True)
PIP_DOWNLOAD = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d"]


def build_server() -> Path:
    """llama-server from the sdist of the installed llama-cpp-python, built once in the cache."""
    version = metadata.version("llama-cpp-python")
    root = cache_dir() / f"llama.cpp-{version}"
    binary = root / "build" / "bin" / "llama-server"
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
    console.print(f"building llama-server in {root} (about 10 minutes on 2 cores)")
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TESTS=OFF"]
    flags += ["-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_OPENSSL=OFF", "-DGGML_NATIVE=ON"]
    subprocess.run(["cmake", "-S", str(source), "-B", str(root / "build"), *flags], check=True, capture_output=True)
    jobs = str(os.cpu_count() or 2)
    subprocess.run(["cmake", "--build", str(root / "build"), "--target", "llama-server", "-j", jobs], check=True)
    return binary


class Server:
    def __init__(self, binary: Path, target: Path, draft: Path, *, k: int, threads: int, ctx: int):
        with socket.socket() as probe:  # a free port, so no stale server answers in its place
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        command = [str(binary), "-m", str(target), "-md", str(draft), "--spec-type", "draft-simple"]
        command += ["--spec-draft-n-max", str(k)]
        command += ["-t", str(threads), "-tb", str(threads), "-td", str(threads), "-tbd", str(threads)]
        command += ["-c", str(ctx), "-np", "1", "--no-webui", "--port", str(self.port), "-ngl", "0", "-ngld", "0"]
        self.log = binary.parent.parent / "llama-server.log"
        with self.log.open("wb") as log:  # a file, not a pipe: llama.cpp logs a lot and must never block
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise SystemExit(f"llama-server exited: {tail}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("llama-server did not become ready in 120 s")

    def complete(self, tokens: list[int], n: int) -> dict:
        body = {
            "prompt": tokens,
            "n_predict": n,
            "temperature": 0.0,
            "top_k": 1,
            "cache_prompt": False,
            "stream": False,
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=600) as reply:
            answer = json.loads(reply.read())
        timings = answer["timings"]
        drafted = timings.get("draft_n", 0)
        return {
            "tok_s": timings["predicted_per_second"],
            "n": timings["predicted_n"],
            "accept": timings.get("draft_n_accepted", 0) / drafted if drafted else 0.0,
        }

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default=None, help="pair from `specchat models` (default: the default pair)")
    parser.add_argument("--k", type=int, default=4, help="draft length on both sides (default 4)")
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    parser.add_argument("-r", "--reps", type=int, default=3)
    parser.add_argument("--suite", default="quick", help="built-in bench suite (default: quick)")
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--json", type=Path, default=None, help="also write all samples here")
    args = parser.parse_args()

    binary = build_server()
    with download_progress(console) as start:
        resolved = resolve(ModelChoice(pair=args.pair), console.print, start)
    pipeline = Pipeline(resolved, LoadOptions(n_ctx=args.ctx, threads=args.threads))
    prompts = load_suite(args.suite)
    encoded = {p.id: pipeline.prompt([Message("user", p.text)]) for p in prompts}
    greedy = SamplingParams(temperature=0.0)
    servers: dict[str, Server] = {}
    samples: list[dict] = []
    try:
        servers["llama-server"] = Server(
            binary, resolved.target, resolved.draft, k=args.k, threads=args.threads, ctx=args.ctx
        )
        names = ["specchat", *servers]
        for tokens in list(encoded.values())[:1]:  # warm-up, not measured
            pipeline.generate(tokens, greedy, k=args.k, max_tokens=16, mode="spec")
            for server in servers.values():
                server.complete(tokens, 16)
        for rep in range(args.reps):
            for index, prompt in enumerate(prompts):
                shift = (rep + index) % len(names)
                for name in names[shift:] + names[:shift]:
                    tokens = encoded[prompt.id]
                    if name == "specchat":
                        pipeline.reset()
                        _, _, stats = pipeline.generate(
                            tokens, greedy, k=args.k, max_tokens=args.max_tokens, mode="spec"
                        )
                        sample = {"tok_s": stats.tokens_per_s, "n": stats.generated, "accept": stats.acceptance_rate}
                    else:
                        sample = servers[name].complete(tokens, args.max_tokens)
                    samples.append(
                        {"rep": rep, "prompt": prompt.id, "category": prompt.category, "who": name, **sample}
                    )
                    console.print(
                        f"rep {rep + 1} {prompt.category:10} #{prompt.id:<3} {name:10} "
                        f"{sample['tok_s']:6.1f} tok/s  accept {sample['accept']:.0%}",
                        highlight=False,
                    )
    finally:
        for server in servers.values():
            server.close()
        pipeline.close()
    report(samples, args)


def report(samples: list[dict], args) -> None:
    def of(who: str, category: str | None = None) -> list[dict]:
        return [s for s in samples if s["who"] == who and (category is None or s["category"] == category)]

    def paired(who: str, category: str | None) -> list[float]:
        ours = {(s["rep"], s["prompt"]): s["tok_s"] for s in of("specchat", category)}
        return [ours[(s["rep"], s["prompt"])] / s["tok_s"] for s in of(who, category) if s["tok_s"] > 0]

    table = Table(title=f"draft model, k = {args.k}, greedy, {args.threads} threads, -n {args.max_tokens}")
    for column in ("category", "who", "samples", "tok/s (median)", "accept", "specchat / this"):
        table.add_column(column, justify="left" if column in ("category", "who") else "right")
    categories = sorted({s["category"] for s in samples})
    for category in [*categories, None]:
        for who in ("specchat", "llama-server"):
            rows = of(who, category)
            if not rows:
                continue
            ratio = "-" if who == "specchat" else f"{statistics.median(paired(who, category)):.2f}x"
            table.add_row(
                category or "all",
                who,
                str(len(rows)),
                f"{statistics.median(r['tok_s'] for r in rows):.1f}",
                f"{statistics.median(r['accept'] for r in rows):.0%}",
                ratio,
            )
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(samples, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
