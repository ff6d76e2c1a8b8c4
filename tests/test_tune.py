"""`specchat tune`: measures, predicts, saves what auto starts from (fake backend; one real-model run)."""

from __future__ import annotations

import json
import os
import re

import pytest
from typer.testing import CliRunner

from specchat.cli import app
from specchat.tunemeasure import FULL_BATCHES, conditional_rates


def check_saved(config) -> dict:
    saved = list((config / "tuning").glob("*.json"))
    assert len(saved) == 1
    data = json.loads(saved[0].read_text())
    assert data["source"] == "tune"
    assert set(data["v"]) == {str(n) for n in FULL_BATCHES} and data["c"] > 0
    assert 0.0 <= data["priors"]["spec"] <= 1.0
    modes = {e["mode"] for e in data["details"]["estimates"]}
    assert modes == {"target", "spec", "ngram"}
    return data


def test_tune_saves_costs_and_acceptance(fake_models, isolated):
    target, draft = fake_models
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"])
    assert result.exit_code == 0, result.output
    assert "predicted" in result.stdout and "auto starts from" in result.stdout
    assert "v(2) = " in result.stdout and "target steps" in result.stdout
    check_saved(isolated / "config")


def test_then_auto_starts_from_it(fake_models, isolated):
    """A saved `tune` is what auto starts from: no calibration on the next run."""
    target, draft = fake_models
    files = ["--target", str(target), "--draft", str(draft)]
    tuned = CliRunner().invoke(app, ["tune", *files, "-n", "8"])
    data = check_saved(isolated / "config")
    run = CliRunner().invoke(app, ["run", *files, "--json", "-n", "8", "Hi"])
    assert run.exit_code == 0, run.output
    if data["busy"]:  # timed while other programs ran: used for that run only, measured again
        assert "measuring" in run.stderr, tuned.stderr
    else:
        assert "measuring" not in run.stderr


@pytest.mark.real
def test_tune_on_the_real_pair(default_pair_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["tune", "-n", "8", "--ctx", "1024"])
    assert result.exit_code == 0, result.output
    assert "predicted" in result.stdout and "auto starts from" in result.stdout
    check_saved(tmp_path)


def test_conditional_rates():
    # 10 rounds drafted position 1, 8 accepted it; all 8 reached position 2, 4 accepted.
    assert conditional_rates([10, 8], [8, 4]) == [0.8, 0.5]
    assert conditional_rates([5, 0], [0, 0]) == [0.0, 0.0]
    # Fixed k: every round drafts every position; position i is judged among the rounds that accepted
    # position i - 1, not among all that drafted it.
    assert conditional_rates([10, 10, 10], [8, 4, 1]) == [0.8, 0.5, 0.25]
    # The last rounds cut short by max_tokens (2 of 10 drafted only position 1): 6 rounds reached
    # position 2, not the 8 that accepted position 1.
    assert conditional_rates([10, 6], [8, 3]) == [0.8, 0.5]


def test_a_lone_target_is_tuned_as_run_uses_it(fake_models, isolated, monkeypatch):
    """`tune --target T` loaded the pair's draft model (a pull, or 'incompatible pair' for a target of another
    family) and saved the tuning for (T, that draft), a key `run --target T` never looks up."""
    from specchat import tuning
    from specchat.runtime import Options, Resolved

    target, _draft = fake_models
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the pair's draft is not there: wanting it fails at once
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "-n", "8"])
    assert result.exit_code == 0, result.output
    key = tuning.key_for(Resolved(None, target, None), Options(target_path=target))  # what run --target T reads
    assert tuning.load(key) is not None
    assert {e["mode"] for e in tuning.load(key).details["estimates"]} == {"target", "ngram"}


def test_tune_shows_saved_vs_now(fake_models, isolated, seed_tuning):
    """A second look at the machine is shown next to what was saved before (issue 11)."""
    target, draft = fake_models
    seed_tuning(target, draft, keep_draft=True, mode="spec")
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    now = next(line for line in lines if line.startswith("now:"))
    saved = next(line for line in lines if line.startswith("saved:"))
    assert "target step" in now and "v(16) = " in now
    assert "target step 1.0 ms" in saved and "v(2) = 1.02" in saved
    assert any(line.startswith("if every guess were right: lookup ") for line in lines)


def test_a_saved_tuning_measured_under_load_is_said_so_once(fake_models, isolated, seed_tuning):
    """The saved line read '... target steps (other programs were using the CPUs) (measured under load)', then
    '... (other programs were using the CPUs) (calibration)': one bracket."""
    from specchat.costmodel import Costs

    target, draft = fake_models
    costs = Costs({n: 1.0 + 0.02 * (n - 1) for n in (1, 2, 4, 8, 16)}, 0.05, 1e-3, 1e-3, busy=True)
    seed_tuning(target, draft, costs, keep_draft=True, mode="spec")
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"])
    assert result.exit_code == 0, result.output
    saved = next(line for line in result.stdout.splitlines() if line.startswith("saved:"))
    assert saved.endswith("target steps (calibration; other programs were using the CPUs)"), saved


def test_a_config_dir_that_cannot_hold_the_tuning_is_one_line_before_measuring(fake_models, isolated, monkeypatch):
    """A config directory that is a file (or unwritable) was an internal error after the whole measurement."""
    target, draft = fake_models
    blocker = isolated / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(blocker))
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot save the tuning in "), result.stderr
    assert "nothing was measured" in lines[0] and f"{blocker} is not a directory" in lines[0]
    assert "hint: SPECCHAT_CONFIG_DIR names this file: set it to a folder" in lines[0]
    assert "Traceback" not in result.output and blocker.read_text() == ""


def test_a_tuning_that_cannot_be_written_after_measuring_is_one_line(fake_models, isolated, monkeypatch):
    import errno

    from specchat import tuningsave

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tuningsave, "write_atomic", full)
    target, draft = fake_models
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"])
    assert result.exit_code == 1, result.output
    last = [line for line in result.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("error: cannot save the tuning in ") and "No space left" in last, result.stderr
    assert "nothing was saved" in last and "internal error" not in result.output
    # the folder is writable, the disk is full: "give specchat a writable config directory" sent the user astray
    assert "hint: free some space on the disk that holds" in last and "writable" not in last, last


@pytest.mark.parametrize("linked", [False, True])
def test_a_directory_where_the_tuning_goes_is_one_line_before_measuring(
    fake_models, isolated, seed_tuning, monkeypatch, linked
):
    """A directory at the tuning file's path was found only by the save, after the whole measurement."""
    from specchat import runtime, tunemeasure

    def measured(*_args, **_kwargs):
        raise AssertionError("measured before the tuning's path was checked")

    target, draft = fake_models
    path = seed_tuning(target, draft)
    path.unlink()
    if linked:  # a link to a directory elsewhere
        (isolated / "elsewhere").mkdir()
        path.symlink_to(isolated / "elsewhere")
    else:
        path.mkdir()
    monkeypatch.setattr(tunemeasure, "tune", measured)
    monkeypatch.setattr(runtime, "_load", measured)  # checked before the models load, too
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot save the tuning as {path}: it is a directory")
    assert "remove or rename that directory" in lines[0] and "nothing was measured" in lines[0]
    assert path.is_dir()


def test_a_read_only_tuning_file_is_refused_before_measuring(fake_models, seed_tuning, monkeypatch, read_only):
    """The save (write_atomic) refuses a read-only file, as the shell's `>` does: tune found that out only after
    the whole measurement; it is said before the models load, and the file is kept."""

    from specchat import runtime

    target, draft = fake_models
    path = seed_tuning(target, draft)
    before = path.read_text()
    read_only(path)
    monkeypatch.setattr(runtime, "_load", lambda *_a, **_k: pytest.fail("the models loaded"))
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    said = " ".join(result.stderr.split())
    assert f"cannot save the tuning as {path}: the file is read-only" in said and "chmod u+w" in said, said
    assert "nothing was measured" in said and path.read_text() == before


def test_a_tuning_path_that_cannot_be_searched_is_not_called_a_directory(fake_models, monkeypatch):
    """Any OSError of that check was reported as "it is a directory"; a folder that cannot be searched is not."""
    from specchat import tunemeasure, tuning, tuningsave

    def denied(key):
        raise PermissionError(13, "Permission denied", str(tuning.tuning_path(key)))

    monkeypatch.setattr(tuningsave, "check_replaceable", denied)
    monkeypatch.setattr(
        tunemeasure, "tune", lambda *_args, **_kwargs: (_ for _ in ()).throw(AssertionError("measured"))
    )
    target, draft = fake_models
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "it is a directory" not in result.stderr and "ermission denied" in result.stderr, result.stderr
    assert "internal error" not in result.stderr and "cannot save the tuning" in result.stderr, result.stderr


def test_a_measured_acceptance_of_zero_is_kept(isolated):
    """A draft whose guesses never held made tune save priors {"spec": 0.0}, which the next load refused as
    an odd value: the whole tuning was thrown away, so every start measured again and tune showed no 'saved:'."""
    import fake_backend

    target, draft = fake_backend.write_pair(isolated / "zero", agree=0.0)
    args = ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert check_saved(isolated / "config")["priors"]["spec"] == 0.0
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    assert any(line.startswith("saved:") for line in second.stdout.splitlines()), second.stdout


def test_a_fifo_in_place_of_a_saved_tuning_does_not_hang(isolated):
    """load() read the path whatever it was: a FIFO there blocked `export`, `run --mode auto` and `tune`
    forever (the caches in filecache.read_json_object already refuse one)."""
    import os
    import threading

    from specchat import tuning

    path = tuning.tuning_path("0123456789abcdef")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    found = []
    reader = threading.Thread(target=lambda: found.append(tuning.load("0123456789abcdef")), daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # release the blocked open before failing
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert found == [None]


def test_a_config_path_with_brackets_is_printed_as_it_is(isolated, monkeypatch):
    """'[/]' in the config directory's path was read as Rich markup: an internal error after the tuning
    was measured and saved, instead of the report's last line."""
    import fake_backend

    target, draft = fake_backend.write_pair(isolated / "files")
    target = target.rename(target.with_name("[i]t.fake.gguf"))
    config = isolated / "a[/]b"
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(config))
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"])
    assert result.exit_code == 0, result.output
    assert f"saved to {config / 'tuning'}" in result.stdout and "specchat tune: [i]t.fake.gguf" in result.stdout


def test_more_threads_than_cpus_show_the_saved_tuning(fake_models, isolated):
    """`tune --threads 999` saved its tuning under the capped count but looked the previous one up under 999:
    a second tune never showed the 'saved:' line to compare with."""
    target, draft = fake_models
    args = ["tune", "--target", str(target), "--draft", str(draft), "-n", "8", "--threads", "999"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    assert any(line.startswith("saved:") for line in second.stdout.splitlines()), second.stdout


def test_a_tune_measured_under_load_does_not_say_what_auto_starts_from(fake_models, isolated, monkeypatch):
    """A tuning measured under load is not trusted: run measures its costs again and export takes its
    defaults, yet tune's last line said 'on this machine auto starts from: ngram (k=3)' as if it applied."""
    from specchat import costmeasure

    monkeypatch.setattr(costmeasure, "_busy", lambda _steps, _load: True)
    target, draft = fake_models
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"])
    assert result.exit_code == 0, result.output
    last = result.stdout.splitlines()[-1]
    assert last.startswith("measured under load: ") and "run tune again when idle" in last, last
    assert "on this machine auto starts from" not in result.stdout
    export = CliRunner().invoke(app, ["export", "--to", "llama-server", "--target", str(target), "--draft", str(draft)])
    assert "other programs" in export.stderr, export.output  # what the line says export does


def test_run_after_a_tune_under_load_says_why_it_measures_again(fake_models, isolated, seed_tuning):
    """run said 'measuring ... (once; `specchat tune` refines)' right after a tune, whose result was not
    trusted because it was measured under load: 'once' read as if no tuning had been saved."""
    from specchat.costmodel import Costs

    target, draft = fake_models
    costs = Costs({n: 1.0 + 0.02 * (n - 1) for n in (1, 2, 4, 8, 16)}, 0.05, 1e-3, 1e-3, busy=True)
    seed_tuning(target, draft, costs)
    result = CliRunner().invoke(app, ["run", "--target", str(target), "--draft", str(draft), "-n", "8", "Hi"])
    assert result.exit_code == 0, result.output
    assert "(the saved one was measured under load;" in result.stderr and "(none saved yet;" not in result.stderr


def test_a_tune_under_load_keeps_the_quiet_costs_and_saves_the_acceptance(
    fake_models, isolated, seed_tuning, monkeypatch
):
    """run never saves a measurement taken under load; tune overwrote a quiet one with it, so a good
    tuning was lost to a moment's load until tune ran again on an idle machine. The quiet costs are kept;
    but the acceptance tune measured, which load does not change, was thrown away with the rest: right
    after a tune, export and auto went on from an assumed 60% ('assumed; `specchat tune` measures it')."""
    from specchat import costmeasure

    target, draft = fake_models
    path = seed_tuning(target, draft, keep_draft=True, mode="spec")
    before = json.loads(path.read_text())
    monkeypatch.setattr(costmeasure, "_busy", lambda _steps, _load: True)
    files = ["--target", str(target), "--draft", str(draft)]
    result = CliRunner().invoke(app, ["tune", *files, "-n", "8"])
    assert result.exit_code == 0, result.output
    last = result.stdout.splitlines()[-1]
    assert last.startswith("measured under load: the saved costs, measured on a quiet machine, are kept"), last
    assert "with the acceptance measured now" in last and last.endswith(f"saved to {path}"), last
    after = json.loads(path.read_text())
    assert {key: after[key] for key in ("v", "c", "step_s", "busy", "stale", "source")} == {
        key: before[key] for key in ("v", "c", "step_s", "busy", "stale", "source")
    }
    assert before["priors"] == {} and 0 < after["priors"]["spec"] <= 1
    export = CliRunner().invoke(app, ["export", "--to", "llama-server", *files])
    assert export.exit_code == 0 and "(measured by tune)" in export.stderr, export.output


def test_a_tune_under_load_with_no_acceptance_to_keep_saves_nothing(fake_models, isolated, monkeypatch):
    """A lone --target measures no draft model's acceptance: beside a quiet tuning, nothing is saved."""
    from specchat import costmeasure, tunemeasure, tuning, tuningsave
    from specchat.costmodel import Costs
    from specchat.runtime import Options, Resolved

    target, _draft = fake_models
    key = tuning.key_for(Resolved(None, target, None), Options(target_path=target))
    costs = Costs({n: 1.0 + 0.02 * (n - 1) for n in tunemeasure.QUICK_BATCHES}, None, 1e-3, 1e-3)
    path = tuningsave.save(tuning.Tuning(key, costs))
    before = path.read_bytes()
    monkeypatch.setattr(costmeasure, "_busy", lambda _steps, _load: True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "-n", "8"])
    assert result.exit_code == 0, result.output
    last = result.stdout.splitlines()[-1]
    assert last.startswith("measured under load: not saved; the saved tuning") and "is kept" in last, last
    assert path.read_bytes() == before


def test_a_context_too_small_for_what_tune_measures_is_refused_before_measuring(fake_models, isolated, monkeypatch):
    """`tune --ctx 64` measured for minutes on the real pair, then failed on the first prompt."""
    from specchat import tunemeasure

    measured = []
    monkeypatch.setattr(tunemeasure, "calibrate", lambda *args, **kwargs: measured.append(1))
    target, draft = fake_models
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "--ctx", "64"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: a context of 64 tokens cannot hold what tune measures"), result.stderr
    assert "use --ctx " in lines[-1] and not measured and "Traceback" not in result.output


def test_a_context_llama_cpp_rounds_up_is_named_as_asked_and_as_made(fake_models, isolated, monkeypatch):
    """`tune --ctx 64` on the real pair said "a context of 256 tokens": llama.cpp's rounding, not what was typed."""
    from fake_backend import FakeEngine

    from specchat import tunemeasure

    real_init = FakeEngine.__init__

    def rounded(self, path, spec, n_ctx, interrupt=None):  # as llama.cpp: a multiple of 256
        real_init(self, path, spec, -(-n_ctx // 256) * 256, interrupt)

    monkeypatch.setattr(FakeEngine, "__init__", rounded)
    monkeypatch.setattr(tunemeasure, "calibrate", lambda *args, **kwargs: pytest.fail("measured"))
    target, draft = fake_models
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "--ctx", "64"])
    assert result.exit_code == 2, result.output
    last = [line for line in result.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("error: --ctx 64 (llama.cpp makes 256 tokens) cannot hold what tune measures"), last


def test_the_context_tune_asks_for_holds_what_it_measures(fake_models, isolated):
    """The hint said `--ctx 1024` whatever the model: the fake's byte-level tokenizer needs more, so the
    context the hint gave was refused in turn, with the same hint."""
    target, draft = fake_models
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "--ctx", "1024"])
    assert result.exit_code == 2, result.output
    needed = int(re.search(r"\((\d+) tokens\)", result.stderr).group(1))
    asked = int(re.search(r"use --ctx (\d+) or more", result.stderr).group(1))
    assert needed > 1024 and asked >= needed and asked % 256 == 0


def test_the_tune_table_shows_a_file_names_control_characters_rather_than_sending_them():
    from rich.console import Console

    from specchat.tableview import tune_table

    console = Console(record=True, width=100, color_system=None)
    console.print(tune_table("evil\x1b[2J.gguf", []))
    text = console.export_text()
    assert "\x1b" not in text and "\\x1b[2J" in text


@pytest.mark.parametrize("width", [40, 50, 55, 80])
def test_the_tune_table_never_cuts_a_number_on_a_narrow_terminal(width):
    """In a 40- or 50-column pane the table cut its cells to `1.…`, `12.5…` and `tar…`: the numbers it exists
    for. The headers give way instead (from 55 columns the table fits; below, its lines are a little wider)."""
    from rich.console import Console

    from specchat.tableview import tune_table
    from specchat.tunemeasure import ModeEstimate

    estimates = [ModeEstimate("target", 0, None, 1.0), ModeEstimate("spec", 0, 0.48, 1.0, 1, 0.58)]
    estimates.append(ModeEstimate("ngram", 39, 0.06, 12.55, 39, 12.55))
    console = Console(record=True, width=width, color_system=None, soft_wrap=True)  # as stdout_console()
    console.print(tune_table("qwen2.5-coder-1.5b", estimates))
    rows = [line for line in console.export_text().splitlines() if line.startswith("│")]
    cells = [[cell.strip() for cell in row.strip("│").split("│")] for row in rows]
    assert cells == [
        ["target", "-", "0", "1.00x", "-", "-"],
        ["spec", "48%", "0", "1.00x", "1", "0.58x"],
        ["ngram", "6%", "39", "12.55x", "39", "12.55x"],
    ], rows


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("garbage{", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        # "not a tuning of this version" did not say which: a newer specchat's (upgrade), or an older one's
        ('{"version": 99}', "written by a newer specchat (tuning version 99; this one reads 4)"),
        ('{"version": 3}', "an older specchat's (tuning version 3; this one reads 4)"),
        ('{"version": "4"}', "not a tuning (its version is '4')"),
        ("[1, 2]", "not a tuning (not a JSON object)"),
    ],
)
def test_a_broken_saved_tuning_is_named_by_run_and_tune_and_measured_again(
    fake_models, isolated, seed_tuning, content, reason
):
    """A saved tuning that could not be used (hand-edited, cut short, of another version) was passed over in
    silence: run said '(once; ...)' as if none had been saved, and tune replaced the file without a word."""
    target, draft = fake_models
    path = seed_tuning(target, draft)
    files = ["--target", str(target), "--draft", str(draft)]
    for args, said in ((["run", *files, "-n", "8", "Hi"], "measuring"), (["tune", *files, "-n", "8"], "the saved")):
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0 and "Traceback" not in result.output, result.output
        line = next(line for line in result.stderr.splitlines() if line.startswith(said))
        assert f"the saved tuning {path} cannot be used: {reason}" in line and "none saved" not in line, result.stderr


@pytest.mark.parametrize("command", [["tune"], ["bench", "--prompts", "-"], ["bench", "--prompts", "-", "-o", "r.md"]])
def test_a_closed_stdout_is_refused_before_anything_is_measured(command, isolated):
    """tune measured for minutes, saved, and only then failed to write its report to a closed stdout; the
    bench lost its whole report. Both now say so at once (in a process of its own: only there is stdout
    really closed)."""
    import os
    import subprocess
    import sys

    env = os.environ | {"HF_HUB_OFFLINE": "1"}
    shell = f"{sys.executable} -m specchat {' '.join(command)} >&- < /dev/null"
    done = subprocess.run(
        ["bash", "-c", shell], capture_output=True, text=True, timeout=120, env=env, cwd=isolated, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "cannot write the report to stdout: it is closed" in done.stderr and "Traceback" not in done.stderr


def test_tune_help_names_every_command_that_reads_the_tuning_and_where_it_is():
    """tune --help said only `run` and `bench` use the tuning (serve and export do too), named no folder, and
    called -n 'Tokens per measurement' (the timings take none: it is the length of each acceptance reply)."""
    result = CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "250"}, terminal_width=250)
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "`run`, `serve`, `bench` and `export` use them; `run --no-tuning` ignores them" in text
    assert "tuning/ folder (SPECCHAT_CONFIG_DIR moves it" in text and "Tokens per measurement" not in text


def test_tune_json_is_one_object_of_what_the_table_says(fake_models, isolated):
    """tune had no machine-readable output, where run, bench, models, logs and export have one: a script
    had to parse the table or find the saved file. The notes stay on stderr."""
    target, draft = fake_models
    files = ["--target", str(target), "--draft", str(draft), "-n", "8"]
    first = CliRunner().invoke(app, ["tune", *files, "--json"])
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    assert set(report) == {"pair", "target", "draft", "machine", "estimates", "now", "saved", "ceilings", "best"} | {
        "kept_saved_costs",
        "path",
    }
    assert report["target"] == str(target) and report["draft"] == str(draft) and report["saved"] is None
    assert [e["mode"] for e in report["estimates"]] == ["target", "spec", "ngram"]
    assert set(report["now"]["v"]) == {str(n) for n in FULL_BATCHES} and report["now"]["source"] == "tune"
    # spelt as bench's cost_model.ceiling spells them: "draft model", with a space, was another key for the same thing
    assert set(report["ceilings"]) == {"lookup", "draft_model"} and report["path"] == str(check_saved_path(isolated))
    again = json.loads(CliRunner().invoke(app, ["tune", *files, "--json"]).stdout)
    assert again["saved"]["v"] == report["now"]["v"]  # saved vs now, as the table's two lines


def test_tune_json_help_names_every_key_of_the_object(fake_models, isolated):
    """--help listed estimates, now, saved, ceilings, best and path; not pair, target, draft or kept_saved_costs,
    which the object has too (export's --help names all of its object's keys)."""
    target, draft = fake_models
    made = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8", "--json"])
    shown = CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "250"}, terminal_width=250)
    help_text = " ".join(shown.stdout.split())
    listed = re.search(r"--json\W+One JSON object on stdout instead of the table: ([\w, ]+)\.", help_text)
    assert listed is not None, shown.stdout
    assert listed.group(1).split(", ") == list(json.loads(made.stdout))


def check_saved_path(isolated):
    (path,) = (isolated / "config" / "tuning").glob("*.json")
    return path


def test_a_link_into_a_folder_tune_may_not_write_is_named_as_the_link(tmp_path):
    """For a user who may not write the link's folder the probe there fails with PermissionError, which went to
    'cannot save the tuning in CONFIG: Permission denied', hint 'give specchat a writable config directory'
    (root, as the tests run, may write anywhere: the error is given directly)."""
    from specchat.cli.tunesteps import unreplaceable_error as _unreplaceable

    path = tmp_path / "key.json"
    path.symlink_to(tmp_path / "ro" / "key.json")
    found = _unreplaceable(path, PermissionError(13, "Permission denied", str(tmp_path / "ro" / ".specchat-probe")))
    assert found is not None and found.message.startswith(f"cannot save the tuning as {path}: it is a link to ")
    assert "remove that link" in found.hint
    assert _unreplaceable(tmp_path / "absent.json", PermissionError(13, "Permission denied")) is None


@pytest.mark.parametrize("blocker", ["dangling link", "link below a file", "loop of links", "fifo"])
def test_a_tuning_file_that_cannot_be_written_is_one_line_before_loading(
    fake_models, isolated, seed_tuning, monkeypatch, blocker
):
    """Only a directory at the tuning file's path was checked, after loading both models (seconds to minutes); a
    link into a missing folder or below a file, a loop of links or a FIFO nobody reads failed the save, after
    the whole measurement."""
    from specchat import runtime

    def load(*_args, **_kwargs):
        raise AssertionError("a model was loaded before the tuning's path was checked")

    target, draft = fake_models
    path = seed_tuning(target, draft)
    path.unlink()
    if blocker == "dangling link":
        path.symlink_to(isolated / "missing" / "tuning.json")
    elif blocker == "link below a file":
        (isolated / "a-file").write_text("")
        path.symlink_to(isolated / "a-file" / "tuning.json")
    elif blocker == "loop of links":
        path.symlink_to(path)
    else:
        os.mkfifo(path)
    monkeypatch.setattr(runtime, "_load", load)
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    # named, with what stands there: the hint to give specchat a writable config directory sent the user to a folder
    # that was fine ("cannot save the tuning in DIR: No such device or address")
    what, kind = ("a FIFO or device nobody reads", "FIFO or device") if blocker == "fifo" else ("a link to ", "link")
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot save the tuning as {path}: it is {what}"), lines
    assert f"hint: remove that {kind} (tune saves its file there); nothing was measured" in lines[0]
    beside = [p.name for p in path.parent.iterdir() if p.name != ".lock"]  # the writers' lock (seed_tuning's), kept
    assert beside == [path.name]  # nothing written beside it, no probe left


def test_a_newer_specchats_tuning_is_kept_by_run_and_named_by_tune(fake_models, isolated, seed_tuning, monkeypatch):
    """Two versions sharing a config folder: an older specchat's run said the newer one's tuning could not be used,
    then saved its own over it, on every start; the newer one then measured again, and so on."""
    from specchat import costmeasure

    monkeypatch.setattr(costmeasure, "_busy", lambda *_: False)  # a quiet measurement, the one that was saved
    target, draft = fake_models
    path = seed_tuning(target, draft)
    path.write_text('{"version": 99, "v": {"1": 1.0}}', encoding="utf-8")
    files = ["--target", str(target), "--draft", str(draft)]
    result = CliRunner().invoke(app, ["run", *files, "-n", "8", "Hi"])
    assert result.exit_code == 0, result.output
    assert "the newer specchat's tuning is kept (upgrade specchat to start from it)" in result.stderr
    assert json.loads(path.read_text(encoding="utf-8"))["version"] == 99
    result = CliRunner().invoke(app, ["tune", *files, "-n", "8"])  # asked for: replaced, and said whose it was
    assert "this measurement replaces it (upgrade specchat to keep using it)" in result.stderr, result.output


@pytest.mark.parametrize("kind", ["fifo", "nested"])
def test_whether_a_newer_specchat_wrote_the_tuning_is_asked_without_blocking_or_failing(isolated, kind):
    """A FIFO at the tuning's path blocked `run --mode auto` for good once it asked whether a newer specchat wrote
    it (read() refuses a FIFO before reading); a deeply nested JSON raised RecursionError there."""
    import os
    import threading

    from specchat.tuning import tuning_path, written_by_newer

    path = tuning_path("k")
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("[" * 100_000, encoding="utf-8")
    answers = []
    asking = threading.Thread(target=lambda: answers.append(written_by_newer("k")), daemon=True)
    asking.start()
    asking.join(timeout=10)
    assert answers == [False]


def test_tune_names_the_batch_sizes_it_times_as_the_code_lists_them():
    """Its notice wrote the sizes out by hand beside FULL_BATCHES, a second list to keep in step; modes.md says
    the same words."""
    from pathlib import Path

    from specchat.tunemeasure import FULL_BATCHES, batch_sizes

    assert batch_sizes(FULL_BATCHES) == "1..16, 20, 24, 28, 32, 40, 48, 56 and 64"
    assert batch_sizes((1, 2, 4)) == "1, 2 and 4" and batch_sizes((1,)) == "1"
    modes_md = (Path(__file__).parent.parent / "docs" / "modes.md").read_text(encoding="utf-8")
    assert f"verify batches of {batch_sizes(FULL_BATCHES)} tokens" in " ".join(modes_md.split())


def test_the_default_threads_on_fewer_cpus_than_the_machine_has_are_keyed_by_their_count(tmp_path, monkeypatch):
    """`taskset -c 0` (or a container's cpuset) runs the default threads on 1 of 2 CPUs: keyed as "0" like the whole
    machine's, its tuning (a `tune` of minutes) was trusted by a later run on both CPUs, costs measured on 1 thread."""
    from specchat.tuning import machine_key

    target = tmp_path / "t.gguf"
    target.write_bytes(b"x")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    whole = machine_key(target, None, 0, 0, 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    assert machine_key(target, None, 0, 0, 0) != whole
    assert machine_key(target, None, 0, 0, 0) == machine_key(target, None, 1, 0, 0)  # the threads it runs on


def test_the_tuning_says_what_it_measured_on(fake_models, isolated):
    """tune --json and the saved file named neither the threads nor the CPUs (only the key's hash covered them):
    a tuning read later could not say what it measured. Both carry bench's meta.machine's cpu, cpus, usable_cpus
    and the threads used."""
    from specchat.bench import machine_info
    from specchat.cpuload import usable_cpus

    target, draft = fake_models
    made = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8", "--json"])
    assert made.exit_code == 0, made.output
    machine = json.loads(made.stdout)["machine"]
    info = machine_info()
    assert machine == {"cpu": info["cpu"], "cpus": info["cpus"], "usable_cpus": usable_cpus(), "threads": usable_cpus()}
    assert json.loads(check_saved_path(isolated).read_text(encoding="utf-8"))["machine"] == machine
    again = CliRunner().invoke(
        app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8", "--json", "--threads", "1"]
    )
    assert json.loads(again.stdout)["machine"]["threads"] == 1


def test_a_tuning_saved_before_the_machine_was_recorded_is_read_and_kept(isolated):
    """Files of the same version written before the machine block: read as they are, the block unknown."""
    from specchat import tuning, tuningsave
    from specchat.costmodel import Costs

    saved = tuning.Tuning("k1", Costs({1: 1.0, 2: 1.1}, 0.5, 1e-3, 1e-3)).as_dict()
    saved.pop("machine", None)
    tuning.tuning_path("k1").parent.mkdir(parents=True)
    tuning.tuning_path("k1").write_text(json.dumps(saved), encoding="utf-8")
    old = tuning.load("k1")
    assert old is not None and old.machine == {}
    tuningsave.mark_stale(old)
    assert tuning.load("k1").stale


@pytest.mark.parametrize("meanwhile", ["marked stale", "calibrated again"])
def test_a_tune_under_load_decides_on_the_tuning_saved_when_it_saves(
    fake_models, isolated, seed_tuning, monkeypatch, meanwhile
):
    """tune read the saved tuning before minutes of measuring and, busy, saved that old copy with the acceptance
    measured: a run that marked it stale meanwhile was undone (stale: false, trusted again), and a quiet
    calibration another run saved meanwhile was replaced by the old costs. The other writer runs at the moment
    the measuring ends; tune decides on what the file holds then."""
    from specchat import costmeasure, tunemeasure, tuning, tuningsave
    from specchat.costmodel import Costs

    target, draft = fake_models
    path = seed_tuning(target, draft, keep_draft=True, mode="spec")
    key = path.stem
    fresh = Costs({n: 1.0 + 0.05 * (n - 1) for n in tunemeasure.QUICK_BATCHES}, 0.07, 2e-3, 2e-3)
    monkeypatch.setattr(costmeasure, "_busy", lambda _steps, _load: True)
    real = tunemeasure.calibrate

    def calibrate(*args, **kwargs):
        measured = real(*args, **kwargs)
        if meanwhile == "marked stale":  # a run whose steps drifted from the saved costs
            tuningsave.mark_stale(tuning.load(key))
        else:  # a run that found it stale and saved a quiet calibration
            tuningsave.save(tuning.Tuning(key, fresh))
        return measured

    monkeypatch.setattr(tunemeasure, "calibrate", calibrate)
    result = CliRunner().invoke(app, ["tune", "--target", str(target), "--draft", str(draft), "-n", "8", "--json"])
    assert result.exit_code == 0, result.output
    saved, report = tuning.load(key), json.loads(result.stdout)
    if meanwhile == "marked stale":  # the busy measurement is no better: either way the next start measures
        assert not tuning.trusted(saved), json.loads(path.read_text())
    else:  # the quiet costs kept are the fresh ones, with the acceptance measured now
        assert saved.costs.verify == fresh.verify and saved.costs.draft_step == fresh.draft_step
        assert tuning.trusted(saved) and 0 < saved.priors["spec"] <= 1
        assert report["kept_saved_costs"] and report["saved"]["c"] == fresh.draft_step  # the costs it kept


def _quiet_costs(slope: float):
    from specchat.costmodel import Costs

    return Costs({n: 1.0 + slope * (n - 1) for n in (1, 2, 4, 8, 16)}, 0.05, 1e-3, 1e-3)


def test_a_drift_from_costs_no_longer_saved_leaves_the_saved_ones_alone(isolated):
    """mark_stale marked whatever the file held: a run that drifted from the old costs marked stale the quiet
    calibration another run had saved since, and the next start measured again for nothing."""
    from specchat import tuning, tuningsave

    old, fresh = tuning.Tuning("k1", _quiet_costs(0.02)), tuning.Tuning("k1", _quiet_costs(0.05))
    tuningsave.save(old)
    tuningsave.save(fresh)
    tuningsave.mark_stale(old)
    assert tuning.trusted(tuning.load("k1")) and tuning.load("k1").costs.verify == fresh.costs.verify
    tuningsave.mark_stale(fresh)
    assert tuning.load("k1").stale


def test_a_calibration_saved_while_mark_stale_writes_is_not_replaced(isolated, monkeypatch):
    """mark_stale read the file and wrote it back marked stale: a quiet calibration another process saved in
    between was replaced by the old costs marked stale. Writers take turns: the other process, started at that
    moment, finds the lock held (it says so, then saves), or without one saves at once, as it did before."""
    import subprocess
    import sys

    from specchat import tuning, tuningsave

    old = tuning.Tuning("k1", _quiet_costs(0.02))
    tuningsave.save(old)
    script = (
        "import sys\nfrom filelock import FileLock, Timeout\nfrom specchat import tuning, tuningsave\n"
        "from specchat.costmodel import Costs\n"
        "lock = FileLock(tuning.tuning_path('k1').parent / '.lock')\n"
        "try:\n    lock.acquire(timeout=0)\nexcept Timeout:\n    print('held', flush=True)\n"
        "else:\n    lock.release()\n    print('free', flush=True)\n"
        "verify = {n: 1.0 + 0.05 * (n - 1) for n in (1, 2, 4, 8, 16)}\n"
        "tuningsave.save(tuning.Tuning('k1', Costs(verify, 0.05, 1e-3, 1e-3)))\n"
    )
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
    real, children = tuning.load, []

    def load(key):
        saved = real(key)
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
        children.append(child)
        if child.stdout.readline().strip() == "free":  # nothing holds it: the other save lands before the write
            child.wait(timeout=60)
        return saved

    monkeypatch.setattr(tuningsave, "load", load)
    tuningsave.mark_stale(old)
    assert children and children[0].wait(timeout=60) == 0
    saved = real("k1")
    assert tuning.trusted(saved) and saved.costs.verify == _quiet_costs(0.05).verify
