"""A collective load (ckpt.distributed.load on gloo ranks) of a URL that
carries its credentials — user:password@ to nginx's basic auth, an Azure
directory's SAS token (az://ACCOUNT/CONTAINER/DIR/?sv=…&sig=…) to the
Azure stand-in: rank 0 opens the checkpoint and broadcasts its catalog,
whose names carry no credentials, and every other rank reads its bytes
with the credentials its own URL carries.  The secret is in no rank's
output, error or file list."""
import base64
import contextlib
import os
import secrets
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import torch
from conftest import same_dict

pytest.importorskip("torch.distributed")
WORKER = str(Path(__file__).resolve().parent / "collective_worker.py")
WORLD = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_on_ranks(tmp_path, url, env=None):
    """Each rank's result, and everything the ranks printed."""
    port, out = free_port(), tmp_path / "rank"
    procs = []
    for rank in range(WORLD):
        e = dict(os.environ, **(env or {}), RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, WORKER, url, str(out)], env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    printed = "".join(p.communicate(timeout=240)[0] for p in procs)
    assert all(p.returncode == 0 for p in procs), printed[-3000:]
    return [torch.load(f"{out}-{r}.pt") for r in range(WORLD)], printed


def test_basic_auth_in_the_url(nginx, served, tmp_path):
    _, sd = served
    base = nginx.base.replace("http://", "")
    nginx.clear_log()
    results, printed = load_on_ranks(tmp_path, f"http://alice:s3cr3t-pw@{base}/basic/sharded/model.safetensors.index.json")
    for r in results:
        assert "error" not in r, r["error"]
        assert same_dict(r["state"], sd)
    shards = [line for line in nginx.log() if "/basic/sharded/model-" in line[0] and line[1] in (200, 206)]
    assert shards and all(line[5].startswith("Basic ") for line in shards)
    assert "s3cr3t-pw" not in printed
    # A wrong password: every rank fails, and none shows it.
    results, printed = load_on_ranks(tmp_path, f"http://alice:wr0ng-pw@{base}/basic/sharded/model.safetensors.index.json")
    assert all("401" in r["error"] and "wr0ng-pw" not in r["error"] for r in results), results
    assert "wr0ng-pw" not in printed


@contextlib.contextmanager
def azure(blobs):
    """The Azure stand-in serving `blobs` ({name: bytes}) in container
    "models" of account "ckptacct", the environment that points ckpt at it
    (no key: the SAS alone grants), a container SAS and its signature."""
    from objstores import AzureServer, make_sas
    account = "ckptacct"
    server = AzureServer()
    try:
        server.keys = {account: base64.b64encode(secrets.token_bytes(64)).decode()}
        server.containers = {(account, "models"): blobs}
        env = {"AZURE_STORAGE_CONNECTION_STRING":
               f"DefaultEndpointsProtocol=http;AccountName={account};BlobEndpoint={server.url}/{account};"}
        for k in ("AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN",
                  "AZURE_STORAGE_SERVICE_ENDPOINT"):
            env[k] = ""
        sas = make_sas(account, server.keys[account], "models")
        yield server, env, sas, dict(p.split("=", 1) for p in sas.split("&"))["sig"]
    finally:
        server.close()


def loaded_without_showing(tmp_path, url, env, sig, sd):
    results, printed = load_on_ranks(tmp_path, url, env)
    for r in results:
        assert "error" not in r, r["error"]
        assert same_dict(r["state"], sd)
    assert sig not in printed and urllib.parse.quote(sig, safe="") not in printed


def test_sas_token_of_a_directory(tmp_path):
    pytest.importorskip("huggingface_hub")
    from huggingface_hub import save_torch_state_dict
    from conftest import state_dict
    sd = state_dict(seed=5)
    shards = tmp_path / "shards"
    shards.mkdir()
    save_torch_state_dict(sd, shards, max_shard_size="600KB")
    assert len(list(shards.iterdir())) > 2
    with azure({f"sharded/{f.name}": f.read_bytes() for f in shards.iterdir()}) as (server, env, sas, sig):
        loaded_without_showing(tmp_path, f"az://ckptacct/models/sharded/?{sas}", env, sig, sd)
        blobs = [r for r in server.requests if "/models/sharded/model-" in r[1] and "comp=list" not in r[1]]
        assert blobs and all("sig=" in r[1] for r in blobs), blobs


def test_sas_token_of_a_file(tmp_path):
    """One blob named with its SAS in the query: rank 0's catalog names it
    redacted, and each other rank opens it by its own name, query and all
    (it used to send the literal REDACTED signature and get a 403)."""
    from conftest import state_dict
    from safetensors.torch import save_file
    sd = state_dict(seed=6)
    f = tmp_path / "model.safetensors"
    save_file(sd, f)
    with azure({"one/model.safetensors": f.read_bytes()}) as (server, env, sas, sig):
        loaded_without_showing(tmp_path, f"az://ckptacct/models/one/model.safetensors?{sas}", env, sig, sd)
