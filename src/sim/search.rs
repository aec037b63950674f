//! The highest request rate at which a deployment meets its SLOs at a percentile — the
//! per-candidate question of goodput-aware planning (DistServe's goodput), answered by
//! simulating at a few rates.
//!
//! Every trial serves the same requests (same lengths, same arrival pattern scaled to the
//! rate: common random numbers), so trials differ only by the rate and the search is stable.
//! A trial is judged on the middle of the run ([`STEADY_STATE`] of the requests by arrival):
//! the first requests meet an empty deployment and the last ones a draining one, both
//! kinder than the steady state a deployment serving that rate lives in.

use super::requests::{Arrival, Lengths, Load, Requests};
use super::stats::SimResult;
use super::{simulate, Config, SimError};

/// What [`max_rate_within_slo`] simulates and how precisely it searches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchOptions {
    /// The quantile both TTFT and TPOT must meet their SLOs at (0.9 = p90).
    pub percentile: f64,
    /// Requests per trial simulation.
    pub requests: usize,
    pub lengths: Lengths,
    pub arrival: Arrival,
    pub seed: u64,
    /// Stop when the bracket [passing rate, failing rate] is within this relative width.
    pub rel_tol: f64,
    /// A first guess of the answer (e.g. the analytic capacity); `None` starts at 1 req/s.
    pub hint_rps: Option<f64>,
    /// The factor each bracketing step moves the rate by from the hint until one rate
    /// passes and one fails (2 when the hint may be far off; closer to 1 when it is good).
    pub growth: f64,
}

/// The answer: the rate, the simulation at that rate, and how many simulations it took.
#[derive(Debug, Clone, PartialEq)]
pub struct RateSearch {
    /// Highest rate found that meets the SLOs at the percentile (0 when even a nearly idle
    /// deployment misses them).
    pub rate_rps: f64,
    /// The lowest rate found to miss them (an upper bound on the answer).
    pub failing_rps: f64,
    pub result: Option<SimResult>,
    pub simulations: u32,
}

/// The requests (as fractions of the run, by arrival) a trial's percentiles are taken over.
pub const STEADY_STATE: std::ops::Range<f64> = 0.1..0.9;

/// Rates below this are "none": the SLO cannot be met at any load.
const MIN_RATE: f64 = 1e-6;
const MAX_DOUBLINGS: u32 = 64;

/// The bracketing factor of [`max_rate_within_slo`] when the hint may be far off.
pub const GROWTH: f64 = 2.0;

pub fn max_rate_within_slo(cfg: &Config, opts: &SearchOptions) -> Result<RateSearch, SimError> {
    cfg.validate()?;
    if cfg.slo.ttft.is_none() && cfg.slo.tpot.is_none() {
        return Err(SimError::new(
            "max_rate_within_slo needs at least one SLO (ttft or tpot) to meet",
        ));
    }
    if !(opts.percentile > 0.0 && opts.percentile < 1.0) {
        return Err(SimError::new(format!(
            "percentile must be in (0, 1), e.g. 0.9 for p90, got {}",
            opts.percentile
        )));
    }
    if !(opts.growth.is_finite() && opts.growth > 1.0 + opts.rel_tol && opts.growth <= 16.0) {
        return Err(SimError::new(format!(
            "growth must be in (1 + tolerance, 16], got {}",
            opts.growth
        )));
    }
    if !(opts.rel_tol.is_finite() && opts.rel_tol >= 1e-4 && opts.rel_tol < 1.0) {
        return Err(SimError::new(format!(
            "tolerance must be in [0.0001, 1), got {}",
            opts.rel_tol
        )));
    }
    let base = Requests::generate(&opts.lengths, opts.requests, opts.seed)?;
    let unit = Requests::unit_arrivals(&opts.arrival, opts.requests, opts.seed)?;
    let mut simulations = 0u32;
    let mut trial = |rate: f64| -> Result<(bool, SimResult), SimError> {
        let mut reqs = base.clone();
        reqs.arrival = unit.iter().map(|t| t / rate).collect();
        simulations += 1;
        let r = simulate(cfg, &Load::Open, &reqs)?;
        Ok((r.meets_slo_in(opts.percentile, STEADY_STATE), r))
    };

    let start = match opts.hint_rps {
        Some(h) if h.is_finite() && h > MIN_RATE => h,
        _ => 1.0,
    };
    let (mut lo, mut hi, mut best);
    let (ok, r) = trial(start)?;
    if ok {
        lo = start;
        best = Some(r);
        hi = start * opts.growth;
        let mut n = 0;
        loop {
            let (ok, r) = trial(hi)?;
            if !ok {
                break;
            }
            lo = hi;
            best = Some(r);
            hi *= opts.growth;
            n += 1;
            if n >= MAX_DOUBLINGS {
                // Never saturates (can only happen without a binding SLO): report the last.
                return Ok(RateSearch {
                    rate_rps: lo,
                    failing_rps: f64::INFINITY,
                    result: best,
                    simulations,
                });
            }
        }
    } else {
        hi = start;
        lo = start / opts.growth;
        loop {
            if lo < MIN_RATE {
                return Ok(RateSearch {
                    rate_rps: 0.0,
                    failing_rps: hi,
                    result: None,
                    simulations,
                });
            }
            let (ok, r) = trial(lo)?;
            if ok {
                best = Some(r);
                break;
            }
            hi = lo;
            lo /= opts.growth;
        }
    }
    while hi / lo - 1.0 > opts.rel_tol {
        let mid = (lo * hi).sqrt();
        let (ok, r) = trial(mid)?;
        if ok {
            lo = mid;
            best = Some(r);
        } else {
            hi = mid;
        }
    }
    Ok(RateSearch {
        rate_rps: lo,
        failing_rps: hi,
        result: best,
        simulations,
    })
}
