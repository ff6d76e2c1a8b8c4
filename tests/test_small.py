"""Small things users notice (issue 13): portability of the command paths, shell completion, the Hub
probe behind a proxy, pip-less environments, NO_COLOR, optional plotext, `models` at 80 columns.

Commands run in child processes, with the fake backend as a plugin (SPECCHAT_PLUGINS) where a model is
needed, so that each test sees what a user's shell would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fake_backend

TESTS = Path(__file__).resolve().parent


def child_env(tmp_path: Path, **extra: str) -> dict:
    """This environment with the fake backend as a plugin and private specchat directories."""
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "SPECCHAT_DEBUG")}
    env |= {f"SPECCHAT_{n}_DIR": str(tmp_path / n.lower()) for n in ("CONFIG", "MODELS", "CACHE", "STATE")}
    return env | {"SPECCHAT_PLUGINS": "fake_backend", "PYTHONPATH": path} | extra


def specchat(tmp_path: Path, *args: str, env: dict | None = None, code: str | None = None, timeout: float = 120):
    """`python -m specchat ARGS` (or `python -c CODE ARGS`) in tmp_path."""
    command = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "specchat", *args]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, check=False, env=env or child_env(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip


# --- 1. no Unix-only module on any command's path ---------------------------------------------------

UNIX_ONLY = ("resource", "fcntl", "termios", "pwd", "grp")
WITHOUT_UNIX_MODULES = (
    "import runpy, sys\n"
    f"for name in {UNIX_ONLY!r}:\n"
    "    sys.modules[name] = None  # `import name` now raises ImportError, as on Windows\n"
    "sys.argv[0] = 'specchat'\n"
    "runpy.run_module('specchat', run_name='__main__', alter_sys=True)\n"
)


def test_commands_run_without_unix_only_modules(tmp_path):
    target, draft = fake_backend.write_pair(tmp_path / "files")
    spec = ["--target", str(target), "--draft", str(draft), "--mode", "spec", "-n", "40"]
    done = specchat(tmp_path, "run", *spec, "--stats", "Say hi.", code=WITHOUT_UNIX_MODULES)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Here is your text again:") and "accepted" in done.stderr
    models = specchat(tmp_path, "models", code=WITHOUT_UNIX_MODULES)
    assert models.returncode == 0 and "specchat pairs" in models.stdout, models.stderr
    bench = specchat(
        tmp_path, "bench", *spec[:4], "--ks", "2", "--modes", "spec", "--suite", "tiny", "-r", "1", "-n", "8",
        "--format", "json", code=WITHOUT_UNIX_MODULES,
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout)["peak_rss_mb"] is None  # unknown without `resource`, not a crash


# --- 2. shell completion ------------------------------------------------------------------------------


def test_show_completion_prints_a_bash_script(tmp_path):
    done = specchat(tmp_path, "--show-completion", "bash", env=child_env(tmp_path, SHELL="/bin/bash"))
    assert done.returncode == 0, done.stderr
    assert "complete -o default -F _specchat_completion specchat" in done.stdout
    assert "_SPECCHAT_COMPLETE=complete_bash" in done.stdout


def test_completion_completes_commands_and_options(tmp_path):
    def complete(words: str) -> list[str]:
        env = child_env(tmp_path, _SPECCHAT_COMPLETE="complete_bash", COMP_WORDS=words)
        env["COMP_CWORD"] = str(len(words.split()) - 1)
        done = specchat(tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert complete("specchat mo") == ["models"]
    assert "--max-tokens" in complete("specchat run --ma")


def test_help_offers_completion(tmp_path):
    done = specchat(tmp_path, "--help", env=child_env(tmp_path, COLUMNS="100"))
    assert "--install-completion" in done.stdout and "--show-completion" in done.stdout
