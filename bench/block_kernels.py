"""Single-thread throughput of ckpt_cast's block kernels (quant.c and
quant_x86.c), one process per CKPT_SIMD level (the avx512 level has its own
kernels for Q8_0 dequantization only; the others are AVX2's there too):

    .venv/bin/python bench/block_kernels.py [build/libckpt.so]
"""
import os, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if len(sys.argv) > 2:
    sys.path.insert(0, str(ROOT / "tests"))
    os.environ["CKPT_LIB"] = sys.argv[1]
    import ckptlib, numpy as np
    rng = np.random.default_rng(0)
    for src, dst, elems in (("Q8_0", "BF16", 32), ("Q8_0", "F32", 32), ("Q4_0", "BF16", 32), ("Q4_K", "BF16", 256),
                            ("Q6_K", "BF16", 256), ("F32", "Q8_0", 1), ("BF16", "Q8_0", 1)):
        n = 1 << 23  # elements
        if src.startswith("Q"):
            size = {"Q8_0": 34, "Q4_0": 18, "Q4_K": 144, "Q6_K": 210}[src]
            blocks = np.frombuffer(rng.integers(0, 256, n // elems * size, dtype=np.uint8).tobytes(), np.uint8).reshape(-1, size).copy()
            at = 208 if src == "Q6_K" else 0
            blocks[:, at:at + 2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
            data = blocks.tobytes()
        else:
            x = (rng.standard_normal(n) * 0.02).astype(np.float32)
            data = x.tobytes() if src == "F32" else (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
        import ctypes
        lib = ckptlib._lib
        inb = ctypes.create_string_buffer(data, len(data))
        outb = ctypes.create_string_buffer(n * 4 + 64)
        err = ckptlib.Error()
        best = 1e9
        for _ in range(7):
            t0 = time.perf_counter()
            rc = lib.ckpt_cast(ckptlib.DTYPES.index(src), inb, ckptlib.DTYPES.index(dst), outb, ctypes.c_uint64(n), ctypes.byref(err))
            best = min(best, time.perf_counter() - t0)
            assert rc == 0
        print(f"  {src}->{dst}: {n / best / 1e9:.2f} G elements/s ({len(data) / best / 1e9:.2f} GB/s in)")
else:
    for level in ("scalar", "avx2", "avx512"):
        print(level, flush=True)
        subprocess.run([sys.executable, __file__, sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build/libckpt.so"), "child"],
                       env=dict(os.environ, CKPT_SIMD=level))
