"""Test-wide settings: quiet TensorFlow, float32 policy, fixed seeds, one run per backend.

The suite runs once per Keras backend (``KERAS_BACKEND=tensorflow|jax|torch``).
Tests marked ``single_backend`` run only in the TensorFlow run and are
deselected, not skipped, under the other backends: TensorFlow by nature
(tf.data, strategies, SavedModel, TFLite, training and the CLI: every module
that does not mark itself ``pytestmark = pytest.mark.multi_backend``, plus
marked tests in those that do), shape-only checks that no backend can change
(parameter counts), and the cross-backend parity test, which drives JAX and
PyTorch in subprocesses itself.
"""

import dataclasses
import fcntl
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# JAX compiles every operation for each new shape, its random initializers too: on tiny test
# models most of the JAX run is compiling, not computing. For the tests only, XLA's CPU
# backend skips LLVM's optimisation passes (the same computation, compiled in half the time;
# TensorFlow's XLA-compiled harness checks too) and emits fusions with its LLVM IR emitters
# instead of the newer MLIR fusion emitters (compiling a random initializer of a new shape in
# 0.13 s instead of 0.21 s; the UPerNet HorNet model checks in 20 s instead of 33 s), and the
# xdist workers of a run and the JAX subprocesses of the parity test share one compilation
# cache, in a folder made for the run and removed after it.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
)
# pytest-xdist's workers share the machine's cores: each worker (and the commands it starts)
# gets its share of TensorFlow's compute threads, not all of them (two workers on two cores:
# one intra-op thread each, not two each spinning against the other's; test_export.py and
# test_models.py took 2:39 instead of 2:56 on such a machine).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))
_JAX_CACHE_MADE_HERE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _JAX_CACHE_MADE_HERE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="keras_fourier_jax_")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import keras  # noqa: E402 (after the environment above)
import pytest  # noqa: E402

from keras_fourier.layers import spectral  # noqa: E402


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not item.get_closest_marker("multi_backend"):
            item.add_marker(pytest.mark.single_backend)
    if keras.config.backend() == "tensorflow":
        return
    deselected = [item for item in items if item.get_closest_marker("single_backend")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("single_backend")]


def pytest_unconfigure(config):
    if _JAX_CACHE_MADE_HERE:
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def pytest_report_header(config):
    return f"keras backend: {keras.config.backend()}"


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    keras.config.set_dtype_policy("float32")
    spectral.set_dft_precision("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")
    spectral.set_dft_precision("float32")


@dataclasses.dataclass
class MainJob:
    """README's first command as a user runs it: its exit status, output and working folder."""

    returncode: int
    stdout: str
    stderr: str
    folder: pathlib.Path


@pytest.fixture(scope="session")
def readme_main_job(tmp_path_factory) -> MainJob:
    """`keras-fourier train` (no arguments) in a fresh folder, run once per test session.

    The README test checks its result and other tests use the model it trains. Under
    pytest-xdist the first worker that needs it runs it and the others wait on a file lock
    in the run's shared temporary folder (pytest-xdist's documented pattern).
    """
    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:  # also without xdist loaded (-p no:xdist)
        root = root.parent  # shared by the workers of this run, and by this run only
    folder = root / "readme_main_job"
    record = root / "readme_main_job.json"
    with open(root / "readme_main_job.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.exists():
            folder.mkdir()
            completed = subprocess.run(
                [sys.executable, "-m", "keras_fourier.cli", "train"],
                cwd=folder,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
                capture_output=True,
                text=True,
                timeout=600,
            )
            result = {key: getattr(completed, key) for key in ("returncode", "stdout", "stderr")}
            record.write_text(json.dumps(result))
    return MainJob(**json.loads(record.read_text()), folder=folder)


@pytest.fixture(scope="session")
def gfnet_ti_pth() -> bytes:
    """An official-layout gfnet-ti.pth (12 blocks of width 256, a 2x2 token grid), as bytes."""
    import io

    import torch

    from tests.test_checkpoints import gfnet_state, tensors

    buffer = io.BytesIO()
    torch.save({"model": tensors(gfnet_state((256,), (12,), 16, 2))}, buffer)
    return buffer.getvalue()


@pytest.fixture
def terminal_sigint():
    """SIGINT as a terminal's Ctrl-C finds it (Python's KeyboardInterrupt) during the test.

    A suite started as a background job (``cmd &`` without job control) starts with SIGINT
    ignored, which the CLI keeps ignored by design (as under ``nohup``); the tests of Ctrl-C
    need it handled, in this process and in the commands they start.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
