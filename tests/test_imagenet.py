"""ImageNet helpers: class names, preprocess_input, decode_predictions, `keras-fourier predict`."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_fourier
from keras_fourier.cli import main
from keras_fourier.imagenet import class_index
from keras_fourier.imagenet.predict import eval_crop_pct, load_image


def test_class_index_is_the_imagenet_1k_order():
    classes = class_index()
    assert len(classes) == 1000 and len({wnid for wnid, _ in classes}) == 1000
    assert classes[0] == ("n01440764", "tench")
    assert classes[2] == ("n01484850", "great_white_shark")
    assert classes[281] == ("n02123045", "tabby")
    assert classes[999] == ("n15075141", "toilet_tissue")


def test_decode_predictions_on_known_indices():
    preds = np.full((2, 1000), 1e-4, dtype="float32")
    preds[0, [281, 285, 7]] = [0.7, 0.2, 0.05]
    preds[1, 948] = 0.9
    decoded = keras_fourier.decode_predictions(keras.ops.convert_to_tensor(preds), top=3)
    assert [(wnid, name) for wnid, name, _ in decoded[0]] == [
        ("n02123045", "tabby"),
        ("n02124075", "Egyptian_cat"),
        ("n01514668", "cock"),
    ]
    np.testing.assert_allclose([score for *_, score in decoded[0]], [0.7, 0.2, 0.05], rtol=1e-6)
    assert decoded[1][0][:2] == ("n07742313", "Granny_Smith")
    assert len(keras_fourier.decode_predictions(preds)[1]) == 5


@pytest.mark.parametrize(
    "preds, top, message",
    [
        (np.zeros((1, 10)), 5, r"shape \(samples, 1000\). Received: preds.shape=\(1, 10\)"),
        (np.zeros((1000,)), 5, r"Received: preds.shape=\(1000,\)"),
        (np.zeros((1, 1000)), 0, r"`top` must be an int in \[1, 1000\]. Received: top=0"),
    ],
)
def test_decode_predictions_errors(preds, top, message):
    with pytest.raises(ValueError, match=message):
        keras_fourier.decode_predictions(preds, top=top)


def test_preprocess_input_modes():
    images = np.stack([np.full((2, 3, 3), 255.0), np.zeros((2, 3, 3))]).astype("uint8")
    same = keras_fourier.preprocess_input(images)
    assert same.dtype == np.float32
    np.testing.assert_array_equal(same, images.astype("float32"))
    torch_mode = keras_fourier.preprocess_input(images, mode="torch")
    np.testing.assert_allclose(
        torch_mode[0, 0, 0], [(1 - 0.485) / 0.229, (1 - 0.456) / 0.224, (1 - 0.406) / 0.225]
    )
    np.testing.assert_allclose(
        torch_mode[1, 1, 2], [-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225]
    )
    first = keras_fourier.preprocess_input(
        tf.constant(np.moveaxis(images, -1, 1)), data_format="channels_first", mode="torch"
    )
    np.testing.assert_allclose(np.moveaxis(keras.ops.convert_to_numpy(first), 1, -1), torch_mode)
    with pytest.raises(ValueError, match=r"`mode` must be one of .* Received: mode='caffe'"):
        keras_fourier.preprocess_input(images, mode="caffe")
    with pytest.raises(ValueError, match=r"3 channels .* Received: shape=\(2, 2, 3, 4\)"):
        keras_fourier.preprocess_input(np.zeros((2, 2, 3, 4)))


def _write_png(path, image):
    tf.io.write_file(str(path), tf.io.encode_png(tf.constant(image, tf.uint8)))
    return str(path)


def test_load_image_resizes_the_shorter_side_and_crops_the_centre(tmp_path):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (40, 64, 3))
    path = _write_png(tmp_path / "wide.png", image)
    loaded = load_image(path, 16, 16, crop_pct=0.8)  # shorter side to int(16 / 0.8) = 20
    resized = tf.image.resize(image.astype("float32"), (20, 32), "bicubic", antialias=True)
    expected = np.clip(resized.numpy()[2:18, 8:24], 0, 255)
    np.testing.assert_allclose(loaded, expected, atol=1e-4)
    assert (eval_crop_pct(224), eval_crop_pct(384)) == (0.875, 1.0)


def test_predict_command_prints_the_top_classes(tmp_path, capsys):
    model = keras_fourier.build_model(depths=1, dims=8, patch_size=8, input_shape=(16, 16, 3))
    model_path = str(tmp_path / "tiny.keras")
    model.save(model_path)
    rng = np.random.default_rng(1)
    images = [_write_png(tmp_path / f"{i}.png", rng.integers(0, 256, (20, 24, 3))) for i in (0, 1)]

    assert main(["predict", *images, "--model", model_path, "--top", "3"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == images[0] and lines[4] == images[1] and len(lines) == 8
    expected = keras_fourier.decode_predictions(
        model.predict(np.stack([load_image(images[0], 16, 16)]), verbose=0), top=3
    )[0]
    for line, (wnid, name, probability) in zip(lines[1:4], expected, strict=True):
        match = re.fullmatch(r"  \d\. +(\d+\.\d\d)%  (\S+) \((n\d{8})\)", line)
        assert match, line
        assert (match[2], match[3]) == (name, wnid)
        assert float(match[1]) == pytest.approx(100 * probability, abs=0.006)


def test_predict_command_errors(tmp_path, capsys):
    model = keras_fourier.build_model(
        depths=1, dims=8, patch_size=8, input_shape=(16, 16, 3), classes=10
    )
    model_path = str(tmp_path / "ten.keras")
    model.save(model_path)
    assert main(["predict", str(tmp_path / "none.jpg"), "--model", model_path]) == 2
    assert "No such image file(s):" in capsys.readouterr().err
    keras_fourier.build_model(depths=1, dims=8, patch_size=8, input_shape=(16, 16, 3)).save(
        model_path := str(tmp_path / "thousand.keras")
    )
    (tmp_path / "bad.png").write_bytes(b"not an image")
    assert main(["predict", str(tmp_path / "bad.png"), "--model", model_path]) == 2
    assert "as an image" in capsys.readouterr().err


def test_predict_labels_a_model_without_stored_names_by_index(tmp_path, capsys):
    model = keras_fourier.build_model(
        depths=1, dims=8, patch_size=8, input_shape=(16, 16, 3), classes=10
    )
    model_path = str(tmp_path / "ten.keras")
    model.save(model_path)
    image = _write_png(tmp_path / "a.png", np.zeros((20, 16, 3)))
    assert main(["predict", image, "--model", model_path, "--top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(
        re.fullmatch(r"  \d\. +\d+\.\d\d%  class \d", x) for x in lines[1:]
    )


def test_predict_on_the_model_of_a_training_run_prints_its_class_names(
    readme_main_job, tmp_path, capsys
):
    from keras_fourier.data import load_digits
    from keras_fourier.model_record import read_checkpoint_record

    # The README main job's run folder (at least 95% test accuracy, checked in test_cli): a
    # weaker model could not tell the run's preprocessing from chance.
    assert readme_main_job.returncode == 0, readme_main_job.stderr[-4000:]
    out = str(readme_main_job.folder / "runs" / "default")
    record = read_checkpoint_record(f"{out}/model.keras")
    assert record["class_names"] == [str(digit) for digit in range(10)]
    # Real image files: test digits as 8x8 grayscale PNGs, as a user would save them.
    images, labels = load_digits("test")
    chosen = [int(np.flatnonzero(labels == digit)[0]) for digit in range(10)]
    paths = []
    for index in chosen:
        pixels = np.round(images[index]).astype(np.uint8)
        path = tmp_path / f"digit{labels[index]}.png"
        tf.io.write_file(str(path), tf.io.encode_png(tf.constant(pixels)))
        paths.append(str(path))

    assert main(["predict", *paths, "--model", out, "--top", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 40
    top1 = []
    for image in range(10):
        assert lines[4 * image] == paths[image]
        ranked = [
            re.fullmatch(r"  \d\. +(\d+\.\d\d)%  (\d)", x) for x in lines[4 * image + 1 :][:3]
        ]
        assert all(ranked), lines[4 * image + 1 :][:3]
        top1.append(int(ranked[0][2]))
        assert float(ranked[0][1]) >= float(ranked[1][1]) >= float(ranked[2][1])
    # The run's preprocessing (16x16 from 8x8, its crop): most test digits come out right.
    correct = sum(guess == int(labels[i]) for guess, i in zip(top1, chosen, strict=True))
    assert correct >= 7, top1
