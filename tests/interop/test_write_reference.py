"""Files written by ckpt are read exactly by safetensors, and are
byte-identical to what safetensors writes for the same tensors."""
import random

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
from ckptlib import CkptError, write

from common import TORCH_TO_ST, all_dtypes_state_dict, random_tensor, st_shape, tensor_bytes
from statuses import status_of


def as_records(sd, order):
    return [(k, TORCH_TO_ST[sd[k].dtype], st_shape(sd[k]), tensor_bytes(sd[k])) for k in order]


def state_dicts():
    yield "all dtypes", all_dtypes_state_dict(7)
    gen = torch.Generator().manual_seed(11)
    yield "llama-like", {
        "model.embed_tokens.weight": torch.randn(320, 64, generator=gen).bfloat16(),
        **{f"model.layers.{i}.{p}": torch.randn(64, 64, generator=gen).bfloat16()
           for i in range(3) for p in ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "mlp.up_proj.weight")},
        **{f"model.layers.{i}.input_layernorm.weight": torch.ones(64) for i in range(3)},
        "lm_head.weight": torch.randn(320, 64, generator=gen).half(),
    }
    yield "empty state dict", {}
    yield "one scalar", {"x": torch.tensor(1.0, dtype=torch.float64)}
    yield "names that sort by bytes", {n: random_tensor(torch.float32, [2], gen) for n in ["B", "a", "Z", "é", "_", "0", "a.10", "a.9"]}


@pytest.mark.parametrize("label,sd", list(state_dicts()), ids=[s[0] for s in state_dicts()])
@pytest.mark.parametrize("metadata", [None, {"format": "pt"}])
def test_byte_identical_to_safetensors(tmp_path, label, sd, metadata):
    ref = tmp_path / "ref.safetensors"
    safetensors.torch.save_file(sd, str(ref), metadata=metadata)
    order = list(sd)
    random.Random(label).shuffle(order)  # declaration order must not matter
    out = tmp_path / "ckpt.safetensors"
    write(out, as_records(sd, order), metadata=metadata, chunk=7)
    assert out.read_bytes() == ref.read_bytes()
    loaded = safetensors.torch.load_file(str(out))
    assert set(loaded) == set(sd)
    for k, t in sd.items():
        assert loaded[k].dtype == t.dtype and loaded[k].shape == t.shape
        assert tensor_bytes(loaded[k]) == tensor_bytes(t)


def test_byte_identical_to_safetensors_numpy(tmp_path):
    rng = np.random.default_rng(3)
    arrays = {"a": rng.standard_normal((3, 5)).astype(np.float32), "b": rng.integers(0, 9, 4, dtype=np.int64),
              "c": np.array(True), "d": rng.standard_normal(2).astype(np.float16)}
    np_to_st = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(bool): "BOOL",
                np.dtype(np.float16): "F16"}
    ref = tmp_path / "ref.safetensors"
    safetensors.numpy.save_file(arrays, str(ref), metadata={"framework": "np"})
    out = tmp_path / "ckpt.safetensors"
    write(out, [(k, np_to_st[a.dtype], list(a.shape), a.tobytes()) for k, a in arrays.items()],
          metadata={"framework": "np"})
    assert out.read_bytes() == ref.read_bytes()
    back = safetensors.numpy.load_file(str(out))
    for k, a in arrays.items():
        np.testing.assert_array_equal(back[k], a)


def test_writer_refuses_incomplete_data(tmp_path):
    out = tmp_path / "x.safetensors"
    with pytest.raises(CkptError) as e:
        write(out, [("t", "F32", [4], b"\0" * 8)])
    assert status_of(e.value) == "CKPT_E_BAD_STATE" and e.value.tensor == "t"
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
