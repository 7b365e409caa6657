"""COCO box evaluation with the reference tool (pycocotools' COCOeval), over a whole split.

:func:`coco_evaluate` takes the ground truth as the detection pipeline's
targets (:data:`keras_fourier.detection.targets.TARGET_COLUMNS`) and the
detections as (K, 6) rows ``[x1, y1, x2, y2, score, class]`` in the same
model-input frame, maps both back to original pixels (dividing by each
image's letterbox scale), builds COCO's ground truth and results in memory
and runs ``COCOeval(iouType="bbox")`` with its defaults (IoU 0.50:0.05:0.95,
at most 100 detections per image, COCO's area ranges on the ground truth's
``area``). Its printing is captured, not shown.

pycocotools is the optional ``detection`` extra (``pip install
keras-fourier[detection]``); it is imported when an evaluation runs.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence

import numpy as np

# Metric -> index into COCOeval.stats (its summarize() order).
COCO_STATS = {
    "map": 0,
    "map50": 1,
    "map75": 2,
    "map_small": 3,
    "map_medium": 4,
    "map_large": 5,
    "ar100": 8,
}
# Target columns read here (keras_fourier.detection.targets.TARGET_COLUMNS).
_CLASS, _CROWD, _AREA, _SCALE = 4, 5, 6, 7


def _coco_module():
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError as error:
        raise ImportError(
            "COCO evaluation needs pycocotools: pip install 'keras-fourier[detection]' "
            "(or pip install pycocotools)"
        ) from error
    return COCO, COCOeval


def _rows(array: object, columns: int, what: str) -> np.ndarray:
    rows = np.asarray(array, np.float64)
    if rows.size == 0:
        return rows.reshape(0, columns)
    if rows.ndim != 2 or rows.shape[1] != columns or not np.isfinite(rows).all():
        raise ValueError(
            f"{what} must be a finite (N, {columns}) array. Received: shape={rows.shape}"
        )
    return rows


def _image_scale(ground_truth: np.ndarray, index: int, has_detections: bool) -> float:
    if len(ground_truth):
        scale = float(ground_truth[0, _SCALE])
        if scale <= 0:
            raise ValueError(
                f"ground_truth[{index}] has a scale column of {scale}, not a letterbox scale "
                f"(> 0). Received: scale={scale}"
            )
        return scale
    if has_detections:
        raise ValueError(
            f"ground_truth[{index}] has no rows, so its letterbox scale is unknown, but the "
            f"image has detections. Received: ground_truth[{index}].shape=(0, 8)"
        )
    return 1.0


def coco_results(
    detections: Sequence[np.ndarray],
    image_ids: Sequence[int],
    category_ids: Sequence[int],
    scales: Sequence[float] | None = None,
) -> list[dict]:
    """COCO results entries (the results JSON of COCO's evaluation server) of detections.

    Args:
        detections: per image, a (K, 6) array ``[x1, y1, x2, y2, score,
            class]`` in the model-input frame.
        image_ids: each image's COCO image id.
        category_ids: the original category id of each class index
            (:func:`keras_fourier.data.detection.detection_category_ids`).
        scales: each image's letterbox scale (model-input pixels per
            original pixel); the boxes are divided by it. Default None:
            the boxes are in original pixels already.

    Returns:
        One ``{"image_id", "category_id", "bbox": [x, y, width, height],
        "score"}`` dict per detection, in original pixels.

    Raises:
        ValueError: lists of different lengths, a malformed array, or a
            class outside `category_ids`.

    Example:
        >>> coco_results([np.array([[10, 20, 30, 60, 0.9, 1]])], [42], [1, 3], [2.0])
        [{'image_id': 42, 'category_id': 3, 'bbox': [5.0, 10.0, 10.0, 20.0], 'score': 0.9}]
    """
    scales = [1.0] * len(detections) if scales is None else list(scales)
    if not len(detections) == len(image_ids) == len(scales):
        raise ValueError(
            "detections, image_ids and scales must have one entry per image. Received: "
            f"{len(detections)} detections, {len(image_ids)} image_ids, {len(scales)} scales"
        )
    results = []
    for index, (array, image_id, scale) in enumerate(
        zip(detections, image_ids, scales, strict=True)
    ):
        rows = _rows(array, 6, f"detections[{index}]")
        classes = rows[:, 5].astype(np.int64)
        if len(rows) and (classes.min() < 0 or classes.max() >= len(category_ids)):
            raise ValueError(
                f"detections[{index}] has a class outside the {len(category_ids)} classes. "
                f"Received: class={int(classes.max() if classes.max() >= 0 else classes.min())}"
            )
        boxes = rows[:, :4] / scale
        for box, score, klass in zip(boxes, rows[:, 4], classes, strict=True):
            results.append(
                {
                    "image_id": int(image_id),
                    "category_id": int(category_ids[klass]),
                    "bbox": [
                        float(box[0]),
                        float(box[1]),
                        float(box[2] - box[0]),
                        float(box[3] - box[1]),
                    ],
                    "score": float(score),
                }
            )
    return results


def _index(coco_class, dataset: dict):
    coco = coco_class()
    coco.dataset = dataset
    coco.createIndex()
    return coco


def paste_mask(mask: np.ndarray, box: Sequence[float], height: int, width: int) -> np.ndarray:
    """A box-frame mask pasted into its image and binarised, as mmdetection's ``_do_paste_mask``.

    Each image pixel (centre ``x + 0.5``) inside the box reads the mask
    bilinearly at ``(x + 0.5 - x1) / (x2 - x1) * M - 0.5`` (and so for y),
    zero beyond its edge cells, then ``>= 0.5``; only the box's pixels are
    computed (:func:`keras_fourier.detection.paste_masks` is the same in
    ``keras.ops`` for whole batches).

    Args:
        mask: (M, M) probabilities in the box's frame.
        box: x1, y1, x2, y2 in the image's pixels.
        height: the image's height.
        width: the image's width.

    Returns:
        bool (height, width).

    Example:
        >>> int(paste_mask(np.ones((28, 28)), (2, 2, 6, 4), 6, 8).sum())
        8
    """
    pasted = np.zeros((height, width), bool)
    x1, y1, x2, y2 = (float(value) for value in box)
    top, left = max(int(np.floor(y1)), 0), max(int(np.floor(x1)), 0)
    bottom, right = min(int(np.ceil(y2)), height), min(int(np.ceil(x2)), width)
    if bottom <= top or right <= left or x2 <= x1 or y2 <= y1:
        return pasted
    size = mask.shape[-1]
    cells = np.arange(size)

    def weights(low: float, high: float, start: int, stop: int) -> np.ndarray:
        where = (np.arange(start, stop) + 0.5 - low) / (high - low) * size - 0.5
        return np.maximum(1.0 - np.abs(where[:, None] - cells[None]), 0.0)

    rows, columns = weights(y1, y2, top, bottom), weights(x1, x2, left, right)
    pasted[top:bottom, left:right] = rows @ np.asarray(mask, np.float64) @ columns.T >= 0.5
    return pasted


def _scales(ground_truth: Sequence[np.ndarray], detections: Sequence[np.ndarray]) -> list:
    """Each image's letterbox scale (output pixels per original pixel), from its target rows."""
    return [
        _image_scale(_rows(array, 8, f"ground_truth[{index}]"), index, len(detections[index]) > 0)
        for index, array in enumerate(ground_truth)
    ]


def _ground_truth(ground_truth: Sequence[np.ndarray], detections: Sequence[np.ndarray]):
    """COCO's images and annotations (bbox in original pixels) and each image's scale."""
    images, annotations, scales = [], [], _scales(ground_truth, detections)
    for index, array in enumerate(ground_truth):
        rows = _rows(array, 8, f"ground_truth[{index}]")
        images.append({"id": index})
        for row in rows[rows[:, _CLASS] >= 0]:
            x1, y1, x2, y2 = row[:4] / scales[index]
            annotations.append(
                {
                    "id": len(annotations) + 1,  # COCOeval matches on ids > 0
                    "image_id": index,
                    "category_id": int(row[_CLASS]) + 1,
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "area": float(row[_AREA]),
                    "iscrowd": int(row[_CROWD]),
                }
            )
    if not annotations:
        raise ValueError(
            f"The ground truth of these {len(images)} images holds no box: COCO AP is "
            "undefined. Received: boxes=0"
        )
    return images, annotations, scales


def _run_coco_eval(
    images: list[dict],
    annotations: list[dict],
    results: list[dict],
    class_names: Sequence[str],
    iou_type: str,
) -> dict[str, float]:
    """COCOeval's summary and per-class AP of in-memory ground truth and results."""
    coco_class, coco_eval_class = _coco_module()
    categories = [{"id": index + 1, "name": name} for index, name in enumerate(class_names)]
    with contextlib.redirect_stdout(io.StringIO()):
        truth = _index(
            coco_class,
            {"images": images, "annotations": annotations, "categories": categories},
        )
        found = _index(
            coco_class, {"images": images, "annotations": results, "categories": categories}
        )
        evaluation = coco_eval_class(truth, found, iouType=iou_type)
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    metrics = {name: float(evaluation.stats[index]) for name, index in COCO_STATS.items()}
    # precision: (IoU thresholds, recall points, classes, area ranges, max detections); area
    # "all" and 100 detections, as stats[0].
    precision = evaluation.eval["precision"][:, :, :, 0, -1]
    for index, name in enumerate(class_names):
        values = precision[:, :, index]
        values = values[values > -1]
        metrics[f"ap/{name}"] = float(values.mean()) if values.size else -1.0
    return {name: (float("nan") if value < 0 else value) for name, value in metrics.items()}


def _box_results(detections: Sequence[np.ndarray], class_names: Sequence[str], scales):
    results = coco_results(
        detections, range(len(detections)), range(1, len(class_names) + 1), scales
    )
    for number, result in enumerate(results, 1):  # as COCO.loadRes completes them
        width, height = result["bbox"][2:]
        result.update(id=number, area=width * height, iscrowd=0)
    return results


def coco_evaluate(
    ground_truth: Sequence[np.ndarray],
    detections: Sequence[np.ndarray],
    class_names: Sequence[str],
) -> dict[str, float]:
    """COCO box AP of a whole split, computed by pycocotools' COCOeval.

    Args:
        ground_truth: per image, its (N, 8) target rows (the detection
            pipeline's layout, :data:`keras_fourier.detection.targets.TARGET_COLUMNS`);
            rows of class -1 (padding) are ignored, crowd rows count as
            COCO crowd regions, the area column picks the size range.
        detections: per image, a (K, 6) array ``[x1, y1, x2, y2, score,
            class]`` in the model-input frame (as the ground truth's boxes).
        class_names: the class names, in class index order.

    Returns:
        ``map`` (AP at IoU 0.50:0.95), ``map50``, ``map75``, ``map_small``,
        ``map_medium``, ``map_large``, ``ar100`` (recall at 100 detections
        per image) and ``ap/<class name>`` (each class's AP at 0.50:0.95),
        every value in [0, 1]. Where COCO reports -1 (no ground-truth box of
        that size range or class) the value is NaN: the keys are the same
        for every split.

    Raises:
        ValueError: lists of different lengths, a malformed array, or a
            ground truth without any box (AP is undefined).

    Example:
        >>> truth = [np.array([[0, 0, 10, 10, 0, 0, 100, 1]])]
        >>> found = [np.array([[0, 0, 10, 10, 0.9, 0]])]
        >>> round(coco_evaluate(truth, found, ["a"])["map"], 6)
        1.0
    """
    if len(ground_truth) != len(detections):
        raise ValueError(
            "ground_truth and detections must have one entry per image. Received: "
            f"{len(ground_truth)} ground_truth, {len(detections)} detections"
        )
    images, annotations, scales = _ground_truth(ground_truth, detections)
    results = _box_results(detections, class_names, scales)
    return _run_coco_eval(images, annotations, results, class_names, "bbox")


def _encoded(masks: np.ndarray) -> dict:
    """The COCO RLE (counts as str) of a bool (H, W) mask."""
    mask_api = _mask_module()
    rle = mask_api.encode(np.asfortranarray(masks.astype(np.uint8)))
    return {"size": [int(value) for value in rle["size"]], "counts": rle["counts"].decode("ascii")}


def _mask_module():
    try:
        from pycocotools import mask
    except ImportError as error:
        raise ImportError(
            "COCO mask evaluation needs pycocotools: pip install 'keras-fourier[detection]' "
            "(or pip install pycocotools)"
        ) from error
    return mask


def mask_results(
    detections: np.ndarray, masks: np.ndarray, height: int, width: int
) -> list[tuple[dict, float]]:
    """Each detection's mask pasted into an image of (height, width), as (COCO RLE, area).

    Args:
        detections: (K, 6) ``[x1, y1, x2, y2, score, class]`` in the
            image's pixels.
        masks: (K, M, M) probabilities in each detection's box frame.
        height: the image's height.
        width: the image's width.

    Returns:
        One (``{"size": [height, width], "counts": str}``, pixel count) per detection.
    """
    encoded = []
    for row, mask in zip(detections, masks, strict=True):
        pasted = paste_mask(mask, row[:4], height, width)
        encoded.append((_encoded(pasted), float(pasted.sum())))
    return encoded


def coco_evaluate_instances(
    ground_truth: Sequence[np.ndarray],
    ground_truth_masks: Sequence[np.ndarray],
    detections: Sequence[np.ndarray],
    detection_masks: Sequence[np.ndarray],
    class_names: Sequence[str],
    originals: Sequence[dict] | None = None,
) -> dict[str, float]:
    """COCO box AP and mask AP of a whole split, by pycocotools' COCOeval ("bbox" and "segm").

    The detections are mapped to original pixels (divided by each image's
    letterbox scale) and their masks pasted (:func:`paste_mask`) at the
    image's size and RLE-encoded. The ground truth is either
    - `originals` (a ``coco:`` source's own annotations,
      :func:`keras_fourier.data.instances.coco_truth`): COCO's protocol, the
      annotations' boxes, areas and polygons or RLE at the original
      resolution, each image at its size; or
    - without them, the targets: their boxes scored as :func:`coco_evaluate`
      scores them, their box-frame masks pasted into an image as large as
      the image's boxes reach (exact where a box is at most M pixels wide
      and tall, a resampling else).

    Args:
        ground_truth: per image, its (N, 8) target rows (see
            :func:`coco_evaluate`; their scale column always maps the
            detections).
        ground_truth_masks: per image, (N, M, M) masks in the rows' box frames.
        detections: per image, (K, 6) ``[x1, y1, x2, y2, score, class]``
            in the model-input frame.
        detection_masks: per image, (K, M', M') probabilities in the
            detections' box frames.
        class_names: the class names, in class index order.
        originals: per image, {"height", "width", "rows": (n, 7) x1, y1,
            x2, y2, class, iscrowd, area in original pixels,
            "segmentations": COCO segmentations}, or None. Default None.

    Returns:
        :func:`coco_evaluate`'s values of the boxes, then the same of the
        masks with the prefix ``mask_`` (``mask_map``, ``mask_map50``, ...,
        ``mask_ap/<class name>``).

    Raises:
        ValueError: lists of different lengths, a malformed array, or a
            ground truth without any box.
    """
    count = len(ground_truth)
    lengths = [len(ground_truth_masks), len(detections), len(detection_masks)]
    if originals is not None:
        lengths.append(len(originals))
    if any(length != count for length in lengths):
        raise ValueError(
            "ground_truth, ground_truth_masks, detections, detection_masks (and originals) must "
            f"have one entry per image. Received: {[count, *lengths]}"
        )
    if originals is None:
        images, annotations, scales = _ground_truth(ground_truth, detections)
    else:
        images, annotations = _original_truth(originals)
        scales = _scales(ground_truth, detections)
    results = _box_results(detections, class_names, scales)
    values = _run_coco_eval(images, annotations, results, class_names, "bbox")
    numbers, ordered = iter(annotations), iter(results)  # both image by image, in order
    for index, scale in enumerate(scales):
        found = _rows(detections[index], 6, f"detections[{index}]").copy()
        found[:, :4] /= scale
        if originals is None:
            rows = np.asarray(ground_truth[index], np.float64)
            kept = rows[:, _CLASS] >= 0
            truth = rows[kept, :4] / scale
            corners = np.concatenate([truth[:, 2:], found[:, 2:4], np.ones((1, 2))])
            width, height = (int(value) for value in np.ceil(corners.max(0)))
            images[index].update(height=height, width=width)
            for box, mask in zip(truth, np.asarray(ground_truth_masks[index])[kept], strict=True):
                next(numbers)["segmentation"] = _encoded(paste_mask(mask, box, height, width))
        else:
            height, width = images[index]["height"], images[index]["width"]
        for rle, area in mask_results(found, np.asarray(detection_masks[index]), height, width):
            next(ordered).update(segmentation=rle, area=area)
    masks = _run_coco_eval(images, annotations, results, class_names, "segm")
    return {**values, **{f"mask_{name}": value for name, value in masks.items()}}


def _original_truth(originals: Sequence[dict]) -> tuple[list[dict], list[dict]]:
    """COCO's images and annotations of `coco_evaluate_instances`'s `originals`."""
    images, annotations = [], []
    for index, image in enumerate(originals):
        images.append({"id": index, "height": image["height"], "width": image["width"]})
        rows = _rows(image["rows"], 7, f"originals[{index}]['rows']")
        for row, segmentation in zip(rows, image["segmentations"], strict=True):
            x1, y1, x2, y2 = row[:4]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": index,
                    "category_id": int(row[_CLASS]) + 1,
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "area": float(row[_AREA]),
                    "iscrowd": int(row[_CROWD]),
                    "segmentation": segmentation,
                }
            )
    if not annotations:
        raise ValueError(
            f"The annotations of these {len(images)} images hold no box: COCO AP is undefined. "
            "Received: boxes=0"
        )
    return images, annotations
