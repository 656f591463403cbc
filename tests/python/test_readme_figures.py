"""The measured figures of README.md, docs/*.md and bench/README.md (bench/report.py's
DOCS) come from bench/results/*.json only, from the latest run of each measure, and from results that still describe
the code they measured:

- the benchmark tables and every figure in the prose are what bench/report.py
  renders from the JSON, and no measured figure stands outside them;
- every result rendered is fresh — the digest of the code its suite names
  (bench/suites.py) is the one recorded when it ran — or listed as knowingly
  stale (PENDING_RERUN), and then shown as stale where it is used;
- no rendered result holds a measure of ckpt that a newer result holds too:
  the newer run would contradict the older figure (one suite per measure).

The digest is of the working tree's files, so it needs no git history: a
shallow clone checks freshness as a full one does.  Outside a git checkout
(an unpacked archive) freshness cannot be computed and that test skips."""
import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import report  # noqa: E402
import suites  # noqa: E402

MEASURED = re.compile(r"(?<![\w.])(?<![A-Za-z]-)\d[\d,]*(?:\.\d+)?(?:\s?(?:ms|µs|GB/s|MB/s|MiB|GiB|MB\b|GB\b|×|x\b|%)|\ss\b)")
# Figures in the prose that are parameters, limits, defaults or facts of a
# format, not measurements: {page from the repository's root: [text, whitespace collapsed]}.
NOT_MEASURED = {
    "docs/SOURCES.md": ["8 MiB or more each", "loads and converts 4.2 GB in a 5 GB cgroup",
                        "default is 8 GB in 9 GB", "(, 60 s)", "(30 s) one that cannot connect",
                        "averaged over each 30 s**", "12 days for a 1 GB shard", "**300 s without progress**",
                        "after 2 s with no read asking"],
    "docs/ARCHITECTURE.md": ["plus 64 MiB"],
    "docs/CLI.md": ["a tensor of at least 4 MiB has a digest per 1 MiB chunk"],
    "docs/DISTRIBUTED.md": ["read a 4.5 MB replicated table", "that is ~100 MB per", "With 5 GB shards a 10 TB",
                       "retried for 5 s", "the tensors within 8 s", "two 1 GiB staging buffers",
                       "limited to 2 GiB per node", "the disk here had room for the 4 GB", "a 4 GB Llama-shaped",
                       "64 tensors of 256 KiB"],
    "docs/FORMATS.md": ["arrays over 1 GiB", "shards of 5 GB by default", "index files over 10 MB", "indexes over 100 MB", "A tensor of 4 GiB or more", "two 1 MiB buffers",
                   "ckpt at 1 MiB", "tensors of at least 4 MiB", "chunk size** (1 MiB,", "whose block divides 1 MiB",
                   "layer of three 128 MiB stacks under 64 MiB of RSS"],
    "docs/PYTHON.md": ["A tensor of at least 4 MiB", "digest per 1 MiB chunk", "the file's 1 MiB edges"],
    "docs/SECURITY.md": ["error bodies at 1 MiB", "the read timeout (60 s)", "averaged over each 30 s window",
                    "12 days for a 1 GB shard; a 30 s window", "the retry deadline (300 s)", "of at most 16 MiB"],
}


def docs():
    """{page from the repository's root: path} of every page bench/report.py renders into."""
    return {str(p.relative_to(ROOT)): p for p in report.DOCS}


def prose(name, text):
    """A page without its generated tables, code blocks, inline code, rendered
    figures and the facts that are not measurements."""
    if report.BEGIN in text:
        text = text.split(report.BEGIN)[0] + text.split(report.END)[1]
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"\s+", " ", report.FIG.sub("", text))
    for fact in NOT_MEASURED.get(name, []):
        assert fact in text, f"{name}: {fact!r} is no longer there: remove it from NOT_MEASURED"
        text = text.replace(fact, "")
    return text


def rendered_results():
    """{result name: doc} of every result the pages render."""
    report.USED.clear()
    for path in report.DOCS:
        report.render(path)
    return {name: report.load(name) for name in sorted(report.USED)}


# ----------------------------------------------------------------- the checks

def freshness_problems(results, pending, root=ROOT):
    """Why the rendered results do not all describe the code: a stale result
    not listed in pending, a listed one that is fresh again, a listing
    whose measurement nothing renders."""
    problems, unknown = [], []
    rendered = set()
    for name, doc in results.items():
        measurement = suites.measurement_of(name)
        rendered.add(measurement)
        state, why = suites.freshness(doc, root)
        rerun = f'make bench BENCH_ARGS="{suites.MEASUREMENTS[measurement].rerun}"'
        if state == "unknown":
            unknown.append(why)
        elif state == "stale" and measurement not in pending:
            problems.append(f"bench/results/{name}.json is older than the code it measures ({why}): rerun `{rerun}` "
                            f"and bench/report.py, or list {measurement!r} in bench/suites.py PENDING_RERUN")
        elif state == "fresh" and measurement in pending:
            problems.append(f"bench/results/{name}.json describes the code again: remove {measurement!r} from "
                            "bench/suites.py PENDING_RERUN")
    for measurement in sorted(set(pending) - rendered):
        problems.append(f"PENDING_RERUN lists {measurement!r}, whose results nothing renders")
    return problems, unknown


def measures(doc):
    """The key of every measure of ckpt a result holds (bench/run.py measure())."""
    if isinstance(doc, dict):
        if "measure" in doc:
            yield doc["measure"]
        for v in doc.values():
            yield from measures(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from measures(v)


def contradictions(results, rendered):
    """A measure of ckpt that a rendered result holds and a newer result
    (rendered or not) holds too: the newer contradicts the older's figure.
    One suite per measure."""
    owners = {}
    for name, doc in results.items():
        for key in measures(doc):
            owners.setdefault(key, set()).add((doc["provenance"]["date"], name))
    problems = []
    for key, held in sorted(owners.items()):
        newest = max(held)
        for date, name in sorted(held - {newest}):
            if name in rendered:
                problems.append(f"{key!r}: bench/results/{name}.json ({date}) is contradicted by the newer "
                                f"bench/results/{newest[1]}.json ({newest[0]}); one suite per measure")
    return problems


def all_results():
    return {p.stem: json.loads(p.read_text()) for p in sorted((ROOT / "bench" / "results").glob("*.json"))}


# ------------------------------------------------------------- the real pages

def test_tables_and_figures_are_rendered_from_the_results():
    for name, path in docs().items():
        assert report.render(path) == path.read_text(), f"{name}: run bench/report.py"


def test_every_figure_is_used_and_the_expected_ones_are_there():
    names = {n for path in report.DOCS for n, _ in report.FIG.findall(path.read_text())}
    assert names == set(report.FIGURES), "a fig marker without a renderer, or a renderer no page uses"
    assert names >= {"convert-peak", "open", "load-into", "torch-read", "rust", "when-to-use", "crc", "crc-cost",
                     "casts", "distributed-tables"}


def test_no_measured_figure_outside_the_rendered_ones():
    for name, path in docs().items():
        found = MEASURED.findall(prose(name, path.read_text()))
        assert found == [], (f"{name}: {found}: render measured figures from bench/results (a fig marker, "
                             "bench/report.py); list parameters and facts of a format in NOT_MEASURED")


def test_rendered_results_are_fresh_or_knowingly_stale():
    problems, unknown = freshness_problems(rendered_results(), suites.PENDING_RERUN)
    assert problems == []
    if unknown:
        pytest.skip(unknown[0])


def test_each_rendered_result_shows_when_it_was_measured():
    pages = "".join(path.read_text() for path in report.DOCS)
    for name, doc in rendered_results().items():
        line = report.measured(doc)[0]
        assert line in pages, f"{name}: no table shows its provenance line"
        assert ("**Stale" in line) == (doc["provenance"]["measurement"] in suites.PENDING_RERUN)


def test_no_newer_result_contradicts_a_rendered_one():
    assert contradictions(all_results(), set(rendered_results())) == []


def test_a_measurement_pending_its_first_run_has_no_result_and_says_so():
    names = {p.stem for p in (ROOT / "bench" / "results").glob("*.json")}
    pages = "".join(path.read_text() for path in report.DOCS)
    for measurement in suites.PENDING_FIRST_RUN:
        assert measurement in suites.MEASUREMENTS, f"PENDING_FIRST_RUN lists {measurement!r}, no measurement"
        written = sorted(n for n in names if suites.MEASUREMENTS[measurement].writes(n))
        assert not written, f"{written} measured: remove {measurement!r} from bench/suites.py PENDING_FIRST_RUN"
        assert report.not_measured_yet(measurement) in pages, f"no figure says {measurement!r} is not measured yet"


def test_a_figure_of_a_new_suite_renders_its_result_once_there(monkeypatch):
    """The Hub figure stands in for its result until it exists, then renders it."""
    doc = json.loads((ROOT / "bench" / "results" / "transformers.json").read_text())
    run = {"usable_s": 1.0, "call_s": 0.5, "peak_above_imports": 2 << 30, "server_sent_bytes": 2e9}
    side = {"median_usable_s": 1.0, "min_usable_s": 0.9, "max_usable_s": 1.1, "median_call_s": 0.5,
            "max_peak_above_imports_mib": 2048.0, "median_server_sent_bytes": 2e9, "runs": [run]}
    mode = {"ckpt": side, "transformers": {**side, "median_usable_s": 2.0}, "speedup": 2.0,
            "ckpt_peak_over_model_mib": 10.0}
    hub = {"provenance": {**doc["provenance"], "measurement": "transformers hub"}, "bytes": 2 << 30,
           "repo": "org/llama", "runs": 1, "state_dicts_equal": True, "load_average": {"min": 0.1, "max": 0.2},
           "results": {"warm": mode, "cold": mode}}
    monkeypatch.setattr(report, "load", lambda name: hub if name == "transformers-hub-2GB" else None)
    text = report.FIGURES["transformers-hub"][1](hub)
    assert "2.00×" in text and "state dicts equal" in text and "Not measured yet" not in text


def test_every_result_names_its_measurement():
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        doc = json.loads(path.read_text())
        assert doc["provenance"]["measurement"] == suites.measurement_of(path.stem), path.name


# ---------------------------------------------- the checks fail when they should

def test_a_figure_typed_into_the_prose_is_found():
    readme = (ROOT / "README.md").read_text()
    assert MEASURED.findall(prose("README.md", readme.replace("## Benchmark", "Opens in 12 ms.\n## Benchmark")))
    page = (ROOT / "docs" / "DISTRIBUTED.md").read_text()
    assert MEASURED.findall(prose("docs/DISTRIBUTED.md", page.replace("## Measured", "Saves at 1.4x.\n## Measured")))
    page = (ROOT / "docs" / "FORMATS.md").read_text()
    assert MEASURED.findall(prose("docs/FORMATS.md", page.replace("### The pickle", "Costs 25% more.\n### The pickle")))
    page = (ROOT / "bench" / "README.md").read_text()
    assert MEASURED.findall(prose("bench/README.md", page.replace("<!-- bench:begin -->", "Loads at 3 GB/s.\n<!-- bench:begin -->")))


def test_a_figure_without_its_result_is_an_error(monkeypatch):
    with pytest.raises(KeyError):
        report.render_figures("<!-- fig:nothing -->1 ms<!-- /fig -->", report.figures())
    real = report.load

    def without_open(name):
        doc = copy.deepcopy(real(name))
        if name == "open":
            del doc["results"]["ckpt"]
        return doc
    monkeypatch.setattr(report, "load", without_open)
    with pytest.raises(KeyError):
        report.figures()


def git(repo, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository whose measurement "t" measures src/ but src/other.c."""
    r = tmp_path / "repo"
    (r / "src").mkdir(parents=True)
    (r / "docs").mkdir()
    (r / "src" / "engine.c").write_text("int engine;\n")
    (r / "src" / "other.c").write_text("int other;\n")
    (r / "docs" / "x.md").write_text("x\n")
    git(r, "init", "-q")
    git(r, "add", ".")
    git(r, "commit", "-qm", "one")
    monkeypatch.setattr(suites, "MEASUREMENTS",
                        {"t": suites.Measurement(["t"], [["src/", ":(exclude)src/other.c"]], "t")})
    return r


def result_of(repo):
    """A result recorded now in repo (as bench/run.py's save() records one)."""
    code = suites.MEASUREMENTS["t"].code
    return {"provenance": {"measurement": "t", "commit": git(repo, "rev-parse", "HEAD").strip(), "dirty": [],
                           "code": suites.code_digest(code, repo), "date": "2026-11-26T00:00:00Z"}}


def test_a_result_older_than_its_code_is_stale(repo):
    doc = result_of(repo)
    assert suites.freshness(doc, repo) == ("fresh", "")
    # files it does not measure change: still fresh
    (repo / "docs" / "x.md").write_text("y\n")
    (repo / "src" / "other.c").write_text("int other2;\n")
    git(repo, "commit", "-qam", "docs and another file")
    assert suites.freshness(doc, repo)[0] == "fresh"
    # its code changes, uncommitted then committed: stale, naming the file and the commit
    (repo / "src" / "engine.c").write_text("int engine2;\n")
    state, why = suites.freshness(doc, repo)
    assert state == "stale" and "src/engine.c" in why
    git(repo, "commit", "-qam", "faster engine")
    state, why = suites.freshness(doc, repo)
    assert state == "stale" and "src/engine.c" in why and "faster engine" in why
    # a new file under its paths counts too
    git(repo, "revert", "--no-edit", "HEAD")
    assert suites.freshness(doc, repo)[0] == "fresh"
    (repo / "src" / "new.c").write_text("int n;\n")
    assert suites.freshness(doc, repo)[0] == "stale"


def test_a_group_excludes_only_from_itself(repo, monkeypatch):
    monkeypatch.setitem(suites.MEASUREMENTS, "t", suites.Measurement(
        ["t"], [["src/", ":(exclude)src/other.c"], ["src/other.c"]], "t"))
    doc = result_of(repo)
    (repo / "src" / "other.c").write_text("int other2;\n")
    state, why = suites.freshness(doc, repo)
    assert state == "stale" and "src/other.c" in why


def test_freshness_in_a_shallow_clone(repo, tmp_path):
    doc = result_of(repo)
    (repo / "src" / "engine.c").write_text("int engine2;\n")
    git(repo, "commit", "-qam", "faster engine")
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    # the result's commit is not in the clone: still stale, by content
    state, why = suites.freshness(doc, shallow)
    assert state == "stale" and "does not hold" in why
    # and a result of the clone's own commit is fresh there
    assert suites.freshness(result_of(shallow), shallow)[0] == "fresh"


def test_a_result_without_a_digest_is_stale(repo, tmp_path):
    assert suites.freshness({"provenance": {"measurement": "t"}}, repo)[0] == "stale"
    assert suites.freshness({}, repo)[0] == "stale"
    assert suites.freshness(result_of(repo), tmp_path)[0] == "unknown"  # not a checkout


def test_a_stale_result_must_be_rerun_or_listed(repo):
    fresh = result_of(repo)
    (repo / "src" / "engine.c").write_text("int engine2;\n")
    stale = copy.deepcopy(fresh)
    stale["provenance"]["code"] = "0" * 64
    assert freshness_problems({"t": result_of(repo)}, {}, repo) == ([], [])
    problems, _ = freshness_problems({"t": stale}, {}, repo)
    assert len(problems) == 1 and "rerun" in problems[0]
    assert freshness_problems({"t": stale}, {"t": "why"}, repo) == ([], [])
    problems, _ = freshness_problems({"t": result_of(repo)}, {"t": "why"}, repo)
    assert len(problems) == 1 and "remove" in problems[0]
    problems, _ = freshness_problems({}, {"t": "why"}, repo)
    assert len(problems) == 1 and "nothing renders" in problems[0]


def test_two_results_of_one_measure_contradict():
    older = {"provenance": {"date": "2026-11-22T08:13:43Z"},
             "results": {"warm": {"ckpt.load (engine, copies)": {"median": 3.09, "measure": "ckpt.load | f | warm"}}}}
    newer = {"provenance": {"date": "2026-11-23T19:35:24Z"},
             "results": {"load": {"warm": {"ckpt.load(copy=True)": {"median": 1.2, "measure": "ckpt.load | f | warm"}}}}}
    both = {"python-2GB": older, "perf": newer}
    problems = contradictions(both, set(both))
    assert len(problems) == 1
    assert "python-2GB.json (2026-11-22T08:13:43Z) is contradicted by the newer bench/results/perf.json" in problems[0]
    assert len(contradictions(both, {"python-2GB"})) == 1  # a newer result not rendered still contradicts
    assert contradictions(both, {"perf"}) == []  # the newest is the one shown
    assert contradictions({"python-2GB": older}, {"python-2GB"}) == []
