"""A streamed reply of `specchat serve`: server-sent events fed by the generation, and its client leaving.

The generation runs in the engine's worker thread and hands pieces of text over through an asyncio queue; the
events go out as they come, the statistics in the last one. A client may leave at any point, mid-reply or just
before [DONE]: the job is then cancelled, and the request still gets exactly one console line. Apart from
serveapi.py, whose handlers start a stream here, as it is the one part of a request with its own lifetime.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse

from . import apireply, infill
from .infill import Infill
from .openai_api import ApiError
from .servequeue import Engine, Job

if TYPE_CHECKING:
    from .serveapi import Api


LEFT_QUEUED = "the client went away while queued"
CLIENT_CLOSED = 499  # the console's status for a request whose client left before its reply was out (as nginx logs it)


def stream_response(api: Api, request: Request, job: Job, chat: bool, include_usage: bool, infill=None) -> Response:
    """A reply streamed as server-sent events while the generation runs, its line written once it ends. infill: an
    /infill request's (infill.Infill), whose events are llama-server's own."""
    # The worker hands pieces over through an asyncio queue: it must never block on a slow client.
    loop, pieces = asyncio.get_running_loop(), asyncio.Queue()
    job.on_text = lambda text: loop.call_soon_threadsafe(pieces.put_nowait, text)
    task = api.start(job)
    task.add_done_callback(lambda _task: pieces.put_nowait(None))
    line = _Once(functools.partial(api.log, request))
    if infill is not None:
        events = _infill_events(api, line, task, pieces, infill)
    else:
        events = _events(api, line, task, pieces, chat, include_usage)
    # A stream that ends short of its own line (its client left, mid-reply or just before [DONE]) gets
    # it once the generation is over; the events are left suspended then, never to run on to theirs.

    def on_end(queued: bool) -> None:
        if queued:  # it never runs: its line is due now, not once the reply running before it has ended
            line(CLIENT_CLOSED, note=LEFT_QUEUED)
        task.add_done_callback(functools.partial(_log_left, line))

    leave = functools.partial(api.engine.leave, job)
    return _Stream(events, leave, on_end, media_type="text/event-stream", headers=STREAM_HEADERS)


async def _events(api: Api, line: _Once, task: asyncio.Task, pieces: asyncio.Queue, chat: bool, include_usage: bool):
    """Server-sent events: a chunk per piece of text, the statistics in the last one (and with
    stream_options.include_usage once more, in a chunk with no choices, as the API has it), then [DONE]."""
    rid, model = apireply.new_id("chatcmpl" if chat else "cmpl"), api.model
    created = int(time.time())  # one for every chunk of the stream, as the API has it
    chunk = functools.partial(apireply.chat_chunk if chat else apireply.completion_chunk, created=created)
    if chat:
        yield apireply.sse(chunk(rid, model, {"role": "assistant", "content": ""}))
    while (text := await pieces.get()) is not None:
        yield apireply.sse(chunk(rid, model, {"content": text} if chat else text))
    outcome, error = _finished(api, line, task)
    if error is not None:
        yield error
        return
    extra = apireply.extras(outcome.stats, api.mode, api.label, outcome.cached)
    # With include_usage the usage goes once, in its own chunk, as the API sends it: clients that add up
    # the usage of every chunk (LangChain's stream_usage) counted it twice when the last one had it too.
    last = {key: value for key, value in extra.items() if key != "usage"} if include_usage else extra
    yield apireply.sse(chunk(rid, model, {} if chat else "", apireply.finish_reason(outcome.stop_reason), last))
    if include_usage:
        yield apireply.sse(apireply.usage_chunk(rid, model, chat, extra, created=created))
    yield apireply.sse("[DONE]")
    line(200, outcome=outcome)


def _finished(api: Api, line: _Once, task: asyncio.Task):
    """(the generation's outcome, None), or (None, the error event) where it failed or the server shut down: the
    status line is sent already, so the error goes as an event."""
    try:
        outcome = task.result()
        api.check_shutdown(outcome)
    except ApiError as exc:
        line(exc.status, note=exc.message)
        return None, apireply.sse(exc.body())
    return outcome, None


async def _infill_events(api: Api, line: _Once, task: asyncio.Task, pieces: asyncio.Queue, request: Infill):
    """llama-server's /infill stream: {"content": piece, "stop": false} per piece, then its whole last object with
    "stop": true and the timings (no [DONE]: llama-server sends none outside its OpenAI routes)."""
    while (text := await pieces.get()) is not None:
        yield apireply.sse(infill.chunk(text))
    outcome, error = _finished(api, line, task)
    if error is not None:
        yield error
        return
    extra = apireply.extras(outcome.stats, api.mode, api.label, outcome.cached)
    last = infill.response(request, api.model, outcome.text, outcome.stats, outcome.stop_reason, outcome.cached,
                           extra, stream=True)  # fmt: skip
    yield apireply.sse(last)
    line(200, outcome=outcome)


def _log_left(line: _Once, task: asyncio.Task) -> None:
    """The line of a stream whose client left before its last event: 499 with what was generated, or the
    generation's own error (a failure is the server's, whoever was listening)."""
    error = None if task.cancelled() else task.exception()
    if isinstance(error, ApiError):
        line(error.status, note=error.message)
    elif task.cancelled() or error is not None:
        line(CLIENT_CLOSED, note="the client went away")
    else:
        line(CLIENT_CLOSED, outcome=task.result())


async def cancel_on_disconnect(request: Request, jobs: list[Job], engine: Engine) -> bool:
    """Cancel a non-streamed request's jobs (a batch's prompts) when its client leaves (a timeout, a retry):
    uvicorn does not cancel the handler, so the generation would run on to max_tokens, holding the queue for
    nobody. True where the first job was still queued (Engine.leave): none of them runs."""
    while (await request.receive())["type"] != "http.disconnect":
        pass  # the body was read already: the next message is the disconnect
    return engine.leave_all(jobs)


class _Once:
    """A request's console line, written by the first of the places that may write it."""

    def __init__(self, write: Callable[..., None]) -> None:
        self.write: Callable[..., None] | None = write

    def __call__(self, *args, **kwargs) -> None:
        write, self.write = self.write, None
        if write is not None:
            write(*args, **kwargs)


# A reverse proxy in front (nginx, as docs/serve.md suggests for TLS) buffers a response by default, and the
# client would see the whole reply at its end: these ask every cache and proxy on the way to pass it on as sent.
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class _Stream(StreamingResponse):
    """A streamed reply whose job is cancelled however the response ends (a client that disconnects
    may leave the body generator suspended rather than closed); on_end runs after that."""

    def __init__(self, content, leave: Callable[[], bool], on_end: Callable[[bool], None], **kwargs) -> None:
        super().__init__(content, **kwargs)
        self.leave, self.on_end = leave, on_end  # on_end(queued): leave()'s answer

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except ClientDisconnect:
            pass  # an ordinary event for a server: not an error to log
        finally:
            self.on_end(self.leave())
