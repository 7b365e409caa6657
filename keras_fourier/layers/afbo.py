"""AFBO feed-forward layers: SCFBO-GC, SCFBO-OC and the asymmetric AFBO.

Wu et al. (ICLR 2025) replace the first Dense of the transformer MLP by a
spatial-channel factorised bilinear operation (SCFBO, Eq. 4) with the
activation moved before the product ("pre-act", Sec. 3.2.1, Fig. 1b)::

    left  = act(SM_left(CM_left(x)))
    right = SM_right(CM_right(x))
    y     = proj(left * right)

``CM`` is a structured-sparse 1x1 channel mapping C -> hidden (with bias),
hidden = int(C * hidden_ratio); ``SM`` is the spatial modelling, a K x K
depthwise convolution with bias by default; ``proj`` is Dense(hidden -> C)
with bias (W3, b3 of Eq. 4). Channel mapping comes before spatial modelling
(AFBO-CS, the paper's choice in Table 5). No official code exists, so every
choice below is derived from the paper and stated here.

Channel mappings (G groups, t = C / G input channels per group, 0-based)
------------------------------------------------------------------------
GCCM (Eq. 6, Fig. 2c) splits the input into G groups and the output into 2G
groups of hidden / (2G) channels. It has G weights W(i) (t -> hidden / (2G)),
each used for two output groups fed by different input groups: output group
i is W(i) x_i and output group G + i is W(i) x_{G-1-i} (the anti-diagonal of
the second half of Eq. 6). Parameters C * hidden / (2G), "1/2G of the
original" as Sec. 3.2.2 says; MACs per token C * hidden / G. For odd G the
middle weight sees the same input group twice. Table 1 writes 2Md^2/G^2 for
the two GCCMs of SCFBO-GC; it equals Eq. 6 at G = 2, the only G of Table 1,
and Table 7's G1 = 4 row follows Eq. 6 (5.69M against 5.7M; Md^2/G^2 would
give 5.58M), so Eq. 6 is implemented.

OCCM (Eq. 7, Fig. 2d) splits the input into G groups and the output into G
groups of hidden / G channels; output group g reads a cyclic window of
consecutive input groups starting at group g. Eq. 7 draws two-group windows
[W_L(g), W_R(g)] ("2/G of the original"), but Table 1's count, M(G-1)d^2/G
per OCCM, and Table 7, where the model grows with G2 (5.6/5.8/6.0/6.2M for
G2 = 2/3/4/6) while two-group windows would shrink it, need windows of G - 1
groups: output group g is W(g) [x_g, x_{g+1}, ..., x_{g+G-2}] (indices mod
G), consecutive windows overlapping by G - 2 groups, every input group read
by G - 1 output groups. Parameters and MACs per token (G - 1) * C * hidden / G.
The two readings coincide at G = 3 (the paper's G2 for LVT, Swin and the
MLP-Mixers); at G = 2 each output group reads one input group.

Variants and activation
-----------------------
`SCFBO` uses one mapping in both branches (SCFBO-GC with G = 2 and SCFBO-OC
with G = 4 in Table 1, the defaults of ``groups=None``). `AFBO` puts OCCM
(G2 = 4) in the left, activated branch and GCCM (G1 = 2) in the right,
linear one: Table 6 finds the activation on the OCCM branch alone better
than on GCCM alone or on both. SCFBO likewise activates its left branch
only; the paper does not say where SCFBO-GC/OC put it.

Spatial modelling
-----------------
"dwconv" (default, K = 3 as Table 9), "avg_pool", "max_pool" (stride 1,
"same" padding, Table 8) or None (Table 5's AFBO-C). TensorFlow's average
pooling leaves padded positions out of the mean (PyTorch's AvgPool2d default
would count them as zeros). Spatial attention (Table 8) is not provided.

Parameter counts
----------------
Per block, with d = C and h = int(d * hidden_ratio)::

    proj                 h * d + d
    each branch          mapping kernel + h (bias) + h * K^2 + h (dwconv)
    GCCM kernel          d * h / (2G)
    OCCM kernel          (G - 1) * d * h / G

In DeiT-T (d = 192, h = 768, K = 3, 12 blocks) everything outside the FFNs
has 2,166,952 parameters (patch embedding 147,648, cls token 192, position
embedding 197 x 192 = 37,824, twelve times two LayerNorms and attention
148,992, final LayerNorm 384, head 193,000). Per block and in total::

    FFN (MLP ratio 4)       295,872  ->  5,717,416   Table 1: 5.7M  (+0.3%)
    SCFBO-GC (G = 2)        238,272  ->  5,026,216   Table 1: 5.1M  (-1.4%)
    SCFBO-OC (G = 4)        385,728  ->  6,795,688   Table 1: 6.7M  (+1.4%)
    AFBO (G1 = 2, G2 = 4)   312,000  ->  5,910,952   Table 1: 6.0M  (-1.5%)

Whatever structure GCCM and OCCM have, SCFBO-GC + SCFBO-OC = 2 x AFBO,
while Table 1 has 5.1M + 6.7M against 2 x 6.0M, so no structure matches all
three rows to the printed digit. AFBO's ablation rows (Tables 5, 7, 8, 9:
other G1, G2, K and spatial modelling) agree within 2.4%.

Weight layout
-------------
Each branch has ``{branch}_kernel``, ``{branch}_bias`` (hidden,) and, with
"dwconv", ``{branch}_dwconv/kernel`` (K, K, hidden, 1) and
``{branch}_dwconv/bias`` (hidden,); the branches are "left" (activated) and
"right" in `SCFBO`, "occm" (activated) and "gccm" in `AFBO`. Then
``proj/kernel`` (hidden, C) and ``proj/bias`` (C,). A GCCM kernel is
(G, C / G, hidden / (2G)) with ``kernel[i] = W(i)``: input group i feeds
output channels [i * hidden / (2G), (i + 1) * hidden / (2G)) and input group
G - 1 - i feeds [(G + i) * hidden / (2G), (G + i + 1) * hidden / (2G)). An
OCCM kernel is (G, (G - 1) * C / G, hidden / G): ``kernel[g, j * C / G + c,
o]`` multiplies input channel ((g + j) mod G) * C / G + c into output
channel g * hidden / G + o. The mapping kernels are Glorot-uniform over one
block's fans, biases start at zero, the dwconv and proj use Keras defaults.

Both mappings gather input groups into slots and run one matmul per slot
(`keras.ops.take` and :func:`~keras_fourier.layers.contraction.contract_axis`):
every Keras backend, TFLite builtins and XLA-friendly. A
grouped Conv2D cannot express GCCM, whose weights are shared by two output
groups.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import keras
import numpy as np
from keras import ops

from keras_fourier.layers.contraction import contract_axis, inferred_shape
from keras_fourier.layers.ffn import get_activation
from keras_fourier.layers.layout import in_tflite_layout, on_flat_tokens
from keras_fourier.validation import check_choice

CHANNEL_MAPPINGS = ("gccm", "occm")
SPATIAL_MIXINGS = ("dwconv", "avg_pool", "max_pool", None)
_DEFAULT_GROUPS = {"gccm": 2, "occm": 4}


class _Branch(NamedTuple):
    name: str
    mapping: str
    groups: int
    argument: str


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_groups(argument: str, value) -> None:
    if not _is_int(value) or value < 2:
        raise ValueError(f"`{argument}` must be an int >= 2. Received: {argument}={value!r}")


def _check_common(hidden_ratio, spatial_mixing, kernel_size) -> None:
    if isinstance(hidden_ratio, bool) or not hidden_ratio > 0:
        raise ValueError(f"`hidden_ratio` must be > 0. Received: hidden_ratio={hidden_ratio!r}")
    check_choice("spatial_mixing", spatial_mixing, SPATIAL_MIXINGS)
    if not _is_int(kernel_size) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(
            f"`kernel_size` must be a positive odd int. Received: kernel_size={kernel_size!r}"
        )


def _slot_indices(branch: _Branch) -> np.ndarray:
    """Input group read by each slot: (2G,) for GCCM, (G, G - 1) for OCCM."""
    groups = np.arange(branch.groups)
    if branch.mapping == "gccm":
        return np.concatenate([groups, groups[::-1]]).astype("int32")
    return ((groups[:, None] + groups[None, :-1]) % branch.groups).astype("int32")


def _sliced_mapping(flat, kernel, branch: _Branch):
    """A channel mapping of (N, C) tokens as one 2D product per slot: the TFLite layout.

    A slot whose window of input groups is one run of channels multiplies
    that slice by its block of the kernel; an OCCM window that wraps around
    the last group multiplies every channel by its block's rows put in
    channel order, zeros for the groups it leaves out. Each product is a
    FULLY_CONNECTED with per-channel int8 weights (the zeros cost a slot
    G / (G - 1) of its products), and the slots' outputs are concatenated in
    slot order, as the gathered block-diagonal product lays them out: the
    same values up to float32 summation order.
    """
    channels = flat.shape[-1]
    group_width = channels // branch.groups
    num_blocks, window, width = kernel.shape
    starts = _slot_indices(branch).reshape(-1, window // group_width)[:, 0]
    products = []
    for slot, start in enumerate(starts.tolist()):
        block = kernel[slot % num_blocks]
        begin = start * group_width
        wrap = begin + window - channels
        if wrap <= 0:
            products.append(ops.matmul(flat[:, begin : begin + window], block))
            continue
        gap = ops.zeros((begin - wrap, width), dtype=block.dtype)
        rows = ops.concatenate([block[channels - begin :], gap, block[: channels - begin]], axis=0)
        products.append(ops.matmul(flat, rows))
    return ops.concatenate(products, axis=-1)


def _kernel_shape(branch: _Branch, channels: int, hidden: int) -> tuple[int, int, int]:
    groups = branch.groups
    if channels % groups:
        raise ValueError(
            f"`{branch.argument}` must divide the input channels ({channels}). "
            f"Received: {branch.argument}={groups!r}"
        )
    out_groups = 2 * groups if branch.mapping == "gccm" else groups
    if hidden < out_groups or hidden % out_groups:
        raise ValueError(
            f"`{branch.argument}` must split the hidden width int(C * hidden_ratio) = {hidden} "
            f"into {out_groups} equal {branch.mapping.upper()} output groups. "
            f"Received: {branch.argument}={groups!r}"
        )
    group_width = channels // groups
    window = group_width if branch.mapping == "gccm" else (groups - 1) * group_width
    return groups, window, hidden // out_groups


class _FactorizedBilinearFFN(keras.layers.Layer):
    """Shared body of `SCFBO` and `AFBO`: act(SM(CM(x))) * SM(CM(x)), then proj."""

    def __init__(
        self,
        left: _Branch,
        right: _Branch,
        hidden_ratio: float,
        spatial_mixing: str | None,
        kernel_size: int,
        activation: str,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_ratio = hidden_ratio
        self.spatial_mixing = spatial_mixing
        self.kernel_size = kernel_size
        self.activation = activation
        self._activation = get_activation(activation)
        self._left = left
        self._right = right

    def _make_spatial(self, branch: _Branch):
        if self.spatial_mixing is None:
            return None
        name = f"{branch.name}_{self.spatial_mixing}"
        if self.spatial_mixing == "dwconv":
            return keras.layers.DepthwiseConv2D(
                self.kernel_size, padding="same", dtype=self.dtype_policy, name=name
            )
        pool = (
            keras.layers.AveragePooling2D
            if self.spatial_mixing == "avg_pool"
            else keras.layers.MaxPooling2D
        )
        return pool(self.kernel_size, strides=1, padding="same", dtype=self.dtype_policy, name=name)

    def _build_branch(self, branch: _Branch, input_shape, hidden: int) -> None:
        shape = _kernel_shape(branch, input_shape[-1], hidden)
        limit = math.sqrt(6.0 / (shape[1] + shape[2]))
        kernel = self.add_weight(
            name=f"{branch.name}_kernel",
            shape=shape,
            initializer=keras.initializers.RandomUniform(-limit, limit),
        )
        bias = self.add_weight(name=f"{branch.name}_bias", shape=(hidden,), initializer="zeros")
        spatial = self._make_spatial(branch)
        if spatial is not None:
            spatial.build((*input_shape[:-1], hidden))
        setattr(self, f"{branch.name}_kernel", kernel)
        setattr(self, f"{branch.name}_bias", bias)
        setattr(self, f"{branch.name}_spatial", spatial)

    def build(self, input_shape):
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects channels-last inputs (B, H, W, C) with a "
                f"static C; received input_shape={tuple(input_shape)}."
            )
        channels = int(input_shape[-1])
        hidden = int(channels * self.hidden_ratio)
        self._build_branch(self._left, input_shape, hidden)
        self._build_branch(self._right, input_shape, hidden)
        self.proj = keras.layers.Dense(channels, dtype=self.dtype_policy, name="proj")
        self.proj.build((*input_shape[:-1], hidden))

    def _channel_mapping(self, inputs, branch: _Branch):
        kernel = getattr(self, f"{branch.name}_kernel")
        bias = getattr(self, f"{branch.name}_bias")
        channels = inputs.shape[-1]
        if in_tflite_layout():
            out = _sliced_mapping(ops.reshape(inputs, (-1, channels)), kernel, branch)
        else:
            groups = ops.reshape(inputs, (-1, branch.groups, channels // branch.groups))
            num_slots, window, _ = kernel.shape
            if branch.mapping == "gccm":
                num_slots *= 2
                kernel = ops.concatenate([kernel, kernel], axis=0)
            slots = ops.reshape(
                ops.take(groups, _slot_indices(branch), axis=1), (-1, num_slots, window)
            )
            out = contract_axis(slots, kernel, axis=-1, group_axis=1)
        out_shape = inferred_shape((*ops.shape(inputs)[:-1], bias.shape[0]))
        return ops.reshape(out, out_shape) + bias

    def _branch(self, inputs, branch: _Branch):
        out = self._channel_mapping(inputs, branch)
        spatial = getattr(self, f"{branch.name}_spatial")
        return out if spatial is None else spatial(out)

    def call(self, inputs):
        left = self._activation(self._branch(inputs, self._left))
        return on_flat_tokens(self.proj, left * self._branch(inputs, self._right))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_ratio": self.hidden_ratio,
            "spatial_mixing": self.spatial_mixing,
            "kernel_size": self.kernel_size,
            "activation": self.activation,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class SCFBO(_FactorizedBilinearFFN):
    """Spatial-channel factorised bilinear FFN with one channel mapping: SCFBO-GC/OC.

    ``proj(act(SM(CM_left(x))) * SM(CM_right(x)))`` where both channel
    mappings are GCCM (Eq. 6) or both OCCM (Eq. 7, with (G - 1)-group
    windows to match Table 1), each C -> int(C * hidden_ratio) with bias,
    followed by spatial modelling (K x K depthwise conv by default); the
    activation is applied to the left branch before the product (pre-act).
    See the module docstring for the exact mappings, the weight layout and
    the parameter counts.

    Args:
        channel_mapping: "gccm" (default) or "occm".
        groups: number of input groups G, an int >= 2 dividing C (and the
            hidden width into 2G groups for GCCM, G groups for OCCM).
            Default None: 2 for GCCM and 4 for OCCM, as Table 1.
        hidden_ratio: hidden width over input width. Default 4.
        spatial_mixing: "dwconv" (default), "avg_pool", "max_pool" or None.
        kernel_size: odd window size of the spatial mixing. Default 3.
        activation: any Keras activation for the left branch. Default "silu".
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor.

    Returns:
        Tensor of the input's shape.

    Example:
        >>> SCFBO(channel_mapping="occm")(keras.ops.ones((2, 7, 7, 16))).shape
        TensorShape([2, 7, 7, 16])

    Reference:
        Wu et al., "Asymmetric Factorized Bilinear Operation for Vision
        Transformer", ICLR 2025, Sec. 3.2-3.3, Eq. (4), (6), (7), Table 1.
    """

    def __init__(
        self,
        channel_mapping: str = "gccm",
        groups: int | None = None,
        hidden_ratio: float = 4,
        spatial_mixing: str | None = "dwconv",
        kernel_size: int = 3,
        activation: str = "silu",
        **kwargs,
    ):
        check_choice("channel_mapping", channel_mapping, CHANNEL_MAPPINGS)
        if groups is not None:
            _check_groups("groups", groups)
        _check_common(hidden_ratio, spatial_mixing, kernel_size)
        resolved = _DEFAULT_GROUPS[channel_mapping] if groups is None else groups
        super().__init__(
            _Branch("left", channel_mapping, resolved, "groups"),
            _Branch("right", channel_mapping, resolved, "groups"),
            hidden_ratio,
            spatial_mixing,
            kernel_size,
            activation,
            **kwargs,
        )
        self.channel_mapping = channel_mapping
        self.groups = groups

    def get_config(self):
        return {
            **super().get_config(),
            "channel_mapping": self.channel_mapping,
            "groups": self.groups,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class AFBO(_FactorizedBilinearFFN):
    """Asymmetric factorised bilinear FFN: an activated OCCM branch times a GCCM branch.

    ``proj(act(SM(OCCM(x))) * SM(GCCM(x)))``: the paper's default FFN
    replacement (Table 6: activation on the OCCM branch only). OCCM has
    ``occm_groups`` groups and (G2 - 1)-group windows, GCCM has
    ``gccm_groups`` groups, both map C -> int(C * hidden_ratio) with bias
    and are followed by spatial modelling (K x K depthwise conv by default).
    See the module docstring for the exact mappings, the weight layout and
    the parameter counts.

    Args:
        gccm_groups: GCCM input groups G1, an int >= 2 dividing C, with 2 * G1
            dividing the hidden width. Default 2.
        occm_groups: OCCM input groups G2, an int >= 2 dividing C and the
            hidden width. Default 4 (the paper uses 3 for LVT, Swin and
            MLP-Mixers).
        hidden_ratio: hidden width over input width. Default 4.
        spatial_mixing: "dwconv" (default), "avg_pool", "max_pool" or None.
        kernel_size: odd window size of the spatial mixing. Default 3.
        activation: any Keras activation for the OCCM branch. Default "silu".
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor.

    Returns:
        Tensor of the input's shape.

    Example:
        >>> AFBO()(keras.ops.ones((2, 7, 7, 16))).shape
        TensorShape([2, 7, 7, 16])

    Reference:
        Wu et al., "Asymmetric Factorized Bilinear Operation for Vision
        Transformer", ICLR 2025, Sec. 3.3, Tables 1, 6 and 7.
    """

    def __init__(
        self,
        gccm_groups: int = 2,
        occm_groups: int = 4,
        hidden_ratio: float = 4,
        spatial_mixing: str | None = "dwconv",
        kernel_size: int = 3,
        activation: str = "silu",
        **kwargs,
    ):
        _check_groups("gccm_groups", gccm_groups)
        _check_groups("occm_groups", occm_groups)
        _check_common(hidden_ratio, spatial_mixing, kernel_size)
        super().__init__(
            _Branch("occm", "occm", occm_groups, "occm_groups"),
            _Branch("gccm", "gccm", gccm_groups, "gccm_groups"),
            hidden_ratio,
            spatial_mixing,
            kernel_size,
            activation,
            **kwargs,
        )
        self.gccm_groups = gccm_groups
        self.occm_groups = occm_groups

    def get_config(self):
        return {
            **super().get_config(),
            "gccm_groups": self.gccm_groups,
            "occm_groups": self.occm_groups,
        }
