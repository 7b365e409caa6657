"""`TrainConfig`: every setting of a training run, and their validation in one place.

The settings that apply to one task only (image size and augmentation for
images, sequence length and example counts for ListOps) are declared by
their task (:mod:`keras_fourier.training.tasks`), which also checks them
and resolves them into the run's identity (``run.json``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from keras_fourier.data import AugmentConfig
from keras_fourier.models.catalog import (
    ARCHITECTURE_OPTIONS,
    VISION_PRESETS,
    canonical_name,
    check_architecture,
    is_model_name,
    vision_stride,
)
from keras_fourier.run_folder import resolve_model_file
from keras_fourier.settings import (
    BAD_IMAGE_MODES,
    RECIPE_FIELDS,
    RECIPES,
    Recipe,
    TrainSettings,
)
from keras_fourier.training.recipe import check_precision
from keras_fourier.training.rundir import normalize
from keras_fourier.training.strategy import check_strategy_name
from keras_fourier.training.tasks import TASKS, Task, task_for_data, task_for_model
from keras_fourier.validation import check_bool, check_choice, check_number, check_positive_int
from keras_fourier.weights.saved import load_keras_file

# Settings that do not change what a run computes: they may differ when resuming.
NOT_IDENTITY = ("out", "verbose", "tensorboard", "strategy", "jit_compile", "data_dir")
# Settings added after runs were recorded, with the value those runs had: left out of the
# identity at that value, so that their folders still resume.
LEGACY_VALUES: dict[str, Any] = {"recipe": "deit", "weights": None, "tokenizer": None}


@functools.lru_cache(maxsize=8)
def _input_size(model_file: str, modified: int) -> int:
    del modified  # part of the cache key: a rewritten file is read again
    shape = load_keras_file(model_file, compile=False).input_shape
    if not isinstance(shape, tuple) or len(shape) != 4 or shape[1] is None:
        raise ValueError(
            f"The saved model {model_file!r} does not take images of a fixed size. "
            f"Received: input_shape={shape}"
        )
    return shape[1]


def saved_input_size(model: str) -> int:
    """The input height of a saved image model (a `.keras` file or run folder).

    Raises:
        ValueError: not an image model of a fixed size, or a file that does not load.
    """
    model_file = resolve_model_file(model)
    return _input_size(model_file, os.stat(model_file).st_mtime_ns)


@dataclasses.dataclass
class TrainConfig(TrainSettings):
    """Everything `train` needs, and its validation; the defaults are the README's main job.

    The fields and their defaults are those of
    :class:`~keras_fourier.settings.TrainSettings` (keras-free, so that the
    command line shows them without loading TensorFlow): `gfnet_tiny` on the
    embedded digits with the papers' recipe.

    Example:
        >>> config = TrainConfig(model="afno_tiny", epochs=2, out="runs/afno")
        >>> config.resolved().batch_size
        64
    """

    @property
    def task(self) -> Task:
        """The run's task (`keras_fourier.training.tasks`): image or text classification.

        The model name's task; for a saved model (a `.keras` file or run
        folder), the data's.

        Raises:
            ValueError: an unknown model name.
        """
        if self.saved_model:
            return task_for_data(self.data)
        return task_for_model(self.model)

    @property
    def saved_model(self) -> bool:
        """Whether `model` is a saved model to start from (a `.keras` file or a run folder)."""
        return not is_model_name(self.model)

    @property
    def run_recipe(self) -> Recipe:
        """The recipe: `recipe`, else "fnet_finetune" for text models with weights, else "deit".

        Raises:
            ValueError: an unknown recipe name.

        Example:
            >>> TrainConfig(model="fnet_base", data="csv:x", weights="f_net_base").run_recipe.name
            'fnet_finetune'
        """
        if self.recipe is not None:
            return RECIPES[check_choice("recipe", self.recipe, tuple(RECIPES))]
        text = not self.saved_model and self.task.modality == "text"
        return RECIPES["fnet_finetune" if text and self.weights is not None else "deit"]

    def resolved(self) -> TrainConfig:
        """This config with `recipe` and every hyper-parameter left None set from the recipe.

        `clipnorm` 0 (no clipping) stays 0; `warmup_epochs` stays None for a
        recipe that warms up over a share of the steps ("fnet_finetune").
        Resolving twice gives the same config.

        Returns:
            A new `TrainConfig`.

        Example:
            >>> TrainConfig().resolved().learning_rate
            0.003
        """
        recipe = self.run_recipe
        values = {
            field: getattr(recipe, field) if getattr(self, field) is None else getattr(self, field)
            for field in RECIPE_FIELDS
        }
        if values["clipnorm"] is None:
            values["clipnorm"] = 0.0
        return dataclasses.replace(self, recipe=recipe.name, **values)

    @property
    def architecture(self) -> dict[str, Any]:
        """The `build_model` overrides that are set.

        Returns:
            {option: value} for the non-None fields among "mixer", "ffn",
            "depths", "dims" and "patch_size".

        Example:
            >>> TrainConfig(dims=32).architecture
            {'dims': 32}
        """
        return {
            key: getattr(self, key)
            for key in ARCHITECTURE_OPTIONS
            if getattr(self, key) is not None
        }

    def validate(self, names: Mapping[str, str] | None = None) -> None:
        """Checks every setting before anything is built or written.

        Args:
            names: {field: name} used in the messages instead of the field
                names, e.g. the command-line flags. Default None.

        Raises:
            ValueError: naming the setting and the value, for an unknown
                model, strategy or mixed-precision policy, data that does not
                suit the model, architecture options of a non-preset model,
                an image size that is not a multiple of the model's stride,
                or a hyper-parameter out of range (learning rates finite and
                > 0, label smoothing and drop path in [0, 1), EMA momentum
                in (0, 1), counts positive, ...), an unknown recipe or
                tokenizer, `weights` with a saved model, or FNet weights
                that do not fit the model (its sizes, the sequence length,
                the tokenizer's vocabulary).

        Example:
            >>> TrainConfig(learning_rate=float("nan")).validate()
            Traceback (most recent call last):
            ValueError: `learning_rate` must be a finite number > 0. Received: learning_rate=nan
        """
        names = dict(names or {})

        def name(field: str) -> str:
            return names.get(field, field)

        check_choice(name("recipe"), self.recipe, (None, *RECIPES))
        if self.clipnorm is not None:  # 0 (no clipping) is resolved to 0, not to the recipe's
            check_number(name("clipnorm"), self.clipnorm, low=0)
        self.resolved()._check(name)

    def _check(self, name: Callable[[str], str]) -> None:
        """The checks of `validate`, on a resolved config."""
        task = self.task
        check_strategy_name(self.strategy)
        check_precision(self.mixed_precision)
        if not task.accepts(self.data):
            raise ValueError(
                f"Model {self.model!r} is a {task.modality} model but data {self.data!r} is not "
                f"one of its sources ({task.sources})."
            )
        if self.saved_model:
            try:
                resolve_model_file(self.model)
            except FileNotFoundError as error:
                raise ValueError(
                    f"`{name('model')}` must be a model name, a .keras file or a run folder. "
                    f"{error}"
                ) from None
            if self.drop_path_rate is not None:
                raise ValueError(
                    f"`{name('drop_path_rate')}` applies to model names; the saved model "
                    f"{self.model!r} keeps its own. Received: "
                    f"{name('drop_path_rate')}={self.drop_path_rate}"
                )
            if self.weights is not None:
                raise ValueError(
                    f"`{name('weights')}` applies to model names; the saved model "
                    f"{self.model!r} starts from its own weights. Received: "
                    f"{name('weights')}={self.weights!r}"
                )
        if self.weights is not None and (
            not isinstance(self.weights, (str, os.PathLike)) or not os.fspath(self.weights)
        ):
            raise ValueError(
                f"`{name('weights')}` must be a weights name or path. "
                f"Received: {name('weights')}={self.weights!r}"
            )
        check_architecture(self.model, self.architecture)
        for field in ("epochs", "batch_size", "sequence_length", "train_examples"):
            check_positive_int(name(field), getattr(self, field))
        check_positive_int(name("eval_examples"), self.eval_examples)
        for field in ("steps_per_epoch", "image_size", "patch_size"):
            if getattr(self, field) is not None:
                check_positive_int(name(field), getattr(self, field))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            seed = name("seed")
            raise ValueError(f"`{seed}` must be a non-negative int. Received: {seed}={self.seed!r}")
        check_number(name("learning_rate"), self.learning_rate, low=0, low_open=True)
        check_number(
            name("min_learning_rate"), self.min_learning_rate, low=0, high=self.learning_rate
        )
        if self.warmup_epochs is not None:
            check_number(name("warmup_epochs"), self.warmup_epochs, low=0)
        check_number(name("weight_decay"), self.weight_decay, low=0)
        check_number(name("label_smoothing"), self.label_smoothing, low=0, high=1, high_open=True)
        if self.drop_path_rate is not None:
            check_number(name("drop_path_rate"), self.drop_path_rate, low=0, high=1, high_open=True)
        check_number(
            name("ema_momentum"), self.ema_momentum, low=0, high=1, low_open=True, high_open=True
        )
        for field in ("use_ema", "deterministic", "tensorboard"):
            check_bool(name(field), getattr(self, field))
        check_choice(name("jit_compile"), self.jit_compile, (True, False, "auto"))
        check_choice(name("on_bad_image"), self.on_bad_image, BAD_IMAGE_MODES)
        check_choice(name("verbose"), self.verbose, ("auto", 0, 1, 2))
        if self.augment is not None and not isinstance(self.augment, AugmentConfig):
            raise ValueError(
                f"`{name('augment')}` must be None or an AugmentConfig. "
                f"Received: {name('augment')}={self.augment!r}"
            )
        if not isinstance(self.eval_split, str) or not self.eval_split:
            raise ValueError(
                f"`{name('eval_split')}` must be a split name. "
                f"Received: {name('eval_split')}={self.eval_split!r}"
            )
        if self.validation_split is not None and (
            not isinstance(self.validation_split, str) or not self.validation_split
        ):
            raise ValueError(
                f"`{name('validation_split')}` must be None or a split name. "
                f"Received: {name('validation_split')}={self.validation_split!r}"
            )
        task.check(self, name)

    def identity(self) -> dict[str, Any]:
        """The settings that define what the run computes, as recorded in ``run.json``.

        Returns:
            Every field of the `resolved` config but those of `NOT_IDENTITY`
            and those of other tasks than the model's (see
            `keras_fourier.training.tasks`), resolved by its task (e.g. the
            image size of vision models, `augment` as a dict), as JSON
            values; `clipnorm` None for no clipping; the fields of
            `LEGACY_VALUES` left out at the value runs had before they
            existed.

        Example:
            >>> TrainConfig().identity()["image_size"]
            16
        """
        config = self.resolved()
        task = config.task
        skipped = {*NOT_IDENTITY} | {
            field for other in TASKS if other is not task for field in other.fields
        } - set(task.fields)
        values = {
            field.name: getattr(config, field.name)
            for field in dataclasses.fields(config)
            if field.name not in skipped
        }
        values["clipnorm"] = values["clipnorm"] or None
        values = task.identity(config, values)
        for field, legacy in LEGACY_VALUES.items():
            if values.get(field, legacy) == legacy:
                values.pop(field, None)
        return normalize(values)

    def resolved_image_size(self) -> int:
        """`image_size`, or its default for the model and data.

        Returns:
            The image size: `image_size` if set, else the input size of a
            saved model, else the smallest multiple of the model's stride
            that is at least 16 for "digits" (8x8 images), 32 for presets
            and 224 for the named models.

        Example:
            >>> TrainConfig(model="gfnet_h_ti").resolved_image_size()
            32
        """
        if self.image_size is not None:
            return self.image_size
        if self.saved_model:
            return saved_input_size(self.model)
        stride = vision_stride(self.model, **self.architecture)
        preset = canonical_name(self.model) in VISION_PRESETS
        base = 16 if self.data == "digits" else 32 if preset else 224
        return stride * math.ceil(base / stride)
