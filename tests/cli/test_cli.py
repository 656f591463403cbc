"""The `ckpt` command line: exit codes, messages, atomic output, progress."""
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
import safetensors.numpy
from ckptlib import BIN_PATH, Catalog


def run(*args, **kw):
    return subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True, **kw)


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {f"layers.{i}.weight": rng.standard_normal((64, 64)).astype(np.float32) for i in range(6)}
    arrays["bias"] = np.arange(10, dtype=np.int64)
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(arrays, str(path), metadata={"format": "np"})
    return path


def test_help_and_usage_errors():
    for args in (["--help"], ["inspect", "--help"], ["convert", "--help"]):
        r = run(*args)
        assert r.returncode == 0 and "usage: ckpt" in r.stdout
    assert run("--version").stdout.startswith("ckpt ")
    for args, needle in ((["frobnicate"], "unknown command"), (["inspect"], "missing PATH"),
                         (["inspect", "--bogus", "x"], "unknown option"), (["convert", "a"], "SRC and DST"),
                         (["convert", "a", "b", "c"], "unexpected argument"),
                         (["convert", "a", "b", "--max-shard-size"], "needs a value")):
        r = run(*args)
        assert r.returncode == 2, args
        assert needle in r.stderr
    assert run().returncode == 2


def test_inspect_table_and_json(model):
    r = run("inspect", model)
    assert r.returncode == 0 and r.stderr == ""
    assert "layers.0.weight" in r.stdout and "[64, 64]" in r.stdout and "F32" in r.stdout
    assert "Totals: 7 tensors, 24,586 parameters" in r.stdout
    assert "format: np" in r.stdout
    doc = json.loads(run("inspect", "--json", model).stdout)
    assert doc["totals"]["tensors"] == 7
    assert doc["totals"]["by_dtype"]["F32"]["tensors"] == 6
    assert doc["totals"]["by_dtype"]["I64"]["bytes"] == 80


def test_missing_file_is_one_clear_line(tmp_path):
    r = run("inspect", tmp_path / "nope.safetensors")
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1
    assert "nope.safetensors" in r.stderr and "[CKPT_E_NOT_FOUND]" in r.stderr


def test_convert_shards_merge_and_refuse_to_clobber(model, tmp_path):
    out = tmp_path / "sharded"
    r = run("convert", model, out, "--max-shard-size", "40KB")
    assert r.returncode == 0, r.stderr
    # No progress bar when stderr is not a terminal: only the summary line.
    assert "\r" not in r.stderr and r.stderr.startswith("ckpt: wrote 7 tensors") and r.stderr.count("\n") == 1
    names = sorted(os.listdir(out))
    assert names[-1] == "model.safetensors.index.json" and len(names) == 4  # 16 KB tensors, two a shard
    merged = tmp_path / "merged.safetensors"
    assert run("convert", out, merged).returncode == 0
    assert merged.read_bytes() == model.read_bytes()

    before = merged.read_bytes()
    r = run("convert", model, merged)
    assert r.returncode == 1 and "[CKPT_E_EXISTS]" in r.stderr and "--force" in r.stderr
    assert merged.read_bytes() == before
    r = run("convert", model, out, "--max-shard-size", "100KB")
    assert r.returncode == 1 and "[CKPT_E_EXISTS]" in r.stderr
    assert sorted(os.listdir(out)) == names
    # --force replaces, and removes the old shards the new layout does not use.
    r = run("convert", model, out, "--max-shard-size", "1GB", "--force")
    assert r.returncode == 0, r.stderr
    assert os.listdir(out) == ["model.safetensors"]


def test_convert_into_directory_defaults_to_5GB_shards(model, tmp_path):
    out = tmp_path / "dir"
    out.mkdir()
    assert run("convert", model, out).returncode == 0
    assert os.listdir(out) == ["model.safetensors"]
    assert (out / "model.safetensors").read_bytes() == model.read_bytes()


def test_convert_usage_mistakes(model, tmp_path):
    r = run("convert", model, tmp_path / "o", "--max-shard-size", "5 parsecs")
    assert r.returncode == 2 and "cannot parse size" in r.stderr
    # A file name with a maximum shard size: the file when it fits (its
    # parts beside it when it does not: tests/python/test_destination.py).
    r = run("convert", model, tmp_path / "o.safetensors", "--max-shard-size", "1MB")
    assert r.returncode == 0 and (tmp_path / "o.safetensors").is_file()
    r = run("convert", model, tmp_path / "o", "--prefix", "a/b")
    assert r.returncode == 2
    assert not (tmp_path / "o").exists()


def test_progress_bar_when_forced(model, tmp_path):
    r = run("convert", model, tmp_path / "p.safetensors", "--progress")
    assert r.returncode == 0
    assert "converting [" in r.stderr and "100%" in r.stderr and "ETA" in r.stderr


def test_corrupt_source_leaves_no_output(tmp_path, model):
    data = bytearray(model.read_bytes())
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(data[:-5]))  # truncated
    r = run("convert", bad, tmp_path / "out.safetensors")
    assert r.returncode == 1 and "[CKPT_E_TRUNCATED]" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["bad.safetensors", "model.safetensors"]


def _small_tmpfs(path, size):
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")


def test_full_disk_is_a_clear_error_and_leaves_nothing(tmp_path, model):
    disk = tmp_path / "small"
    _small_tmpfs(disk, "64k")  # the model is ~150 KB
    try:
        r = run("convert", model, disk / "out.safetensors")
        assert r.returncode == 1
        assert "[CKPT_E_NO_SPACE]" in r.stderr and "out.safetensors" in r.stderr
        assert os.listdir(disk) == []
        r = run("convert", model, disk / "shards", "--max-shard-size", "40KB")
        assert r.returncode == 1 and "[CKPT_E_NO_SPACE]" in r.stderr
        assert os.listdir(disk) == []  # no shards, no stage directory
        (disk / "existing").mkdir()
        (disk / "existing" / "config.json").write_text("{}")  # not empty: shards written in place
        r = run("convert", model, disk / "existing", "--max-shard-size", "40KB")
        assert r.returncode == 1 and "[CKPT_E_NO_SPACE]" in r.stderr
        assert os.listdir(disk / "existing") == ["config.json"]
    finally:
        subprocess.run(["umount", str(disk)])


def test_interrupt_leaves_destination_as_it_was(tmp_path):
    # Large enough that the copy is still running when the signal lands.
    src = tmp_path / "big.safetensors"
    arrays = {f"t{i}": np.full((64, 1 << 20), i, dtype=np.uint8) for i in range(12)}
    safetensors.numpy.save_file(arrays, str(src))
    del arrays
    outcomes = set()
    for delay in (0.005, 0.02, 0.05, 0.2):
        out = tmp_path / f"out-{delay}"
        p = subprocess.Popen([BIN_PATH, "convert", str(src), str(out), "--max-shard-size", "100MB"],
                             stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        entries = sorted(os.listdir(out)) if out.exists() else []
        if p.returncode == 0:
            outcomes.add("finished")
            with Catalog(out) as cat:
                assert len(cat.names()) == 12
        else:
            outcomes.add("interrupted")
            # 130 once ckpt handles the signal; killed by it (before the
            # handler is installed, when nothing is written yet) otherwise.
            assert p.returncode in (130, -signal.SIGINT), (p.returncode, err)
            if p.returncode == 130:
                assert "interrupted" in err
            assert entries == [], entries  # no shard, no temporary, no index
        shutil.rmtree(out, ignore_errors=True)
    assert "interrupted" in outcomes


def test_inspect_torch_file(tmp_path):
    import torch
    w = torch.arange(12.).reshape(3, 4)
    torch.save({"model": {"w": w, "w_t": w.t()}, "epoch": 3}, tmp_path / "m.pt")
    r = run("inspect", tmp_path / "m.pt")
    assert r.returncode == 0, r.stderr
    assert "torch.save, 1 file" in r.stdout
    assert "model.w_t" in r.stdout and "(shares storage with model.w)" in r.stdout
    assert "    'epoch': 3\n" in r.stdout  # in the object tree's outline
    doc = json.loads(run("inspect", "--json", tmp_path / "m.pt").stdout)
    assert doc["format"] == "torch"
    t = {x["name"]: x for x in doc["tensors"]}
    assert t["model.w_t"]["strides"] == [1, 4] and t["model.w_t"]["storage"] == t["model.w"]["storage"]
    assert dict(doc["tree"]["__dict__"])["epoch"] == 3
