//! Connectors per vLLM release: resolving keys, their facts and MoRIIO's port offsets.

use pyo3::prelude::*;

use crate::check;
use crate::connector::{self, ConnectorProfile};

use super::check::*;
use super::errors::*;

/// `"name"` or `"name@X.Y.Z"` → the resolved connector, or pdtp's error naming what is valid.
pub(super) fn resolved(py: Python<'_>, key: &str) -> PyResult<connector::Resolved> {
    connector::resolve(key).map_err(|e| resolve_error(py, e))
}

pub(super) fn profile(py: Python<'_>, key: &str) -> PyResult<&'static ConnectorProfile> {
    resolved(py, key).map(|r| r.profile)
}

/// The connector's refusal of a GPU vendor (`AMD`/`NVIDIA`), or `None`.
#[pyfunction]
pub(super) fn connector_gpu_violation(
    py: Python<'_>,
    connector: &str,
    vendor: &str,
) -> PyResult<Option<ViolationTuple>> {
    let prof = profile(py, connector)?;
    let conn = crate::connector::connector(prof.connector)
        .ok_or_else(|| invalid(py, format!("unknown connector {connector:?}")))?;
    Ok(check::gpu_violation(conn, vendor).map(violation_tuple))
}

/// MoRIIO's port offsets for rank (`dp_rank`, `tp_rank`) of an instance of TP `tp` under a
/// connector key (`"moriio@X.Y.Z"`): `(bound, dialed)` — the offset the rank binds from
/// `handshake_port` and the one a peer dials to reach it, as that release's code derives them
/// (`connector::parallel`, proven by the layout golden data). `None` for NIXL.
#[pyfunction]
pub(super) fn moriio_port_offsets(
    py: Python<'_>,
    connector: &str,
    dp_rank: i64,
    tp_rank: i64,
    tp: i64,
) -> PyResult<Option<(i64, i64)>> {
    let prof = profile(py, connector)?;
    if !(0..1 << 20).contains(&dp_rank)
        || !(1..=1 << 20).contains(&tp)
        || !(0..tp).contains(&tp_rank)
    {
        return Err(invalid(
            py,
            format!("need 0 <= dp_rank, 0 <= tp_rank < tp <= 2^20; got dp_rank={dp_rank}, tp_rank={tp_rank}, tp={tp}"),
        ));
    }
    let Some((_, dp_dial)) = prof.rules.moriio_dials() else {
        return Ok(None);
    };
    let bound = connector::moriio_bind_offset(dp_rank, tp_rank);
    // A peer of the same TP size reaches rank t of remote DP rank k (SameRank: no TP remap).
    let dialed =
        connector::moriio_dial_offset(connector::Dial::SameRank, dp_dial, dp_rank, tp, tp_rank, tp)
            .map_err(|e| invalid(py, e.message().to_string()))?;
    Ok(Some((bound, dialed)))
}

// ---- connector profiles per vLLM release ------------------------------------------------

/// A connector resolved at one vLLM version (what `resolve_connector` returns).
#[pyclass(frozen, get_all, module = "pdtp._core")]
pub(super) struct ConnectorInfo {
    name: &'static str,
    vllm_version: String,
    rules_version: String,
    key: String,
    kv_connector: &'static str,
    prefill_role: &'static str,
    decode_role: &'static str,
    mode: Option<&'static str>,
    requires_replicated_heads: bool,
    summary: &'static str,
}

/// Resolve `"name"` or `"name@X.Y.Z"`; unknown names and versions raise pdtp's errors.
#[pyfunction]
pub(super) fn resolve_connector(py: Python<'_>, key: &str) -> PyResult<ConnectorInfo> {
    let r = resolved(py, key)?;
    Ok(ConnectorInfo {
        name: r.connector.name,
        vllm_version: r.version.to_string(),
        rules_version: r.rules_version.to_string(),
        key: r.key(),
        kv_connector: r.connector.kv_connector,
        prefill_role: r.connector.prefill_role,
        decode_role: r.connector.decode_role,
        mode: r.connector.mode,
        requires_replicated_heads: r.profile.requires_replicated_heads(),
        summary: r.connector.summary,
    })
}

/// Every connector name, in listing order.
#[pyfunction]
pub(super) fn connector_names() -> Vec<&'static str> {
    connector::names()
}

/// Every vLLM release the golden data covers, oldest first.
#[pyfunction]
pub(super) fn vllm_releases() -> Vec<&'static str> {
    connector::RELEASES.to_vec()
}
