"""The catalog: every model family, its names, and one way to build a model by name.

:data:`FAMILIES` lists the families (each owns its variants, public builder
names, releases and checkpoint key map, see
:class:`~keras_fourier.models.family.Family`): GFNet, GFNet-H, HorNet,
AFNONet, FNet, and the small `build_model` compositions used for training
on small images. Everything else is derived from it:

* :data:`BUILDERS`: public builder name -> :class:`Variant`; the named
  vision builders (``GFNetS``, ``HorNetTGF``, ...) are made here by
  :func:`make_builder`, one signature (that of
  :func:`~keras_fourier.models.vision.build_vision_model`), one docstring;
* :func:`model_names`: the snake-case names (``gfnet_ti``, ``gfnet_tiny``,
  ``fnet_base``, ...) that `train`, `flops` and `bench` print;
* :func:`canonical_name`: either spelling (``GFNetTi`` or ``gfnet_ti``) to
  the snake-case name;
* :func:`create_model`: a classifier by name, as training builds it.

The loading code takes a :class:`Variant`; :func:`variant` finds one by key.
The tables and the names are keras-free data, defined in
:mod:`keras_fourier.models.names` (the command line reads them there without
loading TensorFlow) and importable from here.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import keras

from keras_fourier.models import fnet
from keras_fourier.models.builder import build_model
from keras_fourier.models.names import (
    ARCHITECTURE_OPTIONS,
    BUILDERS,
    FAMILIES,
    PUBLIC_NAMES,
    RELEASES,
    TEXT_PRESETS,
    VARIANTS,
    VISION_PRESETS,
    canonical_name,
    is_model_name,
    model_names,
    variant,
)
from keras_fourier.models.vision import build_vision_model
from keras_fourier.models.weights import load_variant_weights

__all__ = [
    "ARCHITECTURE_OPTIONS",
    "BUILDERS",
    "FAMILIES",
    "PUBLIC_NAMES",
    "RELEASES",
    "TEXT_PRESETS",
    "VARIANTS",
    "VISION_PRESETS",
    "canonical_name",
    "check_architecture",
    "create_model",
    "is_model_name",
    "is_text_model",
    "make_builder",
    "modality",
    "model_names",
    "variant",
    "vision_stride",
]


def modality(name: str) -> str:
    """What a model name (either spelling) takes: "text" (FNet) or "image".

    Example:
        >>> modality("FNetBase"), modality("gfnet_xs")
        ('text', 'image')
    """
    return "text" if canonical_name(name) in TEXT_PRESETS else "image"


def is_text_model(name: str) -> bool:
    """Whether a model name (either spelling) is an FNet text model.

    Example:
        >>> is_text_model("FNetBase"), is_text_model("gfnet_xs")
        (True, False)
    """
    return modality(name) == "text"


def check_architecture(name: str, architecture: Mapping[str, Any]) -> dict[str, Any]:
    """The `build_model` overrides that are set, checked to apply to model `name`.

    Args:
        name: a model name (either spelling).
        architecture: {option: value or None} of :data:`ARCHITECTURE_OPTIONS`.

    Returns:
        The options whose value is not None.

    Raises:
        ValueError: an unknown option, or options for a model that is not a
            preset of :data:`VISION_PRESETS`.

    Example:
        >>> check_architecture("gfnet_tiny", {"dims": 32, "mixer": None})
        {'dims': 32}
    """
    unknown = set(architecture) - set(ARCHITECTURE_OPTIONS)
    if unknown:
        raise ValueError(
            f"Unknown architecture options {sorted(unknown)}; expected {ARCHITECTURE_OPTIONS}."
        )
    given = {key: value for key, value in architecture.items() if value is not None}
    if given and (not is_model_name(name) or canonical_name(name) not in VISION_PRESETS):
        raise ValueError(
            f"Architecture options {sorted(given)} only apply to the presets "
            f"{sorted(VISION_PRESETS)}; received model {name!r}."
        )
    return given


def vision_stride(name: str, **architecture: Any) -> int:
    """Downsampling factor from pixels to the last stage: image sizes must be multiples of it.

    Args:
        name: a vision model name (either spelling).
        **architecture: `build_model` overrides of a preset (see `create_model`).

    Returns:
        The stride.

    Example:
        >>> vision_stride("gfnet_tiny"), vision_stride("GFNetHTi")
        (2, 32)
    """
    name = canonical_name(name)
    options = check_architecture(name, architecture)
    if name in VARIANTS and name not in VISION_PRESETS:
        return VARIANTS[name].stride
    options = {**VISION_PRESETS[name], **options}
    depths = options["depths"]
    stages = 1 if isinstance(depths, int) else len(depths)
    return options.get("patch_size", 16 if stages == 1 else 4) * 2 ** (stages - 1)


_DOC = """Builds {public} ({variant}) with the keras.applications signature.

{summary}

Args:
    include_top: whether to include the classification head. Default True.
    include_preprocessing: whether the model normalises its 0-255 RGB
        inputs with the ImageNet mean and std. Default True.
    weights: None (random init, default), "imagenet" (official ImageNet-1k
        checkpoint, downloaded and converted once), or a path to a
        `.weights.h5`/`.keras` file saved by keras_fourier or an official
        PyTorch `.pth` checkpoint.
    input_tensor: optional Keras tensor to use as the image input.
    input_shape: (height, width, channels), default (224, 224, 3); height
        and width must be multiples of {stride}. Fourier filters are built for
        this size (checkpoint filters are resized to it). None for the
        height and/or width builds an any-size model: it runs at every size
        {stride} divides, its filters and position embedding built for 224
        on that axis and resized in the graph at call time.
    pooling: without the top, None (the final feature map), "avg" or "max".
    classes: classes of the head. Default 1000.
    classifier_activation: activation of the head; None returns logits.
        Default "softmax".
    drop_path_rate: stochastic depth rate. Default {drop_path_rate}, the
        official training config.
    fft_impl: "auto" (default), "fft" or "matmul" for every Fourier layer.
    name: model name. Default "{variant}".{extra_args}

Returns:
    A `keras.Model` from (B, H, W, C) images to (B, classes) scores (or
    features without the top).

Example:
    >>> model = keras_fourier.{public}(input_shape=(224, 224, 3))
    >>> model.output_shape
    (None, 1000)
"""

_EXTRA_ARG_DOCS = {
    "double_skip": (
        "\n    double_skip: AFNONet's extra residual around the mixer. Default False, as the"
        "\n        official training script."
    ),
}
# The keras.applications arguments of the named vision builders: those of build_vision_model.
_APPLICATION_PARAMETERS = tuple(
    parameter
    for parameter in inspect.signature(build_vision_model).parameters.values()
    if parameter.name not in ("spec", "load_weights")
)


def make_builder(public: str) -> Callable[..., keras.Model]:
    """Makes the named vision builder `public` from its family's row.

    Args:
        public: a key of :data:`BUILDERS` of a vision family, e.g. "GFNetS".

    Returns:
        The builder: keyword arguments of `build_vision_model` (defaults:
        the row's drop-path rate and the variant key as name) plus the
        family's `options`.

    Example:
        >>> make_builder("GFNetTi")(input_shape=(32, 32, 3), classes=10).name
        'gfnet_ti'
    """
    row = BUILDERS[public]
    spec, options = row.spec, row.family.options
    defaults = {"drop_path_rate": spec.drop_path_rate, "name": row.key}

    def builder(**kwargs) -> keras.Model:
        bound = builder.__signature__.bind(**kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        overrides = {option: arguments.pop(option) for option in options}
        return build_vision_model(
            dataclasses.replace(spec, **overrides),
            load_weights=lambda model, weights: load_variant_weights(row, model, weights),
            **arguments,
        )

    parameters = [
        parameter.replace(default=defaults.get(parameter.name, parameter.default))
        for parameter in _APPLICATION_PARAMETERS
    ] + [
        inspect.Parameter(option, inspect.Parameter.KEYWORD_ONLY, default=getattr(spec, option))
        for option in options
    ]
    builder.__signature__ = inspect.Signature(parameters, return_annotation=keras.Model)
    builder.__name__ = builder.__qualname__ = public
    builder.__module__ = "keras_fourier"
    builder.__doc__ = _DOC.format(
        public=public,
        variant=row.key,
        summary=row.family.summary.strip(),
        stride=spec.stride,
        drop_path_rate=spec.drop_path_rate,
        extra_args="".join(_EXTRA_ARG_DOCS[o] for o in options),
    )
    return builder


def _text_classifier(
    name: str, *, num_classes: int, sequence_length: int, vocabulary_size: int, dropout: float
) -> keras.Model:
    encoder = fnet.FNet(
        TEXT_PRESETS[name],
        vocabulary_size=vocabulary_size,
        max_sequence_length=sequence_length,
        dropout=dropout,
        num_classes=num_classes,
        name=name,
    )
    probabilities = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(
        encoder.output
    )
    return keras.Model(encoder.input, probabilities, name=name)


def create_model(
    name: str,
    *,
    num_classes: int,
    image_size: int | tuple[int, int] = 224,
    drop_path_rate: float | None = None,
    sequence_length: int = 512,
    vocabulary_size: int = 32000,
    dropout: float = 0.1,
    weights: str | None = None,
    **architecture: Any,
) -> keras.Model:
    """Builds a classifier by name (either spelling), with softmax float32 outputs.

    Args:
        name: a name from `model_names()`, or a public builder name
            ("GFNetTi"); the model is named with the snake-case name.
        num_classes: number of classes.
        image_size: input height and width of vision models (an int, or
            (height, width)), multiples of `vision_stride(name)`. Default 224.
        drop_path_rate: stochastic depth rate of vision models. Default None:
            the builder's default (the official training config for named
            variants, 0 for presets).
        sequence_length: static input length of text models. Default 512.
        vocabulary_size: word table rows of text models. Default 32000.
        dropout: dropout rate of text models. Default 0.1.
        weights: weights of a named vision model (None, "imagenet" or a
            file, as its builder takes). Default None.
        **architecture: `build_model` overrides of a vision preset, any of
            "mixer", "ffn", "depths", "dims", "patch_size" (None values are
            ignored).

    Returns:
        A `keras.Model`: images (B, height, width, 3) in [0, 255], or FNet's
        {"token_ids", "segment_ids"} inputs, to (B, num_classes)
        probabilities.

    Raises:
        ValueError: for an unknown name, architecture overrides of a model
            that is not a preset, or weights for a model without a loader.

    Example:
        >>> model = create_model("gfnet_tiny", num_classes=10, image_size=16)
        >>> model.output_shape
        (None, 10)
    """
    name = canonical_name(name)
    overrides = check_architecture(name, architecture)
    if name in TEXT_PRESETS:
        if weights is not None:
            raise ValueError(
                f"`weights` of text model {name!r} are loaded with keras_fourier.FNet; "
                f"Received: weights={weights!r}"
            )
        return _text_classifier(
            name,
            num_classes=num_classes,
            sequence_length=sequence_length,
            vocabulary_size=vocabulary_size,
            dropout=dropout,
        )
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    if name in VISION_PRESETS:
        builder: Callable[..., keras.Model] = build_model
        options = {**VISION_PRESETS[name], **overrides}
    else:
        public = next(public for public, snake in PUBLIC_NAMES.items() if snake == name)
        builder, options = make_builder(public), {}
    return builder(
        input_shape=(height, width, 3),
        classes=num_classes,
        drop_path_rate=drop_path_rate,
        weights=weights,
        name=name,
        **options,
    )
