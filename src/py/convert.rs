//! Python values → core inputs (performance dicts, layouts, roles, engines, deadlines).

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::check::Shape;
use crate::perf::{Constants, GpuPerf, ModelPerf, Workload};

use crate::layout::Layout;
use crate::layout_rules::LayoutModel;
use crate::perf::serving::{Engine, ServingWorkload};
use crate::perf::WeightFormat;
use crate::plan::Role;

use super::errors::*;

/// A model as the layout rules see it: `(heads, kv_heads, is_mla, layers, experts,
/// supports_pp, hybrid)`.
pub(super) type LayoutModelTuple = (i64, i64, bool, i64, i64, bool, bool);

pub(super) fn layout_model(t: LayoutModelTuple) -> LayoutModel {
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

// ---- performance model and solver ------------------------------------------------------
// Python hands each input over as a dict of plain numbers (built once per model/GPU and
// cached on the Python side); a missing key is a bug in pdtp, reported as KeyError.

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

pub(super) fn workload(d: &Bound<'_, PyDict>) -> PyResult<Workload> {
    Ok(Workload {
        isl: num(d, "isl")?,
        osl: num(d, "osl")?,
        ttft: opt_num(d, "ttft_s")?,
        tpot: opt_num(d, "tpot_s")?,
    })
}

pub(super) fn role_of(py: Python<'_>, name: &str) -> PyResult<Role> {
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

pub(super) fn engine(py: Python<'_>, name: &str) -> PyResult<Engine> {
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

pub(super) fn serving_workload(py: Python<'_>, d: &Bound<'_, PyDict>) -> PyResult<ServingWorkload> {
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

/// `time_limit_s` from now, None without a limit (or one too large to represent).
pub(super) fn deadline_in(time_limit_s: Option<f64>) -> Option<std::time::Instant> {
    time_limit_s.and_then(|s| {
        std::time::Duration::try_from_secs_f64(s.max(0.0))
            .ok()
            .and_then(|d| std::time::Instant::now().checked_add(d))
    })
}
