"""Accuracy of pdtp's performance model against measured serving, out of sample.

    python benchmarks/accuracy.py [--quick | --disaggregated-only] [--json PATH]

Data (``tests/data/reference``): ``measured-serving.csv`` (619 InferenceMAX runs),
``perf-points.csv`` (101 aiconfigurator / vendor points) and the InferenceX runs
(``measured-serving-inferencex-agg.csv``, ``-disagg.csv``) pdtp can express — vLLM/SGLang,
no speculative decoding, a GPU type in the catalog; the rest are counted by reason. Each
aggregated row's TPOT, mean TTFT, median TTFT (scored, never fitted: ``predict_serving``'s
steady-state ``ttft_median_ms``) and output throughput are compared with
:func:`pdtp.predict_serving`'s (through :func:`pdtp.calibration.predict_points`), as
absolute relative errors, median and p90, AMD and NVIDIA apart. Every setting but the last
predicts a row with constants fitted (:func:`pdtp.calibration.fit_table`) on other rows only,
at the row's engine release (``engine_image``; its measured release range's factors):

- **leave one model out**: fit on every other model's rows, predict this model's;
- **leave one GPU type out**: fit on every other GPU type's rows; the held-out type takes its
  generation's (MI325X ↔ MI300X, H200 ↔ H100) or its vendor's shared constants;
- **leave one layout family out** (TP, TP+EP, DP attention): fit on the other families;
- **leave one (model, GPU) out**: fit on everything but this model on this GPU type;
- **calibrate on 5**: per (model, GPU, dtype, engine) family, start from the constants fitted
  without the family, :func:`pdtp.calibrate` on 5 of its rows, predict the rest;
- **in sample**: the shipped defaults (fitted on all rows), for reference only.

The **measured disaggregated (P/D) runs** are never fitted: each is predicted from its prefill
and decode layouts and worker counts (:func:`predict_disaggregated`, pdtp's step function in
a closed loop of the run's concurrency) with constants fitted on every aggregated row, and on
every aggregated row of other models (leave the model out). They are scored twice: by the
closed loop at the run's concurrency, and through :func:`pdtp.evaluate` (the path a user and
``solve`` price a configuration on) at a TPOT limit equal to the run's measured TPOT, whose
throughput is what pdtp says the deployment serves at that interactivity. A breakdown gives
the loop's signed median errors by framework and GPU type, decode layout, prefill:decode GPU
ratio, concurrency, the side that binds the predicted loop and the measured median TTFT; the
runs whose clients queued get their measured prompt tokens/s per prefill GPU next to the
loop's prefill capacity, and the DP-attention decode runs the step's error at their measured
batch. TensorRT-LLM runs (``dynamo-trt``) are not scored: pdtp neither plans
nor fits TensorRT-LLM, so none of its constants reach these predictions.

The tables print three models side by side, in the README's layout: **v2**, the stored full
run of the model before v3 (``accuracy_v2.json``); **v3 before**, the stored full run of v3
before the latest change (``accuracy_v3_before.json``, written with ``--json`` at that change's
start); **v3**, the live model. ``accuracy_v1.json`` keeps the first model's. Leave one model
out is also broken down by held-out model and vendor, with the signed median bias
(predicted / measured − 1), where the physics a fit could not see shows. ``--quick`` runs
one held-out GPU type, one held-out (model, GPU) family, Qwen3-32B held out and the P/D runs
with a shorter search (what the test suite checks); ``--disaggregated-only`` the P/D runs alone
(the README's "Disaggregated runs" tables).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pdtp import _core
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
from pdtp.catalog import gpu as find_gpu
from pdtp.errors import PdtpError
from pdtp.perf import constant_inputs, gpu_inputs, model_inputs

parse_layout = _core.parse_layout

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "reference"
FILES = ("measured-serving.csv", "perf-points.csv")
INFERENCEX_AGG = "measured-serving-inferencex-agg.csv"
INFERENCEX_DISAGG = "measured-serving-inferencex-disagg.csv"
V1 = Path(__file__).resolve().parent / "accuracy_v1.json"
#: The stored full run of the model before this one, shown side by side with the live run.
V2 = Path(__file__).resolve().parent / "accuracy_v2.json"
#: The stored full run of v3 before the latest change to the model (its start).
V3_BEFORE = Path(__file__).resolve().parent / "accuracy_v3_before.json"
#: The model the live run measures.
MODEL_NAME = "v3"
#: The held-out model of ``--quick``'s leave-one-model-out run: dense, 64 layers (the others
#: have 61 and 80), on H100 only.
QUICK_MODEL = "qwen3-32b"
DISAGG_LABELS = {
    "aggregated_fit": "fitted on all aggregated rows",
    "model": "leave model out",
}
KIND_LABELS = {
    "tpot_ms": "TPOT",
    "ttft_ms": "TTFT (mean)",
    "ttft_median_ms": "TTFT (median)",
    "output_tokens_per_s": "throughput",
}
#: What the aggregated rows are scored on: the fitted kinds and the median TTFT, which is
#: never fitted (the fit takes the mean) and predicted apart from it (a steady-state request:
#: no first-wave burst).
SCORED = (*KINDS[:2], "ttft_median_ms", KINDS[2])
VENDORS = ("AMD", "NVIDIA")
SETTINGS = ("model", "gpu", "layout", "model_gpu", "calibrate5", "in_sample")
SETTING_LABELS = {
    "v1": "v1 defaults",
    "model": "leave model out",
    "gpu": "leave GPU type out",
    "layout": "leave layout family out",
    "model_gpu": "leave (model, GPU) out",
    "calibrate5": "calibrate on 5",
    "in_sample": "in sample",
}
#: The issue's targets: (kind, statistic, bound), out of sample, on AMD and on NVIDIA.
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("tpot_ms", "median", 0.08),
    ("tpot_ms", "p90", 0.20),
    ("ttft_ms", "median", 0.15),
    ("ttft_median_ms", "median", 0.15),
    ("output_tokens_per_s", "median", 0.08),
)
CALIBRATE_TARGET = 0.05
#: What the P/D runs are scored on: the fitted kinds and the median TTFT.
DISAGG_SCORED = (*KINDS[:2], "ttft_median_ms", KINDS[2])


def layout_family(p: PerfPoint) -> str:
    """The layout family a row belongs to, for the leave-one-layout-family-out split."""
    if p.dp_attention:
        return "dp-attention+ep" if p.ep > 1 else "dp-attention"
    return "tp+ep" if p.ep > 1 else "tp"


def _labelled(points: Sequence[PerfPoint], file: str, images: Sequence[str]) -> list[PerfPoint]:
    return [
        replace(
            p,
            labels=(
                *p.labels,
                ("file", file),
                ("layout", layout_family(p)),
                ("engine_image", image),
            ),
        )
        for p, image in zip(points, images)
    ]


def inferencex_skip_reason(row: dict[str, str]) -> str | None:
    """Why an InferenceX row cannot be expressed in pdtp (None: it can)."""
    if row.get("hw") in ("", "unknown"):
        return "GPU type not recorded"
    if row.get("spec_method", "none") not in ("", "none"):
        return f"speculative decoding ({row['spec_method']})"
    framework = row.get("framework", "")
    if "sglang" not in framework and framework != "vllm":
        return f"engine {framework!r} (pdtp models vLLM and SGLang)"
    if "pdtp_decode_layout" in row and not (
        row["pdtp_decode_layout"] and row["pdtp_prefill_layout"]
    ):
        return "P/D layout not recorded"
    try:
        find_gpu(row["hw"])
    except PdtpError:
        return f"GPU type {row['hw']!r} not in pdtp's catalog"
    return None


def _expressible(path: Path, skipped: Counter[str]) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    kept = []
    for row in rows:
        reason = inferencex_skip_reason(row)
        if reason is None:
            kept.append(row)
        else:
            skipped[reason] += 1
    return kept


def load_all(skipped: Counter[str] | None = None) -> list[PerfPoint]:
    """Every aggregated row pdtp can express, labelled with its file, layout family and
    engine image; ``skipped`` counts the rest by reason."""
    skipped = Counter() if skipped is None else skipped
    points: list[PerfPoint] = []
    for name in FILES:
        loaded = load_points(REFERENCE / name)
        points += _labelled(loaded, name, [""] * len(loaded))
    for row in _expressible(REFERENCE / INFERENCEX_AGG, skipped):
        try:
            (p,) = load_points([row])
        except PdtpError as exc:  # weights that do not fit the row's GPUs as pdtp sizes them
            skipped[f"not loadable in pdtp ({str(exc).split(': ', 1)[-1][:60]})"] += 1
            continue
        points += _labelled([p], INFERENCEX_AGG, [row.get("engine_image", "")])
    return points


Predictions = list[dict[str, float]]


def _with(table: Table) -> Callable[[PerfPoint], Any]:
    return lambda p: table.constants(p.gpu, p.engine, p.engine_release)


def predict_all(points: Sequence[PerfPoint], constants: Callable[[PerfPoint], Any]) -> Predictions:
    """:func:`predict_points`' mean TPOT, mean TTFT, throughput and median TTFT (a
    steady-state request's, ``predict_serving``'s ``ttft_median_ms``: no first wave, no
    warm-up stall)."""
    return predict_points(points, constants)


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
        for i, pr in zip(test, predict_all([points[i] for i in test], _with(table))):
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
        base = table.constants(first.gpu, first.engine, first.engine_release)
        fitted = calibrate([points[i] for i in sorted(chosen)], base=base, fit=fit, time_limit_s=60)
        rest = [i for i in members if i not in chosen]
        for i, pr in zip(rest, predict_points([points[i] for i in rest], fitted)):
            preds[i] = pr
    return preds


# ---- disaggregated (P/D) runs -------------------------------------------------------------


def _side(base: PerfPoint, layout_text: str) -> tuple[PerfPoint, tuple[int, int, int, bool]]:
    """``base`` as one worker of ``layout_text`` (pdtp's syntax: ``tp8ep``, ``tp1dp16ep``)."""
    tp, pp, dp, ep = parse_layout(layout_text)
    gpus = tp * pp * dp
    side = replace(base, tp=gpus, ep=gpus if ep else 1, dp_attention=dp > 1)
    return side, (tp, pp, dp, ep)


#: The KV cache dtype every measured P/D run of DeepSeek-R1 was launched with: fp8_e4m3 in
#: all of InferenceX's SGLang P/D recipes (``benchmarks/multi_node/amd_utils/models.yaml``
#: ``base_flags`` for MoRI on MI355X; every ``srt-slurm-recipes/dsr1/sglang/*/disagg``
#: recipe, prefill and decode, for Dynamo on B200/GB200/H200; SemiAnalysisAI/InferenceX
#: @843c6254 and its history). The aggregated InferenceMAX launch defaults (bf16 KV on AMD)
#: do not hold for these runs.
DISAGG_KV_DTYPE = "fp8"
#: The connector each P/D framework's runs move KV caches with (its SGLang transfer backend:
#: ``--disaggregation-transfer-backend mori`` on MI355X, ``nixl`` in the Dynamo recipes).
DISAGG_CONNECTORS = {"mori-sglang": "sglang-mori", "dynamo-sglang": "sglang-nixl"}


def load_disaggregated(skipped: Counter[str] | None = None) -> list[dict[str, Any]]:
    """The measured P/D runs pdtp can express: each as its prefill and decode worker points
    (model, GPU and engine settings parsed as for an aggregated row, the KV cache in
    :data:`DISAGG_KV_DTYPE` as the runs were launched), worker counts, framework and the
    measured TPOT, TTFT and whole-deployment output tokens/s.

    TensorRT-LLM runs (``dynamo-trt``) are skipped by :func:`inferencex_skip_reason`: pdtp
    neither plans nor fits TensorRT-LLM, so no constant of it reaches a vLLM/SGLang
    prediction and its runs are not scored."""
    skipped = Counter() if skipped is None else skipped
    out = []
    for row in _expressible(REFERENCE / INFERENCEX_DISAGG, skipped):
        agg_like = {
            **row,
            "tp": row["decode_gpus_per_worker"],
            "ep": "1",
            "dp_attention": "False",
            "kv_dtype": row.get("kv_dtype") or DISAGG_KV_DTYPE,
        }
        try:
            (base,) = load_points([agg_like])
            prefill, prefill_layout = _side(base, row["pdtp_prefill_layout"])
            decode, decode_layout = _side(base, row["pdtp_decode_layout"])
        except PdtpError as exc:
            skipped[f"not loadable in pdtp ({str(exc).split(': ', 1)[-1][:60]})"] += 1
            continue
        out.append(
            {
                "row_id": row["row_id"],
                "prefill": prefill,
                "decode": decode,
                "prefill_layout": prefill_layout,
                "decode_layout": decode_layout,
                "prefill_workers": int(row["prefill_workers"]),
                "decode_workers": int(row["decode_workers"]),
                "family": f"{layout_family(prefill)} / {layout_family(decode)}",
                "framework": row["framework"],
                "prefill_layout_text": row["pdtp_prefill_layout"],
                "decode_layout_text": row["pdtp_decode_layout"],
                "gpus": int(row["num_gpus"]),
                "engine_image": row.get("engine_image", ""),
                "measured": {
                    "tpot_ms": float(row["tpot_mean_ms"]),
                    "ttft_ms": float(row["ttft_mean_ms"]),
                    "ttft_median_ms": float(row["ttft_median_ms"]),
                    "output_tokens_per_s": float(row["output_tps"]),
                },
            }
        )
    return out


def predict_disaggregated(run: dict[str, Any], table: Table) -> dict[str, float]:
    """The measured P/D run as pdtp predicts it (``_core.predict_disaggregated``, the
    closed loop of ``src/perf/serving.rs``' ``disaggregated``: prefill batches and their
    queue, the KV transfer, the first decode step, the first wave, Little's law over the
    loop) at the run's layouts, worker counts and concurrency, with ``table``'s constants at
    the run's engine release."""
    dec = run["decode"]
    c = table.constants(dec.gpu, dec.engine, dec.engine_release)
    p = _core.predict_disaggregated(
        model_inputs(dec.model),
        gpu_inputs(dec.gpu, dec.model.weight_dtype),
        constant_inputs(c),
        run["prefill_layout"],
        float(run["prefill_workers"]),
        run["decode_layout"],
        float(run["decode_workers"]),
        dec.workload(),
    )
    if p is None:
        return {**{kind: math.nan for kind in DISAGG_SCORED}, "bound": "none"}
    return {
        "tpot_ms": p.tpot * 1e3,
        "ttft_ms": p.ttft * 1e3,
        "ttft_median_ms": p.ttft_steady * 1e3,
        "output_tokens_per_s": p.output_tokens_per_s,
        "bound": binding_side(p),
    }


#: Within this share of a side's limit, that side sets the loop's rate (the first wave and
#: the run's drain keep a bound loop a few per cent under it).
BOUND_SHARE = 0.9


def binding_side(p: Any) -> str:
    """Which side sets the predicted loop's rate: ``prefill`` (the clients queue in front of
    the prefill workers: the rate at their capacity), ``decode`` (the decode ranks at the
    most sequences their KV cache and sequence cap hold), else ``clients`` (the closed loop's
    concurrency: neither side is full)."""
    if p.requests_per_s >= BOUND_SHARE * p.prefill_capacity_rps:
        return "prefill"
    if p.batch >= BOUND_SHARE * p.max_batch:
        return "decode"
    return "clients"


def evaluate_disaggregated(
    run: dict[str, Any], table: Table, tpot_limit_ms: float | None = None
) -> dict[str, Any]:
    """The measured P/D deployment as a user gets it from :func:`pdtp.evaluate` (the path
    ``solve`` prices a configuration on): its layouts and instance counts, the run's model,
    GPU, memory fraction and connector, ``table``'s constants at the run's engine release, and
    an interactivity target of ``tpot_limit_ms`` (default: the run's measured TPOT). So the
    throughput is what pdtp says this deployment serves at that TPOT, which the run measured
    at its concurrency; its TTFT is :func:`pdtp.evaluate`'s (at the decode side's capacity)."""
    import pdtp

    dec = run["decode"]
    limit = run["measured"]["tpot_ms"] if tpot_limit_ms is None else tpot_limit_ms
    conn = DISAGG_CONNECTORS.get(run.get("framework", ""), "sglang-nixl")
    release = dec.engine_release
    kwargs: dict[str, Any] = {
        "gpu": dec.gpu.name,
        "workload": pdtp.Workload(
            isl=max(1, round(dec.isl)), osl=max(1, round(dec.osl)), ttft_ms=None, tpot_ms=limit
        ),
        "prefill_tp": run["prefill_layout_text"],
        "prefill_instances": run["prefill_workers"],
        "decode_tp": run["decode_layout_text"],
        "decode_instances": run["decode_workers"],
        # The constants of the run's release, whatever release the rules below are of.
        "constants": table.constants(dec.gpu, dec.engine, release),
        "gpu_memory_utilization": dec.gpu_memory_utilization,
    }
    rules = "the run's release"
    try:
        e = pdtp.evaluate(dec.model, connector=f"{conn}@{release}" if release else conn, **kwargs)
    except PdtpError:
        # MoRI ran in ROCm development images (rocm/sgl-dev:sglang-0.5.7/0.5.8-...-mori) before
        # the SGLang release that ships it; pdtp's rules know it from that release on, so
        # such runs are judged by the newest release's rules (the prediction is the same).
        rules = "the newest release's"
        try:
            e = pdtp.evaluate(dec.model, connector=conn, **kwargs)
        except PdtpError as exc:
            return {
                **{kind: math.nan for kind in (*EVALUATE_SCORED, "output_tokens_per_s_per_gpu")},
                "bottleneck": "",
                "valid": False,
                "why": str(exc)[:80],
                "rules": rules,
            }
    return {
        "tpot_ms": e.tpot_ms,
        "ttft_ms": e.ttft_ms,
        "output_tokens_per_s": e.output_tokens_per_s,
        "output_tokens_per_s_per_gpu": e.output_tokens_per_s / max(e.gpus, 1),
        "bottleneck": e.bottleneck,
        "valid": e.valid,
        "why": ", ".join(v.code for v in e.violations),
        "rules": rules,
    }


def _side_text(side: Any) -> str:
    """A plan side's layout in pdtp's syntax (``tp8``, ``tp1dp8ep``)."""
    text = f"tp{side.tp}" + (f"pp{side.pp}" if side.pp > 1 else "")
    text += f"dp{side.dp}" if side.dp > 1 else ""
    return text + ("ep" if side.ep else "")


def solve_disaggregated(run: dict[str, Any], table: Table) -> dict[str, Any]:
    """What :func:`pdtp.solve` plans for the run's GPU pool (its GPU count of its type),
    restricted to the run's two layouts, P/D only, at a TPOT limit equal to the run's measured
    TPOT, with ``table``'s constants at the run's release: its predicted throughput and whether
    it splits the pool as the run did (``same_split``). ``solve`` may split the GPUs
    differently (then its throughput is that of its own split); an infeasible pool (no
    layout meets the limit as predicted) plans nothing: 0 tokens/s, as a user gets."""
    import pdtp

    dec = run["decode"]
    release = dec.engine_release
    kwargs: dict[str, Any] = {
        "gpus": run["gpus"],
        "gpu": dec.gpu.name,
        "workload": pdtp.Workload(
            isl=max(1, round(dec.isl)),
            osl=max(1, round(dec.osl)),
            ttft_ms=None,
            tpot_ms=run["measured"]["tpot_ms"],
        ),
        "connector": DISAGG_CONNECTORS.get(run.get("framework", ""), "sglang-nixl"),
        "mode": "disagg",
        "layouts": sorted({run["prefill_layout_text"], run["decode_layout_text"]}),
        "constants": table.constants(dec.gpu, dec.engine, release),
        "gpu_memory_utilization": dec.gpu_memory_utilization,
        "time_limit_s": 30,
    }
    try:
        try:
            plan = pdtp.solve(dec.model, sglang_version=release or None, **kwargs)
        except pdtp.InvalidArgumentError:
            # MoRI before the release that ships it (see evaluate_disaggregated).
            plan = pdtp.solve(dec.model, **kwargs)
    except PdtpError as exc:
        return {
            "output_tokens_per_s": 0.0,
            "feasible": False,
            "same_split": False,
            "why": str(exc)[:80],
        }
    split = (
        plan.prefill.instances,
        _side_text(plan.prefill),
        plan.decode.instances,
        _side_text(plan.decode),
    )
    measured = (
        run["prefill_workers"],
        run["prefill_layout_text"],
        run["decode_workers"],
        run["decode_layout_text"],
    )
    return {
        "output_tokens_per_s": plan.output_tokens_per_s,
        "feasible": True,
        "same_split": split == measured,
        "split": f"{split[0]}x{split[1]}+{split[2]}x{split[3]}",
    }


#: A run whose clients waited at least this long (median TTFT, ms) queued in front of a
#: full side: its prompt rate is what that side clears.
QUEUED_TTFT_MS = 1e4


def prefill_rates(runs: Sequence[dict[str, Any]], tables: dict[str, Table]) -> list[dict[str, Any]]:
    """For the runs whose clients queued (median TTFT ≥ :data:`QUEUED_TTFT_MS`): the prompt
    tokens/s per prefill GPU measured (requests/s × ISL over the prefill GPUs) and what the
    loop's prefill side clears at full batches with each table's constants (its
    ``prefill_capacity_rps``), where the prefill side under load is judged."""
    out = []
    for r in runs:
        if r["measured"]["ttft_median_ms"] < QUEUED_TTFT_MS:
            continue
        dec = r["decode"]
        tp, pp, dp, _ = r["prefill_layout"]
        gpus = tp * pp * dp * r["prefill_workers"]
        row: dict[str, Any] = {
            "run": r["row_id"],
            "gpu": dec.gpu.name,
            "weights": dec.model.weight_dtype,
            "isl": round(dec.isl),
            "prefill": f"{r['prefill_workers']}× {r['prefill_layout_text']}",
            "release": dec.engine_release,
            "ttft_median_s": r["measured"]["ttft_median_ms"] / 1e3,
            "measured": r["measured"]["output_tokens_per_s"] / dec.osl * dec.isl / gpus,
        }
        for setting, table in tables.items():
            c = table.constants(dec.gpu, dec.engine, dec.engine_release)
            p = _core.predict_disaggregated(
                model_inputs(dec.model),
                gpu_inputs(dec.gpu, dec.model.weight_dtype),
                constant_inputs(c),
                r["prefill_layout"],
                float(r["prefill_workers"]),
                r["decode_layout"],
                float(r["decode_workers"]),
                dec.workload(),
            )
            row[setting] = math.nan if p is None else p.prefill_capacity_rps * dec.isl / gpus
        out.append(row)
    return out


def decode_step_gaps(runs: Sequence[dict[str, Any]], table: Table) -> list[dict[str, Any]]:
    """For each run with DP-attention decode: the measured TPOT less pdtp's decode step at the
    measured batch per decode rank (requests/s × OSL × TPOT over the ranks, Little's law over
    decoding), at the measured mean context. The loop's own batch is not used, so this is
    the step's error alone, in ms."""
    out = []
    for r in runs:
        _, pp, dp, _ = r["decode_layout"]
        if dp <= 1:
            continue
        dec, m = r["decode"], r["measured"]
        ranks = dp * r["decode_workers"]
        batch = m["output_tokens_per_s"] * m["tpot_ms"] / 1e3 / ranks
        c = table.constants(dec.gpu, dec.engine, dec.engine_release)
        context = dec.isl + dec.osl / 2
        step = _core.step_time(
            model_inputs(dec.model),
            gpu_inputs(dec.gpu, dec.model.weight_dtype),
            constant_inputs(c),
            r["decode_layout"],
            batch / pp,
            batch / pp * context,
            0.0,
            0.0,
        )
        out.append(
            {
                "group": f"{r['framework']}/{dec.gpu.name} {r['decode_layout_text'][3:]}",
                "run": r["row_id"],
                "release": dec.engine_release,
                "batch": batch,
                "measured_ms": m["tpot_ms"],
                "gap_ms": m["tpot_ms"] - step * 1e3,
            }
        )
    return out


#: What :func:`evaluate_disaggregated` is scored on (its TPOT is the limit's by
#: construction, so it is not scored).
EVALUATE_SCORED = ("ttft_ms", "output_tokens_per_s")


def disaggregated_breakdown(
    runs: Sequence[dict[str, Any]], preds: Sequence[dict[str, float]]
) -> list[dict[str, Any]]:
    """Signed median errors of the P/D predictions by framework and GPU, decode layout
    (TP / DP attention (+EP) size / nodes), prefill:decode GPU ratio, concurrency, the side
    that binds the predicted loop (:func:`binding_side`) and the measured median TTFT (how
    long the run's clients queued): where the residuals sit."""

    def decode_key(r: dict[str, Any]) -> str:
        tp, _, dp, ep = r["decode_layout"]
        gpus = tp * dp
        nodes = -(-gpus // max(int(r["decode"].gpu.scaleup_gpus or 1), 1))
        kind = f"dp{dp}{'+ep' if ep else ''}" if dp > 1 else f"tp{tp}{'ep' if ep else ''}"
        return f"{kind} ({nodes} domain{'s' if nodes > 1 else ''})"

    def ratio_key(r: dict[str, Any]) -> str:
        tp, pp, dp, _ = r["prefill_layout"]
        p = tp * pp * dp * r["prefill_workers"]
        dtp, dpp, ddp, _ = r["decode_layout"]
        d = dtp * dpp * ddp * r["decode_workers"]
        x = p / d
        return "P < D/2" if x < 0.5 else ("P ≈ D" if x <= 2 else "P > 2D")

    def conc_key(r: dict[str, Any]) -> str:
        c = r["decode"].concurrency or 0
        return "c ≤ 8" if c <= 8 else ("c ≤ 256" if c <= 256 else "c > 256")

    def queued_key(r: dict[str, Any]) -> str:
        t = r["measured"]["ttft_median_ms"]
        return "< 1 s" if t < 1e3 else ("1–10 s" if t < 1e4 else "≥ 10 s")

    keys: dict[str, Callable[[dict[str, Any]], str]] = {
        "framework/GPU": lambda r: f"{r.get('framework', '?')}/{r['decode'].gpu.name}",
        "decode layout": decode_key,
        "prefill:decode GPUs": ratio_key,
        "concurrency": conc_key,
        "side that binds (predicted)": lambda r: r["_bound"],
        "measured median TTFT": queued_key,
    }
    runs = [{**r, "_bound": pr.get("bound", "?")} for r, pr in zip(runs, preds)]
    out = []
    for by, key in keys.items():
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(runs):
            groups.setdefault(key(r), []).append(i)
        for name, members in sorted(groups.items()):
            row: dict[str, Any] = {"by": by, "group": name, "n": len(members)}
            for kind in DISAGG_SCORED:
                signed = [
                    preds[i][kind] / runs[i]["measured"][kind] - 1.0
                    for i in members
                    if math.isfinite(preds[i][kind])
                ]
                row[kind] = sorted(signed)[len(signed) // 2] if signed else math.nan
            out.append(row)
    return out


def disaggregated_summaries(
    runs: Sequence[dict[str, Any]],
    preds: Sequence[dict[str, float]],
    kinds: Sequence[str] = DISAGG_SCORED,
) -> dict[str, dict[str, Any]]:
    """Per ``kind/vendor`` (and ``kind/all``): n, median and p90 of the absolute relative
    errors of the P/D predictions."""
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        for vendor in (*VENDORS, "all"):
            errors = [
                abs(pr[kind] / r["measured"][kind] - 1.0) if math.isfinite(pr[kind]) else math.inf
                for r, pr in zip(runs, preds)
                if vendor in ("all", r["decode"].gpu.vendor)
            ]
            if errors:
                out[f"{kind}/{vendor}"] = summarize(errors)
    return out


def summaries(points: Sequence[PerfPoint], preds: Predictions) -> dict[str, dict[str, Any]]:
    """Per ``kind/vendor``: n, median and p90 of the absolute relative errors."""
    out: dict[str, dict[str, Any]] = {}
    for kind in SCORED:
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


def by_model(points: Sequence[PerfPoint], preds: Predictions) -> dict[str, dict[str, Any]]:
    """Per held-out model, per ``kind/vendor``: n, median and p90 of the absolute relative
    errors and the signed median bias (predicted / measured − 1)."""
    out: dict[str, dict[str, Any]] = {}
    for model in sorted({p.model.name for p in points}):
        mine = [(p, pr) for p, pr in zip(points, preds) if p.model.name == model and pr]
        table = summaries([p for p, _ in mine], [pr for _, pr in mine])
        for key, s in table.items():
            kind, vendor = key.split("/")
            signed = [
                pr[kind] / p.measured(kind) - 1.0
                for p, pr in mine
                if p.gpu.vendor == vendor and getattr(p, kind) is not None
                if math.isfinite(pr.get(kind, math.nan))
            ]
            s["bias"] = summarize(signed)["median"] if signed else math.nan
        if table:
            out[model] = table
    return out


#: How many constants :func:`carriers` reports per held-out model and vendor.
CARRIERS_SHOWN = 3


def _signed_bias(
    test: Sequence[PerfPoint], constants: Callable[[PerfPoint], Any], kind: str
) -> float:
    """The signed median of predicted / measured − 1 over ``test``."""
    signed = [
        pr[kind] / p.measured(kind) - 1.0
        for p, pr in zip(test, predict_all(test, constants))
        if math.isfinite(pr[kind])
    ]
    return summarize(signed)["median"] if signed else math.nan


def _one_swapped(table: Table, full: Table, name: str) -> Callable[[PerfPoint], Any]:
    """``table``'s constants with ``name`` at ``full``'s value."""

    def constants(p: PerfPoint) -> Any:
        value = getattr(full.constants(p.gpu, p.engine, p.engine_release), name)
        return table.constants(p.gpu, p.engine, p.engine_release).replace(**{name: value})

    return constants


def carriers(
    points: Sequence[PerfPoint],
    tables: dict[str, Table],
    full: Table,
    *,
    kind: str = "tpot_ms",
) -> dict[str, dict[str, Any]]:
    """Which fitted constants carry a held-out model's bias: per held-out model and vendor,
    the signed median bias of ``kind`` with the table fitted without the model, and for each
    constant of :data:`pdtp.calibration.TABLE_LEVELS` the bias when that one constant takes
    the value every row fitted (the in-sample table), the rest held out. A constant whose
    swap moves the bias most is what the held-out fit put elsewhere than the model's own
    rows put it."""
    from pdtp.calibration import TABLE_LEVELS

    out: dict[str, dict[str, Any]] = {}
    for model, table in tables.items():
        for vendor in VENDORS:
            test = [
                p
                for p in points
                if p.model.name == model and p.gpu.vendor == vendor and getattr(p, kind)
            ]
            if len(test) < 10:
                continue
            held = _signed_bias(test, _with(table), kind)
            swaps = {
                n: _signed_bias(test, _one_swapped(table, full, n), kind) for n in TABLE_LEVELS
            }
            ranked = sorted(swaps, key=lambda n: -abs(swaps[n] - held))
            out[f"{model}/{vendor}"] = {
                "n": len(test),
                "bias": held,
                "in_sample": _signed_bias(test, _with(full), kind),
                "carriers": [{"constant": n, "bias": swaps[n]} for n in ranked[:CARRIERS_SHOWN]],
            }
    return out


def run(*, quick: bool = False, disaggregated_only: bool = False) -> dict[str, Any]:
    """The whole report as a JSON-ready dict (``disaggregated_only``: the P/D runs' part
    alone, with the same two constants tables the full run scores them with)."""
    started = time.monotonic()
    skipped: Counter[str] = Counter()
    points = load_all(skipped)
    runs = load_disaggregated(skipped)
    result: dict[str, Any] = {
        "rows": len(points),
        "disaggregated_runs": len(runs),
        "skipped": dict(skipped.most_common()),
        "quick": quick,
        "settings": {},
        "disaggregated": {},
    }
    iters = 25 if quick else 100
    if disaggregated_only:
        models = {r["decode"].model.name for r in runs}
        full = fit_table(points, max_iterations=iters)
        other = fit_table([p for p in points if p.model.name not in models], max_iterations=iters)
        _score_disaggregated(result, runs, {"aggregated_fit": full, "model": other})
    elif quick:
        gpu_preds, _ = held_out(points, lambda p: p.gpu.name, only=["mi325x"], max_iterations=iters)
        pair_preds, _ = held_out(
            points, _model_gpu, only=["llama-3.3-70b/h200"], max_iterations=iters
        )
        model_preds, _ = held_out(
            points, lambda p: p.model.name, only=[QUICK_MODEL], max_iterations=iters
        )
        result["settings"]["gpu"] = summaries(points, gpu_preds)
        result["settings"]["model_gpu"] = summaries(points, pair_preds)
        result["settings"]["model"] = summaries(points, model_preds)
        result["by_model"] = by_model(points, model_preds)
        table = fit_table(
            [p for p in points if p.model.name != "deepseek-r1"], max_iterations=iters
        )
        _score_disaggregated(result, runs, {"model": table})
    else:
        model_preds, model_tables = held_out(points, lambda p: p.model.name)
        gpu_preds, _ = held_out(points, lambda p: p.gpu.name)
        layout_preds, _ = held_out(points, layout_family)
        pair_preds, pair_tables = held_out(points, _model_gpu)
        five = calibrated_on_five(points, pair_tables)
        full = fit_table(points)
        result["settings"]["model"] = summaries(points, model_preds)
        result["by_model"] = by_model(points, model_preds)
        result["settings"]["gpu"] = summaries(points, gpu_preds)
        result["settings"]["layout"] = summaries(points, layout_preds)
        result["settings"]["model_gpu"] = summaries(points, pair_preds)
        result["settings"]["calibrate5"] = summaries(points, five)
        result["settings"]["in_sample"] = summaries(points, predict_all(points, _with(full)))
        result["carriers"] = carriers(points, model_tables, full)
        # P/D runs are never fitted: constants from every aggregated row, and from every
        # aggregated row of other models (leave the model out).
        models = {r["decode"].model.name for r in runs}
        other = fit_table([p for p in points if p.model.name not in models])
        _score_disaggregated(result, runs, {"aggregated_fit": full, "model": other})
    if V1.is_file():
        v1 = json.loads(V1.read_text())
        result["settings"]["v1"] = v1["measured-serving.csv"]
    for name, path in (("v2", V2), ("v3_before", V3_BEFORE)):
        if path.is_file():
            stored = json.loads(path.read_text())
            result[name] = {k: stored.get(k, {}) for k in ("settings", "disaggregated", "by_model")}
    result["targets"] = _targets(result["settings"])
    result["disaggregated_targets"] = _disaggregated_targets(result)
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def _score_disaggregated(
    result: dict[str, Any], runs: Sequence[dict[str, Any]], tables: dict[str, Table]
) -> None:
    """The P/D runs scored per constants table: the closed loop (``disaggregated``), where its
    residuals sit (``disaggregated_breakdown``), and :func:`pdtp.evaluate`'s own numbers at
    each run's measured TPOT (``disaggregated_evaluate``)."""
    for setting, table in tables.items():
        loop = [predict_disaggregated(r, table) for r in runs]
        result["disaggregated"][setting] = disaggregated_summaries(runs, loop)
        result.setdefault("disaggregated_breakdown", {})[setting] = disaggregated_breakdown(
            runs, loop
        )
        evaluated = [evaluate_disaggregated(r, table) for r in runs]
        scored = disaggregated_summaries(runs, evaluated, EVALUATE_SCORED)
        scored["invalid"] = {"n": sum(not e["valid"] for e in evaluated)}
        result.setdefault("disaggregated_evaluate", {})[setting] = scored
        solved = [solve_disaggregated(r, table) for r in runs]
        plans = disaggregated_summaries(runs, solved, ("output_tokens_per_s",))
        plans["infeasible"] = {"n": sum(not x["feasible"] for x in solved)}
        plans["same_split"] = {"n": sum(x["same_split"] for x in solved)}
        same = [(r, x) for r, x in zip(runs, solved) if x["same_split"]]
        if same:
            plans["same_split"].update(
                disaggregated_summaries(
                    [r for r, _ in same], [x for _, x in same], ("output_tokens_per_s",)
                )["output_tokens_per_s/all"]
            )
        result.setdefault("disaggregated_solve", {})[setting] = plans
    result["disaggregated_prefill_rates"] = prefill_rates(runs, tables)
    result["disaggregated_decode_gaps"] = {
        setting: decode_step_gaps(runs, table) for setting, table in tables.items()
    }


def _targets(settings: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for setting in ("model", "gpu", "layout", "model_gpu"):
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


#: The issue's P/D target: the loop's throughput, median over the expressible runs.
DISAGG_TARGET = 0.10


def _disaggregated_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The P/D throughput target per constants table and vendor (and all runs), for the loop
    and for :func:`pdtp.evaluate`."""
    out = []
    for part in ("disaggregated", "disaggregated_evaluate"):
        for setting, table in result.get(part, {}).items():
            for vendor in (*VENDORS, "all"):
                s = table.get(f"output_tokens_per_s/{vendor}")
                if s:
                    out.append(
                        {
                            "part": part,
                            "setting": setting,
                            "vendor": vendor,
                            "bound": DISAGG_TARGET,
                            "value": s["median"],
                            "met": bool(s["median"] <= DISAGG_TARGET),
                        }
                    )
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def _cell(v: dict[str, Any] | None) -> str:
    return f"{_pct(v['median'])} / {_pct(v['p90'])}" if v else "–"


#: The models side by side: (result key, column label); the live run's key is "settings".
COLUMNS = (("v2", "v2"), ("v3_before", "v3 before"), ("live", MODEL_NAME))


def _stored(result: dict[str, Any], column: str, part: str) -> dict[str, Any]:
    if column == "live":
        return result.get(part, {}) or {}
    return result.get(column, {}).get(part, {}) or {}


def render_markdown(result: dict[str, Any]) -> str:
    """The report, its tables in the README's layout (regenerate the README's accuracy
    tables from this output)."""
    order = [s for s in SETTINGS if s in result["settings"]]
    head = " | ".join(f"{label} {v}" for _, label in COLUMNS for v in VENDORS)
    lines = (
        [
            "Absolute relative error, median / p90 (out of sample but for 'in sample'); "
            "v2 and v3 before are stored runs (`accuracy_v2.json`, `accuracy_v3_before.json`):",
            "",
            f"| split | quantity | rows {' / '.join(VENDORS)} | {head} |",
            "|---|---|---:|" + "---:|" * (len(COLUMNS) * len(VENDORS)),
        ]
        if order
        else []
    )
    for s in order:
        for kind in SCORED:
            cells, counts = [], []
            for column, _ in COLUMNS:
                table = _stored(result, column, "settings").get(s, {})
                for vendor in VENDORS:
                    cells.append(_cell(table.get(f"{kind}/{vendor}")))
            live = result["settings"][s]
            for vendor in VENDORS:
                counts.append(str((live.get(f"{kind}/{vendor}") or {}).get("n", 0)))
            if all(c == "–" for c in cells):
                continue
            lines.append(
                f"| {SETTING_LABELS[s]} | {KIND_LABELS[kind]} | {' / '.join(counts)} | "
                + " | ".join(cells)
                + " |"
            )
    models = result.get("by_model", {})
    if models:
        lines += [
            "",
            "Leave one model out, by held-out model: TPOT and throughput, median / p90 of the "
            "absolute error and (in brackets) the signed median bias:",
            "",
            "| held-out model | quantity | GPUs | n | "
            + " | ".join(label for _, label in COLUMNS)
            + " |",
            "|---|---|---|---:|" + "---:|" * len(COLUMNS),
        ]
        for model in models:
            for kind in ("tpot_ms", "output_tokens_per_s"):
                for vendor in VENDORS:
                    key = f"{kind}/{vendor}"
                    live = models[model].get(key)
                    if live is None:
                        continue
                    cells = []
                    for column, _ in COLUMNS:
                        v = _stored(result, column, "by_model").get(model, {}).get(key)
                        cells.append(f"{_cell(v)} ({_pct(v.get('bias'))})" if v else "–")
                    lines.append(
                        f"| {model} | {KIND_LABELS[kind]} | {vendor} | {live['n']} | "
                        + " | ".join(cells)
                        + " |"
                    )
    found = result.get("carriers", {})
    if found:
        lines += [
            "",
            "Which fitted constants carry a held-out model's TPOT bias: the signed median bias "
            "held out, in sample, and with one constant at its in-sample value (the rest held "
            f"out), the {CARRIERS_SHOWN} that move it most:",
            "",
            "| held-out model | GPUs | n | held out | in sample | one constant in sample |",
            "|---|---|---:|---:|---:|---|",
        ]
        for key, v in found.items():
            model, vendor = key.split("/")
            swaps = ", ".join(f"`{c['constant']}` {100 * c['bias']:+.1f}%" for c in v["carriers"])
            lines.append(
                f"| {model} | {vendor} | {v['n']} | {100 * v['bias']:+.1f}% | "
                f"{100 * v['in_sample']:+.1f}% | {swaps} |"
            )
    disagg = result.get("disaggregated", {})
    if disagg:
        lines += [
            "",
            f"Measured disaggregated (P/D) runs ({result.get('disaggregated_runs', 0)} "
            "expressible), never fitted:",
            "",
            "| constants | quantity | "
            + " | ".join(f"{label} (median / p90)" for _, label in COLUMNS)
            + f" | {MODEL_NAME} AMD | {MODEL_NAME} NVIDIA |",
            "|---|---|" + "---:|" * (len(COLUMNS) + 2),
        ]
        for s, table in disagg.items():
            for kind in DISAGG_SCORED:
                cells = [
                    _cell(_stored(result, column, "disaggregated").get(s, {}).get(f"{kind}/all"))
                    for column, _ in COLUMNS
                ]
                cells += [_cell(table.get(f"{kind}/{vendor}")) for vendor in VENDORS]
                if all(c == "–" for c in cells):
                    continue
                lines.append(
                    f"| {DISAGG_LABELS[s]} | {KIND_LABELS[kind]} | " + " | ".join(cells) + " |"
                )
    evaluated = result.get("disaggregated_evaluate", {})
    if evaluated:
        lines += [
            "",
            "The same P/D deployments through `pdtp.evaluate` (what a user gets; layouts and "
            "instance counts as run, the TPOT limit at the run's measured TPOT): its throughput "
            "at that TPOT and its TTFT against the measured mean:",
            "",
            "| constants | quantity | GPUs | n | median / p90 |",
            "|---|---|---|---:|---:|",
        ]
        for s, table in evaluated.items():
            for kind in EVALUATE_SCORED:
                for vendor in (*VENDORS, "all"):
                    v = table.get(f"{kind}/{vendor}")
                    if v:
                        lines.append(
                            f"| {DISAGG_LABELS[s]} | {KIND_LABELS[kind]} | {vendor} | "
                            f"{v['n']} | {_cell(v)} |"
                        )
            lines.append(
                f"| {DISAGG_LABELS[s]} | not valid as evaluated (e.g. TPOT limit unmet) | all | "
                f"{table.get('invalid', {}).get('n', 0)} | |"
            )
    solved = result.get("disaggregated_solve", {})
    if solved:
        lines += [
            "",
            "`pdtp.solve` on each run's GPU pool, restricted to its two layouts, P/D only, at the "
            "run's measured TPOT: its planned throughput against the measured one:",
            "",
            "| constants | GPUs | n | median / p90 | infeasible | same split as run (its median) |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for s, table in solved.items():
            same = table.get("same_split", {})
            for vendor in (*VENDORS, "all"):
                v = table.get(f"output_tokens_per_s/{vendor}")
                if not v:
                    continue
                tail = (
                    f"{table.get('infeasible', {}).get('n', 0)} | {same.get('n', 0)} "
                    f"({_pct(same.get('median'))})"
                    if vendor == "all"
                    else " | "
                )
                lines.append(f"| {DISAGG_LABELS[s]} | {vendor} | {v['n']} | {_cell(v)} | {tail} |")
    breakdown = result.get("disaggregated_breakdown", {})
    if breakdown:
        setting = "model" if "model" in breakdown else next(iter(breakdown))
        lines += [
            "",
            f"Where the P/D residuals sit ({DISAGG_LABELS[setting]}; signed median, predicted "
            "÷ measured − 1):",
            "",
            "| by | group | n | TPOT | TTFT (mean) | TTFT (median) | throughput |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for row in breakdown[setting]:
            cells = " | ".join(
                "–" if not math.isfinite(row[k]) else f"{100 * row[k]:+.0f}%" for k in DISAGG_SCORED
            )
            lines.append(f"| {row['by']} | {row['group']} | {row['n']} | {cells} |")
    rates = result.get("disaggregated_prefill_rates", [])
    if rates:
        settings = [k for k in DISAGG_LABELS if k in rates[0]]
        lines += [
            "",
            "The prefill side under load: prompt tokens/s per prefill GPU in the runs whose "
            f"clients queued (median TTFT ≥ {QUEUED_TTFT_MS / 1e3:.0f} s), measured and as the "
            "loop's prefill workers clear them at full batches:",
            "",
            "| run | GPU | weights | ISL | prefill | SGLang | median TTFT | measured | "
            + " | ".join(DISAGG_LABELS[k] for k in settings)
            + " |",
            "|---|---|---|---:|---|---|---:|---:|" + "---:|" * len(settings),
        ]
        for row in rates:
            cells = " | ".join(f"{row[k] / 1e3:.1f}k" for k in settings)
            lines.append(
                f"| {row['run']} | {row['gpu']} | {row['weights']} | {row['isl']} | "
                f"{row['prefill']} | {row['release']} | {row['ttft_median_s']:.0f} s | "
                f"{row['measured'] / 1e3:.1f}k | {cells} |"
            )
    gaps = result.get("disaggregated_decode_gaps", {})
    if gaps:
        lines += [
            "",
            "DP-attention decode: measured TPOT less pdtp's step at the measured batch per rank "
            "(ms; median [min, max] over the runs of a framework, GPU and decode layout):",
            "",
            "| group | n | batch per rank | " + " | ".join(DISAGG_LABELS[k] for k in gaps) + " |",
            "|---|---:|---:|" + "---:|" * len(gaps),
        ]
        first = next(iter(gaps.values()))
        for group in sorted({g["group"] for g in first}):
            members = [g for g in first if g["group"] == group]
            batches = [g["batch"] for g in members]
            cells = []
            for rows in gaps.values():
                xs = sorted(g["gap_ms"] for g in rows if g["group"] == group)
                cells.append(f"{xs[len(xs) // 2]:+.1f} [{xs[0]:+.1f}, {xs[-1]:+.1f}]")
            lines.append(
                f"| {group} | {len(members)} | {min(batches):.0f}–{max(batches):.0f} | "
                + " | ".join(cells)
                + " |"
            )
    if result.get("skipped"):
        lines += ["", "Rows pdtp cannot express (skipped):", ""]
        lines += [f"- {reason}: {n}" for reason, n in result["skipped"].items()]
    lines += ["", "Targets:", ""]
    for t in result["targets"]:
        mark = "met" if t["met"] else "NOT met"
        lines.append(
            f"- {SETTING_LABELS[t['setting']]}, {KIND_LABELS[t['kind']]} {t['vendor']} "
            f"{t['statistic']}: {_pct(t['value'])} (≤ {_pct(t['bound'])}) — {mark}"
        )
    for t in result.get("disaggregated_targets", []):
        mark = "met" if t["met"] else "NOT met"
        how = "the closed loop" if t["part"] == "disaggregated" else "`pdtp.evaluate`"
        lines.append(
            f"- P/D runs ({how}), {DISAGG_LABELS[t['setting']]}, throughput {t['vendor']} "
            f"median: {_pct(t['value'])} (≤ {_pct(t['bound'])}) — {mark}"
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
    parser.add_argument(
        "--disaggregated-only",
        action="store_true",
        help="only the measured P/D runs (the README's 'Disaggregated runs' tables)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, disaggregated_only=args.disaggregated_only)
    sys.stdout.write(render_markdown(result))
    print(f"\n({result['rows']} rows, {result['seconds']} s)")
    if args.json is not None:
        args.json.write_text(json.dumps(json_ready(result), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
