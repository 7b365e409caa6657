"""The feature pyramid network of object detection (RetinaNet, Mask R-CNN) and HorNet's HorFPN.

A channels-last Keras twin of mmdetection 2.x's ``FPN`` neck, written from
its published definition with `keras.ops` only. Sublayer names follow the
official ``state_dict`` (``lateral_convs.{i}.conv.weight`` is
``lateral_convs_{i}/conv/kernel``), so a checkpoint maps onto the layer by a
key map and transposes.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_fourier.layers.decode_heads import (
    GNCONV_BLOCKS,
    FPNNeck,
    GnConvModule,
    _check_feature_list,
    resize_nearest,
    top_down,
)
from keras_fourier.validation import check_bool, check_choice, check_positive_int

EXTRA_SOURCES = ("on_input", "on_lateral", "on_output")
BLOCKS = (None, *GNCONV_BLOCKS)


def _half(size):
    """``ceil(size / 2)``: the length after a stride-2 step (3x3 conv, pad 1, or 1x1 max pool)."""
    return None if size is None else (size + 1) // 2


@keras.saving.register_keras_serializable(package="keras_fourier")
class DetectionFPN(FPNNeck):
    """mmdetection's ``FPN`` neck: P3-P7 from a backbone pyramid, as RetinaNet uses it.

    The backbone maps from `start_level` on go through ``lateral_convs_{i}``
    (1x1 conv with bias); each level, nearest-resized to the size of the one
    below (so odd sizes work as in mmdetection), is added to it from the
    top down; ``fpn_convs_{i}`` (3x3 conv with bias) smooth every level.
    ``num_outputs`` beyond those levels are made by ``fpn_convs_{i}``
    stride-2 3x3 convs (with bias, PyTorch's padding 1) on the source of
    `add_extra_convs`, each later one on the previous output, or with
    ``add_extra_convs=None`` by a stride-2 1x1 max pooling of the last
    output (mmdetection's ``add_extra_convs=False``, Faster and Mask R-CNN).
    No norm and no activation, as RetinaNet's config.

    Args:
        channels: output channels of every level. Default 256.
        num_outputs: how many maps to return, at least the number of used
            backbone levels. Default 5 (P3-P7 from stride-4..32 maps).
        start_level: index of the first backbone map used. Default 1 (the
            stride-8, 16, 32 maps of a stride-4..32 pyramid).
        add_extra_convs: source of the first extra conv: "on_input"
            (default, RetinaNet: the last backbone map), "on_lateral" (the
            last lateral after the top-down sums), "on_output" (the last
            output), or None for max pooling instead of extra convs.
        block: None (default): every ``fpn_convs_{i}`` is a 3x3 conv;
            "gnconv_7x7" or "gnconv_gf": HorNet's HorFPN, every
            ``fpn_convs_{i}`` a :class:`GnConvModule` of that block (order
            2, no norm, no activation), as the official ``GNFPN``; an extra
            level is then ``fpn_convs_{i}_0``, the stride-2 3x3 conv,
            followed by ``fpn_convs_{i}_1``, a GnConvModule (the official
            ``GNFPN`` builds that pair but wraps it as ``nn.Sequential(list)``,
            which PyTorch refuses, so only its max-pooling form runs there).
        relu_before_extra_convs: whether a ReLU precedes every extra conv
            but the first. Default False.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: list of backbone maps, finest first, (B, H_i, W_i, C_i);
            sizes may be unknown until run time.

    Returns:
        List of `num_outputs` maps (B, h_j, w_j, channels): the used
        backbone levels' sizes, then each extra one ``ceil`` half the last.

    Example:
        >>> maps = [keras.ops.ones((1, 64 // 2**i, 64 // 2**i, 8 * 2**i)) for i in range(4)]
        >>> [tuple(m.shape) for m in DetectionFPN(16)(maps)]
        [(1, 32, 32, 16), (1, 16, 16, 16), (1, 8, 8, 16), (1, 4, 4, 16), (1, 2, 2, 16)]

    Reference:
        Lin et al., "Feature Pyramid Networks for Object Detection", CVPR
        2017; Lin et al., "Focal Loss for Dense Object Detection", ICCV 2017;
        mmdetection 2.x ``FPN`` (OpenMMLab, Apache-2.0).
    """

    def __init__(
        self,
        channels: int = 256,
        num_outputs: int = 5,
        start_level: int = 1,
        add_extra_convs: str | None = "on_input",
        block: str | None = None,
        relu_before_extra_convs: bool = False,
        **kwargs,
    ):
        super().__init__(channels, **kwargs)
        self.num_outputs = check_positive_int("num_outputs", num_outputs)
        if isinstance(start_level, bool) or not isinstance(start_level, int) or start_level < 0:
            raise ValueError(f"`start_level` must be an int >= 0. Received: {start_level=}")
        self.start_level = start_level
        self.add_extra_convs = check_choice(
            "add_extra_convs", add_extra_convs, (*EXTRA_SOURCES, None)
        )
        self.block = check_choice("block", block, BLOCKS)
        self.relu_before_extra_convs = check_bool(
            "relu_before_extra_convs", relu_before_extra_convs
        )

    def _levels(self, shapes: list) -> int:
        used = len(shapes) - self.start_level
        if used < 1 or self.num_outputs < used:
            raise ValueError(
                f"DetectionFPN with start_level={self.start_level} and "
                f"num_outputs={self.num_outputs} needs more than start_level input maps and "
                f"num_outputs >= the maps used. Received {len(shapes)} maps: {shapes}"
            )
        return used

    def build(self, input_shape):
        shapes = _check_feature_list("DetectionFPN", input_shape, None)
        used = self._levels(shapes)
        levels = shapes[self.start_level :]
        self.lateral_convs = [
            self._module(f"lateral_convs_{i}", 1, shape) for i, shape in enumerate(levels)
        ]
        self.fpn_convs = [
            self._fusion(f"fpn_convs_{i}", (*shape[:-1], self.channels))
            for i, shape in enumerate(levels)
        ]
        self.extra_convs = []
        if self.add_extra_convs is None:
            return
        batch = levels[-1][0]
        for k in range(used, self.num_outputs):
            source = levels[-1][-1] if k == used and self.add_extra_convs == "on_input" else None
            shape = (batch, None, None, source or self.channels)
            if self.block is None:
                steps = [self._module(f"fpn_convs_{k}", 3, shape, strides=2)]
            else:
                steps = [
                    self._module(f"fpn_convs_{k}_0", 3, shape, strides=2),
                    self._fusion(f"fpn_convs_{k}_1", (batch, None, None, self.channels)),
                ]
            self.extra_convs.append(steps)

    def _fusion(self, name: str, input_shape):
        """The module after a top-down sum: a 3x3 conv, or HorFPN's gnConv of `block`."""
        if self.block is None:
            return self._module(name, 3, input_shape)
        return self._plain(GnConvModule, name, input_shape, self.block)

    def call(self, inputs):
        inputs = list(inputs)[self.start_level :]
        laterals = [conv(x) for conv, x in zip(self.lateral_convs, inputs, strict=True)]
        laterals = top_down(laterals, resize_nearest)
        outs = [conv(x) for conv, x in zip(self.fpn_convs, laterals, strict=True)]
        extra = self.num_outputs - len(outs)
        if self.add_extra_convs is None:
            for _ in range(extra):
                outs.append(outs[-1][:, ::2, ::2, :])
            return outs
        source = {"on_input": inputs[-1], "on_lateral": laterals[-1], "on_output": outs[-1]}
        x = source[self.add_extra_convs]
        for k, steps in enumerate(self.extra_convs):
            if k > 0:
                x = ops.relu(outs[-1]) if self.relu_before_extra_convs else outs[-1]
            for step in steps:
                x = step(x)
            outs.append(x)
        return outs

    def compute_output_shape(self, input_shape):
        shapes = [tuple(shape) for shape in input_shape]
        used = self._levels(shapes)
        outs = [(*shape[:-1], self.channels) for shape in shapes[self.start_level :]]
        for _ in range(self.num_outputs - used):
            batch, height, width, _ = outs[-1]
            outs.append((batch, _half(height), _half(width), self.channels))
        return outs

    def get_config(self):
        return {
            **super().get_config(),
            "num_outputs": self.num_outputs,
            "start_level": self.start_level,
            "add_extra_convs": self.add_extra_convs,
            "block": self.block,
            "relu_before_extra_convs": self.relu_before_extra_convs,
        }
