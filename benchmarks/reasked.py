"""Tasks answered once, then asked again in other words: a history file and prompts for `specchat bench`.

    python benchmarks/reasked.py --out /tmp/reasked            # answers each task once with the target
    specchat bench --prompts /tmp/reasked/again.jsonl --modes auto --history /tmp/reasked/history.jsonl -n 160 -r 2
    specchat bench --prompts /tmp/reasked/same.jsonl --modes auto --history /tmp/reasked/history.jsonl -n 160 -r 2
    specchat bench --modes auto --history /tmp/reasked/history.jsonl -n 96 -r 2   # unrelated history, default suite

Each line of benchmarks/reasked_tasks.jsonl holds a task's first wording and a second one. The first
is answered by the target alone (greedy, `specchat run --mode target`, not logged), and the pair goes
into OUT/history.jsonl as a past conversation (the format of `bench --history`); the second wording
goes into OUT/again.jsonl (the format of `bench --prompts`), and the first wording again, word for word
(a script or an agent sending its prompt anew), into OUT/same.jsonl. Nothing here is timed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def answer(prompt: str, max_tokens: int) -> str:
    command = [sys.executable, "-m", "specchat", "run", "--mode", "target", "-n", str(max_tokens)]
    command += ["--no-log", "--no-history", "--format", "json", prompt]
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # specchat's own one-line error (no model, bad option), not a traceback here
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise SystemExit(f"specchat run failed: {lines[-1]}")
    return json.loads(done.stdout)["text"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=Path, default=HERE / "reasked_tasks.jsonl")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("-n", "--max-tokens", type=int, default=192)
    args = parser.parse_args()
    try:
        lines = args.tasks.read_text(encoding="utf-8").splitlines()
        tasks = [json.loads(line) for line in lines if line.strip()]
        missing = next((key for task in tasks for key in ("id", "category", "first", "again") if key not in task), None)
    except (OSError, ValueError, TypeError) as error:
        raise SystemExit(f"{args.tasks}: {error}") from None
    if missing:
        raise SystemExit(f"{args.tasks}: every line needs id, category, first and again (missing {missing!r})")
    args.out.mkdir(parents=True, exist_ok=True)
    history, again, same = [], [], []
    for task in tasks:
        reply = answer(task["first"], args.max_tokens)
        messages = [{"role": "user", "content": task["first"]}, {"role": "assistant", "content": reply}]
        history.append(json.dumps({"messages": messages}))
        again.append(json.dumps({"question_id": task["id"], "category": task["category"], "turns": [task["again"]]}))
        same.append(json.dumps({"question_id": task["id"], "category": task["category"], "turns": [task["first"]]}))
        print(f"{task['id']}: answered, {len(reply)} characters", flush=True)
    (args.out / "history.jsonl").write_text("\n".join(history) + "\n", encoding="utf-8")
    (args.out / "again.jsonl").write_text("\n".join(again) + "\n", encoding="utf-8")
    (args.out / "same.jsonl").write_text("\n".join(same) + "\n", encoding="utf-8")
    print(f"wrote {args.out / 'history.jsonl'}, {args.out / 'again.jsonl'} and {args.out / 'same.jsonl'}")


if __name__ == "__main__":
    main()
