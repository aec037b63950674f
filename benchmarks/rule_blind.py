"""What ignoring the connector's heterogeneous-TP rules costs: writes benchmarks/rule_blind.md.

    python benchmarks/rule_blind.py [--gpu mi300x,h200,b200] [--gpus 1-512]
                                    [--connector moriio,nixl] [--out benchmarks/rule_blind.md]

For every scenario of the grid (every catalog model x GPU budgets x GPU types x connectors,
default workload) ``pdtp.sweep`` finds two plans with the same performance model, memory
limits, SLOs and budget:

* the *rule-blind* optimum: the best (prefill TP x instances, decode TP x instances) over
  every pair of TP sizes that load the model, ignoring the connector's pair rules (one size
  divides the other; MoRIIO's P != D needs min(P, D) >= KV heads unless MLA);
* the *valid* optimum: the same search over pairs vLLM accepts.

The report counts how often the rule-blind optimum is a pair vLLM rejects (with the rule it
breaks) and how much throughput the valid optimum gives up against it.
"""

from __future__ import annotations

import argparse
import collections
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pdtp
from pdtp.check import check
from pdtp.sweeps import parse_ints, parse_names

HERE = Path(__file__).resolve().parent
BUCKETS = (
    ("< 1%", 0.01),
    ("1-5%", 0.05),
    ("5-10%", 0.10),
    ("10-25%", 0.25),
    ("25-50%", 0.50),
    ("50-100%", 1.0),
)


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f}%"


def _quantile(xs: list[float], q: float) -> float:
    if not xs:
        return math.nan
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


def _loss(r: dict[str, Any]) -> float:
    """Share of the rule-blind throughput the valid optimum gives up (1.0: no valid plan)."""
    blind = r["rule_blind_requests_per_s"]
    valid = r["requests_per_s"] if r["status"] == "OPTIMAL" else 0.0
    return 1.0 - valid / blind


def analyse(rows: list[dict[str, Any]]) -> dict[str, Any]:
    codes: dict[tuple[str, str, int, int], str] = {}

    def rule(r: dict[str, Any]) -> str:
        key = (r["model"], r["connector"], r["rule_blind_prefill_tp"], r["rule_blind_decode_tp"])
        if key not in codes:
            res = check(key[0], key[2], key[3], connector=key[1], alternatives=0)
            codes[key] = res.violations[0].code if res.violations else "valid"
        return codes[key]

    out: dict[str, Any] = {}
    for conn in sorted({r["connector"] for r in rows}):
        rs = [r for r in rows if r["connector"] == conn]
        blind = [r for r in rs if r["rule_blind_requests_per_s"] is not None]
        rejected = [r for r in blind if not r["rule_blind_valid"]]
        no_valid = [r for r in rejected if r["status"] != "OPTIMAL"]
        losses = [_loss(r) for r in rejected]
        losses_feasible = [_loss(r) for r in rejected if r["status"] == "OPTIMAL"]
        by_rule = collections.Counter(rule(r) for r in rejected)
        by_model: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        model_losses: dict[str, list[float]] = collections.defaultdict(list)
        for r in rejected:
            model_losses[r["model"]].append(_loss(r))
        by_gpu: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        for r in blind:
            bad = int(not r["rule_blind_valid"])
            by_model[r["model"]][0] += bad
            by_model[r["model"]][1] += 1
            by_gpu[r["gpu"]][0] += bad
            by_gpu[r["gpu"]][1] += 1
        total_blind = sum(r["rule_blind_requests_per_s"] for r in blind)
        total_valid = sum(r["requests_per_s"] for r in blind if r["status"] == "OPTIMAL")
        # The largest loss of each (model, GPU), largest first.
        worst_of: dict[tuple[str, str], dict[str, Any]] = {}
        for r in sorted(rejected, key=lambda r: (-_loss(r), r["gpus"])):
            worst_of.setdefault((r["model"], r["gpu"]), r)
        worst = sorted(worst_of.values(), key=lambda r: (-_loss(r), r["model"], r["gpu"]))
        buckets = collections.Counter(
            next(label for label, hi in BUCKETS if x <= hi) for x in losses
        )
        out[conn] = {
            "scenarios": len(rs),
            "blind": len(blind),
            "feasible": sum(r["status"] == "OPTIMAL" for r in rs),
            "rejected": len(rejected),
            "no_valid": len(no_valid),
            "loss_mean": statistics.fmean(losses) if losses else 0.0,
            "loss_median": statistics.median(losses) if losses else 0.0,
            "loss_p90": _quantile(losses, 0.9),
            "loss_max": max(losses, default=0.0),
            "loss_feasible_median": statistics.median(losses_feasible) if losses_feasible else 0.0,
            "aggregate_loss": 1 - total_valid / total_blind if total_blind else 0.0,
            "by_rule": by_rule.most_common(),
            "by_model": sorted(by_model.items(), key=lambda kv: (-kv[1][0] / kv[1][1], kv[0])),
            "by_gpu": sorted(by_gpu.items()),
            "worst": worst[:8],
            "buckets": [(label, buckets.get(label, 0)) for label, _ in BUCKETS],
            "model_loss": {m: statistics.median(v) for m, v in model_losses.items()},
            "models_affected": sum(1 for v in by_model.values() if v[0]),
            "models": len(by_model),
        }
    return out


def _plan(p: Any, np_: Any, d: Any, nd: Any) -> str:
    return f"{np_}xP{p} + {nd}xD{d}"


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    res = analyse(rows)
    lines = [
        "# Rule-blind planning: how often vLLM would reject it, and what the rules cost",
        "",
        "_Generated by `python benchmarks/rule_blind.py` "
        f"(pdtp {pdtp.__version__}); do not edit by hand._",
        "",
        f"Grid: {meta['models']} catalog models x GPU budgets {meta['budgets']} x "
        f"{len(meta['gpus'])} GPU types ({', '.join(meta['gpus'])}) x connectors "
        f"({', '.join(meta['connectors'])}); default workload (isl 2048, osl 512, TTFT <= 2000 "
        f"ms, TPOT <= 50 ms); max TP = GPUs per node. {len(rows):,} scenarios.",
        "",
        "For each scenario, the *rule-blind* optimum is the best plan over every pair of TP "
        "sizes that load the model (same performance model, memory, SLOs and budget) but "
        "ignoring the connector's heterogeneous-TP rules; the *valid* optimum searches only "
        "pairs vLLM accepts. *Rejected*: the rule-blind optimum is a pair vLLM refuses. "
        "*Throughput given up*: 1 - valid / rule-blind requests/s (100% when no valid plan "
        "exists at all).",
        "",
        "## Headline",
        "",
    ]
    for conn, r in res.items():
        if not r["rejected"]:
            lines.append(
                f"- **{conn}**: the rule-blind optimum is **never** rejected ({r['blind']:,} "
                f"scenarios): it is always a pair {conn} accepts, so the rules cost nothing on "
                "this grid."
            )
            continue
        lines.append(
            f"- **{conn}**: the rule-blind optimum would be rejected by vLLM in "
            f"**{r['rejected']:,} of {r['blind']:,} scenarios "
            f"({_pct(r['rejected'] / r['blind'])})**, for {r['models_affected']} of "
            f"{r['models']} models. There the valid optimum gives up a median "
            f"**{_pct(r['loss_median'])}** of the rule-blind requests/s (mean "
            f"{_pct(r['loss_mean'])}, p90 {_pct(r['loss_p90'])}, max {_pct(r['loss_max'])}); "
            f"in {r['no_valid']:,} scenarios no valid plan exists at all. Over the whole grid "
            f"the rules cost {_pct(r['aggregate_loss'])} of the summed rule-blind throughput."
        )
    lines.append("")
    for conn, r in res.items():
        lines += [
            f"## {conn}",
            "",
            "| scenarios | valid plan exists | rule-blind plan exists | rejected | "
            "no valid plan | given up: median | mean | p90 | max |",
            "|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
            f"| {r['scenarios']:,} | {r['feasible']:,} | {r['blind']:,} | {r['rejected']:,} "
            f"({_pct(r['rejected'] / r['blind'])}) | {r['no_valid']:,} | "
            f"{_pct(r['loss_median'])} | {_pct(r['loss_mean'])} | {_pct(r['loss_p90'])} | "
            f"{_pct(r['loss_max'])} |",
            "",
        ]
        if r["by_rule"]:
            lines += ["Rule the rejected rule-blind plan breaks:", ""]
            lines += ["| rule (check code) | scenarios |", "|---|--:|"]
            lines += [f"| `{code}` | {n:,} |" for code, n in r["by_rule"]]
            lines.append("")
        if r["rejected"]:
            lines += [
                "Throughput given up where the rule-blind plan is rejected:",
                "",
                "| given up | " + " | ".join(label for label, _ in r["buckets"]) + " |",
                "|---|" + "--:|" * len(r["buckets"]),
                "| scenarios | " + " | ".join(f"{n:,}" for _, n in r["buckets"]) + " |",
                "",
            ]
        if r["rejected"]:
            lines += ["By GPU type:", "", "| GPU | rejected | of |", "|---|--:|--:|"]
            lines += [f"| {g} | {a:,} ({_pct(a / b)}) | {b:,} |" for g, (a, b) in r["by_gpu"]]
            lines.append("")
        affected = [(m, v) for m, v in r["by_model"] if v[0]]
        if affected:
            lines += [
                "Models whose rule-blind optimum is rejected (share of their scenarios):",
                "",
                "| model | rejected | of | median given up there |",
                "|---|--:|--:|--:|",
            ]
            lines += [
                f"| {m} | {a:,} ({_pct(a / b)}) | {b:,} | {_pct(r['model_loss'][m])} |"
                for m, (a, b) in affected
            ]
            lines.append("")
        if r["worst"]:
            lines += [
                "Largest losses (the worst budget of each model and GPU type):",
                "",
                "| model | GPU | budget | rule-blind plan | req/s | valid plan | req/s | "
                "given up |",
                "|---|---|--:|---|--:|---|--:|--:|",
            ]
            for w in r["worst"]:
                valid = (
                    _plan(
                        w["prefill_tp"],
                        w["prefill_instances"],
                        w["decode_tp"],
                        w["decode_instances"],
                    )
                    if w["status"] == "OPTIMAL"
                    else "none"
                )
                vr = f"{w['requests_per_s']:.2f}" if w["status"] == "OPTIMAL" else "0"
                lines.append(
                    f"| {w['model']} | {w['gpu']} | {w['gpus']} | "
                    + _plan(
                        w["rule_blind_prefill_tp"],
                        w["rule_blind_prefill_instances"],
                        w["rule_blind_decode_tp"],
                        w["rule_blind_decode_instances"],
                    )
                    + f" | {w['rule_blind_requests_per_s']:.2f} | {valid} | {vr} | "
                    f"{_pct(_loss(w))} |"
                )
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", default="mi300x,h200,b200")
    ap.add_argument("--gpus", default="1-512")
    ap.add_argument("--connector", default="moriio,nixl")
    ap.add_argument("--out", default=None, help="default benchmarks/rule_blind.md")
    ap.add_argument("--fast", action="store_true", help="CI's run: a tiny grid (it must complete)")
    args = ap.parse_args(argv)
    if args.fast:  # one GPU type, budgets 1-8, the report to a scratch file
        args.gpu, args.gpus = "h100", "1-8"
        args.out = args.out or str(Path(tempfile.mkdtemp()) / "rule_blind.md")
    args.out = args.out or str(HERE / "rule_blind.md")
    gpus = parse_names(args.gpu)
    gpus = [gpus] if isinstance(gpus, str) else gpus
    conns = parse_names(args.connector)
    conns = [conns] if isinstance(conns, str) else conns
    budgets = sorted(set(parse_ints(args.gpus)))
    start = time.perf_counter()
    rows = pdtp.sweep("all", gpus=budgets, gpu=gpus, connector=conns, as_frame=False)
    seconds = time.perf_counter() - start
    meta = {
        "models": len(pdtp.models()),
        "budgets": f"{budgets[0]}..{budgets[-1]}" if len(budgets) > 1 else str(budgets[0]),
        "gpus": gpus,
        "connectors": conns,
        "seconds": seconds,
    }
    text = report(rows, meta)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    head = text.split("## Headline\n\n", 1)[1].split("\n\n", 1)[0]
    print(head)
    print(f"\n{len(rows):,} scenarios swept in {seconds:.2f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
