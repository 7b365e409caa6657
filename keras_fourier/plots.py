"""Pictures of what a model learned and how it trained: global filters and history curves.

matplotlib is an optional dependency (``pip install "keras-fourier[plots]"``);
figures are drawn on the non-interactive Agg canvas, so they work in a
notebook, a script or a headless job alike, and PNGs are written atomically.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from keras_fourier.fileio import atomic_save
from keras_fourier.layers import GlobalFilter, GlobalLocalFilter
from keras_fourier.run_folder import RunFolder, read_history

if TYPE_CHECKING:
    import keras
    from matplotlib.figure import Figure

PLOTS_EXTRA = 'pip install "keras-fourier[plots]"'


def new_figure(width: float, height: float) -> Figure:
    """A matplotlib Figure on the non-interactive Agg canvas, laid out "constrained".

    Args:
        width: inches.
        height: inches.

    Returns:
        The Figure (draw on ``figure.subplots(...)``, write with :func:`save_png`).

    Raises:
        ImportError: matplotlib is not installed, naming the extra to install.

    Example:
        >>> axis = new_figure(4, 3).subplots()
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            f"Plotting needs matplotlib, an optional dependency of keras_fourier: {PLOTS_EXTRA}"
        ) from error
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_png(figure: Figure, path: str | os.PathLike, dpi: int = 100) -> str:
    """Writes `figure` as a PNG atomically (:func:`keras_fourier.fileio.atomic_save`).

    Args:
        figure: a matplotlib figure.
        path: the `.png` file; parent folders are created.
        dpi: resolution. Default 100.

    Returns:
        `path` as a string.

    Example:
        >>> save_png(plot_history("runs/default"), "runs/default/history.png")
        'runs/default/history.png'
    """
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_save(path, lambda temporary: figure.savefig(temporary, format="png", dpi=dpi))
    return path


def global_filters(model_or_layer: keras.layers.Layer) -> list[tuple[str, np.ndarray]]:
    """The learned global filters of a model (or one layer), as complex arrays (C, h, w').

    GFNet's ``GlobalFilter`` stores (h, w', C, 2) and HorNet's
    ``GlobalLocalFilter`` (C, h, w', 2), with ``w' = w // 2 + 1`` (the rfft2
    half-spectrum); both are returned as complex (C, h, w').

    Args:
        model_or_layer: a Keras model or layer holding GlobalFilter or
            GlobalLocalFilter layers (or one of them).

    Returns:
        (layer name, filter) pairs in the model's layer order.

    Example:
        >>> [(name, f.shape) for name, f in global_filters(GFNetTi())][0]
        ('stage0_block0_mixer', (256, 14, 8))
    """
    filters = []
    for layer in model_or_layer._flatten_layers(include_self=True, recursive=True):
        if isinstance(layer, (GlobalFilter, GlobalLocalFilter)):
            weight = np.asarray(layer.complex_weight.numpy(), dtype=np.float32)
            if isinstance(layer, GlobalFilter):
                weight = np.transpose(weight, (2, 0, 1, 3))
            filters.append((layer.name, weight[..., 0] + 1j * weight[..., 1]))
    return filters


def plot_filters(
    model_or_layer: keras.layers.Layer,
    path: str | os.PathLike | None = None,
    *,
    channels: int = 6,
) -> Figure:
    """Draws the log-amplitude of the learned global filters, one row per block (GFNet Fig. 4a).

    Each image is ``log |K|`` of one channel's frequency-domain filter: the
    rfft2 half-spectrum, vertical frequency centred (fftshift over rows),
    horizontal frequency from 0 to Nyquist left to right.

    Args:
        model_or_layer: a model (GFNet, GFNet-H, HorNet-GF, a build_model
            with global filters) or a GlobalFilter/GlobalLocalFilter layer.
        path: where to write the PNG (atomically); None (default) writes nothing.
        channels: channels shown per block (the first ones). Default 6.

    Returns:
        The matplotlib Figure (shown inline by notebooks).

    Raises:
        ValueError: no global filters in `model_or_layer` (e.g. AFNO,
            HorNet 7x7), or `channels` < 1.
        ImportError: matplotlib is not installed.

    Example:
        >>> plot_filters(keras_fourier.GFNetXS(weights="imagenet"), "filters.png")
    """
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"`channels` must be a positive int. Received: channels={channels!r}")
    filters = global_filters(model_or_layer)
    if not filters:
        raise ValueError(
            "plot_filters needs GlobalFilter or GlobalLocalFilter layers (GFNet, GFNet-H, "
            f"HorNet GF); {model_or_layer.name!r} has none."
        )
    columns = min(channels, max(weight.shape[0] for _, weight in filters))
    figure = new_figure(1.2 * columns + 1.5, 1.2 * len(filters) + 0.6)
    figure.suptitle("log |global filter| per block (rows: vertical freq. centred)")
    axes = figure.subplots(len(filters), columns, squeeze=False)
    for row, (name, weight) in enumerate(filters):
        amplitude = np.log(np.abs(weight) + 1e-8)
        for column in range(columns):
            axis = axes[row, column]
            axis.set_xticks([])
            axis.set_yticks([])
            if column < weight.shape[0]:
                axis.imshow(np.fft.fftshift(amplitude[column], axes=0), cmap="viridis")
            else:
                axis.set_axis_off()
            if row == 0:
                axis.set_title(f"channel {column}", fontsize=8)
        axes[row, 0].set_ylabel(name, fontsize=7, rotation=0, ha="right", va="center")
    if path is not None:
        save_png(figure, path)
    return figure


def plot_history(run_dir: str | os.PathLike, path: str | os.PathLike | None = None) -> Figure:
    """Draws the training curves of a run from its ``history.csv``.

    One panel per metric (loss, accuracy, ...), the training value and, when
    logged, the ``val_`` value against the epoch; the learning rate, if
    logged, gets its own panel.

    Args:
        run_dir: the run folder of ``keras-fourier train --out`` (or the
            ``history.csv`` file itself).
        path: where to write the PNG (atomically); None (default) writes nothing.

    Returns:
        The matplotlib Figure.

    Raises:
        ValueError: there is no history, or it has no completed epoch.
        ImportError: matplotlib is not installed.

    Example:
        >>> plot_history("runs/default", "runs/default/history.png")
    """
    run_dir = os.fspath(run_dir)
    csv_path = run_dir if run_dir.endswith(".csv") else RunFolder(run_dir).history
    rows = read_history(csv_path)
    if not rows:
        raise ValueError(
            f"No training history in {csv_path!r}: expected the {RunFolder.HISTORY} of a run "
            "folder with at least one completed epoch."
        )
    names = sorted({key for row in rows for key in row} - {"epoch"})
    metrics = [name for name in names if not name.startswith("val_")]
    metrics += [name[4:] for name in names if name.startswith("val_") and name[4:] not in names]
    figure = new_figure(4.0 * len(metrics), 3.2)
    axes = figure.subplots(1, len(metrics), squeeze=False)[0]
    for axis, metric in zip(axes, metrics, strict=True):
        for key, style in ((metric, "-o"), (f"val_{metric}", "--s")):
            points = [(row["epoch"] + 1, row[key]) for row in rows if key in row]
            if points:
                epochs, values = zip(*points, strict=True)
                axis.plot(epochs, values, style, markersize=3, label=key)
        axis.set_title(metric)
        axis.set_xlabel("epoch")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    if path is not None:
        save_png(figure, path)
    return figure


__all__ = ["global_filters", "new_figure", "plot_filters", "plot_history", "save_png"]
