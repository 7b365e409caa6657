"""`keras-fourier bench` runs end to end on tiny models and writes its files (no timings)."""

import csv
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_fourier
from keras_fourier import bench, export
from keras_fourier.bench import scaling
from keras_fourier.cli import main
from keras_fourier.export.litert import FLOAT_OPS
from keras_fourier.layers import spectral
from keras_fourier.models.family import MIXER_NAMES
from keras_fourier.training import create_model
from keras_fourier.training.rundir import write_run_record


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
    host = report["host"]
    # gfnet_tiny at 16 px: 8x8 tokens of width 64, MLP 64 -> 256, batch 2.
    assert host["matmul_shape"] == "128x64x256"
    assert host["matmul_gmac_s"]["float32"] > 0
    assert set(host["cpu_features"]) <= set(bench.CPU_FEATURES)
    gflops = keras_fourier.flops(model) / 1e9
    for row, saved in zip(rows, report["rows"], strict=True):
        assert float(row["gflops"]) == round(gflops, 4)
        assert (row["precision"], row["limit_dtype"]) == ("float32", "float32")
        assert float(row["host_float32_gmac_s"]) == host["matmul_gmac_s"]["float32"]
        for key in ("predict_img_s", "train_img_s", "latency_ms", "predict_fraction"):
            assert float(row[key]) > 0 and saved[key] > 0
        assert saved["predict_gmac_s"] == pytest.approx(
            gflops * saved["predict_img_s"], rel=1e-2, abs=0.01
        )
        assert saved["train_fraction"] == pytest.approx(
            3 * gflops * saved["train_img_s"] / host["matmul_gmac_s"]["float32"], rel=1e-2
        )
    assert report["machine"]["cpu_count"] >= 1
    assert "predict_img_s" in capsys.readouterr().out
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_bench_runs_on_a_machine_without_tensorflow(tmp_path):
    """A GPU machine may have JAX or PyTorch and no TensorFlow: the model bench runs there."""
    argv = ["bench", "gfnet_ti", "--image-size", "32", "--classes", "10", "--batch-size", "2"]
    argv += ["--repeats", "1", "--no-train", "--out", str(tmp_path)]
    code = (
        # The path finder, asked for tensorflow, finds nothing: as on a machine without it.
        "import importlib.machinery as m, sys\n"
        "class NoTensorFlow(m.PathFinder):\n"
        "    @classmethod\n"
        "    def find_spec(cls, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'tensorflow': return None\n"
        "        return m.PathFinder.find_spec(name, path, target)\n"
        "sys.meta_path = [NoTensorFlow if f is m.PathFinder else f for f in sys.meta_path]\n"
        "from keras_fourier.cli import main\n"
        f"status = main({argv!r})\n"
        "assert not [name for name in sys.modules if name.startswith('tensorflow')]\n"
        "sys.exit(status)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "KERAS_FOURIER_SET"))}
    env["KERAS_BACKEND"] = "jax"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "bench.json").read_text())
    (row,) = report["rows"]
    assert (row["model"], row["runtime"], row["batch_size"]) == ("gfnet_ti", "jax", 2)
    assert row["predict_img_s"] > 0 and row["host_float32_gmac_s"] > 0
    # On a CPU no accelerator is named and no device memory is reported.
    assert report["machine"]["accelerator"] is None and report["host"]["accelerator"] is None
    assert "predict_device_peak_mib" not in row


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


@pytest.mark.slow
def test_scaling_writes_csv_and_plot(tmp_path):
    # Each point runs in a fresh process (its memory is measured from a clean start): few points.
    argv = ["bench", "--scaling", "--mixers", "fourier", "--grids", "8,4"]
    argv += ["--sequences", "16", "--width", "16", "--repeats", "1", "--fft-impl", "fft,matmul"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    rows = _rows(tmp_path / "scaling.csv")
    assert [(r["mixer"], r["layout"], r["tokens"], r["fft_impl"]) for r in rows] == [
        ("fourier", "2d", "16", "fft"),
        ("fourier", "2d", "64", "fft"),
        ("fourier", "2d", "16", "matmul"),
        ("fourier", "2d", "64", "matmul"),
        ("fourier", "1d", "16", "fft"),
        ("fourier", "1d", "16", "matmul"),
    ]
    assert all(float(r["latency_ms"]) > 0 and float(r["peak_mib"]) >= 0 for r in rows)
    assert (tmp_path / "scaling.png").read_bytes()[:4] == b"\x89PNG"
    host = json.loads((tmp_path / "scaling.json").read_text())["host"]
    assert host["matmul_shape"] == "3136x16x64" and host["matmul_gmac_s"]["float32"] > 0


@pytest.mark.parametrize("mixer", MIXER_NAMES)
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
    monkeypatch.setattr(scaling, "available_mib", lambda: 20 * 1024.0)
    assert bench.attention_fits(16384, 384, 1)
    assert not bench.attention_fits(16384, 384, 2)
    monkeypatch.setattr(scaling, "available_mib", lambda: 0.1)  # 64 tokens fit, 128 do not
    rows = bench.scaling_series(
        "attention", "1d", [(64,), (128,)], "-", 16, 1, "auto", 1, "float32"
    )
    assert [row["tokens"] for row in rows] == [64]
    assert "tokens=128  skipped: not enough memory" in capsys.readouterr().out


def test_memory_check_reads_this_machines_meminfo():
    # The real query the attention points are skipped by: MemAvailable, in MiB, below MemTotal.
    with open("/proc/meminfo") as file:
        total = next(int(line.split()[1]) for line in file if line.startswith("MemTotal:")) / 1024
    available = bench.available_mib()
    assert 0 < available <= total
    assert bench.attention_fits(64, 16, 1)
    assert not bench.attention_fits(10**6, 384, 1)  # 2 x 6 x 10^12 floats: no machine has it


def test_bench_bf16_runs_the_mixed_bfloat16_policy_and_reports_agreement(tmp_path):
    argv = ["bench", "gfnet_tiny", "--image-size", "16", "--classes", "10", "--batch-size", "2"]
    argv += ["--repeats", "1", "--precision", "bf16", "--agreement", "--examples", "8"]
    argv += ["--dft-precision", "bfloat16"]  # gfnet_tiny's 4x4 tokens take the matmul DFT
    assert main([*argv, "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "bench.json").read_text())
    (row,) = report["rows"]
    assert report["precision"] == row["precision"] == "mixed_bfloat16"
    assert report["dft_precision"] == row["dft_precision"] == "bfloat16"
    assert row["limit_dtype"] == "bfloat16"
    assert row["host_bfloat16_gmac_s"] == report["host"]["matmul_gmac_s"]["bfloat16"] > 0
    assert row["predict_fraction"] > 0 and row["train_fraction"] > 0
    assert row["examples"] == 8 and 0.5 <= row["top1_agreement"] <= 1
    assert 0 < row["max_logit_diff"] < row["max_abs_logit"]
    assert keras.config.dtype_policy().name == "mixed_bfloat16"


def test_with_precision_keeps_weights_and_leaves_the_fft_and_head_in_float32():
    model = create_model("gfnet_tiny", num_classes=10, image_size=16)
    bf16 = bench.with_precision(model, "mixed_bfloat16")
    assert keras.config.dtype_policy().name == "float32"
    filters = [layer for layer in bf16._flatten_layers() if type(layer).__name__ == "GlobalFilter"]
    assert filters and all(layer.compute_dtype == "bfloat16" for layer in filters)
    # The filter weights stay float32 (mixed policy) and so does the transform inside.
    assert all(w.dtype == "float32" for layer in filters for w in layer.weights)
    assert bf16.layers[-1].compute_dtype == "float32"
    assert bf16.output.dtype == "float32"
    for mine, theirs in zip(bf16.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    x = np.random.default_rng(1).uniform(0, 255, (4, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(
        bf16.predict_on_batch(x), model.predict_on_batch(x), atol=0.05, rtol=0
    )
    with pytest.raises(ValueError, match="precision"):
        bench.with_precision(model, "int4")


def test_precision_agreement_is_exact_for_float32_and_close_for_bf16_and_int8():
    model = create_model("gfnet_tiny", num_classes=10, image_size=16)
    x = bench.agreement_inputs(model, None, "test", 32)
    assert x.shape == (32, 16, 16, 3) and x.min() >= 0 and x.max() <= 255
    same = bench.precision_agreement(model, x, "float32")
    assert same["top1_agreement"] == 1.0 and same["max_logit_diff"] == 0.0
    assert same["examples"] == 32 and same["max_abs_logit"] > 0
    digits = bench.agreement_inputs(model, "digits", "test", 64)
    keras.config.set_dtype_policy("mixed_bfloat16")  # the bench's policy when it reads them
    again = bench.agreement_inputs(model, "digits", "test", 64)
    assert keras.config.dtype_policy().name == "mixed_bfloat16"
    assert digits.shape == (64, 16, 16, 3) and again.dtype == np.float32
    np.testing.assert_array_equal(np.sort(again, axis=None), np.sort(digits, axis=None))
    keras.config.set_dtype_policy("float32")
    for precision in ("mixed_bfloat16", "int8"):
        result = bench.precision_agreement(model, x, precision)
        assert result["top1_agreement"] >= 0.75, precision
        assert 0 < result["max_logit_diff"] < 0.5 * result["max_abs_logit"], precision
    # The bfloat16 DFT alone, against the float32 DFT of the reference.
    with spectral.dft_precision_scope("bfloat16"):
        result = bench.precision_agreement(model, x, "float32")
    assert result["top1_agreement"] >= 0.9
    assert 0 < result["max_logit_diff"] < 0.05 * result["max_abs_logit"]


def test_int8_tflite_export_runs_integer_builtin_ops_and_bench_compares_it(tmp_path, capsys):
    from ai_edge_litert.interpreter import Interpreter

    model = create_model("gfnet_tiny", num_classes=10, image_size=16)
    # A model in a `keras-fourier train` run folder calibrates on the run's data by default.
    (tmp_path / "run").mkdir()
    write_run_record(tmp_path / "run", {"identity": {"data": "digits", "model": "gfnet_tiny"}})
    model.save(tmp_path / "run" / "model.keras")
    out = tmp_path / "export"
    argv = ["export", str(tmp_path / "run" / "model.keras"), "--format", "tflite"]
    argv += ["--quantize", "int8", "--num-batches", "2", "--output", "logits", "--out", str(out)]
    assert main(argv) == 0
    assert "int8 calibration on --data 'digits'" in capsys.readouterr().out
    path = out / "gfnet_tiny_int8.tflite"
    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()  # applies the default delegate, XNNPACK
    operations = interpreter._get_ops_details()
    names = {op["op_name"] for op in operations}
    assert not [name for name in names if name.startswith("Flex") or name == "CUSTOM"]
    tensors = {t["index"]: t for t in interpreter.get_tensor_details()}
    products = [op for op in operations if op["op_name"] in ("FULLY_CONNECTED", "BATCH_MATMUL")]
    assert products and all(
        tensors[op["inputs"][0]]["dtype"] == np.int8
        and tensors[op["inputs"][1]]["dtype"] == np.int8
        for op in products
    )
    # The DFTs are FULLY_CONNECTED products (2 blocks x 2 transforms besides the 2 MLP layers
    # per block and the head), LayerNorm's variance and GELU float32, and XNNPACK takes the
    # whole graph: one delegate node.
    assert "BATCH_MATMUL" not in names
    assert sum(op["op_name"] == "FULLY_CONNECTED" for op in operations) == 4 + 4 + 1
    assert all(
        tensors[op["inputs"][0]]["dtype"] == np.float32
        for op in operations
        if op["op_name"] in FLOAT_OPS
    )
    assert [op["op_name"] for op in operations].count("DELEGATE") == 1
    # Float32 in and out; int8 inside.
    assert interpreter.get_input_details()[0]["dtype"] == np.float32
    assert interpreter.get_output_details()[0]["dtype"] == np.float32
    argv = ["bench", str(path), "--reference", str(tmp_path / "run" / "model.keras")]
    argv += ["--agreement"]
    argv += ["--data", "digits", "--examples", "64", "--batch-size", "4", "--repeats", "1"]
    assert main([*argv, "--threads", "1", "--out", str(tmp_path / "b")]) == 0
    (row,) = json.loads((tmp_path / "b" / "bench.json").read_text())["rows"]
    assert (row["precision"], row["limit_dtype"], row["output"]) == ("int8", "int8", "logits")
    assert row["host_int8_gmac_s"] > 0 and row["host_float32_gmac_s"] > 0
    assert row["predict_fraction"] > 0 and row["examples"] == 64
    # Random weights, digits images: int8 logits within 10% of their float32 scale.
    assert row["top1_agreement"] >= 0.9
    assert 0 < row["max_abs_diff"] < 0.1 * row["max_abs_reference"]
