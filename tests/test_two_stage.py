"""Two-stage detection layers (RoIAlign, RPN head and proposals) against NumPy references."""

import itertools
import math

import keras
import numpy as np
import pytest

from keras_fourier.layers import AnchorBoxes, RoIAlign, RPNHead, RPNProposals
from keras_fourier.layers.detection import greedy_nms
from tests.harness import check_config

pytestmark = pytest.mark.multi_backend


def _bilinear(feature, y, x):
    """mmcv's ``bilinear_interpolate`` of one (H, W, C) map at (y, x)."""
    height, width = feature.shape[:2]
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return np.zeros(feature.shape[-1])
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_low = y_high = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_low = x_high = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    return (
        hy * hx * feature[y_low, x_low]
        + hy * lx * feature[y_low, x_high]
        + ly * hx * feature[y_high, x_low]
        + ly * lx * feature[y_high, x_high]
    )


def _numpy_roi_align(maps, rois, size, min_level=2, cap=None):
    """mmdet's SingleRoIExtractor + mmcv's RoIAlign (aligned, sampling_ratio 0) in loops.

    `cap` bounds the adaptive grid per axis (what RoIAlign's max_sampling_ratio does).
    """
    batch, count = rois.shape[:2]
    out = np.zeros((batch, count, size, size, maps[0].shape[-1]))
    for b, n in itertools.product(range(batch), range(count)):
        x1, y1, x2, y2 = (float(v) for v in rois[b, n])
        scale = math.sqrt(max((x2 - x1) * (y2 - y1), 0.0))
        level = min(max(math.floor(math.log2(scale / 56 + 1e-6)), 0), len(maps) - 1)
        feature = maps[level][b]
        spatial = 1.0 / 2 ** (min_level + level)
        start_x, start_y = x1 * spatial - 0.5, y1 * spatial - 0.5
        roi_w, roi_h = x2 * spatial - 0.5 - start_x, y2 * spatial - 0.5 - start_y
        bin_w, bin_h = roi_w / size, roi_h / size
        grid_h, grid_w = math.ceil(roi_h / size), math.ceil(roi_w / size)
        if cap is not None:
            grid_h, grid_w = min(grid_h, cap), min(grid_w, cap)
        samples = max(grid_h * grid_w, 1)
        for ph, pw in itertools.product(range(size), range(size)):
            total = 0.0
            for iy, ix in itertools.product(range(grid_h), range(grid_w)):
                y = start_y + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                x = start_x + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                total = total + _bilinear(feature, y, x)
            out[b, n, ph, pw] = total / samples
    return out


def _pyramid(rng, batch=2, height=96, width=128, channels=3, levels=4):
    return [
        rng.normal(size=(batch, height // 2**i, width // 2**i, channels)).astype("float32")
        for i in range(2, 2 + levels)
    ]


# Small, large (grids of 2 to 4 samples per bin), partly and wholly outside, empty, every level.
ROIS = [
    [3.0, 5.0, 13.5, 12.0],
    [10.0, 8.0, 110.0, 90.0],
    [-20.0, 10.0, 30.0, 50.0],
    [100.0, 70.0, 140.0, 120.0],
    [200.0, 200.0, 240.0, 230.0],
    [40.0, 40.0, 40.0, 60.0],
    [-10.0, -10.0, 130.0, 100.0],
    [-60.0, -60.0, 200.0, 160.0],
    [-200.0, -200.0, 300.0, 300.0],
    [1.0, 2.0, 110.0, 20.0],
]


def test_roi_align_is_mmcvs_adaptive_sampling_over_the_pyramid_levels():
    rng = np.random.default_rng(0)
    maps = _pyramid(rng)
    rois = np.stack([np.array(ROIS), np.array(ROIS[::-1]) * 0.75]).astype("float32")
    scales = np.sqrt(np.maximum(np.prod(rois[..., 2:] - rois[..., :2], -1), 0))
    levels = np.clip(np.floor(np.log2(scales / 56 + 1e-6)), 0, 3)
    assert set(levels.ravel()) == {0, 1, 2, 3}
    out = keras.ops.convert_to_numpy(RoIAlign(7)(maps, rois))
    assert out.shape == (2, len(ROIS), 7, 7, 3)
    np.testing.assert_allclose(out, _numpy_roi_align(maps, rois, 7), rtol=1e-4, atol=1e-4)
    assert np.abs(out[0, 1]).max() > 0.1 and not out[0, 4].any()
    masks = keras.ops.convert_to_numpy(RoIAlign(14, max_sampling_ratio=2)(maps, rois[:, :4]))
    np.testing.assert_allclose(masks, _numpy_roi_align(maps, rois[:, :4], 14), rtol=1e-4, atol=1e-4)


def test_roi_align_caps_larger_grids_at_max_sampling_ratio():
    rng = np.random.default_rng(1)
    maps = _pyramid(rng, batch=1)
    rois = np.array([[[0.0, 0.0, 110.0, 12.0], [4.0, 4.0, 60.0, 90.0]]], "float32")
    capped = keras.ops.convert_to_numpy(RoIAlign(7, max_sampling_ratio=2)(maps, rois))
    exact = _numpy_roi_align(maps, rois, 7, cap=2)
    np.testing.assert_allclose(capped, exact, rtol=1e-4, atol=1e-4)
    full = _numpy_roi_align(maps, rois, 7)
    assert np.abs(capped - full).max() > 1e-3
    wide = keras.ops.convert_to_numpy(RoIAlign(7, max_sampling_ratio=4)(maps, rois))
    np.testing.assert_allclose(wide, full, rtol=1e-4, atol=1e-4)


def test_rpn_anchors_are_mmdetections_for_strides_4_to_64():
    maps = [np.zeros((1, 2, 3, 4), "float32"), np.zeros((1, 1, 2, 4), "float32")]
    anchors = keras.ops.convert_to_numpy(
        AnchorBoxes(min_level=2, anchor_scale=8, scales_per_octave=1)(maps)
    )[0]
    rows = []
    for (height, width), stride in (((2, 3), 4), ((1, 2), 8)):
        # mmdet: base_size = stride, scales = [8], ratios (0.5, 1, 2), centre offset 0.
        h_ratios = np.sqrt([0.5, 1.0, 2.0])
        ws, hs = stride * 8 / h_ratios, stride * 8 * h_ratios
        base = np.stack([-ws / 2, -hs / 2, ws / 2, hs / 2], 1)
        for y, x in itertools.product(range(height), range(width)):
            rows.extend(base + [x * stride, y * stride] * 2)
    np.testing.assert_allclose(anchors, np.array(rows), rtol=1e-6, atol=1e-4)


def test_rpn_layers_build_from_their_config():
    maps = [np.ones((2, 8 // 2**i, 8 // 2**i, 6), "float32") for i in range(2)]
    head = RPNHead(channels=8)
    out = head(maps)
    assert tuple(out.shape) == head.compute_output_shape([m.shape for m in maps]) == (2, 240, 5)
    assert {w.path.split("/")[-2] for w in head.weights} == {"rpn_conv", "rpn_cls", "rpn_reg"}
    roi = RoIAlign(14, min_level=3, finest_scale=32.0, max_sampling_ratio=2)
    shape = roi.compute_output_shape([m.shape for m in maps], (2, 5, 4))
    assert shape == (2, 5, 14, 14, 6)
    for layer in (head, RPNProposals(pre_nms=5, num_levels=2), roi):
        check_config(layer)
    with pytest.raises(ValueError, match="max_sampling_ratio"):
        RoIAlign(max_sampling_ratio=0)


def test_greedy_nms_reaches_valid_candidates_after_invalid_ones():
    overlaps = np.array([[[1, 0, 1], [0, 1, 0], [1, 0, 1]]], "float32")
    valid = np.array([[1.0, 0.0, 1.0]], "float32")
    keep = keras.ops.convert_to_numpy(greedy_nms(overlaps, valid))
    np.testing.assert_array_equal(keep, [[1, 0, 0]])
    keep = keras.ops.convert_to_numpy(greedy_nms(overlaps * np.eye(3, dtype="float32"), valid))
    np.testing.assert_array_equal(keep, [[1, 0, 1]])


def _numpy_iou(a, b):
    width = max(min(a[2], b[2]) - max(a[0], b[0]), 0)
    height = max(min(a[3], b[3]) - max(a[1], b[1]), 0)
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _numpy_proposals(anchors, deltas, logits, levels, size, pre_nms, threshold, limit):
    """mmdet 2.x RPN test: top pre_nms per level, decode, clip, area filter, NMS per level."""
    scores = 1 / (1 + np.exp(-logits.astype("float64")))
    picked = []
    for level in np.unique(levels):
        index = np.flatnonzero(levels == level)
        picked.extend(index[np.argsort(-scores[index], kind="stable")[:pre_nms]])
    picked = np.array(picked)
    a, d = anchors[picked].astype("float64"), deltas[picked].astype("float64")
    d[:, 2:] = np.clip(d[:, 2:], -abs(math.log(16 / 1000)), abs(math.log(16 / 1000)))
    cx = (a[:, 0] + a[:, 2]) / 2 + d[:, 0] * (a[:, 2] - a[:, 0])
    cy = (a[:, 1] + a[:, 3]) / 2 + d[:, 1] * (a[:, 3] - a[:, 1])
    w, h = (a[:, 2] - a[:, 0]) * np.exp(d[:, 2]), (a[:, 3] - a[:, 1]) * np.exp(d[:, 3])
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    boxes = np.clip(boxes, 0, [size[1], size[0]] * 2)
    area = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    candidates = [i for i in np.argsort(-scores[picked], kind="stable") if area[i]]
    kept = []
    for i in candidates:
        if all(
            levels[picked[j]] != levels[picked[i]] or _numpy_iou(boxes[j], boxes[i]) <= threshold
            for j in kept
        ):
            kept.append(i)
    kept = kept[:limit]
    return boxes[kept], scores[picked][kept]


def test_rpn_proposals_are_mmdetections_top_k_per_level_then_nms_per_level():
    rng = np.random.default_rng(2)
    maps = [np.zeros((2, 8, 12, 4), "float32"), np.zeros((2, 4, 6, 4), "float32")]
    anchors = keras.ops.convert_to_numpy(
        AnchorBoxes(min_level=2, anchor_scale=8, scales_per_octave=1)(maps)
    )
    count = anchors.shape[1]
    deltas = rng.normal(0, 0.3, (2, count, 4)).astype("float32")
    deltas[0, :3, 2:] = -12.0  # decoded to width and height 0: dropped
    logits = rng.normal(0, 2, (2, count)).astype("float32")
    logits[0, :3] = 9.0
    raw = np.concatenate([anchors, deltas, logits[..., None]], -1)
    images = np.zeros((2, 32, 48, 3), "float32")
    layer = RPNProposals(pre_nms=40, iou_threshold=0.7, max_proposals=50, num_levels=2)
    out = {k: keras.ops.convert_to_numpy(v) for k, v in layer(raw, images).items()}
    levels = np.repeat([0, 1], [8 * 12 * 3, 4 * 6 * 3])
    for b in range(2):
        boxes, scores = _numpy_proposals(
            anchors[b], deltas[b], logits[b], levels, (32, 48), 40, 0.7, 50
        )
        number = out["num_proposals"][b]
        assert number == len(scores) > 20
        np.testing.assert_allclose(out["scores"][b, :number], scores, rtol=1e-5)
        np.testing.assert_allclose(out["boxes"][b, :number], boxes, rtol=1e-4, atol=1e-3)
        assert not out["boxes"][b, number:].any() and not out["scores"][b, number:].any()
    assert out["scores"][0, 0] < 0.9999


def test_a_model_of_any_input_size_proposes_and_pools_as_the_eager_layers():
    rng = np.random.default_rng(3)
    image = keras.Input((None, None, 3))
    inputs = [keras.Input((None, None, 8)) for _ in range(2)]
    anchors = AnchorBoxes(min_level=2, anchor_scale=8, scales_per_octave=1)(inputs)
    raw = keras.ops.concatenate([anchors, RPNHead(channels=8)(inputs)], axis=-1)
    proposals = RPNProposals(pre_nms=20, max_proposals=10, num_levels=2)(raw, image)
    pooled = RoIAlign(7, max_sampling_ratio=2)(inputs, proposals["boxes"])
    model = keras.Model([image, *inputs], [proposals["boxes"], pooled])
    for height, width in ((64, 48), (32, 40)):
        maps = [rng.normal(size=(2, height // s, width // s, 8)).astype("float32") for s in (4, 8)]
        boxes, features = model.predict([np.zeros((2, height, width, 3)), *maps], verbose=0)
        assert boxes.shape == (2, 10, 4) and (boxes[..., 2:] > boxes[..., :2]).all()
        assert boxes[..., 2].max() <= width and boxes[..., 3].max() <= height
        expected = keras.ops.convert_to_numpy(RoIAlign(7, max_sampling_ratio=2)(maps, boxes))
        np.testing.assert_allclose(features, expected, rtol=1e-4, atol=1e-5)
