//! The thin PyO3 layer: converts types, releases the GIL around heavy work and maps core
//! errors onto pdtp's Python exception hierarchy (`pdtp.errors`). No rule logic lives here.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use crate::check::{self, Shape, VllmError};
use crate::connector::{self, ConnectorProfile};
use crate::perf::{self, Constants, GpuPerf, ModelPerf, Workload};
use crate::plan::{self, Candidate, Problem, SideOption};
use crate::rules::{self, RuleError};
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
        RuleError::Assertion(m) => pdtp_error(py, "RuleAssertionError", m),
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

/// `"name"` or `"name@X.Y.Z"` → the resolved connector, or pdtp's error naming what is valid.
fn resolved(py: Python<'_>, key: &str) -> PyResult<connector::Resolved> {
    connector::resolve(key).map_err(|e| match e {
        connector::ResolveError::UnknownName(m) => pdtp_error(py, "UnknownNameError", m),
        connector::ResolveError::BadVersion(m) => pdtp_error(py, "InvalidArgumentError", m),
    })
}

fn profile(py: Python<'_>, key: &str) -> PyResult<&'static ConnectorProfile> {
    resolved(py, key).map(|r| r.profile)
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

type DecodeRow = (i64, Vec<i64>, Vec<(i64, Vec<i64>)>, Vec<i64>);
type PrefillRow = (i64, Vec<i64>, Vec<i64>, Vec<i64>, i64);

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
                .map(|r| (r.rank, r.heads, r.sources, r.releases))
                .collect(),
            m.prefill
                .into_iter()
                .map(|r| (r.rank, r.heads, r.readers, r.released_by, r.expected_acks))
                .collect(),
        )),
        Err(v) => {
            let class = match v.error {
                VllmError::ValueError => "RuleValueError",
                VllmError::NotImplementedError => "RuleNotImplementedError",
                VllmError::AssertionError => "RuleAssertionError",
                VllmError::ZeroDivisionError => "RuleZeroDivisionError",
                VllmError::MoRIIOError => "RuleConnectorError",
                VllmError::None => "UnworkablePairError",
            };
            // vLLM's text; where it has none (a bare assert) or names no cause, the hint.
            let message = match v.error {
                _ if v.message.is_empty() => v.hint,
                VllmError::ZeroDivisionError => format!("{} ({})", v.message, v.hint),
                _ => v.message,
            };
            Err(pdtp_error(py, class, message))
        }
    }
}

// ---- connector profiles per vLLM release ------------------------------------------------

/// A connector resolved at one vLLM version (what `resolve_connector` returns).
#[pyclass(frozen, get_all, module = "pdtp._core")]
struct ConnectorInfo {
    name: &'static str,
    vllm_version: String,
    rules_version: String,
    key: String,
    kv_connector: &'static str,
    prefill_role: &'static str,
    decode_role: &'static str,
    mode: Option<&'static str>,
    requires_replicated_heads: bool,
    summary: &'static str,
}

/// Resolve `"name"` or `"name@X.Y.Z"`; unknown names and versions raise pdtp's errors.
#[pyfunction]
fn resolve_connector(py: Python<'_>, key: &str) -> PyResult<ConnectorInfo> {
    let r = resolved(py, key)?;
    Ok(ConnectorInfo {
        name: r.connector.name,
        vllm_version: r.version.to_string(),
        rules_version: r.rules_version.to_string(),
        key: r.key(),
        kv_connector: r.connector.kv_connector,
        prefill_role: r.connector.prefill_role,
        decode_role: r.connector.decode_role,
        mode: r.connector.mode,
        requires_replicated_heads: r.profile.requires_replicated_heads(),
        summary: r.connector.summary,
    })
}

/// Every connector name, in listing order.
#[pyfunction]
fn connector_names() -> Vec<&'static str> {
    connector::names()
}

/// Every vLLM release the golden data covers, oldest first.
#[pyfunction]
fn vllm_releases() -> Vec<&'static str> {
    connector::RELEASES.to_vec()
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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(remote_tp_rank, m)?)?;
    m.add_function(wrap_pyfunction!(validate_kv_heads, m)?)?;
    m.add_function(wrap_pyfunction!(expected_ack_count, m)?)?;
    m.add_function(wrap_pyfunction!(check_pair, m)?)?;
    m.add_function(wrap_pyfunction!(alternatives, m)?)?;
    m.add_function(wrap_pyfunction!(loadable_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(transfer_map, m)?)?;
    m.add_class::<ConnectorInfo>()?;
    m.add_function(wrap_pyfunction!(resolve_connector, m)?)?;
    m.add_function(wrap_pyfunction!(connector_names, m)?)?;
    m.add_function(wrap_pyfunction!(vllm_releases, m)?)?;
    m.add_function(wrap_pyfunction!(predict_prefill, m)?)?;
    m.add_function(wrap_pyfunction!(predict_decode, m)?)?;
    m.add_function(wrap_pyfunction!(candidate_table, m)?)?;
    m.add_function(wrap_pyfunction!(enumerate_best, m)?)?;
    m.add_function(wrap_pyfunction!(side_option, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_budgets, m)?)?;
    m.add("MAX_MAP_TP", transfer::MAX_MAP_TP)?;
    m.add("CAPACITY_SCALE", plan::CAPACITY_SCALE)?;
    Ok(())
}
