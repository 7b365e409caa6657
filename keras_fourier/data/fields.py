"""Gridded fields for forecasting: (state_t, state_t+lead) pairs from NumPy and HDF5 arrays.

Sources (data spec strings):

* ``"navier_stokes"``: the embedded 2D Navier-Stokes vorticity and tracer
  (:mod:`keras_fourier.data.navier_stokes`), generated in memory, no
  download;
* ``"fields:PATH"``: an array shaped (time, channel, lat, lon), as
  FourCastNet's data are (or (time, lat, lon) for one channel), in a
  ``.npy`` file (read frame by frame), a ``.npz`` archive (its only array,
  or the one named ``fields``; at most :data:`MAX_NPZ_BYTES`, loaded) or an
  HDF5 file (``.h5``/``.hdf5``: its only dataset, or ``fields``; read
  lazily, frame by frame, with h5py).

Options follow the source after ``?``, joined by ``&``:
``fields:era5.h5?dataset=fields&lead=2&channels=0,1,5&stats=STATS_DIR&splits=0.8,0.1``.

* ``lead``: the steps between input and target. Default 1.
* ``dataset``: the array's name in a ``.npz`` or HDF5 file.
* ``channels``: the channels kept, by index. Default: all.
* ``stats``: a folder holding FourCastNet's ``global_means.npy`` and
  ``global_stds.npy`` (shape (1, C', 1, 1) or (C',), C' >= the file's
  channels, indexed by them as FourCastNet's ``[0, channels]``). Default:
  the mean and standard deviation of each channel over the train split.
* ``splits``: the train and validation shares of the frames. Default
  0.7,0.15: the first 70% of the frames train, the next 15% validate
  ("validation") and the rest test ("test"); pairs never cross a split.

Every state is normalised per channel, ``(x - mean) / std``, channels
last (B, lat, lon, C). The batches are (state_t, targets) with targets
(B, lat, lon, 2 C): the normalised state `lead` steps later, then the
normalised climatology (the time mean of the train split at each grid
point), from which the forecast task's anomaly correlation is computed.

Files are only read, within bounds, before any frame is: the sizes a file
declares are checked against the file (a ``.npy`` shorter than its header
says, an HDF5 dataset or ``.npz`` member that expands more than
:data:`~keras_fourier.limits.MAX_ZIP_RATIO` times what it stores: never
written, or a bomb), an HDF5 file that reads outside itself (external
links or storage, virtual datasets) is refused, a frame may have at most
:data:`~keras_fourier.data.checks.MAX_IMAGE_PIXELS` grid points, and what
reading needs (the statistics pass in blocks of :data:`BLOCK_BYTES`, an
HDF5 chunk decompressed whole) is held to
:func:`~keras_fourier.limits.max_memory`; the statistics files may have
:data:`MAX_STATS_BYTES`. A bad file, shape, option or split is a one-line
`ValueError` naming the source; nothing is written.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import os
import zipfile
from typing import Any, BinaryIO

import h5py
import numpy as np
import tensorflow as tf

from keras_fourier.data.checks import MAX_IMAGE_PIXELS
from keras_fourier.data.navier_stokes import CHANNELS as NAVIER_STOKES_CHANNELS
from keras_fourier.data.navier_stokes import navier_stokes
from keras_fourier.limits import (
    MAX_ZIP_RATIO,
    check_memory,
    check_zip_members,
    format_bytes,
    read_file_bounded,
)
from keras_fourier.weights.hdf5 import check_self_contained

FIELDS_PREFIX = "fields:"
EMBEDDED = "navier_stokes"
SPLITS = ("train", "validation", "test")
DEFAULT_SHARES = (0.7, 0.15)
DATASET_NAME = "fields"  # FourCastNet's HDF5 dataset name
STATS_FILES = ("global_means.npy", "global_stds.npy")
# The largest array a .npz may hold (it is decompressed into memory; .npy and HDF5 are not).
MAX_NPZ_BYTES = 2 << 30
# The float64 frames of one block of the train split's statistics pass (at least one frame).
BLOCK_BYTES = 64 << 20
# The largest statistics file (FourCastNet's hold a few dozen values).
MAX_STATS_BYTES = 1 << 20
# Below this many declared bytes, an array is not checked for expansion (fill values).
_SMALL = 1 << 20
# Bytes per value of a frame while the statistics pass holds it: float32, float64, its square.
_PASS_BYTES = 4 + 8 + 8
_OPTIONS = ("lead", "dataset", "channels", "stats", "splits")
AUTOTUNE = tf.data.AUTOTUNE


def is_field_source(source: object) -> bool:
    """Whether `source` names field data ("navier_stokes" or "fields:PATH", with options).

    Example:
        >>> is_field_source("navier_stokes?lead=2"), is_field_source("digits")
        (True, False)
    """
    if not isinstance(source, str):
        return False
    base = source.split("?", 1)[0]
    return base == EMBEDDED or base.startswith(FIELDS_PREFIX)


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """A parsed field source (see the module docstring).

    Attributes:
        path: the file, or None for the embedded data.
        lead: steps between input and target.
        dataset: the array's name in a .npz or HDF5 file; None: the only one or "fields".
        channels: the channel indices kept; None: all.
        stats: the folder of global_means.npy and global_stds.npy; None: the train split's.
        shares: the train and validation shares of the frames.
    """

    path: str | None
    lead: int = 1
    dataset: str | None = None
    channels: tuple[int, ...] | None = None
    stats: str | None = None
    shares: tuple[float, float] = DEFAULT_SHARES


def read_npy_header(file: BinaryIO) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype of the .npy array `file` is at, read from its header only.

    Args:
        file: a binary file positioned at the start of a .npy array.

    Returns:
        (shape, dtype); the array's data is not read.

    Raises:
        ValueError: a file that is not a .npy array of format version 1 or 2.

    Example:
        >>> with open("state.npy", "rb") as file:  # doctest: +SKIP
        ...     read_npy_header(file)
        ((2, 32, 32), dtype('float32'))
    """
    shape, _, dtype = _npy_header(file)
    return shape, dtype


def _npy_header(file: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, Fortran order, dtype) of the .npy array `file` is at; `file` left at its data."""
    version = np.lib.format.read_magic(file)
    header = {
        (1, 0): np.lib.format.read_array_header_1_0,
        (2, 0): np.lib.format.read_array_header_2_0,
    }.get(version)
    if header is None:
        raise ValueError(f"unsupported .npy version {version}")
    return header(file)


def _bad(source: str, reason: str) -> ValueError:
    return ValueError(f"Field data {source!r}: {reason}. Received: data={source}")


def parse_field_source(source: str) -> FieldSpec:
    """Parses a field source string into a :class:`FieldSpec`.

    Raises:
        ValueError: not a field source, an unknown option or a bad value.

    Example:
        >>> parse_field_source("fields:x.h5?lead=2&channels=0,3").channels
        (0, 3)
    """
    if not is_field_source(source):
        raise ValueError(
            f"`data` must be 'navier_stokes' or 'fields:PATH' for field data. Received: "
            f"data={source!r}"
        )
    base, _, query = source.partition("?")
    path = None if base == EMBEDDED else base[len(FIELDS_PREFIX) :]
    if path == "":
        raise _bad(source, "no file after 'fields:'")
    options: dict[str, Any] = {}
    for item in query.split("&") if query else []:
        key, equals, value = item.partition("=")
        if key not in _OPTIONS or not equals or not value or key in options:
            raise _bad(source, f"option {item!r} is not one of {', '.join(_OPTIONS)}=VALUE")
        try:
            if key == "lead":
                options[key] = int(value)
                if options[key] < 1:
                    raise ValueError
            elif key == "channels":
                options[key] = tuple(int(part) for part in value.split(","))
                if any(index < 0 for index in options[key]) or len(set(options[key])) != len(
                    options[key]
                ):
                    raise ValueError
            elif key == "splits":
                shares = tuple(float(part) for part in value.split(","))
                if len(shares) != 2 or min(shares) <= 0 or sum(shares) >= 1:
                    raise ValueError
                options["shares"] = shares
            else:
                options[key] = value
        except ValueError:
            expected = {
                "lead": "a positive int",
                "channels": "distinct non-negative channel indices, comma-separated",
                "splits": "the train and validation shares, two numbers > 0 summing below 1",
            }[key]
            raise _bad(source, f"option {key} must be {expected}, not {value!r}") from None
    return FieldSpec(path, **options)


@dataclasses.dataclass(frozen=True)
class _NpyFile:
    """The C-order array of a .npy file, read frame by frame (``array[start:stop]``).

    A memory map would keep every page it read resident: a pass over the
    whole file would come to hold all of it.
    """

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int

    def __getitem__(self, frames: slice) -> np.ndarray:
        start, stop, _ = frames.indices(self.shape[0])
        values = math.prod(self.shape[1:])
        with open(self.path, "rb") as file:
            file.seek(self.offset + start * values * self.dtype.itemsize)
            data = np.fromfile(file, self.dtype, count=(stop - start) * values)
        return data.reshape((stop - start, *self.shape[1:]))


class _Frames:
    """Lazy (time, channel, lat, lon) frames of an array in memory, a .npy or an HDF5 dataset."""

    def __init__(self, source: str, spec: FieldSpec) -> None:
        self.source = source
        self._file = None
        self._chunk_bytes = 0  # an HDF5 chunk, decompressed whole when any of it is read
        array = navier_stokes() if spec.path is None else self._open(spec)
        shape = tuple(int(size) for size in array.shape)
        if len(shape) == 3:
            shape = (shape[0], 1, *shape[1:])
            self._add_channel = True
        else:
            self._add_channel = False
        if len(shape) != 4 or min(shape) < 1:
            raise _bad(
                source,
                f"the array has shape {tuple(array.shape)}; expected (time, channel, lat, lon) "
                "or (time, lat, lon)",
            )
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise _bad(source, f"the array's dtype {array.dtype} is not numeric")
        self.array = array
        self.num_frames, channels, self.height, self.width = shape
        chosen = spec.channels if spec.channels is not None else tuple(range(channels))
        if any(index >= channels for index in chosen):
            raise _bad(source, f"channels {list(chosen)} outside the file's {channels}")
        self.channels = chosen
        self.all_channels = channels
        self.block = self._check_memory(array.dtype)

    def _check_memory(self, dtype: np.dtype) -> int:
        """The frames per block of the statistics pass, once a frame and a block fit the bounds."""
        pixels = self.height * self.width
        if pixels > MAX_IMAGE_PIXELS:
            raise _bad(
                self.source,
                f"its {self.height}x{self.width} frames have {pixels:,} grid points, above the "
                f"ceiling of {MAX_IMAGE_PIXELS:,} pixels",
            )
        kept = len(self.channels) * pixels
        block = max(1, BLOCK_BYTES // (kept * 8))
        frame = self.all_channels * pixels * (np.dtype(dtype).itemsize + 4) + kept * _PASS_BYTES
        needed = block * frame + 2 * kept * 8 + self._chunk_bytes
        check_memory(
            f"Field data {self.source!r}: reading its {self.height}x{self.width} frames of "
            f"{self.all_channels} channel(s)",
            needed,
            f"data={self.source}",
        )
        return block

    def _open(self, spec: FieldSpec) -> Any:
        path = spec.path
        if not os.path.isfile(path):
            raise _bad(self.source, f"no such file {path!r}")
        suffix = os.path.splitext(path)[1].lower()
        try:
            if suffix == ".npy":
                if spec.dataset is not None:
                    raise _bad(self.source, "a .npy file holds one array: no dataset option")
                return self._open_npy(path)
            if suffix == ".npz":
                return self._open_npz(path, spec.dataset)
            if suffix in (".h5", ".hdf5"):
                return self._open_hdf5(path, spec.dataset)
        except ValueError as error:
            if str(error).startswith("Field data"):
                raise
            raise _bad(self.source, f"cannot read {path!r} ({error})") from None
        except OSError as error:
            raise _bad(self.source, f"cannot read {path!r} ({error})") from None
        raise _bad(self.source, f"{path!r} is not a .npy, .npz, .h5 or .hdf5 file")

    def _open_npy(self, path: str) -> _NpyFile:
        with open(path, "rb") as file:
            if file.read(6) != b"\x93NUMPY":
                raise _bad(self.source, f"{path!r} is not a .npy file (no NumPy header)")
            file.seek(0)
            shape, fortran_order, dtype = _npy_header(file)
            offset = file.tell()
            stored = os.fstat(file.fileno()).st_size - offset
        declared = math.prod(shape) * dtype.itemsize
        if declared > stored:
            raise _bad(
                self.source,
                f"{path!r} declares a {dtype} array of shape {shape} ({declared:,} bytes) but "
                f"holds {stored:,} bytes of data (truncated?)",
            )
        if fortran_order and len(shape) > 1:
            raise _bad(
                self.source,
                f"{path!r} stores its array in Fortran order, which cannot be read frame by "
                "frame: save it in C order (np.ascontiguousarray)",
            )
        return _NpyFile(path, tuple(shape), dtype, offset)

    def _open_npz(self, path: str, name: str | None) -> np.ndarray:
        try:
            with zipfile.ZipFile(path) as archive:
                check_zip_members(archive, f"The .npz file {path!r}")
                members = [m[: -len(".npy")] for m in archive.namelist() if m.endswith(".npy")]
                name = self._choose(path, members, name)
                info = archive.getinfo(name + ".npy")
                with archive.open(info) as member:
                    shape, dtype = read_npy_header(member)
        except zipfile.BadZipFile as error:
            raise _bad(self.source, f"{path!r} is not a readable .npz ({error})") from None
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if size > info.file_size:
            raise _bad(
                self.source,
                f"array {name!r} of {path!r} declares {size:,} bytes but its member holds "
                f"{info.file_size:,}",
            )
        if size > MAX_NPZ_BYTES:
            raise _bad(
                self.source,
                f"array {name!r} of {path!r} takes {size:,} bytes, over the .npz limit of "
                f"{MAX_NPZ_BYTES:,}: store it as .npy (memory-mapped) or HDF5 (read lazily)",
            )
        with np.load(path, allow_pickle=False) as archive:
            return archive[name]

    def _open_hdf5(self, path: str, name: str | None) -> Any:
        self._file = h5py.File(path, "r")
        try:
            check_self_contained(self._file, path)
            datasets: list[str] = []
            self._file.visititems(
                lambda key, item: datasets.append(key) if isinstance(item, h5py.Dataset) else None
            )
            name = self._choose(path, datasets, name)
            dataset = self._file[name]
            declared = math.prod(dataset.shape) * dataset.dtype.itemsize
            stored = dataset.id.get_storage_size()
            if declared > _SMALL and declared > MAX_ZIP_RATIO * stored:
                raise _bad(
                    self.source,
                    f"dataset {name!r} of {path!r} declares shape {dataset.shape} "
                    f"({format_bytes(declared)}) but stores {stored:,} bytes, more than "
                    f"{MAX_ZIP_RATIO}x less: never written, or a compression bomb",
                )
        except BaseException:
            self._file.close()
            raise
        if dataset.chunks is not None:
            self._chunk_bytes = math.prod(dataset.chunks) * dataset.dtype.itemsize
        return dataset

    def _choose(self, path: str, names: list[str], name: str | None) -> str:
        if name is not None:
            if name not in names:
                raise _bad(self.source, f"{path!r} has no array {name!r} (it has {names})")
            return name
        if DATASET_NAME in names:
            return DATASET_NAME
        if len(names) != 1:
            raise _bad(
                self.source,
                f"{path!r} holds {len(names)} arrays {names}: name one with ?dataset=NAME",
            )
        return names[0]

    def read(self, start: int, stop: int) -> np.ndarray:
        """float32 (stop - start, channels kept, lat, lon)."""
        block = np.asarray(self.array[start:stop], dtype=np.float32)
        if self._add_channel:
            block = block[:, None]
        return block[:, list(self.channels)]


@dataclasses.dataclass
class FieldSource:
    """A field source opened, split and with its normalisation.

    Attributes:
        source: the source string.
        spec: its parsed options.
        frames: the lazy frames.
        splits: {split: (first frame, end frame)}.
        mean: float32 (C,) per-channel mean of the normalisation.
        std: float32 (C,) per-channel standard deviation.
        climatology: float32 (lat, lon, C), the train split's time mean, normalised.
        channel_names: a name per kept channel.
    """

    source: str
    spec: FieldSpec
    frames: _Frames
    splits: dict[str, tuple[int, int]]
    mean: np.ndarray
    std: np.ndarray
    climatology: np.ndarray
    channel_names: tuple[str, ...]

    @property
    def shape(self) -> tuple[int, int, int]:
        """(lat, lon, C) of a state."""
        return self.frames.height, self.frames.width, len(self.frames.channels)

    def pairs(self, split: str) -> int:
        """The (state_t, state_t+lead) pairs of `split`."""
        start, stop = self.splits[split]
        return max(0, stop - start - self.spec.lead)

    def normalise(self, states: np.ndarray) -> np.ndarray:
        """(..., C) physical states to z-scores."""
        return (states - self.mean) / self.std

    def denormalise(self, states: np.ndarray) -> np.ndarray:
        """(..., C) z-scores to physical states."""
        return states * self.std + self.mean


def _split_bounds(source: str, frames: int, spec: FieldSpec) -> dict[str, tuple[int, int]]:
    train = round(frames * spec.shares[0])
    validation = round(frames * (spec.shares[0] + spec.shares[1]))
    bounds = {"train": (0, train), "validation": (train, validation), "test": (validation, frames)}
    for split, (start, stop) in bounds.items():
        if stop - start <= spec.lead:
            raise _bad(
                source,
                f"its {frames} frames leave split {split!r} {stop - start} frames, too few for "
                f"one pair {spec.lead} step(s) apart",
            )
    return bounds


def _train_statistics(frames: _Frames, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-channel mean and std over frames [0, stop), and the time mean per grid point.

    The frames are read in blocks of `frames.block` (:data:`BLOCK_BYTES` of float64).
    """
    total = np.zeros((len(frames.channels), frames.height, frames.width), np.float64)
    squares = np.zeros(len(frames.channels), np.float64)
    for start in range(0, stop, frames.block):
        block = frames.read(start, min(stop, start + frames.block)).astype(np.float64)
        total += block.sum(0)
        squares += np.square(block).sum((0, 2, 3))
    count = stop * frames.height * frames.width
    mean = total.sum((1, 2)) / count
    std = np.sqrt(np.maximum(squares / count - np.square(mean), 0.0))
    return mean, std, total / stop


def _given_statistics(source: str, folder: str, frames: _Frames) -> tuple[np.ndarray, np.ndarray]:
    values = []
    for name in STATS_FILES:
        path = os.path.join(folder, name)
        try:
            data = read_file_bounded(path, MAX_STATS_BYTES, "The statistics file")
            array = np.load(io.BytesIO(data), allow_pickle=False)
            if not isinstance(array, np.ndarray):
                raise ValueError("not a .npy array")
            array = np.asarray(array, np.float64).reshape(-1)
        except (OSError, ValueError, TypeError) as error:
            raise _bad(source, f"cannot read the statistics file {path!r} ({error})") from None
        if array.size < frames.all_channels:  # FourCastNet's cover more channels than it uses
            raise _bad(
                source,
                f"{path!r} holds {array.size} values for the file's {frames.all_channels} channels",
            )
        values.append(array[list(frames.channels)])
    return values[0], values[1]


@functools.lru_cache(maxsize=4)
def _open_source(source: str, stamp: tuple) -> FieldSource:
    del stamp  # part of the cache key only: a changed file is read again
    spec = parse_field_source(source)
    frames = _Frames(source, spec)
    splits = _split_bounds(source, frames.num_frames, spec)
    given = None if spec.stats is None else _given_statistics(source, spec.stats, frames)
    mean, std, time_mean = _train_statistics(frames, splits["train"][1])
    if given is not None:
        mean, std = given
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std > 0)):
        raise _bad(
            source,
            "a channel's mean or standard deviation is not finite or its standard deviation is "
            f"0 (means {mean.tolist()}, stds {std.tolist()}): drop constant channels with "
            "?channels=",
        )
    if spec.path is None:
        names = tuple(NAVIER_STOKES_CHANNELS[index] for index in frames.channels)
    else:
        names = tuple(f"channel{index}" for index in frames.channels)
    climatology = (np.moveaxis(time_mean, 0, -1) - mean) / std
    return FieldSource(
        source,
        spec,
        frames,
        splits,
        mean.astype(np.float32),
        std.astype(np.float32),
        climatology.astype(np.float32),
        names,
    )


def load_field_source(source: str) -> FieldSource:
    """Opens, splits and normalises a field source (cached per source and file state).

    Args:
        source: "navier_stokes" or "fields:PATH", with options (see the
            module docstring).

    Returns:
        A :class:`FieldSource`.

    Raises:
        ValueError: a bad source, option, file, array shape or split, naming
            the source.

    Example:
        >>> load_field_source("navier_stokes").shape
        (32, 32, 2)
    """
    spec = parse_field_source(source)
    stamp: tuple = ()
    if spec.path is not None and os.path.isfile(spec.path):
        status = os.stat(spec.path)
        stamp = (status.st_size, status.st_mtime_ns)
    return _open_source(source, stamp)


def field_dataset(
    source: str | FieldSource,
    split: str = "train",
    *,
    batch_size: int = 16,
    training: bool | None = None,
    seed: int = 0,
    mean: np.ndarray | None = None,
    std: np.ndarray | None = None,
    drop_remainder: bool | None = None,
) -> tf.data.Dataset:
    """Batches of (state_t, [state_t+lead, climatology]) of one split (see the module docstring).

    Args:
        source: a field source string or an opened :class:`FieldSource`.
        split: "train", "validation" or "test". Default "train".
        batch_size: batch size. Default 16.
        training: shuffle every epoch. Default None: `split == "train"`.
        seed: shuffling seed. Default 0.
        mean: per-channel means of the normalisation (e.g. those a trained
            model's run stored). Default None: the source's.
        std: per-channel standard deviations, with `mean`. Default None.
        drop_remainder: drop a last partial batch. Default None: `training`.

    Returns:
        A `tf.data.Dataset` of (float32 (B, lat, lon, C), float32 (B, lat,
        lon, 2 C)) batches.

    Raises:
        ValueError: an unknown split, or statistics of another channel count.

    Example:
        >>> inputs, targets = next(iter(field_dataset("navier_stokes", "test", batch_size=2)))
        >>> inputs.shape, targets.shape
        (TensorShape([2, 32, 32, 2]), TensorShape([2, 32, 32, 4]))
    """
    opened = load_field_source(source) if isinstance(source, str) else source
    if split not in SPLITS:
        raise ValueError(
            f"Field data has the splits {SPLITS}. Received: split={split!r} (data "
            f"{opened.source!r})"
        )
    training = split == "train" if training is None else training
    drop_remainder = training if drop_remainder is None else drop_remainder
    height, width, channels = opened.shape
    mean = opened.mean if mean is None else np.asarray(mean, np.float32).reshape(-1)
    std = opened.std if std is None else np.asarray(std, np.float32).reshape(-1)
    if mean.shape != (channels,) or std.shape != (channels,):
        raise ValueError(
            f"The normalisation has {mean.size} means and {std.size} standard deviations for "
            f"the {channels} channels of data {opened.source!r}. Received: mean={mean.tolist()}"
        )
    climatology = (opened.climatology * opened.std + opened.mean - mean) / std
    start, _ = opened.splits[split]
    lead = opened.spec.lead
    frames = opened.frames

    def read(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        first = int(index)
        state, target = (frames.read(frame, frame + 1)[0] for frame in (first, first + lead))
        return np.moveaxis(state, 0, -1), np.moveaxis(target, 0, -1)

    def load(index: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        state, target = tf.numpy_function(read, [index], (tf.float32, tf.float32))
        state = (tf.ensure_shape(state, (height, width, channels)) - mean) / std
        target = (tf.ensure_shape(target, (height, width, channels)) - mean) / std
        return state, tf.concat([target, tf.constant(climatology)], -1)

    indices = tf.data.Dataset.range(start, start + opened.pairs(split))
    if training:
        indices = indices.shuffle(opened.pairs(split), seed=seed, reshuffle_each_iteration=True)
    dataset = indices.map(load, num_parallel_calls=AUTOTUNE, deterministic=True)
    return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(AUTOTUNE)
