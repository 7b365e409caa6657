"""The variant table and the factory that turns its rows into named builders.

Every named builder (``GFNetS``, ``HorNetTGF``, ...) is made here from a row
of :data:`VARIANTS`, so they share one signature, one docstring and one code
path, :func:`keras_fourier.models.vision.build_vision_model`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable

import keras

from keras_fourier.models import afnonet, gfnet, hornet
from keras_fourier.models.vision import VisionSpec, build_vision_model
from keras_fourier.models.weights import load_variant_weights

VARIANTS: dict[str, VisionSpec] = {**gfnet.VARIANTS, **hornet.VARIANTS, **afnonet.VARIANTS}

# Public builder name -> (variant key, VisionSpec fields exposed as keyword arguments).
BUILDERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "GFNetTi": ("gfnet_ti", ()),
    "GFNetXS": ("gfnet_xs", ()),
    "GFNetS": ("gfnet_s", ()),
    "GFNetB": ("gfnet_b", ()),
    "GFNetHTi": ("gfnet_h_ti", ()),
    "GFNetHS": ("gfnet_h_s", ()),
    "GFNetHB": ("gfnet_h_b", ()),
    "HorNetT7x7": ("hornet_t_7x7", ()),
    "HorNetTGF": ("hornet_t_gf", ()),
    "HorNetS7x7": ("hornet_s_7x7", ()),
    "HorNetSGF": ("hornet_s_gf", ()),
    "HorNetB7x7": ("hornet_b_7x7", ()),
    "HorNetBGF": ("hornet_b_gf", ()),
    "HorNetL7x7": ("hornet_l_7x7", ()),
    "HorNetLGF": ("hornet_l_gf", ()),
    "AFNONetS4": ("afnonet_s4", ("double_skip",)),
}

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


def make_builder(public: str) -> Callable[..., keras.Model]:
    """Makes the named builder `public` from its row of the variant table."""
    variant, options = BUILDERS[public]
    spec = VARIANTS[variant]
    family = next(m for m in (gfnet, hornet, afnonet) if variant in m.VARIANTS)

    def builder(**kwargs) -> keras.Model:
        bound = builder.__signature__.bind(**kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        overrides = {option: arguments.pop(option) for option in options}
        return build_vision_model(
            dataclasses.replace(spec, **overrides),
            load_weights=functools.partial(load_variant_weights, variant),
            **arguments,
        )

    parameters = [
        inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default)
        for arg, default in (
            ("include_top", True),
            ("include_preprocessing", True),
            ("weights", None),
            ("input_tensor", None),
            ("input_shape", None),
            ("pooling", None),
            ("classes", 1000),
            ("classifier_activation", "softmax"),
            ("drop_path_rate", spec.drop_path_rate),
            ("fft_impl", "auto"),
            ("name", variant),
            *((option, getattr(spec, option)) for option in options),
        )
    ]
    builder.__signature__ = inspect.Signature(parameters, return_annotation=keras.Model)
    builder.__name__ = builder.__qualname__ = public
    builder.__module__ = "keras_fourier"
    builder.__doc__ = _DOC.format(
        public=public,
        variant=variant,
        summary=(family.__doc__ or "").strip().split("\n\n")[0],
        stride=spec.stride,
        drop_path_rate=spec.drop_path_rate,
        extra_args="".join(_EXTRA_ARG_DOCS[o] for o in options),
    )
    return builder
