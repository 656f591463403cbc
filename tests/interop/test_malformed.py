"""One malformed file per validation rule: ckpt refuses each with its own
status (naming file, tensor and byte offset), as the reference refuses it."""
import re
import struct
import subprocess

import pytest
import safetensors
from ckptlib import BIN_PATH, Catalog, CkptError

from common import safetensors_bytes
from statuses import status_of


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


# (label, file bytes, expected status, tensor named in the error or None,
#  whether the reference safetensors also refuses it)
CASES = [
    ("header too small", b"\x01\x02\x03", "CKPT_E_CORRUPT/CKPT_D_HEADER_TOO_SMALL", None, True),
    ("header too large", struct.pack("<Q", 100_000_001) + b"{}", "CKPT_E_CORRUPT/CKPT_D_HEADER_TOO_LARGE", None, True),
    ("header past end", struct.pack("<Q", 64) + b"{}", "CKPT_E_CORRUPT/CKPT_D_HEADER_PAST_END", None, True),
    ("not utf-8", safetensors_bytes(raw_header=b'{"\xc3\x28":1}'), "CKPT_E_CORRUPT/CKPT_D_HEADER_NOT_UTF8", None, True),
    ("not json", safetensors_bytes(raw_header='{"a":{"dtype":"F32",'), "CKPT_E_CORRUPT/CKPT_D_HEADER_NOT_JSON", None, True),
    ("not an object", safetensors_bytes(raw_header="[1,2]"), "CKPT_E_CORRUPT/CKPT_D_HEADER_SCHEMA", None, True),
    ("missing data_offsets", safetensors_bytes({"a": {"dtype": "F32", "shape": [1]}}, data=b"\0" * 4),
     "CKPT_E_CORRUPT/CKPT_D_HEADER_SCHEMA", "a", True),
    ("metadata value not string", safetensors_bytes({"__metadata__": {"epoch": 3}}), "CKPT_E_CORRUPT/CKPT_D_METADATA_NOT_STRING",
     None, True),
    ("unknown dtype", safetensors_bytes({"a": entry("F128", [1], 0, 16)}, data=b"\0" * 16), "CKPT_E_UNSUPPORTED/CKPT_D_UNKNOWN_DTYPE",
     "a", True),
    ("shape overflow", safetensors_bytes({"a": entry("F32", [2**62, 2**3], 0, 0)}), "CKPT_E_CORRUPT/CKPT_D_SHAPE_OVERFLOW", "a",
     True),
    ("size mismatch", safetensors_bytes({"a": entry("F32", [3], 0, 8)}, data=b"\0" * 8), "CKPT_E_CORRUPT/CKPT_D_SIZE_MISMATCH",
     "a", True),
    ("hole", safetensors_bytes({"a": entry("U8", [4], 0, 4), "b": entry("U8", [4], 8, 12)}, data=b"\0" * 12),
     "CKPT_E_CORRUPT/CKPT_D_DATA_HOLE", "b", True),
    ("overlap", safetensors_bytes({"a": entry("U8", [8], 0, 8), "b": entry("U8", [4], 4, 8)}, data=b"\0" * 8),
     "CKPT_E_CORRUPT/CKPT_D_DATA_OVERLAP", "b", True),
    ("end before begin", safetensors_bytes({"a": entry("U8", [0], 4, 0)}, data=b"\0" * 4), "CKPT_E_CORRUPT/CKPT_D_BAD_OFFSETS",
     "a", True),
    ("bytes left over", safetensors_bytes({"a": entry("U8", [4], 0, 4)}, data=b"\0" * 9), "CKPT_E_CORRUPT/CKPT_D_TRAILING_BYTES",
     None, True),
    ("data past end", safetensors_bytes({"a": entry("U8", [16], 0, 16)}, data=b"\0" * 10), "CKPT_E_TRUNCATED", "a",
     True),
    ("partial byte", safetensors_bytes({"a": entry("F4", [3], 0, 2)}, data=b"\0" * 2), "CKPT_E_CORRUPT/CKPT_D_PARTIAL_BYTE", "a",
     True),
    # The reference keeps the last of two equal names; ckpt refuses.
    ("duplicate name", safetensors_bytes(raw_header='{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                                    '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}',
                                         data=b"\0\0"), "CKPT_E_CORRUPT/CKPT_D_DUPLICATE_NAME", "a", False),
]


@pytest.mark.parametrize("label,data,status,tensor,ref_refuses", CASES, ids=[c[0] for c in CASES])
def test_each_rule_refused_with_its_status(tmp_path, label, data, status, tensor, ref_refuses):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(CkptError) as e:
        Catalog(path)
    assert status_of(e.value) == status
    assert e.value.path == str(path)
    assert e.value.offset >= 0
    if tensor:
        assert e.value.tensor == tensor and f"tensor '{tensor}'" in e.value.message
    # The CLI: exit 1, one line on stderr naming the file, the byte and the status.
    r = subprocess.run([BIN_PATH, "inspect", str(path)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and f"[{status}]" in lines[0]
    assert re.search(r"at byte \d+", lines[0])
    if ref_refuses:
        with pytest.raises(Exception):
            with safetensors.safe_open(str(path), framework="np") as f:
                for k in f.keys():
                    f.get_tensor(k)
