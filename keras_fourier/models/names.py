"""The catalog's tables and its model names, keras-free: every family and every name it builds.

:data:`FAMILIES` lists the model families (GFNet, GFNet-H, HorNet, AFNONet,
FNet, FourCastNet and the `build_model` compositions of :data:`VISION_PRESETS`); the rest
derives from it: :data:`VARIANTS` and :data:`RELEASES` (the vision rows and
their official checkpoints), :data:`BUILDERS` (public builder name ->
:class:`~keras_fourier.models.family.Variant`, found by key with
:func:`variant`), :data:`TEXT_PRESETS`, and the names: :func:`model_names`
(snake case, as `train`, `flops` and `bench` print them),
:data:`PUBLIC_NAMES` (the builder spelling, ``GFNetTi``, to the snake-case
name) and :func:`canonical_name` (either spelling to the snake-case one).
The family modules hold data only, so the command line lists and checks
model names without loading TensorFlow; the builders are made in
:mod:`keras_fourier.models.catalog`, which also exports these names.
"""

from __future__ import annotations

from typing import Any

from keras_fourier.models import afnonet, fnet_family, fourcastnet_family, gfnet, hornet
from keras_fourier.models.family import Family, Variant, VisionSpec

# build_model arguments of the small presets; every one takes >= 16x16 images.
VISION_PRESETS: dict[str, dict[str, Any]] = {
    "gfnet_tiny": {"mixer": "global_filter", "depths": 2, "dims": 64, "patch_size": 2},
    "gfnet_h_tiny": {
        "mixer": "global_filter",
        "depths": (1, 2, 1),
        "dims": (32, 64, 128),
        "patch_size": 2,
        "layer_scale": 1e-3,
    },
    "hornet_tiny": {
        "mixer": "gnconv",
        "depths": (1, 2, 1),
        "dims": (32, 64, 128),
        "patch_size": 2,
        "layer_scale": 1e-6,
    },
    "hornet_gf_tiny": {
        "mixer": "gnconv_gf",
        "depths": (1, 2, 1),
        "dims": (32, 64, 128),
        "patch_size": 2,
        "layer_scale": 1e-6,
    },
    "afno_tiny": {"mixer": "afno", "depths": 4, "dims": 64, "patch_size": 2},
    "afbo_tiny": {
        "mixer": "global_filter",
        "ffn": "afbo",
        "depths": 4,
        "dims": 64,
        "patch_size": 2,
    },
}
COMPOSITIONS = Family(
    "build_model",
    "Any token mixer with any FFN, isotropic or hierarchical (`keras_fourier.build_model`).",
    variants=VISION_PRESETS,
    builders={},
)

FAMILIES: tuple[Family, ...] = (
    gfnet.GFNET,
    gfnet.GFNET_H,
    hornet.HORNET,
    afnonet.AFNONET,
    fnet_family.FNET,
    fourcastnet_family.FOURCASTNET,
    COMPOSITIONS,
)
# The families built by the generic vision builder from a VisionSpec row.
VISION_FAMILIES: tuple[Family, ...] = tuple(
    family
    for family in FAMILIES
    if all(isinstance(spec, VisionSpec) for spec in family.variants.values()) and family.variants
)
# Variant key -> VisionSpec, every vision family's rows.
VARIANTS: dict[str, VisionSpec] = {
    key: spec for family in VISION_FAMILIES for key, spec in family.variants.items()
}
# Vision variant key -> its official releases (each family owns its rows; FNet's are
# fnet_family.FNET.releases).
RELEASES: dict[str, tuple[Any, ...]] = {
    key: tuple(rows) for family in VISION_FAMILIES for key, rows in family.releases.items()
}
# Public builder name -> its variant, e.g. "GFNetTi" -> Variant(GFNET, "gfnet_ti").
BUILDERS: dict[str, Variant] = {
    public: Variant(family, key) for family in FAMILIES for public, key in family.builders.items()
}
# Training names of the FNet text classifiers and their sizes: a tiny preset and every
# paper model at every size, <model>_<variant> ("fnet_base", "bert_base", "linear_large").
TEXT_PRESETS: dict[str, dict[str, int]] = {
    "fnet_tiny": {"hidden_size": 64, "num_layers": 2, "intermediate_size": 128},
    **{
        f"{model}_{key}": dict(sizes)
        for model in fnet_family.PAPER_MODELS
        for key, sizes in fnet_family.FNET.variants.items()
    },
}
# The FNet mixing arguments of each text name: {} for FNet itself.
TEXT_MIXINGS: dict[str, dict[str, Any]] = {
    name: dict(fnet_family.PAPER_MODELS[name.rsplit("_", 1)[0]]) for name in TEXT_PRESETS
}
# Training names of the field operators (FourCastNet's builder, modality "field"): the full
# rows of fourcastnet_family.VARIANTS, and a small preset that `keras-fourier train --task
# forecast` trains on the embedded Navier-Stokes data; the grid and channels come from the data.
FIELD_PRESETS: dict[str, dict[str, Any]] = {
    "fourcastnet_tiny": {
        "variant": "fourcastnet",
        "patch_size": 4,
        "embed_dim": 128,
        "depth": 4,
        "num_blocks": 4,
        "residual": True,
    },
    **{key: {"variant": key} for key in fourcastnet_family.VARIANTS},
}
ARCHITECTURE_OPTIONS = ("mixer", "ffn", "depths", "dims", "patch_size")


def _snake_name(variant: Variant) -> str:
    return f"fnet_{variant.key}" if variant.family is fnet_family.FNET else variant.key


# Snake-case name of every public builder: "GFNetTi" -> "gfnet_ti", "FNetBase" -> "fnet_base".
PUBLIC_NAMES: dict[str, str] = {public: _snake_name(v) for public, v in BUILDERS.items()}


def variant(key: str) -> Variant:
    """The vision variant of key `key`, with its family.

    Args:
        key: a vision variant key, e.g. "gfnet_ti" or "hornet_l_gf".

    Returns:
        The :class:`Variant`.

    Raises:
        ValueError: an unknown key, listing the known ones.

    Example:
        >>> variant("hornet_t_gf").family.name
        'HorNet'
    """
    for family in VISION_FAMILIES:
        if key in family.variants:
            return Variant(family, key)
    raise ValueError(f"Unknown variant {key!r}; expected one of {sorted(VARIANTS)}.")


def model_names() -> list[str]:
    """Every snake-case model name: the named vision variants, the presets, FNet and FourCastNet.

    Returns:
        Sorted names, e.g. "gfnet_ti", "gfnet_tiny", "fnet_base".

    Example:
        >>> "gfnet_tiny" in model_names() and "hornet_t_gf" in model_names()
        True
    """
    return sorted({*VARIANTS, *VISION_PRESETS, *TEXT_PRESETS, *FIELD_PRESETS})


def is_model_name(reference: object) -> bool:
    """Whether `reference` is a model name in either spelling ("GFNetTi" or "gfnet_ti").

    Example:
        >>> is_model_name("FNetBase"), is_model_name("runs/default")
        (True, False)
    """
    return isinstance(reference, str) and (reference in PUBLIC_NAMES or reference in model_names())


def canonical_name(name: str) -> str:
    """The snake-case name of a model name given in either spelling.

    Args:
        name: a name of `model_names()` or a public builder name
            ("GFNetTi", "FNetBase", ...).

    Returns:
        The snake-case name ("gfnet_ti", "fnet_base", ...).

    Raises:
        ValueError: an unknown name, listing both spellings.

    Example:
        >>> canonical_name("GFNetHTi"), canonical_name("gfnet_tiny")
        ('gfnet_h_ti', 'gfnet_tiny')
    """
    if is_model_name(name):
        return PUBLIC_NAMES.get(name, name)
    raise ValueError(
        f"Unknown model name {name!r}; expected one of {model_names()} or a builder name, "
        f"one of {sorted(PUBLIC_NAMES)}."
    )


def modality(name: str) -> str:
    """What a model name (either spelling) takes: "text" (FNet), "field" (FourCastNet) or "image".

    Example:
        >>> modality("FNetBase"), modality("gfnet_xs"), modality("fourcastnet_tiny")
        ('text', 'image', 'field')
    """
    key = canonical_name(name)
    if key in FIELD_PRESETS:
        return "field"
    return "text" if key in TEXT_PRESETS else "image"
