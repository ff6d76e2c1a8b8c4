"""Other programs' use of the CPUs (Linux's /proc), and the number of llama.cpp threads it leaves room for.

llama.cpp's CPU threads meet at a barrier after every operation of the graph, and wait there spinning,
never yielding. With more threads than free CPUs, a thread whose partner was descheduled spins away the
time slice its partner needs, at every one of a step's hundreds of barriers. On a 2-core VM beside one
other llama.cpp process of 2 threads, a target step took 322 ms with 2 threads and 223 ms with 1; the
quiet machine runs it in 89 ms with 2 (benchmarks/beside_load.py). So while other programs keep CPUs
busy, fewer threads.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

CPU_MAX = "/sys/fs/cgroup/cpu.max"  # a container's CPU quota (cgroup v2, seen from inside it)
PROC_STAT = "/proc/stat"  # the first line sums every CPU, then one line per CPU
WINDOW_S = 0.5  # other programs' use is judged over at least this long (/proc counts in 10 ms ticks)
FREE_DOWN = 0.5  # one thread fewer when fewer CPUs than threads - this are free ...
FREE_UP = 0.75  # ... and one more again once threads + this are free (apart: no flapping at the edge)


Counters = tuple[dict[str, float], float]  # (seconds each CPU read was busy, by /proc/stat's name; ours)


def cpu_counters() -> Counters | None:
    """(seconds each CPU this process may run on was busy, seconds this process ran) from /proc, or None where
    unavailable. Only those CPUs: under `taskset -c 0` or a container's cpuset, a program busy on another CPU
    takes nothing from ours (counted machine-wide, it made every calibration "busy" and left one thread). Kept
    per CPU, as the set may change between two readings (see others_cpus)."""
    try:
        with open(PROC_STAT, encoding="ascii") as handle:
            rows = [line.split() for line in handle if line.startswith("cpu")]
        with open("/proc/self/stat", encoding="ascii") as handle:
            mine = handle.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        ours_cpus = {f"cpu{n}" for n in _affinity()}
        rows = [row for row in rows if row[0] in ours_cpus] or rows[:1]  # no per-CPU lines: the machine's
        busy = {row[0]: _busy_ticks(row[1:]) / tick for row in rows}
        ours = (int(mine[11]) + int(mine[12])) / tick  # utime, stime (fields 14 and 15 of stat(5))
        return busy, ours
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _busy_ticks(fields: list[str]) -> int:
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return user + nice + system + irq + softirq + steal


def _affinity() -> set[int]:
    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # pragma: no cover - not Linux (nor /proc)
        return set()


def others_cpus(before: Counters, after: Counters, seconds: float) -> float:
    """How many CPUs other processes kept busy, on average, between two cpu_counters() readings: over the CPUs
    both read only, as a CPU that joined between them (`taskset -pc`, a CPU brought online) brings its whole
    busy time since boot (10000 CPUs "busy": one thread, every calibration judged busy)."""
    common = before[0].keys() & after[0].keys()
    busy = sum(after[0][cpu] - before[0][cpu] for cpu in common)
    return max(0.0, busy - (after[1] - before[1])) / seconds


def affinity_cpus() -> int:
    """The CPUs this process may run on (`taskset`, a container's cpuset): those whose load cpu_counters() reads,
    so the count other programs' use is judged against (not Linux: every CPU)."""
    return max(1, len(_affinity()) or os.cpu_count() or 1)


def usable_cpus() -> int:
    """affinity_cpus(), and no more than a container's CPU quota (`docker run --cpus 1`) gives time for: threads
    beyond it spin at llama.cpp's barriers through the quota, then wait out the period. A cap on threads only:
    the load is read over the affinity's CPUs (a whole host's without a cpuset), and judged against their count."""
    cpus = affinity_cpus()
    return min(cpus, _quota_cpus() or cpus)


def _quota_cpus() -> int | None:
    """cgroup v2's cpu.max ("QUOTA PERIOD", or "max PERIOD": none) as whole CPUs, rounded up; None without one."""
    try:
        with open(CPU_MAX, encoding="ascii") as handle:
            quota, period = handle.read().split()[:2]
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):  # absent, "max", or not cgroup v2
        return None


@dataclass
class ThreadGovernor:
    """The thread count for the next llama.cpp call: `most` on a quiet machine, fewer while other
    programs use CPUs (never fewer than one). Where /proc cannot tell, always `most`."""

    most: int
    counters: Callable[[], Counters | None] = cpu_counters
    clock: Callable[[], float] = time.monotonic
    cpus: int = field(default_factory=affinity_cpus)  # the CPUs whose load is read; `most` holds the quota's cap

    def __post_init__(self) -> None:
        self.threads = self.most
        self._since = (self.clock(), self.counters())

    def advise(self) -> int:
        now = self.clock()
        started, before = self._since
        if now - started < WINDOW_S or now <= started:
            return self.threads
        after = self.counters()
        self._since = (now, after)
        if before is None or after is None:
            return self.threads
        free = self.cpus - others_cpus(before, after, now - started)
        if free < self.threads - FREE_DOWN:
            self.threads = max(1, min(self.most, round(free)))
        elif free >= self.threads + FREE_UP:
            self.threads = min(self.most, int(free + 1 - FREE_UP))
        return self.threads
