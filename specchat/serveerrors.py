"""How `specchat serve`'s failures become OpenAI error objects: the library's failures of one request (the
client's are 400s, the rest 500s), a bug (a 500 too, the server goes on), a batch's failing prompt named by its
place, and the response that carries an error (when to come back after a 503, the connection closed after a 413).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from starlette.responses import JSONResponse

from .chat import MessagesRefused
from .errors import ContextFullError, SpecchatError
from .openai_api import ApiError

# A 503's Retry-After, in seconds. A queue place frees when the running reply ends, seconds to a minute on a CPU:
# the official `openai` client waits this long before each of its two retries, which it made after about 0.5 s and 1 s
# without it, into the same full queue. Small, as it is a guess: a server restarted after a shutdown's 503 is back
# once its models are loaded, and a client that waits longer than it needs to is slower for nothing.
RETRY_AFTER_S = 5


def error_response(error: ApiError) -> JSONResponse:
    """The error object as a response; a 503 (a full queue, a shutdown) says when to come back, a 413 closes the
    connection. (A stream cut by a shutdown has had its 200 and headers: its shutting_down error goes as the
    last event, without one.)"""
    headers = {"Retry-After": str(RETRY_AFTER_S)} if error.status == 503 else None
    if error.status == 413:  # the rest of the body is not read: the connection cannot carry another request
        headers = {"Connection": "close"}
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


@contextlib.contextmanager
def as_api_errors(field: str) -> Iterator[None]:
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
    except ApiError:
        raise
    except Exception as exc:  # a bug, or the binding's own error: a stream's last event too, not a cut stream
        raise internal_error(exc) from None


def name_prompt(error: ApiError, i: int) -> None:
    """A batch's error names the prompt's place in it."""
    error.message, error.param = f"prompt[{i}]: {error.message}", f"prompt[{i}]"


def internal_error(exc: Exception) -> ApiError:
    return ApiError(500, f"internal error: {type(exc).__name__}: {exc}", "server_error", "internal_error")
