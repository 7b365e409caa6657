"""The arguments of `keras-fourier bench` (its run: :mod:`keras_fourier.commands.bench`)."""

from __future__ import annotations

import argparse
import os

from keras_fourier.cli.arguments import comma_list
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
    "plotted. A segmenter (output (B, H, W, classes), free input size) runs at 512 and "
    "1024 px; --max-input finds the largest input within --memory-gib. "
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
