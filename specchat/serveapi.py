"""The route handlers of `specchat serve`: the Starlette app around one Engine, as OpenAI error objects.

Routes: POST /v1/chat/completions and /v1/completions, GET /v1/models and /v1/models/{id}, GET /health, and
llama-server's POST /infill for editor plugins (infill.py), each with a trailing slash too. Every failure a client
causes is an OpenAI error object with a status; the console shows one line per request. Apart from server.py
(binding the socket, running uvicorn, shutting down), from servestream.py (a streamed reply's events), from
serveerrors.py (a failure made an error object and its response) and from serveintake.py (the API key, the body
read, the prompts measured), so that each reads on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import apireply, cors, infill, modes, openai_api, servestream
from .ctxsize import trained_context
from .openai_api import ApiError, ApiRequest
from .outputs import Request as Ask
from .paths import path_text
from .runtime import Pipeline
from .serveerrors import as_api_errors, error_response, internal_error, name_prompt
from .serveintake import authorize, measure_all, read_body
from .servelog import ServerLog
from .servequeue import Engine, Job, Outcome, QueueFull, batch_outcome
from .servestream import CLIENT_CLOSED
from .statsview import acceptance
from .view import n_tokens, one_line

# what a 404 names
ROUTES = "POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, and llama-server's POST /infill"


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
    # --chat-template-kwargs: every chat's template variables, a request's own chat_template_kwargs set over them
    template_kwargs: dict = field(default_factory=dict)


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
        self.model = pipeline.resolved.name  # the pair's name, or the file's for a --target of one's own
        self.mode = config.mode if pipeline.available(config.mode) else "target"
        self.k = modes.get(self.mode).length(config.k)
        self.label = modes.get(self.mode).describe(self.k)
        self.jobs: set[Job] = set()  # admitted and not finished: what stop_all() stops
        # set by stop_all(): a cancelled job was cut by the shutdown, not by its client; a body still coming is not
        # waited for
        self.closing = asyncio.Event()
        # Names a client may send for this model: its id, the pair, the target's file name and stem.
        target = path_text(pipeline.resolved.target.name)
        self.aliases = {self.model, target, target.removesuffix(".gguf")}
        self.created = _created(pipeline.resolved.target)
        self.trained = trained_context(pipeline.resolved.target)  # None where the file does not say

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
        ]
        routes += _slashed("/infill", self._wrap(self.infill), "POST")  # llama-server's, for editor plugins
        routes += _slashed("/health", self._wrap(self.health, auth=False), "GET")
        app = Starlette(
            routes=routes,
            middleware=[cors.middleware(self.config.allow_origins, self.log)],
            lifespan=self._lifespan,
            exception_handlers={HTTPException: self._http_error},
        )
        app.router.redirect_slashes = False  # a route is served, or it is a 404 error object: never a redirect
        return app

    async def _http_error(self, request: Request, exc: HTTPException) -> Response:
        """Starlette's own refusals (an unknown route 404, a wrong method 405) as OpenAI error objects too."""
        codes = {404: "not_found", 405: "method_not_allowed"}
        message = f"{request.method} {request.url.path}: {exc.detail}"
        if exc.status_code == 404:  # Ollama's /api/chat, llama-server's /completion: what is answered here
            message += f"; this server answers OpenAI's API: {ROUTES} (docs/serve.md)"
        error = ApiError(exc.status_code, message, code=codes.get(exc.status_code))
        self.log(request, exc.status_code, note=exc.detail)
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
                    authorize(request, self.config.api_key)
                return await handler(request)
            except ApiError as exc:
                self.log(request, exc.status, note=exc.message)
                return error_response(exc)
            except Exception as exc:  # a bug: this request fails with an error object, the server goes on
                error = internal_error(exc)
                self.log(request, 500, note=error.message)
                return error_response(error)

        return endpoint

    async def health(self, _request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.model, "mode": self.mode, "busy": self.engine.waiting})

    async def models(self, request: Request) -> Response:
        self.log(request, 200)
        return JSONResponse({"object": "list", "data": [self._model_entry()]})

    async def model_info(self, request: Request) -> Response:
        """GET /v1/models/{id}: what the official client's `models.retrieve(id)` asks for."""
        self._check_model(request.path_params["model"].removesuffix("/"))  # /v1/models/ID/ is /v1/models/ID
        self.log(request, 200)
        return JSONResponse(self._model_entry())

    def _model_entry(self) -> dict:
        return {"id": self.model, "object": "model", "created": self.created, "owned_by": "specchat"}

    def _check_model(self, name: str) -> None:
        """A request may name the model by any of its aliases; another name is a 404."""
        if name not in self.aliases:
            raise ApiError(404, f"model '{name}' is not served here; this server has '{self.model}'",
                           code="model_not_found", param="model")  # fmt: skip

    async def chat(self, request: Request) -> Response:
        body = await read_body(request, self.config.max_body, self.closing)
        return await self._answer(request, openai_api.parse_chat(body, self.config.max_tokens), chat=True)

    async def completions(self, request: Request) -> Response:
        body = await read_body(request, self.config.max_body, self.closing)
        return await self._answer(request, openai_api.parse_completion(body, self.config.max_tokens), chat=False)

    async def infill(self, request: Request) -> Response:
        """llama-server's /infill: a fill-in-the-middle completion in its own JSON (infill.py), generated as a
        completion is, one prompt, its KV cache reused from the request before (the other files come first)."""
        body = await read_body(request, self.config.max_body, self.closing)
        infill.check_model(getattr(self.pipeline.target, "fim", {}))  # a plugin backend may have none
        asked = infill.parse(body, self.config.max_tokens)
        parsed = asked.options
        self._admit(parsed)
        job = Job(None, asked.before, Ask(self.mode, self.k, parsed.params, parsed.max_tokens), parsed.stop)
        job.build = functools.partial(infill.prompt_ids, asked)
        job.limits = asked.limits()
        await self._measure([job])
        if parsed.stream:
            return servestream.stream_response(self, request, job, False, False, infill=asked)
        outcomes = await self._run_or_left(request, [job])
        if isinstance(outcomes, Response):
            return outcomes
        (outcome,) = outcomes
        self.check_shutdown(outcome)
        self.log(request, CLIENT_CLOSED if outcome.stop_reason == "cancelled" else 200, outcome=outcome)
        extra = apireply.extras(outcome.stats, self.mode, self.label, outcome.cached)
        return JSONResponse(infill.response(asked, self.model, outcome.text, outcome.stats, outcome.stop_reason,
                                            outcome.cached, extra))  # fmt: skip

    def _admit(self, parsed: ApiRequest) -> None:
        """The model the request names is this one, and it has a queue place."""
        if parsed.model is not None:
            self._check_model(parsed.model)
        try:
            self.engine.admit()
        except QueueFull:
            busy = f"the server is busy: one request running, {self.config.max_queue} waiting (its --queue)"
            raise ApiError(503, busy, "server_error", "queue_full") from None

    async def _answer(self, request: Request, parsed: ApiRequest, *, chat: bool) -> Response:
        self._admit(parsed)
        prompts = parsed.prompts or [parsed.prompt]  # a chat's prompt is its messages
        # llama-server's merge (tools/server: the request's keys over --chat-template-kwargs'); a completion has none
        kwargs = {**self.config.template_kwargs, **parsed.template_kwargs} if chat else {}
        asks = [Ask(self.mode, self.k, params, parsed.max_tokens, kwargs) for params in parsed.prompt_params()]
        pairs = zip(prompts, asks, strict=True)
        jobs = [Job(parsed.messages, text, ask, parsed.stop, parsed.prediction, kwargs) for text, ask in pairs]
        for job in jobs[:-1]:  # a batch holds one queue place: its last job's, given back once that one is done
            job.holds_place = False
        await self._measure(jobs)
        if parsed.stream:  # never a batch (parse_completion)
            return servestream.stream_response(self, request, jobs[0], chat, parsed.include_usage)
        outcomes = await self._run_or_left(request, jobs)
        return outcomes if isinstance(outcomes, Response) else self._respond(request, outcomes, chat)

    async def _measure(self, jobs: list[Job]) -> None:
        """The jobs' prompts tokenized and measured, before any status line: a prompt longer than the context is a
        400, streamed or not. On failure the queue place (the last job's) is given back."""
        try:
            await measure_all(self.engine, jobs, self.trained)
        except BaseException:
            self.engine.release(jobs[-1])
            raise

    async def _run_or_left(self, request: Request, jobs: list[Job]) -> list[Outcome] | Response:
        """The jobs' outcomes, or the 499 of a client that left while they were queued: they never run, and
        its line is due now, not once the reply running before them has ended. No one reads that response."""
        outcomes = await self._run_all(request, jobs)
        if outcomes is None:
            self.log(request, CLIENT_CLOSED, note=servestream.LEFT_QUEUED)
            return Response(status_code=CLIENT_CLOSED)
        return outcomes

    def _respond(self, request: Request, outcomes: list[Outcome], chat: bool) -> Response:
        """A choice per outcome; a batch's statistics (and its console line) are those of its prompts together."""
        for outcome in outcomes:
            self.check_shutdown(outcome)  # past it, a cancelled job is one whose client left
        left = any(outcome.stop_reason == "cancelled" for outcome in outcomes)
        summed = outcomes[0] if len(outcomes) == 1 else batch_outcome(outcomes)
        self.log(request, CLIENT_CLOSED if left else 200, outcome=summed)
        extra = apireply.extras(summed.stats, self.mode, self.label, summed.cached)
        replies = [(outcome.text, apireply.finish_reason(outcome.stop_reason)) for outcome in outcomes]
        if chat:
            return JSONResponse(apireply.chat_response(apireply.new_id("chatcmpl"), self.model, *replies[0], extra))
        return JSONResponse(apireply.completion_response(apireply.new_id("cmpl"), self.model, replies, extra))

    async def _run_all(self, request: Request, jobs: list[Job]) -> list[Outcome] | None:
        """The jobs' outcomes, in order; None where the client left before any of them ran. They go to the one
        worker together, so that no other request's job comes between a batch's prompts."""
        tasks = [self.start(job) for job in jobs]
        batch = asyncio.gather(*tasks)  # the first failure at once, not after the prompts behind it ran
        watcher = asyncio.ensure_future(servestream.cancel_on_disconnect(request, jobs, self.engine))
        try:
            await asyncio.wait((batch, watcher), return_when=asyncio.FIRST_COMPLETED)  # cancels neither
            if not batch.done() and watcher.done() and watcher.exception() is None and watcher.result():
                return None
            return await asyncio.shield(batch)
        except BaseException as exc:  # cancelled (a shutdown), or a prompt failed: the ones behind it run for nobody
            self.engine.leave_all(jobs)
            failed = [i for i, task in enumerate(tasks) if task.done() and not task.cancelled() and task.exception()]
            if isinstance(exc, ApiError) and len(jobs) > 1 and failed:
                name_prompt(exc, failed[0])  # which of the batch failed; those before it are answered (and logged)
            raise
        finally:
            watcher.cancel()

    def start(self, job: Job) -> asyncio.Task:
        """The generation as a task; its queue place is given back when the worker is done with it, not when
        the client stops listening (but for a job still queued then, which never runs: Engine.leave)."""
        task = asyncio.ensure_future(self._run(job))
        self.jobs.add(job)
        if self.closing.is_set():  # still being tokenized when stop_all() ran: it must not run on to max_tokens either
            job.cancel()

        def done(finished: asyncio.Task) -> None:
            self.engine.release(job)
            self.jobs.discard(job)
            if not finished.cancelled() and finished.exception() is None:  # retrieved: no warning if unread
                self.history.record(job, finished.result())

        task.add_done_callback(done)
        return task

    async def _run(self, job: Job) -> Outcome:
        """The generation, with the library's failures turned into error objects."""
        with as_api_errors("prompt" if job.messages is None else "messages"):
            return await self.engine.run(job)

    def stop_all(self) -> None:
        """The server is shutting down: stop every job at its next round (queued ones never start)."""
        self.closing.set()
        for job in self.jobs:
            job.cancel()

    def check_shutdown(self, outcome: Outcome) -> None:
        """A reply cut by the shutdown is a 503, not a short text that looks complete."""
        if self.closing.is_set() and outcome.stop_reason == "cancelled":
            raise ApiError(503, "the server shut down before the reply was complete", "server_error", "shutting_down")

    def log(self, request: Request, status: int, *, outcome: Outcome | None = None, note: str = "") -> None:
        """One console line per request: what it cost and how much of the draft the target kept."""
        line = f"{request.method} {request.url.path} {status}"
        if outcome is not None:
            stats = outcome.stats
            drafts = f"{acceptance(stats)}, " if stats.drafted else ""  # as the line under a reply: none, no words
            speed = f"{n_tokens(stats.generated)}, {stats.tokens_per_s:.1f} tok/s"
            line += f"  {speed}, {drafts}{self.label}, {outcome.stop_reason}"
        elif note:
            line += f"  {note}"
        # what a client sent (a model name, a path) made harmless: a newline would start a line that reads as
        # another request's, an escape sequence would act on the terminal
        self.console.print(one_line(line), highlight=False, markup=False, soft_wrap=True)


def _slashed(path: str, endpoint: Callable[[Request], Awaitable[Response]], method: str) -> list[Route]:
    """The route at its path and with a trailing slash: Starlette answered that one with a 307 redirect, which
    many clients do not follow for a POST (and which got no console line)."""
    return [Route(path, endpoint, methods=[method]), Route(f"{path}/", endpoint, methods=[method])]
