"""FourCastNet as data: its rows and the key map of NVlabs/FourCastNet's checkpoints.

FourCastNet (Pathak et al., 2022) is the global weather model of
NVlabs/FourCastNet (``networks/afnonet.py``): an AFNO operator from an
N-channel field to an M-channel field on a lat-lon grid. Patch embedding of
the input channels, a learned position embedding, AFNO blocks (double skip,
LayerNorm eps 1e-6, exact GELU, FourCastNet's own mode slicing), and a
bias-free linear head giving each token's p x p x M values, rearranged to
the grid. The precipitation model adds a periodic padding (circular in
longitude, zeros in latitude), a 3x3 convolution and a ReLU after a
one-channel backbone (``PrecipNet``). The models are built by
:mod:`keras_fourier.models.fourcastnet`; this keras-free module holds the
rows and the checkpoint key map.

The released checkpoints hold ``{"iters", "epoch", "model_state",
"optimizer_state_dict"}`` with the parameters under ``module.<key>``
(``train.py`` ``save_checkpoint`` of a DistributedDataParallel model); the
final ``norm`` is in them but the official forward never applies it, so the
Keras model has no such layer and the conversion skips those two tensors.

A forecast with the released weights needs the release's inputs: the
:data:`ERA5_CHANNELS` of the first 720 of ERA5's 721 latitude rows
(``inference/inference.py`` slices ``0:720``), z-scored per channel with the
``global_means.npy`` and ``global_stds.npy`` of the release's ``stats_v0``
(indexed ``[0, channels]``, as ``inference.py`` does), channels last here;
the outputs are z-scores of the same channels 6 hours later.

:data:`RELEASES` lists the released checkpoints (``fourcastnet_v0``,
``fourcastnet_precip_v0``) with the URLs of their statistics;
``FourCastNet(weights="fourcastnet_v0")`` downloads its checkpoint once
into the package's cache (``KERAS_FOURIER_MIRROR`` applies).
"""

from __future__ import annotations

import dataclasses

from keras_fourier.models.family import Family
from keras_fourier.models.keymap import BLOCK, PARAMETERS, inner_key
from keras_fourier.weights.releases import TRAINING_CHECKPOINT, Release


@dataclasses.dataclass(frozen=True)
class FourCastNetSpec:
    """One FourCastNet row: everything that defines the architecture.

    Attributes:
        image_size: (H, W) of the grid; the patch must divide both.
            Default (720, 1440), ERA5 at 0.25 degrees without its last row.
        patch_size: side of the square patches. Default 8 (``AFNO.yaml``).
        in_channels: channels of the input field. Default 20.
        out_channels: channels of the output field. Default 20.
        embed_dim: token width. Default 768.
        depth: AFNO blocks. Default 12.
        mlp_ratio: MLP hidden width over ``embed_dim``. Default 4.
        num_blocks: diagonal blocks of each AFNO layer. Default 8
            (``AFNO.yaml``; the constructor's 16 is not what the release used).
        sparsity_threshold: AFNO's soft-shrink lambda. Default 0.01.
        hard_thresholding_fraction: AFNO's kept fraction. Default 1.0.
        mode_slicing: AFNO2D's rule for the kept modes, "fourcastnet"
            (default, the official rule) or "low_frequency".
        double_skip: the extra residual around the mixer. Default True.
        norm_epsilon: LayerNorm epsilon. Default 1e-6.
        precip: the precipitation head (PrecipNet) after the backbone.
            Default False.
    """

    image_size: tuple[int, int] = (720, 1440)
    patch_size: int = 8
    in_channels: int = 20
    out_channels: int = 20
    embed_dim: int = 768
    depth: int = 12
    mlp_ratio: float = 4.0
    num_blocks: int = 8
    sparsity_threshold: float = 0.01
    hard_thresholding_fraction: float = 1.0
    mode_slicing: str = "fourcastnet"
    double_skip: bool = True
    norm_epsilon: float = 1e-6
    precip: bool = False

    @property
    def grid(self) -> tuple[int, int]:
        """(h, w), the token grid."""
        return self.image_size[0] // self.patch_size, self.image_size[1] // self.patch_size


# ERA5 at 720 x 1440 (``afno_backbone`` and ``precip`` of config/AFNO.yaml): the backbone
# maps the 20 variables to their values 6 hours later; the precipitation model maps them to
# total precipitation. 74,691,840 official parameters for the backbone (1,536 of them in the
# unused final norm).
VARIANTS: dict[str, FourCastNetSpec] = {
    "fourcastnet": FourCastNetSpec(),
    "fourcastnet_precip": FourCastNetSpec(out_channels=1, precip=True),
}

# The 20 variables of the backbone, in channel order: the channels of the released data's
# ``fields`` (data_process/parallel_copy_small_set.py writes them at these indices), of
# ``global_means.npy``/``global_stds.npy`` and of the checkpoints' inputs and outputs.
ERA5_CHANNELS: tuple[str, ...] = (
    "u10",
    "v10",
    "t2m",
    "sp",
    "msl",
    "t850",
    "u1000",
    "v1000",
    "z1000",
    "u850",
    "v850",
    "z850",
    "u500",
    "v500",
    "z500",
    "t500",
    "z50",
    "r500",
    "r850",
    "tcwv",
)


def checkpoint_key(variant: str, path: str) -> str | None:
    """The key in NVlabs/FourCastNet's state dicts (``module.`` stripped) of the variable at `path`.

    Args:
        variant: a FourCastNet variant key.
        path: a variable path of the model built from it.

    Returns:
        The official key, or None for a variable without one.

    Example:
        >>> checkpoint_key("fourcastnet", "stage0_block2_mixer/w1")
        'blocks.2.filter.w1'
        >>> checkpoint_key("fourcastnet_precip", "precip_conv/kernel")
        'conv.weight'
    """
    prefix = "backbone." if VARIANTS[variant].precip else ""
    layer, *inner, name = path.split("/")
    if layer == "precip_conv":
        return f"conv.{PARAMETERS[name]}"
    if layer == "stem_conv":
        return f"{prefix}patch_embed.proj.{PARAMETERS[name]}"
    if layer == "pos_embed":
        return f"{prefix}pos_embed"
    if layer == "head" and name == "kernel":
        return f"{prefix}head.weight"
    block = BLOCK.fullmatch(layer)
    if block:
        _, index, part = block.groups()
        module = {"mixer": "filter", "ffn": "mlp"}.get(part, part)
        return f"{prefix}blocks.{index}.{module}.{inner_key(inner, name)}"
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class FourCastNetRelease(Release):
    """One official FourCastNet checkpoint, with the normalisation it was trained with.

    Attributes:
        variant: the key of :data:`VARIANTS` it was trained as.
        statistics: {file name: URL} of the release's ``global_means.npy``
            and ``global_stds.npy`` (shape (1, C, 1, 1), indexed by the
            channels of :data:`ERA5_CHANNELS`; a forecast needs them, see
            the module docstring).
    """

    variant: str
    statistics: dict[str, str] = dataclasses.field(default_factory=dict)


# FCN_weights_v0 and stats_v0 of NVlabs/FourCastNet (README "Version Notes": published on
# NERSC's Globus endpoint, which needs a login), mirrored over plain HTTPS by ECMWF for its
# ai-models plugin (ecmwf-lab/ai-models-fourcastnet, model version "0"). Sizes and sha256 are
# not published, and these rows were written without network access to compute them.
_ECMWF = "https://get.ecmwf.int/repository/test-data/ai-models/fourcastnet/0.0/{}"
_STATISTICS = {name: _ECMWF.format(name) for name in ("global_means.npy", "global_stds.npy")}
RELEASES: dict[str, FourCastNetRelease] = {
    f"{variant}_v0": FourCastNetRelease(
        f"{variant}_v0_{file}",
        _ECMWF.format(file),
        "https://github.com/NVlabs/FourCastNet",
        "BSD-3-Clause",
        variant=variant,
        statistics=_STATISTICS,
        values_per_parameter=TRAINING_CHECKPOINT,  # optimizer_state_dict beside model_state
    )
    for variant, file in (("fourcastnet", "backbone.ckpt"), ("fourcastnet_precip", "precip.ckpt"))
}

FOURCASTNET = Family(
    "FourCastNet",
    __doc__.split("\n\n")[0],
    variants=VARIANTS,
    builders={},
    modality="field",
    releases={release.variant: (release,) for release in RELEASES.values()},
    checkpoint_key=checkpoint_key,
)
