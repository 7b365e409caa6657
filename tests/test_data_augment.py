"""Training augmentation and evaluation transforms of keras_fourier.data.augment."""

import dataclasses
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_fourier.data import AugmentConfig, ImageAugmenter, RandomResizedCrop, eval_transform

SIZE = 16
NUM_CLASSES = 4
ALL_OFF = AugmentConfig(
    random_resized_crop=False,
    horizontal_flip=False,
    rand_augment=False,
    random_erasing=0.0,
    mixup_alpha=0.0,
    cutmix_alpha=0.0,
)
SINGLE_AUGMENTATIONS = {
    "random_resized_crop": {"random_resized_crop": True},
    "translation": {"translation": 0.25},
    "horizontal_flip": {"horizontal_flip": True},
    "rand_augment": {"rand_augment": True},
    "random_erasing": {"random_erasing": 1.0},
    "mixup": {"mixup_alpha": 0.8},
    "cutmix": {"cutmix_alpha": 1.0},
    "mixup_or_cutmix": {"mixup_alpha": 0.8, "cutmix_alpha": 1.0},
}


def _batch(size: int = SIZE) -> tuple[np.ndarray, np.ndarray]:
    """Four distinct, asymmetric images (a gradient times a class constant) and one-hot labels."""
    ramp = np.linspace(0.0, 1.0, size, dtype=np.float32)
    base = np.stack([np.add.outer(ramp, ramp**2)] * 3, axis=-1) * 60.0
    images = np.stack([base + 40.0 * i for i in range(NUM_CLASSES)])
    return images.astype(np.float32), np.eye(NUM_CLASSES, dtype=np.float32)


def _augment(augmenter: ImageAugmenter, images, labels, where: str):
    """Per-image then per-batch stage, eagerly or in `Dataset.map` (sequential: fixed draws)."""
    if where == "eager":
        return augmenter.augment_batch(augmenter.augment_image(images), labels)
    ds = (
        tf.data.Dataset.from_tensor_slices((images, labels))
        .map(lambda x, y: (augmenter.augment_image(x), y))
        .batch(len(labels))
        .map(augmenter.augment_batch)
    )
    return next(iter(ds))


def _check_common(images, labels, config: AugmentConfig) -> None:
    images, labels = np.asarray(images), np.asarray(labels)
    assert images.shape == (NUM_CLASSES, SIZE, SIZE, 3) and images.dtype == np.float32
    assert np.isfinite(images).all() and images.min() >= 0.0 and images.max() <= 255.0
    assert labels.shape == (NUM_CLASSES, NUM_CLASSES)
    np.testing.assert_allclose(labels.sum(axis=1), 1.0, rtol=1e-5)
    if not config.mixes_labels:
        np.testing.assert_array_equal(labels, np.eye(NUM_CLASSES))


@pytest.mark.parametrize("where", ["eager", "dataset_map"])
@pytest.mark.parametrize("name", list(SINGLE_AUGMENTATIONS))
def test_each_augmentation_runs_eagerly_and_in_dataset_map(name, where):
    config = dataclasses.replace(ALL_OFF, **SINGLE_AUGMENTATIONS[name])
    augmenter = ImageAugmenter(config, image_size=SIZE, seed=3)
    images, labels = _batch()
    out_images, out_labels = _augment(augmenter, images, labels, where)
    _check_common(out_images, out_labels, config)
    assert not np.allclose(out_images, images), f"{name} left every image unchanged"


@pytest.mark.parametrize("where", ["eager", "dataset_map"])
def test_all_off_is_identity_at_output_size(where):
    augmenter = ImageAugmenter(ALL_OFF, image_size=SIZE, seed=0)
    images, labels = _batch()
    out_images, out_labels = _augment(augmenter, images, labels, where)
    np.testing.assert_allclose(out_images, images, atol=1e-4)
    np.testing.assert_array_equal(out_labels, labels)


def test_horizontal_flip_mirrors_or_keeps_each_image():
    config = dataclasses.replace(ALL_OFF, horizontal_flip=True)
    images, _ = _batch()
    flipped = np.asarray(ImageAugmenter(config, SIZE, seed=1).augment_image(images))
    for original, out in zip(images, flipped, strict=True):
        assert np.allclose(out, original) or np.allclose(out, original[:, ::-1])


def test_mixup_and_cutmix_mix_labels_and_keep_pixels_of_the_batch():
    images, labels = _batch()
    cutmix = ImageAugmenter(dataclasses.replace(ALL_OFF, cutmix_alpha=1.0), SIZE, seed=5)
    out_images, out_labels = (np.asarray(t) for t in cutmix.augment_batch(images, labels))
    for i in range(NUM_CLASSES):
        from_batch = np.isclose(out_images[i][None], images).all(axis=-1).any(axis=0)
        assert from_batch.all(), "CutMix pastes pixels from the batch at the same place"
    mixup = ImageAugmenter(dataclasses.replace(ALL_OFF, mixup_alpha=0.8), SIZE, seed=5)
    _, mixed_labels = mixup.augment_batch(images, labels)
    assert (np.asarray(mixed_labels).max(axis=1) < 1.0).any()
    assert (out_labels >= 0).all() and (np.asarray(mixed_labels) >= 0).all()


def test_random_resized_crop_single_image_any_size_and_full_crop():
    crop = RandomResizedCrop(SIZE, SIZE, seed=0)
    image = tf.random.stateless_uniform((30, 50, 3), (1, 2), maxval=255.0)
    assert crop(image).shape == (SIZE, SIZE, 3)
    full = RandomResizedCrop(SIZE, SIZE, scale=(1.0, 1.0), ratio=(1.0, 1.0), seed=0)
    square = tf.random.stateless_uniform((2, 24, 24, 3), (3, 4), maxval=255.0)
    np.testing.assert_allclose(full(square), tf.image.resize(square, (SIZE, SIZE)), atol=1e-3)
    np.testing.assert_allclose(
        crop(square, training=False), tf.image.resize(square, (SIZE, SIZE)), atol=1e-3
    )
    assert RandomResizedCrop.from_config(crop.get_config()).scale == (0.08, 1.0)


@pytest.mark.parametrize("where", ["eager", "dataset_map"])
def test_eval_transform_resizes_shorter_side_and_centre_crops(where):
    # 40x60 image, 200 inside rows 8..32 and columns 18..42, 0 elsewhere. crop_pct=0.5 at 16:
    # resize the centre 40x40 square to 32, keep its centre 16x16, i.e. the original's
    # centre 20x20 (rows 10..30, columns 20..40), which lies inside the 200 block.
    image = np.zeros((40, 60, 3), np.float32)
    image[8:32, 18:42] = 200.0
    transform = eval_transform(16, crop_pct=0.5)
    if where == "eager":
        out = transform(np.stack([image, image]))
    else:
        out = next(iter(tf.data.Dataset.from_tensors(image).repeat(2).map(transform).batch(2)))
    assert out.shape == (2, 16, 16, 3)
    np.testing.assert_allclose(out, 200.0, atol=1e-3)
    assert eval_transform(16, crop_pct=1.0)(image).shape == (16, 16, 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"crop_scale": (0.5, 0.1)}, "crop_scale=(0.5, 0.1)"),
        ({"crop_ratio": (2.0,)}, "crop_ratio=(2.0,)"),
        ({"random_erasing": 1.5}, "random_erasing=1.5"),
        ({"cutmix_alpha": 2.0}, "cutmix_alpha=2.0"),
        ({"mixup_alpha": -1.0}, "mixup_alpha=-1.0"),
        ({"rand_augment_ops": 0}, "rand_augment_ops=0"),
    ],
)
def test_augment_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        AugmentConfig(**kwargs)


@pytest.mark.parametrize("bad", [0, -4, 16.0, "16", True, None])
def test_transforms_reject_bad_image_size(bad):
    with pytest.raises(ValueError, match=re.escape(f"image_size={bad!r}")):
        eval_transform(bad)
    with pytest.raises(ValueError, match=re.escape(f"image_size={bad!r}")):
        ImageAugmenter(AugmentConfig(), bad)


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.2])
def test_eval_transform_rejects_bad_crop_pct(bad):
    with pytest.raises(ValueError, match=re.escape(f"crop_pct={bad!r}")):
        eval_transform(16, crop_pct=bad)
