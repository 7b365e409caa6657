"""A tensor of a checkpoint file known by its header, read only when a model needs it.

The readers of ``torch.save`` zips (:func:`keras_fourier.weights.pth.read_pth`)
and ``.safetensors`` files return :class:`StoredTensor` values: their shape and
dtype come from the file's header, their bytes stay in the file. The
conversion (:func:`keras_fourier.weights.convert.convert`) compares names and
sizes with the model first and reads only the tensors the model takes, within
a ceiling set by the model's own size, so a tensor the model has no place for
(or a declared size the model cannot hold) is never read, however large.
``np.asarray(tensor)`` reads it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np


class StoredTensor:
    """A tensor in a file: its shape and dtype, and how to read it.

    Args:
        shape: its shape, from the file's header.
        dtype: the dtype the read returns.
        read: reads it: () -> array of `shape` and `dtype`.
        storage: (name, bytes) of the block of the file that a read loads
            whole (a ``torch.save`` storage, which tensors may share), or
            None (default): a read loads the tensor's bytes only.

    Example:
        >>> tensor = StoredTensor((2, 3), np.float32, lambda: np.zeros((2, 3), np.float32))
        >>> tensor.shape, tensor.nbytes, np.asarray(tensor).sum()
        ((2, 3), 24, np.float32(0.0))
    """

    __slots__ = ("_read", "dtype", "shape", "storage")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: Any,
        read: Callable[[], np.ndarray],
        storage: tuple[str, int] | None = None,
    ) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._read = read
        self.storage = storage

    @property
    def ndim(self) -> int:
        """Its rank."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Its number of values."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """The bytes of the array a read returns."""
        return self.size * self.dtype.itemsize

    def read(self) -> np.ndarray:
        """Reads the tensor from its file.

        Raises:
            ValueError: the file no longer holds it as its header says.
        """
        array = self._read()
        if array.shape != self.shape or array.dtype != self.dtype:
            raise ValueError(
                f"a tensor read as {array.dtype.name} {array.shape}, its header says "
                f"{self.dtype.name} {self.shape}"
            )
        return array

    def reshape(self, *shape: int) -> StoredTensor:
        """The same tensor in another shape of as many values, still unread."""
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape a tensor of shape {self.shape} into {shape}")
        return StoredTensor(shape, self.dtype, lambda: self.read().reshape(shape), self.storage)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        del copy
        array = self.read()
        return array if dtype is None else array.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"StoredTensor(shape={self.shape}, dtype={self.dtype.name})"


def read_bytes(tensors: Iterable[Any]) -> int:
    """The bytes reading `tensors` allocates: their arrays, and each shared storage once.

    Example:
        >>> read_bytes([np.zeros(3, np.float32), StoredTensor((2,), "f4", None, ("s", 64))])
        84
    """
    storages = {}
    total = 0
    for tensor in tensors:
        total += tensor.nbytes
        if getattr(tensor, "storage", None) is not None:
            name, size = tensor.storage
            storages[name] = size
    return total + sum(storages.values())
