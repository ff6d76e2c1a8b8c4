"""What an Engine is given: its context, threads, GPU layers and prompt chunk, and the thread count checked
against the usable CPUs. No llama.cpp here (engine.py is the only module that imports it): export and the
run's option checks ask for the threads without loading it."""

from __future__ import annotations

from dataclasses import dataclass

from .cpuload import usable_cpus


def default_threads() -> int:
    """Physical cores are what matters for llama.cpp; without a portable count, use the usable CPUs."""
    return usable_cpus()


def capped_threads(asked: int) -> tuple[int, str | None]:
    """More llama.cpp threads than usable CPUs only wait on each other (on 2 CPUs `--threads 1000` had not
    written 8 tokens after 200 s): capped at the usable CPUs, with the note that says so (None: as asked;
    0, llama.cpp's own default, stays 0)."""
    usable = default_threads()
    if asked <= usable:
        return asked, None
    cpus = "the 1 usable CPU" if usable == 1 else f"the {usable} usable CPUs"
    return usable, f"--threads {asked} is more than {cpus}: using {usable}"


@dataclass(frozen=True)
class EngineConfig:
    n_ctx: int = 4096
    n_threads: int = 0  # 0 = default_threads()
    gpu_layers: int = -1  # -1 = all when the build can offload, else 0
    n_batch: int = 256  # prompt chunk: small enough that Ctrl-C between chunks is quick
