"""Generic pieces of the official-checkpoint key maps: parsing keras_fourier variable paths.

A vision model's variable path is ``layer/inner.../name``
(``stage0_block3_ffn/fc1/kernel``). Each family module maps the parsed path
to its official key (``gfnet.checkpoint_key``, ``hornet.checkpoint_key``,
``afnonet.checkpoint_key``), as timm keeps ``checkpoint_filter_fn`` beside a
model; the layer and parameter naming shared by all of them lives here.
"""

from __future__ import annotations

import re

# Official keys of the final norm and of the head: unused when the model has no such layer.
OPTIONAL_LAYERS = {"norm": ("norm.weight", "norm.bias"), "head": ("head.weight", "head.bias")}
PARAMETERS = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}
BLOCK = re.compile(r"stage(\d+)_block(\d+)_(norm1|norm2|mixer|ffn|ls|ls1|ls2)")
DOWNSAMPLE = re.compile(r"downsample(\d+)_(norm|conv)")


def inner_key(inner: list[str], name: str) -> str:
    """``["dwconv", "pre_norm"], "gamma"`` -> ``"dwconv.pre_norm.weight"``.

    Args:
        inner: the sublayer names between the block and the variable.
        name: the variable name.

    Returns:
        The dotted official suffix (``pws_0`` -> ``pws.0``, Keras names of
        parameters -> PyTorch's).

    Example:
        >>> inner_key(["fc1"], "kernel")
        'fc1.weight'
    """
    parts = [re.sub(r"^pws_(\d+)$", r"pws.\1", part) for part in inner]
    return ".".join([*parts, PARAMETERS.get(name, name)])


def common_key(path: str) -> str | None:
    """The official key of the final norm and head, the same in every family; else None.

    Args:
        path: a Keras variable path.

    Returns:
        ``norm.weight`` etc. for the final ``norm`` and ``head``; None otherwise.

    Example:
        >>> common_key("head/kernel")
        'head.weight'
    """
    layer, *_, name = path.split("/")
    if layer in OPTIONAL_LAYERS:
        return f"{layer}.{PARAMETERS[name]}"
    return None
