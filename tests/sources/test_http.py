"""http(s):// sources against nginx on loopback: the CLI, ckpt.open/load/
load_into and the drop-ins take URLs (single files, index URLs whose shards
lie beside them, torch files, "directory" URLs); opening reads headers only;
loads coalesce their range requests; If-Range catches a file replaced
mid-load; the cache; credentials never shown."""
import json
import os
import re
import time

import pytest
import safetensors.torch as st
import torch
from conftest import requests_for, run, same_dict

import ckpt
import ckpt.numpy
import ckpt.torch
from statuses import status_of


def test_cli_inspect_and_convert_equal_local(nginx, served, tmp_path):
    root, _ = served
    url = nginx.url("model.safetensors")
    remote = json.loads(run("inspect", "--json", url).stdout)
    local = json.loads(run("inspect", "--json", root / "model.safetensors").stdout)
    assert remote["tensors"] == local["tensors"] and remote["totals"] == local["totals"]
    assert remote["files"][0]["path"] == url
    # Convert from the URL: the same bytes as from the file.
    r = run("convert", url, tmp_path / "a.safetensors")
    assert r.returncode == 0, r.stderr
    assert run("convert", root / "model.safetensors", tmp_path / "b.safetensors").returncode == 0
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()
    # An index URL: its shards are found beside it, and re-sharded.
    r = run("convert", nginx.url("sharded/model.safetensors.index.json"), tmp_path / "out", "--max-shard-size", "300KB")
    assert r.returncode == 0, r.stderr
    r2 = run("convert", root / "sharded", tmp_path / "out2", "--max-shard-size", "300KB")
    assert r2.returncode == 0
    for f in sorted(os.listdir(tmp_path / "out2")):
        assert (tmp_path / "out" / f).read_bytes() == (tmp_path / "out2" / f).read_bytes(), f


def test_open_reads_headers_only_in_one_or_two_requests(nginx, served):
    root, _ = served
    nginx.clear_log()
    with ckpt.open(nginx.url("model.safetensors")) as c:
        assert len(c) == 18
    rows = nginx.log()
    assert [(r[0].split()[0], r[1], r[3]) for r in rows] == [("GET", 206, "bytes=0-262143")]
    # A header over 256 KiB: exactly one more request, for the rest of it.
    nginx.clear_log()
    header = 8 + int.from_bytes((root / "many.safetensors").read_bytes()[:8], "little")
    assert header > 262144
    with ckpt.open(nginx.url("many.safetensors")) as c:
        assert len(c) == 4000
    rows = nginx.log()
    assert len(rows) == 2 and all(r[1] == 206 for r in rows)
    assert rows[1][3] == f"bytes=262144-{header - 1}"
    assert sum(r[2] for r in rows) == header  # not a byte of tensor data


def test_loads_equal_local_and_coalesce(nginx, served):
    root, sd = served
    url = nginx.url("model.safetensors")
    nginx.clear_log()
    out = ckpt.load(url)
    assert same_dict(out, st.load_file(root / "model.safetensors"))
    rows = [r for r in nginx.log() if r[3] != "bytes=0-262143"]
    # The data ranges tile [262144, size) — merged across tensors, never
    # one request per tensor, never a byte twice.
    size = (root / "model.safetensors").stat().st_size
    spans = sorted(tuple(map(int, r[3].split("=")[1].split("-"))) for r in rows)
    assert spans[0][0] == 262144 and spans[-1][1] == size - 1
    assert all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:]))
    assert len(spans) < len(sd) and all(r[1] == 206 for r in rows)
    # Every If-Range is the ETag the open saw.
    assert len({r[4] for r in rows}) == 1 and rows[0][4].startswith('"')


@pytest.mark.parametrize("name", ["sharded/model.safetensors.index.json", "repo/", "pytorch_model.bin"])
def test_load_forms(nginx, served, name):
    root, sd = served
    url = nginx.url(name)
    expected = {k: v for k, v in sd.items()}
    got = ckpt.load(url)
    assert set(got) == set(expected) and all(torch.equal(got[k], expected[k]) for k in expected)
    # In place, into existing tensors.
    target = {k: torch.zeros_like(v) for k, v in expected.items()}
    res = ckpt.load_into(target, url)
    assert not res.missing_keys and not res.unexpected_keys
    assert all(torch.equal(target[k], expected[k]) for k in expected)
    # The drop-in.
    dropped = ckpt.torch.load_file(url)
    assert all(torch.equal(dropped[k], expected[k]) for k in expected)


def test_drop_ins_and_slices(nginx, served):
    root, sd = served
    url = nginx.url("model.safetensors")
    with ckpt.torch.safe_open(url, "pt") as f, st.safe_open(root / "model.safetensors", "pt") as g:
        assert f.keys() == g.keys() and f.metadata() == g.metadata()
        assert torch.equal(f.get_tensor("layers.2.attn.weight"), g.get_tensor("layers.2.attn.weight"))
        assert torch.equal(f.get_slice("head.weight")[10:20, 3:], g.get_slice("head.weight")[10:20, 3:])
    arrays = ckpt.numpy.load_file(url)
    assert (arrays["layers.0.norm.weight"] == sd["layers.0.norm.weight"].numpy()).all()
    part = ckpt.load(url, select="layers.1.*", tp_rank=1, tp_size=2, dtype="float32")
    assert torch.equal(part["layers.1.attn.weight"], sd["layers.1.attn.weight"].tensor_split(2)[1].float())


def test_redirect_followed(nginx, served):
    root, sd = served
    out = ckpt.load(nginx.url("moved/model.safetensors"))
    assert same_dict(out, st.load_file(root / "model.safetensors"))


def test_file_replaced_mid_load_is_refused(nginx, served, tmp_path):
    root, sd = served
    work = root / "changing.safetensors"
    st.save_file(sd, work)
    try:
        c = ckpt.open(nginx.url("changing.safetensors"))
        # Replaced after the open: new bytes, new ETag.
        st.save_file({k: v + 1 if v.is_floating_point() else v for k, v in sd.items()}, tmp_path / "new.safetensors")
        os.utime(tmp_path / "new.safetensors", (1, 1))
        os.replace(tmp_path / "new.safetensors", work)
        with pytest.raises(ckpt.RemoteError) as e:
            c.get("head.weight")
        assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_REMOTE_CHANGED"
        assert "changing.safetensors" in str(e.value) and "bytes" in str(e.value)
        c.close()
    finally:
        work.unlink()


def test_file_cut_short_mid_load_gets_416(nginx, served):
    """Without an ETag (etag off), If-Range carries Last-Modified; a file
    cut short under the same date makes nginx answer 416."""
    root, sd = served
    work = root / "shrinking.safetensors"
    st.save_file(sd, work)
    try:
        c = ckpt.open(nginx.url("noetag/shrinking.safetensors"))
        last = max(c.tensors.values(), key=lambda t: t.offset)
        stat = work.stat()
        with open(work, "r+b") as f:
            f.truncate(last.offset - 16)
        os.utime(work, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        nginx.clear_log()
        with pytest.raises(ckpt.RemoteError) as e:
            c.get(last.name)
        # nginx logs a request once it has finished with it, which may be
        # after the client has the 416 and has given up: wait for the line.
        deadline = time.monotonic() + 5
        while not nginx.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [r[1] for r in nginx.log()] == [416]
        assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_REMOTE_CHANGED" and "HTTP 416" in str(e.value)
        assert f"now {last.offset - 16} bytes" in str(e.value) and e.value.tensor == last.name
        c.close()
    finally:
        work.unlink()


def test_empty_file_and_missing_file(nginx, served):
    nginx.clear_log()
    with pytest.raises(ckpt.SafetensorError) as e:
        ckpt.open(nginx.url("empty.safetensors"))
    assert status_of(e.value) == "CKPT_E_CORRUPT/CKPT_D_HEADER_TOO_SMALL"  # an empty file, not a network error
    r = run("inspect", nginx.url("nope.safetensors"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert nginx.url("nope.safetensors") in r.stderr and "HTTP 404" in r.stderr
    assert "bytes 0-262143" in r.stderr and "[CKPT_E_NOT_FOUND]" in r.stderr
    r = run("inspect", nginx.url("nothing-here/"))
    assert r.returncode == 1 and "cannot be listed" in r.stderr
    # It names every exact name it tried (DCP's and Flax's too), not four of them.
    for name in (".metadata", "model.safetensors.index.json", "model.safetensors", "pytorch_model.bin",
                 "flax_model.msgpack.index.json", "flax_model.msgpack"):
        assert name in r.stderr, (name, r.stderr)


def test_cache_second_open_reads_locally(nginx, served, tmp_path):
    root, sd = served
    url = nginx.url("model.safetensors")
    cache = tmp_path / "cache"
    expected = st.load_file(root / "model.safetensors")
    # A partial load fills nothing under a final name, and leaves nothing.
    part = ckpt.load(url, select="layers.0.*", cache_dir=cache)
    assert set(part) == {k for k in sd if k.startswith("layers.0.")}
    assert [p for p in cache.iterdir()] == []
    # A whole load writes the copy as it reads.
    assert same_dict(ckpt.load(url, cache_dir=cache), expected)
    files = sorted(cache.iterdir())  # the copy, and its stamp
    assert len(files) == 2 and re.fullmatch(r"[0-9a-f]{32}-model\.safetensors", files[0].name)
    assert files[1].name == files[0].name[:32] + ".stamp"
    assert files[0].read_bytes() == (root / "model.safetensors").read_bytes()
    # The second open: one request (the version check), then local reads.
    nginx.clear_log()
    assert same_dict(ckpt.load(url, cache_dir=cache), expected)
    assert len(nginx.log()) == 1
    r = run("convert", url, tmp_path / "c.safetensors", "--cache-dir", cache)
    assert r.returncode == 0 and (tmp_path / "c.safetensors").read_bytes() == files[0].read_bytes()
    assert len(nginx.log()) == 2


def test_credentials_used_and_never_shown(nginx, served, tmp_path):
    root, sd = served
    expected = st.load_file(root / "model.safetensors")
    base = nginx.base.replace("http://", "")
    # user:password in the URL, for the index and its shards.
    url = f"http://alice:s3cr3t-pw@{base}/basic/sharded/model.safetensors.index.json"
    out = ckpt.load(url)
    assert all(torch.equal(out[k], sd[k]) for k in sd)
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.open(f"http://alice:wrong-pw@{base}/basic/model.safetensors")
    assert status_of(e.value) == "CKPT_E_AUTH/CKPT_D_HTTP_AUTH" and "401" in str(e.value) and "wrong-pw" not in str(e.value)
    r = run("inspect", f"http://alice:wrong-pw@{base}/basic/model.safetensors?token=abc")
    assert r.returncode == 1 and "wrong-pw" not in r.stderr + r.stdout and "abc" not in r.stderr
    # A bearer token: the option, the CLI's file and variable.
    bearer = nginx.url("bearer/model.safetensors")
    with pytest.raises(ckpt.RemoteError):
        ckpt.open(bearer)
    assert same_dict(ckpt.load(bearer, bearer_token="tok-123-secret"), expected)
    (tmp_path / "token").write_text("tok-123-secret\n")
    r = run("inspect", bearer, "--bearer-token-file", tmp_path / "token")
    assert r.returncode == 0, r.stderr
    assert run("inspect", bearer, env={"CKPT_BEARER_TOKEN": "tok-123-secret"}).returncode == 0
    r = run("inspect", bearer, env={"CKPT_BEARER_TOKEN": "tok-wrong"})
    assert r.returncode == 1 and "tok-wrong" not in r.stderr and "401" in r.stderr
    # $HF_TOKEN goes to huggingface.co only, never to this host.
    nginx.clear_log()
    assert run("inspect", nginx.url("model.safetensors"), env={"HF_TOKEN": "hf_leak"}).returncode == 0
    assert nginx.log() and all(row[5] in ("", "-") for row in nginx.log())


def test_source_options_checked():
    with pytest.raises(TypeError):
        ckpt.open("http://127.0.0.1:1/x.safetensors", bogus=1)
    with pytest.raises(ValueError):
        ckpt.open("http://127.0.0.1:1/x.safetensors", timeout=-1)
    with pytest.raises(ValueError):
        ckpt.load("x.safetensors", direct=True, mmap=True)
    r = run("inspect", "http://127.0.0.1:1/x.safetensors", "--retries", "x")
    assert r.returncode == 2 and "--retries" in r.stderr
    # Nothing listens on port 1: refused, retried, then a clear error.
    r = run("inspect", "http://127.0.0.1:1/x.safetensors", "--retries", "1")
    assert r.returncode == 1 and "127.0.0.1:1/x.safetensors" in r.stderr and "[CKPT_E_NETWORK/CKPT_D_NETWORK]" in r.stderr


def test_column_slices_fetch_spans(nginx, served):
    """A dim-1 rank takes a short run of every row: over HTTP, runs close
    together are fetched as spans — a few range requests, not one per row."""
    root, sd = served
    url = nginx.url("model.safetensors")
    nginx.clear_log()
    got = ckpt.load(url, select="head.weight", tp_rank=1, tp_size=4, tp_dim=1)
    assert torch.equal(got["head.weight"], sd["head.weight"].tensor_split(4, dim=1)[1])
    rows = [r for r in nginx.log() if r[3] != "bytes=0-262143"]
    # 2000 rows of 384 bytes, 96 of them this rank's: one span (a request
    # per batch of 256 runs before, 6 in all)
    assert 0 < len(rows) <= 2, rows
