"""The GPU run's pytest hooks: --tests-json writes each test's outcome as
one JSON line (run.sh's tests.json).  Only tests/gpu/test_gpu.py uses
this (run.sh stops conftest lookup here, --confcutdir)."""
import json


def pytest_addoption(parser):
    parser.addoption("--tests-json", default=None, help="write each test's outcome to this file, one JSON line each")


_outcomes = []


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        entry = {"test": report.nodeid.split("::", 1)[-1], "when": report.when, "outcome": report.outcome,
                 "seconds": round(report.duration, 3)}
        if report.outcome != "passed":
            entry["detail"] = str(report.longrepr)[-2000:]
        _outcomes.append(entry)


def pytest_sessionfinish(session):
    path = session.config.getoption("--tests-json")
    if path:
        with open(path, "w") as f:
            for entry in _outcomes:
                f.write(json.dumps(entry) + "\n")
