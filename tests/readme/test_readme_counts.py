"""Counts the README states that are facts of the test suites, not
measurements (those come from bench/results: tests/python/test_readme_figures.py):
each is read here from the tests themselves, so that the README cannot drift
from them.  A count of the README that names these things must match; a
sentence that no longer states it fails too (reword it here as well)."""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
HOSTILE = ROOT / "tests" / "hostile"
sys.path.insert(0, str(HOSTILE))
import dirs  # noqa: E402


def stated(pattern):
    """The number the README states where pattern (a regex with one group) matches, collapsed whitespace."""
    found = re.findall(pattern, re.sub(r"\s+", " ", README))
    assert len(found) == 1, f"README.md: {pattern!r} matched {len(found)} times, not once"
    return int(found[0].replace(",", ""))


def test_hostile_files():
    """The committed hostile corpus: every entry of its manifests (tests/cli/test_hostile_corpus.py runs each)."""
    files = json.loads((HOSTILE / "manifest.json").read_text())
    others = [json.loads(m.read_text()) for m in sorted(HOSTILE.glob("manifest_*.json"))]
    assert stated(r"(\d+) hostile files and") == len(files)
    assert stated(r"and (\d+) hostile DCP checkpoints") == sum(len(m) for m in others)


def test_hostile_directories():
    """The hostile-directory corpus (tests/hostile/dirs.py), run by tests/cli/test_hostile_dirs.py."""
    assert stated(r"(\d+) hostile checkpoint directories") == len(dirs.CASES)



def test_kill_9_trials():
    """tests/cli/test_crash.py: TRIALS // 2 per case of the parametrized fresh-destination test, TRIALS while
    replacing."""
    crash = (ROOT / "tests" / "cli" / "test_crash.py").read_text()
    trials = int(re.search(r"^TRIALS = (\d+)$", crash, re.M).group(1))
    cases = len(re.search(r'parametrize\("sharded", \[([^\]]*)\]', crash).group(1).split(","))
    assert crash.count("range(TRIALS // 2)") == 1 and crash.count("range(TRIALS)") == 1
    total = cases * (trials // 2) + trials
    for pattern in (r"(\d+) `kill -9` trials, into fresh", r"hostile corpus, and (\d+) `kill -9` trials"):
        assert stated(pattern) == total
