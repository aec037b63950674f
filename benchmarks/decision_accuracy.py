"""Decision accuracy: does the configuration pdtp would pick match the measured best?

    python benchmarks/decision_accuracy.py [--quick | --fast] [--json PATH]

Wherever the measured aggregated runs (``benchmarks/accuracy.py``'s rows: InferenceMAX,
InferenceX, perf-points) hold several configurations — layout (tp, ep, DP attention) and
concurrency — for the same model, checkpoint dtype, GPU type, engine and ISL/OSL, and for
each interactivity target (a TPOT limit: 10, 20, 33, 50 or 100 ms, i.e. 100 … 10 tokens/s per
user) that at least two of them meet as measured, pdtp "chooses" the configuration with the
highest predicted output tokens/s per GPU among those it predicts within the limit. The
score is the measured output tokens/s per GPU of that choice divided by the measured best
within the limit; a choice whose measured TPOT misses the limit (by more than the 3%
run-to-run drift) scores 0 (the user feels an SLO miss). Predictions are out of sample:
constants fitted without the row's model (leave one model out), and without the row's
(model, GPU) pair. The report gives the median and worst score per model, the worst among
choices that meet the limit, and how many decisions missed it; and the same for the chosen
*layout* at its best measured concurrency within the limit (the plan is the layout; a
serving stack turns the concurrency down until the limit holds), whose worst case is 0 only
where no measured concurrency of the chosen layout meets the limit.

Targets (issue 22): median ≥ 0.97, worst ≥ 0.90.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: Interactivity targets, TPOT limits in ms (tokens/s per user = 1000 / limit).
TPOT_LIMITS_MS = (10.0, 20.0, 33.3, 50.0, 100.0)
#: A choice measured within 3% over the limit still meets it: the data's own note puts the
#: run-to-run drift of one configuration at a few percent.
SLO_TOLERANCE = 0.03
TARGET_MEDIAN = 0.97
TARGET_WORST = 0.90


def _accuracy() -> Any:
    spec = importlib.util.spec_from_file_location("pdtp_benchmark_accuracy", HERE / "accuracy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def _length_class(mean: float) -> str:
    """A nominal length from a run's mean one: the rows keep means (0.9 × nominal for the
    InferenceMAX clients' [0.8, 1] draws, or the measured output mean), so lengths are
    grouped by half-octaves."""
    return f"~{2 ** (round(2 * math.log2(max(mean, 1.0))) / 2):.0f}"


def _group(p: Any) -> tuple[str, ...]:
    return (
        p.model.name,
        p.model.weight_dtype,
        p.gpu.name,
        p.engine,
        _length_class(p.isl),
        _length_class(p.osl),
    )


def _layout(p: Any) -> tuple[int, bool, bool]:
    return (p.tp, p.ep > 1, bool(p.dp_attention))


def _per_gpu(p: Any, tokens_per_s: float) -> float:
    return tokens_per_s / max(p.tp, 1)


def decisions(
    points: Sequence[Any], preds: Sequence[dict[str, float]], limits: Sequence[float]
) -> list[dict[str, Any]]:
    """One decision per (configuration group, TPOT limit) with at least two measured
    configurations within the limit."""
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, p in enumerate(points):
        if p.tpot_ms is not None and p.output_tokens_per_s is not None and preds[i]:
            groups[_group(p)].append(i)
    out = []
    for key, members in sorted(groups.items()):
        for limit in limits:
            within = [i for i in members if points[i].tpot_ms <= limit]
            if len(within) < 2:
                continue
            best = max(_per_gpu(points[i], points[i].output_tokens_per_s) for i in within)
            predicted_ok = [
                i
                for i in members
                if math.isfinite(preds[i]["tpot_ms"]) and preds[i]["tpot_ms"] <= limit
            ]
            if predicted_ok:
                pick = max(
                    predicted_ok, key=lambda i: _per_gpu(points[i], preds[i]["output_tokens_per_s"])
                )
            else:  # nothing predicted within the limit: pdtp offers its fastest configuration
                pick = min(members, key=lambda i: preds[i]["tpot_ms"])
            chosen = points[pick]
            meets = chosen.tpot_ms <= limit * (1.0 + SLO_TOLERANCE)
            score = _per_gpu(chosen, chosen.output_tokens_per_s) / best if meets else 0.0
            # The plan is the layout; the concurrency is what a serving stack turns down until
            # the limit holds. The chosen layout at its best measured concurrency within the
            # limit (0 only when no measured concurrency of it meets the limit).
            same = [i for i in within if _layout(points[i]) == _layout(chosen)]
            layout_score = (
                max(_per_gpu(points[i], points[i].output_tokens_per_s) for i in same) / best
                if same
                else 0.0
            )
            out.append(
                {
                    "model": key[0],
                    "group": "/".join(key),
                    "tpot_limit_ms": limit,
                    "configurations": len(members),
                    "within_limit": len(within),
                    "chosen": f"tp{chosen.tp}{'ep' if chosen.ep > 1 else ''}"
                    f"{'-dpattn' if chosen.dp_attention else ''}@c{chosen.concurrency}",
                    "meets_limit": meets,
                    "score": score,
                    "layout_score": max(layout_score, score),
                }
            )
    return out


def summary(ds: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_model: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in ds:
        by_model[d["model"]].append(d)
    by_model["all"] = list(ds)
    out = {}
    for model, items in sorted(by_model.items()):
        scores = [d["score"] for d in items]
        met = [d["score"] for d in items if d["meets_limit"]]
        layouts = [d.get("layout_score", d["score"]) for d in items]
        out[model] = {
            "decisions": len(items),
            "median": statistics.median(scores),
            "worst": min(scores),
            "layout_median": statistics.median(layouts),
            "layout_worst": min(layouts),
            "worst_within_limit": min(met) if met else math.nan,
            "slo_misses": sum(not d["meets_limit"] for d in items),
        }
    return out


def run(*, quick: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    acc = _accuracy()
    points = acc.load_all()
    iters = 25 if quick else 100
    result: dict[str, Any] = {"rows": len(points), "quick": quick, "splits": {}}
    splits = {
        "model": lambda p: p.model.name,
        "model_gpu": lambda p: f"{p.model.name}/{p.gpu.name}",
    }
    for name, key in splits.items():
        only = None
        if quick:  # one held-out family: Llama-3.3-70B on H200 / the Llama model
            only = ["llama-3.3-70b/h200"] if name == "model_gpu" else ["llama-3.3-70b"]
        preds, _ = acc.held_out(points, key, only=only, max_iterations=iters)
        ds = decisions(points, preds, TPOT_LIMITS_MS)
        result["splits"][name] = {"summary": summary(ds), "decisions": ds}
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


SPLIT_LABELS = {"model": "leave model out", "model_gpu": "leave (model, GPU) out"}


def render_markdown(result: dict[str, Any]) -> str:
    lines = [
        "Measured output tokens/s per GPU of pdtp's choice ÷ the measured best, per TPOT "
        "limit (0 where the choice misses the limit as measured):",
        "",
        "| constants | model | decisions | median | worst | worst meeting the limit | SLO misses "
        "| layout: median | layout: worst |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for split, data in result["splits"].items():
        for model, s in data["summary"].items():
            lines.append(
                f"| {SPLIT_LABELS[split]} | {model} | {s['decisions']} | {s['median']:.3f} | "
                f"{s['worst']:.3f} | {s['worst_within_limit']:.3f} | {s['slo_misses']} | "
                f"{s['layout_median']:.3f} | {s['layout_worst']:.3f} |"
            )
    lines += [
        "",
        "layout: the chosen layout run at its best measured concurrency within the limit (what "
        "a serving stack that lowers concurrency until the limit holds gets; 0 only where no "
        "measured concurrency of that layout meets it).",
    ]
    lines += ["", f"Targets: median ≥ {TARGET_MEDIAN}, worst ≥ {TARGET_WORST}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", "--fast", action="store_true", help="the small run (the suite's and CI's)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    result = run(quick=args.quick)
    sys.stdout.write(render_markdown(result))
    print(f"\n({result['rows']} rows, {result['seconds']} s)")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
