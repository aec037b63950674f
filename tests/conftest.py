"""Shared test fixtures. Tests never touch the network: reference data comes from the
``shared/`` folder that sits beside the repository (as CI lays it out)."""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent
# `spec_rules` (the plain-Python restatement of the spec) is imported by several tests.
sys.path.insert(0, str(TESTS))


def _find_shared() -> pathlib.Path:
    for candidate in (REPO.parent / "shared", REPO / "shared"):
        if (candidate / "reference").is_dir():
            return candidate
    return REPO.parent / "shared"


SHARED = _find_shared()
REFERENCE = SHARED / "reference"


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    if not REFERENCE.is_dir():
        # CI always lays shared/ beside the clone: there, a missing folder is a failure.
        if os.environ.get("CI"):
            pytest.fail(f"reference data not found at {REFERENCE}")
        pytest.skip(f"reference data not found at {REFERENCE}")
    return SHARED


@pytest.fixture(scope="session")
def reference_dir(shared_dir: pathlib.Path) -> pathlib.Path:
    return shared_dir / "reference"
