"""Segmentation data, predictions and exports within bounds: one line naming the file, or right.

Real files in tmp_path, given to the commands as a user does: masks in every
PNG encoding that carries labels (16-bit grey, palette indices, grey+alpha),
splits without a labelled pixel, images and masks over 40 megapixels (a few
kilobytes each), truncated files, an empty split, a label outside the
classes in a test mask; `predict` of a large image on a 150-class model in a
child process whose peak memory is measured; exports of an any-size
segmenter at sizes no machine holds; and the class lists of ``csv:`` data
with 100,000 labels.
"""

from __future__ import annotations

import os
import struct
import time
import zlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_fourier import segmentation
from keras_fourier.cli import main
from keras_fourier.data.checks import data_check_error
from keras_fourier.data.segmentation import (
    IGNORE_INDEX,
    load_segmentation_dataset,
)
from keras_fourier.data.text_files import read_text_split, text_label_ids
from keras_fourier.limits import MAX_MEMORY_ENV
from keras_fourier.model_record import CLASS_NAMES_KEY, TASK_KEY
from keras_fourier.models import build_model
from keras_fourier.tasks.segmentation import TASK
from keras_fourier.training.callbacks import save_model
from tests.faults import dead_pid
from tests.test_dense_cli import TINY
from tests.test_memory_bounds import run_probes

pytestmark = pytest.mark.single_backend

SIZE = 32
CLASSES = ["a", "b", "c"]
# PNG colour types.
GREY, RGB, PALETTE, GREY_ALPHA = 0, 2, 3, 4
# A VOC-style palette: index 1 dark red, 2 dark green, 255 the border colour.
VOC = {0: (0, 0, 0), 1: (128, 0, 0), 2: (0, 128, 0), 255: (224, 224, 192)}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(pixels: np.ndarray, colour: int, depth: int = 8, chunks: tuple = ()) -> bytes:
    """A PNG of `pixels` ((H, W) or (H, W, C) samples) of colour type `colour`, depth `depth`."""
    height, width = pixels.shape[:2]
    samples = pixels.reshape(height, -1).astype(">u2" if depth == 16 else np.uint8)
    raw = b"".join(b"\0" + row.tobytes() for row in samples)
    header = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            _chunk(b"IHDR", header),
            *chunks,
            _chunk(b"IDAT", zlib.compress(raw)),
            _chunk(b"IEND", b""),
        ]
    )


def _zeros_png(height: int, width: int) -> bytes:
    """A valid 1-bit black PNG of height x width, made in milliseconds at any size.

    After a full flush, deflate compresses each block of identical rows to the
    same bytes: one block is compressed and repeated, then the stream ends
    with the Adler-32 of all the rows.
    """
    row = b"\0" * (1 + (width + 7) // 8)
    rows_per_block = 1000
    blocks, rest = divmod(height, rows_per_block)
    assert rest == 0
    block = row * rows_per_block
    compressor = zlib.compressobj(9)
    first = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeated = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    adler = 1
    for _ in range(blocks):
        adler = zlib.adler32(block, adler)
    stream = first + repeated * (blocks - 1) + b"\x03\x00" + struct.pack(">I", adler)
    header = struct.pack(">IIBBBBB", width, height, 1, GREY, 0, 0, 0)
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", stream),
            _chunk(b"IEND", b""),
        ]
    )


def _labels(height: int = 12, width: int = 16) -> np.ndarray:
    labels = (np.arange(height * width).reshape(height, width) // 5 % 3).astype(np.uint8)
    labels[0, 0] = IGNORE_INDEX
    return labels


def _image(height: int = 12, width: int = 16) -> bytes:
    pixels = np.random.default_rng(height * width).integers(0, 256, (height, width, 3))
    return _png(pixels, RGB)


def _segdir(root, files: dict[str, dict[str, tuple[bytes, bytes | None]]]) -> str:
    """A segdir: folder; files: {split: {stem: (image PNG, mask PNG or None)}}."""
    for split, pairs in files.items():
        for stem, (image, mask) in pairs.items():
            for kind, data in (("images", image), ("masks", mask)):
                if data is not None:
                    os.makedirs(root / kind / split, exist_ok=True)
                    (root / kind / split / f"{stem}.png").write_bytes(data)
    (root / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    return f"segdir:{root}"


def _one_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Tiny segmenters' model.keras of 3 classes and of 150, and an any-size one."""
    root = tmp_path_factory.mktemp("models")
    paths = {}
    for classes in (3, 150):
        keras.utils.set_random_seed(classes)
        backbone = build_model(
            depths=1,
            dims=8,
            patch_size=4,
            input_shape=(SIZE, SIZE, 3),
            include_top=False,
            include_preprocessing=False,
        )
        model = segmentation.UPerNet(
            backbone=backbone, num_classes=classes, channels=8, input_shape=(SIZE, SIZE, 3)
        )
        names = CLASSES if classes == 3 else [f"class{index}" for index in range(classes)]
        paths[classes] = str(root / f"seg{classes}.keras")
        save_model(model, paths[classes], {TASK_KEY: TASK.name, CLASS_NAMES_KEY: names})
    model = segmentation.UPerNet(backbone="hornet_tiny", num_classes=3, channels=8)
    paths["any"] = str(root / "any.keras")
    model.save(paths["any"])
    return paths


def test_predict_memory_grows_with_pixels_not_classes(models, tmp_path, monkeypatch, capsys):
    # Finding: a 1600x1200 PNG on a 150-class model peaked at 3.1 GB (float logits of every
    # class at the image's size, int64 argmax, float64 overlay).
    small, large = tmp_path / "small.png", tmp_path / "large.png"
    small.write_bytes(_image(48, 64))
    large.write_bytes(_png(np.zeros((1200, 1600, 3), np.uint8), RGB))
    assert os.path.getsize(large) < 20_000
    out = str(tmp_path / "out")
    report = run_probes(
        [["predict", str(path), "--model", models[150], "--out", out] for path in (small, large)]
    )
    warm, probe = report["results"]
    assert warm["status"] == 0 and probe["status"] == 0, report
    # Measured: 60-130 MB above the small image's peak (1.9 GB before the fix).
    assert probe["peak"] - warm["peak"] < 512 * 2**20, report
    labels = tf.io.decode_png((tmp_path / "out" / "large_labels.png").read_bytes())
    assert labels.shape == (1200, 1600, 1) and int(tf.reduce_max(labels)) < 150
    # The estimate is checked against the ceiling before the image is decoded.
    monkeypatch.setenv(MAX_MEMORY_ENV, "64MB")
    argv = ["predict", str(large), "--model", models[3], "--out", str(tmp_path / "refused")]
    assert main(argv) == 2
    line = _one_line(capsys)
    assert "large.png" in line and "1200x1600 pixels" in line and MAX_MEMORY_ENV in line
    assert not (tmp_path / "refused").exists()


def test_export_beyond_memory_is_refused_in_one_line(models, tmp_path, capsys):
    # Finding: TFLite at --image-size 100000 or ONNX at 32x100000 took over 7 GB, and the
    # kill left a hidden staging folder; the next export removes those of dead processes.
    out = tmp_path / "exports"
    stale = out / f".export-{dead_pid()}-leftover"
    stale.mkdir(parents=True)
    (stale / "model.tflite").write_bytes(b"half")
    for formats, size, shown in (
        ("tflite", "100000", "100000x100000"),
        ("onnx", "32x100000", "32x100000"),
    ):
        argv = ["export", models["any"], "--format", formats, "--image-size", size]
        assert main([*argv, "--out", str(out)]) == 2
        line = _one_line(capsys)
        assert f"at {shown} pixels would need about" in line and MAX_MEMORY_ENV in line, line
        assert line.endswith(f"Received: --image-size={shown}"), line
    assert os.listdir(out) == []


def test_masks_are_read_as_their_label_values(tmp_path):
    # Finding: 16-bit grey masks became all 0; palette masks were read by colour; VOC-style
    # palette masks and grey+alpha masks were refused as colour PNGs.
    labels = _labels()
    palette = b"".join(bytes(VOC.get(index, (index, index, 0))) for index in range(256))
    masks = {
        "grey16": _png(labels.astype(np.uint16), GREY, 16),
        "palette": _png(  # ancillary chunks before the palette, as image editors write
            labels,
            PALETTE,
            chunks=(_chunk(b"gAMA", struct.pack(">I", 45455)), _chunk(b"PLTE", palette)),
        ),
        "palette_alpha": _png(
            labels, PALETTE, chunks=(_chunk(b"PLTE", palette), _chunk(b"tRNS", b"\x80" * 256))
        ),
        "grey_alpha": _png(np.stack([labels, np.full_like(labels, 200)], -1), GREY_ALPHA),
    }
    source = _segdir(tmp_path, {"test": {stem: (_image(), mask) for stem, mask in masks.items()}})
    data = load_segmentation_dataset(source, "test", image_size=16, batch_size=8)
    (_, read), *_ = list(data.as_numpy_iterator())
    for stem, mask in zip(sorted(masks), read, strict=True):
        np.testing.assert_array_equal(mask[:12], labels, err_msg=stem)


@pytest.mark.slow
def test_a_split_without_a_labelled_pixel_is_an_error(models, tmp_path, capsys):
    # Finding: every mask 255, or the test split all 255: loss 0, test_miou=0.0000, exit 0.
    ignored = _png(np.full((SIZE, SIZE), IGNORE_INDEX, np.uint8), GREY)
    labelled = _png(_labels(SIZE, SIZE), GREY)
    image = _image(SIZE, SIZE)
    files = {
        "train": {"t0": (image, ignored), "t1": (image, ignored)},
        "val": {"v0": (image, labelled)},
        "test": {"s0": (image, labelled)},
    }
    blank = _segdir(tmp_path / "blank", files)
    argv = ["train", "--task", "segmentation", *TINY, "--batch-size", "2", "--epochs", "1"]
    argv += ["--verbose", "0", "--no-tensorboard", "--data", blank]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    line = _one_line(capsys)
    assert "The train split ('train', 2 images)" in line and "no labelled pixel" in line, line
    files = {"test": {"a": (image, ignored), "b": (image, ignored)}}
    unlabelled_test = _segdir(tmp_path / "test_blank", files)
    assert main(["evaluate", "--model", models[3], "--data", unlabelled_test]) == 2
    line = _one_line(capsys)
    assert line.startswith("keras-fourier evaluate: error: Split 'test' of data 'segdir:"), line
    assert "no labelled pixel" in line


def test_bad_files_are_one_line_naming_the_file(models, tmp_path, capsys):
    # Finding: tracebacks, none naming the file; and a 60000x60000 mask refused without it.
    image, mask = _image(), _png(_labels(), GREY)
    outside = _labels()
    outside[5, 5] = 7
    cases = {
        "large_image": (_zeros_png(7000, 6000), mask, "is too large", "images"),
        "truncated_image": (image[: len(image) // 2], mask, "cannot be decoded", "images"),
        "truncated_mask": (image, mask[: len(mask) // 2], "cannot be decoded", "masks"),
        "huge_mask": (image, _zeros_png(60000, 60000), "more than 40000000", "masks"),
        "outside": (image, _png(outside, GREY), "has labels outside", "masks"),
    }
    for stem, (image_file, mask_file, reason, kind) in cases.items():
        source = _segdir(tmp_path / stem, {"test": {stem: (image_file, mask_file)}})
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            list(load_segmentation_dataset(source, "test", batch_size=1))
        line = str(data_check_error(caught.value, source))
        assert reason in line and str(tmp_path / stem / kind / "test" / f"{stem}.png") in line
        assert "\n" not in line
    # The commands give that line: here the test evaluation (`evaluate`, `train`'s last step).
    assert main(["evaluate", "--model", models[3], "--data", f"segdir:{tmp_path / 'outside'}"]) == 2
    line = _one_line(capsys)
    assert line.startswith("keras-fourier evaluate: error: Data 'segdir:") and "label 7" in line
    empty = tmp_path / "empty"
    (empty / "images" / "train").mkdir(parents=True)
    (empty / "masks" / "train").mkdir(parents=True)
    source = _segdir(empty, {"val": {"a": (image, mask)}})
    argv = ["train", "--task", "segmentation", *TINY, "--data", source, "--out", str(empty / "r")]
    assert main(argv) == 2
    assert "Split 'train' of image source" in _one_line(capsys)
    for stem, data in (("truncated", image[: len(image) // 2]), ("huge", _zeros_png(7000, 6000))):
        path = tmp_path / f"{stem}.png"
        path.write_bytes(data)
        assert main(["predict", str(path), "--model", models[3], "--out", str(tmp_path / "o")]) == 2
        assert f"Could not read {str(path)!r} as an image" in _one_line(capsys)


def test_predict_removes_temporaries_of_dead_predicts(models, tmp_path, capsys):
    # Finding: SIGKILL during the label map's write left `.<stem>_labels.png.<pid>-*.tmp.png`.
    out = tmp_path / "out"
    out.mkdir()
    left = out / f".canvas_labels.png.{dead_pid()}-0123abcd.tmp.png"
    live = out / f".other_labels.png.{os.getpid()}-0123abcd.tmp.png"
    for path in (left, live):
        path.write_bytes(b"\x89PNG half")
    (tmp_path / "canvas.png").write_bytes(_image(SIZE, SIZE))
    argv = ["predict", str(tmp_path / "canvas.png"), "--model", models[3], "--out", str(out)]
    assert main(argv) == 0
    assert "canvas_labels.png" in capsys.readouterr().out
    assert sorted(os.listdir(out)) == sorted([live.name, "canvas_labels.png", "canvas_overlay.png"])


def _csv(path, labels, unknown: str | None = None) -> None:
    rows = [f"text {index},{label}" for index, label in enumerate(labels)]
    if unknown is not None:
        rows.append(f"odd one,{unknown}")
    path.write_text("sentence,label\n" + "\n".join(rows) + "\n")


def test_an_unknown_label_lists_a_few_of_many_classes(tmp_path):
    # Finding: a 989,099-character line listing 100,000 classes.
    classes = [f"class{index}" for index in range(100_000)]
    _csv(tmp_path / "dev.csv", classes[:3], unknown="nowhere")
    rows = read_text_split(f"csv:{tmp_path}", "validation")
    with pytest.raises(ValueError) as caught:
        text_label_ids(rows, classes, f"csv:{tmp_path}", "validation")
    message = str(caught.value)
    assert "'nowhere' on line 5" in message and "of the 100,000 classes" in message
    assert "... and 99,992 more]" in message and len(message) < 400 and "\n" not in message


def test_ranking_the_labels_of_a_split_is_linear(tmp_path):
    # Finding: 100,000 rows of 100,000 labels took 52 s to rank (rows x classes).
    _csv(tmp_path / "all.csv", [f"class{index}" for index in range(100_000)])
    started = time.perf_counter()
    rows = read_text_split(f"csv:{tmp_path / 'all.csv'}", "train")
    elapsed = time.perf_counter() - started
    # Every class has one row, its first: all in "train" (0.3 s measured; 52 s before).
    assert len(rows.labels) == 100_000 and elapsed < 10, elapsed


def test_predict_refuses_inputs_that_would_overwrite_each_others_outputs(models, tmp_path, capsys):
    # Finding: a/x.png and b/x.png both wrote x_labels.png (the second silently replacing the
    # first); x.png and x.jpg would too
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.png").write_bytes(_image(SIZE, SIZE))
    first, second = str(tmp_path / "a" / "x.png"), str(tmp_path / "b" / "x.png")
    out = tmp_path / "out"
    assert main(["predict", first, second, "--model", models[3], "--out", str(out)]) == 2
    line = _one_line(capsys)
    assert f"Inputs {first!r} and {second!r} would write the same files x_* in" in line, line
    assert not out.exists()
