"""Model families as data: each family owns its variants, public builders, releases and key map.

A :class:`Family` is one row of the catalog (:mod:`keras_fourier.models.catalog`):
GFNet, GFNet-H, HorNet and AFNONet (rows of the generic vision builder),
FNet (text encoders) and the `build_model` compositions (small presets).
The vision families' loader (:mod:`keras_fourier.models.vision_weights`)
takes a :class:`Variant` (a family and one of its keys) instead of looking
the family up, so it depends on this data module only and never on the
family modules.

The vision families' rows are :class:`VisionSpec` (built by
:func:`keras_fourier.models.vision.build_vision_model`), naming their token
mixers and FFNs from :data:`MIXER_NAMES` and :data:`FFN_NAMES`. This module
and the family modules are keras-free: the command line lists the model
names without loading TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

MODALITIES = ("image", "text", "field")


@dataclasses.dataclass(frozen=True)
class Component:
    """A token mixer or FFN of the vision builder, by name: its layer and fixed arguments.

    Attributes:
        layer: the class name in :mod:`keras_fourier.layers`.
        kwargs: arguments given to every such layer (a row's own override them).
        fourier: the layer computes a Fourier transform and takes `fft_impl`.
        filter_size: for a layer holding a filter sized by the token grid, the
            arguments that fix it from the stage's grid (h, w), so that an
            any-size model builds it at the training size; None otherwise.
        any_size: the layer runs on token grids of any size.
    """

    layer: str
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    fourier: bool = False
    filter_size: Callable[[int, int], dict[str, Any]] | None = None
    any_size: bool = True


# The one registration point of a mixer or FFN: a row here (its layer exported from
# keras_fourier.layers) gives the vision builder, `build_model`, --mixer/--ffn and the bench.
MIXERS: dict[str, Component] = {
    "global_filter": Component(
        "GlobalFilter", fourier=True, filter_size=lambda h, w: {"height": h, "width": w // 2 + 1}
    ),
    "afno": Component("AFNO2D", fourier=True),
    # FNO as the AFNO paper compares it (its Table 6): full complex weights on every mode of
    # the token grid that an rFFT keeps (no block-diagonal sharing, no thresholding); an
    # any-size model fixes them at its training grid.
    "fno": Component(
        "FNO2D",
        fourier=True,
        filter_size=lambda h, w: {"modes_height": max(1, h // 2), "modes_width": w // 2 + 1},
    ),
    "fourier": Component("FourierMixing", fourier=True, any_size=False),
    "gnconv": Component("GnConv", {"spatial_mixing": "dwconv"}),
    "gnconv_gf": Component(
        "GnConv",
        {"spatial_mixing": "global_local"},
        fourier=True,
        filter_size=lambda h, w: {"filter_size": (h, w // 2 + 1)},
    ),
    "attention": Component("SelfAttention"),
}
FFNS: dict[str, Component] = {
    "mlp": Component("Mlp"),
    "glu": Component("GLU"),
    "afbo": Component("AFBO"),
    "scfbo_gc": Component("SCFBO", {"channel_mapping": "gccm", "groups": 2}),
    "scfbo_oc": Component("SCFBO", {"channel_mapping": "occm", "groups": 4}),
}
MIXER_NAMES = tuple(MIXERS)
FOURIER_MIXERS = tuple(name for name, row in MIXERS.items() if row.fourier)
FFN_NAMES = tuple(FFNS)


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family: its variants, public builder names, releases and checkpoint key map.

    Attributes:
        name: the family's name, e.g. "GFNet-H".
        summary: one sentence on the family (first paragraph of its
            builders' docstrings).
        variants: variant key -> its configuration (a
            :class:`VisionSpec` for vision
            rows, a size dict for FNet, `build_model` arguments for the
            compositions).
        builders: public builder name -> variant key, e.g.
            {"GFNetTi": "gfnet_ti"}.
        modality: "image", "text" or "field" (gridded N-channel fields,
            FourCastNet): what the family's models take.
        releases: variant (or release) key -> official checkpoint releases.
            Default: none.
        checkpoint_key: ``(variant, variable_path) -> official key or None``
            for official PyTorch checkpoints. Default None: no official
            PyTorch checkpoints.
        options: variant fields exposed as builder keyword arguments, e.g.
            ("double_skip",). Default none.

    Example:
        >>> GFNET.builders["GFNetTi"]
        'gfnet_ti'
    """

    name: str
    summary: str
    variants: Mapping[str, Any]
    builders: Mapping[str, str]
    modality: str = "image"
    releases: Mapping[str, tuple[Any, ...]] = dataclasses.field(default_factory=dict)
    checkpoint_key: Callable[[str, str], str | None] | None = None
    options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.modality not in MODALITIES:
            raise ValueError(f"`modality` must be one of {MODALITIES}. Received: {self.modality!r}")
        unknown = sorted(set(self.builders.values()) - set(self.variants))
        if unknown:
            raise ValueError(f"Family {self.name!r}: builders name unknown variants {unknown}.")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One variant of a family: what loading code needs to know about a model's row.

    Attributes:
        family: the :class:`Family`.
        key: the variant key, e.g. "gfnet_ti".

    Example:
        >>> Variant(GFNET, "gfnet_ti").spec.dims
        (256,)
    """

    family: Family
    key: str

    @property
    def spec(self) -> Any:
        """The variant's configuration (its row of `family.variants`)."""
        return self.family.variants[self.key]

    @property
    def releases(self) -> tuple[Any, ...]:
        """The variant's official releases (first: the default one); empty if none."""
        return tuple(self.family.releases.get(self.key, ()))

    def checkpoint_key(self, path: str) -> str | None:
        """The official checkpoint key of the variable at `path`, or None.

        Raises:
            ValueError: the family publishes no PyTorch checkpoints.
        """
        if self.family.checkpoint_key is None:
            raise ValueError(f"The {self.family.name} family has no official PyTorch checkpoints.")
        return self.family.checkpoint_key(self.key, path)


@dataclasses.dataclass(frozen=True)
class VisionSpec:
    """One row of the variant table: everything that defines an architecture.

    Attributes:
        dims: channels of each stage (one entry: isotropic model).
        depths: blocks per stage.
        patch_size: stride of the stem convolution.
        mixers: per stage, (a name of :data:`MIXER_NAMES`, keyword arguments).
        ffn: (a name of :data:`FFN_NAMES`, keyword arguments), the same in every stage.
        residual: "single" for GFNet/AFNONet blocks, ``x + ffn(norm2(mixer(norm1(x))))``;
            "two" for HorNet/MetaFormer blocks with a residual around each.
        double_skip: AFNONet's extra residual around the mixer ("single" only).
        layer_scale: LayerScale init value, or None for none.
        pos_embed: learned position embedding after the stem.
        stem_norm: LayerNorm after the stem convolution (HorNet).
        downsample_norm: LayerNorm before each downsampling conv (HorNet).
        pool_before_norm: pool then norm (HorNet) instead of norm then pool.
        drop_path_rate: default stochastic depth rate, spread linearly over blocks.
        norm_epsilon: epsilon of every LayerNorm.
    """

    dims: tuple[int, ...]
    depths: tuple[int, ...]
    patch_size: int
    mixers: tuple[tuple[str, dict], ...]
    ffn: tuple[str, dict] = ("mlp", {})
    residual: str = "single"
    double_skip: bool = False
    layer_scale: float | None = None
    pos_embed: bool = False
    stem_norm: bool = False
    downsample_norm: bool = False
    pool_before_norm: bool = False
    drop_path_rate: float = 0.0
    norm_epsilon: float = 1e-6

    @property
    def stride(self) -> int:
        """Total downsampling factor from pixels to the last stage."""
        return self.patch_size * 2 ** (len(self.dims) - 1)

    @property
    def has_fourier_layers(self) -> bool:
        """Whether a stage mixes tokens with a Fourier layer (see :data:`FOURIER_MIXERS`)."""
        return any(name in FOURIER_MIXERS for name, _ in self.mixers)
