"""The optimiser and learning-rate schedules of the training recipes.

The recipes are the keras-free rows of
:data:`keras_fourier.training.recipe.RECIPES`, described there; this module
builds what they name: the AdamW optimiser with the papers' weight-decay
exemptions (:func:`create_optimizer`, :func:`no_weight_decay_variables`),
the warmup-then-cosine schedule of ``"deit"``
(:func:`warmup_cosine_schedule`) and the warmup-then-linear schedule of
``"fnet_finetune"`` (:func:`warmup_linear_schedule`).
"""

from __future__ import annotations

import keras

from keras_fourier.validation import check_number, check_positive_int

# Variables never decayed whatever their rank: learned position embeddings and the
# Fourier-domain weights (GFNet/HorNet filters, AFNO's complex block MLP).
NO_WEIGHT_DECAY_NAMES = ("pos_embed", "complex_weight", "w1", "b1", "w2", "b2")


def no_weight_decay_variables(model: keras.Model) -> list[keras.Variable]:
    """The trainable variables exempt from weight decay.

    Every variable of rank <= 1 (biases, LayerNorm gamma/beta, LayerScale
    gamma), position embeddings (``pos_embed``, and FNet's position table),
    and the Fourier-domain weights (``complex_weight``; AFNO's ``w1``,
    ``b1``, ``w2``, ``b2``).

    Args:
        model: a built model.

    Returns:
        The variables, in `model.trainable_variables` order.

    Example:
        >>> model = keras_fourier.build_model(depths=1, dims=16, patch_size=4,
        ...                                   input_shape=(16, 16, 3), classes=2)
        >>> sorted({v.name for v in no_weight_decay_variables(model)})
        ['beta', 'bias', 'complex_weight', 'gamma', 'pos_embed']
    """
    return [
        variable
        for variable in model.trainable_variables
        if len(variable.shape) <= 1
        or variable.name in NO_WEIGHT_DECAY_NAMES
        or variable.path.endswith("position/embeddings")
    ]


def warmup_cosine_schedule(
    learning_rate: float,
    total_steps: int,
    warmup_steps: int = 0,
    min_learning_rate: float = 1e-5,
) -> keras.optimizers.schedules.CosineDecay:
    """Linear warmup from 0 to `learning_rate`, then cosine decay to `min_learning_rate`.

    Args:
        learning_rate: peak learning rate, reached after `warmup_steps`.
        total_steps: length of the whole schedule in optimizer steps.
        warmup_steps: steps of the linear warmup, < `total_steps`. Default 0.
        min_learning_rate: learning rate at `total_steps`. Default 1e-5.

    Returns:
        A `keras.optimizers.schedules.CosineDecay` with warmup.

    Example:
        >>> schedule = warmup_cosine_schedule(1e-3, total_steps=100, warmup_steps=10)
        >>> [round(float(schedule(step)), 6) for step in (0, 5, 10, 100)]
        [0.0, 0.0005, 0.001, 1e-05]
    """
    check_positive_int("total_steps", total_steps)
    check_number("warmup_steps", warmup_steps, low=0, high=total_steps, high_open=True)
    check_number("learning_rate", learning_rate, low=0, low_open=True)
    check_number("min_learning_rate", min_learning_rate, low=0, high=learning_rate)
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0,
        decay_steps=total_steps - warmup_steps,
        alpha=min_learning_rate / learning_rate,
        warmup_target=learning_rate,
        warmup_steps=warmup_steps,
    )


@keras.saving.register_keras_serializable(package="keras_fourier")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `learning_rate`, then linear decay to `min_learning_rate`.

    The official FNet fine-tuning schedule (``constant * linear_warmup *
    linear_decay`` of google-research ``f_net/train_utils.py``): at step
    ``s``, ``learning_rate * s / warmup_steps`` during the warmup, then
    ``min + (learning_rate - min) * (1 - (s - warmup_steps) / (total_steps -
    warmup_steps))``, and `min_learning_rate` after `total_steps`.

    Args:
        learning_rate: peak learning rate, reached at `warmup_steps`.
        total_steps: length of the schedule in optimizer steps.
        warmup_steps: steps of the warmup, < `total_steps`.
        min_learning_rate: learning rate at `total_steps`.
    """

    def __init__(
        self,
        learning_rate: float,
        total_steps: int,
        warmup_steps: int,
        min_learning_rate: float,
    ):
        self.learning_rate = learning_rate
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.min_learning_rate = min_learning_rate

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = self.learning_rate * step / max(self.warmup_steps, 1)
        progress = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        decay = self.min_learning_rate + (self.learning_rate - self.min_learning_rate) * (
            1.0 - keras.ops.clip(progress, 0.0, 1.0)
        )
        return keras.ops.where(step < self.warmup_steps, warmup, decay)

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "min_learning_rate": self.min_learning_rate,
        }


def warmup_linear_schedule(
    learning_rate: float,
    total_steps: int,
    warmup_steps: int = 0,
    min_learning_rate: float = 0.0,
) -> WarmupLinearDecay:
    """Linear warmup from 0 to `learning_rate`, then linear decay to `min_learning_rate`.

    The schedule of the official FNet fine-tuning (with `warmup_steps` 10%
    of `total_steps` and `min_learning_rate` 0, see :data:`RECIPES`).

    Args:
        learning_rate: peak learning rate, reached after `warmup_steps`.
        total_steps: length of the whole schedule in optimizer steps.
        warmup_steps: steps of the linear warmup, < `total_steps`. Default 0.
        min_learning_rate: learning rate at `total_steps`. Default 0.

    Returns:
        A :class:`WarmupLinearDecay` schedule.

    Raises:
        ValueError: a count or rate out of range, naming it.

    Example:
        >>> schedule = warmup_linear_schedule(1e-5, total_steps=100, warmup_steps=10)
        >>> [round(float(schedule(step)), 9) for step in (0, 5, 10, 55, 100)]
        [0.0, 5e-06, 1e-05, 5e-06, 0.0]
    """
    check_positive_int("total_steps", total_steps)
    check_number("warmup_steps", warmup_steps, low=0, high=total_steps, high_open=True)
    check_number("learning_rate", learning_rate, low=0, low_open=True)
    check_number("min_learning_rate", min_learning_rate, low=0, high=learning_rate)
    return WarmupLinearDecay(
        float(learning_rate), int(total_steps), int(warmup_steps), float(min_learning_rate)
    )


def create_optimizer(
    model: keras.Model,
    *,
    learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = 1e-3,
    weight_decay: float = 0.05,
    clipnorm: float | None = 1.0,
    use_ema: bool = False,
    ema_momentum: float = 0.99,
    decay_all: bool = False,
    epsilon: float = 1e-7,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
) -> keras.optimizers.AdamW:
    """AdamW with the papers' weight-decay exemptions and global gradient clipping.

    Call it inside the strategy's scope, after building `model`. Under the
    `mixed_float16` policy `model.compile` wraps it in a
    `keras.optimizers.LossScaleOptimizer` (dynamic loss scaling).

    Args:
        model: the built model; `no_weight_decay_variables(model)` are
            excluded from weight decay unless `decay_all`.
        learning_rate: a float or a schedule (see `warmup_cosine_schedule`,
            `warmup_linear_schedule`). Default 1e-3.
        weight_decay: decoupled weight decay. Default 0.05.
        clipnorm: clip the global norm of all gradients to this value; None
            for no clipping. Default 1.0.
        use_ema: keep an exponential moving average of the weights, swapped
            in for validation and assigned to the model at the end of
            `fit`. Default False.
        ema_momentum: EMA momentum. Default 0.99.
        decay_all: decay every variable, as the official FNet fine-tuning
            (Flax's Adam with ``weight_decay``). Default False.
        epsilon: Adam's epsilon. Default 1e-7 (Keras's).
        beta_1: Adam's first-moment decay. Default 0.9.
        beta_2: Adam's second-moment decay. Default 0.999.

    Returns:
        A `keras.optimizers.AdamW`.

    Example:
        >>> model = keras_fourier.build_model(depths=1, dims=16, patch_size=4,
        ...                                   input_shape=(16, 16, 3), classes=2)
        >>> create_optimizer(model, learning_rate=1e-3).global_clipnorm
        1.0
    """
    optimizer = keras.optimizers.AdamW(
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        global_clipnorm=clipnorm,
        use_ema=use_ema,
        ema_momentum=ema_momentum,
        epsilon=epsilon,
        beta_1=beta_1,
        beta_2=beta_2,
    )
    if not decay_all:
        optimizer.exclude_from_weight_decay(var_list=no_weight_decay_variables(model))
    return optimizer
