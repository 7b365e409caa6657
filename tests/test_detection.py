"""RetinaNet's layers, loss and decoder against NumPy references; keras-hub takes our backbones."""

import itertools
import math

import keras
import numpy as np
import pytest

import keras_fourier
from keras_fourier import detection
from keras_fourier.layers import AnchorBoxes, DetectionDecoder, RetinaHead
from keras_fourier.layers.detection import decode_boxes, pairwise_iou
from tests.harness import check_config

pytestmark = pytest.mark.multi_backend


def _tiny(num_classes=3, size=64):
    return detection.RetinaNet(
        "gfnet_tiny", num_classes, input_shape=(size, size, 3), channels=16, stacked_convs=1
    )


def _numpy_anchors(sizes, min_level=3):
    """mmdetection's AnchorGenerator (octave base 4, 3 scales, ratios 0.5/1/2) in NumPy."""
    rows = []
    for level, (height, width) in enumerate(sizes, start=min_level):
        stride = 2**level
        base = []
        for ratio in (0.5, 1.0, 2.0):
            h_ratio = math.sqrt(ratio)
            for k in range(3):
                size = 4 * stride * 2 ** (k / 3)
                w, h = size / h_ratio, size * h_ratio
                base.append([-w / 2, -h / 2, w / 2, h / 2])
        for y, x, anchor in itertools.product(range(height), range(width), base):
            rows.append(np.add(anchor, [x * stride, y * stride] * 2))
    return np.array(rows, np.float32)


def test_anchors_are_mmdetections_in_the_heads_order():
    maps = [keras.ops.zeros((2, 8 // 2**i, 6 // 2**i + 1, 4)) for i in range(3)]
    anchors = keras.ops.convert_to_numpy(AnchorBoxes()(maps))
    expected = _numpy_anchors([(8, 7), (4, 4), (2, 2)])
    assert anchors.shape == (2, len(expected), 4)
    np.testing.assert_allclose(anchors[1], expected, rtol=1e-6, atol=1e-4)


def test_layers_build_from_their_config_and_report_their_output_shape():
    maps = [np.zeros((2, 8 // 2**i, 8 // 2**i, 8), "float32") for i in range(2)]
    for layer in (
        AnchorBoxes(min_level=2, aspect_ratios=(1.0,)),
        RetinaHead(3, num_anchors=3, channels=8, stacked_convs=1),
        DetectionDecoder(score_threshold=0.1, max_detections=7),
    ):
        inputs = maps if not isinstance(layer, DetectionDecoder) else [np.zeros((2, 9, 11))]
        outputs = layer(*inputs) if isinstance(layer, DetectionDecoder) else layer(inputs)
        check_config(layer)
        if not isinstance(layer, DetectionDecoder):
            assert tuple(outputs.shape) == layer.compute_output_shape([m.shape for m in maps])
    assert tuple(RetinaHead(3, num_anchors=3, channels=8)(maps).shape) == (2, 240, 7)


def _numpy_nms(boxes, scores, classes, threshold):
    """Greedy per-class NMS over boxes sorted by score."""
    order = np.argsort(-scores, kind="stable")
    kept = []
    for i in order:
        if all(
            classes[j] != classes[i]
            or keras.ops.convert_to_numpy(pairwise_iou(boxes[j][None], boxes[i][None]))[0, 0]
            <= threshold
            for j in kept
        ):
            kept.append(i)
    return kept


def test_decoder_keeps_what_greedy_per_class_nms_keeps():
    rng = np.random.default_rng(1)
    count, classes = 40, 2
    anchors = np.concatenate([rng.uniform(0, 40, (count, 2)), rng.uniform(50, 64, (count, 2))], 1)
    deltas = rng.normal(0, 0.1, (count, 4))
    logits = rng.normal(0, 2, (count, classes))
    raw = np.concatenate([anchors, deltas, logits], 1)[None].astype("float32")
    out = DetectionDecoder(score_threshold=0.3, iou_threshold=0.5, max_detections=30)(
        raw, np.zeros((1, 64, 64, 3), "float32")
    )
    boxes = keras.ops.convert_to_numpy(
        decode_boxes(anchors.astype("float32"), deltas.astype("float32"))
    )
    boxes = np.clip(boxes, 0, 64)
    pairs = [(a, c) for a in range(count) for c in range(classes)]
    scores = np.array([1 / (1 + np.exp(-logits[a, c])) for a, c in pairs])
    valid = [i for i, s in enumerate(scores) if s > 0.3]
    kept = _numpy_nms(
        boxes[[pairs[i][0] for i in valid]].astype("float32"),
        scores[valid],
        np.array([pairs[i][1] for i in valid]),
        0.5,
    )
    expected = sorted((scores[valid][i] for i in kept), reverse=True)[:30]
    number = int(keras.ops.convert_to_numpy(out["num_detections"])[0])
    assert number == len(expected) > 3
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(out["scores"])[0, :number], expected, rtol=1e-5
    )
    assert (keras.ops.convert_to_numpy(out["classes"])[0, number:] == -1).all()


def test_loss_assigns_anchors_as_mmdetection_and_is_zero_free_of_targets():
    anchors = np.array([[0, 0, 10, 10], [0, 0, 20, 20], [30, 30, 40, 40]], "float32")
    targets = np.full((1, 3, 8), -1.0, "float32")
    targets[..., [0, 1, 2, 3, 5, 6, 7]] = 0
    targets[0, 0, :6] = [0, 0, 10, 12, 1, 0]  # IoU 0.83 with anchor 0, 0.3 with anchor 1
    targets[0, 1, :6] = [31, 31, 40, 40, 0, 1]  # a crowd box: no anchor
    positive, negative, matched = detection.losses.assign_anchors(anchors[None], targets)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(positive)[0], [1, 0, 0])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(negative)[0], [0, 1, 1])
    assert int(keras.ops.convert_to_numpy(matched)[0, 0]) == 0
    # Perfect deltas and confident logits: the loss is near 0; wrong classes raise it.
    deltas = keras.ops.convert_to_numpy(
        detection.losses.encode_boxes(anchors[:1], targets[0, :1, :4])
    )
    logits = np.full((3, 2), -20.0, "float32")
    logits[0, 1] = 20
    raw = np.concatenate([anchors, np.concatenate([deltas, np.zeros((2, 4))]), logits], 1)
    loss = detection.RetinaNetLoss()
    assert float(loss(targets, raw[None].astype("float32"))) < 1e-6
    logits[0] = [20, -20]
    wrong = np.concatenate([anchors, np.concatenate([deltas, np.zeros((2, 4))]), logits], 1)
    assert float(loss(targets, wrong[None].astype("float32"))) > 10


@pytest.mark.slow
def test_retinanet_trains_and_detects_a_box_after_fitting_one_batch():
    keras.utils.set_random_seed(0)
    model = detection.RetinaNet(
        "gfnet_tiny", 2, input_shape=(32, 32, 3), channels=16, stacked_convs=1, anchor_scale=2
    )
    images = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    targets = np.full((2, 2, 8), -1.0, "float32")
    targets[..., [0, 1, 2, 3, 5, 6]] = 0
    targets[..., 7] = 1
    targets[0, 0, :5] = [4, 4, 20, 20, 1]
    targets[1, 0, :5] = [10, 8, 30, 28, 0]
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=detection.RetinaNetLoss())
    history = model.fit(images, targets, epochs=30, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
    found = detection.detector(model).predict(images, verbose=0)
    for index in range(2):
        best = found["boxes"][index, 0]
        truth = targets[index, 0, :4]
        iou = float(keras.ops.convert_to_numpy(pairwise_iou(best[None], truth[None]))[0, 0])
        assert found["classes"][index, 0] == targets[index, 0, 4]
        assert iou > 0.5, (best, truth)


def test_retinanet_takes_any_size_the_stride_divides_and_refuses_others():
    model = detection.RetinaNet("gfnet_tiny", 4, channels=16, stacked_convs=1)
    raw = model(np.zeros((1, 64, 96, 3), "float32"))
    assert tuple(raw.shape) == (1, 9 * (8 * 12 + 4 * 6 + 2 * 3 + 1 * 2 + 1 * 1), 12)
    with pytest.raises(ValueError, match=r"Received: neck='bifpn'$"):
        detection.RetinaNet("hornet_t_7x7", neck="bifpn")
    with pytest.raises(ValueError, match=r"multiples of 32 .*Received: input_shape=\(60, 64, 3\)"):
        detection.RetinaNet("hornet_t_7x7", input_shape=(60, 64, 3))


def test_a_saved_retinanet_loads_with_the_same_outputs(tmp_path):
    model = _tiny()
    images = np.random.default_rng(2).uniform(0, 255, (1, 64, 64, 3)).astype("float32")
    path = str(tmp_path / "retinanet.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(again(images)),
        keras.ops.convert_to_numpy(model(images)),
        rtol=1e-5,
        atol=1e-5,
    )
    weights = str(tmp_path / "retinanet.weights.h5")
    model.save_weights(weights)
    loaded = detection.RetinaNet(
        "gfnet_tiny", 3, input_shape=(64, 64, 3), channels=16, stacked_convs=1, weights=weights
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(images)),
        keras.ops.convert_to_numpy(model(images)),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.single_backend
@pytest.mark.slow
def test_keras_hub_retinanet_takes_a_package_backbone_unchanged():
    import keras_hub

    # A small hierarchical composition (HorNet's gnConv mixer, four stages).
    hierarchical = keras_fourier.build_model(
        "gnconv",
        depths=[1, 1, 1, 1],
        dims=[8, 16, 32, 64],
        include_top=False,
        input_shape=(64, 64, 3),
    )
    encoder = detection.image_encoder(hierarchical, input_shape=(64, 64, 3))
    assert sorted(encoder.pyramid_outputs) == ["P2", "P3", "P4", "P5"]
    assert [tuple(t.shape) for t in encoder.pyramid_outputs.values()] == [
        (None, 16, 16, 8),
        (None, 8, 8, 16),
        (None, 4, 4, 32),
        (None, 2, 2, 64),
    ]
    backbone = keras_hub.models.RetinaNetBackbone(
        image_encoder=encoder, min_level=3, max_level=7, use_p5=False, image_shape=(64, 64, 3)
    )
    anchors = keras_hub.layers.AnchorGenerator(
        bounding_box_format="xyxy",
        min_level=3,
        max_level=7,
        num_scales=3,
        aspect_ratios=[0.5, 1.0, 2.0],
        anchor_size=4,
    )
    model = keras_hub.models.RetinaNetObjectDetector(
        backbone=backbone, anchor_generator=anchors, num_classes=3, bounding_box_format="xyxy"
    )
    images = np.random.default_rng(0).uniform(0, 255, (2, 64, 64, 3)).astype("float32")
    boxes = {
        "boxes": np.array([[[4, 4, 40, 40]], [[10, 12, 50, 60]]], "float32"),
        "labels": np.array([[1], [2]], "int32"),
    }
    model.compile(optimizer="adam")
    history = model.fit(images, boxes, epochs=1, verbose=0)
    assert math.isfinite(history.history["loss"][0])
    found = model.predict(images, verbose=0)
    assert found["boxes"].shape == (2, 100, 4)
