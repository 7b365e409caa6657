"""FNet text encoders as data: the sizes and official releases of FNetBase and FNetLarge.

The encoders are built by :mod:`keras_fourier.models.fnet` and loaded by
:mod:`keras_fourier.models.fnet_weights`; this keras-free module holds the
family's rows, which the catalog and the command line read without loading
TensorFlow.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from keras_fourier.models.family import Family
from keras_fourier.weights.releases import Release

# The keys of a size row, and of a custom `variant` of `FNet`.
SIZE_KEYS = ("hidden_size", "num_layers", "intermediate_size")

# With vocabulary_size=32000 and the other defaults, "base" has 82,861,056
# parameters and "large" 236,945,408 (no classifier head).
FNET_VARIANTS: dict[str, dict[str, int]] = {
    "base": {"hidden_size": 768, "num_layers": 12, "intermediate_size": 3072},
    "large": {"hidden_size": 1024, "num_layers": 24, "intermediate_size": 4096},
}

# The paper's models (Section 4.1, Tables 1 and 2) as `FNet` arguments: the same encoder
# (embeddings, feed-forward sublayers, pooler) with another token mixing. Each row with each
# size of FNET_VARIANTS is a model name, "<row>_<size>" ("bert_base", "fnet_hybrid_large"),
# that `keras-fourier train --model` and `bench` build; the mixings are the rows of
# keras_fourier.layers.fnet.MIXINGS.
PAPER_MODELS: dict[str, dict[str, Any]] = {
    "fnet": {},
    "bert": {"mixing": "attention"},
    "linear": {"mixing": "linear"},
    "random": {"mixing": "random"},
    "ff_only": {"mixing": "identity"},
    "fnet_hybrid": {"mixing": "fourier", "attention_layers": 2},
}
# The mixing of each paper model, keras-free (for the command line): every row of MIXINGS.
PAPER_MIXINGS: tuple[str, ...] = tuple(
    dict.fromkeys(row.get("mixing", "fourier") for row in PAPER_MODELS.values())
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FNetRelease(Release):
    """One official pretrained FNet checkpoint (a Flax msgpack optimizer checkpoint).

    Attributes:
        variant: the key of :data:`FNET_VARIANTS` it was trained as.
    """

    variant: str


# The tables of every official release (google-research f_net/configs/base.py: type_vocab_size
# 4, max_seq_length 512; the c4_bpe SentencePiece vocabulary has 32,000 pieces).
OFFICIAL_TABLES: dict[str, int] = {
    "vocabulary_size": 32000,
    "max_sequence_length": 512,
    "num_segments": 4,
}
_GRESEARCH = "https://storage.googleapis.com/gresearch/f_net/checkpoints/{}/f_net_checkpoint"
# Pretrained on C4 with the MLM and NSP heads, max_seq_length 512, type_vocab_size 4, the
# 32,000-piece c4_bpe SentencePiece vocabulary (google-research f_net/README.md).
_SOURCE = "https://github.com/google-research/google-research/tree/master/f_net"
# The README gives sizes, not exact ones: Base "~1 GB", Large "3-4 GB"; each row's ceiling
# is twice that (Large's is above the default download ceiling). No sha256 or exact size is
# published, and these rows were written without network access to compute them.
RELEASES: dict[str, FNetRelease] = {
    f"f_net_{variant}": FNetRelease(
        f"f_net_{variant}_checkpoint",
        _GRESEARCH.format(variant),
        _SOURCE,
        "Apache-2.0",
        reader="flax",
        max_size=ceiling,
        variant=variant,
    )
    for variant, ceiling in (("base", 2 * 10**9), ("large", 8 * 10**9))
}


def check_fnet_weights(weights: Any) -> None:
    """Checks the `weights` argument of `FNet`: None, a release name, or an existing path.

    Raises:
        ValueError: anything else, naming what is accepted.

    Example:
        >>> check_fnet_weights("f_net_base")
    """
    if weights is None or weights in RELEASES:
        return
    if isinstance(weights, (str, os.PathLike)) and os.path.exists(weights):
        return
    raise ValueError(
        f"`weights` must be None, a release name {sorted(RELEASES)}, or the path of an "
        "existing file or folder: a `.weights.h5` saved by keras_fourier, an official FNet "
        "checkpoint (Flax msgpack), a Hugging Face transformers FNet folder or a keras-hub FNet "
        "preset folder. "
        f"Received: weights={weights!r}"
    )


FNET = Family(
    "FNet",
    __doc__.split("\n\n")[0],
    variants=FNET_VARIANTS,
    builders={"FNetBase": "base", "FNetLarge": "large"},
    modality="text",
    releases={release.variant: (release,) for release in RELEASES.values()},
)
