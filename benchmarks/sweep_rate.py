"""Sweep throughput: scenarios solved per second over the whole catalog.

    python benchmarks/sweep_rate.py [--gpu mi300x,h200,b200] [--gpus 1-512] [--repeat 3]
                                    [--workers 1,2] [--json PATH]

The grid is every catalog model x GPU budgets 1..512 x three GPU types (default workload,
MoRIIO, solve's defaults: mode auto, the default layouts): 44 x 512 x 3 = 67,584 scenarios.
Each row is the plan ``pdtp.solve`` returns for its scenario (tests/test_sweep.py checks a
sample against both the oracle and CP-SAT). Reported per worker count: the median wall time
of ``pdtp.sweep`` returning a list of dicts and returning a pandas DataFrame, and the Rust
core alone (``_core.sweep_space`` per group, no rows built) in wall and CPU time, for scale.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

import pdtp
from pdtp import _core
from pdtp.sweeps import parse_ints, parse_names
from pdtp.workload import Workload


def _timed(fn: Any, repeat: int) -> tuple[float, float, Any]:
    """Median wall seconds, median CPU seconds of this process (all of it with one worker:
    a shared machine's load shows in the wall time, not here) and the last result."""
    times, cpus, out = [], [], None
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return statistics.median(times), statistics.median(cpus), out


def core_only(models: list[Any], gpus: list[str], budgets: list[int]) -> tuple[float, float]:
    """Wall and CPU seconds for the Rust calls alone (candidate rows + every budget), one
    process."""
    from pdtp.sweeps import Group, _Options, _scenario

    opts = _Options(None, 0.9, None)
    scenarios = []
    for m in models:
        for name in gpus:
            g = pdtp.gpu(name)
            group = Group(m, g, Workload(), "moriio", g.gpus_per_node, tuple(budgets))
            scenarios.append(_scenario(group, opts, max(budgets)).core)
    start, cpu = time.perf_counter(), time.process_time()
    for scenario in scenarios:
        _core.sweep_space(scenario, budgets)
    return time.perf_counter() - start, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", default="mi300x,h200,b200", help="GPU types (default 3)")
    ap.add_argument("--gpus", default="1-512", help="budgets (default 1-512)")
    ap.add_argument("--workers", default=None, help="worker counts (default 1..cpu_count)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per setting (median)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--fast", action="store_true", help="CI's run: a tiny grid (it must complete)")
    args = ap.parse_args(argv)
    if args.fast:
        args.gpu, args.gpus, args.workers, args.repeat = "h100", "1-8", "1", 1

    gpus = parse_names(args.gpu)
    gpus = [gpus] if isinstance(gpus, str) else gpus
    budgets = sorted(set(parse_ints(args.gpus)))
    models = pdtp.models()
    n = len(models) * len(gpus) * len(budgets)
    cpus = os.cpu_count() or 1
    worker_counts = parse_ints(args.workers) if args.workers else list(range(1, cpus + 1))

    def run(workers: int, frame: bool) -> Any:
        return pdtp.sweep(models, gpus=budgets, gpu=gpus, workers=workers, as_frame=frame)

    # Warm up once (catalog parsing, caches, the extension) so runs measure the sweep.
    pdtp.sweep(models[:2], gpus=budgets[:8], gpu=gpus, workers=1, as_frame=False)
    core = [core_only(models, gpus, budgets) for _ in range(args.repeat)]
    core_s = statistics.median(w for w, _ in core)
    core_cpu = statistics.median(c for _, c in core)
    results: list[dict[str, Any]] = []
    for w in worker_counts:
        rows_s, rows_cpu, rows = _timed(lambda w=w: run(w, False), args.repeat)
        frame_s, _, _ = _timed(lambda w=w: run(w, True), args.repeat)
        assert len(rows) == n
        results.append(
            {
                "workers": w,
                "rows_s": rows_s,
                "rows_per_s": n / rows_s,
                "rows_cpu_s": rows_cpu if w == 1 else None,
                "frame_s": frame_s,
                "frame_per_s": n / frame_s,
            }
        )
    infeasible = sum(r["status"] != "OPTIMAL" for r in rows)

    print(
        f"grid: {len(models)} models x {len(budgets)} budgets ({budgets[0]}..{budgets[-1]}) x "
        f"{len(gpus)} GPU types ({', '.join(gpus)}) = {n:,} scenarios "
        f"({infeasible:,} infeasible)"
    )
    print(f"machine: {cpus} CPU(s), Python {platform.python_version()}, {platform.machine()}")
    print(f"median of {args.repeat} runs\n")
    print("| workers | list of dicts | scenarios/s | CPU (1 worker) | DataFrame | scenarios/s |")
    print("|--:|--:|--:|--:|--:|--:|")
    for r in results:
        cpu = r["rows_cpu_s"]
        cpu_text = f"{cpu:.2f} s = {n / cpu:,.0f}/s" if cpu else "-"
        print(
            f"| {r['workers']} | {r['rows_s']:.2f} s | {r['rows_per_s']:,.0f} | {cpu_text} | "
            f"{r['frame_s']:.2f} s | {r['frame_per_s']:,.0f} |"
        )
    print(
        f"\nRust core alone (one process, no rows): {core_s:.3f} s = {n / core_s:,.0f} "
        f"scenarios/s ({core_cpu:.3f} s CPU = {n / core_cpu:,.0f} scenarios/s per core)"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "scenarios": n,
                    "infeasible": infeasible,
                    "models": len(models),
                    "gpus": gpus,
                    "budgets": [budgets[0], budgets[-1]],
                    "cpus": cpus,
                    "core_s": core_s,
                    "core_cpu_s": core_cpu,
                    "results": results,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
