"""COCO instances JSON read within bounds and checked, with NumPy only (no TensorFlow).

:func:`read_coco_json` estimates the memory parsing takes before it reads
the file (`JSON_BYTES_PER_BYTE` times its size, plus
`JSON_BYTES_PER_CONTAINER` per object or array, against
``KERAS_FOURIER_MAX_MEMORY``), checks its nesting before parsing, then every
image, category and annotation (required keys and types, a box of 4 finite
numbers with width and height >= 0 overlapping its image, known image and
category ids, at most `MAX_ANNOTATIONS_PER_IMAGE` annotations per image).
A failure is one `ValueError` line naming the file and the problem.

Boxes are kept as mmdetection's ``CocoDataset`` keeps them: width or
height under 1 pixel, or ``area`` <= 0, dropped; clipped to the image;
crowd boxes kept with iscrowd 1. A category that is the supercategory of
other categories (the dataset itself as category 0, in Roboflow's exports)
is no class.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import os

import numpy as np

from keras_fourier.limits import (
    MAX_IMAGE_PIXELS,
    check_memory,
    format_bytes,
    loads_json,
    max_memory,
)

# Annotations one image may hold in a COCO JSON, far above what annotators draw on one image
# (the detection models keep 100 to 1,000 per image): past it the file is refused.
MAX_ANNOTATIONS_PER_IMAGE = 10_000
# Python objects json.loads makes, per byte of document and per object or array: measured
# 5.3 bytes per byte on a COCO-like instances file (polygons), 9 on an array of floats, 13 on
# short strings, and 64-72 bytes per empty object or array.
JSON_BYTES_PER_BYTE = 16
JSON_BYTES_PER_CONTAINER = 64
# Columns of a box row: x1, y1, x2, y2, class, iscrowd, area (original pixels).
BOX_COLUMNS = 7


@dataclasses.dataclass(frozen=True)
class CocoAnnotations:
    """A checked COCO JSON: its images, categories and boxes.

    Attributes:
        file: the JSON file.
        image_ids: the images' ids, sorted.
        file_names: each image's ``file_name``.
        sizes: each image's (height, width), int64 (N, 2).
        category_ids: the categories' ids, sorted (class i is the i-th).
        class_names: the categories' names, in class order.
        rows: each image's boxes, float32 (n, 7): x1, y1, x2, y2 (clipped
            to the image), class, iscrowd, area, degenerate boxes dropped.
        segments: each image's kept annotations in row order, as (where, the
            annotation's ``segmentation`` or None): ``where`` names it in
            messages ("annotations[4] (id 12)"). Read by instance segmentation
            (:mod:`keras_fourier.data.instances`), unchecked here.
    """

    file: str
    image_ids: tuple[int, ...]
    file_names: tuple[str, ...]
    sizes: np.ndarray
    category_ids: tuple[int, ...]
    class_names: tuple[str, ...]
    rows: tuple[np.ndarray, ...]
    segments: tuple[tuple[tuple[str, object], ...], ...]


def short_repr(value: object) -> str:
    """The repr of `value`, cut to 80 characters (for one-line messages about untrusted data)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class _Refusal:
    """Raises the one-line ValueError of a bad COCO JSON, naming the file."""

    def __init__(self, file: str):
        self.file = file

    def __call__(self, problem: str, received: str) -> ValueError:
        return ValueError(f"COCO JSON {self.file!r}: {problem}. Received: {received}")


def _records(document: dict, key: str, required: dict[str, object], refuse) -> list[dict]:
    """The list `document[key]`, each entry a dict with `required` keys of the given checks."""
    records = document.get(key)
    if not isinstance(records, list):
        raise refuse(f"{key!r} must be a list", f"{key}={short_repr(records)}")
    for position, record in enumerate(records):
        if not isinstance(record, dict):
            raise refuse(
                f"{key}[{position}] is not an object", f"{key}[{position}]={short_repr(record)}"
            )
        for name, check in required.items():
            if not check(record.get(name)):
                raise refuse(
                    f"{key}[{position}] has no valid {name!r}",
                    f"{name}={short_repr(record.get(name))}",
                )
    return records


def _read_json(file: str) -> dict:
    """The parsed JSON document of `file`, its memory estimated and bounded before parsing."""
    what = f"COCO JSON {file!r}"
    size = os.path.getsize(file)
    check_memory(f"Parsing {what} ({format_bytes(size)})", JSON_BYTES_PER_BYTE * size, f"{size=}")
    with open(file, "rb") as handle:
        data = handle.read(size + 1)
    containers = data.count(b"{") + data.count(b"[")
    needed = JSON_BYTES_PER_BYTE * len(data) + JSON_BYTES_PER_CONTAINER * containers
    check_memory(f"Parsing {what} ({containers:,} objects and arrays)", needed, f"{containers=}")
    document = loads_json(data, what, limit=max_memory())
    if not isinstance(document, dict):
        raise _Refusal(file)("not a JSON object", f"type={type(document).__name__}")
    return document


def _file_key(file: str) -> tuple[str, int, int]:
    stat = os.stat(file)
    return os.path.abspath(file), stat.st_mtime_ns, stat.st_size


def read_coco_json(file: str) -> CocoAnnotations:
    """Reads and checks a COCO instances JSON (see the module docstring for the bounds).

    Args:
        file: the JSON file.

    Returns:
        The checked `CocoAnnotations`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: one line naming the file and the problem.

    Example:
        >>> read_coco_json("annotations/instances_val2017.json").class_names[:2]  # doctest: +SKIP
        ('person', 'bicycle')
    """
    if not os.path.isfile(file):
        raise FileNotFoundError(f"COCO JSON {file!r} does not exist.")
    return _read_coco(_file_key(file))


def _is_group(category: dict, categories: list[dict]) -> bool:
    """Whether a category names the supercategory of others (Roboflow's category 0)."""
    return any(
        other is not category and other.get("supercategory") == category["name"]
        for other in categories
    )


@functools.lru_cache(maxsize=2)
def _read_coco(key: tuple[str, int, int]) -> CocoAnnotations:
    file = key[0]
    refuse = _Refusal(file)
    document = _read_json(file)
    for name in ("images", "annotations", "categories"):
        if name not in document:
            raise refuse(
                f"missing key {name!r} (not a COCO instances file)", f"keys={sorted(document)[:10]}"
            )
    categories = _records(
        document, "categories", {"id": _is_int, "name": lambda v: isinstance(v, str)}, refuse
    )
    images = _records(
        document,
        "images",
        {
            "id": _is_int,
            "file_name": lambda v: isinstance(v, str) and v != "",
            "width": lambda v: _is_int(v) and v > 0,
            "height": lambda v: _is_int(v) and v > 0,
        },
        refuse,
    )
    for position, image in enumerate(images):
        if image["width"] * image["height"] > MAX_IMAGE_PIXELS:
            raise refuse(
                f"images[{position}] declares {image['height']} x {image['width']} pixels "
                f"(height x width), more than the {MAX_IMAGE_PIXELS:,} an image may have",
                f"height={image['height']}, width={image['width']}",
            )
    annotations = _records(
        document,
        "annotations",
        {"image_id": _is_int, "category_id": _is_int, "bbox": lambda v: isinstance(v, list)},
        refuse,
    )
    if not categories:
        raise refuse("'categories' is empty", "categories=[]")
    category_names, groups = {}, {}
    for category in categories:
        if category["id"] in category_names or category["id"] in groups:
            raise refuse("two categories share an id", f"id={category['id']}")
        if _is_group(category, categories):
            groups[category["id"]] = category["name"]
        else:
            category_names[category["id"]] = category["name"]
    category_ids = tuple(sorted(category_names))
    class_of = {category: index for index, category in enumerate(category_ids)}
    image_index = {}
    for position, image in enumerate(images):
        if image["id"] in image_index:
            raise refuse("two images share an id", f"id={image['id']}")
        image_index[image["id"]] = position
    counts = collections.Counter()
    rows = collections.defaultdict(list)
    segments = collections.defaultdict(list)
    for position, annotation in enumerate(annotations):
        where = f"annotations[{position}] (id {short_repr(annotation.get('id'))})"
        image_id, category = annotation["image_id"], annotation["category_id"]
        if image_id not in image_index:
            raise refuse(f"{where} refers to no image", f"image_id={image_id}")
        if category in groups:
            raise refuse(
                f"{where} has category {category} ({groups[category]!r}), the supercategory of "
                "other categories, not a class",
                f"category_id={category}",
            )
        if category not in class_of:
            raise refuse(f"{where} has an unknown category id", f"category_id={category}")
        counts[image_id] += 1
        if counts[image_id] > MAX_ANNOTATIONS_PER_IMAGE:
            raise refuse(
                f"image {image_id} has more than {MAX_ANNOTATIONS_PER_IMAGE:,} annotations",
                f"image_id={image_id}",
            )
        box = annotation["bbox"]
        if len(box) != 4 or not all(_is_number(value) for value in box):
            raise refuse(
                f"{where} has a bbox that is not 4 finite numbers", f"bbox={short_repr(box)}"
            )
        x, y, w, h = (float(value) for value in box)
        if w < 0 or h < 0:
            raise refuse(f"{where} has a bbox of negative width or height", f"bbox={box}")
        crowd = annotation.get("iscrowd", 0)
        if crowd not in (0, 1) or isinstance(crowd, float):
            raise refuse(
                f"{where} has an iscrowd other than 0 or 1", f"iscrowd={short_repr(crowd)}"
            )
        area = annotation.get("area", w * h)
        if not _is_number(area):
            raise refuse(
                f"{where} has an area that is not a finite number", f"area={short_repr(area)}"
            )
        if w < 1 or h < 1 or area <= 0:  # degenerate: dropped, as mmdetection does
            continue
        image = images[image_index[image_id]]
        width, height = image["width"], image["height"]
        x1, y1, x2, y2 = max(x, 0.0), max(y, 0.0), min(x + w, width), min(y + h, height)
        if x2 <= x1 or y2 <= y1:
            raise refuse(
                f"{where} lies outside its {width}x{height} image {image_id}", f"bbox={box}"
            )
        rows[image_id].append([x1, y1, x2, y2, class_of[category], crowd, area])
        segments[image_id].append((where, annotation.get("segmentation")))
    image_ids = tuple(sorted(image_index))
    ordered = [images[image_index[image_id]] for image_id in image_ids]
    return CocoAnnotations(
        file=file,
        image_ids=image_ids,
        file_names=tuple(image["file_name"] for image in ordered),
        sizes=np.array([[image["height"], image["width"]] for image in ordered], np.int64).reshape(
            -1, 2
        ),
        category_ids=category_ids,
        class_names=tuple(category_names[category] for category in category_ids),
        rows=tuple(
            np.array(rows[image_id], np.float32).reshape(-1, BOX_COLUMNS) for image_id in image_ids
        ),
        segments=tuple(tuple(segments[image_id]) for image_id in image_ids),
    )
