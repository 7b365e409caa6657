"""Untrusted sizes checked before memory is committed, and no lossy dtype casts.

Crafted files a few kilobytes long (a keras-hub preset declaring 20 million
positions, a Flax checkpoint with a (1, 200000000, 0) position table, an
HDF5 dataset of 3 GiB that was never written, a `.keras` archive whose head
has 15,000,000 units or whose config is 100 MiB of deflated spaces, a 1-bit
20000 x 20000 PNG, a 3 GB sparse tokenizer file) and requests beyond what a
machine holds (`--sequence-length`, `--image-size`, `--batch-size`,
`--threads`) are given to the commands in one child process, whose peak
resident memory is asserted: each is refused in one line with exit 2 and
nothing written, before it can allocate.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
import zlib

import h5py
import keras
import numpy as np
import pytest

from keras_fourier.limits import MAX_MEMORY_ENV, MAX_PARAMETERS_ENV, json_depth, parse_bytes
from keras_fourier.model_record import CHECKPOINT_RECORD, CLASS_NAMES_KEY, TASK_KEY
from keras_fourier.models import build_model
from keras_fourier.models.catalog import create_model
from keras_fourier.weights.convert import load_tensors
from keras_fourier.weights.keras_hub import read_keras_hub_config
from keras_fourier.weights.saved import load_keras_file, load_weights_file
from tests.test_fnet_checkpoints import official_params, write_checkpoint, write_keras_hub_preset

pytestmark = pytest.mark.single_backend

# The child's peak resident memory (TensorFlow and Keras loaded, every probe run) stays below:
# 0.7-0.9 GiB measured alone, 2.3 GiB once in a loaded full suite (allocator arenas of busy
# threads); each probe unchecked reached 3.7-8 GB.
PEAK_RSS_BYTES = 3 * 2**30
TINY = {"hidden_size": 64, "num_layers": 2, "intermediate_size": 128}

# Each probe is a command's argv, or a public call {"call": "module:function", "kwargs": {...}}
# whose ValueError is its one line (status "ValueError").
# A child process's own peak resident bytes: /proc's VmHWM starts anew at exec, where
# ru_maxrss keeps the forking parent's (a pytest worker's, gigabytes after other tests).
HIGH_WATER = """
import resource


def high_water():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
"""

_CHILD = (
    HIGH_WATER
    + """
import contextlib, importlib, io, json, sys
from keras_fourier import cli
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            if isinstance(argv, dict):
                module, name = argv["call"].split(":")
                getattr(importlib.import_module(module), name)(**argv["kwargs"])
                status = 0
            else:
                status = cli.main(argv)
        except SystemExit as exit:
            status = exit.code
        except ValueError as error:
            status = "ValueError"
            print(error, file=sys.stderr)
    peak_so_far = high_water()
    results.append({"argv": argv, "status": status, "err": err.getvalue(), "peak": peak_so_far})
print(json.dumps({"results": results, "peak": high_water()}))
"""
)


def run_probes(probes: list) -> dict:
    """Runs the probes (command lines, or public calls) in one child process, ceilings at defaults.

    Returns:
        {"results": [{"argv", "status", "err", "peak"}, ...], "peak": ...}: each
        probe's exit status, stderr, and the child's peak resident bytes so
        far; then the peak at the end.
    """
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop(MAX_MEMORY_ENV, None)
    env.pop(MAX_PARAMETERS_ENV, None)
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(probes)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _png(height: int, width: int, bit_depth: int = 8) -> bytes:
    """A grayscale PNG of zeros, rows deflated (a 1-bit 20000 x 20000 one is about 50 KB)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\0" * (1 + (width * bit_depth + 7) // 8)
    compressor = zlib.compressobj(9)
    data = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, bit_depth, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    )


def _rewrite_keras(source, target, config=None, extra=None, raw_config=None):
    """Copies a .keras archive with its config.json replaced and members added."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            if info.filename in (extra or {}):
                continue
            data = old.read(info)
            if info.filename == "config.json":
                if raw_config is not None:
                    new.writestr("config.json", raw_config, zipfile.ZIP_DEFLATED)
                    continue
                data = json.dumps(config).encode() if config is not None else data
            new.writestr(info, data)
        for name, content in (extra or {}).items():
            new.writestr(name, content)
    return str(target)


def _set_units(config, units: int):
    """The config with the units of every Dense of 10 units set to `units`."""
    if isinstance(config, dict):
        if config.get("units") == 10:
            config["units"] = units
        for value in config.values():
            _set_units(value, units)
    elif isinstance(config, list):
        for value in config:
            _set_units(value, units)
    return config


def write_reviews(data) -> str:
    """A CSV text source of 16 rows per split in the folder `data`; its --data value."""
    data.mkdir()
    rows = "\n".join(f"the cat was {'good' if i % 2 else 'bad'},{i % 2}" for i in range(16))
    for split in ("train", "dev", "test"):
        (data / f"{split}.csv").write_text("sentence,label\n" + rows + "\n")
    return f"csv:{data}"


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    """Every hostile file of the probes, written here."""
    root = tmp_path_factory.mktemp("crafted")
    files = {"csv": write_reviews(root / "reviews")}
    rng = np.random.default_rng(0)
    sizes = {"hidden_dim": 64, "num_layers": 2, "intermediate_dim": 128}
    write_keras_hub_preset(root / "long_preset", rng, **sizes, max_sequence_length=12)
    config_path = root / "long_preset" / "config.json"
    description = json.loads(config_path.read_text())
    description["config"]["max_sequence_length"] = 20_000_000  # the weights stay small
    config_path.write_text(json.dumps(description))
    files["long_preset"] = str(root / "long_preset")
    write_keras_hub_preset(root / "unwritten", rng, **sizes, max_sequence_length=12)
    with h5py.File(root / "unwritten" / "model.weights.h5", "r+") as handle:
        del handle["layers/position_embedding/vars/0"]
        handle.create_dataset(
            "layers/position_embedding/vars/0", shape=(12, 3 * 2**28), dtype="float32", chunks=True
        )
    assert os.path.getsize(root / "unwritten" / "model.weights.h5") < 1_000_000
    files["unwritten"] = str(root / "unwritten")
    params = official_params(rng, sizes=TINY, vocab=260, max_length=12)
    params["encoder"]["embedder"]["position"]["embedding"] = np.zeros((1, 200_000_000, 0), "f4")
    files["flax"] = write_checkpoint(root / "f_net_checkpoint", params)

    model = create_model("gfnet_tiny", num_classes=10, image_size=16)
    model.save(root / "digits.keras")
    with zipfile.ZipFile(root / "digits.keras") as archive:
        config = json.loads(archive.read("config.json"))
    files["units"] = _rewrite_keras(
        root / "digits.keras", root / "units.keras", config=_set_units(config, 15_000_000)
    )
    spaces = b'{"class_name": "Functional", "config": ' + b" " * (100 * 2**20) + b"{}}"
    files["spaces"] = _rewrite_keras(
        root / "digits.keras", root / "spaces.keras", raw_config=spaces
    )
    assert os.path.getsize(files["spaces"]) < 2 * 2**20
    record = {TASK_KEY: "image_classification", CLASS_NAMES_KEY: [str(i) for i in range(10)]}
    files["run_model"] = _rewrite_keras(
        root / "digits.keras",
        root / "run.keras",
        extra={CHECKPOINT_RECORD: json.dumps(record)},
    )
    (root / "bomb.png").write_bytes(_png(20000, 20000, bit_depth=1))
    assert os.path.getsize(root / "bomb.png") < 100_000
    files["bomb"] = str(root / "bomb.png")
    (root / "thin.png").write_bytes(_png(400_000, 1))
    files["thin"] = str(root / "thin.png")
    build_model(depths=1, dims=8, patch_size=8, input_shape=(16, 16, 3)).save(root / "k.keras")
    files["thousand"] = str(root / "k.keras")
    with open(root / "sparse.model", "wb") as file:
        file.truncate(3 * 10**9)
    files["tokenizer"] = str(root / "sparse.model")
    files["out"] = str(root / "runs")
    return files


def _train(crafted, *more, batch_size="4"):
    base = ["train", "--model", "fnet_tiny", "--data", crafted["csv"], "--epochs", "1"]
    return [
        *base,
        "--out",
        crafted["out"],
        *(["--batch-size", batch_size] if batch_size else []),
        *more,
    ]


def test_hostile_files_and_requests_are_refused_before_they_allocate(crafted):
    probes = [
        (_train(crafted, "--weights", crafted["long_preset"]), "max_sequence_length=20000000"),
        (_train(crafted, "--weights", crafted["flax"]), "max_sequence_length=200000000"),
        (_train(crafted, "--weights", crafted["unwritten"]), "vars/0=(12, 805306368)"),
        (["evaluate", "--model", crafted["units"]], "units=15000000"),
        (
            [
                "train",
                "--model",
                "gfnet_tiny",
                "--weights",
                crafted["units"],
                "--out",
                crafted["out"],
            ],
            "units=15000000",
        ),
        (["evaluate", "--model", crafted["spaces"]], "member 'config.json' expands"),
        (["predict", crafted["bomb"], "--model", crafted["run_model"]], "20000"),
        (_train(crafted, "--tokenizer", crafted["tokenizer"]), "size=3000000000"),
        (
            _train(crafted, "--sequence-length", "100000", batch_size=None),
            "--sequence-length=100000, --batch-size=64",
        ),
        (["flops", "gfnet_ti", "--image-size", "4096"], "--image-size=4096"),
        (["bench", "gfnet_tiny", "--batch-size", "100000"], "--batch-size=100000"),
        (["bench", "model.tflite", "--threads", "100000"], "--threads=100000"),
        (["predict", crafted["thin"], "--model", crafted["thousand"], "--top", "1"], None),
    ]
    report = run_probes([argv for argv, _ in probes])
    for (_, expected), result in zip(probes, report["results"], strict=True):
        if expected is None:  # the ImageNet path crops before it resizes: it runs, small
            assert result["status"] == 0, result
            continue
        assert result["status"] == 2, result
        lines = [line for line in result["err"].splitlines() if line.strip()]
        assert len(lines) == 1 and expected in lines[0], result
        if "ceiling" in lines[0]:
            assert "KERAS_FOURIER_MAX_" in lines[0], lines[0]
    assert not os.path.exists(crafted["out"])  # the refused runs wrote nothing
    assert report["peak"] < PEAK_RSS_BYTES, report["peak"]


def test_the_settings_raise_the_ceilings(crafted, monkeypatch):
    with pytest.raises(ValueError, match=r"15,000,000|units=15000000"):
        load_keras_file(crafted["units"], compile=False)
    monkeypatch.setenv(MAX_PARAMETERS_ENV, "1000")
    with pytest.raises(ValueError, match=r"above the ceiling of 1,000; set KERAS_FOURIER_MAX_PA"):
        load_keras_file(crafted["thousand"])
    monkeypatch.setenv(MAX_MEMORY_ENV, "64GiB")
    create_model("fnet_tiny", num_classes=2, sequence_length=100_000, vocabulary_size=260)
    monkeypatch.setenv(MAX_MEMORY_ENV, "lots")
    with pytest.raises(ValueError, match="KERAS_FOURIER_MAX_MEMORY is not valid"):
        create_model("fnet_tiny", num_classes=2, sequence_length=16)
    assert parse_bytes("1.5GiB") == 3 * 2**29 and json_depth(b'[{"a": "]]]"}]') == 2


def test_deep_json_is_refused_in_one_line(tmp_path, crafted):
    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "config.json").write_text('{"config": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(ValueError, match=r"nests JSON 50001 levels deep.*Received: depth=50001"):
        read_keras_hub_config(folder)
    deep = _rewrite_keras(
        crafted["thousand"], tmp_path / "deep.keras", raw_config=b"[" * 5000 + b"]" * 5000
    )
    with pytest.raises(ValueError, match="levels deep"):
        load_keras_file(deep)


def _tiny_vision():
    return build_model(depths=1, dims=8, patch_size=8, input_shape=(16, 16, 3), classes=3)


def _retype(path, dtype) -> str:
    """Rewrites the first 2-D tensor of a weights file in `dtype`; returns its name."""
    with h5py.File(path, "r+") as handle:
        names = []
        handle.visititems(
            lambda name, item: (
                names.append(name) if isinstance(item, h5py.Dataset) and item.ndim == 2 else None
            )
        )
        name = names[0]
        values = handle[name][()]
        del handle[name]
        retyped = values + 1j * values if dtype == "complex64" else values.astype(dtype)
        handle.create_dataset(name, data=retyped.astype(dtype))
    return name


@pytest.mark.parametrize("dtype", ["complex64", "int8"])
def test_lossy_dtypes_are_refused_naming_the_tensor(tmp_path, dtype):
    model = _tiny_vision()
    path = str(tmp_path / "w.weights.h5")
    model.save_weights(path)
    name = _retype(path, dtype)
    before = [weight.copy() for weight in model.get_weights()]
    if dtype == "int8":  # an integer into a float variable loses nothing: it loads
        load_weights_file(model, path)
        return
    with pytest.raises(ValueError, match=rf"tensor '{name}' as complex64.*Received: {name}="):
        load_weights_file(model, path)
    for old, new in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)
    saved = str(tmp_path / "m.keras")
    model.save(saved)
    with zipfile.ZipFile(saved) as archive:
        (tmp_path / "inner.h5").write_bytes(archive.read("model.weights.h5"))
    inner = _retype(tmp_path / "inner.h5", "complex64")
    rebuilt = _rewrite_keras(
        saved,
        tmp_path / "c.keras",
        extra={"model.weights.h5": (tmp_path / "inner.h5").read_bytes()},
    )
    with pytest.raises(ValueError, match=rf"tensor '{inner}' as complex64"):
        load_keras_file(rebuilt)


def test_a_converted_checkpoint_of_complex_tensors_is_refused(tmp_path):
    dense = keras.layers.Dense(2)
    dense.build((None, 3))
    keys = {"k": (dense.kernel, "linear"), "b": (dense.bias, "copy")}
    tensors = {"k": np.ones((2, 3), np.complex64), "b": np.zeros(2, np.float32)}
    with pytest.raises(ValueError, match=r"k -> .*kernel: stored as complex64"):
        load_tensors(dense, tensors, lambda model, names: (keys, ()), source="c.ckpt")
