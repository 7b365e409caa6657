"""Builtin-only TFLite export, run in LiteRT against Keras after converting."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import os
import re
import shutil
import warnings
from collections.abc import Callable, Iterable

import keras
import numpy as np
import tensorflow as tf
from tensorflow.lite.python import convert as lite_convert  # the quantizer of TF's converter

from keras_fourier._startup import native_output_filtered
from keras_fourier.export.parity import (
    ParityError,
    agreement_name,
    check_tolerance,
    compare,
    tolerance,
)
from keras_fourier.export.signatures import (
    DEFAULT_SIGNATURE,
    ServingModel,
    as_input_dict,
    at_sequence_length,
    check_output,
    serving_model,
)
from keras_fourier.fileio import (
    atomic_write_bytes,
    remove_stale_directories,
    remove_stale_temporaries,
    temporary_directory,
)
from keras_fourier.layers import spectral
from keras_fourier.layers.layout import KEEP_FLOAT_SCOPE, tflite_layout
from keras_fourier.settings import QUANTIZATIONS
from keras_fourier.validation import check_choice

STAGING_PREFIX = ".tflite-staging-"
CHECKER = "ai_edge_litert"
INSTALL_CHECKER = 'pip install "keras-fourier[export]"'


@dataclasses.dataclass(frozen=True)
class TFLiteReport:
    """What :func:`tflite` wrote and how closely LiteRT matches Keras.

    Attributes:
        path: the `.tflite` file.
        quantization: None (float32), "float16", "dynamic" or "int8".
        size_bytes: file size.
        max_abs_diff: max |LiteRT - Keras| over every output and example;
            None when the file was not checked (``verify=False``).
        top1_agreement: fraction of examples whose arg-max class is the same
            in LiteRT and Keras; None without `validation_data`, a
            classification output or a check.
        num_examples: examples compared (the sample batch without
            `validation_data`); 0 when not checked.
        agreement: "top-1 agreement" (a classifier: examples) or "pixel
            agreement" (a dense model: pixels), what `top1_agreement` counts.
    """

    path: str
    quantization: str | None
    size_bytes: int
    max_abs_diff: float | None
    top1_agreement: float | None
    num_examples: int
    agreement: str = "top-1 agreement"

    def summary(self) -> str:
        """One line: the file, its quantization and size, and its check against Keras."""
        kind = self.quantization or "float32"
        line = f"Wrote TFLite {self.path} ({kind}, {self.size_bytes:,} bytes): "
        if self.max_abs_diff is None:
            line += "not checked against Keras (verify=False)"
        else:
            line += (
                f"max |LiteRT - Keras| = {self.max_abs_diff:.3g} on {self.num_examples} examples"
            )
        if self.top1_agreement is not None:
            line += f", {self.agreement} {self.top1_agreement:.2%}"
        return line


def checker_available() -> bool:
    """Whether LiteRT (`ai_edge_litert`), which checks TFLite files, can be imported."""
    try:
        importlib.import_module(f"{CHECKER}.interpreter")
    except ImportError:
        return False
    return True


def check_arguments(
    path: str, quantization, representative_dataset, overwrite: bool, verify: bool = True
) -> None:
    """Checks what :func:`tflite` needs before converting anything.

    Raises:
        ValueError: for an unknown `quantization`, "int8" without a
            `representative_dataset` (or one given to another quantization),
            a `path` that exists without `overwrite` or is a folder.
        ImportError: `verify` without LiteRT installed, naming the extra.
    """
    check_choice("quantization", quantization, QUANTIZATIONS)
    if os.path.isdir(path):
        raise ValueError(f"The TFLite path {path!r} is a folder.")
    if verify and not checker_available():
        raise ImportError(
            f"Checking the TFLite file against Keras needs LiteRT ({CHECKER}), which is not "
            f"installed: {INSTALL_CHECKER}, or pass verify=False (--no-verify) to write it "
            "unchecked."
        )
    if quantization == "int8" and representative_dataset is None:
        raise ValueError(
            "quantization='int8' needs a `representative_dataset` (an iterable of input batches "
            "or a tf.data.Dataset) to calibrate activation ranges. Received: "
            "representative_dataset=None"
        )
    if quantization != "int8" and representative_dataset is not None:
        raise ValueError(
            "`representative_dataset` is only used with quantization='int8'. "
            f"Received: quantization={quantization!r}"
        )
    if os.path.exists(path) and not overwrite:
        raise ValueError(f"{path!r} already exists; pass overwrite=True to replace it.")


def _convert(
    serving: ServingModel, quantization: str | None, representative_dataset, folder: str
) -> bytes:
    """Converts through a temporary SavedModel (in `folder`) with TFLite builtin ops only."""
    archive = keras.export.ExportArchive()
    archive.track(serving.model)
    # Full-integer files take the dense DFTs as FULLY_CONNECTED products, which XNNPACK runs.
    dft = spectral.fully_connected_dft() if quantization == "int8" else contextlib.nullcontext()
    archive.add_endpoint(DEFAULT_SIGNATURE, serving, input_signature=list(serving.input_specs))
    with temporary_directory(folder, STAGING_PREFIX) as directory:
        with tflite_layout(), dft:  # the endpoint is traced when written
            archive.write_out(directory, verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(
            directory, signature_keys=[DEFAULT_SIGNATURE]
        )
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantization is not None:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantization == "float16":
            converter.target_spec.supported_types = [tf.float16]
        if quantization == "int8":
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            calibrated = []

            def calibration_batches():
                for batch in representative_dataset:
                    calibrated.append(1)
                    yield as_input_dict(serving, batch)

            converter.representative_dataset = calibration_batches
        # The int8 calibrator of TF's converter builds a deprecated tf.lite.Interpreter; the
        # quantizer prints its settings from C++.
        with warnings.catch_warnings(), native_output_filtered():
            warnings.filterwarnings("ignore", "[\\s\\S]*tf.lite.Interpreter is deprecated")
            if quantization != "int8":
                return converter.convert()
            try:
                content = _integer_model(converter, _float_scopes(serving.model))
            except Exception:
                if calibrated:
                    raise
                content = None  # refused below, naming the cause
    if not calibrated:
        raise ValueError(
            "quantization='int8' needs at least one calibration batch; the "
            "`representative_dataset` was empty. Nothing was written."
        )
    return content


# Ops that XNNPACK (LiteRT 2.3) runs in float32 but not in int8. In a full-integer file they
# ran in LiteRT's own kernels and cut the XNNPACK graph in pieces around them (GFNet: two
# LayerNorms and a GELU per block, a classifier's softmax); they are kept float32 between
# DEQUANTIZE and QUANTIZE, which XNNPACK takes, so that the whole graph is one XNNPACK
# partition.
FLOAT_OPS = ("RSQRT", "SQUARED_DIFFERENCE", "GELU", "SOFTMAX")
_SCOPE_SUFFIX = re.compile(r"_\d+$")


def _integer_model(converter: tf.lite.TFLiteConverter, float_scopes: set[str]) -> bytes:
    """Full-integer quantization of `converter`'s model but for what int8 cannot hold.

    TensorFlow's selective quantization, as ``tf.lite.experimental.QuantizationDebugger``
    does it but without its instrumented copies of the model (one per change
    of its options, each a full quantization): one calibration, then the
    MLIR quantizer with :data:`FLOAT_OPS` and the ops traced under a name
    scope of `float_scopes` (found in the calibrated model) in float32. The
    element-wise int8 ops of that model that XNNPACK refuses (an input scale
    too far from the output's, such as a residual branch under a layer scale
    of 1e-6 at initialisation) would run in LiteRT's own kernels and cut
    XNNPACK's graph: they are kept float32 too, in a second quantization of
    the same calibration.

    The quantizer is TensorFlow's private ``mlir_quantize``, which the
    debugger calls; where a TensorFlow release moves it or changes its
    arguments (:func:`_mlir_quantizer`), the debugger itself quantizes: the
    same file, slower.
    """
    quantize = _mlir_quantizer()
    if quantize is None:
        debugger = tf.lite.experimental.QuantizationDebugger(
            converter=converter, debug_options=_debug_options([])
        )
        calibrated = debugger.calibrated_model

        def quantized(nodes: list[str]) -> bytes:
            debugger.options = _debug_options(nodes)
            return debugger.get_nondebug_quantized_model()
    else:
        converter.experimental_mlir_quantizer = True
        converter._experimental_calibrate_only = True
        calibrated = converter.convert()

        def quantized(nodes: list[str]) -> bytes:
            return quantize(
                calibrated,
                disable_per_channel=converter._experimental_disable_per_channel,
                denylisted_ops=list(FLOAT_OPS),
                denylisted_nodes=nodes,
            )

    nodes = _float_nodes(calibrated, float_scopes)
    content = quantized(nodes)
    if refused := _refused_by_xnnpack(content):
        content = quantized(nodes + refused)
    return content


# The arguments of TensorFlow's MLIR quantizer that the int8 export passes.
_QUANTIZER_ARGUMENTS = frozenset({"disable_per_channel", "denylisted_ops", "denylisted_nodes"})


def _mlir_quantizer() -> Callable[..., bytes] | None:
    """TensorFlow's MLIR quantizer, or None where this TensorFlow has none with its arguments."""
    quantize = getattr(lite_convert, "mlir_quantize", None)
    try:
        parameters = inspect.signature(quantize).parameters
    except (TypeError, ValueError):  # absent, or not introspectable
        return None
    return quantize if _QUANTIZER_ARGUMENTS.issubset(parameters) else None


def _debug_options(nodes: list[str]) -> tf.lite.experimental.QuantizationDebugOptions:
    """The debugger's options for :func:`_integer_model`: int8 but for `nodes`, float32 I/O."""
    return tf.lite.experimental.QuantizationDebugOptions(
        denylisted_ops=list(FLOAT_OPS), denylisted_nodes=nodes
    )


def _refused_by_xnnpack(content: bytes) -> list[str]:
    """Output names of the ADD, SUB and MUL ops of `content` that LiteRT runs outside XNNPACK.

    The ops outside are found from the delegate's nodes: walking back from
    each delegate input (and model output) that no delegate makes, through
    the ops that make them.
    """
    interpreter = _litert(content)
    ops = interpreter._get_ops_details()
    names = {tensor["index"]: tensor["name"] for tensor in interpreter.get_tensor_details()}
    delegates = [op for op in ops if op["op_name"] == "DELEGATE"]
    delegated = {index for op in delegates for index in op["outputs"]}
    producer = {index: op for op in ops if op not in delegates for index in op["outputs"]}
    pending = [index for op in delegates for index in op["inputs"] if index not in delegated]
    pending += [detail["index"] for detail in interpreter.get_output_details()]
    outside: dict[int, dict] = {}
    while pending:
        index = pending.pop()
        op = producer.get(index)
        if op is None or index in delegated or op["index"] in outside:
            continue
        outside[op["index"]] = op
        pending += [i for i in op["inputs"] if i >= 0]
    return [
        names[op["outputs"][0]] for op in outside.values() if op["op_name"] in ("ADD", "SUB", "MUL")
    ]


def _float_scopes(model: keras.Model) -> set[str]:
    """The name scopes whose ops a full-integer file of `model` keeps in float32.

    :data:`~keras_fourier.layers.layout.KEEP_FLOAT_SCOPE` (the complex
    products of spectral filters, see :func:`~keras_fourier.layers.layout.keep_float`)
    and every LayerNormalization: it adds the input scaled by its inverse
    deviation to its mean term, a sum of two ranges far apart, and its
    variance to an epsilon below any int8 scale; in int8, XNNPACK refuses
    such ADDs, which then cut its graph, and the small side rounds away.
    """
    norms = {
        layer.name
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.LayerNormalization)
    }
    return {KEEP_FLOAT_SCOPE, *norms}


def _float_nodes(content: bytes, scopes: set[str]) -> list[str]:
    """Output names of the ops of `content` traced under a name scope of `scopes`.

    A TensorFlow name scope may carry a suffix "_N" (a scope entered again).
    """
    interpreter = tf.lite.Interpreter(model_content=content)
    names = {tensor["index"]: tensor["name"] for tensor in interpreter.get_tensor_details()}
    nodes = []
    for op in interpreter._get_ops_details():
        output = names[op["outputs"][0]]
        # The last component names the op itself, the ones before it its scopes.
        parts = output.split("/")[:-1]
        if any(part in scopes or _SCOPE_SUFFIX.sub("", part) in scopes for part in parts):
            nodes.append(output)
    return nodes


def _litert(content: bytes):
    """The TFLite model `content` in a LiteRT interpreter, tensors allocated (XNNPACK applied)."""
    from ai_edge_litert.interpreter import Interpreter

    with native_output_filtered():  # LiteRT's "Created TensorFlow Lite XNNPACK delegate" line
        interpreter = Interpreter(model_content=content)
        interpreter.allocate_tensors()
    return interpreter


def _runner(content: bytes) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """The TFLite model `content` in LiteRT, as {input name: array} -> {output name: array}.

    A failure of LiteRT to run it is a :class:`ParityError` of one line.
    """
    runner = _litert(content).get_signature_runner(DEFAULT_SIGNATURE)

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return runner(**inputs)
        except RuntimeError as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise ParityError(f"LiteRT could not run the converted model: {first}") from None

    return run


def tflite(
    model: keras.Model,
    path: str | os.PathLike,
    quantization: str | None = None,
    representative_dataset: Iterable | tf.data.Dataset | None = None,
    *,
    validation_data: Iterable | tf.data.Dataset | None = None,
    output: str = "probabilities",
    sequence_length: int | None = None,
    overwrite: bool = False,
    verify: bool = True,
    verbose: bool = True,
) -> TFLiteReport:
    """Converts `model` to a TFLite file with builtin ops only and checks it in LiteRT.

    Every Fourier layer is switched to the matmul DFT (a clone of the model
    with ``fft_impl="matmul"`` and the same weights), so the graph holds only
    matmuls and element-wise ops: the converter runs with
    ``supported_ops=[TFLITE_BUILTINS]`` (``TFLITE_BUILTINS_INT8`` for int8),
    never Flex, and any input size works (TFLite's RFFT2D needs powers of
    two). The file has one signature, ``serving_default``, with the inputs and
    outputs of :func:`~keras_fourier.export.saved_model`'s and a free batch
    dimension; inputs and outputs stay float32 (int32 ids) at every
    quantization.

    After converting, the file runs in `ai_edge_litert` (the ``export``
    extra) on `validation_data` (or deterministic sample inputs) and is
    compared with the Keras model; it is written (atomically) only if a
    float32 file is within 1e-4. Every argument, and LiteRT's presence, is
    checked before converting; the temporary SavedModel of the conversion
    lives in a hidden ``.tflite-staging-<pid>-*`` folder next to `path`, and
    those of killed exports are removed by the next one.

    Args:
        model: a functional or Sequential Keras model.
        path: the `.tflite` file to write; parent directories are created.
        quantization: None (default, float32), "float16" (float16 weights),
            "dynamic" (int8 weights, float activations) or "int8" (full
            integer, activations calibrated on `representative_dataset`).
        representative_dataset: for "int8" only: an iterable of input batches
            or a `tf.data.Dataset`; a batch is an array, a dict by input
            name, a list in input order, or a ``(x, y)`` tuple. Default None.
        validation_data: batches as `representative_dataset` to compare on;
            with it, classifiers also report top-1 agreement. Default None:
            one sample batch.
        output: "probabilities" (default) or "logits" for a classifier.
        sequence_length: the length a text model that takes any length
            (``FNet(sequence_length=None)``) is exported at; None (default)
            for models of fixed input shapes.
        overwrite: whether an existing `path` may be replaced. Default False.
        verify: run the file in LiteRT and compare it with Keras. Default
            True; False writes it unchecked (no LiteRT needed).
        verbose: print the report. Default True.

    Returns:
        A :class:`TFLiteReport`.

    Raises:
        ValueError: for an unknown `quantization` or `output`, "int8" without
            a `representative_dataset` (or one given to another
            quantization), or an existing `path` without `overwrite`; nothing
            is written.
        ImportError: `verify` without LiteRT installed (before converting).
        ParityError: if a float32 file differs from Keras by more than 1e-4;
            nothing is written.

    Example:
        >>> report = tflite(keras_fourier.GFNetTi(input_shape=(96, 160, 3)), "gfnet.tflite")
        >>> report.max_abs_diff < 1e-4
        True
    """
    path = os.fspath(path)
    check_output(output)
    check_arguments(path, quantization, representative_dataset, overwrite, verify)
    model = at_sequence_length(model, sequence_length)
    folder = os.path.dirname(os.path.abspath(path))
    created = not os.path.isdir(folder)
    os.makedirs(folder, exist_ok=True)
    remove_stale_directories(folder, STAGING_PREFIX)
    remove_stale_temporaries(folder)
    try:
        content = _convert(
            serving_model(model, output, fft_impl="matmul"),
            quantization,
            representative_dataset,
            folder,
        )
        reference = serving_model(model, output)
        max_diff, agreement, count = None, None, 0
        if verify:
            max_diff, agreement, count = compare(
                _runner(content), reference, validation_data, "LiteRT", quantization is None
            )
            if quantization is None:
                check_tolerance(max_diff, tolerance(reference, "tflite"), "float32 TFLite model")
        atomic_write_bytes(path, content)
    except BaseException:
        if created:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    report = TFLiteReport(
        path=path,
        quantization=quantization,
        size_bytes=len(content),
        max_abs_diff=max_diff,
        top1_agreement=agreement,
        num_examples=count,
        agreement=agreement_name(reference),
    )
    if verbose:
        print(report.summary())
    return report
