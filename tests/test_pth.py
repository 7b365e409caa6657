"""The PyTorch-free `.pth` reader: files written by torch.save, hostile pickles refused."""

import argparse
import collections
import io
import os
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch  # the test extra installs it; the package does not need it

from keras_fourier.weights.pth import CheckpointArgs, UnsafeCheckpointError, read_checkpoint


class Payload:
    """Unpickling it with pickle.load would call `function(*args)`."""

    def __init__(self, function, *args):
        self.function = function
        self.args = args

    def __reduce__(self):
        return (self.function, self.args)


def _tensors():
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=generator)
    return collections.OrderedDict(
        weight=base,
        transposed=base.t(),  # non-contiguous: strides (1, 6)
        row=base[2],  # a view at a storage offset
        half=torch.randn(3, 2, generator=generator).half(),
        bfloat=torch.randn(5, generator=generator).bfloat16(),
        double=torch.randn(2, 2, generator=generator).double(),
        steps=torch.tensor(7),
        ids=torch.arange(5, dtype=torch.int32),
        flags=torch.tensor([True, False]),
        bias=torch.nn.Parameter(torch.ones(3)),
        empty=torch.zeros(0, 4),
    )


def _reference(tensor):
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        return tensor.float().numpy()
    return tensor.numpy()


def test_reads_what_torch_save_wrote(tmp_path):
    state = _tensors()
    checkpoint = {
        "model": state,
        "epoch": 299,
        "args": argparse.Namespace(lr=1e-3, model="gfnet-ti", tag=b"x", sizes=[224, 384]),
    }
    path = tmp_path / "checkpoint.pth"
    torch.save(checkpoint, path)

    read = read_checkpoint(path)

    assert read["epoch"] == 299
    assert isinstance(read["args"], CheckpointArgs)
    assert read["args"] == {"lr": 1e-3, "model": "gfnet-ti", "tag": b"x", "sizes": [224, 384]}
    assert isinstance(read["model"], collections.OrderedDict)
    assert list(read["model"]) == list(state)
    for key, tensor in state.items():
        expected = _reference(tensor)
        value = read["model"][key]
        assert value.dtype == expected.dtype, key
        np.testing.assert_array_equal(value, expected, err_msg=key)


def test_shared_storages_are_read_once_and_views_share_them(tmp_path):
    base = torch.arange(12.0).reshape(3, 4)
    path = tmp_path / "shared.pt"
    torch.save([base, base[1:, ::2], *[base[i] for i in range(3)]], path)
    whole, strided, *rows = read_checkpoint(path)
    np.testing.assert_array_equal(strided, [[4.0, 6.0], [8.0, 10.0]])
    np.testing.assert_array_equal(rows[2], [8.0, 9.0, 10.0, 11.0])
    assert all(np.shares_memory(whole, view) for view in (strided, *rows))
    assert not strided.flags.writeable  # read-only views of the one storage


def _zip_with_pickle(path, payload: bytes):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", payload)
        archive.writestr("archive/byteorder", "little")
    return path


@pytest.mark.parametrize(
    "name, make",
    [
        ("open", lambda marker: pickle.dumps({"model": Payload(open, marker, "w")}, protocol=2)),
        ("os.system", lambda marker: pickle.dumps([Payload(os.system, f"touch {marker}")])),
        ("a pickled class", lambda marker: pickle.dumps(io.BytesIO(b"x"), protocol=2)),
    ],
)
def test_hostile_pickle_is_refused_before_it_runs(tmp_path, name, make):
    marker = tmp_path / "pwned"
    path = _zip_with_pickle(tmp_path / "hostile.pth", make(os.fspath(marker)))
    with pytest.raises(UnsafeCheckpointError, match=r"refers to \S+, which is neither a tensor"):
        read_checkpoint(path)
    assert not marker.exists()


def test_torch_saved_object_of_a_class_is_refused(tmp_path):
    path = tmp_path / "module.pth"
    torch.save(torch.nn.Linear(2, 2), path)  # a whole module, not a state dict
    with pytest.raises(UnsafeCheckpointError, match=r"torch\.nn\.modules\.linear\.Linear"):
        read_checkpoint(path)


@pytest.mark.parametrize("target", [b"argparse\nNamespace", b"torch._utils\n_rebuild_parameter"])
def test_pickle_cannot_set_attributes_of_the_allowed_callables(tmp_path, target):
    # BUILD with slot state (None, {"evil": 1}) applied to the allowed global itself.
    payload = b"\x80\x02c" + target + b"\nN}X\x04\x00\x00\x00evilK\x01s\x86b."
    with pytest.raises(ValueError, match=r"damaged PyTorch checkpoint|tried to set"):
        read_checkpoint(_zip_with_pickle(tmp_path / "build.pth", payload))
    assert not hasattr(CheckpointArgs, "evil")


def test_a_pickle_cannot_change_what_later_loads_use(tmp_path):
    good = tmp_path / "good.pth"
    torch.save({"w": torch.ones(3)}, good)
    # BUILD (None, {"_function": None}) on the tensor rebuilder, then on the Namespace class.
    for target, slot in [
        (b"torch._utils\n_rebuild_tensor_v2", b"_function"),
        (b"argparse\nNamespace", b"update"),
    ]:
        payload = b"\x80\x02c" + target + b"\nN}X" + bytes([len(slot), 0, 0, 0]) + slot
        payload += b"Ns\x86b."
        with pytest.raises(ValueError):
            read_checkpoint(_zip_with_pickle(tmp_path / "build.pth", payload))
    np.testing.assert_array_equal(read_checkpoint(good)["w"], [1.0, 1.0, 1.0])


def _rewrite(path, target, replace) -> None:
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in entries.items():
            archive.writestr(name, replace(name, content))


def test_sizes_are_checked_before_any_storage_or_pickle_is_read(tmp_path):
    path = tmp_path / "small.pth"
    torch.save({"w": torch.ones(4)}, path)
    bomb = tmp_path / "bomb.pth"  # a 4-element storage whose entry inflates to 64 MiB
    _rewrite(path, bomb, lambda name, data: b"\0" * 2**26 if "/data/" in name else data)
    assert bomb.stat().st_size < 2**20
    with pytest.raises(ValueError, match=r"zip entry \S+/data/0 declares 67108864 bytes"):
        read_checkpoint(bomb)
    pickle_bomb = tmp_path / "pickle_bomb.pth"
    _rewrite(
        path,
        pickle_bomb,
        lambda name, data: data + b"\0" * 2**26 if name.endswith("data.pkl") else data,
    )
    with pytest.raises(
        ValueError, match=r"data.pkl entry declares 67,1\d\d,\d\d\d bytes, more than"
    ):
        read_checkpoint(pickle_bomb)
    sliced = tmp_path / "sliced.pth"  # a 2-element view of a 1 MiB storage
    torch.save({"w": torch.ones(2**18)[:2]}, sliced)
    with pytest.raises(ValueError, match=r"storage entry \S+/data/0 holds 1,048,576 bytes"):
        read_checkpoint(sliced)


def test_damaged_and_foreign_files_are_refused(tmp_path):
    path = tmp_path / "model.pth"
    torch.save({"w": torch.ones(4)}, path)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        entries = {name: archive.read(name) for name in names}
    cut = tmp_path / "missing_storage.pth"
    with zipfile.ZipFile(cut, "w") as archive:
        for name, content in entries.items():
            if "/data/" not in name:
                archive.writestr(name, content)
    with pytest.raises(ValueError, match=r"damaged PyTorch checkpoint"):
        read_checkpoint(cut)
    short = tmp_path / "short_storage.pth"
    with zipfile.ZipFile(short, "w") as archive:
        for name, content in entries.items():
            archive.writestr(name, content[:4] if "/data/" in name else content)
    with pytest.raises(
        ValueError, match=r"declares 4 bytes, but its storage is 4 elements of 4 bytes"
    ):
        read_checkpoint(short)
    text = tmp_path / "notes.pth"
    text.write_text("not a checkpoint")
    with pytest.raises(ValueError, match=r"is not a PyTorch zip checkpoint"):
        read_checkpoint(text)


def test_reads_without_torch_importable(tmp_path):
    path = tmp_path / "weights.pth"
    torch.save({"model": {"head.weight": torch.arange(6.0).reshape(2, 3)}}, path)
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "from keras_fourier.weights.pth import read_checkpoint\n"
        f"value = read_checkpoint({os.fspath(path)!r})['model']['head.weight']\n"
        "assert 'torch' not in {m.split('.')[0] for m in sys.modules if sys.modules[m]}\n"
        "print(value.tolist())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]"
