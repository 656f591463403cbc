"""Remote reads against a server of our own that misbehaves: dropped
connections (resumed from the last byte), 500 then 200, a server that
ignores Range, slowness and stalls (timeouts), a file changed mid-load,
and hostile answers (a lying Content-Range, lengths of 2^63, an endless
body).  Every load that succeeds equals the local one; every failure is
a clear error naming the URL, the status and the byte range, and leaves
no output under its final name."""
import io
import os
import time

import pytest
import safetensors.torch as st
import torch
from conftest import run, same_dict, state_dict
from servers import FaultServer

import ckpt
from statuses import status_of


@pytest.fixture(scope="module")
def files():
    sd = state_dict(seed=1, layers=6, width=128)
    data = st.save(sd, metadata={"format": "pt"})
    assert len(data) > 2 << 20
    other = st.save({k: v.clone().fill_(1) if v.is_floating_point() else v for k, v in sd.items()})
    small = st.save({"x": torch.arange(1000, dtype=torch.float32)})
    buf = io.BytesIO()
    torch.save({"a": torch.arange(5000.0), "b": torch.ones(3, 3, dtype=torch.int32)}, buf)
    return {"model.safetensors": data, "other.safetensors": other, "small.safetensors": small,
            "model.bin": buf.getvalue()}, sd


@pytest.fixture
def server(files):
    with FaultServer(files[0]) as s:
        yield s


def data_gets(server):
    """GETs after the open (the open asks for bytes 0-262143)."""
    return [r for r in server.requests if r[0] == "GET" and r[2] != "bytes=0-262143"]


def no_output(tmp_path, name):
    leftovers = [p.name for p in tmp_path.iterdir() if p.name == name or ".ckpt-tmp-" in p.name]
    return not leftovers


def test_plain_reads_match(server, files):
    data, sd = files
    got = ckpt.load(server.url("model.safetensors"))
    assert same_dict(got, st.load(data["model.safetensors"]))
    assert {k: v.tolist() for k, v in ckpt.load(server.url("model.bin")).items()} == \
        {"a": torch.arange(5000.0).tolist(), "b": torch.ones(3, 3, dtype=torch.int32).tolist()}


def test_dropped_connection_resumes_from_last_byte(server, files):
    data, sd = files
    c = ckpt.open(server.url("model.safetensors"), max_connections=1)
    server.behaviour.drop_after = 100_000
    server.behaviour.drop_times = 3
    got = {name: c.get(name, "pt") for name in c.keys()}
    assert same_dict(got, st.load(data["model.safetensors"]))
    gets = data_gets(server)
    # Each retry asks for what is left: it starts 100,000 bytes further.
    starts = [int(r[2].split("=")[1].split("-")[0]) for r in gets]
    ends = [int(r[2].split("-")[1]) for r in gets]
    resumed = [(a, b) for a, b in zip(gets, gets[1:]) if int(b[2].split("=")[1].split("-")[0]) ==
               int(a[2].split("=")[1].split("-")[0]) + 100_000 and a[2].split("-")[1] == b[2].split("-")[1]]
    assert len(resumed) == 3, (starts, ends)
    assert all(r[3] is not None for r in gets)  # If-Range on every one
    c.close()


def test_dropped_first_request_starts_over(server, files):
    data, sd = files
    server.behaviour.drop_after = 1000
    server.behaviour.drop_times = 2
    with ckpt.open(server.url("model.safetensors")) as c:
        assert set(c.keys()) == set(sd)
    opens = [r for r in server.requests if r[2] == "bytes=0-262143"]
    assert len(opens) == 3  # two cut short, each asked again from byte 0


def test_500_then_200_is_retried(server, files, tmp_path):
    data, sd = files
    server.behaviour.fail_status = 503
    server.behaviour.fail_times = 2
    got = ckpt.load(server.url("model.safetensors"))
    assert same_dict(got, st.load(data["model.safetensors"]))
    # Without retries: a clear error, and no output.
    server.behaviour.fail_status = 500
    server.behaviour.fail_times = 1
    r = run("convert", server.url("model.safetensors"), tmp_path / "out.safetensors", "--retries", "0")
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert server.url("model.safetensors") in r.stderr and "HTTP 500" in r.stderr
    assert "bytes 0-262143" in r.stderr and "[CKPT_E_REMOTE/CKPT_D_HTTP_STATUS]" in r.stderr
    server.behaviour.fail_times = 1
    c = ckpt.open(server.url("model.safetensors"))
    server.behaviour.fail_times = 1
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.load(server.url("model.safetensors"), retries=0)
    assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_HTTP_STATUS"
    c.close()
    server.behaviour.fail_times = 100
    r = run("convert", server.url("model.safetensors"), tmp_path / "out.safetensors", "--retries", "2")
    assert r.returncode == 1 and "after retries" in r.stderr and "HTTP 500" in r.stderr
    assert no_output(tmp_path, "out.safetensors")


def test_server_ignoring_range(server, files, tmp_path):
    data, sd = files
    server.behaviour.ignore_range = True
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.open(server.url("model.safetensors"))
    assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_NO_RANGES" and "byte ranges" in str(e.value)
    r = run("convert", server.url("model.safetensors"), tmp_path / "out.safetensors")
    assert r.returncode == 1 and "[CKPT_E_REMOTE/CKPT_D_NO_RANGES]" in r.stderr and no_output(tmp_path, "out.safetensors")
    # A small file comes whole in the first answer: it needs no ranges.
    got = ckpt.load(server.url("small.safetensors"))
    assert torch.equal(got["x"], torch.arange(1000, dtype=torch.float32))
    # Ignoring Range only after the open: refused when the data is read.
    server.behaviour.ignore_range = False
    c = ckpt.open(server.url("model.safetensors"))
    server.behaviour.ignore_range = True
    with pytest.raises(ckpt.RemoteError) as e:
        c.get("head.weight")
    assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_NO_RANGES" and e.value.tensor == "head.weight"
    c.close()


def test_slow_server_and_stalls(server, files, tmp_path):
    data, sd = files
    server.behaviour.slow = 0.002
    got = ckpt.load(server.url("model.safetensors"), timeout=5)
    assert same_dict(got, st.load(data["model.safetensors"]))
    server.behaviour.slow = 0.0
    c = ckpt.open(server.url("model.safetensors"))
    server.behaviour.stall = 3.0
    t = time.monotonic()
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.load(server.url("small.safetensors"), timeout=1, retries=1)
    assert status_of(e.value) == "CKPT_E_TIMEOUT/CKPT_D_TIMEOUT" and "small.safetensors" in str(e.value)
    assert time.monotonic() - t < 15
    c.close()


def test_file_changed_mid_load(server, files, tmp_path):
    data, sd = files
    server.behaviour.changed = data["other.safetensors"][:len(data["model.safetensors"])].ljust(
        len(data["model.safetensors"]), b" ")
    server.behaviour.change_after = 2  # the open and one more
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.load(server.url("model.safetensors"), max_connections=1)
    assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_REMOTE_CHANGED" and "bytes" in str(e.value)
    server.gets = 0
    r = run("convert", server.url("model.safetensors"), tmp_path / "out", "--connections", "1")
    assert r.returncode == 1 and "[CKPT_E_REMOTE/CKPT_D_REMOTE_CHANGED]" in r.stderr
    assert not (tmp_path / "out").exists() and no_output(tmp_path, "out")
    # A server without validators is still caught when the size changes.
    server.gets = 0
    server.behaviour.no_validators = True
    server.behaviour.changed = data["model.safetensors"] + b"    "
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.load(server.url("model.safetensors"))
    assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_REMOTE_CHANGED"


@pytest.mark.parametrize("lie", ["range_start", "total_2_63", "length_2_63", "endless"])
def test_hostile_servers_get_a_clear_error(server, files, tmp_path, lie):
    data, sd = files
    b = server.behaviour
    c = None
    if lie == "range_start":
        c = ckpt.open(server.url("model.safetensors"))
        b.lie_range = 4096
    elif lie == "total_2_63":
        b.total_override = 1 << 63
    elif lie == "length_2_63":
        c = ckpt.open(server.url("model.safetensors"))
        b.length_override = 1 << 63
    else:
        c = ckpt.open(server.url("model.safetensors"))
        b.endless = True
    t = time.monotonic()
    with pytest.raises(ckpt.Error) as e:
        if c is None:
            ckpt.load(server.url("model.safetensors"), retries=1)
        else:
            for name in c.keys():
                c.get(name)
    assert time.monotonic() - t < 20
    msg = str(e.value)
    assert "model.safetensors" in msg
    expected = {"range_start": "CKPT_E_REMOTE/CKPT_D_BAD_RESPONSE", "total_2_63": "CKPT_E_CORRUPT/CKPT_D_TRAILING_BYTES",
                "length_2_63": ("CKPT_E_REMOTE/CKPT_D_BAD_RESPONSE", "CKPT_E_NETWORK/CKPT_D_NETWORK"), "endless": "CKPT_E_REMOTE/CKPT_D_BAD_RESPONSE"}[lie]
    assert status_of(e.value) in (expected if isinstance(expected, tuple) else (expected,)), msg
    if lie == "range_start":
        assert "for a request of bytes" in msg
    if lie == "endless":
        assert "more than the" in msg
    if c is not None:
        c.close()
    # The CLI: one line, no output.
    r = run("convert", server.url("model.safetensors"), tmp_path / "o.safetensors", "--retries", "1", "--timeout", "5")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and no_output(tmp_path, "o.safetensors")
