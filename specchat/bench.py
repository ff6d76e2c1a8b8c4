"""`specchat bench`: target alone vs speculative decoding, side by side, in one run.

Methodology: a warm-up per variant; then for each repetition and each prompt, every variant runs back to
back, in an order rotated from block to block and run backwards in every other block, so that drift of a
shared machine hits all variants alike, none always runs first, and each runs before the target as often
as after it. Greedy outputs are checked against the target-alone output of the block.
tok/s = the tokens after the first / the time after it (decode: the prefill gives the first token, reported as
time to first token; a draft model reads the prompt after it, in decode, but where auto has it draft the first
round). The speedup
is the median of paired ratios (variant tok/s / target tok/s, same prompt, same repetition), never a ratio
of medians.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import numpy as np

from .benchresult import BenchResult, Sample, Variant
from .benchsuite import Prompt
from .modes import AUTO, DRAFTING, NGRAM, SUFFIX
from .paths import path_text
from .sampling import SamplingParams

Pipeline = object  # runtime.Pipeline, not imported: tuning (which runtime uses) imports this module

NEAR_TIE = 0.5  # logits; see tests/test_real_lossless.py for the measurement behind it


BENCH_MODES = DRAFTING  # compared with the target alone: the draft model per k, prompt lookup, suffix, auto


def variants_for(ks: Sequence[int], modes: Sequence[str] = ("spec",)) -> list[Variant]:
    """Target alone first (the reference), then the draft model per k, prompt lookup, suffix, auto."""
    out = [Variant("target", 0, "target")]
    if "spec" in modes:
        out += [Variant(f"k={k}", k, "spec") for k in ks]
    for mode in (NGRAM, SUFFIX):
        if mode.name in modes:
            out.append(Variant(f"{mode.name} k={mode.default_k}", mode.default_k, mode.name))
    if "auto" in modes:
        out.append(Variant("auto", AUTO.default_k, "auto"))
    return out


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    import os

    from .cpuload import usable_cpus

    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "usable_cpus": usable_cpus(),  # fewer under taskset, a cpuset or a CPU quota: the threads' cap
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def collect_meta(resolved, settings: dict, threads: int = 0) -> dict:
    """Everything needed to reproduce or compare a run: machine, versions, files (sha256), settings.
    threads: what the run used (the pipeline's, capped to the usable CPUs; 0: their count), where
    settings.threads is what was asked (`--threads 999` was recorded as 999 threads on a 2-CPU machine)."""
    import datetime

    import llama_cpp

    from . import __version__
    from .engine import gpu_offload_supported
    from .engineconfig import default_threads
    from .modelfiles import cached_sha256

    files = {}
    for role, path in (("target", resolved.target), ("draft", resolved.draft)):
        if path is not None:
            files[role] = {"path": path_text(path), "size": path.stat().st_size, "sha256": cached_sha256(path)}
    machine = {
        **machine_info(),
        "threads": threads or default_threads(),
        "gpu_offload": gpu_offload_supported(),
        "gpu_layers": settings.get("gpu_layers"),
        "draft_gpu_layers": settings.get("draft_gpu_layers"),
    }
    return {
        "title": f"specchat bench, {resolved.name}",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "specchat": __version__,
        "llama_cpp_python": llama_cpp.__version__,
        "machine": machine,
        "pair": resolved.pair,
        "files": files,
        "settings": settings,
    }


Progress = Callable[..., None]  # (description, completed runs[, a new total])
COST_BATCH = 16  # the report's cost model times verify batches of 1..16
WARM_UP_TOKENS = 16  # the most a variant's warm-up generates, before anything is measured


def run(
    pipeline: Pipeline,
    prompts: list[Prompt],
    variants: list[Variant],
    *,
    reps: int,
    max_tokens: int,
    earlier_tokens: int = 0,
    params: SamplingParams,
    settings: dict,
    notify: Callable[[str], None],
    progress: Callable[[int], AbstractContextManager[Progress]],
    template_kwargs: dict | None = None,
) -> BenchResult:
    """The whole measurement: what was run where, the cost model, then the interleaved runs.
    Ctrl-C ends it early and keeps what was measured (result.interrupted). template_kwargs: the chat
    template's variables (--chat-template-kwargs), in every prompt rendered, the cost model's included."""
    from . import benchturns
    from .chat import Message
    from .costmeasure import measure

    result = BenchResult(meta=collect_meta(pipeline.resolved, settings, pipeline.options.threads))
    prompts, result.skipped = benchturns.first_turns(pipeline, prompts, template_kwargs)
    turns = benchturns.count(prompts)
    risky = benchturns.at_risk(pipeline, prompts, earlier_tokens or max_tokens, template_kwargs)
    try:
        # In a pipe no progress bar shows how long the wait is: the size of the job at least.
        notify(
            _job_size(
                len(prompts), turns, len(variants), reps=reps, max_tokens=max_tokens, earlier_tokens=earlier_tokens
            )
            + _at_risk(risky, turns, pipeline.target.n_ctx)
            + "; measuring the cost model for the report first (single steps, verify batches of 1..16"
            # auto's own calibration is worth a word only where auto runs
            + ("; auto uses its own calibration, up to 64)" if any(v.mode == "auto" for v in variants) else ")")
        )
        # After as much of the first prompt as leaves room for a batch of 16: a prompt that fits with room
        # for a short reply (255 tokens at --ctx 64, a context of 256) failed the bench before it began.
        context = pipeline.prompt([Message("user", prompts[0].text)], template_kwargs=template_kwargs)
        context = context[-(pipeline.target.n_ctx - COST_BATCH) :]
        result.cost = measure(pipeline.target, pipeline.draft, context, sizes=range(1, COST_BATCH + 1))
        with progress(reps * turns * len(variants)) as advance:
            run_bench(
                pipeline,
                prompts,
                variants,
                reps=reps,
                max_tokens=max_tokens,
                earlier_tokens=earlier_tokens,
                params=params,
                result=result,
                progress=advance,
                template_kwargs=template_kwargs,
            )
    except KeyboardInterrupt:
        result.interrupted = True
    return result


def _job_size(records: int, turns: int, variants: int, *, reps: int, max_tokens: int, earlier_tokens: int) -> str:
    """Every generation the bench makes, not only the measured replies: `--suite revision -n 64` said 30
    replies of up to 64 tokens, and the target alone wrote 3 earlier turns of up to 512 first (benchturns)."""
    text = (
        f"{reps * turns * variants} replies to generate ({_count(turns, 'turn')} x {_count(variants, 'variant')} "
        f"x {_count(reps, 'repetition')}, up to {max_tokens} tokens each), plus "
    )
    earlier = turns - records  # every turn but the last of each record is answered once first
    if earlier:
        text += f"{_count(earlier, 'earlier turn')} of up to {earlier_tokens or max_tokens} tokens "
        text += "answered by the target alone, and "
    return text + f"{_count(variants, 'warm-up')} of up to {min(WARM_UP_TOKENS, max_tokens)} tokens"


def _at_risk(risky: int, turns: int, n_ctx: int) -> str:
    """The plan counted later turns that --ctx then made the bench skip as turns it would run, unsaid."""
    if not risky:
        return ""
    # what fills the context may be the turn's own text as well as the replies before it
    return f"; {risky} of the {turns} turns may be skipped, where the conversation outgrows the {n_ctx}-token context"


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("s" if n != 1 else "")


def run_bench(
    pipeline: Pipeline,
    prompts: list[Prompt],
    variants: list[Variant],
    *,
    reps: int,
    max_tokens: int,
    earlier_tokens: int = 0,
    params: SamplingParams,
    result: BenchResult,
    progress: Progress | None = None,
    template_kwargs: dict | None = None,
) -> BenchResult:
    """Fill `result` (passed in so that Ctrl-C keeps what was measured so far). Every turn of every
    record is a block; earlier turns' replies come from the target alone, written once (benchturns), up
    to earlier_tokens each (0: max_tokens)."""
    from . import benchturns

    turns, skipped = benchturns.replay(
        pipeline,
        prompts,
        params,
        earlier_tokens or max_tokens,
        progress=(lambda text: progress(text, 0)) if progress else None,
        template_kwargs=template_kwargs,
    )
    result.skipped.extend(skipped)
    if skipped and progress:  # the bar counted every turn; the skipped ones are never run
        progress("warming up", 0, reps * len(turns) * len(variants))
    for variant in variants:
        _generate(pipeline, turns[0].ids, params, variant, min(WARM_UP_TOKENS, max_tokens))
    done = 0
    for rep in range(reps):
        for index, turn in enumerate(turns):
            outputs: dict[str, list[int]] = {}
            block: list[Sample] = []
            for variant in block_order(variants, rep, index):
                if progress:
                    progress(f"rep {rep + 1}/{reps} · {turn.label} · {variant.name}", done)
                tokens, stats = _generate(pipeline, turn.ids, params, variant, max_tokens)
                outputs[variant.name] = tokens
                block.append(Sample.of(turn.prompt, variant, rep, stats, turn.number))
                done += 1
            _check_block(pipeline, turn.ids, block, outputs, params)
            result.samples.extend(block)
    if progress:
        progress("done", done)
    return result


def block_order(variants: list[Variant], rep: int, index: int) -> list[Variant]:
    """The order of a block: rotated, so that no variant always runs first or last (warmth), and backwards in
    every other block, so that each variant runs before the target as often as after it and a drift within
    a block cancels out of its paired ratios. A rotation alone kept the order around the circle: the variant
    listed after the target ran after it in all blocks but one of every len(variants). The two blocks of a
    pair share a rotation: a prompt's repetitions 2j and 2j+1, or in a repetition, prompts 2i and 2i+1."""
    shift = (rep // 2 + index // 2) % len(variants)
    order = variants[shift:] + variants[:shift]
    return order[::-1] if (rep + index) % 2 else order


def _check_block(pipeline, prompt, block: list[Sample], outputs: dict[str, list[int]], params) -> None:
    """Greedy: every speculative output against the target-alone output of the same block."""
    reference = outputs.get("target")
    for sample in block:
        if sample.k == 0:
            sample.lossless = "reference"
        elif params.greedy and reference is not None:
            sample.lossless, sample.divergence_margin = _lossless(pipeline, prompt, reference, outputs[sample.variant])


def _generate(pipeline: Pipeline, prompt: list[int], params: SamplingParams, variant: Variant, max_tokens: int):
    pipeline.reset()  # every run starts cold: no variant inherits another's prompt in the KV cache
    generation = pipeline.generate(prompt, params, mode=variant.mode, k=variant.k, max_tokens=max_tokens)
    if generation.stats.stop_reason == "interrupted":  # generate keeps a cut-short text; a bench must stop
        raise KeyboardInterrupt
    return generation.tokens, generation.stats


def _lossless(pipeline: Pipeline, prompt: list[int], reference: list[int], tokens: list[int]):
    if tokens == reference:
        return "equal", None
    first = next((i for i, (a, b) in enumerate(zip(reference, tokens, strict=False)) if a != b), None)
    if first is None:  # one run stopped at an end-of-generation token where the other went on
        first = min(len(reference), len(tokens))
    row = pipeline.target_cache.feed(prompt + reference[:first], 1)[0]
    # A near-tie: each run's token (an end of generation for a run that stopped there) is within NEAR_TIE of
    # the target's best. This recomputation is one more batch shape, so where three tokens are that close a
    # run may have taken the one it ranks third; a token far below the best is a MISMATCH however close the
    # best two are. The margin is how far below the best the farther of the two tokens is.
    chosen = [seq[first] if first < len(seq) else None for seq in (reference, tokens)]  # None: it stopped here
    gaps = [_gap_below_best(pipeline, row, token) for token in chosen]
    margin = max(gaps)
    return ("near-tie" if margin < NEAR_TIE else "MISMATCH"), round(margin, 4)


def _gap_below_best(pipeline: Pipeline, row: np.ndarray, token: int | None) -> float:
    """How far `token`'s logit is below the best in `row`; for None (the run stopped), the best end of
    generation's, looked for among the close tokens first (the whole vocabulary only for a MISMATCH)."""
    best = float(row.max())
    if token is not None:
        return best - float(row[token])
    for candidates in (np.flatnonzero(row > best - NEAR_TIE), range(len(row))):
        ends = [float(row[t]) for t in candidates if pipeline.target.is_eog(int(t))]
        if ends:
            return best - max(ends)
    return best - float(row.min())  # a vocabulary with no end of generation: as far as any token can be
