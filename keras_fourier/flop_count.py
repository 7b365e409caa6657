"""Model FLOPs in the papers' convention: ``keras_fourier.flops`` (``keras-fourier flops``).

GFNet, GFNet-H, HorNet and AFNO report FLOPs as fvcore counts them, one
multiply-add = one FLOP, plus a hand-written cost for the FFTs. This module
counts the same way, analytically, from the configuration of every layer and
the shapes it is called with:

* Dense / EinsumDense: one per weight per token; convolutions (regular,
  grouped, depthwise, transposed): one per kernel weight per output (input,
  for transposed) position; matrix products inside keras_fourier layers
  (attention scores and values, AFNO's block-diagonal complex MLP, AFBO's
  slot products) likewise; biases are free.
* LayerNormalization and GroupNormalization: 5 per element (4 without scale
  and centre), BatchNormalization 2 per element (inference), fvcore's rules.
  The official HorNet writes its channels-first LayerNorms (stem,
  downsampling, the norm before each gnConv, the global-local filter's two
  norms) as means and square roots, which fvcore counts as 0; in a model
  with gnConv mixers those norms count 0 here too, so HorNet's table is
  reproduced.
* Activations, element-wise products and sums (the global filter's complex
  multiply included), pooling and other reductions: 0, as in fvcore.
* Each 2D real FFT (rfft2) and inverse (irfft2) of a (B, H, W, C) tensor:
  ``N * C * ceil(log2 N)`` with N = H * W of the transform's *input*, so the
  inverse of the (H, W // 2 + 1) half spectrum counts N = H * (W // 2 + 1).
  This is the handler GFNet's authors published for ``aten::fft_rfft2`` and
  ``aten::fft_irfft2`` (raoyongming/GFNet issue #15; HorNet's calc_flops.py
  registers the same one), with B = 1. HorNet applies that handler to its
  channels-first (B, C, H, W) tensors, so for its global-local filter N is
  C * H and W plays the channels; that is counted as HorNet counts it. FNet's complex FFT over every
  non-batch axis counts ``N * ceil(log2 N)``, N the number of elements.

* A detector (:func:`keras_fourier.detection.RetinaNet`): its neck and its
  head's convolutions by the rules above, the shared head once per pyramid
  level it runs on; anchors 0, and no decoding (the raw model has none; NMS
  is not counted, as mmdetection's ``get_flops`` does not run it).

Counts are per image (batch 1). The shapes come from one batch-1 forward pass
of zeros, which runs every layer, nested ones included, on any backend.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from keras_fourier.layers import AFNO2D, FNO2D, FourierMixing, GlobalFilter, SelfAttention
from keras_fourier.layers.afbo import _FactorizedBilinearFFN
from keras_fourier.layers.hornet import GlobalLocalFilter, GnConv

Shape = tuple[int, ...]


def fft_flops(height: int, width: int, channels: int) -> int:
    """FLOPs of one 2D FFT of an (H, W, C) input, GFNet's rule N * C * ceil(log2 N).

    Args:
        height: H of the transform's input.
        width: W of the transform's input (W // 2 + 1 for an inverse real FFT).
        channels: independent channels C.

    Returns:
        The count, an int.

    Example:
        >>> fft_flops(14, 14, 384)
        602112
    """
    n = height * width
    return n * channels * math.ceil(math.log2(n)) if n > 1 else 0


def _size(shape: Shape) -> int:
    # The whole shape: the pass has batch 1, and a layer may fold the tokens
    # into the leading axis (Mlp runs its Dense layers on (tokens, C)).
    return int(np.prod(shape, dtype=np.int64))


def _conv(layer, inputs: Sequence[Shape], output: Shape) -> int:
    kernel = tuple(layer.kernel.shape)
    # kernel: (*window, in / groups, filters) for Conv, (*window, filters / groups, in) transposed.
    if isinstance(layer, keras.layers.Conv2DTranspose | keras.layers.Conv1DTranspose):
        return _size(inputs[0]) * int(np.prod(kernel[:-1]))
    return _size(output) * int(np.prod(kernel[:-2])) * kernel[-2]


def _depthwise(layer, inputs: Sequence[Shape], output: Shape) -> int:
    return _size(output) * int(np.prod(layer.kernel_size))


def _dense(layer, inputs: Sequence[Shape], output: Shape) -> int:
    return _size(output) * int(inputs[0][-1])


def _einsum_dense(layer, inputs: Sequence[Shape], output: Shape) -> int:
    left, right = layer.equation.split("->")[0].split(",")
    # Shapes of the batch-1 pass: the batch letter has size 1.
    sizes = dict(zip(left, inputs[0], strict=True))
    sizes.update(zip(right, layer.kernel.shape, strict=True))
    return int(np.prod([sizes[letter] for letter in set(left + right)], dtype=np.int64))


def _layer_norm(layer, inputs: Sequence[Shape], output: Shape) -> int:
    affine = getattr(layer, "scale", True) or getattr(layer, "center", True)
    return _size(inputs[0]) * (5 if affine else 4)


def _batch_norm(layer, inputs: Sequence[Shape], output: Shape) -> int:
    return _size(inputs[0]) * 2


def _multi_head_attention(layer, inputs: Sequence[Shape], output: Shape) -> int:
    query, value = inputs[0], inputs[1] if len(inputs) > 1 else inputs[0]
    lq, lk = _size(query) // query[-1], _size(value) // value[-1]
    heads = layer.num_heads
    return heads * lq * lk * (layer.key_dim + (layer.value_dim or layer.key_dim))


def _global_filter(layer, inputs: Sequence[Shape], output: Shape) -> int:
    _, height, width, channels = inputs[0]
    return fft_flops(height, width, channels) + fft_flops(height, width // 2 + 1, channels)


def _global_local_filter(layer, inputs: Sequence[Shape], output: Shape) -> int:
    # HorNet's calc_flops.py applies GFNet's (B, H, W, C) handler to its
    # channels-first (B, C, H, W) tensors: N = C * H, "channels" W.
    _, height, width, channels = inputs[0]
    half = channels - channels // 2
    return fft_flops(half, height, width) + fft_flops(half, height, width // 2 + 1)


def _afno(layer, inputs: Sequence[Shape], output: Shape) -> int:
    _, height, width, channels = inputs[0]
    modes = height * (width // 2 + 1)
    if layer.hard_thresholding_fraction < 1:
        modes = int(layer._mask.sum())
    hidden = channels * layer.hidden_size_factor
    # Two complex block-diagonal linears, each four real products per kept mode.
    block_mlp = 2 * 4 * modes * channels * hidden // layer.num_blocks
    return _global_filter(layer, inputs, output) + block_mlp


def _fno(layer, inputs: Sequence[Shape], output: Shape) -> int:
    _, _, _, channels = inputs[0]
    m1, m2 = layer._kept
    # A complex C x C matrix per kept mode (four real products each), at both ends of H.
    return _global_filter(layer, inputs, output) + 2 * 4 * m1 * m2 * channels * channels


def _fourier_mixing(layer, inputs: Sequence[Shape], output: Shape) -> int:
    n = _size(inputs[0])
    return n * math.ceil(math.log2(n)) if n > 1 else 0


def _self_attention(layer, inputs: Sequence[Shape], output: Shape) -> int:
    tokens = _size(inputs[0]) // inputs[0][-1]
    return 2 * tokens * tokens * int(inputs[0][-1])


def _factorized_bilinear(layer, inputs: Sequence[Shape], output: Shape) -> int:
    tokens = _size(inputs[0]) // inputs[0][-1]
    total = 0
    for branch in (layer._left, layer._right):
        slots, window, out = getattr(layer, f"{branch.name}_kernel").shape
        if branch.mapping == "gccm":
            slots *= 2
        total += tokens * slots * window * out
    return total


# Most specific class first: the first match gives a layer's own FLOPs (its
# sublayers are counted when they are called).
_RULES: tuple[tuple[type, Callable[..., int]], ...] = (
    (keras.layers.DepthwiseConv2D, _depthwise),
    (keras.layers.DepthwiseConv1D, _depthwise),
    (keras.layers.Conv1D, _conv),
    (keras.layers.Conv2D, _conv),
    (keras.layers.Conv3D, _conv),
    (keras.layers.Conv1DTranspose, _conv),
    (keras.layers.Conv2DTranspose, _conv),
    (keras.layers.Dense, _dense),
    (keras.layers.EinsumDense, _einsum_dense),
    (keras.layers.LayerNormalization, _layer_norm),
    (keras.layers.GroupNormalization, _layer_norm),
    (keras.layers.BatchNormalization, _batch_norm),
    (keras.layers.MultiHeadAttention, _multi_head_attention),
    (GlobalFilter, _global_filter),
    (GlobalLocalFilter, _global_local_filter),
    (AFNO2D, _afno),
    (FNO2D, _fno),
    (FourierMixing, _fourier_mixing),
    (SelfAttention, _self_attention),
    (_FactorizedBilinearFFN, _factorized_bilinear),
)


def _own_flops(layer, inputs: Sequence[Shape], output: Shape) -> int:
    if isinstance(layer, keras.layers.SeparableConv1D | keras.layers.SeparableConv2D):
        depthwise = _size(output) // output[-1] * int(np.prod(layer.kernel_size))
        pointwise = _size(output) * int(inputs[0][-1]) * layer.depth_multiplier
        return depthwise * int(inputs[0][-1]) * layer.depth_multiplier + pointwise
    for cls, rule in _RULES:
        if isinstance(layer, cls):
            return int(rule(layer, inputs, output))
    return 0


def _hornet_channels_first_norms(model: keras.Model) -> set[int]:
    """ids of the LayerNorms that the official HorNet writes channels-first by hand."""
    layers = {layer.name: layer for layer in model.layers}
    blocks = {
        name.removesuffix("_mixer") for name, layer in layers.items() if isinstance(layer, GnConv)
    }
    if not blocks:
        return set()
    uncounted = {f"{block}_norm1" for block in blocks} | {"stem_norm"}
    uncounted |= {name for name in layers if re.fullmatch(r"downsample\d+_norm", name)}
    return {id(layers[name]) for name in uncounted if name in layers}


def _shapes(structure) -> list[Shape]:
    return [
        tuple(int(d) for d in tensor.shape)
        for tensor in keras.tree.flatten(structure)
        if hasattr(tensor, "shape") and len(tensor.shape) > 0
    ]


def zero_inputs(model: keras.Model) -> Any:
    """A batch of one all-zero input of `model`, in the structure its call takes.

    The input that :func:`flops` runs the model on; benchmarks run it to
    record the shapes of the model's products.

    Args:
        model: a built Keras model with static input shapes besides the batch,
            or a text model that takes any length (``FNet(sequence_length=None)``),
            whose inputs are then as long as its position table
            (``max_sequence_length``), the length the papers count at.

    Returns:
        One NumPy array per model input (batch 1, the inputs' dtypes), in
        the structure of the model's inputs.

    Raises:
        ValueError: an input with a free dimension besides the batch.

    Example:
        >>> zero_inputs(keras_fourier.GFNetTi()).shape
        (1, 224, 224, 3)
    """

    longest = [
        layer.max_sequence_length
        for layer in model._flatten_layers()
        if isinstance(getattr(layer, "max_sequence_length", None), int)
    ]

    def zeros(tensor):
        shape = tuple(tensor.shape)
        if len(shape) == 2 and shape[1] is None and longest:  # a text model of any length
            shape = (shape[0], max(longest))
        if any(d is None for d in shape[1:]):
            raise ValueError(
                "flops needs a model with static input shapes (besides the batch); "
                f"received an input of shape {shape}. Build the model with an input_shape."
            )
        return np.zeros((1, *shape[1:]), dtype=tensor.dtype)

    return keras.tree.map_structure(zeros, model._inputs_struct)


def flops(model: keras.Model, by_layer: bool = False) -> int | list[tuple[str, str, int]]:
    """FLOPs of one forward pass of `model` on one input, the papers' convention.

    One multiply-add counts as one FLOP, as in GFNet's and HorNet's tables
    (fvcore's operator rules), and each rfft2/irfft2 adds
    ``N * C * ceil(log2 N)`` with N = H * W of its input, the FFT cost GFNet's
    authors add by hand (see the module docstring for every rule). At 224 px
    this reproduces GFNet's Table 2 and HorNet's Table 1.

    Args:
        model: a built Keras model with static input shapes besides the batch
            (any keras_fourier vision or FNet model, or any model of Keras layers).
        by_layer: if True, return a table of the top-level layers instead of
            the total. Default False.

    Returns:
        The total as an int, or with `by_layer` a list of
        ``(layer name, class name, flops)`` rows in call order, each row the
        FLOPs of that layer and everything it calls.

    Example:
        >>> round(flops(keras_fourier.GFNetXS()) / 1e9, 1)
        2.9

    Reference:
        Rao et al., "Global Filter Networks for Image Classification",
        NeurIPS 2021, Table 1-2; raoyongming/GFNet issue #15.
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"`model` must be a keras.Model. Received: model={model!r}")
    if not model.built:
        raise ValueError(f"`model` must be built. Received: model={model.name!r}")
    rows: dict[int, list] = {}
    stack: list = []
    uncounted = _hornet_channels_first_norms(model)
    originals = {}

    def wrap(layer):
        call = layer.call

        def counted_call(*args, **kwargs):
            stack.append(layer)
            try:
                output = call(*args, **kwargs)
            finally:
                stack.pop()
            top = stack[0] if stack else layer
            row = rows.setdefault(id(top), [top.name, type(top).__name__, 0])
            inputs = _shapes((args, {k: v for k, v in kwargs.items() if k != "training"}))
            outputs = _shapes(output)
            skip = id(layer) in uncounted or (
                isinstance(layer, keras.layers.LayerNormalization)
                and any(isinstance(outer, GlobalLocalFilter) for outer in stack)
            )
            if inputs and outputs and not skip:
                row[2] += _own_flops(layer, inputs, outputs[0])
            return output

        return counted_call

    layers = [layer for layer in model._flatten_layers(include_self=False) if layer is not model]
    for layer in layers:
        originals[layer] = layer.__dict__.get("call")
        object.__setattr__(layer, "call", wrap(layer))
    try:
        model(zero_inputs(model), training=False)
    finally:
        for layer, original in originals.items():
            if original is None:
                object.__delattr__(layer, "call")
            else:
                object.__setattr__(layer, "call", original)
    table = [tuple(row) for row in rows.values()]
    if by_layer:
        return table
    return sum(row[2] for row in table)
