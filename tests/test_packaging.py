"""What pip and a source distribution hand a stranger: every module the code imports is one pip installs with
it, and the sdist holds what its own tests read."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
OURS = {"specchat"} | {p.stem for folder in ("tests", "benchmarks") for p in (ROOT / folder).glob("*.py")}


def _name(requirement: str) -> str:
    """The distribution a requirement names, normalised as PEP 503 does (prompt_toolkit = prompt-toolkit)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


def _imports(folder: str) -> dict[str, set[str]]:
    """Top-level modules imported anywhere under folder that are neither stdlib nor the project's own."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in OURS:
                    found.setdefault(top, set()).add(path.relative_to(ROOT).as_posix())
    return found


def _undeclared(folder: str, declared: list[str]) -> list[str]:
    provides = packages_distributions()
    names = {_name(r) for r in declared}
    return [
        f"{module} ({', '.join(sorted(files))}): from {provides.get(module)}"
        for module, files in sorted(_imports(folder).items())
        if not names & {_name(d) for d in provides.get(module, [module])}
    ]


def test_every_module_specchat_imports_is_a_dependency_or_the_plot_extra():
    """A module that comes only through another package's requirements can go with that package's next release."""
    project = PROJECT["project"]
    assert not _undeclared("specchat", project["dependencies"] + project["optional-dependencies"]["plot"])


def test_every_module_the_tests_import_is_in_the_test_extra():
    """`pip install -e '.[test]'` is the README's (and .ci/run's) whole setup for the tests: test_docs imports
    click, which came only as uvicorn's requirement (Typer keeps a copy of its own)."""
    project = PROJECT["project"]
    assert not _undeclared("tests", project["dependencies"] + project["optional-dependencies"]["test"])


def test_the_sdist_holds_every_folder_the_tests_read():
    """The sdist ships tests/, but not benchmarks/, which test_simulate and test_benchtools load: 19 of them
    failed with FileNotFoundError in an unpacked sdist."""
    include = {"pyproject.toml", *PROJECT["tool"]["hatch"]["build"]["targets"]["sdist"]["include"]}  # hatch adds it
    assert "tests" in include
    read = set()
    for path in (ROOT / "tests").glob("*.py"):
        read |= set(re.findall(r'(?:parent\.parent|ROOT) / "([^"]+)"', path.read_text(encoding="utf-8")))
    assert read and not read - include, read - include


def test_the_version_is_written_in_one_place():
    """pyproject.toml and specchat/__init__.py each said 0.1.0: a release that bumped one would install as one
    version and call itself another (--version, the bench report). The package's version is read from the code."""
    assert "version" not in PROJECT["project"] and "version" in PROJECT["project"]["dynamic"]
    assert PROJECT["tool"]["hatch"]["version"]["path"] == "specchat/__init__.py"
