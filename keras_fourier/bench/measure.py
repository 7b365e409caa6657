"""Timers and memory readings: medians of repeated calls, resident memory, what is available."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def _timings(fn: Callable[[], Any], repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    """Median wall time of `repeats` calls of `fn` after `warmup` calls: a typical call."""
    return statistics.median(_timings(fn, repeats, warmup))


def best_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    """Shortest wall time of `repeats` calls of `fn` after `warmup` calls: what the host can do."""
    return min(_timings(fn, repeats, warmup))


def _meminfo_mib(path: str, field: str) -> float | None:
    try:
        with open(path) as file:
            for line in file:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def resident_mib(pid: int | str = "self") -> float | None:
    """Resident memory (VmRSS) of a process in MiB; None where /proc cannot be read."""
    return _meminfo_mib(f"/proc/{pid}/status", "VmRSS:")


def available_mib() -> float | None:
    """MemAvailable of /proc/meminfo in MiB, or None where it cannot be read."""
    return _meminfo_mib("/proc/meminfo", "MemAvailable:")


def peak_rss_mib() -> float:
    """The process's resident-memory high-water mark in MiB."""
    peak = _meminfo_mib("/proc/self/status", "VmHWM:")
    if peak is not None:
        return peak
    import resource

    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


class PeakMemory:
    """Resident memory (MiB) that a `with` block added at its peak.

    On Linux the kernel's high-water mark (VmHWM) is reset to the current
    resident size on entry through /proc/self/clear_refs, so the figure is
    the block's peak minus the resident size at its start. Memory that the
    allocator kept from earlier work and reuses is not counted again.
    Elsewhere it is the process's peak so far.

    Example:
        >>> with PeakMemory() as memory:
        ...     model.predict_on_batch(images)
        >>> memory.mib > 0
        True
    """

    def __enter__(self) -> PeakMemory:
        self._start = 0.0
        try:
            with open("/proc/self/clear_refs", "w") as file:
                file.write("5")
            self._start = resident_mib() or 0.0
        except OSError:
            pass
        self.mib: float | None = None
        return self

    def __exit__(self, *exc) -> None:
        self.mib = max(0.0, peak_rss_mib() - self._start)
