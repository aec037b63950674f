"""Importing pdtp stays cheap: OR-Tools (about 0.7 s) and pandas load only when needed."""

from __future__ import annotations

import subprocess
import sys


def test_import_does_not_load_heavy_modules():
    code = (
        "import sys, pdtp; "
        "heavy = [m for m in ('ortools', 'pandas', 'numpy', 'google.protobuf') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_lazy_attributes_resolve():
    import pdtp

    assert "check" in dir(pdtp)
    try:
        pdtp.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")
