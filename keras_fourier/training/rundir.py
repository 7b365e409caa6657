"""Run-folder mechanics: one run per folder, and the run's identity.

Every file of a run folder is written atomically
(:func:`keras_fourier.fileio.atomic_save`).
A folder is held by one run at a time (:class:`RunLock`): an exclusive
`fcntl.flock` on ``run.lock``, which also records the holder's pid. The
kernel drops the lock when its process dies, so a lock left by a killed
run is taken over by the next one.

``run.json`` records the run's identity (model, data, image size,
hyper-parameters, package version) and, once it is finished, its held-out
result (:func:`check_identity`, :func:`read_run_record`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from typing import Any

from keras_fourier.fileio import atomic_write_text, read_json, warn
from keras_fourier.run_folder import RunFolder


class RunFolderBusyError(RuntimeError):
    """Another live process holds the run folder."""


class RunConfigError(ValueError):
    """The run folder holds a run with a different configuration."""


class RunLock:
    """An exclusive lock on a run folder, held while a run writes it.

    `acquire` takes an exclusive, non-blocking `fcntl.flock` on
    ``<folder>/run.lock`` and writes the holder's pid into it; `release`
    removes the file and unlocks. A lock file whose process died (even by
    SIGKILL) is no longer locked, so the next run takes it over.

    Args:
        folder: the run folder (must exist when acquiring).

    Raises:
        RunFolderBusyError: from `acquire`, naming the folder and the
            holder's pid, when a live process holds it.

    Example:
        >>> with RunLock("runs/default"):  # doctest: +SKIP
        ...     ...
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = os.fspath(folder)
        self.path = RunFolder(self.folder).lock
        self._file = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._file is not None

    def acquire(self) -> RunLock:
        """Takes the lock or raises `RunFolderBusyError`; returns self."""
        import fcntl

        while self._file is None:
            file = open(self.path, "a+")  # noqa: SIM115 (held open while locked)
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES):
                    file.close()
                    raise
                file.seek(0)
                holder = file.read().strip() or "unknown"
                file.close()
                raise RunFolderBusyError(
                    f"Run folder {self.folder!r} is in use by another run (pid {holder}, lock "
                    f"file {self.path!r}). Wait for it to finish, stop it, or pass another --out."
                ) from None
            # The holder we waited for may have removed the file after we opened it:
            # only the lock on the file that is at `path` now counts.
            try:
                same = os.path.samestat(os.fstat(file.fileno()), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if not same:
                file.close()
                continue
            file.seek(0)
            previous = file.read().strip()
            if previous.isdigit() and int(previous) != os.getpid():
                warn(f"taking over the lock of {self.folder!r} left by pid {previous}, which ended")
            file.seek(0)
            file.truncate()
            file.write(f"{os.getpid()}\n")
            file.flush()
            os.fsync(file.fileno())
            self._file = file
        return self

    def release(self) -> None:
        """Removes the lock file and releases the lock (no-op if not held)."""
        if self._file is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)
        self._file.close()
        self._file = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()


def read_run_record(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The ``run.json`` record of a run folder, or None (missing or unreadable)."""
    return read_json(RunFolder(folder).run_record)


def write_run_record(folder: str | os.PathLike, record: dict[str, Any]) -> None:
    """Writes ``run.json`` atomically."""
    atomic_write_text(RunFolder(folder).run_record, json.dumps(record, indent=2, sort_keys=True))


def normalize(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


def check_identity(
    folder: str, stored: dict[str, Any], given: dict[str, Any], names: dict[str, str]
) -> None:
    """Raises `RunConfigError` listing the fields whose values differ.

    Args:
        folder: the run folder, for the message.
        stored: the identity recorded in ``run.json``.
        given: the identity of the run being started.
        names: {field: how to name it in the message}, e.g. CLI flags.

    Raises:
        RunConfigError: if any field differs.
    """
    given = normalize(given)
    differing = sorted(key for key in set(stored) | set(given) if stored.get(key) != given.get(key))
    if differing:
        lines = "\n".join(
            f"  {names.get(key, key)}: stored {stored.get(key)!r}, given {given.get(key)!r}"
            for key in differing
        )
        raise RunConfigError(
            f"Run folder {folder!r} holds a run with other settings:\n{lines}\n"
            "Rerun with the stored settings to resume or see it, or start a new run in "
            "another folder (--out), or delete this one."
        )
