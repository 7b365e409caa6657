"""Distribution strategies: pick one automatically or by name.

`get_strategy("auto")` returns, in this order of preference, a
`TPUStrategy` when a TPU is reachable, a `MultiWorkerMirroredStrategy` when
``TF_CONFIG`` names several workers, a `MirroredStrategy` on several GPUs,
and otherwise TensorFlow's default strategy. Build the model and its
optimizer inside ``strategy.scope()``; `keras.Model.fit` then splits each
*global* batch of a `tf.data.Dataset` across the replicas (and shards it
across workers), so batch sizes given to keras_fourier are always global.

These are TensorFlow strategies, used under ``KERAS_BACKEND=tensorflow``.
Under the other Keras backends the same names give a backend strategy
(:class:`BackendStrategy`) with the same ``scope()`` and
``num_replicas_in_sync``: on JAX, "auto" and "mirrored" train data-parallel
over every local device through `keras.distribution.DataParallel` (one
device: no distribution), on PyTorch training runs on one device (the GPU
when there is one); "tpu" and "multi_worker" are TensorFlow only (see
:data:`BACKEND_STRATEGIES`). tf.data feeds every backend.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os

import keras
import tensorflow as tf

from keras_fourier.training.config import STRATEGIES
from keras_fourier.validation import check_choice

# The names each non-TensorFlow backend accepts (TensorFlow accepts all of STRATEGIES).
BACKEND_STRATEGIES = {
    "jax": ("auto", "default", "one_device", "mirrored"),
    "torch": ("auto", "default", "one_device"),
}


class BackendStrategy:
    """A strategy for the JAX and PyTorch backends, with a TF strategy's ``scope()``.

    Args:
        distribution: a `keras.distribution.Distribution` to enter in
            ``scope()`` (JAX data parallelism), or None for one device.
        num_replicas: number of devices the global batch is split across.
    """

    def __init__(self, distribution=None, num_replicas: int = 1):
        self.distribution = distribution
        self.num_replicas_in_sync = num_replicas

    def scope(self):
        """Context in which the model and optimizer are built and trained."""
        if self.distribution is None:
            return contextlib.nullcontext()
        return self.distribution.scope()


def _backend_strategy(name: str) -> BackendStrategy:
    backend = keras.config.backend()
    allowed = BACKEND_STRATEGIES.get(backend, ("auto", "default"))
    if name not in allowed:
        raise ValueError(
            f"`strategy` must be one of {allowed} on the {backend!r} Keras backend "
            f"({name!r} is TensorFlow only; set KERAS_BACKEND=tensorflow). Received: "
            f"strategy={name!r}"
        )
    if backend == "jax" and name in ("auto", "mirrored"):
        import jax

        devices = jax.devices()
        if len(devices) > 1:
            distribution = keras.distribution.DataParallel(
                devices=keras.distribution.list_devices()
            )
            return BackendStrategy(distribution, len(devices))
    return BackendStrategy()


def check_strategy_name(name: str) -> str:
    """Validates a strategy name.

    Args:
        name: one of `STRATEGIES`.

    Returns:
        `name` unchanged.

    Raises:
        ValueError: naming the value when it is not a known strategy.

    Example:
        >>> check_strategy_name("mirrored")
        'mirrored'
    """
    return check_choice("strategy", name, STRATEGIES)


def _tf_config() -> dict:
    return json.loads(os.environ.get("TF_CONFIG") or "{}")


def _num_workers_in_tf_config() -> int:
    cluster = _tf_config().get("cluster", {})
    return sum(len(cluster.get(task_type, ())) for task_type in ("chief", "worker"))


class _MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """`MultiWorkerMirroredStrategy` whose `reduce` takes what Keras 3's `fit` gives it.

    Keras 3 reduces the first (x, y) batch, a nested structure, to build the
    model symbolically, and the scalar metrics of each step with ``axis=0``;
    TensorFlow's multi-worker strategy supports neither
    (https://github.com/keras-team/keras/issues/20585). This reduces each
    value of a structure separately, scalars over replicas only.
    """

    def reduce(self, reduce_op, value, axis):
        parent = super()

        def reduce_one(item):
            rank = self.experimental_local_results(item)[0].shape.rank
            return parent.reduce(reduce_op, item, None if rank == 0 else axis)

        return tf.nest.map_structure(reduce_one, value)


def _tpu_reachable() -> bool:
    if os.environ.get("TPU_NAME") or os.environ.get("COLAB_TPU_ADDR"):
        return True
    return bool(glob.glob("/dev/accel*") or tf.config.list_physical_devices("TPU"))


def _tpu_strategy() -> tf.distribute.Strategy:
    tpu = None if os.environ.get("TPU_NAME") or os.environ.get("COLAB_TPU_ADDR") else "local"
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    if tpu is None:
        tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def _replica_devices() -> list[str]:
    """Every GPU, or every logical CPU device when there is no GPU."""
    gpus = tf.config.list_logical_devices("GPU")
    return [device.name for device in gpus or tf.config.list_logical_devices("CPU")]


def get_strategy(name: str = "auto") -> tf.distribute.Strategy | BackendStrategy:
    """Creates a `tf.distribute.Strategy` by name (a `BackendStrategy` on JAX and PyTorch).

    Create it before any other TensorFlow work in the process (multi-worker
    and TPU strategies must initialise the runtime); "auto" only inspects
    physical devices and the environment, so it does not initialise it.

    Args:
        name: "auto" (default: TPU if reachable, else multi-worker if
            ``TF_CONFIG`` names several workers, else mirrored on several
            GPUs, else the default strategy), "default" (no distribution),
            "one_device" (the first GPU, else the CPU), "mirrored" (every GPU,
            or every logical CPU device when there is none),
            "multi_worker" (`MultiWorkerMirroredStrategy` from ``TF_CONFIG``)
            or "tpu" (``TPU_NAME``/Colab TPU, else the local TPU VM).

    Returns:
        The strategy; under the JAX and PyTorch backends a
        :class:`BackendStrategy` (see the module docstring).

    Raises:
        ValueError: when `name` is not one of `STRATEGIES`, or not available
            on the current Keras backend.

    Example:
        >>> strategy = get_strategy("default")
        >>> strategy.num_replicas_in_sync
        1
    """
    check_strategy_name(name)
    if keras.config.backend() != "tensorflow":
        return _backend_strategy(name)
    if name == "auto":
        if _tpu_reachable():
            name = "tpu"
        elif _num_workers_in_tf_config() > 1:
            name = "multi_worker"
        elif len(tf.config.list_physical_devices("GPU")) > 1:
            name = "mirrored"
        else:
            name = "default"
    if name == "tpu":
        return _tpu_strategy()
    if name == "multi_worker":
        return _MultiWorkerMirroredStrategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(_replica_devices())
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(_replica_devices()[0])
    return tf.distribute.get_strategy()


def worker_id(strategy: tf.distribute.Strategy) -> str | None:
    """Names this worker when it is not the chief of a multi-worker run.

    The chief is the "chief" task, or worker 0 when the cluster has no chief.
    Only the chief should write shared outputs; other workers write theirs
    under their own name.

    Args:
        strategy: the strategy in use.

    Returns:
        None on the chief (and in single-worker runs), else "<task_type>_<task_id>".

    Example:
        >>> worker_id(tf.distribute.get_strategy()) is None
        True
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return None
    task_type, task_id = resolver.task_type, resolver.task_id
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    if task_type == "chief" or (task_type == "worker" and task_id == 0 and not has_chief):
        return None
    return f"{task_type}_{task_id}"
