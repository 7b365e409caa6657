"""Parity of an exported model with Keras, shared by the SavedModel, TFLite and ONNX exports.

One shape for every exporter: it checks its arguments, converts, runs the
written file on the same inputs as Keras (:func:`compare`), refuses a
difference above its row of :data:`TOLERANCES` (:func:`check_tolerance`),
writes atomically and returns a report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import tensorflow as tf

from keras_fourier.export.signatures import OUTPUTS, ServingModel, as_input_dict, sample_inputs

# The largest max |exported - Keras| each float32 export accepts: a SavedModel runs the same
# TensorFlow graph; TFLite and ONNX run the DFT as matmuls in another runtime.
TOLERANCES: dict[str, float] = {"saved_model": 1e-5, "tflite": 1e-4, "onnx": 1e-4}


def agreement_name(serving: ServingModel) -> str:
    """How reports name :func:`compare`'s agreement: of pixels (a dense model), else of examples.

    Example:
        >>> agreement_name(serving_model(keras_fourier.GFNetTi(input_shape=(64, 64, 3))))
        'top-1 agreement'
    """
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
) -> tuple[float, float | None, int]:
    """Runs a converted model and `reference` on the same batches and compares them.

    Args:
        run: the converted model: {input name: array} -> {output name: array}.
        reference: the Keras serving model it was converted from.
        validation_data: batches to compare on (an iterable or a
            `tf.data.Dataset`; a batch as :func:`as_input_dict` reads it), or
            None for one deterministic sample batch (:func:`sample_inputs`).
        runtime: the converted model's runtime, named in errors ("ONNX").

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
