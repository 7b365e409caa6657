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

from keras_fourier.models.vision import VisionSpec

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
