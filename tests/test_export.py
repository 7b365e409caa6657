"""SavedModel and TFLite exports: parity with Keras per family, quantization, clients, errors."""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_fourier import GFNetTi, cli, export
from keras_fourier.cli.arguments import model_options
from keras_fourier.data import eval_transform, load_digits
from keras_fourier.export import parity
from keras_fourier.models import VARIANTS, FNet, build_model, resolve_model
from keras_fourier.models.vision import build_vision_model
from tests.harness import random_input

KIT = pathlib.Path(__file__).resolve().parents[1] / "export"
# The papers' 224 x 224 and a non-square size; AFNONet-S4's 4-pixel patches make 224 x 224
# 56 x 56 tokens (a minute of DFT products for the same check), so it exports at 112 x 112.
# HorNet 7x7 (no Fourier layer) and the AFBO composition (its global filter at 224 x 224 is
# GFNet's 14 x 14, exported above; AFBO has no DFT) export at the non-square size only.
SIZES = [(224, 224), (96, 160)]
FAMILY_SIZES = {
    "afnonet": [(112, 112), (96, 160)],
    "hornet_7x7": [(96, 160)],
    "build_model_afbo": [(96, 160)],
}
TINY_FNET = {"hidden_size": 16, "num_layers": 2, "intermediate_size": 32}
FNET_LENGTH = 12


def _load_kit_module(name: str):
    spec = importlib.util.spec_from_file_location(f"export_kit_{name}", KIT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tiny_variant(variant: str):
    def build(size: tuple[int, int]) -> keras.Model:
        spec = VARIANTS[variant]
        dims = (8, 16, 16, 32) if len(spec.dims) > 1 else (16,)
        spec = dataclasses.replace(spec, dims=dims, depths=(1,) * len(dims))
        return build_vision_model(spec, input_shape=(*size, 3), classes=5, name=variant)

    return build


def _tiny_afbo(size: tuple[int, int]) -> keras.Model:
    return build_model(
        "global_filter", "afbo", depths=1, dims=16, input_shape=(*size, 3), classes=5, name="afbo"
    )


FAMILIES = {
    "gfnet": _tiny_variant("gfnet_ti"),
    "gfnet_h": _tiny_variant("gfnet_h_ti"),
    "hornet_7x7": _tiny_variant("hornet_t_7x7"),
    "hornet_gf": _tiny_variant("hornet_t_gf"),
    "afnonet": _tiny_variant("afnonet_s4"),
    "build_model_afbo": _tiny_afbo,
}


def _small_gfnet() -> keras.Model:
    return _tiny_variant("gfnet_ti")((32, 48))


def _tiny_fnet(num_classes: int | None) -> keras.Model:
    # With the optional padding mask: the export of every input FNet can take.
    return FNet(
        TINY_FNET,
        use_padding_mask=True,
        vocabulary_size=50,
        max_sequence_length=16,
        sequence_length=FNET_LENGTH,
        num_segments=2,
        num_classes=num_classes,
    )


def _fnet_inputs(batch: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    mask = np.ones((batch, FNET_LENGTH), "int32")
    mask[:, 9:] = 0
    return {
        "token_ids": rng.integers(0, 50, (batch, FNET_LENGTH)).astype("int32"),
        "segment_ids": rng.integers(0, 2, (batch, FNET_LENGTH)).astype("int32"),
        "padding_mask": mask,
    }


def _images(size: tuple[int, int], batch: int = 2) -> np.ndarray:
    return np.round(np.clip(random_input((batch, *size, 3)) * 60 + 128, 0, 255))


def _serve_json(loaded, body: dict) -> dict[str, np.ndarray]:
    """Runs a `:predict` JSON body (row format) as TF Serving does, through `loaded`."""
    signature = loaded.signatures[body.get("signature_name", "serving_default")]
    _, specs = signature.structured_input_signature
    rows = body["instances"]
    if len(specs) == 1 and not (isinstance(rows[0], dict) and set(rows[0]) == set(specs)):
        (name,) = specs
        rows = [{name: row} for row in rows]

    def decode(value):
        if isinstance(value, dict) and set(value) == {"b64"}:
            return base64.b64decode(value["b64"])
        return value

    columns = {
        name: tf.constant([decode(row[name]) for row in rows], dtype=spec.dtype)
        for name, spec in specs.items()
    }
    return {name: value.numpy() for name, value in signature(**columns).items()}


def _predict(model: keras.Model, inputs) -> np.ndarray:
    return keras.ops.convert_to_numpy(model(inputs, training=False))


@pytest.mark.parametrize(
    ("family", "size"),
    [
        pytest.param(family, size, id=f"{family}-{size[0]}x{size[1]}")
        for family in sorted(FAMILIES)
        for size in FAMILY_SIZES.get(family, SIZES)
    ],
)
def test_vision_family_exports_to_saved_model_and_builtin_tflite(family, size, tmp_path):
    model = FAMILIES[family](size)
    report = export.saved_model(model, tmp_path / "serving", output="logits", verbose=False)
    assert report.path == str(tmp_path / "serving" / "1")
    assert os.path.isfile(os.path.join(report.path, "saved_model.pb"))
    assert os.path.isdir(os.path.join(report.path, "variables"))
    assert os.listdir(tmp_path / "serving") == ["1"]
    assert set(report.max_abs_diff) == {"serving_default", "serving_bytes"}
    assert max(report.max_abs_diff.values()) <= 1e-5
    height, width = size
    for line in (
        "inputs['images'] tensor_info:",
        f"shape: (-1, {height}, {width}, 3)",
        "inputs['image_bytes'] tensor_info:",
        "dtype: DT_STRING",
        "outputs['logits'] tensor_info:",
        "shape: (-1, 5)",
    ):
        assert line in report.signatures

    lite = export.tflite(model, tmp_path / "model.tflite", output="logits", verbose=False)
    assert lite.max_abs_diff <= 1e-4
    assert lite.size_bytes == os.path.getsize(tmp_path / "model.tflite")
    assert lite.top1_agreement is None
    assert b"Flex" not in (tmp_path / "model.tflite").read_bytes()


@pytest.mark.parametrize("num_classes", [3, None], ids=["classifier", "encoder"])
def test_fnet_exports_take_token_ids_segment_ids_and_mask(num_classes, tmp_path):
    model = _tiny_fnet(num_classes)
    report = export.saved_model(model, tmp_path / "fnet", version=3, verbose=False)
    assert set(report.max_abs_diff) == {"serving_default"}
    for name in ("token_ids", "segment_ids", "padding_mask"):
        assert f"inputs['{name}'] tensor_info:" in report.signatures
    assert "dtype: DT_INT32" in report.signatures
    assert f"shape: (-1, {FNET_LENGTH})" in report.signatures
    outputs = ["probabilities"] if num_classes else ["pooled_output", "sequence_output"]
    for name in outputs:
        assert f"outputs['{name}'] tensor_info:" in report.signatures

    # A REST body of dict rows, decoded as TF Serving does, gives Keras's answer.
    rest_client = _load_kit_module("rest_client")
    inputs = _fnet_inputs()
    rows = [{name: value[i] for name, value in inputs.items()} for i in range(3)]
    body = json.loads(json.dumps(rest_client.build_predict_request(rows)))
    served = _serve_json(tf.saved_model.load(report.path), body)
    expected = model(inputs, training=False)
    if num_classes:
        expected = {"probabilities": keras.ops.softmax(expected)}
    assert sorted(served) == outputs
    for name in outputs:
        np.testing.assert_allclose(served[name], expected[name], atol=1e-5)

    lite = export.tflite(model, tmp_path / "fnet.tflite", verbose=False)
    assert lite.max_abs_diff <= 1e-4


def test_rest_client_requests_are_accepted_by_both_signatures(tmp_path):
    model = _small_gfnet()
    report = export.saved_model(model, tmp_path / "gfnet", verbose=False)
    loaded = tf.saved_model.load(report.path)
    rest_client = _load_kit_module("rest_client")

    images = _images((32, 48))
    body = json.loads(json.dumps(rest_client.build_predict_request(list(images))))
    assert body["signature_name"] == "serving_default"
    served = _serve_json(loaded, body)
    np.testing.assert_allclose(served["probabilities"], _predict(model, images), atol=1e-5)

    paths = []
    for index, (encode, suffix) in enumerate(
        [(tf.io.encode_png, "png"), (tf.io.encode_jpeg, "jpg")]
    ):
        path = tmp_path / f"image{index}.{suffix}"
        path.write_bytes(encode(tf.cast(_images((40 + 9 * index, 30), 1)[0], tf.uint8)).numpy())
        paths.append(str(path))
    body = json.loads(json.dumps(rest_client.image_files_request(paths)))
    assert body["signature_name"] == "serving_bytes"
    assert set(body["instances"][0]) == {"b64"}
    served = _serve_json(loaded, body)
    transform = eval_transform((32, 48))
    decoded = np.stack(
        [
            transform(
                tf.cast(tf.io.decode_image(pathlib.Path(p).read_bytes(), channels=3), "float32")
            )
            for p in paths
        ]
    )
    np.testing.assert_allclose(served["probabilities"], _predict(model, decoded), atol=1e-5)
    assert rest_client.predict_url("http://host:8501/", "gfnet", 2) == (
        "http://host:8501/v1/models/gfnet/versions/2:predict"
    )


def test_tflite_file_runs_in_litert_like_keras(tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    model = _small_gfnet()
    export.tflite(model, tmp_path / "model.tflite", verbose=False)
    runner = Interpreter(str(tmp_path / "model.tflite")).get_signature_runner("serving_default")
    images = _images((32, 48), batch=3).astype("float32")
    actual = runner(images=images)["probabilities"]
    np.testing.assert_allclose(actual, _predict(model, images), atol=1e-5)


@pytest.fixture(scope="module")
def digits_model():
    """A tiny GFNet trained on the embedded digits, and the (x, y) splits."""
    keras.utils.set_random_seed(0)
    x_train, y_train = load_digits("train")
    x_test, y_test = load_digits("test")
    x_train, x_test = np.repeat(x_train, 3, axis=-1), np.repeat(x_test, 3, axis=-1)
    model = build_model(
        "global_filter", "mlp", depths=1, dims=32, patch_size=2, input_shape=(8, 8, 3), classes=10
    )
    model.compile(
        keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    model.fit(x_train, y_train, batch_size=32, epochs=10, verbose=0)
    return model, (x_train, y_train), (x_test, y_test)


def test_quantized_tflite_agrees_with_keras_on_digits(digits_model, tmp_path):
    model, (x_train, y_train), (x_test, y_test) = digits_model
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    assert accuracy > 0.85
    calibration = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(64).take(10)
    reports = {}
    for quantization in (None, "float16", "dynamic", "int8"):
        reports[quantization] = export.tflite(
            model,
            tmp_path / f"digits_{quantization}.tflite",
            quantization,
            representative_dataset=calibration if quantization == "int8" else None,
            validation_data=[(x_test[:200], y_test[:200]), (x_test[200:], y_test[200:])],
            verbose=False,
        )
    for quantization, report in reports.items():
        assert report.num_examples == len(x_test)
        assert report.top1_agreement >= (1.0 if quantization is None else 0.98), quantization
    assert reports[None].max_abs_diff <= 1e-4
    assert reports["int8"].size_bytes < reports[None].size_bytes
    assert reports["dynamic"].size_bytes < reports[None].size_bytes


def test_bad_arguments_raise_and_leave_files_untouched(tmp_path):
    model = _small_gfnet()
    existing = tmp_path / "serving" / "1"
    existing.mkdir(parents=True)
    (existing / "saved_model.pb").write_bytes(b"old")
    with pytest.raises(ValueError, match=r"Version 1 already exists.*overwrite=True"):
        export.saved_model(model, tmp_path / "serving", version=1)
    for version in (-1, "2", True):
        with pytest.raises(ValueError, match="`version`"):
            export.saved_model(model, tmp_path / "serving", version=version)
    with pytest.raises(ValueError, match="'scores'"):
        export.saved_model(model, tmp_path / "serving", version=2, output="scores")
    with pytest.raises(ValueError, match=r"crop_pct=1\.5"):
        export.saved_model(model, tmp_path / "serving", version=2, crop_pct=1.5)
    headless = build_model(
        "fourier", depths=1, dims=16, input_shape=(32, 32, 3), include_top=False, pooling="avg"
    )
    with pytest.raises(ValueError, match="output='logits' needs a model"):
        export.saved_model(headless, tmp_path / "serving", version=2, output="logits")
    assert os.listdir(tmp_path / "serving") == ["1"]
    assert (existing / "saved_model.pb").read_bytes() == b"old"

    lite = tmp_path / "model.tflite"
    lite.write_bytes(b"old")
    with pytest.raises(ValueError, match="'int4'"):
        export.tflite(model, tmp_path / "new.tflite", quantization="int4")
    with pytest.raises(ValueError, match="quantization='int8' needs a `representative_dataset`"):
        export.tflite(model, tmp_path / "new.tflite", quantization="int8")
    with pytest.raises(ValueError, match="only used with quantization='int8'"):
        export.tflite(model, tmp_path / "new.tflite", "float16", [_images((32, 48))])
    with pytest.raises(ValueError, match=r"model\.tflite' already exists"):
        export.tflite(model, lite)
    assert sorted(os.listdir(tmp_path)) == ["model.tflite", "serving"]
    assert lite.read_bytes() == b"old"

    any_size = build_model("afno", depths=1, dims=16, patch_size=4, input_shape=(None, None, 3))
    for write in (
        lambda: export.saved_model(any_size, tmp_path / "serving", version=2),
        lambda: export.tflite(any_size, tmp_path / "any.tflite"),
    ):
        with pytest.raises(ValueError, match=r"fixed input size.*image_size"):
            write()
    assert sorted(os.listdir(tmp_path)) == ["model.tflite", "serving"]


def test_failed_checks_write_nothing_and_overwrite_replaces(tmp_path, monkeypatch, capsys):
    model = _small_gfnet()
    report = export.saved_model(model, tmp_path / "serving", version=1)
    printed = capsys.readouterr().out
    assert "MetaGraphDef with tag-set: 'serve' contains the following SignatureDefs:" in printed
    assert "signature_def['serving_bytes']:" in printed
    assert "Parity serving_default" in printed
    marker = pathlib.Path(report.path) / "marker"
    marker.write_text("old")
    export.saved_model(model, tmp_path / "serving", version=1, overwrite=True, verbose=False)
    assert not marker.exists()

    monkeypatch.setitem(parity.TOLERANCES, "saved_model", -1.0)
    with pytest.raises(RuntimeError, match="SavedModel's 'serving_default' signature differs from"):
        export.saved_model(model, tmp_path / "serving", version=2, verbose=False)
    assert os.listdir(tmp_path / "serving") == ["1"]
    monkeypatch.setitem(parity.TOLERANCES, "tflite", -1.0)
    with pytest.raises(RuntimeError, match="differs from Keras"):
        export.tflite(model, tmp_path / "model.tflite", verbose=False)
    assert os.listdir(tmp_path) == ["serving"]


def test_bytes_transform_is_the_evaluation_transform():
    image = tf.constant(_images((50, 70), 1)[0].astype("float32"))
    np.testing.assert_array_equal(
        eval_transform((32, 32), crop_pct=0.875)(image), eval_transform(32, 0.875)(image)
    )
    assert tuple(eval_transform((96, 160))(image).shape) == (96, 160, 3)


def test_grpc_client_explains_its_optional_dependency(monkeypatch):
    grpc_client = _load_kit_module("grpc_client")
    monkeypatch.setitem(sys.modules, "tensorflow_serving", None)
    with pytest.raises(ImportError, match="pip install tensorflow-serving-api"):
        grpc_client.build_request("gfnet_ti", [b"image"])


def test_cli_exports_a_keras_file_with_int8_calibrated_on_digits(digits_model, tmp_path, capsys):
    model, _, _ = digits_model
    model.save(tmp_path / "digits.keras")
    out = tmp_path / "models"
    argv = ["export", str(tmp_path / "digits.keras"), "--quantize", "none,int8", "--out", str(out)]
    argv += ["--data", "digits", "--num-batches", "3", "--version", "4"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "inputs['image_bytes'] tensor_info:" in printed
    assert "int8" in printed
    assert "top-1 agreement" in printed
    name = model.name
    assert os.path.isfile(out / name / "4" / "saved_model.pb")
    assert sorted(os.listdir(out)) == sorted(
        [name, f"{name}.tflite", f"{name}_int8.tflite", "models.config"]
    )
    # models.config names the exported model as its folder, so TF Serving serves it as is.
    config = (out / "models.config").read_text()
    assert f'name: "{name}"' in config and f'base_path: "/models/{name}"' in config
    assert config.count("config {") == 1
    assert f"TF Serving: {out / 'models.config'} lists {name};" in printed

    assert cli.main([*argv, "--format", "saved_model"]) == 2
    error = capsys.readouterr().err
    assert "Version 4 already exists" in error and "pass --overwrite" in error
    assert cli.main(["export", str(tmp_path / "digits.keras"), "--weights", "x", "--out", "o"]) == 2
    assert "--weights only apply to builder names" in capsys.readouterr().err


def test_cli_builds_named_models_with_weights(tmp_path, capsys):
    reference = GFNetTi(input_shape=(32, 48, 3), classes=5)
    reference.save_weights(tmp_path / "gfnet.weights.h5")
    for name in ("gfnet_ti", "GFNetTi"):
        argv = ["export", name, "--weights", str(tmp_path / "gfnet.weights.h5"), "--out", "o"]
        args = cli.build_parser().parse_args([*argv, "--image-size", "32x48", "--classes", "5"])
        model = resolve_model(args.model, **model_options(args))
        assert model.name == "gfnet_ti"
        assert model.input_shape == (None, 32, 48, 3)
        for actual, expected in zip(model.get_weights(), reference.get_weights(), strict=True):
            np.testing.assert_array_equal(actual, expected)
    # gfnet_tiny is a model name of every subcommand (tests/test_resolve.py); gfnet_q is none.
    assert cli.main(["export", "gfnet_q", "--out", str(tmp_path)]) == 2
    assert "Unknown model 'gfnet_q'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["export", "gfnet_ti", "--quantize", "int4", "--out", str(tmp_path)])
    assert "int4" in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["gfnet.weights.h5"]


class _LocalServing:
    """A stand-in for TF Serving's REST API on 127.0.0.1: :predict and /metadata of one model.

    Requests TF Serving would refuse (an input the signature cannot take) get HTTP 400 with
    ``{"error": <TensorFlow's message>}``, as TF Serving answers.
    """

    def __init__(self, loaded, name: str):
        import http.server
        import threading

        serving = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                assert self.path == f"/v1/models/{name}/metadata"
                self._answer(200, serving.metadata())

            def do_POST(self):
                assert self.path == f"/v1/models/{name}:predict"
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                try:
                    (output,) = _serve_json(loaded, body).values()
                except (tf.errors.InvalidArgumentError, ValueError, TypeError) as error:
                    self._answer(400, {"error": str(error).splitlines()[0]})
                    return
                self._answer(200, {"predictions": output.tolist()})

        self.loaded = loaded
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def metadata(self) -> dict:
        signatures = {}
        for key, signature in self.loaded.signatures.items():
            _, specs = signature.structured_input_signature
            signatures[key] = {
                "inputs": {
                    name: {"tensor_shape": {"dim": [{"size": str(d or -1)} for d in spec.shape]}}
                    for name, spec in specs.items()
                }
            }
        return {"metadata": {"signature_def": {"signature_def": signatures}}}


def test_rest_client_command_line_both_signatures_class_names_and_errors(tmp_path, capsys):
    model = _small_gfnet()  # 32x48 inputs, 5 classes
    loaded = tf.saved_model.load(export.saved_model(model, tmp_path / "gfnet", verbose=False).path)
    rest_client = _load_kit_module("rest_client")
    serving = _LocalServing(loaded, "gfnet")
    image = tmp_path / "image.png"
    image.write_bytes(tf.io.encode_png(tf.cast(_images((60, 70), 1)[0], tf.uint8)).numpy())
    base = ["--server", serving.url, "--model", "gfnet", "--top-k", "2"]
    line = rf"{re.escape(str(image))}: (\d) ?(\w*): ([\d.]+), (\d) ?(\w*): ([\d.]+)"

    assert rest_client.main([*base, str(image)]) == 0
    by_bytes = re.fullmatch(line, capsys.readouterr().out.strip())
    assert by_bytes and by_bytes.group(2) == ""

    # serving_default: float pixels decoded and centre-cropped by the client, size from the
    # model's metadata; the same top class as the in-graph transform of serving_bytes.
    labels = tmp_path / "labels.txt"
    labels.write_text("zero\none\ntwo\nthree\nfour\n")
    argv = [*base, "--signature", "serving_default", "--labels", str(labels), str(image)]
    assert rest_client.main(argv) == 0
    by_pixels = re.fullmatch(line, capsys.readouterr().out.strip())
    assert by_pixels, by_pixels
    assert by_pixels.group(1) == by_bytes.group(1)
    assert by_pixels.group(2) == ["zero", "one", "two", "three", "four"][int(by_pixels.group(1))]
    assert abs(float(by_pixels.group(3)) - float(by_bytes.group(3))) < 0.05
    pixels = np.asarray(rest_client.load_pixels(str(image), 32, 48))
    assert pixels.shape == (32, 48, 3) and pixels.min() >= 0 and pixels.max() <= 255

    # An input the model cannot take (4 channels): TF Serving's 400 and its text, status 1.
    four_channels = tmp_path / "four_channels.npy"
    np.save(four_channels, np.zeros((32, 48, 4), np.float32))
    wrong = [*base, "--signature", "serving_default", str(four_channels)]
    assert rest_client.main(wrong) == 1
    error = capsys.readouterr().err
    assert error.startswith("rest_client: error: TF Serving answered 400 Bad Request: ")
    assert len(error.splitlines()[0]) > len("rest_client: error: TF Serving answered 400 ") + 20
    serving.server.shutdown()


def test_kit_models_config_serves_the_main_jobs_model_as_export_writes_it(tmp_path):
    from keras_fourier.export import serving_config

    # `keras-fourier train` trains gfnet_tiny; exporting its model.keras writes this very file.
    assert (KIT / "models.config").read_text() == serving_config.models_config(["gfnet_tiny"])
    for name in ("gfnet_tiny", "hornet_tiny"):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "1" / "saved_model.pb").write_bytes(b"")
    (tmp_path / "not_a_model" / "1").mkdir(parents=True)
    (tmp_path / ".staging" / "1").mkdir(parents=True)
    path, names = serving_config.write_models_config(tmp_path)
    assert names == ["gfnet_tiny", "hornet_tiny"]
    text = pathlib.Path(path).read_text()
    assert text.count("config {") == 2 and 'base_path: "/models/hornet_tiny"' in text


def _xnnpack_partitions(path) -> int:
    """How many XNNPACK graphs LiteRT runs `path` in (one: no op outside the delegate)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()  # applies the default delegate, XNNPACK
    return [op["op_name"] for op in interpreter._get_ops_details()].count("DELEGATE")


def _export_as_one_xnnpack_graph(model, tmp_path, inputs, **options) -> dict:
    """Writes float32 and int8 TFLite files of `model`, each one XNNPACK graph: their reports."""
    reports = {}
    for quantization in (None, "int8"):
        path = tmp_path / f"{model.name}_{quantization}.tflite"
        calibration = inputs if quantization else None
        reports[quantization] = export.tflite(
            model, path, quantization, calibration, validation_data=inputs, verbose=False, **options
        )
        assert _xnnpack_partitions(path) == 1, quantization
    assert reports[None].max_abs_diff < 1e-4
    return reports


@pytest.mark.parametrize(
    ("mixer", "ffn"),
    [("gnconv_gf", "mlp"), ("global_filter", "mlp"), ("afno", "mlp"), ("attention", "afbo")],
)
def test_float32_and_int8_tflite_files_run_as_one_xnnpack_graph(tmp_path, mixer, ffn):
    # gnConv's uneven channel split (SPLIT_V) and its global-local interleave (PACK), the
    # int8 sums of spectral products, LayerNorm's last ADD, reshapes to a computed batch,
    # AFNO's int8 block-diagonal products (BATCH_MATMUL) and int8 residual ADDs of branches
    # under HorNet's initial layer scale (1e-6) ran outside XNNPACK before; so did AFBO's
    # slot gathers (GATHER) and block-diagonal products, attention's reshapes to a computed
    # batch and its int8 products of two activations (BATCH_MATMUL).
    keras.utils.set_random_seed(0)
    model = build_model(
        mixer, ffn, depths=[1, 1], dims=[16, 32], input_shape=(32, 32, 3), classes=10,
        classifier_activation=None, layer_scale=1e-6,
    )  # fmt: skip
    images = [random_input((4, 32, 32, 3), seed=seed) for seed in range(2)]
    reports = _export_as_one_xnnpack_graph(model, tmp_path, images)
    logits = np.concatenate([keras.ops.convert_to_numpy(model(batch)) for batch in images])
    assert 0 < reports["int8"].max_abs_diff < 0.05 * np.max(np.abs(logits))


def test_fnet_tflite_files_run_as_one_xnnpack_graph_after_the_id_lookups(tmp_path):
    # The Dense layers on (B, L, D) (tf.tensordot's shape arithmetic), the pooler's first
    # token (a slice dropping its axis) and the attention mask (SELECT_V2) cut FNet's files in
    # 12 XNNPACK graphs before; the id lookups (GATHER) stay before the one graph.
    keras.utils.set_random_seed(0)
    # FNet-Hybrid: a Fourier block, then an attention block with the padding mask.
    model = FNet(
        TINY_FNET, attention_layers=1, use_padding_mask=True, vocabulary_size=50,
        max_sequence_length=16, sequence_length=FNET_LENGTH, num_segments=2, num_classes=3,
    )  # fmt: skip
    batch = _fnet_inputs()
    inputs = [batch, {**batch, "token_ids": batch["token_ids"][:, ::-1].copy()}]
    reports = _export_as_one_xnnpack_graph(model, tmp_path, inputs, output="logits")
    logits = np.concatenate([keras.ops.convert_to_numpy(model(batch)) for batch in inputs])
    # Random N(0, 0.02) classifier weights give logits near 0.02: a tenth of that.
    assert 0 < reports["int8"].max_abs_diff < 0.1 * np.max(np.abs(logits))


def test_split_channels_slices_in_the_tflite_layout_with_the_same_values():
    from keras_fourier.layers import layout

    x = random_input((2, 3, 7))
    expected = [keras.ops.convert_to_numpy(p) for p in layout.split_channels(x, [1, 2, 4])]
    with layout.tflite_layout():
        sliced = [keras.ops.convert_to_numpy(p) for p in layout.split_channels(x, [1, 2, 4])]
    assert [p.shape for p in sliced] == [(2, 3, 1), (2, 3, 2), (2, 3, 4)]
    for actual, wanted in zip(sliced, expected, strict=True):
        np.testing.assert_array_equal(actual, wanted)
    assert layout.split_channels(x, [7]) == [x]
