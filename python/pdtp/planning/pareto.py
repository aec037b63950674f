"""``pdtp.pareto``: throughput per GPU against interactivity (output tokens/s each user sees,
1000 / TPOT) across TPOT targets — the frontier a deployment chooses a point on.

Each point is the plan ``pdtp.solve`` returns with the workload's TPOT bound set to one
target (the same one CP-SAT model, solved again per target): a valid plan, with its mode and
layouts. The *rule-blind* frontier beside it is what a planner that ignores the connector's
pair rules would promise at each target (the better of the valid plan and the best plan
over the pairs vLLM refuses): the gap between the two is what the rules cost.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from .._validate import positive_number, public_api
from ..errors import ArgumentTypeError, InfeasibleError, InvalidArgumentError, TimeLimitError
from ..scenario import Scenario as PublicScenario
from ..scenario import SolverConfig, scenario_of, solver_of
from ..workload import resolve_workload
from . import plan as plan_mod
from . import scenario
from .decide import decide
from .plan import Plan

# TPOT targets (ms) swept by default: from very interactive (200 tok/s per user) to batch
# (5 tok/s per user).
DEFAULT_TPOT_MS = (5, 6, 7.5, 10, 12.5, 15, 20, 25, 30, 40, 50, 65, 80, 100, 130, 160, 200)
MAX_TARGETS = 256


@dataclass(frozen=True)
class ParetoPoint:
    """One TPOT target's plan: ``tokens_per_s_per_user`` = 1000 / the plan's TPOT,
    ``tokens_per_s_per_gpu`` = its output tokens/s over the GPUs it uses. ``valid`` is False
    only on the rule-blind frontier's points the connector refuses (``plan`` is then None;
    ``summary`` names the refused instances)."""

    tpot_target_ms: float
    tpot_ms: float
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    output_tokens_per_s: float
    requests_per_s: float
    gpus_used: int
    serving: str
    summary: str
    valid: bool = True
    plan: Plan | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("plan")
        return d


@dataclass(frozen=True)
class Pareto:
    """The frontier of valid plans (``frontier``: the points no other point beats on both
    axes, by interactivity), every target's plan (``points``), and the rule-blind frontier
    (``rule_blind``)."""

    model: str
    gpu: str
    gpus: int
    connector: str
    points: tuple[ParetoPoint, ...]
    frontier: tuple[ParetoPoint, ...]
    rule_blind: tuple[ParetoPoint, ...]
    solve_ms: float
    # TPOT targets the time limit left unanswered (left out of ``points``, unlike a target
    # with no valid plan, which was answered "none").
    time_cut: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "gpu": self.gpu,
            "gpus": self.gpus,
            "connector": self.connector,
            "points": [p.to_dict() for p in self.points],
            "frontier": [p.to_dict() for p in self.frontier],
            "rule_blind": [p.to_dict() for p in self.rule_blind],
            "solve_ms": self.solve_ms,
            "time_cut": list(self.time_cut),
        }


def _dominant(points: Sequence[ParetoPoint]) -> tuple[ParetoPoint, ...]:
    """Points that no other point beats on both axes (ties: the first), by interactivity."""
    out: list[ParetoPoint] = []
    best = -math.inf
    for p in sorted(points, key=lambda p: (-p.tokens_per_s_per_user, -p.tokens_per_s_per_gpu)):
        if p.tokens_per_s_per_gpu > best * (1 + 1e-12):
            out.append(p)
            best = p.tokens_per_s_per_gpu
    return tuple(sorted(out, key=lambda p: p.tokens_per_s_per_user))


def _point(
    target: float, tpot_ms: float, rps: float, osl: int, gpus: int, **kw: Any
) -> ParetoPoint:
    tokens = rps * osl
    return ParetoPoint(
        tpot_target_ms=target,
        tpot_ms=tpot_ms,
        tokens_per_s_per_user=1e3 / tpot_ms if tpot_ms > 0 else math.inf,
        tokens_per_s_per_gpu=tokens / gpus if gpus else 0.0,
        output_tokens_per_s=tokens,
        requests_per_s=rps,
        gpus_used=gpus,
        **kw,
    )


@public_api
def pareto(
    model: Any,
    gpus: Any = None,
    *,
    nodes: Any = None,
    gpu: Any = None,
    gpus_per_node: int | None = None,
    workload: Any = None,
    tpot_ms: Sequence[float] | None = None,
    connector: Any = None,
    vllm_version: str | None = None,
    mode: str | None = None,
    layouts: Any = None,
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float | None = None,
    constants: Any = None,
    time_limit_s: float | None = None,
    solver: SolverConfig | None = None,
) -> Pareto:
    """Throughput per GPU against tokens/s per user for ``model`` on the pool (as in
    :func:`pdtp.solve`), one solve per TPOT target (``tpot_ms``, default 5 … 200 ms; the
    workload's other fields — prompt and output lengths, TTFT bound — stay). Targets no plan
    meets are left out. ``time_limit_s`` bounds the whole call. ``model`` may be a
    :class:`pdtp.Scenario` (no objective, demand or percentile: the frontier is on means),
    ``solver`` a :class:`pdtp.SolverConfig`.

    >>> import pdtp
    >>> f = pdtp.pareto("llama-3.1-8b", gpus=8, gpu="h100", tpot_ms=[10, 20, 50])
    >>> [p.tpot_ms <= p.tpot_target_ms for p in f.points]
    [True, True, True]
    """
    started = time.perf_counter()
    sc = scenario_of(
        model,
        gpus=gpus,
        nodes=nodes,
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        workload=workload,
        connector=connector,
        vllm_version=vllm_version,
        mode=mode,
        layouts=layouts,
        max_tp=max_tp,
        max_acks=max_acks,
        gpu_memory_utilization=gpu_memory_utilization,
        constants=constants,
    )
    cfg = solver_of(solver, time_limit_s=time_limit_s)
    return pareto_scenario(sc, cfg, tpot_ms, started=started)


def pareto_scenario(
    sc: PublicScenario,
    cfg: SolverConfig,
    tpot_ms: Sequence[float] | None = None,
    *,
    started: float | None = None,
) -> Pareto:
    """:func:`pareto` of a validated :class:`pdtp.Scenario` (its objective is throughput at
    each TPOT target; CP-SAT decides each)."""
    started = time.perf_counter() if started is None else started
    limit = cfg.time_limit_s
    for unused in ("objective", "demand_rps", "slo_percentile", "demands"):
        if getattr(sc, unused) is not None:
            raise InvalidArgumentError(
                f"pareto plans the most throughput at each TPOT target on means: a scenario's "
                f"{unused} does not apply (leave it None)"
            )
    base = resolve_workload(sc.workload)
    if tpot_ms is not None and (
        isinstance(tpot_ms, str | bytes | Mapping) or not isinstance(tpot_ms, Iterable)
    ):
        raise ArgumentTypeError(
            f"tpot_ms must be a list of TPOT targets (ms), got {type(tpot_ms).__name__}"
        )
    targets = list(
        DEFAULT_TPOT_MS if tpot_ms is None else itertools.islice(tpot_ms, MAX_TARGETS + 1)
    )
    if not targets or len(targets) > MAX_TARGETS:
        raise InvalidArgumentError(f"tpot_ms must list 1 to {MAX_TARGETS} targets (ms)")
    targets = sorted({positive_number("tpot_ms", t) for t in targets})
    pool = sc.pool()
    from .. import _core

    points: list[ParetoPoint] = []
    blind: list[ParetoPoint] = []
    name = ""
    conn = ""
    cut: list[float] = []  # targets the time limit left unanswered (not "no plan")
    for k, target in enumerate(targets):
        left = limit - (time.perf_counter() - started)
        if left <= 0:
            cut.extend(float(t) for t in targets[k:])
            break
        w = replace(base, tpot_ms=float(target))
        core = scenario.build_for(sc, pool, objective="throughput", workload=w)
        name, conn = core.models[0].model.name, core.connector.name
        cands = _core.candidates(core.core)
        rows = cands.rows
        best = None
        if cands.pairs:
            share = left / (len(targets) - k)
            decision = decide(
                cands,
                started=time.perf_counter(),
                limit=share,
                method=cfg.method,
                workers=cfg.num_workers,
            )
            if decision.solution is not None and decision.solution[0] is not None:
                best = plan_mod.build(core, cands, decision, 0, started=started)
            elif decision.status == "UNKNOWN":
                cut.append(float(target))
        if best is not None:
            points.append(
                _point(
                    float(target),
                    best.tpot_ms,
                    best.requests_per_s,
                    w.osl,
                    best.gpus_used,
                    serving=best.serving,
                    summary=best.summary(),
                    plan=best,
                )
            )
        refused = cands.rule_blind()
        if refused is not None and refused[0] is not None:
            ch = refused[0]
            rps = plan_mod.served_of(rows, ch)
            if best is None or rps > best.requests_per_s:
                blind.append(
                    _point(
                        float(target),
                        rows[ch.decode].latency_s * 1e3,
                        rps,
                        w.osl,
                        plan_mod.gpus_of(rows, ch),
                        serving="disagg",
                        summary=plan_mod.describe_choice(rows, ch),
                        valid=False,
                    )
                )
                continue
        if best is not None:
            blind.append(points[-1])
    if not points and cut:
        others = len(targets) - len(cut)
        raise TimeLimitError(
            f"the time limit (time_limit_s={limit:g}) ran out before {len(cut)} of "
            f"{len(targets)} TPOT targets were answered"
            + (f" (the other {others} have no valid plan)" if others else "")
            + ": raise time_limit_s; this is not a proof that no target has a valid plan",
            [f"tpot_ms cut by the time limit: {cut}"],
        )
    if not points:
        raise InfeasibleError(
            f"no TPOT target in {targets[0]:g}..{targets[-1]:g} ms has a valid plan on "
            f"{pool.describe()}: relax the targets or the TTFT bound, or add GPUs",
            [f"tpot_ms: {targets}"],
        )
    return Pareto(
        model=name,
        gpu=pool.describe(),
        gpus=pool.gpus,
        connector=conn,
        points=tuple(points),
        frontier=_dominant(points),
        rule_blind=_dominant(blind),
        solve_ms=(time.perf_counter() - started) * 1e3,
        time_cut=tuple(cut),
    )
