"""`keras-fourier train`: the README's main job, and any training run of `keras_fourier.training`.

``keras-fourier train`` with no arguments trains `gfnet_tiny` on the embedded
digits, evaluates it on the held-out split, saves it and prints
``test_accuracy=<value>`` as its last line. Running it again with the same
``--out`` resumes an interrupted run, or only shows a finished one. Its
arguments are declared in :mod:`keras_fourier.cli.train`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from keras_fourier.cli.train import FLAGS
from keras_fourier.commands.arguments import metrics_line
from keras_fourier.data import AugmentConfig
from keras_fourier.run_folder import RunFolder
from keras_fourier.training import (
    NonFiniteLossError,
    RunFolderBusyError,
    TrainConfig,
    TrainResult,
    train,
)
from keras_fourier.training.callbacks import read_checkpoint_record


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier train`; returns the exit status."""
    options = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(TrainConfig)
        if hasattr(args, field.name)
    }
    options["augment"] = AugmentConfig() if args.augment == "deit" else None
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
    folder = RunFolder(result.out)
    files = {
        folder.MODEL: f"the model selected on the validation split{selected}",
        folder.BEST: "checkpoint of the best validation accuracy",
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
