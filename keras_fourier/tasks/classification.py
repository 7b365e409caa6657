"""What image and text classification share: one-hot targets, cross-entropy, accuracy.

:class:`Classification` is the objective half of both classification tasks:
the categorical cross-entropy (with the run's label smoothing in training,
without it in evaluation), top-1 and, above 5 classes, top-5 accuracy,
``best.keras`` selected on the validation accuracy, and
``test_accuracy=<value>`` as the last line of `train`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import keras

from keras_fourier.models.catalog import create_model, create_pretrained_model
from keras_fourier.tasks.base import Task

if TYPE_CHECKING:
    from keras_fourier.training.config import TrainConfig

# Training also logs the cross-entropy without label smoothing, under this name.
CROSS_ENTROPY = "cross_entropy"


class Classification(Task):
    """One class per input: a softmax over `num_classes` outputs, one-hot targets."""

    selection_metric = "accuracy"
    selection_mode = "max"

    def check_outputs(self, model: keras.Model, num_classes: int | None, what: str) -> None:
        """Raises ValueError unless the model outputs one vector of `num_classes` probabilities."""
        shape = model.output_shape
        if not isinstance(shape, tuple) or len(shape) != 2:
            raise ValueError(
                f"Model {model.name!r} does not output one class vector per input, as "
                f"{self.name} needs. Received: output_shape={shape}"
            )
        if num_classes is not None and shape[-1] != num_classes:
            raise ValueError(
                f"Model {model.name!r} outputs {shape[-1]} classes but {what} has "
                f"{num_classes}: use a model of its classes."
            )

    def build_model(self, config: TrainConfig, num_classes: int) -> keras.Model:
        """The model name's classifier (`create_model`), from `config.weights` but its head."""
        options = {
            "num_classes": num_classes,
            "drop_path_rate": config.drop_path_rate,
            **self.model_options(config),
            **config.architecture,
        }
        if config.weights is not None:
            return create_pretrained_model(config.model, weights=config.weights, **options)
        return create_model(config.model, **options)

    def loss(self, config: TrainConfig | None = None) -> keras.losses.Loss:
        """Categorical cross-entropy, with the run's label smoothing in training."""
        smoothing = 0.0 if config is None else config.label_smoothing
        return keras.losses.CategoricalCrossentropy(label_smoothing=smoothing)

    def metrics(self, num_classes: int, *, training: bool = False) -> list[keras.metrics.Metric]:
        """Top-1 accuracy, top-5 above 5 classes; in training also the plain cross-entropy."""
        metrics = [keras.metrics.CategoricalAccuracy(name="accuracy")]
        if num_classes > 5:
            metrics.append(keras.metrics.TopKCategoricalAccuracy(5, name="top5_accuracy"))
        if training:
            metrics.append(keras.metrics.CategoricalCrossentropy(name=CROSS_ENTROPY))
        return metrics

    def summary(self, metrics: dict[str, float]) -> list[str]:
        """``test_accuracy=<accuracy>``, 4 decimals.

        Example:
            >>> from keras_fourier.tasks import get_task
            >>> get_task("image_classification").summary({"accuracy": 0.5, "loss": 1.0})
            ['test_accuracy=0.5000']
        """
        return [f"test_accuracy={metrics['accuracy']:.4f}"]
