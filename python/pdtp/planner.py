"""``pdtp.solve``: the throughput-optimal valid P/D split for a model and GPU budget.

Data (the Rust candidate table: one row per TP size and side, one per valid pair with its
best instance counts), model building and solving (``_cpsat.py``) are kept apart. The
exhaustive Rust oracle (``method="enumerate"``) answers the same question without CP-SAT.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _core
from ._validate import positive_number
from .check import CheckWarning, check
from .errors import InvalidArgumentError
from .perf import (
    DEFAULT_GPU,
    DEFAULT_UTILIZATION,
    SidePoint,
    bottleneck,
)
from .workload import Workload

if TYPE_CHECKING:
    from .sizing import CandidateTable

METHODS = ("cpsat", "enumerate")
# Budgets beyond this are not one deployment; they would only slow the oracle.
MAX_GPUS = 1 << 20


@dataclass(frozen=True)
class Side:
    """One side of a plan: ``instances`` vLLM instances of ``tp`` GPUs each."""

    tp: int
    instances: int

    @property
    def gpus(self) -> int:
        return self.tp * self.instances

    def to_dict(self) -> dict[str, int]:
        return {"tp": self.tp, "instances": self.instances, "gpus": self.gpus}


@dataclass(frozen=True)
class Plan:
    """A solved deployment. ``requests_per_s`` equals ``pdtp.evaluate`` of the same
    configuration; ``status`` is ``OPTIMAL`` when proven, ``FEASIBLE`` when the time limit
    cut the proof short."""

    model: str
    model_id: str
    gpu: str
    connector: str
    workload: Workload
    gpus: int
    prefill: Side
    decode: Side
    requests_per_s: float
    output_tokens_per_s: float
    ttft_ms: float
    tpot_ms: float
    decode_batch: int
    prefill_capacity_rps: float
    decode_capacity_rps: float
    status: str
    method: str
    solve_ms: float
    gpus_per_node: int = 8
    gpu_memory_utilization: float = DEFAULT_UTILIZATION
    kv_dtype: str = "bf16"
    visible_devices_env: str = "CUDA_VISIBLE_DEVICES"
    kv_connector: str = ""
    prefill_role: str = "kv_producer"
    decode_role: str = "kv_consumer"
    rejected: tuple[str, ...] = ()
    warnings: tuple[CheckWarning, ...] = field(default=())

    @property
    def gpus_used(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    @property
    def bottleneck(self) -> str:
        return bottleneck(self.prefill_capacity_rps, self.decode_capacity_rps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_id": self.model_id,
            "gpu": self.gpu,
            "connector": self.connector,
            "workload": self.workload.to_dict(),
            "gpus": self.gpus,
            "gpus_used": self.gpus_used,
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict(),
            "requests_per_s": self.requests_per_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "decode_batch": self.decode_batch,
            "prefill_capacity_rps": self.prefill_capacity_rps,
            "decode_capacity_rps": self.decode_capacity_rps,
            "bottleneck": self.bottleneck,
            "status": self.status,
            "method": self.method,
            "solve_ms": self.solve_ms,
            # What `pdtp deploy --plan` needs to launch the plan as solved.
            "gpus_per_node": self.gpus_per_node,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "kv_dtype": self.kv_dtype,
            "kv_connector": self.kv_connector,
            "prefill_role": self.prefill_role,
            "decode_role": self.decode_role,
            "rejected": list(self.rejected),
            "warnings": [w.to_dict() for w in self.warnings],
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def placement(self) -> list[tuple[str, int, int, list[int]]]:
        """``(role, index, node, devices)`` per instance: each instance's TP group inside
        one node (first fit, prefill first), devices numbered within the node."""
        from .placement import place

        return place(
            [("prefill", self.prefill.tp)] * self.prefill.instances
            + [("decode", self.decode.tp)] * self.decode.instances,
            self.gpus_per_node,
        )

    def vllm_commands(self, *, base_port: int = 8100, proxy_ip: str = "127.0.0.1") -> list[str]:
        """One ``vllm serve`` line per instance: device list, TP size, a distinct port and
        the connector's ``--kv-transfer-config``. Instances on the same node get distinct
        ports; ``# node N`` says where each one runs."""
        from .placement import commands

        return commands(self, base_port=base_port, proxy_ip=proxy_ip)

    def deploy(self, **kwargs: Any) -> Any:
        """This plan as per-node scripts, Kubernetes manifests or JSON: a
        :class:`pdtp.Deployment` (same arguments as :func:`pdtp.deploy`)."""
        from .deployment import deploy

        return deploy(self, **kwargs)


# ---- solving --------------------------------------------------------------------------------


def solve(
    model: Any,
    gpus: int,
    *,
    gpu: Any = DEFAULT_GPU,
    workload: Any = None,
    connector: str = "moriio",
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    time_limit_s: float = 10.0,
    constants: Any = None,
    method: str = "cpsat",
) -> Plan:
    """The throughput-optimal valid P/D split of ``gpus`` GPUs for ``model``.

    Maximises served requests/s = min(prefill capacity, decode capacity) under the
    connector's rules, memory, the workload's SLOs and the budget. Ties go to fewer GPUs,
    then smaller TP sizes, then fewer instances. Raises :class:`pdtp.InfeasibleError` (with
    ``.reasons``) when nothing fits.

    >>> import pdtp
    >>> plan = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x")
    >>> plan.status, plan.gpus_used <= 24
    ('OPTIMAL', True)
    """
    from .sizing import candidate_table  # sizing builds on Plan: import it at call time

    start = time.perf_counter()
    limit = positive_number("time_limit_s", time_limit_s)
    if method not in METHODS:
        raise InvalidArgumentError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    table = candidate_table(
        model,
        gpus=gpus,
        gpu=gpu,
        workload=workload,
        connector=connector,
        max_tp=max_tp,
        max_acks=max_acks,
        gpu_memory_utilization=gpu_memory_utilization,
        constants=constants,
    )
    cands = list(table.rows)
    if not cands:
        raise table.infeasible()

    remaining = limit - (time.perf_counter() - start)
    if method == "cpsat" and not _cpsat_loaded() and remaining < ORTOOLS_IMPORT_S:
        # Importing OR-Tools alone would overrun the caller's limit on this first solve: the
        # exhaustive oracle proves the same optimum (by enumeration) within it instead.
        method = "enumerate"
    if method == "enumerate":
        ctx, w = table.ctx, table.workload
        best, complete = _core.enumerate_best(
            *ctx.inputs, w._core_dict(), table.connector.name, table.budget, table.max_tp,
            table.max_acks, ctx.gpu_memory_utilization, max(1e-3, remaining),
        )  # fmt: skip
        if best is None:  # the deadline struck before the first candidate: use the table's
            best = min(cands, key=_sort_key)
        p, np_, d, nd, _, _ = best
        status = "OPTIMAL" if complete else "FEASIBLE"
    else:
        p, np_, d, nd, status = _cpsat_choose(
            cands, table.prefill, table.decode, table.budget, start, limit
        )
    rps = table.served(p, np_, d, nd)
    rejected = _rejected_note(table, rps)
    return table.plan(p, np_, d, nd, status=status, method=method, rejected=rejected)


# Seconds OR-Tools takes to import on this kind of machine (measured 0.44-0.7 s), with margin.
ORTOOLS_IMPORT_S = 1.0


def _cpsat_loaded() -> bool:
    return "ortools.sat.python.cp_model" in sys.modules


def _sort_key(row: tuple[int, ...]) -> tuple[int, ...]:
    """The documented order (same as the Rust ``Candidate::cmp_key``)."""
    p, np_, d, nd, value, used = row
    return (-value, used, p + d, p, np_ + nd)


def _cpsat_choose(
    cands: list[tuple[int, int, int, int, int, int]],
    prefill: dict[int, SidePoint],
    decode: dict[int, SidePoint],
    budget: int,
    start: float,
    limit: float,
) -> tuple[int, int, int, int, str]:
    from ._cpsat import PairRow, choose

    rows = [
        PairRow(p, d, prefill[p].units, decode[d].units, np_, nd, value)
        for p, np_, d, nd, value, _ in cands
    ]
    order = sorted(range(len(cands)), key=lambda i: _sort_key(cands[i]))
    remaining = max(1e-3, limit - (time.perf_counter() - start))
    result = choose(rows, budget, hint=order[0], time_limit_s=remaining)
    if result.status == "OPTIMAL":
        # CP-SAT proved the best served value; among rows that reach it, the documented
        # tie-breaks (fewer GPUs, smaller TP, fewer instances) pick one deterministically.
        ties = [i for i in order if cands[i][4] == result.value]
        p, np_, d, nd, _, _ = cands[ties[0]] if ties else cands[order[0]]
        return p, np_, d, nd, "OPTIMAL"
    if result.status == "FEASIBLE":
        r = rows[result.index]
        return (
            r.prefill_tp,
            result.prefill_instances,
            r.decode_tp,
            result.decode_instances,
            "FEASIBLE",
        )
    # The limit ran out before CP-SAT reported anything: the hint is a valid plan.
    p, np_, d, nd, _, _ = cands[order[0]]
    return p, np_, d, nd, "FEASIBLE"


def _rejected_note(table: CandidateTable, served: float) -> tuple[str, ...]:
    """Why the best split the rules forbid was not chosen (when it would serve more)."""
    if table.rejected_row is None:
        return ()
    p, np_, d, nd, _, _ = table.rejected_row
    blind = table.served(p, np_, d, nd)
    if blind <= served * (1 + 1e-9):
        return ()
    connector = table.connector.name
    r = check(table.ctx.model, p, d, connector=connector, max_acks=table.max_acks, alternatives=0)
    why = r.violations[0].message if r.violations else "rejected by the connector's rules"
    gain = (blind / served - 1) * 100 if served > 0 else math.inf
    return (
        f"{np_}x prefill tp={p} + {nd}x decode tp={d} would serve {blind:.2f} req/s "
        f"(+{gain:.1f}%), but {connector} rejects P{p}/D{d}: {why}",
    )
