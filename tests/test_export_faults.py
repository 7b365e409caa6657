"""Exports under real faults: missing prerequisites, read-only folders, kills, huge images."""

from __future__ import annotations

import os
import struct
import sys
import zlib

import numpy as np
import pytest
import tensorflow as tf

from keras_fourier import cli, export
from keras_fourier.export import parity
from keras_fourier.models import build_model
from tests.faults import dead_pid, digests, unwritable


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    model = build_model(
        "global_filter", depths=1, dims=16, patch_size=4, input_shape=(16, 16, 3), classes=3
    )
    path = tmp_path_factory.mktemp("model") / "tiny.keras"
    model.save(path)
    return str(path), model


def _export(model_file, out, *extra) -> int:
    return cli.main(["export", model_file[0], "--out", str(out), *extra])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--quantize", "int8"], "--quantize int8 needs calibration images: pass --data"),
        (["--quantize", "int8", "--data", "digits", "--num-batches", "0"], "--num-batches=0"),
        (["--crop-pct", "0"], "--crop-pct=0.0"),
        (["--max-pixels", "0"], "--max-pixels=0"),
    ],
)
def test_refused_exports_write_nothing(model_file, tmp_path, capsys, extra, message):
    out = tmp_path / "models"
    assert _export(model_file, out, *extra) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_read_only_or_file_output_is_refused_before_converting(model_file, tmp_path, capsys):
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    with unwritable(read_only):
        assert _export(model_file, read_only / "models") == 2
        assert "is not writable" in capsys.readouterr().err
        assert _export(model_file, read_only) == 2
        assert "is not writable" in capsys.readouterr().err
        assert os.listdir(read_only) == []
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert _export(model_file, a_file) == 2
    assert "is a file" in capsys.readouterr().err
    assert a_file.read_text() == "x"


def test_missing_checker_is_named_before_converting_and_no_verify_keeps_the_file(
    model_file, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)
    out = tmp_path / "models"
    assert _export(model_file, out, "--format", "tflite") == 2
    assert 'pip install "keras-fourier[export]"' in capsys.readouterr().err
    assert not out.exists()
    assert _export(model_file, out, "--format", "tflite", "--no-verify") == 0
    assert "not checked against Keras" in capsys.readouterr().out
    name = model_file[1].name
    assert os.listdir(out) == [f"{name}.tflite"]
    assert (out / f"{name}.tflite").stat().st_size > 1000


def test_failed_export_removes_what_it_wrote_and_stale_staging_folders(
    model_file, tmp_path, capsys, monkeypatch
):
    _, model = model_file
    out = tmp_path / "models"
    base = out / model.name
    dead = dead_pid()
    for stale in (base / f".staging-{dead}-abc", out / f".tflite-staging-{dead}-abc"):
        stale.mkdir(parents=True)
        (stale / "variables.data").write_bytes(b"0" * 1000)
    (base / f".staging-1-{'0' * 32}").mkdir()  # the naming of version 0.1.0
    alive = base / f".staging-{os.getpid()}-live"
    alive.mkdir()
    (out / f".tiny.tflite.{dead}-abcd.tmp.tflite").write_bytes(b"partial")

    monkeypatch.setitem(parity.TOLERANCES, "tflite", -1.0)
    capsys.readouterr()
    assert _export(model_file, out) == 1  # a failed parity check: one line, no traceback
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("keras-fourier export: error: The float32")
    assert "differs from Keras by" in error and "> -1.0; nothing was written" in error
    assert sorted(os.listdir(base)) == [alive.name]
    assert sorted(os.listdir(out)) == [model.name]
    monkeypatch.undo()
    assert _export(model_file, out) == 0
    # One line per output, naming where it was placed, never the hidden staging folder.
    printed = capsys.readouterr().out
    assert ".export-" not in printed
    wrote = [line for line in printed.splitlines() if line.startswith("Wrote")]
    assert wrote[0] == f"Wrote SavedModel {base / '1'}"
    assert wrote[1].startswith(f"Wrote TFLite {out / model.name}.tflite (float32, ")
    assert "max |LiteRT - Keras| = " in wrote[1] and len(wrote) == 2
    assert sorted(os.listdir(base)) == sorted(["1", alive.name])
    assert sorted(os.listdir(out)) == sorted([model.name, f"{model.name}.tflite", "models.config"])


def _png_header(height: int, width: int) -> bytes:
    """A PNG signature and IHDR chunk claiming height x width RGB pixels, then junk."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", 13)
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
        + b"\0" * 64
    )


def test_header_sizes_and_oversized_png_refused_before_decoding(model_file, tmp_path):
    pixels = tf.zeros((40, 60, 3), tf.uint8)
    for encoded in (tf.io.encode_png(pixels), tf.io.encode_jpeg(pixels)):
        assert export.header_image_size(encoded).numpy().tolist() == [40, 60]
    assert export.header_image_size(tf.constant(_png_header(20000, 30000))).numpy().tolist() == [
        20000,
        30000,
    ]
    report = export.saved_model(
        model_file[1], tmp_path / "serving", max_pixels=100_000, verbose=False
    )
    serve = tf.saved_model.load(report.path).signatures[export.BYTES_SIGNATURE]
    small = tf.io.encode_png(tf.fill((100, 90, 3), tf.constant(7, tf.uint8)))
    assert serve(image_bytes=tf.stack([small]))["probabilities"].shape == (1, 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Image too large.*20000.*20000"):
        serve(image_bytes=tf.constant([_png_header(20000, 20000)]))
    big = tf.io.encode_png(tf.zeros((400, 300, 3), tf.uint8))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"> 100000 pixels"):
        serve(image_bytes=tf.stack([big]))
    assert np.isfinite(serve(image_bytes=tf.stack([small, small]))["probabilities"]).all()
    # An empty request is refused naming the input, not answered with a shape error.
    with pytest.raises(tf.errors.InvalidArgumentError, match="input image_bytes is an empty batch"):
        serve(image_bytes=tf.constant([], tf.string))


def test_int8_with_an_empty_calibration_set_writes_nothing(model_file, tmp_path):
    path = tmp_path / "out" / "tiny_int8.tflite"
    with pytest.raises(ValueError, match="at least one calibration batch"):
        export.tflite(model_file[1], path, "int8", representative_dataset=[], verbose=False)
    assert not (tmp_path / "out").exists()


def test_failed_overwrite_leaves_the_previous_export_whole(model_file, tmp_path, monkeypatch):
    # The SavedModel is written before the TFLite check fails: with --overwrite the
    # old version must come back, byte for byte, with nothing set aside left over.
    out = tmp_path / "models"
    assert _export(model_file, out) == 0
    previous = digests(out)
    monkeypatch.setitem(parity.TOLERANCES, "tflite", -1.0)
    assert _export(model_file, out, "--overwrite") == 1
    assert digests(out) == previous
    monkeypatch.undo()
    assert _export(model_file, out, "--overwrite") == 0
    assert sorted(digests(out)) == sorted(previous)


def test_int8_export_without_the_private_quantizer_writes_the_same_file(model_file, tmp_path):
    # A TensorFlow whose `mlir_quantize` lacks the arguments the export passes: the export
    # falls back to TensorFlow's QuantizationDebugger, which quantizes through it the same way.
    from tensorflow.lite.python import convert as lite_convert

    images = [np.random.default_rng(seed).uniform(size=(2, 16, 16, 3)) for seed in range(2)]
    direct = tmp_path / "direct.tflite"
    export.tflite(model_file[1], direct, "int8", images, verbose=False)
    quantize = lite_convert.mlir_quantize
    calls = []

    def moved(*args, **kwargs):
        calls.append(kwargs)
        return quantize(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lite_convert, "mlir_quantize", moved)
        fallback = tmp_path / "fallback.tflite"
        report = export.tflite(model_file[1], fallback, "int8", images, verbose=False)
    assert any(call.get("enable_numeric_verify") for call in calls)  # the debugger's
    assert fallback.read_bytes() == direct.read_bytes()
    assert 0 < report.max_abs_diff < 0.1  # of probabilities


def test_a_file_litert_cannot_run_is_a_one_line_parity_error():
    from keras_fourier.export import litert

    class Reshaped(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([2, 3], tf.float32)])
        def serving_default(self, x):
            return {"y": tf.reshape(x, tf.stack([tf.cast(x[0, 0], tf.int32), -1]))}

    module = Reshaped()
    function = module.serving_default.get_concrete_function()
    content = tf.lite.TFLiteConverter.from_concrete_functions([function], module).convert()
    run = litert._runner(content)
    assert run({"x": np.ones((2, 3), np.float32)})["y"].shape == (1, 6)
    with pytest.raises(parity.ParityError, match="RESHAPE") as error:
        run({"x": np.full((2, 3), 4.0, np.float32)})  # 6 values into 4 rows
    assert "\n" not in str(error.value)
