"""Cross-backend parity worker: the same weights give the same logits on every backend.

`tests/test_backend_parity.py` (TensorFlow run) calls :func:`write_reference`
to build one small model per family, save its weights (``.weights.h5``) and
inputs, and compute the reference logits. It then runs this module as a
script under ``KERAS_BACKEND=jax`` and ``torch``::

    python -m tests.backend_parity DIRECTORY

which rebuilds every model on that backend with ``fft_impl="fft"`` and
``"matmul"``, loads the saved weights, writes ``<backend>_<family>.npz``
(logits of both implementations), and saves one ``.keras`` model for the
TensorFlow side to load and export.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable

import keras
import numpy as np

import keras_fourier.models as models
from keras_fourier.models import FNet
from keras_fourier.models.vision import build_vision_model

KERAS_FAMILY = "gfnet"


def _tiny_vision(variant: str) -> Callable[[str], keras.Model]:
    spec = models.VARIANTS[variant]
    dims = (16, 32, 64, 128) if len(spec.dims) > 1 else (32,)
    spec = dataclasses.replace(spec, dims=dims, depths=(1,) * len(dims))
    size = spec.stride * 2

    def build(fft_impl: str) -> keras.Model:
        return build_vision_model(
            spec,
            input_shape=(size, size, 3),
            classes=5,
            classifier_activation=None,
            fft_impl=fft_impl,
            name=variant,
        )

    return build


def _afbo(fft_impl: str) -> keras.Model:
    return models.build_model(
        "afno",
        "afbo",
        depths=[1, 1],
        dims=[16, 32],
        mixer_kwargs={"num_blocks": 4},
        input_shape=(32, 32, 3),
        classes=5,
        classifier_activation=None,
        fft_impl=fft_impl,
    )


def _fnet(fft_impl: str) -> keras.Model:
    sizes = {"hidden_size": 16, "num_layers": 2, "intermediate_size": 32}
    return FNet(
        sizes, vocabulary_size=100, max_sequence_length=16, sequence_length=8, fft_impl=fft_impl
    )


# family: (builder taking fft_impl, tolerance on max |diff| / max(1, max |logits|))
FAMILIES: dict[str, tuple[Callable[[str], keras.Model], float]] = {
    "gfnet": (_tiny_vision("gfnet_ti"), 1e-5),
    "gfnet_h": (_tiny_vision("gfnet_h_ti"), 1e-5),
    "afnonet": (_tiny_vision("afnonet_s4"), 1e-5),
    "hornet_7x7": (_tiny_vision("hornet_t_7x7"), 1e-5),
    "hornet_gf": (_tiny_vision("hornet_t_gf"), 1e-5),
    "afno_afbo": (_afbo, 1e-5),
    "fnet": (_fnet, 1e-5),
}


def _inputs(model: keras.Model, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for tensor in model.inputs:
        shape = (2, *tuple(tensor.shape[1:]))
        if "int" in str(tensor.dtype):
            high = 2 if "mask" in tensor.name else 4 if "segment" in tensor.name else 100
            out[tensor.name] = rng.integers(0, high, shape).astype("int32")
        else:
            out[tensor.name] = rng.uniform(0, 255, shape).astype("float32")
    return out


def logits(model: keras.Model, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The model's first output on `inputs` as a float64 NumPy array."""
    feed = inputs if len(model.inputs) > 1 else next(iter(inputs.values()))
    # predict compiles the whole forward once (per-op dispatch is slow on JAX).
    out = model.predict(feed, batch_size=2, verbose=0)
    if isinstance(out, dict):
        out = out["pooled_output"]
    return np.asarray(out, dtype=np.float64)


def write_reference(directory: str) -> dict[str, np.ndarray]:
    """Builds every family, saves weights and inputs in `directory`, returns the logits."""
    reference = {}
    for index, (family, (build, _)) in enumerate(FAMILIES.items()):
        keras.utils.set_random_seed(index)
        model = build("fft")
        inputs = _inputs(model, seed=index)
        model.save_weights(os.path.join(directory, f"{family}.weights.h5"))
        np.savez(os.path.join(directory, f"{family}_inputs.npz"), **inputs)
        reference[family] = logits(model, inputs)
    return reference


def run_backend(directory: str) -> None:
    """Rebuilds every family on this process's backend and writes its logits."""
    backend = keras.config.backend()
    for family, (build, _) in FAMILIES.items():
        with np.load(os.path.join(directory, f"{family}_inputs.npz")) as data:
            inputs = dict(data)
        results = {}
        for fft_impl in ("fft", "matmul"):
            model = build(fft_impl)
            model.load_weights(os.path.join(directory, f"{family}.weights.h5"))
            results[fft_impl] = logits(model, inputs)
            if family == KERAS_FAMILY and fft_impl == "fft":
                model.save(os.path.join(directory, f"{backend}_{family}.keras"))
        np.savez(os.path.join(directory, f"{backend}_{family}.npz"), **results)


if __name__ == "__main__":
    run_backend(sys.argv[1])
