"""Files that are never half-written: atomic saves, their cleanup, and tolerant reads.

Every file keras_fourier writes goes through :func:`atomic_save`: it is
written to a hidden temporary file in the same folder (named with the
writer's pid), flushed and fsynced, then renamed over the target with
`os.replace` and the folder fsynced, so a kill, a full disk or a crash
leaves either the old file or the new one. Temporaries of dead writers are
removed by :func:`remove_stale_temporaries`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any


def warn(message: str) -> None:
    """Prints one warning line to stderr, prefixed with ``keras-fourier: warning:``."""
    print(f"keras-fourier: warning: {message}", file=sys.stderr, flush=True)


def _fsync_directory(directory: str) -> None:
    with contextlib.suppress(OSError):
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def atomic_save(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Writes `path` atomically through `write(temporary_path)`.

    `write` writes the whole content to the temporary path it is given, a
    hidden file in the same folder with the same suffix (``.keras``,
    ``.weights.h5``, ...), which Keras's savers require. The temporary file
    is then fsynced and renamed over `path`, and the folder fsynced; if
    `write` fails, the temporary file is removed and `path` is untouched.

    Args:
        path: the file to write; its folder must exist.
        write: writes a complete file at the path it receives.

    Example:
        >>> atomic_save("runs/a/best.keras", model.save)  # doctest: +SKIP
    """
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    suffix = name[name.find(".") :] if "." in name else ""
    temporary = os.path.join(directory, f".{name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp{suffix}")
    try:
        write(temporary)
        with open(temporary, "rb+") as file:
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
    _fsync_directory(directory)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Writes `text` to `path` atomically (see :func:`atomic_save`)."""

    def write(temporary: str) -> None:
        with open(temporary, "w", newline="") as file:
            file.write(text)

    atomic_save(path, write)


def atomic_write_bytes(path: str | os.PathLike, content: bytes) -> None:
    """Writes `content` to `path` atomically (see :func:`atomic_save`)."""

    def write(temporary: str) -> None:
        with open(temporary, "wb") as file:
            file.write(content)

    atomic_save(path, write)


def read_json(path: str | os.PathLike) -> dict[str, Any] | None:
    """A JSON object file, or None when it is missing or unreadable (with a warning)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as file:
            value = json.load(file)
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as error:
        warn(f"ignoring unreadable {path} ({type(error).__name__}: {error})")
        return None
    return value


def read_class_names(package: str, file_name: str, count: int) -> tuple[str, ...]:
    """The class names a text file shipped in `package` lists, one a line, "#" lines skipped.

    Args:
        package: the package holding the file, e.g. "keras_fourier.detection".
        file_name: its name, e.g. "coco_classes.txt".
        count: how many names it must hold.

    Returns:
        The names, in file order.

    Raises:
        ValueError: the file holds another number of names.

    Example:
        >>> read_class_names("keras_fourier.detection", "coco_classes.txt", 80)[:2]
        ('person', 'bicycle')
    """
    text = resources.files(package).joinpath(file_name).read_text("utf-8")
    names = tuple(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )
    if len(names) != count:
        raise ValueError(f"{file_name} holds {len(names)} names, not {count}.")
    return names


def remove_stale_temporaries(directory: str | os.PathLike) -> None:
    """Removes temporary files of :func:`atomic_save` left in `directory` by dead processes."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        return
    for entry in os.scandir(directory):
        name = entry.name
        if not (name.startswith(".") and ".tmp" in name and entry.is_file()):
            continue
        pid_part = name.rsplit(".tmp", 1)[0].rsplit(".", 1)[-1].split("-")[0]
        if pid_part.isdigit() and not pid_alive(int(pid_part)):
            with contextlib.suppress(OSError):
                os.remove(entry.path)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def temporary_directory(parent: str, prefix: str) -> Iterator[str]:
    """A temporary folder inside `parent` named ``<prefix><pid>-<random>``, removed on exit.

    :func:`remove_stale_directories` removes those of dead processes.
    """
    path = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o777 & ~umask)  # mkdtemp makes it private; it may become a served folder
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def remove_stale_directories(parent: str | os.PathLike, prefix: str) -> list[str]:
    """Removes folders ``<prefix><pid>-*`` in `parent` whose process is dead; returns them."""
    parent = os.fspath(parent)
    removed = []
    if not os.path.isdir(parent):
        return removed
    for entry in os.scandir(parent):
        if not (entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False)):
            continue
        pid = entry.name[len(prefix) :].split("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def check_writable_folder(folder: str, flag: str = "out") -> None:
    """Raises ValueError unless `folder` is, or can be created as, a writable folder.

    Checks before anything is written: `folder` (or its nearest existing
    ancestor) must be a folder in which a file can be created (a probe file
    is created and removed: read-only mounts refuse even root).

    Args:
        folder: the folder (a run folder, an export's --out).
        flag: the argument's name in messages.

    Raises:
        ValueError: naming `flag`, the folder and the reason.
    """
    existing = os.path.abspath(folder)
    while not os.path.isdir(existing):
        if os.path.lexists(existing):
            raise ValueError(
                f"`{flag}` must be a folder; {existing!r} is a file. Received: {folder!r}"
            )
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    try:
        handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=existing)
    except OSError as error:
        raise ValueError(
            f"`{flag}` {folder!r} is not writable ({error.strerror}: {existing!r})."
        ) from None
    os.close(handle)
    os.remove(probe)


def make_folders(folder: str) -> list[str]:
    """Creates `folder` and its missing parents; returns those created, deepest first.

    Args:
        folder: the folder to create.

    Returns:
        The absolute paths of the folders this call created, deepest first
        (empty when `folder` existed), so that a failed command can remove
        exactly what it made.
    """
    created = []
    path = os.path.abspath(folder)
    while not os.path.isdir(path):
        created.append(path)
        path = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    return created
