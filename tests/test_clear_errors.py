"""Clear errors naming the argument and value: damaged .keras files, other weights, channels."""

from __future__ import annotations

import json
import re
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_fourier import cli
from keras_fourier.models import build_model
from keras_fourier.weights.saved import load_keras_file, load_weights_file

# The layer, model and weight tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend


def _tiny(dims: int = 16, channels: int = 3, **options):
    return build_model(
        "global_filter",
        depths=1,
        dims=dims,
        patch_size=4,
        input_shape=(16, 16, channels),
        classes=3,
        **options,
    )


@pytest.mark.parametrize("how", ["empty", "truncated"])
def test_damaged_keras_file_is_named(tmp_path, capsys, how):
    path = tmp_path / "model.keras"
    _tiny().save(path)
    data = path.read_bytes()
    path.write_bytes(b"" if how == "empty" else data[: len(data) // 2])
    expected = (
        "empty (0 bytes)" if how == "empty" else f"not a complete .keras zip ({len(data) // 2}"
    )
    with pytest.raises(ValueError, match=re.escape(f"{str(path)!r} is {expected}")):
        load_keras_file(path)
    assert cli.main(["export", str(path), "--out", str(tmp_path / "out")]) == 2
    assert str(path) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=r"No \.keras file at"):
        load_keras_file(tmp_path / "missing.keras")


def _with_layer_config(source, target, **fields) -> None:
    """Copies the .keras file `source` to `target`, `fields` set in its second layer's config."""
    with zipfile.ZipFile(source) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(members["config.json"])
    config["config"]["layers"][1].update(fields)
    members["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


@pytest.mark.single_backend
def test_refused_unsafe_keras_file_is_one_line_with_exit_2(tmp_path, capsys):
    inputs = keras.Input((8, 8, 3))
    features = keras.layers.GlobalAveragePooling2D()(inputs)
    plain = keras.Model(inputs, keras.layers.Dense(1000, activation="softmax")(features))
    plain.save(tmp_path / "plain.keras")
    lambda_model = keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs))
    lambda_model.save(tmp_path / "lambda.keras")
    marker = tmp_path / "ran"
    # A layer that names os.system, and one of a package Keras does not know.
    _with_layer_config(
        tmp_path / "plain.keras",
        tmp_path / "system.keras",
        module="os",
        class_name="system",
        config={"command": f"touch {marker}"},
    )
    _with_layer_config(
        tmp_path / "plain.keras",
        tmp_path / "unknown.keras",
        module="their_package.layers",
        class_name="Mystery",
        registered_name="their_package>Mystery",
    )
    image = tmp_path / "cat.png"
    image.write_bytes(tf.io.encode_png(tf.zeros((8, 8, 3), tf.uint8)).numpy())
    out = tmp_path / "exported"
    for name, reason in [
        ("lambda", "Lambda"),
        ("system", "Could not locate class 'system'"),
        ("unknown", "Could not locate class 'Mystery'"),
    ]:
        path = str(tmp_path / f"{name}.keras")
        for argv in (
            ["evaluate", "--model", path],
            ["export", path, "--out", str(out)],
            ["predict", str(image), "--model", path],
            ["flops", path],
        ):
            assert cli.main(argv) == 2, argv
            printed = capsys.readouterr()
            assert printed.out == ""
            assert printed.err.count("\n") == 1, printed.err
            assert printed.err.startswith(
                f"keras-fourier {argv[0]}: error: Refused the .keras file"
            )
            assert reason in printed.err and path in printed.err
    assert not out.exists() and not marker.exists()


def test_weights_file_of_other_shapes_names_the_first_differing_tensors(tmp_path):
    path = tmp_path / "small.weights.h5"
    _tiny(dims=16).save_weights(path)
    model = _tiny(dims=24)
    before = [weight.copy() for weight in model.get_weights()]
    with pytest.raises(
        ValueError, match=r"first differing tensors: layers/\S+: file \(\d+.*model \("
    ):
        load_weights_file(model, str(path))
    for weight, old in zip(model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(weight, old)
    truncated = tmp_path / "truncated.weights.h5"
    truncated.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"not a readable \.weights\.h5 file \(100 bytes"):
        load_weights_file(model, str(truncated))


def test_preprocessing_needs_three_channels():
    with pytest.raises(ValueError, match=r"needs 3 channels.*input_shape=\(16, 16, 1\)"):
        _tiny(channels=1)
    assert _tiny(channels=1, include_preprocessing=False).output_shape == (None, 3)
