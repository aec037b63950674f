"""The shared pool's relaxation in closed form (``solve_fleet``'s bounds and starting plan),
on flat numpy arrays so that 1,000 models × 66,000 pairs cost milliseconds, not seconds.

The relaxation keeps every model's own limits (instance counts, the pool's GPU total) and
drops only the node packing. Each model's *frontier* — the fewest GPUs for each served
fraction it can reach, over all its pairs and instance counts — is exact for it: any
configuration is matched or beaten (no more GPUs, no less served) by a frontier point. So:

- the largest t whose fewest-GPU points, summed, fit the pool bounds the smallest fraction
  (``t_bound``): exact for the relaxation;
- the best weighted total with every counted model at ``≥ t`` is a multiple-choice knapsack
  over the frontiers: exact by a dynamic programme over GPU counts (``Relaxed.exact``, when
  models × points × GPUs fit its budget), else bounded by its linear relaxation — each
  frontier's upper concave hull taken greedily by value per GPU (``Relaxed.linear``), whose
  gap to an integer plan is at most the one hull segment it splits;
- both give the fewest GPUs for a total (the last level) the same way.

A relaxed plan that also packs into the nodes is feasible, hence optimal at every level
it meets its bound.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

# A model's configuration: (option index, prefill instances, decode instances) or None.
Config = tuple[int, int, int] | None
NEG = -(1 << 62)
# Served levels built at once (arrays of this many int64 per column).
CHUNK = 1 << 18

Columns = tuple[Any, Any, Any, Any, Any, Any, Any, Any]


def _levels(np: Any, arr: Any, units: Any, pool: int, scale: int) -> Columns:
    """Every served level of the options ``arr`` (rows of model, option, p, d, a, b, ubp,
    ubd, most_p, most_d) sized in closed form: (model, GPUs, fraction, option, prefill
    instances, decode instances, p, d) per level that the counts and the pool allow. A
    pair's efficient configurations serve one of its sides' multiples (k·a or k·b, capped
    at the demand) with the fewest instances of each side for it."""
    mk, jk, P, D, A, B, UBP, UBD, MP, MD = arr.T
    cnt = UBP + UBD
    total = int(cnt.sum())
    o = np.repeat(np.arange(len(arr)), cnt)
    pos = np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    is_p = pos < UBP[o]
    k = np.where(is_p, pos + 1, pos - UBP[o] + 1)
    v = np.minimum(np.where(is_p, k * A[o], k * B[o]), units[mk[o]])
    n_p = -(-v // A[o])
    n_d = -(-v // B[o])
    g = P[o] * n_p + D[o] * n_d
    ok = (n_p <= MP[o]) & (n_d <= MD[o]) & (g <= pool)
    o, n_p, n_d, g = o[ok], n_p[ok], n_d[ok], g[ok]
    served = np.minimum(n_p * A[o], n_d * B[o])
    f = np.minimum(scale, scale * served // units[mk[o]])
    return mk[o], g, f, jk[o], n_p, n_d, P[o], D[o]


def _frontier(cols: Columns, scale: int) -> Columns:
    """The points of ``cols`` that serve more than every cheaper point of their model,
    sorted by (model, GPUs). Ties at one (GPUs, fraction) keep the lower option index
    (the core lists a model's pairs smaller TP sizes first), then fewer instances."""
    import numpy as np

    model, gg, ff, opt, npp, ndd, pp, dd = cols
    order = np.lexsort((npp + ndd, opt, -ff, model * (int(gg.max(initial=0)) + 1) + gg))
    model, gg, ff, opt, npp, ndd, pp, dd = (x[order] for x in cols)
    # The key grows by model, so the running maximum never crosses models.
    key = model * (scale + 2) + ff
    if not len(key):
        return model, gg, ff, opt, npp, ndd, pp, dd
    run = np.maximum.accumulate(key)
    keep = np.ones(len(key), dtype=bool)
    keep[1:] = key[1:] > run[:-1]
    return tuple(x[keep] for x in (model, gg, ff, opt, npp, ndd, pp, dd))


class Frontiers:
    """Every model's frontier as flat arrays sorted by (model, GPUs); within a model both
    GPUs and fraction strictly increase. Ties at one (GPUs, fraction) keep the smaller TP
    sizes, then fewer instances, then the lower option index (deterministic)."""

    def __init__(
        self,
        options: Sequence[Sequence[tuple[int, int, int, int, int, int, int, int]]],
        units: Sequence[int],
        pool: int,
        scale: int,
        check: Callable[[], None] | None = None,
    ) -> None:
        """``options[k]``: model k's pairs as (p, d, a, b, ubp, ubd, most_p, most_d) —
        instance GPUs, capacity units per instance, the counts worth trying, the counts
        the pool allows (an aggregated option has ``d = 0`` and ``b = a``). ``check`` is
        called between chunks of work (it raises to stop at a deadline)."""
        import numpy as np  # OR-Tools' own dependency; loaded only by fleets

        self.np, self.scale, self.pool = np, scale, pool
        self.check = check or (lambda: None)
        self.models = len(units)
        flat = [
            (k, j, *o) for k, opts in enumerate(options) if units[k] for j, o in enumerate(opts)
        ]  # fmt: skip
        u_all = np.asarray(units, dtype=np.int64)
        arr = np.asarray(flat, dtype=np.int64) if flat else np.zeros((0, 10), dtype=np.int64)
        cnt = arr[:, 6] + arr[:, 7]
        self.levels = int(cnt.sum())
        # One base point per model: nothing (fraction 0; all of it when it has no demand).
        m_all = np.arange(self.models, dtype=np.int64)
        zeros = np.zeros(self.models, dtype=np.int64)
        cols = [
            (m_all, zeros, np.where(u_all == 0, scale, 0), zeros - 1, zeros, zeros, zeros, zeros)
        ]
        # The served levels in chunks of about CHUNK (memory stays bounded: 1,000 models
        # have 650,000 levels), each cut to its own frontier points before the next.
        cum, lo = np.cumsum(cnt), 0
        while lo < len(arr):
            done = int(cum[lo - 1]) if lo else 0
            hi = max(lo + 1, int(np.searchsorted(cum, done + CHUNK, "right")))
            self.check()
            cols.append(_frontier(_levels(np, arr[lo:hi], u_all, pool, scale), scale))
            lo = hi
        merged = tuple(np.concatenate(c) for c in zip(*cols))
        self.model, self.g, self.f, self.opt, self.n_p, self.n_d, self.p, self.d = _frontier(
            merged,  # type: ignore[arg-type]
            scale,
        )
        self.key = self.model * (scale + 2) + self.f
        self.start = np.searchsorted(self.model, m_all, "left")
        self.end = np.searchsorted(self.model, m_all, "right")

    @property
    def points(self) -> int:
        return len(self.g)

    def first_at(self, t: Any, models: Any) -> Any:
        """Per model in ``models``: the index of its fewest-GPU point with fraction ≥ t
        (one t, or one per model), or -1 when it cannot reach t."""
        np = self.np
        idx = np.searchsorted(self.key, models * (self.scale + 2) + t, "left")
        return np.where(idx < self.end[models], idx, -1)

    def fits(self, t: int, counted: Any) -> bool:
        """Whether the counted models' fewest-GPU points at fraction t fit the pool."""
        idx = self.first_at(t, counted)
        return bool((idx >= 0).all()) and int(self.g[idx].sum()) <= self.pool

    def configs(self, idx: Any) -> list[Config]:
        """The configurations of one point index per model."""
        out: list[Config] = []
        for j in idx.tolist():
            o = int(self.opt[j])
            out.append(None if o < 0 else (o, int(self.n_p[j]), int(self.n_d[j])))
        return out

    def sizes(self, idx: Any) -> dict[int, int]:
        """Instances per size (GPUs) of one point per model (an aggregated option's
        instances once)."""
        np = self.np
        sizes = np.concatenate([self.p[idx], self.d[idx]])
        counts = np.concatenate([self.n_p[idx], np.where(self.d[idx] > 0, self.n_d[idx], 0)])
        out: dict[int, int] = {}
        for s, c in zip(sizes.tolist(), counts.tolist()):
            if s and c:
                out[s] = out.get(s, 0) + c
        return out

    def relaxed(self, lower: Any, weights: Sequence[int], dp_cells: int) -> Relaxed:
        return Relaxed(self, lower, weights, dp_cells)


class Relaxed:
    """The relaxation's weighted total and fewest GPUs with model k at fraction ≥
    ``lower[k]``: exact (a DP over GPU counts) when its cells fit ``dp_cells``, else the
    linear relaxation's bounds and a greedy integer plan. ``best`` is the best known
    relaxed plan (one point index per model); ``total_ub`` / ``gpus_lb(total)`` are valid
    bounds of the relaxation, hence of every plan."""

    def __init__(self, fr: Frontiers, lower: Any, weights: Sequence[int], dp_cells: int):
        np = fr.np
        self.fr = fr
        w = np.asarray(weights, dtype=np.int64)
        lo = fr.first_at(np.asarray(lower, dtype=np.int64), np.arange(fr.models))
        self.feasible = bool((lo >= 0).all()) and int(fr.g[lo].sum()) <= fr.pool
        self.lo = lo
        self.w = w
        self.value = w[fr.model] * fr.f  # each point's weighted value
        self.exact = False
        if not self.feasible:
            return
        cells = sum(int(fr.end[k] - lo[k]) for k in range(fr.models)) * (fr.pool + 1)
        if cells <= dp_cells:
            self._dp()
        else:
            self._linear()

    # ---- exact: the dynamic programme over GPU counts ----------------------------------

    def _dp(self) -> None:
        fr, np = self.fr, self.fr.np
        pool = fr.pool
        best = np.zeros(pool + 1, dtype=np.int64)
        cols = np.arange(pool + 1)
        args: list[Any] = []
        for k in range(fr.models):
            if k % 16 == 0:
                fr.check()
            pts = np.arange(self.lo[k], fr.end[k])
            if len(pts) == 1:
                j = pts[0]
                g, v = int(fr.g[j]), int(self.value[j])
                new = np.full(pool + 1, NEG, dtype=np.int64)
                new[g:] = best[: pool + 1 - g] + v
                args.append(None)
            else:
                src = cols[None, :] - fr.g[pts][:, None]
                cand = np.where(src >= 0, best[np.maximum(src, 0)], NEG) + self.value[pts][:, None]
                arg = cand.argmax(axis=0)
                new = cand[arg, cols]
                args.append(arg.astype(np.int32))
            new[new < NEG // 2] = NEG
            best = new
        self.exact = True
        self._best = best
        self.total_ub = int(best[pool])
        g = int((best >= self.total_ub).argmax())
        self._args = args
        self.best = self._rebuild(g)

    def _rebuild(self, g: int) -> Any:
        fr, np = self.fr, self.fr.np
        idx = np.zeros(fr.models, dtype=np.int64)
        for k in range(fr.models - 1, -1, -1):
            arg = self._args[k]
            j = int(self.lo[k]) + (0 if arg is None else int(arg[g]))
            idx[k] = j
            g -= int(fr.g[j])
        return idx

    # ---- bounds: the linear relaxation, and a greedy integer plan ----------------------

    def _linear(self) -> None:
        fr = self.fr
        segs: list[tuple[float, int, int, int, int]] = []  # (-slope, model, to, dg, dv)
        gs, vs = fr.g.tolist(), self.value.tolist()
        for k in range(fr.models):
            if k % 64 == 0:
                fr.check()
            a, b = int(self.lo[k]), int(fr.end[k])
            hull = [a]
            for j in range(a + 1, b):
                # Upper concave hull: drop the last point while it lies on or below the
                # chord from the one before it to j.
                while len(hull) >= 2:
                    i0, i1 = hull[-2], hull[-1]
                    if (vs[i1] - vs[i0]) * (gs[j] - gs[i0]) <= (vs[j] - vs[i0]) * (gs[i1] - gs[i0]):
                        hull.pop()
                    else:
                        break
                if vs[j] > vs[hull[-1]]:
                    hull.append(j)
            for i0, i1 in itertools.pairwise(hull):
                dg, dv = gs[i1] - gs[i0], vs[i1] - vs[i0]
                segs.append((-dv / dg, k, i1, dg, dv))
        segs.sort()
        self._segs = segs
        base_g = int(fr.g[self.lo].sum())
        base_v = int(self.value[self.lo].sum())
        self._base = (base_g, base_v)
        left, total = fr.pool - base_g, float(base_v)
        for _, _, _, dg, dv in segs:
            if dg <= left:
                left -= dg
                total += dv
            else:
                total += dv * left / dg
                break
        self.total_ub = int(total + 1e-6)  # values are integers: the floor bounds them
        # A greedy integer plan: hull segments by value per GPU, each model's in order;
        # a model whose next segment does not fit takes no more.
        idx = self.lo.copy()
        left = fr.pool - base_g
        blocked: set[int] = set()
        for _, k, to, dg, _ in segs:
            if k in blocked:
                continue
            if dg <= left:
                idx[k] = to
                left -= dg
            else:
                blocked.add(k)
        self.best = self._improve(idx, left)

    def _improve(self, idx: Any, left: int) -> Any:
        """Spend the GPUs the greedy left on the single best move up any frontier (not
        only its hull), repeatedly while one gains."""
        fr, np = self.fr, self.fr.np
        if left <= 0:
            return idx
        cur_g = fr.g[idx]
        for _ in range(64):
            fr.check()
            room = cur_g[fr.model] + left
            gain = np.where(
                (fr.g <= room) & (fr.g > cur_g[fr.model]),
                self.value - self.value[idx][fr.model],
                0,
            )
            j = int(gain.argmax())
            if gain[j] <= 0:
                break
            k = int(fr.model[j])
            left -= int(fr.g[j] - cur_g[k])
            idx[k] = j
            cur_g[k] = fr.g[j]
        return idx

    def gpus_lb(self, total: int) -> int | None:
        """A valid lower bound on the GPUs of a relaxed plan with weighted total ≥ total
        (None when no relaxed plan reaches it)."""
        if self.exact:
            if total > self.total_ub:
                return None
            return int((self._best >= total).argmax())
        base_g, base_v = self._base
        need, g = total - base_v, float(base_g)
        if need <= 0:
            return base_g
        for _, _, _, dg, dv in self._segs:
            if dv >= need:
                return int(-(-(g + dg * need / dv - 1e-9) // 1))
            need -= dv
            g += dg
        return None
