"""RoI feature extraction of two-stage detectors: mmcv's ``RoIAlign`` over an FPN pyramid.

Boxes are "xyxy" absolute pixel corners of the model's input image, as in
:mod:`keras_fourier.layers.detection`.
"""

from __future__ import annotations

import math

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
    samples on a regular grid of ``g_h = ceil(roi_h / output_size)`` by
    ``g_w = ceil(roi_w / output_size)`` points (mmcv's adaptive
    ``sampling_ratio=0``). A sample above or left of -1, or below or right of
    the map's height or width, is 0; others are clamped to the map (mmcv's
    ``bilinear_interpolate``).

    How the adaptive grid is matched in a static graph: bilinear sampling and
    the bin mean are separable, so a bin is ``sum_r sum_c wy[r] * wx[c] *
    F[r, c]`` where ``wy[r]`` sums the row weights of the bin's ``g_h``
    sample rows (at most ``g_h + 1`` consecutive rows are touched, as at most
    ``g_w + 1`` columns). In inference the layer loops over these (row,
    column) terms, one gather of every bin of every RoI per step, each step
    computing its rows' weights in closed form from the few samples within
    one pixel of them; the loop runs as many steps as the batch's most
    demanding RoI needs, so every RoI equals mmcv's, however long or thin.
    In training the loop is static (every backend reverse-differentiates
    it): `train_sampling_terms` steps over (sample, neighbour) pairs, 4 per
    sample, exact while ``4 * g_h * g_w <= train_sampling_terms``; a RoI
    needing more samples a coarser grid (mmcv's fixed ``sampling_ratio``
    semantics: the shorter axis's grid capped at ``isqrt(terms / 4)``, the
    longer axis's at what the remaining samples allow). No gradient flows to
    the RoIs (as mmcv's).

    Args:
        output_size: bins per side (7 for box heads, 14 for mask heads).
            Default 7.
        min_level: the level of the first map (stride ``2**min_level``).
            Default 2 (P2-P5 of Faster and Mask R-CNN).
        finest_scale: the RoI scale mapped to the first level's upper
            bound. Default 56.
        train_sampling_terms: the terms (gathers) per bin in training, 4
            per sample; at least 4. Default 64 (exact for grids up to
            4 x 4, or 1 x 16).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        features: the list of (B, H_i, W_i, C) pyramid maps.
        rois: (B, N, 4) "xyxy" boxes in input pixels.
        training: whether the loop is the static training one. Default None
            (inference).

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
        train_sampling_terms: int = 64,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.output_size = check_positive_int("output_size", output_size)
        self.min_level = check_positive_int("min_level", min_level)
        self.finest_scale = check_number("finest_scale", finest_scale, low=0, low_open=True)
        self.train_sampling_terms = check_positive_int("train_sampling_terms", train_sampling_terms)
        if self.train_sampling_terms < 4:
            raise ValueError(
                "`train_sampling_terms` must be at least 4 (one bilinear sample). "
                f"Received: train_sampling_terms={train_sampling_terms!r}"
            )

    def build(self, features_shape, rois_shape=None):
        shapes = _check_levels("RoIAlign", features_shape)
        if len({shape[-1] for shape in shapes}) != 1:
            raise ValueError(
                "RoIAlign's levels must have one width. Received: "
                f"features_shape={features_shape!r}"
            )
        if rois_shape is not None and (len(rois_shape) != 3 or rois_shape[-1] != 4):
            raise ValueError(f"`rois` must be (B, N, 4) boxes. Received: rois.shape={rois_shape!r}")

    def _grid(self, length):
        """mmcv's samples per bin, ``ceil(length / output_size)``, at least 0.

        Corrected by exact products: graph compilers may divide by a
        rounded reciprocal, which would move exact multiples up a sample.
        """
        size = float(self.output_size)
        grid = ops.maximum(ops.ceil(length / size), 0.0)
        grid = ops.where((grid - 1.0) * size >= length, grid - 1.0, grid)
        return ops.maximum(ops.where(grid * size < length, grid + 1.0, grid), 0.0)

    def _capped_grids(self, grid_h, grid_w):
        """mmcv's grids reduced to at most ``train_sampling_terms // 4`` samples per bin."""
        samples = self.train_sampling_terms // 4
        short = ops.minimum(ops.minimum(grid_h, grid_w), float(math.isqrt(samples)))
        # The half keeps the floor whole where a backend divides by a reciprocal.
        long = ops.minimum(
            ops.maximum(grid_h, grid_w), ops.floor((samples + 0.5) / ops.maximum(short, 1.0))
        )
        tall = grid_h > grid_w
        return ops.where(tall, long, short), ops.where(tall, short, long)

    def _axis(self, start, length, size, grid, per_sample):
        """One axis's bins: their first sample, sample step, first row and terms.

        ``start``, ``length``, ``size`` and ``grid`` are (B, N) float32: the
        RoI's first coordinate and extent in feature pixels, the map's extent
        and the samples per bin; `per_sample` enumerates (sample, neighbour)
        pairs rather than rows. Returns an :class:`_Axis`.
        """
        bin_size = length / self.output_size
        step = bin_size / ops.maximum(grid, 1.0)
        bins = ops.cast(ops.arange(self.output_size), "float32")
        first = start[..., None] + bins * bin_size[..., None] + 0.5 * step[..., None]
        if per_sample:  # two neighbours of each sample; rows located per term
            return _Axis(first, step, grid, size, None, 2.0 * grid, per_sample)
        edge = size[..., None] - 1.0
        low = ops.floor(ops.clip(first, 0.0, edge))
        high = ops.minimum(
            ops.floor(ops.clip(first + ((grid - 1.0) * step)[..., None], 0.0, edge)) + 1.0, edge
        )
        rows = ops.where(grid[..., None] > 0, high - low + 1.0, 0.0)
        return _Axis(first, step, grid, size, low, ops.max(rows, axis=-1), per_sample)

    def call(self, features, rois, training=None):
        rois = ops.stop_gradient(ops.cast(rois, "float32"))
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
        areas = ops.stack([ops.cast(shape[1] * shape[2], "int32") for shape in sizes])
        offsets = ops.cumsum(areas) - areas
        total = ops.sum(areas)
        spatial = ops.convert_to_tensor(
            [2.0 ** -(self.min_level + i) for i in range(num_levels)], "float32"
        )
        roi_scale = ops.take(spatial, level)
        height, width = ops.take(map_h, level), ops.take(map_w, level)
        grid_h = self._grid(heights * roi_scale)
        grid_w = self._grid(widths * roi_scale)
        if training:
            grid_h, grid_w = self._capped_grids(grid_h, grid_w)
        y = self._axis(
            rois[..., 1] * roi_scale - 0.5, heights * roi_scale, height, grid_h, bool(training)
        )
        x = self._axis(
            rois[..., 0] * roi_scale - 0.5, widths * roi_scale, width, grid_w, bool(training)
        )
        base = ops.take(offsets, level) + ops.arange(batch, dtype="int32")[:, None] * total
        base = base[..., None, None]
        row_width = ops.cast(width, "int32")[..., None, None]
        columns = ops.cast(ops.maximum(x.terms, 1.0), "int32")
        flat = ops.concatenate(
            [ops.reshape(feature, (batch, -1, channels)) for feature in features], axis=1
        )
        flat = ops.reshape(flat, (-1, channels))

        def body(term, pooled):
            k = ops.floor_divide(ops.cast(term, "int32"), columns)
            rows, row_weights = y.term(ops.cast(k, "float32"))
            cols, col_weights = x.term(ops.cast(term - k * columns, "float32"))
            k = ops.cast(k, "float32")
            row_weights = row_weights * ops.cast(k < y.terms, "float32")[..., None]
            index = base + ops.cast(rows, "int32")[..., :, None] * row_width
            index = index + ops.cast(cols, "int32")[..., None, :]
            weight = row_weights[..., :, None] * col_weights[..., None, :]
            values = ops.take(flat, index, axis=0)
            return pooled + values * ops.cast(weight[..., None], values.dtype)

        size = self.output_size
        zeros = ops.zeros((batch, ops.shape(rois)[1], size, size, channels), flat.dtype)
        if training:
            steps = self.train_sampling_terms
        else:
            needed = ops.reshape(y.terms * x.terms, (-1,))
            steps = ops.cast(ops.max(ops.concatenate([needed, ops.zeros((1,))], 0)), "int32")
        return ops.fori_loop(0, steps, body, zeros)

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
            "train_sampling_terms": self.train_sampling_terms,
        }


# Samples of a bin within one pixel of a row: spacing above 1/2 (grids >= 2) leaves at most 4 in
# the two-pixel window; two more candidates absorb rounding in the first index.
_CANDIDATES = 6


class _Axis:
    """One axis of a batch of RoIs' bins (rows or columns), as :meth:`RoIAlign._axis` makes it.

    ``first`` (B, N, out): each bin's first sample; ``step``, ``grid``,
    ``size`` (B, N): sample spacing, samples per bin, the map's extent;
    ``low`` (B, N, out): each bin's first touched row (None per sample); ``terms`` (B, N): the
    terms the RoI's bins need on this axis; ``per_sample``: whether a term
    is a (sample, neighbour) pair rather than a row.
    """

    def __init__(self, first, step, grid, size, low, terms, per_sample):
        self.first, self.step, self.grid, self.size = first, step, grid, size
        self.low, self.terms, self.per_sample = low, terms, per_sample

    def _tent(self, sample, index, row):
        """mmcv's bilinear weight of `row` from the samples `index` (masked where unused)."""
        grid, size = self.grid[..., None], self.size[..., None]
        used = ops.logical_and(index < grid, sample >= -1.0)
        used = ops.logical_and(used, sample <= size)
        position = ops.clip(sample, 0.0, size - 1.0)
        return ops.where(used, ops.maximum(1.0 - ops.abs(position - row), 0.0), 0.0)

    def term(self, k):
        """Term `k` ((B, N) float) of every bin: its row, clamped to the map, and its weight.

        A row term's weight is the sum of the bilinear weights the bin's
        samples give the row; a (sample, neighbour) term's is that sample's
        weight; both over the grid's sample count.
        """
        step = self.step[..., None]
        grid, size = self.grid[..., None], self.size[..., None]
        if self.per_sample:
            index = ops.floor(k / 2.0)[..., None]
            sample = self.first + index * step
            position = ops.clip(sample, 0.0, size - 1.0)
            row = ops.floor(position) + (k[..., None] - 2.0 * index)
            weight = self._tent(sample, index, row)
        else:
            row = self.low + k[..., None]
            start = ops.floor((row - 1.0 - self.first) / ops.maximum(step, 1e-6))
            start = ops.clip(start, 0.0, ops.maximum(grid - 1.0, 0.0))
            weight = ops.zeros_like(row)
            for j in range(_CANDIDATES):
                index = start + float(j)
                weight = weight + self._tent(self.first + index * step, index, row)
        return ops.minimum(row, size - 1.0), weight / ops.maximum(grid, 1.0)
