"""One destination rule for every entry point (issue 27, items 3, 4 and 7).

- The table tests/destinations.tsv gives, for each name, the format written
  and whether it is a directory (or the refusal): ckpt.destination,
  ckpt.convert's dry run and `ckpt convert --dry-run --json` all agree with
  it (the C, Rust and Elixir tests read the same table).
- ckpt.save(sd, "x.safetensors") writes that file (not a directory), with
  max_shard_size its parts beside it, as huggingface_hub's
  save_torch_state_dict writes them with filename_pattern "x{suffix}…".
- .pt/.pth/.bin are torch.save files: byte for byte torch.save's, read back
  equal by torch.load(weights_only=True), tied weights and views on one
  storage, bf16 and float8 as torch names them; transformers loads a
  converted pytorch_model.bin (use_safetensors=False) with the same logits.
- .npy is np.save's file, one array; more tensors are refused by name.
- A file's missing parents are made; a split GGUF's summary and errors name
  the real files.
"""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch as st_torch
import torch

import ckpt
import ckpt.numpy
import ckpt.torch
from statuses import status_of

ROOT = Path(__file__).resolve().parents[2]
CKPT = os.environ.get("CKPT_BIN", str(ROOT / "build" / "ckpt"))


def rows():
    for line in (ROOT / "tests" / "destinations.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            path, asked, fmt, directory, says = line.split("\t")
            yield path, None if asked == "-" else asked, fmt, directory, says


ROWS = list(rows())


def run(*args, **kw):
    return subprocess.run([CKPT, *map(str, args)], capture_output=True, text=True, **kw)


@pytest.fixture
def scratch(tmp_path):
    (tmp_path / "existing.pt").mkdir()
    return tmp_path


@pytest.fixture
def one(tmp_path):
    src = tmp_path / "src" / "one.safetensors"
    src.parent.mkdir()
    st_torch.save_file({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}, src)
    return src


@pytest.mark.parametrize("path,asked,fmt,directory,says", ROWS, ids=[f"{r[0]}|{r[1]}" for r in ROWS])
def test_every_entry_point_follows_the_table(scratch, one, path, asked, fmt, directory, says):
    dst = str(scratch / path) + ("/" if path.endswith("/") else "")
    cli = run("convert", one, dst, *(["--to", asked] if asked else []), "--dry-run", "--json")
    if fmt == "refused":
        with pytest.raises(ckpt.Error, match=r"ckpt writes") as e:
            ckpt.destination(dst, asked)
        assert says in str(e.value) and status_of(e.value) == "CKPT_E_INVALID_ARGUMENT"
        with pytest.raises(ckpt.Error):
            ckpt.convert(one, dst, format=asked, dry_run=True)
        assert cli.returncode != 0 and says in cli.stderr
    else:
        assert ckpt.destination(dst, asked) == ckpt.Destination(fmt, directory == "1")
        preview = ckpt.convert(one, dst, format=asked, dry_run=True, progress=False)
        assert (preview["format"], preview["directory"]) == (fmt, directory == "1")
        assert cli.returncode == 0, cli.stderr
        listing = json.loads(cli.stdout)
        assert (listing["format"], listing["directory"]) == (fmt, directory == "1")
    # Nothing was made by any of them.
    assert sorted(os.listdir(scratch)) == ["existing.pt", "src"]


def test_save_to_a_safetensors_name_writes_that_file(tmp_path):
    sd = {"a": torch.randn(4, 3), "b": torch.arange(5)}
    assert ckpt.save(sd, tmp_path / "x.safetensors") == [str(tmp_path / "x.safetensors")]
    assert (tmp_path / "x.safetensors").is_file()
    back = st_torch.load_file(tmp_path / "x.safetensors")
    assert all(torch.equal(back[k], sd[k]) for k in sd)
    # save and convert agree on a file name and on a directory name.
    assert ckpt.convert(tmp_path / "x.safetensors", tmp_path / "c.safetensors", progress=False) == \
        [str(tmp_path / "c.safetensors")]
    assert ckpt.save(sd, tmp_path / "d") == [str(tmp_path / "d" / "model.safetensors")]
    assert ckpt.convert(tmp_path / "x.safetensors", tmp_path / "e", progress=False) == \
        [str(tmp_path / "e" / "model.safetensors")]


def test_file_name_with_max_shard_size_gives_its_parts_as_the_hub(tmp_path):
    from huggingface_hub import save_torch_state_dict
    sd = {f"layer{i}.weight": torch.randn(16, 16) for i in range(4)}
    written = ckpt.save(sd, tmp_path / "x.safetensors", max_shard_size=2000)
    names = ["x-00001-of-00004.safetensors", "x-00002-of-00004.safetensors", "x-00003-of-00004.safetensors",
             "x-00004-of-00004.safetensors", "x.safetensors.index.json"]
    assert written == [str(tmp_path / n) for n in names]
    hub = tmp_path / "hub"
    hub.mkdir()
    save_torch_state_dict(sd, hub, filename_pattern="x{suffix}.safetensors", max_shard_size=2000)
    assert sorted(os.listdir(hub)) == sorted(names)
    for n in names:
        assert (tmp_path / n).read_bytes() == (hub / n).read_bytes(), n
    assert {k: v.shape for k, v in ckpt.load(tmp_path / "x.safetensors.index.json").items()} == \
        {k: v.shape for k, v in sd.items()}
    # The CLI writes the same parts.
    out = tmp_path / "cli"
    r = run("convert", tmp_path / "x.safetensors.index.json", out / "x.safetensors", "--max-shard-size", "2000")
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == sorted(names)
    assert f"to {out / names[0]} … {names[3]}" in r.stderr


@pytest.mark.parametrize("name", ["model.bin", "weights", "x.pt", "out.h5"])
def test_safetensors_drop_ins_write_any_name_as_safetensors_does(tmp_path, name):
    """save_file's contract is safetensors': this file, in safetensors,
    whatever its name — the destination rule is set aside (exact_file)."""
    import safetensors.numpy
    sd = {"a": torch.randn(3, 2), "b": torch.arange(4)}
    ckpt.torch.save_file(sd, tmp_path / name)
    st_torch.save_file(sd, tmp_path / "ref")
    assert (tmp_path / name).read_bytes() == (tmp_path / "ref").read_bytes()
    arrays = {"a": np.ones(3, np.float32)}
    ckpt.numpy.save_file(arrays, tmp_path / ("np-" + name))
    safetensors.numpy.save_file(arrays, tmp_path / "np-ref")
    assert (tmp_path / ("np-" + name)).read_bytes() == (tmp_path / "np-ref").read_bytes()


# ---- torch.save files -------------------------------------------------------------

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool, torch.complex64, torch.uint16, torch.uint32, torch.uint64,
          torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


def sample(dtype, shape):
    t = torch.arange(int(np.prod(shape)) if shape else 1, dtype=torch.float64).reshape(shape) % 7
    return t.to(dtype) if dtype not in (torch.bool,) else t > 2


def torch_ref(tmp_path, sd, name):
    ref = tmp_path / "ref" / name  # the same file name: torch names the archive's folder after it
    ref.parent.mkdir(exist_ok=True)
    torch.save(sd, ref)
    return ref.read_bytes()


def assert_loads_equal(path, sd):
    back = torch.load(path, weights_only=True)
    assert list(back) == list(sd)
    for k, v in sd.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape, k
        assert torch.equal(back[k].view(torch.uint8) if v.element_size() == 1 and v.dtype != torch.bool else back[k],
                           v.view(torch.uint8) if v.element_size() == 1 and v.dtype != torch.bool else v), k
    return back


@pytest.mark.parametrize("name", ["x.pt", "x.pth", "pytorch_model.bin"])
def test_save_is_torch_save_byte_for_byte(tmp_path, name):
    sd = {f"t.{d}".replace("torch.", ""): sample(d, (2, 3)) for d in DTYPES}
    sd.update({"scalar": torch.tensor(2.5), "empty": torch.zeros(0, 4), "four": sample(torch.float32, (2, 1, 3, 2)),
               "ünï": torch.ones(3), "big": torch.zeros(70000, dtype=torch.int8)})
    assert ckpt.save(sd, tmp_path / name) == [str(tmp_path / name)]
    assert (tmp_path / name).read_bytes() == torch_ref(tmp_path, sd, name)
    assert_loads_equal(tmp_path / name, sd)


@pytest.mark.parametrize("count", [1, 300, 1000, 2001])
def test_many_tensors_byte_for_byte(tmp_path, count):
    """The pickle's memo past 256 entries (LONG_BINPUT) and SETITEMS in
    batches of 1000 (a full last batch followed by an empty one); the
    .data/serialization_id over thousands of records."""
    sd = {f"layers.{i}.w": torch.full((2,), float(i)) for i in range(count)}
    ckpt.save(sd, tmp_path / "m.pt")
    assert (tmp_path / "m.pt").read_bytes() == torch_ref(tmp_path, sd, "m.pt")


def test_tied_weights_and_views_share_one_storage(tmp_path):
    w = torch.randn(8, 4)
    head = torch.randn(3, 5).t()  # not contiguous: a storage of its own
    sd = {"embed.weight": w, "lm_head.weight": w.detach(), "row": w[2], "rows": w[4:6], "head_t": head,
          "h": torch.ones(4, dtype=torch.bfloat16)}
    ckpt.save(sd, tmp_path / "tied.pt")
    back = assert_loads_equal(tmp_path / "tied.pt", sd)
    ptr = back["embed.weight"].untyped_storage().data_ptr()
    for k in ("lm_head.weight", "row", "rows"):
        assert back[k].untyped_storage().data_ptr() == ptr, k
    assert back["row"].storage_offset() == 8 and back["rows"].storage_offset() == 16
    assert back["head_t"].is_contiguous()
    # What torch.save writes for the same dict, but for the non-contiguous
    # view (written contiguous): byte for byte.
    ref = dict(sd, head_t=head.contiguous())
    assert (tmp_path / "tied.pt").read_bytes() == torch_ref(tmp_path, ref, "tied.pt")


def test_convert_from_a_torch_file_with_views_is_the_same_file(tmp_path):
    w = torch.randn(6, 4)
    sd = {"w": w, "row": w[1], "tied": w.detach(), "x": torch.arange(6).reshape(2, 3)}
    src = tmp_path / "src" / "m.pt"
    src.parent.mkdir()
    torch.save(sd, src)
    r = run("convert", src, tmp_path / "m.pt")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m.pt").read_bytes() == src.read_bytes()
    # A view whose base is not saved: its own bytes, as t.clone() is saved.
    part = {"a": w[0:2], "b": w[3:5]}
    torch.save(part, src.parent / "p.pt")
    assert run("convert", src.parent / "p.pt", tmp_path / "p.pt").returncode == 0
    back = assert_loads_equal(tmp_path / "p.pt", part)
    assert back["a"].untyped_storage().nbytes() == 32


def test_safetensors_to_bin_loads_in_transformers_with_the_same_logits(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(tmp_path / "st")  # model.safetensors + config.json
    out = tmp_path / "bin"
    r = run("convert", tmp_path / "st" / "model.safetensors", out / "pytorch_model.bin")
    assert r.returncode == 0, r.stderr
    (out / "config.json").write_bytes((tmp_path / "st" / "config.json").read_bytes())
    loaded = transformers.LlamaForCausalLM.from_pretrained(out, use_safetensors=False).eval()
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    # The same file torch.save writes for the state dict the .safetensors holds.
    assert (out / "pytorch_model.bin").read_bytes() == \
        torch_ref(tmp_path, st_torch.load_file(tmp_path / "st" / "model.safetensors"), "pytorch_model.bin")


def test_dtypes_torch_cannot_hold_are_refused(tmp_path):
    gguf = tmp_path / "q.gguf"
    assert run("convert", _tiny(tmp_path), gguf, "--dtype", "q8_0").returncode == 0
    with pytest.raises(ckpt.Error, match="torch has no Q8_0 dtype") as e:  # a block type asked for
        ckpt.convert(gguf, tmp_path / "q.pt", progress=False, dtype="q8_0")
    assert status_of(e.value) == "CKPT_E_UNSUPPORTED/CKPT_D_UNSUPPORTED_DTYPE"
    assert not (tmp_path / "q.pt").exists()
    # Blocks no rule asked for: f32 for every format but GGUF, in Python as in the CLI (the library's rule).
    ckpt.convert(gguf, tmp_path / "q.pt", progress=False)
    assert run("convert", gguf, tmp_path / "cli.pt").returncode == 0
    assert ckpt.open(tmp_path / "q.pt").tensors["m"].dtype == ckpt.open(tmp_path / "cli.pt").tensors["m"].dtype == "F32"


def _tiny(tmp_path):
    src = tmp_path / "tiny.safetensors"
    st_torch.save_file({"m": torch.randn(4, 64), "v": torch.randn(3)}, src)
    return src


# ---- .npy -------------------------------------------------------------------------------

@pytest.mark.parametrize("array", [np.arange(12, dtype=np.float32).reshape(3, 4), np.float64(2.5),
                                   np.zeros((0, 3), np.int16), np.array([True, False]),
                                   np.arange(10, dtype=np.float16), np.arange(8, dtype=np.uint64),
                                   np.zeros((1,) * 30 + (2,), np.int8)],
                         ids=["f32", "scalar", "empty", "bool", "f16", "u64", "31-axes"])
def test_npy_is_np_save_byte_for_byte(tmp_path, array):
    array = np.asarray(array)
    assert ckpt.save({"a": array}, tmp_path / "a.npy") == [str(tmp_path / "a.npy")]
    np.save(tmp_path / "ref.npy", array)
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "ref.npy").read_bytes()
    assert np.array_equal(np.load(tmp_path / "a.npy"), array)


def test_npy_refuses_more_than_one_tensor_by_name(tmp_path):
    with pytest.raises(ckpt.Error, match=r"holds one array.*2 tensors \(a, b\).*\.npz") as e:
        ckpt.save({"a": np.ones(2), "b": np.ones(3)}, tmp_path / "x.npy")
    assert status_of(e.value) == "CKPT_E_INVALID_ARGUMENT"
    r = run("convert", _tiny(tmp_path), tmp_path / "y.npy")
    assert r.returncode != 0 and "write an .npz" in r.stderr
    assert run("convert", _tiny(tmp_path), tmp_path / "y.npy", "--select", "m").returncode == 0
    assert np.load(tmp_path / "y.npy").shape == (4, 64)
    assert sorted(os.listdir(tmp_path)) == ["tiny.safetensors", "y.npy"]


# ---- parents and the names in messages ------------------------------------------

def test_file_destinations_get_their_parents(tmp_path):
    src = _tiny(tmp_path)
    r = run("convert", src, tmp_path / "nd1" / "x.safetensors")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "nd1" / "x.safetensors").is_file()
    ckpt.save({"a": torch.ones(2)}, tmp_path / "a" / "b" / "o.pt")
    assert torch.equal(torch.load(tmp_path / "a" / "b" / "o.pt", weights_only=True)["a"], torch.ones(2))
    ckpt.convert(src, tmp_path / "c" / "d" / "w.npz", progress=False)
    assert set(np.load(tmp_path / "c" / "d" / "w.npz")) == {"m", "v"}


def test_split_gguf_summary_and_errors_name_the_real_files(tmp_path):
    src = _tiny(tmp_path)
    r = run("convert", src, tmp_path / "split" / "llama.gguf", "--split-max-tensors", "1")
    assert r.returncode == 0, r.stderr
    first, second = tmp_path / "split" / "llama-00001-of-00002.gguf", "llama-00002-of-00002.gguf"
    assert f"in 2 files to {first} … {second}" in r.stderr and "llama.gguf " not in r.stderr
    # A file-size limit while the parts are staged beside another file: the
    # error names the part, never the commit's staging directory.
    (tmp_path / "s2").mkdir()
    (tmp_path / "s2" / "notes.txt").write_text("x")
    big = tmp_path / "big.safetensors"
    st_torch.save_file({"a": torch.zeros(4096), "b": torch.zeros(4096)}, big)
    cmd = f"trap '' XFSZ; ulimit -f 4; exec {CKPT} convert {big} {tmp_path / 's2' / 'llama.gguf'} --split-max-tensors 1"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    assert r.returncode != 0
    assert "llama-00001-of-00002.gguf" in r.stderr and ".commit" not in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path / "s2")) == ["notes.txt"]


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/out.safetensors", "https://user:secret@example.com/m/",
                                 "s3://bucket/model.pt"])
def test_a_url_destination_is_refused_not_made_a_local_directory(tmp_path, monkeypatch, url):
    # ckpt reads URLs; a write to one used to make ./http:/127.0.0.1:9/…
    monkeypatch.chdir(tmp_path)  # where such a directory would appear
    src = tmp_path / "m.safetensors"
    st_torch.save_file({"a": torch.ones(3)}, str(src))
    r = subprocess.run([CKPT, "convert", str(src), url], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "writes only to local paths" in r.stderr and "secret" not in r.stderr, r.stderr
    with pytest.raises(ckpt.Error, match="writes only to local paths") as e:
        ckpt.save({"a": torch.ones(3)}, url)
    assert "secret" not in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors"]  # nothing made beside it
