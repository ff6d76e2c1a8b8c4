"""stdout's and stderr's encoding: a character it cannot hold is written as '?' (a byte of a path as that byte),
set up once by main (app.py) before anything is written."""

from __future__ import annotations

import codecs
import sys
from contextlib import suppress


def replace_what_cannot_be_written() -> None:
    """A character stdout's or stderr's encoding cannot hold (LANG=C with PYTHONIOENCODING=ascii; a redirected
    stdout in cp1252 on Windows, and an emoji) is written as '?': it was an internal error that cut the reply."""
    codecs.register_error("specchat-replace", _byte_or_question_mark)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and _fails_to_write(stream) and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="specchat-replace")


def _byte_or_question_mark(exc: UnicodeError) -> tuple[bytes, int]:
    """'surrogateescape' where a character stands for a byte (of a path in argv, where the locale is not
    UTF-8: `export` prints a command the shell runs, which needs the file's own name), '?' elsewhere."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start : exc.end]
    return b"".join(bytes([ord(c) - 0xDC00]) if 0xDC80 <= ord(c) <= 0xDCFF else b"?" for c in text), exc.end


def _fails_to_write(stream) -> bool:
    """Whether the stream raises on a character its encoding lacks. LC_ALL=C with PYTHONUTF8=0 gives an ASCII
    stdout whose 'surrogateescape' fails on any other character too; on UTF-8 it fails on none of a reply's."""
    errors = getattr(stream, "errors", None)
    if errors == "surrogateescape":
        with suppress(LookupError, TypeError):
            return codecs.lookup(getattr(stream, "encoding", None)).name != "utf-8"
    return errors == "strict"
