"""kill -9 at random moments of ckpt convert: the destination is absent or
complete (byte-identical to an uninterrupted run), and the next run cleans
the temporaries the killed one left."""
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
    return sorted(n for n in os.listdir(dirpath) if ".ckpt-tmp-" in n)


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
