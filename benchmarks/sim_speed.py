"""Speed of the simulator: simulated output tokens per second of wall time, on one core.

    python benchmarks/sim_speed.py [--repeat N] [--json PATH]

The simulation is single-threaded Rust (the GIL is released; nothing runs in parallel), so
wall time on one core is its cost. Cases:

- the README's plan (llama-3.1-70b on 24 MI300X: 8 prefill + 4 decode instances of TP2),
  10,000 requests of 2048 + 512 tokens, Poisson arrivals at 80% and 100% of the plan's rate;
- the same with lengths drawn from [0.8, 1.0] x nominal and bursty (gamma 0.25) arrivals;
- aggregated serving on one H100 TP8 at concurrency 64, 10,000 requests;
- the slowest shape for a step-by-step simulator: one request at a time (every step makes
  one token), 2,000 requests;
- the rate search of one plan (``pdtp.max_rate_within_slo``), as a planner would call it.

Each case runs ``--repeat`` times; the table gives the median wall time and output tokens/s
and the ratio to the goal of 2 million output tokens/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pdtp

GOAL_TOKENS_PER_S = 2e6


def _count(n: int) -> str:
    """``10k``, ``2k``, ``500``: a request count as the case names give it."""
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def _cases(n: int = 10_000) -> list[tuple[str, Callable[[], Any], int]]:
    plan = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x", method="enumerate")
    rate = plan.requests_per_s
    agg = pdtp.sim_config("llama-3.1-70b", gpu="h100", tp=8)
    single = pdtp.sim_config("llama-3.1-8b", gpu="h100", tp=1)
    one = max(1, n // 5)
    k = _count(n)
    return [
        (
            f"24-GPU plan, {k} requests, Poisson at 80% of {rate:.1f} req/s",
            lambda: pdtp.simulate(plan, rate_rps=0.8 * rate, requests=n),
            n * plan.workload.osl,
        ),
        (
            f"24-GPU plan, {k} requests, Poisson at 100%",
            lambda: pdtp.simulate(plan, rate_rps=rate, requests=n),
            n * plan.workload.osl,
        ),
        (
            f"24-GPU plan, {k} requests, gamma(0.25) at 80%, lengths 0.8-1.0x",
            lambda: pdtp.simulate(
                plan,
                rate_rps=0.8 * rate,
                requests=n,
                arrival="gamma",
                burstiness=0.25,
                length_range=(0.8, 1.0),
            ),
            0,  # counted from the result
        ),
        (
            f"aggregated H100 TP8, concurrency 64, {k} requests",
            lambda: pdtp.simulate(agg, concurrency=64, requests=n),
            n * 512,
        ),
        (
            f"one request at a time (1 token per step), {_count(one)} requests of 512 tokens",
            lambda: pdtp.simulate(single, concurrency=1, requests=one),
            one * 512,
        ),
        (
            f"rate search of the 24-GPU plan (p90, {k} requests per trial)",
            lambda: pdtp.max_rate_within_slo(plan, requests=n),
            0,
        ),
    ]


def _tokens(result: Any, fixed: int) -> int:
    if fixed:
        return fixed
    if isinstance(result, pdtp.RateSearch):
        return 0
    return round(result.output_tokens_per_s * result.duration_s)


def run(repeat: int = 5, requests: int = 10_000) -> dict[str, Any]:
    rows = []
    for name, fn, tokens in _cases(requests):
        fn()  # warm the caches (model, GPU, constants)
        times = []
        result: Any = None
        for _ in range(repeat):
            t = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - t)
        wall = statistics.median(times)
        toks = _tokens(result, tokens)
        row: dict[str, Any] = {"case": name, "seconds": wall, "output_tokens": toks}
        if toks:
            row["tokens_per_s"] = toks / wall
            row["vs_goal"] = toks / wall / GOAL_TOKENS_PER_S
        if isinstance(result, pdtp.RateSearch):
            row["simulations"] = result.simulations
            row["rate_rps"] = result.rate_rps
        rows.append(row)
    return {"repeat": repeat, "goal_tokens_per_s": GOAL_TOKENS_PER_S, "cases": rows}


def render_markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Simulator speed, one core (median of {result['repeat']} runs)",
        "",
        "| case | wall time | output tokens | tokens/s | vs 2M tok/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result["cases"]:
        if "tokens_per_s" in r:
            tail = (
                f"{r['output_tokens']:,} | {r['tokens_per_s'] / 1e6:,.1f} M | {r['vs_goal']:.0f}x"
            )
        else:
            tail = f"{r['simulations']} simulations | – | –"
        lines.append(f"| {r['case']} | {r['seconds'] * 1e3:,.1f} ms | {tail} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    parser.add_argument("--fast", action="store_true", help="CI's run: 1 repeat, 500 requests")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        print("--repeat must be >= 1", file=sys.stderr)
        return 2
    result = run(1, 500) if args.fast else run(args.repeat)
    sys.stdout.write(render_markdown(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
