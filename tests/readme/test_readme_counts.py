"""Counts the documentation states that are facts of the test suites, not
measurements (those come from bench/results: tests/python/test_readme_figures.py):
each is read here from the tests themselves, so that the pages cannot drift
from them.  A count that names these things must match, on whichever page of
README.md, docs/*.md and bench/README.md states it (once, over all of them); a
sentence that no longer states it fails too (reword it here as well)."""
import json
import re
import sys

from test_readme import PAGES, ROOT

TEXTS = {str(p.relative_to(ROOT)): re.sub(r"\s+", " ", p.read_text()) for p in PAGES}
HOSTILE = ROOT / "tests" / "hostile"
sys.path.insert(0, str(HOSTILE))
import dirs  # noqa: E402


def stated(pattern, texts=None):
    """The number the pages state where pattern (a regex with one group)
    matches, whitespace collapsed: exactly once over all the pages."""
    found = [(page, n) for page, text in (texts or TEXTS).items() for n in re.findall(pattern, text)]
    assert len(found) == 1, f"{pattern!r} matched {len(found)} times, not once: {[p for p, _ in found]}"
    return int(found[0][1].replace(",", ""))


def test_a_count_is_found_on_any_page_once():
    assert stated(r"(\d+) things", {"a.md": "no count", "docs/b.md": "there are 12 things"}) == 12
    for texts in ({"a.md": "no count"}, {"a.md": "3 things", "b.md": "4 things"}):
        try:
            stated(r"(\d+) things", texts)
        except AssertionError:
            continue
        raise AssertionError(f"{texts}: a count missing or stated twice must fail")


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
