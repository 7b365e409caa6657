"""The `Task` interface: everything of a run that depends on what the model predicts.

The trainer (:mod:`keras_fourier.training.trainer`), `evaluate` and the
`keras-fourier` commands never ask whether a model classifies images, texts
or pixels: they ask the run's :class:`Task`. A task owns

* its data: the sources it takes (`accepts`, `sources`), the settings of
  :class:`~keras_fourier.training.TrainConfig` that apply to it only
  (`fields`), their checks (`check`) and their entry in the run's identity
  (`identity`), the training and validation pipelines (`datasets`), the
  held-out pipeline of a trained model (`evaluation_data`), the class count
  of a source (`num_classes`);
* its model: the model a run builds (`build_model`, from the options of
  `model_options`), the model that ``model.keras`` keeps of the trained one
  (`inference_model`, e.g. without an auxiliary head), the models it takes
  (`accepts_model`), the header line of the input (`describe_input`), and
  the check that a model's outputs suit the data (`check_outputs`);
* its objective: the training and evaluation loss (`loss`), the metrics
  (`metrics`), the metric that selects ``best.keras`` and its mode
  (`selection_metric`, `selection_mode`), the default recipe
  (`default_recipe`) and the values of it that a run of its data replaces
  (`recipe_defaults`);
* its results: the last line(s) the commands print (`summary`, e.g.
  ``test_accuracy=0.9312``), the values that break a split's score down
  (`breakdown`, e.g. per-class IoU) and their lines (`details`), what
  ``model.keras`` stores to label the model's outputs later (`labels`), the
  check that a scored split means something (`check_scored`), and what
  `keras-fourier predict` shows or writes (`predict`).

Metrics are `keras.metrics.Metric` objects, so they are computed over a
whole split, not averaged per batch: `Model.evaluate` resets them once and
accumulates every batch into their state (a streaming confusion matrix
gives the mIoU of the split). `tests/task_harness.py` checks this, and the
rest of the contract, for every registered task.

A new task is a module of this package that defines ``TASK = MyTask()``
and one row of :data:`keras_fourier.tasks.TASKS`. This module is keras-free
(the types are for annotations only), so the registry and the command line
read the task names without loading TensorFlow.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from keras_fourier.models.names import modality

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from keras_fourier.training.config import TrainConfig


@dataclasses.dataclass
class TaskData:
    """The train and validation pipelines of a run, and a line per split for the header.

    Attributes:
        train: batches of (inputs, targets) to fit on.
        validation: batches evaluated after every epoch.
        num_classes: classes of the data (the model's outputs per position).
        splits: {"train"|"validation"|"test": description} for the header.
    """

    train: tf.data.Dataset
    validation: tf.data.Dataset
    num_classes: int
    splits: dict[str, str]


@dataclasses.dataclass(frozen=True)
class EvaluationRequest:
    """What `keras_fourier.evaluate` asks of a task: the held-out split to score.

    Attributes:
        data: the data source.
        split: the split to score.
        batch_size: batch size.
        data_dir: TFDS data directory; None for TFDS's default.
        eval_examples: held-out examples of generated data.
        on_bad_image: what to do with a corrupt image file.
        labels: what the model's run stored in its model.keras
            (`Task.labels`: class names, a text model's tokenizer record),
            with what the caller gave in their place (a tokenizer may then be
            an object or a name); {} for none.
    """

    data: str
    split: str
    batch_size: int
    data_dir: str | None
    eval_examples: int
    on_bad_image: str
    labels: Mapping[str, Any]


@dataclasses.dataclass
class PredictRequest:
    """What `keras-fourier predict` asks of a task.

    Attributes:
        inputs: image paths, or texts for a text task.
        record: what the model's run stored in its model.keras
            (`Task.labels`: class names, crop, tokenizer); {} for a model
            without one.
        top: classes shown per input (classification). Default 5.
        crop_pct: the centre crop of images; None: the stored one, else the
            task's default. Default None.
        out: folder for tasks whose predictions are files (label maps,
            images, forecasts). Default None.
        steps: autoregressive steps of a forecast. Default 1.
    """

    inputs: Sequence[str]
    record: dict[str, Any]
    top: int = 5
    crop_pct: float | None = None
    out: str | None = None
    steps: int = 1

    def __post_init__(self) -> None:
        """Refuses inputs whose outputs in `out` would overwrite each other (one line)."""
        if self.out is None:
            return
        seen: dict[str, str] = {}
        for path in self.inputs:
            stem = self.stem(path)
            if stem in seen:
                raise ValueError(
                    f"Inputs {seen[stem]!r} and {path!r} would write the same files "
                    f"{os.path.basename(stem)}_* in {self.out!r}: predict them into separate "
                    f"folders. Received: inputs={list(self.inputs)[:5]}"
                )
            seen[stem] = path

    def stem(self, path: str) -> str:
        """The path in `out` that input `path`'s output files begin with (its name, no extension).

        Example:
            >>> PredictRequest(["a/cat.png"], {}, out="masks").stem("a/cat.png")
            'masks/cat'
        """
        return os.path.join(self.out or "", os.path.splitext(os.path.basename(path))[0])


def run_splits(
    config: TrainConfig,
    train_split: str,
    validation_split: str,
    names: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """The run's train and validation splits: the data's, `config.validation_split` replacing its.

    Args:
        config: the run's settings (its data, eval split and validation split).
        train_split: the data's train split.
        validation_split: the data's validation split, replaced by
            `config.validation_split` when that is set.
        names: {field: name} for the message, e.g. the command-line flags.
            Default None: the field names.

    Returns:
        (train split, validation split).

    Raises:
        ValueError: the train, validation and test (`config.eval_split`)
            splits are not three different splits; it names
            `validation_split` when that is set and is another split, else
            `eval_split`, and its value.

    Example:
        >>> run_splits(TrainConfig(validation_split="held_out"), "train", "validation")
        ('train', 'held_out')
        >>> run_splits(TrainConfig(validation_split="test"), "train", "validation")
        Traceback (most recent call last):
        ValueError: The train ('train'), validation ('test') and test ('test') splits of data ...
        must differ: set `validation_split` to another split. Received: validation_split='test'
    """
    if config.validation_split is not None:
        validation_split = config.validation_split
    if len({train_split, validation_split, config.eval_split}) < 3:
        field = (
            "validation_split"
            if config.validation_split is not None
            and validation_split in (train_split, config.eval_split)
            else "eval_split"
        )
        name = dict(names or {}).get(field, field)
        raise ValueError(
            f"The train ({train_split!r}), validation ({validation_split!r}) and test "
            f"({config.eval_split!r}) splits of data {config.data!r} must differ: set `{name}` "
            f"to another split. Received: {name}={getattr(config, field)!r}"
        )
    return train_split, validation_split


def split_lines(
    config: TrainConfig,
    train_split: str,
    validation_split: str,
    count: Callable[[str, str, str | None], int | None],
) -> dict[str, str]:
    """The header's line of each split of an image run: its name and image count.

    Args:
        config: the run's settings (its data, data directory and test split).
        train_split: the run's train split.
        validation_split: the run's validation split.
        count: (data, split, data_dir) -> the split's images, or None when unknown.

    Returns:
        {"train"|"validation"|"test": "'<split>', <count> images"} ("?" for unknown).
    """
    lines = {}
    for role, split in (
        ("train", train_split),
        ("validation", validation_split),
        ("test", config.eval_split),
    ):
        images = count(config.data, split, config.data_dir)
        lines[role] = f"{split!r}, {'?' if images is None else f'{images:,}'} images"
    return lines


def image_input_size(model: keras.Model, data: str, task: str, default: int) -> int:
    """The input height of an image model scored on `data` by `task` (`default` for any size).

    Raises:
        ValueError: `model` does not take (B, H, W, C) images.
    """
    shape = model.input_shape
    if not isinstance(shape, tuple) or len(shape) != 4:
        raise ValueError(
            f"Model {model.name!r} does not take images but data {data!r} is a {task} source. "
            f"Received: input_shape={shape}"
        )
    return shape[1] or default


class Task(abc.ABC):
    """What a kind of model trains on, is scored with and predicts (see the module docstring).

    Attributes:
        name: the task's name, its key in :data:`keras_fourier.tasks.TASKS`.
        modality: what its models take, "image" or "text".
        sources: a description of the data sources it takes, for messages.
        fields: the `TrainConfig` fields that apply to this task only.
        default: the task of its modality when a run does not name one
            (image and text classification). Default False: runs name it
            (``--task``) unless it is the only task that takes their data.
        selection_metric: the validation metric that selects ``best.keras``
            (a key of `metrics`, logged as ``val_<name>``).
        selection_mode: "max" or "min" for `selection_metric`.
        default_model: the model of a run that names this task but no
            model (its `TrainConfig.model` left at the default, which the
            task does not take). Default None: the config's.
        default_data: the same for the data source. Default None.
        outputs: what the model's outputs per position are, for the run's
            header ("12 classes"). Default "classes".
    """

    name: str
    modality: str
    sources: str
    fields: tuple[str, ...] = ()
    default: bool = False
    selection_metric: str
    selection_mode: str = "max"
    default_model: str | None = None
    default_data: str | None = None
    outputs: str = "classes"

    @property
    def monitor(self) -> str:
        """The log key of the selection metric on the validation split."""
        return f"val_{self.selection_metric}"

    # Data.

    @abc.abstractmethod
    def accepts(self, data: str) -> bool:
        """Whether `data` names a source of this task."""

    def accepts_model(self, model: str) -> bool:
        """Whether model name `model` (either spelling) can be trained for this task.

        Raises:
            ValueError: an unknown model name.
        """
        return modality(model) == self.modality

    def check(self, config: TrainConfig, name: Callable[[str], str]) -> None:  # noqa: B027
        """Raises ValueError for settings of `config` that do not suit this task.

        Args:
            config: the run's settings (recipe resolved).
            name: field -> its name in messages (e.g. the command-line flag).
        """

    def identity(self, config: TrainConfig, values: dict[str, Any]) -> dict[str, Any]:
        """The run identity `values` with this task's fields resolved (e.g. defaults)."""
        del config
        return values

    def default_recipe(self, config: TrainConfig) -> str:
        """The recipe of a run that names none. Default "deit"."""
        del config
        return "deit"

    def recipe_defaults(self, config: TrainConfig) -> dict[str, Any]:
        """Hyper-parameters that replace the default recipe's for run `config` (e.g. a short job).

        They apply to a run that names no recipe, where it leaves them unset.
        Default: none.
        """
        del config
        return {}

    @abc.abstractmethod
    def num_classes(self, data: str, data_dir: str | None = None) -> int:
        """The class count of data source `data`."""

    def split_size(self, data: str, split: str, data_dir: str | None = None) -> int | None:
        """The examples of `split` of `data`, for messages; None when unknown. Default None."""
        del data, split, data_dir
        return None

    @abc.abstractmethod
    def datasets(self, config: TrainConfig, names: Mapping[str, str] | None = None) -> TaskData:
        """The training and validation pipelines of the run (checked before anything is written).

        Args:
            config: the run's settings.
            names: {field: name} for messages, e.g. the command-line flags.
                Default None: the field names.
        """

    @abc.abstractmethod
    def evaluation_data(self, model: keras.Model, request: EvaluationRequest) -> tf.data.Dataset:
        """The held-out batches of (inputs, targets) on which `model` is scored."""

    # Model.

    @abc.abstractmethod
    def model_options(self, config: TrainConfig) -> dict[str, Any]:
        """The input options of `create_model` for the run's model."""

    @abc.abstractmethod
    def build_model(self, config: TrainConfig, num_classes: int) -> keras.Model:
        """The model a run of a model name trains (with `config.weights`, from them).

        Called under the run's strategy scope and dtype policy. A run that
        starts from a saved model (`config.saved_model`) trains that model
        instead, after `check_outputs`.
        """

    def inference_model(self, model: keras.Model) -> keras.Model:
        """The model that ``model.keras`` keeps of the trained `model`, and that is evaluated.

        Default: `model` itself.
        """
        return model

    def scorer(self, model: keras.Model) -> keras.Model:
        """A model of `model`'s layers that `evaluate` compiles and scores (`model` left as is).

        Default: a functional model from its input to its output.
        """
        import keras

        return keras.Model(model.input, model.output, name=f"{model.name}_scorer")

    @abc.abstractmethod
    def describe_input(self, config: TrainConfig, model: keras.Model) -> str:
        """The model's input, for the run's header."""

    @abc.abstractmethod
    def check_outputs(self, model: keras.Model, num_classes: int | None, what: str) -> None:
        """Raises ValueError when `model`'s outputs do not suit data of `num_classes` classes.

        Args:
            model: the model.
            num_classes: the classes of the data; None: unknown (not checked).
            what: how to name the data in the message, e.g. "data 'digits'".
        """

    # Objective.

    @abc.abstractmethod
    def loss(self, config: TrainConfig | None = None) -> keras.losses.Loss | None:
        """The training loss of run `config`, or the evaluation loss when None.

        None: the model computes its loss itself (its ``compute_loss``, e.g.
        a two-stage detector's, from its training outputs and the targets).
        """

    @abc.abstractmethod
    def metrics(self, num_classes: int, *, training: bool = False) -> list[keras.metrics.Metric]:
        """New metric objects, accumulated over a whole split.

        Args:
            num_classes: the model's classes.
            training: the metrics compiled for training (they may add, e.g.,
                the loss without label smoothing). Default False: evaluation.
        """

    # Results.

    @abc.abstractmethod
    def summary(self, metrics: dict[str, float]) -> list[str]:
        """The line(s) a command prints last for test-split `metrics` (``name=value``)."""

    def breakdown(
        self, metrics: Sequence[keras.metrics.Metric], labels: Mapping[str, Any]
    ) -> dict[str, float]:
        """Values of a scored split beyond its metrics, from `metrics` after evaluation.

        Keys hold a "/" (e.g. ``iou/<class name>``); `keras_fourier.evaluate`
        returns them with the metrics and a finished run stores them in its
        ``run.json``; `details` prints them.

        Args:
            metrics: the objects of `metrics` that scored the split.
            labels: what the model's run stored (`labels`), e.g. class names.

        Returns:
            Default: nothing.
        """
        del metrics, labels
        return {}

    def details(self, metrics: dict[str, float]) -> list[str]:
        """Lines that show the `breakdown` values of `metrics`, before the summary. Default none."""
        del metrics
        return []

    def check_scored(self, metrics: Mapping[str, float], what: str) -> None:  # noqa: B027
        """Raises ValueError when the metrics of a scored split mean nothing. Default: never.

        Called by `evaluate` and after each training epoch (training and
        validation logs), e.g. a segmentation split without a labelled pixel.

        Args:
            metrics: the split's values, by metric name (no ``val_`` prefix).
            what: the split, for the message (e.g. "split 'test' of data 'digits'").
        """

    def labels(self, config: TrainConfig) -> dict[str, Any]:
        """What `predict` and `evaluate` need to label the run's outputs, stored in model.keras.

        Default: nothing.
        """
        del config
        return {}

    @abc.abstractmethod
    def predict(self, model: keras.Model, request: PredictRequest) -> list[str]:
        """Predicts `request.inputs`, writes what the task writes; returns the lines to print."""
