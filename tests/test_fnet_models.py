"""FNet text encoders: parameter counts, wiring against NumPy, masking, saving, errors."""

from __future__ import annotations

import gc
import inspect
import os
import re

import keras
import numpy as np
import pytest

from keras_fourier.layers import FNetEmbeddings, FNetEncoderBlock, FNetMaskedLMHead, FourierMixing
from keras_fourier.models import FNet, FNetBase, FNetLarge
from keras_fourier.models.fnet_family import FNET_VARIANTS
from tests.harness import (
    KerasTestCase,
    check_dtype_policy,
    random_input,
    relative_error,
    run_layer_checks,
    run_model_checks,
)

# The layer, model and weight tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend

TINY = {"hidden_size": 16, "num_layers": 2, "intermediate_size": 32}
VOCAB = 100
MAX_LENGTH = 16
LENGTH = 8
BATCH = 4
NUM_REAL = 5  # positions 0..4 are real tokens, 5..7 padding


def tiny(**kwargs) -> keras.Model:
    config = {
        "vocabulary_size": VOCAB,
        "max_sequence_length": MAX_LENGTH,
        "sequence_length": LENGTH,
        **kwargs,
    }
    return FNet(TINY, **config)


def tiny_inputs(seed: int = 0, with_mask: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inputs = {
        "token_ids": rng.integers(0, VOCAB, (BATCH, LENGTH)).astype("int32"),
        "segment_ids": rng.integers(0, 4, (BATCH, LENGTH)).astype("int32"),
    }
    if with_mask:
        mask = np.zeros((BATCH, LENGTH), dtype="int32")
        mask[:, :NUM_REAL] = 1
        inputs["padding_mask"] = mask
    return inputs


def as_numpy(outputs) -> dict[str, np.ndarray]:
    return {key: keras.ops.convert_to_numpy(value) for key, value in outputs.items()}


def weights_of(layer: keras.layers.Layer) -> dict[str, np.ndarray]:
    prefix = layer.path + "/"
    return {
        v.path.removeprefix(prefix): keras.ops.convert_to_numpy(v).astype("float64")
        for v in layer.weights
    }


def np_layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def np_gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def np_block(x, w, mask=None):
    """Post-LN FNet block in float64: Re(fft2) mixing, tanh-GELU feed-forward."""
    mixing_input = x if mask is None else x * mask[..., None]
    mixed = np.fft.fft2(mixing_input, axes=(1, 2)).real
    x = np_layer_norm(x + mixed, w["mixing_norm/gamma"], w["mixing_norm/beta"])
    hidden = np_gelu_tanh(x @ w["intermediate/kernel"] + w["intermediate/bias"])
    feed_forward = hidden @ w["output/kernel"] + w["output/bias"]
    return np_layer_norm(x + feed_forward, w["output_norm/gamma"], w["output_norm/beta"])


def np_model(model: keras.Model, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    emb = weights_of(model.get_layer("embeddings"))
    x = (
        emb["word/embeddings"][inputs["token_ids"]]
        + emb["position/embeddings"][:LENGTH][None]
        + emb["segment/embeddings"][inputs["segment_ids"]]
    )
    x = np_layer_norm(x, emb["norm/gamma"], emb["norm/beta"])
    x = x @ emb["projection/kernel"] + emb["projection/bias"]
    mask = inputs.get("padding_mask")
    for index in range(TINY["num_layers"]):
        x = np_block(x, weights_of(model.get_layer(f"encoder_layer_{index}")), mask)
    pooler = weights_of(model.get_layer("pooler"))
    pooled = np.tanh(x[:, 0] @ pooler["kernel"] + pooler["bias"])
    return {"sequence_output": x, "pooled_output": pooled}


@pytest.mark.single_backend
def test_parameter_counts_match_the_paper_sizes():
    base = FNetBase()
    assert base.count_params() == 82_861_056
    assert base.name == "fnet_base"
    assert len([la for la in base.layers if la.name.startswith("encoder_layer_")]) == 12
    del base
    gc.collect()
    large = FNetLarge()
    assert large.count_params() == 236_945_408
    assert large.get_layer("encoder_layer_23").intermediate.units == 4096
    assert tuple(large.output["pooled_output"].shape) == (None, 1024)
    del large
    keras.backend.clear_session()
    gc.collect()


def test_variant_constructors_are_the_generic_builder():
    assert FNET_VARIANTS["base"] == {
        "hidden_size": 768,
        "num_layers": 12,
        "intermediate_size": 3072,
    }
    for builder, variant in ((FNetBase, "base"), (FNetLarge, "large")):
        assert builder.__name__ == f"FNet{variant.capitalize()}"
        parameters = inspect.signature(builder).parameters
        assert "variant" not in parameters
        assert parameters["name"].default == f"fnet_{variant}"
        assert set(parameters) == set(inspect.signature(FNet).parameters) - {"variant"}
        assert str(FNET_VARIANTS[variant]["hidden_size"]) in builder.__doc__


def test_outputs_shapes_names_and_layer_paths():
    model = tiny()
    assert set(model.input) == {"token_ids", "segment_ids"}
    assert set(tiny(use_padding_mask=True).input) == {"token_ids", "segment_ids", "padding_mask"}
    outputs = as_numpy(model(tiny_inputs()))
    assert outputs["sequence_output"].shape == (BATCH, LENGTH, 16)
    assert outputs["pooled_output"].shape == (BATCH, 16)
    assert all(np.all(np.isfinite(v)) for v in outputs.values())
    paths = {v.path: tuple(v.shape) for v in model.weights}
    assert paths["embeddings/word/embeddings"] == (VOCAB, 16)
    assert paths["embeddings/position/embeddings"] == (MAX_LENGTH, 16)
    assert paths["embeddings/segment/embeddings"] == (4, 16)
    assert paths["embeddings/projection/kernel"] == (16, 16)
    assert paths["encoder_layer_1/mixing_norm/gamma"] == (16,)
    assert paths["encoder_layer_1/intermediate/kernel"] == (16, 32)
    assert paths["encoder_layer_1/output/kernel"] == (32, 16)
    assert paths["encoder_layer_1/output_norm/beta"] == (16,)
    assert paths["pooler/kernel"] == (16, 16)
    assert len(paths) == 7 + 8 * TINY["num_layers"] + 2


@pytest.mark.parametrize("use_padding_mask", [False, True])
def test_model_matches_numpy_reference(use_padding_mask):
    model = tiny(use_padding_mask=use_padding_mask)
    inputs = tiny_inputs(seed=1, with_mask=use_padding_mask)
    expected = np_model(model, inputs)
    actual = as_numpy(model(inputs, training=False))
    for key, value in expected.items():
        assert relative_error(actual[key], value) < 1e-4, key


def test_encoder_block_matches_numpy_reference():
    block = FNetEncoderBlock(intermediate_size=32, dropout=0.1, name="block")
    x = random_input((3, LENGTH, 16), seed=2)
    mask = (np.random.default_rng(3).random((3, LENGTH)) > 0.3).astype("int32")
    block.build(x.shape)
    rng = np.random.default_rng(4)
    block.set_weights([rng.normal(1.0, 0.5, w.shape).astype("float32") for w in block.weights])
    w = weights_of(block)
    x64 = x.astype("float64")
    unmasked = keras.ops.convert_to_numpy(block(x, training=False))
    masked = keras.ops.convert_to_numpy(block(x, padding_mask=mask, training=False))
    assert relative_error(unmasked, np_block(x64, w)) < 1e-4
    assert relative_error(masked, np_block(x64, w, mask.astype("float64"))) < 1e-4
    assert relative_error(masked, unmasked) > 1e-2


def test_encoder_block_passes_the_shared_layer_checks(tmp_path):
    def make(**kwargs):
        return FNetEncoderBlock(intermediate_size=32, dropout=0.0, **kwargs)

    expected = {
        "mixing_norm/gamma": (16,),
        "mixing_norm/beta": (16,),
        "intermediate/kernel": (16, 32),
        "intermediate/bias": (32,),
        "output/kernel": (32, 16),
        "output/bias": (16,),
        "output_norm/gamma": (16,),
        "output_norm/beta": (16,),
    }
    run_layer_checks(make, (2, LENGTH, 16), expected, str(tmp_path))


def test_embeddings_follow_the_layer_dtype_policy():
    ids = np.random.default_rng(0).integers(0, VOCAB, (2, LENGTH)).astype("int32")
    segments = np.zeros((2, LENGTH), dtype="int32")

    def make(**kwargs):
        return FNetEmbeddings(VOCAB, 16, max_sequence_length=MAX_LENGTH, num_segments=2, **kwargs)

    check_dtype_policy(make, ids, segments)
    out = make(dtype="mixed_float16")(ids, segments)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"


def test_masked_lm_head_follows_the_layer_dtype_policy():
    sequence = random_input((2, LENGTH, 16), seed=3)
    positions = np.array([[0, 2], [1, 7]], dtype="int32")
    table = random_input((VOCAB, 16), seed=4)

    def make(**kwargs):
        return FNetMaskedLMHead(VOCAB, 16, **kwargs)

    check_dtype_policy(make, sequence, positions, table)
    assert tuple(make()(sequence, positions, table).shape) == (2, 2, VOCAB)


def test_fnet_passes_the_model_checks(tmp_path):
    run_model_checks(lambda: tiny(num_classes=3, dropout=0.0), tiny_inputs(), str(tmp_path))


def test_classifier_head():
    logits = tiny(num_classes=3)
    assert logits.output_shape == (None, 3)
    assert [la.name for la in logits.layers[-2:]] == ["classifier_dropout", "classifier"]
    probabilities = tiny(num_classes=3, classifier_activation="softmax")
    out = keras.ops.convert_to_numpy(probabilities(tiny_inputs()))
    assert out.shape == (BATCH, 3)
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-5)


def test_fit_one_step_lowers_the_loss():
    model = tiny(num_classes=3)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    inputs = tiny_inputs(seed=5)
    labels = np.array([0, 1, 2, 1], dtype="int32")
    before = model.evaluate(inputs, labels, verbose=0)
    model.fit(inputs, labels, batch_size=BATCH, epochs=1, verbose=0)
    after = model.evaluate(inputs, labels, verbose=0)
    assert after < before, (before, after)


def test_keras_round_trip_and_weights_argument(tmp_path):
    model = tiny()
    inputs = tiny_inputs(seed=6)
    expected = as_numpy(model.predict(inputs, verbose=0))
    path = os.path.join(tmp_path, "fnet.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    actual = as_numpy(loaded.predict(inputs, verbose=0))
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value)
    assert [v.path for v in loaded.weights] == [v.path for v in model.weights]

    weights_path = os.path.join(tmp_path, "fnet.weights.h5")
    model.save_weights(weights_path)
    restored = tiny(weights=weights_path)
    actual = as_numpy(restored.predict(inputs, verbose=0))
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value)


@pytest.mark.filterwarnings("ignore:Skipping nested container")
def test_weights_of_another_size_raise_value_error(tmp_path):
    narrow = os.path.join(tmp_path, "narrow.weights.h5")
    FNet({**TINY, "hidden_size": 8}, vocabulary_size=VOCAB, sequence_length=LENGTH).save_weights(
        narrow
    )
    with pytest.raises(ValueError, match="do not match the architecture"):
        tiny(weights=narrow)


def test_matmul_dft_matches_fft():
    reference = tiny(fft_impl="fft")
    matmul = tiny(fft_impl="matmul")
    matmul.set_weights(reference.get_weights())
    inputs = tiny_inputs(seed=7)
    expected = as_numpy(reference(inputs, training=False))
    actual = as_numpy(matmul(inputs, training=False))
    for key, value in expected.items():
        assert relative_error(actual[key], value) <= 1e-4, key


def _padded_pair(seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A padded batch (positions NUM_REAL.. are padding) and the same batch with other
    token and segment ids at the padded positions only."""
    inputs = tiny_inputs(seed=seed, with_mask=True)
    changed = {key: value.copy() for key, value in inputs.items()}
    shift = np.random.default_rng(seed + 1).integers(1, VOCAB, (BATCH, LENGTH - NUM_REAL))
    changed["token_ids"][:, NUM_REAL:] = (changed["token_ids"][:, NUM_REAL:] + shift) % VOCAB
    changed["segment_ids"][:, NUM_REAL:] = (changed["segment_ids"][:, NUM_REAL:] + 1) % 4
    return inputs, changed


def test_default_mixes_padded_positions_as_the_official_code():
    model = tiny()
    assert "padding_mask" not in model.input
    inputs, changed = _padded_pair(seed=8)
    ids = ("token_ids", "segment_ids")
    first = as_numpy(model({k: inputs[k] for k in ids}, training=False))
    second = as_numpy(model({k: changed[k] for k in ids}, training=False))
    real = np.abs(second["sequence_output"][:, :NUM_REAL] - first["sequence_output"][:, :NUM_REAL])
    assert np.max(real) > 1e-2
    assert np.max(np.abs(second["pooled_output"] - first["pooled_output"])) > 1e-3


def test_padding_mask_keeps_padding_out_of_real_positions():
    masked = tiny(use_padding_mask=True)
    inputs, changed = _padded_pair(seed=8)
    first = as_numpy(masked(inputs, training=False))
    second = as_numpy(masked(changed, training=False))
    np.testing.assert_array_equal(
        second["sequence_output"][:, :NUM_REAL], first["sequence_output"][:, :NUM_REAL]
    )
    np.testing.assert_array_equal(second["pooled_output"], first["pooled_output"])
    assert np.max(np.abs(second["sequence_output"] - first["sequence_output"])) > 1e-3


def test_all_ones_mask_equals_no_mask():
    masked = tiny(use_padding_mask=True)
    unmasked = tiny()
    unmasked.set_weights(masked.get_weights())
    inputs = tiny_inputs(seed=10, with_mask=True)
    inputs["padding_mask"] = np.ones_like(inputs["padding_mask"])
    expected = as_numpy(unmasked({k: inputs[k] for k in ("token_ids", "segment_ids")}))
    actual = as_numpy(masked(inputs))
    for key, value in expected.items():
        np.testing.assert_allclose(actual[key], value, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"variant": "huge"}, "variant='huge'"),
        ({"variant": {"hidden_size": 16, "num_layers": 2}}, "variant={'hidden_size': 16"),
        ({"variant": {**TINY, "hidden_size": 0}}, "hidden_size=0"),
        ({"variant": {**TINY, "num_layers": -1}}, "num_layers=-1"),
        ({"variant": {**TINY, "intermediate_size": 2.5}}, "intermediate_size=2.5"),
        ({"vocabulary_size": 0}, "vocabulary_size=0"),
        ({"vocabulary_size": True}, "vocabulary_size=True"),
        ({"max_sequence_length": -4}, "max_sequence_length=-4"),
        ({"num_segments": 0}, "num_segments=0"),
        ({"sequence_length": 0}, "sequence_length=0"),
        ({"sequence_length": 17}, "sequence_length=17"),
        ({"dropout": 1.0}, "dropout=1.0"),
        ({"dropout": -0.1}, "dropout=-0.1"),
        ({"num_classes": 0}, "num_classes=0"),
        ({"num_classes": 2, "classifier_activation": "nope"}, "classifier_activation='nope'"),
        ({"fft_impl": "dft"}, "fft_impl='dft'"),
        ({"heads": "mlm"}, "heads='mlm'"),
        ({"heads": "pretraining", "num_classes": 2}, "num_classes=2"),
        ({"weights": "imagenet"}, "weights='imagenet'"),
        ({"weights": "missing.weights.h5"}, "weights='missing.weights.h5'"),
        ({"weights": 3}, "weights=3"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, message):
    config = {"variant": TINY, "vocabulary_size": VOCAB, "max_sequence_length": MAX_LENGTH}
    config.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        FNet(config.pop("variant"), **config)


def test_bad_arguments_of_variant_constructors_raise_before_building():
    with pytest.raises(ValueError, match=re.escape("weights='imagenet'")):
        FNetBase(weights="imagenet")
    with pytest.raises(ValueError, match=re.escape("sequence_length=1024")):
        FNetLarge(sequence_length=1024)


def test_bad_layer_arguments_raise_value_error():
    with pytest.raises(ValueError, match=re.escape("intermediate_size=0")):
        FNetEncoderBlock(intermediate_size=0)
    with pytest.raises(ValueError, match=re.escape("fft_impl='dft'")):
        FNetEncoderBlock(intermediate_size=8, fft_impl="dft")
    with pytest.raises(ValueError, match=re.escape("hidden_size=-1")):
        FNetEmbeddings(VOCAB, -1, max_sequence_length=8, num_segments=2)
    embeddings = FNetEmbeddings(VOCAB, 16, max_sequence_length=4, num_segments=2)
    ids = np.zeros((2, 8), dtype="int32")
    with pytest.raises(ValueError, match=re.escape("max_sequence_length=4")):
        embeddings(ids, ids)


def _large_mean_tokens() -> np.ndarray:
    # FNet-Base's mixing size (L, D) = (512, 768) with mean 0.2: the unnormalised DFT's DC
    # term is 512 * 768 * 0.2 = 78,643, beyond float16's 65,504.
    return (0.2 + 0.05 * random_input((1, 512, 768))).astype("float32")


def test_fourier_mixing_stays_float32_under_mixed_float16():
    x = _large_mean_tokens()
    expected = keras.ops.convert_to_numpy(FourierMixing()(x))
    assert np.max(np.abs(expected)) > 65504
    layer = FourierMixing(dtype="mixed_float16")
    out = layer(x)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), expected, rtol=1e-3, atol=1.0)
    bf16 = FourierMixing(dtype="mixed_bfloat16")(x)
    assert keras.backend.standardize_dtype(bf16.dtype) == "bfloat16"


def test_fnet_base_block_runs_and_trains_finite_under_mixed_float16():
    x = _large_mean_tokens()
    reference = FNetEncoderBlock(intermediate_size=64, dropout=0.0)
    expected = keras.ops.convert_to_numpy(reference(x))
    keras.config.set_dtype_policy("mixed_float16")
    inputs = keras.Input((512, 768))
    block = FNetEncoderBlock(intermediate_size=64, dropout=0.0)
    model = keras.Model(inputs, block(inputs))
    block.set_weights(reference.get_weights())
    out = keras.ops.convert_to_numpy(keras.ops.cast(model(x), "float32"))
    assert np.all(np.isfinite(out))
    assert relative_error(out, expected) < 3e-2
    model.compile(optimizer="sgd", loss="mse")
    loss = model.train_on_batch(x, np.zeros_like(x))
    assert np.isfinite(loss)
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())


def test_multi_input_layers_pass_keras_layer_test():
    # Keras's own layer test, mixed-precision check on, for the layers whose call takes several
    # tensors (the shared harness runs it for the single-input ones).
    KerasTestCase().run_layer_test(
        FNetEmbeddings,
        init_kwargs={
            "vocabulary_size": 20,
            "hidden_size": 8,
            "max_sequence_length": 16,
            "num_segments": 8,
        },
        input_shape={"token_ids_shape": (2, 6), "segment_ids_shape": (2, 6)},
        input_dtype={"token_ids_shape": "int32", "segment_ids_shape": "int32"},
        expected_output_shape=(2, 6, 8),
        run_training_check=False,
        run_mixed_precision_check=True,
    )
    KerasTestCase().run_layer_test(
        FNetMaskedLMHead,
        init_kwargs={"vocabulary_size": 20, "embedding_size": 8},
        input_shape={
            "sequence_output_shape": (2, 6, 8),
            "masked_positions_shape": (2, 3),
            "word_embeddings_shape": (20, 8),
        },
        input_dtype={
            "sequence_output_shape": "float32",
            "masked_positions_shape": "int32",
            "word_embeddings_shape": "float32",
        },
        expected_output_shape=(2, 3, 20),
        run_training_check=False,
        run_mixed_precision_check=True,
    )
