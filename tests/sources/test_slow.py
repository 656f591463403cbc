"""A server that trickles 4 bytes a second (tests/sources/servers.py's
Trickle, on loopback): bytes keep coming, so the read timeout never fires,
but the minimum speed does — CKPT_E_TIMEOUT/CKPT_D_TIMEOUT naming the URL and the byte
reached — and retries stop at the retry deadline however many are left, so
the command ends in bounded time."""
import time

import pytest
from conftest import run
from servers import Trickle

import ckpt
from statuses import status_of


@pytest.fixture
def trickle():
    with Trickle() as t:
        yield t


def timed_inspect(url, *args):
    start = time.monotonic()
    r = run("inspect", url, "--timeout", "5", "--min-speed-time", "1", *args, timeout=120)
    return r, time.monotonic() - start


def test_trickle_fails_on_the_minimum_speed(trickle):
    url = trickle.url("model.safetensors")
    r, took = timed_inspect(url, "--retries", "0")
    assert r.returncode == 1, r.stdout
    assert "[CKPT_E_TIMEOUT/CKPT_D_TIMEOUT]" in r.stderr and url in r.stderr
    assert "slower than the minimum speed of 1024 bytes/s" in r.stderr
    assert "at byte " in r.stderr and "bytes 0-262143 (the first request)" in r.stderr
    # One window of 1 s from the answer's first header (not the 5 s read timeout).
    assert 0.9 < took < 4, took


def test_retries_stop_at_the_retry_deadline(trickle):
    url = trickle.url("model.safetensors")
    # 100 retries of a 1 s window each would hold it for minutes: the
    # deadline ends it after 3 s, plus the one attempt under way.
    r, took = timed_inspect(url, "--retries", "100", "--retry-deadline", "3")
    assert r.returncode == 1 and "[CKPT_E_TIMEOUT/CKPT_D_TIMEOUT]" in r.stderr, r.stderr
    assert "passes the retry deadline (3 s)" in r.stderr and "after retries" in r.stderr
    assert 3 <= took < 7, took
    assert 2 <= trickle.requests < 8


def test_python_keywords(trickle):
    url = trickle.url("model.safetensors")
    start = time.monotonic()
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.open(url, timeout=5, min_speed_time=1, retry_deadline=2)
    assert time.monotonic() - start < 6
    assert status_of(e.value) == "CKPT_E_TIMEOUT/CKPT_D_TIMEOUT" and e.value.path == url and isinstance(e.value.offset, int)
    assert "retry deadline (2 s)" in str(e.value)
    with pytest.raises(ValueError):
        ckpt.open(url, min_speed=-1)
    with pytest.raises(ValueError):
        ckpt.open(url, min_speed_time=0)
    r = run("inspect", url, "--min-speed", "fast")
    assert r.returncode == 2 and "--min-speed" in r.stderr


def test_a_fast_enough_server_is_not_cut(trickle):
    """The minimum is a floor, not a deadline: 200 bytes/s against a
    minimum of 100 bytes/s keeps going for as long as it takes."""
    fast = Trickle(size=1200, rate=200)
    try:
        start = time.monotonic()
        with pytest.raises(ckpt.SafetensorError):  # 1200 zero bytes: no safetensors header
            ckpt.open(fast.url("z.safetensors"), min_speed=100, min_speed_time=1, retries=0)
        assert time.monotonic() - start > 5  # 6 s of bytes, through 5 windows
    finally:
        fast.close()
