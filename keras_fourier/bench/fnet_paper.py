"""The FNet paper's speed claim, measured: FNet against BERT (and Linear) at 512 tokens.

``keras-fourier bench --fnet-paper`` builds the paper's Base models with the
one FNet builder (:data:`keras_fourier.models.fnet_family.PAPER_MODELS`:
the same embeddings, feed-forward sublayers and pooler, another token
mixing) and times, at `sequence_length` tokens and one batch size:

* whole models (Table 2, right): a training step (``train_on_batch`` of a
  2-class classifier, AdamW, sparse cross-entropy) and inference
  (``predict_on_batch``), in sequences per second, and each model's speed-up
  over BERT (BERT's time / the model's time, the paper's "1.8x");
* the mixing sublayers alone (Table 9): one sublayer on (B, L, D) inputs,
  every other sublayer removed; inference is its forward pass, training its
  forward and backward passes (the gradient reaches the input through a
  trainable scalar in front of the sublayer, and the learned matrices of
  "attention" and "linear"; a plain SGD step), in milliseconds per batch,
  with the speed-up over self-attention.

The host's float32 matmul rate on the shape of the models' feed-forward
product is measured before the models, so the figures of two machines can be
set side by side. Timings are medians of repeated calls after a warm-up
call, in this process: measurements of one machine at one moment, never
assertions.

Reference:
    Lee-Thorp, Ainslie, Eckstein, Ontanon, "FNet: Mixing Tokens with Fourier
    Transforms", NAACL 2022, Table 2 and Table 9 (Appendix A.4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_fourier.bench.host import matmul_rate
from keras_fourier.bench.measure import median_seconds
from keras_fourier.bench.report import rounded
from keras_fourier.layers.fnet import MIXINGS, FNetEncoderBlock
from keras_fourier.models.fnet import build_fnet
from keras_fourier.models.fnet_family import FNET_VARIANTS, PAPER_MODELS
from keras_fourier.validation import check_choice, check_positive_int

# The paper's comparison: FNet and the Linear model against BERT (Table 2), and their
# mixing sublayers against self-attention (Table 9).
DEFAULT_MODELS = ("bert", "fnet", "linear")
DEFAULT_MIXINGS = ("attention", "fourier", "linear")
REFERENCE_MODEL = "bert"
REFERENCE_MIXING = "attention"
NUM_CLASSES = 2


class _InputScale(keras.layers.Layer):
    """``x * s`` with one trainable scalar s = 1: a gradient path through the timed sublayer."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(), initializer="ones", name="scale")

    def call(self, inputs):
        return inputs * keras.ops.cast(self.scale, inputs.dtype)


def _sizes(variant: str | dict[str, int]) -> dict[str, int]:
    return dict(FNET_VARIANTS[variant]) if isinstance(variant, str) else dict(variant)


def _token_inputs(
    batch_size: int, sequence_length: int, vocabulary_size: int
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    shape = (batch_size, sequence_length)
    return {
        "token_ids": rng.integers(0, vocabulary_size, shape).astype("int32"),
        "segment_ids": np.zeros(shape, "int32"),
    }


def _median_call_seconds(
    model: keras.Model, inputs: Any, targets: Any, repeats: int, train: bool
) -> tuple[float, float | None]:
    """Median seconds of `predict_on_batch` and, with `train`, of `train_on_batch` (else None)."""
    inference = median_seconds(lambda: model.predict_on_batch(inputs), repeats)
    step = None
    if train:
        step = median_seconds(lambda: model.train_on_batch(inputs, targets), repeats)
    return inference, step


def time_model(
    model_name: str,
    *,
    variant: str | dict[str, int] = "base",
    sequence_length: int = 512,
    batch_size: int = 8,
    vocabulary_size: int = 32000,
    fft_impl: str = "auto",
    repeats: int = 3,
    train: bool = True,
) -> dict[str, Any]:
    """Inference and training-step speed of one paper model (a row of ``PAPER_MODELS``).

    Returns:
        {"part": "model", "name", "params", "inference_seq_per_s",
        "train_seq_per_s"} (the last None without `train`).
    """
    keras.utils.set_random_seed(0)
    model = build_fnet(
        _sizes(variant),
        vocabulary_size=vocabulary_size,
        max_sequence_length=sequence_length,
        sequence_length=sequence_length,
        dropout=0.1,
        num_classes=NUM_CLASSES,
        fft_impl=fft_impl,
        name=model_name,
        **PAPER_MODELS[model_name],
    )
    inputs = _token_inputs(batch_size, sequence_length, vocabulary_size)
    labels = np.arange(batch_size, dtype="int32") % NUM_CLASSES
    model.compile(
        keras.optimizers.AdamW(1e-4),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    inference, step = _median_call_seconds(model, inputs, labels, repeats, train)
    row = {
        "part": "model",
        "name": model_name,
        "params": model.count_params(),
        "inference_seq_per_s": batch_size / inference,
        "train_seq_per_s": None if step is None else batch_size / step,
    }
    keras.backend.clear_session()
    return row


def time_mixing(
    mixing: str,
    *,
    hidden_size: int = 768,
    sequence_length: int = 512,
    batch_size: int = 8,
    fft_impl: str = "auto",
    repeats: int = 3,
    train: bool = True,
) -> dict[str, Any]:
    """Forward, and forward-and-backward, time of one mixing sublayer alone (Table 9).

    Returns:
        {"part": "mixing", "name", "params", "inference_ms", "train_ms"}
        (the last None without `train`).
    """
    keras.utils.set_random_seed(0)
    block = FNetEncoderBlock(
        intermediate_size=1,
        fft_impl=fft_impl,
        mixing=mixing,
        max_sequence_length=sequence_length,
        dropout=0.0,
    )
    shape = (sequence_length, hidden_size)
    block.build((None, *shape))
    inputs = keras.Input(shape)
    outputs = block.mixing(_InputScale(name="scale")(inputs))
    model = keras.Model(inputs, outputs, name=f"mixing_{mixing}")
    x = np.random.default_rng(1).standard_normal((batch_size, *shape)).astype("float32")
    model.compile(keras.optimizers.SGD(1e-6), keras.losses.MeanSquaredError())
    inference, step = _median_call_seconds(model, x, np.zeros_like(x), repeats, train)
    row = {
        "part": "mixing",
        "name": mixing,
        "params": block.mixing.count_params(),
        "inference_ms": 1000 * inference,
        "train_ms": None if step is None else 1000 * step,
    }
    keras.backend.clear_session()
    return row


def _add_speedups(rows: list[dict[str, Any]], reference: str) -> None:
    """Each row's speed-up over the reference row: its rate / the reference's (or time ratio)."""
    base = next((row for row in rows if row["name"] == reference), None)
    if base is None:
        return
    for row in rows:
        for figure in ("inference", "train"):
            rate = row.get(f"{figure}_seq_per_s", row.get(f"{figure}_ms"))
            ref = base.get(f"{figure}_seq_per_s", base.get(f"{figure}_ms"))
            if rate is None or ref is None:
                row[f"{figure}_speedup"] = None
            elif f"{figure}_ms" in row:
                row[f"{figure}_speedup"] = ref / rate
            else:
                row[f"{figure}_speedup"] = rate / ref


def run_fnet_paper(
    *,
    models: Sequence[str] = DEFAULT_MODELS,
    mixings: Sequence[str] = DEFAULT_MIXINGS,
    variant: str | dict[str, int] = "base",
    sequence_length: int = 512,
    batch_size: int = 8,
    vocabulary_size: int = 32000,
    fft_impl: str = "auto",
    repeats: int = 3,
    train: bool = True,
) -> dict[str, Any]:
    """The paper's speed comparison on this machine: models (Table 2) and mixings (Table 9).

    Args:
        models: rows of :data:`~keras_fourier.models.fnet_family.PAPER_MODELS`.
            Default ("bert", "fnet", "linear").
        mixings: names of :data:`keras_fourier.layers.fnet.MIXINGS` timed
            alone. Default ("attention", "fourier", "linear").
        variant: "base" (default) or "large", or a size mapping (tests).
        sequence_length: tokens per sequence. Default 512, the paper's.
        batch_size: sequences per timed call. Default 8.
        vocabulary_size: word table rows. Default 32000, the paper's.
        fft_impl: the Fourier layers' implementation. Default "auto".
        repeats: timed calls per figure (median). Default 3.
        train: time the training steps too. Default True.

    Returns:
        {"host": {"matmul_macs_per_s", "matmul_shape"}, "batch_size",
        "sequence_length", "variant", "rows": [...]}: one row per model
        (sequences/s and speed-up over BERT) and per mixing (ms per batch
        and speed-up over self-attention).

    Raises:
        ValueError: an unknown model or mixing name, or a size that is not a
            positive int.

    Example:
        >>> report = run_fnet_paper(models=("bert", "fnet"), mixings=("attention", "fourier"))
        >>> [row["name"] for row in report["rows"] if row["part"] == "model"]
        ['bert', 'fnet']
    """
    for name in models:
        check_choice("models", name, tuple(PAPER_MODELS))
    for name in mixings:
        check_choice("mixings", name, tuple(MIXINGS))
    for arg, value in (
        ("sequence_length", sequence_length),
        ("batch_size", batch_size),
        ("repeats", repeats),
    ):
        check_positive_int(arg, value)
    sizes = _sizes(variant)
    shape = (batch_size * sequence_length, sizes["hidden_size"], sizes["intermediate_size"])
    host = {"matmul_macs_per_s": matmul_rate(shape), "matmul_shape": list(shape)}
    options = {
        "sequence_length": sequence_length,
        "batch_size": batch_size,
        "fft_impl": fft_impl,
        "repeats": repeats,
        "train": train,
    }
    model_rows = [
        time_model(name, variant=variant, vocabulary_size=vocabulary_size, **options)
        for name in models
    ]
    mixing_rows = [
        time_mixing(name, hidden_size=sizes["hidden_size"], **options) for name in mixings
    ]
    _add_speedups(model_rows, REFERENCE_MODEL)
    _add_speedups(mixing_rows, REFERENCE_MIXING)
    return {
        "host": host,
        "variant": variant,
        "sequence_length": sequence_length,
        "batch_size": batch_size,
        "rows": [rounded(row) for row in model_rows + mixing_rows],
    }
