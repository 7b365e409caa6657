"""`keras-fourier bench`: throughput, latency, memory and scaling of models and mixers.

Two modes:

* model mode, ``keras-fourier bench MODEL``: MODEL is a model name (random
  init), a ``.keras`` file or a ``.tflite`` file. Measures inference
  (``predict_on_batch``) and training-step (``train_on_batch`` after a plain
  ``compile(AdamW, cross-entropy)``) images per second at a batch size,
  batch-1 latency and the resident memory each phase adds at its peak, and reports the
  model's FLOPs (:func:`keras_fourier.flops`) with the fraction of this
  machine's measured float32 matmul rate that the inference reaches.
* scaling mode, ``keras-fourier bench --scaling``: one block (mixer and MLP,
  pre-norm residuals) at width 384, latency and peak memory against the
  number of tokens, for every token mixer (GFNet Fig. 2), and FNet-style 1D
  mixing against sequence length (FNet Table 5). Writes a PNG plot when
  matplotlib is installed (``pip install keras-fourier[plots]``).

Every figure is a median of repeated timings in this process, after warm-up
calls. Results are printed as a table and written atomically as JSON and CSV
(and PNG) into ``--out``. Timings are measurements of one machine at one
moment, never assertions: compare two sides only when measured in one session.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

BACKENDS = ("tensorflow", "jax", "torch")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
JIT_CHOICES = ("auto", "on", "off")
SCALING_MIXERS = ("global_filter", "afno", "fourier", "gnconv", "gnconv_gf", "attention")
# Up to 16384 tokens; self-attention's points there need about 11 GiB and are skipped
# where the machine has less memory available (see _attention_fits).
SCALING_GRIDS = (14, 28, 42, 56, 64, 96, 128)
SCALING_SEQUENCES = (512, 1024, 2048, 4096, 8192, 16384)
SCALING_WIDTH = 384


# ----------------------------------------------------------------------------- files


def write_atomic(path: str, data: bytes) -> None:
    """Writes `data` to `path` atomically, creating its folder."""
    from keras_fourier.fileio import atomic_write_bytes

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write_bytes(path, data)


def _csv_bytes(rows: Sequence[dict[str, Any]]) -> bytes:
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue().encode()


def write_results(out: str, stem: str, report: dict[str, Any]) -> list[str]:
    """Writes `report` as OUT/STEM.json and its rows as OUT/STEM.csv, atomically.

    Returns:
        The paths written.
    """
    paths = [os.path.join(out, f"{stem}.json"), os.path.join(out, f"{stem}.csv")]
    write_atomic(paths[0], (json.dumps(report, indent=2) + "\n").encode())
    write_atomic(paths[1], _csv_bytes(report["rows"]))
    return paths


# ----------------------------------------------------------------------------- measuring


class PeakMemory:
    """Resident memory (MiB) that a `with` block added at its peak.

    On Linux the kernel's high-water mark (VmHWM) is reset to the current
    resident size on entry through /proc/self/clear_refs, so the figure is
    the block's peak minus the resident size at its start. Memory that the
    allocator kept from earlier work and reuses is not counted again.
    Elsewhere it is the process's peak so far.
    """

    def __enter__(self) -> PeakMemory:
        self._start = 0.0
        try:
            with open("/proc/self/clear_refs", "w") as file:
                file.write("5")
            self._start = _status_mib("VmRSS:") or 0.0
        except OSError:
            pass
        self.mib: float | None = None
        return self

    def __exit__(self, *exc) -> None:
        self.mib = max(0.0, peak_rss_mib() - self._start)


def _status_mib(field: str) -> float | None:
    try:
        with open("/proc/self/status") as file:
            for line in file:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _available_mib() -> float | None:
    """MemAvailable of /proc/meminfo in MiB, or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _attention_fits(tokens: int, width: int, batch_size: int) -> bool:
    """Whether self-attention's score and softmax matrices fit in the available memory.

    Two float32 (heads, tokens, tokens) matrices per example, as measured
    (16384 tokens, 6 heads: about 11 GiB), against 80% of MemAvailable;
    True where that cannot be read.
    """
    available = _available_mib()
    heads = max(1, width // 64)
    need = 2 * batch_size * heads * tokens**2 * 4 / 2**20
    return available is None or need <= 0.8 * available


def peak_rss_mib() -> float:
    """The process's resident-memory high-water mark in MiB."""
    peak = _status_mib("VmHWM:")
    if peak is not None:
        return peak
    import resource

    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    """Median wall time of `repeats` calls of `fn` after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_rate(size: int = 1024, repeats: int = 5) -> float:
    """This machine's float32 matmul rate in multiply-adds per second (keras.ops).

    Args:
        size: side of the square matrices. Default 1024.
        repeats: timed products (median). Default 5.

    Returns:
        size**3 / median seconds of one product.
    """
    import keras
    import numpy as np

    a = keras.ops.convert_to_tensor(np.random.default_rng(0).random((size, size), "float32"))
    product = keras.ops.matmul

    def run():
        keras.ops.convert_to_numpy(product(a, a))

    return size**3 / median_seconds(run, repeats)


def machine() -> dict[str, Any]:
    """The machine's description written beside every result."""
    import keras

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "keras": keras.__version__,
        "backend": keras.backend.backend(),
    }


# ----------------------------------------------------------------------------- models


def named_model_size(name: str) -> tuple[int, int]:
    """The input size and classes a model name is benchmarked at, unless given.

    Args:
        name: a name of `keras_fourier.training.model_names()` (or a file).

    Returns:
        (image size, classes): for the small vision presets, the model that
        ``keras-fourier train --model NAME`` trains (on the digits: 16 pixels
        for gfnet_tiny, 10 classes); for every other name, 224 and 1000
        (ImageNet, as the papers measure).

    Example:
        >>> named_model_size("gfnet_tiny"), named_model_size("gfnet_ti")
        ((16, 10), (224, 1000))
    """
    from keras_fourier.data import get_num_classes
    from keras_fourier.training import TrainConfig
    from keras_fourier.training.catalog import VISION_PRESETS

    if name in VISION_PRESETS:
        config = TrainConfig(model=name)
        return config.resolved_image_size(), get_num_classes(config.data)
    return 224, 1000


def with_fft_impl(model, fft_impl: str):
    """A copy of `model` whose Fourier layers use `fft_impl`, same weights."""

    def replace(node):
        if isinstance(node, dict):
            return {k: fft_impl if k == "fft_impl" else replace(v) for k, v in node.items()}
        if isinstance(node, list):
            return [replace(v) for v in node]
        return node

    clone = model.__class__.from_config(replace(model.get_config()))
    clone.set_weights(model.get_weights())
    return clone


def _random_inputs(model, batch_size: int):
    import keras
    import numpy as np

    rng = np.random.default_rng(0)

    def make(tensor):
        shape = (batch_size, *tensor.shape[1:])
        if "int" in str(tensor.dtype):
            return np.zeros(shape, dtype=str(tensor.dtype))
        return (255 * rng.random(shape)).astype("float32")

    return keras.tree.map_structure(make, model._inputs_struct)


def _classes(model) -> int | None:
    output = model.output
    if isinstance(output, dict | list | tuple) or len(output.shape) != 2:
        return None
    return int(output.shape[-1])


def benchmark_model(
    model,
    *,
    batch_size: int = 16,
    jit_compile: str = "auto",
    repeats: int = 5,
    train: bool = True,
) -> dict[str, Any]:
    """Inference and training-step throughput, batch-1 latency and peak memory of `model`.

    Args:
        model: a built Keras model with static input shapes besides the batch.
        batch_size: images per call. Default 16.
        jit_compile: "auto" (Keras' default), "on" or "off", passed to compile().
        repeats: timed calls per figure (median). Default 5.
        train: also time `train_on_batch` (classifiers only). Default True.

    Returns:
        A dict of the figures (img/s, ms, MiB).
    """
    import keras
    import numpy as np

    jit = {"auto": "auto", "on": True, "off": False}[jit_compile]
    inputs = _random_inputs(model, batch_size)
    single = _random_inputs(model, 1)
    classes = _classes(model)
    result: dict[str, Any] = {}
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        jit_compile=jit,
    )
    with PeakMemory() as memory:
        seconds = median_seconds(lambda: model.predict_on_batch(inputs), repeats)
    result["predict_img_s"] = batch_size / seconds
    result["predict_peak_mib"] = memory.mib
    result["latency_ms"] = 1e3 * median_seconds(lambda: model.predict_on_batch(single), repeats)
    if train and classes is not None:
        labels = np.arange(batch_size) % classes
        with PeakMemory() as memory:
            seconds = median_seconds(lambda: model.train_on_batch(inputs, labels), repeats)
        result["train_img_s"] = batch_size / seconds
        result["train_peak_mib"] = memory.mib
    return result


def benchmark_tflite(
    path: str, *, batch_size: int = 16, threads: int | None = None, repeats: int = 5
) -> dict[str, Any]:
    """Inference throughput and batch-1 latency of a `.tflite` file (ai_edge_litert).

    Args:
        path: the TFLite file (float32, dynamic-range or int8).
        batch_size: rows per invoke for the throughput. Default 16.
        threads: interpreter threads. Default None: os.cpu_count().
        repeats: timed invokes (median). Default 5.

    Returns:
        A dict with predict_img_s, latency_ms, predict_peak_mib and the input dtype.
    """
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    from keras_fourier._startup import native_output_filtered

    def timed(batch: int) -> tuple[float, float | None, str]:
        with PeakMemory() as memory:
            interpreter = Interpreter(model_path=path, num_threads=threads or os.cpu_count())
            detail = interpreter.get_input_details()[0]
            interpreter.resize_tensor_input(detail["index"], [batch, *detail["shape"][1:]])
            with native_output_filtered():  # LiteRT's XNNPACK delegate line
                interpreter.allocate_tensors()
            detail = interpreter.get_input_details()[0]
            rng = np.random.default_rng(0)
            data = (255 * rng.random(detail["shape"])).astype(detail["dtype"])
            interpreter.set_tensor(detail["index"], data)
            seconds = median_seconds(interpreter.invoke, repeats)
        return seconds, memory.mib, np.dtype(detail["dtype"]).name

    seconds, peak, dtype = timed(batch_size)
    latency, _, _ = timed(1)
    return {
        "predict_img_s": batch_size / seconds,
        "predict_peak_mib": peak,
        "latency_ms": 1e3 * latency,
        "input_dtype": dtype,
    }


# ----------------------------------------------------------------------------- scaling


def scaling_block(mixer: str, tokens_shape: tuple[int, ...], width: int, fft_impl: str):
    """One pre-norm block, ``x + mixer(norm(x))`` then ``x + mlp(norm(x))``, as a model.

    AFNO uses 8 blocks, gnConv order 3, attention one head per 64 channels
    (DeiT); every other argument is the layer's default.
    """
    import keras

    from keras_fourier.layers import Mlp
    from keras_fourier.models.vision import FOURIER_MIXERS, MIXERS

    kwargs = {"fft_impl": fft_impl} if mixer in FOURIER_MIXERS else {}
    if mixer == "afno":
        kwargs["num_blocks"] = 8
    if mixer in ("gnconv", "gnconv_gf"):
        kwargs["order"] = 3
    if mixer == "attention":
        kwargs["num_heads"] = max(1, width // 64)
    inputs = keras.Input((*tokens_shape, width))
    norm = keras.layers.LayerNormalization(epsilon=1e-6)
    x = inputs + MIXERS[mixer](**kwargs)(norm(inputs))
    x = x + Mlp()(keras.layers.LayerNormalization(epsilon=1e-6)(x))
    return keras.Model(inputs, x, name=f"{mixer}_block")


def _scaling_series(
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
    """One mixer's points in increasing size; run in a fresh process by run_scaling."""
    import keras
    import numpy as np

    from keras_fourier import flops

    keras.mixed_precision.set_global_policy(precision)
    jit = {"auto": "auto", "on": True, "off": False}[jit_compile]
    baseline = _status_mib("VmRSS:")
    rows = []
    for shape in shapes:
        tokens = int(np.prod(shape))
        if mixer == "attention" and not _attention_fits(tokens, width, batch_size):
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
        print(_format_row(rows[-1]), flush=True)
        del model
    return rows


def run_scaling(
    *,
    mixers: Sequence[str] = SCALING_MIXERS,
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

    from keras_fourier.models.vision import FOURIER_MIXERS

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
                    _scaling_series,
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
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
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
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    write_atomic(path, buffer.getvalue())
    return True


# ----------------------------------------------------------------------------- command


def _cell(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _format_row(row: dict[str, Any]) -> str:
    return "  ".join(f"{key}={_cell(value)}" for key, value in row.items() if value is not None)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as an aligned text table, one column per key."""
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    cells = [columns] + [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(text.rjust(width) for text, width in zip(line, widths, strict=True))
        for line in cells
    )


def _comma(choices: Sequence[str] | None, cast: Callable = str):
    def parse(text: str):
        values = [cast(v.strip()) for v in text.split(",") if v.strip()]
        if not values or (choices is not None and any(v not in choices for v in values)):
            expected = f" of {', '.join(choices)}" if choices else ""
            raise argparse.ArgumentTypeError(f"expected a comma-separated list{expected}: {text!r}")
        return values

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `keras-fourier bench` to `parser`."""
    from keras_fourier.layers.spectral import FFT_IMPLS

    add = parser.add_argument
    add("model", nargs="?", metavar="MODEL", help="model name, .keras or .tflite file")
    add("--scaling", action="store_true", help="time one block against the token count")
    add(
        "--batch-size",
        type=int,
        default=None,
        help="inputs per timed call; default 16 for a model, 1 for --scaling",
    )
    add(
        "--image-size",
        type=int,
        default=None,
        help="input size of named models; default: what train builds for the small presets "
        "(16 for gfnet_tiny on the digits), 224 for the papers' models",
    )
    add(
        "--classes",
        type=int,
        default=None,
        help="classes of named models; default: the digits' 10 for the small presets, else 1000",
    )
    add("--precision", choices=PRECISIONS, default="float32", help="Keras dtype policy")
    add(
        "--fft-impl",
        type=_comma(FFT_IMPLS),
        default=["auto"],
        help="fft_impl of every Fourier layer (scaling: a comma list to compare)",
    )
    add(
        "--jit",
        choices=JIT_CHOICES,
        default="auto",
        help="XLA (jit_compile of compile()): 'auto' is Keras' default",
    )
    add("--backend", choices=BACKENDS, default=None, help="Keras backend (a subprocess)")
    add("--repeats", type=int, default=5, help="timed calls per figure (median)")
    add("--threads", type=int, default=None, help="TFLite interpreter threads")
    add("--no-train", action="store_true", help="skip the training step")
    add(
        "--mixers",
        type=_comma(SCALING_MIXERS),
        default=list(SCALING_MIXERS),
        help=f"comma-separated, of {', '.join(SCALING_MIXERS)}",
    )
    add("--grids", type=_comma(None, int), default=list(SCALING_GRIDS), help="2D grid sides")
    add(
        "--sequences",
        type=_comma(None, int),
        default=list(SCALING_SEQUENCES),
        help="1D sequence lengths (fourier and attention)",
    )
    add("--width", type=int, default=SCALING_WIDTH, help="channels of the scaling block")
    add("--out", default=os.path.join("runs", "bench"), help="folder of the JSON/CSV/PNG files")


def _check(args: argparse.Namespace) -> None:
    if args.scaling == bool(args.model):
        raise ValueError(
            f"give either MODEL or --scaling. Received: MODEL={args.model!r}, "
            f"--scaling={args.scaling}"
        )
    if args.batch_size is None:
        args.batch_size = 1 if args.scaling else 16
    for name in ("batch_size", "image_size", "classes", "repeats", "width"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            flag = f"--{name.replace('_', '-')}"
            raise ValueError(f"{flag} must be >= 1. Received: {flag}={getattr(args, name)!r}")
    for name in ("grids", "sequences"):
        values = getattr(args, name, None) or ()
        if any(value < 1 for value in values):
            raise ValueError(f"--{name} must be sizes >= 1. Received: --{name}={list(values)}")
    if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out must be a folder; it is a file. Received: --out={args.out!r}")


def _rerun_on_backend(args: argparse.Namespace) -> int:
    env = {**os.environ, "KERAS_BACKEND": args.backend}
    command = [sys.executable, "-m", "keras_fourier.cli", *args.argv]
    return subprocess.run(command, env=env, check=False).returncode


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier bench`; returns the exit status."""
    _check(args)
    import keras

    if args.backend and args.backend != keras.backend.backend():
        return _rerun_on_backend(args)
    keras.mixed_precision.set_global_policy(args.precision)
    settings = {
        "precision": args.precision,
        "jit": args.jit,
        "repeats": args.repeats,
        "machine": machine(),
    }
    if args.scaling:
        rows = run_scaling(
            mixers=args.mixers,
            grids=args.grids,
            sequences=args.sequences,
            width=args.width,
            batch_size=args.batch_size,
            fft_impls=args.fft_impl,
            jit_compile=args.jit,
            repeats=args.repeats,
            precision=args.precision,
        )
        print(format_table(rows))
        report = {"mode": "scaling", **settings, "rows": rows}
        paths = write_results(args.out, "scaling", report)
        png = os.path.join(args.out, "scaling.png")
        title = (
            f"one block (mixer + MLP), width {args.width}, batch {rows[0]['batch_size']}, "
            f"{settings['machine']['cpu_count']} CPU cores, {keras.backend.backend()}"
        )
        if plot_scaling(rows, png, title):
            paths.append(png)
        print("wrote " + ", ".join(paths))
        return 0
    rows = []
    if args.model.endswith(".tflite"):
        from keras_fourier.export.journal import recover_around

        recover_around(args.model)  # an export killed while placing it is completed first
        figures = benchmark_tflite(
            args.model, batch_size=args.batch_size, threads=args.threads, repeats=args.repeats
        )
        rows.append({"model": os.path.basename(args.model), "runtime": "tflite", **figures})
    else:
        from keras_fourier.flop_count import flops, load_model

        rate = matmul_rate()
        image_size, classes = named_model_size(args.model)
        image_size = args.image_size or image_size
        classes = args.classes or classes
        for impl in args.fft_impl:
            model = load_model(args.model, image_size, classes)
            if impl != "auto":
                model = with_fft_impl(model, impl)
            count = flops(model)
            figures = benchmark_model(
                model,
                batch_size=args.batch_size,
                jit_compile=args.jit,
                repeats=args.repeats,
                train=not args.no_train,
            )
            rows.append(
                {
                    "model": model.name,
                    "runtime": keras.backend.backend(),
                    "fft_impl": impl,
                    "batch_size": args.batch_size,
                    "gflops": round(count / 1e9, 4),
                    **{k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()},
                    "matmul_fraction": round(count * figures["predict_img_s"] / rate, 4),
                }
            )
        settings["matmul_gmacs"] = round(rate / 1e9, 2)
    print(format_table(rows))
    paths = write_results(args.out, "bench", {"mode": "model", **settings, "rows": rows})
    print("wrote " + ", ".join(paths))
    return 0
