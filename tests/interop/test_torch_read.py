"""torch.save files read by ckpt exactly as torch.load reads them."""
import io
import struct
import zipfile

import pytest
import torch
from ckptlib import Catalog

from common import TORCH_TO_ST, random_tensor, st_shape, tensor_bytes
from torch_models import TinyResNet, conv_net, tiny_transformer
from statuses import status_of


def flat(obj, prefix=""):
    """torch.load's result flattened the way ckpt names tensors."""
    out = {}
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(flat(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


def check_exact(path, **load_kw):
    # Our own files: the full unpickler (weights_only=True cannot read protocol 4).
    ref = flat(torch.load(path, weights_only=False, **load_kw))
    with Catalog(path) as cat:
        assert sorted(cat.names()) == sorted(ref)
        for name, t in ref.items():
            info = cat.info(name)
            assert info["dtype"] == TORCH_TO_ST[t.dtype], name
            assert info["shape"] == st_shape(t), name
            assert cat.read(name) == tensor_bytes(t), name
    return ref


@pytest.mark.parametrize("make", [TinyResNet, tiny_transformer, conv_net], ids=["resnet", "transformer", "convnet"])
@pytest.mark.parametrize("protocol", [2, 4])
def test_real_architectures(tmp_path, make, protocol):
    torch.manual_seed(1)
    model = make()
    model.train()
    if isinstance(model, TinyResNet):
        model.conv1.weight.data.normal_()
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_()
                m.num_batches_tracked += 7
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path, pickle_protocol=protocol)
    ref = check_exact(path)
    if make is tiny_transformer:
        with Catalog(path) as cat:  # tied weights share one storage
            assert cat.info("0.weight")["storage"] == cat.info("2.weight")["storage"]


def test_every_dtype(tmp_path):
    gen = torch.Generator().manual_seed(2)
    sd = {f"t_{str(dt).split('.')[1]}": random_tensor(dt, [3, 5], gen) for dt in TORCH_TO_ST}
    sd["scalar"] = torch.tensor(-1.5, dtype=torch.float64)
    sd["empty"] = torch.zeros(0, 3, dtype=torch.int16)
    path = tmp_path / "dtypes.pt"
    torch.save(sd, path)
    check_exact(path)


def test_views_offsets_and_strides(tmp_path):
    base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    sd = {"base": base, "t": base.transpose(0, 2), "row": base[1], "narrow": base[:, 1:3], "step": base[:, :, ::2],
          "perm": base.permute(2, 0, 1), "expand": torch.arange(3.).reshape(3, 1).expand(3, 4),
          "bf16_t": torch.arange(12, dtype=torch.bfloat16).reshape(3, 4).t(), "elem": base[2, 3, 4]}
    path = tmp_path / "views.pt"
    torch.save(sd, path)
    check_exact(path)
    with Catalog(path) as cat:
        assert cat.info("t")["strides"] == [1, 5, 20]
        assert cat.info("row")["strides"] is None
        assert cat.info("row")["storage"] == cat.info("base")["storage"]
        assert cat.info("row")["offset"] == cat.info("base")["offset"] + 20 * 4
        # A range in the middle of a gathered tensor.
        full = tensor_bytes(sd["t"])
        assert cat.read("t", 6, 50) == full[6:56]


def test_nested_containers_and_tree(tmp_path):
    t = torch.arange(4)
    obj = {"a": [t, {"b": (t * 2, 3, "x")}], 5: t + 1, "none": None, "f": 0.25, "flag": True, "raw": b"\x00\x01"}
    path = tmp_path / "nested.pt"
    torch.save(obj, path)
    check_exact(path)
    with Catalog(path) as cat:
        assert set(cat.names()) == {"a.0", "a.1.b.0", "5"}
        tree = cat.tree()
    items = dict((k, v) for k, v in tree["__dict__"])
    assert items[5] == {"__tensor__": "5"}
    assert items["none"] is None and items["f"] == 0.25 and items["flag"] is True
    assert items["raw"] == {"__bytes__": "0001"}
    assert items["a"][1]["__dict__"][0][1]["__tuple__"][1:] == [3, "x"]


def test_training_checkpoint(tmp_path):
    torch.manual_seed(3)
    model = conv_net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    loss = model(torch.randn(2, 1, 28, 28)).sum()
    loss.backward()
    opt.step()
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3, "best_acc": 0.91,
            "args": {"lr": 1e-3, "name": "run-7", "layers": [8, 4]}}
    path = tmp_path / "train.pt"
    torch.save(ckpt, path)
    ref = check_exact(path)
    assert "optimizer.state.0.exp_avg" in ref
    with Catalog(path) as cat:
        items = dict((k, v) for k, v in cat.tree()["__dict__"])
    assert items["epoch"] == 3 and items["best_acc"] == 0.91
    groups = dict(items["optimizer"]["__dict__"])["param_groups"]
    assert dict(groups[0]["__dict__"])["weight_decay"] == 0.1


def to_big_endian(src, dst):
    """Rewrites a little-endian torch.save file of float32/int64 storages as
    a big-endian one, as a big-endian machine would write it."""
    zin = zipfile.ZipFile(src)
    folder = zin.namelist()[0].split("/")[0]
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            rel = info.filename[len(folder) + 1:]
            if rel == "byteorder":
                data = b"big"
            elif rel.startswith("data/"):
                data = b"".join(data[i:i + 4][::-1] for i in range(0, len(data), 4))
            zout.writestr(info.filename, data)


def test_big_endian_files(tmp_path):
    sd = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4) * 1.5, "i": torch.arange(5, dtype=torch.int32)}
    sd["wt"] = sd["w"].t()
    torch.save(sd, tmp_path / "le.pt")
    to_big_endian(tmp_path / "le.pt", tmp_path / "be.pt")
    ref = torch.load(tmp_path / "be.pt", weights_only=True)
    for k in sd:
        assert torch.equal(ref[k], sd[k])  # torch agrees the file is right
    with Catalog(tmp_path / "be.pt") as cat:
        assert cat.info("w")["big_endian"]
        for k, t in sd.items():
            assert cat.read(k) == tensor_bytes(t), k
        assert cat.read("w", 3, 6) == tensor_bytes(sd["w"])[3:9]  # cuts through elements


def test_sharded_torch_checkpoint(tmp_path):
    from huggingface_hub import save_torch_state_dict
    torch.manual_seed(4)
    sd = {f"layer.{i}.weight": torch.randn(32, 32) for i in range(6)}
    save_torch_state_dict(sd, str(tmp_path), max_shard_size="10KB", safe_serialization=False)
    assert (tmp_path / "pytorch_model.bin.index.json").exists()
    with Catalog(tmp_path) as cat:
        assert sorted(cat.names()) == sorted(sd)
        for k, t in sd.items():
            assert cat.read(k) == tensor_bytes(t)


@pytest.mark.parametrize("protocol", [2, 4])
def test_legacy_stream_format(tmp_path, protocol):
    torch.manual_seed(5)
    model = TinyResNet()
    obj = {"model": model.state_dict(), "step": 11, "views": [torch.arange(6.).reshape(2, 3).t()]}
    path = tmp_path / "legacy.pt"
    torch.save(obj, path, _use_new_zipfile_serialization=False, pickle_protocol=protocol)
    assert not zipfile.is_zipfile(path)
    check_exact(path)
    with Catalog(path) as cat:
        assert dict(cat.tree()["__dict__"])["step"] == 11


def test_tar_format_is_named(tmp_path):
    import tarfile
    path = tmp_path / "old.pt"
    with tarfile.open(path, "w") as tar:
        data = b"x" * 10
        info = tarfile.TarInfo("storages")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(Exception) as e:
        Catalog(path)
    assert status_of(e.value) == "CKPT_E_UNKNOWN_FORMAT" and "tar archive" in e.value.message


def test_legacy_pickle_longer_than_the_first_read(tmp_path):
    # The object pickle runs past the reader's first 64 MiB prefix.
    blob = bytes(range(256)) * (70_000_000 // 256)
    obj = {"w": torch.arange(10.), "blob": blob, "after": torch.ones(3, dtype=torch.int64)}
    path = tmp_path / "big-legacy.pt"
    torch.save(obj, path, _use_new_zipfile_serialization=False)
    check_exact(path)
    with Catalog(path) as cat:
        assert cat.names() == ["w", "after"]
