"""Decision accuracy: does the configuration pdtp would pick match the measured best?

    python benchmarks/decision_accuracy.py [--quick | --fast | --disaggregated-only] [--json PATH]

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

The measured **disaggregated** runs are decided alike per (model, dtype, GPU type, framework,
ISL/OSL, TPOT limit), with constants fitted without their model: the run the P/D closed loop
picks, and the deployment (layouts and instance counts) :func:`pdtp.evaluate` rates highest
at the limit, scored at its best measured run within it (``pd_decisions``).

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


# ---- disaggregated (P/D) deployments ---------------------------------------------------------


def _pd_group(run: dict[str, Any]) -> tuple[str, ...]:
    d = run["decode"]
    return (
        d.model.name,
        d.model.weight_dtype,
        d.gpu.name,
        run["framework"],
        _length_class(d.isl),
        _length_class(d.osl),
    )


def _deployment(run: dict[str, Any]) -> str:
    return (
        f"{run['prefill_workers']}x{run['prefill_layout_text']}+"
        f"{run['decode_workers']}x{run['decode_layout_text']}"
    )


def _pd_per_gpu(run: dict[str, Any], tokens_per_s: float) -> float:
    return float(tokens_per_s) / max(int(run["gpus"]), 1)


def _rank(e: dict[str, Any]) -> tuple[bool, float]:
    """Valid estimates first, then by output tokens/s per GPU."""
    v = e["output_tokens_per_s_per_gpu"]
    return (bool(e["valid"]), v if math.isfinite(v) else -math.inf)


def pd_decisions(
    runs: Sequence[dict[str, Any]],
    loop: Sequence[dict[str, float]],
    evaluated: Any,
    limits: Sequence[float],
) -> list[dict[str, Any]]:
    """One decision per (model, dtype, GPU type, framework, ISL/OSL, TPOT limit) with at least
    two measured P/D runs within the limit, made twice:

    - **closed loop**: the run (deployment at its concurrency) with the highest predicted
      output tokens/s per GPU among those the P/D loop (``accuracy.predict_disaggregated``)
      predicts within the limit; scored as the aggregated decisions are (0 when its measured
      TPOT misses the limit);
    - **evaluate**: the deployment (layouts and instance counts) that :func:`pdtp.evaluate`
      rates highest in output tokens/s per GPU at the limit (``evaluated(run, limit)``: what a
      user asking pdtp to compare them gets), valid ones first; scored at its best measured
      run within the limit (0 when none of its runs meets it).

    The score is the measured output tokens/s per GPU of the choice over the measured best
    within the limit."""
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, r in enumerate(runs):
        groups[_pd_group(r)].append(i)
    out = []
    for key, members in sorted(groups.items()):
        for limit in limits:
            within = [i for i in members if runs[i]["measured"]["tpot_ms"] <= limit]
            if len(within) < 2:
                continue

            def measured(i: int) -> float:
                return _pd_per_gpu(runs[i], runs[i]["measured"]["output_tokens_per_s"])

            best = max(measured(i) for i in within)
            ok = [
                i
                for i in members
                if math.isfinite(loop[i]["tpot_ms"]) and loop[i]["tpot_ms"] <= limit
            ]
            if ok:
                pick = max(ok, key=lambda i: _pd_per_gpu(runs[i], loop[i]["output_tokens_per_s"]))
            else:
                pick = min(members, key=lambda i: loop[i]["tpot_ms"])
            meets = runs[pick]["measured"]["tpot_ms"] <= limit * (1.0 + SLO_TOLERANCE)
            deployments: dict[str, list[int]] = defaultdict(list)
            for i in members:
                deployments[_deployment(runs[i])].append(i)
            rated = {
                name: evaluated(runs[idx[0]], limit) for name, idx in sorted(deployments.items())
            }
            chosen = max(rated, key=lambda name: _rank(rated[name]))
            hits = [measured(i) for i in deployments[chosen] if i in within]
            out.append(
                {
                    "model": key[0],
                    "group": "/".join(key),
                    "tpot_limit_ms": limit,
                    "configurations": len(members),
                    "deployments": len(deployments),
                    "within_limit": len(within),
                    "chosen": f"{_deployment(runs[pick])}@c{runs[pick]['decode'].concurrency}",
                    "meets_limit": meets,
                    "score": measured(pick) / best if meets else 0.0,
                    "evaluate_chosen": chosen,
                    "evaluate_valid": bool(rated[chosen]["valid"]),
                    "evaluate_score": max(hits) / best if hits else 0.0,
                    # No run of the chosen deployment within the limit was measured (it may
                    # meet it at a concurrency the data lacks): scored 0, counted apart.
                    "evaluate_measured": bool(hits),
                }
            )
    return out


def pd_summary(ds: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in ds:
        by[d["group"].split("/")[3]].append(d)
    by["all"] = list(ds)
    out = {}
    for name, items in sorted(by.items()):
        loop = [d["score"] for d in items]
        ev = [d["evaluate_score"] for d in items]
        out[name] = {
            "decisions": len(items),
            "median": statistics.median(loop),
            "worst": min(loop),
            "slo_misses": sum(not d["meets_limit"] for d in items),
            "evaluate_median": statistics.median(ev),
            "evaluate_worst": min(ev),
            "evaluate_unmeasured": sum(not d["evaluate_measured"] for d in items),
            "evaluate_worst_measured": min(
                (d["evaluate_score"] for d in items if d["evaluate_measured"]), default=math.nan
            ),
        }
    return out


def run_disaggregated(acc: Any, *, quick: bool = False) -> dict[str, Any]:
    """P/D decisions with constants fitted without the runs' model (DeepSeek-R1: every P/D
    run), the split the targets are judged on."""
    points = acc.load_all()
    runs = acc.load_disaggregated()
    models = {r["decode"].model.name for r in runs}
    table = acc.fit_table(
        [p for p in points if p.model.name not in models], max_iterations=25 if quick else 100
    )
    loop = [acc.predict_disaggregated(r, table) for r in runs]
    cache: dict[tuple[str, float], dict[str, Any]] = {}

    def evaluated(r: dict[str, Any], limit: float) -> dict[str, Any]:
        k = (f"{'/'.join(_pd_group(r))}/{_deployment(r)}", limit)
        if k not in cache:
            cache[k] = acc.evaluate_disaggregated(r, table, limit)
        return cache[k]

    ds = pd_decisions(runs, loop, evaluated, TPOT_LIMITS_MS)
    return {"summary": pd_summary(ds), "decisions": ds}


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


def run(*, quick: bool = False, disaggregated_only: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    acc = _accuracy()
    points = acc.load_all()
    iters = 25 if quick else 100
    result: dict[str, Any] = {"rows": len(points), "quick": quick, "splits": {}}
    if disaggregated_only:
        result["disaggregated"] = run_disaggregated(acc, quick=quick)
        result["seconds"] = round(time.monotonic() - started, 1)
        return result
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
    result["disaggregated"] = run_disaggregated(acc, quick=quick)
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


SPLIT_LABELS = {"model": "leave model out", "model_gpu": "leave (model, GPU) out"}


def render_markdown(result: dict[str, Any]) -> str:
    lines = (
        [
            "Measured output tokens/s per GPU of pdtp's choice ÷ the measured best, per TPOT "
            "limit (0 where the choice misses the limit as measured):",
            "",
            "| constants | model | decisions | median | worst | worst meeting the limit "
            "| SLO misses | layout: median | layout: worst |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        if result["splits"]
        else []
    )
    for split, data in result["splits"].items():
        for model, s in data["summary"].items():
            lines.append(
                f"| {SPLIT_LABELS[split]} | {model} | {s['decisions']} | {s['median']:.3f} | "
                f"{s['worst']:.3f} | {s['worst_within_limit']:.3f} | {s['slo_misses']} | "
                f"{s['layout_median']:.3f} | {s['layout_worst']:.3f} |"
            )
    if result["splits"]:
        lines += [
            "",
            "layout: the chosen layout run at its best measured concurrency within the limit "
            "(what a serving stack that lowers concurrency until the limit holds gets; 0 only "
            "where no measured concurrency of that layout meets it).",
        ]
    pd = result.get("disaggregated")
    if pd:
        lines += [
            "",
            "Measured P/D deployments (constants fitted without DeepSeek-R1, the runs' model; "
            "per framework): the run the closed loop picks, and the deployment "
            "`pdtp.evaluate` rates highest at the limit (at its best measured run within it):",
            "",
            "| framework | decisions | loop: median | loop: worst | SLO misses "
            "| evaluate: median | evaluate: worst | evaluate: worst measured | unmeasured |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, s in pd["summary"].items():
            lines.append(
                f"| {name} | {s['decisions']} | {s['median']:.3f} | {s['worst']:.3f} | "
                f"{s['slo_misses']} | {s['evaluate_median']:.3f} | {s['evaluate_worst']:.3f} | "
                f"{s['evaluate_worst_measured']:.3f} | {s['evaluate_unmeasured']} |"
            )
        lines += [
            "",
            "unmeasured: evaluate's choice has no measured run within the limit (scored 0; it "
            "may meet the limit at a concurrency the data lacks); worst measured: the worst "
            "among the others.",
        ]
    lines += ["", f"Targets: median ≥ {TARGET_MEDIAN}, worst ≥ {TARGET_WORST}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", "--fast", action="store_true", help="the small run (the suite's and CI's)"
    )
    parser.add_argument(
        "--disaggregated-only",
        action="store_true",
        help="only the P/D decisions (the README's 'Disaggregated runs' table)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, disaggregated_only=args.disaggregated_only)
    sys.stdout.write(render_markdown(result))
    print(f"\n({result['rows']} rows, {result['seconds']} s)")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
