"""From options to a loaded target/draft pair, and from a prompt to generated text with stats.

This is the glue the CLI, the bench and the tests share: resolve files (pulling when needed), load both
engines, check the pair, and run the speculative loop with text streaming.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import download
from .chat import Message, prompt_tokens
from .compat import PairReport, require_compatible
from .drafters import DraftModelDrafter
from .drafters.ngram import NgramDrafter
from .engine import Engine, EngineConfig, Interrupt, TextStream
from .errors import EngineError, ModelFileError
from .models_api import CachedModel
from .registry import ModelSpec, load_registry
from .sampling import Sampler, SamplingParams
from .speculative import Round, Stats, speculative_decode

ACCEPTED, TARGET, REJECTED = "accepted", "target", "rejected"
MODES = ("auto", "spec", "ngram", "target")
DEFAULT_K = {"auto": 64, "spec": 4, "ngram": 8, "target": 0}  # for auto, the largest k it may choose


@dataclass(frozen=True)
class Segment:
    """Text of one round as the user sees it: accepted draft tokens, the target's own, or ghost text."""

    text: str
    kind: str  # ACCEPTED | TARGET | REJECTED


@dataclass(frozen=True)
class ModelChoice:
    """Which files to use: a registry pair, or explicit local paths (which win)."""

    pair: str | None = None
    target_path: Path | None = None
    draft_path: Path | None = None
    need_draft: bool = True


@dataclass(frozen=True)
class LoadOptions:
    n_ctx: int = 4096
    threads: int = 0
    target_gpu_layers: int = -1
    draft_gpu_layers: int = -1
    force_pair: bool = False


@dataclass
class Resolved:
    pair_name: str | None
    target: Path
    draft: Path | None
    specs: dict[str, ModelSpec] = field(default_factory=dict)


def resolve(choice: ModelChoice, notify: Callable[[str], None], start_progress) -> Resolved:
    """Paths of the files to load; registry models that are missing are pulled first (with a message)."""
    for label, path in (("--target", choice.target_path), ("--draft", choice.draft_path)):
        if path is not None and not Path(path).is_file():
            raise ModelFileError(f"{label} file not found: {path}", hint="give the path of a .gguf file")
    if choice.target_path is not None and (choice.draft_path is not None or not choice.need_draft):
        return Resolved(None, Path(choice.target_path), _opt_path(choice.draft_path))
    pair = load_registry().pair(choice.pair)
    wanted = []
    if choice.target_path is None:
        wanted.append(("target", pair.target))
    if choice.need_draft and choice.draft_path is None:
        wanted.append(("draft", pair.draft))
    paths: dict[str, Path] = {}
    for role, spec in wanted:
        found = download.locate(spec)
        if found is None:
            notify(f"{spec.local_name} is not on this machine yet: pulling it first (once)")
            result = download.pull(spec, notify, start_progress)
            notify(f"{spec.local_name}: ready from {result.source} at {result.path}")
            found = result.path
        paths[role] = found
    target = Path(choice.target_path) if choice.target_path else paths["target"]
    draft = _opt_path(choice.draft_path) or paths.get("draft")
    return Resolved(pair.name, target, draft, {"target": pair.target, "draft": pair.draft})


def _opt_path(path: Path | None) -> Path | None:
    return Path(path) if path is not None else None


OVERHEAD_BYTES = 300_000_000  # per model: compute buffers, context, output logits (measured ~200 MB here)


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (Linux); None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def check_memory(resolved: Resolved, options: LoadOptions) -> None:
    """Refuse, with the numbers, a pair that cannot fit in RAM: better than an OOM kill mid-load."""
    from .engine import gpu_offload_supported
    from .gguf import memory_needed

    if gpu_offload_supported() and (options.target_gpu_layers != 0 or options.draft_gpu_layers != 0):
        return  # weights go to the GPU, whose free memory is not known here
    available = available_memory()
    if available is None:
        return
    weights = kv = 0
    for path in (resolved.target, resolved.draft):
        if path is not None:
            w, k = memory_needed(path, options.n_ctx)
            weights, kv = weights + w, kv + k + OVERHEAD_BYTES
    if weights + kv > available:
        raise EngineError(
            f"not enough memory: the models need about {(weights + kv) / 1e9:.1f} GB (weights "
            f"{weights / 1e9:.1f} GB + KV cache and buffers {kv / 1e9:.1f} GB at --ctx {options.n_ctx}), "
            f"{available / 1e9:.1f} GB are available",
            hint="use a smaller --ctx, a smaller pair, or --no-spec (the target without its draft)",
        )


class Pipeline:
    """A loaded target (and optional draft) that can answer prompts."""

    def __init__(self, resolved: Resolved, options: LoadOptions) -> None:
        self.resolved = resolved
        self.options = options
        self.interrupt = Interrupt()
        self.draft: Engine | None = None
        self.pair_report: PairReport | None = None
        check_memory(resolved, options)
        with self.interrupt.armed():
            self.target = Engine(resolved.target, self._config(options.target_gpu_layers), self.interrupt)
            try:
                if resolved.draft is not None:
                    self.draft = Engine(resolved.draft, self._config(options.draft_gpu_layers), self.interrupt)
                    self.pair_report = require_compatible(self.target, self.draft, force=options.force_pair)
            except BaseException:  # a bad draft, an incompatible pair, Ctrl-C: free what was loaded
                if self.draft is not None:
                    self.draft.close()
                self.target.close()
                raise
        self.target_cache = CachedModel(self.target)
        self.drafter = DraftModelDrafter(self.draft) if self.draft is not None else None
        self.ngram = NgramDrafter()
        self.auto = None  # an AdaptiveDrafter, set by tuning.setup_auto()
        self.mode_note = ""  # one line on why auto uses what it uses

    def drafter_for(self, mode: str):
        """The drafter that implements a mode (None: the target alone)."""
        return {"spec": self.drafter, "ngram": self.ngram, "auto": self.auto}.get(mode)

    def drop_draft(self) -> None:
        """Free the draft model (auto decided it cannot pay on this machine)."""
        if self.draft is not None:
            self.draft.close()
        self.draft = self.drafter = None
        if self.auto is not None:
            self.auto.model = None

    def _config(self, gpu_layers: int) -> EngineConfig:
        return EngineConfig(n_ctx=self.options.n_ctx, n_threads=self.options.threads, gpu_layers=gpu_layers)

    def prompt(self, messages: list[Message], *, use_template: bool = True) -> list[int]:
        return prompt_tokens(self.target, messages, use_template=use_template)

    def generate(
        self,
        prompt: list[int],
        params: SamplingParams,
        *,
        k: int,
        max_tokens: int,
        on_round: Callable[[Round | None, list[Segment]], None] | None = None,
        mode: str = "spec",
    ) -> tuple[str, list[int], Stats]:
        """Run the loop; on_round(event, segments) streams each round as styled text segments.

        The last call has event None: it flushes bytes held back to keep a UTF-8 character whole.
        """
        stream = TextStream(self.target)
        pieces: list[str] = []

        def segments_of(event: Round) -> list[Segment]:
            out = [Segment(stream.push(t), ACCEPTED) for t in event.emitted[: event.accepted]]
            if event.rejected_tokens:
                out.append(Segment(self.target.detokenize(event.rejected_tokens), REJECTED))
            out += [Segment(stream.push(t), TARGET) for t in event.emitted[event.accepted :]]
            return [segment for segment in out if segment.text]

        def on_event(event: Round) -> None:
            segments = segments_of(event)
            pieces.extend(s.text for s in segments if s.kind != REJECTED)
            if on_round is not None:
                on_round(event, segments)

        drafter = self.drafter_for(mode) if k > 0 else None
        with self.interrupt.armed():
            tokens, stats = speculative_decode(
                self.target_cache, drafter, prompt, Sampler(params), k=k, max_tokens=max_tokens, on_round=on_event
            )
        tail = stream.flush()
        if tail:
            pieces.append(tail)
            if on_round is not None:
                on_round(None, [Segment(tail, TARGET)])
        return "".join(pieces), tokens, stats

    def reset(self) -> None:
        """Forget every cached prompt (both KV caches), so the next generation starts cold."""
        self.target.truncate(0)
        self.target_cache.tokens = []
        if self.drafter is not None:
            self.drafter.cache.model.truncate(0)
            self.drafter.cache.tokens = []
        self.ngram.index = type(self.ngram.index)(self.ngram.index.max_n)

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
        self.target.close()
