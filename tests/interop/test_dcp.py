"""PyTorch distributed checkpoints (torch.distributed.checkpoint), against
torch 2.13 itself: checkpoints that dcp.save wrote on 1, 2 and 4 gloo ranks
(DTensors Shard(0)/Shard(1)/Replicate, a 2-D mesh, FSDP2 with AdamW, tied
weights, bf16/f16/f32, non-tensor entries) and the Hugging Face storage
layer's per-rank files are read bit-exactly as dcp_to_torch_save and
consolidate_safetensors_files read them; exports are byte-identical to
save_torch_state_dict; DCP written by ckpt loads with dcp.load on 1, 2 and
4 ranks.  The checkpoints are made once per session by dcp_worker.py."""
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch
from ckptlib import BIN_PATH, Catalog, Plan

ckpt = pytest.importorskip("ckpt")  # the Python package (installed by make test-python)
import ckpt.torch  # noqa: E402  (the safetensors drop-in)
from statuses import status_of

HERE = Path(__file__).resolve().parent
HOSTILE = HERE.parent / "hostile"
MARKER = Path("/tmp/ckpt-hostile-pwned")


@pytest.fixture(scope="session")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("dcp")
    r = subprocess.run([sys.executable, str(HERE / "dcp_worker.py"), str(out), BIN_PATH],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return out


def cli(*args, ok=True):
    r = subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def flatten(obj, prefix=""):
    """Tensors of a nested state dict by dotted path (DCP's fqns)."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}{i}."))
    elif isinstance(obj, torch.Tensor):
        out[prefix[:-1]] = obj
    return out


def reference(made, name, tmp_path):
    """What torch itself makes of a DCP checkpoint: dcp_to_torch_save."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(made / name, tmp_path / f"{name}.pt")
    return torch.load(tmp_path / f"{name}.pt", weights_only=False)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                     b.reshape(-1).view(torch.uint8))


# ---- reading ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["r1", "r2", "r4"])
def test_read_bit_exact_against_dcp_to_torch_save(made, tmp_path, name):
    want = flatten(reference(made, name, tmp_path))
    got = ckpt.load(made / name)
    assert list(got) == list(want)  # the .metadata's order
    for k in want:
        assert same_bits(got[k], want[k]), k
    # The safetensors drop-in reads the directory too (copies: chunked
    # tensors are never mapped whole).
    dropin = ckpt.torch.load_file(made / name)
    assert all(same_bits(dropin[k], want[k]) for k in want)
    # ...and what the worker gathered with full_tensor() before saving.
    gathered = flatten(torch.load(made / f"expected_{name}.pt", weights_only=False))
    assert all(same_bits(got[k], gathered[k]) for k in gathered)


def test_tied_weights_both_kept(made):
    got = ckpt.load(made / "r1")
    assert torch.equal(got["model.emb.weight"], got["model.head.weight"])


@pytest.mark.parametrize("name", ["r1", "r4"])
def test_non_tensor_entries_in_the_object_tree(made, tmp_path, name):
    ref = reference(made, name, tmp_path)
    with ckpt.open(made / name) as c:
        assert c.format == "dcp"
        tree = c.tree(leaf=lambda n: ("tensor", n))

    def check(got, want, path):
        if isinstance(want, torch.Tensor):
            assert got == ("tensor", path[1:]), path
        elif isinstance(want, dict):
            assert list(got) == [str(k) for k in want], path
            for k, v in want.items():
                check(got[str(k)], v, f"{path}.{k}")
        elif isinstance(want, list) and any(isinstance(v, (dict, torch.Tensor)) for v in want):
            assert len(got) == len(want), path
            for i, v in enumerate(want):
                check(got[i], v, f"{path}.{i}")
        else:
            assert got == want and type(got) is type(want), (path, got, want)

    check(tree, ref, "")
    if name == "r1":
        assert tree["step"] == 11 and tree["lr"] == 0.5 and tree["name"] == "run-7"
        assert tree["milestones"] == [10, 20] and tree["betas"] == (0.9, 0.95)
    else:
        groups = tree["optim"]["param_groups"]
        assert groups[0]["lr"] == 1e-3 and groups[0]["betas"] == (0.9, 0.999)


def test_inspect_shows_chunks_and_ranks(made):
    meta = pickle.loads((made / "r4" / ".metadata").read_bytes())
    report = json.loads(cli("inspect", "--json", made / "r4").stdout)
    assert report["format"] == "dcp" and report["index"].endswith(".metadata")
    files = [Path(f["path"]).name for f in report["files"]]
    for t in report["tensors"]:
        md = meta.state_dict_metadata[t["name"]]
        want = sorted((list(c.offsets), list(c.sizes)) for c in md.chunks if c.sizes.numel())
        assert sorted((c["offsets"], c["sizes"]) for c in t["chunks"]) == want, t["name"]
        for c in t["chunks"]:  # the rank is the one whose file holds the chunk
            info = meta.storage_data[next(k for k in meta.storage_data
                                          if k.fqn == t["name"] and list(k.offset) == c["offsets"])]
            assert files[c["file"]] == info.relative_path
            assert c["rank"] == int(info.relative_path.split("_")[2])
    table = cli("inspect", made / "r4").stdout
    assert "torch.distributed.checkpoint, 4 files" in table
    grid = next(line for line in table.splitlines() if line.startswith("extra.grid"))
    assert "4 chunks, ranks 0-3" in grid


def test_slices_read_only_the_chunks_they_overlap(made):
    want = flatten(torch.load(made / "expected_r4.pt", weights_only=False))["extra.rows"]  # 9 rows: 3, 3, 3
    with Catalog(made / "r4", "buffered") as cat, Plan(cat) as plan:
        plan.select("extra.rows")
        plan.slice(0, 3, 6)
        plan.load()
        got = torch.frombuffer(bytearray(plan.data()["extra.rows"]), dtype=torch.float32).reshape(3, 4)
        assert torch.equal(got, want[3:6])
        assert plan.stats()["bytes_read"] == 3 * 4 * 4  # rank 1's chunk, nothing of ranks 0 and 2
    rows = ckpt.load(made / "r4", select="extra.rows", slices={"extra.rows": (0, 2, 7)})["extra.rows"]
    assert torch.equal(rows, want[2:7])
    with ckpt.torch.safe_open(made / "r4", "pt") as f:
        assert torch.equal(f.get_slice("extra.grid")[1:3, 2:5], flatten(
            torch.load(made / "expected_r4.pt", weights_only=False))["extra.grid"][1:3, 2:5])


def test_load_into_a_model(made, tmp_path):
    want = flatten(reference(made, "r4", tmp_path)["model"])
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ckpt.load_into(model, made / "r4", select="model.*", rename={"model.": ""})
    for k, v in model.state_dict().items():
        assert torch.equal(v, want[k]), k


# ---- DCP → Hugging Face safetensors ------------------------------------------------------------

@pytest.mark.parametrize("limit", ["300", "5GB"])
@pytest.mark.parametrize("dtype", [None, "bf16"])
def test_export_model_byte_identical_to_hub(made, tmp_path, limit, dtype):
    from huggingface_hub import save_torch_state_dict
    model = reference(made, "r4", tmp_path)["model"]
    if dtype:
        model = {k: v.to(torch.bfloat16) for k, v in model.items()}
    (tmp_path / "hub").mkdir()
    save_torch_state_dict(model, tmp_path / "hub", max_shard_size=int(limit) if limit.isdigit() else limit)
    args = ["convert", made / "r4", tmp_path / "ckpt", "--select", "model.*", "--rename", "model.=",
            "--max-shard-size", limit] + (["--dtype", dtype] if dtype else [])
    cli(*args)
    hub = sorted(os.listdir(tmp_path / "hub"))
    assert sorted(os.listdir(tmp_path / "ckpt")) == hub
    assert len(hub) > (2 if limit == "300" else 0)
    for f in hub:
        assert (tmp_path / "ckpt" / f).read_bytes() == (tmp_path / "hub" / f).read_bytes(), f


def test_whole_checkpoint_keeps_its_tree(made, tmp_path):
    cli("convert", made / "r4", tmp_path / "all.safetensors")
    got = safetensors.torch.load_file(tmp_path / "all.safetensors")
    want = flatten(reference(made, "r4", tmp_path))
    assert set(got) == set(want) and all(same_bits(got[k], want[k]) for k in want)
    with safetensors.safe_open(tmp_path / "all.safetensors", "pt") as f:
        tree = json.loads(f.metadata()["ckpt.torch_tree"])
    assert dict(tree["__dict__"])["step"] == 3


def test_hf_storage_layer_consolidated_like_torch(made, tmp_path):
    from torch.distributed.checkpoint._consolidate_hf_safetensors import consolidate_safetensors_files
    names = ["a", "b", "c", "d"]
    (tmp_path / "torch").mkdir()
    consolidate_safetensors_files(str(made / "hf4"), str(tmp_path / "torch"), fqn_to_index_mapping=dict.fromkeys(names, 1))
    theirs = safetensors.torch.load_file(tmp_path / "torch" / "model-00001-of-00001.safetensors")
    cli("convert", made / "hf4", tmp_path / "ckpt", "--max-shard-size", "200")
    index = json.loads((tmp_path / "ckpt" / "model.safetensors.index.json").read_text())
    ours = {}
    for f in set(index["weight_map"].values()):
        ours.update(safetensors.torch.load_file(tmp_path / "ckpt" / f))
    gathered = torch.load(made / "expected_hf4.pt")
    assert sorted(ours) == sorted(theirs) == names
    for k in names:
        assert same_bits(ours[k], theirs[k]) and same_bits(ours[k], gathered[k]), k


# ---- writing DCP -----------------------------------------------------------------------------

def test_dcp_written_by_ckpt_loads_in_torch(made):
    results = json.loads((made / "results.json").read_text())
    failed = {k: v for k, v in results.items() if v != "ok"}
    assert not failed, failed
    for n in (1, 2, 4):
        for kind in ("safetensors", "pt"):
            for m in (1, 2, 4):
                for suffix in ("", " as Shard(0) DTensors"):
                    for rank in range(m):
                        assert f"load to{n}-{kind} on {m} ranks{suffix} [rank {rank}]" in results


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_dcp_written_by_ckpt_reads_back(made, tmp_path, ranks):
    src = safetensors.torch.load_file(made / "src.safetensors")
    d = made / f"to{ranks}-safetensors"
    got = ckpt.load(d)
    assert list(got) == list(src) and all(same_bits(got[k], src[k]) for k in src)
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(d, tmp_path / "t.pt")
    theirs = torch.load(tmp_path / "t.pt")
    assert all(same_bits(theirs[k], src[k]) for k in src)
    meta = pickle.loads((d / ".metadata").read_bytes())
    chunks = meta.state_dict_metadata["emb"].chunks
    rows = -(-9 // ranks)  # Shard(0): ceil(rows / ranks) each
    assert [list(c.offsets) for c in chunks] == [[r * rows, 0] for r in range(len(chunks))]
    assert len(meta.state_dict_metadata["norm"].chunks) == (1 if ranks > 3 else ranks)  # 3 rows: once on 4 ranks
    assert sorted(os.listdir(d)) == sorted([".metadata"] + [f"__{r}_0.distcp" for r in range(ranks)])


def test_dcp_writing_is_deterministic_and_atomic(made, tmp_path):
    for out in ("a", "b"):
        cli("convert", made / "src.pt", tmp_path / out, "--to", "dcp", "--dcp-ranks", "2")
    for f in os.listdir(tmp_path / "a"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    # An existing checkpoint is kept unless --force, and replaced whole with it.
    r = cli("convert", made / "src.safetensors", tmp_path / "a", "--to", "dcp", ok=False)
    assert r.returncode == 1 and "CKPT_E_EXISTS" in r.stderr
    cli("convert", made / "src.safetensors", tmp_path / "a", "--to", "dcp", "--force")
    assert sorted(os.listdir(tmp_path / "a")) == [".metadata", "__0_0.distcp"]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temporaries left
    # Other files of the directory are left alone: only the checkpoint's
    # own files (.metadata, *.distcp) are replaced, stale ranks removed.
    (tmp_path / "b" / "notes.txt").write_text("mine")
    cli("convert", made / "src.safetensors", tmp_path / "b", "--to", "dcp", "--force")
    assert sorted(os.listdir(tmp_path / "b")) == [".metadata", "__0_0.distcp", "notes.txt"]
    # A tensor inside a tuple has no place in DCP: refused by name, nothing written.
    torch.save({"pair": (torch.ones(2), 3)}, tmp_path / "pair.pt")
    r = cli("convert", tmp_path / "pair.pt", tmp_path / "c", "--to", "dcp", ok=False)
    assert r.returncode == 1 and "'pair'" in r.stderr and not (tmp_path / "c").exists()


def test_python_convert_to_dcp(made, tmp_path):
    ckpt.convert(made / "src.pt", tmp_path / "py", format="dcp", dcp_ranks=3, select="model.*", progress=False)
    meta = pickle.loads((tmp_path / "py" / ".metadata").read_bytes())
    assert list(meta.state_dict_metadata) == ["model.w", "model.b"]
    assert len(meta.state_dict_metadata["model.w"].chunks) == 3  # 6 rows: 2 each
    want = torch.load(made / "src.pt")["model"]
    got = ckpt.load(tmp_path / "py", rename={"model.": ""})
    assert all(same_bits(got[k], want[k]) for k in want)
    with pytest.raises(ValueError):
        ckpt.convert(made / "src.pt", tmp_path / "bad", format="dcp", max_shard_size="1GB")


def test_dcp_from_dcp_through_ckpt(made, tmp_path):
    """A 4-rank FSDP checkpoint rewritten for 2 ranks reads as the original."""
    cli("convert", made / "r4", tmp_path / "two", "--to", "dcp", "--dcp-ranks", "2")
    want = ckpt.load(made / "r4")
    got = ckpt.load(tmp_path / "two")
    assert list(got) == list(want) and all(same_bits(got[k], want[k]) for k in want)
    with ckpt.open(tmp_path / "two") as a, ckpt.open(made / "r4") as b:
        assert a.tree() .keys() == b.tree().keys()
        assert a.tree()["step"] == 3 and a.tree()["optim"]["param_groups"][0]["lr"] == 1e-3


def test_metadata_globals_are_the_allowlist(made):
    """The globals torch 2.13's own .metadata files name (find_class logged
    while unpickling them) are the ones ckpt allows, and no more."""
    seen = set()

    class Logging(pickle.Unpickler):
        def find_class(self, module, name):
            seen.add(f"{module}.{name}")
            return super().find_class(module, name)

    for name in ("r1", "r2", "r4"):
        with open(made / name / ".metadata", "rb") as f:
            Logging(f).load()
    meta = "torch.distributed.checkpoint.metadata."
    classes = {meta + c for c in ("Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "BytesStorageMetadata",
                                  "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")}
    classes |= {"torch.distributed.checkpoint.filesystem._StorageInfo", "torch.Size", "torch.serialization._get_layout",
                "pathlib.PosixPath"}
    dtypes = {g for g in seen if g.startswith("torch.") and g.count(".") == 1 and g != "torch.Size"}
    assert seen - dtypes == classes
    assert dtypes == {"torch.float32", "torch.bfloat16", "torch.float16", "torch.int64", "torch.bool", "torch.uint8"}


def test_a_data_file_alone_is_refused_with_advice(made):
    r = cli("inspect", made / "r2" / "__1_0.distcp", ok=False)
    assert r.returncode == 1 and "CKPT_E_UNKNOWN_FORMAT" in r.stderr and "open the directory" in r.stderr


# ---- hostile input, from Python ----------------------------------------------------------------

@pytest.mark.parametrize("name", ["dcp-exec-in-metadata", "dcp-exec-in-chunk-archive", "dcp-exec-in-object-archive",
                                  "dcp-chunk-overlap", "dcp-path-parent", "dcp-length-past-end"])
def test_hostile_checkpoints_raise_without_side_effects(name):
    status = json.loads((HOSTILE / "manifest_dcp.json").read_text())[name]
    MARKER.unlink(missing_ok=True)
    with pytest.raises(ckpt.Error) as e:
        ckpt.load(HOSTILE / "corpus" / name)
    assert status_of(e.value) == status
    assert not MARKER.exists()
