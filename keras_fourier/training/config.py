"""`TrainConfig`: every setting of a training run, as data.

The run's task (:mod:`keras_fourier.tasks`) declares the settings that apply
to it only (image size and augmentation for images, sequence length and
example counts for ListOps), checks them and resolves them into the run's
identity (``run.json``); :mod:`keras_fourier.training.plan` puts the
settings and the task together (`run_task`, `resolve_config`,
`validate_config`, `run_identity`). This module imports no task.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_fourier.models.names import ARCHITECTURE_OPTIONS, is_model_name
from keras_fourier.settings import TrainSettings


@dataclasses.dataclass
class TrainConfig(TrainSettings):
    """Everything `train` needs, and its validation; the defaults are the README's main job.

    The fields and their defaults are those of
    :class:`~keras_fourier.settings.TrainSettings` (keras-free, so that the
    command line shows them without loading TensorFlow): `gfnet_tiny` on the
    embedded digits with the papers' recipe.

    Example:
        >>> TrainConfig(model="afno_tiny", epochs=2, out="runs/afno").architecture
        {}
    """

    @property
    def saved_model(self) -> bool:
        """Whether `model` is a saved model to start from (a `.keras` file or a run folder)."""
        return not is_model_name(self.model)

    @property
    def architecture(self) -> dict[str, Any]:
        """The `build_model` overrides that are set.

        Returns:
            {option: value} for the non-None fields among "mixer", "ffn",
            "depths", "dims" and "patch_size".

        Example:
            >>> TrainConfig(dims=32).architecture
            {'dims': 32}
        """
        return {
            key: getattr(self, key)
            for key in ARCHITECTURE_OPTIONS
            if getattr(self, key) is not None
        }
