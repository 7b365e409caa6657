"""Dense prediction at any input size: UPerNet on a GFNet-H feature pyramid, in a few lines.

An any-size backbone (``input_shape=(None, None, 3)``) takes every image
size its stride (32) divides; its global filters are resized in the graph
to each size. :func:`keras_fourier.segmentation.UPerNet` puts mmsegmentation's
UPerNet head (pyramid pooling and an FPN over the four stages) on it and
returns per-pixel logits at the input's resolution; the loss and metrics
are the package's (:mod:`keras_fourier.metrics`: cross-entropy with ignore
index 255, mIoU and pixel accuracy over the whole evaluation set). The data
are synthetic: squares (class 1) and discs (class 2) on a noisy background
(class 0). The script trains a few steps at two sizes, 64 x 64 and
96 x 128, with the same weights, and prints the loss before and after, the
pixel accuracy and the mIoU at each size (the test suite runs this very
command; ``keras-fourier train --task segmentation`` is the same on real
data)::

    python examples/segmentation_head.py --steps 30

It runs on every Keras backend (``KERAS_BACKEND=jax`` or ``torch``).
"""

from __future__ import annotations

import argparse

import keras
import numpy as np

from keras_fourier import segmentation
from keras_fourier.metrics import MeanIoU, PixelAccuracy, SegmentationCrossEntropy
from keras_fourier.models import build_model

CLASSES = 3
SIZES = ((64, 64), (96, 128))


def synthetic_batch(
    rng: np.random.Generator, batch: int, size: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """(images 0-255 float32 (B, H, W, 3), masks int32 (B, H, W)) with one square and one disc."""
    height, width = size
    images = rng.normal(110.0, 20.0, (batch, height, width, 3))
    masks = np.zeros((batch, height, width), dtype="int32")
    rows, cols = np.mgrid[:height, :width]
    for i in range(batch):
        side = rng.integers(height // 6, height // 3)
        top, left = rng.integers(0, height - side), rng.integers(0, width - side)
        square = (rows >= top) & (rows < top + side) & (cols >= left) & (cols < left + side)
        radius = rng.integers(height // 10, height // 5)
        centre_row, centre_col = (
            rng.integers(radius, height - radius),
            rng.integers(radius, width - radius),
        )
        disc = (rows - centre_row) ** 2 + (cols - centre_col) ** 2 < radius**2
        masks[i][square] = 1
        masks[i][disc] = 2
        images[i][square] += (90.0, -40.0, -40.0)
        images[i][disc] += (-40.0, -40.0, 90.0)
    return np.clip(images, 0.0, 255.0).astype("float32"), masks


def segmentation_model() -> keras.Model:
    """UPerNet on a tiny any-size GFNet-H pyramid: (B, H, W, 3) 0-255 -> (B, H, W, CLASSES)."""
    backbone = build_model(
        "global_filter",
        "mlp",
        depths=[1, 1, 1, 1],
        dims=[16, 32, 64, 128],
        layer_scale=1.0,
        input_shape=(None, None, 3),
        include_top=False,
        name="gfnet_h_tiny",
    )
    return segmentation.UPerNet(
        backbone=backbone, num_classes=CLASSES, channels=32, include_preprocessing=False
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps at each size")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = segmentation_model()
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=SegmentationCrossEntropy(),
        metrics=[MeanIoU(CLASSES), PixelAccuracy(CLASSES)],
    )
    evaluation = {size: synthetic_batch(rng, 8, size) for size in SIZES}
    before = {size: model.evaluate(*evaluation[size], verbose=0)[0] for size in SIZES}
    for _ in range(2):  # alternate sizes so that one set of weights serves both
        for size in SIZES:
            images, masks = synthetic_batch(rng, args.steps * args.batch_size // 2, size)
            model.fit(images, masks, batch_size=args.batch_size, epochs=1, verbose=0)
    for size in SIZES:
        images, masks = evaluation[size]
        after, miou, accuracy = model.evaluate(images, masks, verbose=0)
        height, width = size
        print(
            f"size {height}x{width}: loss {before[size]:.3f} -> {after:.3f}, "
            f"pixel accuracy {accuracy:.3f}, mIoU {miou:.3f}"
        )


if __name__ == "__main__":
    main()
