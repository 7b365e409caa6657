"""The package's settings as data, keras-free: a training run's fields and the names options take.

The `keras-fourier` command lists these names and defaults in its help and
checks its arguments against them before it loads TensorFlow, so they live
here, in a module that imports nothing heavy; the modules that use them
import them from here:

* :class:`TrainSettings`: every field of a training run with its default
  (`keras_fourier.training.TrainConfig` adds their validation);
* :data:`STRATEGIES` and :data:`PRECISIONS`: the distribution strategies and
  mixed-precision policies of a run (:mod:`keras_fourier.training`);
* :data:`RECIPES`: the training recipes, whose values the unset
  hyper-parameters of a run take (:mod:`keras_fourier.training.recipe`);
* :data:`BAD_IMAGE_MODES`: what a run does with a corrupt image file;
* :data:`FFT_IMPLS`: the implementations of the Fourier layers
  (:mod:`keras_fourier.layers.spectral`);
* :data:`QUANTIZATIONS` and :data:`OUTPUTS`: TFLite quantizations and what
  the exported signatures return (:mod:`keras_fourier.export`);
* :data:`BENCH_PRECISIONS`, :data:`BENCH_JIT` and the ``SCALING_*`` grid:
  what :mod:`keras_fourier.bench` measures.

The model names live with the model families
(:mod:`keras_fourier.models.names`), the token mixers and FFNs with the
variant rows (:mod:`keras_fourier.models.family`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from keras_fourier.data.augment import AugmentConfig

STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker", "tpu")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
BAD_IMAGE_MODES = ("error", "skip")
FFT_IMPLS = ("auto", "fft", "matmul")
# None: float32, no quantization.
QUANTIZATIONS = (None, "float16", "dynamic", "int8")
OUTPUTS = ("probabilities", "logits")
BENCH_PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16", "int8")
# The jit_compile of compile() for each name of bench's --jit ("auto": Keras's default).
BENCH_JIT = {"auto": "auto", "on": True, "off": False}
# Up to 16384 tokens; self-attention's points there need about 11 GiB and are skipped
# where the machine has less memory available (see keras_fourier.bench._attention_fits).
SCALING_GRIDS = (14, 28, 42, 56, 64, 96, 128)
SCALING_SEQUENCES = (512, 1024, 2048, 4096, 8192, 16384)
SCALING_WIDTH = 384


# The training recipes (keras_fourier.training.recipe builds their optimisers and schedules).
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


@dataclasses.dataclass
class TrainSettings:
    """Every setting of a training run and its default; the defaults are the README's main job.

    The defaults train `gfnet_tiny` on the embedded digits (16x16) with the
    papers' recipe: AdamW (weight decay 0.05, not on norms, biases, position
    embeddings and Fourier filters), linear warmup then cosine decay, global
    gradient clipping 1.0, label smoothing 0.1. Build runs with
    `keras_fourier.training.TrainConfig`, which adds the checks.

    The hyper-parameters that default to None take the values of the
    run's recipe (:data:`RECIPES`): "deit" (the papers'
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
            official Flax checkpoint, a keras-hub preset folder or a
            `.weights.h5`. Default None: random initialisation.
        tokenizer: text of "csv:" data: "bytes", "official" (the official FNet
            SentencePiece vocabulary, downloaded once) or the path of a
            SentencePiece `.model`. It is stored in the run's model.keras.
            Default None: "official" with official FNet weights (a release, a
            Flax checkpoint, a keras-hub preset), else "bytes".
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
        sequence_length: ListOps sequence length (FNet models). Default 128.
        train_examples: ListOps training examples. Default 4000.
        eval_examples: ListOps held-out examples. Default 500.
        mixer, ffn, depths, dims, patch_size: `build_model` overrides of a
            vision preset. Default None: the preset's.
        seed: random seed of weights, data order and augmentation. Default 0.
        deterministic: reproducible image pipelines (same order and
            augmentation every run, slower with augmentation). Default False.
        on_bad_image: a corrupt image file of "dir:" data: "error" (named)
            or "skip" (counted and left out). Default "error".
        tensorboard: write TensorBoard logs. Default True.
        verbose: `fit` verbosity: 0 silent, 1 progress bars, 2 one line per
            epoch, "auto" 1 on a terminal and 2 otherwise. Any but 0 also
            prints a header (model, parameters, data splits, output folder).
            Default "auto".

    Example:
        >>> TrainSettings().batch_size is None  # the recipe's
        True
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
