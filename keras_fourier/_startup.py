"""Quiet start-up of the `keras-fourier` command: TensorFlow's C++ log lines are hidden.

TensorFlow prints about nine lines on stderr while it loads and looks for
GPUs (absl's "All log messages before absl::InitializeLog() ..." block twice,
"Could not find cuda drivers", CPU feature notes and, without a GPU,
``E0000 ... failed call to cuInit``). Most of them are written before
TF_CPP_MIN_LOG_LEVEL is read, so setting it is not enough. `keras_fourier`
imports this module before anything that loads TensorFlow; when the process
is the `keras-fourier` command (the console script or ``python -m
keras_fourier.cli``) it:

* sets TF_CPP_MIN_LOG_LEVEL=2 (C++ warnings and info hidden, errors shown);
* loads TensorFlow and lists its devices with stderr sent to a temporary
  file, then writes back every captured line that is not a C++ log line
  (Python warnings and errors are kept).

It does nothing when ``--tf-logs`` is on the command line, when the user
set TF_CPP_MIN_LOG_LEVEL, or in any other program (library users see
TensorFlow's logs as usual).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

SHOW_LOGS_FLAG = "--tf-logs"
COMMAND = "keras-fourier"
# absl/TSL lines ("I0000 00:00:1795431198.319884    5289 file.cc:31] ..."), the older
# "2026-01-01 12:00:00.000000: I tensorflow/..." form, absl's pre-initialisation banner and
# the second line of TensorFlow's CPU feature note.
_LOG_LINE = re.compile(
    rb"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ ]+:\d+\] "
    rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|To enable the following instructions: .* rebuild TensorFlow)"
)


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


def load_tensorflow_quietly() -> None:
    """Loads TensorFlow and finds its devices with the C++ log lines dropped from stderr.

    Example:
        >>> load_tensorflow_quietly()  # doctest: +SKIP
    """
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured if not tensorflow_log_line(line)]
            if kept:
                os.write(2, b"".join(kept))


if (
    is_command_line()
    and SHOW_LOGS_FLAG not in sys.argv
    and "TF_CPP_MIN_LOG_LEVEL" not in os.environ
):
    load_tensorflow_quietly()
