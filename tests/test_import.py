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


def test_import_leaves_first_use_modules_unloaded():
    # What `import pdtp` once paid for and no import-time code needs (about 30 ms of the
    # 70-80 ms it cost): the transfer map's dataclasses, importlib.resources (pathlib,
    # tempfile ...) for one JSON table, difflib for an error's suggestion.
    code = (
        "import sys, pdtp; "
        "late = ('pdtp.transfer', 'importlib.resources', 'pathlib', 'difflib', 'json'); "
        "print(','.join(m for m in late if m in sys.modules)); "
        "print(pdtp.transfer_map(2, 4, kv_heads=8, connector='nixl').prefill_tp)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["", "2"]


def test_lazy_attributes_resolve():
    import pdtp

    assert "check" in dir(pdtp)
    try:
        pdtp.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_no_submodule_shadows_a_public_name():
    # Importing a submodule sets it as an attribute of the package; a submodule named like a
    # public function (pdtp.solve, pdtp.check ...) would replace that function for the rest
    # of the process. Import every submodule, then every public name must still be itself.
    code = (
        "import importlib, pkgutil, types, pdtp\n"
        "for m in pkgutil.iter_modules(pdtp.__path__):\n"
        "    if m.name != '__main__':\n"
        "        importlib.import_module('pdtp.' + m.name)\n"
        "bad = [n for n in pdtp.__all__ if isinstance(getattr(pdtp, n), types.ModuleType)]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
