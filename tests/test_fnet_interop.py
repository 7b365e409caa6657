"""FNet and its users' other libraries: transformers folders, keras-hub task presets and export.

The transformers folders are written here as ``save_pretrained`` writes them
(``config.json``, and ``model.safetensors`` by this module's own writer of
the format, or ``pytorch_model.bin`` by ``torch.save``), in the names of
transformers' ``modeling_fnet.py``; the keras-hub presets as
``save_to_preset`` writes them (``tests.test_fnet_checkpoints``, plus the
task files). Neither transformers nor keras-hub is needed: their loaders
were run against the package outside the tests (docs/models.md).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import struct
import types
import warnings

import h5py
import keras
import numpy as np
import pytest
import torch  # the test extra installs it; the package does not need it

import keras_fourier.weights.keras_hub as keras_hub_files
from keras_fourier.data.text import tokenizer_record
from keras_fourier.models import FNet
from keras_fourier.models.catalog import TEXT_PRESETS, create_pretrained_model
from keras_fourier.models.fnet_weights import (
    FreshHeadWarning,
    fnet_weights_activation,
    fnet_weights_sizes,
    load_fnet_weights,
    load_pretrained_encoder,
    save_keras_hub_preset,
)
from keras_fourier.training import TrainConfig, validate_config
from keras_fourier.training.callbacks import save_model
from keras_fourier.weights.safetensors_file import read_safetensors
from tests.test_data_text import _tiny_sentencepiece_model
from tests.test_fnet_checkpoints import (
    LENGTH,
    MAX_LENGTH,
    SEGMENTS,
    SIZES,
    VOCAB,
    tiny,
    value,
    write_keras_hub_preset,
)

pytestmark = pytest.mark.single_backend

D, FF, NL = SIZES["hidden_size"], SIZES["intermediate_size"], SIZES["num_layers"]


# --- A transformers folder writer ----------------------------------------------------------

_ST_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64"}


def write_safetensors(path, tensors) -> None:
    """The safetensors format: u64 header length, JSON header (space-padded), raw buffer."""
    header, offset, chunks = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])
        data = array.astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {
            "dtype": _ST_DTYPES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        chunks.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def transformers_state(
    kind: str,
    rng,
    classes: int = 3,
    prefix: bool = True,
    *,
    hidden: int = D,
    intermediate: int = FF,
    vocab: int = VOCAB,
    positions: int = MAX_LENGTH,
) -> dict:
    """A transformers FNet state dict of `kind` (a key of ARCHITECTURES), LN away from 1 and 0."""
    base = "fnet." if prefix else ""
    D, FF, VOCAB, MAX_LENGTH = hidden, intermediate, vocab, positions
    shapes = {
        "embeddings.word_embeddings.weight": (VOCAB, D),
        "embeddings.position_embeddings.weight": (MAX_LENGTH, D),
        "embeddings.token_type_embeddings.weight": (SEGMENTS, D),
        "embeddings.LayerNorm.weight": (D,),
        "embeddings.LayerNorm.bias": (D,),
        "embeddings.projection.weight": (D, D),
        "embeddings.projection.bias": (D,),
        "pooler.dense.weight": (D, D),
        "pooler.dense.bias": (D,),
    }
    for i in range(NL):
        layer = f"encoder.layer.{i}"
        shapes |= {
            f"{layer}.fourier.output.LayerNorm.weight": (D,),
            f"{layer}.fourier.output.LayerNorm.bias": (D,),
            f"{layer}.intermediate.dense.weight": (FF, D),
            f"{layer}.intermediate.dense.bias": (FF,),
            f"{layer}.output.dense.weight": (D, FF),
            f"{layer}.output.dense.bias": (D,),
            f"{layer}.output.LayerNorm.weight": (D,),
            f"{layer}.output.LayerNorm.bias": (D,),
        }
    shapes = {base + key: shape for key, shape in shapes.items()}
    if kind == "classifier":
        shapes |= {"classifier.weight": (classes, D), "classifier.bias": (classes,)}
    if kind in ("mlm", "pretraining"):
        shapes |= {
            "cls.predictions.transform.dense.weight": (D, D),
            "cls.predictions.transform.dense.bias": (D,),
            "cls.predictions.transform.LayerNorm.weight": (D,),
            "cls.predictions.transform.LayerNorm.bias": (D,),
            "cls.predictions.bias": (VOCAB,),
        }
    if kind == "pretraining":
        shapes |= {"cls.seq_relationship.weight": (2, D), "cls.seq_relationship.bias": (2,)}
    return {
        key: (
            rng.normal(size=shape) * 0.5 + (1.0 if key.endswith("LayerNorm.weight") else 0.0)
        ).astype(np.float32)
        for key, shape in shapes.items()
    }


ARCHITECTURES = {
    "model": "FNetModel",
    "classifier": "FNetForSequenceClassification",
    "mlm": "FNetForMaskedLM",
    "pretraining": "FNetForPreTraining",
}


def state_shape(state, suffix: str, axis: int, default: int) -> int:
    """A size of the state's tensor ending in `suffix`, or `default` for an empty state."""
    found = [array.shape[axis] for key, array in state.items() if key.endswith(suffix)]
    return found[0] if found else default


def write_transformers_folder(folder, state, kind, fmt="safetensors", **config_overrides):
    """A folder as transformers' save_pretrained writes it; the .bin as old checkpoints hold it
    (with the position_ids buffer and the tied decoder)."""
    os.makedirs(folder, exist_ok=True)
    config = {
        "architectures": [ARCHITECTURES[kind]],
        "model_type": "fnet",
        "vocab_size": state_shape(state, "word_embeddings.weight", 0, VOCAB),
        "hidden_size": state_shape(state, "word_embeddings.weight", 1, D),
        "num_hidden_layers": NL,
        "intermediate_size": state_shape(state, "layer.0.intermediate.dense.weight", 0, FF),
        "hidden_act": "gelu_new",
        "hidden_dropout_prob": 0.1,
        "max_position_embeddings": state_shape(state, "position_embeddings.weight", 0, MAX_LENGTH),
        "type_vocab_size": SEGMENTS,
        "layer_norm_eps": 1e-12,
        "use_tpu_fourier_optimizations": False,
        "tpu_short_seq_length": 512,
        **config_overrides,
    }
    with open(os.path.join(folder, "config.json"), "w") as file:
        json.dump(config, file)
    if fmt == "safetensors":
        write_safetensors(os.path.join(folder, "model.safetensors"), state)
    else:
        tensors = {key: torch.from_numpy(array) for key, array in state.items()}
        prefix = "fnet." if any(key.startswith("fnet.") for key in state) else ""
        positions = state_shape(state, "position_embeddings.weight", 0, MAX_LENGTH)
        tensors[f"{prefix}embeddings.position_ids"] = torch.arange(positions)[None]
        if "cls.predictions.bias" in state:
            tensors["cls.predictions.decoder.weight"] = tensors[
                "fnet.embeddings.word_embeddings.weight"
            ]
            tensors["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"]
        torch.save(tensors, os.path.join(folder, "pytorch_model.bin"))
    return os.fspath(folder)


def expected_variables(model, state) -> dict[str, np.ndarray]:
    """Model variable path -> the transformers tensor it must hold (Linear weights transposed)."""
    pairs = {
        "embeddings/word/embeddings": "fnet.embeddings.word_embeddings.weight",
        "embeddings/position/embeddings": "fnet.embeddings.position_embeddings.weight",
        "embeddings/segment/embeddings": "fnet.embeddings.token_type_embeddings.weight",
        "embeddings/norm/gamma": "fnet.embeddings.LayerNorm.weight",
        "embeddings/projection/kernel": "fnet.embeddings.projection.weight",
        "pooler/kernel": "fnet.pooler.dense.weight",
        "pooler/bias": "fnet.pooler.dense.bias",
        "classifier/kernel": "classifier.weight",
        "classifier/bias": "classifier.bias",
        "masked_lm_head/dense/kernel": "cls.predictions.transform.dense.weight",
        "masked_lm_head/norm/beta": "cls.predictions.transform.LayerNorm.bias",
        "masked_lm_head/output_bias": "cls.predictions.bias",
        "next_sentence_head/kernel": "cls.seq_relationship.weight",
    }
    for i in range(NL):
        layer = f"fnet.encoder.layer.{i}"
        pairs |= {
            f"encoder_layer_{i}/mixing_norm/gamma": f"{layer}.fourier.output.LayerNorm.weight",
            f"encoder_layer_{i}/intermediate/kernel": f"{layer}.intermediate.dense.weight",
            f"encoder_layer_{i}/output/kernel": f"{layer}.output.dense.weight",
            f"encoder_layer_{i}/output_norm/beta": f"{layer}.output.LayerNorm.bias",
        }
    paths = {variable.path for variable in model.weights}
    state = {("fnet." + k if k.startswith(("embeddings", "encoder", "pooler")) else k): v
             for k, v in state.items()}  # fmt: skip
    return {
        path: state[key].T if path.endswith("kernel") else state[key]
        for path, key in pairs.items()
        if path in paths and key in state
    }


def snapshot(model) -> dict[str, np.ndarray]:
    return {variable.path: value(variable).copy() for variable in model.weights}


def load(kind_of_model: dict, folder: str):
    """Builds the tiny FNet with `folder`'s weights; returns (model, fresh-head warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = tiny(**kind_of_model, weights=folder)
    return model, [str(w.message) for w in caught if issubclass(w.category, FreshHeadWarning)]


# --- transformers folders --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "fmt", "model_kwargs", "warned"),
    [
        ("model", "safetensors", {}, None),
        ("classifier", "bin", {"num_classes": 3}, None),
        ("mlm", "safetensors", {"heads": "pretraining"}, "next-sentence head of model"),
        ("pretraining", "bin", {"heads": "pretraining"}, None),
        ("pretraining", "safetensors", {}, "masked-LM head and next-sentence head are not"),
    ],
)
def test_transformers_folder_loads_each_head_type(tmp_path, kind, fmt, model_kwargs, warned):
    state = transformers_state(kind, np.random.default_rng(0), prefix=kind != "model")
    folder = write_transformers_folder(tmp_path / kind, state, kind, fmt)
    model, caught = load(model_kwargs, folder)
    expected = expected_variables(model, state)
    assert len(expected) >= 7 + 4 * NL
    loaded = snapshot(model)
    for path, array in expected.items():
        np.testing.assert_array_equal(loaded[path], array, err_msg=path)
    if warned is None:
        assert caught == []
    else:
        assert len(caught) == 1 and warned in caught[0], caught
    if kind == "mlm":  # the fresh NSP head is the model's own initialisation, not zeros
        assert np.abs(loaded["next_sentence_head/kernel"]).max() > 0


def _np_layer_norm(x, scale, bias):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(
        x.var(-1, keepdims=True) + 1e-12
    ) * scale + bias


def _np_gelu(x, exact: bool):
    if exact:
        return 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def transformers_fnet(state, ids, segments, exact: bool) -> dict[str, np.ndarray]:
    """transformers' FNetModel in NumPy (float64): the sequence and pooled outputs."""
    s = {k: v.astype(np.float64) for k, v in state.items()}
    e = "fnet.embeddings."
    x = s[e + "word_embeddings.weight"][ids] + s[e + "token_type_embeddings.weight"][segments]
    x = x + s[e + "position_embeddings.weight"][: ids.shape[1]]
    x = _np_layer_norm(x, s[e + "LayerNorm.weight"], s[e + "LayerNorm.bias"])
    x = x @ s[e + "projection.weight"].T + s[e + "projection.bias"]
    for i in range(NL):
        p = f"fnet.encoder.layer.{i}."
        mixed = np.fft.fftn(x, axes=(1, 2)).real
        x = _np_layer_norm(
            x + mixed,
            s[p + "fourier.output.LayerNorm.weight"],
            s[p + "fourier.output.LayerNorm.bias"],
        )
        h = _np_gelu(
            x @ s[p + "intermediate.dense.weight"].T + s[p + "intermediate.dense.bias"], exact
        )
        h = h @ s[p + "output.dense.weight"].T + s[p + "output.dense.bias"]
        x = _np_layer_norm(x + h, s[p + "output.LayerNorm.weight"], s[p + "output.LayerNorm.bias"])
    pooled = np.tanh(x[:, 0] @ s["fnet.pooler.dense.weight"].T + s["fnet.pooler.dense.bias"])
    return {"sequence_output": x, "pooled_output": pooled}


def test_hidden_act_exact_gelu_and_tanh_gelu_are_each_honoured(tmp_path):
    state = transformers_state("classifier", np.random.default_rng(1))
    rng = np.random.default_rng(2)
    ids = rng.integers(0, VOCAB, size=(2, LENGTH))
    segments = rng.integers(0, SEGMENTS, size=(2, LENGTH))
    inputs = {"token_ids": ids.astype("int32"), "segment_ids": segments.astype("int32")}
    sequence = {}
    for hidden_act, activation, exact in (("gelu", "gelu", True), ("gelu_new", "gelu_tanh", False)):
        folder = write_transformers_folder(
            tmp_path / hidden_act, state, "classifier", hidden_act=hidden_act
        )
        assert fnet_weights_activation(folder) == activation
        with pytest.warns(FreshHeadWarning, match="classifier is not loaded"):
            model = tiny(activation=activation, weights=folder)
        outputs = model(inputs)
        reference = transformers_fnet(state, ids, segments, exact)
        for key in ("sequence_output", "pooled_output"):
            np.testing.assert_allclose(
                keras.ops.convert_to_numpy(outputs[key]), reference[key], atol=2e-5, err_msg=key
            )
        sequence[hidden_act] = keras.ops.convert_to_numpy(outputs["sequence_output"])
    # The two GELUs differ by at most ~5e-4: ten times the tolerance above tells them apart.
    assert np.abs(sequence["gelu"] - sequence["gelu_new"]).max() > 10 * 2e-5


def test_other_sizes_and_activation_are_listed_before_the_weights_are_read(tmp_path):
    folder = tmp_path / "other"
    os.makedirs(folder)
    write_transformers_folder(
        folder, {}, "model", num_hidden_layers=3, vocab_size=60, hidden_act="gelu"
    )
    with open(folder / "model.safetensors", "wb") as file:
        file.write(b"not read")  # sizes come first: the damaged weights are never reached
    model = tiny()
    before = snapshot(model)
    with pytest.raises(ValueError) as error:
        load_fnet_weights(model, folder)
    message = str(error.value)
    assert "transformers FNetModel folder" in message
    for part in (
        "num_hidden_layers: folder 3, model 2",
        "vocab_size: folder 60, model 50",
        "hidden_act: folder 'gelu' (activation='gelu'), model activation='gelu_tanh'",
    ):
        assert part in message
    after = snapshot(model)
    assert all(np.array_equal(before[path], after[path]) for path in before)


def test_mismatching_tensors_are_listed_and_nothing_loads(tmp_path):
    state = transformers_state("classifier", np.random.default_rng(3))
    state["fnet.encoder.layer.1.intermediate.dense.weight"] = np.zeros((FF + 1, D), np.float32)
    del state["fnet.pooler.dense.bias"]
    state["fnet.encoder.layer.0.extra"] = np.zeros(2, np.float32)
    folder = write_transformers_folder(tmp_path / "bad", state, "classifier")
    model = tiny(num_classes=3)
    before = snapshot(model)
    with pytest.raises(ValueError) as error:
        load_fnet_weights(model, folder)
    message = str(error.value)
    assert "missing keys (1): fnet.pooler.dense.bias" in message
    assert "unexpected keys (1): fnet.encoder.layer.0.extra" in message
    assert re.search(r"fnet\.encoder\.layer\.1\.intermediate\.dense\.weight .*\(33, 16\)", message)
    assert "model.safetensors" in message
    after = snapshot(model)
    assert all(np.array_equal(before[path], after[path]) for path in before)


def test_a_classifier_of_another_class_count_starts_fresh_with_one_warning(tmp_path):
    state = transformers_state("classifier", np.random.default_rng(4), classes=5)
    folder = write_transformers_folder(tmp_path / "five", state, "classifier", "bin")
    model, caught = load({"num_classes": 3}, folder)
    assert (
        len(caught) == 1
        and "starts fresh (3 classes, the checkpoint's classifier 5)" in (caught[0])
    )
    np.testing.assert_array_equal(
        value(model.get_layer("pooler").kernel), state["fnet.pooler.dense.weight"].T
    )
    kernel = value(model.get_layer("classifier").kernel)
    assert kernel.shape == (D, 3)
    assert not np.allclose(kernel, state["classifier.weight"][:3].T)


def test_fine_tuning_starts_from_a_transformers_folder(tmp_path):
    state = transformers_state("pretraining", np.random.default_rng(5))
    folder = write_transformers_folder(tmp_path / "pre", state, "pretraining", hidden_act="gelu")
    assert fnet_weights_sizes(folder) == {
        **SIZES,
        "vocabulary_size": VOCAB,
        "max_sequence_length": MAX_LENGTH,
        "num_segments": SEGMENTS,
    }
    model = tiny(num_classes=2, activation="gelu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FreshHeadWarning)  # the donor's heads are not the user's
        load_pretrained_encoder(model, folder)
    np.testing.assert_array_equal(
        value(model.get_layer("encoder_layer_1").intermediate.kernel),
        state["fnet.encoder.layer.1.intermediate.dense.weight"].T,
    )


def test_a_weights_file_of_a_folder_and_a_folder_of_neither_kind_are_named(tmp_path):
    state = transformers_state("model", np.random.default_rng(6))
    folder = write_transformers_folder(tmp_path / "m", state, "model")
    with pytest.raises(ValueError, match="is a transformers weights file: pass its folder"):
        tiny(weights=os.path.join(folder, "model.safetensors"))
    (tmp_path / "neither").mkdir()
    (tmp_path / "neither" / "config.json").write_text('{"hidden_size": 16}')
    with pytest.raises(ValueError, match=r"neither a transformers config .* nor a keras-hub"):
        tiny(weights=str(tmp_path / "neither"))
    os.remove(os.path.join(folder, "model.safetensors"))
    with pytest.raises(ValueError, match=r"has no weights: none of model\.safetensors"):
        tiny(weights=folder)


def test_train_weights_build_the_fine_tuning_model_from_a_transformers_folder(tmp_path):
    """What `keras-fourier train --model fnet_tiny --weights FOLDER` builds (the run itself is
    tests/test_finetune.py's): the folder's exact GELU, its encoder, a fresh head."""
    tiny_sizes = TEXT_PRESETS["fnet_tiny"]
    state = transformers_state(
        "classifier",
        np.random.default_rng(12),
        hidden=tiny_sizes["hidden_size"],
        intermediate=tiny_sizes["intermediate_size"],
        vocab=260,
        positions=32,
    )
    folder = write_transformers_folder(tmp_path / "hf", state, "classifier", hidden_act="gelu")
    config = TrainConfig(
        model="fnet_tiny", data="csv:unused", weights=folder, tokenizer="bytes", sequence_length=16
    )
    validate_config(config)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FreshHeadWarning)
        model = create_pretrained_model(
            "fnet_tiny", weights=folder, num_classes=2, sequence_length=16, vocabulary_size=260
        )
    assert model.get_layer("encoder_layer_0").activation == "gelu"
    np.testing.assert_array_equal(
        value(model.get_layer("encoder_layer_1").output_dense.kernel),
        state["fnet.encoder.layer.1.output.dense.weight"].T,
    )
    assert model.get_layer("classifier").kernel.shape == (tiny_sizes["hidden_size"], 2)


def test_a_sharded_safetensors_folder_loads_and_a_missing_shard_tensor_is_named(tmp_path):
    state = transformers_state("model", np.random.default_rng(13))
    folder = write_transformers_folder(tmp_path / "sharded", state, "model")
    os.remove(os.path.join(folder, "model.safetensors"))
    keys = sorted(state)
    shards = {
        "model-00001-of-00002.safetensors": keys[:10],
        "model-00002-of-00002.safetensors": keys[10:],
    }
    for shard, names in shards.items():
        write_safetensors(os.path.join(folder, shard), {key: state[key] for key in names})
    index = {"weight_map": {key: shard for shard, names in shards.items() for key in names}}
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as file:
        json.dump(index, file)
    model, _ = load({}, folder)
    loaded = snapshot(model)
    for path, array in expected_variables(model, state).items():
        np.testing.assert_array_equal(loaded[path], array, err_msg=path)
    index["weight_map"]["fnet.extra"] = "model-00002-of-00002.safetensors"
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as file:
        json.dump(index, file)
    with pytest.raises(ValueError, match=r"names tensors its shards lack: fnet\.extra"):
        tiny(weights=folder)


# --- The safetensors reader ----------------------------------------------------------------


def test_safetensors_reader_reads_what_the_format_holds(tmp_path):
    rng = np.random.default_rng(7)
    tensors = {
        "a": rng.normal(size=(3, 4)).astype(np.float32),
        "half": rng.normal(size=(5,)).astype(np.float16),
        "ids": np.arange(6, dtype=np.int64).reshape(2, 3),
        "empty": np.zeros((0, 2), np.float32),
    }
    write_safetensors(tmp_path / "t.safetensors", tensors)
    read = read_safetensors(tmp_path / "t.safetensors")
    assert read.keys() == tensors.keys()
    for name, array in tensors.items():
        assert read[name].dtype == array.dtype
        np.testing.assert_array_equal(read[name], array)
    # bfloat16: the upper 16 bits of float32
    bits = (np.array([1.5, -2.0, 3.25], np.float32).view(np.uint32) >> 16).astype("<u2")
    header = json.dumps({"b": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}).encode()
    (tmp_path / "bf.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header + bits.tobytes()
    )
    np.testing.assert_array_equal(
        read_safetensors(tmp_path / "bf.safetensors")["b"], [1.5, -2.0, 3.25]
    )


def _hostile(tmp_path, header, data=b"\0" * 16, length=None) -> str:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path = tmp_path / "h.safetensors"
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return str(path)


@pytest.mark.parametrize(
    ("header", "length", "match"),
    [
        ({}, 2**40, "declare a 1,099,511,627,776-byte header"),
        (b"\xff\xfe not json", None, "header is not JSON"),
        ([1, 2], None, "header is not a JSON object"),
        ({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 64]}}, None, "outside the"),
        ({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, None, "takes 12 bytes"),
        ({"t": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}, None, "dtype"),
        ({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}, None, "shape"),
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
            },
            None,
            "overlap",
        ),
        ({"t": {"dtype": "F32", "shape": [1]}}, None, "no dtype, shape and data_offsets"),
    ],
)
def test_hostile_safetensors_are_refused_with_a_clear_error(tmp_path, header, length, match):
    with pytest.raises(ValueError, match=match):
        read_safetensors(_hostile(tmp_path, header, length=length))


# --- keras-hub task presets and export ------------------------------------------------------


def write_task(folder, class_name, tensors, **config) -> None:
    """task.json and task.weights.h5 as keras-hub's Task.save_to_preset writes them."""
    with open(os.path.join(folder, "task.json"), "w") as file:
        json.dump({"class_name": class_name, "config": {"preprocessor": None, **config}}, file)
    with h5py.File(os.path.join(folder, "task.weights.h5"), "w") as handle:
        for key, array in tensors.items():
            handle.create_dataset(key, data=array)
        handle.create_dataset("optimizer/vars/0", data=np.int64(0))


@pytest.fixture
def classifier_preset(tmp_path) -> tuple[str, dict]:
    folder = tmp_path / "f_net_tiny_classifier"
    write_keras_hub_preset(folder, np.random.default_rng(8))
    rng = np.random.default_rng(9)
    head = {
        "layers/dense/vars/0": rng.normal(size=(D, 3)).astype(np.float32),
        "layers/dense/vars/1": rng.normal(size=(3,)).astype(np.float32),
    }
    write_task(folder, "FNetTextClassifier", head, num_classes=3, activation="linear")
    return str(folder), head


def test_keras_hub_classifier_preset_brings_its_head(classifier_preset):
    folder, head = classifier_preset
    model, caught = load({"num_classes": 3}, folder)
    assert caught == []
    np.testing.assert_array_equal(
        value(model.get_layer("classifier").kernel), head["layers/dense/vars/0"]
    )
    np.testing.assert_array_equal(
        value(model.get_layer("classifier").bias), head["layers/dense/vars/1"]
    )


@pytest.mark.parametrize(
    ("model_kwargs", "warned"),
    [
        (
            {"num_classes": 2},
            "classifier of model 'fnet' starts fresh (2 classes, the checkpoint's",
        ),
        ({}, "the checkpoint's classifier is not loaded (model 'fnet' has no place for it)"),
    ],
)
def test_keras_hub_classifier_head_that_does_not_fit_warns_once(
    classifier_preset, model_kwargs, warned
):
    folder, _ = classifier_preset
    model, caught = load(model_kwargs, folder)
    assert len(caught) == 1 and warned in caught[0], caught
    assert value(model.get_layer("pooler").kernel).shape == (D, D)


def test_keras_hub_masked_lm_preset_says_its_head_is_not_loaded(tmp_path):
    folder = tmp_path / "mlm"
    write_keras_hub_preset(folder, np.random.default_rng(10))
    write_task(
        folder, "FNetMaskedLM", {"layers/masked_lm_head/vars/0": np.zeros(VOCAB, np.float32)}
    )
    _, caught = load({"heads": "pretraining"}, str(folder))
    assert len(caught) == 1
    assert "FNetMaskedLM head is not loaded (it computes with the exact GELU" in caught[0]
    assert "masked-LM head and next-sentence head of model 'fnet' start fresh" in caught[0]


def test_export_to_a_keras_hub_preset_in_keras_hub_layout_and_back(tmp_path, classifier_preset):
    source, head = classifier_preset
    model = tiny(num_classes=3, weights=source)
    out = tmp_path / "exported"
    save_keras_hub_preset(model, out)
    assert sorted(os.listdir(out)) == [
        "config.json",
        "metadata.json",
        "model.weights.h5",
        "task.json",
        "task.weights.h5",
    ]
    config = json.loads((out / "config.json").read_text())
    assert config["class_name"] == "FNetBackbone"
    assert config["registered_name"] == "keras_hub>FNetBackbone"
    assert {k: config["config"][k] for k in ("hidden_dim", "num_layers", "vocabulary_size")} == {
        "hidden_dim": D,
        "num_layers": NL,
        "vocabulary_size": VOCAB,
    }
    task = json.loads((out / "task.json").read_text())
    assert (task["class_name"], task["config"]["num_classes"]) == ("FNetTextClassifier", 3)
    # The same dataset paths as keras-hub's own preset (written in its layout by the helper).
    with (
        h5py.File(os.path.join(source, "model.weights.h5")) as a,
        h5py.File(out / "model.weights.h5") as b,
    ):
        names = []
        a.visit(lambda name: names.append(name) if isinstance(a[name], h5py.Dataset) else None)
        for name in names:
            np.testing.assert_array_equal(a[name][()], b[name][()], err_msg=name)
    with h5py.File(out / "task.weights.h5") as handle:
        np.testing.assert_array_equal(
            handle["layers/dense/vars/0"][()], head["layers/dense/vars/0"]
        )
    back, caught = load({"num_classes": 3}, str(out))
    assert caught == []
    rng = np.random.default_rng(11)
    inputs = {
        "token_ids": rng.integers(0, VOCAB, (2, LENGTH)).astype("int32"),
        "segment_ids": rng.integers(0, SEGMENTS, (2, LENGTH)).astype("int32"),
    }
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(back(inputs)), keras.ops.convert_to_numpy(model(inputs))
    )


def test_export_refuses_a_folder_with_files_and_an_inexpressible_model(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="must be a new or empty folder"):
        save_keras_hub_preset(tiny(), tmp_path / "full")
    assert os.listdir(tmp_path / "full") == ["keep.txt"]
    with pytest.raises(ValueError, match="keras-hub's FNet computes the tanh GELU"):
        save_keras_hub_preset(tiny(activation="gelu"), tmp_path / "exact")
    assert not os.path.exists(tmp_path / "exact")
    assert sorted(os.listdir(tmp_path)) == ["full"]


def test_export_with_a_sentencepiece_tokenizer_writes_keras_hub_tokenizer_files(tmp_path):
    vocabulary = tmp_path / "vocab.model"
    vocabulary.write_bytes(_tiny_sentencepiece_model())
    out = tmp_path / "with_tokenizer"
    save_keras_hub_preset(tiny(num_classes=2), out, tokenizer=vocabulary)
    assert (out / "assets" / "tokenizer" / "vocabulary.spm").read_bytes() == (
        vocabulary.read_bytes()
    )
    tokenizer = json.loads((out / "tokenizer.json").read_text())
    assert tokenizer["class_name"] == "FNetTokenizer"
    preprocessor = json.loads((out / "preprocessor.json").read_text())
    assert preprocessor["config"]["sequence_length"] == LENGTH
    assert preprocessor["config"]["tokenizer"] == tokenizer
    assert json.loads((out / "task.json").read_text())["config"]["preprocessor"] == preprocessor
    with pytest.raises(ValueError, match=r"must be the path of a SentencePiece \.model file"):
        save_keras_hub_preset(tiny(), tmp_path / "none", tokenizer=tmp_path / "missing.model")
    assert not (tmp_path / "none").exists()


def _free_length_classifier(**kwargs) -> keras.Model:
    """The tiny FNet classifier of any length, with the 60 ids of the tiny SentencePiece model."""
    return FNet(
        SIZES,
        vocabulary_size=60,
        max_sequence_length=MAX_LENGTH,
        num_segments=SEGMENTS,
        num_classes=3,
        name="reviews",
        **kwargs,
    )


def test_export_command_writes_a_keras_hub_preset_that_loads_back(tmp_path, capsys):
    from keras_fourier.cli import main

    vocabulary = tmp_path / "spm.model"
    vocabulary.write_bytes(_tiny_sentencepiece_model())
    keras.utils.set_random_seed(3)
    model = _free_length_classifier()
    # As a text run saves it: with the SentencePiece model it encoded its texts with.
    save_model(model, tmp_path / "reviews.keras", {"tokenizer": tokenizer_record(vocabulary)})
    out = tmp_path / "out"
    argv = ["export", str(tmp_path / "reviews.keras"), "--format", "keras_hub", "--out", str(out)]
    # Any length: keras-hub's FNet takes any length, so no --sequence-length is needed.
    assert main([*argv, "--tokenizer", str(vocabulary)]) == 0
    preset = out / "reviews_keras_hub"
    files = sorted(str(p.relative_to(preset)) for p in preset.rglob("*") if p.is_file())
    assert files == [
        "assets/tokenizer/vocabulary.spm",
        "config.json",
        "metadata.json",
        "model.weights.h5",
        "preprocessor.json",
        "task.json",
        "task.weights.h5",
        "tokenizer.json",
    ]
    assert os.listdir(out) == ["reviews_keras_hub"]  # no staging folder or journal left
    backbone = json.loads((preset / "config.json").read_text())
    assert (backbone["class_name"], backbone["config"]["vocabulary_size"]) == ("FNetBackbone", 60)
    assert backbone["config"]["max_sequence_length"] == MAX_LENGTH
    encoder_parameters = model.count_params() - model.get_layer("classifier").count_params()
    metadata = json.loads((preset / "metadata.json").read_text())
    assert metadata["parameter_count"] == encoder_parameters
    assert capsys.readouterr().out.strip() == (
        f"Wrote keras-hub preset {preset} (FNetTextClassifier, {encoder_parameters:,} backbone "
        f"parameters, {sum(p.stat().st_size for p in preset.rglob('*') if p.is_file()):,} "
        f"bytes): {', '.join(files)}"
    )
    preprocessor = json.loads((preset / "preprocessor.json").read_text())
    assert preprocessor["config"]["sequence_length"] == MAX_LENGTH  # the longest it takes
    assert (preset / "assets/tokenizer/vocabulary.spm").read_bytes() == vocabulary.read_bytes()
    # The package's own keras-hub loader reads every tensor back, the head included.
    with warnings.catch_warnings():
        warnings.simplefilter("error", FreshHeadWarning)
        back = _free_length_classifier(weights=str(preset))
    rng = np.random.default_rng(4)
    inputs = {
        "token_ids": rng.integers(0, 60, (2, LENGTH)).astype("int32"),
        "segment_ids": rng.integers(0, SEGMENTS, (2, LENGTH)).astype("int32"),
    }
    expected = keras.ops.convert_to_numpy(model(inputs))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(back(inputs)), expected)
    assert not np.allclose(expected, expected[:1])
    # Refused again, as the other formats; without --tokenizer, the one the run stored.
    assert main([*argv, "--tokenizer", str(vocabulary)]) == 2
    assert "already exists; pass --overwrite to replace it." in capsys.readouterr().err
    (preset / "tokenizer.json").unlink()
    assert main([*argv, "--overwrite"]) == 0
    assert capsys.readouterr().out.startswith(
        "keras-fourier export: keras_hub tokenizer: the SentencePiece model the run stored\n"
    )
    assert json.loads((preset / "tokenizer.json").read_text())["class_name"] == "FNetTokenizer"
    assert (preset / "assets/tokenizer/vocabulary.spm").read_bytes() == vocabulary.read_bytes()


def test_export_command_refuses_what_keras_hub_cannot_hold_and_writes_nothing(
    tmp_path, capsys, monkeypatch
):
    from keras_fourier.cli import main

    _free_length_classifier(activation="gelu").save(tmp_path / "exact.keras")
    _free_length_classifier(mixing="linear").save(tmp_path / "linear.keras")
    keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="dense").save(
        tmp_path / "dense.keras"
    )
    _free_length_classifier().save(tmp_path / "reviews.keras")
    vocabulary = tmp_path / "spm.model"
    vocabulary.write_bytes(_tiny_sentencepiece_model())
    out = tmp_path / "out"
    for model, more, message in [
        ("exact", [], "keras-hub's FNet computes the tanh GELU; model 'reviews' has "),
        ("linear", [], "keras-hub's FNet mixes with the Fourier transform; model 'reviews' has "),
        ("dense", [], "model 'dense' is not one. Received: model='dense'"),
        ("reviews", ["--tokenizer", str(tmp_path / "missing.model")], "missing.model'"),
        ("reviews", ["--tokenizer", str(tmp_path / "exact.keras")], "not a SentencePiece model"),
        (
            "reviews",
            ["--format", "onnx", "--sequence-length", "8", "--tokenizer", str(vocabulary)],
            "--tokenizer is the tokenizer of a keras_hub preset; --format onnx has none.",
        ),
    ]:
        argv = ["export", str(tmp_path / f"{model}.keras"), "--format", "keras_hub", *more]
        assert main([*argv, "--out", str(out)]) == 2, model
        error = capsys.readouterr().err
        assert message in error and len(error.strip().splitlines()) == 1, error
        assert not out.exists()
    # A vocabulary of another size than the word table.
    small = FNet(SIZES, vocabulary_size=VOCAB, max_sequence_length=MAX_LENGTH, name="small")
    small.save(tmp_path / "small.keras")
    argv = ["export", str(tmp_path / "small.keras"), "--format", "keras_hub", "--out", str(out)]
    assert main([*argv, "--tokenizer", str(vocabulary)]) == 2
    assert f"has 60 pieces but model 'small' has a word table of {VOCAB} rows" in (
        capsys.readouterr().err
    )

    # A write that fails midway (a full disk) places nothing and leaves no staging folder.
    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(keras_hub_files, "h5py", types.SimpleNamespace(File=full_disk))
    out.mkdir()
    assert main(argv) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert os.listdir(out) == []
