"""What the fault tests inject and inspect: an unwritable folder, a dead process, digests."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator


def digests(folder) -> dict[str, str]:
    """{path relative to `folder`: SHA-256} of every file below `folder`."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as file:
                found[os.path.relpath(path, folder)] = hashlib.sha256(file.read()).hexdigest()
    return found


@contextlib.contextmanager
def unwritable(folder) -> Iterator[None]:
    """`folder` unwritable until the block ends, for root too (whom chmod does not stop)."""
    os.chmod(folder, 0o555)
    probe = folder / "probe"
    try:
        probe.write_text("")
    except PermissionError:
        pass
    else:
        probe.unlink()
        subprocess.run(["chattr", "+i", str(folder)], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=False, capture_output=True)
        os.chmod(folder, 0o755)


def dead_pid() -> int:
    """The id of a process that has ended (a lock or temporary file's owner that is gone)."""
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(finished.stdout)
