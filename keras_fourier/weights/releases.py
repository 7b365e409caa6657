"""Official checkpoint releases as data: where the file is, who publishes it, which reader reads it.

A :class:`Release` row is what the pipeline (:func:`keras_fourier.weights.pipeline.load_release`)
needs for every family: the file's name in the cache, its URL, its source
and licence, its format (a key of ``pipeline.READERS``), its size and
sha256 where recorded (their download's size cap and checks,
:mod:`keras_fourier.weights.download`), and otherwise the ceiling its
download may not pass, derived from what it must hold (:meth:`Release.ceiling`:
the parameters of the architecture it is loaded into, times the float32
values it keeps per parameter, plus a margin). A family adds what it publishes about the file in a
subclass (:class:`ImageNetRelease`: the evaluation of an ImageNet
classifier; ``fnet_family.FNetRelease``: the variant it was trained as).
Each family module keeps the rows of its own releases (``gfnet.RELEASES``,
``hornet.RELEASES``, ``fnet_family.RELEASES``), as timm keeps
``default_cfgs`` beside a model, and names its key map beside them. This
module is keras-free: the command line reads the rows without loading
TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math

TSINGHUA_CLOUD = "https://cloud.tsinghua.edu.cn/f/{}/?dl=1"
# Float32 values per parameter of a file holding the weights only, and of a training
# checkpoint, which may add an EMA copy and Adam's two moments (the most a checkpoint of a
# release row may hold).
WEIGHTS_ONLY = 1
TRAINING_CHECKPOINT = 4
# What a file holds beyond its values (the pickle, the archive's headers, a head of other
# classes than the model's): a quarter more, and 16 MiB.
_CEILING_MARGIN = 1.25
_CEILING_BYTES = 16 * 2**20


@dataclasses.dataclass(frozen=True)
class Release:
    """One official checkpoint release.

    Attributes:
        file_name: name of the downloaded file in the cache.
        url: download link (from the official README).
        source: the repository that publishes it.
        license: the licence of that repository (and of its released weights).
        reader: the file's format, a key of ``pipeline.READERS``: "pth" (a
            PyTorch ``torch.save`` zip, default) or "flax" (a Flax msgpack
            checkpoint).
        sha256: hex digest of the file, checked before it enters the cache
            and when it is used from there; None where none is recorded (the
            official READMEs publish none, and the rows were written without
            network access to the official hosts to compute one).
        size: exact size of the file in bytes, checked like `sha256`
            (the download is refused as soon as the server announces another,
            or sends more); None where none is recorded (as `sha256`).
        max_size: a ceiling in bytes for a file without a recorded `size`,
            e.g. from the size the publisher gives; None (default): derived
            from the architecture (:meth:`ceiling`).
        values_per_parameter: the float32 values the file holds per
            parameter of its architecture: :data:`WEIGHTS_ONLY` (default) or
            :data:`TRAINING_CHECKPOINT` (a file that may keep an EMA copy and
            the optimizer's moments).
    """

    file_name: str
    url: str
    source: str
    license: str
    reader: str = "pth"
    sha256: str | None = None
    size: int | None = None
    max_size: int | None = None
    values_per_parameter: int = WEIGHTS_ONLY

    def ceiling(self, parameters: int) -> int:
        """The most bytes the file may have, for a model of `parameters` parameters.

        Its recorded `size`, else its `max_size`, else what the parameters
        need: ``parameters x 4 bytes x values_per_parameter``, a quarter more
        and 16 MiB. A download stops there, whether or not the row records a
        sha256 (``KERAS_FOURIER_MAX_DOWNLOAD_BYTES`` replaces a derived ceiling).

        Args:
            parameters: the parameters of the model it is loaded into.

        Example:
            >>> Release("gfnet-ti.pth", "https://x", "s", "MIT").ceiling(7_500_000) // 10**6
            54
        """
        if self.size is not None:
            return self.size
        if self.max_size is not None:
            return self.max_size
        values = parameters * 4 * self.values_per_parameter
        return math.ceil(values * _CEILING_MARGIN) + _CEILING_BYTES


@dataclasses.dataclass(frozen=True)
class ImageNetRelease(Release):
    """An official ImageNet classifier checkpoint, with how it was evaluated.

    Attributes:
        classes: classes of its head: 1000 (ImageNet-1k) or 21841 (ImageNet-22k).
        resolution: image size it was trained and evaluated at.
        crop_pct: the evaluation's centre crop: images resized to
            ``int(resolution / crop_pct)`` (shorter side) then cropped to
            ``resolution``; 1.0 resizes to the resolution without cropping.
        interpolation: the evaluation resize's interpolation.
        top1: published ImageNet-1k top-1 accuracy (%) of this file, or None
            (ImageNet-22k checkpoints, which the README gives no top-1 for).
    """

    classes: int = 1000
    resolution: int = 224
    crop_pct: float = 0.875
    interpolation: str = "bicubic"
    top1: float | None = None


@dataclasses.dataclass(frozen=True)
class ModelZoo:
    """Where a family publishes its checkpoints and how it evaluates them.

    Args:
        source: the repository that publishes them.
        license: the licence of that repository (and of its released weights).
        url: download link with ``{}`` for a file's code. Default
            `TSINGHUA_CLOUD`.
        uncropped_from: the resolution from which the evaluation resizes
            without cropping (``crop_pct=1.0``); below it, and always when
            None (default), it centre-crops with ``crop_pct=0.875``.
        values_per_parameter: what its files hold per parameter
            (:attr:`Release.values_per_parameter`). Default
            :data:`WEIGHTS_ONLY`.

    Example:
        >>> zoo = ModelZoo("https://github.com/raoyongming/GFNet", "MIT")
        >>> zoo.release("gfnet-ti.pth", "3d0c1579aa524a0a99dd", 74.6).crop_pct
        0.875
    """

    source: str
    license: str
    url: str = TSINGHUA_CLOUD
    uncropped_from: int | None = None
    values_per_parameter: int = WEIGHTS_ONLY

    def release(
        self,
        file_name: str,
        code: str,
        top1: float | None,
        classes: int = 1000,
        resolution: int = 224,
    ) -> ImageNetRelease:
        """One row of the zoo: an :class:`ImageNetRelease` of `file_name`, downloaded by `code`.

        Args:
            file_name: name of the downloaded file in the cache.
            code: the file's code in `url`.
            top1: published ImageNet-1k top-1 accuracy (%), or None.
            classes: classes of its head. Default 1000.
            resolution: image size it was trained and evaluated at. Default 224.

        Returns:
            The :class:`ImageNetRelease`, bicubic, without a recorded sha256.
        """
        uncropped = self.uncropped_from is not None and resolution >= self.uncropped_from
        return ImageNetRelease(
            file_name,
            self.url.format(code),
            source=self.source,
            license=self.license,
            classes=classes,
            resolution=resolution,
            crop_pct=1.0 if uncropped else 0.875,
            top1=top1,
            values_per_parameter=self.values_per_parameter,
        )
