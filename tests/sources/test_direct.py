"""Direct mode: local files read around the page cache (O_DIRECT), and
converts that drop what they write — checked page by page (mincore), and
under a memory cgroup whose limit a second copy of the model would not
fit in."""
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch as st
import torch
from cgroup import MemoryCgroup, evict, resident_fraction, supports_direct
from conftest import run, same_dict

import ckpt
import ckpt.torch


@pytest.fixture
def big(tmp_path):
    """A 64 MB checkpoint, out of the page cache."""
    if not supports_direct(tmp_path):
        pytest.skip(f"{tmp_path} does not take O_DIRECT (tmpfs?)")
    rng = np.random.default_rng(0)
    arrays = {f"layers.{i}.weight": rng.standard_normal((1024, 2048), dtype=np.float32) for i in range(8)}
    arrays["norm"] = rng.standard_normal(1000).astype(np.float32)
    path = tmp_path / "big.safetensors"
    safetensors.numpy.save_file(arrays, str(path))
    evict(path)
    return path


def test_direct_results_equal_buffered(big, tmp_path):
    expected = st.load_file(big)
    assert same_dict(ckpt.load(big, direct=True), expected)
    assert same_dict(ckpt.load(big, direct=True, dtype="bfloat16"), ckpt.load(big, dtype="bfloat16"))
    assert same_dict(ckpt.torch.load_file(big, direct=True), expected)
    target = {k: torch.empty_like(v) for k, v in expected.items()}
    ckpt.load_into(target, big, direct=True)
    assert same_dict(target, expected)
    with ckpt.open(big, direct=True) as c:
        assert torch.equal(c.get("norm", "pt"), expected["norm"])
        with pytest.raises(ckpt.Error):
            c.view("norm")  # no mappings in direct mode
    r = run("convert", "--direct", big, tmp_path / "out", "--max-shard-size", "20MB")
    assert r.returncode == 0, r.stderr
    out = ckpt.load(tmp_path / "out")
    assert same_dict(out, expected)
    r = run("convert", "--direct", big, tmp_path / "cast.safetensors", "--dtype", "bf16", "--select", "layers.1.*")
    assert r.returncode == 0, r.stderr
    assert torch.equal(st.load_file(tmp_path / "cast.safetensors")["layers.1.weight"],
                       expected["layers.1.weight"].bfloat16())
    assert run("verify", "--direct", tmp_path / "out").returncode == 0
    with pytest.raises(ValueError):
        ckpt.load(big, direct=True, io="buffered")


def test_direct_reads_leave_nothing_in_the_page_cache(big, tmp_path):
    # Buffered, to show the check can fail: the file ends up cached.
    ckpt.load(big, io="buffered", copy=True)  # copies: views read only what is touched
    assert resident_fraction(big) > 0.9
    evict(big)
    assert resident_fraction(big) < 0.01
    ckpt.load(big, direct=True)
    assert resident_fraction(big) < 0.01
    target = {k: torch.empty_like(v) for k, v in st.load_file(big).items()}
    evict(big)
    ckpt.load_into(target, big, direct=True)
    assert resident_fraction(big) < 0.01
    r = run("convert", "--direct", big, tmp_path / "copy.safetensors")
    assert r.returncode == 0, r.stderr
    assert resident_fraction(big) < 0.01 and resident_fraction(tmp_path / "copy.safetensors") < 0.01
    assert (tmp_path / "copy.safetensors").read_bytes() == big.read_bytes()
    r = run("convert", big, tmp_path / "copy2.safetensors")
    assert r.returncode == 0 and resident_fraction(tmp_path / "copy2.safetensors") > 0.5


CHILD = textwrap.dedent("""
    import json, sys, torch, ckpt
    path, warm = sys.argv[1], sys.argv[2]
    ckpt.load_into({"x": torch.zeros(4)}, warm, direct=True)   # the code paths, paged in
    with ckpt.open(path) as c:
        target = {n: torch.full(t.shape, 1.0) for n, t in c.tensors.items()}   # touched: charged now
    print("ready", flush=True)
    sys.stdin.readline()                   # the parent sets the limit now
    ckpt.load_into(target, path, direct=True, threads=2)   # a 16 MB ring
    print("loaded", flush=True)
    sys.stdin.readline()                   # the parent reads the cgroup's counters
    print(json.dumps({"sum": float(sum(t.double().sum() for t in target.values()))}), flush=True)
""")


@pytest.fixture
def cgroup():
    cg = MemoryCgroup.create("ckpt-test")
    if cg is None:
        pytest.skip(f"no memory cgroup can be made here: {MemoryCgroup.why}")
    yield cg
    cg.remove()


def test_load_into_direct_under_a_memory_limit(big, cgroup, tmp_path):
    """The model's tensors are allocated and touched; the limit is then set
    to what is in use plus 96 MB: the 64 MB file loads into them without a
    page of it in the page cache, adding only the engine's ring (two
    threads here: 16 MB) to the anonymous memory."""
    expected = float(sum(t.double().sum() for t in st.load_file(big).values()))
    warm = tmp_path / "warm.safetensors"
    st.save_file({"x": torch.ones(4)}, warm)
    evict(big)
    proc = cgroup.popen([sys.executable, "-c", CHILD, str(big), str(warm)], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        before = cgroup.stats()
        cgroup.set_limit(before["current"] + (96 << 20))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "loaded"
        after = cgroup.stats()
        out, err = proc.communicate("done\n", timeout=120)
        line = out.strip()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"{cgroup.describe()}: {err[-2000:]} {after}"
    assert abs(json.loads(line)["sum"] - expected) < 1e-6 * max(1.0, abs(expected))
    assert after["oom_kills"] == 0
    # Nothing of the file went through the page cache (a little code may
    # have been paged in), and the anonymous memory did not grow by a copy.
    assert resident_fraction(big) < 0.01
    assert after["file"] - before["file"] < (16 << 20), (before, after)
    assert after["anon"] - before["anon"] < (40 << 20), (before, after)


def run_sampled(cgroup, args):
    """Runs args in the cgroup; returns (returncode, stderr, the largest
    page cache seen, sampled every few ms, the final stats)."""
    proc = cgroup.popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    most = 0
    while proc.poll() is None:
        most = max(most, cgroup.stats()["file"])
        time.sleep(0.003)
    stats = cgroup.stats()
    return proc.returncode, proc.stderr.read().decode(), max(most, stats["file"]), stats


def test_convert_direct_under_a_memory_limit(big, cgroup, tmp_path):
    """`ckpt convert --direct` of a 64 MB file in a cgroup of 160 MB: it
    reads around the page cache and drops what it writes once it is on disk
    (the oldest ranges, when 32 MB wait), so the cgroup's page cache stays
    a bounded part of what passes through (26-56 MB here, of 128); the same
    convert, buffered, leaves both files there."""
    cgroup.set_limit(160 << 20)
    binary = os.environ.get("CKPT_BIN", run.__globals__["BIN"])
    rc, err, most, stats = run_sampled(cgroup, [binary, "convert", "--direct", str(big), str(tmp_path / "out.safetensors")])
    assert rc == 0, (err, stats)
    assert stats["oom_kills"] == 0 and most < (72 << 20), (most, stats)
    # What stays cached is the program's own code, not the files.
    assert resident_fraction(big) < 0.01 and resident_fraction(tmp_path / "out.safetensors") < 0.01
    assert (tmp_path / "out.safetensors").read_bytes() == big.read_bytes()
    evict(big)
    rc, err, most, stats = run_sampled(cgroup, [binary, "convert", str(big), str(tmp_path / "buffered.safetensors")])
    assert rc == 0 and most > (100 << 20), (most, stats)  # the check can fail: buffered fills the cache
