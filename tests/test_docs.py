"""The docs and the code name the same things: every option a doc gives a command exists, every
environment variable the code reads is in docs/usage.md's table (and none that it does not read), and
docs/view.md's chat table lists every slash command and no other."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import typer

from specchat.cli import app
from specchat.repl import ChatSession

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def _options() -> dict[str, set[str]]:
    """Each command's option names, as typed (--no-rejected too)."""
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    options = {}
    for name in group.list_commands(ctx):
        params = group.get_command(ctx, name).params
        options[name] = {opt for p in params for opt in (*p.opts, *getattr(p, "secondary_opts", []))} | {"--help"}
    return options


def _section(doc: str, heading: str) -> str:
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_every_option_a_doc_gives_a_command_exists():
    options = _options()
    command = re.compile(r"specchat(?:\s+--debug)?\s+(" + "|".join(options) + r")\b([^`|\n]*)")
    wrong = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            line = re.sub(r"\$\([^)]*\)|\s#\s.*", "", line)  # `$(openssl rand -hex 16)`, a shell comment
            for match in command.finditer(line):
                name, rest = match.groups()
                unknown = [flag for flag in FLAG.findall(rest) if flag not in options[name]]
                wrong += [f"{doc.name}:{number}: {name} {flag}" for flag in unknown]
    assert not wrong


def _variables_read() -> set[str]:
    """The environment variables specchat's own code reads (libraries' own, such as HF_TOKEN, aside)."""
    reads = re.compile(r'(?:environ\.get|env_flag|_from_env)\(\s*"([A-Z_]+)"|envvar="([A-Z_]+)"')
    found = set()
    for source in (ROOT / "specchat").rglob("*.py"):
        found |= {a or b for a, b in reads.findall(source.read_text(encoding="utf-8"))}
    return found


def test_usage_md_lists_every_environment_variable_the_code_reads_and_no_other_of_its_own():
    table = _section("usage.md", "Environment variables")
    listed = set(re.findall(r"`([A-Z][A-Z_]+)(?:=\w+)?`", table))
    read = _variables_read()
    assert read, "the pattern found no variable: it no longer matches how the code reads them"
    assert read - listed == set()
    assert {name for name in listed if name.startswith("SPECCHAT_")} - read == set()


def test_view_md_lists_every_chat_command_and_no_other():
    table = _section("view.md", "Interactive chat")
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| ")]
    listed = {command for row in rows for command in re.findall(r"`(/[a-z]+)", row)}
    assert listed == set(ChatSession.commands())


def _keys_in_braces(text: str) -> set[str]:
    """The keys a doc lists as `{"a", "b", ...}`."""
    return set(re.findall(r'"(\w+)"', text))


def test_how_it_works_explains_every_statistic_of_json_output():
    """`--json`'s stats (and the log's, serve's speculative figures come from them) had keys that no doc
    explained: generated_tokens, total_s, mean_accepted_length_counts_bonus, ..."""
    from specchat.speculative import Stats

    table = (ROOT / "docs" / "how-it-works.md").read_text(encoding="utf-8")
    table = table[table.index("## Where the numbers come from") :]
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| `")]
    listed = {name for row in rows for name in re.findall(r"`(\w+)`", row)}
    assert set(Stats().as_dict()) - listed == set()


def test_usage_md_names_every_key_of_run_json_and_no_other():
    from types import SimpleNamespace

    from specchat.outputs import summary
    from specchat.pairfiles import Resolved
    from specchat.sampling import SamplingParams
    from specchat.speculative import Stats

    pipeline = SimpleNamespace(
        resolved=Resolved("p", Path("t.gguf"), None),
        draft=None,
        mode_note="",
        target=SimpleNamespace(n_ctx=256),
    )
    request = SimpleNamespace(
        params=SamplingParams(), k=0, mode="target", label="target alone", max_tokens=0, template_kwargs={}
    )
    generation = SimpleNamespace(text="", set_aside={}, threads=(1, 2), stats=Stats())
    row = next(line for line in (ROOT / "docs" / "usage.md").read_text().splitlines() if line.startswith("| `--json`"))
    documented = _keys_in_braces(row[: row.index("}")])
    keys = summary(pipeline, request, generation)
    assert documented == set(keys)
    # each explained after the list, not only listed: text, mode_note, settings and stats were not (settings held what?)
    explained = row[row.index("}") :]
    assert {key for key in keys if f"`{key}`" not in explained} == set()
    assert {key for key in keys["settings"] if f"`{key}`" not in explained} == set()


def test_pairs_md_names_every_key_of_models_json(isolated):
    from specchat.modelsview import model_rows

    text = (ROOT / "docs" / "pairs.md").read_text(encoding="utf-8")
    start = text.index("`--json` gives")
    listed = set(re.findall(r"`(\w+)`", text[start : text.index("\nA pair is", start)]))
    rows, _ = model_rows(False)
    assert set(rows[0]) - listed == set()


def test_every_command_help_has_examples():
    """README: "Every command has `--help` with examples"; only some commands were checked."""
    from typer.testing import CliRunner

    names = _options()
    for name in names:
        result = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0 and "Examples:" in result.stdout, name
        examples = result.stdout.split("Examples:")[1]
        assert f"specchat {name}" in examples, name


def test_usage_md_names_every_key_of_logs_json_and_no_other(fake_models):
    """`logs --json`'s objects were documented only as "a JSON list": a script had to guess their keys."""
    from typer.testing import CliRunner

    target, draft = fake_models
    runner = CliRunner()
    ran = runner.invoke(app, ["run", "--target", str(target), "--draft", str(draft), "-m", "target", "-n", "4", "Hi."])
    assert ran.exit_code == 0, ran.output
    logged = runner.invoke(app, ["logs", "--json"])
    assert logged.exit_code == 0, logged.output
    (row,) = json.loads(logged.stdout)
    text = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    start = text.index("`specchat logs --json` gives")
    assert _keys_in_braces(text[start : text.index("}", start)]) == set(row)
    # each explained after the list, not only listed: id, created, pair, label, ... were not (null meant what?)
    explained = text[text.index("}", start) : text.index("\n* ", start)]
    assert {key for key in row if f"`{key}`" not in explained} == set()
    # the top-level files are the conversation's: a reply that auto answered without the draft model it freed showed
    # the draft's path there, beside `answered_by`'s null, where the words read as this reply's ("no draft loaded")
    files = re.sub(r"\s+", " ", explained)
    assert "`pair`, `target` and `draft` the conversation's, not this reply's" in files
    assert "the same on every reply of the conversation" in files


def _run_params() -> dict[str, click.Parameter]:
    group = typer.main.get_command(app)
    run = group.get_command(click.Context(group), "run")
    return {opt: p for p in run.params for opt in p.opts}


def test_usage_md_gives_run_s_own_defaults():
    """The options table's default column is a second copy of run's defaults: each literal one (a number,
    a word) is the option's real default, and -k's per-mode defaults are those of the modes table."""
    from specchat import modes

    params = _run_params()
    table = _section("usage.md", "Options that matter")
    checked = []
    for line in table.splitlines()[2:]:
        if not line.startswith("| `"):
            continue
        names, default = line.split(" | ")[:2]
        longs = [name for name in re.findall(r"(--[\w-]+)", names) if name in params]
        pieces = [piece.strip("` ") for piece in default.split(" (")[0].split(", ")]
        literal = all(re.fullmatch(r"[\w.]+", piece) for piece in pieces) and len(pieces) == len(longs)
        for name, piece in zip(longs, pieces, strict=False) if literal else ():
            real = params[name].default
            if real is None or isinstance(real, bool):  # resolved elsewhere (the default pair); a flag's "shown"
                continue
            same = float(piece) == real if isinstance(real, int | float) else piece == real
            assert same, f"usage.md: {name} defaults to {piece}, run's default is {real!r}"
            checked.append(name)
    assert {"--mode", "--temperature", "--top-k", "--max-tokens", "--ctx", "--format"} <= set(checked), checked

    k_row = next(line for line in table.splitlines() if line.startswith("| `-k/--draft-tokens`"))
    k_help = params["--draft-tokens"].help
    for mode in modes.MODES.values():
        if mode.default_k:
            assert f"{mode.name} {mode.default_k}" in k_row and f"{mode.name} {mode.default_k}" in k_help, mode.name
    assert f"at most {modes.SPEC.max_k}" in k_help and f"drafts at most {modes.SPEC.max_k}" in k_row


def test_bench_md_names_every_built_in_suite():
    """`bench --suite tiny` was in --help only: bench.md, which explains the suites, never named it."""
    from specchat.benchsuite import SUITES

    text = (ROOT / "docs" / "bench.md").read_text(encoding="utf-8")
    start = text.index("The built-in suites (`--suite`)")
    paragraph = text[start : text.index("\n\n", start)]
    assert set(SUITES) == set(re.findall(r"`([\w-]+)`", paragraph)) - {"--suite"}


def test_how_it_works_code_map_names_every_module():
    """The code map promised one place for each kind of thing, yet the conversation log (logstore, logdb,
    logview), paths, errors and ten other modules were in none of its rows: a newcomer found no way in."""
    code_map = _section("how-it-works.md", "Code map")
    named = set(re.findall(r"([\w/]*\w+\.py)`", code_map))
    named_files = {name.rsplit("/", 1)[-1] for name in named}
    package = ROOT / "specchat"
    modules = {path.relative_to(package).as_posix() for path in package.rglob("*.py") if path.stem != "__init__"}
    missing = sorted(m for m in modules - {"__main__.py"} if m.rsplit("/", 1)[-1] not in named_files)
    assert not missing, f"how-it-works.md's code map names no row for {missing}"


def test_bench_md_gives_the_largest_prompts_file_the_bench_reads():
    """A --prompts or --history file over 256 MiB was refused (exit 2) by a limit no doc named."""
    from specchat.benchjsonl import MAX_JSONL_BYTES

    text = (ROOT / "docs" / "bench.md").read_text(encoding="utf-8")
    assert f"JSONL of at most {MAX_JSONL_BYTES >> 20} MiB" in text


def test_every_setting_a_user_may_export_is_cleared_for_the_tests():
    """README promises `pytest -m "not real"` passes; a user who exported SPECCHAT_API_KEY for serve saw dozens
    of failures. Each variable usage.md lists that changes what a command does is cleared for every test."""
    from conftest import USER_SETTINGS

    read = _variables_read()
    folders = {name for name in read if name.endswith("_DIR")}  # each test's own (private_log, isolated)
    looks = {"NO_COLOR", "TERM"}  # how output looks
    assert read - folders - looks <= set(USER_SETTINGS)


def _code_strings() -> str:
    """The text of specchat's string literals, an f-string's fields left out (each literal part on a line)."""
    import ast

    parts = []
    for source in (ROOT / "specchat").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                parts.append(node.value)
            elif isinstance(node, ast.JoinedStr):
                parts += [value.value for value in node.values if isinstance(value, ast.Constant)]
    return "\n".join(parts)


def test_troubleshooting_quotes_plain_messages_as_the_code_words_them():
    """A reworded message leaves its row unfindable by the text a user pastes. Only rows whose message is
    one plain quoted string are checked: no placeholder (X, N, PATH, <file>, ...) and no number (the code
    formats those), as a message built from pieces cannot be found whole in the code."""
    code = _code_strings()
    text = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    plain = []
    for line in text.splitlines():
        quoted = re.fullmatch(r"`([^`]+)`(?: \([^`]*\))?", line.split(" | ")[0].removeprefix("| "))
        if quoted and not re.search(r"\.\.\.|<\w+>|\d|\b[A-Z]+(?:_[A-Z]+)*\b(?!-)", quoted.group(1)):
            plain.append(quoted.group(1))
    assert len(plain) >= 5, plain  # the selection still finds rows: the table's layout has not changed
    assert [message for message in plain if message not in code] == []


def test_every_pair_and_system_option_says_its_default():
    """`run --help` said "Pair from `specchat models`." and "System prompt (- : read from stdin; ...)": which pair
    and which system prompt a run used without them was in docs/usage.md only."""
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    unsaid = []
    for name in group.list_commands(ctx):
        for param in group.get_command(ctx, name).params:
            help_text = getattr(param, "help", None) or ""
            if param.name in ("pair", "system") and "default" not in help_text and "PAIR argument" not in help_text:
                unsaid.append(f"{name} {param.name}")
    assert unsaid == []


def test_usage_md_options_table_has_a_row_for_every_option_of_run_and_no_other():
    """The table is where a reader looks an option up: one that run gained without a row was in --help only."""
    group = typer.main.get_command(app)
    run = group.get_command(click.Context(group), "run")
    options = {opt for p in run.params for opt in (*p.opts, *getattr(p, "secondary_opts", [])) if opt.startswith("-")}
    table = _section("usage.md", "Options that matter")
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| `")]
    listed = {flag for row in rows for flag in FLAG.findall(row)}
    assert options - {"--help", "-h"} == listed


def test_threads_help_says_a_count_is_capped_at_the_usable_cores():
    """--threads' help said "a number is kept to", yet `--threads 99` on 2 CPUs runs 2 threads (with a note)."""
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        for param in group.get_command(ctx, name).params:
            if param.name == "threads":
                assert "at most the usable cores" in param.help or "more capped" in param.help, name


def test_options_of_the_live_view_alone_say_so():
    """`run -v` and `--no-rejected` piped (or with --json) change nothing, without a note; their help did not
    say they are the live view's (usage.md did: "terminal only")."""
    params = _run_params()
    for name in ("--verbose", "--rejected"):
        assert "live view" in params[name].help, name


def test_modes_md_gives_the_caution_the_draft_models_acceptance_is_judged_by():
    """modes.md said decisions use an estimate one standard error below the mean, trials one above; the code
    uses half of one each way (drafters/model.py's CAUTION, swept in the simulator; docs/bench.md names the
    1 and 1.5 tried and not kept)."""
    from specchat.drafters.model import CAUTION

    words = {0.5: "half a standard error", 1.0: "one standard error"}[CAUTION]
    section = _section("modes.md", "How auto chooses")
    model = section[section.index("* **Acceptance of the draft model**") : section.index("* **A guard")]
    assert f"{words} below the mean" in model and f"optimistic one ({words} above)" in model


def _history_paragraph() -> str:
    section = _section("modes.md", "Where drafts come from")
    return section[section.index("The past conversations live in a **history index**") :]


def test_modes_md_gives_the_history_index_s_size_as_its_files_take_it():
    """modes.md said "at most about 96 MB, 12 bytes per token", yet the heads (one int64 per two tokens, rounded
    up to a power of two) make a full default index 97.6 MB: the "at most" was below what the files take."""
    from specchat.historyindex import DEFAULT_CAPACITY, FILES, head_bits

    slots = sum(FILES[name]().itemsize for name in ("tokens", "prev")) * DEFAULT_CAPACITY
    size = slots + FILES["head"]().itemsize * (1 << head_bits(DEFAULT_CAPACITY))
    text = " ".join(_history_paragraph().split())
    assert f"a ring of at most {DEFAULT_CAPACITY // 1_000_000} million tokens" in text
    assert f"about {round(size / 1e6)} MB ({round(size / 2**20)} MiB)" in text
    assert f"{size / DEFAULT_CAPACITY:.1f} bytes per token" in text


def test_modes_md_says_how_long_a_writer_waits_for_the_history_s_lock():
    """modes.md said a writer that finds the lock taken "skips its update rather than wait"; it waits up to
    history.LOCK_WAIT_S first (filelock's timeout), then skips."""
    from specchat.history import LOCK_WAIT_S

    text = " ".join(_history_paragraph().split())
    assert f"waits at most {LOCK_WAIT_S:g} s for it, then skips its update" in text


def test_modes_md_quotes_auto_s_constants_as_the_code_sets_them():
    """The code changes fast and modes.md quotes its numbers in prose: each phrase below is built from the
    constant it states, so a changed constant fails here rather than leaving the doc stale."""
    from specchat import costmeasure, costmodel, tunemeasure, tuning
    from specchat.drafters import auto, autoguard, copyodds, model, ngram, rewrite, suffix
    from specchat.modes import AUTO, NGRAM, SPEC
    from specchat.tokenchains import LONGEST, ORDER, WALK

    def listed(sizes) -> str:
        return ", ".join(map(str, sizes[:-1])) + f" and {sizes[-1]}"

    full = [n for n in tunemeasure.FULL_BATCHES if n > 16]
    quick = [n for n in tunemeasure.QUICK_BATCHES if n > 6]
    assert tunemeasure.FULL_BATCHES[:16] == tuple(range(1, 17)) and tunemeasure.QUICK_BATCHES[:6] == tuple(range(1, 7))
    phrases = [
        f"of 1..16, {listed(full)} tokens",
        f"times 1-6, {listed(quick)} twice",
        f"A drafter that ran slower is set aside for {autoguard.SET_ASIDE_ROUNDS} rounds",
        f"is set aside for {autoguard.LOOKUP_ASIDE_ROUNDS} rounds only",
        f"(within {round((autoguard.COST_SLACK - 1) * 100)}%)",
        f"at least once every {autoguard.REFERENCE_EVERY} rounds",
        f"less than {autoguard.EXPLORE_SHARE:.0%} of its time",
        f"(1/{auto.CATCH_UP_SHARED} of it per round",
        f"estimate, 1/{auto.PROMPT_READ_SHARED} of that\n  reading counted per round",
        f"(else {model.PRIOR})",
        f"even {tuning.BEST_ACCEPTANCE:.0%} acceptance",
        f"more than\n  {round((costmodel.DRIFT - 1) * 100)}% from the saved calibration",
        f"latest {costmodel.DRIFT_WINDOW} rounds (at least {costmodel.DRIFT_ROUNDS})",
        f"first {costmodel.DRIFT_CONTEXT:,} tokens",
        f"agree within {costmeasure.AGREE:.0%}",
        f"(among the latest {ngram.CANDIDATES})",
        f"copy may be up to {ngram.MAX_COPY} tokens (`-k`, default {AUTO.default_k} for auto",
        f"stays at {SPEC.max_k} or less",
        f"at most {ngram.FIRST_COPY_CAP} tokens (a batch of {ngram.FIRST_COPY_CAP + 1})",
        f"held for {ngram.REJOIN_RUN} tokens or more",
        f"(up to {ngram.REJOIN_WINDOW}, for {ngram.REJOIN_FOR} tokens of the reply)",
        f"priors of {copyodds.REJOIN_COPY_PRIORS[1]} for one matched token and {copyodds.REJOIN_COPY_PRIORS[2]}",
        f"({copyodds.ALIGNED_REJOIN_PRIORS[2]} for two where",
        f"at least {rewrite.MIN_LIKENESS:.0%} of the words",
        f"at most {rewrite.MAX_WORDS} words",
        f"(at most {rewrite.MAX_RULES})",
        f"up to {LONGEST} tokens",
        f"copy\n  of at most {suffix.PAST_MATCH} matched tokens",
        f"latest occurrences of the last {ORDER} tokens",
        f"at most the {WALK}",
        f"fixed *k* (`-k`, default {SPEC.default_k})",
        f"fixed *k* (default {NGRAM.default_k})",
    ]
    caution = {1.0: "one", 0.5: "half a"}[copyodds.COPY_CAUTION]
    phrases.append(f"({caution} standard error below the mean), since a wrong")
    text = " ".join((ROOT / "docs" / "modes.md").read_text(encoding="utf-8").split())  # lines folded anywhere
    assert [phrase for phrase in (" ".join(p.split()) for p in phrases) if phrase not in text] == []


def test_install_md_removes_both_hub_repositories_of_the_default_pair(isolated):
    """install.md's uninstall step gave `hf cache rm` the target's repository alone: the default pair's draft
    (0.5B, 491 MB) stayed in the Hugging Face cache."""
    from specchat.registry import load_registry

    pair = load_registry().pair(None)
    text = " ".join((ROOT / "docs" / "install.md").read_text(encoding="utf-8").split())
    command = text[text.index("`hf cache rm") :]
    command = command[: command.index("`", 1)]
    assert f"model/{pair.target.repo}" in command and f"model/{pair.draft.repo}" in command


def test_every_export_command_a_doc_gives_names_its_required_to():
    """troubleshooting.md gave `specchat export --target T --mode spec` as the command that needs --draft; typed as
    given it stops at "Missing option '--to'" instead. A mention of the bare command (no option) is prose."""
    command = re.compile(r"specchat export( [^`|\n]*)")
    to_option = re.compile(r"(?<![\w-])--to(?![\w-])")  # --top-k is not --to
    missing = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            rest = [match.group(1) for match in command.finditer(line)]
            missing += [f"{doc.name}:{number}" for flags in rest if FLAG.search(flags) and not to_option.search(flags)]
    assert missing == []


def test_the_system_row_says_what_no_template_sends_and_it_is_so(tmp_path):
    """--system's row did not say what --no-template does with the system prompt: it is the first text of the
    plain prompt, a blank line before the message."""
    from fake_backend import FakeEngine

    from specchat.chat import Message, prompt_tokens

    lines = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8").splitlines()
    row = next(line for line in lines if line.startswith("| `--system`"))
    assert "with `--no-template` the system prompt is sent first, then a blank line, then the message" in row
    shown = re.search(r"`(Be brief\.[^`]*)`", row).group(1).encode().decode("unicode_escape")
    engine = FakeEngine(tmp_path / "t.fake.gguf", {"role": "target"}, 4096)
    messages = [Message("system", "Be brief."), Message("user", "Hi")]
    assert engine.detokenize(prompt_tokens(engine, messages, use_template=False)) == shown == "Be brief.\n\nHi"


def _anchors(doc: Path) -> set[str]:
    """The #fragments GitHub makes of a doc's headings (code blocks aside): lower case, punctuation but `-`
    dropped, spaces as `-`; a heading met again gets `-1`, `-2`."""
    text = re.sub(r"^(```|~~~).*?^\1", "", doc.read_text(encoding="utf-8"), flags=re.S | re.M)
    anchors, seen = set(), {}
    for heading in re.findall(r"^#+ (.*)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_every_link_between_the_docs_leads_to_a_file_and_heading_there():
    """A heading reworded (or a file renamed) leaves the links to it leading to the top of a long page."""
    wrong = []
    for doc in DOCS:
        for link in re.findall(r"\]\(([^)\s]+)\)", doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", link):
                continue
            path, _, fragment = link.partition("#")
            target = (doc.parent / path) if path else doc
            if not target.exists() or (fragment and target.suffix == ".md" and fragment not in _anchors(target)):
                wrong.append(f"{doc.name}: {link}")
    assert wrong == []


def test_every_doc_section_the_code_points_to_is_there():
    """Messages and --help send the reader to "docs/X.md, 'Section'": a section renamed would send them nowhere."""
    cited = set()
    for source in (ROOT / "specchat").rglob("*.py"):
        cited |= set(re.findall(r"docs/([\w.-]+\.md), '([^']+)'", source.read_text(encoding="utf-8")))
    assert cited, "the pattern found no citation: it no longer matches how the code writes them"
    headings = {
        (name, h)
        for name in {n for n, _ in cited}
        for h in re.findall(r"^#+ (.*)$", (ROOT / "docs" / name).read_text(encoding="utf-8"), flags=re.M)
    }
    assert cited - headings == set()


def test_usage_md_says_a_conversation_keeps_more_room_for_its_reply_than_a_one_shot_prompt():
    """One-shot `run --ctx 256` answered a 196-token prompt (stopping "context full"), while `run -c` refused the
    same message: a conversation keeps chat.MIN_REPLY places for the reply. usage.md's `-c` bullet did not say so."""
    from specchat.chat import MIN_REPLY

    text = " ".join(_section("usage.md", "The conversation log").split())
    assert "A one-shot prompt needs only one place left for its reply" in text
    assert f"`-c`, `--cid` and the chat keep {MIN_REPLY} places (or `-n` where smaller) for the reply" in text
