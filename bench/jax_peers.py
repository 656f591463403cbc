"""The contenders of `make bench`'s jax suite, one per process: each puts a
whole checkpoint onto 8 CPU devices with a sharding, then checksums every
byte of every device's shard (the same wrapping sum of 64-bit words as
bench/peers.py).  Prints one JSON object.

    python bench/jax_peers.py MODE MESH PATH [PROCESS_ID PORT]
MODE: ckpt        ckpt.jax.load(PATH, shardings)
      st_numpy    safetensors.numpy.load_file, then jax.device_put(tree, shardings)
      st_flax     safetensors.flax.load_file (jax arrays on device 0), then jax.device_put
      msgpack     flax.serialization.msgpack_restore(file bytes), then jax.device_put
      orbax       orbax StandardCheckpointer.restore with the shardings (an Orbax checkpoint of the same arrays)
MESH: rows (8x1 mesh, 2-D arrays PartitionSpec('x', None)) | rect (4x2 mesh, PartitionSpec('x', 'y'));
      1-D arrays are replicated.
With PROCESS_ID and PORT: one of two JAX processes (jax.distributed on
localhost, 4 CPU devices each).

Reports: seconds (load + checksum), load_seconds (until every array is
ready), rss_base (after imports and backend start, before the load),
rss_peak (VmHWM), array_bytes (bytes of this process's shards, one per
device), bytes_read / bytes_needed (ckpt's engine).
"""
import json
import os
import sys
import time

mode, mesh_kind, path = sys.argv[1], sys.argv[2], sys.argv[3]
multi = len(sys.argv) > 5
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={4 if multi else 8}"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

if multi:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"localhost:{sys.argv[5]}", num_processes=2, process_id=int(sys.argv[4]))


def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


devices = np.array(jax.devices())
mesh = Mesh(devices.reshape(8, 1) if mesh_kind == "rows" else devices.reshape(4, 2), ("x", "y"))
spec2 = P("x", None) if mesh_kind == "rows" else P("x", "y")


def sharding_for(shape):
    return NamedSharding(mesh, spec2 if len(shape) == 2 else P())


jax.device_put(np.zeros(8, np.float32), sharding_for((8,))).block_until_ready()  # start the backend
rss_base = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:  # VmHWM from here on
    f.write("5")

stats = {}
t0 = time.perf_counter()
if mode == "ckpt":
    import ckpt.jax
    out = ckpt.jax.load(path, lambda name, shape: sharding_for(shape), nested=False, stats=stats)
elif mode == "st_numpy":
    from safetensors.numpy import load_file
    host = load_file(path)
    out = {k: jax.device_put(v, sharding_for(v.shape)) for k, v in host.items()}
    del host
elif mode == "st_flax":
    from safetensors.flax import load_file
    host = load_file(path)
    out = {k: jax.device_put(v, sharding_for(v.shape)) for k, v in host.items()}
    del host
elif mode == "msgpack":
    from flax import serialization
    with open(path, "rb") as f:
        host = serialization.msgpack_restore(f.read())
    out = {k: jax.device_put(v, sharding_for(v.shape)) for k, v in host.items()}
    del host
elif mode == "orbax":
    import orbax.checkpoint as ocp
    ckptr = ocp.StandardCheckpointer()
    meta = ckptr.metadata(path)
    tree = getattr(meta, "item_metadata", meta)
    tree = getattr(tree, "tree", tree)
    abstract = {k: jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=sharding_for(tuple(v.shape)))
                for k, v in tree.items()}
    out = ckptr.restore(path, abstract)
else:
    raise SystemExit(f"unknown mode {mode}")
jax.block_until_ready(out)
loaded = time.perf_counter()

total, nbytes = 0, 0
for name in sorted(out):
    for shard in sorted(out[name].addressable_shards, key=lambda s: s.device.id):
        b = np.asarray(shard.data).reshape(-1).view(np.uint8)
        n = len(b) // 8 * 8
        s = int(np.add.reduce(b[:n].view(np.uint64), dtype=np.uint64)) if n else 0
        total = (total + s + int(b[n:].sum())) % (1 << 64)
        nbytes += len(b)
end = time.perf_counter()
doc = {"seconds": end - t0, "load_seconds": loaded - t0, "checksum": total, "array_bytes": nbytes,
       "rss_base": rss_base, "rss_peak": status("VmHWM"), "process": jax.process_index()}
doc.update({k: stats[k] for k in ("bytes_read", "bytes_needed") if k in stats})
print(json.dumps(doc), flush=True)
if multi:
    jax.distributed.shutdown()
