"""CP-SAT against the exhaustive Rust oracle on the full grid: every catalog model x every
GPU type x every connector x budgets 1..128 (CI checks a sample of budgets).

    python benchmarks/oracle_agreement.py [--budgets 1-128] [--json PATH]

Counts scenarios where both agree on the plan (same TP sizes and instance counts), where
both find it infeasible, and any disagreement (printed; the exit code is 1 if any).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import pdtp
from pdtp.connectors import connector_names
from pdtp.sweeps import parse_ints


def outcome(model: object, budget: int, gpu: str, connector: str, method: str) -> object:
    try:
        p = pdtp.solve(model, budget, gpu=gpu, connector=connector, method=method)
    except pdtp.InfeasibleError:
        return "INFEASIBLE"
    return (p.prefill.tp, p.prefill.instances, p.decode.tp, p.decode.instances, p.status)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--budgets", default="1-128")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    budgets = parse_ints(args.budgets, "budgets")
    counts = {"agree_plan": 0, "agree_infeasible": 0, "disagree": 0}
    bad: list[dict[str, object]] = []
    start = time.perf_counter()
    for m in pdtp.models():
        for g in pdtp.gpus():
            for c in connector_names():
                for b in budgets:
                    cp = outcome(m, b, g.name, c, "cpsat")
                    ex = outcome(m, b, g.name, c, "enumerate")
                    if cp != ex:
                        counts["disagree"] += 1
                        bad.append({"model": m.name, "gpu": g.name, "connector": c, "gpus": b,
                                    "cpsat": cp, "enumerate": ex})  # fmt: skip
                    elif cp == "INFEASIBLE":
                        counts["agree_infeasible"] += 1
                    else:
                        counts["agree_plan"] += 1
    total = sum(counts.values())
    wall = time.perf_counter() - start
    print(
        f"{total:,} scenarios ({len(pdtp.models())} models x {len(pdtp.gpus())} GPU types x "
        f"{len(connector_names())} connectors x {len(budgets)} budgets) in {wall:.0f} s"
    )
    for k, v in counts.items():
        print(f"  {k}: {v:,}")
    for row in bad[:20]:
        print("  DISAGREE", row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"counts": counts, "disagreements": bad}, f, indent=2)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
