"""The hostile corpus (tests/hostile, built by generate.py; its largest file
written by tests/generated.py when the tests run): each file refused with its
expected status, in bounded time and memory, with no side effect and no
output."""
import json
import os
import subprocess
import time
from pathlib import Path

import generated
import pytest
from ckptlib import BIN_PATH

HOSTILE = Path(__file__).resolve().parent.parent / "hostile"
# manifest.json (files), and each format's own manifest_*.json (DCP: directories)
MANIFEST = {k: v for m in sorted(HOSTILE.glob("manifest*.json")) for k, v in json.loads(m.read_text()).items()}
MARKER = Path("/tmp/ckpt-hostile-pwned")
generated.ensure()
LIMITS = ["prlimit", f"--as={1 << 30}", "--cpu=20", "timeout", "20"]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_refused_with_its_status(tmp_path, name):
    status = MANIFEST[name]
    MARKER.unlink(missing_ok=True)
    path = HOSTILE / "corpus" / name
    for cmd in (["inspect", str(path)], ["convert", str(path), str(tmp_path / "out.safetensors")]):
        t0 = time.monotonic()
        r = subprocess.run(LIMITS + [BIN_PATH, *cmd], capture_output=True, text=True)
        elapsed = time.monotonic() - t0
        assert r.returncode == 1, (cmd[0], r.returncode, r.stderr)
        assert f"[{status}]" in r.stderr, (cmd[0], r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
        assert elapsed < 10, elapsed
    assert not MARKER.exists(), "a payload ran"
    assert os.listdir(tmp_path) == []
