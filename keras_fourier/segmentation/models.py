"""Semantic segmentation models: a keras_fourier backbone, its feature pyramid, a decode head.

One builder, :func:`build_segmenter`, makes every model from a row of
:data:`HEADS` (UPerNet, Semantic FPN, the SegFormer all-MLP decoder); the
public builders :func:`UPerNet`, :func:`SemanticFPN` and :func:`SegFormer`
are those rows. The model, layer by layer (names are stable: the official
checkpoints map onto them, see :mod:`keras_fourier.segmentation.checkpoints`):

* ``preprocessing``: ADE20K's normalisation of 0-255 RGB pixels
  (:data:`keras_fourier.segmentation.ade20k.MEAN` / ``STD``: the ImageNet
  statistics times 255, as the official configs' ``img_norm_cfg``);
* the backbone's own layers (``stem_conv``, ``stage0_block0_mixer``, ...,
  ``stage{s}_output``), as its classifier names them, without its final
  norm and head;
* ``norm{s}``: a LayerNorm (eps 1e-6) on each stage output, as HorNet's
  segmentation backbone (``norm0``-``norm3``);
* ``pyramid_neck``: for isotropic backbones (GFNet, AFNONet: one map) a
  :class:`~keras_fourier.layers.MultiScaleNeck` to strides 4, 8, 16, 32;
  ``neck``:
  Semantic FPN's :class:`~keras_fourier.layers.FPNNeck`;
* ``decode_head`` and, with ``auxiliary=True``, ``auxiliary_head`` (an
  :class:`~keras_fourier.layers.FCNHead` on the third map, UPerNet's);
* ``resize`` / ``auxiliary_resize``: bilinear (align_corners False) to the
  input's height and width, and ``logits`` / ``auxiliary``: float32 outputs.

Outputs (how to get both for training):

* ``auxiliary=False`` (default): one output, the (B, H, W, num_classes)
  logits at the input's resolution: what ``predict``, evaluation and export
  use;
* ``auxiliary=True``: a dict ``{"logits": ..., "auxiliary": ...}``, both
  (B, H, W, num_classes) logits at the input's resolution; the training loss
  of the official configs is ``CE(logits) + 0.4 * CE(auxiliary)``
  (:data:`AUXILIARY_WEIGHT`), both with ignore index 255. A model trained
  that way gives its inference model, sharing the same weights, with
  :func:`without_auxiliary`.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable
from typing import Any

import keras

from keras_fourier.layers import FCNHead, FPNHead, FPNNeck, SegFormerHead, UPerHead
from keras_fourier.layers.decode_heads import GNCONV_BLOCKS, ResizeToMatch
from keras_fourier.models.pyramid import backbone_key, image_inputs, pyramid_maps
from keras_fourier.models.vision import BUILT_SIZE
from keras_fourier.segmentation import ade20k, checkpoints
from keras_fourier.validation import check_positive_int, check_rate

# The loss weight of the auxiliary head in the official UPerNet configs.
AUXILIARY_WEIGHT = 0.4
# The size the global-local filters of HorNet's segmentation backbones are built for: the
# official configs give stages 3 and 4 filters of 24 x 13 and 12 x 7 (384-pixel maps).
HORNET_SEGMENTATION_SIZE = 384


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """One decode head of :data:`HEADS`.

    Attributes:
        head: the decode-head layer class.
        channels: its default width (that of the reference configs).
        neck: the neck layer applied to the pyramid first, or None.
        neck_channels: the neck's width.
        auxiliary_stage: the pyramid level of the auxiliary FCN head, or
            None where the reference configs train without one.
        auxiliary_channels: the auxiliary head's width.
        blocks: the head's fusion blocks (its ``block`` argument), None first.
        reference: the method the row follows.
    """

    head: type
    channels: int
    neck: type | None = None
    neck_channels: int = 256
    auxiliary_stage: int | None = None
    auxiliary_channels: int = 256
    blocks: tuple = (None,)
    reference: str = ""


HEADS: dict[str, HeadSpec] = {
    "upernet": HeadSpec(
        UPerHead,
        512,
        auxiliary_stage=2,
        blocks=(None, *GNCONV_BLOCKS),
        reference='Xiao et al., "Unified Perceptual Parsing for Scene Understanding", ECCV 2018',
    ),
    "semantic_fpn": HeadSpec(
        FPNHead,
        128,
        neck=FPNNeck,
        reference='Kirillov et al., "Panoptic Feature Pyramid Networks", CVPR 2019',
    ),
    "segformer": HeadSpec(
        SegFormerHead,
        256,
        reference='Xie et al., "SegFormer: Simple and Efficient Design for Semantic '
        'Segmentation with Transformers", NeurIPS 2021',
    ),
}


def _segmentation_backbone(
    backbone: str | keras.Model, x, input_shape: tuple, drop_path_rate: float | None, fft_impl: str
) -> list:
    """The four normalised pyramid maps of `backbone`, HorNet's built as its ADE20K release's."""
    built_size = BUILT_SIZE
    if isinstance(backbone, str):
        release = ade20k.RELEASES.get(backbone_key(backbone))
        if release is not None:
            built_size = HORNET_SEGMENTATION_SIZE
            if drop_path_rate is None:
                drop_path_rate = release.drop_path_rate
    return pyramid_maps(backbone, x, input_shape, drop_path_rate, fft_impl, built_size)


def build_segmenter(
    head: str,
    *,
    backbone: str | keras.Model = "hornet_t_gf",
    num_classes: int = ade20k.NUM_CLASSES,
    weights: str | os.PathLike | None = None,
    input_shape: tuple = (None, None, 3),
    auxiliary: bool = False,
    channels: int | None = None,
    dropout: float = 0.1,
    drop_path_rate: float | None = None,
    include_preprocessing: bool = True,
    fft_impl: str = "auto",
    head_block: str | None = None,
    name: str | None = None,
) -> keras.Model:
    """Builds the segmentation model of row `head` of :data:`HEADS` on a backbone.

    Args:
        head: a key of :data:`HEADS`: "upernet", "semantic_fpn" or "segformer".
        backbone: a vision model name ("hornet_t_gf", "gfnet_h_ti",
            "gfnet_ti", a `build_model` preset such as "gfnet_tiny"), built
            without its head, or a keras_fourier vision model (its stage
            outputs are used; its weights are shared). Default "hornet_t_gf".
        num_classes: classes. Default 150 (ADE20K).
        weights: None (default, random initialisation), "ade20k" (the
            official HorNet UPerNet ADE20K checkpoint of the backbone,
            downloaded once and converted; UPerNet with a HorNet backbone and
            150 classes), or a path: a `.weights.h5`/`.keras` file saved by
            keras_fourier, or an mmsegmentation checkpoint (`.pth`).
        input_shape: (height, width, 3); height and width multiples of the
            backbone's stride (32 for HorNet, GFNet-H and isotropic
            backbones), or None for any such size. Default (None, None, 3).
        auxiliary: whether the model also returns the auxiliary head's
            logits (training; see the module docstring). Default False.
        channels: the head's width. Default None: the row's (512 UPerNet,
            128 Semantic FPN, 256 SegFormer).
        dropout: channel dropout before the classifiers. Default 0.1.
        drop_path_rate: the backbone's stochastic depth. Default None: the
            official segmentation config's for HorNet, else the backbone's.
        include_preprocessing: whether the model normalises 0-255 RGB pixels
            with the ADE20K mean and std itself. Default True.
        fft_impl: "auto" (default), "fft" or "matmul" for the Fourier layers.
        head_block: the head's fusion block, one of the row's ``blocks``:
            None (default), or for UPerNet "gnconv_7x7" / "gnconv_gf"
            (HorNet's HorFPN: a gnConv as ``fpn_bottleneck``, see
            :class:`~keras_fourier.layers.UPerHead`).
        name: model name. Default "{head}_{backbone}".

    Returns:
        A `keras.Model` from (B, H, W, 3) images to (B, H, W, num_classes)
        logits, or with ``auxiliary=True`` to ``{"logits", "auxiliary"}``.

    Raises:
        ValueError: an unknown head or backbone, an input size the stride
            does not divide, `auxiliary` for a head without one, weights
            that do not fit (the model is then not returned).

    Example:
        >>> model = build_segmenter("upernet", backbone="hornet_t_7x7", input_shape=(64, 64, 3))
        >>> model.output_shape
        (None, 64, 64, 150)
    """
    if head not in HEADS:
        raise ValueError(f"`head` must be one of {sorted(HEADS)}. Received: head={head!r}")
    row = HEADS[head]
    num_classes = check_positive_int("num_classes", num_classes)
    check_rate("dropout", dropout)
    if auxiliary and row.auxiliary_stage is None:
        raise ValueError(
            f"The {head} head trains without an auxiliary head. Received: auxiliary=True"
        )
    if head_block not in row.blocks:
        raise ValueError(
            f"`head_block` of the {head} head must be one of {row.blocks}. "
            f"Received: head_block={head_block!r}"
        )
    if weights == "ade20k" and head_block is not None:
        raise ValueError(
            "weights='ade20k' are official UPerNets with a 3x3 fpn_bottleneck. "
            f"Received: head_block={head_block!r}"
        )
    if weights is not None:
        checkpoints.check_weights_argument(weights, head, backbone, num_classes)
    inputs, x = image_inputs(backbone, input_shape, include_preprocessing)
    maps = _segmentation_backbone(backbone, x, tuple(input_shape), drop_path_rate, fft_impl)
    if row.auxiliary_stage is not None and auxiliary and len(maps) <= row.auxiliary_stage:
        raise ValueError(
            f"The auxiliary head needs a stage {row.auxiliary_stage}. Received: backbone with "
            f"{len(maps)} stages"
        )
    if row.neck is not None:
        maps = row.neck(row.neck_channels, name="neck")(maps)
    width = row.channels if channels is None else channels
    block = {} if head_block is None else {"block": head_block}
    logits = row.head(num_classes, channels=width, dropout=dropout, name="decode_head", **block)(
        maps
    )
    logits = ResizeToMatch(name="resize")([logits, inputs])
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
    outputs = logits
    if auxiliary:
        extra = FCNHead(
            num_classes, channels=row.auxiliary_channels, dropout=dropout, name="auxiliary_head"
        )(maps[row.auxiliary_stage])
        extra = ResizeToMatch(name="auxiliary_resize")([extra, inputs])
        extra = keras.layers.Activation("linear", dtype="float32", name="auxiliary")(extra)
        outputs = {"logits": logits, "auxiliary": extra}
    backbone_name = backbone.name if isinstance(backbone, keras.Model) else backbone
    model = keras.Model(inputs, outputs, name=name or f"{head}_{backbone_name}")
    if weights is not None:
        checkpoints.load_segmentation_weights(model, weights, backbone_name)
    return model


def without_auxiliary(model: keras.Model) -> keras.Model:
    """The inference model of a model built with ``auxiliary=True``: its logits only.

    Args:
        model: a segmentation model; one without the auxiliary output is
            returned as it is.

    Returns:
        A `keras.Model` on the same inputs and weights (shared, not copied)
        returning the (B, H, W, num_classes) logits.

    Example:
        >>> training = UPerNet(backbone="hornet_t_7x7", auxiliary=True)
        >>> without_auxiliary(training).output_shape
        (None, None, None, 150)
    """
    if not isinstance(model.output, dict):
        return model
    return keras.Model(model.inputs, model.output["logits"], name=model.name)


_DOC = """Builds {title}: a keras_fourier backbone with {summary}.

{reference}. See :func:`build_segmenter` for the layers and
:mod:`keras_fourier.segmentation.models` for the two outputs of
``auxiliary=True`` (training).

Args:
    backbone: a vision model name or a keras_fourier vision model. Default
        "hornet_t_gf".
    num_classes: classes. Default 150 (ADE20K).
    weights: None (default), {ade20k}or a path (`.weights.h5`, `.keras`, or
        an mmsegmentation `.pth` checkpoint).
    input_shape: (height, width, 3), multiples of 32 or None. Default
        (None, None, 3).
    auxiliary: {auxiliary}
    channels: the head's width. Default {channels}.
    dropout: channel dropout before the classifiers. Default 0.1.
    drop_path_rate: the backbone's stochastic depth. Default None (the
        official segmentation config's for HorNet).
    include_preprocessing: whether the model normalises 0-255 RGB pixels
        with the ADE20K mean and std itself. Default True.
    fft_impl: "auto" (default), "fft" or "matmul".
    head_block: {head_block}
    name: model name. Default "{head}_<backbone>".

Returns:
    A `keras.Model` from (B, H, W, 3) images to (B, H, W, num_classes)
    logits{returns_aux}.

Example:
    >>> model = keras_fourier.segmentation.{public}(backbone="hornet_t_7x7", num_classes=19)
    >>> model.output_shape
    (None, None, None, 19)
"""

_TITLES = {
    "upernet": ("UPerNet", "pyramid pooling and an FPN (mmsegmentation's UPerHead)"),
    "semantic_fpn": ("SemanticFPN", "an FPN neck and the Semantic FPN head"),
    "segformer": ("SegFormer", "SegFormer's all-MLP decoder"),
}


def _make_builder(head: str) -> Callable[..., keras.Model]:
    public, summary = _TITLES[head]
    row = HEADS[head]

    def builder(**kwargs: Any) -> keras.Model:
        return build_segmenter(head, **kwargs)

    parameters = [
        parameter
        for parameter in inspect.signature(build_segmenter).parameters.values()
        if parameter.name != "head"
    ]
    builder.__signature__ = inspect.Signature(parameters, return_annotation=keras.Model)
    builder.__name__ = builder.__qualname__ = public
    builder.__module__ = __name__
    has_aux = row.auxiliary_stage is not None
    builder.__doc__ = _DOC.format(
        title=public,
        summary=summary,
        reference=row.reference,
        ade20k='"ade20k" (the official HorNet checkpoint), ' if head == "upernet" else "",
        auxiliary=(
            "whether the model also returns the auxiliary FCN head's logits (on "
            "stage 3) for training. Default False."
            if has_aux
            else "must be False: this head trains without one."
        ),
        channels=row.channels,
        head_block=(
            'None (default), "gnconv_7x7" or "gnconv_gf": HorNet\'s HorFPN, a gnConv '
            "fuses the concatenated levels (see :class:`~keras_fourier.layers.UPerHead`)."
            if len(row.blocks) > 1
            else "must be None: this head has one fusion block."
        ),
        head=head,
        public=public,
        returns_aux=', or {"logits", "auxiliary"} with auxiliary=True' if has_aux else "",
    )
    return builder


UPerNet = _make_builder("upernet")
SemanticFPN = _make_builder("semantic_fpn")
SegFormer = _make_builder("segformer")
