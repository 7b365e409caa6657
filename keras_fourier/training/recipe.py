"""The training recipes as rows of a table, keras-free (the command line lists them).

:data:`RECIPES` holds one :class:`Recipe` per way the papers train:

* ``"deit"``: GFNet, HorNet and AFNO train as DeiT does: AdamW with weight
  decay 0.05, a linear warmup to the peak learning rate then a cosine decay
  (:func:`~keras_fourier.training.optimizer.warmup_cosine_schedule`),
  gradient clipping, label smoothing 0.1 and stochastic depth. Weight decay
  is not applied to norms, biases, LayerScale, position embeddings and
  Fourier filters
  (:func:`~keras_fourier.training.optimizer.no_weight_decay_variables`).
* ``"fnet_finetune"``: the official FNet fine-tuning (google-research
  ``f_net/configs/classification.py`` and ``run_classifier.py``): Adam
  (beta 0.9/0.999, epsilon 1e-6) with decoupled weight decay 0.01 on every
  parameter, learning rate 1e-5 warmed up linearly over the first 10% of
  the steps then decayed linearly to 0
  (:func:`~keras_fourier.training.optimizer.warmup_linear_schedule`),
  batch 64, 3 epochs, no gradient clipping, no label smoothing.

`keras-fourier train --recipe NAME` picks a row; every hyper-parameter left
unset takes the row's value (see `keras_fourier.training.TrainConfig`).
:mod:`keras_fourier.training.optimizer` builds the optimiser and schedules.
"""

from __future__ import annotations

import dataclasses
import math

from keras_fourier.validation import check_choice

SCHEDULES = ("cosine", "linear")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One training recipe: the defaults of the `TrainConfig` hyper-parameters, and more.

    Attributes:
        name: its key in :data:`RECIPES`.
        source: where its numbers come from.
        epochs: training epochs.
        batch_size: global batch size.
        learning_rate: peak learning rate.
        min_learning_rate: learning rate at the end of the decay.
        warmup_epochs: epochs of linear warmup, or None to use `warmup_fraction`.
        warmup_fraction: share of all steps warmed up (when `warmup_epochs` is
            None); the warmup takes ``int(warmup_fraction * total_steps)``
            steps, as the official FNet code counts them.
        schedule: the decay after the warmup: "cosine"
            (:func:`warmup_cosine_schedule`) or "linear"
            (:func:`warmup_linear_schedule`).
        weight_decay: decoupled (AdamW) weight decay.
        decay_all: decay every variable (True) or exempt norms, biases,
            position embeddings and Fourier filters (False,
            :func:`no_weight_decay_variables`).
        clipnorm: global gradient-norm clip, or None for none.
        label_smoothing: label smoothing of the cross-entropy.
        epsilon: Adam's epsilon. Keras adds it to the square root of the
            uncorrected second moment, Flax (the official FNet code) to that of
            the bias-corrected one: the same update up to an epsilon scaled
            by ``sqrt(1 - beta_2**t)``, a difference that fades within the
            first thousand steps.
        beta_1: Adam's first-moment decay.
        beta_2: Adam's second-moment decay.
    """

    name: str
    source: str
    epochs: int
    batch_size: int
    learning_rate: float
    min_learning_rate: float
    warmup_epochs: float | None
    warmup_fraction: float
    schedule: str
    weight_decay: float
    decay_all: bool
    clipnorm: float | None
    label_smoothing: float
    epsilon: float
    beta_1: float = 0.9
    beta_2: float = 0.999

    def warmup_steps(self, warmup_epochs: float | None, steps_per_epoch: int, epochs: int) -> int:
        """The warmup's optimizer steps, fewer than the run's.

        Args:
            warmup_epochs: the run's warmup in epochs, or None for the
                recipe's `warmup_fraction` of all steps.
            steps_per_epoch: optimizer steps per epoch.
            epochs: the run's epochs.

        Returns:
            ``round(warmup_epochs * steps_per_epoch)`` (cosine schedule) or its
            floor (linear schedule, as the official FNet code's ``int()``);
            with no `warmup_epochs`, ``int(warmup_fraction * total steps)``;
            at most ``total steps - 1``.

        Example:
            >>> RECIPES["fnet_finetune"].warmup_steps(None, 1052, 3)
            315
        """
        total = epochs * steps_per_epoch
        if warmup_epochs is None:
            steps = int(self.warmup_fraction * total)
        elif self.schedule == "linear":
            steps = math.floor(warmup_epochs * steps_per_epoch + 1e-9)
        else:
            steps = round(warmup_epochs * steps_per_epoch)
        return min(steps, total - 1)


RECIPES: dict[str, Recipe] = {
    "deit": Recipe(
        name="deit",
        source="DeiT (Touvron et al. 2021), as GFNet, HorNet and AFNO train",
        epochs=20,
        batch_size=64,
        learning_rate=3e-3,
        min_learning_rate=1e-5,
        warmup_epochs=2,
        warmup_fraction=0.0,
        schedule="cosine",
        weight_decay=0.05,
        decay_all=False,
        clipnorm=1.0,
        label_smoothing=0.1,
        epsilon=1e-7,
    ),
    "fnet_finetune": Recipe(
        name="fnet_finetune",
        source="google-research f_net/configs/classification.py and run_classifier.py",
        epochs=3,
        batch_size=64,
        learning_rate=1e-5,
        min_learning_rate=0.0,
        warmup_epochs=None,
        warmup_fraction=0.1,
        schedule="linear",
        weight_decay=0.01,
        decay_all=True,
        clipnorm=None,
        label_smoothing=0.0,
        epsilon=1e-6,
    ),
}
# The fields of TrainConfig whose None means "the recipe's value".
RECIPE_FIELDS = (
    "epochs",
    "batch_size",
    "learning_rate",
    "min_learning_rate",
    "warmup_epochs",
    "weight_decay",
    "clipnorm",
    "label_smoothing",
)


def get_recipe(name: str) -> Recipe:
    """The recipe `name` of :data:`RECIPES`.

    Raises:
        ValueError: an unknown name, listing the known ones.

    Example:
        >>> get_recipe("fnet_finetune").learning_rate
        1e-05
    """
    return RECIPES[check_choice("recipe", name, tuple(RECIPES))]
