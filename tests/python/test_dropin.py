"""ckpt.torch and ckpt.numpy against safetensors: the behaviours of
safetensors' own Python tests, re-expressed, plus files written by one and
read by the other, both ways."""
import os
import sys

import numpy as np
import pytest
import safetensors
import safetensors.numpy as st_np
import safetensors.torch as st_torch
import torch

import ckpt
import ckpt.numpy as ck_np
import ckpt.torch as ck_torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "interop"))
from common import TORCH_TO_ST, all_dtypes_state_dict, tensor_bytes  # noqa: E402


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and tensor_bytes(a) == tensor_bytes(b)


@pytest.fixture
def sd():
    return all_dtypes_state_dict(seed=3)


# ---- round trips and byte identity --------------------------------------------------

def test_save_file_is_byte_identical_to_safetensors(tmp_path, sd):
    for meta in (None, {"format": "pt"}):
        st_torch.save_file(sd, tmp_path / "ref.safetensors", metadata=meta)
        ck_torch.save_file(sd, tmp_path / "ours.safetensors", metadata=meta)
        assert (tmp_path / "ref.safetensors").read_bytes() == (tmp_path / "ours.safetensors").read_bytes()
        assert ck_torch.save(sd, metadata=meta) == st_torch.save(sd, metadata=meta)


def test_every_dtype_both_ways(tmp_path, sd):
    st_torch.save_file(sd, tmp_path / "ref.safetensors")
    ours = ck_torch.load_file(tmp_path / "ref.safetensors")
    assert list(ours) == list(st_torch.load_file(tmp_path / "ref.safetensors"))
    for k, v in sd.items():
        assert same(ours[k], v), k
    ck_torch.save_file(sd, tmp_path / "ours.safetensors")
    theirs = st_torch.load_file(tmp_path / "ours.safetensors")
    for k, v in sd.items():
        assert same(theirs[k], v), k
    for k, v in ck_torch.load(st_torch.save(sd)).items():
        assert same(v, sd[k]), k


def test_safe_open_surface(tmp_path, sd):
    path = tmp_path / "m.safetensors"
    st_torch.save_file(sd, path, metadata={"a": "b", "format": "pt"})
    with safetensors.safe_open(path, "pt") as ref, ck_torch.safe_open(path, "pt") as f:
        assert f.keys() == ref.keys()
        assert f.offset_keys() == ref.offset_keys()
        assert f.metadata() == ref.metadata()
        for k in ref.keys():
            assert same(f.get_tensor(k), ref.get_tensor(k)), k
            assert f.get_slice(k).get_shape() == ref.get_slice(k).get_shape()
            assert f.get_slice(k).get_dtype() == ref.get_slice(k).get_dtype()
        assert list(f.get_tensors()) == list(ref.get_tensors())
    st_torch.save_file({"x": torch.zeros(1)}, tmp_path / "nometa.safetensors")
    with ck_torch.safe_open(tmp_path / "nometa.safetensors", "pt") as f:
        assert f.metadata() is None


@pytest.mark.parametrize("key", [
    (slice(None), slice(None, None, 2), slice(-1, None)),
    (1,), (-1,), (Ellipsis, 1), (slice(0, 1), Ellipsis), (slice(1, 100),), (slice(-3, -1), slice(None), 2),
    (slice(None, None, 3), slice(2, None, 2)), (slice(5, 2),), (0, 0, 0), (None, 1),
])
@pytest.mark.parametrize("direct", [False, True], ids=["mapped", "direct"])
def test_slices_like_safetensors(tmp_path, key, direct):
    t = torch.arange(5 * 6 * 7, dtype=torch.float32).reshape(5, 6, 7)
    path = tmp_path / "s.safetensors"
    st_torch.save_file({"t": t, "b": t.to(torch.bfloat16)}, path)
    with safetensors.safe_open(path, "pt") as ref, ck_torch.safe_open(path, "pt", direct=direct) as f:
        for name in ("t", "b"):
            assert same(f.get_slice(name)[key], ref.get_slice(name)[key]), key
    # safetensors' numpy slices refuse negative indices (an OverflowError):
    # numpy's own indexing is the reference there.
    with ck_np.safe_open(path, "np") as f:
        got = f.get_slice("t")[key]
        np.testing.assert_array_equal(got, t.numpy()[key])
        assert got.shape == t.numpy()[key].shape


@pytest.mark.parametrize("direct", [False, True], ids=["mapped", "direct"])
def test_slice_errors_like_safetensors(tmp_path, direct):
    path = tmp_path / "s.safetensors"
    st_torch.save_file({"t": torch.zeros(2, 3, 4)}, path)
    with safetensors.safe_open(path, "pt") as ref, ck_torch.safe_open(path, "pt", direct=direct) as f:
        for key in [(slice(None, None, -1),), (5,), (0, 0, 0, 0), (slice(None), slice(None), slice(None, None, 0))]:
            with pytest.raises(Exception) as theirs:
                ref.get_slice("t")[key]
            with pytest.raises(type(theirs.value)) as ours:
                f.get_slice("t")[key]
            assert str(ours.value) == str(theirs.value)


def test_errors_like_safetensors(tmp_path):
    path = tmp_path / "e.safetensors"
    st_torch.save_file({"t": torch.zeros(2)}, path)
    with ck_torch.safe_open(path, "pt") as f:
        with pytest.raises(ckpt.SafetensorError, match="File does not contain tensor nope"):
            f.get_tensor("nope")
        with pytest.raises(ckpt.SafetensorError, match="File does not contain tensor nope"):
            f.get_slice("nope")
    with pytest.raises(FileNotFoundError):
        ck_torch.load_file(tmp_path / "missing.safetensors")
    z = torch.zeros(4)
    for bad, exc in [({"a": torch.zeros(2, 3).t()}, ValueError), ({"a": z, "b": z}, RuntimeError),
                     ({"a": z[:2], "b": z[2:]}, None), ([1], ValueError), ({"a": 1}, ValueError)]:
        if exc is None:
            ck_torch.save_file(bad, tmp_path / "ok.safetensors")
            continue
        with pytest.raises(exc) as theirs:
            st_torch.save_file(bad, tmp_path / "x.safetensors")
        with pytest.raises(exc) as ours:
            ck_torch.save_file(bad, tmp_path / "x.safetensors")
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(TypeError):
        ck_torch.save_file({"a": z}, tmp_path / "m.safetensors", metadata={"a": 1})
    with pytest.raises(ckpt.SafetensorError, match="too small"):
        ck_torch.load(b"abc")
    with pytest.raises(ValueError, match="framework"):
        ck_torch.safe_open(path, "tensorflow-2")


def test_corrupt_file_error_names_file_and_offset(tmp_path):
    path = tmp_path / "c.safetensors"
    st_torch.save_file({"t": torch.zeros(100)}, path)
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(ckpt.SafetensorError) as e:
        ck_torch.load_file(path)
    assert e.value.path == str(path) and e.value.offset is not None and str(path) in str(e.value)


def test_loaded_tensors_are_copy_on_write(tmp_path):
    path = tmp_path / "w.safetensors"
    st_torch.save_file({"t": torch.zeros(1000)}, path)
    before = path.read_bytes()
    t = ck_torch.load_file(path)["t"]
    t += 1
    a = ck_np.load_file(path)["t"]
    a += 2
    assert path.read_bytes() == before
    assert float(t.sum()) == 1000 and float(a.sum()) == 2000
    assert float(ck_torch.load_file(path)["t"].sum()) == 0


def test_tensors_outlive_their_file_handle(tmp_path):
    path = tmp_path / "l.safetensors"
    st_torch.save_file({"t": torch.arange(10.0)}, path)
    with ck_torch.safe_open(path, "pt") as f:
        t = f.get_tensor("t")
    del f
    import gc
    gc.collect()
    assert torch.equal(t, torch.arange(10.0))


# ---- numpy -------------------------------------------------------------------------

def test_numpy_round_trips_and_identity(tmp_path):
    arrays = {"f": np.arange(12, dtype=np.float32).reshape(3, 4), "i": np.array([1, -2], dtype=np.int64),
              "u": np.array([3], dtype=np.uint16), "b": np.array([True, False]), "c": np.array([1 + 2j], np.complex64),
              "s": np.array(7.0), "e": np.zeros((0, 3), np.float16)}
    st_np.save_file(arrays, tmp_path / "ref.safetensors", metadata={"k": "v"})
    ck_np.save_file(arrays, tmp_path / "ours.safetensors", metadata={"k": "v"})
    assert (tmp_path / "ref.safetensors").read_bytes() == (tmp_path / "ours.safetensors").read_bytes()
    assert ck_np.save(arrays) == st_np.save(arrays)
    for loaded in (ck_np.load_file(tmp_path / "ref.safetensors"), st_np.load_file(tmp_path / "ours.safetensors"),
                   ck_np.load(st_np.save(arrays))):
        for k, v in arrays.items():
            assert loaded[k].dtype == v.dtype and loaded[k].shape == v.shape
            np.testing.assert_array_equal(loaded[k], v)


def test_numpy_big_endian_and_strided_arrays_are_written_as_safetensors_wants(tmp_path):
    a = np.arange(12, dtype=">f4").reshape(3, 4)
    ck_np.save_file({"a": a, "t": np.arange(6, dtype=np.int32).reshape(2, 3).T}, tmp_path / "be.safetensors")
    got = st_np.load_file(tmp_path / "be.safetensors")
    np.testing.assert_array_equal(got["a"], a)
    np.testing.assert_array_equal(got["t"], np.arange(6, dtype=np.int32).reshape(2, 3).T)


def test_numpy_bfloat16_through_ml_dtypes(tmp_path):
    import ml_dtypes
    t = torch.randn(5, 3).to(torch.bfloat16)
    st_torch.save_file({"t": t, "f8": t.to(torch.float8_e4m3fn)}, tmp_path / "b.safetensors")
    got = ck_np.load_file(tmp_path / "b.safetensors")
    assert got["t"].dtype == ml_dtypes.bfloat16 and got["f8"].dtype == ml_dtypes.float8_e4m3fn
    assert got["t"].view(np.uint16).tobytes() == tensor_bytes(t)
    ck_np.save_file(got, tmp_path / "b2.safetensors")
    assert same(st_torch.load_file(tmp_path / "b2.safetensors")["t"], t)


def test_numpy_bfloat16_without_ml_dtypes_names_framework_pt(tmp_path, monkeypatch):
    from ckpt import _dtypes
    st_torch.save_file({"t": torch.zeros(2, dtype=torch.bfloat16)}, tmp_path / "b.safetensors")
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    monkeypatch.setattr(_dtypes, "_numpy_cache", {})
    with pytest.raises(TypeError, match='framework="pt"') as e:
        ck_np.load_file(tmp_path / "b.safetensors")
    assert "'t'" in str(e.value) and "BF16" in str(e.value)


# ---- beyond safetensors: other formats through the same API ---------------------------

def test_dropin_reads_torch_files_and_shards(tmp_path, sd):
    del sd["layer.19.f4"]  # torch.save cannot pickle float4 storages
    torch.save(sd, tmp_path / "pytorch_model.bin")
    got = ck_torch.load_file(tmp_path / "pytorch_model.bin")
    for k, v in sd.items():
        assert same(got[k], v), k
    from huggingface_hub import save_torch_state_dict
    big = {f"w{i}": torch.randn(64, 64) for i in range(6)}
    (tmp_path / "sharded").mkdir()
    save_torch_state_dict(big, tmp_path / "sharded", max_shard_size="40KB")
    assert len([f for f in os.listdir(tmp_path / "sharded") if f.endswith(".safetensors")]) > 1
    got = ck_torch.load_file(tmp_path / "sharded")
    assert set(got) == set(big) and all(torch.equal(got[k], v) for k, v in big.items())


def test_torch_file_views_and_transposed_storages(tmp_path):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    torch.save({"t": base.t(), "row": base[1], "base": base}, tmp_path / "v.pt")
    got = ck_torch.load_file(tmp_path / "v.pt")
    assert torch.equal(got["t"], base.t()) and torch.equal(got["row"], base[1]) and torch.equal(got["base"], base)
    with ck_torch.safe_open(tmp_path / "v.pt", "pt") as f:
        assert torch.equal(f.get_slice("t")[1:3, ::2], base.t()[1:3, ::2])


def test_load_model_and_save_model_with_tied_weights(tmp_path):
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)
            self.b.weight = self.a.weight

    m = Tied()
    st_torch.save_model(m, tmp_path / "ref.safetensors")
    ck_torch.save_model(m, tmp_path / "ours.safetensors")
    assert (tmp_path / "ref.safetensors").read_bytes() == (tmp_path / "ours.safetensors").read_bytes()
    m2 = Tied()
    assert ck_torch.load_model(m2, tmp_path / "ours.safetensors") == st_torch.load_model(Tied(), tmp_path / "ours.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), m2.state_dict().values()))


def test_all_dtypes_cover_safetensors_table():
    assert set(TORCH_TO_ST.values()) <= set(ckpt._dtypes.TORCH)


def test_load_bytes_reads_memory_and_writes_no_file(sd, monkeypatch):
    """load(bytes) reads the bytes where they are (the library's memory
    source): no temporary file, in /dev/shm or anywhere, and tensors that
    are copies, untouched when the caller's buffer changes afterwards."""
    import ckpt._safe
    import tempfile

    def no_file(*a, **k):
        raise AssertionError("load(bytes) made a temporary directory")

    monkeypatch.setattr(ckpt._safe.tempfile, "TemporaryDirectory", no_file)
    monkeypatch.setattr(tempfile, "mkstemp", no_file)
    data = st_torch.save(sd)
    for given in (data, bytearray(data), memoryview(data)):
        loaded = ck_torch.load(given)
        assert sorted(loaded) == sorted(sd)
        assert all(same(loaded[k], sd[k]) for k in sd)
    buf = bytearray(st_np.save({"f": np.arange(6, dtype=np.float32)}))
    arrays = ck_np.load(buf)
    buf[:] = bytes(len(buf))
    np.testing.assert_array_equal(arrays["f"], np.arange(6, dtype=np.float32))
    with pytest.raises(ckpt.SafetensorError, match="data.safetensors"):
        ck_torch.load(data[:-1])


def test_a_slice_of_an_unmapped_file_reads_only_its_rows(tmp_path):
    """Where the file is not mapped (direct mode; remote files), a slice of
    the leading axis reads those rows, not the whole tensor (a
    tensor-parallel rank's part, ckpt.transformers' tp_plan loads)."""
    path = tmp_path / "r.safetensors"
    t = torch.arange(64 * 256, dtype=torch.float32).reshape(64, 256)
    st_torch.save_file({"t": t}, path)
    reads = []

    class Counting:
        def __init__(self, catalog):
            self._catalog = catalog

        def read(self, index, out, byte_offset=0):
            reads.append((byte_offset, memoryview(out).nbytes))
            return self._catalog.read(index, out, byte_offset=byte_offset)

        def __getattr__(self, name):
            return getattr(self._catalog, name)

    with ck_torch.safe_open(path, "pt", direct=True) as f:
        f._catalog = Counting(f._catalog)
        assert torch.equal(f.get_slice("t")[16:32], t[16:32])
        assert reads == [(16 * 1024, 16 * 1024)]
        reads.clear()
        assert torch.equal(f.get_slice("t")[8:40:8, 3:9], t[8:40:8, 3:9])
        assert reads == [(8 * 1024, 25 * 1024)]
        reads.clear()
        assert torch.equal(f.get_slice("t")[-1], t[-1])
        assert reads == [(63 * 1024, 1024)]
        reads.clear()
        assert torch.equal(f.get_slice("t")[:, 5], t[:, 5])  # not a row range: the whole tensor
        assert reads == [(0, 64 * 1024)]
