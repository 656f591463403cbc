"""Format errors are raised as the class of the format the file was read as
(issue 27, item 6): a truncated torch .bin is a TorchError, not a
SafetensorError; every family derives from ckpt.FormatError, and a file that
is no checkpoint at all is a FormatError saying what it looks like."""
import io
import json
import subprocess

import gguf
import numpy as np
import pytest
import safetensors.numpy
import torch
from ckptlib import BIN_PATH
from flax import serialization

import ckpt
from statuses import status_of

FAMILIES = (ckpt.SafetensorError, ckpt.TorchError, ckpt.GGUFError, ckpt.NumpyError, ckpt.DCPError, ckpt.MsgpackError)


def raised(path):
    with pytest.raises(ckpt.FormatError) as e:
        ckpt.open(path)
    return e.value


def test_each_format_raises_its_own_class(tmp_path):
    for cls in FAMILIES:
        assert issubclass(cls, ckpt.FormatError) and issubclass(cls, ckpt.Error)
    # torch.save, cut short (a download that stopped): not a safetensors error.
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(1000)}, buf)
    (tmp_path / "pytorch_model.bin").write_bytes(buf.getvalue()[:4000])
    e = raised(tmp_path / "pytorch_model.bin")
    assert type(e) is ckpt.TorchError and not isinstance(e, ckpt.SafetensorError), type(e)
    assert status_of(e) == "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID"
    # safetensors keeps SafetensorError, so that `except SafetensorError` works.
    good = tmp_path / "good.safetensors"
    safetensors.numpy.save_file({"a": np.arange(8, dtype=np.float32)}, str(good))
    (tmp_path / "cut.safetensors").write_bytes(good.read_bytes()[:-4])
    assert type(raised(tmp_path / "cut.safetensors")) is ckpt.SafetensorError
    # NumPy: a truncated .npy (CKPT_E_TRUNCATED, which every format uses) and a damaged .npz.
    npy = io.BytesIO()
    np.save(npy, np.arange(10, dtype=np.float32))
    (tmp_path / "a.npy").write_bytes(npy.getvalue()[:-1])
    e = raised(tmp_path / "a.npy")
    assert type(e) is ckpt.NumpyError and status_of(e) == "CKPT_E_TRUNCATED"
    np.savez(tmp_path / "z.npz", a=np.zeros(4, np.float32))
    (tmp_path / "z.npz").write_bytes((tmp_path / "z.npz").read_bytes()[:-30])
    assert type(raised(tmp_path / "z.npz")) is ckpt.NumpyError
    # GGUF, cut in its tensor data.
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_tensor("t", np.zeros(64, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (tmp_path / "m.gguf").write_bytes((tmp_path / "m.gguf").read_bytes()[:-8])
    assert type(raised(tmp_path / "m.gguf")) is ckpt.GGUFError
    # Flax msgpack with bytes after the document.
    (tmp_path / "flax_model.msgpack").write_bytes(serialization.to_bytes({"w": np.zeros(3, np.float32)}) + b"\xc0")
    assert type(raised(tmp_path / "flax_model.msgpack")) is ckpt.MsgpackError
    # torch.distributed.checkpoint whose .metadata is damaged.
    dcp = tmp_path / "dcp"
    r = subprocess.run([BIN_PATH, "convert", str(good), str(dcp), "--to", "dcp", "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    meta = (dcp / ".metadata").read_bytes()
    (dcp / ".metadata").write_bytes(meta[: len(meta) // 2])
    e = raised(dcp)
    assert type(e) is ckpt.DCPError, (type(e), e)


def test_no_checkpoint_at_all_is_a_format_error_saying_what_it_is(tmp_path):
    (tmp_path / "notes.txt").write_text("not weights\n")
    e = raised(tmp_path / "notes.txt")
    assert type(e) is ckpt.FormatError and status_of(e) == "CKPT_E_UNKNOWN_FORMAT"
    assert "not a checkpoint ckpt reads (it looks like text)" in str(e) and "GGUF" in str(e)
    (tmp_path / "index.html").write_text("<!doctype html><html></html>")
    with pytest.raises(ckpt.FormatError, match="it looks like HTML"):
        ckpt.load(tmp_path / "index.html")
    # Named .safetensors, it is a bad safetensors file to whoever named it so.
    (tmp_path / "model.safetensors").write_text("<!doctype html><html></html>")
    with pytest.raises(ckpt.SafetensorError, match="it looks like HTML"):
        ckpt.open(tmp_path / "model.safetensors")
    # Other errors keep their classes.
    with pytest.raises(ckpt.NotFoundError):
        ckpt.open(tmp_path / "missing.safetensors")
    assert not issubclass(ckpt.NotFoundError, ckpt.FormatError)
    json.dumps(ckpt.__all__)  # every class is exported
    for cls in FAMILIES + (ckpt.FormatError,):
        assert cls.__name__ in ckpt.__all__


def test_statuses_are_the_tables(tmp_path):
    """Python's names and numbers are the library's table (include/ckpt_status.h):
    every status below 100, every detail in one of them, none sharing a number."""
    import re
    from pathlib import Path
    table = (Path(__file__).resolve().parents[2] / "include" / "ckpt_status.h").read_text()
    statuses = {n: int(c) for n, c in re.findall(r"X\((CKPT_(?:OK|E_\w+)), (\d+), \"", table)}
    details = {n: (int(c), s) for n, c, s in re.findall(r"X\((CKPT_D_\w+), (\d+), (CKPT_\w+), \"", table)}
    assert ckpt._ckpt.status_names() == statuses and ckpt._ckpt.detail_names() == details
    assert all(code < 100 for code in statuses.values())
    assert all(status in statuses and status != "CKPT_OK" for name, (_, status) in details.items() if name != "CKPT_D_NONE")
    assert not set(statuses.values()) & {code for code, _ in details.values() if code}
    assert len(details) == 55 and details["CKPT_D_HEADER_TOO_LARGE"] == (21, "CKPT_E_CORRUPT")


def test_a_corrupt_header_says_its_status_and_its_detail(tmp_path):
    """A safetensors header over 100,000,000 bytes: status CKPT_E_CORRUPT (what
    to do: report the file), detail CKPT_D_HEADER_TOO_LARGE (which rule), the
    class of its format, and both at the end of its sentence."""
    path = tmp_path / "big.safetensors"
    path.write_bytes((100_000_001).to_bytes(8, "little") + b"{}")
    e = raised(path)
    assert type(e) is ckpt.SafetensorError
    assert (e.status, e.code, e.detail, e.detail_code) == ("CKPT_E_CORRUPT", 18, "CKPT_D_HEADER_TOO_LARGE", 21)
    assert str(e).endswith("[CKPT_E_CORRUPT/CKPT_D_HEADER_TOO_LARGE]"), str(e)
    r = subprocess.run([BIN_PATH, "inspect", str(path)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.rstrip().endswith("[CKPT_E_CORRUPT/CKPT_D_HEADER_TOO_LARGE]"), r.stderr
    # A status without a detail shows the status alone.
    with pytest.raises(ckpt.NotFoundError) as nf:
        ckpt.open(tmp_path / "none.safetensors")
    assert nf.value.detail is None and nf.value.detail_code == 0 and str(nf.value).endswith("[CKPT_E_NOT_FOUND]")
