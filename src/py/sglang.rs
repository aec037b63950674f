//! SGLang's transfer backends: resolving `sglang-<backend>@<release>` keys and pair verdicts.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::connector::sglang::{self, SglangResolved, Verdict};
use crate::connector::sglang_state::{state_verdict, StateKind};

use super::errors::*;

fn resolved(py: Python<'_>, key: &str) -> PyResult<SglangResolved> {
    sglang::resolve_sglang(key).map_err(|e| {
        let name = key.split('@').next().unwrap_or("");
        if sglang::backend(name).is_none() {
            unknown_name(py, e.0)
        } else {
            invalid(py, e.0)
        }
    })
}

/// Every SGLang release pdtp's golden data covers, oldest first.
#[pyfunction]
pub(super) fn sglang_releases() -> Vec<&'static str> {
    sglang::SGLANG_RELEASES.to_vec()
}

#[pyfunction]
pub(super) fn sglang_connector_names() -> Vec<&'static str> {
    sglang::sglang_names()
}

/// `"sglang-nixl"` or `"sglang-nixl@0.5.9"` → `(name, sglang_version, rules_version, key,
/// transfer_backend, gpu_vendor, summary, rules_since)`.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub(super) fn resolve_sglang_connector(
    py: Python<'_>,
    key: &str,
) -> PyResult<(
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    String,
    String,
)> {
    let r = resolved(py, key)?;
    Ok((
        r.backend.name().to_string(),
        sglang::release_text(r.version),
        sglang::release_text(r.rules_version),
        r.key(),
        r.backend.flag().to_string(),
        r.backend.gpu_vendor().map(str::to_string),
        r.backend.summary().to_string(),
        r.profile.since.to_string(),
    ))
}

/// What SGLang does with a pair: prefill attention TP `prefill` → decode attention TP
/// `decode`, for a model of `num_kv_heads` KV heads (MLA or not) and PP sizes, whose state
/// beside the full layers' KV is `state` (`"swa"`, `"mamba"`, `"dsa"`). A dict: `verdict`
/// (`ok`, `raises`, `hangs`, `corrupts`) and its details.
#[pyfunction]
#[pyo3(signature = (key, num_kv_heads, is_mla, prefill, decode, prefill_pp=1, decode_pp=1, state=Vec::new()))]
#[allow(clippy::too_many_arguments)]
pub(super) fn sglang_check_pair<'py>(
    py: Python<'py>,
    key: &str,
    num_kv_heads: i64,
    is_mla: bool,
    prefill: i64,
    decode: i64,
    prefill_pp: i64,
    decode_pp: i64,
    state: Vec<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let r = resolved(py, key)?;
    let mut kinds = Vec::new();
    for name in &state {
        let kind = StateKind::ALL
            .into_iter()
            .find(|k| k.key() == name.as_str());
        match kind {
            Some(k) => kinds.push(k),
            None => {
                return Err(invalid(
                    py,
                    format!(
                        "state must name kinds among {}, got {name:?}",
                        StateKind::ALL.map(|k| format!("{:?}", k.key())).join(", ")
                    ),
                ))
            }
        }
    }
    for (name, v) in [
        ("num_kv_heads", num_kv_heads),
        ("prefill", prefill),
        ("decode", decode),
        ("prefill_pp", prefill_pp),
        ("decode_pp", decode_pp),
    ] {
        if !(1..=4096).contains(&v) {
            return Err(invalid(
                py,
                format!("{name} must be between 1 and 4096, got {v}"),
            ));
        }
    }
    let rules = r.profile.rules;
    let verdict = py.allow_threads(|| {
        match sglang::pair_verdict(
            &rules,
            num_kv_heads,
            is_mla,
            prefill,
            decode,
            prefill_pp,
            decode_pp,
        ) {
            // The state moves with a request's last chunk, after its KV.
            Verdict::Ok => {
                state_verdict(&rules.state, &kinds, prefill, decode).unwrap_or(Verdict::Ok)
            }
            other => other,
        }
    });
    let out = PyDict::new(py);
    out.set_item("key", r.key())?;
    match verdict {
        Verdict::Ok => out.set_item("verdict", "ok")?,
        Verdict::Raises {
            error,
            message,
            surfaces,
        } => {
            out.set_item("verdict", "raises")?;
            out.set_item("error", error)?;
            out.set_item("message", message)?;
            out.set_item("surfaces", surfaces)?;
        }
        Verdict::Hangs {
            until_timeout,
            idle_prefill,
        } => {
            out.set_item("verdict", "hangs")?;
            out.set_item("until_timeout", until_timeout)?;
            out.set_item("idle_prefill", idle_prefill)?;
        }
        Verdict::Corrupts(detail) => {
            out.set_item("verdict", "corrupts")?;
            out.set_item("message", detail)?;
        }
    }
    Ok(out)
}
