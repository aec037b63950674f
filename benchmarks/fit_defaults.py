"""Fit pdtp's default efficiency constants (``python/pdtp/data/perf_constants.json``).

    python benchmarks/fit_defaults.py [--check]

Fits one table over all measured rows in ``tests/data/reference`` (``measured-serving.csv``:
InferenceMAX aggregated-serving runs on MI300X/MI325X/MI355X/H100/H200/B200;
``perf-points.csv``: aiconfigurator silicon samples, vendor posts; the InferenceX aggregated
runs pdtp can express, as ``benchmarks/accuracy.py`` loads them) with
:func:`pdtp.calibration.fit_table` and writes, for every catalog GPU type, its vLLM constants,
its SGLang differences and where they come from, and per engine release range (from the
rows' ``engine_image``) the factors on the constants a release moves. GPU types without rows
take their generation's constants (GB200 from B200) or their vendor's shared values.

``--check`` fits and compares with the file instead of writing (exit 1 when they differ by
more than 1%): the file is reproducible from the data and this script.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from pdtp.calibration import MIN_RELEASE_ROWS, TABLE_LEVELS, fit_table
from pdtp.catalog import gpus
from pdtp.constants import ENGINES, GENERIC, RELEASE_CONSTANTS

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "reference"
OUT = ROOT / "python" / "pdtp" / "data" / "perf_constants.json"
FILES = ("measured-serving.csv", "perf-points.csv", "measured-serving-inferencex-agg.csv")


def _round(v: float) -> float:
    return float(f"{v:.4g}")


def build() -> dict[str, Any]:
    # Every aggregated row the accuracy benchmark scores (its loader's filter: what pdtp can
    # express), so the InferenceX runs' engine releases get their factors.
    from accuracy import load_all

    points = load_all()
    table = fit_table(points)
    rows = Counter((p.gpu.name, p.engine) for p in points)
    by_file: dict[str, Counter[str]] = {
        name: Counter(p.gpu.name for p in points if p.label("file") == name) for name in FILES
    }
    release_rows = Counter((p.engine, p.engine_release) for p in points if p.engine_release)
    out: dict[str, Any] = {
        "about": (
            "pdtp's default efficiency constants of the performance model (src/perf), per GPU "
            "type and serving engine. Written by `python benchmarks/fit_defaults.py` (do not "
            "edit by hand): one robust fit over all rows of tests/data/reference/"
            "measured-serving.csv, perf-points.csv and the expressible InferenceX aggregated "
            "runs, per-GPU constants shrunk towards their "
            "vendor's shared value (the all-reduce latency and the HBM efficiency towards "
            "each vendor's physical anchor, pdtp.calibration.ANCHORS). 'vllm' holds every "
            "fitted constant; 'sglang' the ones that differ for SGLang (its separate prefill "
            "batches run on the same step model)."
        ),
        "fitted": {
            "date": datetime.date.today().isoformat(),
            "command": "python benchmarks/fit_defaults.py",
            "rows": {name: sum(by_file[name].values()) for name in FILES},
            "levels": TABLE_LEVELS,
            "complete": table.complete,
        },
        "gpus": {},
        "releases": {
            "about": (
                "Per engine release range (from a row's engine_image), factors on "
                "RELEASE_CONSTANTS: a range runs from one release with at least "
                f"{MIN_RELEASE_ROWS} measured rows to the next; older or unrecorded releases "
                "take the baseline (the InferenceMAX runs of Oct-Nov 2025 record none)."
            ),
        },
    }
    for engine in ENGINES:
        measured = table.releases(engine)
        if not measured:
            continue
        out["releases"][engine] = {
            r: {
                "rows": release_rows[(engine, r)],
                **{
                    name: _round(table.values[(name, f"@{engine}/{r}")])
                    for name in RELEASE_CONSTANTS
                    if (name, f"@{engine}/{r}") in table.values
                },
            }
            for r in measured
        }
    for g in gpus():
        vllm = table.constants(g, "vllm").to_dict()
        sglang = table.constants(g, "sglang").to_dict()
        fitted = {k: _round(v) for k, v in vllm.items() if k in TABLE_LEVELS}
        diff = {
            k: _round(v)
            for k, v in sglang.items()
            if k in TABLE_LEVELS and not math.isclose(v, vllm[k], rel_tol=1e-9)
        }
        counts = ", ".join(f"{by_file[f][g.name]} rows of {f}" for f in FILES if by_file[f][g.name])
        engines = ", ".join(f"{e} {n}" for (gn, e), n in sorted(rows.items()) if gn == g.name)
        source = table.source(g)
        if counts:
            source = f"{source}: {counts} ({engines})"
        out["gpus"][g.name] = {"source": source, "vllm": fitted, "sglang": diff}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--fast", action="store_true", help="CI's run: --check (writes nothing)")
    args = parser.parse_args(argv)
    args.check = args.check or args.fast
    data = build()
    if args.check:
        old = json.loads(OUT.read_text())
        bad = []
        for gpu, entry in data["gpus"].items():
            for engine in ("vllm", "sglang"):
                for k, v in entry[engine].items():
                    was = old["gpus"].get(gpu, {}).get(engine, {}).get(k)
                    if was is None or not math.isclose(v, was, rel_tol=0.01):
                        bad.append(f"{gpu}/{engine}/{k}: file {was}, fit {v}")
        for engine, ranges in data["releases"].items():
            if engine == "about":
                continue
            for r, factors in ranges.items():
                for k, v in factors.items():
                    was = old.get("releases", {}).get(engine, {}).get(r, {}).get(k)
                    if was is None or not math.isclose(v, was, rel_tol=0.01):
                        bad.append(f"releases/{engine}/{r}/{k}: file {was}, fit {v}")
        print("\n".join(bad) or "perf_constants.json matches the fit")
        return 1 if bad else 0
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    unused = set(GENERIC.to_dict()) - set(TABLE_LEVELS)
    print(f"not fitted (generic values): {', '.join(sorted(unused))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
