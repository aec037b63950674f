"""CP-SAT against the exhaustive Rust oracle: every catalog model x every GPU type x every
connector x budgets 1..128 (full nodes, the last one partial), plus sampled pools of partly
free nodes and of two GPU types, for ``solve``; and sampled ``size_for`` demands.

    python benchmarks/oracle_agreement.py [--budgets 1-128] [--samples 2000] [--workers N]
                                          [--json PATH]

Counts scenarios where both agree on the plan (same TP sizes, instance counts and GPU
types), where both find it infeasible, and any disagreement (printed; exit code 1 if any),
and who proved the default planner's plans (``enumeration``: the competitive pairs' counts
enumerated, ``cpsat``). ``method="enumerate"`` is the full enumeration (every pair x every
count x, for shared pools, every packing), none of the closed forms' shortcuts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pdtp
from pdtp.connectors import connector_names
from pdtp.sweeps import parse_ints

AMD, NVIDIA = ["mi300x", "mi325x", "mi355x"], ["a100", "h100", "h200", "b200"]


def outcome(
    planner: str, args: tuple[Any, ...], kw: dict[str, Any], method: str
) -> tuple[Any, str | None]:
    """The plan's decision (or "INFEASIBLE") and who proved it."""
    try:
        p = getattr(pdtp, planner)(*args, **kw, method=method)
    except pdtp.InfeasibleError:
        return "INFEASIBLE", None
    # Every kind of instance (prefill and decode, or aggregated): layout, count, GPU type.
    sides = tuple((role, str(s.layout), s.instances, s.gpu) for role, s in p.sides)
    return (sides, p.status), p.proof


def compare(job: tuple[str, tuple[Any, ...], dict[str, Any]]) -> tuple[str, Any, str | None]:
    planner, args, kw = job
    cp, proof = outcome(planner, args, kw, "cpsat")
    ex, _ = outcome(planner, args, kw, "enumerate")
    if cp != ex:
        row = {"planner": planner, "args": args, **kw, "cpsat": cp, "enumerate": ex}
        return "disagree", row, proof
    return ("agree_infeasible" if cp == "INFEASIBLE" else "agree_plan"), None, proof


def jobs(
    budgets: list[int], samples: int, models: list[str] | None = None, gpus: list[str] | None = None
) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    names = models or [m.name for m in pdtp.models()]
    out = [
        ("solve", (m,), {"gpus": b, "gpu": g, "connector": c})
        for m in names
        for g in gpus or [g.name for g in pdtp.gpus()]
        for c in connector_names()
        for b in budgets
    ]
    rng = random.Random(0)
    for _ in range(samples):
        m = rng.choice(names)
        connector, family = rng.choice([("moriio", AMD), ("nixl", NVIDIA)])
        if rng.random() < 0.5:
            nodes: Any = [rng.randint(1, 8) for _ in range(rng.randint(1, 8))]
            out.append(
                ("solve", (m,), {"nodes": nodes, "gpu": rng.choice(family), "connector": connector})
            )
        else:
            a, b = rng.sample(family, 2)
            nodes = {a: [rng.randint(1, 8) for _ in range(rng.randint(1, 4))],
                     b: [rng.randint(1, 8) for _ in range(rng.randint(1, 4))]}  # fmt: skip
            out.append(("solve", (m,), {"nodes": nodes, "connector": connector}))
        demand = rng.choice([0.0, 1.0, 5.0, 20.0, 80.0])
        out.append(
            ("size_for", (m, demand), {"max_gpus": rng.choice(budgets), "gpu": rng.choice(family),
                                       "connector": connector})
        )  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--budgets", default="1-128")
    ap.add_argument("--samples", type=int, default=2000, help="node / two-type / demand samples")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--fast", action="store_true", help="CI's run: a tiny grid (it must complete)")
    args = ap.parse_args()
    models = gpus = None
    if args.fast:
        args.budgets, args.samples, args.workers = "1-4", 4, 1
        models, gpus = ["llama-3.1-8b", "qwen3-30b-a3b"], ["mi300x", "h100"]
    work = jobs(parse_ints(args.budgets, "budgets"), args.samples, models, gpus)
    counts = {"agree_plan": 0, "agree_infeasible": 0, "disagree": 0}
    proofs: dict[str, int] = {}  # who proved the default planner's plans
    bad: list[dict[str, Any]] = []
    start = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        for kind, row, proof in pool.map(compare, work, chunksize=64):
            counts[kind] += 1
            if proof is not None:
                proofs[proof] = proofs.get(proof, 0) + 1
            if row is not None:
                bad.append(row)
    wall = time.perf_counter() - start
    print(f"{sum(counts.values()):,} scenarios in {wall:.0f} s on {args.workers} processes")
    for k, v in counts.items():
        print(f"  {k}: {v:,}")
    for k, v in sorted(proofs.items()):
        print(f"  plans proven by {k}: {v:,}")
    for row in bad[:20]:
        print("  DISAGREE", row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"counts": counts, "proofs": proofs, "disagreements": bad}, f, indent=2, default=str
            )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
