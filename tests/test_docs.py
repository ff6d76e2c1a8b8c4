"""The docs and the code name the same things: every option a doc gives a command exists, every
environment variable the code reads is in docs/usage.md's table (and none that it does not read), and
docs/view.md's chat table lists every slash command and no other."""

from __future__ import annotations

import re
from pathlib import Path

import click
import typer

from specchat.cli import app
from specchat.repl import ChatSession

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def _options() -> dict[str, set[str]]:
    """Each command's option names, as typed (--no-rejected too)."""
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    options = {}
    for name in group.list_commands(ctx):
        params = group.get_command(ctx, name).params
        options[name] = {opt for p in params for opt in (*p.opts, *getattr(p, "secondary_opts", []))} | {"--help"}
    return options


def _section(doc: str, heading: str) -> str:
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_every_option_a_doc_gives_a_command_exists():
    options = _options()
    command = re.compile(r"specchat(?:\s+--debug)?\s+(" + "|".join(options) + r")\b([^`|\n]*)")
    wrong = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            line = re.sub(r"\$\([^)]*\)|\s#\s.*", "", line)  # `$(openssl rand -hex 16)`, a shell comment
            for match in command.finditer(line):
                name, rest = match.groups()
                unknown = [flag for flag in FLAG.findall(rest) if flag not in options[name]]
                wrong += [f"{doc.name}:{number}: {name} {flag}" for flag in unknown]
    assert not wrong


def _variables_read() -> set[str]:
    """The environment variables specchat's own code reads (libraries' own, such as HF_TOKEN, aside)."""
    reads = re.compile(r'(?:environ\.get|env_flag|_from_env)\(\s*"([A-Z_]+)"|envvar="([A-Z_]+)"')
    found = set()
    for source in (ROOT / "specchat").rglob("*.py"):
        found |= {a or b for a, b in reads.findall(source.read_text(encoding="utf-8"))}
    return found


def test_usage_md_lists_every_environment_variable_the_code_reads_and_no_other_of_its_own():
    table = _section("usage.md", "Environment variables")
    listed = set(re.findall(r"`([A-Z][A-Z_]+)(?:=\w+)?`", table))
    read = _variables_read()
    assert read, "the pattern found no variable: it no longer matches how the code reads them"
    assert read - listed == set()
    assert {name for name in listed if name.startswith("SPECCHAT_")} - read == set()


def test_view_md_lists_every_chat_command_and_no_other():
    table = _section("view.md", "Interactive chat")
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| ")]
    listed = {command for row in rows for command in re.findall(r"`(/[a-z]+)", row)}
    assert listed == set(ChatSession.commands())
