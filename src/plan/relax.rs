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
use super::cluster::{most_served, room, Fit, Item, TooLarge};
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
                    if (1..=r).contains(&nd) {
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
