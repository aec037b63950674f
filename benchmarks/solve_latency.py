"""Solve latency: p50 / p99 of ``pdtp.solve`` for several GPU budgets, CP-SAT and the
exhaustive Rust oracle (``method="enumerate"``), after a warm-up that pays OR-Tools' import.

    python benchmarks/solve_latency.py [--repeat 200] [--json out.json]

Goal (issue 4): p50 <= 2 ms and p99 <= 10 ms at every size, status OPTIMAL.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import pdtp

BUDGETS = [8, 24, 256, 4096, 65536]
CASES = [
    ("llama-3.1-70b", "mi300x", "moriio"),
    ("qwen3-30b-a3b", "h200", "nixl"),
    ("deepseek-v3", "mi355x", "moriio"),
]


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


def measure(model: str, gpu: str, connector: str, budget: int, method: str, repeat: int) -> dict:
    times, statuses = [], set()
    for _ in range(repeat):
        t = time.perf_counter()
        plan = pdtp.solve(model, budget, gpu=gpu, connector=connector, method=method)
        times.append((time.perf_counter() - t) * 1e3)
        statuses.add(plan.status)
    return {
        "model": model,
        "gpu": gpu,
        "connector": connector,
        "gpus": budget,
        "method": method,
        "p50_ms": statistics.median(times),
        "p99_ms": percentile(times, 99),
        "status": ",".join(sorted(statuses)),
        "plan": f"{plan.prefill.instances}xP{plan.prefill.tp} + "
        f"{plan.decode.instances}xD{plan.decode.tp}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    for model, gpu, connector in CASES:  # warm-up: OR-Tools import, catalog load
        pdtp.solve(model, 24, gpu=gpu, connector=connector)
    rows = [
        measure(model, gpu, connector, budget, method, args.repeat)
        for model, gpu, connector in CASES
        for budget in BUDGETS
        for method in ("cpsat", "enumerate")
    ]
    print("| model | gpu | connector | gpus | method | p50 ms | p99 ms | status | plan |")
    print("|---|---|---|---:|---|---:|---:|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['gpu']} | {r['connector']} | {r['gpus']} | {r['method']} | "
            f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['status']} | {r['plan']} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
