"""machine_load.free_cores: the cores other processes leave idle, from the machine's busy CPU
time less this process's own, sampled at most every SAMPLE_SECONDS."""

from __future__ import annotations

import pytest

from nbxla.runtime import machine_load


class Clock:
    def __init__(self):
        self.now, self.busy, self.own = 100.0, 5000.0, 10.0


@pytest.fixture
def sampler(monkeypatch):
    clock = Clock()
    s = machine_load._Sampler()
    s.machine_cores = 2
    monkeypatch.setattr(machine_load, "_cores", lambda: 2)
    monkeypatch.setattr(machine_load.time, "monotonic", lambda: clock.now)
    monkeypatch.setattr(machine_load.time, "process_time", lambda: clock.own)
    monkeypatch.setattr(s, "busy_seconds", lambda: clock.busy)
    monkeypatch.setattr(machine_load.os, "getloadavg", lambda: (1.25, 0.0, 0.0))
    return s, clock


def test_first_answer_takes_the_load_average_then_intervals_take_the_others_cpu_time(sampler):
    s, clock = sampler
    assert s.free_cores() == pytest.approx(0.75)          # 2 cores - load average 1.25
    # 0.5 s: the machine busy 1.6 CPU-seconds, 0.6 of them ours: others use 2 cores' worth
    clock.now, clock.busy, clock.own = clock.now + 0.5, clock.busy + 1.6, clock.own + 0.6
    assert s.free_cores() == pytest.approx(0.0)
    # 0.2 s: busy 0.25, all ours (our own threads never count as load): both cores free
    clock.now, clock.busy, clock.own = clock.now + 0.2, clock.busy + 0.25, clock.own + 0.25
    assert s.free_cores() == pytest.approx(2.0)
    # 0.2 s: others busy 0.1 CPU-seconds = half a core
    clock.now, clock.busy = clock.now + 0.2, clock.busy + 0.1
    assert s.free_cores() == pytest.approx(1.5)


def test_readings_closer_than_the_sample_interval_return_the_last_answer(sampler):
    s, clock = sampler
    s.free_cores()
    clock.now, clock.busy = clock.now + 0.5, clock.busy + 1.0      # others: 2 cores
    assert s.free_cores() == pytest.approx(0.0)
    clock.now, clock.busy = clock.now + machine_load.SAMPLE_SECONDS / 2, clock.busy + 0.0
    assert s.free_cores() == pytest.approx(0.0)                     # (not read again yet)
    clock.now += machine_load.SAMPLE_SECONDS                        # idle since the last reading
    assert s.free_cores() == pytest.approx(2.0)


def test_without_proc_stat_every_core_counts_as_free(sampler, monkeypatch):
    s, clock = sampler
    monkeypatch.setattr(s, "busy_seconds", lambda: None)
    assert s.free_cores() == 2.0
    clock.now += 1.0
    assert s.free_cores() == 2.0


def test_the_real_reading_is_a_number_of_cores():
    free = machine_load.free_cores()
    assert 0.0 <= free <= machine_load._cores()
    if machine_load._sampler.busy_seconds() is not None:
        assert machine_load._sampler.busy_seconds() > 0
