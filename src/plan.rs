//! The candidate table the solver chooses from, and an exhaustive oracle.
//!
//! Prefill capacity depends only on the prefill TP size and decode capacity only on the
//! decode TP size, so the table holds one row per TP size and side (the arithmetic) and
//! one row per valid (P, D) pair with its best instance counts. What is left — which pair —
//! is the combinatorial choice CP-SAT makes. Capacities are scaled to integers here, once.

use std::cmp::Ordering;
use std::time::Instant;

use crate::check::{load_ok, pair_ok, Shape};
use crate::connector::ConnectorProfile;
use crate::perf::{
    decode_point, prefill_point, weights_fit, Constants, GpuPerf, ModelPerf, Workload,
};

/// Capacities are compared in integer micro-requests per second.
pub const CAPACITY_SCALE: f64 = 1e6;

pub fn to_units(requests_per_s: f64) -> i64 {
    if requests_per_s.is_finite() && requests_per_s > 0.0 {
        (requests_per_s * CAPACITY_SCALE).floor().min(1e15) as i64
    } else {
        0
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Problem<'a> {
    pub model: ModelPerf,
    pub shape: Shape,
    pub gpu: GpuPerf,
    pub constants: Constants,
    pub workload: Workload,
    pub profile: &'a ConnectorProfile,
    pub gpus: i64,
    pub max_tp: i64,
    pub max_acks: Option<i64>,
    pub gpu_memory_utilization: f64,
}

/// One TP size on one side, with every reason it may be unusable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SideOption {
    pub tp: i64,
    /// Passes the model-load rules (head divisibility).
    pub loads: bool,
    /// Weights + runtime reserve fit in `gpu_memory_utilization` of one GPU.
    pub fits_weights: bool,
    /// Prefill: the prompt's KV fits. Decode: at least one full sequence (isl + osl) fits.
    pub fits_kv: bool,
    /// TTFT (prefill) or TPOT at the operating batch (decode, batch 1 when none meets it).
    pub latency: f64,
    pub meets_slo: bool,
    /// Decode batch at the operating point (prefill: 1).
    pub batch: i64,
    pub max_batch: i64,
    pub requests_per_s: f64,
    pub units: i64,
}

impl SideOption {
    pub fn usable(&self) -> bool {
        self.loads && self.fits_weights && self.fits_kv && self.meets_slo && self.units > 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub prefill_tp: i64,
    pub prefill_instances: i64,
    pub decode_tp: i64,
    pub decode_instances: i64,
    /// min(prefill, decode) capacity in scaled units.
    pub value: i64,
    pub gpus_used: i64,
}

impl Candidate {
    /// The documented order: more served requests/s, then fewer GPUs, then smaller TP
    /// sizes (P + D, then P), then fewer instances.
    pub fn better_than(&self, other: &Candidate) -> bool {
        self.cmp_key(other) == Ordering::Less
    }

    pub fn cmp_key(&self, o: &Candidate) -> Ordering {
        o.value
            .cmp(&self.value)
            .then(self.gpus_used.cmp(&o.gpus_used))
            .then((self.prefill_tp + self.decode_tp).cmp(&(o.prefill_tp + o.decode_tp)))
            .then(self.prefill_tp.cmp(&o.prefill_tp))
            .then(
                (self.prefill_instances + self.decode_instances)
                    .cmp(&(o.prefill_instances + o.decode_instances)),
            )
    }
}

#[derive(Debug, Clone, Default)]
pub struct Table {
    pub prefill: Vec<SideOption>,
    pub decode: Vec<SideOption>,
    /// Valid pairs whose sides are usable and that fit the budget, with best counts.
    pub candidates: Vec<Candidate>,
    /// Valid pairs (rules only), whatever memory, SLO or budget say.
    pub valid_pairs: usize,
    /// The best candidate among pairs the connector rejects (usable sides, in budget):
    /// what a rule-blind planner would pick, so users see what the rules cost.
    pub best_rejected: Option<Candidate>,
}

/// One TP size on one side: load rules, memory, SLO and capacity.
#[allow(clippy::too_many_arguments)]
pub fn side_option(
    m: &ModelPerf,
    shape: &Shape,
    g: &GpuPerf,
    c: &Constants,
    w: &Workload,
    util: f64,
    tp: i64,
    prefill: bool,
) -> SideOption {
    let loads = load_ok(shape, tp);
    let fits_weights = weights_fit(m, g, c, tp, util);
    if prefill {
        let p = prefill_point(m, g, c, tp, w, util);
        SideOption {
            tp,
            loads,
            fits_weights,
            fits_kv: p.fits,
            latency: p.ttft,
            meets_slo: w.ttft.is_none_or(|limit| p.ttft <= limit),
            batch: 1,
            max_batch: 1,
            requests_per_s: p.requests_per_s,
            units: to_units(p.requests_per_s),
        }
    } else {
        let d = decode_point(m, g, c, tp, w, util);
        SideOption {
            tp,
            loads,
            fits_weights,
            fits_kv: d.max_batch >= 1,
            latency: d.tpot,
            meets_slo: d.batch >= 1,
            batch: d.batch,
            max_batch: d.max_batch,
            requests_per_s: d.requests_per_s,
            units: to_units(d.requests_per_s),
        }
    }
}

fn side_options(pb: &Problem, prefill: bool) -> Vec<SideOption> {
    side_options_upto(pb, pb.max_tp.min(pb.gpus), prefill)
}

/// One side's options for TP sizes 1..=bound.
pub fn side_options_upto(pb: &Problem, bound: i64, prefill: bool) -> Vec<SideOption> {
    (1..=bound.max(0))
        .map(|tp| {
            side_option(
                &pb.model,
                &pb.shape,
                &pb.gpu,
                &pb.constants,
                &pb.workload,
                pb.gpu_memory_utilization,
                tp,
                prefill,
            )
        })
        .collect()
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// Smallest instance counts that still serve `value` (fewest GPUs for that value).
fn trim(p: i64, a: i64, d: i64, b: i64, value: i64) -> Candidate {
    let (np, nd) = (ceil_div(value, a), ceil_div(value, b));
    Candidate {
        prefill_tp: p,
        prefill_instances: np,
        decode_tp: d,
        decode_instances: nd,
        value,
        gpus_used: p * np + d * nd,
    }
}

/// Best instance counts for one pair in O(log G): v(np) = min(np·A, ⌊(G − P·np)/D⌋·B) rises
/// then falls, so the optimum sits at the crossing np₀ or np₀ + 1.
pub fn best_counts(p: i64, a: i64, d: i64, b: i64, gpus: i64) -> Option<Candidate> {
    if a <= 0 || b <= 0 || p + d > gpus {
        return None;
    }
    let np_max = (gpus - d) / p;
    let nd_of = |np: i64| (gpus - p * np) / d;
    let value = |np: i64| (np.saturating_mul(a)).min(nd_of(np).saturating_mul(b));
    // Largest np in [1, np_max] with np·A ≤ nd(np)·B (the left side of the crossing).
    let (mut lo, mut hi) = (1_i64, np_max);
    if a > nd_of(1).saturating_mul(b) {
        hi = 0; // even one prefill instance out-serves all the decode capacity left
    }
    while lo < hi {
        let mid = lo + (hi - lo + 1) / 2;
        if mid.saturating_mul(a) <= nd_of(mid).saturating_mul(b) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let left = hi.max(1);
    let mut best = value(left);
    if left < np_max {
        best = best.max(value(left + 1));
    }
    Some(trim(p, a, d, b, best))
}

pub fn build_table(pb: &Problem) -> Table {
    let prefill = side_options(pb, true);
    let decode = side_options(pb, false);
    let mut candidates = Vec::new();
    let mut valid_pairs = 0;
    let mut best_rejected: Option<Candidate> = None;
    // Only sizes that load the model can pair (they divide the head count), which keeps the
    // pair loop small whatever `max_tp` is.
    for po in prefill.iter().filter(|o| o.loads) {
        for dop in decode.iter().filter(|o| o.loads) {
            let ok = pair_ok(&pb.shape, po.tp, dop.tp, pb.profile, pb.max_acks);
            valid_pairs += usize::from(ok);
            if !(po.usable() && dop.usable()) {
                continue;
            }
            if let Some(c) = best_counts(po.tp, po.units, dop.tp, dop.units, pb.gpus) {
                if ok {
                    candidates.push(c);
                } else if best_rejected.is_none_or(|b| c.better_than(&b)) {
                    best_rejected = Some(c);
                }
            }
        }
    }
    Table {
        prefill,
        decode,
        candidates,
        valid_pairs,
        best_rejected,
    }
}

/// The best candidate of a table, in the documented order.
pub fn best_of(table: &Table) -> Option<Candidate> {
    table.candidates.iter().copied().min_by(|a, b| a.cmp_key(b))
}

/// The exact oracle: every valid pair, every prefill instance count, the best decode count
/// for it — no crossing argument, no candidate table. O(pairs · G / P).
pub fn enumerate_best(pb: &Problem) -> Option<Candidate> {
    enumerate_best_until(pb, None).0
}

/// [`enumerate_best`] that stops at `deadline`; the flag says whether the search finished
/// (when it did not, the candidate is the best found so far).
pub fn enumerate_best_until(pb: &Problem, deadline: Option<Instant>) -> (Option<Candidate>, bool) {
    let prefill = side_options(pb, true);
    let decode = side_options(pb, false);
    let mut best: Option<Candidate> = None;
    let mut steps: u32 = 0;
    for po in prefill.iter().filter(|o| o.usable()) {
        for dop in decode.iter().filter(|o| o.usable()) {
            let (p, d, a, b) = (po.tp, dop.tp, po.units, dop.units);
            if p + d > pb.gpus || !pair_ok(&pb.shape, p, d, pb.profile, pb.max_acks) {
                continue;
            }
            for np in 1..=(pb.gpus - d) / p {
                steps = steps.wrapping_add(1);
                if steps % 4096 == 0 && deadline.is_some_and(|t| Instant::now() >= t) {
                    return (best, false);
                }
                let nd_max = (pb.gpus - p * np) / d;
                let nd = nd_max.min(ceil_div(np.saturating_mul(a), b)).max(1);
                let value = np.saturating_mul(a).min(nd.saturating_mul(b));
                let c = Candidate {
                    prefill_tp: p,
                    prefill_instances: np,
                    decode_tp: d,
                    decode_instances: nd,
                    value,
                    gpus_used: p * np + d * nd,
                };
                if best.is_none_or(|b| c.better_than(&b)) {
                    best = Some(c);
                }
            }
        }
    }
    (best, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::profile;
    use crate::perf::tests::{consts, h100, llama70, workload};

    fn problem(gpus: i64) -> Problem<'static> {
        Problem {
            model: llama70(),
            shape: Shape {
                num_attention_heads: 64,
                num_kv_heads: 8,
                is_mla: false,
            },
            gpu: h100(),
            constants: consts(),
            workload: workload(),
            profile: profile("moriio").unwrap(),
            gpus,
            max_tp: 8,
            max_acks: None,
            gpu_memory_utilization: 0.9,
        }
    }

    #[test]
    fn best_counts_matches_brute_force() {
        for gpus in 1..120 {
            for (p, d) in [(1, 1), (2, 4), (4, 2), (8, 8), (3, 5)] {
                for (a, b) in [(1, 1), (7, 3), (3, 7), (1000, 999), (5, 50)] {
                    let fast = best_counts(p, a, d, b, gpus);
                    let mut brute: Option<Candidate> = None;
                    if p + d <= gpus {
                        for np in 1..=gpus {
                            for nd in 1..=gpus {
                                if p * np + d * nd > gpus {
                                    continue;
                                }
                                let c = Candidate {
                                    prefill_tp: p,
                                    prefill_instances: np,
                                    decode_tp: d,
                                    decode_instances: nd,
                                    value: (np * a).min(nd * b),
                                    gpus_used: p * np + d * nd,
                                };
                                if brute.is_none_or(|x| c.better_than(&x)) {
                                    brute = Some(c);
                                }
                            }
                        }
                    }
                    assert_eq!(fast, brute, "gpus={gpus} p={p} d={d} a={a} b={b}");
                }
            }
        }
    }

    #[test]
    fn table_best_equals_oracle() {
        for gpus in [1, 2, 4, 7, 8, 16, 24, 100, 256, 4096] {
            let pb = problem(gpus);
            assert_eq!(
                best_of(&build_table(&pb)),
                enumerate_best(&pb),
                "gpus={gpus}"
            );
        }
    }

    #[test]
    fn llama70_needs_several_h100s() {
        assert!(enumerate_best(&problem(1)).is_none());
        let c = enumerate_best(&problem(24)).unwrap();
        assert!(c.gpus_used <= 24 && c.prefill_tp >= 2 && c.decode_tp >= 2);
    }
}
