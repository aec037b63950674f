//! The thin PyO3 layer: converts types, releases the GIL around heavy work and maps core
//! errors onto pdtp's Python exception hierarchy (`pdtp.errors`). No rule logic lives here.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::check::{self, Shape, VllmError};
use crate::connector::{self, ConnectorProfile};
use crate::layout::Layout;
use crate::perf::{self, Constants, GpuPerf, ModelPerf, Workload};
use crate::plan::{self, Candidate, Problem, SideOption};
use crate::rules::{self, RuleError};
use crate::sim;
use crate::transfer;

/// Raise `pdtp.errors.<class_name>(message)`.
fn pdtp_error(py: Python<'_>, class_name: &str, message: String) -> PyErr {
    let class = py
        .import("pdtp.errors")
        .and_then(|m| m.getattr(class_name))
        .and_then(|c| c.downcast_into::<PyType>().map_err(PyErr::from));
    match class {
        Ok(cls) => PyErr::from_type(cls, message),
        Err(e) => e,
    }
}

fn rule_error(py: Python<'_>, e: RuleError) -> PyErr {
    match e {
        RuleError::Value(m) => pdtp_error(py, "RuleValueError", m),
        RuleError::NotImplemented(m) => pdtp_error(py, "RuleNotImplementedError", m),
    }
}

/// A Rust panic must never reach Python as `PanicException`: it becomes a `PdtpError`
/// that says it is a bug.
fn internal(py: Python<'_>) -> PyErr {
    pdtp_error(
        py,
        "PdtpError",
        "internal error in pdtp's Rust core (please report)".into(),
    )
}

/// Run quick core code with panics caught (the GIL stays held: it is microseconds).
fn shielded<T>(py: Python<'_>, f: impl FnOnce() -> T) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|_| internal(py))
}

/// Run heavy core code with the GIL released (other Python threads keep running) and
/// panics caught.
fn released<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> PyResult<T> {
    py.allow_threads(|| catch_unwind(AssertUnwindSafe(f)))
        .map_err(|_| internal(py))
}

fn profile(py: Python<'_>, name: &str) -> PyResult<&'static ConnectorProfile> {
    connector::profile(name).ok_or_else(|| {
        pdtp_error(
            py,
            "UnknownNameError",
            format!(
                "connector must be one of {}, got {name:?}",
                connector::names().join(", ")
            ),
        )
    })
}

#[pyfunction]
fn remote_tp_rank(
    py: Python<'_>,
    local_tp_rank: i64,
    local_tp_size: i64,
    remote_tp_size: i64,
) -> PyResult<i64> {
    shielded(py, || {
        rules::remote_tp_rank(local_tp_rank, local_tp_size, remote_tp_size)
    })?
    .map_err(|e| rule_error(py, e))
}

#[pyfunction]
fn validate_kv_heads(
    py: Python<'_>,
    local_tp_size: i64,
    remote_tp_size: i64,
    total_num_kv_heads: i64,
    is_mla: bool,
) -> PyResult<()> {
    shielded(py, || {
        rules::validate_kv_heads(local_tp_size, remote_tp_size, total_num_kv_heads, is_mla)
    })?
    .map_err(|e| rule_error(py, e))
}

#[pyfunction]
fn expected_ack_count(
    py: Python<'_>,
    producer_tp_size: i64,
    consumer_tp_size: i64,
) -> PyResult<i64> {
    shielded(py, || {
        rules::expected_ack_count(producer_tp_size, consumer_tp_size)
    })?
    .map_err(|e| rule_error(py, e))
}

type ViolationTuple = (&'static str, &'static str, String, String, &'static str);

fn violation_tuple(v: check::Violation) -> ViolationTuple {
    (v.code, v.side, v.message, v.hint, v.error.name())
}

/// `(violations, warnings)` for one pair; violations as
/// `(code, side, message, hint, vllm_error)`, warnings as `(code, message)`.
#[pyfunction]
#[pyo3(signature = (num_attention_heads, num_kv_heads, is_mla, prefill_tp, decode_tp, connector, max_acks=None))]
#[allow(clippy::type_complexity)]
fn check_pair(
    py: Python<'_>,
    num_attention_heads: i64,
    num_kv_heads: i64,
    is_mla: bool,
    prefill_tp: i64,
    decode_tp: i64,
    connector: &str,
    max_acks: Option<i64>,
) -> PyResult<(Vec<ViolationTuple>, Vec<(&'static str, String)>)> {
    let prof = profile(py, connector)?;
    let shape = Shape {
        num_attention_heads,
        num_kv_heads,
        is_mla,
    };
    let report = shielded(py, || {
        check::check_pair(&shape, prefill_tp, decode_tp, prof, max_acks)
    })?;
    Ok((
        report.violations.into_iter().map(violation_tuple).collect(),
        report
            .warnings
            .into_iter()
            .map(|w| (w.code, w.message))
            .collect(),
    ))
}

#[pyfunction]
#[pyo3(signature = (num_attention_heads, num_kv_heads, is_mla, prefill_tp, decode_tp, connector, max_acks, prefill_sizes, decode_sizes, limit))]
fn alternatives(
    py: Python<'_>,
    num_attention_heads: i64,
    num_kv_heads: i64,
    is_mla: bool,
    prefill_tp: i64,
    decode_tp: i64,
    connector: &str,
    max_acks: Option<i64>,
    prefill_sizes: Vec<i64>,
    decode_sizes: Vec<i64>,
    limit: usize,
) -> PyResult<Vec<(i64, i64)>> {
    let prof = profile(py, connector)?;
    let shape = Shape {
        num_attention_heads,
        num_kv_heads,
        is_mla,
    };
    released(py, || {
        check::alternatives(
            &shape,
            prefill_tp,
            decode_tp,
            prof,
            max_acks,
            &prefill_sizes,
            &decode_sizes,
            limit,
        )
    })
}

#[pyfunction]
fn loadable_sizes(
    py: Python<'_>,
    num_attention_heads: i64,
    num_kv_heads: i64,
    is_mla: bool,
    bound: i64,
) -> PyResult<Vec<i64>> {
    let shape = Shape {
        num_attention_heads,
        num_kv_heads,
        is_mla,
    };
    shielded(py, || check::loadable_sizes(&shape, bound))
}

type DecodeRow = (i64, Vec<i64>, Vec<(i64, Vec<i64>)>);
type PrefillRow = (i64, Vec<i64>, Vec<i64>, i64);

/// `(decode_rows, prefill_rows)`; raises vLLM's error for an invalid pair.
#[pyfunction]
fn transfer_map(
    py: Python<'_>,
    prefill_tp: i64,
    decode_tp: i64,
    kv_heads: i64,
    is_mla: bool,
    connector: &str,
) -> PyResult<(Vec<DecodeRow>, Vec<PrefillRow>)> {
    let prof = profile(py, connector)?;
    if prefill_tp > transfer::MAX_MAP_TP || decode_tp > transfer::MAX_MAP_TP {
        return Err(PyValueError::new_err(format!(
            "transfer_map lays out at most {} ranks per side",
            transfer::MAX_MAP_TP
        )));
    }
    let result = released(py, || {
        transfer::transfer_map(prefill_tp, decode_tp, kv_heads, is_mla, prof)
    })?;
    match result {
        Ok(m) => Ok((
            m.decode
                .into_iter()
                .map(|r| (r.rank, r.heads, r.sources))
                .collect(),
            m.prefill
                .into_iter()
                .map(|r| (r.rank, r.heads, r.readers, r.expected_acks))
                .collect(),
        )),
        Err(v) => {
            let class = match v.error {
                VllmError::ValueError => "RuleValueError",
                VllmError::NotImplementedError => "RuleNotImplementedError",
                VllmError::AssertionError => "RuleAssertionError",
                VllmError::None => "InvalidArgumentError",
            };
            Err(pdtp_error(py, class, v.message))
        }
    }
}

/// Every connector profile as a dict (the data behind `connector=`).
#[pyfunction]
fn connectors(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    connector::PROFILES
        .iter()
        .map(|p| {
            let d = PyDict::new(py);
            d.set_item("name", p.name)?;
            d.set_item("kv_connector", p.kv_connector)?;
            d.set_item("prefill_role", p.prefill_role)?;
            d.set_item("decode_role", p.decode_role)?;
            d.set_item("requires_replicated_heads", p.requires_replicated_heads)?;
            d.set_item("summary", p.summary)?;
            Ok(d)
        })
        .collect()
}

// ---- performance model and solver ------------------------------------------------------
// Python hands each input over as a dict of plain numbers (built once per model/GPU and
// cached on the Python side); a missing key is a bug in pdtp, reported as KeyError.

fn num(d: &Bound<'_, PyDict>, key: &str) -> PyResult<f64> {
    match d.get_item(key)? {
        Some(v) => v.extract::<f64>(),
        None => Err(pyo3::exceptions::PyKeyError::new_err(key.to_string())),
    }
}

fn opt_num(d: &Bound<'_, PyDict>, key: &str) -> PyResult<Option<f64>> {
    match d.get_item(key)? {
        Some(v) if !v.is_none() => Ok(Some(v.extract::<f64>()?)),
        _ => Ok(None),
    }
}

fn model_perf(d: &Bound<'_, PyDict>) -> PyResult<ModelPerf> {
    Ok(ModelPerf {
        num_layers: num(d, "num_layers")?,
        num_attention_layers: num(d, "num_attention_layers")?,
        hidden_size: num(d, "hidden_size")?,
        num_attention_heads: num(d, "num_attention_heads")?,
        num_kv_heads: num(d, "num_kv_heads")? as i64,
        head_dim: num(d, "head_dim")?,
        is_mla: num(d, "is_mla")? != 0.0,
        kv_lora_rank: num(d, "kv_lora_rank")?,
        qk_rope_head_dim: num(d, "qk_rope_head_dim")?,
        weight_bytes: num(d, "weight_bytes")?,
        expert_weight_bytes: num(d, "expert_weight_bytes")?,
        num_experts: num(d, "num_experts")?,
        experts_per_token: num(d, "experts_per_token")?,
        active_params: num(d, "active_params")?,
        kv_dtype_bytes: num(d, "kv_dtype_bytes")?,
    })
}

fn gpu_perf(d: &Bound<'_, PyDict>) -> PyResult<GpuPerf> {
    Ok(GpuPerf {
        memory_bytes: num(d, "memory_bytes")?,
        hbm_bandwidth: num(d, "hbm_bandwidth")?,
        peak_flops: num(d, "peak_flops")?,
        link_bandwidth: num(d, "link_bandwidth")?,
    })
}

fn constants(d: &Bound<'_, PyDict>) -> PyResult<Constants> {
    Ok(Constants {
        mfu_prefill: num(d, "mfu_prefill")?,
        mfu_decode: num(d, "mfu_decode")?,
        mbu: num(d, "mbu")?,
        allreduce_latency: num(d, "allreduce_latency_s")?,
        step_overhead: num(d, "step_overhead_s")?,
        reserve_bytes: num(d, "reserve_bytes")?,
        ttft_queue_factor: num(d, "ttft_queue_factor")?,
        kv_transfer_bandwidth: num(d, "kv_transfer_bandwidth")?,
        kv_transfer_latency: num(d, "kv_transfer_latency_s")?,
        max_num_seqs: num(d, "max_num_seqs")?,
    })
}

fn workload(d: &Bound<'_, PyDict>) -> PyResult<Workload> {
    Ok(Workload {
        isl: num(d, "isl")?,
        osl: num(d, "osl")?,
        ttft: opt_num(d, "ttft_s")?,
        tpot: opt_num(d, "tpot_s")?,
    })
}

/// Prefill of one request on one instance: `(t_p, ttft, requests_per_s, fits,
/// kv_capacity_tokens, weights_fit)`.
#[pyfunction]
fn predict_prefill(
    py: Python<'_>,
    model: &Bound<'_, PyDict>,
    gpu: &Bound<'_, PyDict>,
    consts: &Bound<'_, PyDict>,
    tp: i64,
    isl: f64,
    util: f64,
) -> PyResult<(f64, f64, f64, bool, f64, bool)> {
    let (m, g, c) = (model_perf(model)?, gpu_perf(gpu)?, constants(consts)?);
    let w = Workload {
        isl,
        osl: 1.0,
        ttft: None,
        tpot: None,
    };
    shielded(py, || {
        let p = perf::prefill_point(&m, &g, &c, tp, &w, util);
        (
            p.time,
            p.ttft,
            p.requests_per_s,
            p.fits,
            perf::kv_capacity_tokens(&m, &g, &c, tp, util),
            perf::weights_fit(&m, &g, &c, tp, util),
        )
    })
}

/// Decode at a given batch: `(step_time, max_batch, kv_capacity_tokens, weights_fit)`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn predict_decode(
    py: Python<'_>,
    model: &Bound<'_, PyDict>,
    gpu: &Bound<'_, PyDict>,
    consts: &Bound<'_, PyDict>,
    tp: i64,
    isl: f64,
    osl: f64,
    batch: f64,
    util: f64,
) -> PyResult<(f64, i64, f64, bool)> {
    let (m, g, c) = (model_perf(model)?, gpu_perf(gpu)?, constants(consts)?);
    let w = Workload {
        isl,
        osl,
        ttft: None,
        tpot: None,
    };
    shielded(py, || {
        let step = perf::decode_step_time(&m, &g, &c, tp, batch, isl + osl / 2.0);
        let point = perf::decode_point(&m, &g, &c, tp, &w, util);
        (
            step,
            point.max_batch,
            perf::kv_capacity_tokens(&m, &g, &c, tp, util),
            perf::weights_fit(&m, &g, &c, tp, util),
        )
    })
}

type SideRow = (i64, bool, bool, bool, f64, bool, i64, i64, f64, i64);
type CandRow = (i64, i64, i64, i64, i64, i64);

fn side_row(o: &SideOption) -> SideRow {
    (
        o.tp,
        o.loads,
        o.fits_weights,
        o.fits_kv,
        o.latency,
        o.meets_slo,
        o.batch,
        o.max_batch,
        o.requests_per_s,
        o.units,
    )
}

fn cand_row(c: &Candidate) -> CandRow {
    (
        c.prefill_tp,
        c.prefill_instances,
        c.decode_tp,
        c.decode_instances,
        c.value,
        c.gpus_used,
    )
}

#[allow(clippy::too_many_arguments)]
fn problem<'a>(
    py: Python<'_>,
    model: &Bound<'_, PyDict>,
    gpu: &Bound<'_, PyDict>,
    consts: &Bound<'_, PyDict>,
    work: &Bound<'_, PyDict>,
    connector: &str,
    gpus: i64,
    max_tp: i64,
    max_acks: Option<i64>,
    util: f64,
) -> PyResult<Problem<'a>> {
    let m = model_perf(model)?;
    Ok(Problem {
        model: m,
        shape: m.shape(),
        gpu: gpu_perf(gpu)?,
        constants: constants(consts)?,
        workload: workload(work)?,
        profile: profile(py, connector)?,
        gpus,
        max_tp,
        max_acks,
        gpu_memory_utilization: util,
    })
}

/// The candidate table: `(prefill_rows, decode_rows, candidates, valid_pairs,
/// best_rejected)`.
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
#[pyo3(signature = (model, gpu, consts, work, connector, gpus, max_tp, max_acks, util))]
fn candidate_table(
    py: Python<'_>,
    model: &Bound<'_, PyDict>,
    gpu: &Bound<'_, PyDict>,
    consts: &Bound<'_, PyDict>,
    work: &Bound<'_, PyDict>,
    connector: &str,
    gpus: i64,
    max_tp: i64,
    max_acks: Option<i64>,
    util: f64,
) -> PyResult<(
    Vec<SideRow>,
    Vec<SideRow>,
    Vec<CandRow>,
    usize,
    Option<CandRow>,
)> {
    let pb = problem(
        py, model, gpu, consts, work, connector, gpus, max_tp, max_acks, util,
    )?;
    let table = released(py, || plan::build_table(&pb))?;
    Ok((
        table.prefill.iter().map(side_row).collect(),
        table.decode.iter().map(side_row).collect(),
        table.candidates.iter().map(cand_row).collect(),
        table.valid_pairs,
        table.best_rejected.as_ref().map(cand_row),
    ))
}

/// One side's operating point at one TP size (the numbers `evaluate` reports).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn side_option(
    py: Python<'_>,
    model: &Bound<'_, PyDict>,
    gpu: &Bound<'_, PyDict>,
    consts: &Bound<'_, PyDict>,
    work: &Bound<'_, PyDict>,
    tp: i64,
    prefill: bool,
    util: f64,
) -> PyResult<SideRow> {
    let m = model_perf(model)?;
    let shape = m.shape();
    let (g, c, w) = (gpu_perf(gpu)?, constants(consts)?, workload(work)?);
    shielded(py, || {
        side_row(&plan::side_option(
            &m, &shape, &g, &c, &w, util, tp, prefill,
        ))
    })
}

/// The exhaustive oracle's best candidate (or None) and whether it finished within
/// `time_limit_s` (when not, the candidate is the best found so far).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (model, gpu, consts, work, connector, gpus, max_tp, max_acks, util, time_limit_s))]
fn enumerate_best(
    py: Python<'_>,
    model: &Bound<'_, PyDict>,
    gpu: &Bound<'_, PyDict>,
    consts: &Bound<'_, PyDict>,
    work: &Bound<'_, PyDict>,
    connector: &str,
    gpus: i64,
    max_tp: i64,
    max_acks: Option<i64>,
    util: f64,
    time_limit_s: f64,
) -> PyResult<(Option<CandRow>, bool)> {
    let pb = problem(
        py, model, gpu, consts, work, connector, gpus, max_tp, max_acks, util,
    )?;
    let deadline = std::time::Duration::try_from_secs_f64(time_limit_s)
        .ok()
        .and_then(|d| std::time::Instant::now().checked_add(d));
    let (best, complete) = released(py, || plan::enumerate_best_until(&pb, deadline))?;
    Ok((best.as_ref().map(cand_row), complete))
}

type SweepRow = (Option<CandRow>, Option<CandRow>, bool);

/// One sweep scenario over many budgets: `(prefill_rows, decode_rows, points)`, one
/// point per budget (in order) as `(best, rule_blind_best, rule_blind_valid)`. Side rows
/// cover TP 1..=min(max_tp, largest budget).
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
#[pyo3(signature = (model, gpu, consts, work, connector, budgets, max_tp, max_acks, util))]
fn sweep_budgets(
    py: Python<'_>,
    model: &Bound<'_, PyDict>,
    gpu: &Bound<'_, PyDict>,
    consts: &Bound<'_, PyDict>,
    work: &Bound<'_, PyDict>,
    connector: &str,
    budgets: Vec<i64>,
    max_tp: i64,
    max_acks: Option<i64>,
    util: f64,
) -> PyResult<(Vec<SideRow>, Vec<SideRow>, Vec<SweepRow>)> {
    let pb = problem(
        py, model, gpu, consts, work, connector, 0, max_tp, max_acks, util,
    )?;
    let sweep = released(py, || crate::sweep::sweep_budgets(&pb, &budgets))?;
    Ok((
        sweep.prefill.iter().map(side_row).collect(),
        sweep.decode.iter().map(side_row).collect(),
        sweep
            .points
            .iter()
            .map(|p| {
                (
                    p.best.as_ref().map(cand_row),
                    p.rule_blind.as_ref().map(cand_row),
                    p.rule_blind_valid,
                )
            })
            .collect(),
    ))
}

// ---- simulator (src/sim) ----------------------------------------------------------------
// Typed values: `SimConfig` (what is deployed), `SimTrace` (a parsed trace), `SimResult` and
// its parts, `RateSearch`. Latencies cross the boundary in milliseconds, as in `pdtp.Plan`.

fn sim_error(py: Python<'_>, e: sim::SimError) -> PyErr {
    let class = if e.internal {
        "PdtpError"
    } else {
        "InvalidArgumentError"
    };
    pdtp_error(py, class, e.message)
}

/// One kind of instance of a simulated deployment.
#[pyclass(frozen, module = "pdtp._core", name = "SimPool")]
struct PySimPool {
    /// `"aggregated"`, `"prefill"` or `"decode"`.
    #[pyo3(get)]
    role: &'static str,
    #[pyo3(get)]
    tp: i64,
    #[pyo3(get)]
    instances: u32,
    #[pyo3(get)]
    gpu_memory_utilization: f64,
    #[pyo3(get)]
    max_num_seqs: u32,
    #[pyo3(get)]
    max_num_batched_tokens: u32,
    /// KV-cache blocks of 16 tokens one instance holds.
    #[pyo3(get)]
    kv_blocks: u64,
}

#[pymethods]
impl PySimPool {
    fn __repr__(&self) -> String {
        format!(
            "SimPool(role={:?}, tp={}, instances={}, max_num_seqs={}, \
             max_num_batched_tokens={}, kv_blocks={})",
            self.role,
            self.tp,
            self.instances,
            self.max_num_seqs,
            self.max_num_batched_tokens,
            self.kv_blocks
        )
    }
}

/// What a simulation deploys: built by `pdtp.sim_config` (or from a Plan by `pdtp.simulate`).
#[pyclass(frozen, module = "pdtp._core", name = "SimConfig")]
struct PySimConfig {
    inner: sim::Config,
    /// `"aggregated"` or `"disaggregated"`.
    #[pyo3(get)]
    mode: &'static str,
    #[pyo3(get)]
    model: String,
    #[pyo3(get)]
    gpu: String,
    /// `"round_robin"` or `"least_loaded"`.
    #[pyo3(get)]
    router: &'static str,
    pools: Vec<Py<PySimPool>>,
}

type PoolSpec = (String, i64, u32, f64, u32, u32);

fn pool_info(role: &'static str, p: &sim::Pool) -> PySimPool {
    PySimPool {
        role,
        tp: p.layout.tp,
        instances: p.instances,
        gpu_memory_utilization: p.gpu_memory_utilization,
        max_num_seqs: p.max_num_seqs,
        max_num_batched_tokens: p.max_num_batched_tokens,
        kv_blocks: p.kv_blocks(),
    }
}

#[pymethods]
impl PySimConfig {
    /// `pools`: `(role, tp, instances, gpu_memory_utilization, max_num_seqs,
    /// max_num_batched_tokens)` — one `"aggregated"` pool, or a `"prefill"` and a
    /// `"decode"` pool.
    #[new]
    #[pyo3(signature = (model, gpu, consts, *, model_name, gpu_name, pools, router))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyDict>,
        gpu: &Bound<'_, PyDict>,
        consts: &Bound<'_, PyDict>,
        model_name: String,
        gpu_name: String,
        pools: Vec<PoolSpec>,
        router: &str,
    ) -> PyResult<Self> {
        let (m, g, c) = (model_perf(model)?, gpu_perf(gpu)?, constants(consts)?);
        let invalid = |msg: String| pdtp_error(py, "InvalidArgumentError", msg);
        let (router, router_name) = match router {
            "round_robin" => (sim::Router::RoundRobin, "round_robin"),
            "least_loaded" => (sim::Router::LeastLoaded, "least_loaded"),
            other => {
                return Err(invalid(format!(
                    "router must be one of round_robin, least_loaded, got {other:?}"
                )))
            }
        };
        let mut built: Vec<(String, sim::Pool)> = Vec::new();
        for (role, tp, instances, util, seqs, tokens) in pools {
            if !(1..=1 << 16).contains(&tp) {
                return Err(invalid(format!("{role}_tp must be in 1..=65536, got {tp}")));
            }
            built.push((
                role,
                sim::Pool {
                    model: m,
                    gpu: g,
                    constants: c,
                    layout: Layout::tp(tp),
                    instances,
                    gpu_memory_utilization: util,
                    max_num_seqs: seqs,
                    max_num_batched_tokens: tokens,
                },
            ));
        }
        let roles: Vec<&str> = built.iter().map(|(r, _)| r.as_str()).collect();
        let (deployment, mode, infos) = match roles.as_slice() {
            ["aggregated"] => (
                sim::Deployment::Aggregated(built[0].1),
                "aggregated",
                vec![pool_info("aggregated", &built[0].1)],
            ),
            ["prefill", "decode"] => (
                sim::Deployment::Disaggregated {
                    prefill: built[0].1,
                    decode: built[1].1,
                },
                "disaggregated",
                vec![
                    pool_info("prefill", &built[0].1),
                    pool_info("decode", &built[1].1),
                ],
            ),
            other => {
                return Err(invalid(format!(
                    "pools must be [aggregated] or [prefill, decode], got {other:?}"
                )))
            }
        };
        let inner = sim::Config {
            deployment,
            router,
            slo: sim::Slo::default(),
        };
        shielded(py, || inner.validate())?.map_err(|e| sim_error(py, e))?;
        Ok(PySimConfig {
            inner,
            mode,
            model: model_name,
            gpu: gpu_name,
            router: router_name,
            pools: infos
                .into_iter()
                .map(|p| Py::new(py, p))
                .collect::<PyResult<_>>()?,
        })
    }

    /// The instance kinds: `(aggregated,)` or `(prefill, decode)`.
    #[getter]
    fn pools<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.pools.iter().map(|p| p.clone_ref(py)))
    }

    /// GPUs the deployment occupies.
    #[getter]
    fn gpus(&self) -> i64 {
        self.inner.gpus()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let pools: Vec<String> = self.pools.iter().map(|p| p.get().__repr__()).collect();
        let _ = py;
        format!(
            "SimConfig(mode={:?}, model={:?}, gpu={:?}, router={:?}, pools=[{}])",
            self.mode,
            self.model,
            self.gpu,
            self.router,
            pools.join(", ")
        )
    }
}

/// A parsed request trace (arrival time, input tokens, output tokens per request).
#[pyclass(frozen, module = "pdtp._core", name = "SimTrace")]
struct PySimTrace {
    inner: sim::trace::Trace,
    /// The file it came from.
    #[pyo3(get)]
    name: String,
}

#[pymethods]
impl PySimTrace {
    #[getter]
    fn requests(&self) -> usize {
        self.inner.isl.len()
    }

    /// Seconds from the first arrival to the last.
    #[getter]
    fn span_s(&self) -> f64 {
        match (self.inner.arrival.first(), self.inner.arrival.last()) {
            (Some(a), Some(b)) => b - a,
            _ => 0.0,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "SimTrace(name={:?}, requests={}, span_s={})",
            self.name,
            self.requests(),
            self.span_s()
        )
    }
}

/// Parse a trace's CSV text (`name` appears in every error).
#[pyfunction]
fn parse_trace(py: Python<'_>, text: String, name: String) -> PyResult<PySimTrace> {
    let parsed = released(py, || sim::trace::parse(&text, &name))?;
    let inner = parsed.map_err(|e| sim_error(py, e))?;
    Ok(PySimTrace { inner, name })
}

/// A latency's mean, percentiles and maximum over the requests, in milliseconds.
#[pyclass(frozen, module = "pdtp._core", name = "Percentiles")]
struct PyPercentiles {
    #[pyo3(get)]
    mean: f64,
    #[pyo3(get)]
    p50: f64,
    #[pyo3(get)]
    p90: f64,
    #[pyo3(get)]
    p99: f64,
    #[pyo3(get)]
    max: f64,
}

impl PyPercentiles {
    fn from_s(p: &sim::Percentiles) -> PyPercentiles {
        PyPercentiles {
            mean: p.mean * 1e3,
            p50: p.p50 * 1e3,
            p90: p.p90 * 1e3,
            p99: p.p99 * 1e3,
            max: p.max * 1e3,
        }
    }
}

#[pymethods]
impl PyPercentiles {
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in [
            ("mean", self.mean),
            ("p50", self.p50),
            ("p90", self.p90),
            ("p99", self.p99),
            ("max", self.max),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Percentiles(mean={:.4}, p50={:.4}, p90={:.4}, p99={:.4}, max={:.4})",
            self.mean, self.p50, self.p90, self.p99, self.max
        )
    }
}

/// One side of a simulated deployment over the run.
#[pyclass(frozen, module = "pdtp._core", name = "SideStats")]
struct PySideStats {
    /// `"aggregated"`, `"prefill"` or `"decode"`.
    #[pyo3(get)]
    role: &'static str,
    #[pyo3(get)]
    instances: u32,
    #[pyo3(get)]
    kv_blocks: u64,
    /// Share of instance-time spent running steps (0–1).
    #[pyo3(get)]
    utilization: f64,
    #[pyo3(get)]
    steps: u64,
    #[pyo3(get)]
    mean_step_tokens: f64,
    #[pyo3(get)]
    mean_decode_batch: f64,
    /// Requests waiting for this side: time-averaged, and at most.
    #[pyo3(get)]
    queue_mean: f64,
    #[pyo3(get)]
    queue_max: u64,
    #[pyo3(get)]
    preemptions: u64,
}

#[pymethods]
impl PySideStats {
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("role", self.role)?;
        d.set_item("instances", self.instances)?;
        d.set_item("kv_blocks", self.kv_blocks)?;
        d.set_item("utilization", self.utilization)?;
        d.set_item("steps", self.steps)?;
        d.set_item("mean_step_tokens", self.mean_step_tokens)?;
        d.set_item("mean_decode_batch", self.mean_decode_batch)?;
        d.set_item("queue_mean", self.queue_mean)?;
        d.set_item("queue_max", self.queue_max)?;
        d.set_item("preemptions", self.preemptions)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "SideStats(role={:?}, instances={}, utilization={:.3}, mean_decode_batch={:.1}, \
             queue_mean={:.2}, queue_max={}, preemptions={})",
            self.role,
            self.instances,
            self.utilization,
            self.mean_decode_batch,
            self.queue_mean,
            self.queue_max,
            self.preemptions
        )
    }
}

/// The outcome of `pdtp.simulate`. Latencies in milliseconds.
#[pyclass(frozen, module = "pdtp._core", name = "SimResult")]
struct PySimResult {
    inner: sim::SimResult,
    #[pyo3(get)]
    ttft_ms: Py<PyPercentiles>,
    #[pyo3(get)]
    tpot_ms: Py<PyPercentiles>,
    #[pyo3(get)]
    e2e_ms: Py<PyPercentiles>,
    sides: Vec<Py<PySideStats>>,
    /// The open-loop rate asked for (None: closed loop or a replayed trace).
    #[pyo3(get)]
    rate_rps: Option<f64>,
    /// Clients of a closed loop (None: open loop).
    #[pyo3(get)]
    concurrency: Option<u32>,
    #[pyo3(get)]
    seed: u64,
}

fn sim_result(
    py: Python<'_>,
    r: sim::SimResult,
    rate_rps: Option<f64>,
    concurrency: Option<u32>,
    seed: u64,
) -> PyResult<PySimResult> {
    let sides = r
        .sides
        .iter()
        .map(|s| {
            Py::new(
                py,
                PySideStats {
                    role: s.role,
                    instances: s.instances,
                    kv_blocks: s.kv_blocks,
                    utilization: s.utilization,
                    steps: s.steps,
                    mean_step_tokens: s.mean_step_tokens,
                    mean_decode_batch: s.mean_decode_batch,
                    queue_mean: s.queue_mean,
                    queue_max: s.queue_max,
                    preemptions: s.preemptions,
                },
            )
        })
        .collect::<PyResult<_>>()?;
    Ok(PySimResult {
        ttft_ms: Py::new(py, PyPercentiles::from_s(&r.ttft))?,
        tpot_ms: Py::new(py, PyPercentiles::from_s(&r.tpot))?,
        e2e_ms: Py::new(py, PyPercentiles::from_s(&r.e2e))?,
        sides,
        rate_rps,
        concurrency,
        seed,
        inner: r,
    })
}

#[pymethods]
impl PySimResult {
    /// Requests served (every one finishes exactly once).
    #[getter]
    fn requests(&self) -> usize {
        self.inner.requests
    }
    /// Seconds from the first arrival to the last completion.
    #[getter]
    fn duration_s(&self) -> f64 {
        self.inner.duration
    }
    #[getter]
    fn throughput_rps(&self) -> f64 {
        self.inner.throughput_rps
    }
    #[getter]
    fn output_tokens_per_s(&self) -> f64 {
        self.inner.output_tokens_per_s
    }
    /// Requests per second that met both SLOs.
    #[getter]
    fn goodput_rps(&self) -> f64 {
        self.inner.goodput_rps
    }
    /// Share of requests that met both SLOs.
    #[getter]
    fn slo_attainment(&self) -> f64 {
        self.inner.slo_attainment
    }
    /// Requests in the system, time-averaged (Little's L = throughput × mean e2e).
    #[getter]
    fn mean_in_system(&self) -> f64 {
        self.inner.mean_in_system
    }
    #[getter]
    fn ttft_slo_ms(&self) -> Option<f64> {
        self.inner.slo.ttft.map(|s| s * 1e3)
    }
    #[getter]
    fn tpot_slo_ms(&self) -> Option<f64> {
        self.inner.slo.tpot.map(|s| s * 1e3)
    }
    /// Per side: `(aggregated,)` or `(prefill, decode)`.
    #[getter]
    fn sides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.sides.iter().map(|p| p.clone_ref(py)))
    }

    /// The `q`-quantile (0–1) of `"ttft"` or `"tpot"` in milliseconds.
    fn quantile(&self, py: Python<'_>, metric: &str, q: f64) -> PyResult<f64> {
        if !(0.0..=1.0).contains(&q) {
            return Err(pdtp_error(
                py,
                "InvalidArgumentError",
                format!("q must be in [0, 1], got {q}"),
            ));
        }
        let sorted = match metric {
            "ttft" => &self.inner.ttft_sorted,
            "tpot" => &self.inner.tpot_sorted,
            other => {
                return Err(pdtp_error(
                    py,
                    "InvalidArgumentError",
                    format!("metric must be one of ttft, tpot, got {other:?}"),
                ))
            }
        };
        Ok(sim::quantile(sorted, q) * 1e3)
    }

    /// Whether the `percentile` quantiles of TTFT and TPOT both meet the SLOs: over every
    /// request, or with `steady_state` over the middle 80% by arrival (what the rate search
    /// judges: the first requests meet an idle deployment, the last a draining one).
    #[pyo3(signature = (percentile = 0.9, *, steady_state = false))]
    fn meets_slo(&self, py: Python<'_>, percentile: f64, steady_state: bool) -> PyResult<bool> {
        if !(percentile > 0.0 && percentile < 1.0) {
            return Err(pdtp_error(
                py,
                "InvalidArgumentError",
                format!("percentile must be in (0, 1), got {percentile}"),
            ));
        }
        Ok(if steady_state {
            self.inner.meets_slo_in(percentile, sim::STEADY_STATE)
        } else {
            self.inner.meets_slo_at(percentile)
        })
    }

    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("requests", self.requests())?;
        d.set_item("rate_rps", self.rate_rps)?;
        d.set_item("concurrency", self.concurrency)?;
        d.set_item("seed", self.seed)?;
        d.set_item("duration_s", self.duration_s())?;
        d.set_item("throughput_rps", self.throughput_rps())?;
        d.set_item("output_tokens_per_s", self.output_tokens_per_s())?;
        d.set_item("goodput_rps", self.goodput_rps())?;
        d.set_item("slo_attainment", self.slo_attainment())?;
        d.set_item("ttft_slo_ms", self.ttft_slo_ms())?;
        d.set_item("tpot_slo_ms", self.tpot_slo_ms())?;
        d.set_item("ttft_ms", self.ttft_ms.get().to_dict(py)?)?;
        d.set_item("tpot_ms", self.tpot_ms.get().to_dict(py)?)?;
        d.set_item("e2e_ms", self.e2e_ms.get().to_dict(py)?)?;
        d.set_item("mean_in_system", self.mean_in_system())?;
        let sides = self
            .sides
            .iter()
            .map(|s| s.get().to_dict(py))
            .collect::<PyResult<Vec<_>>>()?;
        d.set_item("sides", sides)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let (t, p) = (self.ttft_ms.get(), self.tpot_ms.get());
        format!(
            "SimResult(requests={}, throughput_rps={:.3}, goodput_rps={:.3}, \
             ttft_ms(p50/p90/p99)={:.1}/{:.1}/{:.1}, tpot_ms(p50/p90/p99)={:.2}/{:.2}/{:.2})",
            self.requests(),
            self.throughput_rps(),
            self.goodput_rps(),
            t.p50,
            t.p90,
            t.p99,
            p.p50,
            p.p90,
            p.p99
        )
    }
}

fn sim_lengths(isl: u32, osl: u32, length_range: Option<(f64, f64)>) -> sim::Lengths {
    match length_range {
        None => sim::Lengths::Fixed { isl, osl },
        Some((low, high)) => sim::Lengths::Uniform {
            isl,
            osl,
            low,
            high,
        },
    }
}

fn sim_arrival(py: Python<'_>, arrival: &str, burstiness: f64) -> PyResult<sim::Arrival> {
    match arrival {
        "poisson" => Ok(sim::Arrival::Poisson),
        "constant" => Ok(sim::Arrival::Constant),
        "gamma" => Ok(sim::Arrival::Gamma { shape: burstiness }),
        other => Err(pdtp_error(
            py,
            "InvalidArgumentError",
            format!("arrival must be one of poisson, gamma, constant, got {other:?}"),
        )),
    }
}

/// `config` with these SLOs (milliseconds; None = unbounded).
fn with_slo(
    config: &PySimConfig,
    ttft_slo_ms: Option<f64>,
    tpot_slo_ms: Option<f64>,
) -> sim::Config {
    let mut cfg = config.inner;
    cfg.slo = sim::Slo {
        ttft: ttft_slo_ms.map(|ms| ms / 1e3),
        tpot: tpot_slo_ms.map(|ms| ms / 1e3),
    };
    cfg
}

/// Run one simulation. Lengths: the trace's, else `isl`/`osl` (fixed, or uniform over
/// `length_range` × nominal). Load: `rate_rps` (open loop), `concurrency` (closed loop), or
/// neither with a trace (its arrival times). Goodput counts requests within both SLOs.
#[pyfunction]
#[pyo3(signature = (config, *, isl, osl, length_range, requests, seed, rate_rps, concurrency, arrival, burstiness, trace, ttft_slo_ms, tpot_slo_ms))]
#[allow(clippy::too_many_arguments)]
fn simulate(
    py: Python<'_>,
    config: &PySimConfig,
    isl: u32,
    osl: u32,
    length_range: Option<(f64, f64)>,
    requests: Option<usize>,
    seed: u64,
    rate_rps: Option<f64>,
    concurrency: Option<u32>,
    arrival: &str,
    burstiness: f64,
    trace: Option<&PySimTrace>,
    ttft_slo_ms: Option<f64>,
    tpot_slo_ms: Option<f64>,
) -> PyResult<PySimResult> {
    let arrival = sim_arrival(py, arrival, burstiness)?;
    let cfg = with_slo(config, ttft_slo_ms, tpot_slo_ms);
    let lengths = sim_lengths(isl, osl, length_range);
    let trace = trace.map(|t| &t.inner);
    let outcome = released(py, || -> Result<sim::SimResult, sim::SimError> {
        let (reqs, load) = sim::build_requests(
            &lengths,
            requests,
            seed,
            rate_rps,
            concurrency,
            &arrival,
            trace,
        )?;
        sim::simulate(&cfg, &load, &reqs)
    })?;
    let r = outcome.map_err(|e| sim_error(py, e))?;
    sim_result(py, r, rate_rps, concurrency, seed)
}

/// The answer of `pdtp.max_rate_within_slo`.
#[pyclass(frozen, module = "pdtp._core", name = "RateSearch")]
struct PyRateSearch {
    /// Highest rate found whose TTFT and TPOT quantiles meet the SLOs (0: none).
    #[pyo3(get)]
    rate_rps: f64,
    /// Lowest rate found to miss them (the answer lies in between).
    #[pyo3(get)]
    failing_rps: f64,
    #[pyo3(get)]
    percentile: f64,
    #[pyo3(get)]
    simulations: u32,
    /// The simulation at `rate_rps` (None when no rate meets the SLOs).
    #[pyo3(get)]
    result: Option<Py<PySimResult>>,
}

#[pymethods]
impl PyRateSearch {
    fn __repr__(&self) -> String {
        format!(
            "RateSearch(rate_rps={:.4}, failing_rps={:.4}, percentile={}, simulations={})",
            self.rate_rps, self.failing_rps, self.percentile, self.simulations
        )
    }
}

#[pyfunction]
#[pyo3(signature = (config, *, isl, osl, length_range, requests, seed, arrival, burstiness, percentile, tolerance, hint_rps, ttft_slo_ms, tpot_slo_ms))]
#[allow(clippy::too_many_arguments)]
fn max_rate_within_slo(
    py: Python<'_>,
    config: &PySimConfig,
    isl: u32,
    osl: u32,
    length_range: Option<(f64, f64)>,
    requests: usize,
    seed: u64,
    arrival: &str,
    burstiness: f64,
    percentile: f64,
    tolerance: f64,
    hint_rps: Option<f64>,
    ttft_slo_ms: Option<f64>,
    tpot_slo_ms: Option<f64>,
) -> PyResult<PyRateSearch> {
    let opts = sim::SearchOptions {
        percentile,
        requests,
        lengths: sim_lengths(isl, osl, length_range),
        arrival: sim_arrival(py, arrival, burstiness)?,
        seed,
        rel_tol: tolerance,
        hint_rps,
    };
    let cfg = with_slo(config, ttft_slo_ms, tpot_slo_ms);
    let s =
        released(py, || sim::max_rate_within_slo(&cfg, &opts))?.map_err(|e| sim_error(py, e))?;
    let rate = s.rate_rps;
    let result = match s.result {
        Some(r) => Some(Py::new(py, sim_result(py, r, Some(rate), None, seed)?)?),
        None => None,
    };
    Ok(PyRateSearch {
        rate_rps: rate,
        failing_rps: s.failing_rps,
        percentile,
        simulations: s.simulations,
        result,
    })
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(remote_tp_rank, m)?)?;
    m.add_function(wrap_pyfunction!(validate_kv_heads, m)?)?;
    m.add_function(wrap_pyfunction!(expected_ack_count, m)?)?;
    m.add_function(wrap_pyfunction!(check_pair, m)?)?;
    m.add_function(wrap_pyfunction!(alternatives, m)?)?;
    m.add_function(wrap_pyfunction!(loadable_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(transfer_map, m)?)?;
    m.add_function(wrap_pyfunction!(connectors, m)?)?;
    m.add_function(wrap_pyfunction!(predict_prefill, m)?)?;
    m.add_function(wrap_pyfunction!(predict_decode, m)?)?;
    m.add_function(wrap_pyfunction!(candidate_table, m)?)?;
    m.add_function(wrap_pyfunction!(enumerate_best, m)?)?;
    m.add_function(wrap_pyfunction!(side_option, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_budgets, m)?)?;
    // simulator
    m.add_class::<PySimConfig>()?;
    m.add_class::<PySimPool>()?;
    m.add_class::<PySimTrace>()?;
    m.add_class::<PySimResult>()?;
    m.add_class::<PyPercentiles>()?;
    m.add_class::<PySideStats>()?;
    m.add_class::<PyRateSearch>()?;
    m.add_function(wrap_pyfunction!(parse_trace, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(max_rate_within_slo, m)?)?;
    m.add("SIM_MAX_REQUESTS", sim::MAX_REQUESTS)?;
    m.add("SIM_MAX_OUTPUT_TOKENS", sim::MAX_OUTPUT_TOKENS)?;
    m.add("SIM_MAX_TRACE_BYTES", sim::trace::MAX_TRACE_BYTES)?;
    m.add("MAX_MAP_TP", transfer::MAX_MAP_TP)?;
    m.add("CAPACITY_SCALE", plan::CAPACITY_SCALE)?;
    Ok(())
}
