"""Why a solve has no answer: the candidates each rule removed, and the binding cause in
words a user acts on. Each message names a change that makes the instance feasible when
that cause is the only one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _core
from .check import check

if TYPE_CHECKING:
    from .perf import Context, SidePoint
    from .workload import Workload

GIB = float(1 << 30)  # memory messages use GiB, the unit GPU memory is sold in


def _sizes(xs: list[int]) -> str:
    return ", ".join(map(str, xs)) if xs else "none"


def _min_tp_for_weights(ctx: Context, weight_bytes: float) -> int | None:
    """Smallest TP size that loads the model and whose weight shard fits."""
    m = ctx.model
    room = ctx.gpu_memory_utilization * ctx.gpu.memory_bytes - ctx.constants.reserve_bytes
    for tp in _core.loadable_sizes(m.num_attention_heads, m.num_kv_heads, m.is_mla, 1024):
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
    prefill: dict[int, SidePoint],
    decode: dict[int, SidePoint],
) -> tuple[str, list[str]]:
    """``(binding reason, reasons rule by rule)``."""
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
        loadable = _core.loadable_sizes(m.num_attention_heads, m.num_kv_heads, m.is_mla, 64)
        nxt = next((t for t in loadable if t > bound), None)
        fix = f": allow tp={nxt} (max_tp and at least {2 * nxt} GPUs)" if nxt else ""
        what = (
            f"divide the {m.num_attention_heads} attention heads"
            if m.is_mla
            else f"divide the {m.num_attention_heads} attention heads and divide or be a "
            f"multiple of the {m.num_kv_heads} KV heads"
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
    valid = [
        (pt, dt)
        for pt, dt in pairs
        if check(m, pt, dt, connector=connector, max_acks=max_acks, alternatives=0).ok
    ]
    if not valid:
        pt, dt = max(pairs, key=lambda x: (min(x), -abs(x[0] - x[1])))
        why = check(m, pt, dt, connector=connector, max_acks=max_acks, alternatives=0)
        return done(
            f"no usable pair passes {connector}'s rules (usable prefill tp {_sizes(ps)}, decode "
            f"tp {_sizes(ds)}); e.g. P{pt}/D{dt}: {why.violations[0].message}"
        )
    pt, dt = min(valid, key=lambda x: (x[0] + x[1], x[0]))
    return done(
        f"gpus={budget} too few: the smallest valid split needs {pt + dt} GPUs (prefill "
        f"tp={pt} + decode tp={dt})"
    )
