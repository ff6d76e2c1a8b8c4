"""The OpenAI wire format, without HTTP: request bodies in, response and chunk objects out.

Requests are checked here field by field, so that a bad one is a 400 with an OpenAI-style error object
before it ever waits for the engine. Statistics go out under llama-server's `timings` names, so that
tools written for llama-server read them unchanged, plus a `speculative` object of our own.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from .chat import Message
from .sampling import SamplingParams
from .speculative import Stats

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
TOOL_ROLES = ("tool", "function")  # a tool's result, the API's newer and older name: see _no_tools
# OpenAI allows 4; editor clients send more (Continue's autocomplete a dozen, and has a setting only to trim
# them for strict servers), llama-server takes any number. A bound all the same: each is looked for every round.
MAX_STOPS = 64


class ApiError(Exception):
    """A request the server refuses: an HTTP status and the OpenAI error object."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param

    def body(self) -> dict:
        # param: the request field at fault (null where none is), as the API's error object always has it
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class ApiRequest:
    """One parsed request: chat (messages) or plain completion (prompt), and how to sample it."""

    model: str | None
    messages: list[Message] | None  # None: a plain completion of `prompt`
    prompt: str
    params: SamplingParams
    max_tokens: int
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with no choices and the usage
    prediction: str | None = None  # the text the reply is expected to hold (Predicted Outputs), for drafting


def parse_json(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:  # thousands of nested brackets fit in the size bound: the client's mistake, not a 500
        raise ApiError(400, "the body's JSON is nested too deeply", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_json")
    try:  # a lone surrogate escape ("\\ud800") is valid JSON but no text: it would fail in the tokenizer
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(
            400, "the body has a lone surrogate escape (\\ud800-\\udfff), not text", code="invalid_json"
        ) from None
    return data


def parse_chat(data: dict, max_tokens_cap: int) -> ApiRequest:
    raw = data.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "'messages' must be a non-empty list", code="missing_messages", param="messages")
    messages = [_message(item, i) for i, item in enumerate(raw)]
    return _common(data, max_tokens_cap, messages=messages, prompt="")


def parse_completion(data: dict, max_tokens_cap: int) -> ApiRequest:
    return _common(data, max_tokens_cap, messages=None, prompt=_prompt(data.get("prompt")))


def _prompt(prompt) -> str:
    """The one prompt: a string, or a list of one (the API allows a batch). The API's other shapes are named
    as such ("must be a non-empty string" read as a malformed body), and what is none of them as what it is."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # a string only: [5] unwrapped read as a bad string, [["a"]] as a batch of 1
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str) for p in prompt):
        raise ApiError(400, f"'prompt': one prompt per request is served, not a batch of {len(prompt)}",
                       code="unsupported_parameter", param="prompt")  # fmt: skip
    if isinstance(prompt, list) and prompt and (_ids(prompt) or all(isinstance(p, list) and _ids(p) for p in prompt)):
        raise ApiError(
            400, "'prompt': token ids are not supported, send the text", code="unsupported_parameter", param="prompt"
        )
    if prompt is None or prompt == "":
        raise ApiError(400, "'prompt' must be a non-empty string", code="missing_prompt", param="prompt")
    if not isinstance(prompt, str):
        message = f"'prompt' must be a string (or a list of one string), not {_shape(prompt)}"
        raise ApiError(400, message, code="invalid_prompt", param="prompt")
    return prompt


def _ids(values: list) -> bool:
    return all(isinstance(value, int) and not isinstance(value, bool) for value in values)


def _shape(value) -> str:
    """What a JSON value is, in words: "a number", "a list holding a list"."""
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", dict: "an object", list: "a list"}
    if isinstance(value, list) and value:
        return "a list holding " + " and ".join(dict.fromkeys(names.get(type(item), "null") for item in value))
    return "an empty list" if value == [] else names.get(type(value), "null")


def _message(item, index: int) -> Message:
    def refused(field: str, message: str) -> ApiError:  # every message's fault is named by its field
        return ApiError(400, f"messages[{index}]{message}", code="invalid_message", param=f"messages[{index}].{field}")

    # isinstance first: a list or object as the role is unhashable, and `in ROLES` would raise (a 500)
    if not isinstance(item, dict) or not isinstance(item.get("role"), str) or item["role"] not in ROLES:
        if isinstance(item, dict) and item.get("role") in TOOL_ROLES:
            raise _no_tools(index, "role")
        raise refused("role", f" needs a role among {', '.join(ROLES)}")
    for name in ("tool_calls", "function_call"):  # the template gets role and content: they would be dropped
        if item.get(name):  # null or [] (clients that send every field) is none
            raise _no_tools(index, name)
    if item.get("name") is not None and not isinstance(item["name"], str):  # ignored, but typed as TYPED's are
        raise refused("name", ".name must be a string")
    return Message(ROLES[item["role"]], _text(item.get("content"), lambda message: refused("content", message)))


def _no_tools(index: int, field: str) -> ApiError:
    """A history with tool calls or tool results is refused as `tools` is: this server runs no tools, and the
    turn without them would tell the model something else (a call's "content": null was refused as not being
    a string, a call beside "content": "" was dropped without a word)."""
    message = f"messages[{index}].{field}: tool calling is not supported (this server does not run tools)"
    return ApiError(400, message, code="unsupported_parameter", param=f"messages[{index}].{field}")


def _text(content, refused: Callable[[str], ApiError]) -> str:
    """A content: a string, or text parts joined one per line."""
    if isinstance(content, list):  # content parts: only text parts can reach a text model
        if any(not isinstance(part, dict) or part.get("type") != "text" for part in content):
            raise refused(": only text content parts are supported")
        if any(not isinstance(part.get("text"), str) for part in content):  # str() made null "None", 5 "5"
            raise refused(": a text part's text must be a string")
        # One line each, as llama-server and vLLM join them: "".join glued "Here is the file:" to its code
        content = "\n".join(part["text"] for part in content)
    if not isinstance(content, str):
        raise refused(".content must be a string")
    return content


def _prediction(value) -> str | None:
    """Predicted Outputs: {"type": "content", "content": text or text parts}, the text the reply is
    expected to hold (the file an edit returns). Prompt lookup copies from it as from the messages."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "content":
        message = '\'prediction\' must be {"type": "content", "content": TEXT}'
        raise ApiError(400, message, code="invalid_prediction", param="prediction")

    def refused(message: str) -> ApiError:
        return ApiError(400, f"prediction{message}", code="invalid_prediction", param="prediction.content")

    return _text(value.get("content"), refused)


def _unsupported(data: dict) -> None:
    """Refuse what this server cannot do rather than answer as if it had: a client that asked for a tool
    call, a JSON schema, log-probabilities, a logit bias, repeat penalties or audio must not get plain text that
    looks like a success. The values clients send by default (no tools, "text", false, {}, 0) pass, and
    so do tools listed with tool_choice "none" (agent frameworks list them on every request; "none" asks
    for plain text)."""
    plain_text = data.get("tool_choice") == "none" or data.get("function_call") == "none"
    logprobs, best_of = data.get("logprobs"), data.get("best_of")  # each of its type (_check_types)
    refusals = (
        (bool(data.get("tools")) and not plain_text, "'tools': tool calling is not supported"),
        (bool(data.get("functions")) and not plain_text, "'functions': function calling is not supported"),
        (data.get("tool_choice") not in (None, "none", "auto"), "'tool_choice': tool calling is not supported"),
        (data.get("function_call") not in (None, "none", "auto"), "'function_call': function calling is not supported"),
        (
            not _plain_format(data.get("response_format")),
            '\'response_format\': only {"type": "text"} is supported (ask for JSON in the prompt)',
        ),
        # chat's logprobs is true/false; a completion's is a count, and 0 still asks for the chosen token's
        (not (logprobs is None or logprobs is False) or bool(data.get("top_logprobs")), "'logprobs' are not supported"),
        (bool(data.get("echo")), "'echo' is not supported"),
        (best_of not in (None, 1), "'best_of' must be 1: one choice per request is served"),
        (bool(data.get("suffix")), "'suffix' (insertion) is not supported"),
        # a client that bans or boosts tokens, or penalises repeats, would get the unchanged distribution
        (bool(data.get("logit_bias")), "'logit_bias' is not supported"),
        (data.get("frequency_penalty") not in (None, 0), "'frequency_penalty' is not supported (only 0)"),
        (data.get("presence_penalty") not in (None, 0), "'presence_penalty' is not supported (only 0)"),
        # a client asking for spoken output would get text alone, with nothing saying the audio is missing
        (data.get("modalities") not in (None, ["text"]), "'modalities': only [\"text\"] is served"),
        (data.get("audio") is not None, "'audio' output is not supported"),
    )
    for refused, message in refusals:
        if refused:  # each message starts with the field's name, quoted: the error's param
            raise ApiError(400, message, code="unsupported_parameter", param=message.split("'")[1])


def _plain_format(response_format) -> bool:
    """Plain text asked for, or nothing: {"type": "text"}, whose other fields, if sent, are null (clients that
    serialise every field send "json_schema": null beside it)."""
    if not response_format:  # null, or {} as some clients send for "not set"
        return True
    return (
        isinstance(response_format, dict)
        and response_format.get("type") == "text"
        and all(value is None for key, value in response_format.items() if key != "type")
    )


TRUTH, INTEGER, NUMBER = ((bool,), "true or false"), ((int,), "an integer"), ((int, float), "a number")
TEXT, OBJECT, LIST = ((str,), "a string"), ((dict,), "an object"), ((list,), "a list")

# Every field whose value is judged (refused as unsupported, read for its truth) or accepted and ignored
# (docs/serve.md), with the JSON type the API gives it: a wrong one is the client's mistake, a 400 naming the
# field and the type, before any other judgement ("echo": "false" was truthy and refused as asking for echo,
# "logprobs": "true" or "suffix": 5 as "not supported", "n": "1" as "must be 1"; "user": 123 passed).
TYPED = {
    **dict.fromkeys(("stream", "echo", "store", "parallel_tool_calls"), TRUTH),
    **dict.fromkeys(("n", "seed", "best_of", "top_logprobs"), INTEGER),
    **dict.fromkeys(("frequency_penalty", "presence_penalty"), NUMBER),
    **dict.fromkeys(("model", "suffix", "user", "safety_identifier", "prompt_cache_key"), TEXT),
    **dict.fromkeys(("service_tier", "reasoning_effort", "verbosity"), TEXT),
    **dict.fromkeys(("metadata", "web_search_options", "response_format", "logit_bias", "audio"), OBJECT),
    **dict.fromkeys(("tools", "functions", "modalities"), LIST),
    **dict.fromkeys(("tool_choice", "function_call"), ((str, dict), "a string or an object")),
}
LOGPROBS = {True: TRUTH, False: INTEGER}  # chat's logprobs is true/false, a completion's a count


def _check_types(data: dict, chat: bool) -> dict:
    """`data` with the typed fields that are not given left out (so that no later judgement reads them), or a
    400 naming the first field of the wrong type."""
    kept = dict(data)
    for name, (kinds, words) in (TYPED | {"logprobs": LOGPROBS[chat]}).items():
        value = data.get(name)
        if _not_given(name, value, kinds):
            kept.pop(name, None)
            continue
        if kinds == INTEGER[0] and isinstance(value, float) and value.is_integer() and name in COUNTS:
            continue  # JSON has one number type: "n": 1.0 is 1, and was answered before types were checked
        # JSON's true is not 1: Python's bool is an int, so it is taken only where true or false is asked for
        if isinstance(value, bool) != (bool in kinds) or not isinstance(value, kinds):
            raise ApiError(400, f"'{name}' must be {words}", code=f"invalid_{name}", param=name)
    return kept


COUNTS = {"n", "best_of", "top_logprobs", "logprobs"}  # only compared with 0 or 1 (a seed must be an int)


def _not_given(name: str, value, kinds: tuple) -> bool:
    """null, as elsewhere; an empty [] or {} where the other is asked for (PHP's json_encode writes an empty
    map as [], and "response_format": [], "logit_bias": [] or "tools": {} were answered before types were
    checked); a completion's "logprobs": false (a client that sends a chat's false for none)."""
    empty_other = (value == [] and dict in kinds) or (value == {} and list in kinds)
    return value is None or empty_other or (name == "logprobs" and value is False)


def _common(data: dict, cap: int, *, messages, prompt: str) -> ApiRequest:
    # Types first, and every field's own check before _unsupported's judgement: a truthy "false" must not read
    # as asking for what is refused, and a field of the wrong type is named as such whatever else was sent.
    data = _check_types(data, chat=messages is not None)
    # "" is not given (a client with no model set may send it): the served model, as llama-server
    model = data.get("model") or None
    temperature = _number(data, "temperature", 1.0, 0.0, 2.0)  # the API's documented default
    top_p = _number(data, "top_p", 1.0, 0.0, 1.0)
    seed = data.get("seed")  # an integer or null (TYPED)
    # max_completion_tokens is the newer name of the same limit; larger asks are held to the server's cap.
    # A null one is not given (clients that serialise every field send it beside max_tokens).
    name = "max_completion_tokens" if data.get("max_completion_tokens") is not None else "max_tokens"
    asked = data.get(name)
    if asked is not None and (not isinstance(asked, int) or isinstance(asked, bool) or asked < 1):  # named as sent
        raise ApiError(400, f"'{name}' must be a positive integer", code="invalid_max_tokens", param=name)
    stop = data.get("stop")
    stops = [stop] if isinstance(stop, str) else stop or []
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or not all(isinstance(s, str) for s in stops):
        raise ApiError(
            400, f"'stop' must be a string or a list of up to {MAX_STOPS} strings", code="invalid_stop", param="stop"
        )
    stops = [s for s in stops if s]  # "" would be found at once, before any text: not given (only "": no stop)
    choices = data.get("n")
    if choices is not None and choices != 1:  # never fewer choices than asked (an integer: TYPED)
        raise ApiError(400, "'n' must be 1: one choice per request is served", code="invalid_n", param="n")
    # top_k and min_p are not in the OpenAI API but llama-server and vLLM read them (the client's extra_body):
    # honoured, not ignored; run's defaults (40, 0.05) without them. 0 (llama-server) or -1 (vLLM): off.
    top_k = data.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < -1):
        raise ApiError(400, "'top_k' must be an integer, 0 or -1 for off", code="invalid_top_k", param="top_k")
    min_p = _number(data, "min_p", 0.05, 0.0, 1.0)
    params = SamplingParams(
        temperature=temperature, top_k=40 if top_k is None else max(top_k, 0), top_p=top_p, min_p=min_p, seed=seed
    ).seeded()  # without one (or a negative one): one drawn, which the log records
    stream = data.get("stream") or False  # true, false or null (TYPED: "false" is a string, and truthy)
    options = data.get("stream_options")
    if options is not None and (not stream or not isinstance(options, dict)):
        raise ApiError(
            400,
            "'stream_options' is an object, and only for \"stream\": true",
            code="invalid_stream_options",
            param="stream_options",
        )
    include_usage = (options or {}).get("include_usage") or False  # a null one is not given, as elsewhere
    if not isinstance(include_usage, bool):
        raise ApiError(
            400,
            "'stream_options.include_usage' must be true or false",
            code="invalid_stream_options",
            param="stream_options.include_usage",
        )
    prediction = _prediction(data.get("prediction"))
    _unsupported(data)
    return ApiRequest(
        model, messages, prompt, params, min(asked or cap, cap), stops, bool(stream), include_usage, prediction
    )


def _number(data: dict, name: str, default: float, low: float, high: float) -> float:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ApiError(400, f"'{name}' must be a number from {low:g} to {high:g}", code=f"invalid_{name}", param=name)
    return float(value)


# -- responses ------------------------------------------------------------------------------------------


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
    evaluated now (in prompt_ms, the prefill); predicted time is the decode after it."""
    prompt_ms, predicted_ms = stats.prefill_s * 1000, stats.decode_s * 1000
    evaluated = stats.prompt_tokens - cached
    return {
        "cache_n": cached,
        "prompt_n": evaluated,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_second": round(evaluated / stats.prefill_s, 3) if stats.prefill_s > 0 else 0.0,
        "predicted_n": stats.generated,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_ms / stats.generated, 3) if stats.generated else 0.0,
        "predicted_per_second": round(stats.tokens_per_s, 3),
        "draft_n": stats.drafted,
        "draft_n_accepted": stats.accepted,
    }


def speculative(stats: Stats, mode: str, label: str) -> dict:
    return {
        "mode": mode,
        "label": label,
        "acceptance_rate": round(stats.acceptance_rate, 4),
        "mean_accepted_length": round(stats.mean_accepted, 4),
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


def completion_response(rid: str, model: str, text: str, reason: str, extra: dict) -> dict:
    choice = {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}
    return {**_head(rid, "text_completion", model), "choices": [choice], **extra}


def usage_chunk(rid: str, model: str, chat: bool, extra: dict) -> dict:
    """The last chunk asked for by stream_options.include_usage: no choices, the usage (and the rest)."""
    return {**_head(rid, "chat.completion.chunk" if chat else "text_completion", model), "choices": [], **extra}


def chat_chunk(rid: str, model: str, delta: dict, reason: str | None = None, extra: dict | None = None) -> dict:
    choice = {"index": 0, "delta": delta, "finish_reason": reason}
    return {**_head(rid, "chat.completion.chunk", model), "choices": [choice], **(extra or {})}


def completion_chunk(rid: str, model: str, text: str, reason: str | None = None, extra: dict | None = None) -> dict:
    choice = {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}
    return {**_head(rid, "text_completion", model), "choices": [choice], **(extra or {})}


def _head(rid: str, kind: str, model: str) -> dict:
    return {"id": rid, "object": kind, "created": int(time.time()), "model": model}


# JSON may hold these raw, but line readers that split as str.splitlines() does (httpx's iter_lines, httpx-sse
# before 0.4.2, many a hand-written SSE parser) cut an event's line there and failed on half a JSON object: a
# reply that quoted text with a U+2028 broke the stream. Escaped, the JSON means the same.
_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def sse(payload: dict | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False).translate(_LINE_BREAKS)
    return f"data: {data}\n\n"
