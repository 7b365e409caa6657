"""COCO box evaluation with the reference tool (pycocotools' COCOeval), over a whole split.

:func:`coco_evaluate` takes the ground truth as the detection pipeline's
targets (:data:`keras_fourier.data.detection.TARGET_COLUMNS`) and the
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
# Target columns read here (keras_fourier.data.detection.TARGET_COLUMNS).
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


def coco_evaluate(
    ground_truth: Sequence[np.ndarray],
    detections: Sequence[np.ndarray],
    class_names: Sequence[str],
) -> dict[str, float]:
    """COCO box AP of a whole split, computed by pycocotools' COCOeval.

    Args:
        ground_truth: per image, its (N, 8) target rows (the detection
            pipeline's layout, :data:`keras_fourier.data.detection.TARGET_COLUMNS`);
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
    coco_class, coco_eval_class = _coco_module()
    categories = [{"id": index + 1, "name": name} for index, name in enumerate(class_names)]
    images, annotations, scales = [], [], []
    for index, array in enumerate(ground_truth):
        rows = _rows(array, 8, f"ground_truth[{index}]")
        scales.append(_image_scale(rows, index, len(detections[index]) > 0))
        images.append({"id": index})
        for row in rows[rows[:, _CLASS] >= 0]:
            x1, y1, x2, y2 = row[:4] / scales[-1]
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
    results = coco_results(detections, range(len(images)), range(1, len(class_names) + 1), scales)
    for number, result in enumerate(results, 1):  # as COCO.loadRes completes them
        width, height = result["bbox"][2:]
        result.update(id=number, area=width * height, iscrowd=0)
    with contextlib.redirect_stdout(io.StringIO()):
        truth = _index(
            coco_class,
            {"images": images, "annotations": annotations, "categories": categories},
        )
        found = _index(
            coco_class, {"images": images, "annotations": results, "categories": categories}
        )
        evaluation = coco_eval_class(truth, found, iouType="bbox")
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
