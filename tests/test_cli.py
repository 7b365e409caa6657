"""The `keras-fourier` command line: train, evaluate, errors, and the README's main job."""

import os
import re
import subprocess
import sys

import pytest

from keras_fourier import _startup
from keras_fourier.cli import build_parser, main
from keras_fourier.training import model_names, read_history

TINY = ["--model", "gfnet_tiny", "--dims", "16", "--depths", "1", "--no-tensorboard"]
METRIC = r"(\d+\.\d+)"


def test_train_parser_defaults_are_the_main_job_and_names_come_from_the_tables():
    args = build_parser().parse_args(["train"])
    assert (args.model, args.data, args.out, args.strategy) == (
        "gfnet_tiny",
        "digits",
        os.path.join("runs", "default"),
        "auto",
    )
    for name in model_names():
        assert build_parser().parse_args(["train", "--model", name]).model == name
    args = build_parser().parse_args(["train", "--depths", "1,2,1", "--dims", "32"])
    assert (args.depths, args.dims) == ((1, 2, 1), 32)


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--model", "gfnet_huge"],
        ["train", "--strategy", "parameter_server"],
        ["train", "--mixed-precision", "float16"],
    ],
)
def test_bad_names_are_argparse_errors_naming_the_value(argv, capsys):
    with pytest.raises(SystemExit) as error:
        main(argv)
    assert error.value.code == 2
    assert repr(argv[-1]) in capsys.readouterr().err


def test_architecture_options_of_a_named_model_are_a_value_error(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--model", "gfnet_xs", "--dims", "64", "--out", str(out)]) == 2
    assert "presets" in capsys.readouterr().err
    assert not out.exists()


def _last_line(capsys) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


def test_train_evaluate_and_rerun_of_a_finished_run(tmp_path, capsys):
    out = str(tmp_path)
    argv = ["train", *TINY, "--epochs", "2", "--steps-per-epoch", "3", "--ema", "--out", out]
    assert main([*argv, "--verbose", "2"]) == 0
    printed = capsys.readouterr().out
    final = printed.strip().splitlines()[-1]
    assert re.fullmatch(rf"test_accuracy={METRIC}", final)
    # The header: model and parameters, three disjoint splits with sizes, output folder.
    assert re.search(
        r"model gfnet_tiny: [\d,]+ parameters, [\d.,]+ MFLOPs per example \(papers' "
        r"convention\), input 16x16x3, 10 classes",
        printed,
    )
    assert "  train       'train', 1,262 images" in printed
    assert "  validation  'validation', 180 images (selects best.keras)" in printed
    assert "  test        'test', 355 images (evaluated once, at the end)" in printed
    assert f"output folder: {out}" in printed
    # One line per epoch when the output is not a terminal.
    assert "\x1b" not in printed and "━" not in printed
    history = read_history(tmp_path / "history.csv")
    assert [row["epoch"] for row in history] == [0, 1]
    best_epoch = max(history, key=lambda row: row["val_accuracy"])["epoch"]
    assert (
        f"model.keras   the model selected on the validation split (epoch {best_epoch + 1} of 2"
        in printed
    )
    for name in ("model.keras", "best.keras", "last.keras", "history.csv", "backup"):
        assert (tmp_path / name).exists(), name
        if name != "backup":
            assert f"  {name}" in printed, name

    # The run folder that train printed is what evaluate takes.
    assert main(["evaluate", "--model", out, "--data", "digits"]) == 0
    said, metrics = capsys.readouterr().out.strip().splitlines()[-2:]
    model_file = os.path.join(out, "model.keras")
    assert said == f"scored {model_file} on data 'digits', split 'test', 355 examples:"
    assert re.fullmatch(rf"accuracy={METRIC} loss={METRIC} top5_accuracy={METRIC}", metrics)
    assert f"accuracy={final.split('=')[1]}" in metrics
    # model.keras is the epoch selected on validation: it scores that epoch's val_accuracy.
    assert main(["evaluate", "--model", out, "--split", "validation"]) == 0
    validation = float(_last_line(capsys).split()[0].split("=")[1])
    assert validation == pytest.approx(history[best_epoch]["val_accuracy"], abs=1e-4)

    modified = os.path.getmtime(tmp_path / "model.keras")
    assert main([*argv, "--verbose", "0"]) == 0
    printed = capsys.readouterr().out
    assert printed.strip().splitlines()[-1] == final
    assert f"run folder {out} is already finished (2 epochs): nothing was trained" in printed
    assert os.path.getmtime(tmp_path / "model.keras") == modified
    assert read_history(tmp_path / "history.csv") == history


def test_evaluate_refuses_what_is_not_a_model_or_a_finished_run(tmp_path, capsys):
    assert main(["evaluate", "--model", str(tmp_path / "missing")]) == 2
    assert "No model file or run folder at" in capsys.readouterr().err
    (tmp_path / "history.csv").write_text("epoch,loss\n0,1.0\n")
    assert main(["evaluate", "--model", str(tmp_path)]) == 2
    assert "has not finished" in capsys.readouterr().err
    (tmp_path / "history.csv").unlink()
    (tmp_path / "saved_model.pb").write_bytes(b"")
    assert main(["evaluate", "--model", str(tmp_path)]) == 2
    assert "is a SavedModel" in capsys.readouterr().err


def test_fnet_trains_on_listops_and_evaluates(tmp_path, capsys):
    held_out = ["--eval-examples", "32"]
    argv = [
        "train",
        "--model",
        "fnet_tiny",
        "--data",
        "listops",
        "--sequence-length",
        "32",
        *held_out,
        "--train-examples",
        "64",
        "--batch-size",
        "16",
        "--epochs",
        "1",
        "--no-tensorboard",
        "--verbose",
        "2",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert re.fullmatch(rf"test_accuracy={METRIC}", printed.strip().splitlines()[-1])
    assert "input sequences of 32 tokens, 10 classes" in printed
    assert (
        "  validation  32 expressions generated with seed 1000033, less any also in test "
        "(selects best.keras)"
    ) in printed
    assert (
        "  test        32 expressions generated with seed 1000003 (evaluated once, at the end)"
    ) in printed
    path = str(tmp_path / "model.keras")
    assert main(["evaluate", "--model", path, "--data", "listops", *held_out]) == 0
    assert re.fullmatch(
        rf"accuracy={METRIC} loss={METRIC} top5_accuracy={METRIC}", _last_line(capsys)
    )


@pytest.mark.slow
def test_readme_main_job_reaches_95_percent_on_held_out_digits(readme_main_job):
    assert readme_main_job.returncode == 0, readme_main_job.stderr[-4000:]
    last = readme_main_job.stdout.strip().splitlines()[-1]
    match = re.fullmatch(rf"test_accuracy={METRIC}", last)
    assert match, last
    assert float(match.group(1)) >= 0.95
    run = readme_main_job.folder / "runs" / "default"
    assert (run / "model.keras").exists()
    assert len(read_history(run / "history.csv")) == 20


def test_the_command_hides_tensorflows_start_up_lines_but_not_its_own_errors(tmp_path):
    missing = str(tmp_path / "missing.keras")
    completed = subprocess.run(
        [sys.executable, "-m", "keras_fourier.cli", "evaluate", "--model", missing],
        env={key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 2
    assert completed.stderr == (
        f"keras-fourier evaluate: error: No model file or run folder at {missing!r}.\n"
    )


def test_tensorflow_log_lines_are_told_from_python_output():
    log_lines = [
        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        b"I0000 00:00:1795431198.319884    5289 cudart_stub.cc:31] Could not find cuda drivers",
        b"E0000 00:00:1795431203.027078    5289 cuda_platform.cc:52] failed call to cuInit: x",
        b"2026-11-23 10:00:00.123456: W tensorflow/core/framework/op_kernel.cc:1] warning",
        b"To enable the following instructions: AVX2 FMA, in other operations, rebuild "
        b"TensorFlow with the appropriate compiler flags.",
        b"fully_quantize: 0, inference_type: 6, input_inference_type: FLOAT32, "
        b"output_inference_type: FLOAT32",
    ]
    python_lines = [
        b"Traceback (most recent call last):",
        b"ValueError: Unknown strategy 'gpu'",
        b"/x.py:3: UserWarning: something",
        b"WARNING:tensorflow:From x.py:1: deprecated",
    ]
    assert [_startup.tensorflow_log_line(line) for line in log_lines] == [True] * 6
    assert not any(_startup.tensorflow_log_line(line) for line in python_lines)
    assert build_parser().parse_args(["evaluate", "--model", "m.keras", "--tf-logs"]).tf_logs
