"""RoI feature extraction of two-stage detectors: mmcv's ``RoIAlign`` over an FPN pyramid.

Boxes are "xyxy" absolute pixel corners of the model's input image, as in
:mod:`keras_fourier.layers.detection`.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_fourier.layers.detection import _check_levels
from keras_fourier.validation import check_number, check_positive_int


@keras.saving.register_keras_serializable(package="keras_fourier")
class RoIAlign(keras.layers.Layer):
    """mmdetection's ``SingleRoIExtractor`` with mmcv's ``RoIAlign`` (``aligned=True``).

    Each RoI is pooled from one pyramid level, chosen by its scale as
    mmdetection's FPN mapping: ``floor(log2(sqrt(w * h) / finest_scale + 1e-6))``
    clamped to the given levels (level ``i`` has stride ``2**(min_level + i)``,
    spatial scale ``1 / stride``). On that level the RoI, shifted by half a
    pixel (``aligned=True``: ``x * scale - 0.5``), is cut into
    ``output_size x output_size`` bins; each bin is the mean of bilinear
    samples on a regular grid of ``ceil(roi_h / output_size)`` by
    ``ceil(roi_w / output_size)`` points (mmcv's adaptive ``sampling_ratio=0``).
    A sample above or left of -1, or below or right of the map's height or
    width, is 0; others are clamped to the map (mmcv's ``bilinear_interpolate``).

    Matching the adaptive grid in a static graph: every bin carries a fixed
    grid of ``max_sampling_ratio x max_sampling_ratio`` sample slots. A RoI
    whose mmcv grid is ``g_h x g_w`` places its samples in the first ``g_h``
    rows and ``g_w`` columns of slots (at mmcv's positions) and gives the
    others weight 0; the sum is divided by ``max(g_h * g_w, 1)``. The result
    equals mmcv's whenever ``ceil(roi_h / output_size)`` and
    ``ceil(roi_w / output_size)`` (in feature pixels of the RoI's level) are at
    most `max_sampling_ratio`; a larger grid is capped to it per axis (its
    samples spread evenly over the bin, as mmcv's fixed ``sampling_ratio``).
    The gathers are flat over one concatenation of the levels, so the cost
    does not grow with the number of levels; the sample slots are one loop
    (``keras.ops.fori_loop``), so the graph does not grow with them.

    Args:
        output_size: bins per side (7 for box heads, 14 for mask heads).
            Default 7.
        min_level: the level of the first map (stride ``2**min_level``).
            Default 2 (P2-P5 of Faster and Mask R-CNN).
        finest_scale: the RoI scale mapped to the first level's upper
            bound. Default 56.
        max_sampling_ratio: sample slots per bin and axis. Default 4.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        features: the list of (B, H_i, W_i, C) pyramid maps.
        rois: (B, N, 4) "xyxy" boxes in input pixels.

    Returns:
        (B, N, output_size, output_size, C) pooled features.

    Example:
        >>> maps = [keras.ops.ones((1, 16, 16, 8)), keras.ops.ones((1, 8, 8, 8))]
        >>> rois = keras.ops.convert_to_tensor([[[4.0, 4.0, 40.0, 30.0]]])
        >>> RoIAlign()(maps, rois).shape
        TensorShape([1, 1, 7, 7, 8])

    Reference:
        He et al., "Mask R-CNN", ICCV 2017; mmcv's ``RoIAlign`` and
        mmdetection's ``SingleRoIExtractor`` (OpenMMLab, Apache-2.0).
    """

    def __init__(
        self,
        output_size: int = 7,
        min_level: int = 2,
        finest_scale: float = 56.0,
        max_sampling_ratio: int = 4,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.output_size = check_positive_int("output_size", output_size)
        self.min_level = check_positive_int("min_level", min_level)
        self.finest_scale = check_number("finest_scale", finest_scale, low=0, low_open=True)
        self.max_sampling_ratio = check_positive_int("max_sampling_ratio", max_sampling_ratio)

    def build(self, features_shape, rois_shape=None):
        shapes = _check_levels("RoIAlign", features_shape)
        if len({shape[-1] for shape in shapes}) != 1:
            raise ValueError(
                "RoIAlign's levels must have one width. Received: "
                f"features_shape={features_shape!r}"
            )
        if rois_shape is not None and (len(rois_shape) != 3 or rois_shape[-1] != 4):
            raise ValueError(f"`rois` must be (B, N, 4) boxes. Received: rois.shape={rois_shape!r}")

    def _axis(self, start, length, size):
        """Per-RoI sample rows (or columns) of one axis: indices and weights of both neighbours.

        ``start``, ``length`` and ``size`` are (B, N) float32: the RoI's first
        coordinate and extent in feature pixels, and the map's extent.
        Returns ``(low, high, w_low, w_high, grid)``: (B, N, out, S) int32
        indices and float32 weights over the S sample slots, and the (B, N)
        float32 sample count (mmcv's ``roi_bin_grid``, capped).
        """
        slots = self.max_sampling_ratio
        grid = ops.clip(ops.ceil(length / self.output_size), 0.0, float(slots))
        bin_size = (length / self.output_size)[..., None, None]
        step = bin_size / ops.maximum(grid, 1.0)[..., None, None]
        bins = ops.cast(ops.arange(self.output_size), "float32")[:, None]
        slot = ops.cast(ops.arange(slots), "float32")[None, :]
        coord = start[..., None, None] + bins * bin_size + (slot + 0.5) * step
        size = size[..., None, None]
        used = ops.logical_and(slot < grid[..., None, None], coord >= -1.0)
        used = ops.cast(ops.logical_and(used, coord <= size), "float32")
        coord = ops.maximum(coord, 0.0)
        floor = ops.floor(coord)
        edge = floor >= size - 1.0
        low = ops.where(edge, size - 1.0, floor)
        high = ops.where(edge, size - 1.0, floor + 1.0)
        frac = ops.where(edge, 0.0, coord - floor)
        return (
            ops.cast(low, "int32"),
            ops.cast(high, "int32"),
            (1.0 - frac) * used,
            frac * used,
            grid,
        )

    def call(self, features, rois):
        rois = ops.cast(rois, "float32")
        num_levels = len(features)
        batch = ops.shape(features[0])[0]
        channels = features[0].shape[-1]
        widths = rois[..., 2] - rois[..., 0]
        heights = rois[..., 3] - rois[..., 1]
        scale = ops.sqrt(ops.maximum(widths * heights, 0.0))
        level = ops.floor(ops.log2(scale / self.finest_scale + 1e-6))
        level = ops.cast(ops.clip(level, 0.0, float(num_levels - 1)), "int32")
        sizes = [ops.shape(feature) for feature in features]
        map_h = ops.stack([ops.cast(shape[1], "float32") for shape in sizes])
        map_w = ops.stack([ops.cast(shape[2], "float32") for shape in sizes])
        areas = [ops.cast(shape[1] * shape[2], "int32") for shape in sizes]
        areas = ops.stack(areas)
        offsets = ops.cumsum(areas) - areas
        total = ops.sum(areas)
        spatial = ops.convert_to_tensor(
            [2.0 ** -(self.min_level + i) for i in range(num_levels)], "float32"
        )
        roi_scale = ops.take(spatial, level)
        height = ops.take(map_h, level)
        width = ops.take(map_w, level)
        y_low, y_high, wy_low, wy_high, grid_h = self._axis(
            rois[..., 1] * roi_scale - 0.5, heights * roi_scale, height
        )
        x_low, x_high, wx_low, wx_high, grid_w = self._axis(
            rois[..., 0] * roi_scale - 0.5, widths * roi_scale, width
        )
        base = ops.take(offsets, level) + ops.arange(batch, dtype="int32")[:, None] * total
        base = base[..., None]
        row_width = ops.cast(width, "int32")[..., None]
        count = ops.maximum(grid_h * grid_w, 1.0)[..., None, None]
        flat = ops.concatenate(
            [ops.reshape(feature, (batch, -1, channels)) for feature in features], axis=1
        )
        flat = ops.reshape(flat, (-1, channels))
        slots = self.max_sampling_ratio

        def body(k, pooled):
            i, j = k // slots, k % slots
            rows = [
                (base + ops.take(y_low, i, axis=-1) * row_width, ops.take(wy_low, i, axis=-1)),
                (base + ops.take(y_high, i, axis=-1) * row_width, ops.take(wy_high, i, axis=-1)),
            ]
            cols = [
                (ops.take(x_low, j, axis=-1), ops.take(wx_low, j, axis=-1)),
                (ops.take(x_high, j, axis=-1), ops.take(wx_high, j, axis=-1)),
            ]
            for row, row_weight in rows:
                for col, col_weight in cols:
                    index = row[..., :, None] + col[..., None, :]
                    weight = row_weight[..., :, None] * col_weight[..., None, :] / count
                    values = ops.take(flat, index, axis=0)
                    pooled = pooled + values * ops.cast(weight[..., None], values.dtype)
            return pooled

        size = self.output_size
        zeros = ops.zeros((batch, ops.shape(rois)[1], size, size, channels), flat.dtype)
        pooled = ops.fori_loop(0, slots * slots, body, zeros)
        return pooled

    def compute_output_shape(self, features_shape, rois_shape):
        shapes = _check_levels("RoIAlign", features_shape)
        size = self.output_size
        return (rois_shape[0], rois_shape[1], size, size, shapes[0][-1])

    def get_config(self):
        return {
            **super().get_config(),
            "output_size": self.output_size,
            "min_level": self.min_level,
            "finest_scale": self.finest_scale,
            "max_sampling_ratio": self.max_sampling_ratio,
        }
