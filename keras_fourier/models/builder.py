"""`build_model`: any token mixer with any FFN, isotropic or hierarchical."""

from __future__ import annotations

import keras

from keras_fourier.models.family import FFNS, MIXERS, VisionSpec
from keras_fourier.models.vision import build_vision_model
from keras_fourier.validation import check_choice, check_number
from keras_fourier.weights.saved import load_file_weights


def _as_tuple(name: str, value) -> tuple[int, ...]:
    values = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    if not values or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values
    ):
        raise ValueError(
            f"`{name}` must be a positive int or a list of them. Received: {name}={value!r}"
        )
    return values


def _default_mixer_kwargs(mixer: str, dim: int, stage: int, hierarchical: bool) -> dict:
    if mixer in ("gnconv", "gnconv_gf"):
        order = stage + 2 if hierarchical else 3
        while order > 1 and dim % 2 ** (order - 1):
            order -= 1
        return {"order": order, "scale": 1.0 / 3.0}
    if mixer == "attention":
        heads = max(1, dim // 64)
        return {"num_heads": heads if dim % heads == 0 else 1}
    if mixer == "afno":
        return {"num_blocks": 8 if dim % 8 == 0 else 1}
    return {}


def build_model(
    mixer: str = "global_filter",
    ffn: str = "mlp",
    *,
    depths: int | list[int] = 12,
    dims: int | list[int] = 384,
    patch_size: int | None = None,
    mixer_kwargs: dict | None = None,
    ffn_kwargs: dict | None = None,
    layer_scale: float | None = None,
    position_embedding: bool | None = None,
    include_top: bool = True,
    include_preprocessing: bool = True,
    weights: str | None = None,
    input_tensor=None,
    input_shape: tuple[int, int, int] | None = None,
    pooling: str | None = None,
    classes: int = 1000,
    classifier_activation: str | None = "softmax",
    drop_path_rate: float = 0.0,
    fft_impl: str = "auto",
    name: str | None = None,
) -> keras.Model:
    """Builds a vision model from any token mixer and any FFN.

    Blocks are pre-norm with a residual around the mixer and one around the
    FFN (the MetaFormer layout): ``x + mixer(norm1(x))``, then
    ``x + ffn(norm2(x))``, each branch with optional LayerScale and drop path.
    An int `depths` gives an isotropic model (one stage of `dims` channels
    after a `patch_size` stem, patch 16 by default); lists give a
    hierarchical model (patch 4 by default, 2x2 stride-2 downsampling
    between stages).

    Args:
        mixer: one of "global_filter", "afno", "fourier", "gnconv",
            "gnconv_gf", "attention". Default "global_filter".
        ffn: one of "mlp", "glu", "afbo", "scfbo_gc", "scfbo_oc". Default "mlp".
        depths: blocks (int, isotropic) or blocks per stage (list). Default 12.
        dims: channels (int) or channels per stage (list, same length as
            `depths`). Default 384.
        patch_size: stem stride; default 16 isotropic, 4 hierarchical.
        mixer_kwargs: keyword arguments of every mixer, overriding the
            defaults (gnConv order 2-5 by stage or 3 isotropic, one attention
            head per 64 channels, 8 AFNO blocks).
        ffn_kwargs: keyword arguments of every FFN.
        layer_scale: LayerScale init value, or None (default) for none.
        position_embedding: learned position embedding after the stem;
            default True for isotropic models, False for hierarchical ones.
        include_top: whether to include the classification head. Default True.
        include_preprocessing: whether the model normalises its 0-255 RGB
            inputs with the ImageNet mean and std. Default True.
        weights: None (random init, default) or a `.weights.h5`/`.keras`
            file saved by keras_fourier.
        input_tensor: optional Keras tensor to use as the image input.
        input_shape: (height, width, channels); None for the height and/or
            width builds an any-size model. Default None: (224, 224, 3).
        pooling: without the top, None (the final feature map), "avg" or
            "max".
        classes: classes of the head. Default 1000.
        classifier_activation: activation of the head; None returns
            logits. Default "softmax".
        drop_path_rate: stochastic depth rate. Default 0.
        fft_impl: "auto" (default), "fft" or "matmul".
        name: model name; default "{mixer}_{ffn}".

    Returns:
        A `keras.Model`.

    Example:
        >>> model = build_model("afno", "afbo", depths=4, dims=64, patch_size=4,
        ...                     input_shape=(32, 32, 3), classes=10)
        >>> model.output_shape
        (None, 10)
    """
    check_choice("mixer", mixer, MIXERS)
    check_choice("ffn", ffn, FFNS)
    hierarchical = not isinstance(depths, int)
    depths_t = _as_tuple("depths", depths)
    dims_t = _as_tuple("dims", dims)
    if len(dims_t) != len(depths_t):
        raise ValueError(
            "`dims` must have one entry per stage of `depths`. "
            f"Received: depths={depths!r}, dims={dims!r}"
        )
    if patch_size is None:
        patch_size = 4 if hierarchical else 16
    _as_tuple("patch_size", patch_size)
    if layer_scale is not None:
        layer_scale = check_number("layer_scale", layer_scale, low=0, low_open=True)
    spec = VisionSpec(
        dims=dims_t,
        depths=depths_t,
        patch_size=patch_size,
        mixers=tuple(
            (
                mixer,
                {**_default_mixer_kwargs(mixer, dim, stage, hierarchical), **(mixer_kwargs or {})},
            )
            for stage, dim in enumerate(dims_t)
        ),
        ffn=(ffn, dict(ffn_kwargs or {})),
        residual="two",
        layer_scale=layer_scale,
        pos_embed=not hierarchical if position_embedding is None else position_embedding,
    )
    return build_vision_model(
        spec,
        include_top=include_top,
        include_preprocessing=include_preprocessing,
        weights=weights,
        input_tensor=input_tensor,
        input_shape=input_shape,
        pooling=pooling,
        classes=classes,
        classifier_activation=classifier_activation,
        drop_path_rate=drop_path_rate,
        fft_impl=fft_impl,
        name=name or f"{mixer}_{ffn}",
        load_weights=load_file_weights,
    )
