"""`ckpt diff A B`: names only on one side, dtype and shape changes, and
values that differ (count, max abs difference, max ULP difference), across
formats, reading in bounded chunks."""
import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
from ckptlib import BIN_PATH


def run(*args, **kw):
    return subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True, **kw)


def diff_json(a, b):
    r = run("diff", "--json", a, b)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["identical"] == (r.returncode == 0)
    return doc, {d["name"]: d for d in doc["differences"]}


@pytest.fixture
def weights():
    rng = np.random.default_rng(1)
    w = {f"layers.{i}.weight": rng.standard_normal((64, 48)).astype(np.float32) for i in range(4)}
    w["embed"] = rng.standard_normal((100, 16)).astype(np.float32)
    w["position_ids"] = np.arange(512, dtype=np.int64)[None]
    return w


def save(tmp_path, name, arrays):
    path = tmp_path / name
    safetensors.numpy.save_file(arrays, str(path))
    return path


def test_identical_files(tmp_path, weights):
    a, b = save(tmp_path, "a.safetensors", weights), save(tmp_path, "b.safetensors", dict(reversed(weights.items())))
    r = run("diff", a, b)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout == f"identical: 6 tensors, {(4 * 64 * 48 * 4 + 1600 * 4 + 4096) / 1024:.1f} KiB\n"
    doc, _ = diff_json(a, b)
    assert doc["identical_tensors"] == 6 and doc["differences"] == []
    r = run("diff", "-q", a, b)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""


def test_one_changed_element(tmp_path, weights):
    a = save(tmp_path, "a.safetensors", weights)
    changed = dict(weights)
    w = changed["layers.2.weight"] = weights["layers.2.weight"].copy()
    w[5, 7] += 0.25
    b = save(tmp_path, "b.safetensors", changed)
    r = run("diff", a, b)
    assert r.returncode == 1 and r.stderr == ""
    line = [l for l in r.stdout.splitlines() if "layers.2.weight" in l]
    assert len(line) == 1 and line[0].startswith("~ layers.2.weight")
    ulp = abs(int(weights["layers.2.weight"][5:6, 7].view(np.int32)[0]) - int(w[5:6, 7].view(np.int32)[0]))
    assert "F32 [64, 48]: 1 of 3,072 values differ" in line[0]
    assert f"max abs diff {abs(float(w[5, 7]) - float(weights['layers.2.weight'][5, 7])):.6g} at [5, 7]" in line[0]
    assert f"max {ulp:,} ULP" in line[0]
    assert r.stdout.splitlines()[-1] == "differ: 1 values; 5 identical (" + r.stdout.split("(")[-1].rstrip("\n")
    doc, d = diff_json(a, b)
    e = d["layers.2.weight"]
    assert list(d) == ["layers.2.weight"] and e["kind"] == "values"
    assert e["differ"] == 1 and e["elements"] == 64 * 48 and e["at"] == [5, 7] and e["max_ulp_diff"] == ulp
    assert e["max_abs_diff"] == abs(float(w[5, 7]) - float(weights["layers.2.weight"][5, 7]))
    r = run("diff", "-q", a, b)
    assert r.returncode == 1 and r.stdout == "" and r.stderr == ""


def test_renamed_and_missing_tensors(tmp_path, weights):
    a = save(tmp_path, "a.safetensors", weights)
    other = dict(weights)
    other["layers.0.w"] = other.pop("layers.0.weight")
    del other["embed"]
    b = save(tmp_path, "b.safetensors", other)
    r = run("diff", a, b)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert lines[0] == f"--- A: {a} (6 tensors)" and lines[1] == f"+++ B: {b} (5 tensors)"
    assert any(l.startswith("- layers.0.weight") and l.endswith("F32 [64, 48]  only in A") for l in lines)
    assert any(l.startswith("- embed") and "only in A" in l for l in lines)
    assert any(l.startswith("+ layers.0.w ") and l.endswith("only in B") for l in lines)
    assert lines[-1].startswith("differ: 2 only in A, 1 only in B; 4 identical")
    doc, d = diff_json(a, b)
    assert d["layers.0.weight"]["kind"] == "only_in_a" and d["embed"]["kind"] == "only_in_a"
    assert d["layers.0.w"]["kind"] == "only_in_b" and "a" not in d["layers.0.w"]
    assert doc["counts"] == {"only_in_a": 2, "only_in_b": 1, "shape": 0, "dtype": 0, "values": 0}


def test_dtype_and_shape_changes(tmp_path, weights):
    tensors = {k: torch.from_numpy(v) for k, v in weights.items()}
    a = tmp_path / "a.safetensors"
    safetensors.torch.save_file(tensors, str(a))
    changed = dict(tensors)
    changed["layers.0.weight"] = tensors["layers.0.weight"].to(torch.bfloat16)
    changed["layers.1.weight"] = tensors["layers.1.weight"][:, :32].contiguous()
    changed["position_ids"] = tensors["position_ids"].to(torch.int32)
    b = tmp_path / "b.safetensors"
    safetensors.torch.save_file(changed, str(b))
    r = run("diff", a, b)
    assert r.returncode == 1
    out = r.stdout
    assert "~ layers.1.weight" in out and "shape [64, 48] -> [64, 32]" in out
    assert "dtype I64 -> I32 [1, 512]: equal values" in out
    doc, d = diff_json(a, b)
    e = d["layers.0.weight"]
    assert e["kind"] == "dtype" and e["a"]["dtype"] == "F32" and e["b"]["dtype"] == "BF16"
    exact = (tensors["layers.0.weight"].double() - changed["layers.0.weight"].double()).abs()
    assert e["max_abs_diff"] == exact.max().item()
    assert e["differ"] == int((exact != 0).sum())
    assert divmod(int(exact.argmax()), 48) == tuple(e["at"])
    assert d["position_ids"]["differ"] == 0
    assert d["layers.1.weight"]["kind"] == "shape" and "differ" not in d["layers.1.weight"]
    assert doc["counts"]["dtype"] == 2 and doc["counts"]["shape"] == 1 and doc["identical_tensors"] == 3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
                                   torch.float32, torch.float64])
def test_ulp_difference_of_one_bit(tmp_path, dtype):
    x = (torch.arange(1, 65, dtype=torch.float32) / 7).to(dtype).reshape(8, 8)
    y = x.clone()
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    y.view(bits)[3, 4] += 1  # the next representable value
    y.view(bits)[6, 1] += 3
    safetensors.torch.save_file({"x": x}, str(tmp_path / "a.safetensors"))
    safetensors.torch.save_file({"x": y}, str(tmp_path / "b.safetensors"))
    _, d = diff_json(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    e = d["x"]
    assert e["differ"] == 2 and e["max_ulp_diff"] == 3
    diffs = (x.double() - y.double()).abs()
    assert e["max_abs_diff"] == diffs.max().item() and e["at"] == list(divmod(int(diffs.argmax()), 8))


def test_nan_and_signed_zero_and_integers(tmp_path):
    a = {"f": np.array([1.0, np.nan, 0.0, 2.0], np.float32), "i": np.array([5, -7, 3], np.int16),
         "u": np.array([0, 255, 9], np.uint8), "b": np.array([True, False, True])}
    b = {"f": np.array([np.nan, np.nan, -0.0, 2.0], np.float32), "i": np.array([5, 9, 3], np.int16),
         "u": np.array([255, 255, 9], np.uint8), "b": np.array([True, True, True])}
    _, d = diff_json(save(tmp_path, "a.safetensors", a), save(tmp_path, "b.safetensors", b))
    f = d["f"]
    assert f["differ"] == 2 and f["nan_mismatch"] == 1 and f["max_abs_diff"] == 0.0 and f["max_ulp_diff"] == 0
    assert d["i"]["differ"] == 1 and d["i"]["max_abs_diff"] == 16 and d["i"]["at"] == [1]
    assert d["u"]["max_abs_diff"] == 255 and d["u"]["at"] == [0]
    assert d["b"]["compared"] == "bytes" and d["b"]["differ"] == 1 and d["b"]["at_byte"] == 1


def test_safetensors_against_torch_bin_of_the_same_weights(tmp_path, weights):
    st = save(tmp_path, "model.safetensors", weights)
    tensors = {k: torch.from_numpy(v.copy()) for k, v in weights.items()}
    torch.save(tensors, tmp_path / "pytorch_model.bin")
    r = run("diff", st, tmp_path / "pytorch_model.bin")
    assert r.returncode == 0 and r.stdout.startswith("identical: 6 tensors"), r.stdout + r.stderr
    # A transposed view, the legacy format and shards read the same.
    views = dict(tensors)
    views["embed"] = tensors["embed"].t().contiguous().t()  # strided in the file
    assert not views["embed"].is_contiguous()
    torch.save(views, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    assert run("diff", st, tmp_path / "legacy.pt").returncode == 0
    from huggingface_hub import save_torch_state_dict
    (tmp_path / "sharded").mkdir()
    save_torch_state_dict(tensors, str(tmp_path / "sharded"), max_shard_size="40KB", safe_serialization=False)
    r = run("diff", tmp_path / "sharded", st)
    assert r.returncode == 0, r.stdout + r.stderr
    tensors["embed"][99, 15] = 0.5
    torch.save(tensors, tmp_path / "changed.bin")
    r = run("diff", st, tmp_path / "changed.bin")
    assert r.returncode == 1 and "~ embed" in r.stdout and "at [99, 15]" in r.stdout


def test_unreadable_inputs_and_usage(tmp_path, weights):
    a = save(tmp_path, "a.safetensors", weights)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(a.read_bytes()[:-9])
    r = run("diff", a, bad)  # trouble is 2, as cmp's and diff's: 1 says "they differ"
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "bad.safetensors" in r.stderr and "[CKPT_E_TRUNCATED]" in r.stderr
    r = run("diff", tmp_path / "nope", a)
    assert r.returncode == 2 and "nope" in r.stderr and "[CKPT_E_NOT_FOUND]" in r.stderr
    for args, needle in ((["diff"], "missing A and B"), (["diff", a], "missing B"), (["diff", a, a, a], "third"),
                         (["diff", a, a, "--bogus"], "unknown option")):
        r = run(*args)
        assert r.returncode == 2 and needle in r.stderr, args
        assert "Try 'ckpt diff --help'." in r.stderr


def test_reads_in_bounded_chunks(tmp_path):
    # Two 128 MiB tensors that differ everywhere: every chunk is read and
    # decoded, yet memory stays at the chunk buffers.
    n = 32 << 20
    x = (np.arange(n) % 1000).astype(np.float32)
    save(tmp_path, "a.safetensors", {"x": x})
    x += 1
    save(tmp_path, "b.safetensors", {"x": x})
    del x
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stdout)")
    out = subprocess.run([sys.executable, "-c", probe, BIN_PATH, "diff", tmp_path / "a.safetensors",
                          tmp_path / "b.safetensors"], capture_output=True, text=True, check=True).stdout
    rc, peak_kib = map(int, out.split("\n")[0].split())
    assert rc == 1 and f"{n:,} of {n:,} values differ, max abs diff 1 at [0]" in out
    assert peak_kib < 64 * 1024, f"peak RSS {peak_kib} KiB for two 128 MiB tensors"


def test_complex_scalars_empty_and_integer_widening(tmp_path):
    a = {"c": np.array([[1 + 2j, 3 + 4j]], np.complex64), "b": np.array([True, False]),
         "e": np.zeros((0, 3), np.float32), "s": np.array(3.0, np.float32)}
    b = {"c": np.array([[1 + 2j, 3 + 4.5j]], np.complex64), "b": np.array([1, 0], np.uint8),
         "e": np.zeros((0, 3), np.float32), "s": np.array(2.0, np.float32)}
    pa, pb = save(tmp_path, "a.safetensors", a), save(tmp_path, "b.safetensors", b)
    r = run("diff", pa, pb)
    assert r.returncode == 1
    assert "~ c  C64 [1, 2]: 1 of 4 components differ, max abs diff 0.5 at [0, 1].imag, max 1,048,576 ULP" in r.stdout
    assert "~ s  F32 []: 1 of 1 values differ, max abs diff 1 at []" in r.stdout
    assert "~ b  dtype BOOL -> U8 [2]: equal values" in r.stdout
    assert r.stdout.splitlines()[-1] == "differ: 1 dtype, 2 values; 1 identical (0 B)"
    _, d = diff_json(pa, pb)
    assert d["c"]["at"] == [0, 1] and d["c"]["component"] == "imag" and "e" not in d


def test_json_floats_are_shortest(tmp_path):
    # The shortest digits that read back as the same double, as Python's repr
    # and every float ckpt writes: 0.1, not %.17g's 0.10000000000000001.
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    safetensors.torch.save_file({"x": torch.tensor([0.1], dtype=torch.float64)}, str(a))
    safetensors.torch.save_file({"x": torch.tensor([0.2], dtype=torch.float64)}, str(b))
    raw = run("diff", "--json", a, b).stdout
    assert '"max_abs_diff": 0.1, "rms_diff": 0.1,' in raw, raw


# ---- a Hugging Face model against its llama.cpp GGUF (--as-hf) ------------------


@pytest.fixture(scope="module")
def llama_f32(tmp_path_factory):
    """A random Llama 3 of 2 layers in F32 (tests/interop/test_llamacpp.py's)
    and its F32 GGUF, as ckpt convert writes it (llama.cpp's names, Q and K
    rows permuted as the script permutes them)."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "interop"))
    from test_llamacpp import tiny_llama, tokenizer
    root = tmp_path_factory.mktemp("diff-as-hf")
    model = root / "tiny-llama3"
    tiny_llama(model, dtype=torch.float32)
    tokenizer("llama3", model)
    gguf = root / "llama3-f32.gguf"
    r = run("convert", model, gguf, "--dtype", "f32", "-q")
    assert r.returncode == 0, r.stderr
    return model, gguf


def test_as_hf_compares_a_model_with_its_gguf_value_by_value(llama_f32, tmp_path):
    """ckpt diff HF_DIR model.gguf shared no name: 21 tensors only in A, 21
    only in B, and no hint.  Now a hint names --as-hf, and --as-hf views the
    GGUF as its Hugging Face model (names, Q/K rows put back): no
    difference, and a changed tensor is reported under its Hugging Face
    name."""
    model, gguf = llama_f32
    r = run("diff", model, gguf)
    assert r.returncode == 1 and "differ: 21 only in A, 21 only in B; 0 identical" in r.stdout, r.stdout
    assert ("ckpt: hint: no tensor name matches; B is a llama.cpp GGUF (general.architecture 'llama') with "
            "llama.cpp's names: --as-hf compares it as the Hugging Face model it was converted from") in r.stderr
    for a, b in ((model, gguf), (gguf, model), (gguf, gguf)):
        r = run("diff", a, b, "--as-hf")
        assert r.returncode == 0 and r.stdout.startswith("identical: 21 tensors"), r.stdout + r.stderr
        assert "hint" not in r.stderr

    changed = tmp_path / "changed"
    shutil.copytree(model, changed)
    sd = safetensors.torch.load_file(changed / "model.safetensors")
    q = "model.layers.1.self_attn.q_proj.weight"
    sd[q].view(-1)[37] += 0.5  # row 1, column 5
    safetensors.torch.save_file(sd, changed / "model.safetensors", metadata={"format": "pt"})
    r = run("diff", "--json", changed, gguf, "--as-hf")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tensors_a"] == doc["tensors_b"] == 21
    (d,) = doc["differences"]
    assert (d["name"], d["kind"], d["differ"], d["at"]) == (q, "values", 1, [1, 5]), d
    assert d["max_abs_diff"] == pytest.approx(0.5, abs=1e-6)


def test_as_hf_needs_a_llamacpp_gguf(weights, tmp_path):
    a = save(tmp_path, "a.safetensors", weights)
    r = run("diff", a, a, "--as-hf")
    assert r.returncode == 2
    assert "--as-hf views a llama.cpp GGUF (general.architecture set) as its Hugging Face model, and neither A nor B " \
           "is one" in r.stderr


def test_as_hf_reads_in_bounded_chunks(tmp_path):
    """--as-hf loaded each viewed tensor whole (a 256 MiB embedding, twice
    with a GGUF on each side): it reads a band of rows a chunk long, so
    memory stays at the chunk buffers; the Q/K rows the view puts back
    come in whole heads (128 rows here), bands that chunks cut across."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "interop"))
    from test_llamacpp import tiny_llama2, tokenizer
    model, gguf = tmp_path / "m", tmp_path / "m.gguf"
    # embeddings and lm_head 32000 x 2048 f32 (250 MiB each); q_proj 16 MiB, 16 heads of 128 rows
    tiny_llama2(model, dtype=torch.float32, hidden_size=2048, num_attention_heads=16, num_key_value_heads=16,
                head_dim=128, num_hidden_layers=1, intermediate_size=64)
    tokenizer("llama2", model)
    assert run("convert", model, gguf, "--dtype", "f32", "-q").returncode == 0
    sd = safetensors.torch.load_file(model / "model.safetensors")
    q = "model.layers.0.self_attn.q_proj.weight"
    sd[q][1500, 7] += 0.5  # past the first 8 MiB chunk, inside head 11's band
    safetensors.torch.save_file(sd, model / "model.safetensors", metadata={"format": "pt"})
    del sd
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stdout)")
    for a, b, rc in ((gguf, gguf, 0), (model, gguf, 1)):
        out = subprocess.run([sys.executable, "-c", probe, BIN_PATH, "diff", "--json", a, b, "--as-hf"],
                             capture_output=True, text=True, check=True).stdout
        got, peak_kib = map(int, out.split("\n")[0].split())
        assert got == rc, out
        assert peak_kib < 128 * 1024, f"peak RSS {peak_kib} KiB for 256 MiB tensors"
        doc = json.loads(out.split("\n", 1)[1])
        assert [(d["name"], d["differ"], d["at"]) for d in doc["differences"]] == ([(q, 1, [1500, 7])] if rc else [])


def test_top_level_help_gives_diffs_exit_status():
    """ckpt --help said diff exits 1 on bad input or an I/O error, where it
    exits 2 (1 is "different", as cmp's)."""
    r = run("--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "ckpt diff exits as cmp and diff do: 0 identical, 1 different, 2 trouble" in text, text
    assert "(diff: the checkpoints differ)" not in text
    a = pathlib.Path(__file__)  # not a checkpoint: trouble, not a difference
    assert run("diff", a, a).returncode == 2
