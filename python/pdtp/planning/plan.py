"""The :class:`Plan` every planner returns: the decision, its predicted numbers, where each
instance runs (node, devices), and how it was decided (``status``, ``gap``, ``method``)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from ..perf import DEFAULT_UTILIZATION, bottleneck
from ..violations import CheckWarning, pair_rules
from ..workload import Workload

if TYPE_CHECKING:
    from .cpsat import Decision
    from .scenario import Scenario


@dataclass(frozen=True)
class Side:
    """One side of a plan: ``instances`` vLLM instances of ``tp`` GPUs each, on ``gpu``."""

    tp: int
    instances: int
    gpu: str | None = None

    @property
    def gpus(self) -> int:
        return self.tp * self.instances

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"tp": self.tp, "instances": self.instances, "gpus": self.gpus}
        if self.gpu is not None:
            d["gpu"] = self.gpu
        return d


class Placement(NamedTuple):
    """Where one instance runs: its role and number within the role, its node (the first
    of ``nodes`` when it spans whole nodes), the devices it uses on each of them, and the
    GPU type."""

    role: str
    instance: int
    node: int
    devices: tuple[int, ...]
    gpu: str
    nodes: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "index": self.instance,
            "node": self.node,
            "nodes": list(self.nodes),
            "devices": list(self.devices),
            "gpu": self.gpu,
        }


@dataclass(frozen=True)
class Plan:
    """A solved deployment. ``requests_per_s`` equals ``pdtp.evaluate`` of the same
    configuration; ``status`` is ``OPTIMAL`` when every stage of the objective is proven,
    ``FEASIBLE`` when the time limit cut a proof short (``gap``: the relative gap of the
    first unproven stage, None when no bound is known); ``method`` says who decided
    (``cpsat``, or ``enumerate``: the exhaustive oracle).

    ``slo_basis`` says what the SLOs were planned on: ``"mean"`` (the analytic model, the
    default) or e.g. ``"p90 simulated"`` (``slo_percentile=0.9``: the planner verified its
    candidates with the simulator; ``requests_per_s`` is then the simulated goodput — the
    highest rate whose p90 TTFT and TPOT meet the SLOs — and ``analytic_requests_per_s``
    the mean-based capacity of the same split)."""

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
    gap: float | None = 0.0
    objective: str = "throughput"
    cost_per_hour: float | None = None
    #: The vLLM release the plan's rules are of (and that its launch lines start), and
    #: MoRIIO's transfer mode (``"read"``/``"write"``; None for NIXL): what was checked is
    #: what runs.
    vllm_version: str | None = None
    mode: str | None = None
    pool: str = ""
    notes: tuple[str, ...] = ()
    slo_basis: str = "mean"
    slo_percentile: float | None = None
    analytic_requests_per_s: float | None = None
    # Where the instances run, computed on first use (a pool of a million GPUs has as many
    # instances: listing them is the caller's choice, not part of the solve's time).
    placer: Callable[[], Sequence[Placement]] | None = field(
        default=None, compare=False, repr=False
    )

    @cached_property
    def assignment(self) -> tuple[Placement, ...]:
        """Every instance's :class:`Placement`, prefill first."""
        return tuple(self.placer()) if self.placer is not None else ()

    @property
    def gpus_used(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    @property
    def bottleneck(self) -> str:
        return bottleneck(self.prefill_capacity_rps, self.decode_capacity_rps)

    @property
    def connector_label(self) -> str:
        """``"moriio (READ mode), vLLM 0.33.0"``: the connector, its mode and release."""
        from ..connectors import resolve_connector

        return resolve_connector(self.connector, self.vllm_version).label

    @property
    def output_tokens_per_dollar(self) -> float | None:
        """Output tokens per USD at the plan's served rate (None without prices)."""
        if not self.cost_per_hour:
            return None
        return self.output_tokens_per_s * 3600 / self.cost_per_hour

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_id": self.model_id,
            "gpu": self.gpu,
            "connector": self.connector,
            "vllm_version": self.vllm_version,
            "mode": self.mode,
            "workload": self.workload.to_dict(),
            "gpus": self.gpus,
            "pool": self.pool,
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
            "objective": self.objective,
            "cost_per_hour": self.cost_per_hour,
            "output_tokens_per_dollar": self.output_tokens_per_dollar,
            "status": self.status,
            "gap": self.gap,
            "method": self.method,
            "solve_ms": self.solve_ms,
            # What `pdtp deploy --plan` needs to launch the plan as solved.
            "gpus_per_node": self.gpus_per_node,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "kv_dtype": self.kv_dtype,
            "kv_connector": self.kv_connector,
            "prefill_role": self.prefill_role,
            "decode_role": self.decode_role,
            "placement": [p.to_dict() for p in self.assignment],
            "rejected": list(self.rejected),
            "notes": list(self.notes),
            "slo_basis": self.slo_basis,
            "slo_percentile": self.slo_percentile,
            "analytic_requests_per_s": self.analytic_requests_per_s,
            "warnings": [w.to_dict() for w in self.warnings],
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def placement(self) -> list[tuple[str, int, int, list[int]]]:
        """``(role, index, node, devices)`` per instance, prefill first: each instance's TP
        group inside one node (as the planner placed it), devices numbered within the node
        (or the node's free device ids when the pool listed them)."""
        if self.assignment:
            return [(p.role, p.instance, p.node, list(p.devices)) for p in self.assignment]
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
        from ..deployment import deploy

        return deploy(self, **kwargs)


def placements(sc: Scenario, cands: Any, solution: list[Any], usage: Any) -> list[list[Placement]]:
    """Each model's instances on the nodes (one list per model), device ids mapped to the
    free devices the pool listed."""
    out: list[list[Placement]] = [[] for _ in sc.models]
    for p in cands.place(solution, usage):
        ids = sc.pool.devices.get(p.node)
        devices = tuple(ids[d] for d in p.devices) if ids else tuple(p.devices)
        out[p.model].append(
            Placement(
                p.role, p.index, p.node, devices, sc.pool.types[p.gpu_type].name, tuple(p.nodes)
            )
        )
    for items in out:
        items.sort(key=lambda q: (q.role != "prefill", q.instance))
    return out


def build(
    sc: Scenario,
    cands: Any,
    decision: Decision,
    model: int,
    *,
    started: float,
    rejected: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
    placer: Callable[[], Sequence[Placement]] | None = None,
    status: str | None = None,
    rows: Sequence[Any] | None = None,
) -> Plan:
    """The :class:`Plan` of one model's choice in a decision. ``rows`` is ``cands.rows``
    when the caller has it (each access builds every row: a fleet passes it once)."""
    assert decision.solution is not None
    ch = decision.solution[model]
    rows = cands.rows if rows is None else rows
    p, d = rows[ch.prefill], rows[ch.decode]
    np_, nd = ch.prefill_instances, ch.decode_instances
    entry = sc.models[model]
    pool = sc.pool
    gp, gd = pool.types[p.gpu_type], pool.types[d.gpu_type]
    pcap, dcap = np_ * p.requests_per_s, nd * d.requests_per_s
    rps = min(pcap, dcap)
    prices = pool.prices
    cost = None
    if prices[p.gpu_type] is not None and prices[d.gpu_type] is not None:
        cost = p.gpus * np_ * prices[p.gpu_type] + d.gpus * nd * prices[d.gpu_type]
    if placer is None:
        solution, usage = decision.solution, decision.usage

        def placer() -> Sequence[Placement]:
            return placements(sc, cands, solution, usage)[model]

    violations, found = pair_rules(entry.model, p.tp, d.tp, sc.connector_key, sc.max_acks)
    warnings = () if violations else found
    return Plan(
        model=entry.model.name,
        model_id=entry.reference,
        gpu=gp.name if gp.name == gd.name else f"{gp.name}+{gd.name}",
        connector=sc.connector.name,
        workload=entry.workload,
        gpus=pool.gpus,
        prefill=Side(p.tp, np_, gp.name),
        decode=Side(d.tp, nd, gd.name),
        requests_per_s=rps,
        output_tokens_per_s=rps * entry.workload.osl,
        ttft_ms=p.latency_s * 1e3,
        tpot_ms=d.latency_s * 1e3,
        decode_batch=d.batch,
        prefill_capacity_rps=pcap,
        decode_capacity_rps=dcap,
        status=status or decision.status,
        method=decision.method,
        solve_ms=(time.perf_counter() - started) * 1e3,
        gpus_per_node=pool.node_size[p.gpu_type],
        gpu_memory_utilization=sc.gpu_memory_utilization,
        kv_dtype=entry.model.kv_dtype,
        visible_devices_env=gp.visible_devices_env,
        kv_connector=sc.connector.kv_connector,
        prefill_role=sc.connector.prefill_role,
        decode_role=sc.connector.decode_role,
        rejected=rejected,
        warnings=warnings,
        gap=decision.gap,
        objective=sc.objective,
        cost_per_hour=cost,
        vllm_version=sc.connector.vllm_version,
        mode=sc.connector.mode,
        pool=pool.describe(),
        notes=notes,
        placer=placer,
    )


def rule_note(
    sc: Scenario, cands: Any, chosen: list[Any], demand: float | None = None
) -> tuple[str, ...]:
    """When a pair the connector's rules refuse would have made a better plan, say so and
    why (what the rules cost)."""
    blind = cands.rule_blind()
    if blind is None or cands.compare(blind, chosen) >= 0:
        return ()
    b, c = blind[0], chosen[0]
    rows = cands.rows
    bp, bd, cp_, cd = rows[b.prefill], rows[b.decode], rows[c.prefill], rows[c.decode]
    served = min(b.prefill_instances * bp.requests_per_s, b.decode_instances * bd.requests_per_s)
    mine = min(c.prefill_instances * cp_.requests_per_s, c.decode_instances * cd.requests_per_s)
    broken, _ = pair_rules(sc.models[0].model, bp.tp, bd.tp, sc.connector_key, sc.max_acks)
    # A bare vLLM assert has no message: its hint says what failed.
    why = (broken[0].message or broken[0].hint) if broken else "rejected by the connector's rules"
    what = f"{b.prefill_instances}x prefill tp={bp.tp} + {b.decode_instances}x decode tp={bd.tp}"
    name = sc.connector.name
    if demand is None:
        if served <= mine * (1 + 1e-9):
            return ()
        gain = (served / mine - 1) * 100 if mine > 0 else math.inf
        return (
            f"{what} would serve {served:.2f} req/s (+{gain:.1f}%), but {name} rejects "
            f"P{bp.tp}/D{bd.tp}: {why}",
        )
    g_blind = b.prefill_instances * bp.gpus + b.decode_instances * bd.gpus
    g_mine = c.prefill_instances * cp_.gpus + c.decode_instances * cd.gpus
    if g_blind >= g_mine:
        return ()
    return (
        f"{what} would serve {demand:g} req/s with {g_blind} GPUs ({g_mine - g_blind} "
        f"fewer), but {name} rejects P{bp.tp}/D{bd.tp}: {why}",
    )
