"""Write six long prompts (2,000-4,500 tokens) built from this Python's own standard library, for measuring auto
deep into a long text, where a batch costs more single steps than the calibration says (docs/bench.md, "Batches
deep into a long text"):

    python benchmarks/deep_prompts.py > deep.jsonl
    specchat bench --prompts deep.jsonl --modes auto -n 160 -r 2 --ctx 8192

Three edits of a whole module (type hints, a rename, new errors), tests for one, a question about another, and a
summary of a long help text. The texts come from the standard library of the Python that runs this, so they are
the same wherever that version is (measured with CPython 3.11.7); nothing here was tuned on them.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def module(name: str, end: int | None = None) -> str:
    return (STDLIB / name).read_text()[:end]


def fenced(source: str) -> str:
    return f"```python\n{source}\n```"


def prompts() -> list[tuple[str, str, str]]:
    from pydoc_data.topics import topics

    return [
        (
            "d1",
            "code-edit",
            "Add type hints to every parameter and return value of `TextWrapper._split_chunks`, "
            "`TextWrapper._fix_sentence_endings` and `TextWrapper._handle_long_word`, changing nothing else. "
            "Output those three methods whole:\n\n" + fenced(module("textwrap.py")),
        ),
        (
            "d2",
            "code-edit",
            "In this module, rename the parameter `punctuation_chars` to `punct_chars` everywhere it appears in the "
            "`shlex` class's `__init__` method and keep everything else as it is. Output the whole `__init__` "
            "method:\n\n" + fenced(module("shlex.py")),
        ),
        (
            "d3",
            "code",
            "Write pytest unit tests for `TopologicalSorter.static_order` and for the cycle detection of this "
            "module:\n\n" + fenced(module("graphlib.py")),
        ),
        (
            "d4",
            "summarize",
            topics["import"][:11000] + "\n\nSummarize the text above in one paragraph for a Python beginner.",
        ),
        (
            "d5",
            "code-edit",
            "Make `DictReader.__next__` and `DictWriter._dict_to_list` raise a `ValueError` with a helpful message "
            "instead of their current behaviour where a row has the wrong number of fields. Output both classes "
            "whole:\n\n" + fenced(module("csv.py")),
        ),
        (
            "d6",
            "chat",
            "Here is a module:\n\n"
            + fenced(module("heapq.py", 14000))
            + "\n\nWhy does `heappop` move the last item to the root and sift it down instead of removing the root "
            "directly? Answer briefly.",
        ),
    ]


def main() -> None:
    for question_id, category, text in prompts():
        sys.stdout.write(json.dumps({"question_id": question_id, "category": category, "turns": [text]}) + "\n")


if __name__ == "__main__":
    main()
