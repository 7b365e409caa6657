"""`keras-fourier bench`: the command line of :mod:`keras_fourier.bench`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

from keras_fourier.cli.arguments import comma_list, model_options
from keras_fourier.limits import (
    MAX_THREADS_PER_CPU,
    check_count,
    check_memory,
    vision_request_bytes,
)
from keras_fourier.models.family import MIXER_NAMES
from keras_fourier.models.fnet_family import FNET_VARIANTS, PAPER_MIXINGS, PAPER_MODELS
from keras_fourier.settings import (
    BENCH_JIT,
    BENCH_PRECISIONS,
    DFT_PRECISIONS,
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
    "plotted. A segmenter (output (B, H, W, classes), free input size) runs at 512 and "
    "1024 px; a detector (a .keras file of a fixed size, e.g. 800x1344) runs its raw "
    "model, without NMS; --max-input finds the largest input within --memory-gib. FNet paper mode "
    "(--fnet-paper): FNet, BERT and Linear Base models at 512 tokens, training-step and "
    "inference sequences/s and the speed-up over BERT, and their mixing sublayers alone "
    "(the paper's Table 9), beside this machine's matmul rate. "
    "Writes JSON and CSV (and PNG) into --out."
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
        "--fnet-paper",
        action="store_true",
        help="the FNet paper's speed comparison: --paper-models at --sequence-length tokens "
        "and their mixing sublayers alone (default batch size 8)",
    )
    add(
        "--paper-models",
        type=comma_list(tuple(PAPER_MODELS)),
        default=["bert", "fnet", "linear"],
        help=f"--fnet-paper's models, comma-separated, of {', '.join(PAPER_MODELS)}",
    )
    add(
        "--paper-mixings",
        type=comma_list(PAPER_MIXINGS),
        default=["attention", "fourier", "linear"],
        help=f"--fnet-paper's mixing sublayers timed alone, of {', '.join(PAPER_MIXINGS)}",
    )
    add(
        "--variant",
        choices=tuple(FNET_VARIANTS),
        default="base",
        help="--fnet-paper's model size",
    )
    add(
        "--sequence-length",
        type=int,
        default=None,
        help="tokens per sequence of --fnet-paper (default 512) and of a named text MODEL",
    )
    add(
        "--batch-size",
        type=comma_list(None, int),
        default=None,
        help="inputs per timed call (a comma list for a Keras MODEL); default 16 for a model, "
        "1,8 for a model of free input size (a segmenter), 1 for --scaling and --max-input",
    )
    add(
        "--image-size",
        type=comma_list(None, int),
        default=None,
        help="input size of named models; default: what train builds for the small presets "
        "(16 for gfnet_tiny on the digits), 224 for the papers' models; sizes (a comma list) "
        "of a model of free input size, default 512,1024; the first side of --max-input, "
        "default 256",
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
        "--dft-precision",
        choices=DFT_PRECISIONS,
        default="float32",
        help="dtype of the matmul DFT's products (bfloat16: float32 accumulation; "
        "--agreement compares with the float32 DFT)",
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
    add(
        "--threads",
        type=int,
        default=None,
        help=f"TFLite interpreter threads (at most {MAX_THREADS_PER_CPU} per CPU)",
    )
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
    add(
        "--max-input",
        action="store_true",
        help="the largest square input MODEL runs inference on within --memory-gib (doubling, "
        "then bisection; each probe in its own process)",
    )
    add("--memory-gib", type=float, default=16.0, help="--max-input's memory budget (GiB)")
    add(
        "--max-side", type=int, default=None, help="--max-input's largest side tried (default 8192)"
    )
    add("--out", default=os.path.join("runs", "bench"), help="folder of the JSON/CSV/PNG files")


def _check(args: argparse.Namespace) -> None:
    if args.max_input and not args.model:
        raise ValueError("--max-input needs a MODEL. Received: --max-input without MODEL")
    if args.scaling + args.fnet_paper + bool(args.model) != 1:
        raise ValueError(
            f"give one of MODEL, --scaling or --fnet-paper. Received: MODEL={args.model!r}, "
            f"--scaling={args.scaling}, --fnet-paper={args.fnet_paper}"
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
    for name in ("classes", "repeats", "width", "examples", "max_side", "sequence_length"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            flag = f"--{name.replace('_', '-')}"
            raise ValueError(f"{flag} must be >= 1. Received: {flag}={getattr(args, name)!r}")
    for name in ("batch_size", "image_size"):
        values = getattr(args, name) or ()
        if any(value < 1 for value in values):
            flag = f"--{name.replace('_', '-')}"
            raise ValueError(f"{flag} must be >= 1. Received: {flag}={','.join(map(str, values))}")
    one_batch = (
        args.scaling or args.fnet_paper or args.max_input or (args.model or "").endswith(".tflite")
    )
    if one_batch and args.batch_size and len(args.batch_size) > 1:
        raise ValueError(
            "several batch sizes apply to a Keras MODEL's timing. "
            f"Received: --batch-size={','.join(map(str, args.batch_size))}"
        )
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1. Received: --threads={args.threads}")
        check_count(
            "--threads",
            args.threads,
            MAX_THREADS_PER_CPU * (os.cpu_count() or 1),
            f"{MAX_THREADS_PER_CPU} per CPU of this machine",
        )
    for name in ("grids", "sequences"):
        values = getattr(args, name, None) or ()
        if any(value < 1 for value in values):
            raise ValueError(f"--{name} must be sizes >= 1. Received: --{name}={list(values)}")
    if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out must be a folder; it is a file. Received: --out={args.out!r}")
    if args.scaling:
        batch = args.batch_size[0] if args.batch_size else 1
        tokens = max(max(args.grids or [1]) ** 2, max(args.sequences or [1]), 56 * 56)
        check_memory(
            f"--scaling at {tokens} tokens, width {args.width} and a batch of {batch}",
            vision_request_bytes((args.width,), (1,), 1, (tokens, 1), batch),
            f"--batch-size={batch}, --width={args.width}",
        )


def _rerun_on_backend(args: argparse.Namespace) -> int:
    env = {**os.environ, "KERAS_BACKEND": args.backend}
    command = [sys.executable, "-m", "keras_fourier.cli", *args.argv]
    return subprocess.run(command, env=env, check=False).returncode


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier bench`; returns the exit status.

    Its modes are the inner functions `bench_keras`, `bench_tflite` and
    `max_input`, which call the library (:mod:`keras_fourier.bench`) this
    function imports.
    """
    import keras

    from keras_fourier import bench  # its TensorFlow side (TFLite, --data) loads on first use
    from keras_fourier.bench import (
        COMPUTE_DTYPES,
        MAX_INPUT_MAX_SIDE,
        MAX_INPUT_START,
        bench_keras,
        format_table,
        has_free_input_size,
        host_limits,
        largest_input,
        machine,
        named_model_size,
        plot_scaling,
        run_fnet_paper,
        run_scaling,
        write_results,
    )
    from keras_fourier.layers.spectral import set_dft_precision
    from keras_fourier.models.catalog import check_model_batch, is_model_name
    from keras_fourier.models.resolve import resolve_model

    def keras_rows(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Rows of a model name, .keras file or run folder at --precision."""
        keras.mixed_precision.set_global_policy("float32")
        sizes = args.image_size
        if is_model_name(args.model):
            if sizes and len(sizes) > 1:
                raise ValueError(
                    "--image-size takes one size for a named model (several apply to a model "
                    f"of free input size). Received: --image-size={','.join(map(str, sizes))}"
                )
            image_size, classes = named_model_size(args.model)
            args.image_size = sizes[0] if sizes else image_size
            args.classes = args.classes or classes
            sizes = None
        else:
            args.image_size = None  # the sizes a model of free input size runs at
        base = resolve_model(args.model, **model_options(args))
        if args.batch_size:
            check_model_batch(base, max(args.batch_size), {"batch_size": "--batch-size"})
        inputs = None
        if args.agreement:
            first = (sizes or [512])[0] if has_free_input_size(base) else None
            inputs = bench.agreement_inputs(base, args.data, args.data_split, args.examples, first)
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

    def tflite_rows(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The row of a .tflite file; FLOPs, host fractions and agreement with --reference."""
        reference = None if args.reference is None else resolve_model(args.reference)
        inputs = None
        if args.agreement:
            inputs = bench.agreement_inputs(reference, args.data, args.data_split, args.examples)
        return bench.bench_tflite(
            args.model,
            reference=reference,
            batch_size=args.batch_size[0] if args.batch_size else 16,
            threads=args.threads,
            repeats=args.repeats,
            agreement_inputs=inputs,
        )

    def max_input(args: argparse.Namespace, settings: dict[str, Any]) -> int:
        """--max-input: the largest input within --memory-gib, each probe in its own process."""
        start = args.image_size[0] if args.image_size else MAX_INPUT_START
        options = None
        if is_model_name(args.model):
            model = args.model
            options = {"classes": args.classes or named_model_size(args.model)[1]}
        else:
            args.image_size = None
            model = resolve_model(args.model, **model_options(args))
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

    def fnet_paper(args: argparse.Namespace, settings: dict[str, Any]) -> int:
        """--fnet-paper: the paper's models and mixing sublayers, beside the matmul rate."""
        report = run_fnet_paper(
            models=args.paper_models,
            mixings=args.paper_mixings,
            variant=args.variant,
            sequence_length=args.sequence_length or 512,
            batch_size=args.batch_size[0] if args.batch_size else 8,
            fft_impl=args.fft_impl[0],
            repeats=args.repeats,
            train=not args.no_train,
        )
        print(format_table(report["rows"]))
        rate = report["host"]["matmul_macs_per_s"]
        print(
            f"host float32 matmul rate {rate / 1e9:.1f} GMAC/s on {report['host']['matmul_shape']}"
        )
        paths = write_results(args.out, "fnet_paper", {"mode": "fnet_paper", **settings, **report})
        print("wrote " + ", ".join(paths))
        return 0

    _check(args)
    if args.backend and args.backend != keras.backend.backend():
        return _rerun_on_backend(args)
    set_dft_precision(args.dft_precision)
    settings = {
        "precision": args.precision,
        "dft_precision": args.dft_precision,
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
    if args.fnet_paper:
        return fnet_paper(args, settings)
    if args.max_input:
        return max_input(args, settings)
    if args.model.endswith(".tflite"):
        rows, host = tflite_rows(args)
    else:
        rows, host = keras_rows(args)
    settings["host"] = host
    print(format_table(rows))
    paths = write_results(args.out, "bench", {"mode": "model", **settings, "rows": rows})
    print("wrote " + ", ".join(paths))
    return 0
