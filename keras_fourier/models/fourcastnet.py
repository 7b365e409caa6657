"""FourCastNet: AFNO operators from N-channel fields to M-channel fields, and their rollout.

:func:`FourCastNet` builds a row of
:data:`~keras_fourier.models.fourcastnet_family.VARIANTS` (any field of it
overridden: grid, patch, channels, width, depth, AFNO options) as a
functional model from channels-last fields (B, H, W, in_channels) to
(B, H, W, out_channels); NVlabs/FourCastNet's PyTorch model takes and
returns channels-first (B, C, H, W) tensors (``np.moveaxis`` between the
two). :func:`rollout` steps a model autoregressively inside a compiled
graph. :func:`load_fourcastnet_checkpoint` reads and converts an official
checkpoint (``backbone.ckpt``, ``precip.ckpt``, or a ``.tar`` saved by
``train.py``) without PyTorch, all or nothing, through the family's key map
(:func:`fourcastnet_key_map`) and the generic machinery of
:mod:`keras_fourier.weights`.

Layer names follow the vision models', so the official keys map as
AFNONet's: ``stem_conv`` (``patch_embed.proj``), ``pos_embed``,
``stage0_block{i}_{norm1,mixer,norm2,ffn}`` (``blocks.{i}.{norm1,filter,
norm2,mlp}``), ``head`` (bias-free, ``head.weight``), and for the
precipitation model ``precip_pad`` and ``precip_conv`` (``conv``) after the
backbone (``backbone.``).

Reference:
    Pathak et al., "FourCastNet: A Global Data-driven High-resolution Weather
    Model using Adaptive Fourier Neural Operators", arXiv:2202.11214.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable

import keras
import numpy as np
from keras import ops

from keras_fourier.layers import PeriodicPad2D, PositionEmbedding, spectral
from keras_fourier.layers.fourier import MODE_SLICINGS
from keras_fourier.limits import check_memory
from keras_fourier.models.family import VisionSpec
from keras_fourier.models.fourcastnet_family import RELEASES, VARIANTS, FourCastNetSpec
from keras_fourier.models.fourcastnet_weights import (
    check_saved_settings,
    load_fourcastnet_checkpoint,
)
from keras_fourier.models.names import FIELD_PRESETS
from keras_fourier.models.vision import _block
from keras_fourier.validation import check_choice, check_positive_int, check_rate
from keras_fourier.weights.pipeline import download_release
from keras_fourier.weights.saved import load_saved_weights

# The fields of a row a builder call may override (``precip`` is chosen by the variant).
OVERRIDABLE = tuple(f.name for f in dataclasses.fields(FourCastNetSpec) if f.name != "precip")


def _check_spec(spec: FourCastNetSpec) -> None:
    size = spec.image_size
    if (
        not isinstance(size, (tuple, list))
        or len(size) != 2
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in size)
    ):
        raise ValueError(f"`image_size` must be (height, width). Received: image_size={size!r}")
    for name in ("patch_size", "in_channels", "out_channels", "embed_dim", "depth", "num_blocks"):
        check_positive_int(name, getattr(spec, name))
    if any(d % spec.patch_size for d in size):
        raise ValueError(
            f"`image_size` must be multiples of `patch_size` {spec.patch_size}. "
            f"Received: image_size={tuple(size)!r}"
        )
    if spec.embed_dim % spec.num_blocks:
        raise ValueError(
            f"`embed_dim` must be a multiple of `num_blocks` {spec.num_blocks}. "
            f"Received: embed_dim={spec.embed_dim!r}"
        )
    check_choice("mode_slicing", spec.mode_slicing, MODE_SLICINGS)


def _vision_spec(spec: FourCastNetSpec) -> VisionSpec:
    """The block wiring of `spec` as a one-stage vision row (AFNONet's blocks)."""
    afno = {
        "num_blocks": spec.num_blocks,
        "sparsity_threshold": spec.sparsity_threshold,
        "hard_thresholding_fraction": spec.hard_thresholding_fraction,
        "mode_slicing": spec.mode_slicing,
    }
    return VisionSpec(
        dims=(spec.embed_dim,),
        depths=(spec.depth,),
        patch_size=spec.patch_size,
        mixers=(("afno", afno),),
        ffn=("mlp", {"hidden_ratio": spec.mlp_ratio}),
        residual="single",
        double_skip=spec.double_skip,
        norm_epsilon=spec.norm_epsilon,
    )


def build_fourcastnet(
    spec: FourCastNetSpec,
    *,
    drop_path_rate: float = 0.0,
    fft_impl: str = "auto",
    name: str = "fourcastnet",
) -> keras.Model:
    """Builds the functional model of a FourCastNet row.

    Args:
        spec: the row.
        drop_path_rate: stochastic depth rate, spread linearly over the
            blocks. Default 0 (the official configs).
        fft_impl: "auto" (default), "fft" or "matmul" for every AFNO layer.
        name: model name. Default "fourcastnet".

    Returns:
        A `keras.Model` from (B, H, W, in_channels) to (B, H, W,
        out_channels), float32 outputs under any dtype policy.
    """
    _check_spec(spec)
    check_rate("drop_path_rate", drop_path_rate)
    spectral.validate_fft_impl(fft_impl)
    height, width = spec.image_size
    rows, cols = spec.grid
    patch = spec.patch_size
    inputs = keras.Input((height, width, spec.in_channels), name="fields")
    x = keras.layers.Conv2D(spec.embed_dim, patch, strides=patch, name="stem_conv")(inputs)
    x = PositionEmbedding(name="pos_embed")(x)
    blocks = _vision_spec(spec)
    for index, rate in enumerate(np.linspace(0.0, drop_path_rate, spec.depth).tolist()):
        x = _block(x, blocks, 0, index, rate, fft_impl, None)
    x = keras.layers.Dense(
        patch * patch * spec.out_channels, use_bias=False, dtype="float32", name="head"
    )(x)
    # (p1 p2 c) per token, then the tokens' patches laid out on the grid.
    x = keras.layers.Reshape(
        (rows, cols, patch, patch, spec.out_channels), dtype="float32", name="head_patches"
    )(x)
    x = keras.layers.Permute((1, 3, 2, 4, 5), dtype="float32", name="head_transpose")(x)
    x = keras.layers.Reshape((height, width, spec.out_channels), dtype="float32", name="head_grid")(
        x
    )
    if spec.precip:
        x = PeriodicPad2D(1, dtype="float32", name="precip_pad")(x)
        x = keras.layers.Conv2D(
            spec.out_channels, 3, activation="relu", dtype="float32", name="precip_conv"
        )(x)
    model = keras.Model(inputs, x, name=name)
    _official_init(model)
    return model


def _official_init(model: keras.Model) -> None:
    """Truncated-normal(0.02) Dense kernels, as the official ``_init_weights`` of every Linear.

    Biases start at zero and LayerNorm at (1, 0) in Keras already; the
    convolutions keep Keras's default (the official code leaves PyTorch's).
    """
    seed = keras.random.SeedGenerator()
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.Dense):
            layer.kernel.assign(
                keras.random.truncated_normal(layer.kernel.shape, stddev=0.02, seed=seed)
            )


def FourCastNet(
    variant: str = "fourcastnet",
    *,
    weights: str | os.PathLike | None = None,
    drop_path_rate: float = 0.0,
    fft_impl: str = "auto",
    name: str | None = None,
    **overrides,
) -> keras.Model:
    """Builds a FourCastNet operator: an N-channel field to an M-channel field.

    Patch embedding of the input channels, learned position embedding
    (the official (1, h * w, E) row-major tokens, kept as an (h, w) map),
    ``depth`` AFNO blocks (double skip, LayerNorm eps 1e-6, exact GELU,
    FourCastNet's mode slicing), and the bias-free linear head giving each
    token's p x p x out_channels values, laid out on the grid. The
    precipitation variant adds FourCastNet's periodic padding, 3x3
    convolution and ReLU.

    Args:
        variant: "fourcastnet" (default; ERA5 backbone, 20 -> 20 channels
            at 720 x 1440, 74,691,840 official parameters of which the
            1,536 of the never-applied final norm are not in this model) or
            "fourcastnet_precip" (20 -> 1, total precipitation).
        weights: None (random init, default), a release name of
            :data:`~keras_fourier.models.fourcastnet_family.RELEASES`
            ("fourcastnet_v0", "fourcastnet_precip_v0": downloaded once), an
            official checkpoint
            (``backbone.ckpt``/``precip.ckpt`` or a ``.tar`` of ``train.py``,
            read without PyTorch, see
            :func:`~keras_fourier.models.fourcastnet_weights.load_fourcastnet_checkpoint`),
            a ``.weights.h5`` file saved by Keras, or a ``.keras`` file saved
            by keras_fourier. A checkpoint or ``.weights.h5`` does not record
            ``hard_thresholding_fraction``, ``sparsity_threshold`` or
            ``mode_slicing`` (no tensor's shape shows them): pass those it
            was trained with, or it loads and computes something else; a
            ``.keras`` file records them and is refused where they differ.
        drop_path_rate: stochastic depth rate. Default 0.
        fft_impl: "auto" (default), "fft" or "matmul".
        name: model name. Default: the variant.
        **overrides: fields of
            :class:`~keras_fourier.models.fourcastnet_family.FourCastNetSpec`
            to change: ``image_size`` (any grid the patch divides),
            ``patch_size``, ``in_channels``, ``out_channels``, ``embed_dim``,
            ``depth``, ``mlp_ratio``, ``num_blocks``, ``sparsity_threshold``,
            ``hard_thresholding_fraction``, ``mode_slicing``,
            ``double_skip``, ``norm_epsilon``.

    Returns:
        A `keras.Model` from (B, H, W, in_channels) to (B, H, W, out_channels).

    Example:
        >>> model = FourCastNet(image_size=(32, 64), patch_size=4, in_channels=3,
        ...                     out_channels=3, embed_dim=32, depth=2, num_blocks=4)
        >>> model.output_shape
        (None, 32, 64, 3)
    """
    check_choice("variant", variant, tuple(VARIANTS))
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise TypeError(
            f"FourCastNet() got unexpected keyword arguments {unknown}; the row's fields are "
            f"{OVERRIDABLE}. Received: {', '.join(f'{k}={overrides[k]!r}' for k in unknown)}"
        )
    if "image_size" in overrides and isinstance(overrides["image_size"], list):
        overrides["image_size"] = tuple(overrides["image_size"])
    spec = dataclasses.replace(VARIANTS[variant], **overrides)
    model = build_fourcastnet(
        spec, drop_path_rate=drop_path_rate, fft_impl=fft_impl, name=name or variant
    )
    if weights in RELEASES:
        release = RELEASES[weights]
        if release.variant != variant:
            raise ValueError(
                f"Release {weights!r} holds the weights of variant {release.variant!r}, not "
                f"{variant!r}. Received: weights={weights!r}"
            )
        weights = download_release(release, f"weights={weights!r}", model)
    if weights is not None:
        path = os.fspath(weights)
        if not os.path.isfile(path):
            raise ValueError(
                "`weights` must be None or the path to an existing checkpoint or weights file. "
                f"Received: weights={weights!r}"
            )
        if path.endswith(".keras"):
            check_saved_settings(model, path)
        if not load_saved_weights(model, path):
            load_fourcastnet_checkpoint(model, path, variant)
    return model


def rollout(
    model: Callable,
    state,
    steps: int,
    *,
    residual: bool = False,
    hook: Callable | None = None,
):
    """Steps `model` autoregressively: each prediction is the next input.

    ``x_{t+1} = model(x_t)`` (``x_t + model(x_t)`` with `residual`), then
    ``hook(x_t, x_{t+1})`` if given (e.g. to re-normalise, clip or impose
    boundary values; it must keep the shape). Written with `keras.ops` and a
    loop the backend compiles (``keras.ops.fori_loop``), so it runs inside
    ``tf.function(jit_compile=True)``, ``jax.jit`` or a `keras.Model` call.

    Args:
        model: a callable from (B, ...) states to states of the same shape,
            e.g. a model built by :func:`FourCastNet` with equal input and
            output channels.
        state: the initial state (B, ...), e.g. a normalised field
            (B, H, W, C).
        steps: number of steps, a positive int (its trajectory held to
            :func:`~keras_fourier.limits.max_memory`), or a scalar int tensor
            (e.g. an input of an exported graph; its trajectory then has a
            free second dimension).
        residual: whether the model predicts the increment. Default False.
        hook: optional ``hook(previous, prediction) -> next_state``.

    Returns:
        The trajectory (B, steps, ...): the states after each step, in the
        state's dtype.

    Example:
        >>> model = FourCastNet(image_size=(16, 32), patch_size=4, in_channels=2,
        ...                     out_channels=2, embed_dim=16, depth=1, num_blocks=2)
        >>> rollout(model, keras.ops.zeros((1, 16, 32, 2)), 3).shape
        (1, 3, 16, 32, 2)
    """
    state = ops.convert_to_tensor(state)
    dtype = keras.backend.standardize_dtype(state.dtype)
    shape = tuple(state.shape)
    if isinstance(steps, int) or not hasattr(steps, "shape"):
        steps = check_positive_int("steps", steps)
        if None not in shape:
            check_memory(
                f"A rollout of {steps:,} steps of states of shape {shape}",
                steps * math.prod(shape) * np.dtype(dtype).itemsize,
                f"steps={steps}",
            )

    def step(previous):
        prediction = ops.cast(model(previous), dtype)
        if residual:
            prediction = previous + prediction
        if hook is not None:
            prediction = ops.cast(hook(previous, prediction), dtype)
        return ops.reshape(prediction, ops.shape(previous))

    def body(index, carry):
        current, trajectory = carry
        current = step(current)
        start = [0, index] + [0] * (len(shape) - 1)
        trajectory = ops.slice_update(trajectory, start, ops.expand_dims(current, 1))
        return current, trajectory

    trajectory = ops.zeros((ops.shape(state)[0], steps, *ops.shape(state)[1:]), dtype=dtype)
    _, trajectory = ops.fori_loop(0, steps, body, (state, trajectory))
    return trajectory


def field_model(
    name: str,
    *,
    image_size: int | tuple[int, int] | None = None,
    channels: int | None = None,
    drop_path_rate: float | None = None,
    weights: str | os.PathLike | None = None,
    fft_impl: str = "auto",
    dims: int | None = None,
    depths: int | None = None,
    patch_size: int | None = None,
) -> keras.Model:
    """Builds a field model by its training name (a row of `FIELD_PRESETS`).

    "fourcastnet" and "fourcastnet_precip" are the official rows;
    "fourcastnet_tiny" is a small operator that predicts the increment
    (its output is the input plus the operator's), as
    ``keras-fourier train --task forecast`` trains it.

    Args:
        name: a key of :data:`~keras_fourier.models.names.FIELD_PRESETS`.
        image_size: the grid (H, W), or an int for a square one. Default
            None: the row's (720 x 1440).
        channels: the input channels (and the output channels but for the
            precipitation row, which outputs 1). Default None: the row's (20).
        drop_path_rate: stochastic depth rate. Default None: 0.
        weights: as :func:`FourCastNet`'s. Default None.
        fft_impl: "auto" (default), "fft" or "matmul".
        dims: the token width (``embed_dim``). Default None: the row's.
        depths: the AFNO blocks (``depth``). Default None: the row's.
        patch_size: the patch side. Default None: the row's.

    Returns:
        A `keras.Model` from (B, H, W, channels) fields named ``fields``.

    Example:
        >>> field_model("fourcastnet_tiny", image_size=(16, 32), channels=2).output_shape
        (None, 16, 32, 2)
    """
    preset = dict(FIELD_PRESETS[name])
    variant = preset.pop("variant")
    residual = preset.pop("residual", False)
    if image_size is not None:
        preset["image_size"] = (
            (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        )
    for key, value in (("embed_dim", dims), ("depth", depths), ("patch_size", patch_size)):
        if value is not None:
            preset[key] = value
    if channels is not None:
        preset["in_channels"] = channels
        if not VARIANTS[variant].precip:
            preset["out_channels"] = channels
    model = FourCastNet(
        variant,
        weights=weights,
        drop_path_rate=drop_path_rate or 0.0,
        fft_impl=fft_impl,
        name=name,
        **preset,
    )
    if not residual:
        return model
    outputs = keras.layers.Add(dtype="float32", name="residual")([model.input, model.output])
    return keras.Model(model.input, outputs, name=name)
