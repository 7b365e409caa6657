"""Vision model builders, driven by the variant table."""

import dataclasses
import itertools

import keras
import numpy as np
import pytest

import keras_fourier
import keras_fourier.models as models
from keras_fourier import layers
from keras_fourier.models import catalog, vision_weights
from keras_fourier.models.family import FFNS, MIXERS
from keras_fourier.models.vision import BUILT_SIZE, build_vision_model
from keras_fourier.weights import resize
from tests.harness import random_input, run_model_checks

# The layer, model and weight tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend

OFFICIAL_PARAMS = {
    "GFNetTi": 7_511_784,
    "GFNetXS": 15_985_768,
    "GFNetS": 24_869_608,
    "GFNetB": 43_120_616,
    "GFNetHTi": 15_085_096,
    "GFNetHS": 32_162_632,
    "GFNetHB": 53_744_200,
    "HorNetT7x7": 22_409_512,
    "HorNetTGF": 22_991_848,
    "HorNetS7x7": 49_528_264,
    "HorNetSGF": 50_401_768,
    "HorNetB7x7": 87_256_680,
    "HorNetBGF": 88_421_352,
    "HorNetL7x7": 194_542_504,
    "HorNetLGF": 196_289_512,
    "AFNONetS4": 16_266_856,
}
# GFNet Table 2 and HorNet Table 1 (GFLOPs at 224 x 224, as printed; the AFNO paper has no
# AFNONet-S4 figure).
PAPER_GFLOPS = {
    "GFNetTi": 1.3,
    "GFNetXS": 2.9,
    "GFNetS": 4.5,
    "GFNetB": 7.9,
    "GFNetHTi": 2.1,
    "GFNetHS": 4.6,
    "GFNetHB": 8.6,
    "HorNetT7x7": 4.0,
    "HorNetTGF": 3.9,
    "HorNetS7x7": 8.8,
    "HorNetSGF": 8.7,
    "HorNetB7x7": 15.6,
    "HorNetBGF": 15.5,
    "HorNetL7x7": 34.8,
    "HorNetLGF": 34.6,
}


def test_every_builder_has_an_official_count():
    vision = {name for name, row in models.BUILDERS.items() if row.family.modality == "image"}
    assert set(OFFICIAL_PARAMS) == vision
    assert set(PAPER_GFLOPS) == vision - {"AFNONetS4"}


def test_public_builder_names_are_the_catalogs():
    """Every builder of the catalog is exported, and nothing else is called a builder."""
    for module in (models, keras_fourier):
        exported = {name for name in module.__all__ if name in models.BUILDERS}
        assert exported == set(models.BUILDERS)
        for name, row in models.BUILDERS.items():
            assert getattr(module, name).__name__ == name
            assert row.key in row.family.variants
    assert {row.family.name for row in models.BUILDERS.values()} == {
        "GFNet",
        "GFNet-H",
        "HorNet",
        "AFNONet",
        "FNet",
    }
    assert [family.name for family in models.FAMILIES][-1] == "build_model"


@pytest.mark.single_backend
@pytest.mark.parametrize("builder", sorted(OFFICIAL_PARAMS))
def test_full_size_model_has_the_official_parameters_and_the_papers_flops(builder):
    # One build of each full-size model (the suite's most expensive builds) for both counts.
    model = getattr(models, builder)()
    assert model.count_params() == OFFICIAL_PARAMS[builder]
    if builder in PAPER_GFLOPS:
        assert round(keras_fourier.flops(model) / 1e9, 1) == PAPER_GFLOPS[builder]


@pytest.mark.parametrize("builder", ["GFNetTi", "GFNetHTi", "HorNetT7x7", "HorNetTGF", "AFNONetS4"])
def test_smallest_of_each_family_runs_at_a_small_non_square_input(builder):
    # Every row's wiring runs in test_variant_wiring_round_trips_through_keras_file;
    # this runs the full-depth smallest model of each family end to end.
    model = getattr(models, builder)(input_shape=(64, 32, 3), classes=7)
    out = keras.ops.convert_to_numpy(model(random_input((2, 64, 32, 3)) * 50 + 128))
    assert out.shape == (2, 7)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-5)


def _tiny(spec):
    hierarchical = len(spec.dims) > 1
    dims = (16, 32, 64, 128) if hierarchical else (32,)
    return dataclasses.replace(spec, dims=dims, depths=(1,) * len(dims))


# The smallest row of each family. Shrunk by _tiny, every other row has the same wiring as
# its family's (checked below), so these five round trips run every row's code path.
FAMILY_ROWS = ["afnonet_s4", "gfnet_h_ti", "gfnet_ti", "hornet_t_7x7", "hornet_t_gf"]


def test_every_variant_shrinks_to_the_wiring_of_its_familys_smallest_row():
    def wiring(variant):
        # drop_path_rate is set by the round trip; layer_scale's value is a number, its
        # presence a code path.
        spec = _tiny(models.VARIANTS[variant])
        return dataclasses.replace(spec, drop_path_rate=0.0, layer_scale=spec.layer_scale and 1.0)

    family_wirings = [wiring(row) for row in FAMILY_ROWS]
    assert all(family_wirings.count(w) == 1 for w in family_wirings)
    for variant in models.VARIANTS:
        assert wiring(variant) in family_wirings, variant


@pytest.mark.parametrize("variant", FAMILY_ROWS)
@pytest.mark.slow
def test_each_family_passes_the_model_checks(variant, tmp_path):
    spec = _tiny(models.VARIANTS[variant])
    size = spec.stride * 2
    run_model_checks(
        lambda: build_vision_model(
            spec, input_shape=(size, size, 3), classes=5, drop_path_rate=0.1, name=variant
        ),
        random_input((2, size, size, 3)) * 50 + 128,
        str(tmp_path),
        features=models.feature_extractor,
    )


def test_build_model_compositions_pass_the_model_checks(tmp_path):
    run_model_checks(
        lambda: catalog.create_model("afbo_tiny", num_classes=3, image_size=16, dims=16, depths=1),
        random_input((2, 16, 16, 3)) * 50 + 128,
        str(tmp_path),
        features=models.feature_extractor,
    )


def _block_adds(model, prefix="stage0_block0"):
    return sorted(la.name for la in model.layers if la.name.startswith(prefix) and "add" in la.name)


def test_gfnet_blocks_have_one_residual_and_hornet_blocks_two():
    gfnet = models.GFNetTi(input_shape=(32, 32, 3))
    hornet = models.HorNetT7x7(input_shape=(32, 32, 3))
    assert _block_adds(gfnet) == ["stage0_block0_add"]
    assert _block_adds(hornet) == ["stage0_block0_add1", "stage0_block0_add2"]
    assert gfnet.get_layer("stage0_block0_norm1").epsilon == 1e-6
    assert isinstance(gfnet.get_layer("pos_embed"), keras.layers.Layer)
    assert hornet.get_layer("stage0_block0_ls1").init_value == 1e-6
    # HorNet pools before its final norm; GFNet normalises tokens then pools.
    assert hornet.get_layer("norm").input.shape == (None, 512)
    assert gfnet.get_layer("norm").input.shape == (None, 2, 2, 256)


def test_drop_path_defaults_follow_official_configs():
    rates = {
        name: row.spec.drop_path_rate
        for name, row in models.BUILDERS.items()
        if row.family.modality == "image"
    }
    assert rates["GFNetS"] == 0.15 and rates["GFNetB"] == 0.25
    assert rates["GFNetHTi"] == 0.1 and rates["GFNetHS"] == 0.2 and rates["GFNetHB"] == 0.4
    assert rates["HorNetT7x7"] == 0.2 and rates["HorNetS7x7"] == 0.4 and rates["HorNetB7x7"] == 0.5
    model = models.GFNetHTi(input_shape=(32, 32, 3))
    last = model.get_layer("stage3_block2_drop_path")
    assert last.rate == pytest.approx(0.1)
    layer_scale = {models.VARIANTS[k].layer_scale for k in ("gfnet_h_ti", "gfnet_h_s", "gfnet_h_b")}
    assert layer_scale == {1e-3, 1e-5, 1e-6}


def test_afnonet_double_skip_is_an_option():
    default = models.AFNONetS4(input_shape=(16, 16, 3))
    skipped = models.AFNONetS4(input_shape=(16, 16, 3), double_skip=True)
    assert not any(la.name.endswith("_skip") for la in default.layers)
    assert skipped.get_layer("stage0_block0_skip") is not None


def test_preprocessing_normalises_imagenet_pixels():
    model = models.GFNetTi(input_shape=(32, 32, 3))
    layer = model.get_layer("preprocessing")
    pixels = np.array([[[[0.485 * 255, 0.456 * 255, 0.406 * 255]]]], "float32")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(pixels)), 0.0, atol=1e-5)
    bare = models.GFNetTi(input_shape=(32, 32, 3), include_preprocessing=False)
    assert "preprocessing" not in [la.name for la in bare.layers]


@pytest.mark.parametrize(
    ("pooling", "shape"), [(None, (None, 2, 2, 256)), ("avg", (None, 256)), ("max", (None, 256))]
)
def test_no_top_outputs_features_or_pooled_features(pooling, shape):
    model = models.GFNetTi(input_shape=(32, 32, 3), include_top=False, pooling=pooling)
    assert model.output_shape == shape


def test_logits_and_input_tensor():
    inputs = keras.Input((32, 32, 3))
    model = build_vision_model(
        _tiny(models.VARIANTS["hornet_t_gf"]),
        input_tensor=inputs,
        classifier_activation=None,
        classes=3,
    )
    assert model.inputs[0] is inputs
    out = keras.ops.convert_to_numpy(model(random_input((1, 32, 32, 3))))
    assert out.shape == (1, 3) and not np.allclose(out.sum(), 1.0)


@pytest.mark.slow
def test_feature_extractor_returns_named_stage_maps():
    features = models.feature_extractor(models.GFNetHTi(input_shape=(64, 96, 3)))
    out = features(random_input((1, 64, 96, 3)))
    assert {k: tuple(v.shape) for k, v in out.items()} == {
        "stage0": (1, 16, 24, 64),
        "stage1": (1, 8, 12, 128),
        "stage2": (1, 4, 6, 256),
        "stage3": (1, 2, 3, 512),
    }
    iso = models.feature_extractor(models.GFNetTi(input_shape=(32, 48, 3), include_top=False))
    assert list(iso.output) == ["stage0"]
    assert iso.output["stage0"].shape == (None, 2, 3, 256)


MIXER_CLASSES = {
    "global_filter": layers.GlobalFilter,
    "afno": layers.AFNO2D,
    "fno": layers.FNO2D,
    "fourier": layers.FourierMixing,
    "gnconv": layers.GnConv,
    "gnconv_gf": layers.GnConv,
    "attention": layers.SelfAttention,
}
FFN_CLASSES = {
    "mlp": layers.Mlp,
    "glu": layers.GLU,
    "afbo": layers.AFBO,
    "scfbo_gc": layers.SCFBO,
    "scfbo_oc": layers.SCFBO,
}


def test_build_model_builds_every_mixer_ffn_pair():
    assert set(MIXER_CLASSES) == set(MIXERS) and set(FFN_CLASSES) == set(FFNS)
    for mixer, ffn in itertools.product(MIXERS, FFNS):
        model = models.build_model(
            mixer, ffn, depths=1, dims=32, patch_size=4, input_shape=(16, 16, 3), classes=4
        )
        assert model.output_shape == (None, 4), (mixer, ffn)
        assert isinstance(model.get_layer("stage0_block0_mixer"), MIXER_CLASSES[mixer])
        assert isinstance(model.get_layer("stage0_block0_ffn"), FFN_CLASSES[ffn])


# Mixer and FFN are independent layers of a block: pairing every mixer with one FFN and
# every FFN with one mixer trains and round-trips each layer's code.
PAIRS = [(mixer, list(FFNS)[i % len(FFNS)]) for i, mixer in enumerate(MIXERS)]


@pytest.mark.parametrize(("mixer", "ffn"), PAIRS, ids=[f"{m}-{f}" for m, f in PAIRS])
@pytest.mark.slow
def test_build_model_pair_trains_and_round_trips(mixer, ffn, tmp_path):
    model = models.build_model(
        mixer, ffn, depths=1, dims=32, patch_size=4, input_shape=(16, 16, 3), classes=4
    )
    x = random_input((4, 16, 16, 3)) * 50 + 128
    y = np.arange(4) % 4
    loss = keras.losses.SparseCategoricalCrossentropy()
    model.compile(keras.optimizers.Adam(1e-3), loss, run_eagerly=True)
    before = float(loss(y, model(x)))
    model.train_on_batch(x, y)
    after = keras.ops.convert_to_numpy(model(x))
    assert float(loss(y, after)) < before
    path = tmp_path / "model.keras"
    model.save(path)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(keras.saving.load_model(path)(x)), after
    )


def test_build_model_hierarchical_with_layer_scale():
    model = models.build_model(
        "gnconv_gf",
        "glu",
        depths=[1, 1, 1, 1],
        dims=[16, 32, 64, 128],
        layer_scale=1e-6,
        input_shape=(64, 64, 3),
        classes=3,
    )
    assert model.output_shape == (None, 3)
    assert model.get_layer("stage3_block0_mixer").order == 5
    assert model.get_layer("stage0_block0_mixer").order == 2
    assert "pos_embed" not in [la.name for la in model.layers]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"weights": "nonexistent.weights.h5"},
            r"weights='nonexistent.weights.h5' \(no such file\)",
        ),
        ({"weights": 3}, "weights=3"),
        ({"weights": "imagenet", "classes": 10}, "classes=10"),
        ({"input_shape": (100, 100, 3)}, r"multiples of the model's stride 16.*\(100, 100, 3\)"),
        ({"input_shape": (None, 100, 3)}, r"stride 16.*input_shape=\(None, 100, 3\)"),
        ({"input_shape": (224, 224, None)}, r"input_shape=\(224, 224, None\)"),
        ({"include_top": False, "pooling": "mean"}, "pooling='mean'"),
        ({"drop_path_rate": 1.5}, "drop_path_rate=1.5"),
        ({"classes": 0}, "classes=0"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        models.GFNetTi(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mixer": "conv"}, "mixer='conv'"),
        ({"ffn": "moe"}, "ffn='moe'"),
        ({"depths": [2, 2], "dims": [32]}, r"depths=\[2, 2\], dims=\[32\]"),
        ({"depths": 0}, "depths=0"),
    ],
)
def test_build_model_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        models.build_model(**kwargs)


def test_builders_have_applications_signature_and_docs():
    import inspect

    signature = inspect.signature(models.GFNetS)
    assert list(signature.parameters)[:8] == [
        "include_top",
        "include_preprocessing",
        "weights",
        "input_tensor",
        "input_shape",
        "pooling",
        "classes",
        "classifier_activation",
    ]
    assert signature.parameters["drop_path_rate"].default == 0.15
    assert "GFNetS" in models.GFNetS.__doc__ and "multiples of 16" in models.GFNetS.__doc__
    with pytest.raises(TypeError):
        models.GFNetS(unknown_argument=1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: models.HorNetT7x7(input_shape=(32, 32, 3), fft_impl="bogus"),
        lambda: models.build_model("gnconv", "mlp", depths=[1], dims=[16], fft_impl="bogus"),
    ],
    ids=["hornet_7x7", "gnconv_mixer"],
)
def test_fft_impl_is_checked_even_without_fourier_layers(make):
    with pytest.raises(ValueError, match="Received: fft_impl='bogus'"):
        make()


@pytest.mark.parametrize(
    ("shape", "match"),
    [
        ((40, 32, 3), r"multiples of the model's stride 32.*\(None, 40, 32, 3\)"),
        ((None, None, None), r"static channels.*\(None, None, None, None\)"),
    ],
)
def test_input_tensor_is_checked_like_input_shape(shape, match):
    spec = _tiny(models.VARIANTS["hornet_t_gf"])
    with pytest.raises(ValueError, match=match):
        build_vision_model(spec, input_tensor=keras.Input(shape))


# Any input size: one tiny variant per family with a global filter or a position embedding
# (AFNONet: an embedding only). LayerScale 1 so that every filter shows in the outputs.
ANY_SIZE_VARIANTS = ["gfnet_ti", "gfnet_h_ti", "hornet_t_gf", "afnonet_s4"]


def _any_size_spec(variant):
    spec = _tiny(models.VARIANTS[variant])
    if variant == "afnonet_s4":
        spec = dataclasses.replace(spec, mixers=(("afno", {"num_blocks": 4}),))
    return dataclasses.replace(spec, layer_scale=None if spec.layer_scale is None else 1.0)


def _assign_resized(model, values):
    """Loads {path: value} of the any-size model into `model` through the checkpoint resizes."""
    for variable in model.weights:
        value, shape = values[variable.path], tuple(variable.shape)
        transform = vision_weights.transform_for(variable.path)
        if transform == "pos_embed":
            value = resize.resize_pos_embed(value.reshape(1, -1, value.shape[-1]), shape[1:3])
        elif transform == "global_filter":
            value = resize.resize_global_filter(value, shape[:2])
        elif transform == "global_local_filter":
            value = resize.resize_global_local_filter(value, shape[1:3])
        variable.assign(value)


def _features(model, x):
    out = models.feature_extractor(model)(x)
    return {name: keras.ops.convert_to_numpy(value) for name, value in out.items()}


@pytest.mark.parametrize("variant", ANY_SIZE_VARIANTS)
@pytest.mark.slow
def test_any_size_model_equals_a_model_built_at_that_size(variant):
    spec = _any_size_spec(variant)
    any_size = build_vision_model(spec, input_shape=(None, None, 3), include_top=False)
    assert any_size.input_shape == (None, None, None, 3)
    values = {v.path: keras.ops.convert_to_numpy(v) for v in any_size.weights}
    for size in [(BUILT_SIZE, BUILT_SIZE), (spec.stride * 5, spec.stride * 3)]:
        fixed = build_vision_model(spec, input_shape=(*size, 3), include_top=False)
        _assign_resized(fixed, values)
        x = random_input((1, *size, 3)) * 50 + 128
        expected = _features(fixed, x)
        actual = _features(any_size, x)
        assert actual.keys() == expected.keys()
        for name, value in expected.items():
            if size == (BUILT_SIZE, BUILT_SIZE):  # the built size: exactly today's model
                np.testing.assert_array_equal(actual[name], value)
            else:
                assert actual[name].shape == value.shape
                np.testing.assert_allclose(actual[name], value, atol=1e-5)


def test_any_size_model_refuses_a_size_its_stride_does_not_divide():
    model = models.GFNetTi(input_shape=(None, None, 3))
    with pytest.raises(ValueError, match=r"stride 16. Received: images of shape \(1, 40, 32, 3\)"):
        model(random_input((1, 40, 32, 3)))


def test_any_size_builders_hold_the_filters_of_the_release_size():
    spec = _tiny(models.VARIANTS["hornet_t_gf"])
    model = build_vision_model(spec, input_shape=(None, None, 3))
    fixed = build_vision_model(spec)
    assert [(v.path, v.shape) for v in model.weights] == [(v.path, v.shape) for v in fixed.weights]
    assert model.get_layer("stage2_block0_mixer").get_config()["filter_size"] == (14, 8)


@pytest.mark.single_backend
def test_any_size_model_round_trips_and_runs_in_a_run_time_sized_graph(tmp_path):
    import tensorflow as tf

    spec = _any_size_spec("gfnet_h_ti")
    model = build_vision_model(spec, input_shape=(None, None, 3), classes=3)
    path = tmp_path / "any_size.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    signature = [tf.TensorSpec((None, None, None, 3), tf.float32)]
    traced = tf.function(loaded.__call__, input_signature=signature)
    compiled = tf.function(loaded.__call__, input_signature=signature, jit_compile=True)
    for size in [(64, 96), (32, 32)]:
        x = random_input((2, *size, 3)) * 50 + 128
        expected = keras.ops.convert_to_numpy(model(x))
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(x)), expected)
        np.testing.assert_allclose(traced(x).numpy(), expected, atol=1e-6)
        np.testing.assert_allclose(compiled(x).numpy(), expected, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError):
        traced(random_input((1, 40, 32, 3)))
