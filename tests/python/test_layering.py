"""The library's files keep their layers (docs/ARCHITECTURE.md, issue 28's
"Done when"): no two files call each other.  Read from the linker's view:
each object file of libckpt, the symbols it defines and those it uses, so a
call through a header the test never parses still counts.  A format's file
calls the catalog and the writer builder through their plug-in contracts
and the registry lists the formats' tables: a loop through three or more
files is that contract, a loop between two is a tangle."""
import shutil
import subprocess
from pathlib import Path

import pytest
from ckptlib import LIB_PATH

OBJECTS = Path(LIB_PATH).parent / "CMakeFiles" / "ckpt_objects.dir" / "src"


def symbols(obj):
    """(defined, used) global symbols of one object file."""
    out = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDRB":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
    return defined, used


def calls():
    """{file: {files whose symbols it uses}} over libckpt's objects."""
    files = {str(o.relative_to(OBJECTS))[:-len(".c.o")]: symbols(o) for o in OBJECTS.rglob("*.c.o")}
    owner = {s: f for f, (defined, _) in files.items() for s in defined}
    return {f: {owner[s] for s in used if s in owner and owner[s] != f} for f, (_, used) in files.items()}


def test_no_two_files_call_each_other():
    if not shutil.which("nm") or not OBJECTS.is_dir():
        pytest.skip(f"no nm, or no object files at {OBJECTS} (a build that is not CMake's)")
    graph = calls()
    assert len(graph) > 40, sorted(graph)  # the objects were found
    pairs = sorted({tuple(sorted((a, b))) for a, callees in graph.items() for b in callees if a in graph.get(b, ())})
    assert pairs == [], pairs
