"""A run's settings and its task together: the task, the resolved settings, checks, identity.

:class:`~keras_fourier.training.config.TrainConfig` is data and imports no
task; a task (:mod:`keras_fourier.tasks`) reads the settings. This module
sits above both:

* `task_defaults`: the named task's model and data in place of defaults it does not take;
* `run_task`: the run's task, named by `TrainConfig.task` or told by the
  model and data (`keras_fourier.tasks.select_task`);
* `resolve_config`: the settings with the recipe's values in place of the
  unset hyper-parameters (the task picks the recipe of a run that names
  none);
* `validate_config`: every check, before anything is built or written;
* `run_identity`: what ``run.json`` records as the run's identity.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

from keras_fourier.data.augment import AugmentConfig
from keras_fourier.models.catalog import check_architecture, check_request, is_model_name
from keras_fourier.run_folder import resolve_model_file
from keras_fourier.settings import BAD_IMAGE_MODES
from keras_fourier.tasks import Task, all_tasks, get_task, select_task
from keras_fourier.training.config import TrainConfig, check_precision
from keras_fourier.training.recipe import RECIPE_FIELDS, RECIPES
from keras_fourier.training.rundir import normalize
from keras_fourier.training.strategy import check_strategy_name
from keras_fourier.validation import check_bool, check_choice, check_number, check_positive_int

# Settings that do not change what a run computes: they may differ when resuming.
NOT_IDENTITY = ("out", "verbose", "tensorboard", "strategy", "jit_compile", "data_dir")
# Settings added after runs were recorded, with the value those runs had: left out of the
# identity at that value, so that their folders still resume. (`task` is left out for the
# default task of the model's modality, which every run had before the field existed.)
LEGACY_VALUES: dict[str, Any] = {
    "recipe": "deit",
    "weights": None,
    "tokenizer": None,
    "padding": "fixed",
    "bucket_boundaries": None,
}
# Settings of one task's data, refused (when set) for a task that does not list them in `fields`.
TEXT_BATCH_FIELDS = ("padding", "bucket_boundaries")


def run_task(config: TrainConfig, names: Mapping[str, str] | None = None) -> Task:
    """The run's task: `config.task`, else the one the model name and data tell.

    A saved model (a `.keras` file or run folder) leaves it to the data.

    Args:
        config: the run's settings.
        names: {field: name} for messages, e.g. command-line flags. Default None.

    Raises:
        ValueError: an unknown task or model name, data that is not a source
            of the task or model, or data that several tasks take.

    Example:
        >>> run_task(TrainConfig(model="fnet_tiny", data="listops")).name
        'text_classification'
    """
    return select_task(
        config.data,
        model=None if config.saved_model else config.model,
        task=config.task,
        argument=(names or {}).get("task", "task"),
    )


def task_defaults(config: TrainConfig) -> TrainConfig:
    """`config` with the named task's own model and data where it left the defaults it cannot take.

    ``train(task="forecast")`` (``keras-fourier train --task forecast``)
    trains the forecast task's small model on its embedded data, not the
    default `gfnet_tiny` on the digits, which it does not take. With no task
    and no model named, data that only one task takes names that task
    (``train(data="navier_stokes")`` is a forecast run).

    Example:
        >>> task_defaults(TrainConfig(task="forecast")).model
        'fourcastnet_tiny'
        >>> task_defaults(TrainConfig(data="navier_stokes")).task
        'forecast'
    """
    defaults = TrainConfig()
    if config.task is None and config.model == defaults.model and not config.saved_model:
        accepting = [task for task in all_tasks() if task.accepts(config.data)]
        if len(accepting) == 1 and not accepting[0].accepts_model(config.model):
            config = dataclasses.replace(config, task=accepting[0].name)
    if config.task is None:
        return config
    task = get_task(config.task)
    changes = {}
    if (
        task.default_data is not None
        and config.data == defaults.data
        and not task.accepts(config.data)
    ):
        changes["data"] = task.default_data
    if (
        task.default_model is not None
        and config.model == defaults.model
        and not task.accepts_model(config.model)
    ):
        changes["model"] = task.default_model
    return dataclasses.replace(config, **changes) if changes else config


def resolve_config(config: TrainConfig, names: Mapping[str, str] | None = None) -> TrainConfig:
    """`config` with `recipe` and every hyper-parameter left None set from the recipe.

    The recipe is `config.recipe`, else its task's default ("fnet_finetune"
    for a text model with weights, else "deit") with the values its task
    replaces for the run's data (`Task.recipe_defaults`, e.g. the shorter
    default segmentation job). `clipnorm` 0 (no clipping)
    stays 0; `warmup_epochs` stays None for a recipe that warms up over a
    share of the steps ("fnet_finetune"). Resolving twice gives the same
    config.

    Returns:
        A new `TrainConfig`.

    Raises:
        ValueError: an unknown recipe, or the errors of `run_task`.

    Example:
        >>> resolve_config(TrainConfig()).learning_rate
        0.003
    """
    defaults: dict[str, Any] = {}
    if config.recipe is not None:
        name = check_choice("recipe", config.recipe, tuple(RECIPES))
    else:
        task = run_task(config, names)
        name = task.default_recipe(config)
        defaults = task.recipe_defaults(config)
    recipe = RECIPES[name]
    values = {
        field: defaults.get(field, getattr(recipe, field))
        if getattr(config, field) is None
        else getattr(config, field)
        for field in RECIPE_FIELDS
    }
    if values["clipnorm"] is None:
        values["clipnorm"] = 0.0
    return dataclasses.replace(config, recipe=recipe.name, **values)


def validate_config(config: TrainConfig, names: Mapping[str, str] | None = None) -> None:
    """Checks every setting before anything is built or written.

    Args:
        config: the run's settings.
        names: {field: name} used in the messages instead of the field
            names, e.g. the command-line flags. Default None.

    Raises:
        ValueError: naming the setting and the value, for an unknown
            model, task, strategy or mixed-precision policy, data that does
            not suit the model or task, architecture options of a non-preset
            model, an image size that is not a multiple of the model's
            stride, or a hyper-parameter out of range (learning rates finite
            and > 0, label smoothing and drop path in [0, 1), EMA momentum
            in (0, 1), counts positive, ...), an unknown recipe or
            tokenizer, `weights` with a saved model, or FNet weights that do
            not fit the model (its sizes, the sequence length, the
            tokenizer's vocabulary).

    Example:
        >>> validate_config(TrainConfig(learning_rate=float("nan")))
        Traceback (most recent call last):
        ValueError: `learning_rate` must be a finite number > 0. Received: learning_rate=nan
    """
    names = dict(names or {})

    def name(field: str) -> str:
        return names.get(field, field)

    check_choice(name("recipe"), config.recipe, (None, *RECIPES))
    if config.clipnorm is not None:  # 0 (no clipping) is resolved to 0, not to the recipe's
        check_number(name("clipnorm"), config.clipnorm, low=0)
    _check(resolve_config(config, names), name, names)


def _check(config: TrainConfig, name: Callable[[str], str], names: Mapping[str, str]) -> None:
    """The checks of `validate_config`, on a resolved config."""
    task = run_task(config, names)
    check_strategy_name(config.strategy)
    check_precision(config.mixed_precision)
    if config.saved_model:
        try:
            resolve_model_file(config.model)
        except FileNotFoundError as error:
            raise ValueError(
                f"`{name('model')}` must be a model name, a .keras file or a run folder. {error}"
            ) from None
        for field, what in (
            ("drop_path_rate", "keeps its own"),
            ("weights", "starts from its own weights"),
        ):
            if getattr(config, field) is not None:
                raise ValueError(
                    f"`{name(field)}` applies to model names; the saved model {config.model!r} "
                    f"{what}. Received: {name(field)}={getattr(config, field)!r}"
                )
    if config.weights is not None and (
        not isinstance(config.weights, (str, os.PathLike)) or not os.fspath(config.weights)
    ):
        raise ValueError(
            f"`{name('weights')}` must be a weights name or path. "
            f"Received: {name('weights')}={config.weights!r}"
        )
    check_architecture(config.model, config.architecture)
    for field in ("epochs", "batch_size", "sequence_length", "train_examples", "eval_examples"):
        check_positive_int(name(field), getattr(config, field))
    for field in ("steps_per_epoch", "image_size", "patch_size"):
        if getattr(config, field) is not None:
            check_positive_int(name(field), getattr(config, field))
    if isinstance(config.seed, bool) or not isinstance(config.seed, int) or config.seed < 0:
        seed = name("seed")
        raise ValueError(f"`{seed}` must be a non-negative int. Received: {seed}={config.seed!r}")
    check_number(name("learning_rate"), config.learning_rate, low=0, low_open=True)
    check_number(
        name("min_learning_rate"), config.min_learning_rate, low=0, high=config.learning_rate
    )
    if config.warmup_epochs is not None:
        check_number(name("warmup_epochs"), config.warmup_epochs, low=0)
    check_number(name("weight_decay"), config.weight_decay, low=0)
    check_number(name("label_smoothing"), config.label_smoothing, low=0, high=1, high_open=True)
    if config.drop_path_rate is not None:
        check_number(name("drop_path_rate"), config.drop_path_rate, low=0, high=1, high_open=True)
    check_number(
        name("ema_momentum"), config.ema_momentum, low=0, high=1, low_open=True, high_open=True
    )
    for field in ("use_ema", "deterministic", "tensorboard"):
        check_bool(name(field), getattr(config, field))
    check_choice(name("jit_compile"), config.jit_compile, (True, False, "auto"))
    check_choice(name("on_bad_image"), config.on_bad_image, BAD_IMAGE_MODES)
    check_choice(name("verbose"), config.verbose, ("auto", 0, 1, 2))
    if config.augment is not None and not isinstance(config.augment, AugmentConfig):
        raise ValueError(
            f"`{name('augment')}` must be None or an AugmentConfig. "
            f"Received: {name('augment')}={config.augment!r}"
        )
    if not isinstance(config.eval_split, str) or not config.eval_split:
        raise ValueError(
            f"`{name('eval_split')}` must be a split name. "
            f"Received: {name('eval_split')}={config.eval_split!r}"
        )
    if config.validation_split is not None and (
        not isinstance(config.validation_split, str) or not config.validation_split
    ):
        raise ValueError(
            f"`{name('validation_split')}` must be None or a split name. "
            f"Received: {name('validation_split')}={config.validation_split!r}"
        )
    for field in TEXT_BATCH_FIELDS:
        if field not in task.fields and getattr(config, field) != getattr(TrainConfig, field):
            raise ValueError(
                f"`{name(field)}` applies to text tasks; task {task.name!r} batches its own "
                f"data. Received: {name(field)}={getattr(config, field)!r}"
            )
    task.check(config, name)
    if not config.saved_model and is_model_name(config.model):
        size = task.model_options(config).get("image_size") if task.modality == "image" else None
        check_request(
            config.model,
            image_size=224 if size is None else size,
            sequence_length=config.sequence_length,
            batch_size=config.batch_size,
            names=names,
            **config.architecture,
        )


def run_identity(config: TrainConfig) -> dict[str, Any]:
    """The settings that define what the run computes, as recorded in ``run.json``.

    Returns:
        Every field of the resolved config (`resolve_config`) but those of
        `NOT_IDENTITY` and those of other tasks than the run's, resolved by
        its task (e.g. the image size of vision models, `augment` as a
        dict), as JSON values; `clipnorm` None for no clipping; `task` only
        when it is not the default task of its modality; the fields of
        `LEGACY_VALUES` left out at the value runs had before they existed.

    Example:
        >>> run_identity(TrainConfig())["image_size"]
        16
    """
    config = resolve_config(config)
    task = run_task(config)
    skipped = {*NOT_IDENTITY} | {
        field for other in all_tasks() if other is not task for field in other.fields
    } - set(task.fields)
    values = {
        field.name: getattr(config, field.name)
        for field in dataclasses.fields(config)
        if field.name not in skipped
    }
    values["clipnorm"] = values["clipnorm"] or None
    values["task"] = None if task.default else task.name
    values = task.identity(config, values)
    for field, legacy in {**LEGACY_VALUES, "task": None}.items():
        if values.get(field, legacy) == legacy:
            values.pop(field, None)
    return normalize(values)
