//! The thin PyO3 layer: converts types, releases the GIL around heavy work and maps core
//! errors onto pdtp's Python exception hierarchy (`pdtp.errors`). No rule logic lives here.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::check::{self, Shape, VllmError};
use crate::connector::{self, ConnectorProfile};
use crate::perf::{self, Constants, GpuPerf, ModelPerf, Workload};
use std::sync::Arc;

use crate::layout::Layout;
use crate::layout_rules::{self, LayoutModel};
use crate::perf::fit::{self as perf_fit, FitOptions, FitPoint, Prior};
use crate::perf::serving::{self, Engine, ServingWorkload};
use crate::perf::{StepBatch, WeightFormat};
use crate::plan::{
    self, cluster::TooLarge, oracle, relax, rule_blind, Candidates, Choice, Families, GpuType,
    LayoutSpace, Mode, ModelSpec, MoveCost, NodeClass, Objective, Order, Pair, Role, Running,
    Scenario, Sense, SideOption, Solution, Value, Vendor,
};
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

/// `(code, side, message, hint, vllm_error, when, user_error, user_message, consequence)`:
/// what reaches the user is `user_error`/`user_message` (vLLM's raised exception unless the
/// connector only logs it), at `when` (`Stage::name`).
type ViolationTuple = (
    &'static str,
    &'static str,
    String,
    String,
    &'static str,
    &'static str,
    &'static str,
    String,
    &'static str,
);
/// `(code, message, consequence)`.
type WarningTuple = (&'static str, String, &'static str);

fn violation_tuple(v: check::Violation) -> ViolationTuple {
    let (user_error, user_message) = v.user_error();
    let (user_error, user_message) = (user_error.name(), user_message.to_string());
    (
        v.code,
        v.side,
        v.message,
        v.hint,
        v.error.name(),
        v.when.name(),
        user_error,
        user_message,
        v.consequence,
    )
}

fn warning_tuple(w: check::Warning) -> WarningTuple {
    (w.code, w.message, w.consequence)
}

/// `(violations, warnings)` for one pair; violations as
/// `(code, side, message, hint, vllm_error)`, warnings as `(code, message)`.
#[pyfunction]
#[pyo3(signature = (num_attention_heads, num_kv_heads, is_mla, prefill_tp, decode_tp, connector, max_acks=None, hybrid=false))]
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn check_pair(
    py: Python<'_>,
    num_attention_heads: i64,
    num_kv_heads: i64,
    is_mla: bool,
    prefill_tp: i64,
    decode_tp: i64,
    connector: &str,
    max_acks: Option<i64>,
    hybrid: bool,
) -> PyResult<(Vec<ViolationTuple>, Vec<WarningTuple>)> {
    let prof = profile(py, connector)?;
    let shape = Shape {
        num_attention_heads,
        num_kv_heads,
        is_mla,
        hybrid,
    };
    let report = shielded(py, || {
        check::check_pair(&shape, prefill_tp, decode_tp, prof, max_acks)
    })?;
    Ok((
        report.violations.into_iter().map(violation_tuple).collect(),
        report.warnings.into_iter().map(warning_tuple).collect(),
    ))
}

/// The connector's refusal of a GPU vendor (`AMD`/`NVIDIA`), or `None`.
#[pyfunction]
fn connector_gpu_violation(
    py: Python<'_>,
    connector: &str,
    vendor: &str,
) -> PyResult<Option<ViolationTuple>> {
    let prof = profile(py, connector)?;
    let conn = crate::connector::connector(prof.connector)
        .ok_or_else(|| invalid(py, format!("unknown connector {connector:?}")))?;
    Ok(check::gpu_violation(conn, vendor).map(violation_tuple))
}

#[pyfunction]
#[pyo3(signature = (num_attention_heads, num_kv_heads, is_mla, prefill_tp, decode_tp, connector, max_acks, prefill_sizes, decode_sizes, limit, hybrid=false))]
#[allow(clippy::too_many_arguments)]
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
    hybrid: bool,
) -> PyResult<Vec<(i64, i64)>> {
    let prof = profile(py, connector)?;
    let shape = Shape {
        num_attention_heads,
        num_kv_heads,
        is_mla,
        hybrid,
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
        hybrid: false,
    };
    shielded(py, || check::loadable_sizes(&shape, bound))
}

type DecodeRow = (i64, Vec<i64>, Vec<(i64, Vec<i64>)>, Vec<i64>, Vec<i64>);
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
                .map(|r| (r.rank, r.heads, r.sources, r.releases, r.rotates))
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
                VllmError::MoRIIOError | VllmError::HandshakeError => "RuleConnectorError",
                VllmError::RuntimeError => "RuleRuntimeError",
                VllmError::KeyError => "RuleKeyError",
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

// ---- layouts: parsing and vLLM's layout rules ----------------------------------------------

/// `(tp, pp, dp, ep)` of a layout string (`tp2dp4ep`, `tp8pp2`, `tp2·dp4·ep`); an
/// `InvalidArgumentError` naming the form otherwise.
#[pyfunction]
fn parse_layout(py: Python<'_>, text: &str) -> PyResult<LayoutTuple> {
    Layout::parse(text)
        .map(|l| (l.tp, l.pp, l.dp, l.ep))
        .map_err(|e| pdtp_error(py, "InvalidArgumentError", e))
}

/// The `(first, end)` layers of each of `pp` pipeline stages (vLLM's `get_pp_indices`).
#[pyfunction]
fn stage_layers(py: Python<'_>, pp: i64, num_layers: i64) -> PyResult<Vec<(i64, i64)>> {
    if !(1..=crate::layout::MAX_DIM).contains(&pp) || !(0..=1 << 20).contains(&num_layers) {
        return Err(invalid(
            py,
            format!(
                "pp must be in [1, {}] and num_layers in [0, 2^20]",
                crate::layout::MAX_DIM
            ),
        ));
    }
    let l = Layout {
        pp,
        ..Layout::tp(1)
    };
    shielded(py, || l.stage_layers(num_layers))
}

/// A model as the layout rules see it: `(heads, kv_heads, is_mla, layers, experts,
/// supports_pp, hybrid)`.
type LayoutModelTuple = (i64, i64, bool, i64, i64, bool, bool);

fn layout_model(t: LayoutModelTuple) -> LayoutModel {
    LayoutModel {
        shape: Shape {
            num_attention_heads: t.0,
            num_kv_heads: t.1,
            is_mla: t.2,
            hybrid: t.6,
        },
        num_layers: t.3,
        num_experts: t.4,
        supports_pp: t.5,
    }
}

/// `(violations, warnings)` of a (prefill layout, decode layout) pair, as `check_pair`.
#[pyfunction]
#[pyo3(signature = (model, prefill, decode, connector, max_acks=None))]
#[allow(clippy::type_complexity)]
fn check_layouts(
    py: Python<'_>,
    model: LayoutModelTuple,
    prefill: LayoutTuple,
    decode: LayoutTuple,
    connector: &str,
    max_acks: Option<i64>,
) -> PyResult<(Vec<ViolationTuple>, Vec<WarningTuple>)> {
    let prof = profile(py, connector)?;
    let (m, p, d) = (layout_model(model), layout(prefill), layout(decode));
    let report = shielded(py, || layout_rules::pair_report(&m, &p, &d, prof, max_acks))?;
    Ok((
        report.violations.into_iter().map(violation_tuple).collect(),
        report.warnings.into_iter().map(warning_tuple).collect(),
    ))
}

/// MoRIIO's port offsets for rank (`dp_rank`, `tp_rank`) of an instance of TP `tp` under a
/// connector key (`"moriio@X.Y.Z"`): `(bound, dialed)` — the offset the rank binds from
/// `handshake_port` and the one a peer dials to reach it, as that release's code derives them
/// (`connector::parallel`, proven by the layout golden data). `None` for NIXL.
#[pyfunction]
fn moriio_port_offsets(
    py: Python<'_>,
    connector: &str,
    dp_rank: i64,
    tp_rank: i64,
    tp: i64,
) -> PyResult<Option<(i64, i64)>> {
    let prof = profile(py, connector)?;
    if !(0..1 << 20).contains(&dp_rank)
        || !(1..=1 << 20).contains(&tp)
        || !(0..tp).contains(&tp_rank)
    {
        return Err(invalid(
            py,
            format!("need 0 <= dp_rank, 0 <= tp_rank < tp <= 2^20; got dp_rank={dp_rank}, tp_rank={tp_rank}, tp={tp}"),
        ));
    }
    let Some((_, dp_dial)) = prof.rules.moriio_dials() else {
        return Ok(None);
    };
    let bound = connector::moriio_bind_offset(dp_rank, tp_rank);
    // A peer of the same TP size reaches rank t of remote DP rank k (SameRank: no TP remap).
    let dialed =
        connector::moriio_dial_offset(connector::Dial::SameRank, dp_dial, dp_rank, tp, tp_rank, tp)
            .map_err(|e| invalid(py, e.message().to_string()))?;
    Ok(Some((bound, dialed)))
}

/// The load violations of one instance's layout (`side`: prefill, decode or aggregated).
#[pyfunction]
fn layout_load_violations(
    py: Python<'_>,
    model: LayoutModelTuple,
    layout_: LayoutTuple,
    side: &str,
    connector: &str,
) -> PyResult<Vec<ViolationTuple>> {
    let prof = profile(py, connector)?;
    let side: &'static str = match side {
        "prefill" => "prefill",
        "decode" => "decode",
        "aggregated" => layout_rules::AGGREGATED,
        s => {
            return Err(invalid(
                py,
                format!("side must be prefill, decode or aggregated, got {s:?}"),
            ))
        }
    };
    let (m, l) = (layout_model(model), layout(layout_));
    let v = shielded(py, || layout_rules::load_violations(&m, &l, side, prof))?;
    Ok(v.into_iter().map(violation_tuple).collect())
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
        scaleup_gpus: num(d, "scaleup_gpus")?,
        scaleout_bandwidth: num(d, "scaleout_bandwidth")?,
        scaleout_latency: num(d, "scaleout_latency")?,
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

/// One instance kind's operating point for any layout and role (`prefill`, `decode`,
/// `aggregated`): the side row, then `(ttft_s, concurrency, weight bytes per GPU)`. The
/// model's layout load rules are applied (`layout_model` as in `check_layouts`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn layout_option(
    py: Python<'_>,
    model: &Bound<'_, PyDict>,
    rules_model: LayoutModelTuple,
    gpu: &Bound<'_, PyDict>,
    consts: &Bound<'_, PyDict>,
    work: &Bound<'_, PyDict>,
    layout_: LayoutTuple,
    role: &str,
    util: f64,
    max_num_batched_tokens: f64,
) -> PyResult<(SideRow, f64, i64, f64)> {
    let (m, g, c, w) = (
        model_perf(model)?,
        gpu_perf(gpu)?,
        constants(consts)?,
        workload(work)?,
    );
    let role = role_of(py, role)?;
    let (lm, l) = (layout_model(rules_model), layout(layout_));
    let o = released(py, move || {
        let mut o = plan::candidates::operating_point(
            &m,
            &g,
            &c,
            &w,
            util,
            &l,
            role,
            max_num_batched_tokens,
        );
        o.loads = layout_rules::loads(&lm, &l);
        (o, perf::weight_bytes_per_gpu(&m, &l))
    })?;
    Ok((side_row(&o.0), o.0.ttft, o.0.concurrency, o.1))
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

// ---- the planning core: a typed Scenario in, typed rows, stages, hints and plans out ----

fn invalid(py: Python<'_>, message: String) -> PyErr {
    pdtp_error(py, "InvalidArgumentError", message)
}

/// One model of a scenario: its performance inputs, workload, GPU numbers per pool type
/// (the peak depends on its weight dtype), demand and weight.
#[pyclass(frozen, module = "pdtp._core", name = "ModelSpec")]
struct PyModelSpec {
    inner: ModelSpec,
}

#[pymethods]
impl PyModelSpec {
    #[new]
    #[pyo3(signature = (*, name, model, workload, gpus, demand_rps=0.0, weight=1.0, supports_pp=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: String,
        model: &Bound<'_, PyDict>,
        workload: &Bound<'_, PyDict>,
        gpus: Vec<Bound<'_, PyDict>>,
        demand_rps: f64,
        weight: f64,
        supports_pp: bool,
    ) -> PyResult<Self> {
        Ok(PyModelSpec {
            inner: ModelSpec {
                name,
                perf: model_perf(model)?,
                workload: self::workload(workload)?,
                gpu_perf: gpus.iter().map(gpu_perf).collect::<PyResult<_>>()?,
                demand_rps,
                weight,
                supports_pp,
            },
        })
    }

    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }
}

/// One GPU type of a scenario's pool.
#[pyclass(frozen, module = "pdtp._core", name = "GpuType")]
struct PyGpuType {
    inner: GpuType,
}

#[pymethods]
impl PyGpuType {
    #[new]
    #[pyo3(signature = (*, name, vendor, constants, node_size, price=0, max_num_batched_tokens=plan::candidates::DEFAULT_BATCHED_TOKENS))]
    fn new(
        py: Python<'_>,
        name: String,
        vendor: &str,
        constants: &Bound<'_, PyDict>,
        node_size: i64,
        price: i64,
        max_num_batched_tokens: f64,
    ) -> PyResult<Self> {
        let vendor = match vendor {
            "AMD" => Vendor::Amd,
            "NVIDIA" => Vendor::Nvidia,
            v => {
                return Err(invalid(
                    py,
                    format!("vendor must be AMD or NVIDIA, got {v:?}"),
                ))
            }
        };
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
                vendor,
                constants: self::constants(constants)?,
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
struct PyScenario {
    inner: Arc<Scenario>,
    connector_key: String,
}

/// A running side from Python: `(gpu type, role, (tp, pp, dp, ep), instances)`.
type RunningArg = (Option<usize>, String, LayoutTuple, i64);

fn role_of(py: Python<'_>, name: &str) -> PyResult<Role> {
    match name {
        "prefill" => Ok(Role::Prefill),
        "decode" => Ok(Role::Decode),
        "aggregated" => Ok(Role::Aggregated),
        r => Err(invalid(
            py,
            format!("role must be prefill, decode or aggregated, got {r:?}"),
        )),
    }
}

/// The layout space from Python: `None` (pdtp's default) or `(families, explicit)` with
/// families a list of names (`tp`, `ep`, `dp`, `pp`) and explicit layouts as tuples.
type LayoutsArg = Option<(Option<Vec<String>>, Vec<LayoutTuple>)>;

fn layout_space(py: Python<'_>, arg: LayoutsArg) -> PyResult<LayoutSpace> {
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
                match n.as_str() {
                    "tp" => f.tp = true,
                    "ep" => f.ep = true,
                    "dp" => f.dp = true,
                    "pp" => f.pp = true,
                    other => {
                        return Err(invalid(
                            py,
                            format!("layout family must be tp, ep, dp or pp, got {other:?}"),
                        ))
                    }
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
    #[pyo3(signature = (*, models, gpu_types, nodes, connector, objective, max_tp=None, max_acks=None, gpu_memory_utilization=0.9, move_cost=None, running=None, mode="disagg", layouts=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        models: Vec<PyRef<'_, PyModelSpec>>,
        gpu_types: Vec<PyRef<'_, PyGpuType>>,
        nodes: Vec<(usize, i64, i64)>,
        connector: &str,
        objective: &str,
        max_tp: Option<i64>,
        max_acks: Option<i64>,
        gpu_memory_utilization: f64,
        move_cost: Option<(f64, f64, f64, f64)>,
        running: Option<(RunningArg, RunningArg)>,
        mode: &str,
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
        let run = |r: RunningArg| -> PyResult<Running> {
            Ok(Running {
                gpu_type: r.0,
                role: role_of(py, &r.1)?,
                layout: layout(r.2),
                instances: r.3,
            })
        };
        let mode = match mode {
            "auto" => Mode::Auto,
            "disagg" => Mode::Disaggregated,
            "agg" => Mode::Aggregated,
            m => {
                return Err(invalid(
                    py,
                    format!("mode must be auto, disagg or agg, got {m:?}"),
                ))
            }
        };
        let layouts = layout_space(py, layouts)?;
        let objective = match objective {
            "throughput" => Objective::Throughput,
            "tokens_per_dollar" => Objective::TokensPerDollar,
            "gpus" => Objective::FewestGpus,
            "cost" => Objective::Cost,
            "max_min" => Objective::MaxMin,
            "weighted" => Objective::Weighted,
            "moves" => {
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
                    prefill: run(p)?,
                    decode: run(d)?,
                }
            }
            o => return Err(invalid(py, format!("unknown objective {o:?}"))),
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
                mode,
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
struct PyRow {
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
struct PyPair {
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
struct PyChoice {
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
struct PyStage {
    #[pyo3(get)]
    sense: &'static str,
    #[pyo3(get)]
    terms: Vec<(&'static str, i64)>,
}

/// A node fill pattern of one node class: (item size, how many).
#[pyclass(frozen, module = "pdtp._core", name = "Pattern")]
struct PyPattern {
    #[pyo3(get)]
    class_index: usize,
    #[pyo3(get)]
    items: Vec<(i64, i64)>,
}

/// One instance's place: its node (the first of `nodes` when it spans whole nodes), GPU
/// type, model, role, index within its role and the devices it uses on each of its nodes
/// (a node's free devices counted from 0).
#[pyclass(frozen, module = "pdtp._core", name = "Placed")]
struct PyPlaced {
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

/// Re-plan data: weights as integers and each running side's row, instances and size.
#[pyclass(frozen, module = "pdtp._core", name = "Moves")]
struct PyMoves {
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

type PySolution<'py> = Vec<Option<PyRef<'py, PyChoice>>>;
type OutSolution = Vec<Option<PyChoice>>;

/// Everything a planner decides over, for one scenario: rows, pairs, node classes and
/// patterns, the order's stages, and the hint, bounds, oracle and placement behind them.
#[pyclass(frozen, module = "pdtp._core", name = "Candidates")]
struct PyCandidates {
    c: Arc<Candidates>,
    order: Arc<Order>,
    /// The planner call's time limit (`candidates(time_limit_s=)`): the closed-form help
    /// (hint, rule-blind and other-mode comparisons) stops its node searches there.
    deadline: Option<std::time::Instant>,
}

/// `time_limit_s` from now, None without a limit (or one too large to represent).
fn deadline_in(time_limit_s: Option<f64>) -> Option<std::time::Instant> {
    time_limit_s.and_then(|s| {
        std::time::Duration::try_from_secs_f64(s.max(0.0))
            .ok()
            .and_then(|d| std::time::Instant::now().checked_add(d))
    })
}

fn out_solution(sol: &Solution) -> OutSolution {
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

fn value_obj(py: Python<'_>, v: &Value) -> PyResult<PyObject> {
    Ok(match v {
        Value::Int(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::Ratio(n, d) => (n, d).into_pyobject(py)?.into_any().unbind(),
    })
}

#[pymethods]
impl PyCandidates {
    #[getter]
    fn rows(&self) -> Vec<PyRow> {
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

    #[getter]
    fn pairs(&self) -> Vec<PyPair> {
        self.c.pairs.iter().map(py_pair).collect()
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
        Ok(released(py, move || pattern_usage(&c, &sol))?.unwrap_or_default())
    }

    /// The fraction step count (fleet fractions are multiples of 1/this).
    #[getter]
    fn fraction_scale(&self) -> i64 {
        plan::candidates::FRACTION_SCALE
    }

    /// A valid bound on stage `stage`'s optimum given earlier stages' values (None: no
    /// bound from the relaxation).
    fn bound(&self, stage: usize, fixed: Vec<i128>) -> Option<i128> {
        relax::bound(&self.c, &self.order, stage, &fixed)
    }

    /// A feasible plan to start CP-SAT from (single-model planners).
    fn hint(&self, py: Python<'_>) -> PyResult<Option<OutSolution>> {
        let (c, o, until) = (self.c.clone(), self.order.clone(), self.deadline);
        let best = released(py, move || {
            let _limit = plan::cluster::until(until);
            relax::hint(&c, &o)
        })?;
        Ok(best.map(|s| out_solution(&s)))
    }

    /// Whether the time limit given to `candidates` has passed: the closed-form help
    /// answered since then may have skipped pairs.
    #[getter]
    fn out_of_time(&self) -> bool {
        self.deadline
            .is_some_and(|t| std::time::Instant::now() >= t)
    }

    /// Per pair (as `pairs`), a valid bound on stage 0 for plans using it (None: no plan
    /// can use the pair); None when the relaxation bounds no pair (see `relax::pair_bounds`).
    fn pair_bounds(&self, py: Python<'_>) -> PyResult<Option<Vec<Option<i128>>>> {
        let (c, o) = (self.c.clone(), self.order.clone());
        released(py, move || relax::pair_bounds(&c, &o))
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
        let c = &self.c;
        for ch in sol.iter().flatten() {
            if !c.pairs.contains(&ch.pair) {
                return Ok(Some(false));
            }
            if c.scenario.objective.serves_demand() {
                if ch
                    .parts()
                    .any(|(r, n)| c.rows[r].need.is_none_or(|need| n < need))
                {
                    return Ok(Some(false));
                }
            } else if ch.prefill < 1 || ch.decode < 1 {
                return Ok(Some(false));
            }
        }
        if !c.scenario.objective.is_fleet() && sol.iter().all(|x| x.is_none()) {
            return Ok(Some(false));
        }
        let mut need = Vec::new();
        for ch in sol.iter().flatten() {
            need.extend(ch.parts().map(|(r, n)| (c.rows[r].item.unwrap(), n)));
        }
        Ok(match c.cluster.fits(&need) {
            Ok(ok) => Some(ok),
            Err(TooLarge) => (c.cluster.classes.iter().map(|k| k.count).sum::<i64>() <= 64)
                .then(|| oracle::packs(&c.cluster, c, &sol)),
        })
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
    fn best_of_mode(&self, py: Python<'_>, mode: &str) -> PyResult<Option<OutSolution>> {
        let aggregated = match mode {
            "agg" => true,
            "disagg" => false,
            m => {
                return Err(invalid(
                    py,
                    format!("mode must be agg or disagg, got {m:?}"),
                ))
            }
        };
        let (c, o, until) = (self.c.clone(), self.order.clone(), self.deadline);
        let best = released(py, move || {
            let _limit = plan::cluster::until(until);
            relax::best_of_kind(&c, &o, aggregated)
        })?;
        Ok(best.map(|s| out_solution(&s)))
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
        let placed = released(py, move || placement(&c, &sol, usage.as_deref()))?;
        placed.ok_or_else(|| {
            pdtp_error(
                py,
                "PdtpError",
                "internal error: the plan's instances could not be placed (please report)".into(),
            )
        })
    }
}

fn py_pair(p: &Pair) -> PyPair {
    PyPair {
        model: p.model,
        prefill: p.prefill,
        decode: p.decode,
    }
}

/// Instances → nodes: every GPU type's items by the exact closed forms, else by the
/// pattern usage a CP-SAT solution gives. Linear in nodes and instances.
fn placement(
    c: &Candidates,
    sol: &Solution,
    usage: Option<&[(usize, i64)]>,
) -> Option<Vec<PyPlaced>> {
    // Items in plan order: (type, piece, (model, role, index)).
    let mut items: Vec<(usize, i64, usize, &'static str, i64)> = Vec::new();
    for (m, ch) in sol.iter().enumerate() {
        let Some(ch) = ch else { continue };
        for (row, n) in ch.parts() {
            let r = &c.rows[row];
            let it = r.item?;
            for i in 0..n {
                for _ in 0..it.pieces {
                    items.push((it.gpu_type, it.piece, m, r.role.name(), i));
                }
            }
        }
    }
    let types = c.scenario.gpu_types.len();
    // Per type: node number of each item of each size, in order.
    let mut slots: Vec<std::collections::BTreeMap<i64, std::collections::VecDeque<usize>>> =
        Vec::new();
    let patterns: Vec<plan::Pattern> = (0..types)
        .flat_map(|t| c.cluster.patterns(t, &c.sizes[t]))
        .collect();
    for t in 0..types {
        let mut counts = std::collections::BTreeMap::new();
        for it in items.iter().filter(|it| it.0 == t) {
            *counts.entry(it.1).or_insert(0i64) += 1;
        }
        let placed = match c.cluster.place(t, &counts) {
            Ok(p) => p,
            Err(TooLarge) => by_patterns(c, t, &counts, &patterns, usage?)?,
        };
        slots.push(placed.into_iter().map(|(s, v)| (s, v.into())).collect());
    }
    // Devices: each node hands out its free devices in order.
    let mut next_device: std::collections::HashMap<usize, i64> = std::collections::HashMap::new();
    let mut out: Vec<PyPlaced> = Vec::new();
    let mut k = 0;
    while k < items.len() {
        let (t, piece, m, role, index) = items[k];
        let mut run = k;
        while run < items.len()
            && items[run].2 == m
            && items[run].3 == role
            && items[run].4 == index
        {
            run += 1;
        }
        // One instance: `run - k` items (several only when it spans whole nodes, each the
        // same devices of another node).
        let mut devices = Vec::new();
        let mut nodes = Vec::new();
        for _ in k..run {
            let node = slots[t].get_mut(&piece)?.pop_front()?;
            let start = next_device.entry(node).or_insert(0);
            devices = (*start..*start + piece).collect();
            *start += piece;
            nodes.push(node);
        }
        out.push(PyPlaced {
            node: nodes[0],
            nodes,
            gpu_type: t,
            model: m,
            role,
            index,
            devices,
        });
        k = run;
    }
    Some(out)
}

/// Each node's contents mapped to a pattern of its class that holds them: by runs of
/// identical nodes where the sizes form a chain (cost independent of the pool's size), else
/// from the full placement.
fn pattern_usage(c: &Candidates, sol: &Solution) -> Option<Vec<(usize, i64)>> {
    let types = c.scenario.gpu_types.len();
    let patterns: Vec<plan::Pattern> = (0..types)
        .flat_map(|t| c.cluster.patterns(t, &c.sizes[t]))
        .collect();
    let mut per_type: Vec<std::collections::BTreeMap<i64, i64>> = vec![Default::default(); types];
    for ch in sol.iter().flatten() {
        for (row, n) in ch.parts() {
            let it = c.rows[row].item?;
            *per_type[it.gpu_type].entry(it.piece).or_default() += n * it.pieces;
        }
    }
    let runs: Option<Vec<_>> = (0..types)
        .map(|t| c.cluster.fill_runs(t, &per_type[t]))
        .collect();
    if let Some(runs) = runs {
        let mut counts: std::collections::BTreeMap<usize, i64> = Default::default();
        for (class, contents, nodes) in runs.into_iter().flatten() {
            let j = patterns.iter().position(|p| {
                p.class == class
                    && contents.iter().all(|(s, k)| {
                        p.items
                            .iter()
                            .find(|(ps, _)| ps == s)
                            .is_some_and(|(_, pk)| pk >= k)
                    })
            })?;
            *counts.entry(j).or_default() += nodes;
        }
        return Some(counts.into_iter().collect());
    }
    let placed = placement(c, sol, None)?;
    let node_class: std::collections::HashMap<usize, usize> = c
        .cluster
        .node_ids
        .iter()
        .enumerate()
        .flat_map(|(ci, ids)| ids.iter().map(move |&n| (n, ci)))
        .collect();
    let mut content: std::collections::BTreeMap<usize, std::collections::BTreeMap<i64, i64>> =
        std::collections::BTreeMap::new();
    for p in &placed {
        for &node in &p.nodes {
            *content
                .entry(node)
                .or_default()
                .entry(p.devices.len() as i64)
                .or_default() += 1;
        }
    }
    let patterns: Vec<plan::Pattern> = (0..c.scenario.gpu_types.len())
        .flat_map(|t| c.cluster.patterns(t, &c.sizes[t]))
        .collect();
    let mut counts: std::collections::BTreeMap<usize, i64> = std::collections::BTreeMap::new();
    for (node, items) in content {
        let class = *node_class.get(&node)?;
        let j = patterns.iter().position(|p| {
            p.class == class
                && items.iter().all(|(s, k)| {
                    p.items
                        .iter()
                        .find(|(ps, _)| ps == s)
                        .is_some_and(|(_, pk)| pk >= k)
                })
        })?;
        *counts.entry(j).or_default() += 1;
    }
    Some(counts.into_iter().collect())
}

fn by_patterns(
    c: &Candidates,
    t: usize,
    counts: &std::collections::BTreeMap<i64, i64>,
    patterns: &[plan::Pattern],
    usage: &[(usize, i64)],
) -> Option<std::collections::BTreeMap<i64, Vec<usize>>> {
    let mut used_in_class: std::collections::HashMap<usize, usize> =
        std::collections::HashMap::new();
    let mut out: std::collections::BTreeMap<i64, Vec<usize>> = std::collections::BTreeMap::new();
    for &(pi, n) in usage {
        let p = patterns.get(pi)?;
        if c.cluster.classes[p.class].gpu_type != t {
            continue;
        }
        for _ in 0..n {
            let used = used_in_class.entry(p.class).or_insert(0);
            let node = *c.cluster.node_ids[p.class].get(*used)?;
            *used += 1;
            for &(s, k) in &p.items {
                out.entry(s)
                    .or_default()
                    .extend(std::iter::repeat_n(node, k as usize));
            }
        }
    }
    for (s, &n) in counts {
        let v = out.entry(*s).or_default();
        if (v.len() as i64) < n {
            return None;
        }
        v.truncate(n as usize);
    }
    Some(out)
}

/// Build a scenario's candidates (rows, pairs, patterns, order): the heavy step of every
/// planner, with the GIL released. `time_limit_s`: from now, where exact node searches
/// (here and in the closed-form help asked of the result) give way to their relaxations.
#[pyfunction]
#[pyo3(signature = (scenario, time_limit_s=None))]
fn candidates(
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
        return Err(pdtp_error(py, "InvalidArgumentError", why));
    };
    Ok(PyCandidates {
        c: Arc::new(c),
        order: Arc::new(order),
        deadline,
    })
}

type CandRow = (i64, i64, i64, i64, i64, i64);
type SweepRow = (Option<CandRow>, Option<CandRow>, bool);

fn sweep_row(p: &crate::sweep::SweepPlan) -> CandRow {
    (
        p.prefill_tp,
        p.prefill_instances,
        p.decode_tp,
        p.decode_instances,
        p.value,
        p.gpus_used,
    )
}

/// One sweep scenario (one model, one GPU type) over many budgets: `(prefill_rows,
/// decode_rows, points)`, one point per budget (in order) as `(best, rule_blind_best,
/// rule_blind_valid)`; plans as `(prefill_tp, prefill_instances, decode_tp,
/// decode_instances, value_units, gpus_used)`. Side rows cover TP 1..=min(max_tp, largest
/// budget). Each budget is full nodes of the type's node size, the last one partial.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn sweep_budgets(
    py: Python<'_>,
    scenario: &PyScenario,
    budgets: Vec<i64>,
) -> PyResult<(Vec<SideRow>, Vec<SideRow>, Vec<SweepRow>)> {
    let sc = scenario.inner.clone();
    if sc.models.len() != 1 || sc.gpu_types.len() != 1 {
        return Err(invalid(
            py,
            "a sweep group has one model and one GPU type".into(),
        ));
    }
    let sweep = released(py, move || crate::sweep::sweep_budgets(&sc, &budgets))?;
    Ok((
        sweep.prefill.iter().map(side_row).collect(),
        sweep.decode.iter().map(side_row).collect(),
        sweep
            .points
            .iter()
            .map(|p| {
                (
                    p.best.as_ref().map(sweep_row),
                    p.rule_blind.as_ref().map(sweep_row),
                    p.rule_blind_valid,
                )
            })
            .collect(),
    ))
}

/// A candidate row of a space sweep: `(role, (tp, pp, dp, ep), gpus, requests_per_s,
/// ttft_s, latency_s, batch, concurrency)`.
type SpaceRow = (
    &'static str,
    (i64, i64, i64, bool),
    i64,
    f64,
    f64,
    f64,
    i64,
    i64,
);
/// A space sweep's plan: `(prefill row, prefill instances, decode row, decode instances,
/// gpus_used)`; an aggregated plan has prefill row == decode row.
type SpacePlanRow = (usize, i64, usize, i64, i64);

/// Best plans of one (model, GPU type, workload, connector) for many budgets over the space
/// `solve` searches (the scenario's mode and layouts): `(rows, points)`, each point
/// `(best, rule_blind)` as row indices and counts (rule_blind only when the connector's
/// rules cost something). Each budget is full nodes of the type's node size, the last one
/// partial.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn sweep_space(
    py: Python<'_>,
    scenario: &PyScenario,
    budgets: Vec<i64>,
) -> PyResult<(
    Vec<SpaceRow>,
    Vec<(Option<SpacePlanRow>, Option<SpacePlanRow>)>,
)> {
    let sc = scenario.inner.clone();
    if sc.models.len() != 1 || sc.gpu_types.len() != 1 {
        return Err(invalid(
            py,
            "a sweep group has one model and one GPU type".into(),
        ));
    }
    let sweep = released(py, move || crate::sweep::sweep_space(&sc, &budgets))?;
    let plan = |p: &crate::sweep::SpacePlan| -> SpacePlanRow {
        (
            p.prefill,
            p.prefill_instances,
            p.decode,
            p.decode_instances,
            p.gpus_used,
        )
    };
    Ok((
        sweep
            .rows
            .iter()
            .map(|r| {
                let o = &r.side;
                (
                    r.role.name(),
                    (r.layout.tp, r.layout.pp, r.layout.dp, r.layout.ep),
                    r.gpus(),
                    o.requests_per_s,
                    o.ttft,
                    o.latency,
                    o.batch,
                    o.concurrency,
                )
            })
            .collect(),
        sweep
            .points
            .iter()
            .map(|p| (p.best.as_ref().map(plan), p.rule_blind.as_ref().map(plan)))
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
    /// The layout's compact name (`tp8`, `tp1dp8ep`, `tp4pp2`).
    #[pyo3(get)]
    layout: String,
    #[pyo3(get)]
    pp: i64,
    #[pyo3(get)]
    dp: i64,
    #[pyo3(get)]
    ep: bool,
    #[pyo3(get)]
    instances: u32,
    #[pyo3(get)]
    gpu_memory_utilization: f64,
    #[pyo3(get)]
    max_num_seqs: u32,
    #[pyo3(get)]
    max_num_batched_tokens: u32,
    /// KV-cache blocks of 16 tokens one DP rank holds (the instance's when TP-only).
    #[pyo3(get)]
    kv_blocks: u64,
}

#[pymethods]
impl PySimPool {
    fn __repr__(&self) -> String {
        format!(
            "SimPool(role={:?}, layout={:?}, instances={}, max_num_seqs={}, \
             max_num_batched_tokens={}, kv_blocks={})",
            self.role,
            self.layout,
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

type PoolSpec = (String, String, u32, f64, u32, u32);

fn pool_info(role: &'static str, p: &sim::Pool) -> PySimPool {
    PySimPool {
        role,
        tp: p.layout.tp,
        layout: p.layout.key(),
        pp: p.layout.pp,
        dp: p.layout.dp,
        ep: p.layout.ep,
        instances: p.instances,
        gpu_memory_utilization: p.gpu_memory_utilization,
        max_num_seqs: p.max_num_seqs,
        max_num_batched_tokens: p.max_num_batched_tokens,
        kv_blocks: p.kv_blocks(),
    }
}

#[pymethods]
impl PySimConfig {
    /// `pools`: `(role, layout, instances, gpu_memory_utilization, max_num_seqs,
    /// max_num_batched_tokens)` — one `"aggregated"` pool, or a `"prefill"` and a
    /// `"decode"` pool; `layout` as `Layout.parse` reads it (`"tp8"`, `"tp1dp8ep"`).
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
        for (role, layout, instances, util, seqs, tokens) in pools {
            let layout = Layout::parse(&layout).map_err(|e| invalid(format!("{role}: {e}")))?;
            built.push((
                role,
                sim::Pool {
                    model: m,
                    gpu: g,
                    constants: c,
                    layout,
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
        growth: sim::GROWTH,
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
    m.add_function(wrap_pyfunction!(connector_gpu_violation, m)?)?;
    m.add_function(wrap_pyfunction!(check_pair, m)?)?;
    m.add_function(wrap_pyfunction!(alternatives, m)?)?;
    m.add_function(wrap_pyfunction!(loadable_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(transfer_map, m)?)?;
    m.add_class::<ConnectorInfo>()?;
    m.add_function(wrap_pyfunction!(resolve_connector, m)?)?;
    m.add_function(wrap_pyfunction!(connector_names, m)?)?;
    m.add_function(wrap_pyfunction!(vllm_releases, m)?)?;
    m.add_function(wrap_pyfunction!(parse_layout, m)?)?;
    m.add_function(wrap_pyfunction!(stage_layers, m)?)?;
    m.add_function(wrap_pyfunction!(check_layouts, m)?)?;
    m.add_function(wrap_pyfunction!(layout_load_violations, m)?)?;
    m.add_function(wrap_pyfunction!(moriio_port_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(predict_prefill, m)?)?;
    m.add_function(wrap_pyfunction!(predict_decode, m)?)?;
    m.add_function(wrap_pyfunction!(side_option, m)?)?;
    m.add_function(wrap_pyfunction!(layout_option, m)?)?;
    m.add_function(wrap_pyfunction!(candidates, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_budgets, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_space, m)?)?;
    m.add_class::<PyModelSpec>()?;
    m.add_class::<PyGpuType>()?;
    m.add_class::<PyScenario>()?;
    m.add_class::<PyCandidates>()?;
    m.add_class::<PyRow>()?;
    m.add_class::<PyPair>()?;
    m.add_class::<PyChoice>()?;
    m.add_class::<PyStage>()?;
    m.add_class::<PyPattern>()?;
    m.add_class::<PyPlaced>()?;
    m.add_class::<PyMoves>()?;
    m.add_function(wrap_pyfunction!(step_time, m)?)?;
    m.add_function(wrap_pyfunction!(predict_serving, m)?)?;
    m.add_function(wrap_pyfunction!(layout_sides, m)?)?;
    m.add_function(wrap_pyfunction!(fit_constants, m)?)?;
    m.add_function(wrap_pyfunction!(predict_points, m)?)?;
    m.add_class::<ServingPoint>()?;
    m.add("CONSTANT_FIELDS", Constants::FIELDS.to_vec())?;
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
