"""After a measurement's code paths (bench/suites.py) are redrawn, the
results whose code did not change carry the new paths' digest.

A result records the digest of the files its measurement's code paths
named when it ran.  Redrawing the paths (a file that the suite never runs
moved out of a group, say) changes that digest even where no measured
byte changed, and the result would read as stale.  For each result whose
recorded paths differ from today's, this checks with git that none of the
files today's paths name changed since the result's commit (`git diff`,
untracked files, and the files that were dirty when it ran), and only then
records today's paths and their digest, with a `regrouped` note saying
when and from which paths.  Anything else is left as it is, stale.

    .venv/bin/python bench/regroup.py          # then bench/report.py
"""
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suites  # noqa: E402

RESULTS = suites.ROOT / "bench" / "results"


def unchanged_since(prov, groups):
    """Why the files `groups` name may differ from those the result measured
    ("" when they are the same, by git)."""
    commit = prov.get("commit")
    if not commit or suites._git("cat-file", "-e", f"{commit}^{{commit}}") is None:
        return f"its commit {commit} is not in this clone's history"
    changed = suites._each(groups, "diff", "--name-only", commit)
    changed += suites._each(groups, "ls-files", "--others", "--exclude-standard")
    if changed:
        return "changed since: " + ", ".join(sorted(changed)[:5])
    names = set(suites.files(groups) or [])
    dirty = [p for p in prov.get("dirty") or [] if p in names]
    if dirty:
        return "measured with uncommitted changes to " + ", ".join(dirty)
    return ""


def main():
    head = (suites._git("rev-parse", "HEAD") or "").strip()
    for path in sorted(RESULTS.glob("*.json")):
        doc = json.loads(path.read_text())
        prov = doc.get("provenance") or {}
        name = prov.get("measurement")
        if name not in suites.MEASUREMENTS or not prov.get("code"):
            continue
        groups = suites.MEASUREMENTS[name].code
        if prov.get("code_paths") == groups:
            continue
        why = unchanged_since(prov, groups)
        if why:
            print(f"{path.name}: left as it is ({why})")
            continue
        note = {"at": head, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "from_paths": prov.get("code_paths"), "from_code": prov["code"]}
        prov["regrouped"] = (prov.get("regrouped") or []) + [note]
        prov["code_paths"] = groups
        prov["code"] = suites.code_digest(groups)
        path.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"{path.name}: today's paths, unchanged since {prov['commit'][:10]}: digest recorded")


if __name__ == "__main__":
    main()
