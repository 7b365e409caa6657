"""The one generic builder behind every vision model of keras_fourier.

A model is a row of a variant table, a :class:`VisionSpec`: stem, stages of
blocks (each a token mixer and an FFN with their residual wiring), final norm,
pooling and head. GFNet, GFNet-H, HorNet, AFNONet and `build_model` are all
rows fed to :func:`build_vision_model`; the family modules only hold their
rows.

Layer names are stable, so checkpoint conversion is a key map:

* ``preprocessing``: ImageNet normalisation of 0-255 pixels (optional);
* ``stem_conv`` (+ ``stem_norm``), ``pos_embed``;
* ``downsample{s}_norm`` / ``downsample{s}_conv`` before stage s > 0;
* ``stage{s}_block{j}_{part}`` with parts ``norm1``, ``mixer``, ``norm2``,
  ``ffn``, ``ls1``/``ls2`` (LayerScale), ``drop_path1``/``drop_path2``;
* ``stage{s}_output``: identity marking each stage's output feature map;
* ``norm``, ``head``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from keras_fourier import layers
from keras_fourier.layers import DropPath, LayerScale, spectral
from keras_fourier.layers.position import PositionEmbedding, StrideCheck
from keras_fourier.models.family import FFNS, MIXERS, Component, VisionSpec
from keras_fourier.validation import check_choice, check_positive_int, check_rate

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# The size an any-size model's filters and position embeddings are built for
# (H or W given as None): the training size of every official release.
BUILT_SIZE = 224
POOLINGS = (None, "avg", "max")


def component_layer(row: Component, **kwargs) -> keras.layers.Layer:
    """The layer of a mixer or FFN row of `models.family.MIXERS`/`FFNS`.

    Args:
        row: the component's row.
        **kwargs: the layer's arguments, over the row's own.

    Returns:
        A new layer.

    Example:
        >>> component_layer(MIXERS["gnconv"], order=3).spatial_mixing
        'dwconv'
    """
    return getattr(layers, row.layer)(**{**row.kwargs, **kwargs})


def _check_input_shape(spec: VisionSpec, input_shape, weights) -> tuple:
    if input_shape is None:
        input_shape = (BUILT_SIZE, BUILT_SIZE, 3)
    if (
        not isinstance(input_shape, (tuple, list))
        or len(input_shape) != 3
        or not all(
            (isinstance(d, int) and not isinstance(d, bool) and d > 0) or (d is None and i < 2)
            for i, d in enumerate(input_shape)
        )
    ):
        raise ValueError(
            "`input_shape` must be (height, width, channels): positive ints, with None for a "
            "height or width of any size. "
            f"Received: input_shape={input_shape!r}"
        )
    height, width, channels = input_shape
    if any(d is not None and d % spec.stride for d in (height, width)):
        raise ValueError(
            f"`input_shape` height and width must be multiples of the model's stride "
            f"{spec.stride}. Received: input_shape={tuple(input_shape)!r}"
        )
    fixed = [MIXERS[name].layer for name, _ in spec.mixers if not MIXERS[name].any_size]
    if None in (height, width) and fixed:
        raise ValueError(
            f"{fixed[0]} mixes over the whole token map and has no any-size form; give "
            f"`input_shape` a fixed height and width. Received: input_shape={tuple(input_shape)!r}"
        )
    if weights is not None and channels != 3:
        raise ValueError(
            "Pretrained weights need 3 input channels. "
            f"Received: input_shape={tuple(input_shape)!r}, weights={weights!r}"
        )
    return height, width, channels


def check_weights_argument(weights, include_top: bool, classes: int) -> None:
    """keras.applications checks of `weights` and `classes`."""
    if weights is None or weights == "imagenet":
        pass
    elif not isinstance(weights, (str, os.PathLike)):
        raise ValueError(
            "`weights` must be None, 'imagenet' or the path to a weights file. "
            f"Received: weights={weights!r}"
        )
    elif not os.path.exists(weights):
        raise ValueError(
            "`weights` must be None, 'imagenet' or the path to an existing weights file. "
            f"Received: weights={weights!r} (no such file)"
        )
    check_positive_int("classes", classes)
    if weights == "imagenet" and include_top and classes != 1000:
        raise ValueError(
            "With weights='imagenet' and include_top=True, `classes` must be 1000. "
            f"Received: classes={classes}"
        )


def _mixer(
    spec: VisionSpec, stage: int, fft_impl: str, name: str, grid: tuple[int, int] | None
) -> keras.layers.Layer:
    mixer_name, kwargs = spec.mixers[stage]
    row = MIXERS[mixer_name]
    kwargs = dict(kwargs)
    if row.fourier:
        kwargs["fft_impl"] = fft_impl
    if grid is not None and row.filter_size is not None:
        kwargs.update(row.filter_size(*grid))
    return component_layer(row, name=name, **kwargs)


def _block(
    x,
    spec: VisionSpec,
    stage: int,
    index: int,
    drop_path: float,
    fft_impl: str,
    grid: tuple[int, int] | None,
):
    prefix = f"stage{stage}_block{index}"

    def norm(part: str):
        return keras.layers.LayerNormalization(epsilon=spec.norm_epsilon, name=f"{prefix}_{part}")

    def branch(y, part: str):
        if spec.layer_scale is not None:
            y = LayerScale(spec.layer_scale, name=f"{prefix}_ls{part}")(y)
        if drop_path > 0:
            y = DropPath(drop_path, name=f"{prefix}_drop_path{part}")(y)
        return y

    ffn_name, ffn_kwargs = spec.ffn
    ffn = component_layer(FFNS[ffn_name], name=f"{prefix}_ffn", **ffn_kwargs)
    mixer = _mixer(spec, stage, fft_impl, f"{prefix}_mixer", grid)
    if spec.residual == "two":
        x = keras.layers.Add(name=f"{prefix}_add1")([x, branch(mixer(norm("norm1")(x)), "1")])
        return keras.layers.Add(name=f"{prefix}_add2")([x, branch(ffn(norm("norm2")(x)), "2")])
    mixed = mixer(norm("norm1")(x))
    if spec.double_skip:
        x = mixed = keras.layers.Add(name=f"{prefix}_skip")([mixed, x])
    return keras.layers.Add(name=f"{prefix}_add")([x, branch(ffn(norm("norm2")(mixed)), "")])


def _input_tensor_shape(spec: VisionSpec, input_tensor) -> tuple:
    """(H, W, C) of `input_tensor` (H and W may be None), checked like `input_shape`."""
    shape = tuple(input_tensor.shape)
    if len(shape) != 4 or shape[-1] is None:
        raise ValueError(
            "`input_tensor` must be a (batch, height, width, channels) tensor with static "
            f"channels. Received: input_tensor with shape {shape}"
        )
    height, width, channels = (None if d is None else int(d) for d in shape[1:])
    if any(d is not None and d % spec.stride for d in (height, width)):
        raise ValueError(
            f"`input_tensor` height and width must be multiples of the model's stride "
            f"{spec.stride}, or the stem and downsampling convolutions drop edge pixels. "
            f"Received: input_tensor with shape {shape}"
        )
    return height, width, channels


def _inputs(input_tensor, shape):
    if input_tensor is None:
        return keras.Input(shape, name="images")
    if not keras.backend.is_keras_tensor(input_tensor):
        return keras.Input(tensor=input_tensor, shape=shape, name="images")
    return input_tensor


def _official_init(model: keras.Model) -> None:
    """Truncated-normal(0.02) for every Dense and convolution kernel.

    The official code applies this to every Linear (and, in HorNet, every
    Conv2d) at construction; Keras defaults would be Glorot. Biases already
    start at zero in Keras.
    """
    seed = keras.random.SeedGenerator()
    for variable in model.weights:
        if variable.name == "kernel":
            variable.assign(
                keras.random.truncated_normal(
                    variable.shape, stddev=0.02, dtype=variable.dtype, seed=seed
                )
            )


def build_vision_model(
    spec: VisionSpec,
    *,
    include_top: bool = True,
    include_preprocessing: bool = True,
    weights: str | None = None,
    input_tensor=None,
    input_shape: tuple[int, int, int] | None = None,
    pooling: str | None = None,
    classes: int = 1000,
    classifier_activation: str | None = "softmax",
    drop_path_rate: float | None = None,
    fft_impl: str = "auto",
    name: str = "vision_model",
    load_weights: Callable[[keras.Model, Any], None] | None = None,
    built_size: int = BUILT_SIZE,
) -> keras.Model:
    """Builds the functional model of `spec` with keras.applications semantics.

    Args:
        spec: the variant's row.
        include_top: whether to add the classification head.
        include_preprocessing: whether the model normalises 0-255 pixels
            with the ImageNet mean and std itself.
        weights: None, "imagenet", or a weights file path (loaded by
            `load_weights`).
        input_tensor: optional Keras tensor to use as the image input.
        input_shape: (H, W, C); H and W multiples of the model's stride.
            Default (224, 224, 3). None for H and/or W builds an any-size
            model (see :func:`any_size_grid`).
        pooling: without the top, None (feature map), "avg" or "max".
        classes: number of classes of the head.
        classifier_activation: activation of the head, None for logits.
        drop_path_rate: stochastic depth rate, None for the variant default.
        fft_impl: "auto", "fft" or "matmul" for every Fourier layer.
        name: model name.
        load_weights: callable(model, weights) that loads non-None weights.
        built_size: the size an any-size model's filters and position
            embeddings are built for (see :func:`any_size_grid`). Default
            :data:`BUILT_SIZE`; HorNet's segmentation models use 384.

    Returns:
        A `keras.Model`.
    """
    check_choice("pooling", pooling, POOLINGS)
    check_weights_argument(weights, include_top, classes)
    if drop_path_rate is None:
        drop_path_rate = spec.drop_path_rate
    check_rate("drop_path_rate", drop_path_rate)
    spectral.validate_fft_impl(fft_impl)
    if input_tensor is not None:
        tensor_shape = _input_tensor_shape(spec, input_tensor)
        if input_shape is None:
            input_shape = tensor_shape
        elif tuple(input_shape) != tensor_shape:
            raise ValueError(
                "`input_shape` must match the shape of `input_tensor` when both are given. "
                f"Received: input_shape={tuple(input_shape)!r}, input_tensor with shape "
                f"{tuple(input_tensor.shape)}"
            )
    shape = _check_input_shape(spec, input_shape, weights)
    inputs = _inputs(input_tensor, shape)
    grids = any_size_grid(spec, shape[:2], built_size)
    x = inputs
    if grids is not None:
        x = StrideCheck(spec.stride, name="stride_check")(x)
    if include_preprocessing and x.shape[-1] != 3:
        raise ValueError(
            "include_preprocessing=True normalises RGB images with the ImageNet mean and std, "
            "so the input needs 3 channels; pass include_preprocessing=False for other inputs. "
            f"Received: input_shape={tuple(x.shape[1:])!r}"
        )
    if include_preprocessing:
        x = keras.layers.Normalization(
            mean=[255.0 * m for m in IMAGENET_MEAN],
            variance=[(255.0 * s) ** 2 for s in IMAGENET_STD],
            name="preprocessing",
        )(x)
    x = keras.layers.Conv2D(
        spec.dims[0], spec.patch_size, strides=spec.patch_size, name="stem_conv"
    )(x)
    if spec.stem_norm:
        x = keras.layers.LayerNormalization(epsilon=spec.norm_epsilon, name="stem_norm")(x)
    if spec.pos_embed:
        height, width = grids[0] if grids is not None else (None, None)
        x = PositionEmbedding(height=height, width=width, name="pos_embed")(x)
    rates = np.linspace(0.0, drop_path_rate, sum(spec.depths)).tolist()
    for stage, (dim, depth) in enumerate(zip(spec.dims, spec.depths, strict=True)):
        if stage > 0:
            if spec.downsample_norm:
                x = keras.layers.LayerNormalization(
                    epsilon=spec.norm_epsilon, name=f"downsample{stage}_norm"
                )(x)
            x = keras.layers.Conv2D(dim, 2, strides=2, name=f"downsample{stage}_conv")(x)
        for index in range(depth):
            grid = grids[stage] if grids is not None else None
            x = _block(x, spec, stage, index, rates.pop(0), fft_impl, grid)
        x = keras.layers.Identity(name=f"stage{stage}_output")(x)

    final_norm = keras.layers.LayerNormalization(epsilon=spec.norm_epsilon, name="norm")
    global_pool = {
        "avg": keras.layers.GlobalAveragePooling2D,
        "max": keras.layers.GlobalMaxPooling2D,
    }
    pool = "avg" if include_top else pooling
    if pool is None:
        x = x if spec.pool_before_norm else final_norm(x)
    elif spec.pool_before_norm:
        x = final_norm(global_pool[pool](name="pool")(x))
    else:
        x = global_pool[pool](name="pool")(final_norm(x))
    if include_top:
        x = keras.layers.Dense(
            classes, activation=classifier_activation, dtype="float32", name="head"
        )(x)
    source = inputs
    if input_tensor is not None:
        sources = keras.utils.get_source_inputs(inputs)
        source = sources[0] if len(sources) == 1 else sources
    model = keras.Model(source, x, name=name)
    _official_init(model)
    if weights is not None:
        if load_weights is None:
            raise ValueError(f"This model has no weight loader. Received: weights={weights!r}")
        load_weights(model, weights)
    return model


def any_size_grid(
    spec: VisionSpec, size: tuple, built_size: int = BUILT_SIZE
) -> list[tuple[int, int]] | None:
    """Per stage, the token grid an any-size model's filters are built for; None if fixed.

    An input height or width of None makes an any-size model: it runs at
    every size its stride divides, its global filters and position
    embedding built for :data:`BUILT_SIZE` pixels on that axis (the official
    releases' training size) and resized in the graph to the run-time size
    (GFNet filters bicubic with ``align_corners=True``, HorNet's bilinear
    with ``align_corners=True``, position embeddings bicubic; AFNO needs no
    resize).

    Args:
        spec: the variant's row.
        size: (height, width) of the input, ints or None.
        built_size: the pixels of an axis given as None. Default
            :data:`BUILT_SIZE`.

    Returns:
        None when both are ints, else [(h_s, w_s) for each stage s].

    Example:
        >>> any_size_grid(keras_fourier.models.gfnet.VARIANTS["gfnet_ti"], (None, None))
        [(14, 14)]
    """
    if None not in size:
        return None
    height, width = (built_size if d is None else d for d in size)
    strides = [spec.patch_size * 2**stage for stage in range(len(spec.dims))]
    return [(height // stride, width // stride) for stride in strides]


def feature_extractor(model: keras.Model) -> keras.Model:
    """A model returning the per-stage feature maps of a keras_fourier vision model.

    Args:
        model: a model built by keras_fourier (any `include_top`), of a
            fixed or of any size (``input_shape=(None, None, 3)``); the
            features of an any-size model follow its input size, a feature
            pyramid for dense prediction at any resolution its stride
            divides.

    Returns:
        A `keras.Model` with the same inputs whose output is a dict
        {"stage0": (B, H/s0, W/s0, C0), "stage1": ...}: the output of every
        stage (four for GFNet-H and HorNet, one, the last token map, for
        isotropic models).

    Example:
        >>> features = feature_extractor(keras_fourier.HorNetT7x7())
        >>> sorted(features.output)
        ['stage0', 'stage1', 'stage2', 'stage3']
    """
    outputs = {
        layer.name.removesuffix("_output"): layer.output
        for layer in model.layers
        if layer.name.startswith("stage") and layer.name.endswith("_output")
    }
    if not outputs:
        raise ValueError(
            f"`model` has no stage outputs; is it a keras_fourier vision model? "
            f"Received: model={model.name!r}"
        )
    return keras.Model(model.input, outputs, name=f"{model.name}_features")
