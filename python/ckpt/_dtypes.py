"""Dtype names: ckpt (safetensors) names ↔ torch and numpy dtypes."""

TORCH = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8",
    "BOOL": "bool", "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F8_E8M0": "float8_e8m0fnu", "F4": "float4_e2m1fn_x2",
}

NUMPY = {
    "F64": "float64", "F32": "float32", "F16": "float16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8",
    "BOOL": "bool", "C64": "complex64",
}

# numpy has no bfloat16 or float8: ml_dtypes (installed with jax) adds them.
ML_DTYPES = {
    "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu",
}

PACKED = {"F4": 2}  # elements per byte of dtypes torch stores packed

# ggml's block types (GGUF): (elements, bytes) per block along the last axis.
# Loaded without a float dtype, such a tensor is its raw blocks: uint8 with
# the last axis in bytes, as gguf-py's GGUFReader gives it.
BLOCKS = {
    "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24), "Q8_0": (32, 34), "Q8_1": (32, 40),
    "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210),
    "Q8_K": (256, 292), "IQ2_XXS": (256, 66), "IQ2_XS": (256, 74), "IQ3_XXS": (256, 98), "IQ1_S": (256, 50),
    "IQ4_NL": (32, 18), "IQ3_S": (256, 110), "IQ2_S": (256, 82), "IQ4_XS": (256, 136), "IQ1_M": (256, 56),
    "TQ1_0": (256, 54), "TQ2_0": (256, 66), "MXFP4": (32, 17), "NVFP4": (64, 36), "Q1_0": (128, 18),
}


def block_storage_shape(name, shape):
    """The shape of a block-type tensor's raw bytes (last axis in bytes)."""
    elems, size = BLOCKS[name]
    shape = tuple(shape)
    return shape[:-1] + (shape[-1] // elems * size,) if shape else shape

_torch_cache = {}
_numpy_cache = {}


def torch_dtype(name, tensor=None):
    import torch
    if name in BLOCKS:
        return torch.uint8
    dt = _torch_cache.get(name)
    if dt is None:
        attr = TORCH.get(name)
        dt = getattr(torch, attr, None) if attr else None
        if dt is None:
            what = f" (tensor {tensor!r})" if tensor else ""
            raise TypeError(f"dtype {name}{what} has no torch equivalent in torch {torch.__version__}")
        _torch_cache[name] = dt
    return dt


def torch_name(dtype):
    if not _torch_cache or len(_torch_cache) < len(TORCH):
        import torch
        for k, v in TORCH.items():
            if hasattr(torch, v):
                _torch_cache.setdefault(k, getattr(torch, v))
    for k, v in _torch_cache.items():
        if v == dtype:
            return k
    raise TypeError(f"torch dtype {dtype} has no safetensors equivalent")


def numpy_dtype(name, tensor=None):
    import numpy as np
    dt = _numpy_cache.get(name)
    if dt is not None:
        return dt
    if name in BLOCKS:
        return np.dtype(np.uint8)
    if name in NUMPY:
        dt = np.dtype(NUMPY[name]).newbyteorder("<")
    elif name in ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError:
            what = f"tensor {tensor!r} has dtype {name}" if tensor else f"dtype {name}"
            raise TypeError(f"{what}, which numpy lacks: install ml_dtypes, or open the file with framework=\"pt\"") from None
        dt = np.dtype(getattr(ml_dtypes, ML_DTYPES[name]))
    else:
        what = f"tensor {tensor!r} has dtype {name}" if tensor else f"dtype {name}"
        raise TypeError(f"{what}, which numpy cannot hold (packed sub-byte floats): open the file with framework=\"pt\"")
    _numpy_cache[name] = dt
    return dt


def numpy_name(dtype):
    import numpy as np
    dtype = np.dtype(dtype)
    for k, v in NUMPY.items():
        if dtype == np.dtype(v) or dtype == np.dtype(v).newbyteorder(">"):
            return k
    try:
        import ml_dtypes
        for k, v in ML_DTYPES.items():
            if dtype == np.dtype(getattr(ml_dtypes, v)):
                return k
    except ImportError:
        pass
    raise TypeError(f"numpy dtype {dtype} has no safetensors equivalent")
