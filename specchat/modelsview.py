"""The table of `specchat models` (Rich), or its JSON: one row per pair and role, with presence, and with
--verify the checksums; the consoles and stdout's writes are view.py's."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from .errors import SpecchatError
from .view import say, stderr_console, stdout_console, write_stdout


def model_rows(verify: bool, start=None) -> tuple[list[dict], list[SpecchatError]]:
    """`specchat models`: one row per pair and role, with presence (and checksums with verify; start(label,
    total) -> advance: a progress bar while a file is read, as `pull` shows it)."""
    from . import download, modelfiles
    from .registry import load_registry

    registry = load_registry()
    rows, bad = [], []
    # One draft serves several pairs: its file is hashed (gigabytes) and reported once, not once per pair.
    checked: dict[str, tuple[bool, str | None]] = {}  # name -> (checksum_ok, what --verify found wrong)
    for pair in registry.pairs.values():
        for role, spec in (("target", pair.target), ("draft", pair.draft)):
            path = download.locate(spec)
            row = {"pair": pair.name, "default": pair.name == registry.default_pair, "role": role}
            row |= {"model": spec.name, "repo": spec.repo, "file": spec.file, "size": spec.size}
            row |= {"sha256": spec.sha256, "present": path is not None, "path": str(path) if path else None}
            row |= {"verified": spec.verified, "mirror": spec.mirror is not None, "gated": spec.gated}
            row["checksum_ok"] = None  # not checked (no --verify, or no file): every row has the same keys
            # A directory, or a file of the wrong size, under the file's name: "no" alone hid why (--verify
            # checks that file itself and reports the wrong size as its error).
            blocked = None
            if path is None:
                blocked = (
                    download.directory_in_place(spec) or download.broken_link(spec) or download.folder_is_a_file(spec)
                )
                blocked = blocked or (None if verify else download.misfit(spec))
            elif not verify:  # --verify reads it, and says so itself
                blocked = modelfiles.present_but_unusable(spec, path)  # pull and run refuse it
            row["problem"] = blocked.message if blocked is not None else None  # --json says what the warning says
            if blocked is not None and all(exc.message != blocked.message for exc in bad):  # a shared draft: once
                bad.append(blocked)
            # A file of the wrong size under the model's name is not present, and --verify says why.
            to_check = (path or download.local_path(spec)) if verify else None
            if to_check is not None and spec.name in checked:
                row["checksum_ok"], problem = checked[spec.name]
                row["problem"] = row["problem"] or problem
            elif to_check is not None and to_check.is_file():
                try:
                    modelfiles.verify(spec, to_check, modelfiles.hashing_bar(start, spec, to_check))
                    # no sha256 to vouch for the bytes (a size alone passes any file of that size): at least a
                    # GGUF, as pull and run check it
                    if (foreign := modelfiles.not_gguf(spec, to_check)) is not None:
                        raise foreign
                    row["checksum_ok"] = True
                except SpecchatError as exc:
                    row["checksum_ok"] = False
                    row["problem"] = exc.message  # --json said which file failed only on stderr
                    bad.append(exc)
                checked[spec.name] = row["checksum_ok"], row["problem"]
            rows.append(row)
    return rows, bad


def print_models(*, as_json: bool, verify: bool) -> None:
    """`specchat models`: the table (or JSON) on stdout; a bad file (with verify) raises after it."""
    import json

    from .downloadbar import download_progress
    from .paths import models_dir, overlay_file

    with download_progress(stderr_console()) as start:  # drawn while --verify reads the files
        rows, bad = model_rows(verify, start)
    if as_json:
        info = {"models_dir": str(models_dir()), "overlay": str(overlay_file()), "pairs": rows}
        write_stdout(json.dumps(info, indent=2) + "\n", "the list")
    else:
        out = stdout_console(what="the list")
        out.print(models_table(rows))
        out.print(f"models directory: {models_dir()}\noverlay file: {overlay_file()}", markup=False, highlight=False)
    # say(), as notes and errors: a path under SPECCHAT_MODELS_DIR is the user's, and Rich's own wrapping of a
    # word that starts with a zero-width joiner raised IndexError (Rich 15)
    if bad and not verify:  # a directory or a wrong-sized file in a file's place (none hashed): a warning, exit 0
        for exc in bad:
            say(stderr_console(), f"warning: {exc.message}: {exc.hint}", style="yellow", markup=False)
        return
    for exc in bad[1:]:
        say(stderr_console(), f"bad file: {exc.message}", style="red", markup=False)
    if bad:
        raise bad[0]


def models_table(rows: list[dict]) -> Table:
    """One row per pair (rows come in target/draft order from model_rows()): the target's file on the
    first line, the draft's on the second, so that the table fits in 80 columns without cutting names."""
    caption = "* = file name not verified on the Hub"
    if any(row["checksum_ok"] is not None for row in rows):
        caption += "\nchecked = as models.toml lists it (size, sha256; without a sha256, also a well-formed GGUF)"
    if not all(row["size"] for row in rows):
        caption += "\n? = size not listed in models.toml"
    if any(row["gated"] for row in rows):
        caption += "\n(gated) = accept its licence on the Hub and set HF_TOKEN to pull it"
    table = Table(
        title="specchat pairs", title_justify="left", caption=caption, caption_justify="left", show_lines=True
    )
    table.add_column("pair", overflow="fold")
    table.add_column("target / draft file", overflow="fold")
    table.add_column("size", no_wrap=True)
    table.add_column("present", no_wrap=True)

    def name(row: dict) -> str:
        marks = ("" if row["verified"] else " *") + (" (gated)" if row["gated"] else "")
        return row["file"].removesuffix(".gguf") + marks

    def present(row: dict) -> Text:
        # --verify's verdict in the table too: "yes" alone looked the same as without --verify
        if row["checksum_ok"] is not None:
            return Text("checked", style="green") if row["checksum_ok"] else Text("BAD", style="bold red")
        return Text("yes", style="green") if row["present"] else Text("no", style="dim")

    for target, draft in zip(rows[::2], rows[1::2], strict=True):
        sizes = [r["size"] for r in (target, draft)]
        size = f"{sum(sizes) / 1e9:.1f} GB" if all(sizes) else "?"
        label = Text(target["pair"], style="bold" if target["default"] else "")
        if target["default"]:
            label.append("\n(default)", style="dim")
        files = Text(f"{name(target)}\n{name(draft)}")
        table.add_row(label, files, size, Text("\n").join([present(target), present(draft)]))
    return table
