"""pytest configuration of kiln's Python suite.

``--kiln-min-tests=N`` makes a collection of fewer than N tests an error, so that a suite that
silently collects nothing (a wrong path, an import-time skip) cannot pass under ctest.
"""

import pytest


def pytest_addoption(parser):
    parser.addoption("--kiln-min-tests", type=int, default=0,
                     help="fail when fewer tests than this are collected")


def pytest_collection_finish(session):
    minimum = session.config.getoption("--kiln-min-tests")
    if len(session.items) < minimum:
        raise pytest.UsageError(
            f"kiln: collected {len(session.items)} tests, fewer than --kiln-min-tests={minimum}")
