"""The one engine under reads, loads, converts and verify: strided and
compressed tensors read chunk by chunk at the cost of the chunk, and a
conversion is a plan (a rule that changes nothing changes nothing)."""
import subprocess
import zipfile

import numpy as np
import pytest
import torch

from ckptlib import BIN_PATH, Catalog, Plan

CHUNK = 64 << 10


def rchar():
    """Bytes this process has read with read/pread so far."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def read_in_chunks(cat, name, nbytes):
    out, at = bytearray(), 0
    while at < nbytes:
        n = min(CHUNK, nbytes - at)
        out += cat.read(name, at, n)
        at += n
    return bytes(out)


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    d = tmp_path_factory.mktemp("views")
    torch.manual_seed(0)
    w = torch.randn(1024, 1024)
    sd = {"w_t": w.t(), "cols": w[:, ::4], "row_block": w[100:300]}
    torch.save(sd, d / "views.pt")
    # The same archive, every record DEFLATE-compressed (a re-zipped file).
    with zipfile.ZipFile(d / "views.pt") as src, zipfile.ZipFile(d / "rezipped.pt", "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(info.filename, src.read(info))
    return d, {k: v.contiguous().numpy() for k, v in sd.items()}


@pytest.mark.parametrize("name", ["w_t", "cols"])
def test_strided_chunked_reads_cost_the_chunk(views, name):
    d, ref = views
    want = ref[name].tobytes()
    with Catalog(d / "views.pt") as cat:
        before = rchar()
        got = read_in_chunks(cat, name, len(want))
        read = rchar() - before
    assert got == want
    # Gathering the span (the whole 4 MiB storage) on every 64 KiB chunk
    # read 64x more; reading only each chunk's part of the storage reads the
    # tensor once — `cols`, every 4th column, as the spans its elements lie
    # in (one read, not one per 4-byte element), so 4x its bytes.
    spread = {"w_t": 1, "cols": 4}[name]
    assert read <= 1.1 * spread * len(want) + (1 << 20), (read, len(want))


def test_compressed_chunked_reads_resume(views):
    """A tensor in a DEFLATE record, read front to back in chunks, costs one
    pass over the record.  (A transposed view in such a record has every
    chunk spread over the whole record, which DEFLATE cannot seek into.)"""
    d, ref = views
    want = ref["row_block"].tobytes()
    compressed = sum(i.compress_size for i in zipfile.ZipFile(d / "rezipped.pt").infolist())
    with Catalog(d / "rezipped.pt") as cat:
        before = rchar()
        got = read_in_chunks(cat, "row_block", len(want))
        read = rchar() - before
    assert got == want
    # Inflating from the record's start for every chunk would read the
    # record ~13 times over; resuming reads it about once.
    assert read <= 2 * compressed + (2 << 20), (read, compressed)


@pytest.mark.parametrize("file", ["views.pt", "rezipped.pt"])
def test_loads_of_views_and_slices_match_torch(views, file):
    d, ref = views
    with Catalog(d / file) as cat, Plan(cat) as plan:
        plan.slice(1, 10, 700, pattern="w_t")
        plan.cast("BF16", pattern="cols")
        plan.transpose(pattern="row_block")
        plan.load(chunk_bytes=64 << 10)
        got = dict(plan.data())
    assert got["w_t"] == ref["w_t"][:, 10:700].tobytes()
    bf16 = torch.from_numpy(ref["cols"]).to(torch.bfloat16).view(torch.int16).numpy()
    assert got["cols"] == bf16.tobytes()
    assert got["row_block"] == np.ascontiguousarray(ref["row_block"].T).tobytes()


def convert(*args):
    r = subprocess.run([BIN_PATH, "convert", *map(str, args), "--no-sync"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("limit", [None, "300KB"])
def test_a_rule_that_changes_nothing_changes_nothing(tmp_path, limit):
    """`convert --select '*'` is byte-identical to `convert` on a torch file
    with tied weights: deduplication holds under any rule."""
    torch.manual_seed(1)
    emb = torch.nn.Parameter(torch.randn(100, 64))
    sd = {"wte.weight": emb, "h.0.w": torch.randn(64, 64), "lm_head.weight": emb, "h.0.b": torch.randn(64)}
    torch.save(sd, tmp_path / "tied.pt")
    shard = ["--max-shard-size", limit] if limit else []
    plain = tmp_path / ("plain" if limit else "plain.safetensors")
    ruled = tmp_path / ("ruled" if limit else "ruled.safetensors")
    convert(tmp_path / "tied.pt", plain, *shard)
    convert(tmp_path / "tied.pt", ruled, *shard, "--select", "*")
    if limit:
        names = sorted(p.name for p in plain.iterdir())
        assert names == sorted(p.name for p in ruled.iterdir())
        for n in names:
            assert (plain / n).read_bytes() == (ruled / n).read_bytes(), n
    else:
        assert plain.read_bytes() == ruled.read_bytes()
    with Catalog(plain) as cat:
        assert sorted(cat.names()) == ["h.0.b", "h.0.w", "lm_head.weight"]
        # The hub keeps the first complete name by sort order; the other is recorded.
        assert cat.metadata()["wte.weight"] == "lm_head.weight"


def test_convert_permutes_without_a_cast(tmp_path):
    """Bytes that need no conversion but land permuted go through the
    bounce ring (found by the Elixir binding's tests)."""
    import safetensors.numpy
    w = np.arange(12 * 40, dtype=np.float32).reshape(12, 40)
    safetensors.numpy.save_file({"w": w, "v": np.arange(5, dtype=np.int64)}, str(tmp_path / "x.safetensors"))
    for shard in ([], ["--max-shard-size", "1KB"]):
        out = tmp_path / ("t" if shard else "t.safetensors")
        convert(tmp_path / "x.safetensors", out, "--transpose", "*", *shard)
        with Catalog(out) as cat:
            assert cat.read("w") == np.ascontiguousarray(w.T).tobytes()


def test_a_buffer_set_before_a_cast_that_grows_the_tensor_is_refused(tmp_path):
    import safetensors.numpy
    safetensors.numpy.save_file({"w": np.ones(16, dtype=np.float16)}, str(tmp_path / "h.safetensors"))
    with Catalog(tmp_path / "h.safetensors") as cat, Plan(cat) as plan:
        plan.set_buffer(0, np.zeros(32, dtype=np.uint8))  # room for 16 f16
        plan.cast("F32")                    # now 64 bytes
        with pytest.raises(Exception) as e:
            plan.load()
        assert "buffer of 32 bytes" in e.value.message and e.value.tensor == "w"


@pytest.mark.parametrize("io,parts", [("direct", 4), ("buffered", 4), ("buffered", 2)])
def test_column_slices_read_spans_not_runs(tmp_path, io, parts):
    """A dim-1 slice of a row-major tensor is one short run per row: runs
    close together are read as one span and gathered (a few reads, not one
    per row); runs far apart are still read one by one, skipping the gap.
    From the page cache (buffered), only gaps up to a run long are read."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(1)
    near = rng.standard_normal((2048, 4096), dtype=np.float32)  # 16 KiB rows: 4 KiB runs, 12 KiB gaps
    far = rng.standard_normal((16, 65536), dtype=np.float32)    # 256 KiB rows: 64 KiB runs, 192 KiB gaps
    save_file({"near": near, "far": far}, tmp_path / "m.safetensors")
    with Catalog(tmp_path / "m.safetensors", io) as cat, Plan(cat) as plan:
        plan.split(1, 1, parts)
        plan.load(threads=1, chunk_bytes=1 << 20)
        got = dict(plan.data())
        stats = plan.stats()
    n, m = 4096 // parts, 65536 // parts
    assert got["near"] == near[:, n:2 * n].tobytes()
    assert got["far"] == far[:, m:2 * m].tobytes()
    rows = 2048 + 16
    if io == "buffered" and parts == 4:  # 12 KiB gaps after 4 KiB runs: a read per run
        assert stats["reads"] >= rows and stats["bytes_read"] == stats["bytes_needed"], stats
    else:  # 2048 rows of `near` in spans of at most the 1 MiB bounce buffer, `far` a read per row
        assert stats["reads"] <= 2048 * 16 // 1024 * 2 + 16 + 8, stats
