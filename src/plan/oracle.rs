//! The exhaustive oracle: every pair, every instance count the nodes hold, compared with
//! [`Order::cmp`]. It shares nothing with the CP-SAT model but the candidate rows and the
//! order, so tests hold every planner's answer against it.
//!
//! `reduced` skips counts a dominance argument rules out (for "most served", decode
//! instances beyond the balance point only add GPUs; for a demand, instances beyond the
//! fewest that serve it only add GPUs and cost unless moves make keeping them cheaper) — the
//! fallback for a first call that cannot wait for OR-Tools uses it; tests check it against
//! the full enumeration.

use std::collections::BTreeMap;
use std::time::Instant;

use super::candidates::{Candidates, Pair};
use super::cluster::{Cluster, TooLarge};
use super::order::{Choice, Order, Solution, Value};
use super::scenario::Objective;

/// How often (in evaluated plans) the deadline is checked.
const CHECK_EVERY: u32 = 4096;

pub struct Search<'a> {
    c: &'a Candidates,
    order: &'a Order,
    deadline: Option<Instant>,
    steps: u32,
    best: Option<(Vec<Value>, Solution)>,
    complete: bool,
}

impl<'a> Search<'a> {
    fn out_of_time(&mut self) -> bool {
        self.steps = self.steps.wrapping_add(1);
        if self.steps % CHECK_EVERY == 0 && self.deadline.is_some_and(|t| Instant::now() >= t) {
            self.complete = false;
        }
        !self.complete
    }

    fn offer(&mut self, sol: Solution) {
        let v = self.order.values(self.c, &sol);
        if self
            .best
            .as_ref()
            .is_none_or(|(bv, _)| self.order.cmp_values(&v, bv) == std::cmp::Ordering::Less)
        {
            self.best = Some((v, sol));
        }
    }
}

/// The decode counts worth trying next to `np` prefill instances of `pair` (all of them
/// unless `reduced`).
fn decode_counts(
    c: &Candidates,
    order: &Order,
    pair: Pair,
    np: i64,
    lo: i64,
    room: i64,
    reduced: bool,
) -> Vec<i64> {
    if lo > room {
        return Vec::new();
    }
    if !reduced {
        return (lo..=room).collect();
    }
    let (p, d) = (&c.rows[pair.prefill], &c.rows[pair.decode]);
    let even = ((np as i128 * p.units as i128 + d.units as i128 - 1) / d.units.max(1) as i128)
        .min(i64::MAX as i128) as i64;
    let mut out = match c.scenario.objective {
        Objective::Throughput => vec![even.min(room)],
        // A fraction counts in steps: fewer decode instances may reach the same one.
        Objective::MaxMin | Objective::Weighted => return (lo..=room).collect(),
        Objective::TokensPerDollar => vec![even - 1, even, room],
        Objective::FewestGpus | Objective::Cost => vec![lo],
        Objective::Moves { .. } => {
            let keep = order.moves.map_or(lo, |(_, _, run)| run.instances);
            vec![lo, keep.min(room)]
        }
    };
    out.retain(|&n| (lo..=room).contains(&n));
    out.sort_unstable();
    out.dedup();
    out
}

fn prefill_range(c: &Candidates, order: &Order, lo: i64, hi: i64, reduced: bool) -> Vec<i64> {
    if lo > hi {
        return Vec::new();
    }
    if reduced {
        match c.scenario.objective {
            Objective::FewestGpus | Objective::Cost => return vec![lo],
            Objective::Moves { .. } => {
                let keep = order.moves.map_or(lo, |(_, run, _)| run.instances);
                return (lo..=keep.clamp(lo, hi)).collect();
            }
            _ => {}
        }
    }
    (lo..=hi).collect()
}

/// Every plan of one model: `(pair, np, nd)` with the decode room exact (an exact search
/// too large to run makes the result incomplete).
fn model_options(s: &mut Search, model: usize, reduced: bool) -> Vec<Choice> {
    let c = s.c;
    let mut out = Vec::new();
    let demand = c.scenario.objective.serves_demand();
    for &pair in c.pairs.iter().filter(|p| p.model == model) {
        let (p, d) = (&c.rows[pair.prefill], &c.rows[pair.decode]);
        let (a, b) = (p.item.unwrap(), d.item.unwrap());
        let (lo_p, lo_d) = if demand {
            match (p.need, d.need) {
                (Some(x), Some(y)) => (x, y),
                _ => continue,
            }
        } else {
            (1, 1)
        };
        let mut hi_p = c.cluster.most(a);
        if c.scenario.objective.is_fleet() && reduced {
            // Prefill beyond what serves the whole demand adds nothing to its fraction.
            let need = (c.demand_units[model] + p.units - 1) / p.units.max(1);
            hi_p = hi_p.min(need.max(1));
        }
        if pair.is_aggregated() {
            // One row: its count is the plan (served grows with every instance).
            let counts: Vec<i64> = match c.scenario.objective {
                _ if lo_p > hi_p => Vec::new(),
                Objective::Throughput | Objective::TokensPerDollar if reduced => vec![hi_p],
                Objective::FewestGpus | Objective::Cost if reduced => vec![lo_p],
                _ => prefill_range(c, s.order, lo_p, hi_p, reduced),
            };
            out.extend(counts.into_iter().map(|n| Choice {
                pair,
                prefill: n,
                decode: n,
            }));
            continue;
        }
        for np in prefill_range(c, s.order, lo_p, hi_p, reduced) {
            if s.out_of_time() {
                return out;
            }
            let room = match c.cluster.most_beside(a, np, b, true) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(TooLarge) => {
                    s.complete = false;
                    return out;
                }
            };
            for nd in decode_counts(c, s.order, pair, np, lo_d, room, reduced) {
                out.push(Choice {
                    pair,
                    prefill: np,
                    decode: nd,
                });
            }
        }
    }
    out
}

/// The oracle: the best plan and whether the search finished before `deadline`.
pub fn search(
    c: &Candidates,
    order: &Order,
    deadline: Option<Instant>,
    reduced: bool,
) -> (Option<Solution>, bool) {
    let mut s = Search {
        c,
        order,
        deadline,
        steps: 0,
        best: None,
        complete: true,
    };
    let n = c.scenario.models.len();
    if !c.scenario.objective.is_fleet() {
        let opts = model_options(&mut s, 0, reduced);
        for ch in opts {
            if s.out_of_time() {
                break;
            }
            s.offer(vec![Some(ch)]);
        }
        return (s.best.map(|b| b.1), s.complete);
    }
    // A shared pool: every combination of each model's options (or none), packed exactly.
    let mut per_model: Vec<Vec<Option<Choice>>> = Vec::new();
    for m in 0..n {
        let mut opts = vec![None];
        if c.demand_units[m] > 0 {
            opts.extend(model_options(&mut s, m, reduced).into_iter().map(Some));
        }
        per_model.push(opts);
    }
    let mut current: Solution = vec![None; n];
    combine(&mut s, &per_model, 0, &mut current);
    (s.best.map(|b| b.1), s.complete)
}

fn combine(s: &mut Search, per_model: &[Vec<Option<Choice>>], m: usize, current: &mut Solution) {
    if !s.complete {
        return;
    }
    if m == per_model.len() {
        if s.out_of_time() {
            return;
        }
        if packs(&s.c.cluster, s.c, current) {
            s.offer(current.clone());
        }
        return;
    }
    for opt in &per_model[m] {
        current[m] = *opt;
        combine(s, per_model, m + 1, current);
    }
    current[m] = None;
}

/// Whether a whole plan fits the nodes: closed forms where they exist, else an exact
/// search over nodes (small pools only).
pub fn packs(cl: &Cluster, c: &Candidates, sol: &Solution) -> bool {
    let mut need = Vec::new();
    for ch in sol.iter().flatten() {
        need.extend(ch.parts().map(|(r, n)| (c.rows[r].item.unwrap(), n)));
    }
    match cl.fits(&need) {
        Ok(ok) => ok,
        Err(TooLarge) => {
            let mut per_type: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
            for (it, n) in need {
                let e = per_type.entry(it.gpu_type).or_default();
                for _ in 0..n.saturating_mul(it.pieces) {
                    e.push(it.piece);
                }
            }
            per_type.into_iter().all(|(t, mut items)| {
                items.sort_unstable_by(|a, b| b.cmp(a));
                let mut free: Vec<i64> = cl
                    .classes
                    .iter()
                    .filter(|k| k.gpu_type == t)
                    .flat_map(|k| std::iter::repeat_n(k.free, k.count as usize))
                    .collect();
                bin_pack(&items, 0, &mut free)
            })
        }
    }
}

fn bin_pack(items: &[i64], i: usize, free: &mut [i64]) -> bool {
    if i == items.len() {
        return true;
    }
    let mut tried: Vec<i64> = Vec::new();
    for n in 0..free.len() {
        let f = free[n];
        if f >= items[i] && !tried.contains(&f) {
            tried.push(f);
            free[n] -= items[i];
            if bin_pack(items, i + 1, free) {
                free[n] += items[i];
                return true;
            }
            free[n] += items[i];
        }
    }
    false
}
