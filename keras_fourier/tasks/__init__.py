"""Tasks: what a model predicts, and everything of a run that follows from it.

:class:`~keras_fourier.tasks.base.Task` is the interface (see
:mod:`keras_fourier.tasks.base`); :data:`TASKS` is the registry, one row per
task: its name and the module that defines it as ``TASK``. A new task is a
new module of this package and one row here. The registry is keras-free
(the command line lists the names without loading TensorFlow); a task's
module is imported when the task is first asked for (`get_task`).

* `get_task(name)`: the task of a name;
* `select_task(data, model=..., task=...)`: the task of a run: the one
  named, else the default task of the model's modality (image or text
  classification) when it takes the data, else the only task that takes
  the data; several candidates and no name is an error asking for one.
"""

from __future__ import annotations

import importlib

from keras_fourier.tasks.base import EvaluationRequest, PredictRequest, Task, TaskData
from keras_fourier.validation import check_choice

# name -> the module that defines it as TASK.
TASKS: dict[str, str] = {
    "image_classification": "keras_fourier.tasks.image_classification",
    "text_classification": "keras_fourier.tasks.text_classification",
    "segmentation": "keras_fourier.tasks.segmentation",
    "inpainting": "keras_fourier.tasks.inpainting",
    "forecast": "keras_fourier.tasks.forecast",
    "detection": "keras_fourier.tasks.detection",
    "instance_segmentation": "keras_fourier.tasks.instance_segmentation",
}

__all__ = [
    "TASKS",
    "EvaluationRequest",
    "PredictRequest",
    "Task",
    "TaskData",
    "all_tasks",
    "get_task",
    "select_task",
]


def get_task(name: str | Task, argument: str = "task") -> Task:
    """The registered task `name` (a Task is returned as is).

    Args:
        name: a key of :data:`TASKS`, or a `Task`.
        argument: how to name the argument in the message. Default "task".

    Raises:
        ValueError: an unknown name, listing the known ones.

    Example:
        >>> get_task("text_classification").modality
        'text'
    """
    if isinstance(name, Task):
        return name
    check_choice(argument, name, tuple(TASKS))
    return importlib.import_module(TASKS[name]).TASK


def all_tasks() -> list[Task]:
    """Every registered task, in the order of :data:`TASKS`."""
    return [get_task(name) for name in TASKS]


def select_task(
    data: str, *, model: str | None = None, task: str | Task | None = None, argument: str = "task"
) -> Task:
    """The task of a run on `data`: the one named, else the one the model and data tell.

    Args:
        data: the data source.
        model: a model name (either spelling); None for a saved model (its
            data tells). Default None.
        task: a task name or `Task`; None: chosen from the model and data.
            Default None.
        argument: how to name `task` in messages (e.g. "--task"). Default "task".

    Returns:
        The named task; else the default task of the model's modality that
        takes `data`; else the only task that takes `data` (and the model).

    Raises:
        ValueError: an unknown task or model; a task that does not take the
            data or the model; no task that takes both; or several, naming
            them (pass `task`).

    Example:
        >>> select_task("listops", model="fnet_tiny").name
        'text_classification'
    """
    if task is not None:
        chosen = get_task(task, argument)
        if not chosen.accepts(data):
            raise ValueError(
                f"Task {chosen.name!r} takes {chosen.sources}, not data {data!r}. "
                f"Received: {argument}={chosen.name}"
            )
        if model is not None and not chosen.accepts_model(model):
            raise ValueError(
                f"Model {model!r} cannot be trained for task {chosen.name!r}. "
                f"Received: {argument}={chosen.name}"
            )
        return chosen
    tasks = [each for each in all_tasks() if model is None or each.accepts_model(model)]
    accepting = [each for each in tasks if each.accepts(data)]
    defaults = [each for each in accepting if each.default]
    if defaults:
        return defaults[0]
    if len(accepting) == 1:
        return accepting[0]
    if accepting:
        names = ", ".join(each.name for each in accepting)
        raise ValueError(
            f"Data {data!r} suits several tasks ({names}): choose one with `{argument}`."
        )
    sources = "; ".join(f"{each.name}: {each.sources}" for each in tasks)
    of = f"model {model!r}" if model is not None else "any task"
    raise ValueError(f"Data {data!r} is not a source of {of} ({sources}).")
