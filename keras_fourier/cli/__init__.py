"""The `keras-fourier` command line.

``keras-fourier train`` with no arguments is the README's main job: it
trains `gfnet_tiny` on the embedded digits, evaluates it on the held-out
split, saves it and prints ``test_accuracy=<value>`` as its last line.
Running it again with the same ``--out`` resumes an interrupted run, or
only evaluates a finished one. ``keras-fourier evaluate`` scores a saved
model.

Each subcommand NAME is one module, ``keras_fourier.cli.NAME``: its
`NAME`, `HELP`, `DESCRIPTION`, `SHOW_DEFAULTS` and `add_arguments` at the
top, keras-free like the tables they read (model names, settings), and
``run(args)``, which imports the library when it runs and returns the exit
status. The command parses its arguments, and answers ``--help`` or an
argument error, without loading TensorFlow.

Every error is one line on stderr, ``keras-fourier NAME: error: MESSAGE``,
printed by :func:`run`: exit status 2 for a bad argument (argparse's, or a
`ValueError`, `TypeError` or `FileNotFoundError` of the library, whose
message names it), 1 for a failure (a `CommandError` that `run(args)`
raised, or an `OSError`), ``keras-fourier NAME: interrupted`` with 130 for Ctrl-C
(SIGINT) and ``keras-fourier NAME: terminated`` with 143 for SIGTERM. Both
unwind the command like an exception, so every file it was writing is
either complete (written atomically) or removed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType

from keras_fourier import _startup
from keras_fourier.cli import bench, evaluate, export, flops, predict, train
from keras_fourier.cli.arguments import CommandError

# The subcommands, in the order `keras-fourier --help` lists them.
COMMANDS = (train, evaluate, export, flops, bench, predict)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's `KeyboardInterrupt` (exit status 143)."""


def _in_finalizer(frame: FrameType | None) -> bool:
    """Whether `frame` runs in a garbage-collector callback or a ``__del__`` method.

    An exception raised there is printed ("Exception ignored in ...") and
    dropped, and the command would go on (JAX's collector callback is often
    where a signal lands during an export).
    """
    callbacks = {getattr(callback, "__code__", None) for callback in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    """The handler of SIGINT and SIGTERM: raises `KeyboardInterrupt` or :class:`Terminated`."""
    if _in_finalizer(frame):  # raised here it would be dropped: delivered again just after
        threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()
        return
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """While the block runs (in the main thread), SIGINT and SIGTERM raise (:func:`_raise_stop`).

    A signal the caller ignores (``nohup``, a background job) stays ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum, handler in previous.items():
        if handler != signal.SIG_IGN:
            signal.signal(signum, _raise_stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: a handler set outside Python, left as it is
                signal.signal(signum, handler)


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
    with _signals_raise():
        try:
            message = _startup.missing_backend()
            if message is not None:
                print(f"keras-fourier: error: {message}", file=sys.stderr)
                return 2
            argv = list(sys.argv[1:] if argv is None else argv)
            args = build_parser().parse_args(argv)
            args.argv = argv
            return run(args)
        except KeyboardInterrupt as interrupt:  # before a subcommand started
            status, message = _stopped(interrupt)
            print(f"keras-fourier: {message}", file=sys.stderr)
            return status


def _stopped(interrupt: KeyboardInterrupt) -> tuple[int, str]:
    """The exit status and message of Ctrl-C (130) or SIGTERM (143), with the advice it carries."""
    terminated = isinstance(interrupt, Terminated)
    what = "terminated" if terminated else "interrupted"
    return 143 if terminated else 130, "; ".join([what, *map(str, interrupt.args)])


def run(args: argparse.Namespace) -> int:
    """Runs a parsed subcommand: loads TensorFlow (quietly), then its module's `run(args)`.

    Args:
        args: arguments parsed by :func:`build_parser`, with `argv`, the
            arguments they were parsed from.

    Returns:
        The exit status: the subcommand's, or, after one line on stderr, 2 for
        a bad argument, 1 for a :class:`CommandError`, an `OSError` or an error
        whose `exit_status` is 1 (a failed download), 130 for
        Ctrl-C, 143 for SIGTERM (:class:`Terminated`, once :func:`main` set it up).

    Example:
        >>> run(build_parser().parse_args(["flops", "gfnet_ti"]))  # doctest: +SKIP
        0
    """
    if args.tf_logs:
        _startup.show_tensorflow_logs()
    status, message = 0, None
    try:
        _startup.start_tensorflow()
        status = _COMMANDS[args.command].run(args)
    except CommandError as error:
        status, message = error.status, f"error: {error}"
    except (ValueError, TypeError, FileNotFoundError) as error:  # its message names the argument
        status, message = getattr(error, "exit_status", 2), f"error: {error}"
    except OSError as error:  # a read or write that failed: what, and where
        where = f": {error.filename}" if error.filename else ""
        status, message = 1, f"error: {error.strerror or error}{where}"
    except KeyboardInterrupt as interrupt:  # its message, if any, says what to do next
        status, message = _stopped(interrupt)
    if message is not None:
        print(f"keras-fourier {args.command}: {message}", file=sys.stderr)
    return status


_COMMANDS = {command.NAME: command for command in COMMANDS}
