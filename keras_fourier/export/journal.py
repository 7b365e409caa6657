"""Crash-safe placement of export outputs: a staging folder, an intent journal, and recovery.

An export never writes an output where it will be served. Every output of
one call is written into a hidden staging folder ``FOLDER/.export-<pid>-*``
(inside the folder it is placed in, so every later rename stays on one
filesystem), checked there, and only then placed, in one commit:

1. With the folder locked (`fcntl.flock` on the folder itself: no lock file),
   ``journal.json`` is written into the staging folder (atomically, fsynced):
   for each output its staged path, its final path, and the staged inode.
2. Each output is moved into place: swapped with the existing one in one
   atomic `renameat2(RENAME_EXCHANGE)` on Linux, else the existing one is
   renamed into the staging folder and the new one renamed into place (a
   gap of two renames); a new path is a plain rename.
3. The staging folder, now holding the replaced copies, is removed.

Recovery (:func:`recover`), run by every command that opens the folder
(`keras-fourier export`, `export.saved_model`, and through
:func:`recover_around` `keras-fourier bench` on a `.tflite` in it),
looks at staging folders whose process is dead: one without a journal is
removed (nothing was placed: the old outputs are whole), one with a journal
is rolled forward (the moves not yet done are done; an output whose final
path already holds the recorded inode is done), then removed. So after a
kill -9 at any moment, the next command leaves either every old output or
every new output of the interrupted call, complete, and no hidden copies.
Leftovers of keras_fourier 0.1.0 (``.NAME.<pid>.previous`` and
``.<version>.<pid>.replaced``) are restored when their output is missing,
else removed; the writers' own staging folders and temporary files of dead
processes are removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from keras_fourier.fileio import (
    atomic_write_text,
    pid_alive,
    remove_stale_directories,
    remove_stale_temporaries,
)

PREFIX = ".export-"
JOURNAL = "journal.json"
_LEGACY = re.compile(r"^\.(?P<base>.+)\.(?P<pid>\d+)\.(?:previous|replaced)$")
# Staging folders of the SavedModel and TFLite writers (named by pid), and of 0.1.0 (by uuid).
_OLD_STAGING = (".staging-", ".tflite-staging-")
_UNOWNED_STAGING = re.compile(r"\.staging-\d+-[0-9a-f]{32}$")
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@contextlib.contextmanager
def locked(folder: str) -> Iterator[None]:
    """Holds an exclusive `flock` on `folder` itself (blocking) for the body."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def _exchange(staged: str, final: str) -> bool:
    """Swaps two existing paths atomically; False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(staged), _AT_FDCWD, os.fsencode(final), _RENAME_EXCHANGE):
        code = ctypes.get_errno()
        if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
            return False
        raise OSError(code, os.strerror(code), final)
    return True


def _inode(path: str) -> int | None:
    try:
        return os.lstat(path).st_ino
    except FileNotFoundError:
        return None


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def _place(staging: str, index: int, staged: str, final: str, inode: int) -> None:
    """Moves `staged` (whose inode is `inode`) to `final`; does nothing if already done."""
    if _inode(final) == inode or _inode(staged) != inode:
        return
    if os.path.lexists(final):
        if _exchange(staged, final):
            return
        _rename(final, os.path.join(staging, f"previous-{index}"))
    _rename(staged, final)


def _rename(source: str, target: str) -> None:
    os.replace(source, target)


def _roll_forward(staging: str, journal: dict[str, Any]) -> None:
    for index, (staged, final, inode) in enumerate(journal["moves"]):
        _place(staging, index, staged, final, inode)
    shutil.rmtree(staging, ignore_errors=True)


def _read_journal(staging: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(staging, JOURNAL)) as file:
            journal = json.load(file)
        moves = journal["moves"]
        if not all(isinstance(move, list) and len(move) == 3 for move in moves):
            raise ValueError("bad moves")
    except (OSError, ValueError, KeyError, TypeError):
        return None  # No (complete) journal: the commit never began.
    return journal


def recover(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """Finishes or undoes the interrupted exports of dead processes in `folder`.

    See the module docstring for the guarantee. Does nothing (and writes
    nothing) when `folder` holds no leftovers.

    Args:
        folder: an export folder (``--out``) or a model's base folder.

    Returns:
        The journals of the exports that were completed (their "command"
        says which call it was), in no particular order.

    Example:
        >>> recover("models")
        []
    """
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        return []
    for prefix in _OLD_STAGING:
        remove_stale_directories(folder, prefix)
    for entry in os.scandir(folder):
        if _UNOWNED_STAGING.match(entry.name) and entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
    remove_stale_temporaries(folder)

    def leftovers() -> list[os.DirEntry]:
        found = []
        for entry in os.scandir(folder):
            if entry.name.startswith(PREFIX):
                pid = entry.name[len(PREFIX) :].split("-")[0]
            elif (match := _LEGACY.match(entry.name)) is not None:
                pid = match.group("pid")
            else:
                continue
            if pid.isdigit() and not pid_alive(int(pid)):
                found.append(entry)
        return found

    if not leftovers():
        return []
    completed = []
    with locked(folder):
        for entry in leftovers():
            if entry.name.startswith(PREFIX):
                journal = _read_journal(entry.path)
                if journal is None:
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    _roll_forward(entry.path, journal)
                    completed.append(journal)
                continue
            target = os.path.join(folder, _LEGACY.match(entry.name).group("base"))
            if os.path.lexists(target):
                _remove(entry.path)
            else:
                os.replace(entry.path, target)
    return completed


def recover_around(path: str | os.PathLike) -> None:
    """Before `path` (an exported file or folder) is read: completes interrupted exports there.

    The folders that may hold the staging folder of an export that placed
    `path` (its parent, grandparent and great-grandparent: ``OUT`` of
    ``OUT/NAME.tflite`` and ``OUT/NAME/VERSION``, the base folder of an
    `export.saved_model` version) are recovered (:func:`recover`) when they
    hold export leftovers, after any commit in progress there (holding the
    folder's lock) is over; folders without leftovers are only listed.

    Args:
        path: the file or folder about to be read.

    Raises:
        ValueError: naming the folder, when its interrupted export cannot be
            completed (no write access): `path` may be half placed.

    Example:
        >>> recover_around("models/gfnet_ti.tflite")
    """
    folder = os.path.abspath(os.fspath(path))
    for _ in range(3):
        folder, parent = os.path.dirname(folder), folder
        if folder == parent:
            return
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        if not any(name.startswith(PREFIX) or _LEGACY.match(name) for name in names):
            continue
        try:
            with locked(folder):
                pass  # a live export's commit holds the lock until every output is placed
            recover(folder)
        except OSError as error:
            raise ValueError(
                f"{folder!r} holds an interrupted export that cannot be completed "
                f"({error.strerror or error}); rerun keras-fourier export on it with write "
                f"access before reading {os.fspath(path)!r}."
            ) from error


class Transaction:
    """One export call's staging folder in `folder`, committed all at once or not at all.

    Args:
        folder: the existing folder the outputs are placed in (or below).

    Example:
        >>> with Transaction("models") as staging:
        ...     write(os.path.join(staging.path, "m.tflite"))
        ...     staging.commit([("m.tflite", "models/m.tflite")], overwrite=False)
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = os.fspath(folder)
        self.path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=self.folder)
        self.committed = False

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, *exc_info) -> None:
        if not self.committed:
            shutil.rmtree(self.path, ignore_errors=True)

    def commit(
        self,
        moves: list[tuple[str, str]],
        *,
        overwrite: bool,
        command: dict[str, Any] | None = None,
        before_place=None,
    ) -> None:
        """Places every staged output at its final path (see the module docstring).

        Args:
            moves: (path relative to the staging folder, final path) pairs;
                final paths are inside `folder`, their folders existing.
            overwrite: whether existing final paths may be replaced; without
                it, one that appeared since the call began is refused
                (ValueError) and nothing is placed.
            command: what the call was, stored in the journal.
            before_place: called with the folder locked, before anything is
                placed (it may raise to refuse).
        """
        with locked(self.folder):
            if not overwrite:
                taken = [final for _, final in moves if os.path.lexists(final)]
                if taken:
                    raise ValueError(
                        f"{taken[0]!r} appeared while this export ran (another export?); "
                        "pass overwrite=True to replace it."
                    )
            if before_place is not None:
                before_place()
            entries = []
            for relative, final in moves:
                staged = os.path.join(self.path, relative)
                entries.append([staged, os.path.abspath(final), os.lstat(staged).st_ino])
            atomic_write_text(
                os.path.join(self.path, JOURNAL),
                json.dumps({"moves": entries, "command": command or {}}),
            )
            self.committed = True
            _roll_forward(self.path, {"moves": entries})
