"""The :class:`Plan` every planner returns: the decision, its predicted numbers, where each
instance runs (node, devices), and how it was decided (``status``, ``gap``, ``method``)."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from .._validate import short_repr
from ..layout import Layout
from ..perf import DEFAULT_UTILIZATION, bottleneck
from ..violations import CheckWarning, layout_rules
from ..workload import Workload

if TYPE_CHECKING:
    from .._core import Candidates
    from .._model import Model
    from .cpsat import Decision
    from .scenario import Scenario


@dataclass(frozen=True)
class Side:
    """One kind of instance of a plan: ``instances`` vLLM instances of one layout on ``gpu``
    — ``tp`` GPUs per TP group, ``pp`` pipeline stages, ``dp`` data-parallel attention ranks,
    ``ep`` expert parallel (see :class:`pdtp.Layout`); ``gpus`` counts all of them."""

    tp: int
    instances: int
    gpu: str | None = None
    pp: int = 1
    dp: int = 1
    ep: bool = False

    @property
    def layout(self) -> Layout:
        return Layout(self.tp, self.pp, self.dp, self.ep)

    @property
    def gpus_per_instance(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def gpus(self) -> int:
        return self.gpus_per_instance * self.instances

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "tp": self.tp,
            "instances": self.instances,
            "gpus": self.gpus,
            "layout": str(self.layout),
            "pp": self.pp,
            "dp": self.dp,
            "ep": self.ep,
        }
        if self.gpu is not None:
            d["gpu"] = self.gpu
        return d

    @classmethod
    def of(cls, layout: Layout, instances: int, gpu: str | None = None) -> Side:
        return cls(layout.tp, instances, gpu, layout.pp, layout.dp, layout.ep)


@dataclass(frozen=True)
class Alternative:
    """The best plan of the other serving mode (aggregated vs disaggregated) in the same pool: what
    the chosen plan is compared with. ``summary`` names its instances."""

    serving: str
    requests_per_s: float
    gpus_used: int
    summary: str
    cost_per_hour: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    the mean-based capacity of the same split).

    ``serving`` is ``"disagg"`` (``prefill`` and ``decode`` instances, KV moved by the
    connector) or ``"agg"`` (``aggregated`` instances doing both phases; ``prefill`` and
    ``decode`` are then None). ``alternative`` is the best plan of the other mode in the
    same pool, when the planner considered both (``mode="auto"``). ``mode`` is MoRIIO's
    transfer mode (see below), not this."""

    model: str
    model_id: str
    gpu: str
    connector: str
    workload: Workload
    gpus: int
    prefill: Side | None
    decode: Side | None
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
    #: The share of GPU memory each role's instances were sized at where the engine picks
    #: its own by layout (SGLang's ``mem_fraction_static``, the launch line naming none):
    #: ``{"prefill": 0.842, "decode": 0.875}``; None: ``gpu_memory_utilization`` for all.
    memory_fractions: dict[str, float] | None = None
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
    #: Why pdtp picked the connector when none was named ("the default on NVIDIA GPUs").
    connector_default: str | None = None
    pool: str = ""
    notes: tuple[str, ...] = ()
    slo_basis: str = "mean"
    #: Which vLLM release's performance constants the plan was predicted with, or that the
    #: release has no measured data and the baseline constants were used.
    constants_note: str = ""
    slo_percentile: float | None = None
    analytic_requests_per_s: float | None = None
    serving: str = "disagg"
    aggregated: Side | None = None
    alternative: Alternative | None = None
    # Aggregated: clients in flight per instance at the operating point.
    concurrency: int | None = None
    #: The resolved model (its whole shape, not only its name): what simulate, replan and
    #: goodput planning of this plan read, also for a model from a config file.
    model_spec: Model | None = None
    #: ``--served-model-name`` of its launch lines (None: vLLM's default, the model path).
    served_model_name: str | None = None
    #: Why ``vllm serve`` cannot be given ``model_id`` (None: it can): a model read from a
    #: config file outside its model folder. See :attr:`serve_ref`.
    serve_error: str | None = None
    # Who proved the plan optimal (``cpsat``, ``enumerate``), None when nothing did;
    # ``method`` says who decided it (``closed-form``: the Rust closed forms, kept by CP-SAT).
    proof: str | None = None
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
    def serve_ref(self) -> str:
        """What ``vllm serve`` loads: ``model_id`` — an HF id, or the absolute path of the
        model folder a config came from. Raises :class:`pdtp.InvalidArgumentError` when the
        model was read from a config file that is not in its model folder (there is nothing
        to serve; the plan can still be simulated and re-planned)."""
        if self.serve_error:
            from ..errors import InvalidArgumentError

            raise InvalidArgumentError(self.serve_error)
        return self.model_id

    @property
    def quantization(self) -> str | None:
        """vLLM's ``--quantization`` the weights need: ``"fp8"`` when the plan sized FP8
        weights for a 16-bit checkpoint of a catalog model (vLLM quantizes it on load);
        None when the checkpoint loads as it is (a config's own dtype is its checkpoint's)."""
        m = self.model_spec
        if m is None or m.weight_dtype != "fp8":
            return None
        from .plan_read import catalog_model

        native = catalog_model(self.model_id) or catalog_model(m.name)
        if native is None or native.weight_bytes_per_param < 2:
            return None
        return "fp8"

    @property
    def resolved_model(self) -> Model:
        """:attr:`model_spec`, or the catalog model the plan names."""
        if self.model_spec is not None:
            return self.model_spec
        from ..catalog import resolve_model

        return resolve_model(self.model)

    @classmethod
    def from_dict(cls, data: Any, *, model: Any = None, rules: bool = True) -> Plan:
        """The plan :meth:`to_dict` wrote (``Plan.from_dict(p.to_dict()) == p``, same
        placement), checked as strictly as ``solve``'s arguments: a field out of range, a
        pair the connector's rules reject, a GPU given twice... raises a
        :class:`pdtp.PdtpError` naming the field. A plan written by hand may give only
        ``model``, ``gpu`` and its sides (``prefill``/``decode`` or ``aggregated``).
        ``model`` supplies the model when the dict has no ``model_spec`` and names no
        catalog model. ``rules=False`` reads a plan the connector's rules refuse (what runs
        already, for :func:`pdtp.replan` to move away from); nothing deploys such a plan.

        >>> import pdtp
        >>> p = pdtp.solve("llama-3.1-70b", gpus=16, gpu="mi300x")
        >>> pdtp.Plan.from_dict(p.to_dict()) == p
        True
        """
        from .plan_read import plan_from_dict

        return plan_from_dict(data, model, rules)

    @classmethod
    def from_json(cls, source: Any, *, model: Any = None) -> Plan:
        """:meth:`from_dict` of JSON text (``pdtp solve --json``'s output) or of a JSON
        file's path."""
        from .plan_read import plan_from_json

        return plan_from_json(source, model)

    @property
    def sides(self) -> tuple[tuple[str, Side], ...]:
        """``(role, side)`` of every kind of instance: prefill and decode, or aggregated."""
        out = (("prefill", self.prefill), ("decode", self.decode), ("aggregated", self.aggregated))
        return tuple((role, side) for role, side in out if side is not None)

    @property
    def gpus_used(self) -> int:
        return sum(side.gpus for _, side in self.sides)

    @property
    def bottleneck(self) -> str:
        if self.serving == "agg":
            return "aggregated"
        return bottleneck(self.prefill_capacity_rps, self.decode_capacity_rps)

    @property
    def serving_gain(self) -> float | None:
        """How much more this plan serves than :attr:`alternative` (0.25 = 25% more; None
        without an alternative or when the alternative serves nothing)."""
        alt = self.alternative
        if alt is None or alt.requests_per_s <= 0:
            return None
        return self.requests_per_s / alt.requests_per_s - 1.0

    def summary(self) -> str:
        """``6x prefill tp2 + 6x decode tp2`` or ``4x aggregated tp2dp4ep``."""
        return " + ".join(f"{s.instances}x {role} {s.layout}" for role, s in self.sides)

    @property
    def connector_label(self) -> str:
        """``"moriio (READ mode), vLLM 0.33.0"``: the connector, its mode and release."""
        from ..connectors import resolve_connector

        return resolve_connector(self.connector, self.vllm_version).labelled(self.connector_default)

    @property
    def output_tokens_per_dollar(self) -> float | None:
        """Output tokens per USD at the plan's served rate (None without prices)."""
        if not self.cost_per_hour:
            return None
        return self.output_tokens_per_s * 3600 / self.cost_per_hour

    def to_dict(self) -> dict[str, Any]:
        """Everything :meth:`from_dict` needs to rebuild this plan, JSON-ready."""
        return {
            "model": self.model,
            "model_id": self.model_id,
            "served_model_name": self.served_model_name,
            "serve_error": self.serve_error,
            "gpu": self.gpu,
            "connector": self.connector,
            "vllm_version": self.vllm_version,
            "mode": self.mode,
            "connector_default": self.connector_default,
            "workload": self.workload.to_dict(),
            "gpus": self.gpus,
            "pool": self.pool,
            "gpus_used": self.gpus_used,
            "serving": self.serving,
            "prefill": self.prefill.to_dict() if self.prefill is not None else None,
            "decode": self.decode.to_dict() if self.decode is not None else None,
            "aggregated": self.aggregated.to_dict() if self.aggregated is not None else None,
            "concurrency": self.concurrency,
            "alternative": self.alternative.to_dict() if self.alternative is not None else None,
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
            "proof": self.proof,
            "solve_ms": self.solve_ms,
            # What `pdtp deploy --plan` needs to launch the plan as solved.
            "gpus_per_node": self.gpus_per_node,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "memory_fractions": self.memory_fractions,
            "kv_dtype": self.kv_dtype,
            "visible_devices_env": self.visible_devices_env,
            "quantization": self.quantization,
            "kv_connector": self.kv_connector,
            "prefill_role": self.prefill_role,
            "decode_role": self.decode_role,
            "placement": [p.to_dict() for p in self.assignment],
            "rejected": list(self.rejected),
            "notes": list(self.notes),
            "slo_basis": self.slo_basis,
            "constants_note": self.constants_note,
            "slo_percentile": self.slo_percentile,
            "analytic_requests_per_s": self.analytic_requests_per_s,
            "warnings": [w.to_dict() for w in self.warnings],
            "model_spec": self.model_spec.to_dict() if self.model_spec is not None else None,
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def placement(self) -> list[tuple[str, int, int, list[int]]]:
        """``(role, index, node, devices)`` per instance, prefill first, as the planner placed
        it: devices numbered within the node (or the node's free device ids when the pool
        listed them); an instance spanning whole nodes names its first node. A plan read
        without its placement is placed by the planners' own routine on the fewest whole
        nodes (``_core.pack``, as ``pdtp deploy`` places it)."""
        if self.assignment:
            return [(p.role, p.instance, p.node, list(p.devices)) for p in self.assignment]
        from .. import _core

        instances = [(r, s.gpus_per_instance) for r, s in self.sides for _ in range(s.instances)]
        return [
            (p.role, p.index, p.node, list(p.devices))
            for p in _core.pack(instances, self.gpus_per_node)
        ]

    def vllm_commands(
        self,
        *,
        base_port: int = 8100,
        proxy_ip: str | None = None,
        node_hosts: Sequence[str] | None = None,
    ) -> list[str]:
        """One ``vllm serve`` line per instance, exactly as ``pdtp deploy`` launches it
        (one launch-line maker: ``pdtp.deployment.launch``): devices, layout flags, ports
        (``base_port`` + the first GPU on the node), the connector's settings (none for
        aggregated instances); ``# node N`` says where each one runs. A plan over several
        nodes whose lines need addresses (P/D, or an instance spanning nodes) needs
        ``node_hosts`` (``proxy_ip`` defaults to node 0's): without them
        :class:`pdtp.deployment.HostsNeededError` names the ``pdtp deploy`` command."""
        from ..deployment.build import launch_lines

        return launch_lines(self, base_port=base_port, proxy_ip=proxy_ip, node_hosts=node_hosts)

    def deploy(self, **kwargs: Any) -> Any:
        """This plan as per-node scripts, Kubernetes manifests or JSON: a
        :class:`pdtp.Deployment` (same arguments as :func:`pdtp.deploy`)."""
        from ..deployment import deploy

        return deploy(self, **kwargs)


def placements(
    sc: Scenario, cands: Candidates, solution: list[Any], usage: Any
) -> list[list[Placement]]:
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
    cands: Candidates,
    decision: Decision,
    model: int,
    *,
    started: float,
    rejected: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
    placer: Callable[[], Sequence[Placement]] | None = None,
    status: str | None = None,
    rows: Sequence[Any] | None = None,
    alternative: Alternative | None = None,
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
    agg = p.role == "aggregated"
    pcap, dcap = np_ * p.requests_per_s, nd * d.requests_per_s
    rps = min(pcap, dcap)
    prices = pool.prices
    cost = None
    if prices[p.gpu_type] is not None and prices[d.gpu_type] is not None:
        cost = p.gpus * np_ * prices[p.gpu_type]
        if not agg:
            cost += d.gpus * nd * prices[d.gpu_type]
    if placer is None:
        solution, usage = decision.solution, decision.usage

        def placer() -> Sequence[Placement]:
            return placements(sc, cands, solution, usage)[model]

    pl, dl = Layout(*p.layout), Layout(*d.layout)
    fractions = None
    if sc.memory_fractions:  # the engine's own fraction per kind of instance (SGLang's)

        def sized(lay: Layout, t: int, role: str) -> float:
            key = (lay.tp, lay.dp, lay.pp, role)
            return sc.memory_fractions[t].get(key, sc.gpu_memory_utilization)

        if agg:
            fractions = {"aggregated": sized(pl, p.gpu_type, "aggregated")}
        else:
            fractions = {
                "prefill": sized(pl, p.gpu_type, "prefill"),
                "decode": sized(dl, d.gpu_type, "decode"),
            }
        from ..engine import engine

        eng = engine(sc.connector.engine)
        each = ", ".join(f"{role} {f:g}" for role, f in fractions.items())
        notes = (
            *notes,
            f"memory: each instance sized at {eng.label} {sc.connector.engine_version}'s own "
            f"{eng.memory_flag.lstrip('-').replace('-', '_')} for its layout ({each}); give "
            "gpu_memory_utilization to size them all at one",
        )
    warnings: tuple[CheckWarning, ...] = ()
    if not agg:
        violations, found = layout_rules(entry.layout_facts, pl, dl, sc.connector_key, sc.max_acks)
        warnings = () if violations else found
    return Plan(
        model=entry.model.name,
        model_id=entry.reference,
        model_spec=entry.model,
        serve_error=serve_error(entry.model, entry.reference),
        gpu=gp.name if gp.name == gd.name else f"{gp.name}+{gd.name}",
        connector=sc.connector.name,
        workload=entry.workload,
        gpus=pool.gpus,
        prefill=None if agg else Side.of(pl, np_, gp.name),
        decode=None if agg else Side.of(dl, nd, gd.name),
        aggregated=Side.of(pl, np_, gp.name) if agg else None,
        serving="agg" if agg else "disagg",
        concurrency=p.concurrency * np_ if agg else None,
        requests_per_s=rps,
        output_tokens_per_s=rps * entry.workload.osl,
        ttft_ms=p.ttft_s * 1e3,
        tpot_ms=d.latency_s * 1e3,
        decode_batch=d.batch,
        prefill_capacity_rps=pcap,
        decode_capacity_rps=dcap,
        status=status or decision.status,
        method=decision.method,
        proof=decision.proof,
        solve_ms=(time.perf_counter() - started) * 1e3,
        gpus_per_node=pool.node_size[p.gpu_type],
        gpu_memory_utilization=sc.gpu_memory_utilization,
        memory_fractions=fractions,
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
        connector_default=sc.connector_default,
        constants_note=sc.constants_note,
        pool=pool.describe(),
        notes=notes,
        placer=placer,
        alternative=alternative,
    )


def serve_error(model: Model, reference: str) -> str | None:
    """Why ``vllm serve`` cannot load ``reference`` (None: it can). A model read from a
    config file names the file's folder; vLLM needs the model's own folder — its
    ``config.json`` (this model), tokenizer and weights — not a folder of unrelated configs."""
    if model.serve_ref is None and model.hf_id is None and "/" not in reference:
        # A config dict (or a Model built by hand) names no folder and no HF id: a launch
        # line `vllm serve <its name>` would make vLLM look for a repository of that name.
        return (
            f"the model {short_repr(model.name)} was given as a config (a dict, or a Model "
            "with neither a model folder nor an HF id), so there is no model path for vllm "
            "serve to load: give the model's folder (--config FOLDER, "
            "Model.from_hf_config(folder)) or its HF id (Model's hf_id), or name it when "
            "deploying (`pdtp deploy --model-path PATH_OR_HF_ID`, deploy's model_path)"
        )
    if not os.path.isabs(reference):
        return None  # an HF id or a catalog name
    config = os.path.join(reference, "config.json")
    if os.path.isfile(config):
        from dataclasses import replace

        from .._model import Model as _Model
        from ..errors import PdtpError

        try:
            there = _Model.from_hf_config(
                reference, weight_dtype=model.weight_dtype, kv_dtype=model.kv_dtype
            )
        except PdtpError:
            there = None
        if there is not None and replace(there, name=model.name) == model:
            return None
    return (
        f"the model {short_repr(model.name)} was read from a config file in "
        f"{short_repr(reference)}, which is not its model folder (no config.json of this "
        "model there): vllm serve needs the folder holding the model's config.json, "
        "tokenizer and weights, or its HF id; give that folder (--config FOLDER) or the HF "
        "id as the model, or name it when deploying (`pdtp deploy --model-path "
        "PATH_OR_HF_ID`, deploy's model_path)"
    )


def describe_choice(rows: Sequence[Any], ch: Any) -> str:
    """``6x prefill tp2 + 6x decode tp2`` or ``4x aggregated tp2dp4ep`` for a core choice."""
    p, d = rows[ch.prefill], rows[ch.decode]
    if p.role == "aggregated":
        return f"{ch.prefill_instances}x aggregated {Layout(*p.layout)}"
    return (
        f"{ch.prefill_instances}x prefill {Layout(*p.layout)} + "
        f"{ch.decode_instances}x decode {Layout(*d.layout)}"
    )


def served_of(rows: Sequence[Any], ch: Any) -> float:
    """Requests/s a core choice serves, as a plan reports it."""
    p, d = rows[ch.prefill], rows[ch.decode]
    served: float = min(
        ch.prefill_instances * p.requests_per_s, ch.decode_instances * d.requests_per_s
    )
    return served


def gpus_of(rows: Sequence[Any], ch: Any) -> int:
    p, d = rows[ch.prefill], rows[ch.decode]
    if ch.prefill == ch.decode:
        return int(ch.prefill_instances * p.gpus)
    return int(ch.prefill_instances * p.gpus + ch.decode_instances * d.gpus)


def alternative(sc: Scenario, cands: Candidates, chosen: Any) -> Alternative | None:
    """The best plan of the mode the chosen plan is not (planners that considered both)."""
    if sc.mode != "auto":
        return None
    rows = cands.rows
    other = "disagg" if rows[chosen.prefill].role == "aggregated" else "agg"
    best = cands.best_of_mode(other)
    if best is None or best[0] is None:
        return None
    ch = best[0]
    p, d = rows[ch.prefill], rows[ch.decode]
    p_price, d_price = sc.pool.prices[p.gpu_type], sc.pool.prices[d.gpu_type]
    cost = None
    if p_price is not None and d_price is not None:
        cost = ch.prefill_instances * p.gpus * p_price
        if other == "disagg":
            cost += ch.decode_instances * d.gpus * d_price
    return Alternative(
        other, served_of(rows, ch), gpus_of(rows, ch), describe_choice(rows, ch), cost
    )


def rule_note(
    sc: Scenario, cands: Candidates, chosen: list[Any], demand: float | None = None
) -> tuple[str, ...]:
    """When a pair the connector's rules refuse would have made a better plan, say so and
    why (what the rules cost)."""
    blind = cands.rule_blind()
    if blind is None or cands.compare(blind, chosen) >= 0:
        return ()
    b, c = blind[0], chosen[0]
    if b is None or c is None:  # a solution without a plan: nothing to compare
        return ()
    rows = cands.rows
    bp, bd = rows[b.prefill], rows[b.decode]
    served, mine = served_of(rows, b), served_of(rows, c)
    pl, dl = Layout(*bp.layout), Layout(*bd.layout)
    broken, _ = layout_rules(sc.models[0].layout_facts, pl, dl, sc.connector_key, sc.max_acks)
    # A bare vLLM assert has no message: its hint says what failed.
    why = (broken[0].message or broken[0].hint) if broken else "rejected by the connector's rules"
    what = (
        f"{b.prefill_instances}x prefill {_named(pl)} + {b.decode_instances}x decode {_named(dl)}"
    )
    name = sc.connector.name
    pair = f"P{pl.tp}/D{dl.tp}" if pl.is_tp_only and dl.is_tp_only else f"P {pl} / D {dl}"
    if demand is None:
        if served <= mine * (1 + 1e-9):
            return ()
        gain = (served / mine - 1) * 100 if mine > 0 else math.inf
        return (
            f"{what} would serve {served:.2f} req/s (+{gain:.1f}%), but {name} rejects "
            f"{pair}: {why}",
        )
    g_blind, g_mine = gpus_of(rows, b), gpus_of(rows, c)
    if g_blind >= g_mine:
        return ()
    return (
        f"{what} would serve {demand:g} req/s with {g_blind} GPUs ({g_mine - g_blind} "
        f"fewer), but {name} rejects {pair}: {why}",
    )


def _named(layout: Layout) -> str:
    """``tp=2`` for TP-only layouts (today's wording), else the layout's name."""
    return f"tp={layout.tp}" if layout.is_tp_only else str(layout)
