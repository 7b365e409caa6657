"""The largest input a model processes within a memory budget (AFNO's 65k-token claim).

The side length of a square input is doubled from a start until a probe
does not fit, then bisected between the last side that fit and the first
that did not, on multiples of the model's stride. Each probe is one
inference call (``predict_on_batch``) in a fresh process, whose whole
resident memory counts (the runtime, the weights, the activations and the
workspace: what a machine with that much memory must hold):

* while it runs, the parent reads the child's resident memory every 20 ms
  and stops it once it passes the budget (a memory limit that works for
  every backend, where an address-space limit would stop TensorFlow's
  reservations first), or once the machine itself runs short;
* when it ends, the child's own high-water mark (VmHWM) is its peak, and
  the probe fits when that is within the budget; an out-of-memory error or
  a process the kernel killed does not fit.
"""

from __future__ import annotations

import math
import os
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

from keras_fourier.bench.measure import available_mib, peak_rss_mib, resident_mib
from keras_fourier.bench.report import format_row
from keras_fourier.bench.timing import has_free_input_size, with_precision
from keras_fourier.limits import MAX_MEMORY_ENV
from keras_fourier.models.catalog import is_model_name, modality
from keras_fourier.models.resolve import resolve_model
from keras_fourier.settings import BENCH_JIT, BENCH_PRECISIONS
from keras_fourier.validation import check_choice

# Sides are multiples of this (the stride of the package's pyramid backbones).
MAX_INPUT_MULTIPLE = 32
MAX_INPUT_START = 256
MAX_INPUT_MAX_SIDE = 8192
# A probe is stopped when the machine has less than this available (a shared machine).
MACHINE_RESERVE_MIB = 512
_POLL_SECONDS = 0.02
# Errors of the backends that mean "out of memory" (the probe does not fit).
_OUT_OF_MEMORY = ("MemoryError", "ResourceExhaustedError", "OutOfMemoryError")


def search_largest(
    fits: Callable[[int], bool], *, start: int, multiple: int, max_side: int
) -> int | None:
    """The largest side (a multiple of `multiple`, at most `max_side`) for which `fits` holds.

    Doubles from `start` until `fits` is False or `max_side` is reached, then
    bisects between the last side that fit and the first that did not (from
    `multiple` up when `start` does not fit); `fits` is taken to be
    monotone (a larger input never needs less memory).

    Args:
        fits: side -> whether an input of that side fits.
        start: the first side (rounded up to a multiple).
        multiple: the step of the sides.
        max_side: the largest side tried (rounded down to a multiple).

    Returns:
        The side, or None when not even `multiple` fits.

    Example:
        >>> search_largest(lambda side: side <= 1000, start=256, multiple=32, max_side=8192)
        992
    """
    top = max_side // multiple * multiple
    side = min(max(multiple, math.ceil(start / multiple) * multiple), top)
    low, high = 0, side
    while fits(side):
        low = side
        if side >= top:
            return side
        side = min(2 * side, top)
        high = side
    while high - low > multiple:
        middle = (low + high) // 2 // multiple * multiple
        if fits(middle):
            low = middle
        else:
            high = middle
    return low or None


def _probe_process(
    connection,
    reference: str,
    side: int,
    batch_size: int,
    precision: str,
    jit_compile: str,
    build_options: Mapping[str, Any],
) -> None:
    """The child of :func:`probe_input`: builds or loads the model, runs one batch, reports."""
    try:
        import keras
        import numpy as np

        # The parent bounds this process by its resident memory (the --memory-gib budget):
        # the estimate-based ceiling would refuse the probes that measure it.
        os.environ[MAX_MEMORY_ENV] = str(2**62)
        if is_model_name(reference):
            model = resolve_model(reference, image_size=side, **build_options)
        else:
            model = resolve_model(reference)
        model = with_precision(model, precision)
        model.compile(jit_compile=BENCH_JIT[jit_compile])
        channels = model.input_shape[-1]
        images = np.random.default_rng(0).uniform(0, 255, (batch_size, side, side, channels))
        images = keras.ops.convert_to_tensor(images.astype("float32"))
        baseline = resident_mib()
        start = time.perf_counter()
        model.predict_on_batch(images)
        seconds = time.perf_counter() - start
        connection.send({"peak_mib": peak_rss_mib(), "baseline_mib": baseline, "seconds": seconds})
    except Exception as error:  # reported to the parent, which decides
        kind = "out_of_memory" if type(error).__name__ in _OUT_OF_MEMORY else "error"
        connection.send({kind: f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"})


def probe_input(
    reference: str,
    side: int,
    *,
    memory_mib: float,
    batch_size: int = 1,
    precision: str = "float32",
    jit_compile: str = "auto",
    build_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One inference call on a (batch_size, side, side, C) input in a fresh process.

    Args:
        reference: a vision model name (built at `side`) or a `.keras` file
            of a model of free input size.
        side: the input's height and width.
        memory_mib: the budget; the process is stopped once it passes it.
        batch_size: images in the call. Default 1.
        precision: one of `BENCH_PRECISIONS`. Default "float32".
        jit_compile: "auto", "on" or "off". Default "auto".
        build_options: more arguments of the model's builder (a name's
            `classes`, ...). Default None.

    Returns:
        {"side", "batch_size", "pixels", "fits", "peak_mib" (the process's
        peak resident memory, or what it had when stopped), "baseline_mib"
        (its resident memory before the call), "seconds" (of the call),
        "note" (why it does not fit)}.

    Raises:
        RuntimeError: the probe failed for another reason than memory, or
            the machine ran short of memory before the probe reached the
            budget.
    """
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        target=_probe_process,
        args=(sender, reference, side, batch_size, precision, jit_compile, build_options or {}),
        daemon=True,
    )
    process.start()
    sender.close()
    result, stopped, highest = None, None, 0.0
    try:
        while result is None and stopped is None:
            if receiver.poll(_POLL_SECONDS):
                result = receiver.recv()
            elif not process.is_alive():
                break
            else:
                highest = max(highest, resident_mib(process.pid) or 0.0)
                available = available_mib()
                if highest > memory_mib:
                    stopped = "stopped above the budget"
                elif available is not None and available < MACHINE_RESERVE_MIB:
                    stopped = "machine"
                if stopped:
                    process.kill()
        if result is None and stopped is None and receiver.poll(0):
            result = receiver.recv()  # sent just before the process ended
    except EOFError:
        result = None
    finally:
        process.join()
        receiver.close()
    row: dict[str, Any] = {
        "side": side,
        "batch_size": batch_size,
        "pixels": side * side,
        "fits": False,
        "peak_mib": round(highest, 1) or None,
        "baseline_mib": None,
        "seconds": None,
        "note": None,
    }
    where = f"the probe at {side}x{side} (batch {batch_size})"
    if stopped == "machine":
        raise RuntimeError(
            f"{where} was stopped: the machine had less than {MACHINE_RESERVE_MIB} MiB available "
            f"at {highest:.0f} MiB, below the budget of {memory_mib:.0f} MiB"
        )
    if stopped is not None:
        row["note"] = stopped
    elif result is None:
        if process.exitcode != -signal.SIGKILL:
            raise RuntimeError(f"{where} ended with exit code {process.exitcode}")
        row["note"] = "killed by the system (out of memory)"
    elif "error" in result:
        raise RuntimeError(f"{where} failed: {result['error']}")
    elif "out_of_memory" in result:
        row["note"] = result["out_of_memory"]
    else:
        row.update(
            peak_mib=round(result["peak_mib"], 1),
            baseline_mib=None
            if result["baseline_mib"] is None
            else round(result["baseline_mib"], 1),
            seconds=round(result["seconds"], 3),
            fits=result["peak_mib"] <= memory_mib,
        )
        if not row["fits"]:
            row["note"] = "peak above the budget"
    return row


def largest_input(
    model,
    *,
    memory_gib: float = 16.0,
    batch_size: int = 1,
    start: int = MAX_INPUT_START,
    multiple: int = MAX_INPUT_MULTIPLE,
    max_side: int = MAX_INPUT_MAX_SIDE,
    precision: str = "float32",
    jit_compile: str = "auto",
    build_options: Mapping[str, Any] | None = None,
    verbose: bool = True,
) -> dict[str, Any]:
    """The largest square input `model` runs inference on within `memory_gib` of memory.

    Doubling, then bisection on the side (:func:`search_largest`), each
    probe in a fresh process (:func:`probe_input`).

    Args:
        model: a vision model name (built at each side, e.g. a classifier),
            or a `.keras` file or `keras.Model` of free input size
            (``input_shape=(None, None, C)``, e.g. a segmenter).
        memory_gib: the budget, the whole process's peak resident memory.
            Default 16.
        batch_size: images per call. Default 1.
        start: the first side. Default 256.
        multiple: sides are multiples of it (the model's stride). Default 32.
        max_side: the largest side tried. Default 8192.
        precision: one of `BENCH_PRECISIONS`. Default "float32".
        jit_compile: "auto", "on" or "off". Default "auto".
        build_options: more builder arguments for a name. Default None.
        verbose: print each probe as it ends. Default True.

    Returns:
        {"model", "memory_gib", "batch_size", "multiple", "max_side",
        "largest_side" (None when not even `multiple` fits),
        "largest_pixels", "reached_max_side", "available_mib_at_start",
        "rows": the probes in order}.

    Raises:
        ValueError: a bad argument, a text model, or a model of one input size.
        RuntimeError: a probe failed for another reason than memory.

    Example:
        >>> largest_input("segmenter.keras", memory_gib=16)["largest_side"]  # doctest: +SKIP
        2048
    """
    import keras

    if not (isinstance(memory_gib, int | float) and memory_gib > 0):
        raise ValueError(f"`memory_gib` must be > 0. Received: memory_gib={memory_gib!r}")
    for name, value in (("batch_size", batch_size), ("start", start), ("multiple", multiple)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be an int >= 1. Received: {name}={value!r}")
    if not isinstance(max_side, int) or max_side < multiple:
        raise ValueError(
            f"`max_side` must be an int >= multiple ({multiple}). Received: max_side={max_side!r}"
        )
    check_choice("precision", precision, BENCH_PRECISIONS)
    check_choice("jit_compile", jit_compile, tuple(BENCH_JIT))
    with tempfile.TemporaryDirectory() as folder:
        if isinstance(model, str) and is_model_name(model):
            if modality(model) != "image":
                raise ValueError(f"--max-input needs an image model. Received: model={model!r}")
            reference, name = model, model
        else:
            loaded = model if isinstance(model, keras.Model) else resolve_model(model)
            if not has_free_input_size(loaded):
                raise ValueError(
                    "the largest input needs a model name or a model of free input size "
                    f"(input_shape=(None, None, C)). Received: input_shape={loaded.input_shape}"
                )
            name = loaded.name
            if isinstance(model, keras.Model):
                reference = os.path.join(folder, "model.keras")
                loaded.save(reference)
            else:
                reference = os.fspath(model)
            del loaded
        budget = 1024 * memory_gib
        rows: list[dict[str, Any]] = []

        def fits(side: int) -> bool:
            row = probe_input(
                reference,
                side,
                memory_mib=budget,
                batch_size=batch_size,
                precision=precision,
                jit_compile=jit_compile,
                build_options=build_options,
            )
            rows.append({"model": name, **row})
            if verbose:
                print(format_row(rows[-1]), flush=True)
            return row["fits"]

        available = available_mib()
        largest = search_largest(fits, start=start, multiple=multiple, max_side=max_side)
    return {
        "model": name,
        "memory_gib": memory_gib,
        "batch_size": batch_size,
        "multiple": multiple,
        "max_side": max_side,
        "largest_side": largest,
        "largest_pixels": None if largest is None else largest * largest,
        "reached_max_side": largest is not None and largest == max_side // multiple * multiple,
        "available_mib_at_start": None if available is None else round(available),
        "rows": rows,
    }
