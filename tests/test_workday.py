"""Issue 13's "done when", each as a user runs it: `specchat` in a child process (piped stdin, a shell) or
in a pseudo-terminal, on the fake backend (tests/fake_backend.py) as a plugin of the child.

The fake target's reply is set per test: a fixed text, or everything before the reply ({history}), so
that a test sees what reached the model. What a real model answers is not checked here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import fake_backend
import pytest
from test_small import child_env

pexpect = pytest.importorskip("pexpect")

from test_terminal import PROMPT, fake_env, leave_with_bye, spawn_in_terminal  # noqa: E402 - after the skip

INTEGERS = "\n".join(str(n) for n in range(1, 301))


def shell(tmp_path, command: str, *, timeout: float = 120) -> subprocess.CompletedProcess:
    """`bash -c COMMAND` in tmp_path with the fake backend and private specchat directories (the data
    directory, where the log lives, is the test's own: conftest's private_log)."""
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=timeout, check=False,
        stdin=subprocess.DEVNULL, env=child_env(tmp_path), cwd=tmp_path,
    )  # fmt: skip


def test_a_piped_prompt_gets_a_reply_longer_than_512_tokens_to_its_end(tmp_path):
    """`echo "List the integers from 1 to 300, one per line" | specchat run`: no -n, no 512 cap."""
    target, _draft = fake_backend.write_pair(tmp_path / "files", reply=INTEGERS)
    run = f"{sys.executable} -m specchat run --target {target} --mode target"
    done = shell(tmp_path, f'echo "List the integers from 1 to 300, one per line" | {run}')
    assert done.returncode == 0, done.stderr
    assert done.stdout == INTEGERS + "\n"  # 1,092 tokens on the fake's byte tokenizer, to the last line
    assert "stopped" not in done.stderr and "error" not in done.stderr
    as_json = shell(tmp_path, f'echo "List the integers from 1 to 300, one per line" | {run} --json')
    stats = json.loads(as_json.stdout)["stats"]
    assert stats["generated_tokens"] > 1000 and stats["stop_reason"] == "eog"


def test_six_long_turns_in_a_small_context_all_get_replies(tmp_path):
    """Six turns of 150 words each in a chat with --ctx 1024: every turn is answered, the oldest turns give
    way with a notice, no error. The fake's tokenizer takes a token a byte, so its words are short (4
    bytes: 600 tokens a message, more than 150 words of prose take in Qwen's tokenizer): one turn at a
    time fits."""
    target, _draft = fake_backend.write_pair(tmp_path / "files", reply="Noted.")
    child = spawn_in_terminal(f"--target {target} --mode target --ctx 1024", tmp_path, fake_env(tmp_path))
    try:
        for turn in range(6):
            child.expect_exact(PROMPT)
            child.sendline(" ".join(f"w{turn}{i % 10}" for i in range(150)))
            if turn:
                child.expect_exact("gave way to fit the context of 1024 tokens")
            child.expect_exact("Noted.")
            child.expect_exact("── ")  # the summary line under the reply
        child.expect_exact(PROMPT)
        leave_with_bye(child)
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8").split("EXIT=")[0]
    assert log.count("gave way to fit the context") == 5
    assert "is full" not in log and "error" not in log and "Traceback" not in log


def test_continue_a_one_shot_conversation_and_list_it(tmp_path):
    """`specchat run "My name is Ada Lovelace"`, then `specchat run -c "What is my name?"`: the first turn
    reaches the model as history; `specchat logs --json` lists both, in one conversation."""
    target, _draft = fake_backend.write_pair(tmp_path / "files", reply="Seen: {history}")
    specchat = f"{sys.executable} -m specchat"
    run = f"{specchat} run --target {target} --mode target"
    first = shell(tmp_path, f'{run} "My name is Ada Lovelace"')
    assert first.returncode == 0, first.stderr
    second = shell(tmp_path, f'{run} -c "What is my name?"')
    assert second.returncode == 0, second.stderr
    assert "Ada Lovelace" in second.stdout and first.stdout.strip() in second.stdout
    logs = shell(tmp_path, f"{specchat} logs --json")
    assert logs.returncode == 0, logs.stderr
    rows = json.loads(logs.stdout)
    assert [row["prompt"] for row in rows] == ["My name is Ada Lovelace", "What is my name?"]
    assert rows[0]["conversation_id"] == rows[1]["conversation_id"]
    assert rows[1]["reply"].strip() == second.stdout.strip()


def test_ctrl_c_and_ctrl_d_in_the_chat(tmp_path):
    """Through prompt_toolkit as before: Ctrl-C mid-reply stops the reply (kept, marked), Ctrl-C at the
    prompt does not leave, Ctrl-D at an empty prompt leaves with exit 0 and a sane terminal."""
    target, _draft = fake_backend.write_pair(tmp_path / "files", reply=INTEGERS, eval_sleep=0.02)
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact(PROMPT)
        child.sendline("Count.")
        child.expect(r"[1-9][0-9]*\.[0-9] tok/s")  # the live footer: the reply is under way
        child.sendintr()
        child.expect_exact("[interrupted]")
        child.expect_exact(PROMPT)
        child.sendintr()
        child.expect_exact("Ctrl-C at the prompt does not leave")
        child.expect_exact(PROMPT)
        child.sendcontrol("d")
        child.expect(r"EXIT=(\d+)")
        assert child.match.group(1) == "0"
        child.expect(pexpect.EOF)
        assert "echo" in child.before.split() and "icanon" in child.before.split()
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8")
    assert "Traceback" not in log


@pytest.mark.real
def test_the_real_target_remembers_a_name_across_one_shot_runs(tmp_path, default_pair_paths):
    """The same two commands on the real default pair: the second answer names Ada."""
    target, draft = default_pair_paths
    run = f"{sys.executable} -m specchat run --target {target} --draft {draft} --mode target -n 32"
    first = shell(tmp_path, f'{run} "My name is Ada Lovelace."', timeout=300)
    assert first.returncode == 0, first.stderr
    second = shell(tmp_path, f'{run} -c "What is my name? Answer in one short sentence."', timeout=300)
    assert second.returncode == 0, second.stderr
    assert "Ada" in second.stdout
