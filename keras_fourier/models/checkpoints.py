"""Converting the official PyTorch checkpoints of GFNet, HorNet and AFNONet.

The official state dicts (raoyongming/GFNet, raoyongming/HorNet,
NVlabs/AFNO-transformer) map onto keras_fourier models one tensor at a time:

* :func:`official_key_map` gives, for a built model, the official key of each
  Keras variable (``blocks.3.mlp.fc1.weight`` ->
  ``stage0_block3_ffn/fc1/kernel``), from the ``checkpoint_key`` of the
  variant's family (:class:`~keras_fourier.models.family.Family`: each family
  owns its key map and its releases; this module keeps only what is generic);
* :func:`convert_tensor` changes a tensor's layout: Linear (out, in) to Dense
  (in, out); Conv2d (out, in, kh, kw) to Conv2D (kh, kw, in, out); depthwise
  Conv2d (C, 1, kh, kw) to DepthwiseConv2D (kh, kw, C, 1); ``pos_embed``
  (1, N, C) to the (1, H, W, C) map; and resizes the resolution-dependent
  tensors to the model's size, as the official code does when it runs at
  another resolution:

  - GFNet filters (h, w, C, 2): bicubic, ``align_corners=True`` over (h, w),
    as the GFNet fine-tuning code;
  - position embeddings: bicubic, ``align_corners=False``, as the GFNet and
    AFNO fine-tuning code;
  - HorNet global-local filters (C, h, w, 2): bilinear,
    ``align_corners=True`` over (h, w). The official layer keeps its
    224-pixel filter and resizes it to the input's spectrum on every call;
    here it is resized once, at conversion, to the spectrum size of the
    model's input, which gives the same outputs (the same interpolation of
    the same weights). Fine-tuning then trains the resized filter itself.

* :func:`convert_state_dict` does both for a whole state dict, checking that
  every variable of the model is covered and every checkpoint key is used;
* :func:`read_pth` reads a ``.pth`` file without PyTorch
  (:mod:`keras_fourier.models.pth`, which refuses any code in the pickle).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import keras
import numpy as np

from keras_fourier.layers.interpolation import interpolation_matrix, resize_2d
from keras_fourier.models import keymap, pth
from keras_fourier.models.family import Variant

TRANSFORMS = (
    "copy",
    "linear",
    "conv",
    "depthwise",
    "pos_embed",
    "global_filter",
    "global_local_filter",
)
_MAX_LISTED = 10


def official_key_map(variant: Variant, model: keras.Model) -> dict[str, str]:
    """Official state-dict key -> Keras variable path, for every variable of `model`.

    Args:
        variant: the variant the model was built from, e.g.
            ``catalog.variant("gfnet_ti")``.
        model: a model built by the variant's builder (any `include_top`,
            `pooling` and input size).

    Returns:
        A dict from official key to ``variable.path``, one entry per model
        variable.

    Raises:
        ValueError: a family without official checkpoints, or a model
            variable without an official counterpart (a model not built from
            `variant`).

    Example:
        >>> model = keras_fourier.models.GFNetTi(input_shape=(64, 64, 3))
        >>> official_key_map(catalog.variant("gfnet_ti"), model)["blocks.0.mlp.fc1.weight"]
        'stage0_block0_ffn/fc1/kernel'
    """
    keys = {}
    unmapped = []
    for variable in model.weights:
        key = variant.checkpoint_key(variable.path)
        if key is None:
            unmapped.append(variable.path)
        else:
            keys[key] = variable.path
    if unmapped:
        raise ValueError(
            f"Model {model.name!r} has variables without a counterpart in the official "
            f"{variant.key!r} checkpoints; was it built from another variant? "
            f"Variables: {_listing(unmapped)}"
        )
    return keys


def transform_for(path: str) -> str:
    """The layout change from official tensor to the Keras variable at `path`.

    Args:
        path: a Keras variable path of a keras_fourier vision model.

    Returns:
        One of :data:`TRANSFORMS`: "linear" for Dense kernels, "conv" for
        Conv2D kernels, "depthwise" for DepthwiseConv2D kernels (gnConv's
        ``dwconv`` and the global-local filter's ``dw``), "pos_embed",
        "global_filter" (GFNet), "global_local_filter" (HorNet), else "copy".

    Example:
        >>> transform_for("stage2_block0_mixer/dwconv/dw/kernel")
        'depthwise'
    """
    *owners, name = path.split("/")
    if name == "kernel":
        if owners[0] == "head" or owners[-1] in ("fc1", "fc2"):
            return "linear"
        return "depthwise" if owners[-1] in ("dwconv", "dw") else "conv"
    if name == "pos_embed":
        return "pos_embed"
    if name == "complex_weight":
        return "global_local_filter" if owners[-1] == "dwconv" else "global_filter"
    return "copy"


def resize_pos_embed(pos_embed: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Official (1, N, C) position embedding -> (1, H, W, C) map of the model's size.

    The checkpoint's N tokens are a square grid (the official models are
    square); when it differs from `size` it is resized bicubically with
    ``align_corners=False``, as the official fine-tuning code of GFNet and
    AFNO does, generalised to non-square targets. A (1, h, w, C) map (a
    token list a key map has already laid out on its grid, as FourCastNet's
    non-square one) is resized the same way, where its size differs.

    Args:
        pos_embed: (1, N, C) array with N a perfect square, or a (1, h, w, C)
            map.
        size: (H, W), the model's token grid.

    Returns:
        A float32 array of shape (1, H, W, C).

    Raises:
        ValueError: `pos_embed` is not (1, N, C) with N a perfect square.

    Example:
        >>> resize_pos_embed(np.zeros((1, 196, 8)), (24, 20)).shape
        (1, 24, 20, 8)
    """
    pos_embed = np.asarray(pos_embed)
    if pos_embed.ndim == 4 and pos_embed.shape[0] == 1:
        return resize_position_map(pos_embed, size)
    side = math.isqrt(pos_embed.shape[1]) if pos_embed.ndim == 3 else 0
    if pos_embed.ndim != 3 or pos_embed.shape[0] != 1 or side * side != pos_embed.shape[1]:
        raise ValueError(
            "A position embedding must be (1, N, C) with N a square number of tokens; "
            f"received shape {pos_embed.shape}."
        )
    return resize_position_map(pos_embed.reshape(1, side, side, pos_embed.shape[2]), size)


def resize_position_map(grid: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(1, h, w, C) position embedding map -> (1, H, W, C): bicubic, align_corners=False.

    The resize of the official GFNet and AFNO fine-tuning code, applied to the
    map a keras_fourier `PositionEmbedding` keeps, per axis where sizes differ.

    Args:
        grid: (1, h, w, C) array.
        size: (H, W), the model's token grid.

    Returns:
        A float32 array of shape (1, H, W, C).

    Example:
        >>> resize_position_map(np.zeros((1, 14, 14, 8)), (24, 20)).shape
        (1, 24, 20, 8)
    """
    grid = np.asarray(grid, dtype=np.float64)
    for axis, out_size in zip((1, 2), size, strict=True):
        if out_size != grid.shape[axis]:
            matrix = interpolation_matrix(
                grid.shape[axis], out_size, "bicubic", align_corners=False
            )
            grid = np.moveaxis(np.tensordot(matrix, grid, axes=([1], [axis])), 0, axis)
    return grid.astype(np.float32)


def resize_global_filter(weight: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """GFNet filter (h, w, C, 2) -> (H', W', C, 2): bicubic, align_corners=True.

    Args:
        weight: official ``complex_weight`` of a GFNet block.
        size: (H', W'), the model's rfft2 size (H, W // 2 + 1).

    Returns:
        A float32 array of shape (H', W', C, 2), `weight` itself resized
        only where the sizes differ.

    Example:
        >>> resize_global_filter(np.zeros((14, 8, 4, 2)), (24, 13)).shape
        (24, 13, 4, 2)
    """
    weight = np.asarray(weight, dtype=np.float32)
    if tuple(weight.shape[:2]) == tuple(size):
        return weight
    return resize_2d(weight, size, axes=(0, 1), mode="bicubic")


def resize_global_local_filter(weight: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """HorNet filter (C, h, w, 2) -> (C, H', W', 2): bilinear, align_corners=True.

    Args:
        weight: official ``complex_weight`` of a HorNet GlobalLocalFilter.
        size: (H', W'), the rfft2 size (H, W // 2 + 1) of its input.

    Returns:
        A float32 array of shape (C, H', W', 2).

    Example:
        >>> resize_global_local_filter(np.zeros((4, 14, 8, 2)), (4, 3)).shape
        (4, 4, 3, 2)
    """
    weight = np.asarray(weight, dtype=np.float32)
    if tuple(weight.shape[1:3]) == tuple(size):
        return weight
    return resize_2d(weight, size, axes=(1, 2), mode="bilinear")


RESIZABLE = ("pos_embed", "global_filter", "global_local_filter")


def resize_variable(transform: str, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor saved by keras_fourier (Keras layout) at one input size, for a model of another.

    Resizes the resolution-dependent tensors as the official fine-tuning code
    does (see :func:`resize_global_filter`, :func:`resize_position_map`,
    :func:`resize_global_local_filter`); every other tensor must already have
    `shape`.

    Args:
        transform: the tensor's kind, one of :data:`TRANSFORMS` (see
            :func:`transform_for`); only those of :data:`RESIZABLE` change size.
        value: the saved tensor.
        shape: the shape of the model's variable.

    Returns:
        A float32 array of shape `shape`.

    Raises:
        ValueError: the tensor is not resizable or cannot give `shape` (other
            channels, another rank).

    Example:
        >>> resize_variable("global_filter", np.zeros((14, 8, 64, 2)), (24, 13, 64, 2)).shape
        (24, 13, 64, 2)
    """
    out = np.asarray(value, dtype=np.float32)
    shape = tuple(int(d) for d in shape)
    if out.ndim == len(shape) == 4 and transform in RESIZABLE:
        if transform == "pos_embed":
            out = resize_position_map(out, shape[1:3])
        elif transform == "global_filter":
            out = resize_global_filter(out, shape[:2])
        else:
            out = resize_global_local_filter(out, shape[1:3])
    if out.shape != shape:
        raise ValueError(f"saved shape {np.shape(value)} cannot give the model's {shape}")
    return out


_RANKS = {"linear": 2, "conv": 4, "depthwise": 4, "global_filter": 4, "global_local_filter": 4}


def convert_tensor(transform: str, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Converts one official tensor to the layout (and size) of a Keras variable.

    Args:
        transform: one of :data:`TRANSFORMS` (see :func:`transform_for`).
        value: the official tensor as a NumPy array.
        shape: the Keras variable's shape; resolution-dependent tensors are
            resized to it.

    Returns:
        A float32 array of shape `shape`.

    Raises:
        ValueError: unknown transform, or a tensor that cannot give `shape`.

    Example:
        >>> convert_tensor("linear", np.zeros((1024, 256)), (256, 1024)).shape
        (256, 1024)
    """
    if transform not in TRANSFORMS:
        raise ValueError(f"`transform` must be one of {TRANSFORMS}. Received: {transform!r}")
    value = np.asarray(value, dtype=np.float32)
    shape = tuple(int(d) for d in shape)
    rank = _RANKS.get(transform)
    if rank is not None and value.ndim != rank:
        raise ValueError(
            f"a {transform} tensor must have rank {rank}; checkpoint shape {value.shape}, "
            f"Keras shape {shape}"
        )
    if transform == "linear":
        out = value.T
    elif transform == "conv":
        out = value.transpose(2, 3, 1, 0)
    elif transform == "depthwise":
        out = value.transpose(2, 3, 0, 1)
    elif transform == "pos_embed":
        out = resize_pos_embed(value, shape[1:3])
    elif transform == "global_filter":
        out = resize_global_filter(value, shape[:2])
    elif transform == "global_local_filter":
        out = resize_global_local_filter(value, shape[1:3])
    else:
        out = value
    if out.shape != shape:
        raise ValueError(f"checkpoint shape {value.shape} gives {out.shape}, expected {shape}")
    return np.ascontiguousarray(out)


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return f"{shown}, ... and {more} more" if more > 0 else shown


def convert_state_dict(
    variant: Variant, state_dict: Mapping[str, np.ndarray], model: keras.Model
) -> dict[str, np.ndarray]:
    """Converts an official state dict to the values of every variable of `model`.

    Every model variable must come from a checkpoint key and every key must
    be used, except those of the final ``norm`` and the ``head`` when the
    model has no such layer (``include_top=False``; HorNet without pooling
    also drops its final norm). Shapes are checked after conversion; nothing
    is assigned.

    Args:
        variant: the variant the model was built from, e.g.
            ``catalog.variant("hornet_t_gf")``.
        state_dict: official key -> NumPy array (see :func:`read_pth`).
        model: the model to load, built by the variant's builder at any input
            size; resolution-dependent tensors are resized to it.

    Returns:
        A dict from Keras ``variable.path`` to a float32 array of the
        variable's shape, for every variable of `model`.

    Raises:
        ValueError: the checkpoint does not match the model; the message
            lists the missing keys, the unexpected keys and the tensors of
            the wrong shape.

    Example:
        >>> model = keras_fourier.models.GFNetTi(input_shape=(384, 384, 3))
        >>> state_dict = read_pth("gfnet-ti.pth")
        >>> values = convert_state_dict(catalog.variant("gfnet_ti"), state_dict, model)
        >>> values["stage0_block0_mixer/complex_weight"].shape
        (24, 13, 256, 2)
    """
    keys = official_key_map(variant, model)
    variables = {variable.path: variable for variable in model.weights}
    layer_names = {layer.name for layer in model.layers}
    ignored = {
        key
        for layer, layer_keys in keymap.OPTIONAL_LAYERS.items()
        if layer not in layer_names
        for key in layer_keys
    }
    missing = sorted(key for key in keys if key not in state_dict)
    unexpected = sorted(key for key in state_dict if key not in keys and key not in ignored)
    mismatched = []
    converted = {}
    for key, path in keys.items():
        if key not in state_dict:
            continue
        try:
            converted[path] = convert_tensor(
                transform_for(path), state_dict[key], variables[path].shape
            )
        except ValueError as error:
            mismatched.append(f"{key} -> {path}: {error}")
    problems = [
        f"{label} ({len(items)}): {_listing(items)}"
        for label, items in (
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("wrong shapes", mismatched),
        )
        if items
    ]
    if problems:
        raise ValueError(
            f"The checkpoint does not match {variant.key!r} as built (model {model.name!r}); "
            + "; ".join(problems)
        )
    return converted


def unwrap_state_dict(checkpoint: Mapping) -> Mapping:
    """The state dict inside a checkpoint: ``checkpoint["model"]`` (or ``"module"``) if nested.

    Args:
        checkpoint: what :func:`keras_fourier.models.pth.read_checkpoint` (or
            ``torch.load``) returned.

    Returns:
        The mapping of parameter names to tensors.

    Raises:
        ValueError: `checkpoint` is not a mapping.

    Example:
        >>> unwrap_state_dict({"model": {"head.bias": 0}, "epoch": 299})
        {'head.bias': 0}
    """
    if not isinstance(checkpoint, Mapping):
        raise ValueError(
            f"A checkpoint must be a state dict (a mapping); received {type(checkpoint).__name__}."
        )
    for key in ("model", "module"):
        if isinstance(checkpoint.get(key), Mapping):
            return checkpoint[key]
    return checkpoint


def read_pth(path: str) -> dict[str, np.ndarray]:
    """Reads an official PyTorch checkpoint into NumPy arrays, without PyTorch.

    The file is read by :func:`keras_fourier.models.pth.read_checkpoint`,
    whose unpickler accepts only tensors and plain containers (the training
    arguments some checkpoints keep, an ``argparse.Namespace``, are read as a
    dict), so no code in the file runs; a state dict nested under ``"model"``
    or ``"module"`` is unwrapped.

    Args:
        path: a ``.pth``/``.pt`` file written by ``torch.save``.

    Returns:
        Official key -> float32 NumPy array.

    Raises:
        ValueError: the file cannot be read as a state dict of tensors, or
            its pickle refers to anything else (
            :class:`~keras_fourier.models.pth.UnsafeCheckpointError`).

    Example:
        >>> read_pth("hornet_tiny_7x7.pth")["head.weight"].shape
        (1000, 512)
    """
    try:
        checkpoint = pth.read_checkpoint(path)
    except pth.UnsafeCheckpointError as error:
        raise pth.UnsafeCheckpointError(f"{path!r}: {error}") from error
    except (OSError, ValueError) as error:
        raise ValueError(f"Could not read {path!r} as a PyTorch checkpoint: {error}") from error
    state_dict = unwrap_state_dict(checkpoint)
    not_tensors = sorted(
        str(key) for key, value in state_dict.items() if not isinstance(value, np.ndarray)
    )
    if not_tensors:
        raise ValueError(
            f"{path!r} is not a state dict of tensors; entries that are not tensors: "
            f"{_listing(not_tensors)}"
        )
    return {str(key): value.astype(np.float32) for key, value in state_dict.items()}
