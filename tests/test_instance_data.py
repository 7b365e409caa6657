"""Instance segmentation pipelines: box-local masks of digits, COCO polygons and RLE; refusals."""

import copy
import json

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from pycocotools import mask as mask_api

from keras_fourier.cli import main
from keras_fourier.data.detection import (
    COCO_CATEGORY_IDS,
    DetectionAugment,
    detection_category_ids,
    detection_class_names,
    detection_splits,
    is_detection_source,
    load_detection_dataset,
)
from keras_fourier.data.instances import (
    INSTANCE_SPLITS,
    MAX_MASK_PIXELS,
    SPLIT_STRIDE,
    box_frame,
    coco_truth,
    is_instance_source,
    load_instance_dataset,
    rle_counts,
    tfds_truth,
)
from keras_fourier.data.segmentation import DIGIT_CANVAS_THRESHOLD
from keras_fourier.detection import COCOInstanceAP, paste_masks
from keras_fourier.detection.evaluation import paste_mask
from keras_fourier.detection.targets import MASK_CROP, PADDING_CLASS
from keras_fourier.tasks import instance_segmentation  # (registers COCO's reader)
from keras_fourier.training.config import TrainConfig


def _pasted(boxes, masks, height, width):
    """The union of box-local masks pasted at their boxes (nearest pixel centre), bool (H, W)."""
    canvas = np.zeros((height, width), bool)
    ys, xs = np.mgrid[0:height, 0:width] + 0.5
    for (x1, y1, x2, y2, klass, *_), mask in zip(boxes, masks, strict=True):
        if klass == PADDING_CLASS:
            continue
        inside = (xs >= x1) & (xs < x2) & (ys >= y1) & (ys < y2)
        i = np.clip(((ys - y1) / (y2 - y1) * MASK_CROP).astype(int), 0, MASK_CROP - 1)
        j = np.clip(((xs - x1) / (x2 - x1) * MASK_CROP).astype(int), 0, MASK_CROP - 1)
        canvas |= inside & (mask[i, j] > 0.5)
    return canvas


def _iou(a, b):
    return (a & b).sum() / max((a | b).sum(), 1)


@pytest.mark.parametrize("training", [False, True])
def test_digit_masks_are_the_digits_own_pixels_and_move_with_their_boxes(training):
    # training: random resize (x1.5-2, so crops cut digits) and flips, no photometric change
    augment = DetectionAugment(ratio_range=(1.5, 2.0), flip_prob=0.5, photometric=False)
    data = load_instance_dataset(
        "digits", "test", batch_size=8, training=training, augment=augment, max_boxes=4
    )
    images, targets = next(iter(data))
    assert targets["boxes"].shape == (8, 4, 8) and targets["masks"].shape == (8, 4, 56, 56)
    masks, boxes = targets["masks"].numpy(), targets["boxes"].numpy()
    assert masks.min() >= 0 and masks.max() <= 1
    assert (masks[boxes[..., 4] == PADDING_CLASS] == 0).all()
    for image, rows, instance in zip(images.numpy(), boxes, masks, strict=True):
        digits = image[..., 0] >= DIGIT_CANVAS_THRESHOLD
        pasted = _pasted(rows, instance, *digits.shape)
        assert _iou(pasted, digits) > (0.8 if training else 0.95), _iou(pasted, digits)


# A 40x48 image: a polygon (a triangle and a square of one instance), a compressed RLE and an
# uncompressed RLE; categories "a" and "b".
HEIGHT, WIDTH = 40, 48


def _instance_masks():
    triangle = np.zeros((HEIGHT, WIDTH), np.uint8)
    triangle[4:14, 4:20] = 1  # the polygons' pixels, rasterised by pycocotools below
    blob = np.zeros((HEIGHT, WIDTH), np.uint8)
    blob[20:36, 10:30] = 1
    blob[24:30, 14:20] = 0  # a hole: only RLE holds it
    bar = np.zeros((HEIGHT, WIDTH), np.uint8)
    bar[2:38, 36:44] = 1
    return triangle, blob, bar


def _document():
    _, blob, bar = _instance_masks()
    compressed = mask_api.encode(np.asfortranarray(blob))
    counts = [int(run) for run in rle_counts(mask_api.encode(np.asfortranarray(bar))["counts"])]
    polygons = [[4, 4, 20, 4, 20, 14, 4, 14]]
    annotations = [
        {"segmentation": polygons, "bbox": [4, 4, 16, 10], "category_id": 1},
        {
            "segmentation": {"size": [HEIGHT, WIDTH], "counts": compressed["counts"].decode()},
            "bbox": [10, 20, 20, 16],
            "category_id": 2,
        },
        {
            "segmentation": {"size": [HEIGHT, WIDTH], "counts": counts},
            "bbox": [36, 2, 8, 36],
            "category_id": 1,
            "iscrowd": 1,
        },
    ]
    for number, annotation in enumerate(annotations, 1):
        annotation.update(id=number, image_id=1, area=float(annotation["bbox"][2] * 10))
    return {
        "images": [{"id": 1, "file_name": "a.png", "height": HEIGHT, "width": WIDTH}],
        "annotations": annotations,
        "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
    }


def _write(root, document):
    folder = root / "valid"
    folder.mkdir(parents=True, exist_ok=True)
    pixels = np.full((HEIGHT, WIDTH, 3), 90, np.uint8)
    (folder / "a.png").write_bytes(tf.io.encode_png(pixels).numpy())
    path = folder / "_annotations.coco.json"
    path.write_text(json.dumps(document))
    return f"coco:{root}", str(path)


def test_coco_polygons_and_rle_become_the_instances_pixels(tmp_path):
    source, _ = _write(tmp_path / "coco", _document())
    assert is_instance_source(source) and not is_instance_source("tfds:voc/2007")
    # the letterbox of 40x48 in 96x96: scale 2
    data = load_instance_dataset(source, "validation", image_size=96, batch_size=1, max_boxes=5)
    _, targets = next(iter(data))
    boxes, masks = targets["boxes"].numpy()[0], targets["masks"].numpy()[0]
    # rows sorted by area (the bar's 80, the blob's 200 > the triangle's 160)
    assert boxes[:3, 4].tolist() == [1, 0, 0] and (boxes[3:, 4] == PADDING_CLASS).all()
    assert boxes[:, 7].tolist() == [2.0] * 5 and boxes[2, 5] == 1  # the bar is a crowd
    expected = dict(zip((1, 0, 2), _instance_masks(), strict=True))
    for row in range(3):
        full = expected[row].astype(bool)
        upscaled = np.kron(full, np.ones((2, 2), bool))
        pasted = _pasted(boxes[row : row + 1], masks[row : row + 1], 2 * HEIGHT, 2 * WIDTH)
        assert _iou(pasted, upscaled) > 0.97, (row, _iou(pasted, upscaled))
    # the blob's hole is in its box-local mask: (24..30, 14..20) of the box (10, 20, 30, 36)
    hole = masks[0, (26 - 20) * 56 // 16 : (28 - 20) * 56 // 16, (16 - 10) * 56 // 20]
    assert (hole == 0).all()


def _mutated(change):
    document = copy.deepcopy(_document())
    change(document)
    return document


def _segment(index, value):
    return lambda document: document["annotations"][index].update(segmentation=value)


BAD_SEGMENTATIONS = [
    (_segment(0, [[4, 4, 20, 4]]), "annotations[0] (id 1) has a polygon of fewer than 3 points"),
    (_segment(0, [[4, 4, 20, 4, 20, 14, 7]]), "has a polygon of an odd count of numbers"),
    (_segment(0, [[4, 4, 20, 4, 20, float("nan")]]), "has a polygon of a number that is not"),
    (_segment(0, [[4, 4, 20, 4, 20, "x"]]), "annotations[0] (id 1) has a polygon that is not"),
    (_segment(0, [[4, 4, 90, 4, 20, 14]]), "has a polygon reaching outside its 48x40 image"),
    (_segment(1, {"size": [20, 48], "counts": "PP"}), "annotations[1] (id 2) has an RLE of size"),
    (_segment(2, {"size": [HEIGHT, WIDTH], "counts": [5, 7]}), "covering 12 pixels, not its"),
    (_segment(1, {"size": [HEIGHT, WIDTH], "counts": "5 2"}), "outside COCO's RLE alphabet"),
    (_segment(1, {"size": [HEIGHT, WIDTH], "counts": {"a": 1}}), "neither a string nor"),
    # runs past 64 bits, or summing past them, or longer than the image: refused as read
    (_segment(1, {"size": [HEIGHT, WIDTH], "counts": "o" * 40 + "0"}), "longer than 64 bits"),
    (_segment(1, {"size": [HEIGHT, WIDTH], "counts": [2**70, 5]}), "a run of 1,180,591,620"),
    (_segment(1, {"size": [HEIGHT, WIDTH], "counts": [2**62] * 4 + [5]}), "a run of 4,611,686"),
    (_segment(1, {"size": [HEIGHT, WIDTH], "counts": "0" * 5000}), "more runs than its image"),
    (_segment(1, {"size": [HEIGHT, WIDTH], "counts": "@"}), "a run of -16 pixels"),
    (_segment(0, []), "annotations[0] (id 1) has no segmentation (polygons or RLE)"),
]


@pytest.mark.parametrize(("change", "expected"), BAD_SEGMENTATIONS)
def test_a_bad_segmentation_is_refused_in_one_line_naming_file_and_annotation(
    tmp_path, change, expected
):
    source, path = _write(tmp_path / "bad", _mutated(change))
    with pytest.raises(ValueError) as caught:
        load_instance_dataset(source, "validation", batch_size=1)
    message = str(caught.value)
    assert "\n" not in message and path in message and expected in message, message


def test_hostile_masks_are_refused_before_decoding_and_tfds_coco_holds_none(tmp_path):
    # a 6,000 x 6,000 image (its file is small: the JSON declares the size) whose three RLE
    # masks would decode to 108 million pixels: refused from the JSON alone, in bounded time
    # and memory
    side = 6_000
    document = _document()
    document["images"][0].update(height=side, width=side)
    whole = {"segmentation": {"size": [side, side], "counts": [0, side * side]}}
    for annotation in document["annotations"]:
        annotation.update(whole, bbox=[0, 0, side, side])
    source, path = _write(tmp_path / "huge", document)
    with pytest.raises(ValueError) as caught:
        load_instance_dataset(source, "validation", batch_size=1)
    message = str(caught.value)
    assert path in message and f"more than {MAX_MASK_PIXELS:,}" in message, message
    assert f"pixels={len(document['annotations']) * side * side}" in message
    assert "image 1 " in message
    with pytest.raises(ValueError, match=r"TFDS's coco/2017 holds boxes only .* 'coco:<path>'"):
        load_instance_dataset("tfds:coco/2017", "validation", batch_size=1)


def test_mask_ap_follows_the_coco_tools_and_pasting_is_the_models():
    # two ground-truth instances (a left-half mask, a full one) and a padding row, scale 1
    rows = np.zeros((1, 3, 8), np.float32)
    rows[0, 0] = [0, 0, 20, 20, 0, 0, 200, 1]
    rows[0, 1] = [30, 30, 50, 40, 1, 0, 200, 1]
    rows[0, 2] = [0, 0, 0, 0, PADDING_CLASS, 0, 0, 1]
    truth = np.zeros((1, 3, MASK_CROP, MASK_CROP), np.float32)
    truth[0, 0, :, : MASK_CROP // 2] = 1
    truth[0, 1] = 1
    found = np.zeros((1, 4, 28, 28), np.float32)
    found[0, 0, :, :14] = 1
    found[0, 1] = 1

    def scored(masks):
        metric = COCOInstanceAP(num_classes=2, capacity=2, max_boxes=3, max_detections=4)
        boxes = np.concatenate([rows[0, :2, :4], np.zeros((2, 4))])[None].astype(np.float32)
        metric.update_state(
            {"boxes": rows, "masks": truth},
            {
                "boxes": boxes,
                "scores": np.array([[0.9, 0.8, 0, 0]], np.float32),
                "classes": np.array([[0, 1, -1, -1]], np.int32),
                "num_detections": np.array([2], np.int32),
                "masks": masks,
            },
        )
        return metric.evaluation()

    exact = scored(found)
    assert exact["map"] == pytest.approx(1) and exact["mask_map"] == pytest.approx(1)
    # the whole box as the first mask: IoU 0.5 with its half, counted at the 0.5 threshold only
    whole = found.copy()
    whole[0, 0] = 1
    values = scored(whole)
    assert values["map"] == pytest.approx(1) and values["mask_ap/1"] == pytest.approx(1)
    assert values["mask_ap/0"] == pytest.approx(0.1) and values["mask_map50"] == pytest.approx(1)
    # paste_mask (NumPy, within the box) is the model's paste_masks (keras.ops, whole image)
    rng = np.random.default_rng(0)
    masks = rng.uniform(size=(1, 5, 28, 28)).astype(np.float32)
    corners = rng.uniform(0, 40, size=(1, 5, 2, 2)).astype(np.float32)
    boxes = np.concatenate([corners.min(2), corners.max(2) + 1], -1).reshape(1, 5, 4)
    expected = keras.ops.convert_to_numpy(paste_masks(masks, boxes, 44, 48))
    for index in range(5):
        pasted = paste_mask(masks[0, index], boxes[0, index], 44, 48)
        assert (pasted != expected[0, index]).sum() <= 2, index  # float ties at 0.5


def _comb(height=200, width=240):
    """A COCO JSON of one image: a comb of 5-pixel teeth, a detail 28x28 masks blur."""
    teeth = []
    for x in range(20, 212, 12):
        teeth.append([x, 20, x + 5, 20, x + 5, 150, x, 150])
    points = [20, 150, 212, 150, 212, 170, 20, 170]
    document = {
        "images": [{"id": 7, "file_name": "a.png", "height": height, "width": width}],
        "annotations": [
            {
                "id": 1,
                "image_id": 7,
                "category_id": 1,
                "segmentation": [*teeth, points],
                "bbox": [20, 20, 192, 150],
                "area": 11680.0,
                "iscrowd": 0,
            }
        ],
        "categories": [{"id": 1, "name": "comb"}],
    }
    return document


def test_coco_sources_are_scored_against_their_own_annotations(tmp_path):
    document = _comb()
    folder = tmp_path / "coco" / "valid"
    folder.mkdir(parents=True)
    (folder / "a.png").write_bytes(tf.io.encode_png(np.zeros((200, 240, 3), np.uint8)).numpy())
    (folder / "_annotations.coco.json").write_text(json.dumps(document))
    source = f"coco:{tmp_path / 'coco'}"
    data = load_instance_dataset(source, "validation", image_size=128, batch_size=1, max_boxes=2)
    _, targets = next(iter(data))
    assert targets["image"].numpy().tolist() == [1 << 24]  # validation's code, position 0
    rows = targets["boxes"].numpy()
    truth = targets["masks"].numpy()
    # the perfect 28x28 prediction: the target's own box and box-local mask
    found = truth[:, :1].reshape(1, 1, 28, 2, 28, 2).mean((3, 5)).astype(np.float32)
    predictions = {
        "boxes": rows[:, :1, :4],
        "scores": np.array([[0.9]], np.float32),
        "classes": np.array([[0]], np.int32),
        "num_detections": np.array([1], np.int32),
        "masks": found,
    }

    def scored(annotations):
        metric = COCOInstanceAP(
            1, capacity=1, max_boxes=2, max_detections=1, annotations=annotations
        )
        metric.update_state(targets, predictions)
        return metric.evaluation()

    exact, approximate = scored(source), scored(None)
    # COCO's own evaluation of the same result, ground truth from the file itself
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    truth_api = COCO()
    truth_api.dataset = document
    truth_api.createIndex()
    scale = float(rows[0, 0, 7])
    box = rows[0, 0, :4] / scale
    pasted = paste_mask(found[0, 0], box, 200, 240)
    rle = mask_api.encode(np.asfortranarray(pasted.astype(np.uint8)))
    result = {"image_id": 7, "category_id": 1, "score": 0.9, "segmentation": rle}
    evaluation = COCOeval(truth_api, truth_api.loadRes([result]), iouType="segm")
    evaluation.evaluate()
    evaluation.accumulate()
    evaluation.summarize()
    assert exact["mask_map"] == pytest.approx(evaluation.stats[0], abs=1e-9)
    assert exact["map"] == pytest.approx(1.0)
    # the box-local targets flatter 28x28 masks: the teeth are lost on both sides
    assert approximate["mask_map"] > exact["mask_map"] + 0.3, (approximate, exact)
    with pytest.raises(ValueError, match="annotations='digits'"):
        COCOInstanceAP(1, annotations="digits")
    metric = COCOInstanceAP(1, capacity=1, max_boxes=2, max_detections=1, annotations=source)
    with pytest.raises(ValueError, match="'image' values"):
        metric.update_state({"boxes": rows, "masks": truth}, predictions)
    metric.update_state({**targets, "image": np.array([(1 << 24) + 5], np.int32)}, predictions)
    with pytest.raises(ValueError, match="position=5"):
        metric.evaluation()


def _coco_layout(root, train_images=4):
    """COCO's own layout: `train_images` copies of `_document`'s image in train2017, one in val."""
    for name, count in (("train2017", train_images), ("val2017", 1)):
        document = _document()
        images, annotations = [], []
        for index in range(count):
            images.append({**document["images"][0], "id": index + 1, "file_name": f"{index}.png"})
            for annotation in document["annotations"]:
                number = len(annotations) + 1
                annotations.append({**annotation, "id": number, "image_id": index + 1})
            pixels = np.full((HEIGHT, WIDTH, 3), 90, np.uint8)
            (root / name).mkdir(parents=True, exist_ok=True)
            (root / name / f"{index}.png").write_bytes(tf.io.encode_png(pixels).numpy())
        (root / "annotations").mkdir(exist_ok=True)
        path = root / "annotations" / f"instances_{name}.json"
        path.write_text(json.dumps({**document, "images": images, "annotations": annotations}))
    return f"coco:{root}"


def test_held_out_training_slices_of_coco_are_instance_splits_found_again(tmp_path):
    # COCO's own layout evaluated on val2017 trains on train[:90%] and selects on train[90%:]
    source = _coco_layout(tmp_path / "coco")
    assert detection_splits(source, "validation") == ("train[:90%]", "train[90%:]")
    # what `train --test-split validation` builds (it failed: the slices had no split code)
    config = TrainConfig(data=source, eval_split="validation", batch_size=1, image_size=96)
    _, targets = next(iter(instance_segmentation.TASK.datasets(config).validation))
    code = INSTANCE_SPLITS.index("train[90%:]")
    assert targets["image"].numpy().tolist() == [code * SPLIT_STRIDE]  # its only image
    (truth,) = coco_truth(source, targets["image"].numpy())
    # the fourth training image (rank 3 by id): its three annotations, areas from the JSON
    assert truth["rows"][:, 6].tolist() == [160.0, 200.0, 80.0]
    # every validation epoch reads the truth again: the checked split is kept while its JSON
    # is unchanged (an image file removed since is not looked for again) ...
    (tmp_path / "coco" / "train2017" / "3.png").unlink()
    (again,) = coco_truth(source, targets["image"].numpy())
    assert again["rows"].tolist() == truth["rows"].tolist()
    # ... and read again once it changes
    path = tmp_path / "coco" / "annotations" / "instances_train2017.json"
    path.write_text(path.read_text().replace('"area": 160.0', '"area": 1600.0'))
    with pytest.raises(ValueError, match="1 of 1 images of split 'train\\[90%:\\]'"):
        coco_truth(source, targets["image"].numpy())
    kept = load_instance_dataset(source, "train[:90%]", image_size=96, batch_size=3)
    images = next(iter(kept))[1]["image"].numpy()
    assert (images // SPLIT_STRIDE == INSTANCE_SPLITS.index("train[:90%]")).all()
    assert sorted(images % SPLIT_STRIDE) == [0, 1, 2]
    with pytest.raises(
        ValueError, match=r"^Instance segmentation splits are .*split='train\[:5\]'"
    ):
        load_instance_dataset(source, "train[:5]")


# ----------------------------------------------------------------------------- TFDS panoptic
# A 24x32 image: things "a" (an L, label 0), "b" (a blob with a hole, label 17, a segment id
# using all three PNG channels) and "c" (a crowd, label 2), on "stuff" (label 100); then one
# with a single thing (label 5).
PANOPTIC = "tfds:coco/2017_panoptic"
STUFF = 5005


def _panoptic_images():
    first = np.full((24, 32), STUFF, np.int64)
    first[2:12, 3:7] = first[8:12, 3:15] = 1001
    first[14:22, 18:30] = 70000
    first[16:19, 22:25] = STUFF
    first[0:6, 20:31] = 3003
    second = np.full((24, 32), STUFF, np.int64)
    second[4:10, 4:20] = 9
    return [
        (first, {1001: (0, False), 70000: (17, False), 3003: (2, True)}),
        (second, {9: (5, False)}),
    ]


def _panoptic_example(ids, things, skipped):
    """An example as TFDS gives it, the features in `skipped` left encoded (SkipDecoding)."""
    height, width = ids.shape
    objects = {"id": [], "area": [], "bbox": [], "label": [], "is_crowd": []}
    for segment in [*things, STUFF]:
        ys, xs = np.nonzero(ids == segment)
        label, crowd = things.get(segment, (100, False))
        box = [ys.min() / height, xs.min() / width, (ys.max() + 1) / height, (xs.max() + 1) / width]
        for key, value in zip(objects, (segment, len(ys), box, label, crowd), strict=True):
            objects[key].append(value)
    features = {
        "image": np.full((height, width, 3), 9, np.uint8),
        "panoptic_image": np.stack([ids % 256, ids // 256 % 256, ids // 65536], -1),
    }
    encoders = {"image": tf.io.encode_jpeg, "panoptic_image": tf.io.encode_png}
    for key, pixels in features.items():
        pixels = pixels.astype(np.uint8)
        features[key] = encoders[key](pixels).numpy() if key in skipped else pixels
    objects = {key: np.array(value) for key, value in objects.items()}
    return {**features, "image/id": np.int64(7), "panoptic_objects": objects}


def _panoptic_split(self, split, decoders=None, **kwargs):
    del self, kwargs
    assert split in ("validation", "train[:90%]", "train[90%:]"), split
    skipped = {
        key
        for key, decoder in (decoders or {}).items()
        if isinstance(decoder, tfds.decode.SkipDecoding)
    }
    examples = [_panoptic_example(ids, things, skipped) for ids, things in _panoptic_images()]
    spec = {
        key: tf.TensorSpec((), tf.string)
        if key in skipped
        else tf.TensorSpec((None, None, 3), tf.uint8)
        for key in ("image", "panoptic_image")
    }
    spec["image/id"] = tf.TensorSpec((), tf.int64)
    spec["panoptic_objects"] = {
        "id": tf.TensorSpec((None,), tf.int64),
        "area": tf.TensorSpec((None,), tf.int64),
        "bbox": tf.TensorSpec((None, 4), tf.float32),
        "label": tf.TensorSpec((None,), tf.int64),
        "is_crowd": tf.TensorSpec((None,), tf.bool),
    }
    dataset = tf.data.Dataset.from_generator(lambda: iter(examples), output_signature=spec)
    return dataset.apply(tf.data.experimental.assert_cardinality(len(examples)))


def test_tfds_panoptic_things_become_boxes_masks_and_coco_ground_truth(tmp_path, capsys):
    data_dir = str(tmp_path)
    options = {"image_size": 64, "batch_size": 2, "max_boxes": 4, "data_dir": data_dir}
    with tfds.testing.mock_data(num_examples=2, as_dataset_fn=_panoptic_split):
        assert is_instance_source(PANOPTIC) and is_detection_source(PANOPTIC)
        assert len(detection_class_names(PANOPTIC, data_dir)) == 80  # the things only
        assert detection_category_ids(PANOPTIC, data_dir) == list(COCO_CATEGORY_IDS)
        _, targets = next(iter(load_instance_dataset(PANOPTIC, "validation", **options)))
        (_, boxes), *_ = load_detection_dataset(PANOPTIC, "validation", **options)
        truth = tfds_truth(PANOPTIC, targets["image"].numpy(), data_dir)
        metric = COCOInstanceAP(
            80, capacity=2, max_boxes=4, max_detections=3, annotations=PANOPTIC, data_dir=data_dir
        )
        rows = targets["boxes"].numpy()
        order = np.argsort(rows[..., 5] + (rows[..., 4] < 0), axis=1, kind="stable")[:, :3]
        chosen = np.take_along_axis(rows, order[..., None], 1)
        masks = np.take_along_axis(targets["masks"].numpy(), order[..., None, None], 1)
        predicted = chosen[..., 4] >= 0
        predicted &= chosen[..., 5] == 0  # crowds are not predicted (COCO ignores them)
        metric.update_state(
            targets,
            {
                "boxes": chosen[..., :4],
                "scores": np.where(predicted, 0.9, 0.0).astype(np.float32),
                "classes": np.where(predicted, chosen[..., 4], -1).astype(np.int32),
                "num_detections": predicted.sum(1).astype(np.int32),
                "masks": masks.reshape(2, 3, 28, 2, 28, 2).mean((3, 5)),
            },
        )
        values = metric.evaluation()
        # a run tested on validation (TFDS has no test split) selects on train[90%:]; its
        # metrics score against the source's own segments, in the run's data_dir
        config = TrainConfig(
            data=PANOPTIC, data_dir=data_dir, eval_split="validation", batch_size=2, image_size=64
        )
        _, selected = next(iter(instance_segmentation.TASK.datasets(config).validation))
        run_metric = instance_segmentation.TASK.metrics(80)[0].get_config()
    code = INSTANCE_SPLITS.index("validation") * SPLIT_STRIDE
    assert targets["image"].numpy().tolist() == [code, code + 1]
    code = INSTANCE_SPLITS.index("train[90%:]") * SPLIT_STRIDE
    assert selected["image"].numpy().tolist() == [code, code + 1]
    assert (run_metric["annotations"], run_metric["data_dir"]) == (PANOPTIC, data_dir)
    assert run_metric["capacity"] == 2
    np.testing.assert_array_equal(boxes.numpy(), targets["boxes"].numpy())
    # each image's thing rows (stuff dropped), by area; the box-local masks are box_frame of the
    # segments' pixels (letterbox scale 2: 32 pixels wide at size 64)
    for ids, things in _panoptic_images():
        index = 0 if len(things) > 1 else 1
        image_rows = rows[index][rows[index, :, 4] >= 0]
        assert sorted(image_rows[:, 4]) == sorted(label for label, _ in things.values())
        for segment, (label, crowd) in things.items():
            (row,) = np.nonzero(rows[index, :, 4] == label)[0]
            x1, y1, x2, y2 = (rows[index, row, :4] / 2).round().astype(int)
            pixels = ids == segment
            assert rows[index, row, 5:].tolist() == [crowd, pixels.sum(), 2.0]
            expected = box_frame(pixels[y1:y2, x1:x2], y1, x1, (x1, y1, x2, y2))
            np.testing.assert_allclose(targets["masks"][index, row], expected, atol=1e-4)
            # the ground truth: the segment's pixels at the image's size, its row in pixels
            (at,) = np.nonzero(truth[index]["rows"][:, 4] == label)[0]
            rle = truth[index]["segmentations"][at]
            decoded = mask_api.decode({**rle, "counts": rle["counts"].encode()})
            np.testing.assert_array_equal(decoded, pixels)
            np.testing.assert_allclose(
                truth[index]["rows"][at], rows[index, row, :7] / [2, 2, 2, 2, 1, 1, 1], rtol=1e-5
            )
        assert (truth[index]["height"], truth[index]["width"]) == ids.shape
    assert values["mask_map"] == pytest.approx(1.0) and values["map"] == pytest.approx(1.0)
    # the same images again (the next validation epoch) read nothing: outside the mock, TFDS
    # would find no prepared coco/2017_panoptic in data_dir
    again = tfds_truth(PANOPTIC, targets["image"].numpy(), data_dir)
    assert len(again) == 2 and all(new is old for new, old in zip(again, truth, strict=True))
    with pytest.raises(ValueError) as caught:
        load_instance_dataset("tfds:coco/2017", "validation", batch_size=1)
    message = str(caught.value)
    assert "\n" not in message and "holds boxes only" in message, message
    assert "'coco:<path>'" in message and "'tfds:coco/2017_panoptic'" in message
    out = tmp_path / "run"
    argv = ["train", "--task", "instance_segmentation", "--data", "tfds:coco/2017"]
    assert main([*argv, "--out", str(out)]) == 2 and not out.exists()
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "'coco:<path>'" in line and "'tfds:coco/2017_panoptic'" in line, line
