"""Deep object trees on threads with small stacks (issue 26, section 2).

A torch.save pickle nests as deep as ckpt's walk accepts (500 levels):
ckpt.open(...).tree() and ckpt.load on it, from a thread whose stack is 64
KiB (threading.stack_size; musl's default is 128 KiB), crashed the process
with SIGSEGV: the library's walk took two C frames per nested list, and
Python's json module recurses on the C stack too.  Each case runs in a
subprocess, so that a crash is this test's failure, not the end of the run.
"""
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

DEPTH = 499  # containers around the tensor: it sits 500 deep, the walk's limit


def nest(kind, depth):
    x = {"w": torch.arange(3.0)}
    for _ in range(depth):
        x = [x] if kind == "list" else {"a": x}
    return x


@pytest.fixture(scope="module")
def deep_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("deep")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * DEPTH))  # torch's pickler recurses on its side
    try:
        paths = {}
        for kind in ("list", "dict"):
            paths[kind] = d / f"{kind}{DEPTH}.pt"
            torch.save(nest(kind, DEPTH), paths[kind])
    finally:
        sys.setrecursionlimit(limit)
    return paths


SCRIPT = textwrap.dedent("""
    import sys, threading
    import ckpt

    path, kind, depth = sys.argv[1], sys.argv[2], int(sys.argv[3])
    threading.stack_size(64 * 1024)
    results = []

    def depth_of(tree):
        # the containers around the leaf, walked without recursion
        n = 0
        while not isinstance(tree, dict) or "w" not in tree:
            tree = tree[0] if kind == "list" else tree["a"]
            n += 1
        return n, tree["w"]

    def run():
        try:
            n, leaf = depth_of(ckpt.open(path).tree())
            results.append(("tree", n, tuple(leaf.shape)))
            flat = ckpt.load(path)
            results.append(("load", len(flat), float(flat["0." * depth + "w" if kind == "list" else "a." * depth + "w"][2])))
            n, leaf = depth_of(ckpt.load(path, nested=True))
            results.append(("nested", n, float(leaf[2])))
        except BaseException as e:
            results.append(("error", repr(e)))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    print(results)
""")


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_deep_tree_on_a_64k_thread(deep_files, kind):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(deep_files[kind]), kind, str(DEPTH)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the process died ({proc.returncode}): {proc.stderr[-2000:]}"
    assert proc.stdout.strip() == str([("tree", DEPTH, (3,)), ("load", 1, 2.0), ("nested", DEPTH, 2.0)])


def test_deep_structure_round_trip(tmp_path):
    """ckpt.save's structure of a deep tree (flatten, its JSON) and its
    decoding, without recursion: the same containers come back."""
    import ckpt
    from ckpt import _tree

    tree = nest("list", DEPTH)
    tree = (tree, {3: tree})
    flat, structure = _tree.flatten(tree, with_structure=True)
    assert len(flat) == 2
    back = _tree.unflatten(flat, structure)
    assert isinstance(back, tuple) and list(back[1]) == [3]
    x = back[1][3]
    for _ in range(DEPTH):
        x = x[0]
    assert x["w"] is flat["1.3" + ".0" * DEPTH + ".w"]
    # and names alone, split at dots, nest as deep
    names = {"a." * DEPTH + "w": 1, "b": 2}
    nested = _tree.unflatten(names)
    x = nested
    for _ in range(DEPTH):
        x = x["a"]
    assert x == {"w": 1} and nested["b"] == 2
    assert ckpt  # the package imports
