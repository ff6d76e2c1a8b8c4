"""What a request to `specchat serve` passes before it waits for the engine (serveapi.py): its API key, its
JSON body (read no further than --max-body, and not waited for past a shutdown) and its prompts, measured
against the context. Each failure is an ApiError.
"""

from __future__ import annotations

import asyncio
import hmac

from starlette.requests import ClientDisconnect, Request

from . import openai_api
from .ctxsize import shorten_hint
from .errors import ContextFullError
from .openai_api import ApiError
from .serveerrors import as_api_errors, name_prompt
from .servequeue import Engine, Job
from .servestream import CLIENT_CLOSED


def authorize(request: Request, key: str | None) -> None:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    # The scheme is case-insensitive (RFC 9110: "bearer" and "BEARER" are the same); the key is not.
    # compare_digest: the time taken must not tell how much of a guessed key was right.
    if key and not (scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), key.encode())):
        raise ApiError(401, "missing or wrong API key (Authorization: Bearer KEY)", "authentication_error",
                       "invalid_api_key")  # fmt: skip


async def read_body(request: Request, limit: int, closing: asyncio.Event) -> dict:
    """The JSON body, read no further than limit bytes (Content-Length may be absent or lie); closing is set
    when the server shuts down."""
    # A length declared over the limit is refused before any of the body is read: read first, the 413 came
    # once 1 MB had arrived, and a client that declared more but sent little waited for it until it gave up.
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:  # isdigit() alone takes "²"
        raise ApiError(413, f"the body is larger than {limit} bytes (Content-Length {declared})",
                       code="body_too_large")  # fmt: skip
    # Raced against stop_all(): a body still coming at the end of a shutdown's grace was cancelled by uvicorn
    # a second later, with a traceback on the console and a plain-text 500 for the client.
    reading, stopped = asyncio.ensure_future(_read(request, limit)), asyncio.ensure_future(closing.wait())
    try:
        await asyncio.wait((reading, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        reading.cancel()  # no-ops where done
        stopped.cancel()
    if not reading.done() or reading.cancelled():
        raise ApiError(503, "the server shut down before the request's body had come", "server_error",
                       "shutting_down")  # fmt: skip
    return openai_api.parse_json(reading.result())


async def _read(request: Request, limit: int) -> bytes:
    data = bytearray()
    try:
        async for chunk in request.stream():
            data += chunk
            if len(data) > limit:
                raise ApiError(413, f"the body is larger than {limit} bytes", code="body_too_large")
    except ClientDisconnect:
        raise ApiError(CLIENT_CLOSED, "the client went away while sending", code="client_disconnected") from None
    return bytes(data)


async def measure_all(engine: Engine, jobs: list[Job], trained: int | None) -> None:
    """Every prompt is measured before any runs; a batch's refusal names the prompt's place in it. trained: the
    context the model was trained for (None where its file does not say)."""
    for i, job in enumerate(jobs):
        try:
            await _measure(engine, job, trained)
        except ApiError as exc:
            if len(jobs) > 1:
                name_prompt(exc, i)
            raise


async def _measure(engine: Engine, job: Job, trained: int | None) -> None:
    """The prompt's tokens, checked against the context before the request waits for the engine or
    gets a status line (a streamed one's would already say 200 when the loop refused it)."""
    field = "prompt" if job.messages is None else "messages"
    with as_api_errors(field):
        try:
            await engine.measure(job)
        except ContextFullError as exc:  # job.ids are set: measured, then found too long
            # No --ctx holds a prompt as long as the model was trained for (as `run` says it)
            if (hint := shorten_hint(len(job.ids), trained, f"the {field}")) is None:
                raise
            raise ApiError(400, f"{exc.message}; {hint}", code="context_length_exceeded", param=field) from None
