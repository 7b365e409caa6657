"""Timers and memory readings: medians of repeated calls, resident and accelerator memory."""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=1)
def accelerator() -> str | None:
    """The GPU (or JAX's TPU) the Keras backend computes on, by name; None on a CPU.

    Asked once per process: the backend and its device do not change.

    Example:
        >>> accelerator()  # on an H200 under JAX or PyTorch
        'NVIDIA H200'
    """
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return None if device.platform == "cpu" else device.device_kind
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else None
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            details = tf.config.experimental.get_device_details(gpus[0])
            return details.get("device_name", gpus[0].name)
    return None


def _reset_device_peak() -> None:
    import keras

    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        torch.cuda.reset_peak_memory_stats()
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.reset_memory_stats("GPU:0")


def device_peak_mib() -> float | None:
    """The accelerator's peak allocated memory in MiB since the last reset; None on a CPU.

    PyTorch and TensorFlow reset the peak when :class:`PeakMemory` starts a
    block; JAX cannot, so there it is the process's high-water mark so far.
    """
    if accelerator() is None:
        return None
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        return None if peak is None else peak / 2**20
    if backend == "torch":
        import torch

        return torch.cuda.max_memory_allocated() / 2**20
    import tensorflow as tf

    return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20


class PeakMemory:
    """Resident memory (MiB) that a `with` block added at its peak, and the accelerator's peak.

    On Linux the kernel's high-water mark (VmHWM) is reset to the current
    resident size on entry through /proc/self/clear_refs, so the figure is
    the block's peak minus the resident size at its start. Memory that the
    allocator kept from earlier work and reuses is not counted again.
    Elsewhere it is the process's peak so far. On a GPU, `device_mib` is
    the accelerator's peak allocation in the block (:func:`device_peak_mib`;
    None on a CPU).

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
        self.device_mib: float | None = None
        self._device = accelerator() is not None
        if self._device:
            _reset_device_peak()
        return self

    def __exit__(self, *exc) -> None:
        self.mib = max(0.0, peak_rss_mib() - self._start)
        if self._device:
            self.device_mib = device_peak_mib()
