"""How big a chat template's value, or the result of an operation on it, will be: estimated before the
operation runs, so template.py's renderer can refuse one that would pass its size limit without making it.
"""

from __future__ import annotations

import re
import string
from collections.abc import Collection, Mapping
from typing import Any

from jinja2.utils import Namespace

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?")


def printed_size(value: Any, limit: int) -> int:
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


def percent_extra(fmt: str, args: Any) -> int:
    """Characters that `fmt % args` adds beyond its operands: widths and precisions ('*' takes an int)."""
    ints = [abs(a) for a in (args if isinstance(args, tuple) else (args,)) if isinstance(a, int)]
    extra = 0
    for match in _PERCENT_SPEC.finditer(fmt):
        for number in match.groups():
            extra += max(ints, default=0) if number == "*" else int(number or 0)
    return extra


def format_extra(fmt: str, args: tuple, kwargs: dict) -> int:
    """Characters that `fmt.format(...)` adds beyond its operands: widths, including nested ones."""
    extra = 0
    for _literal, _field, spec, _conversion in string.Formatter().parse(fmt):
        extra += sum(int(n) for n in re.findall(r"\d+", spec or ""))
        if spec and "{" in spec:  # a width taken from the arguments
            extra += sum(abs(a) for a in (*args, *kwargs.values()) if isinstance(a, int))
    return extra


def int_bits(operator: str, left: Any, right: Any) -> int:
    """Bits of an integer product or power before computing it (0 for anything else)."""
    if not (isinstance(left, int) and isinstance(right, int)):
        return 0
    if operator == "*":
        return left.bit_length() + right.bit_length()
    return left.bit_length() * right if operator == "**" and right > 0 else 0


def binop_size(operator: str, left: Any, right: Any) -> int:
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
        return len(left) + percent_extra(left, right)
    return 0


def str_method_size(text: str, method: str, args: tuple, kwargs: dict) -> int:
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


def filter_size(name: str, value: Any = None, *args: Any, **kwargs: Any) -> int:
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
        return len(value) + percent_extra(value, args or tuple(kwargs.values()))
    if name in ("batch", "slice") and isinstance(first, int):
        return first
    start = kwargs.get("start", args[1] if len(args) > 1 else 0)
    if name == "sum" and isinstance(value, Collection) and not isinstance(start, int | float):
        return len(value) * len(value)  # list + list + ...: every step copies all so far
    return 0


def lipsum_size(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> int:
    """lipsum()'s output bound: n paragraphs of at most `max` words (its own parameter names, for keywords)."""
    return int(n) * int(max) * 16
