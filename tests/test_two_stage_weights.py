"""mmdetection checkpoints of two-stage detectors: key map against NumPy heads, refusals, COCO."""

import functools
import io
import os

import keras
import numpy as np
import pytest

from keras_fourier import detection
from keras_fourier.cli import main
from keras_fourier.detection import coco
from keras_fourier.detection.checkpoints import (
    class_variables,
    load_detection_weights,
    mmdet_key_map,
)
from keras_fourier.detection.two_stage import TWO_STAGE_ARCHS
from keras_fourier.layers import AnchorBoxes, CascadeRoIHead, DetectionFPN, RPNHead, RPNProposals
from keras_fourier.tasks import instance_segmentation
from keras_fourier.training.config import TrainConfig
from keras_fourier.weights.convert import load_tensors
from keras_fourier.weights.pipeline import load_release
from keras_fourier.weights.pth import read_pth
from keras_fourier.weights.releases import Release
from tests.harness import to_numpy
from tests.test_checkpoints import OfficialState, gfnet_state
from tests.test_segmentation_models import _np_conv, _np_conv_module, _save_mmseg
from tests.test_tasks import write_tiny_instances

CHANNELS, FC, MASK, CLASSES, STAGES = 8, 16, 8, 3, 3
BACKBONE_CHANNELS = (4, 6, 8, 10)


def _mmdet_state(
    seed=0,
    cascade=True,
    classes=CLASSES,
    backbone_channels=BACKBONE_CHANNELS,
    channels=CHANNELS,
    fc=FC,
    mask_width=MASK,
) -> dict[str, np.ndarray]:
    """A random neck/rpn_head/roi_head state dict of mmdetection's CascadeRCNN or MaskRCNN.

    The cascade's heads are ``ConvFCBBoxHead`` (4 convs with BatchNorm, 1 fc) indexed by
    stage; Mask R-CNN's one ``Shared2FCBBoxHead`` (2 fcs) is not indexed.
    """
    rng = np.random.default_rng(seed)
    sd = {}

    def conv(prefix, cout, cin, k, bias=True):
        sd[f"{prefix}.weight"] = rng.normal(0, 1 / np.sqrt(cin * k * k), (cout, cin, k, k))
        if bias:
            sd[f"{prefix}.bias"] = rng.normal(0, 0.3, cout)

    for i, cin in enumerate(backbone_channels):
        conv(f"neck.lateral_convs.{i}.conv", channels, cin, 1)
        conv(f"neck.fpn_convs.{i}.conv", channels, channels, 3)
    conv("rpn_head.rpn_conv", channels, channels, 3)
    conv("rpn_head.rpn_cls", 3, channels, 1)
    conv("rpn_head.rpn_reg", 12, channels, 1)
    for s in range(STAGES if cascade else 1):
        head = f"roi_head.bbox_head.{s}" if cascade else "roi_head.bbox_head"
        for i in range(4 if cascade else 0):
            conv(f"{head}.shared_convs.{i}.conv", channels, channels, 3, bias=False)
            sd[f"{head}.shared_convs.{i}.bn.weight"] = rng.normal(1, 0.2, channels)
            sd[f"{head}.shared_convs.{i}.bn.bias"] = rng.normal(0, 0.2, channels)
            sd[f"{head}.shared_convs.{i}.bn.running_mean"] = rng.normal(0, 0.2, channels)
            sd[f"{head}.shared_convs.{i}.bn.running_var"] = rng.uniform(0.5, 1.5, channels)
            sd[f"{head}.shared_convs.{i}.bn.num_batches_tracked"] = np.array(9)
        sd[f"{head}.shared_fcs.0.weight"] = rng.normal(0, 0.05, (fc, channels * 49))
        sd[f"{head}.shared_fcs.0.bias"] = rng.normal(0, 0.3, fc)
        if not cascade:
            sd[f"{head}.shared_fcs.1.weight"] = rng.normal(0, 0.3, (fc, fc))
            sd[f"{head}.shared_fcs.1.bias"] = rng.normal(0, 0.3, fc)
        sd[f"{head}.fc_cls.weight"] = rng.normal(0, 0.5, (classes + 1, fc))
        sd[f"{head}.fc_cls.bias"] = rng.normal(0, 0.3, classes + 1)
        sd[f"{head}.fc_reg.weight"] = rng.normal(0, 0.5, (4 * classes, fc))
        sd[f"{head}.fc_reg.bias"] = rng.normal(0, 0.3, 4 * classes)
        mask = f"roi_head.mask_head.{s}" if cascade else "roi_head.mask_head"
        for i in range(4):
            conv(f"{mask}.convs.{i}.conv", mask_width, channels if i == 0 else mask_width, 3)
        sd[f"{mask}.upsample.weight"] = rng.normal(
            0, 0.5, (mask_width, mask_width, 2, 2)
        )  # (in, out, kh, kw)
        sd[f"{mask}.upsample.bias"] = rng.normal(0, 0.3, mask_width)
        conv(f"{mask}.conv_logits", classes, mask_width, 1)
    return sd


def _heads_model(cascade=True) -> keras.Model:
    """The two-stage detector past its backbone: FPN, RPN, proposals, RoI heads."""
    maps = [keras.Input((64 // 2**i, 64 // 2**i, c)) for i, c in enumerate(BACKBONE_CHANNELS)]
    images = keras.Input((256, 256, 3))
    levels = DetectionFPN(
        CHANNELS, num_outputs=5, start_level=0, add_extra_convs=None, name="neck"
    )(maps)
    anchors = AnchorBoxes(min_level=2, anchor_scale=8, scales_per_octave=1)(levels)
    raw = keras.layers.Concatenate()([anchors, RPNHead(channels=CHANNELS, name="rpn_head")(levels)])
    proposals = RPNProposals(max_proposals=50, pre_nms=100)(raw, images)
    row = TWO_STAGE_ARCHS["cascade_mask_rcnn" if cascade else "mask_rcnn"]["roi_head"]
    roi_head = CascadeRoIHead(
        CLASSES,
        **{**row, "bbox_head": {**row["bbox_head"], "conv_channels": CHANNELS, "fc_channels": FC}},
        mask_head={"channels": MASK},
        name="roi_head",
    )
    detections = roi_head(levels, proposals, images)
    return keras.Model([*maps, images], detections, name="heads")


def _np_bbox_head(features, sd, head):
    """mmdetection's ConvFCBBoxHead `head` on (N, 7, 7, C) RoI features, NCHW flatten included."""
    x = features
    i = 0
    while f"{head}.shared_convs.{i}.conv.weight" in sd:
        x = _np_conv_module(x, sd, f"{head}.shared_convs.{i}")
        i += 1
    x = x.transpose(0, 3, 1, 2).reshape(len(x), -1)  # (N, C, 7, 7) flattened, as PyTorch
    i = 0
    while f"{head}.shared_fcs.{i}.weight" in sd:
        x = np.maximum(
            x @ sd[f"{head}.shared_fcs.{i}.weight"].T + sd[f"{head}.shared_fcs.{i}.bias"], 0
        )
        i += 1
    logits = x @ sd[f"{head}.fc_cls.weight"].T + sd[f"{head}.fc_cls.bias"]
    deltas = x @ sd[f"{head}.fc_reg.weight"].T + sd[f"{head}.fc_reg.bias"]
    return logits, deltas.reshape(len(x), CLASSES, 4)


def _np_mask_head(features, sd, head):
    """mmdetection's FCNMaskHead `head` on (N, 14, 14, C): ConvTranspose2d's (in, out, 2, 2)."""
    x = features
    for i in range(4):
        x = np.maximum(
            _np_conv(x, sd[f"{head}.convs.{i}.conv.weight"], sd[f"{head}.convs.{i}.conv.bias"]), 0
        )
    n, h, w, _ = x.shape
    up = np.einsum("nhwc,coab->nhawbo", x, sd[f"{head}.upsample.weight"]).reshape(
        n, 2 * h, 2 * w, -1
    )
    up = np.maximum(up + sd[f"{head}.upsample.bias"], 0)
    return _np_conv(up, sd[f"{head}.conv_logits.weight"], sd[f"{head}.conv_logits.bias"])


def _np_rpn(levels, sd):
    """mmdetection's RPNHead: objectness (A,) and deltas (A, 4) per location, levels in order."""
    logits, deltas = [], []
    for level in levels:
        hidden = np.maximum(
            _np_conv(level, sd["rpn_head.rpn_conv.weight"], sd["rpn_head.rpn_conv.bias"]), 0
        )
        logits.append(
            _np_conv(hidden, sd["rpn_head.rpn_cls.weight"], sd["rpn_head.rpn_cls.bias"]).reshape(
                len(level), -1
            )
        )
        deltas.append(
            _np_conv(hidden, sd["rpn_head.rpn_reg.weight"], sd["rpn_head.rpn_reg.bias"]).reshape(
                len(level), -1, 4
            )
        )
    return np.concatenate(logits, 1), np.concatenate(deltas, 1)


def _inputs(seed=1):
    rng = np.random.default_rng(seed)
    maps = [
        rng.normal(size=(1, 64 // 2**i, 64 // 2**i, c)).astype("float32")
        for i, c in enumerate(BACKBONE_CHANNELS)
    ]
    return [*maps, rng.uniform(0, 255, (1, 256, 256, 3)).astype("float32")]


@pytest.mark.parametrize("cascade", [True, False], ids=["cascade_mask_rcnn", "mask_rcnn"])
def test_mmdet_checkpoint_of_the_heads_matches_numpy_heads(cascade, tmp_path):
    """A .pth in mmdetection's layout, read and converted by the package, against NumPy heads."""
    sd = _mmdet_state(cascade=cascade)
    path = _save_mmseg(tmp_path / "heads.pth", sd)
    model = _heads_model(cascade)
    load_tensors(model, read_pth(path), mmdet_key_map("none", cascade), source=str(path))
    *maps, _ = _inputs()
    levels = model.get_layer("neck")(maps)
    logits, deltas = _np_rpn([to_numpy(level).astype(np.float64) for level in levels], sd)
    raw = to_numpy(model.get_layer("rpn_head")(levels))  # per anchor: 4 deltas, 1 logit
    np.testing.assert_allclose(raw[..., 4], logits, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(raw[..., :4], deltas, atol=1e-4, rtol=1e-4)
    roi_head = model.get_layer("roi_head")
    rng = np.random.default_rng(2)
    corners = rng.uniform(0, 180, (1, 12, 2))
    rois = np.concatenate([corners, corners + rng.uniform(8, 76, (1, 12, 2))], -1).astype("float32")
    for s in range(roi_head.num_stages):
        index = f".{s}" if cascade else ""
        features = to_numpy(roi_head.bbox_roi_align(levels[:4], rois))[0].astype(np.float64)
        expected_logits, expected_deltas = _np_bbox_head(features, sd, f"roi_head.bbox_head{index}")
        actual = roi_head.stage_outputs(levels, rois, s, training=False)
        np.testing.assert_allclose(
            to_numpy(actual["logits"])[0], expected_logits, atol=1e-4, rtol=1e-4
        )
        np.testing.assert_allclose(
            to_numpy(actual["deltas"])[0], expected_deltas, atol=1e-4, rtol=1e-4
        )
        features = to_numpy(roi_head.mask_roi_align(levels[:4], rois))[0]
        expected = _np_mask_head(features.astype(np.float64), sd, f"roi_head.mask_head{index}")
        actual = to_numpy(roi_head.mask_logits(levels, rois, s))[0]
        np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=1e-4)
        assert np.abs(expected).max() > 1.0 and np.abs(expected_logits).max() > 1.0


def test_mismatched_mmdet_checkpoints_are_refused_by_name_and_leave_the_model_unchanged():
    sd = _mmdet_state()
    model = _heads_model()
    before = [variable.numpy().copy() for variable in model.weights]
    missing = {k: v for k, v in sd.items() if k != "roi_head.mask_head.1.upsample.weight"}
    extra = {**sd, "roi_head.bbox_head.3.fc_cls.weight": np.zeros((4, FC))}
    wrong = {**sd, "roi_head.bbox_head.2.shared_fcs.0.weight": np.zeros((FC, CHANNELS * 36))}
    fc = "roi_head.bbox_head.2.shared_fcs.0.weight -> roi_head/bbox_head_2/shared_fcs_0/kernel"
    cases = [
        (missing, "missing keys (1): roi_head.mask_head.1.upsample.weight"),
        (extra, "unexpected keys (1): roi_head.bbox_head.3.fc_cls.weight"),
        (wrong, f"wrong shapes (1): {fc}"),
    ]
    for state, expected in cases:
        with pytest.raises(ValueError) as error:
            load_tensors(model, state, mmdet_key_map("none"), source="cascade.pth")
        message = str(error.value)
        assert expected in message and "\n" not in message, message
        assert "model was left unchanged" in message
    for variable, value in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(variable.numpy(), value)


def test_coco_weights_arguments_are_checked_before_building():
    cases = [
        ({"backbone": "gfnet_h_ti"}, "backbone='gfnet_h_ti'"),
        ({"backbone": "hornet_t_gf", "neck": "horfpn_gf"}, "neck='horfpn_gf'"),
    ]
    for kwargs, expected in cases:
        with pytest.raises(ValueError) as error:
            detection.CascadeMaskRCNN(**{"backbone": "hornet_t_gf", "weights": "coco", **kwargs})
        assert expected in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ValueError, match="CascadeMaskRCNN"):
        detection.MaskRCNN("hornet_t_gf", weights="coco")


def test_coco_class_names_and_releases_ship_with_the_package():
    names = coco.class_names()
    assert len(names) == 80 and len(set(names)) == 80
    assert (names[0], names[56], names[79]) == ("person", "chair", "toothbrush")
    assert sorted(coco.RELEASES) == sorted(
        f"hornet_{size}_{kind}" for size in "tsbl" for kind in ("7x7", "gf")
    )
    assert [coco.RELEASES[k].box_ap for k in ("hornet_t_gf", "hornet_l_gf")] == [52.4, 56.0]


def test_coco_weights_come_from_the_mirror_and_a_mismatch_is_refused(tmp_path, monkeypatch):
    """The download path of weights='coco' (a temporary KERAS_HOME, a 127.0.0.1 mirror)."""
    from tests.release_server import serve

    release = coco.RELEASES["hornet_t_7x7"]
    buffer = io.BytesIO()
    _save_mmseg(buffer, _mmdet_state())
    monkeypatch.setenv("KERAS_HOME", os.fspath(tmp_path / "keras_home"))
    with serve({release.file_name: buffer.getvalue()}) as server:
        monkeypatch.setenv("KERAS_FOURIER_MIRROR", server.url)
        with pytest.raises(ValueError) as error:
            detection.CascadeMaskRCNN(
                "hornet_t_7x7",
                weights="coco",
                channels=CHANNELS,
                fc_channels=FC,
                mask_channels=MASK,
                input_shape=(64, 64, 3),
            )
    message = str(error.value)
    assert "\n" not in message and "model was left unchanged" in message
    assert "missing keys (" in message and "backbone.downsample_layers.0.0.bias" in message
    assert "wrong shapes (" in message and "roi_head.bbox_head.0.fc_cls.weight" in message
    assert server.requests == [f"/{release.file_name}"]
    cached = tmp_path / "keras_home" / "keras_fourier" / release.file_name
    assert cached.read_bytes() == buffer.getvalue()


# GFNet-H-Ti, the smallest backbone with an official key map: its widths and depths.
GFNET_H_TI = ((64, 128, 256, 512), (3, 3, 10, 3))
TINY_HEADS = {"channels": CHANNELS, "fc_channels": FC, "mask_channels": MASK}
# The release's widths (the neck, RPN and box-head convs; the box heads' fc; the mask heads).
RELEASE_HEADS = {"channels": 256, "fc": 1024, "mask_width": 256}


def _detector_state(classes=80, **heads) -> dict[str, np.ndarray]:
    """An official-layout Cascade Mask R-CNN checkpoint on GFNet-H-Ti (`classes`, tiny heads).

    The backbone as its classification checkpoint (without its head and last norm) with
    the detection backbone's ``norm0``-``norm3``; the neck and heads of :func:`_mmdet_state`.
    """
    dims, depths = GFNET_H_TI
    backbone = gfnet_state(dims, depths, patch=4, grid=8)
    norms = OfficialState(seed=3)
    for index, dim in enumerate(dims):
        norms.norm(f"norm{index}", dim)
    state = {
        f"backbone.{key}": value
        for key, value in {**backbone, **norms.state}.items()
        if not key.startswith(("head.", "norm."))
    }
    state.update(_mmdet_state(classes=classes, backbone_channels=dims, **heads))
    return {key: value.astype(np.float32) if value.ndim else value for key, value in state.items()}


def _values(model) -> dict[str, np.ndarray]:
    return {variable.path: to_numpy(variable) for variable in model.weights}


def test_a_coco_checkpoint_fine_tunes_on_other_classes(tmp_path, monkeypatch):
    """An 80-class checkpoint into 3 classes: all but the class layers, which stay fresh.

    As a `.pth` path, then as a release through a 127.0.0.1 mirror (a temporary KERAS_HOME):
    one conversion cached per layout, and a model loaded from the cached 3-class conversion
    keeps its own fresh class layers.
    """
    from tests.release_server import serve

    state = _detector_state()
    path = _save_mmseg(tmp_path / "cascade_gfnet_h_ti.pth", state)
    build = functools.partial(
        detection.CascadeMaskRCNN, "gfnet_h_ti", input_shape=(32, 32, 3), **TINY_HEADS
    )
    coco_model = build(num_classes=80, weights=path)
    loaded = _values(coco_model)
    keras.utils.set_random_seed(7)
    fresh_model = build(num_classes=3)
    keras.utils.set_random_seed(7)
    tuned = build(num_classes=3, weights=path)
    class_paths = {variable.path for variable in class_variables(tuned)}
    assert len(class_paths) == 3 * 2 * 3  # fc_cls, fc_reg, conv_logits of 3 stages
    fresh = _values(fresh_model)
    assert fresh["roi_head/bbox_head_2/fc_reg/kernel"].shape == (FC, 4 * 3)

    def check(values, fresh):
        for name, value in values.items():
            if name in class_paths:
                np.testing.assert_array_equal(value, fresh[name], err_msg=name)
                assert value.shape != loaded[name].shape, name
            else:
                np.testing.assert_array_equal(value, loaded[name], err_msg=name)
                assert not np.array_equal(value, fresh[name]), name

    check(_values(tuned), fresh)

    state["roi_head.bbox_head.1.shared_fcs.0.bias"] = np.zeros(FC + 1)
    wrong = _save_mmseg(tmp_path / "wrong.pth", state)
    with pytest.raises(ValueError) as error:
        load_detection_weights(fresh_model, wrong, "gfnet_h_ti")
    message = str(error.value)
    assert "\n" not in message and "model was left unchanged" in message
    assert "wrong shapes (1): roi_head.bbox_head.1.shared_fcs.0.bias" in message
    for name, value in _values(fresh_model).items():
        np.testing.assert_array_equal(value, fresh[name], err_msg=name)

    release = Release(file_name=os.path.basename(path), url="", source="test", license="test")
    key_map = mmdet_key_map("gfnet_h_ti", checkpoint_classes=80)
    monkeypatch.setenv("KERAS_HOME", os.fspath(tmp_path / "keras_home"))
    for variable in class_variables(fresh_model):  # other values than those cached below
        variable.assign(2 * variable.numpy() + 1)
    kept = _values(fresh_model)
    with serve({release.file_name: path.read_bytes()}) as server:
        monkeypatch.setenv("KERAS_FOURIER_MIRROR", server.url)
        load_release(coco_model, release, key_map, label="coco")
        for model in (tuned, fresh_model):  # the first converts, the second loads that
            load_release(model, release, key_map, label="coco", keep=class_variables(model))
    assert server.requests == [f"/{release.file_name}"]
    cache = tmp_path / "keras_home" / "keras_fourier"
    assert len(list(cache.glob("cascade_gfnet_h_ti_*.weights.h5"))) == 2  # 80 and 3 classes
    for name, value in _values(coco_model).items():  # all 80 classes', as from the .pth
        np.testing.assert_array_equal(value, loaded[name], err_msg=name)
    check(_values(tuned), fresh)
    check(_values(fresh_model), kept)


def test_a_fine_tuning_run_builds_the_release_detector_from_the_checkpoint(
    tmp_path, monkeypatch, capsys
):
    """`train --task instance_segmentation --weights PATH.pth`: the model the trainer gets.

    The task builds the release's Cascade Mask R-CNN (256/1024/256) on the data's 2 classes
    from the checkpoint; the command refuses a checkpoint that does not fit, naming the
    tensor and writing nothing. (A training epoch of this 70M-parameter model takes about
    6 minutes on 2 cores; `fit` itself is the two-stage training tests'.)
    """
    monkeypatch.setenv("KERAS_HOME", os.fspath(tmp_path / "keras_home"))
    data = tmp_path / "coco"
    data.mkdir()
    write_tiny_instances(data)
    state = _detector_state(**RELEASE_HEADS)
    checkpoint = _save_mmseg(tmp_path / "coco.pth", state)
    config = TrainConfig(
        task="instance_segmentation",
        model="gfnet_h_ti",
        data=f"coco:{data}",
        image_size=32,
        weights=os.fspath(checkpoint),
    )
    instance_segmentation.TASK.check(config, lambda field: f"--{field.replace('_', '-')}")
    model = instance_segmentation.TASK.build_model(config, 2)
    roi_head = model.get_layer("roi_head")
    assert (roi_head.num_classes, roi_head.num_stages) == (2, 3)
    assert model.get_layer("neck").channels == 256
    lateral = model.get_layer("neck").lateral_convs[0].conv.kernel
    expected = state["neck.lateral_convs.0.conv.weight"].transpose(2, 3, 1, 0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(lateral), expected)
    del state["neck.lateral_convs.0.conv.bias"]
    broken = _save_mmseg(tmp_path / "broken.pth", state)
    out = tmp_path / "run"
    argv = ["train", "--task", "instance_segmentation", "--data", f"coco:{data}"]
    argv += ["--model", "gfnet_h_ti", "--image-size", "32", "--batch-size", "8", "--out", str(out)]
    assert main([*argv, "--weights", os.fspath(broken)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "neck.lateral_convs.0.conv.bias" in line, line
    assert not out.exists()


def test_weights_of_detection_runs_and_other_weights_are_refused(tmp_path, capsys):
    data = tmp_path / "coco"
    data.mkdir()
    write_tiny_instances(data)
    cases = [
        ("detection", "coco", "A detection run starts from random weights"),
        ("instance_segmentation", "run.keras", "An instance segmentation run starts from"),
        ("instance_segmentation", "coco", "use a `--model` of ['hornet_b_7x7'"),
    ]
    for task, weights, expected in cases:
        out = tmp_path / task
        argv = ["train", "--task", task, "--data", f"coco:{data}", "--model", "gfnet_h_ti"]
        assert main([*argv, "--weights", weights, "--out", str(out)]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and expected in error[0], error
        assert not out.exists()
