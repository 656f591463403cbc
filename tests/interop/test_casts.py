"""ckpt_cast against torch's Tensor.to(): every bit pattern of every 16- and
8-bit float as a source, a dense sweep of float32 rounding boundaries, and
float64 — at every SIMD level this CPU has (CKPT_SIMD, one process each).

NaN: torch's own NaN bits differ between its scalar and vector paths (a
float16 NaN becomes 0x7fffffff alone but keeps its payload in an array), so
where torch gives a NaN ckpt must give a NaN of the same sign class — every
other value must match bit for bit."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import ckptlib  # noqa: E402
from statuses import status_of

FLOATS = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "F8_E4M3FNUZ": torch.float8_e4m3fnuz,
          "F8_E5M2FNUZ": torch.float8_e5m2fnuz, "F8_E8M0": torch.float8_e8m0fnu}
UINT = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32, 8: torch.uint64}
NP_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def all_patterns(name):
    dt = FLOATS[name]
    size = torch.empty(0, dtype=dt).element_size()
    return torch.arange(2 ** (8 * size), dtype=torch.int64).to(UINT[size]).view(dt) if size <= 2 else None


def f32_boundaries():
    """Every float32 whose low 16 bits sit at a rounding boundary of f16,
    bf16 or a float8 (ties, one ulp either side), for all high bits."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000,
                     0x5000, 0xFFF, 0xD000, 0xA001], dtype=np.uint32)
    values = (high[:, None] | lows[None, :]).ravel()
    rng = np.random.default_rng(7)
    values = np.concatenate([values, rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)])
    return torch.from_numpy(values.view(np.float32))


def f64_values():
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 1 << 63, 1 << 18, dtype=np.int64).view(np.uint64)
    bits[::2] |= np.uint64(1 << 63)
    vals = bits.view(np.float64)
    # Around float32 ties: 1 + 2^-24 ± tiny, and the float8/f16 ties.
    ties = np.array([1 + 2 ** -24 + 2 ** -50, 1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -40, 1 + 2 ** -4 + 2 ** -40,
                     448.0, 480.0, 65504.0, 65520.0, 57344.0, 240.0, 1e-40, -0.0, np.inf, -np.inf, np.nan],
                    dtype=np.float64)
    return torch.from_numpy(np.concatenate([vals, ties, -ties]))


def compare(src_name, dst_name, t):
    size_in, size_out = t.element_size(), torch.empty(0, dtype=FLOATS[dst_name]).element_size()
    expected = t.to(FLOATS[dst_name])
    got_bytes = ckptlib.cast(src_name, t.contiguous().view(UINT[size_in]).numpy().tobytes(), dst_name, t.numel())
    got = torch.from_numpy(np.frombuffer(got_bytes, dtype=NP_UINT[size_out]).copy()).view(FLOATS[dst_name])
    e_bits = expected.view(UINT[size_out]).to(torch.int64) if size_out < 8 else expected.view(torch.int64)
    g_bits = got.view(UINT[size_out]).to(torch.int64) if size_out < 8 else got.view(torch.int64)
    e_nan = torch.isnan(expected.to(torch.float64))
    g_nan = torch.isnan(got.to(torch.float64))
    bad = (e_nan != g_nan) | (~e_nan & (e_bits != g_bits))
    if bad.any():
        i = int(bad.nonzero()[0])
        src_bits = t.contiguous().view(UINT[size_in])[i].item()
        raise AssertionError(f"{src_name}->{dst_name}: {int(bad.sum())} mismatches, first: source bits "
                             f"{src_bits:#x}: torch {e_bits[i].item():#x}, ckpt {g_bits[i].item():#x}")


def run_all():
    for src in FLOATS:
        if src == "F32":
            t = f32_boundaries()
        elif src == "F64":
            t = f64_values()
        else:
            t = all_patterns(src)
        for dst in FLOATS:
            compare(src, dst, t)


def cpu_levels():
    flags = open("/proc/cpuinfo").read()
    levels = ["scalar"]
    if " avx2" in flags and " f16c" in flags:
        levels.append("avx2")
    if " avx512f" in flags and " avx512bw" in flags and " avx512vl" in flags:
        levels.append("avx512")
    return levels


@pytest.mark.parametrize("level", ["scalar", "avx2", "avx512"])
def test_every_pattern_matches_torch(level):
    if level not in cpu_levels():
        pytest.skip(f"this CPU has no {level}")
    env = dict(os.environ, CKPT_SIMD=level)
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_integer_widening_and_refusals():
    v = np.array([-128, -1, 0, 1, 127], dtype=np.int8)
    assert np.frombuffer(ckptlib.cast("I8", v.tobytes(), "I64", 5), dtype=np.int64).tolist() == v.tolist()
    u = np.array([0, 1, 200, 255], dtype=np.uint8)
    assert np.frombuffer(ckptlib.cast("U8", u.tobytes(), "I32", 4), dtype=np.int32).tolist() == u.tolist()
    assert ckptlib.can_cast("I16", "I32") and ckptlib.can_cast("BOOL", "I64")
    assert not ckptlib.can_cast("I32", "I16")      # narrowing
    assert not ckptlib.can_cast("I32", "F32")      # int <-> float
    assert not ckptlib.can_cast("I8", "U16")       # signed to unsigned
    with pytest.raises(ckptlib.CkptError) as e:
        ckptlib.cast("F32", b"\0" * 4, "I32", 1)
    assert status_of(e.value) == "CKPT_E_INVALID_ARGUMENT" and "F32 to I32" in e.value.message


if __name__ == "__main__":
    run_all()
