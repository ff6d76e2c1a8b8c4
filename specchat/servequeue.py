"""The server's engine: one generation at a time on the loaded pipeline, a bounded queue in front of it.

Generations run on one worker thread (the pipeline's models hold one KV cache each and are not
thread-safe); the HTTP side awaits them. A job is stopped early by raising from the loop's on_update
callback, the only place where Python runs between rounds: for a client that went away, or for a stop
string that appeared in the text.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .chat import Message
from .generation import Update
from .infill import Limits
from .outputs import Request
from .runtime import Pipeline
from .speculative import Stats, check_fits
from .stopscan import StopScanner


class QueueFull(Exception):
    """More requests are waiting than the server accepts."""


class _Stop(Exception):
    """Raised inside on_update to end a generation at this round (stop string or cancelled job)."""


@dataclass
class Outcome:
    text: str
    stats: Stats
    stop_reason: str  # eog | max_tokens | context | stop | cancelled | n_indent | t_max_predict_ms (infill)
    cached: int = 0  # prompt tokens the KV cache already held from the request before (not evaluated again)


def batch_outcome(outcomes: list[Outcome]) -> Outcome:
    """A batch's prompts as one request: their statistics summed (the usage, the timings), their stop reasons
    counted (the console line's)."""
    stats = Stats(prompt_tokens=sum(outcome.stats.prompt_tokens for outcome in outcomes))
    for outcome in outcomes:
        stats.merge(outcome.stats)
    counted = Counter(outcome.stop_reason for outcome in outcomes)
    reasons = ", ".join(reason if n == 1 else f"{reason} x{n}" for reason, n in counted.items())
    return Outcome("", stats, f"{len(outcomes)} prompts: {reasons}", sum(outcome.cached for outcome in outcomes))


def prefilled(messages: list[Message]) -> bool:
    """A last assistant message after a user's is the start of the reply (llama-server's prefill), not a finished
    turn: rendered as one, the template closed it and the model began a new turn, ignoring what it was given.
    Only after a user's message: a template asked for a generation prompt after no user turn may raise (Qwen3's
    "No user query found"), so [system, assistant] is read as before."""
    return len(messages) > 1 and messages[-1].role == "assistant" and any(m.role == "user" for m in messages[:-1])


def raw_prompt_ids(model, text: str) -> list[int]:
    """A raw prompt's tokens, its control tokens read as such. A client that wrote the BOS itself (a Llama 3 prompt
    from its own template) to a model that adds one got two BOS tokens, which llama.cpp only warns of: one goes."""
    ids = model.tokenize(text, add_special=True, parse_special=True)
    doubled = len(ids) > 1 and getattr(model, "add_bos", False) and ids[0] == ids[1] == getattr(model, "bos", None)
    return ids[1:] if doubled else ids


def round_text(job: Job, update: Update) -> str:
    """The round's text that the reply keeps: its tokens' (the draft's rejected guesses are not), up to the token
    where the job's limits end it; the rest of the round is dropped, as if the target had written it token by token."""
    texts = [segment.text for segment in update.segments if segment.kind != "rejected"]
    if job.limits is None:
        return "".join(texts)
    elapsed = update.stats.decode_s  # llama-server's t_gen_ms: since the prompt was read
    kept = []
    for text in texts:
        kept.append(job.limits.push(text, elapsed))
        if job.limits.stopped:
            break
    return "".join(kept)


class Job:
    """One request's generation: its inputs, a cancel flag, and (streamed) the pieces of text as they come."""

    def __init__(
        self,
        messages: list[Message] | None,
        prompt: str,
        request: Request,
        stops: list[str],
        prediction: str | None = None,
        template_kwargs: dict | None = None,
    ) -> None:
        self.messages = messages
        self.template_kwargs = template_kwargs or {}  # more variables for the chat template (chat_template_kwargs)
        self.prompt = prompt
        self.prediction = prediction  # the text the reply is expected to hold (Predicted Outputs)
        self.request = request
        self.scanner = StopScanner(stops)
        self.cancelled = threading.Event()
        self.on_text: Callable[[str], None] | None = None  # set by streaming requests; called on the worker
        self.ids: list[int] = []  # the prompt's tokens, set by Engine.measure before it runs
        self.expected: list[int] = []  # the prediction's tokens, set with them
        self.abort: Callable[[], None] | None = None  # set by the engine while this job runs
        self.lock = threading.Lock()  # abort and started are set on the worker, read on the event loop
        self.started = False  # the worker took it up: it runs, or ran
        self.holds_place = True  # created once Engine.admit counted it (a batch's: its last); until Engine.release
        # the prompt's tokens from the target, where they are not the prompt's text (an /infill request's FIM prompt)
        self.build: Callable[[object], list[int]] | None = None
        self.limits: Limits | None = None  # an /infill request's n_indent and t_max_predict_ms

    def cancel(self) -> None:
        self.cancelled.set()
        with self.lock:
            if self.abort is not None:
                self.abort()


class Engine:
    """The pipeline behind a lock, with at most `max_queue` requests waiting for it."""

    def __init__(self, pipeline: Pipeline, max_queue: int) -> None:
        self.pipeline = pipeline
        self.max_queue = max_queue
        self.lock = threading.Lock()  # the one generation running; the single worker also serialises
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specchat-engine")
        # Prompts of admitted requests are measured one at a time, beside the generation.
        self.tokenizer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specchat-tokenize")
        self.waiting = 0  # requests admitted and not yet finished (touched on the event loop only)

    def admit(self) -> None:
        """Count a request in, or refuse it (QueueFull) when the running one and the queue are full."""
        if self.waiting >= self.max_queue + 1:
            raise QueueFull
        self.waiting += 1

    def release(self, job: Job) -> None:
        """Give the job's queue place back (once: a job whose client left while queued gave it back then)."""
        if job.holds_place:
            job.holds_place = False
            self.waiting -= 1

    def leave(self, job: Job, *, give_back: bool = True) -> bool:
        """The job's client left (or the response ended): stop the job. One still queued gives its place back now,
        as it will never run (the worker passes over it at once): held until the worker got to it, the place stood
        for nobody, and the next request got a 503 'one request running, 1 waiting' with none waiting. True for
        such a job: its request is over now, not when the reply running before it ends."""
        job.cancel()
        with job.lock:  # the worker starts a job under it only if it was not cancelled
            queued = not job.started
        if queued:
            job.ids, job.expected = [], []  # all a passed-over job keeps: its prompt may be 1 MB of tokens
            if give_back:
                self.release(job)
        return queued

    def leave_all(self, jobs: list[Job]) -> bool:
        """Stop a request's jobs (a batch's prompts). Its place, held by the last job, is given back now only if none
        of them had started: with one still running (or stopping), the next request would be let in beside it. The
        worker passes over the rest at once, and the last one's end gives the place back. True where the first had
        not started: the request is over now."""
        queued = self.leave(jobs[0])
        for job in jobs[1:]:
            self.leave(job, give_back=queued)
        return queued

    async def measure(self, job: Job) -> None:
        """Tokenize the job's prompt and check that it fits the context (ContextFullError), before the
        request is answered with a status line. On its own thread, beside a generation: it reads only the
        vocabulary and the template (llama-server tokenizes in its HTTP threads too)."""
        job.ids = await asyncio.get_running_loop().run_in_executor(self.tokenizer, self._prompt_ids, job)
        if job.prediction:
            tokenize = self.pipeline.target.tokenize
            job.expected = await asyncio.get_running_loop().run_in_executor(self.tokenizer, tokenize, job.prediction)
        check_fits(len(job.ids), self.pipeline.target.n_ctx)

    def _prompt_ids(self, job: Job) -> list[int]:
        if job.build is not None:
            return job.build(self.pipeline.target)
        if job.messages is None:
            # A raw prompt's control tokens are read as such, as llama-server and vLLM read them: the client applied
            # a template or a fill-in-the-middle format (<|fim_prefix|>...) itself, and as text the model saw noise.
            return raw_prompt_ids(self.pipeline.target, job.prompt)
        # The KV cache is reused by comparing these tokens: a chat_template_kwargs that changes the prompt changes them.
        kwargs = job.template_kwargs
        if prefilled(job.messages):  # the reply continues it: its text after the template's assistant header
            *before, last = job.messages
            head = self.pipeline.prompt(before, use_template=True, template_kwargs=kwargs)
            return head + self.pipeline.target.tokenize(last.content)
        return self.pipeline.prompt(job.messages, use_template=True, template_kwargs=kwargs)

    async def run(self, job: Job) -> Outcome:
        """Run the job on the worker thread (after the ones before it); admit() must have counted it and
        measure() given it its tokens."""
        return await asyncio.get_running_loop().run_in_executor(self.worker, self._generate, job)

    def _generate(self, job: Job) -> Outcome:
        with self.lock:
            with job.lock:
                if job.cancelled.is_set():  # the client left while it waited in the queue
                    return Outcome("", Stats(), "cancelled")
                job.started = True
            pipeline, request = self.pipeline, job.request
            ids = job.ids
            # What the cache holds of the prompt is not evaluated again (the previous turn of a conversation, a
            # shared system prompt), but for its last token, read again for the first token's logits.
            cached = pipeline.target_cache.reusable(ids[:-1])
            pieces: list[str] = []
            last = Stats(prompt_tokens=len(ids))
            started = time.perf_counter()

            def on_update(update: Update) -> None:
                nonlocal last
                last = update.stats
                self._emit(job, pieces, job.scanner.push(round_text(job, update)))
                limited = job.limits is not None and job.limits.stopped
                if limited and not job.scanner.stopped:
                    self._emit(job, pieces, job.scanner.flush())  # no stop string can end it now: what was held back
                if job.scanner.stopped or job.cancelled.is_set() or limited:
                    raise _Stop

            try:
                with self._abortable(job):
                    generation = pipeline.generate(
                        ids, request.params, mode=request.mode, k=request.k, max_tokens=request.max_tokens,
                        on_update=on_update, cancel=job.cancelled, expected=job.expected,
                    )  # fmt: skip
            except _Stop:
                # The loop did not get to close its stats: the wall time so far stands in for its total.
                last.total_s = time.perf_counter() - started
                reason = "cancelled" if job.cancelled.is_set() else "stop" if job.scanner.stopped else job.limits.reason
                return Outcome("".join(pieces), last, reason, cached)
            if generation.stats.stop_reason == "interrupted":  # only a cancel aborts llama.cpp here
                return Outcome("".join(pieces), generation.stats, "cancelled", cached)
            self._emit(job, pieces, job.scanner.flush())
            return Outcome("".join(pieces), generation.stats, generation.stats.stop_reason, cached)

    @contextlib.contextmanager
    def _abortable(self, job: Job) -> Iterator[None]:
        """While the job runs, cancelling it also stops llama.cpp mid-call (the abort callback that Ctrl-C
        sets in `run`): on_update runs only between rounds, and a long prompt's prefill is one call that
        took minutes on 2 cores, for a client that had left or a server asked to shut down."""
        interrupt = self.pipeline.interrupt

        def abort() -> None:
            interrupt.requested = True

        with job.lock:
            job.abort = abort
        try:
            yield
        finally:
            with job.lock:  # no later cancel may abort the next job
                job.abort = None

    @staticmethod
    def _emit(job: Job, pieces: list[str], text: str) -> None:
        if text:
            pieces.append(text)
            if job.on_text is not None:
                job.on_text(text)

    def close(self) -> None:
        self.tokenizer.shutdown(wait=True, cancel_futures=True)
        self.worker.shutdown(wait=True, cancel_futures=True)
