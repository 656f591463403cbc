"""Servers that serve no byte ranges (`python -m http.server`, many
mirrors): with a cache directory, each file over 256 KiB is downloaded
whole into it, once, by the cache's rules (a 0600 temporary, checked, then
renamed into place), and read there — `ckpt inspect`, `ckpt convert`,
ckpt.load, single files, torch.save files and huggingface_hub shards by
their index or by a directory URL give the local bytes; without one, the
error names CKPT_E_REMOTE/CKPT_D_NO_RANGES, the URL, --cache-dir and cache_dir=.  A
download that is cut restarts (or resumes where a retry gets a range),
one that fails, is cancelled, is too slow, changes or lies about its
SHA-256 leaves nothing in the cache, and memory stays far below the
file's size."""
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import time
import urllib.request

import pytest
import safetensors.torch as st
import torch
from conftest import BIN, run, same_dict, state_dict
from servers import OPEN_RANGE, FaultServer, PythonHttpServer

import ckpt
from statuses import status_of


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """model.safetensors (1.3 MB), pytorch_model.bin, and repo/: shards
    written by huggingface_hub's save_torch_state_dict, most over 256 KiB."""
    from huggingface_hub import save_torch_state_dict

    d = tmp_path_factory.mktemp("plain")
    sd = state_dict(seed=3)
    st.save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    torch.save(sd, d / "pytorch_model.bin")
    (d / "repo").mkdir()
    save_torch_state_dict(sd, d / "repo", max_shard_size="500KB")
    shards = sorted((d / "repo").glob("model-*.safetensors"))
    assert len([s for s in shards if s.stat().st_size > 256 << 10]) >= 2
    assert (d / "model.safetensors").stat().st_size > 1 << 20
    return d, sd


@pytest.fixture(scope="module")
def plain(root, tmp_path_factory):
    with PythonHttpServer(root[0], tmp_path_factory.mktemp("http.server")) as s:
        # What the tests rely on: Python's own server answers a range
        # request with the whole file.
        req = urllib.request.Request(s.url("model.safetensors"), headers={"Range": "bytes=0-99"})
        with urllib.request.urlopen(req) as r:
            assert r.status == 200 and len(r.read()) == (root[0] / "model.safetensors").stat().st_size
        yield s


def cache_files(cache):
    """What the cache holds: {name: bytes} of copies (temporaries too)."""
    if not cache.exists():
        return {}
    return {n: (cache / n).read_bytes() for n in os.listdir(cache) if not n.endswith(".stamp")}


def copy_of(cache, name):
    """The one copy of `name` in the cache, checked to be a 0600 file with
    its stamp beside it."""
    found = [n for n in os.listdir(cache) if n.endswith("-" + name) and not n.startswith(".")]
    assert len(found) == 1, os.listdir(cache)
    path = cache / found[0]
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert (cache / (found[0][:32] + ".stamp")).exists()
    return path.read_bytes()


def test_a_file_through_the_cache(plain, root, tmp_path):
    d, sd = root
    url, local = plain.url("model.safetensors"), (d / "model.safetensors").read_bytes()
    cache = tmp_path / "cache"
    # inspect needs the header only: the open's first 256 KiB, nothing cached.
    r = run("inspect", url, "--cache-dir", cache)
    assert r.returncode == 0, r.stderr
    assert "head.weight" in r.stdout and "layers.3.mlp.weight" in r.stdout
    assert cache_files(cache) == {}
    # convert downloads it once into the cache and writes the same bytes.
    r = run("convert", url, tmp_path / "out.safetensors", "--cache-dir", cache)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.safetensors").read_bytes() == local
    assert copy_of(cache, "model.safetensors") == local
    # ckpt.load reads the copy: one request, the open's.
    before = plain.gets("model.safetensors")
    assert same_dict(ckpt.load(url, cache_dir=cache), sd)
    assert plain.gets("model.safetensors") == before + 1
    # ckpt.load downloads it as well, into a cache of its own.
    assert same_dict(ckpt.load(url, cache_dir=tmp_path / "py"), sd)
    assert copy_of(tmp_path / "py", "model.safetensors") == local


def test_without_a_cache_directory_the_error_says_to_add_one(plain, tmp_path):
    for name in ("model.safetensors", "pytorch_model.bin"):
        url = plain.url(name)
        r = run("convert", url, tmp_path / "out.safetensors")
        assert r.returncode == 1 and r.stderr.count("\n") == 1
        assert "[CKPT_E_REMOTE/CKPT_D_NO_RANGES]" in r.stderr and url in r.stderr
        assert "--cache-dir DIR" in r.stderr and "cache_dir=DIR" in r.stderr
        assert not (tmp_path / "out.safetensors").exists()
        with pytest.raises(ckpt.RemoteError) as e:
            ckpt.load(url)
        assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_NO_RANGES" and e.value.path == url
        assert "cache_dir=DIR" in str(e.value) and "does not serve byte ranges" in str(e.value)


def test_a_torch_file_is_downloaded_by_its_open(plain, root, tmp_path):
    # A torch.save file's directory is at its end: opening it reads past
    # the first 256 KiB, so the download comes with the open.
    d, sd = root
    url, cache = plain.url("pytorch_model.bin"), tmp_path / "cache"
    r = run("inspect", url, "--cache-dir", cache)
    assert r.returncode == 0 and "head.weight" in r.stdout, r.stderr
    assert copy_of(cache, "pytorch_model.bin") == (d / "pytorch_model.bin").read_bytes()
    assert same_dict(ckpt.load(url, cache_dir=cache), sd)


@pytest.mark.parametrize("name", ["repo/model.safetensors.index.json", "repo/"])
def test_shards_each_fall_back(plain, root, tmp_path, name):
    d, sd = root
    url, cache = plain.url(name), tmp_path / "cache"
    r = run("convert", url, tmp_path / "out.safetensors")
    assert r.returncode == 1 and "[CKPT_E_REMOTE/CKPT_D_NO_RANGES]" in r.stderr and "/repo/model-0000" in r.stderr
    assert "--cache-dir" in r.stderr
    assert same_dict(ckpt.load(url, cache_dir=cache), sd)
    for shard in sorted((d / "repo").glob("model-*.safetensors")):
        if shard.stat().st_size > 256 << 10:  # smaller ones come whole with their open
            assert copy_of(cache, shard.name) == shard.read_bytes()
    r = run("convert", url, tmp_path / "out.safetensors", "--cache-dir", tmp_path / "cli")
    assert r.returncode == 0, r.stderr
    assert same_dict(st.load_file(tmp_path / "out.safetensors"), sd)


# ---------------------------------------------------------------------------
# Cut, failed, changed, slow, cancelled: a server of our own


@pytest.fixture(scope="module")
def files():
    sd = state_dict(seed=4)
    return {"model.safetensors": st.save(sd, metadata={"format": "pt"})}, sd


@pytest.fixture
def server(files):
    with FaultServer(files[0]) as s:
        s.behaviour.ignore_range = True
        yield s


def downloads(server):
    """(Range, status) of the GETs after the open."""
    return [(r[2], r[4]) for r in server.requests if r[0] == "GET" and r[2] != OPEN_RANGE]


def test_a_cut_download_restarts(server, files, tmp_path):
    data, sd = files
    server.behaviour.drop_after = 300000
    server.behaviour.drop_downloads = 1
    cache = tmp_path / "cache"
    assert same_dict(ckpt.load(server.url("model.safetensors"), cache_dir=cache), sd)
    # The whole file, cut; the retry asks to resume, gets the whole file
    # again, and starts over.
    got = downloads(server)
    assert len(got) == 2 and got[0] == (None, 200)
    assert got[1][0].startswith("bytes=") and not got[1][0].startswith("bytes=0-") and got[1][1] == 200
    assert copy_of(cache, "model.safetensors") == data["model.safetensors"]


def test_a_cut_download_resumes_where_the_retry_gets_a_range(server, files, tmp_path):
    data, sd = files
    server.behaviour.resume_ranges = True
    server.behaviour.drop_after = 300000
    server.behaviour.drop_downloads = 1
    cache = tmp_path / "cache"
    assert same_dict(ckpt.load(server.url("model.safetensors"), cache_dir=cache), sd)
    got = downloads(server)
    assert len(got) == 2 and got[0] == (None, 200) and got[1][1] == 206
    assert copy_of(cache, "model.safetensors") == data["model.safetensors"]


def test_a_failed_download_leaves_nothing(server, tmp_path):
    url, cache = server.url("model.safetensors"), tmp_path / "cache"
    server.behaviour.drop_after = 300000
    server.behaviour.drop_downloads = 100
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.load(url, cache_dir=cache, retries=2)
    assert status_of(e.value) == "CKPT_E_NETWORK/CKPT_D_NETWORK" and "the whole file" in str(e.value) and "after retries" in str(e.value)
    assert cache_files(cache) == {}
    r = run("convert", url, tmp_path / "out.safetensors", "--cache-dir", cache, "--retries", "1")
    assert r.returncode == 1 and "[CKPT_E_NETWORK/CKPT_D_NETWORK]" in r.stderr and url in r.stderr
    assert cache_files(cache) == {} and not (tmp_path / "out.safetensors").exists()
    # While the download runs, the copy is only a temporary.
    server.behaviour.drop_downloads = 0
    server.behaviour.slow = 0.05
    seen = []

    def watch(done, total):
        seen.append(sorted(n for n in os.listdir(cache) if not n.startswith(".")))

    c = ckpt.open(url, cache_dir=cache, download_progress=watch)
    c.get("head.weight")
    assert seen and all(s == [] for s in seen[:-1])
    c.close()


def test_a_file_changed_before_its_download(server, files, tmp_path):
    data, sd = files
    server.behaviour.change_after = 1  # the open sees version 0, the download version 1
    server.behaviour.changed = data["model.safetensors"][::-1]
    cache = tmp_path / "cache"
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.load(server.url("model.safetensors"), cache_dir=cache)
    assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_REMOTE_CHANGED"
    assert cache_files(cache) == {}


def test_the_stated_sha256_is_checked(server, files, tmp_path):
    data, sd = files
    url = server.url("model.safetensors")
    server.behaviour.linked_etag = "0" * 64
    with pytest.raises(ckpt.Error) as e:
        ckpt.load(url, cache_dir=tmp_path / "bad")
    assert status_of(e.value) == "CKPT_E_CHECKSUM/CKPT_D_CHECKSUM" and "do not hash to the SHA-256 it states" in str(e.value)
    assert cache_files(tmp_path / "bad") == {}
    server.behaviour.linked_etag = True
    assert same_dict(ckpt.load(url, cache_dir=tmp_path / "good"), sd)
    assert copy_of(tmp_path / "good", "model.safetensors") == data["model.safetensors"]
    stamp = next((tmp_path / "good").glob("*.stamp")).read_text()
    assert f"sha256 {hashlib.sha256(data['model.safetensors']).hexdigest()}" in stamp


def test_minimum_speed_and_retry_deadline(server, tmp_path):
    url, cache = server.url("model.safetensors"), tmp_path / "cache"
    c = ckpt.open(url, cache_dir=cache, min_speed=1 << 20, min_speed_time=1, retries=0)
    server.behaviour.slow = 0.5  # 128 KiB/s
    t0 = time.monotonic()
    with pytest.raises(ckpt.RemoteError) as e:
        c.get("head.weight")
    assert status_of(e.value) == "CKPT_E_TIMEOUT/CKPT_D_TIMEOUT" and "minimum speed" in str(e.value) and "the whole file" in str(e.value)
    assert time.monotonic() - t0 < 10
    c.close()
    server.behaviour.slow = 0.0
    c = ckpt.open(url, cache_dir=cache, min_speed=1 << 20, min_speed_time=1, retries=100, retry_deadline=2)
    server.behaviour.slow = 0.5
    t0 = time.monotonic()
    with pytest.raises(ckpt.RemoteError) as e:
        c.get("head.weight")
    assert "retry deadline" in str(e.value) and time.monotonic() - t0 < 15
    c.close()
    assert cache_files(cache) == {}


def test_progress_and_cancel(server, files, tmp_path):
    data, sd = files
    url, size = server.url("model.safetensors"), len(files[0]["model.safetensors"])
    calls = []
    assert same_dict(ckpt.load(url, cache_dir=tmp_path / "a", download_progress=lambda d, t: calls.append((d, t))), sd)
    assert calls[0] == (0, size) and calls[-1] == (size, size)
    assert all(t == size for _, t in calls) and [d for d, _ in calls] == sorted(d for d, _ in calls)
    # The CLI's bar (forced on: stderr is no terminal here).
    r = run("convert", url, tmp_path / "out.safetensors", "--cache-dir", tmp_path / "b", "--progress")
    assert r.returncode == 0 and "downloading" in r.stderr, r.stderr
    # A true answer stops the download: CancelledError, nothing cached.
    with pytest.raises(ckpt.CancelledError):
        ckpt.load(url, cache_dir=tmp_path / "c", download_progress=lambda d, t: True)
    assert cache_files(tmp_path / "c") == {}


# ---------------------------------------------------------------------------
# Memory


def test_memory_stays_far_below_the_file(tmp_path):
    # A 200 MiB file through python -m http.server: streamed into the
    # cache, never held in memory.
    d = tmp_path / "big"
    d.mkdir()
    n = 50 << 20
    st.save_file({"w": torch.arange(n, dtype=torch.int32).view(torch.float32)}, d / "big.safetensors")
    size = (d / "big.safetensors").stat().st_size
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stderr)")
    with PythonHttpServer(d, tmp_path) as s:
        out = subprocess.run([sys.executable, "-c", probe, BIN, "convert", s.url("big.safetensors"),
                              tmp_path / "out.safetensors", "--cache-dir", tmp_path / "cache"],
                             capture_output=True, text=True, check=True).stdout
    rc, peak_kib = map(int, out.split("\n")[0].split())
    assert rc == 0, out
    assert peak_kib < 48 * 1024, f"peak RSS {peak_kib} KiB for a {size >> 20} MiB file"
    with open(tmp_path / "out.safetensors", "rb") as a, open(d / "big.safetensors", "rb") as b:
        while True:
            x, y = a.read(1 << 24), b.read(1 << 24)
            assert x == y
            if not x:
                break
    shutil.rmtree(tmp_path / "cache")
