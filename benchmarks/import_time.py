"""How long ``import pdtp`` takes in a fresh interpreter (issue 27's goal: <= 50 ms).

Each run is a new ``python -X importtime -c 'import pdtp'``; the figure is the cumulative time
``-X importtime`` reports for ``pdtp`` (its own modules and everything they import), median
over the runs. Two cases:

- **installed**: bytecode cached, as after ``pip install`` (which compiles the package) or
  any second import;
- **source**: ``PYTHONDONTWRITEBYTECODE`` set, so pdtp's modules are compiled from source on
  each import when its tree has no ``__pycache__`` (an editable install in an environment
  that sets the variable, as some CI images and sandboxes do).

It also lists the slowest of pdtp's own modules (self time, installed case) and checks that
``import pdtp`` loads none of OR-Tools, numpy, pandas or a web framework.

    python benchmarks/import_time.py            # 15 runs per case
    python benchmarks/import_time.py --fast     # 3 runs per case (CI: completes, prints)
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

HEAVY = ("ortools", "numpy", "pandas", "matplotlib", "fastapi", "starlette", "uvicorn")


def one_run(env: dict[str, str]) -> tuple[float, dict[str, float], set[str]]:
    """(pdtp's cumulative import ms, self ms per pdtp module, top-level modules loaded)."""
    code = "import sys, pdtp; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    total, own = 0.0, {}
    for line in out.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        self_us, cumulative_us, name = (p.strip() for p in line[12:].split("|"))
        if not self_us.isdigit():  # the header line
            continue
        if name == "pdtp":
            total = int(cumulative_us) / 1e3
        if name.startswith("pdtp"):
            own[name] = int(self_us) / 1e3
    return total, own, set(out.stdout.split())


def measure(runs: int, source: bool) -> tuple[list[float], dict[str, float], set[str]]:
    env = dict(os.environ)
    cache = pathlib.Path(tempfile.mkdtemp(prefix="pdtp-pycache-"))
    try:
        if source:
            # Bytecode neither written nor (for pdtp, whose tree then has no __pycache__)
            # read; the standard library keeps its own cached bytecode.
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env.pop("PYTHONPYCACHEPREFIX", None)
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(cache)  # a private cache, warmed by run 0
            one_run(env)
        times, own_all, loaded = [], {}, set()
        for _ in range(runs):
            t, own, mods = one_run(env)
            times.append(t)
            loaded |= mods
            for k, v in own.items():
                own_all.setdefault(k, []).append(v)
        return times, {k: statistics.median(v) for k, v in own_all.items()}, loaded
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="3 runs per case (CI)")
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    runs = 3 if args.fast else args.runs
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"import pdtp, {runs} fresh interpreters per case, load {load:.1f}")
    print(f"{'case':<10} {'p50 ms':>8} {'min ms':>8} {'max ms':>8}")
    own_installed: dict[str, float] = {}
    loaded: set[str] = set()
    for case, source in (("installed", False), ("source", True)):
        times, own, mods = measure(runs, source)
        loaded |= mods
        if not source:
            own_installed = own
        print(f"{case:<10} {statistics.median(times):>8.1f} {min(times):>8.1f} {max(times):>8.1f}")
    print("slowest own modules (self ms, installed):")
    for name, ms in sorted(own_installed.items(), key=lambda kv: -kv[1])[:6]:
        print(f"  {name:<24} {ms:6.1f}")
    heavy = sorted(loaded & set(HEAVY))
    print("heavy libraries loaded by import pdtp:", ", ".join(heavy) if heavy else "none")
    if heavy:
        sys.exit(f"import pdtp loaded {heavy}")


if __name__ == "__main__":
    main()
