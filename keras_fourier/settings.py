"""The package's settings as data, keras-free: a training run's fields and the names options take.

The `keras-fourier` command lists these names and defaults in its help and
checks its arguments against them before it loads TensorFlow, so they live
here, in a module that imports nothing heavy; the modules that use them
import them from here:

* :class:`TrainSettings`: every field of a training run with its default
  (`keras_fourier.training.TrainConfig` adds their validation);
* :data:`STRATEGIES` and :data:`PRECISIONS`: the distribution strategies and
  mixed-precision policies of a run (:mod:`keras_fourier.training`);
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


@dataclasses.dataclass
class TrainSettings:
    """Every setting of a training run and its default; the defaults are the README's main job.

    The defaults train `gfnet_tiny` on the embedded digits (16x16) with the
    papers' recipe: AdamW (weight decay 0.05, not on norms, biases, position
    embeddings and Fourier filters), linear warmup then cosine decay, global
    gradient clipping 1.0, label smoothing 0.1. Build runs with
    `keras_fourier.training.TrainConfig`, which adds the checks.

    Attributes:
        model: a name from `keras_fourier.training.model_names()`. Default
            "gfnet_tiny".
        data: an image source of `keras_fourier.data.load_image_dataset`
            ("digits", "tfds:<name>", "dir:<path>") or, for FNet models,
            "listops". Default "digits".
        out: output directory. Default "runs/default".
        epochs: training epochs. Default 20.
        batch_size: *global* batch size, split across replicas and workers.
            Default 64.
        image_size: image height and width. Default None: for "digits" the
            smallest multiple of the model's stride >= 16, else 32 for presets
            and 224 for the named models.
        learning_rate: peak learning rate. Default 3e-3.
        min_learning_rate: final learning rate of the cosine decay. Default 1e-5.
        warmup_epochs: epochs of linear warmup (fractions allowed). Default 2.
        weight_decay: AdamW weight decay. Default 0.05.
        clipnorm: global gradient norm clip, None for none. Default 1.0.
        label_smoothing: label smoothing of the cross-entropy. Default 0.1.
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
            or "skip" (counted and left out), see :data:`BAD_IMAGE_MODES`.
            Default "error".
        tensorboard: write TensorBoard logs. Default True.
        verbose: `fit` verbosity: 0 silent, 1 progress bars, 2 one line per
            epoch, "auto" 1 on a terminal and 2 otherwise. Any but 0 also
            prints a header (model, parameters, data splits, output folder).
            Default "auto".

    Example:
        >>> TrainSettings().epochs
        20
    """

    model: str = "gfnet_tiny"
    data: str = "digits"
    out: str = "runs/default"
    epochs: int = 20
    batch_size: int = 64
    image_size: int | None = None
    learning_rate: float = 3e-3
    min_learning_rate: float = 1e-5
    warmup_epochs: float = 2
    weight_decay: float = 0.05
    clipnorm: float | None = 1.0
    label_smoothing: float = 0.1
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
