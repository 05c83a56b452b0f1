"""pytest plugin for a mutant's test run (``-p sim.mutate.plugin``).

Sorts each failure: a test that fails while Amaranth elaborates the design
(a frame of amaranth/hdl/_ir.py on the stack, and not an assertion of the
test) means the mutant cannot be built ("stillborn"); any other failure is a
test noticing the mutant ("killed"), and the run stops there. A module that
fails to import is stillborn too. The verdicts go, as JSON, to the file named
by the MUTATE_RESULT environment variable."""

import json
import os
import sys

import pytest

_result = {"killed": [], "elab": [], "collect": [], "passed": 0}


def _elaboration_failure(excinfo):
    if excinfo is None or excinfo.errisinstance(AssertionError):
        return False
    return any("amaranth" in str(e.path) and str(e.path).endswith(os.path.join("hdl", "_ir.py"))
               for e in excinfo.traceback)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        first = str(call.excinfo.value).splitlines()[0][:200] if call.excinfo and str(
            call.excinfo.value) else (call.excinfo.typename if call.excinfo else "")
        entry = f"{item.nodeid}: {call.excinfo.typename if call.excinfo else ''} {first}"
        if _elaboration_failure(call.excinfo):
            _result["elab"].append(entry)
        else:
            _result["killed"].append(entry)
            item.session.shouldstop = "mutant killed"
    elif report.when == "call" and report.passed:
        _result["passed"] += 1


def pytest_collectreport(report):
    if report.failed:
        _result["collect"].append(f"{report.nodeid}: {str(report.longrepr)[-300:]}")


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("MUTATE_RESULT")
    hw = sys.modules.get("hw")
    _result["hw"] = getattr(hw, "__file__", None)
    if path:
        with open(path, "w") as f:
            json.dump(_result, f)
