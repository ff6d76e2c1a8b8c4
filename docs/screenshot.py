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
from specchat.chatview import legend
from specchat.outputs import LiveOutput, Request
from specchat.replying import reply
from specchat.runtime import Options, open_pipeline
from specchat.sampling import SamplingParams
from specchat.statsview import footer

PROMPT = "Write a Python function that checks whether a number is prime, with a docstring."


def main() -> None:
    console = Console(record=True, width=100, file=io.StringIO(), force_terminal=False, color_system="truecolor")
    with open_pipeline(Options(mode="spec", n_ctx=2048), print) as pipeline:
        prompt = pipeline.prompt([Message("user", PROMPT)])
        console.print(f"you › {PROMPT}", style="bold cyan")
        request = Request("spec", 4, SamplingParams(), 160)
        console.print(legend())  # the live view writes it on a terminal only; this console records a file
        generation = reply(pipeline, prompt, request, LiveOutput(console, request))  # reply, summary
        console.print(footer(generation.stats, request.label))
    out = Path(__file__).parent / "img" / "view.svg"
    out.write_text(console.export_svg(title="specchat run"), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
