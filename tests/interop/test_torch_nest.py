"""A torch.save file written from a checkpoint with an object tree is that
tree (issue 27: a torch file's tree is exactly the structure torch.load
returns): converting a training checkpoint to .pt — from a .pt, from the
safetensors file a .pt was converted to, from DCP — gives a file that
torch.load(weights_only=True) reads as the source's structure and values
(nested dicts, OrderedDicts, lists, tuples, ints of any size, floats,
bools, None, strings, bytes, torch.Size, devices, dtypes, tied tensors on
one storage), byte for byte what torch.save writes for the object
torch.load gives.  What the writer cannot express is refused by its path in
the tree, never dropped."""
import argparse
import collections
import json
import os
import subprocess
import warnings

import pytest
import torch
from ckptlib import BIN_PATH

ckpt = pytest.importorskip("ckpt")


def cli(*args, ok=True):
    r = subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def assert_same(got, want, where="<root>"):
    """The same containers of the same classes (OrderedDict stays one),
    keys in the same order, equal tensors, equal values of the same type."""
    assert type(got) is type(want), (where, type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        assert torch.equal(got, want), where
    elif isinstance(want, dict):
        assert list(got) == list(want), (where, list(got)[:5], list(want)[:5])
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and want != want:
        assert got != got, where  # nan
    else:
        assert got == want, (where, got, want)


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(6, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.head = torch.nn.Linear(4, 6, bias=False)
        self.head.weight = self.embed.weight  # tied: one storage, two keys


def training():
    """A training checkpoint: the model's state dict (an OrderedDict with
    _metadata, tied weights), AdamW's state in two param groups, a
    scheduler's state, an epoch, and values of every kind torch.load
    allows."""
    torch.manual_seed(0)
    model = Tied()
    decay = [model.embed.weight]
    opt = torch.optim.AdamW([{"params": decay}, {"params": list(model.norm.parameters()), "weight_decay": 0.0}],
                            lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    sched.step()
    return {
        "model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "epoch": 3,
        "history": [(1, 0.5, "warmup"), (2, 0.25, None), [True, False, -7]],
        "counts": {0: 2**70, -1: -(2**40), 2: 1 << 40, True: "bool key"},
        "floats": [0.1, float("inf"), float("-inf"), float("nan"), -0.0],
        "blob": b"\x00\x01\xfe\xff", "shape": torch.Size([2, 3]), "device": torch.device("cpu"),
        "dtype": torch.bfloat16, "tags": {"a", "b"} and {3, 1, 2}, "z": complex(1, -2),
        "ordered": collections.OrderedDict([("x", 1), ("y", [torch.arange(3)])]),
        "empty": [{}, [], (), ""],
    }


def torch_resave(src, path):
    """torch.save of what torch.load gives for `src`, at `path`."""
    obj = torch.load(src, weights_only=True)
    torch.save(obj, path)
    return obj


def same_as_torch(out, want_obj, tmp_path):
    """`out` is byte for byte torch.save(want_obj) at a path of its name."""
    ref = tmp_path / "torch-reference" / os.path.basename(out)
    ref.parent.mkdir(exist_ok=True)
    torch.save(want_obj, ref)
    assert out.read_bytes() == ref.read_bytes()
    got = torch.load(out, weights_only=True)
    assert_same(got, want_obj)
    return got


def test_pt_to_pt_is_torch_save_of_torch_load(tmp_path):
    torch.save(training(), tmp_path / "src.pt")
    want = torch.load(tmp_path / "src.pt", weights_only=True)
    cli("convert", tmp_path / "src.pt", tmp_path / "out.pt", "-q")
    got = same_as_torch(tmp_path / "out.pt", want, tmp_path)
    assert type(got["model"]) is collections.OrderedDict and got["model"]._metadata == want["model"]._metadata
    # Tied weights: one storage, as the model's state dict has them.
    assert got["model"]["head.weight"].untyped_storage().data_ptr() == \
        got["model"]["embed.weight"].untyped_storage().data_ptr()
    model = Tied()
    model.load_state_dict(got["model"])
    opt = torch.optim.AdamW([{"params": [model.embed.weight]}, {"params": list(model.norm.parameters())}])
    opt.load_state_dict(got["optimizer"])
    # The Python package writes the same file.
    ckpt.convert(tmp_path / "src.pt", tmp_path / "py" / "out.pt", progress=False)
    assert (tmp_path / "py" / "out.pt").read_bytes() == (tmp_path / "out.pt").read_bytes()


def test_pt_to_safetensors_to_pt(tmp_path):
    """The tree a safetensors file records (its tied weight written once)
    gives the training checkpoint back."""
    torch.save(training(), tmp_path / "src.pt")
    want = torch.load(tmp_path / "src.pt", weights_only=True)
    cli("convert", tmp_path / "src.pt", tmp_path / "mid.safetensors", "-q")
    cli("convert", tmp_path / "mid.safetensors", tmp_path / "out.pt", "-q")
    got = same_as_torch(tmp_path / "out.pt", want, tmp_path)
    assert got["model"]["head.weight"].untyped_storage().data_ptr() == \
        got["model"]["embed.weight"].untyped_storage().data_ptr()
    ckpt.convert(tmp_path / "mid.safetensors", tmp_path / "py" / "out.pt", progress=False)
    assert (tmp_path / "py" / "out.pt").read_bytes() == (tmp_path / "out.pt").read_bytes()


def test_selection_writes_the_plans_tree(tmp_path):
    torch.save(training(), tmp_path / "src.pt")
    want = torch.load(tmp_path / "src.pt", weights_only=True)
    # The model taken out: a flat state dict, as torch.save writes a dict of its tensors.
    cli("convert", tmp_path / "src.pt", tmp_path / "model.pt", "--select", "model.*", "--rename", "model.=", "-q")
    same_as_torch(tmp_path / "model.pt", dict(want["model"]), tmp_path)
    # Its nesting kept: the optimizer under its key, the rest left out.
    cli("convert", tmp_path / "src.pt", tmp_path / "optim.pt", "--select", "optimizer.*", "-q")
    same_as_torch(tmp_path / "optim.pt", {"optimizer": want["optimizer"]}, tmp_path)
    # Through safetensors, the same.
    cli("convert", tmp_path / "src.pt", tmp_path / "mid.safetensors", "-q")
    cli("convert", tmp_path / "mid.safetensors", tmp_path / "o2" / "optim.pt", "--select", "optimizer.*", "-q")
    assert (tmp_path / "o2" / "optim.pt").read_bytes() == (tmp_path / "optim.pt").read_bytes()
    cli("convert", tmp_path / "mid.safetensors", tmp_path / "o2" / "model.pt", "--select", "model.*", "-q")
    same_as_torch(tmp_path / "o2" / "model.pt", {"model": want["model"]}, tmp_path)


@pytest.mark.parametrize("groups", [1, 2])
def test_dcp_to_pt_is_dcp_to_torch_save(tmp_path, groups):
    """dcp_to_torch_save's file, byte for byte.  With two param groups
    DCP gives each its own 'betas' tuple where the tree says only that they
    are equal: the writer shares equal tuples (as torch.save of the
    optimizer's own state dict does), so the same values, in other bytes."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    obj = training()
    obj = {k: obj[k] for k in ("model", "optimizer", "scheduler", "epoch", "history")}
    if groups == 1:
        obj["optimizer"]["param_groups"] = obj["optimizer"]["param_groups"][:1]
        obj["optimizer"]["param_groups"][0]["params"] = [0, 1, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no process group": one process saves alone
        dcp.save(obj, checkpoint_id=str(tmp_path / "dcp"))
        (tmp_path / "ref").mkdir()
        dcp_to_torch_save(str(tmp_path / "dcp"), str(tmp_path / "ref" / "out.pt"))
    cli("convert", tmp_path / "dcp", tmp_path / "out.pt", "-q")
    assert_same(torch.load(tmp_path / "out.pt", weights_only=True),
                torch.load(tmp_path / "ref" / "out.pt", weights_only=True))
    if groups == 1:
        assert (tmp_path / "out.pt").read_bytes() == (tmp_path / "ref" / "out.pt").read_bytes()


@pytest.mark.parametrize("n", [0, 1, 2, 999, 1000, 1001, 2000, 2001])
def test_batches_as_cpythons_pickler(tmp_path, n):
    """Lists, dicts, OrderedDicts and sets of every batch shape: APPEND or
    APPENDS, SETITEM or SETITEMS, an exact dict's empty last batch."""
    keys = [f"k{i}" for i in range(n)]  # one str object per key in both dicts, as code that makes them gives
    obj = {"list": list(range(n)), "dict": dict(zip(keys, range(n))),
           "ordered": collections.OrderedDict(zip(keys, range(n))), "set": set(range(n)),
           "tuple": tuple(range(n)), "tensors": [torch.full((1,), float(i)) for i in range(min(n, 5))]}
    torch.save(obj, tmp_path / "src.pt")
    want = torch_resave(tmp_path / "src.pt", tmp_path / "ref.pt")
    cli("convert", tmp_path / "src.pt", tmp_path / "out.pt", "-q")
    same_as_torch(tmp_path / "out.pt", want, tmp_path)


def test_tree_deeper_than_json_nests_converts(tmp_path):
    """A tree nested deeper than the library's JSON reader nests (128),
    which the torch reader accepts (up to 500), reaches the .pt writer as
    values: the file is torch.save's, and a plan filters it at any depth."""
    obj = {"w": torch.ones(2), "v": torch.zeros(1)}
    for i in range(150):
        obj = {"a": obj, "n": i}
    torch.save(obj, tmp_path / "src.pt")
    want = torch_resave(tmp_path / "src.pt", tmp_path / "ref.pt")
    cli("convert", tmp_path / "src.pt", tmp_path / "out.pt", "-q")
    same_as_torch(tmp_path / "out.pt", want, tmp_path)
    cli("convert", tmp_path / "src.pt", tmp_path / "sel.pt", "--exclude", "*.v", "-q")
    got = torch.load(tmp_path / "sel.pt", weights_only=True)
    while "a" in got:
        got = got["a"]
    assert list(got) == ["w"]


def _same_json(a, b):
    """Equal as JSON values: nan equals nan, -0.0 is not 0.0 (text compare)."""
    return json.dumps(a, allow_nan=True, sort_keys=False) == json.dumps(b, allow_nan=True, sort_keys=False)


@pytest.mark.parametrize("rules", [[], [("exclude", "optimizer.*")], [("select", "model.*")]])
def test_plan_tree_is_its_json_read(tmp_path, rules):
    """Plan.tree() (the library's values walked into Python objects) is
    what json_loads gives for Plan.tree_json(): every kind of the schema."""
    from ckpt import _ckpt
    torch.save(training(), tmp_path / "src.pt")
    plan = _ckpt.Plan(_ckpt.Catalog(str(tmp_path / "src.pt")))
    for rule, pattern in rules:
        getattr(plan, rule)(pattern)
    assert _same_json(plan.tree(), _ckpt.json_loads(plan.tree_json())[0])


def test_nested_load_of_a_deep_tree_is_the_plans(tmp_path):
    """ckpt.load(nested=True) of a tree deeper than the JSON reader nests,
    a tensor excluded: the plan's tree (its values filtered at any depth),
    not the catalog's whole one."""
    obj = {"w": torch.ones(2), "v": torch.zeros(1)}
    for i in range(150):
        obj = {"a": obj, "n": i}
    torch.save(obj, tmp_path / "src.pt")
    got = ckpt.load(tmp_path / "src.pt", exclude="*.v", nested=True)
    for i in reversed(range(150)):
        assert got["n"] == i
        got = got["a"]
    assert list(got) == ["w"] and torch.equal(got["w"], torch.ones(2))


def test_what_it_cannot_write_is_refused_by_path(tmp_path):
    """An object only a caller's allowed global rebuilds (torch.load's
    weights_only unpickler would refuse the file) is named, not dropped."""
    torch.save({"model": {"w": torch.ones(2)}, "args": argparse.Namespace(lr=0.1)}, tmp_path / "src.pt")
    r = cli("convert", tmp_path / "src.pt", tmp_path / "out.pt", "--allow-global", "argparse.Namespace", ok=False)
    assert r.returncode != 0 and not (tmp_path / "out.pt").exists()
    assert "'args'" in r.stderr or "args" in r.stderr.split("argparse.Namespace")[1], r.stderr
    assert "argparse.Namespace" in r.stderr and "weights_only" in r.stderr, r.stderr
    with pytest.raises(ckpt.Error, match="argparse.Namespace"):
        ckpt.convert(tmp_path / "src.pt", tmp_path / "out.pt", allowed_globals=["argparse.Namespace"],
                     progress=False)
    # Without it, the model alone is written.
    cli("convert", tmp_path / "src.pt", tmp_path / "model.pt", "--allow-global", "argparse.Namespace",
        "--select", "model.*", "-q")
    assert_same(torch.load(tmp_path / "model.pt", weights_only=True), {"model": {"w": torch.ones(2)}})


def test_inspect_says_a_state_dict_in_one_line(tmp_path):
    model = Tied()
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    out = cli("inspect", tmp_path / "sd.pt").stdout
    assert "Object tree: a state dict (a dict of the tensors above, in order)\n" in out
    assert "'embed.weight': tensor" not in out
    torch.save({"model": model.state_dict(), "shape": torch.Size([2])}, tmp_path / "train.pt")
    out = cli("inspect", tmp_path / "train.pt").stdout
    assert "Object tree:\n  dict (2 keys)\n    'model': OrderedDict (4 keys)\n" in out, out
    assert "    'shape': torch.Size (1 item)\n" in out, out
