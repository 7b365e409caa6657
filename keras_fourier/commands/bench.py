"""`keras-fourier bench`: the command line of :mod:`keras_fourier.bench`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import keras

from keras_fourier.bench import (
    BACKENDS,
    JIT_CHOICES,
    PRECISIONS,
    SCALING_GRIDS,
    SCALING_MIXERS,
    SCALING_SEQUENCES,
    SCALING_WIDTH,
    benchmark_model,
    benchmark_tflite,
    format_table,
    machine,
    matmul_rate,
    named_model_size,
    plot_scaling,
    run_scaling,
    write_results,
)
from keras_fourier.commands.arguments import comma_list, fail, load_model
from keras_fourier.flop_count import flops
from keras_fourier.layers.spectral import FFT_IMPLS
from keras_fourier.models.catalog import is_model_name
from keras_fourier.models.clone import clone_with

NAME = "bench"
HELP = "measure a model's throughput, latency and memory, or the mixers' scaling"
DESCRIPTION = (
    "Model mode (MODEL: a model name, .keras file, run folder or .tflite file): inference "
    "and training-step img/s, batch-1 latency, peak memory, FLOPs and the fraction of "
    "this machine's matmul rate. Scaling mode (--scaling): one block (mixer + MLP) "
    "at width 384, latency and peak memory against the token count, plotted. "
    "Writes JSON and CSV (and PNG) into --out."
)
SHOW_DEFAULTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `keras-fourier bench` to `parser`."""
    add = parser.add_argument
    add(
        "model",
        nargs="?",
        metavar="MODEL",
        help="model name (gfnet_ti, GFNetTi, ...), .keras file, run folder or .tflite file",
    )
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
        type=comma_list(FFT_IMPLS),
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
        type=comma_list(SCALING_MIXERS),
        default=list(SCALING_MIXERS),
        help=f"comma-separated, of {', '.join(SCALING_MIXERS)}",
    )
    add("--grids", type=comma_list(None, int), default=list(SCALING_GRIDS), help="2D grid sides")
    add(
        "--sequences",
        type=comma_list(None, int),
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
        figures = benchmark_tflite(
            args.model, batch_size=args.batch_size, threads=args.threads, repeats=args.repeats
        )
        rows.append({"model": os.path.basename(args.model), "runtime": "tflite", **figures})
    else:
        rate = matmul_rate()
        if is_model_name(args.model):
            image_size, classes = named_model_size(args.model)
            args.image_size = args.image_size or image_size
            args.classes = args.classes or classes
        for impl in args.fft_impl:
            try:
                model = load_model(args)
            except ValueError as error:
                return fail(NAME, error)
            if impl != "auto":
                model = clone_with(model, fft_impl=impl)
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
