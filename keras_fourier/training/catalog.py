"""Model names for training: the named builders, small presets and FNet text classifiers.

Names are snake case. Vision models: every key of
`keras_fourier.models.BUILDERS`'s variant column (``gfnet_ti``,
``gfnet_h_ti``, ``hornet_t_gf``, ``afnonet_s4``, ...) and the small presets
of :data:`VISION_PRESETS`, built with `keras_fourier.build_model` for small
images (patch 2). Text models: ``fnet_<variant>`` for every FNet variant and
the preset ``fnet_tiny``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras

from keras_fourier.models import BUILDERS, VARIANTS, build_model, make_builder
from keras_fourier.models.fnet import FNET_VARIANTS, FNet
from keras_fourier.validation import check_choice

# build_model arguments of the small presets; every one takes >= 16x16 images.
VISION_PRESETS: dict[str, dict[str, Any]] = {
    "gfnet_tiny": {"mixer": "global_filter", "depths": 2, "dims": 64, "patch_size": 2},
    "gfnet_h_tiny": {
        "mixer": "global_filter",
        "depths": (1, 2, 1),
        "dims": (32, 64, 128),
        "patch_size": 2,
        "layer_scale": 1e-3,
    },
    "hornet_tiny": {
        "mixer": "gnconv",
        "depths": (1, 2, 1),
        "dims": (32, 64, 128),
        "patch_size": 2,
        "layer_scale": 1e-6,
    },
    "hornet_gf_tiny": {
        "mixer": "gnconv_gf",
        "depths": (1, 2, 1),
        "dims": (32, 64, 128),
        "patch_size": 2,
        "layer_scale": 1e-6,
    },
    "afno_tiny": {"mixer": "afno", "depths": 4, "dims": 64, "patch_size": 2},
    "afbo_tiny": {
        "mixer": "global_filter",
        "ffn": "afbo",
        "depths": 4,
        "dims": 64,
        "patch_size": 2,
    },
}
TEXT_PRESETS: dict[str, dict[str, int]] = {
    "fnet_tiny": {"hidden_size": 64, "num_layers": 2, "intermediate_size": 128},
    **{f"fnet_{variant}": sizes for variant, sizes in FNET_VARIANTS.items()},
}
# Named vision builders by snake-case name, e.g. "gfnet_h_ti" -> keras_fourier.GFNetHTi.
VISION_BUILDERS: dict[str, str] = {variant: public for public, (variant, _) in BUILDERS.items()}
ARCHITECTURE_OPTIONS = ("mixer", "ffn", "depths", "dims", "patch_size")


def model_names() -> list[str]:
    """Every model name `create_model` accepts.

    Returns:
        Sorted names: the named vision builders, the vision presets and the
        FNet text models.

    Example:
        >>> "gfnet_tiny" in model_names() and "hornet_t_gf" in model_names()
        True
    """
    return sorted({*VISION_BUILDERS, *VISION_PRESETS, *TEXT_PRESETS})


def check_model_name(name: str) -> str:
    """Validates a model name.

    Args:
        name: a name from `model_names()`.

    Returns:
        `name` unchanged.

    Raises:
        ValueError: naming the value and listing the known names.

    Example:
        >>> check_model_name("fnet_tiny")
        'fnet_tiny'
    """
    return check_choice("model", name, model_names())


def is_text_model(name: str) -> bool:
    """Whether a model name is an FNet text classifier.

    Args:
        name: a name from `model_names()`.

    Returns:
        True for the FNet models, False for vision models.

    Example:
        >>> is_text_model("fnet_base"), is_text_model("gfnet_xs")
        (True, False)
    """
    return check_model_name(name) in TEXT_PRESETS


def vision_stride(name: str, **architecture: Any) -> int:
    """Downsampling factor from pixels to the last stage: image sizes must be multiples of it.

    Args:
        name: a vision model name.
        **architecture: `build_model` overrides of a preset (see `create_model`).

    Returns:
        The stride.

    Example:
        >>> vision_stride("gfnet_tiny"), vision_stride("gfnet_h_ti")
        (2, 32)
    """
    if check_model_name(name) in VISION_BUILDERS:
        return VARIANTS[name].stride
    options = {**VISION_PRESETS[name], **_given(architecture)}
    depths = options["depths"]
    stages = 1 if isinstance(depths, int) else len(depths)
    return options.get("patch_size", 16 if stages == 1 else 4) * 2 ** (stages - 1)


def _given(architecture: dict[str, Any]) -> dict[str, Any]:
    unknown = set(architecture) - set(ARCHITECTURE_OPTIONS)
    if unknown:
        raise ValueError(
            f"Unknown architecture options {sorted(unknown)}; expected {ARCHITECTURE_OPTIONS}."
        )
    return {key: value for key, value in architecture.items() if value is not None}


def _text_classifier(
    name: str, *, num_classes: int, sequence_length: int, vocabulary_size: int, dropout: float
) -> keras.Model:
    encoder = FNet(
        TEXT_PRESETS[name],
        vocabulary_size=vocabulary_size,
        max_sequence_length=sequence_length,
        dropout=dropout,
        num_classes=num_classes,
        name=name,
    )
    probabilities = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(
        encoder.output
    )
    return keras.Model(encoder.input, probabilities, name=name)


def create_model(
    name: str,
    *,
    num_classes: int,
    image_size: int = 224,
    drop_path_rate: float | None = None,
    sequence_length: int = 512,
    vocabulary_size: int = 32000,
    dropout: float = 0.1,
    **architecture: Any,
) -> keras.Model:
    """Builds a classifier by name, with softmax float32 outputs.

    Args:
        name: a name from `model_names()`.
        num_classes: number of classes.
        image_size: input height and width of vision models, a multiple of
            `vision_stride(name)`. Default 224.
        drop_path_rate: stochastic depth rate of vision models. Default None:
            the builder's default (the official training config for named
            variants, 0 for presets).
        sequence_length: static input length of text models. Default 512.
        vocabulary_size: word table rows of text models. Default 32000.
        dropout: dropout rate of text models. Default 0.1.
        **architecture: `build_model` overrides of a vision preset, any of
            "mixer", "ffn", "depths", "dims", "patch_size" (None values are
            ignored).

    Returns:
        A `keras.Model`: images (B, image_size, image_size, 3) in [0, 255],
        or FNet's {"token_ids", "segment_ids", "padding_mask"} inputs, to
        (B, num_classes) probabilities.

    Raises:
        ValueError: for an unknown name, or architecture overrides of a model
            that is not a preset.

    Example:
        >>> model = create_model("gfnet_tiny", num_classes=10, image_size=16)
        >>> model.output_shape
        (None, 10)
    """
    check_model_name(name)
    overrides = _given(architecture)
    if overrides and name not in VISION_PRESETS:
        raise ValueError(
            f"Architecture options {sorted(overrides)} only apply to the presets "
            f"{sorted(VISION_PRESETS)}; received model {name!r}."
        )
    if name in TEXT_PRESETS:
        return _text_classifier(
            name,
            num_classes=num_classes,
            sequence_length=sequence_length,
            vocabulary_size=vocabulary_size,
            dropout=dropout,
        )
    builder: Callable[..., keras.Model]
    if name in VISION_BUILDERS:
        builder = make_builder(VISION_BUILDERS[name])
        options = {"name": name}
    else:
        builder = build_model
        options = {**VISION_PRESETS[name], **overrides, "name": name}
    return builder(
        input_shape=(image_size, image_size, 3),
        classes=num_classes,
        drop_path_rate=drop_path_rate,
        **options,
    )
