"""The `keras-fourier` command line.

``keras-fourier train`` with no arguments is the README's main job: it
trains `gfnet_tiny` on the embedded digits, evaluates it on the held-out
split, saves it and prints ``test_accuracy=<value>`` as its last line.
Running it again with the same ``--out`` resumes an interrupted run, or
only evaluates a finished one. ``keras-fourier evaluate`` scores a saved
model.

Each subcommand NAME has two modules: ``keras_fourier.cli.NAME`` declares its
arguments and ``keras_fourier.commands.NAME`` runs it. This package and the
tables its arguments read (model names, settings) are keras-free, so the
command parses its arguments, and answers ``--help`` or an argument error,
without loading TensorFlow; it loads TensorFlow and the subcommands' code
(:mod:`keras_fourier.commands`) only to run one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from keras_fourier import _startup
from keras_fourier.cli import bench, evaluate, export, flops, predict, train

# The subcommands, in the order `keras-fourier --help` lists them.
COMMANDS = (train, evaluate, export, flops, bench, predict)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `keras-fourier`: one subcommand per module of `COMMANDS`.

    Returns:
        An `argparse.ArgumentParser` whose parsed namespace has `command`,
        the name of the subcommand to run.

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
    for command in COMMANDS:
        subcommand = commands.add_parser(
            command.NAME,
            help=command.HELP,
            description=command.DESCRIPTION,
            formatter_class=(
                argparse.ArgumentDefaultsHelpFormatter
                if command.SHOW_DEFAULTS
                else argparse.HelpFormatter
            ),
        )
        command.add_arguments(subcommand)
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
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Runs a parsed subcommand: loads TensorFlow (quietly) and the subcommand's code, then runs it.

    Args:
        args: arguments parsed by :func:`build_parser`, with `argv`, the
            arguments they were parsed from.

    Returns:
        The exit status: the subcommand's, or 2 after printing the message of
        a `ValueError` (a bad argument or input, which it names).

    Example:
        >>> run(build_parser().parse_args(["flops", "gfnet_ti"]))  # doctest: +SKIP
        0
    """
    _startup.start_tensorflow()
    # The package's one function-level import of its own code (tests/test_imports.py): the
    # subcommands load TensorFlow, which parsing the arguments and --help never need.
    from keras_fourier import commands

    try:
        return getattr(commands, args.command).run(args)
    except ValueError as error:  # a bad argument or input: its message names it
        print(f"keras-fourier {args.command}: error: {error}", file=sys.stderr)
        return 2
