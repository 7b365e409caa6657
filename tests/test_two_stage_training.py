"""Two-stage detector training: assignment, sampling, targets and losses against NumPy references."""

import math

import keras
import numpy as np
import pytest

from keras_fourier.detection import two_stage_losses as tsl
from keras_fourier.detection.losses import assign_anchors
from keras_fourier.layers.detection import encode_boxes, pairwise_iou

pytestmark = pytest.mark.multi_backend


def _numpy(value):
    return keras.ops.convert_to_numpy(value)


def _numpy_assign(boxes, gts, valid, pos, neg, min_pos, low_quality):
    """mmdetection 2.x's ``MaxIoUAssigner.assign_wrt_overlaps`` as a loop: -1 ignored, 0 negative,
    k > 0 the positive of gt k - 1 (on the valid boxes; the others ignored)."""
    result = np.full(len(boxes), -1)
    inside = np.flatnonzero(valid)
    if not len(gts):
        result[inside] = 0
        return result
    overlaps = _numpy(pairwise_iou(gts, boxes[inside]))
    best, argbest = overlaps.max(0), overlaps.argmax(0)
    assigned = np.full(len(inside), -1)
    assigned[(best >= 0) & (best < neg)] = 0
    assigned[best >= pos] = argbest[best >= pos] + 1
    if low_quality:
        for i, row in enumerate(overlaps):
            # mmdetection's claim; a box of best IoU 0 claims nothing here (documented).
            if row.max() >= min_pos and row.max() > 0:
                assigned[row == row.max()] = i + 1
    result[inside] = assigned
    return result


def test_assigner_is_mmdetections_max_iou_assigner_with_low_quality_matches():
    rng = np.random.default_rng(0)
    count, rows = 30, 5
    low = 0
    for trial in range(6):
        corners = rng.uniform(0, 40, (count, 2))
        boxes = np.concatenate([corners, corners + rng.uniform(2, 30, (count, 2))], 1)
        boxes[5] = boxes[4]  # two anchors tied at a box's best IoU: both claimed
        boxes = boxes.astype("float32")
        corners = rng.uniform(0, 40, (rows, 2))
        targets = np.zeros((1, rows, 8), "float32")
        targets[0, :, :4] = np.concatenate([corners, corners + rng.uniform(2, 30, (rows, 2))], 1)
        targets[0, 0, :4] = boxes[7] + [0, 0, 6, 6]  # a box whose best IoU is below 0.7
        targets[0, :, 4] = rng.integers(0, 3, rows)
        targets[0, 1, 5] = trial % 2  # a crowd box in every other trial
        targets[0, rows - trial % 3 :, 4] = -1  # padding rows
        real = (targets[0, :, 4] >= 0) & (targets[0, :, 5] < 0.5)
        valid = rng.uniform(size=count) < 0.8
        for pos, neg, min_pos, low_quality in ((0.7, 0.3, 0.3, True), (0.5, 0.5, 0.5, False)):
            positive, negative, matched = (
                _numpy(t)[0]
                for t in assign_anchors(
                    boxes[None],
                    targets,
                    pos,
                    neg,
                    min_positive_iou=min_pos,
                    match_low_quality=low_quality,
                    valid=valid[None],
                )
            )
            expected = _numpy_assign(
                boxes, targets[0, real, :4], valid, pos, neg, min_pos, low_quality
            )
            np.testing.assert_array_equal(positive, expected > 0)
            np.testing.assert_array_equal(negative, expected == 0)
            np.testing.assert_array_equal(
                matched[expected > 0], np.flatnonzero(real)[expected[expected > 0] - 1]
            )
            best = _numpy(pairwise_iou(boxes, targets[0, :, :4])).max(1)
            low += int(((expected > 0) & (best < pos)).sum())
    assert low >= 6  # low-quality matches happened: positives below the positive IoU
