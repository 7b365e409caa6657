"""`keras-fourier bench`: throughput, latency, memory and scaling of models and mixers.

Two modes:

* model mode, ``keras-fourier bench MODEL``: MODEL is a model name (random
  init), a ``.keras`` file or a ``.tflite`` file. Measures inference
  (``predict_on_batch``) and training-step (``train_on_batch`` after a plain
  ``compile(AdamW, cross-entropy)``) images per second at a batch size,
  batch-1 latency and the resident memory each phase adds at its peak, and reports the
  model's FLOPs (:func:`keras_fourier.flops`), the multiply-adds per second
  each phase reaches and their fraction of the host's limit: the backend's
  matmul rate, measured in the same process on the shape of the model's
  largest Dense product (tokens x C by C x 4C for an MLP), in the compute
  dtype of ``--precision`` (float32, bfloat16, float16 or int8).
  ``--agreement`` adds the top-1 agreement and max logit difference of the
  benchmarked precision against float32, same weights.
* scaling mode, ``keras-fourier bench --scaling``: one block (mixer and MLP,
  pre-norm residuals) at width 384, latency and peak memory against the
  number of tokens, for every token mixer (GFNet Fig. 2), and FNet-style 1D
  mixing against sequence length (FNet Table 5), with the host's matmul
  rate on the block's MLP product at 56x56 tokens. Writes a PNG plot when
  matplotlib is installed (``pip install keras-fourier[plots]``).

Every figure is a median of repeated timings in this process, after warm-up
calls. Results are printed as a table and written atomically as JSON and CSV
(and PNG) into ``--out``. Timings are measurements of one machine at one
moment, never assertions: compare two sides only when measured in one session.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from keras_fourier._startup import native_output_filtered
from keras_fourier.data import get_num_classes, load_image_dataset
from keras_fourier.export.signatures import DEFAULT_SIGNATURE, serving_model
from keras_fourier.fileio import atomic_write_bytes
from keras_fourier.flop_count import _dummy_inputs, flops
from keras_fourier.layers import Mlp
from keras_fourier.models.catalog import (
    VISION_PRESETS,
    canonical_name,
    default_image_size,
    is_model_name,
)
from keras_fourier.models.family import FOURIER_MIXERS, MIXER_NAMES
from keras_fourier.models.vision import MIXERS
from keras_fourier.settings import (
    BENCH_JIT,
    BENCH_PRECISIONS,
    SCALING_GRIDS,
    SCALING_SEQUENCES,
    SCALING_WIDTH,
)
from keras_fourier.validation import check_choice

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
# Keras's quantize() warns once for every layer kind without int8 weights (norms, FFTs, ...).
_NO_QUANTIZE_WARNING = "Layer .* does not have a `quantize` method implemented"


# ----------------------------------------------------------------------------- files


def write_atomic(path: str, data: bytes) -> None:
    """Writes `data` to `path` atomically, creating its folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write_bytes(path, data)


def _csv_bytes(rows: Sequence[dict[str, Any]]) -> bytes:
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue().encode()


def write_results(out: str, stem: str, report: dict[str, Any]) -> list[str]:
    """Writes `report` as OUT/STEM.json and its rows as OUT/STEM.csv, atomically.

    Returns:
        The paths written.
    """
    paths = [os.path.join(out, f"{stem}.json"), os.path.join(out, f"{stem}.csv")]
    write_atomic(paths[0], (json.dumps(report, indent=2) + "\n").encode())
    write_atomic(paths[1], _csv_bytes(report["rows"]))
    return paths


# ----------------------------------------------------------------------------- measuring


class PeakMemory:
    """Resident memory (MiB) that a `with` block added at its peak.

    On Linux the kernel's high-water mark (VmHWM) is reset to the current
    resident size on entry through /proc/self/clear_refs, so the figure is
    the block's peak minus the resident size at its start. Memory that the
    allocator kept from earlier work and reuses is not counted again.
    Elsewhere it is the process's peak so far.
    """

    def __enter__(self) -> PeakMemory:
        self._start = 0.0
        try:
            with open("/proc/self/clear_refs", "w") as file:
                file.write("5")
            self._start = _status_mib("VmRSS:") or 0.0
        except OSError:
            pass
        self.mib: float | None = None
        return self

    def __exit__(self, *exc) -> None:
        self.mib = max(0.0, peak_rss_mib() - self._start)


def _status_mib(field: str) -> float | None:
    try:
        with open("/proc/self/status") as file:
            for line in file:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _available_mib() -> float | None:
    """MemAvailable of /proc/meminfo in MiB, or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _attention_fits(tokens: int, width: int, batch_size: int) -> bool:
    """Whether self-attention's score and softmax matrices fit in the available memory.

    Two float32 (heads, tokens, tokens) matrices per example, as measured
    (16384 tokens, 6 heads: about 11 GiB), against 80% of MemAvailable;
    True where that cannot be read.
    """
    available = _available_mib()
    heads = max(1, width // 64)
    need = 2 * batch_size * heads * tokens**2 * 4 / 2**20
    return available is None or need <= 0.8 * available


def peak_rss_mib() -> float:
    """The process's resident-memory high-water mark in MiB."""
    peak = _status_mib("VmHWM:")
    if peak is not None:
        return peak
    import resource

    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    """Median wall time of `repeats` calls of `fn` after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_rate(
    shape: tuple[int, int, int] = (1024, 1024, 1024), dtype: str = "float32", repeats: int = 5
) -> float:
    """The backend's matmul rate on this machine, in multiply-adds per second.

    Times ``keras.ops.matmul`` of an (M, K) by a (K, N) matrix of `dtype`,
    as the model's layers call it (int8 by int8 gives int32, the product of
    Keras's int8-quantized Dense layers).

    Args:
        shape: (M, K, N). Default (1024, 1024, 1024).
        dtype: "float32" (default), "bfloat16", "float16" or "int8".
        repeats: timed products (median). Default 5.

    Returns:
        M * K * N / median seconds of one product.

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

    def run():
        keras.ops.convert_to_numpy(keras.ops.matmul(a, b))

    return m * k * n / median_seconds(run, repeats)


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
        model(_dummy_inputs(model), training=False)
    finally:
        for layer in layers:
            object.__delattr__(layer, "call")
    if not totals:
        return batch_size * 196, 384, 1536
    rows, k, n = max(totals, key=lambda key: (totals[key], key[2] >= key[1]))
    return batch_size * rows, k, n


def host_limits(
    shape: tuple[int, int, int], dtypes: Sequence[str], repeats: int = 5
) -> dict[str, Any]:
    """The host's matmul rates (GMAC/s) on `shape` for each dtype, and its CPU.

    float32 is always measured, bfloat16 also where the CPU has native
    bfloat16 products (`BF16_FEATURES`), each of `dtypes` besides.

    Args:
        shape: (M, K, N) of the product, see :func:`mlp_matmul_shape`.
        dtypes: further dtypes to measure ("bfloat16", "float16", "int8").
        repeats: timed products per dtype (median). Default 5.

    Returns:
        {"cpu", "cpu_features", "matmul_shape": "MxKxN", "matmul_gmac_s":
        {dtype: rate}}.
    """
    name, features = cpu_description()
    wanted = ["float32"]
    if any(feature in features for feature in BF16_FEATURES):
        wanted.append("bfloat16")
    wanted += [dtype for dtype in dtypes if dtype not in wanted]
    rates = {dtype: round(matmul_rate(shape, dtype, repeats) / 1e9, 2) for dtype in wanted}
    return {
        "cpu": name,
        "cpu_features": features,
        "matmul_shape": "x".join(map(str, shape)),
        "matmul_gmac_s": rates,
    }


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
    }


# ----------------------------------------------------------------------------- models


def named_model_size(name: str) -> tuple[int, int]:
    """The input size and classes a model name is benchmarked at, unless given.

    Args:
        name: a name of `keras_fourier.training.model_names()` (or a file).

    Returns:
        (image size, classes): for the small vision presets, the model that
        ``keras-fourier train --model NAME`` trains (on the digits: 16 pixels
        for gfnet_tiny, 10 classes); for every other name, 224 and 1000
        (ImageNet, as the papers measure).

    Example:
        >>> named_model_size("gfnet_tiny"), named_model_size("gfnet_ti")
        ((16, 10), (224, 1000))
    """
    if is_model_name(name) and canonical_name(name) in VISION_PRESETS:
        return default_image_size(name, data="digits"), get_num_classes("digits")
    return 224, 1000


def _classifier_head(model):
    """The Dense layer that produces the model's single output, or None."""
    import keras

    last = model.layers[-1]
    if len(model.outputs) == 1 and isinstance(last, keras.layers.Dense):
        return last
    return None


def with_precision(model, precision: str, logits: bool = False):
    """A copy of `model` at `precision`, same weights (the model itself when nothing changes).

    A mixed precision is set on every layer of the default float32 policy
    but the classifier head, which stays float32 as the builders make it
    under a global mixed policy (Fourier transforms compute in float32 in any
    case, see layers/spectral.py); "int8" quantizes a float32 copy with
    Keras's ``model.quantize("int8")`` (int8 weights of Dense and
    EinsumDense layers, their inputs quantized per token at run time).

    Args:
        model: a functional or Sequential Keras model.
        precision: one of `BENCH_PRECISIONS`.
        logits: give the classifier head a linear activation. Default False.

    Returns:
        The model at `precision`.

    Raises:
        ValueError: for an unknown `precision`.

    Example:
        >>> with_precision(model, "mixed_bfloat16").layers[1].compute_dtype
        'bfloat16'
    """
    import warnings

    import keras

    check_choice("precision", precision, BENCH_PRECISIONS)
    head = _classifier_head(model)
    linear = head.name if logits and head is not None else None
    policy = "float32" if precision == "int8" else precision
    if policy == "float32" and linear is None and precision != "int8":
        return model

    def clone_layer(layer):
        config = layer.get_config()
        dtype = config.get("dtype")
        is_float32 = isinstance(dtype, dict) and dtype.get("config", {}).get("name") == "float32"
        if is_float32 and layer is not head:
            config["dtype"] = policy
        if layer.name == linear:
            config["activation"] = "linear"
        return layer.__class__.from_config(config)

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        clone = keras.models.clone_model(model, clone_function=clone_layer)
    finally:
        keras.config.set_dtype_policy(previous)
    clone.set_weights(model.get_weights())
    if precision == "int8":
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", _NO_QUANTIZE_WARNING)
            clone.quantize("int8")
    return clone


def precision_agreement(
    model, inputs, precision: str = "mixed_bfloat16", batch_size: int = 16
) -> dict[str, Any]:
    """Top-1 agreement and max logit difference of `model` at `precision` against float32.

    Both sides are copies of `model` with its weights (:func:`with_precision`),
    the classifier head made linear so that logits are compared.

    Args:
        model: a float32 functional classifier (a Dense head), or any
            functional model (its outputs compared, no top-1).
        inputs: an array (or a dict of arrays) of examples.
        precision: one of `BENCH_PRECISIONS`. Default "mixed_bfloat16".
        batch_size: examples per call. Default 16.

    Returns:
        {"top1_agreement": fraction of examples whose arg-max class is the
        same (None without a classifier head), "max_logit_diff": max
        |logits - float32 logits|, "max_abs_logit": max |float32 logits|
        (the scale of the difference), "examples": count}.

    Example:
        >>> precision_agreement(model, images, "float32")["top1_agreement"]
        1.0
    """
    import keras
    import numpy as np

    classifier = _classifier_head(model) is not None
    reference = with_precision(model, "float32", logits=True)
    other = with_precision(model, precision, logits=True)

    def outputs(network):
        values = network.predict(inputs, batch_size=batch_size, verbose=0)
        return np.asarray(keras.tree.flatten(values)[0], dtype="float32")

    expected, actual = outputs(reference), outputs(other)
    agreement = None
    if classifier:
        agreement = float(np.mean(expected.argmax(-1) == actual.argmax(-1)))
    return {
        "top1_agreement": agreement,
        "max_logit_diff": float(np.max(np.abs(actual - expected))),
        "max_abs_logit": float(np.max(np.abs(expected))),
        "examples": len(expected),
    }


def agreement_inputs(model, data: str | None, split: str, examples: int):
    """Images for :func:`precision_agreement`: `examples` of `data`, or uniform 0-255 noise.

    Args:
        model: the model they are for (its input size).
        data: None (seeded uniform noise in [0, 255]) or an image source of
            :func:`keras_fourier.data.load_image_dataset` ("digits",
            "dir:PATH", "tfds:NAME"), read in evaluation mode.
        split: the split of `data`.
        examples: at most this many examples.

    Returns:
        A float32 array (examples, height, width, channels), or the model's
        random inputs for non-image models.
    """
    import numpy as np

    shape = model.input_shape
    if data is None:
        if not (isinstance(shape, tuple) and len(shape) == 4):
            return _random_inputs(model, examples)
        rng = np.random.default_rng(0)
        return (255 * rng.random((examples, *shape[1:]))).astype("float32")
    if not (isinstance(shape, tuple) and len(shape) == 4 and shape[-1] == 3):
        raise ValueError(f"--data needs a model of RGB images. Received: input_shape={shape}")
    import keras

    # The pipeline's Keras preprocessing layers follow the global policy: read in float32.
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        dataset = load_image_dataset(
            data, split, image_size=shape[1], batch_size=examples, training=False
        )
        images, _ = next(iter(dataset))
    finally:
        keras.config.set_dtype_policy(previous)
    return np.asarray(images, dtype="float32")


def _random_inputs(model, batch_size: int):
    import keras
    import numpy as np

    rng = np.random.default_rng(0)

    def make(tensor):
        shape = (batch_size, *tensor.shape[1:])
        if "int" in str(tensor.dtype):
            return np.zeros(shape, dtype=str(tensor.dtype))
        return (255 * rng.random(shape)).astype("float32")

    return keras.tree.map_structure(make, model._inputs_struct)


def _classes(model) -> int | None:
    output = model.output
    if isinstance(output, dict | list | tuple) or len(output.shape) != 2:
        return None
    return int(output.shape[-1])


def benchmark_model(
    model,
    *,
    batch_size: int = 16,
    jit_compile: str = "auto",
    repeats: int = 5,
    train: bool = True,
) -> dict[str, Any]:
    """Inference and training-step throughput, batch-1 latency and peak memory of `model`.

    Args:
        model: a built Keras model with static input shapes besides the batch.
        batch_size: images per call. Default 16.
        jit_compile: "auto" (Keras' default), "on" or "off", passed to compile().
        repeats: timed calls per figure (median). Default 5.
        train: also time `train_on_batch` (classifiers only). Default True.

    Returns:
        A dict of the figures (img/s, ms, MiB).
    """
    import keras
    import numpy as np

    jit = BENCH_JIT[jit_compile]
    inputs = _random_inputs(model, batch_size)
    single = _random_inputs(model, 1)
    classes = _classes(model)
    result: dict[str, Any] = {}
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        jit_compile=jit,
    )
    with PeakMemory() as memory:
        seconds = median_seconds(lambda: model.predict_on_batch(inputs), repeats)
    result["predict_img_s"] = batch_size / seconds
    result["predict_peak_mib"] = memory.mib
    result["latency_ms"] = 1e3 * median_seconds(lambda: model.predict_on_batch(single), repeats)
    if train and classes is not None:
        labels = np.arange(batch_size) % classes
        with PeakMemory() as memory:
            seconds = median_seconds(lambda: model.train_on_batch(inputs, labels), repeats)
        result["train_img_s"] = batch_size / seconds
        result["train_peak_mib"] = memory.mib
    return result


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
        repeats: timed invokes (median). Default 5.

    Returns:
        M * K * N / median seconds of one invoke.
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
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "[\\s\\S]*tf.lite.Interpreter is deprecated")
        warnings.filterwarnings("ignore", "Statistics for quantized inputs were expected")
        content = converter.convert()
    interpreter = Interpreter(model_content=content, num_threads=threads or os.cpu_count())
    interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    interpreter.set_tensor(detail["index"], rng.standard_normal((m, k)).astype("float32"))
    return m * k * n / median_seconds(interpreter.invoke, repeats)


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


# ----------------------------------------------------------------------------- scaling


def scaling_block(mixer: str, tokens_shape: tuple[int, ...], width: int, fft_impl: str):
    """One pre-norm block, ``x + mixer(norm(x))`` then ``x + mlp(norm(x))``, as a model.

    AFNO uses 8 blocks, gnConv order 3, attention one head per 64 channels
    (DeiT); every other argument is the layer's default.
    """
    import keras

    kwargs = {"fft_impl": fft_impl} if mixer in FOURIER_MIXERS else {}
    if mixer == "afno":
        kwargs["num_blocks"] = 8
    if mixer in ("gnconv", "gnconv_gf"):
        kwargs["order"] = 3
    if mixer == "attention":
        kwargs["num_heads"] = max(1, width // 64)
    inputs = keras.Input((*tokens_shape, width))
    norm = keras.layers.LayerNormalization(epsilon=1e-6)
    x = inputs + MIXERS[mixer](**kwargs)(norm(inputs))
    x = x + Mlp()(keras.layers.LayerNormalization(epsilon=1e-6)(x))
    return keras.Model(inputs, x, name=f"{mixer}_block")


def _scaling_series(
    mixer: str,
    layout: str,
    shapes: Sequence[tuple[int, ...]],
    impl: str,
    width: int,
    batch_size: int,
    jit_compile: str,
    repeats: int,
    precision: str,
) -> list[dict[str, Any]]:
    """One mixer's points in increasing size; run in a fresh process by run_scaling."""
    import keras
    import numpy as np

    keras.mixed_precision.set_global_policy(precision)
    jit = BENCH_JIT[jit_compile]
    baseline = _status_mib("VmRSS:")
    rows = []
    for shape in shapes:
        tokens = int(np.prod(shape))
        if mixer == "attention" and not _attention_fits(tokens, width, batch_size):
            print(f"mixer={mixer}  tokens={tokens}  skipped: not enough memory", flush=True)
            break
        model = scaling_block(mixer, shape, width, impl if impl != "-" else "auto")
        model.compile(jit_compile=jit)
        x = np.random.default_rng(0).standard_normal((batch_size, *shape, width))
        x = x.astype("float32")
        seconds = median_seconds(lambda model=model, x=x: model.predict_on_batch(x), repeats)
        # Points grow, so the process's high-water mark is this point's peak.
        peak = None if baseline is None else peak_rss_mib() - baseline
        rows.append(
            {
                "mixer": mixer,
                "layout": layout,
                "shape": "x".join(map(str, shape)),
                "tokens": tokens,
                "width": width,
                "batch_size": batch_size,
                "fft_impl": impl,
                "latency_ms": round(1e3 * seconds, 3),
                "peak_mib": None if peak is None else round(peak, 1),
                "flops_per_sample": flops(model),
            }
        )
        print(_format_row(rows[-1]), flush=True)
        del model
    return rows


def run_scaling(
    *,
    mixers: Sequence[str] = MIXER_NAMES,
    grids: Sequence[int] = SCALING_GRIDS,
    sequences: Sequence[int] = SCALING_SEQUENCES,
    width: int = SCALING_WIDTH,
    batch_size: int = 1,
    fft_impls: Sequence[str] = ("auto",),
    jit_compile: str = "auto",
    repeats: int = 5,
    precision: str = "float32",
) -> list[dict[str, Any]]:
    """Latency and peak memory of one block against the token count.

    2D mixers run on (grid, grid) tokens; "fourier" and "attention" (the
    quadratic baseline) also run FNet-style on 1D sequences. Each series (a
    mixer, a layout and an fft_impl) runs in a fresh process, its points in
    increasing size, so a point's memory figure is the resident memory above
    that process's start at the point's peak (weights, activations and
    workspace), unaffected by the other series.

    Returns:
        One row per (mixer, layout, tokens, fft_impl).
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    series = [(m, "2d", [(g, g) for g in sorted(grids)]) for m in mixers]
    series += [
        (m, "1d", [(n,) for n in sorted(sequences)])
        for m in mixers
        if m in ("fourier", "attention")
    ]
    rows = []
    context = multiprocessing.get_context("spawn")
    for mixer, layout, shapes in series:
        for impl in fft_impls if mixer in FOURIER_MIXERS else ("-",):
            with ProcessPoolExecutor(1, mp_context=context) as pool:
                rows += pool.submit(
                    _scaling_series,
                    mixer,
                    layout,
                    shapes,
                    impl,
                    width,
                    batch_size,
                    jit_compile,
                    repeats,
                    precision,
                ).result()
    return rows


def plot_scaling(rows: Sequence[dict[str, Any]], path: str, title: str) -> bool:
    """Writes latency and peak memory against tokens as a PNG; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    series: dict[str, list] = {}
    for row in rows:
        label = row["mixer"] + (" (1D)" if row["layout"] == "1d" else "")
        if row["fft_impl"] not in ("-", "auto"):
            label += f" [{row['fft_impl']}]"
        series.setdefault(label, []).append(row)
    for label, points in series.items():
        points = sorted(points, key=lambda r: r["tokens"])
        tokens = [p["tokens"] for p in points]
        style = "--" if "(1D)" in label else "-"
        axes[0].plot(tokens, [p["latency_ms"] for p in points], style, marker="o", label=label)
        axes[1].plot(tokens, [p["peak_mib"] or math.nan for p in points], style, marker="o")
    for axis, ylabel in zip(
        axes, ("latency (ms)", "resident memory added at peak (MiB)"), strict=True
    ):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("tokens")
        axis.set_ylabel(ylabel)
        axis.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    write_atomic(path, buffer.getvalue())
    return True


# ----------------------------------------------------------------------------- tables


def _cell(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _format_row(row: dict[str, Any]) -> str:
    return "  ".join(f"{key}={_cell(value)}" for key, value in row.items() if value is not None)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as an aligned text table, one column per key."""
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    cells = [columns] + [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(text.rjust(width) for text, width in zip(line, widths, strict=True))
        for line in cells
    )
