"""Autoscaler latency: p50 / p99 of ``pdtp.size_for`` and ``pdtp.replan`` (a random-walk
demand trace per case, each re-plan starting from the previous tick's deployment held as a
dict), and of ``pdtp.solve_fleet`` for 20 models sharing 512 GPUs (64 nodes of 8), from an
under-subscribed pool to one four times over-subscribed, both objectives.

    python benchmarks/autoscale_latency.py [--repeat 200] [--fleet-repeat 20] [--search]
                                           [--json out.json]

``--search`` also times the fleet with CP-SAT unaided (no closed-form starting plan or
bounds): what the help is worth.

Goals (issue 6): size_for and replan p50 <= 5 ms; solve_fleet 20 x 512 proven optimal or
within 1 % in <= 1 s. Timings are after a warm-up that pays OR-Tools' and numpy's import.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

import pdtp
import pdtp.planning.fleet as fleet_module

CASES = [
    ("llama-3.1-70b", "mi300x", "moriio", 512),
    ("llama-3.1-8b", "h100", "moriio", 64),
    ("qwen3-30b-a3b", "h200", "nixl", 512),
    ("deepseek-v3", "mi300x", "moriio", 512),
]

FLEET_MODELS = [
    "llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b", "deepseek-v3", "mistral-7b-v0.3",
    "qwen3-8b", "gemma-2-27b", "gemma-2-9b", "mixtral-8x7b", "qwen2.5-72b", "qwen2.5-14b",
    "qwen3-32b", "gpt-oss-120b", "gpt-oss-20b", "phi-4", "llama-4-scout", "yi-34b", "qwen3-14b",
    "falcon-40b", "command-r-plus",
]  # fmt: skip
# Demand scale per scenario: 0.5 leaves GPUs idle; 1, 2 and 4 over-subscribe the pool.
FLEET_SCALES = [0.5, 1.0, 2.0, 4.0]


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


def stats(times: list[float]) -> dict[str, float]:
    return {"p50_ms": statistics.median(times), "p99_ms": percentile(times, 99)}


def trace(rng: random.Random, n: int, top: float) -> list[float]:
    """A bounded random walk of demands in (0, top]."""
    d, out = top * 0.3, []
    for _ in range(n):
        d = min(top, max(top * 0.02, d * rng.uniform(0.8, 1.25)))
        out.append(round(d, 3))
    return out


def bench_size_for_and_replan(repeat: int) -> list[dict[str, Any]]:
    rows = []
    for model, gpu, connector, max_gpus in CASES:
        top = pdtp.solve(model, max_gpus, gpu=gpu, connector=connector).requests_per_s * 0.9
        demands = trace(random.Random(7), repeat, top)
        sizing, replanning, moved = [], [], 0
        cpu: dict[str, list[float]] = {"size_for": [], "replan": []}
        current: dict[str, Any] | None = None
        for demand in demands:
            t, c = time.perf_counter(), time.process_time()
            plan = pdtp.size_for(model, demand, max_gpus=max_gpus, gpu=gpu, connector=connector)
            sizing.append((time.perf_counter() - t) * 1e3)
            cpu["size_for"].append((time.process_time() - c) * 1e3)
            if current is None:
                current = plan.to_dict()  # any kind: a P/D split or aggregated instances
                continue
            t, c = time.perf_counter(), time.process_time()
            r = pdtp.replan(current, demand, max_gpus=max_gpus)
            replanning.append((time.perf_counter() - t) * 1e3)
            cpu["replan"].append((time.process_time() - c) * 1e3)
            moved += r.changed
            current = r.plan.to_dict()
        for name, times in (("size_for", sizing), ("replan", replanning)):
            rows.append(
                {
                    "call": name,
                    "model": model,
                    "gpu": gpu,
                    "connector": connector,
                    "max_gpus": max_gpus,
                    "calls": len(times),
                    **stats(times),
                    # The process's own CPU time: what a busy shared machine inflates least.
                    "cpu_p50_ms": statistics.median(cpu[name]) if cpu[name] else 0.0,
                    "note": f"{moved} of {len(times)} ticks moved" if name == "replan" else "",
                }
            )
    return rows


def fleet_demands(scale: float) -> list[tuple[str, float, None, float]]:
    return [
        (m, round(scale * (10 + 7 * i), 1), None, 1.0 + i % 3) for i, m in enumerate(FLEET_MODELS)
    ]


def bench_fleet(repeat: int, search: bool, scales: list[float]) -> list[dict[str, Any]]:
    rows = []
    helped = fleet_module._Bounds
    if search:
        fleet_module._Bounds = None  # type: ignore[assignment,misc]
    try:
        for scale in scales:
            for objective in ("max_min", "weighted"):
                times, statuses, gaps = [], set(), []
                for _ in range(repeat):
                    t = time.perf_counter()
                    fp = pdtp.solve_fleet(
                        fleet_demands(scale),
                        gpus=512,
                        gpu="mi300x",
                        objective=objective,
                        time_limit_s=1.0,
                    )
                    times.append((time.perf_counter() - t) * 1e3)
                    statuses.add(fp.status)
                    gaps.append(fp.gap)
                rows.append(
                    {
                        "call": "solve_fleet" + (" (search)" if search else ""),
                        "scale": scale,
                        "objective": objective,
                        "calls": repeat,
                        **stats(times),
                        "status": ",".join(sorted(statuses)),
                        "max_gap": max(g if g is not None else 1.0 for g in gaps),
                        "gpus_used": fp.gpus_used,
                        "min_served": fp.min_served_fraction,
                    }
                )
    finally:
        fleet_module._Bounds = helped
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=200, help="trace ticks per size_for case")
    ap.add_argument("--fleet-repeat", type=int, default=20, help="solve_fleet runs per scenario")
    ap.add_argument("--search", action="store_true", help="also time the CP-SAT-only route")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--fast", action="store_true", help="CI's run: a tiny grid (it must complete)")
    args = ap.parse_args()
    scales = FLEET_SCALES
    if args.fast:  # a short trace per case, one fleet scenario per objective, run once
        args.repeat, args.fleet_repeat, scales = 4, 1, FLEET_SCALES[1:2]

    # Warm-up: catalog, OR-Tools and numpy imports.
    pdtp.solve_fleet([("llama-3.1-8b", 50.0), ("qwen3-8b", 50.0)], gpus=8, gpu="h100")

    rows = bench_size_for_and_replan(args.repeat)
    print(
        f"{'call':<9} {'model':<14} {'gpu':<7} {'max_gpus':>8} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'CPU p50':>7}  note"
    )
    for r in rows:
        print(
            f"{r['call']:<9} {r['model']:<14} {r['gpu']:<7} {r['max_gpus']:>8} "
            f"{r['p50_ms']:>7.3f} {r['p99_ms']:>7.3f} {r['cpu_p50_ms']:>7.3f}  {r['note']}"
        )
    fleet_rows = bench_fleet(args.fleet_repeat, False, scales)
    if args.search:
        fleet_rows += bench_fleet(max(1, args.fleet_repeat // 10), True, scales)
    print()
    print("solve_fleet: 20 models, 512 GPUs (64 nodes x 8), mi300x, time_limit_s=1")
    print("(search: CP-SAT without the closed-form starting plan and bounds)")
    print(
        f"{'route':<21} {'scale':>5} {'objective':<9} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'status':<16} {'max gap':>8} {'gpus':>5} {'min served':>10}"
    )
    for r in fleet_rows:
        print(
            f"{r['call']:<21} {r['scale']:>5} {r['objective']:<9} {r['p50_ms']:>7.1f} "
            f"{r['p99_ms']:>7.1f} {r['status']:<16} {r['max_gap']:>8.4f} {r['gpus_used']:>5} "
            f"{r['min_served']:>10.3f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"single": rows, "fleet": fleet_rows}, f, indent=2)


if __name__ == "__main__":
    main()
