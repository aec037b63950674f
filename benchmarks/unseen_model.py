"""Predictions for a model pdtp never fitted, scored without knowing the GPU type: GLM-5.

    python benchmarks/unseen_model.py [--fast] [--json PATH]

Data: the 52 vLLM runs of ``zai-org/GLM-5-FP8`` in
``tests/data/reference/measured-serving-inferencex-agg.csv`` (InferenceX
``experimental/token_position_decode_slo/glm-5``: TP 8, ISL 1k-16k, OSL 128, 4-64 clients,
medians only). Their ``hw`` is ``unknown`` ("GPU type not recorded"), so
``benchmarks/accuracy.py`` skips them and no fit ever sees them: every prediction here uses
the constants as shipped (``python/pdtp/data/perf_constants.json``, fitted on other models) at
the row's engine image, through the path ``accuracy.py`` scores (:func:`pdtp.calibration.
load_points`, :func:`pdtp.calibration.predict_points`).

For each candidate 8-GPU node type (:data:`CANDIDATES`) the rows are predicted as if run there:

- **shape**: at each (ISL, OSL) the TPOT and the output throughput at every concurrency
  relative to the same ISL/OSL's reference concurrency (the lowest measured, 4), predicted
  over measured: ``(pred_c / pred_ref) / (meas_c / meas_ref) - 1``. The GPU's absolute speed
  cancels; what is left is how the model's costs grow with the batch and the context. Median
  and p90 of the absolute error, and the signed median (bias);
- **absolute**: predicted / measured - 1 of the median TPOT, the output throughput and the
  median TTFT. Choosing the GPU type that fits these best uses the measurements, so that GPU's
  errors are **GPU-inferred** (not out of sample for the GPU choice). The type the run's
  source names (:data:`SOURCE_GPU`) is a choice made without the measurements: its errors are
  out of sample.

A candidate on which the checkpoint does not load (its weights do not fit 8 GPUs as pdtp sizes
them) is reported with the reason, and is itself a physical inference about the GPU type.

The measured runs served with MTP speculative decoding (:data:`SOURCE_SPECULATIVE`), which
pdtp does not model (the row's ``spec_method`` column says ``none``; the serve script says
otherwise): a draft token accepted cuts the measured TPOT below a plain decode's, so absolute
TPOT errors lean negative on top of the model's own; the shape largely cancels it.
``--fast`` (the test suite's run) scores three ISLs.

A second table takes apart the decode step of another model never measured here,
gpt-oss-120b (36 layers, MXFP4 experts, sliding-window layers), at TP 1-8 on B200 and MI355X
(:func:`tp_breakdown`): what each fitted per-event cost adds (switched off one at a time) and
what is left, the work a rank streams and computes. Terms that do not fall with TP are what
a TP-8 prediction of a small, shallow model rests on.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pdtp.calibration import PerfPoint, load_points, predict_points
from pdtp.constants import constants_for
from pdtp.errors import PdtpError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "reference" / "measured-serving-inferencex-agg.csv"
MODEL_ID = "zai-org/GLM-5-FP8"
#: 8-GPU node types the run could have used (every data-center type the catalog has in 8-GPU
#: HGX/OAM nodes).
CANDIDATES = ("h100", "h200", "b200", "mi300x", "mi325x", "mi355x")
#: The node type the run's source names, and where (the row records none).
SOURCE_GPU = (
    "h200",
    "SemiAnalysisAI/InferenceX@843c6254 experimental/token_position_decode_slo/glm-5/"
    "plot_sla_frontier.py: the figure these results were plotted in is titled 'GLM-5 FP8 SLA "
    "Frontier / 8xH200 TP8 vLLM' (its sibling MiniMax-M2.5 and Qwen3.5 runs of the same "
    "author submit to SLURM partition 'h200'; GLM-5's serve script to 'main', --gres=gpu:8)",
)
#: How the measured server decoded (the row's spec_method says 'none').
SOURCE_SPECULATIVE = (
    "MTP, 1 speculative token",
    "SemiAnalysisAI/InferenceX@843c6254 experimental/token_position_decode_slo/glm-5/"
    "serve_glm5_sbatch.sh: vllm serve zai-org/GLM-5-FP8 --tensor-parallel-size 8 "
    "--speculative-config.method mtp --speculative-config.num_speculative_tokens 1",
)
#: ``--fast``: the ISLs scored.
FAST_ISLS = (1024, 8192, 16384)
#: measured column, predicted key, label.
ABSOLUTE = (
    ("tpot_median_ms", "tpot_ms", "TPOT"),
    ("output_tps", "output_tokens_per_s", "throughput"),
    ("ttft_median_ms", "ttft_median_ms", "TTFT (median)"),
)
SHAPE = ABSOLUTE[:2]


def glm5_rows(path: Path = DATA, isls: Sequence[int] | None = None) -> list[dict[str, str]]:
    """The measured GLM-5 rows (every ISL, or those in ``isls``)."""
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["model_id"] == MODEL_ID]
    if isls is not None:
        rows = [r for r in rows if int(r["isl"]) in isls]
    return rows


def as_run_on(rows: Sequence[dict[str, str]], gpu: str) -> list[PerfPoint]:
    """The rows as if measured on ``gpu`` (raises :class:`PdtpError` when the checkpoint does
    not load there)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the rows' own notes (medians only) are known
        return load_points([dict(r, hw=gpu) for r in rows])


def predict(points: Sequence[PerfPoint], rows: Sequence[dict[str, str]]) -> list[dict[str, Any]]:
    """Each row's measured and predicted values, with the shipped constants of the row's GPU,
    engine and engine image."""
    image = {id(p): row.get("engine_image", "") for p, row in zip(points, rows)}
    preds = predict_points(
        points, lambda p: constants_for(p.gpu.name, None, p.engine, image[id(p)])
    )
    out = []
    for row, pred in zip(rows, preds):
        item: dict[str, Any] = {
            "isl": int(row["isl"]),
            "osl": int(row["osl"]),
            "concurrency": int(row["concurrency"]),
        }
        for measured, key, _ in ABSOLUTE:
            item[f"measured_{key}"] = float(row[measured])
            item[f"predicted_{key}"] = float(pred[key])
        out.append(item)
    return out


def shape_errors(items: Sequence[dict[str, Any]], key: str) -> list[float]:
    """Signed shape errors of ``key``: at each (ISL, OSL), every other concurrency's value
    relative to the lowest concurrency's, predicted over measured, minus 1."""
    groups: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for it in items:
        groups[(it["isl"], it["osl"])].append(it)
    errors = []
    for group in groups.values():
        ref = min(group, key=lambda it: it["concurrency"])
        for it in group:
            if it is ref:
                continue
            pred = it[f"predicted_{key}"] / ref[f"predicted_{key}"]
            meas = it[f"measured_{key}"] / ref[f"measured_{key}"]
            errors.append(pred / meas - 1.0)
    return errors


def absolute_errors(items: Sequence[dict[str, Any]], key: str) -> list[float]:
    """Signed errors predicted / measured - 1 of ``key``."""
    return [it[f"predicted_{key}"] / it[f"measured_{key}"] - 1.0 for it in items]


def stats(signed: Sequence[float]) -> dict[str, float]:
    """``n``, median and p90 of the absolute errors, and the signed median (bias)."""
    finite = [e for e in signed if math.isfinite(e)]
    if not finite:
        return {"n": 0, "median": math.nan, "p90": math.nan, "bias": math.nan}
    xs = sorted(abs(e) for e in finite)
    return {
        "n": len(xs),
        "median": statistics.median(xs),
        "p90": xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)],
        "bias": statistics.median(finite),
    }


def score_gpu(rows: Sequence[dict[str, str]], gpu: str) -> dict[str, Any]:
    """Shape and absolute errors of the rows predicted on ``gpu``; ``loads`` False with the
    reason where the checkpoint does not fit."""
    try:
        points = as_run_on(rows, gpu)
    except PdtpError as exc:
        return {"gpu": gpu, "loads": False, "reason": str(exc).split(": ", 1)[-1]}
    items = predict(points, rows)
    return {
        "gpu": gpu,
        "loads": True,
        "shape": {key: stats(shape_errors(items, key)) for _, key, _ in SHAPE},
        "absolute": {key: stats(absolute_errors(items, key)) for _, key, _ in ABSOLUTE},
        "rows": items,
    }


def absolute_fit(result: dict[str, Any]) -> float:
    """How well a GPU's absolute values fit: the mean of the TPOT and throughput median
    absolute errors (the GPU choice's criterion)."""
    return statistics.fmean(result["absolute"][key]["median"] for _, key, _ in SHAPE)


def run(*, fast: bool = False) -> dict[str, Any]:
    rows = glm5_rows(isls=FAST_ISLS if fast else None)
    if not rows:
        raise SystemExit(f"no {MODEL_ID} rows in {DATA}")
    start = time.perf_counter()
    gpus = [score_gpu(rows, gpu) for gpu in CANDIDATES]
    loaded = [g for g in gpus if g["loads"]]
    best = min(loaded, key=absolute_fit)["gpu"] if loaded else None
    return {
        "model": MODEL_ID,
        "rows": len(rows),
        "isls": sorted({int(r["isl"]) for r in rows}),
        "fast": fast,
        "gpus": gpus,
        "best_fit_gpu": best,
        "source_gpu": SOURCE_GPU[0],
        "source_gpu_evidence": SOURCE_GPU[1],
        "speculative": SOURCE_SPECULATIVE[0],
        "speculative_evidence": SOURCE_SPECULATIVE[1],
        "seconds": time.perf_counter() - start,
    }


def _pct(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{100 * x:.0f}%"


def _signed(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{100 * x:+.0f}%"


def _cell(s: dict[str, float]) -> str:
    return f"{_pct(s['median'])} / {_pct(s['p90'])} ({_signed(s['bias'])})"


def render_markdown(result: dict[str, Any]) -> str:
    """The README's table: shape and absolute errors per candidate GPU type."""
    lines = [
        f"{result['rows']} runs of {result['model']} (TP 8, ISL "
        f"{result['isls'][0]:,}-{result['isls'][-1]:,}, OSL 128, 4-64 clients); error median / "
        "p90 (signed median):",
        "",
        "| GPU type | TPOT shape | throughput shape | TPOT | throughput | TTFT (median) |",
        "|---|---|---|---|---|---|",
    ]
    for g in result["gpus"]:
        name = g["gpu"].upper()
        if g["gpu"] == result["source_gpu"]:
            name += " (named by the source)"
        if g["gpu"] == result["best_fit_gpu"]:
            name += " (best absolute fit: GPU-inferred)"
        if not g["loads"]:
            lines.append(f"| {name} | does not load: {g['reason']} | | | | |")
            continue
        shape, absolute = g["shape"], g["absolute"]
        cells = [_cell(shape[key]) for _, key, _ in SHAPE]
        cells += [_cell(absolute[key]) for _, key, _ in ABSOLUTE]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


#: The decode step taken apart: (model, GPU types, batches, TP sizes, context tokens).
BREAKDOWN = ("gpt-oss-120b", ("b200", "mi355x"), (1, 64), (1, 2, 4, 8), 1536)
#: The per-event costs :func:`tp_breakdown` switches off, one at a time, and their labels.
PER_EVENT = (
    ("kernel_overhead_s", "kernels"),
    ("allreduce_latency_s", "all-reduce latency"),
    ("seq_overhead_s", "per sequence"),
    ("step_overhead_s", "per step"),
)
#: A positive value small enough to switch a cost off (constants must be positive).
OFF = 1e-15


def tp_breakdown(
    model: str, gpu: str, batch: int, tps: Sequence[int], context: int
) -> list[dict[str, float]]:
    """One decode step (``batch`` sequences of ``context`` tokens) at each TP size: its time
    and what each per-event constant adds to it (ms); ``work`` is the rest."""
    import pdtp

    m = pdtp.model(model)

    def step(tp: int, **off: float) -> float:
        return pdtp.predict_decode(
            m, gpu=gpu, tp=tp, isl=context, osl=2, batch=batch, constants=dict(off) or None
        ).tpot_ms

    out = []
    for tp in tps:
        total = step(tp)
        row: dict[str, float] = {"tp": tp, "step_ms": total}
        for constant, label in PER_EVENT:
            row[label] = total - step(tp, **{constant: OFF})
        row["work"] = total - sum(row[label] for _, label in PER_EVENT)
        out.append(row)
    return out


def breakdowns() -> list[dict[str, Any]]:
    model, gpus, batches, tps, context = BREAKDOWN
    return [
        {
            "model": model,
            "gpu": gpu,
            "batch": batch,
            "context": context,
            "rows": tp_breakdown(model, gpu, batch, tps, context),
        }
        for gpu in gpus
        for batch in batches
    ]


def render_breakdown(parts: Sequence[dict[str, Any]]) -> str:
    labels = [label for _, label in PER_EVENT]
    lines = [
        "| GPU, batch | TP | step (ms) | TP 1 / this | "
        + " | ".join(labels)
        + " | work (streaming, GEMMs, attention) |",
        "|---|---:|---:|---:|" + "---:|" * (len(labels) + 1),
    ]
    for part in parts:
        first = part["rows"][0]["step_ms"]
        for row in part["rows"]:
            cells = [f"{row[label]:.2f}" for label in labels] + [f"{row['work']:.2f}"]
            lines.append(
                f"| {part['gpu'].upper()}, {part['batch']} | {row['tp']:.0f} | "
                f"{row['step_ms']:.2f} | {first / row['step_ms']:.2f} | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines) + "\n"


def json_ready(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: json_ready(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_ready(v) for v in x]
    return x


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help=f"ISLs {FAST_ISLS} only")
    parser.add_argument("--json", type=Path, help="also write the full result here")
    args = parser.parse_args(argv)
    result = run(fast=args.fast)
    result["breakdown"] = breakdowns()
    print(render_markdown(result))
    print(f"GPU type named by the source: {result['source_gpu']} ({result['source_gpu_evidence']})")
    print(f"Best absolute fit (GPU-inferred): {result['best_fit_gpu']}")
    print(f"Measured with {result['speculative']} ({result['speculative_evidence']})")
    model, _, _, _, context = BREAKDOWN
    print(f"\n{model}'s decode step ({context:,} tokens of context), ms:\n")
    print(render_breakdown(result["breakdown"]))
    print(f"{result['seconds']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(json_ready(result), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
