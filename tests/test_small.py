"""Small things users notice (issue 13): portability of the command paths, shell completion, the Hub
probe behind a proxy, pip-less environments, NO_COLOR, `models` at 80 columns.

Commands run in child processes, with the fake backend as a plugin (SPECCHAT_PLUGINS) where a model is
needed, so that each test sees what a user's shell would.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import fake_backend
import pytest

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
    # Typer finds the shell from the process tree (shellingham), which a test run from a detached job
    # does not have; its own tests' switch makes --show-completion take the shell's name instead.
    env = child_env(tmp_path, SHELL="/bin/bash", _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    done = specchat(tmp_path, "--show-completion", "bash", env=env)
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


# --- 3. the Hub probe takes the proxy from the environment ---------------------------------------------


class Recorder(http.server.BaseHTTPRequestHandler):
    """A tiny HTTP server (or proxy) that records each request line and answers with `status`."""

    seen: list[str]
    status = 200

    def _answer(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET = do_CONNECT = _answer

    def log_message(self, *args) -> None:  # quiet
        pass


@contextlib.contextmanager
def recording_server(status: int = 200):
    handler = type("Handler", (Recorder,), {"seen": [], "status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.seen
    finally:
        server.shutdown()
        server.server_close()


def probe(tmp_path: Path, **env: str) -> bool:
    """hubpull.hub_reachable() in a child whose environment is exactly this one plus env (no proxies)."""
    base = {k: v for k, v in child_env(tmp_path).items() if "proxy" not in k.lower()}
    code = "from specchat.hubpull import hub_reachable; print(hub_reachable(timeout=10))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False, env=base | env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "True"


def test_hub_probe_goes_through_the_http_proxy(tmp_path):
    # hub.invalid cannot resolve: only the proxy can answer for it.
    with recording_server(200) as (proxy, seen):
        assert probe(tmp_path, HF_ENDPOINT="http://hub.invalid", HTTP_PROXY=proxy)
    assert seen and seen[0].startswith("HEAD http://hub.invalid"), seen


def test_hub_probe_tunnels_https_through_the_proxy(tmp_path):
    with recording_server(502) as (proxy, seen):  # the proxy cannot reach the Hub either
        assert not probe(tmp_path, HF_ENDPOINT="https://hub.invalid", HTTPS_PROXY=proxy)
    assert seen == ["CONNECT hub.invalid:443"]


@pytest.mark.parametrize(("status", "reachable"), [(200, True), (404, True), (503, False)])
def test_hub_probe_without_a_proxy(tmp_path, status, reachable):
    with recording_server(status) as (hub, seen):
        assert probe(tmp_path, HF_ENDPOINT=hub) is reachable
    assert seen and seen[0].startswith("HEAD /")


def test_hub_probe_of_nothing_is_quick_and_false(tmp_path):
    assert not probe(tmp_path, HF_ENDPOINT="http://127.0.0.1:9")


# --- 7. NO_COLOR counts only when it is not empty (no-color.org) ---------------------------------------

RED_ERROR = "\x1b[1;31merror: "


@pytest.mark.parametrize(
    ("no_color", "coloured"), [(None, True), ("", True), ("1", False), ("0", False)], ids=["unset", "empty", "1", "0"]
)
def test_no_color_counts_only_when_not_empty(tmp_path, no_color, coloured):
    env = child_env(tmp_path, FORCE_COLOR="1")  # colours without a terminal
    if no_color is not None:
        env["NO_COLOR"] = no_color
    done = specchat(tmp_path, "pull", "no-such-pair", env=env)
    assert done.returncode == 2  # an unknown pair is a usage error
    assert (RED_ERROR in done.stderr) is coloured, repr(done.stderr)
    if not coloured:
        assert "\x1b[1merror: " in done.stderr  # bold stays: only the colours go


# --- 9. the LICENSE file is the licence pyproject names ------------------------------------------------


def test_license_file_matches_pyproject():
    import tomllib

    root = TESTS.parent
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    text = (root / "LICENSE").read_text(encoding="utf-8")
    assert project["license"] == "MIT" and text.startswith("MIT License\n")
    assert "Copyright (c) 2026 specchat developers" in text
    assert "LICENSE" in project.get("license-files", ["LICENSE"])  # hatchling's default picks up LICENSE*


# --- 10. `specchat models` at 80 columns ---------------------------------------------------------------


def test_models_fits_in_80_columns_and_cuts_no_name(tmp_path):
    from specchat.registry import load_registry

    done = specchat(tmp_path, "models", env=child_env(tmp_path, COLUMNS="80"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    paths = [line for line in lines if line.startswith(("models directory: ", "overlay file: "))]
    assert len(paths) == 2 and str(tmp_path / "models") in paths[0]  # a path is never cut (it may be long)
    too_wide = [line for line in lines if len(line) > 80 and line not in paths]
    assert not too_wide, "\n".join(too_wide)
    cells = {cell.strip() for line in lines for cell in line.split("│")}
    registry = load_registry()
    for pair in registry.pairs.values():
        assert pair.name in cells
        for spec in (pair.target, pair.draft):
            assert any(cell.startswith(spec.file.removesuffix(".gguf")) for cell in cells), spec.file
    assert "(default)" in cells


def test_write_atomic_refuses_a_read_only_file_only_where_the_user_keeps_it(tmp_path, read_only):
    """A report, /save or the tuning over a read-only file is refused, as by the shell's `>`; specchat's own
    caches (the history index's meta.json, the GGUF and sha256 caches) are replaced as before: refusing them
    left the history off ("Permission denied", no way out) after a backup restored them read-only."""
    from specchat.paths import write_atomic

    files = {name: tmp_path / name for name in ("report.md", "cache.json")}
    for path in files.values():
        path.write_text("old")
    read_only(*files.values())
    with pytest.raises(PermissionError):
        write_atomic(files["report.md"], "new", keep_read_only=True)
    write_atomic(files["cache.json"], "new")
    assert [files[name].read_text() for name in ("report.md", "cache.json")] == ["old", "new"]


def test_write_atomic_through_a_loop_of_links_is_an_oserror(tmp_path):
    """Every caller handles OSError (/save, bench -o); pathlib's RuntimeError for a loop was an internal error."""
    from specchat.filechecks import same_file
    from specchat.paths import write_atomic

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        write_atomic(tmp_path / "a", "x")
    assert not same_file(tmp_path / "a", tmp_path / "c")


def test_write_atomic_writes_through_links_into_devices_and_keeps_permissions(tmp_path):
    """/save FILE and bench -o go through write_atomic: a rename put a regular file in place of a link (the
    link's target kept the old text), of /dev/null or a FIFO, and gave a private file mode 0644."""
    import stat

    from specchat.paths import write_atomic

    real = tmp_path / "real.md"
    real.write_text("old")
    link = tmp_path / "latest.md"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"

    private = tmp_path / "private.md"
    private.write_text("old")
    private.chmod(0o600)
    write_atomic(private, "new")
    assert private.read_text() == "new" and stat.S_IMODE(private.stat().st_mode) == 0o600

    fresh = tmp_path / "fresh.md"
    write_atomic(fresh, "x")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_atomic(fifo, "through")
        assert stat.S_ISFIFO(os.stat(fifo).st_mode) and os.read(reader, 100) == b"through"
    finally:
        os.close(reader)
    with pytest.raises(OSError):  # nobody reads it: an error at once, not a wait forever
        write_atomic(fifo, "lost")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.md", "latest.md", "out.fifo", "private.md", "real.md"]


@pytest.mark.parametrize("where", ["the folder", "a folder above it"])
def test_a_file_in_place_of_a_folder_is_named_with_a_hint(tmp_path, monkeypatch, where):
    """mkdir said 'File exists' (or 'Not a directory' below it), which reads as if the folder were there."""
    from specchat.paths import NotAFolder, data_dir, make_dirs

    blocker = tmp_path / "d"
    blocker.write_text("kept")
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(blocker if where == "the folder" else blocker / "deeper"))
    with pytest.raises(NotAFolder) as err:
        make_dirs(data_dir() / "history")
    assert str(err.value) == err.value.strerror == f"{blocker} is not a directory"
    # The variable names the file, or a folder in it: "remove or rename that file" told the user to delete what
    # they named (a model's file, in SPECCHAT_MODELS_DIR=~/m.gguf/sub)
    assert err.value.hint == (
        "SPECCHAT_DATA_DIR names this file: set it to a folder"
        if where == "the folder"
        else f"SPECCHAT_DATA_DIR passes through the file {blocker}: set it to a folder"
    )
    assert isinstance(err.value, OSError) and blocker.read_text() == "kept"
    other = tmp_path / "other"
    other.write_text("")
    with pytest.raises(NotAFolder) as elsewhere:  # not one of specchat's folders
        make_dirs(other / "x")
    assert elsewhere.value.hint == "remove or rename that file, or choose another folder"
    make_dirs(tmp_path / "a" / "b")  # the ordinary case: made, and made again without complaint
    make_dirs(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()


@pytest.mark.parametrize(
    ("encoding", "typed", "named"),
    [
        ("latin-1", "täst.gguf", "täst.gguf"),  # a name the locale holds: the same file
        ("ascii", "tälk.md", "t\udcc3\udca4lk.md"),  # LC_ALL=C without UTF-8 mode: its UTF-8 bytes
    ],
)
def test_a_typed_name_is_re_encoded_only_where_the_file_systems_encoding_cannot_hold_it(
    monkeypatch, encoding, typed, named
):
    """`/save tälk.md` in the C locale without UTF-8 mode was an internal error, so names became their UTF-8
    bytes; but every name did, and in a Latin-1 locale a good 'täst.gguf' (argv, environ) named another file."""
    from specchat.paths import expand_home

    monkeypatch.setattr(os, "fsencode", lambda text: text.encode(encoding, "surrogateescape"))
    monkeypatch.setattr(os, "fsdecode", lambda data: data.decode(encoding, "surrogateescape"))
    assert str(expand_home(typed)) == named


@pytest.mark.parametrize(("usable", "note"), [(1, "the 1 usable CPU: using 1"), (4, "the 4 usable CPUs: using 4")])
def test_the_threads_cap_note_counts_cpus_in_good_english(monkeypatch, usable, note):
    """`taskset -c 0 specchat run --threads 2` said "more than the 1 usable CPUs"."""
    from specchat import engineconfig

    monkeypatch.setattr(engineconfig, "default_threads", lambda: usable)
    assert engineconfig.capped_threads(8) == (usable, f"--threads 8 is more than {note}")
