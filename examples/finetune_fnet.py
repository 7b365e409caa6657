"""Pretrain a small FNet with masked language modelling, then fine-tune it on a CSV text task.

What a user does with the official checkpoints (``--weights f_net_base``),
at a size that runs on a laptop CPU:

1. writes a small topic-classification data set as CSV split files
   (``train.csv``, ``dev.csv``, ``test.csv``, columns ``sentence,label``)
   and an unlabelled corpus from the same sentence templates;
2. pretrains ``FNet(heads="pretraining")`` of ``fnet_tiny``'s sizes on the
   corpus with the masked-LM objective (the official pretraining head, its
   decoder tied to the word embeddings; bytes as tokens) and saves its
   weights as a ``.weights.h5``;
3. fine-tunes ``fnet_tiny`` on the CSV folder from those weights with
   `keras_fourier.training.train` (what ``keras-fourier train --model
   fnet_tiny --weights pretrained.weights.h5 --data csv:<folder>`` runs): the
   encoder starts from the pretrained weights, the classifier anew, with the
   official fine-tuning recipe ("fnet_finetune": Adam, weight decay 0.01,
   linear warmup over 10% of the steps then linear decay) at the larger
   learning rate the paper found better for small models (1e-3, Section
   4.1), into a run folder (resumable; ``model.keras`` keeps the class names
   and the tokenizer, so ``keras-fourier evaluate`` and ``keras-fourier
   predict --text`` use them);
4. fine-tunes the same model from random weights with the same recipe, and
   prints both test accuracies (three classes: chance is 0.33).

Well under a minute on a 2-core CPU; the test suite runs this very command::

    python examples/finetune_fnet.py --out runs/finetune_fnet
"""

from __future__ import annotations

import argparse
import csv
import os
import time

import keras
import numpy as np

from keras_fourier.data import ByteTokenizer, tokenize_and_pack
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
SEQUENCE_LENGTH = 48
MASKED_PER_SEQUENCE = 6


def sentences(rng: np.random.Generator, count: int) -> list[tuple[str, str]]:
    """`count` (sentence, topic) pairs: an opener, a topic's noun, a closer."""
    topics = list(TOPICS)
    rows = []
    for _ in range(count):
        topic = topics[rng.integers(len(topics))]
        noun = TOPICS[topic][rng.integers(len(TOPICS[topic]))]
        opener = OPENERS[rng.integers(len(OPENERS))]
        closer = CLOSERS[rng.integers(len(CLOSERS))]
        rows.append((f"{opener} {noun} {closer}", topic))
    return rows


def write_data_set(folder: str, rng: np.random.Generator) -> None:
    """train.csv (150 rows), dev.csv (60) and test.csv (150): sentence,label."""
    os.makedirs(folder, exist_ok=True)
    for split, count in (("train", 150), ("dev", 60), ("test", 150)):
        with open(os.path.join(folder, f"{split}.csv"), "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["sentence", "label"])
            writer.writerows(sentences(rng, count))


def masked_lm_data(texts: list[str], rng: np.random.Generator) -> tuple[dict, dict]:
    """Inputs and targets of the masked-LM objective: 6 byte positions per text replaced by
    [MASK] (static masking, chosen once), their original ids the labels."""
    tokenizer = ByteTokenizer()
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


def pretrain(path: str, rng: np.random.Generator, epochs: int) -> float:
    """Pretrains a fnet_tiny-sized FNetPretraining on 4,000 generated sentences; saves its
    weights to `path`; returns its masked-LM accuracy on 500 other sentences."""
    model = FNet(
        TEXT_PRESETS["fnet_tiny"],
        vocabulary_size=ByteTokenizer.vocabulary_size,
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
    corpus = [text for text, _ in sentences(rng, 4000)]
    held_out = masked_lm_data([text for text, _ in sentences(rng, 500)], rng)
    model.fit(*masked_lm_data(corpus, rng), batch_size=64, epochs=epochs, verbose=0)
    metrics = model.evaluate(*held_out, batch_size=250, verbose=0, return_dict=True)
    model.save_weights(path)
    return metrics["masked_lm_logits_accuracy"]


def fine_tune(data: str, out: str, weights: str | None) -> float:
    """Fine-tunes fnet_tiny on `data` (from `weights`, or random); returns the test accuracy."""
    config = TrainConfig(
        model="fnet_tiny",
        data=f"csv:{data}",
        weights=weights,
        recipe="fnet_finetune",
        learning_rate=1e-3,
        epochs=4,
        batch_size=16,
        sequence_length=SEQUENCE_LENGTH,
        out=out,
        tensorboard=False,
        verbose=0,
    )
    return train(config).metrics["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/finetune_fnet", help="folder of everything written")
    parser.add_argument("--pretrain-epochs", type=int, default=3, help="masked-LM epochs")
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    data = os.path.join(args.out, "topics")
    write_data_set(data, rng)
    weights = os.path.join(args.out, "pretrained.weights.h5")
    accuracy = pretrain(weights, rng, args.pretrain_epochs)
    print(f"pretrained: masked-LM accuracy {accuracy:.3f} on held-out sentences -> {weights}")
    finetuned = fine_tune(data, os.path.join(args.out, "from_pretrained"), weights)
    scratch = fine_tune(data, os.path.join(args.out, "from_scratch"), None)
    print(f"fine-tuned from the pretrained weights: test accuracy {finetuned:.3f}")
    print(f"same recipe from random weights: test accuracy {scratch:.3f} (chance 0.333)")
    print(f"done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
