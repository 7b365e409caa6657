"""What the exported signatures take and return, shared by the SavedModel and TFLite exports.

Every export is built from a :class:`ServingModel`: the Keras model to trace
(the original, or a clone with the head switched to logits or the Fourier
layers switched to the matmul DFT, same weights), the names and specs of its
inputs, and how its outputs are named. The input names are those of the
model's `keras.Input`\\ s (``images`` for vision models, ``token_ids``,
``segment_ids``, ``padding_mask`` for FNet); the outputs are named:

* ``probabilities`` (default) or ``logits`` for a model whose single output
  is a Dense classification head (``head`` of the vision models,
  ``classifier`` of FNet with ``num_classes``). A softmax or sigmoid head gives
  probabilities as is and logits by a clone with a linear head; a linear head
  gives logits as is and probabilities through a softmax;
* by the model's own output keys for dict outputs (FNet without a head:
  ``sequence_output``, ``pooled_output``);
* ``logits`` for a dense (segmentation) model: one (B, H, W, 3) image input
  and one (B, H, W, classes) output at the input's height and width (the
  models of :mod:`keras_fourier.segmentation`, and the ``model.keras`` of a
  ``keras-fourier train --task segmentation`` run). Its ``serving_default``
  returns the per-pixel ``logits`` whatever `output` says (softmax does not
  change the class map and would only double the work), and its
  ``serving_bytes`` returns ``class_map``: int32 (B, H, W), the arg-max class
  of each pixel at the model's input size (see :func:`dense_transform`). A
  model built with ``auxiliary=True`` exports its ``logits`` output only;
* ``next_state`` for a field model (a forecaster: one input named
  ``fields``, (B, H, W, C) normalised states, and one output of the same
  shape, the models of :func:`keras_fourier.models.fourcastnet.field_model`
  and the ``model.keras`` of a ``keras-fourier train --task forecast`` run).
  Its SavedModel adds ``serving_rollout``: ``fields`` and ``steps`` (int32
  scalar) to ``trajectory`` (B, steps, H, W, C), the model applied
  autoregressively (:func:`keras_fourier.models.fourcastnet.rollout`);
* ``boxes``, ``scores``, ``classes`` and ``num_detections`` for a
  one-stage detector (one (B, H, W, 3) image input, raw (B, A, 8 + C) rows
  with anchors: :func:`keras_fourier.detection.RetinaNet`, and the
  ``model.keras`` of a ``keras-fourier train --task detection`` run): its
  raw rows decoded in the graph with builtin NMS
  (:mod:`keras_fourier.export.detections`), boxes in the input's pixels.
  Its ``serving_bytes`` stretches each image to the model's input size
  (bilinear, no crop) and returns the boxes in the sent image's pixels;
* the same and ``masks`` (uint8, pasted at the image's size) and
  ``mask_probabilities`` (box-frame) for a two-stage detector
  (:class:`keras_fourier.detection.TwoStageDetector`), whose own outputs
  are detections; from ``serving_bytes``, boxes and masks in each sent
  image's pixels (:func:`~keras_fourier.export.detections.to_image_pixels`);
* ``features`` for a single output that is not a Dense head (vision models
  with ``include_top=False``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_fourier.data.checks import MAX_IMAGE_PIXELS, decode_image_checked
from keras_fourier.detection.models import is_detector
from keras_fourier.export.detections import (
    export_decoder,
    is_two_stage,
    nms_detections,
    roi_head,
    with_pasted_masks,
)
from keras_fourier.layers import spectral
from keras_fourier.layers.decode_heads import ResizeToMatch
from keras_fourier.layers.padding import PadToMultiple
from keras_fourier.layers.position import StrideCheck
from keras_fourier.models.clone import clone_with
from keras_fourier.models.kinds import classifier_head, is_field_model
from keras_fourier.segmentation import without_auxiliary
from keras_fourier.settings import OUTPUTS
from keras_fourier.validation import check_choice, check_positive_int

PROBABILITY_ACTIVATIONS = ("softmax", "sigmoid")
# Examples of the parity checks' sample batch (`sample_inputs`).
PARITY_BATCH = 2
FEATURES = "features"
LOGITS = "logits"
CLASS_MAP = "class_map"
BYTES_INPUT = "image_bytes"
DEFAULT_SIGNATURE = "serving_default"
BYTES_SIGNATURE = "serving_bytes"
NEXT_STATE = "next_state"
ROLLOUT_SIGNATURE = "serving_rollout"
STEPS_INPUT = "steps"
TRAJECTORY = "trajectory"
# Sample inputs of an any-size segmenter are this many strides high and wide.
SAMPLE_STRIDES = 2
# Default limit of `decode_images`: larger images are refused before they are decoded.


def check_output(output: str) -> str:
    """Validates the `output` argument of the exports.

    Args:
        output: "probabilities" or "logits".

    Returns:
        `output` unchanged.

    Raises:
        ValueError: naming the value if it is neither.

    Example:
        >>> check_output("logits")
        'logits'
    """
    return check_choice("output", output, OUTPUTS)


def is_dense_model(model: keras.Model) -> bool:
    """Whether `model` is a dense (segmentation) model: per-pixel outputs at its input's size.

    Args:
        model: a Keras model.

    Returns:
        True for one (B, H, W, 3) float input and one (B, H, W, C) output
        with the same H and W: known, or free in a model that resizes its
        outputs to its input (a segmenter of any size); False for a field model.

    Example:
        >>> is_dense_model(keras_fourier.segmentation.UPerNet(
        ...     backbone="hornet_tiny", num_classes=3, input_shape=(32, 32, 3)))
        True
    """
    if isinstance(model.output, dict) or len(model.outputs) != 1 or len(model.inputs) != 1:
        return False
    image, output = tuple(model.inputs[0].shape), tuple(model.outputs[0].shape)
    if (
        is_field_model(model)
        or len(image) != 4
        or len(output) != 4
        or image[-1] != 3
        or image[1:3] != output[1:3]
    ):
        return False
    # Any size: only a model that resizes its outputs to its input's size (a segmenter's).
    return None not in image[1:3] or any(isinstance(layer, ResizeToMatch) for layer in model.layers)


def model_stride(model: keras.Model) -> int:
    """What an any-size model's input height and width must be multiples of (1: anything).

    1 for a model that pads its images itself (a :class:`PadToMultiple`
    layer, a two-stage detector's): the stride checks after it read the
    padded image.

    Example:
        >>> model_stride(keras_fourier.segmentation.UPerNet(backbone="hornet_tiny"))
        32
    """
    if any(isinstance(layer, PadToMultiple) for layer in model.layers):
        return 1
    strides = [layer.stride for layer in model.layers if isinstance(layer, StrideCheck)]
    return max(strides, default=1)


def fixed_size(model: keras.Model, image_size: tuple[int, int], name: str) -> keras.Model:
    """A copy of an any-size image model at input size `image_size`, with the same weights.

    Args:
        model: a functional model of one (B, None, None, 3) input.
        image_size: (height, width), multiples of :func:`model_stride`.
        name: how messages name `image_size` (e.g. "--image-size").

    Returns:
        A `keras.Model` of the same name, layers and weights (copied).

    Raises:
        ValueError: a model of a fixed size, or a size the stride does not divide.

    Example:
        >>> any_size = keras_fourier.segmentation.UPerNet(backbone="hornet_tiny")
        >>> fixed_size(any_size, (64, 96), "image_size").input_shape
        (None, 64, 96, 3)
    """
    shape = tuple(model.inputs[0].shape) if len(model.inputs) == 1 else ()
    if len(shape) != 4 or shape[1:3] != (None, None):
        raise ValueError(
            f"`{name}` applies to a model of any input size; model {model.name!r} takes "
            f"{shape[1:3] or 'no image'}. Received: {name}={image_size!r}"
        )
    stride = model_stride(model)
    if any(size % stride for size in image_size):
        raise ValueError(
            f"`{name}` of model {model.name!r} must be multiples of its stride {stride}. "
            f"Received: {name}={image_size!r}"
        )
    inputs = keras.Input((*image_size, 3), name=model.inputs[0].name)
    copy = keras.models.clone_model(model, input_tensors=inputs)
    copy.set_weights(model.get_weights())
    return copy


def dense_transform(height: int, width: int) -> keras.layers.Layer:
    """The ``serving_bytes`` transform of dense models: a bilinear resize to (height, width).

    No crop and no padding: the whole image is stretched to the model's
    input size, so pixel (i, j) of the returned class map is the class at
    (i * image_height / height, j * image_width / width) of the sent image;
    a client scales the map back with nearest-neighbour resizing.

    Example:
        >>> dense_transform(32, 48)(tf.zeros((40, 60, 3))).shape
        TensorShape([32, 48, 3])
    """
    return keras.layers.Resizing(height, width, interpolation="bilinear")


@dataclasses.dataclass(frozen=True)
class ServingModel:
    """A model ready to trace into signatures.

    Attributes:
        model: the Keras model the signatures call (maybe a clone of the
            exported model with the same weights).
        input_specs: one `tf.TensorSpec` per model input, named as the input,
            with a free batch dimension, in the order of `model.inputs`.
        output_name: the name of a single output; None for dict outputs.
        add_softmax: whether a softmax follows the model's output.
        dense: a dense (segmentation) model: per-pixel ``logits``, and a
            ``class_map`` from ``serving_bytes``. Default False.
        field: a field model (forecaster): ``next_state``, and a
            ``serving_rollout`` signature. Default False.
        detection: for a one-stage detector, the decoder whose settings the
            exports decode its raw rows with (:func:`nms_detections`);
            :meth:`keras_detections` runs the decoder itself; for a
            two-stage detector, its RoI head (whose score threshold and
            detections the parity check reads). Default None.
        two_stage: a two-stage detector: its own detections, with masks
            pasted (:func:`with_pasted_masks`). Default False.
    """

    model: keras.Model
    input_specs: tuple[tf.TensorSpec, ...]
    output_name: str | None
    add_softmax: bool
    dense: bool = False
    field: bool = False
    detection: keras.layers.Layer | None = None
    two_stage: bool = False

    @property
    def input_names(self) -> tuple[str, ...]:
        """The signature input names, in the order of `input_specs`."""
        return tuple(spec.name for spec in self.input_specs)

    @property
    def is_image_model(self) -> bool:
        """One float (B, H, W, 3) input: the signatures take 0-255 RGB images."""
        if len(self.input_specs) != 1 or self.field:
            return False
        spec = self.input_specs[0]
        return spec.shape.rank == 4 and spec.shape[-1] == 3 and spec.dtype.is_floating

    @property
    def image_size(self) -> tuple[int, int] | tuple[None, None]:
        """(H, W) of the images of an image model; (None, None) for a segmenter of any size."""
        _, height, width, _ = self.input_specs[0].shape
        if height is None or width is None:
            return None, None
        return int(height), int(width)

    def __call__(self, *tensors: tf.Tensor) -> dict[str, tf.Tensor]:
        """Runs the model (traceable) on inputs in `input_specs` order; returns named outputs."""
        inputs = keras.tree.pack_sequence_as(self.model.input, list(tensors))
        outputs = self.model(inputs, training=False)
        if self.two_stage:
            return with_pasted_masks(outputs, *self.image_size)
        if self.detection is not None:
            return nms_detections(outputs, self.detection, *self.image_size)
        if self.add_softmax:
            outputs = keras.ops.softmax(outputs)
        if self.output_name is None:
            return dict(outputs)
        return {self.output_name: outputs}

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Eager outputs for a dict {input name: batch}, as NumPy arrays."""
        outputs = self(*(tf.constant(inputs[name]) for name in self.input_names))
        return {name: keras.ops.convert_to_numpy(value) for name, value in outputs.items()}

    def keras_detections(self, images: np.ndarray) -> dict[str, np.ndarray]:
        """A detector's detections by the Keras decoder (`detection`), as NumPy arrays.

        A two-stage detector's are the model's own, with their masks pasted.
        """
        outputs = self.model(images, training=False)
        if self.two_stage:
            outputs = with_pasted_masks(outputs, *self.image_size)
        else:
            outputs = self.detection(outputs, images)
        return {name: keras.ops.convert_to_numpy(value) for name, value in outputs.items()}


def _free_length_inputs(model: keras.Model) -> list:
    return [
        tensor
        for tensor in keras.tree.flatten(model.input)
        if len(tensor.shape) == 2 and tensor.shape[1] is None
    ]


def at_sequence_length(model: keras.Model, sequence_length: int | None) -> keras.Model:
    """`model` with (B, L) inputs of a fixed length: what the exports trace.

    A text model built to take any length (``FNet(sequence_length=None)``)
    is exported at one length: a model of the same layers, called on
    inputs of length `sequence_length` (its weights are the model's). A
    model of fixed length is returned as is, and `sequence_length`, if
    given, must be that length.

    Args:
        model: a functional Keras model.
        sequence_length: the exported length, at most the model's
            ``max_sequence_length``; None for a model whose length is fixed.

    Returns:
        A model with static input shapes besides the batch (a copy of the
        layers, with the model's weights, when the length was free).

    Raises:
        ValueError: a free-length model without `sequence_length`, or a
            `sequence_length` that is not a positive int or differs from a
            fixed model's length.

    Example:
        >>> at_sequence_length(keras_fourier.FNet(sequence_length=None), 128).input_shape
        {'segment_ids': (None, 128), 'token_ids': (None, 128)}
    """
    free = _free_length_inputs(model)
    if sequence_length is not None:
        check_positive_int("sequence_length", sequence_length)
    if not free:
        lengths = {t.shape[1] for t in keras.tree.flatten(model.input) if len(t.shape) == 2}
        if sequence_length is not None and lengths != {sequence_length}:
            raise ValueError(
                f"`sequence_length` must be the model's fixed input length {sorted(lengths)} "
                f"or None. Received: sequence_length={sequence_length!r}"
            )
        return model
    if sequence_length is None:
        raise ValueError(
            f"Export needs a fixed sequence length; model {model.name!r} takes any length: "
            "pass the length to export at. Received: sequence_length=None"
        )
    inputs = keras.tree.map_structure(
        lambda t: (
            keras.Input((sequence_length,), dtype=t.dtype, name=t.name)
            if len(t.shape) == 2 and t.shape[1] is None
            else keras.Input(t.shape[1:], dtype=t.dtype, name=t.name)
        ),
        model.input,
    )
    # The layers rebuilt from their configs on the fixed-length inputs, with the model's weights.
    fixed = keras.models.clone_model(model, input_tensors=inputs)
    fixed.set_weights(model.get_weights())
    return fixed


def serving_model(
    model: keras.Model, output: str = "probabilities", fft_impl: str | None = None
) -> ServingModel:
    """Prepares `model` for export: output naming, logits head and Fourier implementation.

    Args:
        model: a functional or Sequential Keras model.
        output: "probabilities" (default) or "logits"; used when the model's
            single output is a Dense head (see the module docstring).
        fft_impl: None (default) keeps every Fourier layer as it is; "fft"
            or "matmul" clones the model with that implementation.

    Returns:
        A :class:`ServingModel`.

    Raises:
        ValueError: for an unknown `output` or `fft_impl`, "logits" asked of a
            model without a Dense head, a model that cannot be cloned, or an
            any-size model (unknown input height or width).

    Example:
        >>> serving = serving_model(model, output="logits", fft_impl="matmul")
        >>> serving.input_names
        ('images',)
    """
    check_output(output)
    if fft_impl is not None:
        spectral.validate_fft_impl(fft_impl)
    if isinstance(model.output, dict) and set(model.output) == {LOGITS, "auxiliary"}:
        model = without_auxiliary(model)
    dense = is_dense_model(model)
    for tensor in keras.tree.flatten(model.input):
        if len(tensor.shape) == 4 and None in tuple(tensor.shape[1:3]):
            if dense and fft_impl is None:
                break  # a segmenter's SavedModel keeps any size
            raise ValueError(
                "This export needs a model of a fixed input size; this one accepts any size "
                f"(input {tensor.name!r} of shape {tuple(tensor.shape)}): give the size to "
                "export at (image_size, --image-size), the size its filters were built for "
                f"(224 x 224 for the named builders). Received: model={model.name!r}"
            )
    if _free_length_inputs(model):
        at_sequence_length(model, None)  # raises: the exports take a fixed length
    field = is_field_model(model)
    two_stage = is_two_stage(model)
    detection = export_decoder(model) if is_detector(model) else None
    if two_stage:
        detection = roi_head(model)
    head = classifier_head(model)
    if field:
        output_name, activation, head = NEXT_STATE, None, None
    elif detection is not None:
        output_name, activation, head = None, None, None
    elif dense:
        output_name, activation = LOGITS, None
    elif head is None:
        if output == "logits":
            raise ValueError(
                "output='logits' needs a model whose single output is a Dense classification "
                f"head. Received: model={model.name!r}"
            )
        output_name = None if isinstance(model.output, dict) else FEATURES
        activation = None
    else:
        output_name = output
        activation = head.get_config()["activation"]
    linear_head = (
        head.name if output == "logits" and activation in PROBABILITY_ACTIVATIONS else None
    )
    if fft_impl is not None or linear_head is not None:
        model = clone_with(model, fft_impl=fft_impl, linear_head=linear_head)
    specs = tuple(
        tf.TensorSpec((None, *tensor.shape[1:]), tensor.dtype, name=tensor.name)
        for tensor in keras.tree.flatten(model.input)
    )
    return ServingModel(
        model=model,
        input_specs=specs,
        output_name=output_name,
        add_softmax=output == "probabilities" and activation == "linear",
        dense=dense,
        field=field,
        detection=detection,
        two_stage=two_stage,
    )


def decode_images(
    image_bytes: tf.Tensor,
    transform: keras.layers.Pipeline,
    height: int,
    width: int,
    max_pixels: int = MAX_IMAGE_PIXELS,
) -> tf.Tensor:
    """Decodes a batch of encoded images (JPEG, PNG, GIF, BMP, WebP) to float32 RGB 0-255.

    Each image's size is read from its header first
    (:func:`keras_fourier.data.checks.decode_image_checked`); an image of
    more than `max_pixels` pixels, or of a format whose size cannot be read,
    fails with an `InvalidArgumentError` naming its size before it is
    decoded, so one small request cannot take gigabytes of memory. An empty
    batch fails with an `InvalidArgumentError` naming the ``image_bytes``
    input (as TF Serving refuses an empty request).

    Args:
        image_bytes: string tensor (B,) of encoded images of any sizes.
        transform: per-image resize and crop to (height, width), e.g.
            :func:`keras_fourier.data.eval_transform`.
        height: output height.
        width: output width.
        max_pixels: largest accepted height * width. Default
            `MAX_IMAGE_PIXELS` (40 million).

    Returns:
        float32 tensor (B, height, width, 3).

    Example:
        >>> png = tf.io.encode_png(tf.zeros((40, 60, 3), tf.uint8))
        >>> transform = keras_fourier.data.eval_transform((32, 48))
        >>> decode_images(tf.stack([png]), transform, 32, 48).shape
        TensorShape([1, 32, 48, 3])
    """

    def decode(data: tf.Tensor) -> tf.Tensor:
        image = decode_image_checked(data, max_pixels)
        return transform(tf.cast(image, tf.float32))

    not_empty = tf.debugging.Assert(
        tf.size(image_bytes) > 0,
        [f"{BYTES_SIGNATURE} needs at least one image: input {BYTES_INPUT} is an empty batch."],
    )
    with tf.control_dependencies([not_empty]):
        image_bytes = tf.identity(image_bytes)
    return tf.map_fn(
        decode, image_bytes, fn_output_signature=tf.TensorSpec((height, width, 3), tf.float32)
    )


def decode_images_any_size(image_bytes: tf.Tensor, max_pixels: int = MAX_IMAGE_PIXELS) -> tf.Tensor:
    """Decodes a batch of encoded images of one size, kept, to float32 RGB 0-255.

    As :func:`decode_images` (sizes read from the headers first, an empty
    batch refused), without resizing; images of different sizes in one batch
    fail with an `InvalidArgumentError` naming both sizes.

    Example:
        >>> png = tf.io.encode_png(tf.zeros((40, 60, 3), tf.uint8))
        >>> decode_images_any_size(tf.stack([png, png])).shape
        TensorShape([2, 40, 60, 3])
    """
    not_empty = tf.debugging.Assert(
        tf.size(image_bytes) > 0,
        [f"{BYTES_SIGNATURE} needs at least one image: input {BYTES_INPUT} is an empty batch."],
    )
    with tf.control_dependencies([not_empty]):
        image_bytes = tf.identity(image_bytes)
    first = tf.shape(decode_image_checked(image_bytes[0], max_pixels))[:2]

    def decode(data: tf.Tensor) -> tf.Tensor:
        image = decode_image_checked(data, max_pixels)
        same = tf.debugging.Assert(
            tf.reduce_all(tf.equal(tf.shape(image)[:2], first)),
            [
                f"{BYTES_SIGNATURE} of a model of any input size takes images of one size per "
                "request; an image of height and width",
                tf.shape(image)[:2],
                "follows one of",
                first,
            ],
        )
        with tf.control_dependencies([same]):
            return tf.cast(image, tf.float32)

    return tf.map_fn(
        decode, image_bytes, fn_output_signature=tf.TensorSpec((None, None, 3), tf.float32)
    )


def any_size_class_map(serving: Any, images: tf.Tensor, stride: int) -> tf.Tensor:
    """The class map of an any-size segmenter at the images' own size.

    The images are resized (bilinear) to the nearest multiples of `stride`
    at or above their size (unchanged when the stride divides it), the
    logits resized back to their size, then the arg-max taken per pixel.

    Args:
        serving: a callable from (B, H, W, 3) images to {"logits": ...}, e.g.
            a `ServingModel` or its traced function.
        images: float32 (B, H, W, 3).
        stride: the model's stride (:func:`model_stride`).

    Returns:
        int32 (B, H, W).
    """
    size = tf.shape(images)[1:3]
    padded = (size + stride - 1) // stride * stride
    logits = serving(tf.image.resize(images, padded, method="bilinear"))[LOGITS]
    logits = tf.image.resize(logits, size, method="bilinear")
    return tf.argmax(logits, axis=-1, output_type=tf.int32)


def sample_inputs(
    serving: ServingModel, batch_size: int = PARITY_BATCH, seed: int = 0
) -> dict[str, np.ndarray]:
    """Deterministic sample inputs for the parity checks.

    Float inputs get uniform 0-255 values (a field model's ``fields``:
    standard normal values, as normalised states); integer inputs whose name contains
    "mask" get ones with the last quarter of positions zero; other integer
    inputs get ids below the smallest embedding table of the model (so they
    are valid token and segment ids).

    Args:
        serving: the model to feed.
        batch_size: examples per input. Default 2.
        seed: NumPy seed. Default 0.

    Returns:
        {input name: array (batch_size, ...)} of the inputs' dtypes.

    Example:
        >>> sample_inputs(serving_model(model))["images"].shape
        (2, 224, 224, 3)
    """
    rng = np.random.default_rng(seed)
    tables = [int(v.shape[0]) for v in serving.model.weights if v.name == "embeddings"]
    id_bound = min(tables, default=2)
    samples = {}
    for spec in serving.input_specs:
        shape = (batch_size, *spec.shape[1:])
        if None in shape:  # an any-size segmenter: a size its stride divides
            size = SAMPLE_STRIDES * model_stride(serving.model)
            shape = tuple(size if dim is None else dim for dim in shape)
        if serving.field:
            samples[spec.name] = rng.standard_normal(shape).astype(spec.dtype.as_numpy_dtype)
        elif spec.dtype.is_floating:
            samples[spec.name] = rng.uniform(0, 255, shape).astype(spec.dtype.as_numpy_dtype)
        elif "mask" in spec.name:
            mask = np.ones(shape, dtype=spec.dtype.as_numpy_dtype)
            mask[:, shape[1] - shape[1] // 4 :] = 0
            samples[spec.name] = mask
        else:
            samples[spec.name] = rng.integers(0, id_bound, shape).astype(spec.dtype.as_numpy_dtype)
    return samples


def as_input_dict(serving: ServingModel, batch: Any) -> dict[str, np.ndarray]:
    """One batch of user data (calibration or validation) as {input name: array}.

    Args:
        serving: the model the batch is for.
        batch: x, or a tuple unpacked as Keras does, ``(x, y)`` or
            ``(x, y, sample_weight)``; x is an array or tensor (single-input
            models), a dict keyed by input name, or a list in input order.

    Returns:
        {input name: NumPy array of the input's dtype}.

    Raises:
        ValueError: if the batch does not have one array per model input.

    Example:
        >>> as_input_dict(serving_model(model), (images, labels))["images"].shape
        (32, 224, 224, 3)
    """
    if isinstance(batch, tuple):
        batch, _, _ = keras.utils.unpack_x_y_sample_weight(batch)
    if isinstance(batch, dict):
        missing = set(serving.input_names) - set(batch)
        if missing:
            raise ValueError(
                f"Data batches must have the model's inputs {serving.input_names}; "
                f"missing {sorted(missing)}."
            )
        values = [batch[name] for name in serving.input_names]
    elif isinstance(batch, list):
        values = batch
    else:
        values = [batch]
    if len(values) != len(serving.input_specs):
        raise ValueError(
            f"Data batches must have one array per model input {serving.input_names}; "
            f"received {len(values)}."
        )
    return {
        spec.name: np.asarray(value, dtype=spec.dtype.as_numpy_dtype)
        for spec, value in zip(serving.input_specs, values, strict=True)
    }
