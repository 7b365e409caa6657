"""`keras-fourier bench`: throughput, latency, memory and scaling of models and mixers.

Four modes, one module each (and :mod:`~keras_fourier.bench.host` for the
host's limits, :mod:`~keras_fourier.bench.tflite` for `.tflite` files):

* model timing (:mod:`~keras_fourier.bench.timing`),
  ``keras-fourier bench MODEL``: MODEL is a model name (random init), a
  ``.keras`` file or a ``.tflite`` file, a classifier or a dense-prediction
  model (one (B, H, W, classes) output, e.g. a segmenter; a model of free
  input size runs at 512 and 1024 px, batch 1 and 8). Measures inference
  (``predict_on_batch``) and training-step (``train_on_batch``) images per
  second, batch-1 latency and the resident memory each phase adds at its
  peak, and reports the model's FLOPs (:func:`keras_fourier.flops`), the
  multiply-adds per second each phase reaches and their fraction of the
  host's limit: the backend's matmul rate on the shape of the model's
  largest Dense product, in the compute dtype of ``--precision``, the best
  of rounds measured before and between the model's phases
  (:class:`~keras_fourier.bench.host.HostLimits`). ``--agreement`` adds the
  top-1 agreement and max logit difference against float32, same weights.
* largest input (:mod:`~keras_fourier.bench.max_input`),
  ``keras-fourier bench MODEL --max-input --memory-gib 16``: the largest
  square input one inference call runs on within a memory budget, each
  probe in its own process.
* the FNet paper's speed claim (:mod:`~keras_fourier.bench.fnet_paper`),
  ``keras-fourier bench --fnet-paper``: FNet-Base, BERT-Base and the
  Linear model at 512 tokens (training step and inference sequences/s, the
  speed-up over BERT, Table 2) and their mixing sublayers alone (Table 9),
  beside the host's matmul rate.
* scaling (:mod:`~keras_fourier.bench.scaling`),
  ``keras-fourier bench --scaling``: one block (mixer and MLP) at width 384,
  latency and peak memory against the number of tokens for every token
  mixer (GFNet Fig. 2), and FNet-style 1D mixing against sequence length
  (FNet Table 5); a PNG plot when matplotlib is installed.

Every timing is a median of repeated calls in this process, after warm-up
calls. Results are printed as a table and written atomically as JSON and CSV
(and PNG) into ``--out``. Timings are measurements of one machine at one
moment, never assertions: compare two sides only when measured in one session.
"""

import importlib
from typing import Any

from keras_fourier.bench.fnet_paper import run_fnet_paper, time_mixing, time_model
from keras_fourier.bench.host import (
    BF16_FEATURES,
    COMPUTE_DTYPES,
    CPU_FEATURES,
    HostLimits,
    cpu_description,
    host_limits,
    machine,
    matmul_rate,
    mlp_matmul_shape,
    tflite_matmul_rate,
    throughput,
)
from keras_fourier.bench.max_input import (
    MAX_INPUT_MAX_SIDE,
    MAX_INPUT_START,
    largest_input,
    probe_input,
    search_largest,
)
from keras_fourier.bench.measure import PeakMemory, available_mib, median_seconds, peak_rss_mib
from keras_fourier.bench.report import format_table, write_atomic, write_results
from keras_fourier.bench.scaling import (
    attention_fits,
    plot_scaling,
    run_scaling,
    scaling_block,
    scaling_series,
)
from keras_fourier.bench.timing import (
    at_input_size,
    bench_keras,
    benchmark_model,
    has_free_input_size,
    named_model_size,
    precision_agreement,
    random_inputs,
    with_precision,
)

__all__ = [
    "BF16_FEATURES",
    "COMPUTE_DTYPES",
    "CPU_FEATURES",
    "MAX_INPUT_MAX_SIDE",
    "MAX_INPUT_START",
    "HostLimits",
    "PeakMemory",
    "agreement_inputs",
    "at_input_size",
    "attention_fits",
    "available_mib",
    "bench_keras",
    "bench_tflite",
    "benchmark_model",
    "benchmark_tflite",
    "cpu_description",
    "format_table",
    "has_free_input_size",
    "host_limits",
    "largest_input",
    "machine",
    "matmul_rate",
    "median_seconds",
    "mlp_matmul_shape",
    "named_model_size",
    "peak_rss_mib",
    "plot_scaling",
    "precision_agreement",
    "probe_input",
    "random_inputs",
    "run_fnet_paper",
    "run_scaling",
    "scaling_block",
    "scaling_series",
    "search_largest",
    "tflite_agreement",
    "tflite_is_integer",
    "tflite_matmul_rate",
    "throughput",
    "time_mixing",
    "time_model",
    "with_precision",
    "write_atomic",
    "write_results",
]

# The TensorFlow side (TFLite files; image data for --agreement --data), loaded on first use
# so that the Keras bench imports and runs on a JAX or PyTorch machine without TensorFlow.
_LAZY = {
    "agreement_inputs": "images",
    "bench_tflite": "tflite",
    "benchmark_tflite": "tflite",
    "tflite_agreement": "tflite",
    "tflite_is_integer": "tflite",
}


def __getattr__(name: str) -> Any:
    """Loads a name of the TensorFlow side (and TensorFlow) when it is first used."""
    if name in _LAZY:
        return getattr(importlib.import_module(f"keras_fourier.bench.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
