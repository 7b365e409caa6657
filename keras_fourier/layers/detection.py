"""RetinaNet's layers: anchors per pyramid level, the shared head, and the NMS decoder.

A one-stage detector's raw output is one tensor per image row, (B, A, 8 + C)
over its A anchors (:data:`RAW_COLUMNS`): the anchor box, the predicted box
deltas and the C class logits. Carrying the anchors makes the output
self-contained at any input size: the loss
(:class:`keras_fourier.detection.RetinaNetLoss`), the COCO metric and the
decoder read the anchors from it, without knowing the model's pyramid.

Boxes are "xyxy" (keras-hub's and Keras's ``bounding_box_format`` name):
absolute pixel corners ``[x1, y1, x2, y2]`` of the model's input image.
Deltas are mmdetection's ``DeltaXYWHBBoxCoder`` with means 0 and stds 1
(``keras.utils.bounding_boxes.encode_box_to_deltas`` with
``encoding_format="center_xywh"``).
"""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_fourier.validation import check_positive_int, check_rate

# The columns of a one-stage detector's raw output, before the class logits.
RAW_COLUMNS = ("anchor_x1", "anchor_y1", "anchor_x2", "anchor_y2", "dx", "dy", "dw", "dh")
RAW_BOX_COLUMNS = len(RAW_COLUMNS)
# mmdetection's clamp of decoded width and height deltas: |log(16 / 1000)|.
MAX_DELTA_RATIO = abs(math.log(16.0 / 1000.0))


def _check_levels(layer: str, input_shape) -> list[tuple]:
    if not isinstance(input_shape, (list, tuple)) or not all(
        isinstance(shape, (list, tuple)) and len(shape) == 4 for shape in input_shape
    ):
        raise ValueError(
            f"{layer} takes a list of (B, H, W, C) pyramid maps. Received: input_shape="
            f"{input_shape!r}"
        )
    return [tuple(shape) for shape in input_shape]


@keras.saving.register_keras_serializable(package="keras_fourier")
class AnchorBoxes(keras.layers.Layer):
    """mmdetection's RetinaNet anchors for every location of every pyramid level, batched.

    At level ``l`` (stride ``s = 2**(min_level + i)``) the anchors centred at
    ``(x * s, y * s)`` have base size ``anchor_scale * s`` times each of
    ``scales_per_octave`` octave scales ``2**(k / scales_per_octave)`` and
    each aspect ratio (height / width) of `aspect_ratios`, ordered by
    location (row-major), then ratio, then scale, as mmdetection's
    ``AnchorGenerator`` (v2: centre offset 0, no rounding) and the head's
    outputs are. The maps' sizes are read at run time, so any input size works.

    Args:
        min_level: the level of the first map (stride ``2**min_level``).
            Default 3.
        anchor_scale: the base size in strides (``octave_base_scale``).
            Default 4.0.
        scales_per_octave: octave scales per location. Default 3.
        aspect_ratios: height/width ratios. Default (0.5, 1.0, 2.0).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: the list of (B, H_i, W_i, C) pyramid maps.

    Returns:
        (B, A, 4) "xyxy" anchors, ``A = sum(H_i * W_i) * num_anchors``.

    Example:
        >>> maps = [keras.ops.zeros((1, 8, 8, 4)), keras.ops.zeros((1, 4, 4, 4))]
        >>> AnchorBoxes()(maps).shape
        TensorShape([1, 720, 4])

    Reference:
        Lin et al., "Focal Loss for Dense Object Detection", ICCV 2017;
        mmdetection's ``AnchorGenerator`` (OpenMMLab, Apache-2.0).
    """

    def __init__(
        self,
        min_level: int = 3,
        anchor_scale: float = 4.0,
        scales_per_octave: int = 3,
        aspect_ratios: tuple[float, ...] = (0.5, 1.0, 2.0),
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.min_level = check_positive_int("min_level", min_level)
        if not isinstance(anchor_scale, (int, float)) or not anchor_scale > 0:
            raise ValueError(
                f"`anchor_scale` must be a positive number. Received: anchor_scale={anchor_scale!r}"
            )
        self.anchor_scale = float(anchor_scale)
        self.scales_per_octave = check_positive_int("scales_per_octave", scales_per_octave)
        if (
            not isinstance(aspect_ratios, (list, tuple))
            or not aspect_ratios
            or not all(isinstance(r, (int, float)) and r > 0 for r in aspect_ratios)
        ):
            raise ValueError(
                "`aspect_ratios` must be a non-empty list of positive numbers. Received: "
                f"aspect_ratios={aspect_ratios!r}"
            )
        self.aspect_ratios = tuple(float(r) for r in aspect_ratios)

    @property
    def num_anchors(self) -> int:
        """Anchors per location."""
        return self.scales_per_octave * len(self.aspect_ratios)

    def base_anchors(self, stride: int) -> list[list[float]]:
        """The anchors of one location at the origin, (num_anchors, 4) "xyxy" (Python floats)."""
        anchors = []
        for ratio in self.aspect_ratios:
            h_ratio = math.sqrt(ratio)
            w_ratio = 1.0 / h_ratio
            for k in range(self.scales_per_octave):
                size = self.anchor_scale * stride * 2 ** (k / self.scales_per_octave)
                w, h = size * w_ratio, size * h_ratio
                anchors.append([-0.5 * w, -0.5 * h, 0.5 * w, 0.5 * h])
        return anchors

    def build(self, input_shape):
        _check_levels("AnchorBoxes", input_shape)

    def call(self, inputs):
        levels = []
        for i, feature in enumerate(inputs):
            stride = 2 ** (self.min_level + i)
            shape = ops.shape(feature)
            xs = ops.cast(ops.arange(shape[2]), "float32") * stride
            ys = ops.cast(ops.arange(shape[1]), "float32") * stride
            grid_y, grid_x = ops.meshgrid(ys, xs, indexing="ij")
            grid_x = ops.reshape(grid_x, (-1, 1))
            grid_y = ops.reshape(grid_y, (-1, 1))
            shifts = ops.concatenate([grid_x, grid_y, grid_x, grid_y], axis=-1)
            base = ops.convert_to_tensor(self.base_anchors(stride), "float32")
            levels.append(ops.reshape(shifts[:, None, :] + base[None, :, :], (-1, 4)))
        anchors = ops.concatenate(levels, axis=0)
        batch = ops.shape(inputs[0])[0]
        return ops.broadcast_to(anchors[None], (batch, ops.shape(anchors)[0], 4))

    def compute_output_shape(self, input_shape):
        shapes = _check_levels("AnchorBoxes", input_shape)
        if any(d is None for shape in shapes for d in shape[1:3]):
            return (shapes[0][0], None, 4)
        count = sum(shape[1] * shape[2] for shape in shapes) * self.num_anchors
        return (shapes[0][0], count, 4)

    def get_config(self):
        return {
            **super().get_config(),
            "min_level": self.min_level,
            "anchor_scale": self.anchor_scale,
            "scales_per_octave": self.scales_per_octave,
            "aspect_ratios": list(self.aspect_ratios),
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class RetinaHead(keras.layers.Layer):
    """RetinaNet's classification and box subnets, shared by every pyramid level.

    Each subnet stacks `stacked_convs` 3x3 convolutions of `channels` with
    ReLU, then a 3x3 convolution to ``num_anchors * num_classes`` logits
    (bias ``-log((1 - p) / p)`` for the prior probability `p`) or
    ``num_anchors * 4`` box deltas; weights are drawn from N(0, 0.01), as
    mmdetection's ``RetinaHead`` (``cls_convs.{i}``, ``reg_convs.{i}``,
    ``retina_cls``, ``retina_reg``).

    Args:
        num_classes: object classes (no background class).
        num_anchors: anchors per location. Default 9.
        channels: the subnets' width. Default 256.
        stacked_convs: convolutions per subnet before its output. Default 4.
        prior_probability: the initial foreground probability. Default 0.01.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: the list of (B, H_i, W_i, C) pyramid maps.

    Returns:
        (B, A, 4 + num_classes): per anchor (location-major, then anchor), the
        box deltas then the class logits.

    Example:
        >>> maps = [keras.ops.zeros((1, 8, 8, 16)), keras.ops.zeros((1, 4, 4, 16))]
        >>> RetinaHead(3, channels=16, stacked_convs=1)(maps).shape
        TensorShape([1, 720, 7])

    Reference:
        Lin et al., "Focal Loss for Dense Object Detection", ICCV 2017.
    """

    def __init__(
        self,
        num_classes: int,
        num_anchors: int = 9,
        channels: int = 256,
        stacked_convs: int = 4,
        prior_probability: float = 0.01,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.num_anchors = check_positive_int("num_anchors", num_anchors)
        self.channels = check_positive_int("channels", channels)
        if (
            not isinstance(stacked_convs, int)
            or isinstance(stacked_convs, bool)
            or stacked_convs < 0
        ):
            raise ValueError(
                "`stacked_convs` must be a non-negative int. Received: "
                f"stacked_convs={stacked_convs!r}"
            )
        self.stacked_convs = stacked_convs
        check_rate("prior_probability", prior_probability)
        if not 0 < prior_probability < 1:
            raise ValueError(
                "`prior_probability` must be in (0, 1). Received: "
                f"prior_probability={prior_probability!r}"
            )
        self.prior_probability = float(prior_probability)

    def _conv(self, name: str, filters: int, bias: float = 0.0) -> keras.layers.Conv2D:
        return keras.layers.Conv2D(
            filters,
            3,
            padding="same",
            kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
            bias_initializer=keras.initializers.Constant(bias),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, input_shape):
        shapes = _check_levels("RetinaHead", input_shape)
        channels = {shape[-1] for shape in shapes}
        if len(channels) != 1:
            raise ValueError(
                f"RetinaHead's levels must have one width. Received: input_shape={input_shape!r}"
            )
        shape = shapes[0]
        self.cls_convs, self.reg_convs = [], []
        for branch, convs in (("cls", self.cls_convs), ("reg", self.reg_convs)):
            width = shape[-1]
            for i in range(self.stacked_convs):
                conv = self._conv(f"{branch}_convs_{i}", self.channels)
                conv.build((*shape[:-1], width))
                convs.append(conv)
                width = self.channels
        width = self.channels if self.stacked_convs else shape[-1]
        bias = -math.log((1 - self.prior_probability) / self.prior_probability)
        self.retina_cls = self._conv("retina_cls", self.num_anchors * self.num_classes, bias)
        self.retina_cls.build((*shape[:-1], width))
        self.retina_reg = self._conv("retina_reg", self.num_anchors * 4)
        self.retina_reg.build((*shape[:-1], width))

    def call(self, inputs):
        outputs = []
        for feature in inputs:
            cls, reg = feature, feature
            for conv in self.cls_convs:
                cls = ops.relu(conv(cls))
            for conv in self.reg_convs:
                reg = ops.relu(conv(reg))
            batch = ops.shape(feature)[0]
            logits = ops.reshape(self.retina_cls(cls), (batch, -1, self.num_classes))
            deltas = ops.reshape(self.retina_reg(reg), (batch, -1, 4))
            outputs.append(ops.concatenate([deltas, logits], axis=-1))
        return ops.concatenate(outputs, axis=1)

    def compute_output_shape(self, input_shape):
        shapes = _check_levels("RetinaHead", input_shape)
        width = 4 + self.num_classes
        if any(d is None for shape in shapes for d in shape[1:3]):
            return (shapes[0][0], None, width)
        count = sum(shape[1] * shape[2] for shape in shapes) * self.num_anchors
        return (shapes[0][0], count, width)

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "num_anchors": self.num_anchors,
            "channels": self.channels,
            "stacked_convs": self.stacked_convs,
            "prior_probability": self.prior_probability,
        }


def split_raw(raw):
    """(anchors, deltas, logits) of a raw (B, A, 8 + C) detector output (:data:`RAW_COLUMNS`)."""
    return raw[..., :4], raw[..., 4:RAW_BOX_COLUMNS], raw[..., RAW_BOX_COLUMNS:]


def decode_boxes(anchors, deltas):
    """ "xyxy" boxes from `anchors` and their deltas (width and height deltas clamped as mmdet)."""
    deltas = ops.concatenate(
        [deltas[..., :2], ops.clip(deltas[..., 2:], -MAX_DELTA_RATIO, MAX_DELTA_RATIO)], axis=-1
    )
    return keras.utils.bounding_boxes.decode_deltas_to_boxes(
        anchors, deltas, anchor_format="xyxy", box_format="xyxy", encoded_format="center_xywh"
    )


def encode_boxes(anchors, boxes):
    """The deltas of "xyxy" `boxes` from `anchors` (inverse of :func:`decode_boxes`)."""
    return keras.utils.bounding_boxes.encode_box_to_deltas(
        anchors, boxes, anchor_format="xyxy", box_format="xyxy", encoding_format="center_xywh"
    )


def has_area(boxes):
    """Whether "xyxy" boxes have a positive width and height (mmdetection's ``min_bbox_size=0``)."""
    return ops.logical_and(boxes[..., 2] > boxes[..., 0], boxes[..., 3] > boxes[..., 1])


def pairwise_iou(boxes1, boxes2):
    """(..., N, M) IoU of "xyxy" (..., N, 4) and (..., M, 4) boxes (0 for empty unions)."""
    a = ops.convert_to_tensor(boxes1)[..., :, None, :]
    b = ops.convert_to_tensor(boxes2)[..., None, :, :]
    width = ops.maximum(ops.minimum(a[..., 2], b[..., 2]) - ops.maximum(a[..., 0], b[..., 0]), 0)
    height = ops.maximum(ops.minimum(a[..., 3], b[..., 3]) - ops.maximum(a[..., 1], b[..., 1]), 0)
    intersection = width * height
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    union = area_a + area_b - intersection
    return ops.where(union > 0, intersection / ops.maximum(union, 1e-9), 0.0)


def image_size(anchors, images, min_level: int):
    """(width, height) of the input: the `images`', else what the first level's `anchors` cover.

    Args:
        anchors: the (B, A, 4) "xyxy" anchors, level `min_level` first.
        images: the (B, H, W, 3) input images, or None.
        min_level: the level of the first anchors (stride ``2**min_level``).

    Returns:
        The float32 width and height scalars.
    """
    if images is not None:
        shape = ops.shape(images)
        return ops.cast(shape[2], "float32"), ops.cast(shape[1], "float32")
    stride = 2.0**min_level
    centres = (anchors[0, :, :2] + anchors[0, :, 2:]) / 2
    extent = ops.max(centres, axis=0) + stride
    return extent[0], extent[1]


# Parallel rounds of `greedy_nms` before it finishes candidate by candidate.
NMS_ROUNDS = 32


def greedy_nms(overlaps, valid):
    """Greedy non-maximum suppression over candidates sorted by score, batched.

    Candidate ``i`` is kept when it is valid and no kept candidate before it
    overlaps it (``overlaps[b, j, i] == 1``, ``j < i``): the sequential rule,
    computed by parallel rounds. Each round recomputes every candidate from
    the previous round's kept flags (one batched matrix product); the greedy
    flags are the rounds' only fixed point, and after ``t`` rounds the first
    ``t`` candidates are final, so the rounds stop once nothing changes,
    which takes a few (7 for an 800 x 1344 image's RPN candidates). Chains
    of suppression longer than `NMS_ROUNDS` finish candidate by candidate
    from the last round's final ones, so the work stays within that of the
    sequential loop plus `NMS_ROUNDS` rounds.

    Args:
        overlaps: (B, K, K) 1 where two candidates suppress each other (IoU
            above the threshold, within one class or level), else 0.
        valid: (B, K) 1 for a candidate that may be kept, else 0.

    Returns:
        (B, K) float32: 1 for each kept candidate, else 0.
    """
    valid = ops.cast(valid, "float32")
    count = valid.shape[1]
    overlaps = ops.cast(overlaps, "float32") * ops.triu(ops.ones((count, count)), k=1)[None]

    def changing(i, keep, previous):
        return ops.logical_and(i < NMS_ROUNDS, ops.any(keep != previous))

    def round_(i, keep, previous):
        suppressed = ops.matmul(keep[:, None, :], overlaps)[:, 0, :] > 0.5
        return i + 1, valid * (1.0 - ops.cast(suppressed, "float32")), keep

    rounds, keep, previous = ops.while_loop(
        changing, round_, (ops.zeros((), "int32"), valid, ops.zeros_like(valid))
    )
    # Unsettled after NMS_ROUNDS rounds: the first NMS_ROUNDS candidates are final; the rest
    # follow one by one, up to the last valid candidate.
    positions = ops.arange(count)
    start = ops.where(ops.any(keep != previous), rounds, count)
    keep = keep * ops.cast(positions < start, "float32")[None, :]
    steps = ops.max(ops.where(valid > 0, positions[None, :] + 1, 0))

    def remaining(i, keep):
        return i < steps

    def step(i, keep):
        suppressed = ops.max(keep * ops.take(overlaps, i, axis=2), axis=1)
        kept = ops.take(valid, i, axis=1) * (1.0 - suppressed)
        return i + 1, keep + ops.one_hot(i, count)[None, :] * kept[:, None]

    return ops.while_loop(remaining, step, (ops.cast(start, "int32"), keep))[1]


def decode_candidates(anchors, deltas, index, images, min_level: int):
    """The boxes of the anchors at `index`, decoded from their deltas and clipped to the image.

    Args:
        anchors: (B, A, 4) "xyxy" anchors, level `min_level` first.
        deltas: (B, A, 4) box deltas.
        index: (B, K) int anchor indices.
        images: the (B, H, W, 3) input images, or None (see :func:`image_size`).
        min_level: the level of the first anchors.

    Returns:
        (B, K, 4) "xyxy" boxes within ``[0, width] x [0, height]``.
    """
    take = index[..., None]
    boxes = decode_boxes(
        ops.take_along_axis(anchors, take, axis=1), ops.take_along_axis(deltas, take, axis=1)
    )
    width, height = image_size(anchors, images, min_level)
    limit = ops.stack([width, height, width, height])
    return ops.minimum(ops.maximum(boxes, 0.0), limit)


def suppress(boxes, scores, valid, iou_threshold: float, limit: int, groups=None, blocks: int = 1):
    """Greedy NMS within groups (classes) or blocks (levels), then the `limit` best kept.

    Args:
        boxes: (B, K, 4) "xyxy" candidates; sorted by score within each block.
        scores: (B, K) their scores, in [0, 1].
        valid: (B, K) bool: the candidates that may be kept.
        iou_threshold: the IoU above which a box is dropped.
        limit: how many to return.
        groups: None (default: every candidate of a block may suppress every
            other) or (B, K) ints: only candidates of one group suppress each
            other.
        blocks: 1 (default) or the number of equal consecutive runs of the K
            candidates (an RPN's levels) that never suppress each other: NMS
            runs on the (image, block) pairs as one batch, with K / blocks
            square overlap matrices instead of one of all K.

    Returns:
        ``(boxes, scores, order, kept)``: (B, limit, 4) boxes and (B, limit)
        scores, best first across blocks (ties in candidate order), zero past
        the kept ones; the (B, limit) int candidate index of each row and its
        1/0 float32 kept flag.
    """
    size = boxes.shape[1] // blocks
    by_block = ops.reshape(boxes, (-1, size, 4))
    overlaps = ops.cast(pairwise_iou(by_block, by_block) > iou_threshold, "float32")
    if groups is not None:
        groups = ops.reshape(groups, (-1, size))
        overlaps = overlaps * ops.cast(groups[:, :, None] == groups[:, None, :], "float32")
    keep = greedy_nms(overlaps, ops.reshape(valid, (-1, size)))
    return best_kept(boxes, scores, ops.reshape(keep, (-1, boxes.shape[1])), limit)


def best_kept(boxes, scores, keep, limit: int):
    """The `limit` best kept candidates (of `suppress`), best first, padded with zeros.

    Args:
        boxes: (B, K, 4) candidates.
        scores: (B, K) their scores, in [0, 1].
        keep: (B, K) 1/0 float32: the candidates NMS kept.
        limit: how many to return.

    Returns:
        ``(boxes, scores, order, kept)`` as :func:`suppress` returns them; ties
        in score keep the candidates' order.
    """
    top = min(limit, boxes.shape[1])
    best, order = ops.top_k(scores * keep - (1.0 - keep), top)
    kept = ops.cast(best >= 0, "float32")
    out_boxes = ops.take_along_axis(boxes, order[..., None], axis=1) * kept[..., None]
    out_scores = ops.take_along_axis(scores, order, axis=1) * kept
    pad = limit - top
    if pad:
        out_boxes = ops.pad(out_boxes, ((0, 0), (0, pad), (0, 0)))
        out_scores = ops.pad(out_scores, ((0, 0), (0, pad)))
        order = ops.pad(order, ((0, 0), (0, pad)))
        kept = ops.pad(kept, ((0, 0), (0, pad)))
    return out_boxes, out_scores, order, kept


@keras.saving.register_keras_serializable(package="keras_fourier")
class DetectionDecoder(keras.layers.Layer):
    """Detections from a raw one-stage output: top-k, per-class NMS, the best `max_detections`.

    Per image: the sigmoid scores of every (anchor, class) pair, the
    `pre_nms` highest kept, their boxes decoded from the anchors and clipped
    to the image; pairs at or below `score_threshold`, and boxes of no area
    (mmdetection's ``min_bbox_size=0``: a box clipped to an image border),
    dropped; greedy
    non-maximum suppression within each class (a box is dropped when it
    overlaps a higher-scoring kept box of its class by more than
    `iou_threshold`); then the `max_detections` best, by score. This is
    mmdetection's RetinaNet test configuration (score 0.05, NMS IoU 0.5,
    100 per image), with one difference: its 1,000 candidates are taken per
    level by each anchor's best class, these over all levels and classes.

    Args:
        score_threshold: the lowest score kept (exclusive). Default 0.05.
        iou_threshold: the IoU above which NMS drops a box. Default 0.5.
        max_detections: detections per image. Default 100.
        pre_nms: candidates per image before NMS. Default 1000.
        min_level: the pyramid level of the first anchors (stride
            ``2**min_level``), which gives the image size when no images
            are passed. Default 3.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        raw: the (B, A, 8 + C) raw detector output.
        images: the (B, H, W, 3) input images, whose size clips the boxes.
            Default None: the size the anchors of level `min_level` cover
            (the input's, for a detector whose input the level's stride divides).

    Returns:
        {"boxes": (B, D, 4) "xyxy" pixels, "scores": (B, D), "classes": (B, D)
        int32, "num_detections": (B,) int32}, D = `max_detections`; rows past
        ``num_detections`` are zero boxes, score 0 and class -1.

    Example:
        >>> raw = keras.ops.zeros((1, 9, 8 + 2))
        >>> out = DetectionDecoder(max_detections=5)(raw)
        >>> out["boxes"].shape
        TensorShape([1, 5, 4])
    """

    def __init__(
        self,
        score_threshold: float = 0.05,
        iou_threshold: float = 0.5,
        max_detections: int = 100,
        pre_nms: int = 1000,
        min_level: int = 3,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.min_level = check_positive_int("min_level", min_level)
        self.score_threshold = check_rate("score_threshold", score_threshold)
        self.iou_threshold = check_rate("iou_threshold", iou_threshold)
        self.max_detections = check_positive_int("max_detections", max_detections)
        self.pre_nms = check_positive_int("pre_nms", pre_nms)

    def call(self, raw, images=None):
        raw = ops.cast(raw, "float32")
        anchors, deltas, logits = split_raw(raw)
        num_classes = logits.shape[-1]
        count = raw.shape[1]
        batch = ops.shape(raw)[0]
        flat = ops.reshape(ops.sigmoid(logits), (batch, -1))
        candidates = self.pre_nms if count is None else min(self.pre_nms, count * num_classes)
        scores, index = ops.top_k(flat, candidates)
        anchor_index = index // num_classes
        classes = index - anchor_index * num_classes
        boxes = decode_candidates(anchors, deltas, anchor_index, images, self.min_level)
        valid = ops.logical_and(scores > self.score_threshold, has_area(boxes))
        out_boxes, out_scores, order, kept = suppress(
            boxes, scores, valid, self.iou_threshold, self.max_detections, groups=classes
        )
        out_classes = ops.where(
            kept > 0, ops.take_along_axis(ops.cast(classes, "int32"), order, axis=1), -1
        )
        return {
            "boxes": out_boxes,
            "scores": out_scores,
            "classes": out_classes,
            "num_detections": ops.cast(ops.sum(kept, axis=1), "int32"),
        }

    def compute_output_spec(self, raw, images=None):
        batch = raw.shape[0]
        shape = (batch, self.max_detections)
        return {
            "boxes": keras.KerasTensor((*shape, 4), "float32"),
            "scores": keras.KerasTensor(shape, "float32"),
            "classes": keras.KerasTensor(shape, "int32"),
            "num_detections": keras.KerasTensor((batch,), "int32"),
        }

    def get_config(self):
        return {
            **super().get_config(),
            "score_threshold": self.score_threshold,
            "iou_threshold": self.iou_threshold,
            "max_detections": self.max_detections,
            "pre_nms": self.pre_nms,
            "min_level": self.min_level,
        }
