"""Training keras_fourier classifiers: strategies, the papers' recipe, resumable runs.

`train(TrainConfig(...))` builds a model by name (`model_names()`), from
pretrained weights with a fresh head when fine-tuning
(`create_pretrained_model`), inside a `tf.distribute` strategy
(`get_strategy`), optimises it with a recipe of `RECIPES` (AdamW, warmup
then cosine or linear decay, selective weight decay: `create_optimizer`,
`warmup_cosine_schedule`, `warmup_linear_schedule`), resumes
killed runs from crash-safe files (`EpochBackup`, `ModelCheckpoint`,
`ResumableCSVLogger`), holds its folder alone (`RunLock`), stops on a
non-finite loss (`StopOnNonFiniteLoss`) and evaluates the final model
(`evaluate`). What depends on the task (data, loss, metrics, the metric
that selects the best epoch) comes from the run's task
(:mod:`keras_fourier.tasks`, `run_task`); `validate_config`,
`resolve_config` and `run_identity` put the settings and the task together.
The `keras-fourier train` and `keras-fourier evaluate` commands are thin
wrappers around them.

The names load on first use (PEP 562, as in :mod:`keras_fourier.models`):
the settings of a run (:mod:`~keras_fourier.training.config`,
:mod:`~keras_fourier.training.recipe`) are keras-free, and the command line
reads them without loading TensorFlow.
"""

import importlib
from typing import Any

# The module of each public name.
_MODULES = {
    "TEXT_PRESETS": "keras_fourier.models.catalog",
    "VISION_PRESETS": "keras_fourier.models.catalog",
    "create_model": "keras_fourier.models.catalog",
    "create_pretrained_model": "keras_fourier.models.catalog",
    "is_text_model": "keras_fourier.models.catalog",
    "model_names": "keras_fourier.models.catalog",
    "vision_stride": "keras_fourier.models.catalog",
    "RunFolder": "keras_fourier.run_folder",
    "read_history": "keras_fourier.run_folder",
    "resolve_model_file": "keras_fourier.run_folder",
    "EpochBackup": "keras_fourier.training.callbacks",
    "ModelCheckpoint": "keras_fourier.training.callbacks",
    "NonFiniteLossError": "keras_fourier.training.callbacks",
    "ResumableCSVLogger": "keras_fourier.training.callbacks",
    "StopOnNonFiniteLoss": "keras_fourier.training.callbacks",
    "PRECISIONS": "keras_fourier.training.config",
    "STRATEGIES": "keras_fourier.training.config",
    "TrainConfig": "keras_fourier.training.config",
    "WarmupLinearDecay": "keras_fourier.training.optimizer",
    "create_optimizer": "keras_fourier.training.optimizer",
    "no_weight_decay_variables": "keras_fourier.training.optimizer",
    "warmup_cosine_schedule": "keras_fourier.training.optimizer",
    "warmup_linear_schedule": "keras_fourier.training.optimizer",
    "resolve_config": "keras_fourier.training.plan",
    "run_identity": "keras_fourier.training.plan",
    "run_task": "keras_fourier.training.plan",
    "validate_config": "keras_fourier.training.plan",
    "RECIPES": "keras_fourier.training.recipe",
    "Recipe": "keras_fourier.training.recipe",
    "RunConfigError": "keras_fourier.training.rundir",
    "RunFolderBusyError": "keras_fourier.training.rundir",
    "RunLock": "keras_fourier.training.rundir",
    "get_strategy": "keras_fourier.training.strategy",
    "worker_id": "keras_fourier.training.strategy",
    "TrainResult": "keras_fourier.training.trainer",
    "evaluate": "keras_fourier.training.trainer",
    "train": "keras_fourier.training.trainer",
}

__all__ = sorted(_MODULES)


def __getattr__(name: str) -> Any:
    """Loads a name (and Keras, for most) when it is first used."""
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, those not loaded yet included (completion in notebooks)."""
    return sorted({*globals(), *__all__})
