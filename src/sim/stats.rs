//! What a simulation reports: latency percentiles, throughput, goodput, queues and how busy
//! each side was.

use super::Slo;

/// Summary of one latency over the requests (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Percentiles {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// The `q`-quantile of sorted values, interpolating linearly between closest ranks (numpy's
/// default); NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Percentiles {
    pub fn of_sorted(sorted: &[f64]) -> Percentiles {
        if sorted.is_empty() {
            return Percentiles {
                mean: f64::NAN,
                p50: f64::NAN,
                p90: f64::NAN,
                p99: f64::NAN,
                max: f64::NAN,
            };
        }
        Percentiles {
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p50: quantile(sorted, 0.5),
            p90: quantile(sorted, 0.9),
            p99: quantile(sorted, 0.99),
            max: sorted[sorted.len() - 1],
        }
    }
}

/// One kind of instance over the whole run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SideStats {
    /// `"prefill"`, `"decode"` or `"aggregated"`.
    pub role: &'static str,
    pub instances: u32,
    /// KV-cache blocks of one instance.
    pub kv_blocks: u64,
    /// Share of instance-time spent running steps (0–1).
    pub utilization: f64,
    pub steps: u64,
    /// Tokens one step computes, on average (decode tokens + prompt tokens).
    pub mean_step_tokens: f64,
    /// Decoding sequences per step, on average over steps.
    pub mean_decode_batch: f64,
    /// Requests waiting for this side, time-averaged and at most: prompts not yet started
    /// (prefill, aggregated), or prompts done and not yet decoding (decode: waiting for KV
    /// blocks, in transfer, or for a seat in the batch).
    pub queue_mean: f64,
    pub queue_max: u64,
    /// Running requests preempted (their KV freed, recomputed later) for lack of KV blocks.
    pub preemptions: u64,
}

/// The outcome of one simulation. Times are seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct SimResult {
    /// Requests served (every request finishes exactly once).
    pub requests: usize,
    /// From the first arrival to the last completion.
    pub duration: f64,
    pub throughput_rps: f64,
    pub output_tokens_per_s: f64,
    /// Requests per second that met both SLOs.
    pub goodput_rps: f64,
    /// Share of requests that met both SLOs.
    pub slo_attainment: f64,
    pub ttft: Percentiles,
    /// Time per output token after the first, per request; requests of one output token have
    /// none.
    pub tpot: Percentiles,
    pub e2e: Percentiles,
    /// Requests in the system (arrived, not finished), time-averaged (Little's L).
    pub mean_in_system: f64,
    pub sides: Vec<SideStats>,
    pub slo: Slo,
    /// Every request's TTFT and TPOT, sorted (for any other quantile).
    pub ttft_sorted: Vec<f64>,
    pub tpot_sorted: Vec<f64>,
    /// Every request's TTFT and TPOT in arrival order (TPOT NaN for one-token outputs).
    pub ttft_each: Vec<f64>,
    pub tpot_each: Vec<f64>,
}

fn meets(slo: &Slo, ttft_sorted: &[f64], tpot_sorted: &[f64], q: f64) -> bool {
    slo.ttft.is_none_or(|b| quantile(ttft_sorted, q) <= b)
        && slo
            .tpot
            .is_none_or(|b| tpot_sorted.is_empty() || quantile(tpot_sorted, q) <= b)
}

impl SimResult {
    /// Whether the `q`-quantiles of TTFT and TPOT both meet the SLOs (unbounded ones always do).
    pub fn meets_slo_at(&self, q: f64) -> bool {
        meets(&self.slo, &self.ttft_sorted, &self.tpot_sorted, q)
    }

    /// [`Self::meets_slo_at`] over the requests whose arrival index lies in `window` (a
    /// fraction range of the run, e.g. 0.1..0.9 leaves out the ramp-up and the drain).
    pub fn meets_slo_in(&self, q: f64, window: std::ops::Range<f64>) -> bool {
        let n = self.ttft_each.len();
        let lo = ((window.start.clamp(0.0, 1.0) * n as f64) as usize).min(n);
        let hi = ((window.end.clamp(0.0, 1.0) * n as f64).ceil() as usize).clamp(lo, n);
        if hi == lo {
            return self.meets_slo_at(q);
        }
        let mut ttft = self.ttft_each[lo..hi].to_vec();
        let mut tpot: Vec<f64> = self.tpot_each[lo..hi]
            .iter()
            .copied()
            .filter(|x| !x.is_nan())
            .collect();
        ttft.sort_unstable_by(f64::total_cmp);
        tpot.sort_unstable_by(f64::total_cmp);
        meets(&self.slo, &ttft, &tpot, q)
    }
}
