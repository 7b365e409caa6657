"""The embedded forecasting data: forced 2D Navier-Stokes with a passive tracer, solved in NumPy.

No download: :func:`navier_stokes` integrates the incompressible 2D
Navier-Stokes equations in vorticity form on the periodic square
[0, 2 pi)^2, with Kolmogorov forcing and linear drag, together with a
passive tracer advected by the same flow:

    w_t + u . grad w = nu lap w - drag w + 4 cos(4 y)
    c_t + u . grad c = kappa lap c - beta c + sin(x) cos(2 y)

where u = (psi_y, -psi_x) and -lap psi = w. The solver is pseudo-spectral
(real FFTs, 2/3 dealiasing of the products) with Heun's method for the
advection and Crank-Nicolson for the linear terms. The forcing, drag and
source keep the flow statistically stationary, so splits by time (the
first 70% of the frames train, the next 15% validate, the last 15% test)
come from one distribution.

The result is deterministic for a seed (on one machine: NumPy's FFTs may
differ in the last bits between builds, and the flow is chaotic), about
a few seconds for the default 1,000 frames of 2 x 32 x 32 (8 MB of
float32). The result is kept in memory and cached (atomically) as
``$KERAS_HOME/keras_fourier/datasets/navier_stokes_<key>.npy``, the key a
hash of the arguments; an unreadable or wrong cache file (its header read
first: a file of another shape is not loaded) is solved again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os

import numpy as np

from keras_fourier.fileio import atomic_save
from keras_fourier.weights.download import keras_home

# The channels of the embedded data, in order.
CHANNELS = ("vorticity", "tracer")
# Changes when the solver does: older cache files are not read.
SOLVER_VERSION = 1


@functools.lru_cache(maxsize=2)
def navier_stokes(
    size: int = 32,
    frames: int = 1000,
    *,
    every: int = 2,
    spinup: int = 400,
    dt: float = 0.025,
    viscosity: float = 1e-3,
    drag: float = 0.1,
    diffusivity: float = 1e-3,
    decay: float = 0.1,
    seed: int = 0,
) -> np.ndarray:
    """Solves the forced vorticity and tracer equations of the module docstring.

    Args:
        size: grid points per side. Default 32.
        frames: frames returned. Default 1000.
        every: solver steps between frames. Default 2 (frames 0.05 apart).
        spinup: solver steps before the first frame (from a random smooth
            field). Default 400 (10 time units).
        dt: solver time step. Default 0.025.
        viscosity: nu. Default 1e-3.
        drag: linear drag of the vorticity. Default 0.1.
        diffusivity: kappa of the tracer. Default 1e-3.
        decay: beta, the tracer's linear decay. Default 0.1.
        seed: seed of the initial field. Default 0.

    Returns:
        float32 (frames, 2, size, size): vorticity and tracer, (time,
        channel, y, x) as FourCastNet's (time, channel, lat, lon) data.
        The array is cached: do not modify it.

    Example:
        >>> navier_stokes(16, 4, spinup=10).shape
        (4, 2, 16, 16)
    """
    arguments = {
        "size": size,
        "frames": frames,
        "every": every,
        "spinup": spinup,
        "dt": dt,
        "viscosity": viscosity,
        "drag": drag,
        "diffusivity": diffusivity,
        "decay": decay,
        "seed": seed,
        "version": SOLVER_VERSION,
    }
    key = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:16]
    path = os.path.join(keras_home(), "keras_fourier", "datasets", f"navier_stokes_{key}.npy")
    shape = (frames, 2, size, size)
    with contextlib.suppress(OSError, ValueError):  # mapped: only a file of the shape is read
        cached = np.load(path, mmap_mode="r", allow_pickle=False)
        if cached.shape == shape and cached.dtype == np.float32:
            cached = np.array(cached)
            if np.isfinite(cached).all():
                cached.setflags(write=False)
                return cached
    del arguments["version"]
    out = solve(**arguments)
    with contextlib.suppress(OSError):  # a read-only home: solved again next time
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_save(path, lambda temporary: np.save(temporary, out, allow_pickle=False))
    out.setflags(write=False)
    return out


def solve(
    size: int,
    frames: int,
    *,
    every: int,
    spinup: int,
    dt: float,
    viscosity: float,
    drag: float,
    diffusivity: float,
    decay: float,
    seed: int,
) -> np.ndarray:
    """The solver of :func:`navier_stokes` (same arguments), uncached: a new float32 array."""
    rng = np.random.default_rng(seed)
    full = np.fft.fftfreq(size, 1.0 / size)
    half = np.fft.rfftfreq(size, 1.0 / size)
    ky, kx = np.meshgrid(full, half, indexing="ij")
    k2 = kx**2 + ky**2
    inverse_laplacian = np.where(k2 > 0, 1.0 / np.where(k2 > 0, k2, 1.0), 0.0)
    dealias = (np.abs(ky) < size / 3) & (np.abs(kx) < size / 3)
    grid = np.arange(size) * 2 * np.pi / size
    x, y = np.meshgrid(grid, grid, indexing="xy")
    forcing = np.fft.rfft2(np.stack([4 * np.cos(4 * y), np.sin(x) * np.cos(2 * y)]))
    linear = np.stack([-viscosity * k2 - drag, -diffusivity * k2 - decay])
    ikx, iky = 1j * kx, 1j * ky

    def tendency(state: np.ndarray) -> np.ndarray:
        psi = state[0] * inverse_laplacian
        w, c = state
        gradients = np.stack([iky * psi, -ikx * psi, ikx * w, iky * w, ikx * c, iky * c])
        u, v, wx, wy, cx, cy = np.fft.irfft2(gradients, (size, size))
        products = np.stack([u * wx + v * wy, u * cx + v * cy])
        return forcing - np.fft.rfft2(products) * dealias

    state = np.fft.rfft2(rng.standard_normal((2, size, size))) * np.exp(-k2 / 8)
    explicit, implicit = 1 + dt / 2 * linear, 1 / (1 - dt / 2 * linear)
    out = np.empty((frames, 2, size, size), np.float32)
    for step in range(spinup + frames * every):
        first = tendency(state)
        predicted = (explicit * state + dt * first) * implicit
        state = (explicit * state + dt / 2 * (first + tendency(predicted))) * implicit
        if step >= spinup and (step - spinup) % every == 0:
            out[(step - spinup) // every] = np.fft.irfft2(state, (size, size))
    return out
