//! The thin PyO3 layer: converts types, releases the GIL around heavy work and maps core
//! errors onto pdtp's Python exception hierarchy (`pdtp.errors`). No rule logic lives here.

mod check;
mod connector;
mod convert;
mod errors;
mod layout;
mod perf;
mod plan;
mod sglang;
mod sim;
mod sweep;
mod transfer;

use pyo3::prelude::*;

use check::*;
use connector::*;
use layout::*;
use perf::*;
use plan::*;
use sglang::*;
use sim::*;
use sweep::*;
use transfer::*;

use crate::perf::Constants;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(remote_tp_rank, m)?)?;
    m.add_function(wrap_pyfunction!(validate_kv_heads, m)?)?;
    m.add_function(wrap_pyfunction!(expected_ack_count, m)?)?;
    m.add_function(wrap_pyfunction!(connector_gpu_violation, m)?)?;
    m.add_function(wrap_pyfunction!(connector_kv_settings_violation, m)?)?;
    m.add_function(wrap_pyfunction!(alternatives, m)?)?;
    m.add_function(wrap_pyfunction!(transfer_map, m)?)?;
    m.add_function(wrap_pyfunction!(sliding_window_rule, m)?)?;
    m.add_function(wrap_pyfunction!(sliding_window_blocks, m)?)?;
    m.add_class::<ConnectorInfo>()?;
    m.add_function(wrap_pyfunction!(resolve_connector, m)?)?;
    m.add_function(wrap_pyfunction!(register_connector, m)?)?;
    m.add_function(wrap_pyfunction!(connector_names, m)?)?;
    m.add_function(wrap_pyfunction!(vllm_releases, m)?)?;
    m.add_function(wrap_pyfunction!(sglang_releases, m)?)?;
    m.add_function(wrap_pyfunction!(sglang_connector_names, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_sglang_connector, m)?)?;
    m.add_function(wrap_pyfunction!(sglang_check_pair, m)?)?;
    m.add_function(wrap_pyfunction!(parse_layout, m)?)?;
    m.add_function(wrap_pyfunction!(stage_layers, m)?)?;
    m.add_function(wrap_pyfunction!(check_layouts, m)?)?;
    m.add_function(wrap_pyfunction!(layout_load_violations, m)?)?;
    m.add_function(wrap_pyfunction!(layouts_load, m)?)?;
    m.add_function(wrap_pyfunction!(moriio_port_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(side_option, m)?)?;
    m.add_function(wrap_pyfunction!(layout_option, m)?)?;
    m.add_function(wrap_pyfunction!(candidates, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_space, m)?)?;
    m.add_class::<PyModelSpec>()?;
    m.add_class::<PyGpuType>()?;
    m.add_class::<PyScenario>()?;
    m.add_class::<PyCandidates>()?;
    m.add_class::<PyRow>()?;
    m.add_class::<PyPair>()?;
    m.add_class::<PyChoice>()?;
    m.add_class::<PyStage>()?;
    m.add_class::<PyPattern>()?;
    m.add_class::<PyPlaced>()?;
    m.add_function(wrap_pyfunction!(pack, m)?)?;
    m.add_class::<PyMoves>()?;
    m.add_function(wrap_pyfunction!(step_time, m)?)?;
    m.add_function(wrap_pyfunction!(predict_serving, m)?)?;
    m.add_function(wrap_pyfunction!(layout_sides, m)?)?;
    m.add_function(wrap_pyfunction!(fit_constants, m)?)?;
    m.add_function(wrap_pyfunction!(predict_points, m)?)?;
    m.add_class::<ServingPoint>()?;
    m.add_function(wrap_pyfunction!(predict_disaggregated, m)?)?;
    m.add_class::<DisaggregatedPoint>()?;
    m.add_function(wrap_pyfunction!(collective_links, m)?)?;
    m.add("CONSTANT_FIELDS", Constants::FIELDS.to_vec())?;
    m.add_class::<ModelInputs>()?;
    m.add_class::<GpuInputs>()?;
    m.add_class::<ConstantInputs>()?;
    // simulator
    m.add_class::<PySimConfig>()?;
    m.add_class::<PySimPool>()?;
    m.add_class::<PySimTrace>()?;
    m.add_class::<PySimResult>()?;
    m.add_class::<PyPercentiles>()?;
    m.add_class::<PySideStats>()?;
    m.add_class::<PyRateSearch>()?;
    m.add_function(wrap_pyfunction!(parse_trace, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(max_rate_within_slo, m)?)?;
    m.add("SIM_MAX_REQUESTS", crate::sim::MAX_REQUESTS)?;
    m.add("SIM_MAX_OUTPUT_TOKENS", crate::sim::MAX_OUTPUT_TOKENS)?;
    m.add("SIM_MAX_TRACE_BYTES", crate::sim::trace::MAX_TRACE_BYTES)?;
    m.add("MAX_MAP_TP", crate::transfer::MAX_MAP_TP)?;
    m.add("CAPACITY_SCALE", crate::plan::CAPACITY_SCALE)?;
    Ok(())
}
