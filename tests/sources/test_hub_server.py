"""The test Hub (hub.py) speaks the Hub's protocol: huggingface_hub, unchanged,
downloads from it through HF_ENDPOINT (snapshot_download, hf_hub_download),
sees its gated and private repos, and follows a branch that moves."""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hub import HubServer, OnDisk  # noqa: E402

FILES = {"config.json": b'{"model_type": "test"}', "model.safetensors": os.urandom(300_000),
         "sub/weights.bin": os.urandom(5000)}


def hf(code, endpoint, cache, **env):
    """Runs `code` with huggingface_hub in a fresh process (its constants are read at import)."""
    full = dict(os.environ, HF_ENDPOINT=endpoint, HF_HUB_CACHE=str(cache), HF_HUB_DISABLE_XET="1",
                HF_HUB_DISABLE_TELEMETRY="1", **env)
    full.pop("HF_TOKEN", None)
    full.update(env)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full)
    return r


@pytest.fixture()
def hub():
    with HubServer() as h:
        h.add("org/model", FILES)
        h.add("org/gated", FILES, gated=True, tokens={"hf_good"})
        h.add("org/private", FILES, private=True, tokens={"hf_good"})
        yield h


def test_snapshot_download_and_cache_layout(hub, tmp_path):
    r = hf("from huggingface_hub import snapshot_download; print(snapshot_download('org/model'))", hub.endpoint, tmp_path)
    assert r.returncode == 0, r.stderr
    snap = Path(r.stdout.strip())
    sha = hub.repos["org/model"].branches["main"]
    assert snap == tmp_path / "models--org--model" / "snapshots" / sha
    for path, data in FILES.items():
        assert (snap / path).read_bytes() == data
        assert os.readlink(snap / path).startswith("../")
    assert (tmp_path / "models--org--model" / "refs" / "main").read_text() == sha
    blob = hashlib.sha256(FILES["model.safetensors"]).hexdigest()
    assert (tmp_path / "models--org--model" / "blobs" / blob).read_bytes() == FILES["model.safetensors"]
    # The LFS file came from the CDN after a redirect; the small one from resolve/.
    paths = [q[1] for q in hub.requests if q[0] == "GET"]
    assert f"/cdn/{blob}" in paths and any(p.startswith("/api/models/org/model") for p in paths)


def test_a_file_served_from_disk(tmp_path):
    """OnDisk (the benchmarks' GB files): the same answers as bytes held in
    memory, whole and in ranges; .written counts what went out."""
    (tmp_path / "model.safetensors").write_bytes(FILES["model.safetensors"])
    with HubServer() as h:
        h.add("org/disk", {**FILES, "model.safetensors": OnDisk(tmp_path / "model.safetensors")})
        h.add("org/memory", FILES)
        assert h.repos["org/disk"].branches["main"] == h.repos["org/memory"].branches["main"]
        code = ("from huggingface_hub import snapshot_download; print(snapshot_download('org/disk'))")
        r = hf(code, h.endpoint, tmp_path / "cache")
        assert r.returncode == 0, r.stderr
        assert (Path(r.stdout.strip()) / "model.safetensors").read_bytes() == FILES["model.safetensors"]
        assert h.written == h.sent() and h.sent("/cdn/") == len(FILES["model.safetensors"]) + len(FILES["sub/weights.bin"])  # the LFS files
        import urllib.request
        blob = hashlib.sha256(FILES["model.safetensors"]).hexdigest()
        req = urllib.request.Request(f"{h.cdn}/cdn/{blob}", headers={"Range": "bytes=1000-1999"})
        with urllib.request.urlopen(req) as resp:
            assert resp.status == 206 and resp.read() == FILES["model.safetensors"][1000:2000]


def test_hf_hub_download_offline_after(hub, tmp_path):
    code = ("from huggingface_hub import hf_hub_download as d; "
            "print(d('org/model', 'sub/weights.bin'))")
    r = hf(code, hub.endpoint, tmp_path)
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).read_bytes() == FILES["sub/weights.bin"]
    hub.clear_log()
    r = hf(code, hub.endpoint, tmp_path, HF_HUB_OFFLINE="1")
    assert r.returncode == 0, r.stderr
    assert hub.requests == []


@pytest.mark.parametrize("repo, token, status, kind", [
    ("org/gated", None, 401, "GatedRepoError"), ("org/gated", "hf_bad", 403, "GatedRepoError"),
    ("org/private", None, 401, "RepositoryNotFoundError"), ("org/gated", "hf_good", 200, None)])
def test_gated_and_private(hub, tmp_path, repo, token, status, kind):
    code = f"from huggingface_hub import hf_hub_download as d; print(d('{repo}', 'config.json'))"
    r = hf(code, hub.endpoint, tmp_path, **({"HF_TOKEN": token} if token else {}))
    if kind is None:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode != 0 and kind in r.stderr, r.stderr
    assert any(q[3] == status for q in hub.requests)


def test_branch_moves(hub, tmp_path):
    code = "from huggingface_hub import snapshot_download; print(snapshot_download('org/model'))"
    first = Path(hf(code, hub.endpoint, tmp_path).stdout.strip())
    new = dict(FILES, **{"config.json": b'{"model_type": "moved"}'})
    sha = hub.repos["org/model"].set_branch("main", new)
    second = Path(hf(code, hub.endpoint, tmp_path).stdout.strip())
    assert first != second and second.name == sha
    assert (second / "config.json").read_bytes() == new["config.json"]
    assert (tmp_path / "models--org--model" / "refs" / "main").read_text() == sha
