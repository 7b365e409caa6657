"""`keras-fourier train`: the README's main job, and any training run of `keras_fourier.training`.

``keras-fourier train`` with no arguments trains `gfnet_tiny` on the embedded
digits, evaluates it on the held-out split, saves it and prints
``test_accuracy=<value>`` as its last line (the summary of the run's task:
another task prints its own, e.g. ``test_miou=``). Running it again with the
same ``--out`` resumes an interrupted run, or only shows a finished one.

Every option with a `TrainConfig` field takes that field's default, read
from the keras-free :class:`~keras_fourier.training.config.TrainConfig`;
model, task, strategy, precision, mixer and FFN names come from their tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from keras_fourier.cli.arguments import (
    DATA_HELP,
    CommandError,
    comma_list,
    metrics_line,
    sizes,
)
from keras_fourier.model_record import read_checkpoint_record
from keras_fourier.models.family import FFN_NAMES, MIXER_NAMES
from keras_fourier.models.names import PUBLIC_NAMES, is_model_name, model_names
from keras_fourier.run_folder import RunFolder
from keras_fourier.settings import BAD_IMAGE_MODES, TEXT_PADDINGS
from keras_fourier.tasks import TASKS
from keras_fourier.training.config import PRECISIONS, STRATEGIES, TrainConfig
from keras_fourier.training.recipe import RECIPES

NAME = "train"
HELP = "train a model (no arguments: the README's main job on the embedded digits)"
DESCRIPTION = (
    "Train a classifier with the papers' recipe (--recipe deit): AdamW, linear warmup then "
    "cosine decay, weight decay 0.05 (not on norms, biases, position embeddings and Fourier "
    "filters), global gradient clipping 1.0, label smoothing 0.1; or fine-tune pretrained "
    "--weights (a fresh classifier head) with the official FNet fine-tuning recipe "
    "(--recipe fnet_finetune, the default for FNet with --weights): Adam with weight decay "
    "0.01 on every variable, learning rate 1e-5 warmed up over 10% of the steps then "
    "decayed linearly to 0, batch 64, 3 epochs. Validates after every "
    "epoch on a validation split held apart from the test split, keeps the best epoch "
    "as OUT/model.keras and evaluates it once on the test split. Rerunning with the "
    "same --out and settings resumes a killed run from its last completed epoch, or "
    "shows the stored result of a finished one; one run at a time per folder. Prints a "
    "header (model, parameters, FLOPs, data splits, output folder), where the run's "
    "files are, and the task's result last: test_accuracy=<test accuracy> for "
    "classification."
)
SHOW_DEFAULTS = True

_DEFAULTS = TrainConfig()
# The command-line flag of each TrainConfig field, for error messages.
FLAGS = {
    **{
        field.name: "--" + field.name.replace("_", "-") for field in dataclasses.fields(TrainConfig)
    },
    "use_ema": "--ema",
    "tensorboard": "--no-tensorboard",
}


def _model_name(text: str) -> str:
    """Parses train's --model: a model name in either spelling, or a saved model to start from."""
    if not is_model_name(text) and not os.path.exists(text):
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r} (choose from {', '.join(model_names())}, or "
            f"{', '.join(sorted(PUBLIC_NAMES))}, or a .keras file or run folder to start from)"
        )
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `keras-fourier train` to `parser`."""
    add = parser.add_argument

    def option(field: str, help: str, **kwargs) -> None:
        """Adds TrainConfig `field` as the option FLAGS[field], with TrainConfig's default."""
        add(FLAGS[field], default=getattr(_DEFAULTS, field), help=help, **kwargs)

    def recipe_option(field: str, help: str, **kwargs) -> None:
        """Adds a hyper-parameter whose default is the recipe's (unset: TrainConfig's None)."""
        values = ", ".join(f"{name} {getattr(row, field)}" for name, row in RECIPES.items())
        add(
            FLAGS[field],
            default=argparse.SUPPRESS,
            help=f"{help} (default: the recipe's: {values})",
            **kwargs,
        )

    option(
        "model",
        f"one of: {', '.join(model_names())} (or the builder name, e.g. GFNetTi), or a .keras "
        "file or run folder whose model (and weights) the run starts from",
        type=_model_name,
        metavar="MODEL",
    )
    option("data", DATA_HELP, metavar="SOURCE")
    add(
        FLAGS["task"],
        default=argparse.SUPPRESS,
        choices=tuple(TASKS),
        help="what the model learns (default: the classification task of the model's kind, "
        "image or text, when it takes --data, else the only task that takes --data; name it "
        "where several do). A named task that does not take the default --model or --data "
        "uses its own: --task forecast trains fourcastnet_tiny on the embedded navier_stokes",
    )
    option("out", "output directory; rerun with it to resume")
    option(
        "weights",
        "pretrained weights of a model name, loaded everywhere but the classifier head, which "
        "starts fresh (fine-tuning). FNet: a release ('f_net_base', 'f_net_large': downloaded "
        "once), an official Flax checkpoint, a transformers or keras-hub FNet folder, a "
        ".weights.h5 (its activation: gelu_tanh) or a .keras file of an FNet (its own); "
        "vision: 'imagenet', an official .pth, or a .weights.h5/.keras file",
        metavar="WEIGHTS",
    )
    add(
        FLAGS["recipe"],
        default=argparse.SUPPRESS,
        help="training recipe: deit (the papers') or fnet_finetune (the official FNet "
        "fine-tuning) (default: fnet_finetune for FNet with --weights, else deit)",
        choices=tuple(RECIPES),
    )
    add(
        FLAGS["tokenizer"],
        default=argparse.SUPPRESS,
        help="tokenizer of csv: text, stored in the run's model.keras: bytes, official (the "
        "official FNet SentencePiece vocabulary, downloaded once; needs the [text] extra), or "
        "a SentencePiece .model path (default: official with official FNet weights, else "
        "bytes)",
        metavar="TOKENIZER",
    )
    recipe_option("epochs", "training epochs", type=int)
    recipe_option(
        "batch_size", "GLOBAL batch size, split evenly across replicas and workers", type=int
    )
    option(
        "image_size",
        "default: 16 for digits, else 32 for presets and 224 for named models, "
        "rounded up to a multiple of the model's stride; refused when the batch would need "
        "more than KERAS_FOURIER_MAX_MEMORY (8 GiB)",
        type=int,
    )
    option(
        "strategy",
        "TensorFlow backend: auto = TPU, else multi-worker (TF_CONFIG), else several "
        "GPUs, else default. KERAS_BACKEND=jax: auto/mirrored = keras.distribution."
        "DataParallel over every local device, default/one_device = one device. "
        "KERAS_BACKEND=torch: auto/default/one_device, one device",
        choices=STRATEGIES,
    )
    option("mixed_precision", "mixed_float16 uses dynamic loss scaling", choices=PRECISIONS)
    option(
        "jit_compile",
        "XLA-compile the train step; auto: only on accelerators",
        choices=("auto", "true", "false"),
    )
    recipe_option("learning_rate", "peak learning rate", type=float)
    recipe_option("min_learning_rate", "learning rate at the end of the decay", type=float)
    recipe_option("warmup_epochs", "epochs of linear warmup (None: 10%% of the steps)", type=float)
    recipe_option("weight_decay", "AdamW weight decay", type=float)
    recipe_option("clipnorm", "global gradient norm clip; 0 disables (None: none)", type=float)
    recipe_option("label_smoothing", "label smoothing of the cross-entropy", type=float)
    option("drop_path_rate", "stochastic depth rate; default: the model's own", type=float)
    add(
        "--augment",
        default="none",
        choices=("none", "deit"),
        help="image augmentation: none, or DeiT's (RandAugment, MixUp/CutMix, erasing)",
    )
    option(
        "use_ema",
        "keep an EMA of the weights for validation and as the final weights",
        dest="use_ema",
        action="store_true",
    )
    option("ema_momentum", "EMA momentum", type=float)
    option("steps_per_epoch", "steps per epoch from the repeated data; default: one pass", type=int)
    option(
        "eval_split",
        "test split: evaluated once, at the end, on the model selected on the validation split",
    )
    option(
        "validation_split",
        "split evaluated after every epoch to select best.keras; default: the "
        "source's 'validation' split (digits, and dir: data without a validation folder, hold "
        "it out of the training images; TFDS data without one holds out the last 10%% of "
        "'train')",
    )
    option("data_dir", "TFDS data directory")
    option(
        "sequence_length",
        "text models: tokens per example (padded or cut); refused when the batch would need "
        "more than KERAS_FOURIER_MAX_MEMORY (8 GiB)",
        type=int,
    )
    option(
        "padding",
        "text tasks: pad every batch to --sequence-length (fixed), or each batch to its longest "
        "text (batch: the model is built to take any length up to --sequence-length, and the "
        "run's evaluation pads per batch too)",
        choices=TEXT_PADDINGS,
    )
    option(
        "bucket_boundaries",
        "with --padding batch: comma-separated text lengths in tokens, e.g. 32,64: texts "
        "shorter than 32, from 32 to 63 and of 64 or more are batched apart",
        type=lambda text: tuple(comma_list(cast=int)(text)),
        metavar="LENGTHS",
    )
    option("train_examples", "ListOps training examples", type=int)
    option("eval_examples", "ListOps validation and test examples (each)", type=int)
    option("seed", "seed of weights, data and augmentation", type=int)
    option(
        "deterministic",
        "reproducible --augment: its random maps run one image at a time (slower); "
        "without --augment every run of a seed is already the same",
        action="store_true",
    )
    option(
        "on_bad_image",
        "a corrupt image file of dir: data: error (naming it), or skip (counted)",
        choices=BAD_IMAGE_MODES,
    )
    option(
        "verbose",
        "Keras progress: 0 none (and no header), 1 progress bars, 2 one line per epoch; "
        "auto: progress bars on a terminal, one line per epoch when output goes to a file",
        choices=("auto", "0", "1", "2"),
    )
    add(
        "--tensorboard",
        action=argparse.BooleanOptionalAction,
        default=_DEFAULTS.tensorboard,
        help="write TensorBoard logs to OUT/logs (--no-tensorboard: none)",
    )
    architecture = parser.add_argument_group(
        "build_model overrides of a preset, e.g. --model gfnet_tiny --mixer afno --dims 96"
    )
    architecture.add_argument("--mixer", default=None, choices=MIXER_NAMES, help="token mixer")
    architecture.add_argument("--ffn", default=None, choices=FFN_NAMES, help="feed-forward")
    architecture.add_argument(
        "--depths",
        type=sizes,
        default=None,
        help="blocks: 4 (isotropic) or 1,2,1 (per stage, hierarchical)",
    )
    architecture.add_argument(
        "--dims", type=sizes, default=None, help="channels: 64, or 32,64,128 per stage"
    )
    architecture.add_argument("--patch-size", type=int, default=None, help="stem stride")


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier train`; returns the exit status."""
    from keras_fourier.data import AugmentConfig
    from keras_fourier.training import NonFiniteLossError, RunFolderBusyError, run_task, train
    from keras_fourier.training.plan import task_defaults

    options = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(TrainConfig)
        if hasattr(args, field.name)
    }
    options["augment"] = AugmentConfig() if args.augment == "deit" else None
    options["jit_compile"] = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    options["verbose"] = "auto" if args.verbose == "auto" else int(args.verbose)
    config = task_defaults(TrainConfig(**options))
    try:
        result = train(config, names=FLAGS)
    except (RunFolderBusyError, NonFiniteLossError) as error:
        raise CommandError(str(error)) from error
    except OSError as error:
        raise CommandError(
            f"cannot write the run folder {args.out!r} ({error.strerror or error}: "
            f"{error.filename or args.out}); free space or fix it, then rerun the same command "
            "to resume."
        ) from error
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM (cli.Terminated): the same type
        raise type(interrupt)(
            f"rerun the same command to resume {args.out!r} after its last completed epoch."
        ) from interrupt
    task = run_task(config, FLAGS)
    record = read_checkpoint_record(result.model_path) or {}
    print("\n".join(_footer(result, record, args.eval_split, task.monitor)))
    print("\n".join([*task.details(result.metrics), *task.summary(result.metrics)]))
    return 0


def _footer(result: Any, record: dict[str, Any], test_split: str, monitor: str) -> list[str]:
    """Where the run's files are, which epoch was selected, and the test metrics.

    Args:
        result: the `TrainResult` of the run.
        record: the checkpoint record of its model file ({} if none).
        test_split: the split the model was tested on.
        monitor: the validation metric that selected it (its task's, e.g. "val_accuracy").
    """
    epoch, logs = record.get("epoch"), record.get("logs", {})
    selected = (
        f" (epoch {epoch + 1} of {len(result.history)}, {monitor}={logs[monitor]:.4f})"
        if isinstance(epoch, int) and monitor in logs
        else ""
    )
    folder = RunFolder(result.out)
    files = {
        folder.MODEL: f"the model selected on the validation split{selected}",
        folder.BEST: f"checkpoint of the best {monitor}",
        folder.LAST: "checkpoint of the last epoch",
        folder.HISTORY: "one row of metrics per epoch",
        folder.LOGS + "/": f"TensorBoard logs: tensorboard --logdir {folder.logs}",
    }
    done = (
        f"run folder {result.out} is already finished ({len(result.history)} epochs): nothing "
        "was trained or written; its stored result follows (start a new run with another --out)"
        if result.already_finished
        else f"run folder {result.out}:"
    )
    return [
        done,
        *(
            f"  {name:<13} {text}"
            for name, text in files.items()
            if os.path.exists(folder.file(name))
        ),
        f"test split {test_split!r}, evaluated once on {folder.MODEL}: "
        f"{metrics_line(result.metrics)}",
    ]
