"""One process of test_transformers_hub.py, with the test Hub in its
environment (HF_ENDPOINT is read when huggingface_hub is imported, so each
load runs in a fresh process):

    hub_worker.py ckpt|transformers REPO KWARGS_JSON OUT    a from_pretrained
    hub_worker.py snapshot REPO KWARGS_JSON OUT             snapshot_download

OUT: a torch.save of {"state": state dict, "logits": ...}, or of
{"error": (type name, message)} when the load raised; for snapshot, the
files of the snapshot it found."""
import json
import os
import sys

import torch


def load(who, repo, kwargs):
    if who == "ckpt":
        import ckpt.transformers as ct
        model = ct.AutoModelForCausalLM.from_pretrained(repo, **kwargs)
    else:
        import transformers
        model = transformers.AutoModelForCausalLM.from_pretrained(repo, **kwargs)
    with torch.no_grad():
        logits = model(torch.arange(8).reshape(1, 8)).logits
    return {"state": {k: v.clone() for k, v in model.state_dict().items()}, "logits": logits}


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
