"""Instance segmentation input pipelines: the detection pipelines with a mask per box.

`load_instance_dataset` returns the batches of
:func:`keras_fourier.data.detection.load_detection_dataset` (same sources,
splits, letterbox, augmentation and box rows), with targets
``{"boxes": (B, max_boxes, 8), "masks": (B, max_boxes, M, M)}``: each box
row's instance mask in ITS BOX's frame (box-local, M = `MASK_CROP` = 56:
mask pixel (i, j) covers the box's (i / M, j / M) to ((i + 1) / M,
(j + 1) / M)), float32 in [0, 1] (the area of the instance's pixels in it),
zeros for padding rows. Box-local masks move with their boxes: resizing
leaves them as they are, a flip mirrors them, a crop resamples them into
the clipped boxes (bilinear), and a row dropped drops its mask.

Sources:

* ``"digits"`` (the default): the detection task's digit canvases, each
  digit's mask its own pasted pixels inside its box;
* ``"coco:<path>"``: a COCO instances JSON (the layouts of
  :mod:`keras_fourier.data.detection`) whose annotations have a
  ``segmentation``: polygons (a list of ``[x1, y1, x2, y2, ...]`` lists
  in pixels, rasterised in the box's frame by pycocotools' mask API) or
  RLE (``{"size": [height, width], "counts": ...}``, compressed string or
  uncompressed list, decoded for the box's columns only).

* ``"tfds:coco/2017_panoptic"``: TFDS's COCO panoptic segmentation, its
  80 "thing" classes (the detection source's boxes), each instance's mask
  its segment's pixels in the example's panoptic PNG (a pixel's segment id
  R + 256 G + 256^2 B), resampled within its box's window by area. Panoptic
  segments never overlap, where COCO's instance annotations may: this is
  COCO's images and classes, not its instances protocol.

TFDS's ``coco/2017`` holds boxes only (its builder keeps no segmentation),
so it is refused in one line naming ``coco:<path>`` and
``tfds:coco/2017_panoptic``.

Every segmentation is checked before anything is decoded, and a bad one is
one `ValueError` line naming the file and the annotation: a polygon of
fewer than 3 points (or not of finite numbers), a point more than
`OUTSIDE_TOLERANCE` pixels outside the image, an RLE whose size is not the
image's or whose counts do not cover it, an annotation without a
segmentation. Memory is bounded: each instance is decoded on its own,
within its box (polygons straight into the M x M frame; RLE for the box's
columns), and an image whose masks would decode to more than
`MAX_MASK_PIXELS` pixels is refused.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_fourier.data.coco_json import CocoAnnotations, short_repr
from keras_fourier.data.detection import (
    COCO_HELD_OUT_SPLITS,
    TFDS_BOXES,
    TFDSBoxes,
    _coco_examples,
    _coco_split,
    _CocoExamples,
    _digit_boxes,
    _parse_source,
    is_detection_source,
    load_detection_dataset,
    tfds_box_rows,
    tfds_split,
)
from keras_fourier.data.segmentation import DIGIT_CANVAS
from keras_fourier.detection.targets import MASK_CROP

# Pixels a polygon's point may lie outside its image (COCO's polygons touch the border).
OUTSIDE_TOLERANCE = 1.0
# Pixels the masks of one image may decode to (RLE windows of height x box columns, M x M
# per polygon): past it the image is refused. COCO's images hold a few million at most.
MAX_MASK_PIXELS = 100_000_000
# COCO's compressed RLE: 6-bit groups, ASCII 48 + value.
_RLE_ALPHABET = range(48, 48 + 64)
# The splits of instance sources, in the order of their code in the targets' "image": split
# code * SPLIT_STRIDE + the example's position in its split. The held-out training slices
# (detection_splits of a source evaluated on its validation split) have theirs.
INSTANCE_SPLITS = ("train", "validation", "test", *COCO_HELD_OUT_SPLITS)
SPLIT_STRIDE = 1 << 24
# How many ground truths the readers keep, the last used: a COCO split's checked examples
# (while its JSON is unchanged), a TFDS split's scored images (TFDS's prepared data does not
# change under a version), so validation epochs do not read them again.
TRUTH_CACHE_SIZE = 4
_TRUTH_CACHE: dict[tuple, Any] = {}


def _kept_truth(key: tuple, read: Callable[[], Any]) -> Any:
    """`read()`, kept under `key` with the last `TRUTH_CACHE_SIZE` ground truths."""
    if key not in _TRUTH_CACHE:
        while len(_TRUTH_CACHE) >= TRUTH_CACHE_SIZE:
            del _TRUTH_CACHE[next(iter(_TRUTH_CACHE))]
        _TRUTH_CACHE[key] = read()
    return _TRUTH_CACHE[key]


def is_instance_source(source: str) -> bool:
    """Whether `source` names instance segmentation data (digits, COCO JSON, TFDS panoptic).

    Example:
        >>> is_instance_source("coco:/data/coco"), is_instance_source("tfds:voc/2007")
        (True, False)
    """
    if not is_detection_source(source):
        return False
    kind, value = _parse_source(source)
    return kind != "tfds" or TFDS_BOXES[value].panoptic_key is not None


# ----------------------------------------------------------------------------- box frames


def box_frame(
    region: np.ndarray, top: int, left: int, box: Sequence[float], size: int = MASK_CROP
) -> np.ndarray:
    """A mask's pixels resampled into a box's size x size frame, by area.

    Args:
        region: bool or float (h, w): the mask over pixels ``top .. top + h``
            and ``left .. left + w`` of its image (covering the box).
        top: the region's first row in the image.
        left: the region's first column.
        box: x1, y1, x2, y2 of the box in the image's pixels.
        size: the frame's side. Default 56.

    Returns:
        float32 (size, size): each frame pixel's covered fraction.

    Example:
        >>> box_frame(np.ones((2, 4), bool), 0, 0, (0, 0, 4, 2), size=2).tolist()
        [[1.0, 1.0], [1.0, 1.0]]
    """
    x1, y1, x2, y2 = (float(value) for value in box)
    rows = _area_weights(y1, y2, top, region.shape[0], size)
    columns = _area_weights(x1, x2, left, region.shape[1], size)
    return (rows @ region.astype(np.float32) @ columns.T).astype(np.float32)


def _area_weights(low: float, high: float, start: int, count: int, size: int) -> np.ndarray:
    """(size, count): the share of each of `size` equal spans of [low, high) in each pixel."""
    step = max(high - low, 1e-6) / size
    edges = low + step * np.arange(size + 1)
    pixels = start + np.arange(count + 1, dtype=np.float64)
    overlap = np.minimum(edges[1:, None], pixels[None, 1:]) - np.maximum(
        edges[:-1, None], pixels[None, :-1]
    )
    return (np.maximum(overlap, 0.0) / step).astype(np.float32)


def _window(box: Sequence[float], height: int, width: int) -> tuple[int, int, int, int]:
    """The whole pixels (top, left, bottom, right) a box covers, within the image."""
    x1, y1, x2, y2 = box
    top, left = max(math.floor(y1), 0), max(math.floor(x1), 0)
    bottom, right = min(math.ceil(y2), height), min(math.ceil(x2), width)
    return top, left, max(bottom, top + 1), max(right, left + 1)


# ----------------------------------------------------------------------------- COCO segmentations


def _mask_api():
    try:
        from pycocotools import mask
    except ImportError as error:  # pragma: no cover - the detection extra installs it
        raise ImportError(
            "COCO masks need pycocotools: pip install 'keras-fourier[detection]'"
        ) from error
    return mask


def _check_run(value: int, count: int, pixels: int) -> None:
    """Refuses run number `count` of an RLE, `value` pixels long, that `pixels` cannot hold."""
    if not 0 <= value <= pixels:
        raise ValueError(f"a run of {value:,} pixels (its image has {pixels:,})")
    if count > pixels + 1:
        raise ValueError(f"more runs than its image's {pixels:,} pixels")


def rle_counts(counts: str | bytes, pixels: int | None = None) -> np.ndarray:
    """The run lengths of a compressed COCO RLE string (pycocotools' ``rleFrString``).

    Args:
        counts: the compressed counts.
        pixels: the image's pixel count, or None (default): with it, a run
            outside 0..pixels or more runs than ``pixels + 1`` is refused as
            soon as it is read, so a hostile string costs no more than a
            valid one.

    Returns:
        int64 (n,) run lengths, background first.

    Raises:
        ValueError: a character outside COCO's alphabet, a run that does not
            end in the string or exceeds 64 bits, or (with `pixels`) a run
            or run count the image cannot hold.

    Example:
        >>> rle_counts("52203").tolist()
        [5, 2, 2, 2, 5]
    """
    data = counts.encode("ascii", "replace") if isinstance(counts, str) else bytes(counts)
    if any(byte not in _RLE_ALPHABET for byte in data):
        raise ValueError("a character outside COCO's RLE alphabet")
    values: list[int] = []
    position = 0
    while position < len(data):
        value, shift, more = 0, 0, True
        while more:
            if position >= len(data):
                raise ValueError("a run that does not end")
            if shift > 60:
                raise ValueError("a run longer than 64 bits")
            group = data[position] - 48
            value |= (group & 0x1F) << shift
            more = bool(group & 0x20)
            position += 1
            shift += 5
            if not more and group & 0x10:
                value |= -1 << shift
        if len(values) > 2:
            value += values[-2]
        values.append(value)
        if pixels is not None:
            _check_run(value, len(values), pixels)
    return np.array(values, np.int64)


def _rle_columns(counts: np.ndarray, height: int, left: int, right: int) -> np.ndarray:
    """Columns left..right of a column-major RLE, decoded alone: bool (height, right - left)."""
    ends = np.cumsum(counts)
    starts = ends - counts
    low, high = left * height, right * height
    foreground = (np.arange(len(counts)) % 2 == 1) & (ends > low) & (starts < high)
    edges = np.zeros(high - low + 1, np.int8)
    np.add.at(edges, np.clip(starts[foreground], low, high) - low, 1)
    np.add.at(edges, np.clip(ends[foreground], low, high) - low, -1)
    inside = np.cumsum(edges[:-1], dtype=np.int8) > 0
    return inside.reshape(right - left, height).T


class _Refusal:
    def __init__(self, file: str):
        self.file = file

    def __call__(self, where: str, problem: str, received: str) -> ValueError:
        return ValueError(f"COCO JSON {self.file!r}: {where} {problem}. Received: {received}")


def _polygons(segmentation: list, where: str, size: tuple[int, int], refuse) -> list[np.ndarray]:
    """The checked polygons of an annotation, each a float64 (k, 2) array of points."""
    height, width = size
    polygons = []
    for polygon in segmentation:
        if not isinstance(polygon, list) or not all(
            isinstance(value, (int, float)) and not isinstance(value, bool) for value in polygon
        ):
            raise refuse(where, "has a polygon that is not a list of numbers", short_repr(polygon))
        points = np.asarray(polygon, np.float64)
        problem = (
            "an odd count of numbers (x, y pairs)"
            if len(points) % 2
            else "fewer than 3 points"
            if len(points) < 6
            else "a number that is not finite"
            if not np.isfinite(points).all()
            else None
        )
        if problem:
            raise refuse(where, f"has a polygon of {problem}", f"polygon={short_repr(polygon)}")
        points = points.reshape(-1, 2)
        outside = (
            (points < -OUTSIDE_TOLERANCE) | (points > np.array([width, height]) + OUTSIDE_TOLERANCE)
        ).any(1)
        if outside.any():
            x, y = points[outside][0]
            raise refuse(
                where, f"has a polygon reaching outside its {width}x{height} image", f"({x}, {y})"
            )
        polygons.append(points)
    return polygons


def _rle(segmentation: dict, where: str, size: tuple[int, int], refuse) -> np.ndarray:
    """The checked run lengths of an RLE annotation (covering its image exactly)."""
    height, width = size
    shape = segmentation.get("size")
    if shape != [height, width]:
        raise refuse(
            where,
            f"has an RLE of size {short_repr(shape)}, not its image's [{height}, {width}] "
            "(height, width)",
            f"size={short_repr(shape)}",
        )
    counts = segmentation.get("counts")
    pixels = height * width
    if isinstance(counts, (str, bytes)):
        try:
            runs = rle_counts(counts, pixels)
        except ValueError as error:
            raise refuse(where, f"has RLE counts with {error}", short_repr(counts)) from None
    elif isinstance(counts, list) and all(
        isinstance(value, int) and not isinstance(value, bool) for value in counts
    ):
        try:
            for count, value in enumerate(counts, 1):
                _check_run(value, count, pixels)
        except ValueError as error:
            raise refuse(where, f"has RLE counts with {error}", short_repr(counts)) from None
        runs = np.asarray(counts, np.int64)
    else:
        raise refuse(
            where, "has RLE counts that are neither a string nor a list of ints", short_repr(counts)
        )
    if int(runs.sum()) != pixels:
        raise refuse(
            where,
            f"has RLE counts covering {int(runs.sum()):,} pixels, not its {height}x{width} image",
            f"counts={short_repr(counts)}",
        )
    return runs


class CocoMasks:
    """The checked segmentations of a split of a COCO JSON, decoded per image on demand.

    Args:
        annotations: the split's JSON (read by `read_coco_json`).
        positions: the image index (in `annotations`) of each example position.

    Call arguments:
        position: an example position.

    Returns:
        float32 (n, M, M): the box-local masks of the image's n box rows.
    """

    def __init__(self, annotations: CocoAnnotations, positions: Sequence[int]):
        refuse = _Refusal(annotations.file)
        self.instances: list[list[tuple]] = []
        for index in positions:
            size = tuple(int(value) for value in annotations.sizes[index])
            rows, segments = annotations.rows[index], annotations.segments[index]
            instances, pixels = [], 0
            for row, (where, segmentation) in zip(rows, segments, strict=True):
                box = tuple(float(value) for value in row[:4])
                if isinstance(segmentation, list) and segmentation:
                    instances.append(
                        ("polygons", box, _polygons(segmentation, where, size, refuse))
                    )
                    pixels += MASK_CROP * MASK_CROP
                elif isinstance(segmentation, dict):
                    runs = _rle(segmentation, where, size, refuse)
                    _, left, _, right = _window(box, *size)
                    instances.append(("rle", box, runs, size))
                    pixels += size[0] * (right - left)
                else:
                    raise refuse(
                        where,
                        "has no segmentation (polygons or RLE), which instance segmentation needs",
                        f"segmentation={short_repr(segmentation)}",
                    )
            if pixels > MAX_MASK_PIXELS:
                raise refuse(
                    f"image {annotations.image_ids[index]}",
                    f"has masks that decode to {pixels:,} pixels, more than {MAX_MASK_PIXELS:,}",
                    f"pixels={pixels}",
                )
            self.instances.append(instances)

    def __call__(self, position) -> np.ndarray:
        masks = [_decode(*instance) for instance in self.instances[int(position)]]
        return np.stack(masks) if masks else np.zeros((0, MASK_CROP, MASK_CROP), np.float32)


def _decode(kind: str, box: tuple[float, ...], *data) -> np.ndarray:
    """One instance's box-local mask (see `CocoMasks`)."""
    if kind == "rle":
        runs, (height, width) = data
        top, left, bottom, right = _window(box, height, width)
        region = _rle_columns(runs, height, left, right)[top:bottom]
        return box_frame(region, top, left, box)
    mask = _mask_api()
    x1, y1, x2, y2 = box
    scale = np.array([MASK_CROP / max(x2 - x1, 1e-6), MASK_CROP / max(y2 - y1, 1e-6)])
    local = [((points - [x1, y1]) * scale).ravel().tolist() for points in data[0]]
    rles = mask.frPyObjects(local, MASK_CROP, MASK_CROP)
    return mask.decode(mask.merge(rles)).astype(np.float32)


# ----------------------------------------------------------------------------- digit canvases


class DigitMasks:
    """The box-local masks of the digit canvases of a split (each digit's own pixels).

    Call arguments:
        position: a canvas index.

    Returns:
        float32 (n, M, M) for the canvas's n digits, in box row order.
    """

    def __init__(self, split: str):
        _, rows, self.pixels = _digit_boxes(split)
        self.boxes = [boxes[:, :4] for boxes in rows]

    def __call__(self, position) -> np.ndarray:
        index = int(position)
        masks = [
            box_frame(pixels, int(box[1]), int(box[0]), box)
            for box, pixels in zip(self.boxes[index], self.pixels[index], strict=True)
        ]
        return np.stack(masks) if masks else np.zeros((0, MASK_CROP, MASK_CROP), np.float32)


# ----------------------------------------------------------------------------- pipeline


def panoptic_box_masks(panoptic: np.ndarray, segments: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """The box-local masks of panoptic segments: each one's pixels within its box's window.

    Args:
        panoptic: uint8 (H, W, 3) a panoptic PNG's pixels (segment id
            R + 256 G + 256^2 B).
        segments: (n,) the segment id of each box.
        boxes: (n, 4) x1, y1, x2, y2 of the boxes in the image's pixels.

    Returns:
        float32 (n, M, M): each segment's pixels resampled into its box's
        frame by area (`box_frame`).
    """
    height, width = panoptic.shape[:2]
    masks = []
    for segment, box in zip(segments, boxes, strict=True):
        top, left, bottom, right = _window(box, height, width)
        ids = panoptic_ids(panoptic[top:bottom, left:right])
        masks.append(box_frame(ids == segment, top, left, box))
    return np.stack(masks) if masks else np.zeros((0, MASK_CROP, MASK_CROP), np.float32)


def panoptic_ids(pixels: np.ndarray) -> np.ndarray:
    """The segment ids of a panoptic PNG's uint8 (..., 3) pixels: R + 256 G + 256^2 B, int64.

    Example:
        >>> panoptic_ids(np.array([[1, 2, 3]], np.uint8)).tolist()
        [197121]
    """
    pixels = pixels.astype(np.int64)
    return pixels[..., 0] + 256 * pixels[..., 1] + 65536 * pixels[..., 2]


def _decode_panoptic(found: dict[str, tf.Tensor], rows: tf.Tensor) -> tf.Tensor:
    """The box-local masks of a TFDS panoptic example's rows (its PNG decoded here)."""
    panoptic = tf.io.decode_png(found["panoptic"], channels=3)
    return tf.numpy_function(
        panoptic_box_masks, [panoptic, found["segments"], rows[:, :4]], tf.float32, stateful=False
    )


def instance_masks(
    source: str, split: str
) -> Callable[[dict[str, tf.Tensor], tf.Tensor], tf.Tensor]:
    """The mask hook of `load_detection_dataset` for a split of an instance source.

    Returns:
        (found, rows) -> float32 (n, M, M) the box-local masks of an
        example's rows: by its position (digits, COCO JSON), or from its
        panoptic PNG (TFDS panoptic).

    Raises:
        ValueError: a TFDS source without masks, or a bad segmentation (one line).
    """
    kind, value = _parse_source(source)
    if kind == "tfds":
        if not is_instance_source(source):
            raise ValueError(
                f"Instance segmentation source {source!r}: TFDS's {value} holds boxes only (its "
                "builder keeps no segmentation); use COCO's annotations as 'coco:<path>' "
                "(annotations/instances_<split>.json and the image folders) or COCO's panoptic "
                f"segments as 'tfds:coco/2017_panoptic'. Received: {source!r}"
            )
        decode = _decode_panoptic
    else:
        if kind == DIGIT_CANVAS:
            by_position = DigitMasks(split)
        else:
            examples = _coco_examples(value, split)
            by_position = CocoMasks(examples.annotations, examples.positions)

        def decode(found: dict[str, tf.Tensor], rows: tf.Tensor) -> tf.Tensor:
            del rows
            return tf.numpy_function(by_position, [found["position"]], tf.float32, stateful=False)

    return lambda found, rows: tf.ensure_shape(decode(found, rows), (None, MASK_CROP, MASK_CROP))


def load_instance_dataset(
    source: str = DIGIT_CANVAS, split: str = "train", **options: Any
) -> tf.data.Dataset:
    """Build a batched instance segmentation pipeline (see the module docstring).

    Args:
        source: "digits", "coco:<path>" or "tfds:coco/2017_panoptic".
            Default "digits".
        split: "train", "validation", "test", or the held-out training
            slices "train[:90%]" and "train[90%:]". Default "train".
        **options: the keyword arguments of
            :func:`keras_fourier.data.detection.load_detection_dataset`
            (image_size, batch_size, training, augment, max_boxes, seed, ...).

    Returns:
        A `tf.data.Dataset` of (images (B, S, S, 3) float32, {"boxes":
        (B, max_boxes, 8) float32, "masks": (B, max_boxes, 56, 56) float32,
        "image": (B,) int32 each image's split code times `SPLIT_STRIDE`
        plus its position in the split (:func:`coco_truth`)}) batches.

    Raises:
        ValueError: a bad argument or source, a bad COCO JSON or segmentation,
            an image missing from its folder, or an empty split: one line.

    Example:
        >>> data = load_instance_dataset("digits", "test", batch_size=4)
        >>> images, targets = next(iter(data))
        >>> targets["boxes"].shape, targets["masks"].shape
        (TensorShape([4, 100, 8]), TensorShape([4, 100, 56, 56]))
    """
    if split not in INSTANCE_SPLITS:
        raise ValueError(
            f"Instance segmentation splits are {', '.join(INSTANCE_SPLITS)}. Received: "
            f"split={split!r}"
        )
    masks = instance_masks(source, split)
    code = INSTANCE_SPLITS.index(split) * SPLIT_STRIDE
    return load_detection_dataset(source, split, masks=masks, **options).map(
        lambda images, targets: (images, {**targets, "image": targets["image"] + code})
    )


def _scored_splits(source: str, images: Sequence[int]) -> list[tuple[str, int]]:
    """The (split, position) of each targets' "image" value, refusing one of no split."""
    found = []
    for image in images:
        code, position = divmod(int(image), SPLIT_STRIDE)
        if not 0 <= code < len(INSTANCE_SPLITS):
            raise ValueError(
                f"Image {int(image)} of source {source!r} names no split (codes 0-"
                f"{len(INSTANCE_SPLITS) - 1} times {SPLIT_STRIDE}). Received: image={image!r}"
            )
        found.append((INSTANCE_SPLITS[code], position))
    return found


def _past_end(source: str, split: str, count: int | str, position: int) -> ValueError:
    return ValueError(
        f"Split {split!r} of {source!r} has {count} images. Received: position={position}"
    )


def _checked_examples(path: str, split: str) -> _CocoExamples:
    """`_coco_examples` of a split, kept while its JSON file is unchanged (size, mtime)."""
    stat = os.stat(_coco_split(path, split).annotation_file)
    key = ("coco", path, split, stat.st_size, stat.st_mtime_ns)
    return _kept_truth(key, functools.partial(_coco_examples, path, split))


def coco_truth(
    source: str, images: Sequence[int], data_dir: str | None = None
) -> list[dict[str, Any]]:
    """The original ground truth of scored images of a ``coco:`` source, for COCO's evaluation.

    A split's JSON is read and checked (its image files too) once while it
    is unchanged: the last `TRUTH_CACHE_SIZE` splits are kept, by the JSON
    file's size and modification time.

    Args:
        source: the ``"coco:<path>"`` source the images came from.
        images: each scored image's targets ``"image"`` value (its split's
            code times `SPLIT_STRIDE` plus its position in the split).
        data_dir: unused (a ``coco:`` source names its folder); the
            signature of ground-truth readers. Default None.

    Returns:
        Per image, {"height", "width": the image's size in the JSON,
        "rows": float64 (n, 7) its annotations' x1, y1, x2, y2 (clipped to
        the image), class, iscrowd, area in original pixels, "segmentations":
        their segmentations as COCO reads them (polygon lists, or RLE with
        uncompressed counts)}: the JSON's annotations as the pipeline keeps
        them (degenerate boxes dropped), every one checked as the pipeline
        checks it (one `ValueError` line naming the file and annotation).

    Raises:
        ValueError: not a ``coco:`` source, an image value of no split or
            past its split's end, or a bad segmentation.
    """
    del data_dir
    kind, value = _parse_source(source)
    if kind != "coco":
        raise ValueError(
            f"COCO ground truth comes from a 'coco:<path>' source. Received: source={source!r}"
        )
    truth = []
    for split, position in _scored_splits(source, images):
        examples = _checked_examples(value, split)
        if position >= len(examples.positions):
            raise _past_end(source, split, len(examples.positions), position)
        truth.append(_image_truth(examples.annotations, examples.positions[position]))
    return truth


def tfds_truth(
    source: str, images: Sequence[int], data_dir: str | None = None
) -> list[dict[str, Any]]:
    """The original ground truth of scored images of a TFDS panoptic source (COCO's evaluation).

    One ordered pass over each split the images come from (the order the
    evaluation pipeline reads it), decoding only the scored images'
    panoptic PNGs; the last `TRUTH_CACHE_SIZE` reads are kept (by source,
    split, data directory and scored images), so evaluating the same images
    again (each validation epoch) reads nothing.

    Args:
        source: ``"tfds:coco/2017_panoptic"``.
        images: each scored image's targets ``"image"`` value (its split's
            code times `SPLIT_STRIDE` plus its index in the split).
        data_dir: the TFDS data directory. Default None.

    Returns:
        Per image, {"height", "width": its size, "rows": float64 (n, 7) its
        "thing" segments' rows as the pipeline keeps them (x1, y1, x2, y2,
        class, iscrowd, area), "segmentations": each one's pixels at the
        image's size as COCO RLE (compressed counts)}.

    Raises:
        ValueError: not a TFDS panoptic source, or an image value of no
            split or past its split's end.
    """
    kind, value = _parse_source(source)
    if kind != "tfds" or not is_instance_source(source):
        raise ValueError(
            "TFDS ground truth comes from a TFDS panoptic source ('tfds:coco/2017_panoptic'). "
            f"Received: source={source!r}"
        )
    scored = _scored_splits(source, images)
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for split in dict.fromkeys(split for split, _ in scored):
        wanted = sorted({position for name, position in scored if name == split})
        read, count = _kept_truth(
            ("tfds", value, split, data_dir, tuple(wanted)),
            functools.partial(_panoptic_split_truth, value, split, wanted, data_dir),
        )
        missing = [position for position in wanted if position not in read]
        if missing:
            raise _past_end(source, split, count if count >= 0 else "fewer", missing[0])
        found.update({(split, position): read[position] for position in wanted})
    return [found[key] for key in scored]


def _panoptic_split_truth(
    name: str, split: str, wanted: list[int], data_dir: str | None
) -> tuple[dict[int, Any], int]:
    """({position: `_panoptic_truth`} of the wanted positions of a split, its size or -1)."""
    dataset, convention = tfds_split(name, split, data_dir, training=False, decode_image=False)
    count = max(int(dataset.cardinality()), -1)
    found = {}
    chosen = tf.constant(wanted, tf.int64)
    dataset = dataset.take(wanted[-1] + 1).enumerate()
    dataset = dataset.filter(lambda index, _: tf.reduce_any(tf.equal(index, chosen)))
    for index, example in dataset:
        found[int(index)] = _panoptic_truth(example, convention)
    return found, count


def _panoptic_truth(example: dict[str, tf.Tensor], convention: TFDSBoxes) -> dict[str, Any]:
    """One image's entry of `tfds_truth`."""
    panoptic = tf.io.decode_png(example[convention.panoptic_key], channels=3).numpy()
    height, width = panoptic.shape[:2]
    objects = example[convention.objects_key]
    rows, kept = tfds_box_rows(objects, height, width, convention)
    ids = panoptic_ids(panoptic)
    mask = _mask_api()
    segmentations = []
    for segment in objects["id"].numpy()[kept.numpy()]:
        rle = mask.encode(np.asfortranarray((ids == segment).astype(np.uint8)))
        segmentations.append({"size": [height, width], "counts": rle["counts"].decode("ascii")})
    rows = rows.numpy().astype(np.float64)
    return {"height": height, "width": width, "rows": rows, "segmentations": segmentations}


def _image_truth(annotations: CocoAnnotations, index: int) -> dict[str, Any]:
    """One image's entry of `coco_truth`."""
    refuse = _Refusal(annotations.file)
    height, width = (int(value) for value in annotations.sizes[index])
    segmentations = []
    for where, segmentation in annotations.segments[index]:
        if isinstance(segmentation, list) and segmentation:
            polygons = _polygons(segmentation, where, (height, width), refuse)
            segmentations.append([points.ravel().tolist() for points in polygons])
        elif isinstance(segmentation, dict):
            runs = _rle(segmentation, where, (height, width), refuse)
            segmentations.append({"size": [height, width], "counts": runs.tolist()})
        else:
            raise refuse(
                where,
                "has no segmentation (polygons or RLE), which instance segmentation needs",
                f"segmentation={short_repr(segmentation)}",
            )
    rows = np.asarray(annotations.rows[index], np.float64).reshape(-1, 7)
    return {"height": height, "width": width, "rows": rows, "segmentations": segmentations}
