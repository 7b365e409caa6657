"""Two-stage detectors: Mask R-CNN and Cascade Mask R-CNN on any keras_fourier backbone.

mmdetection 2.x's models as HorNet's COCO configs use them, layer by layer
(names are stable; the checkpoint converter maps mmdetection's keys to them):

* ``images``: (B, H, W, 3) 0-255 RGB of any height and width (None for any
  size); ``preprocessing``: ImageNet's normalisation; ``pad_to_stride``: a
  :class:`~keras_fourier.layers.PadToMultiple` padding it bottom and right
  with zeros to multiples of 32, as mmdetection's ``Pad(size_divisor=32)``
  (absent where the fixed size is already such a multiple; the proposals,
  the detections and the training's border rule read the unpadded
  ``images``), then the backbone's layers, built for the padded size, and
  its pyramid ``norm0``-``norm3`` at strides 4-32
  (:func:`keras_fourier.models.pyramid.pyramid_maps`, filters built for
  224-pixel images as HorNet's detection configs);
* ``neck``: a :class:`~keras_fourier.layers.DetectionFPN` of 256 channels,
  P2-P6 (strides 4-64; P6 by max pooling);
* ``rpn_head`` (:class:`~keras_fourier.layers.RPNHead`) and ``rpn_anchors``
  (:class:`~keras_fourier.layers.AnchorBoxes`: scale 8, ratios 0.5, 1, 2),
  concatenated as ``rpn``: the float32 raw (B, A, 9) output;
* ``proposals``: :class:`~keras_fourier.layers.RPNProposals` (1000 per
  level before NMS, IoU 0.7, 1000 kept);
* ``roi_head``: :class:`~keras_fourier.layers.CascadeRoIHead` (one stage for
  Mask R-CNN, three for the cascade), giving the detections.

The model is a :class:`TwoStageDetector`: from images to {"boxes",
"scores", "classes", "num_detections", "masks"}; called with
``training=True`` it returns the trunk, {"levels": [P2..P6], "rpn": raw},
from which the training loss runs the proposals and the RoI heads with the
targets. :func:`paste_masks` pastes the box-frame masks into the image.
"""

from __future__ import annotations

import os

import keras
from keras import ops

from keras_fourier.detection.checkpoints import (
    built_size,
    check_weights_argument,
    load_detection_weights,
)
from keras_fourier.detection.models import COCO_CLASSES, NECKS
from keras_fourier.detection.two_stage_losses import loss_part_names, two_stage_losses
from keras_fourier.layers import AnchorBoxes, DetectionFPN, RPNHead, RPNProposals
from keras_fourier.layers.roi_heads import CASCADE_STDS, CascadeRoIHead
from keras_fourier.models.pyramid import image_inputs, pyramid_maps
from keras_fourier.validation import (
    check_choice,
    check_layer_arguments,
    check_positive_int,
    check_rate,
)

# The pyramid: P2 (stride 4) to P6 (stride 64); RoIs are pooled from P2-P5.
MIN_LEVEL = 2
NUM_LEVELS = 5

# The architectures, as mmdetection 2.x's configs: HorNet's Cascade Mask R-CNN
# (configs/_base_/models/cascade_mask_rcnn_hornet_fpn.py with ConvFCBBoxHead) and
# Mask R-CNN (configs/_base_/models/mask_rcnn_r50_fpn.py). "roi_head" are
# CascadeRoIHead arguments, "rpn" RPNProposals arguments (training configuration).
TWO_STAGE_ARCHS: dict[str, dict] = {
    "mask_rcnn": {
        "roi_head": {
            "stage_stds": (CASCADE_STDS[0],),
            "bbox_head": {"num_shared_convs": 0, "num_shared_fcs": 2, "norm": None},
            "stage_iou_thresholds": (0.5,),
            "stage_loss_weights": (1.0,),
            "match_low_quality": True,
            "box_loss": "l1",
            "box_loss_weight": 1.0,
        },
        "rpn": {"train_max_proposals": 1000, "box_loss": "l1", "allowed_border": -1.0},
    },
    "cascade_mask_rcnn": {
        "roi_head": {
            "stage_stds": CASCADE_STDS,
            "bbox_head": {"num_shared_convs": 4, "num_shared_fcs": 1, "norm": "batch_norm"},
            "stage_iou_thresholds": (0.5, 0.6, 0.7),
            "stage_loss_weights": (1.0, 0.5, 0.25),
            "match_low_quality": False,
            "box_loss": "giou",
            "box_loss_weight": 10.0,
        },
        "rpn": {"train_max_proposals": 2000, "box_loss": "smooth_l1", "allowed_border": 0.0},
    },
}
# The outputs of a trunk (training) call.
TRUNK_OUTPUTS = ("levels", "rpn")


@keras.saving.register_keras_serializable(package="keras_fourier")
class TwoStageDetector(keras.Model):
    """A two-stage detector: a functional model from images to detections and masks.

    Built by :func:`MaskRCNN` and :func:`CascadeMaskRCNN` (see the module
    docstring for its layers); saved and loaded as any functional model
    (``.keras``). ``model(images)`` and ``predict`` give the detections;
    ``model(images, training=True)`` gives the trunk's outputs, {"levels":
    [P2..P6], "rpn": (B, A, 9) raw}, which the training loss reads
    (:mod:`keras_fourier.detection.two_stage_losses`).

    Args:
        *args: the functional model's (inputs, outputs).
        **kwargs: `keras.Model` arguments (name, ...).

    Call arguments:
        inputs: (B, H, W, 3) 0-255 RGB images.
        training: True for the trunk's outputs (training); else detections.

    Returns:
        {"boxes": (B, D, 4) "xyxy" input pixels, "scores": (B, D), "classes":
        (B, D) int32 (-1 past the detections), "num_detections": (B,) int32,
        "masks": (B, D, 28, 28) float32 probabilities in each box's frame}.

    Example:
        >>> model = MaskRCNN("gfnet_tiny", num_classes=3, channels=16, fc_channels=32,
        ...                  mask_channels=16, input_shape=(64, 64, 3))
        >>> sorted(model.output)
        ['boxes', 'classes', 'masks', 'num_detections', 'scores']
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        outputs = {
            "levels": self.get_layer("neck").output,
            "rpn": self.get_layer("rpn").output,
        }
        # The trunk, and the detections with the trunk's outputs (an evaluation step's one
        # pass, for its metrics and its loss), share the layers; they are not tracked (their
        # weights are the model's).
        object.__setattr__(self, "_trunk", keras.Model(self.input, outputs, name="trunk"))
        evaluated = {**self.output, **outputs}
        object.__setattr__(self, "_evaluated", keras.Model(self.input, evaluated, name="evaluated"))
        object.__setattr__(self, "_in_test_step", False)
        # The training loss's random sampling of anchors and RoIs, and the mean of each loss
        # part (rpn_cls, s0_box, ...) that fit and evaluate log.
        self.sampling_seed = keras.random.SeedGenerator(name="sampling_seed")
        head = self.roi_head
        self.loss_parts = [
            keras.metrics.Mean(name=name)
            for name in loss_part_names(head.num_stages, head.with_mask)
        ]

    @property
    def roi_head(self) -> CascadeRoIHead:
        """The :class:`~keras_fourier.layers.CascadeRoIHead` (``roi_head``)."""
        return self.get_layer("roi_head")

    @property
    def proposals(self) -> RPNProposals:
        """The :class:`~keras_fourier.layers.RPNProposals` (``proposals``)."""
        return self.get_layer("proposals")

    def call(self, inputs, training=None, mask=None):
        if training:
            return self._trunk(inputs, training=True)
        if self._in_test_step:
            return self._evaluated(inputs, training=False)
        return super().call(inputs, training=training, mask=mask)

    def test_step(self, *args, **kwargs):
        """Keras's evaluation step, with one pass: the detections and the trunk's outputs.

        The metrics read the detections and the loss the trunk's outputs of
        the same call (the flag is read while the step is traced or run, on
        every backend), so the trunk does not run a second time for the loss.
        """
        object.__setattr__(self, "_in_test_step", True)
        try:
            return super().test_step(*args, **kwargs)
        finally:
            object.__setattr__(self, "_in_test_step", False)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The training loss: the sum of the parts of :func:`two_stage_losses`.

        Args:
            x: the (B, H, W, 3) images.
            y: {"boxes": (B, G, 8) ground-truth rows (padding rows of class
                -1), optionally "masks": (B, G, 56, 56) box-local instance
                masks}; a bare (B, G, 8) array is taken as "boxes".
            y_pred: the trunk's outputs ({"levels", "rpn"}: a training call,
                or an evaluation step's, beside its detections); detections
                alone run the trunk on `x` again.
            sample_weight: not supported (None).
            training: whether the call is a training step.

        Returns:
            The float32 scalar loss; its parts update the `loss_parts` means.
        """
        if sample_weight is not None:
            raise ValueError(
                "TwoStageDetector's loss takes no `sample_weight`. Received: "
                f"sample_weight={sample_weight!r}"
            )
        if not (isinstance(y_pred, dict) and set(TRUNK_OUTPUTS) <= set(y_pred)):
            y_pred = self._trunk(x, training=False)
        if not isinstance(y, dict):
            y = {"boxes": y}
        parts = two_stage_losses(
            self.proposals,
            self.roi_head,
            y_pred["levels"],
            y_pred["rpn"],
            x,
            y,
            self.sampling_seed,
        )
        for tracker in self.loss_parts:
            if tracker.name in parts:
                tracker.update_state(parts[tracker.name])
        return ops.sum(ops.stack(list(parts.values())))

    def compile(self, *args, metrics=None, **kwargs):
        """`keras.Model.compile`; `metrics` take the whole targets and detections.

        Keras would hand each metric one output matched to one target by key;
        a detection metric needs all of them (boxes, scores, classes, masks
        against the target rows and masks), so the metrics are kept apart and
        updated by :meth:`compute_metrics` with the two dictionaries.
        """
        super().compile(*args, **kwargs)
        self._detection_metrics = list(metrics or [])

    @property
    def metrics(self):
        tracked = super().metrics
        known = {id(metric) for metric in tracked}
        extra = [m for m in getattr(self, "_detection_metrics", []) if id(m) not in known]
        return [*tracked, *extra]

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        """Updates the detection metrics on (targets, detections); training batches skip."""
        if isinstance(y_pred, dict) and "boxes" in y_pred:
            for metric in getattr(self, "_detection_metrics", []):
                metric.update_state(y, y_pred)
        return self.get_metrics_result()


def two_stage_detector(
    arch: str,
    backbone: str | keras.Model = "hornet_t_gf",
    num_classes: int = COCO_CLASSES,
    *,
    neck: str = "fpn",
    weights: str | os.PathLike | None = None,
    input_shape: tuple = (None, None, 3),
    channels: int = 256,
    fc_channels: int = 1024,
    mask_channels: int = 256,
    max_proposals: int = 1000,
    max_detections: int = 100,
    proposals: dict | None = None,
    roi_head: dict | None = None,
    include_preprocessing: bool = True,
    drop_path_rate: float | None = None,
    fft_impl: str = "auto",
    name: str | None = None,
) -> TwoStageDetector:
    """A two-stage detector of the architecture row `arch` (:data:`TWO_STAGE_ARCHS`).

    Args:
        arch: "mask_rcnn" or "cascade_mask_rcnn".
        backbone: a vision model name ("hornet_t_gf", "gfnet_h_ti", a
            `build_model` preset such as "gfnet_tiny"), built without its
            head, or a keras_fourier vision model (its weights are shared).
            Default "hornet_t_gf".
        num_classes: object classes (no background). Default 80 (COCO).
        neck: "fpn" (default, mmdetection's FPN) or HorNet's "horfpn_7x7",
            "horfpn_gf" (:data:`~keras_fourier.detection.NECKS`).
        weights: None (default, random initialisation), "coco" (the
            official HorNet Cascade Mask R-CNN 3x checkpoint of the
            backbone, :data:`~keras_fourier.detection.coco.RELEASES`:
            downloaded once, converted once; needs ``neck="fpn"``), an
            mmdetection `.pth` checkpoint (converted by
            :func:`~keras_fourier.detection.checkpoints.mmdet_key_map`), or a
            `.weights.h5` or `.keras` file saved by keras_fourier for the
            same architecture; all or nothing. With another `num_classes`
            than the checkpoint's (80 for "coco"), fine-tuning: each stage's
            ``fc_cls`` and ``fc_reg`` and each mask head's ``conv_logits``
            keep their fresh initialisation, everything else loads.
        input_shape: (height, width, 3), any height and width (the model
            pads them to multiples of 32), or None for any size. Default
            (None, None, 3).
        channels: the width of the neck, the RPN and the box heads' convs.
            Default 256.
        fc_channels: the box heads' dense width. Default 1024.
        mask_channels: the mask heads' width. Default 256.
        max_proposals: the RPN's candidates per level before NMS and its
            proposals per image at inference. Default 1000 (mmdetection's
            test configuration; fewer are faster).
        max_detections: detections per image. Default 100.
        proposals: :class:`~keras_fourier.layers.RPNProposals` arguments
            over the row's and the ones above (e.g. its training settings
            ``train_pre_nms``, ``num_samples``), kept in the model's config.
            Default None.
        roi_head: :class:`~keras_fourier.layers.CascadeRoIHead` arguments
            over the row's (e.g. ``num_samples``, ``train_sampling_terms``,
            ``pre_nms``). Default None.
        include_preprocessing: whether the model normalises 0-255 RGB pixels
            with ImageNet's mean and std itself. Default True.
        drop_path_rate: the backbone's stochastic depth. Default None: its own.
        fft_impl: "auto" (default), "fft" or "matmul" for the Fourier layers.
        name: model name. Default "<arch>_<backbone>".

    Returns:
        A :class:`TwoStageDetector`.

    Raises:
        ValueError: an unknown architecture, backbone or neck, an input
            shape that is not (height, width, 3), weights that do not fit.
    """
    row = TWO_STAGE_ARCHS[check_choice("arch", arch, tuple(TWO_STAGE_ARCHS))]
    num_classes = check_positive_int("num_classes", num_classes)
    check_choice("neck", neck, tuple(NECKS))
    channels = check_positive_int("channels", channels)
    fc_channels = check_positive_int("fc_channels", fc_channels)
    mask_channels = check_positive_int("mask_channels", mask_channels)
    max_proposals = check_positive_int("max_proposals", max_proposals)
    max_detections = check_positive_int("max_detections", max_detections)
    rpn_fixed = {"min_level": MIN_LEVEL, "num_levels": NUM_LEVELS}
    rpn_arguments = {"pre_nms": max_proposals, "max_proposals": max_proposals, **row["rpn"]}
    proposals = check_layer_arguments(
        "proposals", proposals, RPNProposals, rpn_fixed, rpn_arguments
    )
    head_fixed = {
        "num_classes": num_classes,
        "min_level": MIN_LEVEL,
        "stage_stds": row["roi_head"]["stage_stds"],
    }
    head_arguments = {
        **row["roi_head"],
        "bbox_head": {
            **row["roi_head"]["bbox_head"],
            "conv_channels": channels,
            "fc_channels": fc_channels,
        },
        "mask_head": {"channels": mask_channels},
        "max_detections": max_detections,
    }
    roi_head = check_layer_arguments(
        "roi_head", roi_head, CascadeRoIHead, head_fixed, head_arguments
    )
    check_weights_argument(weights, arch, backbone, neck)
    inputs, x = image_inputs(backbone, input_shape, include_preprocessing, pad=True)
    maps = pyramid_maps(
        backbone, x, tuple(x.shape[1:]), drop_path_rate, fft_impl, built_size(backbone)
    )
    levels = DetectionFPN(
        channels,
        num_outputs=NUM_LEVELS,
        start_level=0,
        add_extra_convs=None,
        block=NECKS[neck],
        name="neck",
    )(maps)
    anchors = AnchorBoxes(
        min_level=MIN_LEVEL, anchor_scale=8, scales_per_octave=1, name="rpn_anchors"
    )(levels)
    predictions = RPNHead(channels=channels, name="rpn_head")(levels)
    rpn = keras.layers.Concatenate(axis=-1, dtype="float32", name="rpn")(
        [
            anchors,
            keras.layers.Activation("linear", dtype="float32", name="rpn_predictions")(predictions),
        ]
    )
    proposed = RPNProposals(**{**rpn_arguments, **proposals, **rpn_fixed}, name="proposals")(
        rpn, inputs
    )
    detections = CascadeRoIHead(**{**head_arguments, **roi_head, **head_fixed}, name="roi_head")(
        levels, proposed, inputs
    )
    backbone_name = backbone.name if isinstance(backbone, keras.Model) else backbone
    model = TwoStageDetector(inputs, detections, name=name or f"{arch}_{backbone_name}")
    if weights is not None:
        load_detection_weights(model, weights, backbone)
    return model


def MaskRCNN(
    backbone: str | keras.Model = "hornet_t_gf", num_classes: int = COCO_CLASSES, **kwargs
) -> TwoStageDetector:
    """Mask R-CNN (mmdetection 2.x's, AFBO's COCO instance segmenter) on a keras_fourier backbone.

    FPN, RPN, one ``Shared2FCBBoxHead`` stage (2 fcs of 1024, class-specific
    deltas with stds 0.1/0.2) and an ``FCNMaskHead``; the test configuration
    of mmdetection (RPN 1000 per level, IoU 0.7, 1000 kept; score 0.05, NMS
    0.5, 100 per image).

    Args:
        backbone: as :func:`two_stage_detector`. Default "hornet_t_gf".
        num_classes: object classes (no background). Default 80 (COCO).
        **kwargs: the keyword arguments of :func:`two_stage_detector` (neck,
            weights, input_shape, channels, fc_channels, mask_channels,
            max_proposals, max_detections, proposals, roi_head,
            include_preprocessing, drop_path_rate, fft_impl, name).

    Returns:
        A :class:`TwoStageDetector` from images to detections and masks.

    Example:
        >>> model = MaskRCNN("gfnet_tiny", num_classes=3, channels=16, fc_channels=32,
        ...                  mask_channels=16, input_shape=(64, 64, 3))
        >>> model.output["masks"].shape
        (None, 100, 28, 28)

    Reference:
        He et al., "Mask R-CNN", ICCV 2017; mmdetection 2.x
        ``mask_rcnn_r50_fpn.py`` (OpenMMLab, Apache-2.0).
    """
    return two_stage_detector("mask_rcnn", backbone, num_classes, **kwargs)


def CascadeMaskRCNN(
    backbone: str | keras.Model = "hornet_t_gf", num_classes: int = COCO_CLASSES, **kwargs
) -> TwoStageDetector:
    """Cascade Mask R-CNN as HorNet's COCO detectors, on a keras_fourier backbone.

    FPN, RPN, three ``ConvFCBBoxHead`` stages (4 convs with BatchNorm + 1 fc
    of 1024; IoU 0.5/0.6/0.7, stds 0.1/0.2, 0.05/0.1, 0.033/0.067; GIoU
    loss x10) with one ``FCNMaskHead`` each; scores averaged over the
    stages, masks too.

    Args:
        backbone: the backbone, as :func:`MaskRCNN`'s. Default "hornet_t_gf".
        num_classes: classes without the background. Default 80.
        **kwargs: as :func:`MaskRCNN`'s (``weights="coco"``: the official
            HorNet checkpoint of the backbone).

    Returns:
        The :class:`TwoStageDetector`.

    Example:
        >>> model = CascadeMaskRCNN("gfnet_tiny", num_classes=3, channels=16,
        ...                         fc_channels=32, mask_channels=16, input_shape=(64, 64, 3))
        >>> model.get_layer("roi_head").num_stages
        3

    Reference:
        Cai and Vasconcelos, "Cascade R-CNN", CVPR 2018; Rao et al.,
        "HorNet", NeurIPS 2022 (``object_detection/configs/hornet``).
    """
    return two_stage_detector("cascade_mask_rcnn", backbone, num_classes, **kwargs)


def paste_masks(masks, boxes, height: int, width: int, threshold: float | None = 0.5):
    """Box-frame masks pasted into the image, as mmdetection's ``_do_paste_mask``.

    Each (M, M) mask covers its box; an image pixel (centre ``x + 0.5``) reads
    the mask bilinearly at ``(x + 0.5 - x1) / (x2 - x1) * M - 0.5`` (and so
    for y), zero outside the mask (PyTorch's ``grid_sample``,
    ``align_corners=False``, zero padding); computed as two matrix products
    per mask. Boxes of no area give empty masks.

    Args:
        masks: (B, D, M, M) probabilities (a :class:`TwoStageDetector`'s
            "masks").
        boxes: (B, D, 4) "xyxy" boxes in the image's pixels.
        height: the image's height: an int, or a scalar int tensor in a
            traced function (an export's sent images).
        width: the image's width, likewise.
        threshold: masks are ``probability >= threshold`` (mmdet's
            ``mask_thr_binary``). Default 0.5; None: the probabilities.

    Returns:
        (B, D, height, width): bool masks, or float32 probabilities when
        `threshold` is None.

    Example:
        >>> masks = keras.ops.ones((1, 1, 28, 28))
        >>> boxes = keras.ops.convert_to_tensor([[[2.0, 2.0, 6.0, 4.0]]])
        >>> int(keras.ops.convert_to_numpy(paste_masks(masks, boxes, 6, 8))[0, 0].sum())
        8
    """
    if not ops.is_tensor(height):
        height = check_positive_int("height", height)
    if not ops.is_tensor(width):
        width = check_positive_int("width", width)
    if threshold is not None:
        threshold = check_rate("threshold", threshold)
    masks = ops.cast(masks, "float32")
    boxes = ops.cast(boxes, "float32")
    size = masks.shape[-1]
    cells = ops.cast(ops.arange(size), "float32")

    def weights(low, high, count):
        """(B, D, count, M) bilinear weights of the mask's cells at each pixel of one axis."""
        extent = high - low
        pixels = ops.cast(ops.arange(count), "float32") + 0.5
        where = (pixels[None, None, :] - low[..., None]) / ops.maximum(extent, 1e-6)[..., None]
        where = where * size - 0.5
        hat = ops.maximum(1.0 - ops.abs(where[..., None] - cells), 0.0)
        return hat * ops.cast(extent > 0, "float32")[..., None, None]

    rows = weights(boxes[..., 1], boxes[..., 3], height)
    cols = weights(boxes[..., 0], boxes[..., 2], width)
    pasted = ops.einsum("bdhm,bdmw->bdhw", rows, ops.einsum("bdmn,bdwn->bdmw", masks, cols))
    if threshold is None:
        return pasted
    return pasted >= threshold
