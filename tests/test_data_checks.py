"""Image data that cannot make sense is refused with a message naming it."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import tensorflow as tf

from keras_fourier.cli import main
from keras_fourier.data import load_image_dataset
from keras_fourier.data.checks import find_unreadable

TINY_ARGV = ["--model", "gfnet_tiny", "--dims", "16", "--depths", "1", "--no-tensorboard"]
TINY_ARGV += ["--epochs", "1", "--batch-size", "4", "--verbose", "0"]


def _images(folder: pathlib.Path, count: int, seed: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for index in range(count):
        pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        (folder / f"{index}.png").write_bytes(tf.io.encode_png(pixels).numpy())


def _corrupt_jpeg(path: pathlib.Path) -> None:
    data = tf.io.encode_jpeg(np.full((16, 16, 3), 90, np.uint8)).numpy()
    path.write_bytes(data[:20] + b"\x00garbage" * 20)


def test_one_class_folder_is_refused_naming_it(tmp_path, capsys):
    _images(tmp_path / "data" / "only", 10)
    with pytest.raises(ValueError, match=r"at least two class folders.*found 1: \['only'\]"):
        load_image_dataset(f"dir:{tmp_path / 'data'}", image_size=8, batch_size=2)
    out = tmp_path / "run"
    assert main(["train", *TINY_ARGV, "--data", f"dir:{tmp_path / 'data'}", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "['only']" in captured.err
    assert "test_accuracy" not in captured.out
    assert not out.exists()


def test_split_folders_with_other_classes_are_refused_naming_them(tmp_path):
    for split, classes in (("train", ("cat", "dog")), ("test", ("cat", "fox"))):
        for name in classes:
            _images(tmp_path / split / name, 4)
    for split in ("train", "test"):
        with pytest.raises(ValueError, match=r"'test' lacks \['dog'\] and has \['fox'\]"):
            load_image_dataset(f"dir:{tmp_path}", split, image_size=8, batch_size=2)


def test_split_smaller_than_a_batch_gives_the_counts(tmp_path):
    for name in ("a", "b"):
        _images(tmp_path / "train" / name, 3)
        _images(tmp_path / "test" / name, 1)
    source = f"dir:{tmp_path}"
    with pytest.raises(ValueError, match=r"'train'.*has 6 images, fewer than one batch of 8"):
        load_image_dataset(source, "train", image_size=8, batch_size=8)
    images, _ = next(iter(load_image_dataset(source, "test", image_size=8, batch_size=8)))
    assert images.shape == (2, 8, 8, 3)
    (tmp_path / "validation" / "a").mkdir(parents=True)
    (tmp_path / "validation" / "b").mkdir()
    with pytest.raises(ValueError, match=r"Class folder '.*validation/a' .* holds no image files"):
        load_image_dataset(source, "validation", image_size=8, batch_size=8)


@pytest.mark.slow
def test_corrupt_jpeg_is_named_or_skipped_and_counted(tmp_path, capsys):
    for name in ("a", "b"):
        _images(tmp_path / "train" / name, 4)
        _images(tmp_path / "test" / name, 2)
    bad = tmp_path / "train" / "b" / "broken.jpg"
    _corrupt_jpeg(bad)
    source = f"dir:{tmp_path}"
    dataset = load_image_dataset(source, image_size=8, batch_size=3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"Cannot decode image file.*{bad}"):
        for _ in dataset:
            pass
    assert find_unreadable([str(bad), str(tmp_path / "train" / "a" / "0.png")]) == [str(bad)]

    skipping = load_image_dataset(source, image_size=8, batch_size=3, on_bad_image="skip")
    # No validation folder: every tenth image of a class (3.png) is held out of train for it.
    assert "skipped 1 unreadable image(s) of 7" in capsys.readouterr().err
    assert sum(int(images.shape[0]) for images, _ in skipping) == 6  # 6 readable, full batches

    out = tmp_path / "run"
    argv = ["train", *TINY_ARGV, "--data", source, "--out", str(out)]
    assert main(argv) == 2
    assert f"Cannot decode image file {str(bad)!r}" in capsys.readouterr().err
    assert main([*argv[:-2], "--out", str(tmp_path / "skip"), "--on-bad-image", "skip"]) == 0
    captured = capsys.readouterr()
    assert "skipped 1 unreadable image(s)" in captured.err
    assert captured.out.strip().splitlines()[-1].startswith("test_accuracy=")
