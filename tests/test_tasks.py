"""Every registered task through the task harness, and how a run's task is chosen."""

import json

import numpy as np
import pytest
import tensorflow as tf

from keras_fourier.tasks import TASKS, get_task, select_task
from keras_fourier.tasks.base import run_splits
from keras_fourier.training import TrainConfig, run_identity, train, validate_config
from keras_fourier.training.plan import resolve_config, task_defaults
from tests.task_harness import run_task_checks

pytestmark = pytest.mark.single_backend


def _digits(folder):
    """Two PNG files; the tiny image run on the digits."""
    pixels = np.random.default_rng(0).integers(0, 255, (2, 12, 10, 3), dtype=np.uint8)
    paths = []
    for index, image in enumerate(pixels):
        path = folder / f"image{index}.png"
        path.write_bytes(tf.io.encode_png(image).numpy())
        paths.append(str(path))
    config = TrainConfig(model="gfnet_tiny", data="digits", dims=16, depths=1, batch_size=8)
    return config, paths


def _reviews(folder):
    """A csv: source of two classes; the tiny text run on it, and two texts."""
    for split, count in (("train", 16), ("dev", 12), ("test", 12)):
        rows = [f"the film was {'good' if i % 2 else 'bad'} {i},{i % 2}" for i in range(count)]
        (folder / f"{split}.csv").write_text("\n".join(["sentence,label", *rows]) + "\n")
    config = TrainConfig(model="fnet_tiny", data=f"csv:{folder}", sequence_length=16, batch_size=4)
    return config, ["a good film", "a bad one"]


def _digit_canvas(folder):
    """Two PNG files; a tiny dense run (AFNO backbone, UPerNet head) on the digit canvases."""
    config, paths = _digits(folder)
    config = TrainConfig(
        model="afno_tiny", data="digits", dims=16, depths=1, image_size=32, batch_size=50
    )
    return config, paths


def write_tiny_coco(folder) -> None:
    """A COCO export-layout folder (train/valid/test) of 32x40 images with one or two boxes."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 8), ("valid", 6), ("test", 6)):
        (folder / split).mkdir()
        images, annotations = [], []
        for index in range(count):
            name = f"{split}{index}.png"
            pixels = rng.integers(0, 255, (32, 40, 3), dtype=np.uint8)
            (folder / split / name).write_bytes(tf.io.encode_png(pixels).numpy())
            images.append({"id": index + 1, "file_name": name, "width": 40, "height": 32})
            for box in range(1 + index % 2):
                x, y = 2 + 12 * box, 3 + index
                annotations.append(
                    {
                        "id": len(annotations) + 1,
                        "image_id": index + 1,
                        "category_id": 1 + (index + box) % 2,
                        "bbox": [x, y, 14, 12],
                        "area": 168,
                        "iscrowd": 0,
                    }
                )
        categories = [{"id": 1, "name": "circle"}, {"id": 2, "name": "square"}]
        (folder / split / "_annotations.coco.json").write_text(
            json.dumps({"images": images, "annotations": annotations, "categories": categories})
        )


def write_tiny_instances(folder) -> None:
    """`write_tiny_coco`'s folder with a polygon mask per box: the box's left-top triangle."""
    write_tiny_coco(folder)
    for path in folder.glob("*/_annotations.coco.json"):
        document = json.loads(path.read_text())
        for annotation in document["annotations"]:
            x, y, w, h = annotation["bbox"]
            annotation["segmentation"] = [[x, y, x + w, y, x, y + h]]
        path.write_text(json.dumps(document))


def _instances(folder):
    """The tiny COCO folder with masks and a tiny Cascade Mask R-CNN run on it."""
    write_tiny_instances(folder)
    config = TrainConfig(
        model="gfnet_tiny", data=f"coco:{folder}", dims=16, depths=1, image_size=32, batch_size=4
    )
    return config, [str(folder / "test" / "test0.png"), str(folder / "test" / "test1.png")]


def _boxes(folder):
    """The tiny COCO folder and a tiny RetinaNet run on it."""
    write_tiny_coco(folder)
    config = TrainConfig(
        model="gfnet_tiny", data=f"coco:{folder}", dims=16, depths=1, image_size=32, batch_size=4
    )
    return config, [str(folder / "test" / "test0.png"), str(folder / "test" / "test1.png")]


def _fields(folder):
    """A fields: .npy source of 2 channels on an 8x16 grid, and two state files."""
    frames = np.random.default_rng(0).normal(size=(40, 2, 8, 16)).astype(np.float32)
    np.save(folder / "fields.npy", frames)
    paths = []
    for index in range(2):
        path = folder / f"state{index}.npy"
        np.save(path, frames[30 + index])
        paths.append(str(path))
    config = TrainConfig(
        model="fourcastnet_tiny",
        data=f"fields:{folder / 'fields.npy'}",
        task="forecast",
        dims=16,
        depths=1,
        batch_size=4,
    )
    return config, paths


# A tiny run of each registered task and inputs to predict: a new task adds its row.
TINY_RUNS = {
    "image_classification": _digits,
    "text_classification": _reviews,
    "segmentation": _digit_canvas,
    "inpainting": _digit_canvas,
    "forecast": _fields,
    "detection": _boxes,
    "instance_segmentation": _instances,
}


def test_every_task_has_a_tiny_run():
    assert set(TINY_RUNS) == set(TASKS)


@pytest.mark.parametrize("name", sorted(TASKS))
@pytest.mark.slow
def test_task_harness(name, tmp_path):
    (tmp_path / "data").mkdir()
    config, inputs = TINY_RUNS[name](tmp_path / "data")
    run_task_checks(get_task(name), config, inputs, str(tmp_path / "predictions"))


def test_listops_passes_the_harness_up_to_predict_which_needs_a_stored_tokenizer(tmp_path):
    config = TrainConfig(
        model="fnet_tiny",
        data="listops",
        sequence_length=16,
        train_examples=32,
        eval_examples=16,
        batch_size=8,
    )
    task = get_task("text_classification")
    with pytest.raises(ValueError, match="stores no tokenizer"):
        run_task_checks(task, config, ["[MAX 1 2]"], str(tmp_path))


def test_the_task_is_the_one_named_else_the_one_model_and_data_tell():
    assert select_task("digits", model="gfnet_tiny").name == "image_classification"
    assert select_task("csv:x", model="FNetBase").name == "text_classification"
    # A saved model: the data tells.
    assert select_task("listops").name == "text_classification"
    assert select_task("dir:x", task="image_classification").name == "image_classification"
    with pytest.raises(ValueError, match=r"Task 'image_classification' takes .*'listops'"):
        select_task("listops", task="image_classification")
    with pytest.raises(ValueError, match=r"^Model 'fnet_tiny' cannot be trained for task"):
        select_task("digits", model="fnet_tiny", task="image_classification")
    with pytest.raises(ValueError, match=r"Received: --task='segmentation_of_cats'"):
        select_task("digits", task="segmentation_of_cats", argument="--task")
    with pytest.raises(ValueError, match=r"Data 'foo' is not a source of model 'gfnet_tiny'"):
        select_task("foo", model="gfnet_tiny")


def test_data_that_one_task_takes_names_the_task_and_its_model_when_neither_is_named():
    forecast = task_defaults(TrainConfig(data="navier_stokes"))
    assert (forecast.task, forecast.model) == ("forecast", "fourcastnet_tiny")
    assert select_task(forecast.data, model=forecast.model).name == "forecast"
    # A named model or task, or data several tasks take, is left as given.
    assert task_defaults(TrainConfig(data="navier_stokes", model="gfnet_ti")).task is None
    assert task_defaults(TrainConfig(data="digits")) == TrainConfig(data="digits")
    assert task_defaults(TrainConfig(task="forecast")).data == "navier_stokes"


def test_the_default_forecast_job_has_its_own_recipe_only_where_left_unset():
    default = resolve_config(task_defaults(TrainConfig(task="forecast")))
    assert (default.recipe, default.epochs, default.batch_size) == ("deit", 40, 16)
    assert (default.learning_rate, default.weight_decay) == (1e-3, 0.0)
    assert default.clipnorm == 1.0  # the rest is the recipe's
    flagged = resolve_config(task_defaults(TrainConfig(task="forecast", batch_size=8)))
    assert (flagged.epochs, flagged.batch_size) == (40, 8)
    named = resolve_config(task_defaults(TrainConfig(task="forecast", recipe="deit")))
    assert (named.epochs, named.batch_size, named.learning_rate) == (20, 64, 3e-3)


def test_naming_the_default_task_is_the_same_run():
    named = TrainConfig(task="image_classification")
    validate_config(named)
    assert run_identity(named) == run_identity(TrainConfig())
    assert "task" not in run_identity(named)
    with pytest.raises(
        ValueError, match=r"not data 'digits'\. Received: --task=text_classification"
    ):
        validate_config(TrainConfig(task="text_classification"), {"task": "--task"})


@pytest.mark.parametrize("name", sorted(TASKS))
@pytest.mark.parametrize("validation", ["test", "train"])
def test_a_validation_split_that_is_another_split_is_refused_before_loading(
    name, validation, tmp_path
):
    (tmp_path / "data").mkdir()
    config, _ = TINY_RUNS[name](tmp_path / "data")
    out = tmp_path / "run"
    # The message names the argument as the caller does: the field, or the command's flag.
    flag = {"validation_split": "--validation-split"} if validation == "train" else None
    argument = "--validation-split" if flag else "validation_split"
    with pytest.raises(
        ValueError,
        match=rf"validation \('{validation}'\) and test \('test'\) splits .* must differ: set "
        rf"`{argument}` to another split\. Received: {argument}='{validation}'$",
    ):
        train(
            config,
            names=flag,
            task=name,
            validation_split=validation,
            out=str(out),
            epochs=1,
            steps_per_epoch=1,  # a run that is not refused is short
        )
    assert not out.exists()


def test_the_runs_validation_split_replaces_the_datas():
    assert run_splits(TrainConfig(), "train", "validation") == ("train", "validation")
    config = TrainConfig(validation_split="held_out")
    assert run_splits(config, "train", "validation") == ("train", "held_out")
    # A test split that is the data's train or validation split names `eval_split`.
    for split in ("train", "validation"):
        with pytest.raises(ValueError, match=rf"Received: --eval-split='{split}'$"):
            run_splits(
                TrainConfig(eval_split=split), "train", "validation", {"eval_split": "--eval-split"}
            )
