"""Pretrain a small FNet with masked language modelling, then fine-tune it on a CSV text task.

What a user does with the official checkpoints (``--weights f_net_base
--tokenizer official``), at a size that runs on a laptop CPU:

1. generates an unlabelled corpus from sentence templates and a small
   topic-classification data set as CSV split files (``train.csv``,
   ``dev.csv``, ``test.csv``, columns ``sentence,label``; three topics);
2. trains a SentencePiece vocabulary on the corpus (as the official
   ``c4_bpe_sentencepiece.model`` was trained on C4; whole words here, with
   FNet's ``[CLS]``, ``[SEP]``, ``[MASK]`` and pad pieces);
3. pretrains ``FNet(heads="pretraining")`` of ``fnet_tiny``'s sizes on the
   corpus with the masked-LM objective (the official pretraining head, its
   decoder tied to the word embeddings) and saves its weights as a
   ``.weights.h5``;
4. fine-tunes ``fnet_tiny`` on the CSV folder from those weights with
   `keras_fourier.training.train`, the API behind ``keras-fourier train
   --model fnet_tiny --weights pretrained.weights.h5 --tokenizer vocab.model
   --data csv:<folder>``: the encoder starts from the pretrained weights,
   the classifier anew, with the official fine-tuning recipe
   ("fnet_finetune": Adam, weight decay 0.01, linear warmup over 10% of the
   steps then linear decay) at the larger learning rate the paper found
   better for small models (1e-3, Section 4.1), into a resumable run folder
   whose ``model.keras`` keeps the class names and the vocabulary;
5. prints the test accuracy (three classes: chance is 0.33) and classifies
   a sentence with ``keras-fourier predict --text``, which reads the
   vocabulary from the run.

The task is easy (the topic is one word of the sentence): the example shows
the path from pretrained weights to a fine-tuned run, not what pretraining
adds. It needs the ``[text]`` extra (``sentencepiece``) and runs in well
under a minute on a 2-core CPU; the test suite runs this very command::

    python examples/finetune_fnet.py --out runs/finetune_fnet
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import time

import keras
import numpy as np
import sentencepiece

from keras_fourier.cli import main as keras_fourier_command
from keras_fourier.data import load_tokenizer, tokenize_and_pack
from keras_fourier.models import FNet
from keras_fourier.training import TEXT_PRESETS, TrainConfig, train

TOPICS = {
    "weather": ["rain", "snow", "wind", "storm", "fog", "sunshine", "thunder", "frost"],
    "food": ["soup", "bread", "cheese", "pasta", "salad", "cake", "curry", "rice"],
    "sport": ["match", "race", "goal", "team", "coach", "league", "tennis", "final"],
}
OPENERS = [
    "yesterday the",
    "today the",
    "we talked about the",
    "everyone noticed the",
    "my friend loves the",
    "the news was about the",
    "nobody expected the",
    "they wrote about the",
]
CLOSERS = [
    "in the city",
    "after lunch",
    "near the river",
    "all week",
    "at the weekend",
    "before dinner",
    "on the radio",
    "again",
]
SEQUENCE_LENGTH = 16
MASKED_PER_SEQUENCE = 2


def _pick(rng: np.random.Generator, choices: list[str]) -> str:
    return choices[rng.integers(len(choices))]


def labelled_sentences(rng: np.random.Generator, count: int) -> list[tuple[str, str]]:
    """`count` (sentence, topic) rows: an opener, one of the topic's nouns, a closer."""
    rows = []
    for _ in range(count):
        topic = _pick(rng, list(TOPICS))
        sentence = f"{_pick(rng, OPENERS)} {_pick(rng, TOPICS[topic])} {_pick(rng, CLOSERS)}"
        rows.append((sentence, topic))
    return rows


def corpus(rng: np.random.Generator, count: int) -> list[str]:
    """`count` unlabelled sentences naming two things of one topic."""
    texts = []
    for _ in range(count):
        first, second = rng.choice(TOPICS[_pick(rng, list(TOPICS))], 2, replace=False)
        texts.append(f"{_pick(rng, OPENERS)} {first} and the {second} {_pick(rng, CLOSERS)}")
    return texts


def write_data_set(folder: str, rng: np.random.Generator) -> None:
    """train.csv (600 rows), dev.csv (100) and test.csv (300): sentence,label."""
    os.makedirs(folder, exist_ok=True)
    for split, count in (("train", 600), ("dev", 100), ("test", 300)):
        with open(os.path.join(folder, f"{split}.csv"), "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["sentence", "label"])
            writer.writerows(labelled_sentences(rng, count))


def train_vocabulary(texts: list[str], path: str) -> None:
    """A word-level SentencePiece model of `texts` with FNet's special pieces, saved to `path`."""
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        model_type="word",
        vocab_size=80,
        hard_vocab_limit=False,
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
        minloglevel=2,
    )
    with open(path, "wb") as file:
        file.write(model.getvalue())


def masked_lm_data(texts: list[str], tokenizer, rng: np.random.Generator) -> tuple[dict, dict]:
    """Inputs and targets of the masked-LM objective: 2 words per text replaced by [MASK]
    (static masking, chosen once), their ids the labels."""
    features = tokenize_and_pack(texts, tokenizer=tokenizer, sequence_length=SEQUENCE_LENGTH)
    token_ids = features["token_ids"].numpy()
    lengths = features["padding_mask"].numpy().sum(axis=1)
    positions = np.stack(
        [
            np.sort(rng.choice(np.arange(1, length - 1), MASKED_PER_SEQUENCE, replace=False))
            for length in lengths
        ]
    ).astype("int32")
    rows = np.arange(len(texts))[:, None]
    labels = token_ids[rows, positions]
    masked = token_ids.copy()
    masked[rows, positions] = tokenizer.mask_id
    inputs = {
        "token_ids": masked,
        "segment_ids": np.zeros_like(masked),
        "masked_positions": positions,
    }
    targets = {
        "masked_lm_logits": labels,
        # Single sentences: the next-sentence head is not trained (its loss weight is 0).
        "next_sentence_logits": np.zeros(len(texts), "int32"),
    }
    return inputs, targets


def pretrain(texts: list[str], vocabulary: str, path: str, rng: np.random.Generator) -> float:
    """Pretrains a fnet_tiny-sized FNetPretraining on `texts` (2 epochs) and saves its weights
    to `path`; returns its masked-LM accuracy on 500 other sentences."""
    tokenizer = load_tokenizer(vocabulary)
    model = FNet(
        TEXT_PRESETS["fnet_tiny"],
        vocabulary_size=tokenizer.vocabulary_size,
        max_sequence_length=SEQUENCE_LENGTH,
        heads="pretraining",
    )
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3),
        loss={"masked_lm_logits": loss, "next_sentence_logits": loss},
        loss_weights={"masked_lm_logits": 1.0, "next_sentence_logits": 0.0},
        metrics={"masked_lm_logits": ["accuracy"]},
    )
    model.fit(*masked_lm_data(texts, tokenizer, rng), batch_size=64, epochs=2, verbose=0)
    held_out = masked_lm_data(corpus(rng, 500), tokenizer, rng)
    metrics = model.evaluate(*held_out, batch_size=250, verbose=0, return_dict=True)
    model.save_weights(path)
    return metrics["masked_lm_logits_accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/finetune_fnet", help="folder of everything written")
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    data = os.path.join(args.out, "topics")
    write_data_set(data, rng)
    texts = corpus(rng, 3000)
    vocabulary = os.path.join(args.out, "vocab.model")
    train_vocabulary(texts, vocabulary)
    weights = os.path.join(args.out, "pretrained.weights.h5")
    accuracy = pretrain(texts, vocabulary, weights, rng)
    print(f"pretrained: masked-LM accuracy {accuracy:.3f} on held-out sentences -> {weights}")
    run = os.path.join(args.out, "finetuned")
    result = train(
        TrainConfig(
            model="fnet_tiny",
            data=f"csv:{data}",
            weights=weights,
            tokenizer=vocabulary,
            learning_rate=1e-3,
            epochs=4,
            batch_size=16,
            sequence_length=SEQUENCE_LENGTH,
            out=run,
            tensorboard=False,
            verbose=0,
        )
    )
    print(f"fine-tuned run {run}: test accuracy {result.metrics['accuracy']:.3f} (chance 0.333)")
    keras_fourier_command(["predict", "--model", run, "--text", "today the cheese again"])
    print(f"done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
