"""Shared test fixtures. Tests never touch the network: reference data is vendored in
``tests/data/reference`` (see its README for each file's source)."""

from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import sys
import tempfile
import time

import pytest
from hypothesis import settings

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent
# `spec_rules` (the plain-Python restatement of the spec) is imported by several tests.
sys.path.insert(0, str(TESTS))


# Hypothesis: `.ci/run` selects the "ci" profile (`--hypothesis-profile=ci`): derandomized,
# so CI runs the same examples every time (a random run once found a hang and stalled CI for
# 15 minutes: size_for with a demand of ~1e30, now fixed and reproduced in test_hostile.py), and
# no example database (a fresh machine has none to replay).
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)

# Tests never touch the network: the optional Hugging Face lookup (pdtp.hub) reads only an
# empty cache of this session's own unless a test installs a fake hub.
os.environ["HF_HUB_OFFLINE"] = "1"
# Removed when the run ends (xdist workers and subprocess CLIs inherit it and end first).
_HF_HOME = tempfile.mkdtemp(prefix="pdtp-test-hf-")
os.environ["HF_HOME"] = _HF_HOME
atexit.register(shutil.rmtree, _HF_HOME, ignore_errors=True)

DATA = TESTS / "data"
REFERENCE = DATA / "reference"


@pytest.fixture(scope="session")
def reference_dir() -> pathlib.Path:
    return REFERENCE


# ---- CI refuses silent skips ------------------------------------------------------------------
# `.ci/run` sets PDTP_FORBID_SKIPS=1: a skipped test there fails the run, unless its reason
# starts with "unmeetable:" (something a fresh CI machine cannot provide, stated in the reason).
_SKIPPED: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
        if not reason.removeprefix("Skipped: ").startswith("unmeetable:"):
            _SKIPPED.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _SKIPPED and os.environ.get("PDTP_FORBID_SKIPS"):
        print("\nskipped tests are failures in CI (PDTP_FORBID_SKIPS=1):", file=sys.stderr)
        for line in _SKIPPED:
            print(f"  {line}", file=sys.stderr)
        session.exitstatus = 1


class HangGuard:
    """A bound on the polls of a test that waits for a started process to come up. Nothing
    here measures speed: on a busy machine the polls simply take longer. It only stops a test
    that would otherwise wait forever, saying what never happened."""

    def __init__(self, polls: int, interval_s: float) -> None:
        self.polls, self.left, self.interval_s = polls, polls, interval_s

    def tick(self, what: str) -> None:
        self.left -= 1
        if self.left < 0:
            pytest.fail(f"{what} (still waiting after {self.polls} polls: hang guard)")
        time.sleep(self.interval_s)
