"""Measured costs and acceptance priors, saved per pair and machine (`specchat tune`, or a quick
calibration the first time `--mode auto` runs), so that auto starts from this machine's numbers.

A calibration is only saved when it was taken on a quiet machine: one taken while other processes
used the CPUs is used for that run alone and taken again next time. A run whose step time drifts far
from the saved calibration, the CPUs not busy, marks it stale, so the next start measures again. Measuring is
tunemeasure.py's, writing tuningsave.py's.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .costmodel import Costs
from .modes import SPEC
from .paths import config_dir

# What a draft of the target's family is judged by when deciding whether to keep it at all: about the best it
# reaches on greedy code (88-100% per reply in the quick bench). Judged at 100%, a 2-core Zen 4 calibrated at
# c 0.54 and a batch of 16 at 7.75 steps kept it for a 1% gain that needed 15 guesses in a row all right: auto
# never drafted with it, yet every reply prefilled its prompt in it too, and the first token came 20-70% later
# than the target alone's (bench --suite quick, 2026-12-04).
BEST_ACCEPTANCE = 0.95

VERSION = 4  # 4: ratios measured interleaved, with the load they were measured under


@dataclass
class Tuning:
    key: str
    costs: Costs
    priors: dict[str, float] = field(default_factory=dict)  # measured acceptance per mode
    source: str = "calibration"  # or "tune"
    details: dict = field(default_factory=dict)
    stale: bool = False
    machine: dict = field(default_factory=dict)  # what it was measured on (measured_on); {}: a file written before

    def draft_model_can_pay(self) -> bool:
        """Could the draft model beat the target alone with BEST_ACCEPTANCE of its guesses accepted, or what tune
        measured where that was more (else tune's verdict could name spec for a draft model auto leaves off)?"""
        if self.costs.draft_step is None:
            return True  # unknown: let auto find out
        acceptance = max(BEST_ACCEPTANCE, min(1.0, self.priors.get("spec") or 0.0))
        k, _ = self.costs.best_length([acceptance] * SPEC.max_k, self.costs.draft_step)
        return k > 0

    def as_dict(self) -> dict:
        return {
            "version": VERSION,
            "key": self.key,
            "source": self.source,
            "step_s": self.costs.calibrated_step_s,
            "v": {str(n): v for n, v in sorted(self.costs.verify.items())},
            "c": self.costs.draft_step,
            "busy": self.costs.busy,
            "stale": self.stale,
            "priors": self.priors,
            "details": self.details,
            "machine": self.machine or None,
        }


def measured_on(threads: int) -> dict:
    """The CPUs and threads a tuning is measured with, as bench's meta.machine names them: the key's hash covers
    them, but a tuning read later could not say what it had measured."""
    from .bench import machine_info
    from .engineconfig import default_threads

    info = machine_info()
    return {key: info[key] for key in ("cpu", "cpus", "usable_cpus")} | {"threads": threads or default_threads()}


def machine_key(target: Path, draft: Path | None, threads: int, gpu_layers: int, draft_gpu_layers: int) -> str:
    """Tuning is valid for these files on this CPU/GPU setup and llama.cpp build. The default threads (0) on
    fewer CPUs than the machine has (`taskset`, a container's cpuset) are keyed by their count: as "0", costs
    measured on one thread were trusted by a later run on all the machine's."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from .bench import machine_info

    try:
        llama_version = version("llama-cpp-python")
    except PackageNotFoundError:
        llama_version = "?"
    info = machine_info()
    if threads == 0 and info["usable_cpus"] != info["cpus"]:
        threads = info["usable_cpus"]
    parts = [info["cpu"], platform.machine(), llama_version]
    parts += [str(threads), str(gpu_layers), str(draft_gpu_layers)]
    for path in (target, draft):
        if path is not None:
            parts += [path.name, str(path.stat().st_size)]
    return hashlib.sha256("|".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:16]  # any file name


def tuning_path(key: str) -> Path:
    return config_dir() / "tuning" / f"{key}.json"


def _number(value, *, low: float = 0.0, inclusive: bool = False) -> float:
    """A finite number above `low` (or equal to it, inclusive), or ValueError (a saved file is never trusted
    blindly)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
        raise ValueError(f"not a number: {_shown(value)}")
    if value < low or (value == low and not inclusive):
        raise ValueError(f"{value!r} is {'below' if inclusive else 'not above'} {low}")
    return float(value)


def _shown(value) -> str:
    """A value of a saved file as an error names it: a number of hundreds of digits is cut short."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer of hundreds of digits (JSON has no limit): no float can hold it
        return False


def _rate(value) -> float:
    """An acceptance rate, at most 1: 0 is a measurement (a draft whose guesses never held), not an odd value."""
    return min(1.0, _number(value, inclusive=True))


def _batch(size: str) -> int:
    """A verify batch's size: one no context holds (hundreds of digits) would overflow the cost model's floats."""
    if len(size) > 9:
        raise ValueError(f"a batch of {len(size)} digits")
    return int(size)


class NewerTuning(ValueError):
    """A tuning a newer specchat wrote: not read here, and not to be replaced by a run (written_by_newer)."""


def _check_version(data: object) -> None:
    """ValueError naming what the file is: "of this version" alone did not say whether a newer specchat wrote it
    (upgrade) or an older one (tune measures it again either way)."""
    if not isinstance(data, dict):
        raise ValueError("not a tuning (not a JSON object)")
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"not a tuning (its version is {_shown(version)})" if "version" in data else "not a tuning")
    if version > VERSION:
        raise NewerTuning(f"written by a newer specchat (tuning version {_shown(version)}; this one reads {VERSION})")
    if version != VERSION:
        raise ValueError(f"an older specchat's (tuning version {_shown(version)}; this one reads {VERSION})")


def parse(data: object, key: str) -> Tuning:
    """A saved tuning, validated in shape and values; ValueError for anything odd."""
    _check_version(data)
    ratios = data.get("v")
    if not isinstance(ratios, dict) or "1" not in ratios:
        raise ValueError("no verify costs")
    verify = {_batch(n): _number(v) for n, v in ratios.items() if str(n).isdigit() and int(n) >= 1}
    # ratios to one step, as measured; a hand-edited v(1) of 3 made the target alone count 1/3 of itself
    verify = {n: _number(v / verify[1]) for n, v in verify.items()}  # finite still (1e10 over 1e-300 is not)
    c = data.get("c")
    step = _number(data.get("step_s"))
    costs = Costs(verify, None if c is None else _number(c), step, step, busy=data.get("busy") is True)
    priors = data.get("priors") if isinstance(data.get("priors"), dict) else {}
    priors = {str(m): _rate(p) for m, p in priors.items()}
    details = data.get("details") if isinstance(data.get("details"), dict) else {}
    source = data.get("source") if data.get("source") in ("calibration", "tune") else "calibration"
    machine = data.get("machine") if isinstance(data.get("machine"), dict) else {}  # shown, never decided on
    return Tuning(key, costs, priors, source, details, stale=data.get("stale") is True, machine=machine)


UNREADABLE = (OSError, ValueError, TypeError, RecursionError)  # what read() raises for a file it cannot use


def read(key: str) -> Tuning | None:
    """The saved tuning, or None when none is saved; one of UNREADABLE when the file is there but cannot
    be used (not JSON, another shape or version, a FIFO in its place)."""
    path = tuning_path(key)
    if not path.exists():
        return None
    return parse(_json_in(path), key)


def _json_in(path: Path) -> object:
    """The JSON a saved tuning's file holds; one of UNREADABLE where it cannot be read as such."""
    if not path.is_file():  # a FIFO in its place would block the read (a directory fails it)
        raise ValueError("not a regular file")
    return json.loads(path.read_text(encoding="utf-8"))


def examine(key: str) -> tuple[Tuning | None, str | None]:
    """The saved tuning (None when none is saved or it cannot be used), and why one that is there cannot
    be used: a broken file is measured again like a missing one, but said so, not passed over in silence."""
    try:
        return read(key), None
    except UNREADABLE as exc:
        return None, f"{tuning_path(key)} cannot be used: {_reason(exc)}"


def written_by_newer(key: str) -> bool:
    """The file at the tuning's path is a newer specchat's tuning: an older one running beside it (two versions
    sharing a config folder) must not replace it with its own format on every start."""
    try:
        _check_version(_json_in(tuning_path(key)))
    except NewerTuning:
        return True
    except UNREADABLE:  # a FIFO blocked here, a deep nesting raised RecursionError (a reviewer's finds)
        return False
    return False


def _reason(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return "not JSON"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc) if isinstance(exc, ValueError) else "not a tuning"


def load(key: str) -> Tuning | None:
    """The saved tuning, or None when missing or unusable (then it is measured again: a cache or a
    calibration never stops the tool)."""
    return examine(key)[0]


def trusted(tuning: Tuning | None) -> bool:
    """Good for decisions: measured on a quiet machine and not found stale since."""
    return tuning is not None and not tuning.costs.busy and not tuning.stale


def key_for(resolved, options) -> str:
    return machine_key(
        resolved.target, resolved.draft, options.threads, options.target_gpu_layers, options.draft_gpu_layers
    )
