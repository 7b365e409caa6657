"""Segmentation and inpainting input pipelines: sources, joint augmentation, masks, refusals."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_fourier.data import load_digits
from keras_fourier.data.checks import data_check_error
from keras_fourier.data.inpainting import (
    default_walk_steps,
    load_inpainting_dataset,
    random_walk_masks,
    random_walk_paths,
)
from keras_fourier.data.segmentation import (
    DIGIT_CANVAS_THRESHOLD,
    IGNORE_INDEX,
    SegmentationAugment,
    augment_example,
    count_segmentation_examples,
    digit_canvas,
    load_segmentation_dataset,
    segmentation_class_names,
    segmentation_num_classes,
    segmentation_splits,
)


def _collect(dataset):
    images, masks = zip(*[(x.numpy(), y.numpy()) for x, y in dataset], strict=True)
    return np.concatenate(images), np.concatenate(masks)


def test_digit_canvas_labels_are_the_pasted_digits():
    digits, labels = load_digits("validation")
    images, masks, layouts = digit_canvas("validation", count=40)
    assert images.shape == (40, 64, 64, 3) and masks.shape == (40, 64, 64)
    for image, mask, layout in zip(images, masks, layouts, strict=True):
        assert 1 <= len(layout) <= 3
        expected_image = np.zeros((64, 64), np.float32)
        expected_mask = np.zeros((64, 64), np.int64)
        covered = np.zeros((64, 64), int)  # digits never overlap
        for index, scale, top, left in layout:
            assert 3 <= scale <= 4 and top + 8 * scale <= 64 and left + 8 * scale <= 64
            covered[top : top + 8 * scale, left : left + 8 * scale] += 1
            big = np.repeat(np.repeat(digits[index, :, :, 0], scale, 0), scale, 1)
            region = (slice(top, top + 8 * scale), slice(left, left + 8 * scale))
            pasted = big >= DIGIT_CANVAS_THRESHOLD
            expected_image[region][pasted] = big[pasted]
            expected_mask[region][pasted] = labels[index] + 1
        assert covered.max() == 1
        np.testing.assert_array_equal(mask, expected_mask)
        np.testing.assert_allclose(image[..., 0], expected_image, atol=0.5)
        assert (image[..., 0] > 0).sum() == (mask > 0).sum()
    # Fixed by split, never the same across splits, and the pipeline serves the same arrays.
    np.testing.assert_array_equal(digit_canvas("validation", count=40)[1], masks)
    assert not np.array_equal(digit_canvas("test", count=40)[1], masks)
    pipeline = load_segmentation_dataset("digits", "validation", batch_size=50)
    served_images, served_masks = _collect(pipeline)
    assert served_images.shape == (200, 64, 64, 3) and served_masks.dtype == np.int32
    np.testing.assert_array_equal(served_masks[:40], masks)
    np.testing.assert_array_equal(served_images[:40], images.astype(np.float32))
    assert segmentation_num_classes() == 11 and segmentation_class_names()[:2] == [
        "background",
        "0",
    ]
    assert count_segmentation_examples("digits", "train") == 1000
    assert segmentation_splits() == ("train", "validation")


def test_augmentation_keeps_image_and_mask_aligned():
    # On the canvases the mask is derivable from the image: digit pixels are the non-zero ones.
    # After resizing (bilinear vs nearest), cropping, flipping and padding, pixels of the
    # augmented mask that are labelled digit must sit on bright image pixels and background on
    # dark ones (photometric distortion off, it changes brightness).
    augment = SegmentationAugment(photometric=False)
    images, masks, _ = digit_canvas("test", count=12)
    checked = 0
    for index in range(12):
        image, mask = augment_example(
            tf.constant(images[index], tf.float32),
            tf.constant(masks[index], tf.int32),
            tf.constant(index, tf.int64),
            48,
            augment,
        )
        image, mask = image.numpy()[..., 0], mask.numpy()
        assert image.shape == (48, 48) and mask.shape == (48, 48)
        labelled = mask != IGNORE_INDEX
        digit, background = labelled & (mask > 0), labelled & (mask == 0)
        if digit.any():
            assert np.median(image[digit]) > DIGIT_CANVAS_THRESHOLD
            checked += 1
        assert np.median(image[background]) < 10
        assert (image[~labelled] == 0).all()  # padding: image 0, mask ignored
        assert set(np.unique(mask[labelled])) <= set(range(11))
    assert checked >= 8
    # The same seed gives the same example; the flip moves image and mask together.
    image, mask = tf.constant(images[0], tf.float32), tf.constant(masks[0], tf.int32)
    flip_only = SegmentationAugment(ratio_range=(1.0, 1.0), flip_prob=1.0, photometric=False)
    flipped_image, flipped_mask = augment_example(
        image, mask, tf.constant(3, tf.int64), 64, flip_only
    )
    np.testing.assert_array_equal(flipped_mask.numpy(), masks[0][:, ::-1])
    np.testing.assert_array_equal(flipped_image.numpy(), images[0][:, ::-1].astype(np.float32))
    full = SegmentationAugment()
    first = augment_example(image, mask, tf.constant(7, tf.int64), 64, full)
    second = augment_example(image, mask, tf.constant(7, tf.int64), 64, full)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert first[0].numpy().min() >= 0 and first[0].numpy().max() <= 255


def test_the_same_seed_gives_the_same_augmented_training_batches():
    def batches(seed: int):
        return _collect(
            load_segmentation_dataset(
                "digits",
                "train",
                image_size=16,
                batch_size=8,
                augment=SegmentationAugment(),
                shuffle_buffer=64,
                seed=seed,
            ).take(4)
        )

    first, again = batches(0), batches(0)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(batches(1)[1], first[1])


def test_cat_max_ratio_redraws_crops_dominated_by_one_class():
    # A 64x64 mask with one small square of class 1: a random 16x16 crop mostly holds only
    # class 0; with cat_max_ratio the crop is redrawn until both classes appear.
    mask = np.zeros((64, 64), np.int32)
    mask[24:40, 24:40] = 1
    image = tf.zeros((64, 64, 3))
    keep = SegmentationAugment(ratio_range=(4.0, 4.0), flip_prob=0.0, photometric=False)
    plain = SegmentationAugment(
        ratio_range=(4.0, 4.0), cat_max_ratio=1.0, flip_prob=0.0, photometric=False
    )

    def mixed(augment):
        count = 0
        for seed in range(40):
            _, crop = augment_example(
                image, tf.constant(mask), tf.constant(seed, tf.int64), 16, augment
            )
            count += len(np.unique(crop.numpy())) > 1
        return count

    # Ratio 4 makes the rescale target (256, 64): the 64x64 mask keeps its size, and crops
    # are 16x16 windows of it; fewer than half of them hold part of the square.
    assert mixed(keep) > mixed(plain) + 10


def _write_segdir(root, layout, images, masks, classes=None):
    for split, names in layout.items():
        for folder in ("images", "masks"):
            os.makedirs(os.path.join(root, folder, split), exist_ok=True)
        for name in names:
            tf.io.write_file(
                os.path.join(root, "images", split, name + ".png"),
                tf.io.encode_png(images[name]),
            )
            if name in masks:
                tf.io.write_file(
                    os.path.join(root, "masks", split, name + ".png"),
                    tf.io.encode_png(masks[name][..., None]),
                )
    if classes is not None:
        with open(os.path.join(root, "classes.txt"), "w") as file:
            file.write("\n".join(classes) + "\n")


def _pair(value, size=(12, 16)):
    image = np.full((*size, 3), value, np.uint8)
    mask = np.zeros(size, np.uint8)
    mask[:, size[1] // 2 :] = value % 3
    mask[0, 0] = IGNORE_INDEX
    return image, mask


def test_segdir_source_reads_png_pairs_and_splits(tmp_path):
    names = [f"img{index:02d}" for index in range(20)]
    pairs = {name: _pair(index) for index, name in enumerate(names)}
    images = {name: pair[0] for name, pair in pairs.items()}
    masks = {name: pair[1] for name, pair in pairs.items()}
    root = str(tmp_path / "pets")
    _write_segdir(
        root,
        {"train": names[:10], "val": names[10:14], "test": names[14:]},
        images,
        masks,
        ["a", "b", "c"],
    )
    source = f"segdir:{root}"
    assert segmentation_class_names(source) == ["a", "b", "c"]
    assert [
        count_segmentation_examples(source, split) for split in ("train", "validation", "test")
    ] == [10, 4, 6]
    data = load_segmentation_dataset(source, "validation", image_size=16, batch_size=4)
    got_images, got_masks = _collect(data)
    # A 12x16 image fits 16x16 unscaled: rows 12-15 are padding (ignored), in sorted order.
    for row, index in enumerate(range(10, 14)):
        np.testing.assert_array_equal(got_masks[row, :12], masks[names[index]])
        assert (got_masks[row, 12:] == IGNORE_INDEX).all()
        assert (got_images[row, :12] == index).all() and (got_images[row, 12:] == 0).all()
    # Without a validation folder, every tenth training image is held out.
    flat = str(tmp_path / "flat")
    _write_segdir(flat, {"train": names}, images, masks, ["a", "b", "c"])
    assert count_segmentation_examples(f"segdir:{flat}", "validation") == 2
    assert count_segmentation_examples(f"segdir:{flat}", "train") == 18
    train = load_segmentation_dataset(
        f"segdir:{flat}",
        "train",
        image_size=16,
        batch_size=6,
        augment=SegmentationAugment(),
        seed=3,
    )
    assert _collect(train)[1].shape == (18, 16, 16)


def test_segdir_ade20k_convention(tmp_path):
    root = tmp_path / "ADEChallengeData2016"
    for folder in ("images", "annotations"):
        os.makedirs(root / folder / "training")
    image = np.zeros((8, 8, 3), np.uint8)
    annotation = np.arange(64, dtype=np.uint8).reshape(8, 8) * 2  # 0..126: 0 is "other"
    tf.io.write_file(str(root / "images/training/ADE_train_1.jpg"), tf.io.encode_jpeg(image))
    tf.io.write_file(
        str(root / "annotations/training/ADE_train_1.png"), tf.io.encode_png(annotation[..., None])
    )
    source = f"segdir:{root}"
    assert segmentation_num_classes(source) == 150
    _, masks = _collect(
        load_segmentation_dataset(source, "train", image_size=8, batch_size=1, training=False)
    )
    expected = annotation.astype(np.int32) - 1
    expected[annotation == 0] = IGNORE_INDEX
    np.testing.assert_array_equal(masks[0], expected)


def _failure(source, split, **options):
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        _collect(load_segmentation_dataset(source, split, training=False, **options))
    error = data_check_error(caught.value, source)
    assert error is not None and "\n" not in str(error)
    return str(error)


def test_segdir_refusals(tmp_path):
    image, mask = _pair(1)
    bad = mask.copy()
    bad[3, 3] = 7  # outside the 3 classes
    root = str(tmp_path / "bad_label")
    _write_segdir(
        root,
        {"train": ["a", "b"]},
        {"a": image, "b": image},
        {"a": mask, "b": bad},
        ["x", "y", "z"],
    )
    message = _failure(f"segdir:{root}", "train", image_size=16, batch_size=1)
    assert "b.png" in message and "label 7" in message and "3 classes" in message
    root = str(tmp_path / "bad_size")
    _write_segdir(
        root, {"train": ["a"]}, {"a": image}, {"a": _pair(1, (10, 16))[1]}, ["x", "y", "z"]
    )
    message = _failure(f"segdir:{root}", "train", image_size=16, batch_size=1)
    assert "a.png" in message and "size differs" in message and "10 16" in message
    root = str(tmp_path / "missing")
    _write_segdir(
        root, {"train": ["a", "b"]}, {"a": image, "b": image}, {"a": mask}, ["x", "y", "z"]
    )
    with pytest.raises(ValueError, match=r"1 of 2 images .* have no mask.*b\.png"):
        load_segmentation_dataset(f"segdir:{root}", "train", batch_size=1)
    root = str(tmp_path / "no_classes")
    _write_segdir(root, {"train": ["a"]}, {"a": image}, {"a": mask})
    with pytest.raises(ValueError, match=r"classes\.txt"):
        segmentation_num_classes(f"segdir:{root}")
    with pytest.raises(ValueError, match=r"Received: data='tfds:mnist'"):
        segmentation_num_classes("tfds:mnist")
    with pytest.raises(ValueError, match="Received: data='nowhere'"):
        load_segmentation_dataset("nowhere")


def test_tfds_mask_conventions_on_mock_data(tmp_path):
    def pets(self, split, **kwargs):
        del self, kwargs
        trimap = np.tile(np.array([1, 2, 3, 2], np.uint8), (6, 2))[..., None]
        examples = {
            "image": np.full((3, 6, 8, 3), 9, np.uint8),
            "segmentation_mask": np.repeat(trimap[None], 3, 0),
        }
        return tf.data.Dataset.from_tensor_slices(examples)

    data_dir = str(tmp_path)
    with tfds.testing.mock_data(num_examples=3, as_dataset_fn=pets):
        assert segmentation_class_names("tfds:oxford_iiit_pet", data_dir) == ["background", "pet"]
        assert segmentation_splits("tfds:oxford_iiit_pet", data_dir=data_dir) == (
            "train[:90%]",
            "train[90%:]",
        )
        images, masks = _collect(
            load_segmentation_dataset(
                "tfds:oxford_iiit_pet", "test", image_size=8, batch_size=3, data_dir=data_dir
            )
        )
    assert images.shape == (3, 8, 8, 3) and masks.shape == (3, 8, 8)
    np.testing.assert_array_equal(masks[0, 0], [1, 0, IGNORE_INDEX, 0] * 2)
    assert (masks[:, 6:] == IGNORE_INDEX).all()
    # TFDS's own mock data draws images and masks of unrelated random sizes: refused, naming
    # the example and both sizes.
    with tfds.testing.mock_data(num_examples=2):
        assert segmentation_num_classes("tfds:scene_parse150", data_dir) == 100
        message = _failure(
            "tfds:scene_parse150", "train", image_size=8, batch_size=2, data_dir=data_dir
        )
    assert "tfds:scene_parse150 train example" in message and "size differs" in message


def test_random_walk_masks_follow_the_paper():
    assert default_walk_steps(224, 224) == 3136
    path = random_walk_paths(64, 20, 30, 200, tf.constant([5, 6])).numpy()
    assert path.shape == (201, 64, 2)
    assert (path >= 0).all() and (path[..., 0] < 20).all() and (path[..., 1] < 30).all()
    moves = np.abs(np.diff(path, axis=0)).sum(-1)
    assert set(np.unique(moves)) <= {0, 1}  # one 4-neighbour step, or none at a border
    inside = (
        (path[:-1, :, 0] > 0)
        & (path[:-1, :, 0] < 19)
        & (path[:-1, :, 1] > 0)
        & (path[:-1, :, 1] < 29)
    )
    assert (moves[inside] == 1).all()
    steps = np.diff(path, axis=0)[inside]
    shares = [np.mean((steps == move).all(-1)) for move in ([-1, 0], [1, 0], [0, -1], [0, 1])]
    np.testing.assert_allclose(shares, 0.25, atol=0.02)
    starts = random_walk_paths(4000, 20, 30, 1, tf.constant([1, 2])).numpy()[0]
    np.testing.assert_allclose(starts.mean(0), [9.5, 14.5], atol=0.4)
    masks = random_walk_masks(64, 20, 30, tf.constant([5, 6]), steps=200).numpy()
    for mask, walk in zip(masks, path.transpose(1, 0, 2), strict=True):
        expected = np.zeros((20, 30))
        expected[walk[:, 0], walk[:, 1]] = 1
        np.testing.assert_array_equal(mask, expected)
    assert masks.sum((1, 2)).min() > 1 and masks.sum((1, 2)).max() <= 201
    np.testing.assert_array_equal(
        random_walk_masks(3, 20, 30, tf.constant([5, 6])).numpy(),
        random_walk_masks(3, 20, 30, tf.constant([5, 6])).numpy(),
    )


def test_inpainting_pipeline():
    data = load_inpainting_dataset("digits", "test", batch_size=50)
    inputs, targets = next(iter(data))
    masked, mask = inputs["masked_image"].numpy(), inputs["mask"].numpy()
    targets = targets.numpy()
    assert masked.shape == targets.shape == (50, 64, 64, 3) and mask.shape == (50, 64, 64, 1)
    np.testing.assert_array_equal(masked, targets * (1 - mask))
    assert set(np.unique(mask)) == {0.0, 1.0}
    fraction = mask.mean()
    assert 0.01 < fraction < 1 / 16 + 1e-6
    # Evaluation masks repeat on every pass; training masks change every epoch.
    again = next(iter(data))[0]["mask"].numpy()
    np.testing.assert_array_equal(again, mask)
    train = load_inpainting_dataset("digits", "train", image_size=16, batch_size=8, seed=1)
    first, second = (next(iter(train))[0]["mask"].numpy() for _ in range(2))
    assert first.shape == (8, 16, 16, 1) and not np.array_equal(first, second)
