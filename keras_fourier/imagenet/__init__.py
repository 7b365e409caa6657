"""ImageNet-1k helpers in the keras.applications style: preprocess_input, decode_predictions.

The class list (``classes.tsv``: WordNet id and lemmas of each of the 1000
classes, in the order of the official checkpoints' heads) comes from timm
1.0.31 (``timm/data/_info/imagenet_synsets.txt`` and
``imagenet_synset_to_lemma.txt``, Apache-2.0, ``LICENSE-timm.txt``); the lemmas
are WordNet 3.0's (Princeton University, WordNet licence, ``NOTICE.txt``).
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
NUM_CLASSES = 1000
MODES = ("model", "torch")


@functools.cache
def class_index() -> tuple[tuple[str, str], ...]:
    """The 1000 ImageNet classes as (WordNet id, name), in class-index order.

    The name is the first WordNet lemma with spaces as underscores, as in
    keras.applications (``("n01440764", "tench")``).

    Returns:
        A tuple of 1000 (wnid, name) pairs.

    Example:
        >>> class_index()[1]
        ('n01443537', 'goldfish')
    """
    text = resources.files(__package__).joinpath("classes.tsv").read_text(encoding="utf-8")
    rows = []
    for line in text.splitlines():
        wnid, lemmas = line.split("\t")
        rows.append((wnid, lemmas.split(",")[0].strip().replace(" ", "_")))
    return tuple(rows)


def preprocess_input(x, data_format: str | None = None, mode: str = "model"):
    """Prepares RGB images in 0-255 for a keras_fourier ImageNet model.

    keras_fourier's vision models normalise their inputs themselves (built
    with ``include_preprocessing=True``, the default), so, as for
    keras.applications' ConvNeXt and EfficientNetV2, the default mode only
    casts to float32. ``mode="torch"`` is for models built with
    ``include_preprocessing=False``: it scales to [0, 1] and normalises with
    the ImageNet mean and standard deviation, as the official PyTorch code.

    Args:
        x: images, a NumPy array or tensor (..., H, W, 3) (or (..., 3, H, W)
            with ``data_format="channels_first"``) with values in 0-255.
        data_format: "channels_last" or "channels_first". Default None:
            ``keras.config.image_data_format()``.
        mode: "model" (default) or "torch".

    Returns:
        float32 images of the same shape; a NumPy array for NumPy input,
        else a tensor.

    Raises:
        ValueError: unknown `mode` or `data_format`, or images without 3
            channels.

    Example:
        >>> preprocess_input(np.full((1, 2, 2, 3), 255.0), mode="torch")[0, 0, 0]
        array([2.2489083, 2.4285715, 2.64     ], dtype=float32)
    """
    import keras

    if mode not in MODES:
        raise ValueError(f"`mode` must be one of {MODES}. Received: mode={mode!r}")
    data_format = data_format or keras.config.image_data_format()
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError(
            "`data_format` must be 'channels_last' or 'channels_first'. "
            f"Received: data_format={data_format!r}"
        )
    axis = -1 if data_format == "channels_last" else -3
    shape = tuple(x.shape)
    if len(shape) < 3 or shape[axis] != 3:
        raise ValueError(
            f"preprocess_input expects RGB images with 3 channels on axis {axis} "
            f"({data_format}). Received: shape={shape}"
        )
    is_numpy = isinstance(x, np.ndarray)
    ops = np if is_numpy else keras.ops
    x = x.astype("float32") if is_numpy else keras.ops.cast(x, "float32")
    if mode == "model":
        return x
    stats_shape = (3,) if axis == -1 else (3, 1, 1)
    mean = np.reshape(np.array(IMAGENET_MEAN, "float32") * 255.0, stats_shape)
    std = np.reshape(np.array(IMAGENET_STD, "float32") * 255.0, stats_shape)
    return ops.divide(ops.subtract(x, mean), std)


def decode_predictions(preds, top: int = 5) -> list[list[tuple[str, str, float]]]:
    """The `top` ImageNet classes of each prediction, as keras.applications returns them.

    Args:
        preds: (batch, 1000) probabilities or logits (NumPy array or tensor).
        top: how many classes per example, 1 to 1000. Default 5.

    Returns:
        One list per example of (WordNet id, class name, score) tuples,
        highest score first.

    Raises:
        ValueError: `preds` is not (batch, 1000), or `top` is out of range.

    Example:
        >>> preds = np.zeros((1, 1000)); preds[0, 1] = 0.9
        >>> decode_predictions(preds, top=1)
        [[('n01443537', 'goldfish', 0.9)]]
    """
    import keras

    preds = np.asarray(keras.ops.convert_to_numpy(preds))
    if preds.ndim != 2 or preds.shape[1] != NUM_CLASSES:
        raise ValueError(
            "decode_predictions expects a batch of ImageNet predictions of shape "
            f"(samples, {NUM_CLASSES}). Received: preds.shape={preds.shape}"
        )
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= NUM_CLASSES:
        raise ValueError(f"`top` must be an int in [1, {NUM_CLASSES}]. Received: top={top!r}")
    classes = class_index()
    results = []
    for row in preds:
        best = np.argsort(-row, kind="stable")[:top]
        results.append([(*classes[i], float(row[i])) for i in best])
    return results


__all__ = ["class_index", "decode_predictions", "preprocess_input"]
