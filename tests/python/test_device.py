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
CUFILE_STANDIN = STANDIN.parent / "libcufile_standin.so"
CUFILE_KNOBS = ("CKPT_STANDIN_CUFILE_OPEN_FAILS", "CKPT_STANDIN_CUFILE_REGISTER_FAILS", "CKPT_STANDIN_CUFILE_FAIL_READ",
                "CKPT_STANDIN_CUFILE_SHORT_READ")


@pytest.fixture
def standin(monkeypatch):
    if not STANDIN.exists():
        pytest.fail(f"the stand-in CUDA runtime is not built: {STANDIN} (make build)")
    monkeypatch.setenv("CKPT_CUDART", str(STANDIN))
    for knob in ("CKPT_STANDIN_COPY_DELAY_US", "CKPT_STANDIN_FAIL_COPY", "CKPT_STANDIN_DEVICES") + CUFILE_KNOBS:
        monkeypatch.delenv(knob, raising=False)
    monkeypatch.setenv("CKPT_CUFILE", "/nonexistent/libcufile.so.0")  # the ring alone, unless a test asks
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


def ticks_during(load):
    """Runs load() while another Python thread ticks every 2 ms: (the
    load's seconds, the ticks that landed during it)."""
    ticks, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.002)
    t = threading.Thread(target=tick)
    t.start()
    start = time.monotonic()
    load()
    end = time.monotonic()
    stop.set()
    t.join()
    return end - start, sum(start < x < end for x in ticks)


def test_the_gil_is_released_while_copies_run(tmp_path, standin, monkeypatch):
    monkeypatch.setenv("CKPT_STANDIN_COPY_DELAY_US", "20000")  # 20 ms a copy
    path = write_model(tmp_path)
    plan = plan_of(path)
    _device._devices["cuda:0"] = _ckpt.Device("cuda:0", slots=2, slot_bytes=64 << 10)
    held = []
    seconds, ticks = ticks_during(
        lambda: _device.load_through_ring(plan, plan.items(), "cuda:0", device_alloc(standin, held), threads=1))
    assert seconds > 0.1
    assert ticks > 10  # the other thread ran meanwhile
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


# ---------------------------------------------------------------------------
# load_into onto CUDA (issue 31 §2, Python): torch here has no CUDA, so the
# tests answer _device.torch_cuda's questions over the stand-in runtime —
# tensors "on cuda:0" are host tensors whose memory the stand-in copies
# into, as a GPU's would be.  What this proves is ckpt's side: which
# destinations the plan gets (device pointers through the ring, host
# buffers for host tensors), the bytes, and that no host copy is made.

class StandinTorch:
    """_device.TorchCuda over the stand-in: a tensor is on cuda:0 when its
    memory is the stand-in's device memory (cudaMalloc'ed by empty() or
    to_device()), else on the host."""

    def __init__(self, lib):
        self.lib, self.on_device, self.synced, self.allocated, self.held = lib, set(), [], [], []

    def available(self):
        return True

    def current(self):
        return 0

    def device_of(self, t):
        import torch
        return torch.device("cuda", 0) if t.numel() and t.untyped_storage().data_ptr() in self.on_device else None

    def empty(self, shape, dtype, device):
        import torch
        assert str(device) == "cuda:0"
        count = torch.Size(shape).numel()
        nbytes = max(1, count * torch.empty((), dtype=dtype).element_size())
        p = ctypes.c_void_p()
        assert self.lib.cudaMalloc(ctypes.byref(p), nbytes) == 0
        self.held.append(p.value)
        self.on_device.add(p.value)
        buf = (ctypes.c_char * nbytes).from_address(p.value)
        t = torch.frombuffer(buf, dtype=dtype, count=count).view(shape) if count else torch.empty(shape, dtype=dtype)
        self.allocated.append(t)
        return t

    def to_device(self, module, *names):
        """Moves the named parameters of `module` to the stand-in device."""
        import torch
        for name in names:
            owner, attr = module.get_submodule(name.rpartition(".")[0]), name.rpartition(".")[2]
            old = getattr(owner, attr)
            new = self.empty(old.shape, old.dtype, "cuda:0")
            new.copy_(old)
            setattr(owner, attr, torch.nn.Parameter(new, old.requires_grad))

    def synchronize(self, device):
        self.synced.append(str(device))

    def free(self):
        for p in self.held:
            self.lib.cudaFree(ctypes.c_void_p(p))


@pytest.fixture
def standin_torch(standin, monkeypatch):
    pytest.importorskip("torch")
    standin.ckpt_standin_reset()
    fake = StandinTorch(standin)
    monkeypatch.setattr(_device, "torch_cuda", fake)
    yield fake
    fake.allocated.clear()
    fake.free()


def no_host_copies(monkeypatch):
    """Fails a test that copies a tensor in through the host or reads one
    into new host memory: the framework's copy_into, from_buffer, to()."""
    from ckpt import _frameworks

    def refuse(*a, **k):
        raise AssertionError("a host copy of a tensor on the device")
    monkeypatch.setattr(_frameworks.Torch, "copy_into", staticmethod(refuse))
    monkeypatch.setattr(_frameworks.Torch, "from_buffer", staticmethod(refuse))


def torch_model_file(tmp_path, dtype=None):
    import torch
    torch.manual_seed(31)
    state = {"a.weight": torch.randn(300, 257), "a.bias": torch.randn(300), "b.weight": torch.randn(64, 300),
             "b.bias": torch.randn(64)}
    if dtype is not None:
        state = {k: v.to(dtype) for k, v in state.items()}
    path = str(tmp_path / "model.safetensors")
    ckpt.torch.save_file(state, path)
    return path, state


def two_layers(dtype=None):
    import torch
    torch.manual_seed(0)
    m = torch.nn.ModuleDict({"a": torch.nn.Linear(257, 300), "b": torch.nn.Linear(300, 64)})
    return m.to(dtype) if dtype is not None else m


def ring_stats():
    return _device.open_device("cuda:0").stats()


def test_load_into_a_module_on_cuda_goes_through_the_ring_in_place(tmp_path, standin_torch, monkeypatch):
    import torch
    path, state = torch_model_file(tmp_path)
    model = two_layers()
    standin_torch.to_device(model, *dict(model.named_parameters()))
    where = {k: v.data_ptr() for k, v in model.state_dict().items()}
    no_host_copies(monkeypatch)
    result = ckpt.load_into(model, path, threads=2)
    assert not result.missing_keys and not result.unexpected_keys
    for k, v in model.state_dict().items():
        assert v.data_ptr() == where[k] and torch.equal(v, state[k]), k
    stats = ring_stats()
    assert stats["path"] == "staged" and stats["bytes_copied"] == sum(v.nbytes for v in state.values())
    assert standin_torch.synced == ["cuda:0"]  # torch's queued work waited for before the ring writes


def test_load_into_on_cuda_casts_on_the_host_and_transposes(tmp_path, standin_torch, monkeypatch):
    import torch
    path, state = torch_model_file(tmp_path)  # float32 in the file
    model = two_layers(torch.bfloat16)
    model["a"].weight = torch.nn.Parameter(torch.empty(257, 300, dtype=torch.bfloat16))  # the file's, transposed
    standin_torch.to_device(model, *dict(model.named_parameters()))
    no_host_copies(monkeypatch)
    ckpt.load_into(model, path, transpose=["a.weight"])
    assert torch.equal(model["a"].weight, state["a.weight"].t().to(torch.bfloat16))
    assert torch.equal(model["b"].weight, state["b.weight"].to(torch.bfloat16))
    assert ring_stats()["bytes_copied"] == sum(v.nbytes for v in state.values()) // 2  # bf16 on the device


def test_load_into_mixed_devices_each_tensor_to_its_own(tmp_path, standin_torch):
    import torch
    path, state = torch_model_file(tmp_path)
    model = two_layers()
    standin_torch.to_device(model, "a.weight", "b.bias")  # the others stay on the host
    ckpt.load_into(model, path)
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert ring_stats()["bytes_copied"] == state["a.weight"].nbytes + state["b.bias"].nbytes


def test_load_into_assign_on_cuda_allocates_each_tensor_there(tmp_path, standin_torch, monkeypatch):
    import torch
    path, state = torch_model_file(tmp_path, torch.float16)
    with torch.device("meta"):
        model = two_layers()
    model["b"].weight.requires_grad_(False)
    seen = {}
    no_host_copies(monkeypatch)
    ckpt.load_into(model, path, assign=True, device="cuda:0", dtype="float32",
                   on_loaded=lambda n, t: seen.setdefault(n, t.data_ptr()))
    on_device = {t.data_ptr() for t in standin_torch.allocated}
    for k, v in model.state_dict(keep_vars=True).items():
        assert isinstance(v, torch.nn.Parameter) and v.dtype == torch.float32, k
        assert v.data_ptr() in on_device and seen[k] == v.data_ptr(), k  # the device memory, not a copy
        assert torch.equal(v, state[k].float()), k
    assert not model["b"].weight.requires_grad and model["a"].weight.requires_grad
    assert ring_stats()["bytes_copied"] == 2 * sum(v.nbytes for v in state.values())


def test_load_on_cuda_through_the_ring(tmp_path, standin_torch, monkeypatch):
    import torch
    path, state = torch_model_file(tmp_path)
    no_host_copies(monkeypatch)
    got = ckpt.load(path, device="cuda:0", dtype="bfloat16", threads=2)
    assert {t.data_ptr() for t in got.values()} == {t.data_ptr() for t in standin_torch.allocated}
    for k, v in state.items():
        assert torch.equal(got[k], v.to(torch.bfloat16)), k


def test_load_into_on_cuda_releases_the_gil(tmp_path, standin_torch, monkeypatch):
    monkeypatch.setenv("CKPT_STANDIN_COPY_DELAY_US", "20000")  # 20 ms a copy
    path, _ = torch_model_file(tmp_path)
    model = two_layers()
    standin_torch.to_device(model, *dict(model.named_parameters()))
    _device._devices["cuda:0"] = _ckpt.Device("cuda:0", slots=2, slot_bytes=64 << 10)
    seconds, ticks = ticks_during(lambda: ckpt.load_into(model, path, threads=1))
    assert seconds > 0.1 and ring_stats()["copies"] >= 6
    assert ticks > 10


def test_transformers_device_map_cuda_loads_through_the_ring(tmp_path, standin_torch, monkeypatch):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import ckpt.transformers as ckt
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    want = transformers.LlamaForCausalLM.from_pretrained(tmp_path).state_dict()
    # transformers' own finishing (its missing keys and buffers moved with
    # torch.empty_like(device="cuda:0")) needs a torch with CUDA: it is
    # tests/gpu/test_gpu.py's; here it is stepped over.
    finalized = []
    monkeypatch.setattr(transformers.PreTrainedModel, "_finalize_model_loading",
                        staticmethod(lambda model, config, info: finalized.append(config.device_map) or info))
    got = ckt.AutoModelForCausalLM.from_pretrained(tmp_path, device_map="cuda:0")
    assert finalized == [{"": "cuda:0"}]
    on_device = {t.data_ptr() for t in standin_torch.allocated}
    state = got.state_dict()
    assert set(state) == set(want)
    for k, v in state.items():
        assert v.data_ptr() in on_device and torch.equal(v, want[k]), k
    for k, v in got.named_buffers():  # rotary inv_freq, computed by the model on the device
        assert v.data_ptr() in on_device, k
    assert ring_stats()["bytes_copied"] == sum(v.nbytes for v in want.values())


# ---------------------------------------------------------------------------
# GPUDirect Storage through the stand-in cuFile (tests/gpu/standin/
# cufile_standin.c): pread into the stand-in's device memory.

@pytest.fixture
def cufile(standin, monkeypatch):
    if not CUFILE_STANDIN.exists():
        pytest.fail(f"the stand-in cuFile is not built: {CUFILE_STANDIN} (make build)")
    monkeypatch.setenv("CKPT_CUFILE", str(CUFILE_STANDIN))
    lib = ctypes.CDLL(str(CUFILE_STANDIN))
    lib.ckpt_standin_cufile_reset()
    return lib


def big_model(tmp_path):
    rng = np.random.default_rng(7)
    tensors = {"big": rng.standard_normal((512, 600)).astype(np.float32),
               "small": rng.standard_normal(100).astype(np.float32)}
    path = str(tmp_path / "big.safetensors")
    ckpt.numpy.save_file(tensors, path)
    return path, tensors


def test_cufile_reads_unchanged_bytes_straight_to_the_device(tmp_path, standin, cufile):
    path, tensors = big_model(tmp_path)
    held = []
    for cast, path_taken in ((None, "mixed"), ("BF16", "staged")):  # a cast runs on the host: the ring
        host = plan_of(path, cast)
        host.load()
        want = [bytes(host.data(i)) for i in range(len(host.items()))]
        plan = plan_of(path, cast)
        _device._devices["cuda:0"] = _ckpt.Device("cuda:0", slots=4, slot_bytes=256 << 10)
        got = _device.load_through_ring(plan, plan.items(), "cuda:0", device_alloc(standin, held), threads=2)
        assert [ctypes.string_at(address, n) for address, n in got] == want
        stats = _device.open_device("cuda:0").stats()
        assert stats["cufile_open"] and stats["path"] == path_taken
        assert stats["bytes_direct"] + stats["bytes_copied"] == sum(map(len, want))
        if cast is None:
            assert stats["bytes_direct"] >= tensors["big"].nbytes - 2 * 4096 * stats["direct_reads"]
        else:
            assert stats["bytes_direct"] == 0
    for p in held:
        standin.cudaFree(p)


def test_cufile_driver_refused_is_a_clean_fallback(tmp_path, standin, cufile, monkeypatch):
    monkeypatch.setenv("CKPT_STANDIN_CUFILE_OPEN_FAILS", "1")
    path, _ = big_model(tmp_path)
    plan = plan_of(path)
    held = []
    _device.load_through_ring(plan, plan.items(), "cuda:0", device_alloc(standin, held))
    stats = _device.open_device("cuda:0").stats()
    assert stats["cufile_found"] and not stats["cufile_open"]
    assert stats["path"] == "staged" and stats["bytes_direct"] == 0
    for p in held:
        standin.cudaFree(p)


def test_cufile_failed_read_raises_naming_tensor_and_range(tmp_path, standin, cufile, monkeypatch):
    monkeypatch.setenv("CKPT_STANDIN_CUFILE_FAIL_READ", "2")
    path, _ = big_model(tmp_path)
    plan = plan_of(path)
    plan.select("big")
    held = []
    _device._devices["cuda:0"] = _ckpt.Device("cuda:0", slots=2, slot_bytes=256 << 10)
    with pytest.raises(ckpt.Error) as e:
        _device.load_through_ring(plan, plan.items(), "cuda:0", device_alloc(standin, held), threads=1)
    assert e.value.status == "CKPT_E_IO" and e.value.tensor == "big"
    assert "cuFileRead of bytes [" in str(e.value) and "of the tensor on cuda:0" in str(e.value)
    assert "Input/output error" in str(e.value)
    for p in held:
        standin.cudaFree(p)
