"""Exports that never touch what they did not write: kills, a second export, models.config."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import keras
import pytest

from keras_fourier import cli
from keras_fourier.export import journal, litert
from keras_fourier.models import build_model
from tests.faults import dead_pid, digests

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
NAME = "tiny"

# Runs `keras-fourier export ARGS` and kills itself (SIGKILL) at the KILL_AT-th rename or
# exchange of the journaled commit; MODE "rename" disables the atomic exchange.
KILLER = """
import os, signal, sys
from keras_fourier import cli
from keras_fourier.export import journal
kill_at, mode = int(sys.argv[1]), sys.argv[2]
calls = []
def counted(function):
    def wrapper(*args):
        if len(calls) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        calls.append(args)
        return function(*args)
    return wrapper
journal._rename = counted(journal._rename)
journal._exchange = counted(journal._exchange if mode == "exchange" else lambda a, b: False)
sys.exit(cli.main(sys.argv[3:]))
"""


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    model = build_model(
        "global_filter", depths=1, dims=16, patch_size=4, input_shape=(16, 16, 3), classes=3
    )
    model.name = NAME
    path = tmp_path_factory.mktemp("model") / "tiny.keras"
    model.save(path)
    return str(path)


@pytest.fixture(scope="module")
def old_export(model_file, tmp_path_factory):
    """An export folder holding version 1 and the .tflite of the logits model."""
    out = tmp_path_factory.mktemp("old") / "models"
    assert cli.main(["export", model_file, "--out", str(out), "--output", "logits"]) == 0
    return out


def _hidden(folder) -> list[str]:
    return [
        os.path.join(root, name)
        for root, folders, names in os.walk(folder)
        for name in folders + names
        if name.startswith(".")
    ]


# The counted calls of `export --overwrite`: the rename of the SavedModel's own staging,
# then per output (version, then .tflite) an exchange and, in "rename" mode, two renames.
@pytest.mark.parametrize(
    ("existing", "mode", "formats", "kill_at", "after_kill"),
    [
        # the old version set aside, the new one not yet in place
        (True, "rename", "saved_model", 3, {"tiny/1/saved_model.pb": "missing"}),
        # the version swapped, the .tflite not yet
        (
            True,
            "exchange",
            "saved_model,tflite",
            2,
            {"tiny/1/saved_model.pb": "new", "tiny.tflite": "old"},
        ),
        # a new version placed, its .tflite not yet
        (
            False,
            "rename",
            "saved_model,tflite",
            2,
            {"tiny/1/saved_model.pb": "new", "tiny.tflite": "missing"},
        ),
    ],
)
def test_export_killed_during_its_commit_is_completed_by_the_rerun(
    model_file, old_export, tmp_path, capsys, existing, mode, formats, kill_at, after_kill
):
    out = tmp_path / "models"
    if existing:
        shutil.copytree(old_export, out)
    old = digests(out)
    argv = ["export", model_file, "--out", str(out), "--overwrite", "--format", formats]
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, str(kill_at), mode, *argv],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert _hidden(out)  # the killed commit's staging folder, with its journal
    killed_state = digests(out)
    for name, state in after_kill.items():
        if state == "missing":
            assert name not in killed_state
        else:
            assert name in killed_state and (killed_state[name] == old.get(name)) == (
                state == "old"
            )
    assert cli.main(argv) == 0
    assert "Completed the interrupted export of 'tiny'" in capsys.readouterr().out
    new = digests(out)
    assert sorted(new) == sorted(digests(old_export))
    for name in after_kill:
        assert new[name] != old.get(name)  # the new (probabilities) outputs, all of them
    assert _hidden(out) == []
    if after_kill["tiny/1/saved_model.pb"] == "missing":
        assert keras.layers.TFSMLayer(str(out / NAME / "1"), call_endpoint="serving_default")


def test_export_killed_before_its_commit_leaves_the_old_outputs_and_no_copies(
    model_file, old_export, tmp_path
):
    out = tmp_path / "models"
    shutil.copytree(old_export, out)
    old = digests(out)
    argv = ["export", model_file, "--out", str(out), "--overwrite"]
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, "0", "rename", *argv, "--format", "tflite"],
        env={**ENV},
        capture_output=True,
        timeout=300,
    )
    assert killed.returncode == -9
    # Killed at its first rename: the journal is written, nothing placed; a journal-less
    # staging folder (killed while converting) is rolled back.
    unjournaled = out / f".export-{dead_pid()}-abc"
    unjournaled.mkdir()
    (unjournaled / "tiny.tflite").write_bytes(b"half")
    completed = journal.recover(out)
    assert [entry["command"]["format"] for entry in completed] == [["tflite"]]
    assert digests(out)["tiny/1/saved_model.pb"] == old["tiny/1/saved_model.pb"]
    assert digests(out)["tiny.tflite"] != old["tiny.tflite"]
    assert _hidden(out) == []


def test_bench_on_a_tflite_of_a_killed_export_completes_it_first(
    model_file, old_export, tmp_path, capsys
):
    # Killed between setting the old .tflite aside and placing the new one: bench on that
    # .tflite completes the export before reading it.
    out = tmp_path / "models"
    shutil.copytree(old_export, out)
    old = digests(out)
    argv = ["export", model_file, "--out", str(out), "--overwrite", "--format", "tflite"]
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, "2", "rename", *argv],  # exchange, set aside, place
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (out / f"{NAME}.tflite").exists() and _hidden(out)
    bench = ["bench", str(out / f"{NAME}.tflite"), "--out", str(tmp_path / "bench")]
    assert cli.main([*bench, "--batch-size", "1", "--repeats", "1"]) == 0
    assert "predict_img_s" in capsys.readouterr().out
    new = digests(out)
    assert sorted(new) == sorted(old) and _hidden(out) == []
    assert new["tiny.tflite"] != old["tiny.tflite"]  # the killed export's (probabilities)
    assert new["tiny/1/saved_model.pb"] == old["tiny/1/saved_model.pb"]


def test_failed_export_keeps_what_a_second_export_finished_meanwhile(
    model_file, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "new" / "models"
    second = []

    def second_export_then_fail(max_diff, tolerance, converted):
        second.append(
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "keras_fourier.cli",
                    "export",
                    model_file,
                    "--out",
                    str(out),
                    "--version",
                    "2",
                    "--format",
                    "saved_model",
                ],
                env=ENV,
                capture_output=True,
                text=True,
                timeout=300,
            )
        )
        raise RuntimeError(f"The {converted} differs from Keras (injected)")

    monkeypatch.setattr(litert, "check_tolerance", second_export_then_fail)
    with pytest.raises(RuntimeError, match="injected"):
        cli.main(["export", model_file, "--out", str(out), "--format", "tflite"])
    assert second[0].returncode == 0, second[0].stderr[-2000:]
    assert sorted(os.listdir(out)) == ["models.config", NAME]
    assert os.listdir(out / NAME) == ["2"]
    assert (out / NAME / "2" / "saved_model.pb").stat().st_size > 1000

    # Nothing of its own survives a failure in a folder it created: the folders go too.
    lone = tmp_path / "lone" / "models"
    monkeypatch.setattr(
        litert, "check_tolerance", lambda *args: (_ for _ in ()).throw(RuntimeError("injected"))
    )
    with pytest.raises(RuntimeError):
        cli.main(["export", model_file, "--out", str(lone), "--format", "tflite"])
    assert not (tmp_path / "lone").exists()


OTHER = """# my models
model_config_list {
  config {
    name: 'resnet'
    base_path: "/models/resnet"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 3 versions: 4 } }
    version_labels { key: "stable" value: 3 }
    version_labels { key: "canary" value: 4 }
  }
}
"""


def test_models_config_is_merged_and_a_broken_one_refused(model_file, tmp_path, capsys):
    out = tmp_path / "models"
    out.mkdir()
    (out / "models.config").write_text(OTHER)
    argv = ["export", model_file, "--out", str(out), "--format", "saved_model"]
    assert cli.main(argv) == 0
    text = (out / "models.config").read_text()
    assert text.startswith(OTHER.rstrip("}\n"))
    assert text.count("config {") == 2 and 'name: "tiny"' in text
    assert 'base_path: "/models/tiny"' in text
    assert cli.main([*argv, "--version", "2"]) == 0
    assert (out / "models.config").read_text() == text  # its entry is kept, not doubled

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "models.config").write_text('model_config_list { config { name: "a" }\n')
    capsys.readouterr()
    assert cli.main(["export", model_file, "--out", str(broken)]) == 2
    error = capsys.readouterr().err
    assert "models.config" in error and "does not parse" in error
    assert os.listdir(broken) == ["models.config"]


def test_names_and_versions_that_would_leave_out_are_refused(tmp_path, capsys):
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs), name="..")
    path = tmp_path / "dots.keras"
    model.save(path)
    out = tmp_path / "box" / "out"
    for extra, message in [
        ([], "the model's name must be a model name"),
        (["--name", "../x"], "--name must be a model name"),
        (["--name", ".hidden"], "--name must be a model name"),
        (["--name", "ok", "--version", "99999999999999999999"], "--version=99999999999999999999"),
        (["--name", "ok", "--version", "-1"], "--version=-1"),
    ]:
        assert cli.main(["export", str(path), "--out", str(out), *extra]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "box").exists()
    assert os.listdir(tmp_path) == ["dots.keras"]
