//! Whole-pair validation: every rule a (prefill TP, decode TP) pair must pass for one model,
//! connector and vLLM release, reported (not raised) in the order vLLM would hit them.
//!
//! The connector part walks the steps vLLM takes for the release (`connector::Rules`): the
//! first failing step is the exception vLLM raises, with its class and text. A pair vLLM
//! accepts yields a [`Flow`]: which prefill ranks each decode rank takes KV from, with which
//! heads, and which prefill ranks it releases. Where vLLM raises nothing but the flow cannot
//! work (a rank dials a peer rank that does not exist, or copies a block holding other KV
//! heads, in releases before heterogeneous TP), pdtp reports its own violation.

use crate::connector::{
    BlockLen, Connector, ConnectorProfile, Dial, FanInReplicated, LayerCheck, MoriioHybrid,
    MoriioReadRules, MoriioWriteRules, NixlRatio, NixlRules, Release, Replicated, Rules,
    WriteMapping, MORIIO_EAGER_HANDSHAKE_FAILED, MORIIO_HYBRID_CONV_LAYOUT,
};
use crate::rules::{self, RuleError};

/// What `check` needs to know about a model's attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    pub num_attention_heads: i64,
    pub num_kv_heads: i64,
    pub is_mla: bool,
    /// The model has Mamba-type layers (Mamba, Mamba-2, Gated DeltaNet, …: recurrent state
    /// beside the KV cache). vLLM's NIXL worker reads it as `_has_mamba` (a `MambaSpec` KV
    /// cache group) and skips its replicated-fan-in assert for it.
    pub hybrid: bool,
    /// The model has sliding-window attention layers (Gemma 2/3, gpt-oss, Mistral's SWA):
    /// with vLLM's hybrid KV-cache manager on, they are a KV-cache group of their own
    /// (`SlidingWindowSpec`) that a connector supporting HMA sees. Chunked local attention
    /// (Llama 4) is not: vLLM turns the manager off for it by default
    /// (vllm/config/vllm.py, `VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`).
    pub sliding_window: bool,
    /// A Mamba-2 model's B/C groups (`n_groups`), where known (`None`: unknown, or as many as
    /// TP splits evenly). vLLM splits them over TP where TP divides them and otherwise (one
    /// group) gives every rank its head shard's group whole (`extra_groups_for_head_shards`,
    /// 0.20.0 `model_executor/layers/mamba/mamba_mixer2.py:299`).
    pub mamba_groups: Option<i64>,
}

/// Which exception vLLM raises for a violation (`None`: vLLM raises nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VllmError {
    ValueError,
    NotImplementedError,
    AssertionError,
    ZeroDivisionError,
    /// MoRIIO's own exception class.
    MoRIIOError,
    /// `RuntimeError` (MoRIIO's worker without AMD's MoRI).
    RuntimeError,
    /// `KeyError` (a MoRIIO read of a session the failed handshake never registered).
    KeyError,
    /// MoRIIO's `HandshakeError`.
    HandshakeError,
    /// Another engine's exception class (SGLang's `KVTransferError`, NIXL's
    /// `nixlNotFoundError`, …): its index in `connector::ENGINE_ERRORS`, so nothing here
    /// changes for a new engine (an index, not the name, keeps a `Violation` small).
    Other(u8),
    None,
}

/// When what vLLM does with a pair reaches the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Loading the model weights (the QKV split, config checks).
    ModelLoad,
    /// Starting the engine and its workers (before any request).
    EngineStart,
    /// The connector's handshake with the peer instance (at the first request routed to it).
    Handshake,
    /// The first KV transfer of a request.
    FirstTransfer,
    /// While serving, with no exception: a consequence (a leak, a hang, wrong bytes).
    Serving,
    /// pdtp's own limit (`max_acks`, memory): nothing in vLLM.
    Planning,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::ModelLoad => "model_load",
            Stage::EngineStart => "engine_start",
            Stage::Handshake => "handshake",
            Stage::FirstTransfer => "first_transfer",
            Stage::Serving => "serving",
            Stage::Planning => "planning",
        }
    }
}

/// What a pair vLLM raises nothing for does while serving (a violation's or a warning's
/// `consequence`). Violations: `hang`, `leak`, `wrong_bytes`; warnings:
/// `blocks_held_until_timeout`, `round_robin_source`, `ranks_idle`.
pub mod consequence {
    /// A transfer never completes: the request waits forever.
    pub const HANG: &str = "hang";
    /// Blocks never freed: the prefill instance's KV cache fills and it stops admitting.
    pub const LEAK: &str = "leak";
    /// A rank copies KV that is not its own: the decode produces wrong tokens.
    pub const WRONG_BYTES: &str = "wrong_bytes";
    /// Valid: some prefill ranks keep a request's blocks until vLLM's deferred-send timeout.
    pub const HELD_UNTIL_TIMEOUT: &str = "blocks_held_until_timeout";
    /// Valid: the prefill rank a decode rank reads changes per request (round-robin).
    pub const ROUND_ROBIN: &str = "round_robin_source";
    /// Valid: some ranks move no KV (their transfer tasks expire and are marked done).
    pub const RANKS_IDLE: &str = "ranks_idle";
    /// Valid only with a setting vLLM does not default to (an environment variable on both
    /// instances, which `pdtp deploy` writes); without it vLLM refuses at engine start.
    pub const NEEDS_SETTING: &str = "needs_setting";
}

impl VllmError {
    pub fn name(self) -> &'static str {
        match self {
            VllmError::ValueError => "ValueError",
            VllmError::NotImplementedError => "NotImplementedError",
            VllmError::AssertionError => "AssertionError",
            VllmError::ZeroDivisionError => "ZeroDivisionError",
            VllmError::MoRIIOError => "MoRIIOError",
            VllmError::RuntimeError => "RuntimeError",
            VllmError::KeyError => "KeyError",
            VllmError::HandshakeError => "HandshakeError",
            VllmError::Other(i) => crate::connector::ENGINE_ERRORS[i as usize],
            VllmError::None => "",
        }
    }

    fn of(e: &RuleError) -> VllmError {
        match e {
            RuleError::Value(_) => VllmError::ValueError,
            RuleError::NotImplemented(_) => VllmError::NotImplementedError,
            RuleError::Assertion(_) => VllmError::AssertionError,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Stable identifier, e.g. `kv_heads_not_replicated`.
    pub code: &'static str,
    /// `prefill`, `decode` or `pair`.
    pub side: &'static str,
    /// vLLM's exact text where vLLM has one (empty for a bare `assert`).
    pub message: String,
    /// What failed and what to change, in words a user acts on.
    pub hint: String,
    pub error: VllmError,
    /// When it reaches the user.
    pub when: Stage,
    /// The exception that reaches the user when it is not `error` (vLLM raises `error` in
    /// a handshake thread and only logs it): class and text.
    pub surfaced: Option<Box<(VllmError, String)>>,
    /// With `error` `None` and `when` `Serving`: what happens ([`consequence`]).
    pub consequence: &'static str,
}

impl Violation {
    /// A violation reaching the user at `when`, with nothing else to say.
    pub fn new(
        code: &'static str,
        side: &'static str,
        message: String,
        hint: String,
        error: VllmError,
        when: Stage,
    ) -> Violation {
        Violation {
            code,
            side,
            message,
            hint,
            error,
            when,
            surfaced: None,
            consequence: "",
        }
    }

    /// The class and text of what reaches the user (`surfaced`, else `error`).
    pub fn user_error(&self) -> (VllmError, &str) {
        match self.surfaced.as_deref() {
            Some((e, m)) => (*e, m.as_str()),
            None => (self.error, self.message.as_str()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub code: &'static str,
    pub message: String,
    /// What happens ([`consequence`]).
    pub consequence: &'static str,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PairReport {
    pub violations: Vec<Violation>,
    pub warnings: Vec<Warning>,
}

impl PairReport {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

fn divisors_upto(n: i64, bound: i64) -> Vec<i64> {
    (1..=bound.min(n)).filter(|t| n % t == 0).collect()
}

fn list(v: &[i64]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Model-load violations for one side's TP size (rules.md §4).
pub fn load_violations(shape: &Shape, tp: i64, side: &'static str) -> Vec<Violation> {
    let mut out = Vec::new();
    if let Err(e) = rules::check_attention_heads(shape.num_attention_heads, tp) {
        let ok = divisors_upto(shape.num_attention_heads, 64);
        out.push(Violation {
            code: "attention_heads_not_divisible",
            side,
            message: e.message().to_string(),
            hint: format!(
                "{side}_tp must divide the {} attention heads: one of {}",
                shape.num_attention_heads,
                list(&ok)
            ),
            error: VllmError::ValueError,
            when: Stage::ModelLoad,
            surfaced: None,
            consequence: "",
        });
    }
    if let Err(message) = rules::check_kv_heads(shape.num_kv_heads, tp, shape.is_mla) {
        let h = shape.num_kv_heads;
        out.push(Violation {
            code: "kv_heads_not_divisible",
            side,
            message,
            hint: format!(
                "{side}_tp must divide the {h} KV heads (each rank holds {h}/tp heads) or be a \
                 multiple of {h} (each rank holds one replicated head)"
            ),
            error: VllmError::AssertionError,
            when: Stage::ModelLoad,
            surfaced: None,
            consequence: "",
        });
    }
    if !mamba_groups_load(shape, tp) {
        let g = shape.mamba_groups.unwrap_or(1);
        out.push(Violation {
            code: "mamba_groups_not_divisible",
            side,
            message: "If tensor parallel world size does not divide num_groups, then num_groups \
                      must equal 1."
                .into(),
            hint: format!(
                "{side}_tp must divide the model's {g} Mamba-2 groups (n_groups): one of {}",
                list(&divisors_upto(g, 64))
            ),
            error: VllmError::AssertionError,
            when: Stage::ModelLoad,
            surfaced: None,
            consequence: "",
        });
    }
    out
}

/// A Mamba-2 mixer's B/C groups under TP: vLLM splits them over the ranks when TP divides
/// them and replicates them only when there is one group (`extra_groups_for_head_shards`);
/// any other count TP does not divide fails its assert while the model is built, in every
/// release pdtp knows (0.11.0 `model_executor/layers/mamba/mamba_mixer2.py:259`, 0.20.0
/// `:285`, 0.33.0 `:320`): e.g. Nemotron-H's 8 groups at TP 16.
fn mamba_groups_load(shape: &Shape, tp: i64) -> bool {
    shape.mamba_groups.is_none_or(|g| g <= 1 || g % tp == 0)
}

/// True when one TP size loads the model (fast path for enumeration).
pub fn load_ok(shape: &Shape, tp: i64) -> bool {
    rules::check_attention_heads(shape.num_attention_heads, tp).is_ok()
        && rules::check_kv_heads(shape.num_kv_heads, tp, shape.is_mla).is_ok()
        && mamba_groups_load(shape, tp)
}

/// The KV heads (indices) a rank holds: vLLM's QKV layout; MLA: `[0]`, the latent.
fn heads(shape: &Shape, tp: i64, rank: i64) -> Vec<i64> {
    rules::kv_heads_of_rank(shape.num_kv_heads, tp, rank, shape.is_mla)
}

/// KV heads one rank holds (vLLM's `get_num_kv_heads`), the unit of a block's length.
fn heads_per_rank(shape: &Shape, tp: i64) -> i64 {
    rules::kv_heads_per_rank(shape.num_kv_heads, tp, shape.is_mla)
}

/// One decode rank of a pair vLLM accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeFlow {
    /// (prefill rank, KV heads received from it), in read order.
    pub sources: Vec<(i64, Vec<i64>)>,
    /// Prefill ranks this decode rank releases (they free the request's blocks on it).
    pub releases: Vec<i64>,
    /// Where vLLM varies the source per request: the prefill ranks it rotates over
    /// (round-robin, starting at the decode DP rank); `sources` and `releases` are then the
    /// first request's. Empty: every request takes `sources`.
    pub rotates: Vec<i64>,
}

/// What vLLM does for a pair it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    pub decode: Vec<DecodeFlow>,
    /// Releases each prefill rank waits for before freeing a request's blocks.
    pub expected_acks: i64,
    /// The decode scheduler releases every prefill rank itself (MoRIIO WRITE mode).
    pub scheduler_releases_all: bool,
    /// Prefill ranks that move no KV: vLLM notifies only another rank, and their transfer
    /// tasks expire after the deferred timeout and are marked done (MoRIIO WRITE).
    pub idle_prefill: Vec<i64>,
    /// Blocks a prefill rank holds past the read are reaped by vLLM's deferred-send timeout
    /// (MoRIIO 0.23.0 on); without it they are never freed.
    pub defer_timeout: bool,
    /// `rotates` holds on MoRIIO's `xgmi` backend too (0.27.0-0.32.0); from 0.33.0 the
    /// round-robin is `rdma`'s only and `xgmi` reads `sources` for every request.
    pub rotates_on_xgmi: bool,
}

/// A connector violation with vLLM's class and text, raised in the handshake (`at` moves it).
fn vllm(
    code: &'static str,
    error: VllmError,
    message: impl Into<String>,
    hint: String,
) -> Violation {
    Violation::new(code, "pair", message.into(), hint, error, Stage::Handshake)
}

/// A violation vLLM does not raise: pdtp's own text and what happens (`consequence`).
pub(crate) fn silent(
    code: &'static str,
    consequence: &'static str,
    message: String,
    hint: String,
) -> Violation {
    Violation {
        consequence,
        ..Violation::new(code, "pair", message, hint, VllmError::None, Stage::Serving)
    }
}

impl Violation {
    /// The same violation reaching the user at `when`.
    fn at(self, when: Stage) -> Violation {
        Violation { when, ..self }
    }

    /// The same violation, whose exception is only logged: `error`/`message` reach the user
    /// at `when` instead.
    fn surfacing(self, error: VllmError, message: String, when: Stage) -> Violation {
        Violation {
            surfaced: Some(Box::new((error, message))),
            when,
            ..self
        }
    }
}

pub(crate) fn divisible_hint(p: i64, d: i64) -> String {
    let (lo, hi) = (p.min(d), p.max(d));
    let down = hi - hi % lo;
    let up = down + lo;
    format!(
        "one TP size must be a multiple of the other: with {lo} on one side use {down} or {up} \
         on the other, or make both equal"
    )
}

/// The connector's steps for a pair (P = prefill TP, D = decode TP, both ≥ 1): the first
/// violation vLLM would raise, else what runs.
pub fn connector_flow(
    shape: &Shape,
    p: i64,
    d: i64,
    profile: &ConnectorProfile,
) -> Result<Flow, Violation> {
    // The rules' own flow, whatever the engine (`connector::Rules::flow`).
    profile.rules.flow(shape, p, d)
}

/// Whether `_validate_remote_agent_handshake`'s replicated-fan-in assert runs for the model.
fn fan_in_checked(rule: FanInReplicated, shape: &Shape) -> bool {
    match rule {
        FanInReplicated::AllModels => true,
        FanInReplicated::NonHybrid => !shape.hybrid,
        FanInReplicated::NonMlaNonHybrid => !shape.is_mla && !shape.hybrid,
    }
}

pub(crate) fn nixl_flow(shape: &Shape, p: i64, d: i64, r: &NixlRules) -> Result<Flow, Violation> {
    // 0. The engine start, before any handshake: the hybrid KV-cache manager.
    nixl_hybrid_start(shape, r.hybrid_kv_manager)?;
    let h = shape.num_kv_heads;
    // 1. `_nixl_handshake`: the tp ratio, and with it the prefill rank(s) to dial.
    match r.ratio {
        NixlRatio::Legacy if d < p => {
            return Err(nixl_handshake_failed(
                r,
                vllm(
                    "decode_smaller_than_prefill",
                    VllmError::ZeroDivisionError,
                    "integer division or modulo by zero",
                    format!(
                    "vLLM's NIXL before 0.11.1 computes decode_tp // prefill_tp = {d} // {p} = 0 \
                     and divides the decode rank by it: it crashes before any check of its own. \
                     It needs decode_tp >= prefill_tp (a multiple of it): use decode_tp={p}, or \
                     vLLM 0.14.0 or newer where NIXL accepts prefill_tp > decode_tp"
                ),
                ),
            ))
        }
        NixlRatio::Legacy if d % p != 0 => {
            return Err(nixl_handshake_failed(
                r,
                vllm(
                    "tp_not_divisible",
                    VllmError::AssertionError,
                    format!("{d} is not divisible by {p}"),
                    format!(
                        "NIXL asserts divide(decode_tp, prefill_tp) when it registers the prefill \
                     rank: decode_tp must be a multiple of prefill_tp ({}).",
                        divisible_hint(p, d)
                    ),
                ),
            ))
        }
        NixlRatio::DecodeMultiple if d % p != 0 => {
            let hint = if d < p {
                format!(
                    "this vLLM's NIXL reads only from a prefill instance no larger than the \
                     decode one: decode_tp must be a multiple of prefill_tp={p} (NIXL accepts \
                     prefill_tp > decode_tp from vLLM 0.14.0)"
                )
            } else {
                divisible_hint(p, d)
            };
            let code = if d < p {
                "decode_smaller_than_prefill"
            } else {
                "tp_not_divisible"
            };
            return Err(nixl_handshake_failed(
                r,
                vllm(
                    code,
                    VllmError::AssertionError,
                    format!(
                    "Local tensor parallel size {d} is not divisible by remote tensor parallel \
                     size {p}."
                ),
                    hint,
                ),
            ));
        }
        NixlRatio::BothWays if d >= p && d % p != 0 => {
            return Err(nixl_handshake_failed(
                r,
                vllm(
                    "tp_not_divisible",
                    VllmError::AssertionError,
                    format!(
                    "Local tensor parallel size {d} is not divisible by remote tensor parallel \
                     size {p}."
                ),
                    divisible_hint(p, d),
                ),
            ));
        }
        NixlRatio::BothWays if p > d && p % d != 0 => {
            return Err(nixl_handshake_failed(
                r,
                vllm(
                    "tp_not_divisible",
                    VllmError::AssertionError,
                    format!(
                    "Remote tensor parallel size {p} is not divisible by local tensor parallel \
                     size {d}."
                ),
                    divisible_hint(p, d),
                ),
            ));
        }
        _ => {}
    }
    // 2. `_validate_remote_agent_handshake` (inline in `add_remote_agent` in 0.11.0).
    let replicated = match r.replicated {
        Replicated::AtLeastHeads => p >= h,
        Replicated::MoreThanHeads => p > h,
    };
    let fan_in_checked = fan_in_checked(r.fan_in_replicated, shape);
    if p > d && replicated && fan_in_checked {
        let who = if shape.is_mla {
            "this vLLM's NIXL"
        } else {
            "NIXL"
        };
        return Err(nixl_handshake_failed(
            r,
            vllm(
                "replicated_kv_prefill_larger",
                VllmError::AssertionError,
                "",
                format!(
                    "{who} asserts (without a message) that a prefill side larger than the decode \
                 side does not replicate KV heads: prefill_tp={p} {} the {h} KV heads. Use \
                 prefill_tp <= decode_tp, or keep prefill_tp {} {h}",
                    if p > h { "exceeds" } else { "reaches" },
                    match r.replicated {
                        Replicated::AtLeastHeads => "<",
                        Replicated::MoreThanHeads => "<=",
                    }
                ),
            ),
        ));
    }
    if r.mamba_same_tp && shape.hybrid && p != d {
        return Err(nixl_handshake_failed(
            r,
            vllm(
                "mamba_heterogeneous_tp",
                VllmError::AssertionError,
                "Mamba does not support heterogeneous TP yet",
                format!(
                    "this vLLM's NIXL (0.18.0-0.19.x) moves a hybrid model's Mamba state only \
                     between equal TP sizes: use prefill_tp = decode_tp (here {p} and {d}), \
                     or vLLM 0.20.0 or newer"
                ),
            ),
        ));
    }
    if let BlockLen::TpRatio(message) = r.block_len {
        // Block lengths are heads per rank x a fixed size; `tp_ratio` = D / P here.
        let exempt = r.mamba_skips_block_len && shape.hybrid;
        if !shape.is_mla && !replicated && d > p && !exempt {
            let (local, remote) = (heads_per_rank(shape, d), heads_per_rank(shape, p));
            if remote != local * (d / p) {
                return Err(nixl_handshake_failed(
                    r,
                    vllm(
                        "kv_block_len_mismatch",
                        VllmError::AssertionError,
                        message,
                        format!(
                        "this vLLM's NIXL expects a prefill block to hold decode_tp/prefill_tp = \
                         {} times a decode rank's KV heads, but with {h} KV heads a prefill rank \
                         holds {remote} and a decode rank {local} (decode ranks replicate heads \
                         once decode_tp > {h}). Keep decode_tp <= {h}, raise prefill_tp to {h} \
                         or more, or use vLLM 0.24.0 or newer",
                        d / p
                    ),
                    ),
                ));
            }
        }
    }
    // A Mamba-2 model whose B/C groups TP does not split on one side: vLLM's sub-projection
    // offsets assume they do (silently, vLLM raises nothing).
    nixl_mamba_groups(shape, p, d, r)?;
    // 3. What runs: decode rank r reads prefill rank r*P/D (D >= P, or MLA: one copy of the
    // latent), else its P/D prefill ranks, once per distinct head set (a hybrid model from
    // 0.20.0: every one, for its Mamba shard).
    let every_rank = r.mamba_reads_every_rank && shape.hybrid;
    let decode = (0..d)
        .map(|rank| {
            let mine = heads(shape, d, rank);
            let group: Vec<i64> = if d >= p {
                vec![rank * p / d]
            } else {
                let k = p / d;
                (rank * k..(rank + 1) * k).collect()
            };
            let mut sources: Vec<(i64, Vec<i64>)> = Vec::new();
            for src in group.iter().copied() {
                let got: Vec<i64> = if shape.is_mla {
                    vec![0]
                } else {
                    let theirs = heads(shape, p, src);
                    mine.iter()
                        .copied()
                        .filter(|x| theirs.contains(x))
                        .collect()
                };
                let repeat = got.is_empty() || sources.iter().any(|(_, hs)| *hs == got);
                if repeat && every_rank {
                    // Its Mamba shard only: the KV heads came from another rank.
                    sources.push((src, Vec::new()));
                    continue;
                }
                if repeat {
                    continue;
                }
                sources.push((src, got));
            }
            // MLA with P > D reads one rank and notifies the rest of its group.
            DecodeFlow {
                sources,
                releases: group,
                rotates: Vec::new(),
            }
        })
        .collect();
    Ok(Flow {
        decode,
        expected_acks: rules::expected_ack_count(p, d).unwrap_or(1),
        scheduler_releases_all: false,
        idle_prefill: Vec::new(),
        defer_timeout: true,
        rotates_on_xgmi: false,
    })
}

pub(crate) fn moriio_read_flow(
    shape: &Shape,
    p: i64,
    d: i64,
    r: &MoriioReadRules,
) -> Result<Flow, Violation> {
    moriio_hybrid(shape, r.hybrid)?;
    let h = shape.num_kv_heads;
    // 1. `_moriio_handshake`: the prefill rank each decode rank dials and reads.
    let read: Vec<i64> = match r.dial {
        Dial::SameRank => {
            if d > p {
                return Err(silent(
                    "unreachable_rank",
                    consequence::HANG,
                    format!(
                        "decode rank {p} dials prefill rank {p}, which does not exist \
                         (prefill_tp={p}): MoRIIO before vLLM 0.25.0 pairs each rank with the \
                         rank of the same index, so its handshake waits forever"
                    ),
                    "this vLLM's MoRIIO has no heterogeneous TP: use equal TP sizes, or vLLM \
                     0.25.0 or newer"
                        .into(),
                ));
            }
            (0..d).collect()
        }
        Dial::RemoteTpRank => match rules::remote_tp_rank(0, d, p) {
            Err(e) => {
                // `_moriio_handshake` raises it in a handshake future, which only logs it.
                let raised = vllm(
                    "tp_not_divisible",
                    VllmError::of(&e),
                    e.message(),
                    divisible_hint(p, d),
                );
                return Err(if r.eager_handshake {
                    // 0.27.0 `moriio_connector.py:1883`: the TP ranks vote, and all raise.
                    raised.surfacing(
                        VllmError::HandshakeError,
                        MORIIO_EAGER_HANDSHAKE_FAILED.into(),
                        Stage::Handshake,
                    )
                } else {
                    // 0.25.0 `moriio_connector.py:1089`: the read looks up the layer
                    // metadata the failed handshake never stored.
                    raised.surfacing(
                        VllmError::KeyError,
                        "'{remote_engine_id}_dp0'".into(),
                        Stage::FirstTransfer,
                    )
                });
            }
            Ok(_) => (0..d)
                .map(|rank| rules::remote_tp_rank(rank, d, p).unwrap_or(0))
                .collect(),
        },
    };
    // 2. Per layer, before reading.
    let (local, remote) = (heads_per_rank(shape, d), heads_per_rank(shape, p));
    if r.layer_check == LayerCheck::HeadsPerRank && !shape.is_mla && local != remote {
        return Err(vllm(
            "kv_heads_not_replicated",
            VllmError::MoRIIOError,
            format!(
                "Layer model.layers.0.self_attn.attn holds {local} KV heads per rank here and \
                 {remote} on the peer"
            ),
            replicated_hint(h, p, d, "MoRIIO READ"),
        )
        .at(Stage::FirstTransfer));
    }
    if matches!(
        r.layer_check,
        LayerCheck::ReplicatedHeads | LayerCheck::HeadsPerRank
    ) {
        if let Err(e) = rules::validate_kv_heads(d, p, h, shape.is_mla) {
            return Err(vllm(
                "kv_heads_not_replicated",
                VllmError::of(&e),
                e.message(),
                replicated_hint(h, p, d, "MoRIIO READ"),
            )
            .at(Stage::FirstTransfer));
        }
    }
    // 3. What runs: whole blocks from one rank; releases per the release rule.
    let mut decode = Vec::with_capacity(d as usize);
    for (rank, &src) in read.iter().enumerate() {
        let rank = rank as i64;
        let theirs = heads(shape, p, src);
        if r.dial == Dial::SameRank && theirs != heads(shape, d, rank) {
            return Err(misrouted(shape, p, d, rank, src));
        }
        let releases = match r.release {
            Release::ReadRank => vec![src],
            Release::AllHolders => rules::read_holder_tp_ranks(rank, d, p).unwrap_or_default(),
        };
        // 0.27.0 on, `_resolve_read_source`: a one-rank MLA decode reading a TP > 1 prefill
        // round-robins the prefill rank per request (the latent is replicated on every one).
        let rotates = if r.round_robin_mla && d == 1 && shape.is_mla && p > 1 {
            (0..p).collect()
        } else {
            Vec::new()
        };
        decode.push(DecodeFlow {
            sources: vec![(src, theirs)],
            releases,
            rotates,
        });
    }
    let expected_acks = if r.counted_acks {
        rules::expected_ack_count(p, d).unwrap_or(1)
    } else {
        1
    };
    let flow = Flow {
        decode,
        expected_acks,
        scheduler_releases_all: false,
        idle_prefill: Vec::new(),
        defer_timeout: r.defer_timeout,
        rotates_on_xgmi: r.round_robin_on_xgmi,
    };
    // 0.18.0-0.22.1: every release ack is refused by the prefill's notify listener, which
    // then exits; with no deferred-send timeout either, no request's prefill blocks are
    // ever freed.
    if r.release_rejected {
        return Err(silent(
            "release_acks_rejected",
            consequence::LEAK,
            "MoRIIO READ in vLLM 0.18.0-0.22.1: a decode rank releases the prefill's blocks \
             with its request id (cmpl-…), but the prefill's notify listener accepts only \
             transfer ids (tx…): it raises MoRIIOError \"Unhandled message format\" on the \
             first release and stops listening, and with no deferred-send timeout before \
             0.23.0 no request's prefill blocks are ever freed; the prefill instance's KV \
             cache fills and it stops admitting requests (vLLM raises nothing to the user)"
                .into(),
            "use vLLM 0.14.0-0.17.1 or 0.23.0 or newer for MoRIIO READ, or moriio-write".into(),
        ));
    }
    // Before 0.23.0 nothing reaps a deferred send: a prefill rank no decode rank releases
    // keeps every request's blocks for good (the producer's scheduler frees a request only
    // once every worker reports it sent).
    let unreleased = unreleased_prefill(&flow, p);
    if !r.defer_timeout && !unreleased.is_empty() {
        return Err(silent(
            "unreleased_prefill_blocks",
            consequence::LEAK,
            format!(
                "prefill_tp={p} > decode_tp={d}: prefill ranks {} are never read or released \
                 by a decode rank, and MoRIIO before vLLM 0.23.0 has no deferred-send timeout: \
                 their KV blocks are never freed, so the prefill instance's KV cache fills and \
                 it stops admitting requests (vLLM raises nothing)",
                shown(&unreleased)
            ),
            "use prefill_tp <= decode_tp with this vLLM's MoRIIO READ, or vLLM 0.23.0 or \
             newer (a 60 s deferred-send timeout frees them)"
                .into(),
        ));
    }
    Ok(flow)
}

fn replicated_hint(h: i64, p: i64, d: i64, what: &str) -> String {
    let _ = (p, d);
    format!(
        "{what} copies whole KV blocks and never re-slices heads, so unequal TP sizes need \
         every rank on both sides to hold one whole replicated KV head: min(prefill_tp, \
         decode_tp) >= {h}. Use equal TP sizes, raise the smaller side to {h} or more, or use a \
         connector that re-slices heads (moriio-write from vLLM 0.33.0, or nixl)"
    )
}

fn misrouted(shape: &Shape, p: i64, d: i64, drank: i64, prank: i64) -> Violation {
    silent(
        "kv_heads_misrouted",
        consequence::WRONG_BYTES,
        format!(
            "decode rank {drank} copies prefill rank {prank}'s KV block whole, but holds KV heads \
             [{}] and prefill rank {prank} holds [{}] (prefill_tp={p}, decode_tp={d}, {} KV \
             heads): vLLM raises nothing and decodes with the wrong KV",
            list(&heads(shape, d, drank)),
            list(&heads(shape, p, prank)),
            shape.num_kv_heads
        ),
        "MoRIIO before vLLM 0.25.0 (READ) or 0.33.0 (WRITE) pairs each rank with the rank of \
         the same index: use equal TP sizes, or a newer vLLM"
            .into(),
    )
}

pub(crate) fn moriio_write_flow(
    shape: &Shape,
    p: i64,
    d: i64,
    r: &MoriioWriteRules,
) -> Result<Flow, Violation> {
    moriio_hybrid(shape, r.hybrid)?;
    moriio_write_sliding_window(shape, r)?;
    let h = shape.num_kv_heads;
    if r.mapping == WriteMapping::TpMapping {
        // `_write_tp_mapping` runs first (`validate_write_tp_topology`), in the prefill's
        // `save_kv_layer` before any handshake (0.33.0 `moriio_connector.py:3065`): the first
        // request's forward raises it.
        if let Err(e) = rules::validate_write_tp_topology(p, d, h, shape.is_mla) {
            let hint = if e.message().contains("cannot shard") {
                format!("MoRIIO WRITE slices the {h} KV heads over both sides: each TP size must divide {h} or be a multiple of it")
            } else {
                divisible_hint(p, d)
            };
            return Err(
                vllm("tp_not_divisible", VllmError::of(&e), e.message(), hint)
                    .at(Stage::FirstTransfer),
            );
        }
        let mut decode: Vec<DecodeFlow> = (0..d)
            .map(|_| DecodeFlow {
                sources: Vec::new(),
                releases: Vec::new(),
                rotates: Vec::new(),
            })
            .collect();
        for prank in 0..p {
            let targets = rules::write_targets(prank, p, d, h, shape.is_mla).unwrap_or_default();
            for t in targets {
                let (first, _) = rules::rank_heads(t.tp_rank, d, if shape.is_mla { 1 } else { h });
                let written: Vec<i64> = if shape.is_mla {
                    vec![0]
                } else {
                    (first + t.remote_head..first + t.remote_head + t.num_heads).collect()
                };
                let slot = &mut decode[t.tp_rank as usize];
                slot.sources.push((prank, written));
            }
        }
        return Ok(Flow {
            decode,
            expected_acks: 1,
            scheduler_releases_all: true,
            idle_prefill: Vec::new(),
            defer_timeout: true,
            rotates_on_xgmi: false,
        });
    }
    // Before 0.33.0: producer rank q dials one decode rank (its own index, or
    // `get_moriio_remote_tp_rank`), writes its block whole over that session and sends
    // `write_done` to decode rank q.
    // 0.25.0-0.32.0: `_moriio_handshake` raises `get_moriio_remote_tp_rank`'s ValueError in
    // the prefill's handshake future, whose callback only logs it (0.25.0
    // `moriio_connector.py:1357-1363`); the write task then fails on the missing session and
    // is marked done, so no rank writes and the decode waits for its KV forever.
    if r.dial == Dial::RemoteTpRank {
        if let Err(e) = rules::remote_tp_rank(0, p, d) {
            return Err(silent(
                "tp_not_divisible",
                consequence::HANG,
                format!(
                    "{}: MoRIIO WRITE before vLLM 0.33.0 raises this ValueError in the prefill's \
                     handshake future, which only logs it; nothing is written and every request \
                     waits for its KV forever (vLLM raises nothing)",
                    e.message()
                ),
                divisible_hint(p, d),
            ));
        }
    }
    // 0.25.0-0.32.0, one decode rank and replicated KV (one KV head, or MLA): every
    // producer dials decode rank 0, but the decode side notifies only prefill rank 0
    // (`get_moriio_remote_tp_rank`), which writes the whole (replicated) KV; the other
    // producers' write tasks expire after the deferred timeout and are marked done.
    if r.dial == Dial::RemoteTpRank && d == 1 && p > 1 && (h == 1 || shape.is_mla) {
        return Ok(Flow {
            decode: vec![DecodeFlow {
                sources: vec![(0, heads(shape, p, 0))],
                releases: Vec::new(),
                rotates: Vec::new(),
            }],
            expected_acks: 1,
            scheduler_releases_all: true,
            idle_prefill: (1..p).collect(),
            defer_timeout: true,
            rotates_on_xgmi: false,
        });
    }
    // 0.25.0-0.32.0, P > D otherwise: the decode notifies prefill ranks 0..D-1 only; each
    // writes its whole block to decode rank `get_moriio_remote_tp_rank(q)` and `write_done` to
    // decode rank q, so every decode rank reports the KV received, but some hold another
    // rank's heads or nothing (0.25.0 `moriio_engine.py:449`); the other prefill ranks'
    // tasks expire. vLLM raises nothing.
    if r.dial == Dial::RemoteTpRank && p > d {
        return Err(silent(
            "write_heads_misplaced",
            consequence::WRONG_BYTES,
            format!(
                "prefill_tp={p} > decode_tp={d}: MoRIIO WRITE before vLLM 0.33.0 notifies only \
                 prefill ranks 0-{last}, each writes its whole KV block to decode rank \
                 get_moriio_remote_tp_rank(rank) and tells decode rank <its own index> it is \
                 done, so decode ranks report KV received that holds other heads or was never \
                 written: they decode from wrong KV (vLLM raises nothing)",
                last = d - 1
            ),
            "this vLLM's MoRIIO WRITE mode has no heterogeneous TP: use equal TP sizes, READ \
             mode (connector=\"moriio\", vLLM 0.25.0 or newer) or vLLM 0.33.0 or newer"
                .into(),
        ));
    }
    if p != d {
        let (who, what) = if p > d {
            (
                format!("prefill rank {d}"),
                format!("decode rank {d}, which does not exist (decode_tp={d})"),
            )
        } else if r.dial == Dial::SameRank || p == 1 {
            // With one producer rank, `get_moriio_remote_tp_rank` dials decode rank 0 too.
            (
                format!("decode rank {p}"),
                format!("a write from prefill rank {p}, which does not exist (prefill_tp={p})"),
            )
        } else {
            let target = rules::remote_tp_rank(1, p, d).unwrap_or(1);
            (
                "prefill rank 1".to_string(),
                format!("decode rank {target} but sends write_done to decode rank 1"),
            )
        };
        let verb = if p > d || (r.dial != Dial::SameRank && p > 1) {
            "writes to"
        } else {
            "waits for"
        };
        return Err(silent(
            "unreachable_rank",
            consequence::HANG,
            format!(
                "{who} {verb} {what}: MoRIIO WRITE before vLLM 0.33.0 pairs each rank with \
                 the rank of the same index, so the transfer never completes (vLLM raises \
                 nothing)"
            ),
            "this vLLM's MoRIIO WRITE mode has no heterogeneous TP: use equal TP sizes, READ \
             mode (connector=\"moriio\", vLLM 0.25.0 or newer) or vLLM 0.33.0 or newer"
                .into(),
        ));
    }
    // P == D: what remains is whether the block notices reach the prefill.
    if !r.notices_reach_prefill {
        return Err(silent(
            "write_notices_to_self",
            consequence::HANG,
            "MoRIIO WRITE in vLLM 0.20.0-0.22.1 sends the decode's block notices to the \
             decode's own notify port (its scheduler reads its own address from the request \
             id), so no prefill rank learns where to write: nothing is written and every \
             request waits for its KV forever (vLLM raises nothing)"
                .into(),
            "use READ mode (connector=\"moriio\") or vLLM 0.23.0 or newer for WRITE".into(),
        ));
    }
    let decode = (0..d)
        .map(|rank| DecodeFlow {
            sources: vec![(rank, heads(shape, p, rank))],
            releases: Vec::new(),
            rotates: Vec::new(),
        })
        .collect();
    Ok(Flow {
        decode,
        expected_acks: 1,
        scheduler_releases_all: true,
        idle_prefill: Vec::new(),
        defer_timeout: true,
        rotates_on_xgmi: false,
    })
}

/// A model with Mamba-type layers, as the release's MoRIIO engine start takes it.
fn moriio_hybrid(shape: &Shape, hybrid: MoriioHybrid) -> Result<(), Violation> {
    if !shape.hybrid {
        return Ok(());
    }
    let (error, message, hint) = match hybrid {
        MoriioHybrid::Starts => return Ok(()),
        MoriioHybrid::CoreRefuses(message) => (
            VllmError::ValueError,
            message,
            "vLLM turns the hybrid KV-cache manager off for MoRIIO before 0.30.0, and a model \
             with Mamba-type layers needs it: use connector=\"nixl\", or MoRIIO READ on vLLM \
             0.31.0 or newer with VLLM_SSM_CONV_STATE_LAYOUT=DS",
        ),
        MoriioHybrid::ConvLayoutRefuses => (
            VllmError::MoRIIOError,
            MORIIO_HYBRID_CONV_LAYOUT,
            "vLLM's MoRIIO moves Mamba-type state only in the dim-first conv layout, and \
             vLLM's default is \"SD\": set VLLM_SSM_CONV_STATE_LAYOUT=DS on both instances \
             (pdtp checks vLLM's defaults; with it, prefill and decode TP must be equal: \
             NotImplementedError \"heterogeneous-TP mamba/KDA transfer is not supported yet\" \
             at the first transfer), or use connector=\"nixl\"",
        ),
        MoriioHybrid::ConnectorRefuses(error, message) => (
            error,
            message,
            "MoRIIO takes Mamba-type state in READ mode from vLLM 0.31.0 and in WRITE mode \
             from 0.33.0, each with VLLM_SSM_CONV_STATE_LAYOUT=DS: use those, or \
             connector=\"nixl\"",
        ),
    };
    Err(Violation::new(
        "hybrid_unsupported",
        "pair",
        message.into(),
        hint.into(),
        error,
        Stage::EngineStart,
    ))
}

/// A model with sliding-window layers, as the release's MoRIIO WRITE engine start takes it
/// (after the Mamba check: 0.30.0 `moriio_connector.py:419` then `:427`).
fn moriio_write_sliding_window(shape: &Shape, r: &MoriioWriteRules) -> Result<(), Violation> {
    match r.sliding_window {
        Some(message) if shape.sliding_window => Err(Violation::new(
            "sliding_window_unsupported",
            "pair",
            message.into(),
            "MoRIIO WRITE keeps no sliding-window KV-cache group from vLLM 0.30.0: use \
             connector=\"moriio\" (READ), vLLM 0.29.0 or older (the window runs as full \
             attention), or connector=\"nixl\""
                .into(),
            VllmError::NotImplementedError,
            Stage::EngineStart,
        )),
        _ => Ok(()),
    }
}

/// The connector's refusal of a GPU vendor its worker cannot start on (`vendor`: `AMD` or
/// `NVIDIA`), in its engine's words (`Connector::gpu_violation`).
pub fn gpu_violation(connector: &Connector, vendor: &str) -> Option<Violation> {
    connector.gpu_violation(vendor)
}

/// Every violation and warning for the pair (P = prefill TP, D = decode TP).
pub fn check_pair(
    shape: &Shape,
    p: i64,
    d: i64,
    profile: &ConnectorProfile,
    max_acks: Option<i64>,
) -> PairReport {
    let mut report = PairReport::default();
    report
        .violations
        .extend(load_violations(shape, p, "prefill"));
    report
        .violations
        .extend(load_violations(shape, d, "decode"));
    connector_report(shape, p, d, profile, max_acks, &mut report);
    report
}

/// The connector's part of a pair's report, appended after both sides' load violations:
/// the first step vLLM's connector fails, else the `max_acks` limit and (for a valid pair)
/// the warnings. `p`, `d` are the two sides' TP sizes.
pub fn connector_report(
    shape: &Shape,
    p: i64,
    d: i64,
    profile: &ConnectorProfile,
    max_acks: Option<i64>,
    report: &mut PairReport,
) {
    if p <= 0 || d <= 0 {
        return;
    }
    let flow = match connector_flow(shape, p, d, profile) {
        Ok(flow) => flow,
        Err(v) => {
            report.violations.push(v);
            return;
        }
    };
    // The release acks a prefill rank waits for, as this connector and mode count them
    // (MoRIIO WRITE: one, from the decode scheduler).
    let acks = flow.expected_acks;
    if let Some(limit) = max_acks {
        if acks > limit {
            report.violations.push(Violation::new(
                "too_many_acks",
                "pair",
                format!(
                    "decode_tp={d} reading prefill_tp={p} makes each prefill rank wait for \
                     {acks} release acks, more than max_acks={limit}"
                ),
                format!(
                    "keep decode_tp / prefill_tp <= {limit}: raise prefill_tp or lower decode_tp"
                ),
                VllmError::None,
                Stage::Planning,
            ));
        }
    }
    // Warnings describe how a valid pair behaves; an invalid pair never runs.
    if report.ok() {
        report.warnings.extend(flow_warnings(&flow, p, d));
        report.warnings.extend(nixl_hybrid_warnings(shape, profile));
        report.warnings.extend(nixl_hma_warnings(shape, profile));
    }
}

/// Prefill ranks no decode rank releases (a rotating source releases each in turn).
fn unreleased_prefill(flow: &Flow, p: i64) -> Vec<i64> {
    if flow.scheduler_releases_all {
        return Vec::new();
    }
    let mut released = vec![false; p.max(0) as usize];
    for rank in &flow.decode {
        for &q in rank.releases.iter().chain(&rank.rotates) {
            if let Some(slot) = released.get_mut(q as usize) {
                *slot = true;
            }
        }
    }
    (0..p).filter(|&q| !released[q as usize]).collect()
}

/// `a, b, c` (the first eight, then `…`).
pub(crate) fn shown(ranks: &[i64]) -> String {
    let first: Vec<i64> = ranks.iter().copied().take(8).collect();
    let more = if ranks.len() > first.len() {
        ", …"
    } else {
        ""
    };
    format!("{}{more}", list(&first))
}

const DEFER_TIMEOUT: &str = "vLLM's deferred-send timeout (kv_connector_extra_config.\
     defer_timeout, 60 s by default)";

/// The consequences of a pair vLLM runs: ranks holding blocks until a timeout, a source that
/// changes per request, ranks that move nothing.
fn flow_warnings(flow: &Flow, p: i64, d: i64) -> Vec<Warning> {
    let mut out = Vec::new();
    let unread = unreleased_prefill(flow, p);
    if !unread.is_empty() {
        out.push(Warning {
            code: "unread_prefill_ranks",
            message: format!(
                "prefill_tp={p} > decode_tp={d}: {} of {p} prefill ranks ({}) are never read \
                 or released by a decode rank and hold their KV blocks until {DEFER_TIMEOUT}",
                unread.len(),
                shown(&unread)
            ),
            consequence: consequence::HELD_UNTIL_TIMEOUT,
        });
    }
    if let Some(rank) = flow.decode.iter().find(|r| !r.rotates.is_empty()) {
        let held = rank.rotates.len() as i64 - rank.releases.len() as i64;
        let also = if held > 0 && !flow.scheduler_releases_all {
            format!(
                "; it releases only the rank it read, so the other {held} hold the request's \
                 blocks until {DEFER_TIMEOUT}"
            )
        } else {
            String::new()
        };
        let backend = if flow.rotates_on_xgmi {
            ""
        } else {
            // 0.33.0 `moriio_connector.py:3384`: `_spreads_replicated_reads`.
            " (on MoRIIO's rdma backend; on xgmi every request reads the first of them)"
        };
        out.push(Warning {
            code: "round_robin_source",
            message: format!(
                "decode_tp={d} reading an MLA model from prefill_tp={p}: vLLM reads each \
                 request from the next prefill rank in turn (round-robin over ranks {}, \
                 starting at the decode DP rank){backend}{also}",
                shown(&rank.rotates)
            ),
            consequence: consequence::ROUND_ROBIN,
        });
    }
    if !flow.idle_prefill.is_empty() {
        out.push(Warning {
            code: "idle_prefill_ranks",
            message: format!(
                "prefill_tp={p} > decode_tp={d}: only prefill rank 0 is notified and writes the \
                 (replicated) KV; prefill ranks {} write nothing, and their write tasks expire \
                 after the deferred timeout (kv_connector_extra_config.defer_timeout, 60 s by \
                 default) and are marked done, holding the request's blocks until then",
                shown(&flow.idle_prefill)
            ),
            consequence: consequence::RANKS_IDLE,
        });
    }
    out
}

/// Fast validity test used by enumeration: the same verdict as `check_pair(..).ok()`.
pub fn pair_ok(
    shape: &Shape,
    p: i64,
    d: i64,
    profile: &ConnectorProfile,
    max_acks: Option<i64>,
) -> bool {
    if p <= 0 || d <= 0 || !load_ok(shape, p) || !load_ok(shape, d) {
        return false;
    }
    // Release acks per connector and mode, as the flows count them.
    let acks = match profile.rules {
        Rules::MoriioWrite(_) => 1,
        Rules::MoriioRead(r) if !r.counted_acks => 1,
        _ if d > p => d / p,
        _ => 1,
    };
    if max_acks.is_some_and(|limit| acks > limit) {
        return false;
    }
    let (lo, hi) = (p.min(d), p.max(d));
    let h = shape.num_kv_heads;
    let (local, remote) = (heads_per_rank(shape, d), heads_per_rank(shape, p));
    match profile.rules {
        Rules::Nixl(r) => {
            let sizes = match r.ratio {
                NixlRatio::Legacy | NixlRatio::DecodeMultiple => d % p == 0,
                NixlRatio::BothWays => hi % lo == 0,
            };
            let replicated = match r.replicated {
                Replicated::AtLeastHeads => p >= h,
                Replicated::MoreThanHeads => p > h,
            };
            let fan_in = fan_in_checked(r.fan_in_replicated, shape);
            let block_len = match r.block_len {
                BlockLen::TpRatio(_) => {
                    shape.is_mla
                        || replicated
                        || d <= p
                        || (r.mamba_skips_block_len && shape.hybrid)
                        || remote == local * (d / p)
                }
                BlockLen::PerRankHeads => true,
            };
            let mamba = !(r.mamba_same_tp && shape.hybrid && p != d);
            let starts =
                !matches!(r.hybrid_kv_manager, crate::connector::NixlHma::Off(_)) || !shape.hybrid;
            let groups = nixl_mamba_groups(shape, p, d, &r).is_ok();
            starts && sizes && !(p > d && replicated && fan_in) && mamba && block_len && groups
        }
        Rules::MoriioRead(r) => {
            let sizes = match r.dial {
                Dial::SameRank => d <= p,
                Dial::RemoteTpRank => hi % lo == 0,
            };
            let guard = match r.layer_check {
                LayerCheck::Nothing => true,
                LayerCheck::ReplicatedHeads | LayerCheck::HeadsPerRank => {
                    shape.is_mla || p == d || lo >= h
                }
            };
            let same_rank_heads = r.dial != Dial::SameRank
                || (0..d).all(|rank| heads(shape, p, rank) == heads(shape, d, rank));
            // Before 0.23.0 a prefill rank nobody releases leaks (P > D: ranks D.. unread).
            let freed = r.defer_timeout || p <= d;
            sizes
                && guard
                && same_rank_heads
                && freed
                && !r.release_rejected
                && moriio_hybrid(shape, r.hybrid).is_ok()
        }
        Rules::MoriioWrite(r) => {
            r.notices_reach_prefill
                && moriio_hybrid(shape, r.hybrid).is_ok()
                && moriio_write_sliding_window(shape, &r).is_ok()
                && match r.mapping {
                    WriteMapping::TpMapping => {
                        rules::validate_write_tp_topology(p, d, h, shape.is_mla).is_ok()
                    }
                    WriteMapping::SameRank => {
                        p == d
                            || (r.dial == Dial::RemoteTpRank && d == 1 && (h == 1 || shape.is_mla))
                    }
                }
        }
        // Rules with no closed form here (another engine's): their own flow decides.
        _ => connector_flow(shape, p, d, profile).is_ok(),
    }
}

/// The nearest valid pairs to (p, d), nearest first. Distance is |log P'/P| + |log D'/D|
/// (TP sizes scale multiplicatively); ties go to fewer GPUs, then smaller prefill TP.
/// `prefill_sizes` / `decode_sizes` are the sizes each side may use (already filtered for
/// memory, `max_tp`, …); the pair rules are applied here.
#[allow(clippy::too_many_arguments)]
pub fn alternatives(
    shape: &Shape,
    p: i64,
    d: i64,
    profile: &ConnectorProfile,
    max_acks: Option<i64>,
    prefill_sizes: &[i64],
    decode_sizes: &[i64],
    limit: usize,
) -> Vec<(i64, i64)> {
    let (lp, ld) = ((p.max(1) as f64).ln(), (d.max(1) as f64).ln());
    let mut found: Vec<(f64, i64, i64)> = Vec::new();
    for &pp in prefill_sizes {
        for &dd in decode_sizes {
            if (pp, dd) == (p, d) || !pair_ok(shape, pp, dd, profile, max_acks) {
                continue;
            }
            let dist = ((pp as f64).ln() - lp).abs() + ((dd as f64).ln() - ld).abs();
            found.push((dist, pp, dd));
        }
    }
    found.sort_by(|a, b| {
        a.0.partial_cmp(&b.0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then((a.1 + a.2).cmp(&(b.1 + b.2)))
            .then(a.1.cmp(&b.1))
    });
    found
        .into_iter()
        .take(limit)
        .map(|(_, a, b)| (a, b))
        .collect()
}

/// Sizes 1..=bound that load the model.
pub fn loadable_sizes(shape: &Shape, bound: i64) -> Vec<i64> {
    (1..=bound.max(0)).filter(|&t| load_ok(shape, t)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::{profile, PROFILES};

    const LLAMA70: Shape = Shape {
        num_attention_heads: 64,
        num_kv_heads: 8,
        is_mla: false,
        hybrid: false,
        sliding_window: false,
        mamba_groups: None,
    };

    #[test]
    fn moriio_seed_error_is_rejected() {
        // The seed prose calls P4/D8 with 8 KV heads fine; vLLM's MoRIIO rejects it.
        let r = check_pair(&LLAMA70, 4, 8, profile("moriio@0.32.0").unwrap(), None);
        assert_eq!(r.violations.len(), 1);
        assert_eq!(r.violations[0].code, "kv_heads_not_replicated");
        assert_eq!(r.violations[0].error, VllmError::NotImplementedError);
        assert!(r.violations[0]
            .message
            .contains("total_num_kv_heads=8, local_tp_size=8, remote_tp_size=4"));
        // 0.33.0 compares the head layouts first and raises its own class.
        let r = check_pair(&LLAMA70, 4, 8, profile("moriio").unwrap(), None);
        assert_eq!(r.violations[0].error, VllmError::MoRIIOError);
        assert!(r.violations[0]
            .message
            .ends_with("holds 1 KV heads per rank here and 2 on the peer"));
        // NIXL re-slices heads and accepts it; so does MoRIIO WRITE from 0.33.0.
        assert!(check_pair(&LLAMA70, 4, 8, profile("nixl").unwrap(), None).ok());
        assert!(check_pair(&LLAMA70, 4, 8, profile("moriio-write").unwrap(), None).ok());
    }

    #[test]
    fn nixl_rejects_replicated_fan_in() {
        // The example: llama-3.1-70b P16/D8 under vLLM 0.33.0.
        let r = check_pair(&LLAMA70, 16, 8, profile("nixl").unwrap(), None);
        assert_eq!(r.violations[0].code, "replicated_kv_prefill_larger");
        assert_eq!(r.violations[0].error, VllmError::AssertionError);
        assert_eq!(r.violations[0].message, "");
        assert!(r.violations[0].hint.contains("prefill_tp=16"));
    }

    #[test]
    fn unread_warning_only_while_unreleased() {
        let s = Shape {
            num_attention_heads: 64,
            num_kv_heads: 4,
            is_mla: false,
            hybrid: false,
            sliding_window: false,
            mamba_groups: None,
        };
        let r = check_pair(&s, 8, 4, profile("moriio@0.32.0").unwrap(), None);
        assert!(r.ok());
        assert_eq!(r.warnings.len(), 1);
        // 0.33.0 releases every holder.
        assert!(check_pair(&s, 8, 4, profile("moriio").unwrap(), None)
            .warnings
            .is_empty());
        assert!(
            check_pair(&s, 4, 8, profile("moriio@0.32.0").unwrap(), None)
                .warnings
                .is_empty()
        );
        assert!(check_pair(&s, 8, 4, profile("nixl").unwrap(), None)
            .warnings
            .is_empty());
    }

    #[test]
    fn pair_ok_agrees_with_check_pair() {
        for prof in PROFILES {
            for (a, h, mla) in [
                (64, 8, false),
                (32, 4, false),
                (40, 10, false),
                (128, 128, true),
                (128, 8, true),
                (8, 1, false),
                (48, 6, false),
            ] {
                for (hybrid, mamba_groups) in [(false, None), (true, None), (true, Some(1))] {
                    let s = Shape {
                        num_attention_heads: a,
                        num_kv_heads: h,
                        is_mla: mla,
                        hybrid,
                        sliding_window: false,
                        mamba_groups,
                    };
                    for p in 1..=33 {
                        for d in 1..=33 {
                            for acks in [None, Some(1), Some(2)] {
                                assert_eq!(
                                    pair_ok(&s, p, d, prof, acks),
                                    check_pair(&s, p, d, prof, acks).ok(),
                                    "{} {} {s:?} {p} {d} {acks:?}",
                                    prof.connector,
                                    prof.since
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn alternatives_are_valid_and_nearest_first() {
        let prof = profile("moriio").unwrap();
        let sizes = loadable_sizes(&LLAMA70, 16);
        let alts = alternatives(&LLAMA70, 4, 8, prof, None, &sizes, &sizes, 5);
        assert_eq!(alts[0], (4, 4));
        assert_eq!(alts[1], (8, 8));
        for (p, d) in alts {
            assert!(pair_ok(&LLAMA70, p, d, prof, None));
        }
    }
}

/// What becomes of a request NIXL's handshake raised for (a violation's `consequence` with
/// `when` = first transfer): the exception is only logged in the handshake thread.
pub mod nixl_consequence {
    /// vLLM fails the request (`kv_load_failure_policy = "fail"`, 0.17.0 on).
    pub const REQUEST_FAILED: &str = "request_failed";
    /// The decode recomputes the prompt itself: no KV moves (0.12.0-0.16.x).
    pub const RECOMPUTED_ON_DECODE: &str = "recomputed_on_decode";
}

/// A NIXL handshake violation as it reaches the user: vLLM raises it in its background
/// handshake thread (`_background_nixl_handshake`) and only logs it; the future's callbacks
/// decide what the request meets (`NixlHandshakeFailure`), at its first transfer.
fn nixl_handshake_failed(r: &NixlRules, v: Violation) -> Violation {
    use crate::connector::NixlHandshakeFailure as F;
    let logged = format!(
        "vLLM raises {} in NIXL's background handshake and only logs it; ",
        if v.error == VllmError::AssertionError && v.message.is_empty() {
            "a bare AssertionError".to_string()
        } else {
            v.error.name().to_string()
        }
    );
    let (then, consequence) = match r.handshake_failure {
        F::ReadsWithoutAgent => (
            "the request is queued as ready anyway, and its read finds no remote agent: the \
             decode worker raises KeyError (the prefill engine id) at the first transfer",
            "",
        ),
        F::Recomputed => (
            "the request's KV load is reported failed and the decode recomputes the prompt \
             itself (kv_load_failure_policy=recompute): every request, no KV moves",
            nixl_consequence::RECOMPUTED_ON_DECODE,
        ),
        F::RequestFails => (
            "the request's KV load is reported failed and vLLM fails the request \
             (kv_load_failure_policy=fail, the default): every request routed to this pair \
             finishes with an error",
            nixl_consequence::REQUEST_FAILED,
        ),
    };
    let hint = format!("{}. {logged}{then}", v.hint.trim_end_matches('.'));
    let v = Violation {
        hint,
        consequence,
        when: Stage::FirstTransfer,
        ..v
    };
    match r.handshake_failure {
        F::ReadsWithoutAgent => v.surfacing(
            VllmError::KeyError,
            "'{remote_engine_id}'".into(),
            Stage::FirstTransfer,
        ),
        _ => v,
    }
}

/// The environment variable NIXL needs for a hybrid model's Mamba conv state, and the layout.
pub const MAMBA_CONV_LAYOUT_ENV: (&str, &str) = ("VLLM_SSM_CONV_STATE_LAYOUT", "DS");

/// A hybrid model (Mamba-type layers) over NIXL from 0.20.0: the worker asserts the DS
/// conv-state layout at start, which vLLM does not default to (`NixlRules::mamba_conv_layout`).
fn nixl_hybrid_warnings(shape: &Shape, profile: &ConnectorProfile) -> Vec<Warning> {
    let crate::connector::Rules::Nixl(r) = &profile.rules else {
        return Vec::new();
    };
    match r.mamba_conv_layout {
        Some(message) if shape.hybrid => {
            let (env, value) = MAMBA_CONV_LAYOUT_ENV;
            vec![Warning {
                code: "mamba_conv_state_layout",
                message: format!(
                    "vLLM's NIXL moves a hybrid model's Mamba conv state only in the {value} \
                     layout: without {env}={value} on both instances (vLLM's default is SD) the \
                     worker raises AssertionError({message:?}) at engine start; pdtp deploy \
                     sets it"
                ),
                consequence: consequence::NEEDS_SETTING,
            }]
        }
        _ => Vec::new(),
    }
}

/// The launch flag that keeps vLLM's hybrid KV-cache manager on with a KV connector.
pub const HMA_FLAG: &str = "--no-disable-hybrid-kv-cache-manager";

/// A model with Mamba-type layers at a NIXL engine start where no launch keeps the hybrid
/// KV-cache manager on (`NixlHma::Off`, 0.11.0-0.17.x): the engine core's spec unification
/// raises before any worker registers a cache.
fn nixl_hybrid_start(shape: &Shape, hma: crate::connector::NixlHma) -> Result<(), Violation> {
    match hma {
        crate::connector::NixlHma::Off(message) if shape.hybrid => Err(Violation::new(
            "hybrid_unsupported",
            "pair",
            message.into(),
            format!(
                "vLLM before 0.18.0 turns the hybrid KV-cache manager off for any KV connector \
                 (and NIXL does not support it), and a model with Mamba-type layers needs it: \
                 use vLLM 0.22.0 or newer, or 0.18.0-0.21.x with {HMA_FLAG}"
            ),
            VllmError::ValueError,
            Stage::EngineStart,
        )),
        _ => Ok(()),
    }
}

/// NIXL 0.18.0-0.21.x keeps the hybrid KV-cache manager on only with [`HMA_FLAG`]
/// (`NixlHma::OffUnlessFlag`): a model with Mamba-type or sliding-window layers needs it
/// (Mamba: the engine does not start; sliding windows: every block of the window's layers
/// moves, as full attention). pdtp deploy passes it.
fn nixl_hma_warnings(shape: &Shape, profile: &ConnectorProfile) -> Vec<Warning> {
    let crate::connector::Rules::Nixl(r) = &profile.rules else {
        return Vec::new();
    };
    let crate::connector::NixlHma::OffUnlessFlag(message) = r.hybrid_kv_manager else {
        return Vec::new();
    };
    let without = match (shape.hybrid, shape.sliding_window) {
        (true, _) => format!("the engine does not start (ValueError({message:?}))"),
        (false, true) => "its sliding-window layers are full attention and every block of \
                          them moves"
            .to_string(),
        (false, false) => return Vec::new(),
    };
    vec![Warning {
        code: "hybrid_kv_cache_manager_off",
        message: format!(
            "this vLLM (0.18.0-0.21.x) turns the hybrid KV-cache manager off for any \
             --kv-transfer-config unless launched with {HMA_FLAG}: without it {without}; pdtp \
             deploy passes it"
        ),
        consequence: consequence::NEEDS_SETTING,
    }]
}

/// 0.20.0 on, NIXL moves a Mamba-2 model's conv state as three reads (x, B, C) at offsets it
/// computes as if every sub-projection were split evenly over TP (`remote_conv_offsets`:
/// the remote B section is `tp_ratio` local B sections, 0.20.0
/// `kv_connector/v1/ssm_conv_transfer_utils.py:60-83`; P > D reads `b_bytes // |tp_ratio|`
/// of each prefill rank, `nixl/worker.py:975-985`; 0.33.0 `ssm_conv_transfer_utils.py`
/// `remote_conv_offsets`, the same). With fewer B/C groups than a side's TP (one group, which
/// vLLM replicates: every rank holds its head shard's group whole) the sections are not that
/// size: with P != D a decode rank's B and C slots get another part's bytes (C, the SSM
/// state) or a fraction of its group (the rest never written). vLLM raises nothing.
fn nixl_mamba_groups(shape: &Shape, p: i64, d: i64, r: &NixlRules) -> Result<(), Violation> {
    let Some(g) = shape.mamba_groups else {
        return Ok(());
    };
    // Only one group is ever replicated: any other count TP does not divide fails to load
    // (`mamba_groups_load`), so the pair never reaches a transfer.
    if g != 1 || !shape.hybrid || !r.mamba_reads_every_rank || p == d {
        return Ok(());
    }
    Err(silent(
        "mamba_groups_replicated",
        consequence::WRONG_BYTES,
        format!(
            "the model's {g} Mamba B/C group(s) are replicated over TP (prefill_tp={p}, \
             decode_tp={d}), and vLLM's NIXL reads a decode rank's B and C state at offsets \
             that assume TP splits them: the decode rank's B/C conv state gets other bytes \
             (the C or SSM state, or part of its group only); vLLM raises nothing and decodes \
             with the wrong state"
        ),
        format!(
            "use prefill_tp = decode_tp for this model (or TP sizes that divide its {g} \
             group(s) on both sides)"
        ),
    ))
}
