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
Each load gets its own stand-ins, which refuse new attributes, so nothing a
stream does (BUILD included) reaches another load.

Memory is bounded by what the tensors need: ``data.pkl`` may declare at
most 64 MiB, each storage's zip entry exactly the bytes its pickled size
says, and none of them may inflate more than
:data:`~keras_fourier.limits.MAX_ZIP_RATIO` times (a deflated run of
zeros); a storage's tensors' layouts must fit it, and a storage larger
than what its tensors reach (plus 4 KiB) is refused, naming the entry, all
before any storage is read. :func:`read_checkpoint` then reads every
storage once (a bounded read, all of them within
``KERAS_FOURIER_MAX_MEMORY``) and its tensors are read-only NumPy views of
it.

:func:`read_pth` is the reader of the release pipeline: the state dict of a
checkpoint (unnested from ``model``, ``module``, ``state_dict`` or
``model_state``, without a ``module.`` prefix; :func:`unwrap_state_dict`)
as :class:`~keras_fourier.weights.stored.StoredTensor` values, read only
when the conversion takes them (a tensor the model has no place for, an
optimizer's state, is never read).
"""

from __future__ import annotations

import collections
import math
import os
import pickle
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from keras_fourier.limits import check_memory, check_zip_ratio
from keras_fourier.weights.stored import StoredTensor

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
    "ComplexFloatStorage": np.complex64,
    "ComplexDoubleStorage": np.complex128,
}


class UnsafeCheckpointError(ValueError):
    """A checkpoint's pickle names something other than tensors and plain containers."""


class _Frozen(type):
    """A metaclass whose classes refuse new attributes: a pickle's BUILD cannot change them."""

    def __setattr__(cls, name: str, value: Any) -> None:
        raise UnsafeCheckpointError(f"The checkpoint's pickle tried to set {cls.__name__}.{name}.")


class CheckpointArgs(dict, metaclass=_Frozen):
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


class _LazyStorage:
    """A storage entry of the archive, checked against its declared size before it is read.

    Attributes:
        entry: the zip entry, ``<prefix>data/<key>``.
        dtype: the storage's element dtype (bfloat16 is read into float32).
        numel: its element count, as the pickle declares it (and the zip entry's size).
        needed: elements that its tensors reach (the largest extent).
    """

    def __init__(self, entry: str, dtype: Any, numel: int) -> None:
        self.entry = entry
        self.dtype = dtype
        self.numel = numel
        self.needed = 0

    @property
    def itemsize(self) -> int:
        return 2 if self.dtype == "bfloat16" else np.dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    def read(self, archive: zipfile.ZipFile) -> np.ndarray:
        size = self.nbytes
        with archive.open(self.entry) as file:
            raw = file.read(size + 1)
        if len(raw) != size:
            raise ValueError(f"{self.entry} holds {len(raw)} bytes, not {size}")
        if self.dtype == "bfloat16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            return bits.view(np.float32)
        return np.frombuffer(raw, dtype=np.dtype(self.dtype).newbyteorder("<"))


class _Tensor:
    """A tensor to be made, once every storage is checked, as a view of its storage."""

    __slots__ = ("offset", "size", "storage", "stride")

    def __init__(self, storage: _LazyStorage, offset: int, size: tuple, stride: tuple) -> None:
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def view(self, archive: zipfile.ZipFile, read: dict[str, np.ndarray]) -> np.ndarray:
        """The tensor in its storage, which is read once into `read` (by entry)."""
        if self.storage.entry not in read:
            read[self.storage.entry] = self.storage.read(archive)
        storage = read[self.storage.entry]
        return np.lib.stride_tricks.as_strided(
            storage[self.offset :],
            shape=self.size,
            strides=tuple(s * storage.itemsize for s in self.stride),
            writeable=False,
        )


def _rebuild_tensor(
    storage: _LazyStorage,
    storage_offset: int,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    requires_grad: bool = False,
    backward_hooks: Any = None,
    metadata: Any = None,
) -> _Tensor:
    """The (size, stride) view of `storage` at `storage_offset`, checked against its size."""
    del requires_grad, backward_hooks, metadata
    if not isinstance(storage, _LazyStorage):
        raise ValueError(f"a tensor's storage is {type(storage).__name__}, not a storage")
    size, stride = tuple(int(d) for d in size), tuple(int(s) for s in stride)
    storage_offset = int(storage_offset)
    if any(d < 0 for d in size) or any(s < 0 for s in stride) or storage_offset < 0:
        raise ValueError(f"invalid tensor layout: size {size}, stride {stride}")
    extent = storage_offset + sum((d - 1) * s for d, s in zip(size, stride, strict=True)) + 1
    if 0 not in size:
        if extent > storage.numel or math.prod(size) > storage.numel:
            raise ValueError(
                f"a tensor of size {size}, stride {stride} at offset {storage_offset} does not "
                f"fit its storage of {storage.numel} elements"
            )
        storage.needed = max(storage.needed, extent)
    return _Tensor(storage, storage_offset, size, stride)


def _rebuild_parameter(data: _Tensor, requires_grad: bool = False, hooks: Any = None):
    del requires_grad, hooks
    return data


class _Guarded:
    """An allowed function, in an object whose attributes a pickle cannot set."""

    __slots__ = ("_function",)

    def __init__(self, function) -> None:
        object.__setattr__(self, "_function", function)

    def __setattr__(self, name: str, value: Any) -> None:
        raise UnsafeCheckpointError(f"The checkpoint's pickle tried to set {name!r}.")

    def __call__(self, *args):
        return self._function(*args)


# Each load gets its own stand-ins (see `find_class`): nothing a stream does reaches another.
_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): lambda: _Guarded(_rebuild_tensor),
    ("torch._utils", "_rebuild_parameter"): lambda: _Guarded(_rebuild_parameter),
    ("collections", "OrderedDict"): lambda: collections.OrderedDict,
    ("argparse", "Namespace"): lambda: CheckpointArgs,
    ("_codecs", "encode"): lambda: _Guarded(_latin1_bytes),
}
# data.pkl holds names and layouts, not tensor data: a few MB for the largest official files.
MAX_PICKLE_BYTES = 64 * 2**20
# A storage may exceed what its tensors reach by this much (alignment); more is refused.
STORAGE_SLACK_BYTES = 4096


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles tensors and plain containers only; storages come from the archive."""

    def __init__(self, file, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(file)
        self._archive = archive
        self._prefix = prefix
        self.storages: dict[str, _LazyStorage] = {}

    def find_class(self, module: str, name: str):
        """The allowed stand-in for `module.name`; anything else is refused."""
        if module == "torch" and name in _STORAGE_DTYPES:
            return _Storage(name)
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]()
        raise UnsafeCheckpointError(
            f"The checkpoint's pickle refers to {module}.{name}, which is neither a tensor nor "
            "a plain container; it was refused and nothing in the file was run. Load it with "
            "torch.load(weights_only=True) yourself and save its state dict if you trust it."
        )

    def persistent_load(self, pid):
        """A storage ('storage', type, key, location, numel), checked against its zip entry."""
        if (
            not isinstance(pid, tuple)
            or len(pid) != 5
            or pid[0] != "storage"
            or not isinstance(pid[1], _Storage)
            or isinstance(pid[4], bool)
            or not isinstance(pid[4], int)
            or pid[4] < 0
        ):
            raise UnsafeCheckpointError(f"Unsupported persistent id in the checkpoint: {pid!r}")
        _, storage_type, key, _location, numel = pid
        entry = f"{self._prefix}data/{key}"
        dtype = _STORAGE_DTYPES[storage_type.name]
        storage = self.storages.get(entry)
        if storage is not None:
            if storage.numel != numel or storage.dtype != dtype:
                raise ValueError(f"storage {entry} is declared twice, differently")
            return storage
        storage = _LazyStorage(entry, dtype, numel)
        try:
            declared = self._archive.getinfo(entry).file_size
        except KeyError:
            raise ValueError(f"the storage entry {entry} is missing") from None
        if declared != numel * storage.itemsize:
            raise ValueError(
                f"the zip entry {entry} declares {declared} bytes, but its storage is {numel} "
                f"elements of {storage.itemsize} bytes"
            )
        self.storages[entry] = storage
        return storage


def _resolve(
    value: Any, archive: zipfile.ZipFile, seen: dict[int, Any], read: dict[str, np.ndarray]
) -> Any:
    """`value` with every `_Tensor` made an array (containers rebuilt in place or copied)."""
    if isinstance(value, _Tensor):
        return value.view(archive, read)
    if id(value) in seen:
        return seen[id(value)]
    if isinstance(value, dict):
        seen[id(value)] = value
        for key, item in value.items():
            value[key] = _resolve(item, archive, seen, read)
    elif isinstance(value, list):
        seen[id(value)] = value
        value[:] = [_resolve(item, archive, seen, read) for item in value]
    elif isinstance(value, tuple):
        seen[id(value)] = resolved = tuple(_resolve(item, archive, seen, read) for item in value)
        return resolved
    return value


def _parse(path: str) -> tuple[Any, dict[str, _LazyStorage]]:
    """A ``torch.save`` zip's structure, its tensors unread, every size checked.

    Returns:
        (the unpickled object with `_Tensor` placeholders, its storages by entry).
    """
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
        if byteorder in archive.namelist():
            with archive.open(byteorder) as file:
                if file.read(16).strip() != b"little":
                    raise ValueError(
                        f"{path!r} was saved on a big-endian machine; it is not supported."
                    )
        info = archive.getinfo(pickles[0])
        if info.file_size > MAX_PICKLE_BYTES:
            raise ValueError(
                f"{path!r}: its {pickles[0]} entry declares {info.file_size:,} bytes, more than "
                f"the {MAX_PICKLE_BYTES:,} that a checkpoint's structure takes; refused."
            )
        check_zip_ratio(info, f"The PyTorch checkpoint {path!r}")
        with archive.open(pickles[0]) as file:
            unpickler = _RestrictedUnpickler(file, archive, prefix)
            try:
                result = unpickler.load()
            except UnsafeCheckpointError:
                raise
            except Exception as error:  # any failure of a malformed pickle
                raise ValueError(f"{path!r} is a damaged PyTorch checkpoint: {error}") from error
        for entry in unpickler.storages:
            check_zip_ratio(archive.getinfo(entry), f"The PyTorch checkpoint {path!r}")
    for storage in unpickler.storages.values():
        needed = storage.needed * storage.itemsize
        if storage.nbytes > needed + STORAGE_SLACK_BYTES:
            raise ValueError(
                f"{path!r}: the storage entry {storage.entry} holds {storage.nbytes:,} bytes but "
                f"its tensors reach {needed:,}; refused (re-save the tensors with .clone() if "
                "you trust it)."
            )
    return result, unpickler.storages


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
        ValueError: the file is not a ``torch.save`` zip archive, is
            damaged (a missing or short storage), has a member inflating more
            than :data:`~keras_fourier.limits.MAX_ZIP_RATIO` times, or its
            storages hold more than ``KERAS_FOURIER_MAX_MEMORY``.

    Example:
        >>> read_checkpoint("gfnet-ti.pth")["model"]["head.weight"].shape
        (1000, 256)
    """
    path = os.fspath(path)
    result, storages = _parse(path)
    total = sum(storage.nbytes for storage in storages.values())
    check_memory(
        f"Reading every tensor of the PyTorch checkpoint {path!r}", total, f"storages={total}"
    )
    try:
        with zipfile.ZipFile(path) as archive:
            return _resolve(result, archive, {}, {})
    except (ValueError, OSError, zipfile.BadZipFile, RecursionError) as error:
        raise ValueError(f"{path!r} is a damaged PyTorch checkpoint: {error}") from error


# Where training scripts nest the state dict: timm/DeiT ("model"), some wrappers ("module"),
# mmsegmentation/mmcv ("state_dict"), FourCastNet ("model_state").
STATE_DICT_KEYS = ("model", "module", "state_dict", "model_state")
# The prefix torch.nn.DataParallel and DistributedDataParallel give every key.
PARALLEL_PREFIX = "module."
_MAX_LISTED = 10


def unwrap_state_dict(checkpoint: Mapping) -> Mapping:
    """The state dict inside a checkpoint, unnested and without a ``module.`` prefix.

    A state dict nested under one of :data:`STATE_DICT_KEYS` is taken out of
    the checkpoint (the first found); when every key starts with
    ``module.`` (a model saved inside ``DataParallel``), the prefix is
    removed.

    Args:
        checkpoint: what :func:`read_checkpoint` (or ``torch.load``) returned.

    Returns:
        The mapping of parameter names to tensors.

    Raises:
        ValueError: `checkpoint` is not a mapping.

    Example:
        >>> unwrap_state_dict({"model_state": {"module.head.bias": 0}, "epoch": 299})
        {'head.bias': 0}
    """
    if not isinstance(checkpoint, Mapping):
        raise ValueError(
            f"A checkpoint must be a state dict (a mapping); received {type(checkpoint).__name__}."
        )
    state_dict = next(
        (checkpoint[key] for key in STATE_DICT_KEYS if isinstance(checkpoint.get(key), Mapping)),
        checkpoint,
    )
    if state_dict and all(str(key).startswith(PARALLEL_PREFIX) for key in state_dict):
        return {str(key)[len(PARALLEL_PREFIX) :]: value for key, value in state_dict.items()}
    return state_dict


def _stored(path: str, tensor: _Tensor, cache: dict[str, np.ndarray]) -> StoredTensor:
    """`tensor` unread: float32 (complex tensors keep their dtype), read from `path` when used.

    `cache` keeps the last storage read, for the next tensor of the same storage.
    """
    dtype = np.dtype(np.float32)
    if tensor.storage.dtype != "bfloat16" and np.dtype(tensor.storage.dtype).kind == "c":
        dtype = np.dtype(tensor.storage.dtype)

    def read() -> np.ndarray:
        if tensor.storage.entry not in cache:
            cache.clear()
        try:
            with zipfile.ZipFile(path) as archive:
                return np.array(tensor.view(archive, cache), dtype=dtype)
        except (ValueError, OSError, zipfile.BadZipFile) as error:
            raise ValueError(f"{path!r} is a damaged PyTorch checkpoint: {error}") from error

    # A read holds its storage (bfloat16 widened to float32).
    storage_bytes = tensor.storage.numel * max(4, tensor.storage.itemsize)
    return StoredTensor(tensor.size, dtype, read, (tensor.storage.entry, storage_bytes))


def read_pth(path: str | os.PathLike) -> dict[str, StoredTensor]:
    """Reads a PyTorch checkpoint's state dict, its tensors unread until used, without PyTorch.

    The file is read by the checks of :func:`read_checkpoint`, whose
    unpickler accepts only tensors and plain containers (the training
    arguments some checkpoints keep, an ``argparse.Namespace``, are read as
    a dict), so no code in the file runs; the state dict is unwrapped by
    :func:`unwrap_state_dict`. Its tensors are
    :class:`~keras_fourier.weights.stored.StoredTensor` values: shapes and
    dtypes from the pickle, data read (``np.asarray``) when the conversion
    takes them, so what the model has no place for is never read.

    Args:
        path: a ``.pth``/``.pt``/``.tar`` file written by ``torch.save``.

    Returns:
        Official key -> tensor read as float32 (complex buffers, such as
        transformers' DFT matrices, keep their complex dtype).

    Raises:
        ValueError: the file cannot be read as a state dict of tensors (one
            that holds no state dict says where it was looked for), or its
            pickle refers to anything else (:class:`UnsafeCheckpointError`).

    Example:
        >>> read_pth("hornet_tiny_7x7.pth")["head.weight"].shape
        (1000, 512)
    """
    path = os.fspath(path)
    try:
        checkpoint, _ = _parse(path)
    except UnsafeCheckpointError as error:
        raise UnsafeCheckpointError(f"{path!r}: {error}") from error
    except (OSError, ValueError) as error:
        raise ValueError(f"Could not read {path!r} as a PyTorch checkpoint: {error}") from error
    state_dict = unwrap_state_dict(checkpoint)
    not_tensors = sorted(
        str(key) for key, value in state_dict.items() if not isinstance(value, _Tensor)
    )
    if not_tensors:
        shown = ", ".join(not_tensors[:_MAX_LISTED])
        more = len(not_tensors) - _MAX_LISTED
        nested = any(isinstance(checkpoint.get(key), Mapping) for key in STATE_DICT_KEYS)
        names = ", ".join(map(repr, STATE_DICT_KEYS[:-1])) + f" or {STATE_DICT_KEYS[-1]!r}"
        raise ValueError(
            f"{path!r} is not a state dict of tensors; entries that are not tensors: "
            f"{shown}{f', ... and {more} more' if more > 0 else ''}"
            + ("" if nested else f"; nor does it hold one under {names} (no model weights)")
        )
    cache: dict[str, np.ndarray] = {}
    return {str(key): _stored(path, value, cache) for key, value in state_dict.items()}
