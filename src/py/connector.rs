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
    let conn = resolved(py, connector)?.connector;
    Ok(check::gpu_violation(conn, vendor).map(violation_tuple))
}

/// The two instances' page size and KV-cache dtype (`(prefill, decode)`, `None`: the
/// engine's default) under a connector key: its violation, or `None`; an engine whose rules
/// for them pdtp does not model refuses unequal settings (`InvalidArgumentError`).
#[pyfunction]
pub(super) fn connector_kv_settings_violation(
    py: Python<'_>,
    connector: &str,
    page: (Option<i64>, Option<i64>),
    dtype: (Option<String>, Option<String>),
) -> PyResult<Option<ViolationTuple>> {
    let r = resolved(py, connector)?;
    r.profile
        .rules
        .kv_settings_violation(
            r.connector.engine,
            page,
            (dtype.0.as_deref(), dtype.1.as_deref()),
        )
        .map(|v| v.map(violation_tuple))
        .map_err(|m| invalid(py, m))
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
    prof.rules
        .port_offsets(dp_rank, tp_rank, tp)
        .transpose()
        .map_err(|e| invalid(py, e.message().to_string()))
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
    engine: &'static str,
    engine_label: &'static str,
    aliases: Vec<&'static str>,
    gpu_vendor: Option<&'static str>,
    mixes_vendor: Option<&'static str>,
    default_for: Vec<&'static str>,
    /// The engine's rules take TP sizes only: what they mean (`None`: layouts are checked).
    tp_only: Option<&'static str>,
}

/// Resolve `"name"` or `"name@X.Y.Z"`; unknown names and versions raise pdtp's errors.
#[pyfunction]
pub(super) fn resolve_connector(py: Python<'_>, key: &str) -> PyResult<ConnectorInfo> {
    let r = resolved(py, key)?;
    Ok(ConnectorInfo {
        name: r.connector.name,
        vllm_version: r.connector.engine.text(r.version),
        rules_version: r.connector.engine.text(r.rules_version),
        key: r.key(),
        kv_connector: r.connector.kv_connector,
        prefill_role: r.connector.prefill_role,
        decode_role: r.connector.decode_role,
        mode: r.connector.mode,
        requires_replicated_heads: r.profile.requires_replicated_heads(),
        summary: r.connector.summary,
        engine: r.connector.engine.name(),
        engine_label: r.connector.engine.label(),
        aliases: r.connector.aliases.to_vec(),
        gpu_vendor: r.connector.gpu_vendor,
        mixes_vendor: r.connector.mixes_vendor,
        default_for: r.connector.default_for.to_vec(),
        tp_only: r.connector.engine.tp_only(),
    })
}

/// Add a connector for the rest of the process (`connector::register`); a bad field raises
/// `InvalidArgumentError` naming it.
#[pyfunction]
#[pyo3(signature = (name, kv_connector, prefill_role, decode_role, rules_of, summary, gpu_vendor=None, mixes_vendor=None, mode=None, aliases=Vec::new()))]
#[allow(clippy::too_many_arguments)]
pub(super) fn register_connector(
    py: Python<'_>,
    name: String,
    kv_connector: String,
    prefill_role: String,
    decode_role: String,
    rules_of: String,
    summary: String,
    gpu_vendor: Option<String>,
    mixes_vendor: Option<String>,
    mode: Option<String>,
    aliases: Vec<String>,
) -> PyResult<()> {
    let spec = connector::ConnectorSpec {
        name,
        aliases,
        kv_connector,
        prefill_role,
        decode_role,
        mode,
        rules_of,
        summary,
        gpu_vendor,
        mixes_vendor,
    };
    connector::register(&spec)
        .map(|_| ())
        .map_err(|m| invalid(py, m))
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
