"""GFNet: isotropic (Ti/XS/S/B, patch 16) and hierarchical (H-Ti/S/B, patch 4) rows.

Wiring as the official code: one residual per block,
``x + drop_path(gamma * mlp(norm2(filter(norm1(x)))))`` (gamma: LayerScale,
hierarchical models only), learned position embedding after the stem,
LayerNorm eps 1e-6, exact GELU, final norm then mean over tokens. GFNet-H
downsamples with 2x2 stride-2 convs without norms. Default drop-path rates
are those of the official training configs.

Reference:
    Rao et al., "Global Filter Networks for Image Classification", NeurIPS 2021.
"""

from __future__ import annotations

from keras_fourier.models.family import Family, VisionSpec
from keras_fourier.models.keymap import BLOCK, DOWNSAMPLE, PARAMETERS, common_key, inner_key
from keras_fourier.weights.releases import ImageNetRelease, ModelZoo

_FILTER = ("global_filter", {})


def _isotropic(dim: int, depth: int, drop_path_rate: float) -> VisionSpec:
    return VisionSpec(
        dims=(dim,),
        depths=(depth,),
        patch_size=16,
        mixers=(_FILTER,),
        pos_embed=True,
        drop_path_rate=drop_path_rate,
    )


def _hierarchical(
    dims: tuple[int, ...], depths: tuple[int, ...], layer_scale: float, drop_path_rate: float
) -> VisionSpec:
    return VisionSpec(
        dims=dims,
        depths=depths,
        patch_size=4,
        mixers=(_FILTER,) * 4,
        layer_scale=layer_scale,
        pos_embed=True,
        drop_path_rate=drop_path_rate,
    )


VARIANTS: dict[str, VisionSpec] = {
    "gfnet_ti": _isotropic(256, 12, 0.0),
    "gfnet_xs": _isotropic(384, 12, 0.0),
    "gfnet_s": _isotropic(384, 19, 0.15),
    "gfnet_b": _isotropic(512, 19, 0.25),
    "gfnet_h_ti": _hierarchical((64, 128, 256, 512), (3, 3, 10, 3), 1e-3, 0.1),
    "gfnet_h_s": _hierarchical((96, 192, 384, 768), (3, 3, 10, 3), 1e-5, 0.2),
    "gfnet_h_b": _hierarchical((96, 192, 384, 768), (3, 3, 27, 3), 1e-6, 0.4),
}


# Evaluated as DeiT/timm: bicubic resize to int(256 / 224 * 224), centre crop 224.
# The files hold the weights only (the GFNet-Ti checkpoint is about 30 MB: 7.5 million
# float32 parameters).
_ZOO = ModelZoo("https://github.com/raoyongming/GFNet", "MIT")

# The model zoo of the official README (ImageNet-1k, 224 pixels).
RELEASES: dict[str, tuple[ImageNetRelease, ...]] = {
    "gfnet_ti": (_ZOO.release("gfnet-ti.pth", "3d0c1579aa524a0a99dd", 74.6),),
    "gfnet_xs": (_ZOO.release("gfnet-xs.pth", "e0ab5b1583954a1fa9b2", 78.6),),
    "gfnet_s": (_ZOO.release("gfnet-s.pth", "e5561fa070c44d9399bf", 80.0),),
    "gfnet_b": (_ZOO.release("gfnet-b.pth", "2fbf264597af4d72afb3", 80.7),),
    "gfnet_h_ti": (_ZOO.release("gfnet-h-ti.pth", "b22dd45eccbe462cbbfb", 80.1),),
    "gfnet_h_s": (_ZOO.release("gfnet-h-s.pth", "5229cb4d1daf48e69675", 81.5),),
    "gfnet_h_b": (_ZOO.release("gfnet-h-b.pth", "954c5af21e824ba6b40c", 82.9),),
}


def checkpoint_key(variant: str, path: str) -> str | None:
    """The key in the official GFNet checkpoints of the Keras variable at `path`.

    Args:
        variant: a GFNet variant key (isotropic or hierarchical).
        path: a variable path of the model built from it.

    Returns:
        The official state-dict key, or None for a variable without one.

    Example:
        >>> checkpoint_key("gfnet_h_ti", "stage1_block0_mixer/complex_weight")
        'blocks.1.0.filter.complex_weight'
    """
    hierarchical = len(VARIANTS[variant].dims) > 1
    layer, *inner, name = path.split("/")
    if layer == "stem_conv":
        return f"patch_embed.{'0.' if hierarchical else ''}proj.{PARAMETERS[name]}"
    if layer == "pos_embed":
        return "pos_embed"
    downsample = DOWNSAMPLE.fullmatch(layer)
    if downsample:
        stage, kind = downsample.groups()
        if hierarchical and kind == "conv":
            return f"patch_embed.{stage}.proj.{PARAMETERS[name]}"
        return None
    block = BLOCK.fullmatch(layer)
    if block:
        stage, index, part = block.groups()
        prefix = f"blocks.{stage}.{index}" if hierarchical else f"blocks.{index}"
        if part in ("ls", "ls1", "ls2"):
            return f"{prefix}.gamma{part[2:]}"
        module = {"mixer": "filter", "ffn": "mlp"}.get(part, part)
        return f"{prefix}.{module}.{inner_key(inner, name)}"
    return common_key(path)


_SUMMARY = __doc__.split("\n\n")[0]


def _family(name: str, hierarchical: bool, builders: dict[str, str]) -> Family:
    keys = [key for key, spec in VARIANTS.items() if (len(spec.dims) > 1) == hierarchical]
    return Family(
        name,
        _SUMMARY,
        variants={key: VARIANTS[key] for key in keys},
        builders=builders,
        releases={key: RELEASES[key] for key in keys if key in RELEASES},
        checkpoint_key=checkpoint_key,
    )


GFNET = _family(
    "GFNet",
    False,
    {"GFNetTi": "gfnet_ti", "GFNetXS": "gfnet_xs", "GFNetS": "gfnet_s", "GFNetB": "gfnet_b"},
)
GFNET_H = _family(
    "GFNet-H", True, {"GFNetHTi": "gfnet_h_ti", "GFNetHS": "gfnet_h_s", "GFNetHB": "gfnet_h_b"}
)
