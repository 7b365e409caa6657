"""AFNONet: the AFNO paper's ImageNet classifier (Appendix A.5).

Patch 4, dim 384, 12 blocks, AFNO2D with 16 blocks. Wiring as the official
AFNONet: ``residual = x; x = afno(norm1(x))`` (AFNO2D adds its own input),
with ``double_skip`` an extra ``x = x + residual; residual = x``, then
``residual + drop_path(mlp(norm2(x)))``; learned position embedding; final
norm then mean over tokens. ``double_skip`` defaults to off, as the official
training script.

Reference:
    Guibas et al., "Adaptive Fourier Neural Operators: Efficient Token Mixers
    for Transformers", ICLR 2022.
"""

from __future__ import annotations

from keras_fourier.models.family import Family, VisionSpec
from keras_fourier.models.keymap import BLOCK, PARAMETERS, common_key, inner_key
from keras_fourier.weights.releases import ImageNetRelease

VARIANTS: dict[str, VisionSpec] = {
    "afnonet_s4": VisionSpec(
        dims=(384,),
        depths=(12,),
        patch_size=4,
        mixers=(("afno", {"num_blocks": 16}),),
        pos_embed=True,
    ),
}

# NVlabs/AFNO-transformer releases no ImageNet checkpoint.
RELEASES: dict[str, tuple[ImageNetRelease, ...]] = {}


def checkpoint_key(variant: str, path: str) -> str | None:
    """The key in NVlabs/AFNO-transformer's AFNONet state dicts of the variable at `path`.

    Args:
        variant: an AFNONet variant key.
        path: a variable path of the model built from it.

    Returns:
        The official state-dict key, or None for a variable without one.

    Example:
        >>> checkpoint_key("afnonet_s4", "stage0_block2_mixer/w1")
        'blocks.2.filter.w1'
    """
    del variant
    layer, *inner, name = path.split("/")
    if layer == "stem_conv":
        return f"patch_embed.proj.{PARAMETERS[name]}"
    if layer == "pos_embed":
        return "pos_embed"
    block = BLOCK.fullmatch(layer)
    if block:
        _, index, part = block.groups()
        module = {"mixer": "filter", "ffn": "mlp"}.get(part, part)
        return f"blocks.{index}.{module}.{inner_key(inner, name)}"
    return common_key(path)


AFNONET = Family(
    "AFNONet",
    __doc__.split("\n\n")[0],
    variants=VARIANTS,
    builders={"AFNONetS4": "afnonet_s4"},
    releases=RELEASES,
    checkpoint_key=checkpoint_key,
    options=("double_skip",),
)
