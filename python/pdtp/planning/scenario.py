"""The planning question, validated once: models (each with its workload, demand and
weight), the GPU pool (types, nodes and their free GPUs, prices), the connector and vLLM
version, limits and the objective — then one typed ``_core.Scenario`` for the Rust core.

The pool can be given as

- ``gpus=24``: full nodes of the GPU type's ``gpus_per_node``, the last one partial;
- ``nodes=[8, 8, 5, 3]``: free GPUs per node (or each node's free device ids, ``[[0, 1],
  [4, 5, 6, 7]]``, which the launch lines then use);
- ``gpus={"mi355x": 16, "mi300x": 32}`` or ``nodes={"mi355x": [8, 8], "mi300x": [8, 4]}``:
  several GPU types.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _core
from .._validate import MAX_TP, optional_positive_int, positive_number
from ..connectors import Connector, default_connector
from ..engine import engine_defaults
from ..errors import InvalidArgumentError
from ..perf import Context, constant_inputs, gpu_inputs, model_inputs

# The question's pool and field checks are the public Scenario's; the planners name them here.
from ..scenario import (
    LAYOUT_FAMILIES,
    MAX_GPUS,
    MAX_PRICE,
    MODES,
    Pool,
    demand_value,
    needs_prices,
    resolve_connector_key,
    resolve_layouts,
    resolve_mode,
    resolve_pool,
    weight_value,
)
from ..workload import Workload, resolve_workload

if TYPE_CHECKING:
    from .._model import Model
    from ..constants import Constants
    from ..scenario import Scenario as PublicScenario

__all__ = [
    "LAYOUT_FAMILIES",
    "MAX_GPUS",
    "MAX_PRICE",
    "MODES",
    "PRICE_SCALE",
    "ModelEntry",
    "Pool",
    "Scenario",
    "build",
    "build_for",
    "demand_value",
    "needs_prices",
    "resolve_connector_key",
    "resolve_layouts",
    "resolve_mode",
    "resolve_pool",
    "sweep_scenario",
    "weight_value",
]

# Prices are integers in hundredths of a cent per GPU-hour in the core.
PRICE_SCALE = 1e4


@dataclass(frozen=True)
class ModelEntry:
    """One model of a scenario: resolved model, workload, demand (requests/s) and weight."""

    name: str
    model: Model
    workload: Workload
    demand_rps: float = 0.0
    weight: float = 1.0

    @property
    def reference(self) -> str:
        """What a launch line names: the reference the user gave (``serve_ref``), else the
        HF id, else the catalog name."""
        return self.model.serve_ref or self.model.hf_id or self.model.name


@dataclass(frozen=True)
class Scenario:
    """A validated planning question and its core value (``core``)."""

    models: tuple[ModelEntry, ...]
    pool: Pool
    connector: Connector
    connector_key: str
    vllm_version: str | None
    max_tp: int | None
    max_acks: int | None
    gpu_memory_utilization: float
    constants: tuple[Constants, ...]
    objective: str
    core: _core.Scenario
    # The core's typed inputs, kept to ask the core another question of the same pool.
    specs: tuple[_core.ModelSpec, ...] = ()
    gpu_specs: tuple[_core.GpuType, ...] = ()
    mode: str = "disagg"
    layouts: Any = None
    #: Why pdtp picked the connector when none was named ("the default on NVIDIA GPUs").
    connector_default: str | None = None

    def context(self, model: int, gpu_type: int) -> Context:
        """The performance-model inputs of one model on one GPU type."""
        return Context(
            self.models[model].model,
            self.pool.types[gpu_type],
            self.constants[gpu_type],
            self.gpu_memory_utilization,
        )


def build(
    models: Sequence[tuple[Any, Any, float, float, str | None]],
    pool: Pool,
    *,
    connector: Any,
    vllm_version: Any = None,
    objective: str,
    max_tp: Any = None,
    max_acks: Any = None,
    gpu_memory_utilization: Any = 0.9,
    constants: Any = None,
    move_cost: tuple[float, float, float, float] | None = None,
    running: Any = None,
    mode: Any = "disagg",
    layouts: Any = None,
) -> Scenario:
    """Resolve and validate every input once; ``models`` lists ``(model, workload, demand,
    weight, name)``."""
    from ..catalog import resolve_model
    from ..constants import constants_for
    from ..layout import supports_pp

    core_mode = resolve_mode(mode)
    space = resolve_layouts(layouts)

    util = positive_number("gpu_memory_utilization", gpu_memory_utilization)
    if util > 1.0:
        raise InvalidArgumentError(f"gpu_memory_utilization must be in (0, 1], got {util}")
    tp_bound = optional_positive_int("max_tp", max_tp, maximum=MAX_TP)
    acks = optional_positive_int("max_acks", max_acks, maximum=MAX_TP)
    note = None
    if connector is None:  # the pool's vendor decides (MoRIIO needs AMD's MoRI)
        connector, note = default_connector(g.vendor for g in pool.types)
    conn, key = resolve_connector_key(connector, vllm_version)
    consts = tuple(constants_for(g.name, constants) for g in pool.types)
    entries = []
    specs = []
    for model, workload, demand, weight, name in models:
        m = resolve_model(model)
        w = resolve_workload(workload)
        entry = ModelEntry(name or m.name, m, w, demand, weight)
        entries.append(entry)
        specs.append(
            _core.ModelSpec(
                name=entry.name,
                model=model_inputs(m),
                workload=w._core_dict(),
                gpus=[gpu_inputs(g, m.weight_dtype) for g in pool.types],
                demand_rps=demand,
                weight=weight,
                supports_pp=supports_pp(m),
            )
        )
    gpu_types = [
        _core.GpuType(
            name=g.name,
            vendor=g.vendor,
            constants=constant_inputs(c),
            node_size=size,
            price=0 if price is None else round(price * PRICE_SCALE),
            max_num_batched_tokens=float(engine_defaults("vllm", g)["max_num_batched_tokens"]),
        )
        for g, c, size, price in zip(pool.types, consts, pool.node_size, pool.prices)
    ]
    core = _core.Scenario(
        models=specs,
        gpu_types=gpu_types,
        nodes=pool.runs(),
        connector=key,
        objective=objective,
        max_tp=tp_bound,
        max_acks=acks,
        gpu_memory_utilization=util,
        move_cost=move_cost,
        running=running,
        mode=core_mode,
        layouts=space,
    )
    return Scenario(
        models=tuple(entries),
        pool=pool,
        connector=conn,
        connector_key=key,
        vllm_version=vllm_version,
        max_tp=tp_bound,
        max_acks=acks,
        gpu_memory_utilization=util,
        constants=consts,
        objective=objective,
        core=core,
        specs=tuple(specs),
        gpu_specs=tuple(gpu_types),
        mode=core_mode,
        layouts=space,
        connector_default=note,
    )


def sweep_scenario(
    ctx: Context, workload: Workload, connector: str, max_tp: int, max_acks: int | None
) -> _core.Scenario:
    """The core scenario of one sweep group (one model, one GPU type; each budget of the
    sweep supplies its own nodes). Sweeps cover TP-only P/D splits: their rows have one TP
    size per side (layouts and aggregated instances are ``solve``'s and ``pareto``'s)."""
    m, g = ctx.model, ctx.gpu
    return _core.Scenario(
        models=[
            _core.ModelSpec(
                name=m.name,
                model=model_inputs(m),
                workload=workload._core_dict(),
                gpus=[gpu_inputs(g, m.weight_dtype)],
            )
        ],
        gpu_types=[
            _core.GpuType(
                name=g.name,
                vendor=g.vendor,
                constants=constant_inputs(ctx.constants),
                node_size=g.gpus_per_node,
            )
        ],
        nodes=[],
        connector=connector,
        objective="throughput",
        max_tp=max_tp,
        max_acks=max_acks,
        gpu_memory_utilization=ctx.gpu_memory_utilization,
        mode="disagg",
        layouts=(["tp"], []),
    )


def build_for(
    question: PublicScenario,
    pool: Pool,
    *,
    objective: str,
    demand: float = 0.0,
    model: Any = None,
    workload: Any = None,
    connector: Any = None,
    vllm_version: Any = None,
    gpu_memory_utilization: float | None = None,
    move_cost: tuple[float, float, float, float] | None = None,
    running: Any = None,
) -> Scenario:
    """The core scenario of a public :class:`pdtp.Scenario` on ``pool`` (one model, its
    resolved value handed down): what every single-model planner asks the core. ``model``,
    ``workload``, ``connector``, ``vllm_version`` and ``gpu_memory_utilization`` replace the
    question's (replan: the running plan's defaults)."""
    # A percentile verifies the plans of the same space: the simulator models every mode and
    # layout the planners pick (a P/D split over two GPU types is refused when simulated).
    mode, layouts = question.mode, question.layouts
    return build(
        [
            (
                question.resolved_model if model is None else model,
                question.workload if workload is None else workload,
                demand,
                1.0,
                None,
            )
        ],
        pool,
        connector=question.connector if connector is None else connector,
        vllm_version=question.vllm_version if vllm_version is None else vllm_version,
        objective=objective,
        max_tp=question.max_tp,
        max_acks=question.max_acks,
        gpu_memory_utilization=(
            question.utilization() if gpu_memory_utilization is None else gpu_memory_utilization
        ),
        constants=question.constants,
        move_cost=move_cost,
        running=running,
        mode=mode,
        layouts=None if layouts is None else list(layouts),
    )
