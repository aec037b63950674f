//! The thin PyO3 layer: converts types, releases the GIL around heavy work and maps core
//! errors onto pdtp's Python exception hierarchy (`pdtp.errors`). No rule logic lives here.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use crate::check::{self, Shape, VllmError};
use crate::connector::{self, ConnectorProfile};
use crate::layout::Layout;
use crate::perf::fit::{self as perf_fit, FitOptions, FitPoint, Prior};
use crate::perf::serving::{self, Engine, ServingWorkload};
use crate::perf::{self, Constants, GpuPerf, ModelPerf, StepBatch, WeightFormat, Workload};
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
        num_moe_layers: num(d, "num_moe_layers")?,
        num_sliding_layers: num(d, "num_sliding_layers")?,
        sliding_window: num(d, "sliding_window")?,
        hidden_size: num(d, "hidden_size")?,
        num_attention_heads: num(d, "num_attention_heads")?,
        num_kv_heads: num(d, "num_kv_heads")? as i64,
        head_dim: num(d, "head_dim")?,
        is_mla: num(d, "is_mla")? != 0.0,
        kv_lora_rank: num(d, "kv_lora_rank")?,
        qk_rope_head_dim: num(d, "qk_rope_head_dim")?,
        weight_bytes: num(d, "weight_bytes")?,
        expert_weight_bytes: num(d, "expert_weight_bytes")?,
        unread_weight_bytes: num(d, "unread_weight_bytes")?,
        num_experts: num(d, "num_experts")?,
        experts_per_token: num(d, "experts_per_token")?,
        active_params: num(d, "active_params")?,
        kv_dtype_bytes: num(d, "kv_dtype_bytes")?,
        dense_format: WeightFormat::from_code(num(d, "dense_format")?),
        expert_format: WeightFormat::from_code(num(d, "expert_format")?),
    })
}

fn gpu_perf(d: &Bound<'_, PyDict>) -> PyResult<GpuPerf> {
    Ok(GpuPerf {
        memory_bytes: num(d, "memory_bytes")?,
        hbm_bandwidth: num(d, "hbm_bandwidth")?,
        peak_flops: num(d, "peak_flops")?,
        bf16_flops: num(d, "bf16_flops")?,
        link_bandwidth: num(d, "link_bandwidth")?,
    })
}

/// Constants from a dict keyed by `Constants::FIELDS` (every field required).
fn constants(d: &Bound<'_, PyDict>) -> PyResult<Constants> {
    let mut c = Constants {
        mfu_prefill: 0.0,
        mfu_decode: 0.0,
        mfu_attention: 0.0,
        mbu: 0.0,
        kv_read_efficiency: 0.0,
        moe_weight_efficiency: 0.0,
        ep_weight_efficiency: 0.0,
        fp8_weight_efficiency: 0.0,
        fp4_weight_efficiency: 0.0,
        int4_weight_efficiency: 0.0,
        allreduce_latency: 0.0,
        alltoall_latency: 0.0,
        kernel_overhead: 0.0,
        seq_overhead: 0.0,
        step_overhead: 0.0,
        api_overhead: 0.0,
        schedule_wait_steps: 0.0,
        reserve_bytes: 0.0,
        ttft_queue_factor: 0.0,
        kv_transfer_bandwidth: 0.0,
        kv_transfer_latency: 0.0,
        max_num_seqs: 0.0,
    };
    for (i, name) in Constants::FIELDS.iter().enumerate() {
        c.set(i, num(d, name)?);
    }
    Ok(c)
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

// ---- performance model v2: step time, aggregated serving, calibration fit -------------------

/// A layout from Python's `(tp, pp, dp, ep)`.
type LayoutTuple = (i64, i64, i64, bool);

fn layout(t: LayoutTuple) -> Layout {
    Layout {
        tp: t.0,
        pp: t.1,
        dp: t.2,
        ep: t.3,
    }
}

fn engine(py: Python<'_>, name: &str) -> PyResult<Engine> {
    match name {
        "vllm" => Ok(Engine::Vllm),
        "sglang" => Ok(Engine::Sglang),
        other => Err(pdtp_error(
            py,
            "InvalidArgumentError",
            format!("engine must be 'vllm' or 'sglang', got {other:?}"),
        )),
    }
}

fn serving_workload(py: Python<'_>, d: &Bound<'_, PyDict>) -> PyResult<ServingWorkload> {
    let name: String = match d.get_item("engine")? {
        Some(v) => v.extract()?,
        None => return Err(pyo3::exceptions::PyKeyError::new_err("engine")),
    };
    Ok(ServingWorkload {
        isl: num(d, "isl")?,
        osl: num(d, "osl")?,
        concurrency: opt_num(d, "concurrency")?,
        num_prompts: opt_num(d, "num_prompts")?.unwrap_or(f64::INFINITY),
        max_num_seqs: num(d, "max_num_seqs")?,
        max_num_batched_tokens: num(d, "max_num_batched_tokens")?,
        gpu_memory_utilization: num(d, "gpu_memory_utilization")?,
        engine: engine(py, &name)?,
    })
}

/// Seconds one engine step of `layout` takes for the batch (the one step-cost function).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (model, gpu, consts, layout, decode_seqs, decode_context_tokens, prefill_tokens, prefill_attention_work))]
fn step_time(
    py: Python<'_>,
    model: &Bound<'_, PyDict>,
    gpu: &Bound<'_, PyDict>,
    consts: &Bound<'_, PyDict>,
    layout: LayoutTuple,
    decode_seqs: f64,
    decode_context_tokens: f64,
    prefill_tokens: f64,
    prefill_attention_work: f64,
) -> PyResult<f64> {
    let (m, g, c) = (model_perf(model)?, gpu_perf(gpu)?, constants(consts)?);
    let batch = StepBatch {
        decode_seqs,
        decode_context_tokens,
        prefill_tokens,
        prefill_attention_work,
    };
    let l = self::layout(layout);
    shielded(py, || perf::step_time(&m, &g, &c, &l, &batch))
}

/// The steady state of one aggregated instance (times in seconds).
#[pyclass(frozen, get_all, module = "pdtp._core")]
#[derive(Debug, Clone, Copy)]
pub struct ServingPoint {
    pub ttft: f64,
    pub ttft_steady: f64,
    pub tpot: f64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub batch: f64,
    pub max_batch: f64,
    pub batch_limited: bool,
}

impl From<serving::ServingPoint> for ServingPoint {
    fn from(p: serving::ServingPoint) -> Self {
        ServingPoint {
            ttft: p.ttft,
            ttft_steady: p.ttft_steady,
            tpot: p.tpot,
            requests_per_s: p.requests_per_s,
            output_tokens_per_s: p.output_tokens_per_s,
            batch: p.batch,
            max_batch: p.max_batch,
            batch_limited: p.batch_limited,
        }
    }
}

/// Aggregated serving of one instance; None when one sequence does not fit.
#[pyfunction]
fn predict_serving(
    py: Python<'_>,
    model: &Bound<'_, PyDict>,
    gpu: &Bound<'_, PyDict>,
    consts: &Bound<'_, PyDict>,
    layout: LayoutTuple,
    work: &Bound<'_, PyDict>,
) -> PyResult<Option<ServingPoint>> {
    let (m, g, c) = (model_perf(model)?, gpu_perf(gpu)?, constants(consts)?);
    let w = serving_workload(py, work)?;
    let l = self::layout(layout);
    shielded(py, || {
        serving::serving(&m, &g, &c, &l, &w).map(ServingPoint::from)
    })
}

/// Per-layout side numbers: `(weights_fit, max_sequences(isl + osl), prefill time,
/// ttft, prefill requests/s, decode batch, decode max_batch, tpot, decode requests/s)`.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn layout_sides(
    py: Python<'_>,
    model: &Bound<'_, PyDict>,
    gpu: &Bound<'_, PyDict>,
    consts: &Bound<'_, PyDict>,
    layout: LayoutTuple,
    work: &Bound<'_, PyDict>,
    util: f64,
) -> PyResult<(bool, f64, f64, f64, f64, i64, i64, f64, f64)> {
    let (m, g, c, w) = (
        model_perf(model)?,
        gpu_perf(gpu)?,
        constants(consts)?,
        workload(work)?,
    );
    let l = self::layout(layout);
    shielded(py, || {
        let p = perf::prefill_point_layout(&m, &g, &c, &l, &w, util);
        let d = perf::decode_point_layout(&m, &g, &c, &l, &w, util);
        (
            perf::weights_fit_layout(&m, &g, &c, &l, util),
            perf::max_sequences(&m, &g, &c, &l, util, w.isl + w.osl),
            p.time,
            p.ttft,
            p.requests_per_s,
            d.batch,
            d.max_batch,
            d.tpot,
            d.requests_per_s,
        )
    })
}

/// One calibration point from Python: `(model, gpu, consts, layout, workload, params,
/// measured)` with params as `[(constant name, parameter index)]` and measured as
/// `(tpot_s, ttft_s, output_tokens_per_s)` (NaN where not measured).
type PointTuple<'py> = (
    Bound<'py, PyDict>,
    Bound<'py, PyDict>,
    Bound<'py, PyDict>,
    LayoutTuple,
    Bound<'py, PyDict>,
    Vec<(String, usize)>,
    (f64, f64, f64),
);

fn fit_points(py: Python<'_>, points: Vec<PointTuple<'_>>) -> PyResult<Vec<FitPoint>> {
    points
        .into_iter()
        .map(|(m, g, c, l, w, params, measured)| {
            let params = params
                .into_iter()
                .map(|(name, index)| match Constants::field_index(&name) {
                    Some(f) => Ok((f, index)),
                    None => Err(pdtp_error(
                        py,
                        "InvalidArgumentError",
                        format!("unknown constant {name:?}"),
                    )),
                })
                .collect::<PyResult<Vec<_>>>()?;
            Ok(FitPoint {
                model: model_perf(&m)?,
                gpu: gpu_perf(&g)?,
                constants: constants(&c)?,
                layout: layout(l),
                workload: serving_workload(py, &w)?,
                params,
                measured: [measured.0, measured.1, measured.2],
            })
        })
        .collect()
}

/// Fit parameters to measured points (see `perf::fit`), with priors `(param, parent or
/// None for 1, weight)`: `(x, cost, iterations, complete)`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (points, priors, x0, lo, hi, weights, scale, max_iterations, time_limit_s))]
fn fit_constants(
    py: Python<'_>,
    points: Vec<PointTuple<'_>>,
    priors: Vec<(usize, Option<usize>, f64)>,
    x0: Vec<f64>,
    lo: Vec<f64>,
    hi: Vec<f64>,
    weights: (f64, f64, f64),
    scale: f64,
    max_iterations: usize,
    time_limit_s: f64,
) -> PyResult<(Vec<f64>, f64, usize, bool)> {
    let pts = fit_points(py, points)?;
    if lo.len() != x0.len() || hi.len() != x0.len() {
        return Err(pdtp_error(
            py,
            "InvalidArgumentError",
            "x0, lo and hi must have one entry per parameter".into(),
        ));
    }
    let deadline = std::time::Duration::try_from_secs_f64(time_limit_s.max(0.0))
        .ok()
        .and_then(|d| std::time::Instant::now().checked_add(d));
    let opts = FitOptions {
        weights: [weights.0, weights.1, weights.2],
        scale,
        max_iterations,
        deadline,
    };
    let priors: Vec<Prior> = priors
        .into_iter()
        .map(|(param, parent, weight)| Prior {
            param,
            parent,
            weight,
        })
        .collect();
    let res = released(py, || perf_fit::fit(&pts, &priors, &x0, &lo, &hi, opts))?;
    Ok((res.x, res.cost, res.iterations, res.complete))
}

/// Predictions `(tpot_s, ttft_s, output_tokens_per_s)` of calibration points under
/// parameters `x` (NaN where nothing fits).
#[pyfunction]
fn predict_points(
    py: Python<'_>,
    points: Vec<PointTuple<'_>>,
    x: Vec<f64>,
) -> PyResult<Vec<(f64, f64, f64)>> {
    let pts = fit_points(py, points)?;
    let out = released(py, || perf_fit::predict_all(&pts, &x))?;
    Ok(out.into_iter().map(|v| (v[0], v[1], v[2])).collect())
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
    m.add_function(wrap_pyfunction!(step_time, m)?)?;
    m.add_function(wrap_pyfunction!(predict_serving, m)?)?;
    m.add_function(wrap_pyfunction!(layout_sides, m)?)?;
    m.add_function(wrap_pyfunction!(fit_constants, m)?)?;
    m.add_function(wrap_pyfunction!(predict_points, m)?)?;
    m.add_class::<ServingPoint>()?;
    m.add("CONSTANT_FIELDS", Constants::FIELDS.to_vec())?;
    m.add("MAX_MAP_TP", transfer::MAX_MAP_TP)?;
    m.add("CAPACITY_SCALE", plan::CAPACITY_SCALE)?;
    Ok(())
}
