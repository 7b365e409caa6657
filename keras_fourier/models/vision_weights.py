"""The vision families' weights: their PyTorch key map and the loader their builders are given.

The official state dicts (raoyongming/GFNet, raoyongming/HorNet,
NVlabs/AFNO-transformer) map onto the models of
:func:`~keras_fourier.models.vision.build_vision_model` one tensor at a
time: each family module gives the official key of a Keras variable
(``gfnet.checkpoint_key``: ``stage0_block3_ffn/fc1/kernel`` ->
``blocks.3.mlp.fc1.weight``), :func:`transform_for` its layout change, and
:func:`pytorch_key_map` puts them together for a built model. The
conversion itself, the reading and the release pipeline are generic
(:mod:`keras_fourier.weights`); :func:`load_variant_weights` is the
``load_weights`` that :func:`keras_fourier.models.catalog.make_builder` gives
every named vision builder.
"""

from __future__ import annotations

import functools
from collections.abc import Collection

import keras

from keras_fourier.models.family import Variant
from keras_fourier.models.keymap import OPTIONAL_LAYERS
from keras_fourier.weights.convert import KeyMap, map_variables
from keras_fourier.weights.pipeline import load_release_or_file
from keras_fourier.weights.releases import ImageNetRelease
from keras_fourier.weights.resize import resizable_kind


def transform_for(path: str) -> str:
    """The layout change from official tensor to the Keras variable at `path`.

    Args:
        path: a Keras variable path of a keras_fourier vision model.

    Returns:
        A key of :data:`keras_fourier.weights.convert.TRANSFORMS`: "linear"
        for Dense kernels, "conv" for Conv2D kernels, "depthwise" for
        DepthwiseConv2D kernels (gnConv's ``dwconv`` and the global-local
        filter's ``dw``), "pos_embed", "global_filter" (GFNet),
        "global_local_filter" (HorNet), else "copy".

    Example:
        >>> transform_for("stage2_block0_mixer/dwconv/dw/kernel")
        'depthwise'
    """
    kind = resizable_kind(path)
    if kind is not None:
        return kind
    *owners, name = path.split("/")
    if name == "kernel":
        if owners[0] == "head" or owners[-1] in ("fc1", "fc2"):
            return "linear"
        return "depthwise" if owners[-1] in ("dwconv", "dw") else "conv"
    return "copy"


def pytorch_key_map(
    variant: Variant, model: keras.Model, checkpoint_keys: Collection[str] = ()
) -> tuple[KeyMap, set[str]]:
    """The official state-dict key of every variable of `model`, with its layout change.

    Args:
        variant: the variant the model was built from, e.g.
            ``catalog.variant("gfnet_ti")``.
        model: a model built by the variant's builder (any `include_top`,
            `pooling` and input size).
        checkpoint_keys: unused (every official checkpoint of a vision
            family has one layout); the key-map signature of
            :func:`keras_fourier.weights.convert.convert`.

    Returns:
        (official key -> (variable, transform), the official keys of the
        final ``norm`` and ``head`` when the model has no such layer).

    Raises:
        ValueError: a family without official checkpoints, or a model
            variable without an official counterpart (a model not built from
            `variant`).

    Example:
        >>> model = keras_fourier.models.GFNetTi(input_shape=(64, 64, 3))
        >>> keys, _ = pytorch_key_map(catalog.variant("gfnet_ti"), model)
        >>> keys["blocks.0.mlp.fc1.weight"][0].path
        'stage0_block0_ffn/fc1/kernel'
    """
    del checkpoint_keys
    keys = map_variables(
        model,
        variant.checkpoint_key,
        transform_for,
        f"Model {model.name!r} has variables without a counterpart in the official "
        f"{variant.key!r} checkpoints; was it built from another variant? Variables: ",
    )
    layer_names = {layer.name for layer in model.layers}
    ignored = {
        key
        for layer, layer_keys in OPTIONAL_LAYERS.items()
        if layer not in layer_names
        for key in layer_keys
    }
    return keys, ignored


def imagenet_checkpoint(variant: Variant, model: keras.Model) -> ImageNetRelease:
    """The official checkpoint that weights="imagenet" loads into `model`.

    The release trained at the model's input size if there is one (HorNet-L
    GF at 384), else the 224-pixel release.

    Args:
        variant: the variant the model was built from.
        model: the freshly built model.

    Returns:
        The :class:`~keras_fourier.weights.releases.ImageNetRelease` to download.

    Raises:
        ValueError: the variant has no official checkpoint (AFNONet, models
            of `build_model`), or only an ImageNet-22k one (HorNet-L) while
            the model has a head.

    Example:
        >>> imagenet_checkpoint(catalog.variant("gfnet_ti"), keras_fourier.GFNetTi()).file_name
        'gfnet-ti.pth'
    """
    releases = variant.releases
    if not releases:
        available = sorted(key for key, rows in variant.family.releases.items() if rows)
        raise ValueError(
            f"There is no official ImageNet checkpoint for {variant.key!r}; weights='imagenet' "
            f"is available for {available or 'no variant of ' + variant.family.name}. Use "
            "weights=None or a path."
        )
    size = tuple(model.inputs[0].shape[1:3])
    release = next((r for r in releases if (r.resolution, r.resolution) == size), releases[0])
    has_head = any(layer.name == "head" for layer in model.layers)
    if has_head and release.classes != 1000:
        raise ValueError(
            f"The official checkpoint of {variant.key!r} is trained on ImageNet-22k "
            f"({release.classes} classes) and has no ImageNet-1k head: weights='imagenet' "
            "with include_top=True is only available for variants with an ImageNet-1k "
            "checkpoint. Build it with include_top=False to load the backbone, or pass "
            f"the downloaded '{release.file_name}' as `weights` with classes={release.classes}."
        )
    return release


def load_variant_weights(variant: Variant, model: keras.Model, weights: str) -> None:
    """Loads `weights` into `model` (built from `variant`), all or nothing.

    Args:
        variant: the variant the model was built from.
        model: the freshly built model.
        weights: "imagenet" (the official checkpoint, downloaded and
            converted once: :func:`keras_fourier.weights.pipeline.load_release`),
            or the path to a `.weights.h5` or `.keras` file saved by
            keras_fourier or to an official PyTorch checkpoint (`.pth`/`.pt`).
            Files saved at another input size load too: their global filters
            and position embeddings are resized to the model's as the
            official fine-tuning code does.

    Raises:
        ValueError: unsupported file, a file that does not match the model
            (the model is then unchanged), or "imagenet" for a variant
            without a suitable checkpoint or when the download fails.

    Example:
        >>> model = keras_fourier.models.GFNetTi(include_top=False)
        >>> load_variant_weights(catalog.variant("gfnet_ti"), model, "gfnet-ti.pth")
    """
    key_map = functools.partial(pytorch_key_map, variant)
    description = f"{variant.key!r} as built (model {model.name!r})"
    load_release_or_file(
        model,
        weights,
        key_map,
        release_name="imagenet",
        release=lambda: imagenet_checkpoint(variant, model),
        label=f"weights='imagenet' for {variant.key!r}",
        description=description,
        refusal=f"Cannot load weights for {variant.key!r}: expected 'imagenet', a '.weights.h5' "
        "or '.keras' file, or an official PyTorch '.pth'/'.pt' checkpoint.",
    )
