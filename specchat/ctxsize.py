"""The default context size: what the models were trained for, as far as memory allows.

A conversation can then grow to the length the model handles well (32K for Qwen2.5-Coder) instead of
a fixed 4,096; `--ctx N` still sets it exactly.
"""

from __future__ import annotations

from pathlib import Path

from .backends import for_path
from .errors import ContextFullError, UsageError

AUTO = 0  # --ctx 0, the default of `specchat run`: choose here
FALLBACK = 4096  # for models whose files do not say what they were trained for
MIN_CTX = 2048  # never less by default (less only where the model was trained for less)
# Never more by default: a 32K KV cache for both models made Ctrl-C during loading and the exit
# measurably slower on a 2-core CPU (allocated and freed inside llama.cpp, where Ctrl-C cannot reach),
# and older turns give way anyway. --ctx N asks for more, up to what the model was trained for.
MAX_AUTO = 8192
MEMORY_SHARE = 0.8  # of the available memory: the rest stays for everything else on the machine
STEP = 256  # llama.cpp rounds the context up to a multiple of 256
SMALLEST = 64  # an explicit --ctx below this cannot hold a chat template and a reply


def check(n_ctx: int) -> None:
    """--ctx is AUTO or at least SMALLEST (Typer's own bounds cannot say "0, or 64 and more")."""
    if n_ctx != AUTO and n_ctx < SMALLEST:
        raise UsageError(f"--ctx {n_ctx} is too small", hint=f"give 0 (from the model) or at least {SMALLEST}")


def choose(paths: list[Path], available: int | None, overhead: int) -> int:
    """The largest context both models were trained for, capped at MAX_AUTO and by the memory that the
    KV caches may take; `overhead` is what each model needs beyond its weights and KV cache."""
    trained = [t for t in (trained_context(path) for path in paths) if t]
    ctx = min([*trained, MAX_AUTO]) if trained else FALLBACK
    # A floor under MIN_CTX (a model trained for 1,000 tokens) is a multiple of STEP too: llama.cpp would
    # round 1,000 up to 1,024, past what the model was trained for.
    floor = min(MIN_CTX, max(STEP, ctx // STEP * STEP))
    fits = _fits_in_memory(paths, available, overhead)
    if fits is not None:
        ctx = min(ctx, fits)
    return max(floor, ctx // STEP * STEP)


def beyond_training(target: Path, draft: Path | None, n_ctx: int, default: bool = False) -> str | None:
    """A note when a context (--ctx, or with `default` the command's own) is longer than a model was trained for:
    llama.cpp warns of it in its log, which specchat shows only with --debug. Past that length the target's replies
    degrade; the draft model's guesses are only accepted less often (the replies stay the target's)."""
    models = [(path, trained_context(path)) for path in (target, draft) if path is not None]
    beyond = [(path, tokens) for path, tokens in models if tokens and n_ctx > tokens]
    if not beyond:
        return None
    path, tokens = beyond[0]  # the target's, where both are
    asked = f"the default context ({n_ctx})" if default else f"--ctx {n_ctx}"
    if path == target:
        model, effect = path.name, "a conversation longer than that may get poor replies (--ctx {}: within it)"
    else:  # the replies stay the target's: shrinking its context for the draft's sake is the user's choice
        model, effect = f"the draft model {path.name}", "past that length its guesses are accepted less often"
    return f"{asked} is more than the {tokens} tokens {model} was trained for: {effect.format(tokens)}"


def trained_context(path: Path) -> int | None:
    """The context length a model was trained for (GGUF `<arch>.context_length`), None where unknown."""
    backend = for_path(path)
    reader = getattr(backend, "trained_context", None)  # plugins written before this hook lack it
    return reader(path) if reader is not None else None


def past_training(exc: ContextFullError, tokens: int, target: Path) -> ContextFullError:
    """ "raise --ctx" for a prompt longer than the model was trained for sent the user to an option that cannot
    help (a longer context than that degrades every reply): there the prompt must be shortened."""
    hint = shorten_hint(tokens, trained_context(target))
    return exc if hint is None else ContextFullError(exc.message, hint=hint)


def shorten_hint(tokens: int, trained: int | None, what: str = "it") -> str | None:
    """The way out for a prompt of `tokens` as long as the model was trained for or longer (`trained`), else None."""
    if trained is None or tokens < trained:
        return None
    return f"shorten {what}: the model was trained for {trained} tokens, so no --ctx holds it and a reply"


def _fits_in_memory(paths: list[Path], available: int | None, overhead: int) -> int | None:
    """The most tokens whose KV caches fit next to the weights in MEMORY_SHARE of `available`."""
    if available is None:
        return None
    probe = 1024
    needs = [for_path(path).memory_needed(path, probe) for path in paths]
    if any(need is None for need in needs):
        return None  # weights on a GPU, or a backend that does not say
    free = available * MEMORY_SHARE - sum(weights + overhead for weights, _ in needs)
    per_token = sum(kv for _, kv in needs) / probe
    return max(int(free / per_token), 0) if per_token > 0 else None
