"""One rank of ckpt.transformers' tensor-parallel test (run by torchrun
from test_transformers.py): loads the model with transformers' own
from_pretrained(tp_plan=...) and with ckpt.transformers', compares each
rank's shards (type, placements, local values) and the logits, and counts
the bytes ckpt served.  Writes its findings to OUT/rank<N>.json."""
import json
import os
import sys

import torch
import torch.distributed as dist
import transformers

import ckpt._safe
import ckpt.transformers


def main(path, out, dtype):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    served = {"calls": 0, "bytes": 0}
    real_getitem = ckpt._safe._Slice.__getitem__

    def counting(self, key):
        t = real_getitem(self, key)
        served["calls"] += 1
        served["bytes"] += t.numel() * t.element_size()
        return t

    ckpt._safe._Slice.__getitem__ = counting
    kw = {"tp_plan": "auto", "dtype": getattr(torch, dtype) if dtype != "auto" else "auto"}
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, **kw)
    got = ckpt.transformers.AutoModelForCausalLM.from_pretrained(path, **kw)
    rs, gs = ref.state_dict(), got.state_dict()
    diffs, sharded = [], 0
    if list(rs) != list(gs):
        diffs.append(f"keys {list(rs)} != {list(gs)}")
    for k in rs:
        a, b = rs[k], gs.get(k)
        if type(a) is not type(b):
            diffs.append(f"{k}: {type(a).__name__} != {type(b).__name__}")
            continue
        if hasattr(a, "to_local"):
            if a.placements != b.placements:
                diffs.append(f"{k}: placements {a.placements} != {b.placements}")
            sharded += a.to_local().numel() != a.numel()
            a, b = a.to_local(), b.to_local()
        if a.dtype != b.dtype or not torch.equal(a, b):
            diffs.append(f"{k}: values or dtype differ")
    ids = torch.tensor([[1, 5, 7, 2, 9, 11]])
    with torch.no_grad():
        same_logits = torch.equal(ref(ids).logits, got(ids).logits)
    full = sum(t.numel() * t.element_size() for t in ckpt.load(path).values())
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"diffs": diffs, "logits": same_logits, "sharded": sharded, "served": served,
                   "checkpoint_bytes": full}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
