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
import importlib
import os
import sys
from collections.abc import Sequence

from keras_fourier import _startup
from keras_fourier.data import AugmentConfig, count_examples
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

_DATA_HELP = "'digits', 'tfds:<name>', 'dir:<path>', or 'listops' for FNet models"


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
    except OSError as error:
        print(
            f"keras-fourier train: error: cannot write the run folder {args.out!r} "
            f"({error.strerror or error}: {error.filename or args.out}); free space or "
            "fix it, then rerun the same command to resume.",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(
            f"keras-fourier train: interrupted; rerun the same command to resume {args.out!r} "
            "after its last completed epoch.",
            file=sys.stderr,
        )
        return 130
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

    def option(field: str, help: str, **kwargs) -> None:
        """Adds TrainConfig `field` as the option FLAGS[field], with TrainConfig's default."""
        add(FLAGS[field], default=getattr(_DEFAULTS, field), help=help, **kwargs)

    option("model", f"one of: {', '.join(model_names())}", choices=model_names(), metavar="NAME")
    option("data", _DATA_HELP, metavar="SOURCE")
    option("out", "output directory; rerun with it to resume")
    option("epochs", "training epochs", type=int)
    option("batch_size", "GLOBAL batch size, split evenly across replicas and workers", type=int)
    option(
        "image_size",
        "default: 16 for digits, else 32 for presets and 224 for named models, "
        "rounded up to a multiple of the model's stride",
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
    option("learning_rate", "peak learning rate", type=float)
    option("min_learning_rate", "learning rate at the end of the cosine decay", type=float)
    option("warmup_epochs", "epochs of linear warmup", type=float)
    option("weight_decay", "AdamW weight decay", type=float)
    option("clipnorm", "global gradient norm clip; 0 disables", type=float)
    option("label_smoothing", "label smoothing of the cross-entropy", type=float)
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
        "image split evaluated after every epoch to select best.keras; default: the "
        "source's 'validation' split (digits, and dir: data without a validation folder, hold "
        "it out of the training images; TFDS data without one holds out the last 10%% of "
        "'train')",
    )
    option("data_dir", "TFDS data directory")
    option("sequence_length", "ListOps sequence length", type=int)
    option("train_examples", "ListOps training examples", type=int)
    option("eval_examples", "ListOps validation and test examples (each)", type=int)
    option("seed", "seed of weights, data and augmentation", type=int)
    option(
        "deterministic",
        "reproducible data order and augmentation (slower with --augment)",
        action="store_true",
    )
    option(
        "on_bad_image",
        "a corrupt image file of dir: data: error (naming it), or skip (counted)",
        choices=("error", "skip"),
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
    from keras_fourier.validation import check_positive_int

    try:
        check_positive_int("--batch-size", args.batch_size)
        check_positive_int("--eval-examples", args.eval_examples)
        model_file = resolve_model_file(args.model)
        metrics = evaluate(
            model_file,
            args.data,
            split=args.split,
            batch_size=args.batch_size,
            data_dir=args.data_dir,
            eval_examples=args.eval_examples,
        )
    except (FileNotFoundError, ValueError) as error:
        print(f"keras-fourier evaluate: error: {error}", file=sys.stderr)
        return 2
    except NonFiniteLossError as error:
        print(f"keras-fourier evaluate: error: {error}", file=sys.stderr)
        return 1
    count = count_examples(args.data, args.split, args.data_dir) if args.data != "listops" else None
    size = "" if count is None else f", {count:,} examples"
    print(f"scored {model_file} on data {args.data!r}, split {args.split!r}{size}:")
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
        help=_DATA_HELP,
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


@dataclasses.dataclass(frozen=True)
class _ModuleCommand:
    """A subcommand whose arguments and runner are its module's `add_arguments` and `run`."""

    name: str
    module: str
    help: str
    description: str
    show_defaults: bool = True

    def add_parser(self, commands) -> None:
        """Adds the subcommand to `commands`, importing its module only now."""
        module = importlib.import_module(self.module)
        parser = commands.add_parser(
            self.name,
            help=self.help,
            description=self.description,
            formatter_class=(
                argparse.ArgumentDefaultsHelpFormatter
                if self.show_defaults
                else argparse.HelpFormatter
            ),
        )
        module.add_arguments(parser)
        parser.set_defaults(func=module.run)


_MODULE_COMMANDS = (
    _ModuleCommand(
        "export",
        "keras_fourier.export.command",
        help="export a model as a TF Serving SavedModel, builtin-only TFLite and ONNX files",
        description=(
            "Write OUT/NAME/VERSION/ (TF Serving SavedModel, signatures serving_default and "
            "serving_bytes), OUT/NAME[_QUANTIZATION].tflite (TFLite builtin ops only) and, with "
            "--format ...,onnx, OUT/NAME.onnx (standard ONNX ops, run in onnxruntime), each "
            "reloaded and checked against Keras. MODEL is a .keras file or a builder name "
            "built with --weights, --image-size and --classes; see export/README.md."
        ),
        show_defaults=False,
    ),
    _ModuleCommand(
        "flops",
        "keras_fourier.flop_count",
        help="count a model's FLOPs in the papers' convention (one multiply-add = one FLOP)",
        description=(
            "Print the FLOPs of one input as GFNet's and HorNet's tables count them: "
            "one multiply-add = one FLOP, plus N*C*ceil(log2 N) per 2D FFT. MODEL is a "
            ".keras file or a model name built with random weights."
        ),
    ),
    _ModuleCommand(
        "bench",
        "keras_fourier.bench",
        help="measure a model's throughput, latency and memory, or the mixers' scaling",
        description=(
            "Model mode (MODEL: a model name, .keras or .tflite file): inference and "
            "training-step img/s, batch-1 latency, peak memory, FLOPs and the fraction of "
            "this machine's matmul rate in the compute dtype of --precision (float32, bf16, "
            "int8), with --agreement against float32. Scaling mode (--scaling): one block "
            "(mixer + MLP) at width 384, latency and peak memory against the token count, "
            "plotted. "
            "Writes JSON and CSV (and PNG) into --out."
        ),
    ),
    _ModuleCommand(
        "predict",
        "keras_fourier.imagenet.predict",
        help="print the top classes of images, with probabilities",
        description=(
            "Print the top classes of each IMAGE with their probabilities. MODEL is the run "
            "folder that train printed or a .keras file (a trained model knows its class names "
            "and is fed images as its run evaluated them), or a builder name built with "
            "--weights (default 'imagenet') and --image-size: ImageNet-1k classes, images "
            "resized (bicubic) and centre-cropped as the official release was evaluated."
        ),
        show_defaults=False,
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `keras-fourier`: train, evaluate and `_MODULE_COMMANDS`.

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
    for command in _MODULE_COMMANDS:
        command.add_parser(commands)
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
    try:
        return args.func(args)
    except ValueError as error:  # a bad argument or input: its message names it
        print(f"keras-fourier {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
