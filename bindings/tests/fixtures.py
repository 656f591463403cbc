#!/usr/bin/env python3
"""Files written by the reference tools, and checks by them, for the Rust
and Elixir bindings' tests (run with the worktree's .venv: torch,
safetensors, huggingface_hub, numpy and the ckpt Python package).

  fixtures.py make DIR
      Writes, with torch / safetensors / huggingface_hub / ckpt (Python):
        dtypes.safetensors   every common dtype, a scalar, an empty tensor and
                             a unicode name (safetensors.torch.save_file)
        sharded/             huggingface_hub.save_torch_state_dict, 3 shards
        resnet.pt            a small torchvision-shaped ResNet state dict
                             (torch.save; f32 weights, i64 num_batches_tracked)
        views.pt             a transposed view and a tied weight (torch.save)
        train.pt             a training checkpoint with non-tensor values
        args.pt              one holding an argparse.Namespace (outside
                             torch's weights-only allowlist)
        py_tree/             ckpt.save of a nested tree (tuples, lists, int keys)
      and the truth about them, in two files the tests read without a JSON
      library: manifest.tsv (one line per fact) and expected.raw (the bytes
      every tensor and every transformed tensor must have):
        file   FILE  FORMAT  NTENSORS
        t      FILE  NAME  DTYPE  SHAPE  OFFSET  NBYTES     (SHAPE: "3,4", "" for a scalar)
        meta   FILE  KEY  VALUE
        expect CASE  DTYPE  SHAPE  OFFSET  NBYTES           (a transform's result, see CASES)

  fixtures.py resnet152 PATH
      A torchvision-shaped ResNet-152 state dict (60.2M parameters, random
      f32 values) saved with torch.save, for bench/ and the example.

  fixtures.py check PATH SPEC.tsv
      Reads the checkpoint at PATH (file or directory of shards) with
      safetensors (safe_open, framework="pt") and checks it holds exactly
      the tensors of SPEC.tsv — lines "t NAME DTYPE SHAPE HEXFILE" or
      "gen NAME DTYPE SHAPE SEED" (values from gen(), see below) — and the
      metadata lines "meta KEY VALUE" (in the file, or in the index).

  fixtures.py hub-serve DIR
      Serves DIR's files on loopback through the tests' Hub
      (tests/sources/hub.py) as the public repo org/tiny and the gated repo
      org/gated; prints "ENDPOINT <url>" and serves until stdin closes.

  fixtures.py resave-cmp FILE
      safetensors.torch.load_file + save_file(metadata=the file's) into a
      temporary file and compares the bytes with FILE.

  fixtures.py tree-check DIR
      The Elixir binding's save of TREE (below): read back by safetensors
      (every shard) and by ckpt.load(nested=True) (tuples, lists, int keys).

  fixtures.py tree-save DIR [MAX_SHARD_SIZE]
      ckpt.save of TREE (numpy), for byte comparisons with the Elixir save.
"""
import json
import os
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

def tdtypes():
    import torch
    return {
        "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
        "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
        "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
        "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64, "C64": torch.complex64,
    }


def raw(t):
    """The tensor's bytes, contiguous, little-endian."""
    import torch
    t = t.detach().contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def shape_str(shape):
    return ",".join(str(int(s)) for s in shape)


def resnet_state_dict(blocks, widths, classes, seed=0):
    """torchvision's ResNet (Bottleneck) state_dict names and shapes, random values."""
    import torch
    g = torch.Generator().manual_seed(seed)
    sd = {}

    def conv(name, cout, cin, k):
        sd[name + ".weight"] = torch.randn(cout, cin, k, k, generator=g)

    def bn(name, c):
        sd[name + ".weight"] = torch.rand(c, generator=g)
        sd[name + ".bias"] = torch.randn(c, generator=g)
        sd[name + ".running_mean"] = torch.randn(c, generator=g)
        sd[name + ".running_var"] = torch.rand(c, generator=g)
        sd[name + ".num_batches_tracked"] = torch.tensor(1000 + len(sd))

    conv("conv1", widths[0], 3, 7)
    bn("bn1", widths[0])
    cin = widths[0]
    for li, (n, w) in enumerate(zip(blocks, widths), 1):
        for b in range(n):
            p = f"layer{li}.{b}"
            conv(p + ".conv1", w, cin, 1)
            bn(p + ".bn1", w)
            conv(p + ".conv2", w, w, 3)
            bn(p + ".bn2", w)
            conv(p + ".conv3", 4 * w, w, 1)
            bn(p + ".bn3", 4 * w)
            if b == 0:
                conv(p + ".downsample.0", 4 * w, cin, 1)
                bn(p + ".downsample.1", 4 * w)
            cin = 4 * w
    sd["fc.weight"] = torch.randn(classes, cin, generator=g)
    sd["fc.bias"] = torch.randn(classes, generator=g)
    return sd


def resnet152():
    return resnet_state_dict([3, 8, 36, 3], [64, 128, 256, 512], 1000)


# The tree both bindings and Python agree on (tree-check / tree-save): leaves
# are numpy arrays generated from (dtype, shape, seed).
def gen(dtype, shape, seed):
    n = int(np.prod(shape)) if shape else 1
    i = np.arange(n, dtype=np.int64)
    if dtype in ("F32", "F64"):
        v = (i * 0.25 - seed).astype(np.float32 if dtype == "F32" else np.float64)
    elif dtype == "BF16":
        f = (i % 512 - 256 + seed).astype(np.float32)
        v = (f.view(np.uint32) >> 16).astype(np.uint16)
    elif dtype == "F16":
        v = (i % 1024 - 512 + seed).astype(np.float16)
    elif dtype == "I64":
        v = i * 3 - seed
    elif dtype == "I32":
        v = (i * 7 - seed).astype(np.int32)
    elif dtype == "U8":
        v = ((i + seed) % 256).astype(np.uint8)
    else:
        raise ValueError(dtype)
    return v.reshape(shape)


def tree():
    """{"embed": …, "layers": [ {…}, {…} ], "pair": (…, …), 7: …} with the
    keys in Elixir's term order (ints before strings, strings bytewise)."""
    import ml_dtypes

    def leaf(dtype, shape, seed):
        v = gen(dtype, shape, seed)
        return v.view(ml_dtypes.bfloat16) if dtype == "BF16" else v
    return {
        7: leaf("I64", (3,), 1),
        "embed": {"weight": leaf("BF16", (16, 8), 2)},
        "layers": [
            {"bias": leaf("F32", (8,), 4), "kernel": leaf("F32", (8, 8), 3)},
            {"kernel": leaf("F32", (8, 8), 5), "scale": leaf("F16", (8,), 6)},
        ],
        "pair": (leaf("I32", (2, 2), 7), (leaf("U8", (5,), 8), leaf("F64", (), 9))),
    }


def make(d):
    import torch
    from safetensors.torch import save_file
    from huggingface_hub import save_torch_state_dict
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    lines, blob = [], bytearray()

    def put(b):
        off = len(blob)
        blob.extend(b)
        return off, len(b)

    def record(fname, fmt, sd, meta=None):
        lines.append(f"file\t{fname}\t{fmt}\t{len(sd)}")
        for name, t in sd.items():
            dt = next(k for k, v in tdtypes().items() if v == t.dtype)
            off, n = put(raw(t))
            lines.append(f"t\t{fname}\t{name}\t{dt}\t{shape_str(t.shape)}\t{off}\t{n}")
        for k, v in (meta or {}).items():
            lines.append(f"meta\t{fname}\t{k}\t{v}")

    def expect(case, t):
        dt = next(k for k, v in tdtypes().items() if v == t.dtype)
        off, n = put(raw(t))
        lines.append(f"expect\t{case}\t{dt}\t{shape_str(t.shape)}\t{off}\t{n}")

    g = torch.Generator().manual_seed(1)
    dt = {
        "f32": torch.randn(3, 4, generator=g),
        "f16": torch.randn(5, generator=g).half(),
        "bf16": torch.randn(2, 3, generator=g).bfloat16(),
        "f64": torch.randn(2, 2, generator=g).double(),
        "i64": torch.tensor([-5, 0, 7, 1 << 40]),
        "i32": torch.tensor([-1, 2, 3], dtype=torch.int32),
        "i16": torch.tensor([-300, 2, 300], dtype=torch.int16),
        "i8": torch.tensor([-128, -1, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 1, 254, 255], dtype=torch.uint8),
        "u16": torch.tensor([0, 65535], dtype=torch.uint16),
        "u32": torch.tensor([7, 1 << 31], dtype=torch.uint32),
        "u64": torch.tensor([9, 1 << 62], dtype=torch.uint64),
        "bool": torch.tensor([True, False, True, True, False]),
        "f8_e4m3": torch.tensor([0.5, -2.0, 448.0, 0.0]).to(torch.float8_e4m3fn),
        "f8_e5m2": torch.tensor([0.5, -2.0, 57344.0, 0.0]).to(torch.float8_e5m2),
        "c64": torch.tensor([1 + 2j, -3.5 + 0.25j], dtype=torch.complex64),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "ünï.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    }
    save_file(dt, str(d / "dtypes.safetensors"), metadata={"format": "pt"})
    record("dtypes.safetensors", "safetensors", dt, {"format": "pt"})

    sh = {f"model.layers.{i}.weight": torch.randn(64, 64, generator=g).bfloat16() for i in range(6)}
    (d / "sharded").mkdir(exist_ok=True)
    save_torch_state_dict(sh, str(d / "sharded"), max_shard_size="20KB", metadata={"origin": "hub"})
    # The catalog's metadata: the index's own ("origin") and the shards' ("format").
    record("sharded", "safetensors-sharded", sh, {"origin": "hub", "format": "pt"})

    rn = resnet_state_dict([1, 1, 2, 1], [8, 16, 16, 32], 10, seed=3)
    torch.save(rn, d / "resnet.pt")
    record("resnet.pt", "torch", rn)

    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    views = {"base": base, "t": base.t(), "tied": base}
    torch.save(views, d / "views.pt")
    record("views.pt", "torch", views)

    train = {"model": {"w": torch.ones(2, 2)}, "epoch": 3, "opt": {"lr": 0.1, "betas": (0.9, 0.999)}, "name": "run"}
    torch.save(train, d / "train.pt")
    record("train.pt", "torch", {"model.w": train["model"]["w"]})

    import argparse
    torch.save({"args": argparse.Namespace(lr=0.5, name="run"), "w": torch.tensor([1.0, 2.0])}, d / "args.pt")

    # Transforms, computed by torch.
    expect("cast_bf16_f32", dt["bf16"].float())
    expect("cast_f32_bf16", dt["f32"].bfloat16())
    expect("transpose_fc", rn["fc.weight"].t())
    expect("layout_conv1_hwio", rn["conv1.weight"].permute(2, 3, 1, 0))
    expect("split_fc_1_of_3", torch.tensor_split(rn["fc.weight"], 3, dim=0)[1])
    expect("slice_fc_cols_2_5", rn["fc.weight"][:, 2:5])
    expect("views_t", views["t"])

    try:
        import ckpt
    except ImportError:
        sys.exit("fixtures.py: the ckpt Python package is not installed in this Python (make python-package)")
    ckpt.save(tree(), d / "py_tree")
    lines.append("file\tpy_tree\tsafetensors\t6")

    (d / "manifest.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (d / "expected.raw").write_bytes(bytes(blob))


def read_checkpoint(path):
    """As read_checkpoint, through safetensors' torch API (every dtype)."""
    from safetensors import safe_open
    path = Path(path)
    meta = {}
    if path.is_dir():
        idx = path / "model.safetensors.index.json"
        if idx.exists():
            index = json.loads(idx.read_text())
            paths = [path / f for f in sorted(set(index["weight_map"].values()))]
            meta = dict(index.get("metadata", {}))
            names = set(index["weight_map"])
        else:
            paths, names = [path / "model.safetensors"], None
    else:
        paths, names = [path], None
    out, file_meta = {}, {}
    for p in paths:
        with safe_open(str(p), framework="pt") as f:
            file_meta.update(f.metadata() or {})
            for k in f.keys():
                t = f.get_tensor(k)
                dt = next(n for n, v in tdtypes().items() if v == t.dtype)
                out[k] = (dt, tuple(t.shape), raw(t))
    if names is not None and names != set(out):
        raise SystemExit(f"index weight_map {sorted(names)} != shards' tensors {sorted(out)}")
    return out, meta, file_meta


def check(path, spec):
    got, index_meta, file_meta = read_checkpoint(path)
    want, want_meta = {}, {}
    for line in Path(spec).read_text(encoding="utf-8").splitlines():
        f = line.split("\t")
        if f[0] == "t":
            shape = tuple(int(s) for s in f[3].split(",") if s)
            want[f[1]] = (f[2], shape, bytes.fromhex(f[4]))
        elif f[0] == "gen":
            shape = tuple(int(s) for s in f[3].split(",") if s)
            want[f[1]] = (f[2], shape, gen(f[2], shape, int(f[4])).tobytes())
        elif f[0] == "meta":
            want_meta[f[1]] = f[2]
    problems = []
    if set(got) != set(want):
        problems.append(f"tensors {sorted(got)} != expected {sorted(want)}")
    for k in sorted(set(got) & set(want)):
        if got[k][:2] != want[k][:2]:
            problems.append(f"{k}: {got[k][:2]} != expected {want[k][:2]}")
        elif got[k][2] != want[k][2]:
            problems.append(f"{k}: bytes differ")
    meta = {**file_meta, **index_meta}
    for k, v in want_meta.items():
        if meta.get(k) != v:
            problems.append(f"metadata {k!r}: {meta.get(k)!r} != expected {v!r}")
    if problems:
        raise SystemExit("safetensors disagrees:\n  " + "\n  ".join(problems))
    print(f"ok: safetensors read {len(got)} tensors")


def resave_cmp(path):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    sd = load_file(str(path))
    with tempfile.TemporaryDirectory() as td:
        out = Path(td) / "x.safetensors"
        save_file(sd, str(out), metadata=meta)
        a, b = Path(path).read_bytes(), out.read_bytes()
    if a != b:
        n = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
        raise SystemExit(f"{path} differs from safetensors' save_file output at byte {n} "
                         f"({len(a)} vs {len(b)} bytes): {a[max(0, n - 40):n + 40]!r} vs {b[max(0, n - 40):n + 40]!r}")
    print("ok: byte-identical to safetensors.torch.save_file")


def tree_check(d):
    import ckpt
    want = tree()
    got, index_meta, file_meta = read_checkpoint(d)
    flat = ckpt.flatten(want)
    import ml_dtypes
    dtype_of = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("float16"): "F16",
                np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("uint8"): "U8",
                np.dtype(ml_dtypes.bfloat16): "BF16"}
    problems = []
    if set(got) != set(flat):
        problems.append(f"names {sorted(got)} != {sorted(flat)}")
    for k, v in flat.items():
        if k not in got:
            continue
        dt = dtype_of[v.dtype]
        if got[k] != (dt, tuple(v.shape), v.tobytes()):
            problems.append(f"{k}: {got[k][:2]} != {(dt, tuple(v.shape))} or bytes differ")
    back = ckpt.load(d, framework="numpy", nested=True)

    def same(a, b, where):
        if isinstance(b, dict):
            if not isinstance(a, dict) or list(a) != list(b):
                problems.append(f"{where}: {type(a).__name__} {list(a) if isinstance(a, dict) else ''} != dict {list(b)}")
                return
            for k in b:
                same(a[k], b[k], f"{where}.{k}")
        elif isinstance(b, (list, tuple)):
            if type(a) is not type(b) or len(a) != len(b):
                problems.append(f"{where}: {type(a).__name__} != {type(b).__name__}")
                return
            for i, (x, y) in enumerate(zip(a, b)):
                same(x, y, f"{where}.{i}")
        else:
            x = np.asarray(a)
            if x.dtype != b.dtype or x.shape != b.shape or x.tobytes() != b.tobytes():
                problems.append(f"{where}: {x.dtype}{x.shape} != {b.dtype}{b.shape} or values differ")

    same(back, want, "<root>")
    if problems:
        raise SystemExit("the Elixir tree read back differently:\n  " + "\n  ".join(problems))
    print(f"ok: safetensors read {len(got)} tensors; ckpt.load(nested=True) gave the same containers")


def tree_save(d, max_shard_size=None):
    import ckpt
    if max_shard_size:
        ckpt.save(tree(), d, max_shard_size=max_shard_size)
    else:
        ckpt.save(tree(), d)


def hub_serve(folder):
    """The tests' Hub (tests/sources/hub.py) on loopback, serving the files
    of `folder` as the public repo org/tiny and as the gated repo
    org/gated; prints "ENDPOINT <url>" and serves until stdin closes."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "tests", "sources"))
    from hub import HubServer
    files = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            files[name] = f.read()
    with HubServer() as hub:
        hub.add("org/tiny", files)
        hub.add("org/gated", files, gated=True)
        print("ENDPOINT", hub.endpoint, flush=True)
        sys.stdin.read()


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        make(args[0])
    elif cmd == "resnet152":
        import torch
        torch.save(resnet152(), args[0])
    elif cmd == "check":
        check(args[0], args[1])
    elif cmd == "resave-cmp":
        resave_cmp(args[0])
    elif cmd == "tree-check":
        tree_check(args[0])
    elif cmd == "tree-save":
        tree_save(args[0], *args[1:])
    elif cmd == "hub-serve":
        hub_serve(args[0])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
