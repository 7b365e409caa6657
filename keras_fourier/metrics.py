"""Losses and metrics of the dense tasks, in `keras.ops` only (every backend).

* Segmentation: :class:`SegmentationCrossEntropy` (cross-entropy on
  logits, pixels labelled `IGNORE_INDEX` left out), :class:`MeanIoU` and
  :class:`PixelAccuracy`. Both metrics accumulate one confusion matrix over
  everything they see, so after a pass over a split they give the split's
  mIoU and pixel accuracy, not an average of per-batch values;
  :meth:`MeanIoU.per_class_iou` gives each class's IoU.
* Images: :func:`psnr` and :func:`ssim` per image (as `tf.image.psnr` and
  `tf.image.ssim`: an 11x11 Gaussian window of sigma 1.5, K1 0.01, K2 0.03,
  valid positions only), and :class:`PSNR` and :class:`SSIM` averaging them
  over every image seen.
* Fields (the forecast task): :class:`FieldMSE` (the loss),
  :class:`RelativeL2`, :class:`ChannelRMSE` and :class:`AnomalyCorrelation`.
  Their targets are (B, H, W, 2 C): the true next state, then the
  climatology (see :mod:`keras_fourier.data.fields`); predictions are
  (B, H, W, C). Every value is in the normalised (z-score) units the
  model sees.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np
from keras import ops

IGNORE_INDEX = 255


@keras.saving.register_keras_serializable(package="keras_fourier")
class SegmentationCrossEntropy(keras.losses.Loss):
    """Per-pixel cross-entropy that leaves out pixels labelled `ignore_index`.

    The loss is the mean over the labelled pixels of the batch (0 for a
    batch with none). With `auxiliary_weight` > 0 the predictions hold the
    main logits then the auxiliary head's along the last axis (2 x
    num_classes channels) and the loss is CE(main) + auxiliary_weight *
    CE(auxiliary), as the official UPerNet configs train (weight 0.4).

    Args:
        ignore_index: the label of pixels that count nowhere. Default 255.
        auxiliary_weight: the weight of the auxiliary logits; 0 (default)
            means the predictions are the logits alone.
        from_logits: whether predictions are logits. Default True.
        name: the loss name. Default "segmentation_cross_entropy".
        **kwargs: further `keras.losses.Loss` arguments (`reduction`, `dtype`).

    Call arguments:
        y_true: int labels (B, H, W).
        y_pred: logits (B, H, W, num_classes), or (B, H, W, 2 num_classes)
            with an auxiliary weight.

    Returns:
        The loss, a scalar.

    Example:
        >>> loss = SegmentationCrossEntropy()
        >>> round(float(loss(np.array([[[0, 255]]]), np.array([[[[0.0, 0.0], [9.0, 0.0]]]]))), 4)
        0.6931
    """

    def __init__(
        self,
        ignore_index: int = IGNORE_INDEX,
        auxiliary_weight: float = 0.0,
        from_logits: bool = True,
        name: str = "segmentation_cross_entropy",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        self.ignore_index = ignore_index
        self.auxiliary_weight = auxiliary_weight
        self.from_logits = from_logits

    def _cross_entropy(self, labels, valid, logits):
        pixels = ops.sparse_categorical_crossentropy(labels, logits, from_logits=self.from_logits)
        return ops.sum(pixels * valid, axis=tuple(range(1, len(pixels.shape))))

    def call(self, y_true, y_pred):
        labels = ops.cast(y_true, "int32")
        valid = ops.cast(ops.not_equal(labels, self.ignore_index), y_pred.dtype)
        labels = labels * ops.cast(valid, "int32")
        if self.auxiliary_weight:
            main, auxiliary = ops.split(y_pred, 2, axis=-1)
            per_example = self._cross_entropy(labels, valid, main)
            per_example += self.auxiliary_weight * self._cross_entropy(labels, valid, auxiliary)
        else:
            per_example = self._cross_entropy(labels, valid, y_pred)
        # Each example's sum, scaled so that the batch mean is the mean over labelled pixels.
        batch = ops.cast(ops.shape(labels)[0], y_pred.dtype)
        return per_example * batch / ops.maximum(ops.sum(valid), 1.0)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "ignore_index": self.ignore_index,
            "auxiliary_weight": self.auxiliary_weight,
            "from_logits": self.from_logits,
        }


class _ConfusionMatrix(keras.metrics.MeanIoU):
    """A streaming confusion matrix of argmax predictions against labels, ignoring a label."""

    def __init__(
        self,
        num_classes: int,
        ignore_index: int = IGNORE_INDEX,
        name: str | None = None,
        dtype=None,
    ):
        super().__init__(
            num_classes,
            name=name,
            dtype=dtype,
            ignore_class=ignore_index,
            sparse_y_true=True,
            sparse_y_pred=False,
        )
        self.ignore_index = ignore_index

    def update_state(self, y_true, y_pred, sample_weight=None):
        # Predictions may carry an auxiliary head's logits after the classes' (training).
        return super().update_state(y_true, y_pred[..., : self.num_classes], sample_weight)

    def confusion_matrix(self) -> np.ndarray:
        """The matrix accumulated so far: rows are labels, columns predictions (NumPy)."""
        return np.asarray(ops.convert_to_numpy(self.total_cm))

    def get_config(self) -> dict:
        return {
            "num_classes": self.num_classes,
            "ignore_index": self.ignore_index,
            "name": self.name,
            "dtype": self.dtype,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class MeanIoU(_ConfusionMatrix):
    """Mean intersection over union of a split, from a confusion matrix over all its pixels.

    Classes that appear neither in the labels nor in the predictions seen
    are left out of the mean (as mmsegmentation's `nanmean`).

    Args:
        num_classes: the number of classes.
        ignore_index: the label of pixels that count nowhere. Default 255.
        name: the metric name. Default "miou".
        dtype: the dtype of the matrix. Default None (float32).

    Call arguments (`update_state`):
        y_true: int labels (B, H, W).
        y_pred: logits or probabilities (B, H, W, num_classes).

    Returns:
        `result()`: the mean IoU in [0, 1]; NaN before any labelled pixel
        (a split whose every pixel is ignored scores nothing).

    Example:
        >>> metric = MeanIoU(2)
        >>> _ = metric.update_state(np.array([[[0, 1, 1, 255]]]), np.eye(2)[[[[0, 0, 1, 1]]]])
        >>> float(metric.result()), metric.per_class_iou().tolist(), metric.pixel_accuracy()
        (0.5, [0.5, 0.5], 0.6666666666666666)
    """

    def __init__(
        self, num_classes: int, ignore_index: int = IGNORE_INDEX, name: str = "miou", dtype=None
    ):
        super().__init__(num_classes, ignore_index, name, dtype)

    def result(self):
        return ops.where(ops.sum(self.total_cm) > 0, super().result(), float("nan"))

    def per_class_iou(self) -> np.ndarray:
        """Each class's IoU (NaN for a class absent from labels and predictions) (NumPy)."""
        matrix = self.confusion_matrix().astype(np.float64)
        true_positives = np.diag(matrix)
        union = matrix.sum(0) + matrix.sum(1) - true_positives
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(union > 0, true_positives / union, np.nan)

    def pixel_accuracy(self) -> float:
        """The share of labelled pixels predicted right."""
        matrix = self.confusion_matrix().astype(np.float64)
        return float(np.trace(matrix) / max(matrix.sum(), 1.0))


@keras.saving.register_keras_serializable(package="keras_fourier")
class PixelAccuracy(_ConfusionMatrix):
    """The share of labelled pixels of a split predicted right, over all pixels seen.

    Args:
        num_classes: the number of classes.
        ignore_index: the label of pixels that count nowhere. Default 255.
        name: the metric name. Default "pixel_accuracy".
        dtype: the dtype of the matrix. Default None (float32).

    Returns:
        `result()`: the accuracy in [0, 1].

    Example:
        >>> metric = PixelAccuracy(2)
        >>> _ = metric.update_state(np.array([[[0, 1, 255]]]), np.eye(2)[[[[0, 0, 1]]]])
        >>> float(metric.result())
        0.5
    """

    def __init__(
        self,
        num_classes: int,
        ignore_index: int = IGNORE_INDEX,
        name: str = "pixel_accuracy",
        dtype=None,
    ):
        super().__init__(num_classes, ignore_index, name, dtype)

    def result(self):
        total = ops.sum(self.total_cm)
        return ops.divide_no_nan(ops.trace(self.total_cm), total)


def _check_images(y_true, y_pred):
    y_true = ops.convert_to_tensor(y_true, "float32")
    y_pred = ops.convert_to_tensor(y_pred, "float32")
    if len(y_true.shape) != 4 or tuple(y_true.shape[1:]) != tuple(y_pred.shape[1:]):
        raise ValueError(
            "psnr and ssim take two batches of images (B, H, W, C) of the same shape. "
            f"Received: y_true.shape={tuple(y_true.shape)}, y_pred.shape={tuple(y_pred.shape)}"
        )
    return y_true, y_pred


def psnr(y_true, y_pred, max_val: float = 255.0):
    """Peak signal-to-noise ratio of each image, in dB (as `tf.image.psnr`).

    Args:
        y_true: images (B, H, W, C).
        y_pred: images of the same shape.
        max_val: the largest possible pixel value. Default 255.

    Returns:
        (B,) float32: 20 log10(max_val) - 10 log10(MSE).

    Example:
        >>> float(psnr(np.zeros((1, 2, 2, 1)), np.full((1, 2, 2, 1), 25.5))[0])
        20.0
    """
    y_true, y_pred = _check_images(y_true, y_pred)
    mse = ops.mean(ops.square(y_true - y_pred), axis=(1, 2, 3))
    return 20.0 * float(np.log10(max_val)) - 10.0 * ops.log(mse) / float(np.log(10.0))


def _gaussian_window(size: int, sigma: float, channels: int) -> np.ndarray:
    coordinates = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    line = np.exp(-(coordinates**2) / (2.0 * sigma**2))
    window = np.outer(line, line)
    window /= window.sum()
    return np.tile(window[:, :, None, None], (1, 1, channels, 1)).astype(np.float32)


def ssim(
    y_true,
    y_pred,
    max_val: float = 255.0,
    filter_size: int = 11,
    filter_sigma: float = 1.5,
    k1: float = 0.01,
    k2: float = 0.03,
):
    """Structural similarity of each image (as `tf.image.ssim`), averaged over its channels.

    Args:
        y_true: images (B, H, W, C), H and W at least `filter_size`.
        y_pred: images of the same shape.
        max_val: the largest possible pixel value. Default 255.
        filter_size: the Gaussian window's size. Default 11.
        filter_sigma: its standard deviation. Default 1.5.
        k1: the luminance constant. Default 0.01.
        k2: the contrast constant. Default 0.03.

    Returns:
        (B,) float32 SSIM values in [-1, 1].

    Example:
        >>> float(ssim(np.ones((1, 16, 16, 1)), np.ones((1, 16, 16, 1)))[0])
        1.0
    """
    y_true, y_pred = _check_images(y_true, y_pred)
    height, width, channels = y_true.shape[1:]
    if height is not None and width is not None and min(height, width) < filter_size:
        raise ValueError(
            f"ssim needs images of at least {filter_size}x{filter_size} pixels. "
            f"Received: image size={height}x{width}"
        )
    window = ops.convert_to_tensor(_gaussian_window(filter_size, filter_sigma, channels))

    def local_mean(images):
        return ops.depthwise_conv(images, window, strides=1, padding="valid")

    c1, c2 = (k1 * max_val) ** 2, (k2 * max_val) ** 2
    mean_true, mean_pred = local_mean(y_true), local_mean(y_pred)
    product = 2.0 * mean_true * mean_pred
    luminance = (product + c1) / (ops.square(mean_true) + ops.square(mean_pred) + c1)
    cross = 2.0 * local_mean(y_true * y_pred)
    squares = local_mean(ops.square(y_true) + ops.square(y_pred))
    structure = (cross - product + c2) / (
        squares - ops.square(mean_true) - ops.square(mean_pred) + c2
    )
    return ops.mean(luminance * structure, axis=(1, 2, 3))


class _ImageMean(keras.metrics.MeanMetricWrapper):
    """The mean over every image seen of a per-image function of `max_val` (PSNR, SSIM)."""

    def __init__(self, function: Callable, max_val: float, name: str, dtype=None):
        super().__init__(function, name=name, dtype=dtype, max_val=max_val)
        self.max_val = max_val

    def get_config(self) -> dict:
        return {"max_val": self.max_val, "name": self.name, "dtype": self.dtype}


@keras.saving.register_keras_serializable(package="keras_fourier")
class PSNR(_ImageMean):
    """The mean over every image seen of its PSNR (:func:`psnr`), in dB.

    Args:
        max_val: the largest possible pixel value. Default 255.
        name: the metric name. Default "psnr".
        dtype: the dtype of the mean. Default None.

    Example:
        >>> metric = PSNR()
        >>> metric.update_state(np.zeros((1, 2, 2, 1)), np.full((1, 2, 2, 1), 25.5))
        >>> float(metric.result())
        20.0
    """

    def __init__(self, max_val: float = 255.0, name: str = "psnr", dtype=None):
        super().__init__(psnr, max_val, name, dtype)


@keras.saving.register_keras_serializable(package="keras_fourier")
class SSIM(_ImageMean):
    """The mean over every image seen of its SSIM (:func:`ssim`).

    Args:
        max_val: the largest possible pixel value. Default 255.
        name: the metric name. Default "ssim".
        dtype: the dtype of the mean. Default None.

    Example:
        >>> metric = SSIM()
        >>> metric.update_state(np.ones((1, 16, 16, 1)), np.ones((1, 16, 16, 1)))
        >>> float(metric.result())
        1.0
    """

    def __init__(self, max_val: float = 255.0, name: str = "ssim", dtype=None):
        super().__init__(ssim, max_val, name, dtype)


def _split_targets(y_true, y_pred):
    """The true state and the climatology of field targets, for (B, H, W, C) predictions."""
    channels = y_pred.shape[-1]
    y_true = ops.convert_to_tensor(y_true, dtype=y_pred.dtype)
    return y_true[..., :channels], y_true[..., channels:]


def relative_l2(y_true, y_pred):
    """Per example, ||prediction - target||_2 / ||target||_2 over the whole field (B,).

    Args:
        y_true: (B, H, W, 2 C) field targets, or (B, H, W, C) states.
        y_pred: (B, H, W, C) predictions.

    Example:
        >>> relative_l2(np.ones((1, 2, 2, 1)), np.full((1, 2, 2, 1), 1.5)).tolist()
        [0.5]
    """
    y_pred = ops.convert_to_tensor(y_pred)
    target, _ = _split_targets(y_true, y_pred)
    error = ops.sqrt(ops.sum(ops.square(y_pred - target), axis=(1, 2, 3)))
    return error / ops.maximum(ops.sqrt(ops.sum(ops.square(target), axis=(1, 2, 3))), 1e-12)


def anomaly_correlation(y_true, y_pred):
    """Per example, the anomaly correlation (FourCastNet's ACC) averaged over channels (B,).

    Anomalies are departures from the climatology that follows the true
    state in `y_true`; per channel, ACC = sum(p' t') / sqrt(sum p'^2 sum t'^2)
    over the grid.

    Example:
        >>> truth = np.concatenate([np.arange(4.0).reshape(1, 2, 2, 1), np.zeros((1, 2, 2, 1))], -1)
        >>> anomaly_correlation(truth, 2 * truth[..., :1]).tolist()
        [1.0]
    """
    y_pred = ops.convert_to_tensor(y_pred)
    target, climatology = _split_targets(y_true, y_pred)
    predicted, observed = y_pred - climatology, target - climatology
    covariance = ops.sum(predicted * observed, axis=(1, 2))
    norms = ops.sqrt(
        ops.sum(ops.square(predicted), axis=(1, 2)) * ops.sum(ops.square(observed), axis=(1, 2))
    )
    return ops.mean(covariance / ops.maximum(norms, 1e-12), axis=-1)


@keras.saving.register_keras_serializable(package="keras_fourier")
class FieldMSE(keras.losses.Loss):
    """Mean squared error of a predicted field against the true state of field targets.

    Args:
        name: the loss name. Default "field_mse".

    Call arguments:
        y_true: (B, H, W, 2 C) targets (the state, then the climatology), or (B, H, W, C).
        y_pred: (B, H, W, C) predictions.

    Example:
        >>> float(FieldMSE()(np.zeros((1, 2, 2, 2)), np.ones((1, 2, 2, 1))))
        1.0
    """

    def __init__(self, name: str = "field_mse", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        y_pred = ops.convert_to_tensor(y_pred)
        target, _ = _split_targets(y_true, y_pred)
        return ops.mean(ops.square(y_pred - target), axis=(1, 2, 3))


@keras.saving.register_keras_serializable(package="keras_fourier")
class RelativeL2(keras.metrics.MeanMetricWrapper):
    """The mean over every example seen of its relative L2 error (:func:`relative_l2`).

    Args:
        name: the metric name. Default "rel_l2".
        dtype: the dtype of the mean. Default None.

    Example:
        >>> metric = RelativeL2()
        >>> metric.update_state(np.ones((2, 2, 2, 1)), np.full((2, 2, 2, 1), 1.5))
        >>> float(metric.result())
        0.5
    """

    def __init__(self, name: str = "rel_l2", dtype=None):
        super().__init__(relative_l2, name=name, dtype=dtype)

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype}


@keras.saving.register_keras_serializable(package="keras_fourier")
class AnomalyCorrelation(keras.metrics.MeanMetricWrapper):
    """The mean over every example seen of its anomaly correlation (:func:`anomaly_correlation`).

    Args:
        name: the metric name. Default "acc".
        dtype: the dtype of the mean. Default None.
    """

    def __init__(self, name: str = "acc", dtype=None):
        super().__init__(anomaly_correlation, name=name, dtype=dtype)

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype}


def _channel_squared_error(y_true, y_pred, channel: int):
    y_pred = ops.convert_to_tensor(y_pred)
    target, _ = _split_targets(y_true, y_pred)
    return ops.mean(ops.square(y_pred[..., channel] - target[..., channel]), axis=(1, 2))


@keras.saving.register_keras_serializable(package="keras_fourier")
class ChannelRMSE(keras.metrics.MeanMetricWrapper):
    """The root mean squared error of one channel over every grid point of every example seen.

    Args:
        channel: the channel index.
        name: the metric name. Default None: "rmse_<channel>".
        dtype: the dtype of the mean. Default None.

    Example:
        >>> metric = ChannelRMSE(1)
        >>> metric.update_state(np.zeros((1, 2, 2, 2)), np.full((1, 2, 2, 2), 3.0))
        >>> float(metric.result())
        3.0
    """

    def __init__(self, channel: int, name: str | None = None, dtype=None):
        super().__init__(
            _channel_squared_error, name=name or f"rmse_{channel}", dtype=dtype, channel=channel
        )
        self.channel = channel

    def result(self):
        return ops.sqrt(super().result())

    def get_config(self) -> dict:
        return {"channel": self.channel, "name": self.name, "dtype": self.dtype}
