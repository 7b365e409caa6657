"""Loading weights into keras_fourier models, all-or-nothing.

`weights` is a `.weights.h5` or `.keras` file saved by keras_fourier, an
official PyTorch checkpoint (`.pth`/`.pt`, read without PyTorch by
:mod:`keras_fourier.models.pth` and converted by
:mod:`keras_fourier.models.checkpoints`), or "imagenet": the official ImageNet
checkpoint of the variant, downloaded once into the Keras cache
(``$KERAS_HOME/keras_fourier``, or ``$KERAS_FOURIER_MIRROR``; whole or not at all, see
:func:`keras_fourier.models.download.download`) and converted once to a
`.weights.h5` file next to it. A file that does not match the architecture raises ValueError and
leaves the model's weights exactly as they were.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable

import keras
import numpy as np

from keras_fourier.fileio import atomic_save
from keras_fourier.models import checkpoints, download
from keras_fourier.models.family import Variant
from keras_fourier.models.releases import Release


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
            values[key] = checkpoints.resize_variable(
                checkpoints.transform_for(key), value, variable.shape
            )
        except ValueError as error:
            raise ValueError(f"{key}: {error}") from error
    for key, variable in ours.items():
        variable.assign(values[key])


# The resolution-dependent tensors of a `.weights.h5`, by dataset name: Keras names a
# layer's group after its class (`global_filter_3`, `position_embedding`) or, inside
# another layer, after its attribute (gnConv's `dwconv`, a GlobalLocalFilter under
# HorNet's global-filter mixer).
_RESIZABLE_DATASETS = (
    (re.compile(r"(?:^|/)global_filter(?:_\d+)?/vars/0$"), "global_filter"),
    (re.compile(r"(?:^|/)position_embedding(?:_\d+)?/vars/0$"), "pos_embed"),
    (re.compile(r"(?:^|/)dwconv/vars/0$"), "global_local_filter"),
)


def _check_and_load_weights_file(model: keras.Model, path: str) -> None:
    """`model.load_weights`, after checking the file holds exactly the model's tensors.

    Keras skips entries of a `.weights.h5` that the model has no place for,
    so a file from a deeper model would load silently; comparing the
    multisets of tensor shapes first rules that out. A file saved at another
    input size differs only in its filters and position embeddings: they are
    resized to the model's (:func:`checkpoints.resize_variable`) in a
    temporary copy, which is loaded instead.
    """
    stored = _tensor_shapes(path)
    expected = sorted(tuple(variable.shape) for variable in model.weights)
    if sorted(stored.values()) == expected:
        model.load_weights(path)
        return
    own = _own_layout(model)
    differing = [name for name in own if stored.get(name) != own[name]]
    kinds = {name: _resizable_kind(name) for name in differing}
    if stored.keys() != own.keys() or None in kinds.values():
        raise ValueError(_layout_difference(stored, own))
    import h5py

    with tempfile.TemporaryDirectory(prefix="keras_fourier_resized_") as directory:
        resized = os.path.join(directory, "resized.weights.h5")
        shutil.copyfile(path, resized)
        with h5py.File(resized, "r+") as handle:
            for name, kind in kinds.items():
                try:
                    value = checkpoints.resize_variable(kind, handle[name][()], own[name])
                except ValueError as error:
                    raise ValueError(f"{name}: {error}") from error
                del handle[name]
                handle.create_dataset(name, data=value)
        model.load_weights(resized)


def _resizable_kind(name: str) -> str | None:
    """The resize of a `.weights.h5` dataset (see `_RESIZABLE_DATASETS`), or None."""
    return next((kind for pattern, kind in _RESIZABLE_DATASETS if pattern.search(name)), None)


def _tensor_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """{dataset name: shape} of every weight tensor in an HDF5 file, in file order.

    The ``optimizer/`` group that Keras adds for a compiled, trained model
    holds no weights of the model and is left out.
    """
    import h5py

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


def _own_layout(model: keras.Model) -> dict[str, tuple[int, ...]]:
    """{dataset name: shape} of the `.weights.h5` that `model` itself saves."""
    with tempfile.TemporaryDirectory(prefix="keras_fourier_layout_") as directory:
        own = os.path.join(directory, "model.weights.h5")
        model.save_weights(own)
        return _tensor_shapes(own)


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


def _assign(model: keras.Model, values: dict[str, np.ndarray]) -> None:
    for variable in model.weights:
        variable.assign(values[variable.path])


def _load_official(variant: Variant, model: keras.Model, path: str) -> None:
    _assign_official(variant, model, checkpoints.read_pth(path), path)


def _assign_official(
    variant: Variant, model: keras.Model, state_dict: dict[str, np.ndarray], path: str
) -> None:
    assign_atomically(
        model,
        lambda: _assign(model, checkpoints.convert_state_dict(variant, state_dict, model)),
        path,
    )


def imagenet_checkpoint(variant: Variant, model: keras.Model) -> Release:
    """The official checkpoint that weights="imagenet" loads into `model`.

    The release trained at the model's input size if there is one (HorNet-L
    GF at 384), else the 224-pixel release.

    Args:
        variant: the variant the model was built from.
        model: the freshly built model.

    Returns:
        The :class:`Release` to download.

    Raises:
        ValueError: the variant has no official checkpoint (AFNONet, models
            of `build_model`), or only an ImageNet-22k one (HorNet-L) while
            the model has a head.

    Example:
        >>> imagenet_checkpoint(catalog.variant("gfnet_ti"), keras_fourier.GFNetTi()).file_name
        'gfnet-ti.pth'
    """
    releases = variant.releases
    if not releases:
        available = sorted(key for key, rows in variant.family.releases.items() if rows)
        raise ValueError(
            f"There is no official ImageNet checkpoint for {variant.key!r}; weights='imagenet' "
            f"is available for {available or 'no variant of ' + variant.family.name}. Use "
            "weights=None or a path."
        )
    size = tuple(model.inputs[0].shape[1:3])
    release = next((r for r in releases if (r.resolution, r.resolution) == size), releases[0])
    has_head = any(layer.name == "head" for layer in model.layers)
    if has_head and release.classes != 1000:
        raise ValueError(
            f"The official checkpoint of {variant.key!r} is trained on ImageNet-22k "
            f"({release.classes} classes) and has no ImageNet-1k head: weights='imagenet' "
            "with include_top=True is only available for variants with an ImageNet-1k "
            "checkpoint. Build it with include_top=False to load the backbone, or pass "
            f"the downloaded '{release.file_name}' as `weights` with classes={release.classes}."
        )
    return release


def _cache_path(checkpoint_path: str, variant: Variant, model: keras.Model) -> str:
    """`.weights.h5` next to the checkpoint, keyed by variant, input size and variables."""
    height, width = model.inputs[0].shape[1:3]
    layout = "\n".join(f"{v.path} {tuple(v.shape)}" for v in model.weights)
    digest = hashlib.sha256(layout.encode()).hexdigest()[:12]
    name = f"{variant.key}_{height}x{width}_{digest}.weights.h5"
    return os.path.join(os.path.dirname(checkpoint_path), name)


def _save_atomically(model: keras.Model, path: str) -> None:
    atomic_save(path, lambda temporary: model.save_weights(temporary, overwrite=True))


def _load_imagenet(variant: Variant, model: keras.Model) -> None:
    release = imagenet_checkpoint(variant, model)
    try:
        checkpoint_path = download.download(release.url, release.file_name, release.sha256)
    except ValueError as error:
        raise ValueError(
            f"weights='imagenet' for {variant.key!r} needs network access the first time. {error}"
        ) from error
    cache = _cache_path(checkpoint_path, variant, model)
    if os.path.exists(cache):
        assign_atomically(model, lambda: model.load_weights(cache), cache)
        return
    try:
        state_dict = checkpoints.read_pth(checkpoint_path)
    except ValueError as error:
        raise ValueError(
            f"The cached official checkpoint {checkpoint_path!r} cannot be read ({error}); "
            "delete it to download it again."
        ) from error
    _assign_official(variant, model, state_dict, checkpoint_path)
    _save_atomically(model, cache)


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


def load_variant_weights(variant: Variant, model: keras.Model, weights: str) -> None:
    """Loads `weights` into `model` (built from `variant`), all or nothing.

    Args:
        variant: the variant the model was built from.
        model: the freshly built model.
        weights: "imagenet", or the path to a `.weights.h5` or `.keras` file
            saved by keras_fourier or to an official PyTorch checkpoint
            (`.pth`/`.pt`). Files saved at another input size load too: their
            global filters and position embeddings are resized to the model's
            as the official fine-tuning code does.

    Raises:
        ValueError: unsupported file, a file that does not match the model
            (the model is then unchanged), or "imagenet" for a variant
            without a suitable checkpoint or when the download fails.

    Example:
        >>> model = keras_fourier.models.GFNetTi(include_top=False)
        >>> load_variant_weights(catalog.variant("gfnet_ti"), model, "gfnet-ti.pth")
    """
    if weights == "imagenet":
        _load_imagenet(variant, model)
        return
    path = os.fspath(weights)
    if load_saved_weights(model, path):
        return
    if path.endswith((".pth", ".pt")):
        _load_official(variant, model, path)
    else:
        raise ValueError(
            f"Cannot load weights for {variant.key!r}: expected 'imagenet', a '.weights.h5' or "
            f"'.keras' file, or an official PyTorch '.pth'/'.pt' checkpoint. "
            f"Received: weights={weights!r}"
        )


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


def head_classes(path: str | os.PathLike, headless: keras.Model) -> int | None:
    """The class count of the head a `.weights.h5` holds beyond the tensors of `headless`.

    Args:
        path: a `.weights.h5` saved by keras_fourier.
        headless: the model built without its head (``include_top=False``).

    Returns:
        K when the file holds exactly `headless`'s tensors plus a (C, K)
        kernel and a (K,) bias, else None.
    """
    stored = _tensor_shapes(os.fspath(path))
    extra = {name: stored[name] for name in stored.keys() - _own_layout(headless).keys()}
    kernels = [shape for shape in extra.values() if len(shape) == 2]
    biases = [shape for shape in extra.values() if len(shape) == 1]
    if len(extra) == 2 and len(kernels) == len(biases) == 1 and kernels[0][1] == biases[0][0]:
        return biases[0][0]
    return None
