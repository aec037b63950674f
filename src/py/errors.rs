//! Core errors → pdtp's Python exception hierarchy (`pdtp.errors`), and the two ways of
//! running core code: panics caught, with the GIL held (quick) or released (heavy).

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::rules::RuleError;
use crate::sim;

/// Raise `pdtp.errors.<class_name>(message)`.
pub(super) fn pdtp_error(py: Python<'_>, class_name: &str, message: String) -> PyErr {
    let class = py
        .import("pdtp.errors")
        .and_then(|m| m.getattr(class_name))
        .and_then(|c| c.downcast_into::<PyType>().map_err(PyErr::from));
    match class {
        Ok(cls) => PyErr::from_type(cls, message),
        Err(e) => e,
    }
}

pub(super) fn rule_error(py: Python<'_>, e: RuleError) -> PyErr {
    match e {
        RuleError::Value(m) => pdtp_error(py, "RuleValueError", m),
        RuleError::NotImplemented(m) => pdtp_error(py, "RuleNotImplementedError", m),
        RuleError::Assertion(m) => pdtp_error(py, "RuleAssertionError", m),
    }
}

/// A Rust panic must never reach Python as `PanicException`: it becomes a `PdtpError`
/// that says it is a bug.
pub(super) fn internal(py: Python<'_>) -> PyErr {
    pdtp_error(
        py,
        "PdtpError",
        "internal error in pdtp's Rust core (please report)".into(),
    )
}

/// Run quick core code with panics caught (the GIL stays held: it is microseconds).
pub(super) fn shielded<T>(py: Python<'_>, f: impl FnOnce() -> T) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|_| internal(py))
}

/// Run heavy core code with the GIL released (other Python threads keep running) and
/// panics caught.
pub(super) fn released<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> PyResult<T> {
    py.allow_threads(|| catch_unwind(AssertUnwindSafe(f)))
        .map_err(|_| internal(py))
}

pub(super) fn invalid(py: Python<'_>, message: String) -> PyErr {
    pdtp_error(py, "InvalidArgumentError", message)
}

pub(super) fn sim_error(py: Python<'_>, e: sim::SimError) -> PyErr {
    let class = if e.internal {
        "PdtpError"
    } else {
        "InvalidArgumentError"
    };
    pdtp_error(py, class, e.message)
}
