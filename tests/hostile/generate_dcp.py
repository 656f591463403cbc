#!/usr/bin/env python3
"""Builds the hostile DCP corpus: torch.distributed.checkpoint directories
(and Hugging Face storage-layer shard sets) that lie, each with the status
ckpt must refuse it with (manifest_dcp.json).  Every case starts from a
checkpoint torch itself wrote and changes one thing.  Code-execution
payloads would create /tmp/ckpt-hostile-pwned.  Run with the project's venv:
.venv/bin/python tests/hostile/generate_dcp.py"""
import io
import json
import os
import pickle
import shutil
import tempfile
import zipfile
from pathlib import Path

import safetensors.torch
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata, MetadataIndex,
                                                   TensorProperties, TensorStorageMetadata)

HERE = Path(__file__).resolve().parent
OUT = HERE / "corpus"
MARKER = "/tmp/ckpt-hostile-pwned"
manifest = {}


class Pwn:
    """Unpickling this runs a shell command."""

    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


def base():
    """A checkpoint torch wrote (one rank), its tensor 'w' made of two row
    chunks as two ranks' Shard(0) write it: (Metadata, data bytes)."""
    torch.manual_seed(0)
    w = torch.randn(4, 6)
    with tempfile.TemporaryDirectory() as d:
        dcp.save({"top": w[:2].clone(), "bottom": w[2:].clone(), "b": torch.ones(5, dtype=torch.bfloat16),
                  "step": 7}, checkpoint_id=d, no_dist=True)
        meta = pickle.loads((Path(d) / ".metadata").read_bytes())
        data = (Path(d) / "__0_0.distcp").read_bytes()
    top, bottom = meta.state_dict_metadata.pop("top"), meta.state_dict_metadata.pop("bottom")
    meta.storage_data[MetadataIndex("w", [0, 0])] = meta.storage_data.pop(MetadataIndex("top", [0, 0]))
    meta.storage_data[MetadataIndex("w", [2, 0])] = meta.storage_data.pop(MetadataIndex("bottom", [0, 0]))
    meta.state_dict_metadata["w"] = TensorStorageMetadata(
        top.properties, torch.Size([4, 6]),
        [ChunkStorageMetadata(torch.Size([0, 0]), top.size), ChunkStorageMetadata(torch.Size([2, 0]), bottom.size)])
    for k in ("top", "bottom"):
        meta.planner_data.pop(k)
    meta.planner_data["w"] = ("w",)
    return meta, data


def put(name, status, meta=None, data=None, metadata_bytes=None, files=None):
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    if metadata_bytes is None and meta is not None:
        metadata_bytes = pickle.dumps(meta, protocol=4)
    if metadata_bytes is not None:
        (d / ".metadata").write_bytes(metadata_bytes)
    if data is not None:
        (d / "__0_0.distcp").write_bytes(data)
    for n, b in (files or {}).items():
        (d / n).write_bytes(b)
    manifest[name] = status


def info(meta, fqn, offset):
    return meta.storage_data[MetadataIndex(fqn, offset)]


def with_archive(meta, data, fqn, offset, pickle_bytes):
    """Appends a torch.save-shaped archive whose data.pkl is `pickle_bytes`
    and points the item at it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
    item = info(meta, fqn, offset)
    item.offset, item.length = len(data), len(buf.getvalue())
    return meta, data + buf.getvalue()


# ---- code execution, through every pickle ------------------------------------------
meta, data = base()
meta.storage_meta.checkpoint_id = Pwn()
put("dcp-exec-in-metadata", "CKPT_E_FORBIDDEN/CKPT_D_PICKLE_FORBIDDEN", meta, data)

meta, data = base()
meta.planner_data["w"] = (Pwn(),)
put("dcp-exec-in-planner-data", "CKPT_E_FORBIDDEN/CKPT_D_PICKLE_FORBIDDEN", meta, data)

meta, data = base()
meta, data = with_archive(meta, data, "w", [2, 0], pickle.dumps(Pwn(), protocol=2))
put("dcp-exec-in-chunk-archive", "CKPT_E_FORBIDDEN/CKPT_D_PICKLE_FORBIDDEN", meta, data)

meta, data = base()
meta, data = with_archive(meta, data, "step", None, pickle.dumps({"x": Pwn()}, protocol=2))
put("dcp-exec-in-object-archive", "CKPT_E_FORBIDDEN/CKPT_D_PICKLE_FORBIDDEN", meta, data)


class ViaReduce:
    """Metadata(...) called (REDUCE), where torch pickles NEWOBJ + BUILD."""

    def __init__(self, meta):
        self.meta = meta

    def __reduce__(self):
        m = self.meta
        return (Metadata, (m.state_dict_metadata, m.planner_data, m.storage_data))


meta, data = base()
put("dcp-metadata-by-reduce", "CKPT_E_FORBIDDEN/CKPT_D_PICKLE_FORBIDDEN", metadata_bytes=pickle.dumps(ViaReduce(meta), protocol=4),
    data=data)


def spliced(meta, key, ops):
    """The metadata pickled (protocol 2, no frames) with the value of
    state_dict_metadata[key] replaced by raw pickle opcodes."""
    sentinel = "@@spliced-value@@"
    meta.state_dict_metadata[key] = sentinel
    raw = pickle.dumps(meta, protocol=2)
    encoded = b"X" + len(sentinel).to_bytes(4, "little") + sentinel.encode()
    assert raw.count(encoded) == 1
    return raw.replace(encoded, ops)


META_GLOBAL = b"ctorch.distributed.checkpoint.metadata\n"
meta, data = base()  # TensorStorageMetadata.__new__(cls, "x"): NEWOBJ with an argument
put("dcp-dataclass-newobj-with-args", "CKPT_E_FORBIDDEN/CKPT_D_PICKLE_FORBIDDEN", data=data, metadata_bytes=spliced(
    meta, "b", META_GLOBAL + b"TensorStorageMetadata\nX\x01\x00\x00\x00x\x85\x81"))
meta, data = base()  # BUILD on a dict
put("dcp-build-on-dict", "CKPT_E_FORBIDDEN/CKPT_D_PICKLE_FORBIDDEN", data=data, metadata_bytes=spliced(meta, "b", b"}}b"))
meta, data = base()  # a dtype called
put("dcp-dtype-called", "CKPT_E_FORBIDDEN/CKPT_D_PICKLE_FORBIDDEN", data=data, metadata_bytes=spliced(
    meta, "b", b"ctorch\nfloat32\n)R"))

meta, data = base()
meta.version = torch.Tensor  # an allowed torch global, but not one .metadata holds
put("dcp-foreign-global", "CKPT_E_FORBIDDEN/CKPT_D_PICKLE_FORBIDDEN", meta, data)

meta, data = base()
put("dcp-not-metadata", "CKPT_E_CORRUPT/CKPT_D_DCP_METADATA", metadata_bytes=pickle.dumps(
    {"state_dict_metadata": meta.state_dict_metadata}, protocol=4), data=data)
put("dcp-metadata-truncated", "CKPT_E_CORRUPT/CKPT_D_PICKLE_INVALID", metadata_bytes=pickle.dumps(meta, protocol=4)[:-40], data=data)

# ---- chunk geometry --------------------------------------------------------------------
meta, data = base()
meta.state_dict_metadata["w"].chunks.pop()
put("dcp-chunk-hole", "CKPT_E_CORRUPT/CKPT_D_DCP_CHUNK_HOLE", meta, data)

meta, data = base()
meta.state_dict_metadata["w"].size = torch.Size([5, 6])
put("dcp-chunk-hole-size-too-large", "CKPT_E_CORRUPT/CKPT_D_DCP_CHUNK_HOLE", meta, data)

meta, data = base()
meta.state_dict_metadata["w"].chunks[1].offsets = torch.Size([1, 0])
meta.storage_data[MetadataIndex("w", [1, 0])] = meta.storage_data.pop(MetadataIndex("w", [2, 0]))
put("dcp-chunk-overlap", "CKPT_E_CORRUPT/CKPT_D_DCP_CHUNK_OVERLAP", meta, data)

meta, data = base()
meta.state_dict_metadata["w"].chunks[1].offsets = torch.Size([3, 0])
meta.storage_data[MetadataIndex("w", [3, 0])] = meta.storage_data.pop(MetadataIndex("w", [2, 0]))
put("dcp-chunk-out-of-bounds", "CKPT_E_CORRUPT/CKPT_D_DCP_CHUNK_BOUNDS", meta, data)

meta, data = base()
meta.state_dict_metadata["w"].chunks[1].offsets = torch.Size([2 ** 63 - 1, 0])
meta.storage_data[MetadataIndex("w", [2 ** 63 - 1, 0])] = meta.storage_data.pop(MetadataIndex("w", [2, 0]))
put("dcp-chunk-offset-overflow", "CKPT_E_CORRUPT/CKPT_D_DCP_CHUNK_BOUNDS", meta, data)

meta, data = base()
meta.state_dict_metadata["w"].chunks[1].sizes = torch.Size([2])
put("dcp-chunk-wrong-rank", "CKPT_E_CORRUPT/CKPT_D_DCP_CHUNK_BOUNDS", meta, data)

meta, data = base()  # the archive holds 2x6; the chunk (and tensor) say 2x3
meta.state_dict_metadata["w"].size = torch.Size([4, 3])
meta.state_dict_metadata["w"].chunks[0].sizes = torch.Size([2, 3])
meta.state_dict_metadata["w"].chunks[1].sizes = torch.Size([2, 3])
put("dcp-chunk-size-lie", "CKPT_E_CORRUPT/CKPT_D_DCP_CHUNK_MISMATCH", meta, data)

meta, data = base()
meta.state_dict_metadata["w"].properties = TensorProperties(dtype=torch.bfloat16)
put("dcp-chunk-dtype-lie", "CKPT_E_CORRUPT/CKPT_D_DCP_CHUNK_MISMATCH", meta, data)

meta, data = base()
meta.state_dict_metadata["w"].properties = TensorProperties(dtype=torch.complex128)
put("dcp-dtype-without-safetensors-equivalent", "CKPT_E_UNSUPPORTED/CKPT_D_UNKNOWN_DTYPE", meta, data)

meta, data = base()
del meta.storage_data[MetadataIndex("w", [2, 0])]
put("dcp-chunk-without-storage", "CKPT_E_CORRUPT/CKPT_D_DCP_METADATA", meta, data)

# ---- paths and lengths -------------------------------------------------------------------
for label, rel in [("parent", "../__0_0.distcp"), ("absolute", "/etc/passwd"), ("inner-parent", "x/../__0_0.distcp"),
                   ("empty", "")]:
    meta, data = base()
    info(meta, "w", [0, 0]).relative_path = rel
    put(f"dcp-path-{label}", "CKPT_E_UNSAFE_PATH/CKPT_D_DCP_PATH", meta, data)

meta, data = base()
info(meta, "w", [2, 0]).relative_path = "__7_0.distcp"
put("dcp-path-missing-file", "CKPT_E_NOT_FOUND", meta, data)

meta, data = base()
info(meta, "w", [2, 0]).length += 10 ** 9
put("dcp-length-past-end", "CKPT_E_TRUNCATED", meta, data)

meta, data = base()
info(meta, "w", [2, 0]).offset = 2 ** 62
put("dcp-offset-past-end", "CKPT_E_TRUNCATED", meta, data)

meta, data = base()
info(meta, "w", [2, 0]).length -= 30
put("dcp-length-cut-short", "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID", meta, data)

meta, data = base()  # both chunks name the same bytes
a, b = info(meta, "w", [0, 0]), info(meta, "w", [2, 0])
b.offset, b.length = a.offset, a.length
put("dcp-items-overlap", "CKPT_E_CORRUPT/CKPT_D_DCP_METADATA", meta, data)

meta, data = base()
info(meta, "w", [2, 0]).transform_descriptors = ["stream.zstd/1"]
put("dcp-zstd-transform", "CKPT_E_UNSUPPORTED/CKPT_D_DCP_UNSUPPORTED", meta, data)

# FileSystemWriter with serialization_format=SAFETENSORS: the tensors are in
# a safetensors blob that .metadata does not locate (torch cannot read it).
from torch.distributed.checkpoint import FileSystemWriter  # noqa: E402
from torch.distributed.checkpoint.filesystem import SerializationFormat  # noqa: E402
with tempfile.TemporaryDirectory() as d:
    dcp.save({"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2), "step": 3}, no_dist=True,
             storage_writer=FileSystemWriter(d, serialization_format=SerializationFormat.SAFETENSORS))
    put("dcp-safetensors-serialization", "CKPT_E_UNSUPPORTED/CKPT_D_DCP_UNSUPPORTED", metadata_bytes=(Path(d) / ".metadata").read_bytes(),
        data=(Path(d) / "__0_0.distcp").read_bytes())

# ---- the Hugging Face storage layer --------------------------------------------------------
def shard(tensors, offsets):
    info = {k: {"saved_offsets": o} for k, o in offsets.items()}
    return safetensors.torch.save(tensors, metadata={"DCP_SHARDING_INFO": json.dumps(info), "format": "pt"})


w = torch.arange(24, dtype=torch.float32).reshape(4, 6)
names = ["shard-00001-model-00001-of-00001.safetensors", "shard-00002-model-00001-of-00001.safetensors"]
put("dcphf-overlap", "CKPT_E_CORRUPT/CKPT_D_DCP_CHUNK_OVERLAP", files={
    names[0]: shard({"w": w[:3].clone()}, {"w": [0, 0]}), names[1]: shard({"w": w[2:].clone()}, {"w": [2, 0]})})
put("dcphf-hole", "CKPT_E_CORRUPT/CKPT_D_DCP_CHUNK_HOLE", files={
    names[0]: shard({"w": w[:1].clone()}, {"w": [0, 0]}), names[1]: shard({"w": w[2:].clone()}, {"w": [2, 0]})})
put("dcphf-dtype-mismatch", "CKPT_E_CORRUPT/CKPT_D_DCP_CHUNK_MISMATCH", files={
    names[0]: shard({"w": w[:2].clone()}, {"w": [0, 0]}), names[1]: shard({"w": w[2:].half()}, {"w": [2, 0]})})
put("dcphf-missing-offsets", "CKPT_E_CORRUPT/CKPT_D_DCP_METADATA", files={
    names[0]: shard({"w": w[:2].clone(), "v": w[0].clone()}, {"w": [0, 0]}),
    names[1]: shard({"w": w[2:].clone()}, {"w": [2, 0]})})
put("dcphf-stranger-file", "CKPT_E_CORRUPT/CKPT_D_DCP_METADATA", files={
    names[0]: shard({"w": w[:2].clone()}, {"w": [0, 0]}), names[1]: safetensors.torch.save({"w": w})})

(HERE / "manifest_dcp.json").write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
print(f"wrote {len(manifest)} hostile DCP checkpoints")
