"""Forecasting: the next state of an N-channel field, the task of FourCastNet's operators.

Data are field sources (:mod:`keras_fourier.data.fields`): the embedded 2D
Navier-Stokes vorticity and tracer (``navier_stokes``, the default of
``keras-fourier train --task forecast``) or ``fields:PATH`` arrays shaped
(time, channel, lat, lon) in ``.npy``, ``.npz`` or HDF5 files, split by
time, normalised per channel. The model is a field model by name
(:func:`keras_fourier.models.fourcastnet.field_model`, default
``fourcastnet_tiny``: a small FourCastNet predicting the increment) at the
data's grid and channel count, trained with the mean squared error of the
normalised next state.

Metrics, in normalised (z-score) units, over a whole split: the relative L2
error (selects ``best.keras``, lower is better), the RMSE of each channel
and the anomaly correlation against the train split's time mean (the
climatology). ``train`` and ``evaluate`` print ``test_rel_l2=<value>`` last.
``model.keras`` stores the normalisation (per-channel mean and std), the
channel names and the lead, so that `predict` reads a state in physical
units (``.npy``: (C, lat, lon), (lat, lon) for one channel, or (T, C, lat,
lon), of which the last frame), rolls the model out ``steps`` times and
writes the forecast in physical units, ``<stem>_forecast.npy`` (steps, C,
lat, lon), atomically. The memory of the forecast (:data:`FORECAST_COPIES`
float32 copies of the trajectory) is held to
:func:`~keras_fourier.limits.max_memory` before anything is read or written.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import keras
import numpy as np
import tensorflow as tf

from keras_fourier.data.fields import (
    SPLITS,
    field_dataset,
    is_field_source,
    load_field_source,
    read_npy_header,
)
from keras_fourier.fileio import atomic_save
from keras_fourier.limits import check_memory
from keras_fourier.metrics import AnomalyCorrelation, ChannelRMSE, FieldMSE, RelativeL2
from keras_fourier.model_record import FIELD_STATS_KEY
from keras_fourier.models.fourcastnet import field_model, rollout
from keras_fourier.models.names import canonical_name
from keras_fourier.tasks.base import EvaluationRequest, PredictRequest, Task, TaskData, run_splits
from keras_fourier.validation import check_positive_int

if TYPE_CHECKING:
    from keras_fourier.training.config import TrainConfig

# The largest state file predict reads.
MAX_STATE_BYTES = 1 << 30
# The float32 trajectories a forecast holds at once: the rollout's, its NumPy copy, the
# denormalised forecast and the (steps, C, lat, lon) array written.
FORECAST_COPIES = 4
# The default job (`fourcastnet_tiny` on the embedded Navier-Stokes data) trains in about four
# minutes on 2 cores: 40 epochs of 43 steps, AdamW at 1e-3 without weight decay.
NAVIER_STOKES_RECIPE = {"epochs": 40, "batch_size": 16, "learning_rate": 1e-3, "weight_decay": 0.0}


class Forecast(Task):
    """One-step forecasting of gridded fields with a field operator (FourCastNet)."""

    name = "forecast"
    modality = "field"
    sources = "'navier_stokes' or 'fields:<path>' (.npy, .npz, .h5; options after '?')"
    fields = ("eval_split", "validation_split")
    selection_metric = "rel_l2"
    selection_mode = "min"
    default_model = "fourcastnet_tiny"
    default_data = "navier_stokes"
    outputs = "channels"

    def accepts(self, data: str) -> bool:
        return is_field_source(data)

    def check(self, config: TrainConfig, name: Callable[[str], str]) -> None:
        for field in ("weights", "augment"):
            if getattr(config, field) is not None:
                raise ValueError(
                    f"`{name(field)}` does not apply to a forecast run (start from a trained "
                    f"field model with `{name('model')}` RUN_FOLDER). "
                    f"Received: {name(field)}={getattr(config, field)!r}"
                )
        for field in ("eval_split", "validation_split"):
            value = getattr(config, field)
            if value is not None and value not in SPLITS:
                raise ValueError(
                    f"`{name(field)}` of field data is one of {SPLITS}. "
                    f"Received: {name(field)}={value!r}"
                )
        source = load_field_source(config.data)
        if source.pairs("train") < config.batch_size:
            raise ValueError(
                f"The train split of {config.data!r} has {source.pairs('train')} pairs, fewer "
                f"than one batch. Received: {name('batch_size')}={config.batch_size}"
            )

    def recipe_defaults(self, config: TrainConfig) -> dict[str, Any]:
        """The default job on "navier_stokes" trains in minutes: `NAVIER_STOKES_RECIPE`."""
        return dict(NAVIER_STOKES_RECIPE) if config.data == self.default_data else {}

    def num_classes(self, data: str, data_dir: str | None = None) -> int:
        del data_dir
        return load_field_source(data).shape[-1]

    def split_size(self, data: str, split: str, data_dir: str | None = None) -> int | None:
        del data_dir
        return load_field_source(data).pairs(split) if split in SPLITS else None

    def labels(self, config: TrainConfig) -> dict[str, Any]:
        source = load_field_source(config.data)
        return {
            FIELD_STATS_KEY: {
                "mean": source.mean.tolist(),
                "std": source.std.tolist(),
                "channels": list(source.channel_names),
                "lead": source.spec.lead,
            }
        }

    def model_options(self, config: TrainConfig) -> dict[str, Any]:
        height, width, _ = load_field_source(config.data).shape
        return {"image_size": (height, width)}

    def build_model(self, config: TrainConfig, num_classes: int) -> keras.Model:
        """The run's field model at the data's grid, `num_classes` channels in and out."""
        return field_model(
            canonical_name(config.model),
            image_size=self.model_options(config)["image_size"],
            channels=num_classes,
            drop_path_rate=config.drop_path_rate,
            **config.architecture,
        )

    def describe_input(self, config: TrainConfig, model: keras.Model) -> str:
        source = load_field_source(config.data)
        height, width, channels = source.shape
        return (
            f"{height}x{width} fields of {channels} channels ({', '.join(source.channel_names)}), "
            f"forecast {source.spec.lead} step(s) ahead"
        )

    def datasets(self, config: TrainConfig, names: Mapping[str, str] | None = None) -> TaskData:
        train_split, validation_split = run_splits(config, "train", "validation", names)
        source = load_field_source(config.data)
        train = field_dataset(
            source, train_split, batch_size=config.batch_size, training=True, seed=config.seed
        )
        validation = field_dataset(source, validation_split, batch_size=config.batch_size)
        splits = {
            role: f"{split!r}, frames {start}-{stop - 1}, {source.pairs(split):,} pairs"
            for role, split in (
                ("train", train_split),
                ("validation", validation_split),
                ("test", config.eval_split),
            )
            for start, stop in [source.splits[split]]
        }
        return TaskData(train, validation, source.shape[-1], splits)

    def evaluation_data(self, model: keras.Model, request: EvaluationRequest) -> tf.data.Dataset:
        source = load_field_source(request.data)
        if tuple(model.input_shape[1:]) != source.shape:
            raise ValueError(
                f"Model {model.name!r} takes fields of shape {tuple(model.input_shape[1:])} but "
                f"data {request.data!r} holds {source.shape}. Received: "
                f"input_shape={model.input_shape}"
            )
        stats = request.labels.get(FIELD_STATS_KEY) or {}
        return field_dataset(
            source,
            request.split,
            batch_size=request.batch_size,
            training=False,
            mean=stats.get("mean"),
            std=stats.get("std"),
        )

    def check_outputs(self, model: keras.Model, num_classes: int | None, what: str) -> None:
        """Refuses a model that does not map a field to a field of its shape and channels."""
        inputs, outputs = model.input_shape, model.output_shape
        if not isinstance(outputs, tuple) or len(outputs) != 4 or outputs != inputs:
            raise ValueError(
                f"Model {model.name!r} does not map a field (B, H, W, C) to a field of the same "
                f"shape, as forecasting {what} needs. Received: output_shape={outputs}"
            )
        if num_classes is not None and outputs[-1] != num_classes:
            raise ValueError(
                f"Model {model.name!r} forecasts {outputs[-1]} channels but {what} has "
                f"{num_classes}. Received: output_shape={outputs}"
            )

    def loss(self, config: TrainConfig | None = None) -> keras.losses.Loss:
        """The mean squared error of the normalised next state."""
        del config
        return FieldMSE()

    def metrics(self, num_classes: int, *, training: bool = False) -> list[keras.metrics.Metric]:
        """Relative L2, anomaly correlation and each channel's RMSE, over the whole split."""
        del training
        return [
            RelativeL2(),
            AnomalyCorrelation(),
            *(ChannelRMSE(channel) for channel in range(num_classes)),
        ]

    def summary(self, metrics: dict[str, float]) -> list[str]:
        """Each channel's RMSE, the anomaly correlation, then ``test_rel_l2=...`` (last).

        Raises:
            ValueError: a metric that is not finite (the forecast means nothing).

        Example:
            >>> TASK.summary({"rel_l2": 0.1, "acc": 0.95, "rmse_0": 0.2, "loss": 0.04})
            ['test_rmse_0=0.2000', 'test_acc=0.9500', 'test_rel_l2=0.1000']
        """
        names = sorted(key for key in metrics if key.startswith("rmse_"))
        names = sorted(names, key=lambda key: int(key.removeprefix("rmse_")))
        keys = [*names, "acc", "rel_l2"]
        bad = [key for key in keys if not np.isfinite(metrics[key])]
        if bad:
            raise ValueError(
                f"The forecast's {', '.join(bad)} are not finite: the model's outputs mean "
                f"nothing. Received: metrics={metrics}"
            )
        return [f"test_{key}={metrics[key]:.4f}" for key in keys]

    def predict(self, model: keras.Model, request: PredictRequest) -> list[str]:
        """Writes ``<stem>_forecast.npy`` (steps, C, H, W) per state file into `request.out`."""
        if request.out is None:
            raise ValueError(
                "A forecast writes .npy files: pass an output folder. Received: out=None"
            )
        steps = check_positive_int("steps", request.steps)
        stats = request.record.get(FIELD_STATS_KEY)
        if not stats:
            raise ValueError(
                f"Model {model.name!r} carries no field normalisation: predict takes the "
                "model.keras of a forecast run."
            )
        mean = np.asarray(stats["mean"], np.float32)
        std = np.asarray(stats["std"], np.float32)
        shape = tuple(model.input_shape[1:])
        check_memory(
            f"A forecast of {steps:,} steps of {shape[0]}x{shape[1]} fields of {shape[2]} "
            "channel(s)",
            FORECAST_COPIES * 4 * steps * math.prod(shape),
            f"--steps={steps}",
        )
        states = [_read_state(path, shape) for path in request.inputs]
        os.makedirs(request.out, exist_ok=True)
        lines = []
        for path, state in zip(request.inputs, states, strict=True):
            normalised = (np.moveaxis(state, 0, -1) - mean) / std
            trajectory = keras.ops.convert_to_numpy(rollout(model, normalised[None], steps))[0]
            forecast = np.moveaxis(trajectory * std + mean, -1, 1).astype(np.float32)
            if not np.all(np.isfinite(forecast)):
                raise ValueError(f"The forecast of {path!r} is not finite: nothing written.")
            target = f"{request.stem(path)}_forecast.npy"
            atomic_save(
                target,
                lambda temporary, data=forecast: np.save(temporary, data, allow_pickle=False),
            )
            lead = stats.get("lead", 1)
            lines.append(
                f"{path}: {target} ({steps} step(s) of {lead} frame(s), shape {forecast.shape})"
            )
        return lines


def _read_state(path: str, shape: tuple[int, ...]) -> np.ndarray:
    """The state of a .npy file as float32 (C, H, W) for a model of input `shape` (H, W, C)."""
    height, width, channels = shape
    try:
        with open(path, "rb") as file:
            size, dtype = read_npy_header(file)
        if int(np.prod(size, dtype=np.int64)) * dtype.itemsize > MAX_STATE_BYTES:
            raise ValueError(f"over {MAX_STATE_BYTES:,} bytes")
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise ValueError(f"Cannot read the state file {path!r} as .npy ({error}).") from None
    if array.ndim == 2 and channels == 1:
        array = array[None]
    elif array.ndim == 4:
        array = array[-1]
    if array.shape != (channels, height, width) or not np.issubdtype(array.dtype, np.number):
        raise ValueError(
            f"The state file {path!r} holds {array.dtype} {array.shape}; the model takes "
            f"(channels, lat, lon) = {(channels, height, width)} (or (time, ...), its last "
            "frame)."
        )
    return array.astype(np.float32)


TASK = Forecast()
