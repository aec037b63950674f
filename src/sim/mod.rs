//! A discrete-event simulation of a vLLM deployment: what the engines' schedulers do with a
//! stream of requests, step by step, with each step's duration from the one step-cost
//! function [`crate::perf::step_time`].
//!
//! Modelled (vLLM V1's scheduler, `vllm/v1/core/sched/scheduler.py`):
//! - per instance, continuous batching up to `max_num_seqs` running requests;
//! - chunked prefill: a token budget per step (`max_num_batched_tokens`); running requests
//!   are scheduled first (decodes, then unfinished prompt chunks), waiting requests are
//!   admitted FCFS with what is left, and only when this step preempted nobody;
//! - the paged KV cache in blocks of [`BLOCK_SIZE`] tokens: a request holds
//!   ⌈tokens / 16⌉ blocks, admission waits for free blocks, and a running request that needs
//!   a block when none is free preempts the most recently admitted running request, which
//!   frees its blocks and is recomputed later from its prompt and the tokens it has produced
//!   (vLLM's recompute preemption);
//! - disaggregated serving: a router sends each request to a prefill instance; the prefill
//!   instance computes the prompt and holds its KV blocks until a decode instance has read
//!   them; the decode instance admits the request when it has blocks (vLLM's
//!   `WAITING_FOR_REMOTE_KVS`), reads the KV (time from [`crate::perf::kv_transfer_time`]),
//!   recomputes the last prompt token to sample the first output token, and decodes;
//! - aggregated serving: one kind of instance does both phases in mixed steps;
//! - any layout ([`Layout`]): each data-parallel attention rank of an instance is its own
//!   scheduler with its own KV cache behind the instance's one API server, which sends each
//!   request to the rank with the fewest unfinished requests; each step's time is the
//!   performance model's for that rank's batch (whose expert layers see every rank's tokens,
//!   the model's balanced-rank assumption). A pipeline of `pp` stages keeps `pp`
//!   micro-batches in flight: `pp` lanes per rank, each scheduled as its own batch, sharing
//!   the rank's KV cache, a lane's step lasting the micro-batch's time through every stage.
//!
//! Not modelled: prefix caching, speculative decoding, CPU swap, network contention between
//! concurrent KV transfers, HTTP/tokenizer time, and the request-level overheads a client
//! sees outside the engine; DP ranks step independently (vLLM runs idle MoE ranks in
//! lockstep on dummy batches, which the step time's balanced-rank term stands for), and a
//! pipeline's lanes never wait for a stage another lane holds.
//!
//! Speed: the per-step work is O(1) plus O(log n) per request that starts or finishes —
//! decoding sequences are kept as running sums (count, KV tokens, blocks needed per step
//! phase), never visited one by one — so the cost is per step and per request, not per token.

mod engine;
mod requests;
pub mod rng;
mod search;
mod stats;
pub mod trace;

pub use requests::{build_requests, Arrival, Lengths, Load, Requests, DEFAULT_REQUESTS};
pub use search::{max_rate_within_slo, RateSearch, SearchOptions, GROWTH, STEADY_STATE};
pub use stats::{quantile, Percentiles, SideStats, SimResult};

use crate::layout::Layout;
use crate::perf::{self, Constants, GpuPerf, ModelPerf, StepBatch};

/// vLLM's KV-cache block size (tokens per block), its default on CUDA and ROCm.
pub const BLOCK_SIZE: u32 = 16;
/// The most requests one simulation takes.
pub const MAX_REQUESTS: usize = 1_000_000;
/// The most output tokens one simulation produces (bounds its running time).
pub const MAX_OUTPUT_TOKENS: u64 = 500_000_000;
/// Largest prompt or output length of one request.
pub const MAX_TOKENS: u32 = 1 << 24;
/// Largest instance count of one side.
pub const MAX_INSTANCES: u32 = 1 << 16;
/// Largest `max_num_seqs` / `max_num_batched_tokens`.
pub const MAX_BATCH_SEQS: u32 = 1 << 20;
pub const MAX_BATCHED_TOKENS: u32 = 1 << 24;

/// An error in the simulation's inputs (the message names the field and what is allowed),
/// or, with `internal`, a bug in the simulator.
#[derive(Debug, Clone, PartialEq)]
pub struct SimError {
    pub message: String,
    pub internal: bool,
}

impl SimError {
    pub fn new(message: impl Into<String>) -> SimError {
        SimError {
            message: message.into(),
            internal: false,
        }
    }

    pub fn internal(message: impl Into<String>) -> SimError {
        SimError {
            message: message.into(),
            internal: true,
        }
    }
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One kind of instance: the model, GPU and constants the step cost needs, the layout and
/// count, and vLLM's scheduler limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pool {
    pub model: ModelPerf,
    pub gpu: GpuPerf,
    pub constants: Constants,
    pub layout: Layout,
    pub instances: u32,
    pub gpu_memory_utilization: f64,
    /// vLLM's `max_num_seqs`: running requests per instance.
    pub max_num_seqs: u32,
    /// vLLM's `max_num_batched_tokens`: tokens one step computes.
    pub max_num_batched_tokens: u32,
}

impl Pool {
    /// KV-cache blocks one DP rank holds (memory left on each of its GPUs after its weights
    /// and the reserve, over the KV bytes per token of its largest pipeline stage); for a
    /// TP-only layout, the instance's.
    pub fn kv_blocks(&self) -> u64 {
        let (m, g, c, util) = (
            &self.model,
            &self.gpu,
            &self.constants,
            self.gpu_memory_utilization,
        );
        let tokens = if self.layout.is_tp_only() && m.kv_token_bytes <= 0.0 {
            perf::kv_capacity_tokens(m, g, c, self.layout.tp, util)
        } else {
            let budget = perf::kv_budget_bytes_layout(m, g, c, &self.layout, util);
            // Windowed caches are held per running sequence: reserve them for the sequences
            // that can run at once (each with at least one block), not for `max_num_seqs`
            // ones the pool could never hold (vLLM's scheduler then simply runs fewer).
            let one_block = perf::sequence_kv_bytes(m, &self.layout, f64::from(BLOCK_SIZE));
            let running = if one_block > 0.0 {
                (budget / one_block)
                    .floor()
                    .clamp(1.0, f64::from(self.max_num_seqs))
            } else {
                f64::from(self.max_num_seqs)
            };
            perf::kv_pool_tokens(m, &self.layout, budget, running)
        };
        if tokens.is_finite() && tokens > 0.0 {
            (tokens / f64::from(BLOCK_SIZE)).floor().min(1e15) as u64
        } else {
            0
        }
    }

    /// Schedulers per instance: each data-parallel attention rank is its own engine core
    /// with its own KV cache and batch.
    pub fn ranks(&self) -> u32 {
        self.layout.dp.clamp(1, i64::from(MAX_INSTANCES)) as u32
    }

    /// Micro-batches a rank keeps in flight through its pipeline: each is scheduled as its
    /// own batch (up to `max_num_seqs` and `max_num_batched_tokens`, as the performance
    /// model's decode point counts `pp × max_num_seqs`), all drawing on the rank's one KV
    /// cache; a step of one lane takes the micro-batch's time through every stage.
    pub fn lanes(&self) -> u32 {
        self.layout.pp.clamp(1, i64::from(MAX_INSTANCES)) as u32
    }

    /// `tp=8` for a TP-only instance, else its layout (`layout tp2·dp4·ep`).
    pub fn shape(&self) -> String {
        if self.layout.is_tp_only() {
            format!("tp={}", self.layout.tp)
        } else {
            format!("layout {}", self.layout)
        }
    }

    /// `instance (tp=8)`, `instance (layout tp1·dp8·ep)`.
    pub fn describe(&self) -> String {
        format!("instance ({})", self.shape())
    }

    /// Seconds one step of this pool's instances takes for `batch`.
    pub fn step_time(&self, batch: &StepBatch) -> f64 {
        perf::step_time(&self.model, &self.gpu, &self.constants, &self.layout, batch)
    }

    fn validate(&self, side: &str) -> Result<(), SimError> {
        let l = &self.layout;
        for (name, v) in [("tp", l.tp), ("pp", l.pp), ("dp", l.dp)] {
            if !(1..=1 << 16).contains(&v) {
                return Err(SimError::new(format!(
                    "{side}_{name} must be in 1..=65536, got {v}"
                )));
            }
        }
        if self.instances < 1 || self.instances > MAX_INSTANCES {
            return Err(SimError::new(format!(
                "{side}_instances must be in 1..={MAX_INSTANCES}, got {}",
                self.instances
            )));
        }
        let schedulers = u64::from(self.instances) * (l.dp * l.pp) as u64;
        if schedulers > u64::from(MAX_INSTANCES) {
            return Err(SimError::new(format!(
                "{side}: instances × dp × pp must be at most {MAX_INSTANCES} (one scheduler \
                 each), got {} × {} × {} = {schedulers}",
                self.instances, l.dp, l.pp
            )));
        }
        if !(self.gpu_memory_utilization > 0.0 && self.gpu_memory_utilization <= 1.0) {
            return Err(SimError::new(format!(
                "gpu_memory_utilization must be in (0, 1], got {}",
                self.gpu_memory_utilization
            )));
        }
        if self.max_num_seqs < 1 || self.max_num_seqs > MAX_BATCH_SEQS {
            return Err(SimError::new(format!(
                "max_num_seqs must be in 1..={MAX_BATCH_SEQS}, got {}",
                self.max_num_seqs
            )));
        }
        if self.max_num_batched_tokens > MAX_BATCHED_TOKENS {
            return Err(SimError::new(format!(
                "max_num_batched_tokens must be at most {MAX_BATCHED_TOKENS}, got {}",
                self.max_num_batched_tokens
            )));
        }
        if self.max_num_batched_tokens < self.max_num_seqs {
            // vLLM's SchedulerConfig refuses this with chunked prefill on (always in V1).
            return Err(SimError::new(format!(
                "max_num_batched_tokens ({}) must be greater than or equal to max_num_seqs ({})",
                self.max_num_batched_tokens, self.max_num_seqs
            )));
        }
        if self.kv_blocks() == 0 {
            return Err(SimError::new(format!(
                "{side}: {} leaves no memory for the KV cache (the weights and runtime \
                 reserve fill gpu_memory_utilization={} of the GPU)",
                self.shape(),
                self.gpu_memory_utilization
            )));
        }
        let t = self.step_time(&StepBatch::decode(1.0, 1.0));
        if !(t.is_finite() && t > 0.0) {
            return Err(SimError::new(format!(
                "{side}: the performance model gives a step time of {t} s; check the \
                 constants (every efficiency must be positive)"
            )));
        }
        Ok(())
    }
}

/// What is deployed.
#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(clippy::large_enum_variant)] // a handful of configs per run, copied rarely
pub enum Deployment {
    /// One kind of instance serving both phases (plain `vllm serve`).
    Aggregated(Pool),
    /// Prefill instances hand each prompt's KV cache to decode instances.
    Disaggregated { prefill: Pool, decode: Pool },
}

/// How requests are spread over instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Router {
    /// Each new request to the next instance in turn (vLLM's example P/D proxy).
    RoundRobin,
    /// To the instance with the fewest unfinished requests (ties: the lowest index).
    LeastLoaded,
}

/// Latency bounds (seconds); `None` = unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Slo {
    pub ttft: Option<f64>,
    pub tpot: Option<f64>,
}

impl Slo {
    pub fn met(&self, ttft: f64, tpot: Option<f64>) -> bool {
        self.ttft.is_none_or(|b| ttft <= b)
            && match (self.tpot, tpot) {
                (Some(b), Some(t)) => t <= b,
                _ => true,
            }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub deployment: Deployment,
    pub router: Router,
    pub slo: Slo,
}

impl Config {
    pub fn validate(&self) -> Result<(), SimError> {
        for s in [&self.slo.ttft, &self.slo.tpot].into_iter().flatten() {
            if !(s.is_finite() && *s > 0.0) {
                return Err(SimError::new(format!(
                    "SLO bounds must be positive and finite, got {s}"
                )));
            }
        }
        match &self.deployment {
            Deployment::Aggregated(p) => p.validate("aggregated"),
            Deployment::Disaggregated { prefill, decode } => {
                prefill.validate("prefill")?;
                decode.validate("decode")
            }
        }
    }

    /// GPUs the deployment occupies.
    pub fn gpus(&self) -> i64 {
        let side = |p: &Pool| p.layout.gpus().saturating_mul(i64::from(p.instances));
        match &self.deployment {
            Deployment::Aggregated(p) => side(p),
            Deployment::Disaggregated { prefill, decode } => side(prefill) + side(decode),
        }
    }
}

/// Run one simulation: `requests` (lengths, and arrival times for an open loop) under `load`.
pub fn simulate(config: &Config, load: &Load, requests: &Requests) -> Result<SimResult, SimError> {
    config.validate()?;
    requests.validate(load)?;
    engine::run(config, load, requests)
}

#[cfg(test)]
mod tests;
