"""Accuracy of pdtp's performance model against measured serving points.

    python benchmarks/accuracy.py [--reference PATH] [--json PATH]

For each measurement kind (TPOT, TTFT, throughput) and GPU group (NVIDIA rows; AMD rows by
GPU type, e.g. MI300X) it prints n, the median and the p90 of the absolute relative error

- with the default constants (``pdtp.constants.DEFAULTS``, per GPU type);
- calibrated out of sample: the group's rows are split in two halves (sorted by a stable key,
  alternate rows), ``pdtp.calibrate`` fits on one half and predicts the other, then the
  halves swap (2-fold cross-validation), so every row is predicted by constants that never
  saw it;
- calibrated in sample: fitted on all the group's rows (what the model can reach at best).

Predictions come from :func:`pdtp.calibration.predict_point`, the same functions the fit uses.
The default constants of H100/H200 and MI300X were themselves fitted to this file (see
``pdtp/constants.py``), so the defaults column is in sample too; the 2-fold column is the
honest estimate of what calibrating on one's own measurements buys. Groups are per vendor, not
per GPU type: the NVIDIA rows are H100 but for one H200 row, which a per-GPU split could
neither fit nor test on its own.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pdtp.calibration import (
    KINDS,
    PerfPoint,
    PointError,
    calibrate,
    load_points,
    point_errors,
    summarize,
)
from pdtp.constants import Constants

DEFAULT_REFERENCE = (
    Path(__file__).resolve().parents[1] / "tests" / "data" / "reference" / "perf-points.csv"
)
KIND_LABELS = {"tpot_ms": "TPOT", "ttft_ms": "TTFT", "output_tokens_per_s": "throughput"}
SETTINGS = ("default", "calibrated_cv", "calibrated_in_sample")
SETTING_LABELS = {
    "default": "defaults",
    "calibrated_cv": "calibrated (2-fold, out of sample)",
    "calibrated_in_sample": "calibrated (in sample)",
}
# The goals: (kind, group, setting, bound on the median).
GOALS: tuple[tuple[str, str, str, float], ...] = (
    ("tpot_ms", "NVIDIA", "default", 0.15),
    ("tpot_ms", "NVIDIA", "calibrated_cv", 0.10),
    ("output_tokens_per_s", "MI300X", "default", 0.25),
    ("output_tokens_per_s", "MI300X", "calibrated_cv", 0.25),
)


def group_of(point: PerfPoint) -> str:
    """NVIDIA rows form one group (one software stack); AMD rows are grouped per GPU type."""
    return "NVIDIA" if point.gpu.vendor == "NVIDIA" else point.gpu.name.upper()


def _sort_key(p: PerfPoint) -> tuple[Any, ...]:
    return (
        p.gpu.name,
        p.model.name,
        p.model.weight_dtype,
        p.tp,
        p.isl,
        p.osl,
        p.concurrency or 0,
        p.row,
    )


def split_halves(points: Sequence[PerfPoint]) -> tuple[list[PerfPoint], list[PerfPoint]]:
    """A deterministic split: sort by (GPU, model, dtype, tp, isl, osl, concurrency, row) and
    alternate, so each half spans every configuration family."""
    ordered = sorted(points, key=_sort_key)
    return ordered[0::2], ordered[1::2]


def _summaries(errors: Sequence[PointError]) -> dict[str, dict[str, float]]:
    return {k: summarize([e.rel_error for e in errors if e.kind == k]) for k in KINDS}


def evaluate_group(points: Sequence[PerfPoint]) -> dict[str, Any]:
    """Errors of one group's rows under the three settings, and the constants fitted."""
    default_errors = point_errors(points)
    first, second = split_halves(points)
    cv_errors: list[PointError] = []
    folds: list[dict[str, float]] = []
    for train, test in ((first, second), (second, first)):
        if not train or not test:
            continue  # a one-row group has nothing to cross-validate
        fitted = calibrate(train)
        folds.append(_fitted(fitted))
        cv_errors.extend(point_errors(test, fitted))
    in_sample = calibrate(points)
    return {
        "rows": len(points),
        "default": _summaries(default_errors),
        "calibrated_cv": _summaries(cv_errors),
        "calibrated_in_sample": _summaries(point_errors(points, in_sample)),
        "constants_in_sample": _fitted(in_sample),
        "constants_folds": folds,
    }


def _fitted(c: Constants) -> dict[str, float]:
    from pdtp.calibration import DEFAULT_FIT

    return {k: float(getattr(c, k)) for k in DEFAULT_FIT}


def run(reference: Path | str = DEFAULT_REFERENCE) -> dict[str, Any]:
    """The whole report as a JSON-ready dict."""
    points = load_points(reference)
    groups: dict[str, list[PerfPoint]] = {}
    for p in points:
        groups.setdefault(group_of(p), []).append(p)
    # NVIDIA first, then the AMD types by name.
    order = sorted(groups, key=lambda g: (g != "NVIDIA", g))
    result: dict[str, Any] = {
        "reference": str(reference),
        "groups": {name: evaluate_group(groups[name]) for name in order},
    }
    result["goals"] = [_goal(result, *g) for g in GOALS if g[1] in result["groups"]]
    return result


def _goal(result: dict[str, Any], kind: str, group: str, setting: str, bound: float) -> Any:
    median = result["groups"][group][setting][kind]["median"]
    return {
        "kind": kind,
        "group": group,
        "setting": setting,
        "bound": bound,
        "median": median,
        "met": bool(median <= bound),
    }


def _pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{100 * x:.1f}%"


def render_markdown(result: dict[str, Any]) -> str:
    """The report as markdown: one table of errors, the goals, the fitted constants."""
    lines = [
        f"Accuracy against `{Path(result['reference']).name}` "
        "(absolute relative error; median / p90)",
        "",
        "| kind | group | n | " + " | ".join(SETTING_LABELS[s] for s in SETTINGS) + " |",
        "|---|---|---:|" + "---:|" * len(SETTINGS),
    ]
    for kind in KINDS:
        for group, data in result["groups"].items():
            n = data["default"][kind]["n"]
            if not n:
                continue
            cells = [
                f"{_pct(data[s][kind]['median'])} / {_pct(data[s][kind]['p90'])}" for s in SETTINGS
            ]
            lines.append(f"| {KIND_LABELS[kind]} | {group} | {n} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "defaults: `pdtp.constants.DEFAULTS` (fitted to this file, so in sample); 2-fold: "
        "fitted on one half of the group's rows, tested on the other, and swapped.",
        "",
        "Goals (median):",
        "",
    ]
    for g in result["goals"]:
        mark = "met" if g["met"] else "NOT met"
        lines.append(
            f"- {KIND_LABELS[g['kind']]} {g['group']} {SETTING_LABELS[g['setting']]}: "
            f"{_pct(g['median'])} ≤ {_pct(g['bound'])} — {mark}"
        )
    lines += ["", "Constants fitted in sample:", ""]
    for group, data in result["groups"].items():
        consts = ", ".join(f"{k}={_fmt(v)}" for k, v in data["constants_in_sample"].items())
        lines.append(f"- {group}: {consts}")
    return "\n".join(lines) + "\n"


def _json_ready(x: Any) -> Any:
    """NaN (a kind with no rows) is not JSON: write null."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _json_ready(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_ready(v) for v in x]
    return x


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    if not args.reference.is_file():
        print(f"reference points not found: {args.reference}", file=sys.stderr)
        return 2
    result = run(args.reference)
    sys.stdout.write(render_markdown(result))
    if args.json is not None:
        args.json.write_text(json.dumps(_json_ready(result), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
