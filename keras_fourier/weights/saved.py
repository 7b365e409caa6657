"""The package's own weight files: `.weights.h5` and `.keras`, loaded all or nothing.

:func:`load_saved_weights` loads either into a model after checking that it
holds exactly the model's tensors (Keras itself skips entries a model has no
place for); a file saved at another input size differs only in its filters
and position embeddings, which are resized to the model's
(:mod:`keras_fourier.weights.resize`). :func:`load_keras_file` is
`keras.saving.load_model` with one-line errors. A file that does not match
raises ValueError and leaves the model's weights exactly as they were.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile

import h5py
import keras
import numpy as np

from keras_fourier.weights.convert import assign_atomically
from keras_fourier.weights.resize import resizable_dataset_kind, resizable_kind, resize_variable


def load_keras_file(path: str | os.PathLike, **kwargs) -> keras.Model:
    """`keras.saving.load_model` with clear errors for missing, empty and truncated files.

    Args:
        path: a `.keras` file.
        **kwargs: passed to `keras.saving.load_model` (e.g. ``compile=False``).

    Returns:
        The model.

    Raises:
        ValueError: naming the file: it does not exist, is empty, is not a
            complete `.keras` zip (truncated), Keras cannot read it, or its
            config is refused (a Python lambda, a class that is neither
            Keras's nor registered): one line, without the config.

    Example:
        >>> load_keras_file("runs/default/model.keras", compile=False).name  # doctest: +SKIP
        'gfnet_tiny'
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"No .keras file at {path!r}.")
    size = os.path.getsize(path)
    if size == 0 or not zipfile.is_zipfile(path):
        state = "empty (0 bytes)" if size == 0 else f"not a complete .keras zip ({size} bytes)"
        raise ValueError(
            f"The .keras file {path!r} is {state}: it was truncated or is not a Keras model."
        )
    try:
        return keras.saving.load_model(path, **kwargs)
    except (OSError, KeyError, zipfile.BadZipFile) as error:
        raise ValueError(f"Cannot read the .keras file {path!r}: {error}") from error
    except (TypeError, ValueError) as error:
        # Keras's message of an unknown class embeds the whole config over several lines.
        reason = re.search(r"Could not locate (class|function) '[^']*'", str(error))
        reason = reason.group(0) if reason else " ".join(str(error).split()).rstrip(".")
        raise ValueError(f"Refused the .keras file {path!r}: {reason}.") from error


def _copy_from_keras_file(model: keras.Model, path: str) -> None:
    source = load_keras_file(path, compile=False)
    theirs = {variable.path: variable for variable in source.weights}
    ours = {variable.path: variable for variable in model.weights}
    if theirs.keys() != ours.keys():
        missing = sorted(ours.keys() - theirs.keys())[:5]
        extra = sorted(theirs.keys() - ours.keys())[:5]
        raise ValueError(f"variables differ (missing {missing}, unexpected {extra})")
    values = {}
    for key, variable in ours.items():
        value = np.asarray(theirs[key].numpy())
        if tuple(value.shape) == tuple(variable.shape):
            values[key] = value
            continue
        try:
            values[key] = resize_variable(resizable_kind(key), value, variable.shape)
        except ValueError as error:
            raise ValueError(f"{key}: {error}") from error
    for key, variable in ours.items():
        variable.assign(values[key])


def _check_and_load_weights_file(model: keras.Model, path: str) -> None:
    """`model.load_weights`, after checking the file holds exactly the model's tensors.

    Keras skips entries of a `.weights.h5` that the model has no place for,
    so a file from a deeper model would load silently; comparing the
    multisets of tensor shapes first rules that out. A file saved at another
    input size differs only in its filters and position embeddings: they are
    resized to the model's (:func:`~keras_fourier.weights.resize.resize_variable`) in a
    temporary copy, which is loaded instead.
    """
    stored = tensor_shapes(path)
    expected = sorted(tuple(variable.shape) for variable in model.weights)
    if sorted(stored.values()) == expected:
        model.load_weights(path)
        return
    own = own_layout(model)
    differing = [name for name in own if stored.get(name) != own[name]]
    kinds = {name: resizable_dataset_kind(name) for name in differing}
    if stored.keys() != own.keys() or None in kinds.values():
        raise ValueError(_layout_difference(stored, own))
    with tempfile.TemporaryDirectory(prefix="keras_fourier_resized_") as directory:
        resized = os.path.join(directory, "resized.weights.h5")
        shutil.copyfile(path, resized)
        with h5py.File(resized, "r+") as handle:
            for name, kind in kinds.items():
                try:
                    value = resize_variable(kind, handle[name][()], own[name])
                except ValueError as error:
                    raise ValueError(f"{name}: {error}") from error
                del handle[name]
                handle.create_dataset(name, data=value)
        model.load_weights(resized)


def tensor_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """{dataset name: shape} of every weight tensor in an HDF5 file, in file order.

    The ``optimizer/`` group that Keras adds for a compiled, trained model
    holds no weights of the model and is left out.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    try:
        with h5py.File(path, "r") as handle:
            handle.visititems(
                lambda name, item: (
                    shapes.__setitem__(name, tuple(item.shape))
                    if isinstance(item, h5py.Dataset) and not name.startswith("optimizer/")
                    else None
                )
            )
    except OSError as error:
        size = os.path.getsize(path) if os.path.exists(path) else None
        raise ValueError(
            f"it is not a readable .weights.h5 file ({size} bytes; truncated?): {error}"
        ) from error
    return shapes


def own_layout(model: keras.Model) -> dict[str, tuple[int, ...]]:
    """{dataset name: shape} of the `.weights.h5` that `model` itself saves."""
    with tempfile.TemporaryDirectory(prefix="keras_fourier_layout_") as directory:
        own = os.path.join(directory, "model.weights.h5")
        model.save_weights(own)
        return tensor_shapes(own)


def _layout_difference(
    stored: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]
) -> str:
    """Names the first tensors whose shapes differ between the file and the model's own layout."""
    differing = [
        f"{name}: file {stored.get(name, 'missing')}, model {expected.get(name, 'missing')}"
        for name in sorted(set(stored) | set(expected))
        if stored.get(name) != expected.get(name)
    ]
    return (
        f"the file holds {len(stored)} tensors, the model {len(expected)}; first differing "
        f"tensors: {'; '.join(differing[:3])}"
    )


def load_weights_file(model: keras.Model, path: str) -> None:
    """Loads a `.weights.h5` saved by keras_fourier into `model`, all or nothing.

    Args:
        model: the model to load into.
        path: the `.weights.h5` file.

    Raises:
        ValueError: the file does not hold exactly the model's tensors; the
            model is then unchanged.
    """
    assign_atomically(model, lambda: _check_and_load_weights_file(model, path), path)


def load_saved_weights(model: keras.Model, weights: str | os.PathLike) -> bool:
    """Loads a `.weights.h5` or `.keras` file saved by keras_fourier into `model`, all or nothing.

    Args:
        model: the model to load into.
        weights: the path of the file.

    Returns:
        True if `weights` is such a file and was loaded; False for any other
        path (nothing is done).

    Raises:
        ValueError: the file does not match the model (which is then unchanged).
    """
    path = os.fspath(weights)
    if path.endswith(".weights.h5"):
        load_weights_file(model, path)
    elif path.endswith(".keras"):
        assign_atomically(model, lambda: _copy_from_keras_file(model, path), path)
    else:
        return False
    return True


def load_file_weights(model: keras.Model, weights: str | os.PathLike) -> None:
    """Loads a `.weights.h5` or `.keras` file saved by keras_fourier, or raises ValueError.

    The loader of models without official checkpoints (`build_model`
    compositions).

    Args:
        model: the model to load into.
        weights: the path of the file.

    Raises:
        ValueError: another kind of file, or one that does not match the
            model (which is then unchanged).
    """
    if weights == "imagenet":
        raise ValueError(
            f"There is no official ImageNet checkpoint for {model.name!r}: weights='imagenet' "
            "is available for the named builders with a release (GFNet, GFNet-H, HorNet)."
        )
    if not load_saved_weights(model, weights):
        raise ValueError(
            f"Cannot load weights into {model.name!r}: expected a '.weights.h5' or '.keras' "
            f"file saved by keras_fourier. Received: weights={weights!r}"
        )


def head_classes(path: str | os.PathLike, headless: keras.Model) -> int | None:
    """The class count of the head a `.weights.h5` holds beyond the tensors of `headless`.

    Args:
        path: a `.weights.h5` saved by keras_fourier.
        headless: the model built without its head (``include_top=False``).

    Returns:
        K when the file holds exactly `headless`'s tensors plus a (C, K)
        kernel and a (K,) bias, else None.
    """
    stored = tensor_shapes(os.fspath(path))
    extra = {name: stored[name] for name in stored.keys() - own_layout(headless).keys()}
    kernels = [shape for shape in extra.values() if len(shape) == 2]
    biases = [shape for shape in extra.values() if len(shape) == 1]
    if len(extra) == 2 and len(kernels) == len(biases) == 1 and kernels[0][1] == biases[0][0]:
        return biases[0][0]
    return None
