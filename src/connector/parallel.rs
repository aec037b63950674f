//! What the P/D connectors do with data-parallel and pipeline-parallel instances, per release.
//!
//! These are connector facts only (ports MoRIIO binds and dials per DP rank, NIXL's pipeline
//! checks and the stages its handshake queries); which layouts pdtp accepts is decided from
//! them elsewhere. Each function restates vLLM's code for the profile row it is given and is
//! compared with that code, release by release, by the layout golden test (`golden.rs`, part
//! `layout` of `tests/data/golden/index.json`).

use super::{Dial, DpDial, NixlPp, Rules};
use crate::rules::{self, RuleError};

/// The offset from `handshake_port` a MoRIIO rank binds its side channel on. Every release
/// binds `get_port_offset(dp_rank, tp_rank)` = `dp_rank + tp_rank`: with DP > 1 and TP > 1
/// two ranks of one host bind the same offset (DP 0 TP 1 and DP 1 TP 0).
pub fn moriio_bind_offset(dp_rank: i64, tp_rank: i64) -> i64 {
    dp_rank.saturating_add(tp_rank)
}

/// The offset from the peer's `handshake_port` a MoRIIO rank (`rank` of `local_tp`) dials to
/// reach remote DP rank `remote_dp_rank` of an instance of TP `remote_tp`: the remote TP rank
/// it pairs with (`dial`), placed by `dp_dial`. Errors are vLLM's own (`ValueError` from
/// `get_moriio_remote_tp_rank` when the sizes do not divide).
pub fn moriio_dial_offset(
    dial: Dial,
    dp_dial: DpDial,
    remote_dp_rank: i64,
    local_tp: i64,
    rank: i64,
    remote_tp: i64,
) -> Result<i64, RuleError> {
    let tp_rank = match dial {
        Dial::SameRank => rank,
        Dial::RemoteTpRank => rules::remote_tp_rank(rank, local_tp, remote_tp)?,
    };
    Ok(match dp_dial {
        DpDial::AddsRanks => remote_dp_rank.saturating_add(tp_rank),
        DpDial::StridesByTp => remote_dp_rank
            .saturating_mul(remote_tp)
            .saturating_add(tp_rank),
    })
}

/// Whether every rank of a MoRIIO peer with `dp` DP ranks of TP `tp` is dialed on the port it
/// binds, each on a port of its own: the dial for (DP rank k, TP rank t) reaches the rank that
/// bound that offset and no two ranks bind one offset. Holds for DP 1 or TP 1 only, in every
/// release (0.27.0 on the dial strides by TP, but the bind still adds the ranks).
pub fn moriio_dp_ports_match(dp_dial: DpDial, dp: i64, tp: i64) -> bool {
    let mut bound = std::collections::BTreeSet::new();
    for k in 0..dp.max(0) {
        for t in 0..tp.max(0) {
            let dialed = match dp_dial {
                DpDial::AddsRanks => k.saturating_add(t),
                DpDial::StridesByTp => k.saturating_mul(tp).saturating_add(t),
            };
            let at = moriio_bind_offset(k, t);
            if dialed != at || !bound.insert(at) {
                return false;
            }
        }
    }
    true
}

/// NIXL worker's start-up check of the pipeline size for a `kv_role`: 0.26.0 on, a consumer
/// (decode) instance with PP > 1 raises vLLM's `NotImplementedError`; before, nothing.
pub fn nixl_pp_check(pp: NixlPp, kv_role: &str, pp_size: i64) -> Result<(), RuleError> {
    match pp {
        NixlPp::PushOnly if kv_role == "kv_consumer" && pp_size > 1 => {
            Err(RuleError::NotImplemented(
                "NixlPushConnector consumer (decode) does not support pipeline_parallel_size > 1."
                    .into(),
            ))
        }
        _ => Ok(()),
    }
}

/// The (PP rank, TP rank) agents a NIXL decode rank's handshake queries on a prefill of
/// `remote_pp` stages (same TP): `None` where the release's handshake takes no pipeline size
/// (before 0.26.0, `remote_pp` > 1): it queries TP ranks only and the stages' metadata collide.
pub fn nixl_handshake_peers(pp: NixlPp, tp_rank: i64, remote_pp: i64) -> Option<Vec<(i64, i64)>> {
    match pp {
        NixlPp::TpRanksOnly | NixlPp::EngineStartRefuses if remote_pp > 1 => None,
        NixlPp::TpRanksOnly | NixlPp::EngineStartRefuses => Some(vec![(0, tp_rank)]),
        NixlPp::PushOnly => Some((0..remote_pp.max(1)).map(|s| (s, tp_rank)).collect()),
    }
}

impl Rules {
    /// MoRIIO's (dial, DP dial) in this row (`None` for NIXL and SGLang).
    pub fn moriio_dials(&self) -> Option<(Dial, DpDial)> {
        match self {
            Rules::MoriioRead(r) => Some((r.dial, r.dp_dial)),
            Rules::MoriioWrite(r) => Some((r.dial, r.dp_dial)),
            Rules::Nixl(_) | Rules::Sglang(_) => None,
        }
    }

    /// `(bound, dialed)`: the offset from the handshake port rank (`dp_rank`, `tp_rank`) of
    /// an instance of TP `tp` binds, and the one a peer of the same TP size dials to reach
    /// it, in this row (`None`: the connector derives no per-rank ports, as NIXL).
    pub fn port_offsets(
        &self,
        dp_rank: i64,
        tp_rank: i64,
        tp: i64,
    ) -> Option<Result<(i64, i64), RuleError>> {
        let (_, dp_dial) = self.moriio_dials()?;
        let bound = moriio_bind_offset(dp_rank, tp_rank);
        // A peer of the same TP size reaches rank t of remote DP rank k (no TP remap).
        Some(
            moriio_dial_offset(Dial::SameRank, dp_dial, dp_rank, tp, tp_rank, tp)
                .map(|dialed| (bound, dialed)),
        )
    }

    /// NIXL's pipeline handling in this row (`None` for MoRIIO).
    pub fn nixl_pp(&self) -> Option<NixlPp> {
        match self {
            Rules::Nixl(r) => Some(r.pp),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dp_ports_match_only_without_dp_or_tp() {
        for dial in [DpDial::AddsRanks, DpDial::StridesByTp] {
            assert!(moriio_dp_ports_match(dial, 1, 8));
            assert!(moriio_dp_ports_match(dial, 8, 1));
            assert!(!moriio_dp_ports_match(dial, 2, 2));
        }
    }

    #[test]
    fn port_offsets_follow_the_row() {
        let at = |key: &str| crate::connector::profile(key).unwrap().rules;
        // Bound dp + tp in every release; dialed dp·tp + t from 0.27.0.
        assert_eq!(at("moriio@0.26.0").port_offsets(1, 1, 2), Some(Ok((2, 2))));
        assert_eq!(at("moriio@0.27.0").port_offsets(1, 1, 2), Some(Ok((2, 3))));
        assert_eq!(at("nixl").port_offsets(1, 1, 2), None);
    }
}
