//! The performance model: per-TP and per-layout sides, step time, aggregated serving and
//! the calibration fit.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::perf::{self, Constants, GpuPerf, ModelPerf};

use crate::layout_rules;
use crate::perf::fit::{self as perf_fit, FitOptions, FitPoint, Prior};
use crate::perf::serving;
use crate::perf::StepBatch;
use crate::plan::{self, SideOption};

use super::convert::*;
use super::errors::*;

pub(super) type SideRow = (i64, bool, bool, bool, f64, bool, i64, i64, f64, i64);

pub(super) fn side_row(o: &SideOption) -> SideRow {
    (
        o.tp,
        o.loads,
        o.fits_weights,
        o.fits_kv,
        o.latency,
        o.meets_slo,
        o.batch,
        o.max_batch,
        o.requests_per_s,
        o.units,
    )
}

/// One instance kind's operating point for any layout and role (`prefill`, `decode`,
/// `aggregated`): the side row, then `(ttft_s, concurrency, weight bytes per GPU)`. The
/// model's layout load rules are applied (`layout_model` as in `check_layouts`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(super) fn layout_option(
    py: Python<'_>,
    model: &ModelInputs,
    rules_model: LayoutModelTuple,
    gpu: &GpuInputs,
    consts: &ConstantInputs,
    work: &Bound<'_, PyDict>,
    layout_: LayoutTuple,
    role: RoleArg,
    util: f64,
    max_num_batched_tokens: f64,
) -> PyResult<(SideRow, f64, i64, f64)> {
    let (m, g, c, w) = (model.0, gpu.0, consts.0, workload(work)?);
    let role = role.0;
    let (lm, l) = (layout_model(rules_model), layout(layout_));
    let o = released(py, move || {
        let mut o = plan::candidates::operating_point(
            &m,
            &g,
            &c,
            &w,
            util,
            &l,
            role,
            max_num_batched_tokens,
        );
        o.loads = layout_rules::loads(&lm, &l);
        (o, perf::weight_bytes_per_gpu(&m, &l))
    })?;
    Ok((side_row(&o.0), o.0.ttft, o.0.concurrency, o.1))
}

/// One side's operating point at one TP size (the numbers `evaluate` reports).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(super) fn side_option(
    py: Python<'_>,
    model: &ModelInputs,
    gpu: &GpuInputs,
    consts: &ConstantInputs,
    work: &Bound<'_, PyDict>,
    tp: i64,
    prefill: bool,
    util: f64,
) -> PyResult<SideRow> {
    let m = model.0;
    let shape = m.shape();
    let (g, c, w) = (gpu.0, consts.0, workload(work)?);
    shielded(py, || {
        side_row(&plan::side_option(
            &m, &shape, &g, &c, &w, util, tp, prefill,
        ))
    })
}

/// Seconds one engine step of `layout` takes for the batch (the one step-cost function).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (model, gpu, consts, layout, decode_seqs, decode_context_tokens, prefill_tokens, prefill_attention_work))]
pub(super) fn step_time(
    py: Python<'_>,
    model: &ModelInputs,
    gpu: &GpuInputs,
    consts: &ConstantInputs,
    layout: LayoutTuple,
    decode_seqs: f64,
    decode_context_tokens: f64,
    prefill_tokens: f64,
    prefill_attention_work: f64,
) -> PyResult<f64> {
    let (m, g, c) = (model.0, gpu.0, consts.0);
    let batch = StepBatch {
        decode_seqs,
        decode_context_tokens,
        prefill_tokens,
        prefill_attention_work,
    };
    let l = self::layout(layout);
    shielded(py, || perf::step_time(&m, &g, &c, &l, &batch))
}

/// The steady state of one aggregated instance (times in seconds).
#[pyclass(frozen, get_all, module = "pdtp._core")]
#[derive(Debug, Clone, Copy)]
pub struct ServingPoint {
    pub ttft: f64,
    pub ttft_steady: f64,
    pub tpot: f64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub batch: f64,
    pub max_batch: f64,
    pub batch_limited: bool,
}

impl From<serving::ServingPoint> for ServingPoint {
    fn from(p: serving::ServingPoint) -> Self {
        ServingPoint {
            ttft: p.ttft,
            ttft_steady: p.ttft_steady,
            tpot: p.tpot,
            requests_per_s: p.requests_per_s,
            output_tokens_per_s: p.output_tokens_per_s,
            batch: p.batch,
            max_batch: p.max_batch,
            batch_limited: p.batch_limited,
        }
    }
}

/// Aggregated serving of one instance; None when one sequence does not fit.
#[pyfunction]
pub(super) fn predict_serving(
    py: Python<'_>,
    model: &ModelInputs,
    gpu: &GpuInputs,
    consts: &ConstantInputs,
    layout: LayoutTuple,
    work: &Bound<'_, PyDict>,
) -> PyResult<Option<ServingPoint>> {
    let (m, g, c) = (model.0, gpu.0, consts.0);
    let w = serving_workload(work)?;
    let l = self::layout(layout);
    shielded(py, || {
        serving::serving(&m, &g, &c, &l, &w).map(ServingPoint::from)
    })
}

/// The steady state of a disaggregated deployment in a closed loop (times in seconds).
#[pyclass(frozen, get_all, module = "pdtp._core")]
#[derive(Debug, Clone, Copy)]
pub struct DisaggregatedPoint {
    pub ttft: f64,
    pub ttft_steady: f64,
    pub tpot: f64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub prefill_capacity_rps: f64,
    pub decode_capacity_rps: f64,
    pub batch: f64,
    pub max_batch: f64,
    pub prefill_time: f64,
    pub kv_transfer: f64,
}

impl From<serving::DisaggregatedPoint> for DisaggregatedPoint {
    fn from(p: serving::DisaggregatedPoint) -> Self {
        DisaggregatedPoint {
            ttft: p.ttft,
            ttft_steady: p.ttft_steady,
            tpot: p.tpot,
            requests_per_s: p.requests_per_s,
            output_tokens_per_s: p.output_tokens_per_s,
            prefill_capacity_rps: p.prefill_capacity_rps,
            decode_capacity_rps: p.decode_capacity_rps,
            batch: p.batch,
            max_batch: p.max_batch,
            prefill_time: p.prefill_time,
            kv_transfer: p.kv_transfer,
        }
    }
}

/// Disaggregated serving of `work`'s closed loop on `prefill_workers` × `prefill_layout` and
/// `decode_workers` × `decode_layout`; None when a side does not fit or no concurrency.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(super) fn predict_disaggregated(
    py: Python<'_>,
    model: &ModelInputs,
    gpu: &GpuInputs,
    consts: &ConstantInputs,
    prefill_layout: LayoutTuple,
    prefill_workers: f64,
    decode_layout: LayoutTuple,
    decode_workers: f64,
    work: &Bound<'_, PyDict>,
) -> PyResult<Option<DisaggregatedPoint>> {
    let (m, g, c) = (model.0, gpu.0, consts.0);
    let w = serving_workload(work)?;
    let (p, d) = (self::layout(prefill_layout), self::layout(decode_layout));
    shielded(py, || {
        serving::disaggregated(&m, &g, &c, &p, prefill_workers, &d, decode_workers, &w)
            .map(DisaggregatedPoint::from)
    })
}

/// The collectives one step of `layout` runs, each with whether it crosses the scale-out
/// network (`true`) or stays inside one NVLink/xGMI domain.
#[pyfunction]
pub(super) fn collective_links(
    model: &ModelInputs,
    gpu: &GpuInputs,
    layout: LayoutTuple,
) -> PyResult<Vec<(&'static str, bool)>> {
    let (m, g) = (model.0, gpu.0);
    let l = self::layout(layout);
    Ok(perf::collective_links(&m, &g, &l)
        .into_iter()
        .map(|(name, link)| (name, link == perf::Link::ScaleOut))
        .collect())
}

/// Per-layout side numbers: `(weights_fit, max_sequences(isl + osl), prefill time,
/// ttft, prefill requests/s, decode batch, decode max_batch, tpot, decode requests/s,
/// kv_capacity_tokens, prefill fits)`: the KV tokens one data-parallel rank holds, and
/// whether one prompt's KV cache fits beside the weights. TP size `t` is the layout
/// `(t, 1, 1, false)`: what `pdtp.predict_prefill`/`predict_decode` read.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub(super) fn layout_sides(
    py: Python<'_>,
    model: &ModelInputs,
    gpu: &GpuInputs,
    consts: &ConstantInputs,
    layout: LayoutTuple,
    work: &Bound<'_, PyDict>,
    util: f64,
) -> PyResult<(bool, f64, f64, f64, f64, i64, i64, f64, f64, f64, bool)> {
    let (m, g, c, w) = (model.0, gpu.0, consts.0, workload(work)?);
    let l = self::layout(layout);
    shielded(py, || {
        let p = perf::prefill_point_layout(&m, &g, &c, &l, &w, util);
        let d = perf::decode_point_layout(&m, &g, &c, &l, &w, util);
        (
            perf::weights_fit_layout(&m, &g, &c, &l, util),
            perf::max_sequences(&m, &g, &c, &l, util, w.isl + w.osl),
            p.time,
            p.ttft,
            p.requests_per_s,
            d.batch,
            d.max_batch,
            d.tpot,
            d.requests_per_s,
            perf::kv_capacity_tokens_layout(&m, &g, &c, &l, util, w.isl + w.osl),
            p.fits,
        )
    })
}

/// One calibration point from Python: `(model, gpu, consts, layout, workload, params,
/// measured)` with params as `[(constant name, parameter index)]` and measured as
/// `(tpot_s, ttft_s, output_tokens_per_s, ttft_median_s)` (NaN where not measured).
pub(super) type PointTuple<'py> = (
    PyRef<'py, ModelInputs>,
    PyRef<'py, GpuInputs>,
    PyRef<'py, ConstantInputs>,
    LayoutTuple,
    Bound<'py, PyDict>,
    Vec<(String, usize)>,
    (f64, f64, f64, f64),
);

pub(super) fn fit_points(py: Python<'_>, points: Vec<PointTuple<'_>>) -> PyResult<Vec<FitPoint>> {
    points
        .into_iter()
        .map(|(m, g, c, l, w, params, measured)| {
            let params = params
                .into_iter()
                .map(|(name, index)| match Constants::field_index(&name) {
                    Some(f) => Ok((f, index)),
                    None => Err(invalid(py, format!("unknown constant {name:?}"))),
                })
                .collect::<PyResult<Vec<_>>>()?;
            Ok(FitPoint {
                model: m.0,
                gpu: g.0,
                constants: c.0,
                layout: layout(l),
                workload: serving_workload(&w)?,
                params,
                measured: [measured.0, measured.1, measured.2, measured.3],
            })
        })
        .collect()
}

/// Fit parameters to measured points (see `perf::fit`), with priors `(param, parent or
/// None for 1, weight)`: `(x, cost, iterations, complete)`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (points, priors, x0, lo, hi, weights, scale, max_iterations, time_limit_s))]
pub(super) fn fit_constants(
    py: Python<'_>,
    points: Vec<PointTuple<'_>>,
    priors: Vec<(usize, Option<usize>, f64)>,
    x0: Vec<f64>,
    lo: Vec<f64>,
    hi: Vec<f64>,
    weights: (f64, f64, f64, f64),
    scale: f64,
    max_iterations: usize,
    time_limit_s: f64,
) -> PyResult<(Vec<f64>, f64, usize, bool)> {
    let pts = fit_points(py, points)?;
    if lo.len() != x0.len() || hi.len() != x0.len() {
        return Err(invalid(
            py,
            "x0, lo and hi must have one entry per parameter".into(),
        ));
    }
    let deadline = std::time::Duration::try_from_secs_f64(time_limit_s.max(0.0))
        .ok()
        .and_then(|d| std::time::Instant::now().checked_add(d));
    let opts = FitOptions {
        weights: [weights.0, weights.1, weights.2, weights.3],
        scale,
        max_iterations,
        deadline,
    };
    let priors: Vec<Prior> = priors
        .into_iter()
        .map(|(param, parent, weight)| Prior {
            param,
            parent,
            weight,
        })
        .collect();
    let res = released(py, || perf_fit::fit(&pts, &priors, &x0, &lo, &hi, opts))?;
    Ok((res.x, res.cost, res.iterations, res.complete))
}

/// Predictions `(tpot_s, ttft_s, output_tokens_per_s, ttft_median_s)` of calibration points
/// under parameters `x` (NaN where nothing fits).
#[pyfunction]
pub(super) fn predict_points(
    py: Python<'_>,
    points: Vec<PointTuple<'_>>,
    x: Vec<f64>,
) -> PyResult<Vec<(f64, f64, f64, f64)>> {
    let pts = fit_points(py, points)?;
    let out = released(py, || perf_fit::predict_all(&pts, &x))?;
    Ok(out.into_iter().map(|v| (v[0], v[1], v[2], v[3])).collect())
}

// ---- typed performance inputs: converted once, then passed to every core call ------------
// Python builds one of each per model / GPU (and weight dtype) / constants value and caches
// it (`pdtp.perf.model_inputs` and siblings); every call above reads the plain struct inside,
// never a dict. The fields are named as the struct's (`convert::model_perf` reads them).

/// A model's performance inputs (`pdtp.perf.model_inputs` builds it).
#[pyclass(frozen, module = "pdtp._core")]
#[derive(Clone, Copy)]
pub struct ModelInputs(pub(super) ModelPerf);

#[pymethods]
impl ModelInputs {
    #[new]
    #[pyo3(signature = (**fields))]
    fn new(py: Python<'_>, fields: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        Ok(ModelInputs(model_perf(&fields_or_empty(py, fields))?))
    }
}

/// One GPU type's performance inputs at one weight dtype (`pdtp.perf.gpu_inputs`).
#[pyclass(frozen, module = "pdtp._core")]
#[derive(Clone, Copy)]
pub struct GpuInputs(pub(super) GpuPerf);

#[pymethods]
impl GpuInputs {
    #[new]
    #[pyo3(signature = (**fields))]
    fn new(py: Python<'_>, fields: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        Ok(GpuInputs(gpu_perf(&fields_or_empty(py, fields))?))
    }
}

/// The performance constants, every field of `CONSTANT_FIELDS` by name
/// (`pdtp.perf.constant_inputs`); a name outside that list is refused.
#[pyclass(frozen, module = "pdtp._core")]
#[derive(Clone, Copy)]
pub struct ConstantInputs(pub(super) Constants);

#[pymethods]
impl ConstantInputs {
    #[new]
    #[pyo3(signature = (**values))]
    fn new(py: Python<'_>, values: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let d = fields_or_empty(py, values);
        for key in d.keys() {
            let key: String = key.extract()?;
            if Constants::field_index(&key).is_none() {
                return Err(invalid(
                    py,
                    format!(
                        "unknown constant {key:?}; the constants are {}",
                        Constants::FIELDS.join(", ")
                    ),
                ));
            }
        }
        Ok(ConstantInputs(constants(&d)?))
    }
}

fn fields_or_empty<'py>(py: Python<'py>, d: Option<&Bound<'py, PyDict>>) -> Bound<'py, PyDict> {
    d.cloned().unwrap_or_else(|| PyDict::new(py))
}
