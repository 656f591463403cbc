"""The Python package on GGUF files written by gguf-py: ckpt.open (typed
key-values), ckpt.load (raw blocks, or dequantized bit-exact with
gguf.quants when a float dtype is asked for), ckpt.load_into a torch
module, and the safetensors drop-in."""
import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

import ckpt
import ckpt.torch


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 64)).astype(np.float32)
    b = rng.standard_normal((8,)).astype(np.float32)
    path = tmp_path / "m.gguf"
    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_uint32("llama.block_count", 1)
    wr.add_array("tokenizer.ggml.tokens", ["<s>", "a"])
    wr.add_key_value("nested", [[1, 2], [3]], gguf.GGUFValueType.ARRAY)
    wr.add_tensor("lin.weight", gguf.quants.quantize(w, Q.Q8_0), raw_dtype=Q.Q8_0)
    wr.add_tensor("lin.bias", b)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return path, w, b


def test_open_gives_shapes_types_and_kvs(model):
    path, w, b = model
    with ckpt.open(path) as c:
        assert c.format == "gguf"
        assert c.tensors["lin.weight"].dtype == "Q8_0" and list(c.tensors["lin.weight"].shape) == [8, 64]
        assert c.kv == {"general.architecture": "llama", "llama.block_count": 1,
                        "tokenizer.ggml.tokens": ["<s>", "a"], "nested": [[1, 2], [3]]}


def test_load_raw_blocks_or_dequantized(model):
    path, w, b = model
    raw = ckpt.load(path, "numpy")
    q = gguf.GGUFReader(str(path)).tensors[0].data
    assert raw["lin.weight"].dtype == np.uint8 and np.array_equal(raw["lin.weight"], q)
    want = gguf.quants.dequantize(q, Q.Q8_0)
    f32 = ckpt.load(path, "numpy", dtype="float32")
    assert np.array_equal(f32["lin.weight"].view(np.uint32), want.view(np.uint32))
    assert np.array_equal(f32["lin.bias"], b)
    bf = ckpt.load(path, dtype=torch.bfloat16)
    assert bf["lin.weight"].dtype == torch.bfloat16
    assert torch.equal(bf["lin.weight"].view(torch.int16), torch.from_numpy(want).bfloat16().view(torch.int16))


def test_load_into_module_and_dropin(model):
    path, w, b = model
    model = torch.nn.Module()
    model.lin = torch.nn.Linear(64, 8)
    lin = model.lin
    ckpt.load_into(model, path)
    want = gguf.quants.dequantize(gguf.GGUFReader(str(path)).tensors[0].data, Q.Q8_0)
    assert torch.equal(lin.weight.detach(), torch.from_numpy(want))
    assert torch.equal(lin.bias.detach(), torch.from_numpy(b))
    sd = ckpt.torch.load_file(path)
    assert sd["lin.weight"].dtype == torch.uint8 and sd["lin.weight"].shape == (8, 2 * 34)


def test_mmap_views_and_numpy_dropin(model):
    path, w, b = model
    import ckpt.numpy
    q = gguf.GGUFReader(str(path)).tensors[0].data
    views = ckpt.load(path, "numpy", mmap=True)
    assert np.array_equal(views["lin.weight"], q) and np.array_equal(views["lin.bias"], b)
    sd = ckpt.numpy.load_file(path)
    assert np.array_equal(sd["lin.weight"], q) and sd["lin.weight"].dtype == np.uint8


def test_gguf_output_carries_source_metadata_only_when_asked(tmp_path, model):
    """A safetensors source's __metadata__ ({"format": "pt"}, a caller's
    entries) is not GGUF's: ckpt.convert and `ckpt convert` write it as
    key-values only with source_metadata=True / --source-metadata.  A GGUF
    source's key-values always go along."""
    import subprocess
    from ckptlib import BIN_PATH
    src = tmp_path / "m.safetensors"
    ckpt.torch.save_file({"w": torch.ones(2, 32)}, src, metadata={"format": "pt", "origin": "test"})

    def kvs(path):
        return {k: f.contents() for k, f in gguf.GGUFReader(str(path)).fields.items() if not k.startswith("GGUF.")}

    ckpt.convert(src, tmp_path / "py.gguf", progress=False)
    subprocess.run([BIN_PATH, "convert", str(src), str(tmp_path / "cli.gguf")], check=True, capture_output=True)
    assert kvs(tmp_path / "py.gguf") == {} and kvs(tmp_path / "cli.gguf") == {}
    ckpt.convert(src, tmp_path / "py.gguf", progress=False, overwrite=True, source_metadata=True)
    subprocess.run([BIN_PATH, "convert", str(src), str(tmp_path / "cli.gguf"), "--force", "--source-metadata"],
                   check=True, capture_output=True)
    assert kvs(tmp_path / "py.gguf") == kvs(tmp_path / "cli.gguf") == {"format": "pt", "origin": "test"}
    with pytest.raises(ValueError, match="GGUF"):
        ckpt.convert(src, tmp_path / "x.safetensors", source_metadata=True)
    r = subprocess.run([BIN_PATH, "convert", str(src), str(tmp_path / "x.safetensors"), "--source-metadata"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "GGUF" in r.stderr
    path, _, _ = model  # GGUF to GGUF: its key-values stay
    ckpt.convert(path, tmp_path / "again.gguf", progress=False)
    assert kvs(tmp_path / "again.gguf") == kvs(path)


@pytest.mark.parametrize("suffix", [".safetensors", ".pt", ".npz"])
def test_convert_of_gguf_blocks_follows_the_libraries_rule_as_the_cli(tmp_path, model, suffix):
    """A GGUF's blocks into a format without block types: ckpt.convert
    raised "safetensors has no Q8_0 type" where `ckpt convert` wrote f32,
    each front end with a rule of its own.  Both now take the plan's
    (ckpt_plan_dequantize_for): blocks no rule asked anything of become
    f32, exactly their values; a float rule's dtype stays; a block type
    asked for is refused by tensor and nothing is written."""
    import subprocess
    from ckptlib import BIN_PATH
    path, w, b = model
    exact = gguf.quants.dequantize(gguf.quants.quantize(w, Q.Q8_0), Q.Q8_0)
    cases = [({}, []), ({"dtype": {"lin.*": "f16"}}, ["--dtype", "lin.*=f16"])]
    for kw, flags in cases:
        py, cli = tmp_path / f"py{suffix}", tmp_path / f"cli{suffix}"
        preview = ckpt.convert(path, py, progress=False, overwrite=True, dry_run=True, **kw)
        ckpt.convert(path, py, progress=False, overwrite=True, **kw)
        subprocess.run([BIN_PATH, "convert", str(path), str(cli), "--force", "-q", *flags], check=True,
                       capture_output=True)
        want = "F16" if kw else "F32"
        with ckpt.open(py) as a, ckpt.open(cli) as c:
            got = {n: t.dtype for n, t in a.tensors.items()}
            assert got == {n: t.dtype for n, t in c.tensors.items()} == {"lin.weight": want, "lin.bias": want}
            assert {t["name"]: t["dtype"] for t in preview["tensors"]} == got
            if not kw:
                assert np.array_equal(ckpt.load(py)["lin.weight"], exact)
    for dtype, flag in (("q8_0", "q8_0"), ({"lin.weight": "q8_0"}, "lin.weight=q8_0")):
        out = tmp_path / f"asked{suffix}"
        with pytest.raises(ckpt.Error, match=r"tensor 'lin.weight': \w+ has no Q8_0 (type|dtype)"):
            ckpt.convert(path, out, progress=False, dtype=dtype)
        r = subprocess.run([BIN_PATH, "convert", str(path), str(out), "--dtype", flag], capture_output=True, text=True)
        assert r.returncode == 1 and "tensor 'lin.weight'" in r.stderr and "has no Q8_0" in r.stderr, r.stderr
        assert not out.exists()


def test_as_hf_slices_of_reordered_rows_are_whole_heads(tmp_path):
    """A slice of a tensor whose rows the Hugging Face view puts back
    (llama's Q/K rows, reordered within each head) read the whole view
    into the slice's buffer: ckpt.load(as_hf=True, slices=...) corrupted
    the heap (munmap_chunk(): invalid pointer).  Whole heads are the rows
    transformers holds; a slice cutting a head is refused by tensor."""
    import pathlib
    import subprocess
    import sys
    from ckptlib import BIN_PATH
    sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "interop"))
    from test_llamacpp import tiny_llama, tokenizer
    model, path = tmp_path / "m", tmp_path / "m.gguf"
    tiny_llama(model, dtype=torch.float32)  # 4 heads of 8 rows
    tokenizer("llama3", model)
    subprocess.run([BIN_PATH, "convert", str(model), str(path), "--dtype", "f32", "-q"], check=True)
    q = "model.layers.1.self_attn.q_proj.weight"
    probe = (f"import ckpt, numpy as np, safetensors.numpy as s; want = s.load_file({str(model / 'model.safetensors')!r})"
             f"[{q!r}]; got = ckpt.load({str(path)!r}, as_hf=True, slices={{'blk.1.attn_q.weight': (0, 8, 24)}})"
             f"[{q!r}]; print(got.shape == (16, 32) and np.array_equal(np.asarray(got), want[8:24]))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stdout + r.stderr
    with pytest.raises(ckpt.Error, match=r"blk\.1\.attn_q\.weight'.*whole bands of 8 rows"):
        ckpt.load(path, as_hf=True, slices={"blk.1.attn_q.weight": (0, 3, 9)})


def test_a_conversion_of_the_hf_mapping_alone_holds_no_key_values(tmp_path):
    """The GGUF → Hugging Face mapping makes the key-values into config.json
    and the tokenizer's files; its tensors alone (Plan.gguf_hf(files=False),
    ckpt_gguf_hf_plan_tensors) make them into nothing.  Whether a
    conversion's safetensors got the key-values was keyed on the files the
    plan adds, so that plan wrote all of them — the vocabulary, and
    general.file_type over tensors of another dtype — into the header."""
    import json
    import os
    import pathlib
    import subprocess
    import sys
    from ckpt import _ckpt
    from ckptlib import BIN_PATH
    sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "interop"))
    from test_llamacpp import tiny_llama, tokenizer
    model, path = tmp_path / "m", tmp_path / "m.gguf"
    tiny_llama(model, dtype=torch.float32)
    tokenizer("llama3", model)
    subprocess.run([BIN_PATH, "convert", str(model), str(path), "--dtype", "q8_0", "-q"], check=True)

    def header_metadata(out, **kw):
        plan = _ckpt.Plan(_ckpt.Catalog(os.fspath(path)))
        plan.gguf_hf(None, False)
        plan.convert(os.fspath(out), **kw)
        with open(out, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            return json.loads(f.read(n)).get("__metadata__")

    assert header_metadata(tmp_path / "alone.safetensors") == {"format": "pt"}
    asked = header_metadata(tmp_path / "asked.safetensors", source_metadata=True)  # asked: carried, as before
    assert asked["general.architecture"] == "llama" and "tokenizer.ggml.tokens" in asked
