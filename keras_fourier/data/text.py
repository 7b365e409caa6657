"""Text classification input pipelines for the FNet models.

Batches are ({"token_ids", "segment_ids", "padding_mask"}, label) with a
fixed sequence length: ``[CLS] tokens [SEP]`` (or ``[CLS] a [SEP] b [SEP]``
for sentence pairs) right-padded with the pad id. token_ids and segment_ids
are int32 (segment 0 for the first sentence with its [CLS] and [SEP], 1 for
the second), padding_mask is int32 (1 on real tokens, 0 on padding), as
the `keras_fourier.models` FNet inputs expect (an FNet built with the
default ``use_padding_mask=False`` takes no ``padding_mask``:
`select_model_inputs` keeps only a model's inputs). Labels are int32:
train with `keras.losses.SparseCategoricalCrossentropy`.

Any tokenizer works that, called on a 1-D string tensor inside `tf.data`,
returns int token ids as a `tf.RaggedTensor` (B, None) or a dense (B, T)
tensor right-padded with the pad id: `SentencePieceTokenizer` (the official
FNet vocabulary), `ByteTokenizer`, `WordTokenizer`, keras-hub tokenizers, or
`keras.layers.TextVectorization(ragged=True)`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_fourier.limits import read_file_bounded
from keras_fourier.settings import TEXT_PADDINGS
from keras_fourier.validation import check_choice
from keras_fourier.weights import download

AUTOTUNE = tf.data.AUTOTUNE


class ByteTokenizer:
    """UTF-8 byte tokenizer with BERT-style special tokens.

    Ids: [PAD]=0, [CLS]=1, [SEP]=2, [MASK]=3, and byte b -> b + 4, so the
    vocabulary size is 260. No text is ever out of vocabulary.

    Example:
        >>> tokenizer = ByteTokenizer()
        >>> tokenizer(tf.constant(["hi", "é"])).to_list()
        [[108, 109], [199, 173]]
    """

    pad_id = 0
    cls_id = 1
    sep_id = 2
    mask_id = 3
    num_special_tokens = 4
    vocabulary_size = 256 + num_special_tokens

    def __call__(self, texts: tf.Tensor | str | Sequence[str]) -> tf.Tensor | tf.RaggedTensor:
        """Tokenize a string or a batch of strings.

        Args:
            texts: a scalar string or a 1-D batch of strings.

        Returns:
            int32 ids: (L,) for a scalar, a `tf.RaggedTensor` (B, None) for a batch.
        """
        byte_strings = tf.strings.bytes_split(tf.convert_to_tensor(texts, tf.string))

        def to_ids(flat: tf.Tensor) -> tf.Tensor:
            values = tf.reshape(tf.io.decode_raw(flat, tf.uint8), [-1])
            return tf.cast(values, "int32") + self.num_special_tokens

        if isinstance(byte_strings, tf.RaggedTensor):
            return tf.ragged.map_flat_values(to_ids, byte_strings)
        return to_ids(byte_strings)


class WordTokenizer:
    """Whitespace tokenizer over a fixed vocabulary, built on `keras.layers.StringLookup`.

    Ids: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, then the vocabulary
    in order from 5; `vocabulary_size` is `len(vocabulary) + 5`.

    Args:
        vocabulary: the tokens, without special tokens.

    Example:
        >>> tokenizer = WordTokenizer(["a", "b"])
        >>> tokenizer(tf.constant(["a b c"])).to_list()
        [[5, 6, 1]]
    """

    pad_id = 0
    unk_id = 1
    cls_id = 2
    sep_id = 3
    mask_id = 4

    def __init__(self, vocabulary: Sequence[str]):
        self._lookup = keras.layers.StringLookup(
            vocabulary=["[CLS]", "[SEP]", "[MASK]", *vocabulary],
            mask_token="[PAD]",
            oov_token="[UNK]",
        )
        self.vocabulary_size = self._lookup.vocabulary_size()

    def __call__(self, texts: tf.Tensor | str | Sequence[str]) -> tf.Tensor | tf.RaggedTensor:
        """Tokenize a string or a batch of strings.

        Args:
            texts: a scalar string or a 1-D batch of strings.

        Returns:
            int ids: (L,) for a scalar, a `tf.RaggedTensor` (B, None) for a batch.
        """
        return self._lookup(tf.strings.split(tf.convert_to_tensor(texts, tf.string)))


# The official FNet vocabulary: 32,000 pieces (google-research f_net/README.md).
OFFICIAL_SENTENCEPIECE_URL = (
    "https://storage.googleapis.com/gresearch/f_net/vocab/c4_bpe_sentencepiece.model"
)
OFFICIAL_SENTENCEPIECE_FILE = "c4_bpe_sentencepiece.model"
OFFICIAL_VOCABULARY_SIZE = 32000
# The tokenizers `load_tokenizer` knows by name; any other name is a SentencePiece `.model` path.
BYTES_TOKENIZER = "bytes"
OFFICIAL_TOKENIZER = "official"
TOKENIZER_NAMES = (BYTES_TOKENIZER, OFFICIAL_TOKENIZER)
# Largest SentencePiece model file read (the official one has 0.8 MB; large multilingual
# vocabularies a few MB): a larger file is refused before it is read.
MAX_TOKENIZER_BYTES = 64 * 2**20


class SentencePieceTokenizer:
    """A SentencePiece model as a tokenizer that runs inside `tf.data`.

    Encodes with the `sentencepiece` package (the library the official FNet
    code uses, so the ids are the official ones) through
    `tf.numpy_function`. The special ids are found as the official code
    finds them: ``cls_id``, ``sep_id`` and ``mask_id`` are the ids of the
    pieces ``[CLS]``, ``[SEP]`` and ``[MASK]`` (``PieceToId``), ``pad_id``
    the model's pad id (``pad_id()``). Install it with
    ``pip install keras-fourier[text]``.

    The op is a Python function: it runs in `tf.data` (on the host, holding
    the GIL while it encodes a batch) but is not part of an exported
    SavedModel; tokenize before serving.

    Args:
        model: the ``.model`` file (a path) or its bytes, e.g.
            ``c4_bpe_sentencepiece.model`` (:data:`OFFICIAL_SENTENCEPIECE_URL`).

    Attributes:
        vocabulary_size: the number of pieces.
        cls_id, sep_id, mask_id, pad_id: the special ids.
        proto: the model's serialized bytes (what a run stores in its
            ``model.keras``, see :func:`tokenizer_record`).

    Raises:
        ImportError: the `sentencepiece` package is not installed.
        ValueError: the model cannot be read, is larger than
            :data:`MAX_TOKENIZER_BYTES`, or lacks one of the pieces
            ``[CLS]``, ``[SEP]``, ``[MASK]`` or a pad id.

    Example:
        >>> tokenizer = SentencePieceTokenizer("c4_bpe_sentencepiece.model")  # doctest: +SKIP
        >>> tokenizer.vocabulary_size  # doctest: +SKIP
        32000
    """

    def __init__(self, model: str | os.PathLike | bytes):
        try:
            import sentencepiece
        except ImportError as error:
            raise ImportError(
                "SentencePieceTokenizer needs the `sentencepiece` package: "
                "pip install 'keras-fourier[text]'."
            ) from error
        if isinstance(model, bytes):
            proto, source = model, "the model bytes"
        else:
            source = os.fspath(model)
            try:
                proto = read_file_bounded(source, MAX_TOKENIZER_BYTES, "The SentencePiece model")
            except OSError as error:
                raise ValueError(
                    f"Cannot read the SentencePiece model {source!r}: {error}"
                ) from error
        self.proto = bytes(proto)
        self._processor = sentencepiece.SentencePieceProcessor()
        try:
            self._processor.LoadFromSerializedProto(proto)
        except (RuntimeError, OSError) as error:
            raise ValueError(f"{source} is not a SentencePiece model: {error}") from error
        self.vocabulary_size = self._processor.GetPieceSize()
        unk = self._processor.unk_id()
        ids = {}
        for name, piece in (("cls_id", "[CLS]"), ("sep_id", "[SEP]"), ("mask_id", "[MASK]")):
            ids[name] = self._processor.PieceToId(piece)
            if ids[name] == unk:
                raise ValueError(f"The SentencePiece model {source} has no {piece} piece.")
        self.cls_id, self.sep_id, self.mask_id = ids["cls_id"], ids["sep_id"], ids["mask_id"]
        self.pad_id = self._processor.pad_id()
        if self.pad_id < 0:
            raise ValueError(f"The SentencePiece model {source} has no pad id.")

    def _encode(self, texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pieces = self._processor.Encode([text.decode("utf-8") for text in texts.tolist()])
        lengths = np.array([len(ids) for ids in pieces], dtype=np.int64)
        values = np.fromiter((i for ids in pieces for i in ids), np.int32, int(lengths.sum()))
        return values, lengths

    def __call__(self, texts: tf.Tensor | str | Sequence[str]) -> tf.Tensor | tf.RaggedTensor:
        """Tokenize a string or a batch of strings.

        Args:
            texts: a scalar string or a 1-D batch of strings.

        Returns:
            int32 ids: (L,) for a scalar, a `tf.RaggedTensor` (B, None) for a batch.
        """
        texts = tf.convert_to_tensor(texts, tf.string)
        values, lengths = tf.numpy_function(
            self._encode, [tf.reshape(texts, [-1])], [tf.int32, tf.int64], stateful=False
        )
        values.set_shape([None])
        lengths.set_shape([None])
        ragged = tf.RaggedTensor.from_row_lengths(values, lengths)
        return ragged[0] if texts.shape.rank == 0 else ragged


def official_sentencepiece_model() -> str:
    """The official FNet SentencePiece model, downloaded once into the Keras cache.

    ``c4_bpe_sentencepiece.model`` (32,000 pieces, :data:`OFFICIAL_SENTENCEPIECE_URL`)
    is fetched the first time with a progress bar, whole, bounded and checked
    to be a SentencePiece model, or not at all, into
    ``$KERAS_HOME/keras_fourier`` (from ``$KERAS_FOURIER_MIRROR`` when set), as
    the pretrained weights are (:func:`keras_fourier.weights.download.download`);
    later calls return the cached file offline (downloaded again, with one
    warning line, if it was damaged).

    Returns:
        The path of the cached ``.model`` file.

    Raises:
        ValueError: the download failed; nothing was kept, and the message
            says how to work offline.

    Example:
        >>> SentencePieceTokenizer(official_sentencepiece_model()).vocabulary_size  # doctest: +SKIP
        32000
    """
    try:
        return download.download(
            OFFICIAL_SENTENCEPIECE_URL,
            OFFICIAL_SENTENCEPIECE_FILE,
            max_size=MAX_TOKENIZER_BYTES,  # the most a tokenizer file may have, not 4 GiB
            file_format="sentencepiece",
        )
    except download.DownloadError as error:
        raise download.DownloadError(
            f"The official FNet vocabulary needs network access the first time. {error} "
            "A downloaded .model file can also be passed as the tokenizer "
            "(--tokenizer PATH)."
        ) from error


def _check_tokenizer_spec(spec: Any) -> str:
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str) or not (spec in TOKENIZER_NAMES or os.path.isfile(spec)):
        raise ValueError(
            f"`tokenizer` must be one of {TOKENIZER_NAMES} or the path of a SentencePiece "
            f".model file. Received: tokenizer={spec!r}"
        )
    return spec


@functools.lru_cache(maxsize=8)
def _sentencepiece_file(path: str, modified: int) -> SentencePieceTokenizer:
    del modified  # part of the cache key: a rewritten file is read again
    return SentencePieceTokenizer(path)


def load_tokenizer(spec: str | os.PathLike) -> ByteTokenizer | SentencePieceTokenizer:
    """The tokenizer a name or a path stands for.

    Args:
        spec: "bytes" (:class:`ByteTokenizer`), "official" (the official FNet
            vocabulary, :func:`official_sentencepiece_model`, downloaded once),
            or the path of a SentencePiece ``.model`` file.

    Returns:
        The tokenizer.

    Raises:
        ValueError: an unknown name or a missing or unreadable file, naming it.

    Example:
        >>> load_tokenizer("bytes").vocabulary_size
        260
    """
    spec = _check_tokenizer_spec(spec)
    if spec == BYTES_TOKENIZER:
        return ByteTokenizer()
    if spec != OFFICIAL_TOKENIZER:
        return _sentencepiece_file(spec, os.stat(spec).st_mtime_ns)
    path = official_sentencepiece_model()
    try:
        return _sentencepiece_file(path, os.stat(path).st_mtime_ns)
    except ValueError as error:
        download.discard(path, str(error))
    path = official_sentencepiece_model()
    try:
        return _sentencepiece_file(path, os.stat(path).st_mtime_ns)
    except ValueError as error:
        os.remove(path)
        raise ValueError(
            f"The official FNet vocabulary, downloaded again into the cache "
            f"{os.path.dirname(path)!r}, cannot be read ({error}); it was not kept."
        ) from error


def tokenizer_vocabulary_size(spec: str | os.PathLike) -> int:
    """The number of ids of a tokenizer (see :func:`load_tokenizer`), without downloading.

    Example:
        >>> tokenizer_vocabulary_size("bytes"), tokenizer_vocabulary_size("official")
        (260, 32000)
    """
    spec = _check_tokenizer_spec(spec)
    if spec == OFFICIAL_TOKENIZER:
        return OFFICIAL_VOCABULARY_SIZE
    return load_tokenizer(spec).vocabulary_size


def tokenizer_record(spec: str | os.PathLike) -> dict[str, Any]:
    """A JSON record of a tokenizer from which :func:`tokenizer_from_record` rebuilds it.

    A run stores it in its ``model.keras`` so that `evaluate` and `predict`
    tokenize as training did, also for a file moved to another machine: a
    SentencePiece model is stored whole (its serialized proto, base64).

    Args:
        spec: see :func:`load_tokenizer`.

    Returns:
        ``{"name": spec}`` for "bytes"; for SentencePiece models also
        ``"vocabulary_size"``, ``"sha256"`` and ``"sentencepiece_model"``.

    Example:
        >>> tokenizer_record("bytes")
        {'name': 'bytes'}
    """
    spec = _check_tokenizer_spec(spec)
    if spec == BYTES_TOKENIZER:
        return {"name": spec}
    tokenizer = load_tokenizer(spec)
    return {
        "name": spec,
        "vocabulary_size": tokenizer.vocabulary_size,
        "sha256": hashlib.sha256(tokenizer.proto).hexdigest(),
        "sentencepiece_model": base64.b64encode(tokenizer.proto).decode("ascii"),
    }


def tokenizer_from_record(record: Mapping[str, Any]) -> ByteTokenizer | SentencePieceTokenizer:
    """The tokenizer of a record written by :func:`tokenizer_record`.

    Raises:
        ValueError: not such a record.

    Example:
        >>> tokenizer_from_record({"name": "bytes"}).vocabulary_size
        260
    """
    if isinstance(record, Mapping) and record.get("name") == BYTES_TOKENIZER:
        return ByteTokenizer()
    proto = record.get("sentencepiece_model") if isinstance(record, Mapping) else None
    if not isinstance(proto, str):
        raise ValueError(f"Not a stored tokenizer record: {str(record)[:200]!r}")
    try:
        data = base64.b64decode(proto, validate=True)
    except ValueError as error:
        raise ValueError(f"The stored SentencePiece model is not base64: {error}") from error
    return SentencePieceTokenizer(data)


def _keep_first(ids: tf.RaggedTensor, counts: tf.Tensor) -> tf.RaggedTensor:
    positions = tf.ragged.range(ids.row_lengths())
    return tf.ragged.boolean_mask(ids, positions < counts[:, None])


def tokenize_and_pack(
    texts: tf.Tensor | Sequence[str],
    *,
    tokenizer: Callable | None = None,
    sequence_length: int = 512,
    text_pairs: tf.Tensor | Sequence[str] | None = None,
    cls_id: int | None = None,
    sep_id: int | None = None,
    pad_id: int | None = None,
) -> dict[str, tf.Tensor]:
    """Tokenize a batch of texts (or text pairs) into fixed-length FNet inputs.

    Sequences too long for `sequence_length` lose tokens from the end; pairs
    are truncated round-robin (the longer one first).

    Args:
        texts: 1-D batch of strings.
        tokenizer: callable mapping a 1-D string tensor to ids (see the module
            docstring), e.g. a `SentencePieceTokenizer` of the official
            vocabulary. Default None: `ByteTokenizer()`.
        sequence_length: output length, larger than the number of special
            tokens added. Default 512.
        text_pairs: second sentences, same batch size. Default None.
        cls_id: id put first; None (default) takes `tokenizer.cls_id` if it
            exists, else adds no [CLS].
        sep_id: id closing each sentence; None (default) takes
            `tokenizer.sep_id` if it exists, else adds no [SEP].
        pad_id: padding id; None (default) takes `tokenizer.pad_id`, else 0.

    Returns:
        {"token_ids": int32 (B, L), "segment_ids": int32 (B, L),
        "padding_mask": int32 (B, L), 1 on real tokens} with L = `sequence_length`.

    Example:
        >>> features = tokenize_and_pack(["hi"], sequence_length=6)
        >>> features["token_ids"].numpy().tolist()
        [[1, 108, 109, 2, 0, 0]]
    """
    tokenizer = ByteTokenizer() if tokenizer is None else tokenizer
    cls_id = getattr(tokenizer, "cls_id", None) if cls_id is None else cls_id
    sep_id = getattr(tokenizer, "sep_id", None) if sep_id is None else sep_id
    pad_id = getattr(tokenizer, "pad_id", 0) if pad_id is None else pad_id
    segments = [texts] if text_pairs is None else [texts, text_pairs]
    num_special = (cls_id is not None) + (sep_id is not None) * len(segments)
    if sequence_length <= num_special:
        raise ValueError(
            f"sequence_length must exceed the {num_special} special tokens added; "
            f"received sequence_length={sequence_length!r}."
        )
    ids = []
    for segment in segments:
        tokens = tokenizer(tf.convert_to_tensor(segment, tf.string))
        if not isinstance(tokens, tf.RaggedTensor):
            tokens = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(tokens), padding=pad_id)
        ids.append(tf.cast(tokens, "int32"))
    budget = sequence_length - num_special
    lengths = [segment_ids.row_lengths() for segment_ids in ids]
    if len(ids) == 1:
        keep = [tf.minimum(lengths[0], budget)]
    else:
        first = tf.minimum(lengths[0], tf.maximum(budget - lengths[1], (budget + 1) // 2))
        keep = [first, tf.minimum(lengths[1], budget - first)]
    batch = tf.shape(lengths[0])[:1]
    pieces, segment_pieces = [], []
    if cls_id is not None:
        pieces.append(tf.RaggedTensor.from_tensor(tf.fill(tf.concat([batch, [1]], 0), cls_id)))
        segment_pieces.append(tf.zeros_like(pieces[-1]))
    for index, (segment_ids, count) in enumerate(zip(ids, keep, strict=True)):
        pieces.append(_keep_first(segment_ids, count))
        segment_pieces.append(tf.zeros_like(pieces[-1]) + index)
        if sep_id is not None:
            pieces.append(tf.RaggedTensor.from_tensor(tf.fill(tf.concat([batch, [1]], 0), sep_id)))
            segment_pieces.append(tf.zeros_like(pieces[-1]) + index)
    token_ids = tf.concat(pieces, axis=1)
    shape = [None, sequence_length]
    return {
        "token_ids": token_ids.to_tensor(default_value=pad_id, shape=shape),
        "segment_ids": tf.concat(segment_pieces, axis=1).to_tensor(shape=shape),
        "padding_mask": tf.sequence_mask(token_ids.row_lengths(), sequence_length, "int32"),
    }


def text_dataset(
    texts: Sequence[str],
    labels: Sequence[int] | np.ndarray,
    *,
    text_pairs: Sequence[str] | None = None,
    tokenizer: Callable | None = None,
    sequence_length: int = 512,
    batch_size: int = 32,
    training: bool = False,
    drop_remainder: bool | None = None,
    cache: bool = True,
    seed: int = 0,
    cls_id: int | None = None,
    sep_id: int | None = None,
    pad_id: int | None = None,
    padding: str = "fixed",
    bucket_boundaries: Sequence[int] | None = None,
) -> tf.data.Dataset:
    """Build a batched text classification pipeline from in-memory texts.

    Texts are tokenized and packed once (in batches of 1,024), optionally
    cached, then shuffled each epoch when training (seeded, so the order is
    reproducible) and batched.

    With ``padding="batch"`` each batch is padded to its longest sequence
    only (at most `sequence_length`), for a model that takes any length
    (``FNet(sequence_length=None)``); `bucket_boundaries` then groups the
    examples by length first (``tf.data``'s bucketing), so that a batch
    holds sequences of similar lengths and little padding. An FNet mixes
    over the batch's length, so its outputs for one text differ between a
    fixed-length and a per-batch-padded pipeline (as in keras-hub and
    transformers, which also pad per batch).

    Args:
        texts: the (first) sentences.
        labels: integer class labels, one per text.
        text_pairs: second sentences for sentence-pair tasks. Default None.
        tokenizer: see `tokenize_and_pack`. Default None: `ByteTokenizer()`.
        sequence_length: fixed output length. Default 512.
        batch_size: batch size. Default 32.
        training: shuffle every epoch. Default False.
        drop_remainder: drop the last partial batch. Default None: `training`.
        cache: cache the packed features in memory. Default True.
        seed: shuffle seed. Default 0.
        cls_id: see `tokenize_and_pack`. Default None.
        sep_id: see `tokenize_and_pack`. Default None.
        pad_id: see `tokenize_and_pack`. Default None.
        padding: "fixed" (default): every batch is (B, `sequence_length`);
            "batch": each batch is padded to its longest sequence.
        bucket_boundaries: with ``padding="batch"``, increasing sequence
            lengths splitting the examples into buckets (lengths below the
            first, between two, at least the last), each batched apart; the
            texts are then read once when the dataset is built, to count its
            batches (its cardinality). Default None: no bucketing.

    Returns:
        A `tf.data.Dataset` of ({"token_ids", "segment_ids", "padding_mask"},
        int32 labels) batches.

    Example:
        >>> ds = text_dataset(["good", "bad"], [1, 0], sequence_length=8, batch_size=2)
        >>> features, labels = next(iter(ds))
        >>> features["token_ids"].shape, labels.numpy().tolist()
        (TensorShape([2, 8]), [1, 0])
    """
    check_choice("padding", padding, TEXT_PADDINGS)
    if bucket_boundaries is not None:
        bounds = list(bucket_boundaries)
        if (
            padding != "batch"
            or not bounds
            or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in bounds)
            or bounds != sorted(set(bounds))
        ):
            raise ValueError(
                '`bucket_boundaries` must be increasing positive ints, with padding="batch". '
                f"Received: bucket_boundaries={bucket_boundaries!r}"
            )
    labels = np.asarray(labels, dtype=np.int32)
    if len(texts) != len(labels) or (text_pairs is not None and len(text_pairs) != len(labels)):
        raise ValueError(
            f"texts, text_pairs and labels must have the same length; received {len(texts)} "
            f"texts, {None if text_pairs is None else len(text_pairs)} pairs and "
            f"{len(labels)} labels."
        )

    def pack(*segments):
        return tokenize_and_pack(
            segments[0],
            text_pairs=segments[1] if len(segments) == 2 else None,
            tokenizer=tokenizer,
            sequence_length=sequence_length,
            cls_id=cls_id,
            sep_id=sep_id,
            pad_id=pad_id,
        )

    columns = (list(texts),) if text_pairs is None else (list(texts), list(text_pairs))
    features = (
        tf.data.Dataset.from_tensor_slices(columns)
        .batch(1024)
        .map(pack, num_parallel_calls=AUTOTUNE)
        .unbatch()
        .apply(tf.data.experimental.assert_cardinality(len(labels)))
    )
    ds = tf.data.Dataset.zip(features, tf.data.Dataset.from_tensor_slices(labels))
    if cache:
        ds = ds.cache()
    drop = training if drop_remainder is None else drop_remainder
    batches = None
    if bucket_boundaries is not None:
        batches = _bucketed_batches(ds, bucket_boundaries, batch_size, drop)
    if training:
        ds = ds.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)
    if padding == "fixed":
        ds = ds.batch(batch_size, drop_remainder=drop)
    else:
        ds = _batch_padded(ds, batch_size, drop, bucket_boundaries, tokenizer, pad_id)
    if batches is not None:  # bucketing leaves the count unknown; it is the buckets' own
        ds = ds.apply(tf.data.experimental.assert_cardinality(batches))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.prefetch(AUTOTUNE).with_options(options)


def _bucketed_batches(
    ds: tf.data.Dataset, bucket_boundaries: Sequence[int], batch_size: int, drop_remainder: bool
) -> int:
    """The batches `_batch_padded` makes of the packed examples `ds` with `bucket_boundaries`.

    Each bucket is batched apart, so the count does not depend on the order:
    per bucket, its examples // `batch_size` (rounded up when partial batches
    are kept). `ds` is read once (filling its cache, when it has one).
    """
    lengths = np.fromiter(
        ds.map(lambda features, _: tf.reduce_sum(features["padding_mask"])).as_numpy_iterator(),
        dtype=np.int64,
    )
    buckets = np.searchsorted(np.asarray(bucket_boundaries), lengths, side="right")
    counts = np.bincount(buckets, minlength=len(bucket_boundaries) + 1)
    full, partial = np.divmod(counts, batch_size)
    return int(full.sum() + (0 if drop_remainder else np.count_nonzero(partial)))


def _batch_padded(
    ds: tf.data.Dataset,
    batch_size: int,
    drop_remainder: bool,
    bucket_boundaries: Sequence[int] | None,
    tokenizer: Callable | None,
    pad_id: int | None,
) -> tf.data.Dataset:
    """Batches of packed examples cut to their real length and padded per batch (or bucket)."""
    if pad_id is None:
        pad_id = getattr(ByteTokenizer() if tokenizer is None else tokenizer, "pad_id", 0)

    def unpad(features, label):
        length = tf.reduce_sum(features["padding_mask"])
        return {key: value[:length] for key, value in features.items()}, label

    ds = ds.map(unpad, num_parallel_calls=AUTOTUNE)
    padding_values = (
        {"token_ids": pad_id, "segment_ids": 0, "padding_mask": 0},
        0,
    )
    if bucket_boundaries is None:
        return ds.padded_batch(
            batch_size, padding_values=padding_values, drop_remainder=drop_remainder
        )
    return ds.bucket_by_sequence_length(
        lambda features, _: tf.shape(features["token_ids"])[0],
        list(bucket_boundaries),
        [batch_size] * (len(bucket_boundaries) + 1),
        padding_values=padding_values,
        drop_remainder=drop_remainder,
    )


def select_model_inputs(dataset: tf.data.Dataset, model: keras.Model) -> tf.data.Dataset:
    """`dataset` with only the features `model` takes as inputs.

    The text pipelines always produce ``padding_mask``; an FNet built with
    the default ``use_padding_mask=False`` (the paper's function) has no
    such input. Models whose input is not a dict get `dataset` unchanged.

    Args:
        dataset: batches of (features, labels...).
        model: the model the batches feed.

    Returns:
        The dataset with each features dict reduced to the model's input names.

    Example:
        >>> ds = select_model_inputs(text_dataset(["a"], [0], sequence_length=4), model)
        >>> sorted(next(iter(ds))[0])
        ['segment_ids', 'token_ids']
    """
    if not isinstance(model.input, dict):
        return dataset
    names = tuple(model.input)

    def select(features, *rest):
        return ({name: features[name] for name in names}, *rest)

    return dataset.map(select, num_parallel_calls=AUTOTUNE)
