"""Inpainting input pipelines: images with random-walk pixel masks (AFNO's pretraining task).

AFNO (Guibas et al., 2022, appendix A.2) masks pixel intensities to zero
along a uniform random walk: a start pixel drawn uniformly from the image,
then `steps` moves each to one of the four neighbours drawn uniformly
(3,136 steps on 224x224 images, that is H * W / 16). The paper does not say
what happens at the border; here a move off the image leaves the walk where
it is.

`load_inpainting_dataset` returns batches of ({"masked_image", "mask"},
image): the image with the walk's pixels set to 0 (B, S, S, 3), the mask
(B, S, S, 1) with 1 on those pixels, and the original image as the target,
all float32 with images in [0, 255]. Training masks are new every epoch;
validation and test masks are the same on every pass (fixed seeds), so
PSNR and SSIM compare between epochs and runs.

Sources: the images of the segmentation sources of
:mod:`keras_fourier.data.segmentation` ("digits": the 64x64 digit canvases,
"segdir:<path>", masked TFDS datasets; their masks are not used), and every
other image source of :func:`keras_fourier.data.load_image_dataset`
("tfds:<name>", "dir:<path>").
"""

from __future__ import annotations

import tensorflow as tf

from keras_fourier.data.images import load_image_dataset
from keras_fourier.data.segmentation import is_segmentation_source, load_segmentation_dataset

# The seed of the masks of evaluation splits (the same masks on every pass).
EVAL_MASK_SEED = 20_220_101
MASKED_IMAGE_KEY = "masked_image"
MASK_KEY = "mask"
AUTOTUNE = tf.data.AUTOTUNE


def default_walk_steps(height: int, width: int) -> int:
    """AFNO's walk length, H * W / 16 (3,136 on 224x224).

    Example:
        >>> default_walk_steps(224, 224)
        3136
    """
    return max(1, (height * width) // 16)


def random_walk_paths(
    batch: int, height: int, width: int, steps: int, seed: tf.Tensor
) -> tf.Tensor:
    """The pixels visited by `batch` random walks, start included.

    Args:
        batch: the number of walks.
        height: the image height.
        width: the image width.
        steps: the moves of each walk.
        seed: a stateless seed, shape (2,) int.

    Returns:
        int32 (steps + 1, batch, 2): (row, column) of each walk after each move.
    """
    seeds = tf.random.split(tf.cast(seed, tf.int64), 2)
    limits = tf.constant([height, width], tf.int32)
    start = tf.random.stateless_uniform((batch, 2), seeds[0], 0, 2**30, tf.int32) % limits
    directions = tf.constant([[-1, 0], [1, 0], [0, -1], [0, 1]], tf.int32)
    choices = tf.random.stateless_uniform((steps, batch), seeds[1], 0, 4, tf.int32)
    moves = tf.gather(directions, choices)

    def step(position, move):
        return tf.clip_by_value(position + move, 0, limits - 1)

    path = tf.scan(step, moves, initializer=start)
    return tf.concat([start[None], path], 0)


def random_walk_masks(
    batch: int, height: int, width: int, seed: tf.Tensor, steps: int | None = None
) -> tf.Tensor:
    """AFNO's random-walk pixel masks.

    Args:
        batch: the number of masks.
        height: the image height.
        width: the image width.
        seed: a stateless seed, shape (2,) int; the same seed gives the same masks.
        steps: moves of each walk. Default None: `default_walk_steps`.

    Returns:
        float32 (batch, height, width): 1 on the pixels the walk visited.

    Example:
        >>> masks = random_walk_masks(2, 32, 32, tf.constant([0, 1]))
        >>> masks.shape, float(tf.reduce_max(tf.reduce_sum(masks, [1, 2]))) <= 65
        (TensorShape([2, 32, 32]), True)
    """
    steps = default_walk_steps(height, width) if steps is None else steps
    path = random_walk_paths(batch, height, width, steps, seed)
    walks = tf.broadcast_to(tf.range(batch)[None, :, None], (steps + 1, batch, 1))
    indices = tf.reshape(tf.concat([walks, path], -1), (-1, 3))
    visits = tf.scatter_nd(indices, tf.ones(tf.shape(indices)[:1]), (batch, height, width))
    return tf.cast(visits > 0, tf.float32)


def mask_batch(
    images: tf.Tensor, seed: tf.Tensor, steps: int | None = None
) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
    """({"masked_image", "mask"}, images) for a batch of images and a stateless seed.

    Args:
        images: float (B, H, W, C) with static H and W.
        seed: a stateless seed, shape (2,) int.
        steps: moves of each walk. Default None: `default_walk_steps`.

    Returns:
        The model inputs (masked images, masks (B, H, W, 1)) and the target images.
    """
    height, width = images.shape[1], images.shape[2]
    masks = random_walk_masks(tf.shape(images)[0], height, width, seed, steps)[..., None]
    inputs = {MASKED_IMAGE_KEY: images * (1.0 - masks), MASK_KEY: masks}
    return inputs, images


def load_inpainting_dataset(
    source: str = "digits",
    split: str = "train",
    *,
    image_size: int = 64,
    batch_size: int = 16,
    training: bool | None = None,
    steps: int | None = None,
    data_dir: str | None = None,
    drop_remainder: bool | None = None,
    seed: int = 0,
) -> tf.data.Dataset:
    """Build a batched inpainting pipeline (see the module docstring).

    Args:
        source: an image or segmentation source. Default "digits".
        split: the split. Default "train".
        image_size: output height and width. Default 64.
        batch_size: batch size. Default 16.
        training: shuffle, and draw new masks every epoch. Default None:
            `split == "train"`.
        steps: moves of each walk. Default None: H * W / 16.
        data_dir: TFDS data directory. Default None.
        drop_remainder: drop a last partial batch. Default None: `training`.
        seed: seed of shuffling and training masks. Default 0.

    Returns:
        A `tf.data.Dataset` of ({"masked_image": (B, S, S, 3), "mask":
        (B, S, S, 1)}, images (B, S, S, 3)) batches.

    Example:
        >>> data = load_inpainting_dataset("digits", "test", batch_size=4)
        >>> inputs, images = next(iter(data))
        >>> inputs["mask"].shape, images.shape
        (TensorShape([4, 64, 64, 1]), TensorShape([4, 64, 64, 3]))
    """
    training = split == "train" if training is None else training
    options = {
        "image_size": image_size,
        "batch_size": batch_size,
        "training": training,
        "data_dir": data_dir,
        "drop_remainder": drop_remainder,
        "seed": seed,
    }
    if is_segmentation_source(source):
        images = load_segmentation_dataset(source, split, **options)
        images = images.map(lambda images, masks: images)
    else:
        images = load_image_dataset(source, split, **options)
        images = images.map(lambda images, labels: images)
    if training:
        seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
    else:
        seeds = tf.data.Dataset.random(seed=EVAL_MASK_SEED)
    seeds = seeds.batch(2)
    dataset = tf.data.Dataset.zip((images, seeds)).map(
        lambda images, seed: mask_batch(images, seed, steps), num_parallel_calls=AUTOTUNE
    )
    return dataset.prefetch(AUTOTUNE)
