"""From options to a ready pipeline, and from a prompt to generated text with stats.

`open_pipeline(options)` is the one way in: it resolves the files (pulling when needed), checks memory,
loads the engines, checks the pair, builds every drafter the mode needs and, for auto, its measured
costs. The CLI, the bench, tune and the tests use the object it returns as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from . import memorycheck, modes
from .backends import for_path
from .chat import Message, prompt_tokens
from .compat import PairReport, require_compatible
from .drafters import Drafter
from .drafters.auto import AutoDrafter
from .drafterset import add_drafters, suffix_drafter
from .engineconfig import EngineConfig, capped_threads
from .errors import PairError, UsageError
from .generation import ACCEPTED, REJECTED, TARGET, Generation, Segment, Update
from .interrupt import Interrupt
from .models_api import CachedModel
from .pairfiles import Resolved, resolve
from .sampling import Sampler, SamplingParams
from .speculative import Round, Stats, speculative_decode
from .textstream import TextStream

Notify = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    """Everything that decides what is loaded and how auto starts."""

    pair: str | None = None
    target_path: Path | None = None  # explicit local files win over the pair's
    draft_path: Path | None = None
    mode: str = "auto"
    n_ctx: int = 4096  # 0 (ctxsize.AUTO): the models' trained context, as far as memory allows
    ctx_default: bool = False  # n_ctx is the command's default (serve, bench, tune: 4096), no --ctx given
    threads: int = 0
    target_gpu_layers: int = -1
    draft_gpu_layers: int = -1
    force_pair: bool | None = None  # None: the command has no --force-pair (bench, tune, serve)
    use_tuning: bool = True  # False: ignore saved tuning, measure afresh
    p_min: float = 0.0  # the draft model's confidence stop
    keep_draft: bool = False  # load the draft model even where auto would not use it (bench, tune)
    # auto and --mode suffix draft from past conversations too (run and serve; --no-history, SPECCHAT_NO_HISTORY).
    # Off unless asked for: the bench and tune must not depend on what the user happened to log.
    history: bool = False
    log: bool = False  # the replies are logged (run and serve without --no-log): the history says if it cannot be
    self_draft: bool = False  # the target as its own draft: refused (never faster), but the lossless tests use it
    debug: bool = False

    @property
    def lone_target(self) -> bool:
        """--target without --draft: auto runs it without a draft model (a pair's one may be loaded for the
        bench's spec rows, but is none of auto's)."""
        return self.target_path is not None and self.draft_path is None

    @property
    def wants_draft(self) -> bool:
        if self.mode == "auto" and self.lone_target:
            return self.keep_draft  # a lone --target: auto copies with prompt lookup
        return modes.get(self.mode).needs_draft_model or self.keep_draft


class Pipeline:
    """A loaded target (and optional draft) with a drafter per available mode, ready to answer prompts.
    Built by open_pipeline(); nobody sets its fields afterwards."""

    def __init__(self, resolved: Resolved, options: Options, target, draft, interrupt: Interrupt) -> None:
        self.resolved = resolved
        self.options = options
        self.target = target
        self.draft = draft
        self.interrupt = interrupt
        self.target_cache = CachedModel(target)
        self.pair_report: PairReport | None = None
        self.drafters: dict[str, Drafter] = {}
        self.tuning = None  # tuning.Tuning behind auto
        self.mode_note = ""  # one line on why auto uses what it uses

    def available(self, mode: str) -> bool:
        return mode == "target" or mode in self.drafters

    def prompt(
        self, messages: list[Message], *, use_template: bool = True, template_kwargs: dict | None = None
    ) -> list[int]:
        return prompt_tokens(self.target, messages, use_template=use_template, template_kwargs=template_kwargs)

    def generate(
        self,
        prompt: list[int],
        params: SamplingParams,
        *,
        mode: str,
        k: int,
        max_tokens: int,
        on_update: Callable[[Update], None] | None = None,
        cancel: threading.Event | None = None,
        expected: Sequence[int] = (),
    ) -> Generation:
        """Run the loop; on_update streams each round as styled text segments with the stats so far.
        A character split over tokens comes whole with the round that ends it; one that max_tokens left unfinished
        never comes (textstream.py).
        cancel (the server's): once set, the loop stops as on Ctrl-C; whoever sets it sets the interrupt too.
        expected: tokens the reply is expected to hold (an API client's `prediction`), for prompt lookup."""
        stream = TextStream(self.target)
        pieces: list[str] = []

        def on_round(event: Round, stats: Stats) -> None:
            out = [Segment(stream.push(t), ACCEPTED) for t in event.emitted[: event.accepted]]
            if event.rejected_tokens:
                out.append(Segment(stream.guess(event.rejected_tokens), REJECTED))
            out += [Segment(stream.push(t), TARGET) for t in event.emitted[event.accepted :]]
            segments = [segment for segment in out if segment.text]
            pieces.extend(s.text for s in segments if s.kind != REJECTED)
            if on_update is not None:
                on_update(Update(event, segments, stats))

        drafter = self.drafters.get(mode) if k > 0 else None
        aside_before = dict(drafter.guard.times_aside) if isinstance(drafter, AutoDrafter) else {}
        engines = [e for e in (self.target, self.draft) if hasattr(e, "fewest_threads")]  # llama.cpp's
        for engine in engines:
            engine.fewest_threads = engine.threads
        from .costmeasure import CpuLoad

        load = CpuLoad()  # other programs' use of the CPUs during this reply (_check_drift)
        with self.interrupt.armed():
            if cancel is not None and cancel.is_set():  # set before armed() forgot the interrupt it raised
                self.interrupt.requested = True
            lookup = self.drafters.get("ngram")
            if lookup is not None and expected:
                lookup.expect(expected)
            try:
                tokens, stats = speculative_decode(
                    self.target_cache, drafter, prompt, Sampler(params), k=k, max_tokens=max_tokens, on_round=on_round
                )
            finally:  # for this reply only
                if lookup is not None and expected:
                    lookup.expect(())
        self._check_drift(drafter, load)
        aside = drafter.guard.times_aside if isinstance(drafter, AutoDrafter) else {}
        set_aside = {name: n - aside_before.get(name, 0) for name, n in aside.items() if n > aside_before.get(name, 0)}
        threads = (min(e.fewest_threads for e in engines), max(e.max_threads for e in engines)) if engines else None
        return Generation("".join(pieces), tokens, stats, set_aside, threads)

    def _check_drift(self, drafter, load) -> None:
        # A reply slowed by other programs (a second terminal's reply) says nothing of the machine's speed, and
        # the measurement a stale calibration sends the next start to take would be busy, so never saved. Its
        # samples are forgotten too: kept, a short quiet reply after it was judged on them.
        if not isinstance(drafter, AutoDrafter):
            return
        if load.busy():
            drafter.costs.forget_drift_samples()
        elif drafter.costs.drifted and self.tuning is not None:
            from .tuningsave import mark_stale

            mark_stale(self.tuning)

    def add_suffix(self, history, *, arm: bool = True) -> None:
        """The suffix drafter over `history` (None: the current conversation only), and with `arm` an arm
        of auto too. open_pipeline adds it over the user's log; the bench over a history it chose."""
        self.drop_suffix()
        suffix = self.drafters["suffix"] = suffix_drafter(self.target, history)
        auto = self.drafters.get("auto")
        if arm and isinstance(auto, AutoDrafter):
            auto.drafters = [*auto.drafters, suffix]

    def drop_suffix(self) -> None:
        self.drafters.pop("suffix", None)
        auto = self.drafters.get("auto")
        if isinstance(auto, AutoDrafter):
            auto.drafters = [d for d in auto.drafters if d.name != "suffix"]

    def reset(self) -> None:
        """Forget every cached prompt and what the drafters learned, so the next generation starts cold."""
        self.target_cache.forget()
        for drafter in self.drafters.values():
            drafter.reset()

    def close(self) -> None:
        for engine in (self.draft, self.target):
            if engine is not None:
                engine.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is KeyboardInterrupt:
            # Ctrl-C: the process is leaving and the user waits. Freeing both models and their caches
            # takes ~0.2 s on 2 cores (more under load); the OS does it at once. Should anyone catch
            # the interrupt and go on, Engine.__del__ still frees them.
            return
        self.close()


def open_pipeline(
    options: Options,
    notify: Notify,
    start_progress=None,
    loaded: Callable[[Pipeline], None] | None = None,
    before_load: Callable[[Resolved, Options], None] | None = None,
) -> Pipeline:
    """Resolve, load and set up everything a mode needs; on any failure nothing stays loaded.

    before_load(resolved, options) runs once the files are known, before any model is loaded (seconds to minutes):
    tune's output path is checked there. loaded(pipeline) runs once the models are loaded, before auto measures
    the machine (about 15 s the first time): a prompt that cannot fit is refused there, not after the wait."""
    from . import ctxsize, engine, tuning

    if options.mode not in modes.MODES:
        raise UsageError(f"unknown --mode '{options.mode}'", hint=f"choose one of: {', '.join(modes.MODES)}")
    ctxsize.check(options.n_ctx)
    engine.set_debug(options.debug)
    options = _usable_threads(options, notify)
    resolved = resolve(options, notify, start_progress or _no_progress)
    if before_load is not None:
        before_load(resolved, options)
    saved = None
    if options.mode == "auto" and options.use_tuning and resolved.draft is not None and not options.keep_draft:
        saved = tuning.load(tuning.key_for(resolved, options))
    # Measured before on a quiet machine that the draft model cannot pay here: do not even load it.
    skip_draft = tuning.trusted(saved) and not saved.draft_model_can_pay()
    draft_path = None if skip_draft else resolved.draft
    paths = [p for p in (resolved.target, draft_path) if p is not None]
    if options.n_ctx == ctxsize.AUTO:
        options = replace(
            options, n_ctx=ctxsize.choose(paths, memorycheck.available_memory(), memorycheck.OVERHEAD_BYTES)
        )
    elif too_long := ctxsize.beyond_training(resolved.target, draft_path, options.n_ctx, options.ctx_default):
        notify(too_long)
    # The target without its draft, in an option run and serve both take (bench and tune have none): --no-spec
    # clashed with a run's own --mode spec; offered to a run that loads no draft, it was the option already given
    memorycheck.check_memory(paths, options.n_ctx, None if draft_path is None or options.keep_draft else "--mode ngram")
    interrupt = Interrupt()
    with interrupt.armed():
        target = _load(resolved.target, options, options.target_gpu_layers, interrupt)
        draft = None
        try:
            if draft_path is not None:
                draft = _load(draft_path, options, options.draft_gpu_layers, interrupt)
            pipeline = Pipeline(resolved, options, target, draft, interrupt)
            if draft is not None:
                pipeline.pair_report = _compatible(target, draft, options, resolved)
            if loaded is not None:
                loaded(pipeline)
            add_drafters(pipeline, saved, notify)
        except KeyboardInterrupt:  # the process is leaving: see Pipeline.__exit__
            raise
        except BaseException:  # a bad draft, an incompatible pair: free what was loaded
            for model in (draft, target):
                if model is not None:
                    model.close()
            raise
    return pipeline


def _compatible(target, draft, options: Options, resolved: Resolved) -> PairReport:
    try:
        return require_compatible(target, draft, force=options.force_pair)
    except PairError as exc:
        if not options.lone_target:
            raise
        # --target with the pair's draft model (--mode spec, the bench's spec rows): a draft the user never named
        raise PairError(
            f"{exc.message}: the draft {resolved.draft.name} is pair {resolved.pair_name}'s (--target replaces only "
            "the target)",
            # the bench has --modes, no --mode: the spec rows are what take the pair's draft
            hint="give --draft a smaller model of the target's family, or "
            + ("leave spec out of --modes" if options.keep_draft else "use --mode ngram (no draft model)"),
        ) from None


def _usable_threads(options: Options, notify: Notify) -> Options:
    threads, note = capped_threads(options.threads)
    if note is None:
        return options
    notify(note)
    return replace(options, threads=threads)


def _no_progress(_label: str, _total: int):
    return lambda _n: None


def _load(path: Path, options: Options, gpu_layers: int, interrupt: Interrupt):
    config = EngineConfig(n_ctx=options.n_ctx, n_threads=options.threads, gpu_layers=gpu_layers)
    return for_path(path).load(path, config, interrupt)
