"""The `dcp` suite of bench/run.py: a 4 GB Llama-shaped bf16 state saved by
4 gloo ranks with torch.distributed.checkpoint (FSDP-style Shard(0), and
Shard(1) for the row-parallel o_proj and down_proj), converted to 1 GB
Hugging Face shards:

  ckpt convert            against cp of the same bytes (and cp + sync against
                          ckpt with fsync), and against torch's way
                          (dcp_to_torch_save, torch.load, save_torch_state_dict)
  the HF storage layer    the same state saved with HuggingFaceStorageWriter
                          (save_distributed=True): ckpt convert against
                          torch's consolidate_safetensors_files (given the
                          same 1 GB file assignment)

All in one run, alternating, sync (and a cold page cache) before every
contender, peak RSS from GNU time; outputs checked: ckpt's shards equal
save_torch_state_dict's byte for byte, and consolidate's tensor for tensor.
"""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from run import BIN_PATH, DATA, drop_caches, machine_facts, run_measured, save, summary

HIDDEN, MLP, VOCAB = 4096, 11008, 32000

MAKE = textwrap.dedent(r"""
    import os, sys
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    def shapes(total):
        h, m, v = %(hidden)d, %(mlp)d, %(vocab)d
        out = [("model.embed_tokens.weight", (v, h), 0)]
        size, layer = 2 * v * h * 2, 0
        while size < total:
            for n, s, dim in [("self_attn.q_proj.weight", (h, h), 0), ("self_attn.k_proj.weight", (h, h), 0),
                              ("self_attn.v_proj.weight", (h, h), 0), ("self_attn.o_proj.weight", (h, h), 1),
                              ("mlp.gate_proj.weight", (m, h), 0), ("mlp.up_proj.weight", (m, h), 0),
                              ("mlp.down_proj.weight", (h, m), 1), ("input_layernorm.weight", (h,), 0),
                              ("post_attention_layernorm.weight", (h,), 0)]:
                out.append((f"model.layers.{layer}.{n}", s, dim))
                size += 2 * s[0] * (s[1] if len(s) > 1 else 1)
            layer += 1
        return out + [("model.norm.weight", (h,), 0), ("lm_head.weight", (v, h), 0)]

    def run(rank, world, total, port, dcp_dir, hf_dir):
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        mesh = init_device_mesh("cpu", (world,))
        g = torch.Generator().manual_seed(rank)
        sd = {}
        for name, shape, dim in shapes(total):
            local = list(shape)
            local[dim] //= world   # every size here divides by 4
            bits = torch.randint(-32768, 32767, local, dtype=torch.int16, generator=g)
            sd[name] = DTensor.from_local(bits.view(torch.bfloat16), mesh, [Shard(dim)], run_check=False)
        dcp.save(sd, checkpoint_id=dcp_dir)
        dcp.save(sd, storage_writer=HuggingFaceStorageWriter(hf_dir, save_distributed=True))
        dist.destroy_process_group()

    if __name__ == "__main__":
        total, port, dcp_dir, hf_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
        mp.spawn(run, args=(4, total, port, dcp_dir, hf_dir), nprocs=4)
""") % {"hidden": HIDDEN, "mlp": MLP, "vocab": VOCAB}

TORCH_WAY = textwrap.dedent(r"""
    import os, sys, torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from huggingface_hub import save_torch_state_dict
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out)
    tmp = os.path.join(out, "consolidated.pt.tmp")
    dcp_to_torch_save(src, tmp)
    sd = torch.load(tmp, weights_only=True)
    os.unlink(tmp)
    save_torch_state_dict(sd, out, max_shard_size="1GB")
""")

CONSOLIDATE = textwrap.dedent(r"""
    import json, os, sys
    from torch.distributed.checkpoint._consolidate_hf_safetensors import consolidate_safetensors_files
    src, out, mapping = sys.argv[1], sys.argv[2], json.loads(open(sys.argv[3]).read())
    os.makedirs(out)
    consolidate_safetensors_files(src, out, fqn_to_index_mapping=mapping)
""")


def make(gb):
    dcp_dir, hf_dir = DATA / f"dcp-bf16-{gb}GB", DATA / f"dcp-hf-bf16-{gb}GB"
    if (dcp_dir / ".metadata").exists() and hf_dir.exists():
        return dcp_dir, hf_dir
    shutil.rmtree(dcp_dir, ignore_errors=True)
    shutil.rmtree(hf_dir, ignore_errors=True)
    DATA.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = DATA / "make_dcp.py"  # spawn needs a file to import `run` from
    script.write_text(MAKE)
    subprocess.run([sys.executable, str(script), str(int(gb * 1e9)), str(port), str(dcp_dir), str(hf_dir)], check=True)
    script.unlink()
    return dcp_dir, hf_dir


def tree_bytes(path):
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def digests(path):
    out = {}
    for f in sorted(Path(path).iterdir()):
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                h.update(block)
        out[f.name] = h.hexdigest()
    return out


def same_tensors(a_dir, b_dir):
    """Every tensor of two directories of safetensors files, bit for bit,
    one tensor in memory at a time."""
    from safetensors import safe_open
    where = {}
    for d, tag in ((a_dir, "a"), (b_dir, "b")):
        for f in Path(d).glob("*.safetensors"):
            with safe_open(str(f), "pt") as h:
                for k in h.keys():
                    where.setdefault(k, {})[tag] = f
    for k, pair in where.items():
        assert set(pair) == {"a", "b"}, k
        with safe_open(str(pair["a"]), "pt") as x, safe_open(str(pair["b"]), "pt") as y:
            a, b = x.get_tensor(k), y.get_tensor(k)
            assert a.dtype == b.dtype and a.shape == b.shape and a.view(-1).view(dtype=__import__("torch").int16).equal(
                b.view(-1).view(dtype=__import__("torch").int16)), k
    return len(where)


def alternate(name, src, contenders, args, slow=()):
    """Rounds of every contender in turn (round 0 warms up), each after sync
    and with the source's pages dropped; `slow` ones once."""
    scratch = DATA / "out"
    results = {k: {"seconds": [], "rss": []} for k in contenders}
    outputs = {}
    for rnd in range(args.runs + 1):
        for label, cmd in contenders.items():
            if label in slow and rnd > 1:
                continue
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            out = scratch / "dst"
            subprocess.run(["sync"])
            drop_caches([src])
            secs, rss = run_measured(cmd(out))
            if rnd == 1 or label in slow:
                outputs[label] = {"digests": digests(out) if out.is_dir() else None, "bytes": tree_bytes(out)}
                if label.startswith("ckpt") and out.is_dir() and (out / "model.safetensors.index.json").exists():
                    outputs[label]["index"] = json.loads((out / "model.safetensors.index.json").read_text())
            if rnd > 0 or label in slow:
                results[label]["seconds"].append(secs)
                results[label]["rss"].append(rss)
            print(f"  {name} round {rnd} {label:58s} {secs:7.2f} s  RSS {rss / 2**20:8.1f} MiB", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return {k: dict(summary(v["seconds"]), peak_rss_bytes=max(v["rss"]))
            for k, v in results.items() if v["seconds"]}, outputs


def run_dcp_suite(args):
    dcp_dir, hf_dir = make(args.gb)
    size = tree_bytes(dcp_dir)
    doc = {"suite": "dcp", "bytes": size, "hf_layer_bytes": tree_bytes(hf_dir), "source": dcp_dir.name, "ranks": 4,
           "max_shard_size": "1GB", "cache": "cold (sync, then the source's pages dropped) before every run",
           "machine": machine_facts(), "results": {}}
    torch_label = "torch: dcp_to_torch_save + torch.load + save_torch_state_dict"
    contenders = {
        "cp -r": lambda out: ["cp", "-r", str(dcp_dir), str(out)],
        "ckpt convert --no-sync": lambda out: [BIN_PATH, "convert", str(dcp_dir), str(out), "--max-shard-size", "1GB",
                                               "--no-sync"],
        "cp -r + sync": lambda out: ["sh", "-c", f'cp -r "{dcp_dir}" "{out}" && sync'],
        "ckpt convert": lambda out: [BIN_PATH, "convert", str(dcp_dir), str(out), "--max-shard-size", "1GB"],
    }
    slow = ()
    if not args.skip_python:
        contenders[torch_label] = lambda out: [sys.executable, "-c", TORCH_WAY, str(dcp_dir), str(out)]
        slow = (torch_label,)
    res, outputs = alternate("dcp", dcp_dir, contenders, args, slow)
    if torch_label in outputs:  # the same shards, byte for byte
        assert outputs[torch_label]["digests"] == outputs["ckpt convert"]["digests"], "ckpt's shards differ from torch's"
    doc["results"]["dcp"] = res
    doc["results"]["dcp"]["ratios"] = {
        "ckpt_vs_cp (no fsync)": res["cp -r"]["median"] / res["ckpt convert --no-sync"]["median"],
        "ckpt_vs_cp (fsync)": res["cp -r + sync"]["median"] / res["ckpt convert"]["median"],
    }
    doc["checked"] = ("ckpt's shards and index are byte-identical to save_torch_state_dict's" if torch_label in outputs
                      else "torch contender skipped")

    # The HF storage layer: consolidate into the same 1 GB files.
    index = outputs["ckpt convert"]["index"]
    files = sorted(set(index["weight_map"].values()))
    mapping = {k: files.index(v) + 1 for k, v in index["weight_map"].items()}
    mapping_path = DATA / "dcp-hf-mapping.json"
    mapping_path.write_text(json.dumps(mapping))
    hf_label = "torch consolidate_safetensors_files"
    contenders = {
        "cp -r": lambda out: ["cp", "-r", str(hf_dir), str(out)],
        "ckpt convert --no-sync": lambda out: [BIN_PATH, "convert", str(hf_dir), str(out), "--max-shard-size", "1GB",
                                               "--no-sync"],
        hf_label: lambda out: [sys.executable, "-c", CONSOLIDATE, str(hf_dir), str(out), str(mapping_path)],
    }
    res, outputs = alternate("hf", hf_dir, contenders, args)
    # Outside the timed runs: both outputs, tensor for tensor.
    check = DATA / "check"
    shutil.rmtree(check, ignore_errors=True)
    check.mkdir()
    subprocess.run([BIN_PATH, "convert", str(hf_dir), str(check / "ckpt"), "--max-shard-size", "1GB", "--no-sync"],
                   check=True)
    subprocess.run([sys.executable, "-c", CONSOLIDATE, str(hf_dir), str(check / "torch"), str(mapping_path)], check=True)
    doc["hf_layer_checked"] = f"{same_tensors(check / 'ckpt', check / 'torch')} tensors equal to consolidate's"
    shutil.rmtree(check, ignore_errors=True)
    doc["results"]["hf_layer"] = res
    doc["results"]["hf_layer"]["ratios"] = {
        "ckpt_vs_cp (no fsync)": res["cp -r"]["median"] / res["ckpt convert --no-sync"]["median"],
        "ckpt_vs_consolidate": res[hf_label]["median"] / res["ckpt convert --no-sync"]["median"],
    }
    save("dcp", doc)
    return doc
