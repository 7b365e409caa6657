"""The FNet paper's models (BERT, Linear, Random, FF-only, FNet-Hybrid) and any-length FNet."""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest

from keras_fourier.layers import FNetEncoderBlock, LinearMixing, RandomMixing
from keras_fourier.models import FNet
from keras_fourier.models.fnet_family import FNET_VARIANTS, PAPER_MODELS
from keras_fourier.models.names import TEXT_MIXINGS, TEXT_PRESETS
from tests.harness import random_input, relative_error, run_layer_checks, run_model_checks

# The layer and model tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend

TINY = {"hidden_size": 16, "num_layers": 2, "intermediate_size": 32}
VOCAB = 100
MAX_LENGTH = 16
BATCH = 2
# FNet-Base without a head, 32,000-piece vocabulary (tests/test_fnet_models.py asserts it).
FNET_BASE_PARAMS = 82_861_056


def tiny(**kwargs) -> keras.Model:
    return FNet(TINY, vocabulary_size=VOCAB, max_sequence_length=MAX_LENGTH, **kwargs)


def ids(length: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "token_ids": rng.integers(0, VOCAB, (BATCH, length)).astype("int32"),
        "segment_ids": rng.integers(0, 4, (BATCH, length)).astype("int32"),
    }


def numpy_outputs(outputs) -> dict[str, np.ndarray]:
    return {key: keras.ops.convert_to_numpy(value) for key, value in outputs.items()}


def mixing_params(mixing: str, sizes: dict[str, int], length: int) -> tuple[int, int]:
    """(learned, fixed) parameters of one mixing sublayer, its block built at (None, L, D)."""
    block = FNetEncoderBlock(
        intermediate_size=1, mixing=mixing, max_sequence_length=length, dropout=0.0
    )
    block.build((None, length, sizes["hidden_size"]))
    learned = sum(int(np.prod(w.shape)) for w in block.mixing.trainable_weights)
    fixed = sum(int(np.prod(w.shape)) for w in block.mixing.non_trainable_weights)
    return learned, fixed


@pytest.mark.single_backend
def test_mixing_parameters_per_layer_give_the_papers_table_2_counts():
    base = FNET_VARIANTS["base"]
    d, n = base["hidden_size"], 512
    per_layer = {name: mixing_params(name, base, n) for name in ("attention", "linear", "random")}
    # Table 2 (left): BERT's Q, K, V and output projections with biases; Linear's two
    # learned matrices; Random's two fixed ones, not learned.
    assert per_layer["attention"] == (4 * d * d + 4 * d, 0) == (2_362_368, 0)
    assert per_layer["linear"] == (n * n + d * d, 0) == (851_968, 0)
    assert per_layer["random"] == (0, n * n + d * d)
    for name in ("fourier", "identity"):
        assert mixing_params(name, base, n) == (0, 0)

    def learned(row: dict) -> int:
        mixing = row.get("mixing", "fourier")
        attention = row.get("attention_layers", 0)
        mixed = base["num_layers"] - attention
        return (
            FNET_BASE_PARAMS
            + mixed * mixing_params(mixing, base, n)[0] * (mixing != "fourier")
            + attention * per_layer["attention"][0]
        )

    millions = {name: round(learned(row) / 1e6) for name, row in PAPER_MODELS.items()}
    # Table 2 (BERT 111M, Linear 93M, FNet, Random and FF-only 83M) and Table 3 (FNet-Hybrid
    # at 768 x 12: 88M).
    assert millions == {
        "fnet": 83,
        "bert": 111,
        "linear": 93,
        "random": 83,
        "ff_only": 83,
        "fnet_hybrid": 88,
    }


@pytest.mark.single_backend
def test_the_builder_wires_each_mixing_into_every_block():
    fnet = tiny().count_params()
    d, n, layers = TINY["hidden_size"], MAX_LENGTH, TINY["num_layers"]
    attention = 4 * d * d + 4 * d
    expected = {
        "attention": fnet + layers * attention,
        "linear": fnet + layers * (n * n + d * d),
        "random": fnet + layers * (n * n + d * d),
        "identity": fnet,
    }
    for mixing, count in expected.items():
        model = tiny(mixing=mixing)
        assert model.count_params() == count, mixing
        assert {model.get_layer(f"encoder_layer_{i}").mixing_name for i in range(layers)} == {
            mixing
        }
    random_model = tiny(mixing="random")
    assert len(random_model.trainable_weights) == len(tiny().trainable_weights)
    hybrid = tiny(attention_layers=1)
    assert hybrid.count_params() == fnet + attention
    names = [hybrid.get_layer(f"encoder_layer_{i}").mixing_name for i in range(layers)]
    assert names == ["fourier", "attention"]
    assert TEXT_PRESETS["bert_base"] == FNET_VARIANTS["base"]
    assert TEXT_MIXINGS["fnet_hybrid_base"] == {"mixing": "fourier", "attention_layers": 2}
    assert TEXT_MIXINGS["fnet_base"] == {}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mixing": "attention"},
        {"mixing": "linear"},
        {"mixing": "random"},
        {"mixing": "identity"},
        {"attention_layers": 1, "use_padding_mask": True},
    ],
    ids=["bert", "linear", "random", "ff_only", "fnet_hybrid_masked"],
)
def test_each_paper_model_passes_the_model_checks(kwargs, tmp_path):
    inputs = ids(8, seed=1)
    if kwargs.get("use_padding_mask"):
        inputs["padding_mask"] = np.array([[1] * 8, [1] * 5 + [0] * 3], "int32")
    run_model_checks(
        lambda: tiny(num_classes=3, dropout=0.0, sequence_length=8, **kwargs),
        inputs,
        str(tmp_path),
    )


def test_random_mixing_is_fixed_by_its_seed_and_saved_with_the_model(tmp_path):
    first, again = tiny(mixing="random"), tiny(mixing="random")
    for a, b in zip(first.non_trainable_weights, again.non_trainable_weights, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    kernels = [keras.ops.convert_to_numpy(w) for w in first.non_trainable_weights]
    assert len(kernels) == 2 * TINY["num_layers"]
    assert not np.array_equal(kernels[0], kernels[2]), "each block draws its own matrices"
    # LeCun normal: variance 1 / fan-in.
    assert abs(np.std(kernels[1]) * np.sqrt(MAX_LENGTH) - 1.0) < 0.15
    layer = RandomMixing(MAX_LENGTH, seed=3)
    layer.build((None, None, 4))
    other = RandomMixing(MAX_LENGTH, seed=4)
    other.build((None, None, 4))
    assert not np.array_equal(
        keras.ops.convert_to_numpy(layer.hidden_kernel),
        keras.ops.convert_to_numpy(other.hidden_kernel),
    )


def test_linear_mixing_is_two_matrix_products_on_any_length():
    layer = LinearMixing(MAX_LENGTH)
    x = random_input((BATCH, 5, 4), seed=2)
    layer.build((None, None, 4))
    sequence = keras.ops.convert_to_numpy(layer.sequence_kernel).astype("float64")
    hidden = keras.ops.convert_to_numpy(layer.hidden_kernel).astype("float64")
    expected = np.einsum("ni,bij,jk->bnk", sequence[:5, :5], x.astype("float64"), hidden)
    actual = keras.ops.convert_to_numpy(layer(x))
    assert relative_error(actual, expected) < 1e-5


@pytest.mark.parametrize("layer_class", [LinearMixing, RandomMixing])
def test_sequence_mixings_pass_the_shared_layer_checks(layer_class, tmp_path):
    expected = (
        {"sequence_kernel": (12, 12), "hidden_kernel": (8, 8)}
        if layer_class is LinearMixing
        else {}
    )
    run_layer_checks(
        lambda **kwargs: layer_class(max_sequence_length=12, **kwargs),
        (2, 12, 8),
        expected,
        str(tmp_path),
    )


@pytest.mark.parametrize(
    ("mixing", "fft_impl"),
    [("fourier", "fft"), ("fourier", "matmul"), ("attention", "auto"), ("linear", "auto")],
)
def test_any_length_model_equals_fixed_length_models(mixing, fft_impl):
    free = tiny(mixing=mixing, fft_impl=fft_impl)
    assert free.input["token_ids"].shape == (None, None)
    for length in (5, MAX_LENGTH):
        fixed = tiny(mixing=mixing, fft_impl=fft_impl, sequence_length=length)
        fixed.set_weights(free.get_weights())
        inputs = ids(length, seed=length)
        actual = numpy_outputs(free(inputs, training=False))
        expected = numpy_outputs(fixed(inputs, training=False))
        assert actual["sequence_output"].shape == (BATCH, length, TINY["hidden_size"])
        for key, value in expected.items():
            assert relative_error(actual[key], value) < 1e-5, (key, length)


def test_any_length_model_passes_the_model_checks(tmp_path):
    run_model_checks(lambda: tiny(num_classes=3, dropout=0.0), ids(7, seed=3), str(tmp_path))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mixing": "fft"}, "mixing='fft'"),
        ({"attention_layers": 3}, "attention_layers=3"),
        ({"attention_layers": -1}, "attention_layers=-1"),
        ({"attention_layers": True}, "attention_layers=True"),
        ({"num_heads": 0}, "num_heads=0"),
    ],
)
def test_bad_mixing_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        tiny(**kwargs)


def test_bad_mixing_layer_arguments_raise_value_error():
    with pytest.raises(ValueError, match=re.escape("max_sequence_length=None")):
        FNetEncoderBlock(intermediate_size=8, mixing="linear")
    with pytest.raises(ValueError, match=re.escape("seed=-1")):
        RandomMixing(8, seed=-1)
    with pytest.raises(ValueError, match=re.escape("max_sequence_length=4")):
        LinearMixing(4)(keras.ops.ones((1, 6, 2)))


@pytest.mark.single_backend
def test_free_length_fnet_trains_on_batches_padded_per_batch_and_bucketed():
    import tensorflow as tf

    from keras_fourier.data.text import ByteTokenizer, select_model_inputs, text_dataset

    texts = ["a", "bb", "ccccccccc", "dd", "eeeeeeeeeeeeeeeeeeeeeeeeee", "f", "gggggg", "hhhh"]
    labels = [0, 1, 2, 0, 1, 2, 0, 1]
    padded = text_dataset(texts, labels, sequence_length=MAX_LENGTH, batch_size=2, padding="batch")
    lengths = [int(features["token_ids"].shape[1]) for features, _ in padded]
    # [CLS] text [SEP], cut to MAX_LENGTH: each batch as long as its longest text.
    assert lengths == [4, 11, MAX_LENGTH, 8]
    for features, _ in padded:
        real = features["padding_mask"].numpy().sum(axis=1)
        assert real.max() == features["token_ids"].shape[1]
    bucketed = text_dataset(
        texts,
        labels,
        sequence_length=MAX_LENGTH,
        batch_size=2,
        padding="batch",
        bucket_boundaries=[6],
    )
    seen = sorted((int(f["token_ids"].shape[1]), tuple(y.numpy())) for f, y in bucketed)
    assert [length for length, _ in seen] == [4, 4, 8, MAX_LENGTH]
    assert sorted(label for _, batch in seen for label in batch) == sorted(labels)

    model = FNet(
        TINY,
        vocabulary_size=ByteTokenizer.vocabulary_size,
        max_sequence_length=MAX_LENGTH,
        num_classes=3,
        dropout=0.0,
        fft_impl="matmul",
    )
    model.compile(
        keras.optimizers.Adam(1e-2),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,
    )
    history = model.fit(select_model_inputs(padded, model), epochs=2, verbose=0)
    assert history.history["loss"][1] < history.history["loss"][0], history.history
    # One graph for every length: the DFT tables are built from the batch's length.
    traced = tf.function(lambda t, s: model({"token_ids": t, "segment_ids": s}))
    spec = tf.TensorSpec((None, None), tf.int32)
    concrete = traced.get_concrete_function(spec, spec)
    for length in (3, 12):
        batch = ids(length, seed=length)
        expected = keras.ops.convert_to_numpy(model(batch, training=False))
        actual = concrete(tf.constant(batch["token_ids"]), tf.constant(batch["segment_ids"]))
        assert relative_error(actual.numpy(), expected) < 1e-5


@pytest.mark.single_backend
def test_text_dataset_padding_arguments_are_checked():
    from keras_fourier.data.text import text_dataset

    with pytest.raises(ValueError, match=re.escape("padding='ragged'")):
        text_dataset(["a"], [0], padding="ragged")
    with pytest.raises(ValueError, match=re.escape("bucket_boundaries=[8, 4]")):
        text_dataset(["a"], [0], padding="batch", bucket_boundaries=[8, 4])
    with pytest.raises(ValueError, match=re.escape("bucket_boundaries=[4]")):
        text_dataset(["a"], [0], bucket_boundaries=[4])


@pytest.mark.single_backend
@pytest.mark.parametrize("mixing", ["linear", "random", "identity"])
def test_free_length_paper_models_export_at_a_given_length(mixing, tmp_path):
    from keras_fourier import export

    # Each with a last self-attention block: every mixing goes through TFLite builtins.
    model = tiny(mixing=mixing, attention_layers=1, num_classes=3, use_padding_mask=True)
    with pytest.raises(ValueError, match=re.escape("Received: sequence_length=None")):
        export.tflite(model, tmp_path / "none.tflite", verbose=False)
    assert not (tmp_path / "none.tflite").exists()
    report = export.tflite(model, tmp_path / "model.tflite", sequence_length=8, verbose=False)
    assert report.max_abs_diff < 1e-4
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(tmp_path / "model.tflite"))
    shapes = {d["name"]: tuple(d["shape"]) for d in interpreter.get_input_details()}
    assert set(shapes.values()) == {(1, 8)}
    with pytest.raises(ValueError, match=re.escape("sequence_length=9")):
        export.saved_model(tiny(sequence_length=8), tmp_path / "sm", sequence_length=9)
    assert not (tmp_path / "sm").exists()


@pytest.mark.single_backend
def test_fnet_paper_bench_times_models_and_mixing_sublayers():
    from keras_fourier.bench import run_fnet_paper

    report = run_fnet_paper(
        models=("bert", "linear"),
        mixings=("attention", "fourier"),
        variant=TINY,
        sequence_length=8,
        batch_size=2,
        vocabulary_size=VOCAB,
        repeats=1,
        train=False,  # the training steps' compilation is the bulk of the time
    )
    rows = {(row["part"], row["name"]): row for row in report["rows"]}
    assert set(rows) == {
        ("model", "bert"),
        ("model", "linear"),
        ("mixing", "attention"),
        ("mixing", "fourier"),
    }
    d = TINY["hidden_size"]
    assert rows["mixing", "attention"]["params"] == 4 * d * d + 4 * d
    assert rows["mixing", "fourier"]["params"] == 0
    assert rows["model", "bert"]["params"] > rows["model", "linear"]["params"]
    for (part, name), row in rows.items():
        reference = "bert" if part == "model" else "attention"
        assert row["inference_speedup"] == 1 if name == reference else row["inference_speedup"] > 0
        assert row["train_speedup"] is None
    assert all(row["inference_seq_per_s"] > 0 for (p, _), row in rows.items() if p == "model")
    assert report["host"]["matmul_macs_per_s"] > 0
    assert report["host"]["matmul_shape"] == [16, d, TINY["intermediate_size"]]


@pytest.mark.single_backend
@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--fnet-paper", "--scaling"],
        ["bench", "fnet_base", "--fnet-paper"],
        ["bench", "--fnet-paper", "--sequence-length", "0"],
    ],
)
def test_fnet_paper_bench_refuses_bad_arguments_and_writes_nothing(argv, tmp_path):
    from keras_fourier.cli import main

    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit, match="2"):
        main(["bench", "--fnet-paper", "--paper-models", "gpt", "--out", str(tmp_path / "out")])


@pytest.mark.single_backend
def test_export_command_asks_a_free_length_model_for_its_length(tmp_path, capsys):
    from keras_fourier.cli import main

    path = tmp_path / "free.keras"
    tiny(num_classes=3).save(path)
    out = tmp_path / "out"
    assert main(["export", str(path), "--format", "saved_model", "--out", str(out)]) == 2
    assert "Received: --sequence-length=None" in capsys.readouterr().err
    assert not (out / "fnet").exists()
