"""Which web pages may call `specchat serve` (CORS): pages on this machine, and the origins given with
--allow-origin / SPECCHAT_ALLOW_ORIGINS. Starlette's CORSMiddleware answers the browsers' preflights; on
top of it, a request that a browser sent from any other origin is refused before it reaches a route. A
"simple" cross-origin POST (text/plain, no preflight) would otherwise start a generation whose answer
the page cannot read, and a page that rebinds its own name to 127.0.0.1 sends its own origin too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .errors import UsageError
from .openai_api import ApiError

LOCAL_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"  # web pages on this machine, any port: allowed
# What a page may send: the key and JSON, and the headers the official JavaScript client adds (as Ollama allows):
# its User-Agent (in the preflight where a browser lets a page set it: Firefox) and, from .stream(), Helper-Method.
CORS_HEADERS = ["Authorization", "Content-Type", "User-Agent"] + [
    f"X-Stainless-{name}"
    for name in (
        "Lang", "Package-Version", "OS", "Arch", "Runtime", "Runtime-Version", "Retry-Count", "Timeout", "Helper-Method"
    )
]  # fmt: skip
# What a page may read beside CORS's simple response headers: a 503's Retry-After, which says when to come back.
EXPOSE_HEADERS = ["Retry-After"]
ENV = "SPECCHAT_ALLOW_ORIGINS"
ORIGIN_HINT = "an origin is scheme://host[:port] as a browser sends it, no path: https://chat.example.com; * for any"


def parse_origins(values: Iterable[str], from_env: bool = False) -> tuple[str, ...]:
    """--allow-origin's values (each may hold several, comma-separated, as SPECCHAT_ALLOW_ORIGINS does) as a
    browser's Origin header has them: lower case, no default port; else they would never match. A value that
    names none (`--allow-origin "$ORIGIN"` with the variable unset) is an error, not a silent no-op.
    from_env: the values are SPECCHAT_ALLOW_ORIGINS's, which Click splits at whitespace ("a, b" comes as "a," and
    "b", where "a," is no empty item): read again as the one value it was, origins apart by commas or spaces."""
    given_as = f"{ENV}:" if from_env else "--allow-origin"
    origins = []
    for value in [" ".join(values)] if from_env else values:
        parts = _items(value, given_as, from_env)
        if not parts:
            raise UsageError(f"{given_as} {value!r} names no origin", hint=ORIGIN_HINT)
        origins += [_origin(part, given_as) for part in parts]
    return tuple(origins)


def _items(value: str, given_as: str, from_env: bool) -> list[str]:
    """A value's origins. An empty item (`a,,b`, a trailing comma) was dropped without a word, as if the list had
    been typed without it: a slip that left out an origin (its page then refused with a 403). As bench's --ks."""
    parts = [part.strip() for part in value.split(",")]
    items = [origin for part in parts for origin in (part.split() if from_env else [part]) if origin]
    if items and not all(parts):
        where = "at the end" if not parts[-1] else "at the start" if not parts[0] else "between two commas"
        meant = f"{ENV}={','.join(items)}" if from_env else f"--allow-origin {','.join(items)}"
        raise UsageError(
            f"{given_as} {value!r} has an empty item ({where})",
            hint=f"separate the origins with single commas: {meant}",
        )
    return items


def _origin(text: str, given_as: str) -> str:
    if text == "*":
        return text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:  # an unclosed [IPv6 address, a port that is no number or beyond 65535
        parts = port = None
    if parts is None or "://" not in text or not parts.hostname or any(
        (parts.path, parts.query, parts.fragment, parts.username, parts.password)
    ):  # fmt: skip
        raise UsageError(f"{given_as} {text} is not an origin", hint=ORIGIN_HINT)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def middleware(allow_origins: tuple[str, ...], log: Callable[..., None]) -> Middleware:
    return Middleware(
        _Cors, log=log, allow_origins=allow_origins, allow_origin_regex=LOCAL_ORIGINS,
        allow_methods=["GET", "POST", "OPTIONS"], allow_headers=CORS_HEADERS, expose_headers=EXPOSE_HEADERS,
        allow_private_network=True,
    )  # fmt: skip


class _Cors(CORSMiddleware):
    """Starlette's CORS, with a console line for each preflight (it never reaches the routes, nor needs the
    key, which browsers do not send with it: a refused one is why a web page cannot call the server), and
    a refusal for requests from origins that are not allowed."""

    def __init__(self, app, log: Callable[..., None], **options) -> None:
        super().__init__(app, **options)
        self.log = log

    async def __call__(self, scope, receive, send) -> None:
        headers = Headers(scope=scope) if scope["type"] == "http" else Headers()  # lifespan comes through too
        origin = headers.get("origin")
        if origin is None:  # not sent by a browser's page (curl, the SDKs): CORS has nothing to say
            await super().__call__(scope, receive, send)
            return
        allowed = self.is_allowed_origin(origin)
        if scope.get("method") == "OPTIONS" and "access-control-request-method" in headers:
            response = self.preflight_response(request_headers=headers)
            note = f"preflight from {origin}"
            if response.status_code != 200:
                reason = f"{bytes(response.body).decode()}{self._refused_headers(headers)}"
                note = f"{note}: {reason}" + ("" if allowed else _unlock(origin))
                response = _as_error(response, reason)
        elif allowed:
            await super().__call__(scope, receive, send)
            return
        else:
            refused = ApiError(403, f"requests from web pages at {origin} are not allowed", code="origin_not_allowed")
            response, note = JSONResponse(refused.body(), status_code=refused.status), refused.message + _unlock(origin)
        self.log(Request(scope), response.status_code, note=note)
        await response(scope, receive, send)

    def _refused_headers(self, headers: Headers) -> str:
        """Which of the headers a page asked to send are not allowed: Starlette's line says only "headers"."""
        asked = (name.strip() for name in headers.get("access-control-request-headers", "").split(","))
        refused = [name for name in asked if name and name.lower() not in self.allow_headers]
        return f" ({', '.join(refused)})" if refused else ""


def _as_error(refusal: Response, reason: str) -> JSONResponse:
    """Starlette's refused preflight (plain text "Disallowed CORS origin") as an OpenAI error object, as every
    other refusal is, with its CORS headers (Vary, the allowed methods and headers) kept."""
    error = ApiError(refusal.status_code, f"CORS preflight refused: {reason}", code="cors_preflight_refused")
    kept = {key: value for key, value in refusal.headers.items() if key not in ("content-length", "content-type")}
    return JSONResponse(error.body(), status_code=refusal.status_code, headers=kept)


def _unlock(origin: str) -> str:
    """What would let the page in, for the console: the --allow-origin that would match it, where one would."""
    if origin == "null":
        return " (a page opened from a file or in a sandboxed frame: serve it from http://localhost instead)"
    try:
        matches = parse_origins([origin]) == (origin,)
    except UsageError:
        matches = False
    return f" (`specchat serve --allow-origin {origin}` allows it)" if matches else ""
