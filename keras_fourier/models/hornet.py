"""HorNet rows: T/S/B/L, each with 7x7 depthwise or global-filter (GF) gnConv.

Wiring as the official code: 4x4 stem conv then LayerNorm; before stages
2-4, LayerNorm then a 2x2 stride-2 conv; blocks with two residuals,
``x + drop_path(gamma1 * gnconv(norm1(x)))`` and
``x + drop_path(gamma2 * mlp(norm2(x)))`` (LayerScale 1e-6); gnConv orders
2, 3, 4, 5 by stage with scale 1/3; in GF variants stages 3 and 4 mix with
the global-local filter; pooling before the final norm. The official
channels-first LayerNorms are LayerNorms over the channel axis here.

Reference:
    Rao et al., "HorNet: Efficient High-Order Spatial Interactions with
    Recursive Gated Convolutions", NeurIPS 2022.
"""

from __future__ import annotations

from keras_fourier.models.family import Family, VisionSpec
from keras_fourier.models.keymap import BLOCK, DOWNSAMPLE, PARAMETERS, common_key, inner_key
from keras_fourier.weights.releases import TRAINING_CHECKPOINT, ImageNetRelease, ModelZoo

_SCALE = 1.0 / 3.0


def _hornet(base_dim: int, global_filter: bool, drop_path_rate: float) -> VisionSpec:
    mixers = tuple(
        (
            "gnconv_gf" if global_filter and stage >= 2 else "gnconv",
            {"order": stage + 2, "scale": _SCALE},
        )
        for stage in range(4)
    )
    return VisionSpec(
        dims=(base_dim, 2 * base_dim, 4 * base_dim, 8 * base_dim),
        depths=(2, 3, 18, 2),
        patch_size=4,
        mixers=mixers,
        residual="two",
        layer_scale=1e-6,
        stem_norm=True,
        downsample_norm=True,
        pool_before_norm=True,
        drop_path_rate=drop_path_rate,
    )


VARIANTS: dict[str, VisionSpec] = {
    f"hornet_{size}_{kind}": _hornet(base_dim, kind == "gf", rate)
    for size, base_dim, rate in (("t", 64, 0.2), ("s", 96, 0.4), ("b", 128, 0.5), ("l", 192, 0.5))
    for kind in ("7x7", "gf")
}


# Evaluated as ConvNeXt: bicubic resize to int(size / 0.875) and centre crop below 384
# pixels; at 384, a bicubic resize to 384 x 384 without cropping.
# The README gives no file sizes: each may be a training checkpoint (EMA copy, AdamW moments).
_ZOO = ModelZoo(
    "https://github.com/raoyongming/HorNet",
    "MIT",
    uncropped_from=384,
    values_per_parameter=TRAINING_CHECKPOINT,
)

# The model zoo of the official README: ImageNet-1k (T/S/B) and ImageNet-22k (L) checkpoints.
RELEASES: dict[str, tuple[ImageNetRelease, ...]] = {
    "hornet_t_7x7": (_ZOO.release("hornet_tiny_7x7.pth", "bac9690c72944d19aca1", 82.8),),
    "hornet_t_gf": (_ZOO.release("hornet_tiny_gf.pth", "460e759c82324ea6bfa3", 83.0),),
    "hornet_s_7x7": (_ZOO.release("hornet_small_7x7.pth", "8ef64277da0e469ea857", 83.8),),
    "hornet_s_gf": (_ZOO.release("hornet_small_gf.pth", "959603ca287d4c09ad49", 84.0),),
    "hornet_b_7x7": (_ZOO.release("hornet_base_7x7.pth", "13a748487711492e9704", 84.2),),
    "hornet_b_gf": (_ZOO.release("hornet_base_gf.pth", "c212d1d8a3914b47a5c1", 84.3),),
    "hornet_l_7x7": (_ZOO.release("hornet_large_7x7.pth", "c2fc23caae084a3aa73d", None, 21841),),
    "hornet_l_gf": (
        _ZOO.release("hornet_large_gf.pth", "8600206ebdfa485f98d0", None, 21841),
        _ZOO.release("hornet_large_gf_img384.pth", "eec48d5eca5a48d98fd2", None, 21841, 384),
    ),
}


def checkpoint_key(variant: str, path: str) -> str | None:
    """The key in the official HorNet checkpoints of the Keras variable at `path`.

    Args:
        variant: a HorNet variant key.
        path: a variable path of the model built from it.

    Returns:
        The official state-dict key, or None for a variable without one.

    Example:
        >>> checkpoint_key("hornet_t_gf", "stage2_block0_ffn/fc1/kernel")
        'stages.2.0.pwconv1.weight'
    """
    del variant  # every HorNet row has the same naming
    layer, *inner, name = path.split("/")
    if layer == "stem_conv":
        return f"downsample_layers.0.0.{PARAMETERS[name]}"
    if layer == "stem_norm":
        return f"downsample_layers.0.1.{PARAMETERS[name]}"
    downsample = DOWNSAMPLE.fullmatch(layer)
    if downsample:
        stage, kind = downsample.groups()
        return f"downsample_layers.{stage}.{0 if kind == 'norm' else 1}.{PARAMETERS[name]}"
    block = BLOCK.fullmatch(layer)
    if block:
        stage, index, part = block.groups()
        prefix = f"stages.{stage}.{index}"
        if part in ("ls", "ls1", "ls2"):
            return f"{prefix}.gamma{part[2:]}"
        if part in ("norm1", "norm2"):
            return f"{prefix}.{part}.{inner_key(inner, name)}"
        if part == "mixer":
            return f"{prefix}.gnconv.{inner_key(inner, name)}"
        ffn_layer = {"fc1": "pwconv1", "fc2": "pwconv2"}[inner[0]]
        return f"{prefix}.{inner_key([ffn_layer, *inner[1:]], name)}"
    return common_key(path)


HORNET = Family(
    "HorNet",
    __doc__.split("\n\n")[0],
    variants=VARIANTS,
    builders={
        f"HorNet{size.upper()}{suffix}": f"hornet_{size}_{kind}"
        for size in ("t", "s", "b", "l")
        for kind, suffix in (("7x7", "7x7"), ("gf", "GF"))
    },
    releases=RELEASES,
    checkpoint_key=checkpoint_key,
)
