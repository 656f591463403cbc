"""Incremental checkpoints (issue 32 §2): ckpt.save(state, out, base=prev)
records every tensor's XXH3-64 and copies the tensors whose digest equals
the base's from the base's file by the kernel — a reflink on XFS (tested on
a loop-mounted XFS image with reflink=1).  Where the file system cannot
share the base's blocks (ext4, another file system) a copy in the kernel
would be slower than writing from memory: the save writes from memory and
its stats say why.  The output is byte for byte what a save without base
writes."""
import os
import subprocess
import threading

import numpy as np
import pytest
import safetensors.torch as st_torch
import torch

import ckpt

CKPT = os.environ.get("CKPT_BIN", "ckpt")


@pytest.fixture(autouse=True)
def clone_without_reflink(request, monkeypatch):
    """The tests of what is cloned run on this machine's disk (ext4), where
    a save would write everything from memory: there they let the kernel
    copy as if it shared blocks.  The tests on real file systems (an `fs`
    parameter) keep the save's own judgement."""
    if "fs" not in request.fixturenames:
        monkeypatch.setattr(ckpt._api, "_shares_blocks", lambda w, catalog, file: True)


def model(n=20, rows=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    sd = {f"layers.{i}.weight": torch.randn(rows, 256, generator=g) for i in range(n)}
    sd["embed"] = torch.randn(300, 64, generator=g).to(torch.bfloat16)
    return sd


def train_a_little(sd, names=("layers.3.weight", "layers.11.weight")):
    with torch.no_grad():
        for n in names:
            sd[n][0, 0] += 1.0


def full_save(sd, path):
    ckpt.save(sd, path, checksums=True)
    return open(path, "rb").read()


def verify(path):
    return subprocess.run([CKPT, "verify", str(path)], capture_output=True, text=True)


def test_unchanged_tensors_are_cloned_and_the_file_is_a_full_saves(tmp_path):
    sd = model()
    ckpt.save(sd, tmp_path / "step0.safetensors", checksums=True)
    train_a_little(sd)
    paths, stats = ckpt.save(sd, tmp_path / "step1.safetensors", base=tmp_path / "step0.safetensors",
                             return_stats=True)
    assert paths == [str(tmp_path / "step1.safetensors")]
    changed = 2 * 256 * 256 * 4
    total = sum(t.numel() * t.element_size() for t in sd.values())
    assert stats["full_write"] is None
    assert (stats["cloned_tensors"], stats["written_tensors"]) == (len(sd) - 2, 2)
    assert (stats["cloned_bytes"], stats["written_bytes"]) == (total - changed, changed)
    assert (tmp_path / "step1.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")
    r = verify(tmp_path / "step1.safetensors")
    assert r.returncode == 0 and "XXH3-64 of 21 tensors" in r.stdout, r.stdout + r.stderr
    got = st_torch.load_file(tmp_path / "step1.safetensors")  # a plain checkpoint any reader loads
    assert all(torch.equal(got[k], sd[k]) for k in sd)


def test_a_chain_of_increments_and_a_sharded_directory(tmp_path):
    sd = model()
    prev = None
    for step in range(3):
        out = tmp_path / f"step{step}"
        paths, stats = ckpt.save(sd, out, max_shard_size="300KB", base=prev, checksums=True, return_stats=True)
        assert len(paths) > 3 and paths[-1].endswith(".index.json")
        if prev is None:
            assert stats is None
        else:
            assert stats["written_tensors"] == 1 and stats["cloned_tensors"] == len(sd) - 1
        full = tmp_path / f"full{step}"
        ckpt.save(sd, full, max_shard_size="300KB", checksums=True)
        for p in paths:
            assert open(p, "rb").read() == (full / os.path.basename(p)).read_bytes(), p
        assert verify(out).returncode == 0
        train_a_little(sd, [f"layers.{step + 5}.weight"])
        prev = out


def test_changed_dtype_or_new_tensors_are_written_and_a_reshape_is_cloned(tmp_path):
    sd = model(n=4)
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    sd["layers.0.weight"] = sd["layers.0.weight"].to(torch.float16)  # same name, other dtype
    sd["layers.1.weight"] = sd["layers.1.weight"].reshape(512, 128)  # same bytes, other shape: cloned
    sd["new"] = torch.ones(10)
    paths, stats = ckpt.save(sd, tmp_path / "b.safetensors", base=tmp_path / "a.safetensors", return_stats=True)
    assert stats["written_tensors"] == 2 and stats["cloned_tensors"] == 4
    assert stats["tensors"]["layers.1.weight"] == {"cloned_bytes": 256 * 256 * 4, "written_bytes": 0}
    assert (tmp_path / "b.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")


@pytest.mark.parametrize("base, reason", [
    ("missing.safetensors", "the base cannot be used: .*missing.safetensors"),
    ("plain.safetensors", "the base records no digests"),
    ("garbage.safetensors", "the base cannot be used"),
])
def test_an_unusable_base_gets_a_full_write_and_the_stats_say_why(tmp_path, base, reason):
    sd = model(n=3)
    ckpt.save(sd, tmp_path / "plain.safetensors")
    (tmp_path / "garbage.safetensors").write_bytes(b"not a checkpoint at all" * 10)
    paths, stats = ckpt.save(sd, tmp_path / "out.safetensors", base=tmp_path / base, return_stats=True)
    assert stats["cloned_tensors"] == 0 and stats["written_tensors"] == len(sd)
    assert __import__("re").search(reason, stats["full_write"]), stats["full_write"]
    assert (tmp_path / "out.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")


def test_a_base_whose_header_changed_is_not_trusted(tmp_path):
    sd = model(n=3)
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    data = bytearray((tmp_path / "a.safetensors").read_bytes())
    at = data.index(b'"dtype":"F32"')
    data[at + 9:at + 12] = b"I32"  # an edit that keeps the header's length: the file still opens
    (tmp_path / "a.safetensors").write_bytes(bytes(data))
    paths, stats = ckpt.save(sd, tmp_path / "b.safetensors", base=tmp_path / "a.safetensors", return_stats=True)
    assert stats["cloned_tensors"] == 0 and "header changed" in stats["full_write"]
    r = verify(tmp_path / "a.safetensors")  # and ckpt verify says the same (it named a wrong cause before)
    assert r.returncode != 0 and "at byte 8: header checksum is" in r.stderr and "the header changed" in r.stderr


def test_verify_finds_a_base_whose_data_changed_under_its_digest(tmp_path):
    """The digest compared is the one the base records; the bytes copied are
    the base's.  A base whose data was altered after it was written gives an
    output that ckpt verify refuses, naming the tensor."""
    sd = model(n=3)
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    data = bytearray((tmp_path / "a.safetensors").read_bytes())
    data[-5] ^= 0xFF  # the last tensor's bytes ("layers.2.weight" lies last in safetensors' order)
    (tmp_path / "a.safetensors").write_bytes(bytes(data))
    ckpt.save(sd, tmp_path / "b.safetensors", base=tmp_path / "a.safetensors")
    r = verify(tmp_path / "b.safetensors")
    assert r.returncode != 0 and "CHECKSUM" in r.stderr


def test_numpy_arrays_and_non_contiguous_tensors(tmp_path):
    arrays = {"a": np.arange(4096, dtype=np.float32).reshape(64, 64), "b": np.ones((8, 8), np.int16)}
    ckpt.save(arrays, tmp_path / "a.safetensors", checksums=True)
    paths, stats = ckpt.save(arrays, tmp_path / "b.safetensors", base=tmp_path / "a.safetensors", return_stats=True)
    assert stats["cloned_tensors"] == 2
    t = torch.randn(64, 64)
    ckpt.save({"t": t.t().contiguous()}, tmp_path / "c.safetensors", checksums=True)
    paths, stats = ckpt.save({"t": t.t()}, tmp_path / "d.safetensors", base=tmp_path / "c.safetensors",
                             return_stats=True)  # hashed a few rows at a time, as it is written
    assert stats["cloned_tensors"] == 1
    assert (tmp_path / "d.safetensors").read_bytes() == (tmp_path / "c.safetensors").read_bytes()


def test_background_incremental_stages_only_what_changed(tmp_path):
    sd = model()
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    train_a_little(sd)
    for staging in ("copy", "fork"):
        h = ckpt.save(sd, tmp_path / f"b-{staging}.safetensors", base=tmp_path / "a.safetensors", background=True,
                      staging=staging)
        h.wait()
        assert h.stats["incremental"]["cloned_tensors"] == len(sd) - 2
        if staging == "copy":
            assert h.stats["staged_bytes"] == 2 * 256 * 256 * 4
        full = full_save(sd, tmp_path / f"full-{staging}.safetensors")
        assert (tmp_path / f"b-{staging}.safetensors").read_bytes() == full


# -- large tensors: per-chunk digests (CKPT_CHUNK_METADATA_KEY) ----------------

CHUNK = 1 << 20


def embedding_model(rows=12288, seed=0):
    """A 12 MiB embedding (chunked), a 4 MiB tensor (chunked: the threshold)
    and a small one (not)."""
    g = torch.Generator().manual_seed(seed)
    return {"embed": torch.randn(rows, 256, generator=g), "proj": torch.randn(4096, 256, generator=g),
            "norm": torch.randn(256, generator=g)}


def update_rows(sd, rows=(5, 6, 9000)):
    with torch.no_grad():
        for r in rows:
            sd["embed"][r] += 1.0


def header(path):
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    return __import__("json").loads(data[8:8 + n]), 8 + n, data


def test_each_unchanged_byte_is_hashed_once_off_the_callers_thread(tmp_path, monkeypatch):
    """Hashing is most of an incremental save's time: an unchanged tensor
    is hashed once, whole (its chunk digests are the base's, where its
    chunks lie as the base's), on the save's hashing threads; a changed one
    is hashed again for its chunks, to find the unchanged ones.  The output
    is still byte for byte a full save's, chunk digests included."""
    sd = embedding_model()
    sd.update({f"more.{i}": torch.randn(4096, 256) for i in range(4)})  # chunked, 4 MiB each
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    update_rows(sd, rows=(5000,))
    calls, hash_ = [], ckpt._ckpt.xxh3_64

    def counted(data, *chunks):
        calls.append((memoryview(data).nbytes, bool(chunks and chunks[-1]), threading.current_thread().name))
        return hash_(data, *chunks)
    monkeypatch.setattr(ckpt._api._ckpt, "xxh3_64", counted)
    paths, stats = ckpt.save(sd, tmp_path / "b.safetensors", base=tmp_path / "a.safetensors", return_stats=True)
    monkeypatch.undo()
    assert stats["cloned_tensors"] == len(sd) - 1 and stats["partial_tensors"] == 1
    embed = sd["embed"].numel() * 4
    whole = sum(n for n, chunked, _ in calls if not chunked)
    assert whole == sum(t.numel() * t.element_size() for t in sd.values()), calls
    assert [n for n, chunked, _ in calls if chunked] == [embed], calls  # the changed one, for its chunks
    assert all(name.startswith("ckpt-hash") for *_, name in calls), calls
    assert (tmp_path / "b.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")
    assert verify(tmp_path / "b.safetensors").returncode == 0


def test_a_changed_tensor_is_written_while_the_others_are_hashed(tmp_path, monkeypatch):
    """The writer gets a changed tensor's bytes as soon as its digests say
    it changed, while the hashing threads go on with the tensors after it
    (the write overlaps the hashing instead of following it).  Here
    the hashes of the last tensors wait for the write of the changed one:
    before, every write came after the last hash, and they waited in vain."""
    sd = model()
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    train_a_little(sd, names=("layers.3.weight",))
    changed = sd["layers.3.weight"]
    written, late_hashes_waited = threading.Event(), []
    hash_against, save_write_ = ckpt._api._hash_against, ckpt._api._save_write

    def hash_late_after_the_write(fw, t, *args):
        if t is sd["layers.19.weight"] or t is sd["layers.18.weight"]:
            late_hashes_waited.append(not written.wait(timeout=10))
        return hash_against(fw, t, *args)

    def save_write(w, entries, bar, *args, **kw):
        done = save_write_(w, entries, bar, *args, **kw)
        if any(e[2] is changed for e in entries):
            written.set()
        return done
    monkeypatch.setattr(ckpt._api, "_hash_against", hash_late_after_the_write)
    monkeypatch.setattr(ckpt._api, "_save_write", save_write)
    paths, stats = ckpt.save(sd, tmp_path / "b.safetensors", base=tmp_path / "a.safetensors", return_stats=True)
    monkeypatch.undo()
    assert late_hashes_waited == [False, False], "the changed tensor was written only after every hash"
    assert stats["written_tensors"] == 1 and stats["cloned_tensors"] == len(sd) - 1, stats
    assert stats["written_bytes"] == changed.numel() * 4 and stats["tensors"]["layers.3.weight"]["written_bytes"] > 0
    assert (tmp_path / "b.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")


def test_the_writer_says_whether_the_output_can_share_a_files_blocks(tmp_path):
    """ckpt_writer_shares_blocks, which an incremental save asks before it
    clones: no on this machine's test folder unless it reflinks, no for a
    remote base, and an error for a file the base does not have."""
    ckpt.save({"w": torch.ones(4096)}, tmp_path / "a.safetensors", checksums=True)
    cat = ckpt._sources.catalog(str(tmp_path / "a.safetensors"), False, None, open)
    w = ckpt._ckpt.Writer(str(tmp_path / "b.safetensors"))
    try:
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True).stdout.strip()
        assert w.shares_blocks(cat, 0) is (fs in ("xfs", "btrfs", "bcachefs")), fs
        with pytest.raises(ckpt.Error, match="one of its files"):
            w.shares_blocks(cat, 1)
    finally:
        w.abort()
        cat.close()


def test_chunk_digests_lie_on_the_files_block_edges(tmp_path):
    sd = embedding_model()
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    head, start, data = header(tmp_path / "a.safetensors")
    chunks = __import__("json").loads(head["__metadata__"]["ckpt.xxh3_64_chunks"])
    assert chunks["__chunk_bytes__"] == str(CHUNK) and set(chunks) == {"__chunk_bytes__", "embed", "proj"}
    for name in ("embed", "proj"):
        b, e = (start + o for o in head[name]["data_offsets"])
        n = e - b
        digests = [int(chunks[name][i:i + 16], 16) for i in range(0, len(chunks[name]), 16)]
        assert len(digests) == -(-n // CHUNK) + 1  # ceil(n / C) + 1, wherever the tensor lands
        edges = [b] + list(range((b // CHUNK + 1) * CHUNK, e, CHUNK)) + [e]  # the file's multiples of 1 MiB
        want = [ckpt._ckpt.xxh3_64(data[x:y]) for x, y in zip(edges, edges[1:])]
        want += [ckpt._ckpt.xxh3_64(b"")] * (len(digests) - len(want))  # the empty last one
        assert digests == want, name


def test_a_large_tensor_with_a_few_changed_rows_clones_its_other_chunks(tmp_path):
    sd = embedding_model()
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    update_rows(sd)  # rows 5 and 6 (one chunk), row 9000 (another)
    paths, stats = ckpt.save(sd, tmp_path / "b.safetensors", base=tmp_path / "a.safetensors", return_stats=True)
    embed = sd["embed"].numel() * 4
    assert stats["partial_tensors"] == 1 and stats["cloned_tensors"] == 2 and stats["written_tensors"] == 0
    assert stats["tensors"]["embed"]["written_bytes"] <= 2 * CHUNK
    assert stats["tensors"]["embed"]["cloned_bytes"] == embed - stats["tensors"]["embed"]["written_bytes"]
    assert stats["tensors"]["proj"] == {"cloned_bytes": 4096 * 256 * 4, "written_bytes": 0}
    assert stats["written_bytes"] == stats["tensors"]["embed"]["written_bytes"]
    assert (tmp_path / "b.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")
    assert verify(tmp_path / "b.safetensors").returncode == 0
    got = st_torch.load_file(tmp_path / "b.safetensors")
    assert all(torch.equal(got[k], sd[k]) for k in sd)


def test_partly_cloned_tensors_in_background_and_non_contiguous(tmp_path):
    sd = embedding_model()
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    update_rows(sd, rows=(5000,))  # inside one whole chunk
    for staging in ("copy", "fork"):
        h = ckpt.save(sd, tmp_path / f"b-{staging}.safetensors", base=tmp_path / "a.safetensors", background=True,
                      staging=staging)
        h.wait()
        inc = h.stats["incremental"]
        assert inc["partial_tensors"] == 1 and inc["tensors"]["embed"]["written_bytes"] == CHUNK, inc
        full = full_save(sd, tmp_path / f"full-{staging}.safetensors")
        assert (tmp_path / f"b-{staging}.safetensors").read_bytes() == full
    t = embedding_model()["embed"]
    ckpt.save({"t": t.t().contiguous()}, tmp_path / "c.safetensors", checksums=True)
    with torch.no_grad():
        t[:, 7] += 1  # a column of t: a row of what is saved
    paths, stats = ckpt.save({"t": t.t()}, tmp_path / "d.safetensors", base=tmp_path / "c.safetensors",
                             return_stats=True)  # hashed and written a few rows at a time
    assert stats["partial_tensors"] == 1 and stats["written_bytes"] <= 2 * CHUNK
    assert (tmp_path / "d.safetensors").read_bytes() == full_save({"t": t.t().contiguous()},
                                                                  tmp_path / "e.safetensors")


# -- tensors that grew: rows appended, a vocabulary grown -----------------------

def grow(t, rows, seed=1):
    """t with `rows` new rows after its own (its leading bytes unchanged)."""
    g = torch.Generator().manual_seed(seed)
    return torch.cat([t, torch.randn(rows, *t.shape[1:], generator=g).to(t.dtype)])


def data_start(path, name):
    head, start, _ = header(path)
    return start + head[name]["data_offsets"][0]


def test_a_grown_tensor_whose_chunks_line_up_clones_its_leading_chunks(tmp_path):
    """12,000 rows of 1 KiB grown to 12,200: 13 chunk digests either way, the
    same digits in the shape and the offsets, so the header keeps its length
    and the embedding (first in the file) its place: its chunks lie on the
    base's, and every chunk of the old rows is cloned — the base's last,
    partial one too, whose bytes the memory's first 12,000 rows hash alike
    over the same range — and only the new rows are written."""
    sd = embedding_model(rows=12000)
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    sd["embed"] = grow(sd["embed"], 200)
    sd["norm"] = grow(sd["norm"], 64)  # small, no chunks: its 1 KiB of old bytes cloned, 256 bytes written
    paths, stats = ckpt.save(sd, tmp_path / "b.safetensors", base=tmp_path / "a.safetensors", return_stats=True)
    phase = data_start(tmp_path / "a.safetensors", "embed") % CHUNK
    assert data_start(tmp_path / "b.safetensors", "embed") % CHUNK == phase  # the chunks line up
    old, new = 12000 * 1024, 12200 * 1024
    assert stats["tensors"]["embed"] == {"cloned_bytes": old, "written_bytes": new - old}, stats
    assert stats["tensors"]["norm"] == {"cloned_bytes": 1024, "written_bytes": 256}
    assert stats["tensors"]["proj"] == {"cloned_bytes": 4096 * 1024, "written_bytes": 0}
    assert (stats["grown_tensors"], stats["partial_tensors"], stats["cloned_tensors"]) == (2, 2, 1)
    assert stats["written_bytes"] == new - old + 256 and stats["cloned_bytes"] == old + 1024 + 4096 * 1024
    assert (tmp_path / "b.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")
    assert verify(tmp_path / "b.safetensors").returncode == 0
    got = st_torch.load_file(tmp_path / "b.safetensors")
    assert all(torch.equal(got[k], sd[k]) for k in sd)


def test_a_grown_tensor_whose_chunks_moved_is_compared_at_the_bases_edges(tmp_path):
    """12,288 rows (12 MiB) grown to 12,800 (a 13th and 14th chunk digest:
    the header grows by 16 bytes and moves every tensor's data): the
    output's chunks no longer lie on the base's, so the memory's leading
    bytes are hashed at the base's edges. The unchanged ones are copied
    from the base (by the kernel: no block of them is shared, the offsets
    differ modulo the block size), a changed row's chunk and the new rows
    written; the proj tensor after it, moved too, with one row changed, is
    compared at the base's edges as well."""
    sd = embedding_model(rows=12288)
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    sd["embed"] = grow(sd["embed"], 512)
    update_rows(sd, rows=(5000,))  # one chunk of the old rows changed
    with torch.no_grad():
        sd["proj"][100] += 1  # the same shape, moved by the embedding's growth: compared at the base's edges
    paths, stats = ckpt.save(sd, tmp_path / "b.safetensors", base=tmp_path / "a.safetensors", return_stats=True)
    a, b = data_start(tmp_path / "a.safetensors", "embed"), data_start(tmp_path / "b.safetensors", "embed")
    assert a % CHUNK != b % CHUNK and a % 4096 != b % 4096  # moved: no chunk lines up
    old, new = 12288 * 1024, 12800 * 1024

    def touched(start, n, row):  # bytes of the base's chunks (file edges) that a changed row touches
        edges = ((k * CHUNK - start % CHUNK, (k + 1) * CHUNK - start % CHUNK) for k in range(n // CHUNK + 2))
        return sum(min(n, e) - max(0, b) for b, e in edges if b < (row + 1) * 1024 and e > row * 1024)
    changed = touched(a, old, 5000)
    assert stats["tensors"]["embed"] == {"cloned_bytes": old - changed, "written_bytes": new - old + changed}, stats
    changed = touched(data_start(tmp_path / "a.safetensors", "proj"), 4096 * 1024, 100)
    assert stats["tensors"]["proj"] == {"cloned_bytes": 4096 * 1024 - changed, "written_bytes": changed}, stats
    assert (stats["grown_tensors"], stats["partial_tensors"]) == (1, 2)
    assert (tmp_path / "b.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")
    assert verify(tmp_path / "b.safetensors").returncode == 0
    # Rows removed (the tensor shrank): its remaining leading chunks are cloned too.
    sd["embed"] = sd["embed"][:6000].clone()
    paths, stats = ckpt.save(sd, tmp_path / "c.safetensors", base=tmp_path / "b.safetensors", return_stats=True)
    assert stats["tensors"]["embed"]["cloned_bytes"] >= 6000 * 1024 - 2 * CHUNK, stats
    assert (tmp_path / "c.safetensors").read_bytes() == full_save(sd, tmp_path / "full2.safetensors")


def test_a_grown_tensor_whose_old_rows_changed_is_written(tmp_path):
    sd = embedding_model(rows=6000)
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    with torch.no_grad():
        sd["embed"] += 1  # every old row
        sd["norm"] += 1
    sd["embed"], sd["norm"] = grow(sd["embed"], 100), grow(sd["norm"], 10)
    paths, stats = ckpt.save(sd, tmp_path / "b.safetensors", base=tmp_path / "a.safetensors", return_stats=True)
    assert stats["written_tensors"] == 2 and stats["grown_tensors"] == 0 and stats["cloned_tensors"] == 1
    assert (tmp_path / "b.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")


def test_verify_names_the_chunk_whose_bytes_changed(tmp_path):
    sd = embedding_model()
    ckpt.save(sd, tmp_path / "a.safetensors", checksums=True)
    head, start, data = header(tmp_path / "a.safetensors")
    b = start + head["embed"]["data_offsets"][0]
    at = (b // CHUNK + 3) * CHUNK + 100  # inside the file's 4th MiB of the tensor: its chunk 3
    data = bytearray(data)
    data[at] ^= 1
    (tmp_path / "a.safetensors").write_bytes(bytes(data))
    r = verify(tmp_path / "a.safetensors")
    lo, hi = (b // CHUNK + 3) * CHUNK - b, (b // CHUNK + 4) * CHUNK - b
    assert r.returncode != 0 and "tensor 'embed'" in r.stderr, r.stderr
    assert f"chunk 3, the tensor's bytes [{lo}, {hi})" in r.stderr and f"at byte {b + lo}" in r.stderr, r.stderr


# -- on real file systems: XFS with reflink=1, ext4 ---------------------------

def _mount_image(tmp_path, fs):
    image, mnt = tmp_path / f"{fs}.img", tmp_path / fs
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(400 << 20)
    mkfs = {"xfs": ["mkfs.xfs", "-q", "-f", "-m", "reflink=1"], "ext4": ["mkfs.ext4", "-q", "-F"]}[fs]
    r = subprocess.run(mkfs + [str(image)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mkfs for {fs} failed here: {r.stderr.strip()}")
    r = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a loop device here: {r.stderr.strip()}")
    return mnt


def _used(path):
    s = os.statvfs(path)
    return (s.f_blocks - s.f_bfree) * s.f_frsize


@pytest.mark.parametrize("fs", ["xfs", "ext4"])
def test_on_a_real_file_system(tmp_path, fs):
    mnt = _mount_image(tmp_path, fs)
    try:
        sd = model(n=20, rows=1024)  # 20 MiB
        ckpt.save(sd, mnt / "step0.safetensors", checksums=True)
        train_a_little(sd, ["layers.4.weight"])  # 1 MiB of 20 changed
        before = _used(mnt)
        paths, stats = ckpt.save(sd, mnt / "step1.safetensors", base=mnt / "step0.safetensors", return_stats=True)
        grown = _used(mnt) - before
        size = os.path.getsize(mnt / "step1.safetensors")
        if fs == "xfs":  # shared blocks: the file costs about what changed, plus a block at each tensor's edges
            assert stats["full_write"] is None
            assert stats["written_bytes"] == 1 << 20 and stats["cloned_tensors"] == len(sd) - 1
            assert grown <= (1 << 20) + 2 * len(sd) * 4096 + (256 << 10), (grown, size)
            frag = subprocess.run(["filefrag", "-v", str(mnt / "step1.safetensors")], capture_output=True, text=True)
            assert "shared" in frag.stdout
        else:  # no reflink: written from memory (a copy in the kernel is slower), and the stats say why
            assert stats["cloned_tensors"] == 0 and stats["written_tensors"] == len(sd)
            assert "no reflink" in stats["full_write"], stats["full_write"]
            assert grown >= size - (64 << 10)
        assert (mnt / "step1.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")
        assert verify(mnt / "step1.safetensors").returncode == 0
        # A base on another file system: no block can be shared, so written from memory, and exact.
        paths, stats = ckpt.save(sd, tmp_path / "elsewhere.safetensors", base=mnt / "step0.safetensors",
                                 return_stats=True)
        assert stats["cloned_tensors"] == 0 and "no reflink" in stats["full_write"], stats
        assert (tmp_path / "elsewhere.safetensors").read_bytes() == (tmp_path / "full.safetensors").read_bytes()
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("fs", ["xfs", "ext4"])
def test_chunks_on_a_real_file_system(tmp_path, fs):
    """A 48 MiB embedding with three rows changed: the output shares every
    unchanged chunk's blocks with the base on XFS (about 2 MiB written),
    and is copied in the kernel on ext4; exact on both."""
    mnt = _mount_image(tmp_path, fs)
    try:
        sd = embedding_model(rows=49152)
        ckpt.save(sd, mnt / "step0.safetensors", checksums=True)
        update_rows(sd)
        os.sync()
        before = _used(mnt)
        paths, stats = ckpt.save(sd, mnt / "step1.safetensors", base=mnt / "step0.safetensors", return_stats=True)
        os.sync()
        grown = _used(mnt) - before
        written = stats["tensors"]["embed"]["written_bytes"]
        size = os.path.getsize(mnt / "step1.safetensors")
        if fs == "xfs":  # the changed chunks, and a block at each tensor's edges: whole chunks are shared
            assert stats["partial_tensors"] == 1 and written <= 2 * CHUNK
            assert grown <= written + 8 * 4096 + (256 << 10), (grown, written, size)
            frag = subprocess.run(["filefrag", "-v", str(mnt / "step1.safetensors")], capture_output=True, text=True)
            assert "shared" in frag.stdout
            st = os.stat(mnt / "step1.safetensors")
            assert st.st_blocks * 512 >= size - 4096  # every block is there: shared, not a hole
        else:  # no reflink: written from memory
            assert stats["partial_tensors"] == 0 and written == sd["embed"].numel() * 4 and stats["full_write"]
            assert grown >= size - (64 << 10)
        assert (mnt / "step1.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")
        assert verify(mnt / "step1.safetensors").returncode == 0
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("fs", ["xfs", "ext4"])
def test_grown_tensors_on_a_real_file_system(tmp_path, fs):
    """A 47 MiB embedding grown by 100 rows (its chunks line up with the
    base's: the same chunk count and header length): on XFS the output
    shares the old rows' blocks, and the tensor after it too (moved by
    100 KiB, 25 whole blocks); only the new rows take new blocks. Grown by
    a chunk's worth more (a new chunk digest: the header grows by 16 bytes,
    every tensor moves off the base's blocks), the old rows are still
    copied, not written from memory, but by the kernel into new blocks.
    Exact on both, and written from memory on ext4 (no reflink)."""
    mnt = _mount_image(tmp_path, fs)
    try:
        sd = embedding_model(rows=48000)
        ckpt.save(sd, mnt / "step0.safetensors", checksums=True)
        sd["embed"] = grow(sd["embed"], 100)
        os.sync()
        before = _used(mnt)
        paths, stats = ckpt.save(sd, mnt / "step1.safetensors", base=mnt / "step0.safetensors", return_stats=True)
        os.sync()
        grown = _used(mnt) - before
        size = os.path.getsize(mnt / "step1.safetensors")
        assert data_start(mnt / "step1.safetensors", "embed") == data_start(mnt / "step0.safetensors", "embed")
        if fs == "xfs":  # the new rows, and a block at each tensor's edges
            assert stats["tensors"]["embed"] == {"cloned_bytes": 48000 * 1024, "written_bytes": 100 * 1024}, stats
            assert grown <= 100 * 1024 + 8 * 4096 + (256 << 10), (grown, size)
            frag = subprocess.run(["filefrag", "-v", str(mnt / "step1.safetensors")], capture_output=True, text=True)
            assert "shared" in frag.stdout
        else:  # no reflink: written from memory
            assert stats["tensors"]["embed"] == {"cloned_bytes": 0, "written_bytes": 48100 * 1024}, stats
            assert grown >= size - (64 << 10)
        assert (mnt / "step1.safetensors").read_bytes() == full_save(sd, tmp_path / "full.safetensors")
        assert verify(mnt / "step1.safetensors").returncode == 0

        sd["embed"] = grow(sd["embed"], 1100)  # past the last chunk: one more chunk digest
        before = _used(mnt)
        paths, stats = ckpt.save(sd, mnt / "step2.safetensors", base=mnt / "step1.safetensors", return_stats=True)
        os.sync()
        grown = _used(mnt) - before
        size = os.path.getsize(mnt / "step2.safetensors")
        a, b = data_start(mnt / "step1.safetensors", "embed"), data_start(mnt / "step2.safetensors", "embed")
        assert a % 4096 != b % 4096
        if fs == "xfs":
            assert stats["tensors"]["embed"] == {"cloned_bytes": 48100 * 1024, "written_bytes": 1100 * 1024}, stats
        else:
            assert stats["tensors"]["embed"] == {"cloned_bytes": 0, "written_bytes": 49200 * 1024}, stats
        assert grown >= size - (64 << 10)  # copied by the kernel, on XFS too: nothing lines up to share
        assert (mnt / "step2.safetensors").read_bytes() == full_save(sd, tmp_path / "full2.safetensors")
        assert verify(mnt / "step2.safetensors").returncode == 0
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
