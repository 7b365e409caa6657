"""Every registered task through the task harness, and how a run's task is chosen."""

import pytest

from keras_fourier.tasks import TASKS, get_task, select_task
from keras_fourier.training import TrainConfig, run_identity, validate_config
from tests.task_harness import run_task_checks

pytestmark = pytest.mark.single_backend

# A tiny run of each registered task: a new task adds its row (test_every_task_has_a_tiny_run).
TINY_RUNS = {
    "image_classification": TrainConfig(
        model="gfnet_tiny", data="digits", dims=16, depths=1, batch_size=8
    ),
    "text_classification": TrainConfig(
        model="fnet_tiny",
        data="listops",
        sequence_length=16,
        train_examples=32,
        eval_examples=16,
        batch_size=8,
    ),
}


def test_every_task_has_a_tiny_run():
    assert set(TINY_RUNS) == set(TASKS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_task_harness(name):
    run_task_checks(get_task(name), TINY_RUNS[name])


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


def test_naming_the_default_task_is_the_same_run():
    named = TrainConfig(task="image_classification")
    validate_config(named)
    assert run_identity(named) == run_identity(TrainConfig())
    assert "task" not in run_identity(named)
    with pytest.raises(
        ValueError, match=r"not data 'digits'\. Received: --task=text_classification"
    ):
        validate_config(TrainConfig(task="text_classification"), {"task": "--task"})
