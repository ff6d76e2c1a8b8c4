"""The OpenAI wire format, without HTTP: request bodies in (the response and chunk objects out are apireply.py's).

Requests are checked field by field (apicheck.py), so that a bad one is a 400 with an OpenAI-style error
object before it ever waits for the engine.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace

from . import apicheck
from .apicheck import ApiError, whole
from .chat import Message
from .sampling import SamplingParams

# OpenAI allows 4; editor clients send more (Continue's autocomplete a dozen, and has a setting only to trim
# them for strict servers), llama-server takes any number. A bound all the same: each is looked for every round.
MAX_STOPS = 64


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
    prompts: list[str] = field(default_factory=list)  # a completion's: `prompt`, or a batch's (it is the first)
    seed_drawn: bool = False  # no seed (or a negative one) was given: params.seed was drawn, one per prompt
    template_kwargs: dict = field(default_factory=dict)  # chat_template_kwargs: more variables for the chat template

    def prompt_params(self) -> list[SamplingParams]:
        """Each prompt's settings: a batch of one prompt sent three times (LangChain's generate([p, p, p])) asks for
        three samples, which one drawn seed would make the same text; a given seed is every prompt's, so that a
        prompt of the batch sent alone with it repeats its text."""
        again = replace(self.params, seed=None)
        return [self.params] + [again.seeded() if self.seed_drawn else self.params for _ in self.prompts[1:]]


def _integer(text: str) -> int:
    """A JSON integer; one of more digits than Python converts was a 400 that told the client to call
    sys.set_int_max_str_digits()."""
    limit, digits = sys.get_int_max_str_digits(), len(text.lstrip("-"))
    if limit and digits > limit:  # 0: no limit (PYTHONINTMAXSTRDIGITS=0)
        raise ApiError(400, f"the body has an integer of {digits:,} digits", code="invalid_json")
    return int(text)


def _no_constant(name: str) -> float:
    """NaN, Infinity and -Infinity are no JSON (RFC 8259), though Python reads them: a value kept as it was given (a
    chat template variable) went into the log as NaN, which strict JSON readers refuse; llama-server refuses them."""
    raise ValueError(f"{name} is not a JSON value")


def parse_json(body: bytes) -> dict:
    try:
        data = json.loads(body, parse_int=_integer, parse_constant=_no_constant)
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
    messages = [apicheck.message(item, i) for i, item in enumerate(raw)]
    return _common(data, max_tokens_cap, messages=messages, prompt="")


def parse_completion(data: dict, max_tokens_cap: int) -> ApiRequest:
    prompts = apicheck.prompts(data.get("prompt"))
    parsed = _common(data, max_tokens_cap, messages=None, prompt=prompts[0])
    if len(prompts) > 1 and parsed.stream:  # each prompt's events would need a choice index of their own
        message = f"'prompt': a batch of {len(prompts)} prompts is not streamed; send it with \"stream\": false"
        raise ApiError(400, f"{message}, or each prompt in a streamed request of its own",
                       code="unsupported_parameter", param="prompt")  # fmt: skip
    parsed.prompts = prompts
    return parsed


def options(data: dict, cap: int) -> ApiRequest:
    """The sampling options and limits alone, as a completion reads them (llama-server's /infill takes
    /completion's: infill.py)."""
    return _common(data, cap, messages=None, prompt="")


def _common(data: dict, cap: int, *, messages, prompt: str) -> ApiRequest:
    # Types first, and every field's own check before apicheck.unsupported's judgement: a truthy "false" must not read
    # as asking for what is refused, and a field of the wrong type is named as such whatever else was sent.
    data = apicheck.check_types(data, chat=messages is not None)
    # "" is not given (a client with no model set may send it): the served model, as llama-server
    model = data.get("model") or None
    temperature = _number(data, "temperature", 1.0, 0.0, 2.0)  # the API's documented default
    top_p = _number(data, "top_p", 1.0, 0.0, 1.0)
    seed = data.get("seed")  # an integer or null (apicheck.TYPED)
    asked = _asked_tokens(data)
    stop = data.get("stop")
    stops = [stop] if isinstance(stop, str) else [] if stop is None else stop  # false, 0 or {}: no list of strings
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or not all(isinstance(s, str) for s in stops):
        raise ApiError(
            400, f"'stop' must be a string or a list of up to {MAX_STOPS} strings", code="invalid_stop", param="stop"
        )
    stops = [s for s in stops if s]  # "" would be found at once, before any text: not given (only "": no stop)
    choices = data.get("n")
    if choices is not None and choices != 1:  # never fewer choices than asked (an integer: apicheck.TYPED)
        raise ApiError(400, "'n' must be 1: one choice per request is served", code="invalid_n", param="n")
    # top_k and min_p are not in the OpenAI API but llama-server and vLLM read them (the client's extra_body):
    # honoured, not ignored; run's defaults (40, 0.05) without them. 0 (llama-server) or -1 (vLLM): off.
    top_k = whole(data.get("top_k"))
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < -1):
        raise ApiError(400, "'top_k' must be an integer, 0 or -1 for off", code="invalid_top_k", param="top_k")
    min_p = _number(data, "min_p", 0.05, 0.0, 1.0)
    params = SamplingParams(
        temperature=temperature, top_k=40 if top_k is None else max(top_k, 0), top_p=top_p, min_p=min_p, seed=seed
    )
    seeded = params.seeded()  # without one (or a negative one): one drawn, which the log records
    stream = data.get("stream") or False  # true, false or null (apicheck.TYPED: "false" is a string, and truthy)
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
    prediction = apicheck.prediction(data.get("prediction"))
    template_kwargs = apicheck.template_kwargs(data.get("chat_template_kwargs"), chat=messages is not None)
    apicheck.unsupported(data)
    request = ApiRequest(
        model, messages, prompt, seeded, min(asked or cap, cap), stops, bool(stream), include_usage, prediction
    )
    request.seed_drawn = seeded is not params
    request.template_kwargs = template_kwargs
    return request


def _asked_tokens(data: dict) -> int | None:
    """The most tokens the request asks for (None: no limit of its own); larger asks are held to the server's cap.
    max_completion_tokens is the newer name of the same limit, n_predict llama-server's (its clients send it). -1 is
    no limit, as llama-server and LM Studio read it (LM Studio's documented request and llama.cpp's web UI send it).
    A null one is not given (clients that serialise every field send it beside max_tokens), and -1 beside a limit under
    another name is that limit ({"max_tokens": -1, "n_predict": 5} is 5, as llama-server reads it)."""
    for name in ("max_completion_tokens", "max_tokens", "n_predict"):  # the first limit given is the one
        asked = whole(data.get(name))
        if asked is None or asked == -1:  # -1 yields to a limit under another name
            continue
        if not isinstance(asked, int) or isinstance(asked, bool) or asked < 1:  # named as sent
            raise ApiError(400, f"'{name}' must be a positive integer, or -1 for no limit", code="invalid_max_tokens",
                           param=name)  # fmt: skip
        return asked
    return None


def _number(data: dict, name: str, default: float, low: float, high: float) -> float:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ApiError(400, f"'{name}' must be a number from {low:g} to {high:g}", code=f"invalid_{name}", param=name)
    return float(value) + 0.0  # -0.0 becomes 0.0, as run's options read it
