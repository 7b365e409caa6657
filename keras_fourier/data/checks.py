"""Checks that refuse image data which cannot make sense, with messages naming what is wrong.

* :func:`check_class_folders`: a ``dir:`` source needs at least two class
  folders, and its split folders (``train``, ``validation``, ``test``) must
  hold the same class folders, since a label is the index of its folder in
  sorted order;
* :func:`check_split_size`: a split must hold at least one image, and at
  least one batch when partial batches are dropped;
* :func:`decode_files`: decodes image files in a `tf.data` pipeline so that
  an unreadable file fails with an error naming it;
  :func:`find_unreadable` lists them, for the "skip and count" mode.
"""

from __future__ import annotations

import os
import re
import sys

import tensorflow as tf

SPLIT_FOLDERS = ("train", "validation", "test")
BAD_IMAGE_MODES = ("error", "skip")
UNREADABLE = "Cannot decode image file"


def class_folders(root: str) -> list[str]:
    """The sorted class folder names of a folder of class folders."""
    return sorted(entry.name for entry in os.scandir(root) if entry.is_dir())


def check_class_folders(path: str, root: str) -> list[str]:
    """Checks the class folders of a ``dir:`` source and returns those of `root`.

    Args:
        path: the source's folder (``dir:<path>``).
        root: the folder of class folders of the split being loaded.

    Returns:
        The class names of `root`, sorted (label i is the i-th).

    Raises:
        ValueError: `root` has fewer than two class folders, or the split
            folders of `path` have different class folders (naming those
            missing and extra in each).
    """
    classes = class_folders(root)
    if len(classes) < 2:
        raise ValueError(
            f"Image source 'dir:{path}' needs at least two class folders in {root!r}; found "
            f"{len(classes)}: {classes}. A classifier of one class learns nothing."
        )
    splits = {
        split: class_folders(os.path.join(path, split))
        for split in SPLIT_FOLDERS
        if os.path.isdir(os.path.join(path, split))
    }
    if len(splits) > 1:
        reference_split, reference = next(iter(splits.items()))
        for split, names in splits.items():
            if names != reference:
                missing = sorted(set(reference) - set(names))
                extra = sorted(set(names) - set(reference))
                raise ValueError(
                    f"The split folders of image source 'dir:{path}' hold different class "
                    f"folders, so their labels would not match: {split!r} lacks {missing} and "
                    f"has {extra} beyond {reference_split!r} ({reference_split}: {reference}; "
                    f"{split}: {names})."
                )
    return classes


def check_split_size(
    source: str, split: str, count: int, batch_size: int, drop_remainder: bool
) -> None:
    """Raises ValueError (with the counts) for an empty split or one smaller than a batch.

    Args:
        source: the source, for the message.
        split: the split, for the message.
        count: images in the split (negative: unknown, not checked).
        batch_size: the batch size.
        drop_remainder: whether a partial last batch is dropped.
    """
    if count < 0:
        return
    if count == 0:
        raise ValueError(f"Split {split!r} of image source {source!r} has no images.")
    if drop_remainder and count < batch_size:
        raise ValueError(
            f"Split {split!r} of image source {source!r} has {count} images, fewer than one "
            f"batch of {batch_size}, and training drops partial batches: lower the batch size "
            f"to at most {count} or add images."
        )


def _decode_or_flag(file: tf.Tensor, label: tf.Tensor) -> tf.data.Dataset:
    """One (image, label, readable, file) element; a placeholder image when unreadable."""

    def decode(name: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image = tf.io.decode_image(tf.io.read_file(name), channels=3, expand_animations=False)
        return image, tf.constant(True)

    decoded = tf.data.Dataset.from_tensors(file).map(decode).ignore_errors()
    placeholder = tf.data.Dataset.from_tensors((tf.zeros((1, 1, 3), tf.uint8), tf.constant(False)))
    return (
        decoded.concatenate(placeholder)
        .take(1)
        .map(lambda image, readable: (image, label, readable, file))
    )


def decode_files(files: tf.data.Dataset, deterministic: bool | None = None) -> tf.data.Dataset:
    """Decodes a dataset of (file path, label) into (uint8 RGB image, label).

    Unlike a plain `tf.io.decode_image` map, an unreadable or corrupt file
    fails the pipeline with an `InvalidArgumentError` whose message names
    the file ("Cannot decode image file ... <path>").

    Args:
        files: a dataset of (string path, label) pairs.
        deterministic: keep the input order. Default None: the dataset's
            option.

    Returns:
        A dataset of (image (H, W, 3) uint8, label).
    """

    def check(image, label, readable, file):
        assertion = tf.debugging.Assert(
            readable, [UNREADABLE, file, "(corrupt, truncated or not an image)"]
        )
        with tf.control_dependencies([assertion]):
            return tf.identity(image), label

    decoded = files.interleave(
        _decode_or_flag,
        cycle_length=tf.data.AUTOTUNE,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    ).map(check)
    count = int(files.cardinality())
    if count >= 0:  # one output per file: keep the cardinality that interleave hides
        decoded = decoded.apply(tf.data.experimental.assert_cardinality(count))
    return decoded


class UnreadableImageError(ValueError):
    """An image file of the data cannot be decoded."""


def unreadable_file(error: Exception) -> str | None:
    """The file named by a :func:`decode_files` failure, or None for other errors."""
    match = re.search(rf"\[{UNREADABLE}\] \[(.*?)\]", str(error))
    return match.group(1) if match else None


def find_unreadable(files: list[str]) -> list[str]:
    """The files among `files` that do not decode as images (read in parallel, in order)."""
    if not files:
        return []
    dataset = tf.data.Dataset.from_tensor_slices((files, tf.zeros(len(files), tf.int32)))
    dataset = dataset.interleave(
        _decode_or_flag,
        cycle_length=tf.data.AUTOTUNE,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    ).map(lambda image, label, readable, file: (readable, file))
    return [file.decode() for readable, file in dataset.as_numpy_iterator() if not readable]


def report_skipped(source: str, split: str, skipped: list[str], total: int) -> None:
    """Prints one warning line counting the skipped unreadable images, naming the first ones."""
    if skipped:
        shown = ", ".join(skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        print(
            f"keras-fourier: warning: skipped {len(skipped)} unreadable image(s) of {total} in "
            f"split {split!r} of {source!r}: {shown}",
            file=sys.stderr,
            flush=True,
        )
