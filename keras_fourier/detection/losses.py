"""RetinaNet's training loss: anchor assignment, sigmoid focal loss and a box loss, in keras.ops.

The targets are the ground truth itself, (B, M, 8) rows in the layout of
:data:`keras_fourier.detection.targets.TARGET_COLUMNS` (``[x1, y1, x2, y2,
class, iscrowd, area, scale]``, padding rows of class -1); the predictions
are a one-stage detector's raw (B, A, 8 + C) output, which carries its
anchors (:data:`keras_fourier.layers.detection.RAW_COLUMNS`). So the loss
assigns anchors to boxes itself, in the graph, at any input size, on every
backend, as mmdetection's RetinaNet does in its head.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_fourier.layers.detection import decode_boxes, encode_boxes, pairwise_iou, split_raw
from keras_fourier.validation import check_rate

BOX_LOSSES = ("l1", "smooth_l1", "giou")


def assign_anchors(
    anchors,
    targets,
    positive_iou: float = 0.5,
    negative_iou: float = 0.4,
    *,
    min_positive_iou: float = 0.0,
    match_low_quality: bool = True,
    valid=None,
):
    """mmdetection 2.x's ``MaxIoUAssigner``: each anchor's (or RoI's) ground-truth box, or none.

    An anchor whose best IoU with a (non-crowd, non-padding) box is at least
    `positive_iou` is a positive of that box; below `negative_iou` a
    negative; between, ignored. With `match_low_quality`, every box then
    claims the anchors of its highest IoU as positives if that IoU is at
    least `min_positive_iou` and above 0 (``gt_max_assign_all=True``: all the
    anchors tied at that IoU; an anchor claimed by several boxes goes to the
    last, as mmdetection's loop over boxes). Crowd and padding boxes take no
    anchors (mmdetection's ``ignore_iof_thr=-1``: COCO's crowd boxes are left
    out); an image without boxes makes every anchor a negative. Anchors
    outside `valid` are neither positive nor negative and claim nothing
    (mmdetection's anchors across the image border, ``allowed_border=0``).

    The one difference from mmdetection: a box whose best IoU is 0 claims no
    anchors (with ``min_pos_iou=0``, mmdetection's would claim every anchor).

    Args:
        anchors: (B, A, 4) "xyxy" anchors or proposals.
        targets: (B, M, 8) ground-truth rows.
        positive_iou: default 0.5.
        negative_iou: default 0.4.
        min_positive_iou: the least IoU of a low-quality match. Default 0.0.
        match_low_quality: whether boxes claim their best anchors. Default True.
        valid: (B, A) bool, the anchors to assign. Default None: all.

    Returns:
        (positive, negative, matched): (B, A) float masks and the (B, A)
        int32 index of each anchor's box (0 for an anchor of no box).
    """
    boxes = targets[..., :4]
    real = ops.logical_and(targets[..., 4] >= 0, targets[..., 5] < 0.5)
    valid = ops.ones(ops.shape(anchors)[:2], "bool") if valid is None else ops.cast(valid, "bool")
    iou = ops.where(
        ops.logical_and(real[:, None, :], valid[:, :, None]), pairwise_iou(anchors, boxes), 0.0
    )
    best_iou = ops.max(iou, axis=2)
    matched = ops.argmax(iou, axis=2)
    positive = ops.logical_and(best_iou >= positive_iou, valid)
    if match_low_quality:
        box_best = ops.max(ops.where(valid[:, :, None], iou, -1.0), axis=1)[:, None, :]
        quality = ops.logical_and(box_best >= min_positive_iou, box_best > 0)
        claims = ops.logical_and(ops.logical_and(iou == box_best, quality), real[:, None, :])
        claimed = ops.logical_and(ops.any(claims, axis=2), valid)
        number = ops.cast(ops.arange(ops.shape(boxes)[1]), "float32")[None, None, :] + 1.0
        last = ops.cast(ops.max(ops.cast(claims, "float32") * number, axis=2), "int32") - 1
        matched = ops.where(claimed, last, matched)
        positive = ops.logical_or(positive, claimed)
    negative = ops.logical_and(
        ops.logical_and(best_iou < negative_iou, ops.logical_not(positive)), valid
    )
    return (
        ops.cast(positive, "float32"),
        ops.cast(negative, "float32"),
        ops.cast(matched, "int32"),
    )


def sigmoid_focal_loss(labels, logits, alpha: float = 0.25, gamma: float = 2.0):
    """Elementwise sigmoid focal loss of `logits` against 0/1 `labels` (Lin et al., 2017)."""
    probability = ops.sigmoid(logits)
    cross_entropy = ops.maximum(logits, 0) - logits * labels + ops.log1p(ops.exp(-ops.abs(logits)))
    p_t = probability * labels + (1 - probability) * (1 - labels)
    alpha_t = alpha * labels + (1 - alpha) * (1 - labels)
    return alpha_t * ops.power(1 - p_t, gamma) * cross_entropy


def delta_error(deltas, target, box_loss: str = "l1", beta: float = 1.0 / 9.0):
    """Per-box L1 (or smooth L1 of `beta`) error of box deltas, summed over the 4 coordinates.

    Args:
        deltas: (..., 4) predicted deltas.
        target: (..., 4) target deltas.
        box_loss: "l1" (default) or "smooth_l1".
        beta: the smooth L1's transition point. Default 1/9 (mmdetection's RPN and RetinaNet).

    Returns:
        (...,) the error of each box.
    """
    error = ops.abs(deltas - target)
    if box_loss == "smooth_l1":
        error = ops.where(error < beta, 0.5 * error * error / beta, error - 0.5 * beta)
    return ops.sum(error, axis=-1)


def generalized_iou(boxes1, boxes2):
    """Elementwise generalised IoU of "xyxy" boxes of the same shape (Rezatofighi et al., 2019)."""
    width = ops.maximum(
        ops.minimum(boxes1[..., 2], boxes2[..., 2]) - ops.maximum(boxes1[..., 0], boxes2[..., 0]), 0
    )
    height = ops.maximum(
        ops.minimum(boxes1[..., 3], boxes2[..., 3]) - ops.maximum(boxes1[..., 1], boxes2[..., 1]), 0
    )
    intersection = width * height
    area1 = (boxes1[..., 2] - boxes1[..., 0]) * (boxes1[..., 3] - boxes1[..., 1])
    area2 = (boxes2[..., 2] - boxes2[..., 0]) * (boxes2[..., 3] - boxes2[..., 1])
    union = ops.maximum(area1 + area2 - intersection, 1e-6)
    hull = (
        ops.maximum(boxes1[..., 2], boxes2[..., 2]) - ops.minimum(boxes1[..., 0], boxes2[..., 0])
    ) * (ops.maximum(boxes1[..., 3], boxes2[..., 3]) - ops.minimum(boxes1[..., 1], boxes2[..., 1]))
    hull = ops.maximum(hull, 1e-6)
    return intersection / union - (hull - union) / hull


@keras.saving.register_keras_serializable(package="keras_fourier")
class RetinaNetLoss(keras.losses.Loss):
    """RetinaNet's loss: sigmoid focal loss over assigned anchors plus a box loss over positives.

    Anchors are assigned by :func:`assign_anchors`; the classification loss
    is the focal loss (alpha 0.25, gamma 2) summed over positive and negative
    anchors and every class, the box loss summed over positives; both are
    divided by the batch's number of positive anchors (at least 1), as
    mmdetection's RetinaNet (``avg_factor=num_total_pos``). The box loss is
    mmdetection's default L1 on the deltas, a smooth L1 (beta 1/9), or
    ``1 - GIoU`` of the decoded boxes.

    Args:
        box_loss: "l1" (default), "smooth_l1" or "giou".
        box_weight: the box loss's weight. Default 1.0.
        alpha: the focal loss's alpha. Default 0.25.
        gamma: the focal loss's gamma. Default 2.0.
        positive_iou: the IoU that makes an anchor positive. Default 0.5.
        negative_iou: the IoU below which it is negative. Default 0.4.
        name: the loss's name. Default "retinanet_loss".
        **kwargs: base `keras.losses.Loss` arguments (reduction "sum").

    Call arguments:
        y_true: (B, M, 8) ground-truth rows (padding rows of class -1).
        y_pred: the detector's raw (B, A, 8 + C) output.

    Returns:
        The per-image share of the batch loss, (B,); their sum is the loss.

    Example:
        >>> loss = RetinaNetLoss()

    Reference:
        Lin et al., "Focal Loss for Dense Object Detection", ICCV 2017.
    """

    def __init__(
        self,
        box_loss: str = "l1",
        box_weight: float = 1.0,
        alpha: float = 0.25,
        gamma: float = 2.0,
        positive_iou: float = 0.5,
        negative_iou: float = 0.4,
        name: str = "retinanet_loss",
        **kwargs,
    ):
        kwargs.setdefault("reduction", "sum")
        super().__init__(name=name, **kwargs)
        if box_loss not in BOX_LOSSES:
            raise ValueError(
                f"`box_loss` must be one of {BOX_LOSSES}. Received: box_loss={box_loss!r}"
            )
        self.box_loss = box_loss
        if not isinstance(box_weight, (int, float)) or box_weight < 0:
            raise ValueError(
                f"`box_weight` must be a number >= 0. Received: box_weight={box_weight!r}"
            )
        self.box_weight = float(box_weight)
        self.alpha = check_rate("alpha", alpha)
        if not isinstance(gamma, (int, float)) or gamma < 0:
            raise ValueError(f"`gamma` must be a number >= 0. Received: gamma={gamma!r}")
        self.gamma = float(gamma)
        check_rate("positive_iou", positive_iou)
        check_rate("negative_iou", negative_iou)
        if negative_iou > positive_iou:
            raise ValueError(
                "`negative_iou` must not exceed `positive_iou`. Received: "
                f"negative_iou={negative_iou!r}, positive_iou={positive_iou!r}"
            )
        self.positive_iou = positive_iou
        self.negative_iou = negative_iou

    def call(self, y_true, y_pred):
        targets = ops.cast(y_true, "float32")
        anchors, deltas, logits = split_raw(ops.cast(y_pred, "float32"))
        positive, negative, matched = assign_anchors(
            anchors, targets, self.positive_iou, self.negative_iou
        )
        num_classes = logits.shape[-1]
        classes = ops.take_along_axis(ops.cast(targets[..., 4], "int32"), matched, axis=1)
        labels = ops.one_hot(ops.maximum(classes, 0), num_classes) * positive[..., None]
        weights = (positive + negative)[..., None]
        focal = sigmoid_focal_loss(labels, logits, self.alpha, self.gamma) * weights
        boxes = ops.take_along_axis(targets[..., :4], matched[..., None], axis=1)
        if self.box_loss == "giou":
            per_anchor = 1.0 - generalized_iou(decode_boxes(anchors, deltas), boxes)
        else:
            per_anchor = delta_error(deltas, encode_boxes(anchors, boxes), self.box_loss)
        box = ops.sum(per_anchor * positive, axis=1)
        count = ops.maximum(ops.sum(positive), 1.0)
        return (ops.sum(focal, axis=(1, 2)) + self.box_weight * box) / count

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "box_loss": self.box_loss,
            "box_weight": self.box_weight,
            "alpha": self.alpha,
            "gamma": self.gamma,
            "positive_iou": self.positive_iou,
            "negative_iou": self.negative_iou,
        }
