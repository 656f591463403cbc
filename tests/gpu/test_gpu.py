"""GPU tests of the device destination (issue 31), run by tests/gpu/run.sh
on a machine with a CUDA GPU and torch built for it: every load onto the
device is bit-exact against a CPU load followed by .cuda(); the bytes went
through the ring (the device's stats count its copies); a module loaded in
place, a model built on meta, and a 20 GB checkpoint in 1 GB shards with
host memory bounded by the ring.  Without a GPU every test skips."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import gpudata  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: tests/gpu/README.md")

import ckpt  # noqa: E402
import ckpt.torch  # noqa: E402
from ckpt import _device  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
          "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64", "complex64"]
TRANSFORMS = [{}, {"dtype": "float32"}, {"dtype": "bfloat16"}, {"dtype": "float16"}, {"tp_rank": 1, "tp_size": 2},
              {"tp_rank": 0, "tp_size": 4, "tp_dim": 1}, {"transpose": ["*"]}, {"slices": {"*": (1, 5, 70)}},
              {"dtype": "float32", "transpose": ["*"], "tp_rank": 1, "tp_size": 2}]


def random_tensor(dtype, rows=64, cols=96):
    dt = getattr(torch, dtype)
    if dt is torch.bool:
        return torch.randint(0, 2, (rows, cols), dtype=torch.uint8).view(torch.bool)
    size = torch.empty((), dtype=dt).element_size()
    return torch.randint(0, 256, (rows, cols * size), dtype=torch.uint8).view(dt)


@pytest.fixture(scope="module")
def every_dtype(tmp_path_factory):
    from safetensors.torch import save_file
    torch.manual_seed(31)
    path = str(tmp_path_factory.mktemp("dtypes") / "all.safetensors")
    save_file({f"t_{d}": random_tensor(d) for d in DTYPES if hasattr(torch, d)}, path)
    return path


def same_bytes(a, b):
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def ring_copies():
    dev = _device._devices.get("cuda:0")
    return dev.stats()["copies"] if dev else 0


@pytest.mark.parametrize("kw", TRANSFORMS, ids=[repr(t) for t in TRANSFORMS])
def test_bit_exact_against_a_cpu_load_then_cuda(every_dtype, kw):
    want = {k: v.cuda() for k, v in ckpt.load(every_dtype, copy=True, **kw).items()}
    before = ring_copies()
    got = ckpt.load(every_dtype, device="cuda:0", **kw)
    assert ring_copies() > before  # through the ring, not host then .to()
    assert list(got) == list(want)
    for name in want:
        assert got[name].device.type == "cuda", name
        assert same_bytes(got[name], want[name]), name


def test_load_file_matches_safetensors(every_dtype):
    from safetensors.torch import load_file
    want = load_file(every_dtype, device="cuda:0")
    for device in ("cuda:0", "cuda", 0):
        got = ckpt.torch.load_file(every_dtype, device=device)
        assert set(got) == set(want)
        for name in want:
            assert got[name].device == want[name].device and same_bytes(got[name], want[name]), (device, name)
    stats = _device._devices["cuda:0"].stats()
    assert stats["path"] == "staged"
    print("device stats:", stats)


def small_model():
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 128),
                               torch.nn.LayerNorm(128))


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    from safetensors.torch import save_file
    torch.manual_seed(7)
    state = {k: torch.randn_like(v) for k, v in small_model().state_dict().items()}
    path = str(tmp_path_factory.mktemp("model") / "model.safetensors")
    save_file(state, path)
    return path, state


def test_a_module_on_the_gpu_loaded_in_place(model_file):
    path, state = model_file
    model = small_model().cuda()
    where = {k: v.data_ptr() for k, v in model.state_dict().items()}
    result = ckpt.load_into(model, path)
    assert not result.missing_keys and not result.unexpected_keys
    for k, v in model.state_dict().items():
        assert v.data_ptr() == where[k], k  # in place
        assert same_bytes(v, state[k].cuda()), k


def test_a_model_built_on_meta(model_file):
    path, state = model_file
    with torch.device("meta"):
        model = small_model()
    ckpt.load_into(model, path, assign=True, device="cuda")
    for k, v in model.state_dict().items():
        assert v.device.type == "cuda", k
        assert same_bytes(v, state[k].cuda()), k


def test_20_gb_in_1_gb_shards(record_property):
    import time
    root = gpudata.shards("set20", 20, 1 << 30)
    gpudata.evict(root)
    torch.cuda.synchronize()
    start = time.perf_counter()
    with gpudata.PeakRss() as rss:
        out = ckpt.load(root, device="cuda:0")
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    nbytes = sum(t.nbytes for t in out.values())
    stats = _device._devices["cuda:0"].stats()
    ring = stats["slots"] * stats["slot_bytes"]
    record_property("seconds", round(seconds, 3))
    record_property("GBps", round(nbytes / seconds / 1e9, 3))
    record_property("rss_growth_MiB", round(rss.growth / 2**20, 1))
    record_property("ring_MiB", ring / 2**20)
    print(f"20 GB set, cold: {nbytes / 1e9:.1f} GB in {seconds:.2f} s ({nbytes / seconds / 1e9:.2f} GB/s), "
          f"host RSS grew {rss.growth / 2**20:.0f} MiB (ring {ring / 2**20:.0f} MiB)")
    for file, tensors in gpudata.layout(20, gpudata.scale(1 << 30)):
        for name, seed, rows in tensors:
            assert torch.equal(out[name].view(torch.int16), gpudata.tensor(seed, rows).view(torch.int16)), name
    assert nbytes >= 20 * gpudata.scale(1 << 30) * 0.99
    # no host copy of the model: at most the ring, the engine's buffers and
    # the Python objects (a host copy would be 20 GiB)
    assert rss.growth <= ring + (256 << 20), rss.growth
