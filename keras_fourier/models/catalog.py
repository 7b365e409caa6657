"""The catalog: every model family, its names, and one way to build a model by name.

:data:`FAMILIES` lists the families (each owns its variants, public builder
names, releases and checkpoint key map, see
:class:`~keras_fourier.models.family.Family`): GFNet, GFNet-H, HorNet,
AFNONet, FNet, and the small `build_model` compositions used for training
on small images. Everything else is derived from it:

* :data:`BUILDERS`: public builder name -> :class:`Variant`; the named
  vision builders (``GFNetS``, ``HorNetTGF``, ...) are made here by
  :func:`make_builder`, one signature (that of
  :func:`~keras_fourier.models.vision.build_vision_model`), one docstring,
  each given its family's weight loader
  (:func:`~keras_fourier.models.vision_weights.load_variant_weights`), and
  :data:`FNet`, :data:`FNetBase`, :data:`FNetLarge`: the FNet architecture
  (:func:`~keras_fourier.models.fnet.build_fnet`) given FNet's loader
  (:func:`~keras_fourier.models.fnet_weights.load_fnet_weights`): the
  architecture modules read no file, and the loaders build no model;
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
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import keras

from keras_fourier.layers.fnet import GELU_TANH
from keras_fourier.limits import check_memory, text_request_bytes, vision_request_bytes
from keras_fourier.models import fnet
from keras_fourier.models.builder import build_model
from keras_fourier.models.fnet_weights import (
    fnet_weights_activation,
    fnet_weights_sizes,
    load_fnet_weights,
    load_pretrained_encoder,
)
from keras_fourier.models.fourcastnet import field_model
from keras_fourier.models.names import (
    ARCHITECTURE_OPTIONS,
    BUILDERS,
    FAMILIES,
    PUBLIC_NAMES,
    RELEASES,
    TEXT_MIXINGS,
    TEXT_PRESETS,
    VARIANTS,
    VISION_PRESETS,
    canonical_name,
    is_model_name,
    modality,
    model_names,
    variant,
)
from keras_fourier.models.vision import build_vision_model
from keras_fourier.models.vision_weights import load_variant_weights
from keras_fourier.weights.convert import copy_weights_except
from keras_fourier.weights.saved import head_classes, keras_head_classes

__all__ = [
    "ARCHITECTURE_OPTIONS",
    "BUILDERS",
    "FAMILIES",
    "PUBLIC_NAMES",
    "RELEASES",
    "TEXT_MIXINGS",
    "TEXT_PRESETS",
    "VARIANTS",
    "VISION_PRESETS",
    "FNet",
    "FNetBase",
    "FNetLarge",
    "canonical_name",
    "check_architecture",
    "check_model_batch",
    "check_request",
    "create_model",
    "default_image_size",
    "is_model_name",
    "is_text_model",
    "make_builder",
    "modality",
    "model_names",
    "request_memory",
    "variant",
    "vision_stride",
]


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
    if given and is_model_name(name) and modality(name) == "field":
        wrong = {
            key: value
            for key, value in given.items()
            if key not in FIELD_ARCHITECTURE or isinstance(value, (tuple, list))
        }
        if wrong:
            raise ValueError(
                f"Field model {name!r} takes {FIELD_ARCHITECTURE} as single ints (embed_dim, "
                f"depth, patch_size). Received: {', '.join(f'{k}={v!r}' for k, v in wrong.items())}"
            )
        return given
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


# The architecture options a field model takes (its embed_dim, depth and patch_size).
FIELD_ARCHITECTURE = ("dims", "depths", "patch_size")


def request_memory(
    name: str,
    *,
    image_size: int | tuple[int, int] = 224,
    sequence_length: int = 512,
    batch_size: int = 1,
    **architecture: Any,
) -> int:
    """Estimated bytes that model `name` needs for a batch at an input size, before building it.

    Vision models: activations and size-dependent filters
    (:func:`keras_fourier.limits.vision_request_bytes`); text models:
    activations and the sequence DFT table
    (:func:`keras_fourier.limits.text_request_bytes`).

    Args:
        name: a model name (either spelling).
        image_size: vision input size, an int or (height, width). Default 224.
        sequence_length: text input length. Default 512.
        batch_size: examples per call. Default 1.
        **architecture: `build_model` overrides of a preset.

    Returns:
        The estimate in bytes.

    Example:
        >>> request_memory("fnet_tiny", sequence_length=512) < 2**30
        True
    """
    name = canonical_name(name)
    if name in TEXT_PRESETS:
        sizes = TEXT_PRESETS[name]
        return text_request_bytes(
            sizes["hidden_size"],
            sizes["num_layers"],
            sizes["intermediate_size"],
            sequence_length,
            batch_size,
        )
    options = check_architecture(name, architecture)
    if name in VARIANTS and name not in VISION_PRESETS:
        spec = VARIANTS[name]
        dims, depths, patch = spec.dims, spec.depths, spec.patch_size
    else:
        options = {**VISION_PRESETS.get(name, {}), **options}
        depths = options.get("depths", 1)
        depths = (depths,) if isinstance(depths, int) else tuple(depths)
        dims = options.get("dims", 64)
        dims = (dims,) * len(depths) if isinstance(dims, int) else tuple(dims)
        patch = options.get("patch_size", 16 if len(depths) == 1 else 4)
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    return vision_request_bytes(dims, depths, patch, (height, width), batch_size)


def check_request(
    name: str,
    *,
    image_size: int | tuple[int, int] = 224,
    sequence_length: int = 512,
    batch_size: int = 1,
    names: Mapping[str, str] | None = None,
    **architecture: Any,
) -> None:
    """Refuses an input size or batch for which model `name` would need more than the ceiling.

    The ceiling is ``KERAS_FOURIER_MAX_MEMORY`` (:func:`keras_fourier.limits.max_memory`).

    Args:
        name: a model name (either spelling).
        image_size, sequence_length, batch_size: the request (see
            :func:`request_memory`).
        names: {argument: flag} for the message, e.g. ``{"image_size":
            "--image-size"}``. Default None: the argument names.
        **architecture: `build_model` overrides of a preset.

    Raises:
        ValueError: one line naming the memory the request would need, the
            argument and its value, and the setting that allows it.

    Example:
        >>> check_request("fnet_tiny", sequence_length=512)
    """
    names = dict(names or {})
    needed = request_memory(
        name,
        image_size=image_size,
        sequence_length=sequence_length,
        batch_size=batch_size,
        **architecture,
    )
    text = canonical_name(name) in TEXT_PRESETS
    key, value = ("sequence_length", sequence_length) if text else ("image_size", image_size)
    if not isinstance(value, int):
        value = "x".join(map(str, value))
    shown = value if text or not isinstance(value, int) else f"{value}x{value}"
    received = f"{names.get(key, key)}={value}"
    if batch_size != 1:
        received += f", {names.get('batch_size', 'batch_size')}={batch_size}"
    unit = "tokens" if text else "pixels"
    check_memory(
        f"Model {canonical_name(name)!r} at {shown} {unit} and a batch of {batch_size}",
        needed,
        received,
    )


def activation_elements(model: keras.Model) -> int:
    """The values of one example's layer outputs (those of static shape) in a built model.

    Example:
        >>> activation_elements(create_model("gfnet_tiny", num_classes=10, image_size=16)) > 0
        True
    """
    per_example = 0
    for layer in model.layers:
        try:
            outputs = keras.tree.flatten(layer.output)
        except (AttributeError, ValueError):  # a layer called more than once, or never
            continue
        for tensor in outputs:
            shape = getattr(tensor, "shape", None)
            if shape is not None and all(isinstance(d, int) for d in shape[1:]):
                per_example += math.prod(shape[1:])
    return per_example


def check_model_batch(
    model: keras.Model, batch_size: int, names: Mapping[str, str] | None = None
) -> None:
    """Refuses a batch for which a built model's activations would exceed the memory ceiling.

    The estimate is the model's weights plus, per example, every layer's
    outputs (of static shape) in float32, times the batch; the ceiling is
    ``KERAS_FOURIER_MAX_MEMORY`` (:func:`keras_fourier.limits.max_memory`).

    Args:
        model: a built functional or sequential model.
        batch_size: the examples of one call.
        names: {"batch_size": flag} for the message. Default None.

    Raises:
        ValueError: one line naming the memory needed, the batch size and the setting.

    Example:
        >>> check_model_batch(create_model("gfnet_tiny", num_classes=10, image_size=16), 32)
    """
    needed = 4 * (model.count_params() + batch_size * activation_elements(model))
    flag = dict(names or {}).get("batch_size", "batch_size")
    check_memory(f"Model {model.name!r} at a batch of {batch_size}", needed, f"{flag}={batch_size}")


# The side of the embedded "digits" images' default input (they are 8x8).
DIGITS_IMAGE_SIZE = 16


def default_image_size(name: str, *, data: str | None = None, **architecture: Any) -> int:
    """The input size a vision model name is trained and benchmarked at unless one is given.

    The one rule of training (`keras-fourier train`), its tasks and `bench`.

    Args:
        name: a vision model name (either spelling).
        data: the data source, if known: the embedded "digits" (8x8 images)
            take small inputs. Default None.
        **architecture: `build_model` overrides of a preset (see `create_model`).

    Returns:
        The smallest multiple of the model's stride (`vision_stride`) that
        is at least 16 for "digits", else 32 for the presets of
        :data:`VISION_PRESETS` and 224 for the named models.

    Example:
        >>> default_image_size("gfnet_tiny", data="digits"), default_image_size("gfnet_h_ti")
        (16, 224)
    """
    stride = vision_stride(name, **architecture)
    if data == "digits":
        base = DIGITS_IMAGE_SIZE
    else:
        base = 32 if canonical_name(name) in VISION_PRESETS else 224
    return stride * math.ceil(base / stride)


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
    if parameter.name not in ("spec", "load_weights", "built_size")
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


# The public FNet constructors: the architecture with FNet's weight loader.
FNet = fnet.public_builder("FNet", load_fnet_weights)
FNetBase = fnet.public_builder("FNetBase", load_fnet_weights, "base")
FNetLarge = fnet.public_builder("FNetLarge", load_fnet_weights, "large")


def _text_classifier(
    name: str,
    *,
    num_classes: int,
    sequence_length: int,
    vocabulary_size: int,
    dropout: float,
    max_sequence_length: int | None = None,
    num_segments: int = 4,
    activation: str = GELU_TANH,
    any_length: bool = False,
) -> keras.Model:
    encoder = fnet.build_fnet(
        TEXT_PRESETS[name],
        vocabulary_size=vocabulary_size,
        max_sequence_length=max_sequence_length or sequence_length,
        sequence_length=None if any_length else sequence_length,
        num_segments=num_segments,
        dropout=dropout,
        num_classes=num_classes,
        activation=activation,
        name=name,
        **TEXT_MIXINGS[name],
    )
    probabilities = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(
        encoder.output
    )
    return keras.Model(encoder.input, probabilities, name=name)


def create_model(
    name: str,
    *,
    num_classes: int | None,
    image_size: int | tuple[int, int] | None = 224,
    drop_path_rate: float | None = None,
    sequence_length: int = 512,
    vocabulary_size: int = 32000,
    dropout: float = 0.1,
    weights: str | None = None,
    any_length: bool = False,
    **architecture: Any,
) -> keras.Model:
    """Builds a classifier by name (either spelling), with softmax float32 outputs.

    Args:
        name: a name from `model_names()`, or a public builder name
            ("GFNetTi"); the model is named with the snake-case name.
        num_classes: number of classes (a field model's channels; None: its row's).
        image_size: input height and width of vision models (an int, or
            (height, width)), multiples of `vision_stride(name)`; a field
            model's grid (None: its row's). Default 224.
        drop_path_rate: stochastic depth rate of vision models. Default None:
            the builder's default (the official training config for named
            variants, 0 for presets).
        sequence_length: static input length of text models. Default 512.
        vocabulary_size: word table rows of text models. Default 32000.
        dropout: dropout rate of text models. Default 0.1.
        weights: weights of a named vision model (None, "imagenet" or a
            file, as its builder takes). Default None.
        any_length: a text model that takes any length up to
            `sequence_length` (``FNet(sequence_length=None)``, for batches
            padded per batch). Default False: exactly `sequence_length`.
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
    if modality(name) == "field":
        if weights is not None:
            raise ValueError(
                f"`weights` of field model {name!r} are loaded with keras_fourier.models."
                f"FourCastNet(weights=...). Received: weights={weights!r}"
            )
        return field_model(
            name,
            image_size=image_size,
            channels=num_classes,
            drop_path_rate=drop_path_rate,
            **overrides,
        )
    check_request(name, image_size=image_size, sequence_length=sequence_length, **overrides)
    if name in TEXT_PRESETS:
        if weights is not None:
            raise ValueError(
                f"`weights` of text model {name!r} are loaded with keras_fourier.FNet, or into "
                f"a fine-tuning classifier with create_pretrained_model; Received: "
                f"weights={weights!r}"
            )
        return _text_classifier(
            name,
            num_classes=num_classes,
            sequence_length=sequence_length,
            vocabulary_size=vocabulary_size,
            dropout=dropout,
            any_length=any_length,
        )
    builder, options = _vision_builder(name, overrides)
    return builder(
        input_shape=_input_shape(image_size),
        classes=num_classes,
        drop_path_rate=drop_path_rate,
        weights=weights,
        name=name,
        **options,
    )


def _input_shape(image_size: int | tuple[int, int]) -> tuple[int, int, int]:
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    return height, width, 3


def _vision_builder(
    name: str, overrides: Mapping[str, Any]
) -> tuple[Callable[..., keras.Model], dict[str, Any]]:
    """The builder of a vision model name (snake case) and its options."""
    if name in VISION_PRESETS:
        return build_model, {**VISION_PRESETS[name], **overrides}
    public = next(public for public, snake in PUBLIC_NAMES.items() if snake == name)
    return make_builder(public), {}


def check_text_weights(
    name: str,
    weights: str | os.PathLike,
    *,
    sequence_length: int | None = None,
    vocabulary_size: int | None = None,
) -> dict[str, int]:
    """The sizes of FNet `weights`, checked to fit the text model `name`.

    Args:
        name: a text model name (either spelling), e.g. "fnet_base".
        weights: anything `keras_fourier.FNet` takes as `weights`.
        sequence_length: the static input length to fine-tune at, at most
            the weights' position table. Default None: not checked.
        vocabulary_size: the tokenizer's ids, which must be the rows of the
            weights' word table. Default None: not checked.

    Returns:
        The weights' sizes (`keras_fourier.models.fnet_weights.fnet_weights_sizes`).

    Raises:
        ValueError: naming what differs: the model's sizes, a sequence
            length beyond the position table, another vocabulary size.

    Example:
        >>> check_text_weights("fnet_base", "f_net_base", sequence_length=128)["num_segments"]
        4
    """
    name = canonical_name(name)
    sizes = fnet_weights_sizes(weights)
    preset = TEXT_PRESETS[name]
    differing = [
        f"{key} {sizes[key]}, model {preset[key]}" for key in preset if sizes[key] != preset[key]
    ]
    if differing:
        raise ValueError(
            f"The weights {os.fspath(weights)!r} are not of model {name!r}: weights "
            f"{'; '.join(differing)}. Pick the model of their sizes."
        )
    if sequence_length is not None and sequence_length > sizes["max_sequence_length"]:
        raise ValueError(
            f"The weights {os.fspath(weights)!r} have {sizes['max_sequence_length']} positions: "
            f"`sequence_length` must be at most that. Received: sequence_length={sequence_length}"
        )
    if vocabulary_size is not None and vocabulary_size != sizes["vocabulary_size"]:
        raise ValueError(
            f"The tokenizer has {vocabulary_size} ids but the word table of the weights "
            f"{os.fspath(weights)!r} has {sizes['vocabulary_size']} rows: use the tokenizer "
            "the weights were trained with."
        )
    return sizes


def create_pretrained_model(
    name: str,
    *,
    weights: str | os.PathLike,
    num_classes: int,
    image_size: int | tuple[int, int] = 224,
    drop_path_rate: float | None = None,
    sequence_length: int = 512,
    vocabulary_size: int | None = None,
    dropout: float = 0.1,
    any_length: bool = False,
    **architecture: Any,
) -> keras.Model:
    """A classifier to fine-tune: its backbone or encoder from `weights`, a fresh head.

    The official fine-tuning of every family starts so: the pretrained
    weights everywhere but the classifier, which is initialised anew for the
    task's classes (whatever head the weights came with: an ImageNet head,
    another task's classifier, FNet's pretraining heads, or none).

    Args:
        name: a name from `model_names()` (either spelling).
        weights: vision models: "imagenet", an official `.pth`/`.pt`
            checkpoint, or a `.weights.h5`/`.keras` file saved by keras_fourier
            (with any head or none); text models: anything
            `keras_fourier.FNet` takes (a release name such as "f_net_base",
            an official Flax checkpoint, a transformers or keras-hub folder, a
            `.weights.h5` of an encoder, an `FNetPretraining` or a classifier).
        num_classes: classes of the new head.
        image_size: input size of vision models. Default 224.
        drop_path_rate: stochastic depth of vision models. Default None: the
            builder's.
        sequence_length: static input length of text models, at most the
            weights' position table (which keeps all its rows). Default 512.
        vocabulary_size: the tokenizer's ids, checked against the weights'
            word table. Default None: not checked.
        dropout: dropout rate of text models. Default 0.1.
        any_length: a text model that takes any length up to the weights'
            position table (for batches padded per batch, at most
            `sequence_length` tokens). Default False.
        **architecture: `build_model` overrides of a vision preset.

    Returns:
        The classifier, as :func:`create_model` builds it.

    Raises:
        ValueError: the weights do not fit the model (named), or cannot be read.

    Example:
        >>> model = create_pretrained_model("gfnet_ti", weights="imagenet", num_classes=10)
        >>> model.output_shape  # doctest: +SKIP
        (None, 10)
    """
    name = canonical_name(name)
    overrides = check_architecture(name, architecture)
    check_request(name, image_size=image_size, sequence_length=sequence_length, **overrides)
    source = os.fspath(weights)
    if name in TEXT_PRESETS:
        sizes = check_text_weights(
            name, weights, sequence_length=sequence_length, vocabulary_size=vocabulary_size
        )
        model = _text_classifier(
            name,
            num_classes=num_classes,
            sequence_length=sequence_length,
            vocabulary_size=sizes["vocabulary_size"],
            max_sequence_length=sizes["max_sequence_length"],
            num_segments=sizes["num_segments"],
            dropout=dropout,
            activation=fnet_weights_activation(weights),
            any_length=any_length,
        )
        load_pretrained_encoder(model, weights)
        return model
    model = create_model(
        name,
        num_classes=num_classes,
        image_size=image_size,
        drop_path_rate=drop_path_rate,
        **overrides,
    )
    builder, options = _vision_builder(name, overrides)
    common = {
        "input_shape": _input_shape(image_size),
        "drop_path_rate": drop_path_rate,
        "name": name,
        **options,
    }
    headless = {"include_top": False, "pooling": "avg"}
    if source.endswith(".keras"):
        classes = keras_head_classes(source)  # from its config: the donor loads the file once
    elif source.endswith(".weights.h5"):
        classes = head_classes(source, builder(**headless, **common))
    else:
        classes = None
    donor = (
        builder(**headless, weights=source, **common)
        if classes is None
        else builder(classes=classes, weights=source, **common)
    )
    copy_weights_except(model, donor, "head", source)
    return model
