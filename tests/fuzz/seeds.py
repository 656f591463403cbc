"""What the seed generators (make_*seeds*.py) share: put() stages an input
for a target, named by its content as libFuzzer names inputs, and commit()
adds the staged inputs to the targets' packed corpora,
tests/fuzz/corpus/<target>.tar.gz (tests/fuzz/corpus.sh add)."""
import hashlib
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
_staged = {}  # target -> TemporaryDirectory of its new inputs


def put(target, data):
    if target not in _staged:
        _staged[target] = tempfile.TemporaryDirectory(prefix=f"ckpt-seeds-{target}-")
    (Path(_staged[target].name) / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def commit():
    """Adds every staged input to its target's archive (an input already
    there is the same file again: its name is its content's)."""
    for target, staged in sorted(_staged.items()):
        files = sorted(Path(staged.name).iterdir())
        subprocess.run(["sh", str(HERE / "corpus.sh"), "add", str(HERE / "corpus" / f"{target}.tar.gz"), *map(str, files)],
                       check=True)
        print(f"{target}: {len(files)} seeds")
        staged.cleanup()
    _staged.clear()
