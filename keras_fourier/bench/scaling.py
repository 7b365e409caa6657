"""Scaling: one block's latency and peak memory against the number of tokens, per mixer.

One block (mixer and MLP, pre-norm residuals) at width 384 for every token
mixer on (grid, grid) tokens (GFNet Fig. 2), and FNet-style 1D mixing against
sequence length (FNet Table 5). Each series runs in a fresh process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from keras_fourier.bench.measure import available_mib, median_seconds, peak_rss_mib, resident_mib
from keras_fourier.bench.report import format_row
from keras_fourier.flop_count import flops
from keras_fourier.layers import Mlp
from keras_fourier.models.family import FOURIER_MIXERS, MIXER_NAMES, MIXERS
from keras_fourier.models.vision import component_layer
from keras_fourier.plots import new_figure, save_png
from keras_fourier.settings import BENCH_JIT, SCALING_GRIDS, SCALING_SEQUENCES, SCALING_WIDTH


def attention_fits(tokens: int, width: int, batch_size: int) -> bool:
    """Whether self-attention's score and softmax matrices fit in the available memory.

    Two float32 (heads, tokens, tokens) matrices per example, as measured
    (16384 tokens, 6 heads: about 11 GiB), against 80% of MemAvailable;
    True where that cannot be read.
    """
    available = available_mib()
    heads = max(1, width // 64)
    need = 2 * batch_size * heads * tokens**2 * 4 / 2**20
    return available is None or need <= 0.8 * available


def scaling_block(mixer: str, tokens_shape: tuple[int, ...], width: int, fft_impl: str):
    """One pre-norm block, ``x + mixer(norm(x))`` then ``x + mlp(norm(x))``, as a model.

    AFNO uses 8 blocks, gnConv order 3, attention one head per 64 channels
    (DeiT); every other argument is the layer's default.
    """
    import keras

    kwargs = {"fft_impl": fft_impl} if mixer in FOURIER_MIXERS else {}
    if mixer == "afno":
        kwargs["num_blocks"] = 8
    if mixer in ("gnconv", "gnconv_gf"):
        kwargs["order"] = 3
    if mixer == "attention":
        kwargs["num_heads"] = max(1, width // 64)
    inputs = keras.Input((*tokens_shape, width))
    norm = keras.layers.LayerNormalization(epsilon=1e-6)
    x = inputs + component_layer(MIXERS[mixer], **kwargs)(norm(inputs))
    x = x + Mlp()(keras.layers.LayerNormalization(epsilon=1e-6)(x))
    return keras.Model(inputs, x, name=f"{mixer}_block")


def scaling_series(
    mixer: str,
    layout: str,
    shapes: Sequence[tuple[int, ...]],
    impl: str,
    width: int,
    batch_size: int,
    jit_compile: str,
    repeats: int,
    precision: str,
) -> list[dict[str, Any]]:
    """One mixer's points in increasing size; :func:`run_scaling` runs it in a fresh process.

    Attention points whose score matrices do not fit (:func:`attention_fits`)
    end the series with a printed line.
    """
    import keras
    import numpy as np

    keras.mixed_precision.set_global_policy(precision)
    jit = BENCH_JIT[jit_compile]
    baseline = resident_mib()
    rows = []
    for shape in shapes:
        tokens = int(np.prod(shape))
        if mixer == "attention" and not attention_fits(tokens, width, batch_size):
            print(f"mixer={mixer}  tokens={tokens}  skipped: not enough memory", flush=True)
            break
        model = scaling_block(mixer, shape, width, impl if impl != "-" else "auto")
        model.compile(jit_compile=jit)
        x = np.random.default_rng(0).standard_normal((batch_size, *shape, width))
        x = x.astype("float32")
        seconds = median_seconds(lambda model=model, x=x: model.predict_on_batch(x), repeats)
        # Points grow, so the process's high-water mark is this point's peak.
        peak = None if baseline is None else peak_rss_mib() - baseline
        rows.append(
            {
                "mixer": mixer,
                "layout": layout,
                "shape": "x".join(map(str, shape)),
                "tokens": tokens,
                "width": width,
                "batch_size": batch_size,
                "fft_impl": impl,
                "latency_ms": round(1e3 * seconds, 3),
                "peak_mib": None if peak is None else round(peak, 1),
                "flops_per_sample": flops(model),
            }
        )
        print(format_row(rows[-1]), flush=True)
        del model
    return rows


def run_scaling(
    *,
    mixers: Sequence[str] = MIXER_NAMES,
    grids: Sequence[int] = SCALING_GRIDS,
    sequences: Sequence[int] = SCALING_SEQUENCES,
    width: int = SCALING_WIDTH,
    batch_size: int = 1,
    fft_impls: Sequence[str] = ("auto",),
    jit_compile: str = "auto",
    repeats: int = 5,
    precision: str = "float32",
) -> list[dict[str, Any]]:
    """Latency and peak memory of one block against the token count.

    2D mixers run on (grid, grid) tokens; "fourier" and "attention" (the
    quadratic baseline) also run FNet-style on 1D sequences. Each series (a
    mixer, a layout and an fft_impl) runs in a fresh process, its points in
    increasing size, so a point's memory figure is the resident memory above
    that process's start at the point's peak (weights, activations and
    workspace), unaffected by the other series.

    Returns:
        One row per (mixer, layout, tokens, fft_impl).
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    series = [(m, "2d", [(g, g) for g in sorted(grids)]) for m in mixers]
    series += [
        (m, "1d", [(n,) for n in sorted(sequences)])
        for m in mixers
        if m in ("fourier", "attention")
    ]
    rows = []
    context = multiprocessing.get_context("spawn")
    for mixer, layout, shapes in series:
        for impl in fft_impls if mixer in FOURIER_MIXERS else ("-",):
            with ProcessPoolExecutor(1, mp_context=context) as pool:
                rows += pool.submit(
                    scaling_series,
                    mixer,
                    layout,
                    shapes,
                    impl,
                    width,
                    batch_size,
                    jit_compile,
                    repeats,
                    precision,
                ).result()
    return rows


def plot_scaling(rows: Sequence[dict[str, Any]], path: str, title: str) -> bool:
    """Writes latency and peak memory against tokens as a PNG; False without matplotlib."""
    try:
        figure = new_figure(11, 4.2)
    except ImportError:
        return False
    axes = figure.subplots(1, 2)
    series: dict[str, list] = {}
    for row in rows:
        label = row["mixer"] + (" (1D)" if row["layout"] == "1d" else "")
        if row["fft_impl"] not in ("-", "auto"):
            label += f" [{row['fft_impl']}]"
        series.setdefault(label, []).append(row)
    for label, points in series.items():
        points = sorted(points, key=lambda r: r["tokens"])
        tokens = [p["tokens"] for p in points]
        style = "--" if "(1D)" in label else "-"
        axes[0].plot(tokens, [p["latency_ms"] for p in points], style, marker="o", label=label)
        axes[1].plot(tokens, [p["peak_mib"] or math.nan for p in points], style, marker="o")
    for axis, ylabel in zip(
        axes, ("latency (ms)", "resident memory added at peak (MiB)"), strict=True
    ):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("tokens")
        axis.set_ylabel(ylabel)
        axis.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.suptitle(title, fontsize=9)
    save_png(figure, path, dpi=110)
    return True
