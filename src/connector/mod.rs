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
pub mod sglang;
pub mod sglang_flow;
pub mod sglang_state;
mod version;

#[cfg(test)]
mod golden;
#[cfg(test)]
mod nixl_flow;
#[cfg(test)]
mod sglang_check;
#[cfg(test)]
mod sglang_golden;

use std::fmt;
use std::sync::{OnceLock, RwLock};

use crate::check::{self, Flow, Shape, Stage, Violation, VllmError};

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

/// The serving engine a connector runs in: it numbers the releases a connector's rules are
/// keyed by. A new engine is a variant here with its release list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Vllm,
    /// SGLang: its transfer backends' rules are [`sglang::SglangRules`] rows, its releases
    /// carry `.postN` (`0.5.10.post1`).
    Sglang,
}

impl Engine {
    /// Every release of the engine the golden data covers, oldest first.
    pub fn releases(self) -> &'static [&'static str] {
        match self {
            Engine::Vllm => RELEASES,
            Engine::Sglang => sglang::SGLANG_RELEASES,
        }
    }

    /// The engine's name in pdtp's data (`"vllm"`).
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
        }
    }

    /// How messages name the engine (`vLLM 0.33.0`).
    pub fn label(self) -> &'static str {
        match self {
            Engine::Vllm => "vLLM",
            Engine::Sglang => "SGLang",
        }
    }

    /// The argument that pins a release (`vllm_version`).
    pub fn version_field(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm_version",
            Engine::Sglang => "sglang_version",
        }
    }

    /// Where the engine's pair rules take TP sizes only, not layouts: what the sizes mean and
    /// what checks the rest (`None`: layouts with DP/EP/PP are checked).
    pub fn tp_only(self) -> Option<&'static str> {
        match self {
            Engine::Vllm => None,
            Engine::Sglang => Some(
                "attention TP: TP / DP with --enable-dp-attention; for DP attention use \
                 pdtp.deployment.connectors.sglang.check_sglang_pair",
            ),
        }
    }

    /// The engine's default page size and KV-cache dtype where pdtp models its rules for
    /// them (SGLang: `--page-size 1`, `--kv-cache-dtype auto`); `None`: not modeled.
    pub fn kv_defaults(self) -> Option<(i64, &'static str)> {
        match self {
            Engine::Vllm => None,
            Engine::Sglang => Some((sglang::DEFAULT_PAGE_SIZE, sglang::DEFAULT_KV_CACHE_DTYPE)),
        }
    }

    /// A release of the engine from its text (`0.33.0`; SGLang's `0.5.10.post1`).
    pub fn parse(self, text: &str) -> Option<Version> {
        match self {
            Engine::Vllm => Version::parse(text),
            Engine::Sglang => sglang::parse_release(text),
        }
    }

    /// A release as the engine writes it (`0.5.10.post1`, not `0.5.10.1`).
    pub fn text(self, v: Version) -> String {
        match self {
            Engine::Vllm => v.to_string(),
            Engine::Sglang => sglang::release_text(v),
        }
    }

    fn release(self, i: usize) -> Version {
        self.parse(self.releases()[i])
            .expect("release lists hold valid versions")
    }

    /// The newest release pdtp knows of the engine (its connectors' default version).
    pub fn newest(self) -> Version {
        self.release(self.releases().len() - 1)
    }
}

/// Exception classes engines raise beyond the ones [`VllmError`] names (`VllmError::Other`
/// holds the index): SGLang's own, and NIXL's as SGLang's backends meet them.
pub const ENGINE_ERRORS: &[&str] = &["AttributeError", "KVTransferError", "nixlNotFoundError"];

/// One KV connector, everything pdtp knows of it outside its rules: identity, engine, the
/// vendors it runs on and pairs, its launch settings. Its rules per release are the
/// [`PROFILES`] rows named `rows_of`. Planners, checks and bindings ask this object; nothing
/// matches on a connector's name. A new connector is one entry in [`CONNECTORS`] (plus its
/// rows, or `rows_of` an existing connector's).
#[derive(Debug, PartialEq, Eq)]
pub struct Connector {
    /// The name users pass (`connector="moriio"`).
    pub name: &'static str,
    /// Other names that resolve to this connector (matched like the name).
    pub aliases: &'static [&'static str],
    /// The serving engine whose releases key the rules.
    pub engine: Engine,
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
    /// The vendor whose GPU types the connector may pair with each other (prefill on one
    /// type, decode on another); `None`: the same GPU type on both sides only. No connector
    /// crosses vendors.
    pub mixes_vendor: Option<&'static str>,
    /// The GPU vendors on which pdtp picks this connector when none is named.
    pub default_for: &'static [&'static str],
}

impl Connector {
    /// The `kv_role` of an instance of `side` (`"prefill"`, else decode's).
    pub fn role(&self, side: &str) -> &'static str {
        if side == "prefill" {
            self.prefill_role
        } else {
            self.decode_role
        }
    }

    /// Whether the connector's worker starts on GPUs of `vendor` (`AMD`/`NVIDIA`);
    /// `check::gpu_violation` says why not.
    pub fn runs_on(&self, vendor: &str) -> bool {
        self.gpu_vendor
            .is_none_or(|v| v.eq_ignore_ascii_case(vendor))
    }

    /// Why the connector's worker does not start on GPUs of `vendor` (`AMD`/`NVIDIA`), in its
    /// engine's words: vLLM's MoRIIO raises [`MORIIO_UNAVAILABLE`] when the engine starts its
    /// workers (`mori` is ROCm only); SGLang's MORI backend fails its import. `None`: it runs.
    pub fn gpu_violation(&self, vendor: &str) -> Option<Violation> {
        let needs = self.gpu_vendor?;
        if needs.eq_ignore_ascii_case(vendor) {
            return None;
        }
        let (message, hint) = match self.engine {
            Engine::Vllm => (
                MORIIO_UNAVAILABLE.to_string(),
                format!(
                    "{} runs only on {needs} GPUs: vLLM's MoRIIO worker imports AMD's MoRI \
                     (ROCm), which a {vendor} GPU has no build of, and fails when the engine \
                     starts its workers. On {vendor} GPUs use connector=\"nixl\"",
                    self.name
                ),
            ),
            Engine::Sglang => sglang_flow::gpu_refusal(self.name, needs, vendor),
        };
        Some(Violation::new(
            "connector_needs_amd_gpu",
            "pair",
            message,
            hint,
            VllmError::RuntimeError,
            Stage::EngineStart,
        ))
    }

    /// Whether `key` (lower case, `-` for `_`) names this connector.
    fn called(&self, key: &str) -> bool {
        self.name == key || self.aliases.contains(&key)
    }
}

/// `MoRIIOConnectorWorker.__init__`'s `RuntimeError` when `mori` cannot be imported (every
/// release 0.14.0-0.33.0: `moriio/moriio_connector.py`, `if not is_moriio_available()`).
pub const MORIIO_UNAVAILABLE: &str = "MoRIIO is not available. Please ensure the 'mori' \
     package is installed and properly configured.";

pub const CONNECTORS: &[Connector] = &[
    Connector {
        name: "moriio",
        aliases: &[],
        engine: Engine::Vllm,
        kv_connector: "MoRIIOConnector",
        prefill_role: "kv_producer",
        decode_role: "kv_consumer",
        mode: Some("read"),
        rows_of: "moriio",
        before: None,
        summary: "AMD MoRIIO, READ mode (decode ranks read prefill blocks whole)",
        gpu_vendor: Some("AMD"),
        mixes_vendor: Some("AMD"),
        default_for: &["AMD"],
    },
    Connector {
        name: "moriio-write",
        aliases: &[],
        engine: Engine::Vllm,
        kv_connector: "MoRIIOConnector",
        prefill_role: "kv_producer",
        decode_role: "kv_consumer",
        mode: Some("write"),
        rows_of: "moriio-write",
        before: None,
        summary: "AMD MoRIIO, WRITE mode (prefill ranks write into decode ranks; vLLM's default)",
        gpu_vendor: Some("AMD"),
        mixes_vendor: Some("AMD"),
        default_for: &[],
    },
    Connector {
        name: "nixl",
        aliases: &[],
        engine: Engine::Vllm,
        kv_connector: "NixlConnector",
        prefill_role: "kv_both",
        decode_role: "kv_both",
        mode: None,
        rows_of: "nixl",
        before: None,
        summary: "NVIDIA NIXL (pull): one TP divides the other; heads are re-sliced",
        gpu_vendor: None,
        mixes_vendor: Some("NVIDIA"),
        default_for: &["NVIDIA"],
    },
    Connector {
        name: "nixl-legacy",
        aliases: &[],
        engine: Engine::Vllm,
        kv_connector: "NixlConnector",
        prefill_role: "kv_both",
        decode_role: "kv_both",
        mode: None,
        rows_of: "nixl",
        before: Some(Version::new(0, 14, 0)),
        summary: "NIXL before vLLM 0.14.0: decode TP must be a multiple of prefill TP",
        gpu_vendor: None,
        mixes_vendor: Some("NVIDIA"),
        default_for: &[],
    },
    // SGLang: `kv_connector` is the backend's KV manager class (`--disaggregation-transfer-
    // backend mooncake`), the roles its `--disaggregation-mode`; the rules are SGLang's rows.
    Connector {
        name: sglang::Backend::Mooncake.name(),
        aliases: &[],
        engine: Engine::Sglang,
        kv_connector: "MooncakeKVManager",
        prefill_role: "prefill",
        decode_role: "decode",
        mode: None,
        rows_of: sglang::Backend::Mooncake.name(),
        before: None,
        summary: sglang::Backend::Mooncake.summary(),
        gpu_vendor: None,
        mixes_vendor: None,
        default_for: &[],
    },
    // SGLang: `kv_connector` is the backend's KV manager class (`--disaggregation-transfer-
    // backend nixl`), the roles its `--disaggregation-mode`; the rules are SGLang's rows.
    Connector {
        name: sglang::Backend::Nixl.name(),
        aliases: &[],
        engine: Engine::Sglang,
        kv_connector: "NixlKVManager",
        prefill_role: "prefill",
        decode_role: "decode",
        mode: None,
        rows_of: sglang::Backend::Nixl.name(),
        before: None,
        summary: sglang::Backend::Nixl.summary(),
        gpu_vendor: None,
        mixes_vendor: None,
        default_for: &[],
    },
    // SGLang: `kv_connector` is the backend's KV manager class (`--disaggregation-transfer-
    // backend mori`), the roles its `--disaggregation-mode`; the rules are SGLang's rows.
    Connector {
        name: sglang::Backend::Mori.name(),
        aliases: &[],
        engine: Engine::Sglang,
        kv_connector: "MoriKVManager",
        prefill_role: "prefill",
        decode_role: "decode",
        mode: None,
        rows_of: sglang::Backend::Mori.name(),
        before: None,
        summary: sglang::Backend::Mori.summary(),
        gpu_vendor: sglang::Backend::Mori.gpu_vendor(),
        mixes_vendor: None,
        default_for: &[],
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

/// What becomes of a request whose NIXL handshake raised. The handshake runs in a background
/// thread (`_background_nixl_handshake`): its exception is only logged, and the future's
/// callbacks decide what the request meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NixlHandshakeFailure {
    /// 0.11.0: `request_ready` queues the request as ready whatever the future holds (0.11.0
    /// `nixl_connector.py:729`); `start_load_kv` reads it with no remote agent registered and
    /// raises `KeyError` (the remote engine id) in the decode worker at the first transfer.
    ReadsWithoutAgent,
    /// 0.11.1-0.16.x: the request is queued as failed (`_failed_recv_reqs`, 0.12.0
    /// `nixl_connector.py:1129`) and reported received with its blocks invalid; the scheduler
    /// recomputes them (0.11.1-0.12.0 `_handle_invalid_blocks`; `kv_load_failure_policy`
    /// default `recompute` 0.13.0-0.16.x): the decode prefills every prompt itself.
    Recomputed,
    /// 0.17.0 on: as `Recomputed`, but `kv_load_failure_policy` defaults to `fail`
    /// (`vllm/config/kv_transfer.py`): every request finishes with an error.
    RequestFails,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NixlRules {
    pub ratio: NixlRatio,
    pub replicated: Replicated,
    pub fan_in_replicated: FanInReplicated,
    pub block_len: BlockLen,
    pub pp: NixlPp,
    pub handshake_failure: NixlHandshakeFailure,
    /// 0.18.0-0.19.x: a model with Mamba-type layers needs equal TP sizes (`if
    /// self._has_mamba: assert tp_ratio == 1, "Mamba does not support heterogeneous TP
    /// yet"`, 0.18.0 `nixl_connector.py:2042`, after the replicated fan-in assert).
    pub mamba_same_tp: bool,
    /// 0.20.0 on: the block-length assert skips models with Mamba-type layers (their
    /// block_len is padded to the Mamba page: `if not self._has_mamba:`, 0.20.0
    /// `nixl/worker.py:1494`).
    pub mamba_skips_block_len: bool,
    /// 0.20.0 on: a model with Mamba-type layers reads every prefill rank of its group when
    /// prefill TP > decode TP, not only those holding distinct KV heads: each holds its own
    /// shard of the Mamba state (`target_remote_ranks` returns `remote_all_source_ranks`,
    /// 0.20.0 `kv_connector/utils.py:630`; `ssm_ranks`, 0.33.0 `nixl/tp_mapping.py:135`).
    /// The ranks whose KV heads another rank of the group already sent move Mamba state only.
    pub mamba_reads_every_rank: bool,
    /// Which blocks of a sliding-window group a read moves: all of them before 0.18.0 (no
    /// hybrid KV-cache manager: every layer is full attention, and the worker's per-layer
    /// window is Llama 4's chunked layers only, 0.17.0 `nixl_connector.py:1460`); from
    /// 0.18.0 the last `cdiv(sliding_window, block_size) + 1`, as both schedulers clip them
    /// (`blocks_per_sw`, 0.18.0 `nixl_connector.py:606`; `get_sw_clipped_blocks` in
    /// `request_finished` and `update_state_after_alloc`; 0.27.0 on
    /// `get_exchange_clipped_blocks`, 0.33.0 `nixl/base_scheduler.py:151`).
    pub sliding_blocks: SlidingBlocks,
    /// 0.20.0 on: the worker moves a hybrid model's Mamba conv state by sub-projection and
    /// asserts the DS conv-state layout at start (`assert is_conv_state_dim_first(), …`,
    /// 0.20.0 `nixl/worker.py:154`, 0.33.0 `nixl/base_worker.py:705`); vLLM's default is SD
    /// (`get_conv_state_layout`, 0.20.0 `model_executor/layers/mamba/mamba_utils.py:27`),
    /// so without `VLLM_SSM_CONV_STATE_LAYOUT=DS` the engine does not start. The assert's
    /// text.
    pub mamba_conv_layout: Option<&'static str>,
    /// Whether vLLM's hybrid KV-cache manager is on at engine start with NIXL, which a
    /// model with Mamba-type layers needs (`tools/vllm_flow_nixl.py`
    /// `hybrid_kv_cache_manager` runs the release's `VllmConfig.__post_init__`).
    pub hybrid_kv_manager: NixlHma,
}

/// The hybrid KV-cache manager with `--kv-transfer-config` naming NixlConnector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NixlHma {
    /// 0.11.0-0.17.x: off, whatever the flags (the config turns it off for any connector,
    /// 0.17.1 `vllm/config/vllm.py:1184`; kept on with `--no-disable-hybrid-kv-cache-manager`
    /// from 0.13.0 the factory refuses NixlConnector, no `SupportsHMA`, 0.17.1
    /// `kv_connector/factory.py:58`). The engine core unifies the KV-cache specs when it
    /// sizes the cache (`get_kv_cache_groups`, 0.17.1 `vllm/v1/core/kv_cache_utils.py:1231`),
    /// before any worker's `register_kv_caches` (0.17.1 `vllm/v1/engine/core.py:263`
    /// `get_kv_cache_configs`, then `:279` `initialize_from_config`), so no Mamba cache view
    /// reaches the connector and no transfer runs; a Mamba spec does not unify: the text
    /// `unify_hybrid_kv_cache_specs` raises (`ValueError`, 0.17.1 `kv_cache_utils.py:1211`).
    Off(&'static str),
    /// 0.18.0-0.21.x: NixlConnector is `SupportsHMA`, but the config still turns the
    /// manager off for any `--kv-transfer-config` unless `--no-disable-hybrid-kv-cache-manager`
    /// is given (0.18.0 `vllm/config/vllm.py:1163-1167`): without it a Mamba model fails at
    /// engine start (this text) and sliding-window layers become full attention (every block
    /// moves). pdtp deploy passes the flag; the check warns (`needs_setting`).
    OffUnlessFlag(&'static str),
    /// 0.22.0 on: kept on for a connector that supports it (0.22.0 `vllm/config/vllm.py:1440`,
    /// `supports_hma`; 0.23.0 on `KVConnectorFactory.supports_hma_config`).
    On,
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

/// What a MoRIIO engine does with a model that has Mamba-type layers (recurrent state beside
/// the KV cache), per release and mode (`tools/vllm_flow.py`'s hybrid vectors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoriioHybrid {
    /// 0.14.0-0.29.0: MoRIIOConnector is no `SupportsHMA`, so vLLM turns the hybrid KV-cache
    /// manager off (`vllm/config/vllm.py`) and the engine start fails unifying the Mamba
    /// specs with the attention ones (in the engine core, before any worker registers a
    /// cache): `ValueError` with the release's text, raised by `unify_hybrid_kv_cache_specs`
    /// ([`MORIIO_HYBRID_CORE`], 0.25.0 `vllm/v1/core/kv_cache_utils.py:1493`) or, 0.27.0 on,
    /// by the `_promote_local_kv_cache_specs` it calls, which promotes only sliding-window
    /// and chunked-local specs ([`MORIIO_HYBRID_CORE_027`]).
    CoreRefuses(&'static str),
    /// The connector refuses the Mamba group when the engine starts: its scheduler (0.30.0)
    /// or, 0.31.0-0.32.0 WRITE, each worker's `register_kv_caches`.
    ConnectorRefuses(VllmError, &'static str),
    /// The schedulers start with the Mamba groups (0.31.0 on READ, 0.33.0 WRITE), then each
    /// worker's `register_kv_caches` refuses the conv state in vLLM's default layout: the
    /// MoRIIO Mamba read needs the dim-first layout, and `get_conv_state_layout` returns
    /// `"SD"` unless `VLLM_SSM_CONV_STATE_LAYOUT` is set (0.31.0
    /// `vllm/model_executor/layers/mamba/mamba_utils.py:45`): `MoRIIOError`
    /// [`MORIIO_HYBRID_CONV_LAYOUT`] at the engine start (0.31.0 `moriio_connector.py:2312`,
    /// 0.32.0 `:2367`, 0.33.0 `:2511`).
    ConvLayoutRefuses,
    /// The engine starts with the Mamba groups (no release yet).
    Starts,
}

/// 0.31.0-0.33.0 `register_kv_caches` of a model with Mamba-type layers in vLLM's default
/// conv-state layout (0.31.0 `moriio_connector.py:2312`, 0.33.0 `:2511`).
pub const MORIIO_HYBRID_CONV_LAYOUT: &str = "MoRIIO KDA conv transfer requires the DS \
     (dim-first) state layout; set VLLM_SSM_CONV_STATE_LAYOUT=DS";

/// 0.25.0 `vllm/v1/core/kv_cache_utils.py:1493` (the same text 0.14.0-0.26.0: 0.14.0 line
/// 1202, 0.26.0 line 1519).
pub const MORIIO_HYBRID_CORE: &str =
    "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one \
     unified type.";

/// 0.27.0-0.29.0 `_promote_local_kv_cache_specs` (0.27.0 `vllm/v1/core/kv_cache_utils.py:1529`,
/// 0.28.0 `:1482`, 0.29.0 `:1570`), called by `unify_hybrid_kv_cache_specs`.
pub const MORIIO_HYBRID_CORE_027: &str =
    "Failed to promote local KV cache specs to one unified type.";

/// 0.30.0, READ and WRITE: each worker's `register_kv_caches`, which vLLM runs before the
/// engine core builds the scheduler (0.30.0 `vllm/v1/engine/core.py:145` `_initialize_kv_caches`,
/// then `:162`), gets every layer's `[B, H, N, C]` view, the Mamba layer's too
/// (`vllm/v1/worker/utils.py:389`), and its layer geometry takes only attention views: the
/// `ValueError` of `get_layer_transfer_geometry` (`moriio_layout.py:236`, via
/// `moriio_connector.py:1922`). The text names the model's first Mamba layer and its view,
/// `(num_blocks, 1, 1, state bytes)`. The scheduler's refusal (`NotImplementedError "MoRIIO only
/// supports sliding-window hybrid models …"`, `moriio_connector.py:419`) is never reached.
pub const MORIIO_HYBRID_WORKER_030: &str =
    "Unsupported MoRIIO K/V cache shape for layer {mamba_layer}: ({num_blocks}, 1, 1, \
     {mamba_state_bytes})";

/// 0.30.0-0.32.0 WRITE with a sliding-window group (the scheduler's `__init__`, 0.30.0
/// `moriio_connector.py:427`, 0.32.0 `:572`).
pub const MORIIO_SLIDING_WRITE_030: &str = "MoRIIO WRITE mode does not support hybrid KV cache \
     groups (sliding-window attention). Use READ mode, or pass \
     --disable-hybrid-kv-cache-manager.";

/// 0.33.0 WRITE with a sliding-window group (`moriio_connector.py:639`).
pub const MORIIO_SLIDING_WRITE_033: &str = "MoRIIO WRITE mode does not support sliding-window \
     cache groups. Use READ mode, or pass --disable-hybrid-kv-cache-manager.";

/// 0.31.0-0.32.0 WRITE: each worker's `register_kv_caches` (0.31.0 `moriio_connector.py:2293`,
/// 0.32.0 `:2348`), which vLLM runs before the engine core builds the scheduler whose
/// `__init__` refuses the same with a shorter text (0.31.0 `:497`).
pub const MORIIO_HYBRID_WRITE_031: &str = "MoRIIO hybrid (mamba/KDA) transfer is implemented \
     for READ mode only; set kv_connector_extra_config.read_mode=true for hybrid models";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoriioReadRules {
    /// A model with Mamba-type layers.
    pub hybrid: MoriioHybrid,
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
    /// Which blocks of a request's sliding-window layers a transfer moves.
    pub sliding_blocks: SlidingBlocks,
}

/// Which of a request's blocks a transfer moves for the model's sliding-window layers, as the
/// two schedulers decide it: MoRIIO READ (`tools/vllm_flow.py`, `scheduler_windows`; the
/// releases below) and NIXL (`tools/vllm_flow_nixl.py`; `Every` before 0.18.0, `LastWindow`
/// from 0.18.0, see `NixlRules::sliding_blocks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlidingBlocks {
    /// Before 0.30.0 vLLM turns the hybrid KV-cache manager off for MoRIIO and unifies the
    /// windows to full attention (`unify_hybrid_kv_cache_specs`): one KV-cache group, every
    /// block of the request moves.
    Every,
    /// 0.30.0 on the window is a KV-cache group of its own and both schedulers clip its
    /// block list to the last `cdiv(window, block_size) + 1` blocks (`blocks_per_sw`, 0.30.0
    /// `moriio_connector.py:441`, applied by `get_exchange_clipped_blocks`, `:525`: the
    /// prefill's `request_finished` `:1058` and the decode's `update_state_after_alloc`
    /// `:757`); the full-attention group moves every block.
    LastWindow,
}

impl SlidingBlocks {
    /// The blocks of a `request_blocks`-block request a transfer moves for a sliding-window
    /// layer of `window_tokens` tokens in blocks of `block_size` tokens (both ≥ 1).
    pub fn blocks(self, window_tokens: i64, block_size: i64, request_blocks: i64) -> i64 {
        match self {
            SlidingBlocks::Every => request_blocks,
            SlidingBlocks::LastWindow => {
                let window = (window_tokens + block_size - 1) / block_size + 1;
                request_blocks.min(window)
            }
        }
    }

    /// The KV-cache groups a transfer of a model with full and sliding-window layers moves.
    pub fn groups(self) -> i64 {
        match self {
            SlidingBlocks::Every => 1,
            SlidingBlocks::LastWindow => 2,
        }
    }
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
    /// A model with Mamba-type layers.
    pub hybrid: MoriioHybrid,
    /// The decode scheduler's block notices reach the prefill ranks. 0.20.0-0.22.1: it reads
    /// the *decode's* address from the request id (`get_peer_zmq_from_request_id(
    /// request.request_id, is_producer=True)`, 0.20.0 `moriio_connector.py:420`), so the
    /// notices go to its own notify port (whose listener dies of `AssertionError "Only
    /// prefill can get block messages"`): no prefill rank ever writes.
    pub notices_reach_prefill: bool,
    /// What the scheduler raises at the engine start for a model with sliding-window layers
    /// (`NotImplementedError`, its text), else `None`. Before 0.30.0 MoRIIOConnector is no
    /// `SupportsHMA`: vLLM turns the hybrid KV-cache manager off and unifies the windows to
    /// full attention, so WRITE runs the dense flow. From 0.30.0 it keeps the manager on and
    /// WRITE refuses the sliding-window group (0.30.0 `moriio_connector.py:427`).
    pub sliding_window: Option<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    Nixl(NixlRules),
    MoriioRead(MoriioReadRules),
    MoriioWrite(MoriioWriteRules),
    /// An SGLang transfer backend's rules (`sglang.rs`); `sglang_flow::flow` reads them.
    Sglang(sglang::SglangRules),
}

impl Rules {
    /// What the two instances' `--page-size`-like (`page`: prefill, decode) and KV-cache dtype
    /// settings (`dtype`) do, as the engine checks them: its violation, or `None`. A side
    /// given as `None` takes the engine's default ([`Engine::kv_defaults`]). `Err`: the
    /// engine's rules for unequal settings are not modeled (say so, never guess).
    pub fn kv_settings_violation(
        &self,
        engine: Engine,
        page: (Option<i64>, Option<i64>),
        dtype: (Option<&str>, Option<&str>),
    ) -> Result<Option<Violation>, String> {
        let Some((default_page, default_dtype)) = engine.kv_defaults() else {
            if page.0 == page.1 && dtype.0 == dtype.1 {
                return Ok(None); // one setting on both sides (or none given)
            }
            return Err(format!(
                "page_size and kv_cache_dtype are checked for pairs of one setting on both \
                 sides under {}: pdtp does not model its rules for unequal or one-sided \
                 settings",
                engine.label()
            ));
        };
        let page = (
            page.0.unwrap_or(default_page),
            page.1.unwrap_or(default_page),
        );
        let dtype = (
            dtype.0.unwrap_or(default_dtype),
            dtype.1.unwrap_or(default_dtype),
        );
        Ok(match self {
            Rules::Sglang(r) => sglang_flow::kv_settings_violation(r, page, dtype),
            Rules::Nixl(_) | Rules::MoriioRead(_) | Rules::MoriioWrite(_) => None,
        })
    }

    /// The connector's steps for a pair (P = prefill TP, D = decode TP, both ≥ 1) as its
    /// engine runs them: the first violation the engine raises (or pdtp's, where it raises
    /// nothing and the pair cannot work), else what runs. `check` calls this once, whatever
    /// the engine: a new engine's rules are a variant here and its own module's flow.
    pub fn flow(&self, shape: &Shape, p: i64, d: i64) -> Result<Flow, Violation> {
        match self {
            Rules::Nixl(r) => check::nixl_flow(shape, p, d, r),
            Rules::MoriioRead(r) => check::moriio_read_flow(shape, p, d, r),
            Rules::MoriioWrite(r) => check::moriio_write_flow(shape, p, d, r),
            Rules::Sglang(r) => sglang_flow::flow(shape, p, d, r),
        }
    }
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

const MAMBA_CONV_LAYOUT_020: &str =
    "3-read Mamba conv transfer requires DS conv state layout. Set VLLM_SSM_CONV_STATE_LAYOUT=DS";

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
            handshake_failure: NixlHandshakeFailure::ReadsWithoutAgent,
            mamba_same_tp: false,
            mamba_skips_block_len: false,
            mamba_reads_every_rank: false,
            sliding_blocks: SlidingBlocks::Every,
            mamba_conv_layout: None,
            hybrid_kv_manager: NixlHma::Off(MORIIO_HYBRID_CORE),
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
            handshake_failure: NixlHandshakeFailure::Recomputed,
            mamba_same_tp: false,
            mamba_skips_block_len: false,
            mamba_reads_every_rank: false,
            sliding_blocks: SlidingBlocks::Every,
            mamba_conv_layout: None,
            hybrid_kv_manager: NixlHma::Off(MORIIO_HYBRID_CORE),
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
            handshake_failure: NixlHandshakeFailure::Recomputed,
            mamba_same_tp: false,
            mamba_skips_block_len: false,
            mamba_reads_every_rank: false,
            sliding_blocks: SlidingBlocks::Every,
            mamba_conv_layout: None,
            hybrid_kv_manager: NixlHma::Off(MORIIO_HYBRID_CORE),
        }),
    },
    ConnectorProfile {
        connector: "nixl",
        since: v(0, 17, 0),
        rules: Rules::Nixl(NixlRules {
            ratio: NixlRatio::BothWays,
            replicated: Replicated::AtLeastHeads,
            fan_in_replicated: FanInReplicated::AllModels,
            block_len: BlockLen::TpRatio(BLOCK_LEN_014),
            pp: NixlPp::TpRanksOnly,
            handshake_failure: NixlHandshakeFailure::RequestFails,
            mamba_same_tp: false,
            mamba_skips_block_len: false,
            mamba_reads_every_rank: false,
            sliding_blocks: SlidingBlocks::Every,
            mamba_conv_layout: None,
            hybrid_kv_manager: NixlHma::Off(MORIIO_HYBRID_CORE),
        }),
    },
    ConnectorProfile {
        connector: "nixl",
        since: v(0, 18, 0),
        rules: Rules::Nixl(NixlRules {
            ratio: NixlRatio::BothWays,
            replicated: Replicated::AtLeastHeads,
            fan_in_replicated: FanInReplicated::AllModels,
            block_len: BlockLen::TpRatio(BLOCK_LEN_014),
            pp: NixlPp::TpRanksOnly,
            handshake_failure: NixlHandshakeFailure::RequestFails,
            mamba_same_tp: true,
            mamba_skips_block_len: false,
            mamba_reads_every_rank: false,
            sliding_blocks: SlidingBlocks::LastWindow,
            mamba_conv_layout: None,
            hybrid_kv_manager: NixlHma::OffUnlessFlag(MORIIO_HYBRID_CORE),
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
            handshake_failure: NixlHandshakeFailure::RequestFails,
            mamba_same_tp: false,
            mamba_skips_block_len: true,
            mamba_reads_every_rank: true,
            sliding_blocks: SlidingBlocks::LastWindow,
            mamba_conv_layout: Some(MAMBA_CONV_LAYOUT_020),
            hybrid_kv_manager: NixlHma::OffUnlessFlag(MORIIO_HYBRID_CORE),
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
            handshake_failure: NixlHandshakeFailure::RequestFails,
            mamba_same_tp: false,
            mamba_skips_block_len: true,
            mamba_reads_every_rank: true,
            sliding_blocks: SlidingBlocks::LastWindow,
            mamba_conv_layout: Some(MAMBA_CONV_LAYOUT_020),
            hybrid_kv_manager: NixlHma::OffUnlessFlag(MORIIO_HYBRID_CORE),
        }),
    },
    ConnectorProfile {
        connector: "nixl",
        since: v(0, 22, 0),
        rules: Rules::Nixl(NixlRules {
            ratio: NixlRatio::BothWays,
            replicated: Replicated::MoreThanHeads,
            fan_in_replicated: FanInReplicated::NonMlaNonHybrid,
            block_len: BlockLen::TpRatio(BLOCK_LEN_014),
            pp: NixlPp::TpRanksOnly,
            handshake_failure: NixlHandshakeFailure::RequestFails,
            mamba_same_tp: false,
            mamba_skips_block_len: true,
            mamba_reads_every_rank: true,
            sliding_blocks: SlidingBlocks::LastWindow,
            mamba_conv_layout: Some(MAMBA_CONV_LAYOUT_020),
            hybrid_kv_manager: NixlHma::On,
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
            handshake_failure: NixlHandshakeFailure::RequestFails,
            mamba_same_tp: false,
            mamba_skips_block_len: true,
            mamba_reads_every_rank: true,
            sliding_blocks: SlidingBlocks::LastWindow,
            mamba_conv_layout: Some(MAMBA_CONV_LAYOUT_020),
            hybrid_kv_manager: NixlHma::On,
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
            handshake_failure: NixlHandshakeFailure::RequestFails,
            mamba_same_tp: false,
            mamba_skips_block_len: true,
            mamba_reads_every_rank: true,
            sliding_blocks: SlidingBlocks::LastWindow,
            mamba_conv_layout: Some(MAMBA_CONV_LAYOUT_020),
            hybrid_kv_manager: NixlHma::On,
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
            handshake_failure: NixlHandshakeFailure::RequestFails,
            mamba_same_tp: false,
            mamba_skips_block_len: true,
            mamba_reads_every_rank: true,
            sliding_blocks: SlidingBlocks::LastWindow,
            mamba_conv_layout: Some(MAMBA_CONV_LAYOUT_020),
            hybrid_kv_manager: NixlHma::On,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 14, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            hybrid: MoriioHybrid::CoreRefuses(MORIIO_HYBRID_CORE),
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
            sliding_blocks: SlidingBlocks::Every,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 18, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            hybrid: MoriioHybrid::CoreRefuses(MORIIO_HYBRID_CORE),
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
            sliding_blocks: SlidingBlocks::Every,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 23, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            hybrid: MoriioHybrid::CoreRefuses(MORIIO_HYBRID_CORE),
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
            sliding_blocks: SlidingBlocks::Every,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 25, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            hybrid: MoriioHybrid::CoreRefuses(MORIIO_HYBRID_CORE),
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
            sliding_blocks: SlidingBlocks::Every,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 27, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            hybrid: MoriioHybrid::CoreRefuses(MORIIO_HYBRID_CORE_027),
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
            sliding_blocks: SlidingBlocks::Every,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 30, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            hybrid: MoriioHybrid::ConnectorRefuses(VllmError::ValueError, MORIIO_HYBRID_WORKER_030),
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
            sliding_blocks: SlidingBlocks::LastWindow,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 31, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            hybrid: MoriioHybrid::ConvLayoutRefuses,
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
            sliding_blocks: SlidingBlocks::LastWindow,
        }),
    },
    ConnectorProfile {
        connector: "moriio",
        since: v(0, 33, 0),
        rules: Rules::MoriioRead(MoriioReadRules {
            hybrid: MoriioHybrid::ConvLayoutRefuses,
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
            sliding_blocks: SlidingBlocks::LastWindow,
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 14, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::SameRank,
            dp_dial: DpDial::AddsRanks,
            mapping: WriteMapping::SameRank,
            hybrid: MoriioHybrid::CoreRefuses(MORIIO_HYBRID_CORE),
            notices_reach_prefill: true,
            sliding_window: None,
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 20, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::SameRank,
            dp_dial: DpDial::AddsRanks,
            mapping: WriteMapping::SameRank,
            hybrid: MoriioHybrid::CoreRefuses(MORIIO_HYBRID_CORE),
            notices_reach_prefill: false,
            sliding_window: None,
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 23, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::SameRank,
            dp_dial: DpDial::AddsRanks,
            mapping: WriteMapping::SameRank,
            hybrid: MoriioHybrid::CoreRefuses(MORIIO_HYBRID_CORE),
            notices_reach_prefill: true,
            sliding_window: None,
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 25, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::RemoteTpRank,
            dp_dial: DpDial::AddsRanks,
            mapping: WriteMapping::SameRank,
            hybrid: MoriioHybrid::CoreRefuses(MORIIO_HYBRID_CORE),
            notices_reach_prefill: true,
            sliding_window: None,
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 27, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::RemoteTpRank,
            dp_dial: DpDial::StridesByTp,
            mapping: WriteMapping::SameRank,
            hybrid: MoriioHybrid::CoreRefuses(MORIIO_HYBRID_CORE_027),
            notices_reach_prefill: true,
            sliding_window: None,
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 30, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::RemoteTpRank,
            dp_dial: DpDial::StridesByTp,
            mapping: WriteMapping::SameRank,
            hybrid: MoriioHybrid::ConnectorRefuses(VllmError::ValueError, MORIIO_HYBRID_WORKER_030),
            notices_reach_prefill: true,
            sliding_window: Some(MORIIO_SLIDING_WRITE_030),
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 31, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::RemoteTpRank,
            dp_dial: DpDial::StridesByTp,
            mapping: WriteMapping::SameRank,
            hybrid: MoriioHybrid::ConnectorRefuses(VllmError::MoRIIOError, MORIIO_HYBRID_WRITE_031),
            notices_reach_prefill: true,
            sliding_window: Some(MORIIO_SLIDING_WRITE_030),
        }),
    },
    ConnectorProfile {
        connector: "moriio-write",
        since: v(0, 33, 0),
        rules: Rules::MoriioWrite(MoriioWriteRules {
            dial: Dial::RemoteTpRank,
            dp_dial: DpDial::StridesByTp,
            mapping: WriteMapping::TpMapping,
            hybrid: MoriioHybrid::ConvLayoutRefuses,
            notices_reach_prefill: true,
            sliding_window: Some(MORIIO_SLIDING_WRITE_033),
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
        format!(
            "{}@{}",
            self.connector.name,
            self.connector.engine.text(self.version)
        )
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

/// The newest vLLM release pdtp knows (the default version).
pub fn newest() -> Version {
    Engine::Vllm.newest()
}

/// Connectors added at run time ([`register`]), each with its own copy of its rows.
static REGISTERED: RwLock<Vec<(&'static Connector, &'static [ConnectorProfile])>> =
    RwLock::new(Vec::new());

/// At most this many connectors are registered at run time (each is kept for the process).
pub const MAX_REGISTERED: usize = 64;

fn registered() -> Vec<(&'static Connector, &'static [ConnectorProfile])> {
    REGISTERED.read().map(|r| r.clone()).unwrap_or_default()
}

/// Every connector: the built-in table, then those registered at run time.
pub fn all() -> Vec<&'static Connector> {
    CONNECTORS
        .iter()
        .chain(registered().into_iter().map(|(c, _)| c))
        .collect()
}

pub fn names() -> Vec<&'static str> {
    all().into_iter().map(|c| c.name).collect()
}

fn normalized(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace('_', "-")
}

/// The connector called `name` or one of its aliases (case-insensitive, `_` and `-` alike).
pub fn connector(name: &str) -> Option<&'static Connector> {
    let key = normalized(name);
    all().into_iter().find(|c| c.called(&key))
}

/// SGLang's backends' rows, as [`ConnectorProfile`]s: one fact in one place
/// (`sglang::SGLANG_PROFILES`), seen through the registry like vLLM's rows.
fn sglang_rows() -> &'static [ConnectorProfile] {
    static ROWS: OnceLock<Vec<ConnectorProfile>> = OnceLock::new();
    ROWS.get_or_init(|| {
        sglang::SGLANG_PROFILES
            .iter()
            .map(|p| ConnectorProfile {
                connector: p.backend.name(),
                since: sglang::parse_release(p.since).expect("SGLang rows start at releases"),
                rules: Rules::Sglang(p.rules),
            })
            .collect()
    })
}

fn rows(connector: &Connector) -> impl Iterator<Item = &'static ConnectorProfile> + '_ {
    let extra: &'static [ConnectorProfile] = registered()
        .into_iter()
        .find(|(c, _)| c.name == connector.rows_of)
        .map_or(&[], |(_, r)| r);
    PROFILES
        .iter()
        .chain(sglang_rows())
        .chain(extra)
        .filter(move |p| p.connector == connector.rows_of)
}

/// A connector to add at run time: the fields of [`Connector`], its rules those of the
/// existing connector `rules_of` (a new kind of rule is code: a [`Rules`] variant and its
/// flow in `check.rs`).
#[derive(Debug, Clone, Default)]
pub struct ConnectorSpec {
    pub name: String,
    pub aliases: Vec<String>,
    pub kv_connector: String,
    pub prefill_role: String,
    pub decode_role: String,
    pub mode: Option<String>,
    pub rules_of: String,
    pub summary: String,
    pub gpu_vendor: Option<String>,
    pub mixes_vendor: Option<String>,
}

const KV_ROLES: [&str; 3] = ["kv_producer", "kv_consumer", "kv_both"];
const VENDORS: [&str; 2] = ["AMD", "NVIDIA"];

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// Add a connector for the rest of the process: it resolves, checks and plans like the
/// built-in ones (its rows are copies of `rules_of`'s, under its own name). Errors name the
/// field and what is allowed.
pub fn register(spec: &ConnectorSpec) -> Result<&'static Connector, String> {
    let name = normalized(&spec.name);
    let aliases: Vec<String> = spec.aliases.iter().map(|a| normalized(a)).collect();
    let valid = |n: &str| {
        !n.is_empty()
            && n.len() <= 64
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            && !n.contains('@')
    };
    if let Some(bad) = std::iter::once(&name).chain(&aliases).find(|n| !valid(n)) {
        return Err(format!(
            "connector name must be 1-64 letters, digits, '-' or '.', got {bad:?}"
        ));
    }
    if let Some(taken) = std::iter::once(&name)
        .chain(&aliases)
        .find(|n| connector(n).is_some())
    {
        return Err(format!("connector name {taken:?} is taken"));
    }
    let base = connector(&spec.rules_of).ok_or_else(|| {
        format!(
            "rules_of must be one of {}, got {:?}",
            names().join(", "),
            spec.rules_of
        )
    })?;
    for (field, role) in [
        ("prefill_role", &spec.prefill_role),
        ("decode_role", &spec.decode_role),
    ] {
        if !KV_ROLES.contains(&role.as_str()) {
            return Err(format!(
                "{field} must be one of {}, got {role:?}",
                KV_ROLES.join(", ")
            ));
        }
    }
    let vendor = |field: &str, v: &Option<String>| -> Result<Option<&'static str>, String> {
        match v {
            None => Ok(None),
            Some(v) => VENDORS
                .into_iter()
                .find(|x| x.eq_ignore_ascii_case(v))
                .map(Some)
                .ok_or_else(|| format!("{field} must be AMD, NVIDIA or None, got {v:?}")),
        }
    };
    let gpu_vendor = vendor("gpu_vendor", &spec.gpu_vendor)?;
    let mixes_vendor = vendor("mixes_vendor", &spec.mixes_vendor)?;
    let ident = |field: &str, v: &str| {
        if v.is_empty()
            || v.len() > 128
            || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            Err(format!("{field} must be a Python class name, got {v:?}"))
        } else {
            Ok(leak(v))
        }
    };
    let kv_connector = ident("kv_connector", &spec.kv_connector)?;
    if spec.summary.len() > 512 {
        return Err("summary must be at most 512 characters".into());
    }
    let rules: Vec<(Version, Rules)> = rows(base).map(|p| (p.since, p.rules)).collect();
    let mut table = REGISTERED
        .write()
        .map_err(|_| "the connector registry is poisoned")?;
    if table.len() >= MAX_REGISTERED {
        return Err(format!(
            "at most {MAX_REGISTERED} connectors may be registered"
        ));
    }
    // Checked again under the lock: another thread may have taken the name meanwhile.
    if table
        .iter()
        .any(|(c, _)| std::iter::once(&name).chain(&aliases).any(|n| c.called(n)))
    {
        return Err(format!("connector name {name:?} is taken"));
    }
    let name: &'static str = leak(&name);
    let conn: &'static Connector = Box::leak(Box::new(Connector {
        name,
        aliases: Box::leak(
            aliases
                .iter()
                .map(|a| leak(a))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        ),
        engine: base.engine,
        kv_connector,
        prefill_role: leak(&spec.prefill_role),
        decode_role: leak(&spec.decode_role),
        mode: spec.mode.as_deref().map(leak),
        rows_of: name,
        before: base.before,
        summary: leak(&spec.summary),
        gpu_vendor,
        mixes_vendor,
        default_for: &[],
    }));
    let copied: Vec<ConnectorProfile> = rules
        .into_iter()
        .map(|(since, rules)| ConnectorProfile {
            connector: name,
            since,
            rules,
        })
        .collect();
    table.push((conn, Box::leak(copied.into_boxed_slice())));
    Ok(conn)
}

/// Resolve `"name"` or `"name@X.Y.Z"` (X.Y.Z a release of the connector's engine).
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
    let engine = conn.engine;
    let (label, field) = (engine.label(), engine.version_field());
    let first = rows(conn).next().expect("every connector has rows").since;
    let known: Vec<Version> = (0..engine.releases().len())
        .map(|i| engine.release(i))
        .filter(|r| *r >= first && conn.before.is_none_or(|b| *r < b))
        .collect();
    let (oldest, latest) = (known[0], *known.last().expect("a known release"));
    let (oldest_text, latest_text) = (engine.text(oldest), engine.text(latest));
    let covered = match conn.before {
        Some(_) => format!("{label} {oldest_text} to {latest_text}"),
        None => format!(
            "{label} {oldest_text} to {latest_text} (newer releases use {latest_text}'s rules)"
        ),
    };
    let version = match version {
        None => latest,
        Some(text) => engine.parse(text).ok_or_else(|| {
            ResolveError::BadVersion(format!(
                "{field} must be a release like \"{latest_text}\", got {text:?}; \
                 {} covers {covered}",
                conn.name
            ))
        })?,
    };
    let version_text = engine.text(version);
    if version < oldest {
        return Err(ResolveError::BadVersion(format!(
            "{field}={version_text}: {} is not in {label} {version_text}; pdtp covers {covered}",
            conn.name
        )));
    }
    if let Some(before) = conn.before {
        if version >= before {
            return Err(ResolveError::BadVersion(format!(
                "{field}={version_text}: {} ({}); for {label} {version_text} use connector=\"{}\"",
                conn.name, conn.summary, conn.rows_of
            )));
        }
    }
    let rules_version = version.min(engine.newest());
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
    /// The connector whose rules this row holds (a `rows_of` connector reads the same rows
    /// and resolves to its own object through [`resolve`]).
    pub fn object(&self) -> &'static Connector {
        connector(self.connector).expect("every profile row names a connector")
    }

    /// vLLM's `kv_connector` class of this row's connector.
    pub fn kv_connector(&self) -> &'static str {
        self.object().kv_connector
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

impl Rules {
    /// Which blocks of a sliding-window KV-cache group a read moves, where pdtp's rules for
    /// the connector say (NIXL's and MoRIIO READ's rows, compared with each release's flow);
    /// `None` elsewhere.
    pub fn sliding_window_blocks(&self) -> Option<SlidingBlocks> {
        match self {
            Rules::Nixl(r) => Some(r.sliding_blocks),
            Rules::MoriioRead(r) => Some(r.sliding_blocks),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_ascending_and_rows_start_at_releases() {
        let all: Vec<Version> = (0..RELEASES.len())
            .map(|i| Engine::Vllm.release(i))
            .collect();
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
    fn the_object_answers_for_its_connector() {
        let moriio = connector("MoRIIO").unwrap();
        assert!(moriio.runs_on("amd") && !moriio.runs_on("NVIDIA"));
        assert_eq!(moriio.role("prefill"), "kv_producer");
        assert_eq!(moriio.role("decode"), "kv_consumer");
        let nixl = connector("nixl").unwrap();
        assert!(nixl.runs_on("AMD") && nixl.runs_on("NVIDIA"));
        assert_eq!(nixl.mixes_vendor, Some("NVIDIA"));
        // nixl-legacy reads nixl's rows: its rows' object is nixl's.
        let legacy = resolve("nixl-legacy").unwrap();
        assert_eq!(legacy.profile.object().name, "nixl");
        assert_eq!(legacy.profile.kv_connector(), "NixlConnector");
        for c in CONNECTORS {
            assert_eq!(connector(c.name), Some(c));
            assert!(c.aliases.iter().all(|a| connector(a) == Some(c)));
            assert!(rows(c).next().is_some(), "{} has no rows", c.name);
            let newest = c.engine.newest();
            assert!(c.engine.releases().contains(&newest.to_string().as_str()));
        }
    }

    #[test]
    fn a_registered_connector_resolves_with_its_own_facts() {
        let spec = ConnectorSpec {
            name: "Toy_Pull".into(),
            aliases: vec!["toy-alias".into()],
            kv_connector: "ToyConnector".into(),
            prefill_role: "kv_producer".into(),
            decode_role: "kv_consumer".into(),
            rules_of: "nixl".into(),
            summary: "a test connector with NIXL's rules".into(),
            gpu_vendor: Some("nvidia".into()),
            mixes_vendor: None,
            ..Default::default()
        };
        let conn = register(&spec).unwrap();
        assert_eq!((conn.name, conn.gpu_vendor), ("toy-pull", Some("NVIDIA")));
        assert!(register(&spec).unwrap_err().contains("is taken"));
        let r = resolve("toy-alias@0.20.0").unwrap();
        assert_eq!(r.connector, conn);
        // Its own rows (NIXL's rules), whose object is the toy, not NIXL.
        assert_eq!(r.profile.connector, "toy-pull");
        assert_eq!(
            r.profile.rules,
            resolve("nixl@0.20.0").unwrap().profile.rules
        );
        assert_eq!(r.profile.object().kv_connector, "ToyConnector");
        assert!(!r.profile.object().runs_on("AMD"));
        assert!(names().contains(&"toy-pull"));
        let bad = |f: fn(&mut ConnectorSpec)| {
            let mut s = ConnectorSpec {
                name: "toy-bad".into(),
                ..spec.clone()
            };
            s.aliases.clear();
            f(&mut s);
            register(&s).unwrap_err()
        };
        assert!(bad(|s| s.rules_of = "nope".into()).starts_with("rules_of must be one of"));
        assert!(bad(|s| s.prefill_role = "x".into()).starts_with("prefill_role must be"));
        assert!(bad(|s| s.gpu_vendor = Some("intel".into())).starts_with("gpu_vendor must"));
        assert!(bad(|s| s.kv_connector = "a b".into()).starts_with("kv_connector must"));
        assert!(bad(|s| s.name = "x@1".into()).starts_with("connector name must"));
    }

    #[test]
    fn keys_resolve() {
        let r = resolve("moriio").unwrap();
        assert_eq!(r.key(), "moriio@0.33.0");
        assert_eq!(r.connector.mode, Some("read"));
        // WRITE's 0.20.0-0.22.1 row: the block notices go to the decode itself.
        assert_eq!(
            resolve("MoRIIO_write@0.20.0").unwrap().profile.since,
            v(0, 20, 0)
        );
        assert_eq!(
            resolve("MoRIIO_write@0.19.1").unwrap().profile.since,
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
