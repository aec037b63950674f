"""An autoscaler loop on pdtp: read a demand trace, re-plan every tick, print the moves.

    python examples/autoscaler.py [--trace examples/demand_trace.csv] [--model llama-3.1-70b]
        [--gpu h100] [--max-gpus 96] [--headroom 0.1]

The trace is a CSV with columns ``t_s`` (seconds) and ``demand_rps`` (requests/s). Each
tick plans for the demand plus ``headroom`` (a fraction): the first tick sizes a fresh
deployment with ``pdtp.size_for``; every later tick calls ``pdtp.replan`` with the
deployment the previous tick left (held as a plain dict, as an autoscaler would store it)
and prints the instances to stop and start and the GPUs in use. A demand that ``max_gpus``
cannot serve is clamped to the most the budget serves, and said so.
"""

from __future__ import annotations

import argparse
import csv
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass

import pdtp

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_TRACE = HERE / "demand_trace.csv"


@dataclass(frozen=True)
class Tick:
    """One step of the loop: the trace's demand, the demand planned for, and the result."""

    t_s: float
    demand_rps: float
    target_rps: float
    plan: pdtp.Plan
    replan: pdtp.Replan | None  # None on the first tick (a fresh deployment)
    clamped: bool


# This autoscaler scales a P/D deployment (prefill and decode sides); pdtp's planners would
# also consider aggregated instances (mode="auto").
MODE = "disagg"


def read_trace(path: str | pathlib.Path) -> list[tuple[float, float]]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for col in ("t_s", "demand_rps"):
        if rows and col not in rows[0]:
            raise ValueError(f"{path}: missing column {col!r} (need t_s, demand_rps)")
    return [(float(r["t_s"]), float(r["demand_rps"])) for r in rows]


def deployment(plan: pdtp.Plan) -> dict[str, object]:
    """What an autoscaler keeps between ticks: the model and the two sides."""
    return {
        "model": plan.model,
        "gpu": plan.gpu,
        "connector": plan.connector,
        "prefill": {"tp": plan.prefill.tp, "instances": plan.prefill.instances},
        "decode": {"tp": plan.decode.tp, "instances": plan.decode.instances},
    }


def run(
    trace: list[tuple[float, float]],
    *,
    model: str = "llama-3.1-70b",
    gpu: str = "h100",
    max_gpus: int = 96,
    headroom: float = 0.1,
    workload: pdtp.Workload | None = None,
) -> Iterator[Tick]:
    """Yield one :class:`Tick` per row of ``trace``."""
    capacity: float | None = None  # the most max_gpus serves, computed when first needed
    current: dict[str, object] | None = None
    for t_s, demand in trace:
        target = demand * (1 + headroom)
        clamped = False
        while True:
            try:
                if current is None:
                    plan = pdtp.size_for(
                        model, target, max_gpus=max_gpus, gpu=gpu, workload=workload, mode=MODE
                    )
                    step = None
                else:
                    step = pdtp.replan(
                        current, target, max_gpus=max_gpus, gpu=gpu, workload=workload, mode=MODE
                    )
                    plan = step.plan
                break
            except pdtp.InfeasibleError:
                if capacity is None:
                    capacity = pdtp.solve(
                        model, max_gpus, gpu=gpu, workload=workload, mode=MODE
                    ).requests_per_s
                if target <= capacity:
                    raise
                target, clamped = capacity, True
        current = deployment(plan)
        yield Tick(t_s, demand, target, plan, step, clamped)


def describe(tick: Tick) -> str:
    p = tick.plan
    shape = f"{p.prefill.instances}xP{p.prefill.tp}+{p.decode.instances}xD{p.decode.tp}"
    if tick.replan is None:
        action = f"start {p.prefill.instances}x prefill tp={p.prefill.tp}, "
        action += f"{p.decode.instances}x decode tp={p.decode.tp}"
    elif not tick.replan.changed:
        action = "-"
    else:
        parts = [
            f"{verb} " + ", ".join(f"{m.instances}x {m.role} tp={m.tp}" for m in moves)
            for verb, moves in (("stop", tick.replan.stop), ("start", tick.replan.start))
            if moves
        ]
        action = "; ".join(parts)
    note = "  (clamped: demand exceeds max_gpus)" if tick.clamped else ""
    return (
        f"{tick.t_s:>6.0f}  {tick.demand_rps:>7.1f}  {p.requests_per_s:>7.1f}  "
        f"{p.gpus_used:>4d}  {shape:<14}  {action}{note}"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--max-gpus", type=int, default=96)
    ap.add_argument("--headroom", type=float, default=0.1)
    args = ap.parse_args(argv)

    trace = read_trace(args.trace)
    print(
        f"{args.model} on {args.gpu}, at most {args.max_gpus} GPUs, "
        f"{args.headroom:.0%} headroom, {len(trace)} ticks"
    )
    print(f"{'t_s':>6}  {'demand':>7}  {'serves':>7}  {'gpus':>4}  {'deployment':<14}  moves")
    gpu_s = started = stopped = 0.0
    peak = 0
    ticks = list(
        run(trace, model=args.model, gpu=args.gpu, max_gpus=args.max_gpus, headroom=args.headroom)
    )
    for i, tick in enumerate(ticks):
        print(describe(tick))
        dt = ticks[i + 1].t_s - tick.t_s if i + 1 < len(ticks) else 0.0
        gpu_s += tick.plan.gpus_used * dt
        peak = max(peak, tick.plan.gpus_used)
        if tick.replan is not None:
            started += tick.replan.gpus_started
            stopped += tick.replan.gpus_stopped
    span = ticks[-1].t_s - ticks[0].t_s if ticks else 0.0
    if span > 0:
        print(
            f"GPU-hours {gpu_s / 3600:.2f} vs {peak * span / 3600:.2f} static at the peak "
            f"({peak} GPUs); GPUs started {started:.0f}, stopped {stopped:.0f}"
        )


if __name__ == "__main__":
    main()
