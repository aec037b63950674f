//! Aggregated serving: one instance doing both prefill and decode for `concurrency` clients
//! that each send their next request as soon as the last one finishes (a closed loop, as
//! `vllm bench serve --max-concurrency C` and InferenceMAX run it).
//!
//! A mean-value model of the engine, solved as a fixed point of the running batch `B`:
//!
//! - **TPOT** is the mean step time while a request decodes. In steady state one request
//!   finishes, so one prompt arrives, every `osl / B` steps; its prefill rides in those
//!   steps. vLLM mixes the prompt's chunks (at most `max_num_batched_tokens − B` tokens
//!   each) into decode steps, so a prompt adds `n_chunks · (t_mixed − t_decode)`; SGLang
//!   runs prompts as separate prefill batches that pause decoding, so a prompt adds its
//!   whole prefill time. TPOT = t_decode + (B / osl) · (prefill added per prompt).
//! - **TTFT** = request overhead + the steps a new prompt waits to be scheduled + its
//!   prefill + waiting behind other prompts (an M/D/1 queue at the prefill share of the
//!   engine's time). When the clients outnumber what the KV cache holds, the running batch
//!   is capped and the rest wait in line: Little's law gives that wait.
//! - The benchmark starts all clients at once: the first `C` prompts arrive together and
//!   are prefilled in `max_num_batched_tokens` steps before decoding starts, after the
//!   engine's one-off warm-up stall (`first_wave_stall`: kernels compiled just in time for
//!   their first shapes, SGLang's; vLLM warms up before it serves), which raises the mean
//!   TTFT over `num_prompts` requests and not the median (`ttft_steady`).
//! - **Throughput** is Little's law over a request's life, `C · osl / (TTFT + (osl − 1) ·
//!   TPOT)`, less the run's tail, when the last requests drain with fewer in flight.
//!
//! With data-parallel attention every DP rank is one such engine with `C / dp` clients;
//! under pipeline parallel each of the `pp` micro-batches is.

use super::{admission_delay, max_sequences, step_time, Constants, GpuPerf, ModelPerf, StepBatch};
use crate::layout::Layout;

/// The serving engine: how it schedules prompts among decode steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// vLLM: chunked prefill mixed into decode steps.
    #[default]
    Vllm,
    /// SGLang: prompts as separate prefill batches (its default without mixed chunks).
    Sglang,
}

/// What the clients send and how the engine is configured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServingWorkload {
    /// Mean prompt and output lengths (tokens).
    pub isl: f64,
    pub osl: f64,
    /// Clients in the closed loop; `None`: offline, as many requests as the engine holds.
    pub concurrency: Option<f64>,
    /// Requests the benchmark sends in all (the first `concurrency` at once); infinite for
    /// steady state.
    pub num_prompts: f64,
    /// The engine's cap on running sequences per DP rank (vLLM `max_num_seqs`, SGLang
    /// `max_running_requests`).
    pub max_num_seqs: f64,
    /// Tokens one step computes at most (vLLM `max_num_batched_tokens`, SGLang
    /// `chunked_prefill_size`).
    pub max_num_batched_tokens: f64,
    pub gpu_memory_utilization: f64,
    pub engine: Engine,
    /// Decode steps between the scheduler's polls for new requests (SGLang's
    /// `--scheduler-recv-interval`; 1, every step, is vLLM's and SGLang's default). A prompt
    /// arriving mid-cycle waits for the next poll: `(interval − 1) / 2` decode steps more on
    /// average (and at the median: the arrival phase is uniform) than one polled every step.
    pub scheduler_recv_interval: f64,
}

/// The predicted steady state of one aggregated instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServingPoint {
    /// Mean TTFT over the benchmark's requests (s), the first wave's burst included.
    pub ttft: f64,
    /// TTFT of a request in steady state (s): the typical (median) request.
    pub ttft_steady: f64,
    /// Mean time per output token after the first (s).
    pub tpot: f64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    /// Sequences decoding at once per DP rank (all micro-batches), in steady state.
    pub batch: f64,
    /// The most sequences of this workload the KV cache and `max_num_seqs` allow per DP
    /// rank.
    pub max_batch: f64,
    /// True when the KV cache (or `max_num_seqs`), not the clients, limits the batch.
    pub batch_limited: bool,
}

/// The tail of a closed-loop run: when the last requests drain, fewer are in flight. On the
/// 619 measured InferenceMAX runs (10 requests per client) the measured throughput is
/// 0.977 (median, σ 0.008) of Little's law over the mean request: about 0.23 of one
/// request per client is lost.
const DRAIN_REQUESTS: f64 = 0.23;

/// Fixed-point iterations on the running batch (each halves the gap; 40 is exact to f64).
const ITERATIONS: usize = 40;

/// The largest share of its time the engine can spend prefilling before the M/D/1 queue
/// term is capped (the closed loop itself bounds the queue).
const MAX_PREFILL_LOAD: f64 = 0.95;

/// The mean (and median) wait of a new prompt for the scheduler's next poll beyond the step
/// it arrives in, at decode step `t_d`: polls every `scheduler_recv_interval` decode steps
/// and after every prefill batch (SGLang's `SchedulerRecvSkipper` counts a decode step 1 and
/// any other batch past its threshold), so an arrival at a uniform phase of the cycle waits
/// `(interval − 1) / 2` steps more than with a poll every step. The first wave, arriving at
/// an idle engine (whose idle loop polls at once), does not wait.
pub fn recv_poll_wait(w: &ServingWorkload, t_d: f64) -> f64 {
    (w.scheduler_recv_interval.max(1.0) - 1.0) / 2.0 * t_d
}

/// Predict aggregated serving of `w` on one instance of `layout`; `None` when not even one
/// sequence of the workload fits in memory.
pub fn serving(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    layout: &Layout,
    w: &ServingWorkload,
) -> Option<ServingPoint> {
    let pp = layout.pp.max(1) as f64;
    let lanes = layout.dp.max(1) as f64 * pp;
    let (isl, osl) = (w.isl.max(1.0), w.osl.max(1.0));
    let context = isl + osl / 2.0;
    let by_memory = max_sequences(m, g, c, layout, w.gpu_memory_utilization, context);
    let rank_cap = by_memory.min(w.max_num_seqs * pp);
    if rank_cap < 1.0 {
        return None;
    }
    // One lane: one DP rank's micro-batch.
    let cap = rank_cap / pp;
    let clients = w.concurrency.map(|c| c / lanes);
    let budget = w.max_num_batched_tokens.max(1.0);
    let step = |b: &StepBatch| step_time(m, g, c, layout, b);

    // The decode step at batch b and what one prompt adds to the engine's time.
    let costs = |b: f64| {
        let decode = StepBatch::decode(b, context);
        let t_d = step(&decode);
        let (extra, service) = match w.engine {
            Engine::Vllm => {
                let room = (budget - b).max(1.0);
                let chunks = (isl / room).ceil();
                let chunk = isl / chunks;
                let mixed = StepBatch {
                    prefill_tokens: chunk,
                    prefill_attention_work: chunk * isl / 2.0,
                    ..decode
                };
                let t_m = step(&mixed);
                (chunks * (t_m - t_d), chunks * t_m)
            }
            Engine::Sglang => {
                let t_p = step(&StepBatch::prefill(isl));
                (t_p, t_p)
            }
        };
        (t_d, extra, service)
    };
    let tpot_at = |b: f64| {
        let (t_d, extra, service) = costs(b);
        (t_d + extra * b / osl, t_d, extra, service)
    };
    let steady_ttft = |b: f64, tpot: f64, t_d: f64, extra: f64, service: f64| {
        let rate = b / (osl * tpot);
        let load = (rate * extra).min(MAX_PREFILL_LOAD);
        admission_delay(c, t_d)
            + recv_poll_wait(w, t_d)
            + service
            + load * extra / (2.0 * (1.0 - load))
    };

    let Some(n) = clients else {
        // Offline: the engine always holds as many sequences as it can.
        let (tpot, t_d, extra, service) = tpot_at(cap);
        let rate = cap / (osl * tpot);
        let ttft = steady_ttft(cap, tpot, t_d, extra, service);
        return Some(ServingPoint {
            ttft,
            ttft_steady: ttft,
            tpot,
            requests_per_s: lanes * rate,
            output_tokens_per_s: lanes * rate * osl,
            batch: cap * pp,
            max_batch: rank_cap,
            batch_limited: true,
        });
    };

    let n = n.max(1e-9);
    let mut b = n.min(cap);
    for _ in 0..ITERATIONS {
        let (tpot, t_d, extra, service) = tpot_at(b);
        let ttft = steady_ttft(b, tpot, t_d, extra, service);
        let next = (n * osl * tpot / (ttft + osl * tpot)).min(cap);
        b = 0.5 * (b + next);
    }
    let (tpot, t_d, extra, service) = tpot_at(b);
    let rate = b / (osl * tpot);
    let limited = n > cap + 0.5;
    let mut ttft_steady = steady_ttft(b, tpot, t_d, extra, service);
    if limited {
        // Clients beyond the cap queue for a free slot: Little's law over the loop.
        ttft_steady = ttft_steady.max(n / rate - osl * tpot);
    }

    // The first wave: all clients' prompts at once, prefilled in full-budget steps.
    let total = n * isl;
    let steps = (total / budget).ceil().max(1.0);
    let per_step = total.min(budget);
    let first = step(&StepBatch {
        prefill_tokens: per_step,
        prefill_attention_work: per_step * isl / 2.0,
        ..StepBatch::default()
    });
    // The engine's one-off warm-up (kernels compiled for their first shapes) holds the
    // whole wave.
    let mut burst = c.api_overhead + c.first_wave_stall + steps * first * (1.0 + 1.0 / steps) / 2.0;
    if limited {
        // Those beyond the cap wait for the first requests to finish.
        burst = (cap * burst + (n - cap) * (burst + osl * tpot)) / n;
    }
    let prompts = (w.num_prompts / lanes).max(n);
    let ttft = if prompts.is_finite() {
        (n * burst + (prompts - n) * ttft_steady) / prompts
    } else {
        ttft_steady
    };
    let waves = prompts / n;
    let drain = if waves.is_finite() {
        waves / (waves + DRAIN_REQUESTS)
    } else {
        1.0
    };
    let requests_per_s = lanes * n / (ttft + (osl - 1.0) * tpot) * drain;
    Some(ServingPoint {
        ttft,
        ttft_steady,
        tpot,
        requests_per_s,
        output_tokens_per_s: requests_per_s * osl,
        batch: b * pp,
        max_batch: rank_cap,
        batch_limited: limited,
    })
}

// ---- disaggregated serving ------------------------------------------------------------------

/// The predicted steady state of a disaggregated (P/D) deployment in a closed loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DisaggregatedPoint {
    /// Mean TTFT over the benchmark's requests (s), the first wave included.
    pub ttft: f64,
    /// TTFT of a request in steady state (s): the typical (median) request.
    pub ttft_steady: f64,
    /// Decode step time at the running batch (s).
    pub tpot: f64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    /// Prompts/s the prefill workers clear at full batches (one step's token budget).
    pub prefill_capacity_rps: f64,
    /// Requests/s the decode workers finish at their largest batch.
    pub decode_capacity_rps: f64,
    /// Sequences decoding at once per decode DP rank (all micro-batches).
    pub batch: f64,
    /// The most sequences the KV cache and `max_num_seqs` allow per decode DP rank.
    pub max_batch: f64,
    /// One prompt's prefill alone, and its KV cache's move to the decode side (s).
    pub prefill_time: f64,
    pub kv_transfer: f64,
}

/// Disaggregated serving of `w`'s closed loop on `prefill_workers` instances of `prefill`
/// and `decode_workers` instances of `decode`: what happens to a request, on the one step
/// function.
///
/// - **Prefill**: each DP rank (and pipeline lane) batches the prompts waiting, up to one
///   step's token budget ([`pd_prefill_budget`]: `max_num_batched_tokens`, which SGLang
///   divides over its DP ranks), so the side clears `P` prompts/s at full batches; a prompt
///   longer than the budget runs as chunk steps ([`pd_prefill_prompt_time`]). A prompt
///   arriving at load ρ waits for the batch in progress (ρ/2 of a step) and rides in the
///   next, which holds the prompts that arrived meanwhile; an M/D/1 term covers the rest of
///   the queue.
/// - **TTFT** of a steady request = request overhead + that prefill latency + the KV
///   transfer ([`super::kv_transfer_time`], each prefill rank sending its share) + the first
///   decode step. When one side limits the rate, the clients queue in front of it: Little's
///   law over the loop, `C = X · (TTFT + osl · TPOT)`.
/// - **The first wave**: the benchmark starts all `C` clients at once, so the first `C`
///   prompts wait for the prefill side to clear them, `C / 2P` on average beyond a steady
///   request, and for the engine's one-off warm-up (`first_wave_stall`); the mean over
///   `num_prompts` requests carries both, the median does not.
/// - **Decode**: each DP rank runs its share of the requests in flight, at most what its KV
///   cache holds; TPOT is its step time there. Under SGLang a request holds its decode KV
///   from before its prefill ([`pd_preallocated`]), so those in prefill and transfer take
///   their share of it.
///
/// `None` when the prefill side cannot hold one prompt or the decode side one sequence, or
/// without a concurrency (the loop needs its clients).
#[allow(clippy::too_many_arguments)]
pub fn disaggregated(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    prefill: &Layout,
    prefill_workers: f64,
    decode: &Layout,
    decode_workers: f64,
    w: &ServingWorkload,
) -> Option<DisaggregatedPoint> {
    let n = w.concurrency?.max(1e-9);
    let (isl, osl) = (w.isl.max(1.0), w.osl.max(1.0));
    let util = w.gpu_memory_utilization;
    if max_sequences(m, g, c, prefill, util, isl) < 1.0 {
        return None;
    }
    let d_pp = decode.pp.max(1) as f64;
    let context = isl + osl / 2.0;
    let max_batch = max_sequences(m, g, c, decode, util, isl + osl).min(w.max_num_seqs * d_pp);
    if max_batch < 1.0 || prefill_workers <= 0.0 || decode_workers <= 0.0 {
        return None;
    }
    let d_ranks = decode_workers * decode.dp.max(1) as f64;
    let p_lanes = prefill_workers * (prefill.dp.max(1) * prefill.pp.max(1)) as f64;
    let t_dec = |b: f64| {
        let b = b.max(1.0);
        step_time(m, g, c, decode, &StepBatch::decode(b / d_pp, context))
    };
    let t_pre = |k: f64| {
        step_time(
            m,
            g,
            c,
            prefill,
            &StepBatch {
                prefill_tokens: k * isl,
                prefill_attention_work: k * isl * isl / 2.0,
                ..StepBatch::default()
            },
        )
    };
    // A step holds `budget` prompt tokens per lane: `k_max` whole prompts (SGLang fills the
    // rest of the budget with a chunk of the next prompt, so full steps carry budget / isl
    // prompts), or one chunk of a longer prompt, which then takes several steps.
    let budget = pd_prefill_budget(w, prefill);
    let k_max = budget / isl;
    let t_prompt = pd_prefill_prompt_time(m, g, c, prefill, isl, budget);
    let capacity = if k_max >= 1.0 {
        p_lanes * k_max / t_pre(k_max)
    } else {
        p_lanes / t_prompt
    };
    let transfer = super::kv_transfer_time(m, c, prefill.tp, isl);
    let prefill_latency = |rate: f64| {
        let per_lane = rate / p_lanes;
        if k_max < 1.0 {
            // One prompt at a time through its chunk steps.
            let rho = (per_lane * t_prompt).min(MAX_PREFILL_LOAD);
            return t_prompt + rho * t_prompt / 2.0 + rho * rho / (2.0 * (1.0 - rho)) * t_prompt;
        }
        let mut k = 1.0;
        for _ in 0..20 {
            k = (per_lane * t_pre(k)).clamp(1.0, k_max);
        }
        let t = t_pre(k);
        let rho = (per_lane * t / k).min(MAX_PREFILL_LOAD);
        t + rho * t / 2.0 + rho * rho / (2.0 * (1.0 - rho)) * t / k
    };
    let decode_capacity = d_ranks * max_batch / (osl * t_dec(max_batch));

    let mut b = (n / d_ranks).min(max_batch);
    let (mut rate, mut ttft) = (0.0_f64, 0.0_f64);
    for _ in 0..ITERATIONS + 20 {
        let t = t_dec(b);
        let before_decode = prefill_latency(rate.min(capacity)) + transfer;
        let steady = c.api_overhead + before_decode + t;
        rate = (n / (steady + osl * t))
            .min(capacity)
            .min(d_ranks * b / (osl * t));
        ttft = steady.max(n / rate - osl * t);
        let room = max_batch - pd_preallocated(w, rate, before_decode) / d_ranks;
        let next = (rate * osl * t / d_ranks).min(room.max(1.0));
        if (next - b).abs() < 1e-9 * b.max(1.0) {
            break;
        }
        b = 0.5 * (b + next);
    }
    let tpot = t_dec(b);
    let prompts = w.num_prompts.max(n);
    let (mean, drain) = if prompts.is_finite() {
        let waves = prompts / n;
        (
            ttft + n / prompts * (n / (2.0 * capacity) + c.first_wave_stall),
            waves / (waves + DRAIN_REQUESTS),
        )
    } else {
        (ttft, 1.0)
    };
    let requests_per_s = rate.min(n / (mean + (osl - 1.0) * tpot) * drain);
    Some(DisaggregatedPoint {
        ttft: mean,
        ttft_steady: ttft,
        tpot,
        requests_per_s,
        output_tokens_per_s: requests_per_s * osl,
        prefill_capacity_rps: capacity,
        decode_capacity_rps: decode_capacity,
        batch: b,
        max_batch,
        prefill_time: t_prompt,
        kv_transfer: transfer,
    })
}

/// Prompt tokens one prefill step of `layout` computes per DP rank: the engine's token
/// budget (`max_num_batched_tokens`, SGLang's `chunked_prefill_size`). SGLang divides it
/// over the DP ranks under DP attention, "to avoid MoE kernel issues"
/// (`server_args.py` `_handle_data_parallelism`: `chunked_prefill_size // dp_size`,
/// 0.5.2–0.5.12), so each rank's batch is a `dp`-th of it; vLLM's DP engines each keep the
/// whole budget.
pub fn pd_prefill_budget(w: &ServingWorkload, layout: &Layout) -> f64 {
    let budget = w.max_num_batched_tokens.max(1.0);
    match w.engine {
        Engine::Sglang if layout.dp > 1 => (budget / layout.dp as f64).floor().max(1.0),
        _ => budget,
    }
}

/// Seconds one prompt of `isl` tokens takes alone on a prefill instance of `layout` whose
/// steps hold `budget` tokens: one step when it fits, else `⌈isl / budget⌉` chunk steps,
/// each attending over the prompt's tokens already cached (a chunk of `s` tokens after `p`
/// cached ones does `s · (p + s/2)` of the causal work; all chunks together the whole
/// prompt's `isl²/2`), each paying the step's weight reads and kernels again.
pub fn pd_prefill_prompt_time(
    m: &ModelPerf,
    g: &GpuPerf,
    c: &Constants,
    layout: &Layout,
    isl: f64,
    budget: f64,
) -> f64 {
    let budget = budget.max(1.0);
    let mut done = 0.0;
    let mut total = 0.0;
    while done < isl {
        let s = budget.min(isl - done);
        let step = StepBatch {
            prefill_tokens: s,
            prefill_attention_work: s * (done + s / 2.0),
            ..StepBatch::default()
        };
        total += step_time(m, g, c, layout, &step);
        done += s;
    }
    total
}

/// Requests holding decode KV before they decode, summed over the decode ranks, at `rate`
/// requests/s that spend `before_decode` seconds in prefill (its queue included) and the
/// transfer. SGLang's decode side pre-allocates a request's KV before its prefill runs (the
/// prefill writes into it): `disaggregation/decode.py` — "pre-allocate kv once there is
/// available kv", then the transfer queue, then decoding — so those requests take their
/// share of the decode KV cache (Little's law: `rate · before_decode`). vLLM's decode side
/// allocates when the prefilled request arrives (none).
pub fn pd_preallocated(w: &ServingWorkload, rate: f64, before_decode: f64) -> f64 {
    match w.engine {
        Engine::Sglang => rate * before_decode,
        Engine::Vllm => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::tests::{consts, h100, llama70};
    use crate::perf::WeightFormat;

    fn fp8_llama() -> ModelPerf {
        ModelPerf {
            weight_bytes: 72.6e9,
            dense_format: WeightFormat::Fp8,
            kv_dtype_bytes: 1.0,
            ..llama70()
        }
    }

    fn work(c: f64) -> ServingWorkload {
        ServingWorkload {
            isl: 1024.0,
            osl: 1024.0,
            concurrency: Some(c),
            num_prompts: 10.0 * c,
            max_num_seqs: 1024.0,
            max_num_batched_tokens: 8192.0,
            gpu_memory_utilization: 0.9,
            engine: Engine::Vllm,
            scheduler_recv_interval: 1.0,
        }
    }

    #[test]
    fn more_clients_more_throughput_slower_tokens() {
        let (m, g, c) = (fp8_llama(), h100(), consts());
        let l = Layout::tp(4);
        let mut last: Option<ServingPoint> = None;
        for conc in [1.0, 4.0, 16.0, 64.0] {
            let p = serving(&m, &g, &c, &l, &work(conc)).unwrap();
            assert!(p.tpot > 0.0 && p.ttft > 0.0 && p.batch <= conc + 1e-9);
            if let Some(q) = last {
                assert!(p.output_tokens_per_s > q.output_tokens_per_s);
                assert!(p.tpot > q.tpot);
            }
            last = Some(p);
        }
    }

    #[test]
    fn prefill_mixing_slows_decode_and_long_prompts_slow_it_more() {
        let (m, g, c) = (fp8_llama(), h100(), consts());
        let l = Layout::tp(4);
        let w = work(32.0);
        let p = serving(&m, &g, &c, &l, &w).unwrap();
        let plain = step_time(&m, &g, &c, &l, &StepBatch::decode(p.batch, 1024.0 + 512.0));
        assert!(p.tpot > plain);
        let long = serving(&m, &g, &c, &l, &ServingWorkload { isl: 8192.0, ..w }).unwrap();
        assert!(long.tpot > p.tpot && long.ttft > p.ttft);
    }

    #[test]
    fn kv_capacity_caps_the_batch_and_queues_the_rest() {
        let (m, g, c) = (fp8_llama(), h100(), consts());
        let l = Layout::tp(2);
        let w = ServingWorkload {
            isl: 8192.0,
            ..work(256.0)
        };
        let p = serving(&m, &g, &c, &l, &w).unwrap();
        assert!(p.batch_limited && p.batch <= p.max_batch + 1e-9);
        // Waiting for a slot dominates TTFT: longer than several decode lifetimes' share.
        assert!(p.ttft_steady > 10.0 * p.tpot * 10.0);
        let free = serving(&m, &g, &c, &l, &work(4.0)).unwrap();
        assert!(!free.batch_limited);
    }

    #[test]
    fn sglang_pauses_decode_for_whole_prefills() {
        let (m, g, c) = (fp8_llama(), h100(), consts());
        let l = Layout::tp(8);
        let v = serving(&m, &g, &c, &l, &work(64.0)).unwrap();
        let s = ServingWorkload {
            engine: Engine::Sglang,
            ..work(64.0)
        };
        let s = serving(&m, &g, &c, &l, &s).unwrap();
        // A separate prefill re-reads the weights a mixed chunk shares with decode.
        assert!(s.tpot > v.tpot);
    }

    #[test]
    fn a_scheduler_polling_every_r_steps_delays_a_steady_prompt_half_a_cycle_not_the_first_wave() {
        let (m, g, c) = (fp8_llama(), h100(), consts());
        let l = Layout::tp(8);
        for engine in [Engine::Vllm, Engine::Sglang] {
            // Offline (the batch held at its cap): exactly (R - 1) / 2 decode steps more.
            let offline = ServingWorkload {
                engine,
                concurrency: None,
                ..work(1.0)
            };
            let polled = ServingWorkload {
                scheduler_recv_interval: 30.0,
                ..offline
            };
            let (a, b) = (
                serving(&m, &g, &c, &l, &offline).unwrap(),
                serving(&m, &g, &c, &l, &polled).unwrap(),
            );
            let t_d = step_time(&m, &g, &c, &l, &StepBatch::decode(a.batch, 1024.0 + 512.0));
            assert!((b.ttft_steady - a.ttft_steady - 14.5 * t_d).abs() < 1e-12);
            assert_eq!(a.tpot, b.tpot);
            // A closed loop: the steady request waits, the first wave (an idle engine, which
            // polls at once) does not.
            let w = ServingWorkload {
                engine,
                ..work(32.0)
            };
            let p = ServingWorkload {
                scheduler_recv_interval: 30.0,
                ..w
            };
            let (a, b) = (
                serving(&m, &g, &c, &l, &w).unwrap(),
                serving(&m, &g, &c, &l, &p).unwrap(),
            );
            assert!(!a.batch_limited && !b.batch_limited);
            assert!(b.ttft_steady > a.ttft_steady + 10.0 * a.tpot);
            let first_wave = |s: &ServingPoint| (320.0 * s.ttft - 288.0 * s.ttft_steady) / 32.0;
            let (fa, fb) = (first_wave(&a), first_wave(&b));
            assert!((fa - fb).abs() <= 1e-6 * fa, "{fa} vs {fb}");
            assert!(b.output_tokens_per_s < a.output_tokens_per_s);
        }
    }

    #[test]
    fn data_parallel_ranks_serve_in_parallel_and_nothing_fits_is_none() {
        let (m, g, c) = (fp8_llama(), h100(), consts());
        let one = serving(&m, &g, &c, &Layout::tp(4), &work(16.0)).unwrap();
        let two = Layout {
            dp: 2,
            ..Layout::tp(4)
        };
        let both = serving(&m, &g, &c, &two, &work(32.0)).unwrap();
        assert!((both.output_tokens_per_s / one.output_tokens_per_s - 2.0).abs() < 1e-9);
        let big = ModelPerf {
            weight_bytes: 1e12,
            ..fp8_llama()
        };
        assert!(serving(&big, &g, &c, &Layout::tp(1), &work(1.0)).is_none());
    }

    #[test]
    fn the_warm_up_stall_holds_the_first_wave_only() {
        // A one-off stall S that all C first requests wait out raises the mean TTFT over N
        // requests by C / N · S, leaves the steady (median) request alone and costs the run
        // the time: throughput falls.
        let (m, g, c) = (fp8_llama(), h100(), consts());
        let l = Layout::tp(4);
        let stalled = Constants {
            first_wave_stall: 2.0,
            ..c
        };
        for engine in [Engine::Vllm, Engine::Sglang] {
            let w = ServingWorkload {
                engine,
                ..work(32.0)
            };
            let (a, b) = (
                serving(&m, &g, &c, &l, &w).unwrap(),
                serving(&m, &g, &stalled, &l, &w).unwrap(),
            );
            assert_eq!(a.ttft_steady, b.ttft_steady);
            let added = b.ttft - a.ttft;
            assert!((added - 32.0 / 320.0 * 2.0).abs() < 1e-9, "{added}");
            assert!(b.output_tokens_per_s < a.output_tokens_per_s);
            // Steady state (no first wave): no stall.
            let steady = ServingWorkload {
                num_prompts: f64::INFINITY,
                ..w
            };
            let s = serving(&m, &g, &stalled, &l, &steady).unwrap();
            assert_eq!(s.ttft, s.ttft_steady);
        }
        // The P/D loop's first wave waits it out alike.
        let w = pd_work(64.0);
        let (a, b) = (
            disaggregated(&m, &g, &c, &l, 1.0, &l, 4.0, &w).unwrap(),
            disaggregated(&m, &g, &stalled, &l, 1.0, &l, 4.0, &w).unwrap(),
        );
        assert_eq!(a.ttft_steady, b.ttft_steady);
        assert!((b.ttft - a.ttft - 64.0 / 640.0 * 2.0).abs() < 1e-9);
    }

    fn pd_work(c: f64) -> ServingWorkload {
        ServingWorkload {
            isl: 4096.0,
            ..work(c)
        }
    }

    #[test]
    fn disaggregated_loop_obeys_littles_law_and_queues_at_the_slower_side() {
        let (m, g, c) = (fp8_llama(), h100(), consts());
        let (p, d) = (Layout::tp(4), Layout::tp(4));
        let mut last: Option<DisaggregatedPoint> = None;
        for conc in [1.0, 8.0, 64.0, 512.0] {
            let x = disaggregated(&m, &g, &c, &p, 1.0, &d, 2.0, &pd_work(conc)).unwrap();
            // The loop holds its clients: in TTFT or decoding (steady requests).
            let held = x.requests_per_s * (x.ttft_steady + 1024.0 * x.tpot);
            assert!(held <= conc * 1.0001, "{conc}: {held}");
            assert!(x.requests_per_s <= x.prefill_capacity_rps * 1.0001);
            assert!(x.requests_per_s <= x.decode_capacity_rps * 1.0001);
            assert!(x.ttft >= x.ttft_steady && x.batch <= x.max_batch + 1e-9);
            if let Some(q) = last {
                assert!(x.requests_per_s >= q.requests_per_s * 0.999);
                assert!(x.ttft_steady >= q.ttft_steady);
            }
            last = Some(x);
        }
        // Far past what one prefill instance clears, the clients wait in front of it.
        let x = last.unwrap();
        // (less the first wave and the drain, a few per cent)
        assert!(x.requests_per_s > 0.9 * x.prefill_capacity_rps);
        assert!(x.ttft_steady > 10.0 * x.prefill_time);
        // More prefill instances relieve it; the decode side then sets the rate.
        let more = disaggregated(&m, &g, &c, &p, 8.0, &d, 2.0, &pd_work(512.0)).unwrap();
        assert!(more.requests_per_s > x.requests_per_s && more.ttft_steady < x.ttft_steady);
    }

    #[test]
    fn sglang_divides_the_prefill_budget_over_its_dp_ranks_and_chunks_longer_prompts() {
        let (m, g, c) = (fp8_llama(), h100(), consts());
        let w = pd_work(64.0);
        let dp4 = Layout {
            dp: 4,
            ..Layout::tp(2)
        };
        let sglang = ServingWorkload {
            engine: Engine::Sglang,
            ..w
        };
        // SGLang: chunked_prefill_size // dp_size per rank; vLLM's DP engines keep it whole.
        assert_eq!(pd_prefill_budget(&sglang, &dp4), 2048.0);
        assert_eq!(pd_prefill_budget(&w, &dp4), 8192.0);
        assert_eq!(pd_prefill_budget(&sglang, &Layout::tp(8)), 8192.0);
        // A prompt within the budget is one step; a longer one runs in chunks, each paying
        // the step's weight reads and kernels again: slower the smaller the chunks, and
        // never faster than the whole prompt in one step.
        let l = Layout::tp(4);
        let whole = step_time(&m, &g, &c, &l, &StepBatch::prefill(4096.0));
        assert_eq!(
            pd_prefill_prompt_time(&m, &g, &c, &l, 4096.0, 8192.0),
            whole
        );
        let mut last = whole;
        for chunk in [2048.0, 1024.0, 256.0] {
            let t = pd_prefill_prompt_time(&m, &g, &c, &l, 4096.0, chunk);
            assert!(t > last, "{chunk}: {t} vs {last}");
            last = t;
        }
        // Chunks attend over what is cached: the causal work adds up to the whole prompt's,
        // so with no per-step costs the chunked prompt takes what the whole one does.
        let free = Constants {
            step_overhead: 0.0,
            kernel_overhead: 0.0,
            allreduce_latency: 0.0,
            ..c
        };
        let dense = ModelPerf {
            weight_bytes: 1.0,
            ..m
        };
        let one = step_time(&dense, &g, &free, &l, &StepBatch::prefill(4096.0));
        let four = pd_prefill_prompt_time(&dense, &g, &free, &l, 4096.0, 1024.0);
        assert!((four / one - 1.0).abs() < 1e-6, "{four} vs {one}");
        // In the loop: the DP ranks' smaller batches clear fewer prompts, and a lone prompt
        // that no longer fits one rank's budget takes longer.
        let v = disaggregated(&m, &g, &c, &dp4, 2.0, &l, 4.0, &w).unwrap();
        let s = disaggregated(&m, &g, &c, &dp4, 2.0, &l, 4.0, &sglang).unwrap();
        assert!(s.prefill_capacity_rps < v.prefill_capacity_rps);
        assert!(s.prefill_time > v.prefill_time);
    }

    #[test]
    fn sglang_decode_kv_holds_the_requests_still_in_prefill() {
        // SGLang pre-allocates a request's decode KV before its prefill runs: where the
        // decode KV binds, the requests in prefill and transfer take their share of it and
        // fewer decode at once; vLLM's decode side allocates when the prefill is done.
        let (m, g, c) = (fp8_llama(), h100(), consts());
        let (p, d) = (Layout::tp(4), Layout::tp(2));
        let w = ServingWorkload {
            isl: 8192.0,
            ..work(1024.0)
        };
        let s = ServingWorkload {
            engine: Engine::Sglang,
            ..w
        };
        let v = disaggregated(&m, &g, &c, &p, 4.0, &d, 1.0, &w).unwrap();
        let x = disaggregated(&m, &g, &c, &p, 4.0, &d, 1.0, &s).unwrap();
        assert!(
            v.batch >= v.max_batch * 0.999,
            "the decode KV binds: {}",
            v.batch
        );
        // (at least its lone prefill and transfer; the clients queued in front of the decode
        // side's pre-allocation hold nothing)
        let held = pd_preallocated(&s, x.requests_per_s, x.prefill_time + x.kv_transfer);
        assert!(held > 0.1);
        assert!(x.batch + held <= x.max_batch * 1.01, "{} + {held}", x.batch);
        assert!(x.batch < v.batch && x.requests_per_s < v.requests_per_s);
        assert_eq!(pd_preallocated(&w, 10.0, 1.0), 0.0);
    }

    #[test]
    fn the_first_wave_raises_the_mean_ttft_not_the_steady_one() {
        let (m, g, c) = (fp8_llama(), h100(), consts());
        let l = Layout::tp(4);
        let burst = disaggregated(&m, &g, &c, &l, 1.0, &l, 4.0, &pd_work(64.0)).unwrap();
        let steady = ServingWorkload {
            num_prompts: f64::INFINITY,
            ..pd_work(64.0)
        };
        let s = disaggregated(&m, &g, &c, &l, 1.0, &l, 4.0, &steady).unwrap();
        assert_eq!(s.ttft, s.ttft_steady);
        assert!(burst.ttft > burst.ttft_steady);
        assert!((burst.ttft_steady - s.ttft_steady).abs() < 1e-9 * s.ttft_steady);
        // A slow KV link adds to a lone request's TTFT.
        let slow = Constants {
            kv_transfer_bandwidth: c.kv_transfer_bandwidth / 100.0,
            ..c
        };
        let one = ServingWorkload {
            concurrency: Some(1.0),
            ..steady
        };
        let fast = disaggregated(&m, &g, &c, &l, 1.0, &l, 4.0, &one).unwrap();
        let t = disaggregated(&m, &g, &slow, &l, 1.0, &l, 4.0, &one).unwrap();
        assert!(t.kv_transfer > fast.kv_transfer);
        // (all of it less the prefill queue the slower loop no longer builds)
        let (added, moved) = (
            t.ttft_steady - fast.ttft_steady,
            t.kv_transfer - fast.kv_transfer,
        );
        assert!(
            added > 0.5 * moved && added <= moved * 1.000001,
            "{added} {moved}"
        );
        // No clients, no loop; a model that does not fit, no point.
        let offline = ServingWorkload {
            concurrency: None,
            ..steady
        };
        assert!(disaggregated(&m, &g, &c, &l, 1.0, &l, 4.0, &offline).is_none());
        let big = ModelPerf {
            weight_bytes: 1e12,
            ..m
        };
        assert!(disaggregated(&big, &g, &c, &l, 1.0, &l, 4.0, &steady).is_none());
    }
}
