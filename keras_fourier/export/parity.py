"""Parity of an exported model with Keras, shared by the SavedModel, TFLite and ONNX exports.

One shape for every exporter: it checks its arguments, converts, runs the
written file on the same inputs as Keras (:func:`compare`), refuses a
difference above its row of :data:`TOLERANCES` (:func:`check_tolerance`),
writes atomically and returns a report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import tensorflow as tf

from keras_fourier.export.detections import (
    BOX_TOLERANCE,
    BOXES,
    CLASSES,
    MASKS,
    NUM_DETECTIONS,
    SCORES,
)
from keras_fourier.export.signatures import OUTPUTS, ServingModel, as_input_dict, sample_inputs

# The largest max |exported - Keras| each float32 export accepts: a SavedModel runs the same
# TensorFlow graph; TFLite and ONNX run the DFT as matmuls in another runtime. A detector's
# exports are compared by their detections (`match_detections`): boxes as fractions of the
# image size.
TOLERANCES: dict[str, float] = {
    "saved_model": 1e-5,
    "tflite": 1e-4,
    "onnx": 1e-4,
    "detection": BOX_TOLERANCE,
}
# How the reports name a detector's agreement: the fraction of Keras's detections matched.
DETECTIONS_MATCHED = (
    f"detections matched (same class, boxes within {BOX_TOLERANCE:g} of the image size; the "
    "difference above is that of the boxes over the image size)"
)
# Scores this close to a cut (the score threshold, or the last of a full image's detections)
# may fall on either side of it in another runtime: such detections may go unmatched.
SCORE_MARGIN = 1e-4
# The least IoU of a two-stage detector's pasted masks, summed over its matched detections
# (pixels whose probability is near the 0.5 threshold may fall on either side of it).
MASK_IOU = 0.99


def agreement_name(serving: ServingModel) -> str:
    """How reports name :func:`compare`'s agreement: of pixels (a dense model), else of examples.

    Example:
        >>> agreement_name(serving_model(keras_fourier.GFNetTi(input_shape=(64, 64, 3))))
        'top-1 agreement'
    """
    if serving.two_stage:
        return DETECTIONS_MATCHED[:-1] + f"; their pasted masks of IoU at least {MASK_IOU})"
    if serving.detection is not None:
        return DETECTIONS_MATCHED
    return "pixel agreement" if serving.dense else "top-1 agreement"


def max_abs_diff(actual: dict, expected: dict[str, np.ndarray]) -> float:
    """max |actual - expected| over every output of `expected` (NaN if any is NaN).

    Example:
        >>> max_abs_diff({"y": np.ones(2)}, {"y": np.zeros(2)})
        1.0
    """
    diff = 0.0
    for name, value in expected.items():
        current = float(np.max(np.abs(np.asarray(actual[name]) - value), initial=0.0))
        if not current <= diff:  # NaN stays NaN
            diff = current
    return diff


class ParityError(RuntimeError):
    """An exported model disagrees with Keras, or Keras itself gives non-finite outputs.

    Nothing was written; `keras-fourier export` prints its message on one
    line and exits with status 1.
    """


def compare(
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    reference: ServingModel,
    validation_data: Iterable | tf.data.Dataset | None,
    runtime: str,
    strict: bool = True,
) -> tuple[float, float | None, int]:
    """Runs a converted model and `reference` on the same batches and compares them.

    A detector's outputs are compared by :func:`match_detections`: the
    difference is that of matched boxes over the image size, the agreement
    the fraction of Keras's detections matched.

    Args:
        run: the converted model: {input name: array} -> {output name: array}.
        reference: the Keras serving model it was converted from.
        validation_data: batches to compare on (an iterable or a
            `tf.data.Dataset`; a batch as :func:`as_input_dict` reads it), or
            None for one deterministic sample batch (:func:`sample_inputs`).
        runtime: the converted model's runtime, named in errors ("ONNX").
        strict: a detector's detections must all match (float32 exports).
            Default True; False only measures them (a quantized file).

    Returns:
        (max |converted - Keras| over every output and example, fraction of
        examples whose arg-max class agrees (of pixels, for a dense model's
        per-pixel logits) or None, examples compared). Top-1 agreement is
        reported only with `validation_data` and a classification output.

    Raises:
        ParityError: the converted model's output names are not Keras's, or
            the Keras model outputs NaN or inf (the message says so). A
            non-finite converted output makes the difference NaN, which
            :func:`check_tolerance` refuses.

    Example:
        >>> compare(reference.run, reference, None, "Keras")
        (0.0, None, 2)
    """
    if validation_data is None:
        batches = [sample_inputs(reference)]
    else:
        batches = (as_input_dict(reference, batch) for batch in validation_data)
    if reference.detection is not None:
        return _compare_detections(run, reference, batches, runtime, strict)
    classify = validation_data is not None and reference.output_name in OUTPUTS
    max_diff, agree, count = 0.0, 0.0, 0
    for inputs in batches:
        actual = run(inputs)
        expected = reference.run(inputs)
        if sorted(actual) != sorted(expected):
            raise ParityError(f"The {runtime} outputs {sorted(actual)} are not {sorted(expected)}.")
        for name, value in expected.items():
            if not np.all(np.isfinite(value)):
                raise ParityError(
                    f"The Keras model itself outputs non-finite values (NaN or inf) in {name!r} "
                    f"on the comparison inputs: the model, not the {runtime} conversion, is "
                    "broken (check its weights); nothing was written."
                )
        diff = max_abs_diff(actual, expected)
        if not diff <= max_diff:  # NaN (a non-finite converted output) stays NaN
            max_diff = diff
        if classify:
            (name,) = expected
            same = actual[name].argmax(-1) == expected[name].argmax(-1)
            # per example: 1 or 0 for a classifier, the fraction of its pixels for a dense model
            agree += float(np.sum(same.reshape(len(same), -1).mean(axis=1)))
        count += len(next(iter(inputs.values())))
    return max_diff, (agree / count if classify and count else None), count


def tolerance(reference: ServingModel, export: str) -> float:
    """The row of :data:`TOLERANCES` that `export` ("tflite", "onnx") of `reference` meets."""
    return TOLERANCES["detection" if reference.detection is not None else export]


def check_tolerance(max_diff: float, tolerance: float, converted: str) -> None:
    """Raises unless the exported model is within `tolerance` of Keras.

    Args:
        max_diff: max |exported - Keras| from :func:`compare`.
        tolerance: the largest difference accepted: the export's row of
            :data:`TOLERANCES`.
        converted: the exported model, named in the error ("ONNX model").

    Raises:
        ParityError: `max_diff` exceeds `tolerance` (or is NaN).

    Example:
        >>> check_tolerance(3e-6, TOLERANCES["onnx"], "ONNX model")
    """
    if not max_diff <= tolerance:
        raise ParityError(
            f"The {converted} differs from Keras by {max_diff:.3g} > {tolerance}; "
            "nothing was written."
        )


def _compare_detections(
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    reference: ServingModel,
    batches: Iterable[dict[str, np.ndarray]],
    runtime: str,
    strict: bool,
) -> tuple[float, float, int]:
    """:func:`compare` for a detector: its detections against the Keras decoder's."""
    max_diff, matched, total, count = 0.0, 0, 0, 0
    for inputs in batches:
        actual = run(inputs)
        ((name, images),) = inputs.items()
        expected = reference.keras_detections(images)
        if sorted(actual) != sorted(expected):
            raise ParityError(f"The {runtime} outputs {sorted(actual)} are not {sorted(expected)}.")
        if not np.all(np.isfinite(expected[SCORES])):
            raise ParityError(
                f"The Keras model itself outputs non-finite scores on the comparison {name}: "
                f"the model, not the {runtime} conversion, is broken (check its weights); "
                "nothing was written."
            )
        sizes = np.full(len(images), max(images.shape[1:3]), dtype=np.float64)
        converted, pairs = f"The {runtime} model", []
        diff, hits, found = match_detections(
            actual, expected, sizes, reference.detection, converted, strict, pairs
        )
        if reference.two_stage:
            mask_iou(actual, expected, pairs, converted, strict)
        max_diff, matched, total = max(max_diff, diff), matched + hits, total + found
        count += len(images)
    return max_diff, (matched / total if total else 1.0), count


def match_detections(
    actual: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
    sizes: np.ndarray,
    decoder: Any,
    converted: str,
    strict: bool = True,
    pairs: list[tuple[int, int, int]] | None = None,
) -> tuple[float, int, int]:
    """Matches an exported model's detections with Keras's, image by image.

    Each Keras detection, by decreasing score, takes the exported detection
    of its class whose box is nearest (largest coordinate difference); a
    match needs every coordinate within :data:`BOX_TOLERANCE` of the image
    size. Only a detection whose score is within :data:`SCORE_MARGIN` of a
    cut (the decoder's score threshold, or the lowest score of an image
    with `max_detections`) may go unmatched, on either side.

    Args:
        actual: the exported model's {"boxes", "scores", "classes",
            "num_detections"} (NumPy, or tensors).
        expected: the Keras decoder's.
        sizes: (B,) each image's size in pixels (the larger side): the unit
            of the box tolerance.
        decoder: the :class:`~keras_fourier.layers.DetectionDecoder` of both.
        converted: the exported model, named in the error ("The LiteRT model").
        strict: raise for a detection without a match. Default True; False
            counts it (a quantized model).
        pairs: a list to which each match is appended as (image, row of
            Keras's detection, row of the exported one), for
            :func:`mask_iou`. Default None.

    Returns:
        (max coordinate difference of matched boxes over the image size,
        Keras detections matched, Keras detections).

    Raises:
        ParityError: a detection without a match, naming the image, the
            class and the score.

    Example:
        >>> match_detections(keras_out, keras_out, np.array([64]), decoder, "The copy")
        (0.0, 12, 12)
    """
    actual = {key: np.asarray(value) for key, value in actual.items()}
    pairs = [] if pairs is None else pairs
    worst, matched, total = 0.0, 0, 0
    for image, size in enumerate(sizes):
        mine = _detections(actual, image)
        theirs = _detections(expected, image)
        cuts = [decoder.score_threshold]
        for rows in (mine, theirs):
            if len(rows[SCORES]) == decoder.max_detections:
                cuts.append(float(rows[SCORES][-1]))

        def marginal(score: float, cuts: list[float] = cuts) -> bool:
            return min(abs(score - cut) for cut in cuts) <= SCORE_MARGIN

        free = np.ones(len(mine[SCORES]), bool)
        rows = zip(theirs[BOXES], theirs[CLASSES], theirs[SCORES], strict=True)
        for row, (box, label, score) in enumerate(rows):
            total += 1
            candidates = np.flatnonzero(free & (mine[CLASSES] == label))
            if candidates.size:
                gaps = np.abs(mine[BOXES][candidates] - box).max(axis=1) / size
                best = int(np.argmin(gaps))
                if gaps[best] <= BOX_TOLERANCE:
                    free[candidates[best]] = False
                    worst, matched = max(worst, float(gaps[best])), matched + 1
                    pairs.append((image, row, int(candidates[best])))
                    continue
            if strict and not marginal(float(score)):
                raise ParityError(
                    f"{converted} misses Keras's detection of class {int(label)} (score "
                    f"{score:.4f}, box {np.round(box, 2).tolist()}) in image {image}: no "
                    f"detection of that class within {BOX_TOLERANCE:g} of the image size; "
                    "nothing was written."
                )
        for label, score in zip(mine[CLASSES][free], mine[SCORES][free], strict=True):
            if strict and not marginal(float(score)):
                raise ParityError(
                    f"{converted} detects class {int(label)} (score {score:.4f}) in image "
                    f"{image} where Keras detects nothing of that class nearby; nothing was "
                    "written."
                )
    return worst, matched, total


def mask_iou(
    actual: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
    pairs: list[tuple[int, int, int]],
    converted: str,
    strict: bool = True,
) -> float:
    """The IoU of matched detections' pasted masks, summed over them, checked against `MASK_IOU`.

    Args:
        actual: the exported model's outputs, "masks" (B, D, H, W) 0/1.
        expected: Keras's.
        pairs: matched detections, from :func:`match_detections`.
        converted: the exported model, named in the error.
        strict: raise below :data:`MASK_IOU`. Default True.

    Returns:
        Their intersections over their unions (1.0 when both are empty).

    Raises:
        ParityError: the IoU is below :data:`MASK_IOU` (`strict`).

    Example:
        >>> mask_iou(keras_out, keras_out, [(0, 0, 0)], "The copy")
        1.0
    """
    intersection = union = 0
    for image, theirs, mine in pairs:
        a = np.asarray(actual[MASKS][image, mine]) > 0
        b = np.asarray(expected[MASKS][image, theirs]) > 0
        intersection += int(np.sum(a & b))
        union += int(np.sum(a | b))
    iou = intersection / union if union else 1.0
    if strict and not iou >= MASK_IOU:
        raise ParityError(
            f"{converted}'s masks of the matched detections overlap Keras's by IoU {iou:.4f} "
            f"< {MASK_IOU}; nothing was written."
        )
    return iou


def _detections(outputs: dict[str, np.ndarray], image: int) -> dict[str, np.ndarray]:
    """The detections of one image: its first ``num_detections`` rows."""
    count = int(outputs[NUM_DETECTIONS][image])
    return {key: outputs[key][image, :count] for key in (BOXES, CLASSES, SCORES)}
