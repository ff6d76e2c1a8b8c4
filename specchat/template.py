"""Rendering third-party chat templates with bounded time and size.

Templates come from third-party GGUFs and overlays. jinja2's sandbox stops code execution but not work:
two nested range(100000) loops run for hours, `'a' * 10**9` takes a gigabyte, a list that holds itself
twice, 40 levels deep, prints 2**40 items. So every loop step, call, attribute access and output chunk
checks a deadline, and every operation that can make a value much bigger than its inputs (*, +, %, **,
~, str.format, the widening filters and str methods) is sized before it runs (templatesize.py).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Collection, Mapping
from typing import Any

from jinja2 import BaseLoader, nodes
from jinja2.defaults import DEFAULT_NAMESPACE
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import _PassArg, generate_lorem_ipsum
from jinja2.visitor import NodeTransformer

from .templatesize import binop_size, filter_size, format_extra, int_bits, lipsum_size, printed_size, str_method_size

# The names a template reads that the renderer sets itself (bounded_render's own variables, jinja2's globals, and
# `self`, which jinja2 sets over any variable of that name): an API client's chat_template_kwargs may not set them.
RESERVED = (
    "messages", "eos_token", "bos_token", "raise_exception", "add_generation_prompt", "functions", "function_call",
    "tools", "tool_choice", "strftime_now", *DEFAULT_NAMESPACE, "self",
)  # fmt: skip


def bounded_render(
    template: str, messages: list[dict], eos: str, bos: str, limit: int, extra: Mapping[str, Any] | None = None
) -> str:
    """What llama-cpp-python's Jinja2ChatFormatter renders, within RENDER_SECONDS and `limit` characters.
    extra: more variables for the template (a request's chat_template_kwargs, such as enable_thinking); none of
    them is one of RESERVED, which the caller checks (they are set under the renderer's own in any case)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    def raise_exception(message: str):
        raise Refused(message)

    env = _BoundedEnvironment(limit, RENDER_SECONDS)
    variables = {
        **(extra or {}),
        "messages": messages,
        "eos_token": eos,
        "bos_token": bos,
        "raise_exception": raise_exception,
        "add_generation_prompt": True,
        "functions": None,
        "function_call": None,
        "tools": None,
        "tool_choice": None,
        "strftime_now": Jinja2ChatFormatter.strftime_now,
    }
    chunks, size = [], 0
    for chunk in env.compile_bounded(template).generate(variables):  # a dict: a key "self" is no argument
        size += len(chunk)
        env.check(size)
        env.tick()
        chunks.append(chunk)
    return "".join(chunks)


RENDER_SECONDS = 5.0
RENDER_CHARS = 1_000_000  # far above any real prompt's template text
MAX_INT_BITS = 100_000  # bigger numbers only come from loops of multiplications, each slower than the last
MAX_JSON_INDENT = 64


class Refused(ValueError):
    """The template's own raise_exception(): it refuses these messages (a system role, turns that do not
    alternate), which is the messages' fault, not the template's."""


class Exhausted(Exception):
    """A template ran past its time or size budget; the message completes "the chat template of X ..."."""


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    """llama-cpp-python's chat-template environment (same options, extensions and tojson output) with
    a deadline and a size limit on every value it makes."""

    intercepted_binops = frozenset({"*", "+", "%", "**"})  # also keeps jinja2 from folding them at compile time

    def __init__(self, limit: int, seconds: float) -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        generation = getattr(Jinja2ChatFormatter, "IgnoreGenerationTags", None)
        extensions = [e for e in (generation, "jinja2.ext.loopcontrols") if e is not None]
        super().__init__(
            loader=BaseLoader(), trim_blocks=True, lstrip_blocks=True, extensions=extensions, finalize=self._sized
        )
        self.limit, self.seconds = limit, seconds
        self.deadline = time.monotonic() + seconds
        self.filters = {name: self._guarded(name, f) for name, f in self.filters.items()}
        self.filters.update(tojson=self._tojson, specchat_loop=self._loop, specchat_concat=self._concat)

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise Exhausted(f"took longer than {self.seconds:g} s to render")

    def check(self, size: int) -> None:
        if size > self.limit:
            raise Exhausted(f"grew past {self.limit / 1e6:.3g} MB while rendering")

    def check_values(self, values) -> None:
        for value in values:
            self.check(printed_size(value, self.limit))

    def compile_bounded(self, source: str):
        tree = self.parse(source)
        tree = _Guards().visit(tree)
        tree.set_environment(self)
        return self.from_string(tree)

    # -- the sandbox's hooks: every attribute, item, call and intercepted operator passes here
    def getattr(self, obj: Any, attribute: str) -> Any:
        self.tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.tick()
        return super().getitem(obj, argument)

    def call(self, context, obj, /, *args: Any, **kwargs: Any) -> Any:
        self.tick()
        self.check_values((*args, *kwargs.values()))
        if isinstance(getattr(obj, "__self__", None), str):
            if obj.__name__ == "join":  # a generator would be used up by the estimate
                args = (list(args[0]), *args[1:]) if args else args
            self.check(str_method_size(obj.__self__, obj.__name__, args, kwargs))
        elif obj is generate_lorem_ipsum:
            self.check(lipsum_size(*args, **kwargs))
        return self._result(super().call(context, obj, *args, **kwargs))

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        self.tick()
        self.check_values((left, right))  # '%s' % a_shared_list prints the whole expansion
        self.check(binop_size(operator, left, right))
        if int_bits(operator, left, right) > MAX_INT_BITS:
            raise Exhausted(f"made a number of more than {MAX_INT_BITS:,} bits while rendering")
        return self._result(super().call_binop(context, operator, left, right))

    def wrap_str_format(self, value: Any):
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        fmt = value.__self__

        def bounded(*args: Any, **kwargs: Any) -> str:
            self.check_values((*args, *kwargs.values()))
            self.check(len(fmt) + format_extra(fmt, args, kwargs))
            return wrapper(*args, **kwargs)

        return bounded

    # -- values
    def _result(self, value: Any) -> Any:
        if isinstance(value, str | list | tuple | dict):
            self.check(len(value))
        return value

    def _sized(self, value: Any) -> Any:
        """`finalize`: every {{ value }} is sized before it is turned into text."""
        self.check(printed_size(value, self.limit))
        return value

    def _guarded(self, name: str, func):
        skip = 1 if _PassArg.from_obj(func) is not None else 0  # context/environment come first

        @functools.wraps(func)  # keeps jinja_pass_arg
        def guarded(*args: Any, **kwargs: Any) -> Any:
            self.tick()
            args = list(args)
            if name in ("join", "sum") and len(args) > skip and not isinstance(args[skip], Collection):
                args[skip] = list(args[skip])  # a generator would be used up by the estimate
            self.check_values((*args[skip:], *kwargs.values()))
            self.check(filter_size(name, *args[skip:], **kwargs))
            return self._result(func(*args, **kwargs))

        return guarded

    def _tojson(self, x: Any, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
        """Jinja2ChatFormatter.tojson (json.dumps), encoded piece by piece so the size is checked as it grows."""
        if (len(indent) if isinstance(indent, str) else int(indent or 0)) > MAX_JSON_INDENT:
            raise Exhausted(f"asked for a JSON indent wider than {MAX_JSON_INDENT}")
        encoder = json.JSONEncoder(ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
        self.check_values((x,))
        pieces, size = [], 0
        for piece in encoder.iterencode(x):
            size += len(piece)
            self.check(size)
            pieces.append(piece)
        return "".join(pieces)

    def _loop(self, iterable: Any):
        """Wraps every {% for %}'s iterable: a loop with an empty body still meets the deadline."""
        for item in iterable:
            self.tick()
            yield item

    def _concat(self, parts: list) -> str:
        """The `~` operator (jinja2's str_join) with its result sized first."""
        self.tick()
        self.check(sum(printed_size(part, self.limit) for part in parts))
        return "".join(map(str, parts))


class _Guards(NodeTransformer):
    """Routes every for loop's iterable and every `~` through the environment's checks."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        node = self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, "specchat_loop", [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        node = self.generic_visit(node)
        items = nodes.List(node.nodes, lineno=node.lineno)
        return nodes.Filter(items, "specchat_concat", [], [], None, None, lineno=node.lineno)
