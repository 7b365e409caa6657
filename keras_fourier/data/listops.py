"""ListOps, the Long-Range Arena's hierarchical reasoning task, generated locally.

An example is a nested list expression over the digits 0-9 whose label (10
classes) is its value, e.g. ``"[MAX 2 9 [MIN 4 7 ] 0 ]"`` -> 9. The
operators are MAX, MIN, MED (median, rounded down as in LRA's
``int(np.median(...))``) and SM (sum modulo 10).

The generator follows LRA's (Tay et al., 2021, after Nangia & Bowman, 2018):
below `max_depth`, a node is an operator with probability 0.25 (else a
digit), with 2 to `max_args` arguments; trees whose token count lies in
[`min_length`, `max_length`] are kept, without duplicates. LRA uses
`max_depth=10`, `max_args=10` and lengths 500-2000. Examples are drawn
from Python's `random.Random(seed)`, so a seed always gives the same
examples. Separately seeded sets may overlap, which is negligible at LRA's
lengths but not for very short expressions.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from keras_fourier.data.text import WordTokenizer, text_dataset

LISTOPS_OPERATORS = ("[MAX", "[MIN", "[MED", "[SM")
LISTOPS_VOCABULARY = (*LISTOPS_OPERATORS, "]", *(str(digit) for digit in range(10)))
LISTOPS_NUM_CLASSES = 10
OPERATOR_PROBABILITY = 0.25


def _median(values: list[int]) -> int:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) // 2


_APPLY = {
    "[MAX": max,
    "[MIN": min,
    "[MED": _median,
    "[SM": lambda values: sum(values) % 10,
}


def evaluate_listops(expression: str) -> int:
    """Compute the value of a ListOps expression.

    Tokens are separated by whitespace; parentheses (as in LRA's TSV files)
    are ignored.

    Args:
        expression: e.g. "[MAX 2 9 [MIN 4 7 ] 0 ]".

    Returns:
        The value, an int in 0..9.

    Example:
        >>> evaluate_listops("[SM 5 6 ]")
        1
    """
    stack: list[tuple[str, list[int]]] = []
    result = None
    for token in expression.split():
        if token in ("(", ")"):
            continue
        if result is not None:
            raise ValueError(f"Unexpected token {token!r} after the end of {expression!r}.")
        if token in _APPLY:
            stack.append((token, []))
            continue
        if token == "]":
            if not stack:
                raise ValueError(f"Unbalanced ']' in ListOps expression {expression!r}.")
            operator, arguments = stack.pop()
            if not arguments:
                raise ValueError(f"Operator {operator!r} without arguments in {expression!r}.")
            value = _APPLY[operator](arguments)
        elif token.isdigit() and len(token) == 1:
            value = int(token)
        else:
            raise ValueError(f"Unknown token {token!r} in ListOps expression {expression!r}.")
        if stack:
            stack[-1][1].append(value)
        else:
            result = value
    if stack or result is None:
        raise ValueError(f"Incomplete ListOps expression {expression!r}.")
    return result


class _TooLong(Exception):
    pass


def _max_tree_length(max_depth: int, max_args: int) -> int:
    length = 1
    for _ in range(max_depth - 1):
        length = 2 + max_args * length
    return length


def generate_listops(
    num_examples: int,
    *,
    min_length: int = 500,
    max_length: int = 2000,
    max_depth: int = 10,
    max_args: int = 10,
    seed: int = 0,
) -> tuple[list[str], np.ndarray]:
    """Generate unique ListOps expressions and their values.

    Args:
        num_examples: how many examples.
        min_length: fewest tokens per expression. Default 500.
        max_length: most tokens per expression. Default 2000.
        max_depth: deepest nesting; the root is depth 1. Default 10.
        max_args: most arguments per operator (at least 2). Default 10.
        seed: random seed. Default 0.

    Returns:
        (expressions, labels): the expressions as space-separated token
        strings and their int32 values.

    Example:
        >>> texts, labels = generate_listops(3, min_length=5, max_length=30, seed=1)
        >>> [evaluate_listops(text) for text in texts] == labels.tolist()
        True
    """
    if not 1 <= min_length <= max_length:
        raise ValueError(
            f"Need 1 <= min_length <= max_length; received min_length={min_length!r}, "
            f"max_length={max_length!r}."
        )
    if max_depth < 1 or max_args < 2:
        raise ValueError(
            f"Need max_depth >= 1 and max_args >= 2; received max_depth={max_depth!r}, "
            f"max_args={max_args!r}."
        )
    longest = _max_tree_length(max_depth, max_args)
    if min_length > longest:
        raise ValueError(
            f"min_length={min_length!r} exceeds the longest possible expression ({longest} "
            f"tokens) with max_depth={max_depth!r} and max_args={max_args!r}."
        )
    rng = random.Random(seed)

    def tree(depth: int, tokens: list[str]) -> int:
        if depth >= max_depth or rng.random() > OPERATOR_PROBABILITY:
            value = rng.randrange(10)
            tokens.append(str(value))
        else:
            operator = rng.choice(LISTOPS_OPERATORS)
            tokens.append(operator)
            values = [tree(depth + 1, tokens) for _ in range(rng.randint(2, max_args))]
            tokens.append("]")
            value = _APPLY[operator](values)
        if len(tokens) > max_length:
            raise _TooLong
        return value

    examples: dict[str, int] = {}
    attempts = 0
    max_attempts = 1000 * num_examples + 100_000
    while len(examples) < num_examples:
        attempts += 1
        if attempts > max_attempts:
            raise ValueError(
                f"Found only {len(examples)} of {num_examples} distinct ListOps expressions "
                f"with {min_length}-{max_length} tokens in {max_attempts} attempts; widen "
                "the length range or ask for fewer examples."
            )
        tokens: list[str] = []
        try:
            value = tree(1, tokens)
        except _TooLong:
            continue
        if len(tokens) >= min_length:
            examples.setdefault(" ".join(tokens), value)
    return list(examples), np.fromiter(examples.values(), dtype=np.int32, count=num_examples)


def listops_dataset(
    num_examples: int,
    *,
    min_length: int = 500,
    max_length: int = 2000,
    max_depth: int = 10,
    max_args: int = 10,
    seed: int = 0,
    tokenizer: Callable | None = None,
    sequence_length: int | None = None,
    batch_size: int = 32,
    training: bool = False,
) -> tf.data.Dataset:
    """Generate ListOps and build its FNet text pipeline.

    Args:
        num_examples: how many examples (LRA: 96,000 train, 2,000 validation,
            2,000 test; use a different `seed` per split).
        min_length: see `generate_listops`. Default 500.
        max_length: see `generate_listops`. Default 2000.
        max_depth: see `generate_listops`. Default 10.
        max_args: see `generate_listops`. Default 10.
        seed: generation and shuffle seed. Default 0.
        tokenizer: default None: `WordTokenizer(LISTOPS_VOCABULARY)`, one id
            per ListOps token (vocabulary size 20).
        sequence_length: default None: `max_length + 2`, room for every
            token plus [CLS] and [SEP] with the default tokenizer.
        batch_size: batch size. Default 32.
        training: shuffle every epoch and drop the last partial batch. Default False.

    Returns:
        A `tf.data.Dataset` of ({"token_ids", "segment_ids", "padding_mask"},
        int32 label) batches, 10 classes.

    Example:
        >>> ds = listops_dataset(8, min_length=5, max_length=30, batch_size=4)
        >>> features, labels = next(iter(ds))
        >>> features["token_ids"].shape
        TensorShape([4, 32])
    """
    texts, labels = generate_listops(
        num_examples,
        min_length=min_length,
        max_length=max_length,
        max_depth=max_depth,
        max_args=max_args,
        seed=seed,
    )
    return text_dataset(
        texts,
        labels,
        tokenizer=WordTokenizer(LISTOPS_VOCABULARY) if tokenizer is None else tokenizer,
        sequence_length=max_length + 2 if sequence_length is None else sequence_length,
        batch_size=batch_size,
        training=training,
        seed=seed,
    )


# The held-out ListOps set of `keras-fourier train` is generated with this fixed seed;
# training examples equal to a held-out one are dropped.
LISTOPS_EVAL_SEED = 1_000_003
LISTOPS_VALIDATION_SEED = 1_000_033
LISTOPS_HELD_OUT_SPLITS = ("validation", "test")


def _classifier_examples(sequence_length: int, num_examples: int, seed: int):
    max_length = sequence_length - 2
    return generate_listops(
        num_examples, min_length=max(1, max_length // 4), max_length=max_length, seed=seed
    )


def _one_hot_dataset(texts, labels, sequence_length: int, batch_size: int, **options):
    dataset = text_dataset(
        texts,
        labels,
        tokenizer=WordTokenizer(LISTOPS_VOCABULARY),
        sequence_length=sequence_length,
        batch_size=batch_size,
        **options,
    )
    return dataset.map(lambda features, labels: (features, tf.one_hot(labels, LISTOPS_NUM_CLASSES)))


def _held_out(sequence_length: int, num_examples: int, split: str):
    """The validation or test examples; validation drops any expression also in test."""
    if split not in LISTOPS_HELD_OUT_SPLITS:
        raise ValueError(
            f"Unknown ListOps split {split!r}; expected one of {LISTOPS_HELD_OUT_SPLITS}."
        )
    test = _classifier_examples(sequence_length, num_examples, LISTOPS_EVAL_SEED)
    if split == "test":
        return test
    in_test = set(test[0])
    texts, labels = _classifier_examples(sequence_length, num_examples, LISTOPS_VALIDATION_SEED)
    keep = [index for index, text in enumerate(texts) if text not in in_test]
    return [texts[index] for index in keep], labels[keep]


def listops_eval_dataset(
    sequence_length: int = 128,
    num_examples: int = 500,
    batch_size: int = 256,
    split: str = "test",
    *,
    padding: str = "fixed",
) -> tf.data.Dataset:
    """A held-out ListOps set of training, generated with a fixed seed, with one-hot labels.

    Expressions have between (sequence_length - 2) // 4 and
    sequence_length - 2 tokens (room for [CLS] and [SEP]). The validation
    and test sets come from different seeds; validation drops any expression
    that is also a test one.

    Args:
        sequence_length: the model's static sequence length. Default 128.
        num_examples: number of examples generated. Default 500.
        batch_size: global batch size. Default 256.
        split: "validation" (selects the best epoch) or "test" (reported
            once). Default "test".
        padding: "fixed" (default), or "batch": each batch padded to its
            longest expression, for a model of any length.

    Returns:
        A `tf.data.Dataset` of ({"token_ids", "segment_ids", "padding_mask"},
        (B, 10) one-hot) batches.

    Example:
        >>> features, labels = next(iter(listops_eval_dataset(32, 8, batch_size=4)))
        >>> features["token_ids"].shape, labels.shape
        (TensorShape([4, 32]), TensorShape([4, 10]))
    """
    texts, labels = _held_out(sequence_length, num_examples, split)
    return _one_hot_dataset(texts, labels, sequence_length, batch_size, padding=padding)


def listops_train_dataset(
    sequence_length: int = 128,
    num_examples: int = 4000,
    *,
    eval_examples: int = 500,
    batch_size: int = 64,
    seed: int = 0,
    padding: str = "fixed",
    bucket_boundaries: Sequence[int] | None = None,
) -> tf.data.Dataset:
    """ListOps training examples in neither held-out set of `listops_eval_dataset`, one-hot.

    Args:
        sequence_length: the model's static sequence length. Default 128.
        num_examples: examples generated (those equal to a held-out one are
            dropped). Default 4000.
        eval_examples: size of the held-out sets to exclude. Default 500.
        batch_size: global batch size. Default 64.
        seed: generation and shuffle seed. Default 0.
        padding: "fixed" (default), or "batch": each batch padded to its
            longest expression, for a model of any length.
        bucket_boundaries: with ``padding="batch"``, lengths grouping the
            expressions into buckets (`keras_fourier.data.text_dataset`).
            Default None.

    Returns:
        A shuffled `tf.data.Dataset` of (features, (B, 10) one-hot) batches,
        the last partial batch dropped.

    Example:
        >>> features, labels = next(iter(listops_train_dataset(32, 64, eval_examples=8,
        ...                                                    batch_size=4)))
        >>> labels.shape
        TensorShape([4, 10])
    """
    held_out = {
        text
        for split in LISTOPS_HELD_OUT_SPLITS
        for text in _held_out(sequence_length, eval_examples, split)[0]
    }
    texts, labels = _classifier_examples(sequence_length, num_examples, seed)
    keep = [index for index, text in enumerate(texts) if text not in held_out]
    return _one_hot_dataset(
        [texts[index] for index in keep],
        labels[keep],
        sequence_length,
        batch_size,
        training=True,
        seed=seed,
        padding=padding,
        bucket_boundaries=bucket_boundaries,
    )
