"""The region proposal network of two-stage detectors (Faster and Mask R-CNN): head and proposals.

The RPN's raw output follows the one-stage layout of
:mod:`keras_fourier.layers.detection`, (B, A, 8 + 1) over its A anchors:
the anchor box, the box deltas and one objectness logit, so
:func:`~keras_fourier.layers.detection.split_raw` reads it.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_fourier.layers.detection import (
    _check_levels,
    decode_candidates,
    has_area,
    split_raw,
    suppress,
)
from keras_fourier.validation import check_choice, check_number, check_positive_int, check_rate

# The RPN's box losses on the deltas: SmoothL1 (beta 1/9) or L1.
RPN_BOX_LOSSES = ("smooth_l1", "l1")


@keras.saving.register_keras_serializable(package="keras_fourier")
class RPNHead(keras.layers.Layer):
    """mmdetection's ``RPNHead``: a shared 3x3 conv, then objectness and box deltas per anchor.

    Every pyramid level goes through ``rpn_conv`` (3x3 conv of `channels`,
    ReLU), then ``rpn_cls`` (1x1 conv to `num_anchors` sigmoid logits) and
    ``rpn_reg`` (1x1 conv to ``num_anchors * 4`` deltas); weights are drawn
    from N(0, 0.01), biases 0, as mmdetection's ``init_cfg``.

    Args:
        num_anchors: anchors per location. Default 3 (ratios 0.5, 1, 2 at
            one scale: ``AnchorBoxes(min_level=2, anchor_scale=8,
            scales_per_octave=1)``).
        channels: the width of ``rpn_conv``. Default 256.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: the list of (B, H_i, W_i, C) pyramid maps.

    Returns:
        (B, A, 5): per anchor (level, then location, then anchor, as
        :class:`~keras_fourier.layers.AnchorBoxes`), the box deltas then the
        objectness logit.

    Example:
        >>> maps = [keras.ops.zeros((1, 8, 8, 16)), keras.ops.zeros((1, 4, 4, 16))]
        >>> RPNHead(channels=16)(maps).shape
        TensorShape([1, 240, 5])

    Reference:
        Ren et al., "Faster R-CNN: Towards Real-Time Object Detection with
        Region Proposal Networks", NeurIPS 2015; mmdetection's ``RPNHead``.
    """

    def __init__(self, num_anchors: int = 3, channels: int = 256, **kwargs):
        super().__init__(**kwargs)
        self.num_anchors = check_positive_int("num_anchors", num_anchors)
        self.channels = check_positive_int("channels", channels)

    def _conv(self, name: str, filters: int, size: int) -> keras.layers.Conv2D:
        return keras.layers.Conv2D(
            filters,
            size,
            padding="same",
            kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
            bias_initializer="zeros",
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, input_shape):
        shapes = _check_levels("RPNHead", input_shape)
        if len({shape[-1] for shape in shapes}) != 1:
            raise ValueError(
                f"RPNHead's levels must have one width. Received: input_shape={input_shape!r}"
            )
        shape = shapes[0]
        self.rpn_conv = self._conv("rpn_conv", self.channels, 3)
        self.rpn_conv.build(shape)
        self.rpn_cls = self._conv("rpn_cls", self.num_anchors, 1)
        self.rpn_cls.build((*shape[:-1], self.channels))
        self.rpn_reg = self._conv("rpn_reg", self.num_anchors * 4, 1)
        self.rpn_reg.build((*shape[:-1], self.channels))

    def call(self, inputs):
        outputs = []
        for feature in inputs:
            hidden = ops.relu(self.rpn_conv(feature))
            batch = ops.shape(feature)[0]
            logits = ops.reshape(self.rpn_cls(hidden), (batch, -1, 1))
            deltas = ops.reshape(self.rpn_reg(hidden), (batch, -1, 4))
            outputs.append(ops.concatenate([deltas, logits], axis=-1))
        return ops.concatenate(outputs, axis=1)

    def compute_output_shape(self, input_shape):
        shapes = _check_levels("RPNHead", input_shape)
        if any(d is None for shape in shapes for d in shape[1:3]):
            return (shapes[0][0], None, 5)
        count = sum(shape[1] * shape[2] for shape in shapes) * self.num_anchors
        return (shapes[0][0], count, 5)

    def get_config(self):
        return {
            **super().get_config(),
            "num_anchors": self.num_anchors,
            "channels": self.channels,
        }


def _proposal_shapes(batch: int | None, count: int) -> dict[str, tuple]:
    """The shapes of RPNProposals' outputs for `count` proposals per image."""
    return {"boxes": (batch, count, 4), "scores": (batch, count), "num_proposals": (batch,)}


@keras.saving.register_keras_serializable(package="keras_fourier")
class RPNProposals(keras.layers.Layer):
    """Proposals from a raw RPN output, as mmdetection 2.x's ``RPNHead`` test configuration.

    Per image and level: the `pre_nms` anchors of highest objectness
    (sigmoid), their boxes decoded (means 0, stds 1, width and height deltas
    clamped) and clipped to the image; boxes of no area dropped
    (``min_bbox_size=0``); greedy NMS at `iou_threshold` within each level
    (mmcv's ``batched_nms`` with the level as the group, as mmdetection 2.x
    does; no classes), the levels run side by side as one batch; then the
    `max_proposals` best, by score. The level of
    each anchor is read from its size, ``anchor_scale * stride``, so any
    input size works. Called with ``training=True`` it keeps `train_pre_nms`
    candidates per level and `train_max_proposals` (mmdetection's
    ``train_cfg.rpn_proposal``).

    The layer also holds the RPN's training configuration (mmdetection's
    ``train_cfg.rpn`` and loss) that
    :mod:`keras_fourier.detection.two_stage_losses` reads: anchors of IoU at
    least `positive_iou` with a ground-truth box are positive, below
    `negative_iou` negative, and each ground truth's best anchors positive
    from `min_positive_iou` (low-quality matches); `num_samples` anchors per
    image are sampled, at most `positive_fraction` positive, anchors across
    the border by more than `allowed_border` left out; sigmoid cross entropy
    and `box_loss` on the deltas.

    Args:
        pre_nms: candidates per level before NMS. Default 1000.
        iou_threshold: the IoU above which NMS drops a box. Default 0.7.
        max_proposals: proposals per image. Default 1000.
        min_level: the level of the first anchors (stride ``2**min_level``).
            Default 2.
        num_levels: the pyramid levels. Default 5 (P2-P6).
        anchor_scale: the anchors' base size in strides. Default 8.0.
        train_pre_nms: candidates per level before NMS in training. Default
            2000.
        train_max_proposals: proposals per image in training. Default 2000
            (the HorNet cascade; Mask R-CNN 1000).
        positive_iou: the IoU from which an anchor is positive. Default 0.7.
        negative_iou: the IoU below which an anchor is negative. Default 0.3.
        min_positive_iou: the lowest IoU of a low-quality match. Default 0.3.
        num_samples: anchors sampled per image for the loss. Default 256.
        positive_fraction: the most positive share of them. Default 0.5.
        box_loss: "smooth_l1" (default, beta 1/9: the HorNet cascade) or
            "l1" (Mask R-CNN) on the deltas.
        allowed_border: anchors crossing the image border by more than
            this many pixels are left out of the loss; negative: none left
            out. Default 0 (the HorNet cascade; Mask R-CNN -1).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        raw: the (B, A, 8 + 1) raw RPN output (anchors, deltas, objectness).
        images: the (B, H, W, 3) input images, whose size clips the boxes.
            Default None: the size the anchors of level `min_level` cover.
        training: whether the training numbers (`train_pre_nms`,
            `train_max_proposals`) apply. Default None: no.

    Returns:
        {"boxes": (B, P, 4) "xyxy" pixels, "scores": (B, P),
        "num_proposals": (B,) int32}, P = `max_proposals` (in training
        `train_max_proposals`), best first; rows
        past ``num_proposals`` are zero boxes of score 0.

    Example:
        >>> raw = keras.ops.zeros((1, 12, 9))
        >>> RPNProposals(max_proposals=5, num_levels=1)(raw)["boxes"].shape
        TensorShape([1, 5, 4])

    Reference:
        Ren et al., NeurIPS 2015; mmdetection's ``RPNHead._bbox_post_process``.
    """

    def __init__(
        self,
        pre_nms: int = 1000,
        iou_threshold: float = 0.7,
        max_proposals: int = 1000,
        min_level: int = 2,
        num_levels: int = 5,
        anchor_scale: float = 8.0,
        train_pre_nms: int = 2000,
        train_max_proposals: int = 2000,
        positive_iou: float = 0.7,
        negative_iou: float = 0.3,
        min_positive_iou: float = 0.3,
        num_samples: int = 256,
        positive_fraction: float = 0.5,
        box_loss: str = "smooth_l1",
        allowed_border: float = 0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.pre_nms = check_positive_int("pre_nms", pre_nms)
        self.iou_threshold = check_rate("iou_threshold", iou_threshold)
        self.max_proposals = check_positive_int("max_proposals", max_proposals)
        self.min_level = check_positive_int("min_level", min_level)
        self.num_levels = check_positive_int("num_levels", num_levels)
        self.anchor_scale = check_number("anchor_scale", anchor_scale, low=0, low_open=True)
        self.train_pre_nms = check_positive_int("train_pre_nms", train_pre_nms)
        self.train_max_proposals = check_positive_int("train_max_proposals", train_max_proposals)
        self.positive_iou = check_number("positive_iou", positive_iou, low=0, high=1)
        self.negative_iou = check_number("negative_iou", negative_iou, low=0, high=positive_iou)
        self.min_positive_iou = check_number("min_positive_iou", min_positive_iou, low=0, high=1)
        self.num_samples = check_positive_int("num_samples", num_samples)
        self.positive_fraction = check_number(
            "positive_fraction", positive_fraction, low=0, high=1, low_open=True
        )
        self.box_loss = check_choice("box_loss", box_loss, RPN_BOX_LOSSES)
        self.allowed_border = check_number("allowed_border", allowed_border)

    def _levels(self, anchors):
        """(B, A) int32 level index of each anchor, from its size ``anchor_scale * stride``."""
        area = (anchors[..., 2] - anchors[..., 0]) * (anchors[..., 3] - anchors[..., 1])
        octave = ops.log2(ops.sqrt(ops.maximum(area, 1e-6)) / self.anchor_scale)
        return ops.cast(ops.round(octave), "int32") - self.min_level

    def _limits(self, training) -> tuple[int, int]:
        """(candidates per level, proposals per image) at inference or in training."""
        if training:
            return self.train_pre_nms, self.train_max_proposals
        return self.pre_nms, self.max_proposals

    def call(self, raw, images=None, training=None):
        pre_nms, max_proposals = self._limits(training)
        raw = ops.cast(raw, "float32")
        anchors, deltas, logits = split_raw(raw)
        scores = ops.sigmoid(logits[..., 0])
        levels = self._levels(anchors)
        count = raw.shape[1]
        per_level = pre_nms if count is None else min(pre_nms, count)
        picked_scores, picked_index = [], []
        for level in range(self.num_levels):
            top, index = ops.top_k(ops.where(levels == level, scores, -1.0), per_level)
            picked_scores.append(top)
            picked_index.append(index)
        # Level after level, each level's candidates best first.
        scores = ops.concatenate(picked_scores, axis=1)
        boxes = decode_candidates(
            anchors, deltas, ops.concatenate(picked_index, axis=1), images, self.min_level
        )
        valid = ops.logical_and(scores >= 0, has_area(boxes))
        # NMS within each level, the (image, level) pairs as one batch; then every level's
        # kept candidates by score, ties in level order.
        out_boxes, out_scores, _, kept = suppress(
            boxes, scores, valid, self.iou_threshold, max_proposals, blocks=self.num_levels
        )
        return {
            "boxes": out_boxes,
            "scores": out_scores,
            "num_proposals": ops.cast(ops.sum(kept, axis=1), "int32"),
        }

    def compute_output_shape(self, raw_shape, images_shape=None):
        return _proposal_shapes(raw_shape[0], self.max_proposals)

    def compute_output_spec(self, raw, images=None, training=None):
        shapes = _proposal_shapes(raw.shape[0], self._limits(training)[1])
        return {
            key: keras.KerasTensor(shape, "int32" if key == "num_proposals" else "float32")
            for key, shape in shapes.items()
        }

    def get_config(self):
        return {
            **super().get_config(),
            "pre_nms": self.pre_nms,
            "iou_threshold": self.iou_threshold,
            "max_proposals": self.max_proposals,
            "min_level": self.min_level,
            "num_levels": self.num_levels,
            "anchor_scale": self.anchor_scale,
            "train_pre_nms": self.train_pre_nms,
            "train_max_proposals": self.train_max_proposals,
            "positive_iou": self.positive_iou,
            "negative_iou": self.negative_iou,
            "min_positive_iou": self.min_positive_iou,
            "num_samples": self.num_samples,
            "positive_fraction": self.positive_fraction,
            "box_loss": self.box_loss,
            "allowed_border": self.allowed_border,
        }
