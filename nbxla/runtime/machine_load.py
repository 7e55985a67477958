"""How many cores the rest of the machine leaves this process: what BLAS calls size their
threads by (``blas_threads.threads_for_call``).

Why: OpenBLAS splits a product evenly over its threads and waits for the slowest; a thread
that finds no free core waits for the scheduler, whole ticks of it (a 1024x1024 GEMV: 56 us on
one thread, 14 ms on two with the cores busy).  So threads only pay where cores are free.

How: the machine's busy CPU time (``/proc/stat``'s first line: every CPU's non-idle ticks)
minus this process's own CPU time (``time.process_time``: all its threads, OpenBLAS's spinning
ones included, so our own threads never count as load) over the time since the last sample,
taken at most every ``SAMPLE_SECONDS`` (a read of /proc/stat costs 25-60 us; between samples
the last answer is returned, ~0.2 us).  The first answer, with no interval yet, takes the
one-minute load average for the others' use.  Where /proc/stat cannot be read (not Linux),
every core counts as free: BLAS then threads as NumPy's does."""

from __future__ import annotations

import os
import time

# The least interval between two readings of /proc/stat: short enough to follow a benchmark
# or a test run starting beside us, long enough that the read (25-60 us) is noise and the
# tick counts (10 ms each) resolve a fraction of a core.
SAMPLE_SECONDS = 0.1


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class _Sampler:
    def __init__(self):
        self.time: float | None = None      # monotonic time of the last reading
        self.busy = 0.0                     # the machine's busy CPU seconds then
        self.own = 0.0                      # this process's CPU seconds then
        self.free = float(_cores())
        self.machine_cores = max(1, os.cpu_count() or 1)
        try:
            self.tick = 1.0 / os.sysconf("SC_CLK_TCK")
        except (AttributeError, ValueError, OSError):
            self.tick = 0.01

    def busy_seconds(self) -> float | None:
        """Non-idle CPU seconds of all CPUs since boot (user, nice, system, irq, softirq,
        steal: a hypervisor's steal is time our threads could not run either), or None."""
        try:
            with open("/proc/stat", "rb") as f:
                fields = f.readline().split()
        except OSError:
            return None
        if len(fields) < 5 or fields[0] != b"cpu":
            return None
        ticks = [int(x) for x in fields[1:9]] + [0] * (9 - len(fields))
        user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
        return (user + nice + system + irq + softirq + steal) * self.tick

    def free_cores(self) -> float:
        now = time.monotonic()
        if self.time is not None and now - self.time < SAMPLE_SECONDS:
            return self.free
        busy, own = self.busy_seconds(), time.process_time()
        if busy is None:
            others = 0.0
        elif self.time is None:
            try:
                others = os.getloadavg()[0]
            except OSError:
                others = 0.0
        else:
            others = max(0.0, (busy - self.busy) - (own - self.own)) / (now - self.time)
        self.time, self.busy, self.own = now, busy or 0.0, own
        self.free = max(0.0, min(float(_cores()), self.machine_cores - others))
        return self.free


_sampler = _Sampler()


def free_cores() -> float:
    """Cores (fractional) that other processes left idle over the last interval (at least
    ``SAMPLE_SECONDS``, ending now or at the last reading), at most our affinity's count."""
    return _sampler.free_cores()
