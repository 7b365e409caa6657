"""Quiet start-up: TensorFlow's C++ log lines are hidden, and a missing backend is named.

TensorFlow prints about nine lines on stderr while it loads and looks for
GPUs (absl's "All log messages before absl::InitializeLog() ..." block twice,
"Could not find cuda drivers", CPU feature notes and, without a GPU,
``E0000 ... failed call to cuInit``). Most of them are written before
TF_CPP_MIN_LOG_LEVEL is read, so setting it is not enough. `keras_fourier`
imports this module first and loads no framework itself;
:func:`start_tensorflow` then runs before TensorFlow loads, wherever it
loads first: a name of the API used, Keras or TensorFlow imported by the
program (:func:`when_keras_loads` watches for them), or the `keras-fourier`
command about to run a subcommand (``--help`` and argument errors answer
without loading TensorFlow). It:

* sets TF_CPP_MIN_LOG_LEVEL=2 (C++ warnings and info hidden, errors shown);
* loads TensorFlow and lists its devices with stderr sent to a temporary
  file, then writes back every captured line that is not a C++ log line
  (Python warnings and errors are kept).

It does nothing when the user set TF_CPP_MIN_LOG_LEVEL, when TensorFlow was
already imported, or after :func:`show_tensorflow_logs` (the command's
``--tf-logs``). :func:`native_output_filtered` does the same around later
calls that print from C++ (LiteRT's "Created TensorFlow Lite XNNPACK
delegate" line).

A KERAS_BACKEND naming a backend that is not installed stops the program
with one line naming the extra that installs it (:func:`missing_backend`):
`ImportError` at the first use of the API or import of Keras, exit status 2
for the command.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator

SHOW_LOGS_FLAG = "--tf-logs"
_PACKAGE = __name__.rpartition(".")[0]
# absl/TSL lines ("I0000 00:00:1795431198.319884    5289 file.cc:31] ..."), the older
# "2026-01-01 12:00:00.000000: I tensorflow/..." form, absl's pre-initialisation banner and
# the second line of TensorFlow's CPU feature note, the TFLite converter's quantization line
# and LiteRT's delegate line.
_LOG_LINE = re.compile(
    rb"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ ]+:\d+\] "
    rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|To enable the following instructions: .* rebuild TensorFlow"
    rb"|fully_quantize: \d+, inference_type: \d+, input_inference_type: "
    rb"|INFO: Created TensorFlow Lite XNNPACK delegate for CPU\.)"
)
# The package of each Keras backend, and the extra of keras-fourier that installs it.
BACKEND_PACKAGES = {"jax": ("jax", "jax"), "torch": ("torch", "torch")}


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


_show_logs = False


def show_tensorflow_logs() -> None:
    """Leaves TensorFlow's and LiteRT's C++ lines on stderr from now on (``--tf-logs``).

    Example:
        >>> show_tensorflow_logs()  # doctest: +SKIP
    """
    global _show_logs
    _show_logs = True


def _quiet_wanted() -> bool:
    return not (_USER_LOG_LEVEL or _show_logs)


def start_tensorflow() -> None:
    """Loads TensorFlow with its C++ start-up lines hidden, unless they are wanted.

    They are shown (TensorFlow is left to load as it does) when the user set
    TF_CPP_MIN_LOG_LEVEL or on the command line with ``--tf-logs``; nothing
    happens when TensorFlow is loaded already or not installed (a JAX or
    PyTorch machine, where the commands that need it say so). The command calls this before
    a subcommand runs (each loads TensorFlow: tf.data feeds every backend).

    Example:
        >>> start_tensorflow()  # doctest: +SKIP
    """
    if _quiet_wanted() and "tensorflow" not in sys.modules and _tensorflow_installed():
        load_tensorflow_quietly()


def _tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported: a JAX or PyTorch machine may have none (a GPU box)."""
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except ImportError:
        return False


class _KerasImport(importlib.abc.MetaPathFinder):
    """Finds the process's first `tensorflow` or `keras` import and wraps its loader.

    TensorFlow then loads quietly (:func:`load_tensorflow_quietly`'s filter,
    around the module's own code); once `keras` has loaded, `on_keras` runs
    (the package registers its serializable classes), and the finder leaves
    `sys.meta_path`. Until then it also wraps the loaders of the package's own
    modules, to count those being executed: Keras imported by one of them
    (``import keras_fourier.layers`` first in a process) runs `on_keras` once
    that outermost module is complete, since `on_keras` imports the package's
    modules and would otherwise meet the importing one half-initialised.
    """

    def __init__(self, on_keras: Callable[[], None]) -> None:
        self.on_keras = on_keras
        # keras_fourier modules being executed now; `on_keras` waits until none is (it
        # imports them: run inside one, it would meet that module half-initialised).
        self.package_depth = 0
        self.pending = False

    def find_spec(self, name: str, path=None, target=None):
        if name not in ("tensorflow", "keras") and not name.startswith(_PACKAGE + "."):
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, self)
                return spec
        return None

    def finish(self) -> None:
        """Leaves `sys.meta_path` and calls `on_keras`, once."""
        self.pending = False
        if self in sys.meta_path:
            sys.meta_path.remove(self)
            self.on_keras()


class _Loader(importlib.abc.Loader):
    """The loader of `tensorflow`, `keras` (run quietly; then `on_keras`) or a package module."""

    def __init__(self, loader: importlib.abc.Loader, finder: _KerasImport) -> None:
        self.loader, self.finder = loader, finder

    def __getattr__(self, name: str):
        # The rest of the wrapped loader's interface: runpy's get_code, resource readers.
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.loader  # the module's own loader
        if module.__name__.startswith(_PACKAGE + "."):
            self.finder.package_depth += 1
            try:
                self.loader.exec_module(module)
            finally:
                self.finder.package_depth -= 1
            if self.finder.package_depth == 0 and self.finder.pending:
                self.finder.finish()
            return
        message = missing_backend() if module.__name__ == "keras" else None
        if message is not None:
            raise ImportError(message)
        if "tensorflow" in sys.modules and module.__name__ == "keras":
            self.loader.exec_module(module)  # TensorFlow is loading (quietly) or loaded
        elif _quiet_wanted() and (
            module.__name__ == "tensorflow" or keras_backend() == "tensorflow"
        ):
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
            os.environ[_SET_HERE] = "1"
            with native_output_filtered():
                self.loader.exec_module(module)
                sys.modules["tensorflow"].config.list_physical_devices()
        else:
            self.loader.exec_module(module)
        if module.__name__ == "keras":
            if self.finder.package_depth:
                self.finder.pending = True  # after the package's module that imported Keras
            else:
                self.finder.finish()


def when_keras_loads(on_keras: Callable[[], None]) -> None:
    """Calls `on_keras` once Keras is loaded (now, if it is); TensorFlow loads quietly.

    `import keras_fourier` registers its serializable classes with Keras
    this way, so that ``keras.saving.load_model`` finds them whenever Keras
    is imported, before or after it, without loading Keras itself: Keras
    resolves a saved object by its registered name and imports the module a
    config names only for its own packages (``keras.src.saving.
    serialization_lib._retrieve_class_or_fn``). A KERAS_BACKEND whose
    package is missing then fails that import with :func:`missing_backend`'s line.

    Args:
        on_keras: called once, with no arguments.

    Example:
        >>> when_keras_loads(lambda: importlib.import_module("keras_fourier.layers"))
    """
    if "keras" in sys.modules:
        on_keras()
    elif not any(isinstance(finder, _KerasImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _KerasImport(on_keras))
