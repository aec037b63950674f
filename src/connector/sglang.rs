//! SGLang's prefill/decode transfer backends (`sglang-mooncake`, `sglang-nixl`, `sglang-mori`),
//! their rules per SGLang release, and what a pair does.
//!
//! SGLang's disaggregation (`sglang/srt/disaggregation/`) pairs ranks by *attention* TP (TP ÷
//! DP with `--enable-dp-attention`): a decode rank's `_resolve_rank_mapping` (or, before 0.5.10,
//! its receiver's `__init__`) picks the prefill ranks it fetches from the prefill's bootstrap
//! server, and the prefill side slices KV heads for unequal sizes. Every row below is proven
//! against SGLang's own code of every release in its range by `sglang_golden.rs` (data from
//! `tools/sglang_golden.py`): the ranks each decode rank reads and which are dummies, the
//! exception class and text, the failed request's text, the head offsets of every slice.
//!
//! Keys: `"sglang-mooncake"` (the newest release pdtp knows) or `"sglang-mooncake@0.5.9"`.

use std::fmt;

use super::Version;

/// Every SGLang release the golden data covers (0.4.6, SGLang's first with Mooncake and NIXL
/// backends, to the newest), oldest first; the last is the default.
pub const SGLANG_RELEASES: &[&str] = &[
    "0.4.6",
    "0.4.6.post1",
    "0.4.6.post2",
    "0.4.6.post3",
    "0.4.6.post4",
    "0.4.6.post5",
    "0.4.7",
    "0.4.7.post1",
    "0.4.8",
    "0.4.8.post1",
    "0.4.9",
    "0.4.9.post1",
    "0.4.9.post2",
    "0.4.9.post3",
    "0.4.9.post4",
    "0.4.9.post5",
    "0.4.9.post6",
    "0.4.10",
    "0.4.10.post1",
    "0.4.10.post2",
    "0.5.1",
    "0.5.1.post1",
    "0.5.1.post2",
    "0.5.1.post3",
    "0.5.2",
    "0.5.3",
    "0.5.3.post1",
    "0.5.3.post2",
    "0.5.3.post3",
    "0.5.4",
    "0.5.4.post1",
    "0.5.4.post2",
    "0.5.4.post3",
    "0.5.5",
    "0.5.5.post1",
    "0.5.5.post2",
    "0.5.5.post3",
    "0.5.6",
    "0.5.6.post1",
    "0.5.6.post2",
    "0.5.7",
    "0.5.8",
    "0.5.8.post1",
    "0.5.9",
    "0.5.10",
    "0.5.10.post1",
    "0.5.11",
    "0.5.12",
    "0.5.12.post1",
    "0.5.13",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
];

/// An SGLang release: `0.5.10.post1` is `[0, 5, 10, 1]`.
pub fn parse_release(text: &str) -> Option<Version> {
    let t = text.trim();
    let t = t.strip_prefix('v').unwrap_or(t);
    let (base, post) = match t.split_once(".post") {
        Some((b, p)) if !p.is_empty() && p.len() <= 4 && p.bytes().all(|c| c.is_ascii_digit()) => {
            (b, p.parse().ok()?)
        }
        Some(_) => return None,
        None => (t, 0),
    };
    let v = Version::parse(base)?;
    if v.0[3] != 0 {
        return None;
    }
    Some(Version([v.0[0], v.0[1], v.0[2], post]))
}

/// `0.5.10.post1` back from `[0, 5, 10, 1]`.
pub fn release_text(v: Version) -> String {
    let [a, b, c, post] = v.0;
    if post == 0 {
        format!("{a}.{b}.{c}")
    } else {
        format!("{a}.{b}.{c}.post{post}")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Backend {
    Mooncake,
    Nixl,
    Mori,
}

impl Backend {
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Mooncake => "sglang-mooncake",
            Backend::Nixl => "sglang-nixl",
            Backend::Mori => "sglang-mori",
        }
    }

    /// `--disaggregation-transfer-backend`'s value.
    pub const fn flag(self) -> &'static str {
        match self {
            Backend::Mooncake => "mooncake",
            Backend::Nixl => "nixl",
            Backend::Mori => "mori",
        }
    }

    /// The only GPU vendor the backend runs on (`None`: any). MORI is AMD's RDMA library
    /// (ROCm only); Mooncake and NIXL run on NVIDIA and AMD.
    pub const fn gpu_vendor(self) -> Option<&'static str> {
        match self {
            Backend::Mori => Some("AMD"),
            _ => None,
        }
    }

    pub const fn summary(self) -> &'static str {
        match self {
            Backend::Mooncake => "SGLang with Mooncake's transfer engine (RDMA)",
            Backend::Nixl => "SGLang with NVIDIA NIXL",
            Backend::Mori => "SGLang with AMD MORI (ROCm only)",
        }
    }

    pub const ALL: [Backend; 3] = [Backend::Mooncake, Backend::Nixl, Backend::Mori];
}

/// How a decode rank picks its prefill ranks (`engine_rank % D` is its attention-TP rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Before heterogeneous TP: rank r fetches prefill rank r, whatever the sizes.
    SameRank,
    /// One rank `(r % D) // (D // P)` for D > P, the `P // D` ranks from `(r % D) · (P // D)`
    /// for P > D (with MLA the first is real, the rest dummies), but only MLA models: others
    /// fail [`MAPPING_MLA_ONLY`] when the sizes differ.
    MlaOnly,
    /// As `MlaOnly`, the assert only for P > D (NIXL 0.5.2).
    MlaOnlyFanIn,
    /// As `MlaOnly` for every model. Integer division, no divisibility check.
    Hetero,
}

/// The receiver's `AssertionError` for unequal sizes of a non-MLA model (0.4.6.post4-0.5.2).
pub const MAPPING_MLA_ONLY: &str =
    "PD with different TP sizes per DP rank is not yet supported for non-MLA models";

/// What a decode rank does when the prefill's bootstrap server has no rank it asks for
/// (a target rank ≥ P).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The receiver logs it, then its `assert self.bootstrap_info(s) ...` fails (empty
    /// `AssertionError`): the decode scheduler dies.
    Crash,
    /// MORI 0.5.9: `MoriKVReceiver.__init__` reads `self.bootstrap_infos`, which the common
    /// receiver never set on that path (`AttributeError`): the decode scheduler dies.
    AttributeError,
    /// The request fails (`KVPoll.Failed`) with this text: `{rank}` is the decode engine rank,
    /// `{target}` the missing prefill rank.
    Fails(&'static str),
}

pub const MISSING_ATTRIBUTE: &str = "'MoriKVReceiver' object has no attribute 'bootstrap_infos'";

const FAIL_047: &str =
    "Could not fetch bootstrap info for engine rank: {rank} and target_dp_group: 0";
const FAIL_051: &str =
    "Could not fetch bootstrap info for engine rank: {rank} and target_dp_group: \
     0 and target_pp_rank 0";
const FAIL_0510: &str =
    "Could not fetch bootstrap info for: prefill_dp_rank: 0 prefill_cp_rank: 0 \
     target_tp_rank: {target} and target_pp_rank 0";

/// How the prefill side slices KV heads for a non-MLA model at P ≠ D (`hp` = heads per prefill
/// rank = `max(1, H // P)`, `sr`/`dr` the source/destination rank in its group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slice {
    /// No slicing: whole blocks are copied (the layouts differ, so the bytes are wrong).
    Whole,
    /// 0.4.8.post1-0.4.9.post2 Mooncake: offsets are differences of global head starts
    /// (`hd = hp·P // D`; P > D: dst = sr·hp − dr·hd, else src = dr·hd − sr·hp).
    GlobalStart,
    /// 0.4.9.post3-0.5.1: P > D: dst = sr·hp; else src = dr·hd. No modulo anywhere.
    NoModulo,
    /// 0.5.2-0.5.9 (MORI to 0.5.11, NIXL to 0.5.10): src = (dr·hd) % hp; the destination
    /// offset for P > D still has no modulo (heads land past the decode rank's). `hd` = 0
    /// raises: `ZeroDivisionError`, or MORI's `ValueError` [`SLICE_ZERO_MORI`].
    SrcModulo { mori_value_error: bool },
    /// `compute_head_slice_params` (0.5.10 on): per-side heads `max(1, H // tp)`, the
    /// prefill side's replication folded in for P > D, modulo on both offsets.
    Helper,
    /// As `Helper`, and the decode side's replication folded in for D > P (0.5.16 on).
    HelperReplicated,
}

pub const SLICE_ZERO: &str = "integer division or modulo by zero";
pub const SLICE_ZERO_MORI: &str = "Destination heads per rank evaluates to zero";

/// Where an exception of the slice code reaches the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceSurface {
    /// Raised in the prefill scheduler (`add_transfer_request`, `send_kvcache`, NIXL's
    /// prepared-transfer setup): the prefill scheduler dies.
    PrefillScheduler,
    /// Raised in Mooncake's/NIXL's transfer worker thread, which catches it: the request fails.
    RequestFails,
    /// Raised in Mooncake's staging transfer (0.5.10-0.5.16), uncaught: the transfer thread
    /// dies and every later transfer hangs.
    TransferThread,
}

/// `_resolve_rank_mapping`'s (or the receiver's) PP assert (0.5.6.post1 on).
pub const PP_ASSERT: &str =
    "Decode pp size ({decode}) should be equal to prefill pp size ({prefill}) or 1";

/// What a decode instance with DP attention (`--enable-dp-attention`, DP > 1) does first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DpAttention {
    /// Nothing of its own: the mapping runs on the attention-TP rank.
    Plain,
    /// Mooncake 0.4.6-0.4.6.post3: `assert tp_size_per_dp_rank == tp_size // dp_size` (prefill
    /// and decode attention TP equal), then the same-rank lookup by engine rank.
    SameSizeOnly,
    /// NIXL 0.4.6.post3-0.4.6.post5: every prefill rank is fetched at once and split into
    /// `remote_tp_ranks[i : i + P // D] for i in range(0, P, D)` (a stride of D, not P // D:
    /// groups overlap or run short); decode attention rank `a` takes group `a`. P < D fails
    /// an assert, a missing or short group an `IndexError`/assert; all are caught, logged,
    /// and end in the receiver's empty `AssertionError`.
    NixlGrouped,
}

/// NIXL's prepared-transfer path (0.5.13 on, `_init_hetero_tp_prep_handle`): for P < D one
/// source descriptor list per prefill rank, each token's row cut into `num_groups` groups of
/// the `n` heads a decode rank takes; the list must tile the rank's `hp` heads exactly
/// (`num_groups · n = hp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepared {
    /// No prepared path (Mooncake, MORI, NIXL before 0.5.13): the slice is sent as computed.
    No,
    /// 0.5.13-0.5.16: `num_groups = D // P`. A decode side replicating heads (H < D)
    /// over-counts: the list runs past the rank's registered KV region.
    GroupsPerRank,
    /// 0.5.17-0.5.21: `num_groups = D // P // max(1, D // H)` (one group per unique slice);
    /// H < P < D makes it 0: an empty source list.
    GroupsPerSlice,
    /// 0.5.22 on: as `GroupsPerSlice`, and the method asserts the tiling
    /// (`assert page_size * num_groups * bytes_per_token_to_send == src_kv_item_len`, no
    /// message): H < P < D raises an empty `AssertionError`.
    GroupsPerSliceAsserted,
}

/// What a prepared source list that does not tile the rank's KV slot raises where SGLang
/// asserts nothing (`nixl._bindings.nixlNotFoundError`: NIXL finds no registered region for
/// descriptors past the rank's KV memory; SGLang 0.5.22's own comment on the fix: "over-
/// counting addresses past the registered KV region, where prep_xfer_dlist raises
/// NIXL_ERR_NOT_FOUND"). pdtp's reading of NIXL, not SGLang's Python.
pub const NIXL_NOT_FOUND: (&str, &str) = ("nixlNotFoundError", "NIXL_ERR_NOT_FOUND");

/// What the decode side checks of the two instances' `--page-size` and `--kv-cache-dtype`
/// (they must match: KV moves page by page, in the prefill's item size and dtype).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvSettings {
    /// Before 0.5.8: nothing. Unequal settings copy the prefill's pages (its page size times
    /// its dtype's bytes per token) into the decode's differently laid out pages: wrong KV.
    Unchecked,
    /// 0.5.8-0.5.9: the receiver's `__init__` raises [`PAGE_SIZE_MISMATCH`]
    /// (`RuntimeError`) in the decode scheduler at the first request; the dtype is unchecked.
    PageSize,
    /// 0.5.10 on: `try_ensure_parallel_info` raises [`PAGE_SIZE_MISMATCH`], then
    /// [`KV_DTYPE_MISMATCH`] (`RuntimeError`), before the rank mapping.
    PageSizeAndDtype,
}

pub const PAGE_SIZE_MISMATCH: &str = "Page size mismatch: prefill server has \
     page_size={prefill}, but decode server has page_size={decode}. Both servers must use the \
     same --page-size value.";
pub const KV_DTYPE_MISMATCH: &str = "KV cache dtype mismatch: prefill server has \
     kv_cache_dtype={prefill}, but decode server has kv_cache_dtype={decode}. Both servers \
     must use the same --kv-cache-dtype value.";

/// SGLang's `--page-size` and `--kv-cache-dtype` defaults (`ServerArgs`: `page_size` 1 where
/// the attention backend sets none, `kv_cache_dtype` `"auto"`).
pub const DEFAULT_PAGE_SIZE: i64 = 1;
pub const DEFAULT_KV_CACHE_DTYPE: &str = "auto";

/// What unequal settings do: `Err((class, text))` where SGLang raises, `Ok(Some(why))` where
/// it checks nothing and the KV is wrong, `Ok(None)` when they match.
pub fn kv_settings_outcome(
    r: &SglangRules,
    page: (i64, i64),
    dtype: (&str, &str),
) -> Result<Option<String>, (&'static str, String)> {
    let fill = |text: &str, a: &dyn fmt::Display, b: &dyn fmt::Display| {
        text.replace("{prefill}", &a.to_string())
            .replace("{decode}", &b.to_string())
    };
    let checks_page = r.kv_settings != KvSettings::Unchecked;
    let checks_dtype = r.kv_settings == KvSettings::PageSizeAndDtype;
    if page.0 != page.1 && checks_page {
        return Err(("RuntimeError", fill(PAGE_SIZE_MISMATCH, &page.0, &page.1)));
    }
    if dtype.0 != dtype.1 && checks_dtype {
        return Err(("RuntimeError", fill(KV_DTYPE_MISMATCH, &dtype.0, &dtype.1)));
    }
    if page.0 != page.1 {
        return Ok(Some(format!(
            "prefill --page-size {} and decode --page-size {}: this SGLang checks neither, and \
             copies each prefill page ({} tokens) whole into the decode's pages of {}: tokens' \
             KV lands in other tokens' slots",
            page.0, page.1, page.0, page.1
        )));
    }
    if dtype.0 != dtype.1 {
        return Ok(Some(format!(
            "prefill --kv-cache-dtype {} and decode --kv-cache-dtype {}: this SGLang does not \
             check the dtype and copies the prefill's bytes as they are: the decode reads them \
             as {}",
            dtype.0, dtype.1, dtype.1
        )));
    }
    Ok(None)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SglangRules {
    pub mapping: Mapping,
    pub dp_attention: DpAttention,
    pub missing: Missing,
    pub slice: Slice,
    pub slice_surface: SliceSurface,
    /// Decode PP must equal prefill PP or be 1 (`AssertionError` [`PP_ASSERT`]).
    pub pp_assert: bool,
    /// The prefill sender times out a room no decode rank joined (`bootstrap_timeout`);
    /// before, such a request waits forever.
    pub bootstrap_timeout: bool,
    /// NIXL's prepared-transfer descriptor lists ([`Prepared`]).
    pub prepared: Prepared,
    /// What the decode side checks of `--page-size` / `--kv-cache-dtype` ([`KvSettings`]).
    pub kv_settings: KvSettings,
    /// What the state sender does with SWA, Mamba and DSA state
    /// ([`sglang_state::StateRules`]).
    pub state: sglang_state::StateRules,
}

impl SglangRules {
    /// The same rules with NIXL's prepared path `prepared`.
    pub const fn prepared(self, prepared: Prepared) -> SglangRules {
        SglangRules { prepared, ..self }
    }

    /// The same rules with the state sender's rules `state`.
    pub const fn state(self, state: sglang_state::StateRules) -> SglangRules {
        SglangRules { state, ..self }
    }

    /// The same rules with the `--page-size` / `--kv-cache-dtype` checks `kv_settings`.
    pub const fn kv_settings(self, kv_settings: KvSettings) -> SglangRules {
        SglangRules {
            kv_settings,
            ..self
        }
    }
}

/// One backend's rules from release `since` until its next row.
#[derive(Debug, PartialEq, Eq)]
pub struct SglangProfile {
    pub backend: Backend,
    pub since: &'static str,
    pub rules: SglangRules,
}

const fn rules(
    mapping: Mapping,
    dp_attention: DpAttention,
    missing: Missing,
    slice: Slice,
    slice_surface: SliceSurface,
    pp_assert: bool,
    bootstrap_timeout: bool,
) -> SglangRules {
    SglangRules {
        mapping,
        dp_attention,
        missing,
        slice,
        slice_surface,
        pp_assert,
        bootstrap_timeout,
        prepared: Prepared::No,
        kv_settings: KvSettings::Unchecked,
        state: sglang_state::NO_STATE,
    }
}

use super::sglang_state;
use Mapping::{Hetero, MlaOnly, MlaOnlyFanIn, SameRank};
use Missing::{Crash, Fails};
use SliceSurface::{PrefillScheduler, RequestFails, TransferThread};

const PLAIN: DpAttention = DpAttention::Plain;
const SAME_SIZE: DpAttention = DpAttention::SameSizeOnly;
const SRC_MOD: Slice = Slice::SrcModulo {
    mori_value_error: false,
};
const SRC_MOD_MORI: Slice = Slice::SrcModulo {
    mori_value_error: true,
};

/// Every rule change, per backend (ascending `since`).
pub static SGLANG_PROFILES: &[SglangProfile] = &[
    row(
        Backend::Mooncake,
        "0.4.6",
        rules(
            SameRank,
            SAME_SIZE,
            Crash,
            Slice::Whole,
            PrefillScheduler,
            false,
            false,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Mooncake,
        "0.4.6.post4",
        rules(
            MlaOnly,
            PLAIN,
            Crash,
            Slice::Whole,
            PrefillScheduler,
            false,
            false,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Mooncake,
        "0.4.7",
        rules(
            MlaOnly,
            PLAIN,
            Fails(FAIL_047),
            Slice::Whole,
            PrefillScheduler,
            false,
            false,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Mooncake,
        "0.4.8.post1",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_047),
            Slice::GlobalStart,
            RequestFails,
            false,
            false,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Mooncake,
        "0.4.9.post1",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_047),
            Slice::GlobalStart,
            RequestFails,
            false,
            true,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Mooncake,
        "0.4.9.post3",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_047),
            Slice::NoModulo,
            RequestFails,
            false,
            true,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Mooncake,
        "0.5.1",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_051),
            Slice::NoModulo,
            RequestFails,
            false,
            true,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Mooncake,
        "0.5.2",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_051),
            SRC_MOD,
            RequestFails,
            false,
            true,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Mooncake,
        "0.5.3.post3",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_051),
            SRC_MOD,
            RequestFails,
            false,
            true,
        )
        .state(sglang_state::MOONCAKE_HYBRID_REFUSED),
    ),
    row(
        Backend::Mooncake,
        "0.5.6.post1",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_051),
            SRC_MOD,
            RequestFails,
            true,
            true,
        )
        .state(sglang_state::MOONCAKE_HYBRID_REFUSED),
    ),
    row(
        Backend::Mooncake,
        "0.5.8",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_051),
            SRC_MOD,
            RequestFails,
            true,
            true,
        )
        .kv_settings(KvSettings::PageSize)
        .state(sglang_state::MOONCAKE_HYBRID_REFUSED),
    ),
    row(
        Backend::Mooncake,
        "0.5.9",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_051),
            SRC_MOD,
            RequestFails,
            true,
            true,
        )
        .kv_settings(KvSettings::PageSize)
        .state(sglang_state::MOONCAKE_MAMBA_NO_MODULO),
    ),
    row(
        Backend::Mooncake,
        "0.5.10",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            Slice::Helper,
            TransferThread,
            true,
            true,
        )
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::MOONCAKE_SWA_REFUSED),
    ),
    row(
        Backend::Mooncake,
        "0.5.16",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            Slice::HelperReplicated,
            TransferThread,
            true,
            true,
        )
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::MOONCAKE_SWA_REFUSED),
    ),
    row(
        Backend::Mooncake,
        "0.5.17",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            Slice::HelperReplicated,
            RequestFails,
            true,
            true,
        )
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::MOONCAKE_SWA_REFUSED),
    ),
    row(
        Backend::Mooncake,
        "0.5.22",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            Slice::HelperReplicated,
            RequestFails,
            true,
            true,
        )
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::MOONCAKE_SWA_SLICED),
    ),
    row(
        Backend::Nixl,
        "0.4.6",
        rules(
            SameRank,
            PLAIN,
            Crash,
            Slice::Whole,
            PrefillScheduler,
            false,
            false,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Nixl,
        "0.4.6.post3",
        rules(
            SameRank,
            DpAttention::NixlGrouped,
            Crash,
            Slice::Whole,
            PrefillScheduler,
            false,
            false,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Nixl,
        "0.4.7",
        rules(
            MlaOnly,
            PLAIN,
            Crash,
            Slice::Whole,
            PrefillScheduler,
            false,
            false,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Nixl,
        "0.5.2",
        rules(
            MlaOnlyFanIn,
            PLAIN,
            Crash,
            SRC_MOD,
            PrefillScheduler,
            false,
            false,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Nixl,
        "0.5.3",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_051),
            SRC_MOD,
            PrefillScheduler,
            false,
            false,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Nixl,
        "0.5.6.post1",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_051),
            SRC_MOD,
            PrefillScheduler,
            true,
            false,
        )
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Nixl,
        "0.5.8",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_051),
            SRC_MOD,
            PrefillScheduler,
            true,
            false,
        )
        .kv_settings(KvSettings::PageSize)
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Nixl,
        "0.5.9",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_051),
            SRC_MOD,
            PrefillScheduler,
            true,
            false,
        )
        .kv_settings(KvSettings::PageSize)
        .state(sglang_state::NIXL_HYBRID_REFUSED),
    ),
    row(
        Backend::Nixl,
        "0.5.10",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            SRC_MOD,
            PrefillScheduler,
            true,
            false,
        )
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::NIXL_HYBRID_REFUSED),
    ),
    row(
        Backend::Nixl,
        "0.5.11",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            Slice::Helper,
            PrefillScheduler,
            true,
            false,
        )
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::NIXL_MAMBA_SLICED),
    ),
    row(
        Backend::Nixl,
        "0.5.12",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            Slice::Helper,
            RequestFails,
            true,
            false,
        )
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::NIXL_REQUEST_FAILS),
    ),
    row(
        Backend::Nixl,
        "0.5.13",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            Slice::Helper,
            PrefillScheduler,
            true,
            true,
        )
        .prepared(Prepared::GroupsPerRank)
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::NIXL_REQUEST_FAILS),
    ),
    row(
        Backend::Nixl,
        "0.5.17",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            Slice::HelperReplicated,
            PrefillScheduler,
            true,
            true,
        )
        .prepared(Prepared::GroupsPerSlice)
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::NIXL_REQUEST_FAILS),
    ),
    row(
        Backend::Nixl,
        "0.5.22",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            Slice::HelperReplicated,
            PrefillScheduler,
            true,
            true,
        )
        .prepared(Prepared::GroupsPerSliceAsserted)
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::NIXL_SWA_SLICED),
    ),
    row(
        Backend::Mori,
        "0.5.9",
        rules(
            Hetero,
            PLAIN,
            Missing::AttributeError,
            SRC_MOD_MORI,
            PrefillScheduler,
            true,
            true,
        )
        .kv_settings(KvSettings::PageSize)
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Mori,
        "0.5.10",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            SRC_MOD_MORI,
            PrefillScheduler,
            true,
            true,
        )
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::NO_STATE),
    ),
    row(
        Backend::Mori,
        "0.5.12",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            Slice::Helper,
            PrefillScheduler,
            true,
            true,
        )
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::MORI_STATE),
    ),
    row(
        Backend::Mori,
        "0.5.21",
        rules(
            Hetero,
            PLAIN,
            Fails(FAIL_0510),
            Slice::HelperReplicated,
            PrefillScheduler,
            true,
            true,
        )
        .kv_settings(KvSettings::PageSizeAndDtype)
        .state(sglang_state::MORI_STATE),
    ),
];

const fn row(backend: Backend, since: &'static str, rules: SglangRules) -> SglangProfile {
    SglangProfile {
        backend,
        since,
        rules,
    }
}

/// A key resolved: the backend, the release asked for and the rules that apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SglangResolved {
    pub backend: Backend,
    pub version: Version,
    pub profile: &'static SglangProfile,
    /// The release the rules were proven on (`version`, or the newest known when newer).
    pub rules_version: Version,
}

impl SglangResolved {
    pub fn key(&self) -> String {
        format!("{}@{}", self.backend.name(), release_text(self.version))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SglangKeyError(pub String);

impl fmt::Display for SglangKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SglangKeyError {}

fn releases() -> impl Iterator<Item = Version> {
    SGLANG_RELEASES
        .iter()
        .map(|r| parse_release(r).expect("SGLANG_RELEASES holds valid releases"))
}

/// The newest SGLang release pdtp knows (the default `sglang_version`).
pub fn sglang_newest() -> Version {
    releases().last().expect("a release")
}

/// The backend called `name` (`sglang-mooncake`; case-insensitive, `_` and `-` alike).
pub fn backend(name: &str) -> Option<Backend> {
    let key = name.trim().to_ascii_lowercase().replace('_', "-");
    Backend::ALL.into_iter().find(|b| b.name() == key)
}

pub fn sglang_names() -> Vec<&'static str> {
    Backend::ALL.iter().map(|b| b.name()).collect()
}

fn first_release(b: Backend) -> Version {
    SGLANG_PROFILES
        .iter()
        .find(|p| p.backend == b)
        .map(|p| parse_release(p.since).expect("valid since"))
        .expect("every backend has rows")
}

/// Resolve `"sglang-nixl"` or `"sglang-nixl@0.5.9"`.
pub fn resolve_sglang(key: &str) -> Result<SglangResolved, SglangKeyError> {
    let (name, version) = match key.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (key, None),
    };
    let b = backend(name).ok_or_else(|| {
        SglangKeyError(format!(
            "connector must be one of {}, got {name:?}",
            sglang_names().join(", ")
        ))
    })?;
    let (oldest, newest) = (first_release(b), sglang_newest());
    let covered = format!(
        "SGLang {} to {} (newer releases use {}'s rules)",
        release_text(oldest),
        release_text(newest),
        release_text(newest)
    );
    let version = match version {
        None => newest,
        Some(text) => parse_release(text).ok_or_else(|| {
            SglangKeyError(format!(
                "sglang_version must be a release like \"{}\", got {text:?}; {} covers {covered}",
                release_text(newest),
                b.name()
            ))
        })?,
    };
    if version < oldest {
        return Err(SglangKeyError(format!(
            "sglang_version={}: {} is not in SGLang {}; pdtp covers {covered}",
            release_text(version),
            b.name(),
            release_text(version)
        )));
    }
    let rules_version = version.min(newest);
    let profile = SGLANG_PROFILES
        .iter()
        .rfind(|p| p.backend == b && parse_release(p.since).expect("valid") <= rules_version)
        .expect("version >= the first row");
    Ok(SglangResolved {
        backend: b,
        version,
        profile,
        rules_version,
    })
}

// ------------------------------------------------------------------ what SGLang's code does

/// One decode rank's bootstrap outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankOutcome {
    /// (prefill attention-TP rank, dummy) in fetch order.
    Reads(Vec<(i64, bool)>),
    /// The receiver raised: class, text.
    Raises(&'static str, String),
    /// The request is failed with this text.
    Fails(String),
}

/// What decode rank `rank` (engine rank; attention-TP rank `rank % d`) of a decode instance
/// with attention TP `d`, `dp` DP-attention ranks and PP `dpp` does with a prefill of
/// attention TP `p` (DP 1) and PP `ppp`.
#[allow(clippy::too_many_arguments)]
pub fn rank_outcome(
    r: &SglangRules,
    p: i64,
    d: i64,
    mla: bool,
    rank: i64,
    dp: i64,
    ppp: i64,
    dpp: i64,
) -> RankOutcome {
    let a = rank % d;
    let crash = || RankOutcome::Raises("AssertionError", String::new());
    if dp > 1 {
        match r.dp_attention {
            DpAttention::Plain => {}
            DpAttention::SameSizeOnly if p != d => return crash(),
            DpAttention::SameSizeOnly => {}
            DpAttention::NixlGrouped => {
                let k = p / d;
                if p < d {
                    return crash();
                }
                let groups: Vec<Vec<i64>> = (0..p)
                    .step_by(d as usize)
                    .map(|i| (i..(i + k).min(p)).collect())
                    .collect();
                return match groups.get(a as usize) {
                    Some(g) if g.len() as i64 == k => {
                        RankOutcome::Reads(g.iter().map(|&t| (t, false)).collect())
                    }
                    _ => crash(),
                };
            }
        }
    }
    let targets: Vec<(i64, bool)> = match r.mapping {
        SameRank => vec![(rank, false)],
        MlaOnly if p != d && !mla => {
            return RankOutcome::Raises("AssertionError", MAPPING_MLA_ONLY.into())
        }
        MlaOnlyFanIn if p > d && !mla => {
            return RankOutcome::Raises("AssertionError", MAPPING_MLA_ONLY.into())
        }
        _ if p == d => vec![(a, false)],
        _ if d > p => vec![(a / (d / p), false)],
        _ => {
            let k = p / d;
            (a * k..(a + 1) * k)
                .map(|t| (t, mla && t != a * k))
                .collect()
        }
    };
    if r.pp_assert && dpp != ppp && dpp != 1 {
        return RankOutcome::Raises(
            "AssertionError",
            PP_ASSERT
                .replace("{decode}", &dpp.to_string())
                .replace("{prefill}", &ppp.to_string()),
        );
    }
    if let Some(&(t, _)) = targets.iter().find(|(t, _)| *t >= p) {
        return match r.missing {
            Crash => crash(),
            Missing::AttributeError => {
                RankOutcome::Raises("AttributeError", MISSING_ATTRIBUTE.into())
            }
            Fails(text) => RankOutcome::Fails(
                text.replace("{rank}", &rank.to_string())
                    .replace("{target}", &t.to_string()),
            ),
        };
    }
    RankOutcome::Reads(targets)
}

/// A head slice: (source head start, heads sent, destination head start), or the exception.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceOutcome {
    Whole,
    Heads(i64, i64, i64),
    Raises(&'static str, &'static str),
}

/// NIXL's prepared path: the `num_groups` of prefill rank's source list for decode size `d`
/// (`None`: no prepared path).
pub fn prepared_groups(r: &SglangRules, p: i64, d: i64, h: i64) -> Option<i64> {
    if p > d {
        return (r.prepared != Prepared::No).then_some(1);
    }
    match r.prepared {
        Prepared::No => None,
        Prepared::GroupsPerRank => Some(d / p),
        Prepared::GroupsPerSlice | Prepared::GroupsPerSliceAsserted => Some(d / p / (d / h).max(1)),
    }
}

/// Whether NIXL's prepared source list tiles the prefill rank's `hp` heads (`num_groups · n`).
fn prepared_tiles(r: &SglangRules, p: i64, d: i64, h: i64, n: i64) -> bool {
    prepared_groups(r, p, d, h).is_none_or(|g| g * n == (h / p).max(1))
}

/// The offsets prefill rank `src` (of P) uses for decode rank `dst` (of D), `h` KV heads.
pub fn head_slice(r: &SglangRules, p: i64, d: i64, h: i64, src: i64, dst: i64) -> SliceOutcome {
    let got = head_offsets(r, p, d, h, src, dst);
    match got {
        SliceOutcome::Heads(_, n, _)
            if r.prepared == Prepared::GroupsPerSliceAsserted && !prepared_tiles(r, p, d, h, n) =>
        {
            SliceOutcome::Raises("AssertionError", "")
        }
        other => other,
    }
}

fn head_offsets(r: &SglangRules, p: i64, d: i64, h: i64, src: i64, dst: i64) -> SliceOutcome {
    let hp = (h / p).max(1);
    let (sr, dr) = (src % p, dst % d);
    match r.slice {
        Slice::Whole => SliceOutcome::Whole,
        Slice::GlobalStart | Slice::NoModulo | Slice::SrcModulo { .. } => {
            let hd = hp * p / d;
            if hd == 0 {
                let mori = matches!(
                    r.slice,
                    Slice::SrcModulo {
                        mori_value_error: true
                    }
                );
                return if mori {
                    SliceOutcome::Raises("ValueError", SLICE_ZERO_MORI)
                } else {
                    SliceOutcome::Raises("ZeroDivisionError", SLICE_ZERO)
                };
            }
            match (r.slice, p > d) {
                (Slice::GlobalStart, true) => SliceOutcome::Heads(0, hp, src * hp - dst * hd),
                (Slice::GlobalStart, false) => SliceOutcome::Heads(dst * hd - src * hp, hd, 0),
                (_, true) => SliceOutcome::Heads(0, hp, sr * hp),
                (Slice::NoModulo, false) => SliceOutcome::Heads(dr * hd, hd, 0),
                (_, false) => SliceOutcome::Heads((dr * hd) % hp, hd, 0),
            }
        }
        Slice::Helper | Slice::HelperReplicated => {
            let hd = (h / d).max(1);
            if p > d {
                let unique = sr / (p / h).max(1);
                SliceOutcome::Heads(0, hp, (unique * hp) % hd)
            } else {
                let unique = if r.slice == Slice::HelperReplicated {
                    dr / (d / h).max(1)
                } else {
                    dr
                };
                SliceOutcome::Heads((unique * hd) % hp, hd, 0)
            }
        }
    }
}

// ------------------------------------------------------------------ what it means for a pair

/// How a pair ends (pdtp's reading of SGLang's behaviour).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every decode rank gets its own KV heads.
    Ok,
    /// An exception: class, text, and where it surfaces.
    Raises {
        error: &'static str,
        message: String,
        surfaces: &'static str,
    },
    /// No exception, but requests wait: `until_timeout` when SGLang's bootstrap timeout
    /// reaps them (the request then fails), else forever.
    Hangs {
        until_timeout: bool,
        idle_prefill: Vec<i64>,
    },
    /// No exception, wrong KV: the decode generates from other heads' cache.
    Corrupts(String),
}

/// Where it surfaces, in words the verdict carries.
pub mod surfaces {
    pub const DECODE_SCHEDULER: &str = "decode_scheduler_crash";
    pub const PREFILL_SCHEDULER: &str = "prefill_scheduler_crash";
    pub const TRANSFER_THREAD: &str = "transfer_thread_death";
    pub const REQUEST: &str = "request_failed";
}

/// Where an exception of the release's slice code surfaces, in the verdict's words.
fn slice_surface(r: &SglangRules) -> &'static str {
    match r.slice_surface {
        SliceSurface::PrefillScheduler => surfaces::PREFILL_SCHEDULER,
        SliceSurface::RequestFails => surfaces::REQUEST,
        SliceSurface::TransferThread => surfaces::TRANSFER_THREAD,
    }
}

/// The KV heads an attention-TP rank holds (SGLang's QKV split, replicated past H).
fn heads_of(h: i64, tp: i64, rank: i64) -> Vec<i64> {
    crate::rules::kv_heads_of_rank(h, tp, rank, false)
}

/// The pair `p` → `d` (attention TP) for a model of `h` KV heads, MLA or not, PP sizes.
pub fn pair_verdict(
    r: &SglangRules,
    h: i64,
    mla: bool,
    p: i64,
    d: i64,
    ppp: i64,
    dpp: i64,
) -> Verdict {
    let mut contacted = vec![false; p.max(0) as usize];
    let mut reads = Vec::new();
    for rank in 0..d {
        match rank_outcome(r, p, d, mla, rank, 1, ppp, dpp) {
            RankOutcome::Raises(error, message) => {
                return Verdict::Raises {
                    error,
                    message,
                    surfaces: surfaces::DECODE_SCHEDULER,
                }
            }
            RankOutcome::Fails(message) => {
                return Verdict::Raises {
                    error: "KVTransferError",
                    message,
                    surfaces: surfaces::REQUEST,
                }
            }
            RankOutcome::Reads(t) => {
                for &(src, dummy) in &t {
                    contacted[src as usize] = true;
                    if !dummy {
                        reads.push((src, rank));
                    }
                }
            }
        }
    }
    // Heads (non-MLA at P ≠ D: sliced; MLA: one latent, copied whole).
    if !mla && p != d {
        let mut filled: Vec<Vec<Option<i64>>> = (0..d)
            .map(|rank| vec![None; heads_of(h, d, rank).len()])
            .collect();
        for &(src, dst) in &reads {
            let theirs = heads_of(h, p, src);
            match head_slice(r, p, d, h, src, dst) {
                SliceOutcome::Whole => {
                    return Verdict::Corrupts(format!(
                        "this SGLang copies whole KV blocks between unequal TP sizes: decode \
                         rank {dst} gets prefill rank {src}'s heads {theirs:?} in a layout of \
                         {} heads",
                        filled[dst as usize].len()
                    ))
                }
                SliceOutcome::Raises(error, message) => {
                    return Verdict::Raises {
                        error,
                        message: message.into(),
                        surfaces: slice_surface(r),
                    };
                }
                SliceOutcome::Heads(_, n, _) if !prepared_tiles(r, p, d, h, n) => {
                    return Verdict::Raises {
                        error: NIXL_NOT_FOUND.0,
                        message: NIXL_NOT_FOUND.1.into(),
                        surfaces: slice_surface(r),
                    };
                }
                SliceOutcome::Heads(s, n, t) => {
                    let slot = &mut filled[dst as usize];
                    for i in 0..n {
                        let (from, to) = (s + i, t + i);
                        if from < 0
                            || from >= theirs.len() as i64
                            || to < 0
                            || to >= slot.len() as i64
                        {
                            return Verdict::Corrupts(format!(
                                "prefill rank {src} writes heads [{s}, {}) of its {} into \
                                 [{t}, {}) of decode rank {dst}'s {}: out of range",
                                s + n,
                                theirs.len(),
                                t + n,
                                slot.len()
                            ));
                        }
                        slot[to as usize] = Some(theirs[from as usize]);
                    }
                }
            }
        }
        for (rank, slot) in filled.iter().enumerate() {
            let want = heads_of(h, d, rank as i64);
            let got: Vec<Option<i64>> = want.iter().map(|&x| Some(x)).collect();
            if *slot != got {
                return Verdict::Corrupts(format!(
                    "decode rank {rank} should hold KV heads {want:?} but receives {:?}",
                    slot.iter()
                        .map(|x| x.map_or("none".to_string(), |v| v.to_string()))
                        .collect::<Vec<_>>()
                ));
            }
        }
    }
    let idle: Vec<i64> = (0..p).filter(|&s| !contacted[s as usize]).collect();
    if !idle.is_empty() {
        return Verdict::Hangs {
            until_timeout: r.bootstrap_timeout,
            idle_prefill: idle,
        };
    }
    Verdict::Ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules_at(key: &str) -> &'static SglangRules {
        &resolve_sglang(key).unwrap().profile.rules
    }

    #[test]
    fn releases_ascend_and_rows_start_at_releases() {
        let all: Vec<Version> = releases().collect();
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        for p in SGLANG_PROFILES {
            assert!(
                all.contains(&parse_release(p.since).unwrap()),
                "{}",
                p.since
            );
        }
        assert_eq!(
            release_text(parse_release("0.5.10.post1").unwrap()),
            "0.5.10.post1"
        );
    }

    #[test]
    fn keys_resolve_and_bad_ones_say_what_is_covered() {
        let r = resolve_sglang("sglang-mooncake").unwrap();
        assert_eq!(r.key(), "sglang-mooncake@0.5.23");
        assert_eq!(
            resolve_sglang("SGLang_NIXL@0.5.10.post1")
                .unwrap()
                .profile
                .since,
            "0.5.10"
        );
        let r = resolve_sglang("sglang-mori@0.6.0").unwrap();
        assert_eq!(r.rules_version, sglang_newest());
        let e = resolve_sglang("sglang-mori@0.5.8").unwrap_err().to_string();
        assert!(
            e.contains("not in SGLang 0.5.8") && e.contains("0.5.9 to 0.5.23"),
            "{e}"
        );
        let e = resolve_sglang("sglang-nixl@latest")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sglang_version must be a release like \"0.5.23\""),
            "{e}"
        );
        assert!(resolve_sglang("sglang-tcp").is_err());
    }

    #[test]
    fn the_issue_examples() {
        // D > P, D % P != 0: a decode rank asks for a prefill rank that does not exist.
        let v = pair_verdict(rules_at("sglang-mooncake"), 8, false, 2, 3, 1, 1);
        assert!(
            matches!(
                v,
                Verdict::Raises {
                    surfaces: surfaces::REQUEST,
                    ..
                }
            ),
            "{v:?}"
        );
        // P > D, P % D != 0: a prefill rank has no peer: hang until the bootstrap timeout.
        let v = pair_verdict(rules_at("sglang-mooncake"), 1, true, 3, 2, 1, 1);
        assert_eq!(
            v,
            Verdict::Hangs {
                until_timeout: true,
                idle_prefill: vec![2]
            }
        );
        // Up to 0.5.9 the destination offset of P > D has no modulo: corrupt; fixed in 0.5.10.
        let v = pair_verdict(rules_at("sglang-mooncake@0.5.9"), 8, false, 4, 2, 1, 1);
        assert!(matches!(v, Verdict::Corrupts(_)), "{v:?}");
        assert_eq!(
            pair_verdict(rules_at("sglang-mooncake@0.5.10"), 8, false, 4, 2, 1, 1),
            Verdict::Ok
        );
        // Replicated KV heads (H < D, D > P): ZeroDivisionError before the helper, MORI's
        // ValueError, fixed by the replication-aware helper.
        let v = pair_verdict(rules_at("sglang-mooncake@0.5.9"), 1, false, 1, 2, 1, 1);
        assert!(
            matches!(
                v,
                Verdict::Raises {
                    error: "ZeroDivisionError",
                    ..
                }
            ),
            "{v:?}"
        );
        let v = pair_verdict(rules_at("sglang-mori@0.5.9"), 1, false, 1, 2, 1, 1);
        assert!(
            matches!(
                v,
                Verdict::Raises {
                    error: "ValueError",
                    ..
                }
            ),
            "{v:?}"
        );
        // NIXL's prepared path asserts its source list tiles the rank's heads (0.5.22 on):
        // KV heads < P < D leave it no group, an empty AssertionError in the prefill
        // scheduler; 0.5.13-0.5.21 assert nothing and NIXL refuses the descriptors.
        let v = pair_verdict(rules_at("sglang-nixl"), 2, false, 4, 8, 1, 1);
        assert_eq!(
            v,
            Verdict::Raises {
                error: "AssertionError",
                message: String::new(),
                surfaces: surfaces::PREFILL_SCHEDULER
            }
        );
        let v = pair_verdict(rules_at("sglang-nixl@0.5.16"), 4, false, 2, 8, 1, 1);
        assert!(
            matches!(
                v,
                Verdict::Raises {
                    error: "nixlNotFoundError",
                    ..
                }
            ),
            "{v:?}"
        );
        assert_eq!(
            pair_verdict(rules_at("sglang-nixl"), 4, false, 2, 8, 1, 1),
            Verdict::Ok
        );
        assert_eq!(
            pair_verdict(rules_at("sglang-mooncake"), 2, false, 4, 8, 1, 1),
            Verdict::Ok
        );
        // PP: decode PP must equal prefill PP or be 1.
        let v = pair_verdict(rules_at("sglang-nixl"), 8, false, 2, 2, 1, 2);
        assert!(
            matches!(
                v,
                Verdict::Raises {
                    error: "AssertionError",
                    ..
                }
            ),
            "{v:?}"
        );
        assert_eq!(
            pair_verdict(rules_at("sglang-nixl"), 8, false, 2, 2, 2, 1),
            Verdict::Ok
        );
    }
}
