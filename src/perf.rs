//! The analytical roofline performance model (product.md §3): prefill time per request,
//! decode step time at a batch, memory fit and KV capacity. Pure arithmetic on plain
//! numbers, so the solver can evaluate thousands of TP sizes per millisecond.
//!
//! Units: seconds, bytes, FLOP and FLOP/s throughout; callers convert at the edges.

/// What the performance model needs to know about a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPerf {
    pub num_layers: f64,
    /// Layers that keep a KV cache (hybrid Mamba/linear-attention models have fewer).
    pub num_attention_layers: f64,
    pub hidden_size: f64,
    pub num_attention_heads: f64,
    pub num_kv_heads: i64,
    pub head_dim: f64,
    pub is_mla: bool,
    pub kv_lora_rank: f64,
    pub qk_rope_head_dim: f64,
    /// Bytes of all weights at their stored dtypes.
    pub weight_bytes: f64,
    /// Bytes of the routed experts (0 for dense models); the rest is always read.
    pub expert_weight_bytes: f64,
    pub num_experts: f64,
    pub experts_per_token: f64,
    /// Parameters used per token (FLOPs = 2 per parameter per token).
    pub active_params: f64,
    pub kv_dtype_bytes: f64,
}

impl ModelPerf {
    /// The three numbers the connector rules need.
    pub fn shape(&self) -> crate::check::Shape {
        crate::check::Shape {
            num_attention_heads: self.num_attention_heads as i64,
            num_kv_heads: self.num_kv_heads,
            is_mla: self.is_mla,
        }
    }
}

/// What the performance model needs to know about a GPU type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuPerf {
    pub memory_bytes: f64,
    pub hbm_bandwidth: f64,
    /// Dense peak for the model's weight dtype.
    pub peak_flops: f64,
    /// Intra-node per-GPU unidirectional link bandwidth (all-reduce).
    pub link_bandwidth: f64,
}

/// Efficiency constants (one table per GPU type in Python, overridable per call).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Constants {
    pub mfu_prefill: f64,
    pub mfu_decode: f64,
    pub mbu: f64,
    /// All-reduce latency α (s).
    pub allreduce_latency: f64,
    /// Fixed per-step / per-request overhead t_fix (s): scheduling, sampling, launches.
    pub step_overhead: f64,
    /// Memory held back per GPU for the runtime, activations and CUDA/HIP graphs (bytes).
    pub reserve_bytes: f64,
    /// TTFT = q · t_p + transfer: q covers queueing at the prefill instance.
    pub ttft_queue_factor: f64,
    /// KV transfer bandwidth per rank between instances (bytes/s) and its latency (s).
    pub kv_transfer_bandwidth: f64,
    pub kv_transfer_latency: f64,
    /// vLLM's `max_num_seqs`: the largest decode batch one instance runs.
    pub max_num_seqs: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    pub isl: f64,
    pub osl: f64,
    /// SLO bounds in seconds; `None` = unbounded.
    pub ttft: Option<f64>,
    pub tpot: Option<f64>,
}

/// KV bytes one rank stores per token: GQA/MHA shards heads (at least one head per rank,
/// replicated when tp > H); MLA keeps the whole latent on every rank.
pub fn kv_bytes_per_token_per_rank(m: &ModelPerf, tp: i64) -> f64 {
    if m.is_mla {
        m.num_attention_layers * (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_dtype_bytes
    } else {
        let tp = tp.max(1);
        let heads = (m.num_kv_heads + tp - 1) / tp; // ceil, ≥ 1 for H ≥ 1
        2.0 * m.num_attention_layers * heads.max(1) as f64 * m.head_dim * m.kv_dtype_bytes
    }
}

/// Bytes left for KV cache on one rank after weights and the runtime reserve, under
/// `gpu_memory_utilization`; negative when the weights do not fit.
pub fn kv_budget_bytes(m: &ModelPerf, g: &GpuPerf, c: &Constants, tp: i64, util: f64) -> f64 {
    util * g.memory_bytes - m.weight_bytes / tp as f64 - c.reserve_bytes
}

pub fn weights_fit(m: &ModelPerf, g: &GpuPerf, c: &Constants, tp: i64, util: f64) -> bool {
    kv_budget_bytes(m, g, c, tp, util) > 0.0
}

/// Tokens of KV cache one instance holds.
pub fn kv_capacity_tokens(m: &ModelPerf, g: &GpuPerf, c: &Constants, tp: i64, util: f64) -> f64 {
    let budget = kv_budget_bytes(m, g, c, tp, util);
    if budget <= 0.0 {
        return 0.0;
    }
    (budget / kv_bytes_per_token_per_rank(m, tp)).floor()
}

/// One ring all-reduce of `bytes`: α + 2(tp−1)/tp · M / BW_link; zero at tp = 1.
pub fn allreduce_time(g: &GpuPerf, c: &Constants, tp: i64, bytes: f64) -> f64 {
    if tp <= 1 {
        return 0.0;
    }
    let t = tp as f64;
    c.allreduce_latency + 2.0 * (t - 1.0) / t * bytes / g.link_bandwidth
}

/// Prefill FLOPs of one request: 2·N_act·isl + 2·L_attn·A·head_dim·isl².
pub fn prefill_flops(m: &ModelPerf, isl: f64) -> f64 {
    2.0 * m.active_params * isl
        + 2.0 * m.num_attention_layers * m.num_attention_heads * m.head_dim * isl * isl
}

/// Time to prefill one request of `isl` tokens on one instance of `tp` GPUs.
pub fn prefill_time(m: &ModelPerf, g: &GpuPerf, c: &Constants, tp: i64, isl: f64) -> f64 {
    let t = tp as f64;
    let compute = prefill_flops(m, isl) / (t * g.peak_flops * c.mfu_prefill);
    let memory = m.weight_bytes / t / (g.hbm_bandwidth * c.mbu);
    compute.max(memory)
        + 2.0 * m.num_layers * allreduce_time(g, c, tp, isl * m.hidden_size * 2.0)
        + c.step_overhead
}

/// Time to move one prompt's KV cache from prefill to decode: each of the `tp` prefill
/// ranks sends its shard in parallel.
pub fn kv_transfer_time(m: &ModelPerf, c: &Constants, prefill_tp: i64, isl: f64) -> f64 {
    isl * kv_bytes_per_token_per_rank(m, prefill_tp) / c.kv_transfer_bandwidth
        + c.kv_transfer_latency
}

pub fn ttft(m: &ModelPerf, g: &GpuPerf, c: &Constants, prefill_tp: i64, isl: f64) -> f64 {
    c.ttft_queue_factor * prefill_time(m, g, c, prefill_tp, isl)
        + kv_transfer_time(m, c, prefill_tp, isl)
}

/// Weight bytes one decode step reads at batch `b`: MoE touches E·(1−(1−k/E)^B) experts
/// per layer, everything else is read every step.
pub fn weight_bytes_touched(m: &ModelPerf, b: f64) -> f64 {
    if m.num_experts <= 0.0 || m.expert_weight_bytes <= 0.0 {
        return m.weight_bytes;
    }
    let k_over_e = (m.experts_per_token / m.num_experts).clamp(0.0, 1.0);
    let fraction = 1.0 - (1.0 - k_over_e).powf(b);
    m.weight_bytes - m.expert_weight_bytes + m.expert_weight_bytes * fraction
}

/// One decode step at batch `b` with mean context `context` tokens per sequence.
pub fn decode_step_time(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    tp: i64,
    b: f64,
    context: f64,
) -> f64 {
    let t = tp as f64;
    let bytes = weight_bytes_touched(m, b) / t + b * context * kv_bytes_per_token_per_rank(m, tp);
    let memory = bytes / (g.hbm_bandwidth * c.mbu);
    let compute = 2.0 * m.active_params * b / (t * g.peak_flops * c.mfu_decode);
    memory.max(compute)
        + 2.0 * m.num_layers * allreduce_time(g, c, tp, b * m.hidden_size * 2.0)
        + c.step_overhead
}

/// The work of one engine step: what a scheduler batched together. vLLM's continuous
/// batching with chunked prefill mixes decode tokens and prompt chunks in one step, so one
/// step-time function serves prefill instances, decode instances, aggregated serving and the
/// simulator alike.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepBatch {
    /// Sequences generating one token this step.
    pub decode_seqs: f64,
    /// KV tokens those sequences attend over, summed over the sequences.
    pub decode_context_tokens: f64,
    /// Prompt tokens computed this step (whole prompts or chunks).
    pub prefill_tokens: f64,
    /// Σ over prompt chunks of `chunk × (tokens already cached + chunk / 2)`: the causal
    /// attention work of the chunks (a whole prompt of n tokens contributes n²/2).
    pub prefill_attention_work: f64,
}

impl StepBatch {
    /// A step that only decodes `seqs` sequences of mean context `context`.
    pub fn decode(seqs: f64, context: f64) -> StepBatch {
        StepBatch {
            decode_seqs: seqs,
            decode_context_tokens: seqs * context,
            ..StepBatch::default()
        }
    }

    /// A step that prefills one whole prompt of `tokens` tokens.
    pub fn prefill(tokens: f64) -> StepBatch {
        StepBatch {
            prefill_tokens: tokens,
            prefill_attention_work: tokens * tokens / 2.0,
            ..StepBatch::default()
        }
    }

    /// Tokens this step computes (decode tokens + prompt tokens).
    pub fn tokens(&self) -> f64 {
        self.decode_seqs + self.prefill_tokens
    }
}

/// Seconds one engine step of `layout` takes for `batch`. This is the one step-cost
/// function: prefill and decode times, aggregated serving and the simulator are built on it.
pub fn step_time(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    layout: &crate::layout::Layout,
    batch: &StepBatch,
) -> f64 {
    let tp = layout.tp.max(1);
    let t = tp as f64;
    let tokens = batch.tokens();
    let weights = weight_bytes_touched(m, tokens.max(1.0)) / t;
    let kv = batch.decode_context_tokens * kv_bytes_per_token_per_rank(m, tp);
    let memory = (weights + kv) / (g.hbm_bandwidth * c.mbu);
    let decode_flops = 2.0 * m.active_params * batch.decode_seqs;
    let prefill_flops = 2.0 * m.active_params * batch.prefill_tokens
        + 4.0
            * m.num_attention_layers
            * m.num_attention_heads
            * m.head_dim
            * batch.prefill_attention_work;
    let compute = decode_flops / (t * g.peak_flops * c.mfu_decode)
        + prefill_flops / (t * g.peak_flops * c.mfu_prefill);
    memory.max(compute)
        + 2.0 * m.num_layers * allreduce_time(g, c, tp, tokens * m.hidden_size * 2.0)
        + c.step_overhead
}

/// Decode operating point of one instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodePoint {
    /// Largest batch that meets the TPOT bound and fits the KV cache (0: none does).
    pub batch: i64,
    /// Largest batch memory allows (full isl + osl sequences), before the TPOT bound.
    pub max_batch: i64,
    /// Step time at `batch` (s); at batch 1 when `batch` is 0.
    pub tpot: f64,
    /// Requests/s one instance completes at `batch`.
    pub requests_per_s: f64,
}

/// The decode operating point: the largest batch B* with t_d(B*) ≤ tpot and KV(B*) in
/// memory. t_d is non-decreasing in B, so a binary search finds B* exactly.
pub fn decode_point(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    tp: i64,
    w: &Workload,
    util: f64,
) -> DecodePoint {
    let context = w.isl + w.osl / 2.0;
    let per_seq = w.isl + w.osl;
    let by_memory = (kv_capacity_tokens(m, g, c, tp, util) / per_seq).floor();
    let max_batch = by_memory.min(c.max_num_seqs).max(0.0) as i64;
    let step = |b: i64| decode_step_time(m, g, c, tp, b as f64, context);
    let meets = |b: i64| w.tpot.is_none_or(|limit| step(b) <= limit);
    let batch = if max_batch < 1 || !meets(1) {
        0
    } else {
        let (mut lo, mut hi) = (1_i64, max_batch); // invariant: meets(lo)
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
    let tpot = step(batch.max(1));
    let requests_per_s = if batch > 0 {
        batch as f64 / (tpot * w.osl)
    } else {
        0.0
    };
    DecodePoint {
        batch,
        max_batch,
        tpot,
        requests_per_s,
    }
}

/// Prefill operating point of one instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefillPoint {
    /// Seconds per request (t_p).
    pub time: f64,
    pub ttft: f64,
    pub requests_per_s: f64,
    /// The prompt's KV cache fits next to the weights.
    pub fits: bool,
}

pub fn prefill_point(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    tp: i64,
    w: &Workload,
    util: f64,
) -> PrefillPoint {
    let time = prefill_time(m, g, c, tp, w.isl);
    PrefillPoint {
        time,
        ttft: ttft(m, g, c, tp, w.isl),
        requests_per_s: 1.0 / time,
        fits: kv_capacity_tokens(m, g, c, tp, util) >= w.isl,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Llama-3.1-70B in bf16 on an H100, with round constants.
    pub fn llama70() -> ModelPerf {
        ModelPerf {
            num_layers: 80.0,
            num_attention_layers: 80.0,
            hidden_size: 8192.0,
            num_attention_heads: 64.0,
            num_kv_heads: 8,
            head_dim: 128.0,
            is_mla: false,
            kv_lora_rank: 0.0,
            qk_rope_head_dim: 0.0,
            weight_bytes: 70.55e9 * 2.0,
            expert_weight_bytes: 0.0,
            num_experts: 0.0,
            experts_per_token: 0.0,
            active_params: 70.55e9,
            kv_dtype_bytes: 2.0,
        }
    }

    pub fn h100() -> GpuPerf {
        GpuPerf {
            memory_bytes: 80.0 * (1u64 << 30) as f64,
            hbm_bandwidth: 3.35e12,
            peak_flops: 989e12,
            link_bandwidth: 450e9,
        }
    }

    pub fn consts() -> Constants {
        Constants {
            mfu_prefill: 0.5,
            mfu_decode: 0.5,
            mbu: 0.8,
            allreduce_latency: 30e-6,
            step_overhead: 1.5e-3,
            reserve_bytes: 4e9,
            ttft_queue_factor: 1.8,
            kv_transfer_bandwidth: 50e9,
            kv_transfer_latency: 1e-3,
            max_num_seqs: 1024.0,
        }
    }

    pub fn workload() -> Workload {
        Workload {
            isl: 2048.0,
            osl: 512.0,
            ttft: Some(2.0),
            tpot: Some(0.05),
        }
    }

    #[test]
    fn kv_bytes_match_reference() {
        // 2 · 80 layers · 8 heads · 128 · 2 bytes = 327,680 at tp = 1.
        assert_eq!(kv_bytes_per_token_per_rank(&llama70(), 1), 327_680.0);
        assert_eq!(kv_bytes_per_token_per_rank(&llama70(), 8), 40_960.0);
        // Replicated when tp > H: still one head per rank.
        assert_eq!(kv_bytes_per_token_per_rank(&llama70(), 16), 40_960.0);
    }

    #[test]
    fn weights_fit_only_with_enough_tp() {
        let (m, g, c) = (llama70(), h100(), consts());
        assert!(!weights_fit(&m, &g, &c, 1, 0.9));
        assert!(weights_fit(&m, &g, &c, 4, 0.9));
    }

    #[test]
    fn decode_batch_is_largest_meeting_tpot() {
        let (m, g, c, w) = (llama70(), h100(), consts(), workload());
        let p = decode_point(&m, &g, &c, 8, &w, 0.9);
        assert!(p.batch > 1 && p.tpot <= 0.05);
        let ctx = w.isl + w.osl / 2.0;
        if p.batch < p.max_batch {
            assert!(decode_step_time(&m, &g, &c, 8, (p.batch + 1) as f64, ctx) > 0.05);
        }
        let tight = Workload {
            tpot: Some(1e-4),
            ..w
        };
        assert_eq!(decode_point(&m, &g, &c, 8, &tight, 0.9).batch, 0);
    }

    #[test]
    fn step_time_reproduces_prefill_and_decode() {
        let (m, g, c) = (llama70(), h100(), consts());
        for tp in [1, 2, 4, 8] {
            let l = crate::layout::Layout::tp(tp);
            let p = step_time(&m, &g, &c, &l, &StepBatch::prefill(2048.0));
            assert!((p - prefill_time(&m, &g, &c, tp, 2048.0)).abs() < 1e-12 * p.max(1.0));
            for b in [1.0, 7.0, 64.0] {
                let d = step_time(&m, &g, &c, &l, &StepBatch::decode(b, 2304.0));
                let want = decode_step_time(&m, &g, &c, tp, b, 2304.0);
                assert!((d - want).abs() < 1e-12, "tp={tp} b={b}: {d} vs {want}");
            }
        }
    }

    #[test]
    fn monotone_in_batch_and_memory() {
        let (m, g, c) = (llama70(), h100(), consts());
        let mut last = 0.0;
        for b in 1..600 {
            let t = decode_step_time(&m, &g, &c, 4, b as f64, 2304.0);
            assert!(t >= last);
            last = t;
        }
        let w = Workload {
            tpot: None,
            ..workload()
        };
        let small = decode_point(&m, &g, &c, 4, &w, 0.9).max_batch;
        let big_gpu = GpuPerf {
            memory_bytes: 2.0 * g.memory_bytes,
            ..g
        };
        assert!(decode_point(&m, &big_gpu, &c, 4, &w, 0.9).max_batch >= small);
    }
}
