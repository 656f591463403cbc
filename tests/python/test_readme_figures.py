"""The README's measured figures come from bench/results/*.json only: the
benchmark tables and every figure in the prose are what bench/report.py
renders from the JSON, and no measured figure stands outside them."""
import copy
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import report  # noqa: E402

README = (ROOT / "README.md").read_text()
MEASURED = re.compile(r"\d[\d,]*(?:\.\d+)?\s?(?:ms|MiB|GiB|GB/s|×)")
# Sizes in the prose that are parameters or format facts, not measurements.
NOT_MEASURED = ["arrays over 1 GiB", "8 MiB or\n  more each"]


def prose(text):
    """The README without its generated table, code blocks, inline code
    and rendered figures."""
    text = text.split("<!-- bench:begin -->")[0] + text.split("<!-- bench:end -->")[1]
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    for fact in NOT_MEASURED:
        text = text.replace(fact, "")
    return report.FIG.sub("", text)


def test_bench_table_is_rendered_from_the_results():
    block = README.split("<!-- bench:begin -->\n", 1)[1].split("\n<!-- bench:end -->", 1)[0]
    assert block == report.table(report.load("open"), report.load("convert"), report.load("torch_read"),
                                 report.load("torch_convert")), "run bench/report.py"


def test_prose_figures_are_rendered_from_the_results():
    names = report.FIG.findall(README)
    assert {n for n, _ in names} >= {"convert-peak", "open", "load-into", "torch-read", "rust", "when-to-use"}
    assert report.render_figures(README, report.figures()) == README, "run bench/report.py"


def test_no_measured_figure_outside_the_rendered_ones():
    assert MEASURED.findall(prose(README)) == []


def test_the_checks_fail_when_a_figure_has_no_result(monkeypatch):
    # A figure typed into the prose is found ...
    assert MEASURED.findall(prose(README.replace("## Benchmarks", "Opens in 12 ms.\n## Benchmarks")))
    # ... a marker whose figure has no result is refused ...
    with pytest.raises(KeyError):
        report.render_figures("<!-- fig:nothing -->1 ms<!-- /fig -->", report.figures())
    # ... and a result the text needs, missing from the JSON, is an error.
    real = report.load

    def without_open(name):
        doc = copy.deepcopy(real(name))
        if name == "open":
            del doc["results"]["ckpt"]
        return doc
    monkeypatch.setattr(report, "load", without_open)
    with pytest.raises(KeyError):
        report.figures()
