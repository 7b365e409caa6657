"""ONNX export: standard ops only, parity with Keras in onnxruntime for every family."""

import os

import keras
import numpy as np
import onnx
import onnxruntime
import pytest

from keras_fourier import cli, export
from keras_fourier.export import parity
from keras_fourier.models import FNet
from tests.test_export import (
    FAMILIES,
    TINY_FNET,
    _fnet_inputs,
    _images,
    _small_gfnet,
    _tiny_fnet,
)

# Operators of the default ONNX domain; no FFT/DFT, no contrib or custom domain.
STANDARD_OPS = {
    "Add", "Cast", "Concat", "Conv", "Div", "Erf", "Expand", "Gather", "GlobalAveragePool",
    "Identity", "MatMul", "Max", "Mul", "Neg", "Pow", "Reciprocal", "ReduceMean", "ReduceProd",
    "Relu", "Reshape", "Shape", "Slice", "Softmax", "Split", "Sqrt", "Squeeze", "Sub", "Tile",
    "Transpose", "Unsqueeze", "Where", "Equal", "Not", "Less", "Greater", "Range", "ReduceSum",
    "Tanh", "Sigmoid", "Abs", "Sign", "Min", "Exp", "Log", "Pad", "Flatten", "Gemm",
}  # fmt: skip


def _run(path, inputs):
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs), strict=True)), session


def _check_graph(path):
    graph = onnx.load(path)
    onnx.checker.check_model(graph)
    assert {node.domain for node in graph.graph.node} <= {""}
    ops = {node.op_type for node in graph.graph.node}
    assert ops <= STANDARD_OPS, ops - STANDARD_OPS
    assert not ops & {"DFT", "Rfft", "Irfft", "STFT"}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_vision_family_runs_in_onnxruntime_like_keras(family, tmp_path):
    model = FAMILIES[family]((32, 64))
    path = tmp_path / "model.onnx"
    report = export.onnx(model, path, output="logits", verbose=False)
    assert report.path == str(path) and report.size_bytes == os.path.getsize(path)
    assert report.max_abs_diff <= 1e-4
    _check_graph(path)
    assert set(report.op_types) <= STANDARD_OPS

    images = _images((32, 64), batch=3).astype("float32")
    outputs, session = _run(str(path), {"images": images})
    assert [i.name for i in session.get_inputs()] == ["images"]
    assert session.get_inputs()[0].shape == ["batch", 32, 64, 3]
    expected = model.predict(images, verbose=0)
    logits = outputs["logits"]
    np.testing.assert_allclose(
        np.exp(logits) / np.exp(logits).sum(-1, keepdims=True), expected, atol=1e-5
    )
    assert not np.allclose(logits, logits[:1])  # the examples give different answers


@pytest.mark.parametrize("num_classes", [3, None], ids=["classifier", "encoder"])
def test_fnet_runs_in_onnxruntime_like_keras(num_classes, tmp_path):
    model = _tiny_fnet(num_classes)
    path = tmp_path / "fnet.onnx"
    report = export.onnx(model, path, verbose=False)
    assert report.max_abs_diff <= 1e-4
    _check_graph(path)
    inputs = _fnet_inputs()
    outputs, session = _run(str(path), inputs)
    assert sorted(i.name for i in session.get_inputs()) == sorted(inputs)
    expected = model(inputs, training=False)
    if num_classes:
        probabilities = np.exp(expected) / np.exp(expected).sum(-1, keepdims=True)
        np.testing.assert_allclose(outputs["probabilities"], probabilities, atol=1e-5)
    else:
        assert sorted(outputs) == ["pooled_output", "sequence_output"]
        for name, value in outputs.items():
            np.testing.assert_allclose(value, expected[name], atol=1e-4)


def test_failed_check_and_existing_file_write_nothing(tmp_path, monkeypatch):
    model = _small_gfnet()
    path = tmp_path / "model.onnx"
    monkeypatch.setitem(parity.TOLERANCES, "onnx", 0.0)
    with pytest.raises(RuntimeError, match=r"differs from Keras by .* > 0.0; nothing was written"):
        export.onnx(model, path, output="logits", verbose=False)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    path.write_bytes(b"previous")
    with pytest.raises(ValueError, match=r"already exists; pass overwrite=True"):
        export.onnx(model, path, verbose=False)
    assert path.read_bytes() == b"previous"
    with pytest.raises(ValueError, match=r"`output` must be one of"):
        export.onnx(model, tmp_path / "other.onnx", output="scores", verbose=False)
    report = export.onnx(model, path, overwrite=True, verbose=False)
    assert report.max_abs_diff <= 1e-4 and path.read_bytes() != b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_cli_exports_onnx(tmp_path, capsys):
    model_path = tmp_path / "gfnet.keras"
    _small_gfnet().save(model_path)
    out = tmp_path / "out"
    assert cli.main(["export", str(model_path), "--format", "onnx", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["gfnet_ti.onnx"]
    printed = capsys.readouterr().out
    assert printed.startswith(f"Wrote ONNX {out / 'gfnet_ti.onnx'} (opset ")
    assert printed.count("Wrote") == 1 and ".export-" not in printed


def test_cli_exports_a_free_length_fnet_to_onnx_at_the_given_length(tmp_path, capsys):
    keras.utils.set_random_seed(5)
    model = FNet(
        TINY_FNET, vocabulary_size=50, max_sequence_length=16, num_segments=2, num_classes=3
    )
    model.save(tmp_path / "fnet.keras")
    out = tmp_path / "out"
    argv = ["export", str(tmp_path / "fnet.keras"), "--format", "onnx", "--out", str(out)]
    assert cli.main([*argv, "--sequence-length", "10"]) == 0
    assert capsys.readouterr().out.startswith(f"Wrote ONNX {out / 'fnet.onnx'} (opset ")
    _check_graph(out / "fnet.onnx")
    rng = np.random.default_rng(6)
    inputs = {
        "token_ids": rng.integers(0, 50, (4, 10)).astype("int32"),
        "segment_ids": rng.integers(0, 2, (4, 10)).astype("int32"),
    }
    outputs, session = _run(str(out / "fnet.onnx"), inputs)
    assert {i.name: i.shape for i in session.get_inputs()} == {
        "token_ids": ["batch", 10],
        "segment_ids": ["batch", 10],
    }
    expected = keras.ops.convert_to_numpy(keras.ops.softmax(model(inputs, training=False)))
    np.testing.assert_allclose(outputs["probabilities"], expected, atol=1e-5)
    assert not np.allclose(expected, expected[:1])  # the texts give different answers
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument):
        session.run(None, {name: value[:, :8] for name, value in inputs.items()})
