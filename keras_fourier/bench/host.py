"""The host's limits: its CPU, and the matmul rate a model's products can reach on it.

A model's multiply-adds per second mean little alone; the bench reports them
as a fraction of the host's matmul rate on the shape of the model's largest
Dense product, in the compute dtype of the benchmarked precision, with the
backend (or LiteRT) the model runs on and the same threads. A limit must be
one: :class:`HostLimits` keeps the best rate of several rounds, measured
before and between the model's timed phases, so that a busy moment of a
shared machine lowers neither side alone. A model still above its limit is
a measurement error (:func:`throughput` says so), never a fraction above 1.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from typing import Any

from keras_fourier._startup import native_output_filtered
from keras_fourier.bench.measure import accelerator, best_seconds
from keras_fourier.flop_count import zero_inputs

# The dtype of the matrix products under each precision: the host's limit is its matmul rate.
COMPUTE_DTYPES = {
    "float32": "float32",
    "mixed_bfloat16": "bfloat16",
    "mixed_float16": "float16",
    "int8": "int8",
}
# /proc/cpuinfo flags that decide which low-precision matmuls a CPU runs natively.
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
BF16_FEATURES = ("avx512_bf16", "amx_bf16")
# The limit's product keeps at most this many rows: the rate is flat long before.
MAX_LIMIT_ROWS = 65536
RUNTIMES = ("keras", "tflite")
# Products timed together on a GPU (or TPU) by :func:`matmul_rate`.
ACCELERATOR_CHAIN = 32


def cpu_description() -> tuple[str, list[str]]:
    """The CPU's model name and which of `CPU_FEATURES` it has (Linux /proc/cpuinfo).

    Returns:
        (model name or platform.processor(), the features present); no
        features where /proc/cpuinfo cannot be read.
    """
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return name, [feature for feature in CPU_FEATURES if feature in flags]


def machine() -> dict[str, Any]:
    """The machine's description written beside every result."""
    import keras

    return {
        "platform": platform.platform(),
        "processor": cpu_description()[0],
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "keras": keras.__version__,
        "backend": keras.backend.backend(),
        "accelerator": accelerator(),
    }


def backend_threads() -> int:
    """The threads the Keras backend runs one op on in this process (its intra-op pool)."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count() or 1
    if backend == "torch":
        import torch

        return torch.get_num_threads()
    return os.cpu_count() or 1


def matmul_rate(
    shape: tuple[int, int, int] = (1024, 1024, 1024), dtype: str = "float32", repeats: int = 5
) -> float:
    """The backend's matmul rate on this machine, in multiply-adds per second.

    Times ``keras.ops.matmul`` of an (M, K) by a (K, N) matrix of `dtype`,
    as the model's layers call it (int8 by int8 gives int32, the product of
    Keras's int8-quantized Dense layers), in this process's threads, or on
    the GPU the backend computes on (:func:`~keras_fourier.bench.measure.accelerator`),
    there `ACCELERATOR_CHAIN` products per timing.

    Args:
        shape: (M, K, N). Default (1024, 1024, 1024).
        dtype: "float32" (default), "bfloat16", "float16" or "int8".
        repeats: timed products; the fastest counts. Default 5.

    Returns:
        M * K * N / seconds of the fastest product.

    Example:
        >>> matmul_rate((3136, 384, 1536), "bfloat16") > 0
        True
    """
    import keras
    import numpy as np

    m, k, n = shape
    rng = np.random.default_rng(0)

    def operand(rows: int, cols: int):
        if dtype == "int8":
            return keras.ops.convert_to_tensor(rng.integers(-127, 128, (rows, cols), "int8"))
        values = keras.ops.convert_to_tensor(rng.random((rows, cols), "float32"))
        return keras.ops.cast(values, dtype)

    a, b = operand(m, k), operand(k, n)
    # An accelerator runs products asynchronously, each in tens of microseconds: a chain of
    # them per timing, so that the launch and the wait do not count as the product's time.
    chain = 1 if accelerator() is None else ACCELERATOR_CHAIN

    def run():
        for _ in range(chain):
            product = keras.ops.matmul(a, b)
        # On a GPU, one element back to the host waits for the products without timing the
        # copy of the whole result, which would dominate; on a CPU the result is already there.
        keras.ops.convert_to_numpy(product if chain == 1 else product[:1, :1])

    return chain * m * k * n / best_seconds(run, repeats)


def tflite_matmul_rate(
    shape: tuple[int, int, int], int8: bool, threads: int | None = None, repeats: int = 5
) -> float:
    """LiteRT's matmul rate (XNNPACK) on this machine, in multiply-adds per second.

    A one-layer TFLite model, (M, K) inputs by a (K, N) Dense kernel, float32
    or full-integer int8 (float32 inputs quantized in the graph, as the int8
    exports do), timed in `ai_edge_litert` with `threads` threads.

    Args:
        shape: (M, K, N).
        int8: full-integer int8 instead of float32.
        threads: interpreter threads. Default None: os.cpu_count().
        repeats: timed invokes; the fastest counts. Default 5.

    Returns:
        M * K * N / seconds of the fastest invoke.
    """
    import warnings

    import numpy as np
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    m, k, n = shape
    rng = np.random.default_rng(0)
    module = tf.Module()
    module.kernel = tf.Variable((rng.standard_normal((k, n)) / np.sqrt(k)).astype("float32"))
    product = tf.function(lambda x: tf.matmul(x, module.kernel)).get_concrete_function(
        tf.TensorSpec((m, k), tf.float32)
    )
    converter = tf.lite.TFLiteConverter.from_concrete_functions([product], module)
    if int8:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.representative_dataset = lambda: (
            [rng.standard_normal((m, k)).astype("float32")] for _ in range(2)
        )
    with warnings.catch_warnings(), native_output_filtered():  # the quantizer's C++ line
        warnings.filterwarnings("ignore", "[\\s\\S]*tf.lite.Interpreter is deprecated")
        warnings.filterwarnings("ignore", "Statistics for quantized inputs were expected")
        content = converter.convert()
        interpreter = Interpreter(model_content=content, num_threads=threads or os.cpu_count())
        interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    interpreter.set_tensor(detail["index"], rng.standard_normal((m, k)).astype("float32"))
    return m * k * n / best_seconds(interpreter.invoke, repeats)


def mlp_matmul_shape(model, batch_size: int) -> tuple[int, int, int]:
    """(M, K, N) of the Dense product that carries most of `model`'s Dense multiply-adds.

    Every Dense layer is called once in a batch-1 forward pass; products of
    the same shape are summed and the largest total wins (the expanding one
    of an MLP's pair on a tie): ``(batch_size * tokens, C, 4C)`` for a
    Transformer-style MLP.

    Args:
        model: a built Keras model with static input shapes besides the batch.
        batch_size: images per call; M counts the rows of a whole batch.

    Returns:
        (M, K, N); (batch_size * 196, 384, 1536), GFNet-XS's, for a model
        without Dense layers.
    """
    import keras
    import numpy as np

    totals: dict[tuple[int, int, int], int] = {}
    layers = [
        layer
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.Dense)
    ]

    def recorded(layer):
        call = layer.call

        def call_and_record(inputs, *args, **kwargs):
            rows = int(np.prod(inputs.shape[:-1]))
            key = (rows, int(inputs.shape[-1]), int(layer.units))
            totals[key] = totals.get(key, 0) + rows * key[1] * key[2]
            return call(inputs, *args, **kwargs)

        return call_and_record

    for layer in layers:
        object.__setattr__(layer, "call", recorded(layer))
    try:
        model(zero_inputs(model), training=False)
    finally:
        for layer in layers:
            object.__delattr__(layer, "call")
    if not totals:
        return batch_size * 196, 384, 1536
    rows, k, n = max(totals, key=lambda key: (totals[key], key[2] >= key[1]))
    return batch_size * rows, k, n


class HostLimits:
    """The host's matmul rates on one product shape: the best of interleaved rounds.

    Each :meth:`measure` is a round: every dtype timed once (the fastest of
    `repeats` products), in the runtime and threads of the model. A
    benchmark calls it before and between its timed phases and once after,
    and a dtype's limit is the best rate it reached in any round, so that a
    busy moment of a shared machine cannot make the limit lower than what
    the model itself reached beside it.

    float32 is always measured, bfloat16 also where the CPU has native
    bfloat16 products (`BF16_FEATURES`), each of `dtypes` besides (int8 on
    "tflite" is its full-integer product).

    Args:
        shape: (M, K, N) of the product, see :func:`mlp_matmul_shape`; M is
            capped at `MAX_LIMIT_ROWS`.
        dtypes: further dtypes to measure ("bfloat16", "float16", "int8").
        repeats: timed products per dtype and round. Default 5.
        runtime: "keras" (the backend's `keras.ops.matmul`, in this
            process's threads) or "tflite" (LiteRT with `threads`).
        threads: LiteRT interpreter threads. Default None: os.cpu_count().

    Example:
        >>> limits = HostLimits((3136, 384, 1536), ["bfloat16"])
        >>> limits.measure(); limits.measure()
        >>> limits.report()["matmul_rounds"]
        2
    """

    def __init__(
        self,
        shape: tuple[int, int, int],
        dtypes: Sequence[str] = (),
        repeats: int = 5,
        runtime: str = "keras",
        threads: int | None = None,
    ) -> None:
        if runtime not in RUNTIMES:
            raise ValueError(f"`runtime` must be one of {RUNTIMES}. Received: runtime={runtime!r}")
        self.shape = (min(shape[0], MAX_LIMIT_ROWS), shape[1], shape[2])
        self.cpu, self.features = cpu_description()
        wanted = ["float32"]
        if runtime == "keras" and any(feature in self.features for feature in BF16_FEATURES):
            wanted.append("bfloat16")
        self.dtypes = wanted + [dtype for dtype in dtypes if dtype not in wanted]
        self.repeats = repeats
        self.runtime = runtime
        self.threads = (threads or os.cpu_count() or 1) if runtime == "tflite" else None
        self.rounds = 0
        self._best: dict[str, float] = {}

    def measure(self) -> None:
        """One round: each dtype's rate, keeping the best so far."""
        for dtype in self.dtypes:
            if self.runtime == "tflite":
                rate = tflite_matmul_rate(self.shape, dtype == "int8", self.threads, self.repeats)
            else:
                rate = matmul_rate(self.shape, dtype, self.repeats)
            self._best[dtype] = max(rate, self._best.get(dtype, 0.0))
        self.rounds += 1

    @property
    def rates(self) -> dict[str, float]:
        """{dtype: best rate in GMAC/s}, measuring a round first if none was."""
        if not self.rounds:
            self.measure()
        return {dtype: rate / 1e9 for dtype, rate in self._best.items()}

    def report(self) -> dict[str, Any]:
        """{"cpu", "cpu_features", "accelerator", "matmul_shape": "MxKxN", "matmul_runtime",
        "matmul_threads", "matmul_rounds", "matmul_gmac_s": {dtype: rate}}.

        On a GPU ("accelerator" names it, None on a CPU), the rates are the GPU's."""
        rates = {dtype: round(rate, 2) for dtype, rate in self.rates.items()}
        return {
            "cpu": self.cpu,
            "cpu_features": self.features,
            "accelerator": accelerator() if self.runtime == "keras" else None,
            "matmul_shape": "x".join(map(str, self.shape)),
            "matmul_runtime": self.runtime,
            "matmul_threads": self.threads or backend_threads(),
            "matmul_rounds": self.rounds,
            "matmul_gmac_s": rates,
        }


def host_limits(
    shape: tuple[int, int, int], dtypes: Sequence[str], repeats: int = 5, rounds: int = 3
) -> dict[str, Any]:
    """The host's matmul rates (GMAC/s) on `shape`, best of `rounds` rounds, and its CPU.

    Args:
        shape: (M, K, N) of the product, see :func:`mlp_matmul_shape`.
        dtypes: further dtypes to measure besides float32 (and bfloat16 on
            CPUs that have it): "bfloat16", "float16", "int8".
        repeats: timed products per dtype and round. Default 5.
        rounds: rounds (see :class:`HostLimits`). Default 3.

    Returns:
        :meth:`HostLimits.report`.
    """
    limits = HostLimits(shape, dtypes, repeats)
    for _ in range(rounds):
        limits.measure()
    return limits.report()


def throughput(
    gflops: float, figures: dict[str, Any], limits: dict[str, float], dtype: str
) -> dict[str, Any]:
    """Multiply-adds per second of each timed phase and its fraction of the host's limit.

    A training step counts 3 forward passes (forward, and the two products
    of each layer's backward pass); its limit is float32 for int8 models,
    whose gradients are float. A phase above its limit is a measurement
    error: its fraction is None and `measurement_error` names it.

    Args:
        gflops: the model's GFLOPs (multiply-adds) per example.
        figures: the timed figures, "predict_img_s" and maybe "train_img_s".
        limits: {dtype: GMAC/s} of the host (:attr:`HostLimits.rates`).
        dtype: the compute dtype of the products (see `COMPUTE_DTYPES`).

    Returns:
        {"predict_gmac_s", "predict_fraction", "train_gmac_s",
        "train_fraction", "measurement_error" (only when one is)}.

    Example:
        >>> throughput(1.0, {"predict_img_s": 20.0}, {"float32": 40.0}, "float32")
        {'predict_gmac_s': 20.0, 'predict_fraction': 0.5}
    """
    result: dict[str, Any] = {}
    errors = []
    train_dtype = "float32" if dtype == "int8" else dtype
    for phase, passes, limit_dtype in (("predict", 1, dtype), ("train", 3, train_dtype)):
        if f"{phase}_img_s" not in figures:
            continue
        rate = passes * gflops * figures[f"{phase}_img_s"]
        limit = limits[limit_dtype]
        result[f"{phase}_gmac_s"] = round(rate, 2)
        # A limit measured as 0 (a tiny matmul, rounded) gives no fraction.
        fraction = rate / limit if limit > 0 else None
        if fraction is not None and fraction > 1:
            errors.append(
                f"{phase} {rate:.4g} GMAC/s is above the host's {limit_dtype} limit "
                f"{limit:.4g} GMAC/s"
            )
            fraction = None
        result[f"{phase}_fraction"] = None if fraction is None else round(fraction, 4)
    if errors:
        result["measurement_error"] = "; ".join(errors)
    return result


def host_columns(host: dict[str, Any], dtype: str) -> dict[str, Any]:
    """The host's rates as row columns, so that the CSV alone names the limits."""
    columns = {f"host_{name}_gmac_s": rate for name, rate in host["matmul_gmac_s"].items()}
    return {**columns, "limit_dtype": dtype}
