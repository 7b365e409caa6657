"""The RoI heads of two-stage detectors: box and mask heads, and the (cascade) RoI head.

Mask R-CNN has one stage, Cascade Mask R-CNN three: each stage's
:class:`BBoxHead` classifies the RoIs (background is the LAST logit, as
mmdetection 2.x) and regresses class-specific box deltas, normalised by the
stage's target stds; each stage's :class:`MaskHead` predicts a 28 x 28 mask
per class. :class:`CascadeRoIHead` runs them as mmdetection 2.x's
``CascadeRoIHead.simple_test`` (one stage: ``StandardRoIHead.simple_test``)
and holds the training configuration the losses read
(:mod:`keras_fourier.detection.two_stage_losses`).

Boxes are "xyxy" absolute pixel corners of the model's input image, as in
:mod:`keras_fourier.layers.detection`.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_fourier.layers.decode_heads import BN_EPSILON, BN_MOMENTUM
from keras_fourier.layers.detection import _check_levels, decode_boxes, image_size, suppress
from keras_fourier.layers.roi import RoIAlign
from keras_fourier.validation import (
    check_bool,
    check_choice,
    check_layer_arguments,
    check_number,
    check_positive_int,
    check_rate,
)

# The box heads' normalisation options (mmcv's norm_cfg): BatchNorm or none.
NORMS = ("batch_norm", None)
# The R-CNN box losses: GIoU on decoded boxes (the HorNet cascade's) or L1 on the deltas.
BOX_LOSSES = ("giou", "l1")
# mmdetection's Cascade R-CNN stages: target stds of the box deltas per stage.
CASCADE_STDS = ((0.1, 0.1, 0.2, 0.2), (0.05, 0.05, 0.1, 0.1), (0.033, 0.033, 0.067, 0.067))
# The detections' integer outputs (the others are float32).
INT_OUTPUTS = ("classes", "num_detections")
# Kaiming normal (fan_out, ReLU gain) of mmcv's ConvModule and FCNMaskHead, and the
# Xavier uniform of ConvFCBBoxHead's shared fcs.
KAIMING = keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")
XAVIER = keras.initializers.GlorotUniform()


def _check_non_negative_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative int. Received: {name}={value!r}")
    return value


def _check_roi_features(layer: str, shape, size: int | None = None) -> tuple:
    """(B, N, S, S, C) RoI features, with S == `size` when given."""
    if (
        not isinstance(shape, (tuple, list))
        or len(shape) != 5
        or shape[-1] is None
        or (size is not None and tuple(shape[2:4]) != (size, size))
    ):
        side = "S, S" if size is None else f"{size}, {size}"
        raise ValueError(
            f"{layer} takes (B, N, {side}, C) RoI features. Received: input_shape={shape!r}"
        )
    return tuple(shape)


def decode_rois(rois, deltas, stds, images):
    """Boxes from RoIs and their normalised deltas, clipped to the image (mmdet's ``delta2bbox``).

    Args:
        rois: (..., 4) "xyxy" boxes.
        deltas: (..., 4) deltas of the same shape, in units of `stds`.
        stds: the 4 target stds of the stage (means 0).
        images: the (B, H, W, 3) input images, whose size clips the boxes.

    Returns:
        (..., 4) "xyxy" boxes within ``[0, width] x [0, height]``.
    """
    stds = ops.convert_to_tensor(stds, "float32")
    boxes = decode_boxes(ops.cast(rois, "float32"), ops.cast(deltas, "float32") * stds)
    width, height = image_size(None, images, 0)
    return ops.minimum(ops.maximum(boxes, 0.0), ops.stack([width, height, width, height]))


def class_deltas(deltas, labels):
    """(B, N, 4) the deltas of each RoI's class: `deltas` (B, N, K, 4) at `labels` (B, N) ints."""
    index = ops.cast(labels, "int32")[..., None, None]
    return ops.take_along_axis(deltas, index, axis=2)[:, :, 0]


@keras.saving.register_keras_serializable(package="keras_fourier")
class BBoxHead(keras.layers.Layer):
    """mmdetection 2.x's ``ConvFCBBoxHead``: shared convs and fcs, then class logits and deltas.

    Each RoI's (S, S, C) features go through `num_shared_convs` 3x3
    convolutions (``shared_convs_{i}_conv``; with ``norm="batch_norm"`` no
    bias and ``shared_convs_{i}_bn``, PyTorch's eps 1e-5; then ReLU), are
    flattened (NHWC order: a PyTorch checkpoint's first fc rows are permuted
    from NCHW), then `num_shared_fcs` dense layers (``shared_fcs_{i}``, ReLU).
    ``fc_cls`` gives ``num_classes + 1`` logits, the BACKGROUND LAST;
    ``fc_reg`` the class-specific deltas, ``4 * num_classes``. HorNet's
    Cascade Mask R-CNN: 4 convs of 256 with BatchNorm and 1 fc of 1024 (the
    defaults); Mask R-CNN's ``Shared2FCBBoxHead``: ``num_shared_convs=0,
    num_shared_fcs=2, norm=None``. Initialisation as mmdetection: convs
    Kaiming normal, shared fcs Xavier uniform, ``fc_cls`` N(0, 0.01),
    ``fc_reg`` N(0, 0.001), biases 0.

    Args:
        num_classes: object classes (no background). Default 80 (COCO).
        num_shared_convs: shared 3x3 convolutions. Default 4.
        num_shared_fcs: shared dense layers. Default 1.
        conv_channels: the convolutions' width. Default 256.
        fc_channels: the dense layers' width. Default 1024.
        norm: "batch_norm" (default) or None: the convolutions' norm.
        roi_size: the side of the RoI features. Default 7.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, N, roi_size, roi_size, C) RoI features.
        training: whether BatchNorm uses batch statistics.

    Returns:
        {"logits": (B, N, num_classes + 1), "deltas": (B, N, num_classes, 4)}.

    Example:
        >>> head = BBoxHead(3, num_shared_convs=1, conv_channels=8, fc_channels=16)
        >>> out = head(keras.ops.ones((2, 5, 7, 7, 4)))
        >>> out["logits"].shape, out["deltas"].shape
        (TensorShape([2, 5, 4]), TensorShape([2, 5, 3, 4]))

    Reference:
        Cai and Vasconcelos, "Cascade R-CNN", CVPR 2018; mmdetection 2.x
        ``ConvFCBBoxHead`` (OpenMMLab, Apache-2.0).
    """

    def __init__(
        self,
        num_classes: int = 80,
        num_shared_convs: int = 4,
        num_shared_fcs: int = 1,
        conv_channels: int = 256,
        fc_channels: int = 1024,
        norm: str | None = "batch_norm",
        roi_size: int = 7,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.num_shared_convs = _check_non_negative_int("num_shared_convs", num_shared_convs)
        self.num_shared_fcs = _check_non_negative_int("num_shared_fcs", num_shared_fcs)
        self.conv_channels = check_positive_int("conv_channels", conv_channels)
        self.fc_channels = check_positive_int("fc_channels", fc_channels)
        self.norm = check_choice("norm", norm, NORMS)
        self.roi_size = check_positive_int("roi_size", roi_size)

    def build(self, input_shape):
        shape = _check_roi_features("BBoxHead", input_shape, self.roi_size)
        feature = (None, self.roi_size, self.roi_size, shape[-1])
        self.shared_convs, self.shared_bns = [], []
        for i in range(self.num_shared_convs):
            conv = keras.layers.Conv2D(
                self.conv_channels,
                3,
                padding="same",
                use_bias=self.norm is None,
                kernel_initializer=KAIMING,
                dtype=self.dtype_policy,
                name=f"shared_convs_{i}_conv",
            )
            conv.build(feature)
            feature = (*feature[:3], self.conv_channels)
            self.shared_convs.append(conv)
            if self.norm is not None:
                bn = keras.layers.BatchNormalization(
                    epsilon=BN_EPSILON,
                    momentum=BN_MOMENTUM,
                    dtype=self.dtype_policy,
                    name=f"shared_convs_{i}_bn",
                )
                bn.build(feature)
                self.shared_bns.append(bn)
        width = self.roi_size * self.roi_size * feature[-1]
        self.shared_fcs = []
        for i in range(self.num_shared_fcs):
            fc = keras.layers.Dense(
                self.fc_channels,
                kernel_initializer=XAVIER,
                dtype=self.dtype_policy,
                name=f"shared_fcs_{i}",
            )
            fc.build((None, width))
            width = self.fc_channels
            self.shared_fcs.append(fc)
        self.fc_cls = keras.layers.Dense(
            self.num_classes + 1,
            kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
            dtype=self.dtype_policy,
            name="fc_cls",
        )
        self.fc_cls.build((None, width))
        self.fc_reg = keras.layers.Dense(
            4 * self.num_classes,
            kernel_initializer=keras.initializers.RandomNormal(stddev=0.001),
            dtype=self.dtype_policy,
            name="fc_reg",
        )
        self.fc_reg.build((None, width))

    def call(self, inputs, training=None):
        batch, count = ops.shape(inputs)[0], ops.shape(inputs)[1]
        x = ops.reshape(inputs, (-1, self.roi_size, self.roi_size, inputs.shape[-1]))
        for i, conv in enumerate(self.shared_convs):
            x = conv(x)
            if self.shared_bns:
                x = self.shared_bns[i](x, training=training)
            x = ops.relu(x)
        x = ops.reshape(x, (batch, count, -1))
        for fc in self.shared_fcs:
            x = ops.relu(fc(x))
        logits = ops.cast(self.fc_cls(x), "float32")
        deltas = ops.reshape(ops.cast(self.fc_reg(x), "float32"), (batch, count, -1, 4))
        return {"logits": logits, "deltas": deltas}

    def compute_output_spec(self, inputs, training=None):
        batch, count = inputs.shape[:2]
        return {
            "logits": keras.KerasTensor((batch, count, self.num_classes + 1), "float32"),
            "deltas": keras.KerasTensor((batch, count, self.num_classes, 4), "float32"),
        }

    def compute_output_shape(self, input_shape):
        batch, count = _check_roi_features("BBoxHead", input_shape, self.roi_size)[:2]
        return {
            "logits": (batch, count, self.num_classes + 1),
            "deltas": (batch, count, self.num_classes, 4),
        }

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "num_shared_convs": self.num_shared_convs,
            "num_shared_fcs": self.num_shared_fcs,
            "conv_channels": self.conv_channels,
            "fc_channels": self.fc_channels,
            "norm": self.norm,
            "roi_size": self.roi_size,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class MaskHead(keras.layers.Layer):
    """mmdetection's ``FCNMaskHead``: 3x3 convs, a 2x deconvolution, per-class mask logits.

    Each RoI's (S, S, C) features go through `num_convs` 3x3 convolutions
    with bias and ReLU (``convs_{i}``), ``upsample`` (a 2x2 stride-2
    transposed convolution and ReLU) and ``conv_logits`` (1x1, one channel
    per class): (2S, 2S, num_classes) logits. Initialisation as mmdetection:
    Kaiming normal (fan_out), biases 0.

    Args:
        num_classes: object classes. Default 80 (COCO).
        num_convs: the 3x3 convolutions. Default 4.
        channels: their width and the deconvolution's. Default 256.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, N, S, S, C) RoI features (S = 14 in Mask R-CNN).

    Returns:
        (B, N, 2S, 2S, num_classes) float32 mask logits.

    Example:
        >>> head = MaskHead(3, num_convs=1, channels=8)
        >>> head(keras.ops.ones((2, 5, 14, 14, 4))).shape
        TensorShape([2, 5, 28, 28, 3])

    Reference:
        He et al., "Mask R-CNN", ICCV 2017; mmdetection 2.x ``FCNMaskHead``
        (OpenMMLab, Apache-2.0).
    """

    def __init__(self, num_classes: int = 80, num_convs: int = 4, channels: int = 256, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.num_convs = _check_non_negative_int("num_convs", num_convs)
        self.channels = check_positive_int("channels", channels)

    def build(self, input_shape):
        shape = _check_roi_features("MaskHead", input_shape)
        feature = (None, *shape[2:])
        self.convs = []
        for i in range(self.num_convs):
            conv = keras.layers.Conv2D(
                self.channels,
                3,
                padding="same",
                kernel_initializer=KAIMING,
                dtype=self.dtype_policy,
                name=f"convs_{i}",
            )
            conv.build(feature)
            feature = (*feature[:3], self.channels)
            self.convs.append(conv)
        self.upsample = keras.layers.Conv2DTranspose(
            self.channels,
            2,
            strides=2,
            kernel_initializer=KAIMING,
            dtype=self.dtype_policy,
            name="upsample",
        )
        self.upsample.build(feature)
        self.conv_logits = keras.layers.Conv2D(
            self.num_classes,
            1,
            kernel_initializer=KAIMING,
            dtype=self.dtype_policy,
            name="conv_logits",
        )
        self.conv_logits.build((None, 2 * feature[1], 2 * feature[2], self.channels))

    def call(self, inputs):
        batch, count = ops.shape(inputs)[0], ops.shape(inputs)[1]
        size = inputs.shape[2]
        x = ops.reshape(inputs, (-1, size, size, inputs.shape[-1]))
        for conv in self.convs:
            x = ops.relu(conv(x))
        x = self.conv_logits(ops.relu(self.upsample(x)))
        return ops.reshape(ops.cast(x, "float32"), (batch, count, 2 * size, 2 * size, -1))

    def compute_output_shape(self, input_shape):
        shape = _check_roi_features("MaskHead", input_shape)
        return (*shape[:2], 2 * shape[2], 2 * shape[3], self.num_classes)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(self.compute_output_shape(inputs.shape), "float32")

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "num_convs": self.num_convs,
            "channels": self.channels,
        }


def _check_stage_values(name: str, value, stages: int, check) -> tuple:
    if not isinstance(value, (list, tuple)) or len(value) != stages:
        raise ValueError(
            f"`{name}` must hold one value per stage ({stages}, the length of `stage_stds`). "
            f"Received: {name}={value!r}"
        )
    return tuple(check(name, v) for v in value)


def _check_stds(stage_stds) -> tuple:
    if (
        not isinstance(stage_stds, (list, tuple))
        or not stage_stds
        or not all(
            isinstance(stds, (list, tuple))
            and len(stds) == 4
            and all(isinstance(s, (int, float)) and not isinstance(s, bool) and s > 0 for s in stds)
            for stds in stage_stds
        )
    ):
        raise ValueError(
            "`stage_stds` must be a non-empty list of 4 positive stds per stage. Received: "
            f"stage_stds={stage_stds!r}"
        )
    return tuple(tuple(float(s) for s in stds) for stds in stage_stds)


def _fraction(name: str, value) -> float:
    return check_number(name, value, low=0, high=1, low_open=True)


def _weight(name: str, value) -> float:
    return check_number(name, value, low=0)


@keras.saving.register_keras_serializable(package="keras_fourier")
class CascadeRoIHead(keras.layers.Layer):
    """mmdetection 2.x's ``CascadeRoIHead`` at inference: RoI stages, per-class NMS, masks.

    With S stages (``len(stage_stds)``; 1 is Mask R-CNN's ``StandardRoIHead``),
    on each image's proposals (rows past ``num_proposals`` are ignored):

    1. each stage ``s`` pools its RoIs (``bbox_roi_align``, P2-P5) and runs
       ``bbox_head_{s}`` (:class:`BBoxHead`); between stages every RoI is
       replaced by its box regressed with the stage's deltas of its best
       non-background class (mmdet's ``regress_by_class``: deltas times the
       stage's stds, clipped to the image);
    2. the logits of all stages are averaged, then softmaxed (background
       last); each (RoI, class) pair's box is the last stage's deltas of that
       class decoded from the last stage's RoI (mmdet's ``get_bboxes``);
    3. ``multiclass_nms``: pairs scoring above `score_threshold`, greedy NMS
       within each class at `iou_threshold`, the `max_detections` best. The
       candidates are the `pre_nms` best pairs of the image: equal to
       mmdetection's whenever fewer pairs pass the threshold or
       `max_detections` survive among them;
    4. with `with_mask`, the detections are pooled (``mask_roi_align``, 14)
       and every stage's ``mask_head_{s}`` (:class:`MaskHead`) runs on them;
       the sigmoid probabilities are averaged over the stages (mmdet's
       ``merge_aug_masks``) and the detection's class channel is kept.

    The layer also holds the training configuration (mmdetection's
    ``train_cfg.rcnn`` and loss settings) that
    :mod:`keras_fourier.detection.two_stage_losses` reads.

    Args:
        num_classes: object classes (no background). Default 80 (COCO).
        stage_stds: per stage, the 4 target stds of the box deltas. Default
            Cascade R-CNN's (0.1, 0.1, 0.2, 0.2), (0.05, 0.05, 0.1, 0.1),
            (0.033, 0.033, 0.067, 0.067).
        bbox_head: :class:`BBoxHead` arguments but `num_classes`, for every
            stage. Default None: its defaults (HorNet's 4 convs + 1 fc).
        mask_head: :class:`MaskHead` arguments but `num_classes`. Default
            None: its defaults (4 convs of 256).
        with_mask: whether masks are predicted. Default True.
        score_threshold: the lowest score kept (exclusive). Default 0.05.
        iou_threshold: the per-class NMS IoU. Default 0.5.
        max_detections: detections per image. Default 100.
        pre_nms: (RoI, class) candidates per image before NMS. Default 1000.
        min_level: the level of the first map (stride ``2**min_level``).
            Default 2.
        roi_levels: the maps RoIs are pooled from (P2-P5). Default 4.
        mask_roi_size: the side of the mask RoI features. Default 14.
        train_sampling_terms: :class:`RoIAlign`'s gathers per bin in
            training (inference is exact). Default 64.
        stage_iou_thresholds: per stage, the IoU from which a RoI matches a
            ground-truth box (positive and negative threshold). Default
            (0.5, 0.6, 0.7).
        stage_loss_weights: per stage, its losses' weight. Default (1, 0.5,
            0.25).
        num_samples: sampled RoIs per image and stage. Default 512.
        positive_fraction: the most positive share of them. Default 0.25.
        match_low_quality: whether a ground truth's best RoI is positive
            below the threshold (Mask R-CNN: True). Default False.
        box_loss: "giou" (default, on decoded boxes: the HorNet cascade) or
            "l1" (on the normalised deltas: Mask R-CNN).
        box_loss_weight: the box loss's weight. Default 10.0.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        levels: the list of (B, H_i, W_i, C) pyramid maps, P2 first.
        proposals: :class:`~keras_fourier.layers.RPNProposals`' output,
            {"boxes": (B, P, 4), "num_proposals": (B,), ...}.
        images: the (B, H, W, 3) input images, whose size clips the boxes.
        training: whether the heads' BatchNorm uses batch statistics.

    Returns:
        {"boxes": (B, D, 4) "xyxy" pixels, "scores": (B, D), "classes":
        (B, D) int32, "num_detections": (B,) int32} and with `with_mask`
        "masks": (B, D, M, M) float32 probabilities in each box's frame
        (M = 2 * `mask_roi_size`); D = `max_detections`, best first; rows
        past ``num_detections`` are zero, class -1.

    Example:
        >>> head = CascadeRoIHead(2, bbox_head={"conv_channels": 8, "fc_channels": 16},
        ...                       mask_head={"channels": 8}, max_detections=5)
        >>> levels = [keras.ops.ones((1, 16 // 2**i, 16 // 2**i, 8)) for i in range(5)]
        >>> proposals = {"boxes": keras.ops.convert_to_tensor([[[4.0, 4.0, 40.0, 30.0]]]),
        ...              "num_proposals": keras.ops.convert_to_tensor([1])}
        >>> head(levels, proposals, keras.ops.zeros((1, 64, 64, 3)))["masks"].shape
        TensorShape([1, 5, 28, 28])

    Reference:
        Cai and Vasconcelos, "Cascade R-CNN: Delving into High Quality Object
        Detection", CVPR 2018; He et al., "Mask R-CNN", ICCV 2017;
        mmdetection 2.x ``CascadeRoIHead``, ``BBoxHead.get_bboxes``,
        ``multiclass_nms``, ``merge_aug_masks`` (OpenMMLab, Apache-2.0).
    """

    def __init__(
        self,
        num_classes: int = 80,
        stage_stds: tuple = CASCADE_STDS,
        bbox_head: dict | None = None,
        mask_head: dict | None = None,
        with_mask: bool = True,
        score_threshold: float = 0.05,
        iou_threshold: float = 0.5,
        max_detections: int = 100,
        pre_nms: int = 1000,
        min_level: int = 2,
        roi_levels: int = 4,
        mask_roi_size: int = 14,
        train_sampling_terms: int = 64,
        stage_iou_thresholds: tuple = (0.5, 0.6, 0.7),
        stage_loss_weights: tuple = (1.0, 0.5, 0.25),
        num_samples: int = 512,
        positive_fraction: float = 0.25,
        match_low_quality: bool = False,
        box_loss: str = "giou",
        box_loss_weight: float = 10.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.stage_stds = _check_stds(stage_stds)
        stages = len(self.stage_stds)
        fixed = {"num_classes": self.num_classes}
        self.bbox_head = check_layer_arguments("bbox_head", bbox_head, BBoxHead, fixed)
        self.mask_head = check_layer_arguments("mask_head", mask_head, MaskHead, fixed)
        self.with_mask = check_bool("with_mask", with_mask)
        self.score_threshold = check_rate("score_threshold", score_threshold)
        self.iou_threshold = check_rate("iou_threshold", iou_threshold)
        self.max_detections = check_positive_int("max_detections", max_detections)
        self.pre_nms = check_positive_int("pre_nms", pre_nms)
        self.min_level = check_positive_int("min_level", min_level)
        self.roi_levels = check_positive_int("roi_levels", roi_levels)
        self.mask_roi_size = check_positive_int("mask_roi_size", mask_roi_size)
        self.train_sampling_terms = check_positive_int("train_sampling_terms", train_sampling_terms)
        self.stage_iou_thresholds = _check_stage_values(
            "stage_iou_thresholds", stage_iou_thresholds, stages, _fraction
        )
        self.stage_loss_weights = _check_stage_values(
            "stage_loss_weights", stage_loss_weights, stages, _weight
        )
        self.num_samples = check_positive_int("num_samples", num_samples)
        self.positive_fraction = _fraction("positive_fraction", positive_fraction)
        self.match_low_quality = check_bool("match_low_quality", match_low_quality)
        self.box_loss = check_choice("box_loss", box_loss, BOX_LOSSES)
        self.box_loss_weight = _weight("box_loss_weight", box_loss_weight)

    @property
    def num_stages(self) -> int:
        """The cascade's stages (1: Mask R-CNN)."""
        return len(self.stage_stds)

    @property
    def mask_size(self) -> int:
        """The side of the predicted masks (28)."""
        return 2 * self.mask_roi_size

    def build(self, levels_shape, proposals_shape=None, images_shape=None):
        shapes = _check_levels("CascadeRoIHead", levels_shape)
        if len(shapes) < self.roi_levels:
            raise ValueError(
                f"CascadeRoIHead pools from {self.roi_levels} levels (`roi_levels`). Received: "
                f"levels_shape={levels_shape!r}"
            )
        shapes = shapes[: self.roi_levels]
        channels = shapes[0][-1]
        roi_size = self.bbox_head.get("roi_size", 7)
        self.bbox_roi_align = RoIAlign(
            roi_size,
            min_level=self.min_level,
            train_sampling_terms=self.train_sampling_terms,
            dtype=self.dtype_policy,
            name="bbox_roi_align",
        )
        self.bbox_roi_align.build(shapes, (None, None, 4))
        self.bbox_heads = []
        for s in range(self.num_stages):
            head = BBoxHead(
                self.num_classes, **self.bbox_head, dtype=self.dtype_policy, name=f"bbox_head_{s}"
            )
            head.build((None, None, roi_size, roi_size, channels))
            self.bbox_heads.append(head)
        self.mask_heads = []
        if self.with_mask:
            self.mask_roi_align = RoIAlign(
                self.mask_roi_size,
                min_level=self.min_level,
                train_sampling_terms=self.train_sampling_terms,
                dtype=self.dtype_policy,
                name="mask_roi_align",
            )
            self.mask_roi_align.build(shapes, (None, None, 4))
            size = self.mask_roi_size
            for s in range(self.num_stages):
                head = MaskHead(
                    self.num_classes,
                    **self.mask_head,
                    dtype=self.dtype_policy,
                    name=f"mask_head_{s}",
                )
                head.build((None, None, size, size, channels))
                self.mask_heads.append(head)

    def stage_outputs(self, levels, rois, stage: int, training=None) -> dict:
        """Stage `stage`'s box head on `rois`: {"logits": (B, N, K + 1), "deltas": (B, N, K, 4)}.

        Args:
            levels: the pyramid maps, P2 first (those past `roi_levels` unused).
            rois: (B, N, 4) "xyxy" RoIs.
            stage: the stage index.
            training: whether BatchNorm uses batch statistics.
        """
        features = self.bbox_roi_align(list(levels)[: self.roi_levels], rois, training=training)
        return self.bbox_heads[stage](features, training=training)

    def mask_logits(self, levels, rois, stage: int, training=None):
        """Stage `stage`'s mask head on `rois`: (B, N, M, M, K) float32 mask logits."""
        features = self.mask_roi_align(list(levels)[: self.roi_levels], rois, training=training)
        return self.mask_heads[stage](features)

    def regress_by_class(self, rois, labels, deltas, stage: int, images):
        """(B, N, 4) the RoIs regressed by stage `stage`'s deltas of their `labels` (B, N)."""
        return decode_rois(rois, class_deltas(deltas, labels), self.stage_stds[stage], images)

    def call(self, levels, proposals, images, training=None):
        rois = ops.cast(proposals["boxes"], "float32")
        count = rois.shape[1]
        present = (
            ops.arange(ops.shape(rois)[1])[None, :]
            < ops.cast(proposals["num_proposals"], "int32")[:, None]
        )
        logits = 0.0
        for s in range(self.num_stages):
            outputs = self.stage_outputs(levels, rois, s, training)
            logits = logits + outputs["logits"]
            if s < self.num_stages - 1:
                # The best class by top-k, not argmax: TensorFlow traces keras.ops.argmax with a
                # sign-bit test (Bitcast, BitwiseAnd) that TFLite and tf2onnx cannot convert.
                labels = ops.top_k(outputs["logits"][..., :-1], 1)[1][..., 0]
                rois = self.regress_by_class(rois, labels, outputs["deltas"], s, images)
        scores = ops.softmax(logits / self.num_stages, axis=-1)[..., :-1]
        scores = scores * ops.cast(present, "float32")[..., None]
        batch = ops.shape(rois)[0]
        candidates = self.pre_nms if count is None else min(self.pre_nms, count * self.num_classes)
        scores, index = ops.top_k(ops.reshape(scores, (batch, -1)), candidates)
        roi_index = index // self.num_classes
        classes = index - roi_index * self.num_classes
        picked_rois = ops.take_along_axis(rois, roi_index[..., None], axis=1)
        picked = ops.take_along_axis(outputs["deltas"], roi_index[..., None, None], axis=1)
        boxes = decode_rois(picked_rois, class_deltas(picked, classes), self.stage_stds[-1], images)
        out_boxes, out_scores, order, kept = suppress(
            boxes,
            scores,
            scores > self.score_threshold,
            self.iou_threshold,
            self.max_detections,
            groups=classes,
        )
        out_classes = ops.take_along_axis(ops.cast(classes, "int32"), order, axis=1)
        result = {
            "boxes": out_boxes,
            "scores": out_scores,
            "classes": ops.where(kept > 0, out_classes, -1),
            "num_detections": ops.cast(ops.sum(kept, axis=1), "int32"),
        }
        if self.with_mask:
            result["masks"] = self.detection_masks(levels, out_boxes, out_classes, kept, training)
        return result

    def detection_masks(self, levels, boxes, classes, kept, training=None):
        """(B, D, M, M) mask probabilities of detections: every stage's sigmoid, averaged.

        Args:
            levels: the pyramid maps, P2 first.
            boxes: (B, D, 4) detected boxes.
            classes: (B, D) their int classes (any value where not kept).
            kept: (B, D) 1 for a detection, 0 for padding (its mask is 0).
            training: whether BatchNorm uses batch statistics.
        """
        probabilities = 0.0
        for s in range(self.num_stages):
            probabilities = probabilities + ops.sigmoid(
                self.mask_logits(levels, boxes, s, training)
            )
        probabilities = probabilities / self.num_stages
        index = ops.maximum(ops.cast(classes, "int32"), 0)[:, :, None, None, None]
        masks = ops.take_along_axis(probabilities, index, axis=-1)[..., 0]
        return masks * ops.cast(kept, "float32")[:, :, None, None]

    def compute_output_shape(self, levels_shape, proposals_shape=None, images_shape=None):
        batch = _check_levels("CascadeRoIHead", levels_shape)[0][0]
        shape = (batch, self.max_detections)
        shapes = {
            "boxes": (*shape, 4),
            "scores": shape,
            "classes": shape,
            "num_detections": (batch,),
        }
        if self.with_mask:
            shapes["masks"] = (*shape, self.mask_size, self.mask_size)
        return shapes

    def compute_output_spec(self, levels, proposals, images, training=None):
        shapes = self.compute_output_shape([tuple(level.shape) for level in levels])
        return {
            key: keras.KerasTensor(shape, "int32" if key in INT_OUTPUTS else "float32")
            for key, shape in shapes.items()
        }

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "stage_stds": [list(stds) for stds in self.stage_stds],
            "bbox_head": dict(self.bbox_head),
            "mask_head": dict(self.mask_head),
            "with_mask": self.with_mask,
            "score_threshold": self.score_threshold,
            "iou_threshold": self.iou_threshold,
            "max_detections": self.max_detections,
            "pre_nms": self.pre_nms,
            "min_level": self.min_level,
            "roi_levels": self.roi_levels,
            "mask_roi_size": self.mask_roi_size,
            "train_sampling_terms": self.train_sampling_terms,
            "stage_iou_thresholds": list(self.stage_iou_thresholds),
            "stage_loss_weights": list(self.stage_loss_weights),
            "num_samples": self.num_samples,
            "positive_fraction": self.positive_fraction,
            "match_low_quality": self.match_low_quality,
            "box_loss": self.box_loss,
            "box_loss_weight": self.box_loss_weight,
        }
