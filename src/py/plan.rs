//! The planning core: a typed Scenario in, typed rows, stages, hints and plans out.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use std::sync::{Arc, OnceLock};

use crate::plan::{
    self, feasible, oracle, placement, prove, relax, rule_blind, Candidates, Choice, Families,
    GpuType, LayoutSpace, MemoryFractions, Mode, ModelSpec, MoveCost, NodeClass, Objective, Order,
    Pair, Role, Running, Scenario, Sense, Solution, Value,
};

use super::connector::*;
use super::convert::*;
use super::errors::*;
use super::perf::{ConstantInputs, GpuInputs, ModelInputs};

/// One model of a scenario: its performance inputs, workload, GPU numbers per pool type
/// (the peak depends on its weight dtype), demand and weight.
#[pyclass(frozen, module = "pdtp._core", name = "ModelSpec")]
pub(super) struct PyModelSpec {
    inner: ModelSpec,
}

#[pymethods]
impl PyModelSpec {
    #[new]
    #[pyo3(signature = (*, name, model, workload, gpus, demand_rps=0.0, weight=1.0, supports_pp=false, memory_fractions=None, sliding_window=false, output_groups=0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: String,
        model: &ModelInputs,
        workload: &Bound<'_, PyDict>,
        gpus: Vec<PyRef<'_, GpuInputs>>,
        demand_rps: f64,
        weight: f64,
        supports_pp: bool,
        memory_fractions: Option<FractionRows>,
        sliding_window: bool,
        output_groups: i64,
    ) -> PyResult<Self> {
        let memory_fractions: Vec<MemoryFractions> = memory_fractions
            .unwrap_or_default()
            .into_iter()
            .map(|per_type| {
                per_type
                    .into_iter()
                    .map(|((tp, dp, pp, role), f)| ((tp, dp, pp, role.0), f))
                    .collect()
            })
            .collect();
        let bad = memory_fractions
            .iter()
            .flat_map(|f| f.values())
            .any(|&f| !(f > 0.0 && f <= 1.0));
        if bad || (!memory_fractions.is_empty() && memory_fractions.len() != gpus.len()) {
            return Err(invalid(
                py,
                format!(
                    "model {name}: memory_fractions must hold one table per GPU type, each \
                     fraction in (0, 1]"
                ),
            ));
        }
        Ok(PyModelSpec {
            inner: ModelSpec {
                name,
                perf: model.0,
                workload: self::workload(workload)?,
                gpu_perf: gpus.iter().map(|g| g.0).collect(),
                demand_rps,
                weight,
                supports_pp,
                memory_fractions,
                sliding_window,
                output_groups,
            },
        })
    }

    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }
}

/// An engine's memory fraction per GPU type: `((tp, dp, pp, role), fraction)` rows.
type FractionRows = Vec<Vec<((i64, i64, i64, RoleArg), f64)>>;

/// One GPU type of a scenario's pool.
#[pyclass(frozen, module = "pdtp._core", name = "GpuType")]
pub(super) struct PyGpuType {
    inner: GpuType,
}

#[pymethods]
impl PyGpuType {
    #[new]
    #[pyo3(signature = (*, name, vendor, constants, node_size, price=0, max_num_batched_tokens=plan::candidates::DEFAULT_BATCHED_TOKENS))]
    fn new(
        py: Python<'_>,
        name: String,
        vendor: VendorArg,
        constants: &ConstantInputs,
        node_size: i64,
        price: i64,
        max_num_batched_tokens: f64,
    ) -> PyResult<Self> {
        if node_size < 1
            || price < 0
            || max_num_batched_tokens.is_nan()
            || max_num_batched_tokens < 1.0
        {
            return Err(invalid(
                py,
                format!(
                    "GPU type {name}: node_size must be >= 1, price >= 0 and \
                     max_num_batched_tokens >= 1"
                ),
            ));
        }
        Ok(PyGpuType {
            inner: GpuType {
                name,
                vendor: vendor.0,
                constants: constants.0,
                node_size,
                price,
                max_num_batched_tokens,
            },
        })
    }

    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }
}

/// The planning question, validated once: models, GPU pool (types and node classes),
/// connector ("name" or "name@X.Y.Z"), limits and objective.
#[pyclass(frozen, module = "pdtp._core", name = "Scenario")]
pub(super) struct PyScenario {
    pub(super) inner: Arc<Scenario>,
    connector_key: String,
}

/// A running side from Python: `(gpu type, role, (tp, pp, dp, ep), instances)`.
pub(super) type RunningArg = (Option<usize>, RoleArg, LayoutTuple, i64);

/// The layout space from Python: `None` (pdtp's default) or `(families, explicit)` with
/// families a list of names (`tp`, `ep`, `dp`, `pp`) and explicit layouts as tuples.
pub(super) type LayoutsArg = Option<(Option<Vec<FamilyArg>>, Vec<LayoutTuple>)>;

pub(super) fn layout_space(py: Python<'_>, arg: LayoutsArg) -> PyResult<LayoutSpace> {
    let Some((families, explicit)) = arg else {
        return Ok(LayoutSpace::default());
    };
    let families = match families {
        None => None,
        Some(names) => {
            let mut f = Families {
                tp: false,
                ep: false,
                dp: false,
                pp: false,
            };
            for n in names {
                match n.0 {
                    Family::Tp => f.tp = true,
                    Family::Ep => f.ep = true,
                    Family::Dp => f.dp = true,
                    Family::Pp => f.pp = true,
                }
            }
            Some(f)
        }
    };
    let explicit = explicit.into_iter().map(layout).collect::<Vec<_>>();
    if explicit.iter().any(|l| l.tp < 1 || l.pp < 1 || l.dp < 1) {
        return Err(invalid(py, "layout sizes must be >= 1".into()));
    }
    Ok(LayoutSpace { families, explicit })
}

#[pymethods]
impl PyScenario {
    #[new]
    #[pyo3(signature = (*, models, gpu_types, nodes, connector, objective, max_tp=None, max_acks=None, gpu_memory_utilization=0.9, move_cost=None, running=None, mode=ModeArg(Mode::Disaggregated, "disagg"), layouts=None))]
    #[pyo3(
        text_signature = "(*, models, gpu_types, nodes, connector, objective, max_tp=None, max_acks=None, gpu_memory_utilization=0.9, move_cost=None, running=None, mode='disagg', layouts=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        models: Vec<PyRef<'_, PyModelSpec>>,
        gpu_types: Vec<PyRef<'_, PyGpuType>>,
        nodes: Vec<(usize, i64, i64)>,
        connector: &str,
        objective: ObjectiveArg,
        max_tp: Option<i64>,
        max_acks: Option<i64>,
        gpu_memory_utilization: f64,
        move_cost: Option<(f64, f64, f64, f64)>,
        running: Option<(RunningArg, RunningArg)>,
        mode: ModeArg,
        layouts: LayoutsArg,
    ) -> PyResult<Self> {
        let types: Vec<GpuType> = gpu_types.iter().map(|g| g.inner.clone()).collect();
        let models: Vec<ModelSpec> = models.iter().map(|m| m.inner.clone()).collect();
        if models.is_empty() || types.is_empty() {
            return Err(invalid(
                py,
                "a scenario needs a model and a GPU type".into(),
            ));
        }
        if models.iter().any(|m| m.gpu_perf.len() != types.len()) {
            return Err(invalid(
                py,
                "each model needs GPU numbers for every GPU type".into(),
            ));
        }
        let mut classes = Vec::new();
        for (t, free, count) in nodes {
            let Some(g) = types.get(t) else {
                return Err(invalid(
                    py,
                    format!("node class of GPU type {t}: no such type"),
                ));
            };
            if !(0..=g.node_size).contains(&free) || count < 0 {
                return Err(invalid(
                    py,
                    format!(
                        "nodes of {}: free GPUs must be in [0, {}] and counts >= 0",
                        g.name, g.node_size
                    ),
                ));
            }
            classes.push(NodeClass {
                gpu_type: t,
                free,
                count,
            });
        }
        if !(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0) {
            return Err(invalid(
                py,
                "gpu_memory_utilization must be in (0, 1]".into(),
            ));
        }
        let run = |r: RunningArg| Running {
            gpu_type: r.0,
            role: r.1 .0,
            layout: layout(r.2),
            instances: r.3,
        };
        let layouts = layout_space(py, layouts)?;
        let objective = match objective.0 {
            ObjectiveKind::Throughput => Objective::Throughput,
            ObjectiveKind::TokensPerDollar => Objective::TokensPerDollar,
            ObjectiveKind::FewestGpus => Objective::FewestGpus,
            ObjectiveKind::Cost => Objective::Cost,
            ObjectiveKind::MaxMin => Objective::MaxMin,
            ObjectiveKind::Weighted => Objective::Weighted,
            ObjectiveKind::Moves => {
                let ((s, t, r, g), (p, d)) = match (move_cost, running) {
                    (Some(w), Some(run)) => (w, run),
                    _ => {
                        return Err(invalid(
                            py,
                            "objective moves needs move_cost and running".into(),
                        ))
                    }
                };
                Objective::Moves {
                    weights: MoveCost {
                        start: s,
                        stop: t,
                        restart: r,
                        gpu: g,
                    },
                    prefill: run(p),
                    decode: run(d),
                }
            }
        };
        Ok(PyScenario {
            inner: Arc::new(Scenario {
                models,
                gpu_types: types,
                nodes: classes,
                connector: profile(py, connector)?,
                max_tp,
                max_acks,
                gpu_memory_utilization,
                objective,
                mode: mode.0,
                layouts,
            }),
            connector_key: connector.to_string(),
        })
    }

    #[getter]
    fn connector(&self) -> &str {
        &self.connector_key
    }

    #[getter]
    fn total_gpus(&self) -> i64 {
        self.inner.total_gpus()
    }
}

/// One candidate row: a model's instance kind (role, GPU type, layout) and its numbers.
#[pyclass(frozen, module = "pdtp._core", name = "Row")]
pub(super) struct PyRow {
    #[pyo3(get)]
    model: usize,
    #[pyo3(get)]
    role: &'static str,
    #[pyo3(get)]
    gpu_type: usize,
    #[pyo3(get)]
    tp: i64,
    /// The layout as `(tp, pp, dp, ep)`.
    #[pyo3(get)]
    layout: LayoutTuple,
    #[pyo3(get)]
    gpus: i64,
    #[pyo3(get)]
    loads: bool,
    #[pyo3(get)]
    fits_weights: bool,
    #[pyo3(get)]
    fits_kv: bool,
    /// TTFT (prefill) or TPOT (decode and aggregated), seconds.
    #[pyo3(get)]
    latency_s: f64,
    /// TTFT at the operating point (prefill, aggregated), seconds; 0 for decode rows.
    #[pyo3(get)]
    ttft_s: f64,
    /// Aggregated rows: clients in flight per instance at the operating point.
    #[pyo3(get)]
    concurrency: i64,
    #[pyo3(get)]
    meets_slo: bool,
    #[pyo3(get)]
    batch: i64,
    #[pyo3(get)]
    max_batch: i64,
    #[pyo3(get)]
    requests_per_s: f64,
    /// Capacity per instance in the optimisation's integer units.
    #[pyo3(get)]
    units: i64,
    /// Whether some node (or set of whole free nodes) holds one instance.
    #[pyo3(get)]
    placeable: bool,
    /// Node item size and items per instance (more than one: whole nodes).
    #[pyo3(get)]
    piece: i64,
    #[pyo3(get)]
    pieces: i64,
    /// Most instances the pool holds (nothing else placed).
    #[pyo3(get)]
    most: i64,
    /// Instances serving the model's demand alone (planners with a demand).
    #[pyo3(get)]
    need: Option<i64>,
    #[pyo3(get)]
    usable: bool,
}

/// A (prefill row, decode row) pair of one model.
#[pyclass(frozen, module = "pdtp._core", name = "Pair")]
pub(super) struct PyPair {
    #[pyo3(get)]
    model: usize,
    #[pyo3(get)]
    prefill: usize,
    #[pyo3(get)]
    decode: usize,
}

/// One model's choice in a plan: its prefill and decode rows and instance counts.
#[pyclass(frozen, module = "pdtp._core", name = "Choice")]
#[derive(Clone, Copy)]
pub(super) struct PyChoice {
    #[pyo3(get)]
    prefill: usize,
    #[pyo3(get)]
    decode: usize,
    #[pyo3(get)]
    prefill_instances: i64,
    #[pyo3(get)]
    decode_instances: i64,
}

#[pymethods]
impl PyChoice {
    #[new]
    fn new(prefill: usize, decode: usize, prefill_instances: i64, decode_instances: i64) -> Self {
        PyChoice {
            prefill,
            decode,
            prefill_instances,
            decode_instances,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Choice(prefill={}, decode={}, prefill_instances={}, decode_instances={})",
            self.prefill, self.decode, self.prefill_instances, self.decode_instances
        )
    }

    fn __eq__(&self, other: &Self) -> bool {
        (
            self.prefill,
            self.decode,
            self.prefill_instances,
            self.decode_instances,
        ) == (
            other.prefill,
            other.decode,
            other.prefill_instances,
            other.decode_instances,
        )
    }
}

/// One CP-SAT stage: optimise Σ coef × term.
#[pyclass(frozen, module = "pdtp._core", name = "Stage")]
pub(super) struct PyStage {
    #[pyo3(get)]
    sense: &'static str,
    #[pyo3(get)]
    terms: Vec<(&'static str, i64)>,
}

/// A node fill pattern of one node class: (item size, how many).
#[pyclass(frozen, module = "pdtp._core", name = "Pattern")]
pub(super) struct PyPattern {
    #[pyo3(get)]
    class_index: usize,
    #[pyo3(get)]
    items: Vec<(i64, i64)>,
}

/// One instance's place: its node (the first of `nodes` when it spans whole nodes), GPU
/// type, model, role, index within its role and the devices it uses on each of its nodes
/// (a node's free devices counted from 0).
#[pyclass(frozen, module = "pdtp._core", name = "Placed")]
pub(super) struct PyPlaced {
    #[pyo3(get)]
    node: usize,
    #[pyo3(get)]
    nodes: Vec<usize>,
    #[pyo3(get)]
    gpu_type: usize,
    #[pyo3(get)]
    model: usize,
    #[pyo3(get)]
    role: &'static str,
    #[pyo3(get)]
    index: i64,
    #[pyo3(get)]
    devices: Vec<i64>,
}

impl From<placement::Placed> for PyPlaced {
    fn from(p: placement::Placed) -> Self {
        PyPlaced {
            node: p.node,
            nodes: p.nodes,
            gpu_type: p.gpu_type,
            model: p.model,
            role: p.role,
            index: p.index,
            devices: p.devices,
        }
    }
}

/// Re-plan data: weights as integers and each running side's row, instances and size.
#[pyclass(frozen, module = "pdtp._core", name = "Moves")]
pub(super) struct PyMoves {
    #[pyo3(get)]
    start: i64,
    #[pyo3(get)]
    stop: i64,
    #[pyo3(get)]
    restart: i64,
    #[pyo3(get)]
    gpu: i64,
    #[pyo3(get)]
    prefill: (Option<usize>, i64, i64),
    #[pyo3(get)]
    decode: (Option<usize>, i64, i64),
}

pub(super) type PySolution<'py> = Vec<Option<PyRef<'py, PyChoice>>>;
pub(super) type OutSolution = Vec<Option<PyChoice>>;

/// Everything a planner decides over, for one scenario: rows, pairs, node classes and
/// patterns, the order's stages, and the hint, bounds, oracle and placement behind them.
#[pyclass(frozen, module = "pdtp._core", name = "Candidates")]
pub(super) struct PyCandidates {
    c: Arc<Candidates>,
    order: Arc<Order>,
    /// The planner call's time limit (`candidates(time_limit_s=)`): the closed-form help
    /// (hint, rule-blind and other-mode comparisons) stops its node searches there.
    deadline: Option<std::time::Instant>,
    /// The closed forms' hint, best plan of each kind and pair bounds, from one pass over
    /// the pairs on first use (each planner call asks for several of them).
    forms: OnceLock<relax::ClosedForms>,
    /// The rows and pairs as Python objects, built on first use (frozen: shared safely).
    rows_py: OnceLock<Vec<Py<PyRow>>>,
    pairs_py: OnceLock<Vec<Py<PyPair>>>,
}

pub(super) fn out_solution(sol: &Solution) -> OutSolution {
    sol.iter()
        .map(|ch| {
            ch.map(|ch| PyChoice {
                prefill: ch.pair.prefill,
                decode: ch.pair.decode,
                prefill_instances: ch.prefill,
                decode_instances: ch.decode,
            })
        })
        .collect()
}

impl PyCandidates {
    fn build_rows(&self) -> Vec<PyRow> {
        let c = &self.c;
        c.rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let o = &r.side;
                PyRow {
                    model: r.model,
                    role: r.role.name(),
                    gpu_type: r.gpu_type,
                    tp: r.layout.tp,
                    layout: (r.layout.tp, r.layout.pp, r.layout.dp, r.layout.ep),
                    gpus: r.gpus(),
                    loads: o.loads,
                    fits_weights: o.fits_weights,
                    fits_kv: o.fits_kv,
                    latency_s: o.latency,
                    ttft_s: o.ttft,
                    concurrency: o.concurrency,
                    meets_slo: o.meets_slo,
                    batch: o.batch,
                    max_batch: o.max_batch,
                    requests_per_s: o.requests_per_s,
                    units: r.units,
                    placeable: r.item.is_some(),
                    piece: r.item.map_or(0, |it| it.piece),
                    pieces: r.item.map_or(0, |it| it.pieces),
                    most: c.most(i),
                    need: r.need,
                    usable: r.usable(),
                }
            })
            .collect()
    }

    fn forms(&self, py: Python<'_>) -> PyResult<&relax::ClosedForms> {
        if let Some(f) = self.forms.get() {
            return Ok(f);
        }
        let (c, o, until) = (self.c.clone(), self.order.clone(), self.deadline);
        let forms = released(py, move || {
            let _limit = plan::cluster::until(until);
            relax::closed_forms(&c, &o)
        })?;
        Ok(self.forms.get_or_init(|| forms))
    }

    fn solution(&self, py: Python<'_>, sol: PySolution<'_>) -> PyResult<Solution> {
        let c = &self.c;
        if sol.len() != c.scenario.models.len() {
            return Err(invalid(py, "a plan has one entry per model".into()));
        }
        sol.into_iter()
            .enumerate()
            .map(|(m, ch)| {
                let Some(ch) = ch else { return Ok(None) };
                let ok = |r: usize, role: Role| {
                    c.rows
                        .get(r)
                        .is_some_and(|row| row.model == m && row.role == role)
                };
                let disaggregated = ok(ch.prefill, Role::Prefill) && ok(ch.decode, Role::Decode);
                let aggregated = ch.prefill == ch.decode
                    && ok(ch.prefill, Role::Aggregated)
                    && ch.prefill_instances == ch.decode_instances;
                if !disaggregated && !aggregated {
                    return Err(invalid(
                        py,
                        format!(
                            "model {m}: rows do not match the model (a prefill and a decode \
                             row, or one aggregated row twice with equal counts)"
                        ),
                    ));
                }
                if ch.prefill_instances < 0 || ch.decode_instances < 0 {
                    return Err(invalid(py, "instance counts must be >= 0".into()));
                }
                Ok(Some(Choice {
                    pair: Pair {
                        model: m,
                        prefill: ch.prefill,
                        decode: ch.decode,
                    },
                    prefill: ch.prefill_instances,
                    decode: ch.decode_instances,
                }))
            })
            .collect()
    }
}

pub(super) fn value_obj(py: Python<'_>, v: &Value) -> PyResult<PyObject> {
    Ok(match v {
        Value::Int(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::Ratio(n, d) => (n, d).into_pyobject(py)?.into_any().unbind(),
    })
}

#[pymethods]
impl PyCandidates {
    #[getter]
    fn rows(&self, py: Python<'_>) -> PyResult<Vec<Py<PyRow>>> {
        if self.rows_py.get().is_none() {
            let built = self
                .build_rows()
                .into_iter()
                .map(|r| Py::new(py, r))
                .collect::<PyResult<Vec<_>>>()?;
            let _ = self.rows_py.set(built);
        }
        let rows = self.rows_py.get().expect("set above");
        Ok(rows.iter().map(|r| r.clone_ref(py)).collect())
    }

    #[getter]
    fn pairs(&self, py: Python<'_>) -> PyResult<Vec<Py<PyPair>>> {
        if self.pairs_py.get().is_none() {
            let built = self
                .c
                .pairs
                .iter()
                .map(|p| Py::new(py, py_pair(p)))
                .collect::<PyResult<Vec<_>>>()?;
            let _ = self.pairs_py.set(built);
        }
        let pairs = self.pairs_py.get().expect("set above");
        Ok(pairs.iter().map(|p| p.clone_ref(py)).collect())
    }

    /// How many pairs there are (without building them).
    #[getter]
    fn pair_count(&self) -> usize {
        self.c.pairs.len()
    }

    /// Pairs of usable rows the connector's pair rules refuse.
    #[getter]
    fn rejected(&self) -> Vec<PyPair> {
        self.c.rejected.iter().map(py_pair).collect()
    }

    /// Node classes as (GPU type, free GPUs, count).
    #[getter]
    fn classes(&self) -> Vec<(usize, i64, i64)> {
        self.c
            .cluster
            .classes
            .iter()
            .map(|k| (k.gpu_type, k.free, k.count))
            .collect()
    }

    /// Per GPU type: the item sizes of usable rows.
    #[getter]
    fn sizes(&self) -> Vec<Vec<i64>> {
        self.c.sizes.clone()
    }

    /// Every node fill pattern of every class (over the sizes of usable rows).
    fn patterns(&self) -> Vec<PyPattern> {
        let c = &self.c;
        (0..c.scenario.gpu_types.len())
            .flat_map(|t| c.cluster.patterns(t, &c.sizes[t]))
            .map(|p| PyPattern {
                class_index: p.class,
                items: p.items,
            })
            .collect()
    }

    #[getter]
    fn stages(&self) -> Vec<PyStage> {
        self.order
            .stages
            .iter()
            .map(|s| PyStage {
                sense: match s.sense {
                    Sense::Max => "max",
                    Sense::Min => "min",
                },
                terms: s.terms.iter().map(|&(t, k)| (t.name(), k)).collect(),
            })
            .collect()
    }

    /// Per row: price of one instance per hour (the cost term's coefficients).
    #[getter]
    fn row_cost(&self) -> Vec<i64> {
        self.order.row_cost.clone()
    }

    /// Per row: the ratio stage's served and cost coefficients.
    #[getter]
    fn ratio_coefficients(&self) -> (Vec<i64>, Vec<i64>) {
        (
            self.order.ratio_served.clone(),
            self.order.ratio_cost.clone(),
        )
    }

    /// Per model: integer weight, whether it counts in the smallest fraction, demand in
    /// its capacity units and its unit scale (fleet terms).
    #[getter]
    fn fleet_terms(&self) -> (Vec<i64>, Vec<bool>, Vec<i64>, Vec<i64>) {
        (
            self.order.weights.clone(),
            self.order.counts_in_min.clone(),
            self.c.demand_units.clone(),
            self.c.unit_scale.clone(),
        )
    }

    #[getter]
    fn moves(&self) -> Option<PyMoves> {
        self.order.moves.map(|(w, p, d)| PyMoves {
            start: w.start,
            stop: w.stop,
            restart: w.restart,
            gpu: w.gpu,
            prefill: (p.row, p.instances, p.gpus),
            decode: (d.row, d.instances, d.gpus),
        })
    }

    /// Models in the scenario.
    #[getter]
    fn models(&self) -> usize {
        self.c.scenario.models.len()
    }

    /// Whether models share a pool (a model may get nothing) rather than one model plans.
    #[getter]
    fn is_fleet(&self) -> bool {
        self.c.scenario.objective.is_fleet()
    }

    /// Whether every model's demand must be served in full (each row's `need`).
    #[getter]
    fn serves_demand(&self) -> bool {
        self.c.scenario.objective.serves_demand()
    }

    /// How many nodes of each pattern (in `patterns()` order) a plan's placement fills: the
    /// node-pattern part of a complete CP-SAT hint.
    fn usage(&self, py: Python<'_>, solution: PySolution<'_>) -> PyResult<Vec<(usize, i64)>> {
        let sol = self.solution(py, solution)?;
        let c = self.c.clone();
        Ok(released(py, move || placement::pattern_usage(&c, &sol))?.unwrap_or_default())
    }

    /// The fraction step count (fleet fractions are multiples of 1/this).
    #[getter]
    fn fraction_scale(&self) -> i64 {
        plan::candidates::FRACTION_SCALE
    }

    /// A valid bound on stage `stage`'s optimum given earlier stages' values (None: no
    /// bound from the relaxation).
    fn bound(&self, py: Python<'_>, stage: usize, fixed: Vec<i128>) -> PyResult<Option<i128>> {
        let (c, o) = (self.c.clone(), self.order.clone());
        released(py, move || relax::bound(&c, &o, stage, &fixed))
    }

    /// A feasible plan to start CP-SAT from (single-model planners).
    fn hint(&self, py: Python<'_>) -> PyResult<Option<OutSolution>> {
        Ok(self.forms(py)?.hint.as_ref().map(out_solution))
    }

    /// Whether the time limit given to `candidates` has passed: the closed-form help
    /// answered since then may have skipped pairs.
    #[getter]
    fn out_of_time(&self) -> bool {
        self.deadline
            .is_some_and(|t| std::time::Instant::now() >= t)
    }

    /// Per pair (as `pairs`), a valid bound on stage 0 for plans using it (None: no plan
    /// can use the pair); None when nothing bounds a pair here (see `relax::pair_bounds`, and
    /// `relax::move_bounds` for re-plans).
    fn pair_bounds(&self, py: Python<'_>) -> PyResult<Option<Vec<Option<i128>>>> {
        Ok(self.forms(py)?.bounds.clone())
    }

    /// The pairs an optimum can use given a feasible `incumbent`: the indices (in `pairs`)
    /// of every pair whose stage-0 bound matches or beats the incumbent's, its own pair
    /// included, and the best of their bounds (stage 0's bound; None when the incumbent's
    /// pair has none or stage 0 is a ratio). None when no pair is bounded (`pair_bounds`,
    /// or a tokens-per-dollar stage's `relax::ratio_bounds`).
    fn competitive(
        &self,
        py: Python<'_>,
        incumbent: PySolution<'_>,
    ) -> PyResult<Option<(Vec<usize>, Option<i128>)>> {
        let sol = self.solution(py, incumbent)?;
        let Some(bounds) = self.forms(py)?.values.as_ref() else {
            return Ok(None);
        };
        Ok(relax::competitive(&self.c, &self.order, bounds, &sol))
    }

    /// Each stage's value for a plan (ints; a ratio stage as (numerator, denominator)).
    fn values(&self, py: Python<'_>, solution: PySolution<'_>) -> PyResult<Vec<PyObject>> {
        let sol = self.solution(py, solution)?;
        self.order
            .values(&self.c, &sol)
            .iter()
            .map(|v| value_obj(py, v))
            .collect()
    }

    /// -1 when plan `a` is better than `b`, 1 when worse, 0 when the order ties them.
    fn compare(&self, py: Python<'_>, a: PySolution<'_>, b: PySolution<'_>) -> PyResult<i32> {
        let (a, b) = (self.solution(py, a)?, self.solution(py, b)?);
        Ok(match self.order.cmp(&self.c, &a, &b) {
            std::cmp::Ordering::Less => -1,
            std::cmp::Ordering::Equal => 0,
            std::cmp::Ordering::Greater => 1,
        })
    }

    /// Whether a plan meets every constraint: rows of valid pairs, counts that serve each
    /// demand, and instances that fit the nodes (None: too large to check exactly).
    fn feasible(&self, py: Python<'_>, solution: PySolution<'_>) -> PyResult<Option<bool>> {
        let sol = self.solution(py, solution)?;
        let c = self.c.clone();
        released(py, move || feasible::feasible(&c, &sol))
    }

    /// The exhaustive oracle: the best plan and whether it finished within `time_limit_s`.
    #[pyo3(signature = (time_limit_s=None, reduced=true))]
    fn oracle(
        &self,
        py: Python<'_>,
        time_limit_s: Option<f64>,
        reduced: bool,
    ) -> PyResult<(Option<OutSolution>, bool)> {
        let deadline = deadline_in(time_limit_s);
        let (c, o) = (self.c.clone(), self.order.clone());
        let (best, complete) = released(py, move || oracle::search(&c, &o, deadline, reduced))?;
        Ok((best.map(|s| out_solution(&s)), complete))
    }

    /// The best plan of one mode only (`agg` or `disagg`), by the closed forms: the
    /// alternative a plan of the other mode is compared with.
    fn best_of_mode(&self, py: Python<'_>, mode: AggregatedArg) -> PyResult<Option<OutSolution>> {
        let kind = usize::from(mode.0);
        Ok(self.forms(py)?.best_of_kind[kind]
            .as_ref()
            .map(out_solution))
    }

    /// The best plan over the pairs the connector's rules refuse (what they cost).
    fn rule_blind(&self, py: Python<'_>) -> PyResult<Option<OutSolution>> {
        let (c, o, until) = (self.c.clone(), self.order.clone(), self.deadline);
        let best = released(py, move || {
            let _limit = plan::cluster::until(until);
            rule_blind::best_refused(&c, &o)
        })?;
        Ok(best.map(|s| out_solution(&s)))
    }

    /// Where each instance of a plan runs. `usage` (pattern index, nodes) from a CP-SAT
    /// solution places item sizes that no closed form packs.
    #[pyo3(signature = (solution, usage=None))]
    fn place(
        &self,
        py: Python<'_>,
        solution: PySolution<'_>,
        usage: Option<Vec<(usize, i64)>>,
    ) -> PyResult<Vec<PyPlaced>> {
        let sol = self.solution(py, solution)?;
        let c = self.c.clone();
        let placed = released(py, move || placement::place(&c, &sol, usage.as_deref()))?;
        placed
            .map(|v| v.into_iter().map(PyPlaced::from).collect())
            .ok_or_else(|| {
                bug(
                    py,
                    "internal error: the plan's instances could not be placed (please report)"
                        .into(),
                )
            })
    }

    /// A proof by enumeration (`plan::prove`): the best plan over every instance count of
    /// `pairs` (indices in `pairs`, the competitive ones) whose first term can tie or beat
    /// the feasible `incumbent`'s, each count's fit checked exactly. None when it proves
    /// nothing here (a ratio or re-plan order, more than `budget` plans, a fit too large to
    /// search, or `time_limit_s` passed): CP-SAT proves instead.
    #[pyo3(signature = (incumbent, pairs, time_limit_s=None, budget=None))]
    fn prove(
        &self,
        py: Python<'_>,
        incumbent: PySolution<'_>,
        pairs: Vec<usize>,
        time_limit_s: Option<f64>,
        budget: Option<u64>,
    ) -> PyResult<Option<OutSolution>> {
        let sol = self.solution(py, incumbent)?;
        let deadline = deadline_in(time_limit_s);
        let (c, o) = (self.c.clone(), self.order.clone());
        let budget = budget.unwrap_or(prove::ENUMERATION_BUDGET);
        let best = released(py, move || {
            let _limit = plan::cluster::until(deadline);
            prove::enumerate(&c, &o, &pairs, &sol, deadline, budget)
        })?;
        Ok(best.map(|s| out_solution(&s)))
    }
}

pub(super) fn py_pair(p: &Pair) -> PyPair {
    PyPair {
        model: p.model,
        prefill: p.prefill,
        decode: p.decode,
    }
}

/// Build a scenario's candidates (rows, pairs, patterns, order): the heavy step of every
/// planner, with the GIL released. `time_limit_s`: from now, where exact node searches
/// (here and in the closed-form help asked of the result) give way to their relaxations.
#[pyfunction]
#[pyo3(signature = (scenario, time_limit_s=None))]
pub(super) fn candidates(
    py: Python<'_>,
    scenario: &PyScenario,
    time_limit_s: Option<f64>,
) -> PyResult<PyCandidates> {
    let sc = scenario.inner.clone();
    let deadline = deadline_in(time_limit_s);
    let (c, order) = released(py, move || {
        let _limit = plan::cluster::until(deadline);
        let c = Candidates::build((*sc).clone());
        // Too many node patterns: refused before anything lists them (memory bound).
        let order = c.too_many_patterns().is_none().then(|| Order::new(&c));
        (c, order)
    })?;
    let Some(order) = order else {
        let why = c.too_many_patterns().unwrap_or_default();
        return Err(invalid(py, why));
    };
    Ok(PyCandidates {
        c: Arc::new(c),
        order: Arc::new(order),
        deadline,
        forms: OnceLock::new(),
        rows_py: OnceLock::new(),
        pairs_py: OnceLock::new(),
    })
}

/// A plan's instances `(role, GPUs)`, in plan order, on nodes of `gpus_per_node` GPUs when
/// the plan lists no placement (`placement::pack`: the planners' placement on the fewest
/// whole nodes). `Plan.placement()` and `pdtp deploy` of such a plan both read it.
#[pyfunction]
pub(super) fn pack(
    py: Python<'_>,
    instances: Vec<(RoleArg, i64)>,
    gpus_per_node: i64,
) -> PyResult<Vec<PyPlaced>> {
    let items: Vec<(Role, i64)> = instances.iter().map(|(r, g)| (r.0, *g)).collect();
    match shielded(py, || placement::pack(&items, gpus_per_node))? {
        Ok(placed) => Ok(placed.into_iter().map(PyPlaced::from).collect()),
        Err(placement::PackError::Instance { index, gpus }) => {
            let role = items[index].0.name();
            Err(invalid(
                py,
                if gpus < 1 {
                    format!("plan['{role}']: an instance needs at least one GPU, got {gpus}")
                } else {
                    format!(
                        "plan['{role}']: an instance of {gpus} GPUs is neither within one \
                         node of {gpus_per_node} GPUs nor whole nodes"
                    )
                },
            ))
        }
        Err(e) => Err(invalid(py, format!("plan: {e}"))),
    }
}
