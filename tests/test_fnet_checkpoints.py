"""FNet's official checkpoints, keras-hub presets and releases, on small synthetic files.

The checkpoints are written here in the official layout: the parameter tree
of google-research ``f_net``'s Flax modules (``PreTrainingModel``:
``encoder/{embedder,encoder_i,feed_forward_i,pooler}``, ``predictions_*``,
``classification``), inside a ``flax.optim`` optimizer state dict
(``{"target", "state": {"step", "param_states"}}``) serialised as Flax's
``to_bytes`` does (MessagePack, arrays as extension type 1 holding the
msgpack of ``[shape, dtype name, bytes]``), by a small writer of this test
module, independent of the package's reader.
"""

from __future__ import annotations

import json
import os
import re
import struct

import h5py
import keras
import numpy as np
import pytest

from keras_fourier.models import FNet, FNetPretraining
from keras_fourier.models.fnet_family import RELEASES
from keras_fourier.models.fnet_weights import load_fnet_weights
from keras_fourier.weights import download
from keras_fourier.weights.flax_msgpack import FlaxCheckpointError, read_flax_checkpoint
from tests.release_server import serve

pytestmark = pytest.mark.single_backend

SIZES = {"hidden_size": 16, "num_layers": 2, "intermediate_size": 32}
VOCAB, MAX_LENGTH, SEGMENTS, LENGTH = 50, 12, 4, 8


# --- A MessagePack writer (the subset Flax's to_bytes produces) ---------------------------


def _header(length: int, small: int | None, codes: tuple[int, int, int], fix: int = 0) -> bytes:
    if small is not None and length < small:
        return bytes([fix | length])
    for code, fmt, limit in zip(codes, (">B", ">H", ">I"), (1 << 8, 1 << 16, 1 << 32), strict=True):
        if code is not None and length < limit:
            return bytes([code]) + struct.pack(fmt, length)
    raise ValueError(length)


def pack(value) -> bytes:
    if isinstance(value, dict):
        out = _header(len(value), 16, (None, 0xDE, 0xDF), 0x80)
        return out + b"".join(pack(k) + pack(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return _header(len(value), 16, (None, 0xDC, 0xDD), 0x90) + b"".join(map(pack, value))
    if isinstance(value, str):
        data = value.encode()
        return _header(len(data), 32, (0xD9, 0xDA, 0xDB), 0xA0) + data
    if isinstance(value, bytes):
        return _header(len(value), None, (0xC4, 0xC5, 0xC6)) + value
    if value is None:
        return b"\xc0"
    if isinstance(value, bool):
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        return bytes([value]) if 0 <= value < 128 else b"\xd3" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"\xcb" + struct.pack(">d", value)
    if isinstance(value, np.ndarray):
        inner = pack([list(value.shape), value.dtype.name, np.ascontiguousarray(value).tobytes()])
        return ext(1, inner)
    raise TypeError(type(value))


def ext(code: int, data: bytes) -> bytes:
    return _header(len(data), None, (0xC7, 0xC8, 0xC9)) + struct.pack(">b", code) + data


def official_params(
    rng: np.random.Generator,
    classes: int = 2,
    heads: bool = True,
    sizes: dict[str, int] = SIZES,
    vocab: int = VOCAB,
    max_length: int = MAX_LENGTH,
) -> dict:
    """The Flax parameter tree of the official PreTrainingModel (or a classifier without MLM)."""
    d, ff, layers = sizes["hidden_size"], sizes["intermediate_size"], sizes["num_layers"]

    def normal(*shape):
        return rng.normal(0, 0.5, shape).astype(np.float32)

    encoder = {
        "embedder": {
            "word": {"embedding": normal(vocab, d)},
            "position": {"embedding": normal(1, max_length, d)},
            "type": {"embedding": normal(SEGMENTS, d)},
            "layer_norm": {"scale": normal(d), "bias": normal(d)},
            "hidden_mapping_in": {"kernel": normal(d, d), "bias": normal(d)},
        },
        "pooler": {"kernel": normal(d, d), "bias": normal(d)},
    }
    for i in range(layers):
        encoder[f"encoder_{i}"] = {
            "mixing_layer_norm": {"scale": normal(d), "bias": normal(d)},
            "output_layer_norm": {"scale": normal(d), "bias": normal(d)},
        }
        encoder[f"feed_forward_{i}"] = {
            "intermediate": {"kernel": normal(d, ff), "bias": normal(ff)},
            "output": {"kernel": normal(ff, d), "bias": normal(d)},
        }
    params = {
        "encoder": encoder,
        "classification": {"output_kernel": normal(classes, d), "output_bias": normal(classes)},
    }
    if heads:
        params["predictions_dense"] = {"kernel": normal(d, d), "bias": normal(d)}
        params["predictions_layer_norm"] = {"scale": normal(d), "bias": normal(d)}
        params["predictions_output"] = {"output_bias": normal(vocab)}
    return params


def _adam_state(params) -> dict:
    if isinstance(params, dict):
        return {key: _adam_state(value) for key, value in params.items()}
    return {"grad_ema": np.ones_like(params), "grad_sq_ema": np.full_like(params, 2.0)}


def write_checkpoint(path, params) -> str:
    state = {"step": np.asarray(1000, np.int32), "param_states": _adam_state(params)}
    with open(path, "wb") as file:
        file.write(pack({"target": params, "state": state}))
    return str(path)


def tiny(**kwargs) -> keras.Model:
    return FNet(
        SIZES,
        vocabulary_size=VOCAB,
        max_sequence_length=MAX_LENGTH,
        sequence_length=LENGTH,
        num_segments=SEGMENTS,
        **kwargs,
    )


def value(variable) -> np.ndarray:
    return keras.ops.convert_to_numpy(variable)


# --- Loading the official layout ----------------------------------------------------------


def test_pretraining_checkpoint_loads_whole_with_transposes(tmp_path):
    params = official_params(np.random.default_rng(0))
    path = write_checkpoint(tmp_path / "f_net_checkpoint", params)
    model = tiny(heads="pretraining", weights=path)
    assert isinstance(model, FNetPretraining)
    encoder = model.encoder
    embeddings = encoder.get_layer("embeddings")
    np.testing.assert_array_equal(
        value(embeddings.word.embeddings), params["encoder"]["embedder"]["word"]["embedding"]
    )
    np.testing.assert_array_equal(
        value(embeddings.position.embeddings),
        params["encoder"]["embedder"]["position"]["embedding"][0],
    )
    block = encoder.get_layer("encoder_layer_1")
    np.testing.assert_array_equal(
        value(block.output_dense.kernel), params["encoder"]["feed_forward_1"]["output"]["kernel"]
    )
    np.testing.assert_array_equal(
        value(block.mixing_norm.gamma),
        params["encoder"]["encoder_1"]["mixing_layer_norm"]["scale"],
    )
    np.testing.assert_array_equal(
        value(model.next_sentence_head.kernel), params["classification"]["output_kernel"].T
    )
    np.testing.assert_array_equal(
        value(model.masked_lm_head.output_bias), params["predictions_output"]["output_bias"]
    )
    np.testing.assert_array_equal(
        value(model.masked_lm_head.norm.gamma), params["predictions_layer_norm"]["scale"]
    )


def _np_gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _np_norm(x, scale, bias):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * scale + bias


def test_pretraining_heads_compute_the_official_functions(tmp_path):
    params = official_params(np.random.default_rng(1))
    model = tiny(heads="pretraining", weights=write_checkpoint(tmp_path / "ckpt", params))
    rng = np.random.default_rng(2)
    inputs = {
        "token_ids": rng.integers(0, VOCAB, (2, LENGTH)).astype("int32"),
        "segment_ids": np.zeros((2, LENGTH), "int32"),
        "masked_positions": np.array([[1, 3, 5], [0, 2, 7]], "int32"),
    }
    out = model(inputs, training=False)
    encoded = model.encoder({k: inputs[k] for k in ("token_ids", "segment_ids")}, training=False)
    sequence = value(encoded["sequence_output"]).astype(np.float64)
    pooled = value(encoded["pooled_output"]).astype(np.float64)
    gathered = np.take_along_axis(sequence, inputs["masked_positions"][..., None], axis=1)
    dense = params["predictions_dense"]
    hidden = _np_gelu(gathered @ dense["kernel"] + dense["bias"])
    norm = params["predictions_layer_norm"]
    hidden = _np_norm(hidden, norm["scale"], norm["bias"])
    word = params["encoder"]["embedder"]["word"]["embedding"]
    expected_lm = hidden @ word.T + params["predictions_output"]["output_bias"]
    nsp = params["classification"]
    expected_nsp = pooled @ nsp["output_kernel"].T + nsp["output_bias"]
    np.testing.assert_allclose(value(out["masked_lm_logits"]), expected_lm, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(value(out["next_sentence_logits"]), expected_nsp, atol=1e-4)


def test_tied_decoder_is_the_word_table():
    model = tiny(heads="pretraining")
    word = model.encoder.get_layer("embeddings").word.embeddings
    ids = {v.path for v in model.weights}
    assert len(ids) == len(model.weights)
    assert sum(v is word for v in model.weights) == 1
    assert not any(tuple(v.shape) == (VOCAB, 16) and v is not word for v in model.weights)


def test_encoder_and_classifier_load_a_pretraining_checkpoint(tmp_path):
    params = official_params(np.random.default_rng(3))
    path = write_checkpoint(tmp_path / "ckpt", params)
    encoder = tiny(weights=path)
    np.testing.assert_array_equal(
        value(encoder.get_layer("pooler").kernel), params["encoder"]["pooler"]["kernel"]
    )
    keras.utils.set_random_seed(0)
    fresh = tiny(num_classes=3)
    keras.utils.set_random_seed(0)
    classifier = tiny(num_classes=3, weights=path)
    # The NSP head is no classifier: the classifier keeps its fresh initialisation.
    np.testing.assert_array_equal(
        value(classifier.get_layer("classifier").kernel),
        value(fresh.get_layer("classifier").kernel),
    )
    np.testing.assert_array_equal(
        value(classifier.get_layer("pooler").kernel), params["encoder"]["pooler"]["kernel"]
    )


def test_fine_tuned_classification_checkpoint_loads_its_classifier(tmp_path):
    params = official_params(np.random.default_rng(4), classes=3, heads=False)
    classifier = tiny(num_classes=3, weights=write_checkpoint(tmp_path / "ckpt", params))
    np.testing.assert_array_equal(
        value(classifier.get_layer("classifier").kernel),
        params["classification"]["output_kernel"].T,
    )


def test_round_trip_through_weights_h5(tmp_path):
    params = official_params(np.random.default_rng(5))
    model = tiny(heads="pretraining", weights=write_checkpoint(tmp_path / "ckpt", params))
    saved = str(tmp_path / "pretraining.weights.h5")
    model.save_weights(saved)
    again = tiny(heads="pretraining", weights=saved)
    for ours, theirs in zip(model.weights, again.weights, strict=True):
        np.testing.assert_array_equal(value(ours), value(theirs))
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    for ours, theirs in zip(model.weights, loaded.weights, strict=True):
        np.testing.assert_array_equal(value(ours), value(theirs))


def _mismatch(tmp_path, params, **kwargs) -> str:
    model = tiny(heads="pretraining")
    before = [value(v) for v in model.weights]
    path = write_checkpoint(tmp_path / "bad", params)
    with pytest.raises(ValueError) as error:
        FNet(
            SIZES,
            vocabulary_size=VOCAB,
            max_sequence_length=MAX_LENGTH,
            sequence_length=LENGTH,
            num_segments=SEGMENTS,
            heads="pretraining",
            weights=path,
            **kwargs,
        )
    with pytest.raises(ValueError):
        load_fnet_weights(model, path)
    for old, variable in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, value(variable))
    return str(error.value)


def test_missing_extra_and_wrong_shape_keys_are_listed_and_nothing_loads(tmp_path):
    params = official_params(np.random.default_rng(6))
    del params["encoder"]["feed_forward_1"]["output"]["bias"]
    params["encoder"]["encoder_7"] = {"mixing_layer_norm": {"scale": np.zeros(16, np.float32)}}
    params["encoder"]["pooler"]["kernel"] = np.zeros((16, 8), np.float32)
    message = _mismatch(tmp_path, params)
    assert "missing keys (1): encoder/feed_forward_1/output/bias" in message
    assert "unexpected keys (1): encoder/encoder_7/mixing_layer_norm/scale" in message
    assert re.search(
        r"wrong shapes \(1\): encoder/pooler/kernel -> pooler/kernel: checkpoint shape \(16, 8\)",
        message,
    )
    assert "left unchanged" in message


def test_a_deeper_or_wider_checkpoint_is_refused(tmp_path):
    params = official_params(np.random.default_rng(7))
    params["encoder"]["embedder"]["word"]["embedding"] = np.zeros((VOCAB + 1, 16), np.float32)
    assert re.search(
        r"encoder/embedder/word/embedding -> \S+: checkpoint shape \(51, 16\)",
        _mismatch(tmp_path, params),
    )


# --- Hostile and broken files ------------------------------------------------------------


def _write(tmp_path, data: bytes) -> str:
    path = tmp_path / "hostile"
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (pack({"target": {"a": 1}})[:-1], "truncated"),
        (b"\x81" + pack("target") + ext(42, b"\x00" * 4), "extension type 42"),
        (b"\x81" + pack("target") + b"\xc9\xff\xff\xff\xf0\x01", "declares 4,294,967,280 bytes"),
        (b"\x81" + pack("target") + b"\xdf\xff\xff\xff\xff", "exceeds the limit"),
        (b"\x81" + pack("target") + b"\xdd\x00\x10\x00\x00", "declares 1,048,576 bytes"),
        (b"\x81\x01\x02", "not a string"),
        (b"\x82" + pack("a") + b"\x01" + pack("a") + b"\x02", "appears twice"),
        (b"\x81" + pack("target") + pack(b"raw"), "raw binary"),
        (b"\x81" + pack("t") + b"\x91" * 40 + b"\x00", "nested deeper"),
        (pack([1, 2]), "does not start with a map"),
        (pack({"a": 1}) + b"\x00", "follow the checkpoint"),
        (b"\x81" + pack("w") + ext(1, pack([[2, 2], "object", b"\x00" * 32])), "dtype 'object'"),
        (b"\x81" + pack("w") + ext(1, pack([[1000, 1000], "float32", b"\x00" * 8])), "needs"),
        (b"\x81" + pack("w") + ext(1, pack([[-1], "float32", b""])), "not a list of sizes"),
    ],
)
def test_hostile_msgpack_is_refused_with_a_clear_error(tmp_path, data, match):
    with pytest.raises(FlaxCheckpointError, match=re.escape(match)):
        read_flax_checkpoint(_write(tmp_path, data))


def test_a_hostile_file_as_weights_raises_value_error_and_leaves_nothing(tmp_path):
    path = _write(tmp_path, b"\x81" + pack("target") + ext(7, b"\x00"))
    with pytest.raises(ValueError, match="extension type 7"):
        tiny(weights=path)


def test_optimizer_moments_are_skipped_but_checked(tmp_path):
    params = official_params(np.random.default_rng(8))
    path = write_checkpoint(tmp_path / "ckpt", params)
    tree = read_flax_checkpoint(path)
    assert set(tree) == {"target"}
    full = read_flax_checkpoint(path, skip=())
    assert int(full["state"]["step"]) == 1000
    grad = full["state"]["param_states"]["encoder"]["pooler"]["kernel"]["grad_sq_ema"]
    np.testing.assert_array_equal(grad, np.full((16, 16), 2.0, np.float32))
    # A hostile record inside the skipped moments is still refused.
    hostile_state = b"\x81" + pack("grad_ema") + ext(9, b"\x00" * 4)
    data = b"\x82" + pack("target") + pack(params) + pack("state") + hostile_state
    with pytest.raises(FlaxCheckpointError, match="extension type 9"):
        read_flax_checkpoint(_write(tmp_path, data))


def test_complex_scalar_and_bfloat16_records(tmp_path):
    bf16 = np.array([1.5, -2.0], np.float32).view(np.uint32) >> 16
    data = (
        b"\x83"
        + pack("c")
        + ext(2, pack([1.0, -2.0]))
        + pack("s")
        + ext(3, pack([[], "int32", struct.pack("<i", 7)]))
        + pack("b")
        + ext(1, pack([[2], "bfloat16", bf16.astype("<u2").tobytes()]))
    )
    tree = read_flax_checkpoint(_write(tmp_path, data))
    assert tree["c"] == complex(1.0, -2.0)
    assert int(tree["s"]) == 7 and tree["s"].shape == ()
    np.testing.assert_array_equal(tree["b"], [1.5, -2.0])


# --- keras-hub presets and releases ---------------------------------------------------------


def write_keras_hub_preset(folder, rng, **config_overrides) -> str:
    """A preset folder as keras-hub's FNetBackbone.save_to_preset writes it (layer order)."""
    os.makedirs(folder, exist_ok=True)
    config = {
        "vocabulary_size": VOCAB,
        "num_layers": SIZES["num_layers"],
        "hidden_dim": SIZES["hidden_size"],
        "intermediate_dim": SIZES["intermediate_size"],
        "dropout": 0.1,
        "max_sequence_length": MAX_LENGTH,
        "num_segments": SEGMENTS,
        **config_overrides,
    }
    description = {
        "module": "keras_hub.src.models.f_net.f_net_backbone",
        "class_name": "FNetBackbone",
        "config": {"name": "f_net_backbone", "trainable": True, **config},
        "registered_name": "keras_hub>FNetBackbone",
    }
    with open(os.path.join(folder, "config.json"), "w") as file:
        json.dump(description, file)
    d, ff = config["hidden_dim"], config["intermediate_dim"]
    tensors = {
        "layers/reversible_embedding/vars/0": (config["vocabulary_size"], d),
        "layers/position_embedding/vars/0": (config["max_sequence_length"], d),
        "layers/embedding/vars/0": (config["num_segments"], d),
        "layers/layer_normalization/vars/0": (d,),
        "layers/layer_normalization/vars/1": (d,),
        "layers/dense/vars/0": (d, d),
        "layers/dense/vars/1": (d,),
        "layers/dense_1/vars/0": (d, d),
        "layers/dense_1/vars/1": (d,),
    }
    for i in range(config["num_layers"]):
        prefix = "layers/f_net_encoder" + (f"_{i}" if i else "")
        for name, shapes in (
            ("_mixing_layer_norm", ((d,), (d,))),
            ("_intermediate_dense", ((d, ff), (ff,))),
            ("_output_dense", ((ff, d), (d,))),
            ("_output_layer_norm", ((d,), (d,))),
        ):
            for index, shape in enumerate(shapes):
                tensors[f"{prefix}/{name}/vars/{index}"] = shape
    values = {key: rng.normal(size=shape).astype(np.float32) for key, shape in tensors.items()}
    with h5py.File(os.path.join(folder, "model.weights.h5"), "w") as handle:
        for key, array in values.items():
            handle.create_dataset(key, data=array)
    return values


def test_keras_hub_preset_folder_loads(tmp_path):
    values = write_keras_hub_preset(tmp_path / "f_net_tiny_en", np.random.default_rng(9))
    with pytest.warns(UserWarning, match="the classifier of model 'fnet' starts fresh"):
        model = tiny(num_classes=2, weights=str(tmp_path / "f_net_tiny_en"))
    np.testing.assert_array_equal(
        value(model.get_layer("embeddings").word.embeddings),
        values["layers/reversible_embedding/vars/0"],
    )
    np.testing.assert_array_equal(
        value(model.get_layer("encoder_layer_1").intermediate.kernel),
        values["layers/f_net_encoder_1/_intermediate_dense/vars/0"],
    )
    np.testing.assert_array_equal(
        value(model.get_layer("pooler").bias), values["layers/dense_1/vars/1"]
    )


def test_keras_hub_preset_of_other_sizes_is_refused(tmp_path):
    write_keras_hub_preset(tmp_path / "p", np.random.default_rng(10), num_layers=3)
    with pytest.raises(ValueError, match=re.escape("num_layers: preset 3, model 2")):
        tiny(weights=str(tmp_path / "p"))


def test_release_rows_are_the_official_files():
    assert RELEASES["f_net_base"].url == (
        "https://storage.googleapis.com/gresearch/f_net/checkpoints/base/f_net_checkpoint"
    )
    assert RELEASES["f_net_large"].variant == "large"


def test_release_downloads_once_converts_once_then_loads_offline(tmp_path, monkeypatch):
    """A release name served by a mirror on 127.0.0.1 into a temporary KERAS_HOME, then offline."""
    params = official_params(np.random.default_rng(11))
    write_checkpoint(tmp_path / "f_net_checkpoint", params)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    files = {RELEASES["f_net_base"].file_name: (tmp_path / "f_net_checkpoint").read_bytes()}
    with serve(files) as server:
        monkeypatch.setenv(download.MIRROR_VARIABLE, server.url)
        first = tiny(weights="f_net_base")
        assert server.requests == ["/f_net_base_checkpoint"]
    cached = os.listdir(tmp_path / "keras_home" / "keras_fourier")
    assert "f_net_base_checkpoint" in cached
    assert any(name.endswith(".weights.h5") for name in cached)
    second = tiny(weights="f_net_base")  # the server is gone: read from the cache
    for ours, theirs in zip(first.weights, second.weights, strict=True):
        np.testing.assert_array_equal(value(ours), value(theirs))
    np.testing.assert_array_equal(
        value(second.get_layer("pooler").kernel), params["encoder"]["pooler"]["kernel"]
    )
