//! The transfer map: which prefill ranks each decode rank reads.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::check::VllmError;

use crate::transfer;

use super::connector::*;
use super::errors::*;

pub(super) type DecodeRow = (i64, Vec<i64>, Vec<(i64, Vec<i64>)>, Vec<i64>, Vec<i64>);
pub(super) type PrefillRow = (i64, Vec<i64>, Vec<i64>, Vec<i64>, i64);

/// `(decode_rows, prefill_rows)`; raises vLLM's error for an invalid pair. `hybrid` and
/// `sliding_window`: the model's Mamba-type and sliding-window layers (`check::Shape`).
#[pyfunction]
#[pyo3(signature = (prefill_tp, decode_tp, kv_heads, is_mla, connector, hybrid=false, sliding_window=false))]
#[allow(clippy::too_many_arguments)]
pub(super) fn transfer_map(
    py: Python<'_>,
    prefill_tp: i64,
    decode_tp: i64,
    kv_heads: i64,
    is_mla: bool,
    connector: &str,
    hybrid: bool,
    sliding_window: bool,
) -> PyResult<(Vec<DecodeRow>, Vec<PrefillRow>)> {
    let prof = profile(py, connector)?;
    if prefill_tp > transfer::MAX_MAP_TP || decode_tp > transfer::MAX_MAP_TP {
        return Err(PyValueError::new_err(format!(
            "transfer_map lays out at most {} ranks per side",
            transfer::MAX_MAP_TP
        )));
    }
    let result = released(py, || {
        transfer::transfer_map_of(
            prefill_tp,
            decode_tp,
            kv_heads,
            is_mla,
            (hybrid, sliding_window),
            prof,
        )
    })?;
    match result {
        Ok(m) => Ok((
            m.decode
                .into_iter()
                .map(|r| (r.rank, r.heads, r.sources, r.releases, r.rotates))
                .collect(),
            m.prefill
                .into_iter()
                .map(|r| (r.rank, r.heads, r.readers, r.released_by, r.expected_acks))
                .collect(),
        )),
        Err(v) => {
            // vLLM's text; where it has none (a bare assert) or names no cause, the hint.
            let message = match v.error {
                _ if v.message.is_empty() => v.hint,
                VllmError::ZeroDivisionError => format!("{} ({})", v.message, v.hint),
                _ => v.message,
            };
            Err(vllm_error(py, v.error, message))
        }
    }
}
