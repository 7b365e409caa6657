"""TFLite timing: a `.tflite` file in LiteRT (XNNPACK), against LiteRT's own matmul rate."""

from __future__ import annotations

import os
from typing import Any

from keras_fourier._startup import native_output_filtered
from keras_fourier.bench.host import (
    HostLimits,
    cpu_description,
    host_columns,
    mlp_matmul_shape,
    throughput,
)
from keras_fourier.bench.measure import PeakMemory, median_seconds
from keras_fourier.bench.report import rounded
from keras_fourier.export.journal import recover_around
from keras_fourier.export.signatures import DEFAULT_SIGNATURE, serving_model
from keras_fourier.flop_count import flops
from keras_fourier.limits import check_memory


def benchmark_tflite(
    path: str, *, batch_size: int = 16, threads: int | None = None, repeats: int = 5
) -> dict[str, Any]:
    """Inference throughput and batch-1 latency of a `.tflite` file (ai_edge_litert).

    Args:
        path: the TFLite file (float32, dynamic-range or int8).
        batch_size: rows per invoke for the throughput. Default 16.
        threads: interpreter threads. Default None: os.cpu_count().
        repeats: timed invokes (median). Default 5.

    Returns:
        A dict with predict_img_s, latency_ms, predict_peak_mib and the input dtype.
    """
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    check_tflite_batch(path, batch_size)

    def timed(batch: int) -> tuple[float, float | None, str]:
        with PeakMemory() as memory:
            interpreter = Interpreter(model_path=path, num_threads=threads or os.cpu_count())
            detail = interpreter.get_input_details()[0]
            interpreter.resize_tensor_input(detail["index"], [batch, *detail["shape"][1:]])
            with native_output_filtered():  # LiteRT's XNNPACK delegate line
                interpreter.allocate_tensors()
            detail = interpreter.get_input_details()[0]
            rng = np.random.default_rng(0)
            data = (255 * rng.random(detail["shape"])).astype(detail["dtype"])
            interpreter.set_tensor(detail["index"], data)
            seconds = median_seconds(interpreter.invoke, repeats)
        return seconds, memory.mib, np.dtype(detail["dtype"]).name

    seconds, peak, dtype = timed(batch_size)
    latency, _, _ = timed(1)
    return {
        "predict_img_s": batch_size / seconds,
        "predict_peak_mib": peak,
        "latency_ms": 1e3 * latency,
        "input_dtype": dtype,
    }


def check_tflite_batch(path: str, batch_size: int) -> None:
    """Refuses a batch whose activations in a `.tflite` file would exceed the memory ceiling.

    The tensors of a batch-dependent shape (``shape_signature`` -1 first)
    are counted per example, times `batch_size`, against
    ``KERAS_FOURIER_MAX_MEMORY`` (:func:`keras_fourier.limits.max_memory`).

    Raises:
        ValueError: one line naming the memory needed and the batch size.

    Example:
        >>> check_tflite_batch("gfnet_tiny.tflite", 16)  # doctest: +SKIP
    """
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    per_example = 0
    for tensor in Interpreter(model_path=path).get_tensor_details():
        signature = tensor.get("shape_signature")
        if signature is not None and len(signature) and signature[0] == -1:
            size = int(np.prod([abs(int(d)) for d in signature[1:]], dtype=np.int64))
            per_example += size * np.dtype(tensor["dtype"]).itemsize
    check_memory(
        f"The LiteRT model {path!r} at a batch of {batch_size}",
        batch_size * per_example,
        f"batch_size={batch_size}",
    )


def tflite_is_integer(path: str) -> bool:
    """Whether a .tflite file computes in int8 (full-integer: it quantizes its inputs)."""
    from ai_edge_litert.interpreter import Interpreter

    operations = Interpreter(model_path=path)._get_ops_details()
    return any(op["op_name"] == "QUANTIZE" for op in operations)


def tflite_agreement(path: str, reference, inputs, batch_size: int = 16) -> dict[str, Any]:
    """Top-1 agreement and max output difference of a .tflite file against Keras `reference`.

    Args:
        path: a file written by :func:`keras_fourier.export.tflite`.
        reference: the float32 Keras model it was exported from.
        inputs: an array of examples (single-input models).
        batch_size: examples per call. Default 16.

    Returns:
        {"output": the file's output ("probabilities" or "logits"),
        "top1_agreement", "max_abs_diff" (of that output), "max_abs_reference"
        (max |Keras output|, the scale of the difference), "examples"}.
    """
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=path).get_signature_runner(DEFAULT_SIGNATURE)
    (output,) = runner.get_output_details()
    (name,) = runner.get_input_details()
    serving = serving_model(reference, "logits" if output == "logits" else "probabilities")
    actual, expected = [], []
    for start in range(0, len(inputs), batch_size):
        batch = {name: inputs[start : start + batch_size]}
        actual.append(runner(**batch)[output])
        expected.append(next(iter(serving.run(batch).values())))
    actual, expected = np.concatenate(actual), np.concatenate(expected)
    return {
        "output": output,
        "top1_agreement": float(np.mean(actual.argmax(-1) == expected.argmax(-1))),
        "max_abs_diff": float(np.max(np.abs(actual - expected))),
        "max_abs_reference": float(np.max(np.abs(expected))),
        "examples": len(expected),
    }


def bench_tflite(
    path: str,
    *,
    reference=None,
    batch_size: int = 16,
    threads: int | None = None,
    repeats: int = 5,
    agreement_inputs: Any = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The row of a .tflite file; with its Keras `reference`, FLOPs, host fractions, agreement.

    An export killed while placing `path` is completed (or undone) first
    (:func:`keras_fourier.export.journal.recover_around`). With `reference`,
    LiteRT's own matmul rate (:class:`HostLimits` with runtime "tflite",
    the same threads, measured before and after the file's timing) is the
    limit: float32, or int8 for a full-integer file.

    Args:
        path: the `.tflite` file.
        reference: the float32 Keras model it was exported from, or None.
        batch_size: rows per invoke. Default 16.
        threads: interpreter threads. Default None: os.cpu_count().
        repeats: timed invokes (median). Default 5.
        agreement_inputs: examples for :func:`tflite_agreement` (needs
            `reference`), or None.

    Returns:
        ([row], host).
    """

    recover_around(path)
    integer = tflite_is_integer(path)
    dtype = "int8" if integer else "float32"
    limits = None
    if reference is not None:
        shape = mlp_matmul_shape(reference, batch_size)
        limits = HostLimits(shape, [dtype], repeats, runtime="tflite", threads=threads)
        limits.measure()
    figures = benchmark_tflite(path, batch_size=batch_size, threads=threads, repeats=repeats)
    row = {
        "model": os.path.basename(path),
        "runtime": "tflite",
        "precision": "int8" if integer else "float",
        "batch_size": batch_size,
        **rounded(figures),
    }
    if limits is None:
        name, features = cpu_description()
        return [row], {"cpu": name, "cpu_features": features}
    limits.measure()
    host = limits.report()
    gflops = flops(reference) / 1e9
    row.update(
        gflops=round(gflops, 4),
        **throughput(gflops, figures, limits.rates, dtype),
        **host_columns(host, dtype),
    )
    if agreement_inputs is not None:
        row.update(rounded(tflite_agreement(path, reference, agreement_inputs)))
    return [row], host
