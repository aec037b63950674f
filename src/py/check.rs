//! vLLM's heterogeneous-TP pair rules: rule functions, pair checks and alternatives.

use pyo3::prelude::*;

use crate::check::{self, Shape};

use crate::rules;

use super::connector::*;
use super::errors::*;

#[pyfunction]
pub(super) fn remote_tp_rank(
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
pub(super) fn validate_kv_heads(
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
pub(super) fn expected_ack_count(
    py: Python<'_>,
    producer_tp_size: i64,
    consumer_tp_size: i64,
) -> PyResult<i64> {
    shielded(py, || {
        rules::expected_ack_count(producer_tp_size, consumer_tp_size)
    })?
    .map_err(|e| rule_error(py, e))
}

/// `(code, side, message, hint, vllm_error, when, user_error, user_message, consequence)`:
/// what reaches the user is `user_error`/`user_message` (vLLM's raised exception unless the
/// connector only logs it), at `when` (`Stage::name`).
pub(super) type ViolationTuple = (
    &'static str,
    &'static str,
    String,
    String,
    &'static str,
    &'static str,
    &'static str,
    String,
    &'static str,
);
/// `(code, message, consequence)`.
pub(super) type WarningTuple = (&'static str, String, &'static str);

pub(super) fn violation_tuple(v: check::Violation) -> ViolationTuple {
    let (user_error, user_message) = v.user_error();
    let (user_error, user_message) = (user_error.name(), user_message.to_string());
    (
        v.code,
        v.side,
        v.message,
        v.hint,
        v.error.name(),
        v.when.name(),
        user_error,
        user_message,
        v.consequence,
    )
}

pub(super) fn warning_tuple(w: check::Warning) -> WarningTuple {
    (w.code, w.message, w.consequence)
}

#[pyfunction]
#[pyo3(signature = (num_attention_heads, num_kv_heads, is_mla, prefill_tp, decode_tp, connector, max_acks, prefill_sizes, decode_sizes, limit, hybrid=false, sliding_window=false))]
#[allow(clippy::too_many_arguments)]
pub(super) fn alternatives(
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
    hybrid: bool,
    sliding_window: bool,
) -> PyResult<Vec<(i64, i64)>> {
    let prof = profile(py, connector)?;
    let shape = Shape {
        num_attention_heads,
        num_kv_heads,
        is_mla,
        hybrid,
        sliding_window,
        mamba_groups: None,
    };
    released(py, || {
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
    })
}
