"""Checkpoints and downloads within bounds: small hostile files, dripping and endless mirrors.

Each file is built for real and small on disk: a ``torch.save`` zip whose extra
tensor is 3.2 GB of deflated zeros (3 MB), a sparse ``model.safetensors`` and a
sparse stored ``.tar``, each declaring a 3.2 GB tensor the model has no place
for; they are given to the commands (and to ``FourCastNet(weights=...)``) in one
child process, whose peak resident memory is asserted, as tests/test_memory_bounds.py
does. The mirrors are servers on 127.0.0.1 (tests/hostile_server.py), with the
minimum-rate window set small through its environment variables.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import struct
import time
import zipfile
import zlib

import numpy as np
import pytest
import torch  # the test extra installs it; the package does not need it

from keras_fourier.cli import main
from keras_fourier.limits import open_zip_member
from keras_fourier.models.fourcastnet import FourCastNet
from keras_fourier.models.fourcastnet_family import VARIANTS
from keras_fourier.models.names import TEXT_PRESETS
from keras_fourier.weights import download as download_module
from tests.hostile_server import serve_hostile
from tests.test_fnet_interop import transformers_state, write_safetensors, write_transformers_folder
from tests.test_fourcastnet import TINY, _official_state_dict
from tests.test_memory_bounds import PEAK_RSS_BYTES, run_probes, write_reviews

pytestmark = pytest.mark.single_backend

# The extra tensor of the hostile files: 800 million float32 zeros, 3.2 GB once read.
HUGE = 800_000_000
_CHUNK = 1_000_000
# The placeholder's size in the pickle that torch.save writes, replaced by HUGE.
_PLACEHOLDER = 1_234_567


@functools.cache
def _zeros_crc() -> int:
    """The CRC-32 of HUGE float32 zeros."""
    crc, zeros = 0, bytes(_CHUNK)
    for _ in range(HUGE * 4 // _CHUNK):
        crc = zlib.crc32(zeros, crc)
    return crc


def _deflated_zeros() -> bytes:
    """A raw deflate stream of HUGE float32 zeros: one fully flushed block of zeros, repeated."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(bytes(_CHUNK)) + compressor.flush(zlib.Z_FULL_FLUSH)
    return block * (HUGE * 4 // _CHUNK) + zlib.compressobj(9, zlib.DEFLATED, -15).flush()


def _write_zip(path, entries) -> None:
    """A zip of (name, data, method, crc, size) entries; data None: a hole of `size` zeros."""
    central, offset = [], 0
    with open(path, "wb") as file:
        for name, data, method, crc, size in entries:
            name = name.encode()
            stored = size if data is None else len(data)
            fields = (20, 0, method, 0, 0x21, crc, stored, size, len(name), 0)
            file.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields) + name)
            if data is None:
                file.seek(size, os.SEEK_CUR)  # sparse: the file system stores no zeros
            else:
                file.write(data)
            central.append(
                struct.pack("<IH", 0x02014B50, 20)
                + struct.pack("<HHHHHIIIHHHHHII", *fields, 0, 0, 0, 0, offset)
                + name
            )
            offset = file.tell()
        directory = b"".join(central)
        file.write(directory)
        file.write(
            struct.pack(
                "<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(directory), offset, 0
            )
        )


def _with_huge_tensor(path, deflated: bool) -> None:
    """Rewrites a torch.save zip: its _PLACEHOLDER-element tensor becomes HUGE (deflated/sparse)."""
    with zipfile.ZipFile(path) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    rewritten = []
    for name, data in entries.items():
        if name.endswith("data.pkl"):
            placeholder = b"J" + struct.pack("<i", _PLACEHOLDER)
            assert data.count(placeholder) == 2  # the storage's size and the tensor's shape
            data = data.replace(placeholder, b"J" + struct.pack("<i", HUGE))
        if len(data) == 4 * _PLACEHOLDER:
            body = _deflated_zeros() if deflated else None
            rewritten.append((name, body, 8 if deflated else 0, _zeros_crc(), 4 * HUGE))
        else:
            rewritten.append((name, data, 0, zlib.crc32(data), len(data)))
    _write_zip(path, rewritten)


def _sparse_safetensors(path, state) -> None:
    """A safetensors file of `state` and an extra HUGE tensor whose bytes are a hole."""
    write_safetensors(path, state)
    with open(path, "rb") as file:
        length = struct.unpack("<Q", file.read(8))[0]
        header = json.loads(file.read(length))
        data = file.read()
    header["fnet.extra"] = {
        "dtype": "F32",
        "shape": [HUGE],
        "data_offsets": [len(data), len(data) + 4 * HUGE],
    }
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(text)) + text + data)
        file.truncate(8 + len(text) + len(data) + 4 * HUGE)


@pytest.fixture(scope="module")
def hostile_checkpoints(tmp_path_factory):
    """Every hostile file of the memory probe, written here, each a few MB on disk."""
    root = tmp_path_factory.mktemp("checkpoints")
    sizes = TEXT_PRESETS["fnet_tiny"]
    tiny = {"hidden": sizes["hidden_size"], "intermediate": sizes["intermediate_size"]}
    state = transformers_state(
        "classifier", np.random.default_rng(0), vocab=260, positions=32, **tiny
    )
    files = {"out": str(root / "runs"), "csv": write_reviews(root / "reviews")}
    placeholder = {"fnet.extra": np.zeros(_PLACEHOLDER, np.float32)}
    files["bin"] = write_transformers_folder(
        root / "bin", {**state, **placeholder}, "classifier", "bin"
    )
    _with_huge_tensor(os.path.join(files["bin"], "pytorch_model.bin"), deflated=True)
    files["safetensors"] = write_transformers_folder(root / "st", state, "classifier")
    _sparse_safetensors(os.path.join(files["safetensors"], "model.safetensors"), state)
    official = _official_state_dict(dataclasses.replace(VARIANTS["fourcastnet"], **TINY))
    model_state = {f"module.{key}": torch.from_numpy(value) for key, value in official.items()}
    model_state["module.extra"] = torch.zeros(_PLACEHOLDER)
    files["tar"] = str(root / "checkpoint.tar")
    torch.save({"iters": 1, "epoch": 1, "model_state": model_state}, files["tar"])
    _with_huge_tensor(files["tar"], deflated=False)
    for name in ("bin", "safetensors"):
        folder = files[name]
        assert (
            sum(os.stat(os.path.join(folder, f)).st_blocks * 512 for f in os.listdir(folder)) < 8e6
        )
    assert os.stat(files["tar"]).st_blocks * 512 < 1e6 and os.path.getsize(files["tar"]) > 3.2e9
    return files


def test_a_tensor_the_model_has_no_place_for_is_never_read(hostile_checkpoints):
    files = hostile_checkpoints
    train = ["train", "--model", "fnet_tiny", "--data", files["csv"], "--epochs", "1"]
    train += ["--tokenizer", "bytes", "--sequence-length", "16", "--batch-size", "4"]
    train += ["--out", files["out"]]
    probes = [
        (
            [*train, "--weights", files["bin"]],
            2,
            r"member '\S+/data/\d+' expands [\d,]+ bytes to 3,200,000,000 \(ratio [\d,]+, "
            r"limit 100\): a zip bomb",
        ),
        (
            [*train, "--weights", files["safetensors"]],
            2,
            r"unexpected keys \(1\): fnet\.extra",
        ),
        (
            {
                "call": "keras_fourier.models:FourCastNet",
                "kwargs": {**TINY, "weights": files["tar"]},
            },
            "ValueError",
            r"unexpected keys \(1\): extra",
        ),
    ]
    report = run_probes([probe for probe, _, _ in probes])
    for (_, status, expected), result in zip(probes, report["results"], strict=True):
        lines = [line for line in result["err"].splitlines() if line.strip()]
        assert result["status"] == status and len(lines) == 1, result
        assert re.search(expected, lines[0]), result
    assert not os.path.exists(files["out"])  # the refused runs wrote nothing
    assert report["peak"] < PEAK_RSS_BYTES, report["peak"]


def test_an_optimizer_only_fourcastnet_checkpoint_says_model_state_is_missing(tmp_path):
    path = tmp_path / "optimizer.tar"
    optimizer = {"state": {0: {"exp_avg": torch.zeros(3)}}, "param_groups": [{"lr": 5e-4}]}
    torch.save({"iters": 10, "epoch": 1, "optimizer_state_dict": optimizer}, path)
    with pytest.raises(ValueError) as info:
        FourCastNet(**TINY, weights=str(path))
    message = str(info.value)
    assert (
        "\n" not in message and "entries that are not tensors: epoch, iters, optimizer_" in message
    )
    assert "nor does it hold one under 'model', 'module', 'state_dict' or 'model_state'" in message


def test_a_keras_file_records_the_hard_thresholding_fraction(tmp_path):
    trained = FourCastNet(**TINY, hard_thresholding_fraction=0.5)
    path = str(tmp_path / "half.keras")
    trained.save(path)
    with pytest.raises(ValueError) as info:
        FourCastNet(**TINY, weights=path)
    message = str(info.value)
    assert "\n" not in message and message.endswith("Received: hard_thresholding_fraction=0.5")
    assert "model 'fourcastnet' has 1.0" in message
    loaded = FourCastNet(**TINY, hard_thresholding_fraction=0.5, weights=path)
    fields = np.random.default_rng(0).normal(size=(1, 16, 32, 3)).astype("float32")
    np.testing.assert_array_equal(np.asarray(loaded(fields)), np.asarray(trained(fields)))


@pytest.fixture
def mirror_settings(tmp_path, monkeypatch):
    """A fresh KERAS_HOME, short deadlines (a download that is not stopped fails, not hangs)."""
    monkeypatch.setenv("KERAS_HOME", os.fspath(tmp_path / "home"))
    monkeypatch.setenv(download_module.DEADLINE_VARIABLE, "8")
    monkeypatch.setenv(download_module.TIMEOUT_VARIABLE, "2")
    monkeypatch.setenv(download_module.RETRIES_VARIABLE, "0")
    monkeypatch.delenv(download_module.MAX_BYTES_VARIABLE, raising=False)
    return tmp_path


def _export_from(mirror: str, tmp_path, monkeypatch, capsys) -> str:
    """`export gfnet_ti --weights imagenet` from `mirror`: its one error line (exit 1)."""
    monkeypatch.setenv(download_module.MIRROR_VARIABLE, mirror)
    out = tmp_path / "models"
    argv = ["export", "gfnet_ti", "--weights", "imagenet", "--image-size", "32"]
    assert main([*argv, "--format", "saved_model", "--out", os.fspath(out)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in lines if not line.startswith("Downloading gfnet-ti.pth")]
    assert len(errors) == 1 and errors[0].startswith("keras-fourier export: error: "), lines
    assert not out.exists() and os.listdir(tmp_path / "home" / "keras_fourier") == []
    return errors[0]


def test_an_endless_mirror_body_stops_near_the_release_size(mirror_settings, monkeypatch, capsys):
    with serve_hostile(b"") as server:
        error = _export_from(f"{server.url}/endless", mirror_settings, monkeypatch, capsys)
    # GFNet-Ti's 7.5 million float32 parameters (30 MB), a quarter more and 16 MiB: not 4 GiB.
    ceiling = int(
        re.search(r"the body exceeds (\d+) bytes, more than the \1-byte ceiling", error)[1]
    )
    assert 40e6 < ceiling < 60e6, error


def test_a_dripping_mirror_is_abandoned_below_the_minimum_rate(
    mirror_settings, monkeypatch, capsys
):
    monkeypatch.setenv(download_module.MIN_RATE_VARIABLE, "1000")
    monkeypatch.setenv(download_module.RATE_WINDOW_VARIABLE, "1")
    started = time.monotonic()
    with serve_hostile(b"PK\x03\x04" + bytes(4000)) as server:  # 10 bytes a second
        error = _export_from(f"{server.url}/slow", mirror_settings, monkeypatch, capsys)
    assert re.search(
        r"it came at \d+ bytes/s over 1 s, below the minimum of 1000 bytes/s over 1 s "
        r"\(\d+ bytes received; KERAS_FOURIER_DOWNLOAD_MIN_RATE allows slower\)",
        error,
    ), error
    assert time.monotonic() - started < 8


def test_zip_members_open_seekable_and_a_renamed_local_header_is_refused(tmp_path):
    # .keras weights are a stored member that HDF5 reads by jumping about: read from the file
    # itself (zipfile rereads a member from its start for every backward seek); a compressed
    # member opens as zipfile opens it
    payload = bytes(range(256)) * 64
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo("stored.bin"), payload)
        archive.writestr("deflated.bin", payload, compress_type=zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(path) as archive:
        for member in ("stored.bin", "deflated.bin"):
            with open_zip_member(archive, member) as file:
                assert file.read() == payload
                file.seek(1000)
                assert file.read(3) == payload[1000:1003]
                file.seek(-2, os.SEEK_END)
                assert file.read() == payload[-2:] and file.read(5) == b""
                file.seek(10)
                assert file.tell() == 10 and file.read(2) == payload[10:12]
    data = path.read_bytes()
    path.write_bytes(data.replace(b"stored.bin", b"stored.exe", 1))  # the local header's name
    with (
        zipfile.ZipFile(path) as archive,
        pytest.raises(ValueError) as caught,
        open_zip_member(archive, "stored.bin"),
    ):
        pass
    assert str(caught.value).endswith("has another name in its local header"), caught.value
