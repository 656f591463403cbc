"""The Python side of the device destination (ckpt._device, _ckpt.Device,
Plan.set_device_buffer), driven through the stand-in CUDA runtime that the
C tests build (tests/gpu/standin): its "device" memory is host memory, so
the bytes that reach it can be read back here.  torch here has no CUDA, so
what only a GPU can check — torch tensors allocated on the device, their
data_ptr() as destinations, torch's libcudart found in the process — is
tests/gpu/run.sh's (tests/gpu/README.md)."""
import ctypes
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ckpt
import ckpt.numpy
import ckpt.torch
from ckpt import _ckpt, _device

STANDIN = Path(os.environ.get("CKPT_LIB", "build/libckpt.so")).parent / "tests/unit/libcudart_standin.so"


@pytest.fixture
def standin(monkeypatch):
    if not STANDIN.exists():
        pytest.fail(f"the stand-in CUDA runtime is not built: {STANDIN} (make build)")
    monkeypatch.setenv("CKPT_CUDART", str(STANDIN))
    for knob in ("CKPT_STANDIN_COPY_DELAY_US", "CKPT_STANDIN_FAIL_COPY", "CKPT_STANDIN_DEVICES"):
        monkeypatch.delenv(knob, raising=False)
    monkeypatch.setattr(_device, "_devices", {})
    lib = ctypes.CDLL(str(STANDIN))
    lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.cudaFree.argtypes = [ctypes.c_void_p]
    return lib


def write_model(tmp_path):
    rng = np.random.default_rng(31)
    tensors = {"w": rng.standard_normal((300, 257)).astype(np.float32),
               "e": rng.integers(-9, 9, (4096, 33)).astype(np.int16),
               "b": rng.standard_normal(1000).astype(np.float16)}
    path = str(tmp_path / "m.safetensors")
    ckpt.numpy.save_file(tensors, path)
    return path


def device_alloc(lib, held):
    """allocate() for load_through_ring: stand-in device memory."""
    def allocate(i, item):
        p = ctypes.c_void_p()
        assert lib.cudaMalloc(ctypes.byref(p), max(item.nbytes, 1)) == 0
        held.append(p.value)
        return (p.value, item.nbytes), p.value
    return allocate


def plan_of(path, cast=None, split=None):
    plan = _ckpt.Plan(_ckpt.Catalog(path))
    if cast:
        plan.cast(None, cast)
    if split:
        plan.split(None, *split)
    return plan


@pytest.mark.parametrize("cast, split", [(None, None), ("F64", None), ("BF16", (0, 1, 2))])
def test_device_bytes_equal_a_host_load(tmp_path, standin, cast, split):
    path = write_model(tmp_path)
    host = plan_of(path, cast, split)
    host.load()
    want = [bytes(host.data(i)) for i in range(len(host.items()))]
    plan = plan_of(path, cast, split)
    held = []
    got = _device.load_through_ring(plan, plan.items(), "cuda:0", device_alloc(standin, held), threads=2)
    assert [ctypes.string_at(address, n) for address, n in got] == want
    stats = _device.open_device("cuda:0").stats()
    assert stats["path"] == "staged" and stats["bytes_copied"] == sum(map(len, want))
    for p in held:
        standin.cudaFree(p)


def test_the_gil_is_released_while_copies_run(tmp_path, standin, monkeypatch):
    monkeypatch.setenv("CKPT_STANDIN_COPY_DELAY_US", "20000")  # 20 ms a copy
    path = write_model(tmp_path)
    plan = plan_of(path)
    _device._devices["cuda:0"] = _ckpt.Device("cuda:0", slots=2, slot_bytes=64 << 10)
    ticks, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.002)
    t = threading.Thread(target=tick)
    held = []
    t.start()
    start = time.monotonic()
    _device.load_through_ring(plan, plan.items(), "cuda:0", device_alloc(standin, held), threads=1)
    end = time.monotonic()
    stop.set()
    t.join()
    assert end - start > 0.1
    assert sum(start < x < end for x in ticks) > 10  # the other thread ran meanwhile
    for p in held:
        standin.cudaFree(p)


def test_a_failed_copy_raises_naming_the_tensor(tmp_path, standin, monkeypatch):
    monkeypatch.setenv("CKPT_STANDIN_FAIL_COPY", "1")
    ctypes.CDLL(str(STANDIN)).ckpt_standin_reset()
    path = write_model(tmp_path)
    plan = plan_of(path)
    plan.select("w")
    held = []
    with pytest.raises(ckpt.Error) as e:
        _device.load_through_ring(plan, plan.items(), "cuda:0", device_alloc(standin, held), threads=1)
    assert e.value.status == "CKPT_E_IO" and e.value.tensor == "w"
    assert "illegal memory access" in str(e.value)
    ctypes.CDLL(str(STANDIN)).ckpt_standin_reset()
    for p in held:
        standin.cudaFree(p)


def test_no_cuda_runtime_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CKPT_CUDART", "/nonexistent/libcudart.so.12")
    with pytest.raises(ckpt.Error) as e:
        _ckpt.Device("cuda:0")
    assert e.value.status == "CKPT_E_NOT_FOUND"
    assert "/nonexistent/libcudart.so.12" in str(e.value)


def test_without_torch_cuda_loads_keep_their_host_path(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch has CUDA here: tests/gpu/run.sh checks the device path")
    path = write_model(tmp_path)
    monkeypatch.setattr(_device, "_devices", {})
    assert _device.torch_cuda_device("cuda:0") is None
    with pytest.raises((AssertionError, RuntimeError)) as before:  # torch's own words
        torch.zeros(1).to("cuda:0")
    with pytest.raises(type(before.value)) as e:
        ckpt.load(path, device="cuda:0")
    assert str(e.value) == str(before.value)
    with pytest.raises(type(before.value)):
        ckpt.torch.load_file(path, device="cuda:0")
    assert _device._devices == {}  # the ring was never opened
