//! Sweeps: best plans of one scenario over many budgets.

use pyo3::prelude::*;

use super::errors::*;
use super::plan::*;

/// A candidate row of a space sweep: `(role, (tp, pp, dp, ep), gpus, requests_per_s,
/// ttft_s, latency_s, batch, concurrency)`.
pub(super) type SpaceRow = (
    &'static str,
    (i64, i64, i64, bool),
    i64,
    f64,
    f64,
    f64,
    i64,
    i64,
);
/// A space sweep's plan: `(prefill row, prefill instances, decode row, decode instances,
/// gpus_used)`; an aggregated plan has prefill row == decode row.
pub(super) type SpacePlanRow = (usize, i64, usize, i64, i64);

/// Best plans of one (model, GPU type, workload, connector) for many budgets over the space
/// `solve` searches (the scenario's mode and layouts): `(rows, points)`, each point
/// `(best, rule_blind)` as row indices and counts (rule_blind only when the connector's
/// rules cost something). Each budget is full nodes of the type's node size, the last one
/// partial.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub(super) fn sweep_space(
    py: Python<'_>,
    scenario: &PyScenario,
    budgets: Vec<i64>,
) -> PyResult<(
    Vec<SpaceRow>,
    Vec<(Option<SpacePlanRow>, Option<SpacePlanRow>)>,
)> {
    let sc = scenario.inner.clone();
    if sc.models.len() != 1 || sc.gpu_types.len() != 1 {
        return Err(invalid(
            py,
            "a sweep group has one model and one GPU type".into(),
        ));
    }
    let sweep = released(py, move || crate::sweep::sweep_space(&sc, &budgets))?;
    let plan = |p: &crate::sweep::SpacePlan| -> SpacePlanRow {
        (
            p.prefill,
            p.prefill_instances,
            p.decode,
            p.decode_instances,
            p.gpus_used,
        )
    };
    Ok((
        sweep
            .rows
            .iter()
            .map(|r| {
                let o = &r.side;
                (
                    r.role.name(),
                    (r.layout.tp, r.layout.pp, r.layout.dp, r.layout.ep),
                    r.gpus(),
                    o.requests_per_s,
                    o.ttft,
                    o.latency,
                    o.batch,
                    o.concurrency,
                )
            })
            .collect(),
        sweep
            .points
            .iter()
            .map(|p| (p.best.as_ref().map(plan), p.rule_blind.as_ref().map(plan)))
            .collect(),
    ))
}
