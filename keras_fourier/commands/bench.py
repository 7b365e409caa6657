"""`keras-fourier bench`: the command line of :mod:`keras_fourier.bench`.

Its arguments are declared in :mod:`keras_fourier.cli.bench`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

import keras

from keras_fourier.bench import (
    COMPUTE_DTYPES,
    MAX_INPUT_MAX_SIDE,
    MAX_INPUT_START,
    agreement_inputs,
    bench_keras,
    bench_tflite,
    format_table,
    has_free_input_size,
    host_limits,
    largest_input,
    machine,
    named_model_size,
    plot_scaling,
    run_scaling,
    write_results,
)
from keras_fourier.commands.arguments import load_model
from keras_fourier.models.catalog import is_model_name
from keras_fourier.models.resolve import resolve_model


def _check(args: argparse.Namespace) -> None:
    if args.max_input and not args.model:
        raise ValueError("--max-input needs a MODEL. Received: --max-input without MODEL")
    if args.scaling == bool(args.model):
        raise ValueError(
            f"give either MODEL or --scaling. Received: MODEL={args.model!r}, "
            f"--scaling={args.scaling}"
        )
    if args.max_input and args.model.endswith(".tflite"):
        raise ValueError(f"--max-input takes a Keras model. Received: MODEL={args.model!r}")
    if args.memory_gib <= 0:
        raise ValueError(f"--memory-gib must be > 0. Received: --memory-gib={args.memory_gib!r}")
    if args.scaling and args.precision == "int8":
        raise ValueError("--precision int8 applies to a MODEL, not --scaling. Received: --scaling")
    if args.reference is not None and not (args.model or "").endswith(".tflite"):
        raise ValueError(f"--reference applies to a .tflite MODEL. Received: MODEL={args.model!r}")
    if args.agreement and (args.model or "").endswith(".tflite") and args.reference is None:
        raise ValueError(
            f"--agreement of a .tflite file needs --reference. Received: MODEL={args.model!r}"
        )
    for name in ("classes", "repeats", "width", "examples", "max_side"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            flag = f"--{name.replace('_', '-')}"
            raise ValueError(f"{flag} must be >= 1. Received: {flag}={getattr(args, name)!r}")
    for name in ("batch_size", "image_size"):
        values = getattr(args, name) or ()
        if any(value < 1 for value in values):
            flag = f"--{name.replace('_', '-')}"
            raise ValueError(f"{flag} must be >= 1. Received: {flag}={','.join(map(str, values))}")
    one_batch = args.scaling or args.max_input or (args.model or "").endswith(".tflite")
    if one_batch and args.batch_size and len(args.batch_size) > 1:
        raise ValueError(
            "several batch sizes apply to a Keras MODEL's timing. "
            f"Received: --batch-size={','.join(map(str, args.batch_size))}"
        )
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
    settings = {
        "precision": args.precision,
        "jit": args.jit,
        "repeats": args.repeats,
        "machine": machine(),
    }
    if args.scaling:
        keras.mixed_precision.set_global_policy(args.precision)
        batch_size = args.batch_size[0] if args.batch_size else 1
        rows = run_scaling(
            mixers=args.mixers,
            grids=args.grids,
            sequences=args.sequences,
            width=args.width,
            batch_size=batch_size,
            fft_impls=args.fft_impl,
            jit_compile=args.jit,
            repeats=args.repeats,
            precision=args.precision,
        )
        print(format_table(rows))
        # The limit of the block's MLP at 56x56 tokens (GFNet-XS's first-stage-sized product).
        shape = (56 * 56 * batch_size, args.width, 4 * args.width)
        settings["host"] = host_limits(shape, [COMPUTE_DTYPES[args.precision]], args.repeats)
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
    if args.max_input:
        return _max_input(args, settings)
    if args.model.endswith(".tflite"):
        rows, host = _bench_tflite(args)
    else:
        rows, host = _bench_keras(args)
    settings["host"] = host
    print(format_table(rows))
    paths = write_results(args.out, "bench", {"mode": "model", **settings, "rows": rows})
    print("wrote " + ", ".join(paths))
    return 0


def _max_input(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """--max-input: the largest input within --memory-gib, each probe in its own process."""
    start = args.image_size[0] if args.image_size else MAX_INPUT_START
    options = None
    if is_model_name(args.model):
        model = args.model
        options = {"classes": args.classes or named_model_size(args.model)[1]}
    else:
        args.image_size = None
        model = load_model(args)
    report = largest_input(
        model,
        memory_gib=args.memory_gib,
        batch_size=args.batch_size[0] if args.batch_size else 1,
        start=start,
        max_side=args.max_side or MAX_INPUT_MAX_SIDE,
        precision=args.precision,
        jit_compile=args.jit,
        build_options=options,
    )
    print(format_table(report["rows"]))
    paths = write_results(args.out, "max_input", {"mode": "max_input", **settings, **report})
    largest = report["largest_side"]
    found = f"{largest}x{largest}" if largest else "none (not even the smallest probe fits)"
    print(f"largest input within {args.memory_gib:g} GiB: {found}")
    print("wrote " + ", ".join(paths))
    return 0


def _bench_keras(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of a model name, .keras file or run folder at --precision, one per --fft-impl."""
    keras.mixed_precision.set_global_policy("float32")
    sizes = args.image_size
    if is_model_name(args.model):
        if sizes and len(sizes) > 1:
            raise ValueError(
                "--image-size takes one size for a named model (several apply to a model of "
                f"free input size). Received: --image-size={','.join(map(str, sizes))}"
            )
        image_size, classes = named_model_size(args.model)
        args.image_size = sizes[0] if sizes else image_size
        args.classes = args.classes or classes
        sizes = None
    else:
        args.image_size = None
    base = load_model(args)
    inputs = None
    if args.agreement:
        first = (sizes or [512])[0] if has_free_input_size(base) else None
        inputs = agreement_inputs(base, args.data, args.data_split, args.examples, first)
    if args.precision not in ("float32", "int8"):
        keras.mixed_precision.set_global_policy(args.precision)
    return bench_keras(
        base,
        precision=args.precision,
        fft_impls=args.fft_impl,
        batch_sizes=args.batch_size,
        image_sizes=sizes,
        jit_compile=args.jit,
        repeats=args.repeats,
        train=not args.no_train,
        agreement_inputs=inputs,
    )


def _bench_tflite(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The row of a .tflite file; FLOPs, host fractions and agreement with --reference."""
    reference = None if args.reference is None else resolve_model(args.reference)
    inputs = None
    if args.agreement:
        inputs = agreement_inputs(reference, args.data, args.data_split, args.examples)
    return bench_tflite(
        args.model,
        reference=reference,
        batch_size=args.batch_size[0] if args.batch_size else 16,
        threads=args.threads,
        repeats=args.repeats,
        agreement_inputs=inputs,
    )
