"""Checksums written by ckpt convert --checksums, checked by ckpt verify."""
import json
import random
import subprocess
import zipfile

import numpy as np
import pytest
import safetensors.numpy
from ckptlib import BIN_PATH, Catalog
from safetensors import safe_open

KEY = "ckpt.xxh3_64"


def run(*args):
    return subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def source(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {f"layer.{i}.w": rng.standard_normal((32, 16 + i)).astype(np.float32) for i in range(8)}
    arrays["empty"] = np.zeros((0, 4), dtype=np.float16)
    path = tmp_path / "src.safetensors"
    safetensors.numpy.save_file(arrays, str(path), metadata={"format": "np"})
    return path, arrays


@pytest.mark.parametrize("shard", [None, "5KB"])
def test_checksums_recorded_verified_and_readable(tmp_path, source, shard):
    src, arrays = source
    out = tmp_path / ("out" if shard else "out.safetensors")
    args = ["convert", src, out, "--verify"] + (["--max-shard-size", shard] if shard else [])
    r = run(*args)
    assert r.returncode == 0, r.stderr
    assert f"verified {len(arrays)} tensors" in r.stderr
    r = run("verify", out)
    assert r.returncode == 0 and f"checked the XXH3-64 of {len(arrays)} tensors and " in r.stdout
    # The reference still reads every file; each holds the map of its own tensors.
    files = sorted(out.glob("*.safetensors")) if shard else [out]
    seen = set()
    for f in files:
        with safe_open(str(f), "np") as h:
            meta = h.metadata()
            assert set(json.loads(meta[KEY])) == set(h.keys()) | {"__metadata__"}  # + the header's digest
            seen |= set(h.keys())
            for k in h.keys():
                np.testing.assert_array_equal(h.get_tensor(k), arrays[k])
    assert seen == set(arrays)


def test_every_flipped_bit_is_found(tmp_path, source):
    src, arrays = source
    out = tmp_path / "out.safetensors"
    assert run("convert", src, out, "--checksums").returncode == 0
    pristine = out.read_bytes()
    with Catalog(out) as cat:
        infos = {n: cat.info(n) for n in cat.names()}
    rng = random.Random(1)
    for name, info in infos.items():
        if not info["nbytes"]:
            continue
        for _ in range(3):
            at = info["offset"] + rng.randrange(info["nbytes"])
            data = bytearray(pristine)
            data[at] ^= 1 << rng.randrange(8)
            out.write_bytes(bytes(data))
            r = run("verify", out)
            assert r.returncode == 1, name
            assert "[CKPT_E_CHECKSUM/CKPT_D_CHECKSUM]" in r.stderr and f"tensor '{name}'" in r.stderr
    # One flipped bit in every byte of the length and the header: each is
    # found (structure, the checksum map, or the header's own digest).
    header_end = 8 + int.from_bytes(pristine[:8], "little")
    for at in range(header_end):
        data = bytearray(pristine)
        data[at] ^= 1 << (at % 8)
        out.write_bytes(bytes(data))
        r = run("verify", out)
        assert r.returncode == 1, (at, r.stdout)


def test_verify_without_checksums_checks_structure(tmp_path, source):
    src, _ = source
    r = run("verify", src)
    assert r.returncode == 0 and "none recorded" in r.stdout
    data = src.read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[:-7])
    r = run("verify", tmp_path / "cut.safetensors")
    assert r.returncode == 1 and "[CKPT_E_TRUNCATED]" in r.stderr


def test_torch_source_with_checksums(tmp_path):
    import torch
    w = torch.arange(20.).reshape(4, 5)
    torch.save({"w": w, "t": torch.arange(6.).reshape(2, 3).t()}, tmp_path / "m.pt")
    r = run("convert", tmp_path / "m.pt", tmp_path / "m.safetensors", "--verify")
    assert r.returncode == 0, r.stderr
    assert run("verify", tmp_path / "m.safetensors").returncode == 0


# ---- one summary, saying what was checked (issue 27, item 11) ----------------------------

def write_checkpoint(kind, tmp_path):
    """Three F32 tensors in a file of `kind`, written by its own library."""
    import torch
    rng = np.random.default_rng(3)
    arrays = {f"l{i}.w": rng.standard_normal((8, 4)).astype(np.float32) for i in range(3)}
    path = tmp_path / {"safetensors": "m.safetensors", "torch": "m.bin", "npz": "m.npz", "npz-deflate": "c.npz",
                       "gguf": "m.gguf", "dcp": "dcp", "checksums": "sum.safetensors"}[kind]
    if kind == "safetensors":
        safetensors.numpy.save_file(arrays, str(path))
    elif kind == "torch":
        torch.save({k: torch.from_numpy(v) for k, v in arrays.items()}, path)
    elif kind in ("npz", "npz-deflate"):
        (np.savez if kind == "npz" else np.savez_compressed)(path, **arrays)
    elif kind == "gguf":
        import gguf
        w = gguf.GGUFWriter(str(path), "llama")
        for k, v in arrays.items():
            w.add_tensor(k, v)
        w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    elif kind == "dcp":
        import torch.distributed.checkpoint as dcp
        dcp.save({k: torch.from_numpy(v) for k, v in arrays.items()}, checkpoint_id=str(path), no_dist=True)
    else:
        safetensors.numpy.save_file(arrays, str(tmp_path / "plain.safetensors"))
        assert run("convert", tmp_path / "plain.safetensors", path, "--checksums", "-q").returncode == 0
    return path


# What each kind records: ZIP members (torch.save records, .npz arrays, the
# torch.save items of DCP files), ckpt's digests, or nothing.
RECORDS = {"safetensors": None, "gguf": None, "torch": "crc", "npz": "crc", "npz-deflate": "crc", "dcp": "crc",
           "checksums": "xxh3"}


@pytest.mark.parametrize("kind", sorted(RECORDS))
def test_verify_prints_one_summary_of_what_it_checked(tmp_path, kind):
    import ckpt
    path = write_checkpoint(kind, tmp_path)
    with ckpt.open(path) as c:
        report = c.verify(progress=False, report=True)
    r = run("verify", path)
    assert r.returncode == 0, r.stderr
    # stderr is for the progress bar (on a terminal) and errors only: no
    # second summary to contradict the first.
    assert r.stderr == ""
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout
    line = lines[0]
    assert line.startswith(f"{path}: OK: structure valid (3 tensors in 1 file); "), line
    if RECORDS[kind] is None:
        assert report == {"tensor_digests": 0, "chunk_digests": 0, "header_digests": 0, "zip_crc32": 0,
                          "file_sha256": 0, "bytes": 0, "tensors": 0}
        assert line.endswith(f"none recorded to check (this {kind} checkpoint records no checksums; "
                             "convert with --checksums to add them)"), line
    elif RECORDS[kind] == "crc":
        if kind != "dcp":  # a DCP file's items are torch.save archives inside it, not the file
            assert report["zip_crc32"] == len(zipfile.ZipFile(path).infolist())
        assert report["zip_crc32"] > 0 and report["tensor_digests"] == 0 and report["tensors"] == 3
        assert f"; checked the CRC-32 of {report['zip_crc32']} ZIP members, covering all 3 tensors: " in line, line
    else:
        assert report == {"tensor_digests": 3, "chunk_digests": 0, "header_digests": 1, "zip_crc32": 0,
                          "file_sha256": 0, "bytes": 384, "tensors": 3}
        assert "; checked the XXH3-64 of 3 tensors and 1 header, covering all 3 tensors: 384 B re-read in " in line
    # --json: the same counts, its "checksums" the library's report as the
    # Python package gives it.
    r = run("verify", "--json", path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    doc = json.loads(r.stdout)
    assert doc["path"] == str(path) and doc["tensors"] == 3 and doc["files"] == 1 and doc["seconds"] >= 0
    assert doc["format"] == {"checksums": "safetensors", "npz-deflate": "npz"}.get(kind, kind)
    assert doc["checksums"] == report


def test_verify_counts_the_chunk_digests_it_checked(tmp_path):
    """Tensors of at least 4 MiB record a digest per 1 MiB chunk
    (ckpt.xxh3_64_chunks): ckpt verify counts those it checked, and says so."""
    import ckpt
    arrays = {"big": np.arange(5 << 18, dtype=np.float32),  # 5 MiB: ceil(5) + 1 = 6 chunks
              "bigger": np.ones((3 << 20) + 1, np.float32),  # 12 MiB + 4 B: 13 + 1 = 14
              "small": np.zeros(4, np.float32)}  # none
    out = tmp_path / "chunked.safetensors"
    ckpt.save(arrays, out, checksums=True)
    with ckpt.open(out) as c:
        report = c.verify(progress=False, report=True)
    assert report["chunk_digests"] == 20 and report["tensor_digests"] == 3 and report["header_digests"] == 1
    r = run("verify", out)
    assert r.returncode == 0, r.stderr
    assert "; checked the XXH3-64 of 3 tensors, 20 chunks and 1 header, covering all 3 tensors: " in r.stdout, r.stdout
    doc = json.loads(run("verify", "--json", out).stdout)
    assert doc["checksums"] == report


def test_verify_covering_only_some_tensors_says_so(tmp_path):
    """A file whose checksum map names some of its tensors: the summary says
    which share the digests covered."""
    arrays = {"a": np.ones(4, np.float32), "b": np.zeros(4, np.float32), "c": np.arange(3, dtype=np.int64)}
    out = tmp_path / "sum.safetensors"
    safetensors.numpy.save_file(arrays, str(tmp_path / "src.safetensors"))
    assert run("convert", tmp_path / "src.safetensors", out, "--checksums", "-q").returncode == 0
    # safetensors rewrites the file with the map of "a" alone (no header digest).
    with safe_open(str(out), "np") as h:
        digests = json.loads(h.metadata()[KEY])
    safetensors.numpy.save_file(arrays, str(out), metadata={KEY: json.dumps({"a": digests["a"]})})
    r = run("verify", out)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.startswith(f"{out}: OK: structure valid (3 tensors in 1 file); checked the XXH3-64 of 1 tensor, "
                               "covering 1 of 3 tensors (the others have none): 16 B re-read in "), r.stdout


def test_verify_failing_prints_no_summary(tmp_path):
    path = write_checkpoint("torch", tmp_path)
    data = bytearray(path.read_bytes())
    info = [i for i in zipfile.ZipFile(path).infolist() if i.filename.endswith("/data/0")][0]
    local = info.header_offset  # the data follows the local header, whose extra field is torch's padding
    at = local + 30 + int.from_bytes(data[local + 26:local + 28], "little") + int.from_bytes(data[local + 28:local + 30],
                                                                                            "little")
    data[at + 1] ^= 0x40  # a byte of the first storage
    path.write_bytes(bytes(data))
    for args in (["verify", path], ["verify", "--json", path]):
        r = run(*args)
        assert r.returncode == 1 and "[CKPT_E_CHECKSUM/CKPT_D_CHECKSUM]" in r.stderr, r.stderr
        assert r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.parametrize("args", [["--checksums"], ["--dtype", "bf16"], []])
def test_a_checksummed_source_converted_records_its_own_digests_or_none(tmp_path, source, args):
    """The source's digest maps (ckpt.xxh3_64, and the chunks' for a tensor
    of at least 4 MiB) describe its bytes and header, not the output's:
    carried along, they made --checksums write the key twice and a cast
    fail ckpt verify."""
    src, arrays = source
    arrays = {**arrays, "big": np.arange(1 << 20, dtype=np.float32)}  # 4 MiB: chunk digests too
    safetensors.numpy.save_file(arrays, str(src))
    first, out = tmp_path / "first.safetensors", tmp_path / "out.safetensors"
    assert run("convert", src, first, "--checksums").returncode == 0
    with safe_open(str(first), "np") as f:
        assert KEY in f.metadata()
    r = run("convert", first, out, *args)
    assert r.returncode == 0, r.stderr
    r = run("verify", out)
    assert r.returncode == 0, r.stderr
    recorded = "--checksums" in args
    assert ("checked the XXH3-64" in r.stdout) == recorded, r.stdout
    with safe_open(str(out), "np") as f:
        assert (KEY in (f.metadata() or {})) == recorded
