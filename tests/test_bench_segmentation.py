"""`bench` on dense-prediction models and the largest input within a memory budget (no timings).

The segmenter is a stand-in built here from Keras layers: any model whose
output is (B, H, W, classes) and whose input takes any size.
"""

import csv
import json

import keras
import pytest

import keras_fourier
from keras_fourier import bench
from keras_fourier.cli import main
from keras_fourier.training import create_model


def _segmenter(classes: int = 5) -> keras.Model:
    """Stride 2, a Dense product (the host limit's shape), logits back at input resolution."""
    inputs = keras.Input((None, None, 3), name="images")
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")(x)
    x = keras.layers.Dense(64, activation="relu")(x)
    x = keras.layers.Conv2D(classes, 1)(x)
    outputs = keras.layers.UpSampling2D(2, interpolation="bilinear")(x)
    return keras.Model(inputs, outputs, name="tiny_segmenter")


@pytest.fixture(scope="module")
def segmenter_file(tmp_path_factory):
    keras.utils.set_random_seed(0)
    path = tmp_path_factory.mktemp("segmenter") / "segmenter.keras"
    _segmenter().save(path)
    return path


def _rows(path):
    with open(path) as file:
        return list(csv.DictReader(file))


def test_a_segmenter_is_timed_at_each_size_and_batch_with_a_per_pixel_training_step():
    model = _segmenter()
    assert bench.has_free_input_size(model)
    rows, host = bench.bench_keras(model, image_sizes=[32, 64], batch_sizes=[1, 2], repeats=1)
    assert [(row["image_size"], row["batch_size"]) for row in rows] == [
        (32, 1),
        (32, 2),
        (64, 1),
        (64, 2),
    ]
    # The limit's product: the Dense layer at the largest size and batch, 32x32 tokens x 2.
    assert host["matmul_shape"] == "2048x32x64" and host["matmul_gmac_s"]["float32"] > 0
    # Rounds: before each of the 12 timed phases (4 rows x predict, latency, train), one after.
    assert host["matmul_rounds"] == 13
    for row in rows:
        static = bench.at_input_size(model, row["image_size"])
        assert static.output_shape == (None, row["image_size"], row["image_size"], 5)
        assert row["gflops"] == round(keras_fourier.flops(static) / 1e9, 4)
        for key in ("predict_img_s", "train_img_s", "latency_ms", "predict_peak_mib"):
            assert row[key] is not None and row[key] >= 0 and row["predict_img_s"] > 0
        assert row["host_float32_gmac_s"] == host["matmul_gmac_s"]["float32"]
    # Per-pixel cost: four times the pixels, four times the multiply-adds.
    assert rows[2]["gflops"] == pytest.approx(4 * rows[0]["gflops"], rel=0.05)


def test_a_model_of_free_input_size_defaults_to_512_and_1024_batch_1_and_8():
    inputs = keras.Input((None, None, 3))
    model = keras.Model(inputs, keras.layers.Conv2D(2, 1)(inputs), name="pointwise")
    rows, _ = bench.bench_keras(model, repeats=1, train=False)
    assert [(row["image_size"], row["batch_size"]) for row in rows] == [
        (512, 1),
        (512, 8),
        (1024, 1),
        (1024, 8),
    ]
    assert all("train_img_s" not in row for row in rows)


def test_image_sizes_of_a_model_of_one_input_size_are_refused():
    classifier = create_model("gfnet_tiny", num_classes=10, image_size=16)
    with pytest.raises(ValueError, match=r"free input size. Received: image_sizes=\[32\]"):
        bench.bench_keras(classifier, image_sizes=[32])


def test_segmenter_agreement_is_per_pixel():
    model = _segmenter()
    images = bench.agreement_inputs(model, None, "test", 4, image_size=32)
    assert images.shape == (4, 32, 32, 3)
    same = bench.precision_agreement(model, images, "float32")
    assert same["top1_agreement"] == 1.0 and same["max_logit_diff"] == 0.0
    bf16 = bench.precision_agreement(model, images, "mixed_bfloat16")
    assert 0.5 <= bf16["top1_agreement"] <= 1
    assert 0 < bf16["max_logit_diff"] < 0.5 * bf16["max_abs_logit"]
    with pytest.raises(ValueError, match="Received: image_size=None"):
        bench.agreement_inputs(model, None, "test", 4)


def test_bench_command_times_a_saved_segmenter_at_each_size(segmenter_file, tmp_path):
    argv = ["bench", str(segmenter_file), "--image-size", "32,64", "--batch-size", "1,2"]
    assert main([*argv, "--repeats", "1", "--no-train", "--out", str(tmp_path)]) == 0
    rows = _rows(tmp_path / "bench.csv")
    assert [(row["image_size"], row["batch_size"]) for row in rows] == [
        ("32", "1"),
        ("32", "2"),
        ("64", "1"),
        ("64", "2"),
    ]
    assert all(row["model"] == "tiny_segmenter" and float(row["predict_img_s"]) > 0 for row in rows)
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["host"]["matmul_shape"] == "2048x32x64"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gfnet_tiny", "--image-size", "16,32"], "--image-size takes one size for a named model"),
        (["--scaling", "--batch-size", "1,2"], "--batch-size=1,2"),
        (["gfnet_tiny", "--image-size", "0,16"], "--image-size=0,16"),
        (["--max-input"], "--max-input needs a MODEL"),
        (["gfnet_tiny", "--max-input", "--memory-gib", "0"], "--memory-gib=0.0"),
    ],
)
def test_bench_refuses_bad_sizes_and_budgets(argv, message, tmp_path, capsys):
    assert main(["bench", *argv, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error
    assert not (tmp_path / "out").exists()


def test_max_input_of_a_model_of_one_input_size_is_refused(tmp_path, capsys):
    create_model("gfnet_tiny", num_classes=10, image_size=16).save(tmp_path / "tiny.keras")
    argv = ["bench", str(tmp_path / "tiny.keras"), "--max-input", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert "input_shape=(None, None, C)). Received: input_shape=(None, 16, 16, 3)" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("threshold", "start", "expected", "probes"),
    [
        (1000, 256, 992, [256, 512, 1024, 768, 896, 960, 992]),
        (20000, 256, 8192, [256, 512, 1024, 2048, 4096, 8192]),
        (100, 256, 96, [256, 128, 64, 96]),
        (31, 256, None, [256, 128, 64, 32]),
        (256, 200, 256, [224, 448, 320, 256, 288]),
    ],
)
def test_search_doubles_then_bisects_on_multiples(threshold, start, expected, probes):
    tried = []

    def fits(side):
        tried.append(side)
        return side <= threshold

    found = bench.search_largest(fits, start=start, multiple=32, max_side=8192)
    assert (found, tried) == (expected, probes)


def test_largest_input_probes_in_processes_and_stops_one_above_the_budget(segmenter_file):
    # A budget above what two small probes need: both fit, the search stops at --max-side.
    report = bench.largest_input(
        str(segmenter_file), memory_gib=16, start=32, max_side=64, verbose=False
    )
    assert (report["largest_side"], report["reached_max_side"]) == (64, True)
    assert [(row["side"], row["fits"]) for row in report["rows"]] == [(32, True), (64, True)]
    for row in report["rows"]:
        # The whole process counts: the runtime and the model are resident before the call.
        assert 0 < row["baseline_mib"] <= row["peak_mib"] <= 16 * 1024
        assert row["seconds"] > 0 and row["note"] is None
    # 50 MiB: the probe process passes it while it starts and is stopped; nothing fits.
    report = bench.largest_input(_segmenter(), memory_gib=0.05, start=32, verbose=False)
    assert report["largest_side"] is None and report["model"] == "tiny_segmenter"
    (row,) = report["rows"]
    assert (row["side"], row["fits"], row["note"]) == (32, False, "stopped above the budget")
    assert row["peak_mib"] >= 0.05 * 1024  # above it, rounded to 0.1 MiB


def test_max_input_command_writes_its_probes(segmenter_file, tmp_path, capsys):
    argv = ["bench", str(segmenter_file), "--max-input", "--memory-gib", "0.05"]
    assert main([*argv, "--image-size", "64", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "largest input within 0.05 GiB: none (not even the smallest probe fits)" in out
    report = json.loads((tmp_path / "max_input.json").read_text())
    assert report["largest_side"] is None and report["memory_gib"] == 0.05
    assert [row["side"] for row in _rows(tmp_path / "max_input.csv")] == ["64", "32"]
    assert "cpu_count" in report["machine"]


def test_a_phase_above_the_host_limit_is_a_measurement_error_not_a_fraction():
    figures = {"predict_img_s": 50.0, "train_img_s": 5.0}
    result = bench.throughput(1.0, figures, {"float32": 40.0}, "float32")
    assert result["predict_gmac_s"] == 50.0 and result["predict_fraction"] is None
    assert result["train_fraction"] == 0.375
    assert result["measurement_error"] == (
        "predict 50 GMAC/s is above the host's float32 limit 40 GMAC/s"
    )
    # int8 models train in float: their training step's limit is float32.
    int8 = bench.throughput(1.0, figures, {"float32": 40.0, "int8": 100.0}, "int8")
    assert (int8["predict_fraction"], int8["train_fraction"]) == (0.5, 0.375)
    assert "measurement_error" not in int8


def test_host_limits_keep_rounds_and_cap_the_rows():
    limits = bench.HostLimits((10**6, 8, 8), [], repeats=1)
    limits.measure()
    limits.measure()
    report = limits.report()
    assert report["matmul_shape"] == "65536x8x8" and report["matmul_rounds"] == 2
    assert report["matmul_runtime"] == "keras" and report["matmul_threads"] >= 1
    assert report["matmul_gmac_s"]["float32"] > 0
    with pytest.raises(ValueError, match="runtime='onnx'"):
        bench.HostLimits((8, 8, 8), runtime="onnx")
