"""`TrainConfig`: every setting of a training run with its default, as data, keras-free.

The `keras-fourier` command lists these fields and defaults in its help and
checks its arguments against them and against :data:`STRATEGIES` and
:data:`PRECISIONS` before it loads TensorFlow, so this module imports
nothing heavy (nor does the lazy `keras_fourier.training` package).

The run's task (:mod:`keras_fourier.tasks`) declares the settings that apply
to it only (image size and augmentation for images, sequence length and
example counts for ListOps), checks them and resolves them into the run's
identity (``run.json``); :mod:`keras_fourier.training.plan` puts the
settings and the task together (`run_task`, `resolve_config`,
`validate_config`, `run_identity`). This module imports no task.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from keras_fourier.models.names import ARCHITECTURE_OPTIONS, is_model_name
from keras_fourier.validation import check_choice

if TYPE_CHECKING:
    from keras_fourier.data.augment import AugmentConfig

# The distribution strategies (keras_fourier.training.strategy) and mixed-precision
# policies a run takes.
STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker", "tpu")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def check_precision(policy: str) -> str:
    """Validates a mixed-precision policy name.

    Args:
        policy: one of `PRECISIONS`.

    Returns:
        `policy` unchanged.

    Raises:
        ValueError: naming the value when it is not a known policy.

    Example:
        >>> check_precision("mixed_bfloat16")
        'mixed_bfloat16'
    """
    return check_choice("mixed_precision", policy, PRECISIONS)


@dataclasses.dataclass
class TrainConfig:
    """Every setting of a training run and its default; the defaults are the README's main job.

    The defaults train `gfnet_tiny` on the embedded digits (16x16) with the
    papers' recipe: AdamW (weight decay 0.05, not on norms, biases, position
    embeddings and Fourier filters), linear warmup then cosine decay, global
    gradient clipping 1.0, label smoothing 0.1. `keras_fourier.training.train`
    checks them (`validate_config`) before it builds or writes anything.

    The hyper-parameters that default to None take the values of the
    run's recipe (:data:`~keras_fourier.training.recipe.RECIPES`): "deit" (the papers'
    recipe above, 20 epochs) or "fnet_finetune" (the official FNet
    fine-tuning: Adam with weight decay 0.01 on every variable, learning rate
    1e-5 with a linear warmup over 10% of the steps and a linear decay to 0,
    3 epochs, no clipping, no label smoothing). A text model with `weights`
    fine-tunes with "fnet_finetune" unless `recipe` says otherwise; every
    other run uses "deit".

    Attributes:
        model: a name from `keras_fourier.training.model_names()`. Default
            "gfnet_tiny".
        data: an image source of `keras_fourier.data.load_image_dataset`
            ("digits", "tfds:<name>", "dir:<path>") or, for FNet models,
            "listops" or "csv:<path>" (CSV/TSV text files, see
            :mod:`keras_fourier.data.text_files`). Default "digits".
        task: the task, a name of `keras_fourier.tasks.TASKS`
            ("image_classification", "text_classification", ...). Default
            None: the classification task of the model's modality when it
            takes `data`, else the only task that takes it.
        out: output directory. Default "runs/default".
        recipe: "deit" or "fnet_finetune" (see above). Default None: "fnet_finetune"
            for a text model with `weights`, else "deit".
        weights: pretrained weights of a model name, loaded everywhere but
            the classifier head, which starts fresh (as the official
            fine-tuning does); see
            `keras_fourier.training.create_pretrained_model`. Vision models:
            "imagenet", an official `.pth`, or a `.weights.h5`/`.keras` file
            saved by keras_fourier; FNet: a release name ("f_net_base"), an
            official Flax checkpoint, a transformers or keras-hub FNet
            folder, a `.weights.h5` (which records no activation: the
            official tanh GELU is used) or a `.keras` file of an FNet (its
            sizes and activation from its config). Default None: random
            initialisation.
        tokenizer: text of "csv:" data: "bytes", "official" (the official FNet
            SentencePiece vocabulary, downloaded once) or the path of a
            SentencePiece `.model`. It is stored in the run's model.keras.
            Default None: "official" with official FNet weights (a release, a
            Flax checkpoint, a transformers or keras-hub folder), else "bytes".
        epochs: training epochs. Default None: the recipe's (20, 3).
        batch_size: *global* batch size, split across replicas and workers.
            Default None: the recipe's (64).
        image_size: image height and width. Default None: for "digits" the
            smallest multiple of the model's stride >= 16, else 32 for presets
            and 224 for the named models.
        learning_rate: peak learning rate. Default None: the recipe's (3e-3, 1e-5).
        min_learning_rate: final learning rate of the decay. Default None:
            the recipe's (1e-5, 0).
        warmup_epochs: epochs of linear warmup (fractions allowed). Default
            None: the recipe's (2 epochs; 10% of the steps).
        weight_decay: AdamW weight decay. Default None: the recipe's (0.05, 0.01).
        clipnorm: global gradient norm clip, 0 for none. Default None: the
            recipe's (1.0, none).
        label_smoothing: label smoothing of the cross-entropy. Default None:
            the recipe's (0.1, 0).
        drop_path_rate: stochastic depth rate. Default None: the model's.
        augment: training augmentation of image data, e.g. `AugmentConfig()`
            (DeiT). Default None: none.
        strategy: a name of :data:`STRATEGIES`. Default "auto".
        mixed_precision: "float32", "mixed_float16" (with dynamic loss
            scaling) or "mixed_bfloat16". Default "float32".
        jit_compile: XLA-compile the train step: True, False or "auto" (XLA
            when an accelerator is present). Default "auto".
        use_ema: keep an EMA of the weights, used for validation and as the
            final weights. Default False.
        ema_momentum: EMA momentum. Default 0.99.
        steps_per_epoch: steps per epoch, drawn from the repeated training
            data. Default None: one pass over the data per epoch.
        eval_split: the test split of image data, evaluated once at the end
            on the model selected on the validation split. Default "test".
        validation_split: the image split evaluated after every epoch to
            select ``best.keras``. Default None: see
            `keras_fourier.data.training_splits` ("validation", held out of
            the training images when the source has none).
        data_dir: TFDS data directory. Default None.
        sequence_length: text models: tokens per example (ListOps and
            "csv:" texts are cut to it). Default 128.
        padding: how text batches are padded (text tasks only): "fixed"
            (every batch at `sequence_length`) or "batch" (each batch to its
            longest text, at most `sequence_length`; the model is then built
            to take any length, ``FNet(sequence_length=None)``). Default
            "fixed".
        bucket_boundaries: with `padding` "batch", increasing text lengths
            (in tokens) that split the texts into buckets batched apart, so
            that a batch holds texts of similar lengths and little padding.
            Default None: no buckets.
        train_examples: ListOps training examples. Default 4000.
        eval_examples: ListOps held-out examples. Default 500.
        mixer, ffn, depths, dims, patch_size: `build_model` overrides of a
            vision preset. Default None: the preset's.
        seed: random seed of weights, data order and augmentation; the same
            seed trains the same run (on one machine and thread count), but
            for image `augment`, which needs `deterministic`. Default 0.
        deterministic: reproducible image augmentation: its random maps run
            one element at a time (slower with many cores); no effect
            without `augment`. Default False.
        on_bad_image: a corrupt image file of "dir:" data: "error" (named)
            or "skip" (counted and left out). Default "error".
        tensorboard: write TensorBoard logs. Default True.
        verbose: `fit` verbosity: 0 silent, 1 progress bars, 2 one line per
            epoch, "auto" 1 on a terminal and 2 otherwise. Any but 0 also
            prints a header (model, parameters, data splits, output folder).
            Default "auto".

    Example:
        >>> TrainConfig().batch_size is None  # the recipe's
        True
        >>> TrainConfig(dims=32).architecture
        {'dims': 32}
    """

    model: str = "gfnet_tiny"
    data: str = "digits"
    task: str | None = None
    out: str = "runs/default"
    recipe: str | None = None
    weights: str | None = None
    tokenizer: str | None = None
    epochs: int | None = None
    batch_size: int | None = None
    image_size: int | None = None
    learning_rate: float | None = None
    min_learning_rate: float | None = None
    warmup_epochs: float | None = None
    weight_decay: float | None = None
    clipnorm: float | None = None
    label_smoothing: float | None = None
    drop_path_rate: float | None = None
    augment: AugmentConfig | None = None
    strategy: str = "auto"
    mixed_precision: str = "float32"
    jit_compile: bool | str = "auto"
    use_ema: bool = False
    ema_momentum: float = 0.99
    steps_per_epoch: int | None = None
    eval_split: str = "test"
    validation_split: str | None = None
    data_dir: str | None = None
    sequence_length: int = 128
    padding: str = "fixed"
    bucket_boundaries: tuple[int, ...] | None = None
    train_examples: int = 4000
    eval_examples: int = 500
    mixer: str | None = None
    ffn: str | None = None
    depths: int | tuple[int, ...] | None = None
    dims: int | tuple[int, ...] | None = None
    patch_size: int | None = None
    seed: int = 0
    deterministic: bool = False
    on_bad_image: str = "error"
    tensorboard: bool = True
    verbose: str | int = "auto"

    @property
    def saved_model(self) -> bool:
        """Whether `model` is a saved model to start from (a `.keras` file or a run folder)."""
        return not is_model_name(self.model)

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
