"""`pip install .` on a machine that has only Python: a fresh virtual
environment without numpy or torch gets `import ckpt` (catalogs, shapes,
conversion) and the `ckpt` command."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pip_install_into_a_bare_environment(tmp_path):
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    # A build directory of its own: the one under build-wheel/ belongs to .venv's Python.
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"--config-settings=build-dir={tmp_path / 'build'}",
                    str(ROOT)], check=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    fixture = tmp_path / "m.safetensors"
    header = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    fixture.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    code = f"""
import ckpt
assert ckpt.shapes({str(fixture)!r}) == {{"w": ckpt.TensorSpec((2,), "F32")}}
ckpt.convert({str(fixture)!r}, {str(tmp_path / 'out')!r}, max_shard_size="1KB", progress=False)
with ckpt.open({str(tmp_path / 'out')!r}) as c:
    assert c.keys() == ["w"]
try:
    import ckpt.numpy
except ImportError as e:
    assert "numpy" in str(e)
else:
    raise AssertionError("numpy should be missing here")
"""
    subprocess.run([str(py), "-c", code], check=True)
    out = subprocess.run([str(env_dir / "bin" / "ckpt"), "inspect", str(fixture)], capture_output=True, text=True,
                         check=True).stdout
    assert "F32" in out
