#!/usr/bin/env python3
"""Writes the small torch files the fault-injection test reads (committed):
.venv/bin/python tests/fault/make_fixtures.py"""
import io
import zipfile
from pathlib import Path

import torch

out = Path(__file__).resolve().parent / "fixtures"
out.mkdir(exist_ok=True)
w = torch.arange(48, dtype=torch.float32).reshape(6, 8)
obj = {"model": {"w": w, "w_t": w.t(), "row": w[2].clone(), "b": torch.ones(5, dtype=torch.bfloat16)},
       "epoch": 4, "hp": [0.1, "adam", None]}
torch.save(obj, out / "model.pt")
torch.save(obj, out / "legacy.pt", _use_new_zipfile_serialization=False)
buf = io.BytesIO()
src = zipfile.ZipFile(out / "model.pt")
with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
    for info in src.infolist():
        z.writestr(info.filename, src.read(info))
(out / "rezipped.pt").write_bytes(buf.getvalue())
print("fixtures written to", out)
