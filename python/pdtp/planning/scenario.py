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

import itertools
import math
import numbers
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from .. import _core
from .._validate import MAX_TP, optional_positive_int, positive_int, positive_number
from ..connectors import Connector, default_connector, resolve_connector
from ..engine import engine_defaults
from ..errors import ArgumentTypeError, InvalidArgumentError
from ..perf import DEFAULT_GPU, Context, constant_inputs, gpu_inputs, model_inputs
from ..workload import Workload, resolve_workload

if TYPE_CHECKING:
    from .._gpu import GPU
    from .._model import Model
    from ..constants import Constants
    from ..scenario import Scenario as PublicScenario

# What ``mode=`` accepts: the core's names and their long forms.
MODES = {
    "auto": "auto",
    "disagg": "disagg",
    "disaggregated": "disagg",
    "agg": "agg",
    "aggregated": "agg",
}
# Layout families ``layouts=`` accepts besides explicit layouts ("all": every family).
LAYOUT_FAMILIES = ("tp", "ep", "dp", "pp")

# Pools beyond this are not one deployment; they would only slow the search.
MAX_GPUS = 1 << 20
# Nodes one pool lists (nodes=): MAX_GPUS on 8-GPU nodes. Reading and run-length coding the
# list is inside the time limit (about 40 ms of CPU at this bound on the loaded CI machine).
MAX_NODES = MAX_GPUS // 8
# Nodes listed by their free device ids (each id checked, distinct per node): fewer.
MAX_ID_NODES = 1 << 14
# Prices are integers in hundredths of a cent per GPU-hour in the core.
PRICE_SCALE = 1e4
# Largest price accepted (USD per GPU-hour).
MAX_PRICE = 1e6


@dataclass(frozen=True)
class Pool:
    """The GPU pool: its types (catalog GPUs with their node size and price) and its nodes
    in the caller's order as runs of identical nodes ``(type index, free GPUs, nodes)`` —
    node ``n`` is the n-th node of that order; ``devices[n]`` lists node n's free device
    ids when the caller gave them."""

    types: tuple[GPU, ...]
    node_size: tuple[int, ...]
    prices: tuple[float | None, ...]
    node_runs: tuple[tuple[int, int, int], ...]
    devices: Mapping[int, tuple[int, ...]]

    @cached_property
    def gpus(self) -> int:
        return _gpus_in(self.node_runs)

    @cached_property
    def node_count(self) -> int:
        return sum(n for _, _, n in self.node_runs)

    def gpus_of(self, t: int) -> int:
        if len(self.types) == 1:
            return self.gpus if t == 0 else 0
        return _gpus_in([r for r in self.node_runs if r[0] == t])

    def largest_free(self, t: int) -> int:
        return max((free for k, free, _ in self.node_runs if k == t), default=0)

    def runs(self) -> list[tuple[int, int, int]]:
        """The node runs: the core's node list."""
        return list(self.node_runs)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.types)

    def describe(self) -> str:
        """``24 x mi300x`` or ``16 x mi355x + 32 x mi300x``."""
        return " + ".join(f"{self.gpus_of(t)} x {g.name}" for t, g in enumerate(self.types))


def _gpus_in(runs: Sequence[tuple[int, int, int]]) -> int:
    """The GPUs of node runs (a pool may hold a million: summed at C speed)."""
    return sum(map(operator.mul, map(itemgetter(1), runs), map(itemgetter(2), runs)))


def _add_run(runs: list[tuple[int, int, int]], t: int, free: int, count: int) -> None:
    if count <= 0:
        return
    if runs and runs[-1][0] == t and runs[-1][1] == free:
        runs[-1] = (t, free, runs[-1][2] + count)
    else:
        runs.append((t, free, count))


def _plain_counts(spec: Sequence[Any], size: int) -> bool:
    """Whether ``spec`` lists only plain ints from 0 to ``size`` (bools and other integer
    types take the checked path, which names the entry)."""
    return (
        isinstance(spec, list | tuple)
        and set(map(type, spec)) == {int}
        and min(spec) >= 0
        and max(spec) <= size
    )


def _device_lists(spec: Sequence[Any], size: int) -> list[tuple[int, ...]] | None:
    """``spec`` as tuples of device ids when it lists only lists (or tuples) of distinct
    plain ints from 0 to ``size - 1``, at most ``size`` each; None otherwise."""
    if not isinstance(spec, list | tuple) or not {list, tuple}.issuperset(map(type, spec)):
        return None
    flat = list(itertools.chain.from_iterable(spec))
    if flat and (set(map(type, flat)) != {int} or min(flat) < 0 or max(flat) >= size):
        return None
    ids = list(map(tuple, spec))
    if list(map(len, map(frozenset, ids))) != list(map(len, ids)):
        return None  # a device given twice
    return ids


def _runs_of(spec: Sequence[int], t: int) -> list[tuple[int, int, int]]:
    """``(t, free, nodes)`` runs of equal neighbours of ``spec``, in order."""
    import numpy as np  # loaded by OR-Tools already; not by `import pdtp`

    a = np.asarray(spec, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1])))
    counts = np.diff(np.append(starts, a.size))
    return list(zip(itertools.repeat(t), a[starts].tolist(), counts.tolist()))


def _count(field: str, value: Any, *, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{field} must be an integer, got {type(value).__name__} {value!r}")
    v = int(value)
    if not minimum <= v <= maximum:
        raise InvalidArgumentError(f"{field} must be in [{minimum}, {maximum}], got {v}")
    return v


def _gpu_type(field: str, name: Any) -> GPU:
    from ..catalog import gpu as find_gpu

    if not isinstance(name, str) and type(name).__name__ != "GPU":
        raise ArgumentTypeError(
            f"{field} must be a GPU type name, got {type(name).__name__} {name!r}"
        )
    return find_gpu(name)


def resolve_pool(
    gpus: Any,
    nodes: Any,
    gpu: Any,
    gpus_per_node: Any,
    prices: Any,
    *,
    budget_field: str = "gpus",
) -> Pool:
    """The pool from exactly one of ``gpus`` (a count, or a dict of counts per GPU type)
    and ``nodes`` (free GPUs per node, or a dict of such lists per GPU type)."""
    if (gpus is None) == (nodes is None):
        raise InvalidArgumentError(
            f"give {budget_field}= (a GPU count, or a dict of counts per GPU type) or nodes= "
            "(free GPUs per node, or a dict of such lists per GPU type), not both or neither"
        )
    node_override = optional_positive_int("gpus_per_node", gpus_per_node, maximum=1 << 10)
    source = gpus if gpus is not None else nodes
    field = budget_field if gpus is not None else "nodes"
    if isinstance(source, Mapping):
        if gpu is not None:
            raise InvalidArgumentError(
                f"gpu= names the GPU type of a single-type pool; {field}= is a dict of GPU "
                "types already"
            )
        if not source:
            raise InvalidArgumentError(f"{field} must name at least one GPU type")
        per_type = [(_gpu_type(f"{field} key", k), v, f"{field}[{k!r}]") for k, v in source.items()]
    else:
        per_type = [(_gpu_type("gpu", gpu if gpu is not None else DEFAULT_GPU), source, field)]
    types: list[GPU] = []
    sizes: list[int] = []
    runs: list[tuple[int, int, int]] = []
    nodes_seen = 0
    devices: dict[int, tuple[int, ...]] = {}
    for t, (g, spec, where) in enumerate(per_type):
        if g.name in (x.name for x in types):
            raise InvalidArgumentError(f"{field} lists GPU type {g.name!r} twice")
        size = node_override or g.gpus_per_node
        types.append(g)
        sizes.append(size)
        if gpus is not None:
            count = positive_int(where, spec, maximum=MAX_GPUS)
            full, rest = divmod(count, size)
            _add_run(runs, t, size, full)
            _add_run(runs, t, rest, 1 if rest else 0)
            nodes_seen += full + (1 if rest else 0)
            continue
        if isinstance(spec, (str, bytes, Mapping)) or not isinstance(spec, Sequence):
            raise ArgumentTypeError(
                f"{where} must be a list of free GPUs per node (ints) or of free device id "
                f"lists, got {type(spec).__name__}"
            )
        if not spec or nodes_seen + len(spec) > MAX_NODES:
            raise InvalidArgumentError(
                f"{where} must list between 1 and {MAX_NODES:,} nodes in all (a million GPUs "
                f"on 8-GPU nodes; reading more would overrun time_limit_s), got {len(spec):,}"
            )
        plain = _plain_counts(spec, size)
        if len(spec) > MAX_ID_NODES and not plain:
            raise InvalidArgumentError(
                f"{where} lists {len(spec):,} nodes: past {MAX_ID_NODES:,} nodes give each "
                "node's free GPU count, not its device ids (reading that many id lists would "
                "overrun time_limit_s)"
            )
        ids_of = None if plain else _device_lists(spec, size)
        if ids_of is not None or plain:
            # Free-GPU counts or device-id lists only (the common cases): checked and
            # run-length coded at C speed, inside the planners' time limit. Anything else
            # takes the loop below, which names the entry at fault.
            counts = spec if ids_of is None else list(map(len, ids_of))
            if sum(counts) + _gpus_in(runs) > MAX_GPUS:
                break  # refused below, by the total
            if ids_of is not None:
                devices.update(zip(range(nodes_seen, nodes_seen + len(spec)), ids_of))
            coded = _runs_of(counts, t)
            _add_run(runs, *coded[0])  # may continue the previous run
            runs.extend(coded[1:])
            nodes_seen += len(spec)
            continue
        for i, entry in enumerate(spec):
            at = f"{where}[{i}]"
            if isinstance(entry, Sequence) and not isinstance(entry, (str, bytes)):
                ids = tuple(
                    _count(f"{at} device id", d, minimum=0, maximum=size - 1) for d in entry
                )
                if len(set(ids)) != len(ids) or len(ids) > size:
                    raise InvalidArgumentError(
                        f"{at} must list distinct device ids of a {size}-GPU {g.name} node"
                    )
                free = len(ids)
                devices[nodes_seen] = ids
            else:
                free = _count(at, entry, minimum=0, maximum=size)
            _add_run(runs, t, free, 1)
            nodes_seen += 1
    total = _gpus_in(runs)
    if total < 1:
        raise InvalidArgumentError(f"{field} has no free GPU")
    if total > MAX_GPUS:
        raise InvalidArgumentError(f"{field} holds {total} GPUs; at most {MAX_GPUS} are planned")
    return Pool(
        types=tuple(types),
        node_size=tuple(sizes),
        prices=tuple(_price(g, prices) for g in types),
        node_runs=tuple(runs),
        devices=devices,
    )


def _price(g: GPU, prices: Any) -> float | None:
    if prices is not None:
        if not isinstance(prices, Mapping):
            raise ArgumentTypeError(
                f"prices must be a dict {{gpu type: USD per GPU-hour}}, got {type(prices).__name__}"
            )
        for key, value in prices.items():
            if _gpu_type("prices key", key).name == g.name:
                v = positive_number(f"prices[{key!r}]", value)
                if v > MAX_PRICE:
                    raise InvalidArgumentError(
                        f"prices[{key!r}] must be at most {MAX_PRICE:g} USD per GPU-hour"
                    )
                return v
    return g.price_per_hour


def resolve_mode(mode: Any) -> str:
    """``"auto"``, ``"disagg"`` or ``"agg"`` (long forms accepted)."""
    if not isinstance(mode, str) or mode.strip().lower() not in MODES:
        raise InvalidArgumentError(
            f"mode must be one of auto (disaggregated or aggregated, whichever serves more), "
            f"disagg (prefill and decode instances), agg (instances doing both), got {mode!r}"
        )
    return MODES[mode.strip().lower()]


def resolve_layouts(
    layouts: Any,
) -> tuple[list[str] | None, list[tuple[int, int, int, bool]]] | None:
    """The layout space for the core: ``None`` (pdtp's default: TP; TP+EP and DP-attention +
    EP for MoE models; PP where no layout inside a node holds the weights), or families
    (``"tp"``, ``"ep"``, ``"dp"``, ``"pp"``, ``"all"``) and/or explicit layouts
    (``"tp2dp4ep"``, ``pdtp.Layout``), given as a list or a comma-separated string."""
    from ..layout import Layout

    if layouts is None:
        return None
    if isinstance(layouts, str | Layout):
        items: list[Any] = layouts.split(",") if isinstance(layouts, str) else [layouts]
    elif isinstance(layouts, Sequence) and not isinstance(layouts, bytes):
        items = list(layouts)
    else:
        raise ArgumentTypeError(
            f"layouts must be a list (or comma-separated string) of layout families "
            f"({', '.join(LAYOUT_FAMILIES)}, all) and layouts such as 'tp2dp4ep', got "
            f"{type(layouts).__name__}"
        )
    if len(items) > 256:
        raise InvalidArgumentError(f"layouts lists at most 256 entries, got {len(items)}")
    families: list[str] = []
    explicit: list[tuple[int, int, int, bool]] = []
    for item in items:
        key = item.strip().lower() if isinstance(item, str) else None
        if key == "all":
            families.extend(LAYOUT_FAMILIES)
        elif key in LAYOUT_FAMILIES:
            families.append(key)
        elif key == "":
            continue
        else:
            explicit.append(Layout.of(item, "layouts").core)
    if not families and not explicit:
        raise InvalidArgumentError(
            f"layouts must name at least one family ({', '.join(LAYOUT_FAMILIES)}, all) or "
            "layout (e.g. tp2dp4ep)"
        )
    return (sorted(set(families)) or None, explicit) if explicit else (sorted(set(families)), [])


def resolve_connector_key(connector: Any, vllm_version: Any) -> tuple[Connector, str]:
    """The connector profile and the core's key: ``"name"`` or ``"name@X.Y.Z"``."""
    if vllm_version is None:
        conn = resolve_connector(connector)
    else:
        if not isinstance(vllm_version, str) or not vllm_version.strip():
            raise ArgumentTypeError(
                f"vllm_version must be a version string like '0.11.0', got {vllm_version!r}"
            )
        conn = resolve_connector(connector, vllm_version=vllm_version)
    return conn, conn.key


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

    @cached_property
    def layout_facts(self) -> tuple[int, int, bool, int, int, bool, bool, bool, int, int]:
        """What the layout rules read of the model (``pdtp.layout.layout_model``), read once
        here and handed to every rule check of this scenario's plans."""
        from ..layout import layout_model

        return layout_model(self.model)


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
    #: Which vLLM release's constants the scenario predicts with (``release_note``).
    constants_note: str = ""
    #: Per GPU type, the engine's own memory fraction by ``(tp, dp, pp, role)`` where it
    #: sizes the instances (SGLang's ``mem_fraction_static``, the line naming none); empty:
    #: every instance at ``gpu_memory_utilization``.
    memory_fractions: tuple[dict[tuple[int, int, int, str], float], ...] = ()

    def context(self, model: int, gpu_type: int) -> Context:
        """The performance-model inputs of one model on one GPU type."""
        return Context(
            self.models[model].model,
            self.pool.types[gpu_type],
            self.constants[gpu_type],
            self.gpu_memory_utilization,
        )


def demand_value(field: str, value: Any) -> float:
    """A demand in requests/s: a finite number ≥ 0 (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(
            f"{field} must be a number of requests/s, got {type(value).__name__} {value!r}"
        )
    v = float(value)
    if not (v >= 0 and math.isfinite(v)):
        raise InvalidArgumentError(f"{field} must be a finite number >= 0, got {value!r}")
    return v


def weight_value(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(
            f"{field} must be a number >= 0, got {type(value).__name__} {value!r}"
        )
    v = float(value)
    if not (math.isfinite(v) and v >= 0):
        raise InvalidArgumentError(f"{field} must be a finite number >= 0, got {value!r}")
    return v


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
    engine_memory: bool = False,
) -> Scenario:
    """Resolve and validate every input once; ``models`` lists ``(model, workload, demand,
    weight, name)``. ``engine_memory``: no fraction was given, so an engine whose fraction
    depends on the layout (SGLang) sizes each kind of instance at its own default."""
    from .._model import Model
    from ..catalog import resolve_model
    from ..constants import constants_for, constants_note

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
    # The plan's engine (SGLang for an sglang-* connector: its scheduling as fitted on its
    # aggregated runs, carried to P/D instances) and release pick the constants, the
    # release's own where it has measured data.
    engine = conn.engine
    consts = tuple(constants_for(g.name, constants, engine, conn.vllm_version) for g in pool.types)
    entries = []
    specs = []
    from ..engine import engine as engine_of

    eng = engine_of(engine)
    by_layout = engine_memory and eng.memory_by_layout
    fractions: list[dict[tuple[int, int, int, str], float]] = []
    for model, workload, demand, weight, name in models:
        # A model the caller resolved (the public Scenario's) is not looked up again.
        m = model if isinstance(model, Model) else resolve_model(model)
        w = resolve_workload(workload)
        entry = ModelEntry(name or m.name, m, w, demand, weight)
        entries.append(entry)
        tables = None
        if by_layout:
            tables = [
                _engine_fractions(eng, g, conn.vllm_version, m.is_mla, size, tp_bound, space)
                for g, size in zip(pool.types, pool.node_size)
            ]
            fractions = fractions or [dict(t) for t in tables]
        specs.append(
            _core.ModelSpec(
                name=entry.name,
                model=model_inputs(m),
                workload=w._core_dict(),
                gpus=[gpu_inputs(g, m.weight_dtype) for g in pool.types],
                demand_rps=demand,
                weight=weight,
                supports_pp=entry.layout_facts[5],
                memory_fractions=None if tables is None else [list(t.items()) for t in tables],
                sliding_window=entry.layout_facts[7],
                output_groups=entry.layout_facts[8],
            )
        )
    gpu_types = [
        _core.GpuType(
            name=g.name,
            vendor=g.vendor,
            constants=constant_inputs(c),
            node_size=size,
            price=0 if price is None else round(price * PRICE_SCALE),
            max_num_batched_tokens=float(engine_defaults(engine, g)["max_num_batched_tokens"]),
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
        constants_note=constants_note(constants, engine, conn.vllm_version),
        memory_fractions=tuple(fractions),
    )


#: DP-attention and pipeline sizes a default layout space reaches (src/plan/layouts.rs:
#: instances span at most 8 nodes, pipelines at most 8 stages).
_MAX_SPAN_NODES = 8
_MAX_PP = 8


def _engine_fractions(
    eng: Any, gpu: Any, release: str, mla: bool, node: int, bound: int | None, space: Any
) -> dict[tuple[int, int, int, str], float]:
    """The engine's fraction for every kind of instance the core may plan on ``gpu``:
    TP-only sizes up to the bound, DP attention in powers of two and pipelines over whole
    TP groups of one node, and the explicit layouts, in each role."""
    from ..layout import Layout

    top = bound or node
    kinds = {Layout(tp) for tp in range(1, top + 1)}
    for tp in range(1, min(top, node) + 1):
        dp = 2
        while tp * dp <= node * _MAX_SPAN_NODES:
            kinds.add(Layout(tp, dp=dp))
            dp *= 2
        kinds.update(Layout(tp, pp=pp) for pp in range(2, _MAX_PP + 1))
    if space is not None:
        kinds.update(Layout(tp, pp=pp, dp=dp) for tp, pp, dp, _ in space[1])
    return {
        (k.tp, k.dp, k.pp, role): eng.layout_fraction(gpu, release, k, role, mla)
        for k in sorted(kinds, key=lambda k: (k.tp, k.dp, k.pp))
        for role in ("prefill", "decode", "aggregated")
    }


def needs_prices(pool: Pool, objective: str) -> None:
    """Cost objectives need every GPU type's price."""
    missing = [g.name for g, p in zip(pool.types, pool.prices) if p is None]
    if missing:
        raise InvalidArgumentError(
            f"objective={objective!r} needs a price per GPU-hour for {', '.join(missing)} "
            f"(the catalog has none): pass prices={{{missing[0]!r}: USD_PER_GPU_HOUR}}"
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
        engine_memory=gpu_memory_utilization is None and question.gpu_memory_utilization is None,
    )
