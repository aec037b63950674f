//! SGLang's backends through the connector seam: a pair's verdict (`sglang::pair_verdict`,
//! proven against SGLang's code) read as `check`'s [`Flow`] or [`Violation`], SGLang's
//! exception classes, and its GPU-vendor refusal. `check.rs` reaches this through
//! `Rules::flow` and `Connector::gpu_violation`, never by the engine's name.

use super::sglang::{
    head_slice, kv_settings_outcome, pair_verdict, rank_outcome, surfaces, RankOutcome,
    SglangRules, SliceOutcome, Verdict,
};
use super::sglang_state::{state_verdict, StateKind, StateRules};
use crate::check::{
    consequence, divisible_hint, shown, silent, DecodeFlow, Flow, Shape, Stage, Violation,
    VllmError,
};

/// An exception class SGLang's code raises, as pdtp names it (Python's own built-ins map to
/// their variants; SGLang's and NIXL's classes keep their names).
pub fn error_class(class: &str) -> VllmError {
    match class {
        "AssertionError" => VllmError::AssertionError,
        "ZeroDivisionError" => VllmError::ZeroDivisionError,
        "ValueError" => VllmError::ValueError,
        "RuntimeError" => VllmError::RuntimeError,
        other => super::ENGINE_ERRORS
            .iter()
            .position(|c| *c == other)
            .map_or(VllmError::RuntimeError, |i| VllmError::Other(i as u8)),
    }
}

/// Why an SGLang backend that needs `needs` GPUs does not start on `vendor`'s: MORI is
/// AMD's RDMA library (ROCm only); SGLang's MORI KV manager imports `mori.io`, which has no
/// build for another vendor. (SGLang's text: none, the import fails.)
pub fn gpu_refusal(name: &str, needs: &str, vendor: &str) -> (String, String) {
    (
        String::new(),
        format!(
            "{name} runs only on {needs} GPUs: SGLang's MORI transfer backend imports AMD's MORI \
             (ROCm), which a {vendor} GPU has no build of, and the instance fails when it \
             starts. On {vendor} GPUs use connector=\"sglang-mooncake\" or \"sglang-nixl\""
        ),
    )
}

/// What the backend does with the two instances' `--page-size` (`page`: prefill, decode) and
/// `--kv-cache-dtype` (`dtype`): SGLang's `RuntimeError` in the decode scheduler at the first
/// request where the release checks them, pdtp's `wrong_bytes` where it does not, else `None`.
pub fn kv_settings_violation(
    r: &SglangRules,
    page: (i64, i64),
    dtype: (&str, &str),
) -> Option<Violation> {
    let what = if page.0 != page.1 {
        "--page-size"
    } else {
        "--kv-cache-dtype"
    };
    let hint = format!("launch both instances with the same {what}");
    match kv_settings_outcome(r, page, dtype) {
        Ok(None) => None,
        Ok(Some(why)) => Some(silent(
            "sglang_kv_settings_differ",
            consequence::WRONG_BYTES,
            why,
            hint,
        )),
        Err((class, message)) => Some(Violation::new(
            "sglang_kv_settings_differ",
            "pair",
            message,
            format!(
                "{hint}: the decode scheduler raises it while bootstrapping the first request \
                 and dies"
            ),
            error_class(class),
            Stage::Handshake,
        )),
    }
}

/// What an SGLang backend does with prefill attention TP `p` and decode `d` (PP 1, DP 1):
/// `pair_verdict` (proven against SGLang's code) read as a [`Flow`] or the violation.
/// A decode rank reads its non-dummy targets and notifies every target (dummies too), so each
/// target releases the request's blocks.
pub fn flow(shape: &Shape, p: i64, d: i64, r: &SglangRules) -> Result<Flow, Violation> {
    let h = shape.num_kv_heads;
    match pair_verdict(r, h, shape.is_mla, p, d, 1, 1) {
        Verdict::Ok => {}
        Verdict::Raises {
            error,
            message,
            surfaces,
        } => {
            let (code, when, what) = match surfaces {
                surfaces::DECODE_SCHEDULER => (
                    "sglang_decode_bootstrap_raises",
                    Stage::Handshake,
                    "the decode scheduler raises it while bootstrapping the first request and dies",
                ),
                surfaces::PREFILL_SCHEDULER => (
                    "sglang_head_slice_raises",
                    Stage::FirstTransfer,
                    "the prefill scheduler raises it at the first transfer and dies",
                ),
                surfaces::TRANSFER_THREAD => (
                    "sglang_head_slice_raises",
                    Stage::FirstTransfer,
                    "the transfer thread raises it at the first transfer and dies: every \
                     later transfer hangs",
                ),
                _ => (
                    "sglang_request_fails",
                    Stage::FirstTransfer,
                    "every request fails with it (KVPoll.Failed)",
                ),
            };
            return Err(Violation::new(
                code,
                "pair",
                message,
                format!(
                    "prefill attention TP {p} -> decode attention TP {d}: {what}; use equal \
                     sizes or sizes one divides (see the alternatives)"
                ),
                error_class(error),
                when,
            ));
        }
        Verdict::Hangs {
            until_timeout,
            idle_prefill,
        } => {
            let end = if until_timeout {
                "until SGLang's bootstrap timeout fails the request"
            } else {
                "forever (this release has no bootstrap timeout)"
            };
            return Err(silent(
                "sglang_prefill_ranks_unpaired",
                consequence::HANG,
                format!(
                    "prefill attention TP {p} -> decode attention TP {d}: no decode rank joins \
                     prefill ranks {} for a request, so they wait {end}",
                    shown(&idle_prefill)
                ),
                divisible_hint(p, d),
            ));
        }
        Verdict::Corrupts(why) => {
            return Err(silent(
                "sglang_wrong_kv_heads",
                consequence::WRONG_BYTES,
                why,
                format!(
                    "this SGLang release moves the wrong KV heads between attention TP {p} and \
                     {d}: use equal sizes, or a release whose slicing handles them"
                ),
            ));
        }
    }
    if let Some(v) = state_violation(&r.state, &state_kinds(shape), p, d) {
        return Err(v);
    }
    let mut acks = vec![0i64; p as usize];
    let mut decode = Vec::with_capacity(d as usize);
    for rank in 0..d {
        let targets = match rank_outcome(r, p, d, shape.is_mla, rank, 1, 1, 1) {
            RankOutcome::Reads(t) => t,
            other => unreachable!("pair_verdict passed, rank {rank}: {other:?}"),
        };
        let mut sources = Vec::new();
        for &(src, dummy) in &targets {
            acks[src as usize] += 1;
            if dummy {
                continue;
            }
            let got = if shape.is_mla || p == d {
                kv_heads(shape, d, rank)
            } else {
                let theirs = kv_heads(shape, p, src);
                match head_slice(r, p, d, h, src, rank) {
                    SliceOutcome::Heads(s, n, _) => theirs[s as usize..(s + n) as usize].to_vec(),
                    _ => theirs,
                }
            };
            sources.push((src, got));
        }
        decode.push(DecodeFlow {
            sources,
            releases: targets.iter().map(|&(t, _)| t).collect(),
            rotates: Vec::new(),
        });
    }
    Ok(Flow {
        decode,
        expected_acks: acks.into_iter().max().unwrap_or(1),
        scheduler_releases_all: false,
        idle_prefill: Vec::new(),
        defer_timeout: false,
        rotates_on_xgmi: false,
    })
}

/// What the release's state sender does with the model's state (`kinds`) at `p` → `d`, as
/// `check`'s violation: SGLang's `RuntimeError` at the first transfer (where it surfaces in
/// the hint), or pdtp's `wrong_bytes` where the state never arrives.
pub fn state_violation(r: &StateRules, kinds: &[StateKind], p: i64, d: i64) -> Option<Violation> {
    let hint = format!(
        "prefill attention TP {p} -> decode attention TP {d}: use equal attention TP sizes, or \
         a release that slices this state"
    );
    match state_verdict(r, kinds, p, d)? {
        Verdict::Raises {
            message, surfaces, ..
        } => {
            let what = match surfaces {
                surfaces::TRANSFER_THREAD => {
                    "the transfer thread raises it at a request's last chunk and dies: every \
                     later transfer hangs"
                }
                surfaces::PREFILL_SCHEDULER => {
                    "the prefill scheduler raises it at a request's last chunk and dies"
                }
                _ => "every request fails with it at its last chunk (KVPoll.Failed)",
            };
            Some(Violation::new(
                "sglang_state_refused",
                "pair",
                message,
                format!("{hint}; {what}"),
                error_class("RuntimeError"),
                Stage::FirstTransfer,
            ))
        }
        Verdict::Corrupts(why) => Some(silent(
            "sglang_state_not_carried",
            consequence::WRONG_BYTES,
            why,
            hint,
        )),
        other => unreachable!("state verdicts raise or corrupt: {other:?}"),
    }
}

/// The state kinds beside the full layers' KV that `check`'s model shape names: Mamba-type
/// layers (`hybrid`). (The shape does not yet say whether SGLang keeps a model's sliding
/// layers in its SWA pool, a per-release list of architectures, nor whether it has a DSA
/// index: `pdtp.deployment.connectors.sglang.check_sglang_pair(state=...)` takes them.)
fn state_kinds(shape: &Shape) -> Vec<StateKind> {
    if shape.hybrid {
        vec![StateKind::Mamba]
    } else {
        Vec::new()
    }
}

/// The KV heads (indices) a rank holds; MLA: `[0]`, the latent.
fn kv_heads(shape: &Shape, tp: i64, rank: i64) -> Vec<i64> {
    crate::rules::kv_heads_of_rank(shape.num_kv_heads, tp, rank, shape.is_mla)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_classes_keep_their_names() {
        for class in [
            "AssertionError",
            "ZeroDivisionError",
            "ValueError",
            "AttributeError",
            "KVTransferError",
            "nixlNotFoundError",
        ] {
            assert_eq!(error_class(class).name(), class);
        }
    }
}
