"""The top classes of images, with probabilities (the library of `keras-fourier predict`).

A model trained by `keras-fourier train` (its run folder or a `.keras` file)
carries its class names ("0"-"9" for the digits, the folder names of
``dir:`` data, TFDS label names) and is fed images as its run evaluated
them: bilinear resize of the shorter side to ``size / 0.875`` and the centre
crop (:func:`keras_fourier.data.eval_transform`). A 1000-class model without
stored names is an ImageNet classifier: ImageNet names, and images are read
as the releases were evaluated (the DeiT/timm evaluation
transform of the official GFNet and HorNet code): the shorter side resized to
``int(size / crop_pct)`` with bicubic interpolation (antialiased, as PIL),
then the centre ``size`` x ``size`` crop (computed for the crop alone: the
whole image is never resized); crop_pct 0.875 at 224 pixels and
1.0 at 384 (HorNet's 384-pixel evaluation resizes without cropping).
"""

from __future__ import annotations

import numpy as np

from keras_fourier.data.augment import clip_to_value_range, eval_transform
from keras_fourier.data.checks import read_image_file
from keras_fourier.imagenet import NUM_CLASSES, decode_predictions


def eval_crop_pct(image_size: int) -> float:
    """The centre-crop fraction the official code evaluates with at `image_size`.

    Args:
        image_size: the model's input side.

    Returns:
        0.875 below 384 pixels, 1.0 from 384 on.

    Example:
        >>> eval_crop_pct(224)
        0.875
    """
    return 1.0 if image_size >= 384 else 0.875


def load_image(path: str, height: int, width: int, crop_pct: float = 0.875) -> np.ndarray:
    """Reads an image file as (height, width, 3) float32 RGB in 0-255, resized and centre-cropped.

    Args:
        path: a JPEG, PNG, GIF or BMP file.
        height: output height.
        width: output width.
        crop_pct: fraction of the resized image kept, in (0, 1]. Default 0.875.

    Returns:
        float32 array (height, width, 3).

    Raises:
        ValueError: the file cannot be read or decoded as an image, or
            `crop_pct` is not in (0, 1].

    Example:
        >>> load_image("cat.jpg", 224, 224).shape
        (224, 224, 3)
    """
    import tensorflow as tf

    if isinstance(crop_pct, bool) or not 0 < crop_pct <= 1:
        raise ValueError(f"`crop_pct` must be in (0, 1]. Received: crop_pct={crop_pct!r}")
    image = read_image_file(path)
    source_h, source_w = int(image.shape[0]), int(image.shape[1])
    scale = max(height / crop_pct / source_h, width / crop_pct / source_w)
    resized_h = max(height, int(source_h * scale))
    resized_w = max(width, int(source_w * scale))
    top, left = (resized_h - height) // 2, (resized_w - width) // 2
    # The centre crop of the resized image, computed from the original without resizing it
    # whole: the resize's own kernel (bicubic, antialiased) scaled and shifted to the crop.
    cropped = tf.raw_ops.ScaleAndTranslate(
        images=tf.cast(image, tf.float32)[None],
        size=[height, width],
        scale=[resized_h / source_h, resized_w / source_w],
        translation=[-float(top), -float(left)],
        kernel_type="keyscubic",
        antialias=True,
    )[0]
    cropped = tf.clip_by_value(cropped, 0.0, 255.0)
    return cropped.numpy()


def _probabilities(model, images: np.ndarray) -> np.ndarray:
    import keras

    outputs = np.asarray(model.predict(images, verbose=0), dtype=np.float64)
    head = model.layers[-1]
    activation = head.get_config().get("activation") if hasattr(head, "get_config") else None
    if activation != "softmax":
        outputs = keras.ops.convert_to_numpy(keras.ops.softmax(outputs))
    return outputs


def load_run_image(path: str, height: int, width: int, crop_pct: float = 0.875) -> np.ndarray:
    """Reads an image file as a training run's evaluation pipelines read theirs.

    Args:
        path: a JPEG, PNG, GIF or BMP file (grayscale files become RGB).
        height: output height.
        width: output width.
        crop_pct: the run's centre-crop fraction, in (0, 1]. Default 0.875.

    Returns:
        float32 array (height, width, 3) in 0-255.

    Raises:
        ValueError: the file cannot be read or decoded as an image.

    Example:
        >>> load_run_image("seven.png", 16, 16).shape
        (16, 16, 3)
    """
    import tensorflow as tf

    transform = eval_transform((height, width), crop_pct)
    image = read_image_file(path)
    return np.asarray(clip_to_value_range(transform(tf.cast(image, tf.float32))))


def predict(
    model,
    paths: list[str],
    top: int = 5,
    crop_pct: float | None = None,
    class_names: list[str] | None = None,
) -> list[list[tuple[str, str, float]]]:
    """The `top` classes of each image file, with probabilities.

    Args:
        model: an image classifier taking 0-255 RGB images of a fixed size
            (a keras_fourier model with its default preprocessing).
        paths: image files.
        top: classes per image. Default 5.
        crop_pct: centre-crop fraction; None (default): the official
            evaluation's (:func:`eval_crop_pct`) for ImageNet models, 0.875
            (a training run's) otherwise.
        class_names: the model's class names in label order, as a training
            run stores them. Default None: ImageNet names for a 1000-class
            model, else "class <index>".

    Returns:
        For each image, (id, class name, probability) tuples, best first; the
        id is the WordNet id of ImageNet classes, else the label index.

    Raises:
        ValueError: a model that is not an image classifier of a fixed size,
            class names that do not match its outputs, or an unreadable image.

    Example:
        >>> predict(keras_fourier.GFNetTi(weights="imagenet"), ["cat.jpg"], top=1)
        [[('n02123045', 'tabby', 0.62)]]
    """
    shape = model.input_shape
    if not isinstance(shape, tuple) or len(shape) != 4 or shape[-1] != 3 or None in shape[1:3]:
        raise ValueError(
            f"predict needs a model of RGB images of a fixed size. Received: input_shape={shape}"
        )
    output = model.output_shape
    if not isinstance(output, tuple) or len(output) != 2 or output[-1] is None:
        raise ValueError(f"predict needs a classifier of one class vector. Received: {output}")
    classes = output[-1]
    if class_names is not None and len(class_names) != classes:
        raise ValueError(
            f"The model has {classes} classes but {len(class_names)} class names were given."
        )
    _, height, width, _ = shape
    if class_names is None and classes == NUM_CLASSES:
        crop_pct = eval_crop_pct(min(height, width)) if crop_pct is None else crop_pct
        images = np.stack([load_image(path, height, width, crop_pct) for path in paths])
        return decode_predictions(_probabilities(model, images), top=top)
    names = class_names or [f"class {index}" for index in range(classes)]
    crop_pct = 0.875 if crop_pct is None else crop_pct
    images = np.stack([load_run_image(path, height, width, crop_pct) for path in paths])
    results = []
    for row in _probabilities(model, images):
        best = np.argsort(-row, kind="stable")[: min(top, classes)]
        results.append([(str(index), names[index], float(row[index])) for index in best])
    return results
