"""Text pipelines of keras_fourier.data: tokenizers, packing, text_dataset and ListOps."""

import ast
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_fourier.data import (
    LISTOPS_NUM_CLASSES,
    LISTOPS_VOCABULARY,
    ByteTokenizer,
    WordTokenizer,
    evaluate_listops,
    generate_listops,
    listops_dataset,
    text_dataset,
    tokenize_and_pack,
)

LENGTH = 12


def test_byte_tokenizer_ids_and_vocabulary():
    tokenizer = ByteTokenizer()
    assert tokenizer.vocabulary_size == 260
    assert (tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (0, 1, 2, 3)
    ids = tokenizer(["AB", "", "é\x00\xff"])
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    expected_last = [b + 4 for b in "é\x00\xff".encode()]
    assert ids.to_list() == [[69, 70], [], expected_last]
    np.testing.assert_array_equal(tokenizer("AB"), [69, 70])
    assert tokenizer(tf.constant([b"\xff\xfe"])).to_list() == [[259, 258]]


def test_word_tokenizer_ids_and_unknown_tokens():
    tokenizer = WordTokenizer(["red", "green"])
    assert tokenizer.vocabulary_size == 7
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id) == (0, 1, 2, 3)
    assert tokenizer(tf.constant(["green  red blue", ""])).to_list() == [[6, 5, 1], []]


def test_pack_single_texts_pads_truncates_and_masks():
    features = tokenize_and_pack(["hi", "x" * 50, ""], sequence_length=LENGTH)
    assert {name: (t.shape, t.dtype) for name, t in features.items()} == {
        "token_ids": ((3, LENGTH), tf.int32),
        "segment_ids": ((3, LENGTH), tf.int32),
        "padding_mask": ((3, LENGTH), tf.int32),
    }
    token_ids = features["token_ids"].numpy()
    assert token_ids[0].tolist() == [1, 108, 109, 2] + [0] * (LENGTH - 4)
    assert token_ids[1].tolist() == [1] + [ord("x") + 4] * (LENGTH - 2) + [2]
    assert token_ids[2].tolist() == [1, 2] + [0] * (LENGTH - 2)
    np.testing.assert_array_equal(features["padding_mask"], token_ids != 0)
    np.testing.assert_array_equal(features["segment_ids"], 0)


def test_pack_pairs_round_robin_truncation_and_segments():
    features = tokenize_and_pack(
        ["aaaaaaaaaa", "a", "aaa"], text_pairs=["bbb", "bbbbbbbbbb", "bb"], sequence_length=LENGTH
    )
    a, b = ord("a") + 4, ord("b") + 4
    token_ids = features["token_ids"].numpy().tolist()
    # Budget 9 after [CLS] and two [SEP]: the longer sentence gives way first.
    assert token_ids[0] == [1] + [a] * 6 + [2] + [b] * 3 + [2]
    assert token_ids[1] == [1, a, 2] + [b] * 8 + [2]
    assert token_ids[2] == [1, a, a, a, 2, b, b, 2] + [0] * 4
    assert features["segment_ids"].numpy()[2].tolist() == [0] * 5 + [1] * 3 + [0] * 4
    long = tokenize_and_pack(["a" * 20], text_pairs=["b" * 20], sequence_length=LENGTH)
    assert long["token_ids"].numpy()[0].tolist() == [1] + [a] * 5 + [2] + [b] * 4 + [2]


def test_pack_accepts_keras_tokenizers_dense_or_ragged():
    vocabulary = ["the", "cat", "sat"]
    ragged = keras.layers.TextVectorization(vocabulary=vocabulary, ragged=True)
    dense = keras.layers.TextVectorization(vocabulary=vocabulary, output_sequence_length=6)
    # TextVectorization: 0 = padding, 1 = OOV, vocabulary from 2; reuse 1 and 5 as [CLS]/[SEP].
    for tokenizer in (ragged, dense):
        features = tokenize_and_pack(
            ["the cat sat", "cat"], tokenizer=tokenizer, sequence_length=6, cls_id=1, sep_id=5
        )
        assert features["token_ids"].numpy().tolist() == [[1, 2, 3, 4, 5, 0], [1, 3, 5, 0, 0, 0]]
    hashed = tokenize_and_pack(
        ["a b"], tokenizer=lambda t: tf.strings.to_hash_bucket_fast(tf.strings.split(t), 7) + 1
    )
    assert hashed["padding_mask"].numpy().sum() == 2, "no [CLS]/[SEP] without ids"


def test_pack_rejects_too_short_sequence_length():
    with pytest.raises(ValueError, match=re.escape("sequence_length=3")):
        tokenize_and_pack(["a"], text_pairs=["b"], sequence_length=3)


def test_text_dataset_batches_shuffling_and_pairs():
    texts = [f"text {i}" for i in range(10)]
    ds = text_dataset(texts, range(10), sequence_length=LENGTH, batch_size=4)
    assert int(ds.cardinality()) == 3, "known cardinality, so Keras knows the steps"
    batches = list(ds.as_numpy_iterator())
    assert [len(labels) for _, labels in batches] == [4, 4, 2]
    assert np.concatenate([labels for _, labels in batches]).tolist() == list(range(10))
    assert batches[0][0]["token_ids"].shape == (4, LENGTH) and batches[0][1].dtype == np.int32

    def order(seed):
        ds = text_dataset(texts, range(10), batch_size=4, training=True, seed=seed)
        return [label for _, labels in ds.as_numpy_iterator() for label in labels]

    shuffled = order(0)
    assert shuffled == order(0) and len(shuffled) == 8 and shuffled != sorted(shuffled)
    pairs = text_dataset(["a"] * 3, [0, 1, 2], text_pairs=["b"] * 3, sequence_length=6)
    features, _ = next(iter(pairs))
    assert features["segment_ids"].numpy()[0].tolist() == [0, 0, 0, 1, 1, 0]
    with pytest.raises(ValueError, match="same length"):
        text_dataset(["a", "b"], [0])


def _reference_value(expression: str) -> int:
    """Independent evaluator: parse to nested Python lists, reduce with NumPy as LRA does."""
    python = re.sub(r"\[(MAX|MIN|MED|SM)", r"['\1',", expression)
    python = re.sub(r"(\d|\])(?=\s)", r"\1,", python)

    def reduce(node):
        if isinstance(node, int):
            return node
        operator, *arguments = node
        values = [reduce(argument) for argument in arguments]
        return {
            "MAX": max,
            "MIN": min,
            "MED": lambda v: int(np.median(v)),
            "SM": lambda v: int(np.sum(v)) % 10,
        }[operator](values)

    return reduce(ast.literal_eval(python))


HAND_WRITTEN = {
    "[MAX 2 9 [MIN 4 7 ] 0 ]": 9,
    "[SM 5 6 ]": 1,
    "[MED 1 5 3 ]": 3,
    "[MED 2 7 4 9 ]": 5,
    "[MED 1 2 ]": 1,
    "[MIN [MAX 1 8 ] [SM 9 9 9 ] 6 ]": 6,
    "[SM [MED 3 3 8 ] [MAX 0 1 ] [MIN 7 [SM 2 2 ] ] ]": 8,
    "7": 7,
    "( ( ( [MAX 2 ) 9 ) ] )": 9,
}


@pytest.mark.parametrize(("expression", "value"), list(HAND_WRITTEN.items()))
def test_evaluators_agree_on_hand_written_expressions(expression, value):
    assert evaluate_listops(expression) == value
    if "(" not in expression:
        assert _reference_value(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("[MAX 2 ", "Incomplete"),
        ("[MAX 2 ] ]", "after the end"),
        ("]", "Unbalanced"),
        ("[MAX ]", "without arguments"),
        ("[FIRST 1 2 ]", "'[FIRST'"),
        ("[MAX 12 3 ]", "'12'"),
        ("", "Incomplete"),
    ],
)
def test_evaluator_rejects_malformed_expressions(expression, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        evaluate_listops(expression)


def _depth_and_arity(expression: str) -> tuple[int, int, int]:
    depth = deepest = 0
    counts, min_args, max_args = [], 10**9, 0
    for token in expression.split():
        if token.startswith("["):
            depth += 1
            deepest = max(deepest, depth)
            counts.append(0)
            continue
        if token == "]":
            depth -= 1
            arity = counts.pop()
            min_args, max_args = min(min_args, arity), max(max_args, arity)
        if counts:
            counts[-1] += 1
    return deepest + 1, min_args, max_args


def test_generator_labels_lengths_structure_and_determinism():
    texts, labels = generate_listops(300, min_length=5, max_length=60, max_depth=4, max_args=5)
    assert len(texts) == len(set(texts)) == 300 and labels.dtype == np.int32
    assert labels.tolist() == [_reference_value(text) for text in texts]
    assert labels.tolist() == [evaluate_listops(text) for text in texts]
    assert set(labels.tolist()) == set(range(LISTOPS_NUM_CLASSES))
    assert all(5 <= len(text.split()) <= 60 for text in texts)
    assert {token for text in texts for token in text.split()} == set(LISTOPS_VOCABULARY)
    for text in texts:
        depth, min_args, max_args = _depth_and_arity(text)
        assert depth <= 4 and min_args >= 2 and max_args <= 5
    config = {"min_length": 5, "max_length": 60, "max_depth": 4, "max_args": 5}
    again, again_labels = generate_listops(300, **config)
    assert again == texts and again_labels.tolist() == labels.tolist()
    assert generate_listops(300, **config, seed=1)[0] != texts


def test_generator_lra_lengths():
    texts, labels = generate_listops(3, seed=0)
    assert all(500 <= len(text.split()) <= 2000 for text in texts)
    assert labels.tolist() == [evaluate_listops(text) for text in texts]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_length": 10, "max_length": 5}, "min_length=10"),
        ({"max_args": 1}, "max_args=1"),
        ({"min_length": 6, "max_depth": 2, "max_args": 3}, "longest possible expression (5"),
        ({"min_length": 1, "max_length": 1}, "Found only 10 of 11"),
    ],
)
def test_generator_rejects_impossible_requests(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        generate_listops(11, **kwargs)


def test_listops_dataset_shapes_vocabulary_and_labels():
    ds = listops_dataset(10, min_length=5, max_length=30, batch_size=4, seed=2)
    batches = list(ds.as_numpy_iterator())
    features, labels = batches[0]
    assert features["token_ids"].shape == (4, 32) and labels.dtype == np.int32
    assert (features["token_ids"][:, 0] == 2).all(), "every sequence starts with [CLS]"
    assert features["token_ids"].max() < 20 and (features["token_ids"] != 1).all(), "no [UNK]"
    texts, expected = generate_listops(10, min_length=5, max_length=30, seed=2)
    assert np.concatenate([b[1] for b in batches]).tolist() == expected.tolist()
    lengths = features["padding_mask"].sum(axis=1)
    assert lengths.tolist() == [len(text.split()) + 2 for text in texts[:4]]


def _tiny_sentencepiece_model() -> bytes:
    """A 60-piece SentencePiece model trained here, with FNet's special pieces (as c4_bpe)."""
    spm = pytest.importorskip("sentencepiece", reason="the [text] extra")
    import io

    sentences = [
        "the cat sat on the mat",
        "a dog ran in the park",
        "fourier transforms mix tokens",
        "the quick brown fox jumps over the lazy dog",
    ] * 20
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=60,
        model_type="bpe",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
        minloglevel=2,
    )
    return model.getvalue()


def test_sentencepiece_tokenizer_gives_the_official_ids_inside_tf_data():
    import sentencepiece

    from keras_fourier.data import SentencePieceTokenizer

    proto = _tiny_sentencepiece_model()
    reference = sentencepiece.SentencePieceProcessor()
    reference.LoadFromSerializedProto(proto)
    tokenizer = SentencePieceTokenizer(proto)
    assert tokenizer.vocabulary_size == 60
    assert (tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (
        0,
        reference.PieceToId("[CLS]"),
        reference.PieceToId("[SEP]"),
        reference.PieceToId("[MASK]"),
    )
    assert tokenizer.cls_id == 4 and tokenizer.mask_id == 6
    texts = ["the cat ran", "", "a lazy fox mixes tokens"]
    expected = [reference.EncodeAsIds(text) for text in texts]
    assert tokenizer(tf.constant(texts)).to_list() == expected
    assert tokenizer("the dog").numpy().tolist() == reference.EncodeAsIds("the dog")

    # Inside tf.data, packed as the official GLUE pipeline: [CLS] a [SEP] b [SEP], pad id.
    ds = tf.data.Dataset.from_tensor_slices((texts, ["x", "the", "park"])).batch(3)
    ds = ds.map(
        lambda a, b: tokenize_and_pack(a, text_pairs=b, tokenizer=tokenizer, sequence_length=16)
    )
    features = next(iter(ds))
    first = [tokenizer.cls_id, *expected[0], tokenizer.sep_id, *reference.EncodeAsIds("x")]
    first.append(tokenizer.sep_id)
    row = features["token_ids"].numpy()[0].tolist()
    assert row == first + [tokenizer.pad_id] * (16 - len(first))
    assert features["segment_ids"].numpy()[0].tolist()[: len(first)] == [0] * (
        len(expected[0]) + 2
    ) + [1] * (len(first) - len(expected[0]) - 2)


def test_sentencepiece_model_without_special_pieces_is_refused(tmp_path):
    spm = pytest.importorskip("sentencepiece", reason="the [text] extra")
    import io

    from keras_fourier.data import SentencePieceTokenizer

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["plain text only"] * 10),
        model_writer=model,
        vocab_size=15,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match=re.escape("has no [CLS] piece")):
        SentencePieceTokenizer(model.getvalue())
    with pytest.raises(ValueError, match="Cannot read the SentencePiece model"):
        SentencePieceTokenizer(str(tmp_path / "missing.model"))
