//! Python values → core inputs (performance dicts, layouts, roles, engines, deadlines).

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::check::Shape;
use crate::perf::{Constants, GpuPerf, ModelPerf, Workload};

use crate::layout::Layout;
use crate::layout_rules::LayoutModel;
use crate::perf::serving::{Engine, ServingWorkload};
use crate::perf::WeightFormat;
use crate::plan::{Mode, Role, Vendor};
use crate::sim;

use super::errors::*;

/// A model as the layout rules see it: `(heads, kv_heads, is_mla, layers, experts,
/// supports_pp, hybrid, sliding_window, output_groups)`.
pub(super) type LayoutModelTuple = (i64, i64, bool, i64, i64, bool, bool, bool, i64, i64);

pub(super) fn layout_model(t: LayoutModelTuple) -> LayoutModel {
    LayoutModel {
        shape: Shape {
            num_attention_heads: t.0,
            num_kv_heads: t.1,
            is_mla: t.2,
            hybrid: t.6,
            sliding_window: t.7,
            // 0: not known (`None`).
            mamba_groups: (t.9 > 0).then_some(t.9),
        },
        num_layers: t.3,
        num_experts: t.4,
        supports_pp: t.5,
        output_groups: t.8,
    }
}

// ---- performance model and solver ------------------------------------------------------
// The typed inputs (`perf::ModelInputs`, `GpuInputs`, `ConstantInputs`) read their fields
// here once, when Python builds them (once per model / GPU, cached there); the workload
// dicts are read per call. A missing key is a bug in pdtp, reported as KeyError.

pub(super) fn num(d: &Bound<'_, PyDict>, key: &str) -> PyResult<f64> {
    match d.get_item(key)? {
        Some(v) => v.extract::<f64>(),
        None => Err(pyo3::exceptions::PyKeyError::new_err(key.to_string())),
    }
}

pub(super) fn opt_num(d: &Bound<'_, PyDict>, key: &str) -> PyResult<Option<f64>> {
    match d.get_item(key)? {
        Some(v) if !v.is_none() => Ok(Some(v.extract::<f64>()?)),
        _ => Ok(None),
    }
}

pub(super) fn model_perf(d: &Bound<'_, PyDict>) -> PyResult<ModelPerf> {
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
        kv_token_bytes: opt_num(d, "kv_token_bytes")?.unwrap_or(0.0),
        kv_sequence_bytes: opt_num(d, "kv_sequence_bytes")?.unwrap_or(0.0),
        sparse: sparse_attention(d)?,
    })
}

/// DeepSeek-V4's compressed / sparse attention inputs (`sparse_*` keys; absent: none).
fn sparse_attention(d: &Bound<'_, PyDict>) -> PyResult<crate::perf::SparseAttention> {
    let f = |key: &str| -> PyResult<f64> { Ok(opt_num(d, key)?.unwrap_or(0.0)) };
    Ok(crate::perf::SparseAttention {
        layers: f("sparse_layers")?,
        window: f("sparse_window")?,
        c4_layers: f("sparse_c4_layers")?,
        c128_layers: f("sparse_c128_layers")?,
        topk: f("sparse_topk")?,
        latent_bytes: f("sparse_latent_bytes")?,
        index_key_bytes: f("sparse_index_key_bytes")?,
        index_flops_per_key: f("sparse_index_flops_per_key")?,
        state_bytes_per_token: f("sparse_state_bytes_per_token")?,
        dsa_layers: f("sparse_dsa_layers")?,
        dsa_indexer_layers: f("sparse_dsa_indexer_layers")?,
    })
}

pub(super) fn gpu_perf(d: &Bound<'_, PyDict>) -> PyResult<GpuPerf> {
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
pub(super) fn constants(d: &Bound<'_, PyDict>) -> PyResult<Constants> {
    // Every field by its name in the one list `Constants::FIELDS` (Rust owns it).
    Constants::try_from_fn(|name| num(d, name))
}

pub(super) fn workload(d: &Bound<'_, PyDict>) -> PyResult<Workload> {
    Ok(Workload {
        isl: num(d, "isl")?,
        osl: num(d, "osl")?,
        ttft: opt_num(d, "ttft_s")?,
        tpot: opt_num(d, "tpot_s")?,
    })
}

// ---- performance model v2: step time, aggregated serving, calibration fit -------------------

/// A layout from Python's `(tp, pp, dp, ep)`.
pub(super) type LayoutTuple = (i64, i64, i64, bool);

pub(super) fn layout(t: LayoutTuple) -> Layout {
    Layout {
        tp: t.0,
        pp: t.1,
        dp: t.2,
        ep: t.3,
    }
}

pub(super) fn serving_workload(d: &Bound<'_, PyDict>) -> PyResult<ServingWorkload> {
    let name: EngineArg = match d.get_item("engine")? {
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
        engine: name.0,
        scheduler_recv_interval: opt_num(d, "scheduler_recv_interval")?.unwrap_or(1.0),
    })
}

/// `time_limit_s` from now, None without a limit (or one too large to represent).
pub(super) fn deadline_in(time_limit_s: Option<f64>) -> Option<std::time::Instant> {
    time_limit_s.and_then(|s| {
        std::time::Duration::try_from_secs_f64(s.max(0.0))
            .ok()
            .and_then(|d| std::time::Instant::now().checked_add(d))
    })
}

// ---- string arguments naming one of a fixed set of values --------------------------------

/// A string argument naming one of a fixed set of values: extracts to the core's value (and
/// the name given), or
/// raises `InvalidArgumentError` naming the field and every allowed value (a non-string
/// argument: PyO3's `TypeError` naming the parameter).
macro_rules! choice {
    ($(#[$doc:meta])* $name:ident($target:ty), $field:literal, [$($text:literal => $value:expr),+ $(,)?]) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub(super) struct $name(
            pub(super) $target,
            /// The name as given (not every caller reports it back).
            #[allow(dead_code)]
            pub(super) &'static str,
        );

        impl $name {
            /// The accepted names, in the order the error lists them.
            pub(super) const NAMES: &'static [&'static str] = &[$($text),+];
        }

        impl<'py> FromPyObject<'py> for $name {
            fn extract_bound(ob: &Bound<'py, PyAny>) -> PyResult<Self> {
                let text: String = ob.extract()?;
                match text.as_str() {
                    $($text => Ok($name($value, $text)),)+
                    other => Err(invalid(
                        ob.py(),
                        format!(
                            "{} must be one of {}, got {other:?}",
                            $field,
                            Self::NAMES.join(", ")
                        ),
                    )),
                }
            }
        }
    };
}

choice!(
    /// A candidate row's role.
    RoleArg(Role), "role", [
    "prefill" => Role::Prefill,
    "decode" => Role::Decode,
    "aggregated" => Role::Aggregated,
]);

choice!(
    /// The side of one instance whose layout loads (an aggregated one serves both phases).
    SideArg(Role), "side", [
    "prefill" => Role::Prefill,
    "decode" => Role::Decode,
    "aggregated" => Role::Aggregated,
]);

choice!(
    /// Which serving modes a scenario plans.
    ModeArg(Mode), "mode", [
    "auto" => Mode::Auto,
    "disagg" => Mode::Disaggregated,
    "agg" => Mode::Aggregated,
]);

choice!(
    /// One serving mode alone: whether it is the aggregated one.
    AggregatedArg(bool), "mode", [
    "agg" => true,
    "disagg" => false,
]);

/// What a scenario optimises, before its data (`moves` takes the running plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ObjectiveKind {
    Throughput,
    TokensPerDollar,
    FewestGpus,
    Cost,
    MaxMin,
    Weighted,
    Moves,
}

choice!(
    /// A scenario's objective.
    ObjectiveArg(ObjectiveKind), "objective", [
    "throughput" => ObjectiveKind::Throughput,
    "tokens_per_dollar" => ObjectiveKind::TokensPerDollar,
    "gpus" => ObjectiveKind::FewestGpus,
    "cost" => ObjectiveKind::Cost,
    "max_min" => ObjectiveKind::MaxMin,
    "weighted" => ObjectiveKind::Weighted,
    "moves" => ObjectiveKind::Moves,
]);

/// One layout family of a scenario's layout space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    Tp,
    Ep,
    Dp,
    Pp,
}

choice!(
    /// A layout family's name.
    FamilyArg(Family), "layout family", [
    "tp" => Family::Tp,
    "ep" => Family::Ep,
    "dp" => Family::Dp,
    "pp" => Family::Pp,
]);

choice!(
    /// A GPU type's vendor (its connectors and kernels).
    VendorArg(Vendor), "vendor", [
    "AMD" => Vendor::Amd,
    "NVIDIA" => Vendor::Nvidia,
]);

choice!(
    /// The serving engine whose scheduler the aggregated model follows.
    EngineArg(Engine), "engine", [
    "vllm" => Engine::Vllm,
    "sglang" => Engine::Sglang,
]);

choice!(
    /// The simulator's request router.
    RouterArg(sim::Router), "router", [
    "round_robin" => sim::Router::RoundRobin,
    "least_loaded" => sim::Router::LeastLoaded,
]);

/// A simulated arrival process, before its burstiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ArrivalKind {
    Poisson,
    Gamma,
    Constant,
}

choice!(
    /// The simulator's arrival process.
    ArrivalArg(ArrivalKind), "arrival", [
    "poisson" => ArrivalKind::Poisson,
    "gamma" => ArrivalKind::Gamma,
    "constant" => ArrivalKind::Constant,
]);

/// A simulated latency metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Metric {
    Ttft,
    Tpot,
}

choice!(
    /// A latency metric of a simulation's result.
    MetricArg(Metric), "metric", [
    "ttft" => Metric::Ttft,
    "tpot" => Metric::Tpot,
]);
