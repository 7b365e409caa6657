"""Model families as data: each family owns its variants, public builders, releases and key map.

A :class:`Family` is one row of the catalog (:mod:`keras_fourier.models.catalog`):
GFNet, GFNet-H, HorNet and AFNONet (rows of the generic vision builder),
FNet (text encoders) and the `build_model` compositions (small presets).
The loading code (:mod:`keras_fourier.models.weights`,
:mod:`keras_fourier.models.checkpoints`) takes a :class:`Variant` (a family
and one of its keys) instead of looking the family up, so it depends on
this data module only and never on the family modules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

MODALITIES = ("image", "text")


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family: its variants, public builder names, releases and checkpoint key map.

    Attributes:
        name: the family's name, e.g. "GFNet-H".
        summary: one sentence on the family (first paragraph of its
            builders' docstrings).
        variants: variant key -> its configuration (a
            :class:`~keras_fourier.models.vision.VisionSpec` for vision
            rows, a size dict for FNet, `build_model` arguments for the
            compositions).
        builders: public builder name -> variant key, e.g.
            {"GFNetTi": "gfnet_ti"}.
        modality: "image" or "text": what the family's models take.
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
