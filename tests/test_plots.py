"""plot_filters and plot_history write non-empty PNGs of the right content."""

import numpy as np
import pytest

import keras_fourier
from keras_fourier.layers import GlobalFilter
from keras_fourier.plots import global_filters
from tests.test_export import _tiny_variant

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _assert_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 1000
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []


def test_plot_filters_draws_one_row_per_global_filter_block(tmp_path):
    model = keras_fourier.build_model(depths=3, dims=8, patch_size=4, input_shape=(16, 16, 3))
    path = tmp_path / "filters.png"
    figure = keras_fourier.plot_filters(model, path, channels=4)
    _assert_png(path)
    images = [axis.images[0].get_array() for axis in figure.axes if axis.images]
    assert len(images) == 3 * 4
    weight = model.get_layer("stage0_block0_mixer").complex_weight.numpy()  # (4, 3, 8, 2)
    amplitude = np.log(np.hypot(weight[..., 1, 0], weight[..., 1, 1]) + 1e-8)
    np.testing.assert_allclose(images[1], np.fft.fftshift(amplitude, axes=0), rtol=1e-5)


def test_global_filters_of_hornet_and_of_a_single_layer():
    hornet = _tiny_variant("hornet_t_gf")((64, 64))
    filters = global_filters(hornet)
    assert [name for name, _ in filters] and all(f.ndim == 3 for _, f in filters)
    layer = GlobalFilter()
    layer.build((None, 6, 6, 5))
    ((name, weight),) = global_filters(layer)
    assert name == layer.name and weight.shape == (5, 6, 4) and np.iscomplexobj(weight)


def test_plot_filters_refuses_models_without_global_filters():
    model = _tiny_variant("afnonet_s4")((32, 32))
    with pytest.raises(ValueError, match=r"needs GlobalFilter or GlobalLocalFilter layers"):
        keras_fourier.plot_filters(model)
    with pytest.raises(
        ValueError, match=r"`channels` must be a positive int. Received: channels=0"
    ):
        keras_fourier.plot_filters(model, channels=0)


def test_plot_history_draws_train_and_validation_curves(tmp_path):
    (tmp_path / "history.csv").write_text(
        "epoch,accuracy,learning_rate,loss,val_accuracy,val_loss\n"
        "0,0.5,0.001,1.2,0.55,1.1\n1,0.7,0.0005,0.8,0.72,0.9\n2,0.8,0.0001,0.6,,\n"
    )
    path = tmp_path / "history.png"
    figure = keras_fourier.plot_history(tmp_path, path)
    _assert_png(path)
    panels = {axis.get_title(): axis for axis in figure.axes}
    assert sorted(panels) == ["accuracy", "learning_rate", "loss"]
    lines = {line.get_label(): line for line in panels["loss"].lines}
    np.testing.assert_array_equal(lines["loss"].get_xdata(), [1, 2, 3])
    np.testing.assert_array_equal(lines["loss"].get_ydata(), [1.2, 0.8, 0.6])
    np.testing.assert_array_equal(lines["val_loss"].get_ydata(), [1.1, 0.9])
    with pytest.raises(ValueError, match=r"No training history in .*history\.csv"):
        keras_fourier.plot_history(tmp_path / "empty")
