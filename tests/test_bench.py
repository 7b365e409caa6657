"""`keras-fourier bench` runs end to end on tiny models and writes its files (no timings)."""

import csv
import json

import pytest

import keras_fourier
from keras_fourier import bench, export
from keras_fourier.cli import main
from keras_fourier.training import create_model


def _rows(path):
    with open(path) as file:
        return list(csv.DictReader(file))


def test_model_bench_writes_json_and_csv_per_fft_impl(tmp_path, capsys):
    argv = ["bench", "gfnet_tiny", "--image-size", "16", "--classes", "10", "--batch-size", "2"]
    argv += ["--repeats", "1", "--fft-impl", "fft,matmul", "--out", str(tmp_path)]
    assert main(argv) == 0
    report = json.loads((tmp_path / "bench.json").read_text())
    rows = _rows(tmp_path / "bench.csv")
    assert [row["fft_impl"] for row in rows] == ["fft", "matmul"]
    model = create_model("gfnet_tiny", num_classes=10, image_size=16)
    for row, saved in zip(rows, report["rows"], strict=True):
        assert float(row["gflops"]) == round(keras_fourier.flops(model) / 1e9, 4)
        for key in ("predict_img_s", "train_img_s", "latency_ms", "matmul_fraction"):
            assert float(row[key]) > 0 and saved[key] > 0
    assert report["machine"]["cpu_count"] >= 1 and report["matmul_gmacs"] > 0
    assert "predict_img_s" in capsys.readouterr().out
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_bench_of_a_keras_file_and_a_tflite_file(tmp_path):
    model = create_model("gfnet_tiny", num_classes=10, image_size=16)
    model.save(tmp_path / "tiny.keras")
    export.tflite(model, tmp_path / "tiny.tflite", verbose=False)
    common = ["--batch-size", "2", "--repeats", "1", "--no-train"]
    assert main(["bench", str(tmp_path / "tiny.keras"), *common, "--out", str(tmp_path / "k")]) == 0
    (row,) = _rows(tmp_path / "k" / "bench.csv")
    assert row["model"] == "gfnet_tiny" and "train_img_s" not in row
    out = tmp_path / "t"
    assert main(["bench", str(tmp_path / "tiny.tflite"), *common, "--out", str(out)]) == 0
    (row,) = _rows(out / "bench.csv")
    assert (row["runtime"], row["input_dtype"]) == ("tflite", "float32")
    assert float(row["predict_img_s"]) > 0 and float(row["latency_ms"]) > 0


def test_scaling_writes_csv_and_plot(tmp_path):
    argv = ["bench", "--scaling", "--mixers", "global_filter,fourier", "--grids", "8,4"]
    argv += ["--sequences", "16", "--width", "16", "--repeats", "1", "--fft-impl", "fft,matmul"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    rows = _rows(tmp_path / "scaling.csv")
    assert [(r["mixer"], r["layout"], r["tokens"], r["fft_impl"]) for r in rows] == [
        ("global_filter", "2d", "16", "fft"),
        ("global_filter", "2d", "64", "fft"),
        ("global_filter", "2d", "16", "matmul"),
        ("global_filter", "2d", "64", "matmul"),
        ("fourier", "2d", "16", "fft"),
        ("fourier", "2d", "64", "fft"),
        ("fourier", "2d", "16", "matmul"),
        ("fourier", "2d", "64", "matmul"),
        ("fourier", "1d", "16", "fft"),
        ("fourier", "1d", "16", "matmul"),
    ]
    assert all(float(r["latency_ms"]) > 0 and float(r["peak_mib"]) >= 0 for r in rows)
    assert (tmp_path / "scaling.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("mixer", bench.SCALING_MIXERS)
def test_every_scaling_block_builds_and_is_counted(mixer):
    model = bench.scaling_block(mixer, (4, 4), 16, "auto")
    assert model.output_shape == (None, 4, 4, 16)
    assert keras_fourier.flops(model) > 2 * 16 * 16 * 64  # more than the MLP's two products


@pytest.mark.parametrize(
    "argv",
    [["bench"], ["bench", "gfnet_tiny", "--scaling"], ["bench", "gfnet_tiny", "--batch-size", "0"]],
)
def test_bench_refuses_bad_arguments_and_writes_nothing(argv, tmp_path):
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_attention_points_that_do_not_fit_in_memory_are_skipped(monkeypatch, capsys):
    # Two float32 (heads, tokens, tokens) matrices: 16384 tokens at width 384 need 12 GiB.
    monkeypatch.setattr(bench, "_available_mib", lambda: 20 * 1024.0)
    assert bench._attention_fits(16384, 384, 1)
    assert not bench._attention_fits(16384, 384, 2)
    monkeypatch.setattr(bench, "_available_mib", lambda: 0.1)  # 64 tokens fit, 128 do not
    rows = bench._scaling_series(
        "attention", "1d", [(64,), (128,)], "-", 16, 1, "auto", 1, "float32"
    )
    assert [row["tokens"] for row in rows] == [64]
    assert "tokens=128  skipped: not enough memory" in capsys.readouterr().out
