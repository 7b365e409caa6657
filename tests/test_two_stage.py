"""Two-stage detection layers (RoIAlign, RPN head and proposals) against NumPy references."""

import itertools
import math
import re

import keras
import numpy as np
import pytest

from keras_fourier.detection import CascadeMaskRCNN, MaskRCNN, TwoStageDetector, paste_masks
from keras_fourier.detection.coco import MEAN as COCO_MEAN
from keras_fourier.layers import (
    AnchorBoxes,
    BBoxHead,
    CascadeRoIHead,
    MaskHead,
    RoIAlign,
    RPNHead,
    RPNProposals,
)
from keras_fourier.layers.detection import NMS_ROUNDS, greedy_nms
from tests.harness import check_config, check_dtype_policy

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


def _numpy_roi_align(maps, rois, size, min_level=2, terms=None):
    """mmdet's SingleRoIExtractor + mmcv's RoIAlign (aligned, sampling_ratio 0) in loops.

    `terms` bounds 4 * g_h * g_w, as RoIAlign's training loop does: the shorter axis's grid at
    isqrt(terms // 4), then the longer one's at what is left.
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
        if terms is not None:
            short = min(grid_h, grid_w, math.isqrt(terms // 4))
            long = min(max(grid_h, grid_w), terms // 4 // max(short, 1))
            grid_h, grid_w = (long, short) if grid_h > grid_w else (short, long)
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
    masks = keras.ops.convert_to_numpy(RoIAlign(14)(maps, rois[:, :4]))
    np.testing.assert_allclose(masks, _numpy_roi_align(maps, rois[:, :4], 14), rtol=1e-4, atol=1e-4)


# Long and thin RoIs whose mmcv grids reach 29 samples on an axis (P2, P3), one along the border.
THIN_ROIS = [
    [0.0, 0.0, 127.0, 3.0],
    [2.0, 1.0, 5.0, 95.0],
    [-30.0, 10.0, 500.0, 12.5],
    [0.0, 0.0, 128.0, 96.0],
    [3.3, 4.4, 3.3, 50.0],
    [1.0, 60.0, 126.0, 95.5],
]


def test_roi_align_is_exact_for_any_grid_and_caps_it_in_training():
    rng = np.random.default_rng(1)
    maps = _pyramid(rng, batch=1)
    rois = np.array([THIN_ROIS], "float32")
    full = _numpy_roi_align(maps, rois, 7)
    out = keras.ops.convert_to_numpy(RoIAlign(7)(maps, rois))
    np.testing.assert_allclose(out, full, rtol=1e-4, atol=1e-5)
    for terms in (4, 16):
        layer = RoIAlign(7, train_sampling_terms=terms)
        capped = keras.ops.convert_to_numpy(layer(maps, rois, training=True))
        expected = _numpy_roi_align(maps, rois, 7, terms=terms)
        np.testing.assert_allclose(capped, expected, rtol=1e-4, atol=1e-5)
        assert np.abs(capped - full).max() > 0.1
    small = np.array([ROIS[:3]], "float32")
    trained = RoIAlign(7, train_sampling_terms=64)(maps, small, training=True)
    expected = _numpy_roi_align(maps, small, 7)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(trained), expected, atol=1e-5)


def _gradient(function, x):
    """d sum(function(x)) / dx as NumPy, on the backend (JAX's under jit)."""
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.reduce_sum(function(x))
        return tape.gradient(total, x).numpy()
    if backend == "jax":
        import jax

        return np.asarray(jax.jit(jax.grad(lambda a: function(a).sum()))(x))
    import torch

    x = x.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(function(x).sum(), [x])
    return grad.cpu().numpy()


def test_roi_align_passes_gradients_to_the_maps_in_its_training_loop():
    maps = [keras.ops.convert_to_tensor(m) for m in _pyramid(np.random.default_rng(2), batch=1)]
    rois = keras.ops.convert_to_tensor([THIN_ROIS], "float32")
    layer = RoIAlign(7, train_sampling_terms=16)
    gradient = _gradient(lambda first: layer([first, *maps[1:]], rois, training=True), maps[0])
    # d(sum of the pooled values)/d(a P2 pixel): the pooled bins' weights on it, summed.
    eye = np.eye(maps[0].shape[1] * maps[0].shape[2], dtype="float32")
    pixel = 3 * maps[0].shape[2] + 5
    probe = [eye[pixel].reshape(1, *maps[0].shape[1:3], 1).repeat(3, -1)]
    probe += [np.zeros_like(keras.ops.convert_to_numpy(m)) for m in maps[1:]]
    expected = _numpy_roi_align(probe, keras.ops.convert_to_numpy(rois), 7, terms=16).sum()
    np.testing.assert_allclose(gradient[0, 3, 5], expected / 3 * np.ones(3), rtol=1e-4, atol=1e-6)
    assert np.abs(gradient).sum() > 1.0


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
    roi = RoIAlign(14, min_level=3, finest_scale=32.0, train_sampling_terms=16)
    shape = roi.compute_output_shape([m.shape for m in maps], (2, 5, 4))
    assert shape == (2, 5, 14, 14, 6)
    for layer in (head, RPNProposals(pre_nms=5, num_levels=2), roi):
        check_config(layer)
    with pytest.raises(ValueError, match="train_sampling_terms=3"):
        RoIAlign(train_sampling_terms=3)


def test_greedy_nms_reaches_valid_candidates_after_invalid_ones():
    overlaps = np.array([[[1, 0, 1], [0, 1, 0], [1, 0, 1]]], "float32")
    valid = np.array([[1.0, 0.0, 1.0]], "float32")
    keep = keras.ops.convert_to_numpy(greedy_nms(overlaps, valid))
    np.testing.assert_array_equal(keep, [[1, 0, 0]])
    keep = keras.ops.convert_to_numpy(greedy_nms(overlaps * np.eye(3, dtype="float32"), valid))
    np.testing.assert_array_equal(keep, [[1, 0, 1]])


@pytest.mark.parametrize("length", [5, NMS_ROUNDS + 9])
def test_greedy_nms_follows_a_chain_of_suppression_to_its_end(length):
    # candidate i overlaps i + 1 only: the greedy rule keeps every other one; a chain longer
    # than NMS_ROUNDS finishes candidate by candidate
    chain = np.eye(length, k=1) + np.eye(length, k=-1)
    overlaps = np.stack([chain, chain, np.zeros_like(chain)]).astype("float32")
    valid = np.ones((3, length), "float32")
    valid[1, 2] = 0.0  # the chain restarts after an invalid candidate
    keep = keras.ops.convert_to_numpy(greedy_nms(overlaps, valid))
    alternate = np.arange(length) % 2 == 0
    np.testing.assert_array_equal(keep[0], alternate)
    np.testing.assert_array_equal(keep[1], np.r_[1, 0, 0, ~alternate[3:]])
    np.testing.assert_array_equal(keep[2], np.ones(length))


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
    shapes = layer.compute_output_shape(raw.shape, images.shape)
    assert {key: tuple(shape) for key, shape in shapes.items()} == {
        key: value.shape for key, value in out.items()
    }
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
    pooled = RoIAlign(7)(inputs, proposals["boxes"])
    model = keras.Model([image, *inputs], [proposals["boxes"], pooled])
    for height, width in ((64, 48), (32, 40)):
        maps = [rng.normal(size=(2, height // s, width // s, 8)).astype("float32") for s in (4, 8)]
        boxes, features = model.predict([np.zeros((2, height, width, 3)), *maps], verbose=0)
        assert boxes.shape == (2, 10, 4) and (boxes[..., 2:] > boxes[..., :2]).all()
        assert boxes[..., 2].max() <= width and boxes[..., 3].max() <= height
        expected = keras.ops.convert_to_numpy(RoIAlign(7)(maps, boxes))
        np.testing.assert_allclose(features, expected, rtol=1e-4, atol=1e-5)


# ---- RoI heads: NumPy references of mmdetection's ConvFCBBoxHead, FCNMaskHead, CascadeRoIHead


def _conv3x3(x, conv):
    """A 3x3 "same" convolution of (N, H, W, C) `x` with a Keras Conv2D's weights."""
    kernel, *bias = (np.asarray(w, "float64") for w in conv.get_weights())
    height, width = x.shape[1:3]
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = sum(
        padded[:, i : i + height, j : j + width] @ kernel[i, j]
        for i, j in itertools.product(range(3), range(3))
    )
    return out + (bias[0] if bias else 0.0)


def _numpy_bbox_head(head, features):
    """ConvFCBBoxHead: convs (+ BN eval) + ReLU, NHWC flatten, fcs + ReLU, fc_cls and fc_reg."""
    batch, count = features.shape[:2]
    x = features.reshape(-1, *features.shape[2:]).astype("float64")
    for i, conv in enumerate(head.shared_convs):
        x = _conv3x3(x, conv)
        if head.shared_bns:
            gamma, beta, mean, var = (np.asarray(w, "float64") for w in head.shared_bns[i].weights)
            x = (x - mean) / np.sqrt(var + 1e-5) * gamma + beta
        x = np.maximum(x, 0)
    x = x.reshape(batch, count, -1)
    for fc in head.shared_fcs:
        x = np.maximum(x @ fc.kernel.numpy() + fc.bias.numpy(), 0)
    logits = x @ head.fc_cls.kernel.numpy() + head.fc_cls.bias.numpy()
    deltas = x @ head.fc_reg.kernel.numpy() + head.fc_reg.bias.numpy()
    return logits, deltas.reshape(batch, count, -1, 4)


def _numpy_mask_head(head, features):
    """FCNMaskHead: 3x3 convs + ReLU, 2x2 stride-2 deconv (PyTorch's) + ReLU, 1x1 logits."""
    batch, count, size = features.shape[:3]
    x = features.reshape(-1, size, size, features.shape[-1]).astype("float64")
    for conv in head.convs:
        x = np.maximum(_conv3x3(x, conv), 0)
    kernel, bias = (np.asarray(w, "float64") for w in head.upsample.get_weights())
    # out[2i + a, 2j + b] = x[i, j] @ kernel[a, b].T (kernel: (kh, kw, out, in), no flip).
    x = np.einsum("nijc,aboc->niajbo", x, kernel).reshape(len(x), 2 * size, 2 * size, -1) + bias
    kernel, bias = (np.asarray(w, "float64") for w in head.conv_logits.get_weights())
    x = np.maximum(x, 0) @ kernel[0, 0] + bias
    return x.reshape(batch, count, 2 * size, 2 * size, -1)


def _randomise(layer, rng, scale=0.3):
    """Every weight of `layer` drawn anew (BN variances positive), for outputs far from ties."""
    for weight in layer.weights:
        values = rng.normal(0, scale, weight.shape)
        if weight.path.endswith("variance"):
            values = rng.uniform(0.5, 2.0, weight.shape)
        weight.assign(values.astype("float32"))


def _numpy_decode(rois, deltas, stds, width, height):
    """mmdet's delta2bbox (means 0, width/height clamp, clipped to the image)."""
    deltas = deltas * np.asarray(stds)
    dwh = np.clip(deltas[..., 2:], -abs(math.log(16 / 1000)), abs(math.log(16 / 1000)))
    centre = (rois[..., :2] + rois[..., 2:]) / 2 + deltas[..., :2] * (rois[..., 2:] - rois[..., :2])
    size = (rois[..., 2:] - rois[..., :2]) * np.exp(dwh)
    boxes = np.concatenate([centre - size / 2, centre + size / 2], -1)
    return np.clip(boxes, 0, [width, height, width, height])


def _numpy_cascade(head, levels, proposals, counts, width, height):
    """mmdet 2.x CascadeRoIHead.simple_test per image (rescale=False), masks before pasting."""
    stds = head.stage_stds
    results = []
    for b, count in enumerate(counts):
        maps = [level[b : b + 1] for level in levels[:4]]
        rois = proposals[b : b + 1, :count].astype("float64")
        logits_sum = 0.0
        for s, bbox_head in enumerate(head.bbox_heads):
            features = _numpy_roi_align(
                maps,
                rois,
                7,
            )
            logits, deltas = _numpy_bbox_head(bbox_head, features)
            logits_sum = logits_sum + logits
            if s < len(stds) - 1:
                label = logits[0, :, :-1].argmax(-1)
                picked = deltas[0, np.arange(count), label]
                rois = _numpy_decode(rois[0], picked, stds[s], width, height)[None]
        logits = logits_sum[0] / len(stds)
        scores = np.exp(logits - logits.max(-1, keepdims=True))
        scores = (scores / scores.sum(-1, keepdims=True))[:, :-1]
        boxes = _numpy_decode(rois[0][:, None], deltas[0], stds[-1], width, height)
        # multiclass_nms: score > thr, NMS within each class, the max_per_img best.
        kept = []
        for k in range(scores.shape[1]):
            order = [i for i in np.argsort(-scores[:, k], kind="stable") if scores[i, k] > 0.05]
            chosen = []
            for i in order:
                if all(_numpy_iou(boxes[j, k], boxes[i, k]) <= 0.5 for j in chosen):
                    chosen.append(i)
            kept.extend((scores[i, k], k, boxes[i, k]) for i in chosen)
        kept = sorted(kept, key=lambda row: -row[0])[: head.max_detections]
        det_boxes = np.array([row[2] for row in kept])
        det_classes = np.array([row[1] for row in kept])
        probabilities = 0.0
        for mask_head in head.mask_heads:
            features = _numpy_roi_align(
                maps,
                det_boxes[None],
                14,
            )
            probabilities = probabilities + 1 / (1 + np.exp(-_numpy_mask_head(mask_head, features)))
        masks = (probabilities[0] / len(stds))[np.arange(len(kept)), ..., det_classes]
        results.append((det_boxes, np.array([row[0] for row in kept]), det_classes, masks))
    return results


def _cascade_head(rng, **kwargs):
    head = CascadeRoIHead(
        3,
        bbox_head={"num_shared_convs": 1, "conv_channels": 6, "fc_channels": 12},
        mask_head={"num_convs": 1, "channels": 6},
        max_detections=8,
        **kwargs,
    )
    levels = [
        rng.normal(size=(2, 96 // 2**i, 128 // 2**i, 4)).astype("float32") for i in range(2, 7)
    ]
    head.build([level.shape for level in levels])
    _randomise(head, rng)
    return head, levels


def test_box_and_mask_heads_are_mmdets_convfc_and_fcn_heads():
    rng = np.random.default_rng(4)
    features = rng.normal(size=(2, 3, 7, 7, 5)).astype("float32")
    names = {
        "shared_convs_0_conv",
        "shared_convs_0_bn",
        "shared_convs_1_conv",
        "shared_convs_1_bn",
        "shared_fcs_0",
    }
    for options, layers in (
        ({"num_shared_convs": 2, "conv_channels": 6, "fc_channels": 8}, names),
        (
            {"num_shared_convs": 0, "num_shared_fcs": 2, "fc_channels": 8, "norm": None},
            {"shared_fcs_0", "shared_fcs_1"},
        ),
    ):
        head = BBoxHead(4, **options)
        head.build(features.shape)
        assert {w.path.split("/")[-2] for w in head.weights} == {*layers, "fc_cls", "fc_reg"}
        _randomise(head, rng)
        out = head(features)
        logits, deltas = _numpy_bbox_head(head, features)
        assert tuple(out["deltas"].shape) == (2, 3, 4, 4) and logits.shape == (2, 3, 5)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(out["logits"]), logits, atol=1e-4)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(out["deltas"]), deltas, atol=1e-4)
        check_config(head)
    mask_head = MaskHead(3, num_convs=2, channels=6)
    masks = rng.normal(size=(2, 3, 14, 14, 5)).astype("float32")
    mask_head.build(masks.shape)
    _randomise(mask_head, rng)
    out = keras.ops.convert_to_numpy(mask_head(masks))
    assert out.shape == (2, 3, 28, 28, 3)
    np.testing.assert_allclose(out, _numpy_mask_head(mask_head, masks), atol=1e-4)
    check_config(mask_head)
    check_dtype_policy(lambda dtype: MaskHead(3, num_convs=1, channels=4, dtype=dtype), masks)
    check_dtype_policy(
        lambda dtype: BBoxHead(3, num_shared_convs=1, conv_channels=4, fc_channels=8, dtype=dtype),
        features,
    )


@pytest.mark.slow
def test_cascade_roi_head_is_mmdets_simple_test():
    rng = np.random.default_rng(8)
    head, levels = _cascade_head(rng)
    width, height = 128, 96
    corners = rng.uniform([0, 0, 8, 8], [80, 60, 60, 50], (2, 12, 4))
    proposals = np.concatenate([corners[..., :2], corners[..., :2] + corners[..., 2:]], -1)
    proposals[1, 9:] = 0.0  # past num_proposals: ignored, as RPNProposals' padding rows
    counts = [12, 9]
    out = head(
        levels,
        {"boxes": proposals.astype("float32"), "num_proposals": np.array(counts, "int32")},
        np.zeros((2, height, width, 3), "float32"),
    )
    out = {key: keras.ops.convert_to_numpy(value) for key, value in out.items()}
    assert out["masks"].shape == (2, 8, 28, 28) and out["masks"].dtype == np.float32
    assert head.compute_output_shape([level.shape for level in levels])["masks"] == (2, 8, 28, 28)
    expected = _numpy_cascade(head, levels, proposals, counts, width, height)
    for b, (boxes, scores, classes, masks) in enumerate(expected):
        number = out["num_detections"][b]
        assert number == len(scores) and number > 2
        np.testing.assert_allclose(out["scores"][b, :number], scores, rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(out["classes"][b, :number], classes)
        np.testing.assert_allclose(out["boxes"][b, :number], boxes, atol=1e-3)
        np.testing.assert_allclose(out["masks"][b, :number], masks, atol=1e-4)
        assert (out["classes"][b, number:] == -1).all() and not out["masks"][b, number:].any()
    assert len({c for b in range(2) for c in out["classes"][b, : out["num_detections"][b]]}) > 1
    check_config(head)


def _numpy_paste(mask, box, height, width):
    """mmdet's _do_paste_mask: grid_sample (bilinear, zero padding) at the pixel centres."""
    size = mask.shape[0]
    out = np.zeros((height, width))
    x1, y1, x2, y2 = box
    for y, x in itertools.product(range(height), range(width)):
        v = (y + 0.5 - y1) / (y2 - y1) * size - 0.5
        u = (x + 0.5 - x1) / (x2 - x1) * size - 0.5
        total = 0.0
        for row, col in itertools.product(
            (math.floor(v), math.floor(v) + 1), (math.floor(u), math.floor(u) + 1)
        ):
            if 0 <= row < size and 0 <= col < size:
                total += (1 - abs(v - row)) * (1 - abs(u - col)) * mask[row, col]
        out[y, x] = total
    return out


def test_paste_masks_is_mmdets_grid_sample_paste():
    rng = np.random.default_rng(9)
    masks = rng.uniform(size=(1, 3, 28, 28)).astype("float32")
    boxes = np.array([[[3.2, 5.0, 20.7, 14.5], [-4.0, 10.0, 40.0, 30.0], [5.0, 5.0, 5.0, 9.0]]])
    pasted = keras.ops.convert_to_numpy(paste_masks(masks, boxes, 24, 32, threshold=None))
    for d in range(2):
        np.testing.assert_allclose(
            pasted[0, d], _numpy_paste(masks[0, d], boxes[0, d], 24, 32), atol=1e-5
        )
    assert pasted[0, 0].max() > 0.9 and not pasted[0, 2].any()
    binary = keras.ops.convert_to_numpy(paste_masks(masks, boxes.astype("float32"), 24, 32))
    np.testing.assert_array_equal(binary, pasted >= 0.5)


SIZES = ((64, 64), (64, 96))
TINY = {"channels": 16, "fc_channels": 32, "mask_channels": 16, "max_proposals": 20}


def _check_detections(out, height, width, count=10):
    assert out["boxes"].shape == (2, count, 4) and out["masks"].shape == (2, count, 28, 28)
    assert out["classes"].dtype == np.int32 and out["masks"].dtype == np.float32
    assert (out["num_detections"] > 0).all()
    assert (out["boxes"][..., 2] <= width).all() and (out["boxes"][..., 3] <= height).all()
    assert out["masks"].min() >= 0 and out["masks"].max() <= 1


def test_a_mask_rcnn_of_any_size_round_trips_through_a_keras_file(tmp_path):
    model = MaskRCNN("gfnet_tiny", num_classes=3, max_detections=10, **TINY)
    assert isinstance(model, TwoStageDetector) and model.roi_head.num_stages == 1
    rng = np.random.default_rng(11)
    images = [rng.uniform(0, 255, (2, 64, width, 3)).astype("float32") for width in (64, 96)]
    out = model.predict(images[0], verbose=0)
    _check_detections(out, 64, 64)
    path = tmp_path / "mask_rcnn.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, TwoStageDetector)
    assert loaded.get_layer("roi_head").get_config() == model.roi_head.get_config()
    again = loaded.predict(images[0], verbose=0)
    for key, value in out.items():
        np.testing.assert_allclose(again[key], value, atol=1e-5)
    _check_detections(loaded.predict(images[1], verbose=0), 64, 96)
    model.save_weights(tmp_path / "mask_rcnn.weights.h5")
    restored = MaskRCNN(
        "gfnet_tiny", num_classes=3, weights=tmp_path / "mask_rcnn.weights.h5", **TINY
    )
    for mine, theirs in zip(restored.weights, model.weights, strict=True):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(mine), keras.ops.convert_to_numpy(theirs)
        )


def test_a_mask_rcnn_of_any_size_pads_the_image_to_32_as_mmdetection():
    # mmdetection: normalise, pad bottom/right with zeros to multiples of 32, clip proposals and
    # detections to the unpadded image. Zeros after the normalisation = the mean colour before.
    keras.utils.set_random_seed(0)
    model = MaskRCNN("gfnet_tiny", num_classes=3, max_detections=10, **TINY)
    assert model.get_layer("pad_to_stride").multiple == 32
    images = np.random.default_rng(13).uniform(0, 255, (2, 70, 100, 3)).astype("float32")
    out = model.predict(images, verbose=0)
    _check_detections(out, 70, 100)
    assert (out["boxes"] >= 0).all() and out["boxes"][..., 2].max() > 90
    # the reference: the trunk on the image padded by hand, proposals and RoI head clipped to
    # the unpadded image (its own model: one compiled pass)
    by_hand = np.broadcast_to(np.float32(COCO_MEAN), (2, 96, 128, 3)).copy()
    by_hand[:, :70, :100] = images
    trunk = keras.Model(model.input, [model.get_layer(name).output for name in ("neck", "rpn")])
    padded_input, image_input = keras.Input((96, 128, 3)), keras.Input((70, 100, 3))
    levels, rpn = trunk(padded_input)
    detections = model.roi_head(levels, model.proposals(rpn, image_input), image_input)
    reference = keras.Model(
        [padded_input, image_input],
        {"detections": detections, "padded": [*levels, rpn], "trunk": trunk(image_input)},
    )
    expected = reference.predict([by_hand, images], verbose=0)
    sizes = [(-(-96 // s), 128 // s) for s in (4, 8, 16, 32, 64)]
    assert [level.shape[1:3] for level in expected["trunk"][0]] == sizes
    mine = keras.tree.flatten(expected["trunk"])
    for value, padded in zip(mine, expected["padded"], strict=True):
        np.testing.assert_allclose(value, padded, atol=1e-4)
    for key, value in expected["detections"].items():
        np.testing.assert_allclose(out[key], value, atol=1e-4)


def _to_numpy(tree):
    return keras.tree.map_structure(keras.ops.convert_to_numpy, tree)


@pytest.mark.single_backend
def test_a_mask_rcnn_of_a_size_32_does_not_divide_pads_inside_and_round_trips(tmp_path):
    model = MaskRCNN(
        "gfnet_tiny", num_classes=3, max_detections=10, input_shape=(70, 100, 3), **TINY
    )
    # the backbone built for the padded (96, 128): the position embedding of its 2-pixel patches
    assert model.get_layer("pad_to_stride").output.shape == (None, 96, 128, 3)
    assert model.get_layer("pos_embed").pos_embed.shape[:3] == (1, 48, 64)
    images = np.random.default_rng(14).uniform(0, 255, (2, 70, 100, 3)).astype("float32")
    out = _to_numpy(model(images))
    _check_detections(out, 70, 100)
    path = tmp_path / "fixed.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.input_shape == (None, 70, 100, 3)
    again = _to_numpy(loaded(images))
    for key, value in out.items():
        np.testing.assert_allclose(again[key], value, atol=1e-5)


@pytest.mark.single_backend
def test_a_cascade_of_fixed_size_detects_gives_its_trunk_in_training_and_refuses_bad_input():
    model = CascadeMaskRCNN(
        "gfnet_tiny",
        num_classes=2,
        input_shape=(64, 96, 3),
        proposals={"train_pre_nms": 500},
        roi_head={"train_sampling_terms": 16},
        **TINY,
    )
    head = model.roi_head
    assert head.train_sampling_terms == head.mask_roi_align.train_sampling_terms == 16
    assert model.proposals.train_pre_nms == 500
    assert head.num_stages == 3 and head.box_loss == "giou" and not head.match_low_quality
    assert head.bbox_heads[2].get_config()["num_shared_convs"] == 4 and head.bbox_heads[2].norm
    assert model.proposals.train_max_proposals == 2000 and model.proposals.allowed_border == 0
    mask_rcnn = MaskRCNN("gfnet_tiny", num_classes=2, **TINY).roi_head
    assert mask_rcnn.box_loss == "l1" and mask_rcnn.match_low_quality
    assert mask_rcnn.bbox_heads[0].get_config()["num_shared_fcs"] == 2
    assert not mask_rcnn.bbox_heads[0].norm
    images = np.random.default_rng(12).uniform(0, 255, (2, 64, 96, 3)).astype("float32")
    _check_detections(model.predict(images, verbose=0), 64, 96, count=100)
    trunk = model(images, training=True)
    assert sorted(trunk) == ["levels", "rpn"]
    assert [tuple(level.shape) for level in trunk["levels"]] == [
        (2, -(-64 // s), -(-96 // s), 16) for s in (4, 8, 16, 32, 64)
    ]
    anchors = 3 * sum(-(-64 // s) * -(-96 // s) for s in (4, 8, 16, 32, 64))
    assert tuple(trunk["rpn"].shape) == (2, anchors, 9)
    bad = [
        (lambda: MaskRCNN("gfnet_tiny", num_classes=0), "num_classes=0"),
        (lambda: CascadeMaskRCNN("gfnet_tiny", neck="bifpn"), "neck='bifpn'"),
        (lambda: CascadeMaskRCNN("gfnet_tiny", fc_channels=0), "fc_channels=0"),
        (lambda: CascadeMaskRCNN("gfnet_tiny", weights="missing.h5"), "weights='missing.h5'"),
        (lambda: CascadeMaskRCNN("gfnet_tiny", input_shape=(0, 64, 3)), "input_shape=(0,"),
        (lambda: MaskRCNN("gfnet_tiny", proposals={"num_levels": 3}), "proposals={'num_levels'"),
        (lambda: MaskRCNN("gfnet_tiny", roi_head={"slots": 3}), "'slots'"),
        (lambda: MaskRCNN("gfnet_tiny", roi_head={"num_samples": 0}), "num_samples=0"),
        (lambda: MaskRCNN("gfnet_tiny", roi_head={"stage_stds": ()}), "roi_head={'stage_stds'"),
        (lambda: MaskRCNN("gfnet_tiny", proposals={"name": "p"}), "proposals={'name'"),
        (lambda: CascadeRoIHead(mask_head={"num_classes": 3}), "mask_head={'num_classes'"),
        (lambda: CascadeRoIHead(stage_iou_thresholds=(0.5,)), "stage_iou_thresholds=(0.5,)"),
        (lambda: CascadeRoIHead(stage_stds=((0.1, 0.1),)), "stage_stds="),
        (lambda: CascadeRoIHead(bbox_head={"width": 3}), "bbox_head={'width': 3}"),
        (lambda: CascadeRoIHead(box_loss="iou"), "box_loss='iou'"),
        (lambda: BBoxHead(norm="group_norm"), "norm='group_norm'"),
        (lambda: MaskHead(num_convs=-1), "num_convs=-1"),
        (lambda: RPNProposals(negative_iou=0.8), "negative_iou=0.8"),
        (lambda: paste_masks(np.ones((1, 1, 28, 28)), np.ones((1, 1, 4)), 8, 8, 2.0), "threshold"),
    ]
    for make, received in bad:
        with pytest.raises(ValueError, match=re.escape(received)) as error:
            make()
        assert "\n" not in str(error.value), str(error.value)
