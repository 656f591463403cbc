#!/usr/bin/env python3
"""Writes src/formats/torch_allowed.h: the globals torch's weights-only
unpickler allows, from the installed torch (sorted, for bsearch).

    python scripts/gen_torch_allowed.py          # rewrite the header
    python scripts/gen_torch_allowed.py --check  # exit 1 if it differs

The test suite runs --check, so a torch upgrade that changes the list
fails until the header is regenerated and committed."""
import argparse
import pathlib
import sys

HEADER = pathlib.Path(__file__).resolve().parent.parent / "src" / "formats" / "torch_allowed.h"
WIDTH = 120


def allowed_names():
    import torch
    from torch import _weights_only_unpickler as w
    names = set()
    for key, value in w._get_allowed_globals().items():
        names.add(key if isinstance(key, str) else f"{value.__module__}.{value.__name__}")
    return torch.__version__.split("+")[0], sorted(names)


def render(version, names):
    lines = [f"/* Generated from torch {version} by scripts/gen_torch_allowed.py: "
             "sorted(torch._weights_only_unpickler._get_allowed_globals()). */",
             "static const char *const torch_allowed[] = {"]
    line = "   "
    for name in names:
        item = f' "{name}",'
        if len(line) + len(item) > WIDTH:
            lines.append(line)
            line = "   "
        line += item
    lines.append(line)
    lines.append("};")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed header instead of writing it")
    args = ap.parse_args()
    text = render(*allowed_names())
    if args.check:
        if HEADER.read_text() != text:
            sys.stderr.write(f"{HEADER} differs from what the installed torch allows; "
                             "run scripts/gen_torch_allowed.py and commit the header\n")
            return 1
        return 0
    HEADER.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
