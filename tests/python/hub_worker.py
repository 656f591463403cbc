"""One process of test_transformers_hub.py, with the test Hub in its
environment (HF_ENDPOINT is read when huggingface_hub is imported, so each
load runs in a fresh process):

    hub_worker.py ckpt|transformers REPO KWARGS_JSON OUT    a from_pretrained
    hub_worker.py ckpt-counted REPO KWARGS_JSON OUT         ckpt's, and the bytes read
                                                            from files while it loads
    hub_worker.py snapshot REPO KWARGS_JSON OUT             snapshot_download

OUT: a torch.save of {"state": state dict, "logits": ...} (ckpt-counted: and
"rchar", the bytes read() and pread() gave during ckpt.load_into, from
/proc/self/io), or of {"error": (type name, message)} when the load raised;
for snapshot, the files of the snapshot it found."""
import json
import os
import sys

import torch


def rchar():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar")).split()[1])


def counted(counts):
    """ckpt.load_into, counting the bytes read from files while it runs."""
    from ckpt import _api
    load_into = _api.load_into

    def wrapper(*args, **kwargs):
        before = rchar()
        try:
            return load_into(*args, **kwargs)
        finally:
            counts["rchar"] = counts.get("rchar", 0) + rchar() - before
    _api.load_into = wrapper


def load(who, repo, kwargs):
    counts = {}
    if who == "ckpt-counted":
        counted(counts)
        who = "ckpt"
    if who == "ckpt":
        import ckpt.transformers as ct
        model = ct.AutoModelForCausalLM.from_pretrained(repo, **kwargs)
    else:
        import transformers
        model = transformers.AutoModelForCausalLM.from_pretrained(repo, **kwargs)
    with torch.no_grad():
        logits = model(torch.arange(8).reshape(1, 8)).logits
    return {"state": {k: v.clone() for k, v in model.state_dict().items()}, "logits": logits, **counts}


def main(who, repo, kwargs, out):
    kwargs = json.loads(kwargs)
    try:
        if who == "snapshot":
            import huggingface_hub
            folder = huggingface_hub.snapshot_download(repo, local_files_only=True, **kwargs)
            result = {"files": sorted(os.path.relpath(os.path.join(d, f), folder)
                                      for d, _, fs in os.walk(folder) for f in fs)}
        else:
            result = load(who, repo, kwargs)
    except Exception as e:  # noqa: BLE001 - the test judges what was raised
        result = {"error": (type(e).__name__, str(e))}
    torch.save(result, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
