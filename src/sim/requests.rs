//! The requests a simulation serves: their prompt and output lengths, and (open loop) their
//! arrival times. Lengths and arrivals come from separate random streams of one seed, so the
//! same seed gives the same requests at every rate, only spaced differently.

use super::rng::Rng;
use super::{SimError, MAX_OUTPUT_TOKENS, MAX_REQUESTS, MAX_TOKENS};

const LENGTH_STREAM: u64 = 1;
/// Gamma shapes outside this range are a constant process or a single burst in practice (and
/// far outside it the sampler loses its precision).
pub const MIN_BURSTINESS: f64 = 1e-3;
pub const MAX_BURSTINESS: f64 = 1e3;
const ARRIVAL_STREAM: u64 = 2;

/// How open-loop requests are spaced in time (vLLM's `benchmark_serving` offers the same).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Exponential gaps (a Poisson process).
    Poisson,
    /// Equal gaps of `1 / rate`.
    Constant,
    /// Gamma-distributed gaps of mean `1 / rate` and shape `shape` (vLLM's `--burstiness`):
    /// below 1 burstier than Poisson, above 1 more regular; 1 is Poisson.
    Gamma { shape: f64 },
}

/// Who decides when requests arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// Open loop: each request arrives at its time in [`Requests::arrival`].
    Open,
    /// Closed loop: `concurrency` clients start at time 0; each sends its next request the
    /// moment its previous one finishes (benchmark clients' `--max-concurrency`).
    Closed { concurrency: u32 },
}

/// Request lengths in tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lengths {
    Fixed {
        isl: u32,
        osl: u32,
    },
    /// Each length uniform over the integers in [⌊low·n⌋, ⌊high·n⌋] of its nominal `n`
    /// (benchmark clients' random datasets: low 0.8, high 1.0 draws 80–100% of nominal).
    Uniform {
        isl: u32,
        osl: u32,
        low: f64,
        high: f64,
    },
}

/// The requests of one simulation, in arrival order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Requests {
    pub isl: Vec<u32>,
    pub osl: Vec<u32>,
    /// Arrival times (s) for an open loop, non-decreasing; empty for a closed loop.
    pub arrival: Vec<f64>,
}

fn check_count(n: usize) -> Result<(), SimError> {
    if n == 0 || n > MAX_REQUESTS {
        return Err(SimError::new(format!(
            "requests must be in 1..={MAX_REQUESTS}, got {n}"
        )));
    }
    Ok(())
}

fn check_len(field: &str, v: u32) -> Result<(), SimError> {
    if v == 0 || v > MAX_TOKENS {
        return Err(SimError::new(format!(
            "{field} must be in 1..={MAX_TOKENS} tokens, got {v}"
        )));
    }
    Ok(())
}

impl Lengths {
    fn validate(&self) -> Result<(), SimError> {
        match *self {
            Lengths::Fixed { isl, osl } => {
                check_len("isl", isl)?;
                check_len("osl", osl)
            }
            Lengths::Uniform {
                isl,
                osl,
                low,
                high,
            } => {
                check_len("isl", isl)?;
                check_len("osl", osl)?;
                if !(low.is_finite() && high.is_finite() && 0.0 < low && low <= high) {
                    return Err(SimError::new(format!(
                        "length_range must be (low, high) with 0 < low <= high, got ({low}, {high})"
                    )));
                }
                if high * f64::from(isl.max(osl)) > f64::from(MAX_TOKENS) {
                    return Err(SimError::new(format!(
                        "length_range high={high} makes requests longer than {MAX_TOKENS} tokens"
                    )));
                }
                Ok(())
            }
        }
    }
}

fn bounds(n: u32, low: f64, high: f64) -> (u32, u32) {
    let lo = ((low * f64::from(n)).floor() as u32).max(1);
    let hi = ((high * f64::from(n)).floor() as u32).max(lo);
    (lo, hi)
}

impl Requests {
    /// `n` requests with lengths drawn from `lengths` (no arrival times yet).
    pub fn generate(lengths: &Lengths, n: usize, seed: u64) -> Result<Requests, SimError> {
        check_count(n)?;
        lengths.validate()?;
        let mut rng = Rng::new(seed, LENGTH_STREAM);
        let (isl, osl) = match *lengths {
            Lengths::Fixed { isl, osl } => (vec![isl; n], vec![osl; n]),
            Lengths::Uniform {
                isl,
                osl,
                low,
                high,
            } => {
                let (ilo, ihi) = bounds(isl, low, high);
                let (olo, ohi) = bounds(osl, low, high);
                let mut a = Vec::with_capacity(n);
                let mut b = Vec::with_capacity(n);
                for _ in 0..n {
                    a.push(rng.int_in(ilo, ihi));
                    b.push(rng.int_in(olo, ohi));
                }
                (a, b)
            }
        };
        Ok(Requests {
            isl,
            osl,
            arrival: Vec::new(),
        })
    }

    /// Arrival times of `n` requests at rate 1/s: scaling them by `1 / rate` gives the same
    /// process at any rate (so a search over rates compares like with like).
    pub fn unit_arrivals(arrival: &Arrival, n: usize, seed: u64) -> Result<Vec<f64>, SimError> {
        check_count(n)?;
        if let Arrival::Gamma { shape } = arrival {
            if !(MIN_BURSTINESS..=MAX_BURSTINESS).contains(shape) {
                return Err(SimError::new(format!(
                    "burstiness must be in [{MIN_BURSTINESS}, {MAX_BURSTINESS}], got {shape}"
                )));
            }
        }
        let mut rng = Rng::new(seed, ARRIVAL_STREAM);
        let mut t = 0.0;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(t);
            t += match *arrival {
                Arrival::Poisson => rng.exp1(),
                Arrival::Constant => 1.0,
                Arrival::Gamma { shape } => rng.gamma(shape) / shape,
            };
        }
        Ok(out)
    }

    /// These requests arriving at `rate` requests/s by `arrival`.
    pub fn at_rate(
        mut self,
        arrival: &Arrival,
        rate: f64,
        seed: u64,
    ) -> Result<Requests, SimError> {
        check_rate(rate)?;
        let unit = Requests::unit_arrivals(arrival, self.isl.len(), seed)?;
        self.arrival = unit.into_iter().map(|t| t / rate).collect();
        Ok(self)
    }

    pub fn len(&self) -> usize {
        self.isl.len()
    }

    pub fn is_empty(&self) -> bool {
        self.isl.is_empty()
    }

    pub fn output_tokens(&self) -> u64 {
        self.osl.iter().map(|&o| u64::from(o)).sum()
    }

    pub(super) fn validate(&self, load: &Load) -> Result<(), SimError> {
        check_count(self.len())?;
        if self.osl.len() != self.len() {
            return Err(SimError::new("isl and osl must have one entry per request"));
        }
        for (i, (&a, &b)) in self.isl.iter().zip(&self.osl).enumerate() {
            if a == 0 || b == 0 || a > MAX_TOKENS || b > MAX_TOKENS {
                return Err(SimError::new(format!(
                    "request {i}: input and output tokens must be in 1..={MAX_TOKENS}, got \
                     {a} and {b}"
                )));
            }
        }
        let total = self.output_tokens();
        if total > MAX_OUTPUT_TOKENS {
            return Err(SimError::new(format!(
                "the requests ask for {total} output tokens; one simulation produces at most \
                 {MAX_OUTPUT_TOKENS} (use fewer or shorter requests)"
            )));
        }
        match load {
            Load::Open => {
                if self.arrival.len() != self.len() {
                    return Err(SimError::new(
                        "an open loop needs one arrival time per request (give rate_rps or a \
                         trace with arrival times)",
                    ));
                }
                let mut last = 0.0;
                for (i, &t) in self.arrival.iter().enumerate() {
                    if !(t.is_finite() && t >= last) {
                        return Err(SimError::new(format!(
                            "request {i}: arrival times must be finite, >= 0 and \
                             non-decreasing, got {t} after {last}"
                        )));
                    }
                    last = t;
                }
            }
            Load::Closed { concurrency } => {
                if *concurrency < 1 || *concurrency as usize > MAX_REQUESTS {
                    return Err(SimError::new(format!(
                        "concurrency must be in 1..={MAX_REQUESTS}, got {concurrency}"
                    )));
                }
            }
        }
        Ok(())
    }
}

pub(super) fn check_rate(rate: f64) -> Result<(), SimError> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err(SimError::new(format!(
            "rate_rps must be a positive finite number, got {rate}"
        )));
    }
    Ok(())
}

/// Requests served when the caller gives no count (and no trace).
pub const DEFAULT_REQUESTS: usize = 10_000;

/// The requests and load of one run, from the caller's choices.
///
/// With a `trace`: its lengths, the first `requests` rows (default all); its arrival times
/// unless `rate_rps` (open loop at that rate) or `concurrency` (closed loop) is given.
/// Without: `requests` (default [`DEFAULT_REQUESTS`]) requests of `lengths`, at `rate_rps`
/// or with `concurrency` clients — exactly one of the two.
pub fn build_requests(
    lengths: &Lengths,
    requests: Option<usize>,
    seed: u64,
    rate_rps: Option<f64>,
    concurrency: Option<u32>,
    arrival: &Arrival,
    trace: Option<&super::trace::Trace>,
) -> Result<(Requests, Load), SimError> {
    if rate_rps.is_some() && concurrency.is_some() {
        return Err(SimError::new(
            "give rate_rps (open loop) or concurrency (closed loop), not both",
        ));
    }
    let base = match trace {
        Some(t) => {
            let n = requests.unwrap_or(t.isl.len()).min(t.isl.len());
            check_count(requests.unwrap_or(n))?;
            Requests {
                isl: t.isl[..n].to_vec(),
                osl: t.osl[..n].to_vec(),
                arrival: t.arrival[..n].to_vec(),
            }
        }
        None => {
            if rate_rps.is_none() && concurrency.is_none() {
                return Err(SimError::new(
                    "give rate_rps (open loop), concurrency (closed loop) or a trace with \
                     arrival times",
                ));
            }
            Requests::generate(lengths, requests.unwrap_or(DEFAULT_REQUESTS), seed)?
        }
    };
    match (rate_rps, concurrency) {
        (Some(rate), _) => Ok((base.at_rate(arrival, rate, seed)?, Load::Open)),
        (None, Some(c)) => Ok((
            Requests {
                arrival: Vec::new(),
                ..base
            },
            Load::Closed { concurrency: c },
        )),
        (None, None) => Ok((base, Load::Open)),
    }
}
