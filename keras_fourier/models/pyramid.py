"""The feature pyramid of a keras_fourier backbone, shared by the dense-prediction models.

Segmenters (:mod:`keras_fourier.segmentation`) and detectors
(:mod:`keras_fourier.detection`) take any vision backbone of the package as a
four-level pyramid at strides 4, 8, 16 and 32: hierarchical backbones
(HorNet, GFNet-H, hierarchical `build_model` compositions) give their four
stage outputs, isotropic ones (GFNet, AFNONet) their one token map through a
:class:`~keras_fourier.layers.MultiScaleNeck`; each map is LayerNorm-ed
(``norm0``-``norm3``, eps 1e-6), as HorNet's dense-prediction backbones do.
:func:`image_encoder` makes that pyramid a model with keras-hub's
``pyramid_outputs`` ("P2".."P5"), so keras-hub's detectors take it unchanged.
"""

from __future__ import annotations

import math

import keras

from keras_fourier.layers.decode_heads import MultiScaleNeck
from keras_fourier.layers.padding import PadToMultiple
from keras_fourier.layers.position import StrideCheck
from keras_fourier.models.builder import build_model
from keras_fourier.models.catalog import vision_stride
from keras_fourier.models.names import VARIANTS, VISION_PRESETS, canonical_name, variant
from keras_fourier.models.vision import BUILT_SIZE, build_vision_model

# The pyramid an isotropic backbone's map becomes (hierarchical ones keep their own stages,
# each half the previous's resolution).
PYRAMID_STRIDES = (4, 8, 16, 32)
NORM_EPSILON = 1e-6
# ImageNet's mean and std of 0-255 RGB pixels, the normalisation of the official dense configs
# (mmsegmentation's and mmdetection's img_norm_cfg).
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


def check_input_shape(input_shape, stride: int) -> tuple:
    """`input_shape` as a tuple, checked: (height, width, 3), each a multiple of `stride` or None.

    A `stride` of 1 takes any positive height and width.

    Raises:
        ValueError: any other shape, naming `input_shape`.
    """
    if (
        not isinstance(input_shape, (tuple, list))
        or len(input_shape) != 3
        or input_shape[2] != 3
        or not all(
            d is None
            or (isinstance(d, int) and not isinstance(d, bool) and d > 0 and d % stride == 0)
            for d in input_shape[:2]
        )
    ):
        sizes = f"multiples of {stride}" if stride > 1 else "positive ints"
        raise ValueError(
            f"`input_shape` must be (height, width, 3) with height and width {sizes} (or None "
            f"for any size). Received: input_shape={input_shape!r}"
        )
    return tuple(input_shape)


def backbone_key(backbone: str) -> str:
    """The canonical vision model name of `backbone`.

    Raises:
        TypeError: `backbone` is not a string.
        ValueError: not a vision model name.
    """
    if not isinstance(backbone, str):
        raise TypeError(
            "`backbone` must be a model name (e.g. 'hornet_t_gf') or a keras_fourier vision "
            f"model. Received: backbone={backbone!r}"
        )
    try:
        key = canonical_name(backbone)
    except ValueError as error:
        raise ValueError(f"Unknown backbone. Received: backbone={backbone!r}") from error
    if key not in VARIANTS and key not in VISION_PRESETS:
        raise ValueError(f"`backbone` must be a vision model name. Received: backbone={backbone!r}")
    return key


def required_stride(backbone: str | keras.Model) -> int:
    """What the input's height and width must be multiples of (1 for a built model: its own)."""
    if isinstance(backbone, keras.Model):
        return 1
    key = backbone_key(backbone)
    stride = vision_stride(key)
    stages = (
        len(VARIANTS[key].dims)
        if key in VARIANTS
        else (1 if isinstance(VISION_PRESETS[key]["depths"], int) else 2)
    )
    return max(stride, PYRAMID_STRIDES[-1]) if stages == 1 else stride


def stage_outputs(model: keras.Model) -> list:
    """The stage outputs (``stage{s}_output`` layers) of a keras_fourier vision model."""
    outputs = [
        layer.output
        for layer in model.layers
        if layer.name.startswith("stage") and layer.name.endswith("_output")
    ]
    if not outputs:
        raise ValueError(
            "`backbone` has no stage outputs; is it a keras_fourier vision model? "
            f"Received: backbone={model.name!r}"
        )
    return outputs


def _backbone_stride(model: keras.Model) -> int:
    """The stride of a keras_fourier backbone's first stage (its stem's)."""
    return int(model.get_layer("stem_conv").strides[0])


def build_backbone(
    backbone: str | keras.Model,
    x,
    input_shape: tuple,
    drop_path_rate: float | None,
    fft_impl: str,
    built_size: int = BUILT_SIZE,
) -> tuple[list, int]:
    """The backbone's stage outputs on `x` (its layers inline) and the first stage's stride.

    Args:
        backbone: a vision model name, or a keras_fourier vision model (its
            stage outputs are used; its weights are shared).
        x: the (normalised) image tensor.
        input_shape: (height, width, 3) of the model's input.
        drop_path_rate: the backbone's stochastic depth; None: its default.
        fft_impl: "auto", "fft" or "matmul" for the Fourier layers.
        built_size: the image size the filters of a named backbone are built
            for. Default the classifiers' 224.
    """
    if isinstance(backbone, keras.Model):
        features = stage_outputs(backbone)
        maps = keras.Model(backbone.inputs, features, name=f"{backbone.name}_features")(x)
        return list(maps), _backbone_stride(backbone)
    key = backbone_key(backbone)
    common = {
        "include_top": False,
        "include_preprocessing": False,
        "input_tensor": x,
        "input_shape": input_shape,
        "fft_impl": fft_impl,
        "name": key,
    }
    if key in VISION_PRESETS:
        options = dict(VISION_PRESETS[key])
        if drop_path_rate is not None:
            options["drop_path_rate"] = drop_path_rate
        model = build_model(**options, **common)
    else:
        model = build_vision_model(
            variant(key).spec, drop_path_rate=drop_path_rate, built_size=built_size, **common
        )
    return stage_outputs(model), _backbone_stride(model)


def pyramid_maps(
    backbone: str | keras.Model,
    x,
    input_shape: tuple,
    drop_path_rate: float | None = None,
    fft_impl: str = "auto",
    built_size: int = BUILT_SIZE,
) -> list:
    """The four normalised maps at strides 4, 8, 16 and 32 of `backbone` on `x` (layers inline).

    Args: as :func:`build_backbone`.

    Returns:
        [P2, P3, P4, P5]: the ``norm0``-``norm3`` outputs, (B, H/4, W/4, C0)
        to (B, H/32, W/32, C3).
    """
    maps, stride = build_backbone(backbone, x, input_shape, drop_path_rate, fft_impl, built_size)
    maps = [
        keras.layers.LayerNormalization(epsilon=NORM_EPSILON, name=f"norm{i}")(m)
        for i, m in enumerate(maps)
    ]
    if len(maps) == 1:
        maps = MultiScaleNeck(stride, PYRAMID_STRIDES, name="pyramid_neck")(maps[0])
    return list(maps)


def image_inputs(
    backbone: str | keras.Model, input_shape: tuple, include_preprocessing: bool, pad: bool = False
):
    """The image input of a dense model on `backbone`, and the tensor its backbone reads.

    The stride check of an any-size input, then (with `include_preprocessing`)
    the ImageNet normalisation of 0-255 RGB pixels (``preprocessing``). With
    `pad`, the input takes any height and width instead, and the normalised
    image is padded bottom and right with zeros to multiples of the
    backbone's stride and 32 (``pad_to_stride``, mmdetection's
    ``Pad(size_divisor=32)``) where a size may need it.

    Returns:
        (the `keras.Input` "images", the tensor after its checks, normalisation
        and padding; its static shape is the one the backbone is built for).
    """
    stride = required_stride(backbone)
    multiple = math.lcm(stride, PYRAMID_STRIDES[-1]) if pad else stride
    input_shape = check_input_shape(input_shape, 1 if pad else stride)
    inputs = keras.Input(input_shape, name="images")
    x = inputs
    if None in input_shape[:2] and stride > 1 and not pad:
        x = StrideCheck(stride, name="pyramid_stride_check")(x)
    if include_preprocessing:
        x = keras.layers.Normalization(
            mean=list(IMAGENET_MEAN),
            variance=[s**2 for s in IMAGENET_STD],
            name="preprocessing",
        )(x)
    if pad and any(d is None or d % multiple for d in input_shape[:2]):
        x = PadToMultiple(multiple, name="pad_to_stride")(x)
    return inputs, x


@keras.saving.register_keras_serializable(package="keras_fourier")
class PyramidEncoder(keras.Model):
    """A functional model from images to a backbone's {"P2".."P5"} maps, keras-hub's image encoder.

    keras-hub's detectors (``keras_hub.models.RetinaNetBackbone(image_encoder=...)``)
    read an encoder's ``pyramid_outputs``: a dict from level names "P2".."P5"
    (strides 4 to 32) to its symbolic feature maps. This model's outputs are
    that dict, and ``pyramid_outputs`` returns it, also after saving and
    loading. Build one with :func:`image_encoder`.

    Example:
        >>> encoder = image_encoder("hornet_t_7x7", input_shape=(64, 64, 3))
        >>> sorted(encoder.pyramid_outputs)
        ['P2', 'P3', 'P4', 'P5']
    """

    @property
    def pyramid_outputs(self) -> dict:
        """{"P2": ..., "P5": ...}: the symbolic pyramid maps."""
        return dict(self.output)


def image_encoder(
    backbone: str | keras.Model = "hornet_t_gf",
    *,
    input_shape: tuple = (None, None, 3),
    include_preprocessing: bool = True,
    drop_path_rate: float | None = None,
    fft_impl: str = "auto",
    name: str | None = None,
) -> PyramidEncoder:
    """A backbone's four-level feature pyramid as keras-hub's detectors take it.

    Args:
        backbone: a vision model name ("hornet_t_gf", "gfnet_h_ti",
            "gfnet_ti", a `build_model` preset such as "gfnet_tiny"), built
            without its head, or a keras_fourier vision model (its weights
            are shared). Default "hornet_t_gf".
        input_shape: (height, width, 3), multiples of the backbone's stride
            (32 for HorNet, GFNet-H and isotropic backbones), or None for any
            such size. Default (None, None, 3).
        include_preprocessing: whether the model normalises 0-255 RGB pixels
            with the ImageNet mean and std itself. Default True.
        drop_path_rate: the backbone's stochastic depth. Default None: its own.
        fft_impl: "auto" (default), "fft" or "matmul" for the Fourier layers.
        name: model name. Default "<backbone>_encoder".

    Returns:
        A :class:`PyramidEncoder` from (B, H, W, 3) images to {"P2": (B, H/4,
        W/4, C0), ..., "P5": (B, H/32, W/32, C3)}.

    Example:
        >>> import keras_hub
        >>> encoder = image_encoder("hornet_t_7x7", input_shape=(64, 64, 3))
        >>> retina = keras_hub.models.RetinaNetBackbone(
        ...     image_encoder=encoder, min_level=3, max_level=7, use_p5=False,
        ...     image_shape=(64, 64, 3))
    """
    inputs, x = image_inputs(backbone, input_shape, include_preprocessing)
    maps = pyramid_maps(backbone, x, tuple(input_shape), drop_path_rate, fft_impl)
    outputs = {f"P{level}": m for level, m in enumerate(maps, start=2)}
    backbone_name = backbone.name if isinstance(backbone, keras.Model) else backbone
    return PyramidEncoder(inputs, outputs, name=name or f"{backbone_name}_encoder")
