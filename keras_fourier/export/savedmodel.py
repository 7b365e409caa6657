"""SavedModel export in the TF Serving layout, checked against Keras after writing."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import saved_model_pb2

from keras_fourier.data.augment import eval_transform
from keras_fourier.data.checks import header_image_size
from keras_fourier.export.detections import MASK_MAX_PIXELS, to_image_pixels
from keras_fourier.export.journal import Transaction, recover
from keras_fourier.export.parity import (
    TOLERANCES,
    check_tolerance,
    mask_iou,
    match_detections,
    max_abs_diff,
)
from keras_fourier.export.signatures import (
    BYTES_INPUT,
    BYTES_SIGNATURE,
    CLASS_MAP,
    DEFAULT_SIGNATURE,
    MAX_IMAGE_PIXELS,
    ROLLOUT_SIGNATURE,
    STEPS_INPUT,
    TRAJECTORY,
    ServingModel,
    any_size_class_map,
    at_sequence_length,
    decode_images,
    decode_images_any_size,
    dense_transform,
    model_stride,
    sample_inputs,
    serving_model,
)
from keras_fourier.fileio import make_folders
from keras_fourier.models.fourcastnet import rollout
from keras_fourier.validation import check_number, check_positive_int

MAX_VERSION = 2**63 - 1  # TF Serving reads versions as int64
# The steps of a field model's rollout signature that the parity check runs.
ROLLOUT_CHECK_STEPS = 3


@dataclasses.dataclass(frozen=True)
class SavedModelReport:
    """What :func:`saved_model` wrote and how closely it matches Keras.

    Attributes:
        path: the version directory, ``<export_dir>/<version>``.
        signatures: the signatures as ``saved_model_cli show --all`` prints
            them (inputs and outputs with dtype and shape).
        max_abs_diff: {signature name: max |SavedModel - Keras|} on sample
            inputs after reloading with `tf.saved_model.load`; for a
            detector, the largest difference of matched boxes over the image size.
        detections: for a detector, {signature name: how many of Keras's
            detections it matched}; else empty.
        mask_iou: for a two-stage detector, {signature name: the IoU of the
            matched detections' pasted masks with Keras's}; else empty.
    """

    path: str
    signatures: str
    max_abs_diff: dict[str, float]
    detections: dict[str, str] = dataclasses.field(default_factory=dict)
    mask_iou: dict[str, float] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        """One line: the version directory written."""
        return f"Wrote SavedModel {self.path}"

    def parity_lines(self) -> list[str]:
        """One line per signature: its check against Keras."""
        if self.detections:
            return [
                f"Parity {name}: {self.detections[name]} (same class, boxes within "
                f"{TOLERANCES['detection']:g} of the image size; max box difference "
                f"{diff:.3g} of the image size)"
                + (f", IoU of their masks {self.mask_iou[name]:.4f}" if self.mask_iou else "")
                for name, diff in self.max_abs_diff.items()
            ]
        return [
            f"Parity {name}: max |SavedModel - Keras| = {diff:.3g}"
            for name, diff in self.max_abs_diff.items()
        ]


def check_version(version: int, name: str = "version") -> int:
    """Validates a TF Serving version number: a non-negative int (not a bool)."""
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_VERSION:
        raise ValueError(
            f"`{name}` must be an int in [0, {MAX_VERSION}] (a TF Serving version, int64). "
            f"Received: {name}={version!r}"
        )
    return version


def version_path(export_dir: str | os.PathLike, version: int, overwrite: bool) -> str:
    """``<export_dir>/<version>``, after checking it is free (or `overwrite`).

    Raises:
        ValueError: the version exists and `overwrite` is False, or
            `export_dir` is a file.
    """
    export_dir = os.fspath(export_dir)
    if os.path.exists(export_dir) and not os.path.isdir(export_dir):
        raise ValueError(f"The export folder {export_dir!r} is a file, not a folder.")
    target = os.path.join(export_dir, str(check_version(version)))
    if os.path.exists(target) and not overwrite:
        raise ValueError(
            f"Version {version} already exists at {target!r}; pass overwrite=True to replace "
            f"it or choose another version. Received: {version=}"
        )
    return target


def _add_endpoints(
    archive: keras.export.ExportArchive, serving: ServingModel, crop_pct: float, max_pixels: int
) -> keras.layers.Pipeline | None:
    """Adds serving_default and, for image models, serving_bytes; returns the image transform."""
    serve = tf.function(serving, input_signature=list(serving.input_specs), autograph=False)
    archive.add_endpoint(DEFAULT_SIGNATURE, serve)
    if serving.field:
        archive.add_endpoint(
            ROLLOUT_SIGNATURE,
            lambda fields, steps: {TRAJECTORY: rollout(serving.model, fields, steps)},
            input_signature=[
                serving.input_specs[0],
                tf.TensorSpec((), tf.int32, name=STEPS_INPUT),
            ],
        )
    if not serving.is_image_model:
        return None
    height, width = serving.image_size
    if height is None:  # an any-size segmenter: the class map at the image's own size
        stride = model_stride(serving.model)

        def serve_any_size(image_bytes: tf.Tensor) -> dict[str, tf.Tensor]:
            images = decode_images_any_size(image_bytes, max_pixels)
            return {CLASS_MAP: any_size_class_map(serve, images, stride)}

        archive.add_endpoint(
            BYTES_SIGNATURE,
            serve_any_size,
            input_signature=[tf.TensorSpec((None,), tf.string, name=BYTES_INPUT)],
        )
        return None
    if serving.dense or serving.detection is not None:
        transform = dense_transform(height, width)
    else:
        transform = eval_transform((height, width), crop_pct)

    def serve_bytes(image_bytes: tf.Tensor) -> dict[str, tf.Tensor]:
        # A two-stage detector pastes 100 masks at the image's size: fewer pixels.
        limit = min(max_pixels, MASK_MAX_PIXELS) if serving.two_stage else max_pixels
        outputs = serve(decode_images(image_bytes, transform, height, width, limit))
        if serving.detection is not None:  # boxes in the pixels of each sent image
            sizes = tf.map_fn(header_image_size, image_bytes, fn_output_signature=tf.int64)
            return to_image_pixels(outputs, sizes, height, width)
        if serving.dense:
            return {
                CLASS_MAP: tf.argmax(outputs[serving.output_name], axis=-1, output_type=tf.int32)
            }
        return outputs

    archive.add_endpoint(
        BYTES_SIGNATURE,
        serve_bytes,
        input_signature=[tf.TensorSpec((None,), tf.string, name=BYTES_INPUT)],
    )
    return transform


def _sample_image_bytes(images: np.ndarray) -> tf.Tensor:
    """A PNG of the first image and a JPEG of a narrower crop of the second."""
    pixels = tf.cast(tf.round(tf.clip_by_value(images, 0, 255)), tf.uint8)
    narrow = pixels[1][:, : max(1, pixels.shape[2] * 2 // 3)]
    return tf.stack([tf.io.encode_png(pixels[0]), tf.io.encode_jpeg(narrow, quality=90)])


def _check_parity(
    directory: str, serving: ServingModel, transform: keras.layers.Pipeline | None
) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
    """Reloads the SavedModel, runs every signature on samples, compares with Keras.

    Returns:
        ({signature: max |SavedModel - Keras|}, {signature: detections
        matched} for a detector, else {}, {signature: IoU of the matched
        masks} for a two-stage detector, else {}).
    """
    loaded = tf.saved_model.load(directory)
    samples = sample_inputs(serving)
    if serving.detection is not None:
        return _check_detections(loaded, serving, transform, samples)
    actual = loaded.signatures[DEFAULT_SIGNATURE](
        **{name: tf.constant(value) for name, value in samples.items()}
    )
    diffs = {DEFAULT_SIGNATURE: max_abs_diff(actual, serving.run(samples))}
    if serving.field:  # three steps, against the eager rollout of the Keras model
        ((name, state),) = samples.items()
        expected = keras.ops.convert_to_numpy(rollout(serving.model, state, ROLLOUT_CHECK_STEPS))
        actual = loaded.signatures[ROLLOUT_SIGNATURE](
            **{name: tf.constant(state), STEPS_INPUT: tf.constant(ROLLOUT_CHECK_STEPS)}
        )
        diffs[ROLLOUT_SIGNATURE] = max_abs_diff(actual, {TRAJECTORY: expected})
    if serving.dense and serving.image_size[0] is None:
        # One request per image: the sample, and a narrower crop the stride does not divide.
        images = next(iter(samples.values()))
        encoded = _sample_image_bytes(images)
        diffs[BYTES_SIGNATURE] = 0.0
        for index in range(2):
            decoded = decode_images_any_size(encoded[index : index + 1])
            expected = any_size_class_map(serving, decoded, model_stride(serving.model))
            actual = loaded.signatures[BYTES_SIGNATURE](**{BYTES_INPUT: encoded[index : index + 1]})
            diffs[BYTES_SIGNATURE] = max(
                diffs[BYTES_SIGNATURE],
                max_abs_diff(actual, {CLASS_MAP: expected.numpy()}),
            )
    if transform is not None:
        encoded = _sample_image_bytes(next(iter(samples.values())))
        decoded = decode_images(encoded, transform, *serving.image_size)
        expected = serving.run({serving.input_names[0]: decoded.numpy()})
        if serving.dense:  # the class map must be the arg-max of Keras's logits, pixel by pixel
            expected = {CLASS_MAP: expected[serving.output_name].argmax(-1).astype(np.int32)}
        actual = loaded.signatures[BYTES_SIGNATURE](**{BYTES_INPUT: encoded})
        diffs[BYTES_SIGNATURE] = max_abs_diff(actual, expected)
    for name, diff in diffs.items():
        check_tolerance(
            diff, TOLERANCES["saved_model"], f"reloaded SavedModel's {name!r} signature"
        )
    return diffs, {}, {}


def _check_detections(
    loaded: Any,
    serving: ServingModel,
    transform: keras.layers.Layer,
    samples: dict[str, np.ndarray],
) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
    """A detector's signatures against Keras: (box differences, detections matched, mask IoUs).

    ``serving_default`` on the samples, ``serving_bytes`` on a PNG and a
    JPEG of them, its boxes (and a two-stage detector's masks) compared in
    the pixels of each sent image.
    """
    ((name, images),) = samples.items()
    height, width = serving.image_size
    encoded = _sample_image_bytes(images)
    decoded = decode_images(encoded, transform, height, width).numpy()
    sizes = tf.map_fn(header_image_size, encoded, fn_output_signature=tf.int64)
    runs = {
        DEFAULT_SIGNATURE: (
            loaded.signatures[DEFAULT_SIGNATURE](**{name: tf.constant(images)}),
            serving.keras_detections(images),
            np.full(len(images), max(height, width)),
        ),
        BYTES_SIGNATURE: (
            loaded.signatures[BYTES_SIGNATURE](**{BYTES_INPUT: encoded}),
            to_image_pixels(serving.keras_detections(decoded), sizes, height, width),
            np.max(sizes.numpy(), axis=1),
        ),
    }
    diffs, matched, masks = {}, {}, {}
    for signature, (actual, expected, extents) in runs.items():
        expected = {key: np.asarray(value) for key, value in expected.items()}
        converted, pairs = f"The reloaded SavedModel's {signature!r}", []
        diffs[signature], hits, total = match_detections(
            actual, expected, extents, serving.detection, converted, pairs=pairs
        )
        matched[signature] = f"{hits} of {total} Keras detections matched"
        if serving.two_stage:
            masks[signature] = mask_iou(actual, expected, pairs, converted)
    return diffs, matched, masks


def describe_saved_model(path: str | os.PathLike) -> str:
    """The SignatureDefs of a SavedModel as ``saved_model_cli show --all`` prints them.

    Args:
        path: a SavedModel directory (holding ``saved_model.pb``).

    Returns:
        For every tag set and signature, its inputs and outputs with dtype
        (e.g. ``DT_FLOAT``), shape (-1 for a free dimension) and graph tensor
        name, then the method name.

    Example:
        >>> print(describe_saved_model("models/gfnet_ti/1"))
        MetaGraphDef with tag-set: 'serve' contains the following SignatureDefs:
        ...
    """
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(os.fspath(path), "saved_model.pb"), "rb") as file:
        proto.ParseFromString(file.read())

    def tensor_lines(kind: str, infos) -> list[str]:
        lines = [f"  The given SavedModel SignatureDef contains the following {kind}(s):"]
        for key in sorted(infos):
            info = infos[key]
            if info.tensor_shape.unknown_rank:
                shape = "unknown_rank"
            else:
                shape = "(" + ", ".join(str(dim.size) for dim in info.tensor_shape.dim) + ")"
            lines += [
                f"    {kind}s['{key}'] tensor_info:",
                f"        dtype: {types_pb2.DataType.Name(info.dtype)}",
                f"        shape: {shape}",
                f"        name: {info.name}",
            ]
        return lines

    lines = []
    for meta_graph in proto.meta_graphs:
        tags = ", ".join(sorted(meta_graph.meta_info_def.tags))
        lines.append(f"MetaGraphDef with tag-set: '{tags}' contains the following SignatureDefs:")
        for key in sorted(meta_graph.signature_def):
            signature = meta_graph.signature_def[key]
            lines += ["", f"signature_def['{key}']:"]
            lines += tensor_lines("input", signature.inputs)
            lines += tensor_lines("output", signature.outputs)
            lines.append(f"  Method name is: {signature.method_name}")
    return "\n".join(lines)


def saved_model(
    model: keras.Model,
    export_dir: str | os.PathLike,
    version: int = 1,
    *,
    output: str = "probabilities",
    crop_pct: float = 0.875,
    max_pixels: int = MAX_IMAGE_PIXELS,
    sequence_length: int | None = None,
    overwrite: bool = False,
    verbose: bool = True,
) -> SavedModelReport:
    """Exports `model` as a TF Serving SavedModel and checks it against Keras.

    Writes ``<export_dir>/<version>/saved_model.pb`` and ``variables/``
    with `keras.export.ExportArchive`. The version is first written to a
    hidden staging folder ``.export-<pid>-*`` in `export_dir` (TF Serving
    only loads numeric folders), reloaded with `tf.saved_model.load`, run on
    sample inputs (every signature must match Keras within 1e-5), and only
    then moved to ``<version>`` by the journaled commit of
    :mod:`keras_fourier.export.journal`: an existing version (`overwrite`)
    is swapped atomically on Linux. A failed export leaves `export_dir` as
    it was (folders it created are removed if still empty); exports killed
    in `export_dir` (dead pids) are first undone or, once their commit
    began, completed, so TF Serving always finds a complete version.

    Signatures (see :mod:`keras_fourier.export.signatures` for output names):

    * ``serving_default``: the model's inputs by name, batch free. Vision
      models: ``images`` float32 (B, H, W, 3), RGB in 0-255 (the models
      normalise inside when built with ``include_preprocessing=True``).
      FNet: ``token_ids``, ``segment_ids`` and ``padding_mask`` int32 (B, L).
      Output: ``probabilities`` (B, classes), or ``logits``; for a dense
      (segmentation) model, ``logits`` (B, H, W, classes) whatever `output`.
    * ``serving_rollout`` (field models only): ``fields`` float32 (B, H,
      W, C) normalised states and ``steps`` int32 () to ``trajectory``
      (B, steps, H, W, C), the states after each step
      (:func:`keras_fourier.models.fourcastnet.rollout` in the graph);
      checked over 3 steps. ``serving_default`` returns ``next_state``.
    * ``serving_bytes`` (vision models only): ``image_bytes`` string (B,),
      encoded JPEG, PNG, GIF or BMP images of any size up to `max_pixels`
      (read from the header, before decoding; a larger image fails the
      request; so does an empty batch, naming ``image_bytes``), decoded to
      RGB and resized and centre-cropped in the graph as in evaluation
      (:func:`keras_fourier.data.eval_transform`); same outputs. For a
      dense (segmentation) model, each image is resized (bilinear, no crop:
      `crop_pct` is not used) to the model's input size and the output is
      ``class_map``, int32 (B, H, W): the arg-max class of each pixel at the
      model's input size (scale it to the sent image's size with
      nearest-neighbour resizing); its parity check requires it to equal the
      arg-max of Keras's logits on every pixel. A detector's signatures
      return its detections (``boxes``, ``scores``, ``classes``,
      ``num_detections``; :mod:`keras_fourier.export.detections`), those of
      ``serving_bytes`` with boxes in each sent image's pixels (the image
      stretched to the model's input size as for a dense model); they are
      checked by matching Keras's detections. A segmenter of any input
      size (``input_shape=(None, None, 3)``) keeps it: ``serving_default``
      takes images of any size its stride divides (B, H, W, 3) and returns
      logits of that size, and ``serving_bytes`` returns the class map at
      each sent image's own size, int32 (B, H, W) (the image is resized to
      the nearest multiples of the stride at or above its size, the logits
      back to its size; unchanged where the stride divides it); the images
      of one request must then share a size.

    Args:
        model: a functional or Sequential Keras model.
        export_dir: the model's base directory (TF Serving's ``base_path``),
            created if missing.
        version: the version directory's number, a non-negative int.
            Default 1.
        output: "probabilities" (default) or "logits" for a classifier.
        crop_pct: centre-crop fraction of ``serving_bytes``, in (0, 1].
            Default 0.875.
        max_pixels: largest image (height * width) ``serving_bytes``
            decodes. Default 40 million (`MAX_IMAGE_PIXELS`); at most
            4 million for a two-stage detector, whose masks are pasted at
            the image's size (`MASK_MAX_PIXELS`).
        sequence_length: the length a text model that takes any length
            (``FNet(sequence_length=None)``) is exported at; None (default)
            for models of fixed input shapes.
        overwrite: whether an existing version may be replaced.
            Default False.
        verbose: print the signatures and the parity check. Default True.

    Returns:
        A :class:`SavedModelReport`.

    Raises:
        ValueError: for a bad `version`, `output`, `crop_pct` or
            `max_pixels`, an existing version without `overwrite`, or an
            `export_dir` that is a file; nothing is written.
        ParityError: if the reloaded model differs from Keras by more than
            1e-5; nothing is written.

    Example:
        >>> report = saved_model(keras_fourier.GFNetTi(), "models/gfnet_ti", version=1)
        >>> sorted(report.max_abs_diff)
        ['serving_bytes', 'serving_default']
    """
    export_dir = os.fspath(export_dir)
    target = version_path(export_dir, version, overwrite)
    crop_pct = check_number("crop_pct", crop_pct, low=0, high=1, low_open=True)
    check_positive_int("max_pixels", max_pixels)
    serving = serving_model(at_sequence_length(model, sequence_length), output)
    archive = keras.export.ExportArchive()
    archive.track(serving.model)
    transform = _add_endpoints(archive, serving, crop_pct, max_pixels)

    created = make_folders(export_dir)
    recover(export_dir)
    try:
        with Transaction(export_dir) as staging:
            archive.write_out(os.path.join(staging.path, "version"), verbose=False)
            diffs, detections, masks = _check_parity(
                os.path.join(staging.path, "version"), serving, transform
            )
            staging.commit([("version", target)], overwrite=overwrite)
    except BaseException:
        for folder in created:
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # only if still empty: another export may have written there
        raise
    report = SavedModelReport(
        path=target,
        signatures=describe_saved_model(target),
        max_abs_diff=diffs,
        detections=detections,
        mask_iou=masks,
    )
    if verbose:
        print(report.summary())
        print(report.signatures)
        for line in report.parity_lines():
            print(line)
    return report
