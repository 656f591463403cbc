"""ckpt.jax: checkpoints straight onto a mesh of (8 fake CPU) devices,
against jax.device_put of what numpy / flax read, device by device; the
match report against a Flax model's eval_shape; initialising only what is
missing; two JAX processes."""
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import safetensors.numpy  # noqa: E402
from flax import serialization  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import ckpt  # noqa: E402
import ckpt.jax  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flax_gpt2  # noqa: E402

if len(jax.devices()) < 8:
    pytest.skip("needs 8 CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=8 before jax starts)",
                allow_module_level=True)

MESHES = [(8, 1), (4, 2), (2, 4)]
SPECS = {"dim0": P("x", None), "dim1": P(None, "y"), "both": P("x", "y"), "replicated": P()}


def mesh_of(shape):
    return Mesh(np.array(jax.devices()).reshape(shape), ("x", "y"))


def same_placement(got, want):
    """Same sharding, same shards on the same devices, same bytes."""
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.sharding.is_equivalent_to(want.sharding, got.ndim)
    gs = sorted(got.addressable_shards, key=lambda s: s.device.id)
    ws = sorted(want.addressable_shards, key=lambda s: s.device.id)
    assert [s.device for s in gs] == [s.device for s in ws]
    for a, b in zip(gs, ws):
        assert a.index == b.index
        np.testing.assert_array_equal(np.asarray(a.data).reshape(-1).view(np.uint8),
                                      np.asarray(b.data).reshape(-1).view(np.uint8))


def arrays(dtype):
    rng = np.random.default_rng(0)
    return {
        "w": rng.standard_normal((16, 24)).astype(dtype),
        "v": rng.standard_normal((8, 40)).astype(dtype),
        "b": rng.standard_normal((32,)).astype(dtype),
        "c": rng.standard_normal((8, 8, 3)).astype(dtype),
        "s": np.array(1.5, dtype=dtype),
    }


def sharding_fn(mesh, spec):
    def fn(name, shape):
        if len(shape) >= 2:
            return NamedSharding(mesh, P(*spec, *([None] * (len(shape) - 2))) if spec else P())
        if len(shape) == 1 and spec and spec[0] == "x":
            return NamedSharding(mesh, P("x"))
        return NamedSharding(mesh, P())
    return fn


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("mesh_shape", MESHES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("spec", list(SPECS), ids=str)
def test_load_equals_device_put(tmp_path, dtype, mesh_shape, spec):
    ref = arrays(dtype)
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(ref, path)
    mesh = mesh_of(mesh_shape)
    fn = sharding_fn(mesh, SPECS[spec])
    stats = {}
    out = ckpt.jax.load(path, fn, stats=stats)
    assert set(out) == set(ref)
    for name, a in ref.items():
        same_placement(out[name], jax.device_put(a, fn(name, a.shape)))
    # Each block is read once: the bytes needed are the distinct blocks'
    # bytes.  A block of whole rows is read exactly; a block of columns as
    # the span of its rows (one read, not one per row), never more.
    distinct, spans = 0, 0
    for name, a in ref.items():
        idxs = fn(name, a.shape).addressable_devices_indices_map(a.shape).values()
        blocks = {tuple(sl.indices(n)[:2] for sl, n in zip(idx, a.shape)) for idx in idxs}
        distinct += sum(math.prod(hi - lo for lo, hi in blk) for blk in blocks) * a.itemsize
        spans += sum((blk[0][1] - blk[0][0]) * math.prod(a.shape[1:]) if blk else 1 for blk in blocks) * a.itemsize
    assert stats["bytes_needed"] == distinct
    if spec in ("dim0", "replicated"):
        assert stats["bytes_read"] == distinct
    assert distinct <= stats["bytes_read"] <= spans
    if spec == "replicated":
        assert stats["bytes_read"] == sum(a.nbytes for a in ref.values())  # once, not once per device
        assert stats["device_puts"] == 8 * len(ref)


def test_rectangles_read_only_their_rows_and_columns(tmp_path):
    a = np.arange(64 * 48, dtype=np.float32).reshape(64, 48)
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"a": a}, path)
    mesh = mesh_of((4, 2))
    stats = {}
    out = ckpt.jax.load(path, NamedSharding(mesh, P("x", "y")), stats=stats, nested=False)
    same_placement(out["a"], jax.device_put(a, NamedSharding(mesh, P("x", "y"))))
    # Every element once; the column blocks as spans of their rows (one
    # read for 16 rows of 96 bytes, not 16 reads): at most twice the rows.
    assert stats["blocks"] == 8 and stats["bytes_needed"] == a.nbytes
    assert a.nbytes <= stats["bytes_read"] <= 2 * a.nbytes
    # A mesh over half the devices: only those blocks exist.
    half = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
    out = ckpt.jax.load(path, NamedSharding(half, P("x", None)), stats=stats, nested=False)
    assert {s.device.id for s in out["a"].addressable_shards} == {0, 1, 2, 3}
    assert stats["blocks"] == 2 and stats["bytes_read"] == a.nbytes and stats["device_puts"] == 4


def test_cast_rename_transpose_layout(tmp_path):
    rng = np.random.default_rng(1)
    ref = {"model.dense.weight": rng.standard_normal((16, 32)).astype(np.float32),
           "model.conv.weight": rng.standard_normal((8, 4, 3, 2)).astype(np.float32)}
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(ref, path)
    mesh = mesh_of((4, 2))

    def fn(name, shape):
        return NamedSharding(mesh, P("x", "y") if len(shape) == 2 else P(None, None, "y", "x"))

    out = ckpt.jax.load(path, fn, dtype="bfloat16", rename={"model.": ""}, transpose="*dense*",
                        layout={"*conv*": "OIHW:HWIO"}, nested=False)
    dense = ref["model.dense.weight"].T.astype(ml_dtypes.bfloat16)
    conv = ref["model.conv.weight"].transpose(2, 3, 1, 0).astype(ml_dtypes.bfloat16)
    same_placement(out["dense.weight"], jax.device_put(dense, fn("dense.weight", dense.shape)))
    same_placement(out["conv.weight"], jax.device_put(conv, fn("conv.weight", conv.shape)))
    # select / exclude
    out = ckpt.jax.load(path, exclude="*conv*", nested=False)
    assert list(out) == ["model.dense.weight"]
    assert out["model.dense.weight"].sharding.device_set == {jax.local_devices()[0]}


def test_sharding_forms(tmp_path):
    ref = {"a": {"w": np.ones((8, 8), np.float32), "b": np.zeros(8, np.float32)}, "c": np.arange(16.0)}
    flat = {"a.w": ref["a"]["w"], "a.b": ref["a"]["b"], "c": ref["c"]}
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(flat, path)
    mesh = mesh_of((4, 2))
    row = NamedSharding(mesh, P("x"))
    # a pytree of shardings shaped like ckpt.shapes
    tree = jax.tree.map(lambda s: NamedSharding(mesh, P("x")), ckpt.shapes(path))
    out = ckpt.jax.load(path, tree)
    assert out["a"]["w"].sharding == row and out["c"].sharding == row
    # PartitionSpecs with mesh=, a flat dict, one sharding for all
    out = ckpt.jax.load(path, {"a": {"w": P("x", "y"), "b": P()}, "c": P("y")}, mesh=mesh)
    assert out["a"]["w"].sharding == NamedSharding(mesh, P("x", "y"))
    assert out["c"].sharding == NamedSharding(mesh, P("y"))
    out = ckpt.jax.load(path, {"a.w": row, "a.b": row, "c": row}, nested=False)
    assert all(v.sharding == row for v in out.values())
    out = ckpt.jax.load(path, row)
    np.testing.assert_array_equal(np.asarray(out["c"]), ref["c"].astype(np.float32))
    with pytest.raises(KeyError, match="'a.b'"):
        ckpt.jax.load(path, {"a": {"w": row}, "c": row})
    with pytest.raises(ValueError, match="mesh="):
        ckpt.jax.load(path, P("x"))
    with pytest.raises(Exception, match="'c'"):
        ckpt.jax.load(path, lambda n, s: NamedSharding(mesh_of((8, 1)), P(None, "x") if n == "a.w" else P("x")) if n
                      != "c" else NamedSharding(Mesh(np.array(jax.devices()[:3]), ("z",)), P("z")))
    # Shapes with their shardings, reading nothing.
    sds = ckpt.jax.shapes(path, row)
    assert sds["a"]["w"].shape == (8, 8) and sds["a"]["w"].sharding == row


def test_sharding_prefix_trees(tmp_path):
    """A pytree of shardings may be a prefix of the checkpoint's tree, as
    JAX takes it: a leaf applies to its whole subtree; a leaf naming no
    tensor nor subtree, or one below another leaf, is an error."""
    rng = np.random.default_rng(7)
    flat = {"body.dense1.kernel": rng.standard_normal((8, 16)).astype(np.float32),
            "body.dense1.bias": rng.standard_normal(16).astype(np.float32),
            "body.dense2.kernel": rng.standard_normal((16, 8)).astype(np.float32),
            "head.kernel": rng.standard_normal((8, 4)).astype(np.float32)}
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(flat, path)
    mesh = mesh_of((4, 2))
    rows, cols = NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P(None, "y"))
    want = {"body.dense1.kernel": rows, "body.dense1.bias": NamedSharding(mesh, P("x")),
            "body.dense2.kernel": cols, "head.kernel": NamedSharding(mesh, P())}
    for tree in ({"body": {"dense1": rows, "dense2": cols}, "head": P()},
                 {"body.dense1": rows, "body.dense2": cols, "head": {"kernel": P()}}):
        out = ckpt.jax.tree_names(ckpt.jax.load(path, tree, mesh=mesh))
        assert sorted(out) == sorted(flat)
        for name, sharding in want.items():
            same_placement(out[name], jax.device_put(flat[name], sharding))
        sds = ckpt.jax.tree_names(ckpt.jax.shapes(path, tree, mesh=mesh))
        assert {n: v.sharding for n, v in sds.items()} == want
    # A selection loads part of what the tree covers.
    out = ckpt.jax.load(path, {"body": rows, "head": rows}, select="head.*", nested=False)
    assert list(out) == ["head.kernel"] and out["head.kernel"].sharding == rows
    with pytest.raises(ValueError, match=r"not a prefix of the checkpoint's tree: 'body.dense9'"):
        ckpt.jax.load(path, {"body": {"dense1": rows, "dense9": rows}, "head": rows})
    with pytest.raises(ValueError, match=r"not a prefix of the checkpoint's tree: 'tail'"):
        ckpt.jax.shapes(path, {"body": rows, "head": rows, "tail": rows})
    with pytest.raises(ValueError, match=r"'body' is a leaf .* 'body.dense1.kernel' lies below it"):
        ckpt.jax.load(path, {"body": rows, "body.dense1.kernel": cols, "head": rows})
    with pytest.raises(KeyError, match="'head.kernel'"):
        ckpt.jax.load(path, {"body": rows})


def test_one_spec_is_fitted_to_each_rank(tmp_path):
    """One NamedSharding(mesh, P("x", None)) for every tensor: vectors come
    back P("x") and scalars P(), shardings jax.device_put itself takes."""
    ref = arrays(np.float32)
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(ref, path)
    mesh = mesh_of((8, 1))
    one = NamedSharding(mesh, P("x", None))
    out = ckpt.jax.load(path, one, nested=False)
    specs = {name: out[name].sharding.spec for name in ref}
    assert specs == {"w": P("x", None), "v": P("x", None), "b": P("x"), "c": P("x", None), "s": P()}
    for name, a in ref.items():
        same_placement(out[name], jax.device_put(a, out[name].sharding))
    with pytest.raises(ValueError, match="incompatible with its sharding"):
        jax.device_put(ref["b"], one)  # what the vector would have come with
    sds = ckpt.jax.shapes(path, one, nested=False)
    assert {name: v.sharding.spec for name, v in sds.items()} == specs


def test_ckpt_load_with_a_sharding_routes_here(tmp_path):
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"a": a}, path)
    sharding = NamedSharding(mesh_of((8, 1)), P("x"))
    out = ckpt.load(path, framework="flax", device=sharding)
    same_placement(out["a"], jax.device_put(a, sharding))
    out = ckpt.load(path, framework="flax", device=jax.devices()[3])
    assert out["a"].sharding.device_set == {jax.devices()[3]}


# ---------------------------------------------------------------------------
# Flax: a transformers-style GPT-2 saved by flax.serialization, head missing

@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    model = flax_gpt2.model()
    rng = jax.random.PRNGKey(0)
    variables = model.init(rng, flax_gpt2.dummy_input())
    params = jax.device_get(variables["params"])
    saved = {"transformer": params["transformer"]}  # the base model: no lm_head
    d = tmp_path_factory.mktemp("gpt2")
    (d / "flax_model.msgpack").write_bytes(serialization.to_bytes(saved))
    bf16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), saved)
    (d / "bf16.msgpack").write_bytes(serialization.to_bytes(bf16))
    return model, rng, params, d


def gpt2_sharding(mesh):
    def fn(name, shape):
        if len(shape) == 2:
            return NamedSharding(mesh, P("x", "y"))
        return NamedSharding(mesh, P("x") if shape[0] % 8 == 0 else P())
    return fn


@pytest.mark.parametrize("file", ["flax_model.msgpack", "bf16.msgpack"])
@pytest.mark.parametrize("mesh_shape", MESHES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_flax_gpt2_loads_onto_mesh(gpt2, file, mesh_shape):
    model, rng, params, d = gpt2
    restored = serialization.msgpack_restore((d / file).read_bytes())
    # The catalog keeps Flax's structure: blocks are dicts keyed "0", "1".
    tree = ckpt.open(d / file).tree()
    spec = lambda x: isinstance(x, ckpt.TensorSpec)  # noqa: E731
    assert jax.tree.structure(tree, is_leaf=spec) == jax.tree.structure(restored)
    assert set(tree["transformer"]["h"]) == {"0", "1"}
    mesh = mesh_of(mesh_shape)
    fn = gpt2_sharding(mesh)
    out = ckpt.jax.load(d / file, fn)
    assert jax.tree.structure(out) == jax.tree.structure(restored)
    for name, want in ckpt.jax.tree_names(restored).items():
        got = ckpt.jax.tree_names(out)[name]
        same_placement(got, jax.device_put(want, fn(name, want.shape)))
    # ckpt.load reads it too, flat, with transformers' names.
    flat = ckpt.load(d / file, framework="np")
    assert "transformer.h.0.attn.c_attn.kernel" in flat


def test_match_against_eval_shape(gpt2):
    model, rng, params, d = gpt2
    expected = jax.eval_shape(model.init, rng, flax_gpt2.dummy_input())
    report = ckpt.jax.match(d / "flax_model.msgpack", expected["params"])
    assert report.missing_keys == ["lm_head.kernel"]
    assert report.unexpected_keys == [] and report.mismatched_keys == []
    # The checkpoint's transposed kernels (as torch's Linear stores them)
    # mismatch; transposing them on the way matches again.
    report = ckpt.jax.match(d / "flax_model.msgpack", expected["params"], transpose="*c_fc.kernel")
    assert [m.name for m in report.mismatched_keys] == ["transformer.h.0.mlp.c_fc.kernel",
                                                          "transformer.h.1.mlp.c_fc.kernel"]
    assert report.mismatched_keys[0].expected.shape == (128, 32)
    assert report.mismatched_keys[0].found == ckpt.TensorSpec((32, 128), "F32")
    report = ckpt.jax.match(d / "flax_model.msgpack", {"params": expected["params"]})
    assert len(report.missing_keys) == len(report.unexpected_keys) + 1


def test_init_missing_creates_only_the_head(gpt2):
    model, rng, params, d = gpt2
    mesh = mesh_of((4, 2))
    fn = gpt2_sharding(mesh)
    loaded = ckpt.jax.load(d / "flax_model.msgpack", fn)
    stats = {}
    head = NamedSharding(mesh, P(None, "x"))
    variables, report = ckpt.jax.init_missing(model.init, {"params": loaded}, rng, flax_gpt2.dummy_input(),
                                              shardings=lambda n, s: head if n == "params.lm_head.kernel" else None,
                                              stats=stats)
    assert report.missing_keys == ["params.lm_head.kernel"]
    assert report.unexpected_keys == [] and report.mismatched_keys == []
    assert stats["initialised"] == ["params.lm_head.kernel"]
    new = variables["params"]["lm_head"]["kernel"]
    assert new.sharding == head  # born sharded
    # Deterministic: the same values as the full init, of the head only.
    np.testing.assert_array_equal(np.asarray(new), np.asarray(params["lm_head"]["kernel"]))
    # Loaded leaves are the loaded arrays themselves (no second copy).
    assert variables["params"]["transformer"]["wte"]["embedding"] is loaded["transformer"]["wte"]["embedding"]
    # XLA kept only the head: its output is the head's bytes, and the
    # program is a fraction of the full init's.
    full = ckpt.jax.program_stats(jax.jit(lambda: model.init(rng, flax_gpt2.dummy_input())).lower().compile())
    assert stats["output_bytes"] == new.addressable_shards[0].data.nbytes == new.nbytes // 4  # per device
    assert full["output_bytes"] > 10 * stats["output_bytes"]
    assert stats["hlo_instructions"] * 4 < full["hlo_instructions"]
    # The model runs on the result.
    logits = model.apply(variables, flax_gpt2.dummy_input())
    want = model.apply({"params": params}, flax_gpt2.dummy_input())
    np.testing.assert_allclose(np.asarray(logits), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_init_missing_mismatched_and_unexpected(gpt2):
    model, rng, params, d = gpt2
    loaded = ckpt.jax.load(d / "flax_model.msgpack")
    loaded["transformer"]["ln_f"]["scale"] = jnp.ones(7)
    loaded["extra"] = jnp.zeros(2)
    with pytest.raises(ValueError, match="ln_f.scale: checkpoint \\(7,\\), model \\(32,\\)"):
        ckpt.jax.init_missing(model.init, {"params": loaded}, rng, flax_gpt2.dummy_input())
    variables, report = ckpt.jax.init_missing(model.init, {"params": loaded}, rng, flax_gpt2.dummy_input(),
                                              reinit_mismatched=True)
    assert report.missing_keys == ["params.lm_head.kernel"]
    assert report.unexpected_keys == ["params.extra"]
    assert [m.name for m in report.mismatched_keys] == ["params.transformer.ln_f.scale"]
    assert variables["params"]["transformer"]["ln_f"]["scale"].shape == (32,)
    assert "extra" not in variables["params"]


def test_chunked_msgpack_onto_mesh(tmp_path, monkeypatch):
    # Flax cuts arrays over 2**30 bytes into chunks; a small limit makes
    # small arrays chunked the same way.
    monkeypatch.setattr(serialization, "MAX_CHUNK_SIZE", 100)
    ref = {"emb": np.arange(32 * 24, dtype=np.float32).reshape(32, 24), "b": np.arange(40, dtype=np.float32)}
    path = tmp_path / "c.msgpack"
    path.write_bytes(serialization.msgpack_serialize(ref))
    assert "__msgpack_chunked_array__" in serialization.msgpack.unpackb(path.read_bytes(), raw=False,
                                                                         strict_map_key=False,
                                                                         ext_hook=lambda c, d: None)["emb"]
    restored = serialization.msgpack_restore(path.read_bytes())
    for mesh_shape in MESHES:
        mesh = mesh_of(mesh_shape)
        fn = lambda n, s: NamedSharding(mesh, P("x", "y") if len(s) == 2 else P("x"))  # noqa: E731
        out = ckpt.jax.load(path, fn)
        for k in ref:
            same_placement(out[k], jax.device_put(restored[k], fn(k, ref[k].shape)))


def test_npz_and_npy_onto_mesh(tmp_path):
    rng = np.random.default_rng(3)
    a = np.asfortranarray(rng.standard_normal((16, 8)).astype(np.float32))
    b = rng.standard_normal((8, 16)).astype(ml_dtypes.bfloat16)
    np.savez_compressed(tmp_path / "z.npz", a=a, b=b)
    np.save(tmp_path / "a.npy", a)
    mesh = mesh_of((2, 4))
    s = NamedSharding(mesh, P("x", "y"))
    out = ckpt.jax.load(tmp_path / "z.npz", s)
    same_placement(out["a"], jax.device_put(np.load(tmp_path / "z.npz")["a"], s))
    same_placement(out["b"], jax.device_put(np.load(tmp_path / "z.npz")["b"].view(ml_dtypes.bfloat16), s))
    out = ckpt.jax.load(tmp_path / "a.npy", s)
    same_placement(out["a"], jax.device_put(np.load(tmp_path / "a.npy"), s))


# ---------------------------------------------------------------------------
# Memory: the arrays themselves plus the ring, not twice the checkpoint

MEMORY_SCRIPT = r"""
import json, os, sys
import numpy as np, jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import ckpt.jax
path, spec = sys.argv[1], sys.argv[2]
mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
s = NamedSharding(mesh, P("x", None) if spec == "rows" else P("x", "y"))
ckpt.jax.load(path, s, nested=False)  # warm: compile nothing later, page cache filled
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM"))
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS"))
import gc; gc.collect()
base = rss()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
out = ckpt.jax.load(path, s, nested=False)
jax.block_until_ready(out)
print(json.dumps({"base": base, "peak": hwm(), "bytes": sum(a.nbytes for a in out.values())}))
"""


@pytest.mark.parametrize("spec", ["rows", "both"])
def test_peak_memory_is_the_arrays(tmp_path, spec):
    rng = np.random.default_rng(5)
    tensors = {f"layer{i}": rng.standard_normal((512, 1024)).astype(ml_dtypes.bfloat16) for i in range(48)}
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(tensors, path)  # 48 MiB
    r = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(path), spec], capture_output=True, text=True,
                       timeout=300, env=os.environ)
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout.strip().splitlines()[-1])
    grew = m["peak"] - m["base"]
    # The warm-up's arrays are gone: what grows is the arrays, the ring and
    # the engine's threads.
    assert grew <= 1.1 * m["bytes"] + (64 << 20), (grew, m)


# ---------------------------------------------------------------------------
# Two JAX processes on localhost

MP_SCRIPT = r"""
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
pid, port, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=pid, initialization_timeout=60)
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import ckpt.jax
mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
ref = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
out = {}
for spec in ["rows", "both", "replicated"]:
    s = NamedSharding(mesh, {"rows": P("x", None), "both": P("x", "y"), "replicated": P()}[spec])
    stats = {}
    a = ckpt.jax.load(path, s, nested=False, stats=stats)["a"]
    ok = all(np.array_equal(np.asarray(sh.data), ref[sh.index]) for sh in a.addressable_shards)
    total = jax.jit(lambda x: x.sum(), out_shardings=NamedSharding(mesh, P()))(a)
    out[spec] = {"ok": ok, "bytes_read": stats["bytes_read"], "bytes_needed": stats["bytes_needed"],
                 "shards": len(a.addressable_shards),
                 "sum": float(np.asarray(total.addressable_data(0)))}
print("RESULT " + json.dumps(out), flush=True)
jax.distributed.shutdown()
"""


def test_two_processes(tmp_path):
    path = tmp_path / "m.safetensors"
    ref = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
    safetensors.numpy.save_file({"a": ref}, path)
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = [subprocess.Popen([sys.executable, "-c", MP_SCRIPT, str(i), str(port), str(path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        line = next(l for l in out.splitlines() if l.startswith("RESULT "))
        results.append(json.loads(line[7:]))
    for r in results:
        for spec, v in r.items():
            assert v["ok"] and v["shards"] == 4 and v["sum"] == float(ref.sum()), (spec, v)
        # Each process reads only its own devices' blocks: half the rows;
        # a quarter of the rectangles twice over is again half (read as
        # spans of their rows: at most those rows, twice); replicated arrays
        # are read once per process.
        assert r["rows"]["bytes_read"] == r["rows"]["bytes_needed"] == ref.nbytes // 2
        assert r["both"]["bytes_needed"] == ref.nbytes // 2
        assert ref.nbytes // 2 <= r["both"]["bytes_read"] <= ref.nbytes
        assert r["replicated"]["bytes_read"] == ref.nbytes


def test_names_with_glob_characters(tmp_path):
    # Tensors are chosen by exact name: names holding glob characters too.
    ref = {"a*b": np.arange(64.0).reshape(8, 8), "a[0]": np.ones((8, 8)), "x?y": np.zeros((8, 8)),
           "back\\slash": np.full((8, 8), 3.0), "axb": np.full((8, 8), 4.0)}
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({k: v.astype(np.float32) for k, v in ref.items()}, path)
    s = NamedSharding(mesh_of((8, 1)), P("x"))
    out = ckpt.jax.load(path, s, nested=False)
    assert set(out) == set(ref)
    for k, v in ref.items():
        same_placement(out[k], jax.device_put(v.astype(np.float32), s))
