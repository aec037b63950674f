//! The simulator (src/sim). Typed values: `SimConfig` (what is deployed), `SimTrace` (a
//! parsed trace), `SimResult` and its parts, `RateSearch`. Latencies cross the boundary in
//! milliseconds, as in `pdtp.Plan`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::layout::Layout;
use crate::sim;

use super::convert::*;
use super::errors::*;
use super::perf::{ConstantInputs, GpuInputs, ModelInputs};

/// One kind of instance of a simulated deployment.
#[pyclass(frozen, module = "pdtp._core", name = "SimPool")]
pub(super) struct PySimPool {
    /// `"aggregated"`, `"prefill"` or `"decode"`.
    #[pyo3(get)]
    role: &'static str,
    #[pyo3(get)]
    tp: i64,
    /// The layout's compact name (`tp8`, `tp1dp8ep`, `tp4pp2`).
    #[pyo3(get)]
    layout: String,
    #[pyo3(get)]
    pp: i64,
    #[pyo3(get)]
    dp: i64,
    #[pyo3(get)]
    ep: bool,
    #[pyo3(get)]
    instances: u32,
    #[pyo3(get)]
    gpu_memory_utilization: f64,
    #[pyo3(get)]
    max_num_seqs: u32,
    #[pyo3(get)]
    max_num_batched_tokens: u32,
    /// KV-cache blocks of 16 tokens one DP rank holds (the instance's when TP-only).
    #[pyo3(get)]
    kv_blocks: u64,
}

#[pymethods]
impl PySimPool {
    fn __repr__(&self) -> String {
        format!(
            "SimPool(role={:?}, layout={:?}, instances={}, max_num_seqs={}, \
             max_num_batched_tokens={}, kv_blocks={})",
            self.role,
            self.layout,
            self.instances,
            self.max_num_seqs,
            self.max_num_batched_tokens,
            self.kv_blocks
        )
    }
}

/// What a simulation deploys: built by `pdtp.sim_config` (or from a Plan by `pdtp.simulate`).
#[pyclass(frozen, module = "pdtp._core", name = "SimConfig")]
pub(super) struct PySimConfig {
    inner: sim::Config,
    /// `"aggregated"` or `"disaggregated"`.
    #[pyo3(get)]
    mode: &'static str,
    #[pyo3(get)]
    model: String,
    #[pyo3(get)]
    gpu: String,
    /// `"round_robin"` or `"least_loaded"`.
    #[pyo3(get)]
    router: &'static str,
    pools: Vec<Py<PySimPool>>,
}

pub(super) type PoolSpec = (String, String, u32, f64, u32, u32);

pub(super) fn pool_info(role: &'static str, p: &sim::Pool) -> PySimPool {
    PySimPool {
        role,
        tp: p.layout.tp,
        layout: p.layout.key(),
        pp: p.layout.pp,
        dp: p.layout.dp,
        ep: p.layout.ep,
        instances: p.instances,
        gpu_memory_utilization: p.gpu_memory_utilization,
        max_num_seqs: p.max_num_seqs,
        max_num_batched_tokens: p.max_num_batched_tokens,
        kv_blocks: p.kv_blocks(),
    }
}

#[pymethods]
impl PySimConfig {
    /// `pools`: `(role, layout, instances, gpu_memory_utilization, max_num_seqs,
    /// max_num_batched_tokens)` — one `"aggregated"` pool, or a `"prefill"` and a
    /// `"decode"` pool; `layout` as `Layout.parse` reads it (`"tp8"`, `"tp1dp8ep"`).
    #[new]
    #[pyo3(signature = (model, gpu, consts, *, model_name, gpu_name, pools, router))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &ModelInputs,
        gpu: &GpuInputs,
        consts: &ConstantInputs,
        model_name: String,
        gpu_name: String,
        pools: Vec<PoolSpec>,
        router: RouterArg,
    ) -> PyResult<Self> {
        let (m, g, c) = (model.0, gpu.0, consts.0);
        let invalid = |msg: String| invalid(py, msg);
        let mut built: Vec<(String, sim::Pool)> = Vec::new();
        for (role, layout, instances, util, seqs, tokens) in pools {
            let layout = Layout::parse(&layout).map_err(|e| invalid(format!("{role}: {e}")))?;
            built.push((
                role,
                sim::Pool {
                    model: m,
                    gpu: g,
                    constants: c,
                    layout,
                    instances,
                    gpu_memory_utilization: util,
                    max_num_seqs: seqs,
                    max_num_batched_tokens: tokens,
                },
            ));
        }
        let roles: Vec<&str> = built.iter().map(|(r, _)| r.as_str()).collect();
        let (deployment, mode, infos) = match roles.as_slice() {
            ["aggregated"] => (
                sim::Deployment::Aggregated(built[0].1),
                "aggregated",
                vec![pool_info("aggregated", &built[0].1)],
            ),
            ["prefill", "decode"] => (
                sim::Deployment::Disaggregated {
                    prefill: built[0].1,
                    decode: built[1].1,
                },
                "disaggregated",
                vec![
                    pool_info("prefill", &built[0].1),
                    pool_info("decode", &built[1].1),
                ],
            ),
            other => {
                return Err(invalid(format!(
                    "pools must be [aggregated] or [prefill, decode], got {other:?}"
                )))
            }
        };
        let inner = sim::Config {
            deployment,
            router: router.0,
            slo: sim::Slo::default(),
        };
        shielded(py, || inner.validate())?.map_err(|e| sim_error(py, e))?;
        Ok(PySimConfig {
            inner,
            mode,
            model: model_name,
            gpu: gpu_name,
            router: router.1,
            pools: infos
                .into_iter()
                .map(|p| Py::new(py, p))
                .collect::<PyResult<_>>()?,
        })
    }

    /// The instance kinds: `(aggregated,)` or `(prefill, decode)`.
    #[getter]
    fn pools<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.pools.iter().map(|p| p.clone_ref(py)))
    }

    /// GPUs the deployment occupies.
    #[getter]
    fn gpus(&self) -> i64 {
        self.inner.gpus()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let pools: Vec<String> = self.pools.iter().map(|p| p.get().__repr__()).collect();
        let _ = py;
        format!(
            "SimConfig(mode={:?}, model={:?}, gpu={:?}, router={:?}, pools=[{}])",
            self.mode,
            self.model,
            self.gpu,
            self.router,
            pools.join(", ")
        )
    }
}

/// A parsed request trace (arrival time, input tokens, output tokens per request).
#[pyclass(frozen, module = "pdtp._core", name = "SimTrace")]
pub(super) struct PySimTrace {
    inner: sim::trace::Trace,
    /// The file it came from.
    #[pyo3(get)]
    name: String,
}

#[pymethods]
impl PySimTrace {
    #[getter]
    fn requests(&self) -> usize {
        self.inner.isl.len()
    }

    /// Seconds from the first arrival to the last.
    #[getter]
    fn span_s(&self) -> f64 {
        match (self.inner.arrival.first(), self.inner.arrival.last()) {
            (Some(a), Some(b)) => b - a,
            _ => 0.0,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "SimTrace(name={:?}, requests={}, span_s={})",
            self.name,
            self.requests(),
            self.span_s()
        )
    }
}

/// Parse a trace's CSV text (`name` appears in every error).
#[pyfunction]
pub(super) fn parse_trace(py: Python<'_>, text: String, name: String) -> PyResult<PySimTrace> {
    let parsed = released(py, || sim::trace::parse(&text, &name))?;
    let inner = parsed.map_err(|e| sim_error(py, e))?;
    Ok(PySimTrace { inner, name })
}

/// A latency's mean, percentiles and maximum over the requests, in milliseconds.
#[pyclass(frozen, module = "pdtp._core", name = "Percentiles")]
pub(super) struct PyPercentiles {
    #[pyo3(get)]
    mean: f64,
    #[pyo3(get)]
    p50: f64,
    #[pyo3(get)]
    p90: f64,
    #[pyo3(get)]
    p99: f64,
    #[pyo3(get)]
    max: f64,
}

impl PyPercentiles {
    fn from_s(p: &sim::Percentiles) -> PyPercentiles {
        PyPercentiles {
            mean: p.mean * 1e3,
            p50: p.p50 * 1e3,
            p90: p.p90 * 1e3,
            p99: p.p99 * 1e3,
            max: p.max * 1e3,
        }
    }
}

#[pymethods]
impl PyPercentiles {
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in [
            ("mean", self.mean),
            ("p50", self.p50),
            ("p90", self.p90),
            ("p99", self.p99),
            ("max", self.max),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Percentiles(mean={:.4}, p50={:.4}, p90={:.4}, p99={:.4}, max={:.4})",
            self.mean, self.p50, self.p90, self.p99, self.max
        )
    }
}

/// One side of a simulated deployment over the run.
#[pyclass(frozen, module = "pdtp._core", name = "SideStats")]
pub(super) struct PySideStats {
    /// `"aggregated"`, `"prefill"` or `"decode"`.
    #[pyo3(get)]
    role: &'static str,
    #[pyo3(get)]
    instances: u32,
    #[pyo3(get)]
    kv_blocks: u64,
    /// Share of instance-time spent running steps (0–1).
    #[pyo3(get)]
    utilization: f64,
    #[pyo3(get)]
    steps: u64,
    #[pyo3(get)]
    mean_step_tokens: f64,
    #[pyo3(get)]
    mean_decode_batch: f64,
    /// Requests waiting for this side: time-averaged, and at most.
    #[pyo3(get)]
    queue_mean: f64,
    #[pyo3(get)]
    queue_max: u64,
    #[pyo3(get)]
    preemptions: u64,
}

#[pymethods]
impl PySideStats {
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("role", self.role)?;
        d.set_item("instances", self.instances)?;
        d.set_item("kv_blocks", self.kv_blocks)?;
        d.set_item("utilization", self.utilization)?;
        d.set_item("steps", self.steps)?;
        d.set_item("mean_step_tokens", self.mean_step_tokens)?;
        d.set_item("mean_decode_batch", self.mean_decode_batch)?;
        d.set_item("queue_mean", self.queue_mean)?;
        d.set_item("queue_max", self.queue_max)?;
        d.set_item("preemptions", self.preemptions)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "SideStats(role={:?}, instances={}, utilization={:.3}, mean_decode_batch={:.1}, \
             queue_mean={:.2}, queue_max={}, preemptions={})",
            self.role,
            self.instances,
            self.utilization,
            self.mean_decode_batch,
            self.queue_mean,
            self.queue_max,
            self.preemptions
        )
    }
}

/// The outcome of `pdtp.simulate`. Latencies in milliseconds.
#[pyclass(frozen, module = "pdtp._core", name = "SimResult")]
pub(super) struct PySimResult {
    inner: sim::SimResult,
    #[pyo3(get)]
    ttft_ms: Py<PyPercentiles>,
    #[pyo3(get)]
    tpot_ms: Py<PyPercentiles>,
    #[pyo3(get)]
    e2e_ms: Py<PyPercentiles>,
    sides: Vec<Py<PySideStats>>,
    /// The open-loop rate asked for (None: closed loop or a replayed trace).
    #[pyo3(get)]
    rate_rps: Option<f64>,
    /// Clients of a closed loop (None: open loop).
    #[pyo3(get)]
    concurrency: Option<u32>,
    #[pyo3(get)]
    seed: u64,
}

pub(super) fn sim_result(
    py: Python<'_>,
    r: sim::SimResult,
    rate_rps: Option<f64>,
    concurrency: Option<u32>,
    seed: u64,
) -> PyResult<PySimResult> {
    let sides = r
        .sides
        .iter()
        .map(|s| {
            Py::new(
                py,
                PySideStats {
                    role: s.role,
                    instances: s.instances,
                    kv_blocks: s.kv_blocks,
                    utilization: s.utilization,
                    steps: s.steps,
                    mean_step_tokens: s.mean_step_tokens,
                    mean_decode_batch: s.mean_decode_batch,
                    queue_mean: s.queue_mean,
                    queue_max: s.queue_max,
                    preemptions: s.preemptions,
                },
            )
        })
        .collect::<PyResult<_>>()?;
    Ok(PySimResult {
        ttft_ms: Py::new(py, PyPercentiles::from_s(&r.ttft))?,
        tpot_ms: Py::new(py, PyPercentiles::from_s(&r.tpot))?,
        e2e_ms: Py::new(py, PyPercentiles::from_s(&r.e2e))?,
        sides,
        rate_rps,
        concurrency,
        seed,
        inner: r,
    })
}

#[pymethods]
impl PySimResult {
    /// Requests served (every one finishes exactly once).
    #[getter]
    fn requests(&self) -> usize {
        self.inner.requests
    }
    /// Seconds from the first arrival to the last completion.
    #[getter]
    fn duration_s(&self) -> f64 {
        self.inner.duration
    }
    #[getter]
    fn throughput_rps(&self) -> f64 {
        self.inner.throughput_rps
    }
    #[getter]
    fn output_tokens_per_s(&self) -> f64 {
        self.inner.output_tokens_per_s
    }
    /// Requests per second that met both SLOs.
    #[getter]
    fn goodput_rps(&self) -> f64 {
        self.inner.goodput_rps
    }
    /// Share of requests that met both SLOs.
    #[getter]
    fn slo_attainment(&self) -> f64 {
        self.inner.slo_attainment
    }
    /// Requests in the system, time-averaged (Little's L = throughput × mean e2e).
    #[getter]
    fn mean_in_system(&self) -> f64 {
        self.inner.mean_in_system
    }
    #[getter]
    fn ttft_slo_ms(&self) -> Option<f64> {
        self.inner.slo.ttft.map(|s| s * 1e3)
    }
    #[getter]
    fn tpot_slo_ms(&self) -> Option<f64> {
        self.inner.slo.tpot.map(|s| s * 1e3)
    }
    /// Per side: `(aggregated,)` or `(prefill, decode)`.
    #[getter]
    fn sides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.sides.iter().map(|p| p.clone_ref(py)))
    }

    /// The `q`-quantile (0–1) of `"ttft"` or `"tpot"` in milliseconds.
    fn quantile(&self, py: Python<'_>, metric: MetricArg, q: f64) -> PyResult<f64> {
        if !(0.0..=1.0).contains(&q) {
            return Err(invalid(py, format!("q must be in [0, 1], got {q}")));
        }
        let sorted = match metric.0 {
            Metric::Ttft => &self.inner.ttft_sorted,
            Metric::Tpot => &self.inner.tpot_sorted,
        };
        Ok(sim::quantile(sorted, q) * 1e3)
    }

    /// Whether the `percentile` quantiles of TTFT and TPOT both meet the SLOs: over every
    /// request, or with `steady_state` over the middle 80% by arrival (what the rate search
    /// judges: the first requests meet an idle deployment, the last a draining one).
    #[pyo3(signature = (percentile = 0.9, *, steady_state = false))]
    fn meets_slo(&self, py: Python<'_>, percentile: f64, steady_state: bool) -> PyResult<bool> {
        if !(percentile > 0.0 && percentile < 1.0) {
            return Err(invalid(
                py,
                format!("percentile must be in (0, 1), got {percentile}"),
            ));
        }
        Ok(if steady_state {
            self.inner.meets_slo_in(percentile, sim::STEADY_STATE)
        } else {
            self.inner.meets_slo_at(percentile)
        })
    }

    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("requests", self.requests())?;
        d.set_item("rate_rps", self.rate_rps)?;
        d.set_item("concurrency", self.concurrency)?;
        d.set_item("seed", self.seed)?;
        d.set_item("duration_s", self.duration_s())?;
        d.set_item("throughput_rps", self.throughput_rps())?;
        d.set_item("output_tokens_per_s", self.output_tokens_per_s())?;
        d.set_item("goodput_rps", self.goodput_rps())?;
        d.set_item("slo_attainment", self.slo_attainment())?;
        d.set_item("ttft_slo_ms", self.ttft_slo_ms())?;
        d.set_item("tpot_slo_ms", self.tpot_slo_ms())?;
        d.set_item("ttft_ms", self.ttft_ms.get().to_dict(py)?)?;
        d.set_item("tpot_ms", self.tpot_ms.get().to_dict(py)?)?;
        d.set_item("e2e_ms", self.e2e_ms.get().to_dict(py)?)?;
        d.set_item("mean_in_system", self.mean_in_system())?;
        let sides = self
            .sides
            .iter()
            .map(|s| s.get().to_dict(py))
            .collect::<PyResult<Vec<_>>>()?;
        d.set_item("sides", sides)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let (t, p) = (self.ttft_ms.get(), self.tpot_ms.get());
        format!(
            "SimResult(requests={}, throughput_rps={:.3}, goodput_rps={:.3}, \
             ttft_ms(p50/p90/p99)={:.1}/{:.1}/{:.1}, tpot_ms(p50/p90/p99)={:.2}/{:.2}/{:.2})",
            self.requests(),
            self.throughput_rps(),
            self.goodput_rps(),
            t.p50,
            t.p90,
            t.p99,
            p.p50,
            p.p90,
            p.p99
        )
    }
}

pub(super) fn sim_lengths(isl: u32, osl: u32, length_range: Option<(f64, f64)>) -> sim::Lengths {
    match length_range {
        None => sim::Lengths::Fixed { isl, osl },
        Some((low, high)) => sim::Lengths::Uniform {
            isl,
            osl,
            low,
            high,
        },
    }
}

pub(super) fn sim_arrival(arrival: ArrivalArg, burstiness: f64) -> sim::Arrival {
    match arrival.0 {
        ArrivalKind::Poisson => sim::Arrival::Poisson,
        ArrivalKind::Constant => sim::Arrival::Constant,
        ArrivalKind::Gamma => sim::Arrival::Gamma { shape: burstiness },
    }
}

/// `config` with these SLOs (milliseconds; None = unbounded).
pub(super) fn with_slo(
    config: &PySimConfig,
    ttft_slo_ms: Option<f64>,
    tpot_slo_ms: Option<f64>,
) -> sim::Config {
    let mut cfg = config.inner;
    cfg.slo = sim::Slo {
        ttft: ttft_slo_ms.map(|ms| ms / 1e3),
        tpot: tpot_slo_ms.map(|ms| ms / 1e3),
    };
    cfg
}

/// Run one simulation. Lengths: the trace's, else `isl`/`osl` (fixed, or uniform over
/// `length_range` × nominal). Load: `rate_rps` (open loop), `concurrency` (closed loop), or
/// neither with a trace (its arrival times). Goodput counts requests within both SLOs.
#[pyfunction]
#[pyo3(signature = (config, *, isl, osl, length_range, requests, seed, rate_rps, concurrency, arrival, burstiness, trace, ttft_slo_ms, tpot_slo_ms))]
#[allow(clippy::too_many_arguments)]
pub(super) fn simulate(
    py: Python<'_>,
    config: &PySimConfig,
    isl: u32,
    osl: u32,
    length_range: Option<(f64, f64)>,
    requests: Option<usize>,
    seed: u64,
    rate_rps: Option<f64>,
    concurrency: Option<u32>,
    arrival: ArrivalArg,
    burstiness: f64,
    trace: Option<&PySimTrace>,
    ttft_slo_ms: Option<f64>,
    tpot_slo_ms: Option<f64>,
) -> PyResult<PySimResult> {
    let arrival = sim_arrival(arrival, burstiness);
    let cfg = with_slo(config, ttft_slo_ms, tpot_slo_ms);
    let lengths = sim_lengths(isl, osl, length_range);
    let trace = trace.map(|t| &t.inner);
    let outcome = released(py, || -> Result<sim::SimResult, sim::SimError> {
        let (reqs, load) = sim::build_requests(
            &lengths,
            requests,
            seed,
            rate_rps,
            concurrency,
            &arrival,
            trace,
        )?;
        sim::simulate(&cfg, &load, &reqs)
    })?;
    let r = outcome.map_err(|e| sim_error(py, e))?;
    sim_result(py, r, rate_rps, concurrency, seed)
}

/// The answer of `pdtp.max_rate_within_slo`.
#[pyclass(frozen, module = "pdtp._core", name = "RateSearch")]
pub(super) struct PyRateSearch {
    /// Highest rate found whose TTFT and TPOT quantiles meet the SLOs (0: none).
    #[pyo3(get)]
    rate_rps: f64,
    /// Lowest rate found to miss them (the answer lies in between).
    #[pyo3(get)]
    failing_rps: f64,
    #[pyo3(get)]
    percentile: f64,
    #[pyo3(get)]
    simulations: u32,
    /// The simulation at `rate_rps` (None when no rate meets the SLOs).
    #[pyo3(get)]
    result: Option<Py<PySimResult>>,
}

#[pymethods]
impl PyRateSearch {
    fn __repr__(&self) -> String {
        format!(
            "RateSearch(rate_rps={:.4}, failing_rps={:.4}, percentile={}, simulations={})",
            self.rate_rps, self.failing_rps, self.percentile, self.simulations
        )
    }
}

#[pyfunction]
#[pyo3(signature = (config, *, isl, osl, length_range, requests, seed, arrival, burstiness, percentile, tolerance, hint_rps, ttft_slo_ms, tpot_slo_ms))]
#[allow(clippy::too_many_arguments)]
pub(super) fn max_rate_within_slo(
    py: Python<'_>,
    config: &PySimConfig,
    isl: u32,
    osl: u32,
    length_range: Option<(f64, f64)>,
    requests: usize,
    seed: u64,
    arrival: ArrivalArg,
    burstiness: f64,
    percentile: f64,
    tolerance: f64,
    hint_rps: Option<f64>,
    ttft_slo_ms: Option<f64>,
    tpot_slo_ms: Option<f64>,
) -> PyResult<PyRateSearch> {
    let opts = sim::SearchOptions {
        percentile,
        requests,
        lengths: sim_lengths(isl, osl, length_range),
        arrival: sim_arrival(arrival, burstiness),
        seed,
        rel_tol: tolerance,
        growth: sim::GROWTH,
        hint_rps,
    };
    let cfg = with_slo(config, ttft_slo_ms, tpot_slo_ms);
    let s =
        released(py, || sim::max_rate_within_slo(&cfg, &opts))?.map_err(|e| sim_error(py, e))?;
    let rate = s.rate_rps;
    let result = match s.result {
        Some(r) => Some(Py::new(py, sim_result(py, r, Some(rate), None, seed)?)?),
        None => None,
    };
    Ok(PyRateSearch {
        rate_rps: rate,
        failing_rps: s.failing_rps,
        percentile,
        simulations: s.simulations,
        result,
    })
}
