"""Names options take, keras-free, for the subsystems whose packages load TensorFlow on import.

The `keras-fourier` command checks its arguments against these names before
it loads TensorFlow; the modules that use them import them from here:

* :data:`BAD_IMAGE_MODES`: what a run does with a corrupt image file,
  :data:`DIGITS_NUM_CLASSES`, the classes of the embedded digits, and
  :data:`TEXT_PADDINGS`, how text batches are padded (:mod:`keras_fourier.data`);
* :data:`FFT_IMPLS` and :data:`DFT_PRECISIONS`: the implementations of the
  Fourier layers and the dtypes of the matmul DFT's products
  (:mod:`keras_fourier.layers.spectral`);
* :data:`QUANTIZATIONS` and :data:`OUTPUTS`: TFLite quantizations and what
  the exported signatures return (:mod:`keras_fourier.export`);
* :data:`BENCH_PRECISIONS`, :data:`BENCH_JIT` and the ``SCALING_*`` grid:
  what :mod:`keras_fourier.bench` measures.

A training run's settings live with training (the keras-free
:mod:`keras_fourier.training.config` and :mod:`keras_fourier.training.recipe`),
the model names with the model families (:mod:`keras_fourier.models.names`),
the token mixers and FFNs with the variant rows
(:mod:`keras_fourier.models.family`).
"""

from __future__ import annotations

BAD_IMAGE_MODES = ("error", "skip")
# "fixed": every text batch at the sequence length; "batch": padded to its longest text.
TEXT_PADDINGS = ("fixed", "batch")
FFT_IMPLS = ("auto", "fft", "matmul")
DFT_PRECISIONS = ("float32", "bfloat16")
# None: float32, no quantization.
QUANTIZATIONS = (None, "float16", "dynamic", "int8")
OUTPUTS = ("probabilities", "logits")
BENCH_PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16", "int8")
# The jit_compile of compile() for each name of bench's --jit ("auto": Keras's default).
BENCH_JIT = {"auto": "auto", "on": True, "off": False}
# Up to 16384 tokens; self-attention's points there need about 11 GiB and are skipped
# where the machine has less memory available (see keras_fourier.bench._attention_fits).
SCALING_GRIDS = (14, 28, 42, 56, 64, 96, 128)
SCALING_SEQUENCES = (512, 1024, 2048, 4096, 8192, 16384)
SCALING_WIDTH = 384
# The classes of the embedded UCI digits (the default data of `keras-fourier train`).
DIGITS_NUM_CLASSES = 10
