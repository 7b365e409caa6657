"""The examples run as a user runs them: the notebook with nbconvert, each script with the
command its docstring shows (same cells, same arguments)."""

import ast
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NOTEBOOK = EXAMPLES / "train_and_finetune.ipynb"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))
TIMEOUT = 1500
PRECISION_VARIANTS = (
    "float32",
    "bf16",
    "bf16 + bf16 DFT",
    "int8 Keras",
    "TFLite float32",
    "TFLite int8",
)


def _documented_commands(script: pathlib.Path) -> list[list[str]]:
    """The `python examples/<script> ...` lines of a script's docstring."""
    docstring = ast.get_docstring(ast.parse(script.read_text()))
    prefix = f"python examples/{script.name}"
    return [
        shlex.split(line.strip())
        for line in docstring.splitlines()
        if line.strip().startswith(prefix)
    ]


def _run(command: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    completed = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, env=os.environ.copy()
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed


def test_every_example_is_a_notebook_or_a_script_with_a_documented_command():
    assert sorted(path.name for path in EXAMPLES.iterdir() if path.is_file()) == sorted(
        [NOTEBOOK.name, *(script.name for script in SCRIPTS)]
    )
    for script in SCRIPTS:
        assert _documented_commands(script), f"{script.name} shows no command to run it"
    notebook = json.loads(NOTEBOOK.read_text())
    assert notebook["nbformat"] == 4
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


@pytest.mark.slow
def test_notebook_runs_with_nbconvert_as_is(tmp_path):
    copy = tmp_path / NOTEBOOK.name
    copy.write_bytes(NOTEBOOK.read_bytes())
    # README's command, on a copy so that what the notebook writes (.keras file, runs/) lands
    # in tmp_path; the executed notebook goes to --output-dir, not beside the notebook.
    (command,) = re.findall(r"`(jupyter nbconvert [^`]+)`", (ROOT / "README.md").read_text())
    arguments = shlex.split(command)[1:]
    assert arguments[arguments.index("--execute") + 1] == "examples/train_and_finetune.ipynb"
    arguments[arguments.index("--execute") + 1] = copy.name
    output_dir = tmp_path / arguments[arguments.index("--output-dir") + 1]
    _run([sys.executable, "-m", "jupyter", *arguments], tmp_path)
    assert not (tmp_path / "train_and_finetune.nbconvert.ipynb").exists()
    (written,) = output_dir.glob("*.ipynb")
    executed = json.loads(written.read_text())
    outputs = [output for cell in executed["cells"] for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output["output_type"] == "error"]
    text = "".join("".join(output.get("text", "")) for output in outputs)
    accuracies = {
        stage: float(re.search(rf"{stage} accuracy on digits [\d-]+: ([\d.]+)", text).group(1))
        for stage in ("test", "new head only, test", "fine-tuned, test")
    }
    assert accuracies["test"] >= 0.9, text[-2000:]
    assert accuracies["fine-tuned, test"] >= 0.9, text[-2000:]
    assert 0.2 < accuracies["new head only, test"] <= 1.0
    difference = re.search(r"largest prediction difference after reloading: (\S+)", text)
    assert float(difference.group(1)) < 1e-5
    assert (tmp_path / "gfnet_tiny_digits_5_to_9.keras").exists()
    main_job = float(re.search(r"main job, test accuracy on digits 0-9: ([\d.]+)", text).group(1))
    assert main_job >= 0.9, text[-2000:]
    for picture in ("history.png", "filters.png"):
        png = (tmp_path / "runs" / "main_job" / picture).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 1000
    assert any("image/png" in output.get("data", {}) for output in outputs)


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=[script.name for script in SCRIPTS])
def test_script_runs_with_its_documented_command(script, tmp_path, request):
    if script.name == "precision_table.py":
        # As after README's first command: the main job's model is in runs/default, which the
        # table measures (its training when missing is the script's, not what is tested here).
        main_job = request.getfixturevalue("readme_main_job").folder / "runs" / "default"
        (tmp_path / "runs" / "default").mkdir(parents=True)
        shutil.copy(main_job / "model.keras", tmp_path / "runs" / "default" / "model.keras")
    for command in _documented_commands(script):
        # The same arguments; the script path made absolute so that outputs go to tmp_path.
        command = [sys.executable, str(EXAMPLES / script.name), *command[2:]]
        completed = _run(command, tmp_path)
        if script.name == "multi_worker.py":
            lines = completed.stdout.splitlines()
            assert lines and all(re.match(r"\[worker [01]\] ", line) for line in lines), lines[:5]
            finals = re.findall(
                r"^\[worker ([01])\] test_accuracy=([\d.]+)$", completed.stdout, re.MULTILINE
            )
            assert sorted(worker for worker, _ in finals) == ["0", "1"], completed.stdout[-3000:]
            finals = [accuracy for _, accuracy in finals]
            assert finals[0] == finals[1], completed.stdout[-3000:]
            assert float(finals[0]) > 0.2  # ten classes: above chance after two epochs
            assert (tmp_path / "runs" / "multi_worker" / "model.keras").exists()
        if script.name == "finetune_fnet.py":
            accuracy = re.search(
                r"^fine-tuned run \S+: test accuracy ([\d.]+) \(chance 0.333\)$",
                completed.stdout,
                re.MULTILINE,
            )
            assert accuracy and float(accuracy[1]) > 0.8, completed.stdout[-3000:]
            run = tmp_path / "runs" / "finetune_fnet" / "finetuned"
            assert (run / "model.keras").exists() and (run / "history.csv").exists()
            assert re.search(r"^  1\. +[\d.]+%  (food|sport|weather)$", completed.stdout, re.M)
        if script.name == "precision_table.py":
            rows = [line for line in completed.stdout.splitlines() if line.startswith("| default_")]
            cells = [[cell.strip() for cell in row.split("|")[1:-1]] for row in rows]
            assert [row[1] for row in cells] == list(PRECISION_VARIANTS), rows
            # The trained model's top-1 agreement of every variant with float32, on 16 images.
            assert all(float(row[6].rstrip("%")) >= 90 for row in cells[1:]), rows
            table = (tmp_path / "runs" / "precision_quick" / "table.md").read_text()
            assert all(row in table.splitlines() for row in rows), table
        if script.name == "segmentation_head.py":
            results = re.findall(
                r"^size (\d+x\d+): loss ([\d.]+) -> ([\d.]+), pixel accuracy ([\d.]+), "
                r"mIoU ([\d.]+)$",
                completed.stdout,
                re.MULTILINE,
            )
            assert [size for size, *_ in results] == ["64x64", "96x128"], completed.stdout
            for _, before, after, accuracy, miou in results:
                assert float(after) < float(before)
                assert float(accuracy) > 0.9  # background alone is about 0.8
                assert float(miou) > 0.4  # background alone is about 0.27
