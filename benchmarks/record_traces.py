"""Record greedy traces of the real default pair, for benchmarks/simulate.py.

    nice -n 19 python benchmarks/record_traces.py                 # built-in suite + sim_prompts.jsonl
    nice -n 19 python benchmarks/record_traces.py -n 128 --out benchmarks/traces
    nice -n 19 python benchmarks/record_traces.py --suite default --category revision \
        --prompts benchmarks/revision_prompts.jsonl -n 400 --out revision-traces   # second turns

Of a multi-turn record the last turn is recorded: the target alone answers the turns before it
(greedy, up to --earlier-tokens each), as `specchat bench` writes a record's history.

Per prompt, one JSON line (ints only) with:
  prompt    the chat-templated prompt token ids
  target    the target's greedy continuation, up to -n tokens; stop = "eog" (then `end` is the
            end-of-generation id it chose) or "max_tokens"
  guesses   for every position i = 0..len(target): the draft model's greedy guesses (up to 16)
            after prompt + target[:i], ending early at an end-of-generation guess or right after
            the first wrong one (what follows a wrong guess is never accepted)
  control   the ids among all of the above that are control tokens (end-of-generation included),
            so that replayed copies can stop before them; eog: those that end generation
  breaks    the ids among all of the above whose text holds a line break, and blanks: those whose
            text is only spaces or tabs (prompt lookup judges copies by the lines they match; a rerun
            adds both to files recorded before they were)
  conf      parallel to guesses: the draft's own probability of each guess (softmax of its logits,
            3 decimals), which the draft-model drafter reads to stop drafting where it is unsure; a
            rerun adds it to files recorded before it was, by following the recorded paths again
  turn      which turn of its record the reply answers (1-based)
  meta      llama-cpp-python's version, the model files and their sha256, the date

The draft's path is followed, not recomputed: when guesses[i][0] == target[i], the context of
guesses[i + 1][:15] is the one guesses[i][1:] were made in, so they are reused and the cache already
holds it (one draft step per position where the draft is right). That also makes the recorded draft
a function of its context, which is what an exact replay needs.

Resumable: each prompt's line is written as soon as it is done (the file is rewritten atomically);
a rerun skips prompts already recorded with the same settings. Nothing is timed.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
from pathlib import Path

import numpy as np

from specchat.benchsuite import Prompt, load_prompts_file, load_suite, single_turn
from specchat.chat import Message, prompt_tokens
from specchat.download import locate
from specchat.drafters.model import confidence
from specchat.engine import Engine
from specchat.engineconfig import EngineConfig
from specchat.errors import SpecchatError
from specchat.models_api import CachedModel
from specchat.registry import load_registry

HERE = Path(__file__).parent
GUESSES = 16  # auto's longest draft-model draft (MODEL_MAX_K)


def greedy_continuation(target: Engine, prompt: list[int], max_tokens: int) -> tuple[list[int], int | None]:
    """The target alone, one token at a time: (tokens, end-of-generation id or None)."""
    target.truncate(0)
    row = target.eval(prompt, 1)[0]
    out: list[int] = []
    while len(out) < max_tokens:
        token = int(np.argmax(row))
        if target.is_eog(token):
            return out, token
        out.append(token)
        row = target.eval([token], 1)[0]
    return out, None


def draft_guesses(
    draft: Engine, prompt: list[int], target: list[int], end: int | None
) -> tuple[list[list[int]], list[list[float]]]:
    """The draft's greedy guesses after prompt + target[:i], for i = 0..len(target), and its probability
    of each."""
    truth = target + ([end] if end is not None else [])  # what the target produces at each position
    cache = CachedModel(draft)
    cache.model.truncate(0)
    out: list[list[int]] = []
    conf: list[list[float]] = []
    for i in range(len(target) + 1):
        context = prompt + target[:i]
        guesses, probs = (out[-1][1:], conf[-1][1:]) if continues(out, target, i) else ([], [])
        while not path_done(guesses, truth[i:], draft.is_eog):
            token, p = guess(cache.feed(context + guesses, 1)[0])
            guesses.append(token)
            probs.append(p)
        out.append(guesses)
        conf.append(probs)
    return out, conf


def continues(rows: list[list[int]], target: list[int], i: int) -> bool:
    """The draft was right at position i - 1: its path from there (rows[i - 1][1:]) continues at i."""
    return i > 0 and bool(rows[i - 1]) and rows[i - 1][0] == target[i - 1]


def guess(row: np.ndarray) -> tuple[int, float]:
    """The greedy guess and the draft's probability of it."""
    token = int(np.argmax(row))
    return token, probability(row, token)


def probability(row: np.ndarray, token: int) -> float:
    """The draft's probability of a greedy guess as the drafter computes it, 3 decimals."""
    return round(confidence(row, token, None), 3)


def draft_confidences(draft: Engine, record: dict) -> tuple[list[list[float]], int]:
    """`conf` of a record made before it was recorded, by following its guesses' paths again; and how
    many guesses the draft would now make differently (another build or CPU of llama.cpp can break a
    near-tie the other way): those get the draft's probability of the recorded guess, a near-tie's."""
    cache = CachedModel(draft)
    cache.model.truncate(0)
    prompt, target, rows = record["prompt"], record["target"], record["guesses"]
    conf: list[list[float]] = []
    flipped = 0
    for i, guesses in enumerate(rows):
        probs = conf[-1][1:] if continues(rows, target, i) else []
        for j in range(len(probs), len(guesses)):
            row = cache.feed(prompt + target[:i] + guesses[:j], 1)[0]
            flipped += int(np.argmax(row)) != guesses[j]
            probs.append(probability(row, guesses[j]))
        conf.append(probs)
    return conf, flipped


def path_done(guesses: list[int], truth: list[int], is_eog) -> bool:
    """16 guesses, an end-of-generation guess (the drafter stops there), or the first wrong guess:
    what the draft guesses after a wrong guess is never accepted, so it is not worth recording (it
    would cost up to 15 draft steps per position; replays draft filler there). Beyond the end of a
    reply cut at max_tokens nothing is ever verified."""
    n = len(guesses)
    if n >= GUESSES or n >= len(truth):
        return True
    return n > 0 and (is_eog(guesses[-1]) or guesses[-1] != truth[n - 1])


def conversation(target: Engine, turns: tuple[str, ...], earlier_tokens: int) -> list[int]:
    """The prompt ids of a record's last turn: the turns before it answered by the target alone
    (greedy, up to earlier_tokens each), as `specchat bench` builds a multi-turn record's history."""
    messages: list[Message] = []
    for text in turns[:-1]:
        messages.append(Message("user", text))
        reply, _end = greedy_continuation(target, prompt_tokens(target, messages), earlier_tokens)
        messages.append(Message("assistant", target.detokenize(reply)))
    messages.append(Message("user", turns[-1]))
    return prompt_tokens(target, messages)


def record(target: Engine, draft: Engine, item: Prompt, max_tokens: int, earlier_tokens: int) -> dict:
    """The trace of a record's last turn (its only one, for most)."""
    prompt = conversation(target, item.turns, earlier_tokens)
    tokens, end = greedy_continuation(target, prompt, max_tokens)
    guesses, conf = draft_guesses(draft, prompt, tokens, end)
    seen = ids_in({"prompt": prompt, "target": tokens, "guesses": guesses, "end": end})
    return {
        "id": item.id,
        "category": item.category,
        "turn": len(item.turns),
        "prompt": prompt,
        "target": tokens,
        "stop": "eog" if end is not None else "max_tokens",
        "end": end,
        "guesses": guesses,
        "conf": conf,
        "control": sorted(t for t in seen if target.is_control(t)),
        "eog": sorted(t for t in seen if target.is_eog(t)),
        **line_roles(target, seen),
        "max_tokens": max_tokens,
    }


def line_roles(target: Engine, seen) -> dict[str, list[int]]:
    """The "breaks" and "blanks" of a trace (Engine.line_role of every id in it)."""
    roles = {token: target.line_role(token) for token in seen}
    return {
        "breaks": sorted(t for t, role in roles.items() if role == "break"),
        "blanks": sorted(t for t, role in roles.items() if role == "space"),
    }


def with_line_roles(path: Path, target: Engine, sha256: str) -> list[dict]:
    """The records of a file, those recorded before line roles were given them (and the file rewritten
    with them, every record kept), where they were recorded with this target: another model's ids would
    get this one's roles."""
    records = read_lines(path)
    missing = [i for i, r in enumerate(records) if "breaks" not in r and r["meta"]["target"]["sha256"] == sha256]
    for i in missing:
        records[i] = {**records[i], **line_roles(target, ids_in(records[i]))}
    if missing:
        write_lines(path, records)
    return records


def with_confidences(path: Path, draft: Engine, sha256: str, records: list[dict]) -> list[dict]:
    """The records, those recorded before `conf` was given it where this draft recorded them (the file
    rewritten after each, every record kept)."""
    for i, r in enumerate(records):
        if "conf" in r or r["meta"]["draft"]["sha256"] != sha256:
            continue
        conf, flipped = draft_confidences(draft, r)
        records[i] = {**r, "conf": conf}
        write_lines(path, records)
        print(f"{path.name} #{r['id']}: confidences added ({flipped} near-ties now broken the other way)", flush=True)
    return records


def ids_in(record: dict) -> set[int]:
    end = record.get("end")
    seen = set(record["prompt"]) | set(record["target"]) | {g for row in record["guesses"] for g in row}
    return seen | ({end} if end is not None else set())


def read_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_lines(path: Path, records: list[dict]) -> None:
    """Atomically, so an interrupted run leaves the previous complete file."""
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as handle:
        for line in records:
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def provenance(target_spec, draft_spec) -> dict:
    import llama_cpp

    return {
        "llama_cpp_python": llama_cpp.__version__,
        "target": {"file": target_spec.file, "sha256": target_spec.sha256},
        "draft": {"file": draft_spec.file, "sha256": draft_spec.sha256},
        "date": datetime.date.today().isoformat(),
        "decoding": "greedy",
    }


def prompt_sets(files: list[Path], suites: list[str]) -> dict[str, list[Prompt]]:
    """name -> prompts to record: the given files and suites, or by default the built-in suite's
    single-turn prompts and sim_prompts.jsonl. A trace is one reply: of a multi-turn record, its last
    turn (the target answers the others)."""
    if not files and not suites:
        return {
            "suite-default": single_turn(load_suite("default")),
            "sim-prompts": load_prompts_file(HERE / "sim_prompts.jsonl"),
        }
    sets = {path.stem: load_prompts_file(path) for path in files}
    return sets | {f"suite-{name}": load_suite(name) for name in suites}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=HERE / "traces")
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0: every usable CPU)")
    parser.add_argument(
        "--prompts", type=Path, action="append", help="a JSONL prompts file to record instead (repeatable)"
    )
    parser.add_argument("--suite", action="append", help="a built-in suite to record instead (repeatable)")
    parser.add_argument("--category", help="only the records of this category")
    parser.add_argument(
        "--earlier-tokens", type=int, default=512, help="longest reply of the target to earlier turns (default 512)"
    )
    args = parser.parse_args()
    pair = load_registry().pair(None)
    paths = [locate(pair.target), locate(pair.draft)]
    if None in paths:
        raise SystemExit("the default pair is not on this machine: run `specchat pull` first")
    try:
        sets = prompt_sets(args.prompts or [], args.suite or [])
    except SpecchatError as error:  # a missing file, an unknown suite: one line, as specchat says it
        raise SystemExit(f"error: {error.message}" + (f" (hint: {error.hint})" if error.hint else "")) from None
    if args.category:  # a file of its own: a rerun with other settings rewrites its file
        sets = {f"{name}-{args.category}": [p for p in ps if p.category == args.category] for name, ps in sets.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    meta = provenance(pair.target, pair.draft)
    config = EngineConfig(n_ctx=args.ctx, n_threads=args.threads)
    with Engine(paths[0], config) as target, Engine(paths[1], config) as draft:
        for name, prompts in sets.items():
            path = args.out / f"{name}.jsonl.gz"
            done = with_confidences(path, draft, pair.draft.sha256, with_line_roles(path, target, pair.target.sha256))
            done = [r for r in done if r["max_tokens"] == args.max_tokens]
            for prompt in prompts:
                if any(r["id"] == prompt.id for r in done):
                    continue
                line = record(target, draft, prompt, args.max_tokens, args.earlier_tokens)
                done.append({**line, "source": name, "meta": meta})
                write_lines(path, done)
                turn = f" turn {line['turn']}" if line["turn"] > 1 else ""
                print(
                    f"{name} {prompt.category} #{prompt.id}{turn}: {len(line['target'])} tokens, stop {line['stop']}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
