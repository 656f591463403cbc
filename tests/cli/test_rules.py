"""Rules that match nothing, or name a tensor they cannot apply to: errors
naming the pattern, as git names a pathspec that matched no file."""
import subprocess

import numpy as np
import pytest
import safetensors.numpy

import ckpt
from ckptlib import BIN_PATH


@pytest.fixture()
def model(tmp_path):
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"conv.weight": np.ones((4, 3, 2, 2), np.float32), "fc.weight": np.ones((5, 6), np.float32),
                                 "ids": np.arange(4, dtype=np.int64), "a*b": np.zeros(2, np.float32)}, str(path))
    return path


def run(*args):
    return subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("rule", [["--select", "nomatch*"], ["--exclude", "nomatch*"], ["--rename", "nope.=x."],
                                  ["--dtype", "nomatch*=bf16"], ["--slice", "nomatch=0:0:1"], ["--transpose", "nope"]])
def test_a_pattern_that_matches_nothing_is_an_error(model, tmp_path, rule):
    out = tmp_path / "out.safetensors"
    r = run("convert", model, out, *rule)
    assert r.returncode == 1 and "[CKPT_E_NO_MATCH]" in r.stderr and "matched no tensor" in r.stderr, r.stderr
    assert not out.exists()
    r = run("convert", model, out, *rule, "--ignore-unmatched")
    assert r.returncode == 0, r.stderr


def test_a_plan_that_selects_nothing_is_an_error(model, tmp_path):
    r = run("convert", model, tmp_path / "o.safetensors", "--exclude", "*")
    assert r.returncode == 1 and "selects none" in r.stderr and "[CKPT_E_NO_MATCH]" in r.stderr
    with pytest.raises(ckpt.NoMatchError, match="matched no tensor"):
        ckpt.load(model, select="nomatch*")
    with pytest.raises(ckpt.NoMatchError, match="selects none"):
        ckpt.load(model, exclude="*")
    assert ckpt.load(model, select="nomatch*", ignore_unmatched=True) == {}


def test_layouts_name_what_does_not_fit_or_count_it(model, tmp_path):
    r = run("convert", model, tmp_path / "a.safetensors", "--layout", "fc.weight=OIHW:HWIO")
    assert r.returncode == 2 and "fc.weight" in r.stderr and "4 axes" in r.stderr  # a usage error
    r = run("convert", model, tmp_path / "b.safetensors", "--layout", "*.weight=OIHW:HWIO")
    assert r.returncode == 0 and "1 of the 2 matching tensors left as they are" in r.stderr, r.stderr
    r = run("convert", model, tmp_path / "c.safetensors", "--transpose", "ids")
    assert r.returncode == 2 and "ids" in r.stderr
    r = run("convert", model, tmp_path / "d.safetensors", "--dtype", "ids=bf16")
    assert r.returncode == 2 and "cannot cast a I64 tensor" in r.stderr
    r = run("convert", model, tmp_path / "e.safetensors", "--dtype", "bf16")  # broad: ids left as they are
    assert r.returncode == 0 and "left as they are" in r.stderr


def test_exact_names_with_glob_characters(model):
    # "a*b" named exactly (escaped) matches itself only.
    got = ckpt.load(model, select="a\\*b", framework="numpy")
    assert list(got) == ["a*b"]
