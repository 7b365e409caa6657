"""Reading PyTorch ``.pth`` checkpoints without PyTorch, and refusing any code in them.

``torch.save`` writes a zip archive: ``<name>/data.pkl``, a pickle of the
checkpoint's structure, and one raw little-endian buffer per tensor storage
under ``<name>/data/<key>``. A pickle can name any importable callable, so
unpickling an untrusted file can run code; :func:`read_checkpoint` unpickles
with an allow-list instead of Python's importer. It accepts:

* the tensor rebuilders of ``torch._utils`` (``_rebuild_tensor_v2``,
  ``_rebuild_parameter``), turned into NumPy arrays read from the archive;
* the storage types (``torch.FloatStorage``, ``torch.HalfStorage``, ...),
  which only name a dtype;
* plain containers: dicts, lists, tuples, ``collections.OrderedDict``, and
  ``argparse.Namespace`` (the training arguments that official checkpoints
  keep), read into an inert dict;
* ``_codecs.encode(text, "latin1")``, with which protocol-2 pickles spell bytes.

Any other global (``os.system``, ``builtins.eval``, a class of the training
code, ...) raises :class:`UnsafeCheckpointError` before anything is called.
"""

from __future__ import annotations

import collections
import os
import pickle
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

_STORAGE_DTYPES = {
    "DoubleStorage": np.float64,
    "FloatStorage": np.float32,
    "HalfStorage": np.float16,
    "BFloat16Storage": "bfloat16",
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class UnsafeCheckpointError(ValueError):
    """A checkpoint's pickle names something other than tensors and plain containers."""


class CheckpointArgs(dict):
    """The attributes of an ``argparse.Namespace`` pickled in a checkpoint, as a plain dict."""

    def __setstate__(self, state: Mapping) -> None:
        """Keeps the namespace's attributes as items (pickle's BUILD)."""
        self.update(state)


class _Storage:
    """A dtype named by a pickled storage type (``torch.FloatStorage`` -> float32)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    if not isinstance(text, str) or encoding != "latin1":
        raise UnsafeCheckpointError(
            f"_codecs.encode is only accepted as encode(str, 'latin1'); received {encoding!r}."
        )
    return text.encode("latin1")


def _read_storage(archive: zipfile.ZipFile, prefix: str, key: str, storage: _Storage) -> np.ndarray:
    raw = archive.read(f"{prefix}data/{key}")
    dtype = _STORAGE_DTYPES[storage.name]
    if dtype == "bfloat16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32)
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))


def _rebuild_tensor(
    storage: np.ndarray,
    storage_offset: int,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    requires_grad: bool = False,
    backward_hooks: Any = None,
    metadata: Any = None,
) -> np.ndarray:
    """The (size, stride) view of `storage` at `storage_offset`, copied to a new array."""
    del requires_grad, backward_hooks, metadata
    size, stride = tuple(int(d) for d in size), tuple(int(s) for s in stride)
    extent = storage_offset + sum((d - 1) * s for d, s in zip(size, stride, strict=True)) + 1
    if any(d < 0 for d in size) or any(s < 0 for s in stride) or storage_offset < 0:
        raise ValueError(f"invalid tensor layout: size {size}, stride {stride}")
    if 0 not in size and (extent > storage.size or int(np.prod(size)) > storage.size):
        raise ValueError(
            f"a tensor of size {size}, stride {stride} at offset {storage_offset} does not fit "
            f"its storage of {storage.size} elements"
        )
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage[storage_offset:],
        shape=size,
        strides=tuple(s * item for s in stride),
        writeable=False,
    )
    return np.array(view, dtype=storage.dtype.newbyteorder("="))


def _rebuild_parameter(data: np.ndarray, requires_grad: bool = False, hooks: Any = None):
    del requires_grad, hooks
    return data


class _Guarded:
    """An allowed function, in an object without attributes that a pickle could overwrite."""

    __slots__ = ("_function",)

    def __init__(self, function) -> None:
        self._function = function

    def __call__(self, *args):
        return self._function(*args)


_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _Guarded(_rebuild_tensor),
    ("torch._utils", "_rebuild_parameter"): _Guarded(_rebuild_parameter),
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("argparse", "Namespace"): CheckpointArgs,
    ("_codecs", "encode"): _Guarded(_latin1_bytes),
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles tensors and plain containers only; storages come from the archive."""

    def __init__(self, file, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(file)
        self._archive = archive
        self._prefix = prefix
        self._storages: dict[str, np.ndarray] = {}

    def find_class(self, module: str, name: str):
        """The allowed stand-in for `module.name`; anything else is refused."""
        if module == "torch" and name in _STORAGE_DTYPES:
            return _Storage(name)
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        raise UnsafeCheckpointError(
            f"The checkpoint's pickle refers to {module}.{name}, which is neither a tensor nor "
            "a plain container; it was refused and nothing in the file was run. Load it with "
            "torch.load(weights_only=True) yourself and save its state dict if you trust it."
        )

    def persistent_load(self, pid):
        """A storage ('storage', type, key, location, numel), read once from the archive."""
        if (
            not isinstance(pid, tuple)
            or len(pid) != 5
            or pid[0] != "storage"
            or not isinstance(pid[1], _Storage)
        ):
            raise UnsafeCheckpointError(f"Unsupported persistent id in the checkpoint: {pid!r}")
        _, storage_type, key, _location, _numel = pid
        key = str(key)
        if key not in self._storages:
            self._storages[key] = _read_storage(self._archive, self._prefix, key, storage_type)
        return self._storages[key]


def read_checkpoint(path: str | os.PathLike) -> Any:
    """Unpickles a ``torch.save`` zip file into NumPy arrays and plain containers.

    Tensors become NumPy arrays of their dtype (bfloat16 as float32),
    ``OrderedDict``\\ s stay ``OrderedDict``\\ s and an ``argparse.Namespace``
    becomes a :class:`CheckpointArgs` dict. PyTorch is not needed or imported.

    Args:
        path: a ``.pth``/``.pt`` file written by ``torch.save`` (the zip
            format, PyTorch 1.6 and later).

    Returns:
        The checkpoint's object, e.g. a state dict or ``{"model": state_dict, ...}``.

    Raises:
        UnsafeCheckpointError: the pickle refers to anything else than
            tensors and plain containers (it is refused before anything runs).
        ValueError: the file is not a ``torch.save`` zip archive, or is
            damaged (a missing or short storage).

    Example:
        >>> read_checkpoint("gfnet-ti.pth")["model"]["head.weight"].shape
        (1000, 256)
    """
    path = os.fspath(path)
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{path!r} is not a PyTorch zip checkpoint (torch.save since PyTorch 1.6). "
            "A file in the legacy format can be re-saved with torch.save(torch.load(...), "
            "new_path) by a PyTorch installation."
        )
    with zipfile.ZipFile(path) as archive:
        pickles = [name for name in archive.namelist() if name.endswith("data.pkl")]
        if len(pickles) != 1:
            raise ValueError(
                f"{path!r} is a zip file but not a torch.save checkpoint (it has "
                f"{len(pickles)} data.pkl entries)."
            )
        prefix = pickles[0][: -len("data.pkl")]
        byteorder = f"{prefix}byteorder"
        if byteorder in archive.namelist() and archive.read(byteorder).strip() != b"little":
            raise ValueError(f"{path!r} was saved on a big-endian machine; it is not supported.")
        with archive.open(pickles[0]) as file:
            try:
                return _RestrictedUnpickler(file, archive, prefix).load()
            except UnsafeCheckpointError:
                raise
            except Exception as error:  # any failure of a malformed pickle
                raise ValueError(f"{path!r} is a damaged PyTorch checkpoint: {error}") from error
