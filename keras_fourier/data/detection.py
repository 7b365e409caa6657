"""Object detection input pipelines: COCO JSON folders, TFDS COCO and VOC, embedded digit canvases.

`load_detection_dataset` returns a batched `tf.data.Dataset` of (images,
targets): images (B, S, S, 3) float32 RGB with values in [0, 255] (models
normalise inside), letterboxed: resized to fit in S x S keeping the aspect
ratio, then padded at the bottom and right with 0. Targets are float32
(B, max_boxes, 8), one row per annotation, columns `TARGET_COLUMNS`:

* ``x1, y1, x2, y2``: the box's corners in pixels of the model input (the
  letterboxed image): keras-hub's ``"xyxy"`` bounding box format;
* ``class``: the class index, 0..K-1 (COCO: categories sorted by id);
* ``iscrowd``: 1 for a COCO crowd box (a VOC "difficult" box), which
  training ignores and COCO evaluation does not count as missed; else 0;
* ``area``: the annotation's COCO ``area`` (its segment's area) in pixels
  of the ORIGINAL image, which picks COCO's small/medium/large range; the
  box's area where a source has none (digits, VOC);
* ``scale``: the image's letterbox scale, model-input pixels per original
  pixel: dividing x1..y2 by it gives original pixels.

Rows beyond an image's boxes are padding: class -1 (`PADDING_CLASS`), the
image's scale (so that an image without boxes still tells its scale), 0
elsewhere. An image with more than `max_boxes` boxes keeps the `max_boxes`
largest by area (ties in the file's order); evaluation needs `max_boxes` at
least the largest count of the split for COCO-exact numbers.

Sources:

* ``"digits"`` (the default; needs no download): the segmentation digit
  canvases (:func:`keras_fourier.data.segmentation.digit_canvas`): 64x64
  canvases with 1 to 3 of the package's digits, each with the tight box of
  its pasted pixels and its digit as class ("0".."9"). Splits "train"
  (1,000), "validation" (200) and "test" (200), fixed per split.
* ``"coco:<path>"``: COCO JSON annotations, in either of two layouts:
  COCO's own, ``<path>/annotations/instances_<name>.json`` with the images
  in ``<path>/<name>/``, the split names ``train2017`` (or ``train2014``,
  ``train``), ``val2017`` (``val2014``, ``val``, ``validation``) and
  ``test2017`` (``test``); or the common export layout of one folder per
  split, ``<path>/train``, ``<path>/valid`` (or ``val``, ``validation``)
  and ``<path>/test``, each holding its images and one COCO JSON
  (``_annotations.coco.json`` when there are several). Missing splits are
  carved as ``dir:`` data is: with only "train", "validation" is every
  tenth image of it (sorted by image id); with one folder holding a JSON
  and its images (``<path>/*.json``), every fifth image is "test", every
  tenth "validation", the rest "train". Every split's JSON must list the
  same categories; a category that is the supercategory of others (the
  dataset itself as category 0, in Roboflow's exports) is no class.
* ``"tfds:coco/2017"`` (or ``coco/2014``): TFDS's COCO, its 80 categories,
  crowd and area as in COCO's JSON; ``"tfds:coco/2017_panoptic"``: COCO's
  panoptic segments (splits train and validation), its 80 "thing" classes
  as boxes (the 53 "stuff" ones dropped), crowd and area of the segments,
  and each instance's own pixels in its PNG (instance segmentation, whose
  masks never overlap); ``"tfds:voc/2007"`` (or ``voc/2012``):
  its 20 classes, "difficult" boxes as crowd ones (ignored by training and
  evaluation, as mmdetection's VOC evaluation ignores them).

Boxes are read as mmdetection's ``CocoDataset`` reads them: a box of width
or height under 1 pixel, or of ``area`` <= 0, is dropped; a box that
reaches outside its image is clipped to it (one lying wholly outside is
refused: the file's boxes are in another frame); crowd boxes are kept, with
iscrowd 1. Training drops the images without any non-crowd box
(mmdetection's ``filter_empty_gt``); evaluation keeps every image.

Training (with a `DetectionAugment`) draws a random resize of the
letterbox scale (times a ratio in `ratio_range`), a random S x S crop of
the result (boxes shifted and clipped to it, those left empty dropped; the
crop is redrawn up to 10 times while it holds none of the image's
non-crowd boxes), a horizontal flip and the photometric distortion of the
segmentation pipeline (mmdetection's ``PhotoMetricDistortion``), then pads
to S x S.

A COCO JSON is read within bounds and checked by
:func:`keras_fourier.data.coco_json.read_coco_json` (which uses no TensorFlow): a
bad file is one `ValueError` line naming it and the problem, and every
image file must exist, before anything is decoded.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from keras_fourier.data.augment import check_image_size
from keras_fourier.data.checks import (
    COCO_IMAGE_CHECK,
    check_source_folder,
    check_split_size,
    decode_files,
    find_unreadable,
    report_skipped,
)
from keras_fourier.data.coco_json import BOX_COLUMNS, CocoAnnotations, read_coco_json, short_repr
from keras_fourier.data.images import load_digits
from keras_fourier.data.segmentation import (
    DIGIT_CANVAS,
    DIGIT_CANVAS_THRESHOLD,
    batch_in_order,
    check_augment_fields,
    digit_canvas,
    digit_canvas_count,
    held_out_splits,
    letterbox_shape,
    names_dense_source,
    parse_dense_source,
    photometric_distortion,
    prepared_tfds_builder,
    seeded_uniform,
    tfds_convention,
    tfds_split_count,
    transform_examples,
)
from keras_fourier.detection.targets import PADDING_CLASS, TARGET_COLUMNS
from keras_fourier.settings import BAD_IMAGE_MODES
from keras_fourier.validation import check_choice

# The original COCO category id of each of the 80 classes of TFDS's coco (in label order).
COCO_CATEGORY_IDS = (
    *range(1, 12),
    *range(13, 26),
    27,
    28,
    *range(31, 45),
    *range(46, 66),
    67,
    70,
    *range(72, 83),
    *range(84, 91),
)
COCO_SPLIT_NAMES = {
    "train": ("train2017", "train2014", "train"),
    "validation": ("val2017", "val2014", "val", "validation"),
    "test": ("test2017", "test"),
}
EXPORT_SPLIT_FOLDERS = {
    "train": ("train",),
    "validation": ("valid", "val", "validation"),
    "test": ("test",),
}
EXPORT_ANNOTATION_FILE = "_annotations.coco.json"
# The training splits of a coco: source evaluated on its validation split (COCO's own layout
# has no test annotations): "train" without, and with only, every tenth image by id.
COCO_HELD_OUT_SPLITS = {"train[:90%]": "train", "train[90%:]": "validation"}
AUTOTUNE = tf.data.AUTOTUNE


@dataclasses.dataclass(frozen=True)
class TFDSBoxes:
    """How a TFDS detection dataset's objects become box rows.

    Attributes:
        crowd_key: the object feature read as iscrowd.
        area_key: the object feature holding the area; None: the box's.
        category_ids: the original category id of each label; None: label + 1.
            With them, only the labels below their count are classes (box rows).
        objects_key: the feature holding the objects. Default "objects".
        panoptic_key: the feature holding a panoptic PNG (a pixel's segment id
            R + 256 G + 256^2 B, an object's "id"), the instances' masks; None
            (default): the dataset has no masks.
    """

    crowd_key: str
    area_key: str | None
    category_ids: tuple[int, ...] | None
    objects_key: str = "objects"
    panoptic_key: str | None = None


_COCO_BOXES = TFDSBoxes("is_crowd", "area", COCO_CATEGORY_IDS)
_VOC_BOXES = TFDSBoxes("is_difficult", None, None)
TFDS_BOXES = {
    "coco/2014": _COCO_BOXES,
    "coco/2017": _COCO_BOXES,
    # COCO panoptic: 133 labels sorted by category id, the 80 "thing" classes (COCO's, in the
    # same order) first, then the 53 "stuff" ones, which are no boxes.
    "coco/2017_panoptic": dataclasses.replace(
        _COCO_BOXES, objects_key="panoptic_objects", panoptic_key="panoptic_image"
    ),
    "voc/2007": _VOC_BOXES,
    "voc/2012": _VOC_BOXES,
}


def _parse_source(source: str) -> tuple[str, str]:
    return parse_dense_source(source, "coco", TFDS_BOXES, "detection")


def is_detection_source(source: str) -> bool:
    """Whether `source` names detection data ("digits", "coco:<path>", TFDS COCO or VOC).

    Example:
        >>> is_detection_source("coco:/data/coco"), is_detection_source("tfds:mnist")
        (True, False)
    """
    return names_dense_source(source, "coco", TFDS_BOXES)


def _tfds_boxes(name: str) -> TFDSBoxes:
    return tfds_convention(name, TFDS_BOXES, "detection", "coco")


def _tfds_builder(name: str, data_dir: str | None):
    _tfds_boxes(name)
    return prepared_tfds_builder(name, data_dir)


# ----------------------------------------------------------------------------- digit canvases


def _digit_boxes(split: str) -> tuple[np.ndarray, list[np.ndarray], list[list[np.ndarray]]]:
    """The digit canvases of a split, per canvas its (n, 7) box rows and each box's pixels.

    A box's pixels are the bool (height, width) mask of its digit's pasted
    pixels within the box (the box is their tight box).
    """
    images, _, layouts = digit_canvas(split, digit_canvas_count(split))
    digits, labels = load_digits(split)
    pasted = digits[..., 0] >= DIGIT_CANVAS_THRESHOLD
    rows, pixels = [], []
    for layout in layouts:
        boxes, inside = [], []
        for index, scale, top, left in layout:
            ys, xs = np.nonzero(pasted[index])
            x1, y1 = left + scale * xs.min(), top + scale * ys.min()
            x2, y2 = left + scale * (xs.max() + 1), top + scale * (ys.max() + 1)
            boxes.append([x1, y1, x2, y2, labels[index], 0, (x2 - x1) * (y2 - y1)])
            digit = pasted[index, ys.min() : ys.max() + 1, xs.min() : xs.max() + 1]
            inside.append(np.kron(digit, np.ones((scale, scale), bool)))
        rows.append(np.array(boxes, np.float32).reshape(-1, BOX_COLUMNS))
        pixels.append(inside)
    return images, rows, pixels


# ----------------------------------------------------------------------------- COCO folders


@dataclasses.dataclass(frozen=True)
class _CocoSplit:
    annotation_file: str
    image_folder: str
    carve: str | None  # the split carved out of the file's images; None: all of them


def _json_files(folder: str) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.lower().endswith(".json"))


def _export_json(folder: str, source: str) -> str:
    names = _json_files(folder)
    if EXPORT_ANNOTATION_FILE in names:
        return os.path.join(folder, EXPORT_ANNOTATION_FILE)
    if len(names) != 1:
        raise ValueError(
            f"Detection source {source!r}: folder {folder!r} must hold one COCO JSON (or "
            f"{EXPORT_ANNOTATION_FILE!r}); it holds {len(names)}. Received: json={names[:5]}"
        )
    return os.path.join(folder, names[0])


def _coco_folders(path: str) -> dict[str, tuple[str, str]]:
    """The split -> (annotation file, image folder) pairs a ``coco:`` folder has."""
    source = f"coco:{path}"
    check_source_folder(path, "Detection folder", source)
    found = {}
    annotations = os.path.join(path, "annotations")
    if os.path.isdir(annotations):
        for split, names in COCO_SPLIT_NAMES.items():
            for name in names:
                file = os.path.join(annotations, f"instances_{name}.json")
                if os.path.isfile(file):
                    found[split] = (file, os.path.join(path, name))
                    break
        return found
    for split, names in EXPORT_SPLIT_FOLDERS.items():
        for name in names:
            folder = os.path.join(path, name)
            if os.path.isdir(folder):
                found[split] = (_export_json(folder, source), folder)
                break
    return found


def _coco_split(path: str, split: str) -> _CocoSplit:
    source = f"coco:{path}"
    found = _coco_folders(path)
    if split in found:
        carve = "train" if split == "train" and "validation" not in found else None
        return _CocoSplit(*found[split], carve)
    if split == "validation" and "train" in found:
        return _CocoSplit(*found["train"], "validation")
    if split in COCO_HELD_OUT_SPLITS and "train" in found:
        return _CocoSplit(*found["train"], COCO_HELD_OUT_SPLITS[split])
    if split in COCO_SPLIT_NAMES and not found and _json_files(path):
        return _CocoSplit(_export_json(path, source), path, split)
    raise ValueError(
        f"Unknown split {split!r} for source {source!r}: it has "
        f"{sorted(found) or 'no split folders'} (COCO's annotations/instances_<split>.json, or "
        f"train/, valid/, test/ folders each with a COCO JSON). Received: split={split!r}"
    )


def _carved(count: int, carve: str | None, from_root: bool) -> np.ndarray:
    """Which of `count` images (in image id order) belong to the carved split."""
    rank = np.arange(count)
    if carve is None:
        return np.ones(count, bool)
    test = (rank % 5 == 4) & from_root
    validation = rank % 10 == 3
    return {"test": test, "validation": validation, "train": ~(test | validation)}[carve]


@dataclasses.dataclass(frozen=True)
class _CocoExamples:
    annotations: CocoAnnotations
    files: list[str]
    rows: list[np.ndarray]
    positions: list[int]  # each file's image index in `annotations`


def _reference_annotations(path: str) -> CocoAnnotations:
    """The smallest COCO JSON of a ``coco:`` source: its categories are every split's."""
    files = {file for file, _ in _coco_folders(path).values()}
    files = files or {_coco_split(path, "train").annotation_file}
    return read_coco_json(min(sorted(files), key=os.path.getsize))


def _coco_examples(path: str, split: str) -> _CocoExamples:
    """The image files of a split of a ``coco:`` source and their box rows, all files checked."""
    where = _coco_split(path, split)
    annotations = read_coco_json(where.annotation_file)
    reference = _reference_annotations(path)
    if (annotations.category_ids, annotations.class_names) != (
        reference.category_ids,
        reference.class_names,
    ):
        raise ValueError(
            f"COCO JSON {where.annotation_file!r} has other categories than "
            f"{reference.file!r}, so their class indices would not match: every split needs "
            f"the same categories. Received: categories={short_repr(annotations.class_names)}"
        )
    keep = _carved(len(annotations.image_ids), where.carve, where.image_folder == path)
    folder = os.path.realpath(where.image_folder)
    files, rows, positions = [], [], []
    for position, (name, boxes, kept) in enumerate(
        zip(annotations.file_names, annotations.rows, keep, strict=True)
    ):
        if not kept:
            continue
        file = os.path.realpath(os.path.join(folder, name))
        if os.path.commonpath([folder, file]) != folder:
            raise ValueError(
                f"COCO JSON {where.annotation_file!r}: an image's file_name leaves the image "
                f"folder {where.image_folder!r}. Received: file_name={short_repr(name)}"
            )
        files.append(file)
        rows.append(boxes)
        positions.append(position)
    missing = [file for file in files if not os.path.isfile(file)]
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise ValueError(
            f"{len(missing)} of {len(files)} images of split {split!r} listed in COCO JSON "
            f"{where.annotation_file!r} are missing from {where.image_folder!r}. "
            f"Received: missing={shown}"
        )
    return _CocoExamples(annotations, files, rows, positions)


# ----------------------------------------------------------------------------- public helpers


def detection_class_names(source: str = DIGIT_CANVAS, data_dir: str | None = None) -> list[str]:
    """The class names of a detection source, in class index order, without reading images.

    COCO JSON: the categories' names sorted by category id (class i is the
    i-th); digits: "0".."9"; TFDS: its label names (VOC's 20 classes; of
    COCO panoptic's 133, the 80 "thing" classes).

    Example:
        >>> detection_class_names()[:3]
        ['0', '1', '2']
    """
    kind, value = _parse_source(source)
    if kind == DIGIT_CANVAS:
        return [str(digit) for digit in range(10)]
    if kind == "tfds":
        convention = _tfds_boxes(value)
        _, builder = _tfds_builder(value, data_dir)
        names = builder.info.features[convention.objects_key]["label"].names
        return list(names[: len(convention.category_ids or names)])
    return list(_reference_annotations(value).class_names)


def detection_num_classes(source: str = DIGIT_CANVAS, data_dir: str | None = None) -> int:
    """The class count of a detection source (10 for the digit canvases, 80 for COCO).

    Example:
        >>> detection_num_classes("digits")
        10
    """
    return len(detection_class_names(source, data_dir))


def detection_category_ids(source: str = DIGIT_CANVAS, data_dir: str | None = None) -> list[int]:
    """The original category id of each class index, for COCO results files.

    COCO JSON: its category ids, sorted; TFDS COCO: COCO's 80 ids; other
    sources: class index + 1.

    Example:
        >>> detection_category_ids()[:3]
        [1, 2, 3]
    """
    kind, value = _parse_source(source)
    if kind == "coco":
        return list(_reference_annotations(value).category_ids)
    ids = _tfds_boxes(value).category_ids if kind == "tfds" else None
    return list(ids) if ids else list(range(1, detection_num_classes(source, data_dir) + 1))


def detection_splits(
    source: str = DIGIT_CANVAS, test_split: str = "test", data_dir: str | None = None
) -> tuple[str, str]:
    """The train and validation splits of a detection source that leave `test_split` unseen.

    The digit canvases and ``coco:`` folders have "train" and "validation"
    (carved from "train" when missing); a TFDS dataset without a validation
    split, or whose validation split is `test_split`, holds out the last 10%
    of "train". A ``coco:`` folder with a validation split that is
    `test_split` (COCO's val2017: its test2017 has no annotations) trains on
    "train[:90%]" and selects on "train[90%:]": every tenth training image
    (by id) held out.

    Raises:
        ValueError: when `test_split` is one of them.

    Example:
        >>> detection_splits()
        ('train', 'validation')
    """
    kind, value = _parse_source(source)
    if kind == "coco" and test_split == "validation" and "validation" in _coco_folders(value):
        return tuple(COCO_HELD_OUT_SPLITS)
    builder = _tfds_builder(value, data_dir)[1] if kind == "tfds" else None
    return held_out_splits(source, test_split, builder)


def count_detection_examples(source: str, split: str, data_dir: str | None = None) -> int | None:
    """Number of images in a split of a detection source, as evaluation reads it (every image).

    None: a TFDS split that declares no size.

    Example:
        >>> count_detection_examples("digits", "validation")
        200
    """
    kind, value = _parse_source(source)
    if kind == DIGIT_CANVAS:
        return digit_canvas_count(split)
    if kind == "tfds":
        return tfds_split_count(_tfds_builder(value, data_dir)[1], split)
    return len(_coco_examples(value, split).files)


# ----------------------------------------------------------------------------- raw examples


def _has_boxes(rows: np.ndarray) -> bool:
    return bool((rows[:, 5] == 0).any())


def _sliced(images_or_files, rows: list[np.ndarray], positions: list[int]):
    """(images or files, start, count, position) elements and the concatenated rows they slice."""
    counts = np.array([len(boxes) for boxes in rows], np.int64)
    starts = np.cumsum(counts) - counts
    table = tf.constant(np.concatenate([*rows, np.zeros((0, BOX_COLUMNS), np.float32)]))
    elements = (images_or_files, starts, counts, np.array(positions, np.int64))
    return tf.data.Dataset.from_tensor_slices(elements), table


def _raw_examples(
    source: str, split: str, data_dir: str | None, training: bool, seed: int, on_bad_image: str
) -> tuple[tf.data.Dataset, int]:
    """(uint8 image (H, W, 3), float32 rows (n, 7), found) examples and their count.

    `found` is what a mask hook reads of the example: {"position": its index
    among the split's canvases, COCO images or TFDS examples (the split's
    order; -1 for TFDS when training, whose files are read shuffled)}, and
    for a TFDS panoptic source {"panoptic": its PNG, undecoded, "segments":
    (n,) int64 its rows' segment ids}. The count is -1 when unknown.
    Training keeps only the images with a non-crowd box.
    """
    kind, value = _parse_source(source)
    if kind == "tfds":
        return _tfds_examples(value, split, data_dir, training, seed)
    if kind == DIGIT_CANVAS:
        images, rows, _ = _digit_boxes(split)
        keep = [index for index, boxes in enumerate(rows) if not training or _has_boxes(boxes)]
        dataset, table = _sliced(images[keep], [rows[index] for index in keep], keep)
        return dataset.map(
            lambda image, start, count, position: (
                image,
                table[start : start + count],
                {"position": position},
            )
        ), len(keep)
    examples = _coco_examples(value, split)
    kept = [
        (file, boxes, position)
        for position, (file, boxes) in enumerate(zip(examples.files, examples.rows, strict=True))
        if not training or _has_boxes(boxes)
    ]
    if on_bad_image == "skip":
        unreadable = set(find_unreadable([file for file, *_ in kept]))
        report_skipped(source, split, sorted(unreadable), len(kept))
        kept = [example for example in kept if example[0] not in unreadable]
    files = [file for file, *_ in kept]
    dataset, table = _sliced(
        tf.constant(files, tf.string), [boxes for _, boxes, _ in kept], [at for *_, at in kept]
    )
    if training and files:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.map(
        lambda file, start, count, position: (file, (tf.stack([start, count, position]), file))
    )
    dataset = decode_files(dataset, deterministic=True)
    sizes = examples.annotations.sizes[np.array(examples.positions, np.int64)].reshape(-1, 2)
    declared = tf.constant(sizes, tf.int32)
    json_file = examples.annotations.file

    def example(image, label):
        span, file = label
        size = declared[span[2]]
        # Rows and masks are in the JSON's pixels: an image of another size would move them.
        check = tf.debugging.Assert(
            tf.reduce_all(tf.shape(image)[:2] == size),
            [
                COCO_IMAGE_CHECK,
                file,
                "is",
                tf.shape(image)[0],
                "x",
                tf.shape(image)[1],
                f"pixels (height x width) but COCO JSON {json_file} declares",
                size[0],
                "x",
                size[1],
                "(resized after annotation?)",
            ],
        )
        with tf.control_dependencies([check]):
            image = tf.identity(image)
        return image, table[span[0] : span[0] + span[1]], {"position": span[2]}

    return dataset.map(example, num_parallel_calls=AUTOTUNE), len(files)


def tfds_box_rows(
    objects: dict[str, tf.Tensor],
    height: tf.Tensor | int,
    width: tf.Tensor | int,
    convention: TFDSBoxes,
) -> tuple[tf.Tensor, tf.Tensor]:
    """The box rows of a TFDS example's objects, and which objects they are.

    Args:
        objects: the example's objects (normalized "bbox", "label", ...).
        height: the image's height in pixels.
        width: its width.
        convention: how its objects become rows (`TFDS_BOXES`).

    Returns:
        (float32 (n, 7) rows x1, y1, x2, y2 in pixels, class, iscrowd, area;
        bool (objects,) which objects they are: those of a class, at least a
        pixel wide and high, of positive area).
    """
    height, width = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
    bbox = tf.reshape(tf.cast(objects["bbox"], tf.float32), (-1, 4))
    x1, y1 = bbox[:, 1] * width, bbox[:, 0] * height
    x2, y2 = bbox[:, 3] * width, bbox[:, 2] * height
    if convention.area_key is None:
        area = (x2 - x1) * (y2 - y1)
    else:
        area = tf.cast(objects[convention.area_key], tf.float32)
    labels = tf.cast(objects["label"], tf.float32)
    crowd = tf.cast(objects[convention.crowd_key], tf.float32)
    rows = tf.stack([x1, y1, x2, y2, labels, crowd, area], axis=1)
    valid = (x2 - x1 >= 1) & (y2 - y1 >= 1) & (area > 0)
    if convention.category_ids is not None:
        valid &= labels < len(convention.category_ids)
    return tf.boolean_mask(rows, valid), valid


def tfds_split(
    name: str,
    split: str,
    data_dir: str | None,
    *,
    training: bool,
    seed: int = 0,
    decode_image: bool = True,
) -> tuple[tf.data.Dataset, TFDSBoxes]:
    """A split of a TFDS detection dataset as `builder.as_dataset` reads it, and its convention.

    A panoptic PNG is left undecoded (`tfds.decode.SkipDecoding`): only a
    mask hook decodes it; so is the image without `decode_image`. Not
    training, the files are read in the split's order.
    """
    convention = _tfds_boxes(name)
    tfds, builder = _tfds_builder(name, data_dir)
    skipped = [convention.panoptic_key] if convention.panoptic_key else []
    skipped += [] if decode_image else ["image"]
    dataset = builder.as_dataset(
        split=split,
        shuffle_files=training,
        decoders={key: tfds.decode.SkipDecoding() for key in skipped} or None,
        read_config=tfds.ReadConfig(shuffle_seed=seed),
    )
    return dataset, convention


def _tfds_examples(
    name: str, split: str, data_dir: str | None, training: bool, seed: int
) -> tuple[tf.data.Dataset, int]:
    dataset, convention = tfds_split(name, split, data_dir, training=training, seed=seed)
    count = int(dataset.cardinality())

    def convert(position, example):
        image = example["image"]
        objects = example[convention.objects_key]
        rows, kept = tfds_box_rows(objects, tf.shape(image)[0], tf.shape(image)[1], convention)
        found = {"position": tf.constant(-1, tf.int64) if training else position}
        if convention.panoptic_key:
            found["panoptic"] = example[convention.panoptic_key]
            found["segments"] = tf.boolean_mask(tf.cast(objects["id"], tf.int64), kept)
        return image, rows, found

    dataset = dataset.enumerate().map(convert, num_parallel_calls=AUTOTUNE)
    if training:
        dataset = dataset.filter(lambda image, rows, _: tf.reduce_any(tf.equal(rows[:, 5], 0.0)))
        count = -1
    return dataset, count


# ----------------------------------------------------------------------------- transforms


@dataclasses.dataclass(frozen=True)
class DetectionAugment:
    """Box-aware training augmentation: random resize and crop, flip, photometric distortion.

    The image is resized by its letterbox scale (fitting it in S x S) times
    a ratio drawn from `ratio_range`, then cropped to S x S at a random
    place (redrawn up to 10 times while the crop holds none of the image's
    non-crowd boxes); boxes are scaled, shifted and clipped with it, and
    those left without width or height dropped, as mmdetection's
    ``RandomCrop`` does.

    Attributes:
        ratio_range: (min, max) of the random resize ratio. Default (0.5, 2.0).
        flip_prob: probability of a horizontal flip. Default 0.5.
        photometric: mmdetection's ``PhotoMetricDistortion`` (see
            :func:`keras_fourier.data.segmentation.photometric_distortion`).
            Default True.
    """

    ratio_range: tuple[float, float] = (0.5, 2.0)
    flip_prob: float = 0.5
    photometric: bool = True

    def __post_init__(self):
        check_augment_fields(self, ("flip_prob",))


# A mirrored digit is another shape: the digit canvases are not flipped.
DIGIT_BOX_AUGMENT = DetectionAugment(ratio_range=(0.75, 1.25), flip_prob=0.0)


def default_detection_augment(source: str) -> DetectionAugment:
    """The training augmentation of `source`: `DIGIT_BOX_AUGMENT` for "digits", else the default.

    Example:
        >>> default_detection_augment("digits").flip_prob
        0.0
    """
    kind, _ = _parse_source(source)
    return DIGIT_BOX_AUGMENT if kind == DIGIT_CANVAS else DetectionAugment()


def _crop(rows: tf.Tensor, corner: tf.Tensor, crop: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Rows moved into the crop at `corner` (top, left) of size `crop`, clipped; which are kept."""
    top, left = tf.cast(corner[0], tf.float32), tf.cast(corner[1], tf.float32)
    height, width = tf.cast(crop[0], tf.float32), tf.cast(crop[1], tf.float32)
    x1 = tf.clip_by_value(rows[:, 0] - left, 0.0, width)
    y1 = tf.clip_by_value(rows[:, 1] - top, 0.0, height)
    x2 = tf.clip_by_value(rows[:, 2] - left, 0.0, width)
    y2 = tf.clip_by_value(rows[:, 3] - top, 0.0, height)
    boxes = tf.concat([tf.stack([x1, y1, x2, y2], 1), rows[:, 4:]], 1)
    return boxes, (x2 > x1) & (y2 > y1)


def _crop_rows(rows: tf.Tensor, corner: tf.Tensor, crop: tf.Tensor) -> tf.Tensor:
    """Rows moved into the crop at `corner` (top, left) of size `crop`, clipped; empty dropped."""
    return tf.boolean_mask(*_crop(rows, corner, crop))


def resample_box_masks(masks: tf.Tensor, boxes: tf.Tensor, windows: tf.Tensor) -> tf.Tensor:
    """Box-local masks resampled (bilinear) into the frames of windows inside their boxes.

    Args:
        masks: float32 (n, M, M), each in the frame of its box: pixel (i, j)
            covers the box's (i / M, j / M) to ((i + 1) / M, (j + 1) / M).
        boxes: float32 (n, 4) x1, y1, x2, y2 of the boxes.
        windows: float32 (n, 4) x1, y1, x2, y2 of the new boxes, in the same
            frame (a crop's clipped boxes).

    Returns:
        float32 (n, M, M): each mask in its window's frame.
    """
    size = int(masks.shape[-1])
    extent = tf.maximum(boxes[:, 2:] - boxes[:, :2], 1e-6)
    start = (windows[:, :2] - boxes[:, :2]) / extent
    end = (windows[:, 2:] - boxes[:, :2]) / extent
    # The mask-pixel coordinates of the first and last output pixels' centres.
    first = tf.clip_by_value(size * start - 0.5 + 0.5 * (end - start), 0.0, size - 1.0)
    last = tf.clip_by_value(size * start - 0.5 + (size - 0.5) * (end - start), 0.0, size - 1.0)
    normalized = tf.stack([first[:, 1], first[:, 0], last[:, 1], last[:, 0]], 1) / (size - 1)
    resampled = tf.image.crop_and_resize(
        masks[..., None], normalized, tf.range(tf.shape(masks)[0]), (size, size)
    )
    return resampled[..., 0]


def augment_detection_example(
    image: tf.Tensor,
    rows: tf.Tensor,
    seed: tf.Tensor,
    size: int,
    augment: DetectionAugment,
    masks: tf.Tensor | None = None,
) -> tuple[tf.Tensor, ...]:
    """One training example's box-aware augmentation (see `DetectionAugment`).

    Args:
        image: float (H, W, 3) in [0, 255].
        rows: float32 (n, 7) boxes: x1, y1, x2, y2 in pixels, class,
            iscrowd, area.
        seed: an int64 scalar; the same seed gives the same result.
        size: the output size S.
        augment: the augmentation settings.
        masks: float32 (n, M, M) box-local instance masks (see
            `resample_box_masks`), moved with their boxes. Default None.

    Returns:
        (image (S, S, 3) float32, rows (m, 7) in the output's pixels, the
        resize scale: output pixels per input pixel), then the m boxes'
        masks when `masks` is given.
    """
    new, scale = letterbox_shape(tf.shape(image), size)
    scale = scale * seeded_uniform(seed, 1, *augment.ratio_range)
    new = tf.maximum(
        tf.cast(tf.round(tf.cast(tf.shape(image)[:2], tf.float32) * scale), tf.int32), 1
    )
    image = tf.image.resize(image, new, method="bilinear")
    rows = tf.concat([rows[:, :4] * scale, rows[:, 4:]], 1)
    crop = tf.minimum(new, size)

    def corner_of(attempt: tf.Tensor) -> tf.Tensor:
        draw = tf.random.stateless_uniform(
            (2,), tf.stack([seed, 100 + attempt]), 0, 2**31 - 1, tf.int64
        )
        return tf.cast(draw % tf.cast(new - crop + 1, tf.int64), tf.int32)

    def acceptable(corner: tf.Tensor) -> tf.Tensor:
        wanted = tf.reduce_any(tf.equal(rows[:, 5], 0.0))
        kept = _crop_rows(rows, corner, crop)
        return tf.logical_or(~wanted, tf.reduce_any(tf.equal(kept[:, 5], 0.0)))

    _, corner = tf.while_loop(
        lambda attempt, corner: tf.logical_and(attempt < 10, ~acceptable(corner)),
        lambda attempt, corner: (attempt + 1, corner_of(attempt + 1)),
        (tf.constant(0, tf.int64), corner_of(tf.constant(0, tf.int64))),
    )
    image = image[corner[0] : corner[0] + crop[0], corner[1] : corner[1] + crop[1]]
    moved, kept = _crop(rows, corner, crop)
    if masks is not None:
        shift = tf.cast(tf.stack([corner[1], corner[0], corner[1], corner[0]]), tf.float32)
        masks = resample_box_masks(masks, rows[:, :4] - shift, moved[:, :4])
        masks = tf.boolean_mask(masks, kept)
    rows = tf.boolean_mask(moved, kept)
    width = tf.cast(crop[1], tf.float32)
    flipped = tf.concat(
        [
            tf.stack([width - rows[:, 2], rows[:, 1], width - rows[:, 0], rows[:, 3]], 1),
            rows[:, 4:],
        ],
        1,
    )
    flip = seeded_uniform(seed, 2) < augment.flip_prob
    image = tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image)
    rows = tf.cond(flip, lambda: flipped, lambda: rows)
    if augment.photometric:
        image = photometric_distortion(image, seed)
    image = tf.image.pad_to_bounding_box(image, 0, 0, size, size)
    if masks is None:
        return image, rows, scale
    return image, rows, scale, tf.cond(flip, lambda: tf.reverse(masks, [2]), lambda: masks)


def letterbox_example(
    image: tf.Tensor, rows: tf.Tensor, size: int, masks: tf.Tensor | None = None
) -> tuple[tf.Tensor, ...]:
    """Resizes an image to fit in size x size keeping its aspect ratio, pads it, moves its boxes.

    Args:
        image: float (H, W, 3).
        rows: float32 (n, 7) boxes (x1, y1, x2, y2 first) in the image's pixels.
        size: the output size S.
        masks: box-local instance masks, returned as they are (they move
            with their boxes). Default None.

    Returns:
        (image (S, S, 3) padded at the bottom and right with 0, rows with
        boxes in its pixels, the scale: output pixels per input pixel), then
        `masks` when given.
    """
    new, scale = letterbox_shape(tf.shape(image), size)
    image = tf.image.resize(image, new, method="bilinear")
    rows = tf.concat([rows[:, :4] * scale, rows[:, 4:]], 1)
    image = tf.image.pad_to_bounding_box(image, 0, 0, size, size)
    return (image, rows, scale) if masks is None else (image, rows, scale, masks)


def _targets(
    rows: tf.Tensor,
    scale: tf.Tensor,
    max_boxes: int,
    masks: tf.Tensor | None = None,
    position: tf.Tensor | None = None,
) -> tf.Tensor | dict[str, tf.Tensor]:
    """(max_boxes, 8) targets: the largest `max_boxes` rows by area, then padding rows.

    With `masks` (n, M, M) and the example's `position`: {"boxes": the
    targets, "masks": (max_boxes, M, M) those rows' masks, zeros for padding,
    "image": the position, int32}.
    """
    order = tf.argsort(rows[:, 6], direction="DESCENDING", stable=True)[:max_boxes]
    rows = tf.gather(rows, order)
    count = tf.shape(rows)[0]
    rows = tf.concat([rows, tf.fill([count, 1], scale)], 1)
    padding = tf.tile(
        tf.stack([0.0, 0.0, 0.0, 0.0, float(PADDING_CLASS), 0.0, 0.0, scale])[None],
        [max_boxes - count, 1],
    )
    boxes = tf.ensure_shape(tf.concat([rows, padding], 0), (max_boxes, len(TARGET_COLUMNS)))
    if masks is None:
        return boxes
    size = int(masks.shape[-1])
    masks = tf.pad(tf.gather(masks, order), [[0, max_boxes - count], [0, 0], [0, 0]])
    return {
        "boxes": boxes,
        "masks": tf.ensure_shape(masks, (max_boxes, size, size)),
        "image": tf.cast(position, tf.int32),
    }


def load_detection_dataset(
    source: str = DIGIT_CANVAS,
    split: str = "train",
    *,
    image_size: int = 64,
    batch_size: int = 16,
    training: bool | None = None,
    augment: DetectionAugment | None = None,
    max_boxes: int = 100,
    data_dir: str | None = None,
    shuffle_buffer: int = 1000,
    drop_remainder: bool | None = None,
    seed: int = 0,
    on_bad_image: str = "error",
    masks: Callable[[tf.Tensor], tf.Tensor] | None = None,
) -> tf.data.Dataset:
    """Build a batched object detection pipeline (see the module docstring).

    Args:
        source: "digits", "coco:<path>", "tfds:coco/2017",
            "tfds:coco/2017_panoptic" or "tfds:voc/2007". Default "digits".
        split: "train", "validation" or "test" (TFDS slices such as
            "train[:90%]" for TFDS). Default "train".
        image_size: output height and width S, a positive int. Default 64.
        batch_size: batch size, a positive int. Default 16.
        training: drop images without boxes, shuffle and augment. Default
            None: `split == "train"`.
        augment: the training augmentation; None (default) letterboxes as
            evaluation does. Ignored when not training.
        max_boxes: target rows per image, a positive int. Default 100.
        data_dir: TFDS data directory. Default None.
        shuffle_buffer: shuffle buffer when training. Default 1000.
        drop_remainder: drop a last partial batch. Default None: `training`.
        seed: seed of shuffling and augmentation. Default 0; the same seed
            gives the same batches every run.
        on_bad_image: a corrupt image file of a ``coco:`` source: "error"
            (the pipeline fails naming it) or "skip" (left out, counted in
            one warning line). Default "error".
        masks: (found, rows) -> float32 (n, M, M) box-local masks of an
            example's n box rows (float32 (n, 7) in its pixels), `found` what
            the source tells of the example: {"position": its index in the
            split (canvas, COCO image or TFDS example)}, with, for a TFDS
            panoptic source, "panoptic" (its PNG, undecoded) and "segments"
            (its rows' segment ids); the masks move with the boxes, and the
            targets are then {"boxes": ..., "masks": (B, max_boxes, M, M),
            "image": (B,) int32 the positions}
            (:func:`keras_fourier.data.instances.load_instance_dataset`).
            Default None.

    Returns:
        A `tf.data.Dataset` of (images (B, S, S, 3) float32, targets
        (B, max_boxes, 8) float32) batches; the target columns are
        `TARGET_COLUMNS`.

    Raises:
        ValueError: a bad argument or source, a bad COCO JSON, an image
            missing from its folder, or an empty split: one line.

    Example:
        >>> data = load_detection_dataset("digits", "test", batch_size=4)
        >>> images, targets = next(iter(data))
        >>> images.shape, targets.shape
        (TensorShape([4, 64, 64, 3]), TensorShape([4, 100, 8]))
    """
    check_image_size(image_size)
    for name, value in (("batch_size", batch_size), ("max_boxes", max_boxes)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int. Received: {name}={value!r}")
    check_choice("on_bad_image", on_bad_image, BAD_IMAGE_MODES)
    training = split == "train" if training is None else training
    drop_remainder = training if drop_remainder is None else drop_remainder
    dataset, count = _raw_examples(source, split, data_dir, training, seed, on_bad_image)
    if count == 0 and training:
        raise ValueError(
            f"Split {split!r} of detection source {source!r} has no image with a non-crowd box "
            f"to train on. Received: split={split!r}"
        )
    check_split_size(source, split, count, batch_size, drop_remainder)
    # Examples are (image, rows, *carried): with masks, carried = (masks, position), the
    # position passing every transform unchanged.
    if masks is None:
        dataset = dataset.map(lambda image, rows, found: (image, rows))
    else:
        dataset = dataset.map(
            lambda image, rows, found: (image, rows, masks(found, rows), found["position"]),
            num_parallel_calls=AUTOTUNE,
        )

    def augmented(image, rows, *carried):
        *carried, example_seed = carried
        moved = augment_detection_example(
            image, rows, example_seed, image_size, augment, *carried[:1]
        )
        return (*moved, *carried[1:])

    def fitted(image, rows, *carried):
        return (*letterbox_example(image, rows, image_size, *carried[:1]), *carried[1:])

    dataset = transform_examples(
        dataset,
        training=training,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        augment=augment and augmented,
        evaluate=fitted,
    )
    dataset = dataset.map(
        lambda image, rows, scale, *more: (image, _targets(rows, scale, max_boxes, *more)),
        num_parallel_calls=AUTOTUNE,
    )
    return batch_in_order(dataset, batch_size, drop_remainder)
