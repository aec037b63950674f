"""Why a planner has no answer: the candidates each rule removed, and the binding cause in
words a user acts on. Each message names a change that makes the instance feasible when
that cause is the only one: a rule, memory, an SLO, the budget, the nodes (an instance's
TP group needs one node with that many free GPUs), the GPU types a connector can pair, or
a demand above what the pool serves."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _core
from ..errors import InfeasibleError
from ..layout import loadable_tp_sizes
from ..violations import pair_rules

if TYPE_CHECKING:
    from .._core import Candidates
    from ..perf import Context, SidePoint
    from ..workload import Workload
    from .scenario import Scenario

GIB = float(1 << 30)  # memory messages use GiB, the unit GPU memory is sold in


def _sizes(xs: list[int]) -> str:
    return ", ".join(map(str, xs)) if xs else "none"


@dataclass(frozen=True)
class _Point:
    """A candidate row seen as the side point ``explain`` reads."""

    tp: int
    loads: bool
    fits_weights: bool
    fits_kv: bool
    latency_ms: float
    meets_slo: bool
    units: int


def _min_tp_for_weights(ctx: Context, weight_bytes: float) -> int | None:
    """Smallest TP size that loads the model and whose weight shard fits."""
    m = ctx.model
    room = ctx.gpu_memory_utilization * ctx.gpu.memory_bytes - ctx.constants.reserve_bytes
    for tp in loadable_tp_sizes(m, 1024):
        if room > 0 and weight_bytes / tp < room:
            return int(tp)
    return None


def explain(
    ctx: Context,
    w: Workload,
    connector: str,
    budget: int,
    max_tp: int,
    max_acks: int | None,
    prefill: Mapping[int, SidePoint | _Point],
    decode: Mapping[int, SidePoint | _Point],
) -> tuple[str, list[str]]:
    """``(binding reason, reasons rule by rule)``."""
    from ..connectors import gpu_violation, resolve_connector

    refused = gpu_violation(resolve_connector(connector), ctx.gpu.vendor)
    if refused is not None:  # no P/D pair: the connector's worker cannot start here
        binding = (
            f"{refused.hint} (vLLM raises RuntimeError({refused.message!r}) when the engine "
            f"starts on {ctx.gpu.name})"
        )
        return binding, [binding]
    m, g = ctx.model, ctx.gpu
    bound = min(max_tp, budget)
    reasons: list[str] = []
    funnels: dict[str, list[list[int]]] = {}
    for side, pts in (("prefill", prefill), ("decode", decode)):
        loads = [t for t, p in pts.items() if p.loads]
        fits_w = [t for t in loads if pts[t].fits_weights]
        fits_kv = [t for t in fits_w if pts[t].fits_kv]
        slo = [t for t in fits_kv if pts[t].meets_slo and pts[t].units > 0]
        funnels[side] = [loads, fits_w, fits_kv, slo]
        slo_name = "ttft_ms" if side == "prefill" else "tpot_ms"
        reasons.append(
            f"{side}: of tp 1..{bound}, {len(loads)} load the model ({_sizes(loads)}), "
            f"{len(fits_w)} fit the weights ({_sizes(fits_w)}), {len(fits_kv)} fit the KV "
            f"cache ({_sizes(fits_kv)}), {len(slo)} meet {slo_name} ({_sizes(slo)})"
        )

    def done(binding: str) -> tuple[str, list[str]]:
        return binding, [binding, *reasons]

    if budget < 2:
        return done(
            f"gpus={budget}: a P/D split needs at least 2 GPUs (one prefill and one decode "
            "instance)"
        )
    loads = funnels["prefill"][0]
    if not loads:
        loadable = loadable_tp_sizes(m, 64)
        nxt = next((t for t in loadable if t > bound), None)
        fix = f": allow tp={nxt} (max_tp and at least {2 * nxt} GPUs)" if nxt else ""
        what = (
            f"divide the {m.num_attention_heads} attention heads"
            if m.is_mla
            else f"divide the {m.num_attention_heads} attention heads and divide or be a "
            f"multiple of the {m.num_kv_heads} KV heads"
        )
        if m.output_groups:
            what += (
                f" and be at most its {m.output_groups} output-projection groups (o_groups: "
                "vLLM 0.33 gives each TP rank o_groups // tp of them)"
            )
        return done(f"no tp <= {bound} loads {m.name}: tp must {what}{fix}")
    if not funnels["prefill"][1]:
        room = ctx.gpu_memory_utilization * g.memory_bytes - ctx.constants.reserve_bytes
        msg = (
            f"no tp <= {bound} fits {m.weight_bytes / GIB:.0f} GiB of {m.weight_dtype} weights "
            f"on {g.memory_bytes / GIB:.0f} GiB {g.name} GPUs ({room / GIB:.0f} GiB usable each at "
            f"gpu_memory_utilization={ctx.gpu_memory_utilization:g})"
        )
        fixes = []
        if m.weight_bytes_per_param >= 2:
            fp8 = m.with_dtypes(weight_dtype="fp8")
            if any(fp8.weight_bytes / t < room for t in loads):
                fixes.append("use fp8 weights")
        tmin = _min_tp_for_weights(ctx, m.weight_bytes)
        if tmin is not None:
            more = f", gpus >= {2 * tmin}" if 2 * tmin > budget else ""
            spans = " (TP then spans nodes)" if tmin > g.gpus_per_node else ""
            fixes.append(f"allow tp={tmin}: max_tp={tmin}{spans}{more}")
        return done(msg + (": " + " or ".join(fixes) if fixes else ""))
    for side in ("prefill", "decode"):
        fits_w, fits_kv, slo = funnels[side][1:]
        if not fits_kv:
            tokens = w.isl if side == "prefill" else w.isl + w.osl
            return done(
                f"{side}: the weights fit at tp {_sizes(fits_w)}, but no room is left for the "
                f"KV cache of one {tokens}-token sequence: raise max_tp or "
                "gpu_memory_utilization, or use fp8 KV cache"
            )
        if not slo:
            pts = prefill if side == "prefill" else decode
            best = min(fits_kv, key=lambda t: pts[t].latency_ms)
            if side == "prefill":
                return done(
                    f"ttft_ms={w.ttft_ms:g} unreachable: best prefill TTFT is "
                    f"{pts[best].latency_ms:.0f} ms at tp={best}"
                )
            return done(
                f"tpot_ms={w.tpot_ms:g} unreachable: best decode TPOT is "
                f"{pts[best].latency_ms:.1f} ms at tp={best}"
            )
    ps, ds = funnels["prefill"][3], funnels["decode"][3]
    pairs = [(pt, dt) for pt in ps for dt in ds]
    valid = [(pt, dt) for pt, dt in pairs if not pair_rules(m, pt, dt, connector, max_acks)[0]]
    if not valid:
        pt, dt = max(pairs, key=lambda x: (min(x), -abs(x[0] - x[1])))
        first = pair_rules(m, pt, dt, connector, max_acks)[0][0]
        why = first.message or first.hint  # a bare vLLM assert: the hint says what failed
        name = connector.partition("@")[0]
        return done(
            f"no usable pair passes {name}'s rules (usable prefill tp {_sizes(ps)}, decode "
            f"tp {_sizes(ds)}); e.g. P{pt}/D{dt}: {why}"
        )
    pt, dt = min(valid, key=lambda x: (x[0] + x[1], x[0]))
    return done(
        f"gpus={budget} too few: the smallest valid split needs {pt + dt} GPUs (prefill "
        f"tp={pt} + decode tp={dt})"
    )


# ---- planners: candidates → reasons --------------------------------------------------------


def _tp_only(r: Any) -> bool:
    return bool(r.layout[1] == 1 and r.layout[2] == 1 and not r.layout[3])


def _points(rows: list[Any], model: int, t: int, role: str) -> dict[int, _Point]:
    """The TP-only rows of one role (the funnel ``explain`` reads, by TP size)."""
    return {
        r.tp: _Point(
            r.tp, r.loads, r.fits_weights, r.fits_kv, r.latency_s * 1e3, r.meets_slo, r.units
        )
        for r in rows
        if r.model == model and r.gpu_type == t and r.role == role and _tp_only(r)
    }


def layout_funnel(rows: list[Any], role: str, w: Workload) -> tuple[str, str | None]:
    """One role's rows of every layout as a funnel: ``(reason, binding)`` — the binding
    cause when no row of the role is usable (None otherwise)."""
    from ..layout import Layout

    def names(rs: list[Any]) -> str:
        shown = [str(Layout(*r.layout)) for r in rs[:8]]
        return ", ".join(shown) + (", …" if len(rs) > 8 else "") if shown else "none"

    loads = [r for r in rows if r.loads]
    fits_w = [r for r in loads if r.fits_weights]
    fits_kv = [r for r in fits_w if r.fits_kv]
    slo = [r for r in fits_kv if r.meets_slo and r.units > 0]
    placed = [r for r in slo if r.placeable]
    slo_name = {"prefill": "ttft_ms", "decode": "tpot_ms"}.get(role, "ttft_ms and tpot_ms")
    reason = (
        f"{role}: of {len(rows)} layouts, {len(loads)} load the model, {len(fits_w)} fit the "
        f"weights ({names(fits_w)}), {len(fits_kv)} fit the KV cache, {len(slo)} meet "
        f"{slo_name} ({names(slo)}), {len(placed)} fit a node or whole free nodes"
    )
    binding = None
    if not placed:
        if not loads:
            binding = f"{role}: no layout loads the model"
        elif not fits_w:
            binding = f"{role}: no layout fits the weights (more GPUs per instance, or fp8)"
        elif not fits_kv:
            binding = f"{role}: the weights fit ({names(fits_w)}) but not one sequence's KV cache"
        elif not slo:
            best = min(fits_kv, key=lambda r: r.latency_s)
            ttft = f"TTFT {best.ttft_s * 1e3:.0f} ms, " if role != "decode" else ""
            binding = (
                f"{role}: no layout meets {slo_name} (w: ttft_ms={w.ttft_ms}, "
                f"tpot_ms={w.tpot_ms}); best {Layout(*best.layout)}: {ttft}TPOT-or-latency "
                f"{best.latency_s * 1e3:.1f} ms"
            )
        else:
            binding = (
                f"{role}: no node (or set of whole free nodes) holds an instance of {names(slo)}"
            )
    return reason, binding


def _one_type(
    sc: Scenario, cands: Candidates, model: int, t: int, budget_field: str
) -> tuple[str, list[str]]:
    rows = cands.rows
    pool = sc.pool
    g = pool.types[t]
    entry = sc.models[model]
    mine = [r for r in rows if r.model == model and r.gpu_type == t]
    usable = [
        r for r in mine if r.loads and r.fits_weights and r.fits_kv and r.meets_slo and r.units > 0
    ]
    stranded = [r for r in usable if not r.placeable]
    if usable and len(stranded) == len(usable):
        largest = pool.largest_free(t)
        sizes = ", ".join(str(s) for s in sorted({r.gpus for r in stranded}))
        binding = (
            f"no node fits an instance: instances of {sizes} GPUs need that many free "
            f"{g.name} GPUs on one node (or whole free nodes), and the nodes have at most "
            f"{largest} free"
        )
        return binding, [binding]
    prefill, decode = _points(rows, model, t, "prefill"), _points(rows, model, t, "decode")
    funnels = {
        role: layout_funnel([r for r in mine if r.role == role], role, entry.workload)
        for role in ("prefill", "decode", "aggregated")
        if any(r.role == role for r in mine)
    }
    if prefill and decode:
        binding, reasons = explain(
            sc.context(model, t),
            entry.workload,
            sc.connector_key,
            pool.gpus_of(t),
            sc.max_tp or pool.node_size[t],
            sc.max_acks,
            prefill,
            decode,
        )
        if any(not _tp_only(r) for r in mine if r.role != "aggregated"):
            reasons += [funnels[role][0] for role in ("prefill", "decode")]
    else:
        # No TP-only P/D rows (aggregated mode, or layouts without the tp family).
        bindings = [b for _, b in funnels.values() if b is not None]
        binding = (
            bindings[0]
            if bindings
            else (f"no pair of usable layouts passes {sc.connector.name}'s rules and fits the pool")
        )
        reasons = [binding]
    if "aggregated" in funnels:
        reasons.append(funnels["aggregated"][0])
        if funnels["aggregated"][1] is not None and prefill and decode:
            reasons.append(f"aggregated instances: {funnels['aggregated'][1]}")
    if budget_field != "gpus":
        binding = binding.replace("gpus=", f"{budget_field}=")
        reasons = [r.replace("gpus=", f"{budget_field}=") for r in reasons]
    return binding, reasons


def no_pair(
    sc: Scenario, cands: Candidates, model: int = 0, budget_field: str = "gpus"
) -> InfeasibleError:
    """No valid pair of usable rows fits the pool: the reasons, per GPU type."""
    types = range(len(sc.pool.types))
    per_type = [_one_type(sc, cands, model, t, budget_field) for t in types]
    if len(per_type) == 1:
        return InfeasibleError(per_type[0][0], per_type[0][1])
    binding = "; ".join(f"on {sc.pool.types[t].name}: {b}" for t, (b, _) in zip(types, per_type))
    reasons = [binding]
    for t, (_, rs) in zip(types, per_type):
        reasons += [f"{sc.pool.types[t].name}: {r}" for r in rs[1:]]
    reasons.append(mixing_note(sc))
    return InfeasibleError(binding, reasons)


def mixing_note(sc: Scenario) -> str:
    """Which GPU types the connector may put on the two sides."""
    vendor = sc.connector.mixes_vendor
    if vendor is None:
        return f"{sc.connector.name} pairs prefill and decode on the same GPU type only"
    return (
        f"{sc.connector.name} pairs different GPU types only when both are {vendor} "
        "(MoRIIO: AMD on both sides; NIXL: NVIDIA on both sides; never across vendors)"
    )


def demand_too_high(
    sc: Scenario, cands: Candidates, demand: float, budget_field: str = "max_gpus"
) -> InfeasibleError:
    """The demand needs more than the pool: how many GPUs each pair would need, and the
    most the pool serves."""
    rows = cands.rows
    from ..layout import Layout

    lines = []
    for p in cands.pairs:
        a, b = rows[p.prefill], rows[p.decode]
        np_, nd = _instances(demand, a.requests_per_s), _instances(demand, b.requests_per_s)
        la, lb = Layout(*a.layout), Layout(*b.layout)
        if p.prefill == p.decode:
            what = f"{np_:g}x aggregated {la}"
            lines.append((a.gpus * np_, a.gpus, what, f"aggregated {la}: {what}"))
            continue
        pn = f"tp={la.tp}" if la.is_tp_only else str(la)
        dn = f"tp={lb.tp}" if lb.is_tp_only else str(lb)
        what = f"{np_:g}x prefill {pn} + {nd:g}x decode {dn}"
        name = f"P{la.tp}/D{lb.tp}" if la.is_tp_only and lb.is_tp_only else f"P {la}/D {lb}"
        lines.append((a.gpus * np_ + b.gpus * nd, a.gpus + b.gpus, what, f"{name}: {what}"))
    lines.sort(key=lambda x: (x[0], x[1]))
    most = most_served(sc)
    need, _, what, _ = lines[0]
    binding = (
        f"demand_rps={demand:g} needs {need:g} GPUs ({what}); {budget_field}={sc.pool.gpus} "
        f"serves at most {most:.3g} req/s"
    )
    reasons = [binding] + [f"{line} = {g:g} GPUs" for g, _, _, line in lines]
    return InfeasibleError(binding, reasons)


def _instances(demand: float, rps: float) -> float:
    """Instances of capacity ``rps`` that serve ``demand`` (a float: may be astronomical)."""
    return max(1.0, math.ceil(demand / rps)) if rps > 0 else math.inf


def most_served(sc: Scenario) -> float:
    """Requests/s the pool serves at most (the throughput plan's closed-form value)."""
    core = _core.Scenario(
        models=list(sc.specs[:1]),
        gpu_types=list(sc.gpu_specs),
        nodes=sc.pool.runs(),
        connector=sc.connector_key,
        objective="throughput",
        max_tp=sc.max_tp,
        max_acks=sc.max_acks,
        gpu_memory_utilization=sc.gpu_memory_utilization,
        mode=sc.mode,
        layouts=sc.layouts,
    )
    cands = _core.candidates(core)
    best = cands.hint()
    if not best or best[0] is None:
        return 0.0
    ch, rows = best[0], cands.rows
    return min(
        ch.prefill_instances * rows[ch.prefill].requests_per_s,
        ch.decode_instances * rows[ch.decode].requests_per_s,
    )
