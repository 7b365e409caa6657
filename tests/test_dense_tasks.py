"""Dense tasks at the library level: metrics against NumPy, the segmentation and inpainting tasks.

The tasks are driven through their `Task` interface as the trainer will drive
them (data, model, loss, metrics, evaluation summary, predict), on a tiny
AFNO backbone and few steps.
"""

import dataclasses
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_fourier.layers import MaskComposite
from keras_fourier.metrics import (
    PSNR,
    SSIM,
    MeanIoU,
    PixelAccuracy,
    SegmentationCrossEntropy,
    psnr,
    ssim,
)
from keras_fourier.tasks import PredictRequest, get_task
from keras_fourier.training import TrainConfig


def _reference_confusion(labels, predictions, num_classes):
    keep = labels != 255
    return np.bincount(
        num_classes * labels[keep] + predictions[keep], minlength=num_classes**2
    ).reshape(num_classes, num_classes)


def test_segmentation_metrics_accumulate_the_whole_split():
    rng = np.random.default_rng(0)
    num_classes = 5
    labels = rng.integers(0, num_classes, size=(6, 9, 7))
    labels[rng.random(labels.shape) < 0.2] = 255
    labels[:, :, 0] = 3  # class 4 is never predicted nor (mostly) labelled
    logits = rng.normal(size=(6, 9, 7, num_classes)).astype("float32")
    logits[..., 4] -= 100.0
    predictions = logits.argmax(-1)
    matrix = _reference_confusion(labels, predictions, num_classes)
    union = matrix.sum(0) + matrix.sum(1) - np.diag(matrix)
    iou = np.diag(matrix) / np.where(union > 0, union, np.nan)
    miou, per_batch = MeanIoU(num_classes), []
    accuracy = PixelAccuracy(num_classes)
    for start in range(0, 6, 2):  # three batches: the split's value, not a batch mean
        batch = slice(start, start + 2)
        miou.update_state(labels[batch], logits[batch])
        accuracy.update_state(labels[batch], logits[batch])
        single = MeanIoU(num_classes)
        single.update_state(labels[batch], logits[batch])
        per_batch.append(float(single.result()))
    np.testing.assert_allclose(float(miou.result()), np.nanmean(iou), rtol=1e-6)
    np.testing.assert_allclose(miou.per_class_iou(), iou, rtol=1e-6)
    assert not np.isclose(np.mean(per_batch), np.nanmean(iou), rtol=1e-4)
    expected_accuracy = np.trace(matrix) / matrix.sum()
    np.testing.assert_allclose(float(accuracy.result()), expected_accuracy, rtol=1e-6)
    np.testing.assert_allclose(miou.pixel_accuracy(), expected_accuracy, rtol=1e-6)
    # Auxiliary logits after the classes' are ignored by the metrics.
    both = MeanIoU(num_classes)
    both.update_state(labels, np.concatenate([logits, -logits], -1))
    np.testing.assert_allclose(float(both.result()), np.nanmean(iou), rtol=1e-6)


def test_segmentation_cross_entropy_against_numpy():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 4, size=(3, 5, 6))
    labels[rng.random(labels.shape) < 0.3] = 255
    main = rng.normal(size=(3, 5, 6, 4)).astype("float32")
    auxiliary = rng.normal(size=(3, 5, 6, 4)).astype("float32")

    def reference(logits):
        log_probabilities = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        keep = labels != 255
        picked = np.take_along_axis(log_probabilities, np.where(keep, labels, 0)[..., None], -1)
        return -(picked[..., 0] * keep).sum() / keep.sum()

    loss = SegmentationCrossEntropy()
    np.testing.assert_allclose(float(loss(labels, main)), reference(main), rtol=1e-5)
    with_auxiliary = SegmentationCrossEntropy(auxiliary_weight=0.4)
    np.testing.assert_allclose(
        float(with_auxiliary(labels, np.concatenate([main, auxiliary], -1))),
        reference(main) + 0.4 * reference(auxiliary),
        rtol=1e-5,
    )
    assert float(loss(np.full((1, 2, 2), 255), main[:1, :2, :2])) == 0.0
    restored = SegmentationCrossEntropy.from_config(with_auxiliary.get_config())
    assert restored.auxiliary_weight == 0.4 and restored.ignore_index == 255


def test_psnr_and_ssim_match_tensorflow():
    rng = np.random.default_rng(2)
    clean = rng.uniform(0, 255, size=(4, 24, 20, 3)).astype("float32")
    noisy = np.clip(clean + rng.normal(0, 20, size=clean.shape), 0, 255).astype("float32")
    np.testing.assert_allclose(psnr(clean, noisy), tf.image.psnr(clean, noisy, 255.0), rtol=1e-5)
    np.testing.assert_allclose(ssim(clean, noisy), tf.image.ssim(clean, noisy, 255.0), atol=1e-5)
    metric_psnr, metric_ssim = PSNR(), SSIM()
    for batch in (slice(0, 1), slice(1, 4)):
        metric_psnr.update_state(clean[batch], noisy[batch])
        metric_ssim.update_state(clean[batch], noisy[batch])
    np.testing.assert_allclose(
        float(metric_psnr.result()), tf.reduce_mean(tf.image.psnr(clean, noisy, 255.0)), rtol=1e-5
    )
    np.testing.assert_allclose(
        float(metric_ssim.result()), tf.reduce_mean(tf.image.ssim(clean, noisy, 255.0)), atol=1e-5
    )
    with pytest.raises(ValueError, match="Received: image size=8x8"):
        ssim(clean[:, :8, :8], noisy[:, :8, :8])


def test_inpainting_backbone_starts_a_segmenter_that_writes_label_maps(tmp_path):
    inpainting, segmentation = get_task("inpainting"), get_task("segmentation")
    config = TrainConfig(model="afno_tiny", data="digits", batch_size=8, image_size=32)
    keras.utils.set_random_seed(0)
    model = inpainting.build_model(config, 3)
    inputs, targets = next(iter(inpainting.datasets(config).validation))
    restored = model.predict(inputs, verbose=0)
    visible = inputs["mask"].numpy()[..., 0] == 0  # the composite keeps the visible pixels
    np.testing.assert_allclose(restored[visible], targets.numpy()[visible], atol=1e-3)
    saved = str(tmp_path / "inpainting.keras")
    model.save(saved)
    # A segmenter starts from the inpainting backbone: its backbone layers equal the saved ones.
    start = dataclasses.replace(config, weights=saved)
    segmenter = segmentation.build_model(start, 11)
    source = keras.saving.load_model(saved)
    copied = 0
    for layer in source.get_layer(model.layers[-2].name).layers:
        if layer.weights and layer.name.startswith("stage"):
            for ours, theirs in zip(
                segmenter.get_layer(layer.name).get_weights(), layer.get_weights(), strict=True
            ):
                np.testing.assert_array_equal(ours, theirs)
            copied += 1
    assert copied >= 4
    other = dataclasses.replace(config, model="gfnet_tiny", weights=saved)
    with pytest.raises(ValueError, match="Received: weights="):
        segmentation.build_model(other, 11)
    # predict writes a label map and an overlay per image, at the image's own size.
    path = str(tmp_path / "scene.png")
    tf.io.write_file(path, tf.io.encode_png(tf.zeros((50, 70, 3), tf.uint8)))
    out = str(tmp_path / "predictions")
    lines = segmentation.predict(segmenter, PredictRequest([path], {}, out=out))
    assert sorted(os.listdir(out)) == ["scene_labels.png", "scene_overlay.png"]
    label_map = tf.io.decode_png(tf.io.read_file(os.path.join(out, "scene_labels.png"))).numpy()
    overlay = tf.io.decode_png(tf.io.read_file(os.path.join(out, "scene_overlay.png"))).numpy()
    assert label_map.shape == (50, 70, 1) and label_map.max() < 11 and overlay.shape == (50, 70, 3)
    assert lines[0].startswith(path)


def test_mask_composite_keeps_visible_pixels_and_round_trips(tmp_path):
    """The inpainting output layer: visible pixels as given, hidden ones from the prediction."""
    rng = np.random.default_rng(0)
    masked = rng.uniform(0, 255, (2, 4, 4, 3)).astype("float32")
    mask = (rng.uniform(size=(2, 4, 4, 1)) < 0.5).astype("float32")
    prediction = rng.uniform(-1, 1, (2, 4, 4, 3)).astype("float32")
    inputs = [keras.Input((4, 4, 3)), keras.Input((4, 4, 1)), keras.Input((4, 4, 3))]
    model = keras.Model(inputs, MaskComposite(name="restore")(inputs))
    expected = masked * (1 - mask) + 127.5 * (1 + prediction) * mask
    np.testing.assert_allclose(model.predict([masked, mask, prediction], verbose=0), expected, 1e-6)
    model.save(tmp_path / "composite.keras")
    loaded = keras.saving.load_model(tmp_path / "composite.keras")
    assert loaded.get_layer("restore").get_config() == model.get_layer("restore").get_config()
    np.testing.assert_allclose(
        loaded.predict([masked, mask, prediction], verbose=0), expected, 1e-6
    )


def test_default_digit_job_shortens_the_recipe_only_where_left_unset():
    from keras_fourier.training.plan import resolve_config

    default = resolve_config(TrainConfig(task="segmentation"))
    assert (default.recipe, default.epochs, default.batch_size) == ("deit", 10, 32)
    assert default.learning_rate == 3e-3  # the rest is the recipe's
    assert resolve_config(TrainConfig(task="segmentation", epochs=3)).epochs == 3
    named = resolve_config(TrainConfig(task="segmentation", recipe="deit"))
    assert (named.epochs, named.batch_size) == (20, 64)
    other = resolve_config(TrainConfig(task="segmentation", data="tfds:oxford_iiit_pet"))
    assert (other.epochs, other.batch_size) == (20, 64)


def test_per_class_iou_breakdown_names_the_classes():
    task = get_task("segmentation")
    (miou, accuracy) = task.metrics(3)
    labels = np.array([[[0, 1, 1, 255]]])
    miou.update_state(labels, np.eye(3)[[[[0, 0, 1, 1]]]])
    values = task.breakdown([miou, accuracy], {"class_names": ["sky", "road", "car"]})
    assert values == {"iou/sky": 0.5, "iou/road": 0.5}  # "car": in no label, no prediction
    assert task.breakdown([miou, accuracy], {}) == {"iou/0": 0.5, "iou/1": 0.5}
    lines = task.details({"miou": 0.5, **values})
    assert lines == ["per-class IoU:", "  sky  0.5000   road 0.5000"]
