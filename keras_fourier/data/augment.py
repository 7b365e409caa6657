"""Image transforms for training (DeiT-style augmentation) and evaluation.

Images are channels-last float32 with values in [0, 255]; every transform
keeps that range. Training augmentation runs in two stages inside `tf.data`:

* per image, before batching: `RandomResizedCrop` (or a plain resize),
  `keras.layers.RandomTranslation`, `keras.layers.RandomFlip` and
  `keras.layers.RandAugment`; images may still have different sizes here.
* per batch: `keras.layers.RandomErasing`, then `keras.layers.MixUp` or
  `keras.layers.CutMix` on one-hot labels (one of the two per batch).

Randomness comes from Keras seed generators seeded from one integer, so a
pipeline that calls the transforms in a fixed order (no parallel calls)
produces the same images on every run.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from keras_fourier.validation import check_number

VALUE_RANGE = (0.0, 255.0)


def clip_to_value_range(images: tf.Tensor) -> tf.Tensor:
    """Clip images to [0, 255], removing float rounding overshoot of resizing and mixing.

    Args:
        images: float images of any shape.

    Returns:
        The images clipped to [0, 255].

    Example:
        >>> clip_to_value_range(tf.constant([255.00002, -0.5])).numpy().tolist()
        [255.0, 0.0]
    """
    return tf.clip_by_value(images, *VALUE_RANGE)


def check_image_size(image_size: int) -> int:
    """Validate an image size: a positive int (not a bool).

    Args:
        image_size: the value to check.

    Returns:
        `image_size` unchanged.

    Raises:
        ValueError: naming the value when it is not a positive int.

    Example:
        >>> check_image_size(32)
        32
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size <= 0:
        raise ValueError(f"image_size must be a positive int; received image_size={image_size!r}.")
    return image_size


def _check_range(name: str, value: tuple[float, float], low: float, high: float) -> None:
    if len(value) != 2 or not low <= value[0] <= value[1] <= high:
        raise ValueError(
            f"{name} must be a (min, max) pair with {low} <= min <= max <= {high}; "
            f"received {name}={value!r}."
        )


def _check_unit(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1]; received {name}={value!r}.")


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
    """Switches and strengths of the training augmentation; defaults follow DeiT.

    DeiT (Touvron et al., 2021) trains with random-resized crops, horizontal
    flips, RandAugment, random erasing (p=0.25), MixUp (alpha=0.8) and CutMix
    (alpha=1.0), switching between the last two with probability 0.5 per
    batch; its label smoothing (0.1) belongs in the loss:
    `keras.losses.CategoricalCrossentropy(label_smoothing=0.1)`.

    Args:
        random_resized_crop: crop a random area fraction `crop_scale` and aspect
            ratio `crop_ratio` (width / height) of the image and resize it to
            the output size. Default True. When False the whole image is
            resized (centre-cropped to a square first).
        crop_scale: area fraction range of the crop. Default (0.08, 1.0).
        crop_ratio: aspect ratio range of the crop. Default (3 / 4, 4 / 3).
        translation: largest random shift as a fraction of the image size,
            borders filled with zeros (`keras.layers.RandomTranslation`);
            0.125 at 32x32 is the classic CIFAR pad-4-and-crop. Default 0.0 (off).
        horizontal_flip: flip left-right with probability 0.5. Default True.
        rand_augment: apply `keras.layers.RandAugment`. Default True.
        rand_augment_ops: operations RandAugment applies per image. Default 2.
        rand_augment_factor: RandAugment strength in [0, 1] (Keras's scale,
            whose per-operation meaning differs from timm's magnitude 9).
            Default 0.5.
        random_erasing: probability of erasing a random rectangle of each
            image with noise. Default 0.25; 0 turns it off.
        mixup_alpha: MixUp Beta(alpha, alpha) parameter. Default 0.8; 0 turns
            MixUp off.
        cutmix_alpha: CutMix Beta(alpha, alpha) parameter in [0, 1]. Default
            1.0; 0 turns CutMix off.
        cutmix_prob: probability of choosing CutMix over MixUp for a batch
            when both are on. Default 0.5.

    Example:
        >>> config = AugmentConfig(mixup_alpha=0.0, cutmix_alpha=0.0)
        >>> config.mixes_labels
        False
    """

    random_resized_crop: bool = True
    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    translation: float = 0.0
    horizontal_flip: bool = True
    rand_augment: bool = True
    rand_augment_ops: int = 2
    rand_augment_factor: float = 0.5
    random_erasing: float = 0.25
    mixup_alpha: float = 0.8
    cutmix_alpha: float = 1.0
    cutmix_prob: float = 0.5

    def __post_init__(self) -> None:
        _check_range("crop_scale", self.crop_scale, 1e-6, 1.0)
        _check_range("crop_ratio", self.crop_ratio, 1e-6, float("inf"))
        for name in ("translation", "rand_augment_factor", "random_erasing", "cutmix_alpha"):
            _check_unit(name, getattr(self, name))
        _check_unit("cutmix_prob", self.cutmix_prob)
        if self.mixup_alpha < 0:
            raise ValueError(
                f"mixup_alpha must be >= 0; received mixup_alpha={self.mixup_alpha!r}."
            )
        if self.rand_augment_ops < 1:
            raise ValueError(
                "rand_augment_ops must be >= 1; "
                f"received rand_augment_ops={self.rand_augment_ops!r}."
            )

    @property
    def mixes_labels(self) -> bool:
        """Whether MixUp or CutMix is on, so labels must be one-hot floats."""
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0


class RandomResizedCrop(keras.layers.Layer):
    """Crop a random area and aspect ratio of each image, then resize it.

    The Inception/DeiT crop: the box is drawn by
    `tf.image.stateless_sample_distorted_bounding_box` (ten attempts, falling
    back to the whole image), then resized bilinearly. Images of a batch get
    independent boxes; a single (H, W, C) image of any size is accepted, as in
    a `tf.data` map before batching. With `training=False` the layer resizes
    the centre square instead.

    Args:
        height: output height.
        width: output width.
        scale: area fraction range of the crop. Default (0.08, 1.0).
        ratio: aspect ratio range (width / height) of the crop. Default (3 / 4, 4 / 3).
        seed: integer seed of the layer's seed generator. Default None.
        **kwargs: base `keras.layers.Layer` arguments.

    Returns:
        Images of shape (..., height, width, C), float32.

    Example:
        >>> crop = RandomResizedCrop(32, 32, seed=0)
        >>> crop(tf.zeros((2, 48, 64, 3))).shape
        TensorShape([2, 32, 32, 3])
    """

    def __init__(
        self,
        height: int,
        width: int,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.height = check_image_size(height)
        self.width = check_image_size(width)
        _check_range("scale", scale, 1e-6, 1.0)
        _check_range("ratio", ratio, 1e-6, float("inf"))
        self.scale = tuple(scale)
        self.ratio = tuple(ratio)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def _crop_one(self, image: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.shape(image),
            bounding_boxes=tf.zeros([1, 0, 4]),
            seed=seed,
            min_object_covered=0.0,
            aspect_ratio_range=self.ratio,
            area_range=self.scale,
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        return tf.image.resize(tf.slice(image, begin, size), (self.height, self.width))

    def call(self, inputs, training=True):
        images = tf.cast(inputs, "float32")
        if not training:
            return keras.ops.image.resize(
                images, (self.height, self.width), crop_to_aspect_ratio=True
            )
        batched = images.shape.rank == 4
        if not batched:
            images = images[None]
        seeds = keras.random.randint(
            (tf.shape(images)[0], 2), 0, 2**31 - 1, seed=self.seed_generator, dtype="int32"
        )
        spec = tf.TensorSpec((self.height, self.width, images.shape[-1]), "float32")
        crops = tf.map_fn(
            lambda args: self._crop_one(*args), (images, seeds), fn_output_signature=spec
        )
        return crops if batched else crops[0]

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            height=self.height, width=self.width, scale=self.scale, ratio=self.ratio, seed=self.seed
        )
        return config


def eval_transform(
    image_size: int | tuple[int, int], crop_pct: float = 0.875
) -> keras.layers.Pipeline:
    """Evaluation resize and centre crop, as in timm and DeiT.

    Resizes (bilinear, keeping the aspect ratio by cropping) to
    ``(floor(height / crop_pct), floor(width / crop_pct))`` and crops the
    centre (height, width), using `keras.layers.Resizing` with
    `crop_to_aspect_ratio=True` followed by `keras.layers.CenterCrop`. The
    one evaluation transform of the package: data pipelines and the
    ``serving_bytes`` export signature both use it.

    Args:
        image_size: output size, a positive int (square) or (height, width).
        crop_pct: fraction of the resized image kept, in (0, 1]. Default 0.875.

    Returns:
        A `keras.layers.Pipeline` mapping (H, W, C) or (B, H, W, C) images of
        any size to (..., height, width, C) float32.

    Example:
        >>> transform = eval_transform(32, crop_pct=0.875)
        >>> transform(tf.zeros((40, 60, 3))).shape
        TensorShape([32, 32, 3])
        >>> eval_transform((96, 160))(tf.zeros((120, 90, 3))).shape
        TensorShape([96, 160, 3])
    """
    if isinstance(image_size, (tuple, list)) and len(image_size) == 2:
        height, width = (check_image_size(size) for size in image_size)
    else:
        height = width = check_image_size(image_size)
    check_number("crop_pct", crop_pct, low=0, high=1, low_open=True)
    return keras.layers.Pipeline(
        [
            keras.layers.Resizing(
                max(height, int(height / crop_pct)),
                max(width, int(width / crop_pct)),
                crop_to_aspect_ratio=True,
            ),
            keras.layers.CenterCrop(height, width),
        ]
    )


class ImageAugmenter:
    """Training augmentation built from Keras preprocessing layers.

    `augment_image` is the per-image stage (crop, translation, flip,
    RandAugment) for use before batching; `augment_batch` is the per-batch
    stage (random erasing, then MixUp or CutMix). Both run eagerly and inside
    `tf.data.Dataset.map`.

    Args:
        config: which augmentations run and how strongly.
        image_size: output height and width, a positive int.
        seed: base integer seed; each layer gets its own derived seed. Default 0.

    Example:
        >>> augmenter = ImageAugmenter(AugmentConfig(), image_size=32, seed=0)
        >>> image = augmenter.augment_image(tf.zeros((40, 60, 3)))
        >>> labels = tf.one_hot([0, 1, 2, 3], 10)
        >>> images, labels = augmenter.augment_batch(tf.stack([image] * 4), labels)
        >>> images.shape, labels.shape
        (TensorShape([4, 32, 32, 3]), TensorShape([4, 10]))
    """

    def __init__(self, config: AugmentConfig, image_size: int, seed: int = 0):
        check_image_size(image_size)
        self.config = config
        self.image_size = image_size
        if config.random_resized_crop:
            crop = RandomResizedCrop(
                image_size, image_size, config.crop_scale, config.crop_ratio, seed=seed
            )
        else:
            crop = keras.layers.Resizing(image_size, image_size, crop_to_aspect_ratio=True)
        image_layers = [crop]
        if config.translation > 0:
            image_layers.append(
                keras.layers.RandomTranslation(
                    config.translation, config.translation, fill_mode="constant", seed=seed + 1
                )
            )
        if config.horizontal_flip:
            image_layers.append(keras.layers.RandomFlip("horizontal", seed=seed + 2))
        if config.rand_augment:
            image_layers.append(
                keras.layers.RandAugment(
                    value_range=VALUE_RANGE,
                    num_ops=config.rand_augment_ops,
                    factor=config.rand_augment_factor,
                    seed=seed + 3,
                )
            )
        self._image_pipeline = keras.layers.Pipeline(image_layers)
        p = config.random_erasing
        self._erasing = (
            keras.layers.RandomErasing(factor=(p, p), value_range=VALUE_RANGE, seed=seed + 4)
            if p > 0
            else None
        )
        self._mixup = (
            keras.layers.MixUp(alpha=config.mixup_alpha, seed=seed + 5)
            if config.mixup_alpha > 0
            else None
        )
        alpha = config.cutmix_alpha
        self._cutmix = (
            keras.layers.CutMix(factor=(alpha, alpha), seed=seed + 6) if alpha > 0 else None
        )
        self._switch_seed = keras.random.SeedGenerator(seed + 7)

    def augment_image(self, image: tf.Tensor) -> tf.Tensor:
        """Crop/resize, translate, flip and RandAugment images.

        Args:
            image: (H, W, C) or (B, H, W, C) image(s), values in [0, 255].

        Returns:
            float32 image(s) of size `image_size` x `image_size`, values in [0, 255].
        """
        return clip_to_value_range(self._image_pipeline(tf.cast(image, "float32"), training=True))

    def augment_batch(self, images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Random erasing, then MixUp or CutMix (one of them per batch).

        Args:
            images: (B, H, W, C) batch, values in [0, 255].
            labels: (B, num_classes) one-hot float labels when MixUp or CutMix
                is on; otherwise any labels, returned unchanged.

        Returns:
            (images, labels): augmented float32 images and the mixed labels.
        """
        images = tf.cast(images, "float32")
        if self._erasing is not None:
            images = self._erasing(images, training=True)
        if self._mixup is None and self._cutmix is None:
            return images, labels
        labels = tf.cast(labels, "float32")
        if self._cutmix is None:
            images, labels = self._mix(self._mixup, images, labels)
        elif self._mixup is None:
            images, labels = self._mix(self._cutmix, images, labels)
        else:
            use_cutmix = keras.random.uniform((), seed=self._switch_seed) < self.config.cutmix_prob
            images, labels = tf.cond(
                use_cutmix,
                lambda: self._mix(self._cutmix, images, labels),
                lambda: self._mix(self._mixup, images, labels),
            )
        return clip_to_value_range(images), labels

    @staticmethod
    def _mix(layer: keras.layers.Layer, images: tf.Tensor, labels: tf.Tensor):
        mixed = layer({"images": images, "labels": labels}, training=True)
        return mixed["images"], mixed["labels"]
