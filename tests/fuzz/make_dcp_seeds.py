#!/usr/bin/env python3
"""Adds seeds to the corpus of the DCP fuzz target (tests/fuzz/corpus/dcp.tar.gz)
from checkpoints torch.distributed.checkpoint writes (saved without a
process group, as one rank), some with their .metadata edited the way
several ranks' chunks look, and from Hugging Face storage-layer shards.
Input format: see fuzz_dcp.c.  Run with the project's venv:
.venv/bin/python tests/fuzz/make_dcp_seeds.py"""
import dataclasses
import pickle
import struct
import tempfile
from pathlib import Path

import safetensors.torch
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorStorageMetadata

import seeds


def put(kind, first, rest):
    seeds.put("dcp", kind + struct.pack("<I", len(first)) + first + rest)


def saved(state):
    """dcp.save of `state` as one rank: (.metadata object, __0_0.distcp bytes)."""
    with tempfile.TemporaryDirectory() as d:
        dcp.save(state, checkpoint_id=d, no_dist=True)
        meta = pickle.loads((Path(d) / ".metadata").read_bytes())
        return meta, (Path(d) / "__0_0.distcp").read_bytes()


def as_chunks(meta, name, parts, offsets):
    """Makes `name` a tensor whose chunks are the saved tensors `parts`
    placed at `offsets` (what several ranks' Shard placements write)."""
    first = meta.state_dict_metadata[parts[0]]
    size = [max(o[d] + meta.state_dict_metadata[p].size[d] for p, o in zip(parts, offsets))
            for d in range(len(first.size))]
    chunks = []
    for p, o in zip(parts, offsets):
        chunks.append(ChunkStorageMetadata(offsets=torch.Size(o), sizes=meta.state_dict_metadata[p].size))
        info = meta.storage_data.pop(MetadataIndex(p, [0] * len(o)))
        meta.storage_data[MetadataIndex(name, o)] = info
        del meta.state_dict_metadata[p]
        meta.planner_data.pop(p, None)
    meta.state_dict_metadata[name] = TensorStorageMetadata(first.properties, torch.Size(size), chunks)
    meta.planner_data[name] = (name,)
    return meta


torch.manual_seed(0)
w = torch.randn(4, 6)
states = [
    {"w": w, "b": torch.ones(5, dtype=torch.bfloat16), "s": torch.tensor(2.5), "step": 7,
     "cfg": {"lr": 0.1, "betas": (0.9, 0.99), "names": ["a", "b"]}, "blob": b"\x00\xff"},
    {"model": {"emb": torch.arange(12, dtype=torch.int64).reshape(3, 4), "t": w.t().contiguous()},
     "optim": {"state": {"0": {"exp_avg": torch.zeros(3), "step": torch.tensor(1.0)}},
               "param_groups": [{"lr": 1e-3, "params": [0]}]}},
    {"f8": torch.zeros(4, dtype=torch.float8_e4m3fn), "u16": torch.arange(3, dtype=torch.int32).to(torch.uint16),
     "empty": torch.zeros(0, 3)},
]
for state in states:
    meta, data = saved(state)
    put(b"D", pickle.dumps(meta, protocol=4), data)

# Row and column chunks, and a 2x2 grid, as DTensor placements write them.
rows, data = saved({"top": w[:2].clone(), "bottom": w[2:].clone(), "x": torch.ones(1)})
put(b"D", pickle.dumps(as_chunks(rows, "w", ["top", "bottom"], [[0, 0], [2, 0]]), protocol=4), data)
cols, data = saved({"left": w[:, :3].clone(), "right": w[:, 3:].clone()})
put(b"D", pickle.dumps(as_chunks(cols, "w", ["left", "right"], [[0, 0], [0, 3]]), protocol=4), data)
grid, data = saved({f"q{i}{j}": w[2 * i:2 * i + 2, 3 * j:3 * j + 3].clone() for i in (0, 1) for j in (0, 1)})
put(b"D", pickle.dumps(as_chunks(grid, "w", ["q00", "q01", "q10", "q11"], [[0, 0], [0, 3], [2, 0], [2, 3]]),
                       protocol=4), data)
# A chunk that overlaps its neighbour, and one out of bounds.
bad, data = saved({"top": w[:3].clone(), "bottom": w[2:].clone()})
put(b"D", pickle.dumps(as_chunks(bad, "w", ["top", "bottom"], [[0, 0], [2, 0]]), protocol=4), data)

# The Hugging Face storage layer: one file per rank with DCP_SHARDING_INFO.
def shard(tensors, offsets):
    info = {k: {"saved_offsets": o} for k, o in offsets.items()}
    return safetensors.torch.save(tensors, metadata={"DCP_SHARDING_INFO": __import__("json").dumps(info),
                                                     "DCP_VERSION": "1.0", "format": "pt"})


a = shard({"w": w[:2].clone(), "c": w[:, :3].clone()}, {"w": [0, 0], "c": [0, 0]})
b = shard({"w": w[2:].clone(), "c": w[:, 3:].clone(), "b": torch.ones(3, dtype=torch.bfloat16)},
          {"w": [2, 0], "c": [0, 3], "b": [0]})
put(b"H", a, b)
seeds.commit()
