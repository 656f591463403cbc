"""What a new user hits (issue "What a new user hits"): saves equal to the
hub's with tied weights, output paths as people type them, the model
directory's other files, error text, and options that are not honoured."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import ckpt
import ckpt.torch
from ckptlib import BIN_PATH
from statuses import status_of


def gpt2_like():
    """A tiny GPT-2-shaped state dict whose output head is tied to the token
    embedding, as transformers ties them."""
    torch.manual_seed(0)
    wte = torch.nn.Parameter(torch.randn(64, 16))
    sd = {"transformer.wte.weight": wte, "transformer.wpe.weight": torch.randn(32, 16)}
    for i in range(3):
        sd[f"transformer.h.{i}.attn.c_attn.weight"] = torch.randn(16, 48)
        sd[f"transformer.h.{i}.mlp.c_fc.weight"] = torch.randn(16, 64)
    sd["lm_head.weight"] = wte
    return sd


def llama_tied():
    """A tiny transformers LlamaForCausalLM whose lm_head is tied to the
    embedding (tie_word_embeddings=True), as its state_dict gives it."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(cfg).state_dict()


def aliases():
    """Several names for one tensor, before and after the one kept, and a
    second storage shared by two names and a view inside it."""
    torch.manual_seed(0)
    w, u = torch.randn(16, 16), torch.randn(40)
    return {"z.w": w, "b.alias": w, "x": torch.randn(30, 8), "a.alias": w, "u2": u, "m": w, "u1": u,
            "v0": u[:10], "y": torch.randn(20, 20)}


STATE_DICTS = {"gpt2": gpt2_like, "llama-tied": llama_tied, "aliases": aliases}


def tree(d):
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d))}


def header(data):
    n = int.from_bytes(data[:8], "little")
    return n, json.loads(data[8:8 + n]), data[8 + n:]


def assert_same_checkpoint(ours, hub):
    """Byte for byte, but for the order of a lone file's `__metadata__`:
    safetensors writes several entries in a per-process hash order, so that
    two runs of the hub differ there (its size, the tensors' entries and
    their bytes do not)."""
    assert ours.keys() == hub.keys()
    for name in hub:
        if ours[name] == hub[name]:
            continue
        assert name.endswith(".safetensors") and len(hub) == 1, name
        (n, a, data_a), (m, b, data_b) = header(ours[name]), header(hub[name])
        assert n == m and data_a == data_b and a == b
        assert list(a) == list(b)  # tensors in the same order


@pytest.mark.parametrize("make", STATE_DICTS, ids=list(STATE_DICTS))
@pytest.mark.parametrize("limit", ["5GB", "2KB", "8KB"])
@pytest.mark.parametrize("metadata", [None, {"origin": "test"}])
def test_save_writes_what_the_hub_writes_with_tied_weights(tmp_path, limit, make, metadata):
    """Files and index as save_torch_state_dict writes them: each `removed →
    kept` in the lone file's metadata, or in the index's (after total_size
    and the caller's entries) when sharded, the shards with {"format": "pt"}."""
    from huggingface_hub import save_torch_state_dict
    sd = STATE_DICTS[make]()
    (tmp_path / "hub").mkdir()
    save_torch_state_dict(dict(sd), str(tmp_path / "hub"), max_shard_size=limit, metadata=dict(metadata or {}))
    ckpt.save(sd, tmp_path / "ours", max_shard_size=limit, metadata=metadata)
    assert_same_checkpoint(tree(tmp_path / "ours"), tree(tmp_path / "hub"))
    with ckpt.open(tmp_path / "ours") as c:
        hub_index = tmp_path / "hub" / "model.safetensors.index.json"
        if hub_index.exists():
            removed = {k: v for k, v in json.loads(hub_index.read_text())["metadata"].items() if k in sd}
        else:
            from safetensors import safe_open
            with safe_open(tmp_path / "hub" / "model.safetensors", "pt") as f:
                removed = {k: v for k, v in f.metadata().items() if k in sd}
        assert removed and len(c) == len(sd) - len(removed)
        assert {k: c.metadata[k] for k in removed} == removed


@pytest.mark.parametrize("make", STATE_DICTS, ids=list(STATE_DICTS))
@pytest.mark.parametrize("limit", ["5GB", "2KB"])
def test_convert_of_a_tied_torch_file_writes_what_the_hub_writes(tmp_path, make, limit):
    """A torch.save of a tied state dict, converted by the CLI and by
    ckpt.convert, gives save_torch_state_dict's files and index."""
    from huggingface_hub import save_torch_state_dict
    sd = STATE_DICTS[make]()
    (tmp_path / "hub").mkdir()
    save_torch_state_dict(dict(sd), str(tmp_path / "hub"), max_shard_size=limit)
    torch.save(sd, tmp_path / "sd.bin")
    subprocess.run([BIN_PATH, "convert", str(tmp_path / "sd.bin"), str(tmp_path / "cli"), "--max-shard-size", limit],
                   check=True, capture_output=True)
    ckpt.convert(tmp_path / "sd.bin", str(tmp_path / "py") + "/", max_shard_size=limit, progress=False)
    hub = tree(tmp_path / "hub")
    assert_same_checkpoint(tree(tmp_path / "cli"), hub)
    assert_same_checkpoint(tree(tmp_path / "py"), hub)


@pytest.mark.parametrize("make", STATE_DICTS, ids=list(STATE_DICTS))
def test_resharding_a_tied_file_writes_the_hubs_index(tmp_path, make):
    """A lone file of save_torch_state_dict holds `removed → kept` in its
    metadata (there is no index); converted into shards, they go into the
    index, ordered as the hub orders them, and the shards carry
    {"format": "pt"} alone: what save_torch_state_dict writes for the same
    state dict in the file's order.  And back into one file."""
    from huggingface_hub import save_torch_state_dict
    from safetensors import safe_open
    sd = STATE_DICTS[make]()
    for d in ("lone", "hub"):
        (tmp_path / d).mkdir()
    save_torch_state_dict(dict(sd), str(tmp_path / "lone"))
    with safe_open(tmp_path / "lone" / "model.safetensors", "pt") as f:
        removed, order = f.metadata(), list(f.keys())
    in_file_order = {}  # the file's tensors in its order, each followed by the names removed for it
    for name in order:
        in_file_order[name] = sd[name]
        in_file_order.update({r: sd[r] for r in sorted(removed) if removed[r] == name})
    save_torch_state_dict(in_file_order, str(tmp_path / "hub"), max_shard_size="2KB")
    subprocess.run([BIN_PATH, "convert", str(tmp_path / "lone" / "model.safetensors"), str(tmp_path / "cli"),
                    "--max-shard-size", "2KB"], check=True, capture_output=True)
    ckpt.convert(tmp_path / "lone" / "model.safetensors", str(tmp_path / "py") + "/", max_shard_size="2KB",
                 progress=False)
    hub = tree(tmp_path / "hub")
    assert len(hub) > 2
    assert tree(tmp_path / "cli") == hub
    assert tree(tmp_path / "py") == hub
    subprocess.run([BIN_PATH, "convert", str(tmp_path / "cli"), str(tmp_path / "back.safetensors")], check=True,
                   capture_output=True)
    assert_same_checkpoint({"model.safetensors": (tmp_path / "back.safetensors").read_bytes()},
                           tree(tmp_path / "lone"))


def test_save_refuses_views_the_hub_refuses(tmp_path):
    from huggingface_hub import save_torch_state_dict
    base = torch.arange(100.0)
    sd = {"a": base[:60], "b": base[40:]}  # overlapping, neither covers the storage
    with pytest.raises(RuntimeError, match="None is covering the entire storage"):
        save_torch_state_dict(sd, str(tmp_path / "hub"))
    with pytest.raises(ckpt.Error) as e:
        ckpt.save(sd, tmp_path / "ours")
    assert "none covers the whole storage" in str(e.value) and e.value.tensor in ("a", "b")
    assert not (tmp_path / "ours").exists() or not os.listdir(tmp_path / "ours")


@pytest.mark.parametrize("spelling", ["out", "out/", "out//", "./out/", "empty/", "link/"])
def test_output_paths_as_people_type_them(tmp_path, spelling, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    sd = {f"w{i}": torch.full((40, 40), float(i)) for i in range(4)}
    src = tmp_path / "src.safetensors"
    ckpt.torch.save_file(sd, src)
    where = {"empty/": tmp_path / "empty", "link/": tmp_path / "target"}.get(spelling, tmp_path / "out")
    # ckpt.save, ckpt.convert and the CLI, each into a fresh place.
    for how in ("save", "convert", "cli"):
        if how == "save":
            ckpt.save(sd, spelling, max_shard_size="10KB")
        elif how == "convert":
            ckpt.convert(src, spelling, max_shard_size="10KB", overwrite=True, progress=False)
        else:
            r = subprocess.run([BIN_PATH, "convert", str(src), spelling, "--max-shard-size", "10KB", "--force"],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        names = sorted(os.listdir(where))
        assert "model.safetensors.index.json" in names and not [n for n in names if n.startswith(".")], names
        got = ckpt.load(where)
        assert all(torch.equal(got[k], v) for k, v in sd.items())
        assert (tmp_path / "link").is_symlink()
        for n in names:
            os.unlink(where / n)
    assert not [n for n in os.listdir(tmp_path) if ".ckpt-tmp-" in n]


def test_convert_of_a_model_directory_brings_its_other_files(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    ckpt.save(gpt2_like(), model)
    files = {"config.json": b'{"model_type": "gpt2"}', "tokenizer.json": b"{}", "generation_config.json": b"{}",
             "merges.txt": b"a b\n"}
    for n, b in files.items():
        (model / n).write_bytes(b)
    ckpt.convert(model, tmp_path / "out", max_shard_size="8KB", progress=False)
    out = tree(tmp_path / "out")
    assert all(out[n] == b for n, b in files.items())
    ckpt.convert(model, tmp_path / "bare", max_shard_size="8KB", extra_files=False, progress=False)
    assert not set(files) & set(os.listdir(tmp_path / "bare"))
    r = subprocess.run([BIN_PATH, "convert", str(model), str(tmp_path / "cli"), "--max-shard-size", "8KB"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert all(tree(tmp_path / "cli")[n] == b for n, b in files.items())


def load_pretrained(path):
    """from_pretrained as a user calls it (the dtype the config says), and
    the warnings it gave (Python's and transformers' logger's)."""
    import logging
    import warnings
    import transformers
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = transformers.AutoModelForCausalLM.from_pretrained(path)
    finally:
        logger.removeHandler(handler)
    return model, [str(w.message) for w in caught] + [r.getMessage() for r in records]


def test_cast_conversion_updates_the_config_dtype(tmp_path):
    """`ckpt convert model_dir out --dtype bf16` and ckpt.convert(dtype=...)
    change only the dtype of the copied config.json: from_pretrained then
    loads bfloat16 weights as bfloat16, without a warning.  A conversion
    that leaves float tensors of several dtypes keeps the config as it
    was; an older config's "torch_dtype" is changed as "dtype" is."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(tmp_path / "model")
    config = (tmp_path / "model" / "config.json").read_text()
    assert '"dtype": "float32"' in config
    subprocess.run([BIN_PATH, "convert", str(tmp_path / "model"), str(tmp_path / "cli"), "--dtype", "bf16"],
                   check=True, capture_output=True)
    ckpt.convert(tmp_path / "model", str(tmp_path / "py") + "/", dtype="bf16", progress=False)
    want = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    for out in ("cli", "py"):
        assert (tmp_path / out / "config.json").read_text() == config.replace('"dtype": "float32"',
                                                                              '"dtype": "bfloat16"')
        loaded, warned = load_pretrained(tmp_path / out)
        assert not warned and loaded.dtype == torch.bfloat16
        assert all(torch.equal(v, want[k]) for k, v in loaded.state_dict().items())
        assert (tmp_path / out / "generation_config.json").read_bytes() == \
            (tmp_path / "model" / "generation_config.json").read_bytes()
    # several float dtypes left: the config stays as it was
    ckpt.convert(tmp_path / "model", str(tmp_path / "mixed") + "/", dtype={"*": "bf16", "*norm*": "f32"},
                 progress=False)
    with ckpt.open(tmp_path / "mixed") as c:
        assert {t.dtype for t in c.tensors.values()} == {"F32", "BF16"}
    assert (tmp_path / "mixed" / "config.json").read_text() == config
    # transformers 4's key
    (tmp_path / "model" / "config.json").write_text(config.replace('"dtype"', '"torch_dtype"'))
    subprocess.run([BIN_PATH, "convert", str(tmp_path / "model"), str(tmp_path / "old"), "--dtype", "f16"],
                   check=True, capture_output=True)
    assert (tmp_path / "old" / "config.json").read_text() == config.replace('"dtype": "float32"',
                                                                            '"torch_dtype": "float16"')


def test_every_error_carries_its_sentence(tmp_path):
    (tmp_path / "x.safetensors").write_bytes(b"\x01\x00\x00\x00\x00\x00\x00\x00{")
    for call, cls in ((lambda: ckpt.open(tmp_path / "missing.safetensors"), ckpt.NotFoundError),
                      (lambda: ckpt.open(tmp_path / "x.safetensors"), ckpt.SafetensorError)):
        with pytest.raises(cls) as e:
            call()
        text = str(e.value)
        assert status_of(e.value) in text and "None" not in text and str(tmp_path) in text, text


def test_a_device_the_framework_does_not_honour_is_refused(tmp_path):
    ckpt.torch.save_file({"w": torch.ones(3)}, tmp_path / "w.safetensors")
    for fw in ("numpy", "flax"):
        with pytest.raises(ValueError, match="not honoured"):
            ckpt.load(tmp_path / "w.safetensors", framework=fw, device="cuda:0")
    assert np.array_equal(ckpt.load(tmp_path / "w.safetensors", framework="numpy")["w"], np.ones(3, np.float32))


def test_rows_are_named(tmp_path):
    ckpt.torch.save_file({"w": torch.ones(2, 3)}, tmp_path / "w.safetensors")
    from ckpt import _ckpt
    c = _ckpt.Catalog(str(tmp_path / "w.safetensors"))
    row = c.tensors()[0]
    assert (row.name, row.dtype, row.shape, row.nbytes) == ("w", "F32", (2, 3), 24) and row[0] == "w"
    assert c.names() == ["w"] and c.find("w") == 0 and c.find("nope") is None
    p = _ckpt.Plan(c)
    assert p.items()[0].name == "w" and p.items()[0].transform is False


def test_load_mmap_gives_writable_private_views(tmp_path):
    w = torch.arange(12.0).reshape(3, 4)
    ckpt.torch.save_file({"w": w, "v": torch.ones(5)}, tmp_path / "w.safetensors")
    before = (tmp_path / "w.safetensors").read_bytes()
    got = ckpt.load(tmp_path / "w.safetensors", mmap=True, tp_rank=1, tp_size=3, tp_select="w")
    assert torch.equal(got["w"], w[1:2])   # a row range: still a view of the file
    got["w"] += 1                          # writes never reach the file
    assert (tmp_path / "w.safetensors").read_bytes() == before
    assert json.loads(json.dumps({"ok": True}))


@pytest.mark.parametrize("kw", [{"tp_select": "*porj.weight"}, {"tp_select": ["*proj.weight", "*nrom"]},
                                {"tp_dim": 2}, {"tp_dim": -3}, {"tp_select": "*norm", "tp_dim": 1}])
def test_a_tensor_parallel_split_that_splits_nothing_is_an_error(tmp_path, kw):
    """A mistyped tp_select or tp_dim gave every rank the whole tensors,
    silently: a tp_select pattern that matches nothing is the library's
    NoMatchError naming it, as any rule's; an axis that none of the chosen
    tensors has, a ValueError naming tp_dim.  ignore_unmatched=True allows
    both, as it allows every rule that matches nothing."""
    sd = {"up_proj.weight": torch.arange(12.0).reshape(4, 3), "norm": torch.ones(3)}
    ckpt.torch.save_file(sd, tmp_path / "w.safetensors")
    with pytest.raises((ckpt.NoMatchError, ValueError)) as e:
        ckpt.load(tmp_path / "w.safetensors", tp_rank=1, tp_size=2, **kw)
    if "tp_select" in kw and "tp_dim" not in kw:
        assert type(e.value) is ckpt.NoMatchError and status_of(e.value) == "CKPT_E_NO_MATCH"
        assert "'*porj.weight' matched no tensor" in str(e.value) or "'*nrom' matched no tensor" in str(e.value)
        assert str(tmp_path / "w.safetensors") in str(e.value)
    else:
        assert f"tp_dim={kw['tp_dim']}: none of the " in str(e.value)
    got = ckpt.load(tmp_path / "w.safetensors", tp_rank=1, tp_size=2, ignore_unmatched=True, **kw)
    assert torch.equal(got["norm"], sd["norm"])
    # What does match is still split (the rows of rank 1, or its columns' one).
    assert torch.equal(ckpt.load(tmp_path / "w.safetensors", tp_rank=1, tp_size=2)["up_proj.weight"], sd["up_proj.weight"][2:])


def test_a_mistyped_convert_format_is_refused_naming_hf_too(tmp_path):
    """ckpt.convert's format takes "hf" besides the formats' names (a GGUF
    into a Hugging Face model directory); the refusal of a typo listed every
    value but that one, as the command line's --to help did."""
    ckpt.torch.save_file({"w": torch.ones(2)}, tmp_path / "w.safetensors")
    with pytest.raises(ValueError) as e:
        ckpt.convert(tmp_path / "w.safetensors", tmp_path / "out", format="gguff")
    assert str(e.value) == "format must be safetensors, gguf, torch, npy, npz, flax-msgpack, dcp or hf, not 'gguff'"
    with pytest.raises(ValueError) as e:  # destination takes no "hf": its list stays the formats'
        ckpt.destination(tmp_path / "out", format="hf")
    assert str(e.value).endswith("flax-msgpack or dcp, not 'hf'")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("size", [0, -1, True])
def test_a_shard_size_number_is_checked_as_its_text_is(tmp_path, size):
    """max_shard_size=0 meant the default 5GB and -1 no limit, silently,
    where "0" and "-1" (and the command line's --max-shard-size 0) are
    refused: a number goes through the same parser now; True is no size."""
    sd = {"a": torch.ones(4, 4), "b": torch.ones(4)}
    ckpt.torch.save_file(sd, tmp_path / "w.safetensors")
    for write in (lambda out: ckpt.save(sd, out, max_shard_size=size),
                  lambda out: ckpt.convert(tmp_path / "w.safetensors", out, max_shard_size=size)):
        with pytest.raises(ckpt.Error) as e:
            write(tmp_path / "out")
        assert status_of(e.value) == "CKPT_E_BAD_SIZE" and f"size '{size}'" in str(e.value)
        assert not (tmp_path / "out").exists()
    assert len(ckpt.save(sd, tmp_path / "small", max_shard_size=70)) == 3  # a real number still shards: 2 files, the index


def llama_gguf(path, shape):
    """A GGUF as gguf-py writes one for llama (general.architecture) with one
    tensor, token_embd.weight, of ones."""
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("token_embd.weight", np.ones(shape, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_convert_format_hf_refuses_a_file_name(tmp_path):
    """format="hf" writes a directory: a dst named as a file is refused, as
    format="dcp" refuses it, where it became a directory "x.safetensors/"."""
    src = llama_gguf(tmp_path / "m.gguf", (4, 32))
    with pytest.raises(ValueError) as e:
        ckpt.convert(src, tmp_path / "out.safetensors", format="hf")
    assert str(e.value) == (f"format='hf' writes a Hugging Face model directory, and '{tmp_path / 'out.safetensors'}' "
                            f"names a safetensors file: give a directory (a name ending in '/')")
    assert not (tmp_path / "out.safetensors").exists()
    (tmp_path / "made.safetensors").mkdir()
    written = ckpt.convert(src, tmp_path / "made.safetensors", format="hf", raw=True, progress=False)
    assert str(tmp_path / "made.safetensors" / "model.safetensors") in written


def test_threads_minus_one_is_refused_not_four_billion(tmp_path):
    """threads=-1 (joblib's "all cores") went to the engine as 4294967295,
    silently: a thread per task, whatever their number.  0 is one per CPU;
    a negative count is a ValueError naming it, before anything is read."""
    sd = {f"w{i}": torch.full((4,), float(i)) for i in range(6)}
    ckpt.torch.save_file(sd, tmp_path / "w.safetensors")
    model = torch.nn.ParameterDict({k: torch.nn.Parameter(torch.zeros(4)) for k in sd})
    for call in (lambda: ckpt.load(tmp_path / "w.safetensors", threads=-1, copy=True),
                 lambda: ckpt.load_into(model, tmp_path / "w.safetensors", threads=-1)):
        with pytest.raises(ValueError, match=r"threads=-1: give 0 \(one per CPU\) or a number of threads"):
            call()
    assert all(torch.equal(p, torch.zeros(4)) for p in model.values())
    from ckpt import _ckpt
    plan = _ckpt.Plan(_ckpt.Catalog(str(tmp_path / "w.safetensors")))
    plan.load(threads=2)
    assert plan.stats()["threads"] <= 2
    assert torch.equal(ckpt.load(tmp_path / "w.safetensors", threads=0)["w5"], sd["w5"])


def test_load_into_from_a_gguf_under_its_own_names_says_as_hf(tmp_path):
    """load_into(model, "x.gguf") of a llama.cpp GGUF without as_hf matches
    no name (blk.0.attn_q.weight against model.layers.0...): the strict
    error listed every name missing and unexpected, and nothing else; it
    now says what reads it under Hugging Face's names."""
    src = llama_gguf(tmp_path / "m.gguf", (4, 8))
    model = torch.nn.Module()
    model.embed_tokens = torch.nn.Embedding(4, 8)
    with pytest.raises(RuntimeError) as e:
        ckpt.load_into(model, src)
    assert str(e.value).endswith(f"\n\t{src} is a llama.cpp GGUF (general.architecture 'llama'): its tensors have "
                                 "llama.cpp's names; as_hf=True reads them under Hugging Face's")
    ckpt.torch.save_file({"token_embd.weight": torch.ones(4, 8)}, tmp_path / "m.safetensors")
    with pytest.raises(RuntimeError) as e:  # another format's names: no such hint
        ckpt.load_into(model, tmp_path / "m.safetensors")
    assert "as_hf" not in str(e.value)


def test_convert_into_a_directory_writes_shards_as_the_cli_does(tmp_path):
    """`ckpt.convert(src, "out/")` writes shards into out/, as `ckpt convert
    src out/` does; a second call refuses to replace them without
    overwrite=True, naming the option."""
    src = tmp_path / "m.safetensors"
    ckpt.torch.save_file({"a": torch.ones(4), "b": torch.zeros(2, 3)}, src)
    out = str(tmp_path / "out") + "/"
    ckpt.convert(src, out, progress=False)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["model.safetensors"]
    assert set(ckpt.load(out)) == {"a", "b"}
    with pytest.raises(ckpt.ExistsError, match="overwrite=True"):
        ckpt.convert(src, out, progress=False)
    ckpt.convert(src, out, progress=False, overwrite=True)
