"""FNet text encoders as data: the sizes and official releases of FNetBase and FNetLarge.

The encoders are built by :mod:`keras_fourier.models.fnet` (`FNet`,
`FNetBase`, `FNetLarge`); this keras-free module holds the family's rows,
which the catalog and the command line read without loading TensorFlow.
"""

from __future__ import annotations

import dataclasses

from keras_fourier.models.family import Family

# With vocabulary_size=32000 and the other defaults, "base" has 82,861,056
# parameters and "large" 236,945,408 (no classifier head).
FNET_VARIANTS: dict[str, dict[str, int]] = {
    "base": {"hidden_size": 768, "num_layers": 12, "intermediate_size": 3072},
    "large": {"hidden_size": 1024, "num_layers": 24, "intermediate_size": 4096},
}


@dataclasses.dataclass(frozen=True)
class FNetRelease:
    """One official pretrained FNet checkpoint (a Flax msgpack optimizer checkpoint).

    Attributes:
        variant: the key of :data:`FNET_VARIANTS` it was trained as.
        file_name: its name in the Keras cache.
        url: download link (google-research ``f_net/README.md``).
        source: the repository that publishes it.
        license: that repository's licence.
        sha256: hex digest checked after downloading, or None: the README
            publishes none and these rows were written without network
            access to compute one.
        size: approximate size in bytes, as the README gives it (Base "~1 GB",
            Large "3-4 GB").
    """

    variant: str
    file_name: str
    url: str
    source: str = "https://github.com/google-research/google-research/tree/master/f_net"
    license: str = "Apache-2.0"
    sha256: str | None = None
    size: int | None = None


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
RELEASES: dict[str, FNetRelease] = {
    "f_net_base": FNetRelease(
        "base", "f_net_base_checkpoint", _GRESEARCH.format("base"), size=10**9
    ),
    "f_net_large": FNetRelease(
        "large", "f_net_large_checkpoint", _GRESEARCH.format("large"), size=35 * 10**8
    ),
}


FNET = Family(
    "FNet",
    __doc__.split("\n\n")[0],
    variants=FNET_VARIANTS,
    builders={"FNetBase": "base", "FNetLarge": "large"},
    modality="text",
    releases={release.variant: (release,) for release in RELEASES.values()},
)
