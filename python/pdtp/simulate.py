"""``pdtp.simulate``: a discrete-event simulation of a vLLM deployment, request by request.

The simulation runs in Rust (``src/sim/``): per instance, vLLM V1's scheduler — continuous
batching up to ``max_num_seqs``, chunked prefill within ``max_num_batched_tokens`` per step,
the paged KV cache in 16-token blocks with admission waiting for blocks and recompute
preemption — with every step's duration from the performance model's one step-cost function.
Disaggregated deployments add the router, the prefill instance holding each prompt's KV until
a decode instance has read it, and the transfer. See ``src/sim/mod.rs`` for what is and is
not modelled.

This module builds the typed configuration (from a :class:`pdtp.Plan`, a ``pdtp solve --json``
dict, or keyword arguments), validates the load, and returns the core's frozen
:class:`SimResult`.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import _core
from ._core import RateSearch, SimConfig, SimResult, SimTrace
from ._validate import positive_int, positive_number, public_api, short_repr
from .engine import vllm_batch_defaults
from .errors import ArgumentTypeError, InvalidArgumentError
from .layout import Layout
from .workload import Workload, resolve_workload

if TYPE_CHECKING:
    from .perf import Context

# pdtp.simulate is imported with pdtp itself (the function must not be shadowed by this
# module's name), so the performance model's Python side loads only when a config is built.

__all__ = [
    "ARRIVALS",
    "ROUTERS",
    "RateSearch",
    "SimConfig",
    "SimResult",
    "SimTrace",
    "config_from_plan",
    "load_trace",
    "max_rate_within_slo",
    "sim_config",
    "simulate",
    "slo_met",
    "vllm_scheduler_defaults",
]

ARRIVALS = ("poisson", "gamma", "constant")
ROUTERS = ("round_robin", "least_loaded")
MAX_REQUESTS: int = _core.SIM_MAX_REQUESTS
MAX_TRACE_BYTES: int = _core.SIM_MAX_TRACE_BYTES
# Requests per trial of the rate search. Near capacity the decode batch settles slowly, so
# short runs are optimistic (llama-3.1-70b's 24-GPU plan: 2,000 requests +7%, 4,000 +4%,
# 10,000 +1% against 30,000); 10,000 still take ~15 ms a trial.
SEARCH_REQUESTS = 10_000
_GIB = float(1 << 30)


#: ``(max_num_seqs, max_num_batched_tokens)`` ``vllm serve`` picks on a GPU (the engine
#: defaults' one rule: :func:`pdtp.engine.vllm_batch_defaults`).
vllm_scheduler_defaults = vllm_batch_defaults


def _side_limits(
    ctx: Context, max_num_seqs: int | None, max_num_batched_tokens: int | None
) -> tuple[int, int]:
    seqs_default, tokens_default = vllm_scheduler_defaults(ctx.gpu.name, ctx.gpu.memory_bytes)
    # The analytic model's max_num_seqs (a constant) caps vLLM's default, so the simulated
    # and the planned decode batches agree.
    seqs = (
        min(seqs_default, int(ctx.constants.max_num_seqs))
        if max_num_seqs is None
        else positive_int("max_num_seqs", max_num_seqs, maximum=1 << 20)
    )
    tokens = (
        max(tokens_default, seqs)
        if max_num_batched_tokens is None
        else positive_int("max_num_batched_tokens", max_num_batched_tokens, maximum=1 << 24)
    )
    return seqs, tokens


def _router(router: Any) -> str:
    if router not in ROUTERS:
        raise InvalidArgumentError(f"router must be one of {', '.join(ROUTERS)}, got {router!r}")
    return str(router)


@public_api
def sim_config(
    model: Any,
    *,
    gpu: Any = None,
    tp: Any = None,
    instances: int = 1,
    prefill_tp: Any = None,
    prefill_instances: int = 1,
    decode_tp: Any = None,
    decode_instances: int = 1,
    layout: Any = None,
    prefill_layout: Any = None,
    decode_layout: Any = None,
    constants: Any = None,
    gpu_memory_utilization: float | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    router: str = "round_robin",
    vllm_version: str | None = None,
) -> SimConfig:
    """A deployment to simulate: ``tp`` or ``layout`` (and ``instances``) for aggregated
    serving — plain ``vllm serve``, each instance doing both phases — or ``prefill_tp`` /
    ``prefill_layout`` and ``decode_tp`` / ``decode_layout`` (and instance counts) for
    disaggregated serving. A layout is a :class:`pdtp.Layout`, its string (``"tp1dp8ep"``,
    ``"tp4pp2"``) or a TP size; each data-parallel rank runs its own scheduler and KV cache
    behind the instance's API server, a pipeline keeps ``pp`` micro-batches in flight.
    ``gpu`` and ``gpu_memory_utilization`` default as in :func:`pdtp.solve` (mi300x, 0.9).

    ``max_num_seqs`` / ``max_num_batched_tokens`` (per scheduler: per DP rank and pipeline
    micro-batch) default to what ``vllm serve`` picks on the GPU
    (:func:`vllm_scheduler_defaults`; ``max_num_seqs`` at most the constants'). ``router``
    spreads requests over instances: ``round_robin`` (vLLM's example P/D proxy) or
    ``least_loaded`` (fewest unfinished requests). ``vllm_version`` (a release or engine
    image) picks the constants of its measured release range, as :func:`pdtp.evaluate` does
    (a plan's own release when simulating a plan).

    >>> import pdtp
    >>> c = pdtp.sim_config("llama-3.1-8b", gpu="h100", tp=1, instances=2)
    >>> c.mode, c.gpus, c.pools[0].max_num_batched_tokens
    ('aggregated', 2, 8192)
    >>> pdtp.sim_config("qwen3-30b-a3b", gpu="h100", layout="tp1dp8ep").pools[0].dp
    8
    """
    from .perf import DEFAULT_GPU, DEFAULT_UTILIZATION, resolve_context

    if vllm_version is not None and not isinstance(vllm_version, str):
        raise ArgumentTypeError(
            f"vllm_version must be a release or engine image string such as '0.11.0', got "
            f"{type(vllm_version).__name__}"
        )
    ctx = resolve_context(
        model,
        DEFAULT_GPU if gpu is None else gpu,
        constants,
        DEFAULT_UTILIZATION if gpu_memory_utilization is None else gpu_memory_utilization,
        release=vllm_version or "",
    )
    agg = _side_layout("tp", tp, "layout", layout)
    pre = _side_layout("prefill_tp", prefill_tp, "prefill_layout", prefill_layout)
    dec = _side_layout("decode_tp", decode_tp, "decode_layout", decode_layout)
    aggregated = agg is not None
    disaggregated = pre is not None or dec is not None
    if aggregated == disaggregated:
        raise InvalidArgumentError(
            "give tp or layout (aggregated serving) or prefill_tp and decode_tp "
            "(disaggregated), not both and not neither"
        )
    seqs, tokens = _side_limits(ctx, max_num_seqs, max_num_batched_tokens)
    util = ctx.gpu_memory_utilization
    if agg is not None:
        n = positive_int("instances", instances, maximum=1 << 16)
        pools = [("aggregated", str(agg), n, util, seqs, tokens)]
    else:
        if pre is None or dec is None:
            raise InvalidArgumentError("disaggregated serving needs both prefill_tp and decode_tp")
        n_p = positive_int("prefill_instances", prefill_instances, maximum=1 << 16)
        n_d = positive_int("decode_instances", decode_instances, maximum=1 << 16)
        pools = [
            ("prefill", str(pre), n_p, util, seqs, tokens),
            ("decode", str(dec), n_d, util, seqs, tokens),
        ]
    m, g, c = ctx.inputs
    return SimConfig(
        m,
        g,
        c,
        model_name=ctx.model.name,
        gpu_name=ctx.gpu.name,
        pools=pools,
        router=_router(router),
    )


def _side_layout(tp_field: str, tp: Any, layout_field: str, layout: Any) -> Layout | None:
    """One side's layout from its ``*_tp`` or ``*_layout`` argument (at most one given)."""
    if tp is not None and layout is not None:
        raise InvalidArgumentError(f"give {tp_field} or {layout_field}, not both")
    if tp is None and layout is None:
        return None
    return Layout.of(tp, tp_field) if layout is None else Layout.of(layout, layout_field)


def _is_plan(x: Any) -> bool:
    return all(hasattr(x, a) for a in ("prefill", "decode", "model", "gpu", "workload"))


def config_from_plan(
    plan: Any,
    *,
    constants: Any = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    router: str = "round_robin",
) -> SimConfig:
    """The deployment of a :class:`pdtp.Plan` (or of a ``pdtp solve --json`` dict:
    ``model``, ``gpu``, and ``aggregated`` or ``prefill`` and ``decode`` as ``{tp,
    instances}`` with optional ``layout`` or ``pp``/``dp``/``ep``; optional
    ``gpu_memory_utilization`` and ``kv_dtype``): its aggregated instances or its P/D split,
    each side in its own layout."""
    from ._model import Model
    from .catalog import resolve_model

    if isinstance(plan, Mapping):
        from .planning.plan import Plan

        plan = Plan.from_dict(plan)  # the one reader of a plan's JSON: every field checked
    if _is_plan(plan):
        # The plan's own model (a config file's too), else the catalog's of its name.
        model = getattr(plan, "model_spec", None) or plan.model
        gpu = plan.gpu
        sides = {
            r: (s.layout, s.instances)
            for r in ("aggregated", "prefill", "decode")
            if (s := getattr(plan, r, None)) is not None
        }
        util = getattr(plan, "gpu_memory_utilization", None)
        kv_dtype = getattr(plan, "kv_dtype", None)
    else:
        raise ArgumentTypeError(
            "plan must be a pdtp.Plan or a dict from `pdtp solve --json`, got "
            f"{type(plan).__name__}"
        )
    roles = set(sides)
    if roles not in ({"aggregated"}, {"prefill", "decode"}):
        raise InvalidArgumentError(
            "a plan to simulate has an 'aggregated' side, or a 'prefill' and a 'decode' "
            f"side; this one has {', '.join(sorted(roles)) or 'none'}"
        )
    types = {_side_gpu(plan, role) for role in roles} - {None}
    if len(types) > 1:
        raise InvalidArgumentError(
            "the simulator models one GPU type per deployment; this plan runs prefill on "
            f"{_side_gpu(plan, 'prefill')} and decode on {_side_gpu(plan, 'decode')}"
        )
    m = model if isinstance(model, Model) else resolve_model(model)  # a plan's own: resolved
    if kv_dtype:
        m = m.with_dtypes(kv_dtype=kv_dtype)
    limits = {
        "constants": constants,
        "gpu_memory_utilization": util,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "router": router,
        # The plan's engine release chooses the constants, as it did when it was planned.
        "vllm_version": getattr(plan, "vllm_version", None),
    }
    if "aggregated" in sides:
        layout, n = sides["aggregated"]
        return sim_config(m, gpu=gpu, layout=layout, instances=n, **limits)
    (p_layout, p_n), (d_layout, d_n) = sides["prefill"], sides["decode"]
    return sim_config(
        m,
        gpu=gpu,
        prefill_layout=p_layout,
        prefill_instances=p_n,
        decode_layout=d_layout,
        decode_instances=d_n,
        **limits,
    )


def _side_gpu(plan: Any, role: str) -> Any:
    """The GPU type a plan's side names (None: the plan's one type)."""
    return getattr(getattr(plan, role, None), "gpu", None)


@public_api
def load_trace(path: str | os.PathLike[str]) -> SimTrace:
    """Read a request trace: a CSV of arrival time (s), input tokens and output tokens per
    request. A header may name the columns (``arrival_s``/``timestamp``,
    ``input_tokens``/``isl``, ``output_tokens``/``osl``; any order, other columns ignored);
    without one the first three columns are used in that order. At most 64 MiB and 1,000,000
    requests; errors name the file and line."""
    from ._io import read_capped_text

    # Capped as read, not by the reported size: /dev/zero reports 0 bytes and never ends.
    text = read_capped_text(path, limit=MAX_TRACE_BYTES, what="trace")
    return _core.parse_trace(text, os.path.basename(os.fspath(path)))


def _length_range(value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise InvalidArgumentError(
            f"length_range must be (low, high) multiples of the nominal lengths, e.g. "
            f"(0.8, 1.0), got {value!r}"
        )
    low = positive_number("length_range[0]", value[0])
    high = positive_number("length_range[1]", value[1])
    if low > high:
        raise InvalidArgumentError(f"length_range must have low <= high, got {value!r}")
    return low, high


def _load_args(
    arrival: Any, burstiness: Any, seed: Any, requests: Any
) -> tuple[str, float, int, int | None]:
    if arrival not in ARRIVALS:
        raise InvalidArgumentError(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    b = positive_number("burstiness", burstiness)
    if not 1e-3 <= b <= 1e3:
        raise InvalidArgumentError(f"burstiness must be in [0.001, 1000], got {burstiness!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise InvalidArgumentError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    if not 0 <= int(seed) < 2**64:
        raise InvalidArgumentError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    n = None if requests is None else positive_int("requests", requests, maximum=MAX_REQUESTS)
    return str(arrival), b, int(seed), n


def _requests_kwargs(
    w: Workload, length_range: Any, seed: int, arrival: str, burstiness: float
) -> dict[str, Any]:
    """The core's keywords for the requests (lengths, arrivals, seed) and the SLOs."""
    return {
        "isl": w.isl,
        "osl": w.osl,
        "length_range": _length_range(length_range),
        "seed": seed,
        "arrival": arrival,
        "burstiness": burstiness,
        "ttft_slo_ms": w.ttft_ms,
        "tpot_slo_ms": w.tpot_ms,
    }


def _planned(x: Any, workload: Any, constants: Any) -> tuple[Any, Any, Any]:
    """A :class:`pdtp.Scenario` → the plan ``pdtp.solve`` gives it (solver defaults), with the
    scenario's workload and constants where the call names none; anything else unchanged."""
    from .scenario import Scenario, SolverConfig

    if not isinstance(x, Scenario):
        return x, workload, constants
    from .planning.solve import solve_scenario

    return (
        solve_scenario(x, SolverConfig()),
        x.workload if workload is None else workload,
        x.constants if constants is None else constants,
    )


def _resolve(
    plan_or_config: Any, workload: Any, constants: Any, router: Any
) -> tuple[SimConfig, Workload]:
    if isinstance(plan_or_config, SimConfig):
        if constants is not None or router is not None:
            raise InvalidArgumentError(
                "constants and router belong to the SimConfig: pass them to pdtp.sim_config"
            )
        return plan_or_config, resolve_workload(workload)
    if isinstance(plan_or_config, Mapping):
        from .planning.plan import Plan

        plan_or_config = Plan.from_dict(plan_or_config)
    if _is_plan(plan_or_config):
        cfg = config_from_plan(plan_or_config, constants=constants, router=router or "round_robin")
        default = plan_or_config.workload
        return cfg, resolve_workload(default if workload is None else workload)
    raise ArgumentTypeError(
        "simulate needs a pdtp.Plan, a `pdtp solve --json` dict or a pdtp.SimConfig "
        f"(pdtp.sim_config(...)), got {type(plan_or_config).__name__}"
    )


@public_api
def simulate(
    plan_or_config: Any,
    *,
    rate_rps: float | None = None,
    concurrency: int | None = None,
    workload: Any = None,
    requests: int | None = None,
    arrival: str = "poisson",
    seed: int = 0,
    length_range: tuple[float, float] | None = None,
    burstiness: float = 1.0,
    trace: Any = None,
    constants: Any = None,
    router: str | None = None,
) -> SimResult:
    """Simulate serving ``requests`` requests (default 10,000) on a deployment and return
    the latency percentiles, throughput, goodput, queues and utilisation per side.

    ``plan_or_config``: a :class:`pdtp.Plan` (its aggregated instances or P/D split, in its
    layouts; ``constants`` and
    ``router`` apply), a ``pdtp solve --json`` dict, a :func:`sim_config`, or a
    :class:`pdtp.Scenario` (the plan ``pdtp.solve`` gives it, with its workload and constants).

    Load — exactly one of: ``rate_rps`` (open loop; ``arrival`` ``poisson``, ``gamma`` with
    ``burstiness`` as vLLM's benchmark client, or ``constant`` gaps), ``concurrency``
    (closed loop: that many clients, each sending its next request when one finishes), or a
    ``trace`` alone (replayed at its arrival times).

    Lengths: ``workload`` (a :class:`pdtp.Workload` or dict; default the plan's) gives the
    nominal ``isl``/``osl`` and the SLOs goodput is counted against; ``length_range=(0.8,
    1.0)`` draws each length uniformly from 80–100% of nominal as benchmark clients do;
    ``trace`` (a CSV path or :func:`load_trace`) gives each request's lengths instead.

    Deterministic for a ``seed``; runs in Rust with the GIL released.

    >>> import pdtp
    >>> plan = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x")
    >>> r = pdtp.simulate(plan, rate_rps=20, requests=2000)
    >>> r.requests, r.ttft_ms.p90 < r.ttft_ms.p99, r.sides[1].role
    (2000, True, 'decode')
    """
    plan_or_config, workload, constants = _planned(plan_or_config, workload, constants)
    cfg, w = _resolve(plan_or_config, workload, constants, router)
    arrival, b, seed, n = _load_args(arrival, burstiness, seed, requests)
    if rate_rps is not None and concurrency is not None:
        raise InvalidArgumentError(
            "give rate_rps (open loop) or concurrency (closed loop), not both"
        )
    rate = None if rate_rps is None else positive_number("rate_rps", rate_rps)
    conc = (
        None
        if concurrency is None
        else positive_int("concurrency", concurrency, maximum=MAX_REQUESTS)
    )
    if trace is None or isinstance(trace, SimTrace):
        tr = trace
    elif isinstance(trace, str | os.PathLike):
        tr = load_trace(trace)
    else:
        raise ArgumentTypeError(
            "trace must be a path to a CSV file or a pdtp.load_trace(...) result, got "
            f"{type(trace).__name__}"
        )
    if rate is None and conc is None and tr is None:
        raise InvalidArgumentError(
            "give rate_rps (open loop), concurrency (closed loop) or a trace to replay"
        )
    return _core.simulate(
        cfg,
        **_requests_kwargs(w, length_range, seed, arrival, b),
        requests=n,
        rate_rps=rate,
        concurrency=conc,
        trace=tr,
    )


def slo_met(result: SimResult, statistic: Any = "mean") -> bool:
    """Whether a simulation meets its SLOs on ``statistic``: ``"mean"`` (what
    ``Workload.ttft_statistic`` names and plans are predicted on: the mean TTFT and the mean
    TPOT over the requests) or a quantile in (0, 1) (``SimResult.meets_slo``). Unbounded SLOs
    always hold.

    >>> import pdtp
    >>> from pdtp.simulate import slo_met
    >>> plan = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x")
    >>> slo_met(pdtp.simulate(plan, rate_rps=0.5 * plan.requests_per_s, requests=2000))
    True
    """
    if isinstance(statistic, str):
        if statistic != "mean":
            raise InvalidArgumentError(
                f"statistic must be 'mean' or a quantile in (0, 1) such as 0.9, got "
                f"{short_repr(statistic)}"
            )
        ttft, tpot = result.ttft_slo_ms, result.tpot_slo_ms
        return (ttft is None or result.ttft_ms.mean <= ttft) and (
            tpot is None or result.tpot_ms.mean <= tpot
        )
    q = positive_number("statistic", statistic)
    if not q < 1:
        raise InvalidArgumentError(f"statistic must be 'mean' or a quantile in (0, 1), got {q}")
    return bool(result.meets_slo(q))


@public_api
def max_rate_within_slo(
    plan_or_config: Any,
    *,
    percentile: float = 0.9,
    workload: Any = None,
    requests: int = SEARCH_REQUESTS,
    arrival: str = "poisson",
    burstiness: float = 1.0,
    seed: int = 0,
    length_range: tuple[float, float] | None = None,
    tolerance: float = 0.01,
    hint_rps: float | None = None,
    constants: Any = None,
    router: str | None = None,
) -> RateSearch:
    """The highest request rate at which the ``percentile`` quantiles of TTFT and TPOT both
    meet the workload's SLOs — the deployment's goodput in DistServe's sense — found by
    simulating at a few rates (doubling or halving from ``hint_rps``, then bisection down to
    ``tolerance`` relative width). Every trial serves the same ``requests`` requests (same
    lengths, same arrival pattern scaled to the rate), so trials differ only by the rate, and
    is judged on its steady state: the middle 80% of the requests by arrival
    (``SimResult.meets_slo(p, steady_state=True)``), not the ramp-up or the drain.

    A planner calls this once per candidate: with ``hint_rps`` the analytic capacity (the
    default for a Plan) it typically takes about 9 simulations, 0.1–0.2 s in all.

    >>> import pdtp
    >>> plan = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x")
    >>> s = pdtp.max_rate_within_slo(plan, percentile=0.9, requests=1000, tolerance=0.05)
    >>> 0 < s.rate_rps <= s.failing_rps, s.result.meets_slo(0.9, steady_state=True)
    (True, True)
    """
    plan_or_config, workload, constants = _planned(plan_or_config, workload, constants)
    cfg, w = _resolve(plan_or_config, workload, constants, router)
    if w.ttft_ms is None and w.tpot_ms is None:
        raise InvalidArgumentError("the workload has no SLO (ttft_ms or tpot_ms) to meet")
    arrival, b, seed, _ = _load_args(arrival, burstiness, seed, None)
    n = positive_int("requests", requests, maximum=MAX_REQUESTS)
    p = positive_number("percentile", percentile)
    if not p < 1:
        raise InvalidArgumentError(f"percentile must be in (0, 1), e.g. 0.9, got {percentile!r}")
    tol = positive_number("tolerance", tolerance)
    if hint_rps is None and _is_plan(plan_or_config):
        hint_rps = getattr(plan_or_config, "requests_per_s", None) or None  # 0: not predicted
    hint = None if hint_rps is None else positive_number("hint_rps", hint_rps)
    if hint is not None and not math.isfinite(hint):
        hint = None
    return _core.max_rate_within_slo(
        cfg,
        **_requests_kwargs(w, length_range, seed, arrival, b),
        requests=n,
        percentile=p,
        tolerance=tol,
        hint_rps=hint,
    )
