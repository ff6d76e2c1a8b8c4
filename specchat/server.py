"""`specchat serve`: the loaded pipeline behind an OpenAI-compatible HTTP API (Starlette on uvicorn).

Routes: POST /v1/chat/completions and /v1/completions (plain or streamed as server-sent events),
GET /v1/models and /v1/models/{id}, GET /health, each with a trailing slash too. Every failure a client
causes is an OpenAI error object with a status; the server itself stays up. The console shows one line
per request. Web pages may call it from this machine's origins and from --allow-origin's (CORS).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import hmac
import ipaddress
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from rich.console import Console
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from . import cors, modes, openai_api
from .chat import Message, MessagesRefused
from .errors import ContextFullError, SpecchatError, UsageError
from .openai_api import ApiError, ApiRequest
from .outputs import Request as Ask
from .paths import path_text
from .runtime import Pipeline
from .servelog import ServerLog
from .servequeue import Engine, Job, Outcome, QueueFull
from .view import n_tokens, one_line

BACKLOG = 2048  # connections queued before they are accepted (uvicorn's default)
GRACEFUL_S = 5  # on Ctrl-C uvicorn waits this long for running requests, then cancels them (a traceback each)
STOP_AFTER_S = 4  # ...so requests still running by then are stopped at the next round, and end by themselves
CLIENT_CLOSED = 499  # the console's status for a request whose client left before its reply was out (as nginx logs it)
# A 503's Retry-After, in seconds. A queue place frees when the running reply ends, seconds to a minute on a CPU:
# the official `openai` client waits this long before each of its two retries, which it made after about 0.5 s and 1 s
# without it, into the same full queue. Small, as it is a guess: a server restarted after a shutdown's 503 is back
# once its models are loaded, and a client that waits longer than it needs to is slower for nothing.
RETRY_AFTER_S = 5


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    mode: str = "auto"
    k: int | None = None  # None: the mode's default
    api_key: str | None = None
    max_queue: int = 8  # requests that may wait behind the running one
    max_tokens: int = 2048  # the most any request may generate (larger asks are held to it)
    max_body: int = 1_000_000  # bytes; the same bound run puts on a prompt
    no_log: bool = False  # True: requests are not written to the conversation log
    allow_origins: tuple[str, ...] = ()  # web pages that may call the API beside this machine's (parse_origins)


def check_host(host: str, api_key: str | None) -> None:
    """Refuse to listen beyond this machine without a key: the API runs arbitrary prompts on its CPU/GPU."""
    if not host.strip():  # the socket would take "" for every interface, and print http://:PORT/v1
        raise UsageError("--host is empty", hint="give 127.0.0.1 (this machine) or 0.0.0.0 (every interface)")
    # `--api-key "$KEY"` with KEY unset asked for a key and served without one; spaces around a key are trimmed
    # off the client's header (HTTP does), so no client could ever send it.
    if api_key is not None and not api_key.strip():
        hint = 'give a key (--api-key "$(openssl rand -hex 16)"), or leave it out for none'
        raise UsageError("--api-key (or SPECCHAT_API_KEY) is empty", hint=hint)
    if api_key is not None and api_key != api_key.strip():
        raise UsageError("--api-key (or SPECCHAT_API_KEY) starts or ends with a space, which no client can send",
                         hint="give the key without them")  # fmt: skip
    if api_key or _is_loopback(host):
        return
    raise UsageError(
        f"--host {host} would accept requests from other machines without a key",
        hint="add --api-key KEY (clients send Authorization: Bearer KEY), or keep the default 127.0.0.1",
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def model_id(pipeline: Pipeline) -> str:
    """The one model this server answers as: the pair's name, else the target file's name."""
    return pipeline.resolved.pair_name or path_text(pipeline.resolved.target.name)


def _created(target: Path) -> int:
    """/v1/models' `created`: when the target file was made (a client shows it as the model's date; 0 read
    as 1970), else now."""
    try:
        return int(target.stat().st_mtime)
    except OSError:
        return int(time.time())


class Api:
    """The route handlers, around one Engine; a handler returns a Response or raises ApiError."""

    def __init__(self, pipeline: Pipeline, config: ServeConfig, console: Console) -> None:
        self.pipeline, self.config, self.console = pipeline, config, console
        self.engine = Engine(pipeline, config.max_queue)
        self.history = ServerLog(pipeline, console, no_log=config.no_log)
        self.model = model_id(pipeline)
        self.mode = config.mode if pipeline.available(config.mode) else "target"
        self.k = modes.get(self.mode).length(config.k)
        self.label = modes.get(self.mode).describe(self.k)
        self.jobs: set[Job] = set()  # admitted and not finished: what stop_all() stops
        self.closing = False  # set by stop_all(): a cancelled job was cut by the shutdown, not by its client
        # Names a client may send for this model: its id, the pair, the target's file name and stem.
        target = path_text(pipeline.resolved.target.name)
        self.aliases = {self.model, target, target.removesuffix(".gguf"), pipeline.resolved.pair_name}
        self.created = _created(pipeline.resolved.target)

    def app(self) -> Starlette:
        # Also without /v1, as llama-server answers: a client given the base URL http://host:port finds them.
        routes = [
            route
            for prefix in ("/v1", "")
            for route in (
                *_slashed(f"{prefix}/chat/completions", self._wrap(self.chat), "POST"),
                *_slashed(f"{prefix}/completions", self._wrap(self.completions), "POST"),
                *_slashed(f"{prefix}/models", self._wrap(self.models), "GET"),
                # After /models/, which it would take as the model "": a path matches anything, a trailing slash
                # too (model_info drops it).
                Route(f"{prefix}/models/{{model:path}}", self._wrap(self.model_info), methods=["GET"]),
            )
        ] + _slashed("/health", self._wrap(self.health, auth=False), "GET")
        app = Starlette(
            routes=routes,
            middleware=[cors.middleware(self.config.allow_origins, self._log)],
            lifespan=self._lifespan,
            exception_handlers={HTTPException: self._http_error},
        )
        app.router.redirect_slashes = False  # a route is served, or it is a 404 error object: never a redirect
        return app

    async def _http_error(self, request: Request, exc: HTTPException) -> Response:
        """Starlette's own refusals (an unknown route 404, a wrong method 405) as OpenAI error objects too."""
        codes = {404: "not_found", 405: "method_not_allowed"}
        error = ApiError(
            exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", code=codes.get(exc.status_code)
        )
        self._log(request, exc.status_code, note=exc.detail)
        return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        yield
        self.engine.close()  # after uvicorn's graceful shutdown: the running generation has ended
        self.history.close()

    def _wrap(self, handler: Callable[[Request], Awaitable[Response]], auth: bool = True):
        """Authentication, error objects and the console line, the same for every route."""

        async def endpoint(request: Request) -> Response:
            try:
                if auth:
                    self._authorize(request)
                return await handler(request)
            except ApiError as exc:
                self._log(request, exc.status, note=exc.message)
                return _error_response(exc)
            except Exception as exc:  # a bug: this request fails with an error object, the server goes on
                error = ApiError(500, f"internal error: {type(exc).__name__}: {exc}", "server_error", "internal_error")
                self._log(request, 500, note=error.message)
                return _error_response(error)

        return endpoint

    def _authorize(self, request: Request) -> None:
        key = self.config.api_key
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        # The scheme is case-insensitive (RFC 9110: "bearer" and "BEARER" are the same); the key is not.
        # compare_digest: the time taken must not tell how much of a guessed key was right.
        if key and not (scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), key.encode())):
            raise ApiError(401, "missing or wrong API key (Authorization: Bearer KEY)", "authentication_error",
                           "invalid_api_key")  # fmt: skip

    async def health(self, _request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.model, "mode": self.mode, "busy": self.engine.waiting})

    async def models(self, request: Request) -> Response:
        self._log(request, 200)
        return JSONResponse({"object": "list", "data": [self._model_entry()]})

    async def model_info(self, request: Request) -> Response:
        """GET /v1/models/{id}: what the official client's `models.retrieve(id)` asks for."""
        self._check_model(request.path_params["model"].removesuffix("/"))  # /v1/models/ID/ is /v1/models/ID
        self._log(request, 200)
        return JSONResponse(self._model_entry())

    def _model_entry(self) -> dict:
        return {"id": self.model, "object": "model", "created": self.created, "owned_by": "specchat"}

    def _check_model(self, name: str) -> None:
        """A request may name the model by any of its aliases; another name is a 404."""
        if name not in self.aliases:
            raise ApiError(404, f"model '{name}' is not served here; this server has '{self.model}'",
                           code="model_not_found", param="model")  # fmt: skip

    async def chat(self, request: Request) -> Response:
        parsed = openai_api.parse_chat(await self._body(request), self.config.max_tokens)
        return await self._answer(request, parsed, chat=True)

    async def completions(self, request: Request) -> Response:
        parsed = openai_api.parse_completion(await self._body(request), self.config.max_tokens)
        return await self._answer(request, parsed, chat=False)

    async def _body(self, request: Request) -> dict:
        """The JSON body, read no further than max_body bytes (Content-Length may be absent or lie)."""
        limit, data = self.config.max_body, bytearray()
        # A length declared over the limit is refused before any of the body is read: read first, the 413 came
        # once 1 MB had arrived, and a client that declared more but sent little waited for it until it gave up.
        declared = request.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > limit:  # isdigit() alone takes "²"
            raise ApiError(413, f"the body is larger than {limit} bytes (Content-Length {declared})",
                           code="body_too_large")  # fmt: skip
        try:
            async for chunk in request.stream():
                data += chunk
                if len(data) > limit:
                    raise ApiError(413, f"the body is larger than {limit} bytes", code="body_too_large")
        except ClientDisconnect:
            raise ApiError(CLIENT_CLOSED, "the client went away while sending", code="client_disconnected") from None
        return openai_api.parse_json(bytes(data))

    async def _answer(self, request: Request, parsed: ApiRequest, *, chat: bool) -> Response:
        if parsed.model is not None:
            self._check_model(parsed.model)
        try:
            self.engine.admit()
        except QueueFull:
            busy = f"the server is busy: one request running, {self.config.max_queue} waiting (its --queue)"
            raise ApiError(503, busy, "server_error", "queue_full") from None
        ask = Ask(self.mode, self.k, parsed.params, parsed.max_tokens)
        job = Job(parsed.messages, parsed.prompt, ask, parsed.stop, parsed.prediction)
        try:  # before any status line: a prompt longer than the context is a 400, streamed or not
            await self._measure(job)
        except BaseException:
            self.engine.release()
            raise
        if parsed.stream:
            return self._stream_response(request, job, chat, parsed.include_usage)
        task = self._start(job)
        watcher = asyncio.ensure_future(_cancel_on_disconnect(request, job))
        try:
            outcome = await asyncio.shield(task)
        except asyncio.CancelledError:
            job.cancel()
            raise
        finally:
            watcher.cancel()
        self._check_shutdown(outcome)  # past it, a cancelled job is one whose client left
        self._log(request, CLIENT_CLOSED if outcome.stop_reason == "cancelled" else 200, outcome=outcome)
        build = openai_api.chat_response if chat else openai_api.completion_response
        reason = openai_api.finish_reason(outcome.stop_reason)
        extra = openai_api.extras(outcome.stats, self.mode, self.label, outcome.cached)
        return JSONResponse(build(openai_api.new_id("chatcmpl" if chat else "cmpl"), self.model, outcome.text,
                                  reason, extra))  # fmt: skip

    async def _measure(self, job: Job) -> None:
        """The prompt's tokens, checked against the context before the request waits for the engine or
        gets a status line (a streamed one's would already say 200 when the loop refused it)."""
        with _as_api_errors("prompt" if job.messages is None else "messages"):
            await self.engine.measure(job)

    def _start(self, job: Job) -> asyncio.Task:
        """The generation as a task; its queue place is given back when the worker is done with it,
        not when the client stops listening."""
        task = asyncio.ensure_future(self._run(job))
        self.jobs.add(job)

        def done(finished: asyncio.Task) -> None:
            self.engine.release()
            self.jobs.discard(job)
            if not finished.cancelled() and finished.exception() is None:  # retrieved: no warning if unread
                self.history.record(job, finished.result())

        task.add_done_callback(done)
        return task

    async def _run(self, job: Job) -> Outcome:
        """The generation, with the library's failures turned into error objects."""
        with _as_api_errors("prompt" if job.messages is None else "messages"):
            return await self.engine.run(job)

    def _stream_response(self, request: Request, job: Job, chat: bool, include_usage: bool) -> Response:
        # The worker hands pieces over through an asyncio queue: it must never block on a slow client.
        loop, pieces = asyncio.get_running_loop(), asyncio.Queue()
        job.on_text = lambda text: loop.call_soon_threadsafe(pieces.put_nowait, text)
        task = self._start(job)
        task.add_done_callback(lambda _task: pieces.put_nowait(None))
        line = _Once(functools.partial(self._log, request))
        events = self._events(line, task, pieces, chat, include_usage)
        # A stream that ends short of its own line (its client left, mid-reply or just before [DONE]) gets
        # it once the generation is over; the events are left suspended then, never to run on to theirs.
        on_end = functools.partial(task.add_done_callback, functools.partial(self._log_left, line))
        return _Stream(events, job, on_end, media_type="text/event-stream", headers=STREAM_HEADERS)

    async def _events(self, line: _Once, task: asyncio.Task, pieces: asyncio.Queue, chat: bool, include_usage: bool):
        """Server-sent events: a chunk per piece of text, the statistics in the last one (and with
        stream_options.include_usage once more, in a chunk with no choices, as the API has it), then [DONE]."""
        rid, model = openai_api.new_id("chatcmpl" if chat else "cmpl"), self.model
        chunk = openai_api.chat_chunk if chat else openai_api.completion_chunk
        if chat:
            yield openai_api.sse(chunk(rid, model, {"role": "assistant", "content": ""}))
        while (text := await pieces.get()) is not None:
            yield openai_api.sse(chunk(rid, model, {"content": text} if chat else text))
        try:
            outcome = task.result()
            self._check_shutdown(outcome)
        except ApiError as exc:  # the status line is sent already: the error goes as an event
            line(exc.status, note=exc.message)
            yield openai_api.sse(exc.body())
            return
        extra = openai_api.extras(outcome.stats, self.mode, self.label, outcome.cached)
        # With include_usage the usage goes once, in its own chunk, as the API sends it: clients that add up
        # the usage of every chunk (LangChain's stream_usage) counted it twice when the last one had it too.
        last = {key: value for key, value in extra.items() if key != "usage"} if include_usage else extra
        yield openai_api.sse(chunk(rid, model, {} if chat else "", openai_api.finish_reason(outcome.stop_reason), last))
        if include_usage:
            yield openai_api.sse(openai_api.usage_chunk(rid, model, chat, extra))
        yield openai_api.sse("[DONE]")
        line(200, outcome=outcome)

    def stop_all(self) -> None:
        """The server is shutting down: stop every job at its next round (queued ones never start)."""
        self.closing = True
        for job in self.jobs:
            job.cancel()

    def _check_shutdown(self, outcome: Outcome) -> None:
        """A reply cut by the shutdown is a 503, not a short text that looks complete."""
        if self.closing and outcome.stop_reason == "cancelled":
            raise ApiError(503, "the server shut down before the reply was complete", "server_error", "shutting_down")

    @staticmethod
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

    def _log(self, request: Request, status: int, *, outcome: Outcome | None = None, note: str = "") -> None:
        """One console line per request: what it cost and how much of the draft the target kept."""
        line = f"{request.method} {request.url.path} {status}"
        if outcome is not None:
            stats = outcome.stats
            line += (
                f"  {n_tokens(stats.generated)}, {stats.tokens_per_s:.1f} tok/s, accepted {stats.accepted}/"
                f"{stats.drafted} (rejected {stats.drafted - stats.accepted}), {self.label}, {outcome.stop_reason}"
            )
        elif note:
            line += f"  {note}"
        # what a client sent (a model name, a path) made harmless: a newline would start a line that reads as
        # another request's, an escape sequence would act on the terminal
        self.console.print(one_line(line), highlight=False, markup=False, soft_wrap=True)


def _slashed(path: str, endpoint: Callable[[Request], Awaitable[Response]], method: str) -> list[Route]:
    """The route at its path and with a trailing slash: Starlette answered that one with a 307 redirect, which
    many clients do not follow for a POST (and which got no console line)."""
    return [Route(path, endpoint, methods=[method]), Route(f"{path}/", endpoint, methods=[method])]


def _error_response(error: ApiError) -> JSONResponse:
    """The error object as a response; a 503 (a full queue, a shutdown) says when to come back, a 413 closes the
    connection. (A stream cut by a shutdown has had its 200 and headers: its shutting_down error goes as the
    last event, without one.)"""
    headers = {"Retry-After": str(RETRY_AFTER_S)} if error.status == 503 else None
    if error.status == 413:  # the rest of the body is not read: the connection cannot carry another request
        headers = {"Connection": "close"}
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


@contextlib.contextmanager
def _as_api_errors(field: str) -> Iterator[None]:
    """The library's failures of one request as error objects: a prompt longer than the context, or messages
    the chat template refuses, are the client's (400); a template that fails or an engine error fails this
    request only (500). field: where the prompt came from ("messages" or "prompt"), the error's param."""
    try:
        yield
    except ContextFullError as exc:
        # The way out, as the API's own error says "Please reduce the length of the messages": the library's hint
        # ("raise --ctx") is the command line's, and the client may not know it started a server.
        hint = f"shorten the {field}, or start `specchat serve` with a larger --ctx"
        raise ApiError(400, f"{exc.message}; {hint}", code="context_length_exceeded", param=field) from None
    except MessagesRefused as exc:  # the client's messages, not a server fault (a 500 the client would retry)
        raise ApiError(400, exc.message, code="invalid_message", param=field) from None
    except SpecchatError as exc:
        raise ApiError(500, exc.message, "server_error", "generation_failed") from None


async def _cancel_on_disconnect(request: Request, job: Job) -> None:
    """Cancel a non-streamed request's job when its client leaves (a timeout, a retry): uvicorn does not
    cancel the handler, so the generation would run on to max_tokens, holding the queue for nobody."""
    while (await request.receive())["type"] != "http.disconnect":
        pass  # the body was read already: the next message is the disconnect
    job.cancel()


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

    def __init__(self, content, job: Job, on_end: Callable[[], None], **kwargs) -> None:
        super().__init__(content, **kwargs)
        self.job, self.on_end = job, on_end

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except ClientDisconnect:
            pass  # an ordinary event for a server: not an error to log
        finally:
            self.job.cancel()
            self.on_end()


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a taken port is one clear error, not a uvicorn log."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        # Another --port helps only with a port; a name that does not resolve or an address that is not this
        # machine's (a typo, a bracketed [::1]) is the host's fault.
        port_fault = exc.errno in (errno.EADDRINUSE, errno.EACCES)
        hint = "choose another --port" if port_fault else "give --host an address of this machine (127.0.0.1, ::1)"
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}", hint=hint) from None
    # Listening before the address is printed: a client that connects as soon as it reads it waits in
    # the backlog until uvicorn accepts, instead of being refused while uvicorn starts.
    sock.listen(BACKLOG)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, which on Ctrl-C stops the requests still running after STOP_AFTER_S, so that each
    ends with an answer before uvicorn's own GRACEFUL_S timeout would cancel it mid-response."""

    def __init__(self, config: uvicorn.Config, api: Api) -> None:
        super().__init__(config)
        self.api = api
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping_now = False

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame) -> None:
        """A second Ctrl-C stops the running requests now, each with its 503, and the server leaves; uvicorn's
        own force quit cancelled them mid-response instead (a traceback each, a plain-text 500). A third one
        is uvicorn's force quit, should the requests not end."""
        if self.should_exit and not self.stopping_now and self.loop is not None:
            self.stopping_now = True
            self.loop.call_soon_threadsafe(self.api.stop_all)
            return
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        timer = asyncio.get_running_loop().call_later(STOP_AFTER_S, self.api.stop_all)
        try:
            await super().shutdown(sockets)
        finally:
            timer.cancel()


def _warn_if_no_chat(pipeline: Pipeline, console: Console) -> None:
    """A target whose chat template is missing or fails answered every chat request with a 500, and nothing
    said so at the start; /v1/completions (no template) still serves, so it is a warning, not a refusal."""
    try:
        pipeline.prompt([Message("user", "Hi")])
    except MessagesRefused:
        return  # refused these messages, not every chat: the client hears why, as a 400
    except SpecchatError as exc:
        warning = f"warning: /v1/chat/completions will fail: {exc.message}; /v1/completions serves"
        console.print(one_line(warning), style="yellow", highlight=False, markup=False, soft_wrap=True)


def serve(pipeline: Pipeline, config: ServeConfig, console: Console, sock: socket.socket) -> None:
    """Run on a socket from listen() until Ctrl-C (uvicorn shuts down gracefully, finishing the running request)."""
    check_host(config.host, config.api_key)
    api = Api(pipeline, config, console)
    port = sock.getsockname()[1]
    where = f"[{config.host}]" if ":" in config.host else config.host
    console.print(  # one_line: the model's name may be a file name holding an escape sequence or a newline
        f"serving {one_line(api.model)} ({api.label}) on http://{where}:{port}/v1",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    if pipeline.mode_note and api.mode == "auto":
        console.print(pipeline.mode_note, style="dim", highlight=False, markup=False)
    _warn_if_no_chat(pipeline, console)
    uvicorn_config = uvicorn.Config(
        api.app(), log_level="warning", access_log=False, timeout_graceful_shutdown=GRACEFUL_S
    )
    _Server(uvicorn_config, api).run(sockets=[sock])
