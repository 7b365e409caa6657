"""Multi-worker data-parallel training: one process per worker, each with its own TF_CONFIG.

`keras-fourier train --strategy multi_worker` (or the default "auto", when
TF_CONFIG names several workers) trains with
`tf.distribute.MultiWorkerMirroredStrategy`: every worker runs the same
command, TF_CONFIG tells each one the whole cluster and its own index, and
gradients are all-reduced after every step. ``--batch-size`` is the global
batch, split evenly over the workers. Worker 0 is the chief: it writes the
run's files to ``--out``; the others write theirs under
``<out>/workers/worker_<index>/``. On a cluster, run on machine ``i`` of
``N`` (same command everywhere, only the index changes)::

    export TF_CONFIG='{"cluster": {"worker": ["host0:12345", "host1:12345"]},
                       "task": {"type": "worker", "index": 0}}'
    keras-fourier train --strategy multi_worker --out /shared/runs/digits

This script does exactly that for N local workers on 127.0.0.1 (free ports),
so you can try it on one machine; arguments after ``--`` go to
``keras-fourier train``. Two workers, two epochs of the digits (a few minutes
on a 2-core machine; the test suite runs this very command)::

    python examples/multi_worker.py --num-workers 2 -- --epochs 2 --out runs/multi_worker

Each worker prints its header, one line per epoch and ``test_accuracy=`` last; every
line (stdout and stderr) comes prefixed with its worker, ``[worker 0] ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TextIO


def free_ports(count: int) -> list[int]:
    """Ports that are free on 127.0.0.1 right now.

    Args:
        count: how many ports.

    Returns:
        `count` distinct port numbers.

    Example:
        >>> len(free_ports(2))
        2
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def tf_config(workers: Sequence[str], index: int) -> str:
    """The TF_CONFIG of worker `index` of a cluster of `workers`.

    Args:
        workers: "host:port" of every worker, the chief (worker 0) first.
        index: this worker's index.

    Returns:
        The TF_CONFIG JSON string.

    Example:
        >>> json.loads(tf_config(["a:1", "b:2"], 1))["task"]
        {'type': 'worker', 'index': 1}
    """
    return json.dumps(
        {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}}
    )


def launch(num_workers: int, train_args: Sequence[str]) -> int:
    """Runs `keras-fourier train --strategy multi_worker` in `num_workers` local processes.

    Args:
        num_workers: number of worker processes.
        train_args: further arguments of `keras-fourier train`.

    Returns:
        0 when every worker succeeded, else the first non-zero exit status.
    """
    workers = [f"127.0.0.1:{port}" for port in free_ports(num_workers)]
    command = [sys.executable, "-m", "keras_fourier.cli", "train", "--strategy", "multi_worker"]
    processes = [
        subprocess.Popen(
            [*command, *train_args],
            env={**os.environ, "TF_CONFIG": tf_config(workers, index)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        for index in range(num_workers)
    ]
    lock = threading.Lock()
    relays = [
        threading.Thread(target=relay, args=(process.stdout, f"[worker {index}] ", lock))
        for index, process in enumerate(processes)
    ]
    for thread in relays:
        thread.start()
    statuses = [process.wait() for process in processes]
    for thread in relays:
        thread.join()
    return next((status for status in statuses if status), 0)


def relay(stream: TextIO, prefix: str, lock: threading.Lock) -> None:
    """Prints every line of a worker's output (stdout and stderr) with the worker's prefix.

    Args:
        stream: the worker's output, as text.
        prefix: put before each line, e.g. "[worker 1] ".
        lock: shared by the relays, so that lines of different workers never mix.

    Example:
        >>> relay(io.StringIO("epoch 1\n"), "[worker 0] ", threading.Lock())
        [worker 0] epoch 1
    """
    for line in stream:
        with lock:
            print(prefix + line.rstrip("\n"), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Parses ``--num-workers`` and launches the workers; the rest goes to `keras-fourier train`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-workers", type=int, default=2)
    args, train_args = parser.parse_known_args(argv)
    return launch(args.num_workers, [arg for arg in train_args if arg != "--"])


if __name__ == "__main__":
    sys.exit(main())
