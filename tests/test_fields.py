"""Field data (.npy, .npz, HDF5, the embedded Navier-Stokes) and the forecast metrics."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from keras_fourier.data.fields import field_dataset, load_field_source, parse_field_source
from keras_fourier.data.navier_stokes import navier_stokes, solve
from keras_fourier.metrics import AnomalyCorrelation, ChannelRMSE, FieldMSE, RelativeL2

pytestmark = pytest.mark.single_backend

FRAMES = np.random.default_rng(0).normal(size=(20, 3, 4, 6)).astype(np.float32)
FRAMES *= np.array([1.0, 10.0, 0.1], np.float32)[:, None, None]
FRAMES += np.array([0.0, 5.0, -2.0], np.float32)[:, None, None]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fields")
    np.save(folder / "a.npy", FRAMES)
    np.savez(folder / "a.npz", fields=FRAMES, other=FRAMES[:, 0])
    with h5py.File(folder / "a.h5", "w") as file:
        file["fields"] = FRAMES
        file["group/one"] = FRAMES[:, 1]
    return folder


@pytest.mark.parametrize("name", ["a.npy", "a.npz", "a.h5"])
def test_pairs_are_normalised_frames_lead_steps_apart_with_the_train_climatology(files, name):
    source = load_field_source(f"fields:{files / name}?lead=2")
    assert source.splits == {"train": (0, 14), "validation": (14, 17), "test": (17, 20)}
    train = FRAMES[:14].astype(np.float64)
    np.testing.assert_allclose(source.mean, train.mean((0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(source.std, train.std((0, 2, 3)), rtol=1e-5)
    inputs, targets = next(iter(field_dataset(source, "validation", batch_size=8)))
    assert inputs.shape == (1, 4, 6, 3) and targets.shape == (1, 4, 6, 6)  # 3 frames, 1 pair

    def normalised(frame):
        return (np.moveaxis(frame, 0, -1) - source.mean) / source.std

    np.testing.assert_allclose(inputs[0], normalised(FRAMES[14]), atol=1e-5)
    np.testing.assert_allclose(targets[0, ..., :3], normalised(FRAMES[16]), atol=1e-5)
    np.testing.assert_allclose(targets[0, ..., 3:], normalised(train.mean(0)), atol=1e-5)
    batches = list(field_dataset(source, "train", batch_size=4, seed=1))
    assert len(batches) == 3  # 12 pairs, shuffled
    firsts = sorted(float(x[i, 0, 0, 0]) for x, _ in batches for i in range(4))
    expected = sorted(float(normalised(FRAMES[t])[0, 0, 0]) for t in range(12))
    np.testing.assert_allclose(firsts, expected, atol=1e-5)


def test_options_choose_the_array_channels_and_given_statistics(files):
    stats = files / "stats"
    stats.mkdir()
    # FourCastNet's files cover more channels than the model uses: indexed by channel.
    np.save(stats / "global_means.npy", np.array([1.0, 2.0, 3.0, 9.0]).reshape(1, 4, 1, 1))
    np.save(stats / "global_stds.npy", np.array([2.0, 4.0, 8.0, 9.0]).reshape(1, 4, 1, 1))
    source = load_field_source(f"fields:{files / 'a.npz'}?channels=2,0&stats={stats}")
    assert source.shape == (4, 6, 2)
    np.testing.assert_allclose(source.mean, [3.0, 1.0])
    inputs, _ = next(iter(field_dataset(source, "test", batch_size=1)))
    np.testing.assert_allclose(inputs[0, ..., 0], (FRAMES[17, 2] - 3.0) / 8.0, atol=1e-6)
    one = load_field_source(f"fields:{files / 'a.h5'}?dataset=group/one&splits=0.5,0.25")
    assert one.shape == (4, 6, 1) and one.splits["train"] == (0, 10)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("fields:{}/missing.npy", "no such file"),
        ("fields:{}/a.npy?lead=0", "lead must be a positive int"),
        ("fields:{}/a.npy?speed=2", "is not one of lead"),
        ("fields:{}/a.npy?channels=3", r"channels \[3\] outside"),
        ("fields:{}/a.npy?lead=3", "too few for one pair"),
        ("fields:{}/a.npz?dataset=nope", "has no array 'nope'"),
        ("fields:{}/bad.npy", "not a .npy file"),
        ("fields:{}/flat.npy", r"shape \(4, 6\); expected"),
        ("fields:{}/two.npz", "holds 2 arrays"),
        ("fields:{}/a.txt", "not a .npy, .npz, .h5 or .hdf5"),
        ("fields:{}/short.npy", r"declares a float32 array of shape \(20, 3, 4, 6\) \(5,760 bytes"),
        ("fields:{}/fortran.npy", "in Fortran order"),
    ],
)
def test_bad_sources_are_one_line_errors_naming_them(files, spec, message):
    (files / "bad.npy").write_bytes(b"not numpy at all")
    (files / "a.txt").write_text("x")
    np.save(files / "flat.npy", FRAMES[0, 0])
    np.savez(files / "two.npz", p=FRAMES, q=FRAMES)
    np.save(files / "fortran.npy", np.asfortranarray(FRAMES))
    np.save(files / "short.npy", FRAMES)
    with open(files / "short.npy", "r+b") as file:
        file.truncate(os.path.getsize(files / "short.npy") - 4)
    source = spec.format(files)
    with pytest.raises(ValueError, match=message) as error:
        load_field_source(source)
    assert "\n" not in str(error.value) and f"data={source}" in str(error.value)
    before = sorted(path.name for path in files.iterdir())
    assert sorted(path.name for path in files.iterdir()) == before


def test_embedded_navier_stokes_is_deterministic_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    first = navier_stokes(16, 6, spinup=50, seed=3)
    (cached,) = (tmp_path / "keras_fourier" / "datasets").iterdir()
    np.testing.assert_array_equal(np.load(cached), first)
    options = {"every": 2, "dt": 0.025, "viscosity": 1e-3, "drag": 0.1}
    options.update(diffusivity=1e-3, decay=0.1)
    again = solve(16, 6, spinup=50, seed=3, **options)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, solve(16, 6, spinup=50, seed=4, **options))
    assert first.shape == (6, 2, 16, 16) and np.isfinite(first).all()
    cached.write_bytes(b"damaged")
    np.testing.assert_array_equal(navier_stokes.__wrapped__(16, 6, spinup=50, seed=3), first)
    assert parse_field_source("navier_stokes?lead=2").path is None


def test_field_metrics_against_their_formulas():
    rng = np.random.default_rng(0)
    truth, climatology = rng.normal(size=(2, 3, 4, 5, 2))
    predicted = truth + 0.1 * rng.normal(size=truth.shape)
    targets = np.concatenate([truth, climatology], -1).astype(np.float32)
    predicted = predicted.astype(np.float32)
    errors = np.sqrt(((predicted - truth) ** 2).sum((1, 2, 3))) / np.sqrt((truth**2).sum((1, 2, 3)))
    metric = RelativeL2()
    metric.update_state(targets[:1], predicted[:1])
    metric.update_state(targets[1:], predicted[1:])
    assert float(metric.result()) == pytest.approx(errors.mean(), rel=1e-5)
    rmse = ChannelRMSE(1)
    rmse.update_state(targets, predicted)
    expected = np.sqrt(((predicted - truth)[..., 1] ** 2).mean())
    assert float(rmse.result()) == pytest.approx(expected, rel=1e-5)
    p, t = predicted - climatology, truth - climatology
    acc = ((p * t).sum((1, 2)) / np.sqrt((p**2).sum((1, 2)) * (t**2).sum((1, 2)))).mean()
    correlation = AnomalyCorrelation()
    correlation.update_state(targets, predicted)
    assert float(correlation.result()) == pytest.approx(acc, rel=1e-5)
    loss = float(FieldMSE()(targets, predicted))
    assert loss == pytest.approx(((predicted - truth) ** 2).mean(), rel=1e-5)
