"""Python conveniences (issue 27, item 13): a catalog indexed as a mapping
and get() as dict.get, convert returning the paths it wrote as save does,
and a denied access raising PermissionError from every entry point."""
import errno
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import ckpt


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "m.safetensors"
    save_file({"w": torch.arange(6.0).reshape(2, 3), "ids": torch.arange(4)}, p)
    return p


def test_index_and_get_as_a_mapping(path):
    with ckpt.open(path) as c:
        w = c["w"]
        assert isinstance(w, np.ndarray) and np.array_equal(w, np.arange(6.0, dtype=np.float32).reshape(2, 3))
        with pytest.raises(KeyError, match="'nope'"):
            c["nope"]
        assert c.get("nope") is None and c.get("nope", 7) == 7 and c.get("nope", default="x") == "x"
        assert np.array_equal(c.get("ids", 7), np.arange(4))
        assert torch.equal(c.get("w", framework="pt"), torch.arange(6.0).reshape(2, 3))
        # The older form, a framework's name second, keeps its meaning.
        assert torch.equal(c.get("ids", "pt"), torch.arange(4))
        with pytest.raises(KeyError):
            c.get("nope", "pt")
    with ckpt.open(path, framework="pt") as c:  # as safe_open(path, "pt").get_tensor(name)
        assert torch.equal(c["ids"], torch.arange(4)) and torch.equal(c.get("w"), torch.arange(6.0).reshape(2, 3))
        assert isinstance(c.get("w", framework="numpy"), np.ndarray)
    with pytest.raises(ValueError, match="framework 'tf'"):
        ckpt.open(path, framework="tf")


def listing(root):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)


def test_convert_returns_what_it_wrote(tmp_path, path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(path, src / "model.safetensors")
    (src / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert ckpt.convert(src, "one.safetensors", progress=False) == ["one.safetensors"]
    # a model directory (config.json) into a .gguf is llama.cpp's conversion: raw=True, its tensors as they are
    assert ckpt.convert(src, tmp_path / "one.gguf", raw=True, progress=False) == [str(tmp_path / "one.gguf")]
    wrote = ckpt.convert(src, "shards/", max_shard_size="50B", progress=False)
    assert wrote == ["shards/model-00001-of-00002.safetensors", "shards/model-00002-of-00002.safetensors",
                     "shards/model.safetensors.index.json", "shards/config.json"]
    assert sorted(wrote) == listing("shards")
    wrote = ckpt.convert(src, "dcp", format="dcp", dcp_ranks=2, progress=False)
    assert sorted(wrote) == listing("dcp") and "dcp/.metadata" in wrote
    saved = ckpt.save({"w": torch.ones(3)}, "saved")
    assert wrote and saved == ["saved/model.safetensors"]  # the same kind of answer


ACCESS_SCRIPT = r"""
import json, os, sys, torch, ckpt, ckpt.torch
from safetensors.torch import save_file
d = sys.argv[1]
good, bad, ro = (os.path.join(d, n) for n in ("good.safetensors", "bad.safetensors", "ro"))
for p in (good, bad):
    save_file({"w": torch.ones(3)}, p)
os.chmod(bad, 0)
os.mkdir(ro)
os.chmod(ro, 0o555)
calls = {"open": lambda: ckpt.open(bad), "shapes": lambda: ckpt.shapes(bad), "load": lambda: ckpt.load(bad),
         "load_into": lambda: ckpt.load_into({"w": torch.zeros(3)}, bad),
         "torch.load_file": lambda: ckpt.torch.load_file(bad),
         "save": lambda: ckpt.save({"w": torch.ones(3)}, os.path.join(ro, "out")),
         "convert": lambda: ckpt.convert(good, os.path.join(ro, "out.safetensors"), progress=False)}
out = {}
for name, call in calls.items():
    try:
        call()
        out[name] = None
    except Exception as e:
        out[name] = [type(e).__name__, isinstance(e, PermissionError), isinstance(e, ckpt.AccessError),
                     getattr(e, "errno", None), e.filename, str(e)]
print(json.dumps(out))
"""


def test_access_denied_is_a_permission_error(tmp_path):
    """EACCES from opening a checkpoint or creating an output: root ignores
    file modes, so the script runs without capabilities (setpriv) then."""
    cmd = [sys.executable, "-c", ACCESS_SCRIPT, str(tmp_path)]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv to drop the capabilities that bypass file modes")
        cmd = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for name, e in got.items():
        assert e is not None, f"{name} did not fail"
        kind, is_permission, is_access, code, filename, text = e
        assert is_permission and is_access and code == errno.EACCES, (name, e)
        assert "Permission denied" in text and filename and str(tmp_path) in filename, (name, e)
