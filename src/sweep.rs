//! Budget sweeps: the best valid plan for many GPU budgets of one scenario at once.
//!
//! For one (model, GPU, constants, workload, connector, max_tp) the per-side options depend
//! on the TP size only, never on the budget, so they are built once; each budget then picks
//! its best pair with [`best_counts`] (exact, O(log G) per pair). The answer for every budget
//! equals [`crate::plan::enumerate_best`] with `gpus` set to that budget.
//!
//! Alongside it comes the *rule-blind* best: the same search over every pair of usable sides
//! while ignoring the connector's pair rules (size rule, replicated-KV-head guard, acks), i.e.
//! what a planner that does not know vLLM's heterogeneous-TP rules would deploy.

use crate::check::pair_ok;
use crate::plan::{best_counts, side_options_upto, Candidate, Problem, SideOption};

/// One budget's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepPoint {
    /// The best valid plan (None: infeasible at this budget).
    pub best: Option<Candidate>,
    /// The best plan over all pairs of usable sides, valid or not.
    pub rule_blind: Option<Candidate>,
    /// Whether `rule_blind` is a pair the connector accepts.
    pub rule_blind_valid: bool,
}

/// The side options (TP 1..=min(max_tp, largest budget)) and one point per budget, in the
/// order of `budgets`.
#[derive(Debug, Clone, Default)]
pub struct Sweep {
    pub prefill: Vec<SideOption>,
    pub decode: Vec<SideOption>,
    pub points: Vec<SweepPoint>,
}

struct Usable {
    tp: i64,
    units: i64,
}

fn usable(options: &[SideOption]) -> Vec<Usable> {
    options
        .iter()
        .filter(|o| o.usable())
        .map(|o| Usable {
            tp: o.tp,
            units: o.units,
        })
        .collect()
}

/// Best plans for every budget in `budgets`; `pb.gpus` is ignored (each budget replaces it).
pub fn sweep_budgets(pb: &Problem, budgets: &[i64]) -> Sweep {
    let largest = budgets.iter().copied().max().unwrap_or(0);
    let bound = pb.max_tp.min(largest).max(0);
    let prefill = side_options_upto(pb, bound, true);
    let decode = side_options_upto(pb, bound, false);
    let (ps, ds) = (usable(&prefill), usable(&decode));
    // Pair validity, once: ok[i][j] for usable prefill i and usable decode j.
    let ok: Vec<Vec<bool>> = ps
        .iter()
        .map(|p| {
            ds.iter()
                .map(|d| pair_ok(&pb.shape, p.tp, d.tp, pb.profile, pb.max_acks))
                .collect()
        })
        .collect();
    let points = budgets
        .iter()
        .map(|&gpus| {
            let mut best: Option<Candidate> = None;
            let mut blind: Option<(Candidate, bool)> = None;
            let tp_cap = pb.max_tp.min(gpus);
            for (i, p) in ps.iter().enumerate() {
                if p.tp > tp_cap {
                    break; // usable sizes are ascending
                }
                for (j, d) in ds.iter().enumerate() {
                    if d.tp > tp_cap || p.tp + d.tp > gpus {
                        break;
                    }
                    let Some(c) = best_counts(p.tp, p.units, d.tp, d.units, gpus) else {
                        continue;
                    };
                    let valid = ok[i][j];
                    if valid && best.is_none_or(|b| c.better_than(&b)) {
                        best = Some(c);
                    }
                    if blind.is_none_or(|(b, _)| c.better_than(&b)) {
                        blind = Some((c, valid));
                    }
                }
            }
            SweepPoint {
                best,
                rule_blind: blind.map(|(c, _)| c),
                rule_blind_valid: blind.is_some_and(|(_, v)| v),
            }
        })
        .collect();
    Sweep {
        prefill,
        decode,
        points,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Shape;
    use crate::connector::profile;
    use crate::perf::tests::{consts, h100, llama70, workload};
    use crate::perf::{ModelPerf, Workload};
    use crate::plan::{best_of, build_table, enumerate_best};

    fn problem(model: ModelPerf, connector: &str, max_tp: i64, w: Workload) -> Problem<'static> {
        Problem {
            model,
            shape: Shape {
                num_attention_heads: model.num_attention_heads as i64,
                num_kv_heads: model.num_kv_heads,
                is_mla: model.is_mla,
            },
            gpu: h100(),
            constants: consts(),
            workload: w,
            profile: profile(connector).unwrap(),
            gpus: 0,
            max_tp,
            max_acks: None,
            gpu_memory_utilization: 0.9,
        }
    }

    /// A small GQA model with 4 KV heads (so MoRIIO's replicated-head guard bites) and
    /// one with a single KV head (MQA).
    fn small(kv_heads: i64) -> ModelPerf {
        ModelPerf {
            num_layers: 32.0,
            num_attention_layers: 32.0,
            hidden_size: 4096.0,
            num_attention_heads: 32.0,
            num_kv_heads: kv_heads,
            head_dim: 128.0,
            weight_bytes: 8e9 * 2.0,
            active_params: 8e9,
            ..llama70()
        }
    }

    fn mla() -> ModelPerf {
        ModelPerf {
            is_mla: true,
            num_kv_heads: 1,
            kv_lora_rank: 512.0,
            qk_rope_head_dim: 64.0,
            ..small(1)
        }
    }

    fn cases() -> Vec<Problem<'static>> {
        let loose = Workload {
            ttft: None,
            tpot: None,
            ..workload()
        };
        let mut out = Vec::new();
        for connector in ["moriio", "nixl", "nixl-legacy"] {
            for max_tp in [1, 4, 8, 16] {
                out.push(problem(llama70(), connector, max_tp, workload()));
                out.push(problem(small(4), connector, max_tp, workload()));
                out.push(problem(small(1), connector, max_tp, loose));
                out.push(problem(mla(), connector, max_tp, workload()));
            }
        }
        let mut acks = problem(small(8), "moriio", 8, loose);
        acks.max_acks = Some(2);
        out.push(acks);
        out
    }

    #[test]
    fn every_budget_equals_the_oracle() {
        let budgets: Vec<i64> = (0..=96).chain([127, 200, 256, 511, 512]).collect();
        for template in cases() {
            let sweep = sweep_budgets(&template, &budgets);
            assert_eq!(sweep.points.len(), budgets.len());
            for (&gpus, point) in budgets.iter().zip(&sweep.points) {
                let pb = Problem { gpus, ..template };
                let oracle = enumerate_best(&pb);
                assert_eq!(point.best, oracle, "gpus={gpus} {template:?}");
                assert_eq!(point.best, best_of(&build_table(&pb)), "gpus={gpus}");
            }
        }
    }

    #[test]
    fn rule_blind_is_the_better_of_valid_and_rejected() {
        let budgets: Vec<i64> = (1..=64).collect();
        for template in cases() {
            let sweep = sweep_budgets(&template, &budgets);
            for (&gpus, point) in budgets.iter().zip(&sweep.points) {
                let table = build_table(&Problem { gpus, ..template });
                let expected = match (best_of(&table), table.best_rejected) {
                    (Some(v), Some(r)) if r.better_than(&v) => Some((r, false)),
                    (Some(v), _) => Some((v, true)),
                    (None, Some(r)) => Some((r, false)),
                    (None, None) => None,
                };
                assert_eq!(point.rule_blind, expected.map(|e| e.0), "gpus={gpus}");
                assert_eq!(point.rule_blind_valid, expected.is_some_and(|e| e.1));
                if let (Some(b), Some(v)) = (point.rule_blind, point.best) {
                    assert!(b.value >= v.value);
                }
            }
        }
    }

    #[test]
    fn moriio_rules_cost_something_somewhere() {
        // 4 KV heads under MoRIIO: P != D needs min(P, D) >= 4, so some budget's rule-blind
        // optimum is a pair vLLM rejects (long prompts: decode wants more KV memory than
        // prefill's TP1).
        let long = Workload {
            isl: 16384.0,
            osl: 1024.0,
            ..workload()
        };
        let sweep = sweep_budgets(
            &problem(small(4), "moriio", 8, long),
            &(1..=64).collect::<Vec<_>>(),
        );
        assert!(sweep
            .points
            .iter()
            .any(|p| p.rule_blind.is_some() && !p.rule_blind_valid));
    }

    #[test]
    fn side_options_cover_the_largest_budget_only() {
        let sweep = sweep_budgets(&problem(llama70(), "moriio", 8, workload()), &[3, 5]);
        assert_eq!(sweep.prefill.len(), 5);
        assert_eq!(sweep.decode.len(), 5);
        assert!(
            sweep_budgets(&problem(llama70(), "moriio", 8, workload()), &[])
                .points
                .is_empty()
        );
    }
}
