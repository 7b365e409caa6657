"""One-stage detectors: RetinaNet on any keras_fourier backbone, with an FPN or HorNet's HorFPN.

The model, layer by layer (names are stable):

* ``images``: (B, H, W, 3) 0-255 RGB; H and W multiples of the backbone's
  stride (32), or None for any such size;
* ``preprocessing``: ImageNet's normalisation (mmdetection's
  ``img_norm_cfg``), then the backbone's own layers and its pyramid
  ``norm0``-``norm3`` at strides 4-32
  (:func:`keras_fourier.models.pyramid.pyramid_maps`);
* ``neck``: a :class:`~keras_fourier.layers.DetectionFPN` from the stride-8,
  16 and 32 maps to P3-P7 (strides 8-128), its output convolutions plain
  (``neck="fpn"``) or HorNet's gnConv blocks (``"horfpn_7x7"``,
  ``"horfpn_gf"``): :data:`NECKS`;
* ``head``: the :class:`~keras_fourier.layers.RetinaHead` shared by every
  level, and ``anchors``: :class:`~keras_fourier.layers.AnchorBoxes`, 9
  per location;
* ``raw``: the float32 (B, A, 8 + C) output: per anchor its box, the box
  deltas and the C class logits (:data:`keras_fourier.layers.detection.RAW_COLUMNS`).

Train it with :class:`~keras_fourier.detection.RetinaNetLoss` on
ground-truth rows (``model.fit(images, targets)``); :func:`detector` adds
the decoder (per-class NMS), giving a model from images to boxes, scores,
classes and ``num_detections``.
"""

from __future__ import annotations

import os

import keras

from keras_fourier.layers import AnchorBoxes, DetectionDecoder, DetectionFPN, RetinaHead
from keras_fourier.layers.detection import RAW_BOX_COLUMNS
from keras_fourier.models.pyramid import backbone_key, image_inputs, pyramid_maps
from keras_fourier.models.vision import BUILT_SIZE
from keras_fourier.segmentation import ade20k
from keras_fourier.segmentation.models import HORNET_SEGMENTATION_SIZE
from keras_fourier.validation import check_positive_int
from keras_fourier.weights.saved import load_saved_weights

# The neck options of a detector: the `block` of its DetectionFPN's output convolutions.
NECKS: dict[str, str | None] = {"fpn": None, "horfpn_7x7": "gnconv_7x7", "horfpn_gf": "gnconv_gf"}
# RetinaNet's pyramid: P3 (stride 8) to P7 (stride 128).
MIN_LEVEL = 3
NUM_LEVELS = 5
# COCO's 80 classes, the papers' detection benchmark.
COCO_CLASSES = 80


def is_detector(model: keras.Model) -> bool:
    """Whether `model` is a one-stage detector: images to raw (B, A, 8 + C) rows, with anchors.

    Args:
        model: a Keras model.

    Returns:
        True for one (B, H, W, 3) input, one rank-3 output of more than
        ``RAW_BOX_COLUMNS`` (8) columns, and an
        :class:`~keras_fourier.layers.AnchorBoxes` layer (the models of
        :func:`keras_fourier.detection.RetinaNet`).

    Example:
        >>> is_detector(keras_fourier.detection.RetinaNet(
        ...     "gfnet_tiny", num_classes=3, input_shape=(64, 64, 3)))
        True
    """
    if isinstance(model.output, dict) or len(model.outputs) != 1 or len(model.inputs) != 1:
        return False
    image, output = tuple(model.inputs[0].shape), tuple(model.outputs[0].shape)
    return (
        len(image) == 4
        and image[-1] == 3
        and len(output) == 3
        and output[-1] is not None
        and output[-1] > RAW_BOX_COLUMNS
        and any(isinstance(layer, AnchorBoxes) for layer in model.layers)
    )


def _check_weights(weights) -> None:
    if weights is None:
        return
    if (
        not isinstance(weights, (str, os.PathLike))
        or not os.fspath(weights).endswith((".weights.h5", ".keras"))
        or not os.path.isfile(weights)
    ):
        raise ValueError(
            "`weights` must be None or an existing '.weights.h5' or '.keras' file saved by "
            f"keras_fourier. Received: weights={weights!r}"
        )


def _built_size(backbone) -> int:
    """The image size a detector's named backbone builds its any-size filters for.

    HorNet's official dense backbones (detection as segmentation) keep global
    filters of a 384-pixel image (24 x 13 and 12 x 7), resized to each map at
    run time; a detector of any input size (the default) keeps them so. A
    detector of a fixed size builds them at its maps' size instead.
    """
    if isinstance(backbone, str) and backbone_key(backbone) in ade20k.RELEASES:
        return HORNET_SEGMENTATION_SIZE
    return BUILT_SIZE


def RetinaNet(
    backbone: str | keras.Model = "hornet_t_gf",
    num_classes: int = COCO_CLASSES,
    *,
    neck: str = "fpn",
    weights: str | os.PathLike | None = None,
    input_shape: tuple = (None, None, 3),
    channels: int = 256,
    stacked_convs: int = 4,
    anchor_scale: float = 4.0,
    include_preprocessing: bool = True,
    drop_path_rate: float | None = None,
    fft_impl: str = "auto",
    name: str | None = None,
) -> keras.Model:
    """RetinaNet (AFBO's COCO detector) on a keras_fourier backbone.

    Args:
        backbone: a vision model name ("hornet_t_gf", "gfnet_h_ti",
            "gfnet_ti", a `build_model` preset such as "gfnet_tiny"), built
            without its head, or a keras_fourier vision model (its stage
            outputs are used; its weights are shared). Default "hornet_t_gf".
        num_classes: object classes (no background class). Default 80 (COCO).
        neck: "fpn" (default, mmdetection's FPN), "horfpn_7x7" or
            "horfpn_gf" (HorNet's HorFPN: a gnConv block after each top-down
            fusion): a key of :data:`NECKS`.
        weights: None (default, random initialisation) or a `.weights.h5`
            or `.keras` file saved by keras_fourier for the same
            architecture (all or nothing: the model is not returned when it
            does not fit).
        input_shape: (height, width, 3), multiples of the backbone's stride
            (32), or None for any such size. Default (None, None, 3).
        channels: the neck's and head's width. Default 256.
        stacked_convs: convolutions per head subnet. Default 4.
        anchor_scale: the anchors' base size in strides (mmdetection's
            ``octave_base_scale``): 4 (default) gives 32-813 pixel anchors
            from P3 to P7, for COCO-size images; smaller objects take smaller.
        include_preprocessing: whether the model normalises 0-255 RGB pixels
            with ImageNet's mean and std itself. Default True.
        drop_path_rate: the backbone's stochastic depth. Default None: its own.
        fft_impl: "auto" (default), "fft" or "matmul" for the Fourier layers.
        name: model name. Default "retinanet_<backbone>".

    Returns:
        A `keras.Model` from (B, H, W, 3) images to the raw (B, A, 8 +
        num_classes) float32 output (see the module docstring); wrap it with
        :func:`detector` for boxes.

    Raises:
        ValueError: an unknown backbone or neck, an input size the stride
            does not divide, weights that do not fit.

    Example:
        >>> model = RetinaNet("hornet_t_7x7", num_classes=3, input_shape=(64, 64, 3))
        >>> model.output_shape
        (None, 774, 11)

    Reference:
        Lin et al., "Focal Loss for Dense Object Detection", ICCV 2017;
        Rao et al., "HorNet", NeurIPS 2022 (HorFPN).
    """
    num_classes = check_positive_int("num_classes", num_classes)
    if neck not in NECKS:
        raise ValueError(f"`neck` must be one of {sorted(NECKS)}. Received: neck={neck!r}")
    channels = check_positive_int("channels", channels)
    _check_weights(weights)
    inputs, x = image_inputs(backbone, input_shape, include_preprocessing)
    maps = pyramid_maps(
        backbone, x, tuple(input_shape), drop_path_rate, fft_impl, _built_size(backbone)
    )
    levels = DetectionFPN(
        channels,
        num_outputs=NUM_LEVELS,
        start_level=1,
        add_extra_convs="on_input",
        block=NECKS[neck],
        name="neck",
    )(maps)
    head = RetinaHead(num_classes, channels=channels, stacked_convs=stacked_convs, name="head")
    anchors = AnchorBoxes(min_level=MIN_LEVEL, anchor_scale=anchor_scale, name="anchors")(levels)
    predictions = head(levels)
    raw = keras.layers.Concatenate(axis=-1, dtype="float32", name="raw")(
        [
            anchors,
            keras.layers.Activation("linear", dtype="float32", name="predictions")(predictions),
        ]
    )
    backbone_name = backbone.name if isinstance(backbone, keras.Model) else backbone
    model = keras.Model(inputs, raw, name=name or f"retinanet_{backbone_name}")
    if weights is not None:
        load_saved_weights(model, os.fspath(weights))
    return model


def detector(
    model: keras.Model,
    *,
    score_threshold: float = 0.05,
    iou_threshold: float = 0.5,
    max_detections: int = 100,
    pre_nms: int = 1000,
) -> keras.Model:
    """A model from images to detections: `model`'s raw output through a :class:`DetectionDecoder`.

    Args:
        model: a one-stage detector with the raw (B, A, 8 + C) output
            (:func:`RetinaNet`); its weights are shared, not copied.
        score_threshold: the lowest score kept (exclusive). Default 0.05.
        iou_threshold: the per-class NMS IoU. Default 0.5.
        max_detections: detections per image. Default 100.
        pre_nms: candidates per image before NMS. Default 1000.

    Returns:
        A `keras.Model` from (B, H, W, 3) images to {"boxes": (B, D, 4)
        "xyxy" pixels of the input, "scores": (B, D), "classes": (B, D)
        int32 (-1 past the detections), "num_detections": (B,) int32}.

    Example:
        >>> model = detector(RetinaNet("hornet_t_7x7", num_classes=3, input_shape=(64, 64, 3)))
        >>> sorted(model.output)
        ['boxes', 'classes', 'num_detections', 'scores']
    """
    decoder = DetectionDecoder(
        score_threshold=score_threshold,
        iou_threshold=iou_threshold,
        max_detections=max_detections,
        pre_nms=pre_nms,
        min_level=MIN_LEVEL,
        name="decoder",
    )
    outputs = decoder(model.output, model.input)
    return keras.Model(model.input, outputs, name=f"{model.name}_detector")
