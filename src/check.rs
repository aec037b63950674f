//! Whole-pair validation: every rule a (prefill TP, decode TP) pair must pass for one model
//! and connector, reported (not raised) in the order vLLM would hit them.

use crate::connector::{ConnectorProfile, SizeRule};
use crate::rules;

/// What `check` needs to know about a model's attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub num_attention_heads: i64,
    pub num_kv_heads: i64,
    pub is_mla: bool,
}

/// Which exception vLLM raises for a violation (`None`: a pdtp-only limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VllmError {
    ValueError,
    NotImplementedError,
    AssertionError,
    None,
}

impl VllmError {
    pub fn name(self) -> &'static str {
        match self {
            VllmError::ValueError => "ValueError",
            VllmError::NotImplementedError => "NotImplementedError",
            VllmError::AssertionError => "AssertionError",
            VllmError::None => "",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Stable identifier, e.g. `kv_heads_not_replicated`.
    pub code: &'static str,
    /// `prefill`, `decode` or `pair`.
    pub side: &'static str,
    /// vLLM's exact text where vLLM has one.
    pub message: String,
    /// What to change, in words a user acts on.
    pub hint: String,
    pub error: VllmError,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub code: &'static str,
    pub message: String,
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
        });
    }
    out
}

/// True when one TP size loads the model (fast path for enumeration).
pub fn load_ok(shape: &Shape, tp: i64) -> bool {
    rules::check_attention_heads(shape.num_attention_heads, tp).is_ok()
        && rules::check_kv_heads(shape.num_kv_heads, tp, shape.is_mla).is_ok()
}

fn size_violation(profile: &ConnectorProfile, p: i64, d: i64) -> Option<Violation> {
    // In READ mode the decode side is "local" and the prefill side "remote".
    let (message, error) = match profile.size_rule {
        SizeRule::MoriioMultiple => match rules::remote_tp_rank(0, d, p) {
            Ok(_) => return None,
            Err(e) => (e.message().to_string(), VllmError::ValueError),
        },
        SizeRule::NixlDivisible => {
            if d >= p && d % p != 0 {
                (
                    format!(
                        "Local tensor parallel size {d} is not divisible by remote tensor \
                         parallel size {p}."
                    ),
                    VllmError::ValueError,
                )
            } else if p > d && p % d != 0 {
                (
                    format!(
                        "Remote tensor parallel size {p} is not divisible by local tensor \
                         parallel size {d}."
                    ),
                    VllmError::ValueError,
                )
            } else {
                return None;
            }
        }
        SizeRule::NixlDecodeAtLeastPrefill => {
            if d < p {
                return Some(Violation {
                    code: "decode_smaller_than_prefill",
                    side: "pair",
                    message: "Decode TP cannot be smaller than prefill TP".into(),
                    hint: format!(
                        "this connector needs decode_tp >= prefill_tp: use decode_tp={p} or a \
                         multiple of it, or a newer vLLM (connector=\"nixl\")"
                    ),
                    error: VllmError::ValueError,
                });
            }
            if d % p != 0 {
                (
                    format!(
                        "Local tensor parallel size {d} is not divisible by remote tensor \
                         parallel size {p}."
                    ),
                    VllmError::ValueError,
                )
            } else {
                return None;
            }
        }
    };
    let (lo, hi) = (p.min(d), p.max(d));
    let down = hi - hi % lo;
    let up = down + lo;
    Some(Violation {
        code: "tp_not_divisible",
        side: "pair",
        message,
        hint: format!(
            "one TP size must be a multiple of the other: with {lo} on one side use {down} or \
             {up} on the other, or make both equal"
        ),
        error,
    })
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
    let size = size_violation(profile, p, d);
    let sizes_ok = size.is_none();
    report.violations.extend(size);

    if profile.requires_replicated_heads {
        // vLLM runs this on the decode (local) side at the first READ transfer.
        if let Err(e) = rules::validate_kv_heads(d, p, shape.num_kv_heads, shape.is_mla) {
            let h = shape.num_kv_heads;
            let error = match e {
                rules::RuleError::Value(_) => VllmError::ValueError,
                rules::RuleError::NotImplemented(_) => VllmError::NotImplementedError,
            };
            report.violations.push(Violation {
                code: "kv_heads_not_replicated",
                side: "pair",
                message: e.message().to_string(),
                hint: format!(
                    "{} copies whole KV blocks and never re-slices heads, so unequal TP sizes \
                     need every rank on both sides to hold one whole replicated KV head: \
                     min(prefill_tp, decode_tp) >= {h}. Use equal TP sizes, raise the smaller \
                     side to {h} or more, or use a connector that re-slices heads (nixl)",
                    profile.kv_connector
                ),
                error,
            });
        }
    }

    if let (Some(limit), true) = (max_acks, sizes_ok && d > p) {
        if let Ok(acks) = rules::expected_ack_count(p, d) {
            if acks > limit {
                report.violations.push(Violation {
                    code: "too_many_acks",
                    side: "pair",
                    message: format!(
                        "decode_tp={d} reading prefill_tp={p} makes each prefill rank wait for \
                         {acks} release acks, more than max_acks={limit}"
                    ),
                    hint: format!(
                        "keep decode_tp / prefill_tp <= {limit}: raise prefill_tp or lower \
                         decode_tp"
                    ),
                    error: VllmError::None,
                });
            }
        }
    }

    // Warnings describe how a valid pair behaves; an invalid pair never runs.
    if profile.unread_ranks_hold_blocks && report.ok() && p > d {
        let stride = p / d;
        let unread: Vec<i64> = (0..p).filter(|r| r % stride != 0).collect();
        let shown: Vec<i64> = unread.iter().copied().take(8).collect();
        let more = if unread.len() > shown.len() {
            ", …"
        } else {
            ""
        };
        report.warnings.push(Warning {
            code: "unread_prefill_ranks",
            message: format!(
                "prefill_tp={p} > decode_tp={d}: decode rank r reads only prefill rank \
                 r*{stride}, so {} of {p} prefill ranks ({}{more}) are never read or acked and \
                 hold their KV blocks until vLLM's deferred-send timeout",
                unread.len(),
                list(&shown)
            ),
        });
    }
    report
}

/// Fast validity test used by enumeration (no strings built).
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
    let sizes_ok = match profile.size_rule {
        SizeRule::MoriioMultiple | SizeRule::NixlDivisible => {
            (p >= d && p % d == 0) || (d > p && d % p == 0)
        }
        SizeRule::NixlDecodeAtLeastPrefill => d >= p && d % p == 0,
    };
    if !sizes_ok {
        return false;
    }
    if profile.requires_replicated_heads
        && rules::validate_kv_heads(d, p, shape.num_kv_heads, shape.is_mla).is_err()
    {
        return false;
    }
    if let Some(limit) = max_acks {
        if d > p && d / p > limit {
            return false;
        }
    }
    true
}

/// The nearest valid pairs to (p, d), nearest first. Distance is |log P'/P| + |log D'/D|
/// (TP sizes scale multiplicatively); ties go to fewer GPUs, then smaller prefill TP.
/// `prefill_sizes` / `decode_sizes` are the sizes each side may use (already filtered for
/// memory, `max_tp`, …); the pair rules are applied here.
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
    use crate::connector::profile;

    const LLAMA70: Shape = Shape {
        num_attention_heads: 64,
        num_kv_heads: 8,
        is_mla: false,
    };

    #[test]
    fn moriio_seed_error_is_rejected() {
        // The seed prose calls P4/D8 with 8 KV heads fine; vLLM's MoRIIO guard rejects it.
        let r = check_pair(&LLAMA70, 4, 8, profile("moriio").unwrap(), None);
        assert_eq!(r.violations.len(), 1);
        assert_eq!(r.violations[0].code, "kv_heads_not_replicated");
        assert_eq!(r.violations[0].error, VllmError::NotImplementedError);
        assert!(r.violations[0]
            .message
            .contains("total_num_kv_heads=8, local_tp_size=8, remote_tp_size=4"));
        // NIXL re-slices heads and accepts it.
        assert!(check_pair(&LLAMA70, 4, 8, profile("nixl").unwrap(), None).ok());
    }

    #[test]
    fn unread_warning_only_for_moriio_prefill_larger() {
        let s = Shape {
            num_attention_heads: 64,
            num_kv_heads: 4,
            is_mla: false,
        };
        let r = check_pair(&s, 8, 4, profile("moriio").unwrap(), None);
        assert!(r.ok());
        assert_eq!(r.warnings.len(), 1);
        assert!(check_pair(&s, 4, 8, profile("moriio").unwrap(), None)
            .warnings
            .is_empty());
        assert!(check_pair(&s, 8, 4, profile("nixl").unwrap(), None)
            .warnings
            .is_empty());
    }

    #[test]
    fn pair_ok_agrees_with_check_pair() {
        for name in ["moriio", "nixl", "nixl-legacy"] {
            let prof = profile(name).unwrap();
            for (a, h, mla) in [
                (64, 8, false),
                (32, 4, false),
                (40, 10, false),
                (128, 128, true),
                (8, 1, false),
            ] {
                let s = Shape {
                    num_attention_heads: a,
                    num_kv_heads: h,
                    is_mla: mla,
                };
                for p in 1..=33 {
                    for d in 1..=33 {
                        for acks in [None, Some(1), Some(2)] {
                            assert_eq!(
                                pair_ok(&s, p, d, prof, acks),
                                check_pair(&s, p, d, prof, acks).ok(),
                                "{name} {s:?} {p} {d} {acks:?}"
                            );
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
