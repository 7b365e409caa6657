"""Official checkpoint releases as data: where the file is, who publishes it, which reader reads it.

A :class:`Release` row is what the pipeline (:func:`keras_fourier.weights.pipeline.load_release`)
needs for every family: the file's name in the cache, its URL, its source
and licence, its format (a key of ``pipeline.READERS``), and its size and
sha256 where recorded (their download's size cap and checks,
:mod:`keras_fourier.weights.download`). A family adds what it publishes about the file in a
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

TSINGHUA_CLOUD = "https://cloud.tsinghua.edu.cn/f/{}/?dl=1"


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
        max_size: a ceiling in bytes for a file without a recorded `size`
            that may be larger than the download ceiling
            (:func:`keras_fourier.weights.download.size_cap`), e.g. from
            the size the publisher gives; None (default) otherwise.
    """

    file_name: str
    url: str
    source: str
    license: str
    reader: str = "pth"
    sha256: str | None = None
    size: int | None = None
    max_size: int | None = None


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

    Example:
        >>> zoo = ModelZoo("https://github.com/raoyongming/GFNet", "MIT")
        >>> zoo.release("gfnet-ti.pth", "3d0c1579aa524a0a99dd", 74.6).crop_pct
        0.875
    """

    source: str
    license: str
    url: str = TSINGHUA_CLOUD
    uncropped_from: int | None = None

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
        )
