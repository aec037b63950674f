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

/// The rule by which connector `connector` moves a request's blocks for a model's
/// sliding-window layers (`"every"`, `"last_window"`), or `None` where pdtp's flow data does
/// not compare it (`transfer::TransferMap::sliding_window_blocks`).
#[pyfunction]
pub(super) fn sliding_window_rule(
    py: Python<'_>,
    connector: &str,
) -> PyResult<Option<&'static str>> {
    use crate::connector::SlidingBlocks;
    Ok(profile(py, connector)?
        .rules
        .sliding_window_blocks()
        .map(|rule| match rule {
            SlidingBlocks::Every => "every",
            SlidingBlocks::LastWindow => "last_window",
        }))
}

/// The blocks of a `request_blocks`-block request that rule `rule` (`sliding_window_rule`)
/// moves for a sliding-window layer of `window_tokens` tokens in `block_size`-token blocks.
#[pyfunction]
pub(super) fn sliding_window_blocks(
    rule: &str,
    window_tokens: i64,
    block_size: i64,
    request_blocks: i64,
) -> PyResult<i64> {
    use crate::connector::SlidingBlocks;
    let rule = match rule {
        "every" => SlidingBlocks::Every,
        "last_window" => SlidingBlocks::LastWindow,
        other => {
            return Err(PyValueError::new_err(format!(
                "sliding-window rule {other:?}: expected \"every\" or \"last_window\""
            )))
        }
    };
    if window_tokens < 1 || block_size < 1 || request_blocks < 0 {
        return Err(PyValueError::new_err(
            "window_tokens and block_size must be >= 1, request_blocks >= 0",
        ));
    }
    Ok(rule.blocks(window_tokens, block_size, request_blocks))
}
