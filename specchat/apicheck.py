"""A request's fields checked one by one: their JSON types, what this server refuses to do rather than
pretend (tools, JSON schemas, log-probabilities...), and the shapes of the messages, the prompt and a
prediction; ApiError, the 400 each check raises, lives here too. Separate from openai_api.py, which builds
an ApiRequest from these checks (apireply.py writes the responses): the rules for what a client may send are long,
and a new field's rule goes here alone.
"""

from __future__ import annotations

from collections.abc import Callable

from .chat import Message
from .template import RESERVED

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
TOOL_ROLES = ("tool", "function")  # a tool's result, the API's newer and older name: see _no_tools


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


MAX_PROMPTS = 64  # a batch's prompts, each answered in turn: LangChain's OpenAI LLM sends 20 unless told otherwise


def prompts(prompt) -> list[str]:
    """The prompts: a string, or a list of strings (a batch, answered one choice each). The API's other shapes
    are named as such ("must be a non-empty string" read as a malformed body), and what is none of them as what
    it is. Every prompt of a batch is checked here, before any runs."""
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        if len(prompt) > MAX_PROMPTS:
            message = f"'prompt': a batch of at most {MAX_PROMPTS} prompts is served, not {len(prompt)}; send the rest"
            raise ApiError(400, f"{message} in another request", code="invalid_prompt", param="prompt")
        for i, text in enumerate(prompt if len(prompt) > 1 else ()):  # a list of one is named as the prompt
            if text == "":
                raise ApiError(400, f"prompt[{i}] must be a non-empty string", code="missing_prompt",
                               param=f"prompt[{i}]")  # fmt: skip
        return [_one(p) for p in prompt]
    return [_one(prompt)]


def _one(prompt) -> str:
    if isinstance(prompt, list) and prompt and (_ids(prompt) or all(isinstance(p, list) and _ids(p) for p in prompt)):
        raise ApiError(
            400, "'prompt': token ids are not supported, send the text", code="unsupported_parameter", param="prompt"
        )
    if prompt is None or prompt == "":
        raise ApiError(400, "'prompt' must be a non-empty string", code="missing_prompt", param="prompt")
    if not isinstance(prompt, str):
        message = f"'prompt' must be a string or a list of strings, not {_shape(prompt)}"
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


def message(item, index: int) -> Message:
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
        raise refused(".content must be a string or a list of text parts")
    return content


def prediction(value) -> str | None:
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


def template_kwargs(value, chat: bool) -> dict:
    """llama-server's and vLLM's chat_template_kwargs: more variables for the chat template (Qwen3's
    {"enable_thinking": false}), given to it as they are. Refused where they would replace what the server gives the
    template (the messages, the generation prompt, the tools...), and on a plain completion, which no template
    renders: ignored, the reply would not be what they asked for. Its type (an object) is checked with TYPED's."""
    if not value:  # null or {} (or [], as PHP writes an empty map): none
        return {}
    if not chat:
        message = "'chat_template_kwargs' is for chats: no chat template renders a completion's prompt"
        raise ApiError(400, message, code="unsupported_parameter", param="chat_template_kwargs")
    for key in value:
        if key in RESERVED:
            message = f"'chat_template_kwargs' may not set '{key}': the server gives the template that variable itself"
            raise ApiError(400, message, code="invalid_chat_template_kwargs", param=f"chat_template_kwargs.{key}")
    return dict(value)


def unsupported(data: dict) -> None:
    """Refuse what this server cannot do rather than answer as if it had: a client that asked for a tool
    call, a JSON schema, log-probabilities, a logit bias, repeat penalties or audio must not get plain text that
    looks like a success. The values clients send by default (no tools, "text", false, {}, 0) pass, and
    so do tools listed with tool_choice "none" (agent frameworks list them on every request; "none" asks
    for plain text). llama-server's and vLLM's own fields are judged so too (SHAPING)."""
    plain_text = data.get("tool_choice") == "none" or data.get("function_call") == "none"
    logprobs, best_of = data.get("logprobs"), data.get("best_of")  # each of its type (check_types)
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
    for name, (_, neutral, what) in SHAPING.items():
        if data.get(name) not in (None, *neutral):
            raise ApiError(400, f"'{name}' ({what}) is not supported", code="unsupported_parameter", param=name)


TRUTH, INTEGER, NUMBER = ((bool,), "true or false"), ((int,), "an integer"), ((int, float), "a number")
TEXT, OBJECT, LIST = ((str,), "a string"), ((dict,), "an object"), ((list,), "a list")

CONSTRAINED = "constrained output; ask for JSON in the prompt"
# llama-server's and vLLM's own fields (a client's extra_body) that shape the reply, beside top_k and min_p (which
# are honoured): a grammar, a JSON schema, a repeat penalty, token probabilities or tokens past the end got plain
# text that looked as asked. Each with its JSON type (checked first, as TYPED's) and the values that change nothing,
# which pass: llama.cpp's web UI sends several on every request, at such a value. A schema of {} is no such value
# (llama-server makes it "any JSON object"), nor is vLLM's "" regex (an empty reply).
SHAPING = {
    "grammar": (TEXT, ("",), CONSTRAINED),
    **dict.fromkeys(("guided_regex", "guided_grammar"), (TEXT, (), CONSTRAINED)),
    "json_schema": (OBJECT, (), CONSTRAINED),
    "guided_json": (((str, dict), "a string or an object"), (), CONSTRAINED),  # vLLM: the schema or its JSON text
    "guided_choice": (LIST, (), CONSTRAINED),
    "structured_outputs": (OBJECT, (), CONSTRAINED),  # vLLM 0.12's name for all the guided_* above
    # SillyTavern's text completion sends its repetition penalty (1.2 unless set) under both names
    **dict.fromkeys(
        ("repeat_penalty", "repetition_penalty"), (NUMBER, (1,), "a repeat penalty; only 1 (set the client's to 1)")
    ),
    "n_probs": (INTEGER, (0,), "token probabilities; only 0"),
    "ignore_eos": (TRUTH, (False,), "generating past the end"),
    "min_tokens": (INTEGER, (0,), "generating past the end; only 0"),
    "mirostat": (INTEGER, (0,), "mirostat sampling; only 0"),
    "typical_p": (NUMBER, (1,), "typical sampling; only 1"),
    "dry_multiplier": (NUMBER, (0,), "a DRY repeat penalty; only 0"),
    "xtc_probability": (NUMBER, (0,), "XTC sampling; only 0"),
    # llama-server's (its web UI sends dynatemp_range 0): ignored, a dynamic temperature or a sigma cut was asked
    # for and the reply was sampled without it
    "dynatemp_range": (NUMBER, (0,), "dynamic temperature; only 0"),
    "top_n_sigma": (NUMBER, (-1, 0), "top-n-sigma sampling; only -1 (off)"),
}


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
    "stream_options": OBJECT,  # only for "stream": true, which openai_api checks once its type is known
    "chat_template_kwargs": OBJECT,  # llama-server's and vLLM's, honoured: template_kwargs
    **dict.fromkeys(("tools", "functions", "modalities"), LIST),
    **dict.fromkeys(("tool_choice", "function_call"), ((str, dict), "a string or an object")),
    # llama-server's and vLLM's own, refused unless they change nothing
    **{name: kinds for name, (kinds, _, _) in SHAPING.items()},
}
LOGPROBS = {True: TRUTH, False: INTEGER}  # chat's logprobs is true/false, a completion's a count


def check_types(data: dict, chat: bool) -> dict:
    """`data` with the typed fields that are not given left out (so that no later judgement reads them), or a
    400 naming the first field of the wrong type."""
    kept = dict(data)
    for name, (kinds, words) in (TYPED | {"logprobs": LOGPROBS[chat]}).items():
        value = data.get(name)
        if _not_given(name, value, kinds):
            kept.pop(name, None)
            continue
        if kinds == INTEGER[0] and name in COUNTS and whole(value) is not value:
            # JSON has one number type: "n": 1.0 is 1, and was answered before types were checked
            kept[name] = whole(value)
            continue
        # JSON's true is not 1: Python's bool is an int, so it is taken only where true or false is asked for
        if isinstance(value, bool) != (bool in kinds) or not isinstance(value, kinds):
            raise ApiError(400, f"'{name}' must be {words}", code=f"invalid_{name}", param=name)
    return kept


# only compared with 0 or 1 (a seed must be an int)
COUNTS = {"n", "best_of", "top_logprobs", "logprobs", "n_probs", "min_tokens", "mirostat"}


def whole(value):
    """A whole count sent as a float (Python's json writes 256.0 for a computed max_tokens) is that count, as
    llama-server reads it; anything else is left as it is, for its check to name."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _not_given(name: str, value, kinds: tuple) -> bool:
    """null, as elsewhere; an empty [] or {} where the other is asked for (PHP's json_encode writes an empty
    map as [], and "response_format": [], "logit_bias": [] or "tools": {} were answered before types were
    checked); a completion's "logprobs": false (a client that sends a chat's false for none)."""
    empty_other = (value == [] and dict in kinds) or (value == {} and list in kinds)
    return value is None or empty_other or (name == "logprobs" and value is False)
