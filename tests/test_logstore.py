"""The conversation log (a real SQLite file in the test's data directory): `run` and the chat log their
turns, `run -c`/`--cid` and /load send the logged turns as history, `specchat logs` reads them back.

The fake target here replies with everything before its reply ({history}), so a test sees exactly which
earlier turns reached the model."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path

import fake_backend
import pytest
from rich.console import Console
from test_cli import assert_one_line_error, invoke

from specchat import logaside, logdb, logfaults, logread, logstore
from specchat.chat import Conversation, Message
from specchat.paths import log_file

ADA = "My name is Ada Lovelace"
LABEL = {"label": "target alone", "stats": {}}


@pytest.fixture
def files(isolated):
    target, _draft = fake_backend.write_pair(isolated / "files", reply="Seen: {history}")
    return ["--target", str(target), "--mode", "target", "-n", "400"]  # no --draft: target alone uses none


def ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def logged() -> list[dict]:
    return json.loads(ok(invoke("logs", "--json", "-n", "100")))


def test_continue_sends_the_logged_turns_as_history(files):
    first = ok(invoke("run", *files, ADA))
    assert ADA in first
    assert ADA not in ok(invoke("run", *files, "--no-log", "What is my name?"))  # a new conversation
    second = ok(invoke("run", *files, "-c", "What is my name?"))
    assert ADA in second and first.strip() in second  # both the question and the reply were history
    rows = logged()
    assert [row["prompt"] for row in rows] == [ADA, "What is my name?"]
    assert rows[0]["conversation_id"] == rows[1]["conversation_id"]
    assert rows[1]["reply"].rstrip("\n") == second.rstrip("\n")
    assert rows[1]["stats"]["generated_tokens"] > 0 and rows[1]["label"] == "target alone"
    assert rows[1]["settings"]["max_tokens"] == 400


def test_logs_json_keys_come_in_the_order_the_usage_guide_lists(files):
    ok(invoke("run", *files, ADA))
    guide = (Path(__file__).parents[1] / "docs" / "usage.md").read_text(encoding="utf-8")
    listed = guide.split("`specchat logs --json` gives one object per reply, oldest first: `{", 1)[1].split("}`", 1)[0]
    assert list(logged()[0]) == json.loads("[" + listed + "]")


def test_cid_continues_that_conversation_and_a_new_run_starts_another(files):
    ok(invoke("run", *files, ADA))
    ok(invoke("run", *files, "Something else entirely"))
    assert ADA not in ok(invoke("run", *files, "-c", "Who?"))  # -c: the latest conversation, not the first
    assert ADA in ok(invoke("run", *files, "--cid", "1", "Who am I?"))
    assert [(row["conversation_id"], row["prompt"]) for row in logged()] == [
        (1, ADA),
        (2, "Something else entirely"),
        (2, "Who?"),
        (1, "Who am I?"),
    ]


def test_piped_stdin_and_system_prompt_are_logged(files):
    ok(invoke("run", *files, "--system", "Be brief.", "Summarise", input="piped text\n"))
    row = logged()[0]
    assert row["prompt"] == "piped text\n\nSummarise" and row["system"] == "Be brief."
    assert "Be brief." in ok(invoke("run", *files, "-c", "again"))  # the logged system prompt is kept


def test_each_reply_is_logged_with_the_system_prompt_it_was_answered_under(files):
    """`run -c --system NEW` replaced the conversation's system prompt, and `logs --json` showed NEW for the
    replies answered before it too."""
    ok(invoke("run", *files, "--system", "Be brief.", "Hi"))
    ok(invoke("run", *files, "-c", "--system", "Be verbose.", "Again"))
    ok(invoke("run", *files, "-c", "And again"))
    assert [row["system"] for row in logged()] == ["Be brief.", "Be verbose.", "Be verbose."]
    assert all("system" not in row["settings"] for row in logged())


def details(text: str) -> list[str]:
    """The line under each reply's header in `logs` (its model, mode and statistics)."""
    lines = text.splitlines()
    return [lines[n + 1] for n, line in enumerate(lines) if line.startswith("conversation ")]


def test_a_reply_another_model_answered_is_logged_and_shown_with_that_model(files, isolated):
    """The log kept the pair, target and draft once per conversation, as it began: after `run -c --target OTHER`
    (or --pair, --draft, --mode, the chat's /mode), `logs` and `logs --json` showed the reply under the first model,
    with nothing to say that another one answered it. Each reply keeps the files that answered it."""
    target, draft = Path(files[1]), isolated / "files" / "draft.fake.gguf"
    other = shutil.copy(target, isolated / "files" / "other.fake.gguf")
    ok(invoke("run", *files, "Name a fruit."))
    ok(invoke("run", *files, "-c", "--target", str(other), "Name a bird."))
    ok(invoke("run", *files, "-c", "--draft", str(draft), "--mode", "spec", "Name a tree."))
    rows = logged()
    assert [row["answered_by"] for row in rows] == [
        {"pair": None, "target": str(target), "draft": None},
        {"pair": None, "target": str(other), "draft": None},
        {"pair": None, "target": str(target), "draft": str(draft)},
    ]
    assert all(row["target"] == str(target) and row["draft"] is None for row in rows)  # the conversation's, as it began
    assert all(not {"pair", "target", "draft"} & set(row["settings"]) for row in rows)  # run --json's settings
    shown = [line.split("  ·  ")[:2] for line in details(ok(invoke("logs")))]
    assert shown == [
        ["target.fake.gguf", "target alone"],
        ["other.fake.gguf", "target alone"],
        ["target.fake.gguf (draft draft.fake.gguf)", "spec k=4"],
    ]


def test_a_reply_without_the_draft_model_keeps_the_conversations_draft_at_the_top(files, isolated):
    """The top-level files are the conversation's, as its first reply had them (docs/usage.md): a later reply made
    without the draft model has it at the top still, and null only in its own `answered_by`."""
    draft = isolated / "files" / "draft.fake.gguf"
    ok(invoke("run", *files, "--draft", str(draft), "--mode", "spec", "Name a tree."))
    ok(invoke("run", *files, "-c", "--mode", "target", "Name a bird."))
    rows = logged()
    assert [row["draft"] for row in rows] == [str(draft)] * 2
    assert [row["answered_by"]["draft"] for row in rows] == [str(draft), None]


def test_replies_of_the_model_a_conversation_began_with_are_shown_as_before(files):
    """The common case: every reply answered by the conversation's files, each line under a header as it was."""
    ok(invoke("run", *files, "Name a fruit."))
    ok(invoke("run", *files, "-c", "Name a bird."))
    rows = logged()
    assert [row["answered_by"] for row in rows] == [{key: row[key] for key in logread.MODEL_FILES} for row in rows]
    assert [re.sub(r"\d+ tokens?, [\d.]+ tok/s", "N", line) for line in details(ok(invoke("logs")))] == [
        "target.fake.gguf  ·  target alone  ·  N"
    ] * 2


def test_a_reply_logged_before_replies_kept_their_model_reads_as_the_conversations(files):
    """A log that an earlier specchat wrote has no files in a reply's settings: the conversation's answered it."""
    ok(invoke("run", *files, "Name a fruit."))
    ok(invoke("run", *files, "-c", "Name a bird."))
    with sqlite3.connect(log_file()) as conn:
        old = "json_remove(settings, '$.pair', '$.target', '$.draft')"  # as an earlier specchat wrote it
        conn.execute(f"UPDATE messages SET settings = {old} WHERE id = 2")
        conn.execute("UPDATE messages SET settings = json_set(settings, '$.target', 7) WHERE id = 4")  # garbled
    rows = logged()
    assert [row["answered_by"] for row in rows] == [{"pair": None, "target": files[1], "draft": None}] * 2
    assert [row["settings"]["max_tokens"] for row in rows] == [400, 400]
    assert [line.split("  ·  ")[0] for line in details(ok(invoke("logs")))] == ["target.fake.gguf"] * 2


def test_system_dash_reads_the_system_prompt_from_stdin(files):
    """`--system -` was the system prompt "-": a dash is stdin, as the prompt's is; the prompt is the argument."""
    ok(invoke("run", *files, "--system", "-", "Summarise", input="Be brief.\n"))
    row = logged()[0]
    assert row["system"] == "Be brief." and row["prompt"] == "Summarise"


@pytest.mark.parametrize("prompt", [[], ["-"]])
def test_system_dash_with_the_prompt_on_stdin_too_is_a_usage_error(files, prompt):
    result = invoke("run", *files, "--system", "-", *prompt, input="Be brief.\n")
    assert_one_line_error(result, 2, "--system - reads the system prompt from stdin, and the prompt would come from")
    assert '--system "$(cat FILE)"' in result.stderr


def test_system_dash_with_nothing_on_stdin_says_so(files):
    """An empty stdin (a pipe a script forgot) fell back to the template's system prompt without a word."""
    result = invoke("run", *files, "--system", "-", "Summarise", input="")
    assert result.exit_code == 0 and "--system - read nothing but blanks from stdin: the template's" in result.stderr
    assert logged()[0]["system"] is None


def test_a_prompt_that_names_a_file_is_sent_as_given_with_a_note(files, tmp_path, monkeypatch):
    """`specchat run notes.py`: the model got the file's name, the user meant its text, and nothing said so."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.py").write_text("print(1)\n")
    result = invoke("run", *files, "notes.py")
    assert result.exit_code == 0 and "notes.py is a file here, but its name is the prompt" in result.stderr
    assert "specchat run < notes.py" in result.stderr and logged()[0]["prompt"] == "notes.py"
    assert "is a file here" not in invoke("run", *files, "no-such-file.py").stderr


def test_system_dash_with_nothing_on_stdin_keeps_the_conversations_with_c(files):
    ok(invoke("run", *files, "--system", "Be brief.", "Hi"))
    result = invoke("run", *files, "-c", "--system", "-", "Again", input="  \n")
    assert "the conversation's system prompt is used" in result.stderr, result.output
    assert logged()[-1]["system"] == "Be brief."


def test_an_empty_system_with_c_keeps_the_conversations_as_usage_md_says(files):
    """usage.md said an empty --system is the template's; with -c it keeps the conversation's, as `--system -`
    reading blanks does (`--system "$SYS"` with SYS unset in a script that continues a conversation)."""
    ok(invoke("run", *files, "--system", "Be brief.", "Hi"))
    assert "Be brief." in ok(invoke("run", *files, "-c", "--system", "", "Again"))
    assert logged()[-1]["system"] == "Be brief."


def test_system_dash_on_stdin_twice_is_a_usage_error_before_the_log_is_looked_at(files):
    """`run -c --system -` on an empty log said "no conversation is logged yet" (exit 1) before the usage error
    that one stdin cannot be both (exit 2)."""
    result = invoke("run", *files, "-c", "--system", "-", input="Be brief.\n")
    assert_one_line_error(result, 2, "--system - reads the system prompt from stdin, and the prompt would come from")


def test_logs_names_the_damaged_logs_set_aside_beside_it(files):
    """A damaged log moved aside (logs-damaged-STAMP.db) was named only by the reply that moved it; `logs` said
    nothing of it since, so it stayed on disk unseen."""
    ok(invoke("run", *files, ADA))
    assert "damaged" not in invoke("logs").stderr
    folder = log_file().parent
    first = folder / "logs-damaged-20261201-101010.db"
    first.write_bytes(b"x")
    (folder / "logs-damaged-20261201-101010.db-wal").write_bytes(b"x")  # its -wal is no second log
    result = invoke("logs")
    assert ADA in ok(result)
    said = [line for line in result.stderr.splitlines() if "damaged" in line]
    assert said == [f"a damaged log was set aside: {first} (sqlite3 may recover what it holds; or delete it, with any"
                    " -wal beside it)"], result.stderr  # fmt: skip
    (folder / "logs-damaged-20261202-101010-2.db").write_bytes(b"x")
    result = invoke("logs", "-q", "nothing like it")  # said where no reply is listed too
    assert f"2 damaged logs were set aside in {folder} (logs-damaged-20261201-101010.db ... " in result.stderr
    listed = invoke("logs", "--json")  # JSON stays the list of replies, nothing beside it
    assert [row["prompt"] for row in json.loads(ok(listed))] == [ADA] and "damaged" not in listed.stderr


def test_unknown_cid_and_nothing_to_continue_are_one_line_errors(files):
    assert_one_line_error(invoke("run", *files, "--cid", "7", "hi"), 1, "no conversation 7 in the log")
    assert_one_line_error(invoke("run", *files, "-c", "hi"), 1, "no conversation is logged yet")
    ok(invoke("run", *files, "hi"))
    assert_one_line_error(invoke("run", *files, "--cid", "7", "hi"), 1, "no conversation 7 in the log")


@pytest.mark.parametrize("piped", ["", "\n"])
def test_continue_with_no_prompt_on_an_empty_log_says_there_is_nothing_to_continue(files, piped):
    """`run -c` with nothing piped (a script, cron) on a log with no conversation said "the prompt is empty",
    as if a prompt were all it lacked; the conversation to continue is looked up first."""
    assert_one_line_error(invoke("run", *files, "-c", input=piped), 1, "no conversation is logged yet")
    log_file().parent.mkdir(parents=True, exist_ok=True)
    log_file().touch()  # a log file with nothing in it
    result = invoke("run", *files, "-c", input=piped)
    assert_one_line_error(result, 1, "no conversation is logged yet")
    assert 'specchat run "your prompt"' in result.stderr
    assert_one_line_error(invoke("run", *files, "--cid", "3", input=piped), 1, "no conversation 3 in the log")


def test_continue_past_the_context_lets_the_oldest_turns_give_way(isolated):
    """run -c on a conversation that had outgrown the context was 'the prompt has 1244 tokens but the
    context holds 1024  hint: shorten the prompt' for a short new prompt; as in the chat, old turns give way."""
    target, _draft = fake_backend.write_pair(isolated / "files", reply="Noted.")
    run = ["run", "--target", str(target), "--mode", "target", "--ctx", "1024"]
    first, second = (" ".join(f"w{turn}{i % 10}" for i in range(150)) for turn in (0, 1))
    ok(invoke(*run, first))
    result = invoke(*run, "-c", second)
    assert ok(result) == "Noted.\n"
    assert "context: the oldest turn gave way to fit the context of 1024 tokens" in result.stderr
    rows = logged()  # the turn that gave way stays in the log, and the new one is logged after it
    assert [(row["conversation_id"], row["prompt"]) for row in rows] == [(1, first), (1, second)]


def test_an_id_or_count_too_large_for_sqlite_is_not_an_internal_error(files):
    """--cid/-n beyond SQLite's 64-bit INTEGER used to end in "internal error: OverflowError"."""
    ok(invoke("run", *files, "hi"))
    huge = str(2**64)
    assert_one_line_error(invoke("run", *files, "--cid", huge, "hi"), 1, f"no conversation {huge} in the log")
    assert_one_line_error(invoke("logs", "--cid", huge), 1, f"no conversation {huge} in the log")
    assert len(json.loads(ok(invoke("logs", "--json", "-n", huge)))) == 1


def test_count_zero_lists_every_reply(files):
    """simonw/llm's `llm logs -n 0` lists every entry; here it was "0 is less than 1", and no count meant all:
    a user who wanted the whole log had to guess a number larger than it. As run's `-n 0`, 0 is no limit."""
    for prompt in ("one", "two", "three"):
        ok(invoke("run", *files, prompt))
    assert [row["prompt"] for row in json.loads(ok(invoke("logs", "--json", "-n", "0")))] == ["one", "two", "three"]
    assert "you › one" in ok(invoke("logs", "-n", "0"))
    assert_one_line_error(invoke("logs", "-n", "-1"), 2, "'--count' / '-n': -1 is less than 0: give 0 or more")


def test_no_log_flag_and_environment_write_nothing(files, monkeypatch):
    ok(invoke("run", *files, "--no-log", "hi"))
    monkeypatch.setenv("SPECCHAT_NO_LOG", "1")
    ok(invoke("run", *files, "hi"))
    assert not log_file().exists()
    monkeypatch.setenv("SPECCHAT_NO_LOG", "0")
    ok(invoke("run", *files, "hi"))
    assert len(logged()) == 1
    monkeypatch.setenv("SPECCHAT_NO_LOG", "False")  # "no, do not turn logging off": it was read as on
    ok(invoke("run", *files, "hi"))
    assert len(logged()) == 2


LEAVE_A_WAL = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA wal_autocheckpoint = 0")
conn.execute("INSERT INTO messages (conversation_id, role, content, created) VALUES (1, 'user', 'in the wal', 'now')")
os._exit(0)  # a process that died: its committed messages are in logs.db-wal only
"""


@pytest.mark.parametrize("how", ["moved", "emptied"])
def test_a_wal_left_by_a_log_moved_aside_is_not_deleted(files, how):
    """After a crash the latest messages are in logs.db-wal; moving logs.db aside as the hint says (or emptying
    it) left that file behind, and the next reply's new log made SQLite delete it, with the messages. The
    new log is not started while it is there: one warning (the reply is shown), and reading names it."""
    ok(invoke("run", *files, "first"))
    path = log_file()
    subprocess.run([sys.executable, "-c", LEAVE_A_WAL, str(path)], check=True)
    wal = path.with_name("logs.db-wal")
    kept = wal.read_bytes()
    assert kept
    old = path.with_name("old.db")
    if how == "moved":
        path.rename(old)
    else:
        old.write_bytes(path.read_bytes())
        path.write_bytes(b"")
    result = invoke("run", *files, ADA)
    assert result.exit_code == 0 and ADA in result.stdout
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning: this reply was not logged")]
    assert len(warning) == 1 and "logs.db-wal" in warning[0] and "hint:" in warning[0], result.stderr
    assert wal.read_bytes() == kept
    assert_one_line_error(invoke("logs"), 1, "logs.db-wal")  # moved: it was "no conversation is logged yet"
    wal.rename(old.with_name("old.db-wal"))  # as the hint says: next to its log, which then has every message
    with closing(sqlite3.connect(old)) as conn:
        contents = [row[0] for row in conn.execute("SELECT content FROM messages")]
    assert len(contents) == 3 and contents[0] == "first" and contents[-1] == "in the wal"
    path.unlink(missing_ok=True)
    ok(invoke("run", *files, "second"))
    assert [row["prompt"] for row in logged()] == ["second"]


def damage(path: Path, first_page: int, count: int) -> None:
    """Overwrite `count` pages of a SQLite file from `first_page` on (page 0 holds the header)."""
    with path.open("r+b") as out:
        out.seek(first_page * 4096)
        out.write(os.urandom(4096 * count))


def assert_set_aside(result, reply: str, why: str) -> Path:
    """The reply shown and logged in a new log, one warning naming the damage and the file set aside."""
    assert result.exit_code == 0 and reply in result.stdout and "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip() and "measuring" not in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"warning: the conversation log {log_file()} is damaged ({why}): moved to logs-damaged-")
    assert lines[0].endswith(", a new log started")
    aside = log_file().with_name(lines[0].split("moved to ")[1].split(",")[0])
    assert aside.is_file() and [row["prompt"] for row in logged()] == [reply]
    return aside


def test_a_corrupt_log_costs_no_reply(files):
    """A log that is not SQLite at all: every reply warned 'not logged' until the user moved it aside."""
    path = log_file()
    path.parent.mkdir(parents=True)
    garbage = os.urandom(4096)
    path.write_bytes(garbage)
    assert_one_line_error(invoke("logs"), 1, "cannot read the conversation log")
    assert_one_line_error(invoke("run", *files, "-c", "hi"), 1, "cannot read the conversation log")
    aside = assert_set_aside(invoke("run", *files, ADA), ADA, "file is not a database")
    assert aside.read_bytes() == garbage  # nothing deleted
    ok(invoke("run", *files, "-c", "again"))


def test_a_log_damaged_in_the_middle_is_set_aside_and_the_reply_logged(files):
    """Pages overwritten in the middle of a real log (a disk error): the header is sound, so the log opened,
    and each reply's write failed 'database disk image is malformed' with 'not logged', for good."""
    ok(invoke("run", *files, "first"))
    recorder = logstore.Recorder(True, log_file())
    for n in range(60):  # a log of some 60 pages
        chat = Conversation(None, [Message("user", f"prompt {n} " + "x" * 1500), Message("assistant", "y" * 2000)])
        recorder.restart()
        recorder.write(chat, {"pair": None, "target": "t", "draft": "d", "mode": "target", "settings": {}} | LABEL)
    pages = log_file().stat().st_size // 4096
    damage(log_file(), pages // 2, pages - pages // 2)  # from the middle on: the pages a new reply is written to
    assert_one_line_error(invoke("logs", "-n", "100"), 1, "database disk image is malformed")
    aside = assert_set_aside(invoke("run", *files, ADA), ADA, "database disk image is malformed")
    assert aside.stat().st_size >= pages * 4096 // 2


REPLY = {"pair": None, "target": "t", "draft": "d", "mode": "target", "settings": {}} | LABEL


def test_a_damaged_log_behind_a_link_is_set_aside_where_the_link_leads(tmp_path):
    """logs.db a link to a log on another disk: the link was renamed aside, the damaged file stayed where it
    was, and a new regular logs.db started beside the link, so the logs no longer went where it sent them."""
    (tmp_path / "data").mkdir()
    (tmp_path / "disk").mkdir()
    link, real = tmp_path / "data" / "logs.db", tmp_path / "disk" / "chats.db"
    link.symlink_to(real)
    garbage = os.urandom(4096)
    real.write_bytes(garbage)
    recorder = logstore.Recorder(True, link)
    recorder.write(Conversation(None, [Message("user", ADA), Message("assistant", "hi")]), REPLY)
    aside = next(real.parent.glob("chats-damaged-*.db"))
    assert recorder.notice and recorder.notice.endswith(f"moved to {aside}, a new log started"), recorder.notice
    assert aside.read_bytes() == garbage and link.is_symlink() and os.listdir(link.parent) == ["logs.db"]
    assert [row["prompt"] for row in logread.replies(real, limit=5)] == [ADA]
    for extra in ("-wal", "-shm"):  # SQLite keeps them beside the file the link leads to
        real.with_name("chats.db" + extra).write_text(extra)
    aside = logaside.set_aside(link, logaside.file_identity(link))
    assert aside and aside.parent == real.parent and link.is_symlink() and not list(real.parent.glob("chats.db*"))
    assert aside.with_name(aside.name + "-wal").read_text() == "-wal"


def turn(prompt: str) -> Conversation:
    return Conversation(None, [Message("user", prompt), Message("assistant", "hi")])


def test_two_writers_that_find_the_log_damaged_set_it_aside_once(tmp_path, monkeypatch):
    """Two writers (run and serve, or serve's log thread and its history) that both found the log damaged:
    between one's check and its rename the other set it aside and started a new log, which the first then
    renamed aside as 'damaged', its reply with it. Here the second writes in the first one's gap."""
    path = tmp_path / "logs.db"
    garbage = os.urandom(4096)
    path.write_bytes(garbage)
    rename, other = os.rename, threading.Thread(target=lambda: logstore.Recorder(True, path).write(turn("B"), REPLY))

    def first_rename(src, dst):  # the first writer, between its check and its rename
        if not other.is_alive() and other.ident is None:
            other.start()
            other.join(timeout=1)  # done at once where nothing makes it wait
        rename(src, dst)

    monkeypatch.setattr(os, "rename", first_rename)
    logstore.Recorder(True, path).write(turn("A"), REPLY)
    other.join()
    assert sorted(row["prompt"] for row in logread.replies(path, limit=5)) == ["A", "B"]
    assert [aside.read_bytes() for aside in tmp_path.glob("logs-damaged-*.db")] == [garbage]


def test_a_damaged_log_moved_away_by_another_is_no_failure(tmp_path, monkeypatch):
    """Moved by another (by hand, or an older specchat) between the check and the rename: the rename's
    "No such file or directory" was the warning 'this reply was not logged'."""
    path = tmp_path / "logs.db"
    path.write_bytes(os.urandom(4096))
    rename = os.rename

    def moved_first(src, dst):
        monkeypatch.setattr(os, "rename", rename)
        rename(src, tmp_path / "moved.db")
        rename(src, dst)

    monkeypatch.setattr(os, "rename", moved_first)
    recorder = logstore.Recorder(True, path)
    recorder.write(turn("A"), REPLY)
    assert recorder.notice is None and [row["prompt"] for row in logread.replies(path, limit=5)] == ["A"]


def test_a_conversation_whose_log_another_set_aside_goes_on_whole_in_the_new_log(tmp_path):
    """A chat's log set aside by another writer (serve, another run, the chat's own history): its next turn
    went into the new log under the old id, joining another's conversation 1 there (its system prompt
    overwritten), or with no conversation of its own."""
    path = tmp_path / "logs.db"
    chat = logstore.Recorder(True, path)
    mine = Conversation("mine", [Message("user", "A1"), Message("assistant", "hi")])
    chat.record(mine, REPLY)
    assert logaside.set_aside(path, logaside.file_identity(path))
    logstore.Recorder(True, path).record(
        Conversation("theirs", [Message("user", "B"), Message("assistant", "hi")]), REPLY
    )
    mine.messages += [Message("user", "A2"), Message("assistant", "hi")]
    chat.record(mine, REPLY)
    assert chat.cid == 2
    assert logread.load(path, 1) == Conversation("theirs", [Message("user", "B"), Message("assistant", "hi")])
    assert logread.load(path, 2) == mine


def test_a_writer_waits_for_a_log_being_set_aside(tmp_path):
    """A log moved aside, its -wal not yet: another writer found a -wal without its log and refused to start
    a new one (LeftoverWal, 'not logged'). It waits for the move to end."""
    from filelock import FileLock

    path = tmp_path / "logs.db"
    logstore.Recorder(True, path).write(turn("old"), REPLY)
    wal = path.with_name("logs.db-wal")
    wal.write_bytes(b"the damaged log's -wal")
    with FileLock(tmp_path / ".logs.db.lock"):  # what set_aside() holds: the log moved, its -wal next
        path.rename(tmp_path / "aside.db")
        threading.Timer(0.3, lambda: wal.rename(tmp_path / "aside.db-wal")).start()
        writer = threading.Thread(target=lambda: logstore.Recorder(True, path).write(turn("new"), REPLY))
        writer.start()
        writer.join(timeout=0.6)
    writer.join()
    assert [row["prompt"] for row in logread.replies(path, limit=5)] == ["new"]
    assert (tmp_path / "aside.db-wal").read_bytes() == b"the damaged log's -wal"


def test_a_file_system_without_locks_costs_no_reply(tmp_path, monkeypatch):
    """filelock 3 raises NotImplementedError where the file system has no flock: setting a damaged log aside
    was a traceback after the reply, and a writer waiting for a log being set aside was one too."""

    class NoLocks:
        def __init__(self, path):
            pass

        def acquire(self, timeout):
            raise NotImplementedError("FileSystem does not appear to support flock")

    monkeypatch.setattr(logaside, "FileLock", NoLocks)
    path = tmp_path / "logs.db"
    path.write_bytes(os.urandom(4096))
    recorder = logstore.Recorder(True, path)
    said: list[str] = []
    recorder._say = said.append
    recorder.record(turn("A"), REPLY)
    assert len(said) == 1 and "could not be moved aside: the file system cannot lock files" in said[0], said
    path.unlink()
    path.with_name("logs.db-wal").write_bytes(b"a moved log's -wal")
    path.with_name(".logs.db.lock").touch()
    with pytest.raises(logfaults.LeftoverWal):
        logdb.refuse_leftover_wal(path)


def test_a_log_set_aside_while_a_writer_opens_it_keeps_its_wal(tmp_path, monkeypatch):
    """A writer found the log there, then another set it aside (the log moved, its -wal next): the writer
    started an empty log, and SQLite, opening it beside that -wal, deleted it with the latest messages."""
    path = tmp_path / "logs.db"
    logstore.Recorder(True, path).write(turn("first"), REPLY)
    subprocess.run([sys.executable, "-c", LEAVE_A_WAL, str(path)], check=True)
    path.with_name(".logs.db.lock").touch()  # a log was set aside here before
    aside, seen = [], logaside.file_identity(path)
    other = threading.Thread(target=lambda: aside.append(logaside.set_aside(path, seen)))
    moved, opened, rename, check = threading.Event(), threading.Event(), os.rename, logdb._leftover

    def log_first(src, dst):  # set_aside(): the log moved, and its -wal only once the writer has opened its log
        rename(src, dst)
        if Path(src) == path:
            moved.set()
            opened.wait(timeout=2)

    def checked(real):  # the writer, just past its check of the log
        found = check(real)
        if other.ident is None:
            other.start()
            moved.wait(timeout=0.5)  # at once where nothing holds it off
        return found

    monkeypatch.setattr(os, "rename", log_first)
    monkeypatch.setattr(logdb, "_leftover", checked)
    with logdb.connect(path):
        opened.set()
    other.join()
    with closing(sqlite3.connect(aside[0])) as conn:
        contents = [row[0] for row in conn.execute("SELECT content FROM messages")]
    assert contents == ["first", "hi", "in the wal"]


def test_a_damaged_log_that_cannot_be_moved_aside_says_both(files, monkeypatch):
    """A damaged log in a folder where it cannot be renamed: the warning was 'logs.db: Permission denied',
    without a word of the damage."""
    log_file().parent.mkdir(parents=True)
    log_file().write_bytes(os.urandom(4096))
    folder = str(log_file().parent)
    real = os.access  # the tests run as root, whom permissions do not stop
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == folder else real(path, mode))

    def refused(path, seen):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(logstore, "set_aside", refused)
    result = invoke("run", *files, ADA)
    assert result.exit_code == 0 and ADA in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip() and "measuring" not in line]
    assert len(lines) == 1 and lines[0].startswith(
        f"warning: this reply was not logged: {log_file()}: it is damaged (file is not a database) and could not"
        f" be moved aside: Permission denied  hint: {folder} is read-only: make it writable"
    ), result.stderr


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_log_that_is_not_a_file_is_named_so(files, kind):
    """A directory (or a FIFO) named logs.db: SQLite said "unable to open database file" (a FIFO: "disk
    I/O error"), which reads as a permission or disk fault."""
    path = log_file()
    path.parent.mkdir(parents=True)
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("FIFOs are POSIX")
    path.mkdir() if kind == "directory" else os.mkfifo(path)
    what = "it is a directory" if kind == "directory" else "it is not a regular file"
    result = invoke("run", *files, ADA)
    assert result.exit_code == 0 and ADA in result.stdout
    assert "this reply was not logged" in result.stderr and what in result.stderr, result.stderr
    assert_one_line_error(invoke("logs"), 1, what)


def test_a_locked_log_costs_no_reply(files, monkeypatch):
    ok(invoke("run", *files, "first"))
    monkeypatch.setattr(logdb, "BUSY_S", 0.2)
    holder = sqlite3.connect(log_file(), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of a long write
    try:
        result = invoke("run", *files, ADA)
    finally:
        holder.close()
    assert result.exit_code == 0 and ADA in result.stdout
    assert "warning: this reply was not logged" in result.stderr and "database is locked" in result.stderr
    assert "move the file aside" not in result.stderr  # it is only locked: a new log would be for nothing
    assert [row["prompt"] for row in logged()] == ["first"]


def test_a_log_in_a_read_only_folder_is_not_sent_aside(tmp_path, monkeypatch):
    """A read-only data folder: the warning said to move the log aside so that a new one starts, which
    that folder cannot hold either. It names the folder, and the variable that moves it."""
    folder = tmp_path / "data"
    folder.mkdir()
    readonly = sqlite3.OperationalError("attempt to write a readonly database")
    assert "move the file aside" in logfaults.not_logged_because(readonly, folder / "logs.db")  # a read-only file
    real = os.access  # the tests run as root, whom permissions do not stop
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == str(folder) else real(path, mode))
    for exc in (readonly, PermissionError(13, "Permission denied")):
        told = logfaults.not_logged_because(exc, folder / "logs.db")
        assert f"{folder} is read-only" in told and "SPECCHAT_DATA_DIR" in told and "aside" not in told, told


def test_a_log_in_a_folder_that_cannot_be_searched_is_a_warning_not_an_internal_error(tmp_path, monkeypatch):
    """`chmod 000 <data dir>`: the reply was shown, then its warning asked whether logs.db is a link (Path.is_symlink
    raises PermissionError on Python 3.11), and `run` ended as an internal error, exit 1. The warning names the
    folder, as for a read-only one."""
    folder = tmp_path / "data"
    folder.mkdir()
    real_stat, real_access = os.stat, os.access  # what mode 000 does to anyone but root

    def stat(path, *args, **kwargs):
        if str(path).startswith(f"{folder}{os.sep}"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "lstat", lambda path: stat(path, follow_symlinks=False))
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == str(folder) else real_access(path, mode))
    denied = sqlite3.OperationalError("unable to open database file")
    told = logfaults.not_logged_because(denied, folder / "logs.db")
    assert f"{folder} is read-only" in told, told


def test_logs_in_a_folder_that_cannot_be_searched_is_one_line(files, private_log, monkeypatch):
    """`chmod 000 <data dir>`: `specchat logs` and `run -c` asked whether logs.db exists (Path.exists raises
    PermissionError on Python 3.11) and ended as an internal error; it is the log that cannot be read, named."""
    ok(invoke("run", *files, "hi"))
    real_stat = os.stat  # what mode 000 does to anyone but root

    def stat(path, *args, **kwargs):
        if str(path).startswith(f"{private_log}{os.sep}"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    for args in (["logs"], ["run", *files, "-c", "again"]):
        needle = f"cannot read the conversation log {private_log / 'logs.db'}: Permission"
        assert_one_line_error(invoke(*args), 1, needle)


def test_a_log_on_a_full_disk_is_not_sent_aside(files, private_log, monkeypatch):
    """A full disk: SQLite cannot make the log's -shm ("disk I/O error"), and the reply's warning, `logs` and `run -c`
    said to move the log aside so that a new one starts, which that disk cannot hold either (and which would leave
    the user's conversations behind). They say the disk is full."""
    ok(invoke("run", *files, "hi"))
    full = sqlite3.OperationalError("disk I/O error")
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=0))
    told = logfaults.not_logged_because(full, private_log / "logs.db")
    assert f"the disk that holds {private_log} is full" in told and "aside" not in told, told

    def no_room(path):
        raise full

    monkeypatch.setattr(logdb, "connect", no_room)
    for args in (["logs"], ["run", *files, "-c", "again"]):
        assert_one_line_error(invoke(*args), 1, "disk I/O error  hint: the disk that holds")


def test_a_path_that_says_locked_is_no_lock(tmp_path):
    """The lock hint was chosen by "locked" anywhere in the error's text, which holds the path: a log under
    /srv/unlocked/ was told another specchat is writing to it. Only SQLite's own "database is locked" is one."""
    folder = tmp_path / "unlocked"
    folder.mkdir()
    log = folder / "logs.db"
    damaged = logfaults.not_logged_because(OSError(5, "Input/output error", str(log)), log)
    assert "another specchat" not in damaged and "move the file aside" in damaged, damaged
    busy = logfaults.not_logged_because(sqlite3.OperationalError("database is locked"), log)
    assert "another specchat" in busy, busy


def test_a_log_that_cannot_be_read_gets_a_hint_that_fits(files, monkeypatch):
    """`logs` (and -c) on a corrupt log hinted "or run with --no-log", an option `logs` does not have and
    that cannot make a log readable; on a merely locked log it said to move the file aside."""
    ok(invoke("run", *files, "first"))
    monkeypatch.setattr(logdb, "BUSY_S", 0.2)
    holder = sqlite3.connect(log_file(), isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")  # in WAL mode only this keeps readers out
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("DELETE FROM messages WHERE id < 0")
    try:
        locked = invoke("logs")
    finally:
        holder.close()
    assert_one_line_error(locked, 1, "database is locked")
    assert "try again" in locked.stderr and "move the file aside" not in locked.stderr
    log_file().write_bytes(os.urandom(4096))
    for result in (invoke("logs"), invoke("run", *files, "-c", "hi")):
        assert_one_line_error(result, 1, "cannot read the conversation log")
        assert "--no-log" not in result.stderr and "specchat logs --path" in result.stderr
        assert "hint: the next logged reply moves it aside and starts a new log; or move it yourself" in result.stderr


def test_a_log_in_a_folder_that_cannot_be_written_is_still_read(files, monkeypatch):
    """In a read-only folder (a read-only mount, another user's) SQLite cannot create a WAL log's -shm file,
    so opening it for reading failed with "attempt to write a readonly database": `logs` and -c stopped,
    hinting to move a sound log aside. Root writes anywhere, so SQLite's refusal is stood in for here."""
    ok(invoke("run", *files, "first"))

    def refuse(conn):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(logdb, "_setup", refuse)
    assert [row["prompt"] for row in logged()] == ["first"]
    result = invoke("run", *files, "-c", ADA)
    assert result.exit_code == 0 and "first" in result.stdout and ADA in result.stdout, result.output
    assert "this reply was not logged" in result.stderr
    wal = log_file().with_name(log_file().name + "-wal")  # messages a writer has not checkpointed yet
    wal.write_bytes(b"x")
    assert_one_line_error(invoke("logs"), 1, "attempt to write a readonly database")  # not an older log unsaid


def test_a_log_linked_to_a_disk_not_mounted_is_named_not_read_as_no_log(files, tmp_path):
    """logs.db a link to a log on another disk that is not mounted: `logs` said "no replies logged yet", `run -c`
    "no conversation is logged yet", and a reply's warning hinted to move aside a file that is not there. A link
    into a folder that is there is a log not started yet: the first reply starts it where the link leads."""
    log_file().parent.mkdir(parents=True)
    log_file().symlink_to(tmp_path / "unmounted" / "logs.db")
    said = f"it is a link to {tmp_path / 'unmounted' / 'logs.db'}, which does not exist"
    for result in (invoke("logs"), invoke("logs", "--json"), invoke("run", *files, "-c", "hi")):
        assert_one_line_error(result, 1, f"cannot read the conversation log {log_file()}: {said}")
        assert "mount the disk it leads to" in result.stderr, result.stderr
    ran = invoke("run", *files, "hi")
    assert ran.exit_code == 0 and "this reply was not logged" in ran.stderr and said in ran.stderr, ran.output
    assert "move the file aside" not in ran.stderr and not (tmp_path / "unmounted").exists()
    (tmp_path / "unmounted").mkdir()  # mounted, no log there yet
    assert invoke("logs").exit_code == 0 and logged() == []
    ok(invoke("run", *files, "first"))
    assert [row["prompt"] for row in logged()] == ["first"] and (tmp_path / "unmounted" / "logs.db").is_file()


def test_a_data_folder_linked_to_a_disk_not_mounted_is_named_as_a_link(files, tmp_path, monkeypatch):
    """SPECCHAT_DATA_DIR a link to a folder on a disk that is not mounted: '... is not a directory', hint 'remove or
    rename that file', of a link to a folder the user keeps elsewhere."""
    link = tmp_path / "data-link"
    link.symlink_to(tmp_path / "unmounted" / "specchat")
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(link))
    said = f"{link} is a link to {tmp_path / 'unmounted' / 'specchat'}, which does not exist"
    assert_one_line_error(invoke("logs"), 1, said)
    ran = invoke("run", *files, "hi")
    assert ran.exit_code == 0 and said in ran.stderr and "remove or rename that file" not in ran.stderr, ran.output
    assert "mount the disk it leads to, or fix or remove the link, or set SPECCHAT_DATA_DIR" in ran.stderr
    assert link.is_symlink() and not (tmp_path / "unmounted").exists()


def test_a_log_on_a_read_only_mount_is_still_read(files, monkeypatch):
    """On a read-only mount SQLite does not say "readonly": opening a WAL log whose -shm it cannot create there
    is SQLITE_CANTOPEN, "unable to open database file" (SQLite 3.40), so `logs` and -c failed on a sound log with
    a hint to move it aside. Root writes anywhere, so the mount's refusal is stood in for here."""
    ok(invoke("run", *files, "first"))

    def cannot_open(conn):
        exc = sqlite3.OperationalError("unable to open database file")
        exc.sqlite_errorcode = sqlite3.SQLITE_CANTOPEN
        raise exc

    monkeypatch.setattr(logdb, "_setup", cannot_open)
    monkeypatch.setattr(logdb, "writable", lambda path: False)  # the folder, to SQLite's open (a read-only mount)
    monkeypatch.setattr(logfaults, "writable", lambda path: False)  # and to the warning's hint
    assert [row["prompt"] for row in logged()] == ["first"]
    result = invoke("run", *files, "-c", ADA)
    assert result.exit_code == 0 and "first" in result.stdout and ADA in result.stdout, result.output
    assert "this reply was not logged" in result.stderr and "is read-only" in result.stderr, result.stderr
    log_file().with_name(log_file().name + "-wal").write_bytes(b"x")  # messages not in the log itself yet
    refused = invoke("logs")
    assert_one_line_error(refused, 1, "unable to open database file")
    assert "move the file aside" not in refused.stderr and "-wal" in refused.stderr, refused.stderr
    monkeypatch.setattr(logdb, "writable", lambda path: True)  # a folder that can be written: no such reason
    assert "move the file aside" in invoke("logs").stderr


def test_a_log_with_a_wal_in_a_read_only_folder_is_not_sent_aside(files, monkeypatch):
    """The log in a read-only folder, with messages still in its -wal (a writer that ended uncleanly): SQLite
    must write the folder to read them, and `logs`, -c and --cid hinted to move the sound log aside, which
    the read-only folder does not allow either. The hint says what is wrong and what reads it."""
    ok(invoke("run", *files, "first"))

    def refuse(conn):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(logdb, "_setup", refuse)
    log_file().with_name(log_file().name + "-wal").write_bytes(b"x")
    for result in (invoke("logs"), invoke("logs", "--json"), invoke("run", *files, "-c", "hi")):
        assert_one_line_error(result, 1, "attempt to write a readonly database")
        assert "move the file aside" not in result.stderr and "-wal" in result.stderr, result.stderr
        assert "writable" in result.stderr and "SPECCHAT_DATA_DIR" in result.stderr, result.stderr


def test_a_linked_log_with_a_wal_in_a_read_only_folder_is_not_read_without_it(tmp_path, monkeypatch):
    """logs.db a link to a log elsewhere, with messages still in the -wal beside that log: the -wal was looked
    for beside the link, not found, and the log opened immutable, showing an older log without saying so."""
    (tmp_path / "data").mkdir()
    (tmp_path / "disk").mkdir()
    link, real = tmp_path / "data" / "logs.db", tmp_path / "disk" / "chats.db"
    link.symlink_to(real)
    logstore.Recorder(True, link).write(turn("first"), REPLY)

    def refuse(conn):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(logdb, "_setup", refuse)
    real.with_name("chats.db-wal").write_bytes(b"x")
    with pytest.raises(logfaults.LogError) as caught:
        logread.replies(link, limit=5)
    assert caught.value.hint == logfaults.READ_ONLY_WAL_HINT


def test_another_programs_database_where_the_log_should_be_is_left_as_it_was(files):
    """SPECCHAT_DATA_DIR pointing at, say, simonw/llm's folder: its logs.db got specchat's tables added
    (and was switched to WAL), or a reply failed on its own `conversations` table."""
    path = log_file()
    path.parent.mkdir(parents=True)
    theirs = sqlite3.connect(path)
    theirs.execute("CREATE TABLE conversations (id TEXT PRIMARY KEY, name TEXT, model TEXT)")
    theirs.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, prompt TEXT)")
    theirs.commit()
    theirs.close()
    before = path.read_bytes()
    result = invoke("run", *files, ADA)
    assert result.exit_code == 0 and ADA in result.stdout
    assert "another program's database" in result.stderr and "SPECCHAT_DATA_DIR" in result.stderr
    for reading in (invoke("logs"), invoke("run", *files, "-c", "hi")):
        assert_one_line_error(reading, 1, "another program's database (tables responses)")
        assert "SPECCHAT_DATA_DIR" in reading.stderr and "--no-log" not in reading.stderr
    assert path.read_bytes() == before and not Path(f"{path}-wal").exists()
    path.unlink()
    ok(invoke("run", *files, "first"))
    with sqlite3.connect(path) as mine:  # a table the user adds to specchat's own log is theirs
        mine.execute("CREATE TABLE my_notes (text TEXT)")
    ok(invoke("run", *files, "-c", "second"))
    assert [row["prompt"] for row in logged()] == ["first", "second"]


@pytest.mark.parametrize("renamed", [False, True, "table"])
def test_a_log_from_a_newer_specchat_is_named_so_and_left_as_it_was(files, renamed):
    """A log a newer specchat set up (a later PRAGMA user_version) was read and written as if it were this
    version's: `logs` and `-c` failed on a renamed column with 'no such column: m.content' and the hint to
    move the log aside, and a reply could be written into tables of another shape. It is named as a newer
    log, the hint says to upgrade, and it is neither changed nor moved."""
    ok(invoke("run", *files, "first"))
    path = log_file()
    with sqlite3.connect(path) as newer:
        newer.execute(f"PRAGMA user_version = {logdb.VERSION + 1}")
        if renamed == "table":  # was "another program's database" (review)
            newer.execute("ALTER TABLE conversations RENAME TO chats")
        elif renamed:
            newer.execute("ALTER TABLE messages RENAME COLUMN content TO body")
    newer.close()
    before = path.read_bytes()
    result = invoke("run", *files, ADA)
    assert result.exit_code == 0 and ADA in result.stdout
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning: this reply was not logged")]
    assert len(warning) == 1 and "newer specchat" in warning[0] and "upgrade specchat" in warning[0], result.stderr
    for reading in (
        invoke("logs"),
        invoke("logs", "--json"),
        invoke("run", *files, "-c", "hi"),
        invoke("run", *files, "--cid", "1", "hi"),
    ):
        assert_one_line_error(reading, 1, f"written by a newer specchat (log version {logdb.VERSION + 1}")
        assert "upgrade specchat" in reading.stderr and "move the file aside" not in reading.stderr
    assert path.read_bytes() == before


def test_an_interrupted_reply_is_logged_as_such(isolated):
    target, _ = fake_backend.write_pair(isolated / "stop", interrupt_at=5)
    result = invoke("run", "--target", str(target), "--mode", "target", "Tell me a story.")
    assert result.exit_code == 130
    row = logged()[0]
    assert row["interrupted"] and row["prompt"] == "Tell me a story." and row["stats"]["stop_reason"] == "interrupted"


def test_a_one_shot_reply_stopped_before_its_first_token_is_not_logged(files, isolated):
    """`run -c "PROMPT"` stopped by Ctrl-C in the prefill logged the prompt with an empty reply, so the next `-c`
    sent that unanswered message with every later turn (the chat leaves such a message out)."""
    ok(invoke("run", *files, "First."))
    target, _ = fake_backend.write_pair(isolated / "stop", interrupt_at=1)  # the prompt's own eval
    assert invoke("run", "--target", str(target), "--mode", "target", "-c", "A wrong paste.").exit_code == 130
    assert [row["prompt"] for row in logged()] == ["First."]


def test_logs_search_filter_and_text_view(files):
    ok(invoke("run", *files, "about mutexes"))
    ok(invoke("run", *files, "about 100% of it"))
    ok(invoke("run", *files, "--cid", "1", "and semaphores"))  # its reply quotes "about mutexes"

    def prompts(*args):
        return [row["prompt"] for row in json.loads(ok(invoke("logs", "--json", *args)))]

    assert prompts("-q", "MUTEX") == ["about mutexes", "and semaphores"]
    assert prompts("-q", "0%") == ["about 100% of it"]
    assert prompts("-q", "t_x") == []  # _ and % are plain characters, not LIKE wildcards
    assert prompts("--cid", "1") == ["about mutexes", "and semaphores"]
    assert prompts("-n", "1") == ["and semaphores"]
    text = ok(invoke("logs", "-n", "2"))
    assert "you › about 100% of it" in text and "conversation 1" in text and "target alone" in text
    assert "conversation 1  reply 2 " in text and "conversation 2  reply 1 " in text  # its number there, not a row id
    assert "you › about mutexes" not in text
    empty = invoke("logs", "-q", "nowhere")
    assert empty.exit_code == 0 and empty.stdout == "" and "no logged reply matches" in empty.stderr
    for as_json in ([], ["--json"]):  # `logs -q "$WORD"` with WORD unset listed every reply, as if all matched
        assert_one_line_error(invoke("logs", "-q", "", *as_json), 2, "--query is empty")
        assert_one_line_error(invoke("logs", "-q", " ", *as_json), 2, "--query is empty")  # -q "$A $B", both unset
    for as_json in ([], ["--json"]):  # a conversation that is not there: an error, as for run --cid
        assert_one_line_error(invoke("logs", "--cid", "9", *as_json), 1, "no conversation 9 in the log")


def test_search_ignores_case_beyond_ascii(files):
    """SQLite's LIKE folds ASCII only: `-q école` missed "École", `-q STRASSE` "Straße" (simonw/llm's full-text
    search finds both). The search folds case as Python's str.casefold does."""
    ok(invoke("run", *files, "École et Straße"))
    ok(invoke("run", *files, "ΣΊΣΥΦΟΣ"))
    for query, found in (("école", 1), ("ÉCOLE", 1), ("STRASSE", 1), ("σίσυφος", 1), ("ecole", 0), ("t_x", 0)):
        assert len(json.loads(ok(invoke("logs", "--json", "-q", query)))) == found, query


def test_a_reply_with_garbled_settings_or_stats_is_shown_without_them(files):
    """A stats or settings column that is not a JSON object (a hand edit, a disk error) was an internal
    error in `logs`, which then showed no reply at all."""
    ok(invoke("run", *files, "first"))
    ok(invoke("run", *files, "second"))
    with sqlite3.connect(log_file()) as conn:
        conn.execute("UPDATE messages SET stats = '{bad' WHERE id = 2")
        conn.execute("UPDATE messages SET settings = '[1, 2]' WHERE id = 4")
    rows = logged()
    assert [(row["prompt"], row["stats"] is None, row["settings"] is None) for row in rows] == [
        ("first", True, False),
        ("second", False, True),
    ]
    text = ok(invoke("logs"))
    assert "you › first" in text and "you › second" in text
    with sqlite3.connect(log_file()) as conn:  # an object, but with a value of another type: a format failed on it
        conn.execute("""UPDATE messages SET stats = '{"tokens_per_s": "x", "generated_tokens": 5}' WHERE id = 2""")
    assert "5 tokens, 0.0 tok/s" in ok(invoke("logs"))


def test_a_message_that_is_not_utf8_is_read_with_its_bad_bytes_replaced(files):
    """Text that is not UTF-8 (written by another program, a disk error) made every read of the log fail:
    `logs`, `-q`, `run -c` and `--cid` said "Could not decode to UTF-8 column 'reply'" with a hint to move the
    whole log aside. The bad bytes read as U+FFFD, as in a file name, and every other message as logged."""
    ok(invoke("run", *files, "first"))
    ok(invoke("run", *files, "second"))
    with sqlite3.connect(log_file()) as conn:
        conn.execute("UPDATE messages SET content = CAST(x'48c3ff' AS TEXT) WHERE id = 2")  # conversation 1's reply
    rows = logged()
    assert [row["prompt"] for row in rows] == ["first", "second"] and rows[0]["reply"] == "H\ufffd\ufffd"
    assert "you › first" in ok(invoke("logs"))
    assert [row["prompt"] for row in json.loads(ok(invoke("logs", "--json", "-q", "SECOND")))] == ["second"]
    assert [row["prompt"] for row in json.loads(ok(invoke("logs", "--json", "-q", "h\ufffd")))] == ["first"]
    assert "Seen: " in ok(invoke("run", *files, "--cid", "1", "third"))


def test_a_message_stored_as_a_blob_reads_as_text(files):
    """Another program's message stored as a BLOB reached the views as bytes: `logs --json` was "internal error:
    TypeError: Object of type bytes is not JSON serializable", `logs` another TypeError."""
    ok(invoke("run", *files, "first"))
    with sqlite3.connect(log_file()) as conn:
        conn.execute("UPDATE messages SET content = x'48c3ff' WHERE id = 2")  # conversation 1's reply, a BLOB
        conn.execute("UPDATE messages SET content = CAST('first' AS BLOB) WHERE id = 1")
        conn.execute("UPDATE messages SET label = CAST('spec k=4' AS BLOB) WHERE id = 2")
        conn.execute("UPDATE conversations SET pair = x'70c3', target = CAST('t.gguf' AS BLOB)")
    assert [(row["prompt"], row["reply"]) for row in json.loads(ok(invoke("logs", "--json")))] == [
        ("first", "H\ufffd\ufffd")
    ]
    assert "you › first" in ok(invoke("logs"))
    assert "Seen: " in ok(invoke("run", *files, "-c", "second"))


def test_search_finds_text_in_a_log_stored_as_utf16(isolated):
    """A log made as UTF-16 (by another program, or copied in): the search read its stored bytes as UTF-8 and
    found nothing, where LIKE had found it."""
    path = log_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA encoding = 'UTF-16le'")
        conn.execute("CREATE TABLE t (x)")
        conn.execute("DROP TABLE t")
    conversation = Conversation(None, [Message("user", "a mutex here"), Message("assistant", "Ünïcode reply")])
    logstore.Recorder(True, path).write(conversation, REPLY)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA encoding").fetchone()[0] == "UTF-16le"
    assert [row["reply"] for row in logread.replies(path, limit=0, query="MUTEX")] == ["Ünïcode reply"]
    assert [row["prompt"] for row in logread.replies(path, limit=0, query="ünï")] == ["a mutex here"]


def test_logs_preview_clips_long_replies(files):
    ok(invoke("run", *files, "\n".join(f"line {i}" for i in range(20))))
    assert "more lines (--full)" in ok(invoke("logs")) and "line 19" not in ok(invoke("logs"))
    assert "line 19" in ok(invoke("logs", "--full"))


def test_logs_preview_clips_one_long_line(files):
    """The preview clipped by lines only: a pasted one-line text (minified JSON, a log) was printed whole,
    twice here (the prompt, and the fake's reply that quotes it)."""
    prompt = "word " * 500
    ok(invoke("run", *files, "--mode", "target", prompt.strip()))
    shown = ok(invoke("logs"))
    assert "more characters (--full)" in shown and len(shown) < 3_000
    assert prompt.strip() in ok(invoke("logs", "--full")).replace("\n", "")


def test_a_reply_to_a_system_prompt_alone_shows_that_prompt(isolated):
    """A `serve` request with only a system message is logged without a user turn: `logs` printed an empty
    "you › " line, as if an empty prompt had been sent."""
    reply = {"pair": None, "target": "t.gguf", "draft": None, "mode": "target", "label": "target alone"}
    reply |= {"settings": {}, "stats": {"generated_tokens": 3}}
    logstore.Recorder(True).write(Conversation("You are a pirate.", [Message("assistant", "Arr!")]), reply)
    logstore.Recorder(True).write(Conversation(None, [Message("assistant", "Hello.")]), reply)
    text = ok(invoke("logs"))
    assert "system › You are a pirate.\nArr!" in text and "you ›" not in text
    assert [row["prompt"] for row in logged()] == [None, None]


# -- concurrency -------------------------------------------------------------------------------------------

REPLY = {"pair": None, "target": "t.gguf", "draft": None, "mode": "target", "label": "target alone"}
REPLY |= {"settings": {"k": 0}, "stats": {"generated_tokens": 1}}


def write_turns(tag: str, turns: int, path: Path) -> None:
    recorder, conversation = logstore.Recorder(True, path), Conversation()
    for turn in range(turns):
        conversation.messages += [Message("user", f"{tag} {turn}"), Message("assistant", "ok")]
        recorder.record(conversation, REPLY)
    assert not recorder.warned


def count_messages(path: Path) -> list[tuple[int, int]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT conversation_id, COUNT(*) FROM messages GROUP BY 1 ORDER BY 1").fetchall()


def test_threads_with_their_own_connections_all_land(tmp_path):
    path = tmp_path / "fresh" / "logs.db"  # created by the writers themselves, at once
    threads = [threading.Thread(target=write_turns, args=(f"t{i}", 20, path)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert count_messages(path) == [(1, 40), (2, 40), (3, 40), (4, 40)]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_the_log_is_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "logs.db"
    write_turns("private", 1, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_two_processes_writing_at_once_both_land(tmp_path):
    path, go = tmp_path / "logs.db", tmp_path / "go"
    code = (
        "import sys, time, pathlib, test_logstore as t\n"
        "while not pathlib.Path(sys.argv[2]).exists(): time.sleep(0.01)\n"
        "t.write_turns(sys.argv[1], 40, pathlib.Path(sys.argv[3]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), *sys.path])}
    children = [
        subprocess.Popen([sys.executable, "-c", code, tag, str(go), str(path)], env=env, stderr=subprocess.PIPE)
        for tag in ("a", "b")
    ]
    go.touch()
    for child in children:
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, err.decode()
    assert count_messages(path) == [(1, 80), (2, 80)]


# -- the chat: /load, /save, /reset ----------------------------------------------------------------------


@pytest.fixture
def chat(isolated):
    """new_session() -> a ChatSession on a fake target that echoes its history, logging to the test's log."""
    from specchat.repl import ChatSession, ChatSettings
    from specchat.runtime import Options, open_pipeline

    target, _ = fake_backend.write_pair(isolated / "files", reply="Seen: {history}")
    with open_pipeline(Options(target_path=target, mode="target", n_ctx=4096), lambda _m: None) as pipeline:

        def new_session(log=None):
            console = Console(file=io.StringIO(), width=100, force_terminal=False)
            log = log or logstore.Recorder(True)
            return ChatSession(pipeline, ChatSettings(mode="target", max_tokens=1000), console, None, log)

        yield new_session


def said(session) -> str:
    return session.console.file.getvalue()


def test_chat_logs_turns_and_load_id_continues_them(chat):
    first = chat()
    first.ask(ADA)
    first.ask("Second turn")
    assert [row["prompt"] for row in logread.replies(log_file(), limit=10)] == [ADA, "Second turn"]
    assert [row["turn"] for row in logread.replies(log_file(), limit=10)] == [1, 2]
    later = chat()
    later.command("/load 1")
    assert "loaded conversation 1: 4 messages" in said(later)
    assert ADA in later.ask("What is my name?").text
    assert count_messages(log_file()) == [(1, 6)]
    later.command("/load 99")
    assert "no conversation 99 in the log" in said(later) and len(later.conversation.messages) == 6
    later.command(f"/load {2**64}")  # beyond SQLite's INTEGER: used to end the chat with an OverflowError
    assert f"no conversation {2**64} in the log" in said(later) and len(later.conversation.messages) == 6


def test_save_then_load_file_is_logged_as_a_new_conversation(chat, tmp_path):
    first = chat()
    first.conversation.system = "Be kind."
    first.ask(ADA)
    first.command(f"/save {tmp_path / 'c.json'}")
    later = chat()
    later.command(f"/load {tmp_path / 'c.json'}")
    assert later.conversation.system == "Be kind." and len(later.conversation.messages) == 2
    reply = later.ask("What is my name?").text
    assert ADA in reply and "Be kind." in reply
    assert count_messages(log_file()) == [(1, 2), (2, 4)]  # the loaded turns, then the new one
    later.command("/reset")
    later.ask("Fresh start")
    assert count_messages(log_file())[-1] == (3, 2)
    (tmp_path / "bad.json").write_text('{"messages": [{"role": "robot"}]}')
    later.command(f"/load {tmp_path / 'bad.json'}")
    later.command(f"/load {tmp_path / 'missing.json'}")
    assert "holds no conversation" in said(later) and "cannot read" in said(later)


def test_chat_started_with_continue_has_the_history(chat):
    chat().ask(ADA)
    session = chat(logstore.Recorder.start(no_log=False, latest_one=True))
    assert [m.role for m in session.conversation.messages] == ["user", "assistant"]
    assert session.conversation.messages[0].content == ADA
    assert ADA in session.ask("Who?").text and count_messages(log_file()) == [(1, 4)]


def test_chat_with_logging_off_writes_nothing(chat):
    chat(logstore.Recorder(False)).ask(ADA)
    assert not log_file().exists()


def test_continue_on_a_terminal_opens_the_chat_with_the_history(files, tmp_path):
    from test_terminal import PROMPT, fake_env, leave_with_bye, spawn_in_terminal

    ok(invoke("run", *files, ADA))
    child = spawn_in_terminal(" ".join([*files, "-c"]), tmp_path, fake_env(tmp_path))
    try:
        child.expect_exact("continuing conversation 1 (2 messages)")
        child.expect_exact(PROMPT)
        child.sendline("Who am I?")
        child.expect_exact("Lovelace")  # the logged first turn reached the model
        child.expect_exact(PROMPT)
        leave_with_bye(child)
    finally:
        child.close(force=True)
    assert [row["prompt"] for row in logged()] == [ADA, "Who am I?"]


def test_logs_prints_pair_and_file_names_as_they_are_not_as_markup(isolated):
    """The line under a reply's header (pair or target file, mode, stats) was printed as Rich markup: a pair
    named 'a[/]b' in models.toml made `logs` an internal error, a target '[i]t.gguf' was shown as 't.gguf'."""
    reply = {"pair": "a[/]b", "target": "t.gguf", "draft": None, "mode": "target", "label": "target alone"}
    reply |= {"settings": {}, "stats": {"generated_tokens": 3}}
    logstore.Recorder(True).write(Conversation(None, [Message("user", "Hi"), Message("assistant", "Ho")]), reply)
    reply |= {"pair": None, "target": "/models/[i]t.gguf"}
    logstore.Recorder(True).write(Conversation(None, [Message("user", "Hi"), Message("assistant", "Ho")]), reply)
    text = ok(invoke("logs"))
    assert "a[/]b  ·  target alone" in text and "[i]t.gguf  ·  target alone" in text


def test_logs_shows_control_characters_in_a_target_file_name_rather_than_sending_them(isolated):
    """The details line printed a --target file name as it was: its ESC sequence recoloured (or cleared) the
    terminal of whoever ran `specchat logs`, its newline split the line in two."""
    reply = {"pair": None, "target": "/m/evil\x1b[2J\nx\u202e.gguf", "draft": None, "mode": "target"}
    reply |= {"label": "target alone", "settings": {}, "stats": {"generated_tokens": 3}}
    logstore.Recorder(True).write(Conversation(None, [Message("user", "Hi"), Message("assistant", "Ho")]), reply)
    text = ok(invoke("logs"))
    assert "\x1b" not in text and "\u202e" not in text
    assert "evil\\x1b[2J\\nx\\u202e.gguf  ·  target alone" in text


def test_continue_and_cid_together_are_a_usage_error(files):
    """-c (the latest) with --cid 1 continued conversation 1 in silence, whichever was the latest."""
    ok(invoke("run", *files, ADA))
    ok(invoke("run", *files, "Something else entirely"))
    assert_one_line_error(invoke("run", *files, "-c", "--cid", "1", "Who?"), 2, "-c and --cid both choose")
    assert len(logged()) == 2  # nothing was sent, nor logged


def test_logs_shows_control_characters_in_prompts_and_replies_rather_than_sending_them(isolated):
    """A logged prompt or reply holding ESC sequences cleared the screen or retitled the window of whoever
    ran `specchat logs`; --json keeps the text as it was."""
    reply = {"pair": None, "target": "t.gguf", "draft": None, "mode": "target", "label": "target alone"}
    reply |= {"settings": {}, "stats": {"generated_tokens": 3}}
    said = [Message("user", "Hi\x1b[2J"), Message("assistant", "Ho\x1b]0;x\x07\x00")]
    logstore.Recorder(True).write(Conversation(None, said), reply)
    for args in ((), ("--full",)):
        text = ok(invoke("logs", *args))
        assert "\x1b" not in text and "\x00" not in text
        assert "you › Hi␛[2J\nHo␛]0;x␇␀" in text
    assert [row["reply"] for row in logged()] == ["Ho\x1b]0;x\x07\x00"]


def test_a_data_dir_under_an_unknown_users_home_is_not_an_internal_error(isolated, monkeypatch):
    """SPECCHAT_DATA_DIR='~nosuchuser/d' (quoted, so no shell expanded it) made every command an internal
    error (Path.expanduser's RuntimeError); as in a shell, the unknown ~user is left as it is."""
    monkeypatch.chdir(isolated)
    monkeypatch.setenv("SPECCHAT_DATA_DIR", "~nosuchuser-specchat/d")
    assert ok(invoke("logs", "--path")) == f"{isolated / '~nosuchuser-specchat/d/logs.db'}\n"


@pytest.mark.parametrize("name", [f"SPECCHAT_{n}_DIR" for n in ("DATA", "MODELS", "CONFIG", "CACHE")])
def test_a_relative_folder_variable_is_taken_from_the_current_directory_and_shown_whole(isolated, monkeypatch, name):
    """SPECCHAT_DATA_DIR=data: `logs --path` printed "data/logs.db", and every message named the folder so, a path
    that says nothing of where it is once read elsewhere (each run takes it from its own directory, as docs say)."""
    from specchat import paths

    monkeypatch.chdir(isolated)
    monkeypatch.setenv(name, "data")
    folder = {"DATA": paths.data_dir, "MODELS": paths.models_dir, "CONFIG": paths.config_dir}
    folder["CACHE"] = paths.cache_dir
    assert folder[name.split("_")[1]]() == isolated / "data"
    if name == "SPECCHAT_DATA_DIR":
        assert ok(invoke("logs", "--path")) == f"{isolated / 'data' / 'logs.db'}\n"


def test_a_relative_folder_variable_in_a_deleted_directory_is_no_internal_error(isolated, monkeypatch):
    """Made absolute (this session), a relative SPECCHAT_DATA_DIR needed the current directory: deleted under a
    shell still in it, `logs --path` was "internal error: FileNotFoundError"; the path is kept as given there."""
    gone = isolated / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    monkeypatch.setenv("SPECCHAT_DATA_DIR", "data")
    assert ok(invoke("logs", "--path")) == "data/logs.db\n"


def test_logs_path_with_json_prints_json(isolated, private_log):
    """`logs --path --json` printed the bare path, which a JSON reader cannot parse; it is an object, as
    every other --json output is."""
    assert json.loads(ok(invoke("logs", "--path", "--json"))) == {"path": str(private_log / "logs.db")}
    assert ok(invoke("logs", "--path")) == f"{private_log / 'logs.db'}\n"  # without --json: the plain path


def test_a_data_dir_that_is_a_file_is_named_in_the_warning(files, private_log):
    """SPECCHAT_DATA_DIR naming a file: the reply was printed with 'not logged: .../logs.db: File exists'
    and a hint to move the log aside; the warning names the file and how to get past it. A log that
    cannot be written never fails the reply (exit 0), as for a locked or unwritable log."""
    private_log.write_text("kept")
    result = invoke("run", *files, "--mode", "suffix", ADA)
    assert result.exit_code == 0, result.output
    assert ADA in result.stdout
    assert "File exists" not in result.stderr and "Errno" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if "not logged" in line]
    assert len(lines) == 1, result.stderr
    assert f"{private_log} is not a directory" in lines[0]
    assert "hint: SPECCHAT_DATA_DIR names this file: set it to a folder, or run with" in lines[0]
    assert private_log.read_text() == "kept"


def test_reading_the_log_below_a_data_dir_that_is_a_file_is_an_error_naming_it(files, private_log):
    """`logs` said "no replies logged yet (log: .../logs.db)" when SPECCHAT_DATA_DIR named a file, as if the
    log were only empty; -c said "no conversation is logged yet". Each names the file, with the way past it."""
    private_log.write_text("kept")
    for result in (invoke("logs"), invoke("logs", "--json"), invoke("run", *files, "-c", "hi")):
        assert_one_line_error(result, 1, f"cannot read the conversation log {private_log / 'logs.db'}")
        assert f"{private_log} is not a directory" in result.stderr
        assert "hint: SPECCHAT_DATA_DIR names this file: set it to a folder" in result.stderr
    assert private_log.read_text() == "kept"


def test_the_damaged_logs_set_aside_are_named_oldest_first(tmp_path):
    """By name, logs-damaged-STAMP-2.db sorted before logs-damaged-STAMP.db ("-" before ".") and -10 before -2:
    the note's "first ... last" could name them out of order within one second."""
    from specchat.logaside import set_aside_logs

    names = ["logs-damaged-20261201-101010.db", "logs-damaged-20261201-101010-2.db"]
    names += ["logs-damaged-20261201-101010-10.db", "logs-damaged-20261202-000000.db"]
    for name in reversed(names):
        (tmp_path / name).write_bytes(b"x")
    assert [path.name for path in set_aside_logs(tmp_path / "logs.db")] == names


def test_a_hand_made_damaged_log_name_does_not_stop_the_listing(tmp_path):
    from specchat.logaside import set_aside_logs

    odd = tmp_path / "logs-damaged-20261201-101010-\u00b2.db"  # a digit int() cannot read
    odd.write_bytes(b"x")
    assert set_aside_logs(tmp_path / "logs.db") == [odd]


def test_logs_cid_reads_that_conversation_through_the_index(isolated, monkeypatch):
    """`logs --cid N` found N's replies by reading the whole log from its newest message down (the filter was
    `:cid IS NULL OR ...`, which SQLite cannot look up in an index): on a log of months, one old conversation
    cost a read of every message. The plan of each query it runs must use the index for its messages."""
    path = log_file()
    with logdb.connect(path) as conn, logdb.transaction(conn):
        for cid in (1, 2):
            conn.execute("INSERT INTO conversations (id, created) VALUES (?, 'now')", (cid,))
            conn.executemany(
                "INSERT INTO messages (conversation_id, role, content, created) VALUES (?, ?, 'x', 'now')",
                [(cid, role) for _ in range(3) for role in ("user", "assistant")],
            )
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    assert [row["turn"] for row in logread.replies(path, limit=2, cid=1)] == [2, 3]
    monkeypatch.undo()
    [listing] = [sql for sql in statements if "FROM messages m" in sql]
    with closing(sqlite3.connect(path)) as conn:
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + listing)]
    # SQLite before 3.36 writes "SCAN TABLE m" and "SEARCH TABLE m USING"
    assert not any(re.match(r"SCAN (TABLE )?m\b", step) for step in plan), plan
    assert any(re.match(r"SEARCH (TABLE )?m USING", step) for step in plan), plan


def _conversations(path: Path, turns: list[int]) -> None:
    """Conversations of these many turns each, their messages interleaved (as two chats at once log them)."""
    with logdb.connect(path) as conn, logdb.transaction(conn):
        for cid in range(1, len(turns) + 1):
            conn.execute("INSERT INTO conversations (id, created) VALUES (?, 'now')", (cid,))
        for turn in range(max(turns)):
            for cid, length in enumerate(turns, 1):
                if turn < length:
                    conn.executemany(
                        "INSERT INTO messages (conversation_id, role, content, created) VALUES (?, ?, ?, 'now')",
                        [(cid, "user", f"ask {cid}.{turn + 1}"), (cid, "assistant", f"reply {cid}.{turn + 1}")],
                    )


def _steps_to_list(path: Path, monkeypatch) -> int:
    """SQLite's virtual-machine steps (in thousands) that logread.replies() took to list the whole log."""
    steps = [0]
    connect = sqlite3.connect

    def counted(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1), 1000)
        return conn

    monkeypatch.setattr(sqlite3, "connect", counted)
    logread.replies(path, limit=0)
    monkeypatch.undo()
    return steps[0]


def test_logs_numbers_a_long_conversation_in_steps_that_grow_with_its_length(tmp_path, monkeypatch):
    """Each reply's number was a COUNT(*) of its conversation's earlier replies: quadratic in the conversation's
    length (0.41 s to list one of 2,000 turns, against 0.034 s for as many replies in short ones). Twice the
    turns must cost about twice the work, not four times."""
    short, long = tmp_path / "short.db", tmp_path / "long.db"
    _conversations(short, [300])
    _conversations(long, [600])
    assert [row["turn"] for row in logread.replies(long, limit=0)] == list(range(1, 601))
    assert _steps_to_list(long, monkeypatch) < 3 * _steps_to_list(short, monkeypatch)


def test_a_replys_number_is_its_place_in_its_whole_conversation_whatever_is_left_out(isolated):
    _conversations(log_file(), [5, 3])
    rows = logread.replies(log_file(), limit=0, query="reply 1.")
    assert [(row["conversation_id"], row["turn"]) for row in rows] == [(1, n) for n in range(1, 6)]
    rows = logread.replies(log_file(), limit=2, query="2.")  # "reply 2.2", "reply 2.3" and prompt "ask 2.3"...
    assert [(row["reply"], row["turn"]) for row in rows] == [("reply 2.2", 2), ("reply 2.3", 3)]
    rows = logread.replies(log_file(), limit=3)
    assert [(row["reply"], row["turn"]) for row in rows] == [("reply 2.3", 3), ("reply 1.4", 4), ("reply 1.5", 5)]
    rows = logread.replies(log_file(), limit=1, query="ASK 2.2", cid=2)
    assert [(row["reply"], row["turn"]) for row in rows] == [("reply 2.2", 2)]


def test_before_sqlite_3_25_a_replys_number_is_counted(isolated, monkeypatch):
    """Python 3.11 may be built on a SQLite without window functions: the number is the same, counted."""
    _conversations(log_file(), [3, 2])
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 24, 0))
    rows = logread.replies(log_file(), limit=0, query="reply 1.")
    assert [(row["conversation_id"], row["turn"]) for row in rows] == [(1, 1), (1, 2), (1, 3)]


def test_logs_reads_the_log_row_by_row(isolated, monkeypatch):
    """`logs -n 0 --json` read every row into a dict, then built one string of them all: 835 MB for a log of 51M
    characters. The rows are made as they are taken."""
    _conversations(log_file(), [3, 2])
    made = []
    monkeypatch.setattr(logread, "_reply", lambda row, make=logread._reply: made.append(row) or make(row))
    rows = logread.each_reply(log_file(), limit=0)
    assert next(rows)["reply"] == "reply 1.1" and len(made) == 1
    rows.close()


def test_logs_json_is_written_item_by_item_as_one_json_list_would_be(monkeypatch, capsys):
    from specchat import view

    items = [{"a": 1, "text": 'two\nlines \u00e9 "q"', "nested": {"k": [1, {}], "e": {}}}, {"b": None}]
    written: list[str] = []
    monkeypatch.setattr(view._Stdout, "write", lambda self, text: written.append(text) or len(text))
    for value in ([], items[:1], items):
        written.clear()
        view.write_json_list(iter(value), "the log")
        assert "".join(written) == view.stdout_json(value, indent=2) + "\n"
        assert len(written) == len(value) + 2  # "[", each item, the end


@pytest.mark.parametrize("failure", [KeyboardInterrupt, logfaults.LogError])
def test_ctrl_c_or_a_log_failing_in_logs_json_leaves_the_items_written_as_a_json_list(capsys, failure):
    """A log damaged past its first pages (its error on stderr, exit 1) left half a list on stdout: '[' and the
    items read, unclosed, where all was read before anything was written before."""
    from specchat import view

    def items():
        yield {"a": 1}
        yield {"b": 2}
        raise failure("database disk image is malformed") if failure is not KeyboardInterrupt else failure

    with pytest.raises(failure):
        view.write_json_list(items(), "the log")
    assert json.loads(capsys.readouterr().out) == [{"a": 1}, {"b": 2}]


def test_a_ctrl_c_inside_a_search_is_a_ctrl_c_not_a_log_to_move_aside(isolated, monkeypatch):
    """SQLite turned a Ctrl-C that landed in -q's test (most of a search's time on a long log) into "user-defined
    function raised exception": `logs -q` exited 1 saying the log could not be read, hinting to move it aside.
    Raised inside the test or anywhere in SQLite's reading (its handler is specchat's then), it is a Ctrl-C."""
    import signal

    _conversations(log_file(), [30])
    calls, handlers = [0], []
    contains = logread._Holds.contains

    def interrupted_at_the_fifth(self, text, folded_query):
        calls[0] += 1
        handlers.append(signal.getsignal(signal.SIGINT))
        if calls[0] == 5:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, handled where Python next looks
        return contains(self, text, folded_query)

    monkeypatch.setattr(logread._Holds, "contains", interrupted_at_the_fifth)
    # as in a terminal: a runner started in the background (`.ci/run &`) passes SIGINT on as ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            logread.replies(log_file(), limit=0, query="reply")
        assert calls[0] < 60 and signal.default_int_handler not in handlers  # SQLite stopped; Ctrl-C taken over
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # and given back
        calls[0] = 0
        result = invoke("logs", "-n", "0", "-q", "reply", "--json")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert result.exit_code == 130, result.output
    assert "cannot read" not in result.stderr and "Traceback" not in result.output


def test_a_continued_run_too_long_for_the_context_names_only_its_own_options(files):
    """`run -c` whose message no longer fits with the system prompt gave the chat's hint: /system and
    "start the chat", in a one-shot run that has neither."""
    ok(invoke("run", *files, "Name a fruit."))
    result = invoke("run", *files, "-c", "--ctx", "256", "--system", "be brief " * 120, "Say hi.")
    assert_one_line_error(result, 1, "this message takes")
    assert "/system" not in result.stderr and "chat" not in result.stderr, result.stderr
    assert "shorten it or the system prompt (--system), or raise --ctx" in result.stderr, result.stderr
