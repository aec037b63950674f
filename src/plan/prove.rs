//! A proof by enumeration for single-model planners: every instance count of the few pairs
//! that can still match the closed forms' plan (the *incumbent*), each checked for fit by
//! the exact node search, compared with [`Order::cmp`].
//!
//! It uses none of the hint's dominance shortcuts (one decode count per prefill count at the
//! balance point, the fewest counts for a demand, the bisection for the crossing): within
//! each pair it visits every `(prefill, decode)` count whose first term of the order can
//! tie or beat the incumbent's. That *box* follows from the term's definition alone —
//! served = min(np·A, nd·B) ≥ v needs np ≥ ⌈v/A⌉ and nd ≥ ⌈v/B⌉; GPUs (or cost) ≤ g needs
//! np·gA + nd·gB ≤ g — so no plan outside it can be as good as the incumbent, and
//! (removing instances keeps a plan placeable) once `np` prefill instances leave too little
//! room for the box's fewest decode instances, so do all larger `np`.
//!
//! Which pairs it visits is the caller's: those whose valid stage-0 bound can match the
//! incumbent ([`super::relax::competitive`]), the same pairs CP-SAT would be given. The box
//! is small when the incumbent is near optimal (the pool's GPUs bound both counts); when it
//! is not, or the order leads with another term (a ratio, moves, a fleet), this answers
//! None and CP-SAT proves instead.

use std::time::Instant;

use super::candidates::Candidates;
use super::cluster::TooLarge;
use super::feasible;
use super::order::{Choice, Order, Sense, Solution, Term, Value};

/// Most plans one proof visits (fit checks and comparisons), before it leaves the proof
/// to CP-SAT: a few milliseconds.
pub const ENUMERATION_BUDGET: u64 = 20_000;

/// How often (in visited plans) the deadline is checked.
const CHECK_EVERY: u64 = 1024;

fn ceil_div(a: i128, b: i128) -> i128 {
    (a + b - 1).div_euclid(b)
}

/// The first term's limit on one row's count: `lead` and its incumbent value `target`.
#[derive(Clone, Copy)]
enum Lead {
    /// served ≥ target (Max).
    Served(i128),
    /// Σ n · weight[row] ≤ target (Min): GPUs, or cost per hour.
    Spend(i128),
    /// A re-plan's moves ≤ target (Min): per chosen row a cost that falls to its running
    /// count and never falls above it (a row that is not running: from 0), plus what the
    /// pair's choice of rows stops — each count's value is asked of the order itself.
    Moves(i128),
}

/// The best plan over every count of `pairs` (indices into `c.pairs`) whose first term can
/// tie or beat `incumbent`'s; a tie keeps the incumbent. None when the order leads with a
/// term this does not bound, a count's exact fit is too large to search, the proof would
/// visit more than `budget` plans, `deadline` passes, or no plan in the box fits: then it
/// proves nothing.
///
/// The incumbent is not trusted: it is an answer only when the box's own exact fit checks
/// meet it. A plan found in the box is feasible and at least as good as the incumbent on
/// the first term, which is what makes the box and the caller's pruning (pairs whose bound
/// is below the incumbent's value) valid; an infeasible incumbent that beats every real
/// plan leaves the box without a fitting plan, and the answer is None.
pub fn enumerate(
    c: &Candidates,
    order: &Order,
    pairs: &[usize],
    incumbent: &Solution,
    deadline: Option<Instant>,
    budget: u64,
) -> Option<Solution> {
    if c.scenario.objective.is_fleet() || c.scenario.models.len() != 1 || incumbent.len() != 1 {
        return None;
    }
    let mine = incumbent[0]?;
    let &(term, sense) = order.lex.first()?;
    let Value::Int(target) = order.term(c, incumbent, term) else {
        return None;
    };
    let lead = match (term, sense) {
        (Term::Served, Sense::Max) => Lead::Served(target),
        (Term::Gpus, Sense::Min) | (Term::Cost, Sense::Min) => Lead::Spend(target),
        (Term::Moves, Sense::Min) => {
            let (w, _, _) = order.moves?;
            if [w.start, w.stop, w.restart, w.gpu].iter().any(|&k| k < 0) {
                return None;
            }
            Lead::Moves(target)
        }
        _ => return None,
    };
    // A row's running count (0 when it is not running): its moves never fall above it.
    let running = |r: usize| -> i128 {
        order.moves.map_or(0, |(_, p, d)| {
            [p, d]
                .iter()
                .find(|run| run.row == Some(r))
                .map_or(0, |run| run.instances as i128)
        })
    };
    let moves_of = |ch: Choice| -> i128 {
        match order.term(c, &vec![Some(ch)], Term::Moves) {
            Value::Int(v) => v,
            Value::Ratio(..) => i128::MAX,
        }
    };
    // Per row: what one instance adds to a spent term (GPUs or cost); a row that adds
    // nothing leaves its count unbounded.
    let weight = |r: usize| -> i128 {
        match term {
            Term::Cost => order.row_cost[r] as i128,
            _ => c.rows[r].gpus() as i128,
        }
    };
    let demand = c.scenario.objective.serves_demand();
    let mut work: u64 = 0;
    let mut best: Option<(Vec<Value>, Choice)> = None;
    let mut met = false; // whether the box visited the incumbent (its fit checked)
    let mut offer = |ch: Choice, work: &mut u64| -> Option<()> {
        *work += 1;
        if *work > budget {
            return None;
        }
        if *work % CHECK_EVERY == 0 && deadline.is_some_and(|t| Instant::now() >= t) {
            return None;
        }
        met |= ch == mine;
        let v = order.values(c, &vec![Some(ch)]);
        if best
            .as_ref()
            .is_none_or(|(bv, _)| order.cmp_values(&v, bv) == std::cmp::Ordering::Less)
        {
            best = Some((v, ch));
        }
        Some(())
    };
    for &i in pairs {
        let pair = *c.pairs.get(i)?;
        let (p, d) = (&c.rows[pair.prefill], &c.rows[pair.decode]);
        let (Some(a), Some(b)) = (p.item, d.item) else {
            continue;
        };
        let (mut lo_p, mut lo_d) = if demand {
            match (p.need, d.need) {
                (Some(x), Some(y)) => (x as i128, y as i128),
                _ => continue,
            }
        } else {
            (1, 1)
        };
        let (up, ud) = (p.units as i128, d.units as i128);
        let (wp, wd) = (weight(pair.prefill), weight(pair.decode));
        if let Lead::Served(v) = lead {
            if v > 0 && (up <= 0 || ud <= 0) {
                continue; // serves nothing: below any incumbent that serves
            }
            if v > 0 {
                lo_p = lo_p.max(ceil_div(v, up));
                lo_d = lo_d.max(ceil_div(v, ud));
            }
        } else if matches!(lead, Lead::Spend(_)) && (wp <= 0 || wd <= 0) {
            return None; // a free row: its count is not bounded by the spend
        }
        let most_p = c.cluster.most(a) as i128;
        if pair.is_aggregated() {
            let lo = lo_p.max(lo_d);
            let hi = match lead {
                Lead::Served(_) | Lead::Moves(_) => most_p,
                Lead::Spend(g) => most_p.min(g.div_euclid(wp)),
            };
            let mut n = lo;
            while n <= hi {
                let k = n as i64;
                let ch = Choice {
                    pair,
                    prefill: k,
                    decode: k,
                };
                if let Lead::Moves(m) = lead {
                    if moves_of(ch) > m {
                        if n >= running(pair.prefill) {
                            break; // never falls again
                        }
                        n += 1;
                        continue;
                    }
                }
                offer(ch, &mut work)?;
                n += 1;
            }
            continue;
        }
        let hi_p = match lead {
            Lead::Served(_) | Lead::Moves(_) => most_p,
            Lead::Spend(g) => most_p.min((g - lo_d * wd).div_euclid(wp)),
        };
        let (run_p, run_d) = (running(pair.prefill), running(pair.decode));
        let mut np = lo_p;
        while np <= hi_p {
            work += 1;
            let room = match c.cluster.most_beside(a, np as i64, b, true) {
                Ok(Some(r)) => r as i128,
                Ok(None) => break, // np alone does not fit: nor does any larger np
                Err(TooLarge) => return None,
            };
            let hi_d = match lead {
                Lead::Served(_) | Lead::Moves(_) => room,
                Lead::Spend(g) => room.min((g - np * wp).div_euclid(wd)),
            };
            if room < lo_d {
                break; // more prefill instances leave no more room
            }
            // Moves: the least value over this np's decode counts (each side's cost falls
            // to its running count and never falls above it, so the least is met before
            // the loop stops).
            let mut least = i128::MAX;
            let mut nd = lo_d;
            while nd <= hi_d {
                let ch = Choice {
                    pair,
                    prefill: np as i64,
                    decode: nd as i64,
                };
                if let Lead::Moves(m) = lead {
                    work += 1;
                    let v = moves_of(ch);
                    least = least.min(v);
                    if v > m {
                        if nd >= run_d {
                            break;
                        }
                        nd += 1;
                        continue;
                    }
                }
                offer(ch, &mut work)?;
                nd += 1;
            }
            if let Lead::Moves(m) = lead {
                if work > budget {
                    return None;
                }
                // Past its running count the prefill side's cost never falls, and more
                // prefill instances leave no more decode room: nothing further is ≤ m.
                if np >= run_p && least > m {
                    break;
                }
            }
            np += 1;
        }
    }
    let (values, ch) = best?;
    let keep = met
        && order
            .cmp_values(&order.values(c, incumbent), &values)
            .is_eq();
    let sol = vec![Some(if keep { mine } else { ch })];
    // The answer's fit once more, by the whole-plan check the feasibility tests use.
    (feasible::feasible(c, &sol) != Some(false)).then_some(sol)
}
