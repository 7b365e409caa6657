"""Image classification input pipelines: TFDS, class-folder directories and embedded digits.

`load_image_dataset` returns a batched `tf.data.Dataset` of (images, labels):
images (B, image_size, image_size, 3) float32 with values in [0, 255] (models
normalise inside), labels int32 (B,) or, with MixUp/CutMix, one-hot float32
(B, num_classes). Train with `keras.losses.SparseCategoricalCrossentropy` on
integer labels and `keras.losses.CategoricalCrossentropy` (with DeiT's
`label_smoothing=0.1`) on one-hot labels; pass `one_hot=True` to the
evaluation pipeline so both share that loss.

Sources:

* ``"digits"``: the UCI handwritten digits embedded in the package (1,797
  8x8 grey images, 10 classes, no network). Within each class, in file
  order, every fifth image (positions 4, 9, 14, ...) is split ``"test"``
  (355 images), every tenth (positions 3, 13, 23, ...) split
  ``"validation"`` (180) and the rest split ``"train"`` (1,262): the three
  never overlap.
* ``"tfds:<name>"``: a TensorFlow Datasets dataset with (image, label)
  supervised keys, e.g. ``"tfds:cifar10"``, ``"tfds:imagenet2012"``,
  ``"tfds:oxford_flowers102"``; `split` is a TFDS split string (slices such
  as ``"train[90%:]"`` included) and `data_dir` the TFDS data directory.
  Needs the `tensorflow-datasets` package.
* ``"dir:<path>"``: class folders of images (``.bmp .gif .jpeg .jpg .png``).
  If ``<path>/<split>`` exists its class folders are used. If
  ``<path>/train`` exists but ``<path>/validation`` does not, split
  ``"validation"`` is every tenth image of each class of ``<path>/train``
  (in sorted file order) and ``"train"`` the rest. If ``<path>`` holds the
  class folders themselves, they are split as the digits are: every fifth
  image of a class ``"test"``, every tenth ``"validation"``, the rest
  ``"train"``.


Data that cannot make sense is refused with a message naming it (see
:mod:`keras_fourier.data.checks`): a ``dir:`` source with fewer than two
class folders or whose split folders hold different class folders, a split
without images or, when partial batches are dropped, smaller than a batch,
and a corrupt image file (named; or skipped and counted with
``on_bad_image="skip"``).

`training_splits` names the train and validation splits of a source that
keep its test split unseen; `count_examples` counts a split's examples.
"""

from __future__ import annotations

import gzip
import importlib.resources
import os
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_fourier.data.augment import (
    AugmentConfig,
    ImageAugmenter,
    check_image_size,
    clip_to_value_range,
    eval_transform,
)
from keras_fourier.data.checks import (
    check_class_folders,
    check_source_folder,
    check_split_size,
    decode_files,
    find_unreadable,
    report_skipped,
)
from keras_fourier.fileio import warn
from keras_fourier.settings import BAD_IMAGE_MODES, DIGITS_NUM_CLASSES
from keras_fourier.validation import check_choice

HELD_OUT_SPLITS = ("train", "validation", "test")
IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")
# The share of TFDS "train" held out for validation when a dataset has no validation split.
TFDS_VALIDATION_PERCENT = 10
AUTOTUNE = tf.data.AUTOTUNE


def _held_out(rank_in_class: np.ndarray, split: str, with_test: bool) -> np.ndarray:
    """Members of `split` given each example's position within its class.

    Every fifth example of a class is "test" (when `with_test`), every tenth
    (positions 3, 13, ...) "validation", the rest "train"; the three are
    disjoint and keep the class proportions.
    """
    test = (rank_in_class % 5 == 4) & with_test
    validation = rank_in_class % 10 == 3
    return {"test": test, "validation": validation, "train": ~(test | validation)}[split]


def _rank_in_class(labels: np.ndarray) -> np.ndarray:
    """Each example's position among the examples of its label, in order: one pass."""
    seen: dict = {}
    rank = []
    for label in labels.tolist():
        position = seen.get(label, 0)
        rank.append(position)
        seen[label] = position + 1
    return np.asarray(rank, dtype=np.int64)


def load_digits(split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Load a split of the embedded UCI handwritten digits as NumPy arrays.

    The 1,797 8x8 images (pixel counts 0..16 in the original) are scaled to
    [0, 255]. Within each class, in file order, every fifth image is "test"
    (355 images), every tenth "validation" (180) and the rest "train"
    (1,262): the splits are disjoint, keep the class proportions and never
    change.

    Args:
        split: "train", "validation" or "test". Default "train".

    Returns:
        (images, labels): float32 (N, 8, 8, 1) with values in [0, 255] and
        int32 (N,) labels in 0..9.

    Example:
        >>> images, labels = load_digits("test")
        >>> images.shape, labels.shape
        ((355, 8, 8, 1), (355,))
    """
    if split not in HELD_OUT_SPLITS:
        raise ValueError(
            f"Unknown split {split!r} for source 'digits'; expected one of {HELD_OUT_SPLITS}."
        )
    with (
        importlib.resources.files("keras_fourier.data").joinpath("digits.csv.gz").open("rb") as raw,
        gzip.open(raw, "rt") as text,
    ):
        table = np.loadtxt(text, delimiter=",", dtype=np.float32)
    images = table[:, :-1].reshape(-1, 8, 8, 1) * np.float32(255.0 / 16.0)
    labels = table[:, -1].astype(np.int32)
    keep = _held_out(_rank_in_class(labels), split, with_test=True)
    return images[keep], labels[keep]


def _parse_source(source: str) -> tuple[str, str]:
    if isinstance(source, str):
        if source == "digits":
            return "digits", ""
        for kind in ("tfds", "dir"):
            prefix = kind + ":"
            if source.startswith(prefix) and len(source) > len(prefix):
                return kind, source[len(prefix) :]
    raise ValueError(
        f"Unknown image data source {source!r}; expected 'digits', 'tfds:<name>' or 'dir:<path>'."
    )


def is_image_source(source: object) -> bool:
    """Whether `source` names an image classification source: "digits", "tfds:<name>", "dir:<path>".

    Example:
        >>> is_image_source("tfds:cifar10"), is_image_source("csv:data/sst2")
        (True, False)
    """
    try:
        _parse_source(source)
    except ValueError:
        return False
    return True


def tfds_builder(name: str, data_dir: str | None) -> tuple[Any, Any]:
    """(the tensorflow_datasets module, the builder of TFDS dataset `name`).

    Raises:
        ImportError: tensorflow-datasets is not installed (an optional dependency).
        ValueError: TFDS has no dataset `name`.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise ImportError(
            f"Image source 'tfds:{name}' needs tensorflow-datasets: pip install tensorflow-datasets"
        ) from error
    try:
        return tfds, tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as error:
        raise ValueError(f"TFDS dataset {name!r} (source 'tfds:{name}') does not exist.") from error


def _class_root(path: str, split: str) -> tuple[str, bool | None]:
    """Folder holding the class folders, and which held-out rule picks the split's files.

    The rule is None (every file), False (validation carved out of a
    ``train`` folder) or True (test and validation carved out of class
    folders at the top level).
    """
    check_source_folder(path, "Image directory", f"dir:{path}")
    split_dir = os.path.join(path, split)
    train_dir = os.path.join(path, "train")
    has_validation = os.path.isdir(os.path.join(path, "validation"))
    if split in ("train", "validation") and os.path.isdir(train_dir) and not has_validation:
        return train_dir, False
    if os.path.isdir(split_dir):
        return split_dir, None
    if split not in HELD_OUT_SPLITS or os.path.isdir(train_dir):
        raise ValueError(
            f"Unknown split {split!r} for source 'dir:{path}': it has no {split!r} folder, and "
            f"a folder of class folders only has splits {HELD_OUT_SPLITS}."
        )
    return path, True


def get_num_classes(
    source: str = "digits", split: str = "train", data_dir: str | None = None
) -> int:
    """Number of classes of an image source, without reading any images.

    Args:
        source: "digits", "tfds:<name>" or "dir:<path>" (see the module
            docstring). Default "digits".
        split: the split whose class folders count for a "dir:" source laid
            out as ``<path>/<split>/<class>/``. Default "train".
        data_dir: TFDS data directory. Default None (TFDS's default).

    Returns:
        The number of classes.

    Example:
        >>> get_num_classes("digits")
        10
    """
    kind, value = _parse_source(source)
    if kind == "digits":
        return DIGITS_NUM_CLASSES
    if kind == "tfds":
        _, builder = tfds_builder(value, data_dir)
        return builder.info.features[builder.info.supervised_keys[1]].num_classes
    root, _ = _class_root(value, split)
    return len(check_class_folders(value, root))


def get_class_names(
    source: str = "digits", split: str = "train", data_dir: str | None = None
) -> list[str]:
    """The names of an image source's classes, in label order, without reading any images.

    Args:
        source: "digits", "tfds:<name>" or "dir:<path>" (see the module
            docstring). Default "digits".
        split: the split whose class folders name the classes of a "dir:"
            source laid out as ``<path>/<split>/<class>/``. Default "train".
        data_dir: TFDS data directory. Default None (TFDS's default).

    Returns:
        "0" to "9" for the digits, the dataset's label names for TFDS, the
        class folders' names for "dir:".

    Example:
        >>> get_class_names("digits")[:3]
        ['0', '1', '2']
    """
    kind, value = _parse_source(source)
    if kind == "digits":
        return [str(digit) for digit in range(DIGITS_NUM_CLASSES)]
    if kind == "tfds":
        _, builder = tfds_builder(value, data_dir)
        return list(builder.info.features[builder.info.supervised_keys[1]].names)
    root, _ = _class_root(value, split)
    return check_class_folders(value, root)


def _directory_files(path: str, split: str) -> tuple[list[str], np.ndarray]:
    """The image files of a split of a "dir:" source and their labels, in sorted order."""
    root, carve = _class_root(path, split)
    files, labels, special = [], [], []
    for label, name in enumerate(check_class_folders(path, root)):
        count = len(files)
        for folder, subfolders, names in sorted(os.walk(os.path.join(root, name))):
            subfolders.sort()
            for file in sorted(names):
                if file.lower().endswith(IMAGE_EXTENSIONS):
                    file = os.path.join(folder, file)
                    if not os.path.isfile(file):  # a FIFO or device would block the reader
                        special.append(file)
                        continue
                    files.append(file)
                    labels.append(label)
        if len(files) == count:
            raise ValueError(
                f"Class folder {os.path.join(root, name)!r} of image source 'dir:{path}' holds "
                f"no image files ({', '.join(IMAGE_EXTENSIONS)}): a class without examples "
                "cannot be learned; add images or remove the folder."
            )
    if special:
        shown = ", ".join(special[:3]) + (", ..." if len(special) > 3 else "")
        warn(f"skipped {len(special)} entries of 'dir:{path}' that are not regular files: {shown}")
    labels = np.asarray(labels, dtype=np.int32)
    if carve is not None:
        keep = _held_out(_rank_in_class(labels), split, with_test=carve)
        files, labels = [file for file, kept in zip(files, keep, strict=True) if kept], labels[keep]
    return files, labels


def training_splits(
    source: str = "digits", test_split: str = "test", data_dir: str | None = None
) -> tuple[str, str]:
    """The train and validation splits of a source that leave `test_split` unseen.

    "digits" and "dir:" sources have disjoint "train" and "validation"
    splits (held out from the training images when there is no validation
    folder). A TFDS dataset with a "validation" split other than
    `test_split` uses it; otherwise the last 10% of "train" is held out.

    Args:
        source: "digits", "tfds:<name>" or "dir:<path>". Default "digits".
        test_split: the split reported once at the end. Default "test".
        data_dir: TFDS data directory. Default None.

    Returns:
        (train split, validation split).

    Raises:
        ValueError: when the validation split would be `test_split`.

    Example:
        >>> training_splits("digits")
        ('train', 'validation')
    """
    kind, value = _parse_source(source)
    splits = ("train", "validation")
    if kind == "tfds":
        _, builder = tfds_builder(value, data_dir)
        builder.download_and_prepare()
        if "validation" not in builder.info.splits or test_split == "validation":
            percent = 100 - TFDS_VALIDATION_PERCENT
            splits = (f"train[:{percent}%]", f"train[{percent}%:]")
    if test_split in splits:
        role = "train" if test_split == splits[0] else "validation"
        raise ValueError(
            f"The test split {test_split!r} of source {source!r} is also its {role} split; "
            "pick another test split."
        )
    return splits


def count_examples(source: str, split: str, data_dir: str | None = None) -> int | None:
    """Number of examples in a split of an image source.

    Args:
        source: "digits", "tfds:<name>" or "dir:<path>".
        split: the split (TFDS slices such as "train[:90%]" included).
        data_dir: TFDS data directory. Default None.

    Returns:
        The number of examples; for TFDS the cardinality TFDS declares, None
        if it declares none.

    Example:
        >>> count_examples("digits", "validation")
        180
    """
    kind, value = _parse_source(source)
    if kind == "digits":
        return len(load_digits(split)[1])
    if kind == "tfds":
        _, builder = tfds_builder(value, data_dir)
        builder.download_and_prepare()
        count = int(builder.as_dataset(split=split).cardinality())
        return count if count >= 0 else None
    return len(_directory_files(value, split)[1])


def _load_source(
    kind: str,
    value: str,
    split: str,
    image_size: int,
    crop_pct: float,
    data_dir,
    training,
    seed,
    on_bad_image: str = "error",
) -> tuple[tf.data.Dataset, int]:
    """The split's (image, label) examples, and how many (negative: unknown)."""
    if kind == "digits":
        images, labels = load_digits(split)
        return tf.data.Dataset.from_tensor_slices((images, labels)), len(labels)
    if kind == "tfds":
        tfds, builder = tfds_builder(value, data_dir)
        builder.download_and_prepare()
        dataset = builder.as_dataset(
            split=split,
            as_supervised=True,
            shuffle_files=training,
            read_config=tfds.ReadConfig(shuffle_seed=seed),
        )
        return dataset, int(dataset.cardinality())
    files, labels = _directory_files(value, split)
    if on_bad_image == "skip":
        unreadable = set(find_unreadable(files))
        report_skipped(f"dir:{value}", split, sorted(unreadable), len(files))
        keep = [index for index, file in enumerate(files) if file not in unreadable]
        files, labels = [files[index] for index in keep], labels[keep]
    load_size = max(image_size, int(image_size / crop_pct))
    resize = keras.layers.Resizing(load_size, load_size, crop_to_aspect_ratio=True)
    dataset = tf.data.Dataset.from_tensor_slices((tf.constant(files, tf.string), labels))
    if training:
        dataset = dataset.shuffle(max(len(labels), 1), seed=seed, reshuffle_each_iteration=True)
    dataset = decode_files(dataset).map(
        lambda image, label: (resize(tf.cast(image, tf.float32)), label),
        num_parallel_calls=AUTOTUNE,
    )
    return dataset, len(labels)


def _standardize(image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    image = tf.cast(image, "float32")
    if image.shape[-1] == 1:
        image = tf.image.grayscale_to_rgb(image)
    return image, tf.cast(label, "int32")


def load_image_dataset(
    source: str = "digits",
    split: str = "train",
    *,
    image_size: int = 32,
    batch_size: int = 128,
    training: bool | None = None,
    augment: AugmentConfig | None = None,
    crop_pct: float = 0.875,
    one_hot: bool | None = None,
    data_dir: str | None = None,
    shuffle_buffer: int = 10_000,
    cache: bool | str = False,
    drop_remainder: bool | None = None,
    deterministic: bool = False,
    seed: int = 0,
    input_context: tf.distribute.InputContext | None = None,
    on_bad_image: str = "error",
) -> tf.data.Dataset:
    """Build a batched image classification pipeline.

    Evaluation (and training without `augment`) resizes the shorter side to
    `image_size / crop_pct` and centre-crops `image_size`. Training shuffles
    and, with `augment`, runs the per-image then per-batch stages of
    `ImageAugmenter`. Maps run with AUTOTUNE parallelism and the result is
    prefetched. The options set `AutoShardPolicy.DATA`, so
    `strategy.experimental_distribute_dataset` shards it across workers; with
    `strategy.distribute_datasets_from_function`, pass the `input_context`
    instead to shard by input pipeline and batch per replica.

    Args:
        source: "digits", "tfds:<name>" or "dir:<path>" (see the module
            docstring). Default "digits".
        split: split name ("train", "test", ...; TFDS slicing such as
            "train[:90%]" works for TFDS). Default "train".
        image_size: output height and width, a positive int. Default 32.
        batch_size: global batch size. Default 128.
        training: shuffle and augment. Default None: `split == "train"`.
        augment: training augmentation; None (default) means none. Ignored
            when not training. `AugmentConfig()` is the DeiT recipe.
        crop_pct: evaluation centre-crop fraction in (0, 1]. Default 0.875.
        one_hot: one-hot float32 labels instead of int32. Default None:
            one-hot exactly when MixUp or CutMix is on (which requires it).
        data_dir: TFDS data directory. Default None.
        shuffle_buffer: shuffle buffer size when training. Default 10_000.
        cache: cache the decoded, not yet randomly augmented images in memory
            (True) or in files with this path prefix (str). Default False.
        drop_remainder: drop the last partial batch. Default None: `training`.
        deterministic: reproducible augmentation: runs the random
            augmentation maps one element at a time (slower with many
            cores), since the Keras layers draw from one shared random state
            each. Without `augment` it changes nothing: every pipeline keeps
            its element order, so the same `seed` gives the same batches
            every run. Default False.
        seed: seed of file and element shuffling and of every augmentation.
            Default 0.
        input_context: a `tf.distribute.InputContext`; shards the data by input
            pipeline, uses the per-replica batch size and offsets the seed by the
            pipeline id. Default None.
        on_bad_image: what a corrupt or unreadable file of a "dir:" source
            does: "error" (default) fails the pipeline with an error naming
            the file; "skip" reads every file once first, prints one warning
            line counting (and naming) the unreadable ones, and leaves them
            out.

    Raises:
        ValueError: for a bad argument; a "dir:" source with fewer than two
            class folders or split folders with different class folders; a
            split without images, or smaller than `batch_size` when partial
            batches are dropped (naming the counts).

    Returns:
        A `tf.data.Dataset` of (images, labels) batches.

    Example:
        >>> train = load_image_dataset("digits", "train", image_size=32, batch_size=64,
        ...                            augment=AugmentConfig(horizontal_flip=False))
        >>> images, labels = next(iter(train))
        >>> images.shape, labels.shape
        (TensorShape([64, 32, 32, 3]), TensorShape([64, 10]))
    """
    check_image_size(image_size)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive int; received batch_size={batch_size!r}.")
    transform = eval_transform(image_size, crop_pct)
    kind, value = _parse_source(source)
    training = split == "train" if training is None else training
    augment = augment if training else None
    mixes = augment is not None and augment.mixes_labels
    if one_hot is None:
        one_hot = mixes
    elif mixes and not one_hot:
        raise ValueError("MixUp and CutMix mix one-hot labels; one_hot=False is not possible.")
    num_classes = get_num_classes(source, split, data_dir) if one_hot else 0

    check_choice("on_bad_image", on_bad_image, BAD_IMAGE_MODES)
    drop_remainder = training if drop_remainder is None else drop_remainder
    ds, count = _load_source(
        kind, value, split, image_size, crop_pct, data_dir, training, seed, on_bad_image
    )
    check_split_size(source, split, count, batch_size, drop_remainder)
    if input_context is not None:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        batch_size = input_context.get_per_replica_batch_size(batch_size)
        seed += input_context.input_pipeline_id
    ds = ds.map(_standardize, num_parallel_calls=AUTOTUNE)
    if augment is None:
        ds = ds.map(
            lambda image, label: (clip_to_value_range(transform(image)), label),
            num_parallel_calls=AUTOTUNE,
        )
    if cache is not False:
        ds = ds.cache("" if cache is True else cache)
    if training:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    random_calls = None if deterministic else AUTOTUNE
    if augment is not None:
        augmenter = ImageAugmenter(augment, image_size, seed=seed)
        ds = ds.map(
            lambda image, label: (augmenter.augment_image(image), label),
            num_parallel_calls=random_calls,
        )
    ds = ds.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=AUTOTUNE)
    if one_hot:
        ds = ds.map(
            lambda images, labels: (images, tf.one_hot(labels, num_classes)),
            num_parallel_calls=AUTOTUNE,
        )
    if augment is not None:
        ds = ds.map(augmenter.augment_batch, num_parallel_calls=random_calls)
    options = tf.data.Options()
    # Parallel maps and batching keep the element order: out of order, the order of the
    # shuffle's input (and so the batches) changed from run to run whatever the seed.
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
        if input_context is None
        else tf.data.experimental.AutoShardPolicy.OFF
    )
    return ds.prefetch(AUTOTUNE).with_options(options)
