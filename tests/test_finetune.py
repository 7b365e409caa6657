"""Fine-tuning end to end: `keras-fourier train --weights ... --data csv:...` as a user runs it.

FNet weights come from the files a user has: a `.weights.h5` of a pretraining
model saved by the package, and a checkpoint in the official Flax layout
written by the test writer of tests/test_fnet_checkpoints.py. The text is a
folder of CSV (or TSV) split files the test writes. Every run is fnet_tiny
at 16 tokens, a few dozen rows, one or two epochs: seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile

import keras
import numpy as np
import pytest

from keras_fourier.cli import main
from keras_fourier.data import load_tokenizer, official_sentencepiece_model, tokenize_and_pack
from keras_fourier.data.text import OFFICIAL_SENTENCEPIECE_FILE
from keras_fourier.model_record import CHECKPOINT_RECORD
from keras_fourier.models import FNet
from keras_fourier.models.catalog import TEXT_PRESETS, create_model, create_pretrained_model
from keras_fourier.models.fnet_weights import fnet_weights_activation, fnet_weights_sizes
from keras_fourier.training import (
    RECIPES,
    TrainConfig,
    callbacks,
    create_optimizer,
    read_history,
    resolve_config,
    validate_config,
    warmup_linear_schedule,
)
from tests.release_server import serve
from tests.test_data_text import _tiny_sentencepiece_model
from tests.test_fnet_checkpoints import official_params, write_checkpoint, write_keras_hub_preset

pytestmark = pytest.mark.single_backend

TINY = TEXT_PRESETS["fnet_tiny"]
POSITIONS = 32
METRIC = r"(\d+\.\d+)"
WORDS = {
    "positive": ["good", "great", "fine", "happy"],
    "negative": ["bad", "sad", "awful", "poor"],
}


def _rows(count: int, offset: int = 0) -> list[tuple[str, str]]:
    """(text, label) rows: a template with one word that gives the class away."""
    rows = []
    for index in range(offset, offset + count):
        label = "positive" if index % 2 else "negative"
        word = WORDS[label][index // 2 % 4]
        rows.append((f"the cat was {word} on the mat", label))
    return rows


def _write(path, rows, header=("sentence", "label"), delimiter=","):
    lines = [delimiter.join(header), *(delimiter.join(row) for row in rows)]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def csv_folder(tmp_path):
    folder = tmp_path / "reviews"
    folder.mkdir()
    _write(folder / "train.csv", _rows(32))
    _write(folder / "dev.csv", _rows(8, 32))
    _write(folder / "test.csv", _rows(8, 40))
    return folder


def _pretrained_h5(path, trained: bool = False) -> str:
    """A `.weights.h5` of a pretraining FNet of fnet_tiny's sizes: random, or after one
    masked-LM step (then Keras saves the optimizer's variables too)."""
    keras.utils.set_random_seed(7)
    model = FNet(TINY, vocabulary_size=260, max_sequence_length=POSITIONS, heads="pretraining")
    if trained:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile("adam", loss={"masked_lm_logits": loss, "next_sentence_logits": loss})
        ids = np.full((2, POSITIONS), 50, "int32")
        inputs = {"token_ids": ids, "segment_ids": 0 * ids, "masked_positions": ids[:, :2] // 50}
        labels = {"masked_lm_logits": ids[:, :2], "next_sentence_logits": ids[:, 0] * 0}
        model.fit(inputs, labels, verbose=0)
    model.save_weights(path)
    return str(path)


def _argv(weights, data, out, *more):
    return [
        "train",
        "--model",
        "fnet_tiny",
        "--weights",
        str(weights),
        "--data",
        f"csv:{data}",
        "--sequence-length",
        "16",
        "--epochs",
        "2",
        "--batch-size",
        "8",
        "--no-tensorboard",
        "--verbose",
        "2",
        "--out",
        str(out),
        *more,
    ]


def _record(model_file) -> dict:
    with zipfile.ZipFile(model_file) as archive:
        return json.loads(archive.read(CHECKPOINT_RECORD))


def _last(capsys) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


@pytest.mark.slow
def test_fine_tune_from_weights_h5_resume_evaluate_predict_and_rerun(
    tmp_path, csv_folder, capsys, monkeypatch
):
    weights = _pretrained_h5(tmp_path / "pretrained.weights.h5", trained=True)
    out = tmp_path / "run"
    argv = _argv(weights, csv_folder, out)
    save_best = callbacks.ModelCheckpoint.on_epoch_end

    def killed_after_the_first_epoch(self, epoch, logs=None):  # fault injection: ^C
        save_best(self, epoch, logs)
        if self.monitor:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(callbacks.ModelCheckpoint, "on_epoch_end", killed_after_the_first_epoch)
        assert main(argv) == 130
    assert [row["epoch"] for row in read_history(out / "history.csv")] == [0]
    assert not (out / "model.keras").exists()
    capsys.readouterr()

    # The rerun resumes after the first epoch and finishes.
    assert main(argv) == 0
    assert [row["epoch"] for row in read_history(out / "history.csv")] == [0, 1]
    printed = capsys.readouterr().out
    accuracy = re.fullmatch(rf"test_accuracy={METRIC}", printed.strip().splitlines()[-1])[1]
    assert "input sequences of 16 tokens, tokenizer 'bytes', 2 classes" in printed
    assert "validation  'validation', 8 texts of" in printed and "dev.csv" in printed

    identity = json.loads((out / "run.json").read_text())["identity"]
    assert identity["weights"] == weights and identity["tokenizer"] == "bytes"
    assert identity["recipe"] == "fnet_finetune"
    assert (identity["learning_rate"], identity["weight_decay"], identity["label_smoothing"]) == (
        1e-5,
        0.01,
        0.0,
    )
    assert identity["clipnorm"] is None and identity["warmup_epochs"] is None
    record = _record(out / "model.keras")
    assert record["class_names"] == ["negative", "positive"]
    assert record["tokenizer"] == {"name": "bytes"}

    # The encoder started from the weights (1e-5 for 8 steps moves them by ~1e-4): the word
    # table is theirs, not a fresh one; the classifier is new (2 classes; the file has none).
    model = keras.saving.load_model(out / "model.keras", compile=False)
    pretrained = FNet(
        TINY,
        vocabulary_size=260,
        max_sequence_length=POSITIONS,
        heads="pretraining",
        weights=weights,
    )
    ours = keras.ops.convert_to_numpy(model.get_layer("embeddings").word.embeddings)
    theirs = keras.ops.convert_to_numpy(pretrained.encoder.get_layer("embeddings").word.embeddings)
    assert np.abs(ours - theirs).max() < 1e-3
    assert model.get_layer("embeddings").position.embeddings.shape == (POSITIONS, 64)

    # evaluate tokenizes and labels as the run did, without --tokenizer.
    assert main(["evaluate", "--model", str(out), "--data", f"csv:{csv_folder}"]) == 0
    assert re.fullmatch(rf"accuracy={accuracy} loss={METRIC}", _last(capsys))
    assert main(["predict", "--model", str(out), "--text", "the cat was good", "--top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "'the cat was good'"
    assert re.fullmatch(r"  1\. +\d+\.\d\d%  (positive|negative)", lines[1])
    assert {lines[1].split()[-1], lines[2].split()[-1]} == {"positive", "negative"}

    # Rerun: the finished run is shown, not trained again.
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "is already finished (2 epochs)" in printed
    assert printed.strip().endswith(f"test_accuracy={accuracy}")


def test_official_flax_checkpoint_and_a_sentencepiece_tokenizer(tmp_path, csv_folder, capsys):
    spm = tmp_path / "vocab.model"
    spm.write_bytes(_tiny_sentencepiece_model())
    checkpoint = write_checkpoint(
        tmp_path / "f_net_checkpoint",
        official_params(np.random.default_rng(0), sizes=TINY, vocab=60, max_length=POSITIONS),
    )
    # TSV split files, as GLUE ships them.
    tsv = tmp_path / "glue"
    tsv.mkdir()
    for name in ("train", "dev", "test"):
        rows = (csv_folder / f"{name}.csv").read_text().replace(",", "\t")
        (tsv / f"{name}.tsv").write_text(rows)

    # Official weights default to the official 32,000-piece vocabulary: refused, naming both.
    out = tmp_path / "run"
    assert main(_argv(checkpoint, tsv, out)) == 2
    err = capsys.readouterr().err
    assert "tokenizer has 32000 ids but the word table" in err and "has 60 rows" in err
    assert not out.exists()

    assert main(_argv(checkpoint, tsv, out, "--tokenizer", str(spm))) == 0
    accuracy = re.fullmatch(rf"test_accuracy={METRIC}", _last(capsys))[1]
    record = _record(out / "model.keras")
    assert record["tokenizer"]["name"] == str(spm)
    assert record["tokenizer"]["vocabulary_size"] == 60

    # model.keras alone, moved away from its run and its .model file, still evaluates.
    moved = tmp_path / "elsewhere" / "finetuned.keras"
    moved.parent.mkdir()
    shutil.copy(out / "model.keras", moved)
    spm.unlink()
    assert main(["evaluate", "--model", str(moved), "--data", f"csv:{tsv}"]) == 0
    assert re.fullmatch(rf"accuracy={accuracy} loss={METRIC}", _last(capsys))


TRAIN = "text,label\na,x\nb,y\n"
DEV = "text,label\nc,x\n"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"train.csv": "text,stars\na,1\nb,2\n"}, "has no 'label' column"),
        ({"train.csv": "label\n1\n2\n"}, "has no text column (text, sentence, sentence1)"),
        ({"train.csv": "text,label\na,x\nb,x\n"}, "has a single class 'x'"),
        ({"train.csv": "text,label\na,x\nb,y,z\n"}, "Line 3 of"),
        ({"train.csv": TRAIN, "dev.csv": DEV, "test.csv": "text,label\nc,w\n"}, "'w' on line 2"),
        ({"train.csv": TRAIN, "dev.csv": DEV, "test.csv": "text,label\n"}, "has no examples"),
        ({"train.csv": TRAIN, "dev.csv": DEV}, "has no split 'test'"),
        (
            {"train.csv": TRAIN, "dev.csv": "sentence,text,label\nc,d,x\n", "test.csv": DEV},
            "has more than one text column (text, sentence)",
        ),
    ],
)
def test_bad_csv_data_is_refused_naming_it_and_writing_nothing(tmp_path, files, message, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    out = tmp_path / "run"
    argv = ["train", "--model", "fnet_tiny", "--data", f"csv:{folder}", "--batch-size", "2"]
    assert main([*argv, "--sequence-length", "16", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_weights_that_do_not_fit_are_refused_naming_the_mismatch(tmp_path, csv_folder, capsys):
    small = tmp_path / "small.weights.h5"
    FNet(
        {"hidden_size": 16, "num_layers": 1, "intermediate_size": 32},
        vocabulary_size=260,
        max_sequence_length=POSITIONS,
    ).save_weights(small)
    good = _pretrained_h5(tmp_path / "good.weights.h5")
    out = tmp_path / "run"
    cases = [
        (_argv(small, csv_folder, out), "hidden_size 16, model 64; num_layers 1, model 2"),
        (_argv(good, csv_folder, out, "--sequence-length", "64"), "have 32 positions"),
        (_argv(good, csv_folder, out, "--tokenizer", "official"), "tokenizer has 32000 ids"),
    ]
    saved = tmp_path / "saved.keras"
    create_model("fnet_tiny", num_classes=2, sequence_length=16, vocabulary_size=260).save(saved)
    cases.append(
        (
            [
                "train",
                "--model",
                str(saved),
                "--weights",
                good,
                "--data",
                f"csv:{csv_folder}",
                "--out",
                str(out),
            ],
            "`--weights` applies to model names",
        )
    )
    for argv, message in cases:
        assert main(argv) == 2
        assert message in capsys.readouterr().err
        assert not out.exists()


def test_a_keras_hub_preset_and_a_release_name_as_fine_tuning_weights(tmp_path, csv_folder):
    preset = tmp_path / "f_net_tiny_en"
    values = write_keras_hub_preset(
        preset,
        np.random.default_rng(3),
        hidden_dim=64,
        intermediate_dim=128,
        vocabulary_size=260,
        max_sequence_length=POSITIONS,
    )
    model = create_pretrained_model(
        "fnet_tiny", weights=str(preset), num_classes=3, sequence_length=16, vocabulary_size=260
    )
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model.get_layer("pooler").kernel),
        values["layers/dense_1/vars/0"],
    )
    assert model.get_layer("classifier").kernel.shape == (64, 3)
    # A preset is official: the tokenizer defaults to the official vocabulary, refused here.
    config = TrainConfig(
        model="fnet_tiny", data=f"csv:{csv_folder}", weights=str(preset), sequence_length=16
    )
    with pytest.raises(ValueError, match=r"tokenizer has 32000 ids .* has 260 rows"):
        validate_config(config)
    validate_config(TrainConfig(**{**vars(config), "tokenizer": "bytes"}))
    # Release names are checked without downloading: their sizes are the release's.
    assert fnet_weights_sizes("f_net_large") == {
        "hidden_size": 1024,
        "num_layers": 24,
        "intermediate_size": 4096,
        "vocabulary_size": 32000,
        "max_sequence_length": 512,
        "num_segments": 4,
    }
    with pytest.raises(ValueError, match="hidden_size 768, model 64"):
        validate_config(
            TrainConfig(model="fnet_tiny", data=f"csv:{csv_folder}", weights="f_net_base")
        )


def test_the_fine_tuning_recipe_is_the_official_one():
    recipe = RECIPES["fnet_finetune"]
    # SST-2 as run_classifier.py counts it: 67,349 examples, batch 64, 3 epochs.
    steps_per_epoch = 67349 // 64
    total = 67349 * 3 // 64
    assert recipe.epochs * steps_per_epoch == total == 3156
    warmup = recipe.warmup_steps(None, steps_per_epoch, recipe.epochs)
    assert warmup == int(0.1 * total) == 315
    schedule = warmup_linear_schedule(recipe.learning_rate, total, warmup)
    steps = [0, 100, 315, 1000, (315 + 3156) / 2, 3156, 4000]
    expected = [0.0, 1e-5 * 100 / 315, 1e-5, 1e-5 * (1 - 685 / 2841), 5e-6, 0.0, 0.0]
    np.testing.assert_allclose([float(schedule(s)) for s in steps], expected, atol=1e-12)
    assert (
        keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(schedule)
        ).get_config()
        == schedule.get_config()
    )

    config = resolve_config(TrainConfig(model="fnet_tiny", data="csv:x", weights="f_net_base"))
    assert (config.recipe, config.epochs, config.batch_size, config.learning_rate) == (
        "fnet_finetune",
        3,
        64,
        1e-5,
    )
    assert (config.weight_decay, config.clipnorm, config.label_smoothing) == (0.01, 0.0, 0.0)
    assert resolve_config(TrainConfig(model="fnet_tiny", data="csv:x")).recipe == "deit"

    model = create_model("fnet_tiny", num_classes=2, sequence_length=8, vocabulary_size=20)
    optimizer = create_optimizer(
        model,
        learning_rate=schedule,
        weight_decay=0.01,
        clipnorm=None,
        decay_all=True,
        epsilon=recipe.epsilon,
    )
    optimizer.build(model.trainable_variables)
    assert all(optimizer._use_weight_decay(v) for v in model.trainable_variables)
    assert (optimizer.epsilon, optimizer.beta_1, optimizer.beta_2) == (1e-6, 0.9, 0.999)
    assert optimizer.global_clipnorm is None


def test_vision_weights_load_the_backbone_and_a_fresh_head(tmp_path):
    options = {"image_size": 16, "dims": 16, "depths": 1}
    source = create_model("gfnet_tiny", num_classes=7, **options)
    path = tmp_path / "seven.weights.h5"
    source.save_weights(path)
    keras.utils.set_random_seed(1)
    model = create_pretrained_model("gfnet_tiny", weights=str(path), num_classes=3, **options)
    assert model.output_shape == (None, 3)
    theirs = {v.path: keras.ops.convert_to_numpy(v) for v in source.weights}
    for variable in model.weights:
        if not variable.path.startswith("head/"):
            np.testing.assert_array_equal(
                keras.ops.convert_to_numpy(variable), theirs[variable.path]
            )
    with pytest.raises(ValueError, match="no official ImageNet checkpoint for 'gfnet_tiny'"):
        create_pretrained_model("gfnet_tiny", weights="imagenet", num_classes=3, **options)


def test_official_vocabulary_downloads_once_through_the_mirror(tmp_path, monkeypatch):
    proto = _tiny_sentencepiece_model()
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    with serve({OFFICIAL_SENTENCEPIECE_FILE: proto}) as server:
        monkeypatch.setenv("KERAS_FOURIER_MIRROR", server.url)
        path = official_sentencepiece_model()
        assert server.requests == [f"/{OFFICIAL_SENTENCEPIECE_FILE}"]
    assert path == os.path.join(tmp_path, "keras", "keras_fourier", OFFICIAL_SENTENCEPIECE_FILE)
    with open(path, "rb") as file:
        assert file.read() == proto
    # Offline afterwards: the cached file.
    assert official_sentencepiece_model() == path
    assert load_tokenizer("official").vocabulary_size == 60


def test_train_pads_per_batch_into_a_model_of_any_length_that_predicts(
    tmp_path, csv_folder, capsys
):
    out = tmp_path / "run"
    argv = [
        "train",
        "--model",
        "fnet_tiny",
        "--data",
        f"csv:{csv_folder}",
        "--sequence-length",
        "32",
        "--padding",
        "batch",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--no-tensorboard",
        "--verbose",
        "2",
        "--out",
        str(out),
    ]
    # The 32 texts are 28 ("bad", "sad"), 29 or 30 bytes with [CLS] and [SEP]: the 8 of 28
    # make one bucket (one batch of 28 tokens), the 24 others three batches of 29 or 30.
    assert main([*argv, "--bucket-boundaries", "29"]) == 0
    printed = capsys.readouterr().out
    assert "input sequences of up to 32 tokens, padded per batch in buckets split at [29]" in (
        printed
    )
    assert "\n4/4 - " in printed  # the buckets' batches, counted before training
    assert re.fullmatch(rf"test_accuracy={METRIC}", printed.strip().splitlines()[-1])
    identity = json.loads((out / "run.json").read_text())["identity"]
    assert (identity["padding"], identity["bucket_boundaries"]) == ("batch", [29])
    model = keras.saving.load_model(out / "model.keras", compile=False)
    assert {name: tuple(tensor.shape) for name, tensor in model.input.items()} == {
        "segment_ids": (None, None),
        "token_ids": (None, None),
    }
    assert model.get_layer("embeddings").max_sequence_length == 32
    assert _record(out / "model.keras")["sequence_length"] == 32  # what evaluate reads

    # The run's settings are stored: another padding is another run, the same one is shown.
    assert main(argv) == 2
    assert "  --bucket-boundaries: stored [29], given None\n" in capsys.readouterr().err
    assert main([*argv, "--bucket-boundaries", "29"]) == 0
    assert "is already finished (1 epochs)" in capsys.readouterr().out

    # The run's test split was read as evaluate reads it (padded per batch, as in training);
    # predict pads the texts to the longest of them.
    text = "the cat was good"
    assert main(["predict", "--model", str(out), "--text", text, "--top", "1"]) == 0
    features = tokenize_and_pack([text], tokenizer=load_tokenizer("bytes"), sequence_length=32)
    inputs = {name: features[name][:, : len(text) + 2] for name in ("token_ids", "segment_ids")}
    probabilities = keras.ops.convert_to_numpy(model(inputs))[0]
    best = int(np.argmax(probabilities))
    assert capsys.readouterr().out.splitlines()[1] == (
        f"  1. {float(probabilities[best]):7.2%}  {['negative', 'positive'][best]}"
    )


@pytest.mark.parametrize(
    ("more", "message"),
    [
        (["--padding", "batch"], "`--padding` applies to text tasks; task 'image_classification'"),
        (
            ["--model", "fnet_tiny", "--data", "listops", "--bucket-boundaries", "8"],
            "`--bucket-boundaries` must be increasing lengths from 2 to --sequence-length (128), "
            "with --padding batch. Received: --bucket-boundaries=[8]",
        ),
    ],
)
def test_per_batch_padding_is_refused_where_it_does_not_apply(tmp_path, more, message, capsys):
    assert main(["train", *more, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_per_batch_padding_refuses_a_saved_model_of_one_length(tmp_path, csv_folder, capsys):
    saved = tmp_path / "fixed.keras"
    create_model("fnet_tiny", num_classes=2, sequence_length=16, vocabulary_size=260).save(saved)
    argv = ["train", "--model", str(saved), "--data", f"csv:{csv_folder}", "--padding", "batch"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"`--padding` batch needs a model of any length; the saved model {str(saved)!r} takes "
        "16 tokens. Received: --padding=batch"
    )
    assert not (tmp_path / "run").exists()


def _exact_gelu_fnet(folder) -> keras.Model:
    """An exact-GELU FNet encoder, saved as ``exact.keras`` and ``exact.weights.h5`` in `folder`.

    A `.weights.h5` of it records no activation (the official tanh GELU is assumed, as for
    every other kind of FNet weights); its `.keras` file records it.
    """
    keras.utils.set_random_seed(8)
    exact = FNet(
        TINY, vocabulary_size=260, max_sequence_length=POSITIONS, activation="gelu", name="exact"
    )
    for index in range(TINY["num_layers"]):  # pre-activations of order 1, where the GELUs differ
        kernel = exact.get_layer(f"encoder_layer_{index}").intermediate.kernel
        kernel.assign(kernel * 100)
    exact.save(folder / "exact.keras")
    exact.save_weights(folder / "exact.weights.h5")
    return exact


def test_fine_tuning_keeps_the_activation_a_keras_file_records(tmp_path):
    exact = _exact_gelu_fnet(tmp_path)
    assert fnet_weights_activation(str(tmp_path / "exact.keras")) == "gelu"
    assert fnet_weights_activation(str(tmp_path / "exact.weights.h5")) == "gelu_tanh"
    assert fnet_weights_sizes(str(tmp_path / "exact.keras")) == fnet_weights_sizes(
        str(tmp_path / "exact.weights.h5")
    )
    options = {"num_classes": 2, "sequence_length": 16, "vocabulary_size": 260}
    model = create_pretrained_model("fnet_tiny", weights=str(tmp_path / "exact.keras"), **options)
    assert model.get_layer("encoder_layer_1").activation == "gelu"
    inputs = {"token_ids": np.full((1, 16), 7, "int32"), "segment_ids": np.zeros((1, 16), "int32")}
    theirs = keras.ops.convert_to_numpy(exact(inputs)["sequence_output"])

    def encoded(model):
        last = model.get_layer(f"encoder_layer_{TINY['num_layers'] - 1}").output
        return keras.ops.convert_to_numpy(keras.Model(model.input, last)(inputs))

    np.testing.assert_allclose(encoded(model), theirs, atol=1e-6)
    # The same weights under the tanh GELU compute something else (what the `.weights.h5` gives).
    tanh = create_pretrained_model(
        "fnet_tiny", weights=str(tmp_path / "exact.weights.h5"), **options
    )
    assert np.abs(encoded(tanh) - theirs).max() > 1e-5  # 5e-5 here, the match within 1e-6
    keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="dense").save(
        tmp_path / "dense.keras"
    )
    with pytest.raises(ValueError, match=r"holds model 'dense', not an FNet"):
        create_pretrained_model("fnet_tiny", weights=str(tmp_path / "dense.keras"), **options)


def _vision_keras_file(folder, top: bool) -> tuple[keras.Model, str]:
    """A 7-class gfnet_tiny (16 wide, 1 deep), saved as a `.keras` file with its head or without."""
    keras.utils.set_random_seed(8)
    model = create_model("gfnet_tiny", num_classes=7, image_size=16, dims=16, depths=1)
    if not top:
        model = keras.Model(model.input, model.get_layer("pool").output, name="gfnet_tiny")
    path = str(folder / f"{'seven' if top else 'headless'}.keras")
    model.save(path)
    return model, path


@pytest.mark.parametrize("source", ["fnet", "gfnet", "gfnet_headless"])
def test_fine_tuning_from_a_keras_file_loads_it_once(source, tmp_path, csv_folder, monkeypatch):
    # FNet-Base's `.keras` file is ~330 MB: the run reads the FNet's sizes and activation, or a
    # vision model's head (if any), from its config and loads its weights once. The spy counts
    # Keras's loads and performs each.
    out = tmp_path / "run"
    if source == "fnet":
        exact = _exact_gelu_fnet(tmp_path)
        weights = str(tmp_path / "exact.keras")
        argv = _argv(weights, csv_folder, out, "--epochs", "1")
    else:
        donor, weights = _vision_keras_file(tmp_path, top=source == "gfnet")
        argv = ["train", "--model", "gfnet_tiny", "--dims", "16", "--depths", "1"]
        argv += ["--weights", weights, "--epochs", "1", "--steps-per-epoch", "2", "--verbose", "0"]
        argv += ["--batch-size", "8", "--no-tensorboard", "--out", str(out)]
    load_model = keras.saving.load_model
    loaded = []

    def counted(path, *args, **kwargs):
        loaded.append(os.fspath(path))
        return load_model(path, *args, **kwargs)

    monkeypatch.setattr(keras.saving, "load_model", counted)
    assert main(argv) == 0
    assert loaded.count(weights) == 1, loaded
    model = load_model(out / "model.keras", compile=False)
    if source == "fnet":
        assert model.get_layer("encoder_layer_1").activation == "gelu"
        ours = keras.ops.convert_to_numpy(model.get_layer("embeddings").word.embeddings)
        theirs = keras.ops.convert_to_numpy(exact.get_layer("embeddings").word.embeddings)
        assert np.abs(ours - theirs).max() < 1e-3  # 4 steps at 1e-5 from the file's table
        return
    assert model.output_shape == (None, 10)  # the digits' classes, a fresh head
    theirs = {v.path: keras.ops.convert_to_numpy(v) for v in donor.weights}
    backbone = [v for v in model.weights if not v.path.startswith("head/")]
    assert len(backbone) == len(theirs) - 2 * (source == "gfnet")
    # Two Adam steps of at most 3e-3 from the file's backbone (the train's seed 0 initialises
    # kernels of about 0.04 elsewhere).
    for variable in backbone:
        difference = keras.ops.convert_to_numpy(variable) - theirs[variable.path]
        assert np.abs(difference).max() < 0.005, variable.path
