"""The examples: the training notebook runs end to end (tiny settings)."""

import json
import pathlib

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
NOTEBOOK = EXAMPLES / "train_and_finetune.ipynb"


def test_notebook_is_valid_nbformat_4_and_its_cells_run_in_order(tmp_path, monkeypatch):
    notebook = json.loads(NOTEBOOK.read_text())
    assert notebook["nbformat"] == 4
    assert {cell["cell_type"] for cell in notebook["cells"]} == {"markdown", "code"}
    for cell in notebook["cells"]:
        assert isinstance(cell["source"], list)
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
    monkeypatch.setenv("KERAS_FOURIER_QUICK", "1")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    code_cells = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    for index, cell in enumerate(code_cells):
        exec(compile("".join(cell["source"]), f"{NOTEBOOK.name}[{index}]", "exec"), namespace)
    for name in ("pretrain_accuracy", "probe_accuracy", "finetune_accuracy"):
        assert 0.0 <= namespace[name] <= 1.0
    assert float(namespace["difference"]) < 1e-5
    assert (tmp_path / "gfnet_tiny_digits_5_to_9.keras").exists()
