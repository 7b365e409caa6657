"""Quiet start-up: TensorFlow's C++ log lines are hidden, and a missing backend is named.

TensorFlow prints about nine lines on stderr while it loads and looks for
GPUs (absl's "All log messages before absl::InitializeLog() ..." block twice,
"Could not find cuda drivers", CPU feature notes and, without a GPU,
``E0000 ... failed call to cuInit``). Most of them are written before
TF_CPP_MIN_LOG_LEVEL is read, so setting it is not enough. `keras_fourier`
imports this module before anything that loads TensorFlow; in any program
that imports `keras_fourier` under the TensorFlow backend (a script, a
notebook) it calls :func:`start_tensorflow` at once, which:

* sets TF_CPP_MIN_LOG_LEVEL=2 (C++ warnings and info hidden, errors shown);
* loads TensorFlow and lists its devices with stderr sent to a temporary
  file, then writes back every captured line that is not a C++ log line
  (Python warnings and errors are kept).

The `keras-fourier` command (the console script or ``python -m
keras_fourier.cli``) calls it once its arguments are parsed and a
subcommand is about to run, whatever the backend: ``--help`` and argument
errors answer without loading TensorFlow. It does nothing when the user set
TF_CPP_MIN_LOG_LEVEL, when TensorFlow was already imported, or on the
command line with ``--tf-logs``.
:func:`native_output_filtered` does the same around later calls that print
from C++ (LiteRT's "Created TensorFlow Lite XNNPACK delegate" line).

Before that, a KERAS_BACKEND naming a backend that is not installed stops
the program with one line naming the extra that installs it
(:func:`missing_backend`): `ImportError` for ``import keras_fourier``, exit
status 2 for the command.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator

SHOW_LOGS_FLAG = "--tf-logs"
COMMAND = "keras-fourier"
# absl/TSL lines ("I0000 00:00:1795431198.319884    5289 file.cc:31] ..."), the older
# "2026-01-01 12:00:00.000000: I tensorflow/..." form, absl's pre-initialisation banner and
# the second line of TensorFlow's CPU feature note.
_LOG_LINE = re.compile(
    rb"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ ]+:\d+\] "
    rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|To enable the following instructions: .* rebuild TensorFlow"
    rb"|INFO: Created TensorFlow Lite XNNPACK delegate for CPU\.)"
)
# The package of each Keras backend, and the extra of keras-fourier that installs it.
BACKEND_PACKAGES = {"jax": ("jax", "jax"), "torch": ("torch", "torch")}


def is_command_line() -> bool:
    """Whether this process is the `keras-fourier` command.

    Returns:
        True for the console script and for ``python -m keras_fourier.cli``.

    Example:
        >>> is_command_line()  # under pytest
        False
    """
    program = os.path.basename(sys.argv[0]) if sys.argv else ""
    if os.path.splitext(program)[0] in (COMMAND, f"{COMMAND}-script"):
        return True
    arguments = list(getattr(sys, "orig_argv", ()))
    return any(
        arguments[index : index + 2] == ["-m", "keras_fourier.cli"]
        for index in range(len(arguments))
    )


def tensorflow_log_line(line: bytes) -> bool:
    """Whether a line on stderr is one of TensorFlow's C++ (absl) log lines.

    Args:
        line: one line, as bytes.

    Returns:
        True for C++ log lines, False for anything else (Python output).

    Example:
        >>> tensorflow_log_line(b"E0000 00:00:1795431203.027078    5289 cuda_platform.cc:52] x")
        True
    """
    return bool(_LOG_LINE.match(line))


def keras_backend() -> str:
    """The Keras backend this process will use, read as Keras reads it, without importing Keras.

    Returns:
        KERAS_BACKEND, else the "backend" of ``$KERAS_HOME/keras.json``
        (``~/.keras``), else "tensorflow".

    Example:
        >>> keras_backend()  # doctest: +SKIP
        'tensorflow'
    """
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as file:
            backend = json.load(file).get("backend")
    except (OSError, ValueError, AttributeError):
        backend = None
    return backend if isinstance(backend, str) and backend else "tensorflow"


def missing_backend() -> str | None:
    """A one-line message when KERAS_BACKEND names a backend that is not installed, else None.

    Returns:
        The message (naming the extra to install), or None.

    Example:
        >>> os.environ["KERAS_BACKEND"] = "jax"
        >>> missing_backend()  # without JAX installed  # doctest: +SKIP
        'KERAS_BACKEND=jax, but JAX is not installed: pip install "keras-fourier[jax]"'
    """
    backend = os.environ.get("KERAS_BACKEND", "")
    if backend not in BACKEND_PACKAGES:
        return None
    package, extra = BACKEND_PACKAGES[backend]
    if importlib.util.find_spec(package) is not None:
        return None
    name = {"jax": "JAX", "torch": "PyTorch"}[backend]
    return (
        f"KERAS_BACKEND={backend}, but {name} is not installed: "
        f'pip install "keras-fourier[{extra}]" (or unset KERAS_BACKEND for TensorFlow)'
    )


@contextlib.contextmanager
def native_output_filtered() -> Iterator[None]:
    """Sends stderr (file descriptor 2) to a temporary file; writes back all but C++ log lines.

    For calls into TensorFlow or LiteRT that print from C++; Python warnings
    and errors written meanwhile are kept, in order. Nothing is filtered
    when the user set TF_CPP_MIN_LOG_LEVEL or on the command line with
    ``--tf-logs``.

    Example:
        >>> with native_output_filtered():
        ...     interpreter = Interpreter(model_content=content)  # doctest: +SKIP
    """
    if not _quiet_wanted():
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured if not tensorflow_log_line(line)]
            if kept:
                os.write(2, b"".join(kept))


def load_tensorflow_quietly() -> None:
    """Loads TensorFlow and finds its devices with the C++ log lines dropped from stderr.

    Example:
        >>> load_tensorflow_quietly()  # doctest: +SKIP
    """
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    os.environ[_SET_HERE] = "1"  # subprocesses filter too: the level is not the user's
    with native_output_filtered():
        import tensorflow as tf

        tf.config.list_physical_devices()


_SET_HERE = "KERAS_FOURIER_SET_TF_LOG_LEVEL"
_USER_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL" in os.environ and os.environ.get(_SET_HERE) != "1"


def _quiet_wanted() -> bool:
    if _USER_LOG_LEVEL:
        return False
    return not (is_command_line() and SHOW_LOGS_FLAG in sys.argv)


def start_tensorflow() -> None:
    """Loads TensorFlow with its C++ start-up lines hidden, unless they are wanted.

    They are shown (TensorFlow is left to load as it does) when the user set
    TF_CPP_MIN_LOG_LEVEL or on the command line with ``--tf-logs``; nothing
    happens when TensorFlow is loaded already. The command calls this before
    a subcommand runs (each loads TensorFlow: tf.data feeds every backend).

    Example:
        >>> start_tensorflow()  # doctest: +SKIP
    """
    if _quiet_wanted() and "tensorflow" not in sys.modules:
        load_tensorflow_quietly()


def _start() -> None:
    message = missing_backend()
    if message is not None:
        if is_command_line():
            print(f"{COMMAND}: error: {message}", file=sys.stderr)
            raise SystemExit(2)
        raise ImportError(message)
    if is_command_line():
        return  # the command calls start_tensorflow once its arguments are parsed
    if keras_backend() == "tensorflow":
        start_tensorflow()


_start()
