"""needs_fix(FIX): a test that main did not pass when it was written, waiting
for the fix named FIX (a helper's branch of issue 26).  With
CKPT_HOSTILE_XFAIL=1 such tests are expected to fail (xfail, strict: one that
passes is reported); without it, as by default, they run as any other test
and must pass."""
import os

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_fix(fix): fails until the named fix of issue 26 is merged "
                                       "(xfail, strict, while CKPT_HOSTILE_XFAIL=1)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("CKPT_HOSTILE_XFAIL") != "1":
        return
    for item in items:
        mark = item.get_closest_marker("needs_fix")
        if mark:
            fix = mark.args[0] if mark.args else "?"
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"waits for the {fix!r} fix (issue 26)"))
