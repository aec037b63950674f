"""Fleets at scale: ``pdtp.solve_fleet`` with 200 models on 512 GPUs (64 nodes of 8) and
1,000 models on 25,600 GPUs (3,200 nodes of 8), MI300X, both objectives, demands drawn
per model (seeded) so that the pool is over-subscribed about ``--scale`` times.

    python benchmarks/fleet_scale.py [--repeat 5] [--scale 1,4] [--json out.json] [--fast]

Prints per case the median wall time of the whole call and its CPU time (on a loaded
shared machine wall time runs above CPU time, and a call that reaches its limit ends with
what it has), the status, the gap (the relative gap of the first objective level not
proven; 0 when OPTIMAL), who decided and who proved.
Goals (issue 27): 200 x 512 OPTIMAL (or a proven gap <= 1 %) within 1 s; 1,000 x 25,600
a proven gap <= 1 % within 5 s (``time_limit_s`` is set to those). Timings are after a
warm-up that pays OR-Tools' and numpy's import. ``--fast`` (CI): the 200-model case once
per objective.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

import pdtp

MODELS = [
    "llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b", "deepseek-v3", "mistral-7b-v0.3",
    "qwen3-8b", "gemma-2-27b", "gemma-2-9b", "mixtral-8x7b", "qwen2.5-72b", "qwen2.5-14b",
    "qwen3-32b", "gpt-oss-120b", "gpt-oss-20b", "phi-4", "llama-4-scout", "yi-34b", "qwen3-14b",
    "falcon-40b", "command-r-plus",
]  # fmt: skip
# (models, GPUs, time limit in seconds): the issue's two sizes.
CASES = [(200, 512, 1.0), (1000, 25_600, 5.0)]
# Requests/s that one MI300X serves of a mid-size model, roughly: scales demand to the pool.
PER_GPU = 1.5


def demands(models: int, gpus: int, scale: float, seed: int = 0) -> list[dict[str, Any]]:
    """One entry per model (each named, models repeat), demand log-uniform over two
    decades with a total about ``scale`` times what the pool serves, weights 1-3."""
    rng = random.Random(seed)
    raw = [10 ** rng.uniform(0, 2) for _ in range(models)]
    k = scale * gpus * PER_GPU / sum(raw)
    return [
        {
            "model": MODELS[i % len(MODELS)],
            "name": f"{MODELS[i % len(MODELS)]}-{i}",
            "demand_rps": round(r * k, 2),
            "weight": float(rng.choice([1, 2, 3])),
        }
        for i, r in enumerate(raw)
    ]


def run(models: int, gpus: int, limit: float, scale: float, objective: str, repeat: int):
    entries = demands(models, gpus, scale)
    times, cpu, statuses, gaps = [], [], set(), []
    fp = None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fp = pdtp.solve_fleet(
            entries, gpus=gpus, gpu="mi300x", objective=objective, time_limit_s=limit
        )
        times.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
        statuses.add(fp.status)
        gaps.append(fp.gap)
    assert fp is not None
    return {
        "models": models,
        "gpus": gpus,
        "time_limit_s": limit,
        "scale": scale,
        "objective": objective,
        "calls": repeat,
        "p50_ms": statistics.median(times),
        "max_ms": max(times),
        "cpu_p50_ms": statistics.median(cpu),
        "status": ",".join(sorted(statuses)),
        "max_gap": max((g if g is not None else float("inf")) for g in gaps),
        "method": fp.method,
        "proof": fp.proof,
        "gpus_used": fp.gpus_used,
        "min_served": fp.min_served_fraction,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=5, help="calls per case")
    ap.add_argument("--scale", default="1,4", help="over-subscription factors, comma-separated")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument(
        "--fast", action="store_true", help="CI's run: 200 models once (it must complete)"
    )
    args = ap.parse_args()
    cases, scales = CASES, [float(s) for s in args.scale.split(",")]
    if args.fast:
        cases, scales, args.repeat = CASES[:1], scales[:1], 1

    # Warm-up: catalog, OR-Tools and numpy imports.
    pdtp.solve_fleet([("llama-3.1-8b", 50.0), ("qwen3-8b", 50.0)], gpus=8, gpu="h100")

    rows = [
        run(models, gpus, limit, scale, objective, args.repeat)
        for models, gpus, limit in cases
        for scale in scales
        for objective in ("max_min", "weighted")
    ]
    print("solve_fleet at scale: MI300X nodes of 8, demands seeded (benchmarks/fleet_scale.py)")
    print(
        f"{'models':>6} {'gpus':>6} {'limit s':>7} {'scale':>5} {'objective':<9} "
        f"{'p50 ms':>8} {'max ms':>8} {'cpu ms':>8} {'status':<9} {'max gap':>9} {'method':<12} "
        f"{'proof':<12} {'used':>6} {'min served':>10}"
    )
    for r in rows:
        print(
            f"{r['models']:>6} {r['gpus']:>6} {r['time_limit_s']:>7.1f} {r['scale']:>5} "
            f"{r['objective']:<9} {r['p50_ms']:>8.0f} {r['max_ms']:>8.0f} {r['cpu_p50_ms']:>8.0f} "
            f"{r['status']:<9} "
            f"{r['max_gap']:>9.2e} {r['method']:<12} {r['proof'] or '-':<12} "
            f"{r['gpus_used']:>6} {r['min_served']:>10.4f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
