"""`specchat serve`: the loaded pipeline behind an OpenAI-compatible HTTP API (Starlette on uvicorn).

This module starts and stops the server: it checks the host and key, binds the socket, prints the address, runs
uvicorn and shuts it down on Ctrl-C so that every running request ends with an answer. The routes are in
serveapi.py, their error objects in serveerrors.py, a streamed reply's events in servestream.py. Web pages may
call the API from this machine's origins and from --allow-origin's (CORS).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import os
import signal
import socket

import uvicorn
from rich.console import Console

from .chat import Message, MessagesRefused
from .errors import SpecchatError, UsageError
from .runtime import Pipeline
from .serveapi import Api, ServeConfig
from .view import one_line

BACKLOG = 2048  # connections queued before they are accepted (uvicorn's default)
GRACEFUL_S = 5  # on Ctrl-C uvicorn waits this long for running requests, then cancels them (a traceback each)
STOP_AFTER_S = 4  # ...so requests still running by then are stopped at the next round, and end by themselves


def check_host(host: str, api_key: str | None) -> None:
    """Refuse to listen beyond this machine without a key: the API runs arbitrary prompts on its CPU/GPU."""
    if not host.strip():  # the socket would take "" for every interface, and print http://:PORT/v1
        raise UsageError("--host is empty", hint="give 127.0.0.1 (this machine) or 0.0.0.0 (every interface)")
    # As a URL writes an IPv6 address ("http://[::1]:8080"): no address, and not the one that accepts other machines
    if host.startswith("[") and host.endswith("]"):
        raise UsageError(f"--host {host}: give the address without brackets", hint=f"--host {host[1:-1]}")
    # `--api-key "$KEY"` with KEY unset asked for a key and served without one; spaces around a key are trimmed
    # off the client's header (HTTP does), so no client could ever send it.
    if api_key is not None and not api_key.strip():
        hint = 'give a key (--api-key "$(openssl rand -hex 16)"), or leave it out for none'
        raise UsageError("--api-key (or SPECCHAT_API_KEY) is empty", hint=hint)
    if api_key is not None and api_key != api_key.strip():
        raise UsageError("--api-key (or SPECCHAT_API_KEY) starts or ends with a space, which no client can send",
                         hint="give the key without them")  # fmt: skip
    # HTTP headers are bytes read as Latin-1, and httpx (the openai client) refuses to send any other
    # character: a key with an accented letter was taken and then no request could ever match it.
    if api_key is not None and not api_key.isascii():
        hint = 'give a key of ASCII letters and digits (--api-key "$(openssl rand -hex 16)")'
        raise UsageError("--api-key (or SPECCHAT_API_KEY) has a character outside ASCII, which no client can send",
                         hint=hint)  # fmt: skip
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
        self.stopped_by = 0  # the first signal that asked the server to stop
        # A job started with `&` in a script gets SIGINT ignored, so that Ctrl-C for the script's foreground command
        # (sent to the whole process group) leaves it running: uvicorn took it all the same, and exited 0.
        self.ignored = {sig for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) is signal.SIG_IGN}

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame) -> None:
        """A second Ctrl-C stops the running requests now, each with its 503, and the server leaves; uvicorn's
        own force quit cancelled them mid-response instead (a traceback each, a plain-text 500). A third one
        is uvicorn's force quit, should the requests not end. A signal the server was started to ignore is."""
        if sig in self.ignored:
            return
        if self.should_exit and not self.stopping_now and self.loop is not None:
            self.stopping_now = True
            self.loop.call_soon_threadsafe(self.api.stop_all)
            return
        self.stopped_by = self.stopped_by or sig
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        timer = asyncio.get_running_loop().call_later(STOP_AFTER_S, self.api.stop_all)
        try:
            await super().shutdown(sockets)
        finally:
            timer.cancel()
        # uvicorn then raises the signal again: SIGTERM ends the process (exit 143) without a word, where
        # Ctrl-C is said by the CLI's "interrupted". A service's log should say why the server went away.
        if self.stopped_by == signal.SIGTERM:
            with contextlib.suppress(OSError):  # a log pipe closed with the server: still exit 143
                self.api.console.print("stopped (SIGTERM)", highlight=False, markup=False)


def _warn_if_no_chat(pipeline: Pipeline, console: Console, template_kwargs: dict) -> None:
    """A target whose chat template is missing or fails answered every chat request with a 500, and nothing
    said so at the start; /v1/completions (no template) still serves, so it is a warning, not a refusal."""
    try:
        pipeline.prompt([Message("user", "Hi")], template_kwargs=template_kwargs)  # with --chat-template-kwargs'
    except MessagesRefused:
        return  # refused these messages, not every chat: the client hears why, as a 400
    except SpecchatError as exc:
        warning = f"warning: /v1/chat/completions will fail: {exc.message}; /v1/completions serves"
        console.print(one_line(warning), style="yellow", highlight=False, markup=False, soft_wrap=True)


@contextlib.contextmanager
def said_if_stopped_while_loading(console: Console):
    """A SIGTERM before the server runs (the models' load) says so, then ends as before (the handler it finds
    puts the terminal back; exit 143): a service's log ended at "loading", as if the server hung. Ignored, it
    stays so (nohup)."""
    before = signal.getsignal(signal.SIGTERM)
    if before is signal.SIG_IGN:
        yield
        return

    def say_and_stop(signum, frame) -> None:
        with contextlib.suppress(OSError):  # a log pipe closed with the server: still exit 143
            console.print("stopped while loading (SIGTERM)", highlight=False, markup=False)
        signal.signal(signum, before if callable(before) else signal.SIG_DFL)
        if callable(before):
            before(signum, frame)
        else:  # none was set up (serve called on its own): the signal's own end
            os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, say_and_stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if before is None else before)


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
    _warn_if_no_chat(pipeline, console, config.template_kwargs)
    uvicorn_config = uvicorn.Config(
        api.app(), log_level="warning", access_log=False, timeout_graceful_shutdown=GRACEFUL_S
    )
    _Server(uvicorn_config, api).run(sockets=[sock])
