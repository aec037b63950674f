"""``pdtp.Scenario``: the planning question as one value — the model (or a fleet's demands),
the GPU pool, the workload and its SLOs, the connector and vLLM release, the limits, the
mode, the layouts and the objective — validated once, when it is made; and
``pdtp.SolverConfig``: how hard to search (time limit, method, workers), kept apart because it
changes how long an answer takes, not what the question is.

Every planner takes one (``pdtp.solve(scenario)``, ``size_for``, ``replan``, ``pareto``,
``solve_fleet``, ``evaluate``, ``simulate``, ``sweep``; the CLI's ``--scenario file``); their
keyword arguments build one, so ``pdtp.solve("llama-3.1-70b", gpus=24)`` and
``pdtp.solve(pdtp.Scenario(model="llama-3.1-70b", gpus=24))`` ask the same question.
Keywords given beside a Scenario replace its fields.

>>> import pdtp
>>> sc = pdtp.Scenario(model="llama-3.1-8b", gpus=8, gpu="h100", connector="nixl")
>>> pdtp.Scenario.from_dict(sc.to_dict()) == sc
True
>>> pdtp.solve(sc).gpus_used <= 8
True

A field left ``None`` takes the default of the function asked (``objective``: solve's
``"throughput"``, size_for's ``"gpus"``, solve_fleet's ``"max_min"``; ``connector``: MoRIIO on
AMD GPUs, NIXL on NVIDIA; ``gpu_memory_utilization``: 0.9, replan's the running plan's own).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib
import json
import os
import pathlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ._gpu import DEFAULT_GPU
from ._validate import MAX_TP, optional_positive_int, positive_int, positive_number, short_repr
from .errors import ArgumentTypeError, InvalidArgumentError

if TYPE_CHECKING:
    from ._model import Model
    from .planning.scenario import Pool
    from .workload import Workload

#: Every objective a planner takes (each planner checks its own subset):
#: solve's, size_for's and solve_fleet's.
OBJECTIVES: dict[str, tuple[str, ...]] = {
    "solve": ("throughput", "tokens_per_dollar", "cost"),
    "size_for": ("gpus", "cost"),
    "solve_fleet": ("max_min", "weighted"),
}
ALL_OBJECTIVES: tuple[str, ...] = tuple(dict.fromkeys(o for v in OBJECTIVES.values() for o in v))
#: The fields that say where and how to search (the pool, the objective, the search space):
#: they do not apply to one configuration given whole (``evaluate``).
SEARCH_FIELDS: tuple[str, ...] = (
    "gpus",
    "nodes",
    "gpus_per_node",
    "prices",
    "objective",
    "demand_rps",
    "slo_percentile",
    "mode",
    "layouts",
    "max_tp",
)
#: How a planner decides: CP-SAT, or the exhaustive oracle.
METHODS: tuple[str, ...] = ("cpsat", "enumerate")
#: CP-SAT's search workers, at most.
MAX_WORKERS = 64
#: Largest scenario file read (bytes): a question, not a data set.
MAX_FILE_BYTES = 1 << 20

# How the pool's budget is named in errors: ``gpus`` (solve, pareto, solve_fleet) or
# ``max_gpus`` (size_for, replan), which ask the same question of the same field.
_BUDGET_FIELD: contextvars.ContextVar[str] = contextvars.ContextVar("budget", default="gpus")
# A model already resolved (the value given, the Model): ``replace`` hands it to the copy.
_KNOWN_MODEL: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar(
    "known_model", default=None
)


P = ParamSpec("P")
R = TypeVar("R")


@contextlib.contextmanager
def budget_named(name: str) -> Iterator[None]:
    """Errors about ``Scenario.gpus`` name it ``name`` (``max_gpus`` for size_for/replan)."""
    token = _BUDGET_FIELD.set(name)
    try:
        yield
    finally:
        _BUDGET_FIELD.reset(token)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A planning question, validated when made (one :class:`pdtp.PdtpError` naming the field
    and its allowed values). ``None`` fields take the asked function's default.

    The pool: ``gpus=24`` (full nodes of the GPU type's size, the last one partial),
    ``nodes=[8, 8, 5, 3]`` (free GPUs per node, or each node's free device ids), or several
    GPU types (``gpus={"mi355x": 16, "mi300x": 32}``, ``nodes={"mi355x": [8, 8]}``); size_for
    and replan read ``gpus`` as their ``max_gpus``. ``demands`` is solve_fleet's list of
    ``(model, demand_rps[, workload[, weight]])`` tuples or dicts (then ``model`` stays None).
    """

    model: Any = None
    demands: tuple[Any, ...] | None = None
    gpus: Any = None
    nodes: Any = None
    gpu: str | None = None
    gpus_per_node: int | None = None
    prices: Mapping[str, float] | None = None
    workload: Workload | None = None
    connector: str | None = None
    vllm_version: str | None = None
    objective: str | None = None
    demand_rps: float | None = None
    max_tp: int | None = None
    max_acks: int | None = None
    gpu_memory_utilization: float | None = None
    constants: Any = None
    slo_percentile: float | None = None
    mode: str = "auto"
    layouts: tuple[str, ...] | None = None
    # What validation resolved, handed down so nothing looks it up again.
    _model: Model | None = field(default=None, init=False, repr=False, compare=False)
    _pool: Pool | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The pool and field checks are the planners' own (planning/scenario.py): imported
        # here, not at the top, as planning imports this module (the one documented upward
        # import, tests/test_imports.py).
        from .planning.scenario import (
            demand_value,
            resolve_connector_key,
            resolve_mode,
            resolve_pool,
        )
        from .workload import resolve_workload

        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        if self.model is not None:
            known = _KNOWN_MODEL.get()
            if known is not None and known[0] is self.model:
                put("_model", known[1])
            else:
                put("_model", _resolved_model(self.model))
        if self.demands is not None:
            put("demands", _demands(self.demands))
            if self.model is not None:
                raise InvalidArgumentError(
                    "give model= (one model) or demands= (a fleet's models), not both"
                )
        if self.gpu is not None:
            put("gpu", _gpu_name("gpu", self.gpu))
        put("gpus", _frozen(self.gpus))
        put("nodes", _frozen(self.nodes))
        if self.prices is not None:
            if not isinstance(self.prices, Mapping):
                raise ArgumentTypeError(
                    "prices must be a dict {gpu type: USD per GPU-hour}, got "
                    f"{type(self.prices).__name__}"
                )
            put("prices", dict(self.prices))
        if self.gpus is not None or self.nodes is not None:
            budget = _BUDGET_FIELD.get()
            put(
                "_pool",
                resolve_pool(
                    self.gpus,
                    self.nodes,
                    self.gpu,
                    self.gpus_per_node,
                    self.prices,
                    budget_field=budget,
                ),
            )
        else:
            optional_positive_int("gpus_per_node", self.gpus_per_node, maximum=1 << 10)
            if self.prices is not None:
                for key, value in self.prices.items():
                    _gpu_name("prices key", key)
                    positive_number(f"prices[{key!r}]", value)
        if self.workload is not None:
            put("workload", resolve_workload(self.workload))
        if self.vllm_version is not None and (
            not isinstance(self.vllm_version, str) or not self.vllm_version.strip()
        ):
            raise ArgumentTypeError(
                "vllm_version must be a version string like '0.11.0', got "
                f"{type(self.vllm_version).__name__} {short_repr(self.vllm_version)}"
            )
        if self.connector is not None:
            conn, _ = resolve_connector_key(self.connector, self.vllm_version)
            if not isinstance(self.connector, str):  # a pdtp.Connector: its key says it all
                put("connector", conn.name)
                if self.vllm_version is None:
                    put("vllm_version", conn.vllm_version)
        if self.objective is not None and self.objective not in ALL_OBJECTIVES:
            raise InvalidArgumentError(
                f"objective must be one of {', '.join(ALL_OBJECTIVES)} (solve: "
                f"{', '.join(OBJECTIVES['solve'])}; size_for: {', '.join(OBJECTIVES['size_for'])}"
                f"; solve_fleet: {', '.join(OBJECTIVES['solve_fleet'])}), got "
                f"{short_repr(self.objective)}"
            )
        if self.demand_rps is not None:
            put("demand_rps", demand_value("demand_rps", self.demand_rps))
        put("max_tp", optional_positive_int("max_tp", self.max_tp, maximum=MAX_TP))
        put("max_acks", optional_positive_int("max_acks", self.max_acks, maximum=MAX_TP))
        if self.gpu_memory_utilization is not None:
            util = positive_number("gpu_memory_utilization", self.gpu_memory_utilization)
            if util > 1.0:
                raise InvalidArgumentError(f"gpu_memory_utilization must be in (0, 1], got {util}")
            put("gpu_memory_utilization", util)
        if self.constants is not None:
            from .constants import Constants, constants_for

            if isinstance(self.constants, Mapping):
                put("constants", dict(self.constants))
            constants_for(self.gpu or DEFAULT_GPU, self.constants)  # names and ranges
            if not isinstance(self.constants, Constants | dict):
                raise ArgumentTypeError(
                    "constants must be a pdtp.Constants or a dict of overrides, got "
                    f"{type(self.constants).__name__}"
                )
        put("slo_percentile", percentile_value(self.slo_percentile))
        put("mode", resolve_mode(self.mode))
        if self.layouts is not None:
            put("layouts", _layouts(self.layouts))

    # ---- what the planners read ------------------------------------------------------------

    @property
    def resolved_model(self) -> Model:
        """The model, resolved once when the scenario was made."""
        if self._model is None:
            raise InvalidArgumentError("this scenario names no model: give model=")
        return self._model

    def pool(self, gpu: str | None = None, *, budget_field: str = "gpus") -> Pool:
        """The GPU pool; ``gpu`` is the GPU type of a single-type pool that names none (replan:
        the running plan's)."""
        from .planning.scenario import resolve_pool

        if self._pool is not None and (gpu is None or self.gpu is not None):
            return self._pool
        return resolve_pool(
            self.gpus,
            self.nodes,
            self.gpu if self.gpu is not None else gpu,
            self.gpus_per_node,
            self.prices,
            budget_field=budget_field,
        )

    def objective_of(self, planner: str, default: str) -> str:
        """The objective for ``planner`` (its ``default`` when None), checked against the
        planner's own objectives."""
        objective = default if self.objective is None else self.objective
        allowed = OBJECTIVES[planner]
        if objective not in allowed:
            raise InvalidArgumentError(
                f"objective must be one of {', '.join(allowed)}, got {objective!r}"
            )
        return objective

    def utilization(self, default: float | None = None) -> float:
        from .engine import DEFAULT_UTILIZATION

        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        return DEFAULT_UTILIZATION if default is None else default

    def replace(self, **changes: Any) -> Scenario:
        """A copy with some fields changed (validated again)."""
        unknown = sorted(str(k) for k in changes if k not in FIELDS)
        if unknown:
            raise InvalidArgumentError(
                f"unknown scenario field(s) {', '.join(unknown)}; allowed: {', '.join(FIELDS)}"
            )
        token = _KNOWN_MODEL.set((self.model, self._model))
        try:
            return dataclasses.replace(self, **changes)
        finally:
            _KNOWN_MODEL.reset(token)

    # ---- to and from plain data ------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: fields left None are left out; a model given as a :class:`pdtp.Model`
        is written whole (``Model.to_dict``), one given by name as its name."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if not f.init:
                continue
            value = getattr(self, f.name)
            if value is None or (f.name == "mode" and value == "auto"):
                continue
            out[f.name] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scenario:
        """Inverse of :meth:`to_dict`; an unknown key is an error naming the allowed ones."""
        if not isinstance(data, Mapping):
            raise ArgumentTypeError(
                f"a scenario is a mapping of its fields, got {type(data).__name__}"
            )
        unknown = sorted(str(k) for k in data if k not in FIELDS)
        if unknown:
            raise InvalidArgumentError(
                f"unknown scenario field(s) {', '.join(unknown)}; allowed: {', '.join(FIELDS)}"
            )
        values = dict(data)
        model = values.get("model")
        if isinstance(model, Mapping) and "kv_bytes_per_token" in model:  # Model.to_dict
            from ._model import Model

            values["model"] = Model.from_dict(model)
        return cls(**values)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Scenario:
        """A scenario from a JSON (``.json``) or YAML (``.yaml``/``.yml``) file of its fields
        (a ``solver`` mapping in it is :func:`load`'s)."""
        return load(path)[0]


#: The fields a Scenario takes, in order.
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Scenario) if f.init)


@dataclass(frozen=True, kw_only=True)
class SolverConfig:
    """How a planner searches: ``time_limit_s`` bounds the whole call, ``method`` is
    ``"cpsat"`` (OR-Tools) or ``"enumerate"`` (the exhaustive oracle), ``num_workers`` CP-SAT's
    search workers (1: deterministic; CP-SAT's seed is fixed)."""

    time_limit_s: float = 10.0
    method: str = "cpsat"
    num_workers: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "time_limit_s", positive_number("time_limit_s", self.time_limit_s))
        if self.method not in METHODS:
            raise InvalidArgumentError(
                f"method must be one of {', '.join(METHODS)}, got {short_repr(self.method)}"
            )
        object.__setattr__(
            self, "num_workers", positive_int("num_workers", self.num_workers, maximum=MAX_WORKERS)
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SolverConfig:
        if not isinstance(data, Mapping):
            raise ArgumentTypeError(
                f"a solver config is a mapping of its fields, got {type(data).__name__}"
            )
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(str(k) for k in data if k not in allowed)
        if unknown:
            raise InvalidArgumentError(
                f"unknown solver field(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}"
            )
        return cls(**data)


# ---- the public functions' keyword arguments → one Scenario --------------------------------


def scenario_of(
    first: Any, *, first_field: str = "model", budget_field: str = "gpus", **given: Any
) -> Scenario:
    """The scenario a public function was asked: ``first`` (its first argument) is a
    :class:`Scenario` — then the keywords given (not None) replace its fields — or the
    ``first_field`` of a new one built from the keywords."""
    changes = {k: v for k, v in given.items() if v is not None}
    with budget_named(budget_field):
        if isinstance(first, Scenario):
            return first.replace(**changes) if changes else first
        if first is not None:
            changes[first_field] = first
        return Scenario(**changes)


def solver_of(
    solver: Any,
    *,
    time_limit_s: Any = None,
    method: Any = None,
    num_workers: Any = None,
) -> SolverConfig:
    """The solver settings: ``solver`` (a :class:`SolverConfig`, a dict of its fields or
    None) with the keywords given (not None) replacing its fields."""
    if solver is None:
        base = SolverConfig()
    elif isinstance(solver, SolverConfig):
        base = solver
    elif isinstance(solver, Mapping):
        base = SolverConfig.from_dict(solver)
    else:
        raise ArgumentTypeError(
            f"solver must be a pdtp.SolverConfig or a dict of its fields, got "
            f"{type(solver).__name__}"
        )
    changes = {
        k: v
        for k, v in (
            ("time_limit_s", time_limit_s),
            ("method", method),
            ("num_workers", num_workers),
        )
        if v is not None
    }
    return dataclasses.replace(base, **changes) if changes else base


def takes_scenario(
    *, renames: Mapping[str, str] | None = None, ignores: Sequence[str] = ()
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A public function that also takes a :class:`Scenario` as its first argument (and a
    :class:`SolverConfig` as ``solver=``): the scenario's fields (those not None) become the
    keyword arguments of the same names (``renames``: a field's name there, e.g. ``model`` →
    ``models``); keywords given beside it win. A field the function has no argument for is an
    error naming it, unless ``ignores`` lists it (it does not apply to what the function
    answers, e.g. the pool to ``evaluate``'s one configuration)."""
    names = dict(renames or {})

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.cache
        def parameters() -> tuple[str, ...]:
            import inspect

            return tuple(inspect.signature(fn).parameters)

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            solver = kwargs.pop("solver", None)
            if not (args and isinstance(args[0], Scenario)) and solver is None:
                return fn(*args, **kwargs)
            params = parameters()
            rest: tuple[Any, ...] = args
            merged: dict[str, Any] = {}
            if args and isinstance(args[0], Scenario):
                sc, rest = args[0], args[1:]
                first = params[0]
                want = next((f for f, n in names.items() if n == first), first)
                if want in FIELDS and getattr(sc, want) is None:
                    raise InvalidArgumentError(
                        f"{fn.__name__} needs the scenario's {want}: it names none"
                    )
                for f in FIELDS:
                    value = getattr(sc, f)
                    if value is None or (f == "mode" and value == "auto"):
                        continue
                    name = names.get(f, f)
                    if f == "gpus" and name not in params and "max_gpus" in params:
                        name = "max_gpus"
                    if name in params:
                        merged[name] = value
                    elif f not in ignores:
                        raise InvalidArgumentError(
                            f"{fn.__name__} does not take a scenario's {f} (leave it unset)"
                        )
                rest = (merged.pop(first), *rest)
            if solver is not None:
                cfg = solver_of(solver)
                for spec in fields(cfg):
                    value = getattr(cfg, spec.name)
                    if spec.name in params:
                        merged[spec.name] = value
                    elif value != spec.default:
                        raise InvalidArgumentError(
                            f"{fn.__name__} does not take a solver's {spec.name} (leave it "
                            f"{spec.default!r})"
                        )
            merged.update(kwargs)
            return fn(*rest, **merged)

        return call

    return wrap


def load(path: str | os.PathLike[str]) -> tuple[Scenario, SolverConfig]:
    """The scenario and solver settings of a ``.json``/``.yaml`` file: the scenario's fields,
    and optionally ``solver: {time_limit_s, method, num_workers}``."""
    data = read_mapping(path, "scenario")
    solver = data.pop("solver", None)
    try:
        return Scenario.from_dict(data), solver_of(solver)
    except (InvalidArgumentError, ArgumentTypeError) as e:
        raise type(e)(f"{os.fspath(path)}: {e}") from None


def read_mapping(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """A mapping from a ``.json``/``.yaml``/``.yml`` file, read with a cap; one
    :class:`InvalidArgumentError` naming the file when it cannot be read or parsed."""
    from ._io import read_capped_text

    if not isinstance(path, str | os.PathLike):
        raise ArgumentTypeError(f"{what} file must be a path, got {type(path).__name__}")
    p = pathlib.Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise InvalidArgumentError(f"{what} file must be .json, .yaml or .yml, got {str(p)!r}")
    text = read_capped_text(p, limit=MAX_FILE_BYTES, what=f"{what} file")
    try:
        if suffix == ".json":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise InvalidArgumentError(f"{p}: not valid JSON: {e}") from None
        else:
            try:
                yaml: Any = importlib.import_module("yaml")
            except ImportError:
                raise InvalidArgumentError(
                    f'YAML {what} files need PyYAML: pip install "pdtp[sweep]" (or use .json)'
                ) from None
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as e:
                what_ = getattr(e, "problem", None) or str(e).strip().splitlines()[0]
                raise InvalidArgumentError(f"{p}: not valid YAML: {what_}") from None
    except RecursionError:
        raise InvalidArgumentError(f"{p}: nested too deeply for a {what} file") from None
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{p}: expected a mapping, got {type(data).__name__}")
    return data


def percentile_value(value: Any) -> float | None:
    """``slo_percentile``: None (plan on means) or a quantile in (0, 1), e.g. 0.9."""
    if value is None:
        return None
    p = positive_number("slo_percentile", value)
    if not p < 1:
        raise InvalidArgumentError(
            f"slo_percentile must be in (0, 1), e.g. 0.9 for p90, got {value!r}"
        )
    return p


# ---- field checks ---------------------------------------------------------------------------


def _resolved_model(model: Any) -> Model:
    from ._model import Model
    from .catalog import resolve_model

    if not isinstance(model, Model | str | os.PathLike | Mapping):
        raise ArgumentTypeError(
            "model must be a catalog name, an HF id, a config dict, a path to config.json or "
            f"a pdtp.Model, got {type(model).__name__} {short_repr(model)}"
        )
    return resolve_model(model)


def _gpu_name(field_name: str, value: Any) -> str:
    from ._gpu import GPU
    from .catalog import gpu as find_gpu

    if not isinstance(value, str | GPU):
        raise ArgumentTypeError(
            f"{field_name} must be a GPU type name, got {type(value).__name__} {short_repr(value)}"
        )
    found = find_gpu(value)
    return value if isinstance(value, str) else found.name


def _demands(demands: Any) -> tuple[Any, ...]:
    if isinstance(demands, str | bytes | Mapping) or not isinstance(demands, Sequence):
        raise ArgumentTypeError(
            "demands must be a list of (model, demand_rps, workload, weight) tuples or dicts, "
            f"got {type(demands).__name__}"
        )
    if not demands:
        raise InvalidArgumentError("demands must list at least one model")
    return tuple(_frozen(d) for d in demands)


def _frozen(value: Any) -> Any:
    """A copy the caller cannot change under the scenario (lists become tuples)."""
    if isinstance(value, Mapping):
        return {k: _frozen(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _layouts(value: Any) -> tuple[str, ...]:
    from .layout import Layout
    from .planning.scenario import resolve_layouts

    resolve_layouts(value)  # families and layouts, checked
    items: list[Any] = (
        value.split(",")
        if isinstance(value, str)
        else [value]
        if isinstance(value, Layout)
        else list(value)
    )
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            if item.strip():
                out.append(item.strip().lower())
        else:
            out.append(str(Layout.of(item, "layouts")))
    return tuple(out)


def _plain(value: Any) -> Any:
    """JSON-ready data of a field's value."""
    from ._model import Model
    from .constants import Constants
    from .workload import Workload

    if isinstance(value, Model):
        return value.to_dict()
    if isinstance(value, Workload | Constants):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


__all__ = ["FIELDS", "Scenario", "SolverConfig", "scenario_of", "solver_of"]
