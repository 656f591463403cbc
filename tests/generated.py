#!/usr/bin/env python3
"""Test inputs too big to commit, written when the tests need them.

- tests/hostile/corpus/pt-two-million-marks.pt (2 MB): a torch file whose
  pickle opens two million MARKs (refused with CKPT_E_LIMIT, as
  tests/hostile/manifest.json says). Written with the bytes
  tests/hostile/generate.py first wrote: the zip records carry that run's
  timestamp, pinned here.

The files are git-ignored. ensure() writes each one that is missing or
differs, through a temporary name, so that test runs side by side never see
half a file. Standard library only: pytest imports this module, and the Rust
and Elixir tests run it (`python tests/generated.py`) before they read the
hostile corpus."""
import io
import os
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOSTILE_CORPUS = HERE / "hostile" / "corpus"
# The time stamp in the zip records of the file as first generated and committed.
TWO_MILLION_MARKS_TIME = (2026, 11, 22, 5, 12, 28)


def torch_zip(members, date_time):
    """A torch.save-shaped zip: the members stored, as zipfile.writestr
    stores a str name (mode 0600), at a fixed time."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time)
            info.external_attr = 0o600 << 16
            z.writestr(info, data)
    return buf.getvalue()


def two_million_marks():
    pickle = b"\x80\x02" + b"(" * (2 << 20) + b"."
    return torch_zip({"archive/data.pkl": pickle, "archive/version": "3\n"}, TWO_MILLION_MARKS_TIME)


GENERATED = {HOSTILE_CORPUS / "pt-two-million-marks.pt": two_million_marks}


def ensure():
    """Writes every generated file that is missing or differs; returns their paths."""
    for path, build in GENERATED.items():
        data = build()
        if path.exists() and path.read_bytes() == data:
            continue
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return list(GENERATED)


if __name__ == "__main__":
    for p in ensure():
        print(p, file=sys.stderr)
