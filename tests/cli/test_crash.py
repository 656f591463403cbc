"""kill -9 at random moments of ckpt convert: the destination is absent or
complete (byte-identical to an uninterrupted run), and the next run cleans
the temporaries and the lock file the killed one left."""
import filecmp
import os
import random
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
import safetensors.numpy
from ckptlib import BIN_PATH

TRIALS = 50


def leftovers(dirpath):
    """Temporaries, and lock files (a killed writer's is removed by the next)."""
    return sorted(n for n in os.listdir(dirpath) if ".ckpt-tmp-" in n or n.endswith(".ckpt-lock"))


def same_tree(a, b):
    if os.path.isfile(a):
        return filecmp.cmp(a, b, shallow=False)
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False)
                                                  for n in names)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("crash")
    arrays = {f"layer.{i:02d}.w": np.full((1024, 2048), i, dtype=np.float32) for i in range(24)}  # 192 MiB
    path = d / "src.safetensors"
    safetensors.numpy.save_file(arrays, str(path))
    return d, path


@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
def test_kill_9_never_leaves_a_damaged_output(source, sharded):
    d, src = source
    extra = ["--max-shard-size", "40MB"] if sharded else []
    work = d / ("work-sharded" if sharded else "work-single")
    work.mkdir()
    ref = work / ("ref" if sharded else "ref.safetensors")
    t0 = time.monotonic()
    subprocess.run([BIN_PATH, "convert", str(src), str(ref), *extra], check=True)
    duration = time.monotonic() - t0
    rng = random.Random(7 if sharded else 3)
    outcomes = {"absent": 0, "complete": 0}
    for trial in range(TRIALS // 2):
        dst = work / ("out" if sharded else "out.safetensors")
        p = subprocess.Popen([BIN_PATH, "convert", str(src), str(dst), *extra], stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0, duration * 1.2))
        p.send_signal(signal.SIGKILL)
        p.wait()
        if dst.exists():
            assert same_tree(dst, ref), f"trial {trial}: a damaged output under the final name"
            outcomes["complete"] += 1
            shutil.rmtree(dst) if sharded else dst.unlink()
        else:
            outcomes["absent"] += 1
        # The next run succeeds and cleans what the killed one left.
        r = subprocess.run([BIN_PATH, "convert", str(src), str(dst), *extra], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert same_tree(dst, ref)
        assert leftovers(work) == [], leftovers(work)
        if sharded:
            assert leftovers(dst) == []
        shutil.rmtree(dst) if sharded else dst.unlink()
    print(f"{'sharded' if sharded else 'single'}: {outcomes}")
    assert outcomes["absent"] > 0  # some kills did land mid-conversion


def tree_files(d):
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d)) if not n.startswith(".")}


def test_kill_9_while_replacing_a_checkpoint_beside_other_files(tmp_path):
    """--force over an old checkpoint in a directory that holds other files
    (config.json): whatever moment the kill hits, the directory holds the
    old checkpoint complete or the new one (once `ckpt recover` finished a
    decided commit, which reads refuse until then), never a mix."""
    def arrays(value):
        return {f"layer.{i:02d}.w": np.full((512, 1024), value + i, dtype=np.float32) for i in range(8)}  # 16 MiB
    old_src, new_src = tmp_path / "old.safetensors", tmp_path / "new.safetensors"
    safetensors.numpy.save_file(arrays(0), str(old_src))
    safetensors.numpy.save_file(arrays(100), str(new_src))
    shard = ["--max-shard-size", "3MB", "--no-sync"]
    refs = {}
    for name, src in (("old", old_src), ("new", new_src)):
        subprocess.run([BIN_PATH, "convert", str(src), str(tmp_path / f"ref-{name}"), *shard], check=True)
        refs[name] = tree_files(tmp_path / f"ref-{name}")
    assert refs["old"].keys() == refs["new"].keys()  # same names: the new files replace the old ones in place
    dst = tmp_path / "model"
    config = b'{"model_type": "test"}'
    t0 = time.monotonic()
    subprocess.run([BIN_PATH, "convert", str(new_src), str(tmp_path / "timing"), *shard], check=True)
    duration = time.monotonic() - t0
    rng = random.Random(11)
    outcomes = {"old": 0, "new": 0, "journal": 0}
    for trial in range(TRIALS):
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(tmp_path / "ref-old", dst)
        (dst / "config.json").write_bytes(config)
        p = subprocess.Popen([BIN_PATH, "convert", str(new_src), str(dst), "--force", *shard], stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0, duration * 1.3))
        p.send_signal(signal.SIGKILL)
        p.wait()
        # A read never finishes a decided commit: it refuses, naming the fix,
        # and changes nothing; `ckpt recover` finishes it (or there is none
        # and the old checkpoint is whole).
        decided, before = (dst / ".ckpt-commit.json").exists(), tree_files(dst)
        r = subprocess.run([BIN_PATH, "inspect", str(dst)], capture_output=True, text=True)
        if decided:
            assert r.returncode == 1 and "[CKPT_E_INCOMPLETE]" in r.stderr and f"ckpt recover {dst}" in r.stderr
            assert tree_files(dst) == before and (dst / ".ckpt-commit.json").exists()
            outcomes["journal"] += 1
            r = subprocess.run([BIN_PATH, "recover", str(dst)], capture_output=True, text=True)
            assert r.returncode == 0, (trial, r.stderr)
            r = subprocess.run([BIN_PATH, "inspect", str(dst)], capture_output=True, text=True)
        assert r.returncode == 0, (trial, r.stderr)
        files = tree_files(dst)
        assert files.pop("config.json") == config
        state = [k for k, ref in refs.items() if files == ref]
        assert state, f"trial {trial}: a mix of old and new files: {sorted(files)}"
        outcomes[state[0]] += 1
        # The next conversion cleans what the killed one left.
        subprocess.run([BIN_PATH, "convert", str(new_src), str(dst), "--force", *shard], check=True)
        assert tree_files(dst) == {**refs["new"], "config.json": config}
        assert not [n for n in os.listdir(dst) if n.startswith(".")], os.listdir(dst)
    print(outcomes)
    assert outcomes["old"] > 0 and outcomes["new"] > 0
