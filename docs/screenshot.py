"""Regenerate docs/img/view.svg: a real reply of the default pair, recorded through the live view.

    python docs/screenshot.py

The console records without being a terminal, so the live footer (a transient region) is not part of
the recording; its last state is printed once at the end, as it looked during generation.
"""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from specchat.chat import Message
from specchat.chatview import ReplyView, legend, summary_line
from specchat.runtime import LoadOptions, ModelChoice, Pipeline, resolve
from specchat.sampling import SamplingParams

PROMPT = "Write a Python function that checks whether a number is prime, with a docstring."


def main() -> None:
    console = Console(record=True, width=100, file=io.StringIO(), force_terminal=False, color_system="truecolor")
    resolved = resolve(ModelChoice(), print, lambda _label, _n: lambda _k: None)
    pipeline = Pipeline(resolved, LoadOptions(n_ctx=2048))
    try:
        prompt = pipeline.prompt([Message("user", PROMPT)])
        console.print(f"you › {PROMPT}", style="bold cyan")
        console.print(legend())
        view = ReplyView(console, k=4, mode="spec k=4")
        with view:
            _, _, stats = pipeline.generate(prompt, SamplingParams(), k=4, max_tokens=160, on_round=view.on_round)
        console.print(summary_line(stats, 4, "spec k=4"))
        console.print(view.totals.footer("spec k=4"))
    finally:
        pipeline.close()
    out = Path(__file__).parent / "img" / "view.svg"
    out.write_text(console.export_svg(title="specchat run"), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
