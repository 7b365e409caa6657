"""Field data and forecasts read and run within bounds: hostile files and requests refused.

Files a few kilobytes or megabytes long that declare gigabytes (an HDF5
dataset of 14 x 8192 x 8192 never written, gzip HDF5 and deflated ``.npz``
arrays of zeros expanding a thousandfold, sparse ``.npy`` files of a frame
past the pixel ceiling or of frames the statistics pass once read 64 at a
time, a sparse 4 GB ``global_means.npy``), a forecast of a billion steps,
and HDF5 files that read outside themselves (external storage, an external
link, a virtual dataset, a plugin filter) are given to the commands in one child process,
whose peak resident memory is asserted (`tests/test_memory_bounds.py`'s
child): each is refused in one line with exit 2 and nothing written.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
import zlib

import h5py
import numpy as np
import pytest

from keras_fourier.model_record import CHECKPOINT_RECORD, FIELD_STATS_KEY, TASK_KEY
from keras_fourier.models.fourcastnet import field_model, rollout
from keras_fourier.weights.keras_hub import read_keras_hub_preset
from keras_fourier.weights.saved import load_keras_file, load_weights_file
from tests.test_fnet_checkpoints import write_keras_hub_preset
from tests.test_memory_bounds import PEAK_RSS_BYTES, _rewrite_keras, _tiny_vision, run_probes

pytestmark = pytest.mark.single_backend

FRAMES = np.random.default_rng(0).normal(size=(20, 1, 8, 8)).astype(np.float32)
OUTSIDE = ("external", "link", "virtual", "plugin")
# Blosc's registered HDF5 filter: a plugin library, which HDF5 would look for outside the file.
BLOSC = 32001


def _npy_header(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    buffer = io.BytesIO()
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def _sparse_npy(path, shape: tuple[int, ...], dtype: str = "<f4") -> str:
    """A .npy of zeros of `shape` whose data is a hole: the header and a truncate."""
    header = _npy_header(shape, dtype)
    with open(path, "wb") as file:
        file.write(header)
        file.truncate(len(header) + int(np.prod(shape)) * np.dtype(dtype).itemsize)
    return str(path)


def _gzip_hdf5(path, frames: int, side: int) -> str:
    """An HDF5 dataset of zeros (frames, 1, side, side), one deflated chunk per frame."""
    compressed = zlib.compress(bytes(side * side * 4), 9)
    with h5py.File(path, "w") as handle:
        dataset = handle.create_dataset(
            "fields", (frames, 1, side, side), "f4", chunks=(1, 1, side, side), compression="gzip"
        )
        for frame in range(frames):
            dataset.id.write_direct_chunk((frame, 0, 0, 0), compressed)
    return str(path)


def _deflated_npz(path, shape: tuple[int, ...]) -> str:
    """A .npz whose only array, float32 zeros of `shape`, is deflated (about 230x)."""
    block = bytes(64 << 20)
    size = int(np.prod(shape)) * 4
    archive = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1)
    with archive, archive.open("fields.npy", "w", force_zip64=True) as member:
        member.write(_npy_header(shape))
        for start in range(0, size, len(block)):
            member.write(block[: size - start])
    return str(path)


def _outside(path, kind: str, name: str, values: np.ndarray, elsewhere) -> None:
    """Makes dataset `name` of HDF5 file `path` read `values` from a file in `elsewhere`.

    Or, for "plugin", through the filter of a plugin library (its chunk written raw).
    """
    with h5py.File(path, "a") as handle:
        if name in handle:
            del handle[name]
        if kind == "plugin":
            dataset = handle.create_dataset(
                name,
                values.shape,
                values.dtype,
                chunks=values.shape,
                compression=BLOSC,
                allow_unknown_filter=True,
            )
            dataset.id.write_direct_chunk((0,) * values.ndim, values.tobytes())
            return
        if kind == "external":
            raw = elsewhere / f"{kind}.bin"
            values.tofile(raw)
            handle.create_dataset(
                name, values.shape, values.dtype, external=[(str(raw), 0, values.nbytes)]
            )
            return
        other = elsewhere / f"{kind}.h5"
        with h5py.File(other, "w") as target:
            target["data"] = values
        if kind == "link":
            handle[name] = h5py.ExternalLink(str(other), "data")
            return
        layout = h5py.VirtualLayout(values.shape, values.dtype)
        layout[:] = h5py.VirtualSource(str(other), "data", values.shape)
        handle.create_virtual_dataset(name, layout)


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    """Every hostile field file, the forecast model, and the child's report of every probe."""
    root = tmp_path_factory.mktemp("fields")
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # outside the data folder
    data = {}
    with h5py.File(root / "unwritten.h5", "w") as handle:
        handle.create_dataset("fields", (14, 1, 8192, 8192), "f4")
    assert os.path.getsize(root / "unwritten.h5") < 4096
    data["unwritten"] = str(root / "unwritten.h5")
    data["gzip"] = _gzip_hdf5(root / "gzip.h5", 64, 4096)
    assert os.path.getsize(data["gzip"]) < 5 * 2**20
    data["npz"] = _deflated_npz(root / "bomb.npz", (16, 1, 2048, 2048))
    assert os.path.getsize(data["npz"]) < 2 * 2**20
    data["wide"] = _sparse_npy(root / "wide.npy", (14, 1, 8192, 8192))
    data["zeros"] = _sparse_npy(root / "zeros.npy", (64, 1, 2048, 2048))
    np.save(root / "small.npy", FRAMES)
    stats = root / "stats"
    stats.mkdir()
    _sparse_npy(stats / "global_means.npy", (1, 2**29, 1, 1), "<f8")
    np.save(stats / "global_stds.npy", np.ones((1, 1, 1, 1)))
    data["stats"] = f"{root / 'small.npy'}?stats={stats}"
    for kind in OUTSIDE:
        path = root / f"{kind}.h5"
        with h5py.File(path, "w") as handle:
            handle["other"] = np.zeros(3)
        _outside(path, kind, "fields", FRAMES, elsewhere)
        data[kind] = str(path)

    model = field_model("fourcastnet_tiny", image_size=8, channels=1, dims=8, depths=1)
    model.save(root / "plain.keras")
    record = {
        TASK_KEY: "forecast",
        FIELD_STATS_KEY: {"mean": [0.0], "std": [1.0], "channels": ["c"], "lead": 1},
    }
    forecaster = _rewrite_keras(
        root / "plain.keras", root / "forecast.keras", extra={CHECKPOINT_RECORD: json.dumps(record)}
    )
    np.save(root / "state.npy", FRAMES[0])
    out = str(root / "runs")
    train = ["train", "--task", "forecast", "--dims", "8", "--depths", "1", "--epochs", "1"]
    train += ["--batch-size", "4", "--verbose", "0", "--no-tensorboard", "--out", out]
    probes = {name: [*train, "--data", f"fields:{value}"] for name, value in data.items()}
    probes["steps"] = [
        "predict",
        str(root / "state.npy"),
        "--model",
        forecaster,
        "--out",
        out,
        "--steps",
        "1000000000",
    ]
    report = run_probes(list(probes.values()))
    results = dict(zip(probes, report["results"], strict=True))
    return {"results": results, "peak": report["peak"], "out": out, "elsewhere": elsewhere}


def _refused(crafted, probe: str, *expected: str) -> str:
    """Asserts the probe exited 2 with one line holding `expected`, nothing written, a low peak."""
    result = crafted["results"][probe]
    assert result["status"] == 2, result
    lines = [line for line in result["err"].splitlines() if line.strip()]
    assert len(lines) == 1 and all(text in lines[0] for text in expected), result
    assert not os.path.exists(crafted["out"])
    assert crafted["peak"] < PEAK_RSS_BYTES, crafted["peak"]
    return lines[0]


def test_field_files_are_checked_against_what_they_store_before_a_frame_is_read(crafted):
    _refused(crafted, "unwritten", "declares shape (14, 1, 8192, 8192)", "stores 0 bytes")
    _refused(crafted, "gzip", "(4.0 GiB) but stores", "never written, or a compression bomb")
    _refused(crafted, "npz", "member 'fields.npy' expands", "limit 100): a zip bomb")
    _refused(crafted, "wide", "8192x8192 frames have 67,108,864 grid points", "40,000,000 pixels")
    # Read in blocks of 64 MiB (4 frames), not 45 at once (4.5 GB), and refused for its zeros.
    _refused(crafted, "zeros", "its standard deviation is 0")
    _refused(crafted, "stats", "global_means.npy' has 4.0 GiB, above the limit of 1.0 MiB")


def test_a_forecast_beyond_the_memory_ceiling_is_refused_naming_steps(crafted):
    line = _refused(crafted, "steps", "1,000,000,000 steps of 8x8 fields", "--steps=1000000000")
    assert "above the ceiling of 8.0 GiB; set KERAS_FOURIER_MAX_MEMORY" in line
    with pytest.raises(ValueError, match=r"1,000,000,000 steps of .*Received: steps=1000000000"):
        rollout(lambda state: state, np.zeros((1, 8, 8, 1), "float32"), 10**9)


@pytest.mark.parametrize("kind", OUTSIDE)
def test_hdf5_files_that_read_outside_themselves_are_refused(crafted, kind, tmp_path):
    described = {
        "external": f"dataset 'fields' keeps its data in the file '{crafted['elsewhere']}",
        "link": f"'fields' is an external link to '{crafted['elsewhere']}",
        "virtual": f"dataset 'fields' is a virtual dataset mapped from '{crafted['elsewhere']}",
        "plugin": f"dataset 'fields' needs the plugin filter {BLOSC}",
    }[kind]
    _refused(crafted, kind, "reads outside itself: " + described)
    name = "layers/dense/vars/0"
    preset = tmp_path / "preset"
    write_keras_hub_preset(preset, np.random.default_rng(0), hidden_dim=8, intermediate_dim=16)
    _outside(preset / "model.weights.h5", kind, name, np.ones((8, 8), "f4"), tmp_path)
    with pytest.raises(ValueError, match=f"model.weights.h5' reads outside itself: .*{name}"):
        read_keras_hub_preset(preset)
    model = _tiny_vision()
    path = tmp_path / "w.weights.h5"
    model.save_weights(path)
    with h5py.File(path, "r") as handle:
        values = handle[name][()]
    _outside(path, kind, name, np.ones_like(values), tmp_path)
    before = [weight.copy() for weight in model.get_weights()]
    with pytest.raises(ValueError, match=f"reads outside itself: .*{name}"):
        load_weights_file(model, str(path))
    for old, new in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)
    model.save(tmp_path / "m.keras")
    rewritten = _rewrite_keras(
        tmp_path / "m.keras",
        tmp_path / "outside.keras",
        extra={"model.weights.h5": path.read_bytes()},
    )
    with pytest.raises(ValueError, match=f"reads outside itself: .*{name}"):
        load_keras_file(rewritten)
