"""The cache of remote files (cache_dir= / --cache-dir) over real servers on
loopback (nginx, and a Hub-like server stating each file's SHA-256 in
X-Linked-Etag): its directory is 0700 and its files 0600 whatever the
umask; a copy that was cut short, altered, or replaced by a symlink, a
FIFO, a hard link or another user's file is never used nor written
through — the load still returns the server's bytes, a sentinel the
symlink or link points at is untouched, and a good copy takes the name."""
import contextlib
import hashlib
import os
import stat

import pytest
import safetensors.torch as st
from conftest import run, same_dict
from servers import FaultServer

import ckpt


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def copies(cache):
    """{the copy, its stamp} in `cache` (paths)."""
    names = sorted(os.listdir(cache))
    copy = [n for n in names if n.endswith("-model.safetensors")]
    stamp = [n for n in names if n.endswith(".stamp")]
    assert len(copy) == 1 and len(stamp) == 1 and len(names) == 2, names
    return cache / copy[0], cache / stamp[0]


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_permissions_after_a_fetch(nginx, served, tmp_path):
    root, _ = served
    url = nginx.url("model.safetensors")
    cache = tmp_path / "made" / "cache"
    with umask(0):
        expected = st.load_file(root / "model.safetensors")
        assert same_dict(ckpt.load(url, cache_dir=cache), expected)
    copy, stamp = copies(cache)
    assert mode(cache) == 0o700 and mode(tmp_path / "made") == 0o700
    assert mode(copy) == 0o600 and mode(stamp) == 0o600
    assert copy.read_bytes() == (root / "model.safetensors").read_bytes()
    # The CLI too; an existing directory keeps its mode, its new files are 0600.
    wide = tmp_path / "wide"
    wide.mkdir(mode=0o755)
    os.chmod(wide, 0o755)
    with umask(0):
        r = run("convert", url, tmp_path / "out.safetensors", "--cache-dir", wide)
    assert r.returncode == 0, r.stderr
    copy, stamp = copies(wide)
    assert mode(wide) == 0o755 and mode(copy) == 0o600 and mode(stamp) == 0o600


def tamper(kind, copy, sentinel):
    size = copy.stat().st_size
    if kind == "truncated":
        with open(copy, "r+b") as f:
            f.truncate(size - 1)
    elif kind == "cut-and-padded":  # cut short, then zeros up to the size a size check wants
        with open(copy, "r+b") as f:
            f.truncate(size // 2)
            f.truncate(size)
    elif kind == "altered":
        data = bytearray(copy.read_bytes())
        data[-5] ^= 0xFF  # a byte of the last tensor, in place
        with open(copy, "r+b") as f:
            f.write(data)
    elif kind == "symlink":
        copy.unlink()
        copy.symlink_to(sentinel)
    elif kind == "fifo":
        copy.unlink()
        os.mkfifo(copy)
    elif kind == "hardlink":
        copy.unlink()
        os.link(sentinel, copy)
    elif kind == "foreign":
        if os.geteuid() != 0:
            pytest.skip("making another user's file needs root")
        os.chown(copy, 65534, 65534)


KINDS = ["truncated", "cut-and-padded", "altered", "symlink", "fifo", "hardlink", "foreign"]


@pytest.mark.parametrize("kind", KINDS)
def test_tampered_copy_is_not_used(nginx, served, tmp_path, kind):
    root, _ = served
    url = nginx.url("model.safetensors")
    cache = tmp_path / "cache"
    original = (root / "model.safetensors").read_bytes()
    expected = st.load_file(root / "model.safetensors")
    assert same_dict(ckpt.load(url, cache_dir=cache), expected)
    copy, _ = copies(cache)
    # A sentinel outside the cache, the copy's size, with other bytes
    # (a copy trusted on its size alone would load them).
    sentinel = tmp_path / "sentinel"
    sentinel.write_bytes(bytes(len(original)))
    before = sentinel.read_bytes(), sentinel.stat().st_mtime_ns
    tamper(kind, copy, sentinel)
    nginx.clear_log()
    assert same_dict(ckpt.load(url, cache_dir=cache), expected)
    assert len(nginx.log()) > 1  # read from the server, not from the copy
    assert (sentinel.read_bytes(), sentinel.stat().st_mtime_ns) == before
    # The load's own copy took the name: a regular file, used next time.
    copy, _ = copies(cache)
    assert stat.S_ISREG(os.lstat(copy).st_mode) and copy.read_bytes() == original
    nginx.clear_log()
    assert same_dict(ckpt.load(url, cache_dir=cache), expected)
    assert len(nginx.log()) == 1


def test_the_hubs_sha256_vouches_for_a_copy(served, tmp_path):
    """A Hub-like server states each file's SHA-256 (X-Linked-Etag): a copy
    is checked against it before it takes its name, and again when its
    stamp is missing; bytes that differ from it are never kept."""
    root, _ = served
    data = (root / "model.safetensors").read_bytes()
    expected = st.load_file(root / "model.safetensors")
    with FaultServer({"model.safetensors": data}) as hub:
        hub.behaviour.linked_etag = True
        url = hub.url("model.safetensors")
        cache = tmp_path / "cache"
        assert same_dict(ckpt.load(url, cache_dir=cache), expected)
        copy, stamp = copies(cache)
        assert hashlib.sha256(data).hexdigest() in stamp.read_text()
        # Stamp lost (the cache copied elsewhere, say): the bytes still hash right.
        stamp.unlink()
        gets = len(hub.requests)
        assert same_dict(ckpt.load(url, cache_dir=cache), expected)
        assert len(hub.requests) == gets + 1 and stamp.exists()
        # Stamp lost and a byte changed: not used.
        stamp.unlink()
        altered = bytearray(copy.read_bytes())
        altered[-5] ^= 0xFF
        copy.write_bytes(altered)
        gets = len(hub.requests)
        assert same_dict(ckpt.load(url, cache_dir=cache), expected)
        assert len(hub.requests) > gets + 1
        # A server whose bytes are not the SHA-256 it states: no copy.
        hub.behaviour.linked_etag = "0" * 64
        other = tmp_path / "other"
        assert same_dict(ckpt.load(url, cache_dir=other), expected)
        assert os.listdir(other) == []
