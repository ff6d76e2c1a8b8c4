"""Tab completion of option values (after `specchat --install-completion`): pair names from the registry, and the
words of --mode, --modes, --suite, --turns, --format and --to from the modules that check them. Each module is
imported when its option is completed, as options.any_case reads it; none of them imports llama_cpp, so a Tab
answers at the CLI's own start-up cost."""

from __future__ import annotations

import importlib
from collections.abc import Callable

Candidates = list[tuple[str, str]]  # (value, help): zsh and fish show the help beside the value
HELP_WIDTH = 78  # a help's longest: Typer wraps it at 80 columns (see _short)


def pairs(incomplete: str) -> Candidates:
    """The registry's pairs; with an overlay that cannot be read, the packaged ones."""
    registry = _registry()
    return [] if registry is None else [(name, _short(pair.description)) for name, pair in registry.pairs.items()]


def _registry():
    """Whatever goes wrong is said by the command itself (`specchat models`): a completion's output is the
    shell's list of candidates, and a traceback there would be printed over the command line being typed."""
    from ..registry import load_registry, packaged_registry_path

    for extra in (None, packaged_registry_path()):  # the packaged file as its own overlay: no user's overlay
        try:
            return load_registry(extra)
        except Exception:  # any: a broken overlay fails in many ways (TOML, keys, links); a Tab never does
            continue
    return None


def words(module: str, *names: str, many: bool = False) -> Callable[[str], Candidates]:
    """The completion of a word option: the words in `names` of specchat's `module` (a dict's values, or an
    object's .help, are their help), or with `many` the next word of a comma-separated list (bench's --modes)."""

    def complete(incomplete: str) -> Candidates:
        found = importlib.import_module(f"specchat.{module}")
        table: dict[str, str] = {}
        for name in names:  # the first to name a word gives its help (SUITES before the bare CATEGORIES)
            for word in getattr(found, name):
                table.setdefault(word, _help(getattr(found, name), word))
        if not many:
            return list(table.items())
        given, _, _ = incomplete.rpartition(",")
        before = [word.strip().lower() for word in given.split(",")]  # `Spec,`: spec is given, in any case
        start = f"{given}," if given else ""  # as typed: a shell offers only what starts with the word typed
        return [(start + word, text) for word, text in table.items() if word not in before]

    return complete


def _help(table, word: str) -> str:
    value = table[word] if isinstance(table, dict) else ""
    return _short(value if isinstance(value, str) else getattr(value, "help", ""))


def _short(text: str) -> str:
    """A help's first clause, short and as plain text: Typer renders it with Rich, which reads [x] as markup and
    wraps at 80 columns, and fish took the wrapped rest of a pair's description for a candidate of its own."""
    from rich.markup import escape

    text = " ".join(text.split())  # an overlay's description may hold line breaks: one a candidate, to zsh
    for end in ("; ", ": ", " ("):
        text = text.split(end, 1)[0]
    return escape(text if len(text) <= HELP_WIDTH else text[: HELP_WIDTH - 1].rstrip() + "…")
