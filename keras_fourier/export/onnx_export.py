"""ONNX export with standard ONNX ops only, run in onnxruntime against Keras after converting.

The graph is the one the TFLite export traces (every Fourier layer on the
matmul DFT, so no FFT op is needed: ONNX has only the contrib ``Rfft`` and
``DFT`` ops that few runtimes implement), frozen and converted by tf2onnx.

Why not ``model.export(format="onnx")`` (Keras 3.15, TensorFlow 2.21,
tf2onnx 1.17): it turns every tensor that the traced function captures (the
ImageNet mean and variance of the preprocessing ``Normalization`` layer) into
a required graph input, and it has no way to pass tf2onnx a handler for
``Erfc``, which TensorFlow's exact GELU lowers to and tf2onnx cannot convert.
Here the function is frozen first (captures become constants), ``Erfc``
becomes ONNX ``1 - Erf``, and inputs and outputs keep the names of the other
exports (``images`` -> ``probabilities``, FNet's ids and mask -> ...).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterable

import keras
import numpy as np
import tensorflow as tf

from keras_fourier.export.parity import agreement_name, check_tolerance, compare, tolerance
from keras_fourier.export.signatures import (
    ServingModel,
    at_sequence_length,
    check_output,
    serving_model,
)
from keras_fourier.fileio import atomic_write_bytes

ONNX_EXTRA = 'pip install "keras-fourier[onnx]"'


@dataclasses.dataclass(frozen=True)
class ONNXReport:
    """What :func:`onnx` wrote and how closely onnxruntime matches Keras.

    Attributes:
        path: the `.onnx` file.
        opset: the ONNX opset of the default domain.
        size_bytes: file size.
        op_types: the ONNX operators the graph uses, sorted.
        max_abs_diff: max |onnxruntime - Keras| over every output and example.
        top1_agreement: fraction of examples whose arg-max class is the same
            in onnxruntime and Keras; None without `validation_data` or a
            classification output.
        num_examples: examples compared.
        agreement: "top-1 agreement" (a classifier: examples) or "pixel
            agreement" (a dense model: pixels), what `top1_agreement` counts.
    """

    path: str
    opset: int
    size_bytes: int
    op_types: tuple[str, ...]
    max_abs_diff: float
    top1_agreement: float | None
    num_examples: int
    agreement: str = "top-1 agreement"

    def summary(self) -> str:
        """One line: the file, its opset and size, and its check against Keras."""
        line = (
            f"Wrote ONNX {self.path} (opset {self.opset}, {self.size_bytes:,} bytes): "
            f"max |onnxruntime - Keras| = {self.max_abs_diff:.3g} on {self.num_examples} examples"
        )
        if self.top1_agreement is not None:
            line += f", {self.agreement} {self.top1_agreement:.2%}"
        return line


def _import_tf2onnx():
    try:
        import onnxruntime  # noqa: F401 (checked here so a missing runtime fails before converting)
        import tf2onnx
    except ImportError as error:
        raise ImportError(
            f"ONNX export needs tf2onnx and onnxruntime, optional dependencies of "
            f"keras_fourier: {ONNX_EXTRA}"
        ) from error
    return tf2onnx


def _erfc(ctx, node, name, args):
    """tf2onnx handler: TensorFlow's Erfc (exact GELU) as ONNX ``1 - Erf(x)``."""
    from tf2onnx import utils

    del name, args
    node.type = "Erf"
    dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
    one = ctx.make_const(utils.make_name(f"{node.name}_one"), np.array(1, dtype=dtype))
    ctx.insert_new_node_on_output("Sub", node.output[0], inputs=[one.output[0], node.output[0]])
    return node


def _convert(serving: ServingModel, opset: int | None):
    """The ONNX ModelProto of `serving`, inputs and outputs named as in the other exports."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    tf2onnx = _import_tf2onnx()
    concrete = tf.function(serving).get_concrete_function(*serving.input_specs)
    frozen = convert_variables_to_constants_v2(concrete)
    inputs = [tensor.name for tensor in frozen.inputs if tensor.dtype != tf.resource]
    outputs = [tensor.name for tensor in frozen.outputs]
    output_names = sorted(concrete.structured_outputs)  # tf.nest's order of a dict
    renames = dict(zip(inputs, serving.input_names, strict=True))
    renames.update(zip(outputs, output_names, strict=True))
    # tf2onnx's progress notes, and TensorFlow's deprecation warnings about the TF1 graph
    # functions that tf2onnx calls (not the user's code): errors still show.
    loggers = [logging.getLogger(name) for name in ("tf2onnx", "tensorflow")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        model_proto, _ = tf2onnx.convert.from_graph_def(
            frozen.graph.as_graph_def(),
            input_names=inputs,
            output_names=outputs,
            opset=opset,
            custom_op_handlers={"Erfc": (_erfc, ())},
            tensors_to_rename=renames,
        )
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    for value in (*model_proto.graph.input, *model_proto.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    return model_proto


def _runner(content: bytes) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """The ONNX model `content` in onnxruntime, as {input name: array} -> {output name: array}."""
    import onnxruntime

    session = onnxruntime.InferenceSession(content, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return lambda inputs: dict(zip(names, session.run(names, inputs), strict=True))


def onnx(
    model: keras.Model,
    path: str | os.PathLike,
    *,
    output: str = "probabilities",
    validation_data: Iterable | tf.data.Dataset | None = None,
    opset: int | None = None,
    sequence_length: int | None = None,
    overwrite: bool = False,
    verbose: bool = True,
) -> ONNXReport:
    """Converts `model` to an ONNX file of standard ops and checks it in onnxruntime.

    Every Fourier layer is switched to the matmul DFT (a clone with
    ``fft_impl="matmul"`` and the same weights), so the graph holds MatMul,
    Conv and element-wise ops of the default ONNX domain only, and runs in
    any ONNX runtime. Inputs and outputs are those of
    :func:`~keras_fourier.export.saved_model`'s ``serving_default``: float32
    ``images`` in 0-255 (or FNet's int32 ``token_ids``, ``segment_ids``,
    ``padding_mask``) with a free ``batch`` dimension, and
    ``probabilities``/``logits`` (or the model's output names).

    After converting, the model runs in onnxruntime on `validation_data` (or
    deterministic sample inputs) and is compared with the Keras model; the
    file is written (atomically) only if it is within 1e-4.

    Args:
        model: a functional or Sequential Keras model in float32.
        path: the `.onnx` file to write; parent directories are created.
        output: "probabilities" (default) or "logits" for a classifier.
        validation_data: batches to compare on (an iterable or a
            `tf.data.Dataset`; a batch is an array, a dict by input name, a
            list in input order or an ``(x, y)`` tuple); with it, classifiers
            also report top-1 agreement. Default None: one sample batch.
        opset: ONNX opset; None (default) for tf2onnx's default.
        sequence_length: the length a text model that takes any length
            (``FNet(sequence_length=None)``) is exported at; None (default)
            for models of fixed input shapes.
        overwrite: whether an existing `path` may be replaced. Default False.
        verbose: print the report. Default True.

    Returns:
        An :class:`ONNXReport`.

    Raises:
        ValueError: unknown `output`, or an existing `path` without
            `overwrite`; nothing is written.
        ParityError: onnxruntime differs from Keras by more than 1e-4;
            nothing is written.
        ImportError: tf2onnx or onnxruntime is missing (the `onnx` extra).

    Example:
        >>> report = onnx(keras_fourier.GFNetTi(input_shape=(96, 160, 3)), "gfnet.onnx")
        >>> report.max_abs_diff < 1e-4
        True
    """
    path = os.fspath(path)
    check_output(output)
    if os.path.exists(path) and not overwrite:
        raise ValueError(f"{path!r} already exists; pass overwrite=True to replace it.")
    model = at_sequence_length(model, sequence_length)
    model_proto = _convert(serving_model(model, output, fft_impl="matmul"), opset)
    content = model_proto.SerializeToString()

    reference = serving_model(model, output)
    max_diff, agreement, count = compare(_runner(content), reference, validation_data, "ONNX")
    check_tolerance(max_diff, tolerance(reference, "onnx"), "ONNX model")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write_bytes(path, content)
    opset_version = next(o.version for o in model_proto.opset_import if o.domain in ("", "ai.onnx"))
    report = ONNXReport(
        path=path,
        opset=int(opset_version),
        size_bytes=len(content),
        op_types=tuple(sorted({node.op_type for node in model_proto.graph.node})),
        max_abs_diff=max_diff,
        top1_agreement=agreement,
        num_examples=count,
        agreement=agreement_name(reference),
    )
    if verbose:
        print(report.summary())
    return report
