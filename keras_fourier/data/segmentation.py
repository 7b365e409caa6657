"""Semantic segmentation input pipelines: label-map folders, TFDS, and embedded digit canvases.

`load_segmentation_dataset` returns a batched `tf.data.Dataset` of (images,
masks): images (B, S, S, 3) float32 with values in [0, 255] (models
normalise inside), masks int32 (B, S, S) holding class indices, and
`IGNORE_INDEX` (255) for pixels that count nowhere (unlabelled, padding).

Sources:

* ``"digits"``: the package's digits composited onto canvases (the
  default; needs no download). Each example is a 64x64 black canvas on
  which 1 to 3 of the package's embedded 8x8 digits
  (:func:`keras_fourier.data.load_digits`) are pasted at random positions
  where they do not overlap, each scaled by a random integer factor 3 or 4
  (24 or 32 pixels, nearest neighbour). A digit's pixels of at least a
  quarter of full intensity are pasted and labelled with its class + 1;
  everything else is background, label 0: 11 classes. Training augments
  them with `DIGIT_CANVAS_AUGMENT` (a milder rescale, no flip: a mirrored
  digit is another shape). Split "train" (1,000
  canvases), "validation" (200) and "test" (200) paste only digits of the
  digits' own split, with fixed seeds, so they never change and never share
  a digit image.
* ``"segdir:<path>"``: images and PNG label maps side by side. ``<path>``
  holds an ``images/`` folder and either a ``masks/`` folder (mask pixels
  are class indices, 255 ignored) or an ``annotations/`` folder (ADE20K's
  ``ADEChallengeData2016`` convention: 0 is "other", ignored, and k is
  class k - 1). The mask of ``images/<split>/<stem>.<ext>`` is
  ``masks/<split>/<stem>.png``, a PNG of the image's size whose pixel
  values are the labels: grey of 1 to 16 bits (a 16-bit mask's values as
  they are), grey+alpha (alpha dropped), or palette indices (VOC-style
  masks: the index, not its colour, as mmsegmentation and TFDS read them);
  an RGB mask must be grey (three equal channels). Split folders are ``train`` (or ``training``),
  ``validation`` (or ``val``) and ``test`` (or ``testing``), and are carved
  as ``dir:`` data is: with only ``train``, "validation" is every tenth
  image of it in sorted order; with no split folders (images directly in
  ``images/``), every fifth image is "test", every tenth "validation", the
  rest "train". ``<path>/classes.txt`` names the classes, one a line in
  label order; it is required with ``masks/`` and optional with
  ``annotations/`` (150 classes then).
* ``"tfds:oxford_iiit_pet"``: the trimaps of the Oxford-IIIT Pet dataset
  (1 pet, 2 background, 3 border) as 2 classes, 0 background and 1 pet;
  the border (pixels the annotators left unclassified) is ignored.
* ``"tfds:scene_parse150"``: TFDS builds it from the MIT Places Challenge
  2017 *instance* annotations, whose red channel is one of the 100 object
  categories of that challenge (0: unlabelled or stuff). It is read as 100
  classes (category c is class c - 1, 0 ignored). It is therefore not the
  150-class ADE20K benchmark of the official UPerNet results: for those,
  point ``segdir:`` at ``ADEChallengeData2016``.

Training (with a `SegmentationAugment`) follows mmsegmentation's ADE20K
pipeline: random rescale with a ratio range, random crop whose largest
class covers less than `cat_max_ratio` of the labelled pixels (up to ten
tries), horizontal flip, photometric distortion, and padding of image (0)
and mask (255) to the crop size. Evaluation (and training without
augmentation) resizes each image to fit in S x S, keeping its aspect ratio,
and pads it. Images resize bilinearly, masks by nearest neighbour.

Files are checked as they are read: an image or mask over 40 megapixels
(read from its header, before decoding), one that does not decode
(corrupt, truncated), a colour mask, a mask whose size differs from its
image's, or with a label outside the classes (other than 255), fails the
pipeline with a message naming the file (or example) and the value;
:func:`~keras_fourier.data.checks.data_check_error` turns that failure into a one-line
`ValueError`. A ``segdir:`` image without its mask is refused before
anything is read.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from collections.abc import Callable, Collection
from typing import Any

import numpy as np
import tensorflow as tf

from keras_fourier.data.augment import check_image_size
from keras_fourier.data.checks import (
    MAX_IMAGE_PIXELS,
    SEGMENTATION_CHECK,
    check_source_folder,
    check_split_size,
    decoded_or_flag,
    header_image_size,
    image_size_check,
)
from keras_fourier.data.images import IMAGE_EXTENSIONS, load_digits, tfds_builder
from keras_fourier.validation import listed

IGNORE_INDEX = 255
DIGIT_CANVAS = "digits"
DIGIT_CANVAS_SIZE = 64
DIGIT_CANVAS_COUNTS = {"train": 1000, "validation": 200, "test": 200}
DIGIT_CANVAS_SEEDS = {"train": 0, "validation": 1, "test": 2}
DIGIT_CANVAS_CLASSES = ["background"] + [str(digit) for digit in range(10)]
DIGIT_CANVAS_MAX_DIGITS = 3
# Each digit is its 8x8 image scaled by an integer factor in this range (nearest neighbour).
DIGIT_CANVAS_SCALES = (3, 4)
# Random positions tried for a digit before it is left out (digits never overlap).
DIGIT_CANVAS_TRIES = 20
# A digit pixel of at least this value (a quarter of 255) is pasted and labelled.
DIGIT_CANVAS_THRESHOLD = 63.75
ADE20K_NUM_CLASSES = 150
CLASSES_FILE = "classes.txt"
SPLIT_ALIASES = {
    "train": ("train", "training"),
    "validation": ("validation", "val"),
    "test": ("test", "testing"),
}
DATA_ERROR = SEGMENTATION_CHECK
MASK_ERROR = f"{DATA_ERROR} mask"
IMAGE_ERROR = f"{DATA_ERROR} image"
# The PNG colour type of palette images, and where IHDR's bit depth and colour type sit.
PNG_PALETTE = 3
_PNG_DEPTH_BYTE, _PNG_COLOUR_BYTE = 24, 25
# Chunks walked looking for a palette before the image data (a PNG has a handful).
_MAX_PNG_CHUNKS = 1000
# A palette whose entry i is grey i: decoded through it, a pixel's value is its index.
_INDEX_RAMP = bytes(value for value in range(256) for _ in range(3))
_INDEX_PALETTE_CRCS = tuple(
    struct.pack(">I", zlib.crc32(b"PLTE" + _INDEX_RAMP[: 3 * entries])) for entries in range(257)
)
# Grey of 1, 2 or 4 bits decodes scaled to 8 bits (value * 255, * 85, * 17): by bit depth.
_GREY_SCALE = (1, 255, 85, 1, 17) + (1,) * 12
AUTOTUNE = tf.data.AUTOTUNE


@dataclasses.dataclass(frozen=True)
class TFDSMasks:
    """How a TFDS dataset's masks become class indices.

    Attributes:
        mask_key: the feature holding the mask.
        class_names: the classes, in label order.
        lookup: mask value (of `channel`) -> class index or `IGNORE_INDEX`,
            for values 0..255.
        channel: the mask channel holding the value.
    """

    mask_key: str
    class_names: tuple[str, ...]
    lookup: tuple[int, ...]
    channel: int = 0


def _lookup(mapping: dict[int, int]) -> tuple[int, ...]:
    return tuple(mapping.get(value, IGNORE_INDEX) for value in range(256))


TFDS_MASKS = {
    "oxford_iiit_pet": TFDSMasks(
        "segmentation_mask", ("background", "pet"), _lookup({1: 1, 2: 0, 3: IGNORE_INDEX})
    ),
    "scene_parse150": TFDSMasks(
        "annotation",
        tuple(f"category_{category}" for category in range(1, 101)),
        _lookup({category: category - 1 for category in range(1, 101)}),
    ),
}


def parse_dense_source(
    source: str, folder_kind: str, tfds_names: Collection[str], task: str
) -> tuple[str, str]:
    """(kind, value) of a dense source: "digits", "<folder_kind>:<path>" or "tfds:<name>".

    Args:
        source: the source.
        folder_kind: the prefix of the task's folder sources ("segdir", "coco").
        tfds_names: the TFDS datasets the task reads, for the message.
        task: the task, for the message ("segmentation").

    Raises:
        ValueError: any other source, naming it.
    """
    if isinstance(source, str):
        if source == DIGIT_CANVAS:
            return DIGIT_CANVAS, ""
        for kind in (folder_kind, "tfds"):
            prefix = kind + ":"
            if source.startswith(prefix) and len(source) > len(prefix):
                return kind, source[len(prefix) :]
    raise ValueError(
        f"Unknown {task} data source: expected {DIGIT_CANVAS!r}, '{folder_kind}:<path>' or "
        f"'tfds:<name>' with name one of {sorted(tfds_names)}. Received: data={source!r}"
    )


def names_dense_source(source: str, folder_kind: str, tfds_names: Collection[str]) -> bool:
    """Whether `source` is "digits", a "<folder_kind>:" folder, or one of `tfds_names`."""
    try:
        kind, value = parse_dense_source(source, folder_kind, tfds_names, "")
    except ValueError:
        return False
    return kind != "tfds" or value in tfds_names


def _parse_source(source: str) -> tuple[str, str]:
    return parse_dense_source(source, "segdir", TFDS_MASKS, "segmentation")


def is_segmentation_source(source: str) -> bool:
    """Whether `source` names segmentation data ("digits", "segdir:", masked TFDS)."""
    return names_dense_source(source, "segdir", TFDS_MASKS)


def tfds_convention(name: str, conventions: dict, task: str, folder_kind: str) -> Any:
    """The convention of TFDS dataset `name` in `conventions`, else a ValueError naming it.

    Args:
        name: the TFDS dataset ("tfds:<name>").
        conventions: dataset name -> how the task reads it.
        task: the task and what it reads, for the message ("segmentation", "mask").
        folder_kind: the task's folder source, for the message ("segdir").
    """
    if name not in conventions:
        raise ValueError(
            f"TFDS dataset {name!r} has no convention for {task} here, which reads "
            f"{sorted(conventions)}, or '{folder_kind}:<path>'. Received: data='tfds:{name}'"
        )
    return conventions[name]


def _tfds_masks(name: str) -> TFDSMasks:
    return tfds_convention(name, TFDS_MASKS, "segmentation", "segdir")


# ----------------------------------------------------------------------------- digit canvases


def digit_canvas(
    split: str = "train", count: int | None = None, size: int = DIGIT_CANVAS_SIZE
) -> tuple[np.ndarray, np.ndarray, list[list[tuple[int, int, int, int]]]]:
    """The embedded digit canvases of a split as NumPy arrays, and how each was composed.

    Args:
        split: "train", "validation" or "test". Default "train".
        count: canvases to make. Default None: the split's (1,000, 200, 200).
        size: canvas height and width, at least 32. Default 64.

    Each canvas holds 1 to 3 digits, each scaled by 3 or 4 (24 or 32
    pixels), at random positions where it overlaps no other (a digit that
    finds none in 20 tries is left out; the first always fits).

    Returns:
        (images, masks, layouts): uint8 (N, size, size, 3) images, uint8
        (N, size, size) masks (0 background, digit d is d + 1) and, per
        canvas, the pasted digits in order as (index into
        ``load_digits(split)``, scale, top, left).

    Example:
        >>> images, masks, layouts = digit_canvas("test", count=2)
        >>> images.shape, masks.shape, int(masks.max()) <= 10
        ((2, 64, 64, 3), (2, 64, 64), True)
    """
    digits, labels = load_digits(split)
    if size < 32:
        raise ValueError(f"size must be at least 32 (a digit is up to 32 pixels). Received: {size}")
    count = DIGIT_CANVAS_COUNTS[split] if count is None else count
    rng = np.random.default_rng([DIGIT_CANVAS_SEEDS[split], size])
    images = np.zeros((count, size, size), np.uint8)
    masks = np.zeros((count, size, size), np.uint8)
    layouts = []
    low, high = DIGIT_CANVAS_SCALES
    for image, mask in zip(images, masks, strict=True):
        layout: list[tuple[int, int, int, int]] = []
        for _ in range(rng.integers(1, DIGIT_CANVAS_MAX_DIGITS + 1)):
            index, scale = int(rng.integers(len(labels))), int(rng.integers(low, high + 1))
            extent = 8 * scale
            for _ in range(DIGIT_CANVAS_TRIES):
                top, left = (int(value) for value in rng.integers(0, size - extent + 1, size=2))
                if not any(
                    top < other_top + 8 * other_scale
                    and other_top < top + extent
                    and left < other_left + 8 * other_scale
                    and other_left < left + extent
                    for _, other_scale, other_top, other_left in layout
                ):
                    break
            else:
                continue
            patch = np.kron(digits[index, :, :, 0], np.ones((scale, scale), np.float32))
            pasted = patch >= DIGIT_CANVAS_THRESHOLD
            window = (slice(top, top + extent), slice(left, left + extent))
            image[window][pasted] = np.round(patch[pasted]).astype(np.uint8)
            mask[window][pasted] = labels[index] + 1
            layout.append((index, scale, top, left))
        layouts.append(layout)
    return np.repeat(images[..., None], 3, axis=-1), masks, layouts


# ----------------------------------------------------------------------------- segdir


@dataclasses.dataclass(frozen=True)
class _Folder:
    images: str
    masks: str
    ade20k: bool


def _segdir_folder(path: str) -> _Folder:
    source = f"segdir:{path}"
    check_source_folder(path, "Segmentation folder", source)
    images = os.path.join(path, "images")
    found = [name for name in ("masks", "annotations") if os.path.isdir(os.path.join(path, name))]
    if not os.path.isdir(images) or len(found) != 1:
        raise ValueError(
            f"Segmentation source {source!r} must hold an 'images' folder and one of 'masks' "
            f"(class indices) or 'annotations' (ADE20K's convention); it holds "
            f"{listed(sorted(os.listdir(path)))}. Received: data={source!r}"
        )
    return _Folder(images, os.path.join(path, found[0]), found[0] == "annotations")


def _split_folder(root: str, split: str) -> str | None:
    for name in SPLIT_ALIASES.get(split, (split,)):
        if os.path.isdir(os.path.join(root, name)):
            return name
    return None


def _image_files(folder: str) -> list[str]:
    return sorted(
        name
        for name in os.listdir(folder)
        if name.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(os.path.join(folder, name))
    )


def _segdir_files(path: str, split: str) -> tuple[list[str], list[str]]:
    """The (image, mask) file pairs of a split of a segdir source, in sorted order."""
    folder = _segdir_folder(path)
    source = f"segdir:{path}"
    name = _split_folder(folder.images, split)
    carve = None
    if name is None:
        has_train = _split_folder(folder.images, "train") is not None
        if split == "validation" and has_train:
            name, carve = _split_folder(folder.images, "train"), "validation"
        elif split in SPLIT_ALIASES and not has_train and _image_files(folder.images):
            name, carve = "", split
        else:
            raise ValueError(
                f"Unknown split {split!r} for source {source!r}: 'images' has no "
                f"{'/'.join(SPLIT_ALIASES.get(split, (split,)))} folder. Received: split={split!r}"
            )
    elif split == "train" and _split_folder(folder.images, "validation") is None:
        carve = "train"
    image_folder = os.path.join(folder.images, name)
    mask_folder = os.path.join(folder.masks, name)
    names = _image_files(image_folder)
    if carve is not None:
        rank = np.arange(len(names))
        test = (rank % 5 == 4) & (name == "")
        validation = rank % 10 == 3
        keep = {"test": test, "validation": validation, "train": ~(test | validation)}[carve]
        names = [file for file, kept in zip(names, keep, strict=True) if kept]
    images = [os.path.join(image_folder, file) for file in names]
    masks = [os.path.join(mask_folder, os.path.splitext(file)[0] + ".png") for file in names]
    missing = [mask for mask in masks if not os.path.isfile(mask)]
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise ValueError(
            f"{len(missing)} of {len(masks)} images of split {split!r} of source {source!r} "
            f"have no mask: every image needs a mask of the same stem. Received: missing={shown}"
        )
    return images, masks


def _segdir_class_names(path: str) -> list[str]:
    folder = _segdir_folder(path)
    file = os.path.join(path, CLASSES_FILE)
    if not os.path.isfile(file):
        if folder.ade20k:
            return [str(index) for index in range(ADE20K_NUM_CLASSES)]
        raise ValueError(
            f"Segmentation source 'segdir:{path}' needs {file!r} naming its classes, one a "
            f"line in label order. Received: data='segdir:{path}'"
        )
    with open(file, encoding="utf-8") as handle:
        names = [line.strip() for line in handle.read(1_000_000).splitlines() if line.strip()]
    if not 2 <= len(names) <= IGNORE_INDEX:
        raise ValueError(
            f"{file!r} must name between 2 and {IGNORE_INDEX} classes (255 is the ignore "
            f"index). Received: classes={len(names)}"
        )
    return names


def _mask_labels(values: tf.Tensor, ade20k: bool) -> tf.Tensor:
    """Mask values (int32) -> labels; values outside the classes stay to be reported."""
    if not ade20k:
        return values
    # ADE20K: 0 is "other" (ignored), k is class k - 1; 256 (a 16-bit mask) stays out of range.
    shifted = tf.where(tf.equal(values, IGNORE_INDEX + 1), values, values - 1)
    return tf.where(tf.equal(values, 0), IGNORE_INDEX, shifted)


def _png_word(data: tf.Tensor, at: tf.Tensor) -> tf.Tensor:
    """The big-endian 4-byte unsigned integer at byte `at` of `data` (0 past its end), int64."""
    size = tf.cast(tf.strings.length(data), tf.int64)
    word = tf.strings.substr(tf.strings.join([data, "\0" * 4]), tf.minimum(at, size), 4)
    digits = tf.cast(tf.io.decode_raw(word, tf.uint8), tf.int64)
    return ((digits[0] * 256 + digits[1]) * 256 + digits[2]) * 256 + digits[3]


def _png_chunk(data: tf.Tensor, kind: bytes) -> tf.Tensor:
    """The offset of the first chunk `kind` of a PNG before its image data, or -1 (int64)."""
    size = tf.cast(tf.strings.length(data), tf.int64)
    four = tf.constant(4, tf.int64)

    def chunk_type(offset: tf.Tensor) -> tf.Tensor:
        return tf.strings.substr(data, tf.minimum(offset + 4, size), four)

    def more(offset: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
        name = chunk_type(offset)
        return tf.reduce_all(
            [offset + 12 <= size, name != kind, name != b"IDAT", count < _MAX_PNG_CHUNKS]
        )

    offset, _ = tf.while_loop(
        more,
        lambda offset, count: (offset + 12 + _png_word(data, offset), count + 1),
        (tf.constant(8, tf.int64), tf.constant(0)),
    )
    return tf.where(tf.equal(chunk_type(offset), kind), offset, tf.constant(-1, tf.int64))


def _palette_as_indices(data: tf.Tensor) -> tf.Tensor:
    """A palette PNG whose palette entry i is grey i, so that it decodes to its indices."""
    offset = _png_chunk(data, b"PLTE")
    length = _png_word(data, offset)
    entries = length // 3
    usable = tf.reduce_all([offset >= 0, length % 3 == 0, entries >= 1, entries <= 256])

    def rewrite() -> tf.Tensor:
        return tf.strings.join(
            [
                tf.strings.substr(data, tf.constant(0, tf.int64), offset + 8),
                tf.strings.substr(tf.constant(_INDEX_RAMP), tf.constant(0, tf.int64), length),
                tf.gather(tf.constant(_INDEX_PALETTE_CRCS), entries),
                tf.strings.substr(data, offset + 12 + length, tf.constant(-1, tf.int64)),
            ]
        )

    # Without a usable palette the PNG is left as it is: decoding it fails (corrupt).
    return tf.cond(usable, rewrite, lambda: data)


def decode_mask(data: tf.Tensor) -> tf.Tensor:
    """Decodes a PNG label map to int32 (H, W, 3): the label in each channel, unless colour.

    Grey (1 to 16 bits) and grey+alpha PNGs give their values (alpha is
    dropped), palette PNGs their palette indices (as mmsegmentation and
    TFDS read VOC-style masks), RGB ones their three channels (equal in a
    grey one). Nothing is checked here (see :func:`mask_size_check` and
    :func:`mask_values`).

    Args:
        data: a scalar string tensor, the encoded PNG.

    Returns:
        int32 tensor (H, W, 3).

    Example:
        >>> grey = tf.io.encode_png(tf.constant([[[300], [2]]], tf.uint16))
        >>> decode_mask(grey)[..., 0].numpy().tolist()
        [[300, 2]]
    """
    header = tf.io.decode_raw(
        tf.strings.substr(tf.strings.join([tf.strings.substr(data, 0, 32), "\0" * 32]), 0, 32),
        tf.uint8,
    )
    depth = tf.cast(header[_PNG_DEPTH_BYTE], tf.int32)
    colour = tf.cast(header[_PNG_COLOUR_BYTE], tf.int32)
    data = tf.cond(tf.equal(colour, PNG_PALETTE), lambda: _palette_as_indices(data), lambda: data)

    def decode(dtype: tf.DType) -> tf.Tensor:
        return tf.cast(tf.io.decode_png(data, channels=3, dtype=dtype), tf.int32)

    mask = tf.cond(tf.equal(depth, 16), lambda: decode(tf.uint16), lambda: decode(tf.uint8))
    scale = tf.where(
        tf.equal(colour, 0), tf.gather(tf.constant(_GREY_SCALE), tf.minimum(depth, 16)), 1
    )
    return mask // scale


def mask_size_check(data: tf.Tensor, name: tf.Tensor, max_pixels: int = MAX_IMAGE_PIXELS):
    """An assertion that a mask file is a PNG of at most `max_pixels`, naming the file.

    Args:
        data: a scalar string tensor, the encoded mask.
        name: the file (or example) named by the failure.
        max_pixels: largest accepted height * width. Default 40 million.

    Returns:
        The `tf.debugging.Assert` operation, read from the header alone.
    """
    size = header_image_size(data)
    is_png = tf.equal(tf.strings.substr(data, 0, 8), b"\x89PNG\r\n\x1a\n")
    return tf.debugging.Assert(
        tf.logical_and(is_png, size[0] * size[1] <= max_pixels),
        [
            MASK_ERROR,
            name,
            f"is not a PNG, or has more than {max_pixels} pixels: height x width =",
            size[0],
            "x",
            size[1],
        ],
    )


def mask_values(mask: tf.Tensor, name: tf.Tensor) -> tf.Tensor:
    """The (H, W) values of a :func:`decode_mask` result, failing (naming it) on a colour one."""
    grey = tf.debugging.Assert(
        tf.reduce_all(tf.equal(mask, mask[..., :1])),
        [
            MASK_ERROR,
            name,
            "is a colour PNG, not a label map (grey, grey+alpha or palette indices)",
        ],
    )
    with tf.control_dependencies([grey]):
        return tf.identity(mask[..., 0])


def _read_pair(image_file: tf.Tensor, mask_file: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """The bytes of an image and its mask, their header sizes checked (naming the files)."""
    image, mask = tf.io.read_file(image_file), tf.io.read_file(mask_file)
    checks = [
        image_size_check(image, MAX_IMAGE_PIXELS, [IMAGE_ERROR, image_file, "is"]),
        mask_size_check(mask, mask_file),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(image), tf.identity(mask), image_file, mask_file


def _decode_pair(
    image: tf.Tensor, mask: tf.Tensor, image_file: tf.Tensor, mask_file: tf.Tensor
) -> tf.data.Dataset:
    """One (image, readable, mask, readable, image_file, mask_file) element."""
    return tf.data.Dataset.zip(
        (
            decoded_or_flag(
                image,
                lambda data: tf.io.decode_image(data, channels=3, expand_animations=False),
                tf.zeros((1, 1, 3), tf.uint8),
            ),
            decoded_or_flag(mask, decode_mask, tf.zeros((1, 1, 3), tf.int32)),
        )
    ).map(lambda image, mask: (*image, *mask, image_file, mask_file))


def _decoded_pair(
    image: tf.Tensor,
    image_read: tf.Tensor,
    mask: tf.Tensor,
    mask_read: tf.Tensor,
    image_file: tf.Tensor,
    mask_file: tf.Tensor,
) -> tuple[tf.Tensor, tf.Tensor]:
    """(image, mask values), failing with the file's name on one that did not decode."""
    checks = [
        tf.debugging.Assert(
            read, [error, file, "cannot be decoded (corrupt, truncated or not an image)"]
        )
        for read, error, file in (
            (image_read, IMAGE_ERROR, image_file),
            (mask_read, MASK_ERROR, mask_file),
        )
    ]
    with tf.control_dependencies(checks):
        return tf.identity(image), mask_values(mask, mask_file)


# ----------------------------------------------------------------------------- checks


def _check_example(
    image: tf.Tensor, mask: tf.Tensor, num_classes: int, name: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """(image, mask) unchanged, failing with a named message on a size or label mismatch."""
    same_size = tf.reduce_all(tf.equal(tf.shape(image)[:2], tf.shape(mask)[:2]))
    size_check = tf.debugging.Assert(
        same_size,
        [
            MASK_ERROR,
            name,
            "size differs from its image: mask",
            tf.shape(mask)[:2],
            "image",
            tf.shape(image)[:2],
        ],
    )
    labels = tf.cast(mask, tf.int32)
    labelled = tf.boolean_mask(labels, tf.not_equal(labels, IGNORE_INDEX))
    largest = tf.reduce_max(tf.concat([labelled, [0]], 0))
    label_check = tf.debugging.Assert(
        largest < num_classes,
        [
            MASK_ERROR,
            name,
            f"has labels outside the {num_classes} classes (0..{num_classes - 1}"
            f", {IGNORE_INDEX} ignored): label",
            largest,
        ],
    )
    with tf.control_dependencies([size_check, label_check]):
        return tf.identity(image), tf.identity(labels)


# ----------------------------------------------------------------------------- public helpers


def segmentation_class_names(source: str = DIGIT_CANVAS, data_dir: str | None = None) -> list[str]:
    """The class names of a segmentation source, in label order, without reading any masks.

    Args:
        source: "digits", "segdir:<path>" or "tfds:<name>". Default
            "digits".
        data_dir: unused; accepted for symmetry with the image sources.

    Returns:
        The names ("background", "0".."9" for the digit canvases).

    Example:
        >>> segmentation_class_names()[:3]
        ['background', '0', '1']
    """
    del data_dir
    kind, value = _parse_source(source)
    if kind == DIGIT_CANVAS:
        return list(DIGIT_CANVAS_CLASSES)
    if kind == "tfds":
        return list(_tfds_masks(value).class_names)
    return _segdir_class_names(value)


def segmentation_num_classes(source: str = DIGIT_CANVAS, data_dir: str | None = None) -> int:
    """The class count of a segmentation source (11 for the digit canvases).

    Example:
        >>> segmentation_num_classes("digits")
        11
    """
    return len(segmentation_class_names(source, data_dir))


def prepared_tfds_builder(name: str, data_dir: str | None) -> tuple[Any, Any]:
    """(the tensorflow_datasets module, the builder of `name`, downloaded and prepared)."""
    tfds, builder = tfds_builder(name, data_dir)
    builder.download_and_prepare()
    return tfds, builder


def held_out_splits(source: str, test_split: str, builder=None) -> tuple[str, str]:
    """(train, validation) of a dense source: "train" and "validation", or TFDS's last 10%.

    Args:
        source: the source, for the message.
        test_split: the split reported once at the end.
        builder: the TFDS builder of a "tfds:" source (None for others):
            without a validation split, or when `test_split` is it, the last
            10% of "train" is held out.

    Raises:
        ValueError: `test_split` is one of them.
    """
    splits = ("train", "validation")
    if builder is not None and (
        "validation" not in builder.info.splits or test_split == "validation"
    ):
        splits = ("train[:90%]", "train[90%:]")
    if test_split in splits:
        raise ValueError(
            f"The test split of source {source!r} is also a training split; pick another. "
            f"Received: test_split={test_split!r}"
        )
    return splits


def tfds_split_count(builder, split: str) -> int | None:
    """The examples of a split of a prepared TFDS builder (None: it declares none)."""
    count = int(builder.as_dataset(split=split).cardinality())
    return count if count >= 0 else None


def segmentation_splits(
    source: str = DIGIT_CANVAS, test_split: str = "test", data_dir: str | None = None
) -> tuple[str, str]:
    """The train and validation splits of a segmentation source that leave `test_split` unseen.

    The digit canvases and ``segdir:`` folders have "train" and
    "validation"; a TFDS dataset without a validation split (both masked
    ones) holds out the last 10% of "train".

    Example:
        >>> segmentation_splits()
        ('train', 'validation')
    """
    kind, value = _parse_source(source)
    builder = None
    if kind == "tfds":
        _tfds_masks(value)
        _, builder = prepared_tfds_builder(value, data_dir)
    return held_out_splits(source, test_split, builder)


def count_segmentation_examples(source: str, split: str, data_dir: str | None = None) -> int | None:
    """Number of examples in a split of a segmentation source (None: TFDS declares none).

    Example:
        >>> count_segmentation_examples("digits", "validation")
        200
    """
    kind, value = _parse_source(source)
    if kind == DIGIT_CANVAS:
        return digit_canvas_count(split)
    if kind == "tfds":
        _tfds_masks(value)
        return tfds_split_count(prepared_tfds_builder(value, data_dir)[1], split)
    return len(_segdir_files(value, split)[0])


def digit_canvas_count(split: str) -> int:
    """The canvases of a split of the digit canvases; ValueError naming an unknown split."""
    if split not in DIGIT_CANVAS_COUNTS:
        raise ValueError(
            f"Unknown split for source {DIGIT_CANVAS!r}; expected one of "
            f"{tuple(DIGIT_CANVAS_COUNTS)}. Received: split={split!r}"
        )
    return DIGIT_CANVAS_COUNTS[split]


def _raw_examples(
    source: str, split: str, data_dir: str | None, training: bool, seed: int
) -> tuple[tf.data.Dataset, int, int]:
    """(uint8 image (H, W, 3), int32 mask (H, W)) examples, their count and the class count."""
    kind, value = _parse_source(source)
    num_classes = segmentation_num_classes(source)
    if kind == DIGIT_CANVAS:
        images, masks, _ = digit_canvas(split, digit_canvas_count(split))
        names = [f"{DIGIT_CANVAS} {split} #{index}" for index in range(len(masks))]
        dataset = tf.data.Dataset.from_tensor_slices((images, masks, names))
    elif kind == "tfds":
        convention = _tfds_masks(value)
        tfds, builder = prepared_tfds_builder(value, data_dir)
        dataset = builder.as_dataset(
            split=split, shuffle_files=training, read_config=tfds.ReadConfig(shuffle_seed=seed)
        )
        lookup = tf.constant(convention.lookup, tf.int32)

        def convert(example):
            mask = tf.gather(
                lookup, tf.cast(example[convention.mask_key][..., convention.channel], tf.int32)
            )
            return example["image"], mask, tf.strings.join([source, " ", split, " example"])

        dataset = dataset.map(convert, num_parallel_calls=AUTOTUNE)
    else:
        image_files, mask_files = _segdir_files(value, split)
        ade20k = _segdir_folder(value).ade20k

        def labelled(*element):
            image, values = _decoded_pair(*element)
            return image, _mask_labels(values, ade20k), element[-1]

        dataset = tf.data.Dataset.from_tensor_slices(
            (tf.constant(image_files, tf.string), tf.constant(mask_files, tf.string))
        )
        if training:
            dataset = dataset.shuffle(
                max(len(image_files), 1), seed=seed, reshuffle_each_iteration=True
            )
        dataset = (
            dataset.map(_read_pair, num_parallel_calls=AUTOTUNE)
            .interleave(_decode_pair, cycle_length=AUTOTUNE, num_parallel_calls=AUTOTUNE)
            .map(labelled, num_parallel_calls=AUTOTUNE)
            .apply(tf.data.experimental.assert_cardinality(len(image_files)))
        )
    count = int(dataset.cardinality())
    dataset = dataset.map(
        lambda image, mask, name: _check_example(image, mask, num_classes, name),
        num_parallel_calls=AUTOTUNE,
    )
    return dataset, count, num_classes


# ----------------------------------------------------------------------------- transforms


@dataclasses.dataclass(frozen=True)
class SegmentationAugment:
    """Joint image/mask training augmentation, as mmsegmentation's ADE20K pipeline.

    The crop size is the pipeline's `image_size` S; the rescale target is
    (4 S, S) (the configs' (2048, 512) for S = 512) times a ratio drawn from
    `ratio_range`, keeping the aspect ratio.

    Attributes:
        ratio_range: (min, max) of the random rescale ratio. Default (0.5, 2.0).
        cat_max_ratio: a crop is redrawn (up to 10 times) while one class
            covers this share or more of its labelled pixels; 1 turns it
            off. Default 0.75.
        flip_prob: probability of a horizontal flip. Default 0.5.
        photometric: mmsegmentation's `PhotoMetricDistortion` (brightness
            +-32, contrast and saturation x 0.5-1.5, hue +-18 of OpenCV's
            180 degrees, each with probability 0.5, contrast before or after
            the rest at random). Default True.
    """

    ratio_range: tuple[float, float] = (0.5, 2.0)
    cat_max_ratio: float = 0.75
    flip_prob: float = 0.5
    photometric: bool = True

    def __post_init__(self):
        check_augment_fields(self, ("cat_max_ratio", "flip_prob"))


def check_augment_fields(augment: object, probabilities: tuple[str, ...]) -> None:
    """Checks an augmentation's `ratio_range` and its fields that are probabilities.

    Raises:
        ValueError: `ratio_range` is not (min, max) with 0 < min <= max, or a
            probability is outside [0, 1], naming the field and its value.
    """
    low, high = augment.ratio_range
    if not 0 < low <= high:
        raise ValueError(
            f"ratio_range must be (min, max) with 0 < min <= max. Received: "
            f"ratio_range={augment.ratio_range!r}"
        )
    for name in probabilities:
        value = getattr(augment, name)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1]. Received: {name}={value!r}")


DIGIT_CANVAS_AUGMENT = SegmentationAugment(
    ratio_range=(0.75, 1.25), cat_max_ratio=1.0, flip_prob=0.0
)


def default_augment(source: str) -> SegmentationAugment:
    """The training augmentation of `source`: `DIGIT_CANVAS_AUGMENT` for "digits", else mmseg's.

    Example:
        >>> default_augment("digits").flip_prob
        0.0
    """
    return (
        DIGIT_CANVAS_AUGMENT if _parse_source(source)[0] == DIGIT_CANVAS else SegmentationAugment()
    )


def _resize(image: tf.Tensor, mask: tf.Tensor, size: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    image = tf.image.resize(image, size, method="bilinear")
    mask = tf.image.resize(mask[..., None], size, method="nearest")[..., 0]
    return image, mask


def _pad(image: tf.Tensor, mask: tf.Tensor, size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Pads bottom and right to size x size: image with 0, mask with the ignore index."""
    height, width = tf.shape(mask)[0], tf.shape(mask)[1]
    padding = [[0, size - height], [0, size - width]]
    image = tf.pad(image, [*padding, [0, 0]])
    mask = tf.pad(mask, padding, constant_values=IGNORE_INDEX)
    return tf.ensure_shape(image, (size, size, 3)), tf.ensure_shape(mask, (size, size))


def letterbox_shape(shape: tf.Tensor, size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """The size an image of `shape` resizes to, to fit in size x size keeping its aspect ratio.

    Args:
        shape: the image's (height, width), an integer tensor.
        size: the height and width to fit in.

    Returns:
        (new (height, width) int32, each rounded and in [1, size]; the scale
        `min(size / height, size / width)` float32).

    Example:
        >>> new, scale = letterbox_shape(tf.constant([30, 60]), 64)
        >>> new.numpy().tolist(), round(float(scale), 4)
        ([32, 64], 1.0667)
    """
    shape = tf.cast(shape[:2], tf.float32)
    scale = tf.reduce_min(size / shape)
    return tf.clip_by_value(tf.cast(tf.round(shape * scale), tf.int32), 1, size), scale


def fit_and_pad(image: tf.Tensor, mask: tf.Tensor, size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Resizes (image, mask) to fit in size x size, keeping the aspect ratio, then pads.

    Args:
        image: float (H, W, 3).
        mask: int32 (H, W).
        size: the output height and width.

    Returns:
        (image (size, size, 3), mask (size, size)); padding is 0 and 255.
    """
    new, _ = letterbox_shape(tf.shape(mask), size)
    image, mask = _resize(image, mask, new)
    return _pad(image, mask, size)


def fit_image(image: tf.Tensor, size: int) -> tf.Tensor:
    """The image of :func:`fit_and_pad` alone, from a uint8 image without a float copy of it.

    Args:
        image: uint8 or float (H, W, 3).
        size: the output height and width.

    Returns:
        float32 (size, size, 3), resized (bilinear) to fit and padded with 0.

    Example:
        >>> fit_image(tf.zeros((20, 40, 3), tf.uint8), 32).shape
        TensorShape([32, 32, 3])
    """
    new, _ = letterbox_shape(tf.shape(image)[:2], size)
    image = tf.image.resize(image, new, method="bilinear")
    padding = [[0, size - new[0]], [0, size - new[1]], [0, 0]]
    return tf.ensure_shape(tf.pad(image, padding), (size, size, 3))


def seeded_uniform(seed: tf.Tensor, index: int, low: float = 0.0, high: float = 1.0) -> tf.Tensor:
    """A float32 scalar drawn uniformly from [low, high), a stateless function of (seed, index).

    One example's augmentation draws each of its random choices with its own `index`.
    """
    return tf.random.stateless_uniform((), tf.stack([seed, index]), low, high)


def photometric_distortion(image: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """mmsegmentation's (and mmdetection's) PhotoMetricDistortion on a float [0, 255] RGB image.

    Brightness +-32, contrast and saturation x 0.5-1.5, hue +-18 of OpenCV's
    180 degrees, each with probability 0.5, contrast before or after the
    rest at random; each draw is a stateless function of `seed`.

    Args:
        image: float (H, W, 3) in [0, 255].
        seed: an int64 scalar; the same seed gives the same result.

    Returns:
        The distorted image, float (H, W, 3) in [0, 255].
    """

    def maybe(index: int, transform, image: tf.Tensor) -> tf.Tensor:
        return tf.cond(seeded_uniform(seed, index) < 0.5, lambda: transform(image), lambda: image)

    def clip(image: tf.Tensor) -> tf.Tensor:
        return tf.clip_by_value(image, 0.0, 255.0)

    def contrast(image: tf.Tensor) -> tf.Tensor:
        return clip(image * seeded_uniform(seed, 22, 0.5, 1.5))

    image = maybe(20, lambda image: clip(image + seeded_uniform(seed, 21, -32.0, 32.0)), image)
    contrast_first = seeded_uniform(seed, 23) < 0.5
    image = tf.cond(contrast_first, lambda: maybe(24, contrast, image), lambda: image)
    image = maybe(
        25,
        lambda image: clip(
            255.0 * tf.image.adjust_saturation(image / 255.0, seeded_uniform(seed, 26, 0.5, 1.5))
        ),
        image,
    )
    hue = tf.floor(seeded_uniform(seed, 28, -18.0, 19.0)) / 180.0
    image = maybe(27, lambda image: clip(255.0 * tf.image.adjust_hue(image / 255.0, hue)), image)
    return tf.cond(contrast_first, lambda: image, lambda: maybe(29, contrast, image))


def _random_crop(
    image: tf.Tensor, mask: tf.Tensor, size: int, cat_max_ratio: float, seed: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    height, width = tf.shape(mask)[0], tf.shape(mask)[1]
    crop_height, crop_width = tf.minimum(size, height), tf.minimum(size, width)

    def offsets(attempt: tf.Tensor) -> tf.Tensor:
        limits = tf.cast(tf.stack([height - crop_height + 1, width - crop_width + 1]), tf.int64)
        draw = tf.random.stateless_uniform(
            (2,), tf.stack([seed, 100 + attempt]), 0, 2**31 - 1, tf.int64
        )
        return tf.cast(draw % limits, tf.int32)

    def crop_of(corner: tf.Tensor) -> tf.Tensor:
        return mask[corner[0] : corner[0] + crop_height, corner[1] : corner[1] + crop_width]

    def acceptable(corner: tf.Tensor) -> tf.Tensor:
        labels = tf.reshape(crop_of(corner), [-1])
        labels = tf.boolean_mask(labels, tf.not_equal(labels, IGNORE_INDEX))
        counts = tf.math.bincount(labels, minlength=1)
        present = tf.math.count_nonzero(counts)
        total = tf.maximum(tf.reduce_sum(counts), 1)
        return tf.logical_and(
            present > 1, tf.cast(tf.reduce_max(counts) / total, tf.float32) < cat_max_ratio
        )

    corner = offsets(tf.constant(0, tf.int64))
    if cat_max_ratio < 1.0:
        attempt = tf.constant(0, tf.int64)
        _, corner = tf.while_loop(
            lambda attempt, corner: tf.logical_and(attempt < 10, ~acceptable(corner)),
            lambda attempt, corner: (attempt + 1, offsets(attempt + 1)),
            (attempt, corner),
        )
    image = image[corner[0] : corner[0] + crop_height, corner[1] : corner[1] + crop_width]
    return image, crop_of(corner)


def augment_example(
    image: tf.Tensor,
    mask: tf.Tensor,
    seed: tf.Tensor,
    size: int,
    augment: SegmentationAugment,
) -> tuple[tf.Tensor, tf.Tensor]:
    """One training example's joint augmentation (see `SegmentationAugment`).

    Args:
        image: float (H, W, 3) in [0, 255].
        mask: int32 (H, W).
        seed: an int64 scalar; the same seed gives the same result.
        size: the crop size S.
        augment: the augmentation settings.

    Returns:
        (image (S, S, 3) float32, mask (S, S) int32).
    """
    shape = tf.cast(tf.shape(mask), tf.float32)
    ratio = seeded_uniform(seed, 1, *augment.ratio_range)
    scale = tf.minimum(
        4.0 * size * ratio / tf.reduce_max(shape), size * ratio / tf.reduce_min(shape)
    )
    new = tf.maximum(tf.cast(shape * scale + 0.5, tf.int32), 1)
    image, mask = _resize(image, mask, new)
    image, mask = _random_crop(image, mask, size, augment.cat_max_ratio, seed)
    flip = seeded_uniform(seed, 2) < augment.flip_prob
    image = tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image)
    mask = tf.cond(flip, lambda: tf.reverse(mask, [1]), lambda: mask)
    if augment.photometric:
        image = photometric_distortion(image, seed)
    return _pad(image, mask, size)


def load_segmentation_dataset(
    source: str = DIGIT_CANVAS,
    split: str = "train",
    *,
    image_size: int = 64,
    batch_size: int = 16,
    training: bool | None = None,
    augment: SegmentationAugment | None = None,
    data_dir: str | None = None,
    shuffle_buffer: int = 1000,
    drop_remainder: bool | None = None,
    seed: int = 0,
) -> tf.data.Dataset:
    """Build a batched semantic segmentation pipeline (see the module docstring).

    Args:
        source: "digits", "segdir:<path>", "tfds:oxford_iiit_pet" or
            "tfds:scene_parse150". Default "digits".
        split: the split ("train", "validation", "test"; TFDS slices such as
            "train[:90%]" for TFDS). Default "train".
        image_size: output height and width S, a positive int. Default 64.
        batch_size: batch size, a positive int. Default 16.
        training: shuffle and augment. Default None: `split == "train"`.
        augment: the training augmentation; None (default) fits and pads as
            evaluation does. Ignored when not training.
        data_dir: TFDS data directory. Default None.
        shuffle_buffer: shuffle buffer when training. Default 1000.
        drop_remainder: drop a last partial batch. Default None: `training`.
        seed: seed of shuffling and augmentation. Default 0. The same seed
            gives the same batches every run: the parallel maps keep the
            element order, and each example's augmentation draws from its
            own element of a seeded stream.

    Returns:
        A `tf.data.Dataset` of (images (B, S, S, 3) float32, masks (B, S, S)
        int32) batches.

    Raises:
        ValueError: for a bad argument or source, an empty split, or a
            ``segdir:`` image without its mask.

    Example:
        >>> data = load_segmentation_dataset("digits", "test", batch_size=4)
        >>> images, masks = next(iter(data))
        >>> images.shape, masks.shape
        (TensorShape([4, 64, 64, 3]), TensorShape([4, 64, 64]))
    """
    check_image_size(image_size)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive int. Received: batch_size={batch_size!r}")
    training = split == "train" if training is None else training
    drop_remainder = training if drop_remainder is None else drop_remainder
    dataset, count, _ = _raw_examples(source, split, data_dir, training, seed)
    check_split_size(source, split, count, batch_size, drop_remainder)
    dataset = transform_examples(
        dataset,
        training=training,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        augment=augment
        and (lambda image, mask, key: augment_example(image, mask, key, image_size, augment)),
        evaluate=lambda image, mask: fit_and_pad(image, mask, image_size),
    )
    return batch_in_order(dataset, batch_size, drop_remainder)


def transform_examples(
    dataset: tf.data.Dataset,
    *,
    training: bool,
    shuffle_buffer: int,
    seed: int,
    augment: Callable | None,
    evaluate: Callable,
) -> tf.data.Dataset:
    """Casts each example's image to float32, then augments (training) or fits it.

    Args:
        dataset: (image, ...) examples.
        training: shuffle and, with `augment`, augment.
        shuffle_buffer: the shuffle buffer when training.
        seed: the seed of the shuffle and of each example's augmentation
            seed (its own element of a seeded stream, so the same seed gives
            the same batches whatever the parallelism).
        augment: `augment(image, ..., seed)`, or None: `evaluate` also when
            training.
        evaluate: `evaluate(image, ...)`.
    """
    dataset = dataset.map(
        lambda image, *rest: (tf.cast(image, tf.float32), *rest), num_parallel_calls=AUTOTUNE
    )
    if training:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if training and augment is not None:
        seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
        return tf.data.Dataset.zip((dataset, seeds)).map(
            lambda example, element_seed: augment(*example, element_seed),
            num_parallel_calls=AUTOTUNE,
        )
    return dataset.map(evaluate, num_parallel_calls=AUTOTUNE)


def batch_in_order(
    dataset: tf.data.Dataset, batch_size: int, drop_remainder: bool
) -> tf.data.Dataset:
    """Batches and prefetches a pipeline, deterministic and sharded by data across replicas."""
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.prefetch(AUTOTUNE).with_options(options)
