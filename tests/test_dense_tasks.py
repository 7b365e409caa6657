"""Dense tasks at the library level: metrics against NumPy, the segmentation and inpainting tasks.

The tasks are driven through their `Task` interface as the trainer will drive
them (data, model, loss, metrics, evaluation summary, predict), on a tiny
AFNO backbone and few steps.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

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


def _compile(task, model, num_classes, config):
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=task.loss(config),
        metrics=task.metrics(num_classes, training=True),
    )
    return model


def test_segmentation_task_trains_scores_and_predicts(tmp_path):
    task = get_task("segmentation")
    config = TrainConfig(model="afno_tiny", data="digit_canvas", batch_size=8, image_size=64)
    data = task.datasets(config)
    assert data.num_classes == 11 and data.splits["train"] == "'train', 1,000 images"
    keras.utils.set_random_seed(0)
    model = _compile(task, task.build_model(config, 11), 11, config)
    task.check_outputs(model, 11, "data 'digit_canvas'")
    history = model.fit(data.train.take(3), validation_data=data.validation.take(2), verbose=0)
    assert {"loss", "miou", "pixel_accuracy", task.monitor} <= set(history.history)
    inference = task.inference_model(model)
    assert inference.output_shape == (None, 64, 64, 11)
    test = task.evaluation_data(
        inference,
        "digit_canvas",
        "test",
        batch_size=50,
        data_dir=None,
        eval_examples=0,
        on_bad_image="error",
        labels={},
    )
    inference.compile(loss=task.loss(), metrics=task.metrics(11))
    metrics = inference.evaluate(test, return_dict=True, verbose=0)
    lines = task.summary(metrics)
    assert lines[-1] == f"test_miou={metrics['miou']:.4f}"
    assert 0.0 <= metrics["miou"] <= 1.0 and 0.0 <= metrics["pixel_accuracy"] <= 1.0
    # predict writes a label map and an overlay per image, of the image's own size.
    image = tf.io.encode_png(tf.zeros((50, 70, 3), tf.uint8))
    path = str(tmp_path / "scene.png")
    tf.io.write_file(path, image)
    out = str(tmp_path / "predictions")
    lines = task.predict(model, PredictRequest([path], {"class_names": None}, out=out))
    assert sorted(os.listdir(out)) == ["scene_labels.png", "scene_overlay.png"]
    label_map = tf.io.decode_png(tf.io.read_file(os.path.join(out, "scene_labels.png"))).numpy()
    assert label_map.shape == (50, 70, 1) and label_map.max() < 11
    assert lines[0].startswith(path)
    with pytest.raises(ValueError, match="Received: output_shape"):
        task.check_outputs(inference, 7, "data 'x'")


def test_inpainting_task_and_backbone_transfer(tmp_path):
    inpainting, segmentation = get_task("inpainting"), get_task("segmentation")
    config = TrainConfig(model="afno_tiny", data="digit_canvas", batch_size=8, image_size=64)
    data = inpainting.datasets(config)
    keras.utils.set_random_seed(0)
    model = _compile(inpainting, inpainting.build_model(config), 3, config)
    history = model.fit(data.train.take(2), validation_data=data.validation.take(1), verbose=0)
    assert {"loss", "psnr", "ssim", "val_psnr"} <= set(history.history)
    inputs, targets = next(iter(data.validation))
    restored = model.predict(inputs, verbose=0)
    visible = inputs["mask"].numpy()[..., 0] == 0
    np.testing.assert_allclose(restored[visible], targets.numpy()[visible], atol=1e-3)
    assert inpainting.summary({"psnr": 20.0, "ssim": 0.5})[-1] == "test_psnr=20.0000"
    saved = str(tmp_path / "inpainting.keras")
    model.save(saved)
    # A segmenter starts from the inpainting backbone: its backbone layers equal the saved ones.
    start = TrainConfig(model="afno_tiny", data="digit_canvas", image_size=64, weights=saved)
    segmenter = segmentation.build_model(start, 11)
    source = keras.saving.load_model(saved)
    copied = 0
    for layer in source.layers[-2].layers:  # the UPerNet inside the inpainting model
        if layer.weights and layer.name.startswith("stage"):
            for a, b in zip(
                layer.get_weights(), segmenter.get_layer(layer.name).get_weights(), strict=True
            ):
                np.testing.assert_array_equal(a, b)
            copied += 1
    assert copied >= 4
    out = str(tmp_path / "restored")
    path = str(tmp_path / "digit.png")
    tf.io.write_file(path, tf.io.encode_png(tf.fill((64, 64, 3), tf.constant(90, tf.uint8))))
    inpainting.predict(model, PredictRequest([path], {}, out=out))
    assert sorted(os.listdir(out)) == ["digit_masked.png", "digit_restored.png"]
