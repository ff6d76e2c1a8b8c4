"""The interactive chat in a real pseudo-terminal (pexpect), with the fake backend and the default pair.

Types a prompt, sees coloured output and the live footer, presses Ctrl-C mid-reply, gets the prompt
back, leaves with /bye (exit 0), and checks with `stty -a` that the terminal is sane afterwards.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time

import pytest

pexpect = pytest.importorskip("pexpect")

from sighelp import default_signals  # noqa: E402 - after the skip: pexpect is an optional test dependency

PROMPT = "you ›"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def spawn_in_terminal(run_args: str, tmp_path, env: dict | None = None, command: str = "run"):
    """`specchat run ARGS` in a 30x100 pty, then `echo EXIT=$?; stty -a`; output logged to session.log.

    bash (not dash) survives the Ctrl-C that the child handles, so it can report the exit code.
    """
    env = {**os.environ, "TERM": "xterm-256color", "SPECCHAT_STATE_DIR": str(tmp_path), "COLUMNS": "100", **(env or {})}
    # A real terminal answers prompt_toolkit's cursor-position request; pexpect does not, and it warns.
    env["PROMPT_TOOLKIT_NO_CPR"] = "1"
    env.pop("NO_COLOR", None)
    command = f"{sys.executable} -m specchat {command} {run_args}; echo EXIT=$?; stty -a"
    child = pexpect.spawn(
        "/bin/bash",
        ["-c", command],
        env=env,
        dimensions=(30, 100),
        encoding="utf-8",
        timeout=120,
        preexec_fn=default_signals,
        cwd=str(tmp_path),
    )
    child.logfile_read = (tmp_path / "session.log").open("w")
    return child


def assert_modes_sane(stty_output: str) -> None:
    modes = stty_output.split()
    assert "echo" in modes and "icanon" in modes, "terminal left in raw or no-echo mode"


def expect_exit(child, code: str, timeout: float = -1) -> None:  # -1: the child's own timeout
    """The shell's `EXIT=N` line with this code, then its `stty -a`: the terminal's modes as they were."""
    child.expect(r"EXIT=(\d+)", timeout=timeout)
    assert child.match.group(1) == code
    child.expect(pexpect.EOF)
    assert_modes_sane(child.before)


def assert_cursor_and_colours_restored(log: str) -> None:
    assert log.rfind("\x1b[?25l") < log.rfind("\x1b[?25h"), "cursor left hidden"
    colour_codes = [c for c in ANSI.findall(log) if c.endswith("m")]
    assert colour_codes and colour_codes[-1] in ("\x1b[0m", "\x1b[m")


def fake_env(tmp_path) -> dict:
    """The fake backend as a plugin of the child process (SPECCHAT_PLUGINS), with private directories."""
    tests = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))
    dirs = {f"SPECCHAT_{n}_DIR": str(tmp_path / n.lower()) for n in ("CONFIG", "MODELS", "CACHE")}
    return {"SPECCHAT_PLUGINS": "fake_backend", "PYTHONPATH": path, **dirs}


def test_fake_chat_in_a_terminal(tmp_path):
    import fake_backend

    target, draft = fake_backend.write_pair(tmp_path / "files")
    child = spawn_in_terminal(f"--target {target} --draft {draft} --mode spec", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact(PROMPT)
        child.sendline("Name three colours.")
        child.expect_exact("legend")
        child.expect(r"\x1b\[[0-9;]*32m")  # green: a draft token the target accepted
        child.expect_exact("── ")  # the summary line under the reply
        child.expect_exact("spec k=4")
        child.expect_exact(PROMPT)
        child.sendline("/k 2")
        child.expect_exact("draft length k = 2")
        child.sendline("/stats")
        child.expect_exact("session: ")
        leave_with_bye(child)
    finally:
        child.close(force=True)
    assert_cursor_and_colours_restored((tmp_path / "session.log").read_text(encoding="utf-8").split("EXIT=")[0])


def test_fake_chat_bracketed_paste_is_one_message(tmp_path):
    """A pasted block (bracketed paste, as terminals send it) is one message with one reply, sent by
    Enter; Esc-Enter adds a line to a message; Tab completes a slash command."""
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact(PROMPT)
        child.send("\x1b[200~line1\nline2\nline3\x1b[201~")
        child.send("\r")
        child.expect_exact("── ")  # the summary line under the reply
        child.expect_exact(PROMPT)
        child.send("first\x1b\rsecond\r")  # Esc-Enter: a newline inside the message
        child.expect_exact("── ")
        child.expect_exact(PROMPT)
        child.send("/sta\t")
        child.expect_exact("/stats")  # completed (in the background: Enter must wait for it, as a person does)
        child.send("\r")
        child.expect_exact("session: ")
        leave_with_bye(child)
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8").split("EXIT=")[0]
    assert log.count("── ") == 2, "one reply per message"
    # The fake quotes the whole message: "Here is your text again:\n" + message + "\nThat is all.", a token a byte.
    for message in ("line1\nline2\nline3", "first\nsecond"):
        assert f"── {len(fake_backend.REPLY.format(prompt=message))} tokens" in log
    assert "Traceback" not in log and "WARNING" not in log


def test_fake_chat_takes_bytes_that_are_not_utf8(tmp_path):
    """A stray Latin-1 byte typed or pasted at the prompt is replaced with a warning; the chat goes on."""
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact(PROMPT)
        os.write(child.child_fd, b"caf\xe9 au lait\r")  # the spawn encodes str as UTF-8: raw bytes go past it
        child.expect_exact("bad bytes were replaced")
        child.expect_exact("── ")
        child.expect_exact(PROMPT)
        leave_with_bye(child)
    finally:
        child.close(force=True)


def test_fake_chat_saves_to_a_file_name_an_ascii_locale_cannot_encode(tmp_path):
    """LC_ALL=C with PYTHONUTF8=0 makes the file system's encoding ASCII: `/save tälk.md` was an internal
    error that ended the chat. The name typed is the name made, byte for byte."""
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    env = {**fake_env(tmp_path), "LC_ALL": "C", "PYTHONUTF8": "0"}
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, env)
    try:
        child.expect_exact("you ")
        child.send("/save tälk.md\r")
        child.expect_exact("saved 0 messages")
        child.sendline("/bye")
        expect_exit(child, "0")
    finally:
        child.close(force=True)
    assert (tmp_path / "tälk.md").is_file()


def test_fake_chat_on_a_dumb_terminal_is_plain_text(tmp_path):
    """TERM=dumb (Emacs shell, some IDE terminals): the chat runs with plain line reading and replies as
    plain text, no escape code at all, and /bye leaves with exit 0."""
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, {**fake_env(tmp_path), "TERM": "dumb"})
    try:
        child.expect_exact(PROMPT)
        child.sendline("Name three colours.")
        child.expect_exact(fake_backend.REPLY.format(prompt="Name three colours.").splitlines()[-1])
        child.expect_exact("── ")  # the summary line, as text
        child.expect_exact(PROMPT)
        child.sendline("/stats")
        child.expect_exact("session: ")
        leave_with_bye(child)
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8").split("EXIT=")[0]
    assert "\x1b" not in log, "an escape code on a terminal that takes none"


def test_fake_chat_with_a_target_without_a_chat_template_is_refused_at_the_start(tmp_path):
    """A base model (no chat template) started the chat and refused every message with 'use --no-template',
    which a running chat cannot take: the user learnt it only after loading and typing. It is one line and
    exit 1 before the first prompt, as a one-shot run says it: before auto measures the machine (~15 s on a
    CPU), while the keys typed during the load are still held back (they are dropped, not left to the shell)."""
    import fake_backend

    target, draft = fake_backend.write_pair(tmp_path / "files", template=None)
    child = spawn_in_terminal(f"--target {target} --draft {draft}", tmp_path, fake_env(tmp_path))
    try:
        child.expect(r"has no chat template .*--no-template")
        expect_exit(child, "1")
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8")
    assert PROMPT not in log
    assert "measuring" not in log, "refused only after auto had measured the machine, outside the load"


@pytest.mark.parametrize("term", ["xterm-256color", "dumb"])
def test_fake_chat_with_stats_shows_each_replys_stats(tmp_path, term):
    """`specchat run --stats` on a terminal started the chat and dropped --stats without a word: its replies
    showed no speed-and-stop line on stderr, as a one-shot reply does."""
    import fake_backend

    target, draft = fake_backend.write_pair(tmp_path / "files")
    env = {**fake_env(tmp_path), "TERM": term}
    child = spawn_in_terminal(f"--target {target} --draft {draft} --mode spec --stats", tmp_path, env)
    try:
        child.expect_exact(PROMPT)
        child.sendline("Name three colours.")
        child.expect_exact("── ")  # the summary line under the reply, then --stats' own
        child.expect(r"\[spec k=4\] \d+ tokens in [0-9.]+s, .* stop: eog")
        child.expect_exact(PROMPT)
        leave_with_bye(child)
    finally:
        child.close(force=True)


def leave_with_bye(child) -> None:
    """/bye leaves the chat with exit 0 and the terminal's modes as they were."""
    child.sendline("/bye")
    expect_exit(child, "0")


def assert_ctrl_c_during_a_reply_restores_the_terminal(args: str, tmp_path, env=None) -> None:
    """Ctrl-C during a one-shot reply on a terminal: exit 130, cursor shown, colours reset, modes sane."""
    child = spawn_in_terminal(args, tmp_path, env)
    try:
        child.expect(r"[1-9][0-9]*\.[0-9] tok/s")  # the live footer with a rate: generation is under way
        child.sendintr()
        expect_exit(child, "130", timeout=5)
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8")
    assert "Traceback" not in log
    assert_cursor_and_colours_restored(log.split("EXIT=")[0])


def test_fake_one_shot_ctrl_c_restores_the_terminal(tmp_path):
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files", eval_sleep=0.02)
    args = f"--target {target} --mode target -n 2000 'A long story.'"
    assert_ctrl_c_during_a_reply_restores_the_terminal(args, tmp_path, fake_env(tmp_path))


@pytest.mark.parametrize(("args", "what"), [("-", "the prompt"), ("--system - 'Hi.'", "the system prompt")])
def test_fake_a_dash_on_a_terminal_says_what_it_reads_and_how_to_end_it(tmp_path, args, what):
    """`specchat run -` typed on a terminal (by mistake, or to type a prompt of several lines) waited for stdin as
    cat does, without a word: it looked hung. A line on stderr says what it reads and that Ctrl-D ends it."""
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    child = spawn_in_terminal(f"--target {target} --mode target {args}", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact(f"reading {what} from standard input; end it with Ctrl-D")
        child.send("Be brief.\n")
        child.sendeof()
        child.expect_exact("That is all.")
        expect_exit(child, "0")
    finally:
        child.close(force=True)


def test_fake_bench_prompts_dash_on_a_terminal_says_what_it_reads(tmp_path):
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    child = spawn_in_terminal(f"--target {target} --modes ngram --prompts -", tmp_path, fake_env(tmp_path), "bench")
    try:
        child.expect_exact("reading --prompts from standard input, one JSON object a line; end it with Ctrl-D")
        child.sendeof()
        expect_exit(child, "2")  # nothing read: "--prompts is empty"
    finally:
        child.close(force=True)


def test_fake_ctrl_z_during_a_reply_shows_the_cursor_and_fg_goes_on(tmp_path):
    """Ctrl-Z during a reply stopped specchat with the live view's cursor hidden: the shell it went back to had
    no cursor until the reply, continued with `fg`, ended. (`set -m`: job control, as an interactive shell has.)"""
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files", eval_sleep=0.02)
    env = {**os.environ, **fake_env(tmp_path), "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1"}
    run = f"{sys.executable} -m specchat run --target {target} --mode target -n 400 'A long story.'"
    child = pexpect.spawn("/bin/bash", ["-c", f"set -m; {run}; echo STOPPED=$?; fg; echo EXIT=$?"], env=env,
                          dimensions=(30, 100), encoding="utf-8", timeout=120, preexec_fn=default_signals)  # fmt: skip
    child.logfile_read = (tmp_path / "session.log").open("w")
    try:
        child.expect(r"[1-9][0-9]*\.[0-9] tok/s")  # the live footer: the reply is under way, the cursor hidden
        child.send("\x1a")
        child.expect_exact("STOPPED=148")  # 128 + SIGTSTP: stopped, not ended
        child.logfile_read.flush()
        shown = (tmp_path / "session.log").read_text(encoding="utf-8").split("STOPPED=")[0]
        assert shown.rfind("\x1b[?25l") < shown.rfind("\x1b[?25h"), "the shell got the terminal with no cursor"
        child.expect(r"EXIT=(\d+)")
        assert child.match.group(1) == "0" and "── " in child.before  # the reply went on to its summary line
    finally:
        child.close(force=True)
    # After `fg` the live view drew on with the cursor shown, blinking over its footer: hidden again until it ends
    resumed = (tmp_path / "session.log").read_text(encoding="utf-8").split("STOPPED=")[1].split("── ")[0]
    assert 0 <= resumed.find("\x1b[?25l") < resumed.find(" tok/s"), "the live view drew with the cursor shown"


def test_fake_ctrl_z_during_a_bench_hides_the_cursor_again_on_fg(tmp_path):
    """The bench's progress bar, stopped with Ctrl-Z and continued with `fg`, drew on with the cursor shown."""
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files", eval_sleep=0.02)
    env = {**os.environ, **fake_env(tmp_path), "TERM": "xterm-256color", "SPECCHAT_STATE_DIR": str(tmp_path)}
    bench = f"{sys.executable} -m specchat bench --target {target} --modes ngram -n 2000 -r 1 --suite tiny"
    child = pexpect.spawn("/bin/bash", ["-c", f"set -m; {bench}; echo STOPPED=$?; fg; echo EXIT=$?"], env=env,
                          dimensions=(30, 100), encoding="utf-8", timeout=120, preexec_fn=default_signals)  # fmt: skip
    try:
        child.expect_exact("\x1b[?25l")  # the bar is up
        time.sleep(0.3)
        child.send("\x1a")
        child.expect_exact("STOPPED=148")
        child.expect_exact("\x1b[?25l", timeout=10)  # hidden again on `fg`
        child.sendintr()
        child.expect(r"EXIT=(\d+)")
        assert child.match.group(1) == "130"
    finally:
        child.close(force=True)


def test_fake_ctrl_z_at_the_chat_prompt_stops_it_as_a_shell_would(tmp_path):
    """Ctrl-Z at the chat's prompt put a literal ^Z (0x1a) into the message, which Enter then sent to the model:
    prompt_toolkit's raw mode reads it as a key, and its default inserts it. It stops the chat, as in a shell."""
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    env = {**os.environ, **fake_env(tmp_path), "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1"}
    env["SPECCHAT_STATE_DIR"] = str(tmp_path)
    run = f"{sys.executable} -m specchat run --target {target} --mode target"
    child = pexpect.spawn("/bin/bash", ["-c", f"set -m; {run}; echo STOPPED=$?; fg; echo EXIT=$?"], env=env,
                          dimensions=(30, 100), encoding="utf-8", timeout=120, preexec_fn=default_signals)  # fmt: skip
    try:
        child.expect_exact(PROMPT)
        child.send("\x1a")
        child.expect_exact("STOPPED=148")
        child.expect_exact(PROMPT)  # `fg`: the prompt again
        child.sendline("Hi.")
        child.expect_exact("── ")
        child.sendline("/bye")
        child.expect(r"EXIT=(\d+)")
        assert child.match.group(1) == "0"
    finally:
        child.close(force=True)
    assert "\x1a" not in (tmp_path / "history").read_text(encoding="utf-8")


@pytest.mark.parametrize(("signame", "code"), [("SIGTERM", "143"), ("SIGQUIT", "131")])
@pytest.mark.parametrize("where", ["chat prompt", "one-shot reply"])
def test_fake_sigterm_puts_the_terminal_back(tmp_path, where, signame, code, request):
    """SIGTERM (`kill`, `timeout`) ended the chat at its prompt in prompt_toolkit's raw mode (the shell
    then had no echo) and a reply with the cursor hidden; it still ends as SIGTERM does (143). So did
    SIGQUIT (Ctrl-\\ during a reply), which still ends as it does (131)."""
    import resource
    import signal
    import time

    import fake_backend

    limits = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, limits[1]))  # no core dump for SIGQUIT: the child inherits it
    request.addfinalizer(lambda: resource.setrlimit(resource.RLIMIT_CORE, limits))

    target, _draft = fake_backend.write_pair(tmp_path / "files", eval_sleep=0.02)
    args = f"--target {target} --mode target" + (" -n 2000 'A long story.'" if where == "one-shot reply" else "")
    child = spawn_in_terminal(args, tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact(PROMPT) if where == "chat prompt" else child.expect(r"[1-9][0-9]*\.[0-9] tok/s")
        time.sleep(0.3)  # prompt_toolkit in raw mode by now
        with open(f"/proc/{child.pid}/task/{child.pid}/children") as children:  # bash's child: specchat
            os.kill(int(children.read().split()[0]), getattr(signal, signame))
        expect_exit(child, code, timeout=10)
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8").split("EXIT=")[0]
    assert "Traceback" not in log and log.rfind("\x1b[?25l") < log.rfind("\x1b[?25h"), "cursor left hidden"


def test_fake_sigterm_during_a_bench_shows_the_cursor_again(tmp_path):
    """bench's progress bar hides the cursor; SIGTERM (`timeout`) left it hidden, as only `run` put the terminal
    back (so pull's, tune's and models --verify's bars)."""
    import signal

    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files", eval_sleep=0.02)
    args = f"--target {target} --modes ngram -n 2000 -r 1"
    child = spawn_in_terminal(args, tmp_path, fake_env(tmp_path), command="bench")
    try:
        child.expect_exact("\x1b[?25l")  # the bar is up
        time.sleep(0.3)
        with open(f"/proc/{child.pid}/task/{child.pid}/children") as children:  # bash's child: specchat
            os.kill(int(children.read().split()[0]), signal.SIGTERM)
        expect_exit(child, "143", timeout=10)
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8").split("EXIT=")[0]
    assert log.rfind("\x1b[?25l") < log.rfind("\x1b[?25h"), "cursor left hidden"


@pytest.fixture
def chat(default_pair_paths, tmp_path):
    # --mode spec: on a small CPU auto would (rightly) not draft at all, and this test wants to see drafts.
    child = spawn_in_terminal("--mode spec --ctx 1024", tmp_path)
    yield child
    child.close(force=True)


@pytest.mark.real
def test_chat_interrupt_and_leave(chat):
    chat.expect_exact(PROMPT)
    chat.sendline("Write a long essay about the history of computing, with many sections.")
    chat.expect("tok/s")  # the live footer
    chat.expect(r"\x1b\[[0-9;]*32m")  # green: a draft token the target accepted
    chat.expect(r"legend|accepted")
    chat.sendintr()  # Ctrl-C mid-reply
    chat.expect_exact("[interrupted]")
    chat.expect_exact(PROMPT)
    chat.sendline("/k 2")
    chat.expect_exact("draft length k = 2")
    chat.sendline("/nonsense")
    chat.expect_exact("unknown command /nonsense")
    leave_with_bye(chat)


@pytest.mark.real
def test_cursor_and_colours_restored(chat):
    """Every hidden cursor is shown again, and the output ends with attributes reset."""
    chat.expect_exact(PROMPT)
    chat.sendline("Say hi in three words.")
    chat.expect_exact(PROMPT)
    chat.sendline("/bye")
    chat.expect(pexpect.EOF)
    with open(chat.logfile_read.name, encoding="utf-8") as handle:
        assert_cursor_and_colours_restored(handle.read())


@pytest.mark.real
def test_piped_output_has_no_escape_codes(default_pair_paths, tmp_path):
    """stdout to a pipe: plain bytes of the reply, no ANSI escape, even with a terminal on stdin."""
    import subprocess

    env = {**os.environ, "TERM": "xterm-256color"}
    done = subprocess.run(
        [sys.executable, "-m", "specchat", "run", "-n", "24", "List three colours."],
        capture_output=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.strip()
    assert b"\x1b" not in done.stdout


@pytest.mark.real
def test_one_shot_ctrl_c_restores_the_terminal(default_pair_paths, tmp_path):
    args = "--mode spec -n 2000 'Write a long story about a lighthouse keeper.'"
    assert_ctrl_c_during_a_reply_restores_the_terminal(args, tmp_path)


# --- a resize during a reply (issue 16, item 6) -------------------------------------------------------

FOOTER = re.compile(r"\d tok/s · ")


def reflowing_screen(columns: int, lines: int):
    """A pyte screen that reflows on narrowing, as most terminals do (VTE, iTerm2, Windows Terminal,
    kitty, tmux): a row longer than the new width continues on the next rows, rows above move up (into
    the scrollback when the screen is full), and the cursor stays on its character. pyte itself crops."""
    pyte = pytest.importorskip("pyte")

    class ReflowScreen(pyte.Screen):
        def resize(self, lines=None, columns=None):
            columns = columns or self.columns
            if columns < self.columns:
                self._reflow(columns)
            super().resize(lines, columns)

        def _reflow(self, columns: int) -> None:
            rows, cursor = [], (0, 0)
            for y in range(self.cursor.y + 1):
                line = self.buffer[y]
                used = max((x + 1 for x, char in line.items() if char.data != " "), default=0)
                chars = [line[x] for x in range(max(used, self.cursor.x if y == self.cursor.y else 0))]
                chunks = [chars[i : i + columns] for i in range(0, len(chars), columns)] or [[]]
                if y == self.cursor.y:
                    at = min(self.cursor.x // columns, len(chunks) - 1)
                    cursor = (len(rows) + at, self.cursor.x - at * columns)
                rows.extend(chunks)
            dropped = max(0, len(rows) - self.lines)
            self.buffer.clear()
            for y, chunk in enumerate(rows[dropped:]):
                for x, char in enumerate(chunk):
                    self.buffer[y][x] = char
            self.cursor.y, self.cursor.x = cursor[0] - dropped, cursor[1]

    return ReflowScreen(columns, lines)


def test_fake_chat_footer_is_drawn_once_after_a_resize(tmp_path):
    """Narrowing the terminal mid-reply (SIGWINCH): the old footer, now wrapped over two rows by the
    terminal, is erased with the rest of the live region, so only one footer is ever on the screen,
    and none once the reply is done."""
    import contextlib
    import time

    import fake_backend

    pyte = pytest.importorskip("pyte")
    target, draft = fake_backend.write_pair(tmp_path / "files", eval_sleep=0.05)
    env = {**os.environ, **fake_env(tmp_path), "TERM": "xterm-256color", "SPECCHAT_STATE_DIR": str(tmp_path)}
    for name in ("COLUMNS", "LINES", "NO_COLOR"):  # the real size comes from the terminal, as in a shell
        env.pop(name, None)
    screen = reflowing_screen(100, 30)
    stream = pyte.Stream(screen)
    args = ["-m", "specchat", "run", "--target", str(target), "--draft", str(draft), "--mode", "spec", "-n", "400"]
    child = pexpect.spawn(sys.executable, args, env=env, dimensions=(30, 100), encoding="utf-8", timeout=60)
    child.logfile_read = (tmp_path / "session.log").open("w")

    def pump(until, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with contextlib.suppress(pexpect.TIMEOUT):
                stream.feed(child.read_nonblocking(100_000, timeout=0.05))
            if until():
                return True
        return False

    def footers() -> list[str]:
        return [row for row in screen.display if FOOTER.search(row)]

    def prompts() -> int:
        return sum(PROMPT in row for row in screen.display)

    def summary() -> bool:
        return any(row.startswith("── ") for row in screen.display)

    try:
        assert pump(lambda: prompts() == 1, 60)
        child.sendline("Tell me a long story about " + "many different things " * 4)
        assert pump(lambda: footers() and len(footers()[0].rstrip()) > 60, 60), screen.display  # mid-reply
        # What the chat wrote at 100 columns must reach the screen before it shrinks: a real terminal
        # takes the bytes and the resize in order, and pyte fed them after its resize wrapped them anew
        # (a stale row under load, once in CI).
        with contextlib.suppress(pexpect.TIMEOUT, pexpect.EOF):
            stream.feed(child.read_nonblocking(100_000, timeout=0))
        child.setwinsize(30, 60)  # the kernel sends SIGWINCH to the chat
        screen.resize(30, 60)
        seen = []
        finished = pump(lambda: seen.append(len(footers())) or summary(), 60)
        assert finished, "\n".join(screen.display)
        assert pump(lambda: prompts() == 2, 10), "\n".join(screen.display)  # readline redrew the prompt, not erased it
        assert max(seen) == 1 and footers() == [], "\n".join(screen.display)
        reply = [row for row in screen.display if row.startswith("Here")]
        assert len(reply) == 1, "\n".join(screen.display)  # the reply's first line once, no stale copy
        child.sendline("/bye")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_fake_chat_survives_ctrl_c_pressed_again_and_again_at_the_prompt(tmp_path):
    """Ctrl-C at the prompt does not leave, however often and fast it comes: one that landed while the
    line editor was starting or ending (the terminal in cooked mode, a SIGINT) escaped as a traceback
    (asyncio's CancelledError, exit 1) or left the chat (exit 130)."""
    import time

    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact(PROMPT)
        for press in range(80):  # pauses from 0 to 95 ms: some land between two prompts
            os.write(child.child_fd, b"\x03")
            time.sleep(press % 20 * 0.005)
        time.sleep(0.5)
        child.sendline("Still here?")
        child.expect_exact("── ")  # answered: the chat is still on
        leave_with_bye(child)
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8")
    assert "Traceback" not in log and "Exception ignored" not in log


def test_fake_chat_ctrl_d_typed_during_a_command_leaves_at_the_next_prompt(tmp_path):
    """Ctrl-D pressed during a slash command (a /load waiting on a locked log; or as the line editor ended after
    Ctrl-C at the prompt) met the terminal in cooked mode, where it is the end-of-file: a NUL byte that the next
    prompt swallowed, and the chat stayed. Typed during a reply it left at the next prompt; now here too."""
    import sqlite3
    import termios
    import time

    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    env = {**fake_env(tmp_path), "SPECCHAT_DATA_DIR": str(tmp_path / "data")}
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, env)
    try:
        child.expect_exact(PROMPT)
        child.sendline("Hi.")  # conversation 1 in the log
        child.expect_exact("── ")
        child.expect_exact(PROMPT)
        with contextlib.closing(sqlite3.connect(tmp_path / "data" / "logs.db", isolation_level=None)) as lock:
            lock.execute("PRAGMA locking_mode=EXCLUSIVE")
            lock.execute("BEGIN EXCLUSIVE")  # /load waits on it (the busy timeout)
            child.sendline("/load 1")
            deadline = time.monotonic() + 10
            while not termios.tcgetattr(child.child_fd)[3] & termios.ICANON:  # the line editor has ended
                assert time.monotonic() < deadline, "the line editor never ended"
                time.sleep(0.01)  # a spin would take a core from the child on a 2-core box
            time.sleep(0.3)  # /load is waiting
            os.write(child.child_fd, b"\x04")
            lock.execute("COMMIT")
        child.expect_exact("loaded conversation 1")
        expect_exit(child, "0", timeout=10)
    finally:
        child.close(force=True)
    assert "^D" not in (tmp_path / "session.log").read_text(encoding="utf-8").split("EXIT=")[0], "echoed"


def test_fake_chat_keys_typed_during_a_reply_wait_for_the_prompt(tmp_path):
    """A message typed while a reply streams is not echoed into the live view (an echoed Enter moved the
    cursor, and a stale copy of the line being written stayed on the screen): it appears at the next
    prompt, whole, and is sent by its Enter."""
    import fake_backend

    reply = "\n".join(f"line {n}" for n in range(60))
    target, _draft = fake_backend.write_pair(tmp_path / "files", reply=reply, eval_sleep=0.01)
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact(PROMPT)
        child.sendline("Count.")
        child.expect_exact("line 5")  # the reply is under way
        child.send("typed ahead\r")
        child.expect_exact("── ")
        child.expect_exact("typed ahead")  # at the prompt, and then answered
        child.expect_exact("── ")
        leave_with_bye(child)
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8")
    assert "typed ahead" not in log.split("── ")[0], "echoed into the live view"


def test_fake_chat_ctrl_d_during_a_reply_leaves_after_it(tmp_path):
    """Ctrl-D pressed while a reply streams ends the chat once the reply is done, as at the prompt (and
    as a shell does with a Ctrl-D typed during a command): the terminal turned it into a NUL byte, which
    the next prompt swallowed, so the chat went on."""
    import fake_backend

    # Seconds of reply left after "line 5" (10 ms a token): the press must land in the reply, where
    # the old terminal settings swallowed it; one landing at the prompt passes on any code.
    reply = "\n".join(f"line {n}" for n in range(150))
    target, _draft = fake_backend.write_pair(tmp_path / "files", reply=reply, eval_sleep=0.01)
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact(PROMPT)
        child.sendline("Count.")
        child.expect_exact("line 5")  # the reply is under way
        child.sendeof()
        child.expect_exact("line 149")  # the reply goes on to its end
        child.expect_exact("── ")
        expect_exit(child, "0", timeout=20)
    finally:
        child.close(force=True)


def test_fake_chat_ctrl_d_while_the_models_load_leaves_at_the_prompt(tmp_path):
    """Ctrl-D pressed while the models load (before the first prompt) ends the chat as the prompt comes: the
    terminal made it a NUL byte, which the prompt swallowed, and the chat waited there."""
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files", load_sleep=1.5)
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact("fake: loading")
        child.sendeof()
        expect_exit(child, "0", timeout=10)  # the prompt comes within 2 s
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8").split("EXIT=")[0]
    assert "Traceback" not in log
    assert_cursor_and_colours_restored(log)


@pytest.mark.parametrize("stdin", ["", " < /dev/null"])
def test_fake_one_shot_ctrl_c_while_the_models_load_is_no_glued_caret_c(tmp_path, stdin):
    """Ctrl-C while a one-shot reply's models load: the terminal echoed ^C, and the note after it stood glued to
    it, "^Cinterrupted" (the chat's load echoes nothing). An arrow key typed meanwhile still echoes as ^[[A, not
    as the escape that moves the cursor. With stdin piped (`cat f.py | specchat run "..."`) the terminal still
    echoes ^C: its modes are read through stderr."""
    import fake_backend

    pyte = pytest.importorskip("pyte")
    target, _draft = fake_backend.write_pair(tmp_path / "files", load_sleep=3)
    child = spawn_in_terminal(f"--target {target} --mode target hello{stdin}", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact("fake: loading")
        child.send("\x1b[A")
        time.sleep(0.3)
        child.sendintr()
        expect_exit(child, "130", timeout=20)
    finally:
        child.close(force=True)
    screen = pyte.Screen(100, 30)
    pyte.Stream(screen).feed((tmp_path / "session.log").read_bytes().decode().split("EXIT=")[0])
    rows = [row.rstrip() for row in screen.display]
    assert rows[:3] == ["fake: loading target.fake.gguf", "^[[A^C", "interrupted"]


def test_fake_chat_ctrl_c_and_ctrl_d_at_the_prompt_leave_no_blank_line(tmp_path):
    """The line editor ends its line itself when Ctrl-C or Ctrl-D ends it; the chat's newline for plain line
    reading (whose cursor stays after ^C) came on top: a blank line above the Ctrl-C note, and one between the
    last prompt and the shell's."""
    import fake_backend

    pyte = pytest.importorskip("pyte")
    target, _draft = fake_backend.write_pair(tmp_path / "files")
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact(PROMPT)
        child.send("abc")
        time.sleep(0.3)
        child.sendintr()
        child.expect_exact("does not leave")
        child.expect_exact(PROMPT)
        child.sendeof()
        expect_exit(child, "0", timeout=20)
    finally:
        child.close(force=True)
    screen = pyte.Screen(100, 30)
    pyte.Stream(screen).feed((tmp_path / "session.log").read_bytes().decode())  # its \r as they came
    rows = [row.rstrip() for row in screen.display]
    typed = rows.index(f"{PROMPT} abc")
    assert rows[typed + 1].startswith("(Ctrl-C at the prompt does not leave")
    assert rows[typed + 2] == PROMPT and rows[typed + 3].startswith("EXIT=0")


def test_fake_chat_keeps_a_reply_stopped_by_ctrl_c_pressed_twice(tmp_path):
    """Ctrl-C pressed again and again (as users do) stops the reply once: a later press landed while the
    stopped reply was being closed and logged, and the partial reply and its message were lost."""
    import json
    import time

    import fake_backend

    reply = " ".join(f"word{n}" for n in range(400))
    target, _draft = fake_backend.write_pair(tmp_path / "files", reply=reply, eval_sleep=0.01)
    child = spawn_in_terminal(f"--target {target} --mode target", tmp_path, fake_env(tmp_path))
    try:
        for turn in range(4):
            child.expect_exact(PROMPT)
            child.sendline(f"Go on {turn}.")
            # The footer with a speed: tokens have come (a stop before the first one leaves the message out)
            child.expect(r" [1-9][0-9]*\.[0-9] tok/s · target alone")
            time.sleep(0.2)
            for _press in range(4):  # the first stops the reply; the others come during its wind-down
                os.write(child.child_fd, b"\x03")
                time.sleep(turn * 0.01)
        child.expect_exact(PROMPT)
        child.sendline("/save talk.json")
        child.expect_exact(PROMPT)
        leave_with_bye(child)
    finally:
        child.close(force=True)
    saved = json.loads((tmp_path / "talk.json").read_text(encoding="utf-8"))["messages"]
    assert [m["role"] for m in saved] == ["user", "assistant"] * 4
    assert all(m.get("interrupted") and m["content"].startswith("word0") for m in saved[1::2])


def test_fake_chat_with_no_color_has_no_colour_at_its_prompt(tmp_path):
    """--no-color: the line editor's prompt was cyan still (and grey when Ctrl-C aborted it); only
    NO_COLOR reached prompt_toolkit."""
    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    child = spawn_in_terminal(f"--target {target} --mode target --no-color", tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact(PROMPT)
        child.sendintr()
        child.expect_exact("does not leave")
        child.expect_exact(PROMPT)
        child.sendline("Hello.")
        child.expect_exact("── ")
        leave_with_bye(child)
    finally:
        child.close(force=True)
    log = (tmp_path / "session.log").read_text(encoding="utf-8").split("EXIT=")[0]
    colour = re.compile(r"[;\[]([34][0-9]|9[0-7])[;m]")  # a foreground or background colour, not bold or dim
    assert [code for code in ANSI.findall(log) if code.endswith("m") and colour.search(code)] == []


@pytest.mark.parametrize("fails", [True, False])
def test_keys_typed_while_the_models_load_are_dropped_if_the_load_fails(monkeypatch, fails):
    """A Ctrl-D typed during a load that then failed stayed in the terminal's queue as a literal 0x04 once its
    modes were put back: the shell read it (bash, on an empty line, exits). A load that works keeps them."""
    import pty

    from specchat import terminal

    master, slave = pty.openpty()
    with open(slave, "rb", buffering=0, closefd=True) as stdin, open(master, "r+b", buffering=0) as keys:
        monkeypatch.setattr(sys, "stdin", stdin)
        monkeypatch.setattr(terminal, "_foreground", lambda: True)  # the pty is no controlling terminal here
        with contextlib.suppress(RuntimeError), terminal.keys_unechoed(dropped_on_error=True):
            keys.write(b"ls\x04")
            time.sleep(0.05)  # into the line discipline's queue
            if fails:
                raise RuntimeError("the model would not load")
        keys.write(b"\n")
        assert os.read(stdin.fileno(), 100) == (b"\n" if fails else b"ls\x04\n")


def test_fake_chat_wraps_its_own_lines_at_words_on_a_narrow_terminal(tmp_path):
    """specchat's own lines (the chat's greeting, /stats, --stats on stderr, -v's bars) were left to the
    terminal's wrap, which broke them inside words at 36 columns ('Ctrl-' / 'C stops', 'per r' / 'ound');
    Rich wraps them at words, as it does the legend and the line under a reply."""
    import fake_backend

    pyte = pytest.importorskip("pyte")
    target, draft = fake_backend.write_pair(tmp_path / "files")
    env = {**fake_env(tmp_path), "COLUMNS": "36"}
    child = spawn_in_terminal(f"--target {target} --draft {draft} --mode spec --stats -v", tmp_path, env)
    child.setwinsize(30, 36)
    try:
        child.expect_exact(PROMPT)
        child.sendline("Name three colours.")
        child.expect_exact(PROMPT)
        child.sendline("/stats")
        child.expect(r"pos +4 ")
        child.expect_exact(PROMPT)
        leave_with_bye(child)
    finally:
        child.close(force=True)
    screen = pyte.Screen(36, 200)
    pyte.Stream(screen).feed((tmp_path / "session.log").read_bytes().decode().split("EXIT=")[0])  # CR LF kept
    shown = " ".join(" ".join(screen.display).split())
    assert "/help for commands, Ctrl-C stops a reply, Ctrl-D or /bye leaves" in shown
    assert re.search(r"tok/s \(decode\), TTFT [0-9.]+s, stop: eog", shown), shown
    assert re.search(r"[0-9.]+ accepted per round \(\+1 target token\); time \d+% draft / \d+% verify", shown), shown
    assert len(re.findall(r"pos +1 [█░]+ +\d+% of \d+ ", shown)) == 2, shown  # under the reply, and /stats


def shown_rows(tmp_path, width: int) -> list[str]:
    """The rows a `width`-column terminal shows of session.log, up to the shell's EXIT= line."""
    pyte = pytest.importorskip("pyte")
    screen = pyte.Screen(width, 200)
    pyte.Stream(screen).feed((tmp_path / "session.log").read_bytes().decode().split("EXIT=")[0])  # CR LF kept
    return [row.rstrip() for row in screen.display if row.strip()]


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        ("--temp 0 hi", "2", "error: --temp is --temperature here  hint: other tools' flags in specchat:"),
        ("--target missing.gguf hi", "1", "error: --target missing.gguf does not exist  hint: give the path"),
        ("--mode spec --ctx 64 'Write a long story.'", "0", "stopped: the context of 64 tokens is full (raise"),
    ],
)
def test_errors_and_notes_wrap_at_words_on_a_narrow_terminal(tmp_path, args, code, line):
    """An error (a usage error too) or a note was printed as one line for the terminal to wrap, which cut it
    inside words at 30 columns ('--temperature' / ' here  hint: other tools' flag' / 's in'); on a terminal Rich
    wraps it at words (to a file or a pipe it stays one line: test_cli's assert_one_line_error)."""
    import fake_backend

    target, draft = fake_backend.write_pair(tmp_path / "files")
    pair = "" if "--target" in args else f"--target {target} --draft {draft} "
    child = spawn_in_terminal(pair + args, tmp_path, {**fake_env(tmp_path), "COLUMNS": "30"})
    child.setwinsize(30, 30)
    try:
        expect_exit(child, code)
    finally:
        child.close(force=True)
    rows = shown_rows(tmp_path, 30)
    start = next(i for i, row in enumerate(rows) if row.startswith(line[:12]))
    words = line.split()
    shown = " ".join(rows[start:]).split()[: len(words)]
    assert shown[:-1] == words[:-1] and words[-1].startswith(shown[-1]), rows  # no word cut in two


def test_fake_chat_whose_terminal_closes_with_sighup_ignored_is_no_internal_error(tmp_path):
    """The terminal closed at the chat's prompt where SIGHUP is ignored (`trap '' HUP`): prompt_toolkit's
    writes fail with EIO, which ended the chat as "internal error ... this is a bug in specchat". It is the end
    of input, as a shell takes it: the chat leaves as at Ctrl-D."""
    import signal

    import fake_backend

    target, _draft = fake_backend.write_pair(tmp_path / "files")
    env = {**os.environ, **fake_env(tmp_path), "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1"}
    env["SPECCHAT_STATE_DIR"] = str(tmp_path)
    err = tmp_path / "stderr.txt"
    run = f"exec {sys.executable} -m specchat run --target {target} --mode target 2>{err}"

    def hangup_ignored() -> None:
        default_signals()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    child = pexpect.spawn("/bin/bash", ["-c", run], env=env, dimensions=(30, 100), encoding="utf-8", timeout=120,
                          preexec_fn=hangup_ignored)  # fmt: skip
    child.expect_exact(PROMPT)
    time.sleep(0.3)  # prompt_toolkit waits for a key
    os.close(child.child_fd)  # the terminal goes away
    child.closed = True
    deadline, status = time.monotonic() + 60, None
    while status is None and time.monotonic() < deadline:  # a chat spinning on EIO fails here, not hangs the suite
        pid, code = os.waitpid(child.pid, os.WNOHANG)
        if pid:
            status = code
        else:
            time.sleep(0.1)
    if status is None:
        os.kill(child.pid, signal.SIGKILL)
        os.waitpid(child.pid, 0)
        pytest.fail("the chat did not leave when its terminal closed")
    said = err.read_text(encoding="utf-8")
    assert "internal error" not in said and "Traceback" not in said and said == "", said  # as at Ctrl-D
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
