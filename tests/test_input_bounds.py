"""Untrusted images bounded, NaN never passing a check, and one-line argument errors."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from keras_fourier import cli, export
from keras_fourier.data import eval_transform, load_image_dataset
from keras_fourier.export import parity
from keras_fourier.export.signatures import decode_images, serving_model
from keras_fourier.imagenet.predict import load_image
from keras_fourier.models import build_model


def _lossless_webp(height: int, width: int) -> bytes:
    """The 34-byte header of a lossless WebP declaring height x width (no pixel data)."""
    bits = (width - 1) | ((height - 1) << 14)
    chunk = b"\x2f" + bits.to_bytes(4, "little") + b"\0" * 9
    return (
        b"RIFF"
        + (12 + len(chunk)).to_bytes(4, "little")
        + b"WEBP"
        + b"VP8L"
        + (len(chunk)).to_bytes(4, "little")
        + chunk
    )


def test_webp_sizes_are_read_and_a_huge_one_refused_everywhere(tmp_path):
    bomb = _lossless_webp(16000, 16000)
    assert len(bomb) == 34
    assert export.header_image_size(tf.constant(bomb)).numpy().tolist() == [16000, 16000]
    assert export.header_image_size(tf.constant(_lossless_webp(30, 50))).numpy().tolist() == [
        30,
        50,
    ]
    assert export.header_image_size(tf.constant(b"not an image")).numpy().tolist() == [-1, -1]
    with pytest.raises(tf.errors.InvalidArgumentError, match="16000"):
        decode_images(tf.constant([bomb]), eval_transform((8, 8)), 8, 8)
    path = tmp_path / "bomb.webp"
    path.write_bytes(bomb)
    with pytest.raises(ValueError, match="Image too large or of unknown format"):
        load_image(str(path), 8, 8)
    root = tmp_path / "data"
    for name in ("a", "b"):  # a train folder: every file of it is in the train split
        (root / "train" / name).mkdir(parents=True)
        tf.io.write_file(
            str(root / "train" / name / "ok.png"), tf.io.encode_png(tf.zeros((8, 8, 3), "uint8"))
        )
    (root / "train" / "a" / "bomb.png").write_bytes(bomb)  # decoded by content, not name
    dataset = load_image_dataset(f"dir:{root}", "train", image_size=8, batch_size=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bomb\.png"):
        list(dataset)


def test_a_fifo_in_dir_data_is_skipped_by_name_and_an_empty_class_refused(tmp_path, capsys):
    root = tmp_path / "data" / "train"
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for index in range(2):
            image = tf.fill((8, 8, 3), tf.constant(40 * index, tf.uint8))
            tf.io.write_file(str(root / name / f"{index}.png"), tf.io.encode_png(image))
    os.mkfifo(root / "a" / "pipe.jpg")  # read, it would block forever
    dataset = load_image_dataset(f"dir:{root.parent}", "train", image_size=8, batch_size=1)
    assert len(list(dataset)) == 4  # the four images, not the pipe
    assert "pipe.jpg" in capsys.readouterr().err
    (root / "c").mkdir()
    with pytest.raises(ValueError, match=r"Class folder '.*/train/c' .* holds no image files"):
        load_image_dataset(f"dir:{root.parent}", "train", image_size=8, batch_size=1)


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    model = build_model(
        "global_filter", depths=1, dims=16, patch_size=4, input_shape=(16, 16, 3), classes=10
    )
    model.save(folder / "ten.keras")
    model.set_weights([np.full_like(weight, np.nan) for weight in model.get_weights()])
    model.save(folder / "nan.keras")
    three = build_model(
        "global_filter", depths=1, dims=16, patch_size=4, input_shape=(16, 16, 3), classes=3
    )
    three.save(folder / "three.keras")
    return folder, model


def test_a_model_that_outputs_nan_fails_the_conversion_checks(tiny_files):
    _, nan_model = tiny_files
    reference = serving_model(nan_model, "probabilities")
    with pytest.raises(RuntimeError, match="Keras model itself outputs non-finite values"):
        parity.compare(reference.run, reference, None, "LiteRT")

    def nan_conversion(inputs):
        return {name: value * np.nan for name, value in reference_ok.run(inputs).items()}

    reference_ok = serving_model(
        build_model(
            "global_filter", depths=1, dims=16, patch_size=4, input_shape=(16, 16, 3), classes=10
        ),
        "probabilities",
    )
    max_diff, _, _ = parity.compare(nan_conversion, reference_ok, None, "ONNX")
    with pytest.raises(RuntimeError, match="differs from Keras by nan"):
        parity.check_tolerance(max_diff, 1e-4, "ONNX model")


def test_nan_weights_evaluate_is_an_error(tiny_files, capsys):
    folder, _ = tiny_files
    argv = ["evaluate", "--model", str(folder / "nan.keras"), "--split", "validation"]
    assert cli.main(argv) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "gives a nan loss" in error


def test_build_model_refuses_nan_layer_scale_and_fractional_dims():
    with pytest.raises(ValueError, match=r"layer_scale=nan"):
        build_model("global_filter", depths=1, dims=16, layer_scale=float("nan"))
    with pytest.raises(ValueError, match=r"dims=8\.5"):
        build_model("global_filter", depths=1, dims=8.5)
    with pytest.raises(ValueError, match=r"patch_size=0"):
        build_model("global_filter", depths=1, dims=16, patch_size=0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch-size", "0"], "--batch-size=0"),
        (["--eval-examples", "0"], "--eval-examples=0"),
        (["--split", "bogus"], "Unknown split 'bogus'"),
        (["--data", "nope:x"], "nope:x"),
    ],
)
def test_evaluate_argument_errors_are_one_line(tiny_files, capsys, argv, message):
    folder, _ = tiny_files
    assert cli.main(["evaluate", "--model", str(folder / "ten.keras"), *argv]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error


def test_evaluate_on_data_of_another_class_count_names_both(tiny_files, capsys):
    folder, _ = tiny_files
    assert cli.main(["evaluate", "--model", str(folder / "three.keras")]) == 2
    error = capsys.readouterr().err
    assert "outputs 3 classes but data 'digits' has 10" in error


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["flops", "bogus_model"], "model='bogus_model'"),
        (["flops", "gfnet_tiny", "--image-size", "0"], "input_shape=(0, 0, 3)"),
        (["bench", "--scaling", "--grids", "0"], "--grids=[0]"),
        (["bench", "gfnet_tiny", "--batch-size", "0"], "--batch-size=0"),
        (["bench", "gfnet_tiny", "--out", __file__], "--out must be a folder"),
        (["train", "--patch-size", "0", "--out", "unused"], "--patch-size=0"),
    ],
)
def test_flops_and_bench_argument_errors_are_one_line_exit_2(capsys, argv, message):
    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error and error.startswith("keras-fourier ")
