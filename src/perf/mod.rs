//! The performance model, v2 (product.md §3 refined against measured serving): the cost of
//! one engine step, and on it prefill time, decode step time, memory fit, KV capacity and
//! aggregated serving ([`serving`]). Pure arithmetic on plain numbers: the solver evaluates
//! every layout per solve and the simulator calls [`step_time`] for every engine step.
//!
//! One step of one instance costs, on its slowest pipeline stage:
//!
//! - **linear layers**: the weights it streams (dense weights every step; of the routed
//!   experts only those the step's tokens touch, `E·(1 − (1 − k/E)^T)` per layer, the
//!   busiest rank's share under expert parallel) at `mbu` of the HBM peak, scaled by the
//!   weight format's kernel efficiency, plus the decode tokens' small-M GEMM FLOPs
//!   `2·N_act·B` at `mfu_decode` — against the prompt tokens' GEMM FLOPs at `mfu_prefill`
//!   of the weight dtype's peak; the two overlap, so the step pays a smooth maximum;
//! - **attention**: decode reads each sequence's KV cache (sliding-window layers only the
//!   window) at `kv_read_efficiency` of the HBM peak, overlapped with its FLOPs at
//!   `mfu_decode_attention` of the bf16 peak (which bind for MLA); prompt tokens pay causal
//!   attention FLOPs at `mfu_attention` of the bf16 peak;
//! - **communication**: two ring all-reduces per layer under tensor parallel
//!   (`α + 2(tp−1)/tp · M / BW_link`), an all-to-all dispatch and combine per MoE layer
//!   under expert parallel with data-parallel attention, point-to-point sends between
//!   pipeline stages;
//! - **fixed costs**: `kernel_overhead` per kernel launched (the count follows the layer
//!   kinds, [`ModelPerf::kernels_per_pass`]: an MLA block about twice a GQA block, a fused
//!   MoE FFN half again a dense one), `seq_overhead` per running sequence (sampling,
//!   scheduling, metadata) and `step_overhead` per step (the engine's host work only: the
//!   fit bounds it at 0.2 ms, so a step's fixed cost follows the model's layers).
//!
//! Units: seconds, bytes, FLOP and FLOP/s throughout; callers convert at the edges.

pub mod fit;
pub mod serving;

use crate::layout::Layout;

/// How a weight tensor is stored, which decides the kernels that stream it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// 16/32-bit weights (bf16, fp16, fp32): the reference kernels.
    #[default]
    Wide,
    /// 8-bit weights (fp8, int8).
    Fp8,
    /// 4-bit floating point (MXFP4, NVFP4).
    Fp4,
    /// 4-bit integer (AWQ, GPTQ).
    Int4,
}

impl WeightFormat {
    /// The code Python passes (0 wide, 1 fp8/int8, 2 fp4, 3 int4).
    pub fn from_code(code: f64) -> WeightFormat {
        match code as i64 {
            1 => WeightFormat::Fp8,
            2 => WeightFormat::Fp4,
            3 => WeightFormat::Int4,
            _ => WeightFormat::Wide,
        }
    }
}

/// What the performance model needs to know about a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPerf {
    pub num_layers: f64,
    /// Layers that keep a KV cache (hybrid Mamba/linear-attention models have fewer).
    pub num_attention_layers: f64,
    /// Layers whose FFN is a routed-expert MoE.
    pub num_moe_layers: f64,
    /// Attention layers that attend over a sliding window (or chunk) of `sliding_window`
    /// tokens only (gpt-oss, Gemma 2/3, Llama 4); 0 when none.
    pub num_sliding_layers: f64,
    pub sliding_window: f64,
    pub hidden_size: f64,
    pub num_attention_heads: f64,
    pub num_kv_heads: i64,
    pub head_dim: f64,
    pub is_mla: bool,
    pub kv_lora_rank: f64,
    pub qk_rope_head_dim: f64,
    /// Bytes of all weights at their stored dtypes.
    pub weight_bytes: f64,
    /// Bytes of the routed experts (0 for dense models); the rest is read every step.
    pub expert_weight_bytes: f64,
    /// Bytes held in memory but never streamed by a step: the input embedding table, of
    /// which a step gathers only its tokens' rows.
    pub unread_weight_bytes: f64,
    pub num_experts: f64,
    pub experts_per_token: f64,
    /// Parameters in GEMMs per token (FLOPs = 2 per parameter per token).
    pub active_params: f64,
    pub kv_dtype_bytes: f64,
    /// Storage of the non-expert and of the expert weights (gpt-oss keeps attention in
    /// bf16 and its experts in MXFP4).
    pub dense_format: WeightFormat,
    pub expert_format: WeightFormat,
    /// Page-sized caches (DeepSeek-V4, see `pdtp._model_dsv4`): bytes per token per rank of
    /// the caches that grow with the context (compressed latents, indexer keys), replicated
    /// on every TP rank. 0 = derive the KV bytes from the shape above.
    pub kv_token_bytes: f64,
    /// With `kv_token_bytes`: bytes per sequence per rank of the windowed caches once their
    /// windows are full (sliding-window latents, compressor states).
    pub kv_sequence_bytes: f64,
    /// Compressed / sparse attention (DeepSeek-V4): what a decode step's attention reads and
    /// computes ([`compressed_attention_decode`]); all zero for every other model.
    pub sparse: SparseAttention,
}

/// DeepSeek-V4's decode attention as vLLM 0.33's kernels run it (`pdtp._model_dsv4`
/// `sparse_attention` fills it from the model): every layer attends its sliding window of
/// latents; a C4 layer adds the `topk` compressed latents its Lightning Indexer selects after
/// scoring every compressed index key; a C128 layer adds all its compressed latents.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SparseAttention {
    /// Attention layers (each with a sliding window of `window` latents).
    pub layers: f64,
    pub window: f64,
    /// Layers with 4× compressed latents and an indexer, and with 128× compressed latents.
    pub c4_layers: f64,
    pub c128_layers: f64,
    /// Compressed latents a C4 layer's indexer selects per query token (`index_topk`).
    pub topk: f64,
    /// Bytes of one stored latent (`fp8_ds_mla` 584, bf16 rows 1,024) and of one indexer key
    /// (fp8 values + fp32 scales, 132).
    pub latent_bytes: f64,
    pub index_key_bytes: f64,
    /// Indexer FLOPs per (query token, compressed key) of one C4 layer: 2 · index heads ·
    /// index head size (its heads are replicated on every TP rank, `ReplicatedLinear`).
    pub index_flops_per_key: f64,
    /// Compressor-state bytes one decode token moves over all layers (one state row
    /// written, the `coff · ratio` rows of a window read once per `ratio` tokens).
    pub state_bytes_per_token: f64,
    /// DSA (DeepSeek-V3.2, GLM-5; [`dsa_attention`]): MLA layers whose queries attend only
    /// the `topk` latents an indexer picks, and of those the layers that run their own
    /// indexer (the others reuse the previous layer's pick), each keeping one
    /// `index_key_bytes` key per token and scoring every cached key at `index_flops_per_key`.
    /// 0 for every other model (DeepSeek-V4's indexers are its C4 layers above).
    pub dsa_layers: f64,
    pub dsa_indexer_layers: f64,
}

impl ModelPerf {
    /// Whether the KV bytes come from `kv_token_bytes` / `kv_sequence_bytes`.
    fn paged_kv(&self) -> bool {
        self.kv_token_bytes > 0.0
    }

    /// The three numbers the connector rules need.
    pub fn shape(&self) -> crate::check::Shape {
        crate::check::Shape {
            num_attention_heads: self.num_attention_heads as i64,
            num_kv_heads: self.num_kv_heads,
            is_mla: self.is_mla,
            // Layers without a KV cache are Mamba-type (recurrent) layers.
            hybrid: self.num_attention_layers < self.num_layers,
            // `num_sliding_layers` counts chunked windows too (the same memory), which vLLM's
            // connectors see as full attention: `ModelSpec::layout_model` sets it from the
            // model's attention groups.
            sliding_window: false,
            mamba_groups: None,
        }
    }

    /// Kernels one forward pass over all layers launches, by layer kind (attention block,
    /// other mixers, FFN): what `kernel_overhead` multiplies. A GQA block: norm, QKV GEMM,
    /// rotary + cache write, attention, output GEMM (5); MLA's absorbed decode adds the
    /// latent norms, the q/kv up-projections and the two absorbed batched GEMMs (11); a dense
    /// FFN: norm, gate/up GEMM, activation, down GEMM (4). A routed-expert FFN as vLLM and
    /// SGLang run it on fused MoE kernels (Triton, CUTLASS/TRT-LLM, AITER): norm, router
    /// GEMM, top-k, the token sort, the two grouped GEMMs with the activation fused, the
    /// weighted combine (6, had been 10: "about twice a dense FFN"). Priced at 10, DeepSeek-R1
    /// held out came out 15-20% over on H200/B200, whose fixed step cost measures 1.9x
    /// Llama-3.3-70B's per layer (the MLA block's kernels alone make 1.7x).
    pub fn kernels_per_pass(&self) -> f64 {
        let attention = if self.is_mla { 11.0 } else { 5.0 };
        let other_mixers = (self.num_layers - self.num_attention_layers).max(0.0);
        let dense_ffn = (self.num_layers - self.num_moe_layers).max(0.0);
        attention * self.num_attention_layers
            + 6.0 * other_mixers
            + 4.0 * dense_ffn
            + 6.0 * self.num_moe_layers
    }

    fn full_attention_layers(&self) -> f64 {
        (self.num_attention_layers - self.windowed_layers()).max(0.0)
    }

    fn windowed_layers(&self) -> f64 {
        if self.sliding_window > 0.0 {
            self.num_sliding_layers.min(self.num_attention_layers)
        } else {
            0.0
        }
    }
}

/// What the performance model needs to know about a GPU type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuPerf {
    pub memory_bytes: f64,
    pub hbm_bandwidth: f64,
    /// Dense peak for the model's weight dtype (the linear layers' GEMMs).
    pub peak_flops: f64,
    /// Dense bf16 peak (attention runs in 16-bit).
    pub bf16_flops: f64,
    /// Per-GPU unidirectional bandwidth inside one NVLink/xGMI domain (all-reduce,
    /// all-to-all among GPUs of one domain).
    pub link_bandwidth: f64,
    /// GPUs one NVLink/xGMI domain joins (a node; GB200 NVL72: 72).
    pub scaleup_gpus: f64,
    /// Per-GPU unidirectional scale-out network bandwidth (InfiniBand/RoCE NIC), what a
    /// collective over more GPUs than one domain crosses, and that network's latency (s).
    pub scaleout_bandwidth: f64,
    pub scaleout_latency: f64,
}

/// The link a collective over `ranks` GPUs crosses: NVLink/xGMI inside one domain, the
/// scale-out network once the group spans domains. Plans name it per collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    ScaleUp,
    ScaleOut,
}

impl GpuPerf {
    /// The link a group of `ranks` GPUs (packed into as few domains as possible) crosses.
    pub fn link_for(&self, ranks: i64) -> Link {
        if (ranks as f64) > self.scaleup_gpus.max(1.0) {
            Link::ScaleOut
        } else {
            Link::ScaleUp
        }
    }
}

/// Declares [`Constants`] from one list of its fields: the struct, [`Constants::FIELDS`] (the
/// Python names, which carry a unit suffix where the value is a time) and the by-index
/// accessors are generated from it, so the Rust field, its Python name and its slot cannot
/// drift apart. Python's `pdtp.Constants`, its bindings and `perf_constants.json` are checked
/// against `FIELDS` (`pdtp._core.CONSTANT_FIELDS`) by `tests/test_perf.py`.
macro_rules! constants {
    ($($(#[doc = $doc:literal])* $field:ident => $name:literal,)*) => {
        /// Efficiency constants of one GPU type (and serving engine), overridable per call.
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub struct Constants {
            $($(#[doc = $doc])* pub $field: f64,)*
        }

        impl Constants {
            /// Field names, in the order of [`Constants::get`] / [`Constants::set`].
            pub const FIELDS: [&'static str; [$($name),*].len()] = [$($name),*];

            /// Constants with every field taken from `value(python name)`, in `FIELDS` order;
            /// the first error stops it.
            pub fn try_from_fn<E>(
                mut value: impl FnMut(&str) -> Result<f64, E>,
            ) -> Result<Self, E> {
                Ok(Constants { $($field: value($name)?,)* })
            }

            fn slot(&mut self, i: usize) -> Option<&mut f64> {
                let name = *Self::FIELDS.get(i)?;
                $(if name == $name {
                    return Some(&mut self.$field);
                })*
                None
            }
        }
    };
}

constants! {
    /// Linear-layer GEMM efficiency on prompt tokens (large M): share of the weight dtype's
    /// dense peak.
    mfu_prefill => "mfu_prefill",
    /// Linear-layer GEMM efficiency on decode tokens (M = the batch, tens of rows): small-M
    /// GEMMs reach a much smaller share of the peak, and their compute adds to streaming the
    /// weights rather than hiding under it.
    mfu_decode => "mfu_decode",
    /// Prompt attention FLOP efficiency: share of the bf16 peak (causal attention over the
    /// prompt's chunks).
    mfu_attention => "mfu_attention",
    /// Decode attention FLOP efficiency: share of the bf16 peak the decode attention kernels
    /// (FlashMLA, FlashInfer, AITER) reach where their FLOPs bind, as MLA's absorbed form does
    /// with all 128 heads on one rank under data-parallel attention. A kernel of its own,
    /// not the prompt kernels': priced at those, a DP-attention decode step of DeepSeek-R1
    /// at 100 sequences of 8k tokens cost 2x what was measured.
    mfu_decode_attention => "mfu_decode_attention",
    /// Weight streaming: share of the HBM peak the linear layers read weights at.
    mbu => "mbu",
    /// KV-cache reads of decode attention: share of the HBM peak.
    kv_read_efficiency => "kv_read_efficiency",
    /// Routed-expert weights stream at this share of the dense weights' rate (grouped
    /// GEMMs over many small matrices).
    moe_weight_efficiency => "moe_weight_efficiency",
    /// Expert-parallel ranks stream whole experts (GEMMs tp× wider than a tensor-parallel
    /// slice): their rate relative to `moe_weight_efficiency`'s.
    ep_weight_efficiency => "ep_weight_efficiency",
    /// Weight-format kernel efficiency relative to 16-bit weights, per format.
    fp8_weight_efficiency => "fp8_weight_efficiency",
    fp4_weight_efficiency => "fp4_weight_efficiency",
    int4_weight_efficiency => "int4_weight_efficiency",
    /// FP4 routed experts in grouped MoE GEMMs relative to 16-bit grouped GEMMs: a kernel of
    /// their own (CUTLASS/TRT-LLM grouped FP4 MoE, AITER's MXFP4 MoE), not the dense FP4
    /// GEMM's `fp4_weight_efficiency`. One efficiency for both carried DeepSeek-R1's expert
    /// rate to Llama's dense FP4 layers and back (held out: −30% / +20–45% TPOT).
    fp4_grouped_weight_efficiency => "fp4_grouped_weight_efficiency",
    /// All-reduce latency α (s).
    allreduce_latency => "allreduce_latency_s",
    /// All-to-all (expert-parallel dispatch or combine) latency (s).
    alltoall_latency => "alltoall_latency_s",
    /// Per kernel launched per step (s): launch gaps and small-kernel tails.
    kernel_overhead => "kernel_overhead_s",
    /// Per running sequence per step (s): sampling, scheduling, attention metadata.
    seq_overhead => "seq_overhead_s",
    /// Per step (s).
    step_overhead => "step_overhead_s",
    /// Per request: HTTP, tokenization, scheduling and streaming the first token (s).
    api_overhead => "api_overhead_s",
    /// Engine steps a new prompt waits before its prefill is scheduled.
    schedule_wait_steps => "schedule_wait_steps",
    /// The engine's one-off warm-up stall that a run's first wave waits out (s): kernels
    /// compiled just in time for the first batch shapes they meet (SGLang's DeepGEMM and
    /// FlashInfer JIT). The first `concurrency` requests of a benchmark pay it; the steady
    /// (median) request does not. vLLM compiles and captures its graphs before it serves: 0.
    first_wave_stall => "first_wave_stall_s",
    /// Memory held back per GPU for the runtime, activations and CUDA/HIP graphs (bytes).
    reserve_bytes => "reserve_bytes",
    /// Disaggregated TTFT = api + q · t_p + transfer: q covers queueing at the prefill
    /// instance, whose load the planner sets near its capacity.
    ttft_queue_factor => "ttft_queue_factor",
    /// KV transfer bandwidth per rank between instances (bytes/s) and its latency (s).
    kv_transfer_bandwidth => "kv_transfer_bandwidth",
    kv_transfer_latency => "kv_transfer_latency_s",
    /// vLLM's `max_num_seqs`: the largest decode batch one instance runs.
    max_num_seqs => "max_num_seqs",
    /// Routed experts' grouped GEMMs on prompt tokens relative to the dense GEMMs'
    /// `mfu_prefill`: a kernel of their own (Triton/AITER fused MoE, CUTLASS/TRT-LLM grouped
    /// GEMMs over E experts of T·k/E rows each), per GPU type. Sharing `mfu_prefill` with the
    /// experts carried DeepSeek-R1's fused-MoE prompt rate (7% of peak on MI300X) to
    /// Llama-70B's dense GEMMs (25%): held out, its TTFT was over-predicted 2-3x.
    moe_prefill_efficiency => "moe_prefill_efficiency",
}

impl Constants {
    /// The value of field `i` of [`Constants::FIELDS`].
    pub fn get(&self, i: usize) -> Option<f64> {
        let mut copy = *self;
        copy.slot(i).map(|v| *v)
    }

    /// Set field `i` of [`Constants::FIELDS`]; false when there is no such field.
    pub fn set(&mut self, i: usize, value: f64) -> bool {
        match self.slot(i) {
            Some(v) => {
                *v = value;
                true
            }
            None => false,
        }
    }

    /// The index of a field name in [`Constants::FIELDS`].
    pub fn field_index(name: &str) -> Option<usize> {
        Self::FIELDS.iter().position(|f| *f == name)
    }

    fn format_efficiency(&self, f: WeightFormat) -> f64 {
        match f {
            WeightFormat::Wide => 1.0,
            WeightFormat::Fp8 => self.fp8_weight_efficiency,
            WeightFormat::Fp4 => self.fp4_weight_efficiency,
            WeightFormat::Int4 => self.int4_weight_efficiency,
        }
    }

    /// The format's efficiency in the routed experts' grouped GEMMs.
    fn grouped_format_efficiency(&self, f: WeightFormat) -> f64 {
        match f {
            WeightFormat::Fp4 => self.fp4_grouped_weight_efficiency,
            other => self.format_efficiency(other),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    pub isl: f64,
    pub osl: f64,
    /// SLO bounds in seconds; `None` = unbounded.
    pub ttft: Option<f64>,
    pub tpot: Option<f64>,
}

// ---- memory ---------------------------------------------------------------------------

/// KV bytes one rank stores per token over all attention layers: GQA/MHA shards heads (at
/// least one head per rank, replicated when tp > H); MLA keeps the whole latent on every
/// rank.
pub fn kv_bytes_per_token_per_rank(m: &ModelPerf, tp: i64) -> f64 {
    if m.paged_kv() {
        return m.kv_token_bytes;
    }
    m.num_attention_layers * kv_bytes_per_token_per_layer(m, tp) + dsa_index_bytes_per_token(m)
}

/// Indexer-key bytes one rank stores per token over the DSA layers (replicated on every rank,
/// as the latent is): vLLM's `DeepseekV32IndexerCache`, fp8 keys and their scales.
fn dsa_index_bytes_per_token(m: &ModelPerf) -> f64 {
    m.sparse.dsa_indexer_layers * m.sparse.index_key_bytes
}

fn kv_bytes_per_token_per_layer(m: &ModelPerf, tp: i64) -> f64 {
    if m.is_mla {
        (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_dtype_bytes
    } else {
        let tp = tp.max(1);
        let heads = (m.num_kv_heads + tp - 1) / tp; // ceil, ≥ 1 for H ≥ 1
        2.0 * heads.max(1) as f64 * m.head_dim * m.kv_dtype_bytes
    }
}

/// KV bytes one rank holds for one sequence of `tokens` tokens: sliding-window layers keep
/// only the window (vLLM's hybrid KV-cache manager frees the blocks that fall out of it).
pub fn sequence_kv_bytes(m: &ModelPerf, layout: &Layout, tokens: f64) -> f64 {
    if m.paged_kv() {
        return (m.kv_token_bytes * tokens + m.kv_sequence_bytes) * stage_share(m, layout);
    }
    let per_layer = kv_bytes_per_token_per_layer(m, layout.tp);
    let windowed = tokens.min(m.sliding_window.max(0.0));
    let bytes = per_layer * (m.full_attention_layers() * tokens + m.windowed_layers() * windowed)
        + dsa_index_bytes_per_token(m) * tokens;
    bytes * stage_share(m, layout)
}

/// Fraction of the layers on the largest pipeline stage (1 without pipeline parallel).
fn stage_share(m: &ModelPerf, layout: &Layout) -> f64 {
    if layout.pp <= 1 || m.num_layers <= 0.0 {
        return 1.0;
    }
    // The largest stage of vLLM's partition (`get_pp_indices`).
    let most = layout
        .stage_layers(m.num_layers.round() as i64)
        .iter()
        .map(|&(a, b)| b - a)
        .max()
        .unwrap_or(0);
    most as f64 / m.num_layers
}

/// Weight bytes one GPU of `layout` holds: dense weights sharded over tp (and replicated
/// per data-parallel rank), routed experts sliced over the tp × dp ranks, or as whole
/// experts over the tp × dp expert-parallel ranks (the busiest rank's share); each
/// pipeline stage holds its layers only (the largest stage's share).
pub fn weight_bytes_per_gpu(m: &ModelPerf, layout: &Layout) -> f64 {
    let tp = layout.tp.max(1) as f64;
    let experts = m.expert_weight_bytes.max(0.0);
    let dense = (m.weight_bytes - experts).max(0.0) / tp;
    // Under expert parallel the busiest rank holds ceil(E / ep) whole experts; without it
    // every rank of the tp × dp group holds a slice of every expert (vLLM's MoE config).
    let e = m.num_experts.round() as i64;
    let expert_share = if layout.uses_ep() && e > 0 {
        experts * layout.most_experts_per_rank(e) as f64 / e as f64
    } else {
        experts / layout.moe_tp_size().max(1) as f64
    };
    (dense + expert_share) * stage_share(m, layout)
}

/// Bytes left for KV cache on one GPU of `layout` after weights and the runtime reserve,
/// under `gpu_memory_utilization`; negative when the weights do not fit.
pub fn kv_budget_bytes_layout(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    layout: &Layout,
    util: f64,
) -> f64 {
    util * g.memory_bytes - weight_bytes_per_gpu(m, layout) - c.reserve_bytes
}

pub fn kv_budget_bytes(m: &ModelPerf, g: &GpuPerf, c: &Constants, tp: i64, util: f64) -> f64 {
    kv_budget_bytes_layout(m, g, c, &Layout::tp(tp), util)
}

pub fn weights_fit_layout(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    layout: &Layout,
    util: f64,
) -> bool {
    kv_budget_bytes_layout(m, g, c, layout, util) > 0.0
}

pub fn weights_fit(m: &ModelPerf, g: &GpuPerf, c: &Constants, tp: i64, util: f64) -> bool {
    weights_fit_layout(m, g, c, &Layout::tp(tp), util)
}

/// Tokens of KV cache one instance holds (counting every attention layer in full).
pub fn kv_capacity_tokens(m: &ModelPerf, g: &GpuPerf, c: &Constants, tp: i64, util: f64) -> f64 {
    let budget = kv_budget_bytes(m, g, c, tp, util);
    if budget <= 0.0 {
        return 0.0;
    }
    (budget / kv_bytes_per_token_per_rank(m, tp)).floor()
}

/// Tokens of KV cache one data-parallel rank of `layout` holds. With page-sized caches a
/// sequence also holds windowed caches whatever its length, so the tokens are those of
/// sequences of `tokens` tokens (the workload's); otherwise every token costs the same.
pub fn kv_capacity_tokens_layout(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    layout: &Layout,
    util: f64,
    tokens: f64,
) -> f64 {
    if m.paged_kv() {
        let tokens = tokens.max(1.0);
        return max_sequences(m, g, c, layout, util, tokens) * tokens;
    }
    max_sequences(m, g, c, layout, util, 1.0)
}

/// Tokens a KV pool of `budget` bytes holds for up to `max_seqs` running sequences: with
/// page-sized caches each running sequence also holds its windowed caches
/// (`kv_sequence_bytes`), taken off the budget first; otherwise `budget` over the bytes per
/// token of one sequence of one token on `layout`.
pub fn kv_pool_tokens(m: &ModelPerf, layout: &Layout, budget: f64, max_seqs: f64) -> f64 {
    if budget <= 0.0 {
        return 0.0;
    }
    if m.paged_kv() {
        let share = stage_share(m, layout);
        let left = budget - max_seqs.max(1.0) * m.kv_sequence_bytes * share;
        return (left.max(0.0) / (m.kv_token_bytes * share)).floor();
    }
    let per_token = sequence_kv_bytes(m, layout, 1.0);
    if per_token > 0.0 {
        (budget / per_token).floor()
    } else {
        0.0
    }
}

/// Sequences of `tokens` tokens whose KV cache one data-parallel rank of `layout` holds
/// (over all its pipeline micro-batches).
pub fn max_sequences(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    layout: &Layout,
    util: f64,
    tokens: f64,
) -> f64 {
    let budget = kv_budget_bytes_layout(m, g, c, layout, util);
    let per_seq = sequence_kv_bytes(m, layout, tokens.max(1.0));
    if budget <= 0.0 || per_seq <= 0.0 {
        return 0.0;
    }
    (budget / per_seq).floor()
}

// ---- communication --------------------------------------------------------------------

/// One all-reduce of `bytes` over `ranks`: α + 2(n−1)/n · M / BW. Inside one NVLink/xGMI
/// domain BW is the link; a group spanning domains runs hierarchically (reduce inside each
/// domain, all-reduce across them, broadcast back) and its cross-domain step moves
/// 2(d−1)/d of the buffer over each GPU's NIC share, d = domains; zero for one rank.
pub fn allreduce_time(g: &GpuPerf, c: &Constants, ranks: i64, bytes: f64) -> f64 {
    if ranks <= 1 {
        return 0.0;
    }
    let n = ranks as f64;
    let inside = n.min(g.scaleup_gpus.max(1.0));
    let intra = 2.0 * (inside - 1.0) / inside * bytes / g.link_bandwidth;
    match g.link_for(ranks) {
        Link::ScaleUp => c.allreduce_latency + intra,
        Link::ScaleOut => {
            let d = (n / inside).ceil();
            // Each of the `inside` GPUs of a domain carries 1/inside of the buffer across.
            let inter = 2.0 * (d - 1.0) / d * bytes / inside / g.scaleout_bandwidth;
            c.allreduce_latency + g.scaleout_latency + intra + inter
        }
    }
}

/// One all-to-all over `ranks` in which each rank sends `bytes` (expert-parallel dispatch
/// or combine): a 1/n share stays, the shares for ranks of the same domain cross NVLink/xGMI
/// and the shares for other domains cross the sending GPU's NIC, in parallel with them.
pub fn alltoall_time(g: &GpuPerf, c: &Constants, ranks: i64, bytes: f64) -> f64 {
    if ranks <= 1 {
        return 0.0;
    }
    let n = ranks as f64;
    let inside = n.min(g.scaleup_gpus.max(1.0));
    let intra = (inside - 1.0) / n * bytes / g.link_bandwidth;
    match g.link_for(ranks) {
        Link::ScaleUp => c.alltoall_latency + intra,
        Link::ScaleOut => {
            let inter = (n - inside) / n * bytes / g.scaleout_bandwidth;
            c.alltoall_latency + g.scaleout_latency + intra.max(inter)
        }
    }
}

/// All-gather of every rank's `bytes` to all `ranks` (and its reduce-scatter mirror): each
/// rank receives (n−1) shares; across domains the off-domain shares cross the NIC.
pub fn allgather_time(g: &GpuPerf, c: &Constants, ranks: i64, bytes: f64) -> f64 {
    if ranks <= 1 {
        return 0.0;
    }
    let n = ranks as f64;
    let inside = n.min(g.scaleup_gpus.max(1.0));
    let intra = (inside - 1.0) * bytes / g.link_bandwidth;
    match g.link_for(ranks) {
        Link::ScaleUp => c.allreduce_latency + intra,
        Link::ScaleOut => {
            let inter = (n - inside) * bytes / g.scaleout_bandwidth;
            c.allreduce_latency + g.scaleout_latency + intra.max(inter)
        }
    }
}

/// The collectives one step of `layout` runs and the link each crosses, as [`step_time`]
/// prices them: the TP all-reduce inside each TP group, the expert-parallel all-to-all over
/// the tp × dp ranks (DP attention with EP), the token gather over them (DP attention
/// without EP), the pipeline's stage-to-stage send (over the scale-out network once a stage
/// boundary leaves the domain). Plans name these per side.
pub fn collective_links(m: &ModelPerf, g: &GpuPerf, layout: &Layout) -> Vec<(&'static str, Link)> {
    let mut out = Vec::new();
    if layout.tp > 1 {
        out.push(("tp_allreduce", g.link_for(layout.tp)));
    }
    if layout.dp > 1 && m.num_moe_layers > 0.0 {
        if layout.uses_ep() {
            out.push(("ep_alltoall", g.link_for(layout.ep_size())));
        } else {
            out.push(("dp_allgather", g.link_for(layout.moe_tp_size())));
        }
    }
    if layout.pp > 1 {
        out.push(("pp_send", g.link_for(layout.gpus())));
    }
    out
}

// ---- the step ---------------------------------------------------------------------------

/// The work of one engine step: what a scheduler batched together. vLLM's continuous
/// batching with chunked prefill mixes decode tokens and prompt chunks in one step, so one
/// step-time function serves prefill instances, decode instances, aggregated serving and the
/// simulator alike. Under data-parallel attention it is one DP rank's batch (the others run
/// alike); under pipeline parallel, one micro-batch.
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

/// A smooth maximum of two overlapping costs (memory and compute of one kernel): within 19%
/// of the larger where they are equal, the larger alone where one dominates.
#[inline]
fn overlap(a: f64, b: f64) -> f64 {
    let (a2, b2) = (a * a, b * b);
    (a2 * a2 + b2 * b2).sqrt().sqrt()
}

/// Routed-expert bytes the busiest rank streams for `tokens` tokens (all MoE layers).
/// Uniform routing touches each expert with probability p = 1 − (1 − k/E)^T. Under tensor
/// parallel every rank reads its slice of every touched expert; under expert parallel a
/// rank owns E/ep whole experts and the step waits for the rank that touched the most
/// (mean + √(2 ln ep) standard deviations of the binomial count, at most all it owns).
pub fn expert_bytes_read(m: &ModelPerf, layout: &Layout, tokens: f64) -> f64 {
    if m.num_experts <= 0.0 || m.expert_weight_bytes <= 0.0 {
        return 0.0;
    }
    let k_over_e = (m.experts_per_token / m.num_experts).clamp(0.0, 1.0);
    let p = 1.0 - (1.0 - k_over_e).powf(tokens.max(1.0));
    let ep = layout.ep_size();
    if !layout.uses_ep() {
        // vLLM's MoE without EP slices every expert over the TP group flattened across the
        // DP ranks (tp × dp), as the memory model holds them.
        return m.expert_weight_bytes * p / layout.moe_tp_size().max(1) as f64;
    }
    let n = m.num_experts / ep as f64;
    let z = (2.0 * (ep as f64).ln()).sqrt();
    let busiest = (n * p + z * (n * p * (1.0 - p)).sqrt()).min(n);
    m.expert_weight_bytes / m.num_experts * busiest
}

/// (bytes, FLOPs) one decode token's attention costs on one rank over all layers of a
/// compressed / sparse attention model (DeepSeek-V4, [`SparseAttention`]) at `context`
/// tokens, as vLLM 0.33's kernels run it (`models/deepseek_v4/attention.py`, `sparse_mla.py`,
/// `compressor.py`; every cache is replicated on every TP rank):
///
/// - bytes: every layer reads `min(context, window)` sliding-window latents; a C4 layer the
///   `min(context / 4, topk)` selected compressed latents plus every compressed index key
///   (`context / 4` of them, the indexer's scan); a C128 layer its `context / 128`
///   compressed latents; writes: one window latent per layer, one compressed latent (and
///   index key) per ratio tokens; the compressor states' traffic;
/// - FLOPs: scores and values over the latent for each entry attended (`4 · head_dim` per
///   query head and entry; the FlashMLA decode kernel runs 64 or 128 query heads whatever
///   the local count, `nvidia/flashmla.py:78` `get_padded_num_q_heads`), plus the indexer's
///   logits over every compressed key of a C4 layer.
pub fn compressed_attention_decode(m: &ModelPerf, tp: i64, context: f64) -> (f64, f64) {
    let s = &m.sparse;
    let ctx = context.max(0.0);
    let window = ctx.min(s.window);
    let c4 = ctx / 4.0;
    let c128 = ctx / 128.0;
    let selected = c4.min(s.topk);
    let entries = s.layers * window + s.c4_layers * selected + s.c128_layers * c128;
    let writes = s.layers * s.latent_bytes
        + s.c4_layers * (s.latent_bytes + s.index_key_bytes) / 4.0
        + s.c128_layers * s.latent_bytes / 128.0;
    let bytes = entries * s.latent_bytes
        + s.c4_layers * c4 * s.index_key_bytes
        + writes
        + s.state_bytes_per_token;
    let local = (m.num_attention_heads / tp.max(1) as f64).max(1.0);
    let heads = if local <= 64.0 {
        64.0
    } else {
        128.0_f64.max(local)
    };
    let flops = heads * 4.0 * m.head_dim * entries + s.c4_layers * c4 * s.index_flops_per_key;
    (bytes, flops)
}

/// What the DSA layers of one rank cost for one step (all such layers, before the pipeline
/// stage's share).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DsaCost {
    /// Bytes the decode tokens' attention reads: the picked latents and every index key.
    pub decode_bytes: f64,
    /// FLOPs of the sparse kernels: the decode tokens' and the long prompt chunks' attention
    /// over their picked latents, and the indexers' scoring.
    pub sparse_flops: f64,
    /// Causal (query, key) pairs × layers of prompt chunks short enough to run as dense MHA.
    pub dense_prompt_work: f64,
}

/// The DSA layers' cost for `batch` on one rank. vLLM's sparse MLA (0.33:
/// `v1/attention/backends/mla/flashmla_sparse.py`, `layers/attention/sparse_mla_attention.py`)
/// attends the `topk` latents the indexer picks per query, not the whole context, in the
/// absorbed form (scores over the kv_lora + rope latent, values over kv_lora: `2 · (2 ·
/// kv_lora + rope)` FLOPs per head and latent) with the query heads padded to a multiple of
/// 64 (`prefill_padding`, `_compute_fp8_decode_padded_heads`): at TP 8 GLM-5's 8 local heads
/// cost as 64. Every indexer layer reads every cached index key and scores it (its heads are
/// replicated on every TP rank): a decode token over its whole context, a prompt chunk over
/// its causal pairs. A prompt no longer than `topk` runs as dense MHA and skips the scoring
/// (`_use_dense_mha_prefill`, `enable_short_prefill_scoring_skip`); a chunk's longest
/// sequence is taken as twice its mean attended context. `min(Σ context, seqs · topk)` and
/// `min(work, tokens · topk)` are exact when all contexts are on one side of `topk` (as for
/// sliding windows).
pub fn dsa_attention(m: &ModelPerf, tp: i64, batch: &StepBatch) -> DsaCost {
    let s = &m.sparse;
    if s.dsa_layers <= 0.0 {
        return DsaCost::default();
    }
    let ctx = batch.decode_context_tokens;
    let selected = ctx.min(batch.decode_seqs * s.topk);
    let latent = kv_bytes_per_token_per_layer(m, tp);
    let local = (m.num_attention_heads / tp.max(1) as f64).max(1.0);
    let heads = (local / 64.0).ceil() * 64.0;
    let pair = heads * 2.0 * (2.0 * m.kv_lora_rank + m.qk_rope_head_dim);
    let mut cost = DsaCost {
        decode_bytes: s.dsa_layers * selected * latent
            + s.dsa_indexer_layers * ctx * s.index_key_bytes,
        sparse_flops: s.dsa_layers * selected * pair
            + s.dsa_indexer_layers * ctx * s.index_flops_per_key,
        dense_prompt_work: 0.0,
    };
    let (work, tokens) = (batch.prefill_attention_work, batch.prefill_tokens);
    if 2.0 * work <= tokens * s.topk {
        cost.dense_prompt_work = s.dsa_layers * work;
    } else {
        cost.sparse_flops += s.dsa_layers * work.min(tokens * s.topk) * pair
            + s.dsa_indexer_layers * work * s.index_flops_per_key;
    }
    cost
}

/// Weight bytes one decode step reads at batch `b` under tensor parallel `tp = 1` (all
/// ranks together): the dense weights plus the experts `b` tokens touch.
pub fn weight_bytes_touched(m: &ModelPerf, b: f64) -> f64 {
    let dense = (m.weight_bytes - m.expert_weight_bytes).max(0.0);
    dense + expert_bytes_read(m, &Layout::tp(1), b)
}

/// Seconds one engine step of `layout` takes for `batch` (one DP rank's batch; under
/// pipeline parallel, the latency of one micro-batch through every stage). This is the one
/// step-cost function: prefill and decode times, aggregated serving and the simulator are
/// built on it.
pub fn step_time(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    layout: &Layout,
    batch: &StepBatch,
) -> f64 {
    let tp_i = layout.tp.max(1);
    let tp = tp_i as f64;
    let pp = layout.pp.max(1) as f64;
    let dp = layout.dp.max(1) as f64;
    let stage = stage_share(m, layout);
    let tokens = batch.tokens();

    // Linear layers: stream weights vs GEMM FLOPs. Under DP attention the expert layers see
    // every DP rank's tokens.
    let dense = (m.weight_bytes - m.expert_weight_bytes - m.unread_weight_bytes).max(0.0)
        / tp
        / c.format_efficiency(m.dense_format);
    let ep_efficiency = if layout.ep && layout.ep_size() > 1 {
        c.ep_weight_efficiency
    } else {
        1.0
    };
    let experts = expert_bytes_read(m, layout, tokens * dp)
        / (c.grouped_format_efficiency(m.expert_format) * c.moe_weight_efficiency * ep_efficiency);
    let stream = (dense + experts) * stage / (g.hbm_bandwidth * c.mbu);
    let flops_per_token = 2.0 * m.active_params * stage / tp / g.peak_flops;
    let decode_gemm = flops_per_token * batch.decode_seqs / c.mfu_decode;
    let prefill_gemm = prefill_gemm_time_routed(
        m,
        g,
        c,
        stage / tp,
        batch.prefill_tokens,
        batch.prefill_tokens * dp,
    );
    let linear = overlap(stream + decode_gemm, prefill_gemm);

    // Attention. Sliding-window layers see at most the window per sequence (and per
    // prompt token): min(Σ context, seqs · W) is exact when all contexts are on one side of W.
    // DSA layers are priced apart ([`dsa_attention`]).
    let full = (m.full_attention_layers() - m.sparse.dsa_layers).max(0.0) * stage;
    let windowed = m.windowed_layers() * stage;
    let w = m.sliding_window;
    let ctx = batch.decode_context_tokens;
    let ctx_w = if windowed > 0.0 {
        ctx.min(batch.decode_seqs * w)
    } else {
        0.0
    };
    let work = batch.prefill_attention_work;
    let work_w = if windowed > 0.0 {
        work.min(batch.prefill_tokens * w)
    } else {
        0.0
    };
    let heads = m.num_attention_heads / tp;
    // FLOPs per (query, key) pair per layer and rank. MLA decodes in the absorbed form
    // (scores and values over the kv_lora_rank latent); its prefill runs as MHA with
    // qk = head_dim and v = head_dim − rope dims.
    let (decode_pair, prefill_pair) = if m.is_mla {
        (
            2.0 * heads * (2.0 * m.kv_lora_rank + m.qk_rope_head_dim),
            2.0 * heads * (2.0 * m.head_dim - m.qk_rope_head_dim),
        )
    } else {
        (4.0 * heads * m.head_dim, 4.0 * heads * m.head_dim)
    };
    let attention_flops = g.bf16_flops * c.mfu_attention;
    let decode_attention_flops = g.bf16_flops * c.mfu_decode_attention;
    let kv_layer = kv_bytes_per_token_per_layer(m, tp_i);
    let kv_read =
        kv_layer * (full * ctx + windowed * ctx_w) / (g.hbm_bandwidth * c.kv_read_efficiency);
    let decode_attention = if m.sparse.layers > 0.0 {
        // Compressed / sparse attention: its own bytes and FLOPs per decode token, at the
        // batch's mean context (exact when the contexts are equal, as in a decode point).
        let seqs = batch.decode_seqs;
        let (bytes, flops) = compressed_attention_decode(m, tp_i, ctx / seqs.max(1.0));
        overlap(
            seqs * stage * bytes / (g.hbm_bandwidth * c.kv_read_efficiency),
            seqs * stage * flops / decode_attention_flops,
        )
    } else {
        overlap(
            kv_read,
            decode_pair * (full * ctx + windowed * ctx_w) / decode_attention_flops,
        )
    };
    let prefill_attention = prefill_pair * (full * work + windowed * work_w) / attention_flops;
    // DSA's sparse kernels are the absorbed-MLA (FlashMLA) kind: the decode attention rate.
    let dsa_cost = dsa_attention(m, tp_i, batch);
    let dsa = overlap(
        stage * dsa_cost.decode_bytes / (g.hbm_bandwidth * c.kv_read_efficiency),
        stage * dsa_cost.sparse_flops / decode_attention_flops,
    ) + prefill_pair * stage * dsa_cost.dense_prompt_work / attention_flops;

    // Communication.
    let activations = tokens * m.hidden_size * 2.0;
    let layers = m.num_layers * stage;
    let moe_layers = m.num_moe_layers * stage;
    let comm = if layout.uses_ep() && layout.dp > 1 {
        // DP attention + EP: attention all-reduces inside each TP group, dense FFN layers
        // likewise, MoE layers dispatch and combine tokens across all tp × dp ranks (over
        // the scale-out network once they span NVLink/xGMI domains).
        let a2a = alltoall_time(g, c, layout.ep_size(), activations * m.experts_per_token);
        (layers + (layers - moe_layers)) * allreduce_time(g, c, tp_i, activations)
            + 2.0 * moe_layers * a2a
    } else if layout.dp > 1 && moe_layers > 0.0 {
        // DP attention without EP: each MoE layer gathers every DP rank's tokens to the
        // tp × dp ranks that hold expert slices and reduce-scatters their outputs back.
        let group = layout.moe_tp_size();
        (layers + (layers - moe_layers)) * allreduce_time(g, c, tp_i, activations)
            + 2.0 * moe_layers * allgather_time(g, c, group, activations)
    } else {
        2.0 * layers * allreduce_time(g, c, tp_i, activations)
    };

    let kernels = m.kernels_per_pass() * stage * c.kernel_overhead;
    let stage_time = linear + decode_attention + prefill_attention + dsa + comm + kernels;
    let p2p = if pp > 1.0 {
        // Stage boundaries between NVLink/xGMI domains cross the scale-out network, each TP
        // rank sending its share of the activations through its own NIC.
        let domains = (layout.gpus() as f64 / g.scaleup_gpus.max(1.0))
            .ceil()
            .max(1.0);
        let across = (domains - 1.0).min(pp - 1.0);
        (pp - 1.0 - across) * (c.allreduce_latency + activations / g.link_bandwidth)
            + across
                * (c.allreduce_latency
                    + g.scaleout_latency
                    + activations / tp / g.scaleout_bandwidth)
    } else {
        0.0
    };
    pp * stage_time + p2p + c.step_overhead + batch.decode_seqs * c.seq_overhead
}

/// Bytes one stored parameter of a weight format takes, its block scales included (MXFP4 one
/// byte per 32, NVFP4 one per 16; GPTQ/AWQ 16-bit scales per 128): what turns expert bytes
/// back into the parameters their GEMMs multiply.
fn bytes_per_param(f: WeightFormat) -> f64 {
    match f {
        WeightFormat::Wide => 2.0,
        WeightFormat::Fp8 => 1.0,
        WeightFormat::Fp4 => 0.55,
        WeightFormat::Int4 => 0.52,
    }
}

/// Routed-expert parameters one token multiplies (all MoE layers): `k` of the `E` experts'
/// parameters. 0 for dense models.
pub fn routed_active_params(m: &ModelPerf) -> f64 {
    if m.num_experts <= 0.0 || m.expert_weight_bytes <= 0.0 {
        return 0.0;
    }
    let params = m.expert_weight_bytes / bytes_per_param(m.expert_format);
    (params * (m.experts_per_token / m.num_experts).clamp(0.0, 1.0)).min(m.active_params)
}

/// Rows of a grouped expert GEMM's M tile: the block vLLM's and SGLang's tuned Triton fused-MoE
/// configurations use on prompt-sized batches (`BLOCK_SIZE_M` 64 from 1,024 tokens for
/// DeepSeek's 256 experts on H200 and MI300X, `fused_moe/configs/E=256,N=256,...`); an expert's
/// rows are padded to whole tiles.
pub const MOE_GEMM_TILE_TOKENS: f64 = 64.0;

/// The routed experts' grouped prompt GEMMs' work over their FLOPs when `tokens` tokens are
/// routed at once (every DP rank's under DP attention): each expert gets `n = tokens · k / E`
/// rows on average, a touched expert (probability `1 − e^(−n)`) half a tile of padding more,
/// so `(n + T/2 · (1 − e^(−n))) / n`. A 1k-token prompt through DeepSeek-R1's 256 experts
/// (top 8, 31 rows each) runs 2.0x its FLOPs, an 8k one 1.13x, a P/D prefill batch of 32k
/// 1.03x: the aggregated runs' single prompts and the P/D prefill workers' full batches are
/// one kernel at different fills, which one fitted rate could not hold (fitted on the first,
/// the second cleared half what it was measured to).
pub fn routed_prefill_padding(m: &ModelPerf, tokens: f64) -> f64 {
    if m.num_experts <= 0.0 || m.experts_per_token <= 0.0 || tokens <= 0.0 {
        return 1.0;
    }
    let rows = tokens * m.experts_per_token / m.num_experts;
    (rows + 0.5 * MOE_GEMM_TILE_TOKENS * (1.0 - (-rows).exp())) / rows
}

/// Seconds the prompt tokens' linear-layer GEMMs take on one rank, which holds `share` of the
/// layers' weights (its pipeline stage over its TP group): the dense GEMMs (attention
/// projections, shared experts, dense FFNs) at `mfu_prefill` of the weight dtype's peak, the
/// routed experts' grouped GEMMs at `moe_prefill_efficiency` of that, FLOPs = 2 per
/// parameter per token either way, the experts' padded to whole tiles
/// ([`routed_prefill_padding`] of the `tokens` themselves).
pub fn prefill_gemm_time(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    share: f64,
    tokens: f64,
) -> f64 {
    prefill_gemm_time_routed(m, g, c, share, tokens, tokens)
}

/// [`prefill_gemm_time`] when the experts see `routed_tokens` tokens at once (every DP rank's
/// prompt tokens under DP attention) and this rank computes `tokens` tokens' share.
pub fn prefill_gemm_time_routed(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    share: f64,
    tokens: f64,
    routed_tokens: f64,
) -> f64 {
    let routed = routed_active_params(m) * routed_prefill_padding(m, routed_tokens);
    let dense = (m.active_params - routed_active_params(m)).max(0.0);
    let rate = g.peak_flops * c.mfu_prefill;
    2.0 * share * tokens * (dense + routed / c.moe_prefill_efficiency) / rate
}

// ---- TP-only functions (the planner's interface) ----------------------------------------

/// Prefill FLOPs of one request: 2·N_act·isl + 2·L_attn·A·head_dim·isl².
pub fn prefill_flops(m: &ModelPerf, isl: f64) -> f64 {
    2.0 * m.active_params * isl
        + 2.0 * m.num_attention_layers * m.num_attention_heads * m.head_dim * isl * isl
}

/// Time to prefill one request of `isl` tokens on one instance of `tp` GPUs.
pub fn prefill_time(m: &ModelPerf, g: &GpuPerf, c: &Constants, tp: i64, isl: f64) -> f64 {
    step_time(m, g, c, &Layout::tp(tp), &StepBatch::prefill(isl))
}

/// Time to move one prompt's KV cache from prefill to decode: each of the `tp` prefill
/// ranks sends its shard in parallel.
pub fn kv_transfer_time(m: &ModelPerf, c: &Constants, prefill_tp: i64, isl: f64) -> f64 {
    (isl * kv_bytes_per_token_per_rank(m, prefill_tp) + m.kv_sequence_bytes)
        / c.kv_transfer_bandwidth
        + c.kv_transfer_latency
}

/// Seconds from a client sending a request until the engine's scheduler can schedule its
/// prompt: the request overhead (HTTP, tokenization, the engine's input queue) plus
/// `schedule_wait_steps` engine steps of `step` seconds (the instance's current decode step).
/// Aggregated serving ([`serving`]) and the simulator charge every new prompt this.
pub fn admission_delay(c: &Constants, step: f64) -> f64 {
    c.api_overhead + c.schedule_wait_steps * step
}

/// Disaggregated TTFT: request overhead + q · t_p + KV transfer.
pub fn ttft(m: &ModelPerf, g: &GpuPerf, c: &Constants, prefill_tp: i64, isl: f64) -> f64 {
    ttft_layout(m, g, c, &Layout::tp(prefill_tp), isl)
}

pub fn ttft_layout(m: &ModelPerf, g: &GpuPerf, c: &Constants, layout: &Layout, isl: f64) -> f64 {
    let t_p = step_time(m, g, c, layout, &StepBatch::prefill(isl));
    c.api_overhead + c.ttft_queue_factor * t_p + kv_transfer_time(m, c, layout.tp, isl)
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
    step_time(m, g, c, &Layout::tp(tp), &StepBatch::decode(b, context))
}

/// Decode operating point of one instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodePoint {
    /// Largest batch that meets the TPOT bound and fits the KV cache (0: none does), per
    /// data-parallel rank (over all pipeline micro-batches).
    pub batch: i64,
    /// Largest batch memory and max_num_seqs allow (full isl + osl sequences), before the
    /// TPOT bound.
    pub max_batch: i64,
    /// Step time at `batch` (s); at batch 1 when `batch` is 0.
    pub tpot: f64,
    /// Requests/s one instance completes at `batch` (all its data-parallel ranks).
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
    decode_point_layout(m, g, c, &Layout::tp(tp), w, util)
}

/// [`decode_point`] for any layout: each DP rank runs the batch, split over the pipeline's
/// micro-batches (each step carries batch / pp sequences through all stages).
pub fn decode_point_layout(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    layout: &Layout,
    w: &Workload,
    util: f64,
) -> DecodePoint {
    let context = w.isl + w.osl / 2.0;
    let pp = layout.pp.max(1) as f64;
    let lanes = layout.dp.max(1) as f64;
    let by_memory = max_sequences(m, g, c, layout, util, w.isl + w.osl);
    let max_batch = by_memory.min(c.max_num_seqs * pp).max(0.0) as i64;
    let step = |b: i64| step_time(m, g, c, layout, &StepBatch::decode(b as f64 / pp, context));
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
        lanes * batch as f64 / (tpot * w.osl)
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
    prefill_point_layout(m, g, c, &Layout::tp(tp), w, util)
}

/// [`prefill_point`] for any layout: every DP rank prefills its own prompts, and a pipeline
/// keeps one prompt per stage in flight.
pub fn prefill_point_layout(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    layout: &Layout,
    w: &Workload,
    util: f64,
) -> PrefillPoint {
    let time = step_time(m, g, c, layout, &StepBatch::prefill(w.isl));
    let lanes = (layout.dp.max(1) * layout.pp.max(1)) as f64;
    PrefillPoint {
        time,
        ttft: ttft_layout(m, g, c, layout, w.isl),
        requests_per_s: lanes / time,
        fits: max_sequences(m, g, c, layout, util, w.isl) >= 1.0,
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
            num_moe_layers: 0.0,
            num_sliding_layers: 0.0,
            sliding_window: 0.0,
            hidden_size: 8192.0,
            num_attention_heads: 64.0,
            num_kv_heads: 8,
            head_dim: 128.0,
            is_mla: false,
            kv_lora_rank: 0.0,
            qk_rope_head_dim: 0.0,
            weight_bytes: 70.55e9 * 2.0,
            expert_weight_bytes: 0.0,
            unread_weight_bytes: 128256.0 * 8192.0 * 2.0,
            num_experts: 0.0,
            experts_per_token: 0.0,
            active_params: 69.5e9,
            kv_dtype_bytes: 2.0,
            dense_format: WeightFormat::Wide,
            expert_format: WeightFormat::Wide,
            kv_token_bytes: 0.0,
            kv_sequence_bytes: 0.0,
            sparse: SparseAttention::default(),
        }
    }

    /// A DeepSeek-V3-shaped MoE with MLA, fp8 weights.
    pub fn moe_mla() -> ModelPerf {
        ModelPerf {
            num_layers: 61.0,
            num_attention_layers: 61.0,
            num_moe_layers: 58.0,
            num_sliding_layers: 0.0,
            sliding_window: 0.0,
            hidden_size: 7168.0,
            num_attention_heads: 128.0,
            num_kv_heads: 128,
            head_dim: 192.0,
            is_mla: true,
            kv_lora_rank: 512.0,
            qk_rope_head_dim: 64.0,
            weight_bytes: 672.9e9,
            expert_weight_bytes: 653.9e9,
            unread_weight_bytes: 129280.0 * 7168.0 * 2.0,
            num_experts: 256.0,
            experts_per_token: 8.0,
            active_params: 36.6e9,
            kv_dtype_bytes: 2.0,
            dense_format: WeightFormat::Fp8,
            expert_format: WeightFormat::Fp8,
            kv_token_bytes: 0.0,
            kv_sequence_bytes: 0.0,
            sparse: SparseAttention::default(),
        }
    }

    pub fn h100() -> GpuPerf {
        GpuPerf {
            memory_bytes: 80.0 * (1u64 << 30) as f64,
            hbm_bandwidth: 3.35e12,
            peak_flops: 989e12,
            bf16_flops: 989e12,
            link_bandwidth: 450e9,
            scaleup_gpus: 8.0,
            scaleout_bandwidth: 50e9,
            scaleout_latency: 10e-6,
        }
    }

    /// Round constants close to product.md §3's starting points (no per-kernel, per-sequence
    /// or request overheads), so the planner's tests see the arithmetic they were written for.
    pub fn consts() -> Constants {
        Constants {
            mfu_prefill: 0.5,
            moe_prefill_efficiency: 1.0,
            mfu_decode: 0.5,
            mfu_attention: 0.5,
            mfu_decode_attention: 0.5,
            mbu: 0.8,
            kv_read_efficiency: 0.8,
            moe_weight_efficiency: 1.0,
            ep_weight_efficiency: 1.0,
            fp8_weight_efficiency: 1.0,
            fp4_weight_efficiency: 1.0,
            int4_weight_efficiency: 1.0,
            fp4_grouped_weight_efficiency: 1.0,
            allreduce_latency: 30e-6,
            alltoall_latency: 30e-6,
            kernel_overhead: 0.0,
            seq_overhead: 0.0,
            step_overhead: 1.5e-3,
            api_overhead: 0.0,
            schedule_wait_steps: 1.0,
            first_wave_stall: 0.0,
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
    fn page_sized_caches_replace_the_shape_formula() {
        // Page-sized caches of the DeepSeek-V4-Flash kind (pdtp._model_dsv4): bytes per token
        // of the growing caches, bytes per sequence of the windowed ones, all replicated.
        let paged = ModelPerf {
            kv_token_bytes: 3915.0,
            kv_sequence_bytes: 19.6e6,
            ..moe_mla()
        };
        for tp in [1, 8] {
            assert_eq!(kv_bytes_per_token_per_rank(&paged, tp), 3915.0);
            let l = Layout::tp(tp);
            assert_eq!(
                sequence_kv_bytes(&paged, &l, 8192.0),
                3915.0 * 8192.0 + 19.6e6
            );
        }
        // The shape formula is not consulted: the MLA latent alone would be 61 · 576 · 2 B.
        assert!(kv_bytes_per_token_per_rank(&moe_mla(), 1) > 3915.0 * 10.0);
        let g = GpuPerf {
            memory_bytes: 192.0 * (1u64 << 30) as f64,
            ..h100()
        };
        let c = consts();
        let l = Layout::tp(8);
        let budget = kv_budget_bytes_layout(&paged, &g, &c, &l, 0.9);
        assert!(budget > 100.0 * 19.6e6);
        let seqs = max_sequences(&paged, &g, &c, &l, 0.9, 8192.0);
        assert_eq!(seqs, (budget / (3915.0 * 8192.0 + 19.6e6)).floor());
        assert_eq!(
            kv_capacity_tokens_layout(&paged, &g, &c, &l, 0.9, 8192.0),
            seqs * 8192.0
        );
        // Each running sequence's windowed caches come off the pool first.
        let pool = kv_pool_tokens(&paged, &l, budget, 100.0);
        assert_eq!(pool, ((budget - 100.0 * 19.6e6) / 3915.0).floor());
        // The transfer moves the windowed caches too.
        let t = kv_transfer_time(&paged, &c, 8, 1000.0);
        let expect = (1000.0 * 3915.0 + 19.6e6) / c.kv_transfer_bandwidth + c.kv_transfer_latency;
        assert!((t - expect).abs() < 1e-12);
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
    fn tp_only_functions_are_the_step_function() {
        let (m, g, c) = (llama70(), h100(), consts());
        for tp in [1, 2, 4, 8] {
            let l = Layout::tp(tp);
            let p = step_time(&m, &g, &c, &l, &StepBatch::prefill(2048.0));
            assert_eq!(p, prefill_time(&m, &g, &c, tp, 2048.0));
            for b in [1.0, 7.0, 64.0] {
                let d = step_time(&m, &g, &c, &l, &StepBatch::decode(b, 2304.0));
                assert_eq!(d, decode_step_time(&m, &g, &c, tp, b, 2304.0));
            }
        }
    }

    #[test]
    fn monotone_in_batch_context_and_memory() {
        let (m, g, c) = (llama70(), h100(), consts());
        for model in [m, moe_mla()] {
            let mut last = 0.0;
            for b in 1..600 {
                let t = decode_step_time(&model, &g, &c, 8, b as f64, 2304.0);
                assert!(t >= last, "b={b}");
                last = t;
            }
            let short = decode_step_time(&model, &g, &c, 8, 32.0, 1000.0);
            assert!(decode_step_time(&model, &g, &c, 8, 32.0, 8000.0) > short);
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

    #[test]
    fn a_mixed_step_costs_more_than_its_decode_part_and_less_than_both_apart() {
        let (m, g, c) = (llama70(), h100(), consts());
        let l = Layout::tp(4);
        let decode = StepBatch::decode(32.0, 2000.0);
        let chunk = StepBatch::prefill(1024.0);
        let mixed = StepBatch {
            prefill_tokens: chunk.prefill_tokens,
            prefill_attention_work: chunk.prefill_attention_work,
            ..decode
        };
        let (d, p, both) = (
            step_time(&m, &g, &c, &l, &decode),
            step_time(&m, &g, &c, &l, &chunk),
            step_time(&m, &g, &c, &l, &mixed),
        );
        // One weight read and one set of fixed costs serve both.
        assert!(both > d && both > p && both < d + p, "{d} {p} {both}");
    }

    #[test]
    fn experts_touched_grow_with_batch_and_expert_parallel_reads_the_busiest_rank() {
        let m = moe_mla();
        let tp8 = Layout::tp(8);
        let ep8 = Layout { ep: true, ..tp8 };
        let one = expert_bytes_read(&m, &tp8, 1.0);
        // One token touches k of E experts: each rank reads 1/8 of those k.
        let want = m.expert_weight_bytes * 8.0 / 256.0 / 8.0;
        assert!((one - want).abs() < 1e-6 * want);
        assert!(expert_bytes_read(&m, &tp8, 64.0) > 10.0 * one);
        // Every expert touched: both layouts read an eighth of the experts per rank.
        let all = expert_bytes_read(&m, &tp8, 1e6);
        assert!((expert_bytes_read(&m, &ep8, 1e6) - all).abs() < 1e-6 * all);
        // At small batches the busiest EP rank reads more than the mean.
        assert!(expert_bytes_read(&m, &ep8, 4.0) > expert_bytes_read(&m, &tp8, 4.0));
    }

    #[test]
    fn fp4_experts_stream_at_the_grouped_kernels_rate_dense_fp4_at_the_dense_one() {
        let (g, c) = (h100(), consts());
        let moe = ModelPerf {
            dense_format: WeightFormat::Fp4,
            expert_format: WeightFormat::Fp4,
            ..moe_mla()
        };
        let dense = ModelPerf {
            dense_format: WeightFormat::Fp4,
            ..llama70()
        };
        let slow_grouped = Constants {
            fp4_grouped_weight_efficiency: 0.5,
            ..c
        };
        let slow_dense = Constants {
            fp4_weight_efficiency: 0.5,
            ..c
        };
        let (l, b) = (Layout::tp(8), StepBatch::decode(32.0, 2000.0));
        let t = |m: &ModelPerf, c: &Constants| step_time(m, &g, c, &l, &b);
        // The dense model never meets the grouped kernels; the MoE meets both.
        assert_eq!(t(&dense, &slow_grouped), t(&dense, &c));
        assert!(t(&dense, &slow_dense) > t(&dense, &c));
        assert!(t(&moe, &slow_grouped) > t(&moe, &slow_dense));
        assert!(t(&moe, &slow_dense) > t(&moe, &c));
        // An fp8 MoE's experts keep the fp8 efficiency.
        assert_eq!(t(&moe_mla(), &slow_grouped), t(&moe_mla(), &c));
    }

    #[test]
    fn routed_experts_prompt_gemms_pad_each_experts_rows_to_whole_tiles() {
        let m = moe_mla();
        // 256 experts, top 8: a 1k-token prompt gives each expert 31 rows, about half a tile.
        let small = routed_prefill_padding(&m, 1000.0);
        let long = routed_prefill_padding(&m, 8000.0);
        let batch = routed_prefill_padding(&m, 32768.0);
        assert!(small > 1.8 && small < 2.2, "{small}");
        assert!(small > long && long > batch && batch > 1.0);
        assert!(batch < 1.05, "{batch}");
        // Dense models have no grouped GEMMs to pad.
        assert_eq!(routed_prefill_padding(&llama70(), 1000.0), 1.0);
        // Under DP attention the experts see every DP rank's prompt tokens at once: a fuller
        // tile, so less time per token than one rank's prompt alone.
        let (g, c) = (h100(), consts());
        let alone = prefill_gemm_time_routed(&m, &g, &c, 1.0, 1000.0, 1000.0);
        let gathered = prefill_gemm_time_routed(&m, &g, &c, 1.0, 1000.0, 8000.0);
        assert!(gathered < alone);
        assert_eq!(prefill_gemm_time(&m, &g, &c, 1.0, 1000.0), alone);
    }

    #[test]
    fn routed_experts_prompt_gemms_run_at_their_own_rate_and_dense_gemms_do_not() {
        let (m, g, c) = (moe_mla(), h100(), consts());
        // k of E experts' parameters per token: DeepSeek-V3's 58 layers × 8 × 44M.
        let routed = routed_active_params(&m);
        assert!((routed / 20.4e9 - 1.0).abs() < 0.01, "{routed}");
        assert_eq!(routed_active_params(&llama70()), 0.0);
        let slow = Constants {
            moe_prefill_efficiency: 0.25,
            ..c
        };
        // The experts' share of the prompt GEMMs takes 4x as long; the dense share does not.
        let (fast_t, slow_t) = (
            prefill_gemm_time(&m, &g, &c, 1.0, 1000.0),
            prefill_gemm_time(&m, &g, &slow, 1.0, 1000.0),
        );
        let routed_t = 2.0 * 1000.0 * routed * routed_prefill_padding(&m, 1000.0)
            / (g.peak_flops * c.mfu_prefill);
        assert!((slow_t - fast_t - 3.0 * routed_t).abs() <= 1e-9 * slow_t);
        let l = Layout::tp(8);
        let prompt = StepBatch::prefill(8192.0);
        assert!(step_time(&m, &g, &slow, &l, &prompt) > step_time(&m, &g, &c, &l, &prompt));
        // Decode steps and dense models do not see it.
        let decode = StepBatch::decode(64.0, 2048.0);
        assert_eq!(
            step_time(&m, &g, &slow, &l, &decode),
            step_time(&m, &g, &c, &l, &decode)
        );
        let dense = llama70();
        let l4 = Layout::tp(4);
        assert_eq!(
            step_time(&dense, &g, &slow, &l4, &prompt),
            step_time(&dense, &g, &c, &l4, &prompt)
        );
    }

    #[test]
    fn sliding_window_layers_read_and_store_only_the_window() {
        let (g, c) = (h100(), consts());
        let full = llama70();
        let half = ModelPerf {
            num_sliding_layers: 40.0,
            sliding_window: 128.0,
            ..full
        };
        let l = Layout::tp(8);
        let long = StepBatch::decode(64.0, 8000.0);
        assert!(step_time(&half, &g, &c, &l, &long) < step_time(&full, &g, &c, &l, &long));
        // Below the window nothing changes.
        let short = StepBatch::decode(64.0, 100.0);
        assert_eq!(
            step_time(&half, &g, &c, &l, &short),
            step_time(&full, &g, &c, &l, &short)
        );
        let kv_full = sequence_kv_bytes(&full, &l, 8000.0);
        let kv_half = sequence_kv_bytes(&half, &l, 8000.0);
        assert!((kv_half - kv_full * (0.5 + 0.5 * 128.0 / 8000.0)).abs() < 1.0);
    }

    #[test]
    fn layouts_change_memory_and_time_as_they_should() {
        let (m, g, c) = (moe_mla(), h100(), consts());
        let tp8 = Layout::tp(8);
        let dp8 = Layout {
            tp: 1,
            dp: 8,
            ep: true,
            pp: 1,
        };
        // Experts sharded over 8 ranks either way; attention replicated per DP rank.
        assert!(weight_bytes_per_gpu(&m, &dp8) > weight_bytes_per_gpu(&m, &tp8));
        let pp2 = Layout { pp: 2, ..tp8 };
        assert!(weight_bytes_per_gpu(&m, &pp2) < 0.52 * weight_bytes_per_gpu(&m, &tp8));
        // A pipeline's step is no faster than the unpipelined one (bubbles, sends).
        let b = StepBatch::decode(16.0, 2000.0);
        assert!(step_time(&m, &g, &c, &pp2, &b) >= step_time(&m, &g, &c, &tp8, &b));
        // An expert-parallel step pays the all-to-all; zero-latency links pay less.
        let free = Constants {
            alltoall_latency: 0.0,
            ..c
        };
        assert!(step_time(&m, &g, &free, &dp8, &b) < step_time(&m, &g, &c, &dp8, &b));
    }

    #[test]
    fn collectives_cross_the_scale_out_network_once_they_span_domains() {
        let (g, c) = (h100(), consts());
        let bytes = 256.0 * 8.0 * 7168.0 * 2.0; // 256 tokens to 8 experts each
        assert_eq!(g.link_for(8), Link::ScaleUp);
        assert_eq!(g.link_for(16), Link::ScaleOut);
        // Inside one node: the NVLink formula, unchanged.
        let ar8 = allreduce_time(&g, &c, 8, bytes);
        assert!((ar8 - (c.allreduce_latency + 1.75 * bytes / g.link_bandwidth)).abs() < 1e-12);
        // An EP group over 4 nodes sends 3/4 of its tokens through 50 GB/s NICs: far dearer
        // than one node's all-to-all, and dearer still the more nodes it spans.
        let (a8, a16, a32) = (
            alltoall_time(&g, &c, 8, bytes),
            alltoall_time(&g, &c, 16, bytes),
            alltoall_time(&g, &c, 32, bytes),
        );
        assert!(a16 > 3.0 * a8 && a32 > a16);
        let nic = 0.75 * bytes / g.scaleout_bandwidth;
        assert!((a32 - (c.alltoall_latency + g.scaleout_latency + nic)).abs() < 1e-12);
        // A 72-GPU NVLink domain (GB200 NVL72) keeps the same group on NVLink.
        let rack = GpuPerf {
            scaleup_gpus: 72.0,
            ..g
        };
        assert_eq!(rack.link_for(32), Link::ScaleUp);
        assert!(alltoall_time(&rack, &c, 32, bytes) < a32 / 3.0);
        assert!(allreduce_time(&g, &c, 16, bytes) > allreduce_time(&rack, &c, 16, bytes));
    }

    #[test]
    fn dp_attention_without_ep_streams_experts_over_tp_times_dp_and_gathers_tokens() {
        let (m, g, c) = (moe_mla(), h100(), consts());
        let (tp4, dp4) = (
            Layout::tp(4),
            Layout {
                tp: 1,
                dp: 4,
                ep: false,
                pp: 1,
            },
        );
        // Each of the 4 ranks streams a quarter of the experts its 4 × batch tokens touch,
        // as the memory model holds a quarter of each.
        let b = 16.0;
        let quarter = expert_bytes_read(&m, &Layout::tp(1), 4.0 * b) / 4.0;
        assert!((expert_bytes_read(&m, &dp4, 4.0 * b) - quarter).abs() < 1.0);
        assert_eq!(
            weight_bytes_per_gpu(&m, &dp4) - (m.weight_bytes - m.expert_weight_bytes),
            m.expert_weight_bytes / 4.0
        );
        // The gather/scatter across the DP ranks is charged: free links make it cheaper.
        let step = StepBatch::decode(b, 2000.0);
        let free = Constants {
            allreduce_latency: 0.0,
            ..c
        };
        let fast = GpuPerf {
            link_bandwidth: 1e18,
            ..g
        };
        assert!(step_time(&m, &fast, &free, &dp4, &step) < step_time(&m, &g, &c, &dp4, &step));
        // tp4's ranks read a quarter of the dense weights; dp4's read all of them.
        assert!(step_time(&m, &g, &c, &dp4, &step) > 0.0);
        assert!(step_time(&m, &g, &c, &tp4, &step) > 0.0);
    }

    #[test]
    fn pipeline_stages_across_nodes_pay_the_scale_out_hop() {
        let (m, g, c) = (llama70(), h100(), consts());
        let one_node = Layout {
            pp: 2,
            ..Layout::tp(4)
        };
        let two_nodes = Layout {
            pp: 2,
            ..Layout::tp(8)
        };
        let b = StepBatch::decode(8.0, 1000.0);
        let rack = GpuPerf {
            scaleup_gpus: 72.0,
            ..g
        };
        // The same 16-GPU pipeline costs more where its stage boundary leaves the domain.
        assert!(step_time(&m, &g, &c, &two_nodes, &b) > step_time(&m, &rack, &c, &two_nodes, &b));
        assert_eq!(
            step_time(&m, &g, &c, &one_node, &b),
            step_time(&m, &rack, &c, &one_node, &b)
        );
    }

    #[test]
    fn collective_links_follow_the_group_sizes_step_time_prices() {
        let (m, g) = (moe_mla(), h100());
        assert!(collective_links(&m, &g, &Layout::tp(1)).is_empty());
        assert_eq!(
            collective_links(&m, &g, &Layout::tp(8)),
            vec![("tp_allreduce", Link::ScaleUp)]
        );
        let dp = |dp, ep| Layout {
            tp: 1,
            dp,
            ep,
            pp: 1,
        };
        assert_eq!(
            collective_links(&m, &g, &dp(8, true)),
            vec![("ep_alltoall", Link::ScaleUp)]
        );
        assert_eq!(
            collective_links(&m, &g, &dp(32, true)),
            vec![("ep_alltoall", Link::ScaleOut)]
        );
        assert_eq!(
            collective_links(&m, &g, &dp(16, false)),
            vec![("dp_allgather", Link::ScaleOut)]
        );
        // A dense model's DP ranks exchange nothing; a 16-GPU pipeline hops across nodes.
        assert!(collective_links(&llama70(), &g, &dp(4, false)).is_empty());
        let pp2 = Layout {
            pp: 2,
            ..Layout::tp(8)
        };
        assert_eq!(
            collective_links(&llama70(), &g, &pp2),
            vec![("tp_allreduce", Link::ScaleUp), ("pp_send", Link::ScaleOut)]
        );
    }

    #[test]
    fn constants_fields_round_trip() {
        let mut c = consts();
        for (i, name) in Constants::FIELDS.iter().enumerate() {
            assert_eq!(Constants::field_index(name), Some(i));
            assert!(c.set(i, 0.5 + i as f64));
            assert_eq!(c.get(i), Some(0.5 + i as f64));
        }
        assert!(!c.set(Constants::FIELDS.len(), 1.0));
        assert_eq!(c.get(Constants::FIELDS.len()), None);
        // One list: building from names fills each field from its own name, and a missing
        // name stops it.
        let built = Constants::try_from_fn(|name| {
            Constants::field_index(name)
                .map(|i| 0.5 + i as f64)
                .ok_or(())
        })
        .unwrap();
        assert_eq!(built, c);
        assert_eq!(built.allreduce_latency, 0.5 + 12.0);
        let short = Constants::try_from_fn(|name| {
            if name == "mbu" {
                Err(name.len())
            } else {
                Ok(1.0)
            }
        });
        assert_eq!(short, Err(3));
    }

    /// DeepSeek-V4-Flash's sparse-attention inputs as `pdtp._model_dsv4.sparse_attention`
    /// gives them (fp8_ds_mla latents).
    fn dsv4_flash() -> ModelPerf {
        ModelPerf {
            num_attention_heads: 64.0,
            head_dim: 512.0,
            sparse: SparseAttention {
                layers: 43.0,
                window: 128.0,
                c4_layers: 21.0,
                c128_layers: 20.0,
                topk: 512.0,
                latent_bytes: 584.0,
                index_key_bytes: 132.0,
                index_flops_per_key: 2.0 * 64.0 * 128.0,
                state_bytes_per_token: 817_344.0,
                ..SparseAttention::default()
            },
            ..moe_mla()
        }
    }

    #[test]
    fn compressed_attention_reads_the_window_the_selection_and_the_index() {
        let m = dsv4_flash();
        // 8,192 tokens: 128 window latents on 43 layers, 512 of 2,048 C4 latents selected and
        // all 2,048 index keys scanned on 21, all 64 C128 latents on 20; one window latent
        // written per layer, a C4 latent + key per 4 tokens, a C128 latent per 128.
        let entries = 43.0 * 128.0 + 21.0 * 512.0 + 20.0 * 64.0;
        let writes = 43.0 * 584.0 + 21.0 * (584.0 + 132.0) / 4.0 + 20.0 * 584.0 / 128.0;
        let bytes = entries * 584.0 + 21.0 * 2048.0 * 132.0 + writes + 817_344.0;
        let flops = 64.0 * 4.0 * 512.0 * entries + 21.0 * 2048.0 * 16_384.0;
        let (b, f) = compressed_attention_decode(&m, 8, 8192.0);
        assert!((b - bytes).abs() < 1e-6 * bytes, "{b} vs {bytes}");
        assert!((f - flops).abs() < 1e-6 * flops, "{f} vs {flops}");
        // FlashMLA runs 64 query heads whether a rank holds 64 (tp 1) or 8 (tp 8).
        assert_eq!(compressed_attention_decode(&m, 1, 8192.0), (b, f));
        // Past 4 · topk tokens only the index scan and C128 latents grow: 1 M tokens read
        // far less than a dense latent would (61 · 576 B a token for DeepSeek-V3).
        let (long, _) = compressed_attention_decode(&m, 8, 1_048_576.0);
        assert!(long > b && long < 1_048_576.0 * 43.0 * 584.0 / 10.0);
        // Short contexts read what there is.
        let (short, _) = compressed_attention_decode(&m, 8, 16.0);
        let expect = (43.0 * 16.0 + 21.0 * 4.0 + 20.0 * 16.0 / 128.0) * 584.0
            + 21.0 * 4.0 * 132.0
            + writes
            + 817_344.0;
        assert!((short - expect).abs() < 1e-6 * expect);
    }

    #[test]
    fn the_decode_step_prices_compressed_attention_by_its_own_cost() {
        let (g, c) = (h100(), consts());
        let m = dsv4_flash();
        let dense = ModelPerf {
            sparse: SparseAttention::default(),
            ..m
        };
        let l = Layout::tp(8);
        let step =
            |m: &ModelPerf, ctx: f64| step_time(m, &g, &c, &l, &StepBatch::decode(64.0, ctx));
        // The step grows with the context by the sparse kernels' cost, and only by it.
        let grow = step(&m, 65_536.0) - step(&m, 8192.0);
        assert!(grow > 0.0);
        let per_seq = |ctx: f64| {
            let (b, f) = compressed_attention_decode(&m, 8, ctx);
            overlap(
                64.0 * b / (g.hbm_bandwidth * c.kv_read_efficiency),
                64.0 * f / (g.bf16_flops * c.mfu_decode_attention),
            )
        };
        assert!((grow - (per_seq(65_536.0) - per_seq(8192.0))).abs() < 1e-9);
        // Without it, the shape's MLA formula prices the same model otherwise.
        assert_ne!(step(&dense, 65_536.0), step(&m, 65_536.0));
    }

    /// A DeepSeek-V3.2-shaped model: MLA with a DSA indexer on every layer (top-k 2,048,
    /// 64 fp8 index heads of 128 + 4 scale bytes).
    fn dsa() -> ModelPerf {
        ModelPerf {
            sparse: SparseAttention {
                topk: 2048.0,
                index_key_bytes: 132.0,
                index_flops_per_key: 2.0 * 64.0 * 128.0,
                dsa_layers: 61.0,
                dsa_indexer_layers: 61.0,
                ..SparseAttention::default()
            },
            ..moe_mla()
        }
    }

    #[test]
    fn dsa_layers_attend_the_top_k_and_scan_every_index_key() {
        let m = dsa();
        let latent = (512.0 + 64.0) * 2.0;
        // Below the top-k every latent is attended; past it the latents stop growing and only
        // the indexer's scan of the keys does.
        let b1 = dsa_attention(&m, 8, &StepBatch::decode(4.0, 1024.0)).decode_bytes;
        assert!((b1 - 61.0 * 4.0 * 1024.0 * (latent + 132.0)).abs() < 1e-6 * b1);
        let b2 = dsa_attention(&m, 8, &StepBatch::decode(4.0, 32_768.0)).decode_bytes;
        let expect = 61.0 * 4.0 * (2048.0 * latent + 32_768.0 * 132.0);
        assert!((b2 - expect).abs() < 1e-6 * expect);
        // The kernels pad the query heads to 64: 16 local heads (TP 8) cost what 64 do.
        let long = StepBatch::prefill(16_384.0);
        assert_eq!(dsa_attention(&m, 8, &long), dsa_attention(&m, 2, &long));
        let one = dsa_attention(&m, 1, &long).sparse_flops;
        assert!(one > dsa_attention(&m, 2, &long).sparse_flops); // 128 heads: two tiles of 64
                                                                 // A prompt within the top-k runs as dense MHA, no scoring; a long one sparse.
        let short = dsa_attention(&m, 8, &StepBatch::prefill(2048.0));
        assert_eq!(short.sparse_flops, 0.0);
        assert_eq!(short.dense_prompt_work, 61.0 * 2048.0 * 2048.0 / 2.0);
        assert_eq!(dsa_attention(&m, 8, &long).dense_prompt_work, 0.0);
        // A model without DSA layers has none of it.
        assert_eq!(dsa_attention(&moe_mla(), 8, &long), DsaCost::default());
    }

    #[test]
    fn dsa_models_store_the_index_keys_and_price_no_dense_attention() {
        let (g, c) = (h100(), consts());
        let m = dsa();
        let dense = moe_mla();
        let l = Layout::tp(8);
        assert_eq!(
            kv_bytes_per_token_per_rank(&m, 8) - kv_bytes_per_token_per_rank(&dense, 8),
            61.0 * 132.0
        );
        assert_eq!(
            sequence_kv_bytes(&m, &l, 1000.0) - sequence_kv_bytes(&dense, &l, 1000.0),
            61.0 * 132.0 * 1000.0
        );
        // At 64k tokens of context the dense MLA reads 32x the latents DSA attends.
        let step = |m: &ModelPerf| step_time(m, &g, &c, &l, &StepBatch::decode(64.0, 65_536.0));
        assert!(step(&m) < step(&dense));
        // Short contexts read the same latents either way (plus the index keys).
        let short = |m: &ModelPerf| step_time(m, &g, &c, &l, &StepBatch::decode(64.0, 512.0));
        assert!(short(&m) >= short(&dense) * 0.999);
    }
}
