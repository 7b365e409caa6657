"""HDF5 files read within bounds: self-contained, headers first, then data, no lossy casts.

Every HDF5 file the package reads (weights, field data) is first walked by
:func:`outside_reference`: an external link, a dataset kept in external
raw files, a virtual dataset or a filter HDF5 would load as a plugin reads
beyond the given file, and the file is refused before any data is read.

A ``.weights.h5`` (the package's, a keras-hub preset's, the member of a
``.keras`` archive) declares each dataset's shape and dtype in its headers;
its data may be far smaller (an unwritten chunked dataset reads as gigabytes
of fill values). :func:`dataset_headers` reads the headers only;
:func:`check_headers` refuses, before any data is read, a file whose
datasets hold more values than :func:`keras_fourier.limits.max_parameters`,
a dataset that declares data its file does not store, and datasets whose
shapes differ from what the model expects; :func:`check_casts` refuses a
dtype that would be cast with loss (complex to real, floating point to
integer or bool), naming the tensor.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import IO, NamedTuple

import h5py
import numpy as np

from keras_fourier.limits import check_parameters

# HDF5's built-in filters (deflate, shuffle, Fletcher32, SZIP, N-bit, scale-offset) and h5py's
# LZF: any other is a plugin library HDF5 would load from outside the file.
BUILTIN_FILTERS = frozenset({1, 2, 3, 4, 5, 6, 32000})
# A dataset's declared bytes may exceed what it stores (compression) by at most this factor.
MAX_EXPANSION = 1000
# Below this many declared bytes, a dataset is not checked for expansion (fill values).
_SMALL = 1 << 20


class DatasetHeader(NamedTuple):
    """What an HDF5 dataset's headers declare: its shape, dtype and stored bytes."""

    shape: tuple[int, ...]
    dtype: np.dtype
    stored: int


def outside_reference(handle: h5py.Group) -> str | None:
    """What in an open HDF5 file would read beyond it, described; None when it is self-contained.

    Walks every group's links (an external link names another file) and
    every dataset: external raw storage, a virtual dataset (its data is
    mapped from source datasets, in this or other files) and a filter that
    is not built into HDF5 (a plugin library) all read outside the file.
    Nothing is dereferenced: no link is followed, no data read.

    Args:
        handle: an open `h5py.File` (or a group of one).

    Returns:
        One phrase naming the object and what it reaches, or None.

    Example:
        >>> with h5py.File("model.weights.h5", "r") as handle:  # doctest: +SKIP
        ...     outside_reference(handle)
    """
    found: list[str] = []

    def visit(name: str, item) -> None:
        if found:
            return
        if isinstance(item, h5py.Group):
            for key in item:
                link = item.get(key, getlink=True)
                if isinstance(link, h5py.ExternalLink):
                    path = f"{name}/{key}" if name else key
                    found.append(f"{path!r} is an external link to {link.filename!r}")
                    return
        elif isinstance(item, h5py.Dataset):
            plist = item.id.get_create_plist()
            if item.external:
                found.append(f"dataset {name!r} keeps its data in the file {item.external[0][0]!r}")
            elif item.is_virtual:
                source = plist.get_virtual_filename(0) if plist.get_virtual_count() else ""
                found.append(f"dataset {name!r} is a virtual dataset mapped from {source!r}")
            else:
                codes = [plist.get_filter(index)[0] for index in range(plist.get_nfilters())]
                plugins = [code for code in codes if code not in BUILTIN_FILTERS]
                if plugins:
                    found.append(f"dataset {name!r} needs the plugin filter {plugins[0]}")

    visit("", handle)
    handle.visititems(visit)
    return found[0] if found else None


def check_self_contained(handle: h5py.Group, source: str) -> None:
    """Raises ValueError when :func:`outside_reference` finds anything in `handle`.

    Example:
        >>> with h5py.File("fields.h5", "r") as handle:  # doctest: +SKIP
        ...     check_self_contained(handle, "fields.h5")
    """
    outside = outside_reference(handle)
    if outside is not None:
        raise ValueError(
            f"The HDF5 file {source!r} reads outside itself: {outside} (external links, "
            f"external storage, virtual datasets and plugin filters are refused); nothing was read"
        )


def dataset_headers(
    source: str | os.PathLike | IO[bytes], skip: Iterable[str] = ("optimizer/",)
) -> dict[str, DatasetHeader]:
    """{dataset path: its header} of every dataset of an HDF5 file, no data read.

    Args:
        source: the file's path, or a seekable binary file object.
        skip: path prefixes left out. Default ``("optimizer/",)``: the
            optimizer state Keras adds for a trained model.

    Returns:
        The headers in file order.

    Raises:
        OSError: not a readable HDF5 file.
        ValueError: a file that reads outside itself (:func:`check_self_contained`).

    Example:
        >>> dataset_headers("model.weights.h5")["layers/dense/vars/0"].shape  # doctest: +SKIP
        (64, 10)
    """
    skip = tuple(skip)
    headers: dict[str, DatasetHeader] = {}

    def visit(name: str, item) -> None:
        if isinstance(item, h5py.Dataset) and not (skip and name.startswith(skip)):
            headers[name] = DatasetHeader(
                tuple(int(size) for size in item.shape), item.dtype, item.id.get_storage_size()
            )

    source = os.fspath(source) if isinstance(source, (str, os.PathLike)) else source
    label = source if isinstance(source, str) else getattr(source, "name", "an HDF5 stream")
    with h5py.File(source, "r") as handle:
        check_self_contained(handle, str(label))
        handle.visititems(visit)
    return headers


def check_headers(
    headers: Mapping[str, DatasetHeader],
    source: str,
    expected: Mapping[str, tuple[int, ...]] | None = None,
) -> None:
    """Refuses, from headers alone, what reading the data would regret.

    Args:
        headers: :func:`dataset_headers` of the file.
        source: the file, for the message.
        expected: {dataset path: shape} the model needs; when given, the
            datasets it names must have these shapes (others are left to
            the key map's listing). Default None.

    Raises:
        ValueError: more values in all than the parameter ceiling; a
            dataset declaring more than :data:`MAX_EXPANSION` times the
            bytes it stores (an unwritten or bomb dataset); a dataset whose
            shape differs from `expected` (naming the first ones).

    Example:
        >>> check_headers(dataset_headers("model.weights.h5"), "model.weights.h5")  # doctest: +SKIP
    """
    total = sum(math.prod(header.shape) for header in headers.values())
    if headers:
        largest = max(headers, key=lambda name: math.prod(headers[name].shape))
        check_parameters(
            f"The weights file {source!r}", total, f"{largest}={headers[largest].shape}"
        )
    for name, header in headers.items():
        declared = math.prod(header.shape) * header.dtype.itemsize
        if declared > _SMALL and declared > MAX_EXPANSION * header.stored:
            raise ValueError(
                f"The weights file {source!r} is damaged or hostile: tensor {name!r} declares "
                f"shape {header.shape} ({declared:,} bytes) but stores {header.stored:,} bytes. "
                f"Received: {name}={header.shape}"
            )
    if expected is not None:
        wrong = [
            f"{name}: file {headers[name].shape}, model {tuple(shape)}"
            for name, shape in expected.items()
            if name in headers and headers[name].shape != tuple(shape)
        ]
        if wrong:
            raise ValueError(
                f"The weights file {source!r} does not fit the model: {len(wrong)} tensor(s) "
                f"of other shapes ({'; '.join(wrong[:3])}); nothing was read."
            )


def lossy_cast(source: np.dtype, target: np.dtype) -> bool:
    """Whether casting `source` values to `target` may lose them by kind.

    Complex to real, floating point to integer or bool, integer to bool;
    a narrower float (float64 to float32) or an integer to a float is not
    a change of kind and is allowed.

    Example:
        >>> lossy_cast(np.dtype("complex64"), np.dtype("float32"))
        True
        >>> lossy_cast(np.dtype("int8"), np.dtype("float32"))
        False
    """
    return not np.can_cast(np.dtype(source), np.dtype(target), casting="same_kind")


def check_casts(
    stored: Mapping[str, np.dtype], targets: Mapping[str, np.dtype], source: str
) -> None:
    """Raises ValueError naming the first tensor whose stored dtype would be cast with loss.

    Args:
        stored: {tensor name: dtype in the file}.
        targets: {tensor name: dtype of the variable it loads into}; names
            absent from either are not compared.
        source: the file, for the message.

    Example:
        >>> check_casts({"k": np.dtype("float32")}, {"k": np.dtype("float32")}, "w.h5")
    """
    for name, dtype in stored.items():
        target = targets.get(name)
        if target is not None and lossy_cast(dtype, target):
            raise ValueError(
                f"The weights file {source!r} stores tensor {name!r} as {np.dtype(dtype).name}, "
                f"which loading into a {np.dtype(target).name} variable would cast with loss; "
                f"nothing was loaded. Received: {name}={np.dtype(dtype).name}"
            )


def read_datasets(path: str | os.PathLike, names: Iterable[str]) -> dict[str, np.ndarray]:
    """The data of the named datasets (whose headers were checked), as NumPy arrays.

    Example:
        >>> read_datasets("model.weights.h5", ["layers/dense/vars/0"])  # doctest: +SKIP
    """
    path = os.fspath(path)
    with h5py.File(path, "r") as handle:
        check_self_contained(handle, path)
        return {name: np.asarray(handle[name]) for name in names}
