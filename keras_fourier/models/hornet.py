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

from keras_fourier.models.vision import VisionSpec

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
