"""Benchmark: "fft" vs "matmul" spectral implementations of the Fourier mixers.

Prints the median forward time (and forward + backward time) of GlobalFilter,
AFNO2D and FourierMixing at a few token-grid sizes, both implementations,
compiled with XLA and without. Run it on the machine you care about:

    python examples/benchmark_spectral.py --batch-size 32 --channels 384

Timings are measurements of this machine, not assertions; the tests check
that both implementations compute the same values.
"""

from __future__ import annotations

import argparse
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

from keras_fourier.layers import AFNO2D, FourierMixing, GlobalFilter

LAYERS = {
    "global_filter": GlobalFilter,
    "afno": lambda **kw: AFNO2D(num_blocks=8, **kw),
    "fourier_mixing": FourierMixing,
}


def _median_ms(fn, x, repeats: int) -> float:
    fn(x)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn(x)
        tf.nest.map_structure(lambda t: t.numpy(), result)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def benchmark(batch_size: int, channels: int, sizes: list[int], repeats: int, jit: bool) -> None:
    """Prints one row per (layer, size, implementation)."""
    print(f"{'layer':<16}{'grid':>8}{'impl':>8}{'forward ms':>12}{'fwd+bwd ms':>12}")
    for name, make in LAYERS.items():
        for size in sizes:
            x = tf.constant(
                np.random.default_rng(0).standard_normal((batch_size, size, size, channels)),
                tf.float32,
            )
            for impl in ("fft", "matmul"):
                layer = make(fft_impl=impl)
                layer.build(x.shape)

                def forward(inputs, layer=layer):
                    return layer(inputs)

                def forward_backward(inputs, layer=layer):
                    with tf.GradientTape() as tape:
                        tape.watch(inputs)
                        loss = tf.reduce_sum(tf.square(layer(inputs)))
                    return tape.gradient(loss, [inputs, *layer.trainable_weights])

                fwd = tf.function(forward, jit_compile=jit)
                bwd = tf.function(forward_backward, jit_compile=jit)
                print(
                    f"{name:<16}{size:>5}x{size:<2}{impl:>8}"
                    f"{_median_ms(fwd, x, repeats):>12.2f}{_median_ms(bwd, x, repeats):>12.2f}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--sizes", type=int, nargs="+", default=[7, 14, 28])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--jit", action="store_true", help="compile with XLA")
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    benchmark(args.batch_size, args.channels, args.sizes, args.repeats, args.jit)


if __name__ == "__main__":
    main()
