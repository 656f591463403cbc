"""Commit journals from strangers, interrupted commits, and concurrent
writers (issue 26, sections 1 and 5).

A checkpoint directory may carry a planted .ckpt-commit.json.  Reads
(inspect, verify, the read side of convert, ckpt.open/load/load_into/
convert) never change anything and ignore a journal that is not provably
ckpt's, with a warning in inspect and verify; writers (convert and
ckpt.convert/save into the directory) and `ckpt recover` / ckpt.recover
refuse it with CKPT_E_INCOMPLETE and leave it alone.  Sentinel files
outside the checkpoint, and the user's notes.txt inside it, stay
byte-identical whatever runs.

A genuine interrupted commit (a real `ckpt convert --force` killed after
its journal was written, by tests/cli/commit_shim.c) makes reads refuse,
naming the fix, and is finished by `ckpt recover`, ckpt.recover, or the
next writer.

Two `ckpt convert --force` started together into one directory: one wins,
the other fails at once with CKPT_E_LOCKED naming a pid, and the directory
holds exactly one complete checkpoint, no orphans."""
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
from ckptlib import BIN_PATH

import ckpt
from statuses import status_of

STAGE = "..commit.ckpt-tmp-4242-d0"  # named exactly as ckpt names a commit's stage
JOURNAL = ".ckpt-commit.json"
HERE = Path(__file__).resolve().parent


def journal(stage, *entries):
    fields = ["ckpt-commit-1", "stage", stage, *entries, "end"]
    return b"".join(f.encode() + b"\0" for f in fields)


def snapshot(root, skip=()):
    """Every entry under root (never following a symlink): kind, size,
    content hash or link target."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if os.path.islink(p):
                out[os.path.join(rel, name)] = ("link", os.readlink(p))
            elif os.path.isfile(p):
                out[os.path.join(rel, name)] = ("file", hashlib.sha256(Path(p).read_bytes()).hexdigest())
            else:
                out[os.path.join(rel, name)] = ("other", st.st_mode)
    return out


def run(*args, env=None, timeout=30):
    return subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)


def arrays(value, n=4, rows=64):
    return {f"layer.{i}.w": np.full((rows, 256), value + i, dtype=np.float32) for i in range(n)}


# ---- planted journals ---------------------------------------------------------------

def plant_stage_dotdot(model, outside):
    (model / JOURNAL).write_bytes(journal("..", "remove", "precious.txt"))


def plant_stage_dot(model, outside):
    (model / JOURNAL).write_bytes(journal(".", "remove", "model.safetensors"))


def plant_stage_symlink(model, outside):
    os.symlink(outside, model / STAGE)
    (model / JOURNAL).write_bytes(journal(STAGE, "publish", "model.safetensors"))


def plant_remove_notes(model, outside):
    (model / STAGE).mkdir()
    (model / JOURNAL).write_bytes(journal(STAGE, "remove", "notes.txt"))


def plant_absolute(model, outside):
    (model / STAGE).mkdir()
    (model / JOURNAL).write_bytes(journal(STAGE, "remove", str(outside / "model.safetensors")))


def plant_slash(model, outside):
    (model / STAGE).mkdir()
    (model / JOURNAL).write_bytes(journal(STAGE, "remove", "../precious.txt"))


def plant_stage_file(model, outside):
    (model / STAGE).write_bytes(b"not a directory")
    (model / JOURNAL).write_bytes(journal(STAGE, "publish", "model.safetensors"))


def plant_publish_symlink(model, outside):
    (model / STAGE).mkdir()
    os.symlink(outside / "secret.safetensors", model / STAGE / "model.safetensors")
    (model / JOURNAL).write_bytes(journal(STAGE, "remove", "model.safetensors", "publish", "model.safetensors"))


def plant_publish_fifo(model, outside):
    (model / STAGE).mkdir()
    os.mkfifo(model / STAGE / "model.safetensors")
    (model / JOURNAL).write_bytes(journal(STAGE, "remove", "model.safetensors", "publish", "model.safetensors"))


PLANTED = {f.__name__[len("plant_"):]: f for f in (plant_stage_dotdot, plant_stage_dot, plant_stage_symlink,
                                                    plant_remove_notes, plant_absolute, plant_slash, plant_stage_file,
                                                    plant_publish_symlink, plant_publish_fifo)}


@pytest.fixture
def hostile(tmp_path, request):
    """tmp/home/model: a checkpoint with the user's notes.txt and a planted
    journal; tmp/home/precious.txt beside it; tmp/outside: a directory the
    journal points at, with sentinel files."""
    home, outside, model = tmp_path / "home", tmp_path / "outside", tmp_path / "home" / "model"
    model.mkdir(parents=True)
    outside.mkdir()
    (home / "precious.txt").write_bytes(b"the user's precious file")
    (outside / "secret.safetensors").write_bytes(b"a secret outside the checkpoint")
    (outside / "model.safetensors").write_bytes(b"sentinel")
    safetensors.numpy.save_file(arrays(0), str(model / "model.safetensors"))
    (model / "notes.txt").write_bytes(b"the user's notes")
    src = tmp_path / "src.safetensors"
    safetensors.numpy.save_file(arrays(100), str(src))
    request.param(model, outside)
    return tmp_path, model, src


@pytest.mark.parametrize("hostile", list(PLANTED.values()), ids=list(PLANTED), indirect=True)
def test_planted_journal_touches_nothing(hostile):
    root, model, src = hostile
    before = snapshot(root, skip=("out",))
    out = root / "out"
    out.mkdir()
    # Reads ignore it; inspect and verify say they left it alone.
    for cmd in ("inspect", "verify"):
        r = run(cmd, model)
        assert r.returncode == 0, (cmd, r.stderr)
        warnings = [line for line in r.stderr.splitlines() if "warning" in line]
        assert len(warnings) == 1 and JOURNAL in warnings[0] and "left alone" in warnings[0], (cmd, r.stderr)
    r = run("convert", model, out / "from-cli", "--max-shard-size", "1MB")
    assert r.returncode == 0, r.stderr
    assert sorted(ckpt.load(model, "np")) == sorted(arrays(0))
    with ckpt.open(model) as c:
        assert len(c.keys()) == 4
    target = {k: np.zeros_like(v) for k, v in arrays(0).items()}
    ckpt.load_into(target, model)
    assert all((target[k] == v).all() for k, v in arrays(0).items())
    ckpt.convert(model, out / "from-python.safetensors")
    # Writers and recovery refuse it, naming the journal and the rule.
    for cmd in (("convert", src, model, "--force", "--max-shard-size", "1MB"), ("recover", model)):
        r = run(*cmd)
        assert r.returncode == 1 and "[CKPT_E_INCOMPLETE]" in r.stderr, (cmd, r.stderr)
        assert JOURNAL in r.stderr and "not a journal ckpt wrote" in r.stderr and "left alone" in r.stderr
    for call in (lambda: ckpt.recover(model), lambda: ckpt.convert(src, model, overwrite=True, max_shard_size="1MB"),
                 lambda: ckpt.save(arrays(7), model, overwrite=True)):
        with pytest.raises(ckpt.Error) as e:
            call()
        assert status_of(e.value) == "CKPT_E_INCOMPLETE" and e.value.path.endswith(JOURNAL), e.value
    # Not one byte changed, inside the checkpoint or outside it.
    assert snapshot(root, skip=("out",)) == before


def test_inspect_of_a_file_leaves_its_directory_alone(tmp_path):
    """Naming a file reads nothing but it: the directory holding it is not
    recovered (it was: `ckpt inspect ~/Downloads/x.safetensors` ran the
    journal of ~/Downloads)."""
    safetensors.numpy.save_file(arrays(0), str(tmp_path / "x.safetensors"))
    (tmp_path / "notes.txt").write_bytes(b"notes")
    (tmp_path / STAGE).mkdir()
    (tmp_path / STAGE / "model.safetensors").write_bytes(b"staged")
    (tmp_path / JOURNAL).write_bytes(journal(STAGE, "publish", "model.safetensors"))
    before = snapshot(tmp_path)
    r = run("inspect", tmp_path / "x.safetensors")
    assert r.returncode == 0, r.stderr
    assert "unfinished commit of other files" in r.stderr
    assert ckpt.load(tmp_path / "x.safetensors", "np").keys() == arrays(0).keys()
    assert snapshot(tmp_path) == before


def test_a_huge_journal_costs_a_read_little(tmp_path):
    """A planted journal as large as ckpt accepts (100,000 entries: one
    fstatat each) and one entry larger (refused unread): bounded time."""
    safetensors.numpy.save_file(arrays(0), str(tmp_path / "model.safetensors"))
    (tmp_path / STAGE).mkdir()
    for n, rc in ((100000, 1), (100001, 0)):
        (tmp_path / JOURNAL).write_bytes(journal(STAGE, *[x for i in range(n) for x in ("publish", f"{i:06d}.distcp")]))
        t0 = time.monotonic()
        r = run("inspect", tmp_path)
        assert time.monotonic() - t0 < 10
        assert r.returncode == rc, r.stderr
        assert ("[CKPT_E_INCOMPLETE]" if rc else "more entries than ckpt writes") in r.stderr


# ---- a genuine interrupted commit ------------------------------------------------------

@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    so = tmp_path_factory.mktemp("shim") / "commit_shim.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(so), str(HERE / "commit_shim.c"), "-ldl"], check=True)
    return so


def killed_after_decision(shim, src, dst, n, *args):
    env = dict(os.environ, LD_PRELOAD=str(shim), CKPT_TEST_KILL_AFTER_DECISION=str(n))
    r = run("convert", src, dst, "--force", "--no-sync", *args, env=env)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert (dst / JOURNAL).exists()


def tree_files(d):
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d)) if not n.startswith(".")}


@pytest.mark.parametrize("finisher", ["cli", "python", "cli-writer", "python-writer"])
def test_interrupted_commit_is_refused_by_reads_and_finished_explicitly(tmp_path, shim, finisher):
    old, new = tmp_path / "old.safetensors", tmp_path / "new.safetensors"
    safetensors.numpy.save_file(arrays(0, n=8), str(old))
    safetensors.numpy.save_file(arrays(100, n=8), str(new))
    shard = ["--max-shard-size", "200KB"]
    ref = tmp_path / "ref"
    assert run("convert", new, ref, *shard).returncode == 0
    dst = tmp_path / "model"
    assert run("convert", old, dst, "--max-shard-size", "300KB").returncode == 0
    (dst / "config.json").write_bytes(b'{"model_type": "test"}')
    killed_after_decision(shim, new, dst, 3, *shard)  # two new shards published, the rest staged
    before = snapshot(tmp_path)
    # Reads refuse, naming the directory and the fix, and change nothing.
    for cmd in ("inspect", "verify"):
        r = run(cmd, dst)
        assert r.returncode == 1 and "[CKPT_E_INCOMPLETE]" in r.stderr, r.stderr
        assert f"ckpt recover {dst}" in r.stderr and "interrupted" in r.stderr
    r = run("convert", dst, tmp_path / "out.safetensors")
    assert r.returncode == 1 and "[CKPT_E_INCOMPLETE]" in r.stderr
    for call in (lambda: ckpt.open(dst), lambda: ckpt.load(dst, "np"), lambda: ckpt.convert(dst, tmp_path / "o2")):
        with pytest.raises(ckpt.Error) as e:
            call()
        assert status_of(e.value) == "CKPT_E_INCOMPLETE" and "ckpt.recover" in str(e.value)
    assert ckpt.recover(dst, check=True) is True
    assert run("recover", "--check", dst).returncode == 0
    assert snapshot(tmp_path) == before
    # Finished by recovery, or by the next writer into the directory.
    if finisher == "cli":
        r = run("recover", dst)
        assert r.returncode == 0 and "finished" in r.stdout, r.stderr
    elif finisher == "python":
        assert ckpt.recover(dst) is True
    elif finisher == "cli-writer":
        assert run("convert", new, dst, "--force", *shard).returncode == 0
    else:
        ckpt.convert(new, dst, overwrite=True, max_shard_size="200KB")
    files = tree_files(dst)
    assert files.pop("config.json") == b'{"model_type": "test"}'
    assert files == tree_files(ref)
    assert [n for n in os.listdir(dst) if n.startswith(".")] == []
    assert ckpt.recover(dst) is False
    assert sorted(ckpt.load(dst, "np")) == sorted(arrays(100, n=8))


# ---- concurrent writers ------------------------------------------------------------------

def test_two_writers_into_one_directory(tmp_path, shim):
    """The issue's race, 8 rounds: two `ckpt convert --force` into one
    directory holding a checkpoint.  The shim only delays each process's
    first file creation by 300 ms, so that the two are certain to overlap
    whatever the machine's load."""
    srcs, refs = [], []
    for k, shard in enumerate(("150KB", "400KB")):
        src = tmp_path / f"src{k}.safetensors"
        safetensors.numpy.save_file(arrays(10 * k, n=8), str(src))
        assert run("convert", src, tmp_path / f"ref{k}", "--max-shard-size", shard).returncode == 0
        srcs.append((src, shard))
        refs.append(tree_files(tmp_path / f"ref{k}"))
    dst = tmp_path / "model"
    assert run("convert", srcs[0][0], dst, "--max-shard-size", "150KB").returncode == 0
    env = dict(os.environ, LD_PRELOAD=str(shim), CKPT_TEST_SLOW_CREATE_MS="300")
    for round_ in range(8):
        procs = [subprocess.Popen([BIN_PATH, "convert", str(src), str(dst), "--force", "--max-shard-size", shard],
                                  stderr=subprocess.PIPE, text=True, env=env) for src, shard in srcs]
        results = [(p.wait(timeout=60), p.stderr.read()) for p in procs]
        assert sorted(rc for rc, _ in results) == [0, 1], (round_, results)
        winner = next(i for i, (rc, _) in enumerate(results) if rc == 0)
        loser = results[1 - winner][1]
        assert "[CKPT_E_LOCKED]" in loser and f"another process (pid {procs[winner].pid})" in loser, loser
        # Exactly one complete checkpoint, the winner's, and nothing else.
        assert tree_files(dst) == refs[winner], (round_, sorted(os.listdir(dst)))
        assert [n for n in os.listdir(dst) if n.startswith(".")] == []
        assert sorted(ckpt.load(dst, "np")) == sorted(arrays(0, n=8))
        assert not [n for n in os.listdir(tmp_path) if ".ckpt-" in n], os.listdir(tmp_path)


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print(os.getpid(), flush=True)
time.sleep(60)
"""


def test_a_live_lock_names_its_holder(tmp_path):
    src = tmp_path / "src.safetensors"
    safetensors.numpy.save_file(arrays(0), str(src))
    dst = tmp_path / "model"
    assert run("convert", src, dst, "--max-shard-size", "100KB").returncode == 0
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(dst)], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(holder.stdout.readline())
        before = snapshot(tmp_path)
        t0 = time.monotonic()
        r = run("convert", src, dst, "--force", "--max-shard-size", "50KB")
        assert r.returncode == 1 and "[CKPT_E_LOCKED]" in r.stderr, r.stderr
        assert f"another process (pid {pid}) is writing this destination" in r.stderr
        assert time.monotonic() - t0 < 10  # at once, not after waiting
        r = run("recover", dst)
        assert r.returncode == 1 and f"pid {pid}" in r.stderr and "[CKPT_E_LOCKED]" in r.stderr
        with pytest.raises(ckpt.Error) as e:
            ckpt.save(arrays(1), dst, overwrite=True)
        assert status_of(e.value) == "CKPT_E_LOCKED" and f"pid {pid}" in str(e.value)
        # A read of a directory being published names the writer.
        (dst / STAGE).mkdir()
        (dst / JOURNAL).write_bytes(journal(STAGE, "remove", "model.safetensors.index.json"))
        r = run("inspect", dst)
        assert r.returncode == 1 and f"being written by another process (pid {pid})" in r.stderr, r.stderr
        shutil.rmtree(dst / STAGE)
        (dst / JOURNAL).unlink()
        assert snapshot(tmp_path) == before
    finally:
        holder.kill()
        holder.wait()
    assert run("convert", src, dst, "--force", "--max-shard-size", "50KB").returncode == 0
    assert not [n for n in os.listdir(tmp_path) if ".ckpt-lock" in n]
