"""A pytest plugin: with MINILLM_NO_SKIPS=1 in the environment, a run in which any test or test
module was skipped fails, naming each skip and its reason.

Skips are how the suite stays usable where an optional peer is missing (torch, llama.cpp,
Chromium, the data wheels, the real models' files); `.ci/run` installs every one of them and
sets MINILLM_NO_SKIPS=1, so that in CI a skip means a broken environment, not a pass.
conftest.py loads this plugin for every run; without the variable it does nothing.
"""
import os

import pytest


def pytest_configure(config):
    if os.environ.get("MINILLM_NO_SKIPS") == "1":
        config.pluginmanager.register(NoSkips(), "minillm-no-skips")


class NoSkips:
    """Records every skip of the run and turns a passing run with skips into a failing one."""

    def __init__(self):
        self.skips = []  # (node id, reason)

    def record(self, report):
        if report.skipped:
            longrepr = report.longrepr
            reason = longrepr[-1] if isinstance(longrepr, tuple) else longrepr
            self.skips.append((report.nodeid, str(reason)))

    def pytest_runtest_logreport(self, report):
        self.record(report)

    def pytest_collectreport(self, report):
        self.record(report)

    def pytest_sessionfinish(self, session, exitstatus):
        if self.skips and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if self.skips:
            terminalreporter.section("skipped under MINILLM_NO_SKIPS=1: the run fails", red=True)
            for nodeid, reason in self.skips:
                terminalreporter.line(f"{nodeid}: {reason}")
