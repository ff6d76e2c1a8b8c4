"""The OpenAI wire format of a reply, without HTTP: response and chunk objects out, as SSE events when streamed.

Statistics go out under llama-server's `timings` names, so that tools written for llama-server read them
unchanged, plus a `speculative` object of our own. The requests they answer are read in openai_api.py.
"""

from __future__ import annotations

import json
import time
import uuid

from .speculative import Stats


def new_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:24]}"


def finish_reason(stop_reason: str) -> str:
    """The loop's stop reason in the API's words: a natural end or a stop string is "stop"."""
    return "length" if stop_reason in ("max_tokens", "context") else "stop"


def usage(stats: Stats, cached: int = 0) -> dict:
    prompt, completion = stats.prompt_tokens, stats.generated
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},  # the API's name for prompt tokens not recomputed
    }


def timings(stats: Stats, cached: int = 0) -> dict:
    """llama-server's names and meanings: cache_n prompt tokens reused from the KV cache, prompt_n
    evaluated now, prompt_ms the prefill (which gives the first token); predicted time is the decode after it, and
    predicted_per_second counts all predicted_n over it, the first token too, as llama-server does."""
    prompt_ms, predicted_ms = stats.prefill_s * 1000, stats.decode_s * 1000
    evaluated = stats.prompt_tokens - cached
    return {
        "cache_n": cached,
        "prompt_n": evaluated,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_second": round(evaluated / stats.prefill_s, 3) if evaluated and stats.prefill_s > 0 else 0.0,
        "predicted_n": stats.generated,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_ms / stats.generated, 3) if stats.generated else 0.0,
        "predicted_per_second": round(stats.generated / stats.decode_s, 3) if stats.decode_s > 0 else 0.0,
        "draft_n": stats.drafted,
        "draft_n_accepted": stats.accepted,
    }


def speculative(stats: Stats, mode: str, label: str) -> dict:
    return {
        "mode": mode,
        "label": label,
        **stats.acceptance(),
        "position_acceptance": stats.position_acceptance(),
        "rounds": stats.rounds,
        "rounds_by_source": dict(stats.rounds_by_source),
    }


def extras(stats: Stats, mode: str, label: str, cached: int = 0) -> dict:
    """What every final response (or last chunk) carries besides the text."""
    return {
        "usage": usage(stats, cached),
        "timings": timings(stats, cached),
        "speculative": speculative(stats, mode, label),
    }


def chat_response(rid: str, model: str, text: str, reason: str, extra: dict) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
    return {**_head(rid, "chat.completion", model), "choices": [choice], **extra}


def completion_response(rid: str, model: str, replies: list[tuple[str, str]], extra: dict) -> dict:
    """A choice for each (text, finish reason): one per prompt, in the order of the prompts (the choice's index)."""
    choices = [{"index": i, "text": text, "finish_reason": reason, "logprobs": None} for i, (text, reason) in
               enumerate(replies)]  # fmt: skip
    return {**_head(rid, "text_completion", model), "choices": choices, **extra}


def usage_chunk(rid: str, model: str, chat: bool, extra: dict, *, created: int | None = None) -> dict:
    """The last chunk asked for by stream_options.include_usage: no choices, the usage (and the rest)."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    return {**_head(rid, kind, model, created), "choices": [], **extra}


def chat_chunk(rid: str, model: str, delta: dict, reason: str | None = None, extra: dict | None = None, *,
               created: int | None = None) -> dict:  # fmt: skip
    choice = {"index": 0, "delta": delta, "finish_reason": reason}
    return {**_head(rid, "chat.completion.chunk", model, created), "choices": [choice], **(extra or {})}


def completion_chunk(rid: str, model: str, text: str, reason: str | None = None, extra: dict | None = None, *,
                     created: int | None = None) -> dict:  # fmt: skip
    choice = {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}
    return {**_head(rid, "text_completion", model, created), "choices": [choice], **(extra or {})}


def _head(rid: str, kind: str, model: str, created: int | None = None) -> dict:
    """`created`: a stream's chunks all carry the time it began, as the API's do (one of a few seconds
    otherwise crossed a second and its chunks disagreed)."""
    return {"id": rid, "object": kind, "created": int(time.time()) if created is None else created, "model": model}


# JSON may hold these raw, but line readers that split as str.splitlines() does (httpx's iter_lines, httpx-sse
# before 0.4.2, many a hand-written SSE parser) cut an event's line there and failed on half a JSON object: a
# reply that quoted text with a U+2028 broke the stream. Escaped, the JSON means the same.
_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def sse(payload: dict | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False).translate(_LINE_BREAKS)
    return f"data: {data}\n\n"
