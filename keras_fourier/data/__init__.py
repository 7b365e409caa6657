"""tf.data input pipelines: image classification with DeiT-style augmentation, and text.

Images: `load_image_dataset` (sources "digits", "tfds:<name>", "dir:<path>"),
`get_num_classes`, `training_splits`, `count_examples`, `load_digits`, and the transforms in
:mod:`keras_fourier.data.augment`. Text: `text_dataset` and
`tokenize_and_pack` with `ByteTokenizer`, `WordTokenizer`, `SentencePieceTokenizer`
(`load_tokenizer`, `official_sentencepiece_model`) or any compatible tokenizer,
CSV/TSV text classification files (``csv:<path>``, `read_text_split`,
`text_split_dataset`), and the locally generated Long-Range Arena ListOps task.
"""

from keras_fourier.data.augment import (
    AugmentConfig,
    ImageAugmenter,
    RandomResizedCrop,
    eval_transform,
)
from keras_fourier.data.images import (
    count_examples,
    get_class_names,
    get_num_classes,
    load_digits,
    load_image_dataset,
    training_splits,
)
from keras_fourier.data.listops import (
    LISTOPS_NUM_CLASSES,
    LISTOPS_VOCABULARY,
    evaluate_listops,
    generate_listops,
    listops_dataset,
    listops_eval_dataset,
    listops_train_dataset,
)
from keras_fourier.data.text import (
    OFFICIAL_SENTENCEPIECE_URL,
    ByteTokenizer,
    SentencePieceTokenizer,
    WordTokenizer,
    load_tokenizer,
    official_sentencepiece_model,
    select_model_inputs,
    text_dataset,
    tokenize_and_pack,
)
from keras_fourier.data.text_files import (
    read_text_split,
    text_class_names,
    text_split_dataset,
    text_training_splits,
)

__all__ = [
    "LISTOPS_NUM_CLASSES",
    "LISTOPS_VOCABULARY",
    "OFFICIAL_SENTENCEPIECE_URL",
    "AugmentConfig",
    "ByteTokenizer",
    "ImageAugmenter",
    "RandomResizedCrop",
    "SentencePieceTokenizer",
    "WordTokenizer",
    "count_examples",
    "eval_transform",
    "evaluate_listops",
    "generate_listops",
    "get_class_names",
    "get_num_classes",
    "listops_dataset",
    "listops_eval_dataset",
    "listops_train_dataset",
    "load_digits",
    "load_image_dataset",
    "load_tokenizer",
    "official_sentencepiece_model",
    "read_text_split",
    "select_model_inputs",
    "text_class_names",
    "text_dataset",
    "text_split_dataset",
    "text_training_splits",
    "tokenize_and_pack",
    "training_splits",
]
