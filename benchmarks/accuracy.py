"""Accuracy of pdtp's performance model against measured serving, out of sample.

    python benchmarks/accuracy.py [--quick] [--json PATH]

Data: every row of ``tests/data/reference/measured-serving.csv`` (619 InferenceMAX runs) and
``perf-points.csv`` (101 aiconfigurator / vendor points). Each row's TPOT, mean TTFT and
output throughput are compared with :func:`pdtp.predict_serving`'s (through
:func:`pdtp.calibration.predict_points`), as absolute relative errors, median and p90, AMD and
NVIDIA apart. Every setting but the last predicts a row with constants fitted
(:func:`pdtp.calibration.fit_table`) on other rows only:

- **leave one model out**: fit on every other model's rows, predict this model's;
- **leave one GPU type out**: fit on every other GPU type's rows; the held-out type takes its
  generation's (MI325X ↔ MI300X, H200 ↔ H100) or its vendor's shared constants;
- **leave one (model, GPU) out**: fit on everything but this model on this GPU type;
- **calibrate on 5**: per (model, GPU, dtype, engine) family, start from the constants fitted
  without the family, :func:`pdtp.calibrate` on 5 of its rows, predict the rest;
- **in sample**: the shipped defaults (fitted on all rows), for reference only.

The **v1** column is the model before v2 with its shipped defaults (``accuracy_v1.py``,
stored in ``accuracy_v1.json``): out of sample on measured-serving.csv, in sample on
perf-points.csv. ``--quick`` runs one held-out GPU type and one held-out (model, GPU) family
with a shorter search (what the test suite checks).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pdtp.calibration import (
    DEFAULT_FIT,
    KINDS,
    PerfPoint,
    Table,
    calibrate,
    fit_table,
    load_points,
    predict_points,
    summarize,
)

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "reference"
FILES = ("measured-serving.csv", "perf-points.csv")
V1 = Path(__file__).resolve().parent / "accuracy_v1.json"
KIND_LABELS = {"tpot_ms": "TPOT", "ttft_ms": "TTFT", "output_tokens_per_s": "throughput"}
VENDORS = ("AMD", "NVIDIA")
SETTINGS = ("model", "gpu", "model_gpu", "calibrate5", "in_sample")
SETTING_LABELS = {
    "v1": "v1 defaults",
    "model": "leave model out",
    "gpu": "leave GPU type out",
    "model_gpu": "leave (model, GPU) out",
    "calibrate5": "calibrate on 5",
    "in_sample": "in sample",
}
#: The issue's targets: (kind, statistic, bound), out of sample, on AMD and on NVIDIA.
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("tpot_ms", "median", 0.08),
    ("tpot_ms", "p90", 0.20),
    ("ttft_ms", "median", 0.15),
    ("output_tokens_per_s", "median", 0.08),
)
CALIBRATE_TARGET = 0.05


def load_all() -> list[PerfPoint]:
    points: list[PerfPoint] = []
    for name in FILES:
        points += load_points(REFERENCE / name)
    return points


Predictions = list[dict[str, float]]


def _with(table: Table) -> Callable[[PerfPoint], Any]:
    return lambda p: table.constants(p.gpu, p.engine)


def held_out(
    points: Sequence[PerfPoint],
    key: Callable[[PerfPoint], str],
    *,
    only: Sequence[str] | None = None,
    max_iterations: int = 100,
) -> tuple[Predictions, dict[str, Table]]:
    """Predict every row (of the groups in ``only``) from a table fitted without its group."""
    preds: Predictions = [{} for _ in points]
    tables: dict[str, Table] = {}
    groups = sorted({key(p) for p in points}) if only is None else list(only)
    for group in groups:
        train = [p for p in points if key(p) != group]
        test = [i for i, p in enumerate(points) if key(p) == group]
        table = fit_table(train, max_iterations=max_iterations)
        tables[group] = table
        for i, pr in zip(test, predict_points([points[i] for i in test], _with(table))):
            preds[i] = pr
    return preds, tables


def _family(p: PerfPoint) -> str:
    return f"{p.model.name}/{p.model.weight_dtype}/{p.gpu.name}/{p.engine}"


def _model_gpu(p: PerfPoint) -> str:
    return f"{p.model.name}/{p.gpu.name}"


def calibrated_on_five(
    points: Sequence[PerfPoint],
    tables: dict[str, Table],
    *,
    min_rows: int = 10,
    fit: Sequence[str] = DEFAULT_FIT,
) -> Predictions:
    """Per family with at least ``min_rows`` rows: start from the table fitted without this
    (model, GPU), calibrate on 5 rows spread over the family (sorted by tp, lengths and
    concurrency, evenly spaced), predict the rest."""
    preds: Predictions = [{} for _ in points]
    families: dict[str, list[int]] = {}
    for i, p in enumerate(points):
        if p.concurrency is not None:
            families.setdefault(_family(p), []).append(i)
    for members in families.values():
        if len(members) < min_rows:
            continue
        table = tables.get(_model_gpu(points[members[0]]))
        if table is None:
            continue
        ordered = sorted(
            members,
            key=lambda i: (points[i].tp, points[i].isl, points[i].osl, points[i].concurrency),
        )
        step = (len(ordered) - 1) / 4
        chosen = {ordered[round(k * step)] for k in range(5)}
        first = points[ordered[0]]
        base = table.constants(first.gpu, first.engine)
        fitted = calibrate([points[i] for i in sorted(chosen)], base=base, fit=fit, time_limit_s=60)
        rest = [i for i in members if i not in chosen]
        for i, pr in zip(rest, predict_points([points[i] for i in rest], fitted)):
            preds[i] = pr
    return preds


def summaries(points: Sequence[PerfPoint], preds: Predictions) -> dict[str, dict[str, Any]]:
    """Per ``kind/vendor``: n, median and p90 of the absolute relative errors."""
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        for vendor in VENDORS:
            errors = []
            for p, pr in zip(points, preds):
                if p.gpu.vendor != vendor or getattr(p, kind) is None or kind not in pr:
                    continue
                v = pr[kind]
                errors.append(abs(v / p.measured(kind) - 1.0) if math.isfinite(v) else math.inf)
            if errors:
                out[f"{kind}/{vendor}"] = summarize(errors)
    return out


def run(*, quick: bool = False) -> dict[str, Any]:
    """The whole report as a JSON-ready dict."""
    started = time.monotonic()
    points = load_all()
    result: dict[str, Any] = {"rows": len(points), "quick": quick, "settings": {}}
    iters = 25 if quick else 100
    if quick:
        gpu_preds, _ = held_out(points, lambda p: p.gpu.name, only=["mi325x"], max_iterations=iters)
        pair_preds, _ = held_out(
            points, _model_gpu, only=["llama-3.3-70b/h200"], max_iterations=iters
        )
        result["settings"]["gpu"] = summaries(points, gpu_preds)
        result["settings"]["model_gpu"] = summaries(points, pair_preds)
    else:
        model_preds, _ = held_out(points, lambda p: p.model.name)
        gpu_preds, _ = held_out(points, lambda p: p.gpu.name)
        pair_preds, pair_tables = held_out(points, _model_gpu)
        five = calibrated_on_five(points, pair_tables)
        full = fit_table(points)
        result["settings"]["model"] = summaries(points, model_preds)
        result["settings"]["gpu"] = summaries(points, gpu_preds)
        result["settings"]["model_gpu"] = summaries(points, pair_preds)
        result["settings"]["calibrate5"] = summaries(points, five)
        result["settings"]["in_sample"] = summaries(points, predict_points(points, _with(full)))
    if V1.is_file():
        v1 = json.loads(V1.read_text())
        result["settings"]["v1"] = v1["measured-serving.csv"]
    result["targets"] = _targets(result["settings"])
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def _targets(settings: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for setting in ("model", "gpu", "model_gpu"):
        table = settings.get(setting)
        if not table:
            continue
        for kind, stat, bound in TARGETS:
            for vendor in VENDORS:
                s = table.get(f"{kind}/{vendor}")
                if s:
                    out.append(
                        {
                            "setting": setting,
                            "kind": kind,
                            "vendor": vendor,
                            "statistic": stat,
                            "bound": bound,
                            "value": s[stat],
                            "met": bool(s[stat] <= bound),
                        }
                    )
    five = settings.get("calibrate5")
    if five:
        for kind in KINDS:
            for vendor in VENDORS:
                s = five.get(f"{kind}/{vendor}")
                if s:
                    out.append(
                        {
                            "setting": "calibrate5",
                            "kind": kind,
                            "vendor": vendor,
                            "statistic": "median",
                            "bound": CALIBRATE_TARGET,
                            "value": s["median"],
                            "met": bool(s["median"] <= CALIBRATE_TARGET),
                        }
                    )
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def render_markdown(result: dict[str, Any]) -> str:
    settings = result["settings"]
    order = [s for s in ("v1", *SETTINGS) if s in settings]
    lines = [
        "Absolute relative error, median / p90 (out of sample but for 'in sample'):",
        "",
        "| quantity | GPUs | n | " + " | ".join(SETTING_LABELS[s] for s in order) + " |",
        "|---|---|---:|" + "---:|" * len(order),
    ]
    for kind in KINDS:
        for vendor in VENDORS:
            key = f"{kind}/{vendor}"
            ns = [settings[s][key]["n"] for s in order if s != "v1" and key in settings[s]]
            if not ns:
                continue
            cells = []
            for s in order:
                v = settings[s].get(key)
                cells.append(f"{_pct(v['median'])} / {_pct(v['p90'])}" if v else "–")
            lines.append(
                f"| {KIND_LABELS[kind]} | {vendor} | {max(ns)} | " + " | ".join(cells) + " |"
            )
    lines += ["", "Targets:", ""]
    for t in result["targets"]:
        mark = "met" if t["met"] else "NOT met"
        lines.append(
            f"- {SETTING_LABELS[t['setting']]}, {KIND_LABELS[t['kind']]} {t['vendor']} "
            f"{t['statistic']}: {_pct(t['value'])} (≤ {_pct(t['bound'])}) — {mark}"
        )
    return "\n".join(lines) + "\n"


def json_ready(x: Any) -> Any:
    """``x`` with non-finite floats as None (JSON has no NaN), for ``--json`` reports."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_ready(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_ready(v) for v in x]
    return x


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", "--fast", action="store_true", help="the test suite's (and CI's) small run"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    result = run(quick=args.quick)
    sys.stdout.write(render_markdown(result))
    print(f"\n({result['rows']} rows, {result['seconds']} s)")
    if args.json is not None:
        args.json.write_text(json.dumps(json_ready(result), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
