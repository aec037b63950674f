//! KV-connector rule profiles (rules.md §5). Each connector is one row of data: adding a
//! connector is adding one `ConnectorProfile` to `PROFILES`, nothing else.

/// How a connector constrains the pair's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeRule {
    /// MoRIIO: `get_moriio_remote_tp_rank` on the decode side (local = decode, remote =
    /// prefill): the larger size must be a multiple of the smaller.
    MoriioMultiple,
    /// Current NIXL: one size divides the other, either side may be larger.
    NixlDivisible,
    /// NIXL before both directions were supported: decode ≥ prefill and D % P == 0.
    NixlDecodeAtLeastPrefill,
}

/// How a decode rank gathers its KV heads from prefill ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadRule {
    /// Whole blocks from exactly one prefill rank (`remote_tp_rank`); heads never re-sliced.
    OneRankWholeBlocks,
    /// Re-sliced heads: one prefill rank (`rank * P / D`) when D ≥ P or MLA, else the P/D
    /// ranks of its group, deduplicated where they hold the same replicated heads.
    ResliceHeads,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectorProfile {
    /// The name users pass (`connector="moriio"`).
    pub name: &'static str,
    /// vLLM's `kv_connector` class name for `--kv-transfer-config`.
    pub kv_connector: &'static str,
    pub size_rule: SizeRule,
    pub read_rule: ReadRule,
    /// MoRIIO's KV-head guard: unequal sizes only with MLA or min(P, D) ≥ H.
    pub requires_replicated_heads: bool,
    /// Prefill ranks that no decode rank reads still hold blocks until a timeout (MoRIIO
    /// READ mode, P > D): worth a warning.
    pub unread_ranks_hold_blocks: bool,
    /// `kv_role` per side: producer/consumer, or `kv_both` on every instance.
    pub prefill_role: &'static str,
    pub decode_role: &'static str,
    /// One line for listings and `--help`.
    pub summary: &'static str,
}

pub const PROFILES: &[ConnectorProfile] = &[
    ConnectorProfile {
        name: "moriio",
        kv_connector: "MoRIIOConnector",
        size_rule: SizeRule::MoriioMultiple,
        read_rule: ReadRule::OneRankWholeBlocks,
        requires_replicated_heads: true,
        unread_ranks_hold_blocks: true,
        prefill_role: "kv_producer",
        decode_role: "kv_consumer",
        summary:
            "AMD MoRIIO: one TP divides the other; unequal TP needs MLA or min(P, D) >= KV heads",
    },
    ConnectorProfile {
        name: "nixl",
        kv_connector: "NixlConnector",
        size_rule: SizeRule::NixlDivisible,
        read_rule: ReadRule::ResliceHeads,
        requires_replicated_heads: false,
        unread_ranks_hold_blocks: false,
        prefill_role: "kv_both",
        decode_role: "kv_both",
        summary: "NVIDIA NIXL (current vLLM): one TP divides the other; heads are re-sliced",
    },
    ConnectorProfile {
        name: "nixl-legacy",
        kv_connector: "NixlConnector",
        size_rule: SizeRule::NixlDecodeAtLeastPrefill,
        read_rule: ReadRule::ResliceHeads,
        requires_replicated_heads: false,
        unread_ranks_hold_blocks: false,
        prefill_role: "kv_both",
        decode_role: "kv_both",
        summary: "NIXL in older vLLM: decode TP must be a multiple of prefill TP (D >= P)",
    },
];

/// Look a profile up by name (case-insensitive, `_` and `-` alike).
pub fn profile(name: &str) -> Option<&'static ConnectorProfile> {
    let key = name.trim().to_ascii_lowercase().replace('_', "-");
    PROFILES.iter().find(|p| p.name == key)
}

pub fn names() -> Vec<&'static str> {
    PROFILES.iter().map(|p| p.name).collect()
}
