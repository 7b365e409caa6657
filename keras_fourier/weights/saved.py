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

import math
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from typing import Any

import h5py
import keras
import numpy as np

from keras_fourier.limits import (
    check_memory,
    check_parameters,
    check_zip_members,
    open_zip_member,
    read_zip_json,
)
from keras_fourier.weights.convert import assign_atomically
from keras_fourier.weights.hdf5 import (
    DatasetHeader,
    check_casts,
    check_headers,
    dataset_headers,
)
from keras_fourier.weights.resize import resizable_dataset_kind, resizable_kind, resize_variable

# Keys of a layer's config whose integers are no sizes of it (its graph, its dtype policy,
# Keras's ids of shared objects); keys naming a seed are skipped too.
_NOT_SIZES = (
    "layers",
    "inbound_nodes",
    "build_config",
    "input_layers",
    "output_layers",
    "shape",
    "batch_shape",
    "dtype",
    "shared_object_id",
)


def _is_size_key(key: str) -> bool:
    return key not in _NOT_SIZES and "seed" not in key


KERAS_CONFIG = "config.json"
KERAS_WEIGHTS = "model.weights.h5"


def _integers(value: Any) -> Iterator[int]:
    """The integers of a layer config, but those of nested layers, graph links and seeds."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _integers(item)
    elif isinstance(value, dict) and not _is_layer(value):
        for key, item in value.items():
            if _is_size_key(key):
                yield from _integers(item)


def _shapes(value: Any) -> list[list[int]]:
    """The shapes (their positive sizes) in a build config's input shape or shapes."""
    if not isinstance(value, (list, dict)):
        return []
    items = list(value.values()) if isinstance(value, dict) else value
    if all(
        item is None or (isinstance(item, int) and not isinstance(item, bool)) for item in items
    ):
        return [[item for item in items if item is not None and item > 0]]
    return [dims for item in items for dims in _shapes(item)]


def _is_layer(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("config"), dict)
        and ("trainable" in value["config"] or "batch_shape" in value["config"])
    )


def layer_configs(value: Any) -> Iterator[dict]:
    """Every layer description (at any depth) of a Keras model config.

    Example:
        >>> [layer["class_name"] for layer in layer_configs(read_keras_config("m.keras"))]
        ['InputLayer', 'Dense']
    """
    if isinstance(value, dict):
        if _is_layer(value):
            yield value
        for item in value.values():
            yield from layer_configs(item)
    elif isinstance(value, list):
        for item in value:
            yield from layer_configs(item)


def config_sizes(config: Any) -> tuple[int, int, str]:
    """An upper estimate of what a Keras model config builds, read before Keras builds it.

    Each layer is taken to hold at most (its input channels) x (its largest
    integer argument) x (its kernel window) parameters, which bounds a
    Dense, a convolution, an embedding or an attention layer; its input
    (``build_config``, an input layer's ``batch_shape``) gives the values of
    one example there.

    Args:
        config: the parsed ``config.json`` of a ``.keras`` archive.

    Returns:
        (parameters of all layers, values of the largest input of one
        example, ``layer.argument=value`` naming the largest parameter
        term).

    Example:
        >>> layer = {"class_name": "Dense", "config": {"trainable": True, "units": 10},
        ...          "build_config": {"input_shape": [None, 64]}}
        >>> config_sizes({"config": {"layers": [layer]}})[:2]
        (640, 64)
    """
    parameters, largest_input, named, named_count = 0, 0, "", -1
    for layer in layer_configs(config):
        settings = layer["config"]
        build = layer.get("build_config")
        shape = build.get("input_shape") if isinstance(build, dict) else None
        if "batch_shape" in settings:
            shape = settings["batch_shape"]
        shapes = _shapes(shape)
        largest_input = max([largest_input, *(math.prod(dims) for dims in shapes)])
        channels = max((dims[-1] for dims in shapes if dims), default=1)
        window = settings.get("kernel_size")
        window = math.prod(_integers(window)) if isinstance(window, (int, list)) else 1
        sizes = {
            key: max(_integers(value), default=0)
            for key, value in settings.items()
            if _is_size_key(key)
        }
        key, size = max(sizes.items(), key=lambda item: item[1], default=("", 0))
        count = channels * max(size, 1) * max(window, 1)
        parameters += count
        if count > named_count:
            named, named_count = (
                f"{settings.get('name', layer.get('class_name'))}.{key}={size}",
                count,
            )
    return parameters, largest_input, named


def check_keras_archive(path: str) -> dict[str, DatasetHeader]:
    """Checks a `.keras` archive within bounds before Keras builds anything from it.

    The zip directory (members' sizes and compression ratios), the
    ``config.json`` (its size and nesting, then :func:`config_sizes` against
    the parameter and memory ceilings of :mod:`keras_fourier.limits`) and the
    weights' HDF5 headers (:func:`~keras_fourier.weights.hdf5.check_headers`;
    complex tensors, which no Keras variable holds, are refused).

    Args:
        path: the `.keras` file.

    Returns:
        The weights' dataset headers ({} when the archive has none).

    Raises:
        ValueError: one line naming the member, layer argument or tensor and
            its value.

    Example:
        >>> check_keras_archive("runs/default/model.keras")  # doctest: +SKIP
    """
    what = f"The .keras file {path!r}"
    with zipfile.ZipFile(path) as archive:
        check_zip_members(archive, what)
        config = read_zip_json(archive, KERAS_CONFIG, what)
        parameters, largest_input, named = config_sizes(config)
        check_parameters(f"{what} describes a model that", parameters, named)
        check_memory(f"{what} describes a model whose largest input", largest_input * 4, named)
        if KERAS_WEIGHTS not in archive.namelist():
            return {}
        with open_zip_member(archive, KERAS_WEIGHTS) as member:
            headers = dataset_headers(member, skip=())
    check_headers(headers, path)
    for name, header in headers.items():
        if header.dtype.kind == "c":
            raise ValueError(
                f"{what} stores tensor {name!r} as {header.dtype.name}: a Keras variable is real, "
                f"and the cast would drop the imaginary parts. Received: {name}={header.dtype.name}"
            )
    return headers


def _check_keras_zip(path: str | os.PathLike) -> str:
    """`path` as a str, once it names a complete zip file; ValueError naming it otherwise."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"No .keras file at {path!r}.")
    size = os.path.getsize(path)
    if size == 0 or not zipfile.is_zipfile(path):
        state = "empty (0 bytes)" if size == 0 else f"not a complete .keras zip ({size} bytes)"
        raise ValueError(
            f"The .keras file {path!r} is {state}: it was truncated or is not a Keras model."
        )
    return path


def read_keras_config(path: str | os.PathLike) -> Any:
    """The parsed ``config.json`` of a `.keras` file, read within bounds; its weights are not read.

    What a model's sizes can be read from before its weights are loaded (with
    :func:`load_keras_file`, which checks the whole archive).

    Raises:
        ValueError: naming the file, as :func:`load_keras_file` does: it does
            not exist, is not a complete `.keras` zip, a member is beyond the
            ceilings of :mod:`keras_fourier.limits`, or the config is not JSON.

    Example:
        >>> read_keras_config("runs/default/model.keras")["class_name"]  # doctest: +SKIP
        'Functional'
    """
    path = _check_keras_zip(path)
    what = f"The .keras file {path!r}"
    try:
        with zipfile.ZipFile(path) as archive:
            check_zip_members(archive, what)
            return read_zip_json(archive, KERAS_CONFIG, what)
    except (OSError, KeyError, zipfile.BadZipFile) as error:
        raise ValueError(f"Cannot read the .keras file {path!r}: {error}") from error


def _checked_keras_archive(path: str | os.PathLike) -> tuple[str, dict[str, DatasetHeader]]:
    """`path` as a str and its weights' headers, once :func:`check_keras_archive` passed."""
    path = _check_keras_zip(path)
    try:
        return path, check_keras_archive(path)
    except (OSError, KeyError, zipfile.BadZipFile) as error:
        raise ValueError(f"Cannot read the .keras file {path!r}: {error}") from error


def load_keras_file(path: str | os.PathLike, **kwargs) -> keras.Model:
    """`keras.saving.load_model` within bounds, with one-line errors.

    Every `.keras` file the package loads comes through here: the archive is
    checked first (:func:`check_keras_archive`: member sizes, the config's
    size, nesting and declared sizes, the weights' headers), and the loaded
    weights must not have been cast with loss (complex or floating point
    tensors into integer variables).

    Args:
        path: a `.keras` file.
        **kwargs: passed to `keras.saving.load_model` (e.g. ``compile=False``).

    Returns:
        The model.

    Raises:
        ValueError: naming the file: it does not exist, is empty, is not a
            complete `.keras` zip (truncated), is beyond a ceiling of
            :mod:`keras_fourier.limits` (naming the member, layer argument or
            tensor), Keras cannot read it, or its config is refused (a
            Python lambda, a class that is neither Keras's nor registered):
            one line, without the config.

    Example:
        >>> load_keras_file("runs/default/model.keras", compile=False).name  # doctest: +SKIP
        'gfnet_tiny'
    """
    path, headers = _checked_keras_archive(path)
    try:
        model = keras.saving.load_model(path, **kwargs)
    except (OSError, KeyError, zipfile.BadZipFile) as error:
        raise ValueError(f"Cannot read the .keras file {path!r}: {error}") from error
    except (TypeError, ValueError) as error:
        # Keras's message of an unknown class embeds the whole config over several lines.
        reason = re.search(r"Could not locate (class|function) '[^']*'", str(error))
        reason = reason.group(0) if reason else " ".join(str(error).split()).rstrip(".")
        raise ValueError(f"Refused the .keras file {path!r}: {reason}.") from error
    check_model_casts(model, headers, path)
    return model


def layout_headers(model: keras.Model) -> dict[str, DatasetHeader]:
    """{dataset name: header} of the `.weights.h5` that `model` itself saves."""
    with tempfile.TemporaryDirectory(prefix="keras_fourier_layout_") as directory:
        own = os.path.join(directory, "model.weights.h5")
        model.save_weights(own)
        return dataset_headers(own)


def check_model_casts(model: keras.Model, headers: dict[str, DatasetHeader], source: str) -> None:
    """Raises ValueError when a stored tensor would be cast with loss into `model`'s variable.

    The model's own layout (what it saves) names each variable's dataset;
    it is written only when a cast could lose anything: a stored tensor
    that is not floating point, or a variable that is not.

    Example:
        >>> headers = dataset_headers("w.weights.h5")  # doctest: +SKIP
        >>> check_model_casts(model, headers, "w.weights.h5")  # doctest: +SKIP
    """
    if all(header.dtype.kind == "f" for header in headers.values()) and all(
        keras.backend.is_float_dtype(variable.dtype)
        for variable in model.variables
        if "seed_generator" not in variable.path
    ):
        return
    own = layout_headers(model)
    check_casts(
        {name: header.dtype for name, header in headers.items()},
        {name: header.dtype for name, header in own.items()},
        source,
    )


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
    headers = checked_headers(path)
    check_model_casts(model, headers, path)
    stored = {name: header.shape for name, header in headers.items()}
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


def checked_headers(path: str) -> dict[str, DatasetHeader]:
    """The dataset headers of a `.weights.h5` (no data read), checked within bounds.

    The ``optimizer/`` group that Keras adds for a compiled, trained model
    holds no weights of the model and is left out.

    Raises:
        ValueError: not a readable HDF5 file, or headers refused by
            :func:`~keras_fourier.weights.hdf5.check_headers` (more values than
            the parameter ceiling, data declared but not stored).
    """
    try:
        headers = dataset_headers(path)
    except OSError as error:
        size = os.path.getsize(path) if os.path.exists(path) else None
        raise ValueError(
            f"it is not a readable .weights.h5 file ({size} bytes; truncated?): {error}"
        ) from error
    check_headers(headers, path)
    return headers


def tensor_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """{dataset name: shape} of every weight tensor in an HDF5 file, in file order.

    Read from the headers (:func:`checked_headers`); the ``optimizer/``
    group is left out.
    """
    return {name: header.shape for name, header in checked_headers(path).items()}


def own_layout(model: keras.Model) -> dict[str, tuple[int, ...]]:
    """{dataset name: shape} of the `.weights.h5` that `model` itself saves."""
    return {name: header.shape for name, header in layout_headers(model).items()}


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


def keras_head_classes(path: str | os.PathLike) -> int | None:
    """The class count of the head that a `.keras` file's config declares; its weights are not read.

    The `.keras` counterpart of :func:`head_classes`: the units of the
    model's Dense layer named "head" (the classifier of every vision
    builder), read from the archive's ``config.json`` once the archive has
    passed :func:`check_keras_archive` (a head of more units than the
    ceilings allow is refused before a model of them is built).

    Args:
        path: a `.keras` file saved by keras_fourier.

    Returns:
        The head's units, or None when the model has no Dense "head" (saved
        without its top).

    Raises:
        ValueError: naming the file, as :func:`load_keras_file` does before
            it loads.

    Example:
        >>> keras_head_classes("runs/default/model.keras")  # doctest: +SKIP
        10
    """
    path, _ = _checked_keras_archive(path)
    config = read_keras_config(path)
    settings = config.get("config") if isinstance(config, dict) else None
    layers = settings.get("layers") if isinstance(settings, dict) else None
    for layer in layers if isinstance(layers, list) else ():
        if not isinstance(layer, dict) or layer.get("class_name") != "Dense":
            continue
        options = layer.get("config") if isinstance(layer.get("config"), dict) else {}
        units = options.get("units")
        if options.get("name") == "head" and type(units) is int and units > 0:
            return units
    return None
