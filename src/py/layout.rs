//! Layouts: parsing, pipeline stages and vLLM's layout rules.

use pyo3::prelude::*;

use crate::layout::Layout;
use crate::layout_rules;

use super::check::*;
use super::connector::*;
use super::convert::*;
use super::errors::*;

// ---- layouts: parsing and vLLM's layout rules ----------------------------------------------

/// `(tp, pp, dp, ep)` of a layout string (`tp2dp4ep`, `tp8pp2`, `tp2·dp4·ep`); an
/// `InvalidArgumentError` naming the form otherwise.
#[pyfunction]
pub(super) fn parse_layout(py: Python<'_>, text: &str) -> PyResult<LayoutTuple> {
    Layout::parse(text)
        .map(|l| (l.tp, l.pp, l.dp, l.ep))
        .map_err(|e| invalid(py, e))
}

/// The `(first, end)` layers of each of `pp` pipeline stages (vLLM's `get_pp_indices`).
#[pyfunction]
pub(super) fn stage_layers(py: Python<'_>, pp: i64, num_layers: i64) -> PyResult<Vec<(i64, i64)>> {
    if !(1..=crate::layout::MAX_DIM).contains(&pp) || !(0..=1 << 20).contains(&num_layers) {
        return Err(invalid(
            py,
            format!(
                "pp must be in [1, {}] and num_layers in [0, 2^20]",
                crate::layout::MAX_DIM
            ),
        ));
    }
    let l = Layout {
        pp,
        ..Layout::tp(1)
    };
    shielded(py, || l.stage_layers(num_layers))
}

/// `(violations, warnings)` of a (prefill layout, decode layout) pair, as `check_pair`.
#[pyfunction]
#[pyo3(signature = (model, prefill, decode, connector, max_acks=None))]
#[allow(clippy::type_complexity)]
pub(super) fn check_layouts(
    py: Python<'_>,
    model: LayoutModelTuple,
    prefill: LayoutTuple,
    decode: LayoutTuple,
    connector: &str,
    max_acks: Option<i64>,
) -> PyResult<(Vec<ViolationTuple>, Vec<WarningTuple>)> {
    let prof = profile(py, connector)?;
    let (m, p, d) = (layout_model(model), layout(prefill), layout(decode));
    let report = shielded(py, || layout_rules::pair_report(&m, &p, &d, prof, max_acks))?;
    Ok((
        report.violations.into_iter().map(violation_tuple).collect(),
        report.warnings.into_iter().map(warning_tuple).collect(),
    ))
}

/// The load violations of one instance's layout (`side`: prefill, decode or aggregated).
#[pyfunction]
pub(super) fn layout_load_violations(
    py: Python<'_>,
    model: LayoutModelTuple,
    layout_: LayoutTuple,
    side: SideArg,
    connector: &str,
) -> PyResult<Vec<ViolationTuple>> {
    let prof = profile(py, connector)?;
    let side = side.0.name();
    let (m, l) = (layout_model(model), layout(layout_));
    let v = shielded(py, || layout_rules::load_violations(&m, &l, side, prof))?;
    Ok(v.into_iter().map(violation_tuple).collect())
}

/// Whether one instance of each layout loads the model (vLLM's load rules: heads and KV
/// heads by TP, pipeline support and depth, experts for expert parallel).
#[pyfunction]
pub(super) fn layouts_load(
    py: Python<'_>,
    model: LayoutModelTuple,
    layouts: Vec<LayoutTuple>,
) -> PyResult<Vec<bool>> {
    let m = layout_model(model);
    shielded(py, || {
        layouts
            .into_iter()
            .map(|l| layout_rules::loads(&m, &layout(l)))
            .collect()
    })
}
