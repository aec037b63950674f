//! Candidate rows: every (model, role, GPU type, layout) with its rules, memory, SLO and
//! capacity, and the (prefill row, decode row) pairs the connector accepts. This is the one
//! place the planners call the performance model; capacities are scaled to integers here,
//! once, and every later stage (order, oracle, relaxation, CP-SAT) reads these integers.
//!
//! A row is one *kind* of instance. Today a layout is a TP size; pipeline, data-parallel
//! attention and expert parallel layouts, and aggregated instances (a third role), are new
//! rows of the same shape.

use crate::check::{load_ok, pair_ok, Shape};
use crate::connector::ConnectorProfile;
use crate::layout::Layout;
use crate::perf::{
    decode_point, prefill_point, weights_fit, Constants, GpuPerf, ModelPerf, Workload,
};

use super::cluster::{Cluster, Item, TooLarge};
use super::scenario::{Scenario, Vendor};

/// Capacities are compared in integer micro-requests per second.
pub const CAPACITY_SCALE: f64 = 1e6;

/// Served fractions of a shared pool are decided in steps of 1/FRACTION_SCALE.
pub const FRACTION_SCALE: i64 = 10_000;

/// A fleet model's capacities are divided by a power of two so that the largest served
/// value stays below this (keeps `fraction × demand` far from i64 overflow in CP-SAT).
const FLEET_UNITS_MAX: i64 = 1 << 35;

pub fn to_units(requests_per_s: f64) -> i64 {
    if requests_per_s.is_finite() && requests_per_s > 0.0 {
        (requests_per_s * CAPACITY_SCALE).floor().min(1e15) as i64
    } else {
        0
    }
}

/// One instance kind on one side, with every reason it may be unusable.
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

/// One side's operating point: the single call into the performance model.
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

/// Which side of the P/D split a row serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Prefill,
    Decode,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

/// One instance kind: a model's role on one GPU type with one layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub model: usize,
    pub role: Role,
    pub gpu_type: usize,
    pub layout: Layout,
    pub side: SideOption,
    /// What an instance occupies on the nodes (None: no node, or set of whole free nodes,
    /// holds one).
    pub item: Option<Item>,
    /// Capacity per instance in the optimisation's integer units (fleet models: divided by
    /// the model's unit scale).
    pub units: i64,
    /// Instances that serve the model's demand alone (planners with a demand): the fewest
    /// `n` with `n × requests_per_s ≥ demand`, in floating point exactly as a plan reports
    /// capacity. None: more than the pool holds.
    pub need: Option<i64>,
}

impl Row {
    pub fn gpus(&self) -> i64 {
        self.layout.gpus()
    }

    pub fn usable(&self) -> bool {
        self.side.usable() && self.item.is_some()
    }
}

/// A (prefill row, decode row) pair of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pair {
    pub model: usize,
    pub prefill: usize,
    pub decode: usize,
}

/// Everything the planners choose from.
#[derive(Debug, Clone)]
pub struct Candidates {
    pub scenario: Scenario,
    pub rows: Vec<Row>,
    /// Pairs the connector accepts, both rows usable, one of each placeable together.
    pub pairs: Vec<Pair>,
    /// Pairs of usable rows that the connector's pair rules refuse (what a planner blind
    /// to them would consider).
    pub rejected: Vec<Pair>,
    pub cluster: Cluster,
    /// Per GPU type: the distinct item sizes of usable rows (the node patterns' alphabet).
    pub sizes: Vec<Vec<i64>>,
    /// Per model: capacities are in units of this many micro-requests/s.
    pub unit_scale: Vec<i64>,
    /// Per model: demand in capacity units (fleet fractions; capped at FRACTION_SCALE ×
    /// the most the pool could serve it, where a fraction step is below reach anyway).
    pub demand_units: Vec<i64>,
}

/// The vendor whose GPU types a connector may pair with each other (prefill on one type,
/// decode on another): MoRIIO moves KV between AMD GPUs, NIXL between NVIDIA GPUs; no
/// connector crosses vendors.
pub fn mixing_vendor(profile: &ConnectorProfile) -> Option<Vendor> {
    match profile.kv_connector() {
        "MoRIIOConnector" => Some(Vendor::Amd),
        "NixlConnector" => Some(Vendor::Nvidia),
        _ => None,
    }
}

/// The fewest instances of capacity `rps` whose sum reaches `demand` (floating point, as a
/// plan reports capacity); None when that is more than `limit`.
pub fn instances_for(demand: f64, rps: f64, limit: i64) -> Option<i64> {
    if rps.is_nan() || rps <= 0.0 || limit < 1 {
        return None;
    }
    if demand <= 0.0 {
        return Some(1);
    }
    let estimate = (demand / rps).ceil();
    if !estimate.is_finite() || estimate > limit as f64 + 2.0 {
        return None;
    }
    // The estimate is within one or two of the answer: two short loops settle it exactly.
    let mut n = (estimate as i64).max(1);
    while (n as f64) * rps < demand {
        n += 1;
    }
    while n > 1 && ((n - 1) as f64) * rps >= demand {
        n -= 1;
    }
    (n <= limit).then_some(n)
}

impl Candidates {
    pub fn build(sc: Scenario) -> Candidates {
        let cluster = Cluster::new(&sc);
        let mut rows = Vec::new();
        for (mi, m) in sc.models.iter().enumerate() {
            let shape = m.perf.shape();
            for (t, gt) in sc.gpu_types.iter().enumerate() {
                let g = &m.gpu_perf[t];
                for role in [Role::Prefill, Role::Decode] {
                    for tp in 1..=sc.tp_bound(t) {
                        let layout = Layout::tp(tp);
                        let side = side_option(
                            &m.perf,
                            &shape,
                            g,
                            &gt.constants,
                            &m.workload,
                            sc.gpu_memory_utilization,
                            tp,
                            role == Role::Prefill,
                        );
                        let item = cluster.item(t, layout.gpus());
                        let need = match (item, sc.objective.serves_demand()) {
                            (Some(it), true) => {
                                instances_for(m.demand_rps, side.requests_per_s, cluster.most(it))
                            }
                            _ => None,
                        };
                        rows.push(Row {
                            model: mi,
                            role,
                            gpu_type: t,
                            layout,
                            side,
                            item,
                            units: side.units,
                            need,
                        });
                    }
                }
            }
        }
        let unit_scale = fleet_scale(&sc, &cluster, &mut rows);
        let mixing = mixing_vendor(sc.connector);
        let mut pairs = Vec::new();
        let mut rejected = Vec::new();
        for (pi, p) in rows.iter().enumerate() {
            if p.role != Role::Prefill || !p.usable() {
                continue;
            }
            let shape = sc.models[p.model].perf.shape();
            for (di, d) in rows.iter().enumerate() {
                if d.role != Role::Decode || d.model != p.model || !d.usable() {
                    continue;
                }
                let (vp, vd) = (
                    sc.gpu_types[p.gpu_type].vendor,
                    sc.gpu_types[d.gpu_type].vendor,
                );
                if p.gpu_type != d.gpu_type && !(vp == vd && mixing == Some(vp)) {
                    continue;
                }
                let (a, b) = (p.item.unwrap(), d.item.unwrap());
                let together = match cluster.most_beside(a, 1, b, true) {
                    Ok(room) => room.is_some_and(|n| n >= 1),
                    Err(TooLarge) => cluster
                        .most_beside(a, 1, b, false)
                        .ok()
                        .flatten()
                        .is_some_and(|n| n >= 1),
                };
                if !together {
                    continue;
                }
                let pair = Pair {
                    model: p.model,
                    prefill: pi,
                    decode: di,
                };
                if pair_ok(&shape, p.layout.tp, d.layout.tp, sc.connector, sc.max_acks) {
                    pairs.push(pair);
                } else {
                    rejected.push(pair);
                }
            }
        }
        let mut sizes: Vec<Vec<i64>> = vec![Vec::new(); sc.gpu_types.len()];
        for r in rows.iter().filter(|r| r.usable()) {
            let it = r.item.unwrap();
            sizes[it.gpu_type].push(it.piece);
        }
        for s in &mut sizes {
            s.sort_unstable();
            s.dedup();
        }
        let mut c = Candidates {
            scenario: sc,
            rows,
            pairs,
            rejected,
            cluster,
            sizes,
            unit_scale,
            demand_units: Vec::new(),
        };
        c.demand_units = fleet_demands(&c);
        c
    }

    /// The most capacity units one model can be served with the whole pool to itself
    /// (exact where the node search allows, else what a relaxed plan that fits serves): a
    /// value some plan reaches.
    pub fn most_served(&self, model: usize) -> i64 {
        use super::cluster::{most_served, room, Fit};
        let cl = &self.cluster;
        self.pairs
            .iter()
            .filter(|p| p.model == model)
            .filter_map(|p| {
                let (r, d) = (&self.rows[p.prefill], &self.rows[p.decode]);
                let (a, b) = (r.item?, d.item?);
                let exact = most_served(r.units, d.units, cl.most(a), &|np| {
                    room(cl, a, np, b, Fit::Exact)
                });
                match exact {
                    Ok(x) => x,
                    Err(TooLarge) => most_served(r.units, d.units, cl.most(a), &|np| {
                        room(cl, a, np, b, Fit::Relaxed)
                    })
                    .ok()
                    .flatten()
                    .filter(|&(np, nd, _)| cl.fits(&[(a, np), (b, nd)]) == Ok(true)),
                }
                .map(|x| x.2)
            })
            .max()
            .unwrap_or(0)
    }

    /// The most instances of `row` the pool holds.
    pub fn most(&self, row: usize) -> i64 {
        self.rows[row].item.map_or(0, |it| self.cluster.most(it))
    }

    /// The most capacity units a model could be served with the whole pool (an upper
    /// bound: the best prefill and the best decode row each given every GPU).
    pub fn served_bound(&self, model: usize) -> i64 {
        let side = |role: Role| {
            self.rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.model == model && r.role == role && r.usable())
                .map(|(i, r)| r.units.saturating_mul(self.most(i)))
                .max()
                .unwrap_or(0)
        };
        side(Role::Prefill).min(side(Role::Decode))
    }
}

/// Fleet models: a unit scale per model (a power of two keeping the largest served value
/// below FLEET_UNITS_MAX). Other planners keep micro-requests/s.
fn fleet_scale(sc: &Scenario, cluster: &Cluster, rows: &mut [Row]) -> Vec<i64> {
    let mut scale = vec![1i64; sc.models.len()];
    if !sc.objective.is_fleet() {
        return scale;
    }
    for (m, g) in scale.iter_mut().enumerate() {
        let bound = |role: Role| {
            rows.iter()
                .filter(|r| r.model == m && r.role == role && r.usable())
                .map(|r| {
                    r.units
                        .saturating_mul(r.item.map_or(0, |it| cluster.most(it)))
                })
                .max()
                .unwrap_or(0)
        };
        let cap = bound(Role::Prefill).min(bound(Role::Decode));
        while cap / *g > FLEET_UNITS_MAX {
            *g *= 2;
        }
        for r in rows.iter_mut().filter(|r| r.model == m) {
            r.units = r.side.units / *g;
        }
    }
    scale
}

/// Fleet models: each demand in its model's capacity units, rounded up. A demand beyond
/// FRACTION_SCALE times the most the whole pool serves that model is below one fraction
/// step at any allocation: it counts as exactly that much (the whole pool then reaches one
/// step), so such a model is still served as well as the pool allows.
fn fleet_demands(c: &Candidates) -> Vec<i64> {
    let sc = &c.scenario;
    if !sc.objective.is_fleet() {
        return vec![0; sc.models.len()];
    }
    sc.models
        .iter()
        .enumerate()
        .map(|(m, spec)| {
            if spec.demand_rps <= 0.0 {
                return 0;
            }
            let want = (spec.demand_rps * CAPACITY_SCALE / c.unit_scale[m] as f64).ceil();
            let ceiling = (c.most_served(m).max(1) as f64) * FRACTION_SCALE as f64;
            want.clamp(1.0, ceiling) as i64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_for_is_exact_and_bounded() {
        assert_eq!(instances_for(0.0, 3.0, 10), Some(1));
        assert_eq!(instances_for(6.0, 3.0, 10), Some(2));
        assert_eq!(instances_for(6.000001, 3.0, 10), Some(3));
        assert_eq!(instances_for(1e30, 3.0, 1 << 20), None);
        assert_eq!(instances_for(1e23, 3.0, 1 << 20), None);
        assert_eq!(instances_for(31.0, 3.0, 10), None);
        assert_eq!(instances_for(5.0, 0.0, 10), None);
        // n · rps in floating point, as a plan computes it.
        let rps = 0.1;
        let n = instances_for(0.3, rps, 100).unwrap();
        assert!((n as f64) * rps >= 0.3 && ((n - 1) as f64) * rps < 0.3);
    }
}
