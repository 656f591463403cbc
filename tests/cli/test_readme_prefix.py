"""The README's "Linking from a custom prefix" block, run as written (in a
scratch $HOME, with a small app.c): pkg-config finds the installed library,
and the program runs through its rpath, or through LD_LIBRARY_PATH."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

APP = r"""
#include <stdio.h>
#include <ckpt.h>
int main(int argc, char **argv) {
    ckpt_error err;
    ckpt_catalog *cat;
    if (argc < 2 || ckpt_catalog_open(argv[1], &cat, &err) != CKPT_OK) return 1;
    printf("%zu tensors\n", ckpt_catalog_tensor_count(cat));
    ckpt_catalog_close(cat);
    return 0;
}
"""


def readme_block(heading):
    text = (ROOT / "README.md").read_text()
    after = text[text.index(heading):]
    block = re.search(r"```console\n(.*?)```", after, re.S).group(1)
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


@pytest.mark.skipif(not shutil.which("pkg-config") or not shutil.which("cc"), reason="needs pkg-config and cc")
def test_linking_from_a_custom_prefix(tmp_path):
    commands = readme_block("Linking from a custom prefix")
    assert any("-Wl,-rpath" in c for c in commands) and any("LD_LIBRARY_PATH" in c for c in commands)
    (tmp_path / "app.c").write_text(APP)
    header = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    build = (ROOT / "build").resolve()
    script = "set -e\n" + "\n".join(c.replace("cmake --install build ", f"cmake --install {build} ")
                                    for c in commands)
    env = {k: v for k, v in os.environ.items() if k not in ("PKG_CONFIG_PATH", "LD_LIBRARY_PATH")}
    env["HOME"] = str(tmp_path)
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("1 tensors") == 2, r.stdout
    # Without either, the loader does not find the library: the rpath is
    # what made the first run work.
    r = subprocess.run([str(tmp_path / "app-no-rpath"), "model.safetensors"], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "libckpt" in r.stderr
