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
"""

from keras_fourier.models.catalog import (
    TEXT_PRESETS,
    VISION_PRESETS,
    create_model,
    create_pretrained_model,
    is_text_model,
    model_names,
    vision_stride,
)
from keras_fourier.run_folder import RunFolder, read_history, resolve_model_file
from keras_fourier.training.callbacks import (
    EpochBackup,
    ModelCheckpoint,
    NonFiniteLossError,
    ResumableCSVLogger,
    StopOnNonFiniteLoss,
)
from keras_fourier.training.config import TrainConfig
from keras_fourier.training.plan import resolve_config, run_identity, run_task, validate_config
from keras_fourier.training.recipe import (
    PRECISIONS,
    RECIPES,
    Recipe,
    WarmupLinearDecay,
    create_optimizer,
    no_weight_decay_variables,
    warmup_cosine_schedule,
    warmup_linear_schedule,
)
from keras_fourier.training.rundir import RunConfigError, RunFolderBusyError, RunLock
from keras_fourier.training.strategy import STRATEGIES, get_strategy, worker_id
from keras_fourier.training.tasks import task_for_data
from keras_fourier.training.trainer import TrainResult, evaluate, train

__all__ = [
    "PRECISIONS",
    "RECIPES",
    "STRATEGIES",
    "TEXT_PRESETS",
    "VISION_PRESETS",
    "EpochBackup",
    "ModelCheckpoint",
    "NonFiniteLossError",
    "Recipe",
    "ResumableCSVLogger",
    "RunConfigError",
    "RunFolder",
    "RunFolderBusyError",
    "RunLock",
    "StopOnNonFiniteLoss",
    "TrainConfig",
    "TrainResult",
    "WarmupLinearDecay",
    "create_model",
    "create_optimizer",
    "create_pretrained_model",
    "evaluate",
    "get_strategy",
    "is_text_model",
    "model_names",
    "no_weight_decay_variables",
    "read_history",
    "resolve_config",
    "resolve_model_file",
    "run_identity",
    "run_task",
    "task_for_data",
    "train",
    "validate_config",
    "vision_stride",
    "warmup_cosine_schedule",
    "warmup_linear_schedule",
    "worker_id",
]
