"""Training of two-stage detectors (Mask R-CNN, Cascade Mask R-CNN) as mmdetection 2.x's train_cfg.

Everything runs in the graph with static shapes, in ``keras.ops`` and
``keras.random`` (a ``SeedGenerator``), on every backend:

* **assignment**: :func:`~keras_fourier.detection.losses.assign_anchors`
  (mmdetection's ``MaxIoUAssigner``) over anchors or RoIs, padding and crowd
  boxes left out;
* **sampling**: :func:`random_sample` (``RandomSampler``): a fixed number of
  slots per image, positives first, as a random top-k over the eligible items;
* **RPN**: :func:`rpn_losses`: anchors across the image border left out
  (``allowed_border=0``, the cascade's) or not (``-1``, Mask R-CNN's), MaxIoU
  0.7 / 0.3 (low-quality matches of at least 0.3), 256 anchors, half
  positive; sigmoid cross-entropy and a smooth L1 (beta 1/9) or L1 box loss,
  both divided by the batch's sampled anchors (the numbers are HorNet's
  configs, read from the ``RPNProposals`` layer);
* **R-CNN stages**: :func:`sample_rois` (MaxIoU at the stage's IoU, the
  ground-truth boxes added as proposals, 512 RoIs, a quarter positive: the
  ``CascadeRoIHead``'s arguments),
  :func:`rcnn_losses` (softmax cross-entropy with the background as the LAST
  class, mmdetection 2.x; a GIoU loss on decoded boxes, ``reg_decoded_bbox``,
  or an L1 loss on the deltas over the stage's stds, both divided by the
  batch's sampled RoIs), :func:`refine_rois` (the next stage's RoIs:
  the sampled RoIs moved by their class's deltas, gradients stopped, the added
  ground-truth boxes dropped), :func:`mask_targets` and :func:`mask_loss`
  (binary cross-entropy on the matched class's channel of the positive RoIs,
  the target the matched instance's box-local mask resampled into the RoI's
  frame and binarised at 0.5).

:func:`two_stage_losses` puts them together for a
:class:`~keras_fourier.detection.TwoStageDetector`'s trunk outputs and
returns every part (``rpn_cls``, ``rpn_box``, ``s0_cls``, ``s0_box``,
``s0_mask``, ...) already weighted by its stage; their sum is the loss.

The targets are ``y = {"boxes": (B, G, 8) rows of
detection.targets.TARGET_COLUMNS (padding rows of class -1), "masks": (B, G,
56, 56) box-local instance masks}``; without "masks", no mask loss.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_fourier.detection.losses import assign_anchors, delta_error, generalized_iou
from keras_fourier.layers.detection import decode_boxes, encode_boxes, image_size, split_raw
from keras_fourier.layers.roi_heads import class_deltas, decode_rois

# The smooth L1's beta of the RPN (the HorNet cascade's ``SmoothL1Loss(beta=1/9)``).
RPN_BETA = 1.0 / 9.0
# The mask head's output size, its targets' (mmdetection's ``mask_size=28``).
MASK_SIZE = 28
# mmdetection's binarisation of resampled mask targets.
MASK_THRESHOLD = 0.5


def random_sample(positive, negative, num: int, positive_fraction: float, seed):
    """mmdetection's ``RandomSampler`` (``neg_pos_ub=-1``): `num` slots per image, positives first.

    Up to ``int(num * positive_fraction)`` positives drawn at random (without
    replacement) from the eligible ones, then negatives drawn at random to
    fill the `num` slots; slots left over (too few candidates) are neither.
    Each draw is the top-k of uniform noise over the eligible items.

    Args:
        positive: (B, N) 1/0 (or bool) eligible positives.
        negative: (B, N) 1/0 (or bool) eligible negatives.
        num: the slots per image.
        positive_fraction: the largest share of positives.
        seed: a `keras.random.SeedGenerator` (or int seed).

    Returns:
        (index, is_positive, is_negative): the (B, num) int32 item of each
        slot (0 for an empty slot) and its float32 0/1 flags.
    """
    batch = ops.shape(positive)[0]
    # Padding of `num` ineligible items, so that top-k always has `num` items to take.
    pad = ops.zeros((batch, num), "float32")
    positive = ops.concatenate([ops.cast(positive, "float32"), pad], axis=1)
    negative = ops.concatenate([ops.cast(negative, "float32"), pad], axis=1)
    noise = keras.random.uniform(ops.shape(positive), seed=seed)
    most = max(int(num * positive_fraction), 1)
    pos_key, pos_index = ops.top_k(ops.where(positive > 0, noise, -1.0), most)
    neg_key, neg_index = ops.top_k(ops.where(negative > 0, noise, -1.0), num)
    count = ops.sum(ops.cast(pos_key >= 0, "int32"), axis=1, keepdims=True)
    slot = ops.broadcast_to(ops.arange(num, dtype="int32")[None, :], (batch, num))
    from_pos = ops.take_along_axis(pos_index, ops.minimum(slot, most - 1), axis=1)
    rest = ops.clip(slot - count, 0, num - 1)
    from_neg = ops.take_along_axis(neg_index, rest, axis=1)
    is_positive = slot < count
    is_negative = ops.logical_and(
        ops.logical_not(is_positive), ops.take_along_axis(neg_key, rest, axis=1) >= 0
    )
    index = ops.where(is_positive, from_pos, ops.where(is_negative, from_neg, 0))
    return (
        ops.cast(index, "int32"),
        ops.cast(is_positive, "float32"),
        ops.cast(is_negative, "float32"),
    )


def _gather(values, index):
    """``values[b, index[b, k]]`` of (B, N, ...) values and (B, K) indices."""
    for _ in range(len(values.shape) - 2):
        index = ops.expand_dims(index, -1)
    return ops.take_along_axis(values, index, axis=1)


def _mean(total, count):
    return total / ops.maximum(count, 1.0)


def rpn_losses(raw, targets, seed, rpn, images=None):
    """The RPN's classification and box losses on sampled anchors (mmdetection's ``RPNHead.loss``).

    Anchors crossing the image border by more than ``rpn.allowed_border``
    pixels take no part (-1: all do); the others are assigned by MaxIoU
    (``rpn.positive_iou``, ``negative_iou``, low-quality matches from
    ``min_positive_iou``) and ``rpn.num_samples`` of them sampled per image, at
    most ``positive_fraction`` positive.

    Args:
        raw: the (B, A, 9) raw RPN output (anchors, deltas, objectness).
        targets: (B, G, 8) ground-truth rows.
        seed: a `keras.random.SeedGenerator` for the sampling.
        rpn: the ``RPNProposals`` layer holding the RPN's training
            configuration.
        images: the (B, H, W, 3) input, whose size bounds the anchors.
            Default None: the size the anchors cover.

    Returns:
        (cls, box): sigmoid cross-entropy over the sampled anchors and the
        box loss (``rpn.box_loss``: smooth L1 of beta 1/9, or L1) on the
        positive ones' deltas, each divided by the batch's sampled anchors.
    """
    raw = ops.cast(raw, "float32")
    targets = ops.cast(targets, "float32")
    anchors, deltas, logits = split_raw(raw)
    valid = None
    if rpn.allowed_border >= 0:
        border = float(rpn.allowed_border)
        width, height = image_size(anchors, images, 2)
        valid = ops.logical_and(
            ops.logical_and(anchors[..., 0] >= -border, anchors[..., 1] >= -border),
            ops.logical_and(anchors[..., 2] < width + border, anchors[..., 3] < height + border),
        )
    positive, negative, matched = assign_anchors(
        anchors,
        targets,
        rpn.positive_iou,
        rpn.negative_iou,
        min_positive_iou=rpn.min_positive_iou,
        valid=valid,
    )
    index, is_positive, is_negative = random_sample(
        positive, negative, rpn.num_samples, rpn.positive_fraction, seed
    )
    count = ops.sum(is_positive + is_negative)
    logit = _gather(logits[..., 0], index)
    cls = ops.binary_crossentropy(is_positive, logit, from_logits=True)
    cls = _mean(ops.sum(cls * (is_positive + is_negative)), count)
    boxes = _gather(targets[..., :4], _gather(matched, index))
    target = encode_boxes(_gather(anchors, index), boxes)
    error = delta_error(_gather(deltas, index), target, rpn.box_loss, RPN_BETA)
    return cls, _mean(ops.sum(error * is_positive), count)


def sample_rois(
    rois,
    valid,
    targets,
    seed,
    *,
    positive_iou: float,
    match_low_quality: bool = False,
    num_samples: int = 512,
    positive_fraction: float = 0.25,
):
    """One R-CNN stage's assignment and sampling, the ground-truth boxes added as proposals.

    The RoIs are assigned by MaxIoU (positive at or above `positive_iou`,
    negative below it; low-quality matches of at least `positive_iou` with
    `match_low_quality`); then the (non-crowd) ground-truth boxes join them
    as positives of themselves (``add_gt_as_proposals``), and `num_samples`
    RoIs are sampled, at most `positive_fraction` positive (positives first).

    Args:
        rois: (B, R, 4) "xyxy" RoIs.
        valid: (B, R) bool, the RoIs that take part.
        targets: (B, G, 8) ground-truth rows.
        seed: a `keras.random.SeedGenerator`.
        positive_iou: the stage's IoU threshold.
        match_low_quality: whether boxes claim their best RoIs. Default False.
        num_samples: RoIs sampled per image. Default 512.
        positive_fraction: their largest positive share. Default 0.25.

    Returns:
        A dict of (B, K) tensors, K = `num_samples`: "rois" (B, K, 4), "matched" (int32 ground-truth
        row), "positive", "negative" (float32 0/1) and "is_gt" (float32 1 for
        an added ground-truth box).
    """
    targets = ops.cast(targets, "float32")
    real = ops.logical_and(targets[..., 4] >= 0, targets[..., 5] < 0.5)
    positive, negative, matched = assign_anchors(
        rois,
        targets,
        positive_iou,
        positive_iou,
        min_positive_iou=positive_iou,
        match_low_quality=match_low_quality,
        valid=valid,
    )
    gts = ops.cast(real, "float32")
    own = ops.broadcast_to(
        ops.arange(ops.shape(targets)[1], dtype="int32")[None, :], ops.shape(gts)
    )
    candidates = ops.concatenate([targets[..., :4], ops.cast(rois, "float32")], axis=1)
    positive = ops.concatenate([gts, positive], axis=1)
    negative = ops.concatenate([ops.zeros_like(gts), negative], axis=1)
    matched = ops.concatenate([own, matched], axis=1)
    is_gt = ops.concatenate([gts, ops.zeros_like(valid, "float32")], axis=1)
    index, is_positive, is_negative = random_sample(
        positive, negative, num_samples, positive_fraction, seed
    )
    return {
        "rois": ops.stop_gradient(_gather(candidates, index)),
        "matched": _gather(matched, index),
        "positive": is_positive,
        "negative": is_negative,
        "is_gt": _gather(is_gt, index) * is_positive,
    }


def _labels(sample, targets, num_classes: int):
    """(B, K) int32 class of each sampled RoI: its box's for positives, else `num_classes`."""
    classes = _gather(ops.cast(targets[..., 4], "int32"), sample["matched"])
    return ops.where(sample["positive"] > 0, classes, num_classes)


def rcnn_losses(
    logits,
    deltas,
    sample,
    targets,
    stds,
    *,
    box_loss: str = "giou",
    box_weight: float = 10.0,
):
    """One R-CNN stage's classification and box losses (mmdetection 2.x's ``BBoxHead.loss``).

    Args:
        logits: (B, K, C + 1) class logits of the sampled RoIs, the
            background last.
        deltas: (B, K, C, 4) class-specific box deltas, in units of `stds`.
        sample: :func:`sample_rois`'s dict.
        targets: (B, G, 8) ground-truth rows.
        stds: the stage's 4 delta stds.
        box_loss: "giou" (default: 1 - GIoU of the decoded boxes, the HorNet
            cascade's ``reg_decoded_bbox``) or "l1" (on the deltas in units
            of `stds`: Mask R-CNN's).
        box_weight: the box loss's weight. Default 10.0.

    Returns:
        (cls, box): softmax cross-entropy over the sampled RoIs and the
        weighted box loss over the positive ones, each divided by the
        batch's sampled RoIs.
    """
    logits = ops.cast(logits, "float32")
    deltas = ops.cast(deltas, "float32")
    targets = ops.cast(targets, "float32")
    positive = sample["positive"]
    weight = positive + sample["negative"]
    count = ops.sum(weight)
    labels = _labels(sample, targets, logits.shape[-1] - 1)
    cls = ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    cls = _mean(ops.sum(cls * weight), count)
    stds = ops.convert_to_tensor(stds, "float32")
    predicted = class_deltas(deltas, ops.where(positive > 0, labels, 0)) * stds
    boxes = _gather(targets[..., :4], sample["matched"])
    if box_loss == "giou":
        error = 1.0 - generalized_iou(decode_boxes(sample["rois"], predicted), boxes)
    else:
        error = delta_error(predicted / stds, encode_boxes(sample["rois"], boxes) / stds)
    box = box_weight * _mean(ops.sum(error * positive), count)
    return cls, box


def refine_rois(logits, deltas, sample, targets, stds, images):
    """The next cascade stage's RoIs: mmdetection's ``refine_bboxes``, gradients stopped.

    Each sampled RoI moves by the deltas of its class: its box's class for
    positives, the best non-background class for the others; the result is
    clipped to the image. The ground-truth boxes the stage added are dropped.

    Args:
        logits: (B, K, C + 1) the stage's class logits, background last.
        deltas: (B, K, C, 4) its class-specific deltas.
        sample: :func:`sample_rois`'s dict.
        targets: (B, G, 8) ground-truth rows.
        stds: the stage's 4 delta stds.
        images: the (B, H, W, 3) input, whose size clips the boxes.

    Returns:
        (rois, valid): (B, K, 4) refined RoIs and (B, K) bool, the sampled
        ones that are not ground-truth boxes.
    """
    logits = ops.stop_gradient(ops.cast(logits, "float32"))
    deltas = ops.stop_gradient(ops.cast(deltas, "float32"))
    labels = _labels(sample, ops.cast(targets, "float32"), logits.shape[-1] - 1)
    best = ops.cast(ops.argmax(logits[..., :-1], axis=-1), "int32")
    labels = ops.where(sample["positive"] > 0, labels, best)
    rois = decode_rois(sample["rois"], class_deltas(deltas, labels), stds, images)
    taken = ops.logical_and(sample["positive"] + sample["negative"] > 0, sample["is_gt"] < 0.5)
    return ops.stop_gradient(rois), taken


def mask_targets(masks, boxes, rois, images, size: int = MASK_SIZE):
    """mmdetection's binarised ``mask_target``: instance masks resampled into RoIs' frames.

    Each RoI (clipped to the image) is cut into ``size x size`` cells; each
    cell's target is the instance's box-local mask sampled (bilinear) at the
    cell's centre, 0 outside the instance's box, then thresholded at 0.5.

    Args:
        masks: (B, K, M, M) each RoI's instance mask in ITS BOX's frame
            (``y["masks"]`` gathered by the RoIs' matched rows).
        boxes: (B, K, 4) "xyxy" boxes of those instances.
        rois: (B, K, 4) "xyxy" RoIs.
        images: the (B, H, W, 3) input, whose size clips the RoIs.
        size: cells per side. Default 28.

    Returns:
        (B, K, size, size) float32 0/1 targets.
    """
    masks = ops.cast(masks, "float32")
    crop = masks.shape[-1]
    batch, count = ops.shape(masks)[0], ops.shape(masks)[1]
    width, height = image_size(None, images, 2)
    limit = ops.stack([width, height, width, height])
    rois = ops.minimum(ops.maximum(ops.cast(rois, "float32"), 0.0), limit)
    boxes = ops.cast(boxes, "float32")
    # A zero border (the instance is 0 outside its box): pixel i of the mask is i + 1 here.
    padded = ops.pad(masks, ((0, 0), (0, 0), (1, 1), (1, 1)))
    side = crop + 2
    flat = ops.reshape(padded, (batch, count, side * side))
    cells = (ops.cast(ops.arange(size), "float32") + 0.5) / size

    def axis(low, high, box_low, box_high):
        coord = low[..., None] + cells * (high - low)[..., None]
        extent = ops.maximum(box_high - box_low, 1e-6)[..., None]
        position = (coord - box_low[..., None]) / extent * crop + 0.5
        position = ops.clip(position, 0.0, side - 1.0)
        floor = ops.minimum(ops.floor(position), side - 2.0)
        return ops.cast(floor, "int32"), position - floor

    y0, fy = axis(rois[..., 1], rois[..., 3], boxes[..., 1], boxes[..., 3])
    x0, fx = axis(rois[..., 0], rois[..., 2], boxes[..., 0], boxes[..., 2])
    value = 0.0
    for dy, wy in ((0, 1.0 - fy), (1, fy)):
        for dx, wx in ((0, 1.0 - fx), (1, fx)):
            index = (y0 + dy)[..., :, None] * side + (x0 + dx)[..., None, :]
            index = ops.reshape(index, (batch, count, size * size))
            sampled = ops.reshape(
                ops.take_along_axis(flat, index, axis=2), (batch, count, size, size)
            )
            value = value + sampled * wy[..., :, None] * wx[..., None, :]
    return ops.cast(value >= MASK_THRESHOLD, "float32")


def mask_loss(mask_logits, labels, targets, positive):
    """Binary cross-entropy of the matched class's mask channel, averaged over positive RoIs' cells.

    Args:
        mask_logits: (B, K, S, S, C) mask logits.
        labels: (B, K) int class of each RoI (any class for the others).
        targets: (B, K, S, S) 0/1 targets.
        positive: (B, K) 1 for the positive RoIs, else 0.

    Returns:
        The mean over the positive RoIs' cells (0 without positives),
        mmdetection's ``mask_cross_entropy``.
    """
    mask_logits = ops.cast(mask_logits, "float32")
    channel = ops.cast(labels, "int32")[:, :, None, None, None]
    logit = ops.take_along_axis(mask_logits, channel, axis=4)[..., 0]
    loss = ops.binary_crossentropy(targets, logit, from_logits=True)
    cells = targets.shape[-1] * targets.shape[-2]
    return _mean(ops.sum(ops.sum(loss, axis=(2, 3)) * positive), ops.sum(positive) * cells)


def loss_part_names(num_stages: int, with_mask: bool) -> list[str]:
    """The names of :func:`two_stage_losses`' parts for a head of `num_stages` stages.

    Args:
        num_stages: the RoI head's stages (1: Mask R-CNN, 3: the cascade).
        with_mask: whether it has mask heads.

    Returns:
        ["rpn_cls", "rpn_box", "s0_cls", "s0_box"(, "s0_mask"), "s1_cls", ...].
    """
    names = ["rpn_cls", "rpn_box"]
    for stage in range(num_stages):
        names += [f"s{stage}_cls", f"s{stage}_box"] + ([f"s{stage}_mask"] if with_mask else [])
    return names


def two_stage_losses(rpn, roi_head, levels, raw, images, y, seed) -> dict:
    """Every part of a two-stage detector's training loss, each weighted by its stage.

    The RPN's losses (:func:`rpn_losses`) and its training proposals (`rpn`
    called with ``training=True`` on the raw output, gradients stopped);
    then, per stage of `roi_head`, the RoIs sampled (:func:`sample_rois`; the
    first stage's from the proposals, the next ones' refined by the previous
    stage, :func:`refine_rois`), the stage's class and box losses
    (:func:`rcnn_losses`) and, when y has "masks" and the head has mask
    heads, the mask loss of the positive RoIs (:func:`mask_targets`,
    :func:`mask_loss`), times the stage's weight. The training configuration
    is read from the two layers' arguments.

    Args:
        rpn: the detector's ``RPNProposals`` layer.
        roi_head: its ``CascadeRoIHead``.
        levels: the (B, H_i, W_i, C) pyramid maps.
        raw: the (B, A, 9) raw RPN output.
        images: the (B, H, W, 3) input.
        y: {"boxes": (B, G, 8) ground-truth rows, optionally "masks": (B,
            G, M, M) box-local instance masks}.
        seed: a `keras.random.SeedGenerator` for the sampling.

    Returns:
        {"rpn_cls", "rpn_box", "s0_cls", "s0_box"[, "s0_mask"], "s1_cls", ...}:
        float32 scalars whose sum is the loss.
    """
    targets = ops.cast(y["boxes"], "float32")
    masks = y.get("masks") if roi_head.with_mask else None
    parts = {}
    parts["rpn_cls"], parts["rpn_box"] = rpn_losses(raw, targets, seed, rpn, images)
    proposals = rpn(ops.stop_gradient(raw), images, training=True)
    rois = ops.stop_gradient(ops.cast(proposals["boxes"], "float32"))
    slots = ops.arange(rois.shape[1], dtype="int32")[None, :]
    valid = slots < ops.cast(proposals["num_proposals"], "int32")[:, None]
    most = int(roi_head.num_samples * roi_head.positive_fraction)
    for stage in range(roi_head.num_stages):
        weight = float(roi_head.stage_loss_weights[stage])
        stds = roi_head.stage_stds[stage]
        sample = sample_rois(
            rois,
            valid,
            targets,
            seed,
            positive_iou=roi_head.stage_iou_thresholds[stage],
            match_low_quality=roi_head.match_low_quality,
            num_samples=roi_head.num_samples,
            positive_fraction=roi_head.positive_fraction,
        )
        outputs = roi_head.stage_outputs(levels, sample["rois"], stage, training=True)
        cls, box = rcnn_losses(
            outputs["logits"],
            outputs["deltas"],
            sample,
            targets,
            stds,
            box_loss=roi_head.box_loss,
            box_weight=roi_head.box_loss_weight,
        )
        parts[f"s{stage}_cls"] = weight * cls
        parts[f"s{stage}_box"] = weight * box
        if masks is not None:
            # Positives come first and take at most `most` slots.
            positive = {key: value[:, :most] for key, value in sample.items()}
            mask_logits = roi_head.mask_logits(levels, positive["rois"], stage, training=True)
            labels = _labels(positive, targets, 0)
            target = mask_targets(
                _gather(masks, positive["matched"]),
                _gather(targets[..., :4], positive["matched"]),
                positive["rois"],
                images,
                size=roi_head.mask_size,
            )
            parts[f"s{stage}_mask"] = weight * mask_loss(
                mask_logits, labels, target, positive["positive"]
            )
        if stage < roi_head.num_stages - 1:
            rois, valid = refine_rois(
                outputs["logits"], outputs["deltas"], sample, targets, stds, images
            )
    return parts
