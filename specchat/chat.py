"""Chat prompts: the target GGUF's own chat template, rendered as llama-cpp-python renders it (a Jinja
sandbox), within bounds of time and size: templates come from third parties.

Only the template's own text may become special tokens. Message contents are swapped for sentinels
before rendering, then tokenized with parse_special=False, so a user who types `<|im_end|>` gets those
characters, not the control token. Earlier replies are shown to templates that rewrite them (reasoning
models' templates drop the reasoning), as the model's own text.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from .errors import ContextFullError, SpecchatError
from .template import RENDER_CHARS, Exhausted, Refused, bounded_render

if TYPE_CHECKING:  # only named: importing it loads llama.cpp, which a command that runs no model does not need
    from .engine import Engine

REPLY_SHARE = 4  # a conversation may fill the context up to the last quarter, kept free for the reply
MIN_REPLY = 64  # a message leaving less room than this for its reply is refused
# A message's place in the rendered template. The nonce (this process's own) keeps text a client chose from
# spelling one: a template variable (serve's chat_template_kwargs), two of them side by side, or a message.
_NONCE = secrets.token_hex(8)
_SENTINEL = f"\ue000specchat-{_NONCE}-{{}}\ue001"
_SENTINEL_RE = re.compile(f"\ue000specchat-{_NONCE}-(\\d+)\ue001")


class TemplateError(SpecchatError):
    """The chat template is missing or failed to render."""


class MessagesRefused(TemplateError):
    """The chat template refused these messages by its own raise_exception (Gemma's "roles must alternate")."""


def system_refusal(pipeline, system: str, template_kwargs: dict | None = None) -> TemplateError | None:
    """Why the chat template refuses this system prompt (Gemma 2's "System role not supported"), or None: also
    where it refuses a user's message alone, which is not the system prompt's doing (the chat says that itself).
    `pipeline`: anything with prompt(messages, template_kwargs=...), as runtime.Pipeline."""
    try:
        pipeline.prompt([Message("system", system), Message("user", "Hi")], template_kwargs=template_kwargs)
    except TemplateError as exc:
        try:
            pipeline.prompt([Message("user", "Hi")], template_kwargs=template_kwargs)
        except TemplateError:
            return None
        return exc
    return None


@dataclass
class Message:
    role: str
    content: str
    interrupted: bool = False


@dataclass
class Conversation:
    system: str | None = None
    messages: list[Message] = field(default_factory=list)

    def as_messages(self) -> list[Message]:
        head = [Message("system", self.system)] if self.system else []
        return head + self.messages


def prompt_tokens(
    engine: Engine, messages: list[Message], *, use_template: bool = True, template_kwargs: dict | None = None
) -> list[int]:
    """Token ids for the model to continue: the chat template with a generation prompt, or raw text.
    template_kwargs: more variables for the template (--chat-template-kwargs, an API request's chat_template_kwargs)."""
    if not use_template:
        text = "\n\n".join(m.content for m in messages)
        return engine.tokenize(text, add_special=True, parse_special=False)
    tokens = _template_tokens(engine, messages, template_kwargs or {})
    # llama.cpp's server and CLI give a model that asks for a BOS (add_bos_token) exactly one, whether its template
    # writes bos_token or not (common/chat.cpp strips a rendered one, the tokenizer adds it): where a template
    # writes none, prompts here began without the token llama.cpp puts first, so the same GGUF got another prompt.
    if engine.add_bos and engine.bos >= 0 and tokens[:1] != [engine.bos]:
        tokens.insert(0, engine.bos)
    return tokens


def _template_tokens(engine: Engine, messages: list[Message], extra: dict) -> list[int]:
    """The chat template's rendering with a generation prompt, as tokens; what users wrote stays plain text."""
    template = engine.chat_template()
    if not template:
        raise TemplateError(
            f"{engine.path.name} has no chat template (tokenizer.chat_template)",
            hint="use --no-template to send the prompt as plain text",
        )
    expected = _render(engine, template, [{"role": m.role, "content": m.content} for m in messages], extra)
    # A template may look at contents: reasoning models' templates cut the reasoning off earlier replies,
    # which a sentinel hides from them. So the replies are tried as text too, the user's text stays hidden.
    every_sentinel = None  # all contents hidden, each sentinel found: what to use when neither gives `expected`
    replies = any(m.role == "assistant" for m in messages)  # without any, the second try is the first again
    for hidden in (lambda m: True, lambda m: m.role != "assistant")[: 2 if replies else 1]:
        if any(_SENTINEL_RE.search(m.content) for m in messages if not hidden(m)):
            continue  # a reply that spells a sentinel would be taken for one
        shown = [
            {"role": m.role, "content": _SENTINEL.format(i) if hidden(m) else m.content} for i, m in enumerate(messages)
        ]
        rendered = _render(engine, template, shown, extra)
        if _SENTINEL_RE.sub(lambda found: messages[int(found[1])].content, rendered) == expected:
            return _tokens_around_contents(engine, rendered, messages)
        if every_sentinel is None and _sentinels(rendered) == list(range(len(messages))):
            every_sentinel = rendered
    if every_sentinel is not None:
        # The template changes every content alike (Llama 3's and Gemma's `| trim`): the contents go in as
        # given, which keeps what users typed out of control tokens (an exact rendering would not).
        return _tokens_around_contents(engine, every_sentinel, messages)
    # The template rewrites what users typed (rare): user text is plain text to the tokenizer only where it
    # does not spell a control token.
    return engine.tokenize(expected, add_special=False, parse_special=True)


def _sentinels(rendered: str) -> list[int]:
    return sorted(int(i) for i in _SENTINEL_RE.findall(rendered))


def _tokens_around_contents(engine: Engine, rendered: str, messages: list[Message]) -> list[int]:
    """The template's text may hold control tokens; the contents in place of its sentinels are plain text.
    The template's plain text next to a content is tokenized with it, as llama.cpp tokenizes a whole prompt
    between control tokens: apart, Mistral's "[INST] " + "Hi" gave " " + "Hi" for the " Hi" it was trained on,
    and ChatML's "user\n" + a message that starts with a blank line gave "\n" + "\n" for "\n\n"."""
    tokens: list[int] = []
    plain = ""  # plain text not tokenized yet: it may go on into the next content
    for index, piece in enumerate(_SENTINEL_RE.split(rendered)):
        if index % 2:
            plain += messages[int(piece)].content
            continue
        ids = engine.tokenize(piece, add_special=False, parse_special=True) if piece else []
        head, middle, tail = _edges(engine, piece, ids)
        if middle is None:  # no control token: the whole piece is plain text
            plain += piece
            continue
        tokens += engine.tokenize(plain + head, add_special=False, parse_special=False) if plain + head else []
        tokens += middle
        plain = tail
    return tokens + (engine.tokenize(plain, add_special=False, parse_special=False) if plain else [])


def _edges(engine: Engine, piece: str, ids: list[int]) -> tuple[str, list[int] | None, str]:
    """A piece of the template's text as (plain text before its first control token, the ids from there to its
    last one, plain text after it); (piece, None, "") where it holds none. An edge whose text alone does not
    tokenize to the piece's own ids there (a control token that strips the spaces beside it) stays in `middle`."""
    controls = [i for i, token in enumerate(ids) if engine.is_control(token)]
    if not controls:
        return piece, None, ""
    first, last = controls[0], controls[-1]
    start = piece.find(engine.token_text(ids[first]).decode("utf-8", errors="replace"))
    head = piece[:start] if start >= 0 else ""
    if start < 0 or engine.tokenize(head, add_special=False, parse_special=False) != ids[:first]:
        head, first = "", 0
    text = engine.token_text(ids[last]).decode("utf-8", errors="replace")
    end = piece.rfind(text)
    tail = piece[end + len(text) :] if end >= 0 else ""
    if end < 0 or engine.tokenize(tail, add_special=False, parse_special=False) != ids[last + 1 :]:
        tail, last = "", len(ids) - 1
    return head, ids[first : last + 1], tail


def fit_conversation(
    engine: Engine,
    conversation: Conversation,
    max_tokens: int = 0,
    use_template: bool = True,
    chat: bool = True,
    template_kwargs: dict | None = None,
) -> tuple[list[int], int]:
    """The prompt ids of the conversation (its last message is the new one) and how many of its oldest
    turns gave way so that the reply has room. Turns are dropped only when the whole does not fit,
    and then down to half the context: the next turns append to the KV cache again instead of
    re-reading a conversation that shifts every turn. The system prompt always stays. Raises
    ContextFullError, leaving the conversation as it was, when the new message alone is too long (its hint
    names the chat's /system and "start the chat" only for a `chat`, not for `run -c`). template_kwargs: as
    prompt_tokens', the same every turn, so that the KV cache of the turns before is reused."""
    n_ctx = engine.n_ctx
    room = min(n_ctx // REPLY_SHARE, max_tokens or n_ctx)
    render = partial(prompt_tokens, engine, use_template=use_template, template_kwargs=template_kwargs)
    prompt = render(conversation.as_messages())
    if len(prompt) + room <= n_ctx:
        return prompt, 0
    goal, messages = min(n_ctx // 2, n_ctx - room), conversation.messages
    sizes = [len(engine.tokenize(m.content)) for m in messages]
    # The template's tokens around each message, spread evenly: counting the texts alone, the cut of a conversation
    # of many short turns never reached the excess before the newest turn, and every earlier turn gave way.
    system = len(engine.tokenize(conversation.system)) if conversation.system else 0
    around = max(0, len(prompt) - system - sum(sizes)) / len(messages)
    sizes = [size + around for size in sizes]
    start = 0
    while len(prompt) > goal and (cut := _next_cut(messages, sizes, start, len(prompt) - goal)) is not None:
        start = cut
        kept = Conversation(conversation.system, messages[start:]).as_messages()
        prompt = render(kept)
    reserve = min(room, MIN_REPLY)
    if len(prompt) + reserve > n_ctx:
        system_hint = " or the system prompt (/system, --system)" if chat else " or the system prompt (--system)"
        raise ContextFullError(
            # the reply's share named: "takes 200 tokens; the context holds 256" alone read as a contradiction
            f"this message takes {len(prompt)} tokens with the system prompt; "
            f"the context holds {n_ctx}, {reserve} of them kept for the reply",
            # a system prompt can take most of the room: "shorten it" alone sent the user to the wrong text
            hint=f"shorten it{system_hint if conversation.system else ''}, "
            + ("or start the chat with a larger --ctx" if chat else "or raise --ctx"),
        )
    dropped = sum(1 for m in messages[:start] if m.role == "user")
    del messages[:start]
    return prompt, dropped


def _next_cut(messages: list[Message], sizes: list[float], start: int, excess: int) -> int | None:
    """Where the kept messages begin after dropping whole turns from `start` whose texts cover `excess`
    tokens (all but the newest turn, if they do not); None when only the newest turn is left."""
    cut, total = None, 0
    for i in range(start + 1, len(messages)):
        total += sizes[i - 1]
        if messages[i].role == "user":
            cut = i
            if total >= excess:
                break
    return cut


def _render(engine: Engine, template: str, messages: list[dict], extra: dict) -> str:
    def special(token: int) -> str:
        return engine.token_text(token).decode("utf-8", errors="replace") if token >= 0 else ""

    # The fallback render holds the real message texts: they may be long, the template's own text is not (nor
    # are the extra variables, which a template may print).
    limit = RENDER_CHARS + 4 * (sum(len(m["content"]) for m in messages) + len(json.dumps(extra)))
    try:
        return bounded_render(template, messages, special(engine.eos), special(engine.bos), limit, extra)
    except Refused as exc:  # the same words as any failure; a server answers it as the client's fault
        # Gemma's and Mistral's templates refuse a system message: leaving it out is the fix that keeps the template
        system = any(m["role"] == "system" for m in messages)
        hint = "leave out the system prompt (--system; in the chat /system off), or " if system else ""
        raise MessagesRefused(
            f"the chat template of {engine.path.name} failed to render: {exc}",
            hint=hint + "use --no-template to send the prompt as plain text",
        ) from None
    except Exhausted as exc:
        raise TemplateError(
            f"the chat template of {engine.path.name} {exc}",
            hint="the template loops or grows without end: use --no-template to send the prompt as plain text",
        ) from None
    except Exception as exc:  # jinja2 raises many types, including SecurityError from the sandbox
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TemplateError(
            f"the chat template of {engine.path.name} failed to render: {first}",
            hint="use --no-template to send the prompt as plain text",
        ) from None


def whole_number(text: str, max_digits: int = 18) -> int | None:
    """A number typed in the chat (/k, /max, /load ID), or None: ASCII digits only, and not too many.
    str.isdigit() accepts "²", which int() refuses; isdecimal() accepts "٣", which int() reads as 3
    while the user sees another character; and int() refuses more than 4,300 digits."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= min(max_digits, 4300) else None


def decimal_number(text: str) -> float | None:
    """A decimal typed in the chat (/temp), or None: ASCII only, as whole_number, and no "_": float()
    reads "٣" as 3 and "0_5" as 5, neither of which is what the user sees. "-0" reads as 0."""
    if not text.isascii() or "_" in text:
        return None
    try:
        return float(text) + 0.0  # + 0.0: -0.0 becomes 0.0, shown as "0", not "-0"
    except ValueError:
        return None
