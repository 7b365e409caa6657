"""Two-stage detector training: assignment, sampling, targets and losses against references."""

import math

import keras
import numpy as np
import pytest

from keras_fourier import detection
from keras_fourier.detection import two_stage_losses as tsl
from keras_fourier.detection.losses import assign_anchors
from keras_fourier.layers import RPNProposals
from keras_fourier.layers.detection import encode_boxes

pytestmark = pytest.mark.multi_backend


def _numpy(value):
    return keras.ops.convert_to_numpy(value)


def _run(function):
    """`function()`'s results as NumPy; under JAX compiled whole (its eager ops compile one by one,
    10x slower), as `fit` runs the losses."""
    if keras.config.backend() == "jax":
        import jax

        function = jax.jit(function)
    return keras.tree.map_structure(_numpy, function())


def _numpy_iou(boxes1, boxes2):
    """(N, M) IoU of "xyxy" boxes in NumPy."""
    a, b = boxes1[:, None].astype("float64"), boxes2[None].astype("float64")
    width = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    height = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    area = lambda c: (c[..., 2] - c[..., 0]) * (c[..., 3] - c[..., 1])  # noqa: E731
    return width * height / (area(a) + area(b) - width * height)


def _numpy_assign(boxes, gts, valid, pos, neg, min_pos, low_quality):
    """mmdetection 2.x's ``MaxIoUAssigner.assign_wrt_overlaps`` as a loop: -1 ignored, 0 negative,
    k > 0 the positive of gt k - 1 (on the valid boxes; the others ignored)."""
    result = np.full(len(boxes), -1)
    inside = np.flatnonzero(valid)
    if not len(gts):
        result[inside] = 0
        return result
    overlaps = _numpy_iou(gts, boxes[inside])
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
    images, count, rows = 6, 30, 5
    corners = rng.uniform(0, 40, (images, count, 2))
    boxes = np.concatenate([corners, corners + rng.uniform(2, 30, (images, count, 2))], 2)
    boxes[:, 5] = boxes[:, 4]  # two anchors tied at a box's best IoU: both claimed
    boxes = boxes.astype("float32")
    corners = rng.uniform(0, 40, (images, rows, 2))
    targets = np.zeros((images, rows, 8), "float32")
    targets[..., :4] = np.concatenate([corners, corners + rng.uniform(2, 30, (images, rows, 2))], 2)
    targets[:, 0, :4] = boxes[:, 7] + [0, 0, 6, 6]  # a box whose best IoU is below 0.7
    targets[..., 4] = rng.integers(0, 3, (images, rows))
    targets[::2, 1, 5] = 1  # a crowd box in every other image
    for image in range(images):
        targets[image, rows - image % 3 :, 4] = -1  # padding rows
    real = (targets[..., 4] >= 0) & (targets[..., 5] < 0.5)
    valid = rng.uniform(size=(images, count)) < 0.8
    low = 0
    for pos, neg, min_pos, low_quality in ((0.7, 0.3, 0.3, True), (0.5, 0.5, 0.5, False)):
        positive, negative, matched = _run(
            lambda: assign_anchors(
                boxes,
                targets,
                pos,  # noqa: B023 (run at once)
                neg,  # noqa: B023
                min_positive_iou=min_pos,  # noqa: B023
                match_low_quality=low_quality,  # noqa: B023
                valid=valid,
            )
        )
        for b in range(images):
            expected = _numpy_assign(
                boxes[b], targets[b, real[b], :4], valid[b], pos, neg, min_pos, low_quality
            )
            np.testing.assert_array_equal(positive[b], expected > 0)
            np.testing.assert_array_equal(negative[b], expected == 0)
            np.testing.assert_array_equal(
                matched[b][expected > 0], np.flatnonzero(real[b])[expected[expected > 0] - 1]
            )
            best = _numpy_iou(boxes[b], targets[b, :, :4]).max(1)
            low += int(((expected > 0) & (best < pos)).sum())
    assert low >= 6  # low-quality matches happened: positives below the positive IoU


def test_sampler_fills_fixed_slots_positives_first_at_random():
    positive = np.zeros((2, 50), "float32")
    negative = np.zeros((2, 50), "float32")
    positive[0, :10], negative[0, 10:40] = 1, 1  # 4 of 10 positives, then 12 negatives
    positive[1, [3, 7]], negative[1, 20:25] = 1, 1  # too few: 2 + 5 slots, 9 empty
    index, is_pos, is_neg = _run(lambda: tsl.random_sample(positive, negative, 16, 0.25, 1))
    np.testing.assert_array_equal(is_pos.sum(1), [4, 2])
    np.testing.assert_array_equal(is_neg.sum(1), [12, 5])
    np.testing.assert_array_equal(is_pos[:, :2], 1)  # positives first
    for b in range(2):
        chosen_pos = index[b][is_pos[b] > 0]
        chosen_neg = index[b][is_neg[b] > 0]
        assert positive[b, chosen_pos].all() and negative[b, chosen_neg].all()
        assert len(set(chosen_pos)) == len(chosen_pos) and len(set(chosen_neg)) == len(chosen_neg)
    np.testing.assert_array_equal(sorted(index[1][is_pos[1] > 0]), [3, 7])
    np.testing.assert_array_equal(index[1][7:], 0)
    # Uniform draws without replacement: each of 10 positives taken 4 times in 10, over 400 rows.
    many = np.tile(positive[:1], (400, 1))
    index, is_pos, _ = _run(lambda: tsl.random_sample(many, 0 * many, 16, 0.25, 2))
    counts = np.bincount(index[is_pos > 0], minlength=10)
    assert counts.sum() == 1600 and counts.min() > 110 and counts.max() < 210, counts


def _numpy_mask_targets(masks, boxes, rois, width, height, size):
    """Bilinear samples of box-local masks (0 outside the box) at the RoI cells' centres."""
    crop = masks.shape[-1]
    out = np.zeros((len(rois), size, size))
    for k, (mask, box, roi) in enumerate(zip(masks, boxes, rois, strict=True)):
        x1, x2 = np.clip(roi[[0, 2]], 0, width)
        y1, y2 = np.clip(roi[[1, 3]], 0, height)

        def pixel(v, u, mask=mask):
            inside = 0 <= v < crop and 0 <= u < crop
            return mask[v, u] if inside else 0.0

        for i in range(size):
            for j in range(size):
                x = x1 + (j + 0.5) / size * (x2 - x1)
                y = y1 + (i + 0.5) / size * (y2 - y1)
                px = (x - box[0]) / (box[2] - box[0]) * crop - 0.5
                py = (y - box[1]) / (box[3] - box[1]) * crop - 0.5
                u, v = math.floor(px), math.floor(py)
                fu, fv = px - u, py - v
                out[k, i, j] = (1 - fv) * ((1 - fu) * pixel(v, u) + fu * pixel(v, u + 1)) + fv * (
                    (1 - fu) * pixel(v + 1, u) + fu * pixel(v + 1, u + 1)
                )
    return out


def test_mask_targets_resample_box_local_masks_into_the_rois_frames():
    rng = np.random.default_rng(3)
    masks = (rng.uniform(size=(1, 4, 8, 8)) > 0.5).astype("float32")
    masks = masks.repeat(7, axis=2).repeat(7, axis=3)  # 56 x 56 blocks
    boxes = np.array([[[10, 12, 40, 50], [0, 0, 64, 64], [5, 30, 25, 60], [10, 12, 40, 50]]], "f")
    rois = np.array([[[8, 10, 44, 48], [-5, 3, 70, 60], [0, 20, 30, 64], [10, 12, 40, 50]]], "f")
    images = np.zeros((1, 64, 64, 3), "float32")
    got = _run(lambda: tsl.mask_targets(masks, boxes, rois, images, size=14))
    expected = _numpy_mask_targets(masks[0], boxes[0], rois[0], 64, 64, 14)
    # Binarised at 0.5; a cell between a 0 and a 1 pixel may round either way.
    clear = np.abs(expected - 0.5) > 1e-4
    np.testing.assert_array_equal(got[0][clear], expected[clear] >= 0.5)
    assert clear.mean() > 0.9
    assert 0.2 < got.mean() < 0.8
    # A RoI equal to its box halves the mask: the left half of the box is the left half of 28.
    half = np.zeros((1, 1, 56, 56), "float32")
    half[..., :28] = 1
    target = _run(lambda: tsl.mask_targets(half, boxes[:, :1], boxes[:, :1], images))
    np.testing.assert_array_equal(target[0, 0], np.repeat([[1] * 14 + [0] * 14], 28, 0))


def test_rpn_losses_on_a_hand_made_case():
    gt = [16.0, 16.0, 48.0, 48.0]
    anchors = np.array(
        [gt, [16, 16, 48, 80], [0, 0, 8, 8], [40, 40, 72, 72]], "float32"
    )  # IoU 1 (positive), 0.5 (ignored), 0 (negative), 0.0 crossing the border (negative or out)
    deltas = np.zeros((4, 4), "float32")
    deltas[0] = [0.1, 0, 0, 0]
    logits = np.array([[2.0], [5.0], [-1.0], [3.0]], "float32")
    raw = np.concatenate([anchors, deltas, logits], 1)[None]
    targets = np.full((1, 2, 8), -1.0, "float32")
    targets[0, 0, :6] = [*gt, 1, 0]
    images = np.zeros((1, 64, 64, 3), "float32")
    softplus = lambda v: math.log1p(math.exp(v))  # noqa: E731
    cls, box = _run(lambda: tsl.rpn_losses(raw, targets, 0, RPNProposals(), images))
    np.testing.assert_allclose(float(cls), (softplus(-2) + softplus(-1)) / 2, rtol=1e-5)
    np.testing.assert_allclose(float(box), 0.5 * 0.01 * 9 / 2, rtol=1e-4)  # smooth L1, beta 1/9
    cls, box = _run(
        lambda: tsl.rpn_losses(
            raw, targets, 0, RPNProposals(allowed_border=-1, box_loss="l1"), images
        )
    )
    np.testing.assert_allclose(
        float(cls), (softplus(-2) + softplus(-1) + softplus(3)) / 3, rtol=1e-5
    )
    np.testing.assert_allclose(float(box), 0.1 / 3, rtol=1e-4)


def test_rcnn_losses_refinement_and_mask_loss_on_a_hand_made_case():
    targets = np.full((1, 3, 8), -1.0, "float32")
    targets[0, 0, :6] = [20, 20, 40, 40, 0, 0]
    targets[0, 1, :6] = [0, 0, 10, 20, 1, 0]
    rois = np.array([[[22, 18, 38, 44], [0, 0, 10, 10], [50, 50, 60, 60]]], "float32")
    sample = {
        "rois": rois,
        "positive": np.array([[1, 1, 0]], "float32"),
        "negative": np.array([[0, 0, 1]], "float32"),
        "matched": np.array([[0, 1, 0]], "int32"),
        "is_gt": np.array([[0, 1, 0]], "float32"),
    }
    stds = (0.1, 0.1, 0.2, 0.2)
    logits = np.zeros((1, 3, 3), "float32")
    deltas = np.zeros((1, 3, 2, 4), "float32")
    deltas[0, 0, 0] = _numpy(encode_boxes(rois[0, :1], targets[0, :1, :4]))[0] / stds
    deltas[0, 2, 1] = [1.0, 0, 0, 0]  # the negative's best class (1) moves it right by 1 * 0.1 * 10
    logits[0, 2, 0] = -1.0
    cls, box = _run(lambda: tsl.rcnn_losses(logits, deltas, sample, targets, stds))
    # Background is the last class: the negative's loss is log(e^-1 + 1 + 1) - 0.
    np.testing.assert_allclose(float(cls), (2 * math.log(3) + math.log(math.exp(-1) + 2)) / 3)
    # RoI 0 decodes onto its box (GIoU 1); RoI 1 keeps [0, 0, 10, 10] against [0, 0, 10, 20]: 0.5.
    np.testing.assert_allclose(float(box), 10 * 0.5 / 3, rtol=1e-4)
    _, box = _run(
        lambda: tsl.rcnn_losses(
            logits, deltas, sample, targets, stds, box_loss="l1", box_weight=1.0
        )
    )
    np.testing.assert_allclose(float(box), (0.5 / 0.1 + math.log(2) / 0.2) / 3, rtol=1e-4)
    images = np.zeros((1, 64, 64, 3), "float32")
    refined, valid = _run(lambda: tsl.refine_rois(logits, deltas, sample, targets, stds, images))
    np.testing.assert_allclose(refined[0, 0], targets[0, 0, :4], atol=1e-4)
    np.testing.assert_allclose(refined[0, 2], [51, 50, 61, 60], atol=1e-4)
    np.testing.assert_array_equal(valid[0], [True, False, True])  # the added gt box is dropped
    mask_logits = np.zeros((1, 2, 4, 4, 2), "float32")
    mask_logits[..., 0] = 9.0  # class 0's channel: not the labels' (1)
    mask_logits[0, 1] = -50.0  # a negative RoI: no part in the loss
    labels = np.array([[1, 0]], "int32")
    target = np.ones((1, 2, 4, 4), "float32")
    loss = _run(lambda: tsl.mask_loss(mask_logits, labels, target, sample["positive"][:, 1:]))
    np.testing.assert_allclose(float(loss), math.log(2), rtol=1e-5)


def _tiny_detector(arch):
    """A tiny two-stage detector with a small training configuration (its layers' arguments)."""
    build = detection.CascadeMaskRCNN if arch == "cascade_mask_rcnn" else detection.MaskRCNN
    return build(
        "gfnet_tiny",
        2,
        channels=16,
        fc_channels=32,
        mask_channels=16,
        input_shape=(64, 64, 3),
        proposals={"train_pre_nms": 64, "train_max_proposals": 64, "num_samples": 64},
        roi_head={"num_samples": 32, "train_sampling_terms": 4},
    )


def _batch():
    """Two 64 x 64 images with 2 and 1 objects: (images, {"boxes", "masks"})."""
    images = np.random.default_rng(0).uniform(0, 255, (2, 64, 64, 3)).astype("float32")
    boxes = np.full((2, 3, 8), -1.0, "float32")
    boxes[..., 5:] = 0
    boxes[0, 0, :5] = [4, 4, 30, 30, 0]
    boxes[0, 1, :5] = [30, 20, 60, 50, 1]
    boxes[1, 0, :5] = [10, 8, 40, 50, 1]
    masks = np.zeros((2, 3, 56, 56), "float32")
    masks[:, :2, 8:48, 8:48] = 1
    return images, {"boxes": boxes, "masks": masks}


@pytest.mark.slow
def test_a_tiny_mask_rcnn_fits_one_batch():
    keras.utils.set_random_seed(0)
    model = _tiny_detector("mask_rcnn")
    images, y = _batch()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    history = model.fit(images, y, epochs=8, verbose=0).history
    names = tsl.loss_part_names(1, True)
    assert set(history) == {"loss", *names}
    # At initialisation (the first step's logs) the RPN's logits are near 0: its sigmoid
    # cross-entropy is ln 2.
    np.testing.assert_allclose(history["rpn_cls"][0], math.log(2), rtol=0.02)
    np.testing.assert_allclose(history["loss"][0], sum(history[n][0] for n in names), rtol=1e-5)
    assert history["loss"][-1] < 0.7 * history["loss"][0], history["loss"]
    assert history["s0_cls"][-1] < 0.8 * history["s0_cls"][0], history["s0_cls"]


@pytest.mark.single_backend  # passes under JAX (71 s: its evaluation step compiles) and PyTorch
def test_evaluation_takes_its_loss_from_the_pass_that_gives_its_detections():
    keras.utils.set_random_seed(0)
    model = _tiny_detector("mask_rcnn")
    images, y = _batch()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    seed = keras.ops.convert_to_numpy(model.sampling_seed.state)
    logs = model.evaluate(images, y, batch_size=2, verbose=0, return_dict=True)
    assert set(logs) == {"loss", *tsl.loss_part_names(1, True)}
    # The same loss as from the trunk run again on the images, with the same sampling draws.
    model.sampling_seed.state.assign(seed)
    detections = model(images)
    assert sorted(detections) == ["boxes", "classes", "masks", "num_detections", "scores"]
    expected = model.compute_loss(images, y, detections, training=False)
    expected = float(keras.ops.convert_to_numpy(keras.ops.stop_gradient(expected)))
    np.testing.assert_allclose(logs["loss"], expected, rtol=1e-5)
    assert logs["loss"] > 0


@pytest.mark.single_backend
def test_the_cascades_loss_parts_at_initialisation():
    keras.utils.set_random_seed(0)
    model = _tiny_detector("cascade_mask_rcnn")
    images, y = _batch()
    trunk = model(images, training=True)
    parts = tsl.two_stage_losses(
        model.proposals,
        model.roi_head,
        trunk["levels"],
        trunk["rpn"],
        images,
        y,
        keras.random.SeedGenerator(0),
    )
    parts = {name: float(value) for name, value in parts.items()}
    assert list(parts) == tsl.loss_part_names(3, True)
    np.testing.assert_allclose(parts["rpn_cls"], math.log(2), rtol=0.02)
    # Near-zero logits: each stage's softmax cross-entropy is about ln 3, times 1, 0.5, 0.25.
    for stage, weight in enumerate((1.0, 0.5, 0.25)):
        np.testing.assert_allclose(parts[f"s{stage}_cls"] / weight, math.log(3), rtol=0.1)
    assert all(np.isfinite(value) and value >= 0 for value in parts.values())
    box_only = tsl.two_stage_losses(
        model.proposals,
        model.roi_head,
        trunk["levels"],
        trunk["rpn"],
        images,
        {"boxes": y["boxes"]},
        keras.random.SeedGenerator(0),
    )
    assert list(box_only) == tsl.loss_part_names(3, False)
