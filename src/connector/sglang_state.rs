//! What SGLang's transfer backends do with a hybrid model's *state* beside the full layers'
//! KV: the sliding-window (SWA) layers' KV, Mamba / linear-attention state, and the DSA/NSA
//! sparse-index cache (DeepSeek-V3.2), per release and backend, at P = D and P ≠ D.
//!
//! Read from each release's own state sender (`maybe_send_extra` in
//! `sglang/srt/disaggregation/{mooncake,nixl}/conn.py`, `send_state` in `mori/conn.py`),
//! driven by `tools/sglang_state.py`; `tests/data/sglang_golden_state.json.gz` holds what it
//! did and the test below compares every vector with these rules.

use super::sglang::{surfaces, Backend, Verdict};

/// A model's state kinds beside its full-attention KV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// Sliding-window (or chunked) attention layers: SGLang keeps them in a separate SWA pool
    /// whose pages move as "state" (`state_type = "swa"`).
    Swa,
    /// Mamba / linear-attention recurrent state (`"mamba"`).
    Mamba,
    /// DSA / NSA sparse-attention index cache (`"nsa"` to 0.5.14, `"dsa"` after).
    SparseIndex,
}

impl StateKind {
    pub const ALL: [StateKind; 3] = [StateKind::Swa, StateKind::Mamba, StateKind::SparseIndex];

    /// The name the golden data and the tool use.
    pub const fn key(self) -> &'static str {
        match self {
            StateKind::Swa => "swa",
            StateKind::Mamba => "mamba",
            StateKind::SparseIndex => "dsa",
        }
    }

    pub const fn words(self) -> &'static str {
        match self {
            StateKind::Swa => "sliding-window layers' KV",
            StateKind::Mamba => "Mamba state",
            StateKind::SparseIndex => "sparse-attention index (DSA)",
        }
    }

    /// Whether each attention-TP rank holds its own shard of this state (SWA: its KV heads;
    /// Mamba: its heads / conv channels), so a whole copy between unequal TP sizes is wrong.
    /// The DSA index is one per token on every rank (an MLA model's latent, replicated).
    pub const fn sharded(self) -> bool {
        !matches!(self, StateKind::SparseIndex)
    }
}

/// What one release's state sender does with one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindRule {
    /// No state sender at all (before SGLang 0.5.3.post3; NIXL to 0.5.8.post1; MORI to
    /// 0.5.11): the prefill never sends this state, even at P = D.
    Never,
    /// Copied whole to each decode rank the rank mapping makes real, at every size.
    Whole,
    /// Whole at P = D; at P ≠ D a `RuntimeError` with this text (`{p}`, `{d}`: the attention
    /// TP sizes).
    RefusedUnequal(&'static str),
    /// Whole at P = D; at P ≠ D sliced per rank by the release's slice method (SWA: the same
    /// `compute_head_slice_params` as the full layers' KV; Mamba: by its heads/channels, each
    /// decode rank receiving exactly its own, [`mamba_slice`]).
    SlicedUnequal,
    /// Mooncake 0.5.9's `_send_mamba_state_slice`: as `SlicedUnequal`, but for P > D the
    /// destination offset is `rank · heads` with no rank-in-group modulo
    /// (`dst_dim_start = local_tp_rank_in_group * src_dim`, mooncake/conn.py:744): the
    /// prefill ranks past a decode rank's first write beyond its state slot (0.5.10 adds
    /// `% writers_per_decode`).
    SlicedNoModulo,
}

/// Where an exception of the state sender reaches the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateSurface {
    /// Raised in Mooncake's transfer worker, whose handler re-raises "Transfer thread failed
    /// ...": the transfer thread dies and every later transfer hangs.
    TransferThread,
    /// Raised in NIXL's `add_transfer_request`, on the prefill scheduler's thread: it dies.
    PrefillScheduler,
    /// Caught by the transfer worker, which fails the request (`KVPoll.Failed`).
    RequestFails,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateRules {
    pub swa: KindRule,
    pub mamba: KindRule,
    pub index: KindRule,
    pub surface: StateSurface,
}

impl StateRules {
    pub const fn kind(&self, k: StateKind) -> KindRule {
        match k {
            StateKind::Swa => self.swa,
            StateKind::Mamba => self.mamba,
            StateKind::SparseIndex => self.index,
        }
    }
}

/// The caller's guard, Mooncake 0.5.3.post3-0.5.8.post1 `transfer_worker` (non-MLA hybrid
/// at P ≠ D, before `maybe_send_extra`).
pub const REFUSED_HYBRID: &str =
    "PD Disaggregation does NOT support PD different TP sizes for non-MLA hybrid models yet.";
/// `maybe_send_extra`, Mooncake 0.5.9-0.5.21 and NIXL 0.5.9-0.5.21 (`{st.upper()}` = SWA).
pub const REFUSED_SWA: &str =
    "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet.";
/// `maybe_send_extra`, NIXL 0.5.9-0.5.10.post1.
pub const REFUSED_MAMBA_NIXL: &str =
    "PD Disaggregation does NOT support PD different TP sizes for hybrid mamba models yet.";
/// MORI's `_send_swa_*_state` (0.5.12 on).
pub const REFUSED_SWA_MORI: &str = "PD state transfer does not support TP-mismatched non-MLA \
     SWA models (prefill_tp_size={p}, decode_tp_size={d})";

use KindRule::{Never, RefusedUnequal, SlicedUnequal, Whole};
use StateSurface::{PrefillScheduler, RequestFails, TransferThread};

const fn st(swa: KindRule, mamba: KindRule, index: KindRule, surface: StateSurface) -> StateRules {
    StateRules {
        swa,
        mamba,
        index,
        surface,
    }
}

/// No state sender: nothing is sent, so nothing raises (the surface is never reached).
pub const NO_STATE: StateRules = st(Never, Never, Never, RequestFails);

/// Mooncake 0.5.3.post3-0.5.8.post1: the transfer worker refuses a non-MLA hybrid model at
/// P ≠ D before `maybe_send_extra` ([`REFUSED_HYBRID`]); the DSA index (MLA) is copied whole.
pub const MOONCAKE_HYBRID_REFUSED: StateRules = st(
    RefusedUnequal(REFUSED_HYBRID),
    RefusedUnequal(REFUSED_HYBRID),
    Whole,
    TransferThread,
);
/// Mooncake 0.5.9: as [`MOONCAKE_SWA_REFUSED`], the Mamba slice without its modulo.
pub const MOONCAKE_MAMBA_NO_MODULO: StateRules = st(
    RefusedUnequal(REFUSED_SWA),
    KindRule::SlicedNoModulo,
    Whole,
    TransferThread,
);
/// Mooncake 0.5.10-0.5.21: Mamba state sliced (`_send_mamba_state_slice`), SWA refused.
pub const MOONCAKE_SWA_REFUSED: StateRules = st(
    RefusedUnequal(REFUSED_SWA),
    SlicedUnequal,
    Whole,
    TransferThread,
);
/// Mooncake 0.5.22 on: SWA layers head-sliced too (`_send_swa_state_slice`).
pub const MOONCAKE_SWA_SLICED: StateRules = st(SlicedUnequal, SlicedUnequal, Whole, TransferThread);
/// NIXL 0.5.9-0.5.10.post1 (its first state sender): SWA and Mamba refused at P ≠ D, raised
/// in `add_transfer_request` on the prefill scheduler's thread.
pub const NIXL_HYBRID_REFUSED: StateRules = st(
    RefusedUnequal(REFUSED_SWA),
    RefusedUnequal(REFUSED_MAMBA_NIXL),
    Whole,
    PrefillScheduler,
);
/// NIXL 0.5.11: Mamba state sliced.
pub const NIXL_MAMBA_SLICED: StateRules = st(
    RefusedUnequal(REFUSED_SWA),
    SlicedUnequal,
    Whole,
    PrefillScheduler,
);
/// NIXL 0.5.12-0.5.21: sent from the transfer worker, whose handler fails the request.
pub const NIXL_REQUEST_FAILS: StateRules = st(
    RefusedUnequal(REFUSED_SWA),
    SlicedUnequal,
    Whole,
    RequestFails,
);
/// NIXL 0.5.22 on: SWA layers head-sliced.
pub const NIXL_SWA_SLICED: StateRules = st(SlicedUnequal, SlicedUnequal, Whole, RequestFails);
/// MORI 0.5.12 on (its first state sender; 0.5.9-0.5.11 send none, even at P = D): SWA
/// refused by `_send_swa_*_state`, Mamba sliced inside `_send_mamba_state`.
pub const MORI_STATE: StateRules = st(
    RefusedUnequal(REFUSED_SWA_MORI),
    SlicedUnequal,
    Whole,
    RequestFails,
);

/// The state rules of `backend` at release `version` (a release pdtp covers): the rules row's
/// (`sglang::SGLANG_PROFILES`).
pub fn state_rules(backend: Backend, version: super::version::Version) -> StateRules {
    let key = format!(
        "{}@{}",
        backend.name(),
        super::sglang::release_text(version)
    );
    super::sglang::resolve_sglang(&key).map_or(NO_STATE, |r| r.profile.rules.state)
}

/// The heads (channels) of Mamba state prefill rank `src` sends decode rank `dst`
/// (`h` heads in all, `max(1, h // tp)` per rank): (source head in the rank's slot, heads
/// sent, destination head in the decode rank's slot), as the release's slice method computes
/// them (mooncake/conn.py `_send_mamba_state_slice`; from 0.5.17 `utils.py`
/// `compute_mamba_state_slice_byte_blocks`).
pub fn mamba_slice(rule: KindRule, p: i64, d: i64, h: i64, src: i64, dst: i64) -> (i64, i64, i64) {
    let (hp, hd) = ((h / p).max(1), (h / d).max(1));
    if p > d {
        let slot = if rule == KindRule::SlicedNoModulo {
            src % p
        } else {
            src % (p / d).max(1)
        };
        (0, hp, slot * hp)
    } else {
        (((dst % d) * hd) % hp, hd, 0)
    }
}

/// What a pair does with one state kind (pdtp's reading of the release's sender).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateOutcome {
    /// Every decode rank gets the state it needs (whole where equal or replicated, sliced by
    /// the release's slice method otherwise).
    Sent { sliced: bool },
    /// The prefill never sends it: the decode runs with state it never received.
    NeverSent,
    /// A whole per-rank shard copied between unequal TP sizes: wrong state.
    WholeAtUnequal,
    /// SGLang raises `RuntimeError` with this text.
    Refused(String),
    /// Sliced, but some prefill ranks write past the decode rank's state slot (wrong state in
    /// the decode's other slots, none in its own).
    PastSlot,
}

/// What `r` does with state `kind` for prefill attention TP `p` → decode `d`.
pub fn state_outcome(r: &StateRules, kind: StateKind, p: i64, d: i64) -> StateOutcome {
    match r.kind(kind) {
        Never => StateOutcome::NeverSent,
        _ if p == d => StateOutcome::Sent { sliced: false },
        Whole if kind.sharded() => StateOutcome::WholeAtUnequal,
        Whole => StateOutcome::Sent { sliced: false },
        RefusedUnequal(text) => StateOutcome::Refused(
            text.replace("{p}", &p.to_string())
                .replace("{d}", &d.to_string()),
        ),
        SlicedUnequal => StateOutcome::Sent { sliced: true },
        // Rank r of the P writes at r · (H / P) into a slot of H / D heads: past it for some
        // rank exactly when D > 1 (with D = 1 every rank is in the one group).
        KindRule::SlicedNoModulo if p < d || d == 1 => StateOutcome::Sent { sliced: true },
        KindRule::SlicedNoModulo => StateOutcome::PastSlot,
    }
}

/// The first of `kinds` that the pair `p` → `d` does not carry correctly, as a pair verdict
/// (`Raises` with where it surfaces, or `Corrupts` for state never sent or copied whole into
/// another layout); `None` when every kind arrives.
pub fn state_verdict(r: &StateRules, kinds: &[StateKind], p: i64, d: i64) -> Option<Verdict> {
    for &kind in kinds {
        match state_outcome(r, kind, p, d) {
            StateOutcome::Sent { .. } => {}
            StateOutcome::Refused(message) => {
                return Some(Verdict::Raises {
                    error: "RuntimeError",
                    message,
                    surfaces: match r.surface {
                        StateSurface::TransferThread => surfaces::TRANSFER_THREAD,
                        StateSurface::PrefillScheduler => surfaces::PREFILL_SCHEDULER,
                        StateSurface::RequestFails => surfaces::REQUEST,
                    },
                })
            }
            StateOutcome::NeverSent => {
                return Some(Verdict::Corrupts(format!(
                    "this SGLang release's transfer backend has no state sender: the prefill \
                     never sends the {}, even at equal TP sizes, and the decode runs on state \
                     it never received",
                    kind.words()
                )))
            }
            StateOutcome::PastSlot => {
                return Some(Verdict::Corrupts(format!(
                    "this SGLang release slices the {} between attention TP {p} and {d} \
                     without the rank-in-group modulo on the destination offset: prefill ranks \
                     past each decode rank's first write beyond its slot",
                    kind.words()
                )))
            }
            StateOutcome::WholeAtUnequal => {
                return Some(Verdict::Corrupts(format!(
                    "this SGLang release copies each prefill rank's {} whole between attention \
                     TP {p} and {d}: every rank holds its own shard, so the decode gets another \
                     layout's bytes",
                    kind.words()
                )))
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::sglang::{parse_release, resolve_sglang, SGLANG_RELEASES};
    use crate::connector::sglang_golden::{int, s};
    use flate2::read::GzDecoder;
    use serde_json::Value;
    use std::io::Read;

    fn golden() -> Value {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/sglang_golden_state.json.gz");
        let mut text = String::new();
        GzDecoder::new(std::fs::File::open(path).expect("sglang state golden file"))
            .read_to_string(&mut text)
            .expect("gzip");
        serde_json::from_str(&text).expect("json")
    }

    /// SGLang's recorded outcome of one (prefill rank, decode rank) pair in pdtp's terms: the
    /// byte movers it called (`*slice*`: sliced), or its exception.
    fn recorded(v: &Value, kind: StateKind, p: i64, d: i64) -> StateOutcome {
        if let Some(e) = v.get("error") {
            assert_eq!(s(&e[0]), "RuntimeError", "{v}");
            return StateOutcome::Refused(s(&e[1]));
        }
        let sends: Vec<String> = v["sends"]
            .as_array()
            .expect("sends")
            .iter()
            .map(s)
            .collect();
        assert!(!sends.is_empty(), "the sender moved nothing: {v}");
        let sliced = sends.iter().any(|n| n.contains("slice")) || v.get("heads").is_some();
        if !sliced && p != d && kind.sharded() {
            return StateOutcome::WholeAtUnequal;
        }
        StateOutcome::Sent { sliced }
    }

    fn surface(v: &Value) -> StateSurface {
        match v["where"].as_str().expect("where") {
            "transfer_thread_death" => StateSurface::TransferThread,
            "prefill_scheduler" => StateSurface::PrefillScheduler,
            "request_failed" => StateSurface::RequestFails,
            other => panic!("surface {other}"),
        }
    }

    /// Every disagreement of `r` with one run's data (`h`: the grid's heads).
    fn disagreements(r: &StateRules, data: &Value, h: i64) -> Vec<String> {
        let mut out = Vec::new();
        let sender = data["sender"].as_bool().expect("sender");
        if sender && surface(&data["surface"]) != r.surface {
            out.push(format!(
                "surface: SGLang {:?}, pdtp {:?}",
                data["surface"], r.surface
            ));
        }
        for kind in StateKind::ALL {
            let kd = &data["kinds"][kind.key()];
            for case in kd["cases"].as_array().expect("cases") {
                let (p, d) = (int(&case["p"]), int(&case["d"]));
                let got = state_outcome(r, kind, p, d);
                let pairs = case["pairs"].as_array().expect("pairs");
                if !sender {
                    if got != StateOutcome::NeverSent {
                        out.push(format!("{kind:?} P={p} D={d}: no sender, pdtp {got:?}"));
                    }
                    continue;
                }
                assert!(!pairs.is_empty(), "the mapping pairs every decode rank");
                let mut past = false;
                for pair in pairs {
                    // Mooncake's Mamba slice runs to its end: the heads of every block.
                    if let Some(blocks) = pair[2].get("heads").and_then(|b| b.as_array()) {
                        let (src, dst) = (int(&pair[0]), int(&pair[1]));
                        let want: Vec<(i64, i64, i64)> = blocks
                            .iter()
                            .map(|b| (int(&b[0]), int(&b[1]), int(&b[2])))
                            .collect();
                        let got = vec![mamba_slice(r.kind(kind), p, d, h, src, dst)];
                        if want != got {
                            out.push(format!(
                                "{kind:?} P={p} D={d} {src}->{dst}: SGLang heads {want:?}, \
                                 pdtp {got:?}"
                            ));
                        }
                        let (_, n, t) = want[0];
                        past |= t + n > (h / d).max(1);
                    }
                }
                for pair in pairs {
                    let mut want = recorded(&pair[2], kind, p, d);
                    if past {
                        want = StateOutcome::PastSlot; // the pair's blocks overrun a slot
                    }
                    if want != got {
                        out.push(format!(
                            "{kind:?} P={p} D={d} {}->{}: SGLang {want:?}, pdtp {got:?}",
                            pair[0], pair[1]
                        ));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn sglang_golden_state_every_release_and_backend_agrees() {
        let doc = golden();
        let covered: Vec<String> = doc["releases"]
            .as_array()
            .expect("releases")
            .iter()
            .map(s)
            .collect();
        assert_eq!(covered, SGLANG_RELEASES, "every release pdtp lists");
        let (mut bad, mut checked, mut vectors) = (Vec::new(), 0, 0);
        for (backend, runs) in doc["backends"].as_object().expect("backends") {
            for run in runs.as_array().expect("runs") {
                for release in run["releases"].as_array().expect("releases") {
                    let key = format!("sglang-{backend}@{}", s(release));
                    let res = resolve_sglang(&key).unwrap_or_else(|e| panic!("{key}: {e}"));
                    let r = res.profile.rules.state;
                    checked += 1;
                    vectors += StateKind::ALL
                        .iter()
                        .map(|k| {
                            run["data"]["kinds"][k.key()]["cases"]
                                .as_array()
                                .unwrap()
                                .len()
                        })
                        .sum::<usize>();
                    bad.extend(
                        disagreements(&r, &run["data"], int(&doc["grid"]["kv_heads"]))
                            .into_iter()
                            .take(5)
                            .map(|b| format!("{key}: {b}")),
                    );
                }
            }
        }
        assert!(checked >= 139, "{checked} (backend, release) pairs checked");
        assert!(vectors >= 139 * 48, "{vectors} vectors");
        assert!(
            bad.is_empty(),
            "{} disagreements:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }

    #[test]
    fn state_rules_change_only_where_sglang_does() {
        // A release where pdtp's state rules change starts a run of equal golden data (runs
        // also split for other reasons: a mover's name, the caller chain).
        let doc = golden();
        for (backend, runs) in doc["backends"].as_object().expect("backends") {
            let b = crate::connector::sglang::backend(&format!("sglang-{backend}")).unwrap();
            let starts: Vec<String> = runs
                .as_array()
                .expect("runs")
                .iter()
                .map(|r| s(&r["releases"][0]))
                .collect();
            let mut prev = None;
            for release in SGLANG_RELEASES {
                let Some(v) = parse_release(release) else {
                    continue;
                };
                if resolve_sglang(&format!("sglang-{backend}@{release}")).is_err() {
                    continue;
                }
                let r = state_rules(b, v);
                if prev.is_some() && Some(r) != prev {
                    assert!(starts.contains(&release.to_string()), "{backend} {release}");
                }
                prev = Some(r);
            }
        }
    }

    #[test]
    fn sliced_swa_state_uses_the_kv_head_slice() {
        // Where SGLang head-slices the SWA layers (0.5.22 on) it calls the same
        // `compute_head_slice_params` as the full layers' KV (`common/conn.py`
        // `_get_mha_head_slice_blocks`): pdtp's KV slice rule must be that helper there.
        for b in Backend::ALL {
            for r in SGLANG_RELEASES {
                let Ok(res) = resolve_sglang(&format!("{}@{r}", b.name())) else {
                    continue;
                };
                if state_rules(b, res.rules_version).swa == SlicedUnequal {
                    assert_eq!(
                        res.profile.rules.slice,
                        crate::connector::sglang::Slice::HelperReplicated,
                        "{} {r}",
                        b.name()
                    );
                }
            }
        }
    }

    /// A Mamba hybrid (Qwen3-Next: 2 KV heads on its attention layers) through `check`.
    const QWEN3_NEXT: crate::check::Shape = crate::check::Shape {
        num_attention_heads: 16,
        num_kv_heads: 2,
        is_mla: false,
        hybrid: true,
        sliding_window: false,
        mamba_groups: None,
    };

    fn flow_of(key: &str, p: i64, d: i64) -> Result<(), crate::check::Violation> {
        let prof = crate::connector::profile(key).unwrap_or_else(|| panic!("{key}"));
        prof.rules.flow(&QWEN3_NEXT, p, d).map(|_| ())
    }

    #[test]
    fn check_reads_the_state_rules_for_mamba_models() {
        use crate::check::{consequence, Stage};
        // NIXL 0.5.9-0.5.10.post1 `maybe_send_extra`: RuntimeError at P != D, raised in
        // `add_transfer_request` (nixl/conn.py) on the prefill scheduler's thread.
        let v = flow_of("sglang-nixl@0.5.10", 1, 2).unwrap_err();
        assert_eq!(v.code, "sglang_state_refused");
        assert_eq!(v.message, REFUSED_MAMBA_NIXL);
        assert_eq!(v.error.name(), "RuntimeError");
        assert_eq!(v.when, Stage::FirstTransfer);
        assert!(v.hint.contains("prefill scheduler"), "{}", v.hint);
        // 0.5.11 slices Mamba state (`_send_mamba_state_slice`): the pair runs.
        assert!(flow_of("sglang-nixl@0.5.11", 1, 2).is_ok());
        assert!(flow_of("sglang-nixl@0.5.10", 2, 2).is_ok());
        // Mooncake 0.5.3.post3-0.5.8.post1: the transfer worker's own guard; its handler
        // re-raises "Transfer thread failed ...": the thread dies.
        let v = flow_of("sglang-mooncake@0.5.8", 2, 1).unwrap_err();
        assert_eq!(v.message, REFUSED_HYBRID);
        assert!(v.hint.contains("transfer thread"), "{}", v.hint);
        // 0.5.9 slices Mamba state but, for P > D, writes past the decode rank's slot
        // (mooncake/conn.py:744, no modulo); 0.5.10 adds it.
        // (An MLA model's KV moves whole, so only the state decides there.)
        let mla_hybrid = crate::check::Shape {
            num_kv_heads: 1,
            is_mla: true,
            ..QWEN3_NEXT
        };
        let prof = crate::connector::profile("sglang-mooncake@0.5.9").unwrap();
        let v = prof.rules.flow(&mla_hybrid, 4, 2).unwrap_err();
        assert_eq!(v.code, "sglang_state_not_carried");
        assert!(v.message.contains("modulo"), "{}", v.message);
        assert!(prof.rules.flow(&mla_hybrid, 2, 1).is_ok()); // one group: no overrun
        assert!(prof.rules.flow(&mla_hybrid, 2, 4).is_ok());
        let fixed = crate::connector::profile("sglang-mooncake@0.5.10").unwrap();
        assert!(fixed.rules.flow(&mla_hybrid, 4, 2).is_ok());
        // MORI 0.5.9-0.5.11 has no state sender: wrong even at P = D.
        for key in ["sglang-mori@0.5.9", "sglang-mori@0.5.11"] {
            let v = flow_of(key, 2, 2).unwrap_err();
            assert_eq!(v.code, "sglang_state_not_carried");
            assert_eq!(v.consequence, consequence::WRONG_BYTES);
        }
        assert!(flow_of("sglang-mori@0.5.12", 2, 2).is_ok());
        // A model without state is not affected by any of it.
        let dense = crate::check::Shape {
            hybrid: false,
            ..QWEN3_NEXT
        };
        let prof = crate::connector::profile("sglang-mori@0.5.9").unwrap();
        assert!(prof.rules.flow(&dense, 2, 2).is_ok());
    }

    #[test]
    fn the_issue_state_examples() {
        // "from 0.5.22 Mooncake and NIXL head-slice sliding-window layers at P != D"
        for b in [Backend::Mooncake, Backend::Nixl] {
            let at = |v: &str| state_rules(b, parse_release(v).unwrap());
            assert!(matches!(at("0.5.21").swa, RefusedUnequal(_)));
            assert_eq!(at("0.5.22").swa, SlicedUnequal);
            assert_eq!(
                state_outcome(&at("0.5.22"), StateKind::Swa, 4, 2),
                StateOutcome::Sent { sliced: true }
            );
        }
        // "MORI 0.5.9 never sends the state even at P = D"
        let mori = state_rules(Backend::Mori, parse_release("0.5.9").unwrap());
        for k in StateKind::ALL {
            assert_eq!(state_outcome(&mori, k, 2, 2), StateOutcome::NeverSent);
        }
        // MORI's refusal names the sizes.
        let r = state_rules(Backend::Mori, parse_release("0.5.23").unwrap());
        assert_eq!(
            state_outcome(&r, StateKind::Swa, 4, 2),
            StateOutcome::Refused(
                "PD state transfer does not support TP-mismatched non-MLA SWA models \
                 (prefill_tp_size=4, decode_tp_size=2)"
                    .into()
            )
        );
        // The DSA index (an MLA model's, one per token on every rank) is copied whole at any
        // size by every backend that sends state.
        for b in Backend::ALL {
            let r = state_rules(b, parse_release("0.5.23").unwrap());
            assert_eq!(
                state_outcome(&r, StateKind::SparseIndex, 8, 2),
                StateOutcome::Sent { sliced: false }
            );
        }
    }
}
