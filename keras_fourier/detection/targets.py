"""The ground truth's layout shared by the data pipelines, the losses, the metrics and `bench`.

A detection target is (B, MAX_BOXES, 8) rows, columns `TARGET_COLUMNS`; rows
past an image's boxes have class `PADDING_CLASS`. Instance segmentation adds
each row's mask in its box's frame, `MASK_CROP` x `MASK_CROP`. Kept free of
TensorFlow so that a model's timed training step (``keras-fourier bench`` on a
machine with only JAX or PyTorch) builds its targets from the same layout.
"""

TARGET_COLUMNS = ("x1", "y1", "x2", "y2", "class", "iscrowd", "area", "scale")
# The class of a padding row of the targets.
PADDING_CLASS = -1
# Ground-truth rows per image of the pipelines.
MAX_BOXES = 100
# The side of the box-local instance masks of the targets.
MASK_CROP = 56
