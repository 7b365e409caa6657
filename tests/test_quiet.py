"""Quiet by default: TensorFlow's and LiteRT's C++ lines hidden wherever the package runs them.

Each test runs the import or the command as a user does, in a fresh
process without TF_CPP_MIN_LOG_LEVEL (which the test session sets for
itself), and asserts on its stderr.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import keras_fourier

ROOT = Path(__file__).parents[1]


def _run(args, tmp_path, **env):
    environment = {key: value for key, value in os.environ.items() if not key.startswith("TF_CPP")}
    environment.pop("KERAS_FOURIER_SET_TF_LOG_LEVEL", None)
    environment.update(PYTHONPATH=os.fspath(ROOT), **env)
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=300,
    )


def test_import_prints_nothing_but_python_warnings_still_show(tmp_path):
    code = "import warnings, keras_fourier; warnings.warn('a warning of the user')"
    completed = _run(["-c", code], tmp_path)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stderr.splitlines()
    assert lines == ["<string>:1: UserWarning: a warning of the user"]


def test_a_log_level_set_by_the_user_is_kept(tmp_path):
    code = "import os, keras_fourier; print(os.environ['TF_CPP_MIN_LOG_LEVEL'])"
    completed = _run(["-c", code], tmp_path, TF_CPP_MIN_LOG_LEVEL="0")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == "0\n"


@pytest.mark.slow
def test_export_to_tflite_and_onnx_is_quiet(tmp_path):
    # The file is made here; the commands that read it run in their own processes.
    tiny = keras_fourier.build_model(
        depths=1, dims=8, patch_size=8, input_shape=(16, 16, 3), classes=3
    )
    tiny.save(tmp_path / "tiny.keras")
    command = ["-m", "keras_fourier.cli", "export", "tiny.keras", "--out", "models"]
    # int8 calibration: the TFLite quantizer prints its settings from C++ too.
    int8 = ["--quantize", "none,int8", "--data", "digits", "--num-batches", "1"]
    completed = _run([*command, "--format", "tflite,onnx", *int8], tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    assert len(list((tmp_path / "models").glob("*.tflite"))) == 2
    # --tf-logs shows what is hidden.
    completed = _run([*command, "--format", "tflite", "--overwrite", "--tf-logs"], tmp_path)
    assert "XNNPACK delegate" in completed.stderr


@pytest.mark.slow
def test_bench_of_tflite_and_scaling_subprocesses_are_quiet(tmp_path):
    tiny = keras_fourier.build_model(
        depths=1, dims=8, patch_size=8, input_shape=(16, 16, 3), classes=3
    )
    keras_fourier.export.tflite(tiny, tmp_path / "t.tflite", verbose=False)
    bench = ["-m", "keras_fourier.cli", "bench"]
    completed = _run([*bench, "t.tflite", "--batch-size", "2", "--repeats", "1"], tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    scaling = ["--scaling", "--mixers", "fourier", "--grids", "4", "--sequences", "16"]
    completed = _run([*bench, *scaling, "--width", "8", "--repeats", "1"], tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""


@pytest.mark.parametrize("backend, extra", [("jax", "jax"), ("torch", "torch")])
def test_a_backend_that_is_not_installed_is_named_in_one_line(tmp_path, backend, extra):
    hide = f"import sys; sys.modules[{backend!r}] = None; "
    message = (
        f"KERAS_BACKEND={backend}, but {'JAX' if backend == 'jax' else 'PyTorch'} is not "
        f'installed: pip install "keras-fourier[{extra}]" (or unset KERAS_BACKEND for TensorFlow)'
    )
    # import keras_fourier loads no backend; its first use, or Keras's import, names the extra.
    for use in ("import keras_fourier; keras_fourier.GFNetTi", "import keras_fourier, keras"):
        completed = _run(["-c", hide + use], tmp_path, KERAS_BACKEND=backend)
        assert completed.returncode == 1
        assert completed.stderr.splitlines()[-1] == f"ImportError: {message}"
    command = hide + "from keras_fourier.cli import main; sys.exit(main(['train']))"
    completed = _run(["-c", command], tmp_path, KERAS_BACKEND=backend)
    assert completed.returncode == 2
    assert completed.stderr.splitlines() == [f"keras-fourier: error: {message}"]
