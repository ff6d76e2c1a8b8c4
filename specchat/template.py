"""Rendering third-party chat templates with bounded time and size.

Templates come from third-party GGUFs and overlays. jinja2's sandbox stops code execution but not work:
two nested range(100000) loops run for hours, `'a' * 10**9` takes a gigabyte, a list that holds itself
twice, 40 levels deep, prints 2**40 items. So every loop step, call, attribute access and output chunk
checks a deadline, and every operation that can make a value much bigger than its inputs (*, +, %, **,
~, str.format, the widening filters and str methods) is sized before it runs.
"""

from __future__ import annotations

import functools
import json
import re
import string
import time
from collections.abc import Collection, Mapping
from typing import Any

from jinja2 import BaseLoader, nodes
from jinja2.defaults import DEFAULT_NAMESPACE
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace, _PassArg, generate_lorem_ipsum
from jinja2.visitor import NodeTransformer

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
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?")


class Refused(ValueError):
    """The template's own raise_exception(): it refuses these messages (a system role, turns that do not
    alternate), which is the messages' fault, not the template's."""


class Exhausted(Exception):
    """A template ran past its time or size budget; the message completes "the chat template of X ..."."""


def _size(value: Any, limit: int) -> int:
    """Characters or items `value` becomes when printed, counting a shared part each time it appears;
    stops counting past `limit`. Containers are walked once each (memo), so a deep DAG costs little."""
    if isinstance(value, str | range):  # the common case, without the walk's set-up
        return len(value)
    if not isinstance(value, Mapping | Collection | Namespace):
        return 1
    memo: dict[int, int] = {}

    def walk(item: Any) -> int:
        if isinstance(item, str | range):
            return len(item)
        if isinstance(item, Namespace):  # prints its attributes
            item = object.__getattribute__(item, "_Namespace__attrs")
        if isinstance(item, Mapping):
            children = [*item.keys(), *item.values()]
        elif isinstance(item, Collection):
            children = item
        else:
            return 1
        if id(item) in memo:
            return memo[id(item)]
        memo[id(item)] = 1  # a cycle prints as [...]
        total = 1
        for child in children:
            total += walk(child)
            if total > limit:
                break
        memo[id(item)] = total
        return total

    return walk(value)


def _percent_extra(fmt: str, args: Any) -> int:
    """Characters that `fmt % args` adds beyond its operands: widths and precisions ('*' takes an int)."""
    ints = [abs(a) for a in (args if isinstance(args, tuple) else (args,)) if isinstance(a, int)]
    extra = 0
    for match in _PERCENT_SPEC.finditer(fmt):
        for number in match.groups():
            extra += max(ints, default=0) if number == "*" else int(number or 0)
    return extra


def _format_extra(fmt: str, args: tuple, kwargs: dict) -> int:
    """Characters that `fmt.format(...)` adds beyond its operands: widths, including nested ones."""
    extra = 0
    for _literal, _field, spec, _conversion in string.Formatter().parse(fmt):
        extra += sum(int(n) for n in re.findall(r"\d+", spec or ""))
        if spec and "{" in spec:  # a width taken from the arguments
            extra += sum(abs(a) for a in (*args, *kwargs.values()) if isinstance(a, int))
    return extra


def _int_bits(operator: str, left: Any, right: Any) -> int:
    """Bits of an integer product or power before computing it (0 for anything else)."""
    if not (isinstance(left, int) and isinstance(right, int)):
        return 0
    if operator == "*":
        return left.bit_length() + right.bit_length()
    return left.bit_length() * right if operator == "**" and right > 0 else 0


def _binop_size(operator: str, left: Any, right: Any) -> int:
    """The size of `left <operator> right` before computing it, in characters or items."""
    sequences = (str, list, tuple)
    if operator == "*":
        if isinstance(left, int) and isinstance(right, sequences):
            left, right = right, left
        if isinstance(left, sequences) and isinstance(right, int):
            return len(left) * right
    if operator == "+" and isinstance(left, sequences) and isinstance(right, sequences):
        return len(left) + len(right)
    if operator == "%" and isinstance(left, str):
        return len(left) + _percent_extra(left, right)
    return 0


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
            self.check(_size(value, self.limit))

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
            self.check(_str_method_size(obj.__self__, obj.__name__, args, kwargs))
        elif obj is generate_lorem_ipsum:
            self.check(_lipsum_size(*args, **kwargs))
        return self._result(super().call(context, obj, *args, **kwargs))

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        self.tick()
        self.check_values((left, right))  # '%s' % a_shared_list prints the whole expansion
        self.check(_binop_size(operator, left, right))
        if _int_bits(operator, left, right) > MAX_INT_BITS:
            raise Exhausted(f"made a number of more than {MAX_INT_BITS:,} bits while rendering")
        return self._result(super().call_binop(context, operator, left, right))

    def wrap_str_format(self, value: Any):
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        fmt = value.__self__

        def bounded(*args: Any, **kwargs: Any) -> str:
            self.check_values((*args, *kwargs.values()))
            self.check(len(fmt) + _format_extra(fmt, args, kwargs))
            return wrapper(*args, **kwargs)

        return bounded

    # -- values
    def _result(self, value: Any) -> Any:
        if isinstance(value, str | list | tuple | dict):
            self.check(len(value))
        return value

    def _sized(self, value: Any) -> Any:
        """`finalize`: every {{ value }} is sized before it is turned into text."""
        self.check(_size(value, self.limit))
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
            self.check(_filter_size(name, *args[skip:], **kwargs))
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
        self.check(sum(_size(part, self.limit) for part in parts))
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


def _str_method_size(text: str, method: str, args: tuple, kwargs: dict) -> int:
    """What a widening str method returns, in characters, before it runs."""
    arg = args[0] if args else None
    if method in ("center", "ljust", "rjust", "zfill") and isinstance(arg, int):
        return max(len(text), arg)
    if method == "expandtabs":
        tab = arg if isinstance(arg, int) else kwargs.get("tabsize", 8)
        return len(text) + text.count("\t") * max(int(tab), 0)
    if method == "replace" and len(args) >= 2 and all(isinstance(a, str) for a in args[:2]):
        hits = len(text) + 1 if not args[0] else text.count(args[0])
        return len(text) + hits * len(args[1])
    if method == "join" and isinstance(arg, list):  # the items themselves were sized as arguments
        return len(text) * len(arg)
    if method == "translate" and isinstance(arg, Mapping):
        widest = max((len(v) for v in arg.values() if isinstance(v, str)), default=1)
        return len(text) * widest
    return len(text)


def _filter_size(name: str, value: Any = None, *args: Any, **kwargs: Any) -> int:
    """What a widening filter returns, in characters or items, before it runs (0: not a widening one)."""
    first = args[0] if args else None
    if name == "center":
        return max(len(str(value)), int(first if first is not None else kwargs.get("width", 80)))
    if name == "indent":
        width = first if first is not None else kwargs.get("width", 4)
        width = len(width) if isinstance(width, str) else int(width)
        return len(str(value)) + (str(value).count("\n") + 1) * width
    if name == "replace" and len(args) >= 2:
        text, old = str(value), str(args[0])
        return len(text) + (text.count(old) if old else len(text) + 1) * len(str(args[1]))
    if name == "join" and isinstance(value, Collection):  # the items themselves were sized as arguments
        separator = str(first if first is not None else kwargs.get("d", ""))
        return len(separator) * len(value)
    if name == "format" and isinstance(value, str):
        return len(value) + _percent_extra(value, args or tuple(kwargs.values()))
    if name in ("batch", "slice") and isinstance(first, int):
        return first
    start = kwargs.get("start", args[1] if len(args) > 1 else 0)
    if name == "sum" and isinstance(value, Collection) and not isinstance(start, int | float):
        return len(value) * len(value)  # list + list + ...: every step copies all so far
    return 0


def _lipsum_size(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> int:
    """lipsum()'s output bound: n paragraphs of at most `max` words (its own parameter names, for keywords)."""
    return int(n) * int(max) * 16
