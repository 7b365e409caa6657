"""The `keras-fourier` command line.

``keras-fourier train`` with no arguments is the README's main job: it
trains `gfnet_tiny` on the embedded digits, evaluates it on the held-out
split, saves it and prints ``test_accuracy=<value>`` as its last line.
Running it again with the same ``--out`` resumes an interrupted run, or
only evaluates a finished one. ``keras-fourier evaluate`` scores a saved
model.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence

from keras_fourier import _startup
from keras_fourier.data import AugmentConfig
from keras_fourier.models.vision import FFNS, MIXERS
from keras_fourier.training import (
    PRECISIONS,
    STRATEGIES,
    NonFiniteLossError,
    RunFolderBusyError,
    TrainConfig,
    TrainResult,
    evaluate,
    model_names,
    resolve_model_file,
    train,
)
from keras_fourier.training.callbacks import read_checkpoint_record
from keras_fourier.training.trainer import (
    BEST_FILE,
    HISTORY_FILE,
    LAST_FILE,
    LOGS_FOLDER,
    MODEL_FILE,
)

_DEFAULTS = TrainConfig()
# The command-line flag of each TrainConfig field, for error messages.
FLAGS = {
    **{
        field.name: "--" + field.name.replace("_", "-") for field in dataclasses.fields(TrainConfig)
    },
    "use_ema": "--ema",
    "tensorboard": "--no-tensorboard",
}


def _sizes(text: str) -> int | tuple[int, ...]:
    """Parses --depths and --dims: 4 -> 4 (isotropic), 1,2,1 -> (1, 2, 1) (per stage)."""
    try:
        values = tuple(int(value) for value in text.split(","))
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"expected an int or comma-separated ints, got {text!r}"
        ) from error
    return values[0] if len(values) == 1 and "," not in text else values


def _metrics_line(metrics: dict[str, float]) -> str:
    return " ".join(f"{name}={value:.4f}" for name, value in sorted(metrics.items()))


def _train(args: argparse.Namespace) -> int:
    options = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(TrainConfig)
        if hasattr(args, field.name)
    }
    options["augment"] = AugmentConfig() if args.augment == "deit" else None
    options["clipnorm"] = None if args.clipnorm == 0 else args.clipnorm
    options["jit_compile"] = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    options["verbose"] = "auto" if args.verbose == "auto" else int(args.verbose)
    try:
        result = train(TrainConfig(**options), names=FLAGS)
    except ValueError as error:
        print(f"keras-fourier train: error: {error}", file=sys.stderr)
        return 2
    except (RunFolderBusyError, NonFiniteLossError) as error:
        print(f"keras-fourier train: error: {error}", file=sys.stderr)
        return 1
    print("\n".join(_footer(result, args.eval_split)))
    print(f"test_accuracy={result.metrics['accuracy']:.4f}")
    return 0


def _footer(result: TrainResult, test_split: str) -> list[str]:
    """Where the run's files are, which epoch was selected, and the test metrics."""
    record = read_checkpoint_record(result.model_path) or {}
    epoch, logs = record.get("epoch"), record.get("logs", {})
    selected = (
        f" (epoch {epoch + 1} of {len(result.history)}, val_accuracy={logs['val_accuracy']:.4f})"
        if isinstance(epoch, int) and "val_accuracy" in logs
        else ""
    )
    files = {
        MODEL_FILE: f"the model selected on the validation split{selected}",
        BEST_FILE: "checkpoint of the best validation accuracy",
        LAST_FILE: "checkpoint of the last epoch",
        HISTORY_FILE: "one row of metrics per epoch",
        LOGS_FOLDER + "/": "TensorBoard logs: tensorboard --logdir "
        + os.path.join(result.out, LOGS_FOLDER),
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
            if os.path.exists(os.path.join(result.out, name))
        ),
        f"test split {test_split!r}, evaluated once on {MODEL_FILE}: "
        f"{_metrics_line(result.metrics)}",
    ]


def _add_train_parser(commands) -> None:
    parser = commands.add_parser(
        "train",
        help="train a model (no arguments: the README's main job on the embedded digits)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description=(
            "Train a classifier with the papers' recipe: AdamW, linear warmup then cosine "
            "decay, weight decay 0.05 (not on norms, biases, position embeddings and Fourier "
            "filters), global gradient clipping 1.0, label smoothing 0.1. Validates after every "
            "epoch on a validation split held apart from the test split, keeps the best epoch "
            "as OUT/model.keras and evaluates it once on the test split. Rerunning with the "
            "same --out and settings resumes a killed run from its last completed epoch, or "
            "shows the stored result of a finished one; one run at a time per folder. Prints a "
            "header (model, parameters, FLOPs, data splits, output folder), where the run's "
            "files are, and test_accuracy=<test accuracy> last."
        ),
    )
    add = parser.add_argument
    add(
        "--model",
        default=_DEFAULTS.model,
        choices=model_names(),
        metavar="NAME",
        help=f"one of: {', '.join(model_names())}",
    )
    add(
        "--data",
        default=_DEFAULTS.data,
        metavar="SOURCE",
        help="'digits', 'tfds:<name>', 'dir:<path>', or 'listops' for FNet models",
    )
    add("--out", default=_DEFAULTS.out, help="output directory; rerun with it to resume")
    add("--epochs", type=int, default=_DEFAULTS.epochs, help="training epochs")
    add(
        "--batch-size",
        type=int,
        default=_DEFAULTS.batch_size,
        help="GLOBAL batch size, split evenly across replicas and workers",
    )
    add(
        "--image-size",
        type=int,
        default=None,
        help="default: 16 for digits, else 32 for presets and 224 for named models, "
        "rounded up to a multiple of the model's stride",
    )
    add(
        "--strategy",
        default=_DEFAULTS.strategy,
        choices=STRATEGIES,
        help="TensorFlow backend: auto = TPU, else multi-worker (TF_CONFIG), else several "
        "GPUs, else default. KERAS_BACKEND=jax: auto/mirrored = keras.distribution."
        "DataParallel over every local device, default/one_device = one device. "
        "KERAS_BACKEND=torch: auto/default/one_device, one device",
    )
    add(
        "--mixed-precision",
        default=_DEFAULTS.mixed_precision,
        choices=PRECISIONS,
        help="mixed_float16 uses dynamic loss scaling",
    )
    add(
        "--jit-compile",
        default="auto",
        choices=("auto", "true", "false"),
        help="XLA-compile the train step; auto: only on accelerators",
    )
    add("--learning-rate", type=float, default=_DEFAULTS.learning_rate, help="peak learning rate")
    add(
        "--min-learning-rate",
        type=float,
        default=_DEFAULTS.min_learning_rate,
        help="learning rate at the end of the cosine decay",
    )
    add(
        "--warmup-epochs",
        type=float,
        default=_DEFAULTS.warmup_epochs,
        help="epochs of linear warmup",
    )
    add("--weight-decay", type=float, default=_DEFAULTS.weight_decay, help="AdamW weight decay")
    add(
        "--clipnorm",
        type=float,
        default=_DEFAULTS.clipnorm,
        help="global gradient norm clip; 0 disables",
    )
    add(
        "--label-smoothing",
        type=float,
        default=_DEFAULTS.label_smoothing,
        help="label smoothing of the cross-entropy",
    )
    add(
        "--drop-path-rate",
        type=float,
        default=None,
        help="stochastic depth rate; default: the model's own",
    )
    add(
        "--augment",
        default="none",
        choices=("none", "deit"),
        help="image augmentation: none, or DeiT's (RandAugment, MixUp/CutMix, erasing)",
    )
    add(
        "--ema",
        dest="use_ema",
        action="store_true",
        help="keep an EMA of the weights for validation and as the final weights",
    )
    add("--ema-momentum", type=float, default=_DEFAULTS.ema_momentum, help="EMA momentum")
    add(
        "--steps-per-epoch",
        type=int,
        default=None,
        help="steps per epoch from the repeated data; default: one pass",
    )
    add(
        "--eval-split",
        default=_DEFAULTS.eval_split,
        help="test split: evaluated once, at the end, on the model selected on the "
        "validation split",
    )
    add(
        "--validation-split",
        default=None,
        help="image split evaluated after every epoch to select best.keras; default: the "
        "source's 'validation' split (digits, and dir: data without a validation folder, hold "
        "it out of the training images; TFDS data without one holds out the last 10%% of "
        "'train')",
    )
    add("--data-dir", default=None, help="TFDS data directory")
    add(
        "--sequence-length",
        type=int,
        default=_DEFAULTS.sequence_length,
        help="ListOps sequence length",
    )
    add(
        "--train-examples",
        type=int,
        default=_DEFAULTS.train_examples,
        help="ListOps training examples",
    )
    add(
        "--eval-examples",
        type=int,
        default=_DEFAULTS.eval_examples,
        help="ListOps validation and test examples (each)",
    )
    add("--seed", type=int, default=_DEFAULTS.seed, help="seed of weights, data and augmentation")
    add(
        "--deterministic",
        action="store_true",
        help="reproducible data order and augmentation (slower with --augment)",
    )
    add(
        "--on-bad-image",
        default=_DEFAULTS.on_bad_image,
        choices=("error", "skip"),
        help="a corrupt image file of dir: data: error (naming it), or skip (counted)",
    )
    add(
        "--verbose",
        default="auto",
        choices=("auto", "0", "1", "2"),
        help="Keras progress: 0 none (and no header), 1 progress bars, 2 one line per epoch; "
        "auto: progress bars on a terminal, one line per epoch when output goes to a file",
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
    architecture.add_argument("--mixer", default=None, choices=tuple(MIXERS), help="token mixer")
    architecture.add_argument("--ffn", default=None, choices=tuple(FFNS), help="feed-forward")
    architecture.add_argument(
        "--depths",
        type=_sizes,
        default=None,
        help="blocks: 4 (isotropic) or 1,2,1 (per stage, hierarchical)",
    )
    architecture.add_argument(
        "--dims", type=_sizes, default=None, help="channels: 64, or 32,64,128 per stage"
    )
    architecture.add_argument("--patch-size", type=int, default=None, help="stem stride")
    parser.set_defaults(func=_train)


def _evaluate(args: argparse.Namespace) -> int:
    try:
        model_file = resolve_model_file(args.model)
    except (FileNotFoundError, ValueError) as error:
        print(f"keras-fourier evaluate: error: {error}", file=sys.stderr)
        return 2
    metrics = evaluate(
        model_file,
        args.data,
        split=args.split,
        batch_size=args.batch_size,
        data_dir=args.data_dir,
        eval_examples=args.eval_examples,
    )
    print(_metrics_line(metrics))
    return 0


def _add_evaluate_parser(commands) -> None:
    parser = commands.add_parser(
        "evaluate",
        help="evaluate a saved model: accuracy, top-5 accuracy (more than 5 classes) and loss",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description=(
            "Print the accuracy, top-5 accuracy (models with more than 5 classes) and "
            "cross-entropy of a .keras classifier, or of the model of a run folder of train, "
            "on a split of a data source; images are resized to its input size."
        ),
    )
    add = parser.add_argument
    add(
        "--model",
        required=True,
        metavar="PATH",
        help="a .keras file, or the run folder that train printed (its model.keras)",
    )
    add(
        "--data",
        default="digits",
        metavar="SOURCE",
        help="'digits', 'tfds:<name>', 'dir:<path>', or 'listops' for FNet models",
    )
    add("--split", default="test", help="image split; 'validation' or 'test' for listops")
    add("--batch-size", type=int, default=256, help="global batch size")
    add("--data-dir", default=None, help="TFDS data directory")
    add(
        "--eval-examples",
        type=int,
        default=_DEFAULTS.eval_examples,
        help="ListOps held-out examples (as in training)",
    )
    parser.set_defaults(func=_evaluate)


def _add_export_parser(commands) -> None:
    from keras_fourier.export import command

    parser = commands.add_parser(
        "export",
        help="export a model as a TF Serving SavedModel, builtin-only TFLite and ONNX files",
        description=(
            "Write OUT/NAME/VERSION/ (TF Serving SavedModel, signatures serving_default and "
            "serving_bytes), OUT/NAME[_QUANTIZATION].tflite (TFLite builtin ops only) and, with "
            "--format ...,onnx, OUT/NAME.onnx (standard ONNX ops, run in onnxruntime), each "
            "reloaded and checked against Keras. MODEL is a .keras file or a builder name "
            "built with --weights, --image-size and --classes; see export/README.md."
        ),
    )
    command.add_arguments(parser)
    parser.set_defaults(func=command.run)


def _add_flops_parser(commands) -> None:
    from keras_fourier import flop_count

    parser = commands.add_parser(
        "flops",
        help="count a model's FLOPs in the papers' convention (one multiply-add = one FLOP)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description=(
            "Print the FLOPs of one input as GFNet's and HorNet's tables count them: "
            "one multiply-add = one FLOP, plus N*C*ceil(log2 N) per 2D FFT. MODEL is a "
            ".keras file or a model name built with random weights."
        ),
    )
    flop_count.add_arguments(parser)
    parser.set_defaults(func=flop_count.run)


def _add_bench_parser(commands) -> None:
    from keras_fourier import bench

    parser = commands.add_parser(
        "bench",
        help="measure a model's throughput, latency and memory, or the mixers' scaling",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description=(
            "Model mode (MODEL: a model name, .keras or .tflite file): inference and "
            "training-step img/s, batch-1 latency, peak memory, FLOPs and the fraction of "
            "this machine's matmul rate. Scaling mode (--scaling): one block (mixer + MLP) "
            "at width 384, latency and peak memory against the token count, plotted. "
            "Writes JSON and CSV (and PNG) into --out."
        ),
    )
    bench.add_arguments(parser)
    parser.set_defaults(func=bench.run)


def _add_predict_parser(commands) -> None:
    from keras_fourier.imagenet import predict

    parser = commands.add_parser(
        "predict",
        help="print the top ImageNet classes of images, with probabilities",
        description=(
            "Print the top ImageNet-1k classes of each IMAGE with their probabilities. Images "
            "are resized (bicubic) and centre-cropped as the official release was evaluated. "
            "MODEL is a 1000-class .keras file or a builder name built with --weights "
            "(default 'imagenet') and --image-size."
        ),
    )
    predict.add_arguments(parser)
    parser.set_defaults(func=predict.run)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `keras-fourier`, one subcommand per `_add_*_parser`.

    Returns:
        An `argparse.ArgumentParser` whose parsed namespace has `func`, the
        subcommand to run.

    Example:
        >>> build_parser().parse_args(["train"]).model
        'gfnet_tiny'
    """
    parser = argparse.ArgumentParser(
        prog="keras-fourier",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_train_parser(commands)
    _add_evaluate_parser(commands)
    _add_export_parser(commands)
    _add_flops_parser(commands)
    _add_bench_parser(commands)
    _add_predict_parser(commands)
    for subcommand in commands.choices.values():
        subcommand.add_argument(
            _startup.SHOW_LOGS_FLAG,
            action="store_true",
            help="show TensorFlow's C++ log lines, hidden by default (start-up notes, "
            "'failed call to cuInit' without a GPU, warnings)",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `keras-fourier` console script.

    Args:
        argv: arguments without the program name. Default None: `sys.argv[1:]`.

    Returns:
        The exit status.

    Example:
        >>> main(["evaluate", "--model", "runs/default/model.keras"])  # doctest: +SKIP
        0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
