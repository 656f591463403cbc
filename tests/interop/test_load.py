"""The load engine against torch: slices, splits, casts and permutations of
tensors saved by safetensors and torch.save, loaded with every I/O path
(threads, tiny chunks, O_DIRECT, io_uring on and off), compared byte for
byte with what torch computes from the same tensors."""
import os
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import ckptlib  # noqa: E402
from statuses import status_of

TORCH = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
         "F8_E4M3": torch.float8_e4m3fn, "I8": torch.int8, "I64": torch.int64}


def as_bytes(t):
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


@pytest.fixture(scope="module")
def tensors():
    g = torch.Generator().manual_seed(0)
    return {
        "embed.weight": torch.randn(301, 64, generator=g),
        "layers.0.attn.q.weight": torch.randn(96, 80, generator=g).to(torch.bfloat16),
        "layers.0.attn.q.bias": torch.randn(96, generator=g).to(torch.float16),
        "layers.1.conv.weight": torch.randn(12, 5, 3, 7, generator=g),
        "layers.1.big": torch.randn(2100, 1031, generator=g),   # 8.6 MB: several chunks
        "scalar": torch.tensor(3.5, dtype=torch.float64),
        "empty": torch.zeros(0, 5),
        "ids": torch.arange(-50, 50, dtype=torch.int8).reshape(10, 10),
    }


@pytest.fixture(scope="module")
def st_file(tensors, tmp_path_factory):
    path = tmp_path_factory.mktemp("load") / "model.safetensors"
    save_file(tensors, str(path))
    return path


@pytest.fixture(scope="module")
def pt_file(tensors, tmp_path_factory):
    path = tmp_path_factory.mktemp("load") / "model.pt"
    d = dict(tensors)
    d["view.t"] = tensors["embed.weight"].t()          # saved as a strided view
    d["view.rows"] = tensors["embed.weight"][100:200]   # an offset view of a shared storage
    torch.save(d, str(path))
    return path


IO_VARIANTS = [dict(), dict(threads=1), dict(threads=2, chunk_bytes=64 << 10), dict(io="direct"),
               dict(io="direct", chunk_bytes=64 << 10, threads=2), dict(io_uring=False, threads=2),
               dict(io="buffered", io_uring=False, threads=1, chunk_bytes=64 << 10)]


def load(path, setup, io="auto", **opts):
    with ckptlib.Catalog(path, io) as cat, ckptlib.Plan(cat) as plan:
        setup(plan)
        plan.load(**opts)
        return plan.data(), plan.items(), plan.stats()


@pytest.mark.parametrize("opts", IO_VARIANTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_whole_load_matches(st_file, tensors, opts):
    data, items, stats = load(st_file, lambda p: None, **opts)
    assert set(data) == set(tensors)
    for name, t in tensors.items():
        assert data[name] == as_bytes(t), name
    assert stats["bytes_needed"] == sum(t.numel() * t.element_size() for t in tensors.values())


@pytest.mark.parametrize("opts", IO_VARIANTS[:5], ids=str)
def test_slices_casts_permutes(st_file, tensors, opts):
    def setup(p):
        p.split(0, 1, 3, "layers.1.big")                       # uneven rows (2100 = 700 * 3 → even; see below)
        p.split(1, 2, 4, "embed.weight")                        # 64 / 4 columns: one run per row
        p.slice(0, 10, 90, "layers.0.attn.q.*")                 # rows of weight and bias
        p.cast("F32", "layers.0.attn.q.*")
        p.layout("OIHW", "HWIO", "layers.1.conv.weight")
        p.transpose("layers.0.attn.q.weight")
        p.cast("BF16", "layers.1.big")
    data, items, _ = load(st_file, setup, **opts)
    expect = {
        "layers.1.big": torch.tensor_split(tensors["layers.1.big"], 3, 0)[1].to(torch.bfloat16),
        "embed.weight": torch.tensor_split(tensors["embed.weight"], 4, 1)[2],
        "layers.0.attn.q.weight": tensors["layers.0.attn.q.weight"][10:90].float().t(),
        "layers.0.attn.q.bias": tensors["layers.0.attn.q.bias"][10:90].float(),
        "layers.1.conv.weight": tensors["layers.1.conv.weight"].permute(2, 3, 1, 0),
    }
    for name, t in expect.items():
        assert data[name] == as_bytes(t), name
        item = next(i for i in items if i["name"] == name)
        assert item["shape"] == list(t.shape)


def test_uneven_split_and_dim1_reads(st_file, tensors):
    big = tensors["layers.1.big"]
    for rank in range(5):
        data, _, stats = load(st_file, lambda p: (p.select("layers.1.big"), p.split(-1, rank, 5)), threads=2,
                              io="buffered")
        assert data["layers.1.big"] == as_bytes(torch.tensor_split(big, 5, 1)[rank])
        assert stats["bytes_needed"] == big.shape[0] * torch.tensor_split(big, 5, 1)[rank].shape[1] * 4
        # from the page cache, one read per 825-byte run: dim-1 slices read
        # only what they need when gaps are longer than runs
        assert stats["bytes_read"] == stats["bytes_needed"]
        # from the disk (io="direct"), spans of rows (every page holds some
        # of the slice anyway), not one read per row, never more than the rows
        data, _, stats = load(st_file, lambda p: (p.select("layers.1.big"), p.split(-1, rank, 5)), threads=2,
                              io="direct")
        assert data["layers.1.big"] == as_bytes(torch.tensor_split(big, 5, 1)[rank])
        assert stats["bytes_read"] <= big.numel() * 4
        assert stats["reads"] < big.shape[0] // 10, stats
    data, _, stats = load(st_file, lambda p: (p.select("layers.1.big"), p.split(0, 1, 7)), io="buffered")
    assert data["layers.1.big"] == as_bytes(torch.tensor_split(big, 7, 0)[1])
    assert stats["bytes_read"] <= 1.05 * stats["bytes_needed"]


def test_torch_file_views_and_strides(pt_file, tensors):
    def setup(p):
        p.slice(1, 3, 200, "view.t")
        p.cast("F16", "view.*")
    data, _, _ = load(pt_file, setup, chunk_bytes=64 << 10, threads=2)
    e = tensors["embed.weight"]
    assert data["view.t"] == as_bytes(e.t()[:, 3:200].half())
    assert data["view.rows"] == as_bytes(e[100:200].half())
    assert data["layers.1.big"] == as_bytes(tensors["layers.1.big"])
    data, _, _ = load(pt_file, lambda p: p.select("view.t"))
    assert data["view.t"] == as_bytes(e.t())


def test_caller_buffers_and_views(st_file, tensors):
    with ckptlib.Catalog(st_file) as cat, ckptlib.Plan(cat) as plan:
        plan.select("layers.1.*")
        plan.cast("F16", "layers.1.conv.weight")
        items = plan.items()
        i = [x["name"] for x in items].index("layers.1.big")
        raw = bytearray(items[i]["nbytes"] + 3)
        buf = (ctypes_char := __import__("ctypes").c_char * (len(raw) - 3)).from_buffer(raw, 3)  # unaligned
        plan.set_buffer(i, buf)
        plan.load(views=True)
        assert bytes(raw[3:]) == as_bytes(tensors["layers.1.big"])
        its = plan.items()
        assert not its[i]["is_view"]
        conv = next(x for x in its if x["name"] == "layers.1.conv.weight")
        assert not conv["is_view"]           # a cast cannot be a view
        assert plan.stats()["views"] == 0
    with ckptlib.Catalog(st_file) as cat, ckptlib.Plan(cat) as plan:
        plan.slice(0, 5, 9, "ids")
        plan.load(views=True)
        assert plan.data()["ids"] == as_bytes(tensors["ids"][5:9])
        assert all(x["is_view"] for x in plan.items())   # dense row ranges need no copy


def test_renames_selection_and_duplicates(st_file):
    with ckptlib.Catalog(st_file) as cat, ckptlib.Plan(cat) as plan:
        plan.select("layers.*").exclude("*.big")
        plan.rename("layers.*.attn.*", "h.*.attention.*").rename("layers.", "blocks.")
        names = sorted(i["name"] for i in plan.items())
        assert names == ["blocks.1.conv.weight", "h.0.attention.q.bias", "h.0.attention.q.weight"]
        plan.rename("h.0.attention.q.bias", "same").rename("h.0.attention.q.weight", "same")
        with pytest.raises(ckptlib.CkptError) as e:
            plan.load()
        assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_DUPLICATE_NAME" and "same" in e.value.message


def test_match_report(st_file, tensors):
    with ckptlib.Catalog(st_file) as cat, ckptlib.Plan(cat) as plan:
        expected = [("embed.weight", "F32", [301, 64]), ("layers.0.attn.q.weight", "F32", [96, 80]),
                    ("layers.0.attn.q.bias", "F16", [95]), ("head.weight", "F32", [10, 64])]
        report = plan.match(expected)
        assert ("missing", "head.weight") in report
        assert ("dtype", "layers.0.attn.q.weight") in report
        assert ("shape", "layers.0.attn.q.bias") in report
        assert ("unexpected", "scalar") in report
        report = plan.match(expected, cast=True, prune=True)
        assert ("dtype", "layers.0.attn.q.weight") not in report
        plan.load()
        data = plan.data()
        assert set(data) == {"embed.weight", "layers.0.attn.q.weight"}
        assert data["layers.0.attn.q.weight"] == as_bytes(tensors["layers.0.attn.q.weight"].float())


def test_bad_plans_name_the_tensor(st_file):
    with ckptlib.Catalog(st_file) as cat, ckptlib.Plan(cat) as plan:
        with pytest.raises(ckptlib.CkptError) as e:
            plan.slice(2, 0, 1, "embed.weight")
        assert e.value.tensor == "embed.weight" and "dimension 2" in e.value.message
        with pytest.raises(ckptlib.CkptError) as e:
            plan.slice(0, 0, 400, "embed.weight")
        assert status_of(e.value) == "CKPT_E_OUT_OF_RANGE"
        with pytest.raises(ckptlib.CkptError) as e:
            plan.cast("I16", "ids")        # I8 -> I16 widens: fine
            plan.cast("U8", "ids")         # I8 -> U8 would lose the sign
        assert "cannot cast I8 to U8" in e.value.message and e.value.tensor == "ids"
        with pytest.raises(ckptlib.CkptError):
            plan.permute([0, 0], "embed.weight")
        with pytest.raises(ckptlib.CkptError):
            plan.split(0, 3, 3)
        with pytest.raises(ckptlib.CkptError):
            plan.layout("OIHW", "HWIX")


def test_progress_and_cancel(st_file):
    seen = []
    load(st_file, lambda p: None, progress=lambda d, t: seen.append((d, t)) and False, chunk_bytes=64 << 10)
    assert seen[0][0] == 0 and seen[-1][0] == seen[-1][1] > 0
    with pytest.raises(ckptlib.CkptError) as e:
        load(st_file, lambda p: None, progress=lambda d, t: d > 0, chunk_bytes=64 << 10, threads=1)
    assert status_of(e.value) == "CKPT_E_CANCELLED"


def test_truncated_file_names_tensor_and_offset(st_file, tmp_path):
    data = st_file.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data)
    with ckptlib.Catalog(cut) as cat, ckptlib.Plan(cat) as plan:
        os.truncate(cut, len(data) - 1000)
        with pytest.raises(ckptlib.CkptError) as e:
            plan.load(threads=2)
        assert status_of(e.value) == "CKPT_E_TRUNCATED"
        assert e.value.path.endswith("cut.safetensors") and e.value.tensor and e.value.offset > 0


def test_convert_plan_roundtrips_through_safetensors(st_file, tensors, tmp_path):
    from safetensors.torch import load_file
    with ckptlib.Catalog(st_file) as cat, ckptlib.Plan(cat) as plan:
        plan.transpose("*.weight").cast("BF16", "layers.1.big").split(1, 0, 2, "layers.1.big")
        plan.layout("OIHW", "HWIO", "layers.1.conv.weight").rename("layers.", "model.layers.")
        plan.convert(tmp_path / "out", max_shard_size=1_000_000)
    shards = sorted((tmp_path / "out").glob("model-*.safetensors"))
    assert len(shards) >= 2 and (tmp_path / "out" / "model.safetensors.index.json").exists()
    out = {}
    for shard in shards:
        out.update(load_file(str(shard)))
    assert torch.equal(out["embed.weight"], tensors["embed.weight"].t())
    assert torch.equal(out["model.layers.0.attn.q.weight"], tensors["layers.0.attn.q.weight"].t())
    assert torch.equal(out["model.layers.1.big"], torch.tensor_split(tensors["layers.1.big"], 2, 1)[0].bfloat16())
    assert torch.equal(out["model.layers.1.conv.weight"], tensors["layers.1.conv.weight"].permute(2, 3, 1, 0))
    assert torch.equal(out["scalar"], tensors["scalar"]) and out["empty"].shape == (0, 5)


def test_big_endian_torch_file_through_the_engine(tmp_path):
    from test_torch_read import to_big_endian
    g = torch.Generator().manual_seed(3)
    sd = {"w": torch.randn(300, 70, generator=g), "i": torch.arange(-20, 20, dtype=torch.int32)}
    torch.save(sd, tmp_path / "le.pt")
    to_big_endian(tmp_path / "le.pt", tmp_path / "be.pt")

    def setup(p):
        p.split(0, 1, 3, "w").slice(1, 5, 60, "w").cast("BF16", "w").transpose("w")
    for opts in ({}, dict(chunk_bytes=64 << 10, threads=2)):
        data, _, _ = load(tmp_path / "be.pt", setup, **opts)
        assert data["w"] == as_bytes(torch.tensor_split(sd["w"], 3, 0)[1][:, 5:60].bfloat16().t())
        assert data["i"] == as_bytes(sd["i"])   # plain copy, swapped


def test_packed_sub_byte_tensors_load_whole(tmp_path):
    packed = bytes(range(12))   # F4 [4, 6]: 24 values, 4 bits each
    ckptlib.write(tmp_path / "f4.safetensors", [("p", "F4", [4, 6], packed), ("x", "F32", [2], b"\0" * 8)])
    for opts in ({}, dict(io="direct"), dict(views=True)):
        data, items, _ = load(tmp_path / "f4.safetensors", lambda p: None, **opts)
        assert data["p"] == packed and items[[i["name"] for i in items].index("p")]["nbytes"] == 12
    with ckptlib.Catalog(tmp_path / "f4.safetensors") as cat, ckptlib.Plan(cat) as plan:
        for call in (lambda: plan.slice(0, 0, 2, "p"), lambda: plan.transpose("p")):
            with pytest.raises(ckptlib.CkptError) as e:
                call()
            assert e.value.tensor == "p" and "packed" in e.value.message
        plan.cast("F16")                 # float casts leave packed tensors alone
        plan.convert(tmp_path / "out.safetensors")
    with ckptlib.Catalog(tmp_path / "out.safetensors") as out:
        assert out.read("p") == packed and out.info("x")["dtype"] == "F16"


def test_ring_stays_bounded_with_many_threads(st_file, tensors):
    # A cast needs the bounce ring; 40 threads at the default 8 MiB chunk
    # would hold 320 MiB of it: the default chunk shrinks to stay within 48 MiB.
    data, _, stats = load(st_file, lambda p: p.cast("F64"), threads=40)
    assert 0 < stats["ring_bytes"] <= (48 << 20) + 40 * 8192
    want = tensors["layers.1.big"].to(torch.float64)
    assert data["layers.1.big"] == as_bytes(want)
    # An explicit chunk size is the caller's choice, kept as given.
    _, _, stats = load(st_file, lambda p: p.cast("F64"), threads=4, chunk_bytes=8 << 20)
    assert stats["ring_bytes"] >= 4 * (8 << 20)
