"""Which model files a run loads: the user's own (--target, --draft) or a registry pair's, pulled when missing.
Separate from runtime.py, which loads what this decides: finding, pulling and sanity-checking the files (a
draft that is the target itself, or larger than it) needs nothing of the engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import download
from .backends import for_path
from .errors import ModelFileError, SpecchatError
from .filechecks import require_model_files, require_other_draft
from .modelfiles import local_path
from .paths import path_text
from .registry import load_registry
from .registryentries import ModelSpec

if TYPE_CHECKING:
    from .runtime import Notify, Options


@dataclass
class Resolved:
    pair_name: str | None
    target: Path
    draft: Path | None
    specs: dict[str, ModelSpec] = field(default_factory=dict)
    own_target: bool = False  # --target named a file other than the pair's own target (beside the pair's draft)

    @property
    def pair(self) -> str | None:
        """The pair's name where the target is the pair's own file (given as --target or not), else None: named
        after the pair, a 7B --target beside the default pair's draft was served, logged and reported as the
        1.5B pair."""
        return None if self.own_target else self.pair_name

    @property
    def name(self) -> str:
        """What these files are called as served and in report titles: the pair, else the target file."""
        return self.pair or path_text(self.target.name)


def resolve(options: Options, notify: Notify, start_progress) -> Resolved:
    """Paths of the files to load; registry models that are missing are pulled first (with a message)."""
    require_model_files(target=options.target_path, draft=options.draft_path)
    want_draft = options.wants_draft
    if options.target_path is not None and (options.draft_path is not None or not want_draft):
        target, draft = Path(options.target_path), _opt_path(options.draft_path)
        owner = _owning_pair(target, draft, options.pair)  # the pair's own files named: still the pair
        if options.pair is not None and owner is None:  # said, as export says it: labelled by a pair never loaded
            what = "--target and --draft name the files" if draft is not None else "--target names it"
            notify(f"pair {options.pair} is not used: {what}")
        _check_not_self(target, draft, options)
        return _said_if_swapped(Resolved(owner, target, draft), options, notify)
    pair = load_registry().pair(options.pair)
    paths: dict[str, Path] = {}
    for role, spec, given in (("target", pair.target, options.target_path), ("draft", pair.draft, options.draft_path)):
        if given is None and (role == "target" or want_draft):
            paths[role] = _present_or_pulled(spec, notify, start_progress)
    target = Path(options.target_path) if options.target_path else paths["target"]
    draft = _opt_path(options.draft_path) or paths.get("draft")
    _check_not_self(target, draft, options, pair.name)
    own = options.target_path is not None and not _pairs_file(target, pair.target)
    resolved = Resolved(pair.name, target, draft, {"target": pair.target, "draft": pair.draft}, own_target=own)
    return _said_if_swapped(resolved, options, notify)


def _said_if_swapped(resolved: Resolved, options: Options, notify: Notify) -> Resolved:
    """A draft model larger than its target is said, not refused (the output stays the target's): see
    larger_draft."""
    if resolved.draft is None or not options.wants_draft:
        return resolved
    given = (options.target_path is not None) + (options.draft_path is not None)
    note = larger_draft(resolved.target, resolved.draft, given, resolved.pair_name)
    if note is not None:
        notify(note)
    return resolved


def larger_draft(target: Path, draft: Path, given: int, pair: str | None) -> str | None:
    """A draft model as large as its target or larger costs as much per token as the target: it cannot save time, and
    --target and --draft given the wrong way round are the usual reason (`given`: how many of the two were).
    Files of a plugin backend may not be weights alone: only GGUFs are compared. run and export say it."""
    from .backends import LlamaCppBackend
    from .gguf import split_parts

    if not all(isinstance(for_path(f), LlamaCppBackend) for f in (target, draft)):
        return None
    try:  # a split model's size is all its parts'
        target_size, draft_size = (sum(part.stat().st_size for part in split_parts(f)) for f in (target, draft))
    except (OSError, ModelFileError):
        return None  # the load says what is wrong with it
    if draft_size < target_size:
        return None
    if draft_size == target_size:  # a copy of the target (a second download), or a model of its size: as costly
        return f"the draft model {draft.name} is as large as the target {target.name}: it cannot save time"
    swapped = {2: "--target and --draft swapped?", 0: f"pair {pair}'s target and draft swapped?"}
    return (
        f"the draft model {draft.name} ({draft_size / 1e9:.1f} GB) is larger than the target "
        f"{target.name} ({target_size / 1e9:.1f} GB): {swapped.get(given, 'it cannot save time')}"
    )


def _check_not_self(target: Path, draft: Path | None, options: Options, pair: str | None = None) -> None:
    if draft is None or options.self_draft:
        return
    # --target alone takes the pair's draft, --draft alone its target: the user named one file
    why = {
        (True, False): f" (--target alone drafts with pair {pair}'s draft model)",
        (False, True): f" (--draft alone drafts for pair {pair}'s target)",
    }.get((options.target_path is not None, options.draft_path is not None), "")
    instead = None
    if options.keep_draft:  # bench and tune, which have no --mode: the way without the draft model in their options
        instead = "leave out --draft" if options.draft_path is not None else "leave spec out of --modes"
    require_other_draft(target, draft, why if pair else "", *[instead] if instead else [])


def _present_or_pulled(spec: ModelSpec, notify: Notify, start_progress) -> Path:
    found = download.locate(spec)
    if found is None:
        # Offline: the error alone, not "pulling it first" and then the error. A wrong-sized file there: pull()
        # says what is wrong with it instead.
        if download.check_pullable(spec) is None:
            notify(f"{spec.local_name} is not on this machine yet: pulling it first (once)")
        result = download.pull(spec, notify, start_progress)
        notify(f"{spec.local_name}: ready from {result.source} at {result.path}")
        found = result.path
    return found


def _owning_pair(target: Path, draft: Path | None, name: str | None) -> str | None:
    """The pair (--pair, else the default) whose own files --target (and --draft) name, else None."""
    try:
        pair = load_registry().pair(name)
    except SpecchatError:  # an unknown --pair, a broken models.toml: no reason to fail a run of named files
        return None
    if not _pairs_file(target, pair.target) or (draft is not None and not _pairs_file(draft, pair.draft)):
        return None
    return pair.name


def _pairs_file(path: Path, spec: ModelSpec) -> bool:
    """Whether path is the model's file, in the models folder or the Hub's cache (through any link)."""
    candidates = [local_path(spec)]
    if path.name == Path(spec.file).name:  # a Hub snapshot keeps the file's name; only then is the cache read
        candidates.append(download.hub_cache_path(spec))
    return any(_same_file(path, candidate) for candidate in candidates if candidate is not None)


def _same_file(path: Path, other: Path) -> bool:
    try:
        return path.samefile(other)
    except OSError:  # not there: run says so as it loads it
        return False


def _opt_path(path: Path | None) -> Path | None:
    return Path(path) if path is not None else None
