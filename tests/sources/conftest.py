"""Fixtures of the remote-source tests: small checkpoints written by the
peers (safetensors, huggingface_hub, torch), served by nginx on loopback."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from servers import Nginx, nginx_available  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent
BIN = os.environ.get("CKPT_BIN", str(ROOT / "build" / "ckpt"))


def run(*args, env=None, **kw):
    """The ckpt command line."""
    full = dict(os.environ, **(env or {}))
    return subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, env=full, **kw)


def state_dict(seed=0, layers=4, width=96):
    g = torch.Generator().manual_seed(seed)
    sd = {"embed.weight": torch.randn(512, width, generator=g).to(torch.bfloat16)}
    for i in range(layers):
        p = f"layers.{i}."
        sd[p + "attn.weight"] = torch.randn(width * 3, width, generator=g)
        sd[p + "mlp.weight"] = torch.randn(width * 4, width, generator=g).to(torch.float16)
        sd[p + "norm.weight"] = torch.randn(width, generator=g)
        sd[p + "steps"] = torch.arange(7, dtype=torch.int64) + i
    sd["head.weight"] = torch.randn(2000, width, generator=g)  # ~0.8 MB: spans several parts
    return sd


def same(a, b):
    """Equal dtype, shape and bytes."""
    def raw(t):
        return t.contiguous().reshape(-1).view(torch.uint8) if t.numel() else t
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(raw(a), raw(b))


def same_dict(a, b):
    return set(a) == set(b) and all(same(a[k], b[k]) for k in b)


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """A directory of checkpoints:
    model.safetensors           one file (safetensors.torch.save_file)
    many.safetensors            4000 tensors: a header over 256 KiB
    sharded/                    huggingface_hub shards and their index
    repo/                       model.safetensors.index.json and shards (a "directory" URL)
    pytorch_model.bin           torch.save
    empty.safetensors           0 bytes
    """
    import safetensors.torch as st
    from huggingface_hub import save_torch_state_dict

    d = tmp_path_factory.mktemp("served")
    sd = state_dict()
    st.save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    many = {f"t.{i:05d}": torch.full((3,), float(i)) for i in range(4000)}
    st.save_file(many, d / "many.safetensors")
    (d / "sharded").mkdir()
    (d / "repo").mkdir()
    save_torch_state_dict(sd, d / "sharded", max_shard_size="200KB")
    save_torch_state_dict(sd, d / "repo", max_shard_size="300KB")
    torch.save(sd, d / "pytorch_model.bin")
    (d / "empty.safetensors").write_bytes(b"")
    return d, sd


@pytest.fixture(scope="session")
def nginx(served, tmp_path_factory):
    if not nginx_available():
        pytest.skip("nginx is not installed (Debian's nginx-light: make deps installs it)")
    root, _ = served
    work = tmp_path_factory.mktemp("nginx")
    (work / "htpasswd").write_text("alice:{PLAIN}s3cr3t-pw\n")
    extra = f"""
    location /basic/ {{ alias {root}/; auth_basic "ckpt"; auth_basic_user_file {work}/htpasswd; }}
    location /bearer/ {{
      alias {root}/;
      if ($http_authorization != "Bearer tok-123-secret") {{ return 401; }}
    }}
    location /moved/ {{ rewrite ^/moved/(.*)$ /$1 redirect; }}
    location /noetag/ {{ alias {root}/; etag off; }}
    """
    with Nginx(root, work / "run", extra=extra) as n:
        yield n


def requests_for(nginx, name):
    """The access log lines that asked for `name`."""
    return [r for r in nginx.log() if f" /{name} " in r[0] or r[0].split(" ")[1].endswith("/" + name)]
