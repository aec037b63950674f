//! Fitting efficiency constants to measured serving points (`pdtp.calibrate` and the
//! defaults' fit): a bounded Levenberg–Marquardt search over log-constants that minimises
//! a robust (soft-L1) loss of log-ratio residuals `ln(predicted / measured)` of TPOT, mean
//! TTFT, output throughput and median TTFT.
//!
//! Each point names which of its constants are free and which parameter each takes
//! (`params`), so one search can fit one constant per GPU type, one per engine and one
//! shared by all at once. The Jacobian is built by forward differences, recomputing only the
//! points a parameter touches. Deterministic; stops at convergence, after `max_iterations`
//! or at `deadline` with the best parameters found so far.

use std::time::Instant;

use super::serving::{serving, ServingPoint, ServingWorkload};
use super::{Constants, GpuPerf, ModelPerf};
use crate::layout::Layout;

/// Quantities a point may measure: TPOT, mean TTFT, output tokens/s, median TTFT.
pub const KINDS: usize = 4;

fn quantities(s: &ServingPoint) -> [f64; KINDS] {
    [s.tpot, s.ttft, s.output_tokens_per_s, s.ttft_steady]
}

/// One measured point and how the parameters enter its constants.
#[derive(Debug, Clone)]
pub struct FitPoint {
    pub model: ModelPerf,
    pub gpu: GpuPerf,
    pub layout: Layout,
    pub workload: ServingWorkload,
    /// This point's constants before the parameters are applied.
    pub constants: Constants,
    /// `(field of Constants::FIELDS, parameter index)`: that field takes that parameter; a
    /// field named again is multiplied by the next parameter (a per-engine factor on a
    /// per-GPU value).
    pub params: Vec<(usize, usize)>,
    /// Measured TPOT (s), mean TTFT (s), output tokens/s and median TTFT (s, against the
    /// steady request's `ttft_steady`: the mean holds the first wave, the median does not);
    /// NaN where not measured.
    pub measured: [f64; KINDS],
}

#[derive(Debug, Clone, Copy)]
pub struct FitOptions {
    /// Weight of each quantity's residuals (TPOT, mean TTFT, throughput, median TTFT).
    pub weights: [f64; KINDS],
    /// Soft-L1 scale: residuals (log ratios) beyond it count linearly, not squared.
    pub scale: f64,
    pub max_iterations: usize,
    pub deadline: Option<Instant>,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            weights: [1.0, 0.5, 1.0, 0.5],
            scale: 0.1,
            max_iterations: 100,
            deadline: None,
        }
    }
}

/// A prior tying parameter `param` to parameter `parent` (or to 1 when `parent` is None):
/// the residual `weight · ln(x[param] / x[parent])`. It shrinks a per-GPU constant towards
/// the value shared by its vendor, so a GPU type with few rows keeps a physical value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prior {
    pub param: usize,
    pub parent: Option<usize>,
    pub weight: f64,
}

#[derive(Debug, Clone)]
pub struct FitResult {
    /// Fitted parameter values (natural units).
    pub x: Vec<f64>,
    /// The robust loss at `x`.
    pub cost: f64,
    pub iterations: usize,
    /// False when the deadline stopped the search early.
    pub complete: bool,
}

/// The residual of a prediction that failed (nothing fits): a factor e³ off.
const FAILED: f64 = 3.0;

/// This point's constants with parameters `x` applied.
pub fn constants_at(p: &FitPoint, x: &[f64]) -> Constants {
    let mut c = p.constants;
    let mut seen = 0_u64;
    for &(field, param) in &p.params {
        let Some(&v) = x.get(param) else { continue };
        let bit = 1_u64 << (field % 64);
        let value = if seen & bit != 0 {
            c.get(field).unwrap_or(1.0) * v
        } else {
            v
        };
        seen |= bit;
        c.set(field, value);
    }
    c
}

/// The model's prediction for one point under parameters `x`.
pub fn predict(p: &FitPoint, x: &[f64]) -> Option<ServingPoint> {
    let c = constants_at(p, x);
    serving(&p.model, &p.gpu, &c, &p.layout, &p.workload)
}

/// Predicted `[tpot, mean ttft, output tokens/s, median ttft]` of every point (NaN where
/// nothing fits).
pub fn predict_all(points: &[FitPoint], x: &[f64]) -> Vec<[f64; KINDS]> {
    points
        .iter()
        .map(|p| match predict(p, x) {
            Some(s) => quantities(&s),
            None => [f64::NAN; KINDS],
        })
        .collect()
}

fn residuals(p: &FitPoint, x: &[f64], weights: &[f64; KINDS]) -> [f64; KINDS] {
    let pred = predict(p, x).map(|s| quantities(&s));
    let mut r = [0.0; KINDS];
    for k in 0..KINDS {
        let m = p.measured[k];
        if !(m.is_finite() && m > 0.0) {
            continue;
        }
        r[k] = match pred {
            Some(v) if v[k].is_finite() && v[k] > 0.0 => weights[k] * (v[k] / m).ln(),
            _ => weights[k] * FAILED,
        };
    }
    r
}

fn loss(r: f64, s: f64) -> f64 {
    2.0 * s * s * ((1.0 + r * r / (s * s)).sqrt() - 1.0)
}

struct Problem<'a> {
    points: &'a [FitPoint],
    priors: Vec<Prior>,
    lo: Vec<f64>,
    hi: Vec<f64>,
    opts: FitOptions,
    /// Points each parameter enters.
    users: Vec<Vec<usize>>,
}

impl Problem<'_> {
    fn x_of(&self, u: &[f64]) -> Vec<f64> {
        u.iter().map(|v| v.exp()).collect()
    }

    fn late(&self) -> bool {
        self.opts.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// All residuals, or None when the deadline passed meanwhile.
    fn all(&self, u: &[f64]) -> Option<Vec<[f64; KINDS]>> {
        let x = self.x_of(u);
        let mut out = Vec::with_capacity(self.points.len());
        for (i, p) in self.points.iter().enumerate() {
            if i % 64 == 0 && self.late() {
                return None;
            }
            out.push(residuals(p, &x, &self.opts.weights));
        }
        Some(out)
    }

    fn prior_residuals(&self, u: &[f64]) -> Vec<f64> {
        self.priors
            .iter()
            .map(|p| p.weight * (u[p.param] - p.parent.map_or(0.0, |q| u[q])))
            .collect()
    }

    fn cost(&self, r: &[[f64; KINDS]], u: &[f64]) -> f64 {
        let s = self.opts.scale;
        let points: f64 = r.iter().flat_map(|v| v.iter()).map(|&v| loss(v, s)).sum();
        let priors: f64 = self.prior_residuals(u).iter().map(|&v| loss(v, s)).sum();
        points + priors
    }
}

/// Solve `a · x = b` (n × n, row-major) by Gaussian elimination with partial pivoting;
/// None when singular.
fn solve(mut a: Vec<f64>, mut b: Vec<f64>, n: usize) -> Option<Vec<f64>> {
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| {
            a[i * n + col]
                .abs()
                .partial_cmp(&a[j * n + col].abs())
                .unwrap_or(std::cmp::Ordering::Equal)
        })?;
        if a[pivot * n + col].abs() < 1e-300 {
            return None;
        }
        if pivot != col {
            for k in 0..n {
                a.swap(col * n + k, pivot * n + k);
            }
            b.swap(col, pivot);
        }
        for row in col + 1..n {
            let f = a[row * n + col] / a[col * n + col];
            if f != 0.0 {
                for k in col..n {
                    a[row * n + k] -= f * a[col * n + k];
                }
                b[row] -= f * b[col];
            }
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let mut s = b[row];
        for k in row + 1..n {
            s -= a[row * n + k] * x[k];
        }
        x[row] = s / a[row * n + row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Fit the parameters: start at `x0`, each within `[lo, hi]` (all positive).
pub fn fit(
    points: &[FitPoint],
    priors: &[Prior],
    x0: &[f64],
    lo: &[f64],
    hi: &[f64],
    opts: FitOptions,
) -> FitResult {
    let priors: Vec<Prior> = priors
        .iter()
        .copied()
        .filter(|p| p.param < x0.len() && p.parent.is_none_or(|q| q < x0.len()))
        .collect();
    let n = x0.len();
    let mut users = vec![Vec::new(); n];
    for (i, p) in points.iter().enumerate() {
        for &(_, param) in &p.params {
            if param < n && users[param].last() != Some(&i) {
                users[param].push(i);
            }
        }
    }
    let pb = Problem {
        points,
        priors,
        lo: lo.iter().map(|v| v.max(1e-300).ln()).collect(),
        hi: hi.iter().map(|v| v.max(1e-300).ln()).collect(),
        opts,
        users,
    };
    let clamp = |u: &mut Vec<f64>| {
        for (i, v) in u.iter_mut().enumerate() {
            *v = v.clamp(pb.lo[i], pb.hi[i]);
        }
    };
    let mut u: Vec<f64> = x0.iter().map(|v| v.max(1e-300).ln()).collect();
    clamp(&mut u);
    let done = |u: &[f64], cost: f64, iterations: usize, complete: bool| FitResult {
        x: u.iter().map(|v| v.exp()).collect(),
        cost,
        iterations,
        complete,
    };
    let Some(mut r) = pb.all(&u) else {
        return done(&u, f64::INFINITY, 0, false);
    };
    let mut cost = pb.cost(&r, &u);
    let mut lambda = 1e-3;
    let h = 1e-4;
    let s = opts.scale;
    for iteration in 0..opts.max_iterations {
        // Robust weights (iteratively reweighted least squares for soft-L1).
        let omega: Vec<[f64; KINDS]> = r
            .iter()
            .map(|v| v.map(|e| 1.0 / (1.0 + e * e / (s * s)).sqrt()))
            .collect();
        // Sparse Jacobian columns: (point, [dr/du_j]) for the points the parameter enters.
        let mut columns: Vec<Vec<(usize, [f64; KINDS])>> = Vec::with_capacity(n);
        for j in 0..n {
            let mut uj = u.clone();
            let step = if uj[j] + h > pb.hi[j] { -h } else { h };
            uj[j] += step;
            let x = pb.x_of(&uj);
            let mut col = Vec::with_capacity(pb.users[j].len());
            for (k, &i) in pb.users[j].iter().enumerate() {
                if k % 64 == 0 && pb.late() {
                    return done(&u, cost, iteration, false);
                }
                let ri = residuals(&points[i], &x, &opts.weights);
                col.push((i, std::array::from_fn(|q| (ri[q] - r[i][q]) / step)));
            }
            columns.push(col);
        }
        // Normal equations A = Jᵀ Ω J, g = Jᵀ Ω r.
        let mut a = vec![0.0; n * n];
        let mut g = vec![0.0; n];
        let mut dense: Vec<Vec<f64>> = vec![Vec::new(); n];
        for j in 0..n {
            let mut dj = vec![0.0; points.len() * KINDS];
            for &(i, d) in &columns[j] {
                for q in 0..KINDS {
                    dj[i * KINDS + q] = d[q];
                    g[j] += d[q] * omega[i][q] * r[i][q];
                }
            }
            dense[j] = dj;
        }
        for j in 0..n {
            for k in j..n {
                let mut sum = 0.0;
                for &(i, d) in &columns[j] {
                    for q in 0..KINDS {
                        sum += d[q] * omega[i][q] * dense[k][i * KINDS + q];
                    }
                }
                a[j * n + k] = sum;
                a[k * n + j] = sum;
            }
        }
        drop(dense);
        // Priors: residual w·(u_i − u_parent), derivative ±w.
        for (p, rp) in pb.priors.iter().zip(pb.prior_residuals(&u)) {
            let om = 1.0 / (1.0 + rp * rp / (s * s)).sqrt();
            let mut terms = vec![(p.param, p.weight)];
            if let Some(q) = p.parent {
                terms.push((q, -p.weight));
            }
            for &(i, di) in &terms {
                g[i] += di * om * rp;
                for &(j, dj) in &terms {
                    a[i * n + j] += di * om * dj;
                }
            }
        }
        let mut improved = false;
        for _ in 0..12 {
            let mut m = a.clone();
            for j in 0..n {
                m[j * n + j] += lambda * a[j * n + j].max(1e-12) + 1e-12;
            }
            let Some(delta) = solve(m, g.iter().map(|v| -v).collect(), n) else {
                lambda *= 10.0;
                continue;
            };
            let mut trial: Vec<f64> = u.iter().zip(&delta).map(|(a, b)| a + b).collect();
            clamp(&mut trial);
            let Some(rt) = pb.all(&trial) else {
                return done(&u, cost, iteration, false);
            };
            let ct = pb.cost(&rt, &trial);
            if ct < cost {
                let gain = (cost - ct) / cost.max(1e-300);
                u = trial;
                r = rt;
                cost = ct;
                lambda = (lambda / 3.0).max(1e-9);
                improved = gain > 1e-7;
                break;
            }
            lambda *= 4.0;
        }
        if !improved {
            return done(&u, cost, iteration + 1, true);
        }
    }
    done(&u, cost, opts.max_iterations, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::serving::Engine;
    use crate::perf::tests::{consts, h100, llama70};

    fn field(name: &str) -> usize {
        Constants::field_index(name).unwrap()
    }

    fn points(truth: &Constants) -> Vec<FitPoint> {
        let mut out = Vec::new();
        for tp in [2, 4, 8] {
            for conc in [4.0, 16.0, 64.0] {
                for isl in [1024.0, 4096.0] {
                    let w = ServingWorkload {
                        isl,
                        osl: 512.0,
                        concurrency: Some(conc),
                        num_prompts: 10.0 * conc,
                        max_num_seqs: 1024.0,
                        max_num_batched_tokens: 8192.0,
                        gpu_memory_utilization: 0.9,
                        engine: Engine::Vllm,
                        scheduler_recv_interval: 1.0,
                    };
                    let layout = Layout::tp(tp);
                    let s = serving(&llama70(), &h100(), truth, &layout, &w).unwrap();
                    out.push(FitPoint {
                        model: llama70(),
                        gpu: h100(),
                        layout,
                        workload: w,
                        constants: consts(),
                        params: vec![
                            (field("mbu"), 0),
                            (field("step_overhead_s"), 1),
                            (field("mfu_prefill"), 2),
                        ],
                        measured: quantities(&s),
                    });
                }
            }
        }
        out
    }

    #[test]
    fn recovers_the_constants_that_made_the_points() {
        let truth = Constants {
            mbu: 0.72,
            step_overhead: 2.5e-3,
            mfu_prefill: 0.45,
            ..consts()
        };
        let pts = points(&truth);
        let res = fit(
            &pts,
            &[],
            &[0.9, 1e-3, 0.6],
            &[0.3, 1e-5, 0.1],
            &[1.0, 2e-2, 0.95],
            FitOptions::default(),
        );
        assert!(res.complete);
        assert!((res.x[0] / 0.72 - 1.0).abs() < 1e-3, "{:?}", res.x);
        assert!((res.x[1] / 2.5e-3 - 1.0).abs() < 1e-2, "{:?}", res.x);
        assert!((res.x[2] / 0.45 - 1.0).abs() < 1e-2, "{:?}", res.x);
    }

    #[test]
    fn a_past_deadline_returns_the_start() {
        let pts = points(&consts());
        let res = fit(
            &pts,
            &[],
            &[0.5, 1e-3, 0.6],
            &[0.3, 1e-5, 0.1],
            &[1.0, 2e-2, 0.95],
            FitOptions {
                deadline: Some(Instant::now()),
                ..FitOptions::default()
            },
        );
        assert!(!res.complete);
        assert!((res.x[0] - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_prior_pulls_an_uninformed_parameter_to_its_parent() {
        let truth = consts();
        let pts = points(&truth);
        // Parameter 3 enters no point; a prior ties it to parameter 0 (mbu).
        let priors = [Prior {
            param: 3,
            parent: Some(0),
            weight: 1.0,
        }];
        let res = fit(
            &pts,
            &priors,
            &[0.5, 1e-3, 0.6, 0.35],
            &[0.3, 1e-5, 0.1, 0.3],
            &[1.0, 2e-2, 0.95, 1.0],
            FitOptions::default(),
        );
        assert!((res.x[3] / res.x[0] - 1.0).abs() < 1e-3, "{:?}", res.x);
    }

    #[test]
    fn solves_linear_systems() {
        let x = solve(vec![2.0, 1.0, 1.0, 3.0], vec![3.0, 5.0], 2).unwrap();
        assert!((x[0] - 0.8).abs() < 1e-12 && (x[1] - 1.4).abs() < 1e-12);
        assert!(solve(vec![1.0, 2.0, 2.0, 4.0], vec![1.0, 2.0], 2).is_none());
    }
}
