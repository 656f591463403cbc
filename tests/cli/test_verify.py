"""Checksums written by ckpt convert --checksums, checked by ckpt verify."""
import json
import random
import subprocess

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
            assert "[CKPT_E_CHECKSUM]" in r.stderr and f"tensor '{name}'" in r.stderr
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
