//! The one error map: every core error → its class of pdtp's Python exception hierarchy
//! (`pdtp.errors`), raised as that class (imported once, never looked up by a name string at
//! the raise site). Also the two ways of running core code: panics caught, with the GIL
//! held (quick) or released (heavy).

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::prelude::*;
use pyo3::PyTypeInfo;

use crate::check::VllmError;
use crate::connector::ResolveError;
use crate::rules::RuleError;
use crate::sim;

/// `pdtp.errors`' classes, as Rust types (imported from the module on first use).
mod class {
    pyo3::import_exception!(pdtp.errors, PdtpError);
    pyo3::import_exception!(pdtp.errors, InvalidArgumentError);
    pyo3::import_exception!(pdtp.errors, UnknownNameError);
    pyo3::import_exception!(pdtp.errors, UnworkablePairError);
    pyo3::import_exception!(pdtp.errors, RuleValueError);
    pyo3::import_exception!(pdtp.errors, RuleNotImplementedError);
    pyo3::import_exception!(pdtp.errors, RuleAssertionError);
    pyo3::import_exception!(pdtp.errors, RuleZeroDivisionError);
    pyo3::import_exception!(pdtp.errors, RuleRuntimeError);
    pyo3::import_exception!(pdtp.errors, RuleKeyError);
    pyo3::import_exception!(pdtp.errors, RuleConnectorError);
}

fn raise<T: PyTypeInfo>(py: Python<'_>, message: String) -> PyErr {
    PyErr::from_type(T::type_object(py), message)
}

/// A vLLM rule function's error (`src/rules.rs`), as vLLM raises it.
pub(super) fn rule_error(py: Python<'_>, e: RuleError) -> PyErr {
    match e {
        RuleError::Value(m) => raise::<class::RuleValueError>(py, m),
        RuleError::NotImplemented(m) => raise::<class::RuleNotImplementedError>(py, m),
        RuleError::Assertion(m) => raise::<class::RuleAssertionError>(py, m),
    }
}

/// The exception vLLM raises for a violation of kind `kind` (`None`: vLLM raises nothing,
/// the pair cannot work: `UnworkablePairError`).
pub(super) fn vllm_error(py: Python<'_>, kind: VllmError, message: String) -> PyErr {
    match kind {
        VllmError::ValueError => raise::<class::RuleValueError>(py, message),
        VllmError::NotImplementedError => raise::<class::RuleNotImplementedError>(py, message),
        VllmError::AssertionError => raise::<class::RuleAssertionError>(py, message),
        VllmError::ZeroDivisionError => raise::<class::RuleZeroDivisionError>(py, message),
        VllmError::MoRIIOError | VllmError::HandshakeError => {
            raise::<class::RuleConnectorError>(py, message)
        }
        VllmError::RuntimeError => raise::<class::RuleRuntimeError>(py, message),
        VllmError::KeyError => raise::<class::RuleKeyError>(py, message),
        // Another engine's class (SGLang's AttributeError / KVTransferError, NIXL's
        // nixlNotFoundError) has no rule class of its own: the pair cannot work, said with
        // the engine's text.
        VllmError::Other(_) | VllmError::None => raise::<class::UnworkablePairError>(py, message),
    }
}

/// A connector key that does not resolve: an unknown name lists the known ones, a bad
/// version says the form.
pub(super) fn resolve_error(py: Python<'_>, e: ResolveError) -> PyErr {
    match e {
        ResolveError::UnknownName(m) => raise::<class::UnknownNameError>(py, m),
        ResolveError::BadVersion(m) => raise::<class::InvalidArgumentError>(py, m),
    }
}

/// A name pdtp does not know (the message lists the known ones).
pub(super) fn unknown_name(py: Python<'_>, message: String) -> PyErr {
    raise::<class::UnknownNameError>(py, message)
}

/// A simulator error: the input's fault, or (`internal`) pdtp's.
pub(super) fn sim_error(py: Python<'_>, e: sim::SimError) -> PyErr {
    if e.internal {
        raise::<class::PdtpError>(py, e.message)
    } else {
        raise::<class::InvalidArgumentError>(py, e.message)
    }
}

/// An argument outside its allowed values (the message names the field and the values).
pub(super) fn invalid(py: Python<'_>, message: String) -> PyErr {
    raise::<class::InvalidArgumentError>(py, message)
}

/// A bug in pdtp that must still reach the user as a `PdtpError` (`message` says so).
pub(super) fn bug(py: Python<'_>, message: String) -> PyErr {
    raise::<class::PdtpError>(py, message)
}

/// A Rust panic must never reach Python as `PanicException`: it becomes a `PdtpError`
/// that says it is a bug.
pub(super) fn internal(py: Python<'_>) -> PyErr {
    bug(
        py,
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
