"""Pulling a model's file from the Hugging Face Hub, through huggingface-hub and into its cache.

Whether the Hub is reachable (or HF_HUB_OFFLINE says not to try), whether a token is there for a gated
repository, the download and its errors as one line each. Apart from download.py, which decides between the
Hub and the PyPI mirror, and from mirror.py, which shares nothing with this path but the check of the file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .errors import DownloadError
from .modelfiles import verify
from .registryentries import ModelSpec

CACHE_WRITE_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)
# `hf auth login` is huggingface-hub 0.34's; older ones (pyproject allows 0.25) have `huggingface-cli login`
GATED_HINT = "accept its licence on the Hub, then set HF_TOKEN (or log in: `hf auth login`, `huggingface-cli login`)"


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def hub_cache_path(model: ModelSpec) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model.repo, model.file, revision=model.revision)
    except Exception:  # a malformed cache must not stop a run that has the file elsewhere
        return None
    return Path(found) if isinstance(found, str) else None


def hub_reachable(timeout: float = 3.0) -> bool:
    """One HEAD request to the Hub with a short timeout, so that an unreachable Hub costs seconds, not
    huggingface-hub's retry loop. It goes through huggingface-hub's own HTTP session, so it takes the
    same way as the download (HTTPS_PROXY/HTTP_PROXY/NO_PROXY, a custom client factory). Any answer
    below 500 counts as reachable; a proxy's 502/503/504 (or the Hub's own 5xx) does not."""
    if hub_offline():
        return False
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        response = get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception:  # no route, refused, timed out, proxy refused CONNECT, TLS failure, ...
        return False
    return response.status_code < 500


def has_hub_token() -> bool:
    """Whether huggingface-hub has a token to send (HF_TOKEN, or one saved by logging in)."""
    from huggingface_hub import get_token

    try:
        return get_token() is not None
    except Exception:  # a token exchange that failed: the download itself will say why
        return True


def gated_without_token(model: ModelSpec) -> DownloadError:
    return DownloadError(f"{model.repo} is gated on the Hub and no Hugging Face token is set", hint=GATED_HINT)


def from_hub(model: ModelSpec) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError

    if model.gated and not has_hub_token():  # said before the request (models.toml's `gated`), not after it
        raise gated_without_token(model)
    try:
        path = Path(hf_hub_download(model.repo, model.file, revision=model.revision))
    except GatedRepoError:
        raise DownloadError(f"{model.repo} is gated on the Hub", hint=GATED_HINT) from None
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as exc:
        if getattr(exc, "errno", None) in CACHE_WRITE_ERRNOS:  # the Hub answered; the cache folder cannot take it
            raise DownloadError(
                f"Hub download of {model.file} failed: {exc.strerror}" + (f": {exc.filename}" if exc.filename else ""),
                hint="free space or fix the Hugging Face cache's permissions, or set HF_HUB_CACHE to another folder",
            ) from None
        raise DownloadError(
            f"Hub download of {model.file} failed: {str(exc).splitlines()[0]}",
            hint=f"check the network, and that {model.repo} has {model.file} (models.toml or your overlay)",
        ) from None
    verify(model, path)
    return path
