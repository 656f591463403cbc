"""ckpt.transformers with a repo id of the Hub (issue 30): the weight files
are read by ckpt's own hf:// source at the commit the revision is at —
SHA-256 checked as they stream into the Hub's cache — not downloaded by
huggingface_hub first; config.json and the like stay transformers'.
Against the loopback Hub (tests/sources/hub.py) through HF_ENDPOINT: the
model equals transformers' from_pretrained's; what ckpt put in the cache
huggingface_hub and transformers find offline; a second load sends no
request for a weight file; a corrupted blob fails naming the file and the
commit; a gated repo fails as transformers says it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sources"))
from hub import HubServer  # noqa: E402

WORKER = str(Path(__file__).resolve().parent / "hub_worker.py")
WEIGHTS = (".safetensors", ".bin")


def model_files(tmp_path, fmt, variant=None):
    """A llama of about 2 MB saved as `fmt` (safetensors, sharded, bin,
    bin-sharded): {path: bytes}.  Tensors of 64 KiB and more, so that ckpt
    reads each file as a load does (downloaded whole), not by ranges."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_transformers import write_bin
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    folder = tmp_path / f"model-{fmt}"
    if fmt.startswith("bin"):
        model.save_pretrained(folder)
        os.remove(folder / "model.safetensors")
        write_bin(model.state_dict(), folder, sharded=fmt == "bin-sharded")
    else:
        model.save_pretrained(folder, max_shard_size="600KB" if fmt == "sharded" else "1GB", variant=variant)
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.fixture()
def hub():
    with HubServer() as h:
        yield h


def run(hub, tmp_path, who, repo, offline=False, **kwargs):
    """A worker's result (hub_worker.py) in a fresh process."""
    out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}.pt"
    env = dict(os.environ, HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "home"),
               HF_HUB_CACHE=str(tmp_path / "env-cache"), HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1",
               OMP_NUM_THREADS="1")
    for k in ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE"):
        env.pop(k, None)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    r = subprocess.run([sys.executable, WORKER, who, repo, json.dumps(kwargs), str(out)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return torch.load(out, weights_only=False)


def same(ref, got):
    assert "error" not in ref and "error" not in got, (ref.get("error"), got.get("error"))
    assert set(ref["state"]) == set(got["state"])
    for k, v in ref["state"].items():
        assert v.dtype == got["state"][k].dtype and torch.equal(v, got["state"][k]), k
    assert torch.equal(ref["logits"], got["logits"])


def weight_requests(hub):
    """(method, path, range) of the requests for weight files: resolve/
    of a .safetensors or .bin, and the CDN (which serves only LFS files)."""
    return [(r[0], r[1], r[2]) for r in hub.requests if r[1].startswith("/cdn/") or r[1].endswith(WEIGHTS)]


@pytest.mark.parametrize("fmt", ["safetensors", "sharded", "bin", "bin-sharded"])
def test_weights_read_by_ckpt_into_the_hubs_cache(hub, tmp_path, fmt):
    files = model_files(tmp_path, fmt)
    hub.add("org/tiny", files)
    cache = str(tmp_path / "cache")  # cache_dir=, not the environment's HF_HUB_CACHE
    ref = run(hub, tmp_path, "transformers", "org/tiny", cache_dir=str(tmp_path / "ref-cache"))
    hub.clear_log()
    got = run(hub, tmp_path, "ckpt", "org/tiny", cache_dir=cache)
    same(ref, got)
    sent = weight_requests(hub)
    # ckpt's requests only: a GET of each weight file's first bytes, then
    # the file (huggingface_hub would HEAD each file first, then GET it whole)
    assert sent and all(m == "GET" for m, _, _ in sent), sent
    weights = [f for f in files if f.endswith(WEIGHTS)]
    for f in weights:
        assert any(p.endswith("/" + f) and rng for _, p, rng in sent), (f, sent)
    assert not (tmp_path / "env-cache").exists()
    # what ckpt put in the Hub's cache: found offline by huggingface_hub
    # and by transformers, and by ckpt's second load with no request
    snap = run(hub, tmp_path, "snapshot", "org/tiny", cache_dir=cache)
    assert set(weights) <= set(snap["files"]), snap
    hub.clear_log()
    same(ref, run(hub, tmp_path, "transformers", "org/tiny", offline=True, cache_dir=cache))
    assert hub.requests == []
    same(ref, run(hub, tmp_path, "ckpt", "org/tiny", cache_dir=cache))
    assert weight_requests(hub) == []


def test_one_pass_from_the_hub_into_the_model(hub, tmp_path):
    """From an empty cache, each weight file's bytes are sent once and go
    from the download straight into the model: the load reads (almost)
    nothing from disk, where it read the whole file back from the cache
    before (issue 30); the cache entry is whole, for transformers offline."""
    files = model_files(tmp_path, "safetensors")
    hub.add("org/tiny", files)
    ref = run(hub, tmp_path, "transformers", "org/tiny", cache_dir=str(tmp_path / "ref-cache"))
    hub.clear_log()
    cache = str(tmp_path / "cache")
    got = run(hub, tmp_path, "ckpt-counted", "org/tiny", cache_dir=cache)
    same(ref, got)
    size = len(files["model.safetensors"])
    served = sum(r[4] for r in hub.requests if r[1].startswith("/cdn/"))
    assert size <= served < size + (64 << 10), (size, served, hub.requests)
    assert got["rchar"] < size // 4, (got["rchar"], size)
    hub.clear_log()
    same(ref, run(hub, tmp_path, "transformers", "org/tiny", offline=True, cache_dir=cache))
    assert hub.requests == []


def test_revision_subfolder_variant_and_bin_over_safetensors(hub, tmp_path):
    """revision= (a branch that moved since), subfolder=, variant= and
    use_safetensors=False choose the file as transformers chooses it."""
    old = {"sub/" + k: v for k, v in model_files(tmp_path / "old", "safetensors", variant="fp16").items()}
    new = {"sub/" + k: v for k, v in model_files(tmp_path / "new", "sharded", variant="fp16").items()}
    bins = {"sub/" + k: v for k, v in model_files(tmp_path, "bin").items() if k.endswith(".bin")}
    repo = hub.add("org/tiny", {**old, **bins})
    repo.set_branch("v1", {**old, **bins})
    repo.set_branch("main", new)
    kw = dict(subfolder="sub", variant="fp16", revision="v1", cache_dir=str(tmp_path / "cache"))
    ref = run(hub, tmp_path, "transformers", "org/tiny", **{**kw, "cache_dir": str(tmp_path / "ref")})
    hub.clear_log()
    same(ref, run(hub, tmp_path, "ckpt", "org/tiny", **kw))
    paths = {p for _, p, _ in weight_requests(hub) if not p.startswith("/cdn/")}
    assert paths == {f"/org/tiny/resolve/{repo.branches['v1']}/sub/model.fp16.safetensors"}, paths
    hub.clear_log()
    got = run(hub, tmp_path, "ckpt", "org/tiny", **{**kw, "use_safetensors": False, "variant": None})
    assert "error" not in got, got
    paths = {p for _, p, _ in weight_requests(hub) if not p.startswith("/cdn/")}
    assert paths == {f"/org/tiny/resolve/{repo.branches['v1']}/sub/pytorch_model.bin"}, paths


def test_corrupted_blob_fails_naming_the_file_and_the_commit(hub, tmp_path):
    files = model_files(tmp_path, "safetensors")
    repo = hub.add("org/tiny", files)
    hub.corrupt = True
    got = run(hub, tmp_path, "ckpt", "org/tiny", cache_dir=str(tmp_path / "cache"))
    kind, message = got["error"]
    assert kind == "Error" and "CKPT_E_CHECKSUM" in message, got["error"]
    assert "model.safetensors" in message and repo.branches["main"] in message, message
    import hashlib
    blobs = tmp_path / "cache" / "models--org--tiny" / "blobs"
    digest = hashlib.sha256(files["model.safetensors"]).hexdigest()
    assert not any(b.name.startswith(digest) for b in blobs.iterdir()), "a corrupted blob was kept"


def test_gated_repo(hub, tmp_path):
    """Without a token: transformers' own error (gated, what to do); with
    one: ckpt reads the weights with it."""
    files = model_files(tmp_path, "safetensors")
    hub.add("org/gated", files, gated=True, tokens={"hf_good"})
    got = run(hub, tmp_path, "ckpt", "org/gated", cache_dir=str(tmp_path / "cache"))
    kind, message = got["error"]
    assert kind == "OSError" and "gated repo" in message, got["error"]
    ref = run(hub, tmp_path, "transformers", "org/gated", token="hf_good", cache_dir=str(tmp_path / "ref"))
    hub.clear_log()
    same(ref, run(hub, tmp_path, "ckpt", "org/gated", token="hf_good", cache_dir=str(tmp_path / "cache")))
    resolved = [r for r in hub.requests if r[1].endswith(".safetensors")]
    assert resolved and all(r[5] == "Bearer hf_good" for r in resolved), resolved
