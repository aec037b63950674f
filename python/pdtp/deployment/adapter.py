"""The one place ``pdtp deploy`` reads a plan: :func:`view_of` turns a :class:`pdtp.Plan` (or
its JSON, ``pdtp solve --json``) into a :class:`PlanView` — what to launch and where.

Everything else in ``pdtp.deploy`` works from the view. A plan carries its vLLM release
(``vllm_version``) and MoRIIO mode (``mode``: ``"read"``/``"write"``); plans written by other
tools may say neither: then a connector key ``"moriio@0.33.0"`` names the version and
``"moriio-write"`` the MoRIIO WRITE mode.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import Any

from .._model import KV_DTYPE_BYTES
from .._validate import short_repr
from ..engine import DEFAULT_ENGINE
from ..errors import ArgumentTypeError, InvalidArgumentError, UnknownNameError
from ..layout import Layout, is_hybrid, is_sliding
from .connectors import connector_of, named, plan_read_mode
from .versions import Version, resolve_version

ROLES = ("prefill", "decode")
# An aggregated plan's one kind of instance (prefill and decode in the same engine).
AGGREGATED = "aggregated"
ALL_ROLES = (*ROLES, AGGREGATED)
# vLLM's online quantization methods pdtp writes (``--quantization``).
QUANTIZATIONS = ("fp8",)
_VENDOR_OF_ENV = {"HIP_VISIBLE_DEVICES": "AMD", "CUDA_VISIBLE_DEVICES": "NVIDIA"}


@dataclass(frozen=True)
class PlannedInstance:
    """One vLLM instance of a plan: ``role`` (``"prefill"``/``"decode"``/``"aggregated"``)
    number ``index``
    on node ``node`` using ``devices`` (numbered within the node), ``tp`` × ``pp`` × ``dp``
    GPUs (``ep``: expert parallel). An instance spanning ``parts`` whole nodes is one
    ``PlannedInstance`` per node: ``part`` 0 on ``leader`` (the first node) serves the API,
    the others run headless."""

    role: str
    index: int
    node: int
    devices: tuple[int, ...]
    tp: int
    dp: int = 1
    pp: int = 1
    ep: bool = False
    part: int = 0
    parts: int = 1
    leader: int | None = None

    @property
    def name(self) -> str:
        base = f"{self.role}-{self.index}"
        return base if self.parts == 1 else f"{base}-part{self.part}"

    @property
    def layout(self) -> Layout:
        return _layout(self.tp, self.pp, self.dp, self.ep)

    @property
    def serves_api(self) -> bool:
        """Part 0 runs the API server (the proxy's backend); the others are headless."""
        return self.part == 0

    @property
    def local_dp_ranks(self) -> range:
        """The data-parallel ranks this part runs (all of them on one node)."""
        per = self.dp // self.parts if self.dp > 1 else 1
        return range(self.part * per, (self.part + 1) * per) if self.dp > 1 else range(1)

    @property
    def aggregated(self) -> bool:
        """Serves both phases itself: no KV connector, reached through a router."""
        return self.role == AGGREGATED


@dataclass(frozen=True)
class PlanView:
    """What ``pdtp deploy`` needs from a plan. ``read_mode`` (the connector's transfer mode)
    is None for a connector without modes (NIXL);
    ``vllm_version`` is None when the plan does not say (deploy then uses its argument or
    the newest supported release)."""

    model_ref: str
    served_model_name: str | None
    connector: str
    kv_connector: str
    prefill_role: str
    decode_role: str
    read_mode: bool | None
    vllm_version: Version | None
    gpu: str
    vendor: str
    visible_devices_env: str
    gpus_per_node: int
    gpu_memory_utilization: float
    kv_dtype: str
    instances: tuple[PlannedInstance, ...]
    #: vLLM's ``--quantization`` the weights need (``"fp8"``: a 16-bit checkpoint planned
    #: with FP8 weights is quantized on load), None when the checkpoint loads as it is.
    quantization: str | None = None
    #: The share of GPU memory each role was sized at where the engine picks its own by
    #: layout (the plan's ``memory_fractions``); None: ``gpu_memory_utilization`` for all.
    memory_fractions: dict[str, float] | None = None
    #: The model's attention is MLA (an engine's memory default may depend on it).
    mla: bool = False
    #: The model has Mamba-type layers (a connector may need a setting for their state).
    hybrid: bool = False
    #: The model has sliding-window layers (a KV-cache group of their own under vLLM's
    #: hybrid KV-cache manager, which a connector may need a flag to keep on).
    sliding: bool = False
    #: The serving engine that runs the plan (its connector's: ``pdtp.engine.ENGINES``).
    engine: str = "vllm"
    #: The release of a plan of another engine than vLLM (``vllm_version`` is then None).
    engine_version: str | None = None

    def memory_fraction(self, role: str) -> float:
        """The share of GPU memory instances of ``role`` were sized at."""
        if self.memory_fractions and role in self.memory_fractions:
            return self.memory_fractions[role]
        return self.gpu_memory_utilization

    @cached_property
    def aggregated(self) -> bool:
        """An aggregated plan: every instance serves both phases behind a router. Cached:
        every instance's launch line and script asks (a scan each made deploy quadratic)."""
        return any(i.aggregated for i in self.instances)

    @property
    def nodes(self) -> int:
        return 1 + max((i.node for i in self.instances), default=0)

    def tp_of(self, role: str) -> int:
        """The TP size of ``role``'s instances (0 when the plan has none)."""
        return next((i.tp for i in self.instances if i.role == role), 0)

    def layout_of(self, role: str) -> Layout | None:
        """The layout of ``role``'s instances (None when the plan has none)."""
        return next((i.layout for i in self.instances if i.role == role), None)


@lru_cache(maxsize=1024)
def _layout(tp: int, pp: int, dp: int, ep: bool) -> Layout:
    """One :class:`Layout` per shape (a plan of a million instances has a handful)."""
    return Layout(tp, pp, dp, ep)


def view_of(plan: Any, model_path: Any = None) -> PlanView:
    """THE adapter: a :class:`pdtp.Plan`, or a plan's JSON as a dict (read by
    :meth:`pdtp.Plan.from_dict`, which checks every field), as a :class:`PlanView`.
    ``model_path`` (an HF id or a model folder) is what ``vllm serve`` loads in place of the
    plan's own reference: a plan of a model given as a config has none to offer."""
    if isinstance(plan, PlanView):
        return plan if model_path is None else replace(plan, model_ref=_model_path(model_path))
    if isinstance(plan, Mapping):
        from ..planning.plan import Plan

        plan = Plan.from_dict(plan)
    if not all(hasattr(plan, a) for a in ("prefill", "decode", "model_id", "connector", "gpu")):
        raise ArgumentTypeError(
            f"plan must be a pdtp.Plan or its JSON (a dict from `pdtp solve --json`), "
            f"got {type(plan).__name__}"
        )
    name, key_version = _split_connector(plan.connector)
    aggregated = getattr(plan, "aggregated", None)
    if getattr(plan, "serving", "disagg") == "agg" or aggregated is not None:
        if aggregated is None:
            raise InvalidArgumentError("plan: an aggregated plan ('serving': 'agg') needs its side")
        sides = {AGGREGATED: (aggregated.layout, aggregated.instances)}
    elif plan.prefill is None or plan.decode is None:
        raise InvalidArgumentError("plan: a P/D plan needs its prefill and decode sides")
    else:
        sides = {
            "prefill": (plan.prefill.layout, plan.prefill.instances),
            "decode": (plan.decode.layout, plan.decode.instances),
        }
    # The planner's placement; a plan read without one is placed as the planners place
    # (`_packed`: the same routine as Plan.placement()).
    placement = getattr(plan, "assignment", None) or None
    view = _view(
        model_ref=(
            getattr(plan, "serve_ref", plan.model_id)
            if model_path is None
            else _model_path(model_path)
        ),
        served_model_name=getattr(plan, "served_model_name", None),
        connector=name,
        kv_connector=getattr(plan, "kv_connector", "") or "",
        roles=(getattr(plan, "prefill_role", None), getattr(plan, "decode_role", None)),
        read_mode=plan_read_mode(plan),
        version=getattr(plan, "vllm_version", None) or key_version,
        gpu=plan.gpu,
        visible_devices_env=getattr(plan, "visible_devices_env", None),
        gpus_per_node=getattr(plan, "gpus_per_node", None),
        gpu_memory_utilization=getattr(plan, "gpu_memory_utilization", None),
        kv_dtype=getattr(plan, "kv_dtype", None),
        quantization=getattr(plan, "quantization", None),
        sides=sides,
        placement=placement,
    )
    fractions = getattr(plan, "memory_fractions", None)
    spec = getattr(plan, "model_spec", None)
    return replace(
        view,
        memory_fractions=dict(fractions) if fractions else None,
        mla=bool(getattr(spec, "is_mla", False)),
        hybrid=spec is not None and is_hybrid(spec),
        sliding=spec is not None and is_sliding(spec),
    )


def _model_path(value: Any) -> str:
    """``model_path`` as ``vllm serve`` takes it (checked as a plan's ``model_id`` is; a
    folder is made absolute, so the launch lines do not depend on where they run from)."""
    if not isinstance(value, str | os.PathLike):
        raise ArgumentTypeError(
            f"model_path must be an HF id or a model folder (a string), got {type(value).__name__}"
        )
    text = os.fspath(value)
    if not isinstance(text, str) or not text.strip() or text.startswith("-") or "\0" in text:
        raise InvalidArgumentError(
            f"model_path must be an HF id or a model folder (not starting with '-'), got "
            f"{short_repr(text)}"
        )
    local = (
        isinstance(value, os.PathLike) or text.startswith((".", "/", "~")) or os.path.isdir(text)
    )
    return os.path.abspath(os.path.expanduser(text)) if local else text


def _view(
    *,
    model_ref: Any,
    served_model_name: Any,
    connector: str,
    kv_connector: str,
    roles: tuple[Any, Any],
    read_mode: bool | None,
    version: Any,
    gpu: Any,
    visible_devices_env: Any,
    gpus_per_node: Any,
    gpu_memory_utilization: Any,
    kv_dtype: Any,
    quantization: Any = None,
    sides: dict[str, tuple[Layout, int]],
    placement: Any,
) -> PlanView:
    # Quoting keeps any value inert in a shell; a leading "-" would still read as an option
    # to `vllm serve`, and a NUL cannot be passed at all.
    if (
        not isinstance(model_ref, str)
        or not model_ref.strip()
        or model_ref.startswith("-")
        or ("\0" in model_ref)
    ):
        raise InvalidArgumentError(
            "plan 'model_id' must be an HF id or a path (not starting with '-'), got "
            f"{short_repr(model_ref)}"
        )
    if served_model_name is not None and (
        not isinstance(served_model_name, str)
        or not served_model_name.strip()
        or served_model_name.startswith("-")
        or "\0" in served_model_name
    ):
        raise InvalidArgumentError(
            f"plan 'served_model_name' must be a name not starting with '-', or None; got "
            f"{served_model_name!r}"
        )
    if not isinstance(gpu, str):
        raise InvalidArgumentError(f"plan 'gpu' must be a GPU name, got {gpu!r}")
    catalog_gpu = _catalog_gpu(gpu)
    if not kv_connector or roles[0] is None or roles[1] is None:
        from ..connectors import resolve_connector

        try:
            profile = resolve_connector(connector)
        except UnknownNameError:
            # A mode the rules data does not name yet ("moriio-x"): its connector's launch.
            module = named(connector)
            if module is None:
                raise
            profile = module.core
        kv_connector = kv_connector or profile.kv_connector
        roles = (roles[0] or profile.prefill_role, roles[1] or profile.decode_role)
    read_mode = connector_of(kv_connector).read_mode(connector, read_mode)
    engine = connector_of(kv_connector).engine
    vllm = engine == DEFAULT_ENGINE
    env = visible_devices_env or (catalog_gpu.visible_devices_env if catalog_gpu else None)
    if env not in _VENDOR_OF_ENV:
        raise InvalidArgumentError(
            f"plan 'visible_devices_env' must be one of {sorted(_VENDOR_OF_ENV)}, got {env!r}"
        )
    # `is None`, not `or`: a plan's gpus_per_node 0 is refused, not read as the default.
    per_node = (
        gpus_per_node
        if gpus_per_node is not None
        else (catalog_gpu.gpus_per_node if catalog_gpu else None)
    )
    per_node = _int("plan 'gpus_per_node'", per_node, 1)
    gmu = 0.9 if gpu_memory_utilization is None else gpu_memory_utilization
    if isinstance(gmu, bool) or not isinstance(gmu, numbers.Real) or not 0 < float(gmu) <= 1:
        raise InvalidArgumentError(
            f"plan 'gpu_memory_utilization' must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    kv = kv_dtype or "bf16"
    if kv not in KV_DTYPE_BYTES:
        raise InvalidArgumentError(
            f"plan 'kv_dtype' must be one of {sorted(KV_DTYPE_BYTES)}, got {kv_dtype!r}"
        )
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise InvalidArgumentError(
            f"plan 'quantization' must be one of {list(QUANTIZATIONS)} or null, got "
            f"{quantization!r}"
        )
    return PlanView(
        quantization=quantization,
        model_ref=model_ref,
        served_model_name=served_model_name,
        connector=connector,
        kv_connector=kv_connector,
        prefill_role=roles[0],
        decode_role=roles[1],
        read_mode=read_mode,
        vllm_version=None if version is None or not vllm else resolve_version(version),
        engine=engine,
        engine_version=str(version) if not vllm and version is not None else None,
        gpu=catalog_gpu.name if catalog_gpu else gpu,
        vendor=_VENDOR_OF_ENV[env],
        visible_devices_env=env,
        gpus_per_node=per_node,
        gpu_memory_utilization=float(gmu),
        kv_dtype=kv,
        instances=_instances(sides, per_node, placement),
    )


def _instances(
    sides: dict[str, tuple[Layout, int]], gpus_per_node: int, placement: Any
) -> tuple[PlannedInstance, ...]:
    if placement is None:
        placement = _packed(sides, gpus_per_node)
    out = []
    for row in placement:
        if hasattr(row, "role"):  # a placement record (pdtp.Placement) with attributes
            role, devices = row.role, row.devices
            index = getattr(row, "instance", getattr(row, "index", None))
            if index is None:
                raise InvalidArgumentError(
                    f"plan placement of {role}: a placement record needs 'instance' or 'index'"
                )
            node = row.node
            nodes = tuple(getattr(row, "nodes", ()) or (node,))
        elif len(row) == 5:
            role, index, node, devices, nodes = row
        else:
            role, index, node, devices = row
            nodes = (node,)
        if role not in sides:
            raise InvalidArgumentError(
                f"plan placement names a {role} instance, but the plan's sides are "
                f"{', '.join(sides)}"
            )
        layout = sides[role][0]
        devs = tuple(int(x) for x in devices)
        if (
            layout.is_tp_only
            and len(nodes) == 1
            and len(devs) > layout.tp
            and len(devs) % layout.tp == 0
        ):
            # A TP-only side placed on tp × dp devices: data-parallel ranks of that TP size
            # (plans written before layouts said so in their placement alone).
            layout = Layout(layout.tp, dp=len(devs) // layout.tp)
        per_node = layout.gpus // len(nodes)
        if (
            layout.gpus % len(nodes)
            or len(devs) != per_node
            or any(not 0 <= x < gpus_per_node for x in devs)
        ):
            raise InvalidArgumentError(
                f"plan placement of {role} {index} uses devices {list(devs)} on {len(nodes)} "
                f"node(s): its layout {layout} needs {layout.gpus} GPUs, numbered "
                f"0..{gpus_per_node - 1} on each node"
            )
        for part, n in enumerate(nodes):
            out.append(
                PlannedInstance(
                    role,
                    int(index),
                    int(n),
                    devs,
                    layout.tp,
                    layout.dp,
                    layout.pp,
                    layout.ep,
                    part,
                    len(nodes),
                    int(nodes[0]),
                )
            )
    return tuple(out)


def _packed(
    sides: dict[str, tuple[Layout, int]], gpus_per_node: int
) -> list[tuple[str, int, int, list[int], tuple[int, ...]]]:
    """A placement for a plan that lists none: the planners' own (``_core.pack``) on the
    fewest whole nodes. It fills partly used nodes before opening one (a next fit in plan
    order left holes: 7 × tp1 + 3 × tp3 solved on two 8-GPU nodes asked for three), and a
    plan solved on whole nodes lands where the planner put it."""
    from .. import _core

    instances = [(role, layout.gpus) for role, (layout, n) in sides.items() for _ in range(n)]
    return [
        (p.role, p.index, p.node, list(p.devices), tuple(p.nodes))
        for p in _core.pack(instances, gpus_per_node)
    ]


def _split_connector(key: str) -> tuple[str, str | None]:
    """``"moriio@0.33.0"`` -> ``("moriio", "0.33.0")``: the connector key contract."""
    name, _, version = key.strip().lower().replace("_", "-").partition("@")
    return name, (version or None)


def _catalog_gpu(name: str) -> Any:
    from ..catalog import gpu

    try:
        return gpu(name)
    except UnknownNameError:
        return None


def _int(field: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        else:
            raise InvalidArgumentError(f"{field} must be an integer >= {minimum}, got {value!r}")
    if value < minimum or value > 1 << 20:
        raise InvalidArgumentError(f"{field} must be an integer >= {minimum}, got {value!r}")
    return int(value)
