"""Model timing: throughput, latency and peak memory of a Keras model at a precision.

Classifiers (one (B, classes) output), dense-prediction models (one
(B, H, W, classes) output, e.g. a segmenter), field models and detectors
alike: inference (``predict_on_batch``) and training-step
(``train_on_batch`` after ``compile(AdamW, loss)``: sparse cross-entropy,
per pixel for dense models; MSE for fields; a detector's own loss on seeded
ground-truth boxes and masks) images per second, batch-1 latency and the
resident memory each phase adds at its peak. A model that takes any input
size (``input_shape=(None, None, 3)``) is timed at each of several sizes
(512 and 1024 by default, as dense prediction is measured), batch 1 and 8.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from keras_fourier.bench.host import (
    COMPUTE_DTYPES,
    HostLimits,
    host_columns,
    mlp_matmul_shape,
    throughput,
)
from keras_fourier.bench.measure import PeakMemory, median_seconds
from keras_fourier.bench.report import rounded
from keras_fourier.detection import RetinaNetLoss, TwoStageDetector
from keras_fourier.detection.models import is_detector
from keras_fourier.detection.targets import MASK_CROP, MAX_BOXES, PADDING_CLASS, TARGET_COLUMNS
from keras_fourier.flop_count import flops
from keras_fourier.layers.detection import RAW_BOX_COLUMNS
from keras_fourier.layers.spectral import dft_precision_scope, get_dft_precision
from keras_fourier.models.catalog import (
    VISION_PRESETS,
    canonical_name,
    default_image_size,
    is_model_name,
)
from keras_fourier.models.clone import clone_with
from keras_fourier.models.fourcastnet_family import VARIANTS as FOURCASTNET_VARIANTS
from keras_fourier.models.kinds import classifier_head, is_field_model
from keras_fourier.models.names import FIELD_PRESETS, modality
from keras_fourier.settings import BENCH_JIT, BENCH_PRECISIONS, DIGITS_NUM_CLASSES
from keras_fourier.validation import check_choice

# Sizes and batches of a model that takes any input size (dense prediction at high resolution).
FREE_SIZE_IMAGE_SIZES = (512, 1024)
FREE_SIZE_BATCH_SIZES = (1, 8)
# Keras's quantize() warns once for every layer kind without int8 weights (norms, FFTs, ...).
_NO_QUANTIZE_WARNING = "Layer .* does not have a `quantize` method implemented"


def named_model_size(name: str) -> tuple[int | tuple[int, int], int]:
    """The input size and classes a model name is benchmarked at, unless given.

    Args:
        name: a name of `keras_fourier.models.catalog.model_names()` (or a file).

    Returns:
        (image size, classes): for the small vision presets, the model that
        ``keras-fourier train --model NAME`` trains (on the digits: 16 pixels
        for gfnet_tiny, 10 classes); for every other name, 224 and 1000
        (ImageNet, as the papers measure); for a field model (FourCastNet),
        its row's grid and channels (720 x 1440, 20: ERA5 at 0.25 degrees).

    Example:
        >>> named_model_size("gfnet_tiny"), named_model_size("gfnet_ti")
        ((16, 10), (224, 1000))
    """
    if is_model_name(name) and modality(name) == "field":
        spec = FOURCASTNET_VARIANTS[FIELD_PRESETS[canonical_name(name)]["variant"]]
        return spec.image_size, spec.in_channels
    if is_model_name(name) and canonical_name(name) in VISION_PRESETS:
        # The default data of `keras-fourier train`: the digits.
        return default_image_size(name, data="digits"), DIGITS_NUM_CLASSES
    return 224, 1000


def has_free_input_size(model) -> bool:
    """Whether `model` takes images of any size: one (B, None, None, C) input."""
    shape = model.input_shape
    return (
        isinstance(shape, tuple)
        and len(shape) == 4
        and shape[1] is None
        and shape[2] is None
        and shape[3] is not None
    )


def at_input_size(model, image_size: int):
    """`model` (same layers, same weights) with a static (image_size, image_size) input.

    For a model of free input size: the benchmarks, FLOP counts and the
    product shapes need static shapes besides the batch.

    Args:
        model: a model for which :func:`has_free_input_size` holds.
        image_size: the height and width.

    Returns:
        A functional model that calls `model` on a static input.
    """
    import keras

    channels = model.input_shape[-1]
    inputs = keras.Input((image_size, image_size, channels), name=model.input.name)
    return keras.Model(inputs, model(inputs), name=model.name)


def _output_rank(model) -> int | None:
    """The rank of the model's single output tensor; None for several or dict outputs."""
    if len(model.outputs) != 1 or isinstance(model.output, dict):
        return None
    return len(model.output.shape)


def _has_class_scores(model) -> bool:
    """A classifier (a Dense head) or a dense-prediction model ((B, H, W, classes) output)."""
    rank = _output_rank(model)
    return rank == 4 or (rank == 2 and classifier_head(model) is not None)


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
    check_choice("precision", precision, BENCH_PRECISIONS)
    head = classifier_head(model)
    linear = head.name if logits and head is not None else None
    policy = None if precision in ("float32", "int8") else precision
    if policy is None and linear is None and precision != "int8":
        return model
    keep = () if head is None else (head.name,)
    clone = clone_with(model, linear_head=linear, dtype_policy=policy, keep_dtype=keep)
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
    the classifier head made linear so that logits are compared. The
    float32 side runs the matmul DFT in float32, `model` at `precision` at
    the DFT precision set (:func:`keras_fourier.layers.spectral.set_dft_precision`).

    Args:
        model: a float32 functional classifier (a Dense head), a
            dense-prediction model ((B, H, W, classes) output: the agreement
            is per pixel), or any functional model (its outputs compared, no
            top-1).
        inputs: an array (or a dict of arrays) of examples.
        precision: one of `BENCH_PRECISIONS`. Default "mixed_bfloat16".
        batch_size: examples per call. Default 16.

    Returns:
        {"top1_agreement": fraction of examples (pixels) whose arg-max class
        is the same (None without class scores), "max_logit_diff": max
        |logits - float32 logits|, "max_abs_logit": max |float32 logits|
        (the scale of the difference), "examples": count}.

    Example:
        >>> precision_agreement(model, images, "float32")["top1_agreement"]
        1.0
    """
    import keras
    import numpy as np

    scores = _has_class_scores(model)
    reference = with_precision(model, "float32", logits=True)
    other = with_precision(model, precision, logits=True)

    def outputs(network):
        values = network.predict(inputs, batch_size=batch_size, verbose=0)
        return np.asarray(keras.tree.flatten(values)[0], dtype="float32")

    if other is reference:  # two models, so that each traces its own DFT precision
        other = clone_with(model)
    with dft_precision_scope("float32"):
        expected = outputs(reference)
    actual = outputs(other)
    agreement = None
    if scores:
        agreement = float(np.mean(expected.argmax(-1) == actual.argmax(-1)))
    return {
        "top1_agreement": agreement,
        "max_logit_diff": float(np.max(np.abs(actual - expected))),
        "max_abs_logit": float(np.max(np.abs(expected))),
        "examples": len(expected),
    }


def random_inputs(model, batch_size: int):
    """Seeded inputs of `model` for a batch: uniform 0-255 floats, zeros for integer inputs."""
    import keras
    import numpy as np

    rng = np.random.default_rng(0)

    def make(tensor):
        shape = (batch_size, *tensor.shape[1:])
        if "int" in str(tensor.dtype):
            return np.zeros(shape, dtype=str(tensor.dtype))
        return (255 * rng.random(shape)).astype("float32")

    return keras.tree.map_structure(make, model._inputs_struct)


# Ground-truth boxes per image of a detector's timed training step (of the pipelines' rows).
BENCH_BOXES = 5


def _box_targets(model, batch_size: int, num_classes: int, masks: bool):
    """Seeded detection targets: `BENCH_BOXES` boxes per image in the pipelines' rows.

    Boxes of 10-50 % of the image's sides, anywhere in it, random classes;
    rows padded to the pipelines' 100 (class -1); with `masks`, each box's
    56 x 56 box-local mask is an ellipse filling its frame.
    """
    import numpy as np

    height, width = model.input_shape[1:3]
    rng = np.random.default_rng(0)
    rows = np.zeros((batch_size, MAX_BOXES, len(TARGET_COLUMNS)), "float32")
    rows[..., 4] = PADDING_CLASS
    size = rng.uniform(0.1, 0.5, (batch_size, BENCH_BOXES, 2)) * (width, height)
    corner = rng.uniform(0, 1, (batch_size, BENCH_BOXES, 2)) * ((width, height) - size)
    rows[:, :BENCH_BOXES, :4] = np.concatenate([corner, corner + size], -1)
    rows[:, :BENCH_BOXES, 4] = rng.integers(0, num_classes, (batch_size, BENCH_BOXES))
    rows[:, :BENCH_BOXES, 6] = size.prod(-1)
    rows[..., 7] = 1.0
    if not masks:
        return rows
    cells = (np.arange(MASK_CROP) + 0.5) / MASK_CROP - 0.5
    ellipse = (cells[:, None] ** 2 + cells[None, :] ** 2 <= 0.25).astype("float32")
    box_masks = np.zeros((batch_size, MAX_BOXES, MASK_CROP, MASK_CROP), "float32")
    box_masks[:, :BENCH_BOXES] = ellipse
    return {"boxes": rows, "masks": box_masks}


def _training_step(model, batch_size: int, field: bool) -> tuple[Any, Any] | None:
    """(loss, seeded targets) of `model`'s timed training step; None for a model not trained.

    Classifiers: sparse cross-entropy on (B,) labels; dense-prediction models:
    per pixel on (B, H, W); field models: MSE on the next state; one-stage
    detectors: the detection task's loss (RetinaNet's focal and L1) on
    ground-truth rows; two-stage detectors: their own loss (None) on rows
    and, with a mask head, box-local masks.
    """
    import keras
    import numpy as np

    if isinstance(model, TwoStageDetector):
        head = model.roi_head
        return None, _box_targets(model, batch_size, head.num_classes, head.with_mask)
    if is_detector(model):
        classes = int(model.output.shape[-1]) - RAW_BOX_COLUMNS
        return RetinaNetLoss(), _box_targets(model, batch_size, classes, masks=False)
    if field:
        return keras.losses.MeanSquaredError(), random_inputs(model, batch_size)
    if _output_rank(model) not in (2, 4):
        return None
    shape = model.output.shape
    rng = np.random.default_rng(0)
    labels = rng.integers(0, int(shape[-1]), (batch_size, *shape[1:-1])).astype("int32")
    return keras.losses.SparseCategoricalCrossentropy(), labels


def benchmark_model(
    model,
    *,
    batch_size: int = 16,
    jit_compile: str = "auto",
    repeats: int = 5,
    train: bool = True,
    between: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Inference and training-step throughput, batch-1 latency and peak memory of `model`.

    Args:
        model: a built Keras model with static input shapes besides the batch.
        batch_size: images per call. Default 16.
        jit_compile: "auto" (Keras' default), "on" or "off", passed to compile().
        repeats: timed calls per figure (median). Default 5.
        train: also time `train_on_batch` (classifiers, dense-prediction and
            field models, detectors; see `_training_step`). Default True.
        between: called before each timed phase (throughput, latency, training
            step), e.g. :meth:`HostLimits.measure` to measure the host's limit
            interleaved with the model. Default None.

    Returns:
        A dict of the figures (img/s, ms, MiB).
    """
    import keras

    jit = BENCH_JIT[jit_compile]
    before = between or (lambda: None)
    # On the backend's device once, as a training loop's prefetched batch: on a GPU the
    # timings are then the model's, not a host-to-device copy per call.
    inputs = keras.tree.map_structure(keras.ops.convert_to_tensor, random_inputs(model, batch_size))
    single = keras.tree.map_structure(keras.ops.convert_to_tensor, random_inputs(model, 1))
    result: dict[str, Any] = {}
    step = _training_step(model, batch_size, is_field_model(model)) if train else None
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), loss=step and step[0], jit_compile=jit)
    before()
    with PeakMemory() as memory:
        seconds = median_seconds(lambda: model.predict_on_batch(inputs), repeats)
    result["predict_img_s"] = batch_size / seconds
    result["predict_peak_mib"] = memory.mib
    if memory.device_mib is not None:
        result["predict_device_peak_mib"] = memory.device_mib
    before()
    result["latency_ms"] = 1e3 * median_seconds(lambda: model.predict_on_batch(single), repeats)
    if step is not None:
        labels = keras.tree.map_structure(keras.ops.convert_to_tensor, step[1])
        before()
        with PeakMemory() as memory:
            seconds = median_seconds(lambda: model.train_on_batch(inputs, labels), repeats)
        result["train_img_s"] = batch_size / seconds
        result["train_peak_mib"] = memory.mib
        if memory.device_mib is not None:
            result["train_device_peak_mib"] = memory.device_mib
    return result


def _sizes(model, image_sizes: Sequence[int] | None) -> list[int | None]:
    """The sizes to time `model` at: several for a free input size, else its own (None)."""
    if has_free_input_size(model):
        return list(image_sizes or FREE_SIZE_IMAGE_SIZES)
    own = model.input_shape[1] if len(model.input_shape) == 4 else None
    if image_sizes and (own is None or any(size != own for size in image_sizes)):
        raise ValueError(
            f"the model {model.name!r} takes one input shape, {model.input_shape}; image sizes "
            f"apply to a model of free input size. Received: image_sizes={list(image_sizes)}"
        )
    return [None]


def bench_keras(
    model,
    *,
    precision: str = "float32",
    fft_impls: Sequence[str] = ("auto",),
    batch_sizes: Sequence[int] | None = None,
    image_sizes: Sequence[int] | None = None,
    jit_compile: str = "auto",
    repeats: int = 5,
    train: bool = True,
    agreement_inputs: Any = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of `model` at `precision`, one per fft_impl, image size and batch size.

    Each row: the figures of :func:`benchmark_model`, the model's FLOPs
    (:func:`keras_fourier.flops`), the multiply-adds per second each phase
    reaches and their fraction of the host's limit (:class:`HostLimits`,
    measured before and between the phases, on the model's largest Dense
    product at the largest batch and size, in the compute dtype of
    `precision`), with `agreement_inputs` the agreement with float32.

    Args:
        model: a float32 Keras model: a classifier, a dense-prediction model
            ((B, H, W, classes) output) or any model of static input shapes.
        precision: one of `BENCH_PRECISIONS`. Default "float32".
        fft_impls: `fft_impl` of every Fourier layer, one row each; "auto"
            is the model as given. Default ("auto",).
        batch_sizes: images per call. Default None: 16, or 1 and 8 for a
            model of free input size.
        image_sizes: sizes of a model of free input size (one row each).
            Default None: 512 and 1024.
        jit_compile: "auto", "on" or "off". Default "auto".
        repeats: timed calls per figure (median). Default 5.
        train: also time the training step. Default True.
        agreement_inputs: examples for :func:`precision_agreement` (at the
            first size of a model of free input size), or None.

    Returns:
        (rows, host): the rows, and the host's description and limits
        (:meth:`HostLimits.report`).

    Raises:
        ValueError: image sizes for a model of one input shape, or a bad
            `precision`.

    Example:
        >>> rows, host = bench_keras(segmenter, image_sizes=[512], batch_sizes=[1, 8])
        >>> [row["batch_size"] for row in rows]
        [1, 8]
    """
    import keras

    check_choice("precision", precision, BENCH_PRECISIONS)
    sizes = _sizes(model, image_sizes)
    batches = list(batch_sizes or (FREE_SIZE_BATCH_SIZES if sizes[0] else (16,)))

    def static(network, size: int | None):
        return network if size is None else at_input_size(network, size)

    largest = static(model, max(sizes) if sizes[0] else None)
    dtype = COMPUTE_DTYPES[precision]
    limits = HostLimits(mlp_matmul_shape(largest, max(batches)), [dtype], repeats)
    gflops = {size: flops(static(model, size)) / 1e9 for size in sizes}
    rows = []
    for impl in fft_impls:
        reference = model if impl == "auto" else clone_with(model, fft_impl=impl)
        timed = with_precision(reference, precision)
        agreement = {}
        if agreement_inputs is not None:
            agreement = rounded(precision_agreement(reference, agreement_inputs, precision))
        for size in sizes:
            network = static(timed, size)
            for batch_size in batches:
                figures = benchmark_model(
                    network,
                    batch_size=batch_size,
                    jit_compile=jit_compile,
                    repeats=repeats,
                    train=train,
                    between=limits.measure,
                )
                row = {
                    "model": model.name,
                    "runtime": keras.backend.backend(),
                    "precision": precision,
                    "fft_impl": impl,
                    "dft_precision": get_dft_precision(),
                    **({} if size is None else {"image_size": size}),
                    "batch_size": batch_size,
                    "gflops": round(gflops[size], 4),
                    **rounded(figures),
                }
                rows.append((row, figures, size, agreement))
            del network
        del timed
    limits.measure()
    host = limits.report()
    return [
        {
            **row,
            **throughput(gflops[size], figures, limits.rates, dtype),
            **host_columns(host, dtype),
            **agreement,
        }
        for row, figures, size, agreement in rows
    ], host
