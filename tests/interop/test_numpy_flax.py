"""NumPy .npy/.npz and Flax msgpack files, written by numpy and flax
themselves, read exactly by ckpt; and what ckpt refuses, with the reason."""
import io
import json
import os
import subprocess
import zipfile

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

import ckpt
from statuses import status_of

serialization = pytest.importorskip("flax.serialization")
traverse_util = pytest.importorskip("flax.traverse_util")

CKPT_BIN = os.environ.get("CKPT_BIN")

# Every dtype np.save writes that ckpt has (ml_dtypes' bfloat16 as '<V2',
# float8_e5m2 as '<f1').
DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.uint16, np.float16, np.int32, np.uint32, np.float32,
          np.complex64, np.float64, np.int64, np.uint64, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2]
CKPT_NAMES = {np.bool_: "BOOL", np.uint8: "U8", np.int8: "I8", np.int16: "I16", np.uint16: "U16", np.float16: "F16",
              np.int32: "I32", np.uint32: "U32", np.float32: "F32", np.complex64: "C64", np.float64: "F64",
              np.int64: "I64", np.uint64: "U64", ml_dtypes.bfloat16: "BF16", ml_dtypes.float8_e5m2: "F8_E5M2"}


def raw(a):
    """An array's bytes, row-major: dtypes compared bit for bit (NaNs too)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).tobytes()


def random_array(dtype, shape, seed=0):
    dtype = np.dtype(dtype)
    b = np.random.default_rng(seed).integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    a = b.view(dtype).reshape(shape)
    return a.astype(bool) if dtype == np.bool_ else a


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_npy_every_dtype(tmp_path, dtype):
    a = random_array(dtype, (3, 5))
    np.save(tmp_path / "a.npy", a)
    with ckpt.open(tmp_path / "a.npy") as c:
        assert c.format == "npy" and c.keys() == ["a"]
        assert c.tensors["a"].dtype == CKPT_NAMES[dtype] and c.tensors["a"].shape == (3, 5)
    got = ckpt.load(tmp_path / "a.npy", "np")["a"]
    # np.load itself cannot read the '<f1' np.save writes for float8_e5m2.
    want = a if dtype is ml_dtypes.float8_e5m2 else np.load(tmp_path / "a.npy")
    assert got.dtype == np.dtype(dtype) and raw(got) == raw(want) == raw(a)


def npy_with_descr(descr, shape, data):
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode()
    pad = -(10 + len(header) + 1) % 64
    header += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data


@pytest.mark.parametrize("name,ckpt_name", [("bfloat16", "BF16"), ("float8_e4m3fn", "F8_E4M3"),
                                             ("float8_e5m2", "F8_E5M2"), ("float8_e4m3fnuz", "F8_E4M3FNUZ"),
                                             ("float8_e5m2fnuz", "F8_E5M2FNUZ"), ("float8_e8m0fnu", "F8_E8M0"),
                                             ("float32", "F32")])
def test_npy_ml_dtypes_names(tmp_path, name, ckpt_name):
    """Headers spelling the dtype by name, which np.load reads once
    ml_dtypes is imported."""
    a = random_array(getattr(ml_dtypes, name, None) or np.dtype(name), (4, 2), seed=3)
    (tmp_path / "a.npy").write_bytes(npy_with_descr(name, (4, 2), raw(a)))
    want = np.load(tmp_path / "a.npy")
    assert want.dtype == a.dtype
    with ckpt.open(tmp_path / "a.npy") as c:
        assert c.tensors["a"].dtype == ckpt_name
    got = ckpt.load(tmp_path / "a.npy", "np")["a"]
    assert got.dtype == want.dtype and raw(got) == raw(want)


@pytest.mark.parametrize("case", ["fortran2", "fortran3", "fortran4", "big", "big_c64", "big_f16", "scalar", "empty",
                                  "v2", "v3", "noncontig"])
def test_npy_layouts(tmp_path, case):
    rng = np.random.default_rng(1)
    base = rng.standard_normal((4, 6, 5, 3)).astype(np.float32)
    a = {"fortran2": np.asfortranarray(base[0, :, :, 0]), "fortran3": np.asfortranarray(base[:, :, :, 1]),
         "fortran4": np.asfortranarray(base), "big": base[0].astype(">f4"),
         "big_c64": (base[0] + 1j * base[1]).astype(">c8"), "big_f16": base[0].astype(">f2"),
         "scalar": np.array(3.5), "empty": np.zeros((0, 4), np.int16), "v2": base, "v3": base[1],
         "noncontig": base[:, ::2, 1:4]}[case]
    path = tmp_path / "a.npy"
    if case in ("v2", "v3"):
        with open(path, "wb") as f:
            np.lib.format.write_array(f, a, version=(2, 0) if case == "v2" else (3, 0))
    else:
        np.save(path, a)
    want = np.load(path)
    got = ckpt.load(path, "np")["a"]
    assert got.shape == want.shape and raw(got) == raw(want.astype(want.dtype.newbyteorder("<")))
    if want.ndim >= 2 and want.size:
        # A slice and a transpose through the engine, from the strided or
        # byte-swapped file.
        part = ckpt.load(path, "np", slices={"a": (1, 1, want.shape[1] - 1)}, transpose="a" if want.ndim == 2 else None)
        ref = want[:, 1:want.shape[1] - 1]
        ref = ref.T if want.ndim == 2 else ref
        assert raw(part["a"]) == raw(ref.astype(ref.dtype.newbyteorder("<")))


def test_npy_refused(tmp_path):
    cases = {
        "f8.npy": (lambda p: np.save(p, np.zeros(3, ml_dtypes.float8_e4m3fn)), "8-bit ml_dtypes"),
        "obj.npy": (lambda p: np.save(p, np.array([{}, 1], dtype=object), allow_pickle=True), "pickles"),
        "rec.npy": (lambda p: np.save(p, np.zeros(2, dtype=[("a", "<f4"), ("b", "<i2")])), "structured"),
        "c128.npy": (lambda p: np.save(p, np.zeros(2, np.complex128)), "complex128"),
        "str.npy": (lambda p: np.save(p, np.array(["ab"])), "string"),
    }
    for name, (write, says) in cases.items():
        write(tmp_path / name)
        with pytest.raises(ckpt.NumpyError, match=says) as e:
            ckpt.open(tmp_path / name)
        assert status_of(e.value) == "CKPT_E_UNSUPPORTED/CKPT_D_UNKNOWN_DTYPE" and e.value.path.endswith(name)
    good = io.BytesIO()
    np.save(good, np.arange(10, dtype=np.float32))
    data = good.getvalue()
    for cut, status in [(len(data) - 1, "CKPT_E_TRUNCATED"), (70, "CKPT_E_TRUNCATED"), (9, "CKPT_E_TRUNCATED")]:
        (tmp_path / "cut.npy").write_bytes(data[:cut])
        with pytest.raises(ckpt.NumpyError) as e:
            ckpt.open(tmp_path / "cut.npy")
        assert status_of(e.value) == status
    (tmp_path / "bad.npy").write_bytes(data.replace(b"'shape'", b"'shapf'"))
    with pytest.raises(ckpt.NumpyError, match="unexpected key 'shapf'") as e:
        ckpt.open(tmp_path / "bad.npy")
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_NPY_INVALID" and e.value.offset > 0


@pytest.mark.parametrize("compressed", [False, True], ids=["savez", "savez_compressed"])
def test_npz(tmp_path, compressed):
    rng = np.random.default_rng(2)
    arrays = {"w": rng.standard_normal((300, 700)).astype(np.float32),  # > 1 MiB: inflated in many reads
              "f": np.asfortranarray(rng.standard_normal((6, 7))), "big": rng.integers(0, 99, (5, 3)).astype(">i8"),
              "bf": rng.standard_normal(9).astype(ml_dtypes.bfloat16), "s": np.array(2, np.int8),
              "layer/0/kernel": np.ones((2, 2), np.float16), "e": np.zeros((0,), np.float32)}
    path = tmp_path / "a.npz"
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    # A member that is not an array: np.load gives its bytes; ckpt leaves it out.
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("notes.txt", "hello")
    want = np.load(path)
    with ckpt.open(path) as c:
        assert c.format == "npz" and sorted(c.keys()) == sorted(arrays)
        assert c.tensors["bf"].dtype == "BF16"
    got = ckpt.load(path, "np")
    for k in arrays:
        w = want[k]
        assert raw(got[k]) == raw(w.astype(w.dtype.newbyteorder("<"))), k
    # Rows of the large member, from the middle of its record.
    part = ckpt.load(path, "np", select="w", slices={"w": (0, 200, 230)})
    assert raw(part["w"]) == raw(arrays["w"][200:230])
    # Conversion to safetensors, read back by safetensors.
    out = tmp_path / "a.safetensors"
    ckpt.convert(path, out, select=["w", "f", "s"])
    st = safetensors.numpy.load_file(out)
    for k in ("w", "f", "s"):
        assert raw(st[k]) == raw(arrays[k])


def test_npz_damaged(tmp_path):
    rng = np.random.default_rng(4)
    path = tmp_path / "a.npz"
    np.savez_compressed(path, w=rng.standard_normal((64, 64)))
    data = path.read_bytes()
    for cut in (len(data) - 1, len(data) // 2, 40, 3):
        (tmp_path / "cut.npz").write_bytes(data[:cut])
        with pytest.raises(ckpt.Error):
            ckpt.load(tmp_path / "cut.npz", "np")
    # The member's compressed bytes damaged after the header: opening
    # works (the header inflates), reading fails naming the tensor.
    z = zipfile.ZipFile(path)
    info = z.getinfo("w.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    bad = bytearray(data)
    for i in range(start + 200, start + info.compress_size - 8, 97):
        bad[i] ^= 0x5A
    (tmp_path / "bad.npz").write_bytes(bytes(bad))
    with pytest.raises(ckpt.Error) as e:
        ckpt.load(tmp_path / "bad.npz", "np")
    assert e.value.tensor == "w"


# ---------------------------------------------------------------------------
# Flax msgpack

def flax_tree():
    rng = np.random.default_rng(5)
    return {
        "params": {
            "Dense_0": {"kernel": rng.standard_normal((3, 4)).astype(np.float32),
                        "bias": rng.standard_normal(4).astype(ml_dtypes.bfloat16)},
            "layers": [{"w": rng.standard_normal((2, 2)).astype(np.float16)}, {"w": np.arange(4, dtype=np.int64)}],
            "f8": rng.standard_normal(5).astype(ml_dtypes.float8_e4m3fn),
            "u": np.arange(6, dtype=np.uint32).reshape(2, 3), "flag": np.array([True, False]),
            "c": np.array([1 + 2j], np.complex64), "empty": np.zeros((0, 3), np.float32),
        },
        "opt_state": ({"count": np.int32(7), "mu": np.zeros(3, np.float32)}, None),
        "step": 1000, "lr": 3e-4, "name": "adamw", "beta": 0.9 + 0.1j, "done": False,
    }


def test_msgpack_to_bytes_tree(tmp_path):
    tree = flax_tree()
    path = tmp_path / "state.msgpack"
    path.write_bytes(serialization.to_bytes(tree))
    restored = serialization.msgpack_restore(path.read_bytes())
    with ckpt.open(path) as c:
        assert c.format == "flax-msgpack"
        assert c.tensors["params.Dense_0.bias"].dtype == "BF16"
        assert c.tensors["params.f8"].dtype == "F8_E4M3"
        assert c.tensors["opt_state.0.count"].shape == ()  # a numpy scalar
        structure = c.tree(leaf=lambda name: name)
    got = ckpt.load(path, "np", nested=True)

    def compare(want, have, where):
        if isinstance(want, dict):
            assert isinstance(have, dict) and list(want) == list(have), where
            for k in want:
                compare(want[k], have[k], f"{where}.{k}")
        elif isinstance(want, (np.ndarray, np.generic)):
            assert isinstance(have, np.ndarray) and have.dtype == want.dtype and have.shape == np.shape(want), where
            assert raw(have) == raw(np.asarray(want)), where
        else:
            assert have == want and type(have) is type(want), (where, have, want)

    compare(restored, got, "")
    assert structure["params"]["layers"]["1"]["w"] == "params.layers.1.w"  # Flax's lists are dicts keyed "0", "1"


def test_msgpack_raw_lists(tmp_path):
    tree = {"a": [np.ones(2, np.float32), [np.zeros(1, np.int8), 3]], "b": [1, 2]}
    path = tmp_path / "l.msgpack"
    path.write_bytes(serialization.msgpack_serialize(tree))
    restored = serialization.msgpack_restore(path.read_bytes())
    got = ckpt.load(path, "np", nested=True)
    assert isinstance(got["a"], list) and raw(got["a"][0]) == raw(restored["a"][0])
    assert got["a"][1][1] == 3 and got["b"] == [1, 2] == restored["b"]


@pytest.mark.parametrize("shape,limit", [((7, 13, 5), 100), ((1000,), 256), ((6, 4), 16), ((3, 4, 5, 6), 300)])
def test_msgpack_chunked(tmp_path, monkeypatch, shape, limit):
    monkeypatch.setattr(serialization, "MAX_CHUNK_SIZE", limit)
    a = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    path = tmp_path / "c.msgpack"
    path.write_bytes(serialization.msgpack_serialize({"emb": a, "small": np.ones(2, np.float32)}))
    restored = serialization.msgpack_restore(path.read_bytes())
    assert raw(restored["emb"]) == raw(a)
    got = ckpt.load(path, "np")
    assert raw(got["emb"]) == raw(a)
    # Slices across chunk boundaries, a cast, a transpose.
    if a.ndim >= 2:
        part = ckpt.load(path, "np", slices={"emb": (1, 1, shape[1] - 1)}, dtype="bf16")
        assert raw(part["emb"]) == raw(a[:, 1:shape[1] - 1].astype(ml_dtypes.bfloat16))
    with ckpt.open(path) as c:
        with pytest.raises(ckpt.Error, match="several pieces|compressed"):
            c.view("emb")


def test_msgpack_convert_to_safetensors(tmp_path):
    tree = flax_tree()
    path = tmp_path / "flax_model.msgpack"
    path.write_bytes(serialization.to_bytes(tree))
    out = tmp_path / "model.safetensors"
    if CKPT_BIN:
        subprocess.run([CKPT_BIN, "convert", str(path), str(out)], check=True)
    else:
        ckpt.convert(path, out)
    flat = traverse_util.flatten_dict(serialization.msgpack_restore(path.read_bytes()), sep=".")
    with safetensors.numpy.safe_open(out, "np") as f:
        assert f.metadata()["format"] == "flax"  # as transformers' Flax models save safetensors
        keys = set(f.keys())
    arrays = {k: v for k, v in flat.items() if isinstance(v, (np.ndarray, np.generic))}
    assert keys == set(arrays)
    with safetensors.numpy.safe_open(out, "np") as f:  # (safetensors.numpy has no float8: read by name)
        for k in ("params.Dense_0.kernel", "params.u", "opt_state.0.mu", "params.c", "params.flag"):
            assert raw(f.get_tensor(k)) == raw(arrays[k])
    # The structure and the non-tensor values come back from the copy.
    back = ckpt.load(out, "np", nested=True)
    assert back["step"] == 1000 and back["beta"] == 0.9 + 0.1j and back["opt_state"]["1"] is None
    assert set(back["params"]["layers"]) == {"0", "1"}


def flax_shard_checkpoint(params, max_shard_size):
    """transformers' modeling_flax_utils.flax_shard_checkpoint (weights
    flattened with "/", greedy shards, an index) as transformers 4.x wrote
    sharded Flax checkpoints."""
    weights = traverse_util.flatten_dict(params, sep="/")
    shards, current, size, total = [], {}, 0, 0
    for k, w in weights.items():
        n = w.size * w.dtype.itemsize
        if current and size + n > max_shard_size:
            shards.append(current)
            current, size = {}, 0
        current[k] = w
        size += n
        total += n
    shards.append(current)
    files, weight_map = {}, {}
    for i, shard in enumerate(shards):
        name = f"flax_model-{i + 1:05d}-of-{len(shards):05d}.msgpack"
        files[name] = shard
        weight_map.update({k: name for k in shard})
    return files, {"metadata": {"total_size": total}, "weight_map": weight_map}


def test_transformers_sharded_flax(tmp_path):
    rng = np.random.default_rng(7)
    params = {"transformer": {"h": {str(i): {"attn": {"kernel": rng.standard_normal((16, 16)).astype(np.float32)}}
                                    for i in range(4)},
                              "wte": {"embedding": rng.standard_normal((32, 16)).astype(np.float32)}}}
    files, index = flax_shard_checkpoint(params, 2500)
    assert len(files) > 2
    for name, shard in files.items():
        (tmp_path / name).write_bytes(serialization.to_bytes(traverse_util.unflatten_dict(shard, sep="/")))
    (tmp_path / "flax_model.msgpack.index.json").write_text(json.dumps(index, indent=2))
    with ckpt.open(tmp_path) as c:
        assert c.format == "flax-msgpack" and len(c.files) == len(files)
        assert c.index_path.endswith("flax_model.msgpack.index.json")
        tree = c.tree(leaf=lambda n: n)
    assert set(tree["transformer"]["h"]) == {"0", "1", "2", "3"}  # one tree, merged from the shards
    got = ckpt.load(tmp_path, "np", nested=True)
    for k, v in traverse_util.flatten_dict(params, sep=".").items():
        node = got
        for part in k.split("."):
            node = node[part]
        assert raw(node) == raw(v)
    # An index naming a tensor that no shard holds.
    index["weight_map"]["transformer/h/9/attn/kernel"] = next(iter(files))
    (tmp_path / "flax_model.msgpack.index.json").write_text(json.dumps(index))
    with pytest.raises(ckpt.Error, match="transformer.h.9.attn.kernel") as e:
        ckpt.open(tmp_path)
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_INDEX_MISMATCH"


def test_msgpack_damaged(tmp_path):
    path = tmp_path / "m.msgpack"
    data = serialization.to_bytes(flax_tree())
    for cut in range(0, len(data), 37):
        path.write_bytes(data[:cut])
        with pytest.raises(ckpt.Error) as e:
            ckpt.open(path)
        assert status_of(e.value) in ("CKPT_E_TRUNCATED", "CKPT_E_CORRUPT/CKPT_D_MSGPACK_INVALID", "CKPT_E_CORRUPT/CKPT_D_SIZE_MISMATCH")
    path.write_bytes(data + b"\xc0")
    with pytest.raises(ckpt.MsgpackError, match="after the msgpack document"):
        ckpt.open(path)
    import msgpack
    path.write_bytes(msgpack.packb({"a": msgpack.ExtType(9, b"xyz")}))
    with pytest.raises(ckpt.MsgpackError, match="extension type 9") as e:
        ckpt.open(path)
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_MSGPACK_INVALID" and e.value.offset == 3


# ---------------------------------------------------------------------------
# Writing .npz and Flax msgpack (ckpt convert / ckpt.convert)

def every_dtype_tensors():
    rng = np.random.default_rng(8)
    out = {f"t_{np.dtype(d).name}": random_array(d, (3, 4), seed=i) for i, d in enumerate(DTYPES)}
    out.update({"big": rng.standard_normal((700, 600)).astype(np.float32),  # > 1 MiB
                "scalar": np.array(-1.5), "empty": np.zeros((0, 5), np.int16),
                "f8_e4m3": random_array(ml_dtypes.float8_e4m3fn, (5,)), "layers.0.ünï": np.ones(2, np.float32)})
    return out


def test_write_npz(tmp_path):
    tensors = every_dtype_tensors()
    src = tmp_path / "src.safetensors"
    safetensors.numpy.save_file(tensors, src)
    out = tmp_path / "out.npz"
    if CKPT_BIN:
        subprocess.run([CKPT_BIN, "convert", str(src), str(out)], check=True)
    else:
        ckpt.convert(src, out)
    assert zipfile.ZipFile(out).testzip() is None  # every member's CRC-32
    with np.load(out) as z:
        assert sorted(z.files) == sorted(tensors)
        for k, v in tensors.items():
            assert z[k].dtype == v.dtype and z[k].shape == v.shape and raw(z[k]) == raw(v), k
    with ckpt.open(out) as c:
        assert c.format == "npz"
    back = ckpt.load(out, "np")
    assert all(raw(back[k]) == raw(v) for k, v in tensors.items())
    # The headers are numpy's own, byte for byte.
    z = zipfile.ZipFile(out)
    for k in ("t_float32", "big", "scalar", "empty", "t_uint64"):
        b = io.BytesIO()
        np.save(b, tensors[k])
        assert z.read(k + ".npy") == b.getvalue(), k
    # A cast and a selection on the way; an existing file is kept without overwrite.
    with pytest.raises(ckpt.ExistsError):
        ckpt.convert(src, out)
    ckpt.convert(src, out, select="big", dtype="bfloat16", overwrite=True)
    with np.load(out) as z:
        assert z.files == ["big"] and raw(z["big"]) == raw(tensors["big"].astype(ml_dtypes.bfloat16))


def test_write_flax_msgpack(tmp_path):
    tensors = {k: v for k, v in every_dtype_tensors().items() if k != "layers.0.ünï"}
    tensors.update({"params.Dense_0.kernel": np.ones((4, 3), np.float32), "params.h.0.w": np.zeros(2, np.float16),
                    "params.h.1.w": np.ones(2, np.float16)})
    src = tmp_path / "src.safetensors"
    safetensors.numpy.save_file(tensors, src)
    out = tmp_path / "flax_model.msgpack"
    if CKPT_BIN:
        subprocess.run([CKPT_BIN, "convert", str(src), str(out)], check=True)
    else:
        ckpt.convert(src, out)
    data = out.read_bytes()
    # Byte for byte what Flax writes for the same nested dict (in the
    # catalog's order, which is the source file's).
    order = ckpt.open(src).keys()
    assert data == serialization.to_bytes(traverse_util.unflatten_dict({k: tensors[k] for k in order}, sep="."))
    restored = traverse_util.flatten_dict(serialization.msgpack_restore(data), sep=".")
    assert set(restored) == set(tensors)
    for k, v in tensors.items():
        assert restored[k].dtype == v.dtype and raw(restored[k]) == raw(v), k
    # Round trip: Flax msgpack → safetensors → Flax msgpack restores equal.
    mid = tmp_path / "mid.safetensors"
    ckpt.convert(out, mid)
    again = tmp_path / "again.msgpack"
    ckpt.convert(mid, again)
    twice = traverse_util.flatten_dict(serialization.msgpack_restore(again.read_bytes()), sep=".")
    assert set(twice) == set(tensors) and all(raw(twice[k]) == raw(v) for k, v in tensors.items())
    # Names that cannot nest are refused, naming them, and nothing is written.
    safetensors.numpy.save_file({"a": np.ones(1, np.float32), "a.b": np.ones(1, np.float32)}, tmp_path / "c.safetensors")
    with pytest.raises(ckpt.Error, match="'a'") as e:
        ckpt.convert(tmp_path / "c.safetensors", tmp_path / "c.msgpack")
    assert status_of(e.value) == "CKPT_E_INVALID_ARGUMENT" and not (tmp_path / "c.msgpack").exists()
    with pytest.raises(ValueError, match="format must be"):
        ckpt.convert(src, tmp_path / "x", format="parquet")
