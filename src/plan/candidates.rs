//! Candidate rows: every (model, role, GPU type, layout) with its rules, memory, SLO and
//! capacity, and the pairs the planners choose from: (prefill row, decode row) pairs the
//! connector accepts, and aggregated rows (an aggregated instance does both phases; its
//! "pair" is the row with itself). This is the one place the planners call the performance
//! model; capacities are scaled to integers here, once, and every later stage (order,
//! oracle, relaxation, CP-SAT) reads these integers.
//!
//! An aggregated row's capacity is vLLM serving prefill and decode on the same GPUs
//! ([`crate::perf::serving`], chunked prompts mixed into decode steps) at the highest
//! concurrency whose steady-state TTFT and TPOT meet the SLOs.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::check::{load_ok, Shape};
use crate::connector::ConnectorProfile;
use crate::layout::Layout;
use crate::layout_rules;
use crate::perf::serving::{serving, Engine, ServingWorkload};
use crate::perf::{
    decode_point_layout, max_sequences, prefill_point_layout, weights_fit_layout, Constants,
    GpuPerf, ModelPerf, Workload,
};

use super::cluster::{Cluster, Item, TooLarge};
// `Role` is the planner input's (a running side names one); rows use it from there.
pub use super::scenario::Role;
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
    pub layout: Layout,
    /// Passes the model-load rules (head divisibility; EP, PP for other layouts).
    pub loads: bool,
    /// Weights + runtime reserve fit in `gpu_memory_utilization` of one GPU.
    pub fits_weights: bool,
    /// Prefill: the prompt's KV fits. Decode / aggregated: at least one full sequence
    /// (isl + osl) fits.
    pub fits_kv: bool,
    /// TTFT (prefill) or TPOT at the operating batch (decode and aggregated; batch 1 when
    /// none meets the SLO).
    pub latency: f64,
    /// TTFT at the operating point (prefill: = latency; aggregated: the steady-state TTFT
    /// at the operating concurrency; decode: 0, the prefill side's).
    pub ttft: f64,
    pub meets_slo: bool,
    /// Decode batch at the operating point (prefill: 1; aggregated: the mean running batch
    /// of the instance, all DP ranks).
    pub batch: i64,
    pub max_batch: i64,
    /// Aggregated: the concurrency (clients in flight per instance) at the operating point.
    pub concurrency: i64,
    pub requests_per_s: f64,
    pub units: i64,
}

impl SideOption {
    pub fn usable(&self) -> bool {
        self.loads && self.fits_weights && self.fits_kv && self.meets_slo && self.units > 0
    }
}

/// One side's operating point for a TP-only layout (the sweep's and `side_option`'s form).
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
    let layout = Layout::tp(tp);
    let role = if prefill { Role::Prefill } else { Role::Decode };
    let mut o = operating_point(m, g, c, w, util, &layout, role, DEFAULT_BATCHED_TOKENS);
    o.loads = load_ok(shape, tp);
    o
}

/// vLLM's online-serving `max_num_batched_tokens` on large GPUs.
pub const DEFAULT_BATCHED_TOKENS: f64 = 8192.0;

/// One row's operating point: the single call into the performance model (load rules are
/// the caller's: `loads` is true here).
#[allow(clippy::too_many_arguments)]
pub fn operating_point(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    w: &Workload,
    util: f64,
    layout: &Layout,
    role: Role,
    batched_tokens: f64,
) -> SideOption {
    let fits_weights = weights_fit_layout(m, g, c, layout, util);
    let base = SideOption {
        loads: true,
        fits_weights,
        ..unloadable(*layout)
    };
    match role {
        Role::Prefill => {
            let p = prefill_point_layout(m, g, c, layout, w, util);
            SideOption {
                fits_kv: p.fits,
                latency: p.ttft,
                ttft: p.ttft,
                meets_slo: w.ttft.is_none_or(|limit| p.ttft <= limit),
                batch: 1,
                max_batch: 1,
                requests_per_s: p.requests_per_s,
                units: to_units(p.requests_per_s),
                ..base
            }
        }
        Role::Decode => {
            let d = decode_point_layout(m, g, c, layout, w, util);
            SideOption {
                fits_kv: d.max_batch >= 1,
                latency: d.tpot,
                meets_slo: d.batch >= 1,
                batch: d.batch,
                max_batch: d.max_batch,
                requests_per_s: d.requests_per_s,
                units: to_units(d.requests_per_s),
                ..base
            }
        }
        Role::Aggregated => aggregated_point(m, g, c, w, util, layout, batched_tokens, base),
    }
}

/// The inputs of operating points besides the layout and role: one model, GPU type,
/// constants and workload.
#[derive(Clone, Copy, PartialEq)]
struct PointContext {
    m: ModelPerf,
    g: GpuPerf,
    c: Constants,
    w: Workload,
    util: f64,
    batched_tokens: f64,
}

/// Operating points already computed in this process (most recent contexts last). An
/// autoscaler re-plans the same model every tick, and a MoE model's 120 layouts cost
/// ~15 ms of performance-model calls per candidate build; the answer is a pure function of
/// its inputs, so it is computed once. Bounded: the oldest context goes past `MAX_CONTEXTS`.
static POINTS: Mutex<Vec<(PointContext, PointsOf)>> = Mutex::new(Vec::new());

/// One context's operating points by (layout, role).
type PointsOf = HashMap<(Layout, Role), SideOption>;
const MAX_CONTEXTS: usize = 64;

impl PointContext {
    /// [`operating_point`] of one layout and role in this context, memoised in [`POINTS`].
    fn cached_point(&self, layout: &Layout, role: Role) -> SideOption {
        let key = (*layout, role);
        if let Ok(points) = POINTS.lock() {
            if let Some((_, map)) = points.iter().rev().find(|(k, _)| k == self) {
                if let Some(found) = map.get(&key) {
                    return *found;
                }
            }
        }
        let (m, g, c, w) = (&self.m, &self.g, &self.c, &self.w);
        let point = operating_point(m, g, c, w, self.util, layout, role, self.batched_tokens);
        if let Ok(mut points) = POINTS.lock() {
            match points.iter().position(|(k, _)| k == self) {
                Some(i) => {
                    points[i].1.insert(key, point);
                }
                None => {
                    if points.len() >= MAX_CONTEXTS {
                        points.remove(0);
                    }
                    points.push((*self, HashMap::from([(key, point)])));
                }
            }
        }
        point
    }
}

/// An aggregated instance at the SLOs: the highest concurrency (clients in flight, a closed
/// loop in steady state) whose TTFT and TPOT meet them, searched by bisection (both grow
/// with the concurrency), up to what the KV cache and `max_num_seqs` hold.
#[allow(clippy::too_many_arguments)]
fn aggregated_point(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    w: &Workload,
    util: f64,
    layout: &Layout,
    batched_tokens: f64,
    base: SideOption,
) -> SideOption {
    if !base.fits_weights {
        return base;
    }
    let lanes = (layout.dp.max(1) * layout.pp.max(1)) as f64;
    let per_rank = max_sequences(m, g, c, layout, util, w.isl + w.osl / 2.0)
        .min(c.max_num_seqs * layout.pp.max(1) as f64);
    let fits_kv = max_sequences(m, g, c, layout, util, w.isl + w.osl) >= 1.0;
    let most = (per_rank * layout.dp.max(1) as f64).floor();
    if !fits_kv || most < 1.0 {
        return SideOption { fits_kv, ..base };
    }
    let work = |clients: f64| ServingWorkload {
        isl: w.isl,
        osl: w.osl,
        concurrency: Some(clients),
        num_prompts: f64::INFINITY,
        max_num_seqs: c.max_num_seqs,
        max_num_batched_tokens: batched_tokens,
        gpu_memory_utilization: util,
        engine: Engine::Vllm,
        scheduler_recv_interval: 1.0,
    };
    let at = |clients: i64| serving(m, g, c, layout, &work(clients as f64));
    let meets = |clients: i64| {
        at(clients).is_some_and(|p| {
            w.ttft.is_none_or(|limit| p.ttft_steady <= limit)
                && w.tpot.is_none_or(|limit| p.tpot <= limit)
        })
    };
    let top = (most as i64).max(1);
    let lo_ok = meets(1);
    let best = if !lo_ok {
        0
    } else {
        // Invariant: meets(lo). Concurrency in steps that keep every DP rank equally loaded
        // is not required: the model is mean-value per rank.
        let (mut lo, mut hi) = (1_i64, top);
        if meets(hi) {
            lo = hi;
        }
        while lo < hi {
            let mid = lo + (hi - lo + 1) / 2;
            if meets(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    };
    let shown = at(best.max(1));
    let Some(p) = shown else {
        return SideOption { fits_kv, ..base };
    };
    let rps = if best > 0 { p.requests_per_s } else { 0.0 };
    let _ = lanes;
    SideOption {
        fits_kv,
        latency: p.tpot,
        ttft: p.ttft_steady,
        meets_slo: best > 0,
        batch: (p.batch * layout.dp.max(1) as f64).round() as i64,
        max_batch: top,
        concurrency: best,
        requests_per_s: rps,
        units: to_units(rps),
        ..base
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

/// A (prefill row, decode row) pair of one model; an aggregated row paired with itself is
/// an aggregated plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pair {
    pub model: usize,
    pub prefill: usize,
    pub decode: usize,
}

impl Pair {
    /// An aggregated plan: one row doing both phases.
    pub fn is_aggregated(&self) -> bool {
        self.prefill == self.decode
    }
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
/// decode on another): the connector object's `mixes_vendor`; no connector crosses vendors.
pub fn mixing_vendor(profile: &ConnectorProfile) -> Option<Vendor> {
    profile.object().mixes_vendor.and_then(Vendor::parse)
}

/// Whether the connector's worker starts on GPUs of `vendor` (`check::gpu_violation` says
/// why not).
pub fn runs_on(profile: &ConnectorProfile, vendor: Vendor) -> bool {
    profile.object().runs_on(vendor.name())
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

/// The most node fill patterns a planner works with. CP-SAT holds one variable (and its
/// constraint terms) per pattern, about 1.3 kB each measured, and the placement steps list
/// them all: at this bound a plan stays under ~100 MB, where 256-GPU nodes with TP 1..32
/// (~500,000 patterns) took 650 MB and 10 s and 512-GPU nodes ran to 12-18 GB.
pub const MAX_PATTERNS: u64 = 50_000;

impl Candidates {
    /// Why these candidates are too many to plan with (more than [`MAX_PATTERNS`] ways to
    /// fill the nodes of a GPU type), naming the node size that would be accepted; None
    /// when they are within it. Counted without listing a pattern.
    pub fn too_many_patterns(&self) -> Option<String> {
        for (t, sizes) in self.sizes.iter().enumerate() {
            let n = self.cluster.pattern_count(t, sizes);
            if n <= MAX_PATTERNS {
                continue;
            }
            let g = &self.scenario.gpu_types[t];
            let within = Cluster::largest_node_within(g.node_size, sizes, MAX_PATTERNS);
            return Some(format!(
                "gpus_per_node={size}: instances of {sizes:?} GPUs fill a {size}-GPU {name} \
                 node in {n} ways, more than the {MAX_PATTERNS} pdtp plans with (its memory \
                 bound, ~100 MB); use gpus_per_node of at most {within}, or fewer layouts or \
                 a lower max_tp (fewer instance sizes)",
                size = g.node_size,
                name = g.name,
            ));
        }
        None
    }

    pub fn build(sc: Scenario) -> Candidates {
        let cluster = Cluster::new(&sc);
        let mut rows: Vec<Row> = Vec::new();
        let roles: Vec<Role> = [
            (sc.mode.disaggregated(), Role::Prefill),
            (sc.mode.disaggregated(), Role::Decode),
            (sc.mode.aggregated(), Role::Aggregated),
        ]
        .into_iter()
        .filter_map(|(on, r)| on.then_some(r))
        .collect();
        // Each model's rows, as a range of `rows` (a model's rows are contiguous).
        let mut model_rows: Vec<std::ops::Range<usize>> = Vec::with_capacity(sc.models.len());
        // Models whose performance inputs repeat an earlier model's (a fleet lists one model
        // under several names) share its operating points: only the demand differs.
        let mut distinct: Vec<usize> = Vec::new();
        let mut twin_of: Vec<Option<usize>> = vec![None; sc.models.len()];
        for (mi, m) in sc.models.iter().enumerate() {
            let start = rows.len();
            let twin = distinct.iter().copied().find(|&j| {
                let o = &sc.models[j];
                o.perf == m.perf
                    && o.workload == m.workload
                    && o.gpu_perf == m.gpu_perf
                    && o.supports_pp == m.supports_pp
                    && o.memory_fractions == m.memory_fractions
            });
            twin_of[mi] = twin;
            if let Some(j) = twin {
                for k in model_rows[j].clone() {
                    let mut row = rows[k].clone();
                    row.model = mi;
                    row.need = match (row.item, sc.objective.serves_demand()) {
                        (Some(it), true) => {
                            instances_for(m.demand_rps, row.side.requests_per_s, cluster.most(it))
                        }
                        _ => None,
                    };
                    rows.push(row);
                }
                model_rows.push(start..rows.len());
                continue;
            }
            distinct.push(mi);
            let lm = m.layout_model();
            for (t, gt) in sc.gpu_types.iter().enumerate() {
                let ctx = PointContext {
                    m: m.perf,
                    g: m.gpu_perf[t],
                    c: gt.constants,
                    w: m.workload,
                    util: sc.gpu_memory_utilization,
                    batched_tokens: gt.max_num_batched_tokens,
                };
                let space = super::layouts::layouts(&sc, m, t);
                for &role in &roles {
                    for &layout in &space {
                        let loads = layout_rules::loads(&lm, &layout);
                        // The engine's fraction for this kind of instance (SGLang's by layout
                        // and role), else the scenario's.
                        let ctx = PointContext {
                            util: m.util_for(t, &layout, role, ctx.util),
                            ..ctx
                        };
                        let mut side = if loads || role != Role::Aggregated {
                            ctx.cached_point(&layout, role)
                        } else {
                            unloadable(layout)
                        };
                        side.loads = loads;
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
            model_rows.push(start..rows.len());
        }
        let unit_scale = fleet_scale(&sc, &cluster, &mut rows);
        let mixing = mixing_vendor(sc.connector);
        // Per GPU type: whether the connector's worker starts there (MoRIIO off AMD). Asked
        // once per type, not per pair (each ask resolves the connector by name: it was a
        // third of building qwen3-30b-a3b's 1,600 pairs).
        let starts: Vec<bool> = sc
            .gpu_types
            .iter()
            .map(|g| runs_on(sc.connector, g.vendor))
            .collect();
        let mut pairs = Vec::new();
        let mut rejected = Vec::new();
        // Each model's pairs and rejected pairs, as ranges (pushed model by model).
        let mut model_pairs: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> =
            Vec::with_capacity(sc.models.len());
        for (mi, span) in model_rows.iter().enumerate() {
            let (p0, r0) = (pairs.len(), rejected.len());
            if let Some(j) = twin_of[mi] {
                // A twin's rows mirror model j's: so do its pairs, shifted.
                let shift = |x: usize| x - model_rows[j].start + span.start;
                let moved = |q: &Pair| Pair {
                    model: mi,
                    prefill: shift(q.prefill),
                    decode: shift(q.decode),
                };
                let (pj, rj) = model_pairs[j].clone();
                let copied: Vec<Pair> = pairs[pj].iter().map(moved).collect();
                pairs.extend(copied);
                let copied: Vec<Pair> = rejected[rj].iter().map(moved).collect();
                rejected.extend(copied);
                model_pairs.push((p0..pairs.len(), r0..rejected.len()));
                continue;
            }
            for pi in span.clone() {
                let p = &rows[pi];
                if p.role != Role::Prefill || !p.usable() {
                    continue;
                }
                let lm = sc.models[p.model].layout_model();
                for di in model_rows[p.model].clone() {
                    let d = &rows[di];
                    if d.role != Role::Decode || !d.usable() {
                        continue;
                    }
                    let (vp, vd) = (
                        sc.gpu_types[p.gpu_type].vendor,
                        sc.gpu_types[d.gpu_type].vendor,
                    );
                    if p.gpu_type != d.gpu_type && !(vp == vd && mixing == Some(vp)) {
                        continue;
                    }
                    // A connector whose worker cannot start on a side's GPUs (MoRIIO off AMD).
                    if !starts[p.gpu_type] || !starts[d.gpu_type] {
                        continue;
                    }
                    let (a, b) = (p.item.unwrap(), d.item.unwrap());
                    let together = cluster.one_of_each_fits(a, b);
                    if !together {
                        continue;
                    }
                    let pair = Pair {
                        model: p.model,
                        prefill: pi,
                        decode: di,
                    };
                    if layout_rules::pair_ok(&lm, &p.layout, &d.layout, sc.connector, sc.max_acks) {
                        pairs.push(pair);
                    } else {
                        rejected.push(pair);
                    }
                }
            }
            model_pairs.push((p0..pairs.len(), r0..rejected.len()));
        }
        // Aggregated plans: a usable aggregated row paired with itself.
        for (i, r) in rows.iter().enumerate() {
            if r.role == Role::Aggregated && r.usable() {
                pairs.push(Pair {
                    model: r.model,
                    prefill: i,
                    decode: i,
                });
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
        self.most_served_by(self.pairs.iter().filter(|p| p.model == model))
    }

    /// [`Candidates::most_served`] over the given pairs (one model's).
    fn most_served_by<'a>(&'a self, pairs: impl Iterator<Item = &'a Pair>) -> i64 {
        use super::cluster::{most_served, room, Fit};
        let cl = &self.cluster;
        pairs
            .filter_map(|p| {
                let (r, d) = (&self.rows[p.prefill], &self.rows[p.decode]);
                let (a, b) = (r.item?, d.item?);
                if p.is_aggregated() {
                    return Some(r.units.saturating_mul(cl.most(a)));
                }
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
        side_bound(&self.rows, &self.cluster, model)
    }
}

/// The most a model's plan can serve (capacity units): the best prefill and the best decode
/// row each given the whole pool, or the best aggregated row given it (a plan is one or the
/// other).
fn side_bound(rows: &[Row], cluster: &Cluster, model: usize) -> i64 {
    let side = |role: Role| {
        rows.iter()
            .filter(|r| r.model == model && r.role == role && r.usable())
            .map(|r| {
                r.units
                    .saturating_mul(r.item.map_or(0, |it| cluster.most(it)))
            })
            .max()
            .unwrap_or(0)
    };
    side(Role::Prefill)
        .min(side(Role::Decode))
        .max(side(Role::Aggregated))
}

/// A row whose layout does not load: no operating point.
fn unloadable(layout: Layout) -> SideOption {
    SideOption {
        tp: layout.tp,
        layout,
        loads: false,
        fits_weights: false,
        fits_kv: false,
        latency: 0.0,
        ttft: 0.0,
        meets_slo: false,
        batch: 0,
        max_batch: 0,
        concurrency: 0,
        requests_per_s: 0.0,
        units: 0,
    }
}

/// Fleet models: a unit scale per model (a power of two keeping the largest served value
/// below FLEET_UNITS_MAX). Other planners keep micro-requests/s.
fn fleet_scale(sc: &Scenario, cluster: &Cluster, rows: &mut [Row]) -> Vec<i64> {
    let mut scale = vec![1i64; sc.models.len()];
    if !sc.objective.is_fleet() {
        return scale;
    }
    // A model's rows are contiguous: walk them model by model.
    let mut start = 0;
    while start < rows.len() {
        let m = rows[start].model;
        let end = start + rows[start..].iter().take_while(|r| r.model == m).count();
        let g = &mut scale[m];
        let cap = side_bound(&rows[start..end], cluster, m);
        while cap / *g > FLEET_UNITS_MAX {
            *g *= 2;
        }
        for r in &mut rows[start..end] {
            r.units = r.side.units / *g;
        }
        start = end;
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
    let mut by_model: Vec<Vec<Pair>> = vec![Vec::new(); sc.models.len()];
    for p in &c.pairs {
        by_model[p.model].push(*p);
    }
    sc.models
        .iter()
        .enumerate()
        .map(|(m, spec)| {
            if spec.demand_rps <= 0.0 {
                return 0;
            }
            let want = (spec.demand_rps * CAPACITY_SCALE / c.unit_scale[m] as f64).ceil();
            let most = c.most_served_by(by_model[m].iter());
            let ceiling = (most.max(1) as f64) * FRACTION_SCALE as f64;
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
