"""Metadata amplification (issue 26, section 5): a small file must not make
`ckpt inspect` take memory out of proportion to it.  The library charges
what its parsers allocate for what they read to one budget per catalog,
8 times the input plus 64 MiB (src/base/budget.c), and refuses beyond it
with CKPT_E_LIMIT naming the file and the byte.  Each input here amplified
before: 4 MB of msgpack nils took 305 MB, a pickle of 4 M Nones 309 MB, a
16 MB safetensors header of zeros some 350 MB; a 12 MB GGUF of a million
empty arrays 115 MB.  Peak RSS is measured by /usr/bin/time around the CLI,
less what inspecting a tiny file takes.  The inputs: tests/hostile/amplify.py."""
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ckptlib import BIN_PATH

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "hostile"))
from amplify import BASE, FACTOR, MiB, gguf_empty_arrays, json_zeros, msgpack_nils, pickle_nones, tiny_safetensors  # noqa: E402,E501

# What the library does not charge to its budget (the CLI's output, the
# catalog's own tables, allocator slack), beyond the tiny file's process.
UNCHARGED = 8 * MiB
TIME = shutil.which("time") or "/usr/bin/time"

pytestmark = pytest.mark.skipif(not os.path.exists(TIME), reason="needs GNU time (the Makefile installs it)")


def peak_rss(path, tmp_path):
    """(exit status, stderr, peak RSS in bytes) of `ckpt inspect path`."""
    out = tmp_path / "rss.txt"
    proc = subprocess.run([TIME, "-f", "%M", "-o", str(out), BIN_PATH, "inspect", str(path)],
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stderr, int(out.read_text().split()[-1]) * 1024


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """What inspecting a tiny file takes: the process itself."""
    d = tmp_path_factory.mktemp("amp")
    rc, err, rss = peak_rss(tiny_safetensors(d), d)
    assert rc == 0, err
    return rss


@pytest.mark.parametrize("make, accepted", [
    (msgpack_nils, {0, 1}),      # 16-byte nodes and its tree: at the bound, refused
    (gguf_empty_arrays, {0}),    # 52 bytes of typed JSON for each 12-byte array: within it
    (pickle_nones, {1}),         # a 48-byte value for each 1-byte opcode: refused
    (json_zeros, {1}),           # refused (24-byte nodes for 2 bytes) or not a tensor
])
def test_metadata_memory_is_bounded(tmp_path, baseline, make, accepted):
    path = make(tmp_path)
    size = path.stat().st_size
    rc, err, rss = peak_rss(path, tmp_path)
    assert rc in accepted, err
    if rc:
        assert "[CKPT_E_LIMIT]" in err or "[CKPT_E_CORRUPT/CKPT_D_HEADER_SCHEMA]" in err, err
        assert str(path.name) in err and "at byte" in err, err
    used = rss - baseline
    print(f"{path.name}: {size} bytes, {used / MiB:.1f} MiB beyond a tiny file's ({err.strip()[:160]})")
    assert used <= FACTOR * size + BASE + UNCHARGED, f"{used / MiB:.1f} MiB for {size / MiB:.1f} MiB of input"


def test_gguf_value_json_is_not_copied(tmp_path, baseline):
    """A GGUF value's typed JSON stays where it was built (it was copied
    into the catalog, 115 MB for 12 MB): under 6 times the input."""
    path = gguf_empty_arrays(tmp_path)
    rc, err, rss = peak_rss(path, tmp_path)
    assert rc == 0, err
    assert rss - baseline <= 6 * path.stat().st_size


def test_large_legitimate_metadata_is_accepted(tmp_path, baseline):
    """A DCP checkpoint of 50,000 tensors (16 MB of .metadata), and the
    tests' real GGUF vocabulary: read, within the bound."""
    import safetensors.numpy

    src = tmp_path / "many.safetensors"
    safetensors.numpy.save_file({f"layer{i}.w": np.full((2,), i, np.float32) for i in range(50_000)}, str(src))
    dcp = tmp_path / "many.dcp"
    proc = subprocess.run([BIN_PATH, "convert", str(src), str(dcp), "--to", "dcp"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    vocab = os.path.join(os.path.dirname(__file__), "..", "fixtures", "ggml-vocab-llama-spm.gguf")
    for path in (dcp, vocab):
        rc, err, rss = peak_rss(path, tmp_path)
        assert rc == 0, err
        size = sum(e.stat().st_size for e in os.scandir(path)) if os.path.isdir(path) else os.path.getsize(path)
        assert rss - baseline <= FACTOR * size + BASE + UNCHARGED


def test_many_keys_are_read_in_linear_time(tmp_path):
    """A GGUF of 100,000 keys (1.9 MB): each key was looked up among the
    others, twice (70 s); a million would have taken hours."""
    path = tmp_path / "keys.gguf"
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 100_000))
        for i in range(100_000):
            key = b"k%d" % i
            f.write(struct.pack("<Q", len(key)) + key + struct.pack("<I", 0) + b"\x01")  # a u8
    proc = subprocess.run([BIN_PATH, "inspect", str(path)], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0, proc.stderr


def test_gguf_to_gguf_copies_key_values_encoded(tmp_path, baseline):
    """GGUF → GGUF carries each key-value in GGUF's own encoding, from the
    reader to the writer, with no JSON text in between (issue 28 §3): the
    12 MB GGUF of a million empty arrays took 650 MB and 13 s when its
    typed JSON was written at open and parsed back for the output; it is
    copied now, in about its own size."""
    path = gguf_empty_arrays(tmp_path)
    out = tmp_path / "out.gguf"
    stats = tmp_path / "rss.txt"
    proc = subprocess.run([TIME, "-f", "%M", "-o", str(stats), BIN_PATH, "convert", str(path), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rss = int(stats.read_text().split()[-1]) * 1024
    size = path.stat().st_size
    assert rss - baseline <= 3 * size, f"{(rss - baseline) / MiB:.1f} MiB for {size / MiB:.1f} MiB of input"
    data = out.read_bytes()
    assert data[:size] == path.read_bytes() and not data[size:].strip(b"\0")  # the same file, padded
