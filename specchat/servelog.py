"""`specchat serve`'s requests in the conversation log, as `run` logs its replies (logstore).

Each completed request is one logged conversation: its messages (a plain completion's prompt as one
user message), the reply, its statistics and mode. Writes run on a thread of their own, after the
response is out, so that neither the event loop nor the next generation waits for SQLite; a failure
is one warning line on the server's console (again only after the log worked in between) and never
fails a request. --no-log or SPECCHAT_NO_LOG=1 turns it off.
"""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor

from rich.console import Console

from . import logstore
from .chat import Conversation, Message
from .generation import Generation
from .logfaults import not_logged_because
from .outputs import summary
from .paths import log_file
from .runtime import Pipeline
from .servequeue import Job, Outcome, prefilled


class ServerLog:
    def __init__(self, pipeline: Pipeline, console: Console, *, no_log: bool = False) -> None:
        self.pipeline, self.console = pipeline, console
        self.enabled = logstore.enabled(no_log)
        self.path = log_file()
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specchat-log") if self.enabled else None
        self.failing = False  # touched on the log thread only

    def record(self, job: Job, outcome: Outcome) -> None:
        """Queue a finished request for the log; returns at once. A client that left is not logged, nor is a
        request for no reply at all (llama.vim's n_predict 0, sent to read its other files into the cache)."""
        if self.worker is not None and outcome.stop_reason != "cancelled" and job.request.max_tokens != 0:
            self.worker.submit(self._write, job, outcome)

    def _write(self, job: Job, outcome: Outcome) -> None:
        messages = job.messages if job.messages is not None else [Message("user", job.prompt)]
        system = messages[0].content if messages and messages[0].role == "system" else None
        turns, text = messages[1 if system is not None else 0 :], outcome.text
        if prefilled(messages):  # the reply continued the last message: one assistant turn, as the client reads it
            *turns, start = turns
            text = start.content + text
        conversation = Conversation(system, [*turns, Message("assistant", text)])
        reply = summary(self.pipeline, job.request, Generation(outcome.text, [], outcome.stats))
        reply["stats"]["stop_reason"] = outcome.stop_reason  # a stop string ends it as "stop", as the API says
        recorder, failed = logstore.Recorder(True, self.path), None
        try:
            recorder.write(conversation, reply)
        except (sqlite3.Error, OSError) as exc:
            failed = exc
        if recorder.notice:  # a damaged log was set aside, and a new one started
            self.console.print(recorder.notice, style="yellow", soft_wrap=True, markup=False, highlight=False)
        if failed is not None and not self.failing:
            line = f"warning: requests are not logged: {self.path}: {not_logged_because(failed, self.path)}"
            self.console.print(line, style="yellow", soft_wrap=True, markup=False, highlight=False)
        self.failing = failed is not None

    def close(self) -> None:
        """Wait for the writes still queued (after the server stopped taking requests). A request that
        ends after this (one uvicorn cancelled at shutdown) is not logged, rather than a traceback."""
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.shutdown(wait=True)
