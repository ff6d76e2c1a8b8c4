"""llama-server's `POST /infill`, which editor plugins (llama.vim, llama.vscode) call for code completion as you type:
the request's fields, the fill-in-the-middle prompt built of the model's FIM tokens, and llama-server's own
response shape (its /completion JSON, not OpenAI's). The generation is /v1/completions' (serveapi.py).

The prompt is llama-server's (tools/server, format_prompt_infill), repo-level FIM as Qwen2.5-Coder was trained on:

    [FIM_REP]myproject\\n [FIM_SEP]filename\\n text ... [FIM_SEP]filename\\n [BOS] [FIM_PRE]prefix prompt
    [FIM_SUF]suffix [FIM_MID]

Text is tokenized as text (a `<|fim_pre|>` in the code is not the token), but `prompt`, whose control tokens are
read, as llama-server reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import apireply, openai_api
from .apicheck import ApiError, whole
from .openai_api import ApiRequest
from .speculative import Stats

# What the plugins send on every request that would change nothing here, read and ignored (docs/serve.md):
# llama-server's sampler order (this server's is fixed), its prompt time limit (which it does not apply), its slots.
IGNORED = ("samplers", "t_max_prompt_ms", "cache_prompt", "id_slot")
LIMITS = ("n_indent", "t_max_predict_ms")  # llama-server's stops for a completion's size (Limits)
REQUIRED = ("pre", "suf", "mid")
NAMES = {"pre": "prefix", "suf": "suffix", "mid": "middle"}
STOP_TYPES = {"eog": "eos", "max_tokens": "limit", "context": "limit", "stop": "word"}  # llama-server's words
STOP_TYPES |= dict.fromkeys(LIMITS, "limit")


@dataclass
class Infill:
    """One /infill request: the text around the cursor, other files, and how to sample the middle."""

    prefix: str
    suffix: str
    prompt: str  # the start of the middle: the cursor's line up to it (llama.vim's)
    extra: list[tuple[str, str]]  # (filename, text) of other files
    options: ApiRequest
    fields: list[str] | None = None  # response_fields: the response's fields (paths "timings/prompt_n"), else all
    n_indent: int = 0  # the indentation a line after the first needs (llama.vim's: the cursor line's); 0: any
    t_max_predict_ms: int = 0  # past this, the completion ends at a newline; 0: no limit
    truncated: bool = False  # set as the prompt is built: a part did not fit the context and was cut

    def limits(self) -> Limits | None:
        """The stops the request asked for, None where it asked for none."""
        return Limits(self.n_indent, self.t_max_predict_ms) if self.n_indent > 0 or self.t_max_predict_ms > 0 else None

    @property
    def before(self) -> str:
        """The text before the cursor: the log's prompt."""
        return self.prefix + self.prompt


def _text(data: dict, name: str, message: str) -> str:
    value = data.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ApiError(400, message, code=f"invalid_{name}", param=name)
    return value


def parse(data: dict, cap: int) -> Infill:
    """The request, with llama-server's checks and its words; the sampling options as /v1/completions reads them."""
    for name in ("input_prefix", "input_suffix"):
        if name not in data:
            raise ApiError(400, f'"{name}" is required', code=f"missing_{name}", param=name)
    prefix = _text(data, "input_prefix", '"input_prefix" must be a string')
    suffix = _text(data, "input_suffix", '"input_suffix" must be a string')
    prompt = _text(data, "prompt", '"prompt" must be a string')
    extra = _extra(data.get("input_extra"))
    fields = data.get("response_fields")
    if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) for f in fields)):
        raise ApiError(400, "'response_fields' must be a list of strings", code="invalid_response_fields",
                       param="response_fields")  # fmt: skip
    limits = {name: _integer(data, name) for name in LIMITS}
    rest = {key: value for key, value in data.items() if key not in (*IGNORED, *LIMITS, "prompt", "response_fields")}
    warm_up = whole(rest.get("n_predict")) == 0  # llama.vim's: read the other files into the cache, generate nothing
    if warm_up:
        del rest["n_predict"]
    options = openai_api.options(rest, cap)
    if warm_up:
        options.max_tokens = 0
    return Infill(prefix, suffix, prompt, extra, options, fields, **limits)


def _integer(data: dict, name: str) -> int:
    value = whole(data.get(name))
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, f"'{name}' must be an integer (0 or less: no limit)", code=f"invalid_{name}", param=name)
    return value


class Limits:
    """llama-server's n_indent and t_max_predict_ms (its process_token), which keep an editor's completion to the
    block it is in: fed each token's text as it comes, it says what of it to keep and when the completion ends.
    n_indent: after a newline, a line whose first character other than a space or a tab (a newline too: a blank line)
    comes at a smaller indentation ends it there, that indentation kept. t_max_predict_ms: a token with a newline that
    comes past that time generating ends it after that token. Both read the text alone, the time aside, so a
    speculative reply is cut where the target's alone is."""

    def __init__(self, n_indent: int, t_max_predict_ms: int) -> None:
        self.n_indent, self.t_max_s = n_indent, t_max_predict_ms / 1000
        self.indent: int | None = None  # the current line's indentation so far, while only spaces and tabs came
        self.stopped = False
        self.reason = ""  # the one that stopped it, the console's and the log's stop reason

    def push(self, piece: str, elapsed_s: float) -> str:
        """What to keep of a token's text, which came `elapsed_s` seconds into the generation (prefill excluded)."""
        for i, char in enumerate(piece):
            if self.indent is not None:
                if char in " \t":
                    self.indent += 1
                    continue
                if self.indent < self.n_indent:
                    self.stopped, self.reason = True, "n_indent"
                    return piece[:i]
                self.indent = None
            if char == "\n" and self.n_indent > 0:
                self.indent = 0
        if self.t_max_s > 0 and "\n" in piece and elapsed_s > self.t_max_s:
            self.stopped, self.reason = True, "t_max_predict_ms"
        return piece


def _extra(chunks) -> list[tuple[str, str]]:
    if chunks is None:
        return []
    if not isinstance(chunks, list):
        message = '"input_extra" must be an array of {"filename": string, "text": string}'
        raise ApiError(400, message, code="invalid_input_extra", param="input_extra")
    out = []
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise ApiError(400, 'extra_context chunk must contain a "text" field with a string value',
                           code="invalid_input_extra", param=f"input_extra[{i}].text")  # fmt: skip
        filename = chunk.get("filename", "tmp")
        if not isinstance(filename, str):
            raise ApiError(400, 'extra_context chunk\'s "filename" field must be a string', code="invalid_input_extra",
                           param=f"input_extra[{i}].filename")  # fmt: skip
        out.append((filename, chunk["text"]))
    return out


def check_model(fim: dict[str, int]) -> None:
    """A 400 in llama-server's words for a model that has not all of FIM_PRE, FIM_SUF and FIM_MID."""
    missing = "".join(f"{NAMES[name]} token is missing. " for name in REQUIRED if name not in fim)
    if missing:
        raise ApiError(400, f"Infill is not supported by this model: {missing.strip()} (serve a code model trained "
                       "for fill-in-the-middle, such as Qwen2.5-Coder)", code="infill_not_supported")  # fmt: skip


def prompt_ids(infill: Infill, model) -> list[int]:
    """The FIM prompt's tokens (on the tokenizer's thread). The other files keep at most half the context, their end,
    whatever the request around the cursor: so the next keystroke's prompt starts as this one's and the KV cache holds
    them (a cut that moved with the prefix's length read them all again each time, and an n_predict 0 warm-up warmed
    nothing). The prefix's start and the suffix's end give way to what is left, the suffix at most 3/4 of it where
    both must (llama-server's 3:1), keeping room for the reply (a quarter of the context at most); infill.truncated
    then says so."""
    fim = model.fim

    def text(value: str) -> list[int]:
        return model.tokenize(value) if value else []

    extra = [fim["rep"], *text("myproject\n")] if "rep" in fim else []
    for filename, body in infill.extra:
        extra += [fim["sep"], *text(filename + "\n")] if "sep" in fim else text("\n\n--- snippet ---\n\n")
        extra += text(body)
    if "sep" in fim:
        extra += [fim["sep"], *text("filename\n")]
    if len(extra) > model.n_ctx // 2:
        infill.truncated = True
        extra = extra[len(extra) - model.n_ctx // 2 :]
    prefix, suffix = text(infill.prefix), text(infill.suffix)
    prompt = model.tokenize(infill.prompt, parse_special=True) if infill.prompt else []
    head = [model.bos] if getattr(model, "add_bos", False) else []
    fixed = len(extra) + len(head) + len(prompt) + 3  # FIM_PRE, FIM_SUF, FIM_MID
    room = max(model.n_ctx - max(1, min(infill.options.max_tokens, model.n_ctx // 4)) - fixed, 0)
    if len(prefix) + len(suffix) > room:
        infill.truncated = True
        keep_suffix = min(len(suffix), max(room // 4, room - len(prefix)))
        keep_prefix = min(len(prefix), room - keep_suffix)
        prefix, suffix = prefix[len(prefix) - keep_prefix :], suffix[:keep_suffix]
    return [*extra, *head, fim["pre"], *prefix, *prompt, fim["suf"], *suffix, fim["mid"]]


def timings(stats: Stats, cached: int) -> dict:
    """serve's llama-server timings, with the prompt's time per token too (llama.vim shows it)."""
    out = apireply.timings(stats, cached)
    out["prompt_per_token_ms"] = round(out["prompt_ms"] / out["prompt_n"], 3) if out["prompt_n"] else 0.0
    return out


def response(infill: Infill, model: str, text: str, stats: Stats, stop_reason: str, cached: int, extra: dict,
             *, stream: bool = False) -> dict:  # fmt: skip
    """llama-server's last /completion object (streamed: its content was sent already), picked by response_fields."""
    body = {
        "index": 0,
        "content": "" if stream else text,
        "tokens": [],
        "id_slot": 0,
        "stop": True,
        "model": model,
        "tokens_predicted": stats.generated,
        "tokens_evaluated": stats.prompt_tokens,
        "has_new_line": "\n" in text,
        "truncated": infill.truncated,
        "stop_type": STOP_TYPES.get(stop_reason, "none"),
        "tokens_cached": stats.prompt_tokens + stats.generated,  # what the cache holds now, as llama-server's n_past
        "timings": timings(stats, cached),
        "speculative": extra["speculative"],
    }
    return pick(body, infill.fields)


def chunk(text: str) -> dict:
    """A streamed piece, as llama-server sends it."""
    return {"index": 0, "content": text, "tokens": [], "stop": False, "id_slot": 0}


def pick(body: dict, fields: list[str] | None) -> dict:
    """llama-server's response_fields: only the fields named, a nested one under its path as the key
    ("timings/prompt_n": 12, which llama.vim reads); a path that is not there is left out."""
    if fields is None:
        return body
    out = {}
    for path in fields:
        value, found = body, True
        for key in path.split("/"):
            found = found and isinstance(value, dict) and key in value
            value = value[key] if found else None
        if found:
            out[path] = value
    return out
