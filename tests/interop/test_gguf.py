"""GGUF against the gguf package (gguf-py, the reference): files it writes
are read exactly, files ckpt writes are what GGUFWriter writes, byte for
byte, and ckpt's block kernels are gguf.quants' bit for bit."""
import json
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest
from ckptlib import BIN_PATH, Catalog, CkptError, DTYPES, Plan, can_cast, cast
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from statuses import status_of

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# A real GGUF file written by llama.cpp's tools: the vocabulary-only model
# that llama-cpp-python 0.3.36 ships (vendor/llama.cpp/models/, MIT:
# tests/fixtures/NOTICE.md).
REAL_VOCAB = FIXTURES / "ggml-vocab-llama-spm.gguf"

DEQUANTIZED = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.TQ1_0, Q.TQ2_0,
               Q.MXFP4]


def ckpt(*args, check=True):
    r = subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(r.stderr)
    return r


def write_gguf(path, kvs=(), tensors=(), endianess=gguf.GGUFEndian.LITTLE, alignment=None, arch="llama", **kw):
    w = gguf.GGUFWriter(str(path), arch, endianess=endianess, **kw)
    if alignment:
        w.add_custom_alignment(alignment)
    for key, value, vtype, sub in kvs:
        w.add_key_value(key, value, vtype, sub_type=sub)
    for name, data, raw in tensors:
        if raw is None:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def bits_equal(a, b):
    """Equal bit for bit, NaNs of either payload counted equal."""
    a, b = np.asarray(a).ravel(), np.asarray(b).ravel()
    ua, ub = a.view(np.uint32 if a.itemsize == 4 else np.uint16), b.view(np.uint32 if b.itemsize == 4 else np.uint16)
    return bool(np.all((ua == ub) | (np.isnan(a) & np.isnan(b))))


ALL_KVS = [
    ("k.u8", 200, V.UINT8, None), ("k.i8", -100, V.INT8, None), ("k.u16", 60000, V.UINT16, None),
    ("k.i16", -30000, V.INT16, None), ("k.u32", 4000000000, V.UINT32, None), ("k.i32", -2000000000, V.INT32, None),
    ("k.f32", 0.1, V.FLOAT32, None), ("k.bool", True, V.BOOL, None), ("k.string", "héllo\nworld", V.STRING, None),
    ("k.u64", 2**64 - 1, V.UINT64, None), ("k.i64", -2**63, V.INT64, None), ("k.f64", 1 / 3, V.FLOAT64, None),
    ("k.arr_f32", [1.5, -2.25, 3e-8], V.ARRAY, None), ("k.arr_str", ["a", "", "ü€😀"], V.ARRAY, None),
    ("k.arr_bool", [True, False], V.ARRAY, None), ("k.nested", [[1, 2], [3]], V.ARRAY, None),
    ("k.nested_str", [["x"], ["y", "z"]], V.ARRAY, None), ("k.empty", "", V.STRING, None),
]


def every_tensor(rng):
    """(name, data, raw_dtype, expected float32 values or None) for every type gguf-py can produce."""
    out = []
    x = rng.standard_normal((3, 256)).astype(np.float32)
    out.append(("t.f32", x, None))
    out.append(("t.f16", x.astype(np.float16), None))
    out.append(("t.f64", x.astype(np.float64)[:, :7], None))
    out.append(("t.i8", rng.integers(-128, 127, (2, 5), dtype=np.int8), None))
    out.append(("t.i16", rng.integers(-1000, 1000, (5,), dtype=np.int16), None))
    out.append(("t.i32", rng.integers(-10**9, 10**9, (2, 2, 2), dtype=np.int32), None))
    out.append(("t.i64", rng.integers(-10**12, 10**12, (1, 3, 1, 2), dtype=np.int64), None))
    out.append(("t.bf16", gguf.quants.quantize(x, Q.BF16), Q.BF16))
    for q in [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.TQ1_0, Q.TQ2_0, Q.MXFP4]:
        out.append((f"t.{q.name.lower()}", gguf.quants.quantize(x, q), q))
    for q in [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q8_K, Q.IQ4_NL, Q.IQ4_XS, Q.NVFP4]:
        size = gguf.GGML_QUANT_SIZES[q][1]
        out.append((f"t.{q.name.lower()}", rng.integers(0, 256, (2, 256 // gguf.GGML_QUANT_SIZES[q][0] * size),
                                                        dtype=np.uint8), q))
    out.append(("t.scalar_like", np.array([7.0], np.float32), None))
    return out


def test_dtype_table_matches_gguf():
    assert len(DTYPES) == 49
    import ctypes
    from ckptlib import _lib
    for q, (block, size) in gguf.GGML_QUANT_SIZES.items():
        d = _lib.ckpt_dtype_from_ggml_type(int(q))
        assert d, q
        assert _lib.ckpt_dtype_ggml_type(d) == int(q)
        assert _lib.ckpt_dtype_block_elems(d) == block, q
        assert _lib.ckpt_dtype_block_bytes(d) == size, q
        if block > 1:
            assert DTYPES[d] == q.name
    _lib.ckpt_dtype_from_ggml_type.restype = ctypes.c_int


@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
@pytest.mark.parametrize("alignment", [None, 64])
def test_reads_gguf_py_files_exactly(tmp_path, endian, alignment):
    rng = np.random.default_rng(0)
    tensors = every_tensor(rng)
    if endian == gguf.GGUFEndian.BIG:  # gguf-py cannot say what big-endian blocks are but for these
        tensors = [t for t in tensors if t[2] in (None, Q.BF16)]
    path = tmp_path / "m.gguf"
    write_gguf(path, ALL_KVS, tensors, endianess=endian, alignment=alignment)
    ref = gguf.GGUFReader(str(path))
    out = json.loads(ckpt("inspect", "--json", path).stdout)
    assert out["format"] == "gguf"
    kv = out["gguf"]
    for field in ref.fields.values():
        if field.name.startswith("GGUF."):
            continue
        got = kv[field.name]
        assert got["gguf_type"] == V(field.types[0]).name.lower().replace("uint", "u").replace("int", "i") \
            .replace("float", "f").replace("string", "string"), field.name
        if V.ARRAY not in field.types[1:]:  # gguf-py flattens nested arrays
            want = field.contents()
            if isinstance(want, float):
                assert np.float32(got["value"]) == np.float32(want) or got["value"] == want
            elif isinstance(want, list) and want and isinstance(want[0], float):
                assert np.array_equal(np.float32(got["value"]), np.float32(want))
            else:
                assert got["value"] == want, field.name
    assert kv["k.nested"]["value"][1] == {"gguf_type": "array", "element": "i32", "value": [3]}
    assert kv["k.nested_str"]["value"][1]["value"] == ["y", "z"]
    with Catalog(path) as cat:
        assert cat.names() == [t.name for t in ref.tensors]
        for t in ref.tensors:
            info = cat.info(t.name)
            assert info["shape"] == list(reversed([int(d) for d in t.shape])), t.name
            assert info["dtype"] == (t.tensor_type.name if t.tensor_type not in (Q.F32, Q.F16, Q.F64) else
                                     {Q.F32: "F32", Q.F16: "F16", Q.F64: "F64"}[t.tensor_type])
            want = np.ascontiguousarray(t.data)
            if endian == gguf.GGUFEndian.BIG:
                want = want.byteswap() if t.tensor_type != Q.BF16 else want.view(np.uint16).byteswap()
            assert cat.read(t.name) == want.tobytes(), t.name
        if endian == gguf.GGUFEndian.LITTLE:
            assert cat.metadata()["general.architecture"] == "llama"
            assert json.loads(cat.metadata()["k.u32"]) == {"gguf_type": "u32", "value": 4000000000}


def test_big_endian_blocks_as_gguf_convert_endian_swaps_them(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 256)).astype(np.float32)
    le, be = tmp_path / "le.gguf", tmp_path / "be.gguf"
    tensors = [(f"t.{q.name}", gguf.quants.quantize(x, q), q) for q in (Q.Q8_0, Q.Q4_0, Q.MXFP4)]
    write_gguf(le, [], tensors)
    # gguf_convert_endian's layout: every number swapped, the f16 scales of the blocks too
    raw = bytearray(be.read_bytes() if be.exists() else b"")
    data = le.read_bytes()
    reader = gguf.GGUFReader(str(le))
    import struct
    out = bytearray(data)
    out[4:8] = struct.pack(">I", 3)
    out[8:16] = struct.pack(">Q", len(reader.tensors))
    out[16:24] = struct.pack(">Q", struct.unpack("<Q", data[16:24])[0])
    for field in list(reader.fields.values())[3:] + [t.field for t in reader.tensors]:
        off = field.offset
        for part in field.parts:
            n = part.nbytes
            if part.dtype.itemsize > 1:
                out[off:off + n] = part.byteswap().tobytes()
            off += n
    for t in reader.tensors:
        if t.tensor_type in (Q.Q8_0, Q.Q4_0):
            size = gguf.GGML_QUANT_SIZES[t.tensor_type][1]
            for b in range(t.data_offset, t.data_offset + t.n_bytes, size):
                out[b:b + 2] = out[b:b + 2][::-1]
    be.write_bytes(bytes(out))
    del raw
    with Catalog(le) as a, Catalog(be) as b:
        for t in reader.tensors:
            assert b.info(t.name)["big_endian"]
            assert a.read(t.name) == b.read(t.name)
            assert a.read(t.name, 5, 40) == b.read(t.name, 5, 40)
    for f in (le, be):
        with Catalog(f) as cat, Plan(cat) as plan:
            plan.cast("F32")
            got = plan.load().data()
        for t in reader.tensors:
            assert bits_equal(np.frombuffer(got[t.name], np.float32), gguf.quants.dequantize(t.data, t.tensor_type))


def test_real_llama_cpp_vocab_file():
    ref = gguf.GGUFReader(str(REAL_VOCAB))
    out = json.loads(ckpt("inspect", "--json", REAL_VOCAB).stdout)["gguf"]
    tokens = ref.fields["tokenizer.ggml.tokens"]
    assert out["tokenizer.ggml.tokens"]["value"] == tokens.contents()
    assert out["tokenizer.ggml.scores"]["value"] == pytest.approx(ref.fields["tokenizer.ggml.scores"].contents())
    assert list(out) == [k for k in ref.fields if not k.startswith("GGUF.")]
    table = ckpt("inspect", REAL_VOCAB).stdout
    assert "tokenizer.ggml.tokens: array of 32000 string" in table


@pytest.mark.parametrize("qtype", DEQUANTIZED, ids=lambda q: q.name)
def test_dequantize_bit_exact(qtype):
    rng = np.random.default_rng(int(qtype))
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    blobs = [rng.integers(0, 256, (8, 4 * size), dtype=np.uint8)]  # every bit pattern, NaN scales included
    try:
        blobs.append(gguf.quants.quantize((rng.standard_normal((8, 4 * block)) * 0.02).astype(np.float32), qtype))
    except NotImplementedError:
        pass
    for raw in blobs:
        with np.errstate(all="ignore"):
            want = gguf.quants.dequantize(raw, qtype)
        n = want.size
        got = np.frombuffer(cast(qtype.name, raw.tobytes(), "F32", n), np.float32)
        assert bits_equal(got, want)
        got16 = np.frombuffer(cast(qtype.name, raw.tobytes(), "F16", n), np.float16)
        with np.errstate(all="ignore"):
            assert bits_equal(got16, want.astype(np.float16))
        got_bf = np.frombuffer(cast(qtype.name, raw.tobytes(), "BF16", n), np.uint16)
        assert np.array_equal(got_bf, gguf.quants.quantize(want, Q.BF16).view(np.uint16).ravel())


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0], ids=lambda q: q.name)
@pytest.mark.parametrize("src", ["F32", "F16", "BF16"])
def test_quantize_bit_exact(qtype, src):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((16, 256)) * rng.choice([1e-6, 1, 1e4], (16, 1))).astype(np.float32)
    x[0, :32] = 0
    x[1, :32] = np.linspace(-1, 1, 32)
    x[2, :32] = 0.5  # ties
    if src == "F16":
        data = x.astype(np.float16)
        x = data.astype(np.float32)
    elif src == "BF16":
        data = gguf.quants.quantize(x, Q.BF16).view(np.uint16)
        x = (data.astype(np.uint32) << 16).view(np.float32)
    else:
        data = x
    want = gguf.quants.quantize(x, qtype)
    got = cast(src, data.tobytes(), qtype.name, x.size)
    assert got == want.tobytes()


def test_refuses_other_block_types_by_name(tmp_path):
    assert not can_cast("IQ2_XXS", "F32")
    with pytest.raises(CkptError) as e:
        cast("IQ2_XXS", b"\0" * 66, "F32", 256)
    assert "IQ2_XXS" in str(e.value) and status_of(e.value) == "CKPT_E_UNSUPPORTED/CKPT_D_UNSUPPORTED_DTYPE"
    path = tmp_path / "iq.gguf"
    write_gguf(path, [], [("w", np.zeros((1, 66), np.uint8), Q.IQ2_XXS)])
    with Catalog(path) as cat, Plan(cat) as plan:
        with pytest.raises(CkptError) as e:
            plan.cast("BF16")
    assert "IQ2_XXS" in str(e.value)


def test_writer_byte_identical_to_gguf_writer(tmp_path):
    rng = np.random.default_rng(1)
    tensors = [t for t in every_tensor(rng)]
    ref = tmp_path / "ref.gguf"
    write_gguf(ref, ALL_KVS, tensors, alignment=64)
    out = tmp_path / "out.gguf"
    ckpt("convert", ref, out)
    assert out.read_bytes() == ref.read_bytes()
    # gguf-dump reads it, and GGUFReader sees the same fields
    import sys
    dump = subprocess.run([str(Path(sys.executable).parent / "gguf-dump"), "--json", str(out)],
                          capture_output=True, text=True)
    assert dump.returncode == 0, dump.stderr
    fields = json.loads(dump.stdout)["metadata"]
    assert fields["k.u64"]["value"] == 2**64 - 1 and fields["k.arr_str"]["array_types"] == ["STRING"]
    assert len(json.loads(dump.stdout)["tensors"]) == len(tensors)


def test_safetensors_to_gguf_and_back(tmp_path):
    import safetensors.numpy
    import torch
    rng = np.random.default_rng(2)
    sd = {"model.embed.weight": rng.standard_normal((8, 64)).astype(np.float32),
          "model.norm.weight": rng.standard_normal((64,)).astype(np.float32),
          "model.layers.0.mlp.weight": rng.standard_normal((32, 64)).astype(np.float16)}
    src = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(sd, str(src), metadata={"general.architecture": "llama", "format": "pt"})
    kv = tmp_path / "kv.json"
    kv.write_text(json.dumps({"llama.block_count": {"gguf_type": "u32", "value": 1}, "general.name": "tiny",
                              "llama.rope.freq_base": 10000.0, "tokenizer.ggml.tokens": ["a", "b"]}))
    g = tmp_path / "m.gguf"
    ckpt("convert", src, g, "--gguf-kv", kv, "--source-metadata")
    # the same as GGUFWriter given the same key-values and tensors
    ref = tmp_path / "ref.gguf"
    write_gguf(ref, [("format", "pt", V.STRING, None), ("llama.block_count", 1, V.UINT32, None),
                     ("general.name", "tiny", V.STRING, None), ("llama.rope.freq_base", 10000.0, V.FLOAT32, None),
                     ("tokenizer.ggml.tokens", ["a", "b"], V.ARRAY, None)],
               [(k, v, None) for k, v in sd.items()])
    assert g.read_bytes() == ref.read_bytes()
    back = tmp_path / "back.safetensors"
    ckpt("convert", g, back)
    got = safetensors.numpy.load_file(str(back))
    assert list(got) == list(sd)
    for k in sd:
        assert got[k].dtype == sd[k].dtype and np.array_equal(got[k], sd[k])
    g2 = tmp_path / "again.gguf"
    ckpt("convert", back, g2, "--source-metadata")  # the key-values went into back's metadata
    assert g2.read_bytes() == g.read_bytes()
    # without --source-metadata, --gguf-kv's key-values alone
    bare = tmp_path / "bare.gguf"
    ckpt("convert", src, bare, "--gguf-kv", kv)
    assert [k for k in gguf.GGUFReader(str(bare)).fields if not k.startswith("GGUF.")] == \
        ["llama.block_count", "general.name", "llama.rope.freq_base", "tokenizer.ggml.tokens"]
    del torch


def test_quantize_on_write_and_dequantize_back(tmp_path):
    import safetensors.numpy
    import safetensors.torch
    import torch
    rng = np.random.default_rng(4)
    w = rng.standard_normal((64, 128)).astype(np.float32)
    b = rng.standard_normal((128,)).astype(np.float32)
    src = tmp_path / "m.safetensors"
    safetensors.torch.save_file({"w": torch.from_numpy(w).bfloat16(), "b": torch.from_numpy(b)}, str(src))
    for qtype in (Q.Q8_0, Q.Q4_0):
        g = tmp_path / f"m-{qtype.name}.gguf"
        ckpt("convert", src, g, "--dtype", qtype.name.lower(), "--gguf-kv", "/dev/null", check=False)
        ckpt("convert", src, g, "--dtype", qtype.name.lower(), "--force")
        r = gguf.GGUFReader(str(g))
        t = {x.name: x for x in r.tensors}
        assert t["w"].tensor_type == qtype and t["b"].tensor_type == Q.F32  # vectors stay
        w32 = torch.from_numpy(w).bfloat16().float().numpy()
        assert np.array_equal(t["w"].data, gguf.quants.quantize(w32, qtype))
        out = tmp_path / f"deq-{qtype.name}"
        ckpt("convert", g, out, "--dtype", "bf16", "--max-shard-size", "10KB")
        from safetensors import safe_open
        files = sorted(out.glob("*.safetensors"))
        assert len(files) >= 2 and (out / "model.safetensors.index.json").exists()
        got = {}
        for f in files:
            with safe_open(str(f), "pt") as h:
                got.update({k: h.get_tensor(k) for k in h.keys()})
        want = torch.from_numpy(gguf.quants.dequantize(t["w"].data, qtype)).bfloat16()
        assert torch.equal(got["w"].view(torch.int16), want.view(torch.int16))
        # without --dtype, quantized tensors become f32
        f32 = tmp_path / f"deq-{qtype.name}.safetensors"
        ckpt("convert", g, f32)
        got = safetensors.numpy.load_file(str(f32))
        assert bits_equal(got["w"], gguf.quants.dequantize(t["w"].data, qtype))


def test_load_dequantizes_slices(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 512)).astype(np.float32)
    path = tmp_path / "m.gguf"
    tensors = [(q.name, gguf.quants.quantize(x, q), q) for q in (Q.Q8_0, Q.Q4_1, Q.TQ2_0)]
    write_gguf(path, [], tensors)
    for q in (Q.Q8_0, Q.Q4_1, Q.TQ2_0):
        want = gguf.quants.dequantize(gguf.quants.quantize(x, q), q)
        block = gguf.GGML_QUANT_SIZES[q][0]
        with Catalog(path) as cat, Plan(cat) as plan:
            plan.select(q.name)
            plan.slice(0, 1, 5)
            plan.slice(1, block, 2 * block)
            plan.cast("F16")
            got = plan.load(threads=2, chunk_bytes=1).data()[q.name]
        assert bits_equal(np.frombuffer(got, np.float16), want[1:5, block:2 * block].astype(np.float16))
        with Catalog(path) as cat, Plan(cat) as plan:
            with pytest.raises(CkptError):
                plan.slice(1, 1, block)  # not whole blocks
            with pytest.raises(CkptError):
                plan.transpose()  # the innermost axis holds the blocks
        with Catalog(path) as cat, Plan(cat) as plan:  # raw blocks, no cast
            plan.select(q.name)
            assert plan.load().data()[q.name] == gguf.quants.quantize(x, q).tobytes()


def test_splits_as_gguf_split_names_and_merge(tmp_path):
    rng = np.random.default_rng(6)
    tensors = [(f"blk.{i}.w", rng.standard_normal((4, 64)).astype(np.float32), None) for i in range(5)]
    ref = tmp_path / "ref.gguf"
    write_gguf(ref, ALL_KVS[:4], tensors, split_max_tensors=2)
    parts = sorted(tmp_path.glob("ref-*.gguf"))
    assert [p.name for p in parts] == [f"ref-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    out = tmp_path / "out.gguf"
    ckpt("convert", parts[0], out, "--split-max-tensors", "2")
    mine = sorted(tmp_path.glob("out-*.gguf"))
    assert [p.read_bytes() for p in mine] == [p.read_bytes() for p in parts]
    with Catalog(mine[0]) as cat:
        assert cat.names() == [t[0] for t in tensors] and len(cat.files()) == 3
        for name, data, _ in tensors:
            assert cat.read(name) == data.tobytes()
    merged = tmp_path / "merged.gguf"
    ckpt("convert", mine[0], merged)
    single = tmp_path / "single.gguf"
    write_gguf(single, ALL_KVS[:4], tensors)
    assert merged.read_bytes() == single.read_bytes()
    # by size: gguf-split's rule (padded sizes; a split at most this many bytes of data)
    sized = tmp_path / "sized.gguf"
    ckpt("convert", merged, sized, "--split-max-size", "2100")
    got = sorted(tmp_path.glob("sized-*.gguf"))
    assert len(got) == 3
    assert [len(gguf.GGUFReader(str(p)).tensors) for p in got] == [2, 2, 1]
    r0 = gguf.GGUFReader(str(got[0]))
    assert r0.fields["split.count"].contents() == 3 and r0.fields["split.tensors.count"].contents() == 5
    assert "k.u8" in r0.fields and "k.u8" not in gguf.GGUFReader(str(got[1])).fields
    # a missing part is named
    got[2].unlink()
    r = ckpt("inspect", got[0], check=False)
    assert r.returncode != 0 and "sized-00003-of-00003.gguf" in r.stderr
    r = ckpt("inspect", got[1], check=False)
    assert "CKPT_E_CORRUPT/CKPT_D_GGUF_SPLIT" in r.stderr and "first part" in r.stderr


def test_refuses_what_gguf_cannot_hold(tmp_path):
    import safetensors.numpy
    src = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"u": np.zeros((2, 2), np.uint8)}, str(src))
    r = ckpt("convert", src, tmp_path / "m.gguf", check=False)
    assert r.returncode != 0 and "CKPT_E_UNSUPPORTED/CKPT_D_UNSUPPORTED_DTYPE" in r.stderr and "'u'" in r.stderr or "u" in r.stderr
    assert not (tmp_path / "m.gguf").exists()
    bad = tmp_path / "kv.json"
    bad.write_text('{"x": {"gguf_type": "u8", "value": 300}}')
    safetensors.numpy.save_file({"f": np.zeros((2, 2), np.float32)}, str(src))
    r = ckpt("convert", src, tmp_path / "m.gguf", "--gguf-kv", bad, check=False)
    assert r.returncode != 0 and "'x'" in r.stderr
    assert not list(tmp_path.glob("m.gguf*"))


def test_split_parts_with_custom_alignment_read_by_gguf_py(tmp_path):
    """Parts after the first carry no general.alignment: ckpt lays them out
    at the default 32, as gguf-split does and as GGUFReader reads them."""
    rng = np.random.default_rng(8)
    tensors = [(f"t{i}", rng.standard_normal((3, 10)).astype(np.float32), None) for i in range(3)]
    src = tmp_path / "a.gguf"
    write_gguf(src, [], tensors, alignment=128)
    out = tmp_path / "o.gguf"
    ckpt("convert", src, out, "--split-max-tensors", "1")
    parts = sorted(tmp_path.glob("o-*.gguf"))
    assert len(parts) == 3
    got = {t.name: np.array(t.data) for p in parts for t in gguf.GGUFReader(str(p)).tensors}
    for name, data, _ in tensors:
        assert np.array_equal(got[name], data)
    assert gguf.GGUFReader(str(parts[0])).alignment == 128 and gguf.GGUFReader(str(parts[1])).alignment == 32


def test_dequantizing_convert_memory_is_bounded(tmp_path):
    """A 96 MiB bf16 output from a Q8_0 GGUF, converted in a process whose
    peak RSS stays far below the output's size, bit for bit gguf-py's
    dequantization rounded by torch: many boxes on two threads, each
    converted and written in 32 KiB pieces that end on the file's pages, so
    that blocks straddle the pieces' ends (src/engine.c, convert_out)."""
    import os
    import safetensors.numpy
    src = tmp_path / "big.safetensors"
    safetensors.numpy.save_file({"w": np.random.default_rng(9).standard_normal((6144, 8192)).astype(np.float32)},
                                str(src))
    g = tmp_path / "big.gguf"
    ckpt("convert", src, g, "--dtype", "q8_0", "--no-sync")
    src.unlink()
    out = tmp_path / "big-bf16.safetensors"
    # /usr/bin/time's child starts from a small process: a child forked from
    # pytest would count pytest's own peak (Linux keeps it across exec).
    rss = tmp_path / "rss"
    r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(rss), BIN_PATH, "convert", str(g), str(out), "--dtype",
                        "bf16", "--no-sync"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 96 * 2**20
    peak_kib = int(rss.read_text().split()[-1])
    assert peak_kib * 1024 < 64 * 2**20, peak_kib
    import torch
    from safetensors import safe_open
    q = gguf.GGUFReader(str(g)).tensors[0]
    want = torch.from_numpy(gguf.quants.dequantize(q.data, q.tensor_type)).bfloat16()
    with safe_open(str(out), "pt") as h:
        assert torch.equal(h.get_tensor("w").view(torch.int16), want.view(torch.int16))
    del os


def test_torch_file_to_gguf(tmp_path):
    """torch.save → GGUF: every tensor written (GGUF shares no storage: tied
    weights are each stored), names and shapes kept, bytes exact."""
    import torch
    emb = torch.randn(16, 32)
    sd = {"embed.weight": emb, "lm_head.weight": emb, "norm.weight": torch.ones(32, dtype=torch.float16),
          "step": torch.tensor([3], dtype=torch.int64)}
    src = tmp_path / "m.bin"
    torch.save(sd, src)
    out = tmp_path / "m.gguf"
    ckpt("convert", src, out)
    r = gguf.GGUFReader(str(out))
    got = {t.name: t for t in r.tensors}
    assert list(got) == list(sd)
    for name, t in sd.items():
        assert list(reversed([int(d) for d in got[name].shape])) == list(t.shape)
        assert np.array(got[name].data).tobytes() == t.numpy().tobytes()
    assert not [k for k in r.fields if not k.startswith("GGUF.")]  # no {"format": "pt"}, no object tree
    ckpt("convert", src, out, "--source-metadata", "--force")
    assert gguf.GGUFReader(str(out)).fields["format"].contents() == "pt"


def test_version_2_files(tmp_path):
    """GGUF v2 has v3's layout (v3 added big-endian files): both are read."""
    import struct
    path = tmp_path / "v3.gguf"
    x = np.arange(64, dtype=np.float32).reshape(2, 32)
    write_gguf(path, [("k", 5, V.UINT32, None)], [("t", x, None)])
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<I", 2)
    v2 = tmp_path / "v2.gguf"
    v2.write_bytes(bytes(data))
    with Catalog(v2) as cat:
        assert cat.read("t") == x.tobytes()
    data[4:8] = struct.pack("<I", 1)
    v2.write_bytes(bytes(data))
    r = ckpt("inspect", v2, check=False)
    assert "CKPT_E_UNSUPPORTED/CKPT_D_GGUF_VERSION" in r.stderr and "version 1" in r.stderr
