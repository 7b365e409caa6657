"""Text classification data from CSV and TSV files: the ``csv:<path>`` source.

``csv:<path>`` is a file or a folder of split files, read with Python's
`csv` module (``.csv``: comma-separated, quoted as Excel writes it;
``.tsv``: tab-separated without quoting, as GLUE ships its files):

* ``csv:<file>.csv`` (or ``.tsv``): one file, split as ``dir:`` image
  folders are: within each class, in file order, every fifth row is split
  ``"test"``, every tenth (rows 3, 13, 23, ...) split ``"validation"`` and
  the rest ``"train"``.
* ``csv:<folder>``: split files ``<folder>/<split>.csv`` (or ``.tsv``);
  split ``"validation"`` is ``validation.csv`` or, as GLUE names it,
  ``dev.csv``/``dev.tsv``. Without a validation file, split
  ``"validation"`` is every tenth row of each class of the train file (in
  file order) and ``"train"`` the rest. The splits ``"<name>[held-out]"``
  and ``"<name>[held-in]"`` are the same cut of any split file: training
  selects its epochs on ``"train[held-out]"`` when the test split is the
  validation file (GLUE's test files have no labels:
  ``--eval-split validation`` reports on ``dev.tsv``).

The first line of a file names its columns:

* the text: ``text``, ``sentence`` or ``sentence1`` (exactly one of them);
* optionally a second text of a sentence pair: ``text_pair`` or
  ``sentence2``, packed as ``[CLS] text [SEP] pair [SEP]`` with segment ids
  0 and 1;
* ``label``: the class, any string (``0``/``1``, ``positive``, ...). The
  class names are the sorted labels of the train split (numerically when
  every label is an integer); label ``i`` of the model is ``class_names[i]``.

Other columns (``idx``, ``index``, ...) are ignored. Data that cannot make
sense is refused with one line naming the file, the line or the column: a
missing text or label column, a row with too few or too many fields, an
empty split, a train split with one class, or a label of another split
that the train split does not have.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import os
import re
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from keras_fourier.data.images import _held_out, _rank_in_class
from keras_fourier.data.text import text_dataset
from keras_fourier.validation import listed

PREFIX = "csv:"
EXTENSIONS = (".csv", ".tsv")
TEXT_COLUMNS = ("text", "sentence", "sentence1")
PAIR_COLUMNS = ("text_pair", "sentence2")
LABEL_COLUMN = "label"
# File stems of each split; any other split name is its own stem.
SPLIT_STEMS = {"validation": ("validation", "dev")}
CARVED_SPLITS = ("train", "validation", "test")
_CUT = re.compile(r"(?P<split>.+)\[(?P<part>held-in|held-out)\]")


def is_text_source(source: object) -> bool:
    """Whether `source` names a CSV/TSV text source (``"csv:<path>"``).

    Example:
        >>> is_text_source("csv:data/sst2"), is_text_source("digits")
        (True, False)
    """
    return isinstance(source, str) and source.startswith(PREFIX) and len(source) > len(PREFIX)


def _path(source: str) -> str:
    if not is_text_source(source):
        raise ValueError(f"Unknown text data source {source!r}; expected 'csv:<path>'.")
    path = source[len(PREFIX) :]
    if os.path.isfile(path):
        if not path.lower().endswith(EXTENSIONS):
            raise ValueError(
                f"Text source {source!r}: {path!r} must be a .csv or .tsv file, or a folder of "
                "split files."
            )
        return path
    if not os.path.isdir(path):
        raise ValueError(f"Text source {source!r}: no file or folder at {path!r}.")
    return path


def _split_file(folder: str, split: str) -> str | None:
    for stem in SPLIT_STEMS.get(split, (split,)):
        for extension in EXTENSIONS:
            path = os.path.join(folder, stem + extension)
            if os.path.isfile(path):
                return path
    return None


def _locate(source: str, split: str) -> tuple[str, str | None]:
    """The file of a split, and which rows of it: None (all), or a cut of `_held_out`.

    The cut is "train", "validation" or "test" (the three-way cut of a
    single file), "held-out" (every tenth row of each class) or "held-in"
    (the other rows).
    """
    path = _path(source)
    if os.path.isfile(path):
        if split not in CARVED_SPLITS:
            raise ValueError(
                f"Unknown split {split!r} of text source {source!r}: a single file has the "
                f"splits {CARVED_SPLITS}."
            )
        return path, split
    cut = _CUT.fullmatch(split)
    name = cut["split"] if cut else split
    has_validation = _split_file(path, "validation") is not None
    if not cut and name in ("train", "validation") and not has_validation:
        name, part = "train", ("held-in" if name == "train" else "held-out")
    else:
        part = cut["part"] if cut else None
    file = _split_file(path, name)
    if file is None:
        present = sorted(
            entry for entry in os.listdir(path) if entry.lower().endswith(EXTENSIONS)
        ) or ["none"]
        stems = " or ".join(SPLIT_STEMS.get(name, (name,)))
        raise ValueError(
            f"Text source {source!r} has no split {split!r}: no {stems}.csv or .tsv file in "
            f"{path!r} (split files there: {', '.join(present)})."
        )
    return file, part


@dataclasses.dataclass(frozen=True)
class TextRows:
    """The examples of one split of a text source.

    Attributes:
        file: the file they come from.
        texts: the (first) texts.
        pairs: the second texts of sentence pairs, or None.
        labels: the labels as written in the file.
        lines: the line number of each example in `file`.
    """

    file: str
    texts: tuple[str, ...]
    pairs: tuple[str, ...] | None
    labels: tuple[str, ...]
    lines: tuple[int, ...]


def _column(file: str, fields: Sequence[str], choices: Sequence[str], what: str) -> str | None:
    present = [name for name in choices if name in fields]
    if len(present) > 1:
        raise ValueError(
            f"{file!r} has more than one {what} column ({', '.join(present)}): keep one."
        )
    return present[0] if present else None


@functools.lru_cache(maxsize=16)
def _read_file(file: str, modified: int, size: int) -> TextRows:
    del modified, size  # part of the cache key: a rewritten file is read again
    tsv = file.lower().endswith(".tsv")
    options = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if tsv else {}
    try:
        with open(file, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle, **options)
            fields = [name.strip() for name in reader.fieldnames or []]
            reader.fieldnames = fields
            columns = {}
            for role, choices in (("text", TEXT_COLUMNS), ("pair", PAIR_COLUMNS)):
                columns[role] = _column(file, fields, choices, role)
            if columns["text"] is None or LABEL_COLUMN not in fields:
                missing = " and ".join(
                    text
                    for text, absent in (
                        (f"text column ({', '.join(TEXT_COLUMNS)})", columns["text"] is None),
                        (f"{LABEL_COLUMN!r} column", LABEL_COLUMN not in fields),
                    )
                    if absent
                )
                raise ValueError(
                    f"{file!r} has no {missing}; its first line names the columns "
                    f"{', '.join(fields) or '(none: the file is empty)'}."
                )
            texts, pairs, labels, lines = [], [], [], []
            for row in reader:
                if None in row or any(value is None for value in row.values()):
                    got = len(fields) + len(row.get(None) or ()) - list(row.values()).count(None)
                    raise ValueError(
                        f"Line {reader.line_num} of {file!r} has {got} fields, its header "
                        f"{len(fields)} ({', '.join(fields)})."
                    )
                label = row[LABEL_COLUMN].strip()
                if not label:
                    raise ValueError(f"Line {reader.line_num} of {file!r} has an empty label.")
                texts.append(row[columns["text"]])
                if columns["pair"] is not None:
                    pairs.append(row[columns["pair"]])
                labels.append(label)
                lines.append(reader.line_num)
    except UnicodeDecodeError as error:
        raise ValueError(f"{file!r} is not UTF-8 text: {error}") from None
    except csv.Error as error:
        raise ValueError(f"{file!r} is not a readable CSV/TSV file: {error}") from None
    return TextRows(
        file,
        tuple(texts),
        tuple(pairs) if columns["pair"] is not None else None,
        tuple(labels),
        tuple(lines),
    )


def read_text_split(source: str, split: str) -> TextRows:
    """The examples of split `split` of a ``csv:`` source (see the module docstring).

    Args:
        source: ``"csv:<file or folder>"``.
        split: "train", "validation", "test", another split file's name, or
            ``"<split>[held-in]"``/``"<split>[held-out]"``.

    Returns:
        The split's :class:`TextRows`, in file order.

    Raises:
        ValueError: naming the file, line or column: a missing path or split
            file, a missing column, a malformed row, or an empty split.

    Example:
        >>> read_text_split("csv:reviews.csv", "train").labels[:2]  # doctest: +SKIP
        ('positive', 'negative')
    """
    file, part = _locate(source, split)
    stat = os.stat(file)
    rows = _read_file(file, stat.st_mtime_ns, stat.st_size)
    if part is not None:
        labels = np.asarray(rows.labels)
        rank = _rank_in_class(labels)
        if part in CARVED_SPLITS:
            keep = _held_out(rank, part, with_test=True)
        else:
            keep = _held_out(rank, "validation", with_test=False)
            keep = keep if part == "held-out" else ~keep

        def select(values):
            return tuple(value for value, kept in zip(values, keep, strict=True) if kept)

        rows = TextRows(
            rows.file,
            select(rows.texts),
            None if rows.pairs is None else select(rows.pairs),
            select(rows.labels),
            select(rows.lines),
        )
    if not rows.labels:
        where = f"{rows.file!r}" + ("" if part is None else f" ({part} rows)")
        raise ValueError(f"Split {split!r} of text source {source!r} has no examples: {where}.")
    return rows


def _label_order(label: str) -> tuple:
    try:
        return (0, int(label), label)
    except ValueError:
        return (1, 0, label)


def text_class_names(source: str) -> list[str]:
    """The class names of a ``csv:`` source: the sorted labels of its train split.

    Integers sort numerically ("2" before "10") when every label is one.

    Raises:
        ValueError: the train split cannot be read or has a single class.

    Example:
        >>> text_class_names("csv:reviews.csv")  # doctest: +SKIP
        ['negative', 'positive']
    """
    rows = read_text_split(source, "train")
    labels = set(rows.labels)
    numeric = all(_label_order(label)[0] == 0 for label in labels)
    names = sorted(labels, key=_label_order if numeric else None)
    if len(names) < 2:
        raise ValueError(
            f"The train split of text source {source!r} ({rows.file!r}) has a single class "
            f"{names[0]!r}: a classifier needs two or more."
        )
    return names


def text_label_ids(
    rows: TextRows, class_names: Sequence[str], source: str, split: str
) -> np.ndarray:
    """The class ids of a split's labels.

    Raises:
        ValueError: a label that is not a class, naming it and its line.
    """
    index = {name: position for position, name in enumerate(class_names)}
    for label, line in zip(rows.labels, rows.lines, strict=True):
        if label not in index:
            raise ValueError(
                f"Label {label!r} on line {line} of {rows.file!r} (split {split!r} of "
                f"{source!r}) is not one of the {len(class_names):,} classes "
                f"{listed(class_names)} of the model's training data."
            )
    return np.asarray([index[label] for label in rows.labels], dtype=np.int32)


def text_training_splits(source: str, test_split: str = "test") -> tuple[str, str]:
    """The train and validation splits of a ``csv:`` source that leave `test_split` unseen.

    Args:
        source: ``"csv:<path>"``.
        test_split: the split reported once at the end. Default "test".

    Returns:
        ("train", "validation"), or ("train[held-in]", "train[held-out]")
        for a folder whose test split is its validation file.

    Raises:
        ValueError: the test split would also be the train or validation split.

    Example:
        >>> text_training_splits("csv:glue/sst2", "validation")  # doctest: +SKIP
        ('train[held-in]', 'train[held-out]')
    """
    path = _path(source)
    splits = ("train", "validation")
    if os.path.isdir(path):
        validation = _split_file(path, "validation")
        if validation is not None and _locate(source, test_split) == (validation, None):
            splits = ("train[held-in]", "train[held-out]")
    if test_split in splits:
        raise ValueError(
            f"The test split {test_split!r} of text source {source!r} is also its "
            f"{'train' if test_split == splits[0] else 'validation'} split; pick another "
            "test split."
        )
    return splits


def text_split_dataset(
    source: str,
    split: str,
    *,
    tokenizer: Callable,
    class_names: Sequence[str],
    sequence_length: int,
    batch_size: int,
    training: bool = False,
    seed: int = 0,
    padding: str = "fixed",
    bucket_boundaries: Sequence[int] | None = None,
) -> tf.data.Dataset:
    """Batches of a ``csv:`` split: (FNet inputs, one-hot labels).

    Args:
        source: ``"csv:<path>"``.
        split: see :func:`read_text_split`.
        tokenizer: the tokenizer (see `keras_fourier.data.tokenize_and_pack`).
        class_names: the model's classes, in label order.
        sequence_length: the model's static input length (with
            ``padding="batch"``, the longest).
        batch_size: batch size.
        training: shuffle every epoch (seeded) and drop the last partial
            batch. Default False.
        seed: shuffle seed. Default 0.
        padding: "fixed" (default) or "batch" (each batch padded to its
            longest text); see `keras_fourier.data.text_dataset`.
        bucket_boundaries: with ``padding="batch"``, lengths grouping the
            texts into buckets; see `keras_fourier.data.text_dataset`.
            Default None.

    Returns:
        A `tf.data.Dataset` of ({"token_ids", "segment_ids", "padding_mask"},
        float32 one-hot labels (B, len(class_names))).

    Raises:
        ValueError: see :func:`read_text_split` and :func:`text_label_ids`;
            a training split smaller than one batch.
    """
    rows = read_text_split(source, split)
    labels = text_label_ids(rows, class_names, source, split)
    if training and len(labels) < batch_size:
        raise ValueError(
            f"Split {split!r} of text source {source!r} has {len(labels)} examples, fewer than "
            f"one batch of {batch_size}, and training drops partial batches: lower the batch "
            f"size to at most {len(labels)} or add examples."
        )
    dataset = text_dataset(
        rows.texts,
        labels,
        text_pairs=rows.pairs,
        tokenizer=tokenizer,
        sequence_length=sequence_length,
        batch_size=batch_size,
        training=training,
        seed=seed,
        padding=padding,
        bucket_boundaries=bucket_boundaries,
    )
    num_classes = len(class_names)
    return dataset.map(
        lambda features, label: (features, tf.one_hot(label, num_classes)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
