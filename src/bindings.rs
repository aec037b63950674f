//! The thin PyO3 layer: converts types, releases the GIL around heavy work and maps core
//! errors onto pdtp's Python exception hierarchy (`pdtp.errors`). No rule logic lives here.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use crate::check::{self, Shape, VllmError};
use crate::connector::{self, ConnectorProfile};
use crate::rules::{self, RuleError};
use crate::transfer;

/// Raise `pdtp.errors.<class_name>(message)`.
fn pdtp_error(py: Python<'_>, class_name: &str, message: String) -> PyErr {
    let class = py
        .import("pdtp.errors")
        .and_then(|m| m.getattr(class_name))
        .and_then(|c| c.downcast_into::<PyType>().map_err(PyErr::from));
    match class {
        Ok(cls) => PyErr::from_type(cls, message),
        Err(e) => e,
    }
}

fn rule_error(py: Python<'_>, e: RuleError) -> PyErr {
    match e {
        RuleError::Value(m) => pdtp_error(py, "RuleValueError", m),
        RuleError::NotImplemented(m) => pdtp_error(py, "RuleNotImplementedError", m),
    }
}

/// Run core code so that a Rust panic can never reach Python as `PanicException`: it
/// becomes a `PdtpError` that says it is a bug.
fn shielded<T>(py: Python<'_>, f: impl FnOnce() -> T) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|_| {
        pdtp_error(
            py,
            "PdtpError",
            "internal error in pdtp's Rust core (please report)".into(),
        )
    })
}

fn profile(py: Python<'_>, name: &str) -> PyResult<&'static ConnectorProfile> {
    connector::profile(name).ok_or_else(|| {
        pdtp_error(
            py,
            "UnknownNameError",
            format!(
                "connector must be one of {}, got {name:?}",
                connector::names().join(", ")
            ),
        )
    })
}

#[pyfunction]
fn remote_tp_rank(
    py: Python<'_>,
    local_tp_rank: i64,
    local_tp_size: i64,
    remote_tp_size: i64,
) -> PyResult<i64> {
    shielded(py, || {
        rules::remote_tp_rank(local_tp_rank, local_tp_size, remote_tp_size)
    })?
    .map_err(|e| rule_error(py, e))
}

#[pyfunction]
fn validate_kv_heads(
    py: Python<'_>,
    local_tp_size: i64,
    remote_tp_size: i64,
    total_num_kv_heads: i64,
    is_mla: bool,
) -> PyResult<()> {
    shielded(py, || {
        rules::validate_kv_heads(local_tp_size, remote_tp_size, total_num_kv_heads, is_mla)
    })?
    .map_err(|e| rule_error(py, e))
}

#[pyfunction]
fn expected_ack_count(
    py: Python<'_>,
    producer_tp_size: i64,
    consumer_tp_size: i64,
) -> PyResult<i64> {
    shielded(py, || {
        rules::expected_ack_count(producer_tp_size, consumer_tp_size)
    })?
    .map_err(|e| rule_error(py, e))
}

type ViolationTuple = (&'static str, &'static str, String, String, &'static str);

fn violation_tuple(v: check::Violation) -> ViolationTuple {
    (v.code, v.side, v.message, v.hint, v.error.name())
}

/// `(violations, warnings)` for one pair; violations as
/// `(code, side, message, hint, vllm_error)`, warnings as `(code, message)`.
#[pyfunction]
#[pyo3(signature = (num_attention_heads, num_kv_heads, is_mla, prefill_tp, decode_tp, connector, max_acks=None))]
#[allow(clippy::type_complexity)]
fn check_pair(
    py: Python<'_>,
    num_attention_heads: i64,
    num_kv_heads: i64,
    is_mla: bool,
    prefill_tp: i64,
    decode_tp: i64,
    connector: &str,
    max_acks: Option<i64>,
) -> PyResult<(Vec<ViolationTuple>, Vec<(&'static str, String)>)> {
    let prof = profile(py, connector)?;
    let shape = Shape {
        num_attention_heads,
        num_kv_heads,
        is_mla,
    };
    let report = shielded(py, || {
        check::check_pair(&shape, prefill_tp, decode_tp, prof, max_acks)
    })?;
    Ok((
        report.violations.into_iter().map(violation_tuple).collect(),
        report
            .warnings
            .into_iter()
            .map(|w| (w.code, w.message))
            .collect(),
    ))
}

#[pyfunction]
#[pyo3(signature = (num_attention_heads, num_kv_heads, is_mla, prefill_tp, decode_tp, connector, max_acks, prefill_sizes, decode_sizes, limit))]
fn alternatives(
    py: Python<'_>,
    num_attention_heads: i64,
    num_kv_heads: i64,
    is_mla: bool,
    prefill_tp: i64,
    decode_tp: i64,
    connector: &str,
    max_acks: Option<i64>,
    prefill_sizes: Vec<i64>,
    decode_sizes: Vec<i64>,
    limit: usize,
) -> PyResult<Vec<(i64, i64)>> {
    let prof = profile(py, connector)?;
    let shape = Shape {
        num_attention_heads,
        num_kv_heads,
        is_mla,
    };
    py.allow_threads(|| {
        catch_unwind(AssertUnwindSafe(|| {
            check::alternatives(
                &shape,
                prefill_tp,
                decode_tp,
                prof,
                max_acks,
                &prefill_sizes,
                &decode_sizes,
                limit,
            )
        }))
    })
    .map_err(|_| {
        pdtp_error(
            py,
            "PdtpError",
            "internal error in pdtp's Rust core (please report)".into(),
        )
    })
}

#[pyfunction]
fn loadable_sizes(
    py: Python<'_>,
    num_attention_heads: i64,
    num_kv_heads: i64,
    is_mla: bool,
    bound: i64,
) -> PyResult<Vec<i64>> {
    let shape = Shape {
        num_attention_heads,
        num_kv_heads,
        is_mla,
    };
    shielded(py, || check::loadable_sizes(&shape, bound))
}

type DecodeRow = (i64, Vec<i64>, Vec<(i64, Vec<i64>)>);
type PrefillRow = (i64, Vec<i64>, Vec<i64>, i64);

/// `(decode_rows, prefill_rows)`; raises vLLM's error for an invalid pair.
#[pyfunction]
fn transfer_map(
    py: Python<'_>,
    prefill_tp: i64,
    decode_tp: i64,
    kv_heads: i64,
    is_mla: bool,
    connector: &str,
) -> PyResult<(Vec<DecodeRow>, Vec<PrefillRow>)> {
    let prof = profile(py, connector)?;
    if prefill_tp > transfer::MAX_MAP_TP || decode_tp > transfer::MAX_MAP_TP {
        return Err(PyValueError::new_err(format!(
            "transfer_map lays out at most {} ranks per side",
            transfer::MAX_MAP_TP
        )));
    }
    let result = py
        .allow_threads(|| {
            catch_unwind(AssertUnwindSafe(|| {
                transfer::transfer_map(prefill_tp, decode_tp, kv_heads, is_mla, prof)
            }))
        })
        .map_err(|_| {
            pdtp_error(
                py,
                "PdtpError",
                "internal error in pdtp's Rust core (please report)".into(),
            )
        })?;
    match result {
        Ok(m) => Ok((
            m.decode
                .into_iter()
                .map(|r| (r.rank, r.heads, r.sources))
                .collect(),
            m.prefill
                .into_iter()
                .map(|r| (r.rank, r.heads, r.readers, r.expected_acks))
                .collect(),
        )),
        Err(v) => {
            let class = match v.error {
                VllmError::ValueError => "RuleValueError",
                VllmError::NotImplementedError => "RuleNotImplementedError",
                VllmError::AssertionError => "RuleAssertionError",
                VllmError::None => "InvalidArgumentError",
            };
            Err(pdtp_error(py, class, v.message))
        }
    }
}

/// Every connector profile as a dict (the data behind `connector=`).
#[pyfunction]
fn connectors(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    connector::PROFILES
        .iter()
        .map(|p| {
            let d = PyDict::new(py);
            d.set_item("name", p.name)?;
            d.set_item("kv_connector", p.kv_connector)?;
            d.set_item("prefill_role", p.prefill_role)?;
            d.set_item("decode_role", p.decode_role)?;
            d.set_item("requires_replicated_heads", p.requires_replicated_heads)?;
            d.set_item("summary", p.summary)?;
            Ok(d)
        })
        .collect()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(remote_tp_rank, m)?)?;
    m.add_function(wrap_pyfunction!(validate_kv_heads, m)?)?;
    m.add_function(wrap_pyfunction!(expected_ack_count, m)?)?;
    m.add_function(wrap_pyfunction!(check_pair, m)?)?;
    m.add_function(wrap_pyfunction!(alternatives, m)?)?;
    m.add_function(wrap_pyfunction!(loadable_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(transfer_map, m)?)?;
    m.add_function(wrap_pyfunction!(connectors, m)?)?;
    m.add("MAX_MAP_TP", transfer::MAX_MAP_TP)?;
    Ok(())
}
