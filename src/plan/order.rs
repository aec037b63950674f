//! What "best" means, once, for every planner: an ordered list of *terms* (linear in the
//! instance counts and the chosen rows), compared lexicographically. The CP-SAT model
//! optimises them stage by stage; the oracle, the relaxation, the sweep and the rule-blind
//! search compare plans with [`Order::cmp`]. Nothing else in pdtp restates the order.
//!
//! Consecutive terms whose value ranges allow it are merged into one stage with mixed-radix
//! coefficients (the same order, one CP-SAT solve fewer): a stage's value range stays below
//! 2^53 so CP-SAT's linear relaxation sees exact integers.

use std::cmp::Ordering;

use super::candidates::{Candidates, Pair, Role, FRACTION_SCALE};
use super::scenario::Objective;

/// Fleet weights are compared in steps of 1/WEIGHT_SCALE of the largest weight.
pub const WEIGHT_SCALE: i64 = 1_000;
/// Re-plan weights that are not exact binary fractions are compared in steps of
/// 1/MOVE_SCALE of the largest one.
pub const MOVE_SCALE: f64 = 1e6;
const MERGE_LIMIT: i128 = 1 << 53;
const RATIO_MAX: i64 = 1 << 30;

/// A quantity of a plan, linear in the counts `n[row]`, the chosen-row flags `x[row]` and
/// the per-model served values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Term {
    /// Requests/s served: min(prefill capacity, decode capacity), in capacity units.
    Served,
    /// GPUs used.
    Gpus,
    /// Price of the GPUs used per hour, in `PRICE_SCALE` units.
    Cost,
    /// Sum of the chosen prefill and decode instance sizes ("smaller TP sizes").
    TpSum,
    /// The chosen prefill instance size.
    PrefillTp,
    /// Instances (prefill + decode).
    Instances,
    /// Prefill instances.
    PrefillInstances,
    /// Which GPU types the sides use: prefill type × types + decode type (pool order).
    TypeRank,
    /// A re-plan's weighted disruption plus its GPU weight (integer weights).
    Moves,
    /// The smallest served fraction among models with weight > 0 (steps of 1/FRACTION_SCALE).
    MinFraction,
    /// Σ weight × served fraction (integer weights, fractions capped at 1).
    WeightedFraction,
    /// Served / cost (tokens per dollar), both scaled to at most 2^30: a ratio, alone in its
    /// stage (CP-SAT maximises it by Dinkelbach iterations).
    Ratio,
}

impl Term {
    pub fn name(self) -> &'static str {
        match self {
            Term::Served => "served",
            Term::Gpus => "gpus",
            Term::Cost => "cost",
            Term::TpSum => "tp_sum",
            Term::PrefillTp => "prefill_tp",
            Term::Instances => "instances",
            Term::PrefillInstances => "prefill_instances",
            Term::TypeRank => "type_rank",
            Term::Moves => "moves",
            Term::MinFraction => "min_fraction",
            Term::WeightedFraction => "weighted_fraction",
            Term::Ratio => "ratio",
        }
    }

    /// Terms that only depend on which rows are chosen or grow with every instance: the
    /// fewest instances that reach a served value also minimise them.
    pub fn grows_with_counts(self) -> bool {
        matches!(
            self,
            Term::Gpus
                | Term::Cost
                | Term::TpSum
                | Term::PrefillTp
                | Term::Instances
                | Term::PrefillInstances
                | Term::TypeRank
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sense {
    Max,
    Min,
}

/// One CP-SAT solve: optimise Σ coef × term in `sense`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    pub sense: Sense,
    pub terms: Vec<(Term, i64)>,
}

/// The value of one stage for one plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    Int(i128),
    /// numerator / denominator (denominator > 0).
    Ratio(i128, i128),
}

/// One model's choice: a pair and its instance counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Choice {
    pub pair: Pair,
    pub prefill: i64,
    pub decode: i64,
}

impl Choice {
    /// The rows a choice runs and their instance counts: (prefill, decode), or the one
    /// aggregated row (whose pair is the row with itself and both counts its instances).
    pub fn parts(&self) -> impl Iterator<Item = (usize, i64)> {
        let n = if self.pair.is_aggregated() { 1 } else { 2 };
        [
            (self.pair.prefill, self.prefill),
            (self.pair.decode, self.decode),
        ]
        .into_iter()
        .take(n)
    }
}

/// A plan as the planners see it: one optional choice per model.
pub type Solution = Vec<Option<Choice>>;

/// Integer re-plan data: the running side's row (when it is in the pool), its instances and
/// GPUs per instance, and the weights as integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveSide {
    pub row: Option<usize>,
    pub instances: i64,
    pub gpus: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveWeights {
    pub start: i64,
    pub stop: i64,
    pub restart: i64,
    pub gpu: i64,
}

/// The order of one scenario: its stages and the integer data behind its terms.
#[derive(Debug, Clone)]
pub struct Order {
    pub stages: Vec<Stage>,
    /// The terms before merging, best first.
    pub lex: Vec<(Term, Sense)>,
    /// Per row: price of one instance per hour (PRICE_SCALE units).
    pub row_cost: Vec<i64>,
    /// Per model: integer weight (fleet) and whether it counts in the smallest fraction.
    pub weights: Vec<i64>,
    pub counts_in_min: Vec<bool>,
    pub moves: Option<(MoveWeights, MoveSide, MoveSide)>,
    /// Ratio stage: per row served and cost coefficients after scaling.
    pub ratio_served: Vec<i64>,
    pub ratio_cost: Vec<i64>,
}

/// Float weights as integers: exact when they are binary fractions of modest size (0.5,
/// 2, 3 …), else in steps of 1/MOVE_SCALE of the largest.
pub fn integer_weights(ws: &[f64]) -> Vec<i64> {
    let top = ws.iter().copied().fold(0.0_f64, f64::max);
    if top <= 0.0 {
        return vec![0; ws.len()];
    }
    for shift in 0..=20 {
        let scale = (1u64 << shift) as f64;
        if ws.iter().all(|w| (w * scale).fract() == 0.0) && top * scale <= 1e9 {
            return ws.iter().map(|w| (w * scale) as i64).collect();
        }
    }
    ws.iter()
        .map(|w| (w / top * MOVE_SCALE).round() as i64)
        .collect()
}

/// The order of an objective as a list of terms, best first, before stages are merged.
/// `multi_priced`: the pool has several GPU types, every one with a price (then cost breaks
/// ties before GPUs).
pub fn lexicographic(objective: &Objective, multi_priced: bool) -> Vec<(Term, Sense)> {
    use Sense::{Max, Min};
    let ties = [
        (Term::TpSum, Min),
        (Term::PrefillTp, Min),
        (Term::Instances, Min),
        (Term::PrefillInstances, Min),
        (Term::TypeRank, Min),
    ];
    let mut lex: Vec<(Term, Sense)> = Vec::new();
    match objective {
        Objective::Throughput => {
            lex.push((Term::Served, Max));
            if multi_priced {
                lex.push((Term::Cost, Min));
            }
            lex.push((Term::Gpus, Min));
            // Given the served value and the GPUs, a pair's fewest instances are fixed:
            // sizes and types settle the rest.
            lex.extend([ties[0], ties[1], ties[4]]);
        }
        Objective::TokensPerDollar => {
            lex.extend([(Term::Ratio, Max), (Term::Served, Max), (Term::Gpus, Min)]);
            lex.extend([ties[0], ties[1], ties[4]]);
        }
        Objective::FewestGpus => {
            lex.push((Term::Gpus, Min));
            if multi_priced {
                lex.push((Term::Cost, Min));
            }
            lex.push((Term::Served, Max));
            lex.extend(ties);
        }
        Objective::Cost => {
            lex.extend([(Term::Cost, Min), (Term::Gpus, Min), (Term::Served, Max)]);
            lex.extend(ties);
        }
        Objective::Moves { .. } => {
            lex.extend([(Term::Moves, Min), (Term::Gpus, Min), (Term::Served, Max)]);
            lex.extend(ties);
        }
        Objective::MaxMin => {
            lex.extend([
                (Term::MinFraction, Max),
                (Term::WeightedFraction, Max),
                (Term::Gpus, Min),
            ]);
        }
        Objective::Weighted => {
            lex.extend([(Term::WeightedFraction, Max), (Term::Gpus, Min)]);
        }
    }
    lex
}

/// Compare two plans by `lex` given each one's term values: Less means `a` is better.
pub fn cmp_lex(
    lex: &[(Term, Sense)],
    a: impl Fn(Term) -> i128,
    b: impl Fn(Term) -> i128,
) -> Ordering {
    for &(t, s) in lex {
        let o = a(t).cmp(&b(t));
        let o = if s == Sense::Max { o.reverse() } else { o };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

impl Order {
    pub fn new(c: &Candidates) -> Order {
        let sc = &c.scenario;
        let multi_priced = sc.gpu_types.len() > 1 && sc.priced();
        let row_cost: Vec<i64> = c
            .rows
            .iter()
            .map(|r| r.gpus().saturating_mul(sc.gpu_types[r.gpu_type].price))
            .collect();
        let top = sc.models.iter().map(|m| m.weight).fold(0.0_f64, f64::max);
        let weights: Vec<i64> = sc
            .models
            .iter()
            .map(|m| {
                if top > 0.0 && m.weight > 0.0 {
                    // A positive weight counts at least one step: a model the caller wants
                    // served is never rounded into "worth nothing" by a far larger weight.
                    ((m.weight / top * WEIGHT_SCALE as f64).round() as i64).max(1)
                } else {
                    0
                }
            })
            .collect();
        let counts_in_min = sc
            .models
            .iter()
            .map(|m| m.weight > 0.0 && m.demand_rps > 0.0)
            .collect();
        let lex = lexicographic(&sc.objective, multi_priced);
        let moves = match sc.objective {
            Objective::Moves {
                weights,
                prefill,
                decode,
            } => {
                let w =
                    integer_weights(&[weights.start, weights.stop, weights.restart, weights.gpu]);
                let side = |run: super::scenario::Running| MoveSide {
                    row: run.gpu_type.filter(|_| run.instances > 0).and_then(|t| {
                        c.rows.iter().position(|r| {
                            r.model == 0
                                && r.role == run.role
                                && r.gpu_type == t
                                && r.layout == run.layout
                        })
                    }),
                    instances: run.instances,
                    gpus: run.layout.gpus(),
                };
                Some((
                    MoveWeights {
                        start: w[0],
                        stop: w[1],
                        restart: w[2],
                        gpu: w[3],
                    },
                    side(prefill),
                    side(decode),
                ))
            }
            _ => None,
        };
        let (ratio_served, ratio_cost) = ratio_coefficients(c, &row_cost);
        let mut order = Order {
            stages: Vec::new(),
            lex: lex.clone(),
            row_cost,
            weights,
            counts_in_min,
            moves,
            ratio_served,
            ratio_cost,
        };
        order.stages = order.merge(c, &lex);
        order
    }

    /// Merge consecutive terms into mixed-radix stages while the value range allows.
    fn merge(&self, c: &Candidates, lex: &[(Term, Sense)]) -> Vec<Stage> {
        let mut stages: Vec<Stage> = Vec::new();
        let mut group: Vec<(Term, Sense, i128)> = Vec::new(); // (term, sense, range)
        let flush = |group: &mut Vec<(Term, Sense, i128)>, stages: &mut Vec<Stage>| {
            if group.is_empty() {
                return;
            }
            if group.len() == 1 {
                let (t, s, _) = group[0];
                stages.push(Stage {
                    sense: s,
                    terms: vec![(t, 1)],
                });
            } else {
                // Min Σ radix_j · (±term_j): a Max term enters negated.
                let mut terms = Vec::new();
                let mut radix: i128 = 1;
                for &(t, s, range) in group.iter().rev() {
                    let coef = if s == Sense::Max { -radix } else { radix };
                    terms.push((t, coef as i64));
                    radix *= range;
                }
                terms.reverse();
                stages.push(Stage {
                    sense: Sense::Min,
                    terms,
                });
            }
            group.clear();
        };
        for &(t, s) in lex {
            let range = self.range(c, t) as i128 + 1;
            let product: i128 = group.iter().map(|g| g.2).product::<i128>() * range;
            if t == Term::Ratio
                || group.first().is_some_and(|g| g.0 == Term::Ratio)
                || product > MERGE_LIMIT
            {
                flush(&mut group, &mut stages);
            }
            group.push((t, s, range));
        }
        flush(&mut group, &mut stages);
        stages
    }

    /// An upper bound on a term over every plan of the scenario (its lower bound is 0).
    pub fn range(&self, c: &Candidates, t: Term) -> i64 {
        let sc = &c.scenario;
        let total = sc.total_gpus();
        let max_size = c.rows.iter().map(|r| r.gpus()).max().unwrap_or(0);
        let models = sc.models.len() as i64;
        match t {
            Term::Served => (0..sc.models.len())
                .map(|m| c.served_bound(m))
                .fold(0, i64::saturating_add),
            Term::Gpus | Term::Instances | Term::PrefillInstances => total,
            Term::Cost => {
                let top = sc.gpu_types.iter().map(|g| g.price).max().unwrap_or(0);
                total.saturating_mul(top)
            }
            Term::TpSum => 2 * max_size * models,
            Term::PrefillTp => max_size * models,
            Term::TypeRank => {
                let n = sc.gpu_types.len() as i64;
                n * n * models
            }
            Term::Moves => match self.moves {
                Some((w, p, d)) => {
                    let most = w.start.max(w.stop + w.restart).max(0) + w.gpu.max(0);
                    most.saturating_mul(total + p.gpus * p.instances + d.gpus * d.instances)
                }
                None => 0,
            },
            Term::MinFraction => FRACTION_SCALE,
            Term::WeightedFraction => self
                .weights
                .iter()
                .sum::<i64>()
                .saturating_mul(FRACTION_SCALE),
            Term::Ratio => RATIO_MAX,
        }
    }

    // ---- values --------------------------------------------------------------------------

    fn served_of(c: &Candidates, ch: &Choice) -> i64 {
        let (p, d) = (&c.rows[ch.pair.prefill], &c.rows[ch.pair.decode]);
        (ch.prefill.saturating_mul(p.units)).min(ch.decode.saturating_mul(d.units))
    }

    /// A model's served fraction in steps of 1/FRACTION_SCALE (demand 0: fully served).
    pub fn fraction(c: &Candidates, model: usize, ch: Option<&Choice>) -> i64 {
        let d = c.demand_units[model];
        if d == 0 {
            return FRACTION_SCALE;
        }
        ch.map_or(0, |ch| {
            let s = Self::served_of(c, ch) as i128;
            (s * FRACTION_SCALE as i128 / d as i128).min(FRACTION_SCALE as i128) as i64
        })
    }

    fn moves_of(&self, c: &Candidates, sol: &Solution) -> i128 {
        let Some((w, p, d)) = self.moves else {
            return 0;
        };
        let Some(ch) = sol.first().copied().flatten() else {
            return 0;
        };
        // Each chosen row: held GPUs, and the difference from its running count when it is
        // a running side's row (else every instance starts); each running side whose row is
        // not chosen stops (and restarts) all of its instances.
        let mut cost: i128 = 0;
        for (row, n) in ch.parts() {
            let g = c.rows[row].gpus() as i128;
            let running = [p, d].into_iter().find(|run| run.row == Some(row));
            cost += match running {
                Some(run) => {
                    let delta = (n - run.instances) as i128;
                    if delta >= 0 {
                        w.start as i128 * g * delta
                    } else {
                        w.stop as i128 * g * -delta
                    }
                }
                None => w.start as i128 * g * n as i128,
            };
            cost += w.gpu as i128 * g * n as i128;
        }
        for run in [p, d] {
            if !run.row.is_some_and(|r| ch.parts().any(|(row, _)| row == r)) {
                cost += (w.stop + w.restart) as i128 * (run.gpus * run.instances) as i128;
            }
        }
        cost
    }

    /// One term's value for a plan.
    pub fn term(&self, c: &Candidates, sol: &Solution, t: Term) -> Value {
        let chosen = sol.iter().flatten();
        let types = c.scenario.gpu_types.len() as i128;
        let sum = |f: &dyn Fn(&Choice) -> i128| chosen.clone().map(f).sum::<i128>();
        let v = match t {
            Term::Served => sum(&|ch| Self::served_of(c, ch) as i128),
            Term::Gpus => sum(&|ch| {
                ch.parts()
                    .map(|(r, n)| (n * c.rows[r].gpus()) as i128)
                    .sum()
            }),
            Term::Cost => sum(&|ch| {
                ch.parts()
                    .map(|(r, n)| n as i128 * self.row_cost[r] as i128)
                    .sum()
            }),
            Term::TpSum => sum(&|ch| ch.parts().map(|(r, _)| c.rows[r].gpus() as i128).sum()),
            Term::PrefillTp => sum(&|ch| {
                let p = &c.rows[ch.pair.prefill];
                if p.role == Role::Prefill {
                    p.gpus() as i128
                } else {
                    0
                }
            }),
            Term::Instances => sum(&|ch| ch.parts().map(|(_, n)| n as i128).sum()),
            Term::PrefillInstances => sum(&|ch| {
                if c.rows[ch.pair.prefill].role == Role::Prefill {
                    ch.prefill as i128
                } else {
                    0
                }
            }),
            Term::TypeRank => sum(&|ch| {
                c.rows[ch.pair.prefill].gpu_type as i128 * types
                    + c.rows[ch.pair.decode].gpu_type as i128
            }),
            Term::Moves => self.moves_of(c, sol),
            Term::MinFraction => (0..c.scenario.models.len())
                .filter(|&m| self.counts_in_min[m])
                .map(|m| Self::fraction(c, m, sol[m].as_ref()) as i128)
                .min()
                .unwrap_or(FRACTION_SCALE as i128),
            Term::WeightedFraction => (0..c.scenario.models.len())
                .map(|m| self.weights[m] as i128 * Self::fraction(c, m, sol[m].as_ref()) as i128)
                .sum(),
            Term::Ratio => {
                let served = sum(&|ch| {
                    (ch.prefill as i128 * self.ratio_served[ch.pair.prefill] as i128)
                        .min(ch.decode as i128 * self.ratio_served[ch.pair.decode] as i128)
                });
                let cost = sum(&|ch| {
                    ch.parts()
                        .map(|(r, n)| n as i128 * self.ratio_cost[r] as i128)
                        .sum()
                });
                return Value::Ratio(served, cost.max(1));
            }
        };
        Value::Int(v)
    }

    /// The value of each stage for a plan.
    pub fn values(&self, c: &Candidates, sol: &Solution) -> Vec<Value> {
        self.stages
            .iter()
            .map(|st| {
                if st.terms.len() == 1 && st.terms[0].0 == Term::Ratio {
                    return self.term(c, sol, Term::Ratio);
                }
                let mut v: i128 = 0;
                for &(t, coef) in &st.terms {
                    if let Value::Int(x) = self.term(c, sol, t) {
                        v += coef as i128 * x;
                    }
                }
                Value::Int(v)
            })
            .collect()
    }

    /// Compare two stage-value lists: Less means `a` is the better plan.
    pub fn cmp_values(&self, a: &[Value], b: &[Value]) -> Ordering {
        for (st, (x, y)) in self.stages.iter().zip(a.iter().zip(b)) {
            let o = match (x, y) {
                (Value::Int(x), Value::Int(y)) => x.cmp(y),
                (Value::Ratio(n1, d1), Value::Ratio(n2, d2)) => (n1 * d2).cmp(&(n2 * d1)),
                _ => Ordering::Equal,
            };
            let o = if st.sense == Sense::Max {
                o.reverse()
            } else {
                o
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    /// Compare two plans: Less means `a` is better.
    pub fn cmp(&self, c: &Candidates, a: &Solution, b: &Solution) -> Ordering {
        self.cmp_values(&self.values(c, a), &self.values(c, b))
    }
}

/// Row coefficients of the ratio stage: served capacity and instance price, each divided
/// by a power of two so that the whole pool's served and cost stay below RATIO_MAX.
fn ratio_coefficients(c: &Candidates, row_cost: &[i64]) -> (Vec<i64>, Vec<i64>) {
    if !matches!(c.scenario.objective, Objective::TokensPerDollar) {
        return (Vec::new(), Vec::new());
    }
    let served_ub: i64 = (0..c.scenario.models.len())
        .map(|m| c.served_bound(m))
        .fold(0, i64::saturating_add);
    let cost_ub = (0..c.rows.len())
        .map(|r| row_cost[r].saturating_mul(c.most(r)))
        .max()
        .unwrap_or(0)
        .saturating_mul(2);
    let shift = |ub: i64| {
        let mut g = 1i64;
        while ub / g > RATIO_MAX {
            g *= 2;
        }
        g
    };
    let (gs, gc) = (shift(served_ub), shift(cost_ub));
    (
        c.rows.iter().map(|r| r.units / gs).collect(),
        row_cost.iter().map(|&x| (x + gc - 1) / gc).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_weights_are_exact_for_binary_fractions() {
        assert_eq!(integer_weights(&[1.0, 1.0, 0.0, 1.0]), vec![1, 1, 0, 1]);
        assert_eq!(integer_weights(&[2.0, 0.5, 3.0, 1.0]), vec![4, 1, 6, 2]);
        assert_eq!(integer_weights(&[0.0; 4]), vec![0; 4]);
        let w = integer_weights(&[0.1, 0.2, 0.0, 1e308]);
        assert_eq!(w[3], MOVE_SCALE as i64);
        assert!(w.iter().all(|&x| x >= 0));
    }
}
