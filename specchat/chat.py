"""Chat prompts: the target GGUF's own chat template, rendered as llama-cpp-python renders it (a Jinja
sandbox), within bounds of time and size: templates come from third parties.

Only the template's own text may become special tokens. Message contents are swapped for sentinels
before rendering, then tokenized with parse_special=False, so a user who types `<|im_end|>` gets those
characters, not the control token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .engine import Engine
from .errors import SpecchatError
from .template import RENDER_CHARS, Exhausted, bounded_render

_SENTINEL = "\ue000specchat-{}\ue001"
_SENTINEL_RE = re.compile("\ue000specchat-(\\d+)\ue001")


class TemplateError(SpecchatError):
    """The chat template is missing or failed to render."""


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


def prompt_tokens(engine: Engine, messages: list[Message], *, use_template: bool = True) -> list[int]:
    """Token ids for the model to continue: the chat template with a generation prompt, or raw text."""
    if not use_template:
        text = "\n\n".join(m.content for m in messages)
        return engine.tokenize(text, add_special=True, parse_special=False)
    template = engine.chat_template()
    if not template:
        raise TemplateError(
            f"{engine.path.name} has no chat template (tokenizer.chat_template)",
            hint="use --no-template to send the prompt as plain text",
        )
    rendered = _render(
        engine, template, [{"role": m.role, "content": _SENTINEL.format(i)} for i, m in enumerate(messages)]
    )
    found = [int(i) for i in _SENTINEL_RE.findall(rendered)]
    if sorted(found) != list(range(len(messages))):
        # The template rewrites contents (rare): render the real text; user text is still plain text
        # to the tokenizer only where it does not spell a control token.
        rendered = _render(engine, template, [{"role": m.role, "content": m.content} for m in messages])
        return engine.tokenize(rendered, add_special=False, parse_special=True)
    tokens: list[int] = []
    for index, piece in enumerate(_SENTINEL_RE.split(rendered)):
        if index % 2 == 0:
            tokens += engine.tokenize(piece, add_special=False, parse_special=True) if piece else []
        else:
            tokens += engine.tokenize(messages[int(piece)].content, add_special=False, parse_special=False)
    return tokens


def _render(engine: Engine, template: str, messages: list[dict]) -> str:
    def special(token: int) -> str:
        return engine.token_text(token).decode("utf-8", errors="replace") if token >= 0 else ""

    # The fallback render holds the real message texts: they may be long, the template's own text is not.
    limit = RENDER_CHARS + 4 * sum(len(m["content"]) for m in messages)
    try:
        return bounded_render(template, messages, special(engine.eos), special(engine.bos), limit)
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
