//! KV-connector rule profiles, keyed by vLLM release.
//!
//! vLLM's prefill/decode rules change between releases, so a profile is one connector's rules
//! over a range of releases: a row of `PROFILES` holds from its `since` release until the next
//! row of the same connector. Every row is proven against vLLM's own code of every release in
//! its range by the golden tests (`golden.rs`, data from `tools/vllm_golden.py`). A new vLLM
//! release that changes nothing is one line in `RELEASES`; one that changes a rule is one row.
//!
//! Keys: every function that takes a connector accepts `"name"` (the newest release pdtp knows)
//! or `"name@X.Y.Z"`. A release newer than the newest known resolves to the newest rules.

mod parallel;
mod version;

#[cfg(test)]
mod golden;

use std::fmt;

pub use parallel::{
    moriio_bind_offset, moriio_dial_offset, moriio_dp_ports_match, nixl_handshake_peers,
    nixl_pp_check,
};
pub use version::Version;

/// Every vLLM release the golden data covers, oldest first; the last is the default.
pub const RELEASES: &[&str] = &[
    "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1", "0.15.0", "0.15.1",
    "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1", "0.20.0", "0.20.1",
    "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0",
    "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0",
];

/// A connector's identity and launch settings (the same in every release).
#[derive(Debug, PartialEq, Eq)]
pub struct Connector {
    /// The name users pass (`connector="moriio"`).
    pub name: &'static str,
    /// vLLM's `kv_connector` class name for `--kv-transfer-config`.
    pub kv_connector: &'static str,
    /// `kv_role` per side: producer/consumer, or `kv_both` on every instance.
    pub prefill_role: &'static str,
    pub decode_role: &'static str,
    /// MoRIIO's transfer mode (`read`/`write`), stated in every launch line.
    pub mode: Option<&'static str>,
    /// The connector whose rows hold this one's rules (`nixl-legacy` reads `nixl`'s).
    pub rows_of: &'static str,
    /// Only releases before this one (`nixl-legacy`: NIXL before prefill TP > decode TP).
    pub before: Option<Version>,
    /// One line for listings and `--help`.
    pub summary: &'static str,
    /// The only GPU vendor the connector's worker starts on (`None`: any). MoRIIO imports
    /// AMD's MoRI (ROCm only); without it `MoRIIOConnectorWorker.__init__` raises
    /// [`MORIIO_UNAVAILABLE`] when the engine starts its workers.
    pub gpu_vendor: Option<&'static str>,
}

/// `MoRIIOConnectorWorker.__init__`'s `RuntimeError` when `mori` cannot be imported (every
/// release 0.14.0-0.33.0: `moriio/moriio_connector.py`, `if not is_moriio_available()`).
pub const MORIIO_UNAVAILABLE: &str = "MoRIIO is not available. Please ensure the 'mori' \
     package is installed and properly configured.";

pub const CONNECTORS: &[Connector] = &[
    Connector {
        name: "moriio",
        kv_connector: "MoRIIOConnector",
        prefill_role: "kv_producer",
        decode_role: "kv_consumer",
        mode: Some("read"),
        rows_of: "moriio",
        before: None,
        summary: "AMD MoRIIO, READ mode (decode ranks read prefill blocks whole)",
        gpu_vendor: Some("AMD"),
    },
    Connector {
        name: "moriio-write",
        kv_connector: "MoRIIOConnector",
        prefill_role: "kv_producer",
        decode_role: "kv_consumer",
        mode: Some("write"),
        rows_of: "moriio-write",
        before: None,
        summary: "AMD MoRIIO, WRITE mode (prefill ranks write into decode ranks; vLLM's default)",
        gpu_vendor: Some("AMD"),
    },
    Connector {
        name: "nixl",
        kv_connector: "NixlConnector",
        prefill_role: "kv_both",
        decode_role: "kv_both",
        mode: None,
        rows_of: "nixl",
        before: None,
        summary: "NVIDIA NIXL (pull): one TP divides the other; heads are re-sliced",
        gpu_vendor: None,
    },
    Connector {
        name: "nixl-legacy",
        kv_connector: "NixlConnector",
        prefill_role: "kv_both",
        decode_role: "kv_both",
        mode: None,
        rows_of: "nixl",
        before: Some(Version::new(0, 14, 0)),
        summary: "NIXL before vLLM 0.14.0: decode TP must be a multiple of prefill TP",
        gpu_vendor: None,
    },
];

/// How NIXL's `tp_ratio` treats the two sizes (the decode side is local).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NixlRatio {
    /// 0.11.0: `_nixl_handshake` computes `D // P` and divides the rank by it
    /// (`ZeroDivisionError` when P > D); `add_remote_agent` then asserts `divide(D, P)`.
    Legacy,
    /// `TpKVTopology.tp_ratio` asserts `D % P == 0` only: P > D fails the same assert.
    DecodeMultiple,
    /// Either side may be larger as long as one divides the other.
    BothWays,
}

/// When `is_kv_replicated` calls the prefill KV cache replicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replicated {
    /// `P // H >= 1`: P ≥ H.
    AtLeastHeads,
    /// `P > H`.
    MoreThanHeads,
}

/// `_validate_remote_agent_handshake`'s bare `assert not (tp_ratio < 0 and is_kv_replicated)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanInReplicated {
    /// Applies to every model.
    AllModels,
    /// 0.20.0: models with Mamba-type layers are exempt (`if not self._has_mamba:`,
    /// `nixl/worker.py:1408`).
    NonHybrid,
    /// 0.21.0 on: MLA models and models with Mamba-type layers are exempt (`if not
    /// self.use_mla and not self._has_mamba:`; 0.33.0 `nixl/base_worker.py:2727`).
    NonMlaNonHybrid,
}

/// The block-length assert for a decode side larger than a head-split prefill side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockLen {
    /// `remote_len == local_len * tp_ratio`: fails when decode ranks hold replicated heads
    /// while prefill ranks split them (P < H < D); the message is vLLM's.
    TpRatio(&'static str),
    /// Compares per-rank head counts: never fails for sizes that load the model.
    PerRankHeads,
}

/// What NIXL does with a pipeline-parallel instance (`--pipeline-parallel-size` > 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NixlPp {
    /// Before 0.26.0: no pipeline handling. Handshake metadata is keyed by TP rank alone, so
    /// the stages of a PP instance overwrite each other's, and a PP decode stage's layer
    /// window is never matched to the prefill's layers. vLLM raises nothing.
    TpRanksOnly,
    /// 0.23.0-0.25.0: as `TpRanksOnly`, and the engine core hands the workers' handshake
    /// metadata, keyed `(pp_rank, tp_rank)`, to the base connector's
    /// `set_xfer_handshake_metadata_pp_aware` (`v1/engine/core.py:186`), which NIXL does not
    /// override until 0.26.0: PP > 1 raises [`NIXL_PP_ENGINE_START`] when the engine starts
    /// (`kv_connector/v1/base.py:655`).
    EngineStartRefuses,
    /// 0.26.0 on: the worker refuses PP > 1 for `kv_role` `kv_consumer` (vLLM's
    /// `NotImplementedError`, the push connector's decode); the pull connector pdtp launches
    /// (`kv_both`) passes, and a decode rank's handshake queries every prefill stage
    /// `(pp_rank, tp_rank)` (`remote_pp_size` from `kv_transfer_params`).
    PushOnly,
}

/// The base connector's `ValueError` for PP > 1 handshake metadata (0.23.0-0.25.0), with
/// NIXL's class name as `type(self).__name__` gives it.
pub const NIXL_PP_ENGINE_START: &str = "NixlConnector received pp_rank > 0 handshake metadata \
     but does not support PP-disaggregated KV transfer.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NixlRules {
    pub ratio: NixlRatio,
    pub replicated: Replicated,
    pub fan_in_replicated: FanInReplicated,
    pub block_len: BlockLen,
    pub pp: NixlPp,
}

/// Which peer rank a MoRIIO rank dials (and reads from / writes to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dial {
    /// Before 0.25.0: rank r dials rank r of the peer, whatever the sizes (no check: a rank
    /// past the peer's size waits forever; unequal head layouts copy the wrong bytes).
    SameRank,
    /// `get_moriio_remote_tp_rank` (0.25.0 on): one rank of the peer, `ValueError` when neither
    /// size is a multiple of the other.
    RemoteTpRank,
}

/// The port offset a MoRIIO rank dials for remote DP rank `k` and remote TP rank `t` (every
/// release binds `get_port_offset(dp_rank, tp_rank)` = `dp_rank + tp_rank`: vLLM omits
/// `tp_size` there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DpDial {
    /// Before 0.27.0: `get_port_offset(k, t)` = `k + t`, as bound.
    AddsRanks,
    /// 0.27.0 on: `get_port_offset(k, t, remote_tp_size)` = `k · remote_tp_size + t`.
    StridesByTp,
}

/// The per-layer check a MoRIIO READ rank runs before reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerCheck {
    /// None (before 0.25.0).
    Nothing,
    /// `validate_moriio_heterogeneous_tp_kv_heads` (`NotImplementedError`).
    ReplicatedHeads,
    /// 0.33.0: the head layouts must hold as many heads per rank (`MoRIIOError`), then the
    /// replicated-heads guard (which equal counts always pass).
    HeadsPerRank,
}

/// Which prefill ranks a MoRIIO READ rank releases once it has read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Only the rank it read: with P > D the other holders keep their blocks until a timeout.
    ReadRank,
    /// Every rank holding its share (`get_moriio_read_holder_tp_ranks`, 0.33.0).
    AllHolders,
}

/// Which prefill DP rank's memory a MoRIIO READ rank reads for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DpRead {
    /// Before 0.27.0: DP rank 0's, whatever rank prefilled it (`_read_blocks` opens
    /// `get_engine_name_with_dp(dst_engine_id, 0)`; 0.26.0 `moriio_connector.py:1983`).
    RankZero,
    /// 0.27.0 on: the request's `remote_dp_rank` (`moriio_connector.py:2221`).
    Routed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoriioReadRules {
    pub dial: Dial,
    pub dp_dial: DpDial,
    pub layer_check: LayerCheck,
    pub release: Release,
    /// Prefill ranks wait for `get_moriio_expected_ack_count` releases (else one).
    pub counted_acks: bool,
    pub dp_read: DpRead,
    /// 0.23.0 on: the producer's scheduler reaps a deferred send with no
    /// `finished_sending` after `kv_connector_extra_config.defer_timeout` (60 s by default,
    /// `MoRIIOConstants.DEFAULT_DEFER_TIMEOUT`) and frees its blocks; before, never.
    pub defer_timeout: bool,
    /// 0.27.0 on: the handshake runs eagerly in the worker's step, and a rank whose handshake
    /// future failed makes every TP rank raise `HandshakeError` (before: the future's
    /// exception is only logged, and the first read raises `KeyError`).
    pub eager_handshake: bool,
    /// 0.27.0 on: a one-rank decode of an MLA model reading a TP > 1, DP 1 prefill
    /// round-robins the prefill rank per request (`_resolve_read_source`, `flexible`).
    pub round_robin_mla: bool,
    /// The round-robin also applies on MoRIIO's `xgmi` backend (0.27.0-0.32.0); from 0.33.0
    /// only on `rdma` (`_spreads_replicated_reads`: `backend != "xgmi"`, 0.33.0
    /// `moriio_connector.py:3384`).
    pub round_robin_on_xgmi: bool,
    /// 0.18.0-0.22.1: the prefill's notify listener takes only messages starting with
    /// `MoRIIOConstants.TRANSFER_PREFIX` (`"tx"`, 0.18.0 `moriio_engine.py:535`), but a READ
    /// decode rank releases with its request id (`_pop_done_transfers` sends the
    /// `_recving_transfers` key, vLLM's `cmpl-…` id): the first release raises `MoRIIOError`
    /// in the listener thread, which exits. No request is ever reported sent.
    pub release_rejected: bool,
}

/// `MoRIIOConstants.DEFAULT_DEFER_TIMEOUT` (0.23.0-0.33.0), in seconds.
pub const MORIIO_DEFER_TIMEOUT_S: i64 = 60;

/// What reaches the user at 0.27.0 on when a MoRIIO handshake future failed.
pub const MORIIO_EAGER_HANDSHAKE_FAILED: &str = "Eager MoRIIO handshake failed for \
     {remote_engine_id} on at least one TP rank; failing this step fast to avoid a TP \
     collective hang";

/// How a MoRIIO WRITE producer maps onto decode ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMapping {
    /// Before 0.33.0: blocks go whole over the dialled session; `write_done` goes to the decode
    /// rank of the producer's own index. Only P == D lines these up.
    SameRank,
    /// `compute_write_tp_mapping` (0.33.0): validated by `validate_write_tp_topology`, heads
    /// re-sliced per target.
    TpMapping,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoriioWriteRules {
    pub dial: Dial,
    pub dp_dial: DpDial,
    pub mapping: WriteMapping,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    Nixl(NixlRules),
    MoriioRead(MoriioReadRules),
    MoriioWrite(MoriioWriteRules),
}

/// One connector's rules from release `since` until the connector's next row.
#[derive(Debug, PartialEq, Eq)]
pub struct ConnectorProfile {
    pub connector: &'static str,
    pub since: Version,
    pub rules: Rules,
}

const fn v(major: u32, minor: u32, patch: u32) -> Version {
    Version::new(major, minor, patch)
}

const BLOCK_LEN_011: &str = "Remote P worker KV layer cache must be of shape [2, N, \
     local_kv_heads*tp_ratio, block_size, head_dim] and same dtype.";
const BLOCK_LEN_014: &str = "Remote P worker KV layer cache must be of shape [2, N, \
     local_kv_heads*tp_ratio, page_size, head_dim] and same dtype.";

/// Every rule change between vLLM 0.11.0 and the newest release, per connector (ascending).
pub static PROFILES: &[ConnectorProfile] = &[
    ConnectorProfile {
        connector: "nixl",
        since: v(0, 11, 0),
        rules: Rules::Nixl(NixlRules {
            ratio: NixlRatio::Legacy,
            replicated: Replicated::AtLeastHeads,
            fan_in_replicated: FanInReplicated::AllModels,
            block_len: BlockLen::TpRatio(BLOCK_LEN_011),
            pp: NixlPp::TpRanksOnly,
        }),
    },
    ConnectorProfile {
        connector: "nixl",
        since: v(0, 11, 1),
        rules: Rules::Nixl(NixlRules {
            ratio: NixlRatio::DecodeMultiple,
            replicated: Replicated::AtLeastHeads,
            fan_in_replicated: FanInReplicated::AllModels,
            block_len: BlockLen::TpRatio(BLOCK_LEN_011),
            pp: NixlPp::TpRanksOnly,
        }),
    },
    ConnectorProfile {
        connector: "nixl",
        since: v(0, 14, 0),
        rules: Rules::Nixl(NixlRules {
            ratio: NixlRatio::BothWays,
            replicated: Replicated::AtLeastHeads,
            fan_in_replicated: FanInReplicated::AllModels,
            block_len: BlockLen::TpRatio(BLOCK_LEN_014),
            pp: NixlPp::TpRanksOnly,
        }),
    },
    ConnectorProfile {
        connector: "nixl",
        since: v(0, 20, 0),
        rules: Rules::Nixl(NixlRules {
            ratio: NixlRatio::BothWays,
            replicated: Replicated::MoreThanHeads,
            fan_in_replicated: FanInReplicated::NonHybrid,
            block_len: BlockLen::TpRatio(BLOCK_LEN_014),
            pp: NixlPp::TpRanksOnly,
        }),
    },
    ConnectorProfile {
        connector: "nixl",
        since: v(0, 21, 0),
        rules: Rules::Nixl(NixlRules {
            ratio: NixlRatio::BothWays,
            replicated: Replicated::MoreThanHeads,
            fan_in_replicated: FanInReplicated::NonMlaNonHybrid,
            block_len: BlockLen::TpRatio(BLOCK_LEN_014),
            pp: NixlPp::TpRanksOnly,
        }),
    },
    ConnectorProfile {
        connector: "nixl",
        since: v(0, 23, 0),
        rules: Rules::Nixl(NixlRules {
            ratio: NixlRatio::BothWays,
            replicated: Replicated::MoreThanHeads,
            fan_in_replicated: FanInReplicated::NonMlaNonHybrid,
            block_len: BlockLen::TpRatio(BLOCK_LEN_014),
            pp: NixlPp::EngineStartRefuses,
        }),
    },
    ConnectorProfile {
        connector: "nixl",
        since: v(0, 24, 0),
        rules: Rules::Nixl(NixlRules {
            ratio: NixlRatio::BothWays,
            replicated: Replicated::MoreThanHeads,
            fan_in_replicated: FanInReplicated::NonMlaNonHybrid,
            block_len: BlockLen::PerRankHeads,
            pp: NixlPp::EngineStartRefuses,
        }),
    },
    ConnectorProfile {
        connector: "nixl",
        since: v(0, 26, 0),
        rules: Rules::Nixl(NixlRules {
            ratio: NixlRatio::BothWays,
            replicated: Replicated::MoreThanHeads,
            fan_in_replicated: FanInReplicated::NonMlaNonHybrid,
            block_len: BlockLen::PerRankHeads,
            pp: NixlPp::PushOnly,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 14, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            dial: Dial::SameRank,
            dp_dial: DpDial::AddsRanks,
            layer_check: LayerCheck::Nothing,
            release: Release::ReadRank,
            counted_acks: false,
            dp_read: DpRead::RankZero,
            defer_timeout: false,
            eager_handshake: false,
            round_robin_mla: false,
            round_robin_on_xgmi: false,
            release_rejected: false,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 18, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            dial: Dial::SameRank,
            dp_dial: DpDial::AddsRanks,
            layer_check: LayerCheck::Nothing,
            release: Release::ReadRank,
            counted_acks: false,
            dp_read: DpRead::RankZero,
            defer_timeout: false,
            eager_handshake: false,
            round_robin_mla: false,
            round_robin_on_xgmi: false,
            release_rejected: true,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 23, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            dial: Dial::SameRank,
            dp_dial: DpDial::AddsRanks,
            layer_check: LayerCheck::Nothing,
            release: Release::ReadRank,
            counted_acks: false,
            dp_read: DpRead::RankZero,
            defer_timeout: true,
            eager_handshake: false,
            round_robin_mla: false,
            round_robin_on_xgmi: false,
            release_rejected: false,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 25, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            dial: Dial::RemoteTpRank,
            dp_dial: DpDial::AddsRanks,
            layer_check: LayerCheck::ReplicatedHeads,
            release: Release::ReadRank,
            counted_acks: true,
            dp_read: DpRead::RankZero,
            defer_timeout: true,
            eager_handshake: false,
            round_robin_mla: false,
            round_robin_on_xgmi: false,
            release_rejected: false,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 27, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            dial: Dial::RemoteTpRank,
            dp_dial: DpDial::StridesByTp,
            layer_check: LayerCheck::ReplicatedHeads,
            release: Release::ReadRank,
            counted_acks: true,
            dp_read: DpRead::Routed,
            defer_timeout: true,
            eager_handshake: true,
            round_robin_mla: true,
            round_robin_on_xgmi: true,
            release_rejected: false,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 33, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            dial: Dial::RemoteTpRank,
            dp_dial: DpDial::StridesByTp,
            layer_check: LayerCheck::HeadsPerRank,
            release: Release::AllHolders,
            counted_acks: true,
            dp_read: DpRead::Routed,
            defer_timeout: true,
            eager_handshake: true,
            round_robin_mla: true,
            round_robin_on_xgmi: false,
            release_rejected: false,
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 14, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::SameRank,
            dp_dial: DpDial::AddsRanks,
            mapping: WriteMapping::SameRank,
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 25, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::RemoteTpRank,
            dp_dial: DpDial::AddsRanks,
            mapping: WriteMapping::SameRank,
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 27, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::RemoteTpRank,
            dp_dial: DpDial::StridesByTp,
            mapping: WriteMapping::SameRank,
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 33, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::RemoteTpRank,
            dp_dial: DpDial::StridesByTp,
            mapping: WriteMapping::TpMapping,
        }),
    },
];

/// A key resolved: the connector, the version asked for and the rules that apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    pub connector: &'static Connector,
    /// The vLLM version asked for (or the default).
    pub version: Version,
    /// The row whose rules apply.
    pub profile: &'static ConnectorProfile,
    /// The release those rules were proven on: `version`, or the newest known release when
    /// `version` is newer than every release pdtp knows.
    pub rules_version: Version,
}

impl Resolved {
    /// `"name@X.Y.Z"`: what `resolve` maps back to this.
    pub fn key(&self) -> String {
        format!("{}@{}", self.connector.name, self.version)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// No connector of that name; lists the names.
    UnknownName(String),
    /// The version is malformed or outside what pdtp covers; says what is covered.
    BadVersion(String),
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::UnknownName(m) | ResolveError::BadVersion(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ResolveError {}

fn release(i: usize) -> Version {
    Version::parse(RELEASES[i]).expect("RELEASES holds valid versions")
}

/// The newest release pdtp knows (the default version).
pub fn newest() -> Version {
    release(RELEASES.len() - 1)
}

pub fn names() -> Vec<&'static str> {
    CONNECTORS.iter().map(|c| c.name).collect()
}

/// The connector called `name` (case-insensitive, `_` and `-` alike).
pub fn connector(name: &str) -> Option<&'static Connector> {
    let key = name.trim().to_ascii_lowercase().replace('_', "-");
    CONNECTORS.iter().find(|c| c.name == key)
}

fn rows(connector: &Connector) -> impl Iterator<Item = &'static ConnectorProfile> + '_ {
    PROFILES
        .iter()
        .filter(move |p| p.connector == connector.rows_of)
}

/// Resolve `"name"` or `"name@X.Y.Z"`.
pub fn resolve(key: &str) -> Result<Resolved, ResolveError> {
    let (name, version) = match key.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (key, None),
    };
    let conn = connector(name).ok_or_else(|| {
        ResolveError::UnknownName(format!(
            "connector must be one of {}, got {name:?}",
            names().join(", ")
        ))
    })?;
    let first = rows(conn).next().expect("every connector has rows").since;
    let known: Vec<Version> = (0..RELEASES.len())
        .map(release)
        .filter(|r| *r >= first && conn.before.is_none_or(|b| *r < b))
        .collect();
    let (oldest, latest) = (known[0], *known.last().expect("a known release"));
    let covered = match conn.before {
        Some(_) => format!("vLLM {oldest} to {latest}"),
        None => format!("vLLM {oldest} to {latest} (newer releases use {latest}'s rules)"),
    };
    let version = match version {
        None => latest,
        Some(text) => Version::parse(text).ok_or_else(|| {
            ResolveError::BadVersion(format!(
                "vllm_version must be a release like \"{latest}\", got {text:?}; \
                 {} covers {covered}",
                conn.name
            ))
        })?,
    };
    if version < oldest {
        return Err(ResolveError::BadVersion(format!(
            "vllm_version={version}: {} is not in vLLM {version}; pdtp covers {covered}",
            conn.name
        )));
    }
    if let Some(before) = conn.before {
        if version >= before {
            return Err(ResolveError::BadVersion(format!(
                "vllm_version={version}: {} is NIXL before vLLM {before} (decode TP a \
                 multiple of prefill TP); for vLLM {version} use connector=\"nixl\"",
                conn.name
            )));
        }
    }
    let rules_version = version.min(newest());
    let profile = rows(conn)
        .filter(|p| p.since <= rules_version)
        .last()
        .expect("version >= the first row");
    Ok(Resolved {
        connector: conn,
        version,
        profile,
        rules_version,
    })
}

/// The rules for a key, or `None` (callers that need the reason use `resolve`).
pub fn profile(key: &str) -> Option<&'static ConnectorProfile> {
    resolve(key).ok().map(|r| r.profile)
}

impl ConnectorProfile {
    /// vLLM's `kv_connector` class of this row's connector.
    pub fn kv_connector(&self) -> &'static str {
        connector(self.connector).map_or("", |c| c.kv_connector)
    }

    /// MoRIIO's replicated-KV-head guard applies (unequal sizes need MLA or min(P, D) >= H).
    pub fn requires_replicated_heads(&self) -> bool {
        matches!(
            self.rules,
            Rules::MoriioRead(MoriioReadRules {
                layer_check: LayerCheck::ReplicatedHeads | LayerCheck::HeadsPerRank,
                ..
            })
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_ascending_and_rows_start_at_releases() {
        let all: Vec<Version> = (0..RELEASES.len()).map(release).collect();
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        for p in PROFILES {
            assert!(all.contains(&p.since), "{} {}", p.connector, p.since);
        }
        for c in CONNECTORS {
            let since: Vec<Version> = rows(c).map(|p| p.since).collect();
            assert!(!since.is_empty() && since.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn keys_resolve() {
        let r = resolve("moriio").unwrap();
        assert_eq!(r.key(), "moriio@0.33.0");
        assert_eq!(r.connector.mode, Some("read"));
        assert_eq!(
            resolve("MoRIIO_write@0.20.0").unwrap().profile.since,
            v(0, 14, 0)
        );
        assert_eq!(resolve("nixl@0.13.0").unwrap().profile.since, v(0, 11, 1));
        assert_eq!(resolve("nixl@0.11.0").unwrap().profile.since, v(0, 11, 0));
        // Not a release pdtp lists, but inside a covered range.
        assert_eq!(resolve("nixl@0.11.3").unwrap().profile.since, v(0, 11, 1));
        // Newer than the newest known: the newest rules, and it says so.
        let r = resolve("nixl@0.40.1").unwrap();
        assert_eq!((r.version, r.rules_version), (v(0, 40, 1), newest()));
        assert_eq!(r.key(), "nixl@0.40.1");
        // nixl-legacy: NIXL before P > D, defaulting to the last such release.
        let r = resolve("nixl-legacy").unwrap();
        assert_eq!(r.version, v(0, 13, 0));
        assert_eq!(r.profile, resolve("nixl@0.13.0").unwrap().profile);
    }

    #[test]
    fn bad_keys_say_what_is_covered() {
        let e = resolve("moriio@0.13.0").unwrap_err().to_string();
        assert!(e.contains("moriio is not in vLLM 0.13.0") && e.contains("0.14.0 to 0.33.0"));
        let e = resolve("nixl@0.9.2").unwrap_err().to_string();
        assert!(e.contains("0.11.0 to 0.33.0"), "{e}");
        let e = resolve("nixl@latest").unwrap_err().to_string();
        assert!(
            e.contains("vllm_version must be a release like \"0.33.0\""),
            "{e}"
        );
        let e = resolve("nixl-legacy@0.20.0").unwrap_err().to_string();
        assert!(e.contains("use connector=\"nixl\""), "{e}");
        assert!(matches!(
            resolve("nix"),
            Err(ResolveError::UnknownName(m)) if m.contains("moriio, moriio-write, nixl, nixl-legacy")
        ));
    }
}
