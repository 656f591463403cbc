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
    assert e.status == "CKPT_E_ZIP_INVALID"
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
    assert type(e) is ckpt.NumpyError and e.status == "CKPT_E_TRUNCATED"
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
    assert type(e) is ckpt.FormatError and e.status == "CKPT_E_UNKNOWN_FORMAT"
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
