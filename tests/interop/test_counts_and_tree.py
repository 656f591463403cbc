"""Totals that count shared bytes once (ckpt inspect's aliases, the index's
total_parameters as transformers' save_pretrained writes it), and a torch
file's object tree recorded whenever it is more than a state dict (whose
keys are the names: recording nothing keeps the hub's bytes), kept true
after --select and --rename (issue 11, items 6 and 7; issue 27, item 2)."""
import json
import subprocess

import pytest
import torch
from ckptlib import BIN_PATH, Catalog

import ckpt

TREE_KEY = "ckpt.torch_tree"


def run(*args):
    return subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True)


def gpt2_like():
    """GPT-2's shape in small: the output head tied to the token embedding."""
    torch.manual_seed(0)
    wte = torch.nn.Parameter(torch.randn(64, 16))
    sd = {"transformer.wte.weight": wte, "transformer.wpe.weight": torch.randn(32, 16)}
    for i in range(3):
        sd[f"transformer.h.{i}.attn.c_attn.weight"] = torch.randn(16, 48)
        sd[f"transformer.h.{i}.mlp.c_fc.weight"] = torch.randn(16, 64)
    sd["lm_head.weight"] = wte
    return sd


def unique_numel(sd):
    return sum({t.untyped_storage().data_ptr(): t.numel() for t in sd.values()}.values())


def transformers_index(directory, index_name, total_parameters):
    """The index as transformers' save_pretrained writes it
    (modeling_utils.py): {"metadata": {"total_parameters":
    self.num_parameters(), **state_dict_split.metadata}, "weight_map": ...},
    dumped with indent=2, sort_keys=True and a final newline."""
    path = directory / index_name
    index = json.loads(path.read_text())
    index["metadata"] = {"total_parameters": total_parameters, **index["metadata"]}
    path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


# ---- item 6: inspect ----------------------------------------------------------


def test_inspect_counts_tied_weights_once(tmp_path):
    sd = gpt2_like()
    base = torch.arange(100.0)
    sd["halves.a"], sd["halves.b"] = base[:50], base[50:]  # one storage, disjoint: both count
    w = torch.arange(20.0).reshape(4, 5)
    sd["v.w"], sd["v.row"], sd["v.w_t"] = w, w[2], w.t()  # views of w: aliases
    torch.save(sd, tmp_path / "m.bin")
    real = unique_numel(gpt2_like()) + 100 + 20
    r = run("inspect", tmp_path / "m.bin")
    assert r.returncode == 0, r.stderr
    assert f"Totals: {len(sd)} tensors (3 aliases: shared bytes counted once), {real:,} parameters" in r.stdout
    doc = json.loads(run("inspect", "--json", tmp_path / "m.bin").stdout)
    assert doc["totals"]["aliases"] == 3 and doc["totals"]["parameters"] == real
    assert doc["totals"]["bytes"] == real * 4 and doc["totals"]["by_dtype"]["F32"]["parameters"] == real
    alias_of = {t["name"]: t.get("alias_of") for t in doc["tensors"]}
    assert alias_of["lm_head.weight"] == "transformer.wte.weight"
    assert alias_of["v.row"] == alias_of["v.w_t"] == "v.w"
    assert alias_of["halves.a"] is None and alias_of["halves.b"] is None
    # What save_torch_state_dict writes of it holds the tied weight once:
    # the same count, and no alias left.
    ckpt.save(gpt2_like(), tmp_path / "saved")
    doc = json.loads(run("inspect", "--json", tmp_path / "saved").stdout)
    assert doc["totals"]["aliases"] == 0 and doc["totals"]["parameters"] == unique_numel(gpt2_like())
    assert "alias" not in run("inspect", tmp_path / "saved").stdout


# ---- item 6: total_parameters in indexes -------------------------------------------


def test_total_parameters_kept_from_a_transformers_index(tmp_path):
    from huggingface_hub import save_torch_state_dict
    sd = gpt2_like()
    src = tmp_path / "src"
    src.mkdir()
    save_torch_state_dict(sd, str(src), max_shard_size="8KB")
    hub_index = json.loads((src / "model.safetensors.index.json").read_text())
    assert "total_parameters" not in hub_index["metadata"]  # the hub does not write it
    # Converting the hub's files writes an index without it, as the hub's.
    assert run("convert", src, tmp_path / "plain", "--max-shard-size", "8KB").returncode == 0
    plain = json.loads((tmp_path / "plain" / "model.safetensors.index.json").read_text())
    assert "total_parameters" not in plain["metadata"] and plain["weight_map"] == hub_index["weight_map"]
    # The index's own entries (the hub's `removed → kept`) stay in the
    # index, as the hub put them; the shards carry {"format": "pt"} alone.
    assert plain["metadata"] == hub_index["metadata"] == {"total_size": hub_index["metadata"]["total_size"],
                                                          "transformer.wte.weight": "lm_head.weight"}
    for shard in set(plain["weight_map"].values()):
        with Catalog(tmp_path / "plain" / shard) as c:
            assert c.metadata() == {"format": "pt"}, shard
    real = unique_numel(sd)
    transformers_index(src, "model.safetensors.index.json", real)
    r = run("convert", src, tmp_path / "out", "--max-shard-size", "8KB")
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "out" / "model.safetensors.index.json").read_text()
    index = json.loads(text)
    assert list(index["metadata"])[:2] == ["total_parameters", "total_size"]  # as sort_keys puts them
    assert index["metadata"]["total_parameters"] == real
    assert index["metadata"]["total_size"] == hub_index["metadata"]["total_size"]
    assert index["weight_map"] == hub_index["weight_map"]
    # After rules, what is written is counted.
    r = run("convert", src, tmp_path / "sel", "--max-shard-size", "8KB", "--select", "transformer.h.*",
            "--slice", "transformer.h.*=0:0:8")
    assert r.returncode == 0, r.stderr
    index = json.loads((tmp_path / "sel" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_parameters"] == 3 * (8 * 48 + 8 * 64)
    # Python's convert is the same library call.
    ckpt.convert(src, tmp_path / "py", max_shard_size="8KB", progress=False)
    assert json.loads((tmp_path / "py" / "model.safetensors.index.json").read_text())["metadata"][
        "total_parameters"] == real
    # A single output file has no index, hence no count (as transformers).
    assert run("convert", src, tmp_path / "one.safetensors").returncode == 0


def test_total_parameters_of_a_torch_index_count_tied_weights_once(tmp_path):
    """pytorch_model.bin shards with the tied head in the first: the hub's
    deduplication writes it once, and the count counts it once."""
    sd = gpt2_like()
    names = list(sd)
    shards = {"pytorch_model-00001-of-00002.bin": names[:4] + ["lm_head.weight"],
              "pytorch_model-00002-of-00002.bin": names[4:-1]}
    weight_map = {}
    for file, keys in shards.items():
        torch.save({k: sd[k] for k in keys}, tmp_path / file)
        weight_map.update({k: file for k in keys})
    real = unique_numel(sd)
    index = {"metadata": {"total_parameters": real, "total_size": sum(t.nbytes for t in sd.values())},
             "weight_map": weight_map}
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    r = run("convert", tmp_path / "pytorch_model.bin.index.json", tmp_path / "out", "--max-shard-size", "8KB")
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert out["metadata"]["total_parameters"] == real
    assert len(out["weight_map"]) == len(sd) - 1  # the tied head written once
    doc = json.loads(run("inspect", "--json", tmp_path / "pytorch_model.bin.index.json").stdout)
    assert doc["totals"]["aliases"] == 1 and doc["totals"]["parameters"] == real


# ---- item 7: the object tree ----------------------------------------------------------


def out_metadata(path):
    with Catalog(path) as c:
        return c.metadata()


@pytest.mark.parametrize("kind", ["state_dict", "extracted_model"])
def test_no_tree_recorded_for_a_state_dict(tmp_path, kind):
    m = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))
    obj = m.state_dict() if kind == "state_dict" else {"model": m.state_dict(), "ema": {"w": torch.ones(2)}}
    torch.save(obj, tmp_path / "m.pt")
    # The torch file's tree is torch's structure, a state dict's too.
    tree = json.loads(run("inspect", "--json", tmp_path / "m.pt").stdout)["tree"]
    if kind == "state_dict":
        assert [k for k, _ in tree["__dict__"]] == list(obj)
    # A state dict (here the model taken out of its dict) records nothing:
    # its keys are its names, as the hub saves it.
    rules = [] if kind == "state_dict" else ["--select", "model.*", "--rename", "model.="]
    assert run("convert", tmp_path / "m.pt", tmp_path / "o.safetensors", *rules).returncode == 0
    assert TREE_KEY not in out_metadata(tmp_path / "o.safetensors")
    assert "Object tree" not in run("inspect", tmp_path / "o.safetensors").stdout


@pytest.mark.parametrize("extra", [{}, {"ema": {"w": torch.ones(2)}}, {"step": 5},
                                   {"pair": (torch.zeros(2), torch.ones(2))}, {3: torch.ones(1)}, {"lr": [0.1, 0.01]}],
                         ids=["nested", "nested_twice", "number", "tuple", "int_key", "list"])
def test_tree_recorded_when_it_says_something(tmp_path, extra):
    obj = {"model": {"w": torch.ones(2, 2)}, **extra}
    torch.save(obj, tmp_path / "m.pt")
    assert "Object tree" in run("inspect", tmp_path / "m.pt").stdout
    assert run("convert", tmp_path / "m.pt", tmp_path / "o.safetensors").returncode == 0
    assert TREE_KEY in out_metadata(tmp_path / "o.safetensors")


def test_tree_follows_select_and_rename(tmp_path):
    obj = {"model": {"a": torch.ones(2), "b": torch.zeros(3)}, "opt": (torch.full((2,), 7.0), 0.5), "step": 9}
    torch.save(obj, tmp_path / "m.pt")
    r = run("convert", tmp_path / "m.pt", tmp_path / "o.safetensors", "--exclude", "model.b",
            "--rename", "model.=net.", "--rename", "opt.0=opt.first")
    assert r.returncode == 0, r.stderr
    tree = json.loads(out_metadata(tmp_path / "o.safetensors")[TREE_KEY])
    top = dict(tree["__dict__"])
    assert top["step"] == 9
    assert dict(top["model"]["__dict__"]) == {"a": {"__tensor__": "net.a"}}  # b dropped, a renamed
    assert "model.b" not in json.dumps(tree) and "model.a" not in json.dumps(tree)
    assert json.dumps({"__tensor__": "opt.first"}) in json.dumps(top["opt"])  # a tuple keeps its place
    with Catalog(tmp_path / "o.safetensors") as c:
        assert sorted(c.names()) == ["net.a", "opt.first"]
    # --select 'model.*': the step counter and the optimizer's tuple go with
    # what the rule drops; the model stays a dict under "model" (its key
    # "a" is no name), and --rename model.= takes it out, a state dict
    # whose keys are its names, as the hub would save it: nothing recorded.
    r = run("convert", tmp_path / "m.pt", tmp_path / "p.safetensors", "--select", "model.*")
    assert r.returncode == 0, r.stderr
    tree = json.loads(out_metadata(tmp_path / "p.safetensors")[TREE_KEY])
    assert tree == {"__dict__": [["model", {"__dict__": [["a", {"__tensor__": "model.a"}],
                                                        ["b", {"__tensor__": "model.b"}]]}]]}
    r = run("convert", tmp_path / "m.pt", tmp_path / "s.safetensors", "--select", "model.*", "--rename", "model.=")
    assert r.returncode == 0, r.stderr
    assert TREE_KEY not in out_metadata(tmp_path / "s.safetensors")
    # --exclude keeps what it does not name: the counter, the tuple's float.
    r = run("convert", tmp_path / "m.pt", tmp_path / "q.safetensors", "--exclude", "opt.*")
    assert r.returncode == 0, r.stderr
    top = dict(json.loads(out_metadata(tmp_path / "q.safetensors")[TREE_KEY])["__dict__"])
    assert top["step"] == 9 and "opt" not in top and "model.a" in json.dumps(top["model"])
