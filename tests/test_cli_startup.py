"""The command answers --help and argument errors without loading a framework; the API still loads.

`keras-fourier --help`, each subcommand's help and argument errors are
parsed from keras-free tables (`keras_fourier.settings`,
`keras_fourier.models.names`, `keras_fourier.models.family`), so these
tests check, from inside the command's own process, that neither
TensorFlow nor Keras (nor JAX, PyTorch) was imported; and that the help
lists the names the library knows. ``import keras_fourier`` loads no
framework either, in any process; Keras still finds every layer for
`keras.saving.load_model`, whenever it loads.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import keras
import pytest

import keras_fourier
from keras_fourier import export, training
from keras_fourier.cli import build_parser
from keras_fourier.export import signatures
from keras_fourier.layers import spectral
from keras_fourier.models import catalog, family

pytestmark = pytest.mark.single_backend

ROOT = Path(__file__).parents[1]
FRAMEWORKS = ("tensorflow", "keras", "jax", "torch")
# The console script as a user runs it (sys.argv[0] == "keras-fourier"); reports the exit
# status and the frameworks the process imported, whatever main() did.
COMMAND = """
import json, sys
report, frameworks, *argv = sys.argv[1:]
sys.argv = ["keras-fourier", *argv]
status = None
try:
    from keras_fourier.cli import main
    status = main()
except SystemExit as exit:
    status = exit.code
finally:
    loaded = sorted({name.split(".")[0] for name in sys.modules} & set(frameworks.split(",")))
    with open(report, "w") as file:
        json.dump({"status": status, "loaded": loaded}, file)
"""


def _python(args, tmp_path, **env):
    environment = {**os.environ, "PYTHONPATH": os.fspath(ROOT), "COLUMNS": "100", **env}
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=300,
    )


def _command(argv, tmp_path):
    report = tmp_path / "report.json"
    completed = _python(["-c", COMMAND, os.fspath(report), ",".join(FRAMEWORKS), *argv], tmp_path)
    return completed, json.loads(report.read_text())


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        *(
            [name, "--help"]
            for name in ("train", "evaluate", "export", "flops", "bench", "predict")
        ),
    ],
)
def test_help_loads_no_framework(argv, tmp_path):
    completed, report = _command(argv, tmp_path)
    assert report == {"status": 0, "loaded": []}, completed.stderr
    assert completed.stdout.startswith(f"usage: keras-fourier {' '.join(argv[:-1])}".rstrip())


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--epochs", "x"], "argument --epochs: invalid int value: 'x'"),
        (["train", "--model", "gfnet_huge"], "argument --model: invalid choice: 'gfnet_huge'"),
        (["bench", "--precision", "fp8"], "argument --precision: expected one of"),
        (["export", "m", "--out", "x", "--quantize", "int4"], "argument --quantize: expected"),
        ([], "the following arguments are required: command"),
    ],
)
def test_argument_errors_load_no_framework(argv, message, tmp_path):
    completed, report = _command(argv, tmp_path)
    assert report == {"status": 2, "loaded": []}, completed.stderr
    assert message in completed.stderr.splitlines()[-1]


def test_python_m_help_imports_no_framework(tmp_path):
    completed = _python(
        ["-X", "importtime", "-m", "keras_fourier.cli", "train", "--help"], tmp_path
    )
    assert completed.returncode == 0, completed.stderr
    imported = {line.split("|")[-1].strip() for line in completed.stderr.splitlines()}
    assert "keras_fourier.cli.train" in imported
    assert not {name for name in imported if name.split(".")[0] in FRAMEWORKS}


def _help(name: str, capsys) -> str:
    """`keras-fourier NAME --help`, its whitespace collapsed (wrapping depends on the terminal)."""
    with pytest.raises(SystemExit):
        build_parser().parse_args([name, "--help"])
    return " ".join(capsys.readouterr().out.split())


def _choices(help_text: str, flag: str) -> tuple[str, ...]:
    """The {a,b,c} choices shown after `flag` in a usage text."""
    found = re.search(re.escape(flag) + r" \{([^}]*)\}", help_text)
    assert found, flag
    return tuple(found.group(1).split(","))


def _choices_of_format(help_text: str) -> tuple[str, ...]:
    """The formats that export's --format help lists."""
    found = re.search(r"--format FORMAT comma-separated: ([a-z_, ]*) \(default", help_text)
    assert found, help_text
    return tuple(found.group(1).split(", "))


def test_help_lists_the_names_the_library_knows(capsys):
    train = _help("train", capsys)
    names = re.search(r"--model MODEL one of: ([^(]*) \(or the builder name", train).group(1)
    assert names.split(", ") == catalog.model_names()
    assert _choices(train, "--mixer") == tuple(family.MIXERS)
    assert _choices(train, "--ffn") == tuple(family.FFNS)
    assert _choices(train, "--strategy") == training.STRATEGIES
    assert _choices(train, "--mixed-precision") == training.PRECISIONS
    for name in [*catalog.model_names(), *catalog.PUBLIC_NAMES]:
        assert build_parser().parse_args(["train", "--model", name]).model == name
    bench = _help("bench", capsys)
    assert f"comma-separated, of {', '.join(family.MIXERS)}" in bench
    assert set(build_parser().parse_args(["bench", "--scaling"]).mixers) == set(family.MIXERS)
    for impl in spectral.FFT_IMPLS:
        assert build_parser().parse_args(["bench", "--fft-impl", impl]).fft_impl == [impl]
    exported = _help("export", capsys)
    assert _choices_of_format(exported) == tuple(export.FORMATS)
    assert _choices(exported, "--output") == signatures.OUTPUTS
    quantizations = ["none" if name is None else name for name in export.QUANTIZATIONS]
    assert f"comma-separated: {quantizations[0]} (float32), {', '.join(quantizations[1:])}" in (
        exported
    )
    argv = ["export", "m", "--out", "x", "--quantize", ",".join(quantizations)]
    assert build_parser().parse_args(argv).quantize == quantizations


@pytest.mark.slow
def test_a_package_model_loads_after_import_and_in_the_command(tmp_path):
    model = keras_fourier.build_model(
        depths=1, dims=8, patch_size=8, input_shape=(16, 16, 3), classes=3
    )
    model.save(tmp_path / "tiny.keras")
    # Keras finds the package's classes by registered name, whether it loads before or after
    # keras_fourier, or inside TensorFlow's import; it imports no module a config names.
    for imports in ("keras, keras_fourier", "keras_fourier, keras", "keras_fourier, tensorflow"):
        load = (
            f"import {imports}, keras; model = keras.saving.load_model('tiny.keras'); "
            "print(type(model.get_layer('stage0_block0_mixer')).__module__)"
        )
        completed = _python(["-c", load], tmp_path)
        assert completed.returncode == 0, completed.stderr
        assert completed.stdout.split() == ["keras_fourier.layers.fourier"]
    completed = _python(["-m", "keras_fourier.cli", "flops", "tiny.keras"], tmp_path)
    assert completed.returncode == 0, completed.stderr
    expected = keras_fourier.flops(keras.saving.load_model(tmp_path / "tiny.keras"))
    assert f"({expected} multiply-adds per input)" in completed.stdout
