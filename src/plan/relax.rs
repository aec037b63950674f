//! Closed forms over one pair at a time: the starting solution (hint) CP-SAT searches from,
//! and valid bounds on each stage's optimum. Both are only help: a wrong hint costs CP-SAT
//! time, never the answer, and every bound here is the optimum of a *relaxation* (packing
//! replaced by the per-size capacity cuts, which are exact for divisibility chains), so it
//! never cuts off a feasible plan.
//!
//! For one pair, min(np·A, nd_max(np)·B) rises with np until the crossing and never rises
//! after it (nd_max does not grow with np), so the most it serves is at the crossing np₀ or
//! np₀ + 1 — found by bisection — and the fewest instances for that value are ⌈V/A⌉, ⌈V/B⌉.

use std::cmp::Ordering;

use super::candidates::{Candidates, Pair};
use super::cluster::{chain, most_served, room, Fit, Item, TooLarge};
use super::order::{Choice, Order, Sense, Solution, Term, Value};
use super::scenario::Objective;

/// Largest prefill count a ratio hint scans per pair (the ratio repeats with scale).
const RATIO_SCAN: i64 = 2048;

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

fn items(c: &Candidates, pair: Pair) -> (Item, Item) {
    (
        c.rows[pair.prefill].item.unwrap(),
        c.rows[pair.decode].item.unwrap(),
    )
}

/// Whether `np`, `nd` of a pair fit: exact where a closed form or a bounded search says so,
/// else by the relaxation (`Fit::Relaxed` callers want exactly that).
fn fits_pair(c: &Candidates, pair: Pair, np: i64, nd: i64, fit: Fit) -> Option<bool> {
    let (a, b) = items(c, pair);
    if pair.is_aggregated() {
        return Some(np <= c.cluster.most(a)); // one item size: exact
    }
    match room(&c.cluster, a, np, b, fit) {
        Ok(r) => Some(r.is_some_and(|r| r >= nd)),
        Err(TooLarge) => c.cluster.fits(&[(a, np), (b, nd)]).ok(),
    }
}

fn single(pair: Pair, np: i64, nd: i64) -> Choice {
    Choice {
        pair,
        prefill: np,
        decode: nd,
    }
}

/// The best configurations of one pair under the scenario's order (the candidates that
/// provably contain the pair's optimum), for a hint (`Fit::Exact`) or a bound.
fn pair_candidates(c: &Candidates, order: &Order, pair: Pair, fit: Fit) -> Vec<Choice> {
    if pair.is_aggregated() {
        return aggregated_candidates(c, order, pair);
    }
    let (p, d) = (&c.rows[pair.prefill], &c.rows[pair.decode]);
    let (a, b) = items(c, pair);
    let cl = &c.cluster;
    let room_of = |np: i64| room(cl, a, np, b, fit);
    match c.scenario.objective {
        Objective::Throughput => {
            let got = match most_served(p.units, d.units, cl.most(a), &room_of) {
                Ok(x) => x,
                // Too large to search exactly: the relaxation's answer, if it fits.
                Err(TooLarge) => most_served(p.units, d.units, cl.most(a), &|np| {
                    room(cl, a, np, b, Fit::Relaxed)
                })
                .ok()
                .flatten()
                .filter(|&(np, nd, _)| cl.fits(&[(a, np), (b, nd)]) == Ok(true)),
            };
            got.map(|(np, nd, _)| vec![single(pair, np, nd)])
                .unwrap_or_default()
        }
        Objective::FewestGpus | Objective::Cost => match (p.need, d.need) {
            (Some(np), Some(nd)) if fits_pair(c, pair, np, nd, fit) == Some(true) => {
                vec![single(pair, np, nd)]
            }
            _ => Vec::new(),
        },
        Objective::Moves { .. } => {
            let (Some(np_min), Some(nd_min)) = (p.need, d.need) else {
                return Vec::new();
            };
            let Some((w, run_p, run_d)) = order.moves else {
                return Vec::new();
            };
            // Keeping spare running instances pays only when holding a GPU costs less than
            // stopping it; the decode side's cost is convex in its count.
            let sticky = w.gpu < w.stop;
            let keep_p = run_p.row == Some(pair.prefill) && sticky;
            let keep_d = run_d.row == Some(pair.decode) && sticky;
            let np_hi = if keep_p {
                np_min.max(run_p.instances)
            } else {
                np_min
            };
            let nd_want = if keep_d {
                nd_min.max(run_d.instances)
            } else {
                nd_min
            };
            let mut out = Vec::new();
            for np in np_min..=np_hi {
                let Ok(Some(r)) = room_of(np) else { break };
                if r < nd_min {
                    break;
                }
                let nd = nd_want.min(r);
                out.push(single(pair, np, nd));
                if nd > nd_min {
                    out.push(single(pair, np, nd_min));
                }
            }
            out
        }
        Objective::TokensPerDollar => {
            // Only the configurations at the pair's best ratio (stage 0) can be its best
            // under the whole order: the others are dropped as they are met, in the ratio
            // stage's own integers (`Order::term`), not kept for a full comparison each.
            let (sp, sd) = (
                order.ratio_served[pair.prefill] as i128,
                order.ratio_served[pair.decode] as i128,
            );
            let (kp, kd) = (
                order.ratio_cost[pair.prefill] as i128,
                order.ratio_cost[pair.decode] as i128,
            );
            let mut best: Option<(i128, i128)> = None;
            let mut out = Vec::new();
            let top = cl.most(a).min(RATIO_SCAN);
            for np in 1..=top {
                let Ok(Some(r)) = room_of(np) else { break };
                if r < 1 {
                    break;
                }
                let even = (np as i128 * p.units as i128) / d.units.max(1) as i128;
                let even = even.min(i64::MAX as i128) as i64;
                for nd in [even, even + 1, r] {
                    if !(1..=r).contains(&nd) {
                        continue;
                    }
                    let served = (np as i128 * sp).min(nd as i128 * sd);
                    let cost = (np as i128 * kp + nd as i128 * kd).max(1);
                    let o = best.map_or(Ordering::Greater, |(bs, bc)| {
                        (served * bc).cmp(&(bs * cost))
                    });
                    if o == Ordering::Greater {
                        best = Some((served, cost));
                        out.clear();
                    }
                    if o != Ordering::Less {
                        out.push(single(pair, np, nd));
                    }
                }
            }
            out
        }
        Objective::MaxMin | Objective::Weighted => Vec::new(),
    }
}

/// An aggregated row's best counts: served grows with every instance, so the most the
/// pool holds (most served), the fewest that serve the demand, or between them (moves).
fn aggregated_candidates(c: &Candidates, order: &Order, pair: Pair) -> Vec<Choice> {
    let r = &c.rows[pair.prefill];
    let most = c.cluster.most(r.item.unwrap());
    let one = |n: i64| single(pair, n, n);
    if most < 1 {
        return Vec::new();
    }
    match c.scenario.objective {
        Objective::Throughput => vec![one(most)],
        Objective::TokensPerDollar => vec![one(1), one(most)],
        Objective::FewestGpus | Objective::Cost => match r.need {
            Some(n) if n <= most => vec![one(n)],
            _ => Vec::new(),
        },
        Objective::Moves { .. } => {
            let Some(need) = r.need.filter(|&n| n <= most) else {
                return Vec::new();
            };
            let Some((w, run_p, run_d)) = order.moves else {
                return Vec::new();
            };
            let keep = [run_p, run_d]
                .into_iter()
                .find(|run| run.row == Some(pair.prefill) && w.gpu < w.stop)
                .map_or(need, |run| run.instances.clamp(need, most));
            (need..=keep).map(one).collect()
        }
        Objective::MaxMin | Objective::Weighted => Vec::new(),
    }
}

fn best_of(
    c: &Candidates,
    order: &Order,
    sols: impl Iterator<Item = Solution>,
) -> Option<Solution> {
    let mut best: Option<(Vec<Value>, Solution)> = None;
    for s in sols {
        let v = order.values(c, &s);
        if best
            .as_ref()
            .is_none_or(|(bv, _)| order.cmp_values(&v, bv) == Ordering::Less)
        {
            best = Some((v, s));
        }
    }
    best.map(|b| b.1)
}

/// The best plan the closed forms find over `pairs` (single-model planners).
pub fn best_over(c: &Candidates, order: &Order, pairs: &[Pair], fit: Fit) -> Option<Solution> {
    if c.scenario.objective.is_fleet() || c.scenario.models.len() != 1 {
        return None;
    }
    // Past the caller's deadline (cluster::until) every exact node search gives up at once,
    // so the remaining pairs cost only their closed forms: those whose sizes need a search
    // offer nothing, the rest still do (a feasible plan, never a proof).
    best_of(
        c,
        order,
        pairs
            .iter()
            .flat_map(|&p| pair_candidates(c, order, p, fit))
            .map(|ch| vec![Some(ch)]),
    )
}

/// A feasible starting plan for CP-SAT (single-model planners), usually the optimum.
pub fn hint(c: &Candidates, order: &Order) -> Option<Solution> {
    best_over(c, order, &c.pairs, Fit::Exact)
}

/// A valid bound on stage `stage`'s optimum given the values earlier stages reached
/// (`fixed`), from the relaxation: an upper bound for a Max stage, a lower bound for a Min
/// stage; None when no relaxation here bounds it. Some(None) would mean "infeasible".
pub fn bound(c: &Candidates, order: &Order, stage: usize, fixed: &[i128]) -> Option<i128> {
    if c.scenario.objective.is_fleet() || c.scenario.models.len() != 1 {
        return None;
    }
    let st = order.stages.get(stage)?;
    let ratio = st.terms.iter().any(|t| t.0 == Term::Ratio);
    let moves = matches!(c.scenario.objective, Objective::Moves { .. });
    if ratio || moves {
        return None;
    }
    let pick = |vals: Vec<i128>| -> Option<i128> {
        match st.sense {
            Sense::Max => vals.into_iter().max(),
            Sense::Min => vals.into_iter().min(),
        }
    };
    let value_of = |sol: &Solution| -> i128 {
        match order.values(c, sol)[stage] {
            Value::Int(v) => v,
            Value::Ratio(..) => 0,
        }
    };
    if stage == 0 {
        // Each pair's relaxed optimum under the whole order; its stage-0 value is that
        // pair's best, so the best over pairs bounds every plan.
        let vals: Vec<i128> = c
            .pairs
            .iter()
            .flat_map(|&p| pair_candidates(c, order, p, Fit::Relaxed))
            .map(|ch| value_of(&vec![Some(ch)]))
            .collect();
        return pick(vals);
    }
    // Throughput, stage 1 after "most served": any plan serving v uses some pair with at
    // least ⌈v/A⌉ prefill and ⌈v/B⌉ decode instances, and every term of this stage grows
    // with the counts, so those fewest counts bound it.
    let first = &order.stages[0];
    if stage == 1
        && first.terms == [(Term::Served, 1)]
        && st.sense == Sense::Min
        && st
            .terms
            .iter()
            .all(|&(t, k)| t.grows_with_counts() && k > 0)
    {
        let v = *fixed.first()?;
        let v = i64::try_from(v).ok()?;
        let vals: Vec<i128> = c
            .pairs
            .iter()
            .filter_map(|&pair| {
                let (p, d) = (&c.rows[pair.prefill], &c.rows[pair.decode]);
                let (np, nd) = (ceil_div(v, p.units.max(1)), ceil_div(v, d.units.max(1)));
                (fits_pair(c, pair, np, nd, Fit::Relaxed) == Some(true))
                    .then(|| value_of(&vec![Some(single(pair, np, nd))]))
            })
            .collect();
        return pick(vals);
    }
    None
}

/// Per pair, a valid bound on stage 0's value of any plan using that pair (an upper bound
/// for a Max stage, a lower bound for a Min stage): that pair's relaxed optimum, as
/// [`bound`] takes the best of them. `Some(None)` for a pair with no relaxed plan at all
/// (no plan uses it); None when the relaxation bounds no pair here (fleets, ratio and
/// re-plan stages). A planner gives CP-SAT only the pairs whose bound can still match the
/// incumbent: the others cannot be part of any optimum.
pub fn pair_bounds(c: &Candidates, order: &Order) -> Option<Vec<Option<i128>>> {
    if c.scenario.objective.is_fleet() || c.scenario.models.len() != 1 {
        return None;
    }
    let st = order.stages.first()?;
    let ratio = st.terms.iter().any(|t| t.0 == Term::Ratio);
    if ratio || matches!(c.scenario.objective, Objective::Moves { .. }) {
        return None;
    }
    let value_of = |ch: Choice| -> i128 {
        match order.values(c, &vec![Some(ch)])[0] {
            Value::Int(v) => v,
            Value::Ratio(..) => 0,
        }
    };
    Some(
        c.pairs
            .iter()
            .map(|&p| {
                let vals = pair_candidates(c, order, p, Fit::Relaxed)
                    .into_iter()
                    .map(value_of);
                match st.sense {
                    Sense::Max => vals.max(),
                    Sense::Min => vals.min(),
                }
            })
            .collect(),
    )
}

/// The best plan of one kind only — aggregated (`true`) or P/D pairs — by the closed forms
/// (exact for the throughput and demand objectives): what a plan of the other kind is
/// compared with.
pub fn best_of_kind(c: &Candidates, order: &Order, aggregated: bool) -> Option<Solution> {
    let pairs: Vec<Pair> = c
        .pairs
        .iter()
        .copied()
        .filter(|p| p.is_aggregated() == aggregated)
        .collect();
    best_over(c, order, &pairs, Fit::Exact)
}

/// Whether a pair's exact closed forms equal its relaxed ones: aggregated rows (one item
/// size), sides on different GPU types, or item sizes that divide one another (the cuts
/// are then exact, and `Cluster::most_beside` answers both from them).
fn exact_is_relaxed(c: &Candidates, pair: Pair) -> bool {
    if pair.is_aggregated() {
        return true;
    }
    let (a, b) = items(c, pair);
    a.gpu_type != b.gpu_type || chain(a.piece, b.piece)
}

/// What the closed forms say of a single-model scenario, from one pass over its pairs:
/// CP-SAT's hint, the best plan of each kind (what a plan of the other kind is compared
/// with) and each pair's stage-0 bound — each as [`hint`], [`best_of_kind`] and
/// [`pair_bounds`] give it alone.
#[derive(Debug, Clone, Default)]
pub struct ClosedForms {
    pub hint: Option<Solution>,
    /// The best plan over P/D pairs only (`[0]`) and over aggregated rows only (`[1]`).
    pub best_of_kind: [Option<Solution>; 2],
    pub bounds: Option<Vec<Option<i128>>>,
    /// Each pair's stage-0 bound as a value: `bounds`, or a ratio stage's ([`ratio_bounds`]).
    pub values: Option<Vec<Option<Value>>>,
}

/// [`ClosedForms`] of `c`. Each pair's relaxed candidates give its bound; a pair whose
/// exact closed forms are its relaxed ones (chain sizes, every pair on uniform nodes)
/// reuses them, and the others are searched exactly best bound first, skipping a pair whose
/// bound is worse than the best exact plan of its kind already found — its exact plans
/// are no better than its bound, so it cannot be that kind's best. Ties keep the first
/// pair in `c.pairs` order, as [`best_over`] does.
pub fn closed_forms(c: &Candidates, order: &Order) -> ClosedForms {
    if c.scenario.objective.is_fleet() || c.scenario.models.len() != 1 {
        return ClosedForms::default();
    }
    let Some(st) = order.stages.first() else {
        return ClosedForms::default();
    };
    let ratio = st.terms.iter().any(|t| t.0 == Term::Ratio);
    let moves = matches!(c.scenario.objective, Objective::Moves { .. });
    // Bounds from each pair's relaxed candidates, or a re-plan's own (`move_bounds`), or
    // a ratio stage's (`ratio_bounds`).
    let relaxed_bounds = !ratio && !moves;
    let stage0 = |ch: Choice| -> i128 {
        match order.values(c, &vec![Some(ch)])[0] {
            Value::Int(v) => v,
            Value::Ratio(..) => 0,
        }
    };
    let n = c.pairs.len();
    // Bounds known before any pair is searched: every pair's (ratio, re-plan), or an O(1)
    // upper bound per pair (`quick_bounds`) that orders the search and skips the pairs it
    // puts below their kind's best (their relaxed bound is then that quick one: valid).
    let given: Option<Vec<Option<Value>>> = if relaxed_bounds {
        None
    } else if moves {
        move_bounds(c, order).map(|b| b.into_iter().map(|v| v.map(Value::Int)).collect())
    } else {
        ratio_bounds(c, order)
    };
    let quick = if relaxed_bounds {
        quick_bounds(c, order)
    } else {
        None
    };
    let mut visit: Vec<usize> = (0..n).collect();
    if let Some(vb) = given.as_ref() {
        // Pairs without a bound have no plan.
        visit.retain(|&i| vb[i].is_some());
    }
    if let Some(key) = given.as_ref().or(quick.as_ref()) {
        // Best bound first (a stable sort: equal bounds stay in pair order).
        visit.sort_by(|&i, &j| match (&key[i], &key[j]) {
            (Some(a), Some(b)) => better_value(st.sense, b, a),
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        });
    }
    let mut bounds: Vec<Option<i128>> = vec![None; if relaxed_bounds { n } else { 0 }];
    // Per kind: (stage values, pair index, choice) of the best plan so far.
    let mut best: [Option<(Vec<Value>, usize, Choice)>; 2] = [None, None];
    let below = |b: &Value, best: &Option<(Vec<Value>, usize, Choice)>| {
        best.as_ref()
            .is_some_and(|(bv, _, _)| better_value(st.sense, b, &bv[0]) == Ordering::Less)
    };
    for i in visit {
        let p = c.pairs[i];
        let kind = usize::from(p.is_aggregated());
        // The bound is worse than that kind's best: so is every plan of the pair.
        if let Some(b) = given.as_ref().and_then(|g| g[i]) {
            if below(&b, &best[kind]) {
                continue;
            }
        }
        if let Some(q) = quick.as_ref().and_then(|q| q[i]) {
            if below(&q, &best[kind]) {
                bounds[i] = match q {
                    Value::Int(v) => Some(v),
                    Value::Ratio(..) => None,
                };
                continue;
            }
        }
        let same = exact_is_relaxed(c, p);
        let mut relaxed = None;
        if relaxed_bounds || same {
            let got = pair_candidates(c, order, p, Fit::Relaxed);
            if relaxed_bounds {
                let vals = got.iter().map(|&ch| stage0(ch));
                let b = match st.sense {
                    Sense::Max => vals.max(),
                    Sense::Min => vals.min(),
                };
                bounds[i] = b;
                match b {
                    None => continue, // no relaxed plan: no plan
                    Some(b) if below(&Value::Int(b), &best[kind]) => continue,
                    _ => {}
                }
            }
            if same {
                relaxed = Some(got);
            }
        }
        let got = relaxed.unwrap_or_else(|| pair_candidates(c, order, p, Fit::Exact));
        for ch in got {
            let v = order.values(c, &vec![Some(ch)]);
            let better =
                best[kind]
                    .as_ref()
                    .is_none_or(|(bv, bi, _)| match order.cmp_values(&v, bv) {
                        Ordering::Less => true,
                        Ordering::Equal => i < *bi,
                        Ordering::Greater => false,
                    });
            if better {
                best[kind] = Some((v, i, ch));
            }
        }
    }
    let hint = match (&best[0], &best[1]) {
        (Some(a), Some(b)) => {
            let first = match order.cmp_values(&a.0, &b.0) {
                Ordering::Less => a,
                Ordering::Greater => b,
                Ordering::Equal if a.1 < b.1 => a,
                Ordering::Equal => b,
            };
            Some(first.2)
        }
        (Some(a), None) | (None, Some(a)) => Some(a.2),
        (None, None) => None,
    };
    let (bounds, values) = if relaxed_bounds {
        let values = bounds.iter().map(|b| b.map(Value::Int)).collect();
        (Some(bounds), Some(values))
    } else {
        let ints = given.as_ref().filter(|_| moves).map(|g| {
            g.iter()
                .map(|v| match v {
                    Some(Value::Int(x)) => Some(*x),
                    _ => None,
                })
                .collect()
        });
        (ints, given)
    };
    ClosedForms {
        hint: hint.map(|ch| vec![Some(ch)]),
        best_of_kind: best.map(|b| b.map(|(_, _, ch)| vec![Some(ch)])),
        bounds,
        values,
    }
}

/// An O(1) bound per pair on a throughput stage 0 (served weighted towards the stage's
/// sense, every other term — GPUs, cost, sizes, counts, types, all ≥ 0 — against it): the
/// weight times the most the pair could serve with its packing relaxed to GPU counts. An
/// aggregated row serves `A·most`; P/D sides on one type share its free GPUs `G`, so
/// `v ≤ np·A`, `v ≤ nd·B`, `np·gA + nd·gB ≤ G` give `v ≤ G·A·B / (gA·B + gB·A)`; every
/// side serves at most all of its instances. None when stage 0 has another form.
fn quick_bounds(c: &Candidates, order: &Order) -> Option<Vec<Option<Value>>> {
    let st = order.stages.first()?;
    // A merged stage is a Min with served negated: the same form, signs flipped.
    let sign: i64 = if st.sense == Sense::Max { 1 } else { -1 };
    let mut k_served = 0i128;
    for &(t, k) in &st.terms {
        match t {
            Term::Served if k * sign > 0 => k_served = k as i128,
            Term::Gpus
            | Term::Cost
            | Term::TpSum
            | Term::PrefillTp
            | Term::Instances
            | Term::PrefillInstances
            | Term::TypeRank
                if k * sign <= 0 => {}
            _ => return None,
        }
    }
    if k_served == 0 {
        return None;
    }
    Some(
        c.pairs
            .iter()
            .map(|p| {
                let (ra, rb) = (&c.rows[p.prefill], &c.rows[p.decode]);
                let (ua, ub) = (ra.units.max(0) as i128, rb.units.max(0) as i128);
                let (ma, mb) = (c.most(p.prefill) as i128, c.most(p.decode) as i128);
                let mut v = if p.is_aggregated() {
                    ua * ma
                } else {
                    (ua * ma).min(ub * mb)
                };
                if !p.is_aggregated() {
                    let (a, b) = items(c, *p);
                    if a.gpu_type == b.gpu_type {
                        let g = c.cluster.cap(a.gpu_type, 1) as i128;
                        let (ga, gb) = ((a.piece * a.pieces) as i128, (b.piece * b.pieces) as i128);
                        let den = ga * ub + gb * ua;
                        if den > 0 {
                            v = v.min(g * ua * ub / den);
                        }
                    }
                }
                Some(Value::Int(k_served * v))
            })
            .collect(),
    )
}

/// How `a` compares with `b` as values of a stage of `sense`: Greater when `a` is better.
/// A ratio with denominator 0 is unbounded (above every other).
fn better_value(sense: Sense, a: &Value, b: &Value) -> Ordering {
    let o = match (a, b) {
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::Ratio(n1, d1), Value::Ratio(n2, d2)) => (n1 * d2).cmp(&(n2 * d1)),
        _ => Ordering::Equal,
    };
    match sense {
        Sense::Max => o,
        Sense::Min => o.reverse(),
    }
}

/// Per pair, an upper bound on the ratio stage (tokens per dollar) of any plan using it.
/// With `s`, `c` the rows' served and cost coefficients, a plan of `np`, `nd` instances
/// serving `v = min(np·sP, nd·sD)` needs `np ≥ v/sP` and `nd ≥ v/sD`, so its cost is at
/// least `v·(cP/sP + cD/sD)` and its ratio at most `sP·sD / (cP·sD + cD·sP)` (the balanced
/// split, packing and integrality relaxed); an aggregated row's ratio is `s/c` at every
/// count. A zero cost leaves the pair unbounded (`(1, 0)`). None when the first stage is
/// not a ratio.
pub fn ratio_bounds(c: &Candidates, order: &Order) -> Option<Vec<Option<Value>>> {
    let st = order.stages.first()?;
    if st.terms != [(Term::Ratio, 1)] || c.scenario.models.len() != 1 {
        return None;
    }
    let (s, k) = (&order.ratio_served, &order.ratio_cost);
    Some(
        c.pairs
            .iter()
            .map(|p| {
                let (a, b) = (p.prefill, p.decode);
                let (sp, sd) = (s[a].max(0) as i128, s[b].max(0) as i128);
                let (num, den) = if p.is_aggregated() {
                    (sp, k[a].max(0) as i128)
                } else {
                    (sp * sd, k[a].max(0) as i128 * sd + k[b].max(0) as i128 * sp)
                };
                Some(match (num, den) {
                    (0, _) => Value::Ratio(0, 1),
                    (_, 0) => Value::Ratio(1, 0),
                    _ => Value::Ratio(num, den),
                })
            })
            .collect(),
    )
}

/// A re-plan's per-pair lower bounds on stage 0 (moves, GPUs held and served, as
/// [`Order`] and the CP-SAT model count them), None when stage 0 is another mix. Each
/// chosen row's cost is convex in its count with one break at the running count, so its
/// least value over the counts that serve the demand is at the fewest or at the running
/// count; packing is ignored (a relaxation) and served is at most what every instance the
/// pool holds serves. `Some(None)` for a pair no plan can use (a row cannot serve the
/// demand within the pool).
pub fn move_bounds(c: &Candidates, order: &Order) -> Option<Vec<Option<i128>>> {
    let (w, run_p, run_d) = order.moves?;
    let st = order.stages.first()?;
    if st.sense != Sense::Min || c.scenario.models.len() != 1 {
        return None;
    }
    let (mut k_moves, mut k_gpus, mut k_served) = (0i128, 0i128, 0i128);
    // Tie terms merged into the stage (small pools): the pair fixes its sizes and types
    // (counted exactly below); every other term is ≥ 0 and left out (a lower bound).
    let mut fixed: Vec<(Term, i128)> = Vec::new();
    for &(t, k) in &st.terms {
        match t {
            Term::Moves => k_moves += k as i128,
            Term::Gpus => k_gpus += k as i128,
            Term::Served => k_served += k as i128,
            Term::TpSum | Term::PrefillTp | Term::TypeRank => fixed.push((t, k as i128)),
            Term::Cost | Term::Instances | Term::PrefillInstances if k >= 0 => {}
            _ => return None,
        }
    }
    if k_moves < 0 || k_gpus < 0 || k_served > 0 || fixed.iter().any(|&(_, k)| k < 0) {
        return None;
    }
    let (start, stop, restart, gpu) = (
        w.start as i128,
        w.stop as i128,
        w.restart as i128,
        w.gpu as i128,
    );
    let runs = [run_p, run_d];
    let row_cost = |r: usize| -> Option<i128> {
        let row = &c.rows[r];
        let most = c.most(r);
        let need = row.need.filter(|&n| n <= most)?;
        let g = row.gpus() as i128;
        let run = runs
            .iter()
            .find(|run| run.row == Some(r))
            .map(|run| run.instances);
        let cost = |n: i64| -> i128 {
            let n = n as i128;
            let moves = match run {
                None => gpu * g * n + start * g * n,
                Some(rn) => {
                    let rn = rn as i128;
                    gpu * g * n + start * g * (n - rn).max(0) + stop * g * (rn - n).max(0)
                }
            };
            k_moves * moves + k_gpus * g * n
        };
        let at_run = run.map(|rn| cost(rn.max(need).min(most)));
        Some(at_run.map_or(cost(need), |v| v.min(cost(need))))
    };
    let costs: Vec<Option<i128>> = (0..c.rows.len()).map(row_cost).collect();
    // A running side outside the pool stops (and restarts elsewhere) whatever is chosen.
    let gone: i128 = runs
        .iter()
        .filter(|run| run.row.is_none())
        .map(|run| k_moves * (stop + restart) * (run.gpus * run.instances) as i128)
        .sum();
    Some(
        c.pairs
            .iter()
            .map(|p| {
                let used = [p.prefill, p.decode];
                let mut total = costs[p.prefill]?;
                if !p.is_aggregated() {
                    total += costs[p.decode]?;
                }
                for run in &runs {
                    let Some(r) = run.row.filter(|r| !used.contains(r)) else {
                        continue;
                    };
                    // Stopped, and its GPUs restarted elsewhere (the model counts the stop
                    // per the row's size and the restart per the running size).
                    let rg = run.gpus as i128;
                    let g = c.rows.get(r).map_or(rg, |row| row.gpus() as i128);
                    let each = (stop * g + restart * rg).min((stop + restart) * rg);
                    total += k_moves * each * run.instances as i128;
                }
                let (a, b) = (&c.rows[p.prefill], &c.rows[p.decode]);
                let served = (a.units as i128 * c.most(p.prefill) as i128)
                    .min(b.units as i128 * c.most(p.decode) as i128);
                // Terms of the pair alone: the same for every count (`Order::term`).
                let one = vec![Some(single(*p, 1, 1))];
                let ties: i128 = fixed
                    .iter()
                    .map(|&(t, k)| match order.term(c, &one, t) {
                        Value::Int(v) => k * v,
                        Value::Ratio(..) => 0,
                    })
                    .sum();
                Some(total + gone + k_served * served + ties)
            })
            .collect(),
    )
}

/// The pairs a single-model plan's optimum can use, given a feasible `incumbent` and the
/// pairs' stage-0 bounds (`ClosedForms::values`): every pair whose bound matches or beats
/// the incumbent's stage-0 value, and the incumbent's own pair. Returns their indices in
/// `c.pairs` and the best bound among them when stage 0 is an integer (stage 0's bound;
/// None when the incumbent's pair has none, or for a ratio).
pub fn competitive(
    c: &Candidates,
    order: &Order,
    bounds: &[Option<Value>],
    incumbent: &Solution,
) -> Option<(Vec<usize>, Option<i128>)> {
    let st = order.stages.first()?;
    let mine = incumbent.first().copied().flatten()?;
    let value = order.values(c, incumbent)[0];
    let mut kept = Vec::new();
    let mut first: Option<Value> = None;
    let mut unbounded = false;
    for (i, (p, b)) in c.pairs.iter().zip(bounds).enumerate() {
        let own = *p == mine.pair;
        match b {
            None if own => unbounded = true,
            None => continue,
            Some(b) if !own && better_value(st.sense, b, &value) == Ordering::Less => continue,
            Some(b) => {
                if first.is_none_or(|f| better_value(st.sense, b, &f) == Ordering::Greater) {
                    first = Some(*b);
                }
            }
        }
        kept.push(i);
    }
    let first = match first {
        Some(Value::Int(v)) if !unbounded => Some(v),
        _ => None,
    };
    Some((kept, first))
}
