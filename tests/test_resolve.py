"""One resolver: every subcommand takes `GFNetTi`, `gfnet_ti`, a `.keras` file and a run folder."""

import csv
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_fourier
from keras_fourier.cli import build_parser, main
from keras_fourier.cli.arguments import model_options
from keras_fourier.models import catalog, resolve_model
from keras_fourier.run_folder import RunFolder

pytestmark = pytest.mark.single_backend


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """gfnet_tiny with 10 (digits) and 1000 (ImageNet) classes, as .keras files and run folders."""
    folder = tmp_path_factory.mktemp("saved")
    paths = {}
    for classes in (10, 1000):
        model = catalog.create_model(
            "gfnet_tiny", num_classes=classes, image_size=16, dims=16, depths=1
        )
        paths[f"keras{classes}"] = str(folder / f"tiny{classes}.keras")
        model.save(paths[f"keras{classes}"])
        run = folder / f"run{classes}"
        run.mkdir()
        shutil.copy(paths[f"keras{classes}"], RunFolder(run).model)
        paths[f"run{classes}"] = str(run)
    image = tf.io.encode_png(np.full((20, 24, 3), 128, dtype="uint8")).numpy()
    (folder / "grey.png").write_bytes(image)
    return {**paths, "image": str(folder / "grey.png")}


def _references(saved, classes=10):
    return [
        ("GFNetTi", "gfnet_ti"),
        ("gfnet_ti", "gfnet_ti"),
        (saved[f"keras{classes}"], "gfnet_tiny"),
        (saved[f"run{classes}"], "gfnet_tiny"),
    ]


def test_names_in_either_spelling_and_their_errors(saved, tmp_path):
    assert catalog.canonical_name("GFNetHTi") == "gfnet_h_ti"
    assert catalog.canonical_name("FNetBase") == "fnet_base"
    assert catalog.canonical_name("gfnet_tiny") == "gfnet_tiny"
    built = resolve_model("HorNetTGF", image_size=(32, 64), classes=3)
    assert (built.name, built.input_shape, built.output_shape) == (
        "hornet_t_gf",
        (None, 32, 64, 3),
        (None, 3),
    )
    assert resolve_model("FNetBase", sequence_length=8, classes=2).name == "fnet_base"
    with pytest.raises(ValueError, match=r"Unknown model 'GFNetTiny'.*'gfnet_tiny'.*'GFNetTi'"):
        resolve_model("GFNetTiny")
    with pytest.raises(FileNotFoundError, match="No model file or run folder at"):
        resolve_model(str(tmp_path / "missing.keras"))
    with pytest.raises(ValueError, match="classes only apply to builder names"):
        resolve_model(saved["keras10"], classes=3)
    with pytest.raises(ValueError, match="only apply to the presets"):
        resolve_model("gfnet_ti", dims=32)


def test_a_weights_file_with_its_family(tmp_path):
    reference = keras_fourier.GFNetTi(input_shape=(32, 32, 3), classes=4)
    path = str(tmp_path / "ti.weights.h5")
    reference.save_weights(path)
    for family in ("GFNetTi", "gfnet_ti"):
        model = resolve_model(path, family=family, image_size=32, classes=4)
        assert model.name == "gfnet_ti"
        for ours, theirs in zip(model.get_weights(), reference.get_weights(), strict=True):
            np.testing.assert_array_equal(ours, theirs)
    with pytest.raises(ValueError, match="needs family, the name of the model"):
        resolve_model(path)


def test_flops_takes_every_reference(saved, capsys):
    for reference, name in _references(saved):
        assert main(["flops", reference, *(["--image-size", "32"] * (name == "gfnet_ti"))]) == 0
        assert capsys.readouterr().out.startswith(f"{name}: ")
    assert main(["flops", saved["run10"], "--classes", "3"]) == 2
    assert "--classes only apply to builder names" in capsys.readouterr().err


def test_evaluate_takes_every_reference(saved, capsys):
    for reference, _ in _references(saved):
        size = ["--image-size", "16"] if reference in ("GFNetTi", "gfnet_ti") else []
        assert main(["evaluate", "--model", reference, "--split", "test", *size]) == 0
        line = capsys.readouterr().out.strip().splitlines()[-1]
        assert line.startswith("accuracy=") and "top5_accuracy=" in line


def test_export_takes_every_reference(saved, tmp_path):
    for reference, name in _references(saved):
        argv = ["export", reference, "--out", str(tmp_path)]
        if reference in ("GFNetTi", "gfnet_ti"):
            argv += ["--image-size", "32", "--classes", "3"]
        args = build_parser().parse_args(argv)
        model = resolve_model(args.model, **model_options(args))
        assert model.name == name
    assert main(["export", saved["run10"], "--format", "saved_model", "--out", str(tmp_path)]) == 0
    assert os.path.isfile(tmp_path / "gfnet_tiny" / "1" / "saved_model.pb")


def test_predict_takes_every_reference(saved, tmp_path, capsys):
    weights = str(tmp_path / "ti.weights.h5")
    keras_fourier.GFNetTi(input_shape=(32, 32, 3)).save_weights(weights)
    for reference, _ in _references(saved, classes=1000):
        named = reference in ("GFNetTi", "gfnet_ti")
        options = ["--weights", weights, "--image-size", "32"] * named
        argv = ["predict", saved["image"], "--model", reference, "--top", "2", *options]
        assert main(argv) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert lines[0] == saved["image"] and len(lines) == 3 and "%" in lines[1]


def test_bench_takes_every_reference(saved, tmp_path):
    common = ["--batch-size", "1", "--repeats", "1", "--no-train"]
    for index, (reference, name) in enumerate(_references(saved)):
        size = ["--image-size", "32"] if name == "gfnet_ti" else []
        out = tmp_path / str(index)
        assert main(["bench", reference, *common, *size, "--out", str(out)]) == 0
        with open(out / "bench.csv", newline="") as file:
            (row,) = list(csv.DictReader(file))
        assert row["model"] == name


@pytest.mark.slow
def test_train_starts_from_a_keras_file_or_a_run_folder(saved, tmp_path, capsys):
    quick = ["--epochs", "1", "--steps-per-epoch", "1", "--batch-size", "8", "--verbose", "0"]
    quick += ["--no-tensorboard"]
    start = keras.saving.load_model(saved["keras10"], compile=False)
    for index, reference in enumerate((saved["keras10"], saved["run10"])):
        out = str(tmp_path / str(index))
        assert main(["train", "--model", reference, "--out", out, *quick]) == 0
        trained = keras.saving.load_model(RunFolder(out).model, compile=False)
        assert trained.name == "gfnet_tiny" and trained.input_shape == (None, 16, 16, 3)
        # It starts from the saved weights: one step moves them only a little.
        moved = max(
            float(np.max(np.abs(a - b)))
            for a, b in zip(trained.get_weights(), start.get_weights(), strict=True)
        )
        assert 0 < moved < 0.1
    capsys.readouterr()
    assert main(["train", "--model", saved["keras1000"], "--out", str(tmp_path / "x")]) == 2
    assert "outputs 1000 classes but data 'digits' has 10" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert main(["train", "--model", saved["keras10"], "--dims", "8", "--out", "y"]) == 2
    assert "only apply to the presets" in capsys.readouterr().err


@pytest.mark.slow
def test_train_takes_either_spelling(tmp_path, capsys):
    quick = ["--epochs", "1", "--steps-per-epoch", "1", "--batch-size", "8", "--verbose", "0"]
    quick += ["--image-size", "16", "--no-tensorboard"]
    out = str(tmp_path / "run")
    assert main(["train", "--model", "GFNetTi", "--out", out, *quick]) == 0
    assert keras.saving.load_model(RunFolder(out).model, compile=False).name == "gfnet_ti"
    capsys.readouterr()
    # The other spelling is the same run: it is finished, nothing is trained again.
    assert main(["train", "--model", "gfnet_ti", "--out", out, *quick]) == 0
    assert "is already finished" in capsys.readouterr().out
