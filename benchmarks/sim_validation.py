"""The simulator against measured serving, beside ``pdtp.predict_serving``, out of sample.

    python benchmarks/sim_validation.py [--quick] [--json PATH]

Rows: the vLLM runs of ``tests/data/reference/measured-serving.csv`` (412 of its 619; the
other 207 are DeepSeek-R1 under SGLang, whose scheduler — prefill batches that pause
decoding — the simulator does not model). Each is a closed loop of C clients sending 10 × C
requests with prompt and output lengths uniform in [0.8, 1.0] × nominal, on one aggregated
vLLM instance launched with the benchmark's flags (:func:`pdtp.calibration.inferencemax_launch`,
read through :func:`pdtp.calibration.load_points`, as ``benchmarks/accuracy.py`` reads them).

The simulator serves each row request by request (``pdtp.simulate(sim_config(...),
concurrency=C, requests=10*C, length_range=(0.8, 1.0))``); ``pdtp.predict_serving`` predicts
it (:func:`pdtp.calibration.predict_points`). Both are given the same constants for a row:

- **leave GPU type out**: :func:`pdtp.calibration.fit_table` on every row of both reference
  files except the held-out GPU type's; the held-out type takes its generation's or its
  vendor's constants (as in ``benchmarks/accuracy.py``);
- **leave (model, GPU) out**: fitted on everything but this model on this GPU type;
- **in sample**: fitted on every row (as the shipped defaults are), scored on the same rows,
  for reference only.

Those constants are fitted through ``predict_serving``: the analytic model gets its own fit,
the simulator a borrowed one. So a third column fits them **through the simulator**, on the
same training rows: :func:`fit_through_simulator` starts from the fold's table, and in each
of :data:`ROUNDS` rounds simulates every training vLLM row, takes the ratio of the simulated
to the analytic TTFT, TPOT and throughput at the current constants, and refits the table
(the same :func:`fit_table`, the same priors) to the measured values divided by those ratios
— i.e. it fits ``predict_serving × (simulator / predict_serving)`` = the simulator, the ratio
frozen within a round. The held-out rows are then simulated with the result: out of sample.

The table gives the absolute relative error of the mean TTFT and the mean TPOT, median / p90,
AMD and NVIDIA apart. ``--quick`` (the test suite's run) holds out one GPU type with a
shorter fit and one round.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pdtp
from pdtp.calibration import PerfPoint, Table, fit_table, load_points, predict_points, summarize

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy  # the sibling benchmark: its data files and folds

DEFAULT_REFERENCE = accuracy.REFERENCE / "measured-serving.csv"
KINDS = ("ttft_ms", "tpot_ms")
KIND_LABELS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT"}
METHODS = ("predict_serving", "simulator", "simulator_fitted")
METHOD_LABELS = {
    "predict_serving": "predict_serving",
    "simulator": "simulator, same constants",
    "simulator_fitted": "simulator, fitted through it",
}
#: Rounds of :func:`fit_through_simulator` (the third round changes the errors by < 0.2 pp).
ROUNDS = 2
MEASURED = ("ttft_ms", "tpot_ms", "output_tokens_per_s")
VENDORS = accuracy.VENDORS
SETTINGS = ("gpu", "model_gpu", "in_sample")
SETTING_LABELS = {
    "gpu": "leave GPU type out",
    "model_gpu": "leave (model, GPU) out",
    "in_sample": "in sample",
}
# What the benchmark client drew lengths from (InferenceMAX: --random-range-ratio 0.8).
LENGTH_RANGE = (0.8, 1.0)


def vllm_rows(reference: Path | str = DEFAULT_REFERENCE) -> list[tuple[dict[str, str], PerfPoint]]:
    """The closed-loop vLLM rows, each with its raw CSV row (the nominal lengths)."""
    with open(reference, newline="", encoding="utf-8") as f:
        raw = list(csv.DictReader(f))
    points = load_points(str(reference))
    return [
        (r, p)
        for r, p in zip(raw, points, strict=True)
        if p.engine == "vllm" and p.concurrency is not None
    ]


def simulate_row(row: dict[str, str], point: PerfPoint, constants: Any) -> dict[str, float]:
    """Simulate one measured run as it was run. The output lengths' mean is the run's
    (``implied_mean_osl`` where the file has it: some runs stopped early)."""
    assert point.concurrency is not None and point.num_prompts is not None
    cfg = pdtp.sim_config(
        point.model,
        gpu=point.gpu.name,
        tp=point.tp,
        gpu_memory_utilization=point.gpu_memory_utilization,
        max_num_seqs=point.max_num_seqs,
        max_num_batched_tokens=point.max_num_batched_tokens,
        constants=constants,
    )
    mean_share = sum(LENGTH_RANGE) / 2
    r = pdtp.simulate(
        cfg,
        concurrency=point.concurrency,
        requests=point.num_prompts,
        workload={"isl": int(row["isl"]), "osl": max(1, round(point.osl / mean_share))},
        length_range=LENGTH_RANGE,
    )
    return {
        "ttft_ms": r.ttft_ms.mean,
        "tpot_ms": r.tpot_ms.mean,
        "output_tokens_per_s": r.output_tokens_per_s,
    }


def fit_through_simulator(
    points: Sequence[PerfPoint],
    rows: Sequence[tuple[dict[str, str], PerfPoint]],
    table: Table,
    *,
    rounds: int = ROUNDS,
    max_iterations: int = 100,
) -> Table:
    """Refit ``table`` (fitted on ``points``) so that the simulator, not ``predict_serving``,
    matches the measurements of ``points``; ``rows`` are the simulated ones among them (the
    others keep the analytic model's predictions)."""
    for _ in range(rounds):
        ratio: dict[int, dict[str, float]] = {}
        for row, p in rows:
            c = table.constants(p.gpu, p.engine)
            sim, ana = simulate_row(row, p, c), predict_points([p], c)[0]
            ratio[id(p)] = {k: sim[k] / ana[k] for k in MEASURED}
        target = []
        for p in points:
            f = ratio.get(id(p))
            if f is None or not all(math.isfinite(v) and v > 0 for v in f.values()):
                target.append(p)
                continue
            changed = {k: getattr(p, k) / f[k] for k in MEASURED if getattr(p, k) is not None}
            target.append(dataclasses.replace(p, **changed))
        table = fit_table(target, max_iterations=max_iterations)
    return table


Errors = dict[str, dict[str, dict[str, list[float]]]]


def _empty() -> Errors:
    return {m: {v: {k: [] for k in KINDS} for v in VENDORS} for m in METHODS}


def _errors(
    rows: Sequence[tuple[dict[str, str], PerfPoint]], table: Table, fitted: Table
) -> Errors:
    """``{method: {vendor: {kind: [abs relative error per row]}}}``: ``table`` for
    predict_serving and the simulator, ``fitted`` (through the simulator) for the third."""
    out = _empty()
    for row, p in rows:
        c = table.constants(p.gpu, p.engine)
        preds = {
            "predict_serving": predict_points([p], c)[0],
            "simulator": simulate_row(row, p, c),
            "simulator_fitted": simulate_row(row, p, fitted.constants(p.gpu, p.engine)),
        }
        for method, pred in preds.items():
            for k in KINDS:
                v = pred[k]
                e = abs(v / p.measured(k) - 1.0) if math.isfinite(v) else math.inf
                out[method][p.gpu.vendor][k].append(e)
    return out


def _held_out(
    rows: Sequence[tuple[dict[str, str], PerfPoint]],
    everything: Sequence[PerfPoint],
    key: Callable[[PerfPoint], str],
    groups: Sequence[str] | None = None,
    *,
    max_iterations: int = 100,
    rounds: int = ROUNDS,
) -> Errors:
    """Errors of the rows of each held-out group (all groups, or ``groups``), with constants
    fitted without it (``key(point) == group`` marks a group's rows)."""
    wanted = sorted({key(p) for _, p in rows}) if groups is None else list(groups)
    merged = _empty()
    for group in wanted:
        train = [p for p in everything if key(p) != group]
        table = fit_table(train, max_iterations=max_iterations)
        fitted = fit_through_simulator(
            train,
            [(r, p) for r, p in rows if key(p) != group],
            table,
            rounds=rounds,
            max_iterations=max_iterations,
        )
        part = _errors([(r, p) for r, p in rows if key(p) == group], table, fitted)
        for m in METHODS:
            for v in VENDORS:
                for k in KINDS:
                    merged[m][v][k] += part[m][v][k]
    return merged


def _model_gpu(p: PerfPoint) -> str:
    return f"{p.model.name}/{p.gpu.name}"


def run(reference: Path | str = DEFAULT_REFERENCE, *, quick: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    rows = vllm_rows(reference)
    # The reference rows as load_all() parsed them (the same objects fit_table sees), so a
    # training row's simulation ratio finds its point.
    everything = accuracy.load_all()
    by_where = {(p.where, p.row): p for p in everything}
    rows = [(r, by_where[(p.where, p.row)]) for r, p in rows]
    raw: dict[str, Errors] = {}
    if quick:
        raw["gpu"] = _held_out(
            rows, everything, lambda p: p.gpu.name, ["mi325x"], max_iterations=25, rounds=1
        )
    else:
        raw["gpu"] = _held_out(rows, everything, lambda p: p.gpu.name)
        raw["model_gpu"] = _held_out(rows, everything, _model_gpu)
        # In sample: the analytic fit on every row (as the shipped defaults) and the same fit
        # through the simulator, both scored on the rows they were fitted on.
        table = fit_table(everything)
        raw["in_sample"] = _errors(rows, table, fit_through_simulator(everything, rows, table))
    settings = {
        s: {
            m: {f"{k}/{v}": summarize(raw[s][m][v][k]) for k in KINDS for v in VENDORS}
            for m in METHODS
        }
        for s in SETTINGS
        if s in raw
    }
    return {
        "reference": str(reference),
        "rows": len(rows),
        "quick": quick,
        "settings": settings,
        "seconds": round(time.monotonic() - started, 1),
    }


def _pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{100 * x:.1f}%"


def render_markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Simulator and predict_serving vs {Path(result['reference']).name}: the "
        f"{result['rows']} vLLM runs, the same constants for both (absolute relative error, "
        "median / p90)",
        "",
        "| constants | GPUs | n | "
        + " | ".join(f"{KIND_LABELS[k]}: {METHOD_LABELS[m]}" for k in KINDS for m in METHODS)
        + " |",
        "|---|---|---:|" + "---:|" * (len(KINDS) * len(METHODS)),
    ]
    for s, data in result["settings"].items():
        for v in VENDORS:
            n = data["predict_serving"][f"ttft_ms/{v}"]["n"]
            if not n:
                continue
            cells = []
            for k in KINDS:
                for m in METHODS:
                    e = data[m][f"{k}/{v}"]
                    cells.append(f"{_pct(e['median'])} / {_pct(e['p90'])}")
            lines.append(f"| {SETTING_LABELS[s]} | {v} | {n} | " + " | ".join(cells) + " |")
    lines += ["", f"({result['seconds']} s)"]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    parser.add_argument(
        "--quick", "--fast", action="store_true", help="the test suite's (and CI's) small run"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    if not args.reference.is_file():
        print(f"reference data not found: {args.reference}", file=sys.stderr)
        return 2
    result = run(args.reference, quick=args.quick)
    sys.stdout.write(render_markdown(result))
    if args.json is not None:
        args.json.write_text(json.dumps(accuracy.json_ready(result), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
