"""Smaller first-hour paths of a user, run as the user runs them."""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).parents[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_rest_client_says_in_one_line_that_no_server_answers(tmp_path):
    image = tmp_path / "digit.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")  # only sent, never decoded by the client
    server = f"http://127.0.0.1:{_free_port()}"
    client = os.fspath(ROOT / "export" / "rest_client.py")
    completed = subprocess.run(
        [sys.executable, client, str(image), "--model", "gfnet_tiny", "--server", server],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 1
    (line,) = completed.stderr.splitlines()
    assert line.startswith(
        f"rest_client: error: no answer from {server}/v1/models/gfnet_tiny:predict ("
    )
    assert "is TF Serving running there?" in line


def test_bench_of_a_preset_name_measures_the_model_that_train_builds(tmp_path):
    import csv

    from keras_fourier.bench import named_model_size
    from keras_fourier.cli import main
    from keras_fourier.flop_count import flops
    from keras_fourier.training import create_model

    out = tmp_path / "bench"
    argv = ["bench", "gfnet_tiny", "--batch-size", "2", "--repeats", "1", "--no-train"]
    assert main([*argv, "--out", os.fspath(out)]) == 0
    with open(out / "bench.csv") as file:
        (row,) = list(csv.DictReader(file))
    trained = create_model("gfnet_tiny", num_classes=10, image_size=16)  # train's defaults
    assert float(row["gflops"]) == round(flops(trained) / 1e9, 4)
    assert named_model_size("gfnet_tiny") == (16, 10)
    assert named_model_size("gfnet_ti") == (224, 1000)


def test_readme_test_command_installs_cpu_torch_first_and_ci_runs_it_verbatim():
    readme = (ROOT / "README.md").read_text()
    test_command = re.search(r"```bash\n(.*?)```", readme, re.DOTALL)[1].splitlines()[1]
    steps = test_command.split(" && ")
    assert steps[0].startswith('pip install "torch==') and steps[0].endswith(
        " --index-url https://download.pytorch.org/whl/cpu"
    )
    assert steps[1] == 'pip install -e ".[test]"'
    # The pinned CPU build meets the test extra's torch requirement: pip keeps it.
    pinned = re.search(r'"torch==([\d.]+)"', steps[0])[1]
    test_extra = re.search(
        r"^test = \[\n(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S
    )
    requirements = map(Requirement, re.findall(r'^    "([^"]+)",', test_extra[1], re.M))
    (torch,) = [requirement for requirement in requirements if requirement.name == "torch"]
    assert torch.specifier.contains(pinned)
    assert test_command + " \\" in (ROOT / ".ci" / "run").read_text().splitlines()
