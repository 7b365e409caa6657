"""keras_fourier.flops: hand counts on small models, the CLI.

The papers' tables at 224 px are checked with the parameter counts, on one build of each
full-size model (tests/test_models.py).
"""

import math

import keras
import pytest

import keras_fourier
from keras_fourier.cli import main
from keras_fourier.flop_count import fft_flops
from keras_fourier.layers import GlobalFilter, SelfAttention


def test_gfnet_xs_total_is_the_sum_of_its_hand_counted_parts():
    model = keras_fourier.GFNetXS()
    tokens, dim = 14 * 14, 384
    block = (
        2 * tokens * dim * 4 * dim  # fc1 + fc2
        + 2 * 5 * tokens * dim  # norm1, norm2
        + fft_flops(14, 14, dim)  # rfft2
        + fft_flops(14, 8, dim)  # irfft2 of the half spectrum
    )
    stem = tokens * dim * 16 * 16 * 3
    expected = stem + 12 * block + 5 * tokens * dim + dim * 1000
    assert keras_fourier.flops(model) == expected
    table = keras_fourier.flops(model, by_layer=True)
    assert sum(row[2] for row in table) == expected
    rows = {name: (cls, count) for name, cls, count in table}
    assert rows["stem_conv"] == ("Conv2D", stem)
    assert rows["stage0_block0_mixer"] == (
        "GlobalFilter",
        fft_flops(14, 14, dim) + fft_flops(14, 8, dim),
    )
    assert rows["head"] == ("Dense", dim * 1000)


def test_attention_and_nested_layers_are_counted():
    inputs = keras.Input((4, 4, 8))
    x = SelfAttention(num_heads=2, name="attention")(inputs)
    x = GlobalFilter(name="filter")(x)
    model = keras.Model(inputs, x)
    tokens = 16
    qkv, proj, scores = tokens * 8 * 24, tokens * 8 * 8, 2 * tokens * tokens * 8
    rows = {name: count for name, _, count in keras_fourier.flops(model, by_layer=True)}
    assert rows["attention"] == qkv + proj + scores
    assert rows["filter"] == 16 * 8 * 4 + 4 * 3 * 8 * math.ceil(math.log2(12))


def test_every_family_gets_a_number():
    afno = keras_fourier.build_model("afno", depths=1, dims=32, input_shape=(32, 32, 3))
    fnet = keras_fourier.FNet(
        {"hidden_size": 16, "num_layers": 1, "intermediate_size": 32},
        vocabulary_size=50,
        max_sequence_length=8,
    )
    gnconv = keras_fourier.build_model(
        "gnconv_gf", depths=[1, 1], dims=[16, 32], input_shape=(32, 32, 3)
    )
    for model in (afno, fnet, gnconv):
        assert keras_fourier.flops(model) > 0
    # FNet's mixing: one complex FFT over the (8, 16) tokens, N ceil(log2 N) with N = 128.
    rows = {name: count for name, _, count in keras_fourier.flops(fnet, by_layer=True)}
    block = rows["encoder_layer_0"]
    assert block == 128 * 7 + 2 * 8 * 16 * 32 + 2 * 5 * 8 * 16


def test_flops_rejects_non_models():
    with pytest.raises(TypeError, match="model"):
        keras_fourier.flops("gfnet_xs")


def test_flops_command_prints_the_total(capsys):
    assert main(["flops", "gfnet_tiny", "--image-size", "16", "--classes", "10", "--by-layer"]) == 0
    out = capsys.readouterr().out
    total = keras_fourier.flops(
        keras_fourier.training.create_model("gfnet_tiny", num_classes=10, image_size=16)
    )
    assert f"({total} multiply-adds per input)" in out
    assert "stage0_block0_mixer" in out
