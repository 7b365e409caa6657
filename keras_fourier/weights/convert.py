"""Applying a key map to a checkpoint: rename, transform, check every key, assign all or nothing.

A family gives, for a built model, its key map (beside the family, as timm
keeps ``checkpoint_filter_fn`` beside each model: ``vision_weights.pytorch_key_map``,
``fnet_weights.flax_key_map``, ``fnet_weights.keras_hub_key_map``): a
function ``key_map(model, checkpoint_keys) -> (keys, ignored)`` where
``keys`` maps each checkpoint key to ``(variable, transform)`` and
``ignored`` names the checkpoint keys the model has no place for (heads it
was built without). This module does the rest, the same for every family:

* :func:`convert_tensor` changes one tensor's layout (:data:`TRANSFORMS`):
  Linear (out, in) to Dense (in, out); Conv2d (out, in, kh, kw) to Conv2D
  (kh, kw, in, out); depthwise Conv2d (C, 1, kh, kw) to DepthwiseConv2D
  (kh, kw, C, 1); mmdetection's RoI-head fc over a flattened (C, 7, 7) map
  to a Dense over a flattened (7, 7, C) one (rows permuted); ConvTranspose2d
  (in, out, kh, kw) to Conv2DTranspose (kh, kw, out, in) is "conv"'s
  permutation; a leading axis of 1 dropped; and the resolution-dependent
  tensors of vision models resized to the variable's shape
  (:mod:`keras_fourier.weights.resize`);
* :func:`convert` checks a whole checkpoint against the key map, listing
  every missing key, unexpected key and wrong shape in one message; tensors
  still in their file (:class:`~keras_fourier.weights.stored.StoredTensor`)
  are compared by name and size first and only those the model takes are
  read, within :func:`read_ceiling` of the model's own size;
* :func:`load_tensors` converts and assigns all of them or none
  (:func:`assign_atomically`); :func:`copy_weights_except` copies a donor
  model's variables, all or none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

import keras
import numpy as np

from keras_fourier.limits import check_memory, format_bytes
from keras_fourier.weights.hdf5 import lossy_cast
from keras_fourier.weights.resize import (
    resize_global_filter,
    resize_global_local_filter,
    resize_pos_embed,
)
from keras_fourier.weights.stored import read_bytes

# mmdetection's RoI box heads flatten a (C, 7, 7) RoI map (NCHW) into their first fc.
ROI_SIZE = 7


def _roi_linear(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A Linear over a flattened (C, 7, 7) map -> a Dense over a flattened (7, 7, C) map."""
    area = ROI_SIZE * ROI_SIZE
    if value.shape[1] % area or (value.shape[1], value.shape[0]) != tuple(shape):
        raise ValueError(
            f"checkpoint shape {value.shape} is not a Linear over a flattened "
            f"(C, {ROI_SIZE}, {ROI_SIZE}) map into Keras shape {tuple(shape)}"
        )
    rows = value.reshape(value.shape[0], -1, ROI_SIZE, ROI_SIZE)
    return rows.transpose(2, 3, 1, 0).reshape(shape)


KeyMap = Mapping[str, tuple[Any, str]]
# key_map(model, checkpoint_keys) -> (checkpoint key -> (variable, transform), ignored keys).
KeyMapFunction = Callable[[keras.Model, Collection[str]], tuple[KeyMap, Collection[str]]]
# A tensor's layout change from the checkpoint to the Keras variable of `shape`.
TRANSFORMS: dict[str, Callable[[np.ndarray, tuple[int, ...]], np.ndarray]] = {
    "copy": lambda value, shape: value,
    "linear": lambda value, shape: value.T,
    "conv": lambda value, shape: value.transpose(2, 3, 1, 0),
    "depthwise": lambda value, shape: value.transpose(2, 3, 0, 1),
    "squeeze_leading": lambda value, shape: value.reshape(value.shape[1:]),
    "roi_linear": _roi_linear,
    "pos_embed": lambda value, shape: resize_pos_embed(value, shape[1:3]),
    "global_filter": lambda value, shape: resize_global_filter(value, shape[:2]),
    "global_local_filter": lambda value, shape: resize_global_local_filter(value, shape[1:3]),
}
_RANKS = {
    "linear": 2,
    "roi_linear": 2,
    "conv": 4,
    "depthwise": 4,
    "global_filter": 4,
    "global_local_filter": 4,
}
# The transforms that resize (a checkpoint of another resolution); the others keep every value.
RESIZING = frozenset({"pos_embed", "global_filter", "global_local_filter"})
# What a checkpoint's tensors may need to be read beyond twice their model's float32 weights:
# room for filters and position embeddings of another resolution in a small model.
_READ_MARGIN_BYTES = 16 * 2**20
_MAX_LISTED = 10


def listing(items: list[str]) -> str:
    """The first ten of `items`, comma-separated, then how many more there are."""
    shown = ", ".join(items[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return f"{shown}, ... and {more} more" if more > 0 else shown


def map_variables(
    model: keras.Model,
    key_of: Callable[[str], str | None],
    transform_of: Callable[[str], str],
    unmapped_message: str,
) -> dict[str, tuple[keras.Variable, str]]:
    """A key map: each variable of `model` under its official key, with its transform.

    Args:
        model: the model whose variables are mapped.
        key_of: a variable's path -> its official key, None for none.
        transform_of: a variable's path -> the transform of :func:`convert_tensor`.
        unmapped_message: the start of the error for variables without a key
            (the listing of their paths follows).

    Returns:
        {official key: (variable, transform)}.

    Raises:
        ValueError: variables without an official key, all listed.

    Example:
        >>> keys = map_variables(model, lambda p: p, lambda p: "copy", "")  # doctest: +SKIP
    """
    keys, unmapped = {}, []
    for variable in model.weights:
        key = key_of(variable.path)
        if key is None:
            unmapped.append(variable.path)
        else:
            keys[key] = (variable, transform_of(variable.path))
    if unmapped:
        raise ValueError(f"{unmapped_message}{listing(unmapped)}")
    return keys


def convert_tensor(transform: str, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Converts one checkpoint tensor to the layout (and size) of a Keras variable.

    Args:
        transform: a key of :data:`TRANSFORMS`.
        value: the checkpoint's tensor as a NumPy array.
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
    return np.ascontiguousarray(_transformed(transform, value, shape))


def _transformed(transform: str, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`value` in the layout of a variable of `shape` (a view where the transform allows)."""
    if transform not in TRANSFORMS:
        raise ValueError(f"`transform` must be one of {tuple(TRANSFORMS)}. Received: {transform!r}")
    value = np.asarray(value, dtype=np.float32)
    shape = tuple(int(d) for d in shape)
    rank = _RANKS.get(transform)
    if rank is not None and value.ndim != rank:
        raise ValueError(
            f"a {transform} tensor must have rank {rank}; checkpoint shape {value.shape}, "
            f"Keras shape {shape}"
        )
    if transform == "squeeze_leading" and (value.ndim == 0 or value.shape[0] != 1):
        raise ValueError(f"checkpoint shape {value.shape} has no leading axis of 1")
    out = TRANSFORMS[transform](value, shape)
    if out.shape != shape:
        raise ValueError(f"checkpoint shape {value.shape} gives {out.shape}, expected {shape}")
    return out


def convert(
    model: keras.Model,
    tensors: Mapping[str, Any],
    key_map: KeyMapFunction,
    *,
    description: str | None = None,
) -> list[tuple[Any, np.ndarray]]:
    """Checks a whole checkpoint against `model`'s key map and converts its tensors.

    Every variable of the key map must come from a checkpoint key and every
    checkpoint key must be used, but those the key map ignores. Nothing is
    assigned.

    Args:
        model: the model to load.
        tensors: checkpoint key -> array.
        key_map: the family's ``key_map(model, checkpoint_keys) -> (keys, ignored)``.
        description: names the model in the message. Default None:
            ``model 'name'``.

    Returns:
        (variable, float32 value of the variable's shape) pairs.

    Raises:
        ValueError: listing the missing keys, the unexpected keys and the
            tensors of the wrong shape or of a dtype the variable would hold
            with loss (complex into real, floating point into integer), all
            of them in one message.

    Example:
        >>> dense = keras.layers.Dense(2)
        >>> dense.build((None, 3))
        >>> keys = {"k": (dense.kernel, "linear"), "b": (dense.bias, "copy")}
        >>> key_map = lambda model, names: (keys, ())
        >>> pairs = convert(dense, {"k": np.ones((2, 3)), "b": np.zeros(2)}, key_map)
        >>> [value.shape for _, value in pairs]
        [(3, 2), (2,)]
    """
    keys, ignored = key_map(model, tensors.keys())
    ignored = set(ignored)
    missing = sorted(key for key in keys if key not in tensors)
    unexpected = sorted(key for key in tensors if key not in keys and key not in ignored)
    description = description or f"model {model.name!r}"
    wrong, taken = [], []
    for key, (variable, transform) in keys.items():
        value = tensors.get(key)
        if value is None:
            continue
        if not hasattr(value, "__array__") or not np.issubdtype(value.dtype, np.number):
            wrong.append(f"{key} -> {variable.path}: not a numeric array ({type(value).__name__})")
        elif lossy_cast(value.dtype, np.dtype(variable.dtype)):
            wrong.append(
                f"{key} -> {variable.path}: stored as {value.dtype.name}, which a "
                f"{variable.dtype} variable would hold with loss"
            )
        else:
            try:
                if transform not in RESIZING:  # the layout change of its shape, nothing read
                    dummy = np.broadcast_to(np.zeros((), np.float32), tuple(value.shape))
                    _transformed(transform, dummy, variable.shape)
                taken.append((key, variable, transform, value))
            except ValueError as error:
                wrong.append(f"{key} -> {variable.path}: {error}")
    check_read(description, model, [(key, value) for key, _, _, value in taken])
    pairs = []
    for key, variable, transform, value in taken:
        array = np.asarray(value)  # a StoredTensor is read here, once its size is known
        try:
            pairs.append((variable, convert_tensor(transform, array, variable.shape)))
        except ValueError as error:
            wrong.append(f"{key} -> {variable.path}: {error}")
    problems = [
        f"{label} ({len(items)}): {listing(items)}"
        for label, items in (
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("wrong shapes", wrong),
        )
        if items
    ]
    if problems:
        raise ValueError(f"The checkpoint does not match {description}; " + "; ".join(problems))
    return pairs


def read_ceiling(model: keras.Model) -> int:
    """The most bytes a checkpoint's tensors for `model` may take when read.

    Twice the model's weights in float32 (a tensor read, then converted)
    plus 16 MiB for filters and position embeddings resized from another
    resolution.

    Example:
        >>> read_ceiling(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]))
        16777280
    """
    return 2 * sum(4 * math.prod(variable.shape) for variable in model.weights) + (
        _READ_MARGIN_BYTES
    )


def check_read(description: str, model: keras.Model, tensors: list[tuple[str, Any]]) -> None:
    """Refuses, before reading them, checkpoint tensors larger than `model` can take.

    Args:
        description: names the model in the message.
        model: the model they load into.
        tensors: (key, array or StoredTensor) that the model takes.

    Raises:
        ValueError: their reads take more than :func:`read_ceiling` or
            ``KERAS_FOURIER_MAX_MEMORY``, naming the largest.
    """
    if not tensors:
        return
    total = read_bytes(value for _, value in tensors)
    key, value = max(tensors, key=lambda item: item[1].nbytes)
    received = f"{key}={tuple(value.shape)}"
    check_memory(f"Reading the checkpoint's tensors for {description}", total, received)
    ceiling = read_ceiling(model)
    if total > ceiling:
        raise ValueError(
            f"The checkpoint's tensors for {description} take {format_bytes(total)} to read, "
            f"more than the {format_bytes(ceiling)} that its weights allow (twice their float32 "
            f"size and 16 MiB for resized filters); they were not read. Received: {received}"
        )


def assign_atomically(model: keras.Model, load: Callable[[], None], source: str) -> None:
    """Runs `load()`; if it fails, restores every weight of `model` and raises ValueError."""
    snapshot = [variable.numpy() for variable in model.weights]
    try:
        load()
    except Exception as error:
        for variable, value in zip(model.weights, snapshot, strict=True):
            variable.assign(value)
        raise ValueError(
            f"The weights in {source!r} do not match the architecture of model "
            f"{model.name!r}; the model was left unchanged. Cause: {error}"
        ) from error


def load_tensors(
    model: keras.Model,
    tensors: Mapping[str, Any],
    key_map: KeyMapFunction,
    *,
    source: str,
    description: str | None = None,
) -> None:
    """Loads a checkpoint's tensors into `model` through its key map, all or nothing.

    Args:
        model: the model to load.
        tensors: checkpoint key -> array (what a reader returned).
        key_map: the family's key map (see :func:`convert`).
        source: the file or folder, named in the error.
        description: names the model in the message (see :func:`convert`).

    Raises:
        ValueError: the checkpoint does not match (every problem listed);
            the model is unchanged.
    """

    def load() -> None:
        for variable, value in convert(model, tensors, key_map, description=description):
            variable.assign(value)

    assign_atomically(model, load, source)


def copy_weights_except(model: keras.Model, donor: keras.Model, skip: str, source: str) -> None:
    """Copies `donor`'s variables into `model`'s of the same path, but those under `skip`.

    The start of fine-tuning: `donor` holds pretrained weights (with
    whatever head they came with, or none) and `model` keeps its freshly
    initialised head (the variables whose path starts with ``skip + "/"``).
    All or nothing.

    Args:
        model: the model to load into.
        donor: a model of the same architecture holding the weights.
        skip: the layer name whose variables `model` keeps, e.g. "head".
        source: the weights' file or name, for the message.

    Raises:
        ValueError: a variable of `model` that `donor` lacks or holds in
            another shape (listed); `model` is then unchanged.
    """

    def load() -> None:
        values = {variable.path: variable for variable in donor.weights}
        missing, wrong, pairs = [], [], []
        for variable in model.weights:
            if variable.path.startswith(skip + "/"):
                continue
            value = values.get(variable.path)
            if value is None:
                missing.append(variable.path)
            elif tuple(value.shape) != tuple(variable.shape):
                wrong.append(
                    f"{variable.path}: weights {tuple(value.shape)}, model {tuple(variable.shape)}"
                )
            else:
                pairs.append((variable, value))
        if missing or wrong:
            raise ValueError(
                "; ".join(
                    f"{label} ({len(items)}): {', '.join(items[:5])}"
                    for label, items in (("missing variables", missing), ("wrong shapes", wrong))
                    if items
                )
            )
        for variable, value in pairs:
            variable.assign(value)

    assign_atomically(model, load, source)
