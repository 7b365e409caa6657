"""The one harness every task of `keras_fourier.tasks` goes through.

`run_task_checks(task, config)` runs, for a registered task and a tiny run
of it (a small model, a few small batches of its own data pipeline):

* registration: `get_task(task.name)` is the task, it takes the run's data
  and model, `select_task` with its name returns it, and a run of a
  non-default task records the task in its identity;
* its pipelines: the training and validation batches of `datasets`, and the
  model that `model_options` builds, whose outputs pass `check_outputs`;
  a model with one more class is refused in one line;
* its losses (training and evaluation) are finite scalars on a batch (a task without a
  loss object: the model's own `compute_loss` on its training outputs);
* its metrics are computed over the whole split: updated batch by batch
  (batches of 1, 2, 3, ... examples, so that a metric averaged per batch
  would differ) they give what they give on the whole split at once,
  `reset_state` brings back the value of a new metric, and accumulating
  again gives the same value;
* its selection metric is among its metrics, in training and evaluation,
  with mode "max" or "min";
* `evaluate` scores the model through the public call and returns "loss"
  and every metric, finite (beyond them only the task's breakdown, keys with a "/", which
  its details lines show, and the loss's parts of a model that computes its own loss);
  the summary lines read ``test_<name>=<value>`` with 4 decimals, the last one the task's
  main result;
* what it stores in model.keras (`labels`) is JSON, and with it `predict`
  shows (or writes) a prediction for every input given.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_fourier.data.text import select_model_inputs
from keras_fourier.tasks import PredictRequest, Task, get_task, select_task
from keras_fourier.training import TrainConfig, evaluate, resolve_config, run_identity
from keras_fourier.training.plan import validate_config

SUMMARY_LINE = re.compile(r"test_\w+=-?\d+\.\d{4}")


def _models(task: Task, config: TrainConfig, num_classes: int) -> tuple[keras.Model, keras.Model]:
    """The model a run trains (`build_model`) and the one it keeps (`inference_model`)."""
    keras.utils.set_random_seed(config.seed)
    trained = task.build_model(config, num_classes)
    return trained, task.inference_model(trained)


def _numpy(structure):
    """Tensors (or a dict of them) as NumPy arrays."""
    return keras.tree.map_structure(keras.ops.convert_to_numpy, structure)


def _concatenate(parts):
    """Batches (arrays or dicts of arrays) concatenated along the batch axis."""
    return keras.tree.map_structure(lambda *arrays: np.concatenate(arrays), *parts)


def _batches(model: keras.Model, dataset: tf.data.Dataset) -> list[tuple]:
    """(inputs, targets, predictions) of the first batch of `dataset`, as NumPy arrays."""
    inputs, targets = next(iter(select_model_inputs(dataset, model)))
    return [(inputs, _numpy(targets), _numpy(model(inputs, training=False)))]


def _uneven_batches(model: keras.Model, dataset: tf.data.Dataset) -> list[tuple]:
    """(targets, predictions) of the whole of `dataset` in batches of 1, 2, 3, ... examples."""
    batches = list(select_model_inputs(dataset, model))
    inputs = tf.nest.map_structure(lambda *parts: tf.concat(parts, 0), *(x for x, _ in batches))
    targets = _concatenate([_numpy(y) for _, y in batches])
    count = len(keras.tree.flatten(targets)[0])
    pairs, start, size = [], 0, 1
    while start < count:
        end = min(start + size, count)
        chunk = tf.nest.map_structure(lambda x, a=start, b=end: x[a:b], inputs)
        predictions = _numpy(model(chunk, training=False))
        pairs.append(
            (keras.tree.map_structure(lambda y, a=start, b=end: y[a:b], targets), predictions)
        )
        start, size = end, size + 1
    return pairs


def _result(metric: keras.metrics.Metric) -> float:
    return float(keras.ops.convert_to_numpy(metric.result()))


def check_registration(task: Task, config: TrainConfig) -> None:
    assert get_task(task.name) is task
    assert task.accepts(config.data), config.data
    assert task.accepts_model(config.model), config.model
    assert select_task(config.data, model=config.model, task=task.name) is task
    validate_config(config)
    identity = run_identity(config)
    assert identity.get("task") == (None if task.default else task.name)


def check_outputs_and_losses(task: Task, config: TrainConfig) -> tuple:
    """The run's data and models: outputs checked, losses finite on a training batch."""
    data = task.datasets(config)
    trained, model = _models(task, config, data.num_classes)
    task.check_outputs(model, data.num_classes, f"data {config.data!r}")
    other = _models(task, config, data.num_classes + 1)[1]
    with pytest.raises(ValueError, match=other.name) as refused:
        task.check_outputs(other, data.num_classes, "data")
    assert "\n" not in str(refused.value)
    (inputs, targets, predictions), *_ = _batches(trained, data.train)
    for loss in (task.loss(config), task.loss()):
        if loss is None:  # the model computes its loss itself, from its training outputs
            outputs = trained(inputs, training=True)
            value = trained.compute_loss(x=inputs, y=targets, y_pred=outputs, training=True)
        else:
            value = loss(targets, predictions)
        value = float(keras.ops.convert_to_numpy(value))
        assert math.isfinite(value), (loss, value)
    return trained, model, data


def check_whole_split_metrics(task: Task, trained: keras.Model, model: keras.Model, data) -> None:
    """Training metrics on the trained model's outputs, evaluation metrics on the kept one's."""
    for training, scored in ((False, model), (True, trained)):
        pairs = _uneven_batches(scored, data.validation)
        assert len(pairs) > 2, "the split is too small"
        whole_targets = _concatenate([targets for targets, _ in pairs])
        whole_predictions = _concatenate([predictions for _, predictions in pairs])
        metrics = [task.metrics(data.num_classes, training=training) for _ in range(3)]
        names = [metric.name for metric in metrics[0]]
        assert task.selection_metric in names, (task.selection_metric, names)
        for metric, fresh, whole in zip(*metrics, strict=True):
            for targets, predictions in pairs:
                metric.update_state(targets, predictions)
            accumulated = _result(metric)
            whole.update_state(whole_targets, whole_predictions)
            np.testing.assert_allclose(accumulated, _result(whole), rtol=1e-5, atol=1e-6)
            metric.reset_state()
            np.testing.assert_allclose(_result(metric), _result(fresh), rtol=0, atol=0)
            for targets, predictions in pairs:
                metric.update_state(targets, predictions)
            np.testing.assert_allclose(_result(metric), accumulated, rtol=1e-6, atol=1e-7)
    assert task.selection_mode in ("max", "min")
    assert task.monitor == f"val_{task.selection_metric}"


def check_evaluate_and_summary(task: Task, config: TrainConfig, model: keras.Model) -> None:
    metrics = evaluate(
        model,
        config.data,
        split=config.eval_split,
        batch_size=config.batch_size,
        eval_examples=config.eval_examples,
        task=task.name,
        labels=task.labels(config),
    )
    num_classes = task.num_classes(config.data, config.data_dir)
    expected = {"loss", *(metric.name for metric in task.metrics(num_classes))}
    # Beyond them, only the task's breakdown (keys with a "/"), shown by its details lines, and
    # a model that computes its own loss may log the loss's parts (its own metrics).
    named = {key for key in metrics if "/" not in key}
    own = {metric.name for metric in model.metrics} if task.loss() is None else set()
    assert expected <= named <= expected | own, (metrics, own)
    assert all(math.isfinite(value) for value in metrics.values()), metrics
    lines = task.summary(metrics)
    assert lines, "no summary line"
    for line in lines:
        assert SUMMARY_LINE.fullmatch(line), line
    details = task.details(metrics)
    assert all(isinstance(line, str) and "\n" not in line for line in details), details
    assert bool(details) == any("/" in key for key in metrics), (details, metrics)
    assert json.loads(json.dumps(task.labels(config))) == task.labels(config)


def check_predict(task: Task, config: TrainConfig, model: keras.Model, inputs, out: str) -> None:
    labels = json.loads(json.dumps(task.labels(config)))  # as model.keras gives it back
    lines = task.predict(model, PredictRequest(inputs, labels, top=2, out=out))
    assert lines and all(isinstance(line, str) for line in lines), lines
    printed = "\n".join(lines)
    for given in inputs:
        assert given in printed or repr(given) in printed, (given, printed)


def run_task_checks(task: Task, config: TrainConfig, predict_inputs, out: str) -> None:
    """Every check above, for `task` on the tiny run `config` (its recipe is resolved here).

    Args:
        task: a registered task.
        config: a tiny run of it.
        predict_inputs: inputs of `Task.predict` (image files, texts).
        out: an empty folder for the files a prediction writes.
    """
    config = resolve_config(dataclasses.replace(config, task=task.name))
    check_registration(task, config)
    trained, model, data = check_outputs_and_losses(task, config)
    check_whole_split_metrics(task, trained, model, data)
    check_evaluate_and_summary(task, config, model)
    check_predict(task, config, model, predict_inputs, out)
