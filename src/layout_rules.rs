//! vLLM's rules for parallel layouts (tp, pp, dp, ep) with the P/D connectors: what one
//! instance must satisfy to load, and what a (prefill layout, decode layout) pair must
//! satisfy to move KV. The API is fixed (planner, `check` and `transfer_map` call it).
//!
//! Written from `docs/vllm-layout-rules.md` and held to vLLM's own code by the layout golden
//! data (`tests/data/golden/layout-*.json.gz`, every release 0.11.0-0.33.0; the tests below):
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
//!   connector's parallel rules per release (`crate::connector::parallel`, proven by the
//!   golden data): MoRIIO addresses ranks by (dp_rank, tp_rank) only, so a PP > 1
//!   instance's stages collide — refused on either side; MoRIIO binds `dp_rank + tp_rank`
//!   and dials `dp_rank + tp_rank` (`dp_rank * tp + tp_rank` from 0.27.0), so an instance
//!   with DP > 1 and TP > 1 has two ranks on one port or a dial reaching a port no rank
//!   bound — refused (`moriio_dp_ports_match`); NIXL refuses PP > 1 for its `kv_consumer`
//!   role from 0.26.0 (`nixl_pp_check`; pdtp launches `kv_both`, which passes), and before
//!   0.26.0 its handshake knows no pipeline stages — PP > 1 refused on either side then.
//!   From 0.26.0 a decode rank queries every prefill stage and maps its layer window onto a
//!   one-stage peer; pdtp refuses stages on both sides at once (not established).

use crate::check::{check_pair, load_violations as tp_load_violations, PairReport, Shape};
use crate::check::{consequence, Stage, Violation, VllmError};
use crate::connector::{
    self, moriio_dp_ports_match, nixl_pp_check, ConnectorProfile, DpRead, NixlPp, Rules,
};
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
    /// DeepSeek-V4's output-projection head groups (`o_groups`; 0: the model has none). vLLM
    /// 0.33 gives each TP rank `o_groups // tp` of them (`models/deepseek_v4/attention.py`
    /// `self.n_local_groups = self.n_groups // tp_size`), so a TP size above it leaves 0
    /// and the grouped `wo_a` projection divides by zero (see [`output_groups_violation`]).
    pub output_groups: i64,
}

/// The side name of an aggregated instance: no KV connector, so only the load rules apply.
pub const AGGREGATED: &str = "aggregated";

/// Violations of one instance's layout (`side`: `prefill`, `decode` or `aggregated`), in the
/// order vLLM checks them while loading (the golden test below holds it to vLLM's).
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
            when: Stage::Planning,
            surfaced: None,
            consequence: "",
        });
        return out;
    }
    // vLLM's order: the config checks (`verify_with_parallel_config`: heads by TP, expert
    // parallel, pipeline), then building the model (KV heads by TP: `QKVParallelLinear`).
    let (heads, kv): (Vec<Violation>, Vec<Violation>) = tp_load_violations(&m.shape, l.tp, side)
        .into_iter()
        .partition(|v| v.code == "attention_heads_not_divisible");
    out.extend(heads);
    if l.ep && m.num_experts <= 0 {
        out.push(Violation {
            code: "expert_parallel_needs_experts",
            side,
            message: "Number of experts in the model must be greater than 0 when expert \
                      parallelism is enabled."
                .into(),
            hint: format!("{side}: drop ep (this model has no routed experts)"),
            error: VllmError::ValueError,
            when: Stage::ModelLoad,
            surfaced: None,
            consequence: "",
        });
    }
    if l.pp > 1 && !m.supports_pp {
        out.push(Violation {
            code: "pipeline_unsupported",
            side,
            message: "Pipeline parallelism is not supported for this model. Supported models \
                      implement the `SupportsPP` interface."
                .into(),
            hint: format!("{side}: use pp=1 for this model (more tensor or data parallel)"),
            error: VllmError::NotImplementedError,
            when: Stage::ModelLoad,
            surfaced: None,
            consequence: "",
        });
    }
    out.extend(kv);
    out.extend(output_groups_violation(m, l, side));
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
            when: Stage::Planning,
            surfaced: None,
            consequence: "",
        });
    }
    out
}

/// The connector's refusal of one side's data-parallel or pipeline layout, if any (see the
/// module notes; `other` is the peer side's layout).
fn connector_violation(
    l: &Layout,
    other: &Layout,
    side: &'static str,
    profile: &ConnectorProfile,
) -> Option<Violation> {
    let name = profile.connector;
    let kv = profile.kv_connector();
    if let Some((_, dp_dial)) = profile.rules.moriio_dials() {
        // No MoRIIO release reads the pipeline rank (0.14.0-0.33.0): every stage's worker
        // binds `side_channel_port` + `get_port_offset(dp_rank, tp_rank)` (0.33.0
        // `moriio_common.py`), so the stages of one instance bind the same ports: the later
        // stage's listener never binds and `register_kv_caches` waits for it (the flow data's
        // engine-start hang).
        if l.pp > 1 {
            return Some(Violation {
                code: "connector_pipeline_unsupported",
                side,
                message: format!(
                    "{kv} addresses KV ranks by (dp_rank, tp_rank) only: the {} pipeline stages \
                     of a {side} instance bind the same handshake and notify ports, so a later \
                     stage's listener never binds and the engine start waits for it forever \
                     (vLLM raises nothing)",
                    l.pp
                ),
                hint: format!(
                    "{side}: use pp=1 with {name} (more tensor or data parallel), or nixl"
                ),
                error: VllmError::None,
                when: Stage::EngineStart,
                surfaced: None,
                consequence: consequence::HANG,
            });
        }
        if !moriio_dp_ports_match(dp_dial, l.dp, l.tp) {
            return Some(Violation {
                code: "moriio_dp_ports_collide",
                side,
                message: format!(
                    "{kv} binds handshake_port + dp_rank + tp_rank on every rank of a {side} \
                     instance with dp={} and tp={}: two ranks bind one port, or a peer's dial \
                     reaches a port no rank bound",
                    l.dp, l.tp
                ),
                hint: format!(
                    "{side}: with {name}, data-parallel ranks of tp=1 ({}) or dp=1",
                    Layout {
                        tp: 1,
                        dp: l.dp * l.tp,
                        ..*l
                    }
                ),
                error: VllmError::None,
                // Two ranks on one port: the second's handshake listener never binds and
                // `register_kv_caches` waits for it (`ready_event.wait()`, 0.15.1
                // `moriio_connector.py:1172`): the engine never starts. A dial to a port
                // nobody bound waits in the handshake instead; both hang.
                when: if moriio_ports_collide(l) {
                    Stage::EngineStart
                } else {
                    Stage::Handshake
                },
                surfaced: None,
                consequence: consequence::HANG,
            });
        }
        if let Some(v) = moriio_dp_read_violation(l, side, profile) {
            return Some(v);
        }
        return None;
    }
    let pp = profile.rules.nixl_pp()?;
    let role = profile.object().role(side);
    if let Err(e) = nixl_pp_check(pp, role, l.pp) {
        return Some(Violation {
            code: "connector_pipeline_unsupported",
            side,
            message: e.message().to_string(),
            hint: format!("{side}: use pp=1 with {name}"),
            error: VllmError::NotImplementedError,
            when: Stage::EngineStart,
            surfaced: None,
            consequence: "",
        });
    }
    if pp == NixlPp::EngineStartRefuses && l.pp > 1 {
        return Some(Violation::new(
            "connector_pipeline_unsupported",
            side,
            connector::NIXL_PP_ENGINE_START.into(),
            format!(
                "{side}: use pp=1 with {name} on this vLLM (the engine core hands NIXL \
                 handshake metadata of every pipeline stage, which NIXL takes from vLLM \
                 0.26.0), or vLLM 0.26.0 or newer"
            ),
            VllmError::ValueError,
            Stage::EngineStart,
        ));
    }
    let (no_stages, both) = (pp == NixlPp::TpRanksOnly, other.pp > 1);
    if l.pp > 1 && (no_stages || both) {
        let why = if no_stages {
            "this release's NIXL handshake keys metadata by TP rank alone (no pipeline size \
             before vLLM 0.26.0): the stages' metadata collide"
                .to_string()
        } else {
            "NIXL maps a pipeline stage's layers onto a one-stage peer; stages on both sides \
             are not established"
                .to_string()
        };
        return Some(Violation {
            code: "connector_pipeline_unsupported",
            side,
            message: format!("{side} instance with pp={}: {why}", l.pp),
            hint: format!("{side}: use pp=1 (pipeline stages on one side of the pair at most)"),
            error: VllmError::None,
            when: Stage::Serving,
            surfaced: None,
            consequence: consequence::WRONG_BYTES,
        });
    }
    None
}

/// Two ranks of one instance bind one MoRIIO port: every release binds
/// `handshake_port + dp_rank + tp_rank` (`get_port_offset(dp_rank, tp_rank)`).
fn moriio_ports_collide(l: &Layout) -> bool {
    l.dp > 1 && l.tp > 1
}

/// How soon a violation reaches the user: vLLM's stages in order, a silent hang in the
/// handshake that waits for it, pdtp's own limits last.
fn surfaces(v: &Violation) -> u8 {
    match v.when {
        Stage::ModelLoad => 0,
        Stage::EngineStart => 1,
        Stage::Handshake => 2,
        Stage::Serving if v.consequence == consequence::HANG => 2,
        Stage::FirstTransfer => 3,
        Stage::Serving => 4,
        Stage::Planning => 5,
    }
}

/// MoRIIO READ before 0.27.0 reads every request from prefill DP rank 0's memory
/// registration (`DpRead::RankZero`) and releases only the rank it read: a prefill instance
/// with DP > 1 serves its DP ranks > 0's requests with DP rank 0's bytes and never frees their
/// blocks. vLLM raises nothing.
fn moriio_dp_read_violation(
    l: &Layout,
    side: &'static str,
    profile: &ConnectorProfile,
) -> Option<Violation> {
    let Rules::MoriioRead(r) = profile.rules else {
        return None;
    };
    if side != "prefill" || l.dp <= 1 || r.dp_read != DpRead::RankZero {
        return None;
    }
    Some(Violation {
        consequence: consequence::WRONG_BYTES,
        ..Violation::new(
            "moriio_reads_dp_rank_zero",
            side,
            format!(
                "prefill instance with dp={}: MoRIIO READ before vLLM 0.27.0 reads every \
                 request from prefill DP rank 0's memory registration, so a request prefilled \
                 on DP ranks 1..{} is decoded from DP rank 0's blocks (wrong KV) and its own \
                 blocks are never released (vLLM raises nothing)",
                l.dp,
                l.dp - 1
            ),
            "prefill: use dp=1 with moriio on this vLLM (more instances instead of DP ranks), \
             moriio-write, or vLLM 0.27.0 or newer"
                .into(),
            VllmError::None,
            Stage::Serving,
        )
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
    for (l, other, side) in [(prefill, decode, "prefill"), (decode, prefill, "decode")] {
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
        extra.extend(connector_violation(l, other, side, profile));
    }
    // Load rules come first (vLLM refuses the instance before any transfer), then the pair's.
    let (load, pair): (Vec<Violation>, Vec<Violation>) = report
        .violations
        .drain(..tp_codes)
        .partition(|v| v.side != "pair");
    report.violations = load;
    // The connector's violations in the order they reach the user (a TP handshake that
    // hangs comes before a DP read that decodes wrong bytes); stable within a stage.
    let mut connector: Vec<Violation> = extra.into_iter().chain(pair).collect();
    connector.sort_by_key(surfaces);
    report.violations.extend(connector);
    if !report.ok() {
        report.warnings.clear();
    }
    // MoRIIO's round-robin read needs a one-DP-rank prefill (`remote_dp_size == 1`).
    if prefill.dp > 1 {
        report
            .warnings
            .retain(|w| w.consequence != consequence::ROUND_ROBIN);
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
        && loads(m, prefill)
        && loads(m, decode)
        && connector_violation(prefill, decode, "prefill", profile).is_none()
        && connector_violation(decode, prefill, "decode", profile).is_none()
}

/// Whether one instance of `l` loads (the fast form of `load_violations(..).is_empty()`).
pub fn loads(m: &LayoutModel, l: &Layout) -> bool {
    l.tp >= 1
        && l.pp >= 1
        && l.dp >= 1
        && crate::check::load_ok(&m.shape, l.tp)
        && (l.pp == 1 || (m.supports_pp && l.pp <= m.num_layers))
        && (!l.ep || m.num_experts > 0)
        && (m.output_groups <= 0 || l.tp <= m.output_groups)
}

/// vLLM 0.33's refusal of a DeepSeek-V4 instance whose TP size exceeds `o_groups` (8 Flash,
/// 16 Pro). `DeepseekV4Attention.__init__` (`models/deepseek_v4/attention.py:226`) sets
/// `n_local_groups = o_groups // tp_size` = 0 and `wo_a.bmm_batch_size = 0` (line 280) without
/// checking; the FP8 block-scaled `wo_a` is then regrouped for DeepGEMM's grouped BMM in
/// `process_weights_after_loading` (`model_executor/kernels/linear/scaled_mm/deep_gemm.py:92`
/// -> `layers/quantization/utils/fp8_utils.py:1222`, `r = wq.size(0) // g`), which raises
/// `ZeroDivisionError: integer division or modulo by zero` while the model loads, on every
/// Hopper/Blackwell GPU (DeepGEMM's). Without DeepGEMM (ROCm) the same 0 groups fail at the
/// engine's first forward (the profile run): `rocm_inv_rope_einsum` reshapes the output to
/// `[tokens, 0, -1]` (`v1/attention/ops/rocm_aiter_mla_sparse.py:1783`), a `RuntimeError`.
/// Data and expert parallel add nothing: each DP rank is its own TP group, and the default
/// MoE backend (`moe_backend="auto"`: `_init_fused_moe_experts`, `nvidia/model.py:400`)
/// asserts nothing of EP (only `deep_gemm_mega_moe` asserts experts divisible by EP).
pub fn output_groups_violation(
    m: &LayoutModel,
    l: &Layout,
    side: &'static str,
) -> Option<Violation> {
    if m.output_groups <= 0 || l.tp <= m.output_groups {
        return None;
    }
    let g = m.output_groups;
    Some(Violation {
        code: "tp_exceeds_output_groups",
        side,
        message: "integer division or modulo by zero".into(),
        hint: format!(
            "{side}: use tp <= {g}: DeepSeek-V4 has {g} output-projection groups (o_groups) and \
             vLLM gives each TP rank o_groups // tp of them (0 at tp {}); scale out with data \
             parallel (tp{g}dp{}ep) instead",
            l.tp,
            (l.tp / g).max(2)
        ),
        error: VllmError::ZeroDivisionError,
        when: Stage::ModelLoad,
        surfaced: None,
        consequence: "",
    })
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
                hybrid: false,
                sliding_window: false,
                mamba_groups: None,
            },
            num_layers: 61,
            num_experts: 256,
            supports_pp: true,
            output_groups: 0,
        }
    }

    fn dense() -> LayoutModel {
        LayoutModel {
            shape: Shape {
                num_attention_heads: 64,
                num_kv_heads: 8,
                is_mla: false,
                hybrid: false,
                sliding_window: false,
                mamba_groups: None,
            },
            num_layers: 80,
            num_experts: 0,
            supports_pp: true,
            output_groups: 0,
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
        let dp = |dp, tp| Layout {
            dp,
            ep: true,
            ..Layout::tp(tp)
        };
        for conn in [moriio, nixl] {
            assert_eq!(
                pair_ok(&moe(), &dp(4, 1), &dp(8, 1), conn, None),
                crate::check::pair_ok(&moe().shape, 1, 1, conn, None)
            );
        }
        // MoRIIO binds dp_rank + tp_rank: DP > 1 with TP > 1 puts two ranks on one port.
        let r = pair_report(&moe(), &dp(2, 4), &dp(8, 1), moriio, None);
        assert_eq!(r.violations[0].code, "moriio_dp_ports_collide");
        assert!(
            r.violations[0].hint.contains("tp1·dp8·ep")
                || r.violations[0].hint.contains("tp1dp8ep")
        );
        assert!(pair_ok(&moe(), &dp(2, 4), &dp(8, 1), nixl, None));
        // NIXL: stages on one side from 0.26.0; before, its handshake knows no stages.
        let old = profile("nixl@0.25.0").unwrap();
        assert!(!pair_ok(&dense(), &pp, &Layout::tp(8), old, None));
        assert!(!pair_ok(&dense(), &Layout::tp(8), &pp, old, None));
        assert!(pair_ok(&dense(), &Layout::tp(8), &pp, nixl, None));
        assert!(!pair_ok(&dense(), &pp, &pp, nixl, None));
    }

    #[test]
    fn mamba2_groups_that_tp_does_not_divide_fail_at_model_load() {
        // vLLM 0.33.0 mamba_mixer2.py:320: `(n_groups % tp) == 0 or n_groups == 1`.
        let mut shape = moe().shape;
        for (groups, tp, refused) in [
            (Some(8), 16, true),
            (Some(8), 3, true),
            (Some(8), 8, false),
            (Some(8), 4, false),
            (Some(1), 16, false),
            (None, 16, false),
        ] {
            shape.mamba_groups = groups;
            let l = Layout {
                tp,
                pp: 1,
                dp: 1,
                ep: false,
            };
            let m = LayoutModel { shape, ..moe() };
            let got: Vec<Violation> = load_violations(&m, &l, "decode", profile("nixl").unwrap())
                .into_iter()
                .filter(|v| v.code == "mamba_groups_not_divisible")
                .collect();
            assert_eq!(got.len(), usize::from(refused), "groups {groups:?} tp {tp}");
            // The enumeration's fast path agrees with the full rule.
            assert_eq!(
                loads(&m, &l),
                load_violations(&m, &l, "decode", profile("nixl").unwrap()).is_empty()
            );
            for v in got {
                assert_eq!(v.error, VllmError::AssertionError);
                assert_eq!(v.when, Stage::ModelLoad);
                assert!(v.hint.contains("1, 2, 4, 8"), "{}", v.hint);
            }
        }
    }
}

/// The layout rules and layout facts against vLLM's own code, release by release: the
/// `layout` part of `tests/data/golden/index.json` (`tools/vllm_golden.py`) records
/// `get_pp_indices`, `determine_expert_map`, `FusedMoEParallelConfig.make` and
/// `verify_with_parallel_config`'s checks over whole grids; every vector must agree.
#[cfg(test)]
mod golden {
    use super::*;
    use crate::check::Shape;
    use flate2::read::GzDecoder;
    use serde_json::Value;
    use std::collections::{BTreeMap, BTreeSet};
    use std::io::Read;
    use std::path::PathBuf;

    fn dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden")
    }

    /// Each distinct layout file once, with the releases it covers.
    fn files() -> Vec<(String, Value)> {
        let text = std::fs::read_to_string(dir().join("index.json")).expect("index.json");
        let index: BTreeMap<String, BTreeMap<String, Option<String>>> =
            serde_json::from_str(&text).expect("index");
        let names: BTreeSet<String> = index["layout"].values().flatten().cloned().collect();
        assert!(names.len() >= 5, "{names:?}");
        names
            .into_iter()
            .map(|n| {
                let mut text = String::new();
                GzDecoder::new(std::fs::File::open(dir().join(&n)).expect("golden file"))
                    .read_to_string(&mut text)
                    .expect("gzip");
                (n, serde_json::from_str(&text).expect("json"))
            })
            .collect()
    }

    /// A grid's recorded outcomes in grid order (run-length codes into `values`).
    fn outcomes<'a>(data: &'a Value, name: &str) -> Vec<&'a Value> {
        let grid = &data[name];
        let values = grid["values"].as_array().expect("values");
        let codes: Vec<i64> = grid["codes"]
            .as_array()
            .expect("codes")
            .iter()
            .map(|x| x.as_i64().expect("int"))
            .collect();
        codes
            .chunks(2)
            .flat_map(|c| std::iter::repeat_n(&values[c[0] as usize], c[1] as usize))
            .collect()
    }

    fn ints(v: &Value) -> Vec<i64> {
        v.as_array()
            .expect("array")
            .iter()
            .map(|x| x.as_i64().expect("int"))
            .collect()
    }

    /// vLLM's message template with `{i}` standing for argument i.
    fn fill(template: &str, args: &[i64]) -> String {
        let mut out = template.to_string();
        for (i, a) in args.iter().enumerate() {
            out = out.replace(&format!("{{{i}}}"), &a.to_string());
        }
        out
    }

    fn tally(bad: &mut Vec<String>, ok: bool, what: impl FnOnce() -> String) -> usize {
        if !ok && bad.len() < 20 {
            bad.push(what());
        }
        1
    }

    #[test]
    fn stage_layers_are_vllms_get_pp_indices() {
        let (mut n, mut bad) = (0, Vec::new());
        for (file, data) in files() {
            let got = outcomes(&data, "pp_indices");
            let (max_pp, max_layers) = (
                data["max_pp"].as_i64().unwrap(),
                data["max_layers"].as_i64().unwrap(),
            );
            let mut i = 0;
            for pp in 1..=max_pp {
                for layers in 1..=max_layers {
                    let stages = Layout {
                        pp,
                        ..Layout::tp(1)
                    }
                    .stage_layers(layers);
                    for r in 0..pp {
                        let want = got[i];
                        i += 1;
                        let mine = Value::from(vec![stages[r as usize].0, stages[r as usize].1]);
                        n += tally(&mut bad, want[0] == "ok" && want[1] == mine, || {
                            format!(
                                "{file}: get_pp_indices({layers}, {r}, {pp}) = {want}, pdtp {mine}"
                            )
                        });
                    }
                }
            }
            assert_eq!(i, got.len(), "{file}");
        }
        assert!(
            bad.is_empty() && n > 50_000,
            "{n} vectors, disagreements:\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn load_rules_are_vllms_config_checks() {
        const CONFIG: [&str; 3] = [
            "attention_heads_not_divisible",
            "expert_parallel_needs_experts",
            "pipeline_unsupported",
        ];
        let nixl = crate::connector::profile("nixl").unwrap();
        let (mut n, mut bad, mut errors) = (0, Vec::new(), 0);
        for (file, data) in files() {
            let got = outcomes(&data, "config_check");
            let mut i = 0;
            for a in ints(&data["verify_heads"]) {
                for tp in 1..=8 {
                    for pp in [1, 2, 3] {
                        for ep in [false, true] {
                            for e in [0, 8] {
                                for sp in [false, true] {
                                    let want = got[i];
                                    i += 1;
                                    let m = LayoutModel {
                                        shape: Shape {
                                            num_attention_heads: a,
                                            num_kv_heads: a,
                                            is_mla: false,
                                            hybrid: false,
                                            sliding_window: false,
                                            mamba_groups: None,
                                        },
                                        num_layers: 64,
                                        num_experts: e,
                                        supports_pp: sp,
                                        output_groups: 0,
                                    };
                                    let l = Layout { tp, pp, dp: 1, ep };
                                    let first = load_violations(&m, &l, "prefill", nixl)
                                        .into_iter()
                                        .find(|v| CONFIG.contains(&v.code));
                                    let args = [a, tp, pp, ep as i64, e, sp as i64];
                                    let class = want[0].as_str().expect("class");
                                    let ok = match (&first, class) {
                                        (None, "ok") => true,
                                        (Some(v), c) => {
                                            errors += 1;
                                            v.error.name() == c
                                                && v.message
                                                    == fill(want[1].as_str().unwrap_or(""), &args)
                                        }
                                        _ => false,
                                    };
                                    n += tally(&mut bad, ok, || {
                                        format!(
                                            "{file}: config_check{args:?} = {want}, pdtp {first:?}"
                                        )
                                    });
                                }
                            }
                        }
                    }
                }
            }
            assert_eq!(i, got.len(), "{file}");
        }
        assert!(bad.is_empty(), "disagreements:\n{}", bad.join("\n"));
        assert!(n > 2_000 && errors > 1_000, "{n} vectors, {errors} errors");
    }

    #[test]
    fn expert_parallel_sizes_are_vllms_moe_config() {
        let (mut n, mut bad) = (0, Vec::new());
        for (file, data) in files() {
            let got = outcomes(&data, "moe_parallel");
            let max = data["moe_max"].as_i64().unwrap();
            let mut i = 0;
            for ep in [false, true] {
                for tp in 1..=max {
                    for dp in 1..=max {
                        let l = Layout { tp, pp: 1, dp, ep };
                        for _ in 0..dp * tp {
                            let want = got[i];
                            i += 1;
                            let w = &want[1];
                            let ok = want[0] == "ok"
                                && w[0].as_i64() == Some(l.moe_tp_size())
                                && w[2].as_i64() == Some(if l.uses_ep() { l.ep_size() } else { 1 })
                                && w[4].as_bool() == Some(l.uses_ep());
                            n += tally(&mut bad, ok, || format!("{file}: moe({l}) = {want}"));
                        }
                    }
                }
            }
            assert_eq!(i, got.len(), "{file}");
        }
        assert!(
            bad.is_empty() && n > 50_000,
            "{n} vectors, disagreements:\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn experts_per_rank_are_vllms_expert_map() {
        let (mut n, mut bad) = (0, Vec::new());
        for (file, data) in files() {
            let got = outcomes(&data, "expert_map");
            let experts = ints(&data["experts"]);
            let max_ep = data["max_ep"].as_i64().unwrap();
            let mut i = 0;
            for _strategy in ["linear", "round_robin"] {
                for &e in &experts {
                    for ep in 1..=max_ep {
                        // An EP group of `ep` ranks: tp × dp = ep with expert parallel on.
                        let l = Layout {
                            tp: 1,
                            pp: 1,
                            dp: ep,
                            ep: true,
                        };
                        for r in 0..ep {
                            let want = got[i];
                            i += 1;
                            if want[1].is_null() {
                                continue; // the release has no such placement strategy
                            }
                            let mine = l.experts_on_rank(e, r);
                            n += tally(&mut bad, want[1][0].as_i64() == Some(mine), || {
                                format!("{file}: expert_map({e}, ep={ep}, rank {r}) = {want}, pdtp {mine}")
                            });
                        }
                    }
                }
            }
            assert_eq!(i, got.len(), "{file}");
        }
        assert!(
            bad.is_empty() && n > 50_000,
            "{n} vectors, disagreements:\n{}",
            bad.join("\n")
        );
    }
}
