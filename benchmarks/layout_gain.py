"""What layouts and aggregated serving add over TP-only P/D plans: writes
benchmarks/layout_gain.md.

    python benchmarks/layout_gain.py [--gpu mi300x,mi355x,h100,h200] [--gpus 8,16,32,64]
                                     [--out benchmarks/layout_gain.md]

For every MoE model of the catalog x GPU type x budget (default workload; MoRIIO on AMD,
NIXL on NVIDIA), three plans from the same performance model, rules, memory limits and SLOs:

* *TP-only*: ``pdtp.solve(mode="disagg", layouts="tp")`` — what pdtp planned before layouts;
* *layouts*: ``mode="disagg"`` with the default layouts (TP, TP+EP, DP-attention+EP; PP
  where nothing in one node holds the weights);
* *auto*: the default ``pdtp.solve`` — the better of P/D splits and aggregated instances.

The report gives the throughput gained over TP-only (median, max; over scenarios where
TP-only finds a plan) for *layouts* and *auto*, how many scenarios only layouts can serve,
how often aggregated serving wins (and by how much), and which layouts the plans use.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pdtp
from pdtp.sweeps import parse_ints, parse_names

HERE = Path(__file__).resolve().parent
AMD = ("mi300x", "mi325x", "mi355x")


def moe_models() -> list[str]:
    return [m.name for m in pdtp.models() if m.num_experts]


def solved(model: str, **kw: Any) -> pdtp.Plan | None:
    try:
        return pdtp.solve(model, time_limit_s=30.0, **kw)
    except pdtp.InfeasibleError:
        return None


def passes_check(plan: pdtp.Plan) -> bool:
    """The plan's instances pass vLLM's rules and fit memory (``pdtp.check`` with the GPU)."""
    common = {"connector": plan.connector, "gpu": plan.gpu, "workload": plan.workload}
    if plan.serving == "agg":
        return pdtp.check(plan.model, aggregated=plan.aggregated.layout, **common).ok
    return pdtp.check(
        plan.model, prefill_tp=plan.prefill.layout, decode_tp=plan.decode.layout, **common
    ).ok


def family(layout: pdtp.Layout) -> str:
    if layout.pp > 1:
        return "PP"
    if layout.dp > 1:
        return "DP-attention+EP" if layout.ep else "DP"
    return "TP+EP" if layout.ep else "TP"


def pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", default="mi300x,mi355x,h100,h200")
    ap.add_argument("--gpus", default="8,16,32,64")
    ap.add_argument("--out", default=None, help="default benchmarks/layout_gain.md")
    ap.add_argument("--fast", action="store_true", help="CI's run: a tiny grid (it must complete)")
    args = ap.parse_args(argv)
    if args.fast:  # one GPU type, one budget, the report to a scratch file
        args.gpu, args.gpus = "h100", "8"
        args.out = args.out or str(Path(tempfile.mkdtemp()) / "layout_gain.md")
    args.out = args.out or str(HERE / "layout_gain.md")
    gpus_list = parse_names(args.gpu)
    gpu_types = [gpus_list] if isinstance(gpus_list, str) else list(gpus_list)
    budgets = parse_ints(args.gpus)
    models = moe_models()
    started = time.perf_counter()
    rows = []
    for model in models:
        for gpu in gpu_types:
            connector = "moriio" if gpu in AMD else "nixl"
            for n in budgets:
                pool = {"gpus": n, "gpu": gpu, "connector": connector}
                tp = solved(model, mode="disagg", layouts="tp", **pool)
                lay = solved(model, mode="disagg", **pool)
                auto = solved(model, **pool)
                rows.append((model, gpu, n, tp, lay, auto))
        print(f"{model}: done", file=sys.stderr)
    took = time.perf_counter() - started
    plans = [p for r in rows for p in r[3:] if p is not None]
    unproven = sum(p.status != "OPTIMAL" for p in plans)
    failing = [p.summary() for p in plans if not passes_check(p)]

    gains_lay = [
        lay.requests_per_s / tp.requests_per_s - 1 for *_, tp, lay, _ in rows if tp and lay
    ]
    gains_auto = [
        auto.requests_per_s / tp.requests_per_s - 1 for *_, tp, _, auto in rows if tp and auto
    ]
    only_layouts = [r for r in rows if r[3] is None and r[5] is not None]
    decided = [r for r in rows if r[5] is not None]
    agg_wins = [r for r in decided if r[5].serving == "agg"]
    margins = [r[5].serving_gain for r in agg_wins if r[5].serving_gain is not None]
    dis_margins = [
        r[5].serving_gain
        for r in decided
        if r[5].serving == "disagg" and r[5].serving_gain is not None
    ]
    fams: collections.Counter[str] = collections.Counter()
    for r in decided:
        fams.update({family(s.layout) for _, s in r[5].sides})
    per_model = {}
    for model in models:
        g = [
            auto.requests_per_s / tp.requests_per_s - 1
            for m, _, _, tp, _, auto in rows
            if m == model and tp and auto
        ]
        per_model[model] = (statistics.median(g) if g else None, max(g) if g else None)
    best = max(
        ((r, r[5].requests_per_s / r[3].requests_per_s - 1) for r in rows if r[3] and r[5]),
        key=lambda x: x[1],
    )

    lines = [
        "# Layouts and aggregated serving against TP-only P/D plans",
        "",
        f"`python benchmarks/layout_gain.py --gpu {args.gpu} --gpus {args.gpus}` "
        f"({len(models)} MoE models of the catalog x {len(gpu_types)} GPU types x "
        f"{len(budgets)} budgets = {len(rows)} scenarios, default workload; MoRIIO on AMD, "
        f"NIXL on NVIDIA; {took:.0f} s). {len(plans)} plans, all CP-SAT's: {unproven} not "
        f"proven optimal, {len(failing)} failing `pdtp.check`. These are the performance "
        "model's predictions: DP-attention rows are extrapolated (the measured-serving file "
        "has EP rows, none with DP attention).",
        "",
        "| throughput over TP-only P/D | scenarios | median | max |",
        "|---|---|---|---|",
        f"| layouts (P/D) | {len(gains_lay)} | {pct(statistics.median(gains_lay))} | "
        f"{pct(max(gains_lay))} |",
        f"| layouts + aggregated (auto, the default) | {len(gains_auto)} | "
        f"{pct(statistics.median(gains_auto))} | {pct(max(gains_auto))} |",
        "",
        f"Largest gain: {best[0][0]} on {best[0][2]} x {best[0][1]}: TP-only "
        f"`{best[0][3].summary()}` {best[0][3].requests_per_s:.2f} req/s, auto "
        f"`{best[0][5].summary()}` {best[0][5].requests_per_s:.2f} req/s ({pct(best[1])}).",
        "",
        f"Scenarios only layouts can serve (TP-only infeasible): {len(only_layouts)} of "
        f"{len(rows)}"
        + (
            " — " + ", ".join(sorted({f"{m} on {g}" for m, g, *_ in only_layouts}))
            if only_layouts
            else ""
        )
        + ".",
        "",
        f"Aggregated serving wins {len(agg_wins)} of {len(decided)} scenarios "
        f"({len(agg_wins) / max(1, len(decided)):.0%}); where it wins, by a median "
        f"{pct(statistics.median(margins)) if margins else 'n/a'} (max "
        f"{pct(max(margins)) if margins else 'n/a'}) over the best P/D split; where P/D wins, "
        f"by a median {pct(statistics.median(dis_margins)) if dis_margins else 'n/a'}.",
        "",
        "Layout families in the chosen plans (a plan counts once per family it uses): "
        + ", ".join(f"{k} {v}" for k, v in fams.most_common())
        + ".",
        "",
        "| model | median gain (auto vs TP-only) | max |",
        "|---|---|---|",
    ]
    for model, (med, mx) in per_model.items():
        lines.append(
            f"| {model} | {pct(med) if med is not None else 'n/a'} | "
            f"{pct(mx) if mx is not None else 'n/a'} |"
        )
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:20]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
