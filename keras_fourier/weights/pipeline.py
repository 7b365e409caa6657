"""One pipeline for every family's releases: download once, convert once, load from the cache.

:func:`load_release` takes a :class:`~keras_fourier.weights.releases.Release`
row and the family's key map. The first call downloads the file into the
Keras cache (:func:`keras_fourier.weights.download.download`: whole and
checked, or nothing; ``KERAS_FOURIER_MIRROR``; a progress bar), reads it
with the release's reader (:data:`READERS`), converts it through the key map
all or nothing (:func:`keras_fourier.weights.convert.load_tensors`) and
saves the model's weights beside the download (:func:`converted_path`);
later calls load that file, offline (but for the variables a partial load
keeps, ``keep``: a fine-tuned model's fresh head). A damaged conversion is
converted again, a damaged download downloaded again, and a cache that cannot hold the
conversion leaves it in memory, each with one warning line.
:func:`load_checkpoint` is the same read-and-convert for a file the user names.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Collection

import keras
import numpy as np

from keras_fourier.fileio import atomic_save, warn
from keras_fourier.weights import download
from keras_fourier.weights.convert import KeyMapFunction, load_tensors
from keras_fourier.weights.flax_msgpack import read_flax_params
from keras_fourier.weights.pth import read_pth
from keras_fourier.weights.releases import Release
from keras_fourier.weights.saved import load_saved_weights, load_weights_file

# A release's format -> its reader: path -> {checkpoint key: array}; ValueError if unreadable.
READERS: dict[str, Callable[[str], dict[str, np.ndarray]]] = {
    "pth": read_pth,
    "flax": read_flax_params,
}


def converted_path(checkpoint_path: str, model: keras.Model) -> str:
    """Where the conversion of a downloaded checkpoint for `model` is cached.

    A `.weights.h5` beside the download, named after it and a digest of the
    model's variables (paths and shapes): a model of another input size
    (other filter and position-embedding shapes) or another head gets its
    own conversion, models of the same layout share one.

    Args:
        checkpoint_path: the downloaded file.
        model: the model it is converted for.

    Returns:
        The path, e.g. ``~/.keras/keras_fourier/gfnet-ti_3f9c0a1b2c3d.weights.h5``.
    """
    layout = "\n".join(f"{v.path} {tuple(v.shape)}" for v in model.weights)
    digest = hashlib.sha256(layout.encode()).hexdigest()[:12]
    stem = os.path.splitext(os.path.basename(checkpoint_path))[0]
    return os.path.join(os.path.dirname(checkpoint_path), f"{stem}_{digest}.weights.h5")


def read(path: str, reader: str) -> dict[str, np.ndarray]:
    """The tensors of the checkpoint at `path`, read by ``READERS[reader]``.

    Raises:
        ValueError: an unknown reader, or a file it cannot read.
    """
    if reader not in READERS:
        raise ValueError(f"`reader` must be one of {sorted(READERS)}. Received: reader={reader!r}")
    return READERS[reader](path)


def load_checkpoint(
    model: keras.Model,
    path: str | os.PathLike,
    reader: str,
    key_map: KeyMapFunction,
    *,
    description: str | None = None,
) -> None:
    """Reads a checkpoint file and loads it into `model` through `key_map`, all or nothing.

    Args:
        model: the model to load.
        path: the checkpoint file.
        reader: its format, a key of :data:`READERS`.
        key_map: the family's key map (:func:`keras_fourier.weights.convert.convert`).
        description: names the model in a mismatch message. Default None.

    Raises:
        ValueError: the file cannot be read (the reader's error, e.g.
            :class:`~keras_fourier.weights.pth.UnsafeCheckpointError`), or
            does not match the model; the model is unchanged.
    """
    path = os.fspath(path)
    load_tensors(model, read(path, reader), key_map, source=path, description=description)


def load_release(
    model: keras.Model,
    release: Release,
    key_map: KeyMapFunction,
    *,
    label: str,
    description: str | None = None,
    keep: Collection[keras.Variable] = (),
) -> None:
    """Loads the official release into `model`: downloaded once, converted once, then offline.

    A damaged conversion in the cache is converted again, and a cached
    download that cannot be read is downloaded again, each with one warning
    line; a cache that cannot hold the conversion (read-only, or short of
    space) leaves it in memory, with one warning line.

    Args:
        model: the model to load.
        release: the release row (its URL, file name, reader, sha256).
        key_map: the family's key map for its checkpoints.
        label: what the user asked for, to begin the network error, e.g.
            ``"weights='imagenet' for 'gfnet_ti'"``.
        description: names the model in a mismatch message. Default None.
        keep: variables that `key_map` leaves out (a head fine-tuned on
            other classes): they keep their values, also when the conversion
            is loaded from the cache (which holds the values they had when
            it was saved). Default ().

    Raises:
        ValueError: the download failed (the message says how to work
            offline), a fresh download cannot be read (it is not kept), or
            it does not match the model; the model is then unchanged and no
            conversion is cached.

    Example:
        >>> load_release(model, gfnet.RELEASES["gfnet_ti"][0], key_map,
        ...              label="weights='imagenet'")  # doctest: +SKIP
    """
    path = download_release(release, label, model)
    cache = converted_path(path, model)
    if os.path.exists(cache):
        kept = [(variable, variable.numpy()) for variable in keep]
        try:
            load_weights_file(model, cache)
            for variable, value in kept:
                variable.assign(value)
            return
        except ValueError as error:
            _remove_damaged_conversion(cache, str(error))
    try:
        tensors = read(path, release.reader)
    except ValueError as error:
        download.discard(path, str(error))
        path = download_release(release, label, model)
        try:
            tensors = read(path, release.reader)
        except ValueError as again:
            with contextlib.suppress(OSError):
                os.remove(path)
            raise ValueError(
                f"The official checkpoint {release.file_name!r}, downloaded again into the "
                f"cache {os.path.dirname(path)!r}, cannot be read ({again}); it was not kept."
            ) from again
    load_tensors(model, tensors, key_map, source=path, description=description)
    _cache_conversion(model, cache)


def download_release(release: Release, label: str, model: keras.Model) -> str:
    """The release's file in the cache, downloaded the first time within its ceiling.

    The download may not pass :meth:`Release.ceiling` of `model`'s
    parameters (whether or not the row records a size or sha256), so a
    mirror's endless or oversized body stops near the size the file must have.

    Args:
        release: the release row.
        label: what the user asked for, to begin the network error.
        model: the model it is loaded into, whose parameters bound the file.

    Returns:
        The cached file's path.

    Raises:
        DownloadError: the download failed (the message says how to work offline).
    """
    try:
        return download.download(
            release.url,
            release.file_name,
            release.sha256,
            size=release.size,
            max_size=release.ceiling(model.count_params()),
            file_format=release.reader,
        )
    except download.DownloadError as error:
        raise download.DownloadError(
            f"{label} needs network access the first time. {error}"
        ) from error


def _remove_damaged_conversion(cache: str, reason: str) -> None:
    """Removes a conversion that no longer loads (truncated, overwritten), with one line."""
    with contextlib.suppress(OSError):
        os.remove(cache)
    warn(f"the cached conversion {cache} is damaged ({reason}); converting the download again")


def _cache_conversion(model: keras.Model, cache: str) -> None:
    """Saves the converted weights beside the download, or warns that they stay in memory.

    The conversion is skipped when the cache's free space is short of the
    weights' size (HDF5 does not recover from a full disk in the middle of a
    file) and when the folder cannot be written (a read-only shared cache):
    the model is loaded either way, and the next call converts again.
    """
    folder = os.path.dirname(cache)
    # Twice the float32 weights and a MiB: HDF5's metadata, and room left for others.
    needed = 2 * sum(4 * math.prod(variable.shape) for variable in model.weights) + (1 << 20)
    try:
        free = shutil.disk_usage(folder).free
        reason = f"{free} bytes free, {needed} needed" if free < needed else None
        if reason is None:  # h5py's own errors are long and leave it unusable: probe first
            handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=folder)
            os.close(handle)
            os.remove(probe)
            atomic_save(cache, lambda temporary: model.save_weights(temporary, overwrite=True))
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
    if reason is not None:
        warn(
            f"cannot cache the converted weights in {folder} ({reason}); they were converted "
            "in memory, and will be converted again next time"
        )


def load_release_or_file(
    model: keras.Model,
    weights: str | os.PathLike,
    key_map: KeyMapFunction,
    *,
    release_name: str,
    release: Callable[[], Release],
    label: str,
    description: str,
    refusal: str,
    keep: Collection[keras.Variable] = (),
) -> None:
    """A family's `weights` argument: its release by name, the package's own file, or a `.pth`.

    Args:
        model: the freshly built model.
        weights: `release_name` (:func:`load_release` of `release()`), a
            `.weights.h5`/`.keras` file saved by keras_fourier, or an official
            PyTorch checkpoint (`.pth`/`.pt`, read through `key_map`).
        key_map: the family's key map of the official checkpoints.
        release_name: the name that selects the release, e.g. "imagenet".
        release: gives the release row (called only when it is selected).
        label: the release's name in messages.
        description: the model, for messages.
        refusal: the message for any other file, before "Received: weights=...".
        keep: the variables `key_map` leaves out, kept from the cached
            conversion too (:func:`load_release`). Default ().

    Raises:
        ValueError: another kind of file, or a file that does not fit the
            model (which is then unchanged).

    Example:
        >>> load_release_or_file(model, "ade20k", key_map, release_name="ade20k",
        ...     release=lambda: RELEASES["hornet_t_gf"], label="weights='ade20k'",
        ...     description="UPerNet", refusal="`weights` must be 'ade20k' or a file.")
    """
    if weights == release_name:
        load_release(model, release(), key_map, label=label, description=description, keep=keep)
        return
    path = os.fspath(weights)
    if load_saved_weights(model, path):
        return
    if not path.endswith((".pth", ".pt")):
        raise ValueError(f"{refusal} Received: weights={weights!r}")
    load_checkpoint(model, path, "pth", key_map, description=description)
