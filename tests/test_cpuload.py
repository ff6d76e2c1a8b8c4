"""The thread governor: llama.cpp's threads give way to other programs' use of the CPUs (cpuload.py), on
fake /proc counters and a fake clock."""

from __future__ import annotations

import pytest

from specchat.cpuload import WINDOW_S, ThreadGovernor, cpu_counters


class Machine:
    """A clock and /proc counters: each tick other programs use `others` CPUs and specchat `ours`."""

    def __init__(self) -> None:
        self.now, self.busy, self.ours = 0.0, 0.0, 0.0
        self.others, self.mine = 0.0, 2.0

    def clock(self) -> float:
        return self.now

    def counters(self) -> tuple[dict[str, float], float]:
        return {"cpu": self.busy}, self.ours

    def run(self, governor: ThreadGovernor, seconds: float, others: float) -> int:
        """`seconds` of decoding (a call every 0.1 s) while others use `others` CPUs; the last advice."""
        for _ in range(round(seconds / 0.1)):
            self.now += 0.1
            self.busy += 0.1 * (others + governor.threads)
            self.ours += 0.1 * governor.threads
            advice = governor.advise()
        return advice


def governor(machine: Machine, most: int = 2, cpus: int = 2) -> ThreadGovernor:
    return ThreadGovernor(most, counters=machine.counters, clock=machine.clock, cpus=cpus)


def test_a_quiet_machine_keeps_every_thread():
    machine = Machine()
    assert machine.run(governor(machine), 5.0, others=0.0) == 2


def test_another_program_on_a_cpu_leaves_one_thread_and_its_end_gives_both_back():
    """Beside one other 2-thread llama.cpp process a 2-core step took 931 ms with 2 threads, 229 with 1."""
    machine = Machine()
    threads = governor(machine)
    assert machine.run(threads, 1.0, others=1.0) == 1
    assert machine.run(threads, 3.0, others=1.0) == 1  # specchat now leaves that CPU: still one
    assert machine.run(threads, 1.0, others=0.0) == 2


@pytest.mark.parametrize(("others", "expected"), [(0.3, 2), (0.4, 2), (0.6, 1), (2.0, 1)])
def test_light_background_work_is_no_reason_to_give_way(others, expected):
    """A browser tab or a VM's steal time takes a little of the CPUs; a busy program most of one."""
    machine = Machine()
    assert machine.run(governor(machine), 2.0, others=others) == expected


def test_no_flapping_at_the_edge():
    """Down below 1.5 free CPUs, up again only from 1.75: a load of 0.35 after one of 1 keeps one thread."""
    machine = Machine()
    threads = governor(machine)
    assert machine.run(threads, 1.0, others=1.0) == 1
    assert machine.run(threads, 2.0, others=0.35) == 1
    assert machine.run(threads, 1.0, others=0.1) == 2


def test_more_cpus_give_way_by_what_others_use():
    machine = Machine()
    threads = governor(machine, most=8, cpus=8)
    assert machine.run(threads, 1.0, others=3.0) == 5
    assert machine.run(threads, 1.0, others=1.0) == 7
    assert machine.run(threads, 1.0, others=0.0) == 8


def test_judged_over_a_window_not_per_call():
    """/proc counts in 10 ms ticks: a call 0.1 s after the last judges nothing."""
    machine = Machine()
    threads = governor(machine)
    machine.now += WINDOW_S / 5
    machine.busy += 10.0  # a burst others made: not judged yet
    assert threads.advise() == 2


def test_without_proc_it_keeps_what_was_asked():
    machine = Machine()
    threads = ThreadGovernor(2, counters=lambda: None, clock=machine.clock, cpus=2)
    machine.now += 5.0
    assert threads.advise() == 2


def test_the_real_counters_read_this_machine():
    counters = cpu_counters()
    if counters is None:
        pytest.skip("no /proc here")
    busy, ours = counters
    assert sum(busy.values()) >= ours > 0


def test_only_the_cpus_specchat_may_run_on_count(tmp_path, monkeypatch):
    """Under `taskset -c 0` (or a container's cpuset) a program busy on CPU 1 takes nothing from specchat's
    one CPU: counted machine-wide, it made every calibration "busy" (never saved) and left one thread."""
    from specchat import cpuload

    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  500 0 100 900 0 0 0 0 0 0\ncpu0 100 0 0 400 0 0 0 0 0 0\ncpu1 400 0 100 500 0 0 0 0 0 0\nintr 1\n",
        encoding="ascii",
    )
    monkeypatch.setattr(cpuload, "PROC_STAT", str(stat))
    monkeypatch.setattr(cpuload.os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    tick = cpuload.os.sysconf("SC_CLK_TCK")
    assert cpu_counters()[0] == {"cpu0": pytest.approx(100 / tick)}
    monkeypatch.setattr(cpuload.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    assert sum(cpu_counters()[0].values()) == pytest.approx(600 / tick)


@pytest.mark.parametrize(("quota", "expected"), [("100000 100000\n", 1), ("150000 100000\n", 2), ("max 100000\n", 2)])
def test_a_containers_cpu_quota_caps_the_usable_cpus(tmp_path, monkeypatch, quota, expected):
    """`docker run --cpus 1` on 2 CPUs: both stay in the affinity, but 2 threads spinning at llama.cpp's barriers
    use up one CPU's time in half the period and then wait out the rest."""
    from specchat import cpuload

    limit = tmp_path / "cpu.max"
    limit.write_text(quota, encoding="ascii")
    monkeypatch.setattr(cpuload, "CPU_MAX", str(limit))
    monkeypatch.setattr(cpuload.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    assert cpuload.usable_cpus() == expected
    monkeypatch.setattr(cpuload, "CPU_MAX", str(tmp_path / "absent"))
    assert cpuload.usable_cpus() == 2


def test_under_a_quota_the_load_is_judged_against_the_cpus_it_was_read_on(tmp_path, monkeypatch):
    """`docker run --cpus 4` on a 64-CPU host without a cpuset: the load is read over all 64, and other programs'
    2.6 CPUs there (4 %) were divided by the quota's 4: every calibration judged busy, the governor at 1 thread
    of 4. The quota caps the threads (`most`); the load is judged against the CPUs it was read on."""
    from specchat import cpuload
    from specchat.costmeasure import BUSY_SHARE, CpuLoad

    limit = tmp_path / "cpu.max"
    limit.write_text("400000 100000\n", encoding="ascii")
    monkeypatch.setattr(cpuload, "CPU_MAX", str(limit))
    monkeypatch.setattr(cpuload.os, "sched_getaffinity", lambda _pid: set(range(64)), raising=False)
    assert cpuload.usable_cpus() == 4 and len(cpuload.os.sched_getaffinity(0)) == 64
    machine = Machine()
    threads = ThreadGovernor(cpuload.usable_cpus(), counters=machine.counters, clock=machine.clock)
    assert machine.run(threads, 5.0, others=2.6) == 4
    readings = iter([({"cpu": 0.0}, 0.0), ({"cpu": 2.6 + 4.0}, 4.0)])  # one second: others 2.6 CPUs, specchat 4
    monkeypatch.setattr("specchat.costmeasure.cpu_counters", lambda: next(readings))
    load = CpuLoad()
    load.started_at -= 1.0
    share = load.other_share()
    assert share == pytest.approx(2.6 / 64, rel=0.05) and share < BUSY_SHARE


def test_a_cpu_joining_the_set_between_two_readings_is_no_load(tmp_path, monkeypatch):
    """`taskset -pc 0,1 PID` on a running specchat (or a CPU coming online): the second reading took in CPU 1's
    whole busy time since boot, and others_cpus() said 10000 CPUs were busy (one thread, calibrations "busy").
    A delta is only taken over the CPUs both readings read."""
    from specchat import cpuload

    stat = tmp_path / "stat"
    monkeypatch.setattr(cpuload, "PROC_STAT", str(stat))
    tick = cpuload.os.sysconf("SC_CLK_TCK")
    stat.write_text("cpu  0 0 0 0 0 0 0 0\ncpu0 100 0 0 400 0 0 0 0\ncpu1 9000000 0 0 50 0 0 0 0\n", encoding="ascii")
    monkeypatch.setattr(cpuload.os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    before = cpu_counters()
    stat.write_text("cpu  0 0 0 0 0 0 0 0\ncpu0 150 0 0 450 0 0 0 0\ncpu1 9000100 0 0 50 0 0 0 0\n", encoding="ascii")
    monkeypatch.setattr(cpuload.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    after = cpu_counters()
    ours = after[1] - before[1]  # this test's own time between the readings
    assert cpuload.others_cpus(before, after, 1.0) == pytest.approx(max(0.0, 50 / tick - ours))
    assert cpuload.others_cpus(after, before, 1.0) == pytest.approx(0.0)  # and back to {0}: CPU 1 left
