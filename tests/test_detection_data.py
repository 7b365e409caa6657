"""Detection input pipelines and COCO evaluation: sources, box targets, augmentation, refusals."""

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from keras_fourier.data import (
    TARGET_COLUMNS,
    DetectionAugment,
    count_detection_examples,
    detection_category_ids,
    detection_class_names,
    detection_splits,
    is_detection_source,
    load_detection_dataset,
)
from keras_fourier.data.checks import data_check_error, unreadable_file
from keras_fourier.data.coco_json import MAX_ANNOTATIONS_PER_IMAGE
from keras_fourier.data.detection import (
    COCO_CATEGORY_IDS,
    augment_detection_example,
)
from keras_fourier.data.segmentation import digit_canvas
from keras_fourier.detection import coco_evaluate, coco_results
from keras_fourier.detection.targets import PADDING_CLASS
from keras_fourier.limits import MAX_MEMORY_ENV
from tests.test_memory_bounds import HIGH_WATER, PEAK_RSS_BYTES


def _collect(dataset):
    images, targets = zip(*[(x.numpy(), y.numpy()) for x, y in dataset], strict=True)
    return np.concatenate(images), np.concatenate(targets)


def _boxes(targets):
    """Per image, its non-padding target rows."""
    return [rows[rows[:, 4] != PADDING_CLASS] for rows in targets]


def _write_image(path, height, width, value=200, fmt="png"):
    image = np.full((height, width, 3), value, np.uint8)
    encoded = tf.io.encode_png(image) if fmt == "png" else tf.io.encode_jpeg(image)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encoded.numpy())


# Four images: one 32x48 with a box, a crowd box, a 0.5-pixel box and one reaching outside;
# one 32x32 with a box; one 32x32 with only a crowd box; one 32x32 without any annotation.
IMAGES = [
    {"id": 7, "file_name": "a.png", "height": 32, "width": 48},
    {"id": 3, "file_name": "b.png", "height": 32, "width": 32},
    {"id": 9, "file_name": "c.png", "height": 32, "width": 32},
    {"id": 11, "file_name": "d.png", "height": 32, "width": 32},
]
CATEGORIES = [{"id": 5, "name": "cat"}, {"id": 2, "name": "dog"}]  # classes: dog 0, cat 1
ANNOTATIONS = [
    {"id": 1, "image_id": 7, "category_id": 5, "bbox": [3, 6, 12, 24], "area": 200.0},
    {"id": 2, "image_id": 7, "category_id": 2, "bbox": [20, 2, 10, 8], "iscrowd": 1, "area": 50},
    {"id": 3, "image_id": 7, "category_id": 2, "bbox": [1, 1, 0.5, 9], "area": 4.5},
    {"id": 4, "image_id": 7, "category_id": 2, "bbox": [40, 20, 20, 20], "area": 300},
    {"id": 5, "image_id": 3, "category_id": 2, "bbox": [0, 0, 16, 8]},
    {"id": 6, "image_id": 9, "category_id": 5, "bbox": [4, 4, 8, 8], "iscrowd": 1, "area": 64},
]


def _coco(images=IMAGES, annotations=ANNOTATIONS, categories=CATEGORIES):
    return {"images": images, "annotations": annotations, "categories": categories}


def _write_split(folder, json_path, document=None):
    document = _coco() if document is None else document
    for image in document["images"]:
        _write_image(folder / image["file_name"], image["height"], image["width"])
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(document))


def test_digit_canvas_boxes_are_the_tight_boxes_of_the_pasted_digits():
    _, masks, layouts = digit_canvas("test", count=16)
    _, targets = _collect(load_detection_dataset("digits", "test", batch_size=16).take(1))
    assert targets.shape == (16, 100, len(TARGET_COLUMNS)) and TARGET_COLUMNS[4] == "class"
    for mask, layout, rows in zip(masks, layouts, _boxes(targets), strict=True):
        assert len(rows) == len(layout)
        for x1, y1, x2, y2, klass, crowd, area, scale in rows.astype(int):
            window = mask[y1:y2, x1:x2] == klass + 1
            # the digit's pixels touch all four sides of its box, and none lie outside it
            assert window[0].any() and window[-1].any() and window[:, 0].any()
            assert window[:, -1].any() and crowd == 0 and scale == 1
            assert area == (x2 - x1) * (y2 - y1)
        assert (mask > 0).sum() == sum(
            (mask[y1:y2, x1:x2] > 0).sum() for y1, x1, y2, x2 in rows[:, [1, 0, 3, 2]].astype(int)
        )
    assert detection_class_names() == [str(digit) for digit in range(10)]
    assert count_detection_examples("digits", "train") == 1000
    assert detection_splits() == ("train", "validation")


def test_coco_layout_targets_follow_the_coco_tools(tmp_path):
    root = tmp_path / "coco"
    _write_split(root / "val2017", root / "annotations" / "instances_val2017.json")
    _write_split(root / "train2017", root / "annotations" / "instances_train2017.json")
    source = f"coco:{root}"
    assert is_detection_source(source) and detection_class_names(source) == ["dog", "cat"]
    assert detection_category_ids(source) == [2, 5]
    assert count_detection_examples(source, "validation") == 4
    images, targets = _collect(
        load_detection_dataset(source, "validation", image_size=64, batch_size=3, max_boxes=4)
    )
    assert images.shape == (4, 64, 64, 3) and targets.shape == (4, 4, 8)
    # images sorted by id: b (3), a (7), c (9), d (11). a is 32x48: scale 4/3, padded below.
    assert (images[1, :43] == 200).all() and (images[1, 43:] == 0).all()
    scale = 4 / 3
    expected_a = [
        [40 * scale, 20 * scale, 48 * scale, 32 * scale, 0, 0, 300, scale],  # clipped
        [3 * scale, 6 * scale, 15 * scale, 30 * scale, 1, 0, 200, scale],
        [20 * scale, 2 * scale, 30 * scale, 10 * scale, 0, 1, 50, scale],  # crowd
        [0, 0, 0, 0, PADDING_CLASS, 0, 0, scale],  # the 0.5-pixel box is dropped
    ]
    np.testing.assert_allclose(targets[1], expected_a, rtol=1e-6)
    np.testing.assert_allclose(targets[0, 0], [0, 0, 32, 16, 0, 0, 128, 2], rtol=1e-6)
    assert (targets[3, :, 4] == PADDING_CLASS).all() and (targets[3, :, 7] == 2).all()
    # evaluated on val2017 (test2017 has no annotations): every tenth training image selects
    assert detection_splits(source, "validation") == ("train[:90%]", "train[90%:]")
    assert [
        count_detection_examples(source, split) for split in ("train[:90%]", "train[90%:]")
    ] == [3, 1]
    # training drops the images without a non-crowd box (c: crowd only, d: none)
    _, trained = _collect(
        load_detection_dataset(source, "train", image_size=32, batch_size=1, max_boxes=1)
    )
    assert len(trained) == 2 and sorted(trained[:, 0, 6]) == [128, 300]


def test_export_layouts_and_carved_splits(tmp_path):
    export = tmp_path / "export"
    # Roboflow's exports list the dataset as category 0, the others' supercategory
    grouped = [{"id": 0, "name": "pets", "supercategory": "none"}] + [
        {**category, "supercategory": "pets"} for category in CATEGORIES
    ]
    for split in ("train", "valid", "test"):
        document = _coco(categories=grouped)
        _write_split(export / split, export / split / "_annotations.coco.json", document)
    (export / "test" / "other.json").write_text("{}")
    source = f"coco:{export}"
    assert detection_class_names(source) == ["dog", "cat"]
    for split in ("train", "validation", "test"):
        assert count_detection_examples(source, split) == 4
    # only train/: validation is every tenth image of it (by id), train the rest
    only_train = tmp_path / "only_train"
    images = [{**IMAGES[1], "id": index, "file_name": f"{index}.png"} for index in range(10)]
    _write_split(only_train / "train", only_train / "train" / "x.json", _coco(images, []))
    source = f"coco:{only_train}"
    assert count_detection_examples(source, "train") == 9
    assert count_detection_examples(source, "validation") == 1
    with pytest.raises(ValueError, match="Unknown split 'test'"):
        count_detection_examples(source, "test")
    # one folder with a JSON and its images: every fifth test, every tenth validation
    flat = tmp_path / "flat"
    _write_split(flat, flat / "instances.json", _coco(images, []))
    counts = [
        count_detection_examples(f"coco:{flat}", split) for split in ("train", "validation", "test")
    ]
    assert counts == [7, 1, 2]


def test_augmentation_moves_boxes_with_the_image():
    image = np.zeros((40, 60, 3), np.float32)
    image[10:30, 20:50] = 255.0  # the box's region is white
    rows = tf.constant([[20, 10, 50, 30, 0, 0, 600]], tf.float32)
    # no resize change, no crop (the image fits), a certain flip: x -> 60 - x
    flip = DetectionAugment(ratio_range=(1.0, 1.0), flip_prob=1.0, photometric=False)
    out, boxes, scale = augment_detection_example(image, rows, tf.constant(3, tf.int64), 60, flip)
    np.testing.assert_allclose(boxes.numpy(), [[10, 10, 40, 30, 0, 0, 600]])
    assert float(scale) == 1.0 and out.shape == (60, 60, 3)
    np.testing.assert_array_equal(out.numpy()[10:30, 10:40], 255.0)
    # random resize and crop: the white pixels stay inside the box, and fill it
    jitter = DetectionAugment(ratio_range=(1.5, 3.0), flip_prob=0.5, photometric=False)
    for seed in range(6):
        out, boxes, scale = augment_detection_example(
            image, rows, tf.constant(seed, tf.int64), 48, jitter
        )
        ((x1, y1, x2, y2, *_),) = boxes.numpy()
        white = out.numpy()[..., 0] > 127.5
        ys, xs = np.nonzero(white)
        assert abs(xs.min() - x1) <= 1 and abs(xs.max() + 1 - x2) <= 1, (seed, boxes)
        assert abs(ys.min() - y1) <= 1 and abs(ys.max() + 1 - y2) <= 1, (seed, boxes)
        assert 0.8 * 1.5 <= float(scale) <= 0.8 * 3.0  # the letterbox scale 48/60 times ratio


def test_training_pipeline_is_deterministic_and_photometric_keeps_boxes():
    augment = DetectionAugment(ratio_range=(0.75, 1.25), flip_prob=0.0)
    runs = [
        _collect(
            load_detection_dataset(
                "digits", "validation", training=True, augment=augment, batch_size=8, seed=4
            ).take(2)
        )
        for _ in range(2)
    ]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    boxes = _boxes(runs[0][1])
    assert all(len(rows) >= 1 for rows in boxes)
    assert all(((rows[:, 2] > rows[:, 0]) & (rows[:, 2] <= 64)).all() for rows in boxes)


def test_tfds_coco_and_voc_on_mock_data(tmp_path):
    def examples(self, split, **kwargs):
        del self, split, kwargs
        objects = {
            "bbox": np.array([[0.25, 0.5, 0.75, 1.0], [0.0, 0.0, 0.01, 0.5]], np.float32),
            "label": np.array([3, 1], np.int64),
            "is_crowd": np.array([False, False]),
            "is_difficult": np.array([True, False]),
            "area": np.array([40, 5], np.int64),
        }
        example = {"image": np.full((8, 16, 3), 9, np.uint8), "objects": objects}
        return tf.data.Dataset.from_tensors(example).repeat(2)

    data_dir = str(tmp_path)
    with tfds.testing.mock_data(num_examples=2, as_dataset_fn=examples):
        # (the names come with the prepared dataset's info; the mock has only the count)
        assert len(detection_class_names("tfds:coco/2017", data_dir)) == 80
        assert detection_category_ids("tfds:coco/2017", data_dir) == list(COCO_CATEGORY_IDS)
        _, coco = _collect(
            load_detection_dataset(
                "tfds:coco/2017", "validation", image_size=32, batch_size=2, data_dir=data_dir
            )
        )
        assert detection_class_names("tfds:voc/2007", data_dir)[:2] == ["aeroplane", "bicycle"]
        _, voc = _collect(
            load_detection_dataset(
                "tfds:voc/2007", "test", image_size=32, batch_size=2, data_dir=data_dir
            )
        )
    # 16x8 at size 32: scale 2; the second box is 0.08 pixels high: dropped
    np.testing.assert_allclose(_boxes(coco)[0], [[16, 4, 32, 12, 3, 0, 40, 2]])
    np.testing.assert_allclose(_boxes(voc)[0], [[16, 4, 32, 12, 3, 1, 32, 2]])


# ----------------------------------------------------------------------------- refusals


def _mutated(change):
    document = copy.deepcopy(_coco())
    change(document)
    return document


BAD_DOCUMENTS = [
    (lambda d: d.pop("annotations"), "missing key 'annotations'"),
    (lambda d: d.update(images={}), "'images' must be a list"),
    (lambda d: d["images"][0].pop("width"), "images[0] has no valid 'width'"),
    (lambda d: d["categories"].append({"id": 5, "name": "x"}), "two categories share an id"),
    (lambda d: d["annotations"][0].update(bbox=[1, 2, 3]), "not 4 finite numbers"),
    (lambda d: d["annotations"][0].update(bbox=[1, 2, float("nan"), 3]), "not 4 finite"),
    (lambda d: d["annotations"][0].update(bbox=[1, 2, -3, 4]), "negative width or height"),
    (lambda d: d["annotations"][0].update(bbox=[100, 2, 3, 4]), "lies outside its 48x32 image"),
    (lambda d: d["annotations"][0].update(category_id=99), "unknown category id"),
    (lambda d: d["annotations"][0].update(image_id=99), "refers to no image"),
    (lambda d: d["annotations"][0].update(iscrowd=2), "iscrowd other than 0 or 1"),
    (lambda d: d["images"][0].update(file_name="../a.png"), "leaves the image folder"),
    (lambda d: d["images"][0].update(width=2 * 10**9), "more than the 40,000,000 an image may"),
]


@pytest.mark.parametrize(("change", "expected"), BAD_DOCUMENTS)
def test_a_bad_coco_json_is_refused_in_one_line_naming_it(tmp_path, change, expected):
    root = tmp_path / "bad"
    json_path = root / "valid" / "_annotations.coco.json"
    _write_split(root / "valid", json_path)
    json_path.write_text(json.dumps(_mutated(change)))
    with pytest.raises(ValueError) as caught:
        load_detection_dataset(f"coco:{root}", "validation", batch_size=1)
    message = str(caught.value)
    assert "\n" not in message and str(json_path) in message and expected in message, message


def test_splits_with_other_categories_are_refused(tmp_path):
    root = tmp_path / "mixed"
    _write_split(root / "train", root / "train" / "a.json")
    other = _coco(categories=[*CATEGORIES, {"id": 8, "name": "bird"}])
    _write_split(root / "valid", root / "valid" / "a.json", other)
    with pytest.raises(ValueError, match=r"valid.a\.json' has other categories than .*train.a"):
        load_detection_dataset(f"coco:{root}", "validation", batch_size=1)


def test_missing_images_empty_splits_and_unreadable_files(tmp_path):
    root = tmp_path / "coco"
    _write_split(root / "valid", root / "valid" / "_annotations.coco.json")
    os.remove(root / "valid" / "c.png")
    with pytest.raises(ValueError, match=r"1 of 4 images .* are missing from .*c\.png$"):
        load_detection_dataset(f"coco:{root}", "validation", batch_size=1)
    _write_image(root / "valid" / "c.png", 32, 32)
    (root / "valid" / "d.png").write_bytes(b"not an image")
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        _collect(load_detection_dataset(f"coco:{root}", "validation", batch_size=4))
    assert unreadable_file(caught.value) == str(root / "valid" / "d.png")
    # an image of another size than the JSON declares (resized after annotation): its rows
    # would be moved; refused as it is read, in the one line the trainer prints
    _write_image(root / "valid" / "d.png", 32, 40)
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        _collect(load_detection_dataset(f"coco:{root}", "validation", batch_size=4))
    line = str(data_check_error(caught.value, f"coco:{root}"))
    image = root / "valid" / "d.png"
    assert "\n" not in line and f"Bad COCO image {image} is 32 x 40 pixels" in line, line
    assert "declares 32 x 32 (resized after annotation?)" in line, line
    (root / "valid" / "d.png").write_bytes(b"not an image")
    images, _ = _collect(
        load_detection_dataset(f"coco:{root}", "validation", batch_size=4, on_bad_image="skip")
    )
    assert len(images) == 3
    empty = tmp_path / "empty"
    _write_split(empty / "valid", empty / "valid" / "a.json", _coco([], [], CATEGORIES))
    with pytest.raises(ValueError, match="has no images"):
        load_detection_dataset(f"coco:{empty}", "validation", batch_size=1)
    crowd_only = tmp_path / "crowd"
    _write_split(
        crowd_only / "train", crowd_only / "train" / "a.json", _coco(IMAGES[2:], ANNOTATIONS[5:])
    )
    with pytest.raises(ValueError, match="no image with a non-crowd box"):
        load_detection_dataset(f"coco:{crowd_only}", "train", batch_size=1)


_CHILD = (
    HIGH_WATER
    + """
import json, os, sys
from keras_fourier.data.coco_json import read_coco_json
results = []
for file, ceiling in json.loads(sys.argv[1]):
    os.environ.pop("KERAS_FOURIER_MAX_MEMORY", None)
    if ceiling:
        os.environ["KERAS_FOURIER_MAX_MEMORY"] = ceiling
    try:
        read_coco_json(file)
        results.append("read")
    except ValueError as error:
        results.append(str(error))
print(json.dumps({"results": results, "peak": high_water()}))
"""
)


def test_hostile_coco_json_is_refused_within_bounded_memory(tmp_path):
    crowded = tmp_path / "crowded.json"  # 10^6 annotations of one image, 47 MB
    annotation = '{"image_id":1,"category_id":1,"bbox":[0,0,1,1]}'
    crowded.write_text(
        '{"images":[{"id":1,"file_name":"a.png","width":9,"height":9}],'
        '"categories":[{"id":1,"name":"a"}],"annotations":[' + ",".join([annotation] * 10**6) + "]}"
    )
    huge = tmp_path / "huge.json"  # 2 GB, sparse: never written
    with open(huge, "wb") as file:
        file.truncate(2 * 10**9)
    empties = tmp_path / "empties.json"  # 3 MB of empty objects: 64 MiB of Python objects
    empties.write_text("[" + ",".join(["{}"] * 10**6) + "]")
    probes = [(str(crowded), None), (str(huge), None), (str(empties), "64MiB")]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(probes)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    for (file, _), message in zip(probes, report["results"], strict=True):
        assert message.startswith(f"COCO JSON {file!r}") or f"{file!r}" in message, message
        assert "\n" not in message
    crowded_error, huge_error, empties_error = report["results"]
    assert f"image 1 has more than {MAX_ANNOTATIONS_PER_IMAGE:,} annotations" in crowded_error
    assert "above the ceiling" in huge_error and f"{MAX_MEMORY_ENV}=" in huge_error
    assert "1,000,001 objects and arrays" in empties_error
    assert report["peak"] < PEAK_RSS_BYTES, report["peak"]


# ----------------------------------------------------------------------------- COCO evaluation


def _truth(*boxes, scale=1.0):
    """Target rows of one image: (x1, y1, x2, y2, class, iscrowd) in original pixels."""
    rows = [
        [*(np.array(box[:4]) * scale), box[4], box[5], (box[2] - box[0]) * (box[3] - box[1]), scale]
        for box in boxes
    ]
    return np.array([*rows, [0, 0, 0, 0, PADDING_CLASS, 0, 0, scale]], np.float32)


def test_coco_evaluate_on_hand_computable_cases():
    truth = [_truth([10, 10, 50, 50, 0, 0], [60, 60, 90, 100, 1, 0], scale=2.0)]
    perfect = [np.array([[20, 20, 100, 100, 0.9, 0], [120, 120, 180, 200, 0.8, 1]])]
    metrics = coco_evaluate(truth, perfect, ["a", "b"])
    for name in ("map", "map50", "map75", "map_medium", "ar100", "ap/a", "ap/b"):
        assert metrics[name] == pytest.approx(1.0), name
    assert np.isnan(metrics["map_small"]) and np.isnan(metrics["map_large"])  # no such boxes
    # one of two boxes of a class found: precision 1 up to recall 0.5, i.e. 51 of COCO's 101
    # recall points
    same_class = [_truth([10, 10, 50, 50, 0, 0], [60, 60, 90, 100, 0, 0])]
    half = coco_evaluate(same_class, [np.array([[10, 10, 50, 50, 0.9, 0]])], ["a"])
    assert half["map"] == pytest.approx(51 / 101) and half["ar100"] == pytest.approx(0.5)
    # a crowd box missed is no miss, and a detection on it no false positive
    crowd = [_truth([10, 10, 50, 50, 0, 0], [60, 60, 90, 100, 0, 1])]
    on_crowd = np.array([[60, 60, 90, 100, 0.95, 0], [10, 10, 50, 50, 0.9, 0]])
    assert coco_evaluate(crowd, [on_crowd[1:]], ["a"])["map"] == pytest.approx(1.0)
    assert coco_evaluate(crowd, [on_crowd], ["a"])["map"] == pytest.approx(1.0)
    elsewhere = on_crowd + np.array([[100, 0, 100, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    assert coco_evaluate(crowd, [elsewhere], ["a"])["map"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="holds no box"):
        coco_evaluate([_truth()], [np.zeros((0, 6))], ["a"])


def test_coco_evaluate_equals_a_direct_pycocotools_run(tmp_path):
    rng = np.random.default_rng(0)
    truth, detections, images, annotations = [], [], [], []
    for image_id in range(6):
        scale = float(rng.uniform(0.5, 2.0))
        corners = rng.uniform(0, 200, (5, 2))
        sizes = rng.uniform(4, 150, (5, 2))
        boxes = np.concatenate([corners, corners + sizes], 1)
        classes, crowd = rng.integers(0, 3, 5), (rng.uniform(size=5) < 0.2).astype(int)
        rows = [[*box, klass, flag] for box, klass, flag in zip(boxes, classes, crowd, strict=True)]
        truth.append(_truth(*rows, scale=scale))
        noisy = boxes + rng.normal(0, 6, boxes.shape)
        scores = rng.uniform(size=5)
        found = np.concatenate([noisy * scale, scores[:, None], classes[:, None]], 1)
        detections.append(np.concatenate([found, [[0, 0, 30, 30, 0.3, 2]]]))
        images.append({"id": image_id, "height": 400, "width": 400})
        for number, (box, klass, flag) in enumerate(zip(boxes, classes, crowd, strict=True)):
            area = float((box[2] - box[0]) * (box[3] - box[1]))
            annotations.append(
                {
                    "id": 10 * image_id + number + 1,
                    "image_id": image_id,
                    "category_id": [3, 7, 8][klass],
                    "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]],
                    "area": area,
                    "iscrowd": int(flag),
                }
            )
    categories = [{"id": 3, "name": "a"}, {"id": 7, "name": "b"}, {"id": 8, "name": "c"}]
    truth_file, results_file = tmp_path / "truth.json", tmp_path / "results.json"
    truth_file.write_text(json.dumps(_coco(images, annotations, categories)))
    scales = [rows[0, 7] for rows in truth]
    results = coco_results(detections, range(6), [3, 7, 8], scales)
    results_file.write_text(json.dumps(results))
    reference_truth = COCO(str(truth_file))
    reference = COCOeval(reference_truth, reference_truth.loadRes(str(results_file)), "bbox")
    reference.evaluate()
    reference.accumulate()
    reference.summarize()
    metrics = coco_evaluate(truth, detections, ["a", "b", "c"])
    names = ["map", "map50", "map75", "map_small", "map_medium", "map_large"]
    for name, value in zip(names, reference.stats[:6], strict=True):
        assert metrics[name] == pytest.approx(value, abs=1e-6), name
    assert 0.1 < metrics["map"] < 0.9
    precision = reference.eval["precision"][:, :, :, 0, -1]
    for index, name in enumerate("abc"):
        values = precision[:, :, index]
        assert metrics[f"ap/{name}"] == pytest.approx(values[values > -1].mean(), abs=1e-6)
