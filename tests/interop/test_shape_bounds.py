"""Shapes whose nonzero axes pass 2^63-1 elements or bytes (issue 26,
section 5): safetensors (its header check, then numpy's) refuses them however
an axis of 0 makes the product 0, and so does ckpt — through inspect,
convert and load, never writing a file safetensors refuses.  (The ASan+UBSan build runs the
same shapes in tests/unit/test_numpy.c: the engine once overflowed on them.)"""
import json
import os
import struct
import subprocess

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch

import ckpt
from statuses import status_of

CKPT_BIN = os.environ.get("CKPT_BIN")
I64 = 2**63 - 1

# ((I64, I64, 0) was refused already: the partial product overflows before the 0.)
REFUSED = [(0, I64, I64), (I64, 0, I64), (0, 2**62, 4), (0, 2**61), (2**61, 0), (0, 2**64 - 1)]


def npy(path, shape, descr="<f4"):
    text = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(map(str, shape)) + ("," if len(shape) == 1 else ""))
    pad = (64 - (10 + len(text) + 1) % 64) % 64
    header = (text + " " * pad + "\n").encode()
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
    return path


def safetensors_file(path, shape, dtype="F32"):
    header = json.dumps({"t": {"dtype": dtype, "shape": list(shape), "data_offsets": [0, 0]}}).encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def cli(*args):
    return subprocess.run([CKPT_BIN, *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("shape", REFUSED, ids=str)
def test_shapes_the_references_refuse_are_refused(tmp_path, shape):
    # The reference refuses them: safetensors' header check (a partial
    # product that overflows) or numpy ("array is too big"); torch makes some
    # of the empty ones, but no numpy user could read them.
    st = safetensors_file(tmp_path / "ref.safetensors", shape)
    with pytest.raises((ValueError, safetensors.SafetensorError)):
        safetensors.numpy.load_file(str(st))
    for path in (npy(tmp_path / "x.npy", shape), st):
        with pytest.raises(ckpt.Error) as e:
            ckpt.open(path)
        assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_SHAPE_OVERFLOW", str(e.value)
        with pytest.raises(ckpt.Error) as e:
            ckpt.load(path, "np")
        assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_SHAPE_OVERFLOW"
        if CKPT_BIN:
            out = tmp_path / "out.safetensors"
            for args in (["inspect", path], ["convert", path, out]):
                r = cli(*args)
                assert r.returncode == 1 and "[CKPT_E_CORRUPT/CKPT_D_SHAPE_OVERFLOW]" in r.stderr, (args, r.stderr)
            assert not out.exists()


def test_the_largest_allowed_shapes_convert_to_files_the_references_read(tmp_path):
    for shape, descr in (((0, 2**61 - 1), "<f4"), ((0, I64), "|u1"), ((2**60, 0, 3), "<f2")):
        src = npy(tmp_path / "x.npy", shape, descr)
        got = ckpt.load(src, "np")["x"]
        assert got.shape == shape and got.size == 0
        out = tmp_path / "x.safetensors"
        ckpt.convert(src, out, progress=False, overwrite=True)
        for load in (safetensors.numpy.load_file, safetensors.torch.load_file):
            assert tuple(load(str(out))["x"].shape) == shape
        ckpt.convert(src, tmp_path / "x.npz", progress=False, overwrite=True)
        assert np.load(tmp_path / "x.npz")["x"].shape == shape
        if CKPT_BIN:
            assert cli("inspect", src).returncode == 0
    # A cast that would pass 2^63-1 bytes is refused before anything is read.
    src = npy(tmp_path / "x.npy", (0, 2**61 - 1), "<f4")
    with pytest.raises(ckpt.Error) as e:
        ckpt.load(src, "np", dtype="float64")
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_SHAPE_OVERFLOW"


def test_a_header_safetensors_would_refuse_is_never_written(tmp_path):
    """safetensors refuses a header over 100,000,000 bytes (MAX_HEADER_SIZE)."""
    with pytest.raises(ckpt.Error) as e:
        ckpt.save({"w": np.zeros(2, np.float32)}, tmp_path / "m", metadata={"big": "x" * 100_000_000})
    assert status_of(e.value) == "CKPT_E_LIMIT" and "100000000" in str(e.value)
    assert not any(p.name.endswith(".safetensors") for p in tmp_path.rglob("*"))
