"""Image pipelines of keras_fourier.data: digits, TFDS (mocked), class-folder directories."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_fourier.cli import main
from keras_fourier.data import (
    AugmentConfig,
    count_examples,
    get_class_names,
    get_num_classes,
    load_digits,
    load_image_dataset,
    training_splits,
)

DEIT_AUGMENT = AugmentConfig()
LIGHT_AUGMENT = AugmentConfig(rand_augment=False, horizontal_flip=False)


def _collect(ds: tf.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
    batches = list(ds.as_numpy_iterator())
    return np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])


def _pixel_rows(images: np.ndarray) -> set[bytes]:
    return {image.tobytes() for image in images}


def test_digits_train_validation_and_test_are_disjoint_stratified_splits():
    splits = {split: load_digits(split) for split in ("train", "validation", "test")}
    assert {split: len(labels) for split, (_, labels) in splits.items()} == {
        "train": 1262,
        "validation": 180,
        "test": 355,
    }
    assert sum(len(labels) for _, labels in splits.values()) == 1797
    counts = sum(np.bincount(labels, minlength=10) for _, labels in splits.values())
    # Stratified: a fifth of every class is test, a tenth validation (within one image).
    assert np.abs(np.bincount(splits["test"][1]) - counts / 5).max() < 1
    assert np.abs(np.bincount(splits["validation"][1]) - counts / 10).max() < 1
    for images, labels in splits.values():
        assert images.shape[1:] == (8, 8, 1) and set(labels) == set(range(10))
        assert images.dtype == np.float32 and images.min() == 0.0 and images.max() == 255.0
    train, validation, test = (_pixel_rows(splits[name][0]) for name in splits)
    assert not train & validation and not train & test and not validation & test
    with pytest.raises(ValueError, match="'holdout'"):
        load_digits("holdout")


def test_training_splits_keep_the_test_split_unseen():
    assert training_splits("digits") == ("train", "validation")
    assert training_splits("dir:anything") == ("train", "validation")
    with pytest.raises(ValueError, match=r"'validation'.*also its validation split"):
        training_splits("digits", test_split="validation")
    assert count_examples("digits", "validation") == 180


def test_digits_eval_pipeline_shapes_labels_range_and_determinism():
    def load():
        ds = load_image_dataset("digits", "test", image_size=32, batch_size=128)
        assert int(ds.cardinality()) == 3
        return _collect(ds)

    images, labels = load()
    assert images.shape == (355, 32, 32, 3) and images.dtype == np.float32
    assert labels.dtype == np.int32 and set(labels) == set(range(10))
    assert images.min() >= 0.0 and images.max() <= 255.0 and images.max() > 250.0
    np.testing.assert_array_equal(labels, load_digits("test")[1])
    np.testing.assert_array_equal(images[..., 0], images[..., 2])
    again_images, again_labels = load()
    np.testing.assert_array_equal(images, again_images)
    np.testing.assert_array_equal(labels, again_labels)


def test_digits_training_pipeline_covers_the_train_split_in_shuffled_order():
    def epoch(seed: int = 0):
        return _collect(
            load_image_dataset(
                "digits", "train", image_size=16, batch_size=256, drop_remainder=False, seed=seed
            )
        )

    images, labels = epoch()
    expected = load_digits("train")[1]
    assert images.shape == (1262, 16, 16, 3)
    np.testing.assert_array_equal(np.sort(labels), np.sort(expected))
    assert not np.array_equal(labels, expected)
    # The same seed, the same order on every load (parallel maps keep it); another, another.
    again_images, again_labels = epoch()
    np.testing.assert_array_equal(again_images, images)
    np.testing.assert_array_equal(again_labels, labels)
    assert not np.array_equal(epoch(seed=1)[1], labels)


def test_deterministic_augmented_training_is_identical_across_loads():
    def first_batches(seed, augment=DEIT_AUGMENT):
        ds = load_image_dataset(
            "digits",
            "train",
            image_size=16,
            batch_size=16,
            augment=augment,
            deterministic=True,
            seed=seed,
        )
        assert ds.options().deterministic
        return list(ds.take(2).as_numpy_iterator())

    first, second = first_batches(0), first_batches(0)
    for (images_a, labels_a), (images_b, labels_b) in zip(first, second, strict=True):
        np.testing.assert_array_equal(images_a, images_b)
        np.testing.assert_array_equal(labels_a, labels_b)
    light_seed_0, light_seed_1 = first_batches(0, LIGHT_AUGMENT), first_batches(1, LIGHT_AUGMENT)
    assert not np.array_equal(light_seed_0[0][0], light_seed_1[0][0])


def test_augmented_batches_have_one_hot_labels_and_valid_range():
    ds = load_image_dataset("digits", image_size=16, batch_size=32, augment=LIGHT_AUGMENT)
    images, labels = next(iter(ds))
    assert images.shape == (32, 16, 16, 3) and labels.shape == (32, 10)
    assert labels.dtype == tf.float32
    np.testing.assert_allclose(tf.reduce_sum(labels, axis=1), 1.0, rtol=1e-5)
    assert float(tf.reduce_min(images)) >= 0.0 and float(tf.reduce_max(images)) <= 255.0
    assert ds.element_spec[0].shape.as_list() == [32, 16, 16, 3]


def test_one_hot_labels_follow_mixing_and_the_flag():
    ints = load_image_dataset("digits", "test", image_size=8, batch_size=400)
    hot = load_image_dataset("digits", "test", image_size=8, batch_size=400, one_hot=True)
    (_, int_labels), (_, hot_labels) = next(iter(ints)), next(iter(hot))
    assert hot_labels.shape == (355, 10) and hot_labels.dtype == tf.float32
    np.testing.assert_array_equal(np.argmax(hot_labels, axis=1), int_labels)
    no_mix = AugmentConfig(rand_augment=False, mixup_alpha=0.0, cutmix_alpha=0.0)
    _, labels = next(iter(load_image_dataset("digits", image_size=8, augment=no_mix)))
    assert labels.dtype == tf.int32 and labels.shape == (128,)
    evaluation = load_image_dataset("digits", "test", image_size=8, augment=AugmentConfig())
    assert next(iter(evaluation))[1].dtype == tf.int32, "augment is ignored when not training"
    with pytest.raises(ValueError, match="one_hot=False"):
        load_image_dataset("digits", augment=AugmentConfig(), one_hot=False)


def test_input_context_shards_and_batches_per_replica_and_auto_shard_option():
    context = tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2
    )
    ds = load_image_dataset("digits", "test", image_size=8, batch_size=64, input_context=context)
    images, labels = _collect(ds)
    assert images.shape[0] == 177 and next(iter(ds))[0].shape[0] == 32
    np.testing.assert_array_equal(labels, load_digits("test")[1][1::2])
    policy = tf.data.experimental.AutoShardPolicy
    assert ds.options().experimental_distribute.auto_shard_policy == policy.OFF
    plain = load_image_dataset("digits", "test", image_size=8)
    assert plain.options().experimental_distribute.auto_shard_policy == policy.DATA


def test_cache_in_memory_and_on_disk(tmp_path):
    reference = _collect(load_image_dataset("digits", "test", image_size=8, batch_size=400))
    for cache in (True, str(tmp_path / "cache")):
        ds = load_image_dataset("digits", "test", image_size=8, batch_size=400, cache=cache)
        for _ in range(2):
            images, labels = _collect(ds)
            np.testing.assert_array_equal(images, reference[0])
            np.testing.assert_array_equal(labels, reference[1])


def test_tfds_source_on_mock_data(tmp_path):
    with tfds.testing.mock_data(num_examples=6):
        assert get_num_classes("tfds:cifar10", data_dir=str(tmp_path)) == 10
        names = get_class_names("tfds:cifar10", data_dir=str(tmp_path))
        label = tfds.builder("cifar10", data_dir=str(tmp_path)).info.features["label"]
        assert names == label.names and len(names) == 10
        # CIFAR-10 has no validation split: the last 10% of train is held out.
        assert training_splits("tfds:cifar10", data_dir=str(tmp_path)) == (
            "train[:90%]",
            "train[90%:]",
        )
        train = load_image_dataset(
            "tfds:cifar10",
            "train",
            image_size=16,
            batch_size=3,
            augment=LIGHT_AUGMENT,
            data_dir=str(tmp_path),
        )
        images, labels = _collect(train)
        test_images, test_labels = _collect(
            load_image_dataset("tfds:cifar10", "test", image_size=24, data_dir=str(tmp_path))
        )
    assert images.shape == (6, 16, 16, 3) and labels.shape == (6, 10)
    assert test_images.shape == (6, 24, 24, 3) and test_labels.dtype == np.int32
    assert images.min() >= 0.0 and images.max() <= 255.0 and test_images.max() <= 255.0


def _write_pngs(folder, count, shape, value):
    os.makedirs(folder, exist_ok=True)
    for index in range(count):
        image = tf.fill(shape, tf.constant(value + index, tf.uint8))
        tf.io.write_file(os.path.join(folder, f"{index}.png"), tf.io.encode_png(image))


def _first_pixels(source, split) -> set[float]:
    ds = load_image_dataset(source, split, image_size=8, drop_remainder=False, training=False)
    return set(np.round(_collect(ds)[0][:, 0, 0, 0]).tolist())


def test_directory_with_split_folders_holds_validation_out_of_train(tmp_path):
    for split, count in (("train", 4), ("val", 2)):
        for label, name in enumerate(("cat", "dog")):
            _write_pngs(tmp_path / split / name, count, (20, 30, 3), 100 * label)
    source = f"dir:{tmp_path}"
    assert get_num_classes(source, "val") == 2
    assert get_class_names(source) == get_class_names(source, "val") == ["cat", "dog"]
    assert get_class_names("digits") == [str(digit) for digit in range(10)]
    images, labels = _collect(load_image_dataset(source, "val", image_size=12, batch_size=8))
    assert images.shape == (4, 12, 12, 3) and sorted(labels.tolist()) == [0, 0, 1, 1]
    np.testing.assert_allclose(images[labels == 1].min(), 100.0)
    train = load_image_dataset(source, "train", image_size=12, batch_size=2, augment=LIGHT_AUGMENT)
    assert next(iter(train))[1].shape == (2, 2)
    # No validation folder: the fourth image of each class (file 3.png) is held out of train.
    assert _first_pixels(source, "validation") == {3.0, 103.0}
    assert _first_pixels(source, "train") == {0.0, 1.0, 2.0, 100.0, 101.0, 102.0}
    assert count_examples(source, "train") == 6 and count_examples(source, "validation") == 2
    _write_pngs(tmp_path / "validation" / "cat", 1, (20, 30, 3), 50)
    _write_pngs(tmp_path / "validation" / "dog", 1, (20, 30, 3), 150)
    assert _first_pixels(source, "validation") == {50.0, 150.0}
    assert count_examples(source, "train") == 8
    with pytest.raises(ValueError, match="'test'"):
        load_image_dataset(source, "test")


def test_directory_of_class_folders_is_split_into_train_validation_and_test(tmp_path):
    for label, name in enumerate(("a", "b", "c")):
        _write_pngs(tmp_path / name, 10, (16, 16, 1), 50 * label)
    source = f"dir:{tmp_path}"
    assert get_num_classes(source) == 3
    train = _collect(load_image_dataset(source, "train", image_size=8, drop_remainder=False))
    assert len(train[1]) == 21 and train[0].shape[1:] == (8, 8, 3)
    pixels = {split: _first_pixels(source, split) for split in ("train", "validation", "test")}
    assert pixels["test"] == {4.0, 9.0, 54.0, 59.0, 104.0, 109.0}
    assert pixels["validation"] == {3.0, 53.0, 103.0}
    assert len(pixels["train"]) == 21 and not pixels["train"] & (
        pixels["test"] | pixels["validation"]
    )
    with pytest.raises(ValueError, match="'holdout'"):
        load_image_dataset(source, "holdout")


@pytest.mark.parametrize("source", ["mnist", "tfds:", "dir:", "imagenet", "", 42])
def test_unknown_source_names_it(source):
    with pytest.raises(ValueError, match=re.escape(repr(source))):
        load_image_dataset(source)
    with pytest.raises(ValueError, match=re.escape(repr(source))):
        get_num_classes(source)


@pytest.mark.parametrize(
    ("task", "source", "what"),
    [
        ("image_classification", "dir", "Image directory"),
        ("segmentation", "segdir", "Segmentation folder"),
        ("detection", "coco", "Detection folder"),
        ("instance_segmentation", "coco", "Detection folder"),
    ],
)
def test_a_missing_data_folder_is_bad_input_named_in_one_line(tmp_path, capsys, task, source, what):
    # a mistyped --data is the user's input: exit 2 naming it, not a failure to write the run
    missing = str(tmp_path / "no_such_folder")
    file = tmp_path / "a_file.png"
    file.write_bytes(b"x")
    if source == "dir":
        with pytest.raises(ValueError, match=re.escape(repr(missing))):
            get_num_classes(f"dir:{missing}")
    for path, problem in ((missing, "does not exist"), (str(file), "is a file, not a folder")):
        out = tmp_path / "run"
        argv = ["train", "--task", task, "--data", f"{source}:{path}", "--out", str(out)]
        assert main(argv) == 2 and not out.exists()
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert f"{what} {path!r} {problem}. Received: data='{source}:{path}'" in line, line


def test_unknown_tfds_name_names_it(tmp_path):
    with pytest.raises(ValueError, match="'no_such_dataset_xyz'"):
        load_image_dataset("tfds:no_such_dataset_xyz", data_dir=str(tmp_path))
    with pytest.raises(ValueError, match="'no_such_dataset_xyz'"):
        get_num_classes("tfds:no_such_dataset_xyz", data_dir=str(tmp_path))


@pytest.mark.parametrize("bad", [0, -1, 32.0, "32", True, None])
def test_bad_image_size_names_it(bad):
    with pytest.raises(ValueError, match=re.escape(f"image_size={bad!r}")):
        load_image_dataset("digits", image_size=bad)


def test_bad_split_batch_size_and_crop_pct_name_them():
    with pytest.raises(ValueError, match="'holdout'"):
        load_image_dataset("digits", "holdout")
    with pytest.raises(ValueError, match=re.escape("batch_size=0")):
        load_image_dataset("digits", batch_size=0)
    with pytest.raises(ValueError, match=re.escape("crop_pct=1.2")):
        load_image_dataset("digits", crop_pct=1.2)
