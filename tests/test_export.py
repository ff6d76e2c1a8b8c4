"""`specchat export`: the llama-server and vLLM commands, chosen from the saved tuning, quoted for a shell.

The fast tests use fake model files in a test's own directories (no model is loaded: export only
prints). The real test starts the llama-server built from llama-cpp-python's vendored llama.cpp with
the exported command, when that binary is there, and checks that its replies were drafted."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import fake_backend
import pytest
from conftest import MINE
from typer.testing import CliRunner

from specchat import export as exporting
from specchat import exportchoice
from specchat.cli import app
from specchat.costmodel import Costs
from specchat.export import TARGETS
from specchat.tunemeasure import QUICK_BATCHES
from specchat.tuning import Tuning

runner = CliRunner()
CPU_COSTS = Costs({n: float(n) for n in QUICK_BATCHES}, 0.7, 0.1, 0.1)  # a draft step costs 0.7 target steps
SERVER = Path.home() / ".cache" / "specchat" / "llama.cpp-0.3.36" / "build" / "bin" / "llama-server"


def run_export(*args: str):
    return runner.invoke(app, ["export", *args])


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_to_and_mode_in_capitals_are_taken(fake_models, seed_tuning):
    """`export --to VLLM --mode SPEC` was "unknown --to 'VLLM'"."""
    target, draft = fake_models
    seed_tuning(target, draft)
    result = run_export("--to", "VLLM", "--mode", "Spec", "--target", str(target), "--draft", str(draft), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["to"] == "vllm"


def test_llama_server_draft_model_from_tuning(fake_models, seed_tuning):
    target, draft = fake_models
    seed_tuning(target, draft)  # GPU-like costs: the draft model pays
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft), "--json")
    assert result.exit_code == 0, result.output
    made = json.loads(result.stdout)
    argv = made["argv"]
    assert argv[0] == "llama-server" and value(argv, "-m") == str(target.resolve())
    assert value(argv, "-md") == str(draft.resolve()) and value(argv, "--spec-type") == "draft-simple"
    assert int(value(argv, "--spec-draft-n-max")) == made["speculation"]["k"] >= 1
    assert value(argv, "-c") == "4096" and value(argv, "-np") == "1" and int(value(argv, "-t")) >= 1
    assert "-ngl" not in argv  # specchat's -1 is llama-server's default (auto)
    assert made["speculation"]["method"] == "draft" and "predicts" in made["speculation"]["why"]
    assert shlex.split(made["command"]) == argv


@pytest.mark.parametrize("allowed", [True, False])
def test_llama_server_reads_the_weights_as_specchat_does_here(fake_models, seed_tuning, monkeypatch, allowed):
    """Where llama.cpp has AMX, specchat loads without its extra weight layouts (engine.py: the AMX matrix
    product crashes on Q4_K): the exported command said nothing of it, and that llama-server crashed."""
    from specchat import engine

    monkeypatch.setattr(engine, "extra_buffers_allowed", lambda: allowed)
    target, draft = fake_models
    seed_tuning(target, draft)
    made = json.loads(
        run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft), "--json").stdout
    )
    assert ("--no-repack" in made["argv"]) is (not allowed)
    assert any("--no-repack" in note for note in made["notes"]) is (not allowed)


def test_json_help_names_every_key_of_the_object(fake_models, seed_tuning):
    """--help listed command, argv, speculation and notes, not `to`, which the object starts with
    (docs/serve.md had all five)."""
    target, draft = fake_models
    seed_tuning(target, draft)
    made = json.loads(run_export("--to", "vllm", "--target", str(target), "--draft", str(draft), "--json").stdout)
    shown = runner.invoke(app, ["export", "--help"], env={"COLUMNS": "250"}, terminal_width=250)
    help_text = " ".join(shown.stdout.split())
    listed = re.search(r"--json\W+One object: ([\w, ]+)\.", help_text)
    assert listed is not None, help_text
    assert listed.group(1).split(", ") == list(made)


def test_serve_md_names_every_key_of_speculation(fake_models):
    """docs/serve.md listed `speculation` among --json's keys and named its `why` and `k` in passing; `method`,
    which says whether the command drafts with the draft model, and its values were in no doc."""
    target, draft = fake_models
    exported = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft), "--json")
    made = json.loads(exported.stdout)
    text = (Path(__file__).parent.parent / "docs" / "serve.md").read_text(encoding="utf-8")
    start = text.index('`{"to", "command", "argv", "speculation", "notes"}`')
    named = set(re.findall(r"`\"?(\w+)\"?`", text[start : text.index("\n\n", start)]))
    assert set(made["speculation"]) | {"draft", "ngram"} <= named


def test_ngram_when_the_draft_model_cannot_pay(fake_models, seed_tuning):
    target, draft = fake_models
    seed_tuning(target, draft, CPU_COSTS, threads=1)  # tuning is per thread count, as for run
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft), "--threads", "1")
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout)
    assert value(argv, "--spec-type") == "ngram-mod" and "-md" not in argv and "--spec-draft-n-max" not in argv
    assert value(argv, "-t") == "1"
    assert "cannot pay here" in result.stderr and "0.70 target steps" in result.stderr  # says which and why
    assert "--draft-max" not in result.stderr  # a rename of a flag the command does not pass


def test_more_threads_than_cpus_are_capped_as_run_caps_them(fake_models, seed_tuning):
    """run caps --threads at the usable CPUs and saves its tuning under that count; export put `-t 999` in
    the command and, looking under 999, found no tuning."""
    from specchat.engineconfig import default_threads

    target, draft = fake_models
    seed_tuning(target, draft, CPU_COSTS, threads=default_threads())
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft), "--threads", "999")
    assert result.exit_code == 0, result.output
    assert value(shlex.split(result.stdout), "-t") == str(default_threads())
    assert f"--threads 999 is more than the {default_threads()} usable CPUs" in result.stderr
    assert "cannot pay here" in result.stderr  # the saved tuning was found


def test_a_pair_beside_target_is_named_as_not_used(fake_models):
    """`export --pair P --target T` took T (and no draft) and said nothing of --pair."""
    target, _draft = fake_models
    result = run_export("--to", "llama-server", "--pair", "qwen2.5-coder-1.5b", "--target", str(target))
    assert result.exit_code == 0, result.output
    assert "--pair qwen2.5-coder-1.5b is not used: --target names the files" in result.stderr
    assert "-md" not in shlex.split(result.stdout)


@pytest.mark.parametrize("to", ["llama-server", "vllm"])
def test_a_draft_beside_mode_ngram_is_named_as_not_used(fake_models, to):
    """`--mode ngram --draft D` printed a draftless command and said nothing of the draft it dropped."""
    target, draft = fake_models
    result = run_export("--to", to, "--target", str(target), "--draft", str(draft), "--mode", "ngram")
    assert result.exit_code == 0, result.output
    # run's words for it, the parenthesis saying what becomes of it here (export loads nothing)
    assert (
        f"--draft {draft.name} is not used: --mode ngram does not draft with the draft model (the command does not "
        "name it)" in result.stderr
    )
    assert str(draft) not in result.stdout


def test_draft_gpu_layers_of_a_draftless_llama_server_command_are_named_as_not_used(fake_models):
    """`--to llama-server --mode ngram --draft-gpu-layers 0` printed a command without -ngld and said nothing of
    the option it dropped, where a vLLM command names the options it cannot carry."""
    target, _draft = fake_models
    result = run_export("--to", "llama-server", "--target", str(target), "--mode", "ngram", "--draft-gpu-layers", "0")
    assert result.exit_code == 0, result.output
    assert "--draft-gpu-layers 0 is not used: the command names no draft model" in result.stderr
    assert "-ngld" not in shlex.split(result.stdout)
    quiet = run_export("--to", "llama-server", "--target", str(target), "--mode", "ngram")
    assert "--draft-gpu-layers" not in quiet.stderr


def test_llama_server_ngram_has_no_draft_length_to_report(fake_models):
    """ngram-mod drafts a range of lengths, not one k: the JSON says k null, and a -k given is named as unused
    (with the flags that set the range), not reported as if it had been passed."""
    target, _draft = fake_models
    common = ["--to", "llama-server", "--target", str(target), "--mode", "ngram"]
    as_json = run_export(*common, "--json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["speculation"]["k"] is None, as_json.output
    result = run_export(*common, "-k", "3")
    assert result.exit_code == 0 and "-k 3 is not used" in result.stderr and "--spec-ngram-mod-n-max" in result.stderr
    assert "3" not in shlex.split(result.stdout)


def test_no_tuning_is_a_default_with_a_hint(fake_models):
    target, draft = fake_models
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft))
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout)
    assert value(argv, "--spec-draft-n-max") == "4" and "run `specchat tune` first" in result.stderr
    assert "older llama-server builds (with --draft-max) take --draft-max 4" in result.stderr


def test_spec_with_a_target_and_no_draft_names_the_missing_flag(fake_models):
    target, _draft = fake_models
    result = run_export("--to", "llama-server", "--target", str(target), "--mode", "spec")
    assert result.exit_code == 2 and "--mode spec needs a draft model" in result.stderr, result.output
    assert "--draft FILE" in result.stderr and "--pair" not in result.stderr  # export reads no pair beside --target


def test_choice_follows_measured_acceptance():
    costs = Costs({n: 1.0 + 0.3 * (n - 1) for n in QUICK_BATCHES}, 0.3, 0.1, 0.1)
    good = exportchoice.choose(Tuning("k", costs, {"spec": 0.95}), True)
    poor = exportchoice.choose(Tuning("k", costs, {"spec": 0.05}), True)
    assert good.method == "draft" and good.k >= 2 and "measured by tune" in good.why
    assert poor.method == "ngram" and "would lose" in poor.why
    assert exportchoice.choose(Tuning("k", costs, {"spec": 0.05}), True, k=6) == replace(poor, k=6)
    assert exportchoice.choose(poor_tuning := Tuning("k", costs, {"spec": 0.05}), True, "spec").method == "draft"
    assert exportchoice.choose(poor_tuning, False).method == "ngram"  # no draft model at all
    busy = Tuning("k", replace(costs, busy=True))
    assert exportchoice.choose(busy, True).k == 4 and "other programs" in exportchoice.choose(busy, True).why


def test_an_untrusted_tuning_asks_for_tune_again_not_first():
    """Right after a `tune` measured under load (or a run found it stale), export said 'run `specchat tune`
    first', as if none had run."""
    costs = Costs({n: 1.0 + 0.3 * (n - 1) for n in QUICK_BATCHES}, 0.3, 0.1, 0.1)
    busy = exportchoice.choose(Tuning("k", replace(costs, busy=True), source="tune"), True).why
    stale = exportchoice.choose(Tuning("k", costs, stale=True), True).why
    assert "tune` again when the machine is idle" in busy and "first" not in busy, busy
    assert "tune` again" in stale and "idle" not in stale and "first" not in stale, stale
    assert busy.startswith("the saved tuning was taken while other programs used the CPUs: a default"), busy
    assert stale.startswith("the saved tuning is stale: a default"), stale


def test_vllm_speculative_config_is_json(fake_models, seed_tuning):
    target, draft = fake_models
    seed_tuning(target, draft)
    result = run_export("--to", "vllm", "--target", str(target), "--draft", str(draft), "-k", "5")
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout)
    assert argv[:3] == ["vllm", "serve", str(target.resolve())]
    config = json.loads(value(argv, "--speculative-config"))
    assert config == {"method": "draft_model", "model": str(draft.resolve()), "num_speculative_tokens": 5}
    assert "GGUF support is experimental" in result.stderr and "--tokenizer" in result.stderr


def test_vllm_says_which_options_only_chose_the_tuning(fake_models):
    """vLLM's command cannot carry --threads or layer counts: dropped unsaid, they read as if it used them."""
    target, draft = fake_models
    args = ["--target", str(target), "--draft", str(draft), "--mode", "spec"]
    given = run_export("--to", "vllm", *args, "--threads", "1", "--gpu-layers", "0")
    assert given.exit_code == 0, given.output
    assert "--threads 1, --gpu-layers 0: not in vLLM's command, which has no such option" in given.stderr
    assert "--threads" not in given.stdout and "--gpu-layers" not in given.stdout
    plain = run_export("--to", "vllm", *args)
    assert "not in vLLM's command" not in plain.stderr


@pytest.mark.parametrize(
    ("to", "flag"), [("llama-server", "--chat-template-kwargs"), ("vllm", "--default-chat-template-kwargs")]
)
def test_chat_template_kwargs_are_carried_as_each_servers_flag(fake_models, seed_tuning, to, flag):
    """`serve --chat-template-kwargs '{"enable_thinking": false}'` kept Qwen3's thinking off; the exported command
    dropped them (export took no such option), and the same model served by it thought. llama-server's flag has the
    same name and JSON; vLLM's server-wide one is --default-chat-template-kwargs. None given: no flag."""
    target, draft = fake_models
    seed_tuning(target, draft)
    args = ["--to", to, "--target", str(target), "--draft", str(draft)]
    result = run_export(*args, "--chat-template-kwargs", '{"enable_thinking": false, "a": [1]}')
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout)
    assert json.loads(value(argv, flag)) == {"enable_thinking": False, "a": [1]}
    assert flag not in shlex.split(run_export(*args).stdout)
    bad = run_export(*args, "--chat-template-kwargs", "[1]")
    assert bad.exit_code == 2 and "--chat-template-kwargs is a JSON array, not an object" in bad.stderr


def test_vllm_ngram_and_hub_repos(fake_models, seed_tuning, isolated, overlay):
    target, draft = fake_models
    seed_tuning(target, draft, CPU_COSTS)
    overlay(MINE.format(draft="draft.fake.gguf"))
    result = run_export("--to", "vllm", "--pair", "mine", "--json")  # not on this machine: vLLM pulls the repos
    assert result.exit_code == 0, result.output
    argv = json.loads(result.stdout)["argv"]
    assert argv[2] == "a/t" and value(argv, "--served-model-name") == "mine"
    assert json.loads(value(argv, "--speculative-config"))["model"] == "a/d"
    models = isolated / "models"
    models.mkdir()
    for path in fake_models:
        (models / path.name).write_bytes(path.read_bytes())  # now present: this machine's tuning applies
    result = run_export("--to", "vllm", "--pair", "mine", "--json")
    config = json.loads(value(json.loads(result.stdout)["argv"], "--speculative-config"))
    assert config["method"] == "ngram" and config["num_speculative_tokens"] >= 1
    assert 1 <= config["prompt_lookup_min"] <= config["prompt_lookup_max"]
    assert any("--mode spec" in note for note in json.loads(result.stdout)["notes"])


def test_paths_with_spaces_are_quoted(isolated):
    target, draft = fake_backend.write_pair(isolated / "my models" / "it's here")
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft))
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout)
    assert value(argv, "-m") == str(target.resolve()) and value(argv, "-md") == str(draft.resolve())


def test_a_missing_to_names_the_servers_it_takes(isolated):
    """`specchat export` alone said "Missing option '--to'" with the hint to read --help for its two words."""
    result = run_export()
    assert result.exit_code == 2 and "Missing option '--to'" in result.stderr, result.output
    assert "--to llama-server or --to vllm" in result.stderr


def test_errors(isolated):
    bad = run_export("--to", "ollama")
    assert bad.exit_code == 2 and "unknown --to 'ollama'" in bad.stderr and "llama-server, vllm" in bad.stderr
    unknown = run_export("--to", "llama-server", "--pair", "nope")
    assert unknown.exit_code == 2 and "unknown pair 'nope'" in unknown.stderr and "hint:" in unknown.stderr
    missing = run_export("--to", "llama-server")  # the default pair is not in this test's models directory
    lines = [line for line in missing.stderr.splitlines() if line.strip()]
    assert missing.exit_code == 1 and len(lines) == 1 and "specchat pull" in lines[0]
    assert "Traceback" not in missing.output
    for given, problem in ((isolated, "is a directory"), (Path("/no/such.gguf"), "does not exist")):
        wrong = run_export("--to", "llama-server", "--target", str(given))  # run and tune say the same
        assert wrong.exit_code == 1 and f"--target {given} {problem}" in wrong.stderr, wrong.output


@pytest.mark.real
def test_exported_llama_server_command_drafts(default_pair_paths, tmp_path):
    if not SERVER.is_file():
        pytest.skip(f"no llama-server at {SERVER} (build it: python benchmarks/llama_server.py --build-only)")
    target, draft = default_pair_paths
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft), "--mode", "spec",
                        "--ctx", "2048", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    argv = json.loads(result.stdout)["argv"]
    argv[0], argv[argv.index("--port") + 1] = str(SERVER), "0"  # the built binary; a port it picks itself
    log = tmp_path / "llama-server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
    try:
        port = _wait_listening(process, log, timeout=300)
        body = {"prompt": "def fibonacci(n):", "n_predict": 48, "temperature": 0.0, "cache_prompt": False}
        request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=600) as reply:
            timings = json.loads(reply.read())["timings"]
        assert timings["draft_n"] > 0 and 0 <= timings["draft_n_accepted"] <= timings["draft_n"], timings
    finally:  # always stopped, whatever happened above
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def _wait_listening(process: subprocess.Popen, log: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", log.read_bytes())  # once the models loaded
        if found:
            return int(found.group(1))
        assert process.poll() is None, log.read_bytes()[-3000:].decode(errors="replace")
        time.sleep(0.2)
    raise AssertionError(f"llama-server did not listen within {timeout:.0f} s: {log.read_bytes()[-3000:]!r}")


def test_all_gpu_layers_is_left_to_llama_server_and_other_negatives_are_refused(fake_models):
    """export passed -ngl -5 on, a value llama-server reads its own way (-2 is its 'all', -5 nothing it
    documents); -1 (all) is left to llama-server's default, and any other negative is a usage error."""
    target, draft = fake_models
    args = ["--to", "llama-server", "--target", str(target), "--draft", str(draft), "--mode", "spec"]
    every = shlex.split(run_export(*args, "--gpu-layers", "-1", "--draft-gpu-layers", "-1").stdout)
    assert "-ngl" not in every and "-ngld" not in every
    for flag in ("--gpu-layers", "--draft-gpu-layers"):
        refused = run_export(*args, flag, "-5")
        assert refused.exit_code == 2 and f"{flag} -5 is not a layer count" in refused.stderr
    counted = shlex.split(run_export(*args, "--gpu-layers", "0", "--draft-gpu-layers", "7").stdout)
    assert value(counted, "-ngl") == "0" and value(counted, "-ngld") == "7"


def test_ngram_needs_no_draft_file_of_the_pair(isolated):
    """--mode ngram names no draft in the command, yet a pair whose draft was not pulled was refused
    ('specchat pull' first: a download the command never uses). Other modes still need it."""
    target, _draft = fake_backend.write_pair(isolated / "files")
    (isolated / "models").mkdir()
    (isolated / "models" / target.name).write_bytes(target.read_bytes())
    (isolated / "config").mkdir()
    (isolated / "config" / "models.toml").write_text(
        f'[models.t]\nrepo = "nobody/t"\nfile = "{target.name}"\n'
        '[models.gone]\nrepo = "nobody/gone"\nfile = "gone.gguf"\n'
        '[pairs.half]\ntarget = "t"\ndraft = "gone"\n'
    )
    for to in ("llama-server", "vllm"):
        result = run_export("--to", to, "--pair", "half", "--mode", "ngram", "--json")
        assert result.exit_code == 0, result.output
        made = json.loads(result.stdout)
        assert made["speculation"]["method"] == "ngram" and "gone.gguf" not in made["command"]
    drafted = run_export("--to", "llama-server", "--pair", "half", "--mode", "spec")
    assert drafted.exit_code == 1 and "gone.gguf (draft of half) is not on this machine" in drafted.stderr


def test_a_models_folder_linked_to_a_disk_not_mounted_is_named(isolated, monkeypatch):
    """The models folder a link to another disk that is not mounted: export said the pair's files are 'not on
    this machine: specchat pull first', a download of gigabytes that are on that disk."""
    import os

    from specchat import download

    monkeypatch.setattr(download, "hub_cache_path", lambda _model: None)  # not in this machine's Hub cache either
    os.symlink("/nonexistent-disk/models", isolated / "models")
    result = run_export("--to", "llama-server")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{isolated / 'models'} is a link to /nonexistent-disk/models, which does not exist" in result.stderr
    assert "mount the disk" in result.stderr and "not on this machine" not in result.stderr


def test_a_truncated_model_file_is_refused_as_run_refuses_it(isolated):
    """export printed a command for a cut-short or foreign file (llama-server then failed inside its GGUF
    parser); run and tune refuse it first, with the reason. A file the command does not name is not read."""
    from test_gguf import tiny_gguf

    folder = isolated / "cut"
    folder.mkdir()
    (folder / "t.gguf").write_bytes(tiny_gguf()[:-64])
    (folder / "d.gguf").write_bytes(b"not a model at all, but long enough")
    args = ["--target", str(folder / "t.gguf"), "--draft", str(folder / "d.gguf")]
    for to in TARGETS:
        result = run_export("--to", to, *args)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 1 and len(lines) == 1 and "t.gguf is not a valid GGUF file" in lines[0], to
        assert result.stdout == "" and "Traceback" not in result.output
    (folder / "t.gguf").write_bytes(tiny_gguf())
    drafted = run_export("--to", "llama-server", *args, "--mode", "spec")
    assert drafted.exit_code == 1 and "d.gguf is not a valid GGUF file: bad magic" in drafted.stderr, drafted.output
    ngram = run_export("--to", "llama-server", *args, "--mode", "ngram")  # the draft is not in this command
    assert ngram.exit_code == 0 and "d.gguf" not in ngram.stdout, ngram.output


@pytest.mark.parametrize("content", ["{not json", '{"version": "other"}', "[]"])
def test_a_corrupt_saved_tuning_is_named_unreadable_not_missing(fake_models, seed_tuning, content):
    """A saved tuning that is not JSON, or of another shape, was reported as 'no saved tuning for these
    files here' (with a hint to run tune first), which sends the user looking for a file that is there."""
    target, draft = fake_models
    saved = seed_tuning(target, draft)
    saved.write_text(content)
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft), "--json")
    assert result.exit_code == 0, result.output
    why = json.loads(result.stdout)["speculation"]["why"]
    assert why.startswith(f"the saved tuning {saved} cannot be used: ")  # and why, in run's and tune's words
    assert why.endswith(": a default; run `specchat tune` again to replace it"), why
    assert json.loads(result.stdout)["speculation"]["k"] == 4  # still the default, as without a tuning
    saved.unlink()
    missing = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft), "--json")
    assert json.loads(missing.stdout)["speculation"]["why"].startswith("no saved tuning for these files here")


def test_a_folder_at_the_tuning_path_is_not_told_to_run_tune_which_refuses_it(fake_models, seed_tuning):
    """'run specchat tune again to replace it': tune refuses a folder standing at the tuning's path."""
    target, draft = fake_models
    saved = seed_tuning(target, draft)
    saved.unlink()
    saved.mkdir()
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft), "--json")
    why = json.loads(result.stdout)["speculation"]["why"]
    assert why.endswith(": a default; remove what stands there, then run `specchat tune`"), why


@pytest.mark.parametrize("field", ["step_s", "c", "v", "batch"])
def test_a_saved_tuning_with_a_number_beyond_any_float_is_named_unreadable(fake_models, seed_tuning, field):
    """A saved tuning whose number was an integer of hundreds of digits (hand-edited, garbled) stopped export
    and `run --mode auto` with OverflowError's traceback ('int too large to convert to float'); it is a file
    that cannot be used, as any other odd value."""
    from specchat.tuning import examine

    target, draft = fake_models
    saved = seed_tuning(target, draft)
    data = json.loads(saved.read_text())
    odd = {"v": {"1": 10**400}, "batch": {"1": 1.0, "9" * 400: 1.0}}  # a cost, a batch size of 400 digits
    if field in odd:
        data["v"] = odd[field]
    else:
        data[field] = 10**400
    saved.write_text(json.dumps(data))
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft), "--json")
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert json.loads(result.stdout)["speculation"]["why"].startswith(f"the saved tuning {saved} cannot be used: ")
    assert ("characters)" in result.stdout or "400 digits" in result.stdout) and examine(saved.stem)[0] is None


def test_the_target_as_its_own_draft_is_refused_as_run_refuses_it(fake_models):
    target, _ = fake_models
    same = run_export("--to", "llama-server", "--target", str(target), "--draft", str(target))
    assert same.exit_code == 2 and "is the target model itself" in same.stderr and "hint:" in same.stderr
    ngram = run_export("--to", "llama-server", "--target", str(target), "--draft", str(target), "--mode", "ngram")
    assert ngram.exit_code == 0, ngram.output  # the command names no draft model


def test_a_draft_llama_server_refuses_is_refused(fake_models):
    """export printed a command for a draft whose vocabulary is not the target's, which llama-server refuses as
    it starts: the pair is checked by llama-server's own rule, on the files' tokenizers."""
    target, _draft = fake_models
    odd = fake_backend.write_pair(target.parent / "odd")[1]
    odd.write_text(json.dumps({"role": "draft", "token_text": {"100": "\x7f"}}), encoding="utf-8")
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(odd))
    assert result.exit_code == 1 and "Traceback" not in result.output and not result.stdout, result.output
    assert "llama-server refuses this pair: draft vocabulary differs at token 100" in result.stderr
    assert "--mode ngram" in result.stderr
    ngram = run_export("--to", "llama-server", "--target", str(target), "--draft", str(odd), "--mode", "ngram")
    assert ngram.exit_code == 0, ngram.output  # the command names no draft model
    vllm = run_export("--to", "vllm", "--target", str(target), "--draft", str(odd), "--mode", "spec")
    assert vllm.exit_code == 0, vllm.output  # vLLM's rules are its own


def test_an_eos_llama_server_does_not_add_may_differ(fake_models):
    """run's check refused what llama-server starts: an instruct target (EOS <|im_end|>) with a base draft
    (EOS <|endoftext|>). llama-server compares an EOS id only where the model adds it, and the add flags always."""
    target, _draft = fake_models
    base = target.parent / "base.fake.gguf"
    base.write_text(json.dumps({"role": "draft", "eos": 1}), encoding="utf-8")
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(base), "--mode", "spec")
    assert result.exit_code == 0 and " -md " in result.stdout, result.output
    base.write_text(json.dumps({"role": "draft", "eos": 1, "add_eos": True}), encoding="utf-8")
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(base), "--mode", "spec")
    assert result.exit_code == 1 and "EOS use differs (draft adds it, target does not)" in result.stderr, result.output


def test_the_packaged_pairs_own_files_are_not_read_for_the_check(fake_models, overlay, monkeypatch):
    """Reading two tokenizers doubled what an export of the default pair took (about 1 s more): the packaged
    pairs are families, and run checks them as it loads them. A pair of the user's overlay is checked, even one
    of two packaged models (a user's mix of families), as is a file given with --target or --draft."""
    from specchat.registry import load_registry

    read, reader = [], fake_backend.FakeBackend.vocabulary
    monkeypatch.setattr(
        fake_backend.FakeBackend, "vocabulary", lambda self, path: read.append(path.name) or reader(self, path)
    )
    packaged = load_registry().pair(None)
    assert packaged.packaged
    files = exporting.Files(*fake_models, "p", packaged.target, packaged.draft, packaged.packaged)
    monkeypatch.setattr(exporting, "find_files", lambda *args, **kwargs: files)
    made = exporting.export("llama-server", mode="spec", k=4)
    assert "-md" in made.argv and not read
    overlay(f'[pairs.mix]\ntarget = "{packaged.target.name}"\ndraft = "{packaged.draft.name}"\n')
    mix = load_registry().pair("mix")
    assert mix.target == packaged.target and not mix.packaged
    files = exporting.Files(*fake_models, "mix", mix.target, mix.draft, mix.packaged)
    exporting.export("llama-server", mode="spec", k=4)
    assert read == ["target.fake.gguf", "draft.fake.gguf"]


def test_vllm_takes_the_draft_given_not_the_pairs_hub_repo(fake_models, overlay):
    """`--draft FILE` beside a pair: the command names that file; the pair's draft repo is another model."""
    _target, draft = fake_models
    overlay(MINE.format(draft="other-draft.fake.gguf"))
    result = run_export("--to", "vllm", "--pair", "mine", "--draft", str(draft), "--mode", "spec", "--json")
    assert result.exit_code == 0, result.output
    argv = json.loads(result.stdout)["argv"]
    assert argv[2] == "a/t"
    assert json.loads(value(argv, "--speculative-config"))["model"] == str(draft.resolve())


def test_a_tilde_the_shell_left_alone_is_the_home_directory(fake_models, isolated, monkeypatch):
    """`--target=~/m.gguf` or a quoted "~/m.gguf": bash expands neither, and the file 'did not exist'."""
    monkeypatch.setenv("HOME", str(isolated))
    result = run_export(
        "--to", "llama-server", "--target=~/files/target.fake.gguf", "--draft", "~/files/draft.fake.gguf"
    )
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout)
    assert value(argv, "-m") == str(fake_models[0].resolve()) and value(argv, "-md") == str(fake_models[1].resolve())


def test_linked_files_are_named_by_their_links_as_run_names_them(fake_models, seed_tuning, tmp_path):
    """Files reached through links (the Hugging Face cache's snapshots, a folder of links): export resolved them
    to the link targets, so it missed the tuning run had saved under the links' names ('no saved tuning'), and
    named a split model's first part by its blob name, under which llama.cpp cannot find the other parts."""
    links = tmp_path / "snapshot"
    links.mkdir()
    named = []
    for path, blob in zip(fake_models, ("blob1", "blob2"), strict=True):  # as the cache's blobs, named by hashes
        link = links / path.name
        link.symlink_to(path.rename(path.with_name(f"{blob}.fake.gguf")))
        named.append(link)
    seed_tuning(*named)  # as `run --target LINK --draft LINK` saves it: GPU-like costs, the draft model pays
    result = run_export("--to", "llama-server", "--target", str(named[0]), "--draft", str(named[1]), "--json")
    assert result.exit_code == 0, result.output
    made = json.loads(result.stdout)
    assert value(made["argv"], "-m") == str(named[0]) and value(made["argv"], "-md") == str(named[1])
    assert made["speculation"]["method"] == "draft" and "no saved tuning" not in made["speculation"]["why"]


def test_a_draft_larger_than_its_target_is_said_to_be_swapped_perhaps(tmp_path):
    """`export --target small.gguf --draft big.gguf` printed `-m small.gguf -md big.gguf` without a word, where
    `run` says the draft cannot save time and the flags may be the wrong way round."""
    small, big = tmp_path / "small.gguf", tmp_path / "big.gguf"
    header = b"GGUF" + (3).to_bytes(4, "little") + bytes(16)  # version 3, no tensors, no metadata
    small.write_bytes(header + bytes(100))
    big.write_bytes(header + bytes(3000))
    swapped = run_export("--to", "llama-server", "--target", str(small), "--draft", str(big), "--mode", "spec")
    assert swapped.exit_code == 0, swapped.output
    assert "the draft model big.gguf (0.0 GB) is larger than the target small.gguf" in swapped.stderr
    assert "--target and --draft swapped?" in swapped.stderr
    made = exporting.export("vllm", target=small, draft=big, mode="spec")
    assert any("--target and --draft swapped?" in note for note in made.notes), made.notes
    for args in (["--target", str(big), "--draft", str(small), "--mode", "spec"], ["--target", str(small)]):
        right = run_export("--to", "llama-server", *args)
        assert right.exit_code == 0 and "larger than" not in right.stderr, right.output


@pytest.mark.parametrize(
    ("mode", "needle"),
    [
        ("target", "--mode target is llama-server or vLLM without speculation"),
        ("suffix", "--mode suffix has no equivalent in llama-server or vLLM"),
        ("bogus", "unknown --mode 'bogus' for export"),
    ],
)
def test_a_mode_of_runs_that_export_cannot_give_is_named_as_known(fake_models, mode, needle):
    """`export --mode target` (or suffix) was "unknown --mode 'target'", a mode every other command takes."""
    target, draft = fake_models
    result = run_export("--to", "vllm", "--target", str(target), "--draft", str(draft), "--mode", mode)
    assert result.exit_code == 2 and needle in result.stderr and "choose auto, spec or ngram" in result.stderr


@pytest.mark.parametrize("to", TARGETS)
def test_a_ctx_longer_than_the_model_was_trained_for_is_noted(fake_models, isolated, to):
    """`export --ctx 100000` for a model trained for 32k printed the command without a word, where run, serve and
    bench note it: llama-server's replies degrade past it, and vLLM refuses such a --max-model-len."""
    target, draft = fake_backend.write_pair(isolated / "trained", context_length=2048)
    files = ["--target", str(target), "--draft", str(draft), "--mode", "spec", "--json"]
    made = json.loads(run_export("--to", to, *files, "--ctx", "4096").stdout)
    assert any("more than the 2048 tokens target.fake.gguf was trained for" in note for note in made["notes"]), made
    within = json.loads(run_export("--to", to, *files, "--ctx", "2048").stdout)
    assert not any("was trained for" in note for note in within["notes"]), within
    default = json.loads(run_export("--to", to, *files).stdout)  # no --ctx given: its 4096 is the command's own
    assert any(note.startswith("the default context (4096) is more than") for note in default["notes"]), default


def test_a_local_draft_for_vllm_is_not_told_to_take_a_tokenizer_flag(fake_models, overlay):
    """vLLM gives the draft model the target's tokenizer (SpeculativeConfig builds the draft's ModelConfig with
    tokenizer=target_model_config.tokenizer): `--tokenizer` is the target's. A GGUF draft beside the pair's Hub
    target was told to add `--tokenizer HUB_REPO`, which would change the target's tokenizer, not the draft's."""
    _target, draft = fake_models
    overlay(MINE.format(draft="other-draft.fake.gguf"))
    result = run_export("--to", "vllm", "--pair", "mine", "--draft", str(draft), "--mode", "spec", "--json")
    assert result.exit_code == 0, result.output
    notes = json.loads(result.stdout)["notes"]
    (drafts,) = [note for note in notes if note.startswith("the draft is a local GGUF")]
    assert "--tokenizer" not in drafts and "the target's tokenizer" in drafts, notes
    assert not any("add --tokenizer" in note for note in notes), notes


def test_the_vllm_note_does_not_say_the_users_machine_has_no_gpu(fake_models):
    """The note was 'not run here (no GPU on this machine)' on every machine, GPU boxes included: it meant the
    machine specchat was developed on, and read as a finding about the user's."""
    target, draft = fake_models
    result = run_export("--to", "vllm", "--target", str(target), "--draft", str(draft), "--json")
    assert result.exit_code == 0, result.output
    notes = json.loads(result.stdout)["notes"]
    assert not any("this machine" in note and "GPU" in note for note in notes), notes
    assert any("SpeculativeConfig" in note and "not run" in note for note in notes), notes


def test_the_note_for_older_llama_servers_names_every_flag_they_lack(fake_models):
    """'older llama-server builds call them --draft-max' named one rename; those builds also have no
    `draft-simple` type (-md alone drafts there), so the command, with --draft-max put in, still failed on
    `--spec-type draft-simple`."""
    target, draft = fake_models
    result = run_export("--to", "llama-server", "--target", str(target), "--draft", str(draft), "-k", "5", "--json")
    assert result.exit_code == 0, result.output
    (older,) = [note for note in json.loads(result.stdout)["notes"] if "older llama-server" in note]
    assert "--draft-max 5" in older and "--spec-type draft-simple --spec-draft-n-max 5" in older, older
