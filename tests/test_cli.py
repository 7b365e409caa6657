"""The `keras-fourier` command line: train, evaluate, errors, and the README's main job."""

import os
import re
import subprocess
import sys

import pytest

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
    assert main([*argv, "--verbose", "0"]) == 0
    final = _last_line(capsys)
    assert re.fullmatch(rf"test_accuracy={METRIC}", final)
    history = read_history(tmp_path / "history.csv")
    assert [row["epoch"] for row in history] == [0, 1]
    for name in ("model.keras", "best.keras", "last.keras", "backup"):
        assert (tmp_path / name).exists(), name

    assert main(["evaluate", "--model", str(tmp_path / "model.keras"), "--data", "digits"]) == 0
    metrics = _last_line(capsys)
    assert re.fullmatch(rf"accuracy={METRIC} loss={METRIC} top5_accuracy={METRIC}", metrics)
    assert f"accuracy={final.split('=')[1]}" in metrics

    modified = os.path.getmtime(tmp_path / "model.keras")
    assert main([*argv, "--verbose", "0"]) == 0
    assert _last_line(capsys) == final
    assert os.path.getmtime(tmp_path / "model.keras") == modified
    assert read_history(tmp_path / "history.csv") == history


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
        "0",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    assert re.fullmatch(rf"test_accuracy={METRIC}", _last_line(capsys))
    path = str(tmp_path / "model.keras")
    assert main(["evaluate", "--model", path, "--data", "listops", *held_out]) == 0
    assert re.fullmatch(
        rf"accuracy={METRIC} loss={METRIC} top5_accuracy={METRIC}", _last_line(capsys)
    )


@pytest.mark.slow
def test_readme_main_job_reaches_95_percent_on_held_out_digits(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "keras_fourier.cli", "train"],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    last = completed.stdout.strip().splitlines()[-1]
    match = re.fullmatch(rf"test_accuracy={METRIC}", last)
    assert match, last
    assert float(match.group(1)) >= 0.95
    assert (tmp_path / "runs" / "default" / "model.keras").exists()
    assert len(read_history(tmp_path / "runs" / "default" / "history.csv")) == 20
