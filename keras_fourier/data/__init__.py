"""tf.data input pipelines: image classification with DeiT-style augmentation, and text.

Images: `load_image_dataset` (sources "digits", "tfds:<name>", "dir:<path>"),
`get_num_classes`, `training_splits`, `count_examples`, `load_digits`, and the transforms in
:mod:`keras_fourier.data.augment`. Text: `text_dataset` and
`tokenize_and_pack` with `ByteTokenizer`, `WordTokenizer`, `SentencePieceTokenizer`
(`load_tokenizer`, `official_sentencepiece_model`) or any compatible tokenizer,
CSV/TSV text classification files (``csv:<path>``, `read_text_split`,
`text_split_dataset`), and the locally generated Long-Range Arena ListOps task. Detection:
`load_detection_dataset` (sources "digits", "coco:<path>", "tfds:coco/2017",
"tfds:coco/2017_panoptic", "tfds:voc/2007")
with its box targets (`TARGET_COLUMNS`).
"""

from keras_fourier.data.augment import (
    AugmentConfig,
    ImageAugmenter,
    RandomResizedCrop,
    eval_transform,
)
from keras_fourier.data.coco_json import read_coco_json
from keras_fourier.data.detection import (
    TARGET_COLUMNS,
    DetectionAugment,
    count_detection_examples,
    default_detection_augment,
    detection_category_ids,
    detection_class_names,
    detection_num_classes,
    detection_splits,
    is_detection_source,
    load_detection_dataset,
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
    "TARGET_COLUMNS",
    "AugmentConfig",
    "ByteTokenizer",
    "DetectionAugment",
    "ImageAugmenter",
    "RandomResizedCrop",
    "SentencePieceTokenizer",
    "WordTokenizer",
    "count_detection_examples",
    "count_examples",
    "default_detection_augment",
    "detection_category_ids",
    "detection_class_names",
    "detection_num_classes",
    "detection_splits",
    "eval_transform",
    "evaluate_listops",
    "generate_listops",
    "get_class_names",
    "get_num_classes",
    "is_detection_source",
    "listops_dataset",
    "listops_eval_dataset",
    "listops_train_dataset",
    "load_detection_dataset",
    "load_digits",
    "load_image_dataset",
    "load_tokenizer",
    "official_sentencepiece_model",
    "read_coco_json",
    "read_text_split",
    "select_model_inputs",
    "text_class_names",
    "text_dataset",
    "text_split_dataset",
    "text_training_splits",
    "tokenize_and_pack",
    "training_splits",
]
