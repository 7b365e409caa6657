"""`keras-fourier bench`: the command line of :mod:`keras_fourier.bench`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

from keras_fourier.cli.arguments import comma_list, model_options
from keras_fourier.models.family import MIXER_NAMES
from keras_fourier.settings import (
    BENCH_JIT,
    BENCH_PRECISIONS,
    FFT_IMPLS,
    SCALING_GRIDS,
    SCALING_SEQUENCES,
    SCALING_WIDTH,
)

NAME = "bench"
HELP = "measure a model's throughput, latency and memory, or the mixers' scaling"
DESCRIPTION = (
    "Model mode (MODEL: a model name, .keras file, run folder or .tflite file): inference "
    "and training-step img/s, batch-1 latency, peak memory, FLOPs and the fraction of "
    "this machine's matmul rate in the compute dtype of --precision (float32, bf16, "
    "int8), with --agreement against float32. Scaling mode (--scaling): one block "
    "(mixer + MLP) at width 384, latency and peak memory against the token count, "
    "plotted. Writes JSON and CSV (and PNG) into --out."
)
SHOW_DEFAULTS = True
BACKENDS = ("tensorflow", "jax", "torch")
# Short names accepted by --precision.
PRECISION_ALIASES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def _precision(text: str) -> str:
    name = PRECISION_ALIASES.get(text, text)
    if name not in BENCH_PRECISIONS:
        choices = ", ".join((*BENCH_PRECISIONS, *PRECISION_ALIASES))
        raise argparse.ArgumentTypeError(f"expected one of {choices}: {text!r}")
    return name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `keras-fourier bench` to `parser`."""

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
    add(
        "--precision",
        type=_precision,
        default="float32",
        help="float32 (fp32), mixed_bfloat16 (bf16), mixed_float16 (fp16): the Keras dtype "
        "policy; int8: Keras's model.quantize('int8') of the float32 model",
    )
    add(
        "--fft-impl",
        type=comma_list(FFT_IMPLS),
        default=["auto"],
        help="fft_impl of every Fourier layer (scaling: a comma list to compare)",
    )
    add(
        "--jit",
        choices=tuple(BENCH_JIT),
        default="auto",
        help="XLA (jit_compile of compile()): 'auto' is Keras' default",
    )
    add("--backend", choices=BACKENDS, default=None, help="Keras backend (a subprocess)")
    add("--repeats", type=int, default=5, help="timed calls per figure (median)")
    add("--threads", type=int, default=None, help="TFLite interpreter threads")
    add("--no-train", action="store_true", help="skip the training step")
    add(
        "--agreement",
        action="store_true",
        help="top-1 agreement and max logit difference of --precision against float32 "
        "(same weights); of a .tflite file against --reference",
    )
    add(
        "--reference",
        default=None,
        help=".tflite: the Keras model it was exported from (a .keras file), for its FLOPs, "
        "the host fractions and --agreement",
    )
    add(
        "--data",
        default=None,
        help="images for --agreement: 'digits', 'dir:PATH' or 'tfds:NAME' "
        "(default: uniform 0-255 noise)",
    )
    add("--data-split", default="test", help="split of --data (default: test)")
    add("--examples", type=int, default=256, help="examples compared by --agreement")
    add(
        "--mixers",
        type=comma_list(MIXER_NAMES),
        default=list(MIXER_NAMES),
        help=f"comma-separated, of {', '.join(MIXER_NAMES)}",
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
    if args.scaling and args.precision == "int8":
        raise ValueError("--precision int8 applies to a MODEL, not --scaling. Received: --scaling")
    if args.reference is not None and not (args.model or "").endswith(".tflite"):
        raise ValueError(f"--reference applies to a .tflite MODEL. Received: MODEL={args.model!r}")
    if args.agreement and (args.model or "").endswith(".tflite") and args.reference is None:
        raise ValueError(
            f"--agreement of a .tflite file needs --reference. Received: MODEL={args.model!r}"
        )
    for name in ("batch_size", "image_size", "classes", "repeats", "width", "examples"):
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
    """Runs `keras-fourier bench`; returns the exit status.

    Its two model modes (a Keras model, a .tflite file) are the inner functions
    `bench_keras` and `bench_tflite`, which use the library this function imports.
    """
    import keras

    from keras_fourier.bench import (
        COMPUTE_DTYPES,
        agreement_inputs,
        benchmark_model,
        benchmark_tflite,
        cpu_description,
        format_table,
        host_limits,
        machine,
        mlp_matmul_shape,
        named_model_size,
        plot_scaling,
        precision_agreement,
        run_scaling,
        tflite_agreement,
        tflite_is_integer,
        tflite_matmul_rate,
        with_precision,
        write_results,
    )
    from keras_fourier.export.journal import recover_around
    from keras_fourier.flop_count import flops
    from keras_fourier.models.catalog import is_model_name
    from keras_fourier.models.clone import clone_with
    from keras_fourier.models.resolve import resolve_model

    def bench_keras(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Rows of a model name, .keras file or run folder at --precision, one per --fft-impl."""
        keras.mixed_precision.set_global_policy("float32")
        if is_model_name(args.model):
            image_size, classes = named_model_size(args.model)
            args.image_size = args.image_size or image_size
            args.classes = args.classes or classes
        base = resolve_model(args.model, **model_options(args))
        limit = COMPUTE_DTYPES[args.precision]
        host = host_limits(mlp_matmul_shape(base, args.batch_size), [limit], args.repeats)
        rates = host["matmul_gmac_s"]
        train_limit = "float32" if limit == "int8" else limit
        gflops = flops(base) / 1e9
        inputs = None
        if args.agreement:
            inputs = agreement_inputs(base, args.data, args.data_split, args.examples)
        if args.precision not in ("float32", "int8"):
            keras.mixed_precision.set_global_policy(args.precision)
        rows = []
        for impl in args.fft_impl:
            reference = base if impl == "auto" else clone_with(base, fft_impl=impl)
            model = with_precision(reference, args.precision)
            figures = benchmark_model(
                model,
                batch_size=args.batch_size,
                jit_compile=args.jit,
                repeats=args.repeats,
                train=not args.no_train,
            )
            row = {
                "model": base.name,
                "runtime": keras.backend.backend(),
                "precision": args.precision,
                "fft_impl": impl,
                "batch_size": args.batch_size,
                "gflops": round(gflops, 4),
                **_rounded(figures),
                **_throughput(gflops, figures, rates[limit], rates[train_limit]),
                **_host_columns(host, limit),
            }
            if inputs is not None:
                agreement = precision_agreement(reference, inputs, args.precision, args.batch_size)
                row.update(_rounded(agreement))
            rows.append(row)
            del model
        return rows, host

    def bench_tflite(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The row of a .tflite file; FLOPs, host fractions and agreement with --reference."""
        recover_around(args.model)  # an export killed while placing it is completed first
        figures = benchmark_tflite(
            args.model, batch_size=args.batch_size, threads=args.threads, repeats=args.repeats
        )
        integer = tflite_is_integer(args.model)
        row = {
            "model": os.path.basename(args.model),
            "runtime": "tflite",
            "precision": "int8" if integer else "float",
            "batch_size": args.batch_size,
            **_rounded(figures),
        }
        name, features = cpu_description()
        host: dict[str, Any] = {"cpu": name, "cpu_features": features}
        if args.reference is None:
            return [row], host
        reference = resolve_model(args.reference)
        shape = mlp_matmul_shape(reference, args.batch_size)
        limit = "int8" if integer else "float32"
        rates = {"float32": tflite_matmul_rate(shape, False, args.threads, args.repeats) / 1e9}
        if integer:
            rates["int8"] = tflite_matmul_rate(shape, True, args.threads, args.repeats) / 1e9
        host.update(
            matmul_shape="x".join(map(str, shape)),
            matmul_gmac_s={dtype: round(rate, 2) for dtype, rate in rates.items()},
            matmul_runtime="tflite",
        )
        gflops = flops(reference) / 1e9
        row.update(
            gflops=round(gflops, 4),
            **_throughput(gflops, figures, rates[limit], rates[limit]),
            **_host_columns(host, limit),
        )
        if args.agreement:
            inputs = agreement_inputs(reference, args.data, args.data_split, args.examples)
            row.update(_rounded(tflite_agreement(args.model, reference, inputs)))
        return [row], host

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
        # The limit of the block's MLP at 56x56 tokens (GFNet-XS's first-stage-sized product).
        shape = (56 * 56 * args.batch_size, args.width, 4 * args.width)
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
    if args.model.endswith(".tflite"):
        rows, host = bench_tflite(args)
    else:
        rows, host = bench_keras(args)
    settings["host"] = host
    print(format_table(rows))
    paths = write_results(args.out, "bench", {"mode": "model", **settings, "rows": rows})
    print("wrote " + ", ".join(paths))
    return 0


def _rounded(figures: dict[str, Any]) -> dict[str, Any]:
    """Floats to 5 significant digits."""
    return {k: float(f"{v:.5g}") if isinstance(v, float) else v for k, v in figures.items()}


def _host_columns(host: dict[str, Any], limit: str) -> dict[str, Any]:
    """The host's rates as row columns, so that the CSV alone names the limits."""
    columns = {f"host_{dtype}_gmac_s": rate for dtype, rate in host["matmul_gmac_s"].items()}
    return {**columns, "limit_dtype": limit}


def _throughput(
    gflops: float, figures: dict[str, Any], limit_rate: float, train_rate: float
) -> dict[str, Any]:
    """Multiply-adds per second of each phase and its fraction of the phase's limit.

    A training step counts 3 forward passes (forward, and the two products
    of each layer's backward pass); `train_rate` is its limit (float32 for
    int8 models, whose gradients are float).
    """
    result = {}
    for phase, passes, limit in (("predict", 1, limit_rate), ("train", 3, train_rate)):
        if f"{phase}_img_s" in figures:
            rate = passes * gflops * figures[f"{phase}_img_s"]
            result[f"{phase}_gmac_s"] = round(rate, 2)
            # A limit measured as 0 (a tiny matmul, rounded) gives no fraction.
            result[f"{phase}_fraction"] = round(rate / limit, 4) if limit > 0 else None
    return result
