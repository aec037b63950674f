//! vLLM's rules for parallel layouts (tp, pp, dp, ep) with the P/D connectors: what one
//! instance must satisfy to load, and what a (prefill layout, decode layout) pair must
//! satisfy to move KV. The API is fixed (planner, `check` and `transfer_map` call it).
//!
//! PROVISIONAL implementation, written from `docs/vllm-layout-rules.md` (vLLM 0.33.0) until
//! the rules-per-version work lands its golden-data version of this file:
//!
//! - per side: the TP load rules exactly as [`crate::check::load_violations`] for the layout's
//!   TP size; expert parallel needs routed experts
//!   (`ModelConfig._verify_with_expert_parallelism`); pipeline parallel needs a model class
//!   implementing `SupportsPP` (`verify_with_parallel_config`) and at least one layer per
//!   stage. Neither "experts divisible by EP" nor "layers divisible by PP" is a vLLM rule.
//!   These are connector-independent: an aggregated instance (`side == "aggregated"`, no KV
//!   connector) is held to them alone.
//! - per pair: the load rules of both sides, then the connector's TP rules between the two
//!   TP sizes exactly as [`crate::check::check_pair`] (each DP rank is its own engine; the
//!   router pins the prefill DP rank of a request and the decode DP rank reads it, so the
//!   TP rules hold between the TP sizes and the DP sizes need not match); then the
//!   connector's pipeline rule: MoRIIO addresses ranks by (dp_rank, tp_rank) only, so a
//!   PP > 1 instance's stages collide — refused on either side.

use crate::check::{check_pair, load_violations as tp_load_violations, PairReport, Shape};
use crate::check::{Violation, VllmError};
use crate::connector::ConnectorProfile;
use crate::layout::Layout;

/// What the layout rules need to know about a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutModel {
    pub shape: Shape,
    pub num_layers: i64,
    /// Routed experts (0 for dense models).
    pub num_experts: i64,
    /// vLLM's model class implements `SupportsPP`.
    pub supports_pp: bool,
}

/// The side name of an aggregated instance: no KV connector, so only the load rules apply.
pub const AGGREGATED: &str = "aggregated";

fn is_moriio(profile: &ConnectorProfile) -> bool {
    profile.kv_connector == "MoRIIOConnector"
}

/// Violations of one instance's layout (`side`: `prefill`, `decode` or `aggregated`), in the
/// order vLLM checks them while loading.
pub fn load_violations(
    m: &LayoutModel,
    l: &Layout,
    side: &'static str,
    profile: &ConnectorProfile,
) -> Vec<Violation> {
    let _ = profile; // connector-specific rules are pair rules (see `pair_report`)
    let mut out = Vec::new();
    if l.tp < 1 || l.pp < 1 || l.dp < 1 {
        out.push(Violation {
            code: "layout_sizes",
            side,
            message: format!("{side} layout {l}: tp, pp and dp must be at least 1"),
            hint: "use sizes of 1 or more".into(),
            error: VllmError::ValueError,
        });
        return out;
    }
    out.extend(tp_load_violations(&m.shape, l.tp, side));
    if l.pp > 1 && !m.supports_pp {
        out.push(Violation {
            code: "pipeline_unsupported",
            side,
            message: "Pipeline parallelism is not supported for this model. Supported models \
                      implement the `SupportsPP` interface."
                .into(),
            hint: format!("{side}: use pp=1 for this model (more tensor or data parallel)"),
            error: VllmError::NotImplementedError,
        });
    }
    if l.pp > 1 && l.pp > m.num_layers {
        out.push(Violation {
            code: "pipeline_exceeds_layers",
            side,
            message: format!(
                "{side} layout {l}: {} pipeline stages for {} layers leaves a stage without \
                 layers",
                l.pp, m.num_layers
            ),
            hint: format!("{side}: use pp <= {}", m.num_layers),
            error: VllmError::None,
        });
    }
    if l.ep && m.num_experts <= 0 {
        out.push(Violation {
            code: "expert_parallel_needs_experts",
            side,
            message: "Number of experts in the model must be greater than 0 when expert \
                      parallelism is enabled."
                .into(),
            hint: format!("{side}: drop ep (this model has no routed experts)"),
            error: VllmError::ValueError,
        });
    }
    out
}

fn pipeline_violation(
    l: &Layout,
    side: &'static str,
    profile: &ConnectorProfile,
) -> Option<Violation> {
    (l.pp > 1 && is_moriio(profile)).then(|| Violation {
        code: "connector_pipeline_unsupported",
        side,
        message: format!(
            "{} addresses KV ranks by (dp_rank, tp_rank) only: the {} pipeline stages of a \
             {side} instance would share them",
            profile.kv_connector, l.pp
        ),
        hint: format!(
            "{side}: use pp=1 with {} (more tensor or data parallel), or nixl",
            profile.name
        ),
        error: VllmError::None,
    })
}

/// Every violation and warning of a (prefill layout, decode layout) pair.
pub fn pair_report(
    m: &LayoutModel,
    prefill: &Layout,
    decode: &Layout,
    profile: &ConnectorProfile,
    max_acks: Option<i64>,
) -> PairReport {
    // The TP rules (load rules of both TP sizes included) exactly as for TP-only pairs.
    let mut report = check_pair(&m.shape, prefill.tp, decode.tp, profile, max_acks);
    let tp_codes = report.violations.len();
    let mut extra = Vec::new();
    for (l, side) in [(prefill, "prefill"), (decode, "decode")] {
        extra.extend(
            load_violations(m, l, side, profile)
                .into_iter()
                .filter(|v| {
                    !report
                        .violations
                        .iter()
                        .any(|w| w.code == v.code && w.side == v.side)
                }),
        );
        extra.extend(pipeline_violation(l, side, profile));
    }
    // Load rules come first (vLLM refuses the instance before any transfer), then the pair's.
    let (load, pair): (Vec<Violation>, Vec<Violation>) = report
        .violations
        .drain(..tp_codes)
        .partition(|v| v.side != "pair");
    report.violations = load;
    report.violations.extend(extra);
    report.violations.extend(pair);
    if !report.ok() {
        report.warnings.clear();
    }
    report
}

/// Fast validity test for enumeration: the same verdict as `pair_report(..).ok()`.
pub fn pair_ok(
    m: &LayoutModel,
    prefill: &Layout,
    decode: &Layout,
    profile: &ConnectorProfile,
    max_acks: Option<i64>,
) -> bool {
    crate::check::pair_ok(&m.shape, prefill.tp, decode.tp, profile, max_acks)
        && [prefill, decode].iter().all(|l| {
            (l.pp == 1 || (m.supports_pp && l.pp <= m.num_layers && !is_moriio(profile)))
                && (!l.ep || m.num_experts > 0)
                && l.dp >= 1
                && l.pp >= 1
        })
}

/// Whether one instance of `l` loads (the fast form of `load_violations(..).is_empty()`).
pub fn loads(m: &LayoutModel, l: &Layout) -> bool {
    l.tp >= 1
        && l.pp >= 1
        && l.dp >= 1
        && crate::check::load_ok(&m.shape, l.tp)
        && (l.pp == 1 || (m.supports_pp && l.pp <= m.num_layers))
        && (!l.ep || m.num_experts > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::profile;

    fn moe() -> LayoutModel {
        LayoutModel {
            shape: Shape {
                num_attention_heads: 128,
                num_kv_heads: 128,
                is_mla: true,
            },
            num_layers: 61,
            num_experts: 256,
            supports_pp: true,
        }
    }

    fn dense() -> LayoutModel {
        LayoutModel {
            shape: Shape {
                num_attention_heads: 64,
                num_kv_heads: 8,
                is_mla: false,
            },
            num_layers: 80,
            num_experts: 0,
            supports_pp: true,
        }
    }

    fn all_layouts() -> Vec<Layout> {
        let mut out = Vec::new();
        for tp in [1, 2, 3, 4, 8, 16] {
            for pp in [1, 2, 3] {
                for dp in [1, 2, 4] {
                    for ep in [false, true] {
                        out.push(Layout { tp, pp, dp, ep });
                    }
                }
            }
        }
        out
    }

    #[test]
    fn fast_verdicts_match_the_reports() {
        for name in ["moriio", "nixl", "nixl-legacy"] {
            let prof = profile(name).unwrap();
            for m in [
                moe(),
                dense(),
                LayoutModel {
                    supports_pp: false,
                    ..moe()
                },
            ] {
                for p in all_layouts() {
                    assert_eq!(
                        loads(&m, &p),
                        load_violations(&m, &p, "prefill", prof).is_empty(),
                        "{p}"
                    );
                    for d in all_layouts().into_iter().step_by(5) {
                        let r = pair_report(&m, &p, &d, prof, Some(4));
                        assert_eq!(r.ok(), pair_ok(&m, &p, &d, prof, Some(4)), "{name} {p} {d}");
                    }
                }
            }
        }
    }

    #[test]
    fn tp_only_layouts_are_todays_tp_rules() {
        for name in ["moriio", "nixl"] {
            let prof = profile(name).unwrap();
            let m = dense();
            for p in 1..=16 {
                for d in 1..=16 {
                    let r = pair_report(&m, &Layout::tp(p), &Layout::tp(d), prof, None);
                    assert_eq!(r, check_pair(&m.shape, p, d, prof, None), "{name} {p} {d}");
                }
            }
        }
    }

    #[test]
    fn layout_rules_name_vllm_errors() {
        let moriio = profile("moriio").unwrap();
        let nixl = profile("nixl").unwrap();
        let ep = Layout {
            ep: true,
            dp: 4,
            ..Layout::tp(2)
        };
        let v = load_violations(&dense(), &ep, "decode", nixl);
        assert_eq!(v[0].code, "expert_parallel_needs_experts");
        assert!(v[0].message.starts_with("Number of experts in the model"));
        assert!(load_violations(&moe(), &ep, "decode", nixl).is_empty());
        let pp = Layout {
            pp: 2,
            ..Layout::tp(8)
        };
        let no_pp = LayoutModel {
            supports_pp: false,
            ..dense()
        };
        let v = load_violations(&no_pp, &pp, "prefill", nixl);
        assert_eq!(v[0].error, VllmError::NotImplementedError);
        // MoRIIO refuses pipeline stages on either side; NIXL and aggregated instances do not.
        assert!(!pair_ok(&dense(), &pp, &Layout::tp(8), moriio, None));
        assert!(pair_ok(&dense(), &pp, &Layout::tp(8), nixl, None));
        assert!(load_violations(&dense(), &pp, AGGREGATED, moriio).is_empty());
        // DP sizes need not match: the TP rules hold between the TP sizes.
        let d = Layout {
            dp: 8,
            ..Layout::tp(1)
        };
        let p = Layout {
            dp: 2,
            ..Layout::tp(4)
        };
        assert_eq!(
            pair_ok(&moe(), &p, &d, moriio, None),
            crate::check::pair_ok(&moe().shape, 4, 1, moriio, None)
        );
    }
}
