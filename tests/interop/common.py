"""Shared helpers: torch dtypes and their safetensors names, tensor bytes."""
import struct

import torch

# torch dtype → safetensors dtype name (safetensors.torch._TYPES, reversed).
TORCH_TO_ST = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.float8_e5m2: "F8_E5M2",
    torch.float8_e4m3fn: "F8_E4M3", torch.float8_e8m0fnu: "F8_E8M0", torch.float8_e4m3fnuz: "F8_E4M3FNUZ",
    torch.float8_e5m2fnuz: "F8_E5M2FNUZ", torch.int16: "I16", torch.uint16: "U16", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.int32: "I32", torch.uint32: "U32", torch.float32: "F32",
    torch.complex64: "C64", torch.float64: "F64", torch.int64: "I64", torch.uint64: "U64",
    torch.float4_e2m1fn_x2: "F4",
}


def tensor_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def st_shape(t):
    """The shape safetensors records (float4 x2 packs two values a byte)."""
    shape = list(t.shape)
    if t.dtype == torch.float4_e2m1fn_x2 and shape:
        shape[-1] *= 2
    return shape


def random_tensor(dtype, shape, gen):
    """Random bit patterns of a dtype (bools are 0/1)."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (*shape[:-1], shape[-1] * itemsize) if shape else (itemsize,), dtype=torch.uint8,
                        generator=gen)
    t = raw.view(dtype)
    return t.reshape(shape) if not shape else t


def all_dtypes_state_dict(seed=0):
    gen = torch.Generator().manual_seed(seed)
    sd = {}
    for i, dtype in enumerate(TORCH_TO_ST):
        sd[f"layer.{i}.{TORCH_TO_ST[dtype].lower()}"] = random_tensor(dtype, [3, 4 + i % 3], gen)
    sd["scalar"] = torch.tensor(2.5)
    sd["scalar_i64"] = torch.tensor(-7)
    sd["empty"] = torch.zeros(0, 5)
    sd["empty_bf16"] = torch.zeros(4, 0, dtype=torch.bfloat16)
    sd["naïve.名前.😀"] = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    sd["weird \"quoted\\ name\n"] = torch.ones(2)
    return sd


def safetensors_bytes(header_obj=None, raw_header=None, data=b""):
    """A safetensors file from a header (dict or raw text) and data bytes."""
    import json
    text = raw_header if raw_header is not None else json.dumps(header_obj, separators=(",", ":"))
    h = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(h)) + h + data
