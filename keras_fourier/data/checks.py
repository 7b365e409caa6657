"""Checks that refuse image data which cannot make sense, with messages naming what is wrong.

* :func:`check_class_folders`: a ``dir:`` source needs at least two class
  folders, and its split folders (``train``, ``validation``, ``test``) must
  hold the same class folders, since a label is the index of its folder in
  sorted order;
* :func:`check_split_size`: a split must hold at least one image, and at
  least one batch when partial batches are dropped;
* :func:`decode_files`: decodes image files in a `tf.data` pipeline so that
  an unreadable file fails with an error naming it;
  :func:`find_unreadable` lists them, for the "skip and count" mode;
* :func:`read_image_file`: one image file for `predict`, read within bounds,
  its size checked from its header (and against a caller's estimate) before
  decoding, any failure one line naming the file.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable

import tensorflow as tf

from keras_fourier.limits import MAX_IMAGE_PIXELS, read_file_bounded
from keras_fourier.validation import listed

SPLIT_FOLDERS = ("train", "validation", "test")
# Largest image file read whole by `predict` (an uncompressed 40-megapixel BMP is 120 MB).
MAX_IMAGE_FILE_BYTES = 256 * 2**20
_JPEG, _PNG, _GIF, _BMP = b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF8", b"BM"
_RIFF, _WEBP = b"RIFF", b"WEBP"
UNREADABLE = "Cannot decode image file"
# The first words of a pipeline's data-check failures (an image and what the data says of it
# disagree), which `data_check_error` turns into one line: the segmentation pipeline's (its
# image and mask) and the COCO detection pipeline's (its image and the JSON's size).
SEGMENTATION_CHECK = "Bad segmentation"
COCO_IMAGE_CHECK = "Bad COCO image"
DATA_CHECKS = (SEGMENTATION_CHECK, COCO_IMAGE_CHECK)


def check_source_folder(path: str, what: str, source: str) -> None:
    """Refuses a folder source whose folder is missing or is not a folder (one-line ValueError).

    Args:
        path: the source's folder.
        what: what the folder holds, for the message ("Image directory").
        source: the whole source ("dir:<path>").

    Example:
        >>> check_source_folder("/no/such", "Image directory", "dir:/no/such")
        Traceback (most recent call last):
        ValueError: Image directory '/no/such' does not exist. Received: data='dir:/no/such'
    """
    if not os.path.isdir(path):
        problem = "is a file, not a folder" if os.path.exists(path) else "does not exist"
        raise ValueError(f"{what} {path!r} {problem}. Received: data={source!r}")


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
            f"{len(classes)}: {listed(classes)}. A classifier of one class learns nothing."
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
                    f"folders, so their labels would not match: {split!r} lacks "
                    f"{listed(missing)} and has {listed(extra)} beyond {reference_split!r} "
                    f"({reference_split}: {listed(reference)}; {split}: {listed(names)})."
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


def _unsigned(header: tf.Tensor, start: int, length: int, big_endian: bool) -> tf.Tensor:
    """The unsigned integer in header bytes [start, start + length) as int64."""
    value = tf.constant(0, tf.int64)
    order = range(start, start + length) if big_endian else reversed(range(start, start + length))
    for index in order:
        value = value * 256 + tf.cast(header[index], tf.int64)
    return value


def header_image_size(data: tf.Tensor) -> tf.Tensor:
    """(height, width) of one encoded image, read from its header without decoding it.

    Every format that `tf.io.decode_image` accepts: JPEG (its SOF marker,
    `tf.image.extract_jpeg_shape`), PNG (IHDR), GIF (logical screen), BMP
    (DIB header) and WebP (its VP8, VP8L or VP8X chunk); (-1, -1) for any
    other content, whose size cannot be read.

    Args:
        data: a scalar string tensor, the encoded image.

    Returns:
        An int64 tensor (2,).

    Example:
        >>> header_image_size(tf.io.encode_png(tf.zeros((40, 60, 3), tf.uint8))).numpy()
        array([40, 60])
    """
    header = tf.io.decode_raw(
        tf.strings.substr(tf.strings.join([tf.strings.substr(data, 0, 32), "\0" * 32]), 0, 32),
        tf.uint8,
    )

    def starts_with(magic: bytes, at: int = 0) -> tf.Tensor:
        return tf.equal(tf.strings.substr(data, at, len(magic)), magic)

    def jpeg() -> tf.Tensor:
        return tf.cast(tf.image.extract_jpeg_shape(data)[:2], tf.int64)

    def png() -> tf.Tensor:
        return tf.stack([_unsigned(header, 20, 4, True), _unsigned(header, 16, 4, True)])

    def gif() -> tf.Tensor:
        return tf.stack([_unsigned(header, 8, 2, False), _unsigned(header, 6, 2, False)])

    def bmp() -> tf.Tensor:
        height = _unsigned(header, 22, 4, False)
        height = tf.where(height >= 2**31, 2**32 - height, height)  # top-down bitmaps
        return tf.stack([height, _unsigned(header, 18, 4, False)])

    def vp8() -> tf.Tensor:  # lossy: 14-bit width and height after the frame tag
        return tf.stack([_unsigned(header, 28, 2, False), _unsigned(header, 26, 2, False)]) % 16384

    def vp8l() -> tf.Tensor:  # lossless: 14 bits width - 1, then 14 bits height - 1
        bits = _unsigned(header, 21, 4, False)
        return tf.stack([(bits // 16384) % 16384 + 1, bits % 16384 + 1])

    def vp8x() -> tf.Tensor:  # extended: 24-bit canvas width - 1 and height - 1
        return tf.stack([_unsigned(header, 27, 3, False) + 1, _unsigned(header, 24, 3, False) + 1])

    webp = tf.logical_and(starts_with(_RIFF), starts_with(_WEBP, 8))
    return tf.case(
        [
            (starts_with(_JPEG), jpeg),
            (starts_with(_PNG), png),
            (starts_with(_GIF), gif),
            (starts_with(_BMP), bmp),
            (tf.logical_and(webp, starts_with(b"VP8 ", 12)), vp8),
            (tf.logical_and(webp, starts_with(b"VP8L", 12)), vp8l),
            (tf.logical_and(webp, starts_with(b"VP8X", 12)), vp8x),
        ],
        default=lambda: tf.constant([-1, -1], tf.int64),
    )


def image_size_check(data: tf.Tensor, max_pixels: int, what: list) -> tf.Operation:
    """An assertion that an encoded image's header size is readable and at most `max_pixels`.

    Args:
        data: a scalar string tensor, the encoded image.
        max_pixels: largest accepted height * width.
        what: the first items of the failure message, the last a string
            that "too large ..." follows (``["Image"]``, or a marker, the
            file name tensor and "is").

    Returns:
        The `tf.debugging.Assert` operation (a control dependency for the decoding).
    """
    size = header_image_size(data)
    return tf.debugging.Assert(
        tf.logical_and(tf.reduce_all(size >= 0), size[0] * size[1] <= max_pixels),
        [
            *what[:-1],
            f"{what[-1]} too large or of unknown format: height x width =",
            size[0],
            "x",
            size[1],
            f"> {max_pixels} pixels (-1: size unreadable, not JPEG, PNG, GIF, BMP or WebP)",
        ],
    )


def decode_image_checked(data: tf.Tensor, max_pixels: int = MAX_IMAGE_PIXELS) -> tf.Tensor:
    """Decodes one encoded image to uint8 RGB after checking its header size.

    The size is read first (:func:`header_image_size`); an image of more
    than `max_pixels` pixels, or whose size cannot be read, fails with an
    `InvalidArgumentError` naming its size, before any decoding memory is
    taken.

    Args:
        data: a scalar string tensor, the encoded image.
        max_pixels: largest accepted height * width. Default 40 million.

    Returns:
        uint8 tensor (H, W, 3).
    """
    with tf.control_dependencies([image_size_check(data, max_pixels, ["Image"])]):
        return tf.io.decode_image(data, channels=3, expand_animations=False)


def read_image_file(
    path: str,
    max_pixels: int = MAX_IMAGE_PIXELS,
    before_decoding: Callable[[int, int], None] | None = None,
) -> tf.Tensor:
    """The image of a file as uint8 RGB (H, W, 3), checked before and while it is decoded.

    The file is read within :data:`MAX_IMAGE_FILE_BYTES`, its size read
    from its header (at most `max_pixels`), then decoded.

    Args:
        path: a JPEG, PNG, GIF, BMP or WebP file.
        max_pixels: largest accepted height * width. Default 40 million.
        before_decoding: called with the header's (height, width) before
            any decoding memory is taken (e.g. to check a memory estimate).
            Default None.

    Raises:
        ValueError: one line naming `path`: too large a file, an image
            larger than `max_pixels`, of unknown format, corrupt or truncated.

    Example:
        >>> read_image_file("cat.png").shape  # doctest: +SKIP
        TensorShape([480, 640, 3])
    """
    data = tf.constant(read_file_bounded(path, MAX_IMAGE_FILE_BYTES, "Image file"))
    try:
        height, width = (int(value) for value in header_image_size(data).numpy())
        if before_decoding is not None and 0 <= height * width <= max_pixels:
            before_decoding(height, width)
        return decode_image_checked(data, max_pixels)
    except tf.errors.OpError as error:
        message = " ".join(error.message.replace("b'", "").replace("'", "").split())
        message = re.sub(r"^Expected .*? to be true\. Summarized data: ", "", message)
        message = re.sub(r"^\{\{function_node .*?\}\}\s*|\s*\[Op:\w+\]$", "", message)
        raise ValueError(f"Could not read {path!r} as an image: {message}") from None


def decoded_or_flag(
    data: tf.Tensor, decode: Callable[[tf.Tensor], tf.Tensor], placeholder: tf.Tensor
) -> tf.data.Dataset:
    """One element (decode(data), True), or (placeholder, False) when decoding fails.

    The failure (a corrupt or truncated file) is caught inside the pipeline,
    so that a later assertion can name the file it came from.
    """
    decoded = (
        tf.data.Dataset.from_tensors(data)
        .map(lambda value: (decode(value), tf.constant(True)))
        .ignore_errors()
    )
    flagged = tf.data.Dataset.from_tensors((placeholder, tf.constant(False)))
    return decoded.concatenate(flagged).take(1)


def _decode_or_flag(file: tf.Tensor, label: tf.Tensor) -> tf.data.Dataset:
    """One (image, label, readable, file) element; a placeholder image when unreadable."""
    return decoded_or_flag(
        file,
        lambda name: decode_image_checked(tf.io.read_file(name)),
        tf.zeros((1, 1, 3), tf.uint8),
    ).map(lambda image, readable: (image, label, readable, file))


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


def data_check_error(error: Exception, data: str) -> ValueError | None:
    """The one-line ValueError of a pipeline's data-check failure (one of `DATA_CHECKS`).

    Args:
        error: the error a pipeline raised (a `tf.errors.InvalidArgumentError`).
        data: the data source, for the message.

    Returns:
        The ValueError to raise, or None when `error` is no data-check failure.

    Example:
        >>> data_check_error(ValueError("other"), "digits") is None
        True
    """
    text = str(error)
    starts = [at for at in (text.find(marker) for marker in DATA_CHECKS) if at >= 0]
    if not starts:
        return None
    detail = re.sub(r"\]\s*\[", " ", text[min(starts) :].splitlines()[0]).strip("[] ")
    detail = re.sub(r"\s+", " ", detail.replace("[", "").replace("]", ""))
    return ValueError(f"Data {data!r}: {detail}. Received: data={data!r}")


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
